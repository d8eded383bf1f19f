/*
 * store_fts_backlog.c -- full-text rows built after the mail is visible: a stepped drain of
 * the sealed queue (mv_queue_drain_step) stores each delivery without its full-text row and
 * notes the body here; mv_store_index_backlog() builds the rows later, between other work.
 *
 * WHY
 *   Building a body's full-text row (the trigram tokenizer over its header and text, FTS5's
 *   hash and its segment at COMMIT) was ~40% of the CPU a drained delivery cost (1,200 small
 *   messages into a 10,000-message store: 0.51-0.56 ms a delivery with the row, 0.28-0.35
 *   without, docs/BENCHMARKS.md). A user waiting for queued mail to show up waits for that
 *   too, though only a SEARCH TEXT/BODY needs it.
 *
 * FORMAT
 *   One meta row per body, key STORE_FTS_BACKLOG_KEY + the body id in 20 digits, value
 *   empty: written in the transaction that stores the body, so a body without its full-text
 *   row always has its backlog row (a crash keeps both or neither). No schema change: meta
 *   is a key-value table every version has.
 *
 * SEARCHES
 *   While the backlog holds a body, a full-text criterion also reads the backlog's bodies
 *   (store_search.c): mv_body_text(id, column) parses the stored body again and gives the
 *   text its full-text row would hold (0 the header, 1 the body), and mv_fts_match checks it
 *   as it checks an indexed row's. So a search finds a message whether or not its row is
 *   built yet, on any handle (read-only ones too), without writing. It costs a parse per
 *   backlog body and search, and the backlog is short-lived (mailvaultd builds it between
 *   commands once the drain is over).
 *
 * CATCH-UP (mv_store_index_backlog)
 *   Up to max bodies, in one transaction: each body that still exists and has no full-text
 *   row is parsed again from its stored bytes (as mailvault repair does) and its row
 *   queued for the COMMIT (store_body_index); then their backlog rows are deleted. A body
 *   expunged and purged meanwhile, or indexed by a repair, only loses its backlog row. A
 *   crash before the COMMIT loses nothing: the rows and the backlog are as before.
 *
 * APPENDS LATER (mv_store_index_later)
 *   A server may defer every new body of its handle, not only a drain's: an APPEND's
 *   durable commit then writes the message without its trigram rows, which were about
 *   two thirds of its WAL frames (a 2-50 KB message: ~19 pages of FTS5 segment and ~8 of
 *   stored text out of ~45; the segment is written per transaction, so one per message),
 *   and a catch-up batch writes one segment for all its bodies, whose trigrams they share.
 *
 * GIVING WAY
 *   A catch-up batch parses and tokenizes each body again (a few hundred microseconds to
 *   milliseconds a body), so a batch of 32 held a server's writer for tens of milliseconds
 *   while a client's STORE waited (issue 13: with APPENDs deferred, STORE's p99 at 10
 *   clients went from 19 to 36 ms). It asks the purge's give-way function
 *   (mv_store_purge_give_way) after each body but the last and, on a yes, commits what it
 *   built; the rest stays in the backlog for the next call.
 *
 * A DAMAGED BODY (SET ASIDE)
 *   A body whose stored bytes cannot be read or parsed (a page that fails authentication,
 *   bytes that do not decompress or do not match the SHA-256) would fail every catch-up
 *   again, and nothing behind it would ever be indexed. The catch-up sets it aside instead:
 *   its backlog key becomes STORE_FTS_ASIDE_KEY + the id, whose value is why (the error), in
 *   the batch's transaction, and the batch goes on. Only the body's own errors set it aside;
 *   those of the moment (memory, disk, lock) fail the call as before, to be tried again. A
 *   set-aside body has no full-text row and no search reads it (it cannot be read);
 *   mailvault check reports it with its reason; mailvault repair indexes it once its bytes
 *   read again (a restored page) and drops the keys of bodies indexed or gone; the purge
 *   drops a body's key with the body (store_blob.c: ids are reused). A mv_body_text
 *   read of a damaged backlog body gives no text (no match) rather than failing the search,
 *   for the time before the catch-up reaches it. Its bytes are never changed here.
 */
