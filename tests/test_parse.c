/*
 * test_parse.c -- tests of store_parse(): the sample corpus of tests/corpus against its
 * expected values and independently located part ranges, the limits, degenerate input,
 * bounded nesting, the text extraction, the parse without the texts (STORE_PARSE_NO_TEXT: the
 * same fields and ranges, empty texts), and concurrent use.
 *
 * The corpus and its tables are made by tests/corpus/make_corpus.py (see its README.md):
 *   expected.tsv  file, subject, from, message_id, in_reply_to, sent_date, part_count
 *                 (part_count at TP_SPLIT_MIN);
 *   parts.tsv     file, start, end, encoding, SHA-256 of the decoded content of every part
 *                 at or above TP_SPLIT_MIN, located by the generator, not by GMime.
 * Files are found under $MV_TEST_ROOT (tests/run.sh sets it), else the current directory.
 */
#include "harness.h"
#include "store/store.h"
#include "store/store_parse.h"
#include "testutil.h"

#include <dirent.h>
#include <glib.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TP_ROWS_MAX 64
#define TP_FIELDS   7
#define TP_THREADS  4

/* The threshold the corpus's tables were made for (make_corpus.py SPLIT_MIN). The parser
 * takes it as an argument; the store's own, STORE_SPLIT_MIN (128 KiB), would leave most of
 * the corpus's parts unsplit and test the cut on few of them. */
#define TP_SPLIT_MIN 8192

struct tp_row {
    char *field[TP_FIELDS]; /* pointers into the table's buffer */
};

struct tp_table {
    char *buf;
    struct tp_row rows[TP_ROWS_MAX];
    size_t count;
};

/* A growable string for building messages. */
struct tp_text {
    char *data;
    size_t len;
    size_t cap;
};

int main(void);

/* ---- helpers ------------------------------------------------------------------------------ */

/* The path of a corpus file, in a per-thread buffer (test_threads reads files too). */
static const char *tp_corpus_path(const char *name)
{
    static _Thread_local char path[1024];
    const char *root = getenv("MV_TEST_ROOT");
    snprintf(path, sizeof path, "%s/tests/corpus/%s", root != NULL ? root : ".", name);
    return path;
}

/* Reads a TSV table (lines starting with '#' skipped) with at least min_fields per row. */
static int tp_table_load(const char *name, size_t min_fields, struct tp_table *t)
{
    memset(t, 0, sizeof *t);
    size_t len = 0;
    t->buf = (char *)tu_read_file(tp_corpus_path(name), &len);
    if (t->buf == NULL) {
        return -1;
    }
    t->buf[len] = '\0'; /* tu_read_file leaves room for it */
    char *line = t->buf;
    while (line != NULL && *line != '\0' && t->count < TP_ROWS_MAX) {
        char *next = strchr(line, '\n');
        if (next != NULL) {
            *next++ = '\0';
        }
        if (line[0] != '#' && line[0] != '\0') {
            struct tp_row *row = &t->rows[t->count++];
            size_t f = 0;
            for (char *p = line; f < TP_FIELDS && p != NULL; f++) {
                row->field[f] = p;
                p = strchr(p, '\t');
                if (p != NULL) {
                    *p++ = '\0';
                }
            }
            if (f < min_fields) {
                return -1;
            }
        }
        line = next;
    }
    return 0;
}

/* NULL if p keeps the contract for a message of len bytes, else what is wrong. */
static const char *tp_problem(const struct store_parsed *p, size_t len)
{
    const char *strings[] = {p->subject,    p->from,        p->to,  p->cc,
                             p->message_id, p->in_reply_to, p->text};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        if (strings[i] == NULL || !g_utf8_validate(strings[i], -1, NULL)) {
            return "a string is NULL or not valid UTF-8";
        }
    }
    if (strlen(p->text) > STORE_PARSE_TEXT_MAX) {
        return "text over STORE_PARSE_TEXT_MAX";
    }
    for (size_t i = 0; i < p->reference_count; i++) {
        if (p->references[i] == NULL || p->references[i][0] == '\0' ||
            !g_utf8_validate(p->references[i], -1, NULL)) {
            return "a reference is NULL, empty or not UTF-8";
        }
    }
    if ((p->part_count == 0) != (p->parts == NULL)) {
        return "parts and part_count disagree";
    }
    for (size_t i = 0; i < p->part_count; i++) {
        /* (1) non-empty, (2) inside the message, (3) after the previous range */
        if (p->parts[i].start >= p->parts[i].end || p->parts[i].end > len ||
            (i > 0 && p->parts[i].start < p->parts[i - 1].end)) {
            return "a part range is empty, outside the message or out of order";
        }
    }
    return NULL;
}

