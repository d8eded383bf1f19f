/*
 * store.h -- internals of the per-user mail store, shared by the files of src/store.
 *
 * One file per job:
 *   store_path.c     address validation, the store's paths, directory creation
 *   store_open.c     mv_store_init/open/close: production profile, read-back, migration
 *   store_files.c    the process's registry of open store files, so keyless readers never
 *                    drop a connection's POSIX locks by closing a descriptor (store_files.h)
 *   store_schema.c   the schema (versioned with user_version) and its migrations
 *   store_util.c     errors, cached statements, transactions, string storage for results
 *   store_mailbox.c  mailboxes
 *   store_parse.c    GMime: header fields, body text, large leaf parts (store_parse.h)
 *   store_blob.c     bodies and attachments: content-addressed, deduplicated, zstd
 *   store_message.c  append, fetch, get, copy, move, expunge, flags (+ change log, FTS),
 *                    and mv_message_copy_uids (COPY/MOVE with the UID map, for UIDPLUS)
 *   store_listing.c  a mailbox's messages in UID order with flags and modseq (the server's
 *                    sequence map and change detection)
 *   store_uidset.c   IMAP UID sets
 *   store_search.c   search
 *   store_queue.c    sealed deliveries without the password, and their drain on open
 *   store_scan.c     directory walks in name order with bounded memory (queue, Maildir)
 *   store_import.c   mbox / Maildir / .eml import; store_export.c mbox export
 *   store_stats.c    accounting
 *
 * Includes point down: store may use vfs (through the public API) and crypto; nothing
 * below includes this file.
 */
#ifndef MV_STORE_H
#define MV_STORE_H

#include "mailvault.h"

#include <dirent.h>

#include <stddef.h>
#include <stdint.h>

#define STORE_SCHEMA_VERSION 16
#define STORE_STMT_CACHE     128 /* prepared statements kept per store (about 60 in use) */
/* Leaf parts at least this large are stored apart (attachments, deduplicated); smaller ones
 * stay in the skeleton. 128 KiB is Dovecot's default mail_attachment_min_size. At 8 KiB, a
 * third of the big-mailbox corpus's messages had a part stored apart, each costing a cold
 * read 1-3 random page reads more (body_parts, attachments, attachments_data) for little
 * sharing (docs/BENCHMARKS.md, "Whole messages, twelfth pass"). */
#define STORE_SPLIT_MIN 131072

struct store_stmt_slot {
    const char *sql; /* the literal's address is the key: callers pass string literals */
    sqlite3_stmt *stmt;
};

/* Strings handed out in result structs live here until the next call that reuses them:
 * each one its own allocation, so adding never moves what was handed out. */
struct store_strings {
    char **items;
    size_t count;
    size_t cap;
};

/* One deferred full-text row (see mv_store.fts_pending); the strings are malloc'd. */
struct store_fts_row {
    int64_t rowid;
    char *header;
    char *body;
};
struct store_fts_pending {
    struct store_fts_row *rows;
    size_t count;
    size_t cap;
    size_t bytes; /* of the strings held */
};

