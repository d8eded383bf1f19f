/*
 * test_wal_io.c -- the I/O the encrypting VFS adds to a WAL database, counted on the
 * fault-injecting VFS under it (never timed), and the correctness of the shortcuts that
 * keep it small.
 *
 * The WAL format (FORMAT.md §5.3) chains every frame's checksum from the previous frame's,
 * over ciphertext. The VFS used to read the previous frame's checksum back from disk for
 * every frame it wrote, and to read a frame's header and its page separately: one system
 * call per frame more than plain SQLite, on writes and on reads. Now a frame's checksum is
 * remembered while the WAL write lock is held, and a page is read with its header.
 * Recovery of a copy of the files (SQLite re-walks the whole chain and drops every frame
 * after a break) proves the chain was right, including the case where another connection
 * overwrote the frame this one remembers.
 */
#include "crypto/crypt.h"
#include "faultvfs.h"
#include "harness.h"
#include "testutil.h"
#include "vfs/sqlite_format.h"
#include "vfs/vfs_hint.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAL_PAGE_SIZE  4096
#define WAL_FRAME_SIZE (WAL_PAGE_SIZE + 24)

static const char *const PW = "wal io";

/* Counts every call of the VFS below mailvault from here on (the plan never fires). */
static void count_start(void)
{
    fv_arm(&(struct fv_plan){FV_ANY, ULONG_MAX, FV_FAIL, 0});
}

static long long wal_frames(const char *path)
{
    char wal[1100];
    snprintf(wal, sizeof wal, "%s-wal", path);
    long long size = tu_file_size(wal);
    return size > 32 ? (size - 32) / WAL_FRAME_SIZE : 0;
}

