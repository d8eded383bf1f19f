/*
 * test_header_copy.c -- schema version 11's bodies.head: a body whose skeleton holds more
 * than its header keeps a copy of its stored header unit (at most 2 KiB) in its bodies row, so
 * a read of its header is the one statement that finds the message and never descends into
 * bodies_data (docs/SCHEMA.md, "Version 11"; docs/BENCHMARKS.md, "The header unit in the
 * body's row").
 *
 * Checked: the header comes back byte for byte with and without the copy (a body stored
 * before version 11 has none); the copies take fewer pages from the file for the same headers,
 * small skeletons and skeletons over 8 KiB alike (page reads counted as SQLite's cache misses
 * from an emptied cache, never timed); a message that is only a header and a header unit over
 * 2 KiB get no copy and still read right; a copy that is not the skeleton's first bytes is
 * reported by mv_store_check and made again by mv_store_repair when the whole message checks
 * out, left when the skeleton is what is damaged; a store of version 10 gains the column at
 * its next open.
 */
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC_PASSWORD "header copy test password"
#define HC_BIG      24 /* messages 1..HC_BIG: a mid-sized attachment (skeleton over 8 KiB) */
#define HC_ALL      48 /* messages HC_BIG+1..HC_ALL: a short text (skeleton under 8 KiB) */

/* Deterministic bytes (xorshift64): an attachment that does not compress, the same every run. */
static uint64_t hc_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Message i: trace_lines header lines of hex tokens (a header unit that compresses to
 * ~half), then, if attach_bytes > 0, a base64-looking attachment of that many bytes. */
static char *hc_message(uint32_t i, int trace_lines, size_t attach_bytes, size_t *len)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t cap = 4096 + (size_t)trace_lines * 80 + attach_bytes + attach_bytes / 76 * 2;
    char *m = malloc(cap);
    if (m == NULL) {
        return NULL;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull ^ ((uint64_t)i * 0x100000001b3ull);
    size_t n = (size_t)snprintf(m, cap,
                                "From: sender%u@example.org\r\nTo: user@example.org\r\n"
                                "Subject: report %u\r\nDate: Mon, 1 Dec 2025 10:00:00 +0000\r\n",
                                i, i);
    for (int t = 0; t < trace_lines; t++) {
        n += (size_t)snprintf(m + n, cap - n, "X-Trace-%d: %016llx%016llx\r\n", t,
                              (unsigned long long)hc_next(&x), (unsigned long long)hc_next(&x));
    }
    if (attach_bytes == 0) {
        n += (size_t)snprintf(m + n, cap - n, "\r\nshort body %u\r\n", i);
        *len = n;
        return m;
    }
    n += (size_t)snprintf(m + n, cap - n,
                          "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n"
                          "\r\n--b\r\nContent-Type: text/plain\r\n\r\nsee the file %u\r\n--b\r\n"
                          "Content-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\n"
                          "\r\n",
                          i);
    for (size_t k = 0; k < attach_bytes; k++) {
        m[n++] = b64[hc_next(&x) & 63];
        if (k % 76 == 75) {
            m[n++] = '\r';
            m[n++] = '\n';
        }
    }
    n += (size_t)snprintf(m + n, cap - n, "\r\n--b--\r\n");
    *len = n;
    return m;
}

static size_t hc_header_len(const char *m, size_t len)
{
    const char *end = strstr(m, "\r\n\r\n");
    return end != NULL ? (size_t)(end - m) + 4 : len;
}

/* Appends message i; its UID (== i) checked. */
static void hc_append(mv_store *s, uint32_t i, int trace_lines, size_t attach_bytes)
{
    size_t len = 0;
    char *m = hc_message(i, trace_lines, attach_bytes, &len);
    uint32_t uid = 0;
    int rc =
        m != NULL ? mv_message_append(s, "INBOX", m, len, 0, NULL, 1700000000, &uid) : MV_ENOMEM;
    free(m);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(uid, i);
}

/* The size of the attachment of message i: 12-60 KB for the big ones, so the skeletons'
 * chains differ; none for the small ones. */
static size_t hc_attach_of(uint32_t i)
{
    return i <= HC_BIG ? 12000 + (size_t)i * 2000 : 0;
}

/* The headers of messages 1..HC_ALL, each read from an emptied page cache and compared byte
 * for byte with what was appended: the pages they took from the file in all, -1 if one was
 * wrong or failed. */
static int hc_read_headers(mv_store *s)
{
    sqlite3 *db = mv_store_db(s);
    int total = 0;
    for (uint32_t i = 1; i <= HC_ALL && total >= 0; i++) {
        size_t want_len = 0;
        char *want = hc_message(i, 30, hc_attach_of(i), &want_len);
        int cur = 0, high = 0;
        void *head = NULL;
        size_t len = 0;
        sqlite3_db_release_memory(db);
        sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_MISS, &cur, &high, 1);
        int rc = mv_message_fetch_header(s, "INBOX", i, &head, &len);
        sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_MISS, &cur, &high, 1);
        int right = want != NULL && rc == MV_OK && len == hc_header_len(want, want_len) &&
                    memcmp(head, want, len) == 0;
        if (!right) {
            printf("  # header of %u: rc %d, %zu bytes, wrong or failed\n", i, rc, len);
        }
        total = right ? total + cur : -1;
        mv_free(head);
        free(want);
    }
    return total;
}

