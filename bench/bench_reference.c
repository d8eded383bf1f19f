/*
 * bench_reference.c -- the reference system's benchmark workload, reproduced in C on the
 * public API, with its flaws fixed. One invocation runs ONE configuration x cipher (x phase
 * set) and prints ONE JSON line; bench/suite/run.sh runs it next to the reference
 * implementation (bench/reference_runner.js, the same workload in better-sqlite3-multiple-
 * ciphers) and aggregates.
 *
 * USAGE
 *   build/rel/bench/bench_reference --config NAME --cipher NAME [--impl mailvault|sqlite]
 *       [--scale K] [--round R] [--dir DIR] [--phases LIST] [--no-warmup]
 *       [--perf-ctl FIFO --perf-phase PHASE]
 *   build/rel/bench/bench_reference --describe     the workload as JSON (the runner reads it)
 *   build/rel/bench/bench_reference --list         configuration and cipher names
 *
 *   --config     production, wal_autocheckpoint_1000, cache_64mb, temp_store_memory,
 *                sync_off, sync_extra, mmap, no_auto_vacuum, incremental_vacuum
 *   --cipher     chacha20, aes256cbc, sqlcipher (mv_db_open(), passphrase, default KDF) or
 *                none (no encryption)
 *   --impl       mailvault (default): the "mailvault" VFS; with --cipher none a plaintext
 *                file through the shim. sqlite: SQLite's own default VFS, no mailvault at
 *                all (the ceiling; only with --cipher none)
 *   --scale K    multiplies every phase's count (default 1: the reference's own sizes)
 *   --round R    copied into the output (the suite's round number)
 *   --phases     comma list among insert,select,update,delete (default all; setup always)
 *   --no-warmup  skip the discarded warm-up run
 *   --perf-ctl   a perf --control FIFO: "enable" is written to it before PHASE, "disable"
 *                after, so `perf record -D -1 --control fifo:FIFO` sees that phase only
 *
 * WORKLOAD (per scale unit; K times each count)
 *   setup   open (key derivation included), profile, schema, then 1000 rows of 3500 bytes
 *           (raw = a phrase repeated) in one transaction; timed from open to COMMIT
 *   insert  100 rows of 1100 bytes, each its own transaction
 *   select  1000 x SELECT id, subject, from_addr, date FROM messages WHERE mailbox_id=? AND
 *           date>? ORDER BY date DESC LIMIT 50, every row stepped and read
 *   update  100 x UPDATE messages SET flags=? WHERE id=?, each its own transaction
 *   delete  one DELETE of every 10th row (id % 10 = 0), one transaction; the count deleted
 *           is reported (the reference's DELETE deleted nothing)
 *   Parameters come from fixed formulas (stride 7919), not a random generator, so the
 *   JavaScript runner reproduces them exactly. Size is measured before close: the main file
 *   PLUS the WAL (the reference counted the main file only).
 *
 * PROFILE (both sides, this order): auto_vacuum (before page 1 exists: mv_db_open() writes
 *   page 1 with it; the reference set it after journal_mode=WAL, where it is ignored),
 *   journal_mode=WAL, secure_delete=ON, busy_timeout=30000, synchronous=NORMAL,
 *   foreign_keys=ON, encoding='UTF-8', optimize=0x10002, temp_store=1, then the
 *   configuration's own PRAGMAs. Every setting is read back and recorded; a wrong
 *   auto_vacuum, journal_mode, synchronous or temp_store is a fatal error.
 *
 * IMPLEMENTATION NOTES
 *   Warm-up: unless --no-warmup, the whole workload runs once at scale 1 on another file in
 *   the same process and is discarded (code, allocator and CPU caches warm, as in the
 *   runner). Output: see bench/results/SCHEMA.md. Exit 0 on success, 1 on any failure
 *   (message on stderr), 2 on bad usage.
 *
 * LIMITATIONS
 *   mmap_size is recorded as SQLite reports it back: 0 on the mailvault VFS (no xFetch:
 *   SQLite never maps ciphertext), so the "mmap" configuration is the production profile
 *   there. temp_store_directory is not set (compiled out of the reference's build; our VFS
 *   encrypts temp files wherever they go).
 */
#include "mailvault.h"
#include "scratch.h"
#include "util.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define BENCH_SCHEMA_ID        "mailvault-bench-reference/1"
#define BENCH_SCALE_MAX        1000L
#define BENCH_ROUND_MAX        100000L
#define BENCH_SEED_ROWS        1000L
#define BENCH_INSERT_ROWS      100L
#define BENCH_SELECT_QUERIES   1000L
#define BENCH_UPDATE_ROWS      100L
#define BENCH_SELECT_LIMIT     50
#define BENCH_MAILBOXES        5
#define BENCH_SEED_RAW_BYTES   3500
#define BENCH_INSERT_RAW_BYTES 1100
#define BENCH_DELETE_MODULUS   10
#define BENCH_DATE_BASE        1700000000L
#define BENCH_DATE_STEP_S      60L
#define BENCH_STRIDE           7919L
#define BENCH_PATH_BYTES_MAX   4096
#define BENCH_EXTRA_SQL_MAX    2

