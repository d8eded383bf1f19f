/*
 * store_fts_move.c -- schema version 9's full-text index filled after the open: the rows of
 * the version 8 index (positions, renamed fts_old by the migration) are copied into fts
 * (no positions) in bounded batches, mv_store_migrate_step(), and fts_old is dropped after
 * the last one. mv_store_migration() says how far it got.
 *
 * WHY
 *   Copying every row re-tokenizes every text: 27 s of CPU at 10,000 messages (100-150 s
 *   of wall time on a loaded machine), ~4-5 min at 100,000. Done inside the open, as every
 *   migration was, it held the user's first login that long, and the write lock with it:
 *   deliveries (LMTP) and every other process of the store waited, then failed with
 *   "database is locked" after the 30 s busy timeout, and nothing was logged. The open now
 *   only renames the old index and creates the new one (milliseconds); a server moves the
 *   rows between commands (mailvaultd: as it purges), `mailvault maintain` moves what is
 *   left.
 *
 * INVARIANTS (while fts_old exists)
 *   (1) meta 'fts_moved' holds a rowid C: every row of fts_old above C is a live body's and
 *       is not yet in fts; the rows at or below C are in fts (or their bodies were purged).
 *   (2) New bodies are indexed in fts only, purged ones are deleted from fts and, above C,
 *       from fts_old (store_blob.c): so no body id is ever in both above C, and a reused id
 *       never finds an old row.
 *   A search therefore reads fts, and fts_old above C (store_search.c): together exactly
 *   the rows one complete index would hold. A batch moves rows and raises C in one
 *   transaction, so a crash leaves (1) and (2) true, and the next batch goes on from C.
 *
 * DROPPING
 *   DROP TABLE of the old index in one transaction took 10-16 s at 10,000 messages (its
 *   ~280 MB of pages overwritten, secure_delete, and the file's end moved into them,
 *   auto_vacuum=FULL, at the commit), with the write lock held. So the batch that finds no
 *   row left detaches the index's big shadow tables from it (store_fts_old_detach): in one
 *   transaction it renames data, idx, content and docsize to fts_gone_*, plain tables that
 *   no virtual table owns any more, gives fts_old an empty data table holding only the two
 *   records FTS5 reads to connect (the averages and the structure), and drops fts_old, which
 *   now costs what dropping its config and that small table costs. The next batches delete
 *   the fts_gone_* rows (STORE_FTS_DROP_ROWS_PER_ROW for each row a batch may move) and DROP
 *   each table once empty. Searches no longer read the old index after the detach (one
 *   prepared before fails its first step and is made again without it: store_search.c).
 *   WHY NOT DELETE THROUGH FTS5: every state between two batches must be a sound database.
 *   A virtual table whose shadow rows were deleted under it (as a build before this one did,
 *   keeping it as fts_old_drop) fails FTS5's integrity-check, which PRAGMA integrity_check
 *   runs on every FTS5 table from SQLite 3.44 on; plain tables half emptied are just
 *   smaller tables. A store left mid-drop by that build (the virtual table fts_old_drop) is
 *   detached the same way by its next batch.
 *
 * GIVING WAY
 *   A batch uses the give-way function of mv_store_purge_give_way(), as a purge batch does:
 *   asked every STORE_FTS_MOVE_POLL_STEPS VM steps (a row or two) while it copies, a yes rolls the
 * batch back (nothing of it kept) and the call returns MV_EBUSY. The last step, the DROP of
 * fts_old, is not interrupted.
 */
#include "store/store.h"

#include <stdio.h>
#include <string.h>

/* VM steps between two give-way questions: a row's copy is a few dozen VM steps around ~1 ms
 * of tokenizing in FTS5's C code, so the purge's 1,000 steps would ask every ~30 rows
 * (~40 ms); this asks every row or two. */
#define STORE_FTS_MOVE_POLL_STEPS 40

static int store_table_exists(mv_store *s, const char *name, int *exists)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' "
                                     "AND name = ?1");
    if (st == NULL) {
        return store_fail_sqlite(s, "looking for the old full-text index");
    }
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    *exists = step == SQLITE_ROW && sqlite3_column_int(st, 0) != 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "looking for the old full-text index");
}

