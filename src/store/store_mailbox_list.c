/*
 * store_mailbox_list.c -- describing mailboxes: one by name, or all in name order through
 * an iterator. Message count, unseen count and size sum are columns of the mailbox row,
 * kept by triggers (schema version 2), so describing a mailbox never reads its messages.
 * The fields that cost more are asked for with MV_MAILBOX_* bits (mv_mailbox_get and
 * mv_mailbox_list_begin ask for all of them, mv_mailbox_status for none):
 *
 * stored_bytes (MV_MAILBOX_STORED_BYTES): the distinct bodies the mailbox's messages use (IN
 * makes the set distinct, so copies and identical deliveries count once), then the distinct
 * attachments of those bodies; each set is probed by primary key (bodies.id, body_parts
 * (body_id, seq), attachments.id). That walks the mailbox's messages_body entries: it grows
 * with the mailbox, which is why an IMAP session never asks for it. test_mailbox.c checks
 * the plan.
 *
 * deleted, deleted_bytes (MV_MAILBOX_DELETED): no counter is kept for them (that would be a
 * schema change), so they are counted over the partial index messages_deleted, which holds
 * only the \Deleted messages: the cost grows with those, not with the mailbox. INDEXED BY
 * pins that index, as EXPUNGE's walk does (store_message.c): with sqlite_stat1 (PRAGMA
 * optimize) the planner may prefer the UNIQUE (mailbox_id, uid) index, which reads every
 * message of the mailbox; and if the index ever goes, prepare fails loudly. The sum reads
 * each \Deleted message's row for its size (the index does not hold it).
 *
 * Statements are literals (the statement cache's key), one per combination of fields.
 */
#include "store/store.h"
#include "vfs/db_column.h"

#include <stdlib.h>

#define STORE_MAILBOX_HEAD                                                                         \
    "SELECT m.id, m.name, m.uidvalidity, m.uidnext, m.highestmodseq, "                             \
    "EXISTS (SELECT 1 FROM subscriptions WHERE name = m.name), "                                   \
    "m.special_use, m.message_count, m.unseen_count, m.size_sum, "
#define STORE_MAILBOX_STORED                                                                       \
    "(SELECT coalesce(sum(stored_size), 0) FROM bodies WHERE id IN "                               \
    "(SELECT body_id FROM messages WHERE mailbox_id = m.id)) + "                                   \
    "(SELECT coalesce(sum(stored_size), 0) FROM attachments WHERE id IN "                          \
    "(SELECT attachment_id FROM body_parts WHERE body_id IN "                                      \
    "(SELECT body_id FROM messages WHERE mailbox_id = m.id))), "
#define STORE_MAILBOX_NO_STORED "0, "
#define STORE_MAILBOX_DELETED                                                                      \
    "(SELECT count(*) FROM messages INDEXED BY messages_deleted "                                  \
    "WHERE mailbox_id = m.id AND (flags & 8) != 0), "                                              \
    "(SELECT coalesce(sum(size), 0) FROM messages INDEXED BY messages_deleted "                    \
    "WHERE mailbox_id = m.id AND (flags & 8) != 0) FROM mailboxes m "
#define STORE_MAILBOX_NO_DELETED "0, 0 FROM mailboxes m "

#define STORE_MAILBOX_BY_ID   "WHERE m.id = ?"
#define STORE_MAILBOX_NAMED   "WHERE m.name = ?"
#define STORE_MAILBOX_BY_NAME "ORDER BY m.name"
/* A range of names: a search of the name's UNIQUE index, not a walk of every mailbox. */
#define STORE_MAILBOX_RANGE "WHERE m.name >= ?1 AND m.name < ?2 ORDER BY m.name"
/* From a name to the end (a range with no upper bound). */
#define STORE_MAILBOX_FROM "WHERE m.name >= ?1 ORDER BY m.name"

_Static_assert(MV_MAILBOX_FIELDS_ALL == (MV_MAILBOX_STORED_BYTES | MV_MAILBOX_DELETED) &&
                   MV_MAILBOX_STORED_BYTES == 1 && MV_MAILBOX_DELETED == 2,
               "the statement tables below are indexed by the fields bits");

/* The four statements of one WHERE clause, one per combination of fields: a table indexed
 * by the fields bits. Each is a literal of its own (the statement cache's key). */