#include "crypto/crypt.h"
#include "store/store_blob.h"
#include "store/store_message.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bodies per catch-up transaction when the caller gives no max. */
#define STORE_FTS_BACKLOG_BATCH 256
/* mv_store_index_backlog()'s *left_out counts up to this many bodies (mailvault.h). */
#define STORE_FTS_BACKLOG_COUNT_MAX 1000

static void store_fts_backlog_key(char *out, size_t size, int64_t body_id)
{
    snprintf(out, size, STORE_FTS_BACKLOG_KEY "%020lld", (long long)body_id);
}

int store_fts_backlog_add(mv_store *s, int64_t body_id)
{
    char key[64];
    store_fts_backlog_key(key, sizeof key, body_id);
    /* OR IGNORE: a purged body's id taken again by a new body that is deferred too */
    sqlite3_stmt *st = store_stmt(s, "INSERT OR IGNORE INTO meta(key, value) VALUES (?, x'')");
    if (st == NULL) {
        return store_fail_sqlite(s, "noting a body for the full-text index");
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    if (step != SQLITE_DONE) {
        return store_fail_sqlite(s, "noting a body for the full-text index");
    }
    s->fts_backlog_hint = 1;
    return MV_OK;
}

int store_fts_backlog_any(mv_store *s, int *any)
{
    *any = 0;
    sqlite3_stmt *st = store_stmt(s, "SELECT 1 FROM meta WHERE key > '" STORE_FTS_BACKLOG_KEY
                                     "' AND key < '" STORE_FTS_BACKLOG_END "' LIMIT 1");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading the full-text backlog");
    }
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    if (step != SQLITE_ROW && step != SQLITE_DONE) {
        return store_fail_sqlite(s, "reading the full-text backlog");
    }
    *any = step == SQLITE_ROW;
    return MV_OK;
}

/* Up to max backlog body ids, ascending, into ids (max entries). In key order: the ids are
 * zero-padded, so key order is id order and meta's primary key yields the first max rows
 * without reading (or sorting) the rest of the backlog; STORE_FTS_BACKLOG_IDS's ORDER BY id
 * would sort all of it in every call (46 ms a call at 32,000 bodies, so the catch-up cost
 * time in the square of the backlog). */
static int store_fts_backlog_ids(mv_store *s, int64_t *ids, uint32_t max, uint32_t *count)
{
    *count = 0;
    sqlite3_stmt *st =
        store_stmt(s, "SELECT CAST(substr(key, 13) AS INTEGER) FROM meta WHERE "
                      "key > '" STORE_FTS_BACKLOG_KEY "' AND key < '" STORE_FTS_BACKLOG_END
                      "' ORDER BY key LIMIT ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading the full-text backlog");
    }
    sqlite3_bind_int64(st, 1, max);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && *count < max) {
        ids[(*count)++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW || step == SQLITE_DONE
               ? MV_OK
               : store_fail_sqlite(s, "reading the full-text backlog");
}

/* *need: 1 if body_id exists and has no full-text row. */
static int store_fts_backlog_needs_row(mv_store *s, int64_t body_id, int *need)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT EXISTS(SELECT 1 FROM bodies WHERE id = ?1) AND "
                                     "NOT EXISTS(SELECT 1 FROM fts WHERE rowid = ?1)");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading the full-text backlog");
    }
    sqlite3_bind_int64(st, 1, body_id);
    int step = sqlite3_step(st);
    *need = step == SQLITE_ROW && sqlite3_column_int(st, 0) != 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "reading the full-text backlog");
}

/* Sets body_id aside (A DAMAGED BODY above) in the open write transaction: its aside key,
 * why as the value; its backlog key is deleted with the batch's. */
static int store_fts_backlog_set_aside(mv_store *s, int64_t body_id, const char *why)
{
    char key[64];
    snprintf(key, sizeof key, STORE_FTS_ASIDE_KEY "%020lld", (long long)body_id);
    sqlite3_stmt *st = store_stmt(s, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "setting a damaged body aside");
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, why, -1, SQLITE_TRANSIENT);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "setting a damaged body aside");
}

