/*
 * store_schema.c -- the mail schema, versioned with PRAGMA user_version; every migration
 * runs in one transaction. The reasons for each table and index are in docs/SCHEMA.md.
 *
 * In short:
 *   - messages holds only small columns (no BLOB), so scans and index lookups never walk
 *     overflow pages; the bytes live in two-column BLOB tables (bodies_data,
 *     attachments_data), as SQLite's author advises.
 *   - bodies are content-addressed by the SHA-256 of the whole message and reference
 *     counted: COPY adds a reference, never bytes. A body's skeleton is the message with
 *     its large leaf parts cut out; body_parts says where each attachment goes back in.
 *   - attachments are content-addressed by the SHA-256 of their bytes as they appear in the
 *     message, reference counted, zstd-compressed when that helps.
 *   - the full-text index is keyed by body id: copies share one entry.
 *   - changes is the change log (modseq, mailbox, uid, what) for CONDSTORE/QRESYNC and
 *     IDLE, inside the encrypted file.
 *   - version 2: each mailbox row carries its message count, unseen count and size sum,
 *     kept by triggers on messages, so SELECT, STATUS and every NOOP of an IMAP session
 *     read one row instead of summing over the mailbox (8 ms on 3,000 messages, growing
 *     with the mailbox, was measured before).
 *   - version 3: bodies.header_stored, the length of the stored header unit at the start of
 *     bodies_data.data (a zstd frame of its own, or the plain header bytes), so a fetch of
 *     headers reads and decrypts only the pages that hold them; 0 on bodies stored before
 *     (they are read whole and cut).
 *   - version 4: the full-text index answers IMAP's SEARCH BODY and TEXT (RFC 3501 6.4.4):
 *     case-insensitive substrings, BODY of the body only, TEXT of header or body. fts is
 *     rebuilt with the trigram tokenizer (a phrase of trigrams is a substring) and two
 *     columns, header (every field, decoded) and body; bodies.sent_zone keeps the Date
 *     header's zone, so SENT* compare the date as written. The migration re-parses every
 *     body once to fill both (store_schema_reindex).
 *   - version 5: subscriptions, a set of names of their own (RFC 3501 6.3.6-6.3.9: a
 *     subscription outlives its mailbox and may name one that does not exist), taken over
 *     from mailboxes.subscribed, which is no longer read; and mailboxes.recent_uid, the first
 *     UID no session has yet seen as \Recent (mv_mailbox_recent_claim).
 *   - version 6: an EXPUNGE (or a mailbox delete) leaves the bodies it no longer needs at
 *     refcount 0 for mv_store_purge(), which deletes their bytes, parts and full-text rows
 *     later, in bounded batches (deleting a full-text row re-tokenizes the text: most of
 *     the cost of an EXPUNGE before); bodies_unreferenced finds them without a scan.
 *   - version 7: messages keeps only what IMAP lists and changes (uid, flags, modseq, dates,
 *     size, keywords, thread, body): ~35 bytes a row instead of ~200, so a cold SELECT's
 *     listing and an EXPUNGE or STORE touch a fifth of the pages. The header text (Date,
 *     Subject, From, To, Cc, Message-ID, In-Reply-To) is a property of the bytes, so it
 *     moves to body_headers, one row per body: copies share it, an expunge never touches it,
 *     and the purge deletes it with the body. messages_thread, which no statement read, is
 *     gone; the threading indexes on Message-ID and In-Reply-To move with their columns.
 *   - version 8: mailbox_views, one saved listing per mailbox for an application that keeps
 *     one in memory (mailvaultd's SELECT view, mv_mailbox_view_save): opaque bytes tagged
 *     with the mailbox's UIDVALIDITY and the modseq they reflect, so a cold SELECT of a
 *     100,000-message INBOX reads a few hundred pages and the changes since, instead of
 *     100,000 rows (store_view_save.c). Dropped with the mailbox.
 *   - version 9: the full-text index keeps no positions (fts5 detail=none): with them the
 *     trigram index was ~3x the text it indexes, 45% of a store (docs/SCHEMA.md, "Disk
 *     use"). Without positions FTS5 cannot match a phrase of trigrams, so a search finds
 *     the rows holding all of a string's trigrams and checks each against its stored text
 *     (store_fts.c); the answers are the same. The table keeps its content: the check reads
 *     it, deletes need it, and a short string is still a LIKE over it. The rows move from
 *     the old index after the open, in batches that give way to commands (store_fts_move.c).
 *   - version 10: messages_uid_body (mailbox_id, uid, body_id), so reading a message by its
 *     UID finds its body in the index and never reads the messages table's leaf: one page
 *     read and decryption less per message of a FETCH of whole messages (~0.9 of ~13 page
 *     cache misses a message at 100,000 messages; docs/BENCHMARKS.md, "Whole messages,
 *     seventh pass"). Built inside the open's transaction, once: under a second up to 1,000,000
 *     messages (measured 58 ms at 10,000 and 479 ms at 100,000).
 *   - version 11: bodies.head, a copy of the stored header unit in the body's own row (when
 *     the skeleton holds more than the header, and the unit is at most 2 KiB stored): a fetch
 *     of headers reads it with the statement that finds the message and never descends into
 *     bodies_data, whose leaves (since parts under 128 KiB stay in the skeleton) hold few
 *     cells each (the IMAP benchmark's header listing: 2.5x the page reads of the 8 KiB layout
 *     without the copy, half of that layout's with it; docs/BENCHMARKS.md, "The header unit
 *     in the body's row").
 *   - version 12: a body's reference count moves to body_refs, a narrow table of its own
 *     (id, refcount; ~400 rows a page): a bodies row holds the header copy (version 11), a
 *     few rows a page, so a COPY of n messages rewrote ~n pages of bodies (encrypted, written
 *     to the WAL and checkpointed) to add one to each count: at 1,000,000 messages over a
 *     quarter of a COPY's time, and much of its commit's. bodies.refcount stays as the migration
 * left it and is never read or written again (dropping it rewrites the whole table; new rows get
 * 0). The purge's queue index moves with it (body_refs_unreferenced). The migration counts each
 * body's uses from messages_body and the purge's notes, without reading the bodies rows
 *     (docs/BENCHMARKS.md, "References apart from the bodies").
 *   - version 13: mailbox_keywords, the keywords each mailbox defines: every keyword ever set
 *     on one of its messages (an append, a STORE, a copy or move into it), kept when no
 *     message carries it any more, as IMAP's FLAGS announces it once for the session. It
 *     bounds them (limits.mailbox_keywords_max, store_keyword_registry.c): with 256 keywords
 *     of 128 bytes allowed on each message and no bound on the mailbox, a user's STOREs made
 *     hundreds of thousands of distinct keywords, each listed in every SELECT's FLAGS and
 *     PERMANENTFLAGS and held by each session that selected the mailbox (500 messages with
 *     256 keywords each: 26 MB of SELECT answer, 136 MB of server memory for one session).
 *     The migration collects the keywords the messages carry; a mailbox already over the
 *     bound keeps them all and takes no new one.
 *   - version 14: body_memos, small byte strings an application derives from a body's bytes
 *     and keeps with them (mv_message_memos_put: mailvaultd's FETCH BODYSTRUCTURE and BODY
 *     answers, which otherwise cost a read and a parse of every message again after each
 *     restart or store close); row id body id * 4 + slot, deleted with the body by a trigger
 *     (store_memo.c). mailboxes_uidvalidity finds the mailbox a memo's UIDVALIDITY names.
 *   - version 15: attachments.lines and attachments.marks, counted over a part's bytes when it
 *     is stored (store_part_count), so that a structure description (FETCH BODYSTRUCTURE)
 *     needs only the skeleton (mv_message_skeleton_keyed): reading and scanning the parts
 *     stored apart was ~half of the first such FETCH. Rows stored before stay NULL (counting
 *     them would read every attachment at the migration) until the same bytes are stored
 *     again; their messages are read whole, as before.
 *   - version 16: mailbox_memos, byte strings an application derives from a mailbox's
 *     messages and keeps across runs (mv_mailbox_memo_put: mailvaultd's copy of the sent days
 *     for SEARCH SENT*, which otherwise read two rows of every message after each start);
 *     row id mailbox id * 4 + slot, tagged with the mailbox's UIDVALIDITY, deleted with the
 *     mailbox by a trigger (store_mailbox_memo.c).
 */