struct mv_store {
    sqlite3 *db;
    char address[MV_ADDRESS_MAX + 1];
    char localpart[MV_ADDRESS_MAX + 1];
    char domain_dir[MV_PATH_MAX];
    char db_path[MV_PATH_MAX];
    char tmp_dir[MV_PATH_MAX];
    char pub_path[MV_PATH_MAX];
    char queue_dir[MV_PATH_MAX];
    struct mv_limits limits;
    int readonly;
    int lock_fd; /* store_lock.c: shared flock held for the handle's lifetime; -1: none */
    char errmsg[512];
    /* The detail in errmsg came from SQLite or the file system (SQL text, paths, library
     * wording): mv_store_errmsg_internal() tells servers to log it, not to show it. */
    int errmsg_internal;
    int stmt_failure; /* the MV_* code of the last store_stmt() that returned NULL */
    struct store_stmt_slot stmts[STORE_STMT_CACHE];
    struct store_strings strings;
    /* zstd contexts, made on first use and kept for the handle's life: a fresh context per
     * call (ZSTD_compress/ZSTD_decompress) allocated and cleared ~0.1-1 MB every time, a
     * quarter of the server's CPU in the IMAP benchmark. store_blob.c owns them. */
    struct ZSTD_CCtx_s *zstd_c;
    struct ZSTD_DCtx_s *zstd_d;
    int read_snapshot; /* inside mv_store_read_begin(): reads share its transaction */
    /* A BLOB handle on bodies_data.data kept open inside a read snapshot, moved from body to
     * body with sqlite3_blob_reopen() by the header reads of skeletons too large to read
     * whole (store_blob.c): sqlite3_blob_open() compiles a statement of its own every time.
     * Closed when the snapshot ends (it holds the read transaction, as a statement does). */
    sqlite3_blob *header_blob;
    /* store_mailbox_id's last answer inside the current read snapshot (0: none), which
     * cannot change before it ends: a FETCH chunk asks it once per message (issue 13). */
    int64_t snapshot_mailbox_id;
    char snapshot_mailbox[256];
    /* The listing key (mailbox row, UIDVALIDITY, HIGHESTMODSEQ) last found to hold inside the
     * current read snapshot (snapshot_key_mailbox 0: none), which cannot stop holding before
     * it ends: a keyed read checked it with a statement per message (4% of a FETCH of 500
     * previews, issue 13; store_message_key_holds). */
    int64_t snapshot_key_mailbox;
    uint32_t snapshot_key_uidvalidity;
    uint64_t snapshot_key_modseq;
    /* An I/O error (or a full disk, damage, no memory) hit the connection: SQLite or an
     * extension may keep state in memory that no longer matches the file (FTS5 kept its
     * structure record from a failed transaction). The next operation that starts a
     * transaction replaces the connection first (store_ready). */
    int reconnect;
    uint32_t reconnects; /* connections replaced so far (mv_store_reconnects) */
    int64_t cache_kib;   /* the page cache the profile set, for a replacement connection */
    /* Bodies may be waiting for mv_store_purge() (refcount 0): set at open and by every
     * expunge or mailbox delete, cleared when a purge finds none; 0 spares the purge a read. */
    int purge_hint;
    /* mv_store_purge_give_way(): asked during a purge batch whether a command waits; set
     * when it said yes and the batch was abandoned. */
    int (*purge_give_way)(void *arg);
    void *purge_give_way_arg;
    int purge_gave_way;
    /* The file's cipher authenticates every page and WAL frame (chacha20's Poly1305,
     * sqlcipher's HMAC, both bound to the page number): a message read for a client then
     * skips the SHA-256 of the reassembled bytes (store_blob.c, docs/SCHEMA.md "Reading a
     * body back"); 0 (aes256cbc, no MAC; no encryption) keeps it on every read. */
    int pages_authenticated;
    /* The queue's done/ may hold files of drained deliveries for mv_queue_tidy(): set at
     * open if it exists and by each drain that moves a file there, cleared once it is empty. */
    int queue_done_hint;
    /* Files moved into done/ by this handle so far: a tidy pass whose stream began at the
     * same count has seen every file of ours there (store_queue_tidy). */
    uint64_t queue_done_moves;
    /* The pass of done/ a bounded mv_queue_tidy() left off in, so the next call goes on
     * from there instead of reading the directory from its start again (NULL between
     * passes); queue_tidy_moves: queue_done_moves when it was opened; queue_tidy_others: it
     * met a file not ours. queue_tidy_opens: passes begun (tests). */
    DIR *queue_tidy_dir;
    uint64_t queue_tidy_moves;
    int queue_tidy_others;
    unsigned queue_tidy_opens;
    /* Where a stepped drain of the sealed queue is (store_queue.c), NULL between drains. */
    struct store_queue_round *queue_round;
    /* Full-text rows of the bodies appended in the open write transaction, inserted just
     * before its COMMIT (store_blob.c: store_fts_pending_flush, called by store_commit):
     * every later statement that needs a statement journal (INSERT INTO messages does, for
     * its trigger and foreign keys) makes FTS5 write its pending terms out as a segment of
     * their own, one per message, and that was ~40% of an import's CPU. */
    struct store_fts_pending fts_pending;
    /* Set around a stepped drain's appends (store_queue.c): a new body's full-text row is
     * not built but noted in the backlog (store_fts_backlog.c), so queued mail is visible
     * sooner; mv_store_index_backlog() builds the rows later and searches read the backlog
     * meanwhile. */
    int fts_defer;
    /* mv_store_index_later(): every new body of this handle is deferred as a stepped
     * drain's is (fts_defer is set around each append from it). */
    int index_later;
    /* mv_store_sync_later(): appends commit without syncing the WAL (sync_owed set), and
     * mv_store_sync() syncs it (store_sync_later.c). */
    int sync_later;
    int sync_owed;
    /* The backlog may hold bodies: set at open and by every deferred body, cleared when
     * mv_store_index_backlog() finds none; 0 spares it a read. */
    int fts_backlog_hint;
    /* The schema version this handle's open found, if it migrated the store (0: it did not),
     * and how long that took (mv_store_migration). */
    int migrated_from;
    int64_t migrate_ms;
    /* The old full-text index was found gone (store_fts_move.c): only a migration at open
     * makes it, so this handle never looks again. */
    int fts_moved_all;
    /* mv_store_checkpoint_defer(): 0, SQLite's autocheckpoint in the commit; else a commit
     * checkpoints only from this many WAL frames on, and checkpoint_due says that one is
     * due (store_checkpoint.c). */
    uint32_t checkpoint_frames_max;
    int checkpoint_due;
};

