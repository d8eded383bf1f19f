/*
 * ops_repair.c -- mv_store_repair: rebuilds what the store derives from its messages, when
 * mv_store_check() found it out of step: the full-text index, the per-mailbox counters,
 * uidnext and highestmodseq, reference counts and the header fields of a body.
 *
 * USAGE
 *   struct mv_repair_report r;
 *   rc = mv_store_repair(store, &r);      then mv_store_check() to confirm
 *
 * IMPLEMENTATION NOTES
 *   - One write transaction: either everything below is repaired or nothing changed.
 *   - The full-text index is rebuilt from the text the FTS5 table keeps itself (its content
 *     table), with FTS5's 'rebuild' command, which also rewrites its structure record and
 *     totals (what issue 15 item 4 found wrong after I/O errors). Full-text rows of bodies
 *     that no longer exist are deleted first.
 *   - Counters, uidnext and highestmodseq are derived from the messages with the same
 *     expressions as mv_store_check()'s invariants; uidnext and highestmodseq only ever
 *     move up (a UID or modseq once handed out is never reused).
 *   - Reference counts of bodies and attachments are set to the number of their users.
 *     A body nothing uses gets 0, the state an expunge leaves it in: mv_store_purge()
 *     deletes it later, as it deletes every unused body. An attachment nothing uses is
 *     left alone and reported by check (attachments never wait at 0 for the purge).
 *   - A body in use without its body_headers row (schema 7: Date, Subject, addresses,
 *     Message-ID, In-Reply-To, which listing, SEARCH FROM/SUBJECT and threading read), and
 *     a body without its full-text row, get them again from the body's stored bytes,
 *     parsed as append parses them (store_message.h), before FTS5's rebuild.
 *   - An index that statements name (INDEXED BY: store_named_indexes) and the store lost is
 *     made again first, from its definition in store_schema.c: the steps below may name it.
 *   - The handle replaces its connection first if an I/O error marked it (store_ready),
 *     so the rebuild does not run on the state that went wrong.
 *
 * LIMITATIONS
 *   Damaged pages are not repaired: restore a backup (docs/OPERATIONS.md). A body whose
 *   bytes cannot be read (check's "bytes") stops the repair, which then changes nothing.
 */
#include "crypto/crypt.h"
#include "ops/ops_inspect.h"
#include "store/store_blob.h"
#include "store/store_keyword_registry.h"
#include "store/store_message.h"

#include <string.h>

struct ops_repair_step {
    const char *sql;
    size_t count_offset; /* offsetof(struct mv_repair_report, field) */
};