/* One catch-up transaction over ids (count of them, ascending). A damaged body is set aside;
 * if its failure also ended the transaction (SQLite rolls one back
 * after an I/O error such as a page that fails authentication), *lost gets its id and
 * MV_ECORRUPT returns: the caller sets it aside in a transaction of its own and runs the
 * batch again. With mv_store_purge_give_way()'s function set, it is asked after each body
 * but the last (GIVING WAY above); on a yes *gave_way is set and only the bodies done so
 * far leave the backlog. */
static int store_fts_backlog_build(
    mv_store *s, const int64_t *ids, uint32_t count, int64_t *lost, int *gave_way)
{
    int rc = MV_OK;
    for (uint32_t i = 0; rc == MV_OK && i < count; i++) {
        if (i > 0 && s->purge_give_way != NULL && s->purge_give_way(s->purge_give_way_arg)) {
            *gave_way = 1;
            count = i; /* ids[i] and after stay in the backlog */
            break;
        }
        int need = 0;
        rc = store_fts_backlog_needs_row(s, ids[i], &need);
        if (rc != MV_OK || !need) {
            continue;
        }
        struct store_parsed parsed;
        memset(&parsed, 0, sizeof parsed);
        rc = store_body_parse_stored(s, ids[i], &parsed);
        if (rc == MV_OK) {
            rc = store_body_index(s, ids[i], &parsed); /* inserted at the COMMIT */
            store_parsed_free(&parsed);
        } else if (store_body_damaged(rc)) {
            if (sqlite3_get_autocommit(s->db)) {
                *lost = ids[i];
                return MV_ECORRUPT;
            }
            char why[sizeof s->errmsg];
            snprintf(why, sizeof why, "%s", mv_store_errmsg(s));
            rc = store_fts_backlog_set_aside(s, ids[i], why);
        }
    }
    char first[64], last[64];
    store_fts_backlog_key(first, sizeof first, ids[0]);
    store_fts_backlog_key(last, sizeof last, ids[count - 1]);
    sqlite3_stmt *st =
        rc == MV_OK ? store_stmt(s, "DELETE FROM meta WHERE key >= ? AND key <= ?") : NULL;
    if (rc == MV_OK && st == NULL) {
        rc = store_fail_sqlite(s, "clearing the full-text backlog");
    }
    if (st != NULL) {
        sqlite3_bind_text(st, 1, first, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, last, -1, SQLITE_TRANSIENT);
        int step = sqlite3_step(st);
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "clearing the full-text backlog");
    }
    return rc;
}

/* Sets body_id aside in a transaction of its own, why its error (a failure that had ended
 * the batch's transaction). */
static int store_fts_backlog_set_aside_alone(mv_store *s, int64_t body_id, const char *why)
{
    char key[64];
    store_fts_backlog_key(key, sizeof key, body_id);
    int rc = store_begin(s);
    if (rc != MV_OK) {
        return rc;
    }
    rc = store_fts_backlog_set_aside(s, body_id, why);
    sqlite3_stmt *st = rc == MV_OK ? store_stmt(s, "DELETE FROM meta WHERE key = ?") : NULL;
    if (rc == MV_OK && st == NULL) {
        rc = store_fail_sqlite(s, "setting a damaged body aside");
    }
    if (st != NULL) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
        int step = sqlite3_step(st);
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "setting a damaged body aside");
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else {
        store_rollback(s);
    }
    return rc;
}

/* The bodies still in the backlog, counted up to STORE_FTS_BACKLOG_COUNT_MAX: a call per
 * catch-up batch that counted every key cost time in the backlog's length (~3 ms a call at
 * 32,000 bodies), and the callers only need to know whether any wait. */