#include "store/store.h"
#include "store/store_blob.h"
#include "store/store_keyword_registry.h"
#include "store/store_message.h"
#include "store/store_parse.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Version 1. Kept as one literal per statement so a failure names the statement. */
static const char *const store_schema_v1[] = {
    "CREATE TABLE meta("
    " key TEXT PRIMARY KEY,"
    " value BLOB NOT NULL"
    ") WITHOUT ROWID",

    /* AUTOINCREMENT: a re-created mailbox must never inherit a deleted one's id, or the
     * change log (keyed by mailbox id) would mix the two. */
    "CREATE TABLE mailboxes("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL UNIQUE,"
    " uidvalidity INTEGER NOT NULL,"
    " uidnext INTEGER NOT NULL DEFAULT 1 CHECK (uidnext >= 1),"
    " highestmodseq INTEGER NOT NULL DEFAULT 1,"
    " subscribed INTEGER NOT NULL DEFAULT 1,"
    " special_use TEXT"
    ")",

    "CREATE TABLE bodies("
    " id INTEGER PRIMARY KEY,"
    " sha256 BLOB NOT NULL UNIQUE," /* of the whole message as delivered */
    " refcount INTEGER NOT NULL CHECK (refcount >= 0),"
    " size INTEGER NOT NULL,"        /* bytes of the whole message */
    " stored_size INTEGER NOT NULL," /* bytes of the skeleton as stored */
    " compression INTEGER NOT NULL"  /* 0 none, 1 zstd */
    ")",

    "CREATE TABLE bodies_data("
    " id INTEGER PRIMARY KEY REFERENCES bodies(id) ON DELETE CASCADE,"
    " data BLOB NOT NULL"
    ")",

    "CREATE TABLE attachments("
    " id INTEGER PRIMARY KEY,"
    " sha256 BLOB NOT NULL UNIQUE,"
    " refcount INTEGER NOT NULL CHECK (refcount >= 0),"
    " size INTEGER NOT NULL,"
    " stored_size INTEGER NOT NULL,"
    " compression INTEGER NOT NULL"
    ")",

    "CREATE TABLE attachments_data("
    " id INTEGER PRIMARY KEY REFERENCES attachments(id) ON DELETE CASCADE,"
    " data BLOB NOT NULL"
    ")",

    /* Where attachment seq of a body goes back in: at byte offset `position` of the
     * reassembled message (ascending with seq). */
    "CREATE TABLE body_parts("
    " body_id INTEGER NOT NULL REFERENCES bodies(id) ON DELETE CASCADE,"
    " seq INTEGER NOT NULL,"
    " position INTEGER NOT NULL,"
    " attachment_id INTEGER NOT NULL REFERENCES attachments(id),"
    " PRIMARY KEY (body_id, seq)"
    ") WITHOUT ROWID",

    "CREATE INDEX body_parts_attachment ON body_parts(attachment_id)",

    "CREATE TABLE messages("
    " id INTEGER PRIMARY KEY,"
    " mailbox_id INTEGER NOT NULL REFERENCES mailboxes(id),"
    " uid INTEGER NOT NULL,"
    " modseq INTEGER NOT NULL,"
    " internal_date INTEGER NOT NULL,"
    " sent_date INTEGER NOT NULL DEFAULT 0,"
    " size INTEGER NOT NULL,"
    " flags INTEGER NOT NULL DEFAULT 0,"
    " keywords TEXT NOT NULL DEFAULT '',"
    " subject TEXT NOT NULL DEFAULT '',"
    " from_addr TEXT NOT NULL DEFAULT '',"
    " to_addr TEXT NOT NULL DEFAULT '',"
    " cc_addr TEXT NOT NULL DEFAULT '',"
    " message_id TEXT NOT NULL DEFAULT '',"
    " in_reply_to TEXT NOT NULL DEFAULT '',"
    " thread_id INTEGER NOT NULL DEFAULT 0,"
    " body_id INTEGER NOT NULL REFERENCES bodies(id),"
    " UNIQUE (mailbox_id, uid)" /* UID ranges, FETCH, STORE, EXPUNGE by uid */
    ")",

    /* Date order within a mailbox (SORT, newest-first listings, SINCE/BEFORE). */
    "CREATE INDEX messages_date ON messages(mailbox_id, internal_date)",
    /* CONDSTORE: CHANGEDSINCE and HIGHESTMODSEQ. */
    "CREATE INDEX messages_modseq ON messages(mailbox_id, modseq)",
    /* UNSEEN counts and SEARCH UNSEEN without touching seen messages. */
    "CREATE INDEX messages_unseen ON messages(mailbox_id, uid) WHERE (flags & 1) = 0",
    /* Threading: find the parent by Message-ID. */
    "CREATE INDEX messages_message_id ON messages(message_id) WHERE message_id != ''",
    "CREATE INDEX messages_thread ON messages(thread_id)",
    /* Reference counting: which messages use a body. */
    "CREATE INDEX messages_body ON messages(body_id)",
    /* Threading: a reply that arrived before its parent is found by the parent's Message-ID
     * (without it: SCAN messages on every append). */
    "CREATE INDEX messages_in_reply_to ON messages(in_reply_to) WHERE in_reply_to != ''",
    /* EXPUNGE / CLOSE read only the \Deleted messages, not the whole mailbox; the index
     * holds only those rows, so it costs nothing for the others. */
    "CREATE INDEX messages_deleted ON messages(mailbox_id, uid) WHERE (flags & 8) != 0",

    "CREATE TABLE changes("
    " id INTEGER PRIMARY KEY,"
    " mailbox_id INTEGER NOT NULL," /* no foreign key: the log outlives mailboxes */
    " modseq INTEGER NOT NULL,"
    " uid INTEGER NOT NULL,"
    " kind TEXT NOT NULL CHECK (kind IN ('append','flags','expunge')),"
    " at INTEGER NOT NULL"
    ")",
    "CREATE INDEX changes_modseq ON changes(mailbox_id, modseq)",

    /* Full-text search, keyed by body id (rowid). */
    "CREATE VIRTUAL TABLE fts USING fts5(subject, addresses, body, tokenize='unicode61 "
    "remove_diacritics 2')",
};