static const struct ops_repair_step ops_repair_steps[] = {
    {"DELETE FROM fts WHERE rowid NOT IN (SELECT id FROM bodies)",
     offsetof(struct mv_repair_report, fts_orphans_removed)},
    {"UPDATE mailboxes SET"
     " message_count = (SELECT count(*) FROM messages m WHERE m.mailbox_id = mailboxes.id),"
     " unseen_count = (SELECT count(*) FROM messages m WHERE m.mailbox_id = mailboxes.id"
     " AND (m.flags & 1) = 0),"
     " size_sum = (SELECT coalesce(sum(size), 0) FROM messages m"
     " WHERE m.mailbox_id = mailboxes.id)"
     " WHERE message_count != (SELECT count(*) FROM messages m WHERE m.mailbox_id = mailboxes.id)"
     " OR unseen_count != (SELECT count(*) FROM messages m WHERE m.mailbox_id = mailboxes.id"
     " AND (m.flags & 1) = 0)"
     " OR size_sum != (SELECT coalesce(sum(size), 0) FROM messages m"
     " WHERE m.mailbox_id = mailboxes.id)",
     offsetof(struct mv_repair_report, counters_fixed)},
    {"UPDATE mailboxes SET uidnext = (SELECT max(uid) + 1 FROM messages m"
     " WHERE m.mailbox_id = mailboxes.id)"
     " WHERE uidnext <= (SELECT max(uid) FROM messages m WHERE m.mailbox_id = mailboxes.id)",
     offsetof(struct mv_repair_report, uidnext_fixed)},
    {"UPDATE mailboxes SET highestmodseq = (SELECT max(modseq) FROM messages m"
     " WHERE m.mailbox_id = mailboxes.id)"
     " WHERE highestmodseq < (SELECT max(modseq) FROM messages m"
     " WHERE m.mailbox_id = mailboxes.id)",
     offsetof(struct mv_repair_report, modseq_fixed)},
    /* Every body has one count and every count a body (schema version 12: no foreign key
     * holds them together, store_schema.c). A body no message uses goes to 0 too: that is
     * how an expunge leaves it, for the purge (store_purge.c), so its bytes go the way
     * every unused body's go. */
    {"DELETE FROM body_refs WHERE id NOT IN (SELECT id FROM bodies)",
     offsetof(struct mv_repair_report, refcounts_fixed)},
    {"INSERT INTO body_refs(id, refcount) SELECT id, (SELECT count(*) FROM messages m"
     " WHERE m.body_id = bodies.id) FROM bodies WHERE id NOT IN (SELECT id FROM body_refs)",
     offsetof(struct mv_repair_report, refcounts_fixed)},
    {"UPDATE body_refs SET refcount = (SELECT count(*) FROM messages m"
     " WHERE m.body_id = body_refs.id)"
     " WHERE refcount != (SELECT count(*) FROM messages m WHERE m.body_id = body_refs.id)",
     offsetof(struct mv_repair_report, refcounts_fixed)},
    {"UPDATE attachments SET refcount = (SELECT count(*) FROM body_parts p"
     " WHERE p.attachment_id = attachments.id)"
     " WHERE refcount != (SELECT count(*) FROM body_parts p"
     " WHERE p.attachment_id = attachments.id)"
     " AND (SELECT count(*) FROM body_parts p WHERE p.attachment_id = attachments.id) > 0",
     offsetof(struct mv_repair_report, refcounts_fixed)},
    /* every keyword a message carries defined by its mailbox (schema version 13) */
    {STORE_KEYWORD_DEFINE_CARRIED, offsetof(struct mv_repair_report, keywords_defined)},
    /* memos of bodies that are gone (schema version 14): derived, so simply dropped */
    {"DELETE FROM body_memos WHERE id / 4 NOT IN (SELECT id FROM bodies)",
     offsetof(struct mv_repair_report, memos_removed)},
    /* mailbox memos whose mailbox is gone or has another UIDVALIDITY (schema version 16) */
    {"DELETE FROM mailbox_memos WHERE NOT EXISTS (SELECT 1 FROM mailboxes x WHERE x.id = "
     "mailbox_memos.id / 4 AND x.uidvalidity = mailbox_memos.uidvalidity)",
     offsetof(struct mv_repair_report, memos_removed)},
};

/* Header copies (bodies.head, schema version 11) that are not their skeleton's first bytes
 * (mv_store_check's "header"): which of the two is wrong is known only from the whole
 * message, so a copy is made again from the skeleton when the body reassembles to its
 * recorded size and SHA-256, and left as it is when the body is damaged (the check still
 * reports it, with the body's own problem). */
static int ops_repair_header_copies(mv_store *s, struct mv_repair_report *out)
{
    sqlite3_stmt *ids = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT b.id FROM bodies b LEFT JOIN bodies_data d ON d.id = b.id "
                           "WHERE b.head IS NOT NULL AND b.head IS NOT substr(d.data, 1, "
                           "b.header_stored) ORDER BY b.id",
                           -1, &ids, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "listing header copies");
    }
    int rc = MV_OK, step;
    while (rc == MV_OK && (step = sqlite3_step(ids)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(ids, 0);
        uint8_t *raw = NULL;
        size_t len = 0;
        int read = store_body_get(s, id, &raw, &len);
        crypt_free_wiped(raw);
        if (read == MV_ENOMEM) {
            rc = read;
        } else if (read == MV_OK) {
            sqlite3_stmt *st = store_stmt(
                s, "UPDATE bodies SET head = (SELECT substr(d.data, 1, bodies.header_stored) "
                   "FROM bodies_data d WHERE d.id = bodies.id) WHERE id = ?");
            if (st == NULL) {
                rc = store_fail_sqlite(s, "making a header copy again");
            } else {
                sqlite3_bind_int64(st, 1, id);
                rc = sqlite3_step(st) == SQLITE_DONE
                         ? MV_OK
                         : store_fail_sqlite(s, "making a header copy again");
                sqlite3_reset(st);
                out->header_copies_rebuilt += rc == MV_OK;
            }
        } /* else damaged: left, reported */
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "listing header copies");
    }
    sqlite3_finalize(ids);
    return rc;
}

