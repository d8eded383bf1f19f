/*
 * test_imap_parse.c -- the IMAP command parser (imapd/imap_parse.c): tags, command names,
 * atoms, quoted strings, literals ({n} and {n+}), lists, and the typed readers (sequence
 * sets, flags, dates, FETCH attributes, SEARCH keys, LIST-EXTENDED arguments, STATUS items,
 * CREATE parameters), APPEND's UTF8 literal8 and UTF-8 in quoted strings (RFC 6855), with
 * the malformed inputs each one must refuse; commands of every shape within the line and node
 * limits (many body sections, header field names, LIST patterns) and the reading of them with
 * each allocation failed in turn (tests/failalloc.h).
 */
#include "../imapd/imap_parse.h"
#include "failalloc.h"
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char ip_err[256];

/* A long command built piece by piece, within line_max's default (64 KiB): the shapes below
 * are commands a client may send whole. A piece past the end is a bug of the test. */
static char ip_long[256 * 1024];
static size_t ip_long_len;

static void ip_long_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void ip_long_add(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(ip_long + ip_long_len, sizeof ip_long - ip_long_len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof ip_long - ip_long_len) {
        fprintf(stderr, "ip_long_add: the command is longer than %zu bytes\n", sizeof ip_long);
        abort();
    }
    ip_long_len += (size_t)n;
}

static void ip_long_start(const char *text)
{
    ip_long_len = 0;
    ip_long_add("%s", text);
}

static int ip_parse(const char *text, struct imap_command *cmd)
{
    return imap_parse_command((const uint8_t *)text, strlen(text), cmd, ip_err, sizeof ip_err);
}

static int ip_node_eq(const struct imap_node *n, enum imap_node_type type, const char *text)
{
    return n != NULL && n->type == type && n->len == strlen(text) &&
           memcmp(n->data, text, n->len) == 0;
}

static void test_simple_commands(void)
{
    struct imap_command c;
    CHECK_EQ_INT(ip_parse("a1 CAPABILITY\r\n", &c), IMAP_PARSE_OK);
    CHECK(strcmp(c.tag, "a1") == 0);
    CHECK(strcmp(c.name, "CAPABILITY") == 0);
    CHECK_EQ_INT(imap_arg_count(&c), 0);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("x.y noop\n", &c), IMAP_PARSE_OK); /* bare LF, lower case */
    CHECK(strcmp(c.name, "NOOP") == 0);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("A003 uid fetch 1:* (FLAGS)\r\n", &c), IMAP_PARSE_OK);
    CHECK(c.uid == 1 && strcmp(c.name, "FETCH") == 0);
    CHECK_EQ_INT(imap_arg_count(&c), 2);
    CHECK(ip_node_eq(imap_arg(&c, 0), IMAP_NODE_ATOM, "1:*"));
    const struct imap_node *list = imap_arg(&c, 1);
    CHECK(list != NULL && list->type == IMAP_NODE_LIST);
    CHECK(ip_node_eq(imap_node(&c, list->child), IMAP_NODE_ATOM, "FLAGS"));
    imap_command_free(&c);
}

