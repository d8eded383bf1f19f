/*
 * store_files.h -- the process-wide registry of store database files this process has open
 * through SQLite (store_files.c), and the only safe way for keyless code to read or lock
 * such a file with descriptors of its own.
 *
 * WHY
 *   POSIX advisory locks belong to (process, inode): close(2) of ANY descriptor of a file
 *   drops every fcntl lock the process holds on it, including the SHARED lock SQLite keeps
 *   on a WAL-mode database while a connection is open. Without that lock another process
 *   believes it is the last user, checkpoints and deletes the WAL and -shm under the open
 *   connection, and the store ends up malformed. So no code of this library may close a
 *   descriptor of a store's database file (or of its -shm, where SQLite's WAL locks live)
 *   while this process has the store open through SQLite; and, against races between
 *   threads, the decision to close is taken under the same mutex a store open registers
 *   under, before SQLite opens the file.
 *
 * USAGE
 *   store_connect():   store_files_register(s, path) before mv_db_open(), then
 *                      store_files_learn(s, db) once the connection is open;
 *   store_free():      store_files_unregister(s) after sqlite3_close() succeeded;
 *   keyless reader:    store_files_header_read(path, &st, hdr, n, &got) (never opens a file
 *                      that is open here; answers from the registry instead);
 *   keyless locker:    open its descriptors of the file and -shm as it likes, and end
 *                      each with store_files_close(fd, dev, ino) of the .db's inode (parks
 *                      it while this process has the store open).
 *
 * LIMITATIONS
 *   Only opens through the store layer (mv_store_open/mv_store_init) are registered. The
 *   ops that open a store's file with mv_db_open() directly (passwd and restore, the old
 *   file) do so under the store's exclusive lock, which no handle of this or another
 *   process can hold at the same time, so no other mailvault user depends on their SQLite
 *   locks; an application's own mv_db_open() of a store file is not seen here.
 */
#ifndef MV_STORE_FILES_H
#define MV_STORE_FILES_H

#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define STORE_FILES_HEADER_BYTES 24      /* what keyless readers look at: bytes 0..23 */
#define STORE_FILES_MAX          1000000 /* registered opens + parked descriptors */

struct stat;

/* Registers db_path as about to be opened through SQLite by owner (a store handle). Keeps
 * the file's header bytes, read now (no connection of this process has the file, or another
 * registration already knows them). MV_OK, MV_ENOTFOUND (no file), MV_EIO, MV_ENOMEM, MV_ELIMIT. */
int store_files_register(const void *owner, const char *db_path);
/* Completes the registered header from owner's open connection when the file had none at
 * registration (a store being created). No-op for an owner not registered. */
void store_files_learn(const void *owner, sqlite3 *db);
/* Ends owner's registration; call after sqlite3_close() returned SQLITE_OK, never before.
 * Descriptors parked on the file are closed when its last registration ends. Unknown
 * owners are fine. */
void store_files_unregister(const void *owner);

/* Up to size (<= STORE_FILES_HEADER_BYTES) bytes from offset 0 of path, whose stat(2) is
 * *st, into buf; *got is how many. When the file is open through SQLite in this process the
 * bytes come from its registration, without opening the file. MV_OK, MV_ENOTFOUND or
 * MV_EIO (errno kept). */
int store_files_header_read(
    const char *path, const struct stat *st, uint8_t *buf, size_t size, size_t *got);

/* Closes fd, a descriptor keyless code opened on the store file (dev, ino) or on its -shm,
 * unless this process has that store open through SQLite: then fd is parked, its OFD locks
 * released, and closed when the store's last connection is (STORE_FILES_MAX parked rows at
 * most; past that it is left open). fd < 0 is fine. */
void store_files_close(int fd, dev_t db_dev, ino_t db_ino);

#endif /* MV_STORE_FILES_H */
