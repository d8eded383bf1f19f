/*
 * make_corpus_vfs_file.c -- writes the seed corpus of fuzz_vfs_file (fuzz/corpus/vfs_file).
 *
 * For each cipher the fuzz target knows (chacha20, sqlcipher, aes256cbc, sqlcipher legacy=4)
 * it creates a small valid database under the target's fixed key and saves it three ways,
 * packed in the target's input layout (see fuzz/fuzz_vfs_file.c):
 *   <cipher>-delete   the closed database, no side file
 *   <cipher>-wal      the database in WAL mode and its WAL with un-checkpointed committed
 *                     frames, copied while the connection is open (wal_autocheckpoint=0)
 *   <cipher>-journal  a database a transaction has spilled into (cache_size=2) and its hot
 *                     rollback journal, copied while the transaction is open
 * plus a few degenerate inputs (empty, one byte, zeros, page 1 cut short, an unencrypted
 * SQLite file, an empty main file next to a WAL) and three forged ones (authentic WAL frames
 * of another page size; a WAL switched to big-endian checksums; a hot journal that is only a
 * header). The mode byte of each seed
 * also varies the target's other switches (auto cipher, read-only, write after reading,
 * WAL checksum rewrite).
 *
 * Not deterministic: new files get random salts and every page a random nonce or IV, so a
 * rerun writes different bytes of the same shapes.
 *
 * USAGE
 *   make build/libmailvault.a
 *   cc -std=c17 -D_GNU_SOURCE -Iinclude -o build/make_corpus_vfs_file \
 *       fuzz/make_corpus_vfs_file.c build/libmailvault.a -lsqlite3 -lcrypto -lpthread
 *   build/make_corpus_vfs_file fuzz/corpus/vfs_file
 */
#include "mailvault.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CORPUS_MAIN_BYTES_MAX 65535 /* the input layout's 2-byte length */
#define CORPUS_PATH_BYTES_MAX 512

/* Mode byte of the input layout (fuzz/fuzz_vfs_file.c). */
#define SIDE_NONE     0x0
#define SIDE_WAL      0x4
#define SIDE_JOURNAL  0x8
#define FLAG_AUTO     0x10
#define FLAG_RDONLY   0x20
#define FLAG_WRITE    0x40
#define FLAG_CHECKSUM 0x80

int main(int argc, char **argv);

static const char corpus_raw_key[] =
    "x'404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f'";
static const char corpus_passphrase[] = "fuzz";

struct corpus_cipher {
    const char *name;
    unsigned index; /* bits 0-1 of the mode byte */
    mv_cipher cipher;
    int legacy;
    int page_size;
    unsigned delete_flags, wal_flags, journal_flags; /* extra mode bits per seed */
};

static const struct corpus_cipher corpus_ciphers[] = {
    {"chacha20", 0, MV_CIPHER_CHACHA20, 0, 512, FLAG_AUTO, FLAG_WRITE | FLAG_CHECKSUM, 0},
    {"sqlcipher", 1, MV_CIPHER_SQLCIPHER, 0, 1024, 0, FLAG_AUTO | FLAG_CHECKSUM, FLAG_WRITE},
    {"aes256cbc", 2, MV_CIPHER_AES256CBC, 0, 512, FLAG_RDONLY, FLAG_CHECKSUM, FLAG_AUTO},
    {"legacy4", 3, MV_CIPHER_SQLCIPHER, 4, 4096, 0, FLAG_RDONLY, FLAG_WRITE},
};

static char corpus_dir[CORPUS_PATH_BYTES_MAX];
static char work_dir[CORPUS_PATH_BYTES_MAX];
static char db_path[CORPUS_PATH_BYTES_MAX];
static char wal_path[CORPUS_PATH_BYTES_MAX];
static char journal_path[CORPUS_PATH_BYTES_MAX];
static size_t corpus_total_bytes;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "make_corpus_vfs_file: %s%s%s\n", what, detail != NULL ? ": " : "",
            detail != NULL ? detail : "");
    exit(1);
}

/* out = a + b, or exit if it does not fit. */
static void join_path(char out[CORPUS_PATH_BYTES_MAX], const char *a, const char *b)
{
    int n = snprintf(out, CORPUS_PATH_BYTES_MAX, "%s%s", a, b);
    if (n < 0 || n >= CORPUS_PATH_BYTES_MAX) {
        die("path too long", a);
    }
}

