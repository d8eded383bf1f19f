/*
 * test_imap_mime.c -- where FETCH's body sections of parts lie in a raw message
 * (imap_mime_section() in imapd/imap_mime.c): BODY[n], [n.MIME], [n.HEADER], [n.TEXT] through
 * multipart and message/rfc822 nesting, over tricky messages (nested rfc822 inside a
 * multipart inside rfc822, a missing close delimiter, headers only, empty parts, digests,
 * no boundary, too much structure for GMime). Every case runs twice: on the message as
 * written (LF line endings) and with every LF turned into CRLF, expecting the same bytes
 * converted likewise. Also ENVELOPE / BODYSTRUCTURE strings with 8-bit bytes with and without
 * UTF8=ACCEPT (imap_mime_set_utf8), and buf.c's printf-free numbers, dates and literal heads.
 * And the parse's copy of the message (GMime's memory stream) is wiped before it goes: an
 * ASan free hook looks at every block freed, GLib's and GMime's too.
 */
#include "../imapd/imap_mime.h"
#include "harness.h"
#include "testutil.h"

#include <dirent.h>
#include <gmime/gmime.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static char *tm_crlf(const char *lf)
{
    size_t n = strlen(lf), extra = 0;
    for (size_t i = 0; i < n; i++) {
        extra += lf[i] == '\n';
    }
    char *out = malloc(n + extra + 1), *o = out;
    if (out == NULL) {
        abort();
    }
    for (size_t i = 0; i < n; i++) {
        if (lf[i] == '\n') {
            *o++ = '\r';
        }
        *o++ = lf[i];
    }
    *o = '\0';
    return out;
}

/* 1 if section path ("2.1.3") of msg is expect (NULL: refused), in one line-ending form. */
static int tm_one(const char *msg, const char *path, enum imap_mime_what what, const char *expect)
{
    uint32_t part[16];
    size_t count = 0;
    for (const char *p = path; *p != '\0' && count < 16; p += *p == '.') {
        char *end = NULL;
        part[count++] = (uint32_t)strtoul(p, &end, 10);
        p = end;
    }
    struct imap_mime_span span = {0, 0};
    int rc = imap_mime_section(msg, strlen(msg), part, count, what, &span);
    if (expect == NULL) {
        return rc == -1;
    }
    if (rc != 0 || span.offset > strlen(msg) || span.length != strlen(expect) ||
        strncmp(msg + span.offset, expect, span.length) != 0) {
        fprintf(stderr, "  section %s (%d): rc %d, got \"%.*s\"\n", path, (int)what, rc,
                rc == 0 ? (int)span.length : 0, rc == 0 ? msg + span.offset : "");
        return 0;
    }
    return 1;
}

static int
tm_section(const char *msg, const char *path, enum imap_mime_what what, const char *expect)
{
    char *msg_crlf = tm_crlf(msg);
    char *expect_crlf = expect != NULL ? tm_crlf(expect) : NULL;
    int ok = tm_one(msg, path, what, expect) && tm_one(msg_crlf, path, what, expect_crlf);
    free(msg_crlf);
    free(expect_crlf);
    return ok;
}

#define C  IMAP_MIME_CONTENT
#define H  IMAP_MIME_HEADER
#define MH IMAP_MIME_MESSAGE_HEADER
#define MT IMAP_MIME_MESSAGE_TEXT

/* A multipart holding a message/rfc822 holding a multipart holding a message/rfc822. */
static const char tm_nested[] = "From: a@example.org\n"
                                "Subject: outer\n"
                                "MIME-Version: 1.0\n"
                                "Content-Type: multipart/mixed;\n"
                                "\tboundary=\"OUT\"\n"
                                "\n"
                                "preamble\n"
                                "--OUT\n"
                                "Content-Type: text/plain\n"
                                "\n"
                                "hello\n"
                                "--OUT\n"
                                "Content-Type: message/rfc822\n"
                                "Content-Description: fwd\n"
                                "\n"
                                "From: b@example.org\n"
                                "Subject: middle\n"
                                "Content-Type: multipart/alternative; boundary=MID\n"
                                "\n"
                                "--MID\n"
                                "Content-Type: text/plain\n"
                                "\n"
                                "inner plain\n"
                                "--MID \n" /* transport padding */
                                "Content-Type: message/rfc822\n"
                                "\n"
                                "Subject: deep\n"
                                "X-Tag: 1\n"
                                "\n"
                                "deep body\n"
                                "--MID--\n"
                                "--OUT\n"
                                "Content-Type: application/octet-stream\n"
                                "Content-Transfer-Encoding: base64\n"
                                "\n"
                                "AAEC\n"
                                "--OUT--\n"
                                "epilogue\n";

static const char tm_middle_header[] = "From: b@example.org\n"
                                       "Subject: middle\n"
                                       "Content-Type: multipart/alternative; boundary=MID\n"
                                       "\n";
static const char tm_middle_text[] = "--MID\n"
                                     "Content-Type: text/plain\n"
                                     "\n"
                                     "inner plain\n"
                                     "--MID \n"
                                     "Content-Type: message/rfc822\n"
                                     "\n"
                                     "Subject: deep\n"
                                     "X-Tag: 1\n"
                                     "\n"
                                     "deep body\n"
                                     "--MID--";

static void test_nested_parts(void)
{
    CHECK(tm_section(tm_nested, "1", C, "hello"));
    CHECK(tm_section(tm_nested, "1", H, "Content-Type: text/plain\n\n"));
    CHECK(tm_section(tm_nested, "3", C, "AAEC"));
    CHECK(tm_section(tm_nested, "3", H,
                     "Content-Type: application/octet-stream\n"
                     "Content-Transfer-Encoding: base64\n\n"));
    CHECK(tm_section(tm_nested, "2", H,
                     "Content-Type: message/rfc822\nContent-Description: fwd\n\n"));
    CHECK(tm_section(tm_nested, "2", MH, tm_middle_header));
    CHECK(tm_section(tm_nested, "2", MT, tm_middle_text));
    char whole[sizeof tm_middle_header + sizeof tm_middle_text];
    snprintf(whole, sizeof whole, "%s%s", tm_middle_header, tm_middle_text);
    CHECK(tm_section(tm_nested, "2", C, whole)); /* BODY[2]: the whole inner message */
    CHECK(tm_section(tm_nested, "2.1", C, "inner plain"));
    CHECK(tm_section(tm_nested, "2.1", H, "Content-Type: text/plain\n\n"));
    CHECK(tm_section(tm_nested, "2.2", H, "Content-Type: message/rfc822\n\n"));
    CHECK(tm_section(tm_nested, "2.2", C, "Subject: deep\nX-Tag: 1\n\ndeep body"));
    CHECK(tm_section(tm_nested, "2.2", MH, "Subject: deep\nX-Tag: 1\n\n"));
    CHECK(tm_section(tm_nested, "2.2", MT, "deep body"));
    CHECK(tm_section(tm_nested, "2.2.1", C, "deep body")); /* a single-part message: 1 */
}

static void test_no_such_part(void)
{
    CHECK(tm_section(tm_nested, "4", C, NULL));
    CHECK(tm_section(tm_nested, "0", C, NULL));
    CHECK(tm_section(tm_nested, "2.3", C, NULL));
    CHECK(tm_section(tm_nested, "1.2", C, NULL));
    CHECK(tm_section(tm_nested, "2.2.2", C, NULL));
    CHECK(tm_section(tm_nested, "1", MH, NULL)); /* HEADER of a text part */
    CHECK(tm_section(tm_nested, "2.1", MT, NULL));
    CHECK(tm_section(tm_nested, "", C, NULL));
    static const char no_boundary[] = "Content-Type: multipart/mixed\n\n--x\n\nbody\n";
    CHECK(tm_section(no_boundary, "1", C, NULL));
    static const char closed[] = "Content-Type: multipart/mixed; boundary=B\n\n"
                                 "--B\n\none\n--B--\n--B\n\nafter close\n";
    CHECK(tm_section(closed, "1", C, "one"));
    CHECK(tm_section(closed, "2", C, NULL));
}

