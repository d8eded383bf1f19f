/*
 * db_reopen.h -- a second connection to an open encrypted database, keyed with the first
 * one's key: for a store handle that must drop its connection after an I/O error inside a
 * write transaction (state kept in memory by SQLite or an extension, such as FTS5's
 * structure record, may no longer match the file) without the password, which the handle
 * does not keep.
 *
 * USAGE
 *   sqlite3 *fresh = NULL;
 *   char *err = NULL;
 *   rc = mv_db_reopen(old, &fresh, &err);   // old stays open; close it once fresh is in use
 *
 * The key is copied inside this process (crypt_ctx_clone) from the old connection's main
 * file: no KDF runs and no secret crosses the API. Library-internal: not in mailvault.h.
 */
#ifndef MV_DB_REOPEN_H
#define MV_DB_REOPEN_H

#include "vfs/vfs_sqlite.h"

/* Opens *db_out on the file of db's main database, read-write or read-only as db is, keyed
 * with db's key and proven by page 1. Returns MV_OK, MV_EINVAL (db is not a keyed mailvault
 * connection), MV_EIO, MV_ECORRUPT, MV_ENOMEM; on failure *errmsg_out (sqlite3_free) says
 * why and *db_out is NULL. */
int mv_db_reopen(sqlite3 *db, sqlite3 **db_out, char **errmsg_out);

#endif /* MV_DB_REOPEN_H */
