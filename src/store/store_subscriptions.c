/*
 * store_subscriptions.c -- subscriptions and \Recent: the per-user state of mailboxes that
 * IMAP keeps beside the messages.
 *
 * Subscriptions are a set of names (schema version 4), independent of the mailboxes: RFC
 * 3501 6.3.6 lets a client subscribe to a name that does not exist, 6.3.4 says DELETE must
 * not drop the subscription, and RFC 5258 reports such names as \NonExistent. CREATE does
 * not subscribe (the store's default mailboxes are subscribed when it is made).
 *
 * \Recent (RFC 3501 2.3.2): mailboxes.recent_uid is the first UID that no session has yet
 * seen as recent. A session that selects the mailbox (or finds new messages in it while
 * selected) claims the UIDs below the end of its view; the claim is one write transaction,
 * so across the sessions and worker threads of a server, and across processes, each message
 * is recent in exactly one session.
 */
#include "store/store.h"
#include "vfs/db_column.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

int mv_mailbox_subscribe(mv_store *s, const char *name, int on)
{
    int rc = store_mailbox_name_check(s, name);
    if (rc != MV_OK) {
        return rc;
    }
    if (s->readonly) {
        return store_fail(s, MV_EINVAL, "the store is open read-only");
    }
    /* At most subscriptions_max names: a name need not exist, so without a bound a user's
     * SUBSCRIBEs could add names without end, and every LSUB or LIST (SUBSCRIBED) reads
     * them all into memory. The bound is tested in the INSERT itself, one statement, so two
     * sessions cannot both pass it. */
    sqlite3_stmt *st = store_stmt(s, on ? "INSERT OR IGNORE INTO subscriptions(name) SELECT ?1 "
                                          "WHERE (SELECT count(*) FROM subscriptions) < ?2"
                                        : "DELETE FROM subscriptions WHERE name = ?1");
    if (st == NULL) {
        return store_fail_sqlite(s, "subscribing");
    }
    const char *stored = strcasecmp(name, "INBOX") == 0 ? "INBOX" : name;
    sqlite3_bind_text(st, 1, stored, -1, SQLITE_STATIC);
    if (on) {
        sqlite3_bind_int64(st, 2, s->limits.subscriptions_max);
    }
    int step = sqlite3_step(st);
    int added = step == SQLITE_DONE && sqlite3_changes(s->db) > 0;
    sqlite3_reset(st);
    if (step != SQLITE_DONE) {
        return store_fail_sqlite(s, "subscribing");
    }
    if (!on || added) {
        return MV_OK;
    }
    /* Nothing added: already subscribed (fine), or the bound was reached. */
    st = store_stmt(s, "SELECT count(*), sum(name = ?1) FROM subscriptions");
    if (st == NULL) {
        return store_fail_sqlite(s, "subscribing");
    }
    sqlite3_bind_text(st, 1, stored, -1, SQLITE_STATIC);
    step = sqlite3_step(st);
    sqlite3_int64 count = step == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    int present = step == SQLITE_ROW && sqlite3_column_int64(st, 1) > 0;
    sqlite3_reset(st);
    if (step != SQLITE_ROW) {
        return store_fail_sqlite(s, "subscribing");
    }
    return present ? MV_OK
                   : store_fail(s, MV_ELIMIT, "%lld names are subscribed; subscriptions_max is %u",
                                (long long)count, s->limits.subscriptions_max);
}