int main(int argc, char **argv);

static const char bench_phrase[] = "The quick brown fox jumps over the lazy dog. ";
static const char bench_password[] = "bench password";

enum bench_phase {
    BENCH_SETUP,
    BENCH_INSERT,
    BENCH_SELECT,
    BENCH_UPDATE,
    BENCH_DELETE,
    BENCH_PHASE_COUNT
};
static const char *const bench_phase_names[BENCH_PHASE_COUNT] = {"setup", "insert", "select",
                                                                 "update", "delete"};

struct bench_config {
    const char *name;
    const char *label; /* the reference's table row */
    int auto_vacuum;   /* 0 NONE, 1 FULL, 2 INCREMENTAL: fixed before page 1 */
    int synchronous;   /* expected read-back: 0 OFF, 1 NORMAL, 3 EXTRA */
    int temp_store;    /* expected read-back: 1 FILE, 2 MEMORY */
    const char *extra_sql[BENCH_EXTRA_SQL_MAX]; /* after the production profile; NULL ends */
};

static const struct bench_config bench_configs[] = {
    {"production", "Production profile", 1, 1, 1, {NULL, NULL}},
    {"wal_autocheckpoint_1000",
     "WAL autocheckpoint 1000",
     1,
     1,
     1,
     {"PRAGMA wal_autocheckpoint=1000", NULL}},
    {"cache_64mb", "Cache 64 MB", 1, 1, 1, {"PRAGMA cache_size=-64000", NULL}},
    {"temp_store_memory", "Memory temp store", 1, 1, 2, {"PRAGMA temp_store=2", NULL}},
    {"sync_off", "Synchronous OFF", 1, 0, 1, {"PRAGMA synchronous=OFF", NULL}},
    {"sync_extra", "Synchronous EXTRA", 1, 3, 1, {"PRAGMA synchronous=EXTRA", NULL}},
    {"mmap", "mmap 256 MB", 1, 1, 1, {"PRAGMA mmap_size=268435456", NULL}},
    {"no_auto_vacuum", "No auto-vacuum", 0, 1, 1, {NULL, NULL}},
    {"incremental_vacuum", "Incremental vacuum", 2, 1, 1, {NULL, NULL}},
};
#define BENCH_CONFIG_COUNT (sizeof bench_configs / sizeof bench_configs[0])

static const char *const bench_profile_sql[] = {
    "PRAGMA journal_mode=WAL",   "PRAGMA secure_delete=ON", "PRAGMA busy_timeout=30000",
    "PRAGMA synchronous=NORMAL", "PRAGMA foreign_keys=ON",  "PRAGMA encoding='UTF-8'",
    "PRAGMA optimize=0x10002",   "PRAGMA temp_store=1",
};

static const char *const bench_schema_sql[] = {
    "CREATE TABLE mailboxes(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    "INSERT INTO mailboxes(id, name) VALUES (1, 'INBOX'), (2, 'Sent'), (3, 'Drafts'),"
    " (4, 'Trash'), (5, 'Archive')",
    "CREATE TABLE messages(id INTEGER PRIMARY KEY, mailbox_id INTEGER NOT NULL REFERENCES"
    " mailboxes(id), uid INTEGER NOT NULL, date INTEGER NOT NULL, flags TEXT, subject TEXT,"
    " from_addr TEXT, to_addr TEXT, message_id TEXT, raw BLOB)",
    "CREATE INDEX idx_messages_mailbox_date ON messages(mailbox_id, date DESC)",
    "CREATE INDEX idx_messages_uid ON messages(mailbox_id, uid)",
    "CREATE INDEX idx_messages_flags ON messages(mailbox_id, flags) WHERE flags IS NOT NULL",
};

static const char bench_insert_sql[] =
    "INSERT INTO messages(id, mailbox_id, uid, date, flags, subject, from_addr, to_addr,"
    " message_id, raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
static const char bench_select_sql[] = "SELECT id, subject, from_addr, date FROM messages WHERE"
                                       " mailbox_id=? AND date>? ORDER BY date DESC LIMIT 50";
static const char bench_update_sql[] = "UPDATE messages SET flags=? WHERE id=?";
static const char bench_delete_sql[] = "DELETE FROM messages WHERE id % 10 = 0";
static const char *const bench_update_flags[] = {"\\Seen", "\\Seen \\Flagged", "\\Answered \\Seen",
                                                 "\\Seen $Junk"};