static void test_missing_close_delimiter(void)
{
    static const char msg[] = "Content-Type: multipart/mixed; boundary=B\n"
                              "\n"
                              "--B\n"
                              "\n"
                              "first, no header\n"
                              "--B\n"
                              "Content-Type: multipart/related; boundary=\"C\"\n"
                              "\n"
                              "--C\n"
                              "\n"
                              "c1\n"
                              "--Bogus\n"
                              "--C\n"
                              "Content-Type: text/html\n"
                              "\n"
                              "<p>last</p>\n";
    CHECK(tm_section(msg, "1", C, "first, no header"));
    CHECK(tm_section(msg, "1", H, "\n"));
    CHECK(tm_section(msg, "2.1", C, "c1\n--Bogus")); /* not a delimiter of B or C */
    CHECK(tm_section(msg, "2.2", C, "<p>last</p>\n"));
    CHECK(tm_section(msg, "2.2", H, "Content-Type: text/html\n\n"));
    CHECK(tm_section(msg, "2.3", C, NULL));
    CHECK(tm_section(msg, "3", C, NULL));
}

static void test_headers_only_and_empty(void)
{
    static const char headers_only[] = "Subject: x\nFrom: y@example.org\n";
    CHECK(tm_section(headers_only, "1", C, ""));
    CHECK(tm_section(headers_only, "2", C, NULL));
    static const char single[] = "Subject: x\n\nline 1\nline 2\n";
    CHECK(tm_section(single, "1", C, "line 1\nline 2\n"));
    static const char multipart_headers_only[] = "Content-Type: multipart/mixed; boundary=B\n";
    CHECK(tm_section(multipart_headers_only, "1", C, NULL));
    static const char empty_parts[] = "Content-Type: multipart/mixed; boundary=B\n\n"
                                      "--B\n--B\nX: 1\n--B--\n";
    CHECK(tm_section(empty_parts, "1", C, ""));
    CHECK(tm_section(empty_parts, "1", H, ""));
    CHECK(tm_section(empty_parts, "2", C, ""));
    CHECK(tm_section(empty_parts, "2", H, "X: 1"));
    static const char rfc822_headers_only[] = "Content-Type: message/rfc822\n\nSubject: in\n";
    CHECK(tm_section(rfc822_headers_only, "1", C, "Subject: in\n"));
    CHECK(tm_section(rfc822_headers_only, "1", MH, "Subject: in\n"));
    CHECK(tm_section(rfc822_headers_only, "1", MT, ""));
    CHECK(tm_section(rfc822_headers_only, "1.1", C, ""));
}

static void test_digest_and_case(void)
{
    static const char digest[] = "content-type: Multipart/Digest; Boundary=\"d d\"\n\n"
                                 "--d d\n\nSubject: one\n\nbody one\n"
                                 "--d d\nContent-Type: text/plain\n\nnot a message\n"
                                 "--d d--\n";
    CHECK(tm_section(digest, "1", MH, "Subject: one\n\n"));
    CHECK(tm_section(digest, "1", MT, "body one"));
    CHECK(tm_section(digest, "1.1", C, "body one"));
    CHECK(tm_section(digest, "2", C, "not a message"));
    CHECK(tm_section(digest, "2", MH, NULL));
}

/* The walk's shortcut past GMime's Content-Type parser (imap_mime_plain_leaf): taken only for
 * a plain media type other than multipart and message, and then GMime agrees it is a leaf;
 * comments, quotes, blanks before the '/', 8-bit bytes and the two container types go to
 * GMime; the part numbers come out the same either way. */
