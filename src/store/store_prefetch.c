/*
 * store_prefetch.c -- the bodies of many messages asked of the disk at once, before they
 * are read one by one (mv_message_prefetch_keyed; issue 13).
 *
 * A client's FETCH of many whole messages from a mailbox whose file is not in the page
 * cache used to wait for each message's leaf in turn (one random read each). The body keys
 * of a listing name the bodies_data rows, so their leaves can be found by walking the
 * table's interior pages (vfs_prefetch.c) and asked for together; the reads of the messages
 * that follow then find them in the page cache. From a file whose leaves were not in the
 * page cache, the chains that lie farther than STORE_BLOB_NEAR_PAGES from their leaf are
 * asked for too, and the attachments stored apart: their body_parts entries (an index walk
 * whose leaves are read for the attachment ids), then their rows and chains.
 */
#include "store/store.h"
#include "store/store_blob.h"
#include "vfs/vfs_hint.h"

#include <stdlib.h>
#include <string.h>

/* The root pages of the tables a body's bytes live in (bodies holds the header's copy), as
 * the schema says now (auto_vacuum may move a root page): 0 for one not found. */
struct store_prefetch_roots {
    uint32_t bodies, body_headers, bodies_data, body_parts, attachments_data;
};

static void store_prefetch_roots(mv_store *s, struct store_prefetch_roots *r)
{
    memset(r, 0, sizeof *r);
    sqlite3_stmt *st = store_stmt(s, "SELECT name, rootpage FROM sqlite_schema WHERE type = "
                                     "'table' AND name IN ('bodies', 'body_headers', "
                                     "'bodies_data', 'body_parts', 'attachments_data')");
    while (st != NULL && sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        sqlite3_int64 root = sqlite3_column_int64(st, 1);
        uint32_t page = root > 1 && root <= UINT32_MAX ? (uint32_t)root : 0;
        if (name == NULL) {
            continue;
        }
        if (strcmp(name, "bodies") == 0) {
            r->bodies = page;
        } else if (strcmp(name, "body_headers") == 0) {
            r->body_headers = page;
        } else if (strcmp(name, "bodies_data") == 0) {
            r->bodies_data = page;
        } else if (strcmp(name, "body_parts") == 0) {
            r->body_parts = page;
        } else if (strcmp(name, "attachments_data") == 0) {
            r->attachments_data = page;
        }
    }
    if (st != NULL) {
        sqlite3_reset(st);
    }
}

/* Attachments stored apart, of the bodies ids[0..n): their body_parts entries' leaves are
 * asked for and read (an index walk), then the attachments' rows and chains. From a cold
 * file only (the caller's test): from the page cache this would decrypt every leaf for
 * nothing. */
static void store_prefetch_attachments(mv_store *s,
                                       const struct store_prefetch_roots *r,
                                       const int64_t *ids,
                                       size_t n)
{
    if (r->body_parts == 0 || r->attachments_data == 0) {
        return;
    }
    size_t cap = MV_PREFETCH_ROWS_MAX;
    int64_t *attachments = malloc(cap * sizeof *attachments);
    if (attachments == NULL) {
        return;
    }
    /* body_parts(body_id, seq, position, attachment_id): column 3 of the body's entries */
    struct mv_fcntl_prefetch parts = {.root = r->body_parts,
                                      .index = 1,
                                      .rowids = ids,
                                      .n = n,
                                      .collect_column = 3,
                                      .collected = attachments,
                                      .collected_cap = cap};
    (void)mv_db_prefetch(s->db, &parts);
    if (parts.collected_n > 0) {
        struct mv_fcntl_prefetch data = {.root = r->attachments_data,
                                         .rowids = attachments,
                                         .n = parts.collected_n,
                                         .always_chains = 1};
        (void)mv_db_prefetch(s->db, &data);
    }
    free(attachments);
}

/* What a prefetch asks for: rows of the header tables only (mv_message_prefetch_headers's
 * MV_PREFETCH_* in heads), the bodies' stored bytes, or those and the attachments stored
 * apart. */
enum store_prefetch_what { STORE_PREFETCH_HEADERS, STORE_PREFETCH_SKELETONS, STORE_PREFETCH_WHOLE };

/* The leaves of root's rows rowids[0..rows) asked for, the leaf alone (the header tables' rows
 * hold what is read of them); *cold as mv_message_prefetch_headers says. */
static void
store_prefetch_leaves(mv_store *s, uint32_t root, const int64_t *rowids, size_t rows, int *cold)
{
    if (root == 0) {
        return;
    }
    struct mv_fcntl_prefetch p = {.root = root, .rowids = rowids, .n = rows};
    (void)mv_db_prefetch(s->db, &p);
    *cold |= p.cold;
}

/* mv_message_prefetch_keyed() and its narrower kinds. */
static int store_prefetch(mv_store *s,
                          const struct mv_message_key *keys,
                          size_t n,
                          enum store_prefetch_what what,
                          unsigned heads,
                          int *cold_out)
{
    int cold = 0;
    if (cold_out != NULL) {
        *cold_out = 0;
    }
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
    struct store_prefetch_roots roots;
    store_prefetch_roots(s, &roots);
    if (rows > 0 && what == STORE_PREFETCH_HEADERS) {
        if ((heads & MV_PREFETCH_HEADER_COPY) != 0) {
            store_prefetch_leaves(s, roots.bodies, rowids, rows, &cold);
        }
        if ((heads & MV_PREFETCH_FIELDS) != 0) {
            store_prefetch_leaves(s, roots.body_headers, rowids, rows, &cold);
        }
        if (cold_out != NULL) {
            *cold_out = cold;
        }
    } else if (rows > 0 && what != STORE_PREFETCH_HEADERS && roots.bodies_data != 0) {
        struct mv_fcntl_prefetch p = {
            .root = roots.bodies_data, .rowids = rowids, .n = rows, .near = STORE_BLOB_NEAR_PAGES};
        (void)mv_db_prefetch(s->db, &p);
        if (p.cold && what == STORE_PREFETCH_WHOLE) {
            store_prefetch_attachments(s, &roots, rowids, rows);
        }
    }
    free(rowids);
    return MV_OK;
}

int mv_message_prefetch_keyed(mv_store *s, const struct mv_message_key *keys, size_t n)
{
    return store_prefetch(s, keys, n, STORE_PREFETCH_WHOLE, 0, NULL);
}

int mv_message_prefetch_skeletons(mv_store *s, const struct mv_message_key *keys, size_t n)
{
    return store_prefetch(s, keys, n, STORE_PREFETCH_SKELETONS, 0, NULL);
}

int mv_message_prefetch_headers(
    mv_store *s, const struct mv_message_key *keys, size_t n, unsigned what, int *cold)
{
    return store_prefetch(s, keys, n, STORE_PREFETCH_HEADERS, what, cold);
}
