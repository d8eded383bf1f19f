/*
 * testutil.h -- helpers shared by the test programs: opening databases, files, digests.
 */
#ifndef MV_TESTUTIL_H
#define MV_TESTUTIL_H

#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>

#define TU_KDF_ITER 1000 /* small, so the suite stays fast; KATs use the real defaults */

/* Path of name inside the test binary's temp dir: one of 16 static buffers, reused. */
char *tu_path(const char *name);

/* mv_db_open with TU_KDF_ITER for new files; prints the message on failure. */
int tu_open(const char *path, const char *password, mv_cipher cipher, unsigned flags, sqlite3 **db);
/* Runs SQL; on failure prints the errors and returns the SQLite code. */
int tu_exec(sqlite3 *db, const char *sql);
/* The first column of the first row as an integer (-1 on error or no row). */
long long tu_int(sqlite3 *db, const char *sql);

uint8_t *tu_read_file(const char *path, size_t *len); /* malloc'd; NULL if missing */
int tu_write_file(const char *path, const void *data, size_t len);
int tu_file_exists(const char *path);
long long tu_file_size(const char *path);
/* Copies path, path-wal and path-journal (those that exist) to dst (+ suffixes). */
int tu_copy_db(const char *src, const char *dst);
void tu_remove_db(const char *path);
int tu_flip_bit(const char *path, long long offset, int bit);
/* SHA-256 hex of the file's bytes ("missing" if absent), out[65]. */
void tu_file_sha256(const char *path, char out[65]);
void tu_sha256_hex(const void *data, size_t len, char out[65]);

/* The interop table t(id INTEGER PRIMARY KEY, name TEXT NOT NULL, data BLOB): row content
 * as a pure function of id, and the canonical digest of the table (see
 * tests/vectors/mc/README.md). */
void tu_fill_table(sqlite3 *db, int first_id, int count);
int tu_table_digest(sqlite3 *db, char out[65], long long *rows);
/* The digest tu_fill_table(1..count) produces, computed without a database. */
void tu_expected_digest(int count, char out[65]);

/* Creates the store name@example.org under tu_path("root") with password (TU_KDF_ITER, a
 * cache of cache_kib) and opens it into *s; prints the reason on failure. */
int tu_store_create(const char *name, const char *password, int64_t cache_kib, mv_store **s);
/* Opens the store name@example.org made by tu_store_create again (TU_KDF_ITER, the default
 * cache), as a server's login would: its migration runs. Prints the reason on failure. */
int tu_store_open(const char *name, const char *password, mv_store **s);
/* *key for message uid of mailbox as a caller that keeps its listing has it (the listing's
 * body key and size, the mailbox's UIDVALIDITY and highest modseq now), for the keyed reads
 * (mv_message_fetch_keyed_into, mv_message_skeleton_keyed). 0, or -1 (no such message). */
int tu_message_key(mv_store *s, const char *mailbox, uint32_t uid, struct mv_message_key *key);
/* The messages search q finds in s, or -1 (the store's message printed). */
int tu_search_count(mv_store *s, const struct mv_search_query *q);
/* The bodies in s's full-text backlog (its meta keys), or -1. */
long long tu_fts_backlog(mv_store *s);
/* 1 if mv_store_check() finds nothing wrong in s; else 0, its code and count printed. */
int tu_check_clean(mv_store *s);
/* Makes the file of the store name@example.org under tu_path("root") an empty database with
 * cipher (the cipher's default KDF), as an older mailvault wrote it (mv_store_init writes
 * chacha20 only); the next mv_store_open makes the schema, the mailboxes and the key pair.
 * MV_OK or mv_db_open's code. */
int tu_store_file_create(const char *name, const char *password, mv_cipher cipher);

/* Counts db's SQLite VM instructions, in hundreds, into *steps until tu_steps_off(db): what
 * a call costs, deterministically (a test of cost never times anything). */
void tu_steps_on(sqlite3 *db, long long *steps);
void tu_steps_off(sqlite3 *db);
/* Inserts count meta rows key_prefix || (first .. first+count-1, 20 digits) with value_sql
 * (an SQL expression) as their value: a store's notes of work waiting (backlog entries,
 * dropped references) without making the work. SQLite's code. */
