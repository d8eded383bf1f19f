/*
 * vfs_register.c -- the "mailvault" VFS object: registration, xOpen dispatch by file kind,
 * the shared sqlite3_io_methods table, and the pass-through VFS methods.
 *
 * USAGE
 *   mv_vfs_register(NULL, 1);   // stack on the current default VFS and become the default
 *   sqlite3_open_v2("f.db", &db, flags, "mailvault");
 *   PRAGMA cipher='chacha20'; PRAGMA key='...';
 *
 * IMPLEMENTATION NOTES
 *   - The file object is one allocation: struct mv_file, then the lower VFS's file
 *     (szOsFile = sizeof(struct mv_file) + lower->szOsFile), as SQLite's cksumvfs does.
 *   - The I/O methods are version 2: no xFetch, so SQLite never memory-maps ciphertext and
 *     every page goes through xRead. A file whose lower file offers no shared memory (I/O
 *     methods version 1 or no xShmMap, as Ceph's libcephsqlite) gets a version 1 table:
 *     the shim mirrors what the lower VFS offers, so SQLite sees that WAL needs exclusive
 *     locking there instead of calling through a NULL method (mv_db_open then sets it).
 *   - An auto-extension hands each new connection to its main file (MV_FCNTL_ATTACH): a
 *     VFS sees no connection, but setting the reserve bytes of a new file needs one.
 */
#include "vfs/vfs.h"
#include "vfs/vfs_hint.h"
#include "vfs/vfs_tempdir.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static sqlite3_vfs mv_vfs;
static sqlite3_vfs *mv_lower;
static pthread_mutex_t mv_register_mutex = PTHREAD_MUTEX_INITIALIZER;

sqlite3_vfs *mv_vfs_lower(void)
{
    return mv_lower;
}

static struct mv_file *mv_file_of(sqlite3_file *p)
{
    return (struct mv_file *)p;
}

/* ---- I/O methods ------------------------------------------------------------------------ */

static int mv_io_close(sqlite3_file *p)
{
    struct mv_file *f = mv_file_of(p);
    int rc = SQLITE_OK;
    if (f->kind == MV_FILE_WAL) {
        rc = mv_wal_flush(f);
        mv_wal_free_frame_pgnos(f);
    }
    if (f->kind == MV_FILE_MAIN) {
        mv_registry_remove(f);
        f->codec->main_file = NULL;
        mv_main_read_release(f);
        mv_interior_free(f);
    }
    if (f->kind == MV_FILE_TEMP) {
        mv_temp_close(f);
    }
    int rc2 = f->lower->pMethods != NULL ? f->lower->pMethods->xClose(f->lower) : SQLITE_OK;
    mv_codec_release(f->codec);
    f->codec = NULL;
    sqlite3_free(f->temp_name);
    f->temp_name = NULL;
    return rc != SQLITE_OK ? rc : rc2;
}

/* The device failed the read: an I/O error that is neither the end of the file, nor a page
 * that failed authentication (the data), nor memory. */
static int mv_io_read_failed(int rc)
{
    return (rc & 0xff) == SQLITE_IOERR && rc != SQLITE_IOERR_SHORT_READ &&
           rc != SQLITE_IOERR_DATA && rc != SQLITE_IOERR_NOMEM;
}

static int mv_io_read(sqlite3_file *p, void *buf, int amt, sqlite3_int64 off)
{
    struct mv_file *f = mv_file_of(p);
    int rc;
    switch (f->kind) {
    case MV_FILE_MAIN:
        rc = mv_main_read(f, buf, amt, off);
        break;
    case MV_FILE_JOURNAL:
        rc = mv_journal_read(f, buf, amt, off);
        break;
    case MV_FILE_WAL:
        rc = mv_wal_read(f, buf, amt, off);
        break;
    case MV_FILE_TEMP:
        return mv_temp_read(f, buf, amt, off);
    default:
        return f->lower->pMethods->xRead(f->lower, buf, amt, off);
    }
    if (mv_io_read_failed(rc) && f->codec != NULL) {
        f->codec->read_errors++;
    }
    return rc;
}

