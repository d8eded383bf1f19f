/*
 * db_open.c -- mv_db_open(): one call that opens an encrypted database with a cipher and a
 * key, and the small accessors around it (mv_db_vfs_errmsg, mv_db_info).
 *
 * For a new file the order matters and is fixed here: key, page size, reserve bytes,
 * auto_vacuum, and only then the first write of page 1 (an empty user_version update).
 */
#include "vfs/db_column.h"
#include "vfs/db_error.h"
#include "vfs/vfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int mv_fail(sqlite3 **db, char **errmsg_out, int code, const char *fmt, const char *detail)
{
    if (errmsg_out != NULL) {
        *errmsg_out = sqlite3_mprintf(fmt, detail != NULL ? detail : "");
    }
    sqlite3_close(*db);
    *db = NULL;
    return code;
}

static int mv_db_set_page_size(sqlite3 *db, int page_size)
{
    char sql[64];
    if (page_size < CRYPT_PAGE_SIZE_MIN || page_size > CRYPT_PAGE_SIZE_MAX ||
        (page_size & (page_size - 1)) != 0) {
        return SQLITE_MISUSE;
    }
    sqlite3_snprintf((int)sizeof sql, sql, "PRAGMA page_size=%d", page_size);
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

/* A lower VFS without shared memory (vfs_register.c) supports WAL only in exclusive locking
 * mode. It must be set before anything reads the file: the first read of a WAL database
 * opens its WAL, and in normal mode SQLite would refuse that (SQLITE_CANTOPEN). Read back,
 * so a connection never runs in a mode the VFS cannot serve. */
static int mv_db_lock_mode_for_lower(sqlite3 *db)
{
    sqlite3_file *fp = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &fp) != SQLITE_OK ||
        !mv_vfs_file_is_ours(fp)) {
        return MV_EINVAL;
    }
    if (mv_vfs_file_has_shm(fp)) {
        return MV_OK;
    }
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA main.locking_mode=EXCLUSIVE", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
    }
    int oom = 0;
    const char *mode = rc == SQLITE_ROW ? mv_db_column_text(st, 0, &oom) : NULL;
    int ok = mode != NULL && strcmp(mode, "exclusive") == 0;
    /* A mode that did not take is MV_ERROR; a failed statement says why (memory). */
    int code = ok                                      ? MV_OK
               : oom                                   ? MV_ENOMEM
               : rc != SQLITE_ROW && rc != SQLITE_DONE ? mv_error_from_sqlite(rc)
                                                       : MV_ERROR;
    sqlite3_finalize(st);
    return code;
}

/* Reads the schema: the first access that decrypts pages. */
static int mv_db_prove(sqlite3 *db, char **errmsg_out)
{
    int rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", NULL, NULL, NULL);
    if (rc == SQLITE_OK) {
        return MV_OK;
    }
    char cause[512];
    int code = mv_db_error_cause(db, sqlite3_extended_errcode(db), cause, sizeof cause);
    if (errmsg_out != NULL) {
        if (code == MV_EAUTH) {
            *errmsg_out = sqlite3_mprintf("wrong password, or not a mailvault/SQLite3MC database");
        } else {
            *errmsg_out = sqlite3_mprintf("%s", cause);
        }
    }
    return code;
}

