/*
 * db_error.c -- the real cause of an SQLite error, in one line (db_error.h).
 */
#include "vfs/db_error.h"

#include "vfs/vfs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* What an I/O error's extended code says was being done. */
static const char *mv_db_io_action(int rc)
{
    switch (rc) {
    case SQLITE_IOERR_READ:
    case SQLITE_IOERR_SHORT_READ:
        return "cannot read";
    case SQLITE_IOERR_WRITE:
        return "cannot write";
    case SQLITE_IOERR_FSYNC:
    case SQLITE_IOERR_DIR_FSYNC:
        return "cannot sync to disk";
    case SQLITE_IOERR_TRUNCATE:
        return "cannot truncate";
    case SQLITE_IOERR_SHMOPEN:
    case SQLITE_IOERR_SHMSIZE:
    case SQLITE_IOERR_SHMMAP:
        return "cannot set up the WAL index (-shm)";
    default:
        return "I/O error";
    }
}

int mv_db_error_cause(sqlite3 *db, int rc, char *cause, size_t cause_size)
{
    int primary = rc & 0xff;
    int sys = db != NULL && (primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN ||
                             primary == SQLITE_FULL)
                  ? sqlite3_system_errno(db)
                  : 0;
    const char *vfs = mv_db_vfs_errmsg(db);
    const char *sqlite_msg = db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    if (primary == SQLITE_FULL || sys == ENOSPC || sys == EDQUOT) {
        snprintf(cause, cause_size, "no space left on device%s",
                 sys == EDQUOT ? " (disk quota exceeded)" : "");
        return MV_ENOSPC;
    }
    int code = mv_error_from_sqlite(rc);
    code = code == MV_OK ? MV_ERROR : code;
    if (rc == SQLITE_IOERR_DATA && vfs != NULL) {
        snprintf(cause, cause_size, "%s", vfs); /* names the page that failed */
    } else if (primary == SQLITE_IOERR && sys != 0) {
        snprintf(cause, cause_size, "%s: %s", mv_db_io_action(rc), strerror(sys));
    } else if (primary == SQLITE_CANTOPEN && sys != 0) {
        /* "unable to open database file" names no file and no reason; which file SQLite
         * was opening it does not say either (the store, its WAL, a journal, a temp file). */
        snprintf(cause, cause_size, "%s: %s", sqlite_msg, strerror(sys));
    } else if (vfs != NULL && (code == MV_ECORRUPT || code == MV_EIO)) {
        snprintf(cause, cause_size, "%s (%s)", sqlite_msg, vfs);
    } else {
        snprintf(cause, cause_size, "%s", sqlite_msg);
    }
    for (char *p = cause; *p != '\0'; p++) {
        if (*p == '\n' || *p == '\r') {
            *p = ' '; /* one line */
        }
    }
    return code;
}

uint64_t mv_db_read_errors(sqlite3 *db)
{
    uint64_t n = 0;
    if (db == NULL || sqlite3_file_control(db, "main", MV_FCNTL_READ_ERRORS, &n) != SQLITE_OK) {
        return 0;
    }
    return n;
}
