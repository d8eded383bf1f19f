/*
 * test_noshm.c -- the encrypting VFS on a lower VFS without shared memory.
 *
 * Some VFSes offer no shared memory: I/O methods version 1, or no xShmMap (Ceph's
 * libcephsqlite is one). SQLite's WAL then works only with locking_mode=EXCLUSIVE, its WAL
 * index in heap memory. The shim must mirror that: offering xShmMap on top of a lower file
 * that has none made SQLite call through a NULL pointer (SIGSEGV) when a WAL database was
 * created or reopened, and mv_db_open must set exclusive locking before its first read, or
 * an existing WAL store cannot be opened at all.
 *
 * "noshm" below is a pass-through of the default VFS whose files have version 1 methods. It
 * is registered as the default before mailvault's VFS, which then stacks on it (one lower
 * VFS per process: hence a test binary of its own).
 */
#include "failalloc.h"
#include "harness.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_PASSWORD "no shared memory"

/* ---- the lower VFS without shared memory ----------------------------------------------- */

static sqlite3_vfs *ns_base;
static int ns_files_opened;

struct ns_file {
    sqlite3_file base;
    sqlite3_file *real; /* the base VFS's file, right after this struct */
};

static sqlite3_file *ns_real(sqlite3_file *p)
{
    return ((struct ns_file *)p)->real;
}

static int ns_close(sqlite3_file *p)
{
    return ns_real(p)->pMethods->xClose(ns_real(p));
}

static int ns_read(sqlite3_file *p, void *buf, int amt, sqlite3_int64 off)
{
    return ns_real(p)->pMethods->xRead(ns_real(p), buf, amt, off);
}

static int ns_write(sqlite3_file *p, const void *buf, int amt, sqlite3_int64 off)
{
    return ns_real(p)->pMethods->xWrite(ns_real(p), buf, amt, off);
}

static int ns_truncate(sqlite3_file *p, sqlite3_int64 size)
{
    return ns_real(p)->pMethods->xTruncate(ns_real(p), size);
}

static int ns_sync(sqlite3_file *p, int flags)
{
    return ns_real(p)->pMethods->xSync(ns_real(p), flags);
}

static int ns_file_size(sqlite3_file *p, sqlite3_int64 *size)
{
    return ns_real(p)->pMethods->xFileSize(ns_real(p), size);
}

static int ns_lock(sqlite3_file *p, int level)
{
    return ns_real(p)->pMethods->xLock(ns_real(p), level);
}

static int ns_unlock(sqlite3_file *p, int level)
{
    return ns_real(p)->pMethods->xUnlock(ns_real(p), level);
}

static int ns_check_reserved_lock(sqlite3_file *p, int *out)
{
    return ns_real(p)->pMethods->xCheckReservedLock(ns_real(p), out);
}

static int ns_file_control(sqlite3_file *p, int op, void *arg)
{
    return ns_real(p)->pMethods->xFileControl(ns_real(p), op, arg);
}

static int ns_sector_size(sqlite3_file *p)
{
    return ns_real(p)->pMethods->xSectorSize(ns_real(p));
}

static int ns_device_characteristics(sqlite3_file *p)
{
    return ns_real(p)->pMethods->xDeviceCharacteristics(ns_real(p));
}

/* Version 1: the shared-memory slots do not exist as far as SQLite is concerned. */
static const sqlite3_io_methods ns_methods = {
    1,
    ns_close,
    ns_read,
    ns_write,
    ns_truncate,
    ns_sync,
    ns_file_size,
    ns_lock,
    ns_unlock,
    ns_check_reserved_lock,
    ns_file_control,
    ns_sector_size,
    ns_device_characteristics,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

static int ns_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *p, int flags, int *out)
{
    (void)vfs;
    struct ns_file *f = (struct ns_file *)p;
    f->real = (sqlite3_file *)&f[1];
    int rc = ns_base->xOpen(ns_base, name, f->real, flags, out);
    p->pMethods = rc == SQLITE_OK ? &ns_methods : NULL;
    if (rc == SQLITE_OK) {
        ns_files_opened++;
    }
    return rc;
}

