/*
 * fuzz_vfs_file.c -- feeds arbitrary database files, with an optional WAL and/or rollback
 * journal beside them, through mv_db_open() and every read path of the encrypting VFS: key
 * proof on page 1, page decryption, hot-journal validation and rollback, WAL recovery and
 * frame authentication, and SQLite's own corruption checks on whatever decrypts.
 *
 * INPUT
 *   byte 0      bits 0-1  cipher: 0 chacha20, 1 sqlcipher, 2 aes256cbc, 3 sqlcipher legacy=4
 *               bits 2-3  side file: 0 none, 1 db-wal, 2 db-journal, 3 both (same bytes)
 *               bit 4     open with MV_CIPHER_AUTO (cipher recognised from the header)
 *                         instead of naming it; legacy=4 always names it
 *               bit 5     open with MV_DB_READONLY
 *               bit 6     after reading, write a small transaction and checkpoint the WAL
 *               bit 7     rewrite the db-wal's checksums (header and frame chain) over the
 *                         bytes as given, as a forger would: else a mutated frame fails
 *                         SQLite's checksum and the VFS never judges it
 *   bytes 1..2  L, little-endian: size of the main file, clamped to the bytes that follow
 *   bytes 3..   L bytes of main file, then the side file (FUZZ_SIDE_BYTES_MAX at most)
 *
 * CHECKS
 *   None beyond the sanitizers: every SQLite or MV_E* error is a fine answer; a crash, a
 *   leak, undefined behaviour or a hang is not.
 *
 * IMPLEMENTATION NOTES
 *   - The key is raw (x'<64 hex>'), so no KDF runs, except for aes256cbc, which refuses raw
 *     keys: its passphrase goes through the format's fixed 4001 SHA-256 rounds. The
 *     passphrase also reaches the chacha20 and sqlcipher KDFs (auto cipher on a header that
 *     says so, or a new file), so kdf_iter is FUZZ_KDF_ITER: the defaults (64007, 256000)
 *     would cost up to a second per input.
 *   - The files live in one private directory made on the first call (under $TMPDIR) and
 *     removed at exit; each input rewrites db and removes db-wal, db-journal and db-shm.
 *   - Work per input is bounded: file sizes, SQLite limits, rows stepped per statement,
 *     tables read, and a progress handler that interrupts a statement after
 *     FUZZ_PROGRESS_TICKS_MAX * FUZZ_PROGRESS_OPS virtual machine instructions.
 *
 * Corpus: fuzz/corpus/vfs_file, made by fuzz/make_corpus_vfs_file.c (see its header).
 */
#include "mailvault.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_HEADER_BYTES       3
#define FUZZ_SIDE_BYTES_MAX     ((size_t)256 * 1024)
#define FUZZ_TABLES_MAX         32
#define FUZZ_ROW_STEPS_MAX      10000
#define FUZZ_PROGRESS_OPS       1000
#define FUZZ_PROGRESS_TICKS_MAX 5000 /* 5 million instructions per statement */
#define FUZZ_PATH_BYTES_MAX     512
#define FUZZ_KDF_ITER           2

#define FUZZ_SIDE_WAL      0x1
#define FUZZ_SIDE_JOURNAL  0x2
#define FUZZ_FLAG_AUTO     0x10
#define FUZZ_FLAG_RDONLY   0x20
#define FUZZ_FLAG_WRITE    0x40
#define FUZZ_FLAG_CHECKSUM 0x80

#define FUZZ_WAL_HEADER_BYTES       32
#define FUZZ_WAL_FRAME_HEADER_BYTES 24

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fuzz_raw_key[] =
    "x'404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f'";
static const char fuzz_passphrase[] = "fuzz";

static char fuzz_dir[FUZZ_PATH_BYTES_MAX];
static char fuzz_db_path[FUZZ_PATH_BYTES_MAX];
static char fuzz_wal_path[FUZZ_PATH_BYTES_MAX];
static char fuzz_journal_path[FUZZ_PATH_BYTES_MAX];
static char fuzz_shm_path[FUZZ_PATH_BYTES_MAX];
static unsigned fuzz_ticks;
static uint8_t fuzz_wal[FUZZ_SIDE_BYTES_MAX];

static void fuzz_remove_side_files(void)
{
    (void)unlink(fuzz_wal_path);
    (void)unlink(fuzz_journal_path);
    (void)unlink(fuzz_shm_path);
}

static void fuzz_cleanup(void)
{
    fuzz_remove_side_files();
    (void)unlink(fuzz_db_path);
    (void)rmdir(fuzz_dir);
}

static void fuzz_path(char *out, const char *suffix)
{
    int n = snprintf(out, FUZZ_PATH_BYTES_MAX, "%s/db%s", fuzz_dir, suffix);
    if (n < 0 || n >= FUZZ_PATH_BYTES_MAX) {
        abort();
    }
}

