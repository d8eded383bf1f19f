/*
 * test_import.c -- mv_import (mbox, Maildir, .eml) and mv_export_mbox.
 *
 *   - An mbox of 300 generated messages (CRLF and LF, "From " and ">From " lines in bodies,
 *     three over 1 MiB) imports byte for byte with the From-line dates; a re-run skips all.
 *   - message_size_max refuses the big ones and goes on; a progress callback stops cleanly
 *     and a re-run finishes the job.
 *   - An importer SIGKILLed at random points, then re-run: exactly the input, in order.
 *   - Maildir flags and dates, .eml directories, a single .eml, an unknown file.
 *   - Export, then import into another mailbox: byte-identical, same internal dates.
 *   - store_scan (the walker behind Maildir, .eml and the queue): more names than one
 *     pass holds come out sorted, each once, the filter applied.
 *   - Memory: a child (this program re-executed) imports a large mbox; its peak RSS must
 *     stay under a fixed bound.
 */
#include "harness.h"
#include "store/store_scan.h"
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PW          "import-password"
#define USER        "importer@example.org"
#define BASE_DATE   1136214245 /* Mon Jan  2 15:04:05 2006 UTC */
#define MBOX_COUNT  300
#define KILL_COUNT  2000
#define MEM_MBOX_MB 60 /* the memory test's mbox (200 MB takes minutes under ASan) */
#define MEM_BIG     (2u << 20)

static uint32_t it_rng = 0x1b873593u;

static uint32_t it_next(void)
{
    it_rng ^= it_rng << 13;
    it_rng ^= it_rng >> 17;
    it_rng ^= it_rng << 5;
    return it_rng;
}

struct it_buf {
    uint8_t *p;
    size_t len;
    size_t cap;
};

static void it_put(struct it_buf *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (b->p == NULL) {
            abort();
        }
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

__attribute__((format(printf, 2, 3))) static void it_printf(struct it_buf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    it_put(b, line, (size_t)n);
}

/* Message i: CRLF for every 13th, lines that need mboxrd quoting, a blank last line for every
 * 17th, a last line "From ..." for every 19th, big_bytes of base64 if big_bytes > 0. */
static void it_message(struct it_buf *b, int i, size_t big_bytes)
{
    const char *nl = i % 13 == 0 ? "\r\n" : "\n";
    b->len = 0;
    it_printf(b, "From: Sender %d <s%d@example.net>%sTo: r@example.org%s", i, i, nl, nl);
    it_printf(b, "Subject: IMPORT-%05d%sMessage-ID: <imp-%d@example.net>%s%s", i, nl, i, nl, nl);
    int lines = 3 + (i * 7919) % 150;
    for (int l = 0; l < lines; l++) {
        if (l % 9 == 3) {
            it_printf(b, "From the desk of line %d%s", l, nl);
        } else if (l % 9 == 5) {
            it_printf(b, ">From quoted %d%s", l, nl);
        } else if (l % 9 == 7) {
            it_printf(b, ">>>From deeper %d%s", l, nl);
        } else {
            it_printf(b, "line %d of message %d, with some words to fill it out%s", l, i, nl);
        }
    }
    for (size_t k = 0; k < big_bytes; k += 78) {
        it_printf(b,
                  "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAx%04x%s",
                  (unsigned)(k / 78 + (size_t)i) & 0xffffu, nl);
    }
    if (i % 19 == 0) {
        it_printf(b, "From the end%s", nl);
    }
    if (i % 17 == 0) {
        it_printf(b, "%s", nl);
    }
}

static size_t it_big(int i)
{
    return i % 100 == 37 ? (1100u << 10) : 0;
}

/* Appends message m to an mbox the way an mboxrd writer does. */
static void it_mbox_put(FILE *f, const uint8_t *m, size_t n, int64_t date)
{
    time_t t = (time_t)date;
    struct tm tm;
    char when[64];
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%a %b %e %H:%M:%S %Y", &tm);
    fprintf(f, "From sender@example.org %s\n", when);
    for (size_t pos = 0; pos < n;) {
        const uint8_t *e = memchr(m + pos, '\n', n - pos);
        size_t end = e != NULL ? (size_t)(e - m) + 1 : n, q = pos;
        while (q < end && m[q] == '>') {
            q++;
        }
        if (end - q >= 5 && memcmp(m + q, "From ", 5) == 0) {
            fputc('>', f);
        }
        fwrite(m + pos, 1, end - pos, f);
        pos = end;
    }
    fputc('\n', f);
}

/* Writes an mbox of messages 0..count-1 (big ones only if with_big). */
static int it_mbox_write(const char *path, int count, int with_big)
{
    FILE *f = fopen(path, "wb");
    struct it_buf b = {0};
    if (f == NULL) {
        return -1;
    }
    for (int i = 0; i < count; i++) {
        it_message(&b, i, with_big ? it_big(i) : 0);
        it_mbox_put(f, b.p, b.len, BASE_DATE + (int64_t)i * 3600);
    }
    free(b.p);
    return fclose(f) == 0 ? 0 : -1;
}

static struct mv_store_options it_options(void)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    o.cache_size_kib = 8192;
    return o;
}

