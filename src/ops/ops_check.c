/*
 * ops_check.c -- mv_store_check: everything that can be checked in one store.
 *
 * USAGE
 *   rc = mv_store_check(store, on_problem, arg, &report);   MV_ECORRUPT: problems reported
 *
 * IMPLEMENTATION NOTES
 *   1. Authentication of every page. The system SQLite has no sqlite_dbpage table, and
 *      integrity_check reads only the pages of b-trees and the freelist trunks, so the file
 *      is read page by page through the connection's own VFS file object
 *      (SQLITE_FCNTL_FILE_POINTER): each read is authenticated by the cipher, exactly as
 *      SQLite's reads are. The WAL is read the same way (SQLITE_FCNTL_JOURNAL_POINTER),
 *      frame by frame, for the frames SQLite's recovery keeps: the salts and the checksum
 *      chain decide, walked with pread by the one WAL walker (vfs/sqlite_format.h), so a
 *      torn frame after the last commit (a write that failed on a full disk) is ignored
 *      as SQLite ignores it. A read transaction is
 *      held meanwhile, so no checkpoint rewrites what is being read. A failed page is read
 *      a second time before it is reported (a checkpoint of another process may have been
 *      writing it).
 *   2. PRAGMA integrity_check and PRAGMA foreign_key_check.
 *   3. The store's invariants, each one SQL query whose rows are problems (below): they
 *      run in one read transaction, so they see one state.
 *   4. FTS5's integrity-check, which compares the index with its content. It is an INSERT
 *      command, so it takes the write lock for its duration; read-only handles skip it.
 */
#include "crypto/crypt.h"
#include "ops/ops_inspect.h"
#include "store/store_blob.h"
#include "store/store_keyword_registry.h"
#include "vfs/db_column.h"
#include "vfs/db_error.h"
#include "vfs/sqlite_format.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OPS_PROBLEMS_REPORTED_MAX 1000u

struct ops_check {
    mv_store *s;
    mv_problem_fn fn;
    void *arg;
    struct mv_check_report *out;
    /* The first part of the check that memory, the device or a lock stopped (MV_ENOMEM,
     * MV_EIO, MV_EBUSY; MV_OK: none) and why: not a problem of the store, so not counted
     * as one; the check then returns that error (ops_check_stop). */
    int stopped;
    char stopped_why[256];
};

__attribute__((format(printf, 3, 4))) static void
ops_problem(struct ops_check *c, const char *what, const char *fmt, ...)
{
    char detail[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    c->out->problems++;
    if (c->fn != NULL && c->out->problems <= OPS_PROBLEMS_REPORTED_MAX) {
        c->fn(c->arg, what, detail);
    }
}

/* A part of the check that could not run or finish, with code (MV_*): damage (MV_ECORRUPT:
 * a damaged page stops integrity_check) is a problem like any finding; out of memory, a
 * failed read or open (a temporary file for a sort too), a full disk or a lock is not, and
 * stops the check with that error. */
static void ops_check_stop(struct ops_check *c, int code, const char *what, const char *detail)
{
    if (code != MV_ENOMEM && code != MV_EIO && code != MV_EBUSY && code != MV_ENOSPC &&
        code != MV_ENOTFOUND) {
        ops_problem(c, what, "%s", detail);
        return;
    }
    if (c->stopped == MV_OK) {
        c->stopped = code;
        snprintf(c->stopped_why, sizeof c->stopped_why, "%s: %s", what, detail);
        for (char *p = c->stopped_why; *p != '\0'; p++) {
            *p = *p == '\n' || *p == '\r' ? ' ' : *p; /* one line: integrity rows hold several */
        }
    }
}

/* The VFS's message (it names the page) without a "page N failed" prefix the caller adds,
 * else SQLite's. */
static const char *ops_vfs_detail(mv_store *s)
{
    const char *vfs = mv_db_vfs_errmsg(s->db);
    if (vfs == NULL) {
        return sqlite3_errmsg(s->db);
    }
    const char *failed = strstr(vfs, " failed ");
    return failed != NULL && (strncmp(vfs, "page ", 5) == 0 || strncmp(vfs, "WAL frame ", 10) == 0)
               ? failed + 1
               : vfs;
}

/* Reads through the VFS, once more on failure. */
static int ops_read_twice(sqlite3_file *f, uint8_t *buf, uint32_t size, sqlite3_int64 off)
{
    int rc = f->pMethods->xRead(f, buf, (int)size, off);
    if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) {
        usleep(10000);
        rc = f->pMethods->xRead(f, buf, (int)size, off);
    }
    return rc;
}