/* Whether the gaps and the ranges, put back together in order, give raw again. */
static int tp_reassembles(const uint8_t *raw, size_t len, const struct store_parsed *p)
{
    uint8_t *out = malloc(len + 1);
    size_t at = 0, pos = 0;
    for (size_t i = 0; out != NULL && i <= p->part_count; i++) {
        size_t gap_end = i < p->part_count ? (size_t)p->parts[i].start : len;
        memcpy(out + at, raw + pos, gap_end - pos); /* the bytes kept in the message row */
        at += gap_end - pos;
        if (i < p->part_count) {
            size_t n = (size_t)(p->parts[i].end - p->parts[i].start);
            uint8_t *cut = malloc(n); /* as if stored apart and fetched back */
            if (cut == NULL) {
                free(out);
                return 0;
            }
            memcpy(cut, raw + p->parts[i].start, n);
            memcpy(out + at, cut, n);
            free(cut);
            at += n;
            pos = (size_t)p->parts[i].end;
        }
    }
    int same = out != NULL && at == len && (len == 0 || memcmp(out, raw, len) == 0);
    free(out);
    return same;
}

static int tp_parse(const void *raw, size_t len, size_t split_min, struct store_parsed *out)
{
    char err[256] = "";
    int rc = store_parse(raw, len, NULL, split_min, out, err, sizeof err);
    if (rc != MV_OK) {
        printf("  store_parse: %d %s\n", rc, err);
    }
    return rc;
}

