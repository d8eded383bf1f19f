/* testutil.c -- see testutil.h. */
#include "testutil.h"

#include "harness.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *tu_path(const char *name)
{
    static char ring[16][1024];
    static unsigned next;
    char *p = ring[next++ % 16];
    snprintf(p, sizeof ring[0], "%s/%s", th_tmpdir(), name);
    return p;
}

int tu_open(const char *path, const char *password, mv_cipher cipher, unsigned flags, sqlite3 **db)
{
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.cipher = cipher;
    o.kdf_iter = TU_KDF_ITER;
    o.flags = flags;
    char *err = NULL;
    int rc = mv_db_open(path, password, strlen(password), &o, db, &err);
    if (rc != MV_OK && getenv("TU_VERBOSE") != NULL) {
        fprintf(stderr, "  mv_db_open(%s): %s: %s\n", path, mv_strerror(rc), err ? err : "");
    }
    sqlite3_free(err);
    return rc;
}

static int tu_count_step(void *arg)
{
    (*(long long *)arg)++;
    return 0;
}

void tu_steps_on(sqlite3 *db, long long *steps)
{
    sqlite3_progress_handler(db, 100, tu_count_step, steps);
}

void tu_steps_off(sqlite3 *db)
{
    sqlite3_progress_handler(db, 0, NULL, NULL);
}

int tu_fake_meta_rows(
    sqlite3 *db, const char *key_prefix, const char *value_sql, long long first, long long count)
{
    char *sql = sqlite3_mprintf(
        "WITH RECURSIVE c(i) AS (SELECT %lld UNION ALL SELECT i + 1 FROM c WHERE i < %lld) "
        "INSERT INTO meta(key, value) SELECT %Q || printf('%%020d', i), %s FROM c",
        first, first + count - 1, key_prefix, value_sql);
    if (sql == NULL) {
        return SQLITE_NOMEM;
    }
    int rc = tu_exec(db, sql);
    sqlite3_free(sql);
    return rc;
}

/* The VM steps (hundreds) of call(s, 16, left); -1 if it failed. */
static long long tu_batch_steps(mv_store *s, tu_batch_fn call, uint64_t *left)
{
    long long steps = 0;
    tu_steps_on(mv_store_db(s), &steps);
    int rc = call(s, 16, left);
    tu_steps_off(mv_store_db(s));
    if (rc != MV_OK) {
        fprintf(stderr, "  batch call: %s\n", mv_store_errmsg(s));
        return -1;
    }
    return steps;
}

int tu_batch_cost_flat(
    mv_store *s, const char *what, const char *key_prefix, const char *value_sql, tu_batch_fn call)
{
    sqlite3 *db = mv_store_db(s);
    uint64_t left_small = 0, left_big = 0;
    long long small = -1, big = -1;
    if (tu_fake_meta_rows(db, key_prefix, value_sql, 1000000000LL, 1200) == SQLITE_OK) {
        small = tu_batch_steps(s, call, &left_small); /* 1,184 left, counted up to 1,000 */
    }
    if (small > 0 &&
        tu_fake_meta_rows(db, key_prefix, value_sql, 2000000000LL, 24000) == SQLITE_OK) {
        big = tu_batch_steps(s, call, &left_big);
    }
    int flat = small > 0 && big > 0 && big <= small * 3 / 2;
    if (!flat || left_small != 1000 || left_big != 1000) {
        fprintf(stderr,
                "  %s call: %lld00 VM steps at 1,200 waiting (left %llu), %lld00 at 25,184 "
                "(left %llu)\n",
                what, small, (unsigned long long)left_small, big, (unsigned long long)left_big);
    }
    return flat && left_small == 1000 && left_big == 1000;
}

int tu_exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        const char *vfs = mv_db_vfs_errmsg(db);
        fprintf(stderr, "  sql failed (%d): %s [%s] in: %.80s\n", rc, err ? err : "",
                vfs ? vfs : "", sql);
    }
    sqlite3_free(err);
    return rc;
}

long long tu_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return v;
}

uint8_t *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n + 1);
    if (buf != NULL && fread(buf, 1, n, f) != n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (len != NULL) {
        *len = n;
    }
    return buf;
}

int tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        return -1;
    }
    int ok = fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

int tu_file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

long long tu_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static int tu_copy_file(const char *src, const char *dst)
{
    size_t n;
    uint8_t *data = tu_read_file(src, &n);
    if (data == NULL) {
        return -1;
    }
    int rc = tu_write_file(dst, data, n);
    free(data);
    return rc;
}

