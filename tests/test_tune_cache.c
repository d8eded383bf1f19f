/*
 * test_tune_cache.c -- mv_server_tune's page cache wrapper (store_tune.c) against SQLite's
 * page cache contract, on plain SQLite files: interior B-tree pages it holds pinned never
 * make SQLite do what a plain cache would not have made it do.
 *
 * Each test runs in this process after mv_server_tune() (called first in main), so every
 * connection's cache is the wrapper's. The last one checks mv_server_tune's statement
 * journal setting.
 */
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

static int tc_tune = MV_ERROR;

/* A file whose index has ~37 interior pages (400-byte keys), all held by the wrapper after a
 * pass over every key through a cache of cache_pages pages. */
static sqlite3 *tc_open_held(const char *name, int cache_pages)
{
    char *path = tu_path(name);
    remove(path);
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        return NULL;
    }
    char sql[800];
    snprintf(sql, sizeof sql,
             "PRAGMA cache_size = %d; PRAGMA journal_mode = WAL; "
             "CREATE TABLE t(id INTEGER PRIMARY KEY, k BLOB); CREATE INDEX t_k ON t(k); "
             "CREATE TABLE w(id INTEGER PRIMARY KEY, v BLOB); "
             "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2400) "
             "INSERT INTO t(k) SELECT CAST(printf('%%08d%%0392d', i, 0) AS BLOB) FROM n",
             cache_pages);
    if (tu_exec(db, sql) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL;
    }
    /* every interior page read once, then let go of: held */
    sqlite3_stmt *st = NULL;
    sqlite3_prepare_v2(db, "SELECT 1 FROM t WHERE k = CAST(printf('%08d%0392d', ?, 0) AS BLOB)", -1,
                       &st, NULL);
    for (int i = 1; st != NULL && i <= 2400; i += 7) {
        sqlite3_bind_int(st, 1, i);
        (void)sqlite3_step(st);
        sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    return db;
}

/* A write transaction that makes fewer dirty pages than 90% of the cache never spills one to
 * the WAL before its commit with SQLite's own cache (pcache1 refuses a new page only when 90%
 * of the cache is pinned). Held pages are pinned in pcache1 too: while the wrapper held
 * them, a transaction of 50 dirty pages in a cache of 80 with ~37 held spilled. */
static void test_held_pages_make_room(void)
{
    CHECK_EQ_INT(tc_tune, MV_OK);
    sqlite3 *db = tc_open_held("room.db", 80);
    CHECK(db != NULL);
    int cur = 0, high = 0;
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_SPILL, &cur, &high, 1);
    /* ~50 overflow pages, all dirty until the commit */
    CHECK_EQ_INT(tu_exec(db, "BEGIN; INSERT INTO w(v) VALUES (zeroblob(50 * 4000))"), SQLITE_OK);
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_SPILL, &cur, &high, 0);
    CHECK_EQ_INT(tu_exec(db, "COMMIT"), SQLITE_OK);
    printf("  # %d pages spilled\n", cur);
    CHECK_EQ_INT(cur, 0);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE "
                            "integrity_check != 'ok'"),
                 0);
    sqlite3_close(db);
}

/* The bytes of the pages the cache holds (SQLite's count for the connection). */
static long long tc_cache_used(sqlite3 *db)
{
    int cur = 0, high = 0;
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_USED, &cur, &high, 0);
    return cur;
}

/* Held pages go when the cache is made smaller (at most half of it stays held) and when
 * SQLite is asked to give memory back (PRAGMA shrink_memory): pcache1 itself can let go
 * only of pages nobody pins, and it sees the held ones as pinned. */
static void test_held_pages_let_go(void)
{
    CHECK_EQ_INT(tc_tune, MV_OK);
    sqlite3 *db = tc_open_held("letgo.db", 80);
    CHECK(db != NULL);
    long long full = tc_cache_used(db);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA cache_size = 10"), SQLITE_OK);
    long long cut = tc_cache_used(db);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA cache_size = 80"), SQLITE_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM t WHERE k > x'00'"), 2400); /* held again */
    long long again = tc_cache_used(db);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA shrink_memory"), SQLITE_OK);
    long long shrunk = tc_cache_used(db);
    printf("  # cache bytes: %lld, cut to 10 pages %lld, again %lld, shrunk %lld\n", full, cut,
           again, shrunk);
    CHECK(cut * 4 < full);     /* 10 pages of 80; ~37 held pages stayed before */
    CHECK(shrunk * 8 < again); /* none left but what SQLite holds */
    sqlite3_close(db);
}

/* The list of held pages in every order SQLite gives: lookups spread over the keys (pages
 * held, found again, let go of oldest first), a writer's changes under the held pages (the
 * cache truncated), cache sizes that cut and grow the list.
 * Every lookup finds its row and the file stays sound. */