static void tp_text_add(struct tp_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tp_text_add(struct tp_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        abort();
    }
    while (t->cap - t->len < (size_t)n + 1) {
        t->cap = t->cap > 0 ? t->cap * 2 : 4096;
        t->data = realloc(t->data, t->cap);
        if (t->data == NULL) {
            abort();
        }
    }
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

/* ---- the corpus --------------------------------------------------------------------------- */

static void test_corpus_expected(void)
{
    struct tp_table t;
    CHECK(tp_table_load("expected.tsv", TP_FIELDS, &t) == 0);
    CHECK(t.count >= 25);
    for (size_t i = 0; i < t.count; i++) {
        char **f = t.rows[i].field;
        size_t len = 0;
        uint8_t *raw = tu_read_file(tp_corpus_path(f[0]), &len);
        CHECK(raw != NULL);
        struct store_parsed p;
        int rc = tp_parse(raw, len, TP_SPLIT_MIN, &p);
        const char *problem = rc == MV_OK ? tp_problem(&p, len) : "parse failed";
        int same = problem == NULL && strcmp(p.subject, f[1]) == 0 && strcmp(p.from, f[2]) == 0 &&
                   strcmp(p.message_id, f[3]) == 0 && strcmp(p.in_reply_to, f[4]) == 0 &&
                   p.sent_date == strtoll(f[5], NULL, 10) &&
                   p.part_count == strtoull(f[6], NULL, 10) && tp_reassembles(raw, len, &p);
        if (!same) {
            printf("  %s: %s; got [%s] [%s] [%s] [%s] %lld %zu\n", f[0],
                   problem != NULL ? problem : "differs", p.subject, p.from, p.message_id,
                   p.in_reply_to, (long long)p.sent_date, p.part_count);
        }
        store_parsed_free(&p);
        free(raw);
        CHECK(same);
    }
    free(t.buf);
}

/* STORE_PARSE_NO_TEXT (a stepped drain's parse, whose full-text row is made later): every
 * corpus message gives the same fields, threading and part ranges as a full parse, and empty
 * texts where the full parse has some (the decoding it leaves out). */
static int tp_same_but_text(const struct store_parsed *a, const struct store_parsed *b)
{
    int same = strcmp(a->subject, b->subject) == 0 && strcmp(a->from, b->from) == 0 &&
               strcmp(a->to, b->to) == 0 && strcmp(a->cc, b->cc) == 0 &&
               strcmp(a->message_id, b->message_id) == 0 &&
               strcmp(a->in_reply_to, b->in_reply_to) == 0 && a->sent_date == b->sent_date &&
               a->sent_zone == b->sent_zone && a->reference_count == b->reference_count &&
               a->part_count == b->part_count;
    for (size_t i = 0; same && i < a->reference_count; i++) {
        same = strcmp(a->references[i], b->references[i]) == 0;
    }
    for (size_t i = 0; same && i < a->part_count; i++) {
        same = a->parts[i].start == b->parts[i].start && a->parts[i].end == b->parts[i].end;
    }
    return same;
}

static void test_corpus_no_text(void)
{
    struct tp_table t;
    CHECK(tp_table_load("expected.tsv", TP_FIELDS, &t) == 0);
    CHECK(t.count >= 25);
    size_t with_text = 0;
    for (size_t i = 0; i < t.count; i++) {
        const char *name = t.rows[i].field[0];
        size_t len = 0;
        uint8_t *raw = tu_read_file(tp_corpus_path(name), &len);
        CHECK(raw != NULL);
        struct store_parsed full, bare;
        char err[256] = "";
        int rc = tp_parse(raw, len, TP_SPLIT_MIN, &full);
        int rc2 = store_parse_flags(raw, len, NULL, TP_SPLIT_MIN, STORE_PARSE_NO_TEXT, &bare, err,
                                    sizeof err);
        int same = rc == MV_OK && rc2 == MV_OK && tp_problem(&bare, len) == NULL &&
                   tp_same_but_text(&full, &bare) && bare.text[0] == '\0' &&
                   bare.header_text[0] == '\0' && tp_reassembles(raw, len, &bare);
        with_text += rc == MV_OK && full.text[0] != '\0';
        if (!same) {
            printf("  %s: differs without the texts (%d %d %s)\n", name, rc, rc2, err);
        }
        if (rc == MV_OK) {
            store_parsed_free(&full);
        }
        if (rc2 == MV_OK) {
            store_parsed_free(&bare);
        }
        free(raw);
        CHECK(same);
    }
    free(t.buf);
    CHECK(with_text >= 20); /* the full parse had texts to leave out */
}

/* Every .eml of the corpus has a row in expected.tsv. */
static void test_corpus_complete(void)
{
    struct tp_table t;
    CHECK(tp_table_load("expected.tsv", TP_FIELDS, &t) == 0);
    char dir_path[1024];
    snprintf(dir_path, sizeof dir_path, "%s", tp_corpus_path(""));
    DIR *dir = opendir(dir_path);
    CHECK(dir != NULL);
    size_t files = 0, missing = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".eml") != 0) {
            continue;
        }
        files++;
        int found = 0;
        for (size_t i = 0; i < t.count && !found; i++) {
            found = strcmp(t.rows[i].field[0], e->d_name) == 0;
        }
        if (!found) {
            printf("  %s has no row in expected.tsv\n", e->d_name);
            missing++;
        }
    }
    closedir(dir);
    free(t.buf);
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(files, t.count);
}

/* Decodes a range as its encoding says and compares the SHA-256 with the table's. */
static int
tp_range_digest_ok(const uint8_t *range, size_t n, const char *encoding, const char *sha256_hex)
{
    unsigned char *bin = malloc(n + 1);
    size_t bin_len = 0;
    int ok = bin != NULL;
    if (ok && strcmp(encoding, "base64") == 0) {
        ok = sodium_base642bin(bin, n, (const char *)range, n, "\r\n", &bin_len, NULL,
                               sodium_base64_VARIANT_ORIGINAL) == 0;
    } else if (ok) {
        memcpy(bin, range, n);
        bin_len = n;
    }
    char hex[65];
    if (ok) {
        tu_sha256_hex(bin, bin_len, hex);
        ok = strcmp(hex, sha256_hex) == 0;
    }
    free(bin);
    return ok;
}

/* Each large part's range is where the generator put it, and decodes to its bytes. */
static void test_corpus_part_ranges(void)
{
    struct tp_table t;
    CHECK(tp_table_load("parts.tsv", 5, &t) == 0);
    CHECK(t.count >= 8);
    for (size_t i = 0; i < t.count; i++) {
        char **f = t.rows[i].field;
        size_t len = 0, index = 0;
        for (size_t k = 0; k < i; k++) { /* earlier rows of the same file come first */
            index += strcmp(t.rows[k].field[0], f[0]) == 0;
        }
        uint8_t *raw = tu_read_file(tp_corpus_path(f[0]), &len);
        CHECK(raw != NULL);
        struct store_parsed p;
        CHECK(tp_parse(raw, len, TP_SPLIT_MIN, &p) == MV_OK);
        int ok =
            index < p.part_count && p.parts[index].start == strtoull(f[1], NULL, 10) &&
            p.parts[index].end == strtoull(f[2], NULL, 10) &&
            tp_range_digest_ok(raw + p.parts[index].start,
                               (size_t)(p.parts[index].end - p.parts[index].start), f[3], f[4]);
        if (!ok) {
            printf("  %s part %zu: wrong range or content\n", f[0], index);
        }
        store_parsed_free(&p);
        free(raw);
        CHECK(ok);
    }
    free(t.buf);
}

