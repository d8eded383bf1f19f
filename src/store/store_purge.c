/*
 * store_purge.c -- mv_store_purge: deletes the bodies that expunges and mailbox deletes left
 * without a message (refcount 0, found through the partial index bodies_unreferenced).
 *
 * WHY LATER
 *   Deleting a row of the full-text index (FTS5, trigram) means reading the row's text back
 *   and tokenizing it again to remove each trigram: measured at 10,000 small messages,
 *   ~0.7 ms of CPU a message, three quarters of an EXPUNGE of 10% (docs/BENCHMARKS.md). An
 *   EXPUNGE therefore only drops references (the messages are gone from every listing,
 *   fetch and search at once: searches reach bodies through messages), and this step
 *   deletes the bodies, their parts and attachments and their full-text rows afterwards, in
 *   bounded transactions, with secure_delete overwriting what they held.
 *
 * CONSISTENCY
 *   Ids are read inside the purge's own write transaction, so a body that an append of the
 *   same bytes took up again (refcount 1) is never deleted, and no body id is reused while
 *   its full-text row exists (the row and the body go in one transaction).
 */
#include "store/store.h"

/* Up to max ids of bodies without a message, ascending. */
static int store_purge_ids(mv_store *s, uint32_t max, struct store_ids *ids)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT id FROM bodies INDEXED BY bodies_unreferenced "
                                     "WHERE refcount = 0 ORDER BY id LIMIT ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "listing unreferenced bodies");
    }
    sqlite3_bind_int64(st, 1, max);
    int rc = MV_OK, step;
    while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        rc = store_ids_push(s, ids, sqlite3_column_int64(st, 0));
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "listing unreferenced bodies");
    }
    sqlite3_reset(st);
    return rc;
}

/* The number of bodies without a message (through the partial index: grows with them, not
 * with the store). */
static int store_purge_left(mv_store *s, uint64_t *left)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT count(*) FROM bodies INDEXED BY bodies_unreferenced "
                                     "WHERE refcount = 0");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting unreferenced bodies");
    }
    int step = sqlite3_step(st);
    *left = step == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "counting unreferenced bodies");
}

/* One transaction: up to max bodies deleted; *done gets how many. */
static int store_purge_batch(mv_store *s, uint32_t max, size_t *done)
{
    struct store_ids ids = {0};
    *done = 0;
    int rc = store_begin(s), began = rc == MV_OK;
    if (rc == MV_OK) {
        rc = store_purge_ids(s, max, &ids);
    }
    if (rc == MV_OK && ids.count > 0) {
        rc = store_bodies_drop(s, ids.ids, ids.count);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (rc == MV_OK) {
        *done = ids.count;
    }
    store_ids_free(&ids);
    return rc;
}

int mv_store_purge(mv_store *s, uint32_t max_bodies, uint64_t *left_out)
{
    if (left_out != NULL) {
        *left_out = 0;
    }
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (s->readonly) {
        return store_fail(s, MV_EINVAL, "the store is open read-only");
    }
    if (!s->purge_hint) {
        return MV_OK; /* nothing was expunged through this handle since a purge found none */
    }
    uint32_t batch = max_bodies != 0 && max_bodies < MV_PURGE_BATCH ? max_bodies : MV_PURGE_BATCH;
    uint64_t left = 0;
    int rc = store_purge_left(s, &left); /* a read first: no write lock when none wait */
    while (rc == MV_OK && left > 0) {
        size_t done = 0;
        rc = store_purge_batch(s, batch, &done);
        if (rc == MV_OK) {
            rc = store_purge_left(s, &left);
        }
        if (max_bodies != 0 || done == 0) {
            break;
        }
    }
    if (rc != MV_OK) {
        return rc;
    }
    if (left == 0) {
        s->purge_hint = 0;
    }
    if (left_out != NULL) {
        *left_out = left;
    }
    return MV_OK;
}
