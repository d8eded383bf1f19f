/*
 * store_listing.c -- mv_message_list_begin/next/end: a mailbox's messages in UID order with
 * flags, keywords, modseq, size and internal date, for the server's sequence map and its
 * change detection.
 *
 * IMPLEMENTATION NOTES
 *   - One private prepared statement per iterator (not the store's statement cache), so an
 *     iterator can stay open while the same handle runs other statements; its read snapshot
 *     lasts from the first step to the last.
 *   - A full listing (changed_since 0) walks the UNIQUE (mailbox_id, uid) index: "uid > ?"
 *     is a range on it. A listing of changes (changed_since > 0: the server's sync after
 *     another session's change, FETCH CHANGEDSINCE, QRESYNC) is a range on the
 *     (mailbox_id, modseq) index instead, sorted by UID afterwards, so it reads the changed
 *     rows only: an idle session's sync on a large mailbox after one flag change reads one
 *     row, not the mailbox. INDEXED BY because the planner, seeing ORDER BY uid, would
 *     rather walk the UID index and filter every row (and if the index ever goes, prepare
 *     fails loudly).
 *   - Each row joins its body's row for the compression that, with the body's id, makes the
 *     body key (store_body_key): a seek into bodies per row, in the order the bodies were
 *     written, so mostly a page just read. A fetch by key then reads only the body's data
 *     (mv_message_fetch_keyed_into).
 */
#include "store/store.h"
#include "store/store_blob.h"
#include "vfs/db_column.h"

#include <stdlib.h>

struct mv_message_iter {
    mv_store *store;
    sqlite3_stmt *stmt;
    struct store_strings strings;
    int done; /* 1 after the end or an error: next keeps returning that */
    int rc_after_done;
};

static const char *const store_listing_sql =
    "SELECT m.uid, m.flags, m.modseq, m.size, m.internal_date, m.keywords, m.body_id,"
    " b.compression FROM messages m LEFT JOIN bodies b ON b.id = m.body_id "
    "WHERE m.mailbox_id = ?1 AND m.uid > ?2 AND m.modseq > ?3 ORDER BY m.uid";
static const char *const store_listing_changed_sql =
    "SELECT m.uid, m.flags, m.modseq, m.size, m.internal_date, m.keywords, m.body_id,"
    " b.compression FROM messages m INDEXED BY messages_modseq LEFT JOIN bodies b"
    " ON b.id = m.body_id WHERE m.mailbox_id = ?1 AND m.uid > ?2 AND m.modseq > ?3"
    " ORDER BY m.uid";

int mv_message_list_begin(mv_store *s,
                          const char *mailbox,
                          uint32_t uid_after,
                          uint64_t changed_since,
                          mv_message_iter **iter)
{
    if (iter == NULL) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_message_list_begin: no iterator pointer")
                         : MV_EINVAL;
    }
    *iter = NULL;
    if (s == NULL || mailbox == NULL) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_message_list_begin: no mailbox")
                         : MV_EINVAL;
    }
    if (changed_since > (uint64_t)INT64_MAX) {
        return store_fail(s, MV_EINVAL, "mv_message_list_begin: modseq out of range");
    }
    int64_t mailbox_id = 0;
    int rc = store_mailbox_id(s, mailbox, &mailbox_id);
    if (rc != MV_OK) {
        return rc;
    }
    mv_message_iter *it = calloc(1, sizeof *it);
    if (it == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory starting a listing");
    }
    store_enter(s);
    const char *sql = changed_since > 0 ? store_listing_changed_sql : store_listing_sql;
    if (sqlite3_prepare_v2(s->db, sql, -1, &it->stmt, NULL) != SQLITE_OK) {
        rc = store_fail_sqlite(s, "preparing a listing");
        free(it);
        return rc;
    }
    sqlite3_bind_int64(it->stmt, 1, mailbox_id);
    sqlite3_bind_int64(it->stmt, 2, uid_after);
    sqlite3_bind_int64(it->stmt, 3, (sqlite3_int64)changed_since);
    it->store = s;
    *iter = it;
    return MV_OK;
}

int mv_message_list_next(mv_message_iter *it, struct mv_message_entry *entry)
{
    if (it == NULL || entry == NULL) {
        return MV_EINVAL;
    }
    if (it->done) {
        return it->rc_after_done;
    }
    store_enter(it->store);
    int step = sqlite3_step(it->stmt), rc = 0;
    if (step == SQLITE_ROW) {
        int oom = 0;
        store_strings_clear(&it->strings);
        entry->uid = (uint32_t)sqlite3_column_int64(it->stmt, 0);
        entry->flags = (unsigned)sqlite3_column_int64(it->stmt, 1);
        entry->modseq = (uint64_t)sqlite3_column_int64(it->stmt, 2);
        entry->size = (uint64_t)sqlite3_column_int64(it->stmt, 3);
        entry->internal_date = sqlite3_column_int64(it->stmt, 4);
        entry->body_key = store_body_key(sqlite3_column_int64(it->stmt, 6),
                                         sqlite3_column_type(it->stmt, 7) == SQLITE_INTEGER
                                             ? sqlite3_column_int64(it->stmt, 7)
                                             : -1);
        /* NULL: none (store_strings_add gives ""); a text that could not be made is oom */
        const char *keywords = mv_db_column_text(it->stmt, 5, &oom);
        entry->keywords = store_strings_add(&it->strings, keywords, &oom);
        if (!oom) {
            return 1;
        }
        rc = store_fail(it->store, MV_ENOMEM, "out of memory reading a listing");
    } else if (step != SQLITE_DONE) {
        rc = store_fail_sqlite(it->store, "reading a listing");
    }
    it->done = 1;
    it->rc_after_done = rc;
    sqlite3_reset(it->stmt); /* ends the read snapshot */
    return rc;
}

void mv_message_list_end(mv_message_iter **iter)
{
    if (iter == NULL || *iter == NULL) {
        return;
    }
    sqlite3_finalize((*iter)->stmt);
    store_strings_free(&(*iter)->strings);
    free(*iter);
    *iter = NULL;
}