static int mv_io_write(sqlite3_file *p, const void *buf, int amt, sqlite3_int64 off)
{
    struct mv_file *f = mv_file_of(p);
    switch (f->kind) {
    case MV_FILE_MAIN:
        mv_main_read_drop(f); /* a held window is only good while the file does not change */
        return mv_main_write(f, buf, amt, off);
    case MV_FILE_JOURNAL:
        return mv_journal_write(f, buf, amt, off);
    case MV_FILE_WAL:
        return mv_wal_write(f, buf, amt, off);
    case MV_FILE_TEMP:
        return mv_temp_write(f, buf, amt, off);
    default:
        return f->lower->pMethods->xWrite(f->lower, buf, amt, off);
    }
}

static int mv_io_truncate(sqlite3_file *p, sqlite3_int64 size)
{
    struct mv_file *f = mv_file_of(p);
    if (f->kind == MV_FILE_TEMP) {
        return mv_temp_truncate(f, size);
    }
    if (f->kind == MV_FILE_MAIN) {
        mv_main_read_drop(f);
    }
    if (f->kind == MV_FILE_WAL) {
        mv_wal_forget_chain(f);
        mv_wal_forget_frame_pgnos(f);
        int rc = mv_wal_flush(f);
        if (rc != SQLITE_OK) {
            return rc;
        }
    }
    if ((f->kind == MV_FILE_MAIN || f->kind == MV_FILE_JOURNAL || f->kind == MV_FILE_WAL) &&
        mv_codec_write_blocked(f->codec)) {
        return SQLITE_READONLY;
    }
    return f->lower->pMethods->xTruncate(f->lower, size);
}

static _Atomic uint64_t mv_wal_syncs;

uint64_t mv_vfs_wal_syncs(void)
{
    return atomic_load(&mv_wal_syncs);
}

static int mv_io_sync(sqlite3_file *p, int flags)
{
    struct mv_file *f = mv_file_of(p);
    if (f->kind == MV_FILE_WAL) {
        atomic_fetch_add(&mv_wal_syncs, 1);
        int rc = mv_wal_flush(f);
        if (rc != SQLITE_OK) {
            return rc;
        }
    }
    return f->lower->pMethods->xSync(f->lower, flags);
}

static int mv_io_file_size(sqlite3_file *p, sqlite3_int64 *size)
{
    struct mv_file *f = mv_file_of(p);
    if (f->kind == MV_FILE_TEMP) {
        *size = f->temp_size;
        return SQLITE_OK;
    }
    if (f->kind == MV_FILE_WAL) {
        int rc = mv_wal_flush(f);
        if (rc != SQLITE_OK) {
            return rc;
        }
    }
    return f->lower->pMethods->xFileSize(f->lower, size);
}

static int mv_io_lock(sqlite3_file *p, int level)
{
    struct mv_file *f = mv_file_of(p);
    if (f->kind == MV_FILE_MAIN) {
        mv_main_read_drop(f); /* a transaction begins (rollback journal mode) */
    }
    int rc = f->lower->pMethods->xLock(f->lower, level);
    if (rc == SQLITE_OK) {
        f->lock_level = level;
    }
    return rc;
}

static int mv_io_unlock(sqlite3_file *p, int level)
{
    struct mv_file *f = mv_file_of(p);
    if (f->kind == MV_FILE_MAIN) {
        mv_main_read_drop(f); /* a transaction ends (rollback journal mode) */
    }
    int rc = f->lower->pMethods->xUnlock(f->lower, level);
    if (rc == SQLITE_OK) {
        f->lock_level = level;
    }
    return rc;
}

static int mv_io_check_reserved_lock(sqlite3_file *p, int *out)
{
    struct mv_file *f = mv_file_of(p);
    return f->lower->pMethods->xCheckReservedLock(f->lower, out);
}

