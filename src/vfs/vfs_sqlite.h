/*
 * vfs_sqlite.h -- how the library reaches SQLite's API.
 *
 * Linked into a program, the library calls libsqlite3 directly. Built as a loadable
 * extension (-DMV_BUILD_EXTENSION), every sqlite3_* call goes through the host's
 * sqlite3_api table instead, so the extension works in any host whatever libsqlite3 it
 * was linked with. Every file of src/vfs includes this header instead of <sqlite3.h>.
 */
#ifndef MV_VFS_SQLITE_H
#define MV_VFS_SQLITE_H

#ifdef MV_BUILD_EXTENSION
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3
#else
#include <sqlite3.h>
#endif

#endif
