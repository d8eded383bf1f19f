/*
 * test_fetch_whole.c -- a whole message read back (mv_message_fetch, mv_message_fetch_into)
 * in every way it is stored: a small body stored as it is, a compressed skeleton, a large
 * incompressible attachment stored as it is, a large compressible one stored compressed,
 * two attachments in one message, the same attachment twice, and mixed CRLF / LF endings.
 * Each comes back byte for byte, into the caller's memory too.
 *
 *   - An attachment stored as it is goes from SQLite's pages straight to its place in the
 *     message (store_blob.c, store_body_place_part: incremental BLOB I/O): reading a message
 *     with a 1 MiB attachment raises SQLite's own memory high-water mark by far less than the
 *     attachment (the old read took the attachment as a column value first: a copy of its
 *     own, 1 MiB of SQLite's memory, then copied it again).
 *   - Damaged rows give MV_ECORRUPT and no bytes: an attachment's data row gone, its data
 *     a byte longer or shorter than recorded, a compressed one whose frame is cut.
 * The bytes are a pure function of their position; nothing depends on a random byte.
 */
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FW_PASSWORD "whole fetch test password"

static int fw_open(const char *name, mv_store **s)
{
    return tu_store_create(name, FW_PASSWORD, 2048, s);
}

/* Appends len bytes of base64-alphabet lines that zstd cannot shrink by a third (a mix
 * generated from the position: like the base64 of a JPEG), each line of 76 and eol. */
static size_t fw_put_opaque(char *at, size_t len, unsigned seed, const char *eol)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0, col = 0, el = strlen(eol);
    uint32_t x = 2463534242u ^ seed;
    while (n + el < len) {
        if (col == 76) {
            memcpy(at + n, eol, el);
            n += el;
            col = 0;
            continue;
        }
        x ^= x << 13; /* xorshift32: a fixed sequence, not a random source */
        x ^= x >> 17;
        x ^= x << 5;
        at[n++] = b64[x & 63];
        col++;
    }
    memcpy(at + n, eol, el);
    return n + el;
}

/* Appends len bytes of text lines that compress well. */
static size_t fw_put_text(char *at, size_t len, unsigned seed, const char *eol)
{
    size_t n = 0, el = strlen(eol);
    for (unsigned line = 0; n + 80 + el < len; line++) {
        n += (size_t)snprintf(at + n, len - n, "line %u of part %u: the quick brown fox%s", line,
                              seed, eol);
    }
    return n;
}

/* A multipart message with a text part and one attachment per entry of kinds ('o': opaque,
 * 't': text), each of size bytes; malloc'd, *len_out its length. */
static char *
fw_message(const char *eol, const char *kinds, size_t size, unsigned seed, size_t *len_out)
{
    size_t cap = 4096 + strlen(kinds) * (size + 512);
    char *m = malloc(cap);
    if (m == NULL) {
        return NULL;
    }
    size_t n =
        (size_t)snprintf(m, cap,
                         "From: a@example.org%sTo: b@example.org%sSubject: whole %u%s"
                         "MIME-Version: 1.0%sContent-Type: multipart/mixed; "
                         "boundary=\"b%u\"%s%s--b%u%sContent-Type: text/plain%s%s"
                         "hello %u%s",
                         eol, eol, seed, eol, eol, seed, eol, eol, seed, eol, eol, eol, seed, eol);
    for (const char *k = kinds; *k != '\0'; k++) {
        n += (size_t)snprintf(m + n, cap - n,
                              "--b%u%sContent-Type: application/octet-stream%s"
                              "Content-Transfer-Encoding: base64%s%s",
                              seed, eol, eol, eol, eol);
        unsigned part_seed = *k == 'O' ? seed : seed + (unsigned)(k - kinds) * 7919u;
        n += *k == 't' ? fw_put_text(m + n, size, part_seed, eol)
                       : fw_put_opaque(m + n, size, part_seed, eol);
    }
    n += (size_t)snprintf(m + n, cap - n, "--b%u--%s", seed, eol);
    *len_out = n;
    return m;
}

static void *fw_place(void *arg, size_t size)
{
    void **slot = arg;
    *slot = malloc(size != 0 ? size : 1);
    return *slot;
}

/* Appends m and reads it back both ways; the UID, or 0 after a failed check. */
static uint32_t fw_roundtrip(mv_store *s, const char *m, size_t len)
{
    uint32_t uid = 0;
    if (mv_message_append(s, "INBOX", m, len, 0, NULL, 1700000000, &uid) != MV_OK) {
        th_fail(__FILE__, __LINE__, mv_store_errmsg(s));
        return 0;
    }
    void *whole = NULL, *placed = NULL;
    size_t whole_len = 0, placed_len = 0;
    int ok = mv_message_fetch(s, "INBOX", uid, &whole, &whole_len) == MV_OK && whole_len == len &&
             memcmp(whole, m, len) == 0 &&
             mv_message_fetch_into(s, "INBOX", uid, fw_place, &placed, &placed_len) == MV_OK &&
             placed_len == len && memcmp(placed, m, len) == 0;
    mv_free(whole);
    free(placed);
    if (!ok) {
        th_fail(__FILE__, __LINE__, "a message came back other than stored");
        return 0;
    }
    return uid;
}