/* The same attachment in two messages is the same bytes in both ranges (deduplication). */
static void test_corpus_dup_attachments(void)
{
    size_t len_a = 0, len_b = 0;
    uint8_t *a = tu_read_file(tp_corpus_path("dup-attachment-a.eml"), &len_a);
    uint8_t *b = tu_read_file(tp_corpus_path("dup-attachment-b.eml"), &len_b);
    CHECK(a != NULL && b != NULL);
    struct store_parsed pa, pb;
    CHECK(tp_parse(a, len_a, TP_SPLIT_MIN, &pa) == MV_OK);
    CHECK(tp_parse(b, len_b, TP_SPLIT_MIN, &pb) == MV_OK);
    CHECK_EQ_INT(pa.part_count, 1);
    CHECK_EQ_INT(pb.part_count, 1);
    size_t na = (size_t)(pa.parts[0].end - pa.parts[0].start);
    size_t nb = (size_t)(pb.parts[0].end - pb.parts[0].start);
    CHECK(na >= (size_t)20 * 1024);
    CHECK_EQ_INT(na, nb);
    CHECK(memcmp(a + pa.parts[0].start, b + pb.parts[0].start, na) == 0);
    CHECK(pa.parts[0].start != pb.parts[0].start); /* different messages around it */
    store_parsed_free(&pa);
    store_parsed_free(&pb);
    free(a);
    free(b);
}

/* With split_min 1 every non-empty leaf is a range; all still valid and reassembling. */
static void test_corpus_split_min_1(void)
{
    struct tp_table t;
    CHECK(tp_table_load("expected.tsv", TP_FIELDS, &t) == 0);
    size_t total_parts = 0;
    for (size_t i = 0; i < t.count; i++) {
        size_t len = 0;
        uint8_t *raw = tu_read_file(tp_corpus_path(t.rows[i].field[0]), &len);
        CHECK(raw != NULL);
        struct store_parsed p;
        CHECK(tp_parse(raw, len, 1, &p) == MV_OK);
        const char *problem = tp_problem(&p, len);
        int ok = problem == NULL && p.part_count >= strtoull(t.rows[i].field[6], NULL, 10) &&
                 tp_reassembles(raw, len, &p);
        if (!ok) {
            printf("  %s: %s\n", t.rows[i].field[0], problem != NULL ? problem : "bad parts");
        }
        total_parts += p.part_count;
        store_parsed_free(&p);
        free(raw);
        CHECK(ok);
    }
    free(t.buf);
    CHECK(total_parts > t.count); /* most messages have at least one leaf */
}