int mv_subscription_list(mv_store *s, char ***names_out, size_t *count_out)
{
    if (names_out == NULL || count_out == NULL) {
        return store_fail(s, MV_EINVAL, "mv_subscription_list: NULL argument");
    }
    *names_out = NULL;
    *count_out = 0;
    sqlite3_stmt *st = store_stmt(s, "SELECT count(*), coalesce(sum(length(CAST(name AS BLOB)) "
                                     "+ 1), 0) FROM subscriptions");
    if (st == NULL || sqlite3_step(st) != SQLITE_ROW) {
        int rc = store_fail_sqlite(s, "listing subscriptions");
        if (st != NULL) {
            sqlite3_reset(st);
        }
        return rc;
    }
    size_t count = (size_t)sqlite3_column_int64(st, 0), bytes = (size_t)sqlite3_column_int64(st, 1);
    sqlite3_reset(st);
    /* One block: the pointers, then the strings they point at (one mv_free). */
    char **names = malloc((count + 1) * sizeof *names + bytes + 1);
    if (names == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory listing subscriptions");
    }
    char *text = (char *)(names + count + 1), *end = text + bytes + 1;
    st = store_stmt(s, "SELECT name FROM subscriptions ORDER BY name");
    if (st == NULL) {
        free(names);
        return store_fail_sqlite(s, "listing subscriptions");
    }
    size_t n = 0;
    int step;
    int oom = 0;
    while ((step = sqlite3_step(st)) == SQLITE_ROW && n < count) {
        const char *name = mv_db_column_text(st, 0, &oom);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        if (name == NULL || (size_t)(end - text) < len + 1) {
            break; /* changed since the count, or no memory: below */
        }
        memcpy(text, name, len + 1);
        names[n++] = text;
        text += len + 1;
    }
    sqlite3_reset(st);
    if (oom) { /* not a shorter list: a client would see folders unsubscribed */
        free(names);
        return store_fail(s, MV_ENOMEM, "out of memory listing subscriptions");
    }
    if (step != SQLITE_DONE && step != SQLITE_ROW) {
        free(names);
        return store_fail_sqlite(s, "listing subscriptions");
    }
    names[n] = NULL;
    *names_out = names;
    *count_out = n;
    return MV_OK;
}

int store_subscriptions_rename(mv_store *s, const char *from, const char *to)
{
    sqlite3_stmt *st = store_stmt(s, "UPDATE OR REPLACE subscriptions SET name = ?2 || "
                                     "substr(name, length(?1) + 1) WHERE name = ?1 OR "
                                     "substr(name, 1, length(?1) + 1) = ?1 || '/'");
    if (st == NULL) {
        return store_fail_sqlite(s, "renaming subscriptions");
    }
    sqlite3_bind_text(st, 1, from, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, to, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "renaming subscriptions");
}

/* ---- \Recent ---- */

static int store_recent_read(mv_store *s, int64_t id, uint32_t *first)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT recent_uid FROM mailboxes WHERE id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading \\Recent");
    }
    sqlite3_bind_int64(st, 1, id);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *first = (uint32_t)sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "reading \\Recent");
}

int mv_mailbox_recent(mv_store *s, const char *mailbox, uint32_t *first, uint32_t *count)
{
    int64_t id;
    if (first == NULL || count == NULL) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_recent: NULL argument");
    }
    int rc = store_mailbox_id(s, mailbox, &id);
    if (rc == MV_OK) {
        rc = store_recent_read(s, id, first);
    }
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st =
        store_stmt(s, "SELECT count(*) FROM messages WHERE mailbox_id = ? AND uid >= ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting \\Recent");
    }
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, *first);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *count = (uint32_t)sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "counting \\Recent");
}

int mv_mailbox_recent_claim(mv_store *s, const char *mailbox, uint32_t up_to, uint32_t *first)
{
    int64_t id;
    if (first == NULL) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_recent_claim: NULL argument");
    }
    int rc = store_mailbox_id(s, mailbox, &id);
    if (rc == MV_OK) {
        rc = store_recent_read(s, id, first);
    }
    if (rc != MV_OK || *first >= up_to) {
        return rc; /* nothing new to claim: no write transaction */
    }
    rc = store_begin(s);
    if (rc == MV_OK) {
        rc = store_recent_read(s, id, first); /* again, under the write lock */
    }
    if (rc == MV_OK && *first < up_to) {
        sqlite3_stmt *st = store_stmt(s, "UPDATE mailboxes SET recent_uid = ? WHERE id = ?");
        if (st == NULL) {
            rc = store_fail_sqlite(s, "claiming \\Recent");
        } else {
            sqlite3_bind_int64(st, 1, up_to);
            sqlite3_bind_int64(st, 2, id);
            int step = sqlite3_step(st);
            sqlite3_reset(st);
            rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "claiming \\Recent");
        }
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}
