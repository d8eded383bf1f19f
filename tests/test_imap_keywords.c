/*
 * test_imap_keywords.c -- the keyword set of a selected mailbox (imapd/imap_keywords.c): the
 * names SELECT's FLAGS announces, grown by every message's keyword list. A lookup walked the
 * whole set, so a mailbox whose messages carry thousands of distinct keywords made SELECT
 * quadratic (10,000 messages with 10 of 10,000 keywords each: 2.8 s cold and 0.37 s warm,
 * Dovecot 46 ms; issue 13). The set now has a hash table; these tests count the names compared
 * as text (the view's keyword_compares), never time anything.
 */
#include "../imapd/buf.h"
#include "../imapd/imap_session.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KW_MANY 20000

/* KW_MANY distinct keywords, added ten to a list as messages carry them, then every one again
 * in another case: the set holds each once, in the order first seen, with its first spelling,
 * and a lookup compares about one name, not the set (walking it compared ~KW_MANY^2 / 2). */
static void test_many_keywords_one_compare_each(void)
{
    struct imap_view v = {0};
    char list[10 * 16];
    for (int i = 0; i < KW_MANY; i += 10) {
        size_t at = 0;
        for (int j = i; j < i + 10; j++) {
            at += (size_t)snprintf(list + at, sizeof list - at, "%sTag%05d", j > i ? " " : "", j);
        }
        CHECK_EQ_INT(imap_view_keywords_add(&v, list), 1);
    }
    CHECK_EQ_INT(v.keyword_count, KW_MANY);
    for (int i = 0; i < KW_MANY; i++) {
        char again[16];
        snprintf(again, sizeof again, "tAG%05d", i);
        CHECK_EQ_INT(imap_view_keywords_add(&v, again), 0);
    }
    CHECK_EQ_INT(v.keyword_count, KW_MANY);
    size_t compared = v.keyword_compares;
    /* each of the KW_MANY second looks compares its own name; a new name only meets another
     * on a 32-bit hash collision */
    CHECK(compared >= (size_t)KW_MANY);
    CHECK(compared < (size_t)2 * KW_MANY);
    for (int i = 0; i < KW_MANY; i += 997) {
        char want[16];
        snprintf(want, sizeof want, "Tag%05d", i);
        CHECK(strcmp(v.keyword_names[i], want) == 0);
    }
    imap_view_keywords_free(&v);
    CHECK(v.keyword_names == NULL && v.keyword_slots == NULL);
    CHECK_EQ_INT(v.keyword_count, 0);
    CHECK_EQ_INT(v.keyword_slot_count, 0);
}

/* Names that differ only in case are one keyword (RFC 3501 2.3.2), names that share a prefix
 * are not, a list's repeats and extra spaces add nothing, and a name longer than the hash's
 * stack buffer (256 bytes) is found again in another case. */
static void test_case_prefix_and_long_names(void)
{
    struct imap_view v = {0};
    CHECK_EQ_INT(imap_view_keywords_add(&v, "$Label1 $label1 $LABEL1"), 1);
    CHECK_EQ_INT(v.keyword_count, 1);
    CHECK_EQ_INT(imap_view_keywords_add(&v, "$Label"), 1);
    CHECK_EQ_INT(imap_view_keywords_add(&v, "$Label10  $label1"), 1);
    CHECK_EQ_INT(v.keyword_count, 3);
    CHECK_EQ_INT(imap_view_keywords_add(&v, ""), 0);
    CHECK_EQ_INT(imap_view_keywords_add(&v, NULL), 0);

    char upper[600], lower[600];
    memset(upper, 'K', sizeof upper - 1);
    upper[sizeof upper - 1] = '\0';
    memset(lower, 'k', sizeof lower - 1);
    lower[sizeof lower - 1] = '\0';
    CHECK_EQ_INT(imap_view_keywords_add(&v, upper), 1);
    CHECK_EQ_INT(imap_view_keywords_add(&v, lower), 0);
    lower[sizeof lower - 2] = 'j';
    CHECK_EQ_INT(imap_view_keywords_add(&v, lower), 1);
    CHECK_EQ_INT(v.keyword_count, 5);
    CHECK(strcmp(v.keyword_names[0], "$Label1") == 0);
    CHECK(strcmp(v.keyword_names[3], upper) == 0);

    struct buf out = {0};
    imap_flags_announce(&v, &out);
    CHECK(!out.oom);
    CHECK(strncmp(out.data,
                  "* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Label1 $Label $Label10 ",
                  strlen("* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Label1 "
                         "$Label $Label10 ")) == 0);
    buf_free(&out);
    imap_view_keywords_free(&v);
}

/* The table grows while names are added: every name stays findable across each doubling, and
 * the table is never more than half full. */
static void test_growth_keeps_every_name(void)
{
    struct imap_view v = {0};
    for (int i = 0; i < 5000; i++) {
        char kw[16];
        snprintf(kw, sizeof kw, "k%d", i);
        CHECK_EQ_INT(imap_view_keywords_add(&v, kw), 1);
        CHECK(v.keyword_count * 2 <= v.keyword_slot_count);
        if (i % 499 == 0) {
            for (int j = 0; j <= i; j += 7) {
                snprintf(kw, sizeof kw, "K%d", j);
                CHECK_EQ_INT(imap_view_keywords_add(&v, kw), 0);
            }
        }
    }
    CHECK_EQ_INT(v.keyword_count, 5000);
    imap_view_keywords_free(&v);
}

int main(void)
{
    TEST(test_many_keywords_one_compare_each);
    TEST(test_case_prefix_and_long_names);
    TEST(test_growth_keeps_every_name);
    return th_summary();
}
