/*
 * test_vfs.c -- the encrypting VFS: round trips in every cipher, journal mode and page size;
 * keying through PRAGMA and URI; wrong keys, flipped bits and truncated files, each giving
 * the clear error and leaving every byte on disk as it was.
 */
#include "harness.h"
#include "testutil.h"
#include "vfs/db_reopen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const PW = "correct horse ✓ battery";

struct rt_case {
    mv_cipher cipher;
    const char *journal_mode;
    int page_size;
};

static int rt_one(const struct rt_case *c)
{
    char name[128];
    snprintf(name, sizeof name, "rt-%s-%s-%d.db", mv_cipher_name(c->cipher), c->journal_mode,
             c->page_size);
    char *path = tu_path(name);
    int ok = 0;
    sqlite3 *db = NULL;
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.cipher = c->cipher;
    o.kdf_iter = TU_KDF_ITER;
    o.page_size = c->page_size;
    o.flags = MV_DB_CREATE;
    char sql[128], want[65], got[65];
    long long rows = 0;
    if (mv_db_open(path, PW, strlen(PW), &o, &db, NULL) != MV_OK) {
        goto done;
    }
    snprintf(sql, sizeof sql, "PRAGMA journal_mode=%s", c->journal_mode);
    tu_exec(db, sql);
    tu_exec(db, "BEGIN");
    tu_fill_table(db, 1, 60);
    tu_exec(db, "COMMIT");
    tu_exec(db, "UPDATE t SET name = name || ' (edited)' WHERE id % 7 = 0");
    tu_exec(db, "UPDATE t SET name = substr(name, 1, length(name) - 9) WHERE id % 7 = 0");
    sqlite3_close(db);
    db = NULL;
    o.cipher = MV_CIPHER_AUTO; /* recognised from the header */
    o.flags = 0;
    o.page_size = 0;
    if (mv_db_open(path, PW, strlen(PW), &o, &db, NULL) != MV_OK) {
        goto done;
    }
    struct mv_db_info info;
    tu_expected_digest(60, want);
    ok = tu_table_digest(db, got, &rows) == SQLITE_OK && rows == 60 && strcmp(want, got) == 0 &&
         tu_int(db, "PRAGMA page_size") == c->page_size && mv_db_info(db, &info) == MV_OK &&
         info.cipher == c->cipher &&
         info.kdf_iter == (c->cipher == MV_CIPHER_AES256CBC ? 4001 : TU_KDF_ITER) &&
         tu_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check='ok'") == 1;
    /* Plaintext header bytes: magic absent, page size and reserve present. */
    size_t n;
    uint8_t *bytes = tu_read_file(path, &n);
    ok = ok && bytes != NULL && memcmp(bytes, "SQLite format 3", 15) != 0 &&
         bytes[20] == (c->cipher == MV_CIPHER_CHACHA20    ? 32
                       : c->cipher == MV_CIPHER_SQLCIPHER ? 80
                                                          : 0);
    free(bytes);
done:
    if (!ok) {
        fprintf(stderr, "  round trip failed: %s (rows %lld)\n", name, rows);
    }
    sqlite3_close(db);
    tu_remove_db(path);
    return ok;
}

static void test_round_trip_every_cipher_mode_page_size(void)
{
    static const mv_cipher ciphers[] = {MV_CIPHER_CHACHA20, MV_CIPHER_SQLCIPHER,
                                        MV_CIPHER_AES256CBC};
    static const char *const modes[] = {"delete", "wal", "truncate", "persist"};
    static const int sizes[] = {4096, 8192, 1024, 65536};
    int failures = 0;
    for (size_t i = 0; i < 3; i++) {
        for (size_t j = 0; j < 4; j++) {
            for (size_t k = 0; k < 4; k++) {
                struct rt_case c = {ciphers[i], modes[j], sizes[k]};
                failures += !rt_one(&c);
            }
        }
    }
    CHECK_EQ_INT(failures, 0);
}

