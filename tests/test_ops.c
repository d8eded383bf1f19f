/*
 * test_ops.c -- statistics, Prometheus output, maintenance, checks, doctor and query plans
 * (src/ops/ops_stats.c, ops_prometheus.c, ops_maintain.c, ops_check.c, ops_doctor.c,
 * ops_explain.c).
 *
 * Stores live under the test binary's temp directory with a small KDF iteration count.
 * Corruptions are made deliberately through raw SQL on mv_store_db() (with foreign keys
 * off where a constraint would stop them) or by flipping a byte of the file, and each must
 * be named by mv_store_check(). The doctor's broken conditions are set up one at a time and
 * each must give a FAIL of its own check.
 */
#include "harness.h"
#include "ops/ops_inspect.h"
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TO_PASSWORD "ops test password"

static struct mv_store_options to_options(const char *root)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path(root);
    o.kdf_iter = TU_KDF_ITER;
    return o;
}

static int to_open(const char *root, const char *address, mv_store **s)
{
    char err[256] = "";
    struct mv_store_options o = to_options(root);
    int rc = mv_store_init(address, TO_PASSWORD, strlen(TO_PASSWORD), &o, err, sizeof err);
    if (rc != MV_OK && rc != MV_EEXISTS) {
        fprintf(stderr, "  init %s: %s\n", address, err);
        return rc;
    }
    rc = mv_store_open(address, TO_PASSWORD, strlen(TO_PASSWORD), &o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open %s: %s\n", address, err);
    }
    return rc;
}

/* Appends count small messages, numbered from first, each with its own body. */
static int to_fill(mv_store *s, int first, int count)
{
    char msg[512];
    for (int i = first; i < first + count; i++) {
        int n = snprintf(msg, sizeof msg,
                         "From: Sender %d <s%d@example.net>\r\nTo: u@example.org\r\n"
                         "Subject: Message number %d\r\nMessage-ID: <m%d@example.net>\r\n\r\n"
                         "Body of message %d with some words: alpha beta gamma delta %d.\r\n",
                         i, i, i, i, i, i * 7919);
        int rc = mv_message_append(s, "INBOX", msg, (size_t)n, 0, NULL, 0, NULL);
        if (rc != MV_OK) {
            fprintf(stderr, "  append %d: %s\n", i, mv_store_errmsg(s));
            return rc;
        }
    }
    return MV_OK;
}

/* A message with a base64 attachment large enough to be stored apart. */
static int to_append_attachment(mv_store *s)
{
    /* 1,700 base64 lines of 78 bytes: over STORE_SPLIT_MIN (128 KiB), so stored apart */
    enum { TO_LINES = 1700, TO_MSG_SIZE = TO_LINES * 78 + 512 };
    char *msg = malloc(TO_MSG_SIZE);
    if (msg == NULL) {
        return MV_ENOMEM;
    }
    int n = snprintf(msg, TO_MSG_SIZE,
                     "From: a@example.org\r\nSubject: att\r\nMIME-Version: 1.0\r\n"
                     "Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\n"
                     "Content-Type: text/plain\r\n\r\nhi\r\n--b\r\n"
                     "Content-Type: application/octet-stream\r\n"
                     "Content-Transfer-Encoding: base64\r\n\r\n");
    for (int line = 0; line < TO_LINES; line++) {
        for (int j = 0; j < 76; j++) {
            msg[n++] =
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(line + j * 3) %
                                                                                   64];
        }
        msg[n++] = '\r';
        msg[n++] = '\n';
    }
    n += snprintf(msg + n, TO_MSG_SIZE - (size_t)n, "--b--\r\n");
    int rc = mv_message_append(s, "INBOX", msg, (size_t)n, 0, NULL, 0, NULL);
    free(msg);
    return rc;
}

/* ---- statistics ------------------------------------------------------------------------ */

