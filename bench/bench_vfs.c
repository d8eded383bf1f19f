/*
 * bench_vfs.c -- what page encryption costs a write-heavy mail store: single-row autocommit
 * INSERT and UPDATE rates through the encrypting VFS, against the same build with no
 * encryption (a plaintext file through the shim, and SQLite's own "unix" VFS).
 *
 * USAGE
 *   build/rel/bench/bench_vfs [--quick] [--rounds R] [--n N] [--dir DIR]
 *     --quick      N=200, R=3 (unless --n / --rounds say otherwise)
 *     --rounds R   rounds, each running every configuration once (default 7)
 *     --n N        timed statements per phase (default 2000)
 *     --dir DIR    parent of the scratch directory (default $TMPDIR, else ./var/bench)
 *     --only NAME  run one configuration (for profiling); prints its rates, no ratios
 *
 * CONFIGURATIONS (interleaved: every round runs each once, round r starting at the r-th,
 * A B C D E  B C D E A  C D E A B ..., so no configuration always runs first or after another)
 *   chacha20, aes256cbc, sqlcipher   mv_db_open(), passphrase, the cipher's default KDF
 *   plain    sqlite3_open_v2() on VFS "mailvault", no key: plaintext through the shim
 *   unix     sqlite3_open_v2() on SQLite's "unix" VFS: the shim's own cost is plain - unix
 *
 * WORKLOAD (fixed; the reference system's benchmark, with more statements and rounds)
 *   The reference's production PRAGMA profile: page 1 written with auto_vacuum=FULL, then
 *   journal_mode=WAL, synchronous=NORMAL, secure_delete=ON, busy_timeout=30000,
 *   foreign_keys=ON, temp_store=FILE, wal_autocheckpoint=1000. Its messages table and its
 *   (mailbox_id, date DESC) index; 1000 rows of ~3.5 KB seeded in one transaction, then a
 *   TRUNCATE checkpoint so every configuration starts from the same state. Timed: N
 *   single-row INSERTs of 1.1 KB rows, then N `UPDATE messages SET flags=? WHERE id=?` on
 *   ids drawn from a fixed-seed generator, each statement its own transaction. Every round
 *   starts from a new file. Also timed: one mv_db_open() of the existing chacha20 file (the
 *   KDF dominates it).
 *
 * OUTPUT (one "name value [(min a max b)]" line per figure, on stdout)
 *   vfs.<insert|update>.<config>.rate_per_s        median statements/s over the rounds
 *   vfs.<insert|update>.<cipher>.cost_ratio_vs_plain   cost (1/rate) relative to "plain":
 *       the median of the per-round ratios (each round pairs runs made seconds apart)
 *   vfs.<insert|update>.plain.cost_ratio_vs_unix   the shim's own cost, the same way
 *   vfs.open.chacha20_ms                           one mv_db_open() of an existing file
 *
 * LIMITATIONS
 *   Absolute rates depend on the disk (synchronous=NORMAL still syncs at each checkpoint)
 *   and on the machine; compare the ratios.
 */
#include "mailvault.h"
#include "scratch.h"
#include "util.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_CONFIG_COUNT   5
#define BENCH_PHASE_COUNT    2 /* insert, update */
#define BENCH_ROUNDS_MAX     99
#define BENCH_N_MAX          1000000L
#define BENCH_SEED_ROWS      1000
#define BENCH_SEED_RAW_BYTES 3500
#define BENCH_ROW_RAW_BYTES  1100
#define BENCH_PATH_BYTES_MAX 4096
#define BENCH_PRNG_SEED      0x9e3779b97f4a7c15u

int main(int argc, char **argv);

struct bench_config {
    const char *name;
    mv_cipher cipher; /* MV_CIPHER_NONE: opened with sqlite3_open_v2() on vfs */
    const char *vfs;
};

static const struct bench_config bench_configs[BENCH_CONFIG_COUNT] = {
    {"chacha20", MV_CIPHER_CHACHA20, NULL},   {"aes256cbc", MV_CIPHER_AES256CBC, NULL},
    {"sqlcipher", MV_CIPHER_SQLCIPHER, NULL}, {"plain", MV_CIPHER_NONE, MV_VFS_NAME},
    {"unix", MV_CIPHER_NONE, "unix"},
};
enum { BENCH_PLAIN = 3, BENCH_UNIX = 4 };

