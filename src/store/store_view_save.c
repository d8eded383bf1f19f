/*
 * store_view_save.c -- mv_mailbox_view_save/load: one saved listing per mailbox, opaque
 * bytes an application keeps for itself (mailvaultd: its SELECT view, imap_view_cache.c),
 * tagged with the mailbox's UIDVALIDITY and the modseq they reflect (schema version 8,
 * table mailbox_views; docs/SCHEMA.md).
 *
 * IMPLEMENTATION NOTES
 *   - Why: a cold SELECT of a 100,000-message INBOX listed every row (a seek per row from
 *     the UID index into the table, ~1,300 pages read and decrypted): 216 ms measured against
 *     Dovecot's 312 (issue 13). The saved bytes are a few hundred pages read in one go.
 *   - The save checks, under the write lock, that the mailbox still has that UIDVALIDITY and
 *     that the modseq is not above its highest (a view can only reflect a state the mailbox
 *     had). Whatever happened since is in the change log, which the reader replays; nothing
 *     here has to be kept up to date by other writes. It takes two write transactions: the
 *     view before is deleted in the first, so the second writes the new bytes into pages at
 *     the end of the file, in ascending order (see mv_mailbox_view_save).
 *   - The row goes with its mailbox (ON DELETE CASCADE); a rename keeps the id, and the view.
 */
#include "crypto/crypt.h"
#include "store/store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Faults in the pages of the fresh buffer a saved view is read into with one system call:
 * ~10 MB at 1,000,000 messages, whose ~2,500 pages each faulted in on their first write (the
 * copy out of SQLite's page) and cost about twice as much that way on this VM (issue 13: a
 * cold SELECT). A hint: a kernel without MADV_POPULATE_WRITE (before 5.14) says EINVAL.
 * mailvaultd does the same for its view's chunks (imapd/imap_msgs.c); the server sees only
 * mailvault.h, so each layer has its few lines. */
static void store_view_populate(void *p, size_t len)
{
    long got = sysconf(_SC_PAGESIZE);
    uintptr_t page = got > 0 ? (uintptr_t)got : 4096;
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + len) & ~(page - 1);
    if (hi > lo) {
        (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
    }
}

/* In a write transaction: mailbox's id into *id if it has that UIDVALIDITY and a highest
 * modseq of at least modseq (a view can only reflect a state the mailbox had). */
static int store_view_check(
    mv_store *s, const char *mailbox, uint32_t uidvalidity, uint64_t modseq, int64_t *id)
{
    int rc = store_mailbox_id(s, mailbox, id);
    sqlite3_stmt *st = NULL;
    if (rc == MV_OK) {
        st = store_stmt(s, "SELECT uidvalidity, highestmodseq FROM mailboxes WHERE id = ?");
        rc = st == NULL ? store_fail_sqlite(s, "reading a mailbox") : MV_OK;
    }
    if (rc == MV_OK) {
        sqlite3_bind_int64(st, 1, *id);
        int step = sqlite3_step(st);
        if (step != SQLITE_ROW) {
            rc = step == SQLITE_DONE ? store_fail(s, MV_ENOTFOUND, "no mailbox \"%s\"", mailbox)
                                     : store_fail_sqlite(s, "reading a mailbox");
        } else if ((uint64_t)sqlite3_column_int64(st, 0) != uidvalidity) {
            rc = store_fail(s, MV_ENOTFOUND, "mailbox \"%s\" has another UIDVALIDITY", mailbox);
        } else if ((uint64_t)sqlite3_column_int64(st, 1) < modseq) {
            rc = store_fail(s, MV_EINVAL, "a saved view of \"%s\" above its highest modseq",
                            mailbox);
        }
        sqlite3_reset(st);
    }
    return rc;
}

/* One write transaction: the checks, then sql on the mailbox's id (and uidvalidity, modseq
 * and the bytes, unless data is NULL). */