#define STORE_MAILBOX_BY_FIELDS(where)                                                             \
    {                                                                                              \
        STORE_MAILBOX_HEAD STORE_MAILBOX_NO_STORED STORE_MAILBOX_NO_DELETED where,                 \
            STORE_MAILBOX_HEAD STORE_MAILBOX_STORED STORE_MAILBOX_NO_DELETED where,                \
            STORE_MAILBOX_HEAD STORE_MAILBOX_NO_STORED STORE_MAILBOX_DELETED where,                \
            STORE_MAILBOX_HEAD STORE_MAILBOX_STORED STORE_MAILBOX_DELETED where,                   \
    }

/* [fields]: one mailbox by id. */
static const char *const store_mailbox_sql_one[] = STORE_MAILBOX_BY_FIELDS(STORE_MAILBOX_BY_ID);
/* [fields]: one mailbox by name. */
static const char *const store_mailbox_sql_named[] = STORE_MAILBOX_BY_FIELDS(STORE_MAILBOX_NAMED);
/* [fields]: every mailbox in name order. */
static const char *const store_mailbox_sql_all[] = STORE_MAILBOX_BY_FIELDS(STORE_MAILBOX_BY_NAME);
/* [fields]: the mailboxes of a range of names in name order. */
static const char *const store_mailbox_sql_range[] = STORE_MAILBOX_BY_FIELDS(STORE_MAILBOX_RANGE);
/* [fields]: the mailboxes from a name on, in name order. */
static const char *const store_mailbox_sql_from[] = STORE_MAILBOX_BY_FIELDS(STORE_MAILBOX_FROM);
_Static_assert(sizeof store_mailbox_sql_one / sizeof store_mailbox_sql_one[0] ==
                   MV_MAILBOX_FIELDS_ALL + 1,
               "one statement per combination of fields");

struct mv_mailbox_iter {
    mv_store *store;
    sqlite3_stmt *stmt; /* private: an iterator may live across other calls on the store */
    int ranged;         /* ?1 is the lower bound: mv_mailbox_list_skip may move it */
    struct store_strings strings;
};

static int
store_mailbox_row(sqlite3_stmt *st, struct store_strings *strings, struct mv_mailbox_info *info)
{
    int oom = 0;
    store_strings_clear(strings);
    info->id = sqlite3_column_int64(st, 0);
    info->name = store_strings_add(strings, mv_db_column_text(st, 1, &oom), &oom);
    info->uidvalidity = (uint32_t)sqlite3_column_int64(st, 2);
    info->uidnext = (uint32_t)sqlite3_column_int64(st, 3);
    info->highestmodseq = (uint64_t)sqlite3_column_int64(st, 4);
    info->subscribed = sqlite3_column_int(st, 5);
    info->special_use = sqlite3_column_type(st, 6) == SQLITE_NULL
                            ? NULL
                            : store_strings_add(strings, mv_db_column_text(st, 6, &oom), &oom);
    info->messages = (uint32_t)sqlite3_column_int64(st, 7);
    info->unseen = (uint32_t)sqlite3_column_int64(st, 8);
    info->size_bytes = (uint64_t)sqlite3_column_int64(st, 9);
    info->stored_bytes = (uint64_t)sqlite3_column_int64(st, 10);
    info->deleted = (uint32_t)sqlite3_column_int64(st, 11);
    info->deleted_bytes = (uint64_t)sqlite3_column_int64(st, 12);
    return oom ? MV_ENOMEM : MV_OK;
}

/* Describes one mailbox with the fields asked for: by name in one statement, so outside a
 * transaction one read transaction (looking its id up first made two, each with its
 * WAL-index file locks: ~13 us of a STATUS's ~75 at 10,000 messages; issue 13), or by id when
 * the read snapshot already knows it. */
static int
store_mailbox_describe(mv_store *s, const char *name, unsigned fields, struct mv_mailbox_info *info)
{
    if ((fields & ~MV_MAILBOX_FIELDS_ALL) != 0) {
        return store_fail(s, MV_EINVAL, "unknown mailbox fields 0x%x", fields);
    }
    if (name == NULL) {
        return store_fail(s, MV_EINVAL, "no mailbox name");
    }
    int64_t id;
    int by_id = store_mailbox_snapshot_id(s, name, &id);
    sqlite3_stmt *st =
        store_stmt(s, by_id ? store_mailbox_sql_one[fields] : store_mailbox_sql_named[fields]);
    if (st == NULL) {
        return store_fail_sqlite(s, "describing a mailbox");
    }
    if (by_id) {
        sqlite3_bind_int64(st, 1, id);
    } else {
        sqlite3_bind_text(st, 1, store_mailbox_canonical(name), -1, SQLITE_STATIC);
    }
    int step = sqlite3_step(st);
    if (step != SQLITE_ROW) {
        sqlite3_reset(st);
        return step == SQLITE_DONE ? store_fail(s, MV_ENOTFOUND, "no mailbox \"%s\"", name)
                                   : store_fail_sqlite(s, "describing a mailbox");
    }
    int rc = store_mailbox_row(st, &s->strings, info);
    sqlite3_reset(st);
    if (rc == MV_OK && !by_id) {
        store_mailbox_snapshot_note(s, name, info->id);
    }
    return rc == MV_OK ? MV_OK : store_fail(s, rc, "out of memory");
}

