/*
 * store_mailbox_memo.c -- mailbox memos: byte strings an application derives from a mailbox's
 * messages and keeps across runs (table mailbox_memos, schema version 16; docs/SCHEMA.md):
 * mv_mailbox_memo_put and mv_mailbox_memo_get.
 *
 * WHY
 *   mailvaultd keeps the sent days of a mailbox's messages in memory for SEARCH SENTSINCE /
 *   SENTBEFORE / SENTON (imapd/imap_search_sent.c). The first such key after every start read
 *   the Date of each message from two rows spread over the whole file: at 100,000 messages
 *   from a file out of the page cache 452 ms against Dovecot's 269, which reads the field
 *   from its cache file (issue 13). Kept here, the days are one row of ~2 bytes a message.
 *
 * HOW
 *   - Named by the mailbox's UIDVALIDITY, as body memos are (store_memo.c): the store gives
 *     each UIDVALIDITY once, so it names one mailbox for the store's life, through renames;
 *     a memo of a mailbox deleted and made again under its name is not found. The statements
 *     ask that exactly one mailbox has the UIDVALIDITY (index mailboxes_uidvalidity).
 *   - The row id is mailbox id * MV_MAILBOX_MEMO_SLOTS + slot: one B-tree, one seek, and the
 *     bytes read through an incremental BLOB handle (no copy in a buffer of SQLite's). A
 *     trigger on mailboxes takes a deleted mailbox's memos (mailbox ids are never reused:
 *     AUTOINCREMENT; the trigger keeps the table from holding what no one can name).
 *   - Bounded: at most MV_MAILBOX_MEMO_MAX bytes, and at most MV_MAILBOX_MEMO_FLOOR +
 *     MV_MAILBOX_MEMO_PER_MESSAGE bytes for each message the mailbox has when it is written,
 *     so that what a user's commands make the server keep grows with the mail the quota
 *     counts, not beyond it.
 *   - The store never reads a memo's bytes; the application checks what it reads back.
 */
#include "store/store.h"
#include "store/store_message.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(MV_MAILBOX_MEMO_SLOTS == 4,
               "the schema's trigger and the row ids below count 4 slots a mailbox");

/* The mailbox with UIDVALIDITY ?1, when exactly one has it. */
#define STORE_MAILBOX_MEMO_WHERE                                                                   \
    " WHERE b.uidvalidity = ?1"                                                                    \
    " AND (SELECT count(*) FROM mailboxes u WHERE u.uidvalidity = ?1) = 1"

int mv_mailbox_memo_put(
    mv_store *s, uint32_t uidvalidity, uint32_t slot, const void *data, size_t len)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if ((data == NULL && len > 0) || slot >= MV_MAILBOX_MEMO_SLOTS) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_memo_put: %s",
                          slot >= MV_MAILBOX_MEMO_SLOTS ? "slot out of range" : "NULL argument");
    }
    if (len > MV_MAILBOX_MEMO_MAX) {
        return store_fail(s, MV_ELIMIT,
                          "a mailbox memo of %zu bytes is over MV_MAILBOX_MEMO_MAX (%u)", len,
                          MV_MAILBOX_MEMO_MAX);
    }
    int rc = store_begin(s);
    if (rc != MV_OK) {
        return rc;
    }
    /* The mailbox and its message count first: whether it is there and the bound, each its
     * own error; then the row, in the same transaction. */
    sqlite3_stmt *st =
        store_stmt(s, "SELECT b.id, b.message_count FROM mailboxes b" STORE_MAILBOX_MEMO_WHERE);
    int64_t id = 0, messages = 0;
    if (st == NULL) {
        rc = s->stmt_failure;
    } else {
        sqlite3_bind_int64(st, 1, uidvalidity);
        int step = sqlite3_step(st);
        if (step == SQLITE_ROW) {
            id = sqlite3_column_int64(st, 0);
            messages = sqlite3_column_int64(st, 1);
        } else {
            rc = step == SQLITE_DONE
                     ? store_fail(s, MV_ENOTFOUND, "no mailbox has UIDVALIDITY %u", uidvalidity)
                     : store_fail_sqlite(s, "finding a mailbox");
        }
        sqlite3_reset(st);
    }
    uint64_t allowed = MV_MAILBOX_MEMO_FLOOR +
                       (uint64_t)(messages > 0 ? messages : 0) * MV_MAILBOX_MEMO_PER_MESSAGE;
    if (rc == MV_OK && len > allowed) {
        rc = store_fail(s, MV_ELIMIT,
                        "a mailbox memo of %zu bytes for %lld messages (at most %llu: "
                        "MV_MAILBOX_MEMO_FLOOR and MV_MAILBOX_MEMO_PER_MESSAGE a message)",
                        len, (long long)messages, (unsigned long long)allowed);
    }
    if (rc == MV_OK && (st = store_stmt(s, "INSERT OR REPLACE INTO mailbox_memos(id, uidvalidity,"
                                           " data) VALUES (?, ?, ?)")) == NULL) {
        rc = s->stmt_failure;
    }
    if (rc == MV_OK) {
        sqlite3_bind_int64(st, 1, id * MV_MAILBOX_MEMO_SLOTS + slot);
        sqlite3_bind_int64(st, 2, uidvalidity);
        sqlite3_bind_blob64(st, 3, len > 0 ? data : "", len, SQLITE_STATIC);
        int step = sqlite3_step(st);
        sqlite3_clear_bindings(st); /* drops the pointer to the caller's bytes */
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "keeping a mailbox memo");
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}