/* Whether the WAL holds a committed copy of page pgno: then a copy in the database file that
 * fails authentication is no problem. A checkpoint that failed half-way (a short write, a
 * full disk, a crash) leaves exactly that: SQLite reads the page from the WAL, and the next
 * checkpoint rewrites the file's copy. Walked only for a page that failed (rare). */
static int ops_page_superseded_by_wal(struct ops_check *c, uint32_t page_size, uint64_t pgno)
{
    char wal_path[MV_PATH_MAX + 8];
    snprintf(wal_path, sizeof wal_path, "%s-wal", c->s->db_path);
    int fd = open(wal_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        return 0;
    }
    struct mv_wal_walk w;
    memset(&w, 0, sizeof w);
    uint64_t seen = 0;
    if (mv_wal_walk_begin(&w, fd, page_size) == 0) {
        while (mv_wal_walk_next(&w) == MV_WAL_STEP_FRAME) {
            if (w.pgno == pgno && seen == 0) {
                seen = w.frame_no;
            }
        }
    }
    int superseded = seen != 0 && seen <= w.last_commit;
    mv_wal_walk_end(&w);
    close(fd); /* no POSIX lock lives on a -wal (see ops_wal_committed_frames) */
    return superseded;
}

#define OPS_CHECK_PENDING_BYTE 0x40000000u /* SQLite's default PENDING_BYTE */