static int store_fts_backlog_left(mv_store *s, uint64_t *left)
{
    sqlite3_stmt *st =
        store_stmt(s, "SELECT count(*) FROM (SELECT 1 FROM meta WHERE key > '" STORE_FTS_BACKLOG_KEY
                      "' AND key < '" STORE_FTS_BACKLOG_END "' LIMIT ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading the full-text backlog");
    }
    sqlite3_bind_int(st, 1, STORE_FTS_BACKLOG_COUNT_MAX);
    int step = sqlite3_step(st);
    *left = step == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "reading the full-text backlog");
}

int mv_store_index_later(mv_store *s, int on)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (s->readonly) {
        return store_fail(s, MV_EINVAL, "the store is open read-only");
    }
    s->index_later = on != 0;
    return MV_OK;
}

int mv_store_index_backlog_count(mv_store *s, uint64_t *count_out)
{
    if (count_out != NULL) {
        *count_out = 0;
    }
    if (s == NULL || count_out == NULL) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_store_index_backlog_count: no count")
                         : MV_EINVAL;
    }
    if (!s->fts_backlog_hint) {
        return MV_OK; /* as mv_store_index_backlog(): none deferred through this handle */
    }
    store_enter(s);
    return store_fts_backlog_left(s, count_out);
}

int mv_store_index_backlog(mv_store *s, uint32_t max_bodies, uint64_t *left_out)
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
    if (!s->fts_backlog_hint) {
        return MV_OK; /* nothing deferred through this handle since a call found none */
    }
    uint32_t batch = max_bodies != 0 && max_bodies < STORE_FTS_BACKLOG_BATCH
                         ? max_bodies
                         : STORE_FTS_BACKLOG_BATCH;
    int64_t *ids = malloc(batch * sizeof *ids);
    if (ids == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory building full-text rows");
    }
    int any = 0, gave_way = 0;
    int rc = store_fts_backlog_any(s, &any); /* a read first: no write lock when none wait */
    uint64_t left = (uint64_t)any;
    while (rc == MV_OK && left > 0) {
        uint32_t count = 0;
        int64_t lost = 0;
        rc = store_begin(s);
        if (rc != MV_OK) {
            break;
        }
        rc = store_fts_backlog_ids(s, ids, batch, &count);
        if (rc == MV_OK && count > 0) {
            rc = store_fts_backlog_build(s, ids, count, &lost, &gave_way);
        }
        if (rc == MV_OK) {
            rc = store_fts_backlog_left(s, &left);
        }
        if (rc == MV_OK) {
            rc = store_commit(s);
        } else {
            store_rollback(s);
        }
        if (rc != MV_OK && lost != 0) {
            /* its failure ended the transaction: set it aside alone, then the batch again
             * without it (each time one body fewer, so this ends) */
            char why[sizeof s->errmsg];
            snprintf(why, sizeof why, "%s", mv_store_errmsg(s));
            rc = store_fts_backlog_set_aside_alone(s, lost, why);
            left = 1;
            continue;
        }
        if (max_bodies != 0 || count == 0 || gave_way) {
            break;
        }
    }
    free(ids);
    if (rc == MV_OK && left == 0) {
        s->fts_backlog_hint = 0;
    }
    if (left_out != NULL && rc == MV_OK) {
        *left_out = left;
    }
    return rc;
}