/* ---- store_path.c ---- */
struct store_paths {
    char address[MV_ADDRESS_MAX + 1];
    char domain_dir[MV_PATH_MAX];
    char db_path[MV_PATH_MAX];
    char tmp_dir[MV_PATH_MAX];
    char pub_path[MV_PATH_MAX];
    char queue_dir[MV_PATH_MAX];
};
/* Resolves root (opts->root, $MAILVAULT_ROOT, ./var/mail) and the paths of address. */
int store_paths_resolve(const char *address,
                        const struct mv_store_options *opts,
                        struct store_paths *out,
                        char *errmsg,
                        size_t errmsg_size);
/* Creates dir (and missing parents) with mode 0700; an existing one must be a directory. */
int store_mkdirs(const char *dir, char *errmsg, size_t errmsg_size);
/* fsyncs a directory, so a rename or create inside it is durable. */
int store_fsync_dir(const char *dir);

/* ---- store_lock.c ---- */
#define STORE_LOCK_SHARED       0
#define STORE_LOCK_EXCLUSIVE    1
#define STORE_LOCK_OPEN_WAIT_MS 5000 /* how long mv_store_open() waits for a swap to end */
/* ROOT/<domain>/<localpart>.lock from the store's db_path. MV_OK or MV_EINVAL. */
int store_lock_path(const char *db_path, char *out, size_t out_size);
/* Takes the store's lock file shared or exclusive (flock), retrying for up to wait_ms.
 * *fd_out is -1 or the descriptor holding the lock (read-only opens proceed without one
 * when the lock file is missing and cannot be created). MV_OK, MV_EBUSY (message says
 * whether the store is in use or being swapped), MV_EIO, MV_EINVAL. */
int store_lock_take(const char *db_path,
                    int exclusive,
                    uint32_t wait_ms,
                    int readonly,
                    int *fd_out,
                    char *errmsg,
                    size_t errmsg_size);
/* Closes the descriptor (dropping the lock) and sets *fd to -1; -1 is fine. */
void store_lock_release(int *fd);

/* ---- store_open.c ---- */
/* Replaces the connection if an error marked it (s->reconnect) and no transaction or
 * statement of the handle's own is in progress: opens a new one on the same file with the
 * same key (db_reopen.h), applies the profile, finalizes the cached statements and closes
 * the old connection (a zombie until an iterator still open on it ends). Called where an
 * operation starts (store_begin, mv_store_read_begin, check, repair). MV_OK, or the error
 * of the reopen (the flag stays: the next operation tries again). */