static void test_inspect_matches_pragmas(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("stats", "alice@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 20), MV_OK);
    struct mv_store_inspection in;
    CHECK_EQ_INT(mv_store_inspect(s, &in), MV_OK);
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(in.page_size, tu_int(db, "PRAGMA page_size"));
    CHECK_EQ_INT(in.page_count, tu_int(db, "PRAGMA page_count"));
    CHECK_EQ_INT(in.freelist_count, tu_int(db, "PRAGMA freelist_count"));
    CHECK_EQ_INT(in.stats.messages, 20);
    CHECK_EQ_INT(in.stats.schema_version, tu_int(db, "PRAGMA user_version"));
    CHECK_EQ_INT(in.cipher, MV_CIPHER_CHACHA20);
    CHECK_EQ_INT(in.kdf_iter, TU_KDF_ITER);
    CHECK_EQ_INT(in.file_bytes, tu_file_size(tu_path("stats/example.org/alice.db")));
    CHECK(in.checkpoint_busy == 0 && in.checkpoint_log_frames >= in.checkpoint_done_frames);
    CHECK(in.fragmentation >= 0.0 && in.fragmentation <= 1.0);
    CHECK_EQ_INT(in.last_maintain_at, 0);
    CHECK_EQ_INT(in.last_quick_check_ok, -1);
    mv_store_close(&s);
}

static void test_file_inspect_and_scan(void)
{
    const char *names[] = {"bob@a.example", "carol@a.example", "dave@b.example"};
    for (size_t i = 0; i < 3; i++) {
        mv_store *s = NULL;
        CHECK_EQ_INT(to_open("scan", names[i], &s), MV_OK);
        mv_store_close(&s);
    }
    struct mv_store_options o = to_options("scan");
    char err[256];
    CHECK_EQ_INT(
        mv_deliver_sealed("carol@a.example", "Subject: x\r\n\r\nhi\r\n", 17, &o, err, sizeof err),
        MV_OK);
    CHECK(chmod(tu_path("scan/b.example/dave.db"), 0644) == 0);
    mv_root_scan *scan = NULL;
    struct mv_store_file f;
    CHECK_EQ_INT(mv_root_scan_begin(&o, &scan), MV_OK);
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ_INT(mv_root_scan_next(scan, &f), 1);
        CHECK(strcmp(f.address, names[i]) == 0);
        CHECK_EQ_INT(f.page_size, 4096);
        CHECK_EQ_INT(f.cipher, MV_CIPHER_CHACHA20);
        CHECK_EQ_INT(f.reserve_bytes, 32);
        CHECK_EQ_INT(f.header_ok, 1);
        CHECK_EQ_INT(f.page_count, f.file_bytes / 4096);
        CHECK_EQ_INT(f.pending, i == 1 ? 1 : 0);
        CHECK_EQ_INT(f.modes_ok, i == 2 ? 0 : 1);
    }
    CHECK_EQ_INT(mv_root_scan_next(scan, &f), 0);
    mv_root_scan_end(&scan);
    CHECK(scan == NULL);
    CHECK_EQ_INT(mv_store_file_inspect("nobody@a.example", &o, &f), MV_ENOTFOUND);
    CHECK_EQ_INT(mv_store_file_inspect("bob@a.example", &o, &f), MV_OK);
    CHECK(strstr(f.db_path, "a.example/bob.db") != NULL);
}

/* Runs the Prometheus writer over one store into a string (static buffer). */
static const char *to_prometheus(unsigned flags,
                                 const struct mv_store_file *f,
                                 const struct mv_store_inspection *in,
                                 const struct mv_mailbox_info *m)
{
    static char text[65536];
    mv_prometheus *p = NULL;
    text[0] = '\0';
    if (mv_prometheus_begin(flags, &p) != MV_OK || mv_prometheus_add(p, f, in) != MV_OK ||
        (m != NULL && mv_prometheus_add_mailbox(p, f->address, m) != MV_OK)) {
        mv_prometheus_end(&p);
        return text;
    }
    const char *path = tu_path("prometheus.txt");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int rc = fd >= 0 ? mv_prometheus_write(p, fd) : MV_EIO;
    if (fd >= 0) {
        close(fd);
    }
    mv_prometheus_end(&p);
    size_t len = 0;
    uint8_t *bytes = rc == MV_OK ? tu_read_file(path, &len) : NULL;
    if (bytes != NULL && len < sizeof text) {
        memcpy(text, bytes, len);
        text[len] = '\0';
    }
    free(bytes);
    return text;
}

static void test_prometheus(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("prom", "erin@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 3), MV_OK);
    struct mv_store_inspection in;
    struct mv_store_file f;
    struct mv_mailbox_info m;
    struct mv_store_options o = to_options("prom");
    CHECK_EQ_INT(mv_store_inspect(s, &in), MV_OK);
    CHECK_EQ_INT(mv_store_file_inspect("erin@example.org", &o, &f), MV_OK);
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &m), MV_OK);
    const char *t = to_prometheus(0, &f, &in, &m);
    CHECK(strstr(t, "# TYPE mailvault_store_messages gauge\nmailvault_store_messages 3\n") != NULL);
    CHECK(strstr(t, "mailvault_stores{cipher=\"chacha20\"} 1\n") != NULL);
    CHECK(strstr(t, "erin") == NULL);              /* no address without the flag */
    CHECK(strstr(t, "mailvault_mailbox") == NULL); /* nor mailbox names */
    t = to_prometheus(MV_PROMETHEUS_USER_LABELS, &f, &in, &m);
    CHECK(strstr(t, "mailvault_store_messages{user=\"erin@example.org\"} 3\n") != NULL);
    CHECK(
        strstr(t, "mailvault_mailbox_messages{user=\"erin@example.org\",mailbox=\"INBOX\"} 3\n") !=
        NULL);
    t = to_prometheus(0, &f, NULL, NULL); /* keyless: no keyed family at all */
    CHECK(strstr(t, "mailvault_store_messages") == NULL);
    CHECK(strstr(t, "mailvault_stores_inspected 0\n") != NULL);
    CHECK(strstr(t, "mailvault_store_file_bytes ") != NULL);
    mv_store_close(&s);
}

/* ---- maintenance ------------------------------------------------------------------------ */

