/*
 * test_imap_utf7.c -- mailbox names between the wire's modified UTF-7 (RFC 3501 5.1.3) and
 * the store's UTF-8 (imapd/imap_utf7.c): the RFC's example, astral characters (surrogate
 * pairs), '&' escaping, round trips, and the malformed forms a strict decoder refuses; and
 * which UTF-8 names RFC 6855 allows once UTF8=ACCEPT is enabled.
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

static void test_utf8_names(void)
{
    static const char *const good[] = {
        "INBOX",
        "Caf\xc3\xa9",
        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e/x",
        "\xf0\x9f\x98\x80",
        "&ZeVnLIqe-", /* once UTF8=ACCEPT is on this is an ordinary name */
        "a\xc2\xa0"
        "b", /* U+00A0, just past the C1 controls */
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK_EQ_INT(imap_utf8_name_valid(good[i], strlen(good[i])), 1);
    }
    static const char *const bad[] = {
        "Caf\xe9",          /* Latin-1 */
        "\xc0\xaf",         /* overlong '/' */
        "\xed\xa0\x80",     /* a surrogate */
        "\xf4\x90\x80\x80", /* past U+10FFFF */
        "\xe6\x97",         /* cut inside a character */
        "a\tb",             /* a C0 control */
        "a\x7f",            /* DEL */
        "a\xc2\x85"
        "b",             /* a C1 control (U+0085) */
        "a\xc2\x9f",     /* U+009F, the last C1 control */
        "a\xe2\x80\xa8", /* U+2028 line separator */
        "a\xe2\x80\xa9", /* U+2029 paragraph separator */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int ok = imap_utf8_name_valid(bad[i], strlen(bad[i]));
        if (ok != 0) {
            fprintf(stderr, "  accepted bad[%zu]\n", i);
        }
        CHECK_EQ_INT(ok, 0);
    }
    CHECK_EQ_INT(imap_utf8_name_valid("a\0b", 3), 0); /* a NUL inside the length */
}

int main(void)
{
    TEST(test_utf7_examples);
    TEST(test_utf7_round_trip);
    TEST(test_utf7_malformed);
    TEST(test_utf8_names);
    return th_summary();
}