/* A WAL database with table t and no automatic checkpoint (frames stay in the WAL). */
static int open_wal_db(const char *path, unsigned flags, sqlite3 **db)
{
    if (tu_open(path, PW, MV_CIPHER_CHACHA20, flags, db) != MV_OK) {
        return -1;
    }
    if (tu_exec(*db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0") != SQLITE_OK ||
        tu_exec(*db, "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v INTEGER, "
                     "pad BLOB)") != SQLITE_OK) {
        return -1;
    }
    return 0;
}

/* Opens a copy of path's files (recovery walks the copied WAL) and returns sum(v) and the
 * row count, or -1 if it does not open or is not intact. */
static long long recovered_sum(const char *path, long long *rows)
{
    char *copy = tu_path("recovered.db");
    sqlite3 *db = NULL;
    long long sum = -1;
    tu_remove_db(copy);
    if (tu_copy_db(path, copy) == 0 && tu_open(copy, PW, MV_CIPHER_AUTO, 0, &db) == MV_OK &&
        tu_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE integrity_check='ok'") == 1) {
        sum = tu_int(db, "SELECT total(v) FROM t");
        *rows = tu_int(db, "SELECT count(*) FROM t");
    }
    sqlite3_close(db);
    tu_remove_db(copy);
    return sum;
}

/* Writing a transaction of many frames reads nothing back but the previous frame's checksum
 * once, and writes its frames in batches (vfs_wal.c, BATCHES): one call per 31 frames of
 * 4 KiB pages, the last at the commit frame (plain SQLite: two per frame, header and page;
 * before batches: one per frame). */
static void test_frames_write_without_reading_back(void)
{
    char *path = tu_path("frames.db");
    sqlite3 *db = NULL;
    tu_remove_db(path);
    CHECK(open_wal_db(path, MV_DB_CREATE, &db) == 0);
    CHECK(tu_exec(db, "INSERT INTO t VALUES(1, 1, zeroblob(100))") == SQLITE_OK);
    long long before = wal_frames(path);
    count_start();
    CHECK(tu_exec(db, "BEGIN; WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n "
                      "WHERE i < 41) INSERT INTO t SELECT i, i, randomblob(3000) FROM n; "
                      "COMMIT") == SQLITE_OK);
    unsigned long reads = fv_calls(FV_READ), writes = fv_calls(FV_WRITE);
    fv_disarm();
    long long frames = wal_frames(path) - before;
    CHECK(frames >= 40);
    CHECK_EQ_INT(writes, (frames + 30) / 31);
    CHECK(reads <= 1); /* the seed of the transaction's first frame */

    /* Autocommit: at most one read and one write per transaction, however many frames each
     * writes. */
    before = wal_frames(path);
    count_start();
    for (int i = 0; i < 20; i++) {
        char sql[160];
        snprintf(sql, sizeof sql, "INSERT INTO t VALUES(%d, %d, randomblob(6000))", 100 + i,
                 100 + i);
        CHECK(tu_exec(db, sql) == SQLITE_OK);
    }
    reads = fv_calls(FV_READ);
    writes = fv_calls(FV_WRITE);
    fv_disarm();
    frames = wal_frames(path) - before;
    CHECK(frames >= 40);
    CHECK_EQ_INT(writes, 20);
    CHECK(reads <= 20);

    long long rows = 0, want = tu_int(db, "SELECT total(v) FROM t");
    CHECK_EQ_INT(recovered_sum(path, &rows), want);
    CHECK_EQ_INT(rows, 61);
    sqlite3_close(db);
    tu_remove_db(path);
}

/* A page read from the WAL is one read (frame header and page together), not two. */
static void test_wal_pages_read_once(void)
{
    char *path = tu_path("reads.db");
    sqlite3 *db = NULL, *reader = NULL;
    tu_remove_db(path);
    CHECK(open_wal_db(path, MV_DB_CREATE, &db) == 0);
    CHECK(tu_exec(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE "
                      "i < 60) INSERT INTO t SELECT i, i, randomblob(3000) FROM n") == SQLITE_OK);
    long long pages = tu_int(db, "PRAGMA page_count");
    CHECK(pages >= 60 && wal_frames(path) >= pages);
    CHECK(tu_open(path, PW, MV_CIPHER_AUTO, 0, &reader) == MV_OK);
    CHECK_EQ_INT(tu_int(reader, "SELECT count(*) FROM sqlite_schema"), 1); /* page 1 */
    count_start();
    long long sum = tu_int(reader, "SELECT total(length(pad)) FROM t");
    unsigned long reads = fv_calls(FV_READ);
    fv_disarm();
    CHECK_EQ_INT(sum, 60 * 3000);
    CHECK(reads >= 60);                       /* every page of the table came from disk */
    CHECK(reads <= (unsigned long)pages + 2); /* ... once each (it was 2 per WAL page) */
    sqlite3_close(reader);
    sqlite3_close(db);
    tu_remove_db(path);
}

static int exec_update(sqlite3 *db, int id, int v)
{
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE t SET v = %d WHERE id = %d", v, id);
    return tu_exec(db, sql);
}

/* Connection A writes an uncommitted frame and rolls back; B commits its own frame at the
 * same place; then A appends after it. A must chain from B's frame, not from the one it
 * remembers writing there, or recovery drops A's commit (and everything after it). A's frame
 * is held back in its batch until A lets the write lock go; if it went down any later (at
 * A's next read or write), it would land on B's committed frame. */
static void test_remembered_frame_overwritten_by_another_connection(void)
{
    char *path = tu_path("twoconn.db");
    sqlite3 *a = NULL, *b = NULL;
    tu_remove_db(path);
    CHECK(open_wal_db(path, MV_DB_CREATE, &a) == 0);
    CHECK(tu_exec(a, "INSERT INTO t VALUES(1, 0, NULL), (2, 0, NULL), (3, 0, NULL)") == SQLITE_OK);
    CHECK(open_wal_db(path, 0, &b) == 0);
    CHECK_EQ_INT(tu_int(b, "SELECT count(*) FROM t"), 3);
    long long base = wal_frames(path);

    CHECK(tu_exec(a, "BEGIN") == SQLITE_OK);
    CHECK(exec_update(a, 1, 7) == SQLITE_OK);
    CHECK_EQ_INT(sqlite3_db_cacheflush(a), SQLITE_OK); /* the leaf goes out as a frame */
    CHECK(tu_exec(a, "ROLLBACK") == SQLITE_OK);
    CHECK_EQ_INT(wal_frames(path), base + 1); /* on disk once A's write lock is gone */

    CHECK(exec_update(b, 2, 11) == SQLITE_OK); /* one frame, over A's */
    CHECK_EQ_INT(wal_frames(path), base + 1);
    CHECK(exec_update(a, 3, 13) == SQLITE_OK); /* chains from B's frame */
    /* Both see B's commit and not A's rolled-back change: 0 + 11 + 13. */
    CHECK_EQ_INT(tu_int(a, "SELECT total(v) FROM t"), 24);
    CHECK_EQ_INT(tu_int(b, "SELECT total(v) FROM t"), 24);
    CHECK(exec_update(b, 1, 17) == SQLITE_OK);
    CHECK(exec_update(a, 2, 19) == SQLITE_OK);
    CHECK_EQ_INT(wal_frames(path), base + 4);

    long long rows = 0;
    CHECK_EQ_INT(recovered_sum(path, &rows), 17 + 19 + 13);
    CHECK_EQ_INT(rows, 3);
    sqlite3_close(b);
    sqlite3_close(a);
    tu_remove_db(path);
}

/* Exclusive locking mode (no shared-memory locks at all) keeps the chain right across
 * transactions and rollbacks. */
static void test_exclusive_mode_chain(void)
{
    char *path = tu_path("exclusive.db");
    sqlite3 *db = NULL;
    tu_remove_db(path);
    CHECK(tu_open(path, PW, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db) == MV_OK);
    CHECK(tu_exec(db, "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; "
                      "PRAGMA wal_autocheckpoint=0; "
                      "CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER, pad BLOB); "
                      "INSERT INTO t VALUES(1, 1, NULL), (2, 2, NULL)") == SQLITE_OK);
    for (int round = 0; round < 3; round++) {
        CHECK(tu_exec(db, "BEGIN; UPDATE t SET v = v + 100 WHERE id = 1") == SQLITE_OK);
        CHECK_EQ_INT(sqlite3_db_cacheflush(db), SQLITE_OK);
        CHECK(tu_exec(db, "ROLLBACK") == SQLITE_OK);
        CHECK(exec_update(db, 2, 10 + round) == SQLITE_OK);
        CHECK(tu_exec(db, "INSERT INTO t VALUES(NULL, 1, randomblob(9000))") == SQLITE_OK);
    }
    /* The files are locked: copy them after closing, with the WAL kept (no checkpoint). */
    long long want = tu_int(db, "SELECT total(v) FROM t");
    CHECK_EQ_INT(want, 1 + 12 + 3);
    CHECK_EQ_INT(sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL), SQLITE_OK);
    sqlite3_close(db);
    long long rows = 0;
    CHECK_EQ_INT(recovered_sum(path, &rows), want);
    CHECK_EQ_INT(rows, 5);
    tu_remove_db(path);
}