int store_fts_old_exists(mv_store *s, int *exists)
{
    return store_table_exists(s, STORE_FTS_OLD, exists);
}

/* The shadow tables of an FTS5 table that hold its rows, detached (DROPPING) as
 * STORE_FTS_GONE + the same suffix; data first (store_fts_old_detach keeps two of its rows). */
static const char *const store_fts_gone_suffixes[] = {"data", "idx", "content", "docsize"};
#define STORE_FTS_GONE_TABLES (sizeof store_fts_gone_suffixes / sizeof store_fts_gone_suffixes[0])

/* Detaches the big shadow tables of the FTS5 table vtab (fts_old, or a store's fts_old_drop
 * of an earlier build) and drops it (DROPPING). In the caller's transaction: a crash leaves
 * either the index whole or the fts_gone_* tables. */
static int store_fts_old_detach(mv_store *s, const char *vtab)
{
    char sql[256];
    int rc = MV_OK;
    for (size_t i = 0; rc == MV_OK && i < STORE_FTS_GONE_TABLES; i++) {
        snprintf(sql, sizeof sql, "ALTER TABLE %s_%s RENAME TO " STORE_FTS_GONE "%s", vtab,
                 store_fts_gone_suffixes[i], store_fts_gone_suffixes[i]);
        rc = store_exec(s, sql);
    }
    if (rc == MV_OK) { /* what FTS5 reads to connect, which DROP TABLE does first */
        snprintf(sql, sizeof sql,
                 "CREATE TABLE %s_data(id INTEGER PRIMARY KEY, block BLOB); INSERT INTO %s_data "
                 "SELECT id, block FROM " STORE_FTS_GONE "data WHERE id IN (1, 10)",
                 vtab, vtab);
        rc = store_exec(s, sql);
    }
    if (rc == MV_OK) { /* FTS5 drops its shadow tables with IF EXISTS: the detached stay */
        snprintf(sql, sizeof sql, "DROP TABLE %s", vtab);
        rc = store_exec(s, sql);
    }
    return rc;
}

/* Ends the move: fts_old and its key go. An empty fts_old (a new store's) is dropped at once;
 * a full one is detached, which costs little, and its pages are freed in batches (DROPPING).
 * In the caller's transaction. */
static int store_fts_move_end(mv_store *s, int empty)
{
    int rc =
        empty ? store_exec(s, "DROP TABLE " STORE_FTS_OLD) : store_fts_old_detach(s, STORE_FTS_OLD);
    if (rc == MV_OK) {
        rc = store_exec(s, "DELETE FROM meta WHERE key = '" STORE_FTS_MOVED_KEY "'");
    }
    return rc;
}

int store_fts_move_abandon(mv_store *s)
{
    int rc = store_begin(s), began = rc == MV_OK;
    if (rc == MV_OK) {
        rc = store_exec(s, "DROP TABLE IF EXISTS " STORE_FTS_OLD);
    }
    if (rc == MV_OK) {
        rc = store_exec(s, "DROP TABLE IF EXISTS " STORE_FTS_DROP);
    }
    for (size_t i = 0; rc == MV_OK && i < STORE_FTS_GONE_TABLES; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS " STORE_FTS_GONE "%s",
                 store_fts_gone_suffixes[i]);
        rc = store_exec(s, sql);
    }
    if (rc == MV_OK) {
        rc = store_exec(s, "DELETE FROM meta WHERE key = '" STORE_FTS_MOVED_KEY "'");
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (rc == MV_OK) {
        s->fts_moved_all = 1;
    }
    return rc;
}

int store_fts_move_begin(mv_store *s)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT EXISTS (SELECT 1 FROM " STORE_FTS_OLD ")", -1, &st,
                           NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "reading the old full-text index");
    }
    int step = sqlite3_step(st);
    int empty = step == SQLITE_ROW && sqlite3_column_int(st, 0) == 0;
    sqlite3_finalize(st);
    if (step != SQLITE_ROW) {
        return store_fail_sqlite(s, "reading the old full-text index");
    }
    return empty ? store_fts_move_end(s, 1) : MV_OK;
}

