/*
 * test_imap_mime_skeleton.c -- FETCH BODYSTRUCTURE / BODY from a message's skeleton (issue 13):
 * the store reads the message without its parts stored apart (mv_message_skeleton_keyed,
 * schema version 15 counts their lines) and mailvaultd describes it from that
 * (imap_mime_open_skeleton), so the first FETCH BODYSTRUCTURE of a mailbox no longer reads,
 * decrypts and scans every attachment.
 *
 *   - Every shape gives the answer the whole message gives, byte for byte, BODYSTRUCTURE and
 *     BODY, with UTF8=ACCEPT and without: attachments in base64, big text parts (their lines
 *     count), a big part inside an attached message (whose size and lines count it), nested
 *     multiparts, bare LF line ends, a missing close delimiter, a part that is the whole body,
 *     content ending in an empty line or without a line break, parts full of "--" and ':'.
 *   - The skeleton and its cuts are the message: the skeleton is the message without the cut
 *     ranges, and each cut's size, lines and marks are the test's own count of those bytes.
 *   - Parts stored before version 15 (no counts) are refused (MV_EUNSUPPORTED: read whole),
 *     also after a migration from 14; the same bytes stored again give them their counts.
 *   - A key the mailbox has moved past gives MV_ENOTFOUND; no key, or more cuts than room,
 *     MV_EUNSUPPORTED; place is never called then.
 *   - Counts that are not the part's bytes' are named by mv_store_check ("counts") and
 *     counted again by mv_store_repair (part_counts_fixed); counts from before version 15
 *     (NULL) are neither named nor counted there: mv_store_maintain counts them
 *     (parts_counted), and the skeleton then stands in.
 *   - A skeleton that cannot stand in is refused, never described wrong: a cut not at a line
 *     break, a cut no leaf part accounts for (-1 from imap_mime_bodystructure), a message whose
 *     parts would take it over IMAP_MIME_STRUCTURE_MAX, a NUL byte.
 * Nothing depends on a random byte.
 */
#include "../imapd/buf.h"
#include "../imapd/imap_mime.h"
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SK_PASSWORD "skeleton test password"
#define SK_BIG      (140u << 10) /* over the store's 128 KiB: stored apart */

struct sk_text {
    char *data;
    size_t len, cap;
};