/* The checksum summed in four runs at once equals SQLite's definition, pair after pair,
 * at every length up to 600 pairs and at every page size (+ a frame header), both word
 * orders, from several starting sums; and run backwards it gives the starting sum back. */
static void test_wal_checksum_matches_definition(void)
{
    static uint8_t data[65536 + 24];
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < sizeof data; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (uint8_t)x;
    }
    static const uint32_t seeds[][2] = {{0, 0}, {1, 2}, {0xffffffffu, 0x80000001u}};
    for (int be = 0; be <= 1; be++) {
        for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++) {
            for (size_t n = 0; n <= 600 * 8 + 8 * 8; n += 8) {
                size_t len = n <= 600 * 8 ? n : (size_t)512 << (n - 600 * 8 - 8) / 8;
                size_t lens[2] = {len, len + 24};
                for (int h = 0; h < 2; h++) {
                    uint32_t fast[2] = {seeds[k][0], seeds[k][1]};
                    uint32_t slow[2] = {seeds[k][0], seeds[k][1]};
                    mv_wal_checksum(be, data, lens[h], fast);
                    mv_wal_checksum_simple(be, data, lens[h], slow);
                    if (fast[0] != slow[0] || fast[1] != slow[1]) {
                        fprintf(stderr, "  length %zu, big-endian %d, seed %zu\n", lens[h], be, k);
                    }
                    CHECK(fast[0] == slow[0] && fast[1] == slow[1]);
                    /* and run backwards: a damaged WAL header is rebuilt that way */
                    mv_wal_checksum_unwind(be, data, lens[h], fast);
                    CHECK(fast[0] == seeds[k][0] && fast[1] == seeds[k][1]);
                }
            }
        }
    }
}

/* A checkpoint copies each page's ciphertext from the WAL into the database instead of
 * decrypting, then encrypting again under a new nonce: after it, every page that has a
 * frame holds exactly the bytes of its last frame, and the database reads back intact. */