static int mv_io_file_control(sqlite3_file *p, int op, void *arg)
{
    struct mv_file *f = mv_file_of(p);
    if (f->kind == MV_FILE_MAIN) {
        switch (op) {
        case SQLITE_FCNTL_PRAGMA: {
            int rc = mv_keying_pragma(f, (char **)arg);
            if (rc != SQLITE_NOTFOUND) {
                return rc;
            }
            break;
        }
        case MV_FCNTL_KEY:
            return mv_keying_apply(f, (struct mv_fcntl_key *)arg);
        case MV_FCNTL_ERRMSG:
            *(const char **)arg = f->codec->errmsg[0] != '\0' ? f->codec->errmsg : NULL;
            return SQLITE_OK;
        case MV_FCNTL_READ_ERRORS:
            *(uint64_t *)arg = f->codec->read_errors;
            return SQLITE_OK;
        case MV_FCNTL_ATTACH:
            mv_keying_attach(f, (sqlite3 *)arg);
            return SQLITE_OK;
        case MV_FCNTL_KEY_SHARE:
            return mv_keying_share(f, (struct mv_fcntl_key_share *)arg);
        case MV_FCNTL_READ_AHEAD:
            mv_main_read_ahead_hint(f, *(const sqlite3_int64 *)arg);
            return SQLITE_OK;
        case MV_FCNTL_READ_NEAR:
            mv_main_read_near_hint(f, *(const int *)arg);
            return SQLITE_OK;
        case MV_FCNTL_PREFETCH:
            mv_main_prefetch(f, (struct mv_fcntl_prefetch *)arg);
            return SQLITE_OK;
        case MV_FCNTL_INFO: {
            struct mv_db_info *info = arg;
            const struct mv_codec *c = f->codec;
            memset(info, 0, sizeof *info);
            info->cipher =
                c->crypt != NULL ? (mv_cipher)crypt_ctx_cipher(c->crypt) : MV_CIPHER_NONE;
            info->kdf_iter = c->crypt != NULL ? crypt_ctx_kdf_iter(c->crypt) : 0;
            info->legacy = c->crypt != NULL ? crypt_ctx_legacy(c->crypt) : 0;
            info->reserve_bytes =
                c->crypt != NULL ? (int)crypt_reserve_bytes(crypt_ctx_cipher(c->crypt)) : 0;
            info->page_size = (int)c->page_size;
            return SQLITE_OK;
        }
        default:
            break;
        }
    }
    if (op == SQLITE_FCNTL_MMAP_SIZE) {
        /* Memory-mapped I/O would hand SQLite ciphertext: keep it off. */
        *(sqlite3_int64 *)arg = 0;
        return SQLITE_OK;
    }
    if (op == SQLITE_FCNTL_VFSNAME) {
        int rc = f->lower->pMethods->xFileControl(f->lower, op, arg);
        if (rc == SQLITE_OK) {
            char *inner = *(char **)arg;
            *(char **)arg = sqlite3_mprintf("%s/%z", MV_VFS_NAME, inner);
        }
        return rc;
    }
    return f->lower->pMethods->xFileControl(f->lower, op, arg);
}

static int mv_io_sector_size(sqlite3_file *p)
{
    struct mv_file *f = mv_file_of(p);
    return f->lower->pMethods->xSectorSize(f->lower);
}

static int mv_io_device_characteristics(sqlite3_file *p)
{
    struct mv_file *f = mv_file_of(p);
    int dc = f->lower->pMethods->xDeviceCharacteristics(f->lower);
    /* Batch-atomic writes would let SQLite skip the journal through a path we do not
     * intercept; a temp file's logical size differs from its physical size, so no
     * "size changes atomically" promise either. */
    dc &= ~SQLITE_IOCAP_BATCH_ATOMIC;
    return dc;
}

static int mv_io_shm_map(sqlite3_file *p, int pg, int pgsz, int extend, void volatile **pp)
{
    struct mv_file *f = mv_file_of(p);
    return f->lower->pMethods->xShmMap(f->lower, pg, pgsz, extend, pp);
}