static void test_plain_leaf_shortcut(void)
{
    static const struct {
        const char *value;
        int leaf;
    } cases[] = {
        {"text/plain; charset=utf-8", 1},
        {" \ttext/html", 1},
        {"application/vnd.ms-excel", 1},
        {"image/x-icon; name=\"a.ico\"", 1},
        {"multipartx/mixed", 1},
        {"messages/rfc822", 1},
        {"x-unknown/thing", 1},
        {"multipart/mixed; boundary=b", 0},
        {"MultiPart/Alternative", 0},
        {"message/rfc822", 0},
        {"MESSAGE/global", 0},
        {"(comment) multipart/mixed; boundary=b", 0},
        {"\"text\"/plain", 0},
        {"text /plain", 0},
        {"text", 0},
        {"/plain", 0},
        {"", 0},
        {"t\xc3\xa9xt/plain", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int leaf = imap_mime_plain_leaf(cases[i].value);
        CHECK_EQ_INT(leaf, cases[i].leaf);
        if (!leaf) {
            continue;
        }
        GMimeContentType *ct = g_mime_content_type_parse(NULL, cases[i].value);
        CHECK(ct != NULL);
        const char *type = g_mime_content_type_get_media_type(ct);
        int container = strcasecmp(type, "multipart") == 0 || strcasecmp(type, "message") == 0;
        g_object_unref(ct);
        CHECK(!container);
    }
    /* Through the walk: a multipart behind a comment still has parts; a plain type has one. */
    static const char commented[] = "Content-Type: (why) multipart/mixed; boundary=b\n\n"
                                    "--b\nContent-Type: text/plain\n\none\n"
                                    "--b\nContent-Type: image/png\n\ntwo\n--b--\n";
    CHECK(tm_section(commented, "1", C, "one"));
    CHECK(tm_section(commented, "2", C, "two"));
    CHECK(tm_section(commented, "2.1", C, "two"));
    CHECK(tm_section(commented, "2.2", C, NULL));
    CHECK(tm_section(commented, "3", C, NULL));
    static const char plain[] =
        "Content-Type: text/plain; boundary=b\n\n--b\n\nnot a part\n--b--\n";
    CHECK(tm_section(plain, "1", C, "--b\n\nnot a part\n--b--\n"));
    CHECK(tm_section(plain, "2", C, NULL));
}

/* A message of more than twice IMAP_MIME_STRUCTURE_MAX bytes with a big attachment cut out:
 * the stand-in's flat reading comes from the skeleton alone (imap_mime_stand_in_flat), the
 * same as the message's and the stand-in's own, with structure lines enough (1) or not (0);
 * its filler is one line where imap_mime_stand_in_gaps says, and the sections located in it
 * with the gaps (the filler stepped over) and without (read through) are the message's. */
static void tm_stand_in_case(size_t fields, int expect_flat)
{
    static const char head[] = "Content-Type: multipart/mixed; boundary=b\n\n"
                               "--b\nContent-Type: text/plain\n\n";
    static const char mid[] = "\n--b\nContent-Type: application/octet-stream\n\n";
    static const char tail[] = "\n--b--\n";
    size_t cut_size = 300000, body = fields * 3;
    size_t size = strlen(head) + body + strlen(mid) + cut_size + strlen(tail);
    char *msg = malloc(size), *skel = malloc(size);
    CHECK(msg != NULL && skel != NULL);
    size_t at = 0;
    memcpy(msg + at, head, strlen(head));
    at += strlen(head);
    for (size_t i = 0; i < fields; i++, at += 3) {
        memcpy(msg + at, "a:\n", 3);
    }
    memcpy(msg + at, mid, strlen(mid));
    at += strlen(mid);
    size_t position = at;
    for (size_t i = 0; i < cut_size; i++) {
        msg[at + i] = (i + 1) % 77 == 0 ? '\n' : 'Q';
    }
    msg[at + cut_size - 1] = '\n';
    at += cut_size;
    memcpy(msg + at, tail, strlen(tail));
    memcpy(skel, msg, position);
    memcpy(skel + position, msg + position + cut_size, strlen(tail));
    size_t skel_len = position + strlen(tail);
    struct mv_message_cut cut = {.position = position, .size = cut_size, .lines = 0, .marks = 0};
    char *whole = NULL;
    CHECK_EQ_INT(imap_mime_stand_in(skel, skel_len, &cut, 1, size, &whole), MV_OK);
    int flat = imap_mime_stand_in_flat(skel, skel_len, size);
    CHECK_EQ_INT(flat, expect_flat);
    CHECK_EQ_INT(imap_mime_flat(whole, size), flat);
    CHECK_EQ_INT(imap_mime_flat(msg, size), flat);
    struct imap_mime_gap gap;
    imap_mime_stand_in_gaps(&cut, 1, &gap);
    CHECK(gap.start == position && gap.end == position + cut_size);
    CHECK(whole[gap.start] == 'x' && whole[gap.end - 2] == 'x' && whole[gap.end - 1] == '\n');
    struct imap_mime_reading gaps = {.gap = &gap, .count = 1};
    for (uint32_t p = 1; p <= 3; p++) {
        for (int what = IMAP_MIME_CONTENT; what <= IMAP_MIME_HEADER; what++) {
            struct imap_mime_span s = {0, 0}, r = {0, 0}, u = {0, 0};
            int in_whole = imap_mime_section_flat(whole, size, flat, &gaps, &p, 1,
                                                  (enum imap_mime_what)what, &s);
            int unread = imap_mime_section_flat(whole, size, flat, NULL, &p, 1,
                                                (enum imap_mime_what)what, &u);
            int in_msg = imap_mime_section(msg, size, &p, 1, (enum imap_mime_what)what, &r);
            CHECK_EQ_INT(in_whole, in_msg);
            CHECK_EQ_INT(unread, in_msg);
            CHECK(in_msg != 0 || (s.offset == r.offset && s.length == r.length));
            CHECK(in_msg != 0 || (u.offset == r.offset && u.length == r.length));
        }
    }
    imap_mime_stand_in_free(whole, size, &cut, 1);
    free(skel);
    free(msg);
}

static void test_stand_in_flat_from_skeleton(void)
{
    tm_stand_in_case(IMAP_MIME_STRUCTURE_MAX + 10, 1); /* one text part, as GMime is spared */
    tm_stand_in_case(1000, 0);                         /* big by its cut part alone */
}

/* SECTIONS FROM THE HEADER (imap_mime.h): a message of one part is told by its header alone,
 * and every section its header settles is located in the header's bytes where it is in the
 * message; part 1's content is not settled; multiparts and messages are not one part. */
/* 1 if check holds for msg as written and with every LF turned into CRLF. */
static int tm_both_forms(int (*check)(const char *msg), const char *msg)
{
    char *crlf = tm_crlf(msg);
    int ok = check(msg) && check(crlf);
    free(crlf);
    return ok;
}

static int tm_header_agrees(const char *msg)
{
    static const uint32_t paths[][3] = {{1, 0, 0}, {2, 0, 0}, {1, 1, 0}, {1, 2, 0}, {3, 1, 1}};
    static const size_t counts[] = {1, 1, 2, 2, 3};
    size_t len = strlen(msg), hlen = mv_message_header_len(msg, len);
    if (!imap_mime_single_part(msg, hlen)) {
        return 0;
    }
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        for (int what = IMAP_MIME_CONTENT; what <= IMAP_MIME_MESSAGE_TEXT; what++) {
            if (!imap_mime_header_settles(paths[i], counts[i], (enum imap_mime_what)what)) {
                continue;
            }
            struct imap_mime_span h = {0, 0}, w = {0, 0};
            int in_header =
                imap_mime_section(msg, hlen, paths[i], counts[i], (enum imap_mime_what)what, &h);
            int in_msg =
                imap_mime_section(msg, len, paths[i], counts[i], (enum imap_mime_what)what, &w);
            if (in_header != in_msg ||
                (in_msg == 0 && (h.offset != w.offset || h.length != w.length))) {
                fprintf(stderr, "  path %zu what %d: %d/%d\n", i, what, in_header, in_msg);
                return 0;
            }
        }
    }
    return 1;
}

static void test_sections_from_header(void)
{
    static const char *single[] = {
        "Subject: plain\r\n\r\nbody\r\n",
        "Content-Type: text/html; charset=utf-8\r\nSubject: x\r\n\r\n<p>--b</p>\r\n",
        "Content-Type: (why) application/pdf\n\n--b\nContent-Type: text/plain\n\nx\n",
        "Content-Type: text/plain; boundary=b\n\n--b\n\nnot a part\n--b--\n",
        "Subject: only a header\r\n",
        "Content-Type: multipart\n\n--b\n\nunparsable type: a leaf to GMime\n",
    };
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) {
        CHECK(tm_both_forms(tm_header_agrees, single[i]));
    }
    static const char *several[] = {
        tm_nested,
        "Content-Type: multipart/mixed; boundary=b\n\n--b\n\none\n--b--\n",
        "Content-Type: message/rfc822\n\nSubject: inner\n\nbody\n",
        "Content-Type: (c) Multipart/Alternative; boundary=b\n\n--b\n\none\n--b--\n",
    };
    for (size_t i = 0; i < sizeof several / sizeof several[0]; i++) {
        size_t len = strlen(several[i]);
        CHECK(!imap_mime_single_part(several[i], mv_message_header_len(several[i], len)));
    }
    static const uint32_t one[] = {1, 1}, two[] = {1, 2};
    CHECK(!imap_mime_header_settles(one, 1, IMAP_MIME_CONTENT));
    CHECK(!imap_mime_header_settles(one, 2, IMAP_MIME_CONTENT));
    CHECK(imap_mime_header_settles(two, 2, IMAP_MIME_CONTENT));
    CHECK(imap_mime_header_settles(one, 1, IMAP_MIME_HEADER));
    CHECK(imap_mime_header_settles(one, 1, IMAP_MIME_MESSAGE_TEXT));
}

/* A WALK OVER A PREFIX (imap_mime.h): over every prefix of messages with nested parts, a
 * missing close delimiter, a digest, a delimiter in the last line, each section's answer the
 * walk says holds is the message's, and a preview of part 1 of a long multipart holds once
 * the prefix reaches past it. */
static int tm_prefix_agrees(const char *msg)
{
    static const uint32_t paths[][3] = {{1, 0, 0}, {2, 0, 0}, {1, 1, 0}, {2, 1, 0}, {2, 1, 1}};
    static const size_t counts[] = {1, 1, 2, 2, 3};
    size_t size = strlen(msg);
    for (size_t n = 1; n < size; n++) {
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
            for (int what = IMAP_MIME_CONTENT; what <= IMAP_MIME_MESSAGE_TEXT; what++) {
                struct imap_mime_reading r;
                struct imap_mime_span p = {0, 0}, w = {0, 0};
                imap_mime_reading_prefix(&r, msg, n);
                int a = imap_mime_section_flat(msg, n, 0, &r, paths[i], counts[i],
                                               (enum imap_mime_what)what, &p);
                int b = imap_mime_section(msg, size, paths[i], counts[i], (enum imap_mime_what)what,
                                          &w);
                int whole = imap_mime_reading_holds(&r, a, &p, 0, 0, 0);
                int first = imap_mime_reading_holds(&r, a, &p, 1, 0, 4);
                if ((whole &&
                     (a != b || (b == 0 && (p.offset != w.offset || p.length != w.length)))) ||
                    (first && (a != b || (b == 0 && (p.offset != w.offset ||
                                                     (w.length < 4 && w.length != p.length)))))) {
                    fprintf(stderr,
                            "  prefix %zu of %zu, path %zu what %d: %d [%zu+%zu] / %d "
                            "[%zu+%zu]\n",
                            n, size, i, what, a, p.offset, p.length, b, w.offset, w.length);
                    return 0;
                }
            }
        }
    }
    return 1;
}