static int ops_check_main_pages(struct ops_check *c, uint32_t page_size, uint8_t *buf)
{
    sqlite3_file *f = NULL;
    sqlite3_int64 size = 0;
    if (sqlite3_file_control(c->s->db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK ||
        f == NULL || f->pMethods == NULL || f->pMethods->xFileSize(f, &size) != SQLITE_OK) {
        return store_fail(c->s, MV_EIO, "cannot reach the database file to read its pages");
    }
    uint64_t pages = (uint64_t)size / page_size;
    /* The page holding SQLite's lock bytes (from PENDING_BYTE, 1 GiB) is never written or
     * read by SQLite: in a file past 1 GiB it is a hole of zeros, not a page to
     * authenticate (a 100,000-message store was reported damaged for it). */
    const uint64_t lock_page = OPS_CHECK_PENDING_BYTE / page_size + 1;
    for (uint64_t pgno = 1; pgno <= pages; pgno++) {
        if (pgno == lock_page) {
            continue;
        }
        int rc =
            ops_read_twice(f, buf, page_size, (sqlite3_int64)(pgno - 1) * (sqlite3_int64)page_size);
        if (rc == SQLITE_IOERR_SHORT_READ) {
            break; /* truncated by a checkpoint meanwhile */
        }
        c->out->pages_read++;
        int bad = (rc == SQLITE_OK && pgno == 1 && !mv_header_is_plaintext(buf)) || rc != SQLITE_OK;
        if (bad && ops_page_superseded_by_wal(c, page_size, pgno)) {
            continue; /* its committed copy in the WAL is checked with the WAL's frames */
        }
        if (rc == SQLITE_OK && pgno == 1 && !mv_header_is_plaintext(buf)) {
            ops_problem(c, "page", "page 1 failed authentication");
        } else if (rc != SQLITE_OK) {
            ops_problem(c, "page", "page %llu: %s", (unsigned long long)pgno, ops_vfs_detail(c->s));
        }
    }
    return MV_OK;
}

/* The number of frames the WAL's recovery keeps (0 if no WAL), walked as recovery walks it
 * (sqlite_format.h): a torn or stale tail after the last commit is not part of the log, so
 * it is no problem. A frame that breaks the chain with valid frames chaining after it is
 * either damage (the commits after it would be lost: counted, so its read below fails and
 * is reported) or a page the last, unfinished transaction overwrote in place, which
 * authenticates (the end of the log, as the VFS decides in recovery: vfs_wal.c). Opening
 * and closing the -wal of the open store is safe: SQLite's unix VFS takes no POSIX lock on
 * it (WAL locks live in the -shm), so the close drops none (store_files.h). */
static uint64_t
ops_wal_committed_frames(const char *wal_path, sqlite3_file *f, uint32_t page_size, uint8_t *buf)
{
    int fd = open(wal_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        return 0;
    }
    struct mv_wal_walk w;
    uint64_t committed = 0;
    if (mv_wal_walk_begin(&w, fd, page_size) == 0) {
        int step;
        while ((step = mv_wal_walk_next(&w)) > 0) {
            if (step == MV_WAL_STEP_BROKEN &&
                ops_read_twice(f, buf, page_size,
                               (sqlite3_int64)(mv_wal_frame_offset(w.frame_no, page_size) +
                                               MV_WAL_FRAME_HEADER_BYTES)) == SQLITE_OK) {
                break; /* authentic: overwritten in place, not committed */
            }
        }
        committed = w.last_commit;
    }
    mv_wal_walk_end(&w);
    close(fd);
    return committed;
}

/* The page number in the header of WAL frame n (1-based). */
static uint32_t ops_wal_frame_page(const char *wal_path, uint64_t n, uint32_t page_size)
{
    uint8_t hdr[4] = {0, 0, 0, 0};
    int fd = open(wal_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        if (pread(fd, hdr, sizeof hdr, (off_t)mv_wal_frame_offset(n, page_size)) != 4) {
            memset(hdr, 0, sizeof hdr);
        }
        close(fd);
    }
    return mv_get_be32(hdr);
}

static int ops_check_wal_frames(struct ops_check *c, uint32_t page_size, uint8_t *buf)
{
    char wal_path[MV_PATH_MAX + 8];
    snprintf(wal_path, sizeof wal_path, "%s-wal", c->s->db_path);
    sqlite3_file *f = NULL;
    if (sqlite3_file_control(c->s->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &f) != SQLITE_OK ||
        f == NULL || f->pMethods == NULL) {
        return MV_OK;
    }
    char damage[320];
    if (mv_db_wal_header_damaged(c->s->db, damage, sizeof damage)) {
        /* The walk below reads the header on disk: it would see no frames at all. */
        ops_problem(c, "wal", "%s", damage);
        return MV_OK;
    }
    uint64_t frames = ops_wal_committed_frames(wal_path, f, page_size, buf);
    for (uint64_t n = 1; n <= frames; n++) {
        sqlite3_int64 off =
            (sqlite3_int64)(mv_wal_frame_offset(n, page_size) + MV_WAL_FRAME_HEADER_BYTES);
        int rc = ops_read_twice(f, buf, page_size, off);
        c->out->wal_frames_read++;
        if (rc != SQLITE_OK) {
            ops_problem(c, "page", "WAL frame %llu (page %u): %s", (unsigned long long)n,
                        ops_wal_frame_page(wal_path, n, page_size), ops_vfs_detail(c->s));
        }
    }
    return MV_OK;
}

/* Step 1, inside a read transaction. */
static int ops_check_pages(struct ops_check *c)
{
    int64_t page_size = 0;
    int rc = store_exec(c->s, "BEGIN");
    if (rc == MV_OK) {
        rc = ops_query_int(c->s, "PRAGMA page_size", &page_size); /* starts the snapshot */
    }
    int64_t schema = 0;
    if (rc == MV_OK) {
        rc = ops_query_int(c->s, "SELECT count(*) FROM sqlite_schema", &schema);
    }
    uint8_t *buf = rc == MV_OK ? malloc((size_t)page_size) : NULL;
    if (rc == MV_OK && buf == NULL) {
        rc = store_fail(c->s, MV_ENOMEM, "out of memory");
    }
    if (rc == MV_OK) {
        rc = ops_check_main_pages(c, (uint32_t)page_size, buf);
    }
    if (rc == MV_OK) {
        rc = ops_check_wal_frames(c, (uint32_t)page_size, buf);
    }
    crypt_free_wiped(buf);
    store_rollback(c->s);
    return rc;
}

/* Findings kept until it is known whether they stand (ops_check_integrity). */
struct ops_findings {
    struct ops_finding {
        int code; /* as for ops_check_stop */
        char *detail;
    } * items;
    size_t count, cap;
    int unreadable; /* a page SQLite could not get, with no cause given */
    int oom;        /* a finding could not be kept */
};

static void ops_findings_clear(struct ops_findings *f)
{
    for (size_t i = 0; i < f->count; i++) {
        free(f->items[i].detail);
    }
    free(f->items);
    memset(f, 0, sizeof *f);
}

static void ops_findings_add(struct ops_findings *f, int code, const char *detail)
{
    if (f->count == f->cap) {
        size_t cap = f->cap != 0 ? f->cap * 2 : 8;
        struct ops_finding *items = realloc(f->items, cap * sizeof *items);
        if (items == NULL) {
            f->oom = 1;
            return;
        }
        f->items = items;
        f->cap = cap;
    }
    char *copy = strdup(detail);
    if (copy == NULL) {
        f->oom = 1;
        return;
    }
    f->items[f->count].code = code;
    f->items[f->count].detail = copy;
    f->count++;
    /* SQLite's words for a page it could not get (checkList, checkPtrmap): no error code */
    f->unreadable |= code == MV_ECORRUPT && (strstr(detail, "failed to get page") != NULL ||
                                             strstr(detail, "Failed to read ptrmap") != NULL);
}

/* A finding or a stop: reported at once (keep NULL), or kept in keep. */
static void ops_check_emit(
    struct ops_check *c, struct ops_findings *keep, int code, const char *what, const char *detail)
{
    if (keep == NULL) {
        ops_check_stop(c, code, what, detail);
    } else {
        ops_findings_add(keep, code, detail);
    }
}

/* Runs sql and reports each row's first column as a problem of kind what (or keeps it in
 * keep, if not NULL). A statement that cannot run is itself a problem (a damaged page stops
 * integrity_check). */
static void ops_check_rows(
    struct ops_check *c, const char *what, const char *sql, int skip_ok, struct ops_findings *keep)
{
    sqlite3_stmt *st = NULL;
    store_enter(c->s);
    char detail[512];
    if (sqlite3_prepare_v2(c->s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        snprintf(detail, sizeof detail, "cannot run the check: %s", ops_vfs_detail(c->s));
        ops_check_emit(c, keep, mv_error_from_sqlite(sqlite3_extended_errcode(c->s->db)), what,
                       detail);
        return;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int oom = 0;
        const char *text = mv_db_column_text(st, 0, &oom);
        if (oom) { /* a finding read as no finding would pass a damaged store */
            ops_check_emit(c, keep, MV_ENOMEM, what, "out of memory reading a finding");
        } else if (text != NULL && !(skip_ok && strcmp(text, "ok") == 0)) {
            /* integrity_check's "unable to get the page. error code=7": memory, not data */
            ops_check_emit(c, keep, ops_io_check_finding(text), what, text);
        }
    }
    if (rc != SQLITE_DONE) {
        snprintf(detail, sizeof detail, "the check stopped: %s", ops_vfs_detail(c->s));
        ops_check_emit(c, keep, mv_error_from_sqlite(sqlite3_extended_errcode(c->s->db)), what,
                       detail);
    }
    sqlite3_finalize(st);
}

/* PRAGMA integrity_check. SQLite words a page it could not get as a finding with no cause
 * ("On tree page 77 cell 0: failed to get page 68", then every page below it "is never
 * used"), whether the page is damaged, the device failed the read (counted by the VFS:
 * mv_store_check then returns MV_EIO) or an allocation of the page cache failed. So a run
 * with such a finding and no failed read runs once more, and the findings that stand are
 * the second run's: a damaged page fails again, memory that was short a moment ago does
 * not. A sound store runs the check once; a damaged one of that kind twice. */
static void ops_check_integrity(struct ops_check *c)
{
    static const char what[] = "integrity", sql[] = "PRAGMA integrity_check(1000)";
    struct ops_findings f = {0};
    uint64_t read_errors = mv_db_read_errors(c->s->db);
    ops_check_rows(c, what, sql, 1, &f);
    if (f.unreadable && !f.oom && mv_db_read_errors(c->s->db) == read_errors) {
        ops_findings_clear(&f);
        ops_check_rows(c, what, sql, 1, &f);
    }
    for (size_t i = 0; i < f.count; i++) {
        ops_check_stop(c, f.items[i].code, what, f.items[i].detail);
    }
    if (f.oom) {
        ops_check_stop(c, MV_ENOMEM, what, "out of memory keeping its findings");
    }
    ops_findings_clear(&f);
}

static const struct {
    const char *what;
    const char *sql;
} ops_invariants[] = {
    {"foreign key", "SELECT 'table ' || \"table\" || ' row ' || rowid || ' refers to a missing "
                    "row of ' || parent FROM pragma_foreign_key_check"},
    /* with the references expunges dropped and the purge has yet to take off */
    {"refcount",
     "SELECT 'body ' || b.id || ' has refcount ' || b.refcount || ' but ' || "
     "(SELECT count(*) FROM messages m WHERE m.body_id = b.id) || ' messages use it' "
     "|| ' and ' || " STORE_PURGE_UNREF_OF(
         "b.id") " || ' references wait' "
                 "FROM body_refs b WHERE b.refcount != "
                 "(SELECT count(*) FROM messages m WHERE m.body_id = b.id) + " STORE_PURGE_UNREF_OF(
                     "b.id")},
    /* the count's own row (schema version 12; no foreign key: store_schema.c) */
    {"refcount", "SELECT 'body ' || id || ' has no reference count' FROM bodies "
                 "WHERE id NOT IN (SELECT id FROM body_refs)"},
    {"refcount", "SELECT 'reference count ' || id || ' belongs to no body' FROM body_refs "
                 "WHERE id NOT IN (SELECT id FROM bodies)"},
    {"refcount", "SELECT 'attachment ' || a.id || ' has refcount ' || a.refcount || ' but ' || "
                 "(SELECT count(*) FROM body_parts p WHERE p.attachment_id = a.id) || "
                 "' body parts use it' FROM attachments a WHERE a.refcount != "
                 "(SELECT count(*) FROM body_parts p WHERE p.attachment_id = a.id)"},
    {"refcount", "SELECT 'attachment ' || id || ' has refcount 0 but was not removed' "
                 "FROM attachments WHERE refcount = 0"},
    {"mailbox", "SELECT 'message ' || id || ' (uid ' || uid || ') is in mailbox id ' || "
                "mailbox_id || ', which does not exist' FROM messages "
                "WHERE mailbox_id NOT IN (SELECT id FROM mailboxes)"},
    {"uidnext", "SELECT 'mailbox ' || quote(x.name) || ' has uidnext ' || x.uidnext || "
                "' but holds uid ' || m.top FROM mailboxes x JOIN (SELECT mailbox_id, "
                "max(uid) AS top FROM messages GROUP BY mailbox_id) m ON m.mailbox_id = x.id "
                "WHERE x.uidnext <= m.top"},
    {"modseq", "SELECT 'mailbox ' || quote(x.name) || ' has highestmodseq ' || "
               "x.highestmodseq || ' but a message has modseq ' || m.top FROM mailboxes x JOIN "
               "(SELECT mailbox_id, max(modseq) AS top FROM messages GROUP BY mailbox_id) m "
               "ON m.mailbox_id = x.id WHERE x.highestmodseq < m.top"},
    {"counters", "SELECT 'mailbox ' || quote(x.name) || ' counts ' || x.message_count || '/' || "
                 "x.unseen_count || '/' || x.size_sum || ' (messages/unseen/bytes) but holds ' || "
                 "coalesce(m.n, 0) || '/' || coalesce(m.u, 0) || '/' || coalesce(m.b, 0) "
                 "FROM mailboxes x LEFT JOIN (SELECT mailbox_id, count(*) AS n, "
                 "sum((flags & 1) = 0) AS u, sum(size) AS b FROM messages GROUP BY mailbox_id) m "
                 "ON m.mailbox_id = x.id WHERE x.message_count != coalesce(m.n, 0) OR "
                 "x.unseen_count != coalesce(m.u, 0) OR x.size_sum != coalesce(m.b, 0)"},
    {"uid", "SELECT 'message ' || id || ' has uid ' || uid || ', modseq ' || modseq "
            "FROM messages WHERE uid < 1 OR modseq < 1"},
    /* every keyword a message carries is one its mailbox defines (schema version 13): what
     * a copy or move relies on (store_keyword_registry.c) */
    {"keywords", STORE_KEYWORD_WORDS_OF_MESSAGES
     "SELECT DISTINCT 'mailbox ' || quote(x.name) || ' does not define the keyword ' || "
     "quote(w.word) || ', which a message carries' FROM words w JOIN mailboxes x ON x.id = "
     "w.mailbox_id WHERE w.word != '' AND NOT EXISTS (SELECT 1 FROM mailbox_keywords k WHERE "
     "k.mailbox_id = w.mailbox_id AND k.name = w.word)"},
    {"fts", "SELECT 'full-text row ' || rowid || ' belongs to no body' FROM fts "
            "WHERE rowid NOT IN (SELECT id FROM bodies)"},
    /* memos go with their body (a trigger, schema version 14): one left over would describe
     * the next body given its id */
    {"memos", "SELECT 'memo ' || (id % 4) || ' of body ' || (id / 4) || ' belongs to no body' "
              "FROM body_memos WHERE id / 4 NOT IN (SELECT id FROM bodies)"},
    /* mailbox memos go with their mailbox (a trigger, schema version 16) and are written for
     * its UIDVALIDITY: one whose mailbox is gone, or has another, is no one's */
    {"memos", "SELECT 'memo ' || (d.id % 4) || ' of mailbox ' || (d.id / 4) || ' belongs to no "
              "mailbox' FROM mailbox_memos d WHERE NOT EXISTS (SELECT 1 FROM mailboxes x WHERE "
              "x.id = d.id / 4 AND x.uidvalidity = d.uidvalidity)"},
    {"headers", "SELECT 'body ' || id || ' (used by ' || refcount || ' messages) has no "
                "header fields row' FROM body_refs WHERE refcount > 0 "
                "AND id NOT IN (SELECT body_id FROM body_headers)"},
    {"bytes", "SELECT 'body ' || id || ' has no bytes' FROM bodies "
              "WHERE id NOT IN (SELECT id FROM bodies_data)"},
    {"bytes", "SELECT 'attachment ' || id || ' has no bytes' FROM attachments "
              "WHERE id NOT IN (SELECT id FROM attachments_data)"},
    {"header", "SELECT 'body ' || id || ' records a header of ' || header_stored || "
               "' stored bytes in ' || stored_size FROM bodies "
               "WHERE header_stored < 0 OR header_stored > stored_size"},
    {"header", "SELECT 'body ' || b.id || ' keeps a copy of its header unit that is not its "
               "stored header' FROM bodies b LEFT JOIN bodies_data d ON d.id = b.id "
               "WHERE b.head IS NOT NULL AND b.head IS NOT substr(d.data, 1, b.header_stored)"},
};

/* Every body reassembled and compared with its recorded size and SHA-256 (store_body_get),
 * inside the invariants' read transaction: a read for a client skips the SHA-256 when the
 * cipher authenticates the pages (docs/SCHEMA.md, "Reading a body back"), so this is where
 * a body whose rows do not add up to the message that was delivered is found. */
static void ops_check_bodies(struct ops_check *c)
{
    sqlite3_stmt *st = NULL;
    store_enter(c->s);
    char detail[512];
    if (sqlite3_prepare_v2(c->s->db, "SELECT id FROM bodies ORDER BY id", -1, &st, NULL) !=
        SQLITE_OK) {
        snprintf(detail, sizeof detail, "cannot run the check: %s", ops_vfs_detail(c->s));
        ops_check_stop(c, mv_error_from_sqlite(sqlite3_extended_errcode(c->s->db)), "body", detail);
        return;
    }
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        uint8_t *raw = NULL;
        size_t len = 0;
        int rc = store_body_get(c->s, id, &raw, &len);
        crypt_free_wiped(raw);
        if (rc != MV_OK) {
            snprintf(detail, sizeof detail, "body %lld: %.400s", (long long)id, c->s->errmsg);
            ops_check_stop(c, rc, "body", detail);
        }
    }
    if (step != SQLITE_DONE) {
        snprintf(detail, sizeof detail, "the check stopped: %s", ops_vfs_detail(c->s));
        ops_check_stop(c, mv_error_from_sqlite(sqlite3_extended_errcode(c->s->db)), "body", detail);
    }
    sqlite3_finalize(st);
}

/* The line counts an attachment carries (schema version 15) are its bytes': a wrong count
 * would make a FETCH BODYSTRUCTURE from the skeleton (mv_message_skeleton_keyed) describe
 * the part wrongly. Each attachment read once, counted again. */
static void ops_check_part_counts(struct ops_check *c)
{
    sqlite3_stmt *st = NULL;
    char detail[512];
    if (sqlite3_prepare_v2(c->s->db, STORE_ATTACHMENTS_COUNTED, -1, &st, NULL) != SQLITE_OK) {
        snprintf(detail, sizeof detail, "cannot run the check: %s", ops_vfs_detail(c->s));
        ops_check_stop(c, mv_error_from_sqlite(sqlite3_extended_errcode(c->s->db)), "counts",
                       detail);
        return;
    }
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        uint64_t lines = 0, marks = 0;
        int differ = 0;
        int rc = store_attachment_recount(c->s, id, &lines, &marks, &differ);
        if (rc != MV_OK) {
            snprintf(detail, sizeof detail, "%.400s", c->s->errmsg);
            ops_check_stop(c, rc, "counts", detail);
        } else if (differ) {
            ops_problem(c, "counts",
                        "attachment %lld records other line counts than its bytes have (%llu "
                        "lines, %llu marks; a repair counts them again)",
                        (long long)id, (unsigned long long)lines, (unsigned long long)marks);
        }
    }
    if (step != SQLITE_DONE) {
        snprintf(detail, sizeof detail, "the check stopped: %s", ops_vfs_detail(c->s));
        ops_check_stop(c, mv_error_from_sqlite(sqlite3_extended_errcode(c->s->db)), "counts",
                       detail);
    }
    sqlite3_finalize(st);
}