int mv_store_index_set_aside(
    mv_store *s, int64_t after_id, int64_t *ids, uint32_t max, uint32_t *count_out)
{
    if (count_out != NULL) {
        *count_out = 0;
    }
    if (s == NULL || count_out == NULL || (ids == NULL && max > 0)) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_store_index_set_aside: no output")
                         : MV_EINVAL;
    }
    store_enter(s);
    char after[64];
    snprintf(after, sizeof after, STORE_FTS_ASIDE_KEY "%020lld",
             (long long)(after_id > 0 ? after_id : 0));
    sqlite3_stmt *st =
        store_stmt(s, "SELECT CAST(substr(key, 11) AS INTEGER) FROM meta WHERE "
                      "key > ? AND key < '" STORE_FTS_ASIDE_END "' ORDER BY key LIMIT ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading the bodies set aside");
    }
    sqlite3_bind_text(st, 1, after, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, max);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && *count_out < max) {
        ids[(*count_out)++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW || step == SQLITE_DONE
               ? MV_OK
               : store_fail_sqlite(s, "reading the bodies set aside");
}

/* ---- mv_body_text(body_id, column) ---------------------------------------------------- */

/* The last body parsed: a search asks for its header and then its body. The texts are
 * those of the store as it was when they were read: they count only while neither this
 * connection (total_changes) nor another (the data version) has changed it, since a purged
 * body's id can come back as another body. */
struct store_fts_backlog_text {
    mv_store *s;
    int valid; /* the texts below are id's, read at changes / version */
    int64_t id;
    int64_t changes;
    unsigned version;
    char *header;
    char *body;
};

static void store_fts_backlog_text_clear(struct store_fts_backlog_text *t)
{
    crypt_free_wiped(t->header);
    crypt_free_wiped(t->body);
    t->header = NULL;
    t->body = NULL;
    t->valid = 0;
}

static void store_fts_backlog_text_free(void *p)
{
    struct store_fts_backlog_text *t = p;
    if (t != NULL) {
        store_fts_backlog_text_clear(t);
        free(t);
    }
}

static unsigned store_fts_backlog_version(sqlite3 *db)
{
    unsigned version = 0;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_DATA_VERSION, &version) != SQLITE_OK) {
        version = 0;
    }
    return version;
}

/* Parses body id into t. MV_OK or an error (message set). */
static int store_fts_backlog_text_load(struct store_fts_backlog_text *t, int64_t id)
{
    store_fts_backlog_text_clear(t);
    struct store_parsed parsed;
    memset(&parsed, 0, sizeof parsed);
    int rc = store_body_parse_stored(t->s, id, &parsed);
    if (rc != MV_OK) {
        return rc;
    }
    t->header = strdup(parsed.header_text != NULL ? parsed.header_text : "");
    t->body = strdup(parsed.text != NULL ? parsed.text : "");
    store_parsed_free(&parsed);
    if (t->header == NULL || t->body == NULL) {
        store_fts_backlog_text_clear(t);
        return MV_ENOMEM;
    }
    t->valid = 1;
    t->id = id;
    t->changes = sqlite3_total_changes64(t->s->db);
    t->version = store_fts_backlog_version(t->s->db);
    return MV_OK;
}

/* mv_body_text(body_id, column): the text body_id's full-text row holds, column 0 the
 * header, 1 the body (see SEARCHES above); an error if the body cannot be read. */
static void store_fts_backlog_text_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct store_fts_backlog_text *t = sqlite3_user_data(ctx);
    int64_t id = sqlite3_value_int64(argv[0]);
    if (!t->valid || t->id != id || t->changes != sqlite3_total_changes64(t->s->db) ||
        t->version != store_fts_backlog_version(t->s->db)) {
        int rc = store_fts_backlog_text_load(t, id);
        if (rc == MV_ENOMEM) {
            sqlite3_result_error_nomem(ctx);
            return;
        }
        if (store_body_damaged(rc)) {
            sqlite3_result_null(ctx); /* no text: a damaged body matches nothing (above) */
            return;
        }
        if (rc != MV_OK) {
            sqlite3_result_error(ctx, mv_store_errmsg(t->s), -1);
            return;
        }
    }
    const char *text = sqlite3_value_int(argv[1]) == 0 ? t->header : t->body;
    sqlite3_result_text(ctx, text, -1, SQLITE_TRANSIENT);
}

int store_fts_backlog_functions(mv_store *s)
{
    struct store_fts_backlog_text *t = calloc(1, sizeof *t);
    if (t == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory registering the store's SQL functions");
    }
    t->s = s;
    /* not deterministic: the same id reads another body after a purge and an append */
    if (sqlite3_create_function_v2(s->db, "mv_body_text", 2, SQLITE_UTF8 | SQLITE_DIRECTONLY, t,
                                   store_fts_backlog_text_fn, NULL, NULL,
                                   store_fts_backlog_text_free) != SQLITE_OK) {
        return store_fail_sqlite(s, "registering the store's SQL functions");
    }
    return MV_OK;
}