static void test_prefix_walk(void)
{
    static const char *msgs[] = {
        "Content-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: text/plain\n\none\n"
        "--b\nContent-Type: message/rfc822\n\nSubject: in\nContent-Type: multipart/x; "
        "boundary=c\n\n--c\n\ninner\n--c--\n--b--\n",
        "Content-Type: multipart/mixed; boundary=b\n\npreamble\n--b\n\nno close\n--bb\n",
        "Content-Type: multipart/digest; boundary=d\n\n--d\n\nSubject: x\n\nbody\n--d--\n",
        "Content-Type: multipart/alternative; boundary=b\n\n--b\nContent-Type: text/plain\n\n"
        "--b-not-a-delimiter\n\n--b\nContent-Type: text/html\n\n<p>\n--b--",
    };
    for (size_t m = 0; m < sizeof msgs / sizeof msgs[0]; m++) {
        CHECK(tm_both_forms(tm_prefix_agrees, msgs[m]));
    }
    CHECK(tm_prefix_agrees(tm_nested));
    /* a preview of part 1 of a long multipart, from a prefix that holds it */
    char msg[4096];
    size_t at = (size_t)snprintf(msg, sizeof msg,
                                 "Content-Type: multipart/alternative; boundary=b\r\n\r\n"
                                 "--b\r\nContent-Type: text/plain\r\n\r\n");
    size_t part = at;
    for (int i = 0; i < 30; i++) {
        at += (size_t)snprintf(msg + at, sizeof msg - at, "line %02d of the text part\r\n", i);
    }
    at += (size_t)snprintf(msg + at, sizeof msg - at, "\r\n--b\r\n\r\n<p>html</p>\r\n--b--\r\n");
    static const uint32_t one = 1;
    struct imap_mime_reading r;
    struct imap_mime_span p = {0, 0};
    imap_mime_reading_prefix(&r, msg, part + 300);
    CHECK_EQ_INT(imap_mime_section_flat(msg, part + 300, 0, &r, &one, 1, IMAP_MIME_CONTENT, &p), 0);
    CHECK(p.offset == part && imap_mime_reading_holds(&r, 0, &p, 1, 0, 256));
    CHECK(!imap_mime_reading_holds(&r, 0, &p, 0, 0, 0)); /* the whole part: past the prefix */
    CHECK(!imap_mime_reading_holds(&r, 0, &p, 1, 0, 300));
    CHECK(at < sizeof msg);
}

static void test_too_much_structure(void)
{
    /* Over IMAP_MIME_STRUCTURE_MAX lines that could open a field: one text part, as in
     * BODYSTRUCTURE. */
    static const char head[] = "Content-Type: multipart/mixed; boundary=B\n\n--B\n\n";
    size_t lines = IMAP_MIME_STRUCTURE_MAX + 1, n = strlen(head) + lines * 4 + 1;
    char *msg = malloc(n);
    CHECK(msg != NULL);
    memcpy(msg, head, strlen(head));
    for (size_t i = 0; i < lines; i++) {
        memcpy(msg + strlen(head) + i * 4, "a:b\n", 4);
    }
    msg[n - 1] = '\0';
    struct imap_mime_span span = {0, 0};
    const uint32_t one = 1, two = 2;
    int rc1 = imap_mime_section(msg, n - 1, &one, 1, C, &span);
    struct imap_mime_span none = {0, 0};
    int rc2 = imap_mime_section(msg, n - 1, &two, 1, C, &none);
    free(msg);
    CHECK_EQ_INT(rc1, 0);
    CHECK_EQ_INT(span.offset, strlen(head) - strlen("--B\n\n")); /* all after the header */
    CHECK_EQ_INT(span.length, n - 1 - span.offset);
    CHECK_EQ_INT(rc2, -1);
    CHECK(tm_section(head, "1", C, "")); /* within the limit: an empty first part */
}

/* ENVELOPE and BODYSTRUCTURE strings with 8-bit bytes (RFC 6855 3): literals (and an RFC 2047
 * display name) for a plain session; quoted UTF-8 once UTF8=ACCEPT is enabled, except bytes
 * that are not UTF-8, which stay literals. */
static void test_utf8_strings(void)
{
    static const char msg[] = "From: \"Ren\xc3\xa9"
                              "e\" <r@example.org>\n"
                              "To: \xce\xb4\xce\xbf@example.org\n"
                              "Subject: Caf\xc3\xa9\n"
                              "In-Reply-To: <x\xe9@example.org>\n"
                              "Content-Type: text/plain; name*=utf-8''caf%C3%A9.txt\n\n"
                              "body\n";
    struct imap_mime *m = NULL;
    CHECK_EQ_INT(imap_mime_open(msg, strlen(msg), &m), MV_OK);
    if (m == NULL) {
        return;
    }
    struct buf plain = {0}, utf8 = {0}, bs_plain = {0}, bs_utf8 = {0};
    imap_mime_envelope(m, &plain);
    imap_mime_bodystructure(m, &bs_plain, 1);
    imap_mime_set_utf8(m, 1);
    imap_mime_envelope(m, &utf8);
    imap_mime_bodystructure(m, &bs_utf8, 1);
    imap_mime_close(&m);
    CHECK(!plain.oom && !utf8.oom && !bs_plain.oom && !bs_utf8.oom);
    /* plain: every 8-bit string is a literal, the display name an RFC 2047 word */
    CHECK(strstr(plain.data, "{5}\r\nCaf\xc3\xa9") != NULL);
    CHECK(strstr(plain.data, "{4}\r\n\xce\xb4\xce\xbf") != NULL);
    CHECK(strstr(plain.data, "\"=?UTF-8?b?UmVuw6ll?=\"") != NULL);
    CHECK(strstr(bs_plain.data, "{9}\r\ncaf\xc3\xa9.txt") != NULL);
    /* enabled: quoted UTF-8, the name as it is; Latin-1 in In-Reply-To still a literal */
    CHECK(strstr(utf8.data, "\"Caf\xc3\xa9\"") != NULL);
    CHECK(strstr(utf8.data, "((\"Ren\xc3\xa9"
                            "e\" NIL \"r\" \"example.org\"))") != NULL);
    CHECK(strstr(utf8.data, "\"\xce\xb4\xce\xbf\" \"example.org\"") != NULL);
    CHECK(strstr(utf8.data, "{16}\r\n<x\xe9@example.org>") != NULL);
    CHECK(strstr(bs_utf8.data, "\"caf\xc3\xa9.txt\"") != NULL);
    buf_free(&plain);
    buf_free(&utf8);
    buf_free(&bs_plain);
    buf_free(&bs_utf8);
}

/* buf_imap_string_utf8() (imapd/buf.c), written straight into the buffer: RFC 3501 4.3 quoted
 * strings with '"' and '\' escaped, a literal for CR, LF, other controls, over 1024 bytes
 * and 8-bit bytes unless the session enabled UTF8=ACCEPT and they are valid UTF-8 (RFC 6855
 * 3). Each case lands after a prefix of every length 0..600, so the buffer's growth falls at
 * every point of the string; the result must be the prefix, the expected bytes and a NUL. */
static void tm_string_case(const char *s, size_t len, int utf8, const char *want, size_t want_len)
{
    for (size_t pre = 0; pre <= 600; pre++) {
        struct buf b = {0};
        for (size_t i = 0; i < pre; i++) {
            buf_add(&b, "p", 1);
        }
        buf_imap_string_utf8(&b, s, len, utf8);
        CHECK(!b.oom && b.len == pre + want_len);
        if (b.oom || b.len != pre + want_len) {
            buf_free(&b);
            return;
        }
        CHECK(memcmp(b.data + pre, want, want_len) == 0);
        CHECK(b.data[b.len] == '\0' && b.len < b.cap);
        buf_free(&b);
    }
}