/* What the text of some corpus messages must (and must not) contain. */
static void test_corpus_text(void)
{
    static const struct {
        const char *file, *has, *lacks;
    } cases[] = {
        {"html-only.eml", "Order #1234 & invoice <PDF>", "not text"},
        {"html-only.eml", "Café crème ☺ Total: 12€", "tracking"},
        {"html-only.eml", "invoice", "color"},
        {"alternative.eml", "Our garden event", "<b>"},
        {"calendar.eml", "You are invited", "BEGIN:VCALENDAR"},
        {"forwarded-rfc822.eml", "the site plan is attached", "iVBOR"},
        {"koi8-r.eml", "Отчёт за март во вложении", NULL},
        {"shift-jis.eml", "本日の会議の議事録を送ります", NULL},
        {"gb2312.eml", "项目进度报告如下", NULL},
        {"windows-1252.eml", "“special” offer – only €42 …", NULL},
        {"quoted-printable.eml", "vendredi à 19h30, c'est", "=C3"},
        {"nul-in-body.eml", "before after the NUL byte", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = 0;
        uint8_t *raw = tu_read_file(tp_corpus_path(cases[i].file), &len);
        CHECK(raw != NULL);
        struct store_parsed p;
        CHECK(tp_parse(raw, len, TP_SPLIT_MIN, &p) == MV_OK);
        int ok = strstr(p.text, cases[i].has) != NULL &&
                 (cases[i].lacks == NULL || strstr(p.text, cases[i].lacks) == NULL);
        if (!ok) {
            printf("  %s: text [%s]\n", cases[i].file, p.text);
        }
        store_parsed_free(&p);
        free(raw);
        CHECK(ok);
    }
}

/* ---- limits --------------------------------------------------------------------------------- */

static int tp_parse_limited(const struct tp_text *m,
                            const struct mv_limits *limits,
                            char *err,
                            size_t err_size)
{
    struct store_parsed p;
    int rc = store_parse((const uint8_t *)m->data, m->len, limits, TP_SPLIT_MIN, &p, err, err_size);
    if (rc == MV_OK) {
        store_parsed_free(&p);
    } else {
        /* on failure there is nothing to free: the struct is zeroed */
        rc = (p.subject == NULL && p.text == NULL && p.parts == NULL) ? rc : MV_ERROR;
    }
    return rc;
}

static void test_limit_header_count(void)
{
    /* 10,000 fields (the default; Dovecot takes 20,000, the default was 1,000) */
    struct tp_text m = {NULL, 0, 0};
    for (int i = 0; i < 10000; i++) {
        tp_text_add(&m, "X-Field-%d: value %d\r\n", i, i);
    }
    tp_text_add(&m, "\r\nbody\r\n");
    char err[256] = "";
    CHECK_EQ_INT(tp_parse_limited(&m, NULL, err, sizeof err), MV_OK);
    free(m.data);
    m = (struct tp_text){NULL, 0, 0};
    for (int i = 0; i < 10001; i++) {
        tp_text_add(&m, "X-Field-%d: value\r\n continued %d\r\n", i, i);
    }
    tp_text_add(&m, "\r\nbody\r\n");
    CHECK_EQ_INT(tp_parse_limited(&m, NULL, err, sizeof err), MV_ELIMIT);
    CHECK(strstr(err, "header_count_max") != NULL);
    free(m.data);
}

static void test_limit_header_size(void)
{
    char err[256] = "";
    for (int folded = 0; folded <= 1; folded++) {
        struct tp_text m = {NULL, 0, 0};
        tp_text_add(&m, "Subject: big\r\nX-Big: ");
        for (int i = 0; i < 1100 * 1024 / 64; i++) { /* 1,100 KiB in one field */
            tp_text_add(&m, "%s%.*s", folded && i > 0 ? "\r\n " : "", 61,
                        "0123456789abcdef"
                        "0123456789abcdef0123456789abcdef0123456789abcdef");
        }
        tp_text_add(&m, "\r\n\r\nbody\r\n");
        err[0] = '\0';
        CHECK_EQ_INT(tp_parse_limited(&m, NULL, err, sizeof err), MV_ELIMIT);
        CHECK(strstr(err, "header_size_max") != NULL);
        free(m.data);
    }
    /* 600 KiB in one field (a To: of 10,000 addresses is 400 KB: Postfix passes fields of up
     * to 100 KB, Exim headers of up to 1 MB; the default was 64 KiB), and a 1,100 KiB line that
     * is not a field (no colon): both fine */
    struct tp_text ok = {NULL, 0, 0};
    tp_text_add(&ok, "Subject: fine\r\nX-Big: %0*d\r\n%0*d\r\n\r\nbody\r\n", 600 * 1024, 7,
                1100 * 1024, 9);
    CHECK_EQ_INT(tp_parse_limited(&ok, NULL, err, sizeof err), MV_OK);
    struct mv_limits small = MV_LIMITS_DEFAULT;
    small.header_size_max = 1000;
    CHECK_EQ_INT(tp_parse_limited(&ok, &small, err, sizeof err), MV_ELIMIT);
    free(ok.data);
}

static void test_limit_message_size(void)
{
    struct tp_text m = {NULL, 0, 0};
    tp_text_add(&m, "Subject: size\r\n\r\n%0*d\r\n", 81, 0); /* 100 bytes */
    CHECK_EQ_INT(m.len, 100);
    struct mv_limits limits = MV_LIMITS_DEFAULT;
    limits.message_size_max = 100;
    char err[256] = "";
    CHECK_EQ_INT(tp_parse_limited(&m, &limits, err, sizeof err), MV_OK);
    limits.message_size_max = 99;
    CHECK_EQ_INT(tp_parse_limited(&m, &limits, err, sizeof err), MV_ELIMIT);
    CHECK(strstr(err, "message_size_max") != NULL);
    free(m.data);
}

/* ---- degenerate input ----------------------------------------------------------------------- */

static void tp_fill_random(uint8_t *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15u + 1;
    for (size_t i = 0; i < n; i++) { /* xorshift64: fixed, not secret */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)(x >> 32);
    }
}

