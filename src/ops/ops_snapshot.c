/*
 * ops_snapshot.c -- a keyed copy of a store's database, and the check of such a copy (and
 * the keyed open that check and the swap of ops_passwd.c share).
 *
 * WHY VACUUM INTO (and not the sqlite3_backup API)
 *   - It copies from one read transaction: in WAL mode writers go on committing while it
 *     runs, and the copy is exactly the database as of the transaction's start. The backup
 *     API restarts whenever another connection writes, so under steady deliveries it may
 *     never finish (or must hold the read transaction anyway, with step(-1)).
 *   - It writes the target through the VFS as a new database: keyed by the URI parameters
 *     of the target (cipher, kdf_iter, hexkey), so the copy gets a new salt, a new key if
 *     asked, and a new cipher if its reserve bytes fit. The backup API copies pages byte for
 *     byte, reserve area included, so it can neither change the cipher's reserve bytes nor
 *     re-key.
 *   - It compacts: free pages are not copied.
 *   VACUUM takes the target's reserve bytes from the source's *requested* reserve, so for a
 *   cipher that needs more (aes256cbc 0 -> chacha20 32) the source's request is raised
 *   first with SQLITE_FCNTL_RESERVE_BYTES (which changes nothing in the source's file).
 *   The output is in rollback-journal mode; ops_snapshot_verify() switches a copy that is to
 *   become a store to WAL mode.
 *
 * SECRETS
 *   The password reaches SQLite hex-encoded in the target's URI, bound as a parameter of
 *   "VACUUM INTO ?1" (so it is not in the statement's SQL text). Our URI buffer is wiped
 *   after the statement is finalized; SQLite's internal copies (the ATTACH it runs, the
 *   pager's file name) are freed by SQLite when the statement ends, without wiping.
 *
 * LIMITATIONS
 *   Needs an SQLite built with URI file names on (SQLITE_USE_URI, as Debian's is): the
 *   ATTACH that VACUUM INTO runs takes no open flags from us. Without it the target would be
 *   a file named after the URI, key included, so the copy refuses to start
 *   (MV_EUNSUPPORTED).
 */
#include "crypto/crypt.h"
#include "ops/ops_backup.h"
#include "ops/ops_inspect.h"
#include "vfs/db_column.h"
#include "vfs/db_error.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OPS_PROGRESS_OPCODES 2000 /* VDBE instructions between progress callbacks */

static int ops_snapshot_progress_cb(void *arg)
{
    struct ops_progress *p = arg;
    struct stat st;
    if (p->fn != NULL && p->fd >= 0 && fstat(p->fd, &st) == 0) {
        ops_io_progress(p, (uint64_t)st.st_size, 0);
    }
    return 0;
}

/* Appends text to the URI buffer, percent-encoding what a URI path must not hold raw. */
static size_t ops_uri_path(char *out, size_t pos, const char *path)
{
    static const char digits[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)path; *p != '\0'; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("/._-~@+", *p) != NULL;
        if (plain) {
            out[pos++] = (char)*p;
        } else {
            out[pos++] = '%';
            out[pos++] = digits[*p >> 4];
            out[pos++] = digits[*p & 15];
        }
    }
    return pos;
}

/* "file:<path>?cipher=<name>[&kdf_iter=<n>]&hexkey=<hex>", malloc'd, wiped by the caller. */
static char *ops_snapshot_uri(const char *path,
                              const void *password,
                              size_t password_len,
                              mv_cipher cipher,
                              uint32_t kdf_iter,
                              size_t *size_out)
{
    static const char digits[] = "0123456789abcdef";
    size_t size = 5 + 3 * strlen(path) + 64 + 2 * password_len + 1;
    char *uri = malloc(size);
    if (uri == NULL) {
        return NULL;
    }
    size_t pos = 0;
    memcpy(uri, "file:", 5);
    pos = ops_uri_path(uri, 5, path);
    int n = kdf_iter != 0
                ? snprintf(uri + pos, size - pos,
                           "?cipher=%s&kdf_iter=%u&hexkey=", mv_cipher_name(cipher), kdf_iter)
                : snprintf(uri + pos, size - pos, "?cipher=%s&hexkey=", mv_cipher_name(cipher));
    pos += (size_t)n;
    const uint8_t *pw = password;
    for (size_t i = 0; i < password_len; i++) {
        uri[pos++] = digits[pw[i] >> 4];
        uri[pos++] = digits[pw[i] & 15];
    }
    uri[pos] = '\0';
    *size_out = size;
    return uri;
}