#define TM_STRING(s, utf8, want) tm_string_case(s, sizeof(s) - 1, utf8, want, sizeof(want) - 1)

static void test_imap_string_quoting(void)
{
    TM_STRING("", 0, "\"\"");
    TM_STRING("Subject text", 0, "\"Subject text\"");
    TM_STRING("a\"b\\c", 0, "\"a\\\"b\\\\c\"");
    TM_STRING("\"", 0, "\"\\\"\"");
    TM_STRING("\\\\", 0, "\"\\\\\\\\\"");
    TM_STRING("\"Ren\xc3\xa9\" \\ x", 1, "\"\\\"Ren\xc3\xa9\\\" \\\\ x\"");
    TM_STRING("Caf\xc3\xa9", 0, "{5}\r\nCaf\xc3\xa9");
    TM_STRING("Caf\xc3\xa9", 1, "\"Caf\xc3\xa9\"");
    TM_STRING("x\xe9\"", 1, "{3}\r\nx\xe9\"");
    TM_STRING("a\tb", 0, "{3}\r\na\tb");
    TM_STRING("a\r\nb\"", 1, "{5}\r\na\r\nb\"");
    TM_STRING("\x7f", 0, "{1}\r\n\x7f");
    /* 1024 bytes with a '"' and a '\' are still quoted (1028 out); 1025 make a literal */
    char big[1026], want[1040];
    memset(big, 'a', sizeof big);
    big[0] = '"';
    big[1023] = '\\';
    want[0] = '"';
    want[1] = '\\';
    want[2] = '"';
    memset(want + 3, 'a', 1022);
    want[1025] = '\\';
    want[1026] = '\\';
    want[1027] = '"';
    tm_string_case(big, 1024, 0, want, 1028);
    memcpy(want, "{1025}\r\n", 8);
    memcpy(want + 8, big, 1025);
    tm_string_case(big, 1025, 0, want, 1033);
    /* a buffer that has failed stays failed */
    struct buf b = {0};
    b.oom = 1;
    buf_imap_string_utf8(&b, "x", 1, 0);
    CHECK(b.len == 0 && b.data == NULL);
}

/* buf_u64, buf_imap_date and literal heads (buf.c): the same bytes as the printf formats
 * they replace ("%llu"; INTERNALDATE's "%02d-%.3s-%04d %02d:%02d:%02d +0000", RFC 3501
 * date-time), for the edges and a spread of values. */
