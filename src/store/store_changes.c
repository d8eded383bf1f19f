/*
 * store_changes.c -- mv_message_expunged_since: the UIDs the change log says were expunged
 * from a mailbox after a modseq, for QRESYNC's VANISHED (EARLIER) (RFC 7162 section 3.2).
 *
 * IMPLEMENTATION NOTES
 *   - Expunged messages are gone from `messages`; only the change log (`changes`, written in
 *     the same transaction as every expunge, move and mailbox delete) still knows them. The
 *     query is a range on the (mailbox_id, modseq) index, filtered on kind.
 *   - The log is never pruned, so the answer is complete back to the mailbox's creation. A
 *     UID is expunged at most once in a mailbox (UIDs are not reused), but DISTINCT keeps
 *     the result a set whatever the log holds.
 *
 * LIMITATIONS
 *   At most MV_EXPUNGED_MAX UIDs per call (MV_ELIMIT beyond): a client that far behind
 *   should resynchronise the mailbox from scratch.
 */
#include "store/store.h"

#include <stdlib.h>

static const char *const store_changes_sql =
    "SELECT DISTINCT uid FROM changes WHERE mailbox_id = ?1 AND modseq > ?2 "
    "AND kind = 'expunge' ORDER BY uid";

static int
store_changes_push(mv_store *s, uint32_t **uids, size_t *count, size_t *cap, uint32_t uid)
{
    if (*count == MV_EXPUNGED_MAX) {
        return store_fail(s, MV_ELIMIT, "more than MV_EXPUNGED_MAX (%d) expunged UIDs",
                          MV_EXPUNGED_MAX);
    }
    if (*count == *cap) {
        size_t new_cap = *cap != 0 ? *cap * 2 : 64;
        uint32_t *grown = realloc(*uids, new_cap * sizeof *grown);
        if (grown == NULL) {
            return store_fail(s, MV_ENOMEM, "out of memory reading the change log");
        }
        *uids = grown;
        *cap = new_cap;
    }
    (*uids)[(*count)++] = uid;
    return MV_OK;
}

int mv_message_expunged_since(
    mv_store *s, const char *mailbox, uint64_t since_modseq, uint32_t **uids_out, size_t *count_out)
{
    if (uids_out != NULL) {
        *uids_out = NULL;
    }
    if (count_out != NULL) {
        *count_out = 0;
    }
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (mailbox == NULL || uids_out == NULL || count_out == NULL) {
        return store_fail(s, MV_EINVAL, "mv_message_expunged_since: NULL argument");
    }
    if (since_modseq > (uint64_t)INT64_MAX) {
        return store_fail(s, MV_EINVAL, "mv_message_expunged_since: modseq out of range");
    }
    int64_t mailbox_id = 0;
    int rc = store_mailbox_id(s, mailbox, &mailbox_id);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, store_changes_sql);
    if (st == NULL) {
        return store_fail_sqlite(s, "reading the change log");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)since_modseq);
    uint32_t *uids = NULL;
    size_t count = 0, cap = 0;
    int step;
    while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        rc = store_changes_push(s, &uids, &count, &cap, (uint32_t)sqlite3_column_int64(st, 0));
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "reading the change log");
    }
    sqlite3_reset(st);
    if (rc != MV_OK) {
        free(uids);
        return rc;
    }
    *uids_out = uids;
    *count_out = count;
    return MV_OK;
}
