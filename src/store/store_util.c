/*
 * store_util.c -- the store's plumbing: error messages, a cache of prepared statements,
 * transactions, and the string storage behind the structs the API returns.
 */
#include "crypto/crypt.h"
#include "store/store.h"
#include "store/store_blob.h"
#include "vfs/db_error.h"
#include "vfs/vfs_tempdir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_fail(mv_store *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
    va_end(ap);
    /* Messages for a failed file or an internal fault name files or statements. */
    s->errmsg_internal = code == MV_EIO || code == MV_ECORRUPT || code == MV_ERROR;
    return code;
}

/* Whether an SQLite error may leave the connection with in-memory state that no longer
 * matches the file: I/O errors, a full disk, damage, and failed allocations (SQLite rolls
 * back, but an extension's caches need not follow: FTS5 kept a structure record that
 * recorded fewer rows than were indexed). */
static int store_error_taints(int sqlite_rc)
{
    int primary = sqlite_rc & 0xff;
    return primary == SQLITE_IOERR || primary == SQLITE_FULL || primary == SQLITE_CORRUPT ||
           primary == SQLITE_NOMEM || primary == SQLITE_CANTOPEN;
}

int store_fail_sqlite(mv_store *s, const char *what)
{
    int rc = sqlite3_extended_errcode(s->db);
    if (store_error_taints(rc)) {
        s->reconnect = 1;
    }
    char cause[512];
    int code = mv_db_error_cause(s->db, rc, cause, sizeof cause); /* the real cause, one line */
    int out;
    if ((rc & 0xff) == SQLITE_CANTOPEN && code != MV_ENOSPC) {
        /* The store file is open: what failed is a file SQLite creates on the way (a
         * temporary file, which goes to tmp/, or the WAL index), not a missing store. */
        out = store_fail(s, MV_EIO,
                         "%s: %s: cannot create a file (temporary files go to %s, which must "
                         "be a writable directory)",
                         what, sqlite3_errmsg(s->db), s->tmp_dir);
    } else {
        out = store_fail(s, code, "%s: %s", what, cause);
    }
    s->errmsg_internal = 1; /* "BEGIN IMMEDIATE: database is locked" is for the log */
    return out;
}

void store_enter(mv_store *s)
{
    mv_vfs_temp_dir_set(s->tmp_dir);
}

sqlite3_stmt *store_stmt(mv_store *s, const char *sql)
{
    struct store_stmt_slot *free_slot = NULL;
    store_enter(s);
    for (size_t i = 0; i < STORE_STMT_CACHE; i++) {
        struct store_stmt_slot *slot = &s->stmts[i];
        if (slot->sql == sql) {
            sqlite3_reset(slot->stmt);
            sqlite3_clear_bindings(slot->stmt);
            return slot->stmt;
        }
        if (slot->sql == NULL && free_slot == NULL) {
            free_slot = slot;
        }
    }
    sqlite3_stmt *stmt = NULL;
    unsigned prep = free_slot != NULL ? SQLITE_PREPARE_PERSISTENT : 0;
    if (sqlite3_prepare_v3(s->db, sql, -1, prep, &stmt, NULL) != SQLITE_OK) {
        s->stmt_failure = store_fail_sqlite(s, "preparing a statement");
        return NULL;
    }
    if (free_slot == NULL) {
        /* Cache full: a programming error (STORE_STMT_CACHE too small), made loud. */
        s->stmt_failure =
            store_fail(s, MV_ERROR, "internal error: statement cache full (STORE_STMT_CACHE)");
        sqlite3_finalize(stmt);
        return NULL;
    }
    free_slot->sql = sql;
    free_slot->stmt = stmt;
    return stmt;
}

void store_stmts_finalize(mv_store *s)
{
    for (size_t i = 0; i < STORE_STMT_CACHE; i++) {
        sqlite3_finalize(s->stmts[i].stmt);
        s->stmts[i].stmt = NULL;
        s->stmts[i].sql = NULL;
    }
}

int store_exec(mv_store *s, const char *sql)
{
    store_enter(s);
    if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, sql);
    }
    return MV_OK;
}

/* BEGIN, COMMIT and ROLLBACK as cached statements: sqlite3_exec() parsed them again on every
 * call, several times per IMAP command. The literals live here, once, so each is one slot of
 * the statement cache. */
static const char store_sql_begin[] = "BEGIN";
static const char store_sql_begin_immediate[] = "BEGIN IMMEDIATE";
static const char store_sql_commit[] = "COMMIT";
static const char store_sql_rollback[] = "ROLLBACK";

static int store_tx(mv_store *s, const char *sql)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) { /* store_stmt() said why */
        return s->stmt_failure;
    }
    int step = sqlite3_step(st);
    int rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, sql);
    sqlite3_reset(st);
    return rc;
}

/* The production profile's synchronous=NORMAL may lose the last commits on power loss (the
 * WAL is synced at checkpoints). A commit that stands for mail someone was told is stored (an
 * append, a drained delivery whose queue file is deleted next) runs with FULL instead,
 * which syncs the WAL before COMMIT returns. Cached statements, like the transaction ones. */
static const char store_sql_sync_full[] = "PRAGMA synchronous=FULL";
static const char store_sql_sync_normal[] = "PRAGMA synchronous=NORMAL";