static int store_view_write(mv_store *s,
                            const char *mailbox,
                            uint32_t uidvalidity,
                            uint64_t modseq,
                            const void *data,
                            size_t len,
                            const char *sql)
{
    int rc = store_begin(s);
    if (rc != MV_OK) {
        return rc;
    }
    int64_t id = 0;
    rc = store_view_check(s, mailbox, uidvalidity, modseq, &id);
    sqlite3_stmt *st = NULL;
    if (rc == MV_OK && (st = store_stmt(s, sql)) == NULL) {
        rc = store_fail_sqlite(s, "saving a view");
    }
    if (rc == MV_OK) {
        sqlite3_bind_int64(st, 1, id);
        if (data != NULL) {
            sqlite3_bind_int64(st, 2, uidvalidity);
            sqlite3_bind_int64(st, 3, (sqlite3_int64)modseq);
            sqlite3_bind_blob64(st, 4, len > 0 ? data : "", len, SQLITE_STATIC);
        }
        int step = sqlite3_step(st);
        sqlite3_clear_bindings(st); /* drops the pointer to the caller's bytes */
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "saving a view");
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}

int mv_mailbox_view_save(mv_store *s,
                         const char *mailbox,
                         uint32_t uidvalidity,
                         uint64_t modseq,
                         const void *data,
                         size_t len)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (mailbox == NULL || (data == NULL && len > 0)) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_view_save: NULL argument");
    }
    if (len > MV_VIEW_SAVE_MAX) {
        return store_fail(s, MV_ELIMIT, "a saved view of %zu bytes is over MV_VIEW_SAVE_MAX (%u)",
                          len, MV_VIEW_SAVE_MAX);
    }
    if (modseq > (uint64_t)INT64_MAX) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_view_save: modseq out of range");
    }
    /* The view before goes in a commit of its own, so that the new bytes' pages come from the
     * end of the file in ascending order (auto_vacuum=FULL leaves no page free at a commit),
     * which the kernel reads ahead. Replaced in one statement, the new bytes took the pages
     * the old ones freed, in the order the free list gave them: in the benchmark's
     * 1,000,000-message store a chain running down the file (1,092 of 1,100 pages below the
     * one before), whose cold read is one disk read a window (vfs_read_ahead.c), not read
     * ahead while it is decrypted -- a cold SELECT read that 4.4 MB view in 30 ms against 15 ms
     * from ascending pages (issue 13). The checks come first in both: a refused
     * save keeps the view before; one that fails between the two commits leaves none, which
     * costs the next load a listing. */
    int rc = store_view_write(s, mailbox, uidvalidity, modseq, NULL, 0,
                              "DELETE FROM mailbox_views WHERE mailbox_id = ?");
    if (rc == MV_OK) {
        rc = store_view_write(s, mailbox, uidvalidity, modseq, data != NULL ? data : "", len,
                              "INSERT OR REPLACE INTO mailbox_views(mailbox_id, uidvalidity,"
                              " modseq, data) VALUES (?, ?, ?, ?)");
    }
    return rc;
}

/* The saved view's row of mailbox, for mv_mailbox_view_load and mv_mailbox_view_read: MV_OK
 * with *st on the row (the caller resets it), its length in *n and, for n > 0, *blob open on
 * its bytes; or MV_OK with *st NULL when none is saved; or an error (nothing left open).
 * The length first (length() of a blob reads no overflow page), then the bytes through an
 * incremental handle while the statement holds the row's snapshot: the column would first be
 * assembled in a buffer of SQLite's (one more copy of ~10 MB at 1,000,000 messages, and its
 * fresh pages to fault in). what names the caller's work in error messages. */
static int store_view_row(mv_store *s,
                          const char *mailbox,
                          const char *what,
                          sqlite3_stmt **st,
                          sqlite3_int64 *n,
                          sqlite3_blob **blob)
{
    *st = NULL;
    *n = 0;
    *blob = NULL;
    int64_t id = 0;
    int rc = store_mailbox_id(s, mailbox, &id);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *q = store_stmt(
        s, "SELECT uidvalidity, modseq, length(data) FROM mailbox_views WHERE mailbox_id = ?");
    if (q == NULL) {
        return store_fail_sqlite(s, what);
    }
    sqlite3_bind_int64(q, 1, id);
    int step = sqlite3_step(q);
    if (step != SQLITE_ROW) {
        rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, what);
        sqlite3_reset(q);
        return rc;
    }
    *n = sqlite3_column_int64(q, 2);
    if (*n < 0 || *n > (sqlite3_int64)MV_VIEW_SAVE_MAX) {
        rc = store_fail(s, MV_ECORRUPT, "a saved view of %lld bytes", (long long)*n);
    } else if (*n > 0 && sqlite3_blob_open(s->db, "main", "mailbox_views", "data", id, 0, blob) !=
                             SQLITE_OK) {
        rc = store_fail_sqlite(s, what);
    } else if (*n > 0 && sqlite3_blob_bytes(*blob) != (int)*n) {
        rc = store_fail(s, MV_ECORRUPT, "a saved view that is not bytes"); /* TEXT: chars */
    }
    if (rc != MV_OK) {
        sqlite3_blob_close(*blob);
        *blob = NULL;
        *n = 0;
        sqlite3_reset(q);
        return rc;
    }
    *st = q;
    return MV_OK;
}

