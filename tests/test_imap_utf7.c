/*
 * test_imap_utf7.c -- mailbox names between the wire's modified UTF-7 (RFC 3501 5.1.3) and
 * the store's UTF-8 (imapd/imap_utf7.c): the RFC's example, astral characters (surrogate
 * pairs), '&' escaping, round trips, and the malformed forms a strict decoder refuses.
 */
#include "../imapd/imap_session.h"
#include "harness.h"

#include <string.h>

static int u7_decode(const char *in, char *out, size_t size)
{
    return imap_utf7_decode(in, strlen(in), out, size);
}

static void test_utf7_examples(void)
{
    char out[256];
    CHECK_EQ_INT(u7_decode("~peter/mail/&U,BTFw-/&ZeVnLIqe-", out, sizeof out), 0);
    CHECK(strcmp(out,
                 "~peter/mail/\xe5\x8f\xb0\xe5\x8c\x97/\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e") == 0);
    CHECK_EQ_INT(u7_decode("Tom &- Jerry", out, sizeof out), 0);
    CHECK(strcmp(out, "Tom & Jerry") == 0);
    CHECK_EQ_INT(u7_decode("&AMk-t&AOk-", out, sizeof out), 0);
    CHECK(strcmp(out, "\xc3\x89t\xc3\xa9") == 0);
    CHECK_EQ_INT(u7_decode("&2D3eAA-", out, sizeof out), 0); /* U+1F600 */
    CHECK(strcmp(out, "\xf0\x9f\x98\x80") == 0);
    CHECK_EQ_INT(u7_decode("Caf\xc3\xa9", out, sizeof out), 0); /* 8-bit: taken as UTF-8 */
    CHECK(strcmp(out, "Caf\xc3\xa9") == 0);
}

static void test_utf7_round_trip(void)
{
    static const char *const names[] = {
        "INBOX", "a&b", "\xc3\x89t\xc3\xa9", "x/\xe6\x97\xa5/y", "\xf0\x9f\x98\x80 smile",
        "&&",    ""};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char wire[256], back[256];
        CHECK_EQ_INT(imap_utf7_encode(names[i], wire, sizeof wire), 0);
        for (const char *p = wire; *p != '\0'; p++) {
            CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
        }
        CHECK_EQ_INT(u7_decode(wire, back, sizeof back), 0);
        CHECK(strcmp(back, names[i]) == 0);
    }
    char wire[16];
    CHECK_EQ_INT(imap_utf7_encode("a&b", wire, sizeof wire), 0);
    CHECK(strcmp(wire, "a&-b") == 0);
    CHECK_EQ_INT(imap_utf7_encode("\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5", wire, 8), -1);
}

static void test_utf7_malformed(void)
{
    static const char *const bad[] = {
        "&",     /* no terminating '-' */
        "&AMk",  /* no terminating '-' */
        "&A-",   /* too few bits for a character */
        "&AGE-", /* 'a' shifted: printable ASCII must be written as itself */
        "&2D0-", /* a lone high surrogate */
        "&3gA-", /* a lone low surrogate */
        "&AM!-", /* not base64 */
        "&AMl-", /* padding bits not zero */
    };
    char out[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = u7_decode(bad[i], out, sizeof out);
        if (rc != -1) {
            fprintf(stderr, "  accepted \"%s\"\n", bad[i]);
        }
        CHECK_EQ_INT(rc, -1);
    }
    CHECK_EQ_INT(u7_decode("abcdef", out, 4), -1); /* no room */
}

int main(void)
{
    TEST(test_utf7_examples);
    TEST(test_utf7_round_trip);
    TEST(test_utf7_malformed);
    return th_summary();
}