/* One integer from a cached statement with ?1 = a and ?2 = b (no row or NULL: *out =
 * missing). */
static int store_fts_move_int(
    mv_store *s, const char *sql, int64_t a, int64_t b, int64_t missing, int64_t *out)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, "moving the full-text index");
    }
    sqlite3_bind_int64(st, 1, a);
    sqlite3_bind_int64(st, 2, b);
    int step = sqlite3_step(st);
    *out = step == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL
               ? sqlite3_column_int64(st, 0)
               : missing;
    sqlite3_reset(st);
    return step == SQLITE_ROW || step == SQLITE_DONE
               ? MV_OK
               : store_fail_sqlite(s, "moving the full-text index");
}

/* The cursor C of INVARIANTS (1). */
static int store_fts_moved(mv_store *s, int64_t *moved)
{
    return store_fts_move_int(
        s, "SELECT value FROM meta WHERE key = '" STORE_FTS_MOVED_KEY "' AND ?1 = ?2", 0, 0, 0,
        moved);
}

/* SQLite's progress handler during a batch: nonzero interrupts it (GIVING WAY). */
static int store_fts_move_poll(void *arg)
{
    mv_store *s = arg;
    if (!s->purge_gave_way && s->purge_give_way(s->purge_give_way_arg)) {
        s->purge_gave_way = 1;
    }
    return s->purge_gave_way;
}

/* Copies the rows above from up to to into fts, and sets the cursor to `to`. */
static int store_fts_move_rows(mv_store *s, int64_t from, int64_t to)
{
    sqlite3_stmt *st = store_stmt(
        s,
        "INSERT INTO fts(rowid, header, body) SELECT o.rowid, o.header, o.body FROM " STORE_FTS_OLD
        " o WHERE o.rowid > ?1 AND o.rowid <= ?2 AND EXISTS (SELECT 1 FROM bodies b WHERE "
        "b.id = o.rowid) AND NOT EXISTS (SELECT 1 FROM fts f WHERE f.rowid = o.rowid)");
    if (st == NULL) {
        return store_fail_sqlite(s, "moving full-text rows");
    }
    sqlite3_bind_int64(st, 1, from);
    sqlite3_bind_int64(st, 2, to);
    if (s->purge_give_way != NULL) {
        sqlite3_progress_handler(s->db, STORE_FTS_MOVE_POLL_STEPS, store_fts_move_poll, s);
    }
    int step = sqlite3_step(st);
    sqlite3_progress_handler(s->db, 0, NULL, NULL);
    sqlite3_reset(st);
    if (step != SQLITE_DONE) {
        return store_fail_sqlite(s, "moving full-text rows");
    }
    st = store_stmt(s, "UPDATE meta SET value = ?1 WHERE key = '" STORE_FTS_MOVED_KEY "'");
    if (st == NULL) {
        return store_fail_sqlite(s, "moving full-text rows");
    }
    sqlite3_bind_int64(st, 1, to);
    step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "moving full-text rows");
}

/* The rows of fts_old above the cursor (*left; 0 when fts_old is gone). */
static int store_fts_move_left(mv_store *s, uint64_t *left)
{
    int exists = 0;
    int64_t moved = 0, n = 0;
    int rc = store_fts_old_exists(s, &exists);
    if (rc == MV_OK && exists) {
        rc = store_fts_moved(s, &moved);
    }
    if (rc == MV_OK && exists) {
        rc = store_fts_move_int(s, "SELECT count(*) FROM " STORE_FTS_OLD " WHERE rowid > ?1 AND ?2",
                                moved, 1, 0, &n);
    }
    *left = (uint64_t)n;
    return rc;
}

/* The end of a batch's transaction (the move's or the drop's): committed if all went well,
 * else rolled back (if it began); MV_EBUSY if it gave way (GIVING WAY). */
static int store_fts_batch_end(mv_store *s, int rc, int began)
{
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (rc != MV_OK && s->purge_gave_way) {
        rc = store_fail(s, MV_EBUSY, "the full-text move gave way to a waiting command");
    }
    return rc;
}