static const char *const bench_phase_names[BENCH_PHASE_COUNT] = {"insert", "update"};
static const char bench_password[] = "bench password";

struct bench_opts {
    long n;
    int rounds;
    const char *parent_dir;
    const char *only; /* NULL: every configuration */
};

/* Results: rates per phase, configuration and round; open times per round. */
static double bench_rates[BENCH_PHASE_COUNT][BENCH_CONFIG_COUNT][BENCH_ROUNDS_MAX];
static double bench_open_ms[BENCH_ROUNDS_MAX];
static int bench_selected[BENCH_CONFIG_COUNT];

static char bench_dir[BENCH_PATH_BYTES_MAX]; /* scratch directory; "" until made */
static uint8_t bench_seed_raw[BENCH_SEED_RAW_BYTES];
static uint8_t bench_row_raw[BENCH_ROW_RAW_BYTES];
static struct bench_rng bench_prng; /* the UPDATE ids; reset to BENCH_PRNG_SEED per run */

static void bench_db_path(const struct bench_config *config, char *out, size_t out_size)
{
    int len = snprintf(out, out_size, "%s/bench-%s.db", bench_dir, config->name);
    if (len < 0 || (size_t)len >= out_size) {
        fprintf(stderr, "bench_vfs: scratch path too long\n");
        exit(1);
    }
}

/* The first column of the first row of sql, as text, into out. */
static void bench_query_text(sqlite3 *db, const char *sql, char *out, size_t out_size)
{
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) != SQLITE_OK ||
        sqlite3_step(stmt) != SQLITE_ROW) {
        bench_fail(sql, db);
    }
    const unsigned char *text = sqlite3_column_text(stmt, 0);
    snprintf(out, out_size, "%s", text != NULL ? (const char *)text : "");
    sqlite3_finalize(stmt);
}

static sqlite3 *bench_open_encrypted(const struct bench_config *config, const char *path)
{
    struct mv_db_options opts = MV_DB_OPTIONS_INIT;
    opts.cipher = config->cipher;
    opts.flags = MV_DB_CREATE;
    opts.auto_vacuum = 1;
    sqlite3 *db = NULL;
    char *errmsg = NULL;
    int rc = mv_db_open(path, bench_password, strlen(bench_password), &opts, &db, &errmsg);
    if (rc != MV_OK) {
        fprintf(stderr, "bench_vfs: mv_db_open(%s): %s: %s\n", config->name, mv_strerror(rc),
                errmsg != NULL ? errmsg : "");
        sqlite3_free(errmsg);
        exit(1);
    }
    struct mv_db_info info;
    if (mv_db_info(db, &info) != MV_OK || info.cipher != config->cipher) {
        bench_fail("mv_db_info (cipher check)", db);
    }
    return db;
}

/* A new file with the production profile, the schema and the seed rows, checkpointed. */
static sqlite3 *bench_create(const struct bench_config *config, const char *path)
{
    sqlite3 *db = NULL;
    if (config->cipher != MV_CIPHER_NONE) {
        db = bench_open_encrypted(config, path);
    } else {
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, config->vfs) !=
            SQLITE_OK) {
            bench_fail("sqlite3_open_v2", db);
        }
        bench_exec(db, "PRAGMA auto_vacuum=FULL");
    }
    bench_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                   "PRAGMA secure_delete=ON; PRAGMA busy_timeout=30000;"
                   "PRAGMA foreign_keys=ON; PRAGMA temp_store=FILE;"
                   "PRAGMA wal_autocheckpoint=1000");
    bench_exec(db, "CREATE TABLE messages(id INTEGER PRIMARY KEY, mailbox_id INTEGER NOT NULL,"
                   " uid INTEGER NOT NULL, date INTEGER NOT NULL, flags TEXT, subject TEXT,"
                   " from_addr TEXT, to_addr TEXT, message_id TEXT, raw BLOB);"
                   "CREATE INDEX messages_mailbox_date ON messages(mailbox_id, date DESC)");
    char value[32];
    bench_query_text(db, "PRAGMA auto_vacuum", value, sizeof value);
    if (strcmp(value, "1") != 0) {
        bench_fail("auto_vacuum=FULL check", db);
    }
    bench_query_text(db, "PRAGMA journal_mode", value, sizeof value);
    if (strcmp(value, "wal") != 0) {
        bench_fail("journal_mode=WAL check", db);
    }
    return db;
}