/* Raises src's requested reserve bytes to what cipher needs; refuses a cipher needing fewer
 * (VACUUM cannot lower them, and the reserve byte is how a file's cipher is recognised). */
static int ops_snapshot_reserve(sqlite3 *src, mv_cipher cipher, char *errmsg, size_t errmsg_size)
{
    int want = (int)crypt_reserve_bytes((int)cipher);
    int current = -1; /* -1: read without changing */
    (void)sqlite3_file_control(src, "main", SQLITE_FCNTL_RESERVE_BYTES, &current);
    struct mv_db_info info;
    if (mv_db_info(src, &info) != MV_OK) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the source is not a mailvault file");
    }
    if (info.reserve_bytes > want) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL,
                           "cannot convert a %s store to %s (it reserves %d bytes per page, %s "
                           "uses %d)",
                           mv_cipher_name(info.cipher), mv_cipher_name(cipher), info.reserve_bytes,
                           mv_cipher_name(cipher), want);
    }
    if (want > current) {
        (void)sqlite3_file_control(src, "main", SQLITE_FCNTL_RESERVE_BYTES, &want);
    }
    return MV_OK;
}

/* Runs VACUUM INTO uri on src with progress callbacks on fd's size. */
static int ops_snapshot_vacuum(
    sqlite3 *src, const char *uri, struct ops_progress *progress, char *errmsg, size_t errmsg_size)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(src, "VACUUM INTO ?1", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_bind_text(st, 1, uri, -1, SQLITE_STATIC);
    }
    if (rc == SQLITE_OK) {
        sqlite3_progress_handler(src, OPS_PROGRESS_OPCODES, ops_snapshot_progress_cb, progress);
        rc = sqlite3_step(st);
        sqlite3_progress_handler(src, 0, NULL, NULL);
        rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
    }
    if (rc != SQLITE_OK) {
        const char *vfs = mv_db_vfs_errmsg(src);
        int code = mv_error_from_sqlite(sqlite3_extended_errcode(src));
        ops_io_fail(errmsg, errmsg_size, code == MV_OK ? MV_ERROR : code, "VACUUM INTO failed: %s",
                    vfs != NULL ? vfs : sqlite3_errmsg(src));
        rc = code == MV_OK ? MV_ERROR : code;
    }
    sqlite3_finalize(st); /* before the caller wipes uri: the statement points at it */
    return rc == SQLITE_OK ? MV_OK : rc;
}