static void test_garbage_input(void)
{
    uint8_t *buf = malloc(1 << 16);
    CHECK(buf != NULL);
    struct store_parsed p;
    CHECK(tp_parse(NULL, 0, 1, &p) == MV_OK);
    int empty = p.subject[0] == '\0' && p.from[0] == '\0' && p.text[0] == '\0' &&
                p.part_count == 0 && p.reference_count == 0 && p.sent_date == 0;
    store_parsed_free(&p);
    CHECK(empty);
    memset(buf, 0, 1 << 16);
    CHECK(tp_parse(buf, 1 << 16, 1, &p) == MV_OK);
    empty = p.subject[0] == '\0' && p.from[0] == '\0' && p.message_id[0] == '\0';
    CHECK(tp_problem(&p, 1 << 16) == NULL);
    store_parsed_free(&p);
    CHECK(empty);
    for (uint64_t seed = 1; seed <= 64; seed++) {
        size_t n = (size_t)(seed * 997) % (1 << 16);
        tp_fill_random(buf, n, seed);
        CHECK(tp_parse(buf, n, 1, &p) == MV_OK);
        const char *problem = tp_problem(&p, n);
        int reassembles = tp_reassembles(buf, n, &p);
        store_parsed_free(&p);
        CHECK(problem == NULL && reassembles);
    }
    store_parsed_free(&p); /* twice is fine */
    free(buf);
}

/* levels of nesting, each a multipart or (alternately, if mixed) a message/rfc822, around a
 * 12 KiB base64 leaf. */
static void tp_nested(struct tp_text *m, int levels, int mixed)
{
    tp_text_add(m, "Subject: nested %d\r\n", levels);
    for (int i = 0; i < levels; i++) {
        if (mixed && i % 2 == 1) {
            tp_text_add(m, "Content-Type: message/rfc822\r\n\r\nSubject: level %d\r\n", i);
        } else {
            tp_text_add(m, "Content-Type: multipart/mixed; boundary=\"n%d\"\r\n\r\n--n%d\r\n", i,
                        i);
        }
    }
    tp_text_add(m, "Content-Transfer-Encoding: base64\r\n\r\n");
    for (int i = 0; i < 12 * 1024 / 57; i++) {
        tp_text_add(m, "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2\r\n");
    }
}

static void test_deep_nesting(void)
{
    static const int levels[] = {10, 200, 2000};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        for (int mixed = 0; mixed <= 1; mixed++) {
            struct tp_text m = {NULL, 0, 0};
            tp_nested(&m, levels[i], mixed);
            struct store_parsed p;
            CHECK(tp_parse(m.data, m.len, TP_SPLIT_MIN, &p) == MV_OK);
            const char *problem = tp_problem(&p, m.len);
            size_t parts = p.part_count;
            char subject[32];
            snprintf(subject, sizeof subject, "nested %d", levels[i]);
            int subject_ok = strcmp(p.subject, subject) == 0;
            store_parsed_free(&p);
            free(m.data);
            CHECK(problem == NULL && subject_ok);
            /* the leaf is found when shallow, and beyond STORE_PARSE_DEPTH_MAX it is not */
            CHECK_EQ_INT(parts, levels[i] < STORE_PARSE_DEPTH_MAX ? 1 : 0);
        }
    }
}

static void test_many_parts(void)
{
    struct tp_text m = {NULL, 0, 0};
    tp_text_add(&m, "Subject: many\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n");
    for (int i = 0; i < STORE_PARSE_PARTS_MAX + 2000; i++) {
        tp_text_add(&m, "--b\r\n\r\npart %d\r\n", i);
    }
    tp_text_add(&m, "--b--\r\n");
    struct store_parsed p;
    CHECK(tp_parse(m.data, m.len, 1, &p) == MV_OK);
    CHECK(tp_problem(&p, m.len) == NULL);
    CHECK_EQ_INT(p.part_count, STORE_PARSE_PARTS_MAX - 1); /* the multipart is one of them */
    CHECK(strstr(p.text, "part 0\n") != NULL);
    CHECK(strstr(p.text, "part 9998") != NULL);
    CHECK(strstr(p.text, "part 9999") == NULL);
    store_parsed_free(&p);
    free(m.data);
}