struct bench_opts {
    const struct bench_config *config;
    const char *cipher_name;
    mv_cipher cipher;
    int plain_sqlite; /* --impl sqlite */
    long scale;
    long round;
    const char *parent_dir;
    int phases[BENCH_PHASE_COUNT];
    int warmup;
    const char *perf_ctl;
    int perf_phase; /* -1: none */
};

struct bench_settings {
    long long auto_vacuum, synchronous, temp_store, cache_size, mmap_size, secure_delete,
        foreign_keys, wal_autocheckpoint, page_size, busy_timeout;
    char journal_mode[16];
};

struct bench_result {
    long count[BENCH_PHASE_COUNT];
    double seconds[BENCH_PHASE_COUNT];
    double cpu_seconds[BENCH_PHASE_COUNT]; /* the process's user + system CPU time */
    long long select_rows;
    struct bench_settings settings;
    long long db_bytes, wal_bytes, page_count, freelist_count, rows_after;
    long kdf_iter, reserve_bytes;
};

static char bench_dir[BENCH_PATH_BYTES_MAX]; /* scratch directory; "" until made */
static uint8_t bench_seed_raw[BENCH_SEED_RAW_BYTES];
static uint8_t bench_insert_raw[BENCH_INSERT_RAW_BYTES];
static int bench_perf_fd = -1;

static sqlite3_stmt *bench_prepare(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK) {
        bench_fail(sql, db);
    }
    return stmt;
}

/* The first column of the first row of sql: as an integer, and as text into text_out. */
static long long bench_query(sqlite3 *db, const char *sql, char *text_out, size_t text_size)
{
    sqlite3_stmt *stmt = bench_prepare(db, sql);
    if (sqlite3_step(stmt) != SQLITE_ROW) {
        bench_fail(sql, db);
    }
    long long value = sqlite3_column_int64(stmt, 0);
    if (text_out != NULL) {
        const unsigned char *text = sqlite3_column_text(stmt, 0);
        snprintf(text_out, text_size, "%s", text != NULL ? (const char *)text : "");
    }
    sqlite3_finalize(stmt);
    return value;
}

static long long bench_file_bytes(const char *path, const char *suffix)
{
    char full[BENCH_PATH_BYTES_MAX + 16];
    struct stat st;
    snprintf(full, sizeof full, "%s%s", path, suffix);
    return stat(full, &st) == 0 ? (long long)st.st_size : 0;
}

static void bench_db_path(const char *name, char *out, size_t out_size)
{
    int len = snprintf(out, out_size, "%s/%s.db", bench_dir, name);
    if (len < 0 || (size_t)len >= out_size) {
        fprintf(stderr, "bench_reference: scratch path too long\n");
        exit(1);
    }
}

/* Writes "enable" / "disable" to perf's control FIFO around the profiled phase. */
static void bench_perf_mark(const struct bench_opts *opts, int phase, int enable)
{
    if (bench_perf_fd < 0 || phase != opts->perf_phase) {
        return;
    }
    const char *cmd = enable ? "enable\n" : "disable\n";
    if (write(bench_perf_fd, cmd, strlen(cmd)) != (ssize_t)strlen(cmd)) {
        bench_fail("writing to the perf control FIFO", NULL);
    }
}

/* Opens path: mv_db_open() for a cipher (page 1 written with auto_vacuum), else
 * sqlite3_open_v2() on the mailvault VFS or SQLite's default, then auto_vacuum before any
 * write. Records the KDF iterations and reserve bytes. */
static sqlite3 *bench_open(const struct bench_opts *opts, const char *path, struct bench_result *r)
{
    sqlite3 *db = NULL;
    if (opts->cipher != MV_CIPHER_NONE) {
        struct mv_db_options db_opts = MV_DB_OPTIONS_INIT;
        db_opts.cipher = opts->cipher;
        db_opts.flags = MV_DB_CREATE;
        db_opts.auto_vacuum = opts->config->auto_vacuum;
        char *errmsg = NULL;
        int rc = mv_db_open(path, bench_password, strlen(bench_password), &db_opts, &db, &errmsg);
        if (rc != MV_OK) {
            fprintf(stderr, "bench_reference: mv_db_open(%s): %s: %s\n", opts->cipher_name,
                    mv_strerror(rc), errmsg != NULL ? errmsg : "");
            sqlite3_free(errmsg);
            exit(1);
        }
        struct mv_db_info info;
        if (mv_db_info(db, &info) != MV_OK || info.cipher != opts->cipher) {
            bench_fail("mv_db_info (cipher check)", db);
        }
        r->kdf_iter = (long)info.kdf_iter;
        r->reserve_bytes = info.reserve_bytes;
        return db;
    }
    const char *vfs = opts->plain_sqlite ? NULL : MV_VFS_NAME;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs) != SQLITE_OK) {
        bench_fail("sqlite3_open_v2", db);
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA auto_vacuum=%d", opts->config->auto_vacuum);
    bench_exec(db, sql);
    r->kdf_iter = 0;
    r->reserve_bytes = 0;
    return db;
}

