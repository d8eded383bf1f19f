/*
 * store_keyed.h -- rows of many messages of one listing read by their body keys (issue 13):
 * the memos of a FETCH's window (mv_message_memos_keyed) and the headers of a message list
 * (mv_message_headers_keyed). One copy of what both need: the keys checked to be one
 * listing's, the listing checked to still hold, and the wanted bodies' rows read in id order,
 * by one scan of their id range when they lie close together, else by a lookup each.
 *
 * USAGE
 *   struct store_keyed_read r = {.what = "reading memos", .scan_sql = ..., .one_sql = ...,
 *                                .per_body = MV_MEMO_SLOTS, .slot = slot, .row = fn, .ctx = c};
 *   rc = store_keyed_read(s, "mv_message_memos_keyed", mailbox, keys, n, &r);
 */
#ifndef MV_STORE_KEYED_H
#define MV_STORE_KEYED_H

#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

/* A key that names a body: keys[index] wants body body_id. */
struct store_keyed_want {
    int64_t body_id;
    size_t index;
};

struct store_keyed_read {
    const char *what;     /* the failure's message: "reading memos" */
    const char *scan_sql; /* rows with ids ?1..?2 in id order, the id in column 0 */
    const char *one_sql;  /* the row with id ?1, the id in column 0 */
    int64_t per_body;     /* a row's id is its body's id * per_body + slot */
    int64_t slot;
    /* st's row (valid during the call) for the keys that want its body: want[0..n), n >= 1.
     * MV_OK to go on; anything else ends the read and is returned. */
    int (*row)(
        void *ctx, mv_store *s, sqlite3_stmt *st, const struct store_keyed_want *want, size_t n);
    void *ctx;
};

/* r's rows of the bodies keys name (n keys of one listing, at most MV_MEMO_BATCH_MAX; keys
 * with body_key 0 are passed over), inside a read transaction of its own unless one is open.
 * fn names the caller in MV_EINVAL's message. MV_OK; MV_ENOTFOUND when mailbox changed since
 * the listing or is gone (no row read); what r->row returned; MV_EINVAL (too many keys, keys
 * of two listings), MV_ENOMEM, or SQLite's failure. */
int store_keyed_read(mv_store *s,
                     const char *fn,
                     const char *mailbox,
                     const struct mv_message_key *keys,
                     size_t n,
                     const struct store_keyed_read *r);

#endif /* MV_STORE_KEYED_H */