static void test_maintain_vacuums_slack(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("maint", "frag@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 600), MV_OK);
    uint32_t n = 0;
    /* Every other message goes: half-empty pages that auto_vacuum cannot give back. */
    for (uint32_t uid = 1; uid <= 600; uid += 2) {
        char set[16];
        snprintf(set, sizeof set, "%u", uid);
        CHECK_EQ_INT(mv_flags_set(s, "INBOX", set, MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n), MV_OK);
    }
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 300);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "PRAGMA freelist_count"), 0); /* auto_vacuum=FULL */
    struct mv_maintain_report r;
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    printf("  # slack %.3f, free %.3f, %llu -> %llu bytes\n", r.slack_ratio, r.free_ratio,
           (unsigned long long)r.bytes_before, (unsigned long long)r.bytes_after);
    CHECK(r.slack_ratio > 0.15);
    CHECK_EQ_INT(r.vacuum, MV_VACUUM_DONE);
    CHECK(r.bytes_after < r.bytes_before);
    CHECK_EQ_INT(r.quick_check, MV_QUICK_CHECK_OK); /* never ran before: due */
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM messages"), 300);
    /* Right after: slack gone, nothing to do, quick_check not due for 7 days. */
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.vacuum, MV_VACUUM_NOT_NEEDED);
    CHECK_EQ_INT(r.quick_check, MV_QUICK_CHECK_NOT_DUE);
    CHECK(r.quick_check_last_at > 0);
    struct mv_store_inspection in;
    CHECK_EQ_INT(mv_store_inspect(s, &in), MV_OK);
    CHECK(in.last_maintain_at > 0 && in.last_quick_check_ok == 1);
    mv_store_close(&s);
}

static void test_maintain_below_threshold(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("maint", "tidy@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 50), MV_OK);
    struct mv_maintain_report r;
    CHECK_EQ_INT(mv_store_maintain(s, NULL, &r), MV_OK);
    CHECK(r.slack_ratio >= 0.0 && r.slack_ratio <= 0.15);
    CHECK_EQ_INT(r.vacuum, MV_VACUUM_NOT_NEEDED);
    CHECK_EQ_INT(r.checkpoint_busy, 0);
    CHECK_EQ_INT(r.wal_truncated, 1); /* nobody else has the store open */
    mv_store_close(&s);
}

/* A reader on another handle holds the WAL: maintenance reports it, does not truncate,
 * and does not wait for it. */
static void test_maintain_with_a_reader(void)
{
    mv_store *s = NULL, *reader = NULL;
    CHECK_EQ_INT(to_open("maint", "busy@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 20), MV_OK);
    CHECK_EQ_INT(to_open("maint", "busy@example.org", &reader), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(reader), "BEGIN; SELECT count(*) FROM messages"), SQLITE_OK);
    CHECK_EQ_INT(to_fill(s, 21, 20), MV_OK); /* frames past the reader's snapshot */
    struct mv_maintain_report r;
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    o.flags = MV_MAINTAIN_NO_VACUUM;
    time_t start = time(NULL);
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK(time(NULL) - start < 20); /* never the 30 s busy timeout (loaded machines: slack) */
    CHECK(r.checkpoint_busy == 1 || r.checkpoint_done_frames < r.checkpoint_log_frames);
    CHECK_EQ_INT(r.wal_truncated, 0);
    CHECK_EQ_INT(tu_exec(mv_store_db(reader), "COMMIT"), SQLITE_OK);
    mv_store_close(&reader);
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK); /* idle now */
    CHECK_EQ_INT(r.checkpoint_busy, 0);
    CHECK_EQ_INT(r.wal_truncated, 1);
    mv_store_close(&s);
}

static void test_maintain_refuses_without_disk(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("maint", "full@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 10), MV_OK);
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    o.flags = MV_MAINTAIN_FORCE_VACUUM;
    struct mv_maintain_report r;
    setenv("MAILVAULT_TEST_FREE_BYTES", "4096", 1);
    int rc = mv_store_maintain(s, &o, &r);
    unsetenv("MAILVAULT_TEST_FREE_BYTES");
    CHECK_EQ_INT(rc, MV_ENOSPC);
    CHECK_EQ_INT(r.vacuum, MV_VACUUM_REFUSED_DISK);
    CHECK_EQ_INT(r.disk_free_bytes, 4096);
    CHECK(strstr(mv_store_errmsg(s), "VACUUM refused") != NULL);
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK); /* with the real disk it runs */
    CHECK_EQ_INT(r.vacuum, MV_VACUUM_DONE);
    mv_store_close(&s);
}

/* min_interval_s: a second call right after a run does nothing; a run recorded long ago, or
 * in the future (a clock set back), lets it run; without the option every call runs. */
static void test_maintain_min_interval(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("maint", "often@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 10), MV_OK);
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    o.min_interval_s = 3600;
    struct mv_maintain_report r;
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK); /* never maintained: runs */
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_NONE);
    CHECK_EQ_INT(r.maintain_last_at, 0);
    CHECK_EQ_INT(r.quick_check, MV_QUICK_CHECK_OK);
    struct mv_store_inspection in;
    CHECK_EQ_INT(mv_store_inspect(s, &in), MV_OK);
    int64_t first_at = in.last_maintain_at;
    CHECK(first_at > 0);

    o.flags = MV_MAINTAIN_QUICK_CHECK | MV_MAINTAIN_FORCE_VACUUM; /* would run both if run */
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_RECENT);
    CHECK_EQ_INT(r.maintain_last_at, first_at);
    CHECK_EQ_INT(r.vacuum, MV_VACUUM_NOT_NEEDED);
    CHECK_EQ_INT(r.quick_check, MV_QUICK_CHECK_NOT_DUE);
    CHECK_EQ_INT(mv_store_inspect(s, &in), MV_OK);
    CHECK_EQ_INT(in.last_maintain_at, first_at); /* a skip records nothing */

    /* A run two hours ago (the record written as mv_store_maintain writes it). */
    int64_t old_at = (int64_t)time(NULL) - 7200;
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE meta SET value = %lld WHERE key = 'ops:maintained_at'",
             (long long)old_at);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), sql), SQLITE_OK);
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_NONE);
    CHECK_EQ_INT(r.maintain_last_at, old_at);
    CHECK_EQ_INT(r.vacuum, MV_VACUUM_DONE);
    CHECK_EQ_INT(r.quick_check, MV_QUICK_CHECK_OK);
    CHECK_EQ_INT(mv_store_inspect(s, &in), MV_OK);
    CHECK(in.last_maintain_at > old_at);

    /* A record in the future counts as due. */
    snprintf(sql, sizeof sql, "UPDATE meta SET value = %lld WHERE key = 'ops:maintained_at'",
             (long long)time(NULL) + 7200);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), sql), SQLITE_OK);
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_NONE);

    /* Without the option, a call right after a run still runs. */
    o.min_interval_s = 0;
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_NONE);
    CHECK(r.maintain_last_at > 0);
    CHECK_EQ_INT(r.quick_check, MV_QUICK_CHECK_OK);
    CHECK_EQ_INT(mv_store_maintain(s, NULL, &r), MV_OK);
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_NONE);
    mv_store_close(&s);
}

