/*
 * store_purge.c -- mv_store_purge: deletes the bodies that expunges and mailbox deletes left
 * without a message (body_refs.refcount 0, found through the partial index
 * body_refs_unreferenced).
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
 * GIVING WAY
 *   A body costs milliseconds (its full-text delete), and a command that arrives while a
 *   batch runs waits for it, since the batch holds the write lock and the caller's thread.
 *   With mv_store_purge_give_way() set, a batch deletes its bodies STORE_PURGE_CHUNK at a
 *   time and asks the caller's function after each chunk but the last; a yes ends the batch
 *   there: the chunks deleted so far are committed (nothing done is thrown away) and
 *   mv_store_purge() returns MV_EBUSY with what it deleted counted. A command then waits for
 *   one chunk at most, and every batch deletes at least one chunk, so a purge under commands
 *   that never stop still ends. (Before, a yes interrupted the statement and rolled the whole
 *   batch back: the caller let it give way only in the first half of its expected time, so a
 *   command that came later waited for up to half a batch, and a batch forced through under
 *   steady traffic could not give way at all: at 10 clients of the IMAP bench those waits
 *   were most of the STOREs' slowest 2%, issue 13.) Without a give-way function a batch
 *   deletes its bodies in one set of statements.
 *
 * DROPPED REFERENCES
 *   An EXPUNGE does not decrement body_refs.refcount itself: it notes each body's dropped
 *   references in meta (STORE_PURGE_UNREF_KEY, store.h), a few sequential rows instead of a
 *   random page of body_refs per message (store_message_expunge_range). Each batch
 *   here takes up to its size of those rows off the counts first (store_purge_unref), in its
 *   own transaction, so the bodies they leave at 0 are deleted in that batch or the next.
 *   mv_store_check counts the noted references with a body's messages; mv_store_repair takes
 *   them off before it counts references again.
 *
 * CONSISTENCY
 *   Ids are read inside the purge's own write transaction, so a body that an append of the
 *   same bytes took up again (refcount 1) is never deleted, and no body id is reused while
 *   its full-text row exists (the row and the body go in one transaction).
 */
#include "store/store.h"
#include "vfs/db_column.h"

#include <stdio.h>

/* Up to max ids of bodies without a message, ascending. */
static int store_purge_ids(mv_store *s, uint32_t max, struct store_ids *ids)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT id FROM body_refs INDEXED BY body_refs_unreferenced "
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

/* Each kind counted up to this many (mailvault.h): counted in full before every batch, the
 * waiting bodies and references made a purge's cost grow with the square of what it purges
 * (an EXPUNGE of 10% of 1,000,000 notes 100,000 references: ~2,000 batches of ~50, each
 * counting all that is left). */
#define STORE_PURGE_COUNT_MAX 1000

/* The number of bodies without a message (through the partial index) and of bodies whose
 * dropped references wait (STORE_PURGE_UNREF_KEY), each up to STORE_PURGE_COUNT_MAX. */
static int store_purge_left(mv_store *s, uint64_t *left)
{
    sqlite3_stmt *st = store_stmt(
        s, "SELECT (SELECT count(*) FROM (SELECT 1 FROM body_refs INDEXED BY "
           "body_refs_unreferenced WHERE refcount = 0 LIMIT ?1)) + (SELECT count(*) FROM (SELECT 1 "
           "FROM meta WHERE key > "
           "'" STORE_PURGE_UNREF_KEY "' AND key < '" STORE_PURGE_UNREF_END "' LIMIT ?1))");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting unreferenced bodies");
    }
    sqlite3_bind_int(st, 1, STORE_PURGE_COUNT_MAX);
    int step = sqlite3_step(st);
    *left = step == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "counting unreferenced bodies");
}

/* Whether any body waits without a message or any dropped reference waits (*any): what
 * store_purge_left counts, looked up once each. The loop's first test, before any batch: a
 * count of up to STORE_PURGE_COUNT_MAX walked as many index entries again for each batch of
 * a server's purge (~2 x 1,000 entries, ~1 ms of CPU, a batch of ~50 bodies taking ~25). */
static int store_purge_any(mv_store *s, uint64_t *any)
{
    sqlite3_stmt *st = store_stmt(
        s, "SELECT EXISTS (SELECT 1 FROM body_refs INDEXED BY body_refs_unreferenced WHERE "
           "refcount = 0) OR EXISTS (SELECT 1 FROM meta WHERE key > '" STORE_PURGE_UNREF_KEY
           "' AND key < "
           "'" STORE_PURGE_UNREF_END "')");
    if (st == NULL) {
        return store_fail_sqlite(s, "looking for unreferenced bodies");
    }
    int step = sqlite3_step(st);
    *any = step == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "looking for unreferenced bodies");
}

/* The exclusive upper key of the first max rows of the dropped references (max 0: all of
 * them) into hi (hi_size bytes). */
static int store_purge_unref_bound(mv_store *s, uint32_t max, char *hi, size_t hi_size)
{
    snprintf(hi, hi_size, "%s", STORE_PURGE_UNREF_END);
    if (max == 0) {
        return MV_OK;
    }
    sqlite3_stmt *st =
        store_stmt(s, "SELECT key FROM meta WHERE key > '" STORE_PURGE_UNREF_KEY
                      "' AND key < '" STORE_PURGE_UNREF_END "' ORDER BY key LIMIT 1 OFFSET ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading dropped references");
    }
    sqlite3_bind_int64(st, 1, max);
    int step = sqlite3_step(st), oom = 0;
    if (step == SQLITE_ROW) {
        const char *key = mv_db_column_text(st, 0, &oom);
        snprintf(hi, hi_size, "%s", key != NULL ? key : STORE_PURGE_UNREF_END);
    }
    sqlite3_reset(st);
    if (oom) {
        return store_fail(s, MV_ENOMEM, "out of memory reading dropped references");
    }
    return step == SQLITE_ROW || step == SQLITE_DONE
               ? MV_OK
               : store_fail_sqlite(s, "reading dropped references");
}

