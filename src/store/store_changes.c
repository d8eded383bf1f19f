/*
 * store_changes.c -- mv_message_expunged_since: the UIDs the change log says were expunged
 * from a mailbox after a modseq, for QRESYNC's VANISHED (EARLIER) (RFC 7162 section 3.2);
 * and store_changes_prune, the maintenance that keeps the log from growing forever.
 *
 * IMPLEMENTATION NOTES
 *   - Expunged messages are gone from `messages`; only the change log (`changes`, written in
 *     the same transaction as every expunge, move and mailbox delete) still knows them. The
 *     query is a range on the (mailbox_id, modseq) index, filtered on kind.
 *   - A UID is expunged at most once in a mailbox (UIDs are not reused), but DISTINCT keeps
 *     the result a set whatever the log holds.
 *   - Pruning (mv_store_maintain, changes_keep_days): a mailbox's rows up to the highest
 *     modseq written before the cut are deleted and one row with UID 0 (never a message's
 *     UID) is left at that modseq: the log's floor. A question about the changes after a
 *     modseq below the floor sees that row in its range and gets MV_ELIMIT, as one too far
 *     behind does; mailvaultd then answers VANISHED (EARLIER) from the mailbox itself (every
 *     UID the client names that it no longer holds: imap_qresync_vanished_without_log). The
 *     floor is a row of the log rather than a column of mailboxes, so no schema change: the
 *     query that reads the range finds it for free. Rows of mailboxes deleted since (ids are
 *     never reused: AUTOINCREMENT) nobody can ask about and go whatever their age.
 *   - The prune deletes in batches of STORE_CHANGES_PRUNE_BATCH rows (a range of modseqs:
 *     one expunge's rows are never split), each its own transaction, so deliveries wait for
 *     one batch, not for a year of expunges. The floor row is committed with the first batch
 *     of its mailbox: if the run stops half way, the rows left below the floor are never read
 *     (a question below the floor stops at it) and the next run deletes them. Finding each
 *     mailbox's floor reads its rows once (their time is not in the index): a run costs a
 *     read of the log, as quick_check's is of the whole store.
 *
 * LIMITATIONS
 *   At most MV_EXPUNGED_MAX UIDs per call (MV_ELIMIT beyond): a client that far behind
 *   should resynchronise the mailbox from scratch.
 */
#include "store/store.h"

#include <stdlib.h>
#include <time.h>

static const char *const store_changes_sql =
    "SELECT DISTINCT uid FROM changes INDEXED BY changes_modseq WHERE mailbox_id = ?1 AND "
    "modseq > ?2 AND kind = 'expunge' ORDER BY uid";

static int store_changes_push(
    mv_store *s, uint32_t **uids, size_t *count, size_t *cap, uint32_t uid, uint64_t since)
{
    if (uid == 0) { /* the floor a prune left (first: ORDER BY uid) */
        return store_fail(s, MV_ELIMIT,
                          "the change log was pruned above modseq %llu: the expunges since are "
                          "no longer all known",
                          (unsigned long long)since);
    }
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
        rc = store_changes_push(s, &uids, &count, &cap, (uint32_t)sqlite3_column_int64(st, 0),
                                since_modseq);
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

/* Rows one prune transaction deletes at most (a few tens of milliseconds of write lock). */
#define STORE_CHANGES_PRUNE_BATCH 20000

/* The highest modseq of the first STORE_CHANGES_PRUNE_BATCH rows of mailbox_id at or below
 * floor (in modseq order), or floor when fewer are left: the bound of the next batch. The
 * rows of one modseq (one transaction's expunges) stay in one batch. */
static int store_changes_prune_bound(mv_store *s, int64_t mailbox_id, int64_t floor, int64_t *bound)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT modseq FROM changes INDEXED BY changes_modseq WHERE "
                                     "mailbox_id = ?1 AND modseq <= ?2 ORDER BY modseq LIMIT 1 "
                                     "OFFSET ?3");
    if (st == NULL) {
        return store_fail_sqlite(s, "pruning the change log");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, floor);
    sqlite3_bind_int(st, 3, STORE_CHANGES_PRUNE_BATCH - 1);
    int step = sqlite3_step(st);
    *bound = step == SQLITE_ROW ? sqlite3_column_int64(st, 0) : floor;
    sqlite3_reset(st);
    return step == SQLITE_ROW || step == SQLITE_DONE
               ? MV_OK
               : store_fail_sqlite(s, "pruning the change log");
}

/* One transaction of the prune: the floor row first when *floor_id is 0 (floor_id NULL: a
 * deleted mailbox, no floor), then the mailbox's rows up to the next batch's bound (but the
 * floor row); *deleted gets how many. Range deletes on the (mailbox_id, modseq) index, named
 * so that no statistics can turn them into a walk of the table. */