static void sk_add(struct sk_text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap > 0 ? t->cap : 4096;
        while (t->len + n + 1 > cap) {
            cap *= 2;
        }
        char *grown = realloc(t->data, cap);
        CHECK(grown != NULL);
        if (grown == NULL) {
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

static void sk_str(struct sk_text *t, const char *s)
{
    sk_add(t, s, strlen(s));
}

/* n bytes of base64-looking lines of 76 characters (eol after each), deterministic. */
static void sk_base64(struct sk_text *t, size_t n, const char *eol)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char line[80];
    for (size_t done = 0, k = 0; done < n; k++) {
        for (size_t i = 0; i < 76; i++) {
            line[i] = alphabet[(k * 7 + i * 13) % 64];
        }
        sk_add(t, line, 76);
        sk_str(t, eol);
        done += 76 + strlen(eol);
    }
}

/* n bytes of text lines; with marks, every third line holds a ':' and every fifth starts
 * with "--" (not a boundary of the message). */
static void sk_lines(struct sk_text *t, size_t n, const char *eol, int marks)
{
    char line[96];
    for (size_t done = 0, k = 0; done < n; k++) {
        int w = marks && k % 5 == 0   ? snprintf(line, sizeof line, "-- line %zu of text", k)
                : marks && k % 3 == 0 ? snprintf(line, sizeof line, "note %zu: a colon here", k)
                                      : snprintf(line, sizeof line, "plain words on line %zu", k);
        sk_add(t, line, (size_t)w);
        sk_str(t, eol);
        done += (size_t)w + strlen(eol);
    }
}

static void sk_head(struct sk_text *t, const char *subject, const char *type, const char *eol)
{
    char h[512];
    snprintf(h, sizeof h,
             "From: Ann <ann@example.org>%sTo: bob@example.org%sSubject: %s%sDate: Mon, 7 Dec "
             "2026 06:00:00 +0000%sMIME-Version: 1.0%sContent-Type: %s%s%s",
             eol, eol, subject, eol, eol, eol, type, eol, eol);
    sk_str(t, h);
}

/* Shape k of the test messages (0 .. SK_SHAPES-1) into t; its minimum number of cuts. */
#define SK_SHAPES 13
static size_t sk_shape(int k, struct sk_text *t)
{
    const char *crlf = "\r\n", *lf = "\n";
    switch (k) {
    case 0:   /* text and a base64 attachment */
    case 1: { /* the same with bare LF */
        const char *e = k == 0 ? crlf : lf;
        sk_head(t, "attachment", "multipart/mixed; boundary=\"b0\"", e);
        sk_str(t, e);
        sk_str(t, "--b0");
        sk_str(t, e);
        sk_str(t, "Content-Type: text/plain; charset=utf-8");
        sk_str(t, e);
        sk_str(t, e);
        sk_lines(t, 400, e, 0);
        sk_str(t, "--b0");
        sk_str(t, e);
        sk_str(t, "Content-Type: application/octet-stream; name=\"a.bin\"");
        sk_str(t, e);
        sk_str(t, "Content-Disposition: attachment; filename=\"a.bin\"");
        sk_str(t, e);
        sk_str(t, "Content-Transfer-Encoding: base64");
        sk_str(t, e);
        sk_str(t, e);
        sk_base64(t, SK_BIG, e);
        sk_str(t, "--b0--");
        sk_str(t, e);
        return 1;
    }
    case 2: /* a single text body stored apart: its lines */
        sk_head(t, "big text", "text/plain; charset=us-ascii", crlf);
        sk_str(t, crlf);
        sk_lines(t, SK_BIG, crlf, 0);
        return 1;
    case 3: /* a big text attachment and a big base64 one */
        sk_head(t, "two", "multipart/mixed; boundary=\"=_x\"", crlf);
        sk_str(t, "\r\npreamble\r\n--=_x\r\nContent-Type: text/plain\r\n\r\nhello\r\n");
        sk_str(t, "--=_x\r\nContent-Type: text/csv\r\nContent-Disposition: attachment\r\n\r\n");
        sk_lines(t, SK_BIG, crlf, 0);
        sk_str(t, "--=_x\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\n");
        sk_base64(t, SK_BIG + 5000, crlf);
        sk_str(t, "--=_x--\r\nepilogue\r\n");
        return 2;
    case 4: /* an attached message with a big part inside: its size and lines count it */
        sk_head(t, "forward", "multipart/mixed; boundary=\"out\"", crlf);
        sk_str(t, "\r\n--out\r\nContent-Type: text/plain\r\n\r\nsee below\r\n");
        sk_str(t, "--out\r\nContent-Type: message/rfc822\r\n\r\n");
        sk_head(t, "inner", "multipart/mixed; boundary=\"in\"", crlf);
        sk_str(t, "\r\n--in\r\nContent-Type: text/plain\r\n\r\ninner text\r\n");
        sk_str(t, "--in\r\nContent-Type: application/zip\r\nContent-Transfer-Encoding: "
                  "base64\r\n\r\n");
        sk_base64(t, SK_BIG, crlf);
        sk_str(t, "--in--\r\n");
        sk_str(t, "\r\n--out--\r\n");
        return 1;
    case 5: /* alternative inside mixed, a big HTML part */
        sk_head(t, "html", "multipart/mixed; boundary=\"m\"", crlf);
        sk_str(t, "\r\n--m\r\nContent-Type: multipart/alternative; boundary=\"a\"\r\n\r\n");
        sk_str(t, "--a\r\nContent-Type: text/plain\r\n\r\nshort\r\n");
        sk_str(t, "--a\r\nContent-Type: text/html; charset=utf-8\r\nContent-ID: <h@x>\r\n"
                  "Content-Description: the page\r\n\r\n");
        sk_lines(t, SK_BIG, crlf, 0);
        sk_str(t, "--a--\r\n\r\n--m\r\nContent-Type: application/pdf\r\nContent-Transfer-"
                  "Encoding: base64\r\nContent-Disposition: inline; filename=\"x.pdf\"\r\n\r\n");
        sk_base64(t, SK_BIG, crlf);
        sk_str(t, "--m--\r\n");
        return 2;
    case 6: /* no close delimiter: the last part runs to the end */
        sk_head(t, "unclosed", "multipart/mixed; boundary=\"u\"", crlf);
        sk_str(t, "\r\n--u\r\nContent-Type: text/plain\r\n\r\nfirst\r\n");
        sk_str(t, "--u\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: "
                  "base64\r\n\r\n");
        sk_base64(t, SK_BIG, crlf);
        return 1;
    case 7: /* content that ends in an empty line before the delimiter */
        sk_head(t, "blank end", "multipart/mixed; boundary=\"e\"", crlf);
        sk_str(t, "\r\n--e\r\nContent-Type: text/plain\r\n\r\n");
        sk_lines(t, SK_BIG, crlf, 0);
        sk_str(t, "\r\n\r\n--e--\r\n");
        return 1;
    case 8: /* a top-level base64 body, no line break at the end */
        sk_head(t, "pdf", "application/pdf; name=\"doc.pdf\"", crlf);
        sk_str(t, "Content-Transfer-Encoding: base64\r\n");
        sk_str(t, crlf);
        sk_base64(t, SK_BIG, crlf);
        sk_str(t, "QUJD");
        return 1;
    case 9: /* a big text part full of "--" lines and colons */
        sk_head(t, "marks", "multipart/mixed; boundary=\"k\"", crlf);
        sk_str(t, "\r\n--k\r\nContent-Type: text/plain\r\n\r\n");
        sk_lines(t, SK_BIG, crlf, 1);
        sk_str(t, "\r\n--k\r\nContent-Type: text/plain\r\n\r\nafter\r\n--k--\r\n");
        return 1;
    case 10: /* a digest: its parts are messages by default */
        sk_head(t, "digest", "multipart/digest; boundary=\"d\"", crlf);
        sk_str(t, "\r\n--d\r\n\r\n");
        sk_head(t, "one", "text/plain", crlf);
        sk_str(t, crlf);
        sk_lines(t, SK_BIG, crlf, 0);
        sk_str(t, "\r\n--d\r\n\r\nSubject: two\r\n\r\nsmall\r\n--d--\r\n");
        return 1;
    case 11: /* a quoted-printable text attachment in a message without MIME-Version */
        sk_str(t, "From: c@example.org\r\nSubject: qp\r\nContent-Type: multipart/mixed; "
                  "boundary=q\r\n\r\n--q\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"
                  "Content-Transfer-Encoding: quoted-printable\r\n\r\n");
        sk_lines(t, SK_BIG, crlf, 0);
        sk_str(t, "=\r\n--q--");
        return 1;
    default: /* two big parts in a row, nothing between them but the delimiter */
        sk_head(t, "pair", "multipart/mixed; boundary=\"p\"", lf);
        sk_str(t, "\n--p\nContent-Type: application/octet-stream\n\n");
        sk_base64(t, SK_BIG, lf);
        sk_str(t, "--p\nContent-Type: text/plain\n\n");
        sk_lines(t, SK_BIG, lf, 1);
        sk_str(t, "\n--p--\n");
        return 2;
    }
}

static void *sk_place(void *arg, size_t size)
{
    void **slot = arg;
    *slot = malloc(size != 0 ? size : 1);
    return *slot;
}

static void *sk_place_refused(void *arg, size_t size)
{
    (void)size;
    *(int *)arg = 1;
    return NULL;
}

/* The test's own count of a part's lines and marks (what struct mv_message_cut says). */
static void sk_count(const char *p, size_t n, uint64_t *lines, uint64_t *marks)
{
    *lines = *marks = 0;
    size_t at = 0;
    while (at < n) {
        size_t end = at;
        while (end < n && p[end] != '\n') {
            end++;
        }
        int dashes = end - at >= 2 && p[at] == '-' && p[at + 1] == '-';
        int colon = 0;
        for (size_t i = at; i < end && p[at] != ' ' && p[at] != '\t'; i++) {
            colon |= p[i] == ':';
        }
        *marks += (uint64_t)(dashes || colon);
        *lines += end < n;
        at = end + 1;
    }
}

/* BODYSTRUCTURE (ext) of the whole message and of its skeleton, equal; the skeleton's is made
 * (never refused) for the shapes here. */
static void sk_compare(const char *whole,
                       size_t len,
                       const char *skel,
                       size_t skel_len,
                       const struct mv_message_cut *cuts,
                       size_t n,
                       int shape)
{
    for (int utf8 = 0; utf8 <= 1; utf8++) {
        for (int ext = 0; ext <= 1; ext++) {
            struct imap_mime *a = NULL, *b = NULL;
            struct buf x = {0}, y = {0};
            CHECK_EQ_INT(imap_mime_open_structure(whole, len, &a), MV_OK);
            CHECK_EQ_INT(imap_mime_open_skeleton(skel, skel_len, len, cuts, n, &b), MV_OK);
            if (a == NULL || b == NULL) {
                imap_mime_close(&a);
                imap_mime_close(&b);
                return;
            }
            imap_mime_set_utf8(a, utf8);
            imap_mime_set_utf8(b, utf8);
            CHECK_EQ_INT(imap_mime_bodystructure(a, &x, ext), 0);
            CHECK_EQ_INT(imap_mime_bodystructure(b, &y, ext), 0);
            int same = x.len == y.len && x.len > 0 && memcmp(x.data, y.data, x.len) == 0;
            if (!same) {
                fprintf(stderr, "shape %d ext %d:\n whole    %.*s\n skeleton %.*s\n", shape, ext,
                        (int)x.len, x.data, (int)y.len, y.data);
            }
            CHECK(same);
            buf_free(&x);
            buf_free(&y);
            imap_mime_close(&a);
            imap_mime_close(&b);
        }
    }
}

static void test_shapes_same_answers(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("skeleton", SK_PASSWORD, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    for (int k = 0; k < SK_SHAPES; k++) {
        struct sk_text t = {0};
        size_t want_cuts = sk_shape(k, &t);
        uint32_t uid = 0;
        CHECK_EQ_INT(mv_message_append(s, "INBOX", t.data, t.len, 0, NULL, 1800000000, &uid),
                     MV_OK);
        struct mv_message_key key;
        CHECK_EQ_INT(tu_message_key(s, "INBOX", uid, &key), 0);
        CHECK_EQ_INT(key.size, t.len);
        void *skel = NULL;
        size_t skel_len = 0, n = 0;
        struct mv_message_cut cuts[8];
        CHECK_EQ_INT(
            mv_message_skeleton_keyed(s, "INBOX", &key, sk_place, &skel, &skel_len, cuts, 8, &n),
            MV_OK);
        CHECK_EQ_INT(n, want_cuts);
        /* the skeleton is the message without the cut ranges; the counts are the bytes' */
        size_t at = 0, from = 0, cut = 0;
        for (size_t i = 0; i < n && skel != NULL; i++) {
            size_t p = (size_t)cuts[i].position, orig = p + cut;
            CHECK(p >= from && p <= skel_len && cuts[i].size >= (128u << 10));
            CHECK(memcmp((char *)skel + from, t.data + at, p - from) == 0);
            uint64_t lines = 0, marks = 0;
            sk_count(t.data + orig, (size_t)cuts[i].size, &lines, &marks);
            CHECK_EQ_INT(cuts[i].lines, lines);
            CHECK_EQ_INT(cuts[i].marks, marks);
            at = orig + (size_t)cuts[i].size;
            cut += (size_t)cuts[i].size;
            from = p;
        }
        CHECK_EQ_INT(skel_len + cut, t.len);
        if (skel != NULL && skel_len >= from) {
            CHECK(memcmp((char *)skel + from, t.data + at, skel_len - from) == 0);
            sk_compare(t.data, t.len, skel, skel_len, cuts, n, k);
        }
        free(skel);
        free(t.data);
    }
    mv_store_close(&s);
}

/* Stores shape 0 (its Subject ending in last) and returns its key in *key (uid in *uid). */
static void sk_store_shape0(mv_store *s, char last, uint32_t *uid, struct mv_message_key *key)
{
    struct sk_text t = {0};
    sk_shape(0, &t);
    char *subject = t.data != NULL ? strstr(t.data, "Subject: attachment") : NULL;
    CHECK(subject != NULL);
    if (subject != NULL) {
        subject[strlen("Subject: attachment") - 1] = last;
    }
    CHECK_EQ_INT(mv_message_append(s, "INBOX", t.data, t.len, 0, NULL, 1800000000, uid), MV_OK);
    CHECK_EQ_INT(tu_message_key(s, "INBOX", *uid, key), 0);
    free(t.data);
}

static int sk_read(mv_store *s, const struct mv_message_key *key, size_t cuts_max, size_t *n)
{
    void *skel = NULL;
    size_t len = 0;
    struct mv_message_cut cuts[4];
    int rc = mv_message_skeleton_keyed(s, "INBOX", key, sk_place, &skel, &len, cuts, cuts_max, n);
    free(skel);
    return rc;
}

static void test_parts_without_counts(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("uncounted", SK_PASSWORD, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    uint32_t uid = 0;
    struct mv_message_key key;
    size_t n = 0;
    sk_store_shape0(s, 't', &uid, &key);
    CHECK_EQ_INT(sk_read(s, &key, 4, &n), MV_OK);
    CHECK_EQ_INT(n, 1);
    /* as a part stored before version 15 has it */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE attachments SET lines = NULL, marks = NULL"),
                 SQLITE_OK);
    int placed = 0;
    void *out = NULL;
    size_t len = 0;
    struct mv_message_cut cuts[4];
    CHECK_EQ_INT(
        mv_message_skeleton_keyed(s, "INBOX", &key, sk_place_refused, &placed, &len, cuts, 4, &n),
        MV_EUNSUPPORTED);
    CHECK_EQ_INT(placed, 0);
    CHECK_EQ_INT(n, 0);
    /* the same part in another message gives it its counts */
    uint32_t again = 0;
    sk_store_shape0(s, 'T', &again, &key);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM attachments"), 1);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM attachments WHERE lines IS NULL"), 0);
    CHECK_EQ_INT(sk_read(s, &key, 4, &n), MV_OK);
    /* more cuts than room, no key, a key without a body key */
    CHECK_EQ_INT(sk_read(s, &key, 0, &n), MV_EUNSUPPORTED);
    CHECK_EQ_INT(mv_message_skeleton_keyed(s, "INBOX", NULL, sk_place, &out, &len, cuts, 4, &n),
                 MV_EUNSUPPORTED);
    struct mv_message_key zero = key;
    zero.body_key = 0;
    CHECK_EQ_INT(sk_read(s, &zero, 4, &n), MV_EUNSUPPORTED);
    CHECK_EQ_INT(mv_message_skeleton_keyed(s, "INBOX", &key, NULL, &out, &len, cuts, 4, &n),
                 MV_EINVAL);
    /* the mailbox moved past the key: a flag changed, then the message expunged */
    char set[16];
    snprintf(set, sizeof set, "%u", again);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", set, MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL), MV_OK);
    CHECK_EQ_INT(sk_read(s, &key, 4, &n), MV_ENOTFOUND);
    CHECK_EQ_INT(tu_message_key(s, "INBOX", again, &key), 0);
    CHECK_EQ_INT(sk_read(s, &key, 4, &n), MV_OK);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", set, MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, NULL), MV_OK);
    CHECK_EQ_INT(sk_read(s, &key, 4, &n), MV_ENOTFOUND);
    mv_store_close(&s);
}