static void make_db(const char *path, const char *journal_mode, int rows)
{
    sqlite3 *db = NULL;
    tu_remove_db(path);
    if (tu_open(path, PW, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db) != MV_OK) {
        return;
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA journal_mode=%s", journal_mode);
    tu_exec(db, sql);
    tu_exec(db, "BEGIN");
    tu_fill_table(db, 1, rows);
    tu_exec(db, "COMMIT");
    sqlite3_close(db);
}

static void test_wrong_password_clear_error_and_no_change(void)
{
    char *path = tu_path("wrongpw.db");
    make_db(path, "delete", 20);
    char before[65], after[65];
    tu_file_sha256(path, before);
    sqlite3 *db = NULL;
    char *err = NULL;
    int rc = mv_db_open(path, "not the password", 16, NULL, &db, &err);
    tu_file_sha256(path, after);
    int msg_ok = err != NULL && strstr(err, "wrong password") != NULL;
    sqlite3_free(err);
    CHECK_EQ_INT(rc, MV_EAUTH);
    CHECK(db == NULL);
    CHECK(msg_ok);
    CHECK(strcmp(before, after) == 0);
    CHECK(!tu_file_exists("wrongpw.db-journal"));
    tu_remove_db(path);
}

static void test_missing_file_is_not_created(void)
{
    char *path = tu_path("missing.db");
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db), MV_ENOTFOUND);
    CHECK(!tu_file_exists(path));
}

static void test_plaintext_file_with_key_refused(void)
{
    char *path = tu_path("plain.db");
    sqlite3 *plain = NULL;
    CHECK(sqlite3_open(path, &plain) == SQLITE_OK);
    tu_exec(plain, "CREATE TABLE x(a); INSERT INTO x VALUES(1)");
    sqlite3_close(plain);
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db), MV_EUNSUPPORTED);
    tu_remove_db(path);
}

/* Flips one bit in page pgno (inside the ciphertext) and expects the named error. */
static void test_flipped_bit_in_data_page_names_the_page(void)
{
    char *path = tu_path("flip.db");
    make_db(path, "delete", 40);
    long long pages = tu_file_size(path) / 4096;
    CHECK(pages > 5);
    CHECK(tu_flip_bit(path, 4 * 4096 + 100, 3) == 0); /* page 5 */
    char before[65], after[65];
    tu_file_sha256(path, before);
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db), MV_OK);
    int rc = sqlite3_exec(db, "SELECT sum(length(hex(data))) FROM t", NULL, NULL, NULL);
    int code = mv_error_from_sqlite(sqlite3_extended_errcode(db));
    long long ok_rows = tu_int(db, "SELECT count(*) FROM pragma_integrity_check "
                                   "WHERE integrity_check = 'ok'");
    const char *msg = mv_db_vfs_errmsg(db);
    int named = msg != NULL && strstr(msg, "page 5 failed authentication") != NULL;
    sqlite3_close(db);
    tu_file_sha256(path, after);
    CHECK(rc != SQLITE_OK);
    CHECK(ok_rows != 1);
    CHECK_EQ_INT(code, MV_ECORRUPT);
    CHECK(named);
    CHECK(strcmp(before, after) == 0);
    tu_remove_db(path);
}

/* A flipped bit in page 1 past its salt, with the right password: refused as damage
 * (MV_ECORRUPT, "page 1 is damaged"), where it said "wrong password" (MV_EAUTH) because
 * page 1's tag failed. The same file with a wrong password is still MV_EAUTH. A flipped bit
 * in the salt, the key derivation's input, fails every page and cannot be told from a wrong
 * password. The file is never changed. */
