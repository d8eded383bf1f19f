/*
 * test_index_later.c -- appends whose full-text rows wait for the catch-up
 * (mv_store_index_later; issue 13: at 10 IMAP clients an APPEND's durable commit wrote ~45
 * WAL frames, two thirds of them its trigram rows, and the tail of its fsync set STORE's and
 * APPEND's p99).
 *
 *   - With the handle set, each append is in the backlog without a full-text row (fts's
 *     count does not move), the searches find the messages all the same (words, a body
 *     string, a string under three characters, one message by a word only it has), and
 *     the append writes fewer WAL frames than the same message appended by a handle without
 *     it (each counted from a WAL that a checkpoint had emptied).
 *   - The catch-up builds the rows: the same answers from the index alone, no backlog left,
 *     mv_store_check finds nothing.
 *   - Giving way: with the purge's give-way function saying yes at once, a call builds one
 *     body and returns MV_OK with the rest counted; saying yes at its fourth question, four;
 *     the check is clean after each (rows and backlog agree); without it, all of them.
 *   - Off again, an append builds its row itself; NULL and a read-only handle are refused.
 *   - A whole drain of the sealed queue on a handle set leaves its rows to the backlog too
 *     (its read-ahead parses without the texts), with the same answers before the catch-up
 *     and after.
 * Nothing depends on timing or a random byte.
 */
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IL_PW   "index later password"
#define IL_MAIL 12

/* Message i: a header and ~6 KB of text with words of its own, so its trigram rows take
 * several pages, and the words every message shares. */
static char *il_message(int i, size_t *len)
{
    size_t cap = 16384;
    char *m = malloc(cap);
    if (m == NULL) {
        return NULL;
    }
    size_t n = (size_t)snprintf(m, cap,
                                "From: sender%d@example.net\r\nTo: later@example.org\r\n"
                                "Subject: later %d\r\nMessage-ID: <later%d@example.net>\r\n\r\n"
                                "The quick brown fox MARKER-later-%04d\r\n",
                                i, i, i, i);
    for (int line = 0; line < 120 && n + 80 < cap; line++) {
        n += (size_t)snprintf(m + n, cap - n, "word%dx%d river%d stone%d meadow lantern\r\n", i,
                              line, line * 7 + i, line * 13 + i);
    }
    *len = n;
    return m;
}

/* The searches' answers are right for count messages appended. */
static int il_searches_right(mv_store *s, int count)
{
    struct mv_search_query q[5];
    for (int i = 0; i < 5; i++) {
        q[i] = (struct mv_search_query)MV_SEARCH_QUERY_INIT;
    }
    q[0].text = "MARKER-later meadow";
    q[1].body_contains = "quick brown";
    q[2].text_contains = "fox";
    q[3].body_contains = "ox";
    q[4].body_contains = "word3x117 ";
    const int want[5] = {count, count, count, count, count > 3 ? 1 : 0};
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        int got = tu_search_count(s, &q[i]);
        if (got != want[i]) {
            fprintf(stderr, "  search %d: %d results, expected %d\n", i, got, want[i]);
            ok = 0;
        }
    }
    return ok;
}

static long long il_rows(mv_store *s)
{
    return tu_int(mv_store_db(s), "SELECT count(*) FROM fts");
}

/* Appends message i to INBOX from a WAL a checkpoint emptied; the WAL frames it wrote, or -1. */
static long long il_append_frames(mv_store *s, int i)
{
    int64_t log = 0, done = 0;
    if (mv_store_checkpoint(s, &log, &done) != MV_OK || log != done) {
        fprintf(stderr, "  checkpoint before: %s\n", mv_store_errmsg(s));
        return -1;
    }
    size_t len = 0;
    char *m = il_message(i, &len);
    int rc = m != NULL ? mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL) : MV_ENOMEM;
    free(m);
    if (rc != MV_OK || mv_store_checkpoint(s, &log, &done) != MV_OK) {
        fprintf(stderr, "  append %d: %s\n", i, mv_store_errmsg(s));
        return -1;
    }
    return log;
}

