/*
 * test_plaintext.c -- no plaintext reaches the disk.
 *
 * A recording VFS ("mvrec") sits below the encrypting shim and scans every byte written to
 * any file (database, journal, WAL, shm, temp files) for a marker string stored in the rows.
 * The workload forces every kind of file SQLite writes: rollback journal, statement
 * sub-journal, WAL frames and checkpoint, temp_store=FILE sort spills, an index build, and
 * VACUUM's scratch database. A control run without the shim proves the detector finds the
 * marker when it is there.
 */
#include "harness.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARKER "PLAINTEXT-MARKER-q7Zx"

struct rec_file {
    sqlite3_file base;
    sqlite3_file *real;
    int flags;
};

static sqlite3_vfs rec_vfs;
static sqlite3_vfs *rec_lower;
static int rec_hits;       /* writes that contained the marker */
static int rec_writes[8];  /* writes per kind, see rec_kind() */
static char rec_carry[64]; /* marker split across two adjacent writes is found too */
/* Temp files: which 4128-byte blocks were written (offset / 4128), while counting is on. */
static int rec_temp_count;
static uint8_t rec_temp_seen[1 << 16];
static int rec_temp_distinct;

enum { K_MAIN, K_JOURNAL, K_WAL, K_TEMP, K_OTHER };

static int rec_kind(int flags)
{
    if (flags & SQLITE_OPEN_MAIN_DB) {
        return K_MAIN;
    }
    if (flags & SQLITE_OPEN_MAIN_JOURNAL) {
        return K_JOURNAL;
    }
    if (flags & SQLITE_OPEN_WAL) {
        return K_WAL;
    }
    if (flags & (SQLITE_OPEN_TEMP_DB | SQLITE_OPEN_TEMP_JOURNAL | SQLITE_OPEN_TRANSIENT_DB |
                 SQLITE_OPEN_SUBJOURNAL)) {
        return K_TEMP;
    }
    return K_OTHER;
}

static int rec_close(sqlite3_file *p)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xClose(f->real);
}
static int rec_read(sqlite3_file *p, void *b, int n, sqlite3_int64 o)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xRead(f->real, b, n, o);
}
static int rec_write(sqlite3_file *p, const void *b, int n, sqlite3_int64 o)
{
    struct rec_file *f = (struct rec_file *)p;
    rec_writes[rec_kind(f->flags)]++;
    if (rec_temp_count && rec_kind(f->flags) == K_TEMP &&
        o / 4128 < (sqlite3_int64)sizeof rec_temp_seen) {
        rec_temp_distinct += rec_temp_seen[o / 4128] == 0;
        rec_temp_seen[o / 4128] = 1;
    }
    if (tu_contains(b, (size_t)n, MARKER, strlen(MARKER))) {
        rec_hits++;
    }
    /* The end of one write joined to the start of the next. */
    char joined[128];
    size_t keep = strlen(MARKER) - 1, head = (size_t)n < keep ? (size_t)n : keep;
    memcpy(joined, rec_carry, keep);
    memcpy(joined + keep, b, head);
    if (tu_contains((const uint8_t *)joined, keep + head, MARKER, strlen(MARKER))) {
        rec_hits++;
    }
    if ((size_t)n >= keep) {
        memcpy(rec_carry, (const char *)b + n - (int)keep, keep);
    }
    return f->real->pMethods->xWrite(f->real, b, n, o);
}
static int rec_truncate(sqlite3_file *p, sqlite3_int64 s)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xTruncate(f->real, s);
}
static int rec_sync(sqlite3_file *p, int fl)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xSync(f->real, fl);
}
static int rec_size(sqlite3_file *p, sqlite3_int64 *s)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xFileSize(f->real, s);
}
static int rec_lock(sqlite3_file *p, int l)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xLock(f->real, l);
}
static int rec_unlock(sqlite3_file *p, int l)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xUnlock(f->real, l);
}
static int rec_check(sqlite3_file *p, int *r)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xCheckReservedLock(f->real, r);
}
static int rec_fcntl(sqlite3_file *p, int op, void *a)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xFileControl(f->real, op, a);
}
static int rec_sector(sqlite3_file *p)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xSectorSize(f->real);
}
static int rec_dev(sqlite3_file *p)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}
static int rec_shm_map(sqlite3_file *p, int a, int b, int c, void volatile **d)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xShmMap(f->real, a, b, c, d);
}
static int rec_shm_lock(sqlite3_file *p, int a, int b, int c)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xShmLock(f->real, a, b, c);
}
static void rec_shm_barrier(sqlite3_file *p)
{
    struct rec_file *f = (struct rec_file *)p;
    f->real->pMethods->xShmBarrier(f->real);
}
static int rec_shm_unmap(sqlite3_file *p, int d)
{
    struct rec_file *f = (struct rec_file *)p;
    return f->real->pMethods->xShmUnmap(f->real, d);
}