/* Binds one message row; raw is static for the statement's lifetime. */
static void bench_bind_row(sqlite3_stmt *stmt, long i, const uint8_t *raw, int raw_size)
{
    char subject[64], message_id[64];
    snprintf(subject, sizeof subject, "Bench message %ld", i);
    snprintf(message_id, sizeof message_id, "<%ld.bench@example.org>", i);
    int rc = sqlite3_bind_int64(stmt, 1, 1 + i % 5);
    rc |= sqlite3_bind_int64(stmt, 2, 1000 + i);
    rc |= sqlite3_bind_int64(stmt, 3, 1700000000 + i * 60);
    rc |= sqlite3_bind_text(stmt, 4, i % 3 == 0 ? "\\Seen" : NULL, -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(stmt, 5, subject, -1, SQLITE_TRANSIENT);
    rc |= sqlite3_bind_text(stmt, 6, "sender@example.org", -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(stmt, 7, "user@example.org", -1, SQLITE_STATIC);
    rc |= sqlite3_bind_text(stmt, 8, message_id, -1, SQLITE_TRANSIENT);
    rc |= sqlite3_bind_blob(stmt, 9, raw, raw_size, SQLITE_STATIC);
    if (rc != SQLITE_OK) {
        bench_fail("bind", NULL);
    }
}

static const char bench_insert_sql[] =
    "INSERT INTO messages(mailbox_id, uid, date, flags, subject, from_addr, to_addr,"
    " message_id, raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";

/* Inserts count rows numbered from first, each its own statement; returns rows/s. */
static double
bench_insert_rows(sqlite3 *db, long first, long count, const uint8_t *raw, int raw_size)
{
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(db, bench_insert_sql, -1, &stmt, NULL) != SQLITE_OK) {
        bench_fail("prepare INSERT", db);
    }
    double start = bench_now_s();
    for (long i = first; i < first + count; i++) {
        bench_bind_row(stmt, i, raw, raw_size);
        if (sqlite3_step(stmt) != SQLITE_DONE || sqlite3_reset(stmt) != SQLITE_OK) {
            bench_fail("INSERT", db);
        }
    }
    double elapsed = bench_now_s() - start;
    sqlite3_finalize(stmt);
    return (double)count / elapsed;
}

static void bench_seed(sqlite3 *db)
{
    bench_exec(db, "BEGIN");
    (void)bench_insert_rows(db, 0, BENCH_SEED_ROWS, bench_seed_raw, BENCH_SEED_RAW_BYTES);
    bench_exec(db, "COMMIT");
    bench_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
}

/* count autocommit flag updates of seeded rows; returns updates/s. */
static double bench_update_rows(sqlite3 *db, long count)
{
    static const char *const flags[] = {"\\Seen", "\\Seen \\Flagged", "\\Answered \\Seen",
                                        "\\Seen $Junk"};
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(db, "UPDATE messages SET flags=? WHERE id=?", -1, &stmt, NULL) !=
        SQLITE_OK) {
        bench_fail("prepare UPDATE", db);
    }
    double start = bench_now_s();
    for (long i = 0; i < count; i++) {
        uint64_t r = bench_rng_next(&bench_prng);
        int rc = sqlite3_bind_text(stmt, 1, flags[r & 3u], -1, SQLITE_STATIC);
        rc |= sqlite3_bind_int64(stmt, 2, (sqlite3_int64)(1 + (r >> 8) % BENCH_SEED_ROWS));
        if (rc != SQLITE_OK || sqlite3_step(stmt) != SQLITE_DONE || sqlite3_changes(db) != 1 ||
            sqlite3_reset(stmt) != SQLITE_OK) {
            bench_fail("UPDATE", db);
        }
    }
    double elapsed = bench_now_s() - start;
    sqlite3_finalize(stmt);
    return (double)count / elapsed;
}