/* One transaction: up to max rows moved, or, with none left, the end of the move. MV_EBUSY:
 * it gave way, nothing kept. */
static int store_fts_move_batch(mv_store *s, uint32_t max)
{
    int exists = 0;
    int64_t from = 0, to = 0;
    s->purge_gave_way = 0;
    int rc = store_begin(s), began = rc == MV_OK;
    if (rc == MV_OK) {
        rc = store_fts_old_exists(s, &exists); /* in the transaction: no other handle races */
    }
    if (rc == MV_OK && exists) {
        rc = store_fts_moved(s, &from);
    }
    if (rc == MV_OK && exists) {
        rc = store_fts_move_int(s,
                                "SELECT max(rowid) FROM (SELECT rowid FROM " STORE_FTS_OLD
                                " WHERE rowid > ?1 ORDER BY rowid LIMIT ?2)",
                                from, max, -1, &to);
    }
    if (rc == MV_OK && exists) {
        rc = to < 0 ? store_fts_move_end(s, 0) : store_fts_move_rows(s, from, to);
    }
    return store_fts_batch_end(s, rc, began);
}

/* A row deleted from a shadow table costs ~1/20 of a row moved (its page freed, no
 * tokenizing), so a batch of n deletes this many times n. */
#define STORE_FTS_DROP_ROWS_PER_ROW 16

/* Deletes up to max rows of one fts_gone_* table; *deleted gets how many. */
static int store_fts_drop_rows(mv_store *s, const char *sql, int64_t max, int *deleted)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, "deleting the old full-text index");
    }
    sqlite3_bind_int64(st, 1, max);
    if (s->purge_give_way != NULL) {
        sqlite3_progress_handler(s->db, STORE_FTS_MOVE_POLL_STEPS, store_fts_move_poll, s);
    }
    int step = sqlite3_step(st);
    sqlite3_progress_handler(s->db, 0, NULL, NULL);
    sqlite3_reset(st);
    *deleted = sqlite3_changes(s->db);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "deleting the old full-text index");
}

/* One transaction of DROPPING: up to max * STORE_FTS_DROP_ROWS_PER_ROW rows of the fts_gone_*
 * tables deleted, each table dropped once empty; or, with an earlier build's half-dropped
 * fts_old_drop and nothing detached yet, that one detached. */
static int store_fts_drop_batch(mv_store *s, uint32_t max)
{
    static const char *const deletes[STORE_FTS_GONE_TABLES] = {
        "DELETE FROM " STORE_FTS_GONE "data WHERE rowid IN (SELECT rowid FROM " STORE_FTS_GONE
        "data LIMIT ?1)",
        "DELETE FROM " STORE_FTS_GONE
        "idx WHERE (segid, term) IN (SELECT segid, term FROM " STORE_FTS_GONE
        "idx LIMIT ?1)", /* WITHOUT ROWID */
        "DELETE FROM " STORE_FTS_GONE "content WHERE rowid IN (SELECT rowid FROM " STORE_FTS_GONE
        "content LIMIT ?1)",
        "DELETE FROM " STORE_FTS_GONE "docsize WHERE rowid IN (SELECT rowid FROM " STORE_FTS_GONE
        "docsize LIMIT ?1)",
    };
    static const char *const drops[STORE_FTS_GONE_TABLES] = {
        "DROP TABLE " STORE_FTS_GONE "data", "DROP TABLE " STORE_FTS_GONE "idx",
        "DROP TABLE " STORE_FTS_GONE "content", "DROP TABLE " STORE_FTS_GONE "docsize"};
    int exists[STORE_FTS_GONE_TABLES] = {0}, any = 0, legacy = 0;
    s->purge_gave_way = 0;
    int rc = store_begin(s), began = rc == MV_OK;
    for (size_t i = 0; rc == MV_OK && i < STORE_FTS_GONE_TABLES; i++) {
        char name[64];
        snprintf(name, sizeof name, STORE_FTS_GONE "%s", store_fts_gone_suffixes[i]);
        rc = store_table_exists(s, name, &exists[i]);
        any |= exists[i];
    }
    if (rc == MV_OK && !any) {
        rc = store_table_exists(s, STORE_FTS_DROP, &legacy);
    }
    if (rc == MV_OK && legacy) {
        rc = store_fts_old_detach(s, STORE_FTS_DROP);
    }
    int64_t budget = (int64_t)max * STORE_FTS_DROP_ROWS_PER_ROW;
    for (size_t i = 0; rc == MV_OK && budget > 0 && i < STORE_FTS_GONE_TABLES; i++) {
        int deleted = 0;
        if (exists[i]) {
            rc = store_fts_drop_rows(s, deletes[i], budget, &deleted);
        }
        if (rc == MV_OK && exists[i] && deleted < budget) { /* empty now: costs a page */
            rc = store_exec(s, drops[i]);
        }
        budget -= deleted;
    }
    return store_fts_batch_end(s, rc, began);
}

