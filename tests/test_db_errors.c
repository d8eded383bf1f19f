/*
 * test_db_errors.c -- errors that name their real cause, in one line (issue 15.5).
 *
 * SQLite says "disk I/O error" for every failed system call. A full disk on open must say
 * "no space left on device" (MV_ENOSPC, which mailvaultd answers as a transient
 * [UNAVAILABLE]); a read error while a restore or passwd verifies its copy must name the read
 * error in one line, not print PRAGMA quick_check's multi-line findings that blame the data;
 * a checkpoint that fails must not be reported as "another connection is using it".
 *
 * "faulty" below is a pass-through of the default VFS that fails, on request, the shared
 * memory mapping (errno ENOSPC, as on a full tmpfs), reads of one file from an offset on
 * (EIO), or writes to one file (EIO), deterministically. It is registered as the default
 * before mailvault's VFS, which stacks on it (one lower VFS per process: hence a test binary
 * of its own).
 */
#include "harness.h"
#include "ops/ops_backup.h"
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FE_PASSWORD "faulty disk"

/* ---- the fault-injecting lower VFS ------------------------------------------------------ */

static sqlite3_vfs *fe_base;
static int fe_shm_errno;            /* xShmMap fails with this errno (0: never) */
static const char *fe_read_suffix;  /* reads of a file whose name ends so ... */
static sqlite3_int64 fe_read_from;  /* ... at this offset or later fail with EIO */
static const char *fe_write_suffix; /* writes to a file whose name ends so fail with EIO */
static int fe_faults;               /* faults injected */

struct fe_file {
    sqlite3_file base;
    sqlite3_file *real; /* the base VFS's file, right after the name */
    char name[512];
};

static sqlite3_file *fe_real(sqlite3_file *p)
{
    return ((struct fe_file *)p)->real;
}

static int fe_named(sqlite3_file *p, const char *suffix)
{
    const char *name = ((struct fe_file *)p)->name;
    size_t n = strlen(name), s = suffix != NULL ? strlen(suffix) : 0;
    return suffix != NULL && n >= s && strcmp(name + n - s, suffix) == 0;
}

static int fe_close(sqlite3_file *p)
{
    return fe_real(p)->pMethods->xClose(fe_real(p));
}

static int fe_read(sqlite3_file *p, void *buf, int amt, sqlite3_int64 off)
{
    if (fe_named(p, fe_read_suffix) && off >= fe_read_from) {
        fe_faults++;
        errno = EIO;
        return SQLITE_IOERR_READ;
    }
    return fe_real(p)->pMethods->xRead(fe_real(p), buf, amt, off);
}

static int fe_write(sqlite3_file *p, const void *buf, int amt, sqlite3_int64 off)
{
    if (fe_named(p, fe_write_suffix)) {
        fe_faults++;
        errno = EIO;
        return SQLITE_IOERR_WRITE;
    }
    return fe_real(p)->pMethods->xWrite(fe_real(p), buf, amt, off);
}

static int fe_truncate(sqlite3_file *p, sqlite3_int64 size)
{
    return fe_real(p)->pMethods->xTruncate(fe_real(p), size);
}

static int fe_sync(sqlite3_file *p, int flags)
{
    return fe_real(p)->pMethods->xSync(fe_real(p), flags);
}

static int fe_file_size(sqlite3_file *p, sqlite3_int64 *size)
{
    return fe_real(p)->pMethods->xFileSize(fe_real(p), size);
}

static int fe_lock(sqlite3_file *p, int level)
{
    return fe_real(p)->pMethods->xLock(fe_real(p), level);
}

static int fe_unlock(sqlite3_file *p, int level)
{
    return fe_real(p)->pMethods->xUnlock(fe_real(p), level);
}

static int fe_check_reserved_lock(sqlite3_file *p, int *out)
{
    return fe_real(p)->pMethods->xCheckReservedLock(fe_real(p), out);
}

static int fe_file_control(sqlite3_file *p, int op, void *arg)
{
    return fe_real(p)->pMethods->xFileControl(fe_real(p), op, arg);
}

static int fe_sector_size(sqlite3_file *p)
{
    return fe_real(p)->pMethods->xSectorSize(fe_real(p));
}