static const sqlite3_io_methods rec_methods = {
    2,        rec_close,   rec_read,     rec_write,       rec_truncate,  rec_sync,
    rec_size, rec_lock,    rec_unlock,   rec_check,       rec_fcntl,     rec_sector,
    rec_dev,  rec_shm_map, rec_shm_lock, rec_shm_barrier, rec_shm_unmap, NULL,
    NULL};

static int rec_open(sqlite3_vfs *v, sqlite3_filename name, sqlite3_file *p, int flags, int *out)
{
    (void)v;
    struct rec_file *f = (struct rec_file *)p;
    f->real = (sqlite3_file *)&f[1];
    f->flags = flags;
    int rc = rec_lower->xOpen(rec_lower, name, f->real, flags, out);
    p->pMethods = rc == SQLITE_OK ? &rec_methods : NULL;
    return rc;
}

static int rec_register(void)
{
    rec_lower = sqlite3_vfs_find(NULL);
    rec_vfs = *rec_lower;
    rec_vfs.zName = "mvrec";
    rec_vfs.szOsFile = (int)sizeof(struct rec_file) + rec_lower->szOsFile;
    rec_vfs.xOpen = rec_open;
    rec_vfs.pNext = NULL;
    return sqlite3_vfs_register(&rec_vfs, 0);
}

static void workload(sqlite3 *db)
{
    char sql[512];
    tu_exec(db, "PRAGMA temp_store=FILE; PRAGMA cache_size=-64; PRAGMA journal_mode=DELETE");
    tu_exec(db, "CREATE TABLE m(id INTEGER PRIMARY KEY, subject TEXT, body TEXT)");
    snprintf(sql, sizeof sql,
             "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<3000) "
             "INSERT INTO m SELECT i, '%s subject ' || i, "
             "printf('%%.*c', 200 + i %% 900, 'x') || '%s body' FROM c",
             MARKER, MARKER);
    tu_exec(db, sql);
    /* Rollback journal + statement sub-journal (a savepoint rolled back). */
    tu_exec(db, "BEGIN; SAVEPOINT s; UPDATE m SET body = body || ' " MARKER " again';"
                "ROLLBACK TO s; UPDATE m SET subject = subject || '!' WHERE id % 3 = 0; COMMIT");
    /* Sort spills and an index build through temp files. */
    tu_exec(db, "SELECT count(*) FROM (SELECT body FROM m ORDER BY body || random())");
    tu_exec(db, "CREATE INDEX m_body ON m(body)");
    tu_exec(db, "CREATE TEMP TABLE scratch AS SELECT * FROM m");
    tu_exec(db, "SELECT count(DISTINCT body) FROM scratch");
    /* VACUUM's scratch database. */
    tu_exec(db, "DELETE FROM m WHERE id % 2 = 0; VACUUM");
    /* WAL frames and a checkpoint. */
    tu_exec(db, "PRAGMA journal_mode=WAL");
    tu_exec(db, "UPDATE m SET body = body || ' " MARKER " wal' WHERE id % 5 = 1");
    tu_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
}