static void test_flipped_bit_in_page1_is_refused(void)
{
    char *path = tu_path("flip1.db");
    make_db(path, "delete", 5);
    CHECK(tu_file_size(path) >= 2 * 4096);
    CHECK(tu_flip_bit(path, 2000, 0) == 0);
    char before[65], after[65];
    tu_file_sha256(path, before);
    sqlite3 *db = NULL;
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.kdf_iter = TU_KDF_ITER;
    char *err = NULL;
    CHECK_EQ_INT(mv_db_open(path, PW, strlen(PW), &o, &db, &err), MV_ECORRUPT);
    CHECK(err != NULL && strstr(err, "page 1 is damaged") != NULL);
    sqlite3_free(err);
    CHECK_EQ_INT(tu_open(path, "not the password", MV_CIPHER_AUTO, 0, &db), MV_EAUTH);
    tu_file_sha256(path, after);
    CHECK(strcmp(before, after) == 0);
    make_db(path, "delete", 5);
    CHECK(tu_flip_bit(path, 3, 4) == 0); /* the salt */
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db), MV_EAUTH);
    /* Damaged while a connection is open: a second connection with its key (a store's
     * reader, or a connection replaced after an error) says the same. It said "the shared
     * key does not open this file". */
    make_db(path, "delete", 5);
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db), MV_OK);
    CHECK(tu_flip_bit(path, 2000, 0) == 0);
    sqlite3 *second = NULL;
    err = NULL;
    CHECK_EQ_INT(mv_db_reopen(db, &second, &err), MV_ECORRUPT);
    CHECK(err != NULL && strstr(err, "page 1 is damaged") != NULL);
    sqlite3_free(err);
    sqlite3_close(second);
    sqlite3_close(db);
    tu_remove_db(path);
}

static void test_truncated_file(void)
{
    char *path = tu_path("trunc.db");
    make_db(path, "delete", 40);
    long long size = tu_file_size(path);
    CHECK(truncate(path, size - 1000) == 0);
    sqlite3 *db = NULL;
    int rc = tu_open(path, PW, MV_CIPHER_AUTO, 0, &db);
    int qrc = rc == MV_OK
                  ? sqlite3_exec(db, "SELECT sum(length(hex(data))) FROM t", NULL, NULL, NULL)
                  : SQLITE_OK;
    const char *msg = rc == MV_OK ? mv_db_vfs_errmsg(db) : NULL;
    int named = msg != NULL && strstr(msg, "truncated") != NULL;
    sqlite3_close(db);
    CHECK(rc != MV_OK || qrc != SQLITE_OK);
    CHECK(rc != MV_OK || named);
    /* Cut inside page 1: nothing usable, a clear refusal. */
    CHECK(truncate(path, 1000) == 0);
    db = NULL;
    rc = tu_open(path, PW, MV_CIPHER_AUTO, 0, &db);
    CHECK(rc == MV_ECORRUPT || rc == MV_EAUTH);
    CHECK(truncate(path, 10) == 0);
    rc = tu_open(path, PW, MV_CIPHER_AUTO, 0, &db);
    CHECK(rc == MV_ECORRUPT || rc == MV_EAUTH);
    tu_remove_db(path);
}

/* The stock way: sqlite3_open_v2 on the VFS, then PRAGMA cipher and key. */
static void test_pragma_keying(void)
{
    char *path = tu_path("pragma.db");
    sqlite3 *db = NULL;
    CHECK(mv_vfs_register(NULL, 0) == MV_OK);
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, MV_VFS_NAME) ==
          SQLITE_OK);
    CHECK(tu_exec(db, "PRAGMA cipher='sqlcipher'; PRAGMA kdf_iter=2000; PRAGMA key='pragma pw';"
                      "CREATE TABLE a(x); INSERT INTO a VALUES('hello');") == SQLITE_OK);
    CHECK(tu_exec(db, "PRAGMA rekey='other'") != SQLITE_OK);
    sqlite3_close(db);
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, MV_VFS_NAME) == SQLITE_OK);
    CHECK(tu_exec(db, "PRAGMA kdf_iter=2000; PRAGMA key='pragma pw'") == SQLITE_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM a WHERE x='hello'"), 1);
    sqlite3_close(db);
    /* A wrong key: PRAGMA key itself fails with the clear message; a retry works. */
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, MV_VFS_NAME) == SQLITE_OK);
    char *err = NULL;
    int rc = sqlite3_exec(db, "PRAGMA kdf_iter=2000; PRAGMA key='wrong'", NULL, NULL, &err);
    int msg_ok = err != NULL && strstr(err, "wrong password") != NULL;
    sqlite3_free(err);
    CHECK(rc != SQLITE_OK && msg_ok);
    CHECK(sqlite3_exec(db, "SELECT * FROM a", NULL, NULL, NULL) == SQLITE_NOTADB);
    sqlite3_close(db);
    /* URI parameters. */
    char uri[1200];
    snprintf(uri, sizeof uri, "file:%s?cipher=sqlcipher&kdf_iter=2000&key=pragma%%20pw", path);
    CHECK(sqlite3_open_v2(uri, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI, MV_VFS_NAME) ==
          SQLITE_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM a"), 1);
    sqlite3_close(db);
    tu_remove_db(path);
}