static int fe_device_characteristics(sqlite3_file *p)
{
    return fe_real(p)->pMethods->xDeviceCharacteristics(fe_real(p));
}

static int fe_shm_map(sqlite3_file *p, int region, int size, int extend, void volatile **out)
{
    if (fe_shm_errno != 0) {
        fe_faults++;
        errno = fe_shm_errno;
        return SQLITE_IOERR_SHMSIZE;
    }
    return fe_real(p)->pMethods->xShmMap(fe_real(p), region, size, extend, out);
}

static int fe_shm_lock(sqlite3_file *p, int offset, int n, int flags)
{
    return fe_real(p)->pMethods->xShmLock(fe_real(p), offset, n, flags);
}

static void fe_shm_barrier(sqlite3_file *p)
{
    fe_real(p)->pMethods->xShmBarrier(fe_real(p));
}

static int fe_shm_unmap(sqlite3_file *p, int delete_flag)
{
    return fe_real(p)->pMethods->xShmUnmap(fe_real(p), delete_flag);
}

static const sqlite3_io_methods fe_methods = {
    2,
    fe_close,
    fe_read,
    fe_write,
    fe_truncate,
    fe_sync,
    fe_file_size,
    fe_lock,
    fe_unlock,
    fe_check_reserved_lock,
    fe_file_control,
    fe_sector_size,
    fe_device_characteristics,
    fe_shm_map,
    fe_shm_lock,
    fe_shm_barrier,
    fe_shm_unmap,
    NULL,
    NULL,
};

static int fe_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *p, int flags, int *out)
{
    (void)vfs;
    struct fe_file *f = (struct fe_file *)p;
    f->real = (sqlite3_file *)&f[1];
    snprintf(f->name, sizeof f->name, "%s", name != NULL ? name : "");
    int rc = fe_base->xOpen(fe_base, name, f->real, flags, out);
    p->pMethods = rc == SQLITE_OK ? &fe_methods : NULL;
    return rc;
}

static int fe_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    (void)vfs;
    return fe_base->xDelete(fe_base, name, sync_dir);
}

static int fe_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return fe_base->xAccess(fe_base, name, flags, out);
}

static int fe_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return fe_base->xFullPathname(fe_base, name, n, out);
}

static int fe_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return fe_base->xRandomness(fe_base, n, out);
}

static int fe_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return fe_base->xSleep(fe_base, us);
}

static int fe_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return fe_base->xCurrentTime(fe_base, out);
}

static int fe_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return fe_base->xGetLastError(fe_base, n, out);
}

static sqlite3_vfs fe_vfs;

static int fe_register(void)
{
    fe_base = sqlite3_vfs_find(NULL);
    if (fe_base == NULL) {
        return SQLITE_ERROR;
    }
    fe_vfs = (sqlite3_vfs){
        .iVersion = 1,
        .szOsFile = (int)sizeof(struct fe_file) + fe_base->szOsFile,
        .mxPathname = fe_base->mxPathname,
        .zName = "faulty",
        .xOpen = fe_open,
        .xDelete = fe_delete,
        .xAccess = fe_access,
        .xFullPathname = fe_full_pathname,
        .xRandomness = fe_randomness,
        .xSleep = fe_sleep,
        .xCurrentTime = fe_current_time,
        .xGetLastError = fe_get_last_error,
    };
    return sqlite3_vfs_register(&fe_vfs, 1);
}

static int fe_open_store(const char *address, mv_store **s, char *err, size_t err_size)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    return mv_store_open(address, FE_PASSWORD, strlen(FE_PASSWORD), &o, s, err, err_size);
}

/* A full disk when a store is opened (its WAL index cannot be made): MV_ENOSPC, "no space
 * left on device", not MV_EIO "disk I/O error"; nothing changed, and the store opens once
 * there is room again. */