/* The counters' triggers: created by version 2, and again by version 7, whose rebuild of
 * `messages` drops them with the old table. */
#define STORE_SCHEMA_COUNT_INSERT                                                                  \
    "CREATE TRIGGER messages_count_insert AFTER INSERT ON messages BEGIN"                          \
    " UPDATE mailboxes SET message_count = message_count + 1,"                                     \
    " unseen_count = unseen_count + ((NEW.flags & 1) = 0), size_sum = size_sum + NEW.size"         \
    " WHERE id = NEW.mailbox_id;"                                                                  \
    " END"
#define STORE_SCHEMA_COUNT_DELETE                                                                  \
    "CREATE TRIGGER messages_count_delete AFTER DELETE ON messages BEGIN"                          \
    " UPDATE mailboxes SET message_count = message_count - 1,"                                     \
    " unseen_count = unseen_count - ((OLD.flags & 1) = 0), size_sum = size_sum - OLD.size"         \
    " WHERE id = OLD.mailbox_id;"                                                                  \
    " END"
#define STORE_SCHEMA_COUNT_UPDATE                                                                  \
    "CREATE TRIGGER messages_count_update AFTER UPDATE OF flags, mailbox_id, size ON messages"     \
    " WHEN (OLD.flags & 1) != (NEW.flags & 1) OR OLD.mailbox_id != NEW.mailbox_id"                 \
    " OR OLD.size != NEW.size BEGIN"                                                               \
    " UPDATE mailboxes SET message_count = message_count - 1,"                                     \
    " unseen_count = unseen_count - ((OLD.flags & 1) = 0), size_sum = size_sum - OLD.size"         \
    " WHERE id = OLD.mailbox_id;"                                                                  \
    " UPDATE mailboxes SET message_count = message_count + 1,"                                     \
    " unseen_count = unseen_count + ((NEW.flags & 1) = 0), size_sum = size_sum + NEW.size"         \
    " WHERE id = NEW.mailbox_id;"                                                                  \
    " END"