static int mv_io_shm_lock(sqlite3_file *p, int offset, int n, int flags)
{
    struct mv_file *f = mv_file_of(p);
    if (f->kind == MV_FILE_MAIN) {
        mv_main_read_drop(f); /* a WAL transaction begins or ends: its held window is done */
        /* Frames this connection holds back go down before another connection can write
         * the WAL (vfs_wal.c, BATCHES). A failed write fails a lock, not an unlock: those
         * frames were of no committed transaction. */
        int wrc = mv_wal_batch_flush_for(f);
        if (wrc != SQLITE_OK && (flags & SQLITE_SHM_LOCK) != 0) {
            return wrc;
        }
    }
    int rc = f->lower->pMethods->xShmLock(f->lower, offset, n, flags);
    mv_wal_shm_lock_seen(f, offset, n, flags, rc);
    return rc;
}

static void mv_io_shm_barrier(sqlite3_file *p)
{
    struct mv_file *f = mv_file_of(p);
    f->lower->pMethods->xShmBarrier(f->lower);
}

static int mv_io_shm_unmap(sqlite3_file *p, int delete_flag)
{
    struct mv_file *f = mv_file_of(p);
    return f->lower->pMethods->xShmUnmap(f->lower, delete_flag);
}

const sqlite3_io_methods mv_io_methods = {
    2, /* iVersion 2: shared memory for WAL, but no xFetch (no mmap of ciphertext) */
    mv_io_close,
    mv_io_read,
    mv_io_write,
    mv_io_truncate,
    mv_io_sync,
    mv_io_file_size,
    mv_io_lock,
    mv_io_unlock,
    mv_io_check_reserved_lock,
    mv_io_file_control,
    mv_io_sector_size,
    mv_io_device_characteristics,
    mv_io_shm_map,
    mv_io_shm_lock,
    mv_io_shm_barrier,
    mv_io_shm_unmap,
    NULL,
    NULL,
};

/* The same methods without shared memory, for files whose lower file has none: SQLite then
 * allows WAL only with locking_mode=EXCLUSIVE, keeping the WAL index in heap memory. */