static void test_appends_wait_for_the_catch_up(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("later", IL_PW, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    /* the first append of each kind sets up what later ones find (mailbox rows, roots) */
    long long warm = il_append_frames(s, 0);
    long long indexed = il_append_frames(s, 1);
    CHECK(warm > 0 && indexed > 0);
    CHECK_EQ_INT(il_rows(s), 2);

    CHECK_EQ_INT(mv_store_index_later(s, 1), MV_OK);
    long long later = 0;
    for (int i = 2; i < IL_MAIL; i++) {
        long long frames = il_append_frames(s, i);
        CHECK(frames > 0);
        later = i == 2 ? frames : later;
    }
    fprintf(stderr, "  WAL frames of one append: %lld with its row, %lld without\n", indexed,
            later);
    CHECK(later > 0 && later + 4 <= indexed); /* the row's pages (22 and 15 when written) */
    CHECK_EQ_INT(il_rows(s), 2);
    CHECK_EQ_INT(tu_fts_backlog(s), IL_MAIL - 2);
    uint64_t count = 0;
    CHECK_EQ_INT(mv_store_index_backlog_count(s, &count), MV_OK);
    CHECK_EQ_INT(count, IL_MAIL - 2);
    CHECK(il_searches_right(s, IL_MAIL)); /* the backlog's bodies read */
    CHECK(tu_check_clean(s));

    uint64_t left = 99;
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    CHECK_EQ_INT(il_rows(s), IL_MAIL);
    CHECK(il_searches_right(s, IL_MAIL)); /* the index alone */
    CHECK(tu_check_clean(s));

    /* off again: the row comes with the append */
    CHECK_EQ_INT(mv_store_index_later(s, 0), MV_OK);
    CHECK(il_append_frames(s, IL_MAIL) > 0);
    CHECK_EQ_INT(il_rows(s), IL_MAIL + 1);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    CHECK(il_searches_right(s, IL_MAIL + 1));

    CHECK_EQ_INT(mv_store_index_later(NULL, 1), MV_EINVAL);
    mv_store_close(&s);
}

struct il_way {
    int asked;
    int yes_at; /* says yes from this question on (1: at once) */
};

static int il_give_way(void *arg)
{
    struct il_way *w = arg;
    return ++w->asked >= w->yes_at;
}

static void test_catch_up_gives_way(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("giveway", IL_PW, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    CHECK_EQ_INT(mv_store_index_later(s, 1), MV_OK);
    for (int i = 0; i < IL_MAIL; i++) {
        size_t len = 0;
        char *m = il_message(i, &len);
        CHECK(m != NULL && mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL) == MV_OK);
        free(m);
    }
    CHECK_EQ_INT(tu_fts_backlog(s), IL_MAIL);

    /* yes at once: one body (asked after it), the rest waits */
    struct il_way way = {0, 1};
    mv_store_purge_give_way(s, il_give_way, &way);
    uint64_t left = 0;
    CHECK_EQ_INT(mv_store_index_backlog(s, 32, &left), MV_OK);
    CHECK_EQ_INT(way.asked, 1);
    CHECK_EQ_INT(il_rows(s), 1);
    CHECK_EQ_INT(left, IL_MAIL - 1);
    CHECK_EQ_INT(tu_fts_backlog(s), IL_MAIL - 1);
    CHECK(tu_check_clean(s));
    CHECK(il_searches_right(s, IL_MAIL));

    /* yes at the fourth question: four more; max 0 (all, in batches) stops there too */
    way = (struct il_way){0, 4};
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(way.asked, 4);
    CHECK_EQ_INT(il_rows(s), 5);
    CHECK_EQ_INT(left, IL_MAIL - 5);
    CHECK(tu_check_clean(s));

    /* never: the rest, asked after each body but the last */
    way = (struct il_way){0, 1000};
    CHECK_EQ_INT(mv_store_index_backlog(s, 32, &left), MV_OK);
    CHECK_EQ_INT(way.asked, IL_MAIL - 5 - 1);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(il_rows(s), IL_MAIL);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    mv_store_purge_give_way(s, NULL, NULL);
    CHECK(tu_check_clean(s));
    CHECK(il_searches_right(s, IL_MAIL));
    mv_store_close(&s);

    /* a read-only handle appends nothing: refused */
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    o.flags = MV_STORE_READONLY;
    mv_store *r = NULL;
    char err[256];
    CHECK_EQ_INT(
        mv_store_open("giveway@example.org", IL_PW, strlen(IL_PW), &o, &r, err, sizeof err), MV_OK);
    if (r != NULL) {
        CHECK_EQ_INT(mv_store_index_later(r, 1), MV_EINVAL);
        mv_store_close(&r);
    }
}

/* A drain of the sealed queue on a handle set by mv_store_index_later leaves the rows to the
 * backlog too (its read-ahead parses without the texts, as the append then wants), and the
 * catch-up builds them: the same answers before and after. */
static void test_drain_of_a_later_handle(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("drained", IL_PW, 0, &s), MV_OK);
    mv_store_close(&s);
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    char err[256] = "";
    for (int i = 0; i < IL_MAIL; i++) {
        size_t len = 0;
        char *m = il_message(i, &len);
        CHECK(m != NULL &&
              mv_deliver_sealed("drained@example.org", m, len, &o, err, sizeof err) == MV_OK);
        free(m);
    }
    o.flags = MV_STORE_DRAIN_LATER;
    CHECK_EQ_INT(
        mv_store_open("drained@example.org", IL_PW, strlen(IL_PW), &o, &s, err, sizeof err), MV_OK);
    if (s == NULL) {
        return;
    }
    CHECK_EQ_INT(mv_store_index_later(s, 1), MV_OK);
    uint32_t moved = 0;
    int more = 1;
    CHECK_EQ_INT(mv_queue_drain(s, 0, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, IL_MAIL);
    CHECK_EQ_INT(tu_fts_backlog(s), IL_MAIL);
    CHECK_EQ_INT(il_rows(s), 0);
    CHECK(il_searches_right(s, IL_MAIL));
    uint64_t left = 99;
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(il_rows(s), IL_MAIL);
    CHECK(il_searches_right(s, IL_MAIL));
    CHECK(tu_check_clean(s));
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_appends_wait_for_the_catch_up);
    TEST(test_catch_up_gives_way);
    TEST(test_drain_of_a_later_handle);
    return th_summary();
}