static void bench_read_settings(sqlite3 *db, struct bench_settings *s)
{
    s->auto_vacuum = bench_query(db, "PRAGMA auto_vacuum", NULL, 0);
    s->synchronous = bench_query(db, "PRAGMA synchronous", NULL, 0);
    s->temp_store = bench_query(db, "PRAGMA temp_store", NULL, 0);
    s->cache_size = bench_query(db, "PRAGMA cache_size", NULL, 0);
    s->mmap_size = bench_query(db, "PRAGMA mmap_size", NULL, 0);
    s->secure_delete = bench_query(db, "PRAGMA secure_delete", NULL, 0);
    s->foreign_keys = bench_query(db, "PRAGMA foreign_keys", NULL, 0);
    s->wal_autocheckpoint = bench_query(db, "PRAGMA wal_autocheckpoint", NULL, 0);
    s->page_size = bench_query(db, "PRAGMA page_size", NULL, 0);
    s->busy_timeout = bench_query(db, "PRAGMA busy_timeout", NULL, 0);
    (void)bench_query(db, "PRAGMA journal_mode", s->journal_mode, sizeof s->journal_mode);
}

/* The production profile, the configuration's PRAGMAs, a read-back check, the schema. */
static void bench_prepare_db(const struct bench_opts *opts, sqlite3 *db, struct bench_result *r)
{
    const struct bench_config *c = opts->config;
    for (size_t i = 0; i < sizeof bench_profile_sql / sizeof bench_profile_sql[0]; i++) {
        bench_exec(db, bench_profile_sql[i]);
    }
    for (size_t i = 0; i < BENCH_EXTRA_SQL_MAX && c->extra_sql[i] != NULL; i++) {
        bench_exec(db, c->extra_sql[i]);
    }
    for (size_t i = 0; i < sizeof bench_schema_sql / sizeof bench_schema_sql[0]; i++) {
        bench_exec(db, bench_schema_sql[i]);
    }
    struct bench_settings *s = &r->settings;
    bench_read_settings(db, s);
    /* (1) auto_vacuum took (it is fixed at page 1), (2) WAL, (3) synchronous and
     * (4) temp_store as the configuration says. */
    if (s->auto_vacuum != c->auto_vacuum || strcmp(s->journal_mode, "wal") != 0 ||
        s->synchronous != c->synchronous || s->temp_store != c->temp_store) {
        fprintf(stderr,
                "bench_reference: %s: profile did not take: auto_vacuum=%lld (want %d)"
                " journal_mode=%s synchronous=%lld (want %d) temp_store=%lld (want %d)\n",
                c->name, s->auto_vacuum, c->auto_vacuum, s->journal_mode, s->synchronous,
                c->synchronous, s->temp_store, c->temp_store);
        exit(1);
    }
}

