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

/* Expunges every message of mailbox_id (inside the caller's transaction). */
static int store_mailbox_empty(mv_store *s, int64_t mailbox_id)
{
    uint64_t modseq;
    int rc = store_mailbox_next_modseq(s, mailbox_id, &modseq);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, "DELETE FROM messages WHERE mailbox_id = ? "
                                     "RETURNING uid, body_id");
    sqlite3_stmt *log = store_stmt(s, "INSERT INTO changes(mailbox_id, modseq, uid, kind, at) "
                                      "VALUES(?, ?, ?, 'expunge', strftime('%s','now'))");
    if (st == NULL || log == NULL) {
        return store_fail_sqlite(s, "emptying a mailbox");
    }
    /* RETURNING rows are all computed before the first is returned: collect, then unref. */
    sqlite3_bind_int64(st, 1, mailbox_id);
    int64_t *bodies = NULL;
    size_t count = 0, cap = 0;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap != 0 ? cap * 2 : 64;
            int64_t *grown = realloc(bodies, cap * sizeof *grown);
            if (grown == NULL) {
                free(bodies);
                sqlite3_reset(st);
                return store_fail(s, MV_ENOMEM, "out of memory");
            }
            bodies = grown;
        }
        bodies[count++] = sqlite3_column_int64(st, 1);
        sqlite3_bind_int64(log, 1, mailbox_id);
        sqlite3_bind_int64(log, 2, (sqlite3_int64)modseq);
        sqlite3_bind_int64(log, 3, sqlite3_column_int64(st, 0));
        if (sqlite3_step(log) != SQLITE_DONE) {
            step = SQLITE_ERROR;
            sqlite3_reset(log);
            break;
        }
        sqlite3_reset(log);
    }
    sqlite3_reset(st);
    rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "emptying a mailbox");
    for (size_t i = 0; rc == MV_OK && i < count; i++) {
        rc = store_body_unref(s, bodies[i]);
    }
    free(bodies);
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
