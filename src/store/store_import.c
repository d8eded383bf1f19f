/*
 * store_import.c -- mv_import(): an mbox file, a Maildir, a directory of .eml files or one
 * .eml file into a mailbox: streaming, resumable, in batches.
 *
 * USAGE
 *   struct mv_import_stats stats;
 *   rc = mv_import(store, "archive.mbox", "Archive", draw_bar, &bar, &stats);
 *   (draw_bar returns non-zero to stop; what was imported so far is committed)
 *
 * WHAT THE INPUT IS (from path)
 *   a regular file starting "From "   mbox (mboxrd; mboxo reads the same way)
 *   a regular file named *.eml        one message; internal date = the file's mtime
 *   a directory with cur/ and new/    Maildir: cur/ then new/, each in name order; flags
 *                                     from the ":2,<letters>" suffix (D F R S T); mtime
 *   any other directory               its *.eml files in name order; mtime
 *
 * IMPLEMENTATION NOTES
 *   - Memory bound. The mbox is read through one IMPORT_READ_SIZE buffer; one message at a
 *     time is assembled in a buffer that never grows past message_size_max + 2 bytes (a
 *     larger message is counted in messages_failed and skipped without being held);
 *     directories are walked with store_scan (STORE_SCAN_BATCH names, 256 KiB). So the
 *     importer itself holds at most twice message_size_max (the message and its CRLF form)
 *     + about 400 KiB, whatever the size of the input; on top come what appending one
 *     message costs (parsing, compression) and SQLite's page cache (cache_size_kib).
 *   - Line ends. Every message is stored with CRLF line ends (import_crlf): a bare LF, as
 *     Maildir and mbox files hold them, becomes CRLF, so FETCH serves CRLF and RFC822.SIZE,
 *     the SHA-256 and the full-text index are of those bytes (LMTP gets CRLF from its
 *     protocol). An import made before this stored the bare LFs; such stores are not
 *     converted (their SHA-256 and size describe the LF bytes), and a re-run into such a
 *     mailbox still skips them (the SHA-256 of the bytes as read is looked up too).
 *   - Resume. Before appending, the SHA-256 of the message is looked up in the mailbox
 *     (store_message_exists); a hit is counted in messages_skipped. Batches commit whole, so
 *     after a kill a re-run skips every committed message and imports the rest: nothing is
 *     lost and nothing is duplicated.
 *   - Batches. One transaction per IMPORT_BATCH_MESSAGES messages (skipped ones included, so
 *     a re-run does not hold the write lock for long) or IMPORT_BATCH_BYTES appended bytes,
 *     whichever comes first. A message is checked and parsed before anything of it is
 *     written, so one the store refuses (a limit: MV_ELIMIT / MV_EINVAL) is counted in
 *     messages_failed and the batch goes on; a skipped message is never parsed.
 *   - mbox. A line starting "From " (at the start of the file or after a newline) starts a
 *     message and is not part of it. The blank line a writer puts after each message is
 *     removed ("\n\n" -> "\n", "\r\n\r\n" -> "\r\n"). A line matching ^>+From loses one
 *     '>' (mboxrd). The From line's asctime date (UTC) is the internal date, else now.
 *     stats.bytes counts input bytes consumed; bytes_total is the file's size (0 for
 *     directories: unknown without a second walk).
 *
 * LIMITATIONS
 *   - mboxo (">From " lines of the original left as they were) cannot be told from mboxrd:
 *     such lines lose one '>'. Content-Length (mboxcl) is ignored.
 *   - A message identical (same bytes) to one already in the mailbox is skipped: the resume
 *     rule cannot tell it from a re-run.
 *   - A line whose leading '>' run is longer than IMPORT_READ_SIZE is not unquoted.
 */
#include "crypto/crypt.h"
#include "store/store.h"
#include "store/store_blob.h"
#include "store/store_message.h"
#include "store/store_parse.h"
#include "store/store_scan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define IMPORT_READ_SIZE      (64u << 10) /* mbox read buffer */
#define IMPORT_BATCH_MESSAGES 100         /* messages per transaction */
#define IMPORT_BATCH_BYTES    (8u << 20)  /* appended bytes per transaction */
#define IMPORT_FROM_LINE_MAX  1000        /* bytes of a From line searched for its date */
#define IMPORT_SLACK          2           /* room for the blank line after an mbox message */