static int it_open_with(const struct mv_store_options *o, mv_store **s)
{
    char err[512] = "";
    int rc = mv_store_open(USER, PW, strlen(PW), o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open: %s\n", err);
    }
    return rc;
}

static int it_open(mv_store **s)
{
    struct mv_store_options o = it_options();
    o.flags = MV_STORE_CREATE;
    return it_open_with(&o, s);
}

static int it_import(mv_store *s, const char *path, const char *mailbox, struct mv_import_stats *st)
{
    int rc = mv_import(s, path, mailbox, NULL, NULL, st);
    if (rc != MV_OK) {
        fprintf(stderr, "  import %s: %s\n", path, mv_strerror(rc));
        fprintf(stderr, "  %s\n", mv_store_errmsg(s));
    }
    return rc;
}

/* Opens the store, creates mailbox and imports path into it (it_import). MV_OK or the first
 * failure's code. */
static int
it_open_import(mv_store **s, const char *path, const char *mailbox, struct mv_import_stats *st)
{
    int rc = it_open(s);
    if (rc == MV_OK) {
        rc = mv_mailbox_create(*s, mailbox, NULL);
    }
    return rc == MV_OK ? it_import(*s, path, mailbox, st) : rc;
}

/* b with every LF not preceded by CR made CRLF: how the importer stores a message. */
static void it_crlf(struct it_buf *b)
{
    struct it_buf out = {0};
    for (size_t i = 0; i < b->len; i++) {
        if (b->p[i] == '\n' && (i == 0 || b->p[i - 1] != '\r')) {
            it_put(&out, "\r", 1);
        }
        it_put(&out, b->p + i, 1);
    }
    free(b->p);
    *b = out;
}

/* Whether mailbox holds exactly messages 0..count-1 (uid i+1 = message i), byte for byte
 * with CRLF line ends, with the mbox dates when check_dates. */
static int it_verify(mv_store *s, const char *mailbox, int count, int with_big, int check_dates)
{
    struct mv_mailbox_info info;
    struct it_buf b = {0};
    int ok = mv_mailbox_get(s, mailbox, &info) == MV_OK && info.messages == (uint32_t)count;
    for (int i = 0; ok && i < count; i++) {
        void *raw = NULL;
        size_t len = 0;
        struct mv_message_info mi;
        it_message(&b, i, with_big ? it_big(i) : 0);
        it_crlf(&b);
        ok = mv_message_fetch(s, mailbox, (uint32_t)i + 1, &raw, &len) == MV_OK && len == b.len &&
             memcmp(raw, b.p, len) == 0 &&
             mv_message_get(s, mailbox, (uint32_t)i + 1, &mi) == MV_OK &&
             (!check_dates || mi.internal_date == BASE_DATE + (int64_t)i * 3600);
        if (!ok) {
            fprintf(stderr, "  %s: message %d differs (%zu bytes, want %zu)\n", mailbox, i, len,
                    b.len);
        }
        mv_free(raw);
    }
    free(b.p);
    return ok;
}

struct it_progress {
    uint64_t calls;
    uint64_t stop_after;
    uint64_t bytes_total;
    uint64_t last_bytes;
};

static int it_progress_fn(void *arg, const struct mv_import_stats *st, uint64_t bytes_total)
{
    struct it_progress *p = arg;
    p->calls++;
    p->bytes_total = bytes_total;
    p->last_bytes = st->bytes;
    return p->stop_after != 0 && p->calls >= p->stop_after;
}

