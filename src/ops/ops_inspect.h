/*
 * ops_inspect.h -- what the files of the statistics, maintenance, check, doctor and explain
 * operations share (ops_stats.c, ops_prometheus.c, ops_maintain.c, ops_check.c,
 * ops_doctor.c, ops_explain.c). Nothing outside src/ops includes it.
 */
#ifndef MV_OPS_INSPECT_H
#define MV_OPS_INSPECT_H

#include "mailvault.h"
#include "store/store.h"

#include <stdint.h>

/* What a finding of PRAGMA quick_check or integrity_check stands for (ops_io.c; also used
 * by the backup's check of its copy). SQLite reports a page it could not get as a finding,
 * not an error ("Page 5: unable to get the page. error code=266"), so a read error or a
 * failed allocation would pass for damage: MV_ENOMEM for SQLITE_NOMEM, MV_EIO for an I/O
 * error but SQLITE_IOERR_DATA (a page that failed authentication is damage), else
 * MV_ECORRUPT. */
int ops_io_check_finding(const char *line);
/* 1 if PRAGMA quick_check on db now says "ok" and nothing else. For findings that carry no
 * cause: a page SQLite could not get for want of memory is reported as "failed to get page
 * N", no code, no failed read (the allocation-failure loop made a backup call its copy
 * damaged); damage is found again, a moment's failed allocation is not. */
int ops_io_check_clean_again(sqlite3 *db);

/* Meta-table keys where maintenance leaves its history (Unix seconds; 1/0). */
#define OPS_META_MAINTAINED_AT   "ops:maintained_at"
#define OPS_META_QUICK_CHECK_AT  "ops:quick_check_at"
#define OPS_META_QUICK_CHECK_OK  "ops:quick_check_ok"
#define OPS_FREE_BYTES_TEST_HOOK "MAILVAULT_TEST_FREE_BYTES"

/* Free bytes for an unprivileged writer in dir's filesystem (statvfs f_bavail * f_frsize),
 * or the value of $MAILVAULT_TEST_FREE_BYTES if that is set (a test hook: the only place
 * that reads it). Returns MV_OK or MV_EIO (errno-style text in errmsg). */
int ops_free_bytes(const char *dir, uint64_t *out, char *errmsg, size_t errmsg_size);

/* Describes the store file ROOT/<domain>/<local>.db keylessly (see mv_store_file_inspect).
 * address is already normalised. Returns MV_OK, MV_ENOTFOUND or MV_EIO. */
int ops_file_describe(const char *address,
                      const struct mv_store_options *opts,
                      struct mv_store_file *out);

/* Size of path from stat(2); 0 if it does not exist. */
uint64_t ops_file_bytes(const char *path);

/* An integer from the meta table (0 if absent), and one written there (own transaction). */
int ops_meta_get_int(mv_store *s, const char *key, int64_t *out);
int ops_meta_set_int(mv_store *s, const char *key, int64_t value);

/* One row of one integer column from sql (prepared here, finalized here). */
int ops_query_int(mv_store *s, const char *sql, int64_t *out);
/* The same for the first columns integer columns of the row, into out[0..columns-1]. */
int ops_query_ints(mv_store *s, const char *sql, int64_t *out, int columns);

#endif /* MV_OPS_INSPECT_H */