static void test_marker_never_written_through_the_shim(void)
{
    char *path = tu_path("noplain.db");
    sqlite3 *db = NULL;
    memset(rec_writes, 0, sizeof rec_writes);
    rec_hits = 0;
    CHECK_EQ_INT(tu_open(path, "pw-noplain", MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    workload(db);
    long long rows = tu_int(db, "SELECT count(*) FROM m WHERE body LIKE '%" MARKER "%'");
    sqlite3_close(db);
    printf("  writes: main %d, journal %d, wal %d, temp %d, other %d; marker hits %d\n",
           rec_writes[K_MAIN], rec_writes[K_JOURNAL], rec_writes[K_WAL], rec_writes[K_TEMP],
           rec_writes[K_OTHER], rec_hits);
    CHECK_EQ_INT(rows, 1500);
    CHECK(rec_writes[K_MAIN] > 0 && rec_writes[K_JOURNAL] > 0 && rec_writes[K_WAL] > 0);
    CHECK(rec_writes[K_TEMP] > 0); /* the workload really spilled to temp files */
    CHECK_EQ_INT(rec_hits, 0);
    /* And what is left on disk holds no marker either. */
    size_t n = 0;
    uint8_t *bytes = tu_read_file(path, &n);
    int found = bytes != NULL && tu_contains(bytes, n, MARKER, strlen(MARKER));
    free(bytes);
    CHECK(!found);
    tu_remove_db(path);
}

/* Control: the same workload on the recorder alone writes the marker. */
static void test_control_detector_sees_plaintext(void)
{
    char *path = tu_path("control.db");
    sqlite3 *db = NULL;
    rec_hits = 0;
    memset(rec_writes, 0, sizeof rec_writes);
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "mvrec") ==
          SQLITE_OK);
    workload(db);
    sqlite3_close(db);
    CHECK(rec_hits > 0);
    CHECK(rec_writes[K_TEMP] > 0);
    tu_remove_db(path);
}

/* A statement journal that spills into an encrypted temp file: each block is encrypted and
 * written about once, not once per write SQLite makes (a journal record is a 4-byte page
 * number and then the page, so every record straddles two blocks: patching the block on
 * disk per write wrote each block ~3 times), and the journal still undoes the statement. */
static void test_statement_journal_blocks_written_once(void)
{
    char *path = tu_path("subjournal.db");
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, "pw-subjournal", MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    tu_exec(db, "PRAGMA temp_store=FILE; PRAGMA cache_size=-2048; PRAGMA journal_mode=WAL");
    tu_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT UNIQUE, n INTEGER)");
    tu_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<4000) "
                "INSERT INTO t SELECT i, printf('%08d', i) || printf('%.*c', 300, 'v'), i FROM c");
    long long before = tu_int(db, "SELECT sum(n * 7 + length(v) * id) FROM t");
    memset(rec_temp_seen, 0, sizeof rec_temp_seen);
    rec_temp_distinct = 0;
    int writes_before = rec_writes[K_TEMP];
    rec_temp_count = 1;
    tu_exec(db, "BEGIN");
    /* Every row changed, then the last one collides: SQLite undoes the statement from its
     * journal (ABORT), and the transaction goes on. */
    char *err = NULL;
    int rc = sqlite3_exec(db,
                          "UPDATE t SET n = n + 1, v = CASE WHEN id = 4000 THEN "
                          "printf('%08d', 2) || printf('%.*c', 300, 'v') || 'x' ELSE v || 'x' END",
                          NULL, NULL, &err);
    sqlite3_free(err);
    CHECK_EQ_INT(rc, SQLITE_CONSTRAINT_UNIQUE);
    tu_exec(db, "COMMIT");
    rec_temp_count = 0;
    int writes = rec_writes[K_TEMP] - writes_before;
    printf("  temp writes %d, distinct blocks %d\n", writes, rec_temp_distinct);
    CHECK(rec_temp_distinct > 100); /* the journal really spilled: 4000 rows, ~300 pages */
    CHECK(writes <= rec_temp_distinct + rec_temp_distinct / 8);
    CHECK_EQ_INT(tu_int(db, "SELECT sum(n * 7 + length(v) * id) FROM t"), before);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM pragma_integrity_check WHERE "
                            "integrity_check != 'ok'"),
                 0);
    sqlite3_close(db);
    tu_remove_db(path);
}

int main(void)
{
    if (rec_register() != SQLITE_OK || mv_vfs_register("mvrec", 0) != MV_OK) {
        fprintf(stderr, "cannot register the VFS stack\n");
        return 1;
    }
    TEST(test_marker_never_written_through_the_shim);
    TEST(test_control_detector_sees_plaintext);
    TEST(test_statement_journal_blocks_written_once);
    return th_summary();
}
