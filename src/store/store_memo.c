/*
 * store_memo.c -- memos: small byte strings an application derives from a message's bytes,
 * kept with those bytes across runs (table body_memos, schema version 14; docs/SCHEMA.md):
 * mv_message_memos_put, and three reads: mv_message_memo_get (one), mv_message_memos_range
 * (a UID range) and mv_message_memos_keyed (a listing's body keys).
 *
 * WHY
 *   mailvaultd answers FETCH BODYSTRUCTURE and BODY from a cache in memory that goes with the
 *   store's close and with the server: the first such FETCH after either read, decrypted and
 *   parsed every message again (FETCH 1:* BODYSTRUCTURE of a 100,000-message INBOX: ~13 s at
 *   every first login of the day), where Dovecot keeps the answers in its cache file. A memo
 *   is that answer kept in the store.
 *
 * HOW
 *   - Keyed by the body, not the message: copies share the bytes and so the answer, and a
 *     body's memos go with it (a trigger on bodies, so every path that deletes a body --
 *     the purge, repair -- takes them; ids of bodies are reused once the highest goes, and a
 *     new body must never find an old one's memo). The row id is body id * MV_MEMO_SLOTS +
 *     slot: one B-tree, found by one seek.
 *   - Named by (UIDVALIDITY, UID), resolved to the body inside the statement that reads or
 *     writes: a writer that made its memo from a message that has since been expunged (and
 *     whose body id went to another body) finds no message and writes nothing. The store
 *     gives each UIDVALIDITY once (store_mailbox.c), and a UID is never given twice under
 *     one, so the pair names the same bytes for the store's life; the statements also ask
 *     that exactly one mailbox has the UIDVALIDITY (index mailboxes_uidvalidity).
 *   - Bounded: a memo is kept only if it is at most MV_MEMO_MAX bytes and at most
 *     MV_MEMO_FLOOR + the message's size / MV_MEMO_SLOTS, so a body's memos together hold at
 *     most its size and 512 bytes. Quotas count messages' sizes; without the second bound a
 *     user's messages of many tiny parts could make the store hold many times its quota in
 *     answers. The floor is for small messages: a plain text message's BODYSTRUCTURE is
 *     ~80 bytes, more than a quarter of a 300-byte message.
 */
#include "store/store.h"
#include "store/store_blob.h"
#include "store/store_keyed.h"
#include "store/store_message.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(MV_MEMO_SLOTS == 4 && MV_MEMO_FLOOR == 128,
               "the schema's trigger deletes 4 slots a body; the statement below bounds them");

/* Message ?2 of the mailbox with UIDVALIDITY ?1 (m), when exactly one mailbox has it; the
 * memo slot ?3 of its body is row m.body_id * 4 + ?3. */
#define STORE_MEMO_FROM                                                                            \
    " FROM mailboxes b JOIN messages m INDEXED BY messages_uid_body ON m.mailbox_id = b.id"        \
    " AND m.uid = ?2"
#define STORE_MEMO_WHERE                                                                           \
    " WHERE b.uidvalidity = ?1"                                                                    \
    " AND (SELECT count(*) FROM mailboxes u WHERE u.uidvalidity = ?1) = 1"

/* Column col of st's row as a memo: its bytes (valid until the statement moves) and length;
 * MV_ECORRUPT for a length no memo has. The blob first, then its length (SQLite's order). */
static int memo_column(mv_store *s, sqlite3_stmt *st, int col, const void **bytes, size_t *len)
{
    const void *b = sqlite3_column_blob(st, col);
    int n = sqlite3_column_bytes(st, col);
    if (n < 0 || (size_t)n > MV_MEMO_MAX) {
        return store_fail(s, MV_ECORRUPT, "a memo of %d bytes", n);
    }
    *bytes = n > 0 ? b : "";
    *len = (size_t)n;
    return MV_OK;
}