static long long fw_count(mv_store *s, const char *sql)
{
    return tu_int(mv_store_db(s), sql);
}

static void test_every_shape(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(fw_open("shapes", &s), MV_OK);
    static const struct {
        const char *eol, *kinds;
        size_t size;
    } shapes[] = {
        {"\r\n", "", 0},         /* small: one skeleton */
        {"\n", "t", 6000},       /* a text part under the split size: in the skeleton */
        {"\r\n", "o", 300000},   /* an opaque attachment, stored as it is */
        {"\n", "t", 300000},     /* a text attachment, stored compressed */
        {"\r\n", "ot", 200000},  /* one of each */
        {"\r\n", "ooo", 140000}, /* three, read through one BLOB handle */
        {"\n", "OO", 140000},    /* the same bytes twice: one attachment row, two parts */
        {"\r\n", "o", 131072},   /* at the split size (STORE_SPLIT_MIN) */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t len = 0;
        char *m = fw_message(shapes[i].eol, shapes[i].kinds, shapes[i].size, (unsigned)i + 1, &len);
        CHECK(m != NULL);
        uint32_t uid = fw_roundtrip(s, m, len);
        free(m);
        CHECK(uid != 0);
    }
    /* the shapes were stored as described */
    CHECK(fw_count(s, "SELECT count(*) FROM attachments WHERE compression = 0") >= 4);
    CHECK(fw_count(s, "SELECT count(*) FROM attachments WHERE compression = 1") >= 2);
    CHECK(fw_count(s, "SELECT count(*) FROM body_parts bp JOIN body_parts bq ON "
                      "bq.body_id = bp.body_id AND bq.attachment_id = bp.attachment_id AND "
                      "bq.seq > bp.seq") >= 1);
    mv_store_close(&s);
}

static void test_attachment_not_copied(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(fw_open("nocopy", &s), MV_OK);
    size_t len = 0, size = 1u << 20;
    char *m = fw_message("\r\n", "o", size, 77, &len);
    CHECK(m != NULL);
    uint32_t uid = fw_roundtrip(s, m, len);
    CHECK(uid != 0);
    CHECK_EQ_INT(fw_count(s, "SELECT max(size) FROM attachments WHERE compression = 0") >
                     (long long)(size - size / 8),
                 1);
    sqlite3_int64 cur = 0, high = 0;
    void *placed = NULL;
    size_t placed_len = 0;
    CHECK_EQ_INT(sqlite3_status64(SQLITE_STATUS_MEMORY_USED, &cur, &high, 1), SQLITE_OK);
    CHECK_EQ_INT(mv_message_fetch_into(s, "INBOX", uid, fw_place, &placed, &placed_len), MV_OK);
    CHECK_EQ_INT(sqlite3_status64(SQLITE_STATUS_MEMORY_USED, &cur, &high, 0), SQLITE_OK);
    CHECK(placed_len == len && memcmp(placed, m, len) == 0);
    sqlite3_int64 base = 0, unused = 0;
    (void)sqlite3_status64(SQLITE_STATUS_MEMORY_USED, &base, &unused, 0);
    printf("  # SQLite's memory rose by %lld bytes reading a %zu-byte attachment\n",
           (long long)(high - base), size);
    CHECK(high - base < (sqlite3_int64)(size / 4)); /* the column copy was all of it */
    free(placed);
    free(m);
    mv_store_close(&s);
}

static void test_damaged_attachments(void)
{
    static const char *const damage[] = {
        "DELETE FROM attachments_data",
        "UPDATE attachments_data SET data = data || x'00'",
        "UPDATE attachments_data SET data = substr(data, 1, length(data) - 1)",
    };
    for (size_t d = 0; d < sizeof damage / sizeof damage[0]; d++) {
        for (int compressed = 0; compressed <= 1; compressed++) {
            char name[32];
            snprintf(name, sizeof name, "damaged%zu%d", d, compressed);
            mv_store *s = NULL;
            CHECK_EQ_INT(fw_open(name, &s), MV_OK);
            size_t len = 0;
            char *m = fw_message("\r\n", compressed ? "t" : "o", 140000, 5, &len);
            CHECK(m != NULL);
            uint32_t uid = fw_roundtrip(s, m, len);
            free(m);
            CHECK(uid != 0);
            CHECK_EQ_INT(fw_count(s, "SELECT compression FROM attachments"), compressed);
            sqlite3 *db = mv_store_db(s);
            CHECK_EQ_INT(tu_exec(db, "PRAGMA foreign_keys = OFF"), SQLITE_OK);
            CHECK_EQ_INT(tu_exec(db, damage[d]), SQLITE_OK);
            void *whole = NULL, *placed = NULL;
            size_t whole_len = 0, placed_len = 0;
            CHECK_EQ_INT(mv_message_fetch(s, "INBOX", uid, &whole, &whole_len), MV_ECORRUPT);
            CHECK(whole == NULL);
            CHECK(strlen(mv_store_errmsg(s)) > 0);
            CHECK_EQ_INT(mv_message_fetch_into(s, "INBOX", uid, fw_place, &placed, &placed_len),
                         MV_ECORRUPT);
            free(placed);
            mv_store_close(&s);
        }
    }
}

int main(void)
{
    TEST(test_every_shape);
    TEST(test_attachment_not_copied);
    TEST(test_damaged_attachments);
    return th_summary();
}