static void fuzz_setup(void)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(fuzz_dir, sizeof fuzz_dir, "%s/fuzz_vfs_file.XXXXXX",
                     tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (n < 0 || (size_t)n >= sizeof fuzz_dir || mkdtemp(fuzz_dir) == NULL) {
        abort();
    }
    fuzz_path(fuzz_db_path, "");
    fuzz_path(fuzz_wal_path, "-wal");
    fuzz_path(fuzz_journal_path, "-journal");
    fuzz_path(fuzz_shm_path, "-shm");
    if (atexit(fuzz_cleanup) != 0) {
        abort();
    }
}

/* A harness that cannot write its own files is broken: abort rather than test nothing. */
static void fuzz_write_file(const char *path, const uint8_t *bytes, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        abort();
    }
    while (size > 0) {
        ssize_t n = write(fd, bytes, size);
        if (n <= 0) {
            abort();
        }
        bytes += n;
        size -= (size_t)n;
    }
    if (close(fd) != 0) {
        abort();
    }
}

static uint32_t fuzz_get_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void fuzz_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* SQLite's WAL checksum over n bytes (a multiple of 8), continuing from s. */
static void fuzz_wal_checksum(int big_endian, const uint8_t *p, size_t n, uint32_t s[2])
{
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint32_t x0 = fuzz_get_be32(p + i), x1 = fuzz_get_be32(p + i + 4);
        if (!big_endian) {
            x0 = __builtin_bswap32(x0);
            x1 = __builtin_bswap32(x1);
        }
        s[0] += x0 + s[1];
        s[1] += x1 + s[0];
    }
}

/* Rewrites the WAL header's checksum and every whole frame's, chained, under the page size
 * the header claims (left alone if it is not a valid page size). Salts and page numbers
 * stay as given. */
static void fuzz_wal_rechecksum(uint8_t *wal, size_t size)
{
    if (size < FUZZ_WAL_HEADER_BYTES) {
        return;
    }
    uint32_t page_size = fuzz_get_be32(wal + 8);
    if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) {
        return;
    }
    int big_endian = (int)(fuzz_get_be32(wal) & 1);
    uint32_t sum[2] = {0, 0};
    fuzz_wal_checksum(big_endian, wal, 24, sum);
    fuzz_put_be32(wal + 24, sum[0]);
    fuzz_put_be32(wal + 28, sum[1]);
    size_t frame_bytes = FUZZ_WAL_FRAME_HEADER_BYTES + page_size;
    for (size_t off = FUZZ_WAL_HEADER_BYTES; off + frame_bytes <= size; off += frame_bytes) {
        uint8_t *frame = wal + off;
        fuzz_wal_checksum(big_endian, frame, 8, sum);
        fuzz_wal_checksum(big_endian, frame + FUZZ_WAL_FRAME_HEADER_BYTES, page_size, sum);
        fuzz_put_be32(frame + 16, sum[0]);
        fuzz_put_be32(frame + 20, sum[1]);
    }
}

static int fuzz_progress(void *arg)
{
    (void)arg;
    fuzz_ticks++;
    return fuzz_ticks > FUZZ_PROGRESS_TICKS_MAX;
}

/* Steps stmt through at most FUZZ_ROW_STEPS_MAX rows, fetching every column so that overflow
 * pages are read too. Finalizes stmt. */
static void fuzz_step_all(sqlite3_stmt *stmt)
{
    fuzz_ticks = 0;
    for (int row = 0; row < FUZZ_ROW_STEPS_MAX && sqlite3_step(stmt) == SQLITE_ROW; row++) {
        int columns = sqlite3_column_count(stmt);
        for (int i = 0; i < columns; i++) {
            (void)sqlite3_column_blob(stmt, i);
            (void)sqlite3_column_bytes(stmt, i);
        }
    }
    sqlite3_finalize(stmt);
}

static void fuzz_query(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &stmt, NULL) == SQLITE_OK && stmt != NULL) {
        fuzz_step_all(stmt);
    }
}

/* SELECT * from every table the schema names (FUZZ_TABLES_MAX at most). */
static void fuzz_read_tables(sqlite3 *db)
{
    char *names[FUZZ_TABLES_MAX];
    int count = 0;
    sqlite3_stmt *stmt = NULL;
    if (sqlite3_prepare_v2(db, "SELECT name FROM sqlite_schema WHERE type='table'", -1, &stmt,
                           NULL) != SQLITE_OK) {
        return;
    }
    fuzz_ticks = 0;
    while (count < FUZZ_TABLES_MAX && sqlite3_step(stmt) == SQLITE_ROW) {
        const unsigned char *name = sqlite3_column_text(stmt, 0);
        if (name != NULL) {
            names[count] = sqlite3_mprintf("SELECT * FROM \"%w\"", (const char *)name);
            if (names[count] != NULL) {
                count++;
            }
        }
    }
    sqlite3_finalize(stmt);
    for (int i = 0; i < count; i++) {
        fuzz_query(db, names[i]);
        sqlite3_free(names[i]);
    }
}