/* (1) plain configurations must leave a plain SQLite file, (2) ciphers must not. */
static void bench_check_header(const struct bench_config *config, const char *path)
{
    static const char magic[16] = "SQLite format 3";
    char header[16] = {0};
    FILE *f = fopen(path, "rb");
    if (f == NULL || fread(header, 1, sizeof header, f) != sizeof header) {
        bench_fail("reading the file header", NULL);
    }
    fclose(f);
    int plain = memcmp(header, magic, sizeof magic) == 0;
    if (plain != (config->cipher == MV_CIPHER_NONE)) {
        fprintf(stderr, "bench_vfs: %s: file header is %s\n", config->name,
                plain ? "plaintext" : "not plaintext");
        exit(1);
    }
}

/* Times one mv_db_open() of the existing chacha20 file, in milliseconds. */
static double bench_time_open(const char *path)
{
    sqlite3 *db = NULL;
    char *errmsg = NULL;
    double start = bench_now_s();
    int rc = mv_db_open(path, bench_password, strlen(bench_password), NULL, &db, &errmsg);
    double elapsed_ms = (bench_now_s() - start) * 1e3;
    if (rc != MV_OK) {
        fprintf(stderr, "bench_vfs: reopen: %s: %s\n", mv_strerror(rc),
                errmsg != NULL ? errmsg : "");
        sqlite3_free(errmsg);
        exit(1);
    }
    if (sqlite3_close(db) != SQLITE_OK) {
        bench_fail("sqlite3_close after reopen", db);
    }
    return elapsed_ms;
}

/* One configuration, one round: a new file, seeded, then the two timed phases. */
static void bench_run(size_t config_index, int round, long n)
{
    const struct bench_config *config = &bench_configs[config_index];
    char path[BENCH_PATH_BYTES_MAX];
    bench_db_path(config, path, sizeof path);
    bench_remove_files(path);
    sqlite3 *db = bench_create(config, path);
    bench_seed(db);
    bench_prng = bench_rng_seeded(BENCH_PRNG_SEED);
    bench_rates[0][config_index][round] =
        bench_insert_rows(db, BENCH_SEED_ROWS, n, bench_row_raw, BENCH_ROW_RAW_BYTES);
    bench_rates[1][config_index][round] = bench_update_rows(db, n);
    if (sqlite3_close(db) != SQLITE_OK) {
        bench_fail("sqlite3_close", db);
    }
    bench_check_header(config, path);
    if (config->cipher == MV_CIPHER_CHACHA20) {
        bench_open_ms[round] = bench_time_open(path);
    }
    bench_remove_files(path);
}

/* cost(config) / cost(base) = rate(base) / rate(config), per round; printed as a stat. */
static void bench_print_ratio(int phase, size_t config, size_t base, const char *label, int rounds)
{
    double ratios[BENCH_ROUNDS_MAX] = {0};
    for (int r = 0; r < rounds; r++) {
        ratios[r] = bench_rates[phase][base][r] / bench_rates[phase][config][r];
    }
    struct bench_stat s = bench_stat_of(ratios, rounds);
    printf("vfs.%s.%s.cost_ratio_vs_%s %.2f (min %.2f max %.2f)\n", bench_phase_names[phase],
           bench_configs[config].name, label, s.median, s.min, s.max);
}

static void bench_report(const struct bench_opts *opts)
{
    for (int phase = 0; phase < BENCH_PHASE_COUNT; phase++) {
        for (size_t c = 0; c < BENCH_CONFIG_COUNT; c++) {
            if (!bench_selected[c]) {
                continue;
            }
            struct bench_stat s = bench_stat_of(bench_rates[phase][c], opts->rounds);
            printf("vfs.%s.%s.rate_per_s %.0f (min %.0f max %.0f)\n", bench_phase_names[phase],
                   bench_configs[c].name, s.median, s.min, s.max);
        }
        if (opts->only != NULL) {
            continue;
        }
        for (size_t c = 0; c < BENCH_PLAIN; c++) {
            bench_print_ratio(phase, c, BENCH_PLAIN, "plain", opts->rounds);
        }
        bench_print_ratio(phase, BENCH_PLAIN, BENCH_UNIX, "unix", opts->rounds);
    }
    if (bench_selected[0]) {
        struct bench_stat s = bench_stat_of(bench_open_ms, opts->rounds);
        printf("vfs.open.chacha20_ms %.1f (min %.1f max %.1f)\n", s.median, s.min, s.max);
    }
}