struct import_ctx {
    mv_store *s;
    int64_t mailbox_id;
    uint64_t size_max; /* limits.message_size_max */
    uint64_t hold_max; /* size_max + IMPORT_SLACK (saturated): the most c->msg holds */
    mv_import_progress_fn progress;
    void *progress_arg;
    struct mv_import_stats stats;
    uint64_t bytes_total;
    int in_txn;
    uint32_t batch_messages;
    uint32_t batch_imported; /* inserted in the open batch: not imported if it rolls back */
    uint64_t batch_bytes;
    int stop;     /* the progress callback asked to stop */
    uint8_t *msg; /* the message being assembled (mbox) or read (files) */
    size_t msg_len;
    size_t msg_cap;
    uint64_t msg_size; /* its true size, which may exceed what msg holds */
    uint8_t *crlf;     /* the message with bare LFs made CRLF (import_crlf) */
    size_t crlf_cap;
};

struct import_reader {
    int fd;
    uint8_t *buf;
    size_t pos;
    size_t len;
    int eof;
};

/* ---- batches and one message ------------------------------------------------------------ */

static int import_batch_end(struct import_ctx *c, int ok)
{
    int rc = MV_OK;
    if (c->in_txn) {
        if (ok) {
            rc = store_commit(c->s); /* rolls back itself if it fails */
        } else {
            store_rollback(c->s);
        }
        if (!ok || rc != MV_OK) {
            c->stats.messages_imported -= c->batch_imported; /* a re-run imports them */
        }
    }
    c->in_txn = 0;
    c->batch_messages = 0;
    c->batch_imported = 0;
    c->batch_bytes = 0;
    return rc;
}

/* Parses and inserts one message. A message refused before anything is written (limits:
 * store_message_check, store_parse) counts as failed and the import goes on; an error while
 * inserting fails the batch. (No SAVEPOINT per message: with temp_store=FILE each one costs
 * a statement journal, four times the time of the import itself.) */
static int import_insert(struct import_ctx *c,
                         const uint8_t *raw,
                         size_t len,
                         const uint8_t *sha256,
                         unsigned flags,
                         int64_t date)
{
    struct store_parsed parsed;
    char *keywords = NULL, err[256] = "";
    uint32_t uid = 0;
    memset(&parsed, 0, sizeof parsed);
    int rc = store_message_check(c->s, raw, len, flags, NULL, &keywords);
    if (rc == MV_OK) {
        rc = store_parse(raw, len, &c->s->limits, STORE_SPLIT_MIN, &parsed, err, sizeof err);
        if (rc != MV_OK) {
            store_fail(c->s, rc, "%s", err);
        }
    }
    if (rc == MV_ELIMIT || rc == MV_EINVAL) {
        c->stats.messages_failed++; /* this message, not the store */
        rc = MV_OK;
    } else if (rc == MV_OK) {
        rc = store_message_insert(c->s, c->mailbox_id, raw, len, sha256, &parsed, flags, keywords,
                                  date, &uid);
        c->stats.messages_imported += rc == MV_OK;
        c->batch_imported += rc == MV_OK;
        c->batch_bytes += len;
    }
    store_parsed_free(&parsed);
    free(keywords);
    return rc;
}

/* Skips (already in the mailbox) or inserts one message inside the batch transaction.
 * as_read (NULL if it is raw) is the message as the input had it, before import_crlf: an
 * import made before line ends were converted stored those bytes, and a re-run into that
 * mailbox must skip them too. */
static int import_append(struct import_ctx *c,
                         const uint8_t *raw,
                         size_t len,
                         const uint8_t *as_read,
                         size_t as_read_len,
                         unsigned flags,
                         int64_t date)
{
    uint8_t sha[32], sha_as_read[32];
    int exists = 0;
    /* OpenSSL's SHA-256 (SHA-NI where the CPU has it), once: store_body_put takes it too */
    int rc = store_blob_sha256(c->s, raw, len, sha);
    if (rc == MV_OK && !c->in_txn && (rc = store_begin(c->s)) == MV_OK) {
        c->in_txn = 1;
    }
    if (rc == MV_OK) {
        rc = store_message_exists(c->s, c->mailbox_id, sha, &exists);
    }
    if (rc == MV_OK && !exists && as_read != NULL) {
        rc = store_blob_sha256(c->s, as_read, as_read_len, sha_as_read);
        if (rc == MV_OK) {
            rc = store_message_exists(c->s, c->mailbox_id, sha_as_read, &exists);
        }
    }
    c->batch_messages++;
    if (rc != MV_OK || exists) {
        c->stats.messages_skipped += rc == MV_OK;
        return rc;
    }
    return import_insert(c, raw, len, sha, flags, date);
}

