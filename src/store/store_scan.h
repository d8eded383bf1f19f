/*
 * store_scan.h -- a directory's entries in name order, in bounded memory (the delivery queue
 * and the Maildir / .eml importers walk directories that may hold millions of files).
 *
 * USAGE
 *   struct store_scan *scan = NULL;
 *   rc = store_scan_open(dir, accept, arg, &scan);  MV_OK, MV_ENOTFOUND, MV_EIO, MV_ENOMEM
 *   const char *name;
 *   while ((rc = store_scan_next(scan, &name)) == 1) { ... }   0 at the end, or MV_EIO
 *   store_scan_close(&scan);
 *
 * IMPLEMENTATION NOTES
 *   The directory is read in passes. A pass keeps, in a max-heap, the STORE_SCAN_BATCH
 *   smallest accepted names that sort (strcmp) after the last name handed out, then hands
 *   them out in ascending order. Memory is STORE_SCAN_BATCH * 256 bytes whatever the
 *   directory holds; time is one directory read per STORE_SCAN_BATCH names.
 *
 * LIMITATIONS
 *   A name created during the scan is handed out only if it sorts after the last name
 *   handed out and a later pass runs; a name removed during the scan may still be handed
 *   out (callers open the file and treat ENOENT as "someone else took it").
 */
#ifndef MV_STORE_SCAN_H
#define MV_STORE_SCAN_H

#include <stddef.h>

#define STORE_SCAN_BATCH 1024 /* names held per pass */

/* Decides whether a directory entry is wanted (never called for "." and ".."). */
typedef int (*store_scan_accept_fn)(void *arg, const char *name);

struct store_scan;

/* Starts a scan of dir; accept (NULL: everything) filters names. *out is freed with
 * store_scan_close(). Returns MV_OK, MV_ENOTFOUND (no such directory), MV_EIO, MV_ENOMEM. */
int store_scan_open(const char *dir,
                    store_scan_accept_fn accept,
                    void *arg,
                    struct store_scan **out);

/* The next name (owned by the scan, valid until the next call): 1, 0 at the end, or MV_EIO
 * (errno kept). */
int store_scan_next(struct store_scan *scan, const char **name);

/* Frees the scan and sets *scan to NULL. NULL is fine. */
void store_scan_close(struct store_scan **scan);

#endif /* MV_STORE_SCAN_H */