int ops_snapshot_write(sqlite3 *src,
                       const char *path,
                       const void *password,
                       size_t password_len,
                       mv_cipher cipher,
                       uint32_t kdf_iter,
                       const struct mv_ops_options *opts,
                       char *errmsg,
                       size_t errmsg_size)
{
    if (!sqlite3_compileoption_used("USE_URI")) {
        return ops_io_fail(errmsg, errmsg_size, MV_EUNSUPPORTED,
                           "this SQLite was built without URI file names (SQLITE_USE_URI), "
                           "which a keyed copy needs");
    }
    struct mv_db_info info;
    if (mv_db_info(src, &info) != MV_OK) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the source is not a mailvault file");
    }
    mv_cipher target = cipher == MV_CIPHER_AUTO ? info.cipher : cipher;
    if (target != MV_CIPHER_CHACHA20 && target != MV_CIPHER_AES256CBC &&
        target != MV_CIPHER_SQLCIPHER) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the copy needs a cipher");
    }
    int rc = ops_snapshot_reserve(src, target, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "cannot create %s: %s",
                           path, strerror(errno));
    }
    size_t uri_size = 0;
    char *uri = ops_snapshot_uri(path, password, password_len, target, kdf_iter, &uri_size);
    struct ops_progress progress = {NULL, NULL, "copy", 0, fd, 0};
    if (opts != NULL) {
        progress.fn = opts->progress;
        progress.arg = opts->progress_arg;
    }
    sqlite3_int64 pages = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(src, "PRAGMA page_count", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        pages = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    progress.total = (uint64_t)pages * (uint64_t)info.page_size;
    rc = uri == NULL ? ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "out of memory")
                     : ops_snapshot_vacuum(src, uri, &progress, errmsg, errmsg_size);
    if (uri != NULL) {
        OPENSSL_cleanse(uri, uri_size);
        free(uri);
    }
    if (rc == MV_OK && ops_io_size(path) == 0) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_EIO, "VACUUM INTO wrote nothing to %s", path);
    }
    if (rc == MV_OK && fsync(fd) != 0) {
        rc = ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "cannot fsync %s: %s", path,
                         strerror(errno));
    }
    close(fd);
    if (rc != MV_OK) {
        ops_io_remove_db(path);
        return rc;
    }
    struct stat done;
    ops_io_progress(&progress, stat(path, &done) == 0 ? (uint64_t)done.st_size : 0, 1);
    return MV_OK;
}