static void test_buf_numbers_and_dates(void)
{
    static const uint64_t values[] = {0,
                                      1,
                                      9,
                                      10,
                                      99,
                                      100,
                                      4294967295u,
                                      4294967296u,
                                      1000000000,
                                      9999999999,
                                      UINT64_MAX - 1,
                                      UINT64_MAX};
    struct buf b = {0};
    char want[64];
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        b.len = 0;
        buf_u64(&b, values[i]);
        snprintf(want, sizeof want, "%llu", (unsigned long long)values[i]);
        CHECK(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
    }
    for (uint64_t v = 1; v < UINT64_MAX / 7; v = v * 7 + 3) {
        b.len = 0;
        buf_u64(&b, v);
        snprintf(want, sizeof want, "%llu", (unsigned long long)v);
        CHECK(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
    }
    /* the epoch, a leap day, the end of a year, Y2038, year 9999's last second */
    static const int64_t whens[] = {0, 951782400, 1767225599, 2147483648, 253402300799};
    static const char *const dates[] = {
        "\"01-Jan-1970 00:00:00 +0000\"", "\"29-Feb-2000 00:00:00 +0000\"",
        "\"31-Dec-2025 23:59:59 +0000\"", "\"19-Jan-2038 03:14:08 +0000\"",
        "\"31-Dec-9999 23:59:59 +0000\""};
    for (size_t i = 0; i < sizeof whens / sizeof whens[0]; i++) {
        b.len = 0;
        buf_imap_date(&b, whens[i]);
        CHECK(b.len == strlen(dates[i]) && memcmp(b.data, dates[i], b.len) == 0);
    }
    /* every hour of a few years against the printf format (one second past each hour) */
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    for (int64_t when = 946684800 - 3 * 86400; when < 946684800 + 3 * 366 * 86400; when += 3601) {
        time_t t = (time_t)when;
        struct tm tm;
        CHECK(gmtime_r(&t, &tm) != NULL);
        snprintf(want, sizeof want, "\"%02d-%.3s-%04d %02d:%02d:%02d +0000\"", tm.tm_mday,
                 months + (size_t)3 * (size_t)tm.tm_mon, tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
                 tm.tm_sec);
        b.len = 0;
        buf_imap_date(&b, when);
        CHECK(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
    }
    /* a year of five digits goes through printf's width: still the same bytes */
    b.len = 0;
    buf_imap_date(&b, 253402300800);
    CHECK(b.len == 29 && memcmp(b.data, "\"01-Jan-10000 00:00:00 +0000\"", 29) == 0);
    /* a literal's head: "{len}" CRLF, then the bytes */
    b.len = 0;
    buf_literal(&b, "abc", 3);
    CHECK(b.len == 8 && memcmp(b.data, "{3}\r\nabc", 8) == 0);
    b.len = 0;
    buf_literal(&b, "", 0);
    CHECK(b.len == 5 && memcmp(b.data, "{0}\r\n", 5) == 0);
    buf_free(&b);
    /* a buffer that has failed stays failed */
    b.oom = 1;
    buf_u64(&b, 12345);
    buf_imap_date(&b, 0);
    BUF_LIT(&b, "x");
    CHECK(b.len == 0 && b.data == NULL);
}

/* RFC 5322 2.1 / RFC 3501 6.4.5: a message or part that starts with an empty line has an
 * empty header; its content is everything after that line (not up to the next empty line). */
static void test_empty_header(void)
{
    static const char top[] = "\nfirst paragraph\n\nsecond paragraph\n";
    CHECK(tm_section(top, "1", C, "first paragraph\n\nsecond paragraph\n"));
    static const char parts[] = "Content-Type: multipart/mixed; boundary=B\n\n"
                                "--B\n\nno header\n\nstill part one\n"
                                "--B\nContent-Type: message/rfc822\n\n\ninner body\n\nmore\n"
                                "--B--\n";
    CHECK(tm_section(parts, "1", C, "no header\n\nstill part one"));
    CHECK(tm_section(parts, "1", H, "\n"));
    CHECK(tm_section(parts, "2", MH, "\n"));
    CHECK(tm_section(parts, "2", MT, "inner body\n\nmore"));

    /* The fallback BODYSTRUCTURE (too much structure for GMime) counts the same body: all
     * but the first line. */
    size_t lines = IMAP_MIME_STRUCTURE_MAX + 1, n = 1 + lines * 4;
    char *flat = malloc(n + 1);
    CHECK(flat != NULL);
    flat[0] = '\n';
    for (size_t i = 0; i < lines; i++) {
        memcpy(flat + 1 + i * 4, "a:b\n", 4);
    }
    flat[n] = '\0';
    struct imap_mime *m = NULL;
    CHECK_EQ_INT(imap_mime_open(flat, n, &m), MV_OK);
    struct buf bs = {0};
    imap_mime_bodystructure(m, &bs, 0);
    imap_mime_close(&m);
    free(flat);
    char want[64];
    snprintf(want, sizeof want, " %zu %zu)", n - 1, lines);
    int ok = bs.data != NULL && strstr(bs.data, want) != NULL;
    if (!ok) {
        fprintf(stderr, "  BODYSTRUCTURE %s\n", bs.data != NULL ? bs.data : "(none)");
    }
    buf_free(&bs);
    CHECK(ok);
}

/* RFC 5322 2.2.3 / RFC 2045 5.1: a folded Content-Type is unfolded by removing the CRLF, so
 * boundary="foo CRLF SP bar" is "foo bar" -- the delimiter the parts use -- not "foo   bar". */
static void test_folded_boundary(void)
{
    static const char msg[] = "Content-Type: multipart/mixed; boundary=\"foo\n bar\"\n\n"
                              "--foo bar\nContent-Type: text/plain\n\none\n"
                              "--foo bar\n\ntwo\n"
                              "--foo bar--\n";
    CHECK(tm_section(msg, "1", C, "one"));
    CHECK(tm_section(msg, "1", H, "Content-Type: text/plain\n\n"));
    CHECK(tm_section(msg, "2", C, "two"));
    CHECK(tm_section(msg, "3", C, NULL));
}

/* 1 if the two readings of one message give the same ENVELOPE: gmime_side with GMime's address
 * parser forced on, scan_side as the server reads it (the header scan, GMime only where the
 * scan gives up). Closes both handles; prints both strings, labelled, when they differ. */
static int tm_envelopes_agree(struct imap_mime **gmime_side,
                              struct imap_mime **scan_side,
                              int utf8,
                              const char *label,
                              size_t index)
{
    imap_mime_set_gmime_addresses(*gmime_side, 1);
    imap_mime_set_utf8(*gmime_side, utf8);
    imap_mime_set_utf8(*scan_side, utf8);
    struct buf ea = {0}, eb = {0};
    imap_mime_envelope(*gmime_side, &ea);
    imap_mime_envelope(*scan_side, &eb);
    imap_mime_close(gmime_side);
    imap_mime_close(scan_side);
    int same = !ea.oom && !eb.oom && ea.len == eb.len && memcmp(ea.data, eb.data, ea.len) == 0;
    if (!same) {
        fprintf(stderr, "  %s %zu (utf8 %d):\n  GMime %.*s\n  scan  %.*s\n", label, index, utf8,
                (int)ea.len, ea.data != NULL ? ea.data : "", (int)eb.len,
                eb.data != NULL ? eb.data : "");
    }
    buf_free(&ea);
    buf_free(&eb);
    return same;
}

/* ENVELOPE read from a plain header without GMime's message (imap_mime_open_envelope,
 * issue 13) is the same as through GMime, for plain headers of every shape the scan handles
 * (folds, CRLF and LF, duplicates, empty and missing fields, groups, routes, encoded words,
 * UTF-8), plain sessions and UTF8=ACCEPT ones; headers that are not plain take GMime's path. */
static void test_envelope_without_gmime(void)
{
    static const char *const msgs[] = {
        "From: A <a@example.org>\r\nTo: b@example.org, \"C, D\" <c@example.org>\r\n"
        "Subject: hello\r\nDate: Mon, 5 Jan 2026 10:00:00 +0000\r\n"
        "Message-ID: <m1@example.org>\r\n\r\nbody\r\n",
        "from: a@example.org\nSUBJECT:no space\nsubject: second one\nCc:\nBcc: \n"
        "Sender: s@example.org\nReply-To: r@example.org\n\n",
        "Subject: folded\r\n\tover two\r\n  and three lines\r\nTo: group: x@example.org,\r\n"
        " y@example.org;, z@example.org\r\nIn-Reply-To: <p@example.org>\r\n\r\n",
        "From: =?utf-8?q?Ren=C3=A9e?= <r@example.org>\nTo: "
        "<@relay.example,@b.example:t@example.org>\n"
        "Subject: =?iso-8859-1?q?caf=E9?=\n\n",
        "From: \"Ren\xc3\xa9"
        "e\" <r@example.org>\nTo: \xce\xb4\xce\xbf@example.org\n"
        "Subject: Caf\xc3\xa9\n\n",
        "X-Only: nothing ENVELOPE reads\n\nbody\n",
        "Subject: no empty line, no body",
        "Subject: trailing spaces   \t\r\nFrom: (comment) a@example.org (more)\r\n\r\n",
        "X-Long: a\r\n b\r\nFrom: undisclosed-recipients:;\r\n\r\n",
        /* names that start like ENVELOPE's, an empty Reply-To, a route in From */
        "Tox: no\nFromage: no\nReply-To:\nSender-X: no\nFrom: <@r.example:a@example.org>\n"
        "To: t@example.org\nMessage-IDs: no\n\n",
        /* not plain: GMime's path (a space before the colon, a continuation first, a From_ line) */
        "Subject : spaced name\nFrom: a@example.org\n\n",
        " leading continuation\nSubject: x\n\n",
        "From someone Mon Jan  5 10:00:00 2026\nSubject: mbox\n\n",
    };
    for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
        for (int utf8 = 0; utf8 <= 1; utf8++) {
            struct imap_mime *a = NULL, *b = NULL;
            size_t len = strlen(msgs[i]);
            CHECK_EQ_INT(imap_mime_open(msgs[i], len, &a), MV_OK);
            CHECK_EQ_INT(imap_mime_open_envelope(msgs[i], len, &b), MV_OK);
            if (a == NULL || b == NULL) {
                imap_mime_close(&a);
                imap_mime_close(&b);
                continue;
            }
            CHECK(tm_envelopes_agree(&a, &b, utf8, "message", i));
        }
    }
}

/* Sender and Reply-To that are absent or empty are From's addresses (RFC 3501 7.4.2), route
 * included, on both paths (they copy From's answer instead of parsing From again). */
static void test_envelope_sender_defaults(void)
{
    static const char msg[] = "Reply-To: \r\nFrom: \"A B\" <@r.example:a@example.org>, "
                              "c@example.org\r\nSubject: s\r\n\r\n";
    static const char want[] =
        "(NIL \"s\" ((\"A B\" \"@r.example\" \"a\" \"example.org\")(NIL NIL \"c\" "
        "\"example.org\")) ((\"A B\" \"@r.example\" \"a\" \"example.org\")(NIL NIL \"c\" "
        "\"example.org\")) ((\"A B\" \"@r.example\" \"a\" \"example.org\")(NIL NIL \"c\" "
        "\"example.org\")) NIL NIL NIL NIL NIL)";
    for (int path = 0; path <= 1; path++) {
        struct imap_mime *m = NULL;
        CHECK_EQ_INT(path == 0 ? imap_mime_open(msg, sizeof msg - 1, &m)
                               : imap_mime_open_envelope(msg, sizeof msg - 1, &m),
                     MV_OK);
        struct buf e = {0};
        imap_mime_envelope(m, &e);
        imap_mime_close(&m);
        if (e.data == NULL || strcmp(e.data, want) != 0) {
            fprintf(stderr, "  path %d: %s\n", path, e.data != NULL ? e.data : "(null)");
        }
        CHECK(e.data != NULL && strcmp(e.data, want) == 0);
        buf_free(&e);
    }
}

/* Address fields read without GMime's address parser (imap_mime_addresses_simple) give the
 * bytes GMime's would, for the common forms it reads and for near misses it must leave to
 * GMime (every field of every message below, plain and UTF8=ACCEPT sessions). */
static void test_envelope_simple_addresses(void)
{
    static const char *const values[] = {
        "a@example.org",
        "<a@example.org>",
        "A B <a@example.org>",
        "Anna Berg<a.b@example.org>",
        "A\t<a@example.org>",
        "\"Berg, Anna\" <a@example.org>",
        "a@example.org, B <b@example.org>,c@example.org",
        "A <a@x.org>\t, b@y.org",
        "a.b.c@d.e.f",
        "a+tag@example.org",
        "O'Brien <o@example.org>",
        "UPPER@EXAMPLE.ORG",
        "a@example",
        "A=B <a@example.org>",
        "a..b@example.org",
        ".a@example.org",
        "a.@example.org",
        "a@xn--bcher-kva.example",
        "A  B <a@example.org>",
        "\"  A\" <a@example.org>",
        "\"A \" <a@example.org>",
        "\"\" <a@example.org>",
        "\"A \\\"q\\\"\" <a@example.org>",
        "a@example.org,",
        ",a@example.org",
        "a@example.org,,b@example.org",
        "A <a@example.org> (comment)",
        "(comment) a@example.org",
        "=?utf-8?q?Ann?= <a@example.org>",
        "A.B <a@example.org>",
        "\"A\" B <a@example.org>",
        "A <a @example.org>",
        "A < a@example.org>",
        "a@[192.0.2.1]",
        "x",
        "A <a@example.org>>",
        "<a@example.org> trailing",
        "<@r.example:a@example.org>",
        "g: a@example.org;",
        "a@b@example.org",
        "A <>",
        "a@example.org b@example.org",
        "1@2.3, \"!#$%&'*+-/=?^_`{|}~\" <z@example.org>",
        "a,b@example.org",
    };
    for (size_t i = 0; i < sizeof values / sizeof values[0] + 1; i++) {
        char msg[4096];
        if (i < sizeof values / sizeof values[0]) {
            snprintf(msg, sizeof msg, "From: %s\r\nTo: %s\r\nCc: x@example.org, %s\r\n\r\n",
                     values[i], values[i], values[i]);
        } else { /* more addresses than the simple reader takes */
            size_t n = (size_t)snprintf(msg, sizeof msg, "To: a0@example.org");
            for (int k = 1; k < 40; k++) {
                n += (size_t)snprintf(msg + n, sizeof msg - n, ", A%d <a%d@example.org>", k, k);
            }
            snprintf(msg + n, sizeof msg - n, "\r\n\r\n");
        }
        for (int utf8 = 0; utf8 <= 1; utf8++) {
            struct imap_mime *a = NULL, *b = NULL;
            CHECK_EQ_INT(imap_mime_open_envelope(msg, strlen(msg), &a), MV_OK);
            CHECK_EQ_INT(imap_mime_open_envelope(msg, strlen(msg), &b), MV_OK);
            CHECK(tm_envelopes_agree(&a, &b, utf8, "value", i));
        }
    }
}

/* ASan's allocator hooks (sanitizer/allocator_interface.h, which gcc does not ship): the free
 * hook runs for every block about to be freed, in any library, while it is still readable. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
size_t __sanitizer_get_allocated_size(const volatile void *p);

#define TM_WIPE_MARK "Qx8WipeMarkMime"
static atomic_int tm_wipe_armed;
static atomic_size_t tm_wipe_min; /* blocks this large or larger: whole copies of the message */
static atomic_int tm_wipe_found;

static void tm_wipe_malloc_hook(const volatile void *p, size_t n)
{
    (void)p; /* both hooks or none: ASan takes none alone */
    (void)n;
}

static void tm_wipe_free_hook(const volatile void *p)
{
    if (p == NULL || !atomic_load(&tm_wipe_armed)) {
        return;
    }
    size_t n = __sanitizer_get_allocated_size(p);
    const char *b = (const char *)(uintptr_t)p;
    if (n >= atomic_load(&tm_wipe_min) && memmem(b, n, TM_WIPE_MARK, strlen(TM_WIPE_MARK))) {
        atomic_fetch_add(&tm_wipe_found, 1);
    }
}

/* BODYSTRUCTURE and ENVELOPE parse the message with GMime, from a copy of it in a memory
 * stream (imap_mime_open): the copy is wiped before it is freed, as every other buffer of the
 * server that holds a message. The old imap_mime_close let GMime free it as it was (1 != 0).
 * Only blocks as large as the message are looked at: GMime's own small strings (a header
 * value) are GMime's. */
static void test_parse_copy_wiped(void)
{
    size_t cap = 80000, len = 0;
    char *msg = malloc(cap);
    CHECK(msg != NULL);
    len += (size_t)snprintf(msg + len, cap - len,
                            "From: a@example.org\r\nSubject: " TM_WIPE_MARK "\r\n"
                            "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n"
                            "\r\n--b\r\nContent-Type: text/plain\r\n\r\n");
    while (len + 200 < cap) {
        len += (size_t)snprintf(msg + len, cap - len, "a line of the %s body\r\n", TM_WIPE_MARK);
    }
    len += (size_t)snprintf(msg + len, cap - len, "--b--\r\n");
    CHECK(__sanitizer_install_malloc_and_free_hooks(tm_wipe_malloc_hook, tm_wipe_free_hook) > 0);
    atomic_store(&tm_wipe_min, len);
    atomic_store(&tm_wipe_found, 0);
    atomic_store(&tm_wipe_armed, 1);
    for (int envelope = 0; envelope <= 1; envelope++) {
        struct imap_mime *m = NULL;
        CHECK_EQ_INT(imap_mime_open(msg, len, &m), MV_OK);
        struct buf out = {0};
        if (envelope) {
            imap_mime_envelope(m, &out);
        } else {
            imap_mime_bodystructure(m, &out, 1);
        }
        CHECK(out.len > 0);
        buf_free(&out);
        imap_mime_close(&m);
    }
    atomic_store(&tm_wipe_armed, 0);
    CHECK_EQ_INT(atomic_load(&tm_wipe_found), 0);
    /* and the hook sees a block freed with the message in it */
    char *copy = malloc(len);
    CHECK(copy != NULL);
    memcpy(copy, msg, len);
    atomic_store(&tm_wipe_armed, 1);
    free(copy);
    atomic_store(&tm_wipe_armed, 0);
    CHECK_EQ_INT(atomic_load(&tm_wipe_found), 1);
    free(msg);
}

/* Whether BODYSTRUCTURE and BODY of raw are the same from the top part alone
 * (imap_mime_open_structure) as from the message (imap_mime_open), with and without UTF-8. */
static int tm_structure_agrees(const char *raw, size_t len, const char *what)
{
    int agree = 1;
    for (int utf8 = 0; utf8 <= 1; utf8++) {
        for (int ext = 0; ext <= 1; ext++) {
            struct imap_mime *a = NULL, *b = NULL;
            int opened = imap_mime_open(raw, len, &a) == MV_OK &&
                         imap_mime_open_structure(raw, len, &b) == MV_OK;
            struct buf x = {0}, y = {0};
            if (opened) {
                imap_mime_set_utf8(a, utf8);
                imap_mime_set_utf8(b, utf8);
                imap_mime_bodystructure(a, &x, ext);
                imap_mime_bodystructure(b, &y, ext);
            }
            int same = opened && !x.oom && !y.oom && x.len > 0 && x.len == y.len &&
                       memcmp(x.data, y.data, x.len) == 0;
            if (!same) {
                fprintf(stderr, "  %s (utf8 %d, ext %d):\n  %s\n  %s\n", what, utf8, ext,
                        x.data != NULL ? x.data : "", y.data != NULL ? y.data : "");
            }
            agree = agree && same;
            buf_free(&x);
            buf_free(&y);
            imap_mime_close(&a);
            imap_mime_close(&b);
        }
    }
    return agree;
}

/* BODYSTRUCTURE and BODY of the top part alone (no GMime message, so no address field is
 * parsed) against those of the message, over every message of tests/corpus and shapes of
 * our own: no header, an mbox From_ line, no Content-Type, a header only, nested
 * message/rfc822, 8-bit parameters, a To: of 2,000 addresses (the shape that took
 * 17-28 ms a BODYSTRUCTURE at 10,000 addresses), and top headers whose Content-* fields are
 * folded, late, repeated, in lower case or beside near names (the top part's parse is given
 * only those). */
static void test_bodystructure_without_message(void)
{
    static const char *const shapes[] = {
        "",
        "no header at all\r\n",
        "From someone Mon Jan  5 10:00:00 2026\nSubject: mbox\n\nbody\n",
        "Subject: plain\r\n\r\nline 1\r\nline 2\r\n",
        "Subject: only a header\r\n",
        "Content-Type: text/html; charset=\"iso-8859-1\"; name=\"caf\xe9.html\"\r\n"
        "Content-Disposition: inline; filename=\"caf\xe9.html\"\r\nContent-Language: fr\r\n"
        "Content-Location: http://example.org/a\r\nContent-ID: <c@x>\r\n"
        "Content-Description: d\r\nContent-MD5: Q2hlY2sgSW50ZWdyaXR5IQ==\r\n\r\n<p>x</p>\r\n",
        "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n"
        "Content-Type: message/rfc822\r\n\r\nFrom: in@example.org\r\nSubject: inner\r\n"
        "Content-Type: multipart/alternative; boundary=c\r\n\r\n--c\r\n\r\ntext\r\n--c\r\n"
        "Content-Type: text/html\r\n\r\n<b>x</b>\r\n--c--\r\n--b\r\n"
        "Content-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\n\r\nAAAA\r\n"
        "--b--\r\n",
        /* GMime is given only the top header's Content-* fields (imap_mime_content_fields):
         * folded ones, late ones, repeated ones, lower case, near names, bare LF, an empty
         * header, an empty line only */
        "Received: from a\r\n by b\r\nSubject: s\r\ncontent-type: multipart/mixed;\r\n"
        "\tboundary=\"f\"\r\nX-Content-Type: text/html\r\nContent-Typo: x\r\n"
        "Content-Transfer-Encoding: 8bit\r\n\r\n--f\r\n\r\none\r\n--f--\r\n",
        "Content-Type: text/plain; charset=utf-8\r\nSubject: twice\r\n"
        "Content-Type: text/html\r\n\r\nbody\r\n",
        "From: a@b\nTo: c@d\nContent-Type: text/plain;\n charset=\"iso-8859-1\"\n"
        "Content-Disposition: attachment;\n filename=a.txt\n\nbody\n",
        "\r\nbody after an empty header\r\n",
        "\r\n",
        "Subject: x\r\n\r\n",
        "Subject: no body\r\nContent-Type: text/html\r\n",
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "shape %zu", i);
        CHECK(tm_structure_agrees(shapes[i], strlen(shapes[i]), what));
    }

    char *big = NULL;
    size_t big_len = 0;
    FILE *f = open_memstream(&big, &big_len);
    CHECK(f != NULL);
    if (f != NULL) {
        fputs("From: a@example.org\r\nTo: ", f);
        for (int i = 0; i < 2000; i++) {
            fprintf(f, "%s\"User %d\" <user%d@example.org>", i > 0 ? ",\r\n " : "", i, i);
        }
        fputs("\r\nContent-Type: multipart/mixed; boundary=z\r\n\r\n--z\r\n\r\nhi\r\n--z--\r\n", f);
        fclose(f);
        CHECK(tm_structure_agrees(big, big_len, "2,000 addresses"));
        free(big);
    }

    char dir[1024];
    const char *root = getenv("MV_TEST_ROOT");
    snprintf(dir, sizeof dir, "%s/tests/corpus", root != NULL ? root : ".");
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    size_t files = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".eml") != 0) {
            continue;
        }
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len = 0;
        char *raw = (char *)tu_read_file(path, &len);
        CHECK(raw != NULL);
        if (raw != NULL) {
            CHECK(tm_structure_agrees(raw, len, e->d_name));
            files++;
        }
        free(raw);
    }
    if (d != NULL) {
        closedir(d);
    }
    CHECK(files >= 30); /* the corpus has 36 messages: a wrong directory fails here */
}