/* store_bytes_max: a store over it is left alone, and a due one at or under it runs. */
static void test_maintain_bytes_max(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("maint", "large@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 10), MV_OK);
    /* The WAL's pages in the file now: a later checkpoint (a read may run one) would grow
     * the file between the two measurements below. */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    o.min_interval_s = 3600;
    o.store_bytes_max = 4096;
    struct mv_maintain_report r;
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_SIZE);
    CHECK(r.bytes_before > 4096);
    struct mv_store_inspection in;
    CHECK_EQ_INT(mv_store_inspect(s, &in), MV_OK);
    CHECK_EQ_INT(in.last_maintain_at, 0);
    o.store_bytes_max = r.bytes_before;
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_NONE);
    o.store_bytes_max = 4096; /* recent wins over size: the quieter answer for a server */
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.skipped, MV_MAINTAIN_SKIPPED_RECENT);
    mv_store_close(&s);
}

/* ---- checks ------------------------------------------------------------------------------- */

struct to_problems {
    char whats[2048];
    int count;
};

static void to_problem(void *arg, const char *what, const char *detail)
{
    struct to_problems *p = arg;
    size_t used = strlen(p->whats);
    snprintf(p->whats + used, sizeof p->whats - used, "%s;", what);
    p->count++;
    printf("  #   %s: %s\n", what, detail);
}

static void test_check_clean(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("check", "clean@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 30), MV_OK);
    CHECK_EQ_INT(to_append_attachment(s), MV_OK);
    struct to_problems p = {"", 0};
    struct mv_check_report r;
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_OK);
    CHECK_EQ_INT(r.problems, 0);
    CHECK(r.pages_read + r.wal_frames_read >=
          (uint64_t)tu_int(mv_store_db(s), "PRAGMA page_count"));
    CHECK(r.wal_frames_read > 0); /* the WAL of an open store holds the recent pages */
    mv_store_close(&s);
}

/* Breaks a fresh store with sql and expects mv_store_check to name what. */
static void to_check_finds(const char *name, const char *sql, const char *what)
{
    char address[64];
    mv_store *s = NULL;
    snprintf(address, sizeof address, "%s@example.org", name);
    CHECK_EQ_INT(to_open("check", address, &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 5), MV_OK);
    CHECK_EQ_INT(to_append_attachment(s), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), sql), SQLITE_OK);
    struct to_problems p = {"", 0};
    struct mv_check_report r;
    printf("  # %s:\n", name);
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_ECORRUPT);
    CHECK(r.problems > 0 && p.count == (int)r.problems);
    if (strstr(p.whats, what) == NULL) {
        fprintf(stderr, "  %s: want a '%s' problem, got '%s'\n", name, what, p.whats);
    }
    CHECK(strstr(p.whats, what) != NULL);
    mv_store_close(&s);
}