static const sqlite3_io_methods mv_io_methods_noshm = {
    1,
    mv_io_close,
    mv_io_read,
    mv_io_write,
    mv_io_truncate,
    mv_io_sync,
    mv_io_file_size,
    mv_io_lock,
    mv_io_unlock,
    mv_io_check_reserved_lock,
    mv_io_file_control,
    mv_io_sector_size,
    mv_io_device_characteristics,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

int mv_vfs_file_is_ours(const sqlite3_file *p)
{
    return p != NULL && (p->pMethods == &mv_io_methods || p->pMethods == &mv_io_methods_noshm);
}

int mv_vfs_file_has_shm(const sqlite3_file *p)
{
    return p != NULL && p->pMethods == &mv_io_methods;
}

/* Whether an open lower file offers the four shared-memory methods SQLite's WAL calls. */
static int mv_lower_has_shm(const sqlite3_file *lower)
{
    const sqlite3_io_methods *m = lower->pMethods;
    return m != NULL && m->iVersion >= 2 && m->xShmMap != NULL && m->xShmLock != NULL &&
           m->xShmBarrier != NULL && m->xShmUnmap != NULL;
}

/* ---- VFS methods ------------------------------------------------------------------------ */

static int mv_kind_for(const char *zName, int flags)
{
    /* (1) unnamed files and (2) every kind SQLite deletes on close are temporary. */
    if (zName == NULL || (flags & (SQLITE_OPEN_TEMP_DB | SQLITE_OPEN_TEMP_JOURNAL |
                                   SQLITE_OPEN_TRANSIENT_DB | SQLITE_OPEN_SUBJOURNAL)) != 0) {
        return MV_FILE_TEMP;
    }
    if (flags & SQLITE_OPEN_MAIN_DB) {
        return MV_FILE_MAIN;
    }
    if (flags & SQLITE_OPEN_MAIN_JOURNAL) {
        return MV_FILE_JOURNAL;
    }
    if (flags & SQLITE_OPEN_WAL) {
        return MV_FILE_WAL;
    }
    return MV_FILE_PLAIN;
}

static int
mv_vfs_open(sqlite3_vfs *vfs, sqlite3_filename zName, sqlite3_file *p, int flags, int *out_flags)
{
    (void)vfs;
    struct mv_file *f = mv_file_of(p);
    memset(f, 0, sizeof *f);
    f->lower = (sqlite3_file *)&f[1];
    f->name = zName;
    f->kind = mv_kind_for(zName, flags);
    f->record_pgno_offset = -1;
    f->record_page_end = -1;

    if (f->kind == MV_FILE_MAIN) {
        f->codec = mv_codec_new();
        if (f->codec == NULL) {
            return SQLITE_NOMEM;
        }
        f->codec->main_file = f;
    } else if (f->kind == MV_FILE_JOURNAL || f->kind == MV_FILE_WAL) {
        f->codec = mv_registry_codec_for(zName);
        if (f->codec == NULL) {
            f->kind = MV_FILE_PLAIN; /* a journal of a file not opened through us */
        }
    }
    const char *open_name = zName;
    if (f->kind == MV_FILE_TEMP && zName == NULL && mv_vfs_temp_dir_get() != NULL) {
        /* Name it in the store's tmp/ directory; the lower VFS unlinks it on open. */
        uint8_t rnd[8];
        if (crypt_random(rnd, sizeof rnd) != CRYPT_OK) {
            return SQLITE_IOERR;
        }
        f->temp_name =
            sqlite3_mprintf("%s/mvtmp-%02x%02x%02x%02x%02x%02x%02x%02x", mv_vfs_temp_dir_get(),
                            rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
        if (f->temp_name == NULL) {
            return SQLITE_NOMEM;
        }
        open_name = f->temp_name;
        flags |= SQLITE_OPEN_DELETEONCLOSE | SQLITE_OPEN_EXCLUSIVE | SQLITE_OPEN_CREATE;
    }
    int rc = mv_lower->xOpen(mv_lower, open_name, f->lower, flags, out_flags);
    if (rc != SQLITE_OK) {
        mv_codec_release(f->codec);
        f->codec = NULL;
        sqlite3_free(f->temp_name);
        f->temp_name = NULL;
        f->lower->pMethods = NULL;
        p->pMethods = NULL;
        return rc;
    }
    p->pMethods = mv_lower_has_shm(f->lower) ? &mv_io_methods : &mv_io_methods_noshm;
    if (f->kind == MV_FILE_TEMP) {
        rc = mv_temp_open(f);
    } else if (f->kind == MV_FILE_MAIN) {
        rc = mv_keying_from_uri(f, zName);
        if (rc == SQLITE_OK) {
            mv_registry_add(f);
        }
    }
    if (rc != SQLITE_OK) {
        mv_io_close(p);
        p->pMethods = NULL;
    }
    return rc;
}

static int mv_vfs_delete(sqlite3_vfs *vfs, const char *zName, int sync_dir)
{
    (void)vfs;
    return mv_lower->xDelete(mv_lower, zName, sync_dir);
}

/* A hot journal or a WAL of a file whose key is missing or wrong is hidden: rolling it back
 * or recovering it would write to the database with keys that cannot decrypt it. */
static int mv_vfs_access(sqlite3_vfs *vfs, const char *zName, int flags, int *out)
{
    (void)vfs;
    int rc = mv_lower->xAccess(mv_lower, zName, flags, out);
    if (rc == SQLITE_OK && *out != 0 && flags == SQLITE_ACCESS_EXISTS) {
        struct mv_codec *c = mv_registry_codec_for(zName);
        if (c != NULL) {
            if (mv_codec_write_blocked(c)) {
                *out = 0;
            }
            mv_codec_release(c);
        }
    }
    return rc;
}

static int mv_vfs_full_pathname(sqlite3_vfs *vfs, const char *zName, int n, char *out)
{
    (void)vfs;
    return mv_lower->xFullPathname(mv_lower, zName, n, out);
}

static void *mv_vfs_dl_open(sqlite3_vfs *vfs, const char *zPath)
{
    (void)vfs;
    return mv_lower->xDlOpen(mv_lower, zPath);
}

static void mv_vfs_dl_error(sqlite3_vfs *vfs, int n, char *zErr)
{
    (void)vfs;
    mv_lower->xDlError(mv_lower, n, zErr);
}

static void (*mv_vfs_dl_sym(sqlite3_vfs *vfs, void *h, const char *z))(void)
{
    (void)vfs;
    return mv_lower->xDlSym(mv_lower, h, z);
}

static void mv_vfs_dl_close(sqlite3_vfs *vfs, void *h)
{
    (void)vfs;
    mv_lower->xDlClose(mv_lower, h);
}

static int mv_vfs_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return mv_lower->xRandomness(mv_lower, n, out);
}

static int mv_vfs_sleep(sqlite3_vfs *vfs, int us)
{
    (void)vfs;
    return mv_lower->xSleep(mv_lower, us);
}

static int mv_vfs_current_time(sqlite3_vfs *vfs, double *out)
{
    (void)vfs;
    return mv_lower->xCurrentTime(mv_lower, out);
}

static int mv_vfs_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    (void)vfs;
    return mv_lower->xGetLastError(mv_lower, n, out);
}