int mv_message_memos_put(
    mv_store *s, uint32_t uidvalidity, const struct mv_memo *memos, size_t n, size_t *stored)
{
    if (stored != NULL) {
        *stored = 0;
    }
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (memos == NULL && n > 0) {
        return store_fail(s, MV_EINVAL, "mv_message_memos_put: NULL argument");
    }
    if (n > MV_MEMO_BATCH_MAX) {
        return store_fail(s, MV_EINVAL, "%zu memos at once; MV_MEMO_BATCH_MAX is %u", n,
                          MV_MEMO_BATCH_MAX);
    }
    for (size_t i = 0; i < n; i++) {
        if (memos[i].slot >= MV_MEMO_SLOTS) {
            return store_fail(s, MV_EINVAL,
                              "mv_message_memos_put: memo %zu: slot %u (MV_MEMO_SLOTS is %u)", i,
                              memos[i].slot, MV_MEMO_SLOTS);
        }
        if (memos[i].data == NULL && memos[i].len > 0) {
            return store_fail(s, MV_EINVAL,
                              "mv_message_memos_put: memo %zu: NULL bytes, length %zu", i,
                              memos[i].len);
        }
    }
    if (n == 0) {
        return MV_OK;
    }
    int rc = store_begin(s);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, "INSERT OR REPLACE INTO body_memos(id, data) SELECT "
                                     "m.body_id * 4 + ?3, ?4" STORE_MEMO_FROM STORE_MEMO_WHERE
                                     " AND ?5 <= 128 + m.size / 4");
    if (st == NULL) {
        rc = s->stmt_failure;
    }
    size_t kept = 0;
    for (size_t i = 0; rc == MV_OK && i < n; i++) {
        if (memos[i].len > MV_MEMO_MAX) {
            continue; /* over the bound: not kept, as documented */
        }
        sqlite3_bind_int64(st, 1, uidvalidity);
        sqlite3_bind_int64(st, 2, memos[i].uid);
        sqlite3_bind_int64(st, 3, memos[i].slot);
        sqlite3_bind_blob64(st, 4, memos[i].len > 0 ? memos[i].data : "", memos[i].len,
                            SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, (sqlite3_int64)memos[i].len);
        int step = sqlite3_step(st);
        sqlite3_clear_bindings(st); /* drops the pointer to the caller's bytes */
        sqlite3_reset(st);
        if (step != SQLITE_DONE) {
            rc = store_fail_sqlite(s, "keeping a memo");
        } else {
            kept += (size_t)sqlite3_changes(s->db) > 0;
        }
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    rc = store_commit(s);
    if (rc == MV_OK && stored != NULL) {
        *stored = kept;
    }
    return rc;
}

int mv_message_memo_get(
    mv_store *s, uint32_t uidvalidity, uint32_t uid, uint32_t slot, void **data, size_t *len)
{
    if (data != NULL) {
        *data = NULL;
    }
    if (len != NULL) {
        *len = 0;
    }
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (data == NULL || len == NULL || slot >= MV_MEMO_SLOTS) {
        return store_fail(s, MV_EINVAL, "mv_message_memo_get: %s",
                          slot >= MV_MEMO_SLOTS ? "slot out of range" : "NULL argument");
    }
    sqlite3_stmt *st =
        store_stmt(s, "SELECT d.data" STORE_MEMO_FROM
                      " JOIN body_memos d ON d.id = m.body_id * 4 + ?3" STORE_MEMO_WHERE);
    if (st == NULL) {
        return s->stmt_failure;
    }
    sqlite3_bind_int64(st, 1, uidvalidity);
    sqlite3_bind_int64(st, 2, uid);
    sqlite3_bind_int64(st, 3, slot);
    int step = sqlite3_step(st);
    int rc = MV_OK;
    if (step == SQLITE_ROW) {
        const void *bytes = NULL;
        size_t n = 0;
        rc = memo_column(s, st, 0, &bytes, &n);
        if (rc == MV_OK && (*data = malloc(n > 0 ? n : 1)) == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory reading a memo");
        } else if (rc == MV_OK) {
            memcpy(*data, bytes, n);
            *len = n;
        }
    } else {
        rc = step == SQLITE_DONE
                 ? store_fail(s, MV_ENOTFOUND, "no memo %u of message %u", slot, uid)
                 : store_fail_sqlite(s, "reading a memo");
    }
    sqlite3_reset(st);
    return rc;
}