struct sk_problems {
    int counts;
    int other;
};

static void sk_problem(void *arg, const char *what, const char *detail)
{
    struct sk_problems *p = arg;
    int counts = strcmp(what, "counts") == 0;
    p->counts += counts;
    p->other += !counts;
    if (!counts) {
        fprintf(stderr, "unexpected problem %s: %s\n", what, detail);
    }
}

static void test_migration_from_14(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("from14", SK_PASSWORD, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    uint32_t uid = 0;
    struct mv_message_key key;
    sk_store_shape0(s, 't', &uid, &key);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), TU_DOWNGRADE_TO_V14 "PRAGMA user_version = 14"),
                 SQLITE_OK);
    mv_store_close(&s);
    s = NULL;
    CHECK_EQ_INT(tu_store_open("from14", SK_PASSWORD, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    CHECK_EQ_INT(tu_int(mv_store_db(s), "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM attachments WHERE lines IS NULL "
                                        "AND marks IS NULL"),
                 1);
    struct mv_message_key now;
    size_t n = 0;
    CHECK_EQ_INT(tu_message_key(s, "INBOX", uid, &now), 0);
    CHECK_EQ_INT(sk_read(s, &now, 4, &n), MV_EUNSUPPORTED);
    /* the whole message still reads */
    void *raw = NULL;
    size_t len = 0;
    CHECK_EQ_INT(mv_message_fetch(s, "INBOX", uid, &raw, &len), MV_OK);
    CHECK_EQ_INT(len, now.size);
    mv_free(raw);
    /* mv_store_maintain counts them (the repair leaves NULL alone), the skeleton then stands in,
     * and a second run has nothing to count */
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    struct mv_maintain_report mr;
    CHECK_EQ_INT(mv_store_maintain(s, &o, &mr), MV_OK);
    CHECK_EQ_INT(mr.parts_counted, 1);
    CHECK(tu_int(mv_store_db(s), "SELECT lines FROM attachments") > 1000);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT marks FROM attachments"), 0);
    CHECK_EQ_INT(tu_message_key(s, "INBOX", uid, &now), 0);
    CHECK_EQ_INT(sk_read(s, &now, 4, &n), MV_OK);
    CHECK_EQ_INT(n, 1);
    struct sk_problems found = {0, 0};
    struct mv_check_report cr;
    CHECK_EQ_INT(mv_store_check(s, sk_problem, &found, &cr), MV_OK); /* as the bytes count */
    CHECK_EQ_INT(mv_store_maintain(s, &o, &mr), MV_OK);
    CHECK_EQ_INT(mr.parts_counted, 0);
    mv_store_close(&s);
}

static void test_check_and_repair(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("counts", SK_PASSWORD, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    uint32_t uid = 0;
    struct mv_message_key key;
    sk_store_shape0(s, 't', &uid, &key);
    struct mv_check_report cr;
    struct sk_problems found = {0, 0};
    CHECK_EQ_INT(mv_store_check(s, sk_problem, &found, &cr), MV_OK);
    long long lines = tu_int(mv_store_db(s), "SELECT lines FROM attachments");
    long long marks = tu_int(mv_store_db(s), "SELECT marks FROM attachments");
    CHECK(lines > 1000 && marks == 0); /* base64 lines: no "--", no ':' */
    /* a count one off, as a bug would leave it */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE attachments SET lines = lines + 1"), SQLITE_OK);
    CHECK_EQ_INT(mv_store_check(s, sk_problem, &found, &cr), MV_ECORRUPT);
    CHECK_EQ_INT(found.counts, 1);
    CHECK_EQ_INT(found.other, 0);
    struct mv_repair_report rr;
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT(rr.part_counts_fixed, 1);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT lines FROM attachments"), lines);
    found = (struct sk_problems){0, 0};
    CHECK_EQ_INT(mv_store_check(s, sk_problem, &found, &cr), MV_OK);
    CHECK_EQ_INT(found.counts, 0);
    /* marks alone, then no counts at all (a part from before version 15): nothing to fix */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE attachments SET marks = 7"), SQLITE_OK);
    CHECK_EQ_INT(mv_store_check(s, sk_problem, &found, &cr), MV_ECORRUPT);
    CHECK_EQ_INT(found.counts, 1);
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT(rr.part_counts_fixed, 1);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT marks FROM attachments"), marks);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE attachments SET lines = NULL, marks = NULL"),
                 SQLITE_OK);
    found = (struct sk_problems){0, 0};
    CHECK_EQ_INT(mv_store_check(s, sk_problem, &found, &cr), MV_OK);
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT(rr.part_counts_fixed, 0);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM attachments WHERE lines IS NULL"), 1);
    mv_store_close(&s);
}