static void test_full_disk_on_open(void)
{
    static const char msg[] = "From: a@example.org\r\nSubject: hi\r\n\r\nhello\r\n";
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("alice", FE_PASSWORD, 0, &s), MV_OK);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", msg, sizeof msg - 1, 0, NULL, 0, NULL), MV_OK);
    mv_store_close(&s);
    char err[512] = "";
    fe_shm_errno = ENOSPC;
    int faults = fe_faults;
    int rc = fe_open_store("alice@example.org", &s, err, sizeof err);
    fe_shm_errno = 0;
    printf("  # %s (%d)\n", err, rc);
    CHECK(fe_faults > faults);
    CHECK_EQ_INT(rc, MV_ENOSPC);
    CHECK(strstr(err, "no space left on device") != NULL && strchr(err, '\n') == NULL);
    CHECK(s == NULL);
    CHECK_EQ_INT(fe_open_store("alice@example.org", &s, err, sizeof err), MV_OK);
    mv_store_close(&s);
}

/* A read error while a copy is verified (restore, passwd): one line naming the read error,
 * MV_EIO, not quick_check's "*** in database main ***" findings blaming the data
 * (MV_ECORRUPT). Only the last page fails, so the copy opens and quick_check meets it. */
static void test_read_error_in_verify(void)
{
    const char *path = tu_path("verify.db");
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, FE_PASSWORD, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    tu_fill_table(db, 1, 200);
    sqlite3_close(db);
    long long size = tu_file_size(path);
    CHECK(size >= 16LL * 4096);
    fe_read_suffix = "verify.db";
    fe_read_from = size - 4096;
    int faults = fe_faults;
    struct ops_state state;
    char err[512] = "";
    int rc = ops_snapshot_verify(path, FE_PASSWORD, strlen(FE_PASSWORD), TU_KDF_ITER, 0, NULL,
                                 &state, err, sizeof err);
    fe_read_suffix = NULL;
    printf("  # %s (%d)\n", err, rc);
    CHECK(fe_faults > faults);
    CHECK_EQ_INT(rc, MV_EIO);
    CHECK(strchr(err, '\n') == NULL && strstr(err, "Input/output error") != NULL);
    CHECK(strstr(err, "quick_check found problems") == NULL);
    rc = ops_snapshot_verify(path, FE_PASSWORD, strlen(FE_PASSWORD), TU_KDF_ITER, 0, NULL, &state,
                             err, sizeof err);
    /* Without the fault quick_check passes (the state read then wants a store's tables). */
    printf("  # without the fault: %s (%d)\n", err, rc);
    CHECK(strstr(err, "quick_check") == NULL &&
          strstr(err, "cannot read the store's state") != NULL);
    tu_remove_db(path);
}

/* A checkpoint that fails on a write error (passwd, restore: step 2) names the write error,
 * not "another connection ... is using it" (MV_EBUSY), which only a busy checkpoint means. */
static void test_failed_checkpoint_names_its_cause(void)
{
    const char *path = tu_path("ckpt.db");
    sqlite3 *writer = NULL, *db = NULL;
    CHECK_EQ_INT(tu_open(path, FE_PASSWORD, MV_CIPHER_CHACHA20, MV_DB_CREATE, &writer), MV_OK);
    CHECK_EQ_INT(tu_exec(writer, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0"),
                 SQLITE_OK);
    tu_fill_table(writer, 1, 50); /* frames in the WAL, which stays while writer is open */
    char wal[1100];
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK(tu_file_size(wal) > 0);
    fe_write_suffix = "ckpt.db";
    int faults = fe_faults;
    char err[512] = "";
    int rc = ops_swap_open_old(path, FE_PASSWORD, strlen(FE_PASSWORD), TU_KDF_ITER, &db, err,
                               sizeof err);
    fe_write_suffix = NULL;
    printf("  # %s (%d)\n", err, rc);
    CHECK(fe_faults > faults);
    CHECK_EQ_INT(rc, MV_EIO);
    CHECK(strstr(err, "another connection") == NULL && strstr(err, "Input/output error") != NULL);
    sqlite3_close(db);
    sqlite3_close(writer);
    tu_remove_db(path);
}

int main(void)
{
    if (fe_register() != SQLITE_OK || mv_vfs_register("faulty", 0) != MV_OK) {
        fprintf(stderr, "cannot register the test VFS\n");
        return 1;
    }
    TEST(test_full_disk_on_open);
    TEST(test_read_error_in_verify);
    TEST(test_failed_checkpoint_names_its_cause);
    return th_summary();
}