static void test_checkpoint_copies_ciphertext(void)
{
    char *path = tu_path("ckpt.db"), wal[1100];
    sqlite3 *db = NULL;
    tu_remove_db(path);
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK(open_wal_db(path, MV_DB_CREATE, &db) == 0);
    CHECK(tu_exec(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE "
                      "i < 60) INSERT INTO t SELECT i, i, randomblob(2000) FROM n") == SQLITE_OK);
    CHECK(tu_exec(db, "UPDATE t SET v = v + 1 WHERE id % 3 = 0") == SQLITE_OK);
    CHECK(tu_exec(db, "PRAGMA wal_checkpoint(PASSIVE)") == SQLITE_OK);
    size_t wal_len = 0, db_len = 0;
    uint8_t *w = tu_read_file(wal, &wal_len);
    uint8_t *d = tu_read_file(path, &db_len);
    CHECK(w != NULL && d != NULL);
    long long frames = wal_len > 32 ? (long long)(wal_len - 32) / WAL_FRAME_SIZE : 0;
    int same = 0, differ = 0;
    for (long long i = frames - 1; i >= 0; i--) { /* the last frame of a page wins */
        const uint8_t *frame = w + 32 + i * WAL_FRAME_SIZE;
        uint32_t pgno = (uint32_t)frame[0] << 24 | (uint32_t)frame[1] << 16 |
                        (uint32_t)frame[2] << 8 | frame[3];
        size_t at = (size_t)(pgno - 1) * WAL_PAGE_SIZE;
        int seen = 0;
        for (long long j = i + 1; j < frames; j++) {
            const uint8_t *later = w + 32 + j * WAL_FRAME_SIZE;
            seen = seen || memcmp(later, frame, 4) == 0;
        }
        if (seen || at + WAL_PAGE_SIZE > db_len) {
            continue;
        }
        if (memcmp(d + at, frame + 24, WAL_PAGE_SIZE) == 0) {
            same++;
        } else {
            differ++;
        }
    }
    free(w);
    free(d);
    CHECK(frames >= 30);
    CHECK(same >= 25);
    CHECK_EQ_INT(differ, 0);
    sqlite3_close(db);
    CHECK(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db) == MV_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT total(v) FROM t"), 1830 + 20);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE "
                            "integrity_check='ok'"),
                 1);
    sqlite3_close(db);
    tu_remove_db(path);
}

/* A transaction that overwrites one of its own frames in place (a spilled page written
 * again) makes SQLite write its later frames with zero salts and checksum and rewrite them
 * all at the commit; the shim writes those frames as they are (no chain, no WAL header
 * read per frame). A copy recovers every row of that transaction and of the next one,
 * which chains from the rewritten frames. */
static void test_deferred_checksums_recover(void)
{
    char *path = tu_path("deferred.db");
    sqlite3 *db = NULL;
    tu_remove_db(path);
    CHECK(open_wal_db(path, MV_DB_CREATE, &db) == 0);
    CHECK(tu_exec(db, "PRAGMA cache_size=10") == SQLITE_OK);
    count_start();
    CHECK(tu_exec(db, "BEGIN; WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                      "WHERE i < 80) INSERT INTO t SELECT i, i, randomblob(3000) FROM n; "
                      "UPDATE t SET v = v + 1; "
                      "WITH RECURSIVE n(i) AS (SELECT 81 UNION ALL SELECT i + 1 FROM n "
                      "WHERE i < 120) INSERT INTO t SELECT i, i, randomblob(3000) FROM n; "
                      "UPDATE t SET v = v + 1 WHERE id % 2 = 0; COMMIT") == SQLITE_OK);
    /* No extra I/O per frame (issue 13): the page number of a frame overwritten in place
     * comes from this connection's record of the frames it wrote under the write lock,
     * not from a 4-byte read of the frame header (one per such page before). */
    unsigned long pgno_reads = fv_reads_of(4);
    fv_disarm();
    CHECK(wal_frames(path) > 0);
    CHECK_EQ_INT(pgno_reads, 0);
    CHECK(tu_exec(db, "UPDATE t SET v = v + 1000 WHERE id = 7") == SQLITE_OK);
    long long rows = 0, want = tu_int(db, "SELECT total(v) FROM t");
    CHECK_EQ_INT(want, 7260 + 80 + 60 + 1000);
    CHECK_EQ_INT(recovered_sum(path, &rows), want);
    CHECK_EQ_INT(rows, 120);
    sqlite3_close(db);
    tu_remove_db(path);
}

/* A WAL with frames for 60 rows of 2000 bytes and an update of every third, nothing
 * checkpointed yet. */
static int wal_with_frames(const char *path, sqlite3 **db)
{
    tu_remove_db(path);
    if (open_wal_db(path, MV_DB_CREATE, db) != 0) {
        return -1;
    }
    if (tu_exec(*db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE "
                     "i < 60) INSERT INTO t SELECT i, i, randomblob(2000) FROM n") != SQLITE_OK ||
        tu_exec(*db, "UPDATE t SET v = v + 1 WHERE id % 3 = 0") != SQLITE_OK) {
        return -1;
    }
    return 0;
}