/* The message with CRLF line ends (mv_message_crlf, store_crlf.c), in c->crlf; *out is raw
 * itself when no LF is bare. Returns MV_OK, MV_ELIMIT (converted, the message would be over
 * message_size_max: refused like any too large one, nothing held), MV_ENOMEM. */
static int import_crlf(
    struct import_ctx *c, const uint8_t *raw, size_t len, const uint8_t **out, size_t *out_len)
{
    const size_t need = mv_message_crlf(raw, len, NULL, 0);
    *out = raw;
    *out_len = len;
    if (need == len) {
        return MV_OK;
    }
    if ((uint64_t)need > c->size_max) {
        return MV_ELIMIT;
    }
    if (need > c->crlf_cap) {
        uint8_t *p = crypt_realloc_wiped(c->crlf, need);
        if (p == NULL) {
            return store_fail(c->s, MV_ENOMEM, "out of memory (a %zu-byte message)", need);
        }
        c->crlf = p;
        c->crlf_cap = need;
    }
    *out = c->crlf;
    *out_len = mv_message_crlf(raw, len, c->crlf, c->crlf_cap);
    return MV_OK;
}

/* One message of the input: refused (too large, empty), skipped or appended with CRLF line
 * ends; then the batch may end and progress is reported. */
static int import_message(
    struct import_ctx *c, const uint8_t *raw, size_t len, int refused, unsigned flags, int64_t date)
{
    int rc = MV_OK;
    const uint8_t *crlf = raw;
    size_t crlf_len = len;
    c->stats.messages_seen++;
    if (!refused && len != 0) {
        rc = import_crlf(c, raw, len, &crlf, &crlf_len);
        refused = rc == MV_ELIMIT;
        rc = refused ? MV_OK : rc;
    }
    if (rc != MV_OK) {
        return rc;
    }
    if (refused || len == 0) {
        c->stats.messages_failed++;
    } else {
        rc = import_append(c, crlf, crlf_len, crlf != raw ? raw : NULL, len, flags, date);
    }
    if (rc == MV_OK &&
        (c->batch_messages >= IMPORT_BATCH_MESSAGES || c->batch_bytes >= IMPORT_BATCH_BYTES)) {
        rc = import_batch_end(c, 1);
    }
    if (rc == MV_OK && c->progress != NULL &&
        c->progress(c->progress_arg, &c->stats, c->bytes_total) != 0) {
        c->stop = 1;
    }
    return rc;
}

/* Makes room for need bytes in c->msg, never more than hold_max. */
static int import_reserve(struct import_ctx *c, size_t need)
{
    if (need <= c->msg_cap) {
        return MV_OK;
    }
    size_t cap_max = c->hold_max > SIZE_MAX ? SIZE_MAX : (size_t)c->hold_max;
    size_t cap = c->msg_cap < (64u << 10) ? (64u << 10) : c->msg_cap * 2;
    cap = cap < need ? need : cap;
    cap = cap > cap_max ? cap_max : cap;
    if (cap < need) { /* callers check the size first */
        return store_fail(c->s, MV_ELIMIT, "message is %zu bytes; message_size_max is %llu", need,
                          (unsigned long long)c->size_max);
    }
    uint8_t *p = crypt_realloc_wiped(c->msg, cap);
    if (p == NULL) {
        return store_fail(c->s, MV_ENOMEM, "out of memory (a %zu-byte message)", need);
    }
    c->msg = p;
    c->msg_cap = cap;
    return MV_OK;
}

/* ---- mbox ------------------------------------------------------------------------------- */

/* The next piece of input: a whole line with its '\n', or IMPORT_READ_SIZE bytes of a longer
 * line, or the last bytes of the file. Returns 1, 0 at the end, or MV_EIO. */