/* What a body's bytes give that the store lost: the body_headers row of a body in use
 * (mv_store_check's "headers") and the full-text row of any body ("fts: ... has no
 * full-text row"), both made by the code append uses from the body parsed again. After the
 * reference counts, which say which bodies are in use. */
static int ops_repair_from_bytes(mv_store *s, struct mv_repair_report *out)
{
    sqlite3_stmt *ids = NULL;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT id, refcount > 0 AND id NOT IN (SELECT body_id FROM "
                           "body_headers), id NOT IN (SELECT rowid FROM fts) FROM body_refs "
                           "WHERE (refcount > 0 AND id NOT IN (SELECT body_id FROM body_headers)) "
                           "OR id NOT IN (SELECT rowid FROM fts) ORDER BY id",
                           -1, &ids, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "listing bodies to parse again");
    }
    int rc = MV_OK, step;
    while (rc == MV_OK && (step = sqlite3_step(ids)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(ids, 0);
        int want_headers = sqlite3_column_int(ids, 1), want_fts = sqlite3_column_int(ids, 2);
        struct store_parsed parsed;
        memset(&parsed, 0, sizeof parsed);
        rc = store_body_parse_stored(s, id, &parsed);
        if (rc == MV_OK && want_headers) {
            rc = store_message_insert_headers(s, id, &parsed);
            out->headers_rebuilt += rc == MV_OK;
        }
        if (rc == MV_OK && want_fts) {
            rc = store_body_index_again(s, id, &parsed);
            out->fts_rows_added += rc == MV_OK;
        }
        store_parsed_free(&parsed);
        /* Damaged bytes (no SHA-256 match, a broken frame) are the body's alone: it is left as
         * it is, counted, and the rest of the store is repaired (mv_store_check still names
         * it). Failing here kept every other problem unrepaired for as long as the body was
         * damaged. A failure that ended the transaction (a page that fails authentication:
         * SQLite rolls back) still stops the repair, as the manual says. */
        if (rc != MV_OK && store_body_damaged(rc) && !sqlite3_get_autocommit(s->db)) {
            out->bodies_unreadable++;
            rc = MV_OK;
        }
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "listing bodies to parse again");
    }
    sqlite3_finalize(ids);
    return rc;
}

/* Line counts (schema version 15) that are not the attachment's bytes' (mv_store_check's
 * "counts"): counted again from the bytes. An attachment whose bytes do not read is left
 * (the check names it). Counts stored before version 15 (NULL) stay NULL here: their messages
 * are read whole, which is right, only slower, until mv_store_maintain counts them. */
static int ops_repair_part_counts(mv_store *s, struct mv_repair_report *out)
{
    sqlite3_stmt *ids = NULL;
    if (sqlite3_prepare_v2(s->db, STORE_ATTACHMENTS_COUNTED, -1, &ids, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "listing attachments");
    }
    int rc = MV_OK, step;
    while (rc == MV_OK && (step = sqlite3_step(ids)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(ids, 0);
        uint64_t lines = 0, marks = 0;
        int differ = 0;
        int read = store_attachment_recount(s, id, &lines, &marks, &differ);
        if (read == MV_ENOMEM) {
            rc = read;
        } else if (read == MV_OK && differ) {
            rc = store_attachment_counts_set(s, id, lines, marks);
            out->part_counts_fixed += rc == MV_OK;
        } /* else damaged: left, reported */
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "listing attachments");
    }
    sqlite3_finalize(ids);
    return rc;
}

