/*
 * test_imap_sort_key.c -- SORT's compared strings (imapd/imap_sort_key.c): base subjects
 * written out by hand from RFC 5256 2.1's steps (each step alone, then together, the edges
 * where a rule must not apply), the first address's mailbox and display form for every shape
 * the store's display text takes (plain, named, quoted names with commas and quotes, groups,
 * comments, none), keys in i;ascii-casemap form, and the cut at the caller's size.
 */
#include "../imapd/imap_sort_key.h"
#include "harness.h"

#include <gmime/gmime.h>
#include <stdio.h>
#include <string.h>

struct sk_case {
    const char *in;
    const char *want;
};

/* Each subject and its base subject, upper-cased (RFC 5256 2.1; i;ascii-casemap). */
static const struct sk_case sk_subjects[] = {
    {"", ""},
    {"apple", "APPLE"},
    {"Re: apple", "APPLE"},
    {"RE:apple", "APPLE"},
    {"re : apple", "APPLE"},     /* *WSP before the colon */
    {"Re[2]: apple", "APPLE"},   /* a blob before the colon */
    {"Re [x] : apple", "APPLE"}, /* WSP, blob, colon */
    {"Fwd: apple", "APPLE"},
    {"FW: apple", "APPLE"},
    {"fw:apple", "APPLE"},
    {"Re: Re: Fwd: re: apple", "APPLE"},
    {"[list] Re: apple", "APPLE"}, /* blobs then a re */
    {"[a][b] Re: apple", "APPLE"},
    {"Re: [list] apple", "APPLE"},  /* step 4 after step 3 */
    {"[list] apple", "APPLE"},      /* step 4 alone */
    {"[list]", "[LIST]"},           /* step 4 would leave nothing: kept */
    {"[a] [b]", "[B]"},             /* the first blob goes, the last would leave nothing */
    {"[] apple", "APPLE"},          /* an empty blob */
    {"[a[b] apple", "[A[B] APPLE"}, /* '[' is no BLOBCHAR: no blob */
    {"apple (fwd)", "APPLE"},       /* step 2 */
    {"apple (FWD) (fwd)  ", "APPLE"},
    {"apple(fwd)", "APPLE"},
    {"(fwd)", ""},
    {"[fwd: apple]", "APPLE"}, /* step 6 */
    {"[Fwd: Re: [x] apple]", "APPLE"},
    {"Re: [fwd: apple (fwd)]", "APPLE"},
    {"[fwd: apple] x", "X"}, /* not a wrapper: it does not end with ']' */
    {"[fwd:]", ""},
    {"Refund: apple", "REFUND: APPLE"}, /* "re" not followed by its colon */
    {"fwd apple", "FWD APPLE"},
    {"Re:", ""},
    {"Re: ", ""},
    {"  spaced \t out  ", "SPACED OUT"}, /* step 1: tabs and runs of blanks as one space */
    {"a\r\n b", "A B"},
    {"Caf\xc3\xa9 r\xc3\xa9sum\xc3\xa9", "CAF\xc3\xa9 R\xc3\xa9SUM\xc3\xa9"}, /* ASCII only */
};

/* Each address list as the store keeps it and its first address's mailbox / display key. */
static const struct {
    const char *in;
    const char *mailbox;
    const char *display;
} sk_addresses[] = {
    {"", "", ""},
    {"alice@example.org", "ALICE", "ALICE@EXAMPLE.ORG"},
    {"Alice <alice@example.org>", "ALICE", "ALICE"},
    {"  Alice  Liddell <Alice@Example.org>, bob@example.org", "ALICE", "ALICE  LIDDELL"},
    {"bob@example.org, Alice <alice@example.org>", "BOB", "BOB@EXAMPLE.ORG"},
    {"<anon@example.org>", "ANON", "ANON@EXAMPLE.ORG"},
    {"\"Smith, Carol\" <carol@example.org>", "CAROL", "SMITH, CAROL"},
    {"\"Walter \\\"W\\\" White\" <walter@example.com>", "WALTER", "WALTER \"W\" WHITE"},
    {"undisclosed-recipients: ;", "UNDISCLOSED-RECIPIENTS", "UNDISCLOSED-RECIPIENTS"},
    {"team: x@example.org, y@example.org;, z@example.org", "TEAM", "TEAM"},
    {"dave@example.org (Dave)", "DAVE", "DAVE"},
    {"Ren\xc3\xa9 <rene@example.org>", "RENE", "REN\xc3\xa9"},
    {"nobody", "NOBODY", "NOBODY"}, /* no '@': all of it */
};

static void sk_fail(const char *what, const char *in, const char *got, const char *want)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s of \"%s\": \"%s\", want \"%s\"", what, in, got, want);
    th_fail(__FILE__, __LINE__, msg);
}

static void test_base_subjects(void)
{
    for (size_t i = 0; i < sizeof sk_subjects / sizeof sk_subjects[0]; i++) {
        char out[256];
        size_t n = imap_sort_subject(sk_subjects[i].in, out, sizeof out);
        if (strcmp(out, sk_subjects[i].want) != 0 || n != strlen(out)) {
            sk_fail("base subject", sk_subjects[i].in, out, sk_subjects[i].want);
            return;
        }
    }
}

static void test_addresses(void)
{
    for (size_t i = 0; i < sizeof sk_addresses / sizeof sk_addresses[0]; i++) {
        char out[256];
        size_t n = imap_sort_address(sk_addresses[i].in, IMAP_SORT_MAILBOX, out, sizeof out);
        if (strcmp(out, sk_addresses[i].mailbox) != 0 || n != strlen(out)) {
            sk_fail("mailbox", sk_addresses[i].in, out, sk_addresses[i].mailbox);
            return;
        }
        n = imap_sort_address(sk_addresses[i].in, IMAP_SORT_DISPLAY, out, sizeof out);
        if (strcmp(out, sk_addresses[i].display) != 0 || n != strlen(out)) {
            sk_fail("display form", sk_addresses[i].in, out, sk_addresses[i].display);
            return;
        }
    }
}

/* A key is cut at the caller's size, its NUL included; a size of 0 writes nothing. */
static void test_cut(void)
{
    char out[8];
    memset(out, '#', sizeof out);
    CHECK_EQ_INT(imap_sort_subject("Re: abcdefghij", out, 5), 4);
    CHECK(strcmp(out, "ABCD") == 0);
    CHECK(out[5] == '#');
    CHECK_EQ_INT(imap_sort_address("Alice <alice@example.org>", IMAP_SORT_DISPLAY, out, 3), 2);
    CHECK(strcmp(out, "AL") == 0);
    CHECK_EQ_INT(imap_sort_subject("apple", out, 0), 0);
    CHECK_EQ_INT(imap_sort_address("a@b", IMAP_SORT_MAILBOX, out, 1), 0);
    CHECK(out[0] == '\0');
    /* a subject longer than the stack copy (2,048 bytes): still its base subject */
    static char big[6000], want[6000];
    memcpy(big, "Re: [fwd: ", 10);
    memset(big + 10, 'q', 5000);
    memcpy(big + 5010, "]", 2);
    memset(want, 'Q', 5000);
    want[5000] = '\0';
    static char got[6000];
    CHECK_EQ_INT(imap_sort_subject(big, got, sizeof got), 5000);
    CHECK(strcmp(got, want) == 0);
}

int main(void)
{
    g_mime_init();
    TEST(test_base_subjects);
    TEST(test_addresses);
    TEST(test_cut);
    g_mime_shutdown();
    return th_summary();
}