/* A multipart whose Content-Type has no boundary: BODYSTRUCTURE lists the parameters the
 * message has, the same at every FETCH (GMime's g_mime_multipart_get_boundary() made one up
 * at random and set it, so each answer listed a different BOUNDARY; the fuzz target's
 * comparison of two parses found it). */
static void test_multipart_without_boundary(void)
{
    static const char msg[] = "Subject: s\r\nContent-Type: multipart/mixed; charset=x\r\n\r\n"
                              "no parts here\r\n";
    static const char want[] =
        "((\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 0 0) \"MIXED\" (\"CHARSET\" \"x\") NIL NIL NIL)";
    for (int i = 0; i < 2; i++) {
        struct imap_mime *m = NULL;
        CHECK_EQ_INT(i == 0 ? imap_mime_open(msg, sizeof msg - 1, &m)
                            : imap_mime_open_structure(msg, sizeof msg - 1, &m),
                     MV_OK);
        struct buf b = {0};
        imap_mime_bodystructure(m, &b, 1);
        imap_mime_close(&m);
        if (b.data == NULL || strcmp(b.data, want) != 0) {
            fprintf(stderr, "  got  %s\n  want %s\n", b.data != NULL ? b.data : "", want);
        }
        CHECK(b.data != NULL && strcmp(b.data, want) == 0);
        buf_free(&b);
    }
}