int store_ready(mv_store *s);

/* ---- store_checkpoint.c ---- */
/* Installs the WAL hook of mv_store_checkpoint_defer() on s->db again (a new connection). */
void store_checkpoint_install(mv_store *s);

/* ---- store_queue.c: names and sizes other layers need ---- */
#define STORE_PUBLIC_KEY_SIZE 32 /* the .pub file: an X25519 public key */
/* Whether name is a queue entry's name ("<20 digits>-<32 lowercase hex>.sealed"). */
int store_queue_entry_name_ok(const char *name);

/* ---- store_fence.c: the release marker (which node serves the store) ---- */
/* ROOT/<domain>/<localpart>.released from the store's db_path. MV_OK or MV_EINVAL. */
int store_fence_path(const char *db_path, char *out, size_t out_size);
/* MV_OK if the store has no release marker; MV_EMOVED (errmsg says when and where it was
 * released) if it has; MV_EIO if the marker cannot be read. Call it holding the store's lock
 * shared, so that a release cannot pass between the check and the write it guards. */
int store_fence_check(const char *db_path, char *errmsg, size_t errmsg_size);
/* Removes the marker (none is fine) durably; the caller holds the lock exclusively. */
int store_fence_remove(const struct store_paths *p, char *errmsg, size_t errmsg_size);

/* ---- store_fts_move.c: the move of the version 8 index's rows (schema version 9) ---- */
/* The old full-text index while its rows move into fts, and the meta key that holds the
 * last rowid moved: every row of the old index above it is not yet in fts. */
#define STORE_FTS_OLD       "fts_old"
#define STORE_FTS_MOVED_KEY "fts_moved"
#define STORE_FTS_DROP      "fts_old_drop" /* an earlier build's old index being dropped */
#define STORE_FTS_GONE      "fts_gone_"    /* + data, idx, ...: its rows, freed in batches */
/* The schema step's extra work: drops the old index at once if it holds no row. */
int store_fts_move_begin(mv_store *s);
/* *exists: whether the old index is still there (read in the caller's transaction, if any). */
int store_fts_old_exists(mv_store *s, int *exists);
/* Gives up the move (mv_store_repair, when a batch fails on a damaged old index): drops
 * what is left of the old index and its cursor in one transaction of its own; the rows it
 * still held are then missing from fts, for the repair's rebuild from the bodies. */
int store_fts_move_abandon(mv_store *s);

/* ---- store_schema.c ---- */
/* Creates or migrates the schema in one transaction. MV_OK or an MV_E* code. */
int store_schema_migrate(mv_store *s);

/* The indexes that statements name (INDEXED BY): without one, each statement that names it
 * fails with SQLite's "no such index". Each with its definition as the current schema has it
 * (IF NOT EXISTS): mv_store_check() reports one that is missing, mv_store_repair() makes it
 * again. */
struct store_named_index {
    const char *name;
    const char *create;
};
extern const struct store_named_index store_named_indexes[];
extern const size_t store_named_index_count;

