/*
 * store_mailbox_list.c -- describing mailboxes: one by name, or all in name order through
 * an iterator. Message count, unseen count and size sum are columns of the mailbox row,
 * kept by triggers (schema version 2), so describing a mailbox never reads its messages.
 *
 * stored_bytes (mv_mailbox_get and the list only; mv_mailbox_status leaves it 0): the
 * distinct bodies the mailbox's messages use (IN makes the set distinct, so copies and
 * identical deliveries count once), then the distinct attachments of those bodies; each set
 * is probed by primary key (bodies.id, body_parts (body_id, seq), attachments.id). That
 * walks the mailbox's messages_body entries: it grows with the mailbox, which is why an
 * IMAP session asks mv_mailbox_status instead. test_mailbox.c checks the plan.
 */
#include "store/store.h"

#include <stdlib.h>

#define STORE_MAILBOX_HEAD                                                                         \
    "SELECT m.id, m.name, m.uidvalidity, m.uidnext, m.highestmodseq, m.subscribed, "               \
    "m.special_use, m.message_count, m.unseen_count, m.size_sum, "
#define STORE_MAILBOX_COLUMNS                                                                      \
    STORE_MAILBOX_HEAD                                                                             \
    "(SELECT coalesce(sum(stored_size), 0) FROM bodies WHERE id IN "                               \
    "(SELECT body_id FROM messages WHERE mailbox_id = m.id)) + "                                   \
    "(SELECT coalesce(sum(stored_size), 0) FROM attachments WHERE id IN "                          \
    "(SELECT attachment_id FROM body_parts WHERE body_id IN "                                      \
    "(SELECT body_id FROM messages WHERE mailbox_id = m.id))) FROM mailboxes m "
#define STORE_MAILBOX_STATUS_COLUMNS STORE_MAILBOX_HEAD "0 FROM mailboxes m "

struct mv_mailbox_iter {
    mv_store *store;
    sqlite3_stmt *stmt; /* private: an iterator may live across other calls on the store */
    struct store_strings strings;
};

static int
store_mailbox_row(sqlite3_stmt *st, struct store_strings *strings, struct mv_mailbox_info *info)
{
    int oom = 0;
    store_strings_clear(strings);
    info->id = sqlite3_column_int64(st, 0);
    info->name = store_strings_add(strings, (const char *)sqlite3_column_text(st, 1), &oom);
    info->uidvalidity = (uint32_t)sqlite3_column_int64(st, 2);
    info->uidnext = (uint32_t)sqlite3_column_int64(st, 3);
    info->highestmodseq = (uint64_t)sqlite3_column_int64(st, 4);
    info->subscribed = sqlite3_column_int(st, 5);
    info->special_use =
        sqlite3_column_type(st, 6) == SQLITE_NULL
            ? NULL
            : store_strings_add(strings, (const char *)sqlite3_column_text(st, 6), &oom);
    info->messages = (uint32_t)sqlite3_column_int64(st, 7);
    info->unseen = (uint32_t)sqlite3_column_int64(st, 8);
    info->size_bytes = (uint64_t)sqlite3_column_int64(st, 9);
    info->stored_bytes = (uint64_t)sqlite3_column_int64(st, 10);
    return oom ? MV_ENOMEM : MV_OK;
}

/* Describes one mailbox with sql (a literal: the statement cache's key). */
static int
store_mailbox_describe(mv_store *s, const char *name, const char *sql, struct mv_mailbox_info *info)
{
    int64_t id;
    int rc = store_mailbox_id(s, name, &id);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, "describing a mailbox");
    }
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_reset(st);
        return store_fail_sqlite(s, "describing a mailbox");
    }
    rc = store_mailbox_row(st, &s->strings, info);
    sqlite3_reset(st);
    return rc == MV_OK ? MV_OK : store_fail(s, rc, "out of memory");
}

int mv_mailbox_get(mv_store *s, const char *name, struct mv_mailbox_info *info)
{
    return store_mailbox_describe(s, name, STORE_MAILBOX_COLUMNS "WHERE m.id = ?", info);
}

int mv_mailbox_status(mv_store *s, const char *name, struct mv_mailbox_info *info)
{
    return store_mailbox_describe(s, name, STORE_MAILBOX_STATUS_COLUMNS "WHERE m.id = ?", info);
}

int mv_mailbox_list_begin(mv_store *s, mv_mailbox_iter **iter)
{
    *iter = calloc(1, sizeof **iter);
    if (*iter == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory");
    }
    store_enter(s);
    if (sqlite3_prepare_v2(s->db, STORE_MAILBOX_COLUMNS "ORDER BY m.name", -1, &(*iter)->stmt,
                           NULL) != SQLITE_OK) {
        free(*iter);
        *iter = NULL;
        return store_fail_sqlite(s, "listing mailboxes");
    }
    (*iter)->store = s;
    return MV_OK;
}

int mv_mailbox_list_next(mv_mailbox_iter *iter, struct mv_mailbox_info *info)
{
    store_enter(iter->store);
    int step = sqlite3_step(iter->stmt);
    if (step == SQLITE_DONE) {
        return 0;
    }
    if (step != SQLITE_ROW) {
        return store_fail_sqlite(iter->store, "listing mailboxes");
    }
    int rc = store_mailbox_row(iter->stmt, &iter->strings, info);
    return rc == MV_OK ? 1 : store_fail(iter->store, rc, "out of memory");
}

void mv_mailbox_list_end(mv_mailbox_iter **iter)
{
    if (iter == NULL || *iter == NULL) {
        return;
    }
    sqlite3_finalize((*iter)->stmt);
    store_strings_free(&(*iter)->strings);
    free(*iter);
    *iter = NULL;
}