/* One KDF limit, MV_KDF_ITER_MAX, in every layer (issue 15.7: 20000000 passed the CLI and the
 * PRAGMA, then failed in the crypto layer as "invalid key"): above it, mv_db_open and PRAGMA
 * kdf_iter refuse with a message naming the limit; at it, the value is accepted (the KDF
 * is not run: a PRAGMA sets it before the key). */
static void test_kdf_iter_limit(void)
{
    char *path = tu_path("kdf_limit.db");
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.flags = MV_DB_CREATE;
    o.kdf_iter = MV_KDF_ITER_MAX + 1;
    sqlite3 *db = NULL;
    char *err = NULL;
    CHECK_EQ_INT(mv_db_open(path, "pw", 2, &o, &db, &err), MV_EINVAL);
    CHECK(db == NULL && err != NULL && strstr(err, "kdf_iter 16777217 is above the limit") != NULL);
    if (err != NULL) {
        printf("  # mv_db_open: %s\n", err);
    }
    sqlite3_free(err);
    CHECK(!tu_file_exists(path));
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, MV_VFS_NAME) ==
          SQLITE_OK);
    err = NULL;
    CHECK(sqlite3_exec(db, "PRAGMA kdf_iter=16777217", NULL, NULL, &err) != SQLITE_OK);
    CHECK(err != NULL && strstr(err, "1..16777216") != NULL);
    sqlite3_free(err);
    CHECK(tu_exec(db, "PRAGMA kdf_iter=16777216") == SQLITE_OK);
    CHECK_EQ_INT(tu_int(db, "PRAGMA kdf_iter"), 16777216);
    sqlite3_close(db);
    tu_remove_db(path);
}

/* Raw keys: x'<64 hex>' and x'<96 hex>' (key + salt). */
static void test_raw_keys(void)
{
    char *path = tu_path("raw.db");
    const char *k64 = "x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'";
    const char *k96 = "x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
                      "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf'";
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, k96, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    CHECK(tu_exec(db, "CREATE TABLE a(x); INSERT INTO a VALUES(42)") == SQLITE_OK);
    sqlite3_close(db);
    size_t n;
    uint8_t *bytes = tu_read_file(path, &n);
    CHECK(bytes != NULL && n >= 16);
    static const uint8_t salt[16] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
                                     0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf};
    int salt_ok = memcmp(bytes, salt, 16) == 0;
    free(bytes);
    CHECK(salt_ok);
    CHECK_EQ_INT(tu_open(path, k64, MV_CIPHER_AUTO, 0, &db), MV_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT x FROM a"), 42);
    sqlite3_close(db);
    CHECK_EQ_INT(tu_open(path, "x'00'", MV_CIPHER_AUTO, 0, &db), MV_EAUTH);
    tu_remove_db(path);
}

/* A copy taken while a connection is still open: committed WAL frames never checkpointed,
 * or (hot_journal) a rollback journal with uncommitted pages spilled into the database. */