/* Every body has its full-text row: in fts, or, while the version 8 index's rows move
 * (store_fts_move.c), in the old index above the move's cursor, not yet moved. */
static void ops_check_fts_moving(struct ops_check *c)
{
    int old = 0;
    int rc = store_fts_old_exists(c->s, &old);
    if (rc != MV_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "cannot look for the old full-text index: %.400s",
                 c->s->errmsg);
        ops_check_stop(c, rc, "fts", detail);
        return;
    }
    /* a body of the full-text backlog has its row built later (store_fts_backlog.c); one
     * the catch-up set aside is named with its reason below */
    ops_check_rows(c, "fts",
                   old ? "SELECT 'body ' || id || ' has no full-text row' FROM bodies "
                         "WHERE id NOT IN (SELECT rowid FROM fts) AND id NOT IN (SELECT rowid "
                         "FROM " STORE_FTS_OLD " WHERE rowid > (SELECT value FROM meta WHERE "
                         "key = '" STORE_FTS_MOVED_KEY
                         "')) AND id NOT IN (SELECT id FROM " STORE_FTS_BACKLOG_IDS
                         ") AND id NOT IN (SELECT id FROM " STORE_FTS_ASIDE_ROWS ")"
                       : "SELECT 'body ' || id || ' has no full-text row' FROM bodies "
                         "WHERE id NOT IN (SELECT rowid FROM fts) AND id NOT IN (SELECT id "
                         "FROM " STORE_FTS_BACKLOG_IDS
                         ") AND id NOT IN (SELECT id FROM " STORE_FTS_ASIDE_ROWS ")",
                   0, NULL);
    ops_check_rows(c, "fts",
                   "SELECT 'body ' || a.id || ' was set aside by the full-text catch-up and has "
                   "no full-text row (searches do not find it; mailvault repair indexes it once "
                   "its bytes read again): ' || a.why FROM " STORE_FTS_ASIDE_ROWS
                   " a WHERE a.id IN (SELECT id FROM bodies) AND a.id NOT IN (SELECT rowid "
                   "FROM fts)",
                   0, NULL);
    if (old) {
        ops_check_rows(
            c, "fts",
            "SELECT 'old full-text row ' || rowid || ' belongs to no body' FROM " STORE_FTS_OLD
            " WHERE rowid > (SELECT value FROM meta WHERE key = '" STORE_FTS_MOVED_KEY
            "') AND rowid NOT IN (SELECT id FROM bodies)",
            0, NULL);
    }
}

