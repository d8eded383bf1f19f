/*
 * vfs_hint.h -- what a caller above the VFS (the store) tells it of the reads to come, so
 * that it reads from the disk what they need and no more (vfs_read_ahead.c, issue 13).
 *
 * USAGE
 *   mv_db_read_ahead_hint(db, 300000);  // the next page read from the file starts a chain
 *                                       // of ~300,000 bytes of one BLOB: read it at once
 *   ... read the BLOB ...
 *   mv_db_read_ahead_hint(db, 0);       // whatever was not used is dropped
 *
 *   mv_db_read_near_hint(db, 2);        // a row's leaf is read next, its chain near it:
 *   ... find the row, hint its chain, read the BLOB ...   // read the leaf with the 2 pages
 *   mv_db_read_ahead_hint(db, 0);       // on each side at once; taken back with the rest
 *
 * The window's pages serve the chain's page reads until the hint is taken back (each page
 * still authenticated and decrypted), so take it back right after the BLOB's read, in the
 * same statement: a wrong hint costs reads, never bytes. Library-internal: not in
 * mailvault.h.
 */
#ifndef MV_VFS_HINT_H
#define MV_VFS_HINT_H

#include "vfs/vfs_sqlite.h"

#include <stdint.h>

/* pArg: const sqlite3_int64*: bytes of the BLOB whose overflow chain the next page read of
 * the main file starts (0: none). */
#define MV_FCNTL_READ_AHEAD 0x6d760006

/* Tells db's main file that its next page read from the file is the first overflow page of
 * a BLOB of bytes bytes (0 takes a hint back). Ignored by a file that is not a keyed
 * mailvault main file. */
void mv_db_read_ahead_hint(sqlite3 *db, int64_t bytes);

/* pArg: const int*: pages on each side of a page read (0: none). */
#define MV_FCNTL_READ_NEAR 0x6d760007

/* Tells db's main file that the page reads to come look for a row whose BLOB's overflow
 * chain lies within pages pages of the row's leaf (as rows appended one after the other
 * lay them out), so each page read that no window holds takes the pages on both sides of
 * it in one lower read and holds them. Taken back by mv_db_read_ahead_hint(db, 0) (or
 * mv_db_read_near_hint(db, 0)); ignored as mv_db_read_ahead_hint is. */
void mv_db_read_near_hint(sqlite3 *db, int pages);

#endif /* MV_VFS_HINT_H */