int tu_copy_db(const char *src, const char *dst)
{
    static const char *const suffixes[] = {"", "-wal", "-journal"};
    for (size_t i = 0; i < 3; i++) {
        char s[1024], d[1024];
        snprintf(s, sizeof s, "%s%s", src, suffixes[i]);
        snprintf(d, sizeof d, "%s%s", dst, suffixes[i]);
        unlink(d);
        if (tu_file_exists(s) && tu_copy_file(s, d) != 0) {
            return -1;
        }
    }
    return 0;
}

void tu_remove_db(const char *path)
{
    static const char *const suffixes[] = {"", "-wal", "-journal", "-shm"};
    for (size_t i = 0; i < 4; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
        unlink(p);
    }
}

int tu_flip_bit(const char *path, long long offset, int bit)
{
    FILE *f = fopen(path, "r+b");
    if (f == NULL) {
        return -1;
    }
    int rc = -1;
    if (fseek(f, offset, SEEK_SET) == 0) {
        int c = fgetc(f);
        if (c != EOF && fseek(f, offset, SEEK_SET) == 0 && fputc(c ^ (1 << bit), f) != EOF) {
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

void tu_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int md_len = 0;
    EVP_Digest(data, len, md, &md_len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) {
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    }
}

void tu_file_sha256(const char *path, char out[65])
{
    size_t n;
    uint8_t *data = tu_read_file(path, &n);
    if (data == NULL) {
        snprintf(out, 65, "missing");
        return;
    }
    tu_sha256_hex(data, n, out);
    free(data);
}

/* Row content: name with non-ASCII text, data of a length that makes overflow pages. */
static void tu_row(int id, char *name, size_t name_size, uint8_t **data, size_t *len)
{
    snprintf(name, name_size, "row %d — grüße ✓ %d", id, id * 7);
    *len = (id % 9 == 0) ? 0 : (id % 5 == 0) ? (size_t)(9000 + id * 37) : (size_t)(id * 13 % 700);
    *data = NULL;
    if (*len == 0) {
        return;
    }
    *data = malloc(*len);
    uint32_t x = (uint32_t)id * 2654435761u;
    for (size_t i = 0; i < *len; i++) {
        x = x * 1664525u + 1013904223u;
        (*data)[i] = (uint8_t)(x >> 24);
    }
}

void tu_fill_table(sqlite3 *db, int first_id, int count)
{
    sqlite3_stmt *st = NULL;
    tu_exec(db, "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "data BLOB); CREATE INDEX IF NOT EXISTS t_name ON t(name)");
    if (sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?,?,?)", -1, &st, NULL) != SQLITE_OK) {
        return;
    }
    for (int id = first_id; id < first_id + count; id++) {
        char name[128];
        uint8_t *data;
        size_t len;
        tu_row(id, name, sizeof name, &data, &len);
        sqlite3_bind_int(st, 1, id);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        if (data != NULL) {
            sqlite3_bind_blob(st, 3, data, (int)len, SQLITE_TRANSIENT);
        } else {
            sqlite3_bind_null(st, 3);
        }
        if (sqlite3_step(st) != SQLITE_DONE) {
            fprintf(stderr, "  insert %d: %s\n", id, sqlite3_errmsg(db));
        }
        sqlite3_reset(st);
        free(data);
    }
    sqlite3_finalize(st);
}

/* Appends one canonical line "id|name|HEX\n" to a growing buffer. */
static void tu_append_line(char **buf,
                           size_t *len,
                           size_t *cap,
                           long long id,
                           const char *name,
                           const uint8_t *data,
                           size_t n)
{
    size_t need = *len + 64 + strlen(name) + 2 * n;
    if (need > *cap) {
        *cap = need * 2;
        *buf = realloc(*buf, *cap);
    }
    *len += (size_t)snprintf(*buf + *len, *cap - *len, "%lld|%s|", id, name);
    for (size_t i = 0; i < n; i++) {
        snprintf(*buf + *len, 3, "%02X", data[i]);
        *len += 2;
    }
    (*buf)[(*len)++] = '\n';
}

int tu_table_digest(sqlite3 *db, char out[65], long long *rows)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT id, name, data FROM t ORDER BY id", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        return rc;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    *rows = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        const uint8_t *data = sqlite3_column_blob(st, 2);
        size_t n = (size_t)sqlite3_column_bytes(st, 2);
        tu_append_line(&buf, &len, &cap, sqlite3_column_int64(st, 0), name ? name : "", data, n);
        (*rows)++;
    }
    sqlite3_finalize(st);
    tu_sha256_hex(buf != NULL ? buf : "", len, out);
    free(buf);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