/* Whether the old index is being dropped: a detached table left, or an earlier build's
 * fts_old_drop. */
static int store_fts_drop_pending(mv_store *s, int *dropping)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' "
                                     "AND name IN ('" STORE_FTS_DROP "', '" STORE_FTS_GONE
                                     "data', '" STORE_FTS_GONE "idx', '" STORE_FTS_GONE
                                     "content', '" STORE_FTS_GONE "docsize')");
    if (st == NULL) {
        return store_fail_sqlite(s, "looking for the old full-text index");
    }
    int step = sqlite3_step(st);
    *dropping = step == SQLITE_ROW && sqlite3_column_int(st, 0) != 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "looking for the old full-text index");
}

/* *old, *dropping: whether the move (fts_old) or its dropping (DROPPING) is not done. */
static int store_fts_move_pending(mv_store *s, int *old, int *dropping)
{
    int rc = store_fts_old_exists(s, old);
    return rc == MV_OK ? store_fts_drop_pending(s, dropping) : rc;
}

int mv_store_migrate_step(mv_store *s, uint32_t max_rows, int *more_out)
{
    if (more_out != NULL) {
        *more_out = 0;
    }
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (s->readonly) {
        return store_fail(s, MV_EINVAL, "the store is open read-only");
    }
    if (s->fts_moved_all) {
        return MV_OK;
    }
    store_enter(s);
    uint32_t batch = max_rows != 0 && max_rows < MV_MIGRATE_BATCH ? max_rows : MV_MIGRATE_BATCH;
    int old = 0, dropping = 0;
    int rc = store_fts_move_pending(s, &old, &dropping); /* a read first: no lock when done */
    while (rc == MV_OK && (old || dropping)) {
        rc = old ? store_fts_move_batch(s, batch) : store_fts_drop_batch(s, batch);
        if (rc == MV_OK) {
            rc = store_fts_move_pending(s, &old, &dropping);
        }
        if (max_rows != 0) {
            break;
        }
    }
    int exists = old || dropping;
    if (rc == MV_OK) {
        s->fts_moved_all = !exists;
    }
    if (rc == MV_OK && more_out != NULL) {
        *more_out = exists;
    }
    return rc;
}

int mv_store_migration(mv_store *s, struct mv_migration_status *out)
{
    if (s == NULL || out == NULL) {
        return MV_EINVAL;
    }
    memset(out, 0, sizeof *out);
    store_enter(s);
    sqlite3_stmt *st = store_stmt(s, "PRAGMA user_version");
    int step = st != NULL ? sqlite3_step(st) : SQLITE_ERROR;
    out->schema_version = step == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    if (st != NULL) {
        sqlite3_reset(st);
    }
    if (step != SQLITE_ROW) {
        return store_fail_sqlite(s, "reading the schema version");
    }
    out->migrated_from = s->migrated_from;
    out->migrate_ms = s->migrate_ms;
    int old = 0, dropping = 0;
    int rc = store_fts_move_pending(s, &old, &dropping);
    if (rc == MV_OK && old) {
        rc = store_fts_move_left(s, &out->fts_rows_left);
    }
    out->fts_moving = old || dropping;
    return rc;
}