static int ns_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    (void)vfs;
    return ns_base->xDelete(ns_base, name, sync_dir);
}

static int ns_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return ns_base->xAccess(ns_base, name, flags, out);
}

static int ns_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return ns_base->xFullPathname(ns_base, name, n, out);
}

static int ns_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return ns_base->xRandomness(ns_base, n, out);
}

static int ns_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return ns_base->xSleep(ns_base, us);
}

static int ns_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return ns_base->xCurrentTime(ns_base, out);
}

static int ns_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return ns_base->xGetLastError(ns_base, n, out);
}

static sqlite3_vfs ns_vfs;

static int ns_register(void)
{
    ns_base = sqlite3_vfs_find(NULL);
    if (ns_base == NULL) {
        return SQLITE_ERROR;
    }
    ns_vfs = (sqlite3_vfs){
        .iVersion = 1,
        .szOsFile = (int)sizeof(struct ns_file) + ns_base->szOsFile,
        .mxPathname = ns_base->mxPathname,
        .zName = "noshm",
        .xOpen = ns_open,
        .xDelete = ns_delete,
        .xAccess = ns_access,
        .xFullPathname = ns_full_pathname,
        .xRandomness = ns_randomness,
        .xSleep = ns_sleep,
        .xCurrentTime = ns_current_time,
        .xGetLastError = ns_get_last_error,
    };
    return sqlite3_vfs_register(&ns_vfs, 1);
}

/* ---- tests ------------------------------------------------------------------------------ */

static const char ns_message[] = "From: a@example.org\r\nSubject: no shm\r\n\r\nbody\r\n";

static int ns_open_store(const char *address, mv_store **s)
{
    char err[512] = "";
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    int rc = mv_store_open(address, NS_PASSWORD, strlen(NS_PASSWORD), &o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open %s: %s (%d)\n", address, err, rc);
    }
    return rc;
}

static int ns_count(mv_store *s)
{
    struct mv_mailbox_info info;
    if (mv_mailbox_status(s, "INBOX", &info) != MV_OK) {
        return -1;
    }
    return (int)info.messages;
}

static const char *ns_pragma_text(sqlite3 *db, const char *sql, char *out, size_t size)
{
    sqlite3_stmt *st = NULL;
    out[0] = '\0';
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_text(st, 0) != NULL) {
        snprintf(out, size, "%s", (const char *)sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return out;
}

/* A new store and a reopened one: WAL, exclusive locking, read back; the files really went
 * through the lower VFS. */
static void test_store_on_lower_without_shm(void)
{
    mv_store *s = NULL;
    int opened_before = ns_files_opened;
    CHECK_EQ_INT(tu_store_create("alice", NS_PASSWORD, 0, &s), MV_OK);
    CHECK(ns_files_opened > opened_before);
    char text[32];
    CHECK(strcmp(ns_pragma_text(mv_store_db(s), "PRAGMA journal_mode", text, sizeof text), "wal") ==
          0);
    CHECK(strcmp(ns_pragma_text(mv_store_db(s), "PRAGMA main.locking_mode", text, sizeof text),
                 "exclusive") == 0);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(
            mv_message_append(s, "INBOX", ns_message, sizeof ns_message - 1, 0, NULL, 0, NULL),
            MV_OK);
    }
    mv_store_close(&s);

    CHECK_EQ_INT(ns_open_store("alice@example.org", &s), MV_OK);
    CHECK_EQ_INT(ns_count(s), 5);
    CHECK(strcmp(ns_pragma_text(mv_store_db(s), "PRAGMA main.locking_mode", text, sizeof text),
                 "exclusive") == 0);
    mv_store_close(&s);
}

/* An existing WAL database whose WAL still holds commits (a copy taken while it was open, as
 * after a crash): the first read recovers the WAL with its index in heap memory. */
