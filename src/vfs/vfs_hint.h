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
 *   struct mv_fcntl_prefetch p = {.root = root, .rowids = ids, .n = n, .near = 2};
 *   mv_db_prefetch(db, &p);             // rows of a table about to be read one by one: their
 *   ... read the rows ...               // leaves asked of the disk at once (vfs_prefetch.c)
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

/* pArg: struct mv_fcntl_prefetch*. */
#define MV_FCNTL_PREFETCH 0x6d760008

/* Rows and near pages a prefetch takes at most (more is ignored: nothing is prefetched). */
#define MV_PREFETCH_ROWS_MAX 1024
#define MV_PREFETCH_NEAR_MAX 16

struct mv_fcntl_prefetch {
    uint32_t root;          /* the B-tree's root page */
    int index;              /* 0: a table (rowids are its keys); 1: an index or WITHOUT ROWID
                             * table whose entries start with an integer column: rowids are
                             * values of that column, each found at its first entry */
    const int64_t *rowids;  /* the rows to be read, n of them, in any order */
    size_t n;               /* 1 to MV_PREFETCH_ROWS_MAX */
    uint32_t near;          /* pages on each side of each leaf asked for with it */
    uint32_t *leaves;       /* out, NULL or n entries: each row's leaf as walked (0: none) */
    int always_chains;      /* 1: the chains below always (tests); 0: only from a cold file */
    uint32_t *chain_firsts; /* out, NULL or n entries: each chain asked for's first page (0:
                             * none: no chain, within the near pages, or not looked at) */
    size_t advised;         /* out: the distinct leaves asked for (0: nothing done) */
    size_t chains;          /* out: the overflow chains asked for (those past the near pages) */
    int cold;               /* out: 1 if the first leaf was not in the page cache before the
                             * leaves were asked for (a cold file: chains asked for too) */
    size_t interior_read;   /* out: interior pages read from the file by the walk */
    size_t interior_kept;   /* out: interior pages the walk took from those an earlier walk
                             * on the same connection kept (vfs_interior.c): not read */
    size_t advice_calls;    /* out: posix_fadvise calls made (a leaf's window is one) */
    /* An index's entries, collected (index 1 with collected not NULL): the leaves are read
     * (after they were asked for) and column collect_column (an integer; 0 is the first) of
     * every entry whose first column is one of rowids goes to collected, collected_cap at
     * most; collected_n says how many. Entries kept in interior cells are not looked at. */
    int collect_column;
    int64_t *collected;
    size_t collected_cap;
    size_t collected_n; /* out */
};

/* Walks the interior pages of table p->root in db's main file (as the file holds them, not
 * the WAL) for p->rowids, one level at a time, and asks the kernel for each row's leaf with
 * p->near pages on each side, all at once, without waiting for them (posix_fadvise
 * WILLNEED): the reads of those rows that follow find their pages in the page cache, or
 * already on their way. If the leaves were not in the page cache, it then reads them (all
 * on their way) and asks for the overflow chains of the rows that do not lie within the
 * near pages. Blocks for about one disk read per level of the tree, and one more for the
 * leaves; interior pages an earlier walk on the same connection read are kept and not read
 * again while the file is unchanged (vfs_interior.c). A hint: never an error; a wrong walk costs
 * reads, never bytes (vfs_prefetch.c). Returns p->advised, the distinct leaves asked for (0 if
 * nothing was done: not a keyed mailvault file, a lower VFS without a file descriptor, bad
 * arguments, an unreadable page); the other results in p. */
size_t mv_db_prefetch(sqlite3 *db, struct mv_fcntl_prefetch *p);

#endif /* MV_VFS_HINT_H */