static void test_check_finds_each_invariant(void)
{
    to_check_finds("body_refcount", "UPDATE body_refs SET refcount = refcount + 1 WHERE id = 1",
                   "refcount");
    to_check_finds("attachment_refcount", "UPDATE attachments SET refcount = refcount + 2",
                   "refcount");
    to_check_finds("uidnext", "UPDATE mailboxes SET uidnext = 3 WHERE name = 'INBOX'", "uidnext");
    to_check_finds("counters", "UPDATE mailboxes SET unseen_count = unseen_count + 1", "counters");
    to_check_finds("modseq", "UPDATE mailboxes SET highestmodseq = 1 WHERE name = 'INBOX'",
                   "modseq");
    to_check_finds("fts_missing", "DELETE FROM fts WHERE rowid = 2", "fts");
    to_check_finds("fts_extra", "INSERT INTO fts(rowid, header, body) VALUES(9999, 'x', 'z')",
                   "fts");
    to_check_finds("mailbox_id",
                   "PRAGMA foreign_keys=OFF; UPDATE messages SET mailbox_id = 999 WHERE uid = 1; "
                   "PRAGMA foreign_keys=ON",
                   "mailbox");
    to_check_finds("body_bytes",
                   "PRAGMA foreign_keys=OFF; DELETE FROM bodies_data WHERE id = 3; "
                   "PRAGMA foreign_keys=ON",
                   "bytes");
    to_check_finds("header", "UPDATE bodies SET header_stored = stored_size + 1 WHERE id = 2",
                   "header");
    /* A body whose bytes are not the message recorded: a read for a client no longer checks
     * the SHA-256 (the cipher authenticates every page), the check reassembles every body. */
    to_check_finds("body_digest", "UPDATE bodies SET sha256 = zeroblob(32) WHERE id = 1", "body");
}

/* Every INBOX message as the listing and SEARCH see it (the body_headers side of a message:
 * dates, subject, addresses, ids, thread), one line each, into out. The number of messages;
 * -1 if the search failed. */
static int to_listing(mv_store *s, const struct mv_search_query *query, char *out, size_t size)
{
    mv_search *it = NULL;
    size_t used = 0;
    out[0] = '\0';
    if (mv_search_begin(s, query, &it) != MV_OK) {
        return -1;
    }
    struct mv_message_info m;
    int n = 0, rc;
    while ((rc = mv_search_next(it, &m)) == 1) {
        int w = snprintf(out + used, size - used, "%u|%lld|%s|%s|%s|%s|%s|%s|%lld\n", m.uid,
                         (long long)m.sent_date, m.subject, m.from, m.to, m.cc, m.message_id,
                         m.in_reply_to, (long long)m.thread_id);
        used += w > 0 && (size_t)w < size - used ? (size_t)w : 0;
        n++;
    }
    mv_search_end(&it);
    return rc == 0 ? n : -1;
}

/* How many INBOX messages a search for subject (or, with text set, for words) finds. */
static int to_count(mv_store *s, const char *subject, const char *text)
{
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    q.mailbox = "INBOX";
    q.subject = subject;
    q.text = text;
    char out[4096];
    return to_listing(s, &q, out, sizeof out);
}

/* A body that lost its header fields row (schema 7's body_headers) and one that lost its
 * full-text row: check names both, repair makes both again from the stored bytes with the
 * code append uses, and the listing, SUBJECT and full-text searches are what they were. */
static void test_repair_rebuilds_from_bytes(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("repair", "bytes@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 5), MV_OK);
    CHECK_EQ_INT(to_append_attachment(s), MV_OK);
    struct mv_search_query all = MV_SEARCH_QUERY_INIT;
    all.mailbox = "INBOX";
    char before[8192], after[8192];
    CHECK_EQ_INT(to_listing(s, &all, before, sizeof before), 6);
    CHECK_EQ_INT(to_count(s, "Message number 2", NULL), 1);
    CHECK_EQ_INT(to_count(s, NULL, "23757"), 1); /* message 3's body: 3 * 7919 */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "DELETE FROM body_headers WHERE body_id = 2;"
                                         "DELETE FROM fts WHERE rowid = 3"),
                 SQLITE_OK);
    CHECK_EQ_INT(to_count(s, "Message number 2", NULL), 0); /* what the loss does */
    CHECK_EQ_INT(to_count(s, NULL, "23757"), 0);
    struct to_problems p = {"", 0};
    struct mv_check_report r;
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_ECORRUPT);
    CHECK(strstr(p.whats, "headers;") != NULL && strstr(p.whats, "fts;") != NULL);
    struct mv_repair_report rep;
    CHECK_EQ_INT(mv_store_repair(s, &rep), MV_OK);
    CHECK_EQ_INT(rep.headers_rebuilt, 1);
    CHECK_EQ_INT(rep.fts_rows_added, 1);
    CHECK_EQ_INT(rep.fts_rows, 6);
    struct to_problems q = {"", 0};
    CHECK_EQ_INT(mv_store_check(s, to_problem, &q, &r), MV_OK);
    CHECK_EQ_INT(r.problems, 0);
    CHECK_EQ_INT(to_listing(s, &all, after, sizeof after), 6);
    CHECK(strcmp(after, before) == 0);
    CHECK_EQ_INT(to_count(s, "Message number 2", NULL), 1);
    CHECK_EQ_INT(to_count(s, NULL, "23757"), 1);
    mv_store_close(&s);
}