/* Version 2: the counters and the triggers that keep them. A trigger fires inside the
 * statement that changes messages, so every path (append, copy, move, expunge, flags,
 * mailbox delete, queue drain, import) keeps them right without knowing about them; the
 * WHEN clause spares the common flag change that leaves \Seen alone. One exception: an
 * EXPUNGE of many messages deletes its rows with its own connection's triggers off and keeps
 * the counters with one UPDATE per UID range in the same transaction (store_message.c:
 * store_message_expunge_rows); every other writer still runs the trigger. */
static const char *const store_schema_v2[] = {
    "ALTER TABLE mailboxes ADD COLUMN message_count INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE mailboxes ADD COLUMN unseen_count INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE mailboxes ADD COLUMN size_sum INTEGER NOT NULL DEFAULT 0",
    /* A store migrated from version 1 starts from the true figures. */
    "UPDATE mailboxes SET"
    " message_count = (SELECT count(*) FROM messages WHERE mailbox_id = mailboxes.id),"
    " unseen_count = (SELECT count(*) FROM messages WHERE mailbox_id = mailboxes.id"
    " AND (flags & 1) = 0),"
    " size_sum = (SELECT coalesce(sum(size), 0) FROM messages WHERE mailbox_id = mailboxes.id)",

    STORE_SCHEMA_COUNT_INSERT,
    STORE_SCHEMA_COUNT_DELETE,
    STORE_SCHEMA_COUNT_UPDATE,
};

/* Version 3: where the header ends in the stored skeleton (store_blob.c writes it for new
 * bodies; existing ones keep 0 and are read whole, which stays correct). */
static const char *const store_schema_v3[] = {
    "ALTER TABLE bodies ADD COLUMN header_stored INTEGER NOT NULL DEFAULT 0",
};

/* Version 4: see the top of the file. The old fts table goes (its unicode61 words cannot
 * answer substrings); store_schema_reindex() fills the new one. */
static const char *const store_schema_v4[] = {
    "ALTER TABLE bodies ADD COLUMN sent_zone INTEGER NOT NULL DEFAULT 0",
    "DROP TABLE fts",
    "CREATE VIRTUAL TABLE fts USING fts5(header, body, tokenize='trigram')",
};

