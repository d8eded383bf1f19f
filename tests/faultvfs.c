/*
 * faultvfs.c -- the fault-injecting VFS of faultvfs.h: a pass-through shim in the shape of
 * SQLite's vfsstat.c (our file struct first, the lower VFS's file right after it in one
 * allocation), which counts the calls of the armed plan and fails the chosen one.
 */
#include "faultvfs.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <string.h>

struct fv_file {
    sqlite3_file base;
    sqlite3_file *real; /* the lower VFS's file, right after this struct */
};

static sqlite3_vfs fv_vfs;
static sqlite3_vfs *fv_lower;

static struct fv_plan fv_plan;
static atomic_int fv_armed;
static atomic_int fv_fired;
static atomic_int fv_dead; /* FV_TORN happened: everything fails until fv_disarm() */
static atomic_ulong fv_counts[FV_OP_COUNT];
static atomic_ulong fv_small_reads[FV_SMALL_READ_MAX + 1]; /* by length, while armed */
static atomic_ulong fv_multipage_reads; /* reads of more than FV_PAGE_MAX bytes, while armed */
static atomic_ulong fv_largest_read;    /* the largest read's length, while armed */

void fv_arm(const struct fv_plan *plan)
{
    fv_plan = *plan;
    for (int i = 0; i < FV_OP_COUNT; i++) {
        atomic_store(&fv_counts[i], 0);
    }
    for (int i = 0; i <= FV_SMALL_READ_MAX; i++) {
        atomic_store(&fv_small_reads[i], 0);
    }
    atomic_store(&fv_multipage_reads, 0);
    atomic_store(&fv_largest_read, 0);
    atomic_store(&fv_fired, 0);
    atomic_store(&fv_dead, 0);
    atomic_store(&fv_armed, 1);
}

int fv_disarm(void)
{
    atomic_store(&fv_armed, 0);
    atomic_store(&fv_dead, 0);
    return atomic_load(&fv_fired);
}

unsigned long fv_calls(int op)
{
    return op >= 0 && op < FV_OP_COUNT ? atomic_load(&fv_counts[op]) : 0;
}

unsigned long fv_reads_multipage(void)
{
    return atomic_load(&fv_multipage_reads);
}

unsigned long fv_read_largest(void)
{
    return atomic_load(&fv_largest_read);
}

unsigned long fv_reads_of(int amt)
{
    return amt >= 0 && amt <= FV_SMALL_READ_MAX ? atomic_load(&fv_small_reads[amt]) : 0;
}

const char *fv_op_name(int op)
{
    static const char *const names[FV_OP_COUNT] = {"read", "write",    "sync",
                                                   "open", "truncate", "any"};
    return op >= 0 && op < FV_OP_COUNT ? names[op] : "?";
}

const char *fv_mode_name(int mode)
{
    return mode == FV_FAIL ? "fail" : mode == FV_SHORT ? "short" : mode == FV_TORN ? "torn" : "?";
}

/* Counts one call of kind op; returns the mode to apply (FV_FAIL, FV_SHORT, FV_TORN) or -1
 * to pass it through. */
static int fv_decide(int op)
{
    if (!atomic_load(&fv_armed)) {
        return -1;
    }
    if (atomic_load(&fv_dead)) {
        return FV_FAIL;
    }
    unsigned long n = atomic_fetch_add(&fv_counts[op], 1) + 1;
    unsigned long any = atomic_fetch_add(&fv_counts[FV_ANY], 1) + 1;
    unsigned long seen = fv_plan.op == FV_ANY ? any : fv_plan.op == op ? n : 0;
    if (seen == 0 || seen < fv_plan.nth || (seen > fv_plan.nth && !fv_plan.persist)) {
        return -1;
    }
    atomic_store(&fv_fired, 1);
    if (fv_plan.mode == FV_TORN) {
        atomic_store(&fv_dead, 1);
    }
    return fv_plan.mode;
}

/* Returns rc as a failing disk does: with errno EIO, which SQLite's unix VFS leaves behind
 * and reports through xGetLastError() (sqlite3_system_errno()); without it the message
 * would name whatever an earlier call left in errno. */
static int fv_eio(int rc)
{
    errno = EIO;
    return rc;
}

static int fv_close(sqlite3_file *p)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xClose(f->real);
}

static int fv_read(sqlite3_file *p, void *buf, int amt, sqlite3_int64 off)
{
    struct fv_file *f = (struct fv_file *)p;
    if (atomic_load(&fv_armed) && amt >= 0 && amt <= FV_SMALL_READ_MAX) {
        atomic_fetch_add(&fv_small_reads[amt], 1);
    }
    if (atomic_load(&fv_armed) && amt > 0) {
        if (amt > FV_PAGE_MAX) {
            atomic_fetch_add(&fv_multipage_reads, 1);
        }
        unsigned long seen = atomic_load(&fv_largest_read);
        while ((unsigned long)amt > seen &&
               !atomic_compare_exchange_weak(&fv_largest_read, &seen, (unsigned long)amt)) {
        }
    }
    if (fv_decide(FV_READ) >= 0) {
        return fv_eio(SQLITE_IOERR_READ);
    }
    return f->real->pMethods->xRead(f->real, buf, amt, off);
}

static int fv_write(sqlite3_file *p, const void *buf, int amt, sqlite3_int64 off)
{
    struct fv_file *f = (struct fv_file *)p;
    int mode = fv_decide(FV_WRITE);
    if (mode < 0) {
        return f->real->pMethods->xWrite(f->real, buf, amt, off);
    }
    if (mode != FV_FAIL && amt > 1) {
        (void)f->real->pMethods->xWrite(f->real, buf, amt / 2, off);
    }
    return fv_eio(SQLITE_IOERR_WRITE);
}