/* A body no message uses, left at its old reference count (a message row deleted by hand):
 * repair sets it to 0, as an expunge leaves it, check is clean, and the purge deletes it.
 * Before, repair left it at 1 and check kept naming it. */
static void test_repair_unused_body(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("repair", "unused@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 3), MV_OK);
    CHECK_EQ_INT(mv_store_purge(s, 0, NULL), MV_OK); /* none waits: the handle stops looking */
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(tu_exec(db, "DELETE FROM messages WHERE uid = 2"), SQLITE_OK);
    struct to_problems p = {"", 0};
    struct mv_check_report r;
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_ECORRUPT);
    CHECK(strstr(p.whats, "refcount;") != NULL);
    struct mv_repair_report rep;
    CHECK_EQ_INT(mv_store_repair(s, &rep), MV_OK);
    CHECK_EQ_INT(rep.refcounts_fixed, 1);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM body_refs WHERE refcount = 0"), 1);
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_OK);
    uint64_t left = 1;
    CHECK_EQ_INT(mv_store_purge(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies"), 2);
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_OK);
    mv_store_close(&s);
}

/* A flipped bit in the file and one in the WAL, made while the store is open: the pager's
 * cache may hold the good page, the check reads the disk. */
static void test_check_finds_a_tampered_page(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("check", "tamper@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 40), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
    CHECK_EQ_INT(to_fill(s, 41, 5), MV_OK); /* and some frames in the WAL */
    const char *db = tu_path("check/example.org/tamper.db");
    const char *wal = tu_path("check/example.org/tamper.db-wal");
    long long size = tu_file_size(db);
    CHECK(size > 8LL * 4096 && tu_file_size(wal) > 32 + 2 * (24 + 4096));
    CHECK(tu_flip_bit(db, size - 4096 + 1000, 3) == 0);           /* inside the last page */
    CHECK(tu_flip_bit(wal, 32 + (24 + 4096) + 24 + 500, 1) == 0); /* inside frame 2 */
    struct to_problems p = {"", 0};
    struct mv_check_report r;
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_ECORRUPT);
    CHECK(strstr(p.whats, "page") != NULL);
    CHECK(r.problems >= 2);
    /* Frame 2 breaks the checksum chain, but committed frames chain after it: damage
     * inside the log, not a torn tail, so every frame after it is still read. */
    CHECK(r.wal_frames_read > 2);
    mv_store_close(&s);
}

/* Appends to wal a copy of its last frame made torn: a bit flipped in its page (partial 0),
 * or only its header and half its page (partial 1), as a write that failed on a full disk
 * leaves it. Its salts and commit field are those of a valid commit frame. */
static int to_tear_wal_tail(const char *wal, int partial)
{
    size_t len = 0;
    uint8_t *bytes = tu_read_file(wal, &len);
    size_t frame = 24 + 4096;
    if (bytes == NULL || len < 32 + frame || (len - 32) % frame != 0) {
        free(bytes);
        return -1;
    }
    uint8_t *torn = bytes + len - frame;
    torn[24 + 1000] ^= 0x10;
    FILE *f = fopen(wal, "ab");
    size_t n = partial ? 24 + 4096 / 2 : frame;
    int rc = f != NULL && fwrite(torn, 1, n, f) == n ? 0 : -1;
    if (f != NULL && fclose(f) != 0) {
        rc = -1;
    }
    free(bytes);
    return rc;
}

/* A torn frame after the WAL's last commit is not part of the log: SQLite's recovery drops
 * it, and so must check (issue 15.3: check trusted the frame header's salts and commit
 * field and reported "WAL frame N ... 1 problem"). Checked on the open store (its WAL index
 * in place) and on a copy opened afresh (recovery through the VFS); the next commit then
 * overwrites the torn frame. */