/* An index that statements name (store_named_indexes) and the store lost: every read or
 * change that names it fails until mv_store_repair() makes it again. */
static void ops_check_named_indexes(struct ops_check *c)
{
    for (size_t i = 0; i < store_named_index_count; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT 'index %s is missing: the statements that name it fail; a repair "
                 "makes it again' WHERE NOT EXISTS (SELECT 1 FROM sqlite_schema WHERE type = "
                 "'index' AND name = '%s')",
                 store_named_indexes[i].name, store_named_indexes[i].name);
        ops_check_rows(c, "index", sql, 0, NULL);
    }
}

static void ops_check_invariants(struct ops_check *c)
{
    int rc = store_exec(c->s, "BEGIN");
    if (rc != MV_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "cannot begin a read: %.400s", c->s->errmsg);
        ops_check_stop(c, rc, "invariants", detail);
        return;
    }
    ops_check_named_indexes(c);
    for (size_t i = 0; i < sizeof ops_invariants / sizeof ops_invariants[0]; i++) {
        ops_check_rows(c, ops_invariants[i].what, ops_invariants[i].sql, 0, NULL);
    }
    ops_check_fts_moving(c);
    ops_check_bodies(c);
    ops_check_part_counts(c);
    store_rollback(c->s);
}

static void ops_check_fts_index(struct ops_check *c)
{
    if (c->s->readonly) {
        return;
    }
    store_enter(c->s);
    if (sqlite3_exec(c->s->db, "INSERT INTO fts(fts) VALUES('integrity-check')", NULL, NULL,
                     NULL) != SQLITE_OK) {
        char detail[512];
        int code = mv_error_from_sqlite(sqlite3_extended_errcode(c->s->db));
        snprintf(detail, sizeof detail, "%s: %s",
                 code == MV_ECORRUPT ? "the full-text index does not match its content"
                                     : "cannot check the full-text index",
                 sqlite3_errmsg(c->s->db));
        ops_check_stop(c, code, "fts", detail);
    }
}