/* Indexes every body again and records its Date zone, one body at a time (memory: one
 * message). Inside the migration's transaction, so a failure leaves version 3 as it was. */
static int store_schema_reindex(mv_store *s)
{
    sqlite3_stmt *ids = NULL;
    if (sqlite3_prepare_v2(s->db, "SELECT id FROM bodies ORDER BY id", -1, &ids, NULL) !=
        SQLITE_OK) {
        return store_fail_sqlite(s, "listing bodies to index");
    }
    int rc = MV_OK, step;
    while (rc == MV_OK && (step = sqlite3_step(ids)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(ids, 0);
        struct store_parsed parsed;
        rc = store_body_parse_stored(s, id, &parsed);
        if (rc != MV_OK) {
            break;
        }
        rc = store_body_index_again(s, id, &parsed);
        store_parsed_free(&parsed);
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "listing bodies to index");
    }
    sqlite3_finalize(ids);
    return rc;
}

/* Version 5: subscriptions by name; \Recent's first unclaimed UID per mailbox. A migrated
 * store keeps its subscriptions, and none of its messages is \Recent (they were all seen
 * before: the server that showed them had no \Recent to give). */
static const char *const store_schema_v5[] = {
    "CREATE TABLE subscriptions(name TEXT PRIMARY KEY) WITHOUT ROWID",
    "INSERT INTO subscriptions(name) SELECT name FROM mailboxes WHERE subscribed != 0",
    "ALTER TABLE mailboxes ADD COLUMN recent_uid INTEGER NOT NULL DEFAULT 1",
    "UPDATE mailboxes SET recent_uid = uidnext",
};

/* Version 6: the purge's queue (see the top of the file). Earlier versions deleted a body
 * at its last reference, so a migrated store has none waiting. */
static const char *const store_schema_v6[] = {
    "CREATE INDEX bodies_unreferenced ON bodies(id) WHERE refcount = 0",
};

/* Version 7: see the top of the file. messages is rebuilt (SQLite cannot drop columns that
 * indexes use), keeping every row id, so thread ids (row ids of first messages) stay valid.
 * Copies of one body carry the same header text; any one row gives it. The triggers go with
 * the old table and are made again on the new one. */
static const char *const store_schema_v7[] = {
    "CREATE TABLE body_headers("
    " body_id INTEGER PRIMARY KEY REFERENCES bodies(id) ON DELETE CASCADE,"
    " sent_date INTEGER NOT NULL DEFAULT 0,"
    " subject TEXT NOT NULL DEFAULT '',"
    " from_addr TEXT NOT NULL DEFAULT '',"
    " to_addr TEXT NOT NULL DEFAULT '',"
    " cc_addr TEXT NOT NULL DEFAULT '',"
    " message_id TEXT NOT NULL DEFAULT '',"
    " in_reply_to TEXT NOT NULL DEFAULT ''"
    ")",
    "INSERT INTO body_headers(body_id, sent_date, subject, from_addr, to_addr, cc_addr,"
    " message_id, in_reply_to) SELECT body_id, sent_date, subject, from_addr, to_addr, cc_addr,"
    " message_id, in_reply_to FROM messages WHERE id IN (SELECT min(id) FROM messages"
    " GROUP BY body_id)",
    "CREATE TABLE messages_v7("
    " id INTEGER PRIMARY KEY,"
    " mailbox_id INTEGER NOT NULL REFERENCES mailboxes(id),"
    " uid INTEGER NOT NULL,"
    " flags INTEGER NOT NULL DEFAULT 0,"
    " modseq INTEGER NOT NULL,"
    " size INTEGER NOT NULL,"
    " internal_date INTEGER NOT NULL,"
    " keywords TEXT NOT NULL DEFAULT '',"
    " thread_id INTEGER NOT NULL DEFAULT 0,"
    " body_id INTEGER NOT NULL REFERENCES bodies(id),"
    " UNIQUE (mailbox_id, uid)"
    ")",
    "INSERT INTO messages_v7(id, mailbox_id, uid, flags, modseq, size, internal_date, keywords,"
    " thread_id, body_id) SELECT id, mailbox_id, uid, flags, modseq, size, internal_date,"
    " keywords, thread_id, body_id FROM messages ORDER BY id",
    "DROP TABLE messages",
    "ALTER TABLE messages_v7 RENAME TO messages",
    "CREATE INDEX messages_date ON messages(mailbox_id, internal_date)",
    "CREATE INDEX messages_modseq ON messages(mailbox_id, modseq)",
    "CREATE INDEX messages_unseen ON messages(mailbox_id, uid) WHERE (flags & 1) = 0",
    "CREATE INDEX messages_body ON messages(body_id)",
    "CREATE INDEX messages_deleted ON messages(mailbox_id, uid) WHERE (flags & 8) != 0",
    "CREATE INDEX body_headers_message_id ON body_headers(message_id) WHERE message_id != ''",
    "CREATE INDEX body_headers_in_reply_to ON body_headers(in_reply_to) WHERE in_reply_to != ''",
    STORE_SCHEMA_COUNT_INSERT,
    STORE_SCHEMA_COUNT_DELETE,
    STORE_SCHEMA_COUNT_UPDATE,
};