static int ops_query_u64(sqlite3 *db, const char *sql, int column, uint64_t *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            sqlite3_int64 v = sqlite3_column_int64(st, column);
            *out = v > 0 ? (uint64_t)v : 0;
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

int ops_state_read(sqlite3 *db, struct ops_state *out, char *errmsg, size_t errmsg_size)
{
    memset(out, 0, sizeof *out);
    uint64_t mailboxes = 0, schema = 0, page_size = 0;
    /* The read transaction must end whatever fails: a store handle's next BEGIN IMMEDIATE,
     * or the copy's VACUUM INTO ("cannot VACUUM from within a transaction"), fails inside
     * one left open. So its COMMIT is made before it begins (running a made statement needs
     * no allocation that a failed one could leave half done; the allocation-failure test:
     * sqlite3_exec's COMMIT ran out of memory and left it open). */
    sqlite3_stmt *commit = NULL;
    int rc = sqlite3_prepare_v2(db, "COMMIT", -1, &commit, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK) {
        rc = ops_query_u64(db, "SELECT count(*) FROM messages", 0, &out->messages);
    }
    if (rc == SQLITE_OK) {
        rc = ops_query_u64(db, "SELECT count(*) FROM mailboxes", 0, &mailboxes);
    }
    if (rc == SQLITE_OK) {
        rc = ops_query_u64(db, "SELECT coalesce(max(highestmodseq), 0) FROM mailboxes", 0,
                           &out->highestmodseq);
    }
    if (rc == SQLITE_OK) {
        rc = ops_query_u64(db, "SELECT coalesce(sum(uidnext), 0) FROM mailboxes", 0,
                           &out->uidnext_sum);
    }
    if (rc == SQLITE_OK) {
        rc = ops_query_u64(db, "PRAGMA page_count", 0, &out->page_count);
    }
    if (rc == SQLITE_OK) {
        rc = ops_query_u64(db, "PRAGMA page_size", 0, &page_size);
    }
    if (rc == SQLITE_OK) {
        rc = ops_query_u64(db, "PRAGMA user_version", 0, &schema);
    }
    int failed_rc = rc;
    char detail[256];
    snprintf(detail, sizeof detail, "%s", sqlite3_errmsg(db));
    if (!sqlite3_get_autocommit(db)) {
        int end_rc = sqlite3_step(commit);
        end_rc = end_rc == SQLITE_DONE ? SQLITE_OK : end_rc;
        if (failed_rc == SQLITE_OK && end_rc != SQLITE_OK) {
            failed_rc = end_rc;
            snprintf(detail, sizeof detail, "%s", sqlite3_errmsg(db));
        }
    }
    sqlite3_finalize(commit);
    if (failed_rc != SQLITE_OK) {
        int code = mv_error_from_sqlite(failed_rc);
        return ops_io_fail(errmsg, errmsg_size, code == MV_OK ? MV_ERROR : code,
                           "cannot read the store's state: %s", detail);
    }
    out->mailboxes = (uint32_t)mailboxes;
    out->page_size = (uint32_t)page_size;
    out->schema_version = (int)schema;
    struct mv_db_info info;
    out->cipher = mv_db_info(db, &info) == MV_OK ? info.cipher : MV_CIPHER_AUTO;
    return MV_OK;
}

int ops_state_same_mail(const struct ops_state *a, const struct ops_state *b)
{
    return a->messages == b->messages && a->mailboxes == b->mailboxes &&
           a->highestmodseq == b->highestmodseq && a->uidnext_sum == b->uidnext_sum &&
           a->schema_version == b->schema_version;
}

/* PRAGMA quick_check: MV_OK if its one row is "ok". */
static int ops_quick_check(sqlite3 *db, char *errmsg, size_t errmsg_size)
{
    sqlite3_stmt *st = NULL;
    uint64_t read_errors = mv_db_read_errors(db);
    int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL);
    char first[200] = "";
    int rows = 0, oom = 0;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *text = mv_db_column_text(st, 0, &oom);
        if (rows++ == 0) {
            snprintf(first, sizeof first, "%s", text != NULL ? text : "");
        }
        rc = SQLITE_OK;
    }
    int step_rc = rc;
    sqlite3_finalize(st);
    if (oom) { /* a finding not read: neither "ok" nor damage */
        return ops_io_fail(errmsg, errmsg_size, MV_ENOMEM,
                           "quick_check: out of memory reading its findings");
    }
    char cause[512];
    if (step_rc != SQLITE_DONE) {
        int code = mv_db_error_cause(db, sqlite3_extended_errcode(db), cause, sizeof cause);
        return ops_io_fail(errmsg, errmsg_size, code, "quick_check could not run: %s", cause);
    }
    if (rows == 1 && strcmp(first, "ok") == 0) {
        return MV_OK;
    }
    /* A page SQLite could not get is a finding (ops_io_check_finding), after a "*** in
     * database main ***" line: a read error or a failed allocation is not damage in the
     * data. Name the I/O error (the VFS recorded the system's reason), one line. */
    int kind = ops_io_check_finding(first);
    if (kind != MV_ENOMEM && mv_db_read_errors(db) != read_errors) {
        kind = MV_EIO; /* "failed to get page N" and the like: the device, not the data */
    }
    if (kind == MV_ECORRUPT && ops_io_check_clean_again(db)) {
        return MV_OK; /* a page it could not get for a moment (ops_io_check_clean_again) */
    }
    if (kind == MV_ENOMEM) {
        return ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "quick_check ran out of memory");
    }
    if (kind == MV_EIO) {
        const char *vfs = mv_db_vfs_errmsg(db);
        return ops_io_fail(errmsg, errmsg_size, MV_EIO, "cannot read the copy: %s",
                           vfs != NULL ? vfs : sqlite3_errstr(SQLITE_IOERR));
    }
    const char *text = first;
    static const char prefix[] = "*** in database main ***";
    if (strncmp(text, prefix, sizeof prefix - 1) == 0) {
        text += sizeof prefix - 1;
    }
    while (*text == '\n' || *text == ' ') {
        text++;
    }
    snprintf(cause, sizeof cause, "%s", text);
    for (char *p = cause; *p != '\0'; p++) {
        if (*p == '\n' || *p == '\r') {
            *p = ' '; /* one line */
        }
    }
    return ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT, "quick_check found problems: %s%s", cause,
                       rows > 1 ? " (and more)" : "");
}