/* Binds message row i (id i + 1); raw stays valid for the statement's lifetime. */
static void bench_bind_row(sqlite3_stmt *stmt, long i, const uint8_t *raw, int raw_size)
{
    char subject[64], from[64], message_id[64];
    snprintf(subject, sizeof subject, "Message %ld", i);
    snprintf(from, sizeof from, "sender%ld@example.com", i % 100);
    snprintf(message_id, sizeof message_id, "<%ld@bench.example>", i);
    int rc = sqlite3_bind_int64(stmt, 1, i + 1);
    rc |= sqlite3_bind_int64(stmt, 2, 1 + i % BENCH_MAILBOXES);
    rc |= sqlite3_bind_int64(stmt, 3, i + 1);
    rc |= sqlite3_bind_int64(stmt, 4, BENCH_DATE_BASE + i * BENCH_DATE_STEP_S);
    rc |= sqlite3_bind_text(stmt, 5, i % 3 == 0 ? "\\Seen" : NULL, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(stmt, 6, subject, -1, SQLITE_TRANSIENT);
    rc |= sqlite3_bind_text(stmt, 7, from, -1, SQLITE_TRANSIENT);
    rc |= sqlite3_bind_text(stmt, 8, "user@example.com", -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(stmt, 9, message_id, -1, SQLITE_TRANSIENT);
    rc |= sqlite3_bind_blob(stmt, 10, raw, raw_size, SQLITE_STATIC);
    if (rc != SQLITE_OK) {
        bench_fail("bind", NULL);
    }
}

/* Inserts rows first .. first + count - 1, one statement each (autocommit unless the caller
 * holds a transaction). */
static void bench_insert_rows(sqlite3 *db, long first, long count, const uint8_t *raw, int size)
{
    sqlite3_stmt *stmt = bench_prepare(db, bench_insert_sql);
    for (long i = first; i < first + count; i++) {
        bench_bind_row(stmt, i, raw, size);
        if (sqlite3_step(stmt) != SQLITE_DONE || sqlite3_reset(stmt) != SQLITE_OK) {
            bench_fail("INSERT", db);
        }
    }
    sqlite3_finalize(stmt);
}

/* count queries; returns the number of rows read (every column of every row). */
static long long bench_select(sqlite3 *db, long count, long seed_rows)
{
    sqlite3_stmt *stmt = bench_prepare(db, bench_select_sql);
    long long rows = 0;
    for (long q = 0; q < count; q++) {
        long threshold = (q * BENCH_STRIDE) % (seed_rows / 2);
        int rc = sqlite3_bind_int64(stmt, 1, 1 + q % BENCH_MAILBOXES);
        rc |= sqlite3_bind_int64(stmt, 2, BENCH_DATE_BASE + threshold * BENCH_DATE_STEP_S);
        if (rc != SQLITE_OK) {
            bench_fail("bind SELECT", db);
        }
        while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
            volatile long long sink = sqlite3_column_int64(stmt, 0);
            sink += sqlite3_column_bytes(stmt, 1);
            sink += sqlite3_column_bytes(stmt, 2);
            sink += sqlite3_column_int64(stmt, 3);
            (void)sink;
            rows++;
        }
        if (rc != SQLITE_DONE || sqlite3_reset(stmt) != SQLITE_OK) {
            bench_fail("SELECT", db);
        }
    }
    sqlite3_finalize(stmt);
    return rows;
}

/* count autocommit flag updates of seeded rows. */
static void bench_update(sqlite3 *db, long count, long seed_rows)
{
    sqlite3_stmt *stmt = bench_prepare(db, bench_update_sql);
    for (long i = 0; i < count; i++) {
        int rc = sqlite3_bind_text(stmt, 1, bench_update_flags[i % 4], -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(stmt, 2, 1 + (i * BENCH_STRIDE) % seed_rows);
        if (rc != SQLITE_OK || sqlite3_step(stmt) != SQLITE_DONE || sqlite3_changes(db) != 1 ||
            sqlite3_reset(stmt) != SQLITE_OK) {
            bench_fail("UPDATE", db);
        }
    }
    sqlite3_finalize(stmt);
}

/* The process's user + system CPU time in seconds: a phase's cost that other work on a
 * shared machine does not inflate (the workload is one thread). */
static double bench_cpu_now_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) {
        return 0;
    }
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Setup: open through seeding, timed as one phase. */
static sqlite3 *
bench_setup(const struct bench_opts *opts, const char *path, long scale, struct bench_result *r)
{
    long seed_rows = BENCH_SEED_ROWS * scale;
    bench_perf_mark(opts, BENCH_SETUP, 1);
    double start = bench_now_s(), cpu_start = bench_cpu_now_s();
    sqlite3 *db = bench_open(opts, path, r);
    bench_prepare_db(opts, db, r);
    bench_exec(db, "BEGIN");
    bench_insert_rows(db, 0, seed_rows, bench_seed_raw, BENCH_SEED_RAW_BYTES);
    bench_exec(db, "COMMIT");
    r->seconds[BENCH_SETUP] = bench_now_s() - start;
    r->cpu_seconds[BENCH_SETUP] = bench_cpu_now_s() - cpu_start;
    bench_perf_mark(opts, BENCH_SETUP, 0);
    r->count[BENCH_SETUP] = seed_rows;
    return db;
}

/* One timed phase (not setup) of the workload; sets count and seconds. */
static void bench_phase(
    const struct bench_opts *opts, sqlite3 *db, int phase, long scale, struct bench_result *r)
{
    long seed_rows = BENCH_SEED_ROWS * scale;
    long count = 0;
    bench_perf_mark(opts, phase, 1);
    double start = bench_now_s(), cpu_start = bench_cpu_now_s();
    switch (phase) {
    case BENCH_INSERT:
        count = BENCH_INSERT_ROWS * scale;
        bench_insert_rows(db, seed_rows, count, bench_insert_raw, BENCH_INSERT_RAW_BYTES);
        break;
    case BENCH_SELECT:
        count = BENCH_SELECT_QUERIES * scale;
        r->select_rows = bench_select(db, count, seed_rows);
        break;
    case BENCH_UPDATE:
        count = BENCH_UPDATE_ROWS * scale;
        bench_update(db, count, seed_rows);
        break;
    default:
        bench_exec(db, bench_delete_sql);
        count = (long)sqlite3_changes(db);
        break;
    }
    r->seconds[phase] = bench_now_s() - start;
    r->cpu_seconds[phase] = bench_cpu_now_s() - cpu_start;
    bench_perf_mark(opts, phase, 0);
    r->count[phase] = count;
}

/* The whole workload on a new file at path; the file is removed afterwards. */
static void
bench_workload(const struct bench_opts *opts, const char *path, long scale, struct bench_result *r)
{
    memset(r, 0, sizeof *r);
    for (int p = 0; p < BENCH_PHASE_COUNT; p++) {
        r->count[p] = -1;
    }
    bench_remove_files(path);
    sqlite3 *db = bench_setup(opts, path, scale, r);
    for (int phase = BENCH_INSERT; phase < BENCH_PHASE_COUNT; phase++) {
        if (opts->phases[phase]) {
            bench_phase(opts, db, phase, scale, r);
        }
    }
    r->page_count = bench_query(db, "PRAGMA page_count", NULL, 0);
    r->freelist_count = bench_query(db, "PRAGMA freelist_count", NULL, 0);
    r->rows_after = bench_query(db, "SELECT count(*) FROM messages", NULL, 0);
    r->db_bytes = bench_file_bytes(path, "");
    r->wal_bytes = bench_file_bytes(path, "-wal");
    if (sqlite3_close(db) != SQLITE_OK) {
        bench_fail("sqlite3_close", db);
    }
    bench_remove_files(path);
}

/* One "name":{count, seconds, rate_per_s} member per phase that ran. */
static void bench_print_phases(const struct bench_result *r)
{
    printf("\"phases\":{");
    const char *sep = "";
    for (int p = 0; p < BENCH_PHASE_COUNT; p++) {
        if (r->count[p] < 0) {
            continue;
        }
        double rate = r->seconds[p] > 0 ? (double)r->count[p] / r->seconds[p] : 0;
        printf("%s\"%s\":{\"count\":%ld,\"seconds\":%.6f,\"rate_per_s\":%.1f,"
               "\"cpu_seconds\":%.6f",
               sep, bench_phase_names[p], r->count[p], r->seconds[p], rate, r->cpu_seconds[p]);
        if (p == BENCH_SELECT) {
            printf(",\"rows\":%lld", r->select_rows);
        }
        printf("}");
        sep = ",";
    }
    printf("}");
}

/* The run's one JSON line (schema: bench/results/SCHEMA.md). */
static void bench_print_record(const struct bench_opts *opts, const struct bench_result *r)
{
    const struct bench_settings *s = &r->settings;
    printf("{\"schema\":\"%s\",\"impl\":\"%s\",\"impl_version\":\"%s\","
           "\"sqlite_version\":\"%s\",\"config\":\"%s\",\"cipher\":\"%s\",\"scale\":%ld,"
           "\"round\":%ld,\"warmup\":%s,",
           BENCH_SCHEMA_ID, opts->plain_sqlite ? "sqlite" : "mailvault",
           opts->plain_sqlite ? sqlite3_libversion() : mv_version(), sqlite3_libversion(),
           opts->config->name, opts->cipher_name, opts->scale, opts->round,
           opts->warmup ? "true" : "false");
    bench_print_phases(r);
    printf(",\"settings\":{\"auto_vacuum\":%lld,\"journal_mode\":\"%s\",\"synchronous\":%lld,"
           "\"temp_store\":%lld,\"cache_size\":%lld,\"mmap_size\":%lld,\"secure_delete\":%lld,"
           "\"foreign_keys\":%lld,\"wal_autocheckpoint\":%lld,\"page_size\":%lld,"
           "\"busy_timeout\":%lld,\"kdf_iter\":%ld,\"reserve_bytes\":%ld}",
           s->auto_vacuum, s->journal_mode, s->synchronous, s->temp_store, s->cache_size,
           s->mmap_size, s->secure_delete, s->foreign_keys, s->wal_autocheckpoint, s->page_size,
           s->busy_timeout, r->kdf_iter, r->reserve_bytes);
    printf(",\"size\":{\"db_bytes\":%lld,\"wal_bytes\":%lld,\"total_bytes\":%lld,"
           "\"page_count\":%lld,\"freelist_count\":%lld},\"rows_after\":%lld}\n",
           r->db_bytes, r->wal_bytes, r->db_bytes + r->wal_bytes, r->page_count, r->freelist_count,
           r->rows_after);
    fflush(stdout);
}

static void bench_print_json_array(const char *const *items, size_t count)
{
    putchar('[');
    for (size_t i = 0; i < count && items[i] != NULL; i++) {
        if (i > 0) {
            putchar(',');
        }
        bench_json_string(stdout, items[i]);
    }
    putchar(']');
}

/* --describe: the workload as one JSON object, so the JavaScript runner uses the same SQL,
 * counts and configurations as this program. */
static void bench_describe(void)
{
    printf("{\"schema\":\"%s\",\"counts_per_scale\":{\"seed\":%ld,\"insert\":%ld,"
           "\"select\":%ld,\"update\":%ld},\"seed_raw_bytes\":%d,\"insert_raw_bytes\":%d,"
           "\"mailboxes\":%d,\"select_limit\":%d,\"delete_modulus\":%d,\"date_base\":%ld,"
           "\"date_step_s\":%ld,\"stride\":%ld,\"phrase\":",
           BENCH_SCHEMA_ID, BENCH_SEED_ROWS, BENCH_INSERT_ROWS, BENCH_SELECT_QUERIES,
           BENCH_UPDATE_ROWS, BENCH_SEED_RAW_BYTES, BENCH_INSERT_RAW_BYTES, BENCH_MAILBOXES,
           BENCH_SELECT_LIMIT, BENCH_DELETE_MODULUS, BENCH_DATE_BASE, BENCH_DATE_STEP_S,
           BENCH_STRIDE);
    bench_json_string(stdout, bench_phrase);
    printf(",\"password\":");
    bench_json_string(stdout, bench_password);
    printf(",\"profile_sql\":");
    bench_print_json_array(bench_profile_sql, sizeof bench_profile_sql / sizeof(char *));
    printf(",\"schema_sql\":");
    bench_print_json_array(bench_schema_sql, sizeof bench_schema_sql / sizeof(char *));
    const char *const sql[] = {bench_insert_sql, bench_select_sql, bench_update_sql,
                               bench_delete_sql};
    printf(",\"sql\":{\"insert\":");
    for (size_t i = 0; i < 4; i++) {
        static const char *const keys[] = {"", ",\"select\":", ",\"update\":", ",\"delete\":"};
        printf("%s", keys[i]);
        bench_json_string(stdout, sql[i]);
    }
    printf("},\"update_flags\":");
    bench_print_json_array(bench_update_flags, 4);
    printf(",\"configs\":[");
    for (size_t i = 0; i < BENCH_CONFIG_COUNT; i++) {
        const struct bench_config *c = &bench_configs[i];
        printf("%s{\"name\":\"%s\",\"label\":\"%s\",\"auto_vacuum\":%d,\"synchronous\":%d,"
               "\"temp_store\":%d,\"extra_sql\":",
               i > 0 ? "," : "", c->name, c->label, c->auto_vacuum, c->synchronous, c->temp_store);
        bench_print_json_array(c->extra_sql, BENCH_EXTRA_SQL_MAX);
        printf("}");
    }
    printf("],\"ciphers\":[\"chacha20\",\"aes256cbc\",\"sqlcipher\",\"none\"]}\n");
}

static void bench_usage(void)
{
    fprintf(stderr,
            "usage: bench_reference --config NAME --cipher NAME [--impl mailvault|sqlite]\n"
            "         [--scale K (1..%ld)] [--round R] [--dir DIR] [--phases LIST]\n"
            "         [--no-warmup] [--perf-ctl FIFO --perf-phase PHASE]\n"
            "       bench_reference --describe | --list\n",
            BENCH_SCALE_MAX);
    exit(2);
}

/* A number in [min, max], or the usage message. */
static long bench_number(const char *text, long min, long max)
{
    long value = 0;
    if (bench_parse_long(text, min, max, &value) != 0) {
        bench_usage();
    }
    return value;
}

static int bench_phase_index(const char *name, size_t len)
{
    for (int p = 0; p < BENCH_PHASE_COUNT; p++) {
        if (strlen(bench_phase_names[p]) == len && strncmp(name, bench_phase_names[p], len) == 0) {
            return p;
        }
    }
    fprintf(stderr, "bench_reference: unknown phase %.*s\n", (int)len, name);
    bench_usage();
    return -1;
}

/* --phases a,b,c: setup always runs. */
static void bench_parse_phases(const char *list, struct bench_opts *opts)
{
    memset(opts->phases, 0, sizeof opts->phases);
    opts->phases[BENCH_SETUP] = 1;
    while (*list != '\0') {
        size_t len = strcspn(list, ",");
        opts->phases[bench_phase_index(list, len)] = 1;
        list += len + (list[len] == ',');
    }
}

static const struct bench_config *bench_config_find(const char *name)
{
    for (size_t i = 0; i < BENCH_CONFIG_COUNT; i++) {
        if (strcmp(bench_configs[i].name, name) == 0) {
            return &bench_configs[i];
        }
    }
    fprintf(stderr, "bench_reference: unknown configuration %s\n", name);
    bench_usage();
    return NULL;
}

static void bench_list(void)
{
    printf("configs:");
    for (size_t i = 0; i < BENCH_CONFIG_COUNT; i++) {
        printf(" %s", bench_configs[i].name);
    }
    printf("\nciphers: chacha20 aes256cbc sqlcipher none\nphases:");
    for (int p = 0; p < BENCH_PHASE_COUNT; p++) {
        printf(" %s", bench_phase_names[p]);
    }
    printf("\n");
}

/* One option at argv[i] (value, if any, at argv[i + 1]); returns the index of the last
 * argument it used. --describe and --list print and exit. */
static int bench_parse_one(int argc, char **argv, int i, struct bench_opts *opts)
{
    const char *arg = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(arg, "--describe") == 0 || strcmp(arg, "--list") == 0) {
        if (arg[2] == 'd') {
            bench_describe();
        } else {
            bench_list();
        }
        exit(0);
    }
    if (strcmp(arg, "--no-warmup") == 0) {
        opts->warmup = 0;
        return i;
    }
    if (value == NULL) {
        bench_usage();
    }
    if (strcmp(arg, "--config") == 0) {
        opts->config = bench_config_find(value);
    } else if (strcmp(arg, "--cipher") == 0) {
        opts->cipher_name = value;
    } else if (strcmp(arg, "--impl") == 0) {
        if (strcmp(value, "sqlite") != 0 && strcmp(value, "mailvault") != 0) {
            bench_usage();
        }
        opts->plain_sqlite = strcmp(value, "sqlite") == 0;
    } else if (strcmp(arg, "--scale") == 0) {
        opts->scale = bench_number(value, 1, BENCH_SCALE_MAX);
    } else if (strcmp(arg, "--round") == 0) {
        opts->round = bench_number(value, 0, BENCH_ROUND_MAX);
    } else if (strcmp(arg, "--dir") == 0) {
        opts->parent_dir = value;
    } else if (strcmp(arg, "--phases") == 0) {
        bench_parse_phases(value, opts);
    } else if (strcmp(arg, "--perf-ctl") == 0) {
        opts->perf_ctl = value;
    } else if (strcmp(arg, "--perf-phase") == 0) {
        opts->perf_phase = bench_phase_index(value, strlen(value));
    } else {
        bench_usage();
    }
    return i + 1;
}