/* Version 8: see the top of the file. */
static const char *const store_schema_v8[] = {
    "CREATE TABLE mailbox_views("
    " mailbox_id INTEGER PRIMARY KEY REFERENCES mailboxes(id) ON DELETE CASCADE,"
    " uidvalidity INTEGER NOT NULL,"
    " modseq INTEGER NOT NULL,"
    " data BLOB NOT NULL"
    ")",
};

/* Version 9: see the top of the file. Copying every row into the new table in this
 * transaction took 100-150 s at 10,000 messages on a loaded machine, inside the user's first
 * login, with the store locked for everyone else. So the migration only renames the old
 * index to fts_old and creates the new, empty one; the rows move afterwards in bounded
 * batches (store_fts_move.c, mv_store_migrate_step), and searches read both meanwhile
 * (store_search.c). A store with nothing indexed (a new one) drops fts_old at once. */
static const char *const store_schema_v9[] = {
    "ALTER TABLE fts RENAME TO " STORE_FTS_OLD,
    "CREATE VIRTUAL TABLE fts USING fts5(header, body, tokenize='trigram', detail=none)",
    "INSERT OR REPLACE INTO meta(key, value) VALUES ('" STORE_FTS_MOVED_KEY "', 0)",
};

/* Version 10: see the top of the file. The UNIQUE (mailbox_id, uid) index gives only the
 * row id, so without this one every message read by UID was three descents before its body:
 * that index, the messages table (for body_id), bodies. */
#define STORE_INDEX_UID_BODY                                                                       \
    "CREATE INDEX IF NOT EXISTS messages_uid_body ON messages(mailbox_id, uid, body_id)"
static const char *const store_schema_v10[] = {
    STORE_INDEX_UID_BODY,
};

/* Version 11: see the top of the file. Bodies stored before keep NULL and are read as
 * before (their header unit from the skeleton); nothing is rewritten. */
static const char *const store_schema_v11[] = {
    "ALTER TABLE bodies ADD COLUMN head BLOB",
};

/* Version 12: see the top of the file. The counts are made from what uses each body, not
 * copied from bodies.refcount: reading that column walks every bodies row, the header
 * copies' pages spread over the whole file (6-10 s for the 1,000,000-message store read
 * cold), where the uses are messages_body's narrow entries (0.4 s), the references an
 * EXPUNGE noted for the purge (meta) and the bodies already at 0 (the purge's partial
 * index): what mv_store_check holds bodies.refcount to. A body nothing uses that is not at
 * 0 (a count that check reported) gets no row: check names it, repair gives it its count.
 * body_refs has no foreign key to bodies: with foreign keys on (every store handle) each
 * row inserted looks its body up, and those lookups were the same walk of bodies again
 * (10.3 s cold at 1,000,000); the purge deletes a body's count with it (store_blob.c), and
 * mv_store_check names a count whose body is gone. */
static const char *const store_schema_v12[] = {
    "CREATE TABLE body_refs("
    " id INTEGER PRIMARY KEY," /* bodies.id */
    " refcount INTEGER NOT NULL CHECK (refcount >= 0)"
    ")",
    "INSERT INTO body_refs(id, refcount) SELECT body_id, count(*) FROM messages "
    "GROUP BY body_id",
    "INSERT INTO body_refs(id, refcount) SELECT CAST(substr(key, 13) AS INTEGER), "
    "CAST(value AS INTEGER) FROM meta WHERE key > '" STORE_PURGE_UNREF_KEY
    "' AND key < '" STORE_PURGE_UNREF_END
    "' AND CAST(substr(key, 13) AS INTEGER) IN (SELECT id FROM bodies) "
    "ON CONFLICT (id) DO UPDATE SET refcount = refcount + excluded.refcount",
    "INSERT OR IGNORE INTO body_refs(id, refcount) SELECT id, 0 FROM bodies WHERE refcount = 0",
    "DROP INDEX bodies_unreferenced",
    "CREATE INDEX body_refs_unreferenced ON body_refs(id) WHERE refcount = 0",
};

/* Version 13: see the top of the file. A mailbox's rows go with it (ON DELETE CASCADE:
 * every store handle has foreign keys on). Names compare as IMAP's keywords do, ASCII
 * case-insensitively (NOCASE). The migration splits each message's list (keywords stored
 * normalised: single spaces between atoms) in SQL, one pass over messages. */