static int fv_truncate(sqlite3_file *p, sqlite3_int64 size)
{
    struct fv_file *f = (struct fv_file *)p;
    if (fv_decide(FV_TRUNCATE) >= 0) {
        return fv_eio(SQLITE_IOERR_TRUNCATE);
    }
    return f->real->pMethods->xTruncate(f->real, size);
}

static int fv_sync(sqlite3_file *p, int flags)
{
    struct fv_file *f = (struct fv_file *)p;
    if (fv_decide(FV_SYNC) >= 0) {
        return fv_eio(SQLITE_IOERR_FSYNC);
    }
    return f->real->pMethods->xSync(f->real, flags);
}

static int fv_file_size(sqlite3_file *p, sqlite3_int64 *size)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xFileSize(f->real, size);
}

static int fv_lock(sqlite3_file *p, int level)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xLock(f->real, level);
}

static int fv_unlock(sqlite3_file *p, int level)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xUnlock(f->real, level);
}

static int fv_check_reserved(sqlite3_file *p, int *out)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int fv_file_control(sqlite3_file *p, int op, void *arg)
{
    struct fv_file *f = (struct fv_file *)p;
    int rc = f->real->pMethods->xFileControl(f->real, op, arg);
    if (rc == SQLITE_OK && op == SQLITE_FCNTL_VFSNAME) {
        *(char **)arg = sqlite3_mprintf("%s/%z", FV_VFS_NAME, *(char **)arg);
    }
    return rc;
}

static int fv_sector_size(sqlite3_file *p)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xSectorSize(f->real);
}

static int fv_device_characteristics(sqlite3_file *p)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int fv_shm_map(sqlite3_file *p, int pg, int pgsz, int extend, void volatile **pp)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xShmMap(f->real, pg, pgsz, extend, pp);
}

static int fv_shm_lock(sqlite3_file *p, int offset, int n, int flags)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

static void fv_shm_barrier(sqlite3_file *p)
{
    struct fv_file *f = (struct fv_file *)p;
    f->real->pMethods->xShmBarrier(f->real);
}

static int fv_shm_unmap(sqlite3_file *p, int delete_flag)
{
    struct fv_file *f = (struct fv_file *)p;
    return f->real->pMethods->xShmUnmap(f->real, delete_flag);
}

static const sqlite3_io_methods fv_io_methods = {
    2, /* no xFetch: the encrypting VFS above never maps a file */
    fv_close,
    fv_read,
    fv_write,
    fv_truncate,
    fv_sync,
    fv_file_size,
    fv_lock,
    fv_unlock,
    fv_check_reserved,
    fv_file_control,
    fv_sector_size,
    fv_device_characteristics,
    fv_shm_map,
    fv_shm_lock,
    fv_shm_barrier,
    fv_shm_unmap,
    NULL,
    NULL,
};

static int fv_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *p, int flags, int *out)
{
    (void)vfs;
    struct fv_file *f = (struct fv_file *)p;
    memset(f, 0, sizeof *f);
    f->real = (sqlite3_file *)&f[1];
    if (fv_decide(FV_OPEN) >= 0) {
        return fv_eio(SQLITE_CANTOPEN);
    }
    int rc = fv_lower->xOpen(fv_lower, name, f->real, flags, out);
    p->pMethods = rc == SQLITE_OK && f->real->pMethods != NULL ? &fv_io_methods : NULL;
    return rc;
}

static int fv_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    (void)vfs;
    return fv_lower->xDelete(fv_lower, name, sync_dir);
}

static int fv_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    (void)vfs;
    return fv_lower->xAccess(fv_lower, name, flags, out);
}

static int fv_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    (void)vfs;
    return fv_lower->xFullPathname(fv_lower, name, n, out);
}

static void *fv_dl_open(sqlite3_vfs *vfs, const char *path)
{
    (void)vfs;
    return fv_lower->xDlOpen(fv_lower, path);
}

static void fv_dl_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    fv_lower->xDlError(fv_lower, n, out);
}

static void (*fv_dl_sym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
    (void)vfs;
    return fv_lower->xDlSym(fv_lower, h, sym);
}

static void fv_dl_close(sqlite3_vfs *vfs, void *h)
{
    (void)vfs;
    fv_lower->xDlClose(fv_lower, h);
}

static int fv_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return fv_lower->xRandomness(fv_lower, n, out);
}

static int fv_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return fv_lower->xSleep(fv_lower, us);
}

static int fv_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return fv_lower->xCurrentTime(fv_lower, out);
}

static int fv_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return fv_lower->xGetLastError(fv_lower, n, out);
}

static int fv_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    (void)vfs;
    return fv_lower->xCurrentTimeInt64(fv_lower, out);
}

int fv_register(void)
{
    if (fv_lower != NULL) {
        return SQLITE_OK;
    }
    fv_lower = sqlite3_vfs_find(NULL);
    if (fv_lower == NULL || fv_lower->iVersion < 2) {
        return SQLITE_ERROR;
    }
    fv_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(struct fv_file) + fv_lower->szOsFile,
        .mxPathname = fv_lower->mxPathname,
        .zName = FV_VFS_NAME,
        .xOpen = fv_open,
        .xDelete = fv_delete,
        .xAccess = fv_access,
        .xFullPathname = fv_full_pathname,
        .xDlOpen = fv_dl_open,
        .xDlError = fv_dl_error,
        .xDlSym = fv_dl_sym,
        .xDlClose = fv_dl_close,
        .xRandomness = fv_randomness,
        .xSleep = fv_sleep,
        .xCurrentTime = fv_current_time,
        .xGetLastError = fv_last_error,
        .xCurrentTimeInt64 = fv_current_time_int64,
    };
    return sqlite3_vfs_register(&fv_vfs, 0);
}