/* A body of nothing but potential structure: GMime gets the header block only. */
static void test_structure_guard(void)
{
    struct tp_text m = {NULL, 0, 0};
    tp_text_add(&m, "Subject: guarded\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n");
    for (int i = 0; i <= STORE_PARSE_STRUCTURE_MAX; i++) {
        tp_text_add(&m, i % 2 ? "--b\r\n" : "a:b\r\n");
    }
    struct store_parsed p;
    CHECK(tp_parse(m.data, m.len, 1, &p) == MV_OK);
    CHECK(strcmp(p.subject, "guarded") == 0);
    CHECK_EQ_INT(p.part_count, 0);
    CHECK(p.text[0] == '\0');
    store_parsed_free(&p);
    free(m.data);
}

/* ---- fields and text ------------------------------------------------------------------------ */

static void test_references_and_ids(void)
{
    struct tp_text m = {NULL, 0, 0};
    tp_text_add(&m, "Message-ID: garbage with spaces\r\nIn-Reply-To: (note) <not valid> "
                    "<parent@example.org>\r\nReferences:");
    for (int i = 0; i < 1500; i++) {
        tp_text_add(&m, " <r%d@example.org>\r\n", i);
    }
    tp_text_add(&m, "\r\nbody\r\n");
    struct store_parsed p;
    CHECK(tp_parse(m.data, m.len, 1, &p) == MV_OK);
    CHECK(tp_problem(&p, m.len) == NULL);
    CHECK(strcmp(p.message_id, "") == 0);
    CHECK(strcmp(p.in_reply_to, "parent@example.org") == 0);
    CHECK_EQ_INT(p.reference_count, STORE_PARSE_REFERENCES_MAX);
    CHECK(strcmp(p.references[0], "r0@example.org") == 0);
    CHECK(strcmp(p.references[1], "r477@example.org") == 0);
    CHECK(strcmp(p.references[p.reference_count - 1], "r1499@example.org") == 0);
    store_parsed_free(&p);
    free(m.data);
}

/* A body far over the cap, of two-byte characters: cut at the cap on a character boundary. */
static void test_text_cap(void)
{
    struct tp_text m = {NULL, 0, 0};
    tp_text_add(&m, "Subject: long\r\nContent-Type: text/plain; charset=utf-8\r\n"
                    "Content-Transfer-Encoding: 8bit\r\n\r\nx");
    for (int i = 0; i < 3 * 1024 * 1024 / 64; i++) {
        tp_text_add(&m, "%s\r\n", "ééééééééééééééééééééééééééééééé");
    }
    struct store_parsed p;
    CHECK(tp_parse(m.data, m.len, TP_SPLIT_MIN, &p) == MV_OK);
    CHECK(tp_problem(&p, m.len) == NULL);
    size_t n = strlen(p.text);
    CHECK(n <= STORE_PARSE_TEXT_MAX && n >= STORE_PARSE_TEXT_MAX - 4);
    CHECK_EQ_INT(p.part_count, 1); /* the body itself is a large leaf */
    store_parsed_free(&p);
    free(m.data);
}

/* The header's indexed text (SEARCH TEXT) keeps a word at the end of a 400 KB To: (10,000
 * addresses, within header_size_max), and is cut at STORE_PARSE_HEADER_TEXT_MAX on a
 * character when the header is longer still (the cut was 64 KiB: the word was lost). */
static void test_header_text_cap(void)
{
    struct tp_text m = {NULL, 0, 0};
    tp_text_add(&m, "From: a@example.org\r\nTo: ");
    for (int i = 0; i < 10000; i++) {
        tp_text_add(&m, "%s\"User %d\" <user%d@example.org>", i > 0 ? ",\r\n " : "", i, i);
    }
    tp_text_add(&m, "\r\nSubject: s\r\n\r\nbody\r\n");
    struct store_parsed p;
    CHECK(tp_parse(m.data, m.len, TP_SPLIT_MIN, &p) == MV_OK);
    CHECK(strstr(p.header_text, "user9999@example.org") != NULL);
    CHECK(strstr(p.header_text, "Subject: s") != NULL);
    store_parsed_free(&p);
    free(m.data);

    m = (struct tp_text){NULL, 0, 0};
    for (int i = 0; i < 3; i++) { /* three fields of 600 KiB of two-byte characters */
        tp_text_add(&m, "X-Big-%d: ", i);
        for (int j = 0; j < 600 * 1024 / 62; j++) {
            tp_text_add(&m, "%s%s", j > 0 ? "\r\n " : "", "ééééééééééééééééééééééééééééééé");
        }
        tp_text_add(&m, "\r\n");
    }
    tp_text_add(&m, "\r\nbody\r\n");
    CHECK(tp_parse(m.data, m.len, TP_SPLIT_MIN, &p) == MV_OK);
    size_t n = strlen(p.header_text);
    CHECK(n <= STORE_PARSE_HEADER_TEXT_MAX && n >= STORE_PARSE_HEADER_TEXT_MAX - 4);
    CHECK(g_utf8_validate(p.header_text, (gssize)n, NULL));
    store_parsed_free(&p);
    free(m.data);
}