static void bench_parse_args(int argc, char **argv, struct bench_opts *opts)
{
    for (int i = 1; i < argc; i++) {
        i = bench_parse_one(argc, argv, i, opts);
    }
    if (opts->config == NULL || opts->cipher_name == NULL) {
        bench_usage();
    }
    /* (1) a known cipher, (2) "auto" is no benchmark cipher, (3) --impl sqlite is the
     * unencrypted ceiling only, (4) a perf FIFO needs a phase and the phase must run. */
    if (mv_cipher_from_name(opts->cipher_name, &opts->cipher) != MV_OK ||
        opts->cipher == MV_CIPHER_AUTO || (opts->plain_sqlite && opts->cipher != MV_CIPHER_NONE) ||
        ((opts->perf_ctl != NULL) != (opts->perf_phase >= 0 && opts->phases[opts->perf_phase]))) {
        bench_usage();
    }
}

/* Makes the scratch directory under opts->parent_dir, $TMPDIR or ./var/bench. */
static void bench_make_dir(const struct bench_opts *opts)
{
    if (bench_scratch_make(opts->parent_dir, "mailvault-bref", bench_dir, sizeof bench_dir) != 0) {
        exit(1);
    }
}

int main(int argc, char **argv)
{
    struct bench_opts opts = {NULL, NULL, MV_CIPHER_AUTO, 0, 1, 0, NULL, {1, 1, 1, 1, 1}, 1,
                              NULL, -1};
    bench_parse_args(argc, argv, &opts);
    if (mv_vfs_register(NULL, 0) != MV_OK) {
        bench_fail("mv_vfs_register", NULL);
    }
    for (size_t i = 0; i < sizeof bench_seed_raw; i++) {
        bench_seed_raw[i] = (uint8_t)bench_phrase[i % (sizeof bench_phrase - 1)];
    }
    for (size_t i = 0; i < sizeof bench_insert_raw; i++) {
        bench_insert_raw[i] = (uint8_t)bench_phrase[i % (sizeof bench_phrase - 1)];
    }
    bench_make_dir(&opts);
    char path[BENCH_PATH_BYTES_MAX];
    static struct bench_result result;
    if (opts.warmup) {
        bench_db_path("warmup", path, sizeof path);
        bench_workload(&opts, path, 1, &result);
    }
    if (opts.perf_ctl != NULL) {
        bench_perf_fd = open(opts.perf_ctl, O_WRONLY | O_CLOEXEC);
        if (bench_perf_fd < 0) {
            bench_fail("opening the perf control FIFO", NULL);
        }
    }
    bench_db_path("timed", path, sizeof path);
    bench_workload(&opts, path, opts.scale, &result);
    bench_print_record(&opts, &result);
    if (bench_perf_fd >= 0) {
        (void)close(bench_perf_fd);
    }
    return 0;
}