static void test_mbox_exact_and_rerun(void)
{
    const char *mbox = tu_path("300.mbox");
    CHECK(it_mbox_write(mbox, MBOX_COUNT, 1) == 0);
    mv_store *s = NULL;
    CHECK_EQ_INT(it_open(&s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Imported", NULL), MV_OK);
    struct it_progress p = {0};
    struct mv_import_stats st;
    int rc = mv_import(s, mbox, "Imported", it_progress_fn, &p, &st);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(st.messages_seen, MBOX_COUNT);
    CHECK_EQ_INT(st.messages_imported, MBOX_COUNT);
    CHECK_EQ_INT(st.messages_skipped + st.messages_failed, 0);
    CHECK_EQ_INT(p.calls, MBOX_COUNT);
    CHECK_EQ_INT(p.bytes_total, tu_file_size(mbox));
    CHECK_EQ_INT(st.bytes, tu_file_size(mbox));
    CHECK(it_verify(s, "Imported", MBOX_COUNT, 1, 1));
    CHECK_EQ_INT(it_import(s, mbox, "Imported", &st), MV_OK);
    CHECK_EQ_INT(st.messages_skipped, MBOX_COUNT);
    CHECK_EQ_INT(st.messages_imported, 0);
    CHECK(it_verify(s, "Imported", MBOX_COUNT, 1, 1));
    mv_store_close(&s);
}

static void test_mbox_limit_and_stop(void)
{
    const char *mbox = tu_path("300.mbox");
    struct mv_store_options o = it_options();
    o.limits.message_size_max = 100u << 10;
    mv_store *s = NULL;
    CHECK_EQ_INT(it_open_with(&o, &s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Small", NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Stopped", NULL), MV_OK);
    struct mv_import_stats st;
    CHECK_EQ_INT(it_import(s, mbox, "Small", &st), MV_OK);
    CHECK_EQ_INT(st.messages_failed, 3); /* the three over 1 MiB */
    CHECK_EQ_INT(st.messages_imported, MBOX_COUNT - 3);
    mv_store_close(&s);

    CHECK_EQ_INT(it_open(&s), MV_OK);
    struct it_progress p = {0, 50, 0, 0};
    CHECK_EQ_INT(mv_import(s, mbox, "Stopped", it_progress_fn, &p, &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, 50);
    CHECK(it_verify(s, "Stopped", 50, 1, 1));
    CHECK_EQ_INT(it_import(s, mbox, "Stopped", &st), MV_OK);
    CHECK_EQ_INT(st.messages_skipped, 50);
    CHECK_EQ_INT(st.messages_imported, MBOX_COUNT - 50);
    CHECK(it_verify(s, "Stopped", MBOX_COUNT, 1, 1));
    mv_store_close(&s);
}

/* The child's progress callback: each message handled so far (imported or skipped) goes
 * to the parent through the pipe. */
static int it_report_progress(void *arg, const struct mv_import_stats *stats, uint64_t total)
{
    (void)total;
    uint64_t handled = stats->messages_imported + stats->messages_skipped;
    return write(*(int *)arg, &handled, sizeof handled) == (ssize_t)sizeof handled ? 0 : 1;
}

/* Imports path into mailbox in a child, killed once it reports at least kill_after
 * messages handled, plus delay_us (so the kill lands anywhere in the next message, not only
 * on a commit boundary). The kill is driven by progress, not by a clock: on a fast or a
 * loaded machine alike it lands in the middle of the import. 1 if the import finished. */
static int
it_kill_import(const char *path, const char *mailbox, uint64_t kill_after, unsigned delay_us)
{
    int fds[2];
    if (pipe(fds) != 0) {
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        mv_store *s = NULL;
        struct mv_import_stats st;
        int rc = it_open(&s);
        if (rc == MV_OK) {
            rc = mv_import(s, path, mailbox, it_report_progress, &fds[1], &st);
        }
        mv_store_close(&s);
        _exit(rc == MV_OK ? 0 : 1);
    }
    close(fds[1]);
    uint64_t handled = 0;
    while (handled < kill_after &&
           read(fds[0], &handled, sizeof handled) == (ssize_t)sizeof handled) {
    }
    usleep(delay_us);
    kill(pid, SIGKILL);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_sigkill_and_resume(void)
{
    const char *mbox = tu_path("2000.mbox");
    CHECK(it_mbox_write(mbox, KILL_COUNT, 0) == 0);
    mv_store *s = NULL;
    CHECK_EQ_INT(it_open(&s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Killed", NULL), MV_OK);
    mv_store_close(&s);
    int kills = 0, finished = 0;
    uint32_t counts[8] = {0};
    for (int k = 0; k < 8 && !finished; k++) {
        /* Kill k lands after 200 k + 1 to 200 k + 150 messages: always mid-import. */
        uint64_t after = 200u * (uint64_t)k + 1u + it_next() % 150u;
        finished = it_kill_import(mbox, "Killed", after, it_next() % 3000u);
        kills += !finished;
        struct mv_mailbox_info info;
        CHECK_EQ_INT(it_open(&s), MV_OK);
        CHECK_EQ_INT(mv_mailbox_get(s, "Killed", &info), MV_OK);
        counts[k] = info.messages;
        CHECK(it_verify(s, "Killed", (int)info.messages, 0, 1)); /* a whole prefix, no more */
        mv_store_close(&s);
    }
    CHECK_EQ_INT(it_open(&s), MV_OK);
    struct mv_import_stats st;
    CHECK_EQ_INT(it_import(s, mbox, "Killed", &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported + st.messages_skipped, KILL_COUNT);
    CHECK(it_verify(s, "Killed", KILL_COUNT, 0, 1));
    mv_store_close(&s);
    printf("  %d kills; messages after each: %u %u %u %u %u %u %u %u\n", kills, counts[0],
           counts[1], counts[2], counts[3], counts[4], counts[5], counts[6], counts[7]);
    CHECK(kills >= 2);
}

static int it_write_message_file(const char *path, int i, int64_t mtime)
{
    struct it_buf b = {0};
    it_message(&b, i, 0);
    int rc = tu_write_file(path, b.p, b.len);
    free(b.p);
    struct timeval tv[2] = {{(time_t)mtime, 0}, {(time_t)mtime, 0}};
    return rc == 0 ? utimes(path, tv) : rc;
}

/* An empty Maildir at dir (cur/, new/, tmp/); 0 or -1. */
static int it_maildir_make(const char *dir)
{
    static const char *const subs[] = {"", "/cur", "/new", "/tmp"};
    char path[1200];
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s%s", dir, subs[i]);
        if (mkdir(path, 0700) != 0) {
            return -1;
        }
    }
    return 0;
}

static void test_maildir(void)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s", tu_path("Maildir"));
    CHECK(it_maildir_make(dir) == 0);
    static const char *const files[] = {"cur/1000.M1.host:2,FS", "cur/1001.M2.host:2,RT",
                                        "cur/1002.M3.host:2,D",  "new/0999.M4.host",
                                        "tmp/1003.M5.host",      "cur/.hidden"};
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        CHECK(it_write_message_file(path, i, BASE_DATE + i * 3600) == 0);
    }
    mv_store *s = NULL;
    struct mv_import_stats st;
    CHECK_EQ_INT(it_open_import(&s, dir, "FromMaildir", &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, 4);
    CHECK(it_verify(s, "FromMaildir", 4, 0, 1)); /* cur/ in name order, then new/ */
    static const unsigned want[] = {MV_FLAG_FLAGGED | MV_FLAG_SEEN,
                                    MV_FLAG_ANSWERED | MV_FLAG_DELETED, MV_FLAG_DRAFT, 0};
    for (uint32_t uid = 1; uid <= 4; uid++) {
        struct mv_message_info mi;
        CHECK_EQ_INT(mv_message_get(s, "FromMaildir", uid, &mi), MV_OK);
        CHECK_EQ_INT(mi.flags, want[uid - 1]);
    }
    mv_store_close(&s);
}

/* A Maildir whose files have bare LF line ends (as most have): stored, sized and served
 * with CRLF only (RFC 5322 2.1, RFC 3501 4.3: RFC822.SIZE is the octets FETCH BODY[] sends),
 * a CRLF file and a mixed one alike; the full-text index finds the text. A mailbox imported
 * before line ends were converted holds the LF bytes: a re-run skips them (no duplicates). */
static void test_maildir_lf_stored_crlf(void)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s", tu_path("MaildirLF"));
    CHECK(it_maildir_make(dir) == 0);
    static const char *const msgs[] = {
        "From: a@example.org\nSubject: lf only\n\nfirst line\nlfwordzz here\n",
        "From: b@example.org\r\nSubject: crlf\r\n\r\nalready right\r\n",
        "\nFrom: c@example.org\r\nSubject: mixed\n\r\nend\n\n",
    };
    static const char *const want[] = {
        "From: a@example.org\r\nSubject: lf only\r\n\r\nfirst line\r\nlfwordzz here\r\n",
        "From: b@example.org\r\nSubject: crlf\r\n\r\nalready right\r\n",
        "\r\nFrom: c@example.org\r\nSubject: mixed\r\n\r\nend\r\n\r\n",
    };
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/cur/%d.M%d.host:2,S", dir, 1000 + i, i);
        CHECK(tu_write_file(path, msgs[i], strlen(msgs[i])) == 0);
    }
    mv_store *s = NULL;
    struct mv_import_stats st;
    CHECK_EQ_INT(it_open_import(&s, dir, "LF", &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, 3);
    for (uint32_t uid = 1; uid <= 3; uid++) {
        void *raw = NULL;
        size_t len = 0;
        struct mv_message_info mi;
        CHECK_EQ_INT(mv_message_fetch(s, "LF", uid, &raw, &len), MV_OK);
        const char *w = want[uid - 1];
        int same = len == strlen(w) && memcmp(raw, w, len) == 0;
        int bare = 0;
        for (size_t k = 0; k < len; k++) {
            bare += ((char *)raw)[k] == '\n' && (k == 0 || ((char *)raw)[k - 1] != '\r');
        }
        mv_free(raw);
        CHECK(same);
        CHECK_EQ_INT(bare, 0);
        CHECK_EQ_INT(mv_message_get(s, "LF", uid, &mi), MV_OK);
        CHECK_EQ_INT(mi.size, len); /* RFC822.SIZE = the octets served */
    }
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    q.mailbox = "LF";
    q.text = "lfwordzz";
    mv_search *it = NULL;
    CHECK_EQ_INT(mv_search_begin(s, &q, &it), MV_OK);
    struct mv_message_info mi;
    int hits = 0;
    while (mv_search_next(it, &mi) == 1) {
        hits++;
    }
    mv_search_end(&it);
    CHECK_EQ_INT(hits, 1);
    /* A re-run skips all three; so does one into a mailbox that holds the LF bytes. */
    CHECK_EQ_INT(it_import(s, dir, "LF", &st), MV_OK);
    CHECK_EQ_INT(st.messages_skipped, 3);
    CHECK_EQ_INT(st.messages_imported, 0);
    CHECK_EQ_INT(mv_mailbox_create(s, "Before", NULL), MV_OK);
    CHECK_EQ_INT(mv_message_append(s, "Before", msgs[0], strlen(msgs[0]), 0, NULL, 0, NULL), MV_OK);
    CHECK_EQ_INT(it_import(s, dir, "Before", &st), MV_OK);
    CHECK_EQ_INT(st.messages_skipped, 1);
    CHECK_EQ_INT(st.messages_imported, 2);
    mv_store_close(&s);
}

static void test_eml_directory_and_file(void)
{
    char dir[1024], path[1200];
    snprintf(dir, sizeof dir, "%s", tu_path("emls"));
    CHECK(mkdir(dir, 0700) == 0);
    static const char *const files[] = {"a.eml", "b.eml", "c.EML", "notes.txt", ".d.eml"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        CHECK(it_write_message_file(path, i, BASE_DATE + i * 3600) == 0);
    }
    mv_store *s = NULL;
    struct mv_import_stats st;
    CHECK_EQ_INT(it_open_import(&s, dir, "FromEml", &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, 3);
    CHECK(it_verify(s, "FromEml", 3, 0, 1));
    CHECK_EQ_INT(mv_mailbox_create(s, "OneEml", NULL), MV_OK);
    snprintf(path, sizeof path, "%s/a.eml", dir);
    CHECK_EQ_INT(it_import(s, path, "OneEml", &st), MV_OK);
    CHECK(it_verify(s, "OneEml", 1, 0, 1));
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    CHECK_EQ_INT(mv_import(s, path, "OneEml", NULL, NULL, &st), MV_EUNSUPPORTED);
    CHECK_EQ_INT(mv_import(s, tu_path("missing"), "OneEml", NULL, NULL, &st), MV_ENOTFOUND);
    CHECK_EQ_INT(mv_import(s, dir, "NoSuchMailbox", NULL, NULL, &st), MV_ENOTFOUND);
    mv_store_close(&s);
}

static void test_export_roundtrip(void)
{
    const char *out = tu_path("export.mbox");
    mv_store *s = NULL;
    CHECK_EQ_INT(it_open(&s), MV_OK);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    uint32_t count = 0;
    int rc = mv_export_mbox(s, "Imported", fd, &count);
    close(fd);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(count, MBOX_COUNT);
    CHECK_EQ_INT(mv_mailbox_create(s, "RoundTrip", NULL), MV_OK);
    struct mv_import_stats st;
    CHECK_EQ_INT(it_import(s, out, "RoundTrip", &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, MBOX_COUNT);
    CHECK(it_verify(s, "RoundTrip", MBOX_COUNT, 1, 1));

    /* The documented limitation: no final newline comes back with one. */
    CHECK_EQ_INT(mv_mailbox_create(s, "NoNewline", NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "NoNewline2", NULL), MV_OK);
    static const char msg[] = "Subject: no newline\n\nFrom here, no final newline";
    CHECK_EQ_INT(mv_message_append(s, "NoNewline", msg, sizeof msg - 1, 0, NULL, 0, NULL), MV_OK);
    fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    rc = mv_export_mbox(s, "NoNewline", fd, &count);
    close(fd);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(it_import(s, out, "NoNewline2", &st), MV_OK);
    void *raw = NULL;
    size_t len = 0;
    CHECK_EQ_INT(mv_message_fetch(s, "NoNewline2", 1, &raw, &len), MV_OK);
    static const char back[] = "Subject: no newline\r\n\r\nFrom here, no final newline\r\n";
    int same = len == sizeof back - 1 && memcmp(raw, back, len) == 0;
    mv_free(raw);
    CHECK(same);
    mv_store_close(&s);
}

/* An error inside a batch rolls the whole batch back: the stats must not count what was
 * rolled back as imported (a re-run imports it), and nothing of it stays in the store. */
static void test_failed_batch_not_counted(void)
{
    const char *mbox = tu_path("five.mbox");
    CHECK_EQ_INT(it_mbox_write(mbox, 5, 0), 0);
    mv_store *s = NULL;
    CHECK_EQ_INT(it_open(&s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Full", NULL), MV_OK);
    long long bodies = tu_int(mv_store_db(s), "SELECT count(*) FROM bodies");
    /* two UIDs left: the third message of the batch fails */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE mailboxes SET uidnext = 4294967293 "
                                         "WHERE name = 'Full'"),
                 SQLITE_OK);
    struct mv_import_stats st;
    CHECK_EQ_INT(mv_import(s, mbox, "Full", NULL, NULL, &st), MV_ELIMIT);
    CHECK(strstr(mv_store_errmsg(s), "UID") != NULL);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "Full", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 0);
    CHECK_EQ_INT(st.messages_imported, 0);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM bodies"), bodies);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM fts"), bodies);
    mv_store_close(&s);
}

/* What the progress callback sees of FTS5's stored segments (fts_data rows) while the first
 * batch's transaction is open (store_import.c: IMPORT_BATCH_MESSAGES = 100). */
struct it_fts_watch {
    mv_store *s;
    long long at_first;
    long long growth;
};

static int it_fts_watch_fn(void *arg, const struct mv_import_stats *st, uint64_t bytes_total)
{
    struct it_fts_watch *w = arg;
    (void)bytes_total;
    if (st->messages_seen < 100) {
        long long n = tu_int(mv_store_db(w->s), "SELECT count(*) FROM fts_data");
        if (st->messages_seen == 1) {
            w->at_first = n;
        } else if (n - w->at_first > w->growth) {
            w->growth = n - w->at_first;
        }
    }
    return 0;
}

/* The full-text rows of a batch go in at its commit, together: FTS5 writes its pending
 * terms out as a segment whenever a statement opens a statement journal, and INSERT INTO
 * messages does (trigger, foreign keys), so inserting each row with its message wrote one
 * segment per message and merged them again (~40% of an import's CPU). Inside the batch the
 * index must not grow; after it, every message is found, and the index checks out. */
static void test_fts_rows_per_batch(void)
{
    const char *mbox = tu_path("fts.mbox");
    CHECK_EQ_INT(it_mbox_write(mbox, 250, 0), 0);
    mv_store *s = NULL;
    struct mv_store_options o = it_options();
    o.flags = MV_STORE_CREATE;
    char err[512] = "";
    /* a store of its own: the other tests' bodies would be shared, not indexed again */
    CHECK_EQ_INT(mv_store_open("fts@example.org", PW, strlen(PW), &o, &s, err, sizeof err), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Fts", NULL), MV_OK);
    struct it_fts_watch w = {s, 0, 0};
    struct mv_import_stats st;
    CHECK_EQ_INT(mv_import(s, mbox, "Fts", it_fts_watch_fn, &w, &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, 250);
    CHECK_EQ_INT(w.growth, 0);
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies WHERE id NOT IN (SELECT rowid FROM fts)"),
                 0);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM fts WHERE rowid NOT IN (SELECT id FROM bodies)"),
                 0);
    CHECK_EQ_INT(tu_exec(db, "INSERT INTO fts(fts) VALUES('integrity-check')"), SQLITE_OK);
    for (int i = 0; i < 250; i += 37) {
        char sql[400];
        /* the index has no positions (schema 9): its trigrams find the row, LIKE the column */
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM messages m JOIN mailboxes b ON b.id = m.mailbox_id "
                 "WHERE b.name = 'Fts' AND m.uid = %d AND m.body_id IN (SELECT rowid FROM fts "
                 "WHERE fts MATCH mv_fts_query('IMPORT-%05d', 2) AND header LIKE "
                 "'%%IMPORT-%05d%%' AND body LIKE '%%of message %d,%%')",
                 i + 1, i, i, i);
        CHECK_EQ_INT(tu_int(db, sql), 1);
    }
    mv_store_close(&s);
}

static int it_accept_odd(void *arg, const char *name)
{
    (void)arg;
    size_t n = strlen(name);
    return n > 0 && (name[n - 1] - '0') % 2 == 1;
}

/* 2.5 passes' worth of names, created in a scrambled order: every odd one comes out once, in
 * strcmp order. */
static void test_scan_many_names(void)
{
    char dir[1024], path[1200], prev[300] = "";
    snprintf(dir, sizeof dir, "%s", tu_path("scan"));
    CHECK(mkdir(dir, 0700) == 0);
    const int count = STORE_SCAN_BATCH * 5 / 2;
    for (int i = 0; i < count; i++) {
        int k = (int)(((unsigned)i * 7919u) % (unsigned)count);
        snprintf(path, sizeof path, "%s/n%05d", dir, k);
        CHECK(tu_write_file(path, "", 0) == 0);
    }
    struct store_scan *scan = NULL;
    CHECK_EQ_INT(store_scan_open(dir, it_accept_odd, NULL, &scan), MV_OK);
    const char *name = NULL;
    int seen = 0, rc;
    while ((rc = store_scan_next(scan, &name)) == 1) {
        char want[16];
        snprintf(want, sizeof want, "n%05d", 2 * seen + 1);
        if (strcmp(name, want) != 0 || strcmp(prev, name) >= 0) {
            break;
        }
        snprintf(prev, sizeof prev, "%s", name);
        seen++;
    }
    store_scan_close(&scan);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(seen, count / 2);
    CHECK_EQ_INT(store_scan_open(tu_path("no-such-dir"), NULL, NULL, &scan), MV_ENOTFOUND);
}

/* ---- memory bound ----------------------------------------------------------------------- */

static long it_hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) {
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib;
}

/* The re-executed child: imports argv mbox into INBOX and writes "rc count seconds hwm". */
static int it_child(const char *root, const char *mbox, const char *report)
{
    struct mv_store_options o = it_options();
    o.root = root;
    o.flags = MV_STORE_CREATE;
    mv_store *s = NULL;
    struct mv_import_stats st = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = it_open_with(&o, &s);
    if (rc == MV_OK) {
        rc = mv_import(s, mbox, "INBOX", NULL, NULL, &st);
    }
    mv_store_close(&s);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    FILE *f = fopen(report, "w");
    if (f == NULL) {
        return 1;
    }
    fprintf(f, "%d %llu %.3f %ld\n", rc, (unsigned long long)st.messages_imported, seconds,
            it_hwm_kib());
    return fclose(f) == 0 && rc == MV_OK ? 0 : 1;
}

/* An mbox of about mb MiB: mostly small messages, every 500th one MEM_BIG bytes (the first
 * of them is message 7, so even a small mbox has the largest message). */
static int it_mem_mbox(const char *path, size_t mb, int *count)
{
    FILE *f = fopen(path, "wb");
    struct it_buf b = {0};
    size_t total = 0;
    int i = 0;
    for (; f != NULL && total < (mb << 20); i++) {
        it_message(&b, i, i % 500 == 7 ? MEM_BIG : (size_t)(i % 7) * 4096);
        it_mbox_put(f, b.p, b.len, BASE_DATE + i);
        total += b.len;
    }
    free(b.p);
    *count = i;
    return f != NULL && fclose(f) == 0 ? 0 : -1;
}

struct it_mem_result {
    int rc;
    unsigned long long imported;
    double seconds;
    long hwm_kib;    /* the child's VmHWM: its peak RSS after exec */
    long maxrss_kib; /* wait4's ru_maxrss: includes the pages it shared with us before exec */
};

/* Imports mbox in this program re-executed (a fresh address space) into a new store. */
static int it_mem_run(const char *mbox, const char *root, struct it_mem_result *r)
{
    const char *report = tu_path("child.report");
    pid_t pid = fork();
    if (pid == 0) {
        /* ASan's quarantine holds freed memory back (256 MiB by default): switch it off so
         * the RSS says what the importer holds, not what ASan delays freeing. */
        setenv("ASAN_OPTIONS", "detect_leaks=1:quarantine_size_mb=0:abort_on_error=1", 1);
        execl("/proc/self/exe", "test_import", "--import-child", root, mbox, report, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        return -1;
    }
    FILE *f = fopen(report, "r");
    if (f == NULL) {
        return -1;
    }
    int fields = fscanf(f, "%d %llu %lf %ld", &r->rc, &r->imported, &r->seconds, &r->hwm_kib);
    fclose(f);
    r->maxrss_kib = ru.ru_maxrss;
    return fields == 4 ? 0 : -1;
}

static void test_memory_bound(void)
{
    const char *big = tu_path("big.mbox"), *small = tu_path("small.mbox");
    char root_big[1024], root_small[1024];
    snprintf(root_big, sizeof root_big, "%s", tu_path("memroot-big"));
    snprintf(root_small, sizeof root_small, "%s", tu_path("memroot-small"));
    int count_big = 0, count_small = 0;
    CHECK(it_mem_mbox(big, MEM_MBOX_MB, &count_big) == 0);
    CHECK(it_mem_mbox(small, MEM_MBOX_MB / 10, &count_small) == 0);
    struct it_mem_result rb, rs;
    CHECK(it_mem_run(small, root_small, &rs) == 0);
    CHECK(it_mem_run(big, root_big, &rb) == 0);
    CHECK_EQ_INT(rs.rc, MV_OK);
    CHECK_EQ_INT(rb.rc, MV_OK);
    CHECK_EQ_INT(rs.imported, count_small);
    CHECK_EQ_INT(rb.imported, count_big);
    double mib = (double)tu_file_size(big) / 1048576.0;
    long bound_kib = (64L << 10) + 4L * (long)(MEM_BIG >> 10);
    printf("  %d messages, %.1f MiB in %.1f s (%.1f MiB/s); peak RSS %ld MiB (ru_maxrss %ld "
           "MiB, pre-exec pages included); %.1f MiB input: %ld MiB; bound %ld MiB\n",
           count_big, mib, rb.seconds, mib / rb.seconds, rb.hwm_kib >> 10, rb.maxrss_kib >> 10,
           (double)tu_file_size(small) / 1048576.0, rs.hwm_kib >> 10, bound_kib >> 10);
    CHECK(rb.hwm_kib > 0 && rb.hwm_kib < bound_kib);
    /* Ten times the input, the same largest message: at most the page cache (8 MiB) and
     * allocator noise more. */
    CHECK(rb.hwm_kib < rs.hwm_kib + (12L << 10));
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--import-child") == 0) {
        return it_child(argv[2], argv[3], argv[4]);
    }
    TEST(test_mbox_exact_and_rerun);
    TEST(test_mbox_limit_and_stop);
    TEST(test_sigkill_and_resume);
    TEST(test_maildir);
    TEST(test_maildir_lf_stored_crlf);
    TEST(test_eml_directory_and_file);
    TEST(test_export_roundtrip);
    TEST(test_failed_batch_not_counted);
    TEST(test_fts_rows_per_batch);
    TEST(test_scan_many_names);
    TEST(test_memory_bound);
    return th_summary();
}