static void remove_db(void)
{
    (void)unlink(db_path);
    (void)unlink(wal_path);
    (void)unlink(journal_path);
    char shm[CORPUS_PATH_BYTES_MAX];
    join_path(shm, db_path, "-shm");
    (void)unlink(shm);
}

/* The file's bytes (malloc'd), or NULL with *size 0 if it does not exist. */
static uint8_t *read_file(const char *path, size_t *size)
{
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        die("cannot stat", path);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n > 0 ? n : 1);
    if (buf == NULL || fread(buf, 1, n, f) != n) {
        die("cannot read", path);
    }
    fclose(f);
    *size = n;
    return buf;
}

/* Writes one seed: mode byte, 2-byte main length, main bytes, side bytes. */
static void write_seed(const char *name,
                       unsigned mode,
                       const uint8_t *main_bytes,
                       size_t main_size,
                       const uint8_t *side_bytes,
                       size_t side_size)
{
    if (main_size > CORPUS_MAIN_BYTES_MAX) {
        die("main file too large for the input layout", name);
    }
    char path[CORPUS_PATH_BYTES_MAX];
    join_path(path, corpus_dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        die("cannot create", path);
    }
    uint8_t header[3] = {(uint8_t)mode, (uint8_t)(main_size & 0xff), (uint8_t)(main_size >> 8)};
    if (fwrite(header, 1, sizeof header, f) != sizeof header ||
        (main_size > 0 && fwrite(main_bytes, 1, main_size, f) != main_size) ||
        (side_size > 0 && fwrite(side_bytes, 1, side_size, f) != side_size) || fclose(f) != 0) {
        die("cannot write", path);
    }
    corpus_total_bytes += sizeof header + main_size + side_size;
    printf("%-24s mode 0x%02x  main %6zu  side %6zu\n", name, mode, main_size, side_size);
}

static void exec_or_die(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        const char *vfs = mv_db_vfs_errmsg(db);
        fprintf(stderr, "%s [%s]\n", err != NULL ? err : "", vfs != NULL ? vfs : "");
        die("SQL failed", sql);
    }
    sqlite3_free(err);
}

static sqlite3 *open_db(const struct corpus_cipher *c, unsigned flags)
{
    struct mv_db_options opts = MV_DB_OPTIONS_INIT;
    opts.cipher = c->cipher;
    opts.legacy = c->legacy;
    opts.page_size = c->page_size;
    opts.flags = flags;
    const char *secret = c->cipher == MV_CIPHER_AES256CBC ? corpus_passphrase : corpus_raw_key;
    sqlite3 *db = NULL;
    char *err = NULL;
    if (mv_db_open(db_path, secret, strlen(secret), &opts, &db, &err) != MV_OK) {
        die("mv_db_open failed", err);
    }
    sqlite3_free(err);
    return db;
}

/* A table with an index, a row that needs overflow pages, and some small rows. */
static void create_db(const struct corpus_cipher *c)
{
    remove_db();
    sqlite3 *db = open_db(c, MV_DB_CREATE);
    exec_or_die(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, data BLOB);"
                    "CREATE INDEX t_name ON t(name);"
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12)"
                    " INSERT INTO t SELECT i, 'row ' || i, zeroblob(40 + 10 * i) FROM n;"
                    "INSERT INTO t VALUES(100, 'overflow', zeroblob(1500));"
                    "CREATE TABLE \"odd \"\"name\"(x)");
    if (sqlite3_close(db) != SQLITE_OK) {
        die("close failed", NULL);
    }
}

static void seed_delete(const struct corpus_cipher *c)
{
    char name[64];
    size_t size;
    create_db(c);
    uint8_t *main_bytes = read_file(db_path, &size);
    snprintf(name, sizeof name, "%s-delete", c->name);
    write_seed(name, c->index | SIDE_NONE | c->delete_flags, main_bytes, size, NULL, 0);
    free(main_bytes);
}

/* A WAL with committed, un-checkpointed frames, and the database beside it, copied while the
 * connection is open. Both buffers malloc'd. */