int mv_mailbox_memo_get(mv_store *s, uint32_t uidvalidity, uint32_t slot, void **data, size_t *len)
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
    if (data == NULL || len == NULL || slot >= MV_MAILBOX_MEMO_SLOTS) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_memo_get: %s",
                          slot >= MV_MAILBOX_MEMO_SLOTS ? "slot out of range" : "NULL argument");
    }
    int began = 0; /* the row and its bytes from one snapshot */
    int rc = store_message_read_begin(s, &began);
    sqlite3_stmt *st = NULL;
    if (rc == MV_OK &&
        (st = store_stmt(s, "SELECT d.id, length(d.data), typeof(d.data) = 'blob' FROM "
                            "mailboxes b JOIN "
                            "mailbox_memos d ON d.id = b.id * 4 + ?2 AND "
                            "d.uidvalidity = b.uidvalidity" STORE_MAILBOX_MEMO_WHERE)) == NULL) {
        rc = s->stmt_failure;
    }
    sqlite3_int64 row = 0, n = 0;
    int is_blob = 0;
    if (rc == MV_OK) {
        sqlite3_bind_int64(st, 1, uidvalidity);
        sqlite3_bind_int64(st, 2, slot);
        int step = sqlite3_step(st);
        if (step == SQLITE_ROW) {
            row = sqlite3_column_int64(st, 0);
            n = sqlite3_column_int64(st, 1);
            is_blob = sqlite3_column_int(st, 2);
        } else {
            rc = step == SQLITE_DONE
                     ? store_fail(s, MV_ENOTFOUND, "no memo %u of the mailbox with UIDVALIDITY %u",
                                  slot, uidvalidity)
                     : store_fail_sqlite(s, "reading a mailbox memo");
        }
        sqlite3_reset(st);
    }
    if (rc == MV_OK && (n < 0 || n > (sqlite3_int64)MV_MAILBOX_MEMO_MAX)) {
        rc = store_fail(s, MV_ECORRUPT, "a mailbox memo of %lld bytes", (long long)n);
    } else if (rc == MV_OK && !is_blob) {
        rc = store_fail(s, MV_ECORRUPT, "a mailbox memo that is not bytes");
    }
    unsigned char *bytes = NULL;
    if (rc == MV_OK && (bytes = malloc(n > 0 ? (size_t)n : 1)) == NULL) {
        rc = store_fail(s, MV_ENOMEM, "out of memory reading a mailbox memo");
    }
    if (rc == MV_OK && n > 0) {
        /* Through a BLOB handle, straight into the caller's buffer: a memo of a big mailbox is
         * hundreds of KiB, which a column read would first assemble in a buffer of SQLite's. */
        sqlite3_blob *blob = NULL;
        if (sqlite3_blob_open(s->db, "main", "mailbox_memos", "data", row, 0, &blob) != SQLITE_OK) {
            rc = store_fail_sqlite(s, "reading a mailbox memo");
        } else if (sqlite3_blob_bytes(blob) != (int)n) {
            rc = store_fail(s, MV_ECORRUPT, "a mailbox memo of two lengths");
        } else if (sqlite3_blob_read(blob, bytes, (int)n, 0) != SQLITE_OK) {
            rc = store_fail_sqlite(s, "reading a mailbox memo");
        }
        sqlite3_blob_close(blob);
    }
    store_message_read_end(s, began);
    if (rc != MV_OK) {
        free(bytes);
        return rc;
    }
    *data = bytes;
    *len = (size_t)n;
    return MV_OK;
}
