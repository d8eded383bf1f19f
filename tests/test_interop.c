/*
 * test_interop.c -- byte compatibility with SQLite3 Multiple Ciphers, both ways.
 *
 *   1. Every vector in tests/vectors/mc (written by better-sqlite3-multiple-ciphers 12.11.1
 *      with scripts/make-vectors.sh): every cipher, rollback and WAL, un-checkpointed WAL
 *      frames, hot journals, page sizes 4096 and 8192, overflow pages, non-ASCII passwords,
 *      raw keys. Each must open with the recorded key and give the recorded rows and
 *      digest; a wrong key must change no byte of the file or its journal.
 *   2. The independent vectors in ../shared/testvectors/sqlite3mc, when present.
 *   3. Live, when the reference is installed (scripts/install-reference.sh; required when
 *      MV_INTEROP_LIVE=1, as in CI): files mailvault writes in every cipher, clean, with
 *      un-checkpointed WAL frames and with a hot journal, are read by the reference.
 */
#include "harness.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MANIFEST "tests/vectors/mc/manifest.tsv"

struct vector {
    char file[128], extra[256], cipher[32], key[256], journal_mode[16], kind[16], digest[65];
    int legacy, page_size, rows;
};

static int parse_vector(char *line, struct vector *v)
{
    char *fields[10];
    int n = 0;
    for (char *tok = strtok(line, "\t\n"); tok != NULL && n < 10; tok = strtok(NULL, "\t\n")) {
        fields[n++] = tok;
    }
    if (n != 10) {
        return -1;
    }
    snprintf(v->file, sizeof v->file, "%s", fields[0]);
    snprintf(v->extra, sizeof v->extra, "%s", fields[1]);
    snprintf(v->cipher, sizeof v->cipher, "%s", fields[2]);
    v->legacy = atoi(fields[3]);
    snprintf(v->key, sizeof v->key, "%s", fields[4]);
    v->page_size = atoi(fields[5]);
    snprintf(v->journal_mode, sizeof v->journal_mode, "%s", fields[6]);
    snprintf(v->kind, sizeof v->kind, "%s", fields[7]);
    v->rows = atoi(fields[8]);
    snprintf(v->digest, sizeof v->digest, "%s", fields[9]);
    return 0;
}

static int open_vector(const char *path, const struct vector *v, const char *key, sqlite3 **db)
{
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    if (mv_cipher_from_name(v->cipher, &o.cipher) != MV_OK) {
        return MV_EINVAL;
    }
    o.legacy = v->legacy;
    char *err = NULL;
    int rc = mv_db_open(path, key, strlen(key), &o, db, &err);
    if (rc != MV_OK && strcmp(key, v->key) == 0) {
        fprintf(stderr, "  %s: %s\n", v->file, err ? err : mv_strerror(rc));
    }
    sqlite3_free(err);
    return rc;
}

/* Opens a copy of the vector and compares rows and digest; 1 if all is well. */
static int check_vector(const struct vector *v)
{
    char src[512], *dst = tu_path("vec.db");
    snprintf(src, sizeof src, "tests/vectors/mc/%s", v->file);
    tu_remove_db(dst);
    if (tu_copy_db(src, dst) != 0) {
        fprintf(stderr, "  %s: cannot copy\n", v->file);
        return 0;
    }
    sqlite3 *db = NULL;
    if (open_vector(dst, v, v->key, &db) != MV_OK) {
        return 0;
    }
    char got[65];
    long long rows = -1;
    int ok = tu_table_digest(db, got, &rows) == SQLITE_OK && rows == v->rows &&
             strcmp(got, v->digest) == 0 &&
             tu_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE "
                        "integrity_check='ok'") == 1;
    if (!ok) {
        fprintf(stderr, "  %s: rows %lld (want %d), digest %s\n", v->file, rows, v->rows, got);
    }
    sqlite3_close(db);
    tu_remove_db(dst);
    return ok;
}

/* A wrong key must leave the database and its WAL or journal byte-identical. */
static int check_wrong_key(const struct vector *v)
{
    char src[512], *dst = tu_path("vecw.db"), side[600];
    snprintf(src, sizeof src, "tests/vectors/mc/%s", v->file);
    tu_remove_db(dst);
    if (tu_copy_db(src, dst) != 0) {
        return 0;
    }
    snprintf(side, sizeof side, "%s%s", dst,
             strcmp(v->kind, "hotjournal") == 0 ? "-journal" : "-wal");
    char db_before[65], db_after[65], side_before[65], side_after[65];
    tu_file_sha256(dst, db_before);
    tu_file_sha256(side, side_before);
    sqlite3 *db = NULL;
    int rc = open_vector(dst, v, "definitely-not-the-key", &db);
    sqlite3_close(db);
    tu_file_sha256(dst, db_after);
    tu_file_sha256(side, side_after);
    int ok =
        rc == MV_EAUTH && strcmp(db_before, db_after) == 0 && strcmp(side_before, side_after) == 0;
    if (!ok) {
        fprintf(stderr, "  %s wrong key: rc %d, db %s, side file %s\n", v->file, rc,
                strcmp(db_before, db_after) ? "CHANGED" : "same",
                strcmp(side_before, side_after) ? "CHANGED" : "same");
    }
    tu_remove_db(dst);
    return ok;
}