/* Undeclared 8-bit text is read as ISO-8859-1; a wrong declaration ends in U+FFFD. */
static void test_text_charsets(void)
{
    static const struct {
        const char *msg, *text;
    } cases[] = {
        {"Content-Type: text/plain\r\n\r\ncaf\xe9\r\n", "café"},
        {"Content-Type: text/plain; charset=utf-8\r\n\r\ncaf\xe9!\r\n", "caf\xef\xbf\xbd!"},
        {"Content-Type: text/plain; charset=no-such-charset\r\n\r\ncaf\xe9\r\n", "café"},
        {"Content-Type: text/html\r\n\r\n<p>a&lt;b&gt;c &#0; &#xD800; &bogus; &#1114111;</p>",
         "a<b>c &#0; &#xD800; &bogus; \xf4\x8f\xbf\xbf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct store_parsed p;
        CHECK(tp_parse(cases[i].msg, strlen(cases[i].msg), 1, &p) == MV_OK);
        int ok =
            tp_problem(&p, strlen(cases[i].msg)) == NULL && strstr(p.text, cases[i].text) != NULL;
        if (!ok) {
            printf("  case %zu: text [%s]\n", i, p.text);
        }
        store_parsed_free(&p);
        CHECK(ok);
    }
}

/* ---- threads -------------------------------------------------------------------------------- */

static void *tp_thread_main(void *arg)
{
    const struct tp_table *t = arg;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < t->count; i++) {
            size_t len = 0;
            uint8_t *raw = tu_read_file(tp_corpus_path(t->rows[i].field[0]), &len);
            struct store_parsed p;
            if (raw == NULL || tp_parse(raw, len, TP_SPLIT_MIN, &p) != MV_OK) {
                free(raw);
                return (void *)1;
            }
            int same = strcmp(p.subject, t->rows[i].field[1]) == 0 &&
                       p.part_count == strtoull(t->rows[i].field[6], NULL, 10);
            if (!same) {
                printf("  thread: %s gave [%s] %zu\n", t->rows[i].field[0], p.subject,
                       p.part_count);
            }
            store_parsed_free(&p);
            free(raw);
            if (!same) {
                return (void *)1;
            }
        }
    }
    return NULL;
}

static void test_threads(void)
{
    static struct tp_table t; /* read-only while the threads run */
    CHECK(tp_table_load("expected.tsv", TP_FIELDS, &t) == 0);
    pthread_t threads[TP_THREADS];
    for (int i = 0; i < TP_THREADS; i++) {
        CHECK(pthread_create(&threads[i], NULL, tp_thread_main, &t) == 0);
    }
    int failures = 0;
    for (int i = 0; i < TP_THREADS; i++) {
        void *result = NULL;
        CHECK(pthread_join(threads[i], &result) == 0);
        failures += result != NULL;
    }
    free(t.buf);
    CHECK_EQ_INT(failures, 0);
}

int main(void)
{
    TEST(test_corpus_expected);
    TEST(test_corpus_complete);
    TEST(test_corpus_part_ranges);
    TEST(test_corpus_dup_attachments);
    TEST(test_corpus_split_min_1);
    TEST(test_corpus_text);
    TEST(test_corpus_no_text);
    TEST(test_limit_header_count);
    TEST(test_header_text_cap);
    TEST(test_limit_header_size);
    TEST(test_limit_message_size);
    TEST(test_garbage_input);
    TEST(test_deep_nesting);
    TEST(test_many_parts);
    TEST(test_structure_guard);
    TEST(test_references_and_ids);
    TEST(test_text_cap);
    TEST(test_text_charsets);
    TEST(test_threads);
    return th_summary();
}
