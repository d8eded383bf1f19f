/*
 * store_prefetch.c -- the bodies of many messages asked of the disk at once, before they
 * are read one by one (mv_message_prefetch_keyed; issue 13).
 *
 * A client's FETCH of many whole messages from a mailbox whose file is not in the page
 * cache used to wait for each message's leaf in turn (one random read each). The body keys
 * of a listing name the bodies_data rows, so their leaves can be found by walking the
 * table's interior pages (vfs_prefetch.c) and asked for together; the reads of the messages
 * that follow then find them in the page cache. Only the skeleton's row is asked for:
 * attachments stored apart and chains farther than STORE_BLOB_NEAR_PAGES from their leaf
 * are read as before (the chain in one request, vfs_read_ahead.c).
 */
#include "store/store.h"
#include "store/store_blob.h"
#include "vfs/vfs_hint.h"

#include <stdlib.h>

int mv_message_prefetch_keyed(mv_store *s, const struct mv_message_key *keys, size_t n)
{
    if (s == NULL || (keys == NULL && n > 0)) {
        return MV_EINVAL;
    }
    if (n == 0 || s->db == NULL) {
        return MV_OK;
    }
    if (n > MV_PREFETCH_ROWS_MAX) {
        n = MV_PREFETCH_ROWS_MAX; /* the first ones: those read first */
    }
    int64_t *rowids = malloc(n * sizeof *rowids);
    if (rowids == NULL) {
        return MV_OK; /* a hint: nothing lost but the overlap */
    }
    size_t rows = 0;
    for (size_t i = 0; i < n; i++) {
        int compression = 0;
        if (store_body_key_parts(keys[i].body_key, &rowids[rows], &compression)) {
            rows++;
        }
    }
    /* The table's root page as the schema says now (auto_vacuum may move a root page). */
    sqlite3_stmt *st = rows > 0 ? store_stmt(s, "SELECT rootpage FROM sqlite_schema "
                                                "WHERE type = 'table' AND name = 'bodies_data'")
                                : NULL;
    if (st != NULL) {
        if (sqlite3_step(st) == SQLITE_ROW) {
            sqlite3_int64 root = sqlite3_column_int64(st, 0);
            sqlite3_reset(st);
            if (root > 1 && root <= UINT32_MAX) {
                struct mv_fcntl_prefetch p = {.root = (uint32_t)root,
                                              .rowids = rowids,
                                              .n = rows,
                                              .near = STORE_BLOB_NEAR_PAGES};
                (void)mv_db_prefetch(s->db, &p);
            }
        } else {
            sqlite3_reset(st);
        }
    }
    free(rowids);
    return MV_OK;
}