int mv_mailbox_view_load(mv_store *s,
                         const char *mailbox,
                         uint32_t *uidvalidity,
                         uint64_t *modseq,
                         void **data,
                         size_t *len)
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
    if (mailbox == NULL || uidvalidity == NULL || modseq == NULL || data == NULL || len == NULL) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_view_load: NULL argument");
    }
    *uidvalidity = 0;
    *modseq = 0;
    sqlite3_stmt *st = NULL;
    sqlite3_int64 n = 0;
    sqlite3_blob *blob = NULL;
    int rc = store_view_row(s, mailbox, "loading a saved view", &st, &n, &blob);
    if (rc != MV_OK || st == NULL) {
        return rc;
    }
    void *copy = malloc(n > 0 ? (size_t)n : 1); /* the bytes straight into the caller's buffer */
    if (copy == NULL) {
        rc = store_fail(s, MV_ENOMEM, "out of memory loading a saved view");
    } else if (n > 0) {
        store_view_populate(copy, (size_t)n);
        if (sqlite3_blob_read(blob, copy, (int)n, 0) != SQLITE_OK) {
            rc = store_fail_sqlite(s, "loading a saved view");
        }
    }
    sqlite3_blob_close(blob);
    if (rc == MV_OK) {
        *uidvalidity = (uint32_t)sqlite3_column_int64(st, 0);
        *modseq = (uint64_t)sqlite3_column_int64(st, 1);
        *data = copy;
        *len = (size_t)n;
    } else {
        crypt_free_wiped(copy);
    }
    sqlite3_reset(st);
    return rc;
}

int mv_mailbox_view_read(mv_store *s,
                         const char *mailbox,
                         uint32_t *uidvalidity,
                         uint64_t *modseq,
                         size_t *len,
                         int (*piece)(void *arg, const void *bytes, size_t n),
                         void *arg)
{
    if (len != NULL) {
        *len = 0;
    }
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (mailbox == NULL || uidvalidity == NULL || modseq == NULL || len == NULL || piece == NULL) {
        return store_fail(s, MV_EINVAL, "mv_mailbox_view_read: NULL argument");
    }
    *uidvalidity = 0;
    *modseq = 0;
    sqlite3_stmt *st = NULL;
    sqlite3_int64 n = 0;
    sqlite3_blob *blob = NULL;
    int rc = store_view_row(s, mailbox, "reading a saved view", &st, &n, &blob);
    if (rc != MV_OK || st == NULL) {
        return rc;
    }
    /* The bytes in pieces through one buffer (its pages are faulted in once, then hot), the
     * incremental handle keeping its place in the overflow chain. */
    uint8_t *buf = n > 0 ? malloc(MV_VIEW_READ_PIECE) : NULL;
    if (n > 0 && buf == NULL) {
        rc = store_fail(s, MV_ENOMEM, "out of memory reading a saved view");
    } else {
        *uidvalidity = (uint32_t)sqlite3_column_int64(st, 0);
        *modseq = (uint64_t)sqlite3_column_int64(st, 1);
        *len = (size_t)n;
    }
    for (size_t done = 0; rc == MV_OK && done < (size_t)n;) {
        size_t take = (size_t)n - done < MV_VIEW_READ_PIECE ? (size_t)n - done : MV_VIEW_READ_PIECE;
        if (sqlite3_blob_read(blob, buf, (int)take, (int)done) != SQLITE_OK) {
            rc = store_fail_sqlite(s, "reading a saved view");
            break;
        }
        rc = piece(arg, buf, take);
        done += take;
    }
    sqlite3_blob_close(blob);
    crypt_free_wiped(buf); /* as mv_free() wipes a loaded view: mail metadata */
    sqlite3_reset(st);
    return rc;
}
