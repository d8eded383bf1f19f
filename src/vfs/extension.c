/*
 * extension.c -- the entry point that makes build/mailvault_ext.so a SQLite loadable
 * extension, so the stock sqlite3 shell opens mailvault and SQLite3MC files.
 *
 * USAGE (sqlite3 shell)
 *   .load build/mailvault_ext
 *   .open var/demo.db
 *   PRAGMA key='secret';          -- or PRAGMA cipher='sqlcipher'; PRAGMA key='...';
 *
 * Loading registers the "mailvault" VFS as the process default, so databases opened
 * afterwards (with .open) go through it. The connection that loaded it is not affected:
 * its file was opened before the VFS existed.
 */
#include "vfs/vfs.h"

SQLITE_EXTENSION_INIT1

int sqlite3_mailvaultext_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);
int sqlite3_extension_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

__attribute__((visibility("default"))) int
sqlite3_mailvaultext_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi)
{
    (void)db;
    SQLITE_EXTENSION_INIT2(pApi);
    int rc = mv_vfs_register(NULL, 1);
    if (rc != MV_OK) {
        *pzErrMsg = sqlite3_mprintf("mailvault: cannot register the VFS: %s", mv_strerror(rc));
        return SQLITE_ERROR;
    }
    /* Stay loaded after this connection closes: the VFS is process-wide. */
    return SQLITE_OK_LOAD_PERMANENTLY;
}

__attribute__((visibility("default"))) int
sqlite3_extension_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi)
{
    return sqlite3_mailvaultext_init(db, pzErrMsg, pApi);
}
