/*
 * db_error.h -- one line naming the real cause of an SQLite error on a connection, and the
 * MV_* code that goes with it. SQLite says "disk I/O error" for every failed system call;
 * the errno it recorded (sqlite3_system_errno) says which: a full disk is MV_ENOSPC, "no
 * space left on device", never an I/O error; a read error names the system's reason, not
 * the data. Used by mv_db_open, the store's error paths and the operations.
 */
#ifndef MV_DB_ERROR_H
#define MV_DB_ERROR_H

#include "mailvault.h"

#include <stddef.h>

/* Writes the cause of rc (an extended SQLite result code db returned) to cause, one line,
 * and returns its MV_* code (never MV_OK). */
int mv_db_error_cause(sqlite3 *db, int rc, char *cause, size_t cause_size);

/* Reads of db's main file, WAL or journal that the device failed, since the connection
 * opened (0 if db is not on this VFS). SQLite's integrity and quick checks turn a page they
 * cannot get into a finding ("failed to get page 45", "Failed to read ptrmap key=15") with
 * no code saying why: a check that raised this count met a failing disk, and its findings
 * say nothing about the data. */
uint64_t mv_db_read_errors(sqlite3 *db);

/* Whether the header of db's open WAL, as it is on disk now, is damaged while the WAL holds
 * commits the database file lacks (vfs_wal_header.c): recovery reads such a WAL through a
 * header rebuilt from its frames, so nothing is lost, but the damage stays on disk until a
 * checkpoint empties the WAL, and a check should say so. 1 with what was found in detail,
 * else 0 (no WAL, a sound header, one whose loss would lose nothing, or a read that
 * failed). */
int mv_db_wal_header_damaged(sqlite3 *db, char *detail, size_t detail_size);

#endif /* MV_DB_ERROR_H */