/* A store named name with messages 1..HC_ALL. */
static void hc_fill(const char *name, mv_store **s)
{
    CHECK_EQ_INT(tu_store_create(name, HC_PASSWORD, 2048, s), MV_OK);
    for (uint32_t i = 1; i <= HC_ALL; i++) {
        hc_append(*s, i, 30, hc_attach_of(i));
    }
}

#define HC_COPIES                                                                                  \
    "SELECT count(*) FROM bodies b JOIN bodies_data d ON d.id = b.id WHERE b.head IS NOT NULL "    \
    "AND b.head = substr(d.data, 1, b.header_stored)"

/* Every body keeps the copy, equal to the skeleton's first header_stored bytes; the header
 * reads take fewer pages from the file than the same reads without the copies (a store
 * written before version 11), for the big skeletons (read through the BLOB handle without a
 * copy) and for the small ones (read whole with the statement without one) each, and both
 * give the same bytes. */
static void test_copy_reads_fewer_pages(void)
{
    mv_store *s = NULL;
    hc_fill("copy", &s);
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(tu_int(db, HC_COPIES), HC_ALL);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies WHERE stored_size <= 8192"),
                 HC_ALL - HC_BIG);
    int with_copy = hc_read_headers(s);
    CHECK_EQ_INT(tu_exec(db, "UPDATE bodies SET head = NULL WHERE stored_size > 8192"), SQLITE_OK);
    int big_without = hc_read_headers(s);
    CHECK_EQ_INT(tu_exec(db, "UPDATE bodies SET head = NULL"), SQLITE_OK);
    int without = hc_read_headers(s);
    CHECK(with_copy >= 0 && big_without >= 0 && without >= 0);
    printf("  # pages read for %d headers: %d with the copies, %d without those of the big "
           "skeletons, %d without any\n",
           HC_ALL, with_copy, big_without, without);
    CHECK(with_copy < big_without);
    CHECK(big_without < without);
    mv_store_close(&s);
}

/* No copy where there is nothing else to skip (a message that is only a header) or where it
 * would not fit (a header unit over STORE_BLOB_HEAD_COPY_MAX, 2 KiB stored: read from the
 * skeleton as before). All three headers still come back right. */
static void test_no_copy_when_header_only_or_huge(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("nocopy", HC_PASSWORD, 2048, &s), MV_OK);
    static const char only_header[] = "From: a@example.org\r\nSubject: only a header\r\n";
    uint32_t uid = 0;
    CHECK_EQ_INT(mv_message_append(s, "INBOX", only_header, sizeof only_header - 1, 0, NULL,
                                   1700000000, &uid),
                 MV_OK);
    CHECK_EQ_INT(uid, 1);
    hc_append(s, 2, 400, 40000); /* a header unit of ~8 KB stored */
    hc_append(s, 3, 30, hc_attach_of(3));
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM bodies WHERE head IS NULL"), 2);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT header_stored > 2048 FROM bodies b JOIN messages m "
                                        "ON m.body_id = b.id WHERE m.uid = 2"),
                 1);
    void *head = NULL;
    size_t len = 0;
    CHECK_EQ_INT(mv_message_fetch_header(s, "INBOX", 1, &head, &len), MV_OK);
    CHECK(len == sizeof only_header - 1 && memcmp(head, only_header, len) == 0);
    mv_free(head);
    const struct {
        uint32_t uid;
        int trace;
        size_t attach;
    } cases[] = {{2, 400, 40000}, {3, 30, hc_attach_of(3)}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t want_len = 0;
        char *want = hc_message(cases[c].uid, cases[c].trace, cases[c].attach, &want_len);
        head = NULL;
        len = 0;
        CHECK(want != NULL);
        CHECK_EQ_INT(mv_message_fetch_header(s, "INBOX", cases[c].uid, &head, &len), MV_OK);
        CHECK_EQ_INT((int)len, (int)hc_header_len(want, want_len));
        CHECK(head != NULL && memcmp(head, want, len) == 0);
        mv_free(head);
        free(want);
    }
    mv_store_close(&s);
}

static void hc_problem(void *arg, const char *what, const char *detail)
{
    char *all = arg;
    size_t used = strlen(all);
    snprintf(all + used, 2048 - used, "%s: %s\n", what, detail);
}

/* The check reports a header copy that is not its stored header; then the repair runs and
 * makes rebuilt copies again. */