static int store_changes_prune_batch(
    mv_store *s, int64_t mailbox_id, int64_t floor, int64_t *floor_id, uint64_t *deleted)
{
    *deleted = 0;
    int rc = store_begin(s), began = rc == MV_OK;
    if (rc == MV_OK && floor_id != NULL && *floor_id == 0) {
        sqlite3_stmt *st = store_stmt(s, "INSERT INTO changes(mailbox_id, modseq, uid, kind, at) "
                                         "VALUES (?1, ?2, 0, 'expunge', ?3)");
        if (st == NULL) {
            rc = store_fail_sqlite(s, "pruning the change log");
        } else {
            sqlite3_bind_int64(st, 1, mailbox_id);
            sqlite3_bind_int64(st, 2, floor);
            sqlite3_bind_int64(st, 3, (sqlite3_int64)time(NULL));
            rc = sqlite3_step(st) == SQLITE_DONE ? MV_OK
                                                 : store_fail_sqlite(s, "pruning the change log");
            sqlite3_reset(st);
            *floor_id = sqlite3_last_insert_rowid(s->db);
        }
    }
    int64_t bound = floor;
    if (rc == MV_OK) {
        rc = store_changes_prune_bound(s, mailbox_id, floor, &bound);
    }
    sqlite3_stmt *st = rc == MV_OK
                           ? store_stmt(s, "DELETE FROM changes INDEXED BY changes_modseq WHERE "
                                           "mailbox_id = ?1 AND modseq <= ?2 AND id != ?3")
                           : NULL;
    if (rc == MV_OK && st == NULL) {
        rc = store_fail_sqlite(s, "pruning the change log");
    }
    if (rc == MV_OK) {
        sqlite3_bind_int64(st, 1, mailbox_id);
        sqlite3_bind_int64(st, 2, bound);
        sqlite3_bind_int64(st, 3, floor_id != NULL ? *floor_id : 0);
        rc = sqlite3_step(st) == SQLITE_DONE ? MV_OK
                                             : store_fail_sqlite(s, "pruning the change log");
        sqlite3_reset(st);
        *deleted = (uint64_t)sqlite3_changes(s->db);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (rc != MV_OK) {
        *deleted = 0;
    }
    return rc;
}

/* The next mailbox id above after that has rows in the log (seeks on the (mailbox_id,
 * modseq) index: one per mailbox, not a read of every row), whether that mailbox still
 * exists and the highest modseq of its rows written before `before` (0: none; UID 0 rows
 * left out: a floor is no change of its own). *found 0: no mailbox above after. */
static int store_changes_next(mv_store *s,
                              int64_t after,
                              int64_t before,
                              int64_t *mailbox_id,
                              int *found,
                              int *exists,
                              int64_t *floor)
{
    *found = 0;
    sqlite3_stmt *st = store_stmt(
        s, "SELECT c.mailbox_id, EXISTS (SELECT 1 FROM mailboxes WHERE id = c.mailbox_id), "
           "(SELECT coalesce(max(modseq), 0) FROM changes WHERE mailbox_id = c.mailbox_id AND "
           "at < ?2 AND uid > 0) FROM changes c WHERE c.mailbox_id > ?1 ORDER BY c.mailbox_id "
           "LIMIT 1");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading the change log");
    }
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int64(st, 2, before);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *found = 1;
        *mailbox_id = sqlite3_column_int64(st, 0);
        *exists = sqlite3_column_int(st, 1);
        *floor = sqlite3_column_int64(st, 2);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW || step == SQLITE_DONE
               ? MV_OK
               : store_fail_sqlite(s, "reading the change log");
}

int store_changes_prune(mv_store *s, int64_t before, uint64_t *pruned)
{
    *pruned = 0;
    int64_t mailbox_id = 0, floor = 0; /* ids start at 1 */
    int found = 1, exists = 0, rc = MV_OK;
    while (rc == MV_OK &&
           (rc = store_changes_next(s, mailbox_id, before, &mailbox_id, &found, &exists, &floor)) ==
               MV_OK &&
           found) {
        if (exists && floor == 0) {
            continue; /* nothing old enough */
        }
        int64_t floor_id = 0;
        uint64_t deleted;
        do {
            rc = store_changes_prune_batch(s, mailbox_id, exists ? floor : INT64_MAX,
                                           exists ? &floor_id : NULL, &deleted);
            *pruned += deleted;
        } while (rc == MV_OK && deleted > 0);
    }
    return rc;
}