/* The checkpoint only copies pages: it checks each frame's tag but decrypts none (it used
 * to decrypt every page it copied, then throw the plaintext away). */
static void test_checkpoint_decrypts_nothing(void)
{
    char *path = tu_path("ckpt_nodecrypt.db");
    sqlite3 *db = NULL;
    CHECK(wal_with_frames(path, &db) == 0);
    long long frames = wal_frames(path);
    uint64_t before = crypt_pages_decrypted();
    CHECK(tu_exec(db, "PRAGMA wal_checkpoint(PASSIVE)") == SQLITE_OK);
    uint64_t during = crypt_pages_decrypted() - before;
    CHECK(frames >= 30);
    if (during != 0) {
        fprintf(stderr, "  %llu pages decrypted for %lld frames\n", (unsigned long long)during,
                frames);
    }
    CHECK(during == 0);
    sqlite3_close(db);
    CHECK(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db) == MV_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT total(v) FROM t"), 1830 + 20);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE "
                            "integrity_check='ok'"),
                 1);
    sqlite3_close(db);
    tu_remove_db(path);
}

/* A frame damaged after it was written stops the checkpoint (its tag is still checked):
 * the error names it, and its page in the database file keeps every byte. (Pages the
 * checkpoint copied before it are authentic; the WAL keeps them all, as after any partial
 * checkpoint.) */
static void test_checkpoint_stops_at_damaged_frame(void)
{
    char *path = tu_path("ckpt_damaged.db"), wal[1100];
    sqlite3 *db = NULL;
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK(wal_with_frames(path, &db) == 0);
    long long frames = wal_frames(path);
    CHECK(frames >= 30);
    /* A bit in the middle of the page of the last frame (the last frame of a page is the
     * one the checkpoint copies). */
    long long last = 32 + (frames - 1) * WAL_FRAME_SIZE;
    size_t wal_len = 0, len_before = 0, len_after = 0;
    uint8_t *w = tu_read_file(wal, &wal_len);
    CHECK(w != NULL && (long long)wal_len >= last + WAL_FRAME_SIZE);
    uint32_t pgno = (uint32_t)w[last] << 24 | (uint32_t)w[last + 1] << 16 |
                    (uint32_t)w[last + 2] << 8 | w[last + 3];
    free(w);
    CHECK(tu_flip_bit(wal, last + 24 + WAL_PAGE_SIZE / 2, 3) == 0);
    uint8_t *before = tu_read_file(path, &len_before);
    CHECK(tu_exec(db, "PRAGMA wal_checkpoint(PASSIVE)") == SQLITE_IOERR_DATA);
    CHECK(strstr(mv_db_vfs_errmsg(db), "failed authentication") != NULL);
    uint8_t *after = tu_read_file(path, &len_after);
    size_t at = (size_t)(pgno - 1) * WAL_PAGE_SIZE;
    CHECK(before != NULL && after != NULL);
    CHECK(at + WAL_PAGE_SIZE > len_before ||
          (len_after >= at + WAL_PAGE_SIZE && memcmp(before + at, after + at, WAL_PAGE_SIZE) == 0));
    free(before);
    free(after);
    sqlite3_close(db);
    tu_remove_db(path);
}

/* ---- read-ahead of descending page runs (vfs_read_ahead.c) ---- */
#define RA_PAGE_SIZE 4096
#define RA_BLOB      (400 * 4000) /* a blob of ~400 overflow pages: a saved view's way */

/* The encrypting VFS's main file of db. */
static sqlite3_file *ra_main_file(sqlite3 *db)
{
    sqlite3_file *f = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK) {
        return NULL;
    }
    return f;
}

/* A new database (chacha20, auto_vacuum FULL as a store has it, rollback journal) with
 * table b(id, data), or -1. */
static int ra_open(const char *path, unsigned flags, sqlite3 **db)
{
    struct mv_db_options o = MV_DB_OPTIONS_INIT;
    o.cipher = MV_CIPHER_CHACHA20;
    o.kdf_iter = TU_KDF_ITER;
    o.flags = flags;
    o.auto_vacuum = 1;
    char *err = NULL;
    int rc = mv_db_open(path, PW, strlen(PW), &o, db, &err);
    sqlite3_free(err);
    if (rc != MV_OK) {
        return -1;
    }
    return tu_exec(*db, "CREATE TABLE IF NOT EXISTS b(id INTEGER PRIMARY KEY, data BLOB)") ==
                   SQLITE_OK
               ? 0
               : -1;
}