static void test_reference_vectors(void)
{
    FILE *f = fopen(MANIFEST, "r");
    CHECK(f != NULL);
    char line[2048];
    int count = 0, failures = 0, kinds = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        struct vector v;
        if (parse_vector(line, &v) != 0) {
            failures++;
            continue;
        }
        count++;
        failures += !check_vector(&v);
        if (strcmp(v.kind, "clean") != 0) {
            kinds++;
            failures += !check_wrong_key(&v);
        }
    }
    fclose(f);
    printf("  %d reference vectors, %d with a WAL or hot journal\n", count, kinds);
    CHECK(count >= 20);
    CHECK(kinds >= 8);
    CHECK_EQ_INT(failures, 0);
}

/* ../shared/testvectors/sqlite3mc: an independent second check, when present. */
static void test_shared_vectors(void)
{
    static const char *const names[] = {"chacha20-delete",           "chacha20-wal",
                                        "chacha20-walsnap",          "chacha20-hotjournal",
                                        "aes256cbc-delete",          "aes256cbc-wal",
                                        "aes256cbc-walsnap",         "aes256cbc-hotjournal",
                                        "sqlcipher-delete",          "sqlcipher-wal",
                                        "sqlcipher-walsnap",         "sqlcipher-hotjournal",
                                        "sqlcipher-legacy4-delete",  "sqlcipher-legacy4-wal",
                                        "sqlcipher-legacy4-walsnap", "sqlcipher-legacy4-hotjournal",
                                        "chacha20-rawkey-delete"};
    const char *dir = "../shared/testvectors/sqlite3mc";
    if (access(dir, R_OK) != 0) {
        printf("  skipped: %s not present (it is in CI)\n", dir);
        return;
    }
    int failures = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct vector v = {.legacy = strstr(names[i], "legacy4") ? 4 : 0};
        snprintf(v.file, sizeof v.file, "%s.db", names[i]);
        snprintf(v.cipher, sizeof v.cipher, "%.*s", (int)strcspn(names[i], "-"), names[i]);
        snprintf(v.key, sizeof v.key, "%s",
                 strstr(names[i], "rawkey")
                     ? "x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'"
                     : "fe-testvector-password");
        char src[512], *dst = tu_path("shared.db");
        snprintf(src, sizeof src, "%s/%s", dir, v.file);
        tu_remove_db(dst);
        sqlite3 *db = NULL;
        if (tu_copy_db(src, dst) != 0 || open_vector(dst, &v, v.key, &db) != MV_OK) {
            failures++;
            continue;
        }
        int ok = tu_int(db, "SELECT count(*) FROM messages") == 3 &&
                 tu_int(db, "SELECT count(*) FROM messages WHERE id=3 AND "
                            "subject='Unicode Ünïcödé ✓' AND body='third'") == 1 &&
                 tu_int(db, "SELECT count(*) FROM messages WHERE body LIKE 'CHANGED%'") == 0;
        if (!ok) {
            fprintf(stderr, "  shared vector %s: wrong contents\n", v.file);
        }
        failures += !ok;
        sqlite3_close(db);
        tu_remove_db(dst);
    }
    CHECK_EQ_INT(failures, 0);
}

/* ---- live: the reference reads what mailvault writes ------------------------------------- */

static int reference_available(void)
{
    return access("tools/reference/node_modules/better-sqlite3-multiple-ciphers/package.json",
                  R_OK) == 0;
}

/* Runs mc_dump.js on path; 1 if it reports rows and the expected digest. */
static int
reference_reads(const char *path, const char *cipher, int legacy, const char *key, int rows)
{
    char *key_file = tu_path("ref.key");
    if (tu_write_file(key_file, key, strlen(key)) != 0) {
        return 0;
    }
    char cmd[2048], want[65], line[256];
    snprintf(cmd, sizeof cmd,
             "node tests/interop/mc_dump.js '%s' --cipher %s --legacy %d --key-file '%s' "
             "--copy 2>&1",
             path, cipher, legacy, key_file);
    FILE *p = popen(cmd, "r");
    if (p == NULL) {
        return 0;
    }
    tu_expected_digest(rows, want);
    int rows_ok = 0, digest_ok = 0;
    char expect_rows[32];
    snprintf(expect_rows, sizeof expect_rows, "rows %d\n", rows);
    while (fgets(line, sizeof line, p) != NULL) {
        if (strcmp(line, expect_rows) == 0) {
            rows_ok = 1;
        } else if (strncmp(line, "digest ", 7) == 0 && strncmp(line + 7, want, 64) == 0) {
            digest_ok = 1;
        } else {
            fprintf(stderr, "  reference: %s", line);
        }
    }
    int status = pclose(p);
    unlink(key_file);
    return status == 0 && rows_ok && digest_ok;
}