static const char *const store_schema_v13[] = {
    "CREATE TABLE mailbox_keywords("
    " mailbox_id INTEGER NOT NULL REFERENCES mailboxes(id) ON DELETE CASCADE,"
    " name TEXT NOT NULL COLLATE NOCASE,"
    " PRIMARY KEY (mailbox_id, name)"
    ") WITHOUT ROWID",
    STORE_KEYWORD_DEFINE_CARRIED,
};

/* Version 14: see the top of the file. The trigger is the one place a body's memos go: every
 * deletion of a body (the purge, repair) fires it, and body ids are reused once the highest
 * goes, so a memo left behind would describe the next body of its id. */
static const char *const store_schema_v14[] = {
    "CREATE TABLE body_memos("
    " id INTEGER PRIMARY KEY," /* bodies.id * 4 + slot (MV_MEMO_SLOTS) */
    " data BLOB NOT NULL"
    ")",
    "CREATE TRIGGER body_memos_gone AFTER DELETE ON bodies BEGIN"
    " DELETE FROM body_memos WHERE id >= old.id * 4 AND id < old.id * 4 + 4; END",
    "CREATE INDEX mailboxes_uidvalidity ON mailboxes(uidvalidity)",
};

/* Version 15: see the top of the file. Adding a column rewrites no row. */
static const char *const store_schema_v15[] = {
    "ALTER TABLE attachments ADD COLUMN lines INTEGER",
    "ALTER TABLE attachments ADD COLUMN marks INTEGER",
};

/* Version 16: see the top of the file. A new table: no row of another is read or written. */
static const char *const store_schema_v16[] = {
    "CREATE TABLE mailbox_memos("
    " id INTEGER PRIMARY KEY," /* mailboxes.id * 4 + slot (MV_MAILBOX_MEMO_SLOTS) */
    " uidvalidity INTEGER NOT NULL,"
    " data BLOB NOT NULL"
    ")",
    "CREATE TRIGGER mailbox_memos_gone AFTER DELETE ON mailboxes BEGIN"
    " DELETE FROM mailbox_memos WHERE id >= old.id * 4 AND id < old.id * 4 + 4; END",
};

/* store.h: what the reads name. messages_body (version 1) and messages_deleted (version 6)
 * as version 7 made them again with the narrow messages table; changes_modseq as version 1
 * made it. */
const struct store_named_index store_named_indexes[] = {
    {"messages_uid_body", STORE_INDEX_UID_BODY},
    {"messages_body", "CREATE INDEX IF NOT EXISTS messages_body ON messages(body_id)"},
    {"messages_deleted", "CREATE INDEX IF NOT EXISTS messages_deleted ON messages(mailbox_id, "
                         "uid) WHERE (flags & 8) != 0"},
    /* the change log's reads and prunes (store_changes.c), version 1 */
    {"changes_modseq", "CREATE INDEX IF NOT EXISTS changes_modseq ON changes(mailbox_id, modseq)"},
};
const size_t store_named_index_count = sizeof store_named_indexes / sizeof store_named_indexes[0];

/* One step of the ladder: its statements, the version they bring the store to, what else
 * that version needs done in the same transaction (NULL for nothing), and the statistics it
 * leaves to gather after the ladder (NULL for none; see store_schema_migrate). */
struct store_schema_step {
    const char *const *statements;
    size_t statement_count;
    int version;
    int (*after)(mv_store *s);
    const char *analyze;
};

#define STORE_SCHEMA_STEP(statements, version, after)                                              \
    {                                                                                              \
        (statements), sizeof(statements) / sizeof((statements)[0]), (version), (after), NULL       \
    }
#define STORE_SCHEMA_STEP_ANALYZE(statements, version, after, analyze)                             \
    {                                                                                              \
        (statements), sizeof(statements) / sizeof((statements)[0]), (version), (after), (analyze)  \
    }

/* Every version in order; a new version is one more row here (and its number in store.h).
 * A new store (version 0) climbs the whole ladder: version 1 also creates its mailboxes, in
 * the same transaction, so a store that has a schema always has its INBOX (an init killed
 * half-way leaves no unusable store). */