int tu_fake_meta_rows(
    sqlite3 *db, const char *key_prefix, const char *value_sql, long long first, long long count);

/* A call that takes a batch of work (mv_store_purge, mv_store_index_backlog) costs its batch,
 * not what waits: call(s, 16, &left) with 1,200 notes key_prefix (value_sql as their value,
 * for work that does not exist: the call only drops them) waiting, then with 25,200, counted
 * in VM steps (tu_steps_on). 1 if both calls succeed, each leaves left 1,000 (counted up to
 * 1,000) and the second costs at most 1.5 times the first; else 0, with what it found
 * printed (what names the call). */
typedef int (*tu_batch_fn)(mv_store *s, uint32_t max, uint64_t *left);
int tu_batch_cost_flat(
    mv_store *s, const char *what, const char *key_prefix, const char *value_sql, tu_batch_fn call);

/* Whether needle occurs in haystack. */
int tu_contains(const uint8_t *hay, size_t hay_len, const void *needle, size_t needle_len);

/* The schema version a store has after its open: the tests that check where a migration
 * ends want it. Kept apart from store.h's STORE_SCHEMA_VERSION on purpose, so that a new
 * schema version is a change the tests are told of, in one place. */
#define TU_SCHEMA_VERSION 16

/* Turns a store of schema version 16 back into version 15's shape (no mailbox_memos). */
#define TU_DOWNGRADE_TO_V15 "DROP TRIGGER mailbox_memos_gone; DROP TABLE mailbox_memos; "

/* Turns a store of schema version 16 back into version 14's shape (attachments without
 * their line counts). */
#define TU_DOWNGRADE_TO_V14                                                                        \
    TU_DOWNGRADE_TO_V15                                                                            \
    "ALTER TABLE attachments DROP COLUMN marks; ALTER TABLE attachments DROP COLUMN lines; "

/* Turns a store of schema version 16 back into version 13's shape (no body_memos). */
#define TU_DOWNGRADE_TO_V13                                                                        \
    TU_DOWNGRADE_TO_V14                                                                            \
    "DROP TRIGGER body_memos_gone; DROP TABLE body_memos; DROP INDEX mailboxes_uidvalidity; "

/* Turns a store of schema version 16 back into version 12's shape (no mailbox_keywords). */
#define TU_DOWNGRADE_TO_V12 TU_DOWNGRADE_TO_V13 "DROP TABLE mailbox_keywords; "

/* Turns a store of schema version 16 back into version 11's shape (the reference counts in
 * bodies.refcount, no body_refs). */
#define TU_DOWNGRADE_TO_V11                                                                        \
    TU_DOWNGRADE_TO_V12                                                                            \
    "UPDATE bodies SET refcount = (SELECT r.refcount FROM body_refs r WHERE r.id = bodies.id); "   \
    "DROP TABLE body_refs; CREATE INDEX bodies_unreferenced ON bodies(id) WHERE refcount = 0; "

/* Turns a store of schema version 16 back into version 10's shape (no bodies.head). */
#define TU_DOWNGRADE_TO_V10 TU_DOWNGRADE_TO_V11 "ALTER TABLE bodies DROP COLUMN head; "

/* Turns a store of schema version 16 back into version 9's shape (no messages_uid_body). */
#define TU_DOWNGRADE_TO_V9 TU_DOWNGRADE_TO_V10 "DROP INDEX messages_uid_body; "

/* Turns a store of schema version 16 back into version 8's shape (a full-text index with
 * positions, detail=full), as a store made by an older mailvault has it. */
#define TU_DOWNGRADE_TO_V8                                                                         \
    TU_DOWNGRADE_TO_V9                                                                             \
    "CREATE VIRTUAL TABLE fts_v8 USING fts5(header, body, tokenize='trigram'); "                   \
    "INSERT INTO fts_v8(rowid, header, body) SELECT rowid, header, body FROM fts; "                \
    "DROP TABLE fts; ALTER TABLE fts_v8 RENAME TO fts; "

/* Turns a store of schema version 16 back into version 7's shape (no saved views either). */
#define TU_DOWNGRADE_TO_V7 TU_DOWNGRADE_TO_V8 "DROP TABLE mailbox_views; "