/* A message of 5,000 attachments (15,000 lines that could open a part or a field) is
 * described part by part, as the store indexed it at delivery and as Dovecot describes up to
 * 10,000 parts; with the bound at 10,000 lines in all it was one text part. */
static void test_five_thousand_parts(void)
{
    char *msg = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&msg, &len);
    CHECK(f != NULL);
    if (f == NULL) {
        return;
    }
    fputs("Subject: p\r\nContent-Type: multipart/mixed; boundary=zz\r\n\r\n", f);
    for (int i = 0; i < 5000; i++) {
        fprintf(f,
                "--zz\r\nContent-Type: text/plain; name=\"p%d.txt\"\r\n"
                "Content-Disposition: attachment\r\n\r\npart %d\r\n",
                i, i);
    }
    fputs("--zz--\r\n", f);
    fclose(f);
    struct imap_mime *m = NULL;
    CHECK_EQ_INT(imap_mime_open_structure(msg, len, &m), MV_OK);
    struct buf b = {0};
    imap_mime_bodystructure(m, &b, 1);
    imap_mime_close(&m);
    size_t parts = 0;
    for (const char *p = b.data; p != NULL && (p = strstr(p, "(\"NAME\" \"p")) != NULL; p++) {
        parts++;
    }
    CHECK_EQ_INT(parts, 5000);
    CHECK(b.data != NULL && strstr(b.data, "(\"NAME\" \"p4999.txt\")") != NULL);
    buf_free(&b);
    free(msg);
}

int main(void)
{
    imap_mime_init();
    TEST(test_nested_parts);
    TEST(test_parse_copy_wiped);
    TEST(test_no_such_part);
    TEST(test_missing_close_delimiter);
    TEST(test_headers_only_and_empty);
    TEST(test_digest_and_case);
    TEST(test_too_much_structure);
    TEST(test_plain_leaf_shortcut);
    TEST(test_stand_in_flat_from_skeleton);
    TEST(test_sections_from_header);
    TEST(test_prefix_walk);
    TEST(test_utf8_strings);
    TEST(test_imap_string_quoting);
    TEST(test_buf_numbers_and_dates);
    TEST(test_empty_header);
    TEST(test_folded_boundary);
    TEST(test_envelope_without_gmime);
    TEST(test_envelope_sender_defaults);
    TEST(test_envelope_simple_addresses);
    TEST(test_bodystructure_without_message);
    TEST(test_multipart_without_boundary);
    TEST(test_five_thousand_parts);
    return th_summary();
}
