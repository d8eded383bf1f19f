/*
 * store_keyword_registry.c -- the keywords each mailbox defines (mailbox_keywords, schema
 * version 13) and their bound, limits.mailbox_keywords_max. Every write that can give a
 * message of a mailbox a keyword registers it here first, in the same transaction: an
 * append or import (store_message_insert), a STORE that adds or replaces keywords, a
 * COPY or MOVE into the mailbox. A keyword stays defined when no message carries it any
 * more, as an IMAP session keeps one FLAGS has announced (and as Dovecot keeps its list).
 *
 * WHY A BOUND
 *   A message may carry keywords_max (256) keywords of keyword_size_max (128) bytes, and a
 *   mailbox had no bound: a user's STOREs could define hundreds of thousands of distinct
 *   keywords, which every SELECT lists twice (FLAGS and PERMANENTFLAGS) and each selecting
 *   session holds in memory, and which every STORE that adds one more announces again
 *   whole. Measured before (500 messages, 256 distinct keywords of ~100 bytes each): a
 *   SELECT answer of 26 MB and 136 MB of server memory for one session.
 *
 * THE INVARIANT
 *   Every keyword a message of a mailbox carries is in that mailbox's rows (the migration
 *   builds them from the messages; mailvault check names a keyword that is not, repair
 *   defines it). So a COPY from a mailbox that defines nothing new for the target (the
 *   usual case: none, or the same $Forwarded and $Junk) costs two lookups in this table, not
 *   a read of the copied rows.
 *
 * A mailbox already over the bound (made by an older mailvault, or the bound lowered) keeps
 * its keywords: what is refused is a keyword it does not yet define.
 */
#include "store/store_keyword_registry.h"
#include "store/store.h"
#include "store/store_uidset.h"

#include <sqlite3.h>

/* Runs st to its end; *changes the rows it inserted. Resets st. */
static int store_keyword_run(mv_store *s, sqlite3_stmt *st, const char *what, int64_t *changes)
{
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    }
    *changes = step == SQLITE_DONE ? sqlite3_changes64(s->db) : 0;
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, what);
}

/* After rows were added for mailbox_id: MV_ELIMIT if it now defines more keywords than the
 * bound (the caller rolls its transaction back). */
static int store_keyword_bound(mv_store *s, int64_t mailbox_id)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT count(*) FROM mailbox_keywords WHERE mailbox_id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting a mailbox's keywords");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    int step = sqlite3_step(st);
    sqlite3_int64 count = step == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    if (step != SQLITE_ROW) {
        return store_fail_sqlite(s, "counting a mailbox's keywords");
    }
    if (count > (sqlite3_int64)s->limits.mailbox_keywords_max) {
        return store_fail(s, MV_ELIMIT,
                          "the mailbox would define %lld keywords, over mailbox_keywords_max (%u)",
                          (long long)count, s->limits.mailbox_keywords_max);
    }
    return MV_OK;
}

int mv_mailbox_keyword_room(mv_store *s, const char *mailbox, uint32_t *room)
{
    if (mailbox == NULL || room == NULL) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_keyword_room: NULL argument");
    }
    *room = 0;
    /* One statement: outside a transaction, one read transaction. */
    sqlite3_stmt *st = store_stmt(
        s, "SELECT m.id, (SELECT count(*) FROM mailbox_keywords k WHERE k.mailbox_id = m.id) "
           "FROM mailboxes m WHERE m.name = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting a mailbox's keywords");
    }
    sqlite3_bind_text(st, 1, store_mailbox_canonical(mailbox), -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    sqlite3_int64 count = step == SQLITE_ROW ? sqlite3_column_int64(st, 1) : 0;
    sqlite3_reset(st);
    if (step == SQLITE_DONE) {
        return store_fail(s, MV_ENOTFOUND, "no mailbox \"%s\"", mailbox);
    }
    if (step != SQLITE_ROW) {
        return store_fail_sqlite(s, "counting a mailbox's keywords");
    }
    if (count < (sqlite3_int64)s->limits.mailbox_keywords_max) {
        *room = (uint32_t)((sqlite3_int64)s->limits.mailbox_keywords_max - count);
    }
    return MV_OK;
}

int store_keywords_register(mv_store *s, int64_t mailbox_id, const char *list)
{
    if (list == NULL || list[0] == '\0') {
        return MV_OK;
    }
    sqlite3_stmt *st =
        store_stmt(s, "WITH RECURSIVE words(mailbox_id, word, rest) AS (SELECT "
                      "?1, '', ?2 || ' '" STORE_KEYWORD_SPLIT STORE_KEYWORD_DEFINE_WORDS);
    if (st == NULL) {
        return store_fail_sqlite(s, "registering keywords");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_text(st, 2, list, -1, SQLITE_STATIC);
    int64_t added = 0;
    int rc = store_keyword_run(s, st, "registering keywords", &added);
    return rc == MV_OK && added > 0 ? store_keyword_bound(s, mailbox_id) : rc;
}

/* Whether from_id defines a keyword to_id does not (THE INVARIANT: else no message of from_id
 * can bring one). */
static int store_keyword_news(mv_store *s, int64_t from_id, int64_t to_id, int *news)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT EXISTS (SELECT 1 FROM mailbox_keywords a WHERE "
                                     "a.mailbox_id = ?1 AND NOT EXISTS (SELECT 1 FROM "
                                     "mailbox_keywords b WHERE b.mailbox_id = ?2 AND b.name = "
                                     "a.name))");
    if (st == NULL) {
        return store_fail_sqlite(s, "comparing mailboxes' keywords");
    }
    sqlite3_bind_int64(st, 1, from_id);
    sqlite3_bind_int64(st, 2, to_id);
    int step = sqlite3_step(st);
    *news = step == SQLITE_ROW && sqlite3_column_int(st, 0) != 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "comparing mailboxes' keywords");
}

int store_keywords_register_set(mv_store *s,
                                int64_t from_id,
                                int64_t to_id,
                                const struct store_uidset *set)
{
    int news = 0;
    int rc = store_keyword_news(s, from_id, to_id, &news);
    if (rc != MV_OK || !news) {
        return rc;
    }
    /* Only what the set's messages carry: the source may define keywords none of them has. */
    sqlite3_stmt *st = store_stmt(
        s,
        "WITH RECURSIVE words(mailbox_id, word, rest) AS (SELECT ?3, '', m.keywords || ' ' "
        "FROM mv_uid_ranges(?2) r JOIN messages m ON m.mailbox_id = ?1 AND m.uid BETWEEN "
        "r.first AND r.last WHERE m.keywords != ''" STORE_KEYWORD_SPLIT STORE_KEYWORD_DEFINE_WORDS);
    if (st == NULL) {
        return store_fail_sqlite(s, "registering copied keywords");
    }
    sqlite3_bind_int64(st, 1, from_id);
    sqlite3_bind_pointer(st, 2, (void *)set, STORE_UIDSET_POINTER, NULL);
    sqlite3_bind_int64(st, 3, to_id);
    int64_t added = 0;
    rc = store_keyword_run(s, st, "registering copied keywords", &added);
    return rc == MV_OK && added > 0 ? store_keyword_bound(s, to_id) : rc;
}