static int mv_vfs_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    (void)vfs;
    if (mv_lower->iVersion >= 2 && mv_lower->xCurrentTimeInt64 != NULL) {
        return mv_lower->xCurrentTimeInt64(mv_lower, out);
    }
    double d;
    int rc = mv_lower->xCurrentTime(mv_lower, &d);
    *out = (sqlite3_int64)(d * 86400000.0);
    return rc;
}

/* Every new connection: tell its main file which connection it belongs to. */
static int
mv_connection_hook(sqlite3 *db, const char **pzErrMsg, const struct sqlite3_api_routines *api)
{
    (void)pzErrMsg;
    (void)api;
    sqlite3_file *fp = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &fp) == SQLITE_OK &&
        mv_vfs_file_is_ours(fp)) {
        (void)sqlite3_file_control(db, "main", MV_FCNTL_ATTACH, db);
    }
    return SQLITE_OK;
}

int mv_vfs_register(const char *lower_vfs_name, int make_default)
{
    int rc = MV_OK;
    if (crypt_init() != CRYPT_OK) {
        return MV_ERROR;
    }
    pthread_mutex_lock(&mv_register_mutex);
    if (mv_lower == NULL) {
        sqlite3_vfs *lower = sqlite3_vfs_find(lower_vfs_name);
        if (lower == NULL || strcmp(lower->zName, MV_VFS_NAME) == 0) {
            rc = MV_ENOTFOUND;
            goto done;
        }
        mv_vfs = (sqlite3_vfs){
            .iVersion = 2,
            .szOsFile = (int)sizeof(struct mv_file) + lower->szOsFile,
            .mxPathname = lower->mxPathname,
            .zName = MV_VFS_NAME,
            .xOpen = mv_vfs_open,
            .xDelete = mv_vfs_delete,
            .xAccess = mv_vfs_access,
            .xFullPathname = mv_vfs_full_pathname,
            .xDlOpen = mv_vfs_dl_open,
            .xDlError = mv_vfs_dl_error,
            .xDlSym = mv_vfs_dl_sym,
            .xDlClose = mv_vfs_dl_close,
            .xRandomness = mv_vfs_randomness,
            .xSleep = mv_vfs_sleep,
            .xCurrentTime = mv_vfs_current_time,
            .xGetLastError = mv_vfs_get_last_error,
            .xCurrentTimeInt64 = mv_vfs_current_time_int64,
        };
        mv_lower = lower;
        if (sqlite3_vfs_register(&mv_vfs, make_default) != SQLITE_OK) {
            mv_lower = NULL;
            rc = MV_ERROR;
            goto done;
        }
        if (sqlite3_auto_extension((void (*)(void))mv_connection_hook) != SQLITE_OK) {
            rc = MV_ERROR;
            goto done;
        }
    } else if (make_default) {
        (void)sqlite3_vfs_register(&mv_vfs, 1);
    }
done:
    pthread_mutex_unlock(&mv_register_mutex);
    return rc;
}