int mv_store_check(mv_store *s,
                   mv_problem_fn problem,
                   void *problem_arg,
                   struct mv_check_report *out)
{
    if (s == NULL || out == NULL) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_store_check: no report") : MV_EINVAL;
    }
    memset(out, 0, sizeof *out);
    struct ops_check c = {s, problem, problem_arg, out, MV_OK, ""};
    int rc = store_ready(s); /* not through a connection an I/O error left behind */
    uint64_t read_errors = rc == MV_OK ? mv_db_read_errors(s->db) : 0;
    if (rc == MV_OK) {
        rc = ops_check_pages(&c);
    }
    if (rc != MV_OK) {
        return rc;
    }
    ops_check_integrity(&c);
    ops_check_invariants(&c);
    ops_check_fts_index(&c);
    if (c.stopped != MV_OK) {
        return store_fail(s, c.stopped, "the check could not finish (%s)%s", c.stopped_why,
                          out->problems > 0 ? "; it found problems before" : "");
    }
    if (out->problems > 0 && mv_db_read_errors(s->db) != read_errors) {
        /* a page SQLite could not get is a finding with no cause ("failed to get page 45"):
         * with the device failing reads, the problems are not evidence of damage */
        const char *vfs = mv_db_vfs_errmsg(s->db);
        return store_fail(s, MV_EIO,
                          "%u problem%s found while the disk failed reads (%s): they may be the "
                          "disk's, not damage in the data",
                          out->problems, out->problems == 1 ? "" : "s",
                          vfs != NULL ? vfs : "a read of the store failed");
    }
    if (out->problems > 0) {
        return store_fail(s, MV_ECORRUPT, "%u problem%s found", out->problems,
                          out->problems == 1 ? "" : "s");
    }
    s->errmsg[0] = '\0';
    return MV_OK;
}
