/*
 * test_store_stress.c -- the store under concurrency and crashes.
 *
 *   - Two processes deliver into one store while a third lists and fetches: no
 *     "database is locked" reaches anyone, nothing is lost or duplicated.
 *   - A delivering process is SIGKILLed at random points, many times: afterwards the store
 *     opens, passes integrity_check, its reference counts and full-text index agree with
 *     its messages, and every acknowledged delivery is there exactly once.
 */
#include "harness.h"
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define USER            "stress@example.org"
#define PASSWORD        "stress-password"
#define WRITER_MESSAGES 40

static struct mv_store_options stress_options(void)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    return o;
}

static int stress_open(mv_store **s)
{
    struct mv_store_options o = stress_options();
    char err[256] = "";
    int rc = mv_store_open(USER, PASSWORD, strlen(PASSWORD), &o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open: %s\n", err);
    }
    return rc;
}

/* A message whose subject is its marker; every tenth carries a 140 KB attachment shared
 * with other messages (deduplication under concurrency). */
static char *stress_message(const char *marker, int n, size_t *len)
{
    size_t cap = 160 * 1024;
    char *m = malloc(cap);
    int k = snprintf(m, cap,
                     "From: writer <w@example.org>\r\nTo: " USER "\r\nSubject: %s\r\n"
                     "Message-ID: <%s@example.org>\r\nMIME-Version: 1.0\r\n"
                     "Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\n"
                     "Content-Type: text/plain\r\n\r\nbody of %s\r\n--b\r\n"
                     "Content-Type: application/octet-stream\r\n"
                     "Content-Transfer-Encoding: base64\r\n\r\n",
                     marker, marker, marker);
    size_t used = (size_t)k, blob = n % 10 == 0 ? 140000 : 300; /* over STORE_SPLIT_MIN */
    for (size_t i = 0; i < blob && used + 80 < cap; i += 76) {
        memcpy(m + used,
               "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0\r\n",
               78);
        used += 78;
    }
    used += (size_t)snprintf(m + used, cap - used, "--b--\r\n");
    *len = used;
    return m;
}

static void stress_writer(int w, int fd)
{
    mv_store *s = NULL;
    if (stress_open(&s) != MV_OK) {
        _exit(3);
    }
    for (int i = 0; i < WRITER_MESSAGES; i++) {
        char marker[64];
        snprintf(marker, sizeof marker, "writer-%d-msg-%d", w, i);
        size_t len;
        char *m = stress_message(marker, i, &len);
        int rc = mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL);
        free(m);
        if (rc != MV_OK) {
            fprintf(stderr, "  writer %d: %s\n", w, mv_store_errmsg(s));
            _exit(4);
        }
        if (fd >= 0 && write(fd, &i, sizeof i) != (ssize_t)sizeof i) {
            _exit(5);
        }
    }
    mv_store_close(&s);
    _exit(0);
}