static void capture_wal(const struct corpus_cipher *c,
                        uint8_t **main_bytes,
                        size_t *main_size,
                        uint8_t **wal_bytes,
                        size_t *wal_size)
{
    create_db(c);
    sqlite3 *db = open_db(c, 0);
    exec_or_die(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0");
    exec_or_die(db, "INSERT INTO t VALUES(200, 'in the wal', zeroblob(100))");
    exec_or_die(db, "UPDATE t SET name = name || ' updated' WHERE id % 3 = 0");
    exec_or_die(db, "DELETE FROM t WHERE id = 5");
    *main_bytes = read_file(db_path, main_size);
    *wal_bytes = read_file(wal_path, wal_size);
    if (*wal_bytes == NULL || *wal_size == 0) {
        die("no WAL to copy", wal_path);
    }
    if (sqlite3_close(db) != SQLITE_OK) {
        die("close failed", NULL);
    }
}

static void seed_wal(const struct corpus_cipher *c)
{
    char name[64];
    size_t main_size, wal_size;
    uint8_t *main_bytes, *wal_bytes;
    capture_wal(c, &main_bytes, &main_size, &wal_bytes, &wal_size);
    snprintf(name, sizeof name, "%s-wal", c->name);
    write_seed(name, c->index | SIDE_WAL | c->wal_flags, main_bytes, main_size, wal_bytes,
               wal_size);
    free(main_bytes);
    free(wal_bytes);
}

/* Authentic frames of the wrong page size: the WAL of a 512-byte-page chacha20 database
 * behind a 1024-byte-page one under the same raw key. */
static void seed_wal_page_size_mismatch(void)
{
    struct corpus_cipher big = corpus_ciphers[0];
    size_t main_size, wal_size, unused_size;
    uint8_t *main_bytes, *wal_bytes, *unused;
    capture_wal(&corpus_ciphers[0], &unused, &unused_size, &wal_bytes, &wal_size);
    free(unused);
    big.page_size = 1024;
    create_db(&big);
    main_bytes = read_file(db_path, &main_size);
    write_seed("chacha20-wal-page-size-mismatch", SIDE_WAL | FLAG_CHECKSUM, main_bytes, main_size,
               wal_bytes, wal_size);
    free(main_bytes);
    free(wal_bytes);
}

/* The same WAL with magic 0x377f0683 (big-endian checksums); the target's checksum rewrite
 * (FLAG_CHECKSUM) makes the chain valid again. */
static void seed_wal_big_endian(void)
{
    size_t main_size, wal_size;
    uint8_t *main_bytes, *wal_bytes;
    capture_wal(&corpus_ciphers[0], &main_bytes, &main_size, &wal_bytes, &wal_size);
    wal_bytes[3] |= 1;
    write_seed("chacha20-wal-big-endian", SIDE_WAL | FLAG_WRITE | FLAG_CHECKSUM, main_bytes,
               main_size, wal_bytes, wal_size);
    free(main_bytes);
    free(wal_bytes);
}

/* A hot journal that is only a header: no record to authenticate, but it names an original
 * size of one page, so rolling it back truncates the database. */
static void seed_forged_journal(void)
{
    static const uint8_t magic[8] = {0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7};
    static const uint32_t fields[5] = {0 /* records */, 0x5eed /* nonce */, 1 /* pages */,
                                       512 /* sector */, 512 /* page size */};
    uint8_t journal[512] = {0};
    size_t main_size;
    memcpy(journal, magic, sizeof magic);
    for (size_t i = 0; i < 5; i++) {
        uint8_t *p = journal + sizeof magic + 4 * i;
        p[0] = (uint8_t)(fields[i] >> 24);
        p[1] = (uint8_t)(fields[i] >> 16);
        p[2] = (uint8_t)(fields[i] >> 8);
        p[3] = (uint8_t)fields[i];
    }
    create_db(&corpus_ciphers[0]);
    uint8_t *main_bytes = read_file(db_path, &main_size);
    write_seed("chacha20-forged-journal-header", SIDE_JOURNAL, main_bytes, main_size, journal,
               sizeof journal);
    free(main_bytes);
}

static void seed_journal(const struct corpus_cipher *c)
{
    char name[64];
    size_t main_size, journal_size;
    create_db(c);
    sqlite3 *db = open_db(c, 0);
    exec_or_die(db, "PRAGMA cache_size=2; BEGIN;"
                    "UPDATE t SET data = zeroblob(length(data) + 7), name = 'changed';"
                    "DELETE FROM t WHERE id > 10");
    uint8_t *main_bytes = read_file(db_path, &main_size);
    uint8_t *journal_bytes = read_file(journal_path, &journal_size);
    if (journal_bytes == NULL || journal_size == 0) {
        die("no hot journal to copy (the update did not spill)", journal_path);
    }
    snprintf(name, sizeof name, "%s-journal", c->name);
    write_seed(name, c->index | SIDE_JOURNAL | c->journal_flags, main_bytes, main_size,
               journal_bytes, journal_size);
    free(main_bytes);
    free(journal_bytes);
    exec_or_die(db, "ROLLBACK");
    if (sqlite3_close(db) != SQLITE_OK) {
        die("close failed", NULL);
    }
}

/* An unencrypted SQLite file: the VFS must refuse a key for it. */
static void seed_plain(void)
{
    size_t size;
    remove_db();
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        die("sqlite3_open_v2 failed", db_path);
    }
    exec_or_die(db, "PRAGMA page_size=512; CREATE TABLE p(x); INSERT INTO p VALUES(1)");
    sqlite3_close(db);
    uint8_t *main_bytes = read_file(db_path, &size);
    write_seed("plain-sqlite", 0, main_bytes, size, NULL, 0);
    free(main_bytes);
}