static void to_check_torn_tail(const char *name, int partial)
{
    char address[64], path[256], copy_address[64], copy_path[256];
    snprintf(address, sizeof address, "%s@example.org", name);
    snprintf(path, sizeof path, "check/example.org/%s.db", name);
    snprintf(copy_address, sizeof copy_address, "%s-copy@example.org", name);
    snprintf(copy_path, sizeof copy_path, "check/example.org/%s-copy.db", name);
    mv_store *s = NULL, *copy = NULL;
    CHECK_EQ_INT(to_open("check", copy_address, &copy), MV_OK);
    mv_store_close(&copy);
    CHECK_EQ_INT(to_open("check", address, &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 20), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
    CHECK_EQ_INT(to_fill(s, 21, 4), MV_OK);
    char *db = strdup(tu_path(path));
    char wal[300];
    snprintf(wal, sizeof wal, "%s-wal", db);
    CHECK(to_tear_wal_tail(wal, partial) == 0);
    CHECK_EQ_INT(tu_copy_db(db, tu_path(copy_path)), 0);
    struct to_problems p = {"", 0};
    struct mv_check_report r;
    printf("  # %s, open store:\n", name);
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_OK);
    CHECK_EQ_INT(r.problems, 0);
    CHECK(r.wal_frames_read > 0);
    CHECK_EQ_INT(to_fill(s, 25, 2), MV_OK); /* written over the torn frame */
    CHECK_EQ_INT(mv_store_check(s, to_problem, &p, &r), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM messages"), 26);
    mv_store_close(&s);
    printf("  # %s, a copy opened afresh:\n", name);
    CHECK_EQ_INT(to_open("check", copy_address, &copy), MV_OK);
    CHECK_EQ_INT(mv_store_check(copy, to_problem, &p, &r), MV_OK);
    CHECK_EQ_INT(r.problems, 0);
    CHECK_EQ_INT(tu_int(mv_store_db(copy), "SELECT count(*) FROM messages"), 24);
    mv_store_close(&copy);
    free(db);
}

static void test_check_ignores_a_torn_wal_tail(void)
{
    to_check_torn_tail("torn_flipped", 0);
    to_check_torn_tail("torn_partial", 1);
}

/* ---- doctor ------------------------------------------------------------------------------ */

struct to_doctor {
    char fails[4096];
};

static void to_doctor_line(void *arg, int status, const char *check, const char *detail)
{
    struct to_doctor *d = arg;
    static const char *const words[] = {"OK", "WARN", "FAIL"};
    printf("  #   %-4s %s: %s\n", words[status], check, detail);
    if (status == MV_DOCTOR_FAIL) {
        size_t used = strlen(d->fails);
        snprintf(d->fails + used, sizeof d->fails - used, "%s;", check);
    }
}

/* Runs the doctor on root "doctor"; returns the FAILs as "check;check;". */
static const char *to_doctor_fails(uint64_t wal_max)
{
    static struct to_doctor d;
    struct mv_doctor_options o = MV_DOCTOR_OPTIONS_INIT;
    struct mv_doctor_summary sum;
    o.root = tu_path("doctor");
    o.wal_bytes_max = wal_max;
    d.fails[0] = '\0';
    if (mv_doctor_run(&o, to_doctor_line, &d, &sum) != MV_OK) {
        return "doctor did not run";
    }
    return d.fails;
}

static void test_doctor(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(to_open("doctor", "gina@example.org", &s), MV_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(to_open("doctor", "hank@example.org", &s), MV_OK);
    mv_store_close(&s);
    printf("  # healthy:\n");
    CHECK(strcmp(to_doctor_fails(64u << 20), "") == 0);

    printf("  # too little disk:\n");
    setenv("MAILVAULT_TEST_FREE_BYTES", "1000", 1);
    const char *fails = to_doctor_fails(64u << 20);
    unsetenv("MAILVAULT_TEST_FREE_BYTES");
    CHECK(strcmp(fails, "disk;") == 0);

    printf("  # a store readable by others:\n");
    const char *db = tu_path("doctor/example.org/gina.db");
    CHECK(chmod(db, 0644) == 0);
    CHECK(strcmp(to_doctor_fails(64u << 20), "permissions;") == 0);
    CHECK(chmod(db, 0600) == 0);

    printf("  # a WAL over the limit:\n");
    const char *wal = tu_path("doctor/example.org/hank.db-wal");
    CHECK(tu_write_file(wal, "0123456789", 10) == 0);
    CHECK(chmod(wal, 0600) == 0);
    CHECK(strcmp(to_doctor_fails(5), "wal;") == 0);
    unlink(wal);

    printf("  # a plaintext database among the stores:\n");
    sqlite3 *plain = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(tu_path("doctor/example.org/plain.db"), &plain,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "unix"),
                 SQLITE_OK);
    CHECK_EQ_INT(tu_exec(plain, "CREATE TABLE t(x)"), SQLITE_OK);
    sqlite3_close(plain);
    CHECK(chmod(tu_path("doctor/example.org/plain.db"), 0600) == 0);
    CHECK(strcmp(to_doctor_fails(64u << 20), "store;") == 0);
    unlink(tu_path("doctor/example.org/plain.db"));

    printf("  # tmp/ missing:\n");
    CHECK(rename(tu_path("doctor/example.org/tmp"), tu_path("doctor/example.org/tmp.away")) == 0);
    CHECK(tu_write_file(tu_path("doctor/example.org/tmp"), "x", 1) == 0); /* a file, not a dir */
    CHECK(chmod(tu_path("doctor/example.org/tmp"), 0600) == 0);
    fails = to_doctor_fails(64u << 20);
    unlink(tu_path("doctor/example.org/tmp"));
    CHECK(rename(tu_path("doctor/example.org/tmp.away"), tu_path("doctor/example.org/tmp")) == 0);
    CHECK(strcmp(fails, "temp;") == 0);

    printf("  # too few open files:\n");
    struct rlimit saved, low;
    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
    low = saved;
    low.rlim_cur = 70; /* 2 stores x 4 + 64 = 72 */
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    fails = to_doctor_fails(64u << 20);
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
    CHECK(strcmp(fails, "open files;") == 0);
}

/* ---- query plans -------------------------------------------------------------------------- */

/* Plans every statement; counts rows, unexpected scans and expected ones (searches over
 * every mailbox by substring, flags or size: nothing but a scan can answer them). */
static int to_explain_all(mv_store *store, int *rows, int *scans, int *expected)
{
    char err[512] = "";
    mv_explain *e = NULL;
    int rc = mv_explain_begin(store, &e, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  explain: %s\n", err);
        return rc;
    }
    struct mv_explain_row row;
    *rows = *scans = *expected = 0;
    while (mv_explain_next(e, &row) == 1) {
        (*rows)++;
        if (row.scans_messages && !row.scan_expected) {
            (*scans)++;
            fprintf(stderr, "  %s scans messages: %s\n%s\n", row.operation, row.sql, row.plan);
        }
        *expected += row.scan_expected;
    }
    mv_explain_end(&e);
    return e == NULL ? MV_OK : MV_ERROR;
}

static void test_explain_no_scan(void)
{
    int rows = 0, scans = 0, expected = 0;
    CHECK_EQ_INT(to_explain_all(NULL, &rows, &scans, &expected), MV_OK);
    printf("  # %d statements planned on the scratch store, %d expected scans\n", rows, expected);
    CHECK(rows >= 40);
    CHECK_EQ_INT(scans, 0);
    CHECK(expected > 0 && expected <= 12); /* the unscoped searches, nothing else */
    mv_store *s = NULL;                    /* and on a store with data and statistics, read-only */
    CHECK_EQ_INT(to_open("explain", "ivan@example.org", &s), MV_OK);
    CHECK_EQ_INT(to_fill(s, 1, 200), MV_OK);
    mv_store_close(&s); /* PRAGMA optimize at close */
    struct mv_store_options o = to_options("explain");
    o.flags = MV_STORE_READONLY;
    char err[256];
    CHECK_EQ_INT(mv_store_open("ivan@example.org", TO_PASSWORD, strlen(TO_PASSWORD), &o, &s, err,
                               sizeof err),
                 MV_OK);
    CHECK_EQ_INT(to_explain_all(s, &rows, &scans, &expected), MV_OK);
    CHECK(rows >= 40);
    CHECK_EQ_INT(scans, 0);
    mv_store_close(&s);
}

/* What a quick_check or integrity_check finding stands for: SQLite reports a page it could
 * not get as a finding, so a failed allocation (a backup's check of its copy called it
 * damage: test_faults' allocation loop) or a read error is not damage; a page that failed
 * authentication (SQLITE_IOERR_DATA) and a real finding are. */
static void test_check_finding_kinds(void)
{
    static const char *const page = "*** in database main ***\nPage 5: unable to get the page. ";
    char line[160];
    snprintf(line, sizeof line, "%serror code=%d", page, SQLITE_NOMEM);
    CHECK_EQ_INT(ops_io_check_finding(line), MV_ENOMEM);
    snprintf(line, sizeof line, "%serror code=%d", page, SQLITE_IOERR_NOMEM);
    CHECK_EQ_INT(ops_io_check_finding(line), MV_ENOMEM);
    snprintf(line, sizeof line, "%serror code=%d", page, SQLITE_IOERR_READ);
    CHECK_EQ_INT(ops_io_check_finding(line), MV_EIO);
    snprintf(line, sizeof line, "%serror code=%d", page, SQLITE_IOERR_DATA);
    CHECK_EQ_INT(ops_io_check_finding(line), MV_ECORRUPT);
    snprintf(line, sizeof line, "%serror code=%d", page, SQLITE_CORRUPT);
    CHECK_EQ_INT(ops_io_check_finding(line), MV_ECORRUPT);
    CHECK_EQ_INT(ops_io_check_finding("row 3 missing from index messages_date"), MV_ECORRUPT);
    CHECK_EQ_INT(ops_io_check_finding("error code=99999999999"), MV_ECORRUPT);
    CHECK_EQ_INT(ops_io_check_finding(NULL), MV_ECORRUPT);
}

int main(void)
{
    TEST(test_check_finding_kinds);
    TEST(test_inspect_matches_pragmas);
    TEST(test_file_inspect_and_scan);
    TEST(test_prometheus);
    TEST(test_maintain_vacuums_slack);
    TEST(test_maintain_below_threshold);
    TEST(test_maintain_with_a_reader);
    TEST(test_maintain_refuses_without_disk);
    TEST(test_maintain_min_interval);
    TEST(test_maintain_bytes_max);
    TEST(test_check_clean);
    TEST(test_check_finds_each_invariant);
    TEST(test_check_finds_a_tampered_page);
    TEST(test_repair_rebuilds_from_bytes);
    TEST(test_repair_unused_body);
    TEST(test_check_ignores_a_torn_wal_tail);
    TEST(test_doctor);
    TEST(test_explain_no_scan);
    return th_summary();
}