/* Whole pages read through the encrypting VFS's main file from page `from` by `step` (+1, -1,
 * -2 ...) while it stays in 1..pages: each must equal want's copy of that page (decrypted
 * and authenticated as always). Counts on the VFS below: multi-page reads and calls. */
static void ra_read_pages(sqlite3_file *f,
                          const uint8_t *want,
                          long long pages,
                          long long from,
                          int step,
                          unsigned long *multipage,
                          unsigned long *calls,
                          unsigned long *largest)
{
    static uint8_t page[RA_PAGE_SIZE];
    int same = 1;
    count_start();
    for (long long p = from; p >= 1 && p <= pages; p += step) {
        int rc = f->pMethods->xRead(f, page, RA_PAGE_SIZE, (p - 1) * RA_PAGE_SIZE);
        if (rc != SQLITE_OK || memcmp(page, want + (p - 1) * RA_PAGE_SIZE, RA_PAGE_SIZE) != 0) {
            same = 0;
        }
    }
    *multipage = fv_reads_multipage();
    *calls = fv_calls(FV_READ);
    *largest = fv_read_largest();
    fv_disarm();
    CHECK(same);
}

/* A run of page reads that each go one page DOWN the file (an overflow chain in pages a
 * freed chain gave back: the kernel reads ahead only upward runs) makes the VFS read a
 * window of the pages below in one call of the VFS under it, so the run's next pages come
 * from the page cache: every page still reads back exactly as an upward pass read it, the
 * windows are few (they start at 128 KiB and double to 2 MiB: 32, 64, 128... pages) and at
 * most 2 MiB each. Upward runs and reads that skip pages never make one. The old VFS read
 * every page with its own call: no multi-page read at all (0 >= 2 fails). */
static void test_descending_reads_read_ahead(void)
{
    char *path = tu_path("ahead.db");
    sqlite3 *db = NULL;
    tu_remove_db(path);
    CHECK(ra_open(path, MV_DB_CREATE, &db) == 0);
    CHECK(tu_exec(db, "INSERT INTO b VALUES(1, zeroblob(1600000))") == SQLITE_OK);
    long long pages = tu_int(db, "PRAGMA page_count");
    CHECK(pages >= 390);
    sqlite3_file *f = ra_main_file(db);
    uint8_t *want = calloc((size_t)pages, RA_PAGE_SIZE);
    CHECK(f != NULL && want != NULL);
    if (f == NULL || want == NULL) {
        free(want);
        sqlite3_close(db);
        return;
    }
    for (long long p = 1; p <= pages; p++) {
        CHECK_EQ_INT(f->pMethods->xRead(f, want + (p - 1) * RA_PAGE_SIZE, RA_PAGE_SIZE,
                                        (p - 1) * RA_PAGE_SIZE),
                     SQLITE_OK);
    }
    unsigned long multipage = 0, calls = 0, largest = 0;
    ra_read_pages(f, want, pages, 1, 1, &multipage, &calls, &largest); /* upward */
    CHECK_EQ_INT((long long)multipage, 0);
    CHECK_EQ_INT((long long)calls, pages);
    ra_read_pages(f, want, pages, pages, -2, &multipage, &calls, &largest); /* not a run */
    CHECK_EQ_INT((long long)multipage, 0);
    ra_read_pages(f, want, pages, pages, -1, &multipage, &calls, &largest); /* downward */
    CHECK(multipage >= 2);
    CHECK(multipage <= 5); /* 32 + 64 + 128 + 256 pages cover the ~400 */
    CHECK(largest > FV_PAGE_MAX && largest <= 2ul * 1024ul * 1024ul);
    CHECK_EQ_INT((long long)calls, pages + (long long)multipage); /* each page once more */
    free(want);
    sqlite3_close(db);
    tu_remove_db(path);
}

/* The saved view's case end to end (what a cold SELECT of a big mailbox reads): a store's
 * saved view of 6 MB (more pages than one free-list trunk lists) is saved three times, the
 * store changing in between (each save frees the view's pages and takes pages again in one
 * transaction), and a new handle loads it: byte for byte what was saved last, whichever way
 * its chain runs. Where SQLite puts the pages is its business: on the 1,000,000-message
 * store a rewritten view ran down the file in runs of ~800 pages, here it runs up; the
 * read-ahead itself is test_descending_reads_read_ahead's. */