/* ---- store_util.c ---- */
/* Sets the handle's message and returns code. */
int store_fail(mv_store *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Maps an SQLite failure to an MV_* code, with what was being done and SQLite's (and the
 * VFS's) message. */
int store_fail_sqlite(mv_store *s, const char *what);
/* A cached prepared statement for the SQL literal sql, reset and unbound; NULL on error
 * (message set, and its MV_* code in s->stmt_failure: a caller returns that, as SQLite's
 * error code may have been reset meanwhile). Never finalize it. */
sqlite3_stmt *store_stmt(mv_store *s, const char *sql);
void store_stmts_finalize(mv_store *s);
/* BEGIN IMMEDIATE / COMMIT / ROLLBACK. */
int store_begin(mv_store *s);      /* BEGIN IMMEDIATE: every change */
int store_read_begin(mv_store *s); /* BEGIN (deferred): a consistent read of several rows */
/* on: commits sync the WAL before they return (synchronous=FULL); off: the profile's NORMAL. */
int store_durable(mv_store *s, int on);
/* Syncs the WAL file, so every commit made before it (with NORMAL too) survives a power
 * loss: what a FULL commit does, once for several commits. MV_EIO (message set) on failure. */
int store_wal_sync(mv_store *s);
int store_commit(mv_store *s);
void store_rollback(mv_store *s);
/* String storage for results: clear, then add copies; returned pointers stay valid until
 * the next store_strings_clear(). Never returns NULL (returns "" if out of memory and sets
 * *oom). */
void store_strings_clear(struct store_strings *st);
void store_strings_free(struct store_strings *st);
const char *store_strings_add(struct store_strings *st, const char *text, int *oom);
/* Runs one statement with no result rows; MV_OK or store_fail_sqlite(). */
int store_exec(mv_store *s, const char *sql);

/* ---- store_changes.c ---- */
/* Prunes the change log (mv_store_maintain): every row of a deleted mailbox, and of each
 * mailbox the rows up to the highest modseq written before `before` (Unix seconds), leaving
 * a floor row there (mv_message_expunged_since below it: MV_ELIMIT). In batches, each its
 * own transaction; *pruned gets the rows deleted (what committed, on failure too). */
int store_changes_prune(mv_store *s, int64_t before, uint64_t *pruned);

/* ---- store_mailbox.c ---- */
/* The id of mailbox name, or MV_ENOTFOUND (message set). INBOX matches case-insensitively. */
int store_mailbox_id(mv_store *s, const char *name, int64_t *id_out);
/* The name a mailbox row holds: INBOX in any case is "INBOX". */
const char *store_mailbox_canonical(const char *name);
/* Whether the current read snapshot already knows name's id (then in *id_out: nothing can
 * rename it inside the snapshot); store_mailbox_snapshot_note() tells it one. */
int store_mailbox_snapshot_id(const mv_store *s, const char *name, int64_t *id_out);
void store_mailbox_snapshot_note(mv_store *s, const char *name, int64_t id);
/* Creates the missing superior names of name ("a" and "a/b" for "a/b/c") inside the
 * caller's transaction; MV_OK, MV_ELIMIT (mailboxes_max) or an SQLite error. */
int store_mailbox_create_parents(mv_store *s, const char *name);
/* Creates INBOX, Sent, Drafts, Trash, Junk and Archive (inside the caller's transaction). */
int store_mailbox_create_defaults(mv_store *s);
/* Validates a mailbox name against the limits; MV_OK or MV_EINVAL / MV_ELIMIT. */
int store_mailbox_name_check(mv_store *s, const char *name);
/* store_subscriptions.c: the subscriptions of from and of the names below it become to's
 * (inside the caller's rename transaction). */
int store_subscriptions_rename(mv_store *s, const char *from, const char *to);
/* Sets the VFS's temp directory for this thread to the store's tmp/ (store_stmt and
 * store_exec do it, so every statement that spills writes its encrypted temp files there). */
void store_enter(mv_store *s);
/* Reserves the next UID and a new modseq of mailbox_id (inside a transaction). */
int store_mailbox_next_uid(mv_store *s, int64_t mailbox_id, uint32_t *uid, uint64_t *modseq);
int store_mailbox_next_modseq(mv_store *s, int64_t mailbox_id, uint64_t *modseq);

/* ---- store_message.c (used by the queue drain and import) ---- */
/* Appends within the caller's transaction (no BEGIN/COMMIT). */
int store_message_append_in_txn(mv_store *s,
                                int64_t mailbox_id,
                                const void *raw,
                                size_t len,
                                unsigned flags,
                                const char *keywords,
                                int64_t internal_date,
                                uint32_t *uid_out);
/* 1 if rc, a failure to read or parse one stored body, says the body itself is damaged (its
 * bytes do not decompress or match their SHA-256, a page of it fails authentication): trying
 * again cannot help. Memory, disk, lock and a released store are the moment's (0). */
int store_body_damaged(int rc);
struct store_parsed;
/* The same with the message already parsed by the caller (store_parse_flags() with the
 * store's limits, STORE_SPLIT_MIN, and STORE_PARSE_NO_TEXT exactly when s->fts_defer is set)
 * and sha256 its bytes' SHA-256 (NULL: computed here); parsed NULL parses here, as
 * store_message_append_in_txn(). The sealed queue's read-ahead parses on its own threads. */
int store_message_append_parsed_in_txn(mv_store *s,
                                       int64_t mailbox_id,
                                       const void *raw,
                                       size_t len,
                                       const struct store_parsed *parsed,
                                       const uint8_t *sha256,
                                       unsigned flags,
                                       const char *keywords,
                                       int64_t internal_date,
                                       uint32_t *uid_out);
/* Whether mailbox_id already holds a message whose bytes hash to sha256 (import resume). */
int store_message_exists(mv_store *s, int64_t mailbox_id, const uint8_t sha256[32], int *exists);

/* ---- store_blob.c ---- */
/* Deletes bodies whose references have all gone (refcount 0): their bytes, parts (one
 * reference less to each attachment) and FTS rows, a few statements per batch of ids. */
int store_bodies_drop(mv_store *s, const int64_t *ids, size_t count);
/* Inserts the full-text rows deferred by the appends of the open transaction (store_commit
 * calls it before COMMIT; anything that reads or deletes fts rows inside a write
 * transaction calls it first). MV_OK or the SQLite error (message set); the list is empty
 * afterwards either way. */
int store_fts_pending_flush(mv_store *s);
/* Forgets the deferred rows (the transaction rolled back, or never began). */
void store_fts_pending_discard(mv_store *s);

/* ---- store_purge.c: references an EXPUNGE dropped, applied later ---- */
/* One meta row per body whose references an EXPUNGE dropped and the purge has not yet taken
 * off body_refs.refcount: key STORE_PURGE_UNREF_KEY + the body id in 20 digits, value the
 * number of references (an integer). Every such key sorts between the prefix and
 * STORE_PURGE_UNREF_END. A body's count less its row's value is what it has in use. */
#define STORE_PURGE_UNREF_KEY "purge_unref:"
#define STORE_PURGE_UNREF_END "purge_unref;"
/* The references of body b.id still to take off, as an SQL expression (mv_store_check). */
#define STORE_PURGE_UNREF_OF(body_id)                                                              \
    "coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = printf('" STORE_PURGE_UNREF_KEY \
    "%020d', " body_id ")), 0)"
/* Takes up to max (0: all) of those rows off body_refs.refcount and deletes them, in the
 * caller's write transaction; *applied (may be NULL) gets how many rows. A count never goes
 * below the messages that use the body. MV_OK or the SQLite error (message set). */
int store_purge_unref(mv_store *s, uint32_t max, uint64_t *applied);

/* ---- store_fts_backlog.c ---- */
/* The meta keys of the full-text backlog: STORE_FTS_BACKLOG_KEY + the body id in 20 digits;
 * every such key sorts between the prefix and STORE_FTS_BACKLOG_END. */
#define STORE_FTS_BACKLOG_KEY "fts_backlog:"
#define STORE_FTS_BACKLOG_END "fts_backlog;"
/* Bodies the catch-up set aside, damaged (store_fts_backlog.c): STORE_FTS_ASIDE_KEY + the
 * body id in 20 digits, the value why; every such key sorts before STORE_FTS_ASIDE_END. */
#define STORE_FTS_ASIDE_KEY "fts_aside:"
#define STORE_FTS_ASIDE_END "fts_aside;"
/* The bodies set aside as an SQL subquery (columns id, why). */
#define STORE_FTS_ASIDE_ROWS                                                                       \
    "(SELECT CAST(substr(key, 11) AS INTEGER) AS id, value AS why FROM meta WHERE key > "          \
    "'" STORE_FTS_ASIDE_KEY "' AND key < '" STORE_FTS_ASIDE_END "')"
/* The backlog's body ids as an SQL subquery (column id). */
#define STORE_FTS_BACKLOG_IDS                                                                      \
    "(SELECT CAST(substr(key, 13) AS INTEGER) AS id FROM meta WHERE key > '" STORE_FTS_BACKLOG_KEY \
    "' AND key < '" STORE_FTS_BACKLOG_END "')"
/* Notes body_id (new in the open write transaction) in the backlog instead of building its
 * full-text row. MV_OK or the SQLite error (message set). */
int store_fts_backlog_add(mv_store *s, int64_t body_id);
/* *any: 1 if the backlog holds a body (in the caller's transaction, if one is open). */
int store_fts_backlog_any(mv_store *s, int *any);
/* Registers mv_body_text(body_id, column) on the handle's connection (store_message.c). */
int store_fts_backlog_functions(mv_store *s);

/* A growing array of row ids (store_util.c). */
struct store_ids {
    int64_t *ids;
    size_t count;
    size_t cap;
};
int store_ids_push(mv_store *s, struct store_ids *ids, int64_t id); /* MV_OK or MV_ENOMEM */
void store_ids_free(struct store_ids *ids);

/* ---- store_message.c ---- */
/* Registers the SQL functions the set-based changes use (mv_keywords_apply, mv_uid_map) on
 * the handle's connection; once, right after it opens. */
int store_message_functions(mv_store *s);
/* Registers mv_fts_query and mv_fts_match on s->db (store_fts.c: SEARCH TEXT/BODY over the
 * full-text index without positions). */
int store_fts_functions(mv_store *s);
/* mv_fold_contains(text, string): whether text holds string, Unicode case folded, for the
 * header criteria of a search (store_fold.c). */
int store_fold_functions(mv_store *s);
/* The same comparison in C, for one field against many strings (store_search_headers.c):
 * store_fold_string() folds a string once (g_free; NULL if out of memory);
 * store_fold_field_set() prepares a field of len bytes (0, or -1 if out of memory; clear it
 * with store_fold_field_clear() either way); store_fold_in() says whether it holds a folded
 * string, exactly as mv_fold_contains(text, string) answers. */
struct store_fold_field {
    const char *text; /* an ASCII field with its letters lowered (the field itself if it had
                       * no capital, else lowered or owned) */
    size_t len;
    char *folded; /* else its folded form (g_free) */
    char *owned;  /* the lowered copy of a long ASCII field (g_free) */
    char lowered[256];
};
char *store_fold_string(const char *string);
int store_fold_field_set(struct store_fold_field *f, const char *text, size_t len);
int store_fold_in(const struct store_fold_field *f, const char *folded);
void store_fold_field_clear(struct store_fold_field *f);

/* ---- store_queue.c ---- */
/* Creates the key pair at init: public key to pub_path, secret key into the meta table. */
int store_queue_init_keys(mv_store *s);
/* Moves the deliveries queued before it started into INBOX, one durable transaction per
 * batch of STORE_QUEUE_BATCH, deleting a queue file only after its batch committed; files over
 * message_size_max stay queued (reported in errmsg). max: at most that many files (0: all); *moved:
 * deliveries appended; *more: 1 if it stopped at max with due files left. */
int store_queue_drain(mv_store *s, uint32_t max, uint32_t *moved, int *more);
/* Frees the handle's drain position (mv_store_close). */
void store_queue_round_free(mv_store *s);
/* Ends the tidy's pass of done/ if one is open (mv_store_close). */
void store_queue_tidy_close(mv_store *s);
/* What the queue's read-ahead holds now and did (store_queue_ahead.h), all 0 without one:
 * for tests of its bounds. */
struct store_queue_ahead_stats;
void store_queue_ahead_stats_of(mv_store *s, struct store_queue_ahead_stats *out);
/* fn(s) runs on the drain's thread before it stores each delivery (NULL: none): a test reads
 * the read-ahead there, in the middle of a whole drain, which has no steps to look between. */
typedef void (*store_queue_take_hook_fn)(mv_store *s);
void store_queue_take_hook_set(store_queue_take_hook_fn fn);
/* Sets the threads the next read-ahead starts (0: none, the drain's thread reads and opens
 * each file itself, as before the read-ahead), for tests and measurements; the old value. */
unsigned store_queue_ahead_threads_set(unsigned threads);

#endif /* MV_STORE_H */