static int store_no_snapshot(mv_store *s)
{
    if (s->read_snapshot) {
        return store_fail(s, MV_EINVAL,
                          "a change inside mv_store_read_begin(): end the read snapshot first");
    }
    return MV_OK;
}

int store_durable(mv_store *s, int on)
{
    int rc = on ? store_no_snapshot(s) : MV_OK; /* SQLite refuses it inside a transaction */
    return rc != MV_OK ? rc : store_tx(s, on ? store_sql_sync_full : store_sql_sync_normal);
}

int store_wal_sync(mv_store *s)
{
    /* The WAL's own handle (this VFS's, so buffered frames are written first): SQLite has
     * no statement that only syncs it; a checkpoint syncs it only when it has frames to
     * copy. The store is always in WAL mode (the profile), and a connection that committed
     * has its WAL open. */
    sqlite3_file *wal = NULL;
    int rc = sqlite3_file_control(s->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal);
    if (rc != SQLITE_OK || wal == NULL || wal->pMethods == NULL) {
        return store_fail(s, MV_EIO, "cannot sync the WAL: its file is not open");
    }
    rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
    return rc == SQLITE_OK ? MV_OK
                           : store_fail(s, MV_EIO, "cannot sync the WAL (SQLite error %d)", rc);
}

int store_begin(mv_store *s)
{
    if (s->readonly) {
        return store_fail(s, MV_EINVAL, "the store is open read-only");
    }
    int rc = store_no_snapshot(s);
    if (rc == MV_OK) {
        rc = store_ready(s);
    }
    /* Rows left from a transaction that SQLite rolled back by itself (an I/O error, a full
     * disk) name bodies that are not there: never carried into this one. */
    store_fts_pending_discard(s);
    return rc != MV_OK ? rc : store_tx(s, store_sql_begin_immediate);
}

int store_read_begin(mv_store *s)
{
    return store_tx(s, store_sql_begin);
}

int store_commit(mv_store *s)
{
    /* The appends' full-text rows, deferred to here (store.h: fts_pending); only into a
     * transaction that is still open (SQLite may have rolled it back by itself). */
    int rc = MV_OK;
    if (s->fts_pending.count != 0) {
        rc = sqlite3_get_autocommit(s->db) ? MV_OK : store_fts_pending_flush(s);
        store_fts_pending_discard(s);
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    rc = store_tx(s, store_sql_commit);
    if (rc != MV_OK) {
        store_rollback(s);
    }
    return rc;
}

void store_rollback(mv_store *s)
{
    store_fts_pending_discard(s);
    if (!sqlite3_get_autocommit(s->db)) {
        (void)store_tx(s, store_sql_rollback);
        if (!sqlite3_get_autocommit(s->db)) { /* the cached statement could not run */
            (void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        }
    }
}

int mv_store_read_begin(mv_store *s)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (s->read_snapshot || !sqlite3_get_autocommit(s->db)) {
        return store_fail(s, MV_EINVAL, "mv_store_read_begin: a transaction is already open");
    }
    int rc = store_ready(s);
    if (rc == MV_OK) {
        rc = store_read_begin(s);
    }
    if (rc == MV_OK) {
        s->read_snapshot = 1;
        s->snapshot_mailbox_id = 0;
        s->snapshot_key_mailbox = 0;
    }
    return rc;
}

void mv_store_read_end(mv_store *s)
{
    if (s != NULL && s->read_snapshot) {
        s->read_snapshot = 0;
        store_blob_snapshot_end(s); /* its BLOB handle holds the transaction open */
        store_rollback(s);          /* nothing was written: ends the snapshot */
    }
}

void store_strings_clear(struct store_strings *st)
{
    for (size_t i = 0; i < st->count; i++) {
        crypt_free_wiped(st->items[i]);
    }
    st->count = 0;
}

void store_strings_free(struct store_strings *st)
{
    store_strings_clear(st);
    free(st->items);
    st->items = NULL;
    st->cap = 0;
}

const char *store_strings_add(struct store_strings *st, const char *text, int *oom)
{
    if (text == NULL) {
        return "";
    }
    if (st->count == st->cap) {
        size_t cap = st->cap != 0 ? st->cap * 2 : 32;
        char **items = realloc(st->items, cap * sizeof *items);
        if (items == NULL) {
            *oom = 1;
            return "";
        }
        st->items = items;
        st->cap = cap;
    }
    char *copy = strdup(text);
    if (copy == NULL) {
        *oom = 1;
        return "";
    }
    st->items[st->count++] = copy;
    return copy;
}

int store_ids_push(mv_store *s, struct store_ids *ids, int64_t id)
{
    if (ids->count == ids->cap) {
        size_t cap = ids->cap != 0 ? ids->cap * 2 : 256;
        int64_t *grown =
            cap <= SIZE_MAX / sizeof *grown ? realloc(ids->ids, cap * sizeof *grown) : NULL;
        if (grown == NULL) {
            return store_fail(s, MV_ENOMEM, "out of memory collecting row ids");
        }
        ids->ids = grown;
        ids->cap = cap;
    }
    ids->ids[ids->count++] = id;
    return MV_OK;
}

void store_ids_free(struct store_ids *ids)
{
    free(ids->ids);
    memset(ids, 0, sizeof *ids);
}