static void make_snapshot(const char *snap, int hot_journal)
{
    char *path = tu_path("snap-src.db");
    sqlite3 *db = NULL;
    tu_remove_db(path);
    tu_remove_db(snap);
    if (tu_open(path, PW, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db) != MV_OK) {
        return;
    }
    tu_exec(db, hot_journal ? "PRAGMA journal_mode=DELETE"
                            : "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0");
    for (int i = 0; i < 5; i++) {
        tu_exec(db, "BEGIN");
        tu_fill_table(db, 1 + 10 * i, 10);
        tu_exec(db, "COMMIT");
    }
    if (hot_journal) {
        tu_exec(db, "PRAGMA cache_size=2; BEGIN; UPDATE t SET name='uncommitted' WHERE id<9");
        tu_fill_table(db, 500, 10);
    }
    tu_copy_db(path, snap);
    sqlite3_close(db);
    tu_remove_db(path);
}

static void test_flipped_bit_in_wal_frame(void)
{
    char *snap = tu_path("walflip.db"), wal[1100];
    make_snapshot(snap, 0);
    snprintf(wal, sizeof wal, "%s-wal", snap);
    long long frames = (tu_file_size(wal) - 32) / (4096 + 24);
    CHECK(frames >= 6);
    CHECK(tu_flip_bit(wal, 32 + 2 * (4096 + 24) + 24 + 1000, 5) == 0); /* frame 3's page */
    char db_before[65], db_after[65], wal_before[65], wal_after[65];
    tu_file_sha256(snap, db_before);
    tu_file_sha256(wal, wal_before);
    sqlite3 *db = NULL;
    char *err = NULL;
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.kdf_iter = TU_KDF_ITER;
    int rc = mv_db_open(snap, PW, strlen(PW), &o, &db, &err);
    int named = err != NULL && strstr(err, "WAL frame 3") != NULL;
    sqlite3_free(err);
    sqlite3_close(db);
    tu_file_sha256(snap, db_after);
    tu_file_sha256(wal, wal_after);
    CHECK_EQ_INT(rc, MV_ECORRUPT);
    CHECK(named);
    CHECK(strcmp(db_before, db_after) == 0);
    CHECK(strcmp(wal_before, wal_after) == 0);
    tu_remove_db(snap);
}

/* Opens snap with the test password: the code, and the rows and digest of table t (-1 rows
 * if the open failed, -2 if the table could not be read); *err gets the open's message. */
static int open_digest(const char *snap, long long *rows, char digest[65], char **err)
{
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.kdf_iter = TU_KDF_ITER;
    sqlite3 *db = NULL;
    *rows = -1;
    int rc = mv_db_open(snap, PW, strlen(PW), &o, &db, err);
    if (rc == MV_OK && tu_table_digest(db, digest, rows) != 0) {
        *rows = -2;
    }
    sqlite3_close(db);
    return rc;
}

/* A flipped bit in each of the WAL header's 32 bytes in turn, its frames committed and not
 * checkpointed. SQLite's recovery took such a WAL as empty: the open succeeded without the
 * table the WAL created (all 50 committed rows gone), and the next write would have
 * restarted the WAL over them. Now the header is rebuilt from the frames in memory: every
 * row is read, the open writes neither file, and the close's checkpoint puts the rows into
 * the database. With a frame's checksum damaged as well (more than the header), no header
 * carries the frames: the open fails (MV_ECORRUPT, naming the WAL's header) and writes
 * nothing. */