static void hc_check_then_repair(mv_store *s, int rebuilt)
{
    static char problems[2048];
    problems[0] = '\0';
    struct mv_check_report cr;
    CHECK_EQ_INT(mv_store_check(s, hc_problem, problems, &cr), MV_ECORRUPT);
    printf("  # %s", problems);
    CHECK(strstr(problems, "keeps a copy of its header unit that is not its stored header") !=
          NULL);
    struct mv_repair_report rr;
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT((int)rr.header_copies_rebuilt, rebuilt);
}

/* A copy that is not its skeleton's header unit (here: another body's, a whole valid frame,
 * so only the comparison can tell) is reported by the check and made again by the repair,
 * the whole message having checked out; the headers are then right. */
static void test_wrong_copy_checked_and_repaired(void)
{
    mv_store *s = NULL;
    hc_fill("wrong", &s);
    CHECK_EQ_INT(tu_exec(mv_store_db(s),
                         "UPDATE bodies SET head = (SELECT head FROM bodies WHERE id = "
                         "(SELECT body_id FROM messages WHERE uid = 2)) WHERE id = "
                         "(SELECT body_id FROM messages WHERE uid = 1)"),
                 SQLITE_OK);
    hc_check_then_repair(s, 1);
    static char problems[2048];
    problems[0] = '\0';
    struct mv_check_report cr;
    CHECK_EQ_INT(mv_store_check(s, hc_problem, problems, &cr), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), HC_COPIES), HC_ALL);
    CHECK(hc_read_headers(s) >= 0);
    mv_store_close(&s);
}

/* Flips bit 2 of byte at of message uid's stored skeleton (through SQL). 0 or -1. */
static int hc_flip_skeleton_bit(sqlite3 *db, uint32_t uid, int at)
{
    sqlite3_stmt *st = NULL;
    unsigned char *data = NULL;
    int n = 0, ok = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT data FROM bodies_data WHERE id = (SELECT body_id FROM "
                           "messages WHERE uid = ?)",
                           -1, &st, NULL) != SQLITE_OK) {
        return -1;
    }
    sqlite3_bind_int64(st, 1, uid);
    if (sqlite3_step(st) == SQLITE_ROW && (n = sqlite3_column_bytes(st, 0)) > at &&
        (data = malloc((size_t)n)) != NULL) {
        memcpy(data, sqlite3_column_blob(st, 0), (size_t)n);
        data[at] ^= 0x04;
    }
    sqlite3_finalize(st);
    if (data != NULL && sqlite3_prepare_v2(db,
                                           "UPDATE bodies_data SET data = ? WHERE id = "
                                           "(SELECT body_id FROM messages WHERE uid = ?)",
                                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_blob(st, 1, data, n, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, uid);
        ok = sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(db) == 1;
        sqlite3_finalize(st);
    }
    free(data);
    return ok ? 0 : -1;
}

/* The skeleton damaged inside its header unit (a bit flipped by SQL: on disk the page's tag
 * would catch it first) and the copy right: the check reports both, the repair cannot tell
 * which is wrong without a body that checks out and leaves the copy, and the header still
 * reads right from it. */
static void test_damaged_skeleton_keeps_copy(void)
{
    mv_store *s = NULL;
    hc_fill("damaged", &s);
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(hc_flip_skeleton_bit(db, 3, 9), 0);
    CHECK_EQ_INT(tu_int(db, HC_COPIES), HC_ALL - 1);
    hc_check_then_repair(s, 0);
    CHECK_EQ_INT(tu_int(db, HC_COPIES), HC_ALL - 1);
    CHECK(hc_read_headers(s) >= 0);
    mv_store_close(&s);
}

/* A store of version 10 (no column) opens as version 11 with the column, its old bodies
 * without copies and read as before, a new body with its copy. */
static void test_migration_from_10(void)
{
    mv_store *s = NULL;
    hc_fill("migrate", &s);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), TU_DOWNGRADE_TO_V10 "PRAGMA user_version = 10"),
                 SQLITE_OK);
    mv_store_close(&s);
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    char err[256] = "";
    CHECK_EQ_INT(mv_store_open("migrate@example.org", HC_PASSWORD, strlen(HC_PASSWORD), &o, &s, err,
                               sizeof err),
                 MV_OK);
    if (s == NULL) {
        return;
    }
    CHECK_EQ_INT(tu_int(mv_store_db(s), "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM bodies WHERE head IS NOT NULL"), 0);
    CHECK(hc_read_headers(s) >= 0);
    hc_append(s, HC_ALL + 1, 30, 30000);
    CHECK_EQ_INT(tu_int(mv_store_db(s), HC_COPIES), 1);
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_copy_reads_fewer_pages);
    TEST(test_no_copy_when_header_only_or_huge);
    TEST(test_wrong_copy_checked_and_repaired);
    TEST(test_damaged_skeleton_keeps_copy);
    TEST(test_migration_from_10);
    return th_summary();
}
