/*
 * store_export.c -- mv_export_mbox(): a mailbox written as an mbox (mboxrd), one message
 * at a time.
 *
 * FORMAT
 *   For each message, in UID order:
 *     "From MAILER-DAEMON Www Mmm dd hh:mm:ss yyyy\n"   internal date, UTC, asctime layout
 *     the message, each line matching ^>*From  given one more '>' (mboxrd)
 *     "\n" if the message does not end with a newline
 *     "\n"                                               the blank line between messages
 *   mv_import() reads this back byte for byte, with the same internal dates.
 *
 * IMPLEMENTATION NOTES
 *   - Memory: one message (mv_message_fetch) plus a 64 KiB output buffer. The next UID is
 *     looked up after each message (keyset), so no statement stays open across a fetch;
 *     a message expunged meanwhile is passed over, one appended meanwhile is included.
 *   - Writes loop over short writes and EINTR.
 *
 * LIMITATIONS
 *   - mbox cannot record that a message lacked a final newline: it gets one, and an import of
 *     the export holds that message with one more "\n" than the original.
 */
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXPORT_BUF_SIZE (64u << 10)

struct export_out {
    mv_store *s;
    int fd;
    uint8_t *buf;
    size_t len;
};

static int export_flush(struct export_out *o)
{
    const uint8_t *p = o->buf;
    size_t left = o->len;
    while (left > 0) {
        ssize_t n = write(o->fd, p, left);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            return store_fail(o->s, (e == ENOSPC || e == EDQUOT) ? MV_ENOSPC : MV_EIO,
                              "cannot write the mbox: %s", strerror(e));
        }
        p += n;
        left -= (size_t)n;
    }
    o->len = 0;
    return MV_OK;
}

static int export_put(struct export_out *o, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        if (o->len == EXPORT_BUF_SIZE) {
            int rc = export_flush(o);
            if (rc != MV_OK) {
                return rc;
            }
        }
        size_t k = n < EXPORT_BUF_SIZE - o->len ? n : EXPORT_BUF_SIZE - o->len;
        memcpy(o->buf + o->len, p, k);
        o->len += k;
        p += k;
        n -= k;
    }
    return MV_OK;
}

/* "From MAILER-DAEMON Thu Jan  1 00:00:00 1970\n", without the locale. */
static void export_from_line(int64_t date, char *out, size_t size)
{
    static const char days[] = "SunMonTueWedThuFriSat";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    time_t t = (time_t)date;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || tm.tm_year + 1900 > 9999 || tm.tm_year + 1900 < 1970) {
        t = 0;
        gmtime_r(&t, &tm);
    }
    snprintf(out, size, "From MAILER-DAEMON %.3s %.3s %2d %02d:%02d:%02d %d\n",
             days + 3 * (size_t)tm.tm_wday, months + 3 * (size_t)tm.tm_mon, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, tm.tm_year + 1900);
}

/* Whether a line matches ^>*From  (and so needs one more '>'). */
static int export_needs_quote(const uint8_t *p, size_t n)
{
    size_t i = 0;
    while (i < n && p[i] == '>') {
        i++;
    }
    return n - i >= 5 && memcmp(p + i, "From ", 5) == 0;
}

static int export_message(struct export_out *o, int64_t date, const uint8_t *raw, size_t len)
{
    char from[80];
    export_from_line(date, from, sizeof from);
    int rc = export_put(o, from, strlen(from));
    for (size_t pos = 0; rc == MV_OK && pos < len;) {
        const uint8_t *nl = memchr(raw + pos, '\n', len - pos);
        size_t end = nl != NULL ? (size_t)(nl - raw) + 1 : len;
        if (export_needs_quote(raw + pos, end - pos)) {
            rc = export_put(o, ">", 1);
        }
        if (rc == MV_OK) {
            rc = export_put(o, raw + pos, end - pos);
        }
        pos = end;
    }
    if (rc == MV_OK && (len == 0 || raw[len - 1] != '\n')) {
        rc = export_put(o, "\n", 1);
    }
    return rc == MV_OK ? export_put(o, "\n", 1) : rc;
}

/* The first message of mailbox_id after uid: *found 0 at the end. */
static int export_next(mv_store *s, int64_t mailbox_id, uint32_t *uid, int64_t *date, int *found)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT uid, internal_date FROM messages WHERE "
                                     "mailbox_id = ? AND uid > ? ORDER BY uid LIMIT 1");
    if (st == NULL) {
        return store_fail_sqlite(s, "listing messages");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)*uid);
    int step = sqlite3_step(st);
    *found = step == SQLITE_ROW;
    if (*found) {
        *uid = (uint32_t)sqlite3_column_int64(st, 0);
        *date = sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW || step == SQLITE_DONE ? MV_OK
                                                     : store_fail_sqlite(s, "listing messages");
}

int mv_export_mbox(mv_store *s, const char *mailbox, int fd, uint32_t *count_out)
{
    struct export_out out = {s, fd, NULL, 0};
    int64_t mailbox_id = 0, date = 0;
    uint32_t uid = 0, count = 0;
    int found = 0;
    int rc = store_mailbox_id(s, mailbox, &mailbox_id);
    if (rc == MV_OK && (out.buf = malloc(EXPORT_BUF_SIZE)) == NULL) {
        rc = store_fail(s, MV_ENOMEM, "out of memory");
    }
    while (rc == MV_OK && (rc = export_next(s, mailbox_id, &uid, &date, &found)) == MV_OK &&
           found) {
        void *raw = NULL;
        size_t len = 0;
        rc = mv_message_fetch(s, mailbox, uid, &raw, &len);
        if (rc == MV_ENOTFOUND) {
            rc = MV_OK; /* expunged since the lookup */
            continue;
        }
        if (rc == MV_OK) {
            rc = export_message(&out, date, raw, len);
            count += rc == MV_OK;
        }
        mv_free(raw);
    }
    if (rc == MV_OK) {
        rc = export_flush(&out);
    }
    free(out.buf);
    if (count_out != NULL) {
        *count_out = count;
    }
    return rc;
}