static void test_flipped_bit_in_wal_header(void)
{
    char snap[1024], wal[1100], want[65], digest[65];
    snprintf(snap, sizeof snap, "%s", tu_path("walhdr.db")); /* tu_path() reuses buffers */
    snprintf(wal, sizeof wal, "%s-wal", snap);
    tu_expected_digest(50, want);
    for (int byte = 0; byte < 33; byte++) {
        make_snapshot(snap, 0);
        CHECK(tu_file_size(wal) > 32 + 2 * (4096 + 24));
        CHECK(tu_flip_bit(wal, byte % 32, byte % 8) == 0);
        if (byte == 32) { /* and frame 2's stored checksum */
            CHECK(tu_flip_bit(wal, 32 + (4096 + 24) + 16, 1) == 0);
        }
        char db_before[65], db_after[65], wal_before[65], wal_after[65];
        tu_file_sha256(snap, db_before);
        tu_file_sha256(wal, wal_before);
        sqlite3 *db = NULL;
        struct mv_db_options o = MV_DB_OPTIONS_INIT;
        o.kdf_iter = TU_KDF_ITER;
        char *err = NULL;
        int rc = mv_db_open(snap, PW, strlen(PW), &o, &db, &err);
        long long rows = -1;
        if (rc == MV_OK && tu_table_digest(db, digest, &rows) != 0) {
            rows = -2;
        }
        tu_file_sha256(snap, db_after);
        tu_file_sha256(wal, wal_after);
        sqlite3_close(db);
        CHECK(strcmp(db_before, db_after) == 0);
        CHECK(strcmp(wal_before, wal_after) == 0);
        if (byte < 32) {
            if (rc != MV_OK || rows != 50) {
                fprintf(stderr, "  WAL header byte %d flipped: %s, %lld rows: %s\n", byte,
                        mv_strerror(rc), rows, err != NULL ? err : "");
            }
            CHECK_EQ_INT(rc, MV_OK);
            CHECK_EQ_INT(rows, 50);
            CHECK(rows != 50 || strcmp(digest, want) == 0);
            sqlite3_free(err);
            err = NULL;
            CHECK_EQ_INT(open_digest(snap, &rows, digest, &err), MV_OK); /* after the close */
            CHECK_EQ_INT(rows, 50);
            CHECK(tu_file_size(wal) <= 0); /* checkpointed into the database and removed */
        } else {
            CHECK_EQ_INT(rc, MV_ECORRUPT);
            CHECK(err != NULL && strstr(err, "WAL's header is damaged") != NULL);
        }
        sqlite3_free(err);
    }
    tu_remove_db(snap);
}

/* The same damage to a WAL whose frames are all checkpointed (a restart's header torn, as
 * after a crash, looks the same to recovery): nothing is lost by ignoring the WAL, so the
 * store opens with every row. */
static void test_damaged_wal_header_after_checkpoint(void)
{
    char path[1024], snap[1024], wal[1100];
    snprintf(path, sizeof path, "%s", tu_path("walckpt-src.db")); /* tu_path() reuses buffers */
    snprintf(snap, sizeof snap, "%s", tu_path("walckpt.db"));
    sqlite3 *db = NULL;
    tu_remove_db(path);
    tu_remove_db(snap);
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    tu_exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0");
    tu_fill_table(db, 1, 50);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA wal_checkpoint(PASSIVE)"), SQLITE_OK);
    tu_copy_db(path, snap);
    sqlite3_close(db);
    snprintf(wal, sizeof wal, "%s-wal", snap);
    CHECK(tu_file_size(wal) > 32 + 4096);
    CHECK(tu_flip_bit(wal, 17, 2) == 0); /* a salt */
    CHECK_EQ_INT(tu_open(snap, PW, MV_CIPHER_AUTO, 0, &db), MV_OK);
    long long rows = 0;
    char digest[65], want[65];
    CHECK_EQ_INT(tu_table_digest(db, digest, &rows), 0);
    tu_expected_digest(50, want);
    CHECK_EQ_INT(rows, 50);
    CHECK(strcmp(digest, want) == 0);
    sqlite3_close(db);
    tu_remove_db(path);
    tu_remove_db(snap);
}