int mv_message_memos_range(mv_store *s,
                           uint32_t uidvalidity,
                           uint32_t first,
                           uint32_t last,
                           uint32_t slot,
                           int (*got)(void *arg, uint32_t uid, const void *data, size_t len),
                           void *arg)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (got == NULL || slot >= MV_MEMO_SLOTS) {
        return store_fail(s, MV_EINVAL, "mv_message_memos_range: %s",
                          got == NULL ? "NULL argument" : "slot out of range");
    }
    /* The messages' entries of messages_uid_body, each joined to its body's memo by the row
     * id: one statement for the range instead of a lookup a message. No ORDER BY: the index
     * walk is in UID order already, and SQLite would sort the rows again in a temp b-tree. */
    sqlite3_stmt *st = store_stmt(
        s, "SELECT m.uid, d.data FROM mailboxes b JOIN messages m INDEXED BY messages_uid_body"
           " ON m.mailbox_id = b.id AND m.uid BETWEEN ?2 AND ?4"
           " JOIN body_memos d ON d.id = m.body_id * 4 + ?3" STORE_MEMO_WHERE);
    if (st == NULL) {
        return s->stmt_failure;
    }
    sqlite3_bind_int64(st, 1, uidvalidity);
    sqlite3_bind_int64(st, 2, first);
    sqlite3_bind_int64(st, 3, slot);
    sqlite3_bind_int64(st, 4, last);
    int rc = MV_OK, step;
    while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        const void *bytes = NULL;
        size_t n = 0;
        rc = memo_column(s, st, 1, &bytes, &n);
        if (rc == MV_OK) {
            rc = got(arg, (uint32_t)sqlite3_column_int64(st, 0), bytes, n);
        }
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "reading memos");
    }
    sqlite3_reset(st);
    return rc;
}

/* What mv_message_memos_keyed hands its rows to. */
struct memo_keyed {
    int (*got)(void *arg, size_t index, const void *data, size_t len);
    void *arg;
};

/* store_keyed_read's row: the memo of one body, for every key that wants it. */
static int memo_keyed_row(
    void *ctx, mv_store *s, sqlite3_stmt *st, const struct store_keyed_want *want, size_t n)
{
    const struct memo_keyed *mk = ctx;
    const void *bytes = NULL;
    size_t len = 0;
    int rc = memo_column(s, st, 1, &bytes, &len);
    for (size_t k = 0; rc == MV_OK && k < n; k++) {
        rc = mk->got(mk->arg, want[k].index, bytes, len);
    }
    return rc;
}

int mv_message_memos_keyed(mv_store *s,
                           const char *mailbox,
                           const struct mv_message_key *keys,
                           size_t n,
                           uint32_t slot,
                           int (*got)(void *arg, size_t index, const void *data, size_t len),
                           void *arg)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (mailbox == NULL || (keys == NULL && n > 0) || got == NULL || slot >= MV_MEMO_SLOTS ||
        n > MV_MEMO_BATCH_MAX) {
        return store_fail(s, MV_EINVAL, "mv_message_memos_keyed: %s",
                          slot >= MV_MEMO_SLOTS   ? "slot out of range"
                          : n > MV_MEMO_BATCH_MAX ? "more than MV_MEMO_BATCH_MAX keys"
                                                  : "NULL argument");
    }
    if (n == 0) {
        return MV_OK;
    }
    struct memo_keyed mk = {.got = got, .arg = arg};
    const struct store_keyed_read r = {
        .what = "reading memos",
        .scan_sql = "SELECT id, data FROM body_memos WHERE id BETWEEN ?1 AND ?2",
        .one_sql = "SELECT id, data FROM body_memos WHERE id = ?1",
        .per_body = MV_MEMO_SLOTS,
        .slot = slot,
        .row = memo_keyed_row,
        .ctx = &mk};
    return store_keyed_read(s, "mv_message_memos_keyed", mailbox, keys, n, &r);
}