/* Skeletons that cannot stand in for their message are refused, never described wrongly. */
static void test_refused_skeletons(void)
{
    const char *msg = "Subject: x\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n"
                      "Content-Type: text/plain\r\n\r\n\r\n--b--\r\n";
    size_t len = strlen(msg);
    const char *empty = strstr(msg, "\r\n\r\n\r\n--b--") + 4; /* the leaf's empty content */
    size_t at = (size_t)(empty - msg);
    struct imap_mime *m = NULL;
    struct mv_message_cut cut = {.position = at, .size = 1000, .lines = 10, .marks = 0};
    /* the leaf stands in: accepted, with the part's size and lines */
    CHECK_EQ_INT(imap_mime_open_skeleton(msg, len, len + 1000, &cut, 1, &m), MV_OK);
    struct buf b = {0};
    CHECK_EQ_INT(imap_mime_bodystructure(m, &b, 0), 0);
    CHECK(b.data != NULL && strstr(b.data, " 1000 10)") != NULL);
    buf_free(&b);
    imap_mime_close(&m);
    /* not at a line break */
    cut.position = at - 6; /* the 'i' of "plain" */
    CHECK_EQ_INT(imap_mime_open_skeleton(msg, len, len + 1000, &cut, 1, &m), MV_EUNSUPPORTED);
    CHECK(m == NULL);
    /* at a line break where no leaf's content is: the walk does not account for it */
    cut.position = (size_t)(strstr(msg, "\r\n--b\r\n") - msg);
    CHECK_EQ_INT(imap_mime_open_skeleton(msg, len, len + 1000, &cut, 1, &m), MV_OK);
    b = (struct buf){0};
    CHECK_EQ_INT(imap_mime_bodystructure(m, &b, 1), -1);
    CHECK_EQ_INT(b.len, 0);
    buf_free(&b);
    imap_mime_close(&m);
    /* sizes that do not add up */
    cut.position = at;
    CHECK_EQ_INT(imap_mime_open_skeleton(msg, len, len + 999, &cut, 1, &m), MV_EUNSUPPORTED);
    /* with the part's marks the message is over IMAP_MIME_STRUCTURE_MAX: the whole message
     * is one text part, which only a whole read describes */
    cut.marks = IMAP_MIME_STRUCTURE_MAX;
    CHECK_EQ_INT(imap_mime_open_skeleton(msg, len, len + 1000, &cut, 1, &m), MV_EUNSUPPORTED);
    cut.marks = IMAP_MIME_STRUCTURE_MAX - 10;
    CHECK_EQ_INT(imap_mime_open_skeleton(msg, len, len + 1000, &cut, 1, &m), MV_OK);
    imap_mime_close(&m);
    /* a NUL byte anywhere: GMime's reading of a header with one depends on what follows */
    char *nul = strdup(msg);
    CHECK(nul != NULL);
    if (nul != NULL) {
        nul[1] = '\0';
        CHECK_EQ_INT(imap_mime_open_skeleton(nul, len, len + 1000, &cut, 1, &m), MV_EUNSUPPORTED);
        CHECK(m == NULL);
        free(nul);
    }
}

int main(void)
{
    imap_mime_init();
    TEST(test_shapes_same_answers);
    TEST(test_parts_without_counts);
    TEST(test_migration_from_14);
    TEST(test_check_and_repair);
    TEST(test_refused_skeletons);
    return th_summary();
}