static int ops_repair_run(mv_store *s, struct mv_repair_report *out)
{
    /* The indexes that statements name first: the steps below may name them. */
    int rc = MV_OK;
    for (size_t i = 0; rc == MV_OK && i < store_named_index_count; i++) {
        rc = store_exec(s, store_named_indexes[i].create);
    }
    if (rc != MV_OK) {
        return rc;
    }
    /* The references expunges dropped (store_purge.c) off the counts first, as the purge
     * takes them off, so that the counts below are compared with what is in use and a sound
     * store fixes nothing. */
    uint64_t applied = 0;
    rc = store_purge_unref(s, 0, &applied);
    if (rc != MV_OK) {
        return rc;
    }
    if (applied > 0) {
        s->purge_hint = 1; /* bodies they left at 0 wait for mv_store_purge() */
    }
    for (size_t i = 0; i < sizeof ops_repair_steps / sizeof ops_repair_steps[0]; i++) {
        rc = store_exec(s, ops_repair_steps[i].sql);
        if (rc != MV_OK) {
            return rc;
        }
        uint32_t *count = (uint32_t *)((char *)out + ops_repair_steps[i].count_offset);
        *count += (uint32_t)sqlite3_changes(s->db);
    }
    rc = ops_repair_from_bytes(s, out);
    if (rc == MV_OK) {
        rc = ops_repair_header_copies(s, out);
    }
    if (rc == MV_OK) {
        rc = ops_repair_part_counts(s, out);
    }
    /* FTS5 rebuilds its index, structure record and totals from its own content. */
    if (rc == MV_OK) {
        rc = store_exec(s, "INSERT INTO fts(fts) VALUES('rebuild')");
    }
    /* a body the full-text catch-up set aside (store_fts_backlog.c) that has its row now,
     * or is gone, is no longer set aside */
    if (rc == MV_OK) {
        rc = store_exec(s, "DELETE FROM meta WHERE key > '" STORE_FTS_ASIDE_KEY
                           "' AND key < '" STORE_FTS_ASIDE_END
                           "' AND (CAST(substr(key, 11) AS INTEGER) NOT IN (SELECT id FROM "
                           "bodies) OR CAST(substr(key, 11) AS INTEGER) IN (SELECT rowid FROM "
                           "fts))");
    }
    int64_t rows = 0;
    if (rc == MV_OK) {
        rc = ops_query_int(s, "SELECT count(*) FROM fts", &rows);
    }
    out->fts_rows = (uint64_t)rows;
    return rc;
}

int mv_store_repair(mv_store *s, struct mv_repair_report *out)
{
    if (s == NULL || out == NULL) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_store_repair: no report") : MV_EINVAL;
    }
    memset(out, 0, sizeof *out);
    /* The full-text index a migration left to fill goes first (store_fts_move.c): the repair
     * below rebuilds fts alone, and must find every row there. */
    int rc = mv_store_migrate_step(s, 0, NULL);
    if (rc == MV_ECORRUPT || rc == MV_ERROR) {
        /* A batch that fails on the old index (damaged, a shadow table gone) fails at every
         * try, and with it every repair and maintenance: the old index goes instead, and the
         * rebuild below makes the rows it still held from the bodies' bytes. Committed on
         * its own: should the rest of the repair fail, searches no longer read an index
         * they could not read anyway. */
        rc = store_fts_move_abandon(s);
    }
    if (rc != MV_OK) {
        return rc;
    }
    rc = store_begin(s); /* replaces a connection an I/O error marked (store_ready) */
    if (rc != MV_OK) {
        return rc;
    }
    rc = ops_repair_run(s, out);
    if (rc == MV_OK) {
        rc = store_commit(s);
    }
    if (rc == MV_OK && out->refcounts_fixed > 0) {
        s->purge_hint = 1; /* a body set to 0 waits for mv_store_purge(), as after an expunge */
    } else if (rc != MV_OK) {
        char msg[sizeof s->errmsg];
        memcpy(msg, s->errmsg, sizeof msg);
        store_rollback(s);
        memset(out, 0, sizeof *out);
        rc = store_fail(s, rc, "repair failed, nothing was changed: %s", msg);
    }
    if (rc == MV_OK) {
        s->errmsg[0] = '\0';
    }
    return rc;
}