static const struct store_schema_step store_schema_steps[] = {
    STORE_SCHEMA_STEP(store_schema_v1, 1, store_mailbox_create_defaults),
    STORE_SCHEMA_STEP(store_schema_v2, 2, NULL),
    STORE_SCHEMA_STEP(store_schema_v3, 3, NULL),
    STORE_SCHEMA_STEP(store_schema_v4, 4, store_schema_reindex),
    STORE_SCHEMA_STEP(store_schema_v5, 5, NULL),
    STORE_SCHEMA_STEP(store_schema_v6, 6, NULL),
    STORE_SCHEMA_STEP_ANALYZE(store_schema_v7, 7, NULL, "ANALYZE"),
    STORE_SCHEMA_STEP(store_schema_v8, 8, NULL),
    STORE_SCHEMA_STEP(store_schema_v9, 9, store_fts_move_begin),
    STORE_SCHEMA_STEP_ANALYZE(store_schema_v10, 10, NULL, "ANALYZE messages"),
    STORE_SCHEMA_STEP(store_schema_v11, 11, NULL),
    STORE_SCHEMA_STEP_ANALYZE(store_schema_v12, 12, NULL, "ANALYZE body_refs"),
    STORE_SCHEMA_STEP(store_schema_v13, 13, NULL),
    STORE_SCHEMA_STEP(store_schema_v14, 14, NULL),
    STORE_SCHEMA_STEP(store_schema_v15, 15, NULL),
    STORE_SCHEMA_STEP(store_schema_v16, 16, NULL),
};

#define STORE_SCHEMA_STEP_COUNT (sizeof store_schema_steps / sizeof store_schema_steps[0])

_Static_assert(STORE_SCHEMA_STEP_COUNT == STORE_SCHEMA_VERSION,
               "one step per schema version, 1 to STORE_SCHEMA_VERSION");

/* Runs one step: its statements, the new user_version, then its extra work. */
static int store_schema_step_run(mv_store *s, const struct store_schema_step *step)
{
    for (size_t i = 0; i < step->statement_count; i++) {
        int rc = store_exec(s, step->statements[i]);
        if (rc != MV_OK) {
            return rc;
        }
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", step->version);
    int rc = store_exec(s, sql);
    if (rc == MV_OK && step->after != NULL) {
        rc = step->after(s);
    }
    return rc;
}

static int64_t store_schema_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int store_schema_migrate(mv_store *s)
{
    int64_t start_ms = store_schema_now_ms();
    int rc = store_begin(s);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, "PRAGMA user_version");
    if (st == NULL || sqlite3_step(st) != SQLITE_ROW) {
        rc = st == NULL ? s->stmt_failure : store_fail_sqlite(s, "reading the schema version");
        store_rollback(s); /* after the message: ROLLBACK resets SQLite's error */
        return rc;
    }
    int version = sqlite3_column_int(st, 0);
    sqlite3_reset(st);
    if (version > STORE_SCHEMA_VERSION) {
        store_rollback(s);
        return store_fail(s, MV_EUNSUPPORTED,
                          "the store has schema version %d; this mailvault knows up to %d", version,
                          STORE_SCHEMA_VERSION);
    }
    /* Every step above the store's version, in this transaction. */
    const char *analyze[STORE_SCHEMA_STEP_COUNT];
    size_t analyze_count = 0;
    for (size_t i = 0; rc == MV_OK && i < STORE_SCHEMA_STEP_COUNT; i++) {
        assert(store_schema_steps[i].version == (int)i + 1);
        if (version < store_schema_steps[i].version) {
            rc = store_schema_step_run(s, &store_schema_steps[i]);
            if (store_schema_steps[i].analyze != NULL) {
                analyze[analyze_count++] = store_schema_steps[i].analyze;
            }
        }
    }
    /* A migration that rebuilt a table (version 7 rebuilds messages) dropped its rows of
     * sqlite_stat1, and PRAGMA optimize at open does not analyze a table that has none, so
     * until the store was next closed the planner chose plans without statistics: EXPUNGE's
     * per-body reference count walked every deleted message once per body (quadratic).
     * analysis_limit (the open's profile) keeps this to a sample of each index, but a table
     * without an index is counted whole: an ANALYZE of everything after every migration
     * took 45.7 s of a 1,000,000-message store's first open (bodies_data's leaves, most
     * likely: every one read cold to count its rows). So only the tables a step made,
     * rebuilt or indexed anew are analyzed (all of them when a whole ANALYZE is among them);
     * a new store has nothing to analyze. */
    int whole = 0;
    for (size_t i = 0; i < analyze_count; i++) {
        whole |= strcmp(analyze[i], "ANALYZE") == 0;
    }
    if (rc == MV_OK && version != 0 && whole) {
        rc = store_exec(s, "ANALYZE");
    }
    for (size_t i = 0; rc == MV_OK && version != 0 && !whole && i < analyze_count; i++) {
        rc = store_exec(s, analyze[i]);
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    rc = store_commit(s);
    if (rc == MV_OK && version != 0 && version < STORE_SCHEMA_VERSION) {
        /* what mv_store_migration() reports, and a server logs */
        s->migrated_from = version;
        s->migrate_ms = store_schema_now_ms() - start_ms;
    }
    return rc;
}