static void test_flipped_bit_in_journal_record(void)
{
    char *snap = tu_path("jflip.db"), journal[1100];
    make_snapshot(snap, 1);
    snprintf(journal, sizeof journal, "%s-journal", snap);
    size_t n = 0;
    uint8_t *bytes = tu_read_file(journal, &n);
    CHECK(bytes != NULL && n > 4096);
    long long sector =
        ((long long)bytes[20] << 24) | (bytes[21] << 16) | (bytes[22] << 8) | bytes[23];
    free(bytes);
    CHECK(tu_flip_bit(journal, sector + 4 + 4096 + 8 + 300, 1) == 0); /* record 2's page */
    char db_before[65], db_after[65], j_before[65], j_after[65];
    tu_file_sha256(snap, db_before);
    tu_file_sha256(journal, j_before);
    sqlite3 *db = NULL;
    char *err = NULL;
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.kdf_iter = TU_KDF_ITER;
    int rc = mv_db_open(snap, PW, strlen(PW), &o, &db, &err);
    int named = err != NULL && strstr(err, "rollback journal") != NULL;
    if (!named) {
        fprintf(stderr, "  message: %s\n", err ? err : "(none)");
    }
    sqlite3_free(err);
    sqlite3_close(db);
    tu_file_sha256(snap, db_after);
    tu_file_sha256(journal, j_after);
    CHECK_EQ_INT(rc, MV_ECORRUPT);
    CHECK(named);
    CHECK(strcmp(db_before, db_after) == 0);
    CHECK(strcmp(j_before, j_after) == 0);
    tu_remove_db(snap);
}

/* The intact snapshots recover: every committed row, nothing uncommitted. */
static void test_snapshots_recover(void)
{
    for (int hot = 0; hot <= 1; hot++) {
        char *snap = tu_path("recover.db"), want[65], got[65];
        make_snapshot(snap, hot);
        sqlite3 *db = NULL;
        long long rows = 0;
        CHECK_EQ_INT(tu_open(snap, PW, MV_CIPHER_AUTO, 0, &db), MV_OK);
        tu_expected_digest(50, want);
        int rc = tu_table_digest(db, got, &rows);
        sqlite3_close(db);
        CHECK(rc == SQLITE_OK);
        CHECK_EQ_INT(rows, 50);
        CHECK(strcmp(want, got) == 0);
        tu_remove_db(snap);
    }
}

/* A new file is keyed from the start: page 1 exists, so another password is refused. */
static void test_new_file_is_keyed_at_once(void)
{
    char *path = tu_path("fresh.db");
    sqlite3 *db = NULL;
    tu_remove_db(path);
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_AUTO, MV_DB_CREATE, &db), MV_OK);
    sqlite3_close(db);
    CHECK(tu_file_size(path) > 0);
    CHECK_EQ_INT(tu_open(path, "another password", MV_CIPHER_AUTO, 0, &db), MV_EAUTH);
    tu_remove_db(path);
}

/* An encrypted file opened with no key at all: its hot journal is neither rolled back
 * with the wrong bytes nor deleted, and nothing is written. */
static void test_no_key_leaves_hot_journal_alone(void)
{
    char *snap = tu_path("nokey.db"), journal[1100];
    make_snapshot(snap, 1);
    snprintf(journal, sizeof journal, "%s-journal", snap);
    char db_before[65], db_after[65], j_before[65], j_after[65];
    tu_file_sha256(snap, db_before);
    tu_file_sha256(journal, j_before);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open_v2(snap, &db, SQLITE_OPEN_READWRITE, MV_VFS_NAME) == SQLITE_OK);
    int rc = sqlite3_exec(db, "SELECT count(*) FROM t", NULL, NULL, NULL);
    int wrc = sqlite3_exec(db, "CREATE TABLE x(a)", NULL, NULL, NULL);
    sqlite3_close(db);
    tu_file_sha256(snap, db_after);
    tu_file_sha256(journal, j_after);
    CHECK_EQ_INT(rc, SQLITE_NOTADB);
    CHECK(wrc != SQLITE_OK);
    CHECK(strcmp(db_before, db_after) == 0);
    CHECK(strcmp(j_before, j_after) == 0);
    tu_remove_db(snap);
}

