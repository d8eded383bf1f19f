/*
 * db_reopen.c -- mv_db_reopen(): see db_reopen.h.
 */
#include "vfs/db_reopen.h"
#include "vfs/vfs.h"

static int mv_reopen_fail(sqlite3 **db, char **errmsg_out, int code, const char *text)
{
    if (errmsg_out != NULL) {
        *errmsg_out = sqlite3_mprintf("%s", text);
    }
    sqlite3_close(*db);
    *db = NULL;
    return code;
}

int mv_db_reopen(sqlite3 *db, sqlite3 **db_out, char **errmsg_out)
{
    sqlite3 *fresh = NULL;
    *db_out = NULL;
    if (errmsg_out != NULL) {
        *errmsg_out = NULL;
    }
    const char *path = db != NULL ? sqlite3_db_filename(db, "main") : NULL;
    if (path == NULL || path[0] == '\0') {
        return mv_reopen_fail(&fresh, errmsg_out, MV_EINVAL, "no database file to reopen");
    }
    int readonly = sqlite3_db_readonly(db, "main") == 1;
    int flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOFOLLOW |
                SQLITE_OPEN_NOMUTEX;
    int rc = sqlite3_open_v2(path, &fresh, flags, MV_VFS_NAME);
    if (rc != SQLITE_OK) {
        return mv_reopen_fail(&fresh, errmsg_out, mv_error_from_sqlite(rc),
                              fresh != NULL ? sqlite3_errmsg(fresh) : "out of memory");
    }
    sqlite3_extended_result_codes(fresh, 1);
    /* The old connection's busy timeout before the first read, as mv_db_open() sets its
     * own: the read below must wait for another process's lock, not fail on it. */
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA busy_timeout", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        (void)sqlite3_busy_timeout(fresh, sqlite3_column_int(st, 0));
    }
    sqlite3_finalize(st);
    struct mv_fcntl_key_share share = {db, ""};
    rc = sqlite3_file_control(fresh, "main", MV_FCNTL_KEY_SHARE, &share);
    if (rc != SQLITE_OK) {
        int code = rc == SQLITE_NOMEM                            ? MV_ENOMEM
                   : rc == SQLITE_ERROR                          ? MV_EINVAL
                   : rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT ? MV_ECORRUPT
                                                                 : MV_EIO;
        return mv_reopen_fail(&fresh, errmsg_out, code, share.errmsg);
    }
    /* The first read of the schema decrypts pages: an unreadable file fails here. */
    rc = sqlite3_exec(fresh, "SELECT count(*) FROM sqlite_schema", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        const char *vfs = mv_db_vfs_errmsg(fresh);
        int code = mv_error_from_sqlite(sqlite3_extended_errcode(fresh));
        char text[512];
        sqlite3_snprintf((int)sizeof text, text, "%s", vfs != NULL ? vfs : sqlite3_errmsg(fresh));
        return mv_reopen_fail(&fresh, errmsg_out, code != MV_OK ? code : MV_EIO, text);
    }
    *db_out = fresh;
    return MV_OK;
}