int mv_db_open(const char *path,
               const void *secret,
               size_t secret_len,
               const struct mv_db_options *opts,
               sqlite3 **db_out,
               char **errmsg_out)
{
    static const struct mv_db_options defaults = MV_DB_OPTIONS_INIT;
    const struct mv_db_options *o = opts != NULL ? opts : &defaults;
    sqlite3 *db = NULL;
    *db_out = NULL;
    if (errmsg_out != NULL) {
        *errmsg_out = NULL;
    }
    if (path == NULL || secret == NULL || secret_len == 0 || o->cipher > MV_CIPHER_NONE ||
        (o->flags & ~(unsigned)(MV_DB_CREATE | MV_DB_READONLY)) != 0) {
        return mv_fail(&db, errmsg_out, MV_EINVAL, "invalid arguments to mv_db_open%s", NULL);
    }
    if (o->busy_timeout_ms < 0) {
        return mv_fail(&db, errmsg_out, MV_EINVAL, "busy_timeout_ms must not be negative%s", NULL);
    }
    if (o->kdf_iter > MV_KDF_ITER_MAX) {
        char why[96];
        snprintf(why, sizeof why, "kdf_iter %lu is above the limit of %lu iterations",
                 (unsigned long)o->kdf_iter, (unsigned long)MV_KDF_ITER_MAX);
        return mv_fail(&db, errmsg_out, MV_EINVAL, "%s", why);
    }
    int rc = mv_vfs_register(NULL, 0);
    if (rc != MV_OK) {
        return mv_fail(&db, errmsg_out, rc, "cannot register the mailvault VFS%s", NULL);
    }
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (!exists && (errno != ENOENT || !(o->flags & MV_DB_CREATE) || (o->flags & MV_DB_READONLY))) {
        return mv_fail(&db, errmsg_out, MV_ENOTFOUND, "%s: no such database", path);
    }
    if (!exists) {
        /* Mode 0600 whatever the umask (SQLite would use 0644), and its -wal, -shm and
         * -journal inherit it. */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            int code = errno == ENOENT ? MV_ENOTFOUND : errno == ENOSPC ? MV_ENOSPC : MV_EIO;
            return mv_fail(&db, errmsg_out, code, "cannot create the database: %s",
                           strerror(errno));
        }
        close(fd);
    }
    int flags = (o->flags & MV_DB_READONLY) ? SQLITE_OPEN_READONLY
                                            : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    /* NOMUTEX: a handle is used by one thread at a time (THREADS in mailvault.h), so
     * SQLite's per-call connection mutex only costs (two lock operations per API call). */
    rc =
        sqlite3_open_v2(path, &db, flags | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_NOMUTEX, MV_VFS_NAME);
    if (rc != SQLITE_OK) {
        char cause[512];
        int code = mv_db_error_cause(db, sqlite3_extended_errcode(db), cause, sizeof cause);
        return mv_fail(&db, errmsg_out, code, "%s", cause);
    }
    sqlite3_extended_result_codes(db, 1);
    /* Before the first read: the proof below takes the file's shared lock and, in WAL mode,
     * the WAL index's, and without a busy handler SQLite answers "database is locked" at
     * once while another process recovers the WAL index or checkpoints as it closes; stores
     * opened side by side met that (tests/test_open_busy.c). */
    if (o->busy_timeout_ms > 0) {
        (void)sqlite3_busy_timeout(db, o->busy_timeout_ms);
    }
    rc = mv_db_lock_mode_for_lower(db);
    if (rc != MV_OK) {
        return mv_fail(&db, errmsg_out, rc, "cannot set exclusive locking (no shared memory)%s",
                       NULL);
    }
    if (o->cipher == MV_CIPHER_NONE) {
        return mv_fail(&db, errmsg_out, MV_EINVAL,
                       "cipher none: open unencrypted files with sqlite3_open_v2()%s", NULL);
    }
    struct mv_fcntl_key key = {secret, secret_len, (int)o->cipher, o->kdf_iter, o->legacy, ""};
    rc = sqlite3_file_control(db, "main", MV_FCNTL_KEY, &key);
    if (rc != SQLITE_OK) {
        /* SQLITE_ERROR is a key or option the file cannot take; anything else is what
         * reading the file met (a failed read is MV_EIO, not a bad argument). */
        int code = rc != SQLITE_ERROR                            ? mv_error_from_sqlite(rc)
                   : strstr(key.errmsg, "not encrypted") != NULL ? MV_EUNSUPPORTED
                                                                 : MV_EINVAL;
        return mv_fail(&db, errmsg_out, code, "%s", key.errmsg);
    }
    sqlite3_int64 size = exists ? (sqlite3_int64)st.st_size : 0;
    if (size == 0) {
        /* New file: page size and reserve bytes before anything writes page 1. */
        if (o->page_size != 0 && mv_db_set_page_size(db, o->page_size) != SQLITE_OK) {
            return mv_fail(&db, errmsg_out, MV_EINVAL, "invalid page size%s", NULL);
        }
        int reserve = (int)crypt_reserve_bytes(o->cipher != MV_CIPHER_AUTO ? (int)o->cipher
                                                                           : CRYPT_CIPHER_CHACHA20);
        (void)sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &reserve);
        char sql[96];
        sqlite3_snprintf((int)sizeof sql, sql, "PRAGMA auto_vacuum=%d; PRAGMA user_version=0",
                         o->auto_vacuum);
        if (o->auto_vacuum < 0 || o->auto_vacuum > 2) {
            return mv_fail(&db, errmsg_out, MV_EINVAL, "invalid auto_vacuum%s", NULL);
        }
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
            char cause[512];
            int code = mv_db_error_cause(db, sqlite3_extended_errcode(db), cause, sizeof cause);
            return mv_fail(&db, errmsg_out, code, "cannot create the database: %s", cause);
        }
        *db_out = db;
        return MV_OK;
    }
    rc = mv_db_prove(db, errmsg_out);
    if (rc != MV_OK) {
        sqlite3_close(db);
        return rc;
    }
    *db_out = db;
    return MV_OK;
}

const char *mv_db_vfs_errmsg(sqlite3 *db)
{
    const char *msg = NULL;
    if (db == NULL || sqlite3_file_control(db, "main", MV_FCNTL_ERRMSG, &msg) != SQLITE_OK) {
        return NULL;
    }
    return msg;
}

int mv_db_info(sqlite3 *db, struct mv_db_info *info_out)
{
    if (db == NULL || info_out == NULL ||
        sqlite3_file_control(db, "main", MV_FCNTL_INFO, info_out) != SQLITE_OK) {
        return MV_EINVAL;
    }
    return MV_OK;
}