struct live_case {
    const char *cipher;
    int legacy;
    int page_size;
    const char *kind; /* clean-delete, clean-wal, walsnap, hotjournal */
};

static sqlite3 *live_create(const char *path, const struct live_case *c, const char *key)
{
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    sqlite3 *db = NULL;
    if (mv_cipher_from_name(c->cipher, &o.cipher) != MV_OK) {
        return NULL;
    }
    o.legacy = c->legacy;
    o.page_size = c->page_size;
    o.flags = MV_DB_CREATE;
    tu_remove_db(path);
    if (mv_db_open(path, key, strlen(key), &o, &db, NULL) != MV_OK) {
        return NULL;
    }
    int wal = strcmp(c->kind, "clean-delete") != 0 && strcmp(c->kind, "hotjournal") != 0;
    tu_exec(db, wal ? "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0"
                    : "PRAGMA journal_mode=DELETE");
    return db;
}

/* Writes a database of kind c->kind into snap (a copy taken while still open for walsnap
 * and hotjournal). Returns the number of committed rows, or -1. */
static int live_write(const struct live_case *c, const char *key, const char *snap)
{
    char *path = tu_path("live-src.db");
    sqlite3 *db = live_create(path, c, key);
    if (db == NULL) {
        return -1;
    }
    int rows = 30;
    for (int i = 0; i < 3; i++) {
        tu_exec(db, "BEGIN");
        tu_fill_table(db, 1 + i * 10, 10);
        tu_exec(db, "COMMIT");
    }
    int rc = 0;
    if (strcmp(c->kind, "walsnap") == 0) {
        rc = tu_copy_db(path, snap); /* committed frames, never checkpointed */
    } else if (strcmp(c->kind, "hotjournal") == 0) {
        tu_exec(db, "PRAGMA cache_size=2; BEGIN; UPDATE t SET name='uncommitted' WHERE id<5");
        tu_fill_table(db, 1000, 8); /* spills uncommitted pages into the database */
        rc = tu_copy_db(path, snap);
        tu_exec(db, "ROLLBACK");
    }
    sqlite3_close(db);
    if (strncmp(c->kind, "clean", 5) == 0) {
        rc = tu_copy_db(path, snap);
    }
    /* The copies really hold what they are meant to test. */
    char side[1100];
    snprintf(side, sizeof side, "%s-wal", snap);
    if (strcmp(c->kind, "walsnap") == 0 && tu_file_size(side) <= 32 + c->page_size) {
        fprintf(stderr, "  walsnap copy has no committed frames\n");
        rc = -1;
    }
    snprintf(side, sizeof side, "%s-journal", snap);
    if (strcmp(c->kind, "hotjournal") == 0 &&
        (tu_file_size(side) <= 512 || tu_file_size(snap) <= 4 * c->page_size)) {
        fprintf(stderr, "  hot journal copy has no spilled pages\n");
        rc = -1;
    }
    tu_remove_db(path);
    return rc == 0 ? rows : -1;
}

static void test_live_reference_reads_mailvault_files(void)
{
    static const struct live_case cases[] = {
        {"chacha20", 0, 4096, "clean-delete"},  {"chacha20", 0, 4096, "clean-wal"},
        {"chacha20", 0, 4096, "walsnap"},       {"chacha20", 0, 4096, "hotjournal"},
        {"chacha20", 0, 8192, "walsnap"},       {"chacha20", 0, 8192, "hotjournal"},
        {"sqlcipher", 0, 4096, "clean-delete"}, {"sqlcipher", 0, 4096, "walsnap"},
        {"sqlcipher", 0, 8192, "hotjournal"},   {"sqlcipher", 4, 4096, "clean-delete"},
        {"sqlcipher", 4, 4096, "walsnap"},      {"sqlcipher", 4, 4096, "hotjournal"},
        {"aes256cbc", 0, 4096, "clean-delete"}, {"aes256cbc", 0, 4096, "walsnap"},
        {"aes256cbc", 0, 4096, "hotjournal"},
    };
    if (!reference_available()) {
        printf("  skipped: reference not installed (scripts/install-reference.sh)\n");
        CHECK(getenv("MV_INTEROP_LIVE") == NULL);
        return;
    }
    const char *key = "pässwörd ✓ live-interop";
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct live_case *c = &cases[i];
        char *snap = tu_path("live.db");
        tu_remove_db(snap);
        int rows = live_write(c, key, snap);
        int ok = rows > 0 && reference_reads(snap, c->cipher, c->legacy, key, rows);
        if (!ok) {
            fprintf(stderr, "  live %s legacy=%d %d %s: reference could not read it\n", c->cipher,
                    c->legacy, c->page_size, c->kind);
        }
        failures += !ok;
        tu_remove_db(snap);
    }
    printf("  %zu files written by mailvault read by the reference\n",
           sizeof cases / sizeof cases[0]);
    CHECK_EQ_INT(failures, 0);
}

int main(void)
{
    TEST(test_reference_vectors);
    TEST(test_shared_vectors);
    TEST(test_live_reference_reads_mailvault_files);
    return th_summary();
}