static void test_held_pages_any_order(void)
{
    CHECK_EQ_INT(tc_tune, MV_OK);
    sqlite3 *db = tc_open_held("order.db", 80);
    CHECK(db != NULL);
    sqlite3 *writer = NULL;
    CHECK_EQ_INT(sqlite3_open(tu_path("order.db"), &writer), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    CHECK_EQ_INT(sqlite3_prepare_v2(db,
                                    "SELECT count(*) FROM t WHERE k = "
                                    "CAST(printf('%08d%0392d', ?, 0) AS BLOB)",
                                    -1, &st, NULL),
                 SQLITE_OK);
    static const int sizes[] = {80, 7, 200, 2, 0, 1000, 80};
    int found = 0, lookups = 0;
    for (int round = 0; round < 7; round++) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA cache_size = %d", sizes[round]);
        CHECK_EQ_INT(tu_exec(db, sql), SQLITE_OK);
        for (int j = 0; j < 600; j++) {
            sqlite3_bind_int(st, 1, (j * 131 + round * 17) % 2400 + 1);
            CHECK_EQ_INT(sqlite3_step(st), SQLITE_ROW);
            found += sqlite3_column_int(st, 0);
            lookups++;
            sqlite3_reset(st);
        }
        if (round % 2 == 1) { /* the reader's cache is dropped at its next read */
            CHECK_EQ_INT(tu_exec(writer, "INSERT INTO w(v) VALUES (zeroblob(3000))"), SQLITE_OK);
        }
    }
    CHECK_EQ_INT(found, lookups);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE "
                            "integrity_check != 'ok'"),
                 0);
    sqlite3_finalize(st);
    sqlite3_close(writer);
    sqlite3_close(db);
}

/* The sub-journals SQLite opens as files, counted by a VFS around the default one. */
static sqlite3_vfs tc_count_vfs;
static sqlite3_vfs *tc_count_inner;
static int tc_subjournal_files;

static int tc_count_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)vfs;
    if (flags & SQLITE_OPEN_SUBJOURNAL) {
        tc_subjournal_files++;
    }
    return tc_count_inner->xOpen(tc_count_inner, name, f, flags, out);
}

/* A statement journal of ~105 KiB (more than SQLite's 64 KiB, less than mv_server_tune's
 * 128 KiB) stays in memory: no file is opened for it. One of ~1 MiB still gets its file, and
 * SQLite writes it there (with 256 KiB its spill failed on this plain file: SQLITE_FULL);
 * the count sees it. Fails without the setting (the first UPDATE opens a file). */
static void test_statement_journal_in_memory(void)
{
    CHECK_EQ_INT(tc_tune, MV_OK);
    if (tc_count_inner == NULL) {
        tc_count_inner = sqlite3_vfs_find(NULL);
        CHECK(tc_count_inner != NULL);
        tc_count_vfs = *tc_count_inner;
        tc_count_vfs.zName = "tc_count";
        tc_count_vfs.xOpen = tc_count_open;
        CHECK_EQ_INT(sqlite3_vfs_register(&tc_count_vfs, 0), SQLITE_OK);
    }
    char *path = tu_path("stmt_journal.db");
    remove(path);
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "tc_count"),
                 SQLITE_OK);
    /* temp_store=FILE as a store has it; NOT NULL makes the multi-row UPDATE one that may
     * fail halfway, so it journals every page the transaction had already changed */
    const char *setup = "PRAGMA page_size = 4096; PRAGMA temp_store = FILE; "
                        "CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB NOT NULL); BEGIN; "
                        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                        "WHERE i < 100) INSERT INTO t(v) "
                        "SELECT CAST(printf('%01000d', i) AS BLOB) FROM n";
    const char *small = "UPDATE t SET v = CAST(printf('%01000d', id + 1) AS BLOB)";
    const char *large = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                        "WHERE i < 1000) INSERT INTO t(v) "
                        "SELECT CAST(printf('%01000d', i) AS BLOB) FROM n; "
                        "UPDATE t SET v = CAST(printf('%01000d', id + 2) AS BLOB)";
    const char *check = "SELECT count(*) FROM t WHERE v = CAST(printf('%01000d', id + 2) AS BLOB)";
    CHECK_EQ_INT(tu_exec(db, setup), SQLITE_OK);
    tc_subjournal_files = 0;
    CHECK_EQ_INT(tu_exec(db, small), SQLITE_OK);
    CHECK_EQ_INT(tc_subjournal_files, 0);
    CHECK_EQ_INT(tu_exec(db, large), SQLITE_OK);
    CHECK_EQ_INT(tc_subjournal_files, 1);
    CHECK_EQ_INT(tu_exec(db, "COMMIT"), SQLITE_OK);
    CHECK_EQ_INT(tu_int(db, check), 1100);
    sqlite3_close(db);
}

int main(void)
{
    tc_tune = mv_server_tune();
    TEST(test_held_pages_make_room);
    TEST(test_held_pages_let_go);
    TEST(test_held_pages_any_order);
    TEST(test_statement_journal_in_memory);
    return th_summary();
}