static void test_saved_view_reads_back(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("ahead", PW, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    size_t len = 6000000; /* more pages than one free-list trunk page lists */
    uint8_t *view = malloc(len);
    CHECK(view != NULL);
    if (view == NULL) {
        mv_store_close(&s);
        return;
    }
    struct mv_mailbox_info info;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < len; i++) {
            view[i] = (uint8_t)(i * 31 + (size_t)round * 7 + i / 4093);
        }
        CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
        CHECK_EQ_INT(
            mv_mailbox_view_save(s, "INBOX", info.uidvalidity, info.highestmodseq, view, len),
            MV_OK);
        char name[32];
        snprintf(name, sizeof name, "Other%d", round); /* the store changes in between */
        CHECK_EQ_INT(mv_mailbox_create(s, name, NULL), MV_OK);
    }
    mv_store_close(&s);
    s = NULL;
    char address[64], err[256] = "";
    snprintf(address, sizeof address, "ahead@example.org");
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    CHECK_EQ_INT(mv_store_open(address, PW, strlen(PW), &o, &s, err, sizeof err), MV_OK);
    void *data = NULL;
    size_t got = 0;
    uint32_t uidvalidity = 0;
    uint64_t modseq = 0;
    int rc =
        s != NULL ? mv_mailbox_view_load(s, "INBOX", &uidvalidity, &modseq, &data, &got) : MV_ERROR;
    CHECK_EQ_INT(rc, MV_OK);
    CHECK(got == len && data != NULL && memcmp(data, view, len) == 0);
    CHECK_EQ_INT((long long)modseq, (long long)info.highestmodseq); /* the last save's */
    mv_free(data);
    free(view);
    mv_store_close(&s);
}

/* ---- held windows of hinted chains (vfs_read_ahead.c) ---- */
#define HW_BLOB 300000

/* Every byte of row 1's BLOB in b is c (read by a statement of its own on db). */
static int hw_blob_is(sqlite3 *db, char c)
{
    sqlite3_stmt *st = NULL;
    int ok =
        sqlite3_prepare_v2(db, "SELECT data FROM b WHERE id = 1", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 0) == HW_BLOB;
    const unsigned char *p = ok ? sqlite3_column_blob(st, 0) : NULL;
    for (int i = 0; ok && i < HW_BLOB; i++) {
        ok = p[i] == (unsigned char)c;
    }
    sqlite3_finalize(st);
    return ok;
}

/* Inserts row 1 with a BLOB of c bytes, its chain up the file (a zeroblob's is not). */
static int hw_blob_insert(sqlite3 *db, char c)
{
    static char bytes[HW_BLOB];
    memset(bytes, c, sizeof bytes);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "INSERT INTO b VALUES(1, ?)", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_blob(st, 1, bytes, HW_BLOB, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    }
    sqlite3_finalize(st);
    return rc;
}

/* Overwrites row 1's BLOB in place with c (sqlite3_blob_write keeps its pages). */
static int hw_blob_fill(sqlite3 *db, char c)
{
    static char bytes[HW_BLOB];
    memset(bytes, c, sizeof bytes);
    sqlite3_blob *b = NULL;
    int rc = sqlite3_blob_open(db, "main", "b", "data", 1, 1, &b);
    if (rc == SQLITE_OK) {
        rc = sqlite3_blob_write(b, bytes, HW_BLOB, 0);
    }
    sqlite3_blob_close(b);
    return rc;
}

/* Handles A and B on a new file at path (in WAL mode if wal), row 1's BLOB of 'a's written
 * by B (so not in A's own page cache) and in the file. 1, or 0 after a failed check. */
static int hw_pair(const char *path, int wal, sqlite3 **a, sqlite3 **b)
{
    tu_remove_db(path);
    int ok = ra_open(path, MV_DB_CREATE, a) == 0 && ra_open(path, 0, b) == 0 &&
             (!wal || tu_exec(*a, "PRAGMA journal_mode=WAL") == SQLITE_OK) &&
             hw_blob_insert(*b, 'a') == SQLITE_OK &&
             (!wal || tu_exec(*b, "PRAGMA wal_checkpoint(TRUNCATE)") == SQLITE_OK);
    return ok;
}

/* B overwrites row 1's BLOB in place with 'b's and, in WAL mode, checkpoints it into the file
 * (SQLITE_BUSY if A still held a snapshot). 1, or 0. */