static int import_reader_next(struct import_reader *r, const uint8_t **piece, size_t *len)
{
    for (;;) {
        const uint8_t *nl = r->pos < r->len ? memchr(r->buf + r->pos, '\n', r->len - r->pos) : NULL;
        /* (1) a line  (2) the end of the file  (3) a full buffer without a newline */
        if (nl != NULL || r->eof || (r->pos == 0 && r->len == IMPORT_READ_SIZE)) {
            size_t end = nl != NULL ? (size_t)(nl - r->buf) + 1 : r->len;
            if (end == r->pos) {
                return 0;
            }
            *piece = r->buf + r->pos;
            *len = end - r->pos;
            r->pos = end;
            return 1;
        }
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
        ssize_t n = read(r->fd, r->buf + r->len, IMPORT_READ_SIZE - r->len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return MV_EIO;
        }
        r->eof = n == 0;
        r->len += (size_t)n;
    }
}

/* Parses "Www Mmm dd hh:mm:ss yyyy" (asctime, taken as UTC). Returns 1 and sets *out. */
static int import_asctime_parse(const char *p, int64_t *out)
{
    static const char days[] = "SunMonTueWedThuFriSat";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    char wday[4], mon[4];
    int day, hour, min, sec, year;
    if (sscanf(p, "%3s %3s %d %d:%d:%d %d", wday, mon, &day, &hour, &min, &sec, &year) != 7 ||
        strlen(wday) != 3 || strlen(mon) != 3) {
        return 0;
    }
    const char *d = strstr(days, wday), *m = strstr(months, mon);
    /* (1) known names at a name boundary  (2) fields in range */
    if (d == NULL || (d - days) % 3 != 0 || m == NULL || (m - months) % 3 != 0 || day < 1 ||
        day > 31 || hour < 0 || hour > 23 || min < 0 || min > 59 || sec < 0 || sec > 60 ||
        year < 1970 || year > 9999) {
        return 0;
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = year - 1900;
    tm.tm_mon = (int)((m - months) / 3);
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = min;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1) {
        return 0;
    }
    *out = (int64_t)t;
    return 1;
}

/* The internal date from a "From sender date" line: the first place after "From " where an
 * asctime date parses; 0 (now) if none. */
static int64_t import_from_date(const uint8_t *p, size_t n)
{
    char line[IMPORT_FROM_LINE_MAX + 1];
    size_t k = n < IMPORT_FROM_LINE_MAX ? n : IMPORT_FROM_LINE_MAX;
    memcpy(line, p, k);
    line[k] = '\0';
    int64_t t = 0;
    for (char *at = line + 4; at != NULL; at = strchr(at + 1, ' ')) {
        if (import_asctime_parse(at + 1, &t)) {
            return t;
        }
    }
    return 0;
}

/* Adds one piece to the message being assembled, or only counts it once it is too large. */
static int import_mbox_add(struct import_ctx *c, const uint8_t *p, size_t n)
{
    c->msg_size += n;
    if (c->msg_size > c->hold_max) {
        return MV_OK; /* refused at its end; nothing more is held */
    }
    int rc = import_reserve(c, c->msg_len + n);
    if (rc == MV_OK) {
        memcpy(c->msg + c->msg_len, p, n);
        c->msg_len += n;
    }
    return rc;
}

/* The message assembled so far is complete: drop the writer's blank line and import it. */
static int import_mbox_finish(struct import_ctx *c, int64_t date)
{
    size_t len = c->msg_len;
    const uint8_t *m = c->msg;
    if (len >= 4 && memcmp(m + len - 4, "\r\n\r\n", 4) == 0) {
        len -= 2;
    } else if (len >= 2 && m[len - 1] == '\n' && m[len - 2] == '\n') {
        len -= 1;
    }
    int refused = c->msg_size > c->hold_max || (uint64_t)len > c->size_max;
    int rc = import_message(c, m, len, refused, 0, date);
    c->msg_len = 0;
    c->msg_size = 0;
    return rc;
}

/* Whether a line is ">From ", ">>From ", ... (mboxrd quoting). */
static int import_is_quoted_from(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n && p[i] == '>') {
        i++;
    }
    return i > 0 && n - i >= 5 && memcmp(p + i, "From ", 5) == 0;
}

