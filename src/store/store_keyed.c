/*
 * store_keyed.c -- rows of many messages of one listing read by their body keys
 * (store_keyed.h): the memos of a FETCH's window, the headers of a message list.
 *
 * WHY ONE SCAN
 *   A listing's messages were mostly delivered or imported one after another, so their
 *   bodies' ids lie close together, and the rows a window of them wants are a short range of
 *   one B-tree: one statement stepping over it costs a row each, where a statement a message
 *   costs a bind, a seek from the root and a reset (a third of the time a read by UID takes,
 *   for memos; most of a header listing's). Bodies far apart (a listing sorted otherwise,
 *   copies of old messages) are looked up one by one instead: a scan would read what lies
 *   between.
 *
 * WHY THE KEYS HOLD
 *   While the mailbox has the UIDVALIDITY and highest modseq the listing saw, every message
 *   it listed is still there with the same body (store_message_key_holds), so the body ids
 *   name those messages' rows; otherwise nothing is read and the caller asks by UID.
 */
#include "store/store_keyed.h"

#include "store/store_blob.h"
#include "store/store_message.h"

#include <stdlib.h>

static int keyed_want_order(const void *pa, const void *pb)
{
    const struct store_keyed_want *a = pa, *b = pb;
    if (a->body_id != b->body_id) {
        return a->body_id < b->body_id ? -1 : 1;
    }
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Hands st's row to the wants of its body from *at on (the wants sorted by body, the rows
 * read in id order); rows of other slots, and of bodies nobody wants, are passed over. */
static int keyed_row(mv_store *s,
                     sqlite3_stmt *st,
                     const struct store_keyed_want *want,
                     size_t count,
                     size_t *at,
                     const struct store_keyed_read *r)
{
    int64_t id = sqlite3_column_int64(st, 0);
    if (id % r->per_body != r->slot) {
        return MV_OK;
    }
    int64_t body = id / r->per_body;
    while (*at < count && want[*at].body_id < body) {
        (*at)++;
    }
    size_t n = 0;
    while (*at + n < count && want[*at + n].body_id == body) {
        n++;
    }
    return n > 0 ? r->row(r->ctx, s, st, &want[*at], n) : MV_OK;
}

/* The wanted bodies' rows: one scan of their id range when they lie close together, else a
 * lookup each. */
static int keyed_rows(mv_store *s,
                      const struct store_keyed_want *want,
                      size_t count,
                      const struct store_keyed_read *r)
{
    int64_t lo = want[0].body_id, hi = want[count - 1].body_id;
    int scan = hi - lo < 4 * (int64_t)count + 64;
    sqlite3_stmt *st = store_stmt(s, scan ? r->scan_sql : r->one_sql);
    if (st == NULL) {
        return s->stmt_failure;
    }
    int rc = MV_OK, step = SQLITE_DONE;
    size_t at = 0;
    for (size_t k = 0; rc == MV_OK && k < count; k++) {
        if (!scan && k > 0 && want[k].body_id == want[k - 1].body_id) {
            continue; /* one lookup a body */
        }
        sqlite3_bind_int64(st, 1, (scan ? lo : want[k].body_id) * r->per_body + r->slot);
        if (scan) {
            sqlite3_bind_int64(st, 2, hi * r->per_body + r->slot);
        }
        while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
            rc = keyed_row(s, st, want, count, &at, r);
        }
        if (rc == MV_OK && step != SQLITE_DONE) {
            rc = store_fail_sqlite(s, r->what);
        }
        sqlite3_reset(st);
        if (scan) {
            break;
        }
    }
    return rc;
}

int store_keyed_read(mv_store *s,
                     const char *fn,
                     const char *mailbox,
                     const struct mv_message_key *keys,
                     size_t n,
                     const struct store_keyed_read *r)
{
    if (n > MV_MEMO_BATCH_MAX) {
        return store_fail(s, MV_EINVAL, "%s: more than MV_MEMO_BATCH_MAX keys", fn);
    }
    if (n == 0) {
        return MV_OK;
    }
    struct store_keyed_want *want = malloc(n * sizeof *want);
    if (want == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory %s", r->what);
    }
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        int compression = 0;
        if (keys[i].uidvalidity != keys[0].uidvalidity || keys[i].modseq != keys[0].modseq) {
            free(want);
            return store_fail(s, MV_EINVAL, "%s: keys of two listings", fn);
        }
        if (store_body_key_parts(keys[i].body_key, &want[count].body_id, &compression)) {
            want[count++].index = i;
        }
    }
    qsort(want, count, sizeof *want, keyed_want_order);
    int began = 0;
    int rc = store_message_key_holds(s, mailbox, &keys[0], &began);
    rc = rc == 1 ? MV_OK
         : rc == 0
             ? store_fail(s, MV_ENOTFOUND, "mailbox \"%s\" changed since the listing", mailbox)
             : rc;
    if (rc == MV_OK && count > 0) {
        rc = keyed_rows(s, want, count, r);
    }
    store_message_read_end(s, began);
    free(want);
    return rc;
}