/* Turns a store of schema version 16 back into version 6's shape (the header text in wide
 * messages rows, with version 6's indexes and triggers), as a store made by an older
 * mailvault has it; the tests that migrate older versions start from it. */
#define TU_DOWNGRADE_TO_V6                                                                         \
    TU_DOWNGRADE_TO_V7                                                                             \
    "CREATE TABLE messages_v6(id INTEGER PRIMARY KEY, mailbox_id INTEGER NOT NULL REFERENCES "     \
    "mailboxes(id), uid INTEGER NOT NULL, modseq INTEGER NOT NULL, internal_date INTEGER NOT "     \
    "NULL, sent_date INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL, flags INTEGER NOT NULL "   \
    "DEFAULT 0, keywords TEXT NOT NULL DEFAULT '', subject TEXT NOT NULL DEFAULT '', from_addr "   \
    "TEXT NOT NULL DEFAULT '', to_addr TEXT NOT NULL DEFAULT '', cc_addr TEXT NOT NULL DEFAULT "   \
    "'', message_id TEXT NOT NULL DEFAULT '', in_reply_to TEXT NOT NULL DEFAULT '', thread_id "    \
    "INTEGER NOT NULL DEFAULT 0, body_id INTEGER NOT NULL REFERENCES bodies(id), "                 \
    "UNIQUE (mailbox_id, uid)); "                                                                  \
    "INSERT INTO messages_v6 SELECT m.id, m.mailbox_id, m.uid, m.modseq, m.internal_date, "        \
    "h.sent_date, m.size, m.flags, m.keywords, h.subject, h.from_addr, h.to_addr, h.cc_addr, "     \
    "h.message_id, h.in_reply_to, m.thread_id, m.body_id FROM messages m JOIN body_headers h "     \
    "ON h.body_id = m.body_id; "                                                                   \
    "DROP TABLE messages; DROP TABLE body_headers; ALTER TABLE messages_v6 RENAME TO messages; "   \
    "CREATE INDEX messages_date ON messages(mailbox_id, internal_date); "                          \
    "CREATE INDEX messages_modseq ON messages(mailbox_id, modseq); "                               \
    "CREATE INDEX messages_unseen ON messages(mailbox_id, uid) WHERE (flags & 1) = 0; "            \
    "CREATE INDEX messages_message_id ON messages(message_id) WHERE message_id != ''; "            \
    "CREATE INDEX messages_thread ON messages(thread_id); "                                        \
    "CREATE INDEX messages_body ON messages(body_id); "                                            \
    "CREATE INDEX messages_in_reply_to ON messages(in_reply_to) WHERE in_reply_to != ''; "         \
    "CREATE INDEX messages_deleted ON messages(mailbox_id, uid) WHERE (flags & 8) != 0; "          \
    "CREATE TRIGGER messages_count_insert AFTER INSERT ON messages BEGIN UPDATE mailboxes SET "    \
    "message_count = message_count + 1, unseen_count = unseen_count + ((NEW.flags & 1) = 0), "     \
    "size_sum = size_sum + NEW.size WHERE id = NEW.mailbox_id; END; "                              \
    "CREATE TRIGGER messages_count_delete AFTER DELETE ON messages BEGIN UPDATE mailboxes SET "    \
    "message_count = message_count - 1, unseen_count = unseen_count - ((OLD.flags & 1) = 0), "     \
    "size_sum = size_sum - OLD.size WHERE id = OLD.mailbox_id; END; "                              \
    "CREATE TRIGGER messages_count_update AFTER UPDATE OF flags, mailbox_id, size ON messages "    \
    "WHEN (OLD.flags & 1) != (NEW.flags & 1) OR OLD.mailbox_id != NEW.mailbox_id OR OLD.size != "  \
    "NEW.size BEGIN UPDATE mailboxes SET message_count = message_count - 1, unseen_count = "       \
    "unseen_count - ((OLD.flags & 1) = 0), size_sum = size_sum - OLD.size WHERE id = "             \
    "OLD.mailbox_id; UPDATE mailboxes SET message_count = message_count + 1, unseen_count = "      \
    "unseen_count + ((NEW.flags & 1) = 0), size_sum = size_sum + NEW.size WHERE id = "             \
    "NEW.mailbox_id; END; "

#endif