static void test_strings_and_literals(void)
{
    struct imap_command c;
    CHECK_EQ_INT(ip_parse("t LOGIN \"us\\\"er\" {4}\r\np w\r\n", &c), IMAP_PARSE_OK);
    CHECK(ip_node_eq(imap_arg(&c, 0), IMAP_NODE_STRING, "us\"er"));
    CHECK(ip_node_eq(imap_arg(&c, 1), IMAP_NODE_STRING, "p w\r"));
    CHECK(imap_arg(&c, 1)->literal == 1);
    imap_command_free(&c);
    /* LITERAL+ and a literal in the middle of the line, with CRLF and NUL inside */
    static const char append[] = "t APPEND INBOX (\\Seen) {5+}\r\na\r\n\0b\r\n";
    CHECK_EQ_INT(
        imap_parse_command((const uint8_t *)append, sizeof append - 1, &c, ip_err, sizeof ip_err),
        IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_arg(&c, 2)->len, 5);
    CHECK(memcmp(imap_arg(&c, 2)->data, "a\r\n\0b", 5) == 0);
    char out[16];
    CHECK_EQ_INT(imap_astring(imap_arg(&c, 2), out, sizeof out), -1); /* NUL inside */
    CHECK_EQ_INT(imap_astring(imap_arg(&c, 0), out, sizeof out), 0);
    CHECK(strcmp(out, "INBOX") == 0);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("t LOGIN {0}\r\n {0}\r\n\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_arg(&c, 0)->len, 0);
    imap_command_free(&c);
}

/* RFC 3501 9: '[' is an ATOM-CHAR (not in atom-specials) and ']' an ASTRING-CHAR, so
 * "foo[bar" and "foo[bar]" are mailbox names; '[' opens a section only after BODY,
 * BODY.PEEK, BINARY, BINARY.PEEK or BINARY.SIZE. */
/* The tag of a command refused before it is parsed (imap_parse_tag): RFC 3501's tag
 * characters, at most IMAP_TAG_MAX of them, then a SP; anything else is no tag. */
static void test_tag_alone(void)
{
    char tag[IMAP_TAG_MAX + 1];
    CHECK_EQ_INT(imap_parse_tag("a1 FETCH", 8, tag), 2);
    CHECK(strcmp(tag, "a1") == 0);
    CHECK_EQ_INT(imap_parse_tag("x]y NOOP", 8, tag), 3); /* ']' is a tag character */
    const char *bad[] = {"a+ NOOP", "(a NOOP", "a", " a NOOP", "a\r\n", "a%b NOOP", "\x01 X"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strcpy(tag, "old");
        CHECK_EQ_INT(imap_parse_tag(bad[i], strlen(bad[i]), tag), 0);
        CHECK(tag[0] == '\0');
    }
    char longest[IMAP_TAG_MAX + 2];
    memset(longest, 't', sizeof longest);
    longest[IMAP_TAG_MAX] = ' ';
    CHECK_EQ_INT(imap_parse_tag(longest, IMAP_TAG_MAX + 1, tag), IMAP_TAG_MAX);
    longest[IMAP_TAG_MAX] = 't';
    longest[IMAP_TAG_MAX + 1] = ' ';
    CHECK_EQ_INT(imap_parse_tag(longest, IMAP_TAG_MAX + 2, tag), 0); /* one too long */
}

static void test_brackets_in_atoms(void)
{
    static const char *const names[] = {"foo[bar", "foo[bar]", "[x", "a]b", "BODY[x]", "[]"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char line[64], out[32];
        snprintf(line, sizeof line, "a CREATE %s\r\n", names[i]);
        struct imap_command c;
        int rc = ip_parse(line, &c);
        if (rc != IMAP_PARSE_OK) {
            fprintf(stderr, "  refused: %s (%s)\n", names[i], ip_err);
        }
        CHECK_EQ_INT(rc, IMAP_PARSE_OK);
        CHECK_EQ_INT(imap_astring(imap_arg(&c, 0), out, sizeof out), 0);
        CHECK(strcmp(out, names[i]) == 0);
        imap_command_free(&c);
    }
    struct imap_command c;
    CHECK_EQ_INT(ip_parse("a RENAME foo[1 \"bar\"\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(c.node_count, 2);
    imap_command_free(&c);
    /* A section with SP inside stays one atom and is never an astring. */
    CHECK_EQ_INT(ip_parse("a FETCH 1 (body.peek[HEADER.FIELDS (A B)] BINARY[1])\r\n", &c),
                 IMAP_PARSE_OK);
    char out[64];
    const struct imap_node *list = imap_arg(&c, 1);
    CHECK(list != NULL && list->child != IMAP_NODE_NONE);
    CHECK_EQ_INT(imap_astring(&c.nodes[list->child], out, sizeof out), -1);
    imap_command_free(&c);
}

/* RFC 3501 9 puts exactly one SP between list members; Dovecot's imapc (dsync) sends
 * "( $Label1 Work)". Extra SP inside a list is accepted; outside it is still BAD. */
static void test_liberal_list_blanks(void)
{
    struct imap_command c;
    CHECK_EQ_INT(ip_parse("a APPEND INBOX ( $Label1 Work) {1}\r\nx\r\n", &c), IMAP_PARSE_OK);
    const struct imap_node *list = imap_arg(&c, 1);
    CHECK(list != NULL && list->type == IMAP_NODE_LIST);
    unsigned flags = 0;
    char kw[64];
    CHECK_EQ_INT(imap_parse_flags(&c, list, &flags, kw, sizeof kw, ip_err, sizeof ip_err), 0);
    CHECK(strcmp(kw, "$Label1 Work") == 0);
    imap_command_free(&c);
    static const char *const ok[] = {"a FETCH 1 ( FLAGS)\r\n", "a FETCH 1 (FLAGS )\r\n",
                                     "a FETCH 1 (FLAGS  UID)\r\n", "a FETCH 1 ( )\r\n"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        CHECK_EQ_INT(ip_parse(ok[i], &c), IMAP_PARSE_OK);
        imap_command_free(&c);
    }
}

static void test_malformed(void)
{
    static const char *const bad[] = {
        "\r\n",                       /* no tag */
        "a1\r\n",                     /* no command */
        "a+1 NOOP\r\n",               /* '+' in a tag */
        "a1 NOOP \r\n",               /* trailing SP */
        "a1 SELECT  INBOX\r\n",       /* two SP */
        "a1 FETCH 1 (FLAGS\r\n",      /* unclosed list */
        "a1 FETCH 1 (FLAGS))\r\n",    /* extra ')' */
        "a1 LOGIN \"abc\r\n",         /* unterminated quote */
        "a1 LOGIN \"a\\b\" x\r\n",    /* bad escape */
        "a1 LOGIN {5}\r\nabc\r\n",    /* literal shorter than its count */
        "a1 LOGIN {x}\r\nabc\r\n",    /* bad count */
        "a1 LOGIN {3} \r\nabc\r\n",   /* count not at the end of the line */
        "a1 NOOP",                    /* no CRLF */
        "a1 NOOP\r\nextra",           /* bytes after CRLF */
        "a1 FETCH 1 BODY[HEADER\r\n", /* unterminated section */
        "a1 LOGIN a\x01 b\r\n",       /* control character */
        "a1 123\r\n",                 /* command name not a word */
        "a1 UID\r\n",                 /* UID without a command */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct imap_command c;
        int rc = ip_parse(bad[i], &c);
        if (rc != IMAP_PARSE_BAD) {
            fprintf(stderr, "  accepted: \"%s\"\n", bad[i]);
        }
        CHECK_EQ_INT(rc, IMAP_PARSE_BAD);
        CHECK(ip_err[0] != '\0');
        CHECK(c.nodes == NULL && c.text == NULL);
    }
    struct imap_command c;
    CHECK_EQ_INT(ip_parse("tag7 FETCH (\r\n", &c), IMAP_PARSE_BAD);
    CHECK(strcmp(c.tag, "tag7") == 0); /* the tag survives for "tag7 BAD" */
    char deep[200] = "a X ";
    memset(deep + 4, '(', IMAP_PARSE_DEPTH_MAX + 1);
    memcpy(deep + 4 + IMAP_PARSE_DEPTH_MAX + 1, "\r\n", 3);
    CHECK_EQ_INT(ip_parse(deep, &c), IMAP_PARSE_BAD);
    CHECK(strstr(ip_err, "nested too deeply") != NULL);
}

static void test_seqset(void)
{
    struct imap_seqset *s = malloc(sizeof *s);
    CHECK(s != NULL);
    CHECK_EQ_INT(imap_parse_seqset("1,3:5,7:*", 9, s), 0);
    CHECK_EQ_INT(s->count, 2); /* 7:* is kept apart: it depends on '*' */
    CHECK(s->has_star && s->star_low == 7);
    CHECK(imap_seqset_contains(s, 4, 10) && imap_seqset_contains(s, 10, 10));
    CHECK(!imap_seqset_contains(s, 2, 10) && !imap_seqset_contains(s, 6, 10));
    CHECK(imap_seqset_contains(s, 6, 5) && !imap_seqset_contains(s, 8, 5)); /* 7:* is 5:7 */
    imap_seqset_free(s);
    CHECK_EQ_INT(imap_parse_seqset("5:2", 3, s), 0);
    CHECK(imap_seqset_contains(s, 3, 9));
    imap_seqset_free(s);
    CHECK_EQ_INT(imap_parse_seqset("*", 1, s), 0);
    CHECK(imap_seqset_contains(s, 9, 9) && !imap_seqset_contains(s, 8, 9));
    imap_seqset_free(s);
    CHECK_EQ_INT(imap_parse_seqset("9,*:3,20:30,25:22,31,1", 22, s), 0);
    CHECK_EQ_INT(s->count, 3); /* 1, 9, 20:31 */
    CHECK(s->ranges[2].first == 20 && s->ranges[2].last == 31);
    CHECK(imap_seqset_contains(s, 4, 5) && imap_seqset_contains(s, 31, 5));
    CHECK(!imap_seqset_contains(s, 6, 5) && !imap_seqset_contains(s, 2, 3));
    CHECK(imap_seqset_contains(s, 2, 1)); /* *:3 with * = 1 is 1:3 */
    imap_seqset_free(s);
    /* No limit on ranges but the text's (issue 13: 20,000+ single UIDs with gaps, written
     * from the top down). */
    size_t n = 30000, len = 0;
    char *text = malloc(n * 8);
    CHECK(text != NULL);
    for (size_t i = n; i > 0; i--) {
        len += (size_t)sprintf(text + len, "%s%zu", len > 0 ? "," : "", i * 2);
    }
    CHECK_EQ_INT(imap_parse_seqset(text, len, s), 0);
    CHECK_EQ_INT(s->count, n);
    CHECK(!s->has_star && s->ranges[0].first == 2 && s->ranges[n - 1].last == n * 2);
    for (uint32_t k = 1; k <= n * 2 + 1; k++) {
        if (imap_seqset_contains(s, k, 7) != (k % 2 == 0 && k <= n * 2)) {
            CHECK(!"membership of a large set");
            break;
        }
    }
    imap_seqset_free(s);
    free(text);
    CHECK_EQ_INT(imap_parse_seqset("1:4294967295,7", 12, s), 0);
    CHECK(s->count == 1 && imap_seqset_contains(s, 4294967295u, 1));
    imap_seqset_free(s);
    static const char *const bad[] = {
        "", "0", "1,", ",1", "1:", "a", "1:2:3", "4294967296", "1,,2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(imap_parse_seqset(bad[i], strlen(bad[i]), s), -1);
        CHECK(s->ranges == NULL && s->count == 0);
    }
    CHECK_EQ_INT(imap_parse_seqset("4294967295", 10, s), 0);
    imap_seqset_free(s);
    free(s);
}

static void test_flags(void)
{
    struct imap_command c;
    unsigned flags;
    char kw[64];
    CHECK_EQ_INT(ip_parse("a STORE 1 +FLAGS (\\Seen \\deleted $Work)\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(
        imap_parse_flags(&c, imap_arg(&c, 2), &flags, kw, sizeof kw, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(flags, IMAP_FLAG_SEEN | IMAP_FLAG_DELETED);
    CHECK(strcmp(kw, "$Work") == 0);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a STORE 1 FLAGS \\Flagged\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(
        imap_parse_flags(&c, imap_arg(&c, 2), &flags, kw, sizeof kw, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(flags, IMAP_FLAG_FLAGGED);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a STORE 1 FLAGS (\\Recent)\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(
        imap_parse_flags(&c, imap_arg(&c, 2), &flags, kw, sizeof kw, ip_err, sizeof ip_err), -1);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a STORE 1 FLAGS (\"x\")\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(
        imap_parse_flags(&c, imap_arg(&c, 2), &flags, kw, sizeof kw, ip_err, sizeof ip_err), -1);
    imap_command_free(&c);
}

static void test_dates(void)
{
    struct imap_command c;
    int64_t t;
    CHECK_EQ_INT(ip_parse("a SEARCH SINCE 1-Feb-1994 BEFORE \"29-Feb-2024\"\r\n", &c),
                 IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_date(imap_arg(&c, 1), &t), 0);
    CHECK_EQ_INT(t, 760060800);
    CHECK_EQ_INT(imap_parse_date(imap_arg(&c, 3), &t), 0);
    CHECK_EQ_INT(t, 1709164800);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a X 30-Feb-2024 1-Foo-2000 1-Jan-99\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_date(imap_arg(&c, 0), &t), -1);
    CHECK_EQ_INT(imap_parse_date(imap_arg(&c, 1), &t), -1);
    CHECK_EQ_INT(imap_parse_date(imap_arg(&c, 2), &t), -1);
    imap_command_free(&c);
    CHECK_EQ_INT(
        ip_parse("a APPEND X \"17-Jul-1996 02:44:25 -0700\" \" 7-Jul-1996 02:44:25 +0000\" "
                 "\"17-Jul-1996 02:44 -0700\"\r\n",
                 &c),
        IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_date_time(imap_arg(&c, 1), &t), 0);
    CHECK_EQ_INT(t, 837596665);
    CHECK_EQ_INT(imap_parse_date_time(imap_arg(&c, 2), &t), 0);
    CHECK_EQ_INT(t, 836707465);
    CHECK_EQ_INT(imap_parse_date_time(imap_arg(&c, 3), &t), -1);
    imap_command_free(&c);
}

static void test_fetch(void)
{
    struct imap_command c;
    struct imap_fetch *f = calloc(1, sizeof *f);
    CHECK(f != NULL);
    CHECK_EQ_INT(ip_parse("a FETCH 1:3 (UID FLAGS BODY.PEEK[HEADER.FIELDS (From Subject)] "
                          "BODY[]<0.100> BODY[TEXT] RFC822.SIZE BODY[1.2.MIME])\r\n",
                          &c),
                 IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_fetch(&c, imap_arg(&c, 1), f, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(f->items, IMAP_FETCH_UID | IMAP_FETCH_FLAGS | IMAP_FETCH_RFC822_SIZE);
    CHECK_EQ_INT(f->section_count, 4);
    CHECK(f->sections[0].peek && f->sections[0].kind == IMAP_SECTION_HEADER_FIELDS);
    CHECK_EQ_INT(f->sections[0].field_count, 2);
    CHECK(f->sections[0].field_len[1] == 7 && memcmp(f->sections[0].fields[1], "Subject", 7) == 0);
    CHECK(!f->sections[1].peek && f->sections[1].kind == IMAP_SECTION_ALL);
    CHECK(f->sections[1].partial && f->sections[1].start == 0 && f->sections[1].length == 100);
    CHECK(f->sections[2].kind == IMAP_SECTION_TEXT);
    CHECK(f->sections[3].kind == IMAP_SECTION_MIME && f->sections[3].part_count == 2);
    imap_fetch_free(f);
    CHECK(f->section_count == 0 && f->items == 0);
    imap_fetch_free(f); /* twice: nothing left to free */
    imap_command_free(&c);
    /* header-fld-name is an astring: quoted names are the names (Dovecot takes them) */
    CHECK_EQ_INT(
        ip_parse("a FETCH 1 (BODY.PEEK[HEADER.FIELDS (\"From\" Subject \"X-A\")])\r\n", &c),
        IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_fetch(&c, imap_arg(&c, 1), f, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(f->section_count, 1);
    CHECK_EQ_INT(f->sections[0].field_count, 3);
    int from = 0, subject = 0, xa = 0;
    for (size_t i = 0; i < f->sections[0].field_count; i++) {
        const char *n = f->sections[0].fields[i];
        size_t len = f->sections[0].field_len[i];
        from += len == 4 && memcmp(n, "From", 4) == 0;
        subject += len == 7 && memcmp(n, "Subject", 7) == 0;
        xa += len == 3 && memcmp(n, "X-A", 3) == 0;
    }
    CHECK(from == 1 && subject == 1 && xa == 1);
    imap_fetch_free(f);
    imap_command_free(&c);
    /* more than one SP around the names, as Dovecot takes them (it was BAD here) */
    CHECK_EQ_INT(ip_parse("a FETCH 1 (BODY.PEEK[HEADER.FIELDS ( From  \"To\"   Cc )])\r\n", &c),
                 IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_fetch(&c, imap_arg(&c, 1), f, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(f->section_count, 1);
    CHECK_EQ_INT(f->sections[0].field_count, 3);
    for (size_t i = 0; i < f->sections[0].field_count; i++) {
        CHECK(f->sections[0].field_len[i] == 2 || f->sections[0].field_len[i] == 4);
        CHECK(memchr(f->sections[0].fields[i], ' ', f->sections[0].field_len[i]) == NULL);
    }
    imap_fetch_free(f);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a FETCH 1 FAST\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_fetch(&c, imap_arg(&c, 1), f, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(f->items, IMAP_FETCH_FLAGS | IMAP_FETCH_INTERNALDATE | IMAP_FETCH_RFC822_SIZE);
    CHECK_EQ_INT(f->section_count, 0);
    imap_fetch_free(f);
    imap_command_free(&c);
    static const char *const bad[] = {
        "a FETCH 1 (FOO)\r\n",
        "a FETCH 1 BODY[HEADERS]\r\n",
        "a FETCH 1 BODY[]<1>\r\n",
        "a FETCH 1 BODY[]<1.0>\r\n",
        "a FETCH 1 ()\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS ()]\r\n",
        "a FETCH 1 BODY[0]\r\n",
        "a FETCH 1 BODY[MIME]\r\n",
        "a FETCH 1 \"FLAGS\"\r\n",
        /* a bad section after good ones with names: what was read is given back */
        "a FETCH 1 (BODY[HEADER.FIELDS (A B)] BODY[TEXT] BODY[1.HEADER.FIELDS (C D:)])\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS ( )]\r\n",
        "a FETCH 1 (BODY[HEADER.FIELDS (A)] BODY[HEADER.FIELDS.NOT (B)]<0.0>)\r\n",
        "a FETCH 1 (BODY[HEADER.FIELDS (A)] BODY[HEADER.FIELDS (B:)])\r\n",
        "a FETCH 1 (BODY[HEADER.FIELDS (A)] BODY[1.2.3.4.5.6.7.8.9])\r\n",
        /* quoted names: empty, unterminated, run on, with a blank or an escape */
        "a FETCH 1 BODY[HEADER.FIELDS (\"\")]\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS (\"From)]\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS (\"From\"To)]\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS (\"Fr om\")]\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS (\"Fr\\\\om\")]\r\n",
        "a FETCH 1 BODY[HEADER.FIELDS (A \"\" B)]\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(ip_parse(bad[i], &c), IMAP_PARSE_OK);
        int rc = imap_parse_fetch(&c, imap_arg(&c, 1), f, ip_err, sizeof ip_err);
        if (rc != -1) {
            fprintf(stderr, "  accepted: %s", bad[i]);
        }
        imap_command_free(&c);
        CHECK_EQ_INT(rc, -1);
        CHECK_EQ_INT(f->section_count, 0); /* on failure it holds nothing */
    }
    free(f);
}

/* FETCH 1 (UID BODY.PEEK[1.MIME] ... ): Dovecot takes 40 sections; here any number does, up
 * to what the command's node limit allows, each section read as written. */
static void test_fetch_many_sections(void)
{
    static const size_t counts[] = {40, 1000};
    struct imap_command c;
    struct imap_fetch f = {0};
    for (size_t t = 0; t < sizeof counts / sizeof counts[0]; t++) {
        size_t count = counts[t];
        ip_long_start("a FETCH 1 (UID");
        for (size_t k = 1; k <= count; k++) {
            if (count == 40 || k % 2 == 1) {
                ip_long_add(" BODY.PEEK[%zu.MIME]", k);
            } else {
                ip_long_add(" BODY[%zu.TEXT]<%zu.7>", k, k);
            }
        }
        ip_long_add(")\r\n");
        CHECK_EQ_INT(ip_parse(ip_long, &c), IMAP_PARSE_OK);
        int rc = imap_parse_fetch(&c, imap_arg(&c, 1), &f, ip_err, sizeof ip_err);
        if (rc != 0) {
            fprintf(stderr, "  %zu sections refused: %s\n", count, ip_err);
        }
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(f.items, IMAP_FETCH_UID);
        CHECK_EQ_INT(f.section_count, count);
        for (size_t k = 1; k <= count; k++) {
            const struct imap_fetch_section *s = &f.sections[k - 1];
            int mime = count == 40 || k % 2 == 1;
            char spec[32];
            snprintf(spec, sizeof spec, mime ? "%zu.MIME" : "%zu.TEXT", k);
            CHECK(s->part_count == 1 && s->part[0] == k);
            CHECK(s->spec_len == strlen(spec) && memcmp(s->spec, spec, s->spec_len) == 0);
            CHECK_EQ_INT(s->kind, mime ? IMAP_SECTION_MIME : IMAP_SECTION_TEXT);
            CHECK_EQ_INT(s->peek, mime);
            CHECK(mime ? !s->partial : s->partial && s->start == k && s->length == 7);
            CHECK_EQ_INT(s->field_count, 0);
        }
        imap_fetch_free(&f);
        CHECK_EQ_INT(f.section_count, 0);
        imap_command_free(&c);
    }
    /* The bound is the command's: IMAP_PARSE_NODES_MAX nodes (the set, the list and the
     * attributes in it). As many sections as fit are taken; one more node is BAD. */
    for (size_t extra = 0; extra < 2; extra++) {
        size_t count = IMAP_PARSE_NODES_MAX - 2 + extra;
        ip_long_start("a FETCH 1 (");
        for (size_t k = 0; k < count; k++) {
            ip_long_add(k == 0 ? "BODY[]" : " BODY[]");
        }
        ip_long_add(")\r\n");
        int rc = ip_parse(ip_long, &c);
        if (extra == 1) {
            CHECK_EQ_INT(rc, IMAP_PARSE_BAD);
            CHECK(strstr(ip_err, "too many arguments") != NULL);
            continue;
        }
        CHECK_EQ_INT(rc, IMAP_PARSE_OK);
        CHECK_EQ_INT(imap_parse_fetch(&c, imap_arg(&c, 1), &f, ip_err, sizeof ip_err), 0);
        CHECK_EQ_INT(f.section_count, count);
        CHECK(f.sections[count - 1].kind == IMAP_SECTION_ALL && !f.sections[count - 1].peek);
        imap_fetch_free(&f);
        imap_command_free(&c);
    }
}

/* SEARCH's own bound, IMAP_PARSE_SEARCH_NODES_MAX: a client's filter of thousands of terms
 * (a 3,000-key OR chain, 9,001 nodes, was BAD "too many arguments"); every other command
 * keeps IMAP_PARSE_NODES_MAX. */
static void test_search_nodes_bound(void)
{
    struct imap_command c;
    struct imap_search prog;
    static const char *const heads[] = {"a UID SEARCH", "b search", "c NOOP"};
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
        /* as many numbers as the bound, then one more: BAD */
        size_t max = h < 2 ? IMAP_PARSE_SEARCH_NODES_MAX : IMAP_PARSE_NODES_MAX;
        ip_long_start(heads[h]);
        for (size_t k = 0; k < max; k++) {
            ip_long_add(" %zu", k % 9 + 1);
        }
        ip_long_add("\r\n");
        CHECK_EQ_INT(ip_parse(ip_long, &c), IMAP_PARSE_OK);
        CHECK_EQ_INT(c.node_count, max);
        if (h < 2) { /* and the program is made: max sequence-set keys ANDed */
            CHECK_EQ_INT(imap_parse_search(&c, imap_arg(&c, 0), &prog, ip_err, sizeof ip_err), 0);
            imap_search_free(&prog);
        }
        imap_command_free(&c);
        ip_long_len -= 2; /* before the CRLF */
        ip_long_add(" 1\r\n");
        CHECK_EQ_INT(ip_parse(ip_long, &c), IMAP_PARSE_BAD);
        CHECK(strstr(ip_err, "too many arguments") != NULL);
    }
}

/* BODY.PEEK[HEADER.FIELDS (X-F0 ... X-F99)]: a client with many header columns; the names
 * are text inside one atom, so only the line bounds them. */
static void test_fetch_many_fields(void)
{
    static const size_t counts[] = {100, 2000};
    struct imap_command c;
    struct imap_fetch f = {0};
    for (size_t t = 0; t < sizeof counts / sizeof counts[0]; t++) {
        size_t count = counts[t];
        ip_long_start("a FETCH 1 (UID BODY.PEEK[HEADER.FIELDS (");
        for (size_t k = 0; k < count; k++) {
            ip_long_add(k == 0 ? "X-F%zu" : " X-F%zu", k);
        }
        ip_long_add(")] BODY[1.HEADER.FIELDS.NOT (");
        for (size_t k = 0; k < count; k++) {
            ip_long_add(k == 0 ? "x-g%zu" : " x-g%zu", k);
        }
        ip_long_add(")]<0.100>)\r\n");
        CHECK_EQ_INT(ip_parse(ip_long, &c), IMAP_PARSE_OK);
        int rc = imap_parse_fetch(&c, imap_arg(&c, 1), &f, ip_err, sizeof ip_err);
        if (rc != 0) {
            fprintf(stderr, "  %zu names refused: %s\n", count, ip_err);
        }
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(f.section_count, 2);
        const struct imap_fetch_section *a = &f.sections[0], *b = &f.sections[1];
        CHECK(a->kind == IMAP_SECTION_HEADER_FIELDS && a->peek && a->part_count == 0);
        CHECK(b->kind == IMAP_SECTION_HEADER_FIELDS_NOT && !b->peek && b->part_count == 1);
        CHECK(b->partial && b->start == 0 && b->length == 100);
        CHECK_EQ_INT(a->field_count, count);
        CHECK_EQ_INT(b->field_count, count);
        /* every name is found (in any case), in a sorted list; others are not */
        for (size_t k = 0; k < count; k++) {
            char name[32];
            int n = snprintf(name, sizeof name, "x-f%zu", k);
            CHECK(imap_fetch_section_lists(a, name, (size_t)n));
            CHECK(!imap_fetch_section_lists(b, name, (size_t)n));
            n = snprintf(name, sizeof name, "X-G%zu", k);
            CHECK(imap_fetch_section_lists(b, name, (size_t)n));
            CHECK(!imap_fetch_section_lists(b, name, (size_t)n - 1) || k >= 10);
        }
        CHECK(!imap_fetch_section_lists(a, "X-F", 3) && !imap_fetch_section_lists(a, "X-Fx", 4));
        for (size_t k = 1; k < count; k++) {
            CHECK(imap_field_name_cmp(a->fields[k - 1], a->field_len[k - 1], a->fields[k],
                                      a->field_len[k]) < 0);
        }
        imap_fetch_free(&f);
        imap_command_free(&c);
    }
}

/* Every allocation imap_parse_fetch and imap_parse_list make, failed in turn: -2 and "out
 * of memory", nothing left allocated (ASan's leak check), and the call that fails nothing
 * reads the command whole. */
static void test_fetch_list_out_of_memory(void)
{
    struct imap_command c;
    struct imap_fetch f = {0};
    CHECK_EQ_INT(ip_parse("a FETCH 1 (UID BODY.PEEK[HEADER.FIELDS (A B)] BODY[1.MIME] "
                          "BODY[HEADER.FIELDS.NOT (C)])\r\n",
                          &c),
                 IMAP_PARSE_OK);
    unsigned long nth = 1;
    for (;; nth++) {
        ip_err[0] = '\0';
        fa_arm(nth, 0);
        int rc = imap_parse_fetch(&c, imap_arg(&c, 1), &f, ip_err, sizeof ip_err);
        if (!fa_disarm()) {
            CHECK_EQ_INT(rc, 0);
            break;
        }
        CHECK_EQ_INT(rc, -2);
        CHECK(strcmp(ip_err, "out of memory") == 0);
        CHECK_EQ_INT(f.section_count, 0);
    }
    CHECK_EQ_INT(nth, 5); /* the sections, each list of names, the sort of the two-name one */
    CHECK_EQ_INT(f.section_count, 3);
    CHECK_EQ_INT(f.sections[2].field_count, 1);
    imap_fetch_free(&f);
    imap_command_free(&c);

    struct imap_list l;
    CHECK_EQ_INT(ip_parse("a LIST \"\" (a b c) RETURN (CHILDREN)\r\n", &c), IMAP_PARSE_OK);
    for (nth = 1;; nth++) {
        ip_err[0] = '\0';
        fa_arm(nth, 0);
        int rc = imap_parse_list(&c, &l, ip_err, sizeof ip_err);
        if (!fa_disarm()) {
            CHECK_EQ_INT(rc, 0);
            break;
        }
        CHECK_EQ_INT(rc, -2);
        CHECK(strcmp(ip_err, "out of memory") == 0);
        CHECK_EQ_INT(l.pattern_count, 0);
    }
    CHECK_EQ_INT(nth, 2);
    CHECK_EQ_INT(l.pattern_count, 3);
    imap_list_free(&l);
    imap_command_free(&c);
}

static void test_search(void)
{
    struct imap_command c;
    struct imap_search *s = malloc(sizeof *s);
    CHECK(s != NULL);
    CHECK_EQ_INT(ip_parse("a SEARCH CHARSET UTF-8 FLAGGED NOT SEEN OR FROM \"bob\" (TO x LARGER "
                          "100) 2:4 UID 7:* SINCE 1-Jan-2020\r\n",
                          &c),
                 IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_search(&c, imap_arg(&c, 0), s, ip_err, sizeof ip_err), 0);
    CHECK(s->charset_utf8);
    CHECK_EQ_INT(s->keys[0].op, IMAP_SK_AND);
    const struct imap_search_key *k = &s->keys[s->keys[0].child];
    CHECK_EQ_INT(k->op, IMAP_SK_FLAG_SET);
    k = &s->keys[k->next];
    CHECK_EQ_INT(k->op, IMAP_SK_NOT);
    CHECK_EQ_INT(s->keys[k->child].op, IMAP_SK_FLAG_SET);
    k = &s->keys[k->next];
    CHECK_EQ_INT(k->op, IMAP_SK_OR);
    const struct imap_search_key *a = &s->keys[k->child], *b = &s->keys[a->next];
    CHECK(a->op == IMAP_SK_FROM && a->str_len == 3 && memcmp(a->str, "bob", 3) == 0);
    CHECK_EQ_INT(b->op, IMAP_SK_AND);
    CHECK_EQ_INT(s->keys[s->keys[b->child].next].op, IMAP_SK_LARGER);
    k = &s->keys[k->next];
    CHECK_EQ_INT(k->op, IMAP_SK_SEQSET);
    k = &s->keys[k->next];
    CHECK(k->op == IMAP_SK_UIDSET && k->set->has_star && k->set->star_low == 7);
    k = &s->keys[k->next];
    CHECK(k->op == IMAP_SK_SINCE && k->number == 1577836800 && k->next == IMAP_NODE_NONE);
    imap_search_free(s);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a SEARCH MODSEQ \"/flags/\\\\draft\" all 620162338 MODSEQ 7\r\n", &c),
                 IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_search(&c, imap_arg(&c, 0), s, ip_err, sizeof ip_err), 0);
    k = &s->keys[s->keys[0].child];
    CHECK(k->op == IMAP_SK_MODSEQ && k->number == 620162338);
    CHECK(s->keys[k->next].op == IMAP_SK_MODSEQ && s->keys[k->next].number == 7);
    imap_search_free(s);
    imap_command_free(&c);
    static const char *const bad[] = {
        "a SEARCH\r\n",
        "a SEARCH FOO\r\n",
        "a SEARCH OR SEEN\r\n",
        "a SEARCH NOT\r\n",
        "a SEARCH FROM\r\n",
        "a SEARCH SINCE yesterday\r\n",
        "a SEARCH LARGER x\r\n",
        "a SEARCH UID 0\r\n",
        "a SEARCH \"ALL\"\r\n",
        "a SEARCH CHARSET KOI8-R ALL\r\n",
        "a SEARCH (SEEN) 1:2:3\r\n",
        "a SEARCH MODSEQ x\r\n",
        "a SEARCH MODSEQ \"e\" mine 5\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(ip_parse(bad[i], &c), IMAP_PARSE_OK);
        int rc = imap_parse_search(&c, imap_arg(&c, 0), s, ip_err, sizeof ip_err);
        if (rc != -1) {
            fprintf(stderr, "  accepted: %s", bad[i]);
            imap_search_free(s);
        }
        imap_command_free(&c);
        CHECK_EQ_INT(rc, -1);
        CHECK(ip_err[0] != '\0');
    }
    free(s);
}

/* The command's bytes, which its nodes point into: kept until the next ip_search. */
static char *ip_line;

/* The search command of text (NUL-free, CRLF added) parsed; 0 or -1 (ip_err). */
static int ip_search(const char *text, struct imap_command *c, struct imap_search *s)
{
    size_t len = strlen(text);
    free(ip_line);
    ip_line = malloc(len + 3);
    if (ip_line == NULL) {
        abort();
    }
    memcpy(ip_line, text, len);
    memcpy(ip_line + len, "\r\n", 3);
    int rc = ip_parse(ip_line, c);
    if (rc != IMAP_PARSE_OK) {
        return -2;
    }
    return imap_parse_search(c, imap_arg(c, 0), s, ip_err, sizeof ip_err);
}

/* The keys of key k's children, as ops, in order; their count. */
static size_t
ip_children(const struct imap_search *s, uint32_t k, enum imap_search_op *ops, size_t max)
{
    size_t n = 0;
    for (uint32_t c = s->keys[k].child; c != IMAP_NODE_NONE; c = s->keys[c].next, n++) {
        if (n < max) {
            ops[n] = s->keys[c].op;
        }
    }
    return n;
}

/* Repeats word n times into a malloc'd string after prefix, then suffix. */
static char *ip_repeat(const char *prefix, const char *word, size_t n, const char *suffix)
{
    size_t lp = strlen(prefix), lw = strlen(word), ls = strlen(suffix);
    char *out = malloc(lp + lw * n + ls + 1);
    if (out == NULL) {
        abort();
    }
    memcpy(out, prefix, lp);
    for (size_t i = 0; i < n; i++) {
        memcpy(out + lp + i * lw, word, lw);
    }
    memcpy(out + lp + lw * n, suffix, ls + 1);
    return out;
}

/* before, a number from first to last and after, each time, into a malloc'd string after
 * prefix, then suffix. */
static char *ip_numbered(const char *prefix,
                         const char *before,
                         size_t first,
                         size_t last,
                         const char *after,
                         const char *suffix)
{
    size_t n = last - first + 1;
    size_t cap = strlen(prefix) + strlen(suffix) + n * (strlen(before) + strlen(after) + 20) + 1;
    char *out = malloc(cap);
    if (out == NULL) {
        abort();
    }
    size_t at = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = first; i <= last; i++) {
        at += (size_t)snprintf(out + at, cap - at, "%s%zu%s", before, i, after);
    }
    snprintf(out + at, cap - at, "%s", suffix);
    return out;
}

/* Programs of any length a client may send within the line, made flat; only operators that
 * alternate level by level past IMAP_SEARCH_DEPTH_MAX are refused. Dovecot 2.3 takes all of
 * the accepted ones; before, more than 256 keys or OR / NOT chains past 64 were BAD. */
static void test_search_shapes(void)
{
    struct imap_command c;
    struct imap_search *s = malloc(sizeof *s);
    enum imap_search_op ops[8];
    CHECK(s != NULL);
    /* OR chains of either nesting: one OR of every key, in the order written */
    static const char *const chains[] = {"a SEARCH OR OR OR SEEN DRAFT FLAGGED DELETED",
                                         "a SEARCH OR SEEN OR DRAFT OR FLAGGED DELETED",
                                         "a SEARCH OR (OR SEEN DRAFT) ((OR FLAGGED DELETED))"};
    for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++) {
        CHECK_EQ_INT(ip_search(chains[i], &c, s), 0);
        CHECK_EQ_INT(ip_children(s, 0, ops, 8), 1);
        uint32_t or = s->keys[0].child;
        CHECK_EQ_INT(s->keys[or].op, IMAP_SK_OR);
        CHECK_EQ_INT(ip_children(s, or, ops, 8), 4);
        uint32_t k = s->keys[or].child;
        unsigned want[] = {IMAP_FLAG_SEEN, IMAP_FLAG_DRAFT, IMAP_FLAG_FLAGGED, IMAP_FLAG_DELETED};
        for (size_t j = 0; j < 4; j++, k = s->keys[k].next) {
            CHECK(s->keys[k].op == IMAP_SK_FLAG_SET && s->keys[k].flags == want[j]);
        }
        imap_search_free(s);
        imap_command_free(&c);
    }
    /* lists of lists are one list; a list of one key is the key; NOT NOT x is x */
    CHECK_EQ_INT(ip_search("a SEARCH ((SEEN)) (DRAFT (FLAGGED)) NOT NOT NOT DELETED", &c, s), 0);
    CHECK_EQ_INT(ip_children(s, 0, ops, 8), 4);
    CHECK(ops[0] == IMAP_SK_FLAG_SET && ops[1] == IMAP_SK_FLAG_SET && ops[2] == IMAP_SK_FLAG_SET &&
          ops[3] == IMAP_SK_NOT);
    uint32_t last = s->keys[s->keys[s->keys[s->keys[0].child].next].next].next;
    CHECK_EQ_INT(s->keys[s->keys[last].child].op, IMAP_SK_FLAG_SET);
    imap_search_free(s);
    imap_command_free(&c);
    /* long ones: 3,000 keys ORed both ways, 4,000 NOTs, 6,000 keys ANDed */
    char *text[] = {ip_numbered("a SEARCH ", "OR ", 1, 2999, " ", "3000"),
                    ip_repeat("a SEARCH ", "OR ", 2999, ""),
                    ip_repeat("a SEARCH ", "NOT ", 4000, "SEEN"),
                    ip_numbered("a SEARCH ", "", 1, 6000, ":6001 ", "ALL")};
    char *keys = ip_numbered(text[1], "", 1, 2999, " ", "3000");
    free(text[1]);
    text[1] = keys;
    size_t want_children[] = {3000, 3000, 1, 6001};
    for (size_t i = 0; i < 4; i++) {
        CHECK_EQ_INT(ip_search(text[i], &c, s), 0);
        uint32_t top = i < 2 ? s->keys[0].child : 0;
        CHECK_EQ_INT(ip_children(s, top, ops, 8), want_children[i]);
        if (i == 2) { /* an even count of NOTs: the key itself */
            CHECK(ops[0] == IMAP_SK_FLAG_SET);
        }
        imap_search_free(s);
        imap_command_free(&c);
        free(text[i]);
    }
    /* lists in lists as a query builder writes them, IMAP_PARSE_DEPTH_MAX deep (16 before;
     * Dovecot takes any): one list once flat */
    CHECK_EQ_INT(IMAP_PARSE_DEPTH_MAX, 64); /* docs/IMAPD.md "Limits" */
    char *open = ip_repeat("a SEARCH ", "(", 64, "SEEN DRAFT");
    char *nested = ip_repeat(open, ")", 64, "");
    CHECK_EQ_INT(ip_search(nested, &c, s), 0);
    CHECK_EQ_INT(ip_children(s, 0, ops, 8), 2);
    CHECK(ops[0] == IMAP_SK_FLAG_SET && ops[1] == IMAP_SK_FLAG_SET);
    imap_search_free(s);
    imap_command_free(&c);
    free(open);
    free(nested);
    /* operators alternating level by level: IMAP_SEARCH_DEPTH_MAX levels, not one more (the
     * top level, two a NOT OR, the last key) */
    size_t fits = (IMAP_SEARCH_DEPTH_MAX - 2) / 2;
    for (size_t n = fits; n <= fits + 1; n++) {
        char *deep = ip_repeat("a SEARCH ", "NOT OR SEEN ", n, "DRAFT");
        int rc = ip_search(deep, &c, s);
        if (n == fits) {
            CHECK_EQ_INT(rc, 0);
            imap_search_free(s);
        } else {
            CHECK_EQ_INT(rc, -1);
            CHECK(strstr(ip_err, "nested too deeply") != NULL);
        }
        imap_command_free(&c);
        free(deep);
    }
    free(ip_line);
    ip_line = NULL;
    free(s);
}

/* How many keys of the program (reachable or not) have op. */
static size_t ip_count_op(const struct imap_search *s, enum imap_search_op op)
{
    size_t n = 0;
    for (size_t k = 0; k < s->count; k++) {
        n += s->keys[k].op == op;
    }
    return n;
}

/* A key repeated among the keys of one AND or OR is answered once (a filter built by
 * appending terms sent 200 copies of SUBJECT a: each was a scan of the mailbox, 76 ms at
 * 10,000 messages against Dovecot's 61, which merges them); keys that differ in any byte
 * stay, and the kept ones keep the client's order. */
static void test_search_repeats(void)
{
    struct imap_command c;
    struct imap_search *s = malloc(sizeof *s);
    enum imap_search_op ops[8];
    CHECK(s != NULL);
    /* 200 copies ORed: one key, which the OR of one key gives way to; the copies left out of
     * the tree are ALL, so no batch of imap_search.c answers them */
    char *copies = ip_repeat("a SEARCH ", "OR SUBJECT a ", 199, "SUBJECT a");
    CHECK_EQ_INT(ip_search(copies, &c, s), 0);
    CHECK_EQ_INT(ip_children(s, 0, ops, 8), 1);
    CHECK(ops[0] == IMAP_SK_SUBJECT);
    CHECK_EQ_INT(ip_count_op(s, IMAP_SK_SUBJECT), 1);
    CHECK_EQ_INT(ip_count_op(s, IMAP_SK_OR), 0);
    imap_search_free(s);
    imap_command_free(&c);
    free(copies);
    /* in an OR and in an AND, the first of each kept, in order */
    CHECK_EQ_INT(ip_search("a SEARCH OR SEEN OR DRAFT OR SEEN OR FLAGGED DRAFT", &c, s), 0);
    uint32_t or = s->keys[0].child;
    CHECK_EQ_INT(ip_children(s, or, ops, 8), 3);
    uint32_t k = s->keys[or].child;
    unsigned want[] = {IMAP_FLAG_SEEN, IMAP_FLAG_DRAFT, IMAP_FLAG_FLAGGED};
    for (size_t j = 0; j < 3; j++, k = s->keys[k].next) {
        CHECK(s->keys[k].op == IMAP_SK_FLAG_SET && s->keys[k].flags == want[j]);
    }
    imap_search_free(s);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_search("a SEARCH 1:5 SEEN 1:5 UID 3 (SEEN) 1:5 UID 3", &c, s), 0);
    CHECK_EQ_INT(ip_children(s, 0, ops, 8), 3);
    CHECK(ops[0] == IMAP_SK_SEQSET && ops[1] == IMAP_SK_FLAG_SET && ops[2] == IMAP_SK_UIDSET);
    imap_search_free(s);
    imap_command_free(&c);
    /* any difference keeps both: case, the header's name or value, the set, the date */
    static const char *const distinct[] = {
        "a SEARCH SUBJECT a SUBJECT A SUBJECT ab SUBJECT \"a \"",
        "a SEARCH HEADER X-A v HEADER X-B v HEADER X-A w HEADER X-A v2", "a SEARCH 1:5 1:6 2:5 1:*",
        "a SEARCH SINCE 1-Jan-2020 SINCE 2-Jan-2020 BEFORE 1-Jan-2020 SENTSINCE 1-Jan-2020",
        "a SEARCH KEYWORD a KEYWORD b UNKEYWORD a LARGER 10 LARGER 11 SMALLER 10"};
    size_t want_distinct[] = {4, 4, 4, 4, 6};
    for (size_t i = 0; i < sizeof distinct / sizeof distinct[0]; i++) {
        CHECK_EQ_INT(ip_search(distinct[i], &c, s), 0);
        CHECK_EQ_INT(ip_children(s, 0, ops, 8), want_distinct[i]);
        imap_search_free(s);
        imap_command_free(&c);
    }
    /* lists and operators compared by their keys: the same list twice is one; two lists
     * that differ only by a repeat of their own are the same once it is gone */
    CHECK_EQ_INT(ip_search("a SEARCH OR (SEEN DRAFT) OR (SEEN DRAFT) FLAGGED", &c, s), 0);
    or = s->keys[0].child;
    CHECK_EQ_INT(ip_children(s, or, ops, 8), 2);
    CHECK(ops[0] == IMAP_SK_AND && ops[1] == IMAP_SK_FLAG_SET);
    imap_search_free(s);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_search("a SEARCH OR (SEEN SEEN DRAFT) (SEEN DRAFT DRAFT)", &c, s), 0);
    CHECK_EQ_INT(ip_children(s, 0, ops, 8), 1);
    CHECK(ops[0] == IMAP_SK_AND);
    CHECK_EQ_INT(ip_children(s, s->keys[0].child, ops, 8), 2);
    imap_search_free(s);
    imap_command_free(&c);
    CHECK_EQ_INT(
        ip_search("a SEARCH NOT SEEN NOT SEEN NOT DRAFT OR SEEN DRAFT OR SEEN DRAFT", &c, s), 0);
    CHECK_EQ_INT(ip_children(s, 0, ops, 8), 3);
    CHECK(ops[0] == IMAP_SK_NOT && ops[1] == IMAP_SK_NOT && ops[2] == IMAP_SK_OR);
    imap_search_free(s);
    imap_command_free(&c);
    /* OR (a a) and OR a a under NOT: NOT a */
    CHECK_EQ_INT(ip_search("a SEARCH NOT OR SEEN SEEN", &c, s), 0);
    CHECK_EQ_INT(ip_children(s, 0, ops, 8), 1);
    CHECK(ops[0] == IMAP_SK_NOT);
    CHECK_EQ_INT(s->keys[s->keys[s->keys[0].child].child].op, IMAP_SK_FLAG_SET);
    imap_search_free(s);
    imap_command_free(&c);
    free(ip_line);
    ip_line = NULL;
    free(s);
}

static void test_list(void)
{
    struct imap_command c;
    struct imap_list l;
    CHECK_EQ_INT(ip_parse("a LIST \"\" %\r\n", &c), IMAP_PARSE_OK); /* the RFC 3501 form */
    CHECK_EQ_INT(imap_parse_list(&c, &l, ip_err, sizeof ip_err), 0);
    CHECK(!l.extended && l.select == 0 && l.ret == 0 && l.pattern_count == 1);
    CHECK(ip_node_eq(l.reference, IMAP_NODE_STRING, "") &&
          ip_node_eq(l.patterns[0], IMAP_NODE_ATOM, "%"));
    imap_list_free(&l);
    CHECK_EQ_INT(l.pattern_count, 0);
    imap_list_free(&l); /* twice: nothing left to free */
    imap_command_free(&c);
    CHECK_EQ_INT(
        ip_parse("a LIST (subscribed RECURSIVEMATCH remote) Work (\"%\" {3}\r\na/*) "
                 "RETURN (CHILDREN STATUS (MESSAGES unseen HIGHESTMODSEQ) SPECIAL-USE)\r\n",
                 &c),
        IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_list(&c, &l, ip_err, sizeof ip_err), 0);
    CHECK(l.extended);
    CHECK_EQ_INT(l.select, IMAP_LIST_SELECT_SUBSCRIBED | IMAP_LIST_SELECT_RECURSIVEMATCH |
                               IMAP_LIST_SELECT_REMOTE);
    CHECK_EQ_INT(l.ret, IMAP_LIST_RETURN_CHILDREN | IMAP_LIST_RETURN_STATUS |
                            IMAP_LIST_RETURN_SPECIAL_USE);
    CHECK_EQ_INT(l.status_items,
                 IMAP_STATUS_MESSAGES | IMAP_STATUS_UNSEEN | IMAP_STATUS_HIGHESTMODSEQ);
    CHECK(ip_node_eq(l.reference, IMAP_NODE_ATOM, "Work"));
    CHECK_EQ_INT(l.pattern_count, 2);
    CHECK(ip_node_eq(l.patterns[0], IMAP_NODE_STRING, "%") &&
          ip_node_eq(l.patterns[1], IMAP_NODE_STRING, "a/*"));
    imap_list_free(&l);
    imap_command_free(&c);
    /* LIST-STATUS shares STATUS's item reader: the RFC 9208 items come through it too */
    CHECK_EQ_INT(
        ip_parse("a LIST \"\" * RETURN (STATUS (DELETED-STORAGE UIDNEXT deleted))\r\n", &c),
        IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_list(&c, &l, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(l.ret, IMAP_LIST_RETURN_STATUS);
    CHECK_EQ_INT(l.status_items,
                 IMAP_STATUS_DELETED_STORAGE | IMAP_STATUS_UIDNEXT | IMAP_STATUS_DELETED);
    imap_list_free(&l);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a LIST () \"\" x RETURN ()\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_list(&c, &l, ip_err, sizeof ip_err), 0);
    CHECK(l.extended && l.select == 0 && l.ret == 0);
    imap_list_free(&l);
    imap_command_free(&c);
    static const char *const bad[] = {
        "a LIST\r\n",
        "a LIST \"\"\r\n",
        "a LIST (RECURSIVEMATCH) \"\" *\r\n",        /* alone: RFC 5258 3 */
        "a LIST (REMOTE RECURSIVEMATCH) \"\" *\r\n", /* REMOTE selects nothing by itself */
        "a LIST (BOGUS) \"\" *\r\n",
        "a LIST (\"SUBSCRIBED\") \"\" *\r\n",
        "a LIST \"\" ()\r\n",
        "a LIST \"\" ((a))\r\n",
        "a LIST () \"\"\r\n",
        "a LIST (a) \"\" *\r\n",
        "a LIST \"\" * RETURN\r\n",
        "a LIST \"\" * RETURN (BOGUS)\r\n",
        "a LIST \"\" * RETURN (STATUS)\r\n",
        "a LIST \"\" * RETURN (STATUS ())\r\n",
        "a LIST \"\" * RETURN (STATUS (MESSAGES SIZE))\r\n",
        "a LIST \"\" * RETURN (STATUS (MESSAGES) STATUS (UNSEEN))\r\n",
        "a LIST \"\" * RETURN (CHILDREN) x\r\n",
        "a LIST \"\" * NORETURN (CHILDREN)\r\n",
        "a LIST (\"\") \"\" *\r\n",
        "a LIST \"\" (a b (c)) RETURN (CHILDREN)\r\n",
        "a LIST \"\" (a b c) RETURN (BOGUS)\r\n", /* after the patterns were read */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(ip_parse(bad[i], &c), IMAP_PARSE_OK);
        ip_err[0] = '\0';
        int rc = imap_parse_list(&c, &l, ip_err, sizeof ip_err);
        imap_command_free(&c);
        if (rc != -1) {
            fprintf(stderr, "  accepted: %s", bad[i]);
        }
        CHECK_EQ_INT(rc, -1);
        CHECK(ip_err[0] != '\0');
        CHECK_EQ_INT(l.pattern_count, 0); /* on failure it holds nothing */
    }
}

/* LIST "" ("p0" ... "p99"): Dovecot takes 100 patterns; here any number does (each is a node
 * of the command, so IMAP_PARSE_NODES_MAX bounds them), each as written. */
static void test_list_many_patterns(void)
{
    static const size_t counts[] = {100, 4000};
    struct imap_command c;
    struct imap_list l;
    for (size_t t = 0; t < sizeof counts / sizeof counts[0]; t++) {
        size_t count = counts[t];
        ip_long_start("a LIST \"\" (");
        for (size_t k = 0; k < count; k++) {
            ip_long_add(k == 0 ? "\"p%zu\"" : " \"p%zu\"", k);
        }
        ip_long_add(") RETURN (CHILDREN)\r\n");
        CHECK_EQ_INT(ip_parse(ip_long, &c), IMAP_PARSE_OK);
        int rc = imap_parse_list(&c, &l, ip_err, sizeof ip_err);
        if (rc != 0) {
            fprintf(stderr, "  %zu patterns refused: %s\n", count, ip_err);
        }
        CHECK_EQ_INT(rc, 0);
        CHECK(l.extended && l.ret == IMAP_LIST_RETURN_CHILDREN);
        CHECK(ip_node_eq(l.reference, IMAP_NODE_STRING, ""));
        CHECK_EQ_INT(l.pattern_count, count);
        for (size_t k = 0; k < count; k++) {
            char name[32];
            snprintf(name, sizeof name, "p%zu", k);
            CHECK(ip_node_eq(l.patterns[k], IMAP_NODE_STRING, name));
        }
        imap_list_free(&l);
        imap_command_free(&c);
    }
}

static void test_status_and_create_params(void)
{
    struct imap_command c;
    unsigned items;
    CHECK_EQ_INT(ip_parse("a STATUS INBOX (MESSAGES RECENT UIDNEXT UIDVALIDITY UNSEEN "
                          "highestmodseq)\r\n",
                          &c),
                 IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_status_items(&c, imap_arg(&c, 1), &items, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(items, 0x3f);
    CHECK_EQ_INT(imap_parse_status_items(&c, imap_arg(&c, 0), &items, ip_err, sizeof ip_err), -1);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a STATUS INBOX ()\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_status_items(&c, imap_arg(&c, 1), &items, ip_err, sizeof ip_err), -1);
    imap_command_free(&c);
    /* RFC 9051 DELETED, RFC 9208 DELETED-STORAGE: each on its own bit, in any case, and
     * neither taken for a prefix of the other or of a longer word */
    CHECK_EQ_INT(ip_parse("a STATUS INBOX (deleted-storage)\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_status_items(&c, imap_arg(&c, 1), &items, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(items, IMAP_STATUS_DELETED_STORAGE);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a STATUS INBOX (Deleted MESSAGES DELETED-STORAGE DELETED)\r\n", &c),
                 IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_status_items(&c, imap_arg(&c, 1), &items, ip_err, sizeof ip_err), 0);
    CHECK_EQ_INT(items, IMAP_STATUS_DELETED | IMAP_STATUS_MESSAGES | IMAP_STATUS_DELETED_STORAGE);
    CHECK(items == 0x01u + 0x40u + 0x80u); /* distinct from the six older items' 0x3f */
    imap_command_free(&c);
    static const char *const not_items[] = {"DELETED-", "DELETED-STORAGES", "DELETE",
                                            "DELETED-MESSAGES", "\"DELETED\""};
    for (size_t i = 0; i < sizeof not_items / sizeof not_items[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, "a STATUS INBOX (MESSAGES %s)\r\n", not_items[i]);
        CHECK_EQ_INT(ip_parse(line, &c), IMAP_PARSE_OK);
        CHECK_EQ_INT(imap_parse_status_items(&c, imap_arg(&c, 1), &items, ip_err, sizeof ip_err),
                     -1);
        CHECK(strstr(ip_err, "unknown STATUS item") != NULL);
        imap_command_free(&c);
    }

    struct imap_create_params p;
    CHECK_EQ_INT(ip_parse("a CREATE x (USE (\\Archive \\bogus))\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_create_params(&c, imap_arg(&c, 1), &p, ip_err, sizeof ip_err), 0);
    CHECK(p.has_use && p.use_count == 2);
    CHECK(ip_node_eq(p.uses[0], IMAP_NODE_ATOM, "\\Archive") &&
          ip_node_eq(p.uses[1], IMAP_NODE_ATOM, "\\bogus"));
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("a CREATE x (use ())\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_parse_create_params(&c, imap_arg(&c, 1), &p, ip_err, sizeof ip_err), 0);
    CHECK(p.has_use && p.use_count == 0);
    imap_command_free(&c);
    static const char *const bad[] = {
        "a CREATE x ()\r\n",
        "a CREATE x USE\r\n",
        "a CREATE x (USE)\r\n",
        "a CREATE x (USE \\Sent)\r\n",
        "a CREATE x (USE (Sent))\r\n",
        "a CREATE x (USE (\"\\\\Sent\"))\r\n",
        "a CREATE x (USE ((\\Sent)))\r\n",
        "a CREATE x (USE (\\Sent) USE (\\Junk))\r\n",
        "a CREATE x (OTHER (\\Sent))\r\n",
        "a CREATE x (USE (\\a \\b \\c \\d \\e \\f \\g \\h \\i))\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(ip_parse(bad[i], &c), IMAP_PARSE_OK);
        ip_err[0] = '\0';
        int rc = imap_parse_create_params(&c, imap_arg(&c, 1), &p, ip_err, sizeof ip_err);
        imap_command_free(&c);
        if (rc != -1) {
            fprintf(stderr, "  accepted: %s", bad[i]);
        }
        CHECK_EQ_INT(rc, -1);
        CHECK(ip_err[0] != '\0');
    }
}

/* RFC 6855: APPEND's UTF8 (~{n}...) data (a literal8, RFC 4466) and UTF-8 in quoted strings. */
static void test_literal8_and_utf8(void)
{
    struct imap_command c;
    /* ~{n} and ~{n+}, the message as is (8-bit and NUL included) */
    static const char sync[] = "t APPEND INBOX UTF8 (~{6}\r\nS\xc3\xa9\0\r\n)\r\n";
    CHECK_EQ_INT(
        imap_parse_command((const uint8_t *)sync, sizeof sync - 1, &c, ip_err, sizeof ip_err),
        IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_arg_count(&c), 3);
    CHECK(imap_atom_is(imap_arg(&c, 1), "UTF8"));
    const struct imap_node *list = imap_arg(&c, 2);
    CHECK(list != NULL && list->type == IMAP_NODE_LIST);
    const struct imap_node *lit = list != NULL ? imap_node(&c, list->child) : NULL;
    CHECK(lit != NULL && lit->type == IMAP_NODE_STRING && lit->literal && lit->literal8);
    CHECK(lit != NULL && lit->len == 6 && memcmp(lit->data, "S\xc3\xa9\0\r\n", 6) == 0);
    CHECK(lit != NULL && lit->next == IMAP_NODE_NONE);
    imap_command_free(&c);
    CHECK_EQ_INT(ip_parse("t APPEND box (\\Seen) UTF8 (~{2+}\r\nab)\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_arg_count(&c), 4);
    lit = imap_node(&c, imap_arg(&c, 3)->child);
    CHECK(lit != NULL && lit->literal8 && lit->len == 2);
    imap_command_free(&c);
    /* an ordinary literal is not a literal8 */
    CHECK_EQ_INT(ip_parse("t APPEND box {2}\r\nab\r\n", &c), IMAP_PARSE_OK);
    CHECK(imap_arg(&c, 1)->literal && !imap_arg(&c, 1)->literal8);
    imap_command_free(&c);
    /* '~' alone is still an atom character */
    CHECK_EQ_INT(ip_parse("t SELECT ~peter/mail\r\n", &c), IMAP_PARSE_OK);
    CHECK(ip_node_eq(imap_arg(&c, 0), IMAP_NODE_ATOM, "~peter/mail"));
    imap_command_free(&c);

    static const char *const misplaced[] = {
        "t APPEND box ~{2}\r\nab\r\n",          /* bare literal8 (BINARY, not offered) */
        "t APPEND box X (~{2}\r\nab)\r\n",      /* a list not after UTF8 */
        "t APPEND box UTF8 (~{2}\r\nab x)\r\n", /* more than the literal8 in the list */
        "t APPEND box UTF8 (x ~{2}\r\nab)\r\n", /* not first */
        "t APPEND box UTF8 ((~{2}\r\nab))\r\n", /* nested deeper */
        "t LOGIN ~{1}\r\na ~{1}\r\nb\r\n",      /* another command */
        "t SEARCH UTF8 (~{2}\r\nab)\r\n",       /* another command, UTF8-shaped */
        "t APPEND box UTF8 (~{3}\r\nab)\r\n",   /* shorter than its count */
        "t APPEND box UTF8 (~{x}\r\nab)\r\n",   /* bad count */
    };
    for (size_t i = 0; i < sizeof misplaced / sizeof misplaced[0]; i++) {
        int rc = ip_parse(misplaced[i], &c);
        if (rc != IMAP_PARSE_BAD) {
            fprintf(stderr, "  accepted: \"%s\"\n", misplaced[i]);
            imap_command_free(&c);
        }
        CHECK_EQ_INT(rc, IMAP_PARSE_BAD);
        CHECK(ip_err[0] != '\0');
    }

    /* quoted UTF-8: parsed either way; imap_command_utf8_valid tells the session */
    CHECK_EQ_INT(ip_parse("t CREATE \"Caf\xc3\xa9/\xe6\x97\xa5\xf0\x9f\x98\x80\"\r\n", &c),
                 IMAP_PARSE_OK);
    CHECK(
        ip_node_eq(imap_arg(&c, 0), IMAP_NODE_STRING, "Caf\xc3\xa9/\xe6\x97\xa5\xf0\x9f\x98\x80"));
    CHECK_EQ_INT(imap_command_utf8_valid(&c), 1);
    imap_command_free(&c);
    static const char *const not_utf8[] = {
        "t CREATE \"Caf\xe9\"\r\n",          /* Latin-1 */
        "t CREATE \"\xc0\xaf\"\r\n",         /* overlong '/' */
        "t CREATE \"\xed\xa0\x80\"\r\n",     /* a surrogate */
        "t CREATE \"\xf4\x90\x80\x80\"\r\n", /* past U+10FFFF */
        "t CREATE \"\xe6\x97\"\r\n",         /* truncated */
        "t LIST \"\" (\"ok\" \"\xff\")\r\n", /* in a list */
    };
    for (size_t i = 0; i < sizeof not_utf8 / sizeof not_utf8[0]; i++) {
        CHECK_EQ_INT(ip_parse(not_utf8[i], &c), IMAP_PARSE_OK);
        CHECK_EQ_INT(imap_command_utf8_valid(&c), 0);
        imap_command_free(&c);
    }
    /* literals may carry any octets */
    CHECK_EQ_INT(ip_parse("t CREATE {1}\r\n\xff\r\n", &c), IMAP_PARSE_OK);
    CHECK_EQ_INT(imap_command_utf8_valid(&c), 1);
    imap_command_free(&c);
}

int main(void)
{
    TEST(test_simple_commands);
    TEST(test_strings_and_literals);
    TEST(test_malformed);
    TEST(test_tag_alone);
    TEST(test_brackets_in_atoms);
    TEST(test_liberal_list_blanks);
    TEST(test_seqset);
    TEST(test_flags);
    TEST(test_dates);
    TEST(test_fetch);
    TEST(test_fetch_many_sections);
    TEST(test_fetch_many_fields);
    TEST(test_search);
    TEST(test_search_shapes);
    TEST(test_search_nodes_bound);
    TEST(test_search_repeats);
    TEST(test_list);
    TEST(test_list_many_patterns);
    TEST(test_fetch_list_out_of_memory);
    TEST(test_status_and_create_params);
    TEST(test_literal8_and_utf8);
    return th_summary();
}