/* Marks the configurations to run: all, or the one --only names. */
static void bench_select(const struct bench_opts *opts)
{
    int found = 0;
    for (size_t c = 0; c < BENCH_CONFIG_COUNT; c++) {
        bench_selected[c] = opts->only == NULL || strcmp(opts->only, bench_configs[c].name) == 0;
        found |= bench_selected[c];
    }
    if (!found) {
        fprintf(stderr, "bench_vfs: --only: no configuration named %s\n", opts->only);
        exit(2);
    }
}

static void bench_usage(void)
{
    fprintf(stderr,
            "usage: bench_vfs [--quick] [--rounds R (1..%d)] [--n N (1..%ld)] "
            "[--dir DIR] [--only NAME]\n",
            BENCH_ROUNDS_MAX, BENCH_N_MAX);
    exit(2);
}

static void bench_parse_args(int argc, char **argv, struct bench_opts *opts)
{
    long n = -1, rounds = -1;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        int has_value = i + 1 < argc;
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--n") == 0 && has_value) {
            if (bench_parse_long(argv[++i], 1, BENCH_N_MAX, &n) != 0) {
                bench_usage();
            }
        } else if (strcmp(argv[i], "--rounds") == 0 && has_value) {
            if (bench_parse_long(argv[++i], 1, BENCH_ROUNDS_MAX, &rounds) != 0) {
                bench_usage();
            }
        } else if (strcmp(argv[i], "--dir") == 0 && has_value) {
            opts->parent_dir = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && has_value) {
            opts->only = argv[++i];
        } else {
            bench_usage();
        }
    }
    opts->n = n > 0 ? n : (quick ? 200 : 2000);
    opts->rounds = (int)(rounds > 0 ? rounds : (quick ? 3 : 7));
}

/* Makes the scratch directory under opts->parent_dir, $TMPDIR or ./var/bench. */
static void bench_make_dir(const struct bench_opts *opts)
{
    if (bench_scratch_make(opts->parent_dir, "mailvault-bench", bench_dir, sizeof bench_dir) != 0) {
        exit(1);
    }
}

int main(int argc, char **argv)
{
    struct bench_opts opts = {0, 0, NULL, NULL};
    bench_parse_args(argc, argv, &opts);
    bench_select(&opts);
    if (mv_vfs_register(NULL, 0) != MV_OK || sqlite3_vfs_find("unix") == NULL) {
        bench_fail("mv_vfs_register / finding the unix VFS", NULL);
    }
    bench_prng = bench_rng_seeded(BENCH_PRNG_SEED);
    for (size_t i = 0; i < sizeof bench_row_raw; i++) {
        bench_row_raw[i] = (uint8_t)bench_rng_next(&bench_prng);
    }
    static const char phrase[] = "The quick brown fox jumps over the lazy dog. ";
    for (size_t i = 0; i < sizeof bench_seed_raw; i++) {
        bench_seed_raw[i] = (uint8_t)phrase[i % (sizeof phrase - 1)];
    }
    bench_make_dir(&opts);
    printf("vfs.params n=%ld rounds=%d seed_rows=%d dir=%s sqlite=%s\n", opts.n, opts.rounds,
           BENCH_SEED_ROWS, bench_dir, sqlite3_libversion());
    fflush(stdout);
    for (int round = 0; round < opts.rounds; round++) {
        fprintf(stderr, "bench_vfs: round %d/%d\n", round + 1, opts.rounds);
        for (size_t i = 0; i < BENCH_CONFIG_COUNT; i++) {
            size_t c = (i + (size_t)round) % BENCH_CONFIG_COUNT;
            if (bench_selected[c]) {
                bench_run(c, round, opts.n);
            }
        }
    }
    bench_report(&opts);
    fflush(stdout);
    return 0;
}