/* A file exactly as given, not in the input layout (inputs shorter than its header). */
static void write_raw(const char *name, const uint8_t *bytes, size_t size)
{
    char path[CORPUS_PATH_BYTES_MAX];
    join_path(path, corpus_dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || (size > 0 && fwrite(bytes, 1, size, f) != size) || fclose(f) != 0) {
        die("cannot write", path);
    }
    corpus_total_bytes += size;
    printf("%-24s raw %zu bytes\n", name, size);
}

static void seed_degenerate(void)
{
    static const uint8_t zeros[100];
    size_t size, wal_size;
    write_raw("empty", NULL, 0);
    write_raw("one-byte", zeros, 1);
    write_seed("empty-main", 0, NULL, 0, NULL, 0);
    write_seed("zeros-100", 0, zeros, sizeof zeros, NULL, 0);
    write_seed("zeros-100-journal", SIDE_JOURNAL, zeros, sizeof zeros, zeros, sizeof zeros);

    /* Page 1 cut short: the 100-byte header of a valid chacha20 file. */
    create_db(&corpus_ciphers[0]);
    uint8_t *main_bytes = read_file(db_path, &size);
    write_seed("chacha20-header-only", 0, main_bytes, 100, NULL, 0);
    free(main_bytes);
    seed_plain();
    /* A new database next to a stale WAL. */
    uint8_t *wal_bytes;
    capture_wal(&corpus_ciphers[0], &main_bytes, &size, &wal_bytes, &wal_size);
    write_seed("empty-main-stale-wal", SIDE_WAL | FLAG_WRITE | FLAG_CHECKSUM, NULL, 0, wal_bytes,
               wal_size);
    free(main_bytes);
    free(wal_bytes);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    join_path(corpus_dir, argv[1], "/");
    (void)mkdir(corpus_dir, 0755);
    const char *tmp = getenv("TMPDIR");
    snprintf(work_dir, sizeof work_dir, "%s/make_corpus_vfs_file.XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(work_dir) == NULL) {
        die("cannot create a work directory", work_dir);
    }
    join_path(db_path, work_dir, "/db");
    join_path(wal_path, db_path, "-wal");
    join_path(journal_path, db_path, "-journal");

    for (size_t i = 0; i < sizeof corpus_ciphers / sizeof corpus_ciphers[0]; i++) {
        seed_delete(&corpus_ciphers[i]);
        seed_wal(&corpus_ciphers[i]);
        seed_journal(&corpus_ciphers[i]);
    }
    seed_degenerate();
    seed_wal_page_size_mismatch();
    seed_wal_big_endian();
    seed_forged_journal();
    remove_db();
    (void)rmdir(work_dir);
    printf("total %zu bytes\n", corpus_total_bytes);
    return 0;
}