int mv_mailbox_get(mv_store *s, const char *name, struct mv_mailbox_info *info)
{
    return store_mailbox_describe(s, name, MV_MAILBOX_FIELDS_ALL, info);
}

int mv_mailbox_status(mv_store *s, const char *name, struct mv_mailbox_info *info)
{
    return store_mailbox_describe(s, name, 0, info);
}

int mv_mailbox_get_fields(mv_store *s,
                          const char *name,
                          unsigned fields,
                          struct mv_mailbox_info *info)
{
    return store_mailbox_describe(s, name, fields, info);
}

/* An iterator over the rows of statement sql, with copies of from and below bound to ?1 and
 * ?2 when not NULL (the iterator may outlive the caller's strings). */
static int store_mailbox_list_open(
    mv_store *s, const char *sql, const char *from, const char *below, mv_mailbox_iter **iter)
{
    *iter = calloc(1, sizeof **iter);
    if (*iter == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory");
    }
    store_enter(s);
    if (sqlite3_prepare_v2(s->db, sql, -1, &(*iter)->stmt, NULL) != SQLITE_OK ||
        (from != NULL &&
         sqlite3_bind_text((*iter)->stmt, 1, from, -1, SQLITE_TRANSIENT) != SQLITE_OK) ||
        (below != NULL &&
         sqlite3_bind_text((*iter)->stmt, 2, below, -1, SQLITE_TRANSIENT) != SQLITE_OK)) {
        int rc = store_fail_sqlite(s, "listing mailboxes");
        sqlite3_finalize((*iter)->stmt);
        free(*iter);
        *iter = NULL;
        return rc;
    }
    (*iter)->store = s;
    (*iter)->ranged = from != NULL;
    return MV_OK;
}

int mv_mailbox_list_begin_fields(mv_store *s, unsigned fields, mv_mailbox_iter **iter)
{
    *iter = NULL;
    if ((fields & ~MV_MAILBOX_FIELDS_ALL) != 0) {
        return store_fail(s, MV_EINVAL, "unknown mailbox fields 0x%x", fields);
    }
    return store_mailbox_list_open(s, store_mailbox_sql_all[fields], NULL, NULL, iter);
}

int mv_mailbox_list_begin_range(
    mv_store *s, unsigned fields, const char *from, const char *below, mv_mailbox_iter **iter)
{
    *iter = NULL;
    if ((fields & ~MV_MAILBOX_FIELDS_ALL) != 0) {
        return store_fail(s, MV_EINVAL, "unknown mailbox fields 0x%x", fields);
    }
    if (from == NULL) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_list_begin_range: NULL lower bound");
    }
    return store_mailbox_list_open(
        s, below != NULL ? store_mailbox_sql_range[fields] : store_mailbox_sql_from[fields], from,
        below, iter);
}

/* The statement starts again with a new lower bound: one search of the names' index, so a
 * LIST skips the descendants it has no use for (imapd's imap_list_read) for one seek rather
 * than a row each. Resetting ends the statement's read; the rest of the listing is read
 * afresh (a mailbox made or deleted meanwhile may or may not be in it, as with any later
 * row of a listing outside a transaction). */
int mv_mailbox_list_skip(mv_mailbox_iter *iter, const char *to)
{
    if (iter == NULL) {
        return MV_EINVAL;
    }
    if (to == NULL || !iter->ranged) {
        return store_fail(iter->store, MV_EINVAL,
                          to == NULL ? "mv_mailbox_list_skip: NULL name"
                                     : "mv_mailbox_list_skip: not a range listing");
    }
    store_enter(iter->store);
    sqlite3_reset(iter->stmt);
    if (sqlite3_bind_text(iter->stmt, 1, to, -1, SQLITE_TRANSIENT) != SQLITE_OK) {
        return store_fail_sqlite(iter->store, "listing mailboxes");
    }
    return MV_OK;
}

int mv_mailbox_list_begin(mv_store *s, mv_mailbox_iter **iter)
{
    return mv_mailbox_list_begin_fields(s, MV_MAILBOX_FIELDS_ALL, iter);
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
