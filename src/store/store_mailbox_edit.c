/*
 * store_mailbox_edit.c -- renaming and deleting mailboxes.
 *
 * A rename carries the mailbox's children along ("a" -> "b" also renames "a/x" to "b/x")
 * and keeps UIDs and UIDVALIDITY: the messages do not change. Superior names the new name
 * lacks are created, as for a create (RFC 3501 6.3.5). INBOX cannot be renamed or
 * deleted. Deleting a mailbox expunges its messages (dropping body references and writing
 * 'expunge' rows to the change log) in the same transaction; its children stay.
 * Subscriptions (store_subscriptions.c) are names of their own: a delete leaves them (RFC
 * 3501 6.3.4), a rename carries them along with the mailboxes, as Dovecot does.
 */
#include "store/store.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* The children move with the mailbox: each new name must fit mailbox_name_max too. */
static int store_mailbox_rename_check_children(mv_store *s, const char *from, const char *to)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT coalesce(max(length(CAST(name AS BLOB))), 0) "
                                     "FROM mailboxes WHERE substr(name, 1, length(?1) + 1) = "
                                     "?1 || '/'");
    if (st == NULL) {
        return store_fail_sqlite(s, "renaming a mailbox");
    }
    sqlite3_bind_text(st, 1, from, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    long long longest = step == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    if (step != SQLITE_ROW) {
        return store_fail_sqlite(s, "renaming a mailbox");
    }
    long long renamed = longest - (long long)strlen(from) + (long long)strlen(to);
    if (longest != 0 && renamed > (long long)s->limits.mailbox_name_max) {
        return store_fail(s, MV_ELIMIT,
                          "renaming \"%s\" to \"%s\" gives a child mailbox a name of %lld "
                          "bytes; mailbox_name_max is %u",
                          from, to, renamed, s->limits.mailbox_name_max);
    }
    return MV_OK;
}

int mv_mailbox_rename(mv_store *s, const char *from, const char *to)
{
    int64_t id, other;
    int rc = store_mailbox_name_check(s, to);
    if (rc != MV_OK) {
        return rc;
    }
    if (from == NULL || strcasecmp(from, "INBOX") == 0 || strcasecmp(to, "INBOX") == 0) {
        return store_fail(s, MV_EINVAL, "INBOX cannot be renamed, nor another mailbox to it");
    }
    rc = store_begin(s);
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, from, &id);
    }
    if (rc == MV_OK && store_mailbox_id(s, to, &other) == MV_OK) {
        rc = store_fail(s, MV_EEXISTS, "mailbox \"%s\" exists", to);
    }
    if (rc == MV_OK) {
        rc = store_mailbox_rename_check_children(s, from, to);
    }
    if (rc == MV_OK) {
        /* The mailbox and its children: the prefix "from/" becomes "to/". */
        sqlite3_stmt *st = store_stmt(s, "UPDATE mailboxes SET name = ?2 || substr(name, "
                                         "length(?1) + 1) WHERE name = ?1 OR "
                                         "substr(name, 1, length(?1) + 1) = ?1 || '/'");
        if (st == NULL) {
            rc = store_fail_sqlite(s, "renaming a mailbox");
        } else {
            sqlite3_bind_text(st, 1, from, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, to, -1, SQLITE_STATIC);
            int step = sqlite3_step(st);
            sqlite3_reset(st);
            rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "renaming a mailbox");
        }
    }
    if (rc == MV_OK) {
        rc = store_subscriptions_rename(s, from, to);
    }
    if (rc == MV_OK) {
        rc = store_mailbox_create_parents(s, to); /* after: "a" -> "a/b" needs a new "a" */
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}

/* Runs sql to its end, its parameters bound to (mailbox_id, modseq, now) as far as it has
 * them. */
static int store_mailbox_empty_step(
    mv_store *s, const char *sql, int64_t mailbox_id, uint64_t modseq, const char *what)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, what);
    }
    int params = sqlite3_bind_parameter_count(st);
    sqlite3_bind_int64(st, 1, mailbox_id);
    if (params >= 3) {
        sqlite3_bind_int64(st, 2, (sqlite3_int64)modseq);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)time(NULL));
    }
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    }
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, what);
}

/* Expunges every message of mailbox_id (inside the caller's transaction): the change rows,
 * one reference less to each body, the rows; three statements whatever the mailbox holds
 * (OR FAIL: no statement journal, the caller rolls back on any error). The references are
 * counted per body from the mailbox's messages_uid_body entries, as a COPY adds them
 * (store_message_copy_refs). Bodies left without a reference wait for mv_store_purge(), as
 * after an EXPUNGE (store_message.c). */
static int store_mailbox_empty(mv_store *s, int64_t mailbox_id)
{
    uint64_t modseq;
    int rc = store_mailbox_next_modseq(s, mailbox_id, &modseq);
    if (rc == MV_OK) {
        rc = store_mailbox_empty_step(s,
                                      "INSERT OR FAIL INTO changes(mailbox_id, modseq, uid, kind, "
                                      "at) SELECT ?1, ?2, uid, 'expunge', ?3 FROM messages "
                                      "WHERE mailbox_id = ?1",
                                      mailbox_id, modseq, "emptying a mailbox");
    }
    if (rc == MV_OK) {
        rc = store_mailbox_empty_step(s,
                                      "WITH n(body_id, c) AS (SELECT body_id, count(*) FROM "
                                      "messages INDEXED BY messages_uid_body WHERE mailbox_id = "
                                      "?1 GROUP BY body_id) UPDATE OR FAIL body_refs SET "
                                      "refcount = refcount - n.c FROM n WHERE body_refs.id = "
                                      "n.body_id",
                                      mailbox_id, modseq, "dropping message bodies");
        s->purge_hint = 1;
    }
    if (rc == MV_OK) {
        rc = store_mailbox_empty_step(s, "DELETE FROM messages WHERE mailbox_id = ?1", mailbox_id,
                                      modseq, "emptying a mailbox");
    }
    return rc;
}

int mv_mailbox_delete(mv_store *s, const char *name)
{
    int64_t id;
    if (name == NULL || strcasecmp(name, "INBOX") == 0) {
        return store_fail(s, MV_EINVAL, "INBOX cannot be deleted");
    }
    int rc = store_begin(s);
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, name, &id);
    }
    if (rc == MV_OK) {
        rc = store_mailbox_empty(s, id);
    }
    if (rc == MV_OK) {
        sqlite3_stmt *st = store_stmt(s, "DELETE FROM mailboxes WHERE id = ?");
        if (st == NULL) {
            rc = store_fail_sqlite(s, "deleting a mailbox");
        } else {
            sqlite3_bind_int64(st, 1, id);
            int step = sqlite3_step(st);
            sqlite3_reset(st);
            rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "deleting a mailbox");
        }
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}