void tu_expected_digest(int count, char out[65])
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (int id = 1; id <= count; id++) {
        char name[128];
        uint8_t *data;
        size_t n;
        tu_row(id, name, sizeof name, &data, &n);
        tu_append_line(&buf, &len, &cap, id, name, data, n);
        free(data);
    }
    tu_sha256_hex(buf != NULL ? buf : "", len, out);
    free(buf);
}

int tu_contains(const uint8_t *hay, size_t hay_len, const void *needle, size_t needle_len)
{
    return needle_len <= hay_len && memmem(hay, hay_len, needle, needle_len) != NULL;
}

int tu_store_create(const char *name, const char *password, int64_t cache_kib, mv_store **s)
{
    char address[128], err[512] = "";
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    o.cache_size_kib = cache_kib;
    snprintf(address, sizeof address, "%s@example.org", name);
    *s = NULL;
    int rc = mv_store_init(address, password, strlen(password), &o, err, sizeof err);
    if (rc == MV_OK) {
        rc = mv_store_open(address, password, strlen(password), &o, s, err, sizeof err);
    }
    if (rc != MV_OK) {
        fprintf(stderr, "  open %s: %s\n", address, err);
    }
    return rc;
}

int tu_store_open(const char *name, const char *password, mv_store **s)
{
    char address[128], err[512] = "";
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    snprintf(address, sizeof address, "%s@example.org", name);
    *s = NULL;
    int rc = mv_store_open(address, password, strlen(password), &o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open %s: %s\n", address, err);
    }
    return rc;
}

int tu_store_file_create(const char *name, const char *password, mv_cipher cipher)
{
    char dir[1024], db_path[1200];
    snprintf(dir, sizeof dir, "%s/example.org", tu_path("root"));
    mkdir(tu_path("root"), 0700);
    mkdir(dir, 0700);
    snprintf(db_path, sizeof db_path, "%s/%s.db", dir, name);
    struct mv_db_options dbo = MV_DB_OPTIONS_INIT;
    dbo.cipher = cipher;
    dbo.page_size = 4096;
    dbo.auto_vacuum = 1;
    dbo.flags = MV_DB_CREATE;
    sqlite3 *db = NULL;
    char *err = NULL;
    int rc = mv_db_open(db_path, password, strlen(password), &dbo, &db, &err);
    if (rc != MV_OK) {
        fprintf(stderr, "  mv_db_open(%s): %s\n", db_path, err != NULL ? err : mv_strerror(rc));
    }
    sqlite3_free(err);
    sqlite3_close(db);
    return rc;
}

int tu_message_key(mv_store *s, const char *mailbox, uint32_t uid, struct mv_message_key *key)
{
    struct mv_mailbox_info info;
    mv_message_iter *it = NULL;
    struct mv_message_entry e;
    memset(key, 0, sizeof *key);
    if (uid == 0 || mv_mailbox_status(s, mailbox, &info) != MV_OK ||
        mv_message_list_begin(s, mailbox, uid - 1, 0, &it) != MV_OK) {
        return -1;
    }
    int rc = mv_message_list_next(it, &e);
    mv_message_list_end(&it);
    if (rc != 1 || e.uid != uid || e.body_key == 0) {
        return -1;
    }
    *key = (struct mv_message_key){.body_key = e.body_key,
                                   .size = e.size,
                                   .modseq = info.highestmodseq,
                                   .uidvalidity = info.uidvalidity};
    return 0;
}

int tu_search_count(mv_store *s, const struct mv_search_query *q)
{
    mv_search *it = NULL;
    if (mv_search_begin(s, q, &it) != MV_OK) {
        fprintf(stderr, "  search: %s\n", mv_store_errmsg(s));
        return -1;
    }
    struct mv_message_info info;
    int n = 0, rc;
    while ((rc = mv_search_next(it, &info)) == 1) {
        n++;
    }
    mv_search_end(&it);
    return rc == 0 ? n : -1;
}

int tu_check_clean(mv_store *s)
{
    struct mv_check_report r;
    memset(&r, 0, sizeof r);
    int rc = mv_store_check(s, NULL, NULL, &r);
    if (rc != MV_OK || r.problems != 0) {
        fprintf(stderr, "  check: %s, %u problems\n", mv_strerror(rc), r.problems);
    }
    return rc == MV_OK && r.problems == 0;
}

long long tu_fts_backlog(mv_store *s)
{
    return tu_int(mv_store_db(s), "SELECT count(*) FROM meta WHERE key > 'fts_backlog:' AND "
                                  "key < 'fts_backlog;'");
}