static void fuzz_configure(sqlite3 *db)
{
    (void)sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 1000000);
    (void)sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, 100000);
    (void)sqlite3_limit(db, SQLITE_LIMIT_EXPR_DEPTH, 100);
    (void)sqlite3_limit(db, SQLITE_LIMIT_COMPOUND_SELECT, 10);
    (void)sqlite3_limit(db, SQLITE_LIMIT_VDBE_OP, 100000);
    (void)sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    (void)sqlite3_limit(db, SQLITE_LIMIT_TRIGGER_DEPTH, 10);
    (void)sqlite3_limit(db, SQLITE_LIMIT_WORKER_THREADS, 0);
    (void)sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
    (void)sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
    (void)sqlite3_busy_timeout(db, 0);
    sqlite3_progress_handler(db, FUZZ_PROGRESS_OPS, fuzz_progress, NULL);
    (void)sqlite3_exec(db, "PRAGMA cell_size_check=ON; PRAGMA cache_size=8", NULL, NULL, NULL);
}

static void fuzz_exercise(sqlite3 *db, int write)
{
    fuzz_configure(db);
    fuzz_query(db, "PRAGMA integrity_check");
    fuzz_query(db, "SELECT * FROM sqlite_schema");
    fuzz_read_tables(db);
    fuzz_query(db, "PRAGMA quick_check");
    if (write) {
        fuzz_ticks = 0;
        (void)sqlite3_exec(db,
                           "BEGIN; CREATE TABLE fuzz_w(x); "
                           "INSERT INTO fuzz_w VALUES(zeroblob(3000)), (zeroblob(100)); "
                           "UPDATE fuzz_w SET x = zeroblob(50); DROP TABLE fuzz_w; COMMIT",
                           NULL, NULL, NULL);
        fuzz_query(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_dir[0] == '\0') {
        fuzz_setup();
    }
    if (size < FUZZ_HEADER_BYTES) {
        return 0;
    }
    unsigned mode = data[0];
    int cipher_index = (int)(mode & 3u);
    unsigned side = (mode >> 2) & 3u;
    size_t main_bytes = (size_t)data[1] | ((size_t)data[2] << 8);
    const uint8_t *body = data + FUZZ_HEADER_BYTES;
    size_t body_bytes = size - FUZZ_HEADER_BYTES;
    main_bytes = main_bytes < body_bytes ? main_bytes : body_bytes;
    size_t side_bytes = body_bytes - main_bytes;
    side_bytes = side_bytes < FUZZ_SIDE_BYTES_MAX ? side_bytes : FUZZ_SIDE_BYTES_MAX;

    fuzz_remove_side_files();
    fuzz_write_file(fuzz_db_path, body, main_bytes);
    if (side & FUZZ_SIDE_WAL) {
        memcpy(fuzz_wal, body + main_bytes, side_bytes);
        if (mode & FUZZ_FLAG_CHECKSUM) {
            fuzz_wal_rechecksum(fuzz_wal, side_bytes);
        }
        fuzz_write_file(fuzz_wal_path, fuzz_wal, side_bytes);
    }
    if (side & FUZZ_SIDE_JOURNAL) {
        fuzz_write_file(fuzz_journal_path, body + main_bytes, side_bytes);
    }

    static const mv_cipher ciphers[4] = {MV_CIPHER_CHACHA20, MV_CIPHER_SQLCIPHER,
                                         MV_CIPHER_AES256CBC, MV_CIPHER_SQLCIPHER};
    struct mv_db_options opts = MV_DB_OPTIONS_INIT;
    opts.cipher = ciphers[cipher_index];
    opts.legacy = cipher_index == 3 ? 4 : 0;
    opts.kdf_iter = FUZZ_KDF_ITER;
    if ((mode & FUZZ_FLAG_AUTO) && cipher_index != 3) {
        opts.cipher = MV_CIPHER_AUTO;
    }
    opts.flags = (mode & FUZZ_FLAG_RDONLY) ? MV_DB_READONLY : 0;
    const char *secret = cipher_index == 2 ? fuzz_passphrase : fuzz_raw_key;

    sqlite3 *db = NULL;
    char *errmsg = NULL;
    int rc = mv_db_open(fuzz_db_path, secret, strlen(secret), &opts, &db, &errmsg);
    sqlite3_free(errmsg);
    if (rc == MV_OK) {
        fuzz_exercise(db, (mode & FUZZ_FLAG_WRITE) != 0);
        if (sqlite3_close(db) != SQLITE_OK) {
            abort(); /* a statement left unfinalized: a harness bug */
        }
    }
    return 0;
}