int store_purge_unref(mv_store *s, uint32_t max, uint64_t *applied)
{
    if (applied != NULL) {
        *applied = 0;
    }
    char hi[64];
    int rc = store_purge_unref_bound(s, max, hi, sizeof hi);
    sqlite3_stmt *st = NULL;
    if (rc == MV_OK) {
        /* Never below the messages that still use the body (messages_body): a noted
         * reference that something else already took off (an older build's repair, a hand
         * edit) must not cost a message its body. */
        st = store_stmt(
            s, "UPDATE body_refs SET refcount = max(refcount - CAST((SELECT value FROM "
               "meta WHERE key = printf('" STORE_PURGE_UNREF_KEY "%020d', body_refs.id)) "
               "AS INTEGER), (SELECT count(*) FROM messages m INDEXED BY "
               "messages_body WHERE m.body_id = body_refs.id)) WHERE id IN (SELECT "
               "CAST(substr(key, 13) AS INTEGER) FROM meta WHERE key > '" STORE_PURGE_UNREF_KEY
               "' AND key < ?1)");
        if (st == NULL) {
            rc = store_fail_sqlite(s, "taking dropped references off the bodies");
        }
    }
    if (rc == MV_OK) {
        sqlite3_bind_text(st, 1, hi, -1, SQLITE_TRANSIENT);
        int step = sqlite3_step(st);
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? MV_OK
                                 : store_fail_sqlite(s, "taking dropped references off the bodies");
    }
    if (rc == MV_OK) {
        st = store_stmt(s, "DELETE FROM meta WHERE key > '" STORE_PURGE_UNREF_KEY "' AND key < ?1");
        if (st == NULL) {
            return store_fail_sqlite(s, "deleting dropped references");
        }
        sqlite3_bind_text(st, 1, hi, -1, SQLITE_TRANSIENT);
        int step = sqlite3_step(st);
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "deleting dropped references");
        if (rc == MV_OK && applied != NULL) {
            *applied = (uint64_t)sqlite3_changes(s->db);
        }
    }
    return rc;
}

/* Bodies deleted between two give-way questions (GIVING WAY): each chunk is one set of
 * statements (FTS5 writes what it holds at each statement's end, so a body a statement would
 * cost a segment write each: chunks of 4 cost ~15% more than one set a batch, of 2 ~26%);
 * 4 bodies of the IMAP bench's mail (2-50 KB) take ~4-5 ms of CPU. */
#define STORE_PURGE_CHUNK 4

void mv_store_purge_give_way(mv_store *s, int (*give_way)(void *arg), void *arg)
{
    if (s != NULL) {
        s->purge_give_way = give_way;
        s->purge_give_way_arg = arg;
    }
}

/* One transaction: up to max bodies' dropped references taken off, then up to max bodies
 * deleted; *done gets how many of both that were committed. MV_EBUSY: it gave way (GIVING
 * WAY) after deleting *done - references of them, which are committed. */
static int store_purge_batch(mv_store *s, uint32_t max, size_t *done)
{
    struct store_ids ids = {0};
    *done = 0;
    int rc = store_begin(s), began = rc == MV_OK;
    uint64_t applied = 0;
    if (rc == MV_OK) { /* the references expunges dropped first: they make bodies unused */
        rc = store_purge_unref(s, max, &applied);
    }
    if (rc == MV_OK) {
        rc = store_purge_ids(s, max, &ids);
    }
    size_t chunk = s->purge_give_way != NULL ? STORE_PURGE_CHUNK : ids.count;
    size_t dropped = 0;
    int gave_way = 0;
    while (rc == MV_OK && dropped < ids.count && !gave_way) {
        size_t n = ids.count - dropped < chunk ? ids.count - dropped : chunk;
        rc = store_bodies_drop(s, ids.ids + dropped, n);
        if (rc == MV_OK) {
            dropped += n;
            gave_way = dropped < ids.count && s->purge_give_way != NULL &&
                       s->purge_give_way(s->purge_give_way_arg);
        }
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (rc == MV_OK) {
        *done = dropped + applied; /* progress, for mv_store_purge's loop */
        if (gave_way) {
            rc = store_fail(s, MV_EBUSY,
                            "the purge gave way to a waiting command after %zu of %zu bodies",
                            dropped, ids.count);
        }
    }
    store_ids_free(&ids);
    return rc;
}

int mv_store_purge(mv_store *s, uint32_t max_bodies, uint64_t *left_out)
{
    return mv_store_purge_counted(s, max_bodies, NULL, left_out);
}

int mv_store_purge_counted(mv_store *s,
                           uint32_t max_bodies,
                           uint64_t *purged_out,
                           uint64_t *left_out)
{
    if (purged_out != NULL) {
        *purged_out = 0;
    }
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
    uint64_t left = 0, purged = 0;
    int rc = store_purge_any(s, &left); /* a read first: no write lock when none wait */
    while (rc == MV_OK && left > 0) {
        size_t done = 0;
        rc = store_purge_batch(s, batch, &done);
        purged += done; /* committed: a batch that fails does nothing, one that gives way
                         * what it did before */
        if (rc == MV_OK) {
            rc = store_purge_left(s, &left);
        }
        if (max_bodies != 0 || done == 0) {
            break;
        }
    }
    if (purged_out != NULL) {
        *purged_out = purged; /* also on an error: what earlier transactions deleted */
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