static int hw_rewrite(sqlite3 *b, int wal)
{
    int log_frames = -1, done = -1;
    return hw_blob_fill(b, 'b') == SQLITE_OK &&
           (!wal || sqlite3_wal_checkpoint_v2(b, "main", SQLITE_CHECKPOINT_TRUNCATE, &log_frames,
                                              &done) == SQLITE_OK);
}

/* A hinted chain's window is held for the chain's reads (the last BLOB of the file: the
 * window runs past its end) and never outlives its transaction, even when the hint is not
 * taken back: handle A reads a BLOB through a window and keeps the hint; handle B rewrites
 * the BLOB's pages in place and checkpoints them into the file; A's next read gets B's
 * bytes. Without the drops at the transaction's lock calls the window served A the old
 * pages. In WAL mode and with a rollback journal. */
static void test_held_window_never_stale(void)
{
    for (int wal = 0; wal <= 1; wal++) {
        char *path = tu_path("held.db");
        sqlite3 *a = NULL, *b = NULL;
        CHECK(hw_pair(path, wal, &a, &b));
        /* A, in one read transaction: the row's leaf first (as the store does), then the
         * hint and the chain; the hint is not taken back */
        CHECK(tu_exec(a, "BEGIN") == SQLITE_OK);
        CHECK(tu_int(a, "SELECT length(data) FROM b WHERE id = 1") == HW_BLOB);
        mv_db_read_ahead_hint(a, HW_BLOB);
        count_start();
        CHECK(hw_blob_is(a, 'a'));
        unsigned long windows = fv_reads_multipage(), reads = fv_calls(FV_READ);
        fv_disarm();
        CHECK(reads <= 3);        /* the chain's 70+ pages in the window, none again */
        CHECK_EQ_INT(windows, 1); /* the window is real: the next read could be stale */
        CHECK(tu_exec(a, "COMMIT") == SQLITE_OK);
        /* B rewrites the same pages and puts them in the file */
        CHECK(hw_rewrite(b, wal));
        CHECK(hw_blob_is(a, 'b'));
        mv_db_read_ahead_hint(a, 0);
        CHECK(hw_blob_is(a, 'b'));
        sqlite3_close(a);
        sqlite3_close(b);
        tu_remove_db(path);
    }
}

/* The same for a near window (vfs_hint.h, mv_db_read_near_hint): A reads the row's leaf
 * with its neighbours (the chain's first pages among them) held, under a near hint it never
 * takes back; B rewrites the BLOB in place; A's next reads, in a new transaction, get B's
 * bytes, leaf and chain: the held pages went with A's transaction (kept past it, they served
 * A the old ones). */
static void test_near_window_never_stale(void)
{
    for (int wal = 0; wal <= 1; wal++) {
        char *path = tu_path("near.db");
        sqlite3 *a = NULL, *b = NULL;
        CHECK(hw_pair(path, wal, &a, &b));
        mv_db_read_near_hint(a, 4);
        CHECK(tu_exec(a, "BEGIN") == SQLITE_OK);
        /* the leaf alone: its window (page 1, the leaf, the chain's first pages) is held */
        CHECK(tu_int(a, "SELECT length(data) FROM b WHERE id = 1") == HW_BLOB);
        CHECK(tu_exec(a, "COMMIT") == SQLITE_OK);
        CHECK(hw_rewrite(b, wal));
        CHECK(hw_blob_is(a, 'b'));
        mv_db_read_near_hint(a, 0);
        CHECK(hw_blob_is(a, 'b'));
        sqlite3_close(a);
        sqlite3_close(b);
        tu_remove_db(path);
    }
}

int main(void)
{
    if (fv_register() != SQLITE_OK || mv_vfs_register(FV_VFS_NAME, 0) != MV_OK) {
        fprintf(stderr, "cannot register the VFS stack\n");
        return 1;
    }
    TEST(test_wal_checksum_matches_definition);
    TEST(test_frames_write_without_reading_back);
    TEST(test_wal_pages_read_once);
    TEST(test_remembered_frame_overwritten_by_another_connection);
    TEST(test_exclusive_mode_chain);
    TEST(test_checkpoint_copies_ciphertext);
    TEST(test_checkpoint_decrypts_nothing);
    TEST(test_deferred_checksums_recover);
    TEST(test_checkpoint_stops_at_damaged_frame);
    TEST(test_descending_reads_read_ahead);
    TEST(test_held_window_never_stale);
    TEST(test_near_window_never_stale);
    TEST(test_saved_view_reads_back);
    return th_summary();
}