/* Lists and fetches until stop_fd is closed; any error is a failure. */
static void stress_reader(int stop_fd)
{
    mv_store *s = NULL;
    if (stress_open(&s) != MV_OK) {
        _exit(3);
    }
    char c;
    for (int round = 0;; round++) {
        struct mv_mailbox_info info;
        if (mv_mailbox_get(s, "INBOX", &info) != MV_OK) {
            fprintf(stderr, "  reader: %s\n", mv_store_errmsg(s));
            _exit(4);
        }
        for (uint32_t uid = 1; uid < info.uidnext; uid += 3) {
            void *raw = NULL;
            size_t len = 0;
            int rc = mv_message_fetch(s, "INBOX", uid, &raw, &len);
            if (rc != MV_OK && rc != MV_ENOTFOUND) {
                fprintf(stderr, "  reader fetch: %s\n", mv_store_errmsg(s));
                _exit(5);
            }
            mv_free(raw);
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        if (read(stop_fd, &c, 1) == 0) {
            break; /* the parent closed the pipe */
        }
    }
    mv_store_close(&s);
    _exit(0);
}

static long long stress_count(mv_store *s, const char *sql)
{
    return tu_int(mv_store_db(s), sql);
}

/* The store's own invariants, all read from SQL. */
static int stress_consistent(mv_store *s)
{
    long long ok = stress_count(s, "SELECT count(*) FROM pragma_integrity_check "
                                   "WHERE integrity_check='ok'");
    /* with the references an EXPUNGE dropped and the purge has yet to take off */
    long long bad_bodies = stress_count(s, "SELECT count(*) FROM body_refs b WHERE refcount != "
                                           "(SELECT count(*) FROM messages WHERE body_id=b.id) + "
                                           "coalesce((SELECT value FROM meta WHERE key = "
                                           "printf('purge_unref:%020d', b.id)), 0)");
    long long bad_att = stress_count(s, "SELECT count(*) FROM attachments a WHERE refcount != "
                                        "(SELECT count(*) FROM body_parts WHERE "
                                        "attachment_id=a.id)");
    long long fts = stress_count(s, "SELECT (SELECT count(*) FROM fts) - (SELECT count(*) "
                                    "FROM bodies)");
    long long dup = stress_count(s, "SELECT count(*) FROM (SELECT subject FROM messages "
                                    "JOIN body_headers USING (body_id) "
                                    "GROUP BY mailbox_id, subject HAVING count(*) > 1)");
    int good = ok == 1 && bad_bodies == 0 && bad_att == 0 && fts == 0 && dup == 0;
    if (!good) {
        fprintf(stderr,
                "  integrity %lld, bad body refs %lld, bad attachment refs %lld, "
                "fts-bodies %lld, duplicates %lld\n",
                ok, bad_bodies, bad_att, fts, dup);
    }
    return good;
}

static void stress_init(void)
{
    struct mv_store_options o = stress_options();
    char err[256];
    char rm[1200];
    snprintf(rm, sizeof rm, "rm -rf '%s'", o.root);
    if (system(rm) != 0 ||
        mv_store_init(USER, PASSWORD, strlen(PASSWORD), &o, err, sizeof err) != MV_OK) {
        fprintf(stderr, "  init failed\n");
    }
}

static void test_two_writers_one_reader(void)
{
    stress_init();
    int stop[2];
    CHECK(pipe(stop) == 0);
    pid_t reader = fork();
    if (reader == 0) {
        close(stop[1]);
        stress_reader(stop[0]);
    }
    close(stop[0]);
    pid_t writers[2];
    for (int w = 0; w < 2; w++) {
        writers[w] = fork();
        if (writers[w] == 0) {
            stress_writer(w, -1);
        }
    }
    int failures = 0, status;
    for (int w = 0; w < 2; w++) {
        waitpid(writers[w], &status, 0);
        failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    close(stop[1]);
    waitpid(reader, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ_INT(failures, 0);
    mv_store *s = NULL;
    CHECK_EQ_INT(stress_open(&s), MV_OK);
    long long total = stress_count(s, "SELECT count(*) FROM messages");
    long long distinct = stress_count(s, "SELECT count(DISTINCT subject) FROM messages "
                                         "JOIN body_headers USING (body_id)");
    int consistent = stress_consistent(s);
    mv_store_close(&s);
    CHECK_EQ_INT(total, 2 * WRITER_MESSAGES);
    CHECK_EQ_INT(distinct, 2 * WRITER_MESSAGES);
    CHECK(consistent);
}

static uint32_t stress_rng = 12345u;

static void test_writer_killed_at_random_points(void)
{
    stress_init();
    int failures = 0;
    for (int round = 0; round < 12 && failures == 0; round++) {
        int ack[2];
        CHECK(pipe(ack) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(ack[0]);
            stress_writer(100 + round, ack[1]);
        }
        close(ack[1]);
        stress_rng = stress_rng * 1103515245u + 12345u;
        struct timespec delay = {0, (long)(20 + (stress_rng >> 8) % 150) * 1000000L};
        nanosleep(&delay, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        int last = -1, v;
        while (read(ack[0], &v, sizeof v) == (ssize_t)sizeof v) {
            last = v;
        }
        close(ack[0]);
        mv_store *s = NULL;
        if (stress_open(&s) != MV_OK) {
            failures++;
            break;
        }
        char sql[256];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM messages JOIN body_headers USING (body_id) WHERE subject "
                 "GLOB 'writer-%d-msg-*' AND "
                 "CAST(substr(subject, 16) AS INTEGER) <= %d", /* after "writer-1NN-msg-" */
                 100 + round, last);
        long long acked_found = stress_count(s, sql);
        if (acked_found != last + 1 || !stress_consistent(s)) {
            fprintf(stderr, "  round %d: acknowledged %d, found %lld\n", round, last + 1,
                    acked_found);
            failures++;
        }
        if (round == 11) {
            printf("  12 kills; %lld messages in the store, every acknowledged one once\n",
                   stress_count(s, "SELECT count(*) FROM messages"));
        }
        mv_store_close(&s);
    }
    CHECK_EQ_INT(failures, 0);
}

int main(void)
{
    TEST(test_two_writers_one_reader);
    TEST(test_writer_killed_at_random_points);
    return th_summary();
}
