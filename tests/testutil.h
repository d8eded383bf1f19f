/*
 * testutil.h -- helpers shared by the test programs: opening databases, files, digests.
 */
#ifndef MV_TESTUTIL_H
#define MV_TESTUTIL_H

#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>

#define TU_KDF_ITER 1000 /* small, so the suite stays fast; KATs use the real defaults */

/* Path of name inside the test binary's temp dir: one of 16 static buffers, reused. */
char *tu_path(const char *name);

/* mv_db_open with TU_KDF_ITER for new files; prints the message on failure. */
int tu_open(const char *path, const char *password, mv_cipher cipher, unsigned flags, sqlite3 **db);
/* Runs SQL; on failure prints the errors and returns the SQLite code. */
int tu_exec(sqlite3 *db, const char *sql);
/* The first column of the first row as an integer (-1 on error or no row). */
long long tu_int(sqlite3 *db, const char *sql);

uint8_t *tu_read_file(const char *path, size_t *len); /* malloc'd; NULL if missing */
int tu_write_file(const char *path, const void *data, size_t len);
int tu_file_exists(const char *path);
long long tu_file_size(const char *path);
/* Copies path, path-wal and path-journal (those that exist) to dst (+ suffixes). */
int tu_copy_db(const char *src, const char *dst);
void tu_remove_db(const char *path);
int tu_flip_bit(const char *path, long long offset, int bit);
/* SHA-256 hex of the file's bytes ("missing" if absent), out[65]. */
void tu_file_sha256(const char *path, char out[65]);
void tu_sha256_hex(const void *data, size_t len, char out[65]);

/* The interop table t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, data BLOB): row content
 * as a pure function of id, and the canonical digest of the table (see
 * tests/vectors/mc/README.md). */
void tu_fill_table(sqlite3 *db, int first_id, int count);
int tu_table_digest(sqlite3 *db, char out[65], long long *rows);
/* The digest tu_fill_table(1..count) produces, computed without a database. */
void tu_expected_digest(int count, char out[65]);

/* Creates the store name@example.org under tu_path("root") with password (TU_KDF_ITER, a
 * cache of cache_kib) and opens it into *s; prints the reason on failure. */
int tu_store_create(const char *name, const char *password, int64_t cache_kib, mv_store **s);

/* Whether needle occurs in haystack. */
int tu_contains(const uint8_t *hay, size_t hay_len, const void *needle, size_t needle_len);

#endif