/* Switches db to WAL mode (the store's profile); closing it then leaves no -wal behind. */
static int ops_snapshot_make_wal(sqlite3 *db, char *errmsg, size_t errmsg_size)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
    }
    int oom = 0;
    const char *mode = rc == SQLITE_ROW ? mv_db_column_text(st, 0, &oom) : NULL;
    int wal = mode != NULL && strcmp(mode, "wal") == 0;
    if (wal) {
        /* The row comes before the header's write commits: the commit runs when the
         * statement ends, and its failure is only known from this step. Taken as done, a
         * commit torn by a failing disk left the copy's page 1 half written and its journal
         * hot, and the copy was renamed over the store (neither password opened it). */
        rc = sqlite3_step(st);
        if (rc == SQLITE_DONE) {
            sqlite3_finalize(st);
            return MV_OK;
        }
    }
    /* what stopped it: memory, the disk, a lock (not an I/O error whatever it was: a
     * password change under a failed allocation said MV_EIO) */
    char cause[512];
    int code = MV_EIO;
    if (oom) {
        code = MV_ENOMEM;
        snprintf(cause, sizeof cause, "out of memory");
    } else if (rc != SQLITE_ROW || wal) {
        code = mv_db_error_cause(db, sqlite3_extended_errcode(db), cause, sizeof cause);
    } else {
        snprintf(cause, sizeof cause, "its journal mode stayed %s", mode != NULL ? mode : "unset");
    }
    sqlite3_finalize(st);
    return ops_io_fail(errmsg, errmsg_size, code, "cannot switch the copy to WAL mode: %s", cause);
}

int ops_snapshot_open(const char *path,
                      const void *password,
                      size_t password_len,
                      uint32_t kdf_iter,
                      unsigned flags,
                      const char *label,
                      sqlite3 **db_out,
                      char *errmsg,
                      size_t errmsg_size)
{
    struct mv_db_options dbo = MV_DB_OPTIONS_INIT;
    dbo.kdf_iter = kdf_iter;
    dbo.flags = flags;
    dbo.busy_timeout_ms = OPS_BUSY_TIMEOUT_MS; /* from the first read on */
    char *err = NULL;
    int rc = mv_db_open(path, password, password_len, &dbo, db_out, &err);
    if (rc != MV_OK) {
        ops_io_fail(errmsg, errmsg_size, rc, "%s%s%s", label != NULL ? label : "",
                    label != NULL ? ": " : "", err != NULL ? err : mv_strerror(rc));
        sqlite3_free(err);
        return rc;
    }
    return MV_OK;
}

int ops_snapshot_verify(const char *path,
                        const void *password,
                        size_t password_len,
                        uint32_t kdf_iter,
                        int make_wal,
                        const struct mv_ops_options *opts,
                        struct ops_state *out,
                        char *errmsg,
                        size_t errmsg_size)
{
    if (opts != NULL) {
        struct ops_progress verify = {opts->progress, opts->progress_arg, "verify", 0, -1, 0};
        ops_io_progress(&verify, 0, 1);
    }
    sqlite3 *db = NULL;
    int rc = ops_snapshot_open(path, password, password_len, kdf_iter,
                               make_wal ? 0 : MV_DB_READONLY, path, &db, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    rc = ops_quick_check(db, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = ops_state_read(db, out, errmsg, errmsg_size);
    }
    if (rc == MV_OK && make_wal) {
        rc = ops_snapshot_make_wal(db, errmsg, errmsg_size);
    }
    if (sqlite3_close(db) != SQLITE_OK && rc == MV_OK) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_EIO, "cannot close %s", path);
    }
    char wal[MV_PATH_MAX + 8], journal[MV_PATH_MAX + 12];
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(journal, sizeof journal, "%s-journal", path);
    if (rc == MV_OK && make_wal && ops_io_size(wal) > 0) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_EIO, "%s was not checkpointed on close", wal);
    }
    if (rc == MV_OK && make_wal && ops_io_size(journal) > 0) {
        /* a write that did not finish, and whose rollback did not either: the copy is not
         * whole without it, and a rename would part them */
        rc =
            ops_io_fail(errmsg, errmsg_size, MV_EIO, "%s was left by an unfinished write", journal);
    }
    return rc;
}