static int import_mbox_run(struct import_ctx *c, struct import_reader *r)
{
    int line_start = 1, in_message = 0, in_from_line = 0, rc = MV_OK, more = 0;
    int64_t date = 0;
    const uint8_t *p = NULL;
    size_t n = 0;
    while (rc == MV_OK && !c->stop && (more = import_reader_next(r, &p, &n)) == 1) {
        int starts = line_start;
        line_start = p[n - 1] == '\n';
        c->stats.bytes += n;
        if (in_from_line) {
            in_from_line = !line_start; /* the rest of an over-long From line */
        } else if (starts && n >= 5 && memcmp(p, "From ", 5) == 0) {
            if (in_message) {
                rc = import_mbox_finish(c, date);
            }
            date = import_from_date(p, n);
            in_message = 1;
            in_from_line = !line_start;
        } else if (starts && import_is_quoted_from(p, n)) {
            rc = import_mbox_add(c, p + 1, n - 1);
        } else {
            rc = import_mbox_add(c, p, n);
        }
    }
    if (rc == MV_OK && !c->stop && more < 0) {
        rc = store_fail(c->s, MV_EIO, "cannot read the mbox: %s", strerror(errno));
    }
    if (rc == MV_OK && !c->stop && in_message) {
        rc = import_mbox_finish(c, date);
    }
    return rc;
}

static int import_mbox(struct import_ctx *c, int fd)
{
    struct import_reader r;
    memset(&r, 0, sizeof r);
    r.fd = fd;
    r.buf = malloc(IMPORT_READ_SIZE);
    if (r.buf == NULL) {
        return store_fail(c->s, MV_ENOMEM, "out of memory");
    }
    int rc = import_mbox_run(c, &r);
    crypt_free_wiped(r.buf);
    return rc;
}

/* ---- files and directories -------------------------------------------------------------- */

static int import_read_all(int fd, uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* One message from one file (a Maildir entry or an .eml): internal date = its mtime. A file
 * that vanished or cannot be read counts as failed; anything but a regular file is passed
 * over. */
static int import_file(struct import_ctx *c, const char *path, unsigned flags)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return import_message(c, NULL, 0, 1, 0, 0);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return MV_OK;
    }
    uint64_t size = (uint64_t)st.st_size;
    c->stats.bytes += size;
    if (size > c->size_max || size == 0) {
        close(fd);
        return import_message(c, NULL, 0, 1, 0, 0);
    }
    int rc = import_reserve(c, (size_t)size);
    int unreadable = rc == MV_OK && import_read_all(fd, c->msg, (size_t)size) != 0;
    close(fd);
    if (rc != MV_OK) {
        return rc;
    }
    return import_message(c, c->msg, (size_t)size, unreadable, flags, (int64_t)st.st_mtime);
}

/* Maildir flags from the info suffix ":2,<letters>". */
static unsigned import_maildir_flags(const char *name)
{
    const char *info = strstr(name, ":2,");
    unsigned flags = 0;
    for (const char *p = info != NULL ? info + 3 : ""; *p != '\0'; p++) {
        flags |= *p == 'D'   ? MV_FLAG_DRAFT
                 : *p == 'F' ? MV_FLAG_FLAGGED
                 : *p == 'R' ? MV_FLAG_ANSWERED
                 : *p == 'S' ? MV_FLAG_SEEN
                 : *p == 'T' ? MV_FLAG_DELETED
                             : 0u;
    }
    return flags;
}

static int import_accept_visible(void *arg, const char *name)
{
    (void)arg;
    return name[0] != '.';
}

static int import_accept_eml(void *arg, const char *name)
{
    size_t n = strlen(name);
    (void)arg;
    return name[0] != '.' && n > 4 && strcasecmp(name + n - 4, ".eml") == 0;
}