/* Header fields of a hot journal are plain; forging them must not truncate the database. */
static int forged_journal_refused(int field_offset, uint32_t value)
{
    char *snap = tu_path("forged.db"), journal[1100];
    make_snapshot(snap, 1);
    snprintf(journal, sizeof journal, "%s-journal", snap);
    size_t n = 0;
    uint8_t *bytes = tu_read_file(journal, &n);
    if (bytes == NULL || n < 28) {
        free(bytes);
        return 0;
    }
    bytes[field_offset] = (uint8_t)(value >> 24);
    bytes[field_offset + 1] = (uint8_t)(value >> 16);
    bytes[field_offset + 2] = (uint8_t)(value >> 8);
    bytes[field_offset + 3] = (uint8_t)value;
    tu_write_file(journal, bytes, n);
    free(bytes);
    char db_before[65], db_after[65], j_before[65], j_after[65];
    tu_file_sha256(snap, db_before);
    tu_file_sha256(journal, j_before);
    sqlite3 *db = NULL;
    int rc = tu_open(snap, PW, MV_CIPHER_AUTO, 0, &db);
    sqlite3_close(db);
    tu_file_sha256(snap, db_after);
    tu_file_sha256(journal, j_after);
    tu_remove_db(snap);
    return rc == MV_ECORRUPT && strcmp(db_before, db_after) == 0 && strcmp(j_before, j_after) == 0;
}

static void test_forged_journal_header(void)
{
    CHECK(forged_journal_refused(8, 0));    /* no records: would truncate to the old size */
    CHECK(forged_journal_refused(16, 1));   /* original size shrunk to one page */
    CHECK(forged_journal_refused(24, 512)); /* another page size */
}

/* A crash inside the very first transaction of a new file leaves a hot journal that saved
 * no page and empties the file on rollback: genuine, so it must be accepted. */
static void test_first_transaction_hot_journal_rolls_back(void)
{
    char *path = tu_path("first.db"), *snap = tu_path("first-snap.db");
    tu_remove_db(path);
    tu_remove_db(snap);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, MV_VFS_NAME) ==
          SQLITE_OK);
    CHECK(tu_exec(db,
                  "PRAGMA kdf_iter=1000; PRAGMA key='first pw'; PRAGMA cache_size=2;"
                  "BEGIN; CREATE TABLE a(x); INSERT INTO a VALUES(zeroblob(60000))") == SQLITE_OK);
    CHECK(tu_copy_db(path, snap) == 0);
    sqlite3_close(db);
    char journal[1100];
    snprintf(journal, sizeof journal, "%s-journal", snap);
    CHECK(tu_file_size(journal) > 0 && tu_file_size(snap) > 4096);
    CHECK(sqlite3_open_v2(snap, &db, SQLITE_OPEN_READWRITE, MV_VFS_NAME) == SQLITE_OK);
    int rc = tu_exec(db, "PRAGMA kdf_iter=1000; PRAGMA key='first pw'");
    long long tables = tu_int(db, "SELECT count(*) FROM sqlite_schema");
    sqlite3_close(db);
    CHECK(rc == SQLITE_OK);
    CHECK_EQ_INT(tables, 0);
    tu_remove_db(path);
    tu_remove_db(snap);
}

int main(void)
{
    TEST(test_round_trip_every_cipher_mode_page_size);
    TEST(test_wrong_password_clear_error_and_no_change);
    TEST(test_missing_file_is_not_created);
    TEST(test_plaintext_file_with_key_refused);
    TEST(test_flipped_bit_in_data_page_names_the_page);
    TEST(test_flipped_bit_in_page1_is_refused);
    TEST(test_truncated_file);
    TEST(test_pragma_keying);
    TEST(test_raw_keys);
    TEST(test_kdf_iter_limit);
    TEST(test_flipped_bit_in_wal_frame);
    TEST(test_flipped_bit_in_wal_header);
    TEST(test_damaged_wal_header_after_checkpoint);
    TEST(test_flipped_bit_in_journal_record);
    TEST(test_snapshots_recover);
    TEST(test_new_file_is_keyed_at_once);
    TEST(test_no_key_leaves_hot_journal_alone);
    TEST(test_forged_journal_header);
    TEST(test_first_transaction_hot_journal_rolls_back);
    return th_summary();
}
