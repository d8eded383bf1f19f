/*
 * db_column.h -- a column's text that tells "no value" from "no memory".
 *
 * sqlite3_column_text() returns NULL both for an SQL NULL and when it could not allocate the
 * text: a number converted to text, or a value read from overflow pages that needs room for
 * its terminator. Read as "no value", the second is a wrong answer rather than an error (a
 * header search that misses a match, a listing without its keywords, a check that skips a
 * finding). Every reader of a text column that can hold a value goes through this.
 */
#ifndef MV_DB_COLUMN_H
#define MV_DB_COLUMN_H

#include "vfs/vfs_sqlite.h"

/* The text of column col of st's current row, or NULL. NULL with *oom set to 1: the value
 * exists but its text could not be allocated (the statement's connection has SQLITE_NOMEM).
 * NULL with *oom untouched: the column is SQL NULL. The text lives until the next step,
 * reset or finalize of st, as sqlite3_column_text()'s does. */
const char *mv_db_column_text(sqlite3_stmt *st, int col, int *oom);

#endif /* MV_DB_COLUMN_H */