/* Every accepted file of dir in name order. */
static int
import_dir(struct import_ctx *c, const char *dir, store_scan_accept_fn accept, int maildir)
{
    struct store_scan *scan = NULL;
    int rc = store_scan_open(dir, accept, NULL, &scan);
    if (rc != MV_OK) {
        return store_fail(c->s, rc, "cannot read %s: %s", dir, strerror(errno));
    }
    const char *name = NULL;
    char path[MV_PATH_MAX];
    int more = 0;
    while (rc == MV_OK && !c->stop && (more = store_scan_next(scan, &name)) == 1) {
        int n = snprintf(path, sizeof path, "%s/%s", dir, name);
        if (n < 0 || (size_t)n >= sizeof path) {
            rc = import_message(c, NULL, 0, 1, 0, 0); /* cannot name it: failed */
            continue;
        }
        rc = import_file(c, path, maildir ? import_maildir_flags(name) : 0);
    }
    if (rc == MV_OK && !c->stop && more < 0) {
        rc = store_fail(c->s, MV_EIO, "cannot read %s: %s", dir, strerror(errno));
    }
    store_scan_close(&scan);
    return rc;
}

static int import_is_dir(const char *dir, const char *sub)
{
    char path[MV_PATH_MAX];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/%s", dir, sub);
    return n > 0 && (size_t)n < sizeof path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int import_directory(struct import_ctx *c, const char *path)
{
    if (!import_is_dir(path, "cur") || !import_is_dir(path, "new")) {
        return import_dir(c, path, import_accept_eml, 0);
    }
    char sub[MV_PATH_MAX];
    int rc = MV_OK;
    static const char *const parts[] = {"cur", "new"}; /* new/ holds the newer mail */
    for (size_t i = 0; rc == MV_OK && !c->stop && i < 2; i++) {
        snprintf(sub, sizeof sub, "%s/%s", path, parts[i]);
        rc = import_dir(c, sub, import_accept_visible, 1);
    }
    return rc;
}

/* A regular file: an mbox if it starts "From ", one message if it is named *.eml. */
static int import_regular(struct import_ctx *c, const char *path, uint64_t size)
{
    size_t n = strlen(path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return store_fail(c->s, errno == ENOENT ? MV_ENOTFOUND : MV_EIO, "cannot open %s: %s", path,
                          strerror(errno));
    }
    uint8_t head[5];
    ssize_t got = pread(fd, head, sizeof head, 0);
    c->bytes_total = size;
    int rc;
    if (got == (ssize_t)sizeof head && memcmp(head, "From ", 5) == 0) {
        rc = import_mbox(c, fd);
    } else if (n > 4 && strcasecmp(path + n - 4, ".eml") == 0) {
        rc = import_file(c, path, 0);
    } else {
        rc = store_fail(c->s, MV_EUNSUPPORTED,
                        "%s is neither an mbox (it does not start with \"From \") nor a .eml "
                        "file",
                        path);
    }
    close(fd);
    return rc;
}

int mv_import(mv_store *s,
              const char *path,
              const char *mailbox,
              mv_import_progress_fn progress,
              void *progress_arg,
              struct mv_import_stats *stats_out)
{
    struct import_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.size_max = s->limits.message_size_max;
    c.hold_max = c.size_max > UINT64_MAX - IMPORT_SLACK ? UINT64_MAX : c.size_max + IMPORT_SLACK;
    c.progress = progress;
    c.progress_arg = progress_arg;
    struct stat st;
    int rc = path != NULL ? MV_OK : store_fail(s, MV_EINVAL, "no path to import");
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, mailbox, &c.mailbox_id);
    }
    if (rc == MV_OK && stat(path, &st) != 0) {
        rc = store_fail(s, errno == ENOENT ? MV_ENOTFOUND : MV_EIO, "cannot import %s: %s", path,
                        strerror(errno));
    }
    if (rc == MV_OK) {
        rc = S_ISDIR(st.st_mode) ? import_directory(&c, path)
             : S_ISREG(st.st_mode)
                 ? import_regular(&c, path, (uint64_t)st.st_size)
                 : store_fail(s, MV_EUNSUPPORTED, "%s is not a file or a directory", path);
    }
    /* Stopped or finished: commit what is done. Failed: roll the open batch back (a re-run
     * imports it). */
    int rc2 = import_batch_end(&c, rc == MV_OK);
    rc = rc != MV_OK ? rc : rc2;
    crypt_free_wiped(c.msg);
    crypt_free_wiped(c.crlf);
    if (stats_out != NULL) {
        *stats_out = c.stats;
    }
    return rc;
}