static void test_reopen_with_wal_present(void)
{
    const char *path = tu_path("hot.db");
    const char *copy = tu_path("hot-copy.db");
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, NS_PASSWORD, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0"), SQLITE_OK);
    tu_fill_table(db, 1, 50);
    char wal[512];
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK(tu_file_size(wal) > 0);
    CHECK_EQ_INT(tu_copy_db(path, copy), 0);
    sqlite3_close(db);

    char copy_wal[512];
    snprintf(copy_wal, sizeof copy_wal, "%s-wal", copy);
    CHECK(tu_file_size(copy_wal) > 0);
    CHECK_EQ_INT(tu_open(copy, NS_PASSWORD, MV_CIPHER_AUTO, 0, &db), MV_OK);
    char digest[65], want[65];
    long long rows = 0;
    CHECK_EQ_INT(tu_table_digest(db, digest, &rows), 0);
    tu_expected_digest(50, want);
    CHECK_EQ_INT(rows, 50);
    CHECK(strcmp(digest, want) == 0);
    sqlite3_close(db);
}

/* Exclusive locking means one connection at a time: a second open is refused with BUSY,
 * never a crash or a second writer, and the first connection's data stays whole. */
static void test_second_open_is_busy(void)
{
    const char *path = tu_path("busy.db");
    sqlite3 *db = NULL, *other = NULL;
    CHECK_EQ_INT(tu_open(path, NS_PASSWORD, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA journal_mode=WAL"), SQLITE_OK);
    tu_fill_table(db, 1, 10);
    int rc = tu_open(path, NS_PASSWORD, MV_CIPHER_AUTO, 0, &other);
    sqlite3_close(other);
    CHECK_EQ_INT(rc, MV_EBUSY);
    char digest[65], want[65];
    long long rows = 0;
    CHECK_EQ_INT(tu_table_digest(db, digest, &rows), 0);
    tu_expected_digest(10, want);
    CHECK(strcmp(digest, want) == 0);
    sqlite3_close(db);
}

/* An existing WAL database opened with each allocation failing in turn: MV_ENOMEM or a
 * connection that reads it, never another error. The exclusive-locking statement's failure
 * (before the first read) was MV_ERROR whatever its cause. */
static void test_open_allocation_failures(void)
{
    const char *path = tu_path("alloc.db");
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, NS_PASSWORD, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA journal_mode=WAL"), SQLITE_OK);
    tu_fill_table(db, 1, 20);
    sqlite3_close(db);
    unsigned long n = 1, failed = 0;
    int wrong = 0;
    for (; n <= 20000 && !wrong; n++) {
        db = NULL;
        fa_arm(n, 0);
        int rc = tu_open(path, NS_PASSWORD, MV_CIPHER_AUTO, 0, &db);
        int fired = fa_disarm();
        long long rows = 0;
        char digest[65];
        if (rc == MV_OK && tu_table_digest(db, digest, &rows) != 0) {
            rows = -1;
        }
        sqlite3_close(db);
        failed += rc != MV_OK;
        wrong = (rc != MV_OK && rc != MV_ENOMEM) || (rc == MV_OK && rows != 20);
        if (wrong) {
            fprintf(stderr, "  open, allocation #%lu failing: %s, %lld rows\n", n, mv_strerror(rc),
                    rows);
        }
        if (!fired) {
            break;
        }
    }
    printf("  open with allocation N failing: %lu failed, succeeded at N=%lu\n", failed, n);
    CHECK(!wrong);
    CHECK(n > 1 && n <= 20000);
}

int main(void)
{
    /* Before anything initialises SQLite: the allocation loop wraps its allocator. */
    if (fa_install() != 0 || ns_register() != SQLITE_OK || mv_vfs_register("noshm", 0) != MV_OK) {
        fprintf(stderr, "cannot register the test VFS\n");
        return 1;
    }
    TEST(test_store_on_lower_without_shm);
    TEST(test_reopen_with_wal_present);
    TEST(test_second_open_is_busy);
    TEST(test_open_allocation_failures);
    return th_summary();
}
