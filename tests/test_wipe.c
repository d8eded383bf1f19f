/*
 * test_wipe.c -- no block the library frees still holds a message's plaintext (the brief:
 * everything that held message plaintext or keys is wiped before it is let go).
 *
 * IMPLEMENTATION NOTES
 *   This binary is linked with -Wl,--wrap=free,--wrap=realloc, so every free() and realloc()
 *   called from the library's objects (and this file's) goes through __wrap_free() and
 *   __wrap_realloc() below, which look for a marker string in the whole block
 *   (malloc_usable_size) while armed and record who let it go.
 *   Frees inside shared libraries (SQLite's page cache, GMime's and GLib's buffers) are not
 *   seen: they are not ours to wipe. The marker is in the subject and in the body, so the
 *   raw message, the parse's header fields and texts, the full-text backlog's texts and
 *   whatever else the library copies them into are covered by one check.
 */
#include "../imapd/buf.h"
#include "../imapd/config.h"
#include "../imapd/conn.h"
#include "../imapd/metrics.h"
#include "../imapd/protocols.h"
#include "../imapd/worker.h"
#include "harness.h"
#include "testutil.h"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <sanitizer/common_interface_defs.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

struct config g_config; /* main.c's, which is not linked here */

#define WIPE_MARK        "Zq7MarkWipeQ"
#define WIPE_CALLERS_MAX 64

void __real_free(void *p);
void __wrap_free(void *p);
void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);

static atomic_int wipe_armed;
static atomic_int wipe_found;
static pthread_mutex_t wipe_lock = PTHREAD_MUTEX_INITIALIZER;
static void *wipe_callers[WIPE_CALLERS_MAX]; /* each place that freed one, once */
static int wipe_caller_count;

static void wipe_look(void *p, void *caller)
{
    if (p != NULL && atomic_load(&wipe_armed)) {
        size_t n = malloc_usable_size(p);
        if (tu_contains(p, n, WIPE_MARK, strlen(WIPE_MARK))) {
            atomic_fetch_add(&wipe_found, 1);
            pthread_mutex_lock(&wipe_lock);
            int known = 0;
            for (int i = 0; i < wipe_caller_count; i++) {
                known |= wipe_callers[i] == caller;
            }
            if (!known && wipe_caller_count < WIPE_CALLERS_MAX) {
                wipe_callers[wipe_caller_count++] = caller;
            }
            pthread_mutex_unlock(&wipe_lock);
        }
    }
}

void __wrap_free(void *p)
{
    wipe_look(p, __builtin_return_address(0));
    __real_free(p);
}

/* realloc() frees a block it moves as it is (and a shrink leaves the tail in the freed
 * rest): a block with the marker given to it counts, moved or not. */
void *__wrap_realloc(void *p, size_t n)
{
    wipe_look(p, __builtin_return_address(0));
    return __real_realloc(p, n);
}

/* Disarms; prints where blocks with the marker were freed; returns how many there were. */
static int wipe_disarm(void)
{
    atomic_store(&wipe_armed, 0);
    int found = atomic_load(&wipe_found);
    for (int i = 0; i < wipe_caller_count; i++) {
        char where[512] = "";
        __sanitizer_symbolize_pc((char *)wipe_callers[i] - 1, "%f %S", where, sizeof where);
        fprintf(stderr, "  freed with the plaintext in it: %s\n", where);
    }
    return found;
}

static void wipe_arm(void)
{
    atomic_store(&wipe_found, 0);
    wipe_caller_count = 0;
    atomic_store(&wipe_armed, 1);
}

/* A message with the marker in its subject and its body, the body long enough to be
 * compressed and big enough for a skeleton and an attachment part. */
static char *wipe_message(size_t *len_out)
{
    size_t cap = 200000, len = 0;
    char *m = malloc(cap);
    if (m == NULL) {
        return NULL;
    }
    len += (size_t)snprintf(m + len, cap - len,
                            "From: A <a@example.org>\r\nTo: b@example.org\r\n"
                            "Subject: the " WIPE_MARK " report\r\nMessage-ID: <w1@example.org>\r\n"
                            "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=bb\r\n"
                            "\r\n--bb\r\nContent-Type: text/plain\r\n\r\n");
    for (int i = 0; i < 400; i++) {
        len += (size_t)snprintf(m + len, cap - len, "line %d of the " WIPE_MARK " body\r\n", i);
    }
    len += (size_t)snprintf(m + len, cap - len, "--bb\r\nContent-Type: text/plain\r\n\r\n");
    for (int i = 0; i < 1500; i++) {
        len += (size_t)snprintf(m + len, cap - len, "attached %d " WIPE_MARK " text\r\n", i);
    }
    len += (size_t)snprintf(m + len, cap - len, "--bb--\r\n");
    *len_out = len;
    return m;
}

static int wipe_search(mv_store *s)
{
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    q.text_contains = "report"; /* not the marker: the query's own copies are not mail */
    mv_search *search = NULL;
    int rc = mv_search_begin(s, &q, &search);
    if (rc != MV_OK) {
        return rc;
    }
    struct mv_message_info info;
    int n = 0;
    while ((rc = mv_search_next(search, &info)) == 1) {
        n++;
    }
    mv_search_end(&search);
    return rc < 0 ? rc : n;
}

static int wipe_open(mv_store **s)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    char err[256] = "";
    int rc = mv_store_open("wipe@example.org", "pw", 2, &o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open: %s\n", err);
    }
    return rc;
}

static void *wipe_place(void *arg, size_t size)
{
    char **buf = arg;
    *buf = malloc(size);
    return *buf;
}

/* Append, fetch (whole, into, header), get, search (index and backlog), check, repair,
 * index the backlog, close: none frees a block of its own with the plaintext in it. */
static void test_no_plaintext_freed(void)
{
    size_t len = 0;
    char *msg = wipe_message(&len);
    CHECK(msg != NULL);
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("wipe", "pw", 0, &s), MV_OK);

    wipe_arm();
    uint32_t uid = 0;
    CHECK_EQ_INT(mv_message_append(s, "INBOX", msg, len, 0, NULL, 0, &uid), MV_OK);
    void *raw = NULL;
    size_t raw_len = 0;
    CHECK_EQ_INT(mv_message_fetch(s, "INBOX", uid, &raw, &raw_len), MV_OK);
    CHECK_EQ_INT(raw_len, len);
    mv_free(raw);
    CHECK_EQ_INT(mv_message_fetch_header(s, "INBOX", uid, &raw, &raw_len), MV_OK);
    mv_free(raw);
    char *placed = NULL;
    CHECK_EQ_INT(mv_message_fetch_into(s, "INBOX", uid, wipe_place, &placed, &raw_len), MV_OK);
    memset(placed, 0, raw_len); /* the caller's memory: the caller's to wipe */
    free(placed);
    struct mv_message_info info;
    CHECK_EQ_INT(mv_message_get(s, "INBOX", uid, &info), MV_OK);
    CHECK_EQ_INT(wipe_search(s), 1);

    /* the same body in the full-text backlog, as a stepped drain leaves it: the search
     * parses the stored body, the check and the repair too, then the catch-up indexes it */
    sqlite3 *db = mv_store_db(s);
    long long body = tu_int(db, "SELECT body_id FROM messages WHERE uid = 1");
    char sql[256];
    snprintf(sql, sizeof sql,
             "DELETE FROM fts WHERE rowid = %lld; INSERT OR IGNORE INTO meta(key, value) "
             "VALUES ('fts_backlog:%020lld', x'')",
             body, body);
    CHECK_EQ_INT(tu_exec(db, sql), 0);
    mv_store_close(&s);
    CHECK_EQ_INT(wipe_open(&s), MV_OK);
    CHECK_EQ_INT(wipe_search(s), 1);
    CHECK_EQ_INT(wipe_search(s), 1);
    struct mv_check_report check;
    CHECK_EQ_INT(mv_store_check(s, NULL, NULL, &check), MV_OK);
    struct mv_repair_report repair;
    CHECK_EQ_INT(mv_store_repair(s, &repair), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), sql), 0);
    uint64_t left = 9;
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(wipe_search(s), 1);
    mv_store_close(&s);
    CHECK_EQ_INT(wipe_disarm(), 0);

    /* and the check can fail: a block with the marker, freed as it is, is found */
    char *plain = strdup(msg);
    wipe_arm();
    free(plain);
    CHECK_EQ_INT(wipe_disarm(), 1);
    memset(msg, 0, len);
    free(msg);
}

/* mailvaultd's buffers (responses with messages in them, literals): grown from 256 bytes
 * past 64 KiB, then let go; none leaves the marker behind (the old buf_reserve reallocated,
 * the old buf_free did not wipe). */
static void test_server_buffers_wiped(void)
{
    struct buf b = {0};
    wipe_arm();
    for (int i = 0; i < 3000; i++) {
        buf_add(&b, "a line of the " WIPE_MARK " body\r\n", 33);
    }
    CHECK(!b.oom && b.len == (size_t)3000 * 33);
    buf_free(&b);
    CHECK_EQ_INT(wipe_disarm(), 0);
    /* consumed from the front (buf_consume leaves those bytes in front of data), then grown
     * into a new block and freed: neither block keeps the marker */
    wipe_arm();
    for (int i = 0; i < 3000; i++) {
        buf_add(&b, "a line of the " WIPE_MARK " body\r\n", 33);
        if (i % 3 == 2) {
            buf_consume(&b, 33);
        }
    }
    buf_consume(&b, 33 * 10);
    CHECK(!b.oom && b.skip > 0);
    buf_free(&b);
    CHECK_EQ_INT(wipe_disarm(), 0);
}

/* buf_free wipes what may have been written, not the capacity beyond it: those pages were
 * never touched, and wiping them faulted them in only to free them (issue 13: about half the
 * page faults of a whole-message FETCH). 5 MiB written into a buffer that doubled to 8 MiB:
 * the old wipe faulted in the 3 MiB never used (768 pages: 1,026 faults here, 256 of them
 * ASan's own, its shadow of the block poisoned at the free); the bytes written are still
 * wiped (test_server_buffers_wiped). */
static void test_free_touches_only_written(void)
{
    static char chunk[65536];
    memset(chunk, 'x', sizeof chunk);
    struct buf b = {0};
    for (int i = 0; i < 80; i++) {
        buf_add(&b, chunk, sizeof chunk);
    }
    CHECK(!b.oom && b.len == (size_t)80 * sizeof chunk && b.cap >= (size_t)8 << 20);
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0); /* this thread frees it: no other thread counts */
    buf_free(&b);
    getrusage(RUSAGE_THREAD, &r1);
    long faults = r1.ru_minflt - r0.ru_minflt;
    if (faults >= 512) {
        fprintf(stderr, "  buf_free faulted %ld pages in\n", faults);
    }
    CHECK(faults < 512);
}

/* The LMTP reply lines read so far from the client's end (sv), appended to got; polls the
 * workers' done queue (efd) until want is in got, for up to 30 s. 1 if it came. */
static int wipe_lmtp_until(int sv, int efd, char *got, size_t got_size, const char *want)
{
    for (int i = 0; i < 300 && strstr(got, want) == NULL; i++) {
        struct pollfd p[2] = {{.fd = efd, .events = POLLIN}, {.fd = sv, .events = POLLIN}};
        if (poll(p, 2, 100) > 0 && (p[0].revents & POLLIN) != 0) {
            worker_collect(); /* the jobs' dones, as the loop runs them */
        }
        size_t have = strlen(got);
        ssize_t n = read(sv, got + have, got_size - have - 1);
        if (n > 0) {
            got[have + (size_t)n] = '\0';
        }
    }
    return strstr(got, want) != NULL;
}

/* An LMTP delivery through the server (conn.c, lmtp.c, a worker's job: the store is not open,
 * so it is sealed into the queue): nothing the server or the library frees on the way holds
 * the message. The job's copy with the trace fields (lmtp_with_trace) was freed as it was. */
static void test_lmtp_delivery_wiped(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("lmtp", "pw", 0, &s), MV_OK); /* lmtp@example.org */
    mv_store_close(&s);
    config_defaults(&g_config);
    snprintf(g_config.root, sizeof g_config.root, "%s", tu_path("root"));
    g_config.kdf_iter = TU_KDF_ITER;
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), sv[2];
    CHECK(efd >= 0 && metrics_init(1) == 0 && worker_start(&g_config, 1, efd) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    struct conn *c = calloc(1, sizeof *c);
    CHECK(c != NULL);
    c->fd = sv[0];
    c->ops = &lmtp_conn_proto;
    c->loopback = 1;
    snprintf(c->peer, sizeof c->peer, "test");
    c->refs = 1; /* the test's: released at the end */
    c->ops->start(c);
    static const char head[] = "LHLO test\r\nMAIL FROM:<a@example.org>\r\n"
                               "RCPT TO:<lmtp@example.org>\r\n";
    CHECK(write(sv[1], head, sizeof head - 1) == (ssize_t)(sizeof head - 1));
    conn_resume(c);
    char got[4096] = "";
    CHECK(wipe_lmtp_until(sv[1], efd, got, sizeof got, "250 2.1.5"));
    size_t len = 0;
    char *msg = wipe_message(&len);
    CHECK(msg != NULL);
    wipe_arm();
    CHECK(write(sv[1], "DATA\r\n", 6) == 6);
    conn_resume(c); /* the 354, then the message as it comes */
    for (size_t at = 0; at < len;) {
        ssize_t n = write(sv[1], msg + at, len - at);
        if (n > 0) {
            at += (size_t)n;
        }
        conn_resume(c);
    }
    CHECK(write(sv[1], ".\r\n", 3) == 3);
    conn_resume(c);
    CHECK(wipe_lmtp_until(sv[1], efd, got, sizeof got, "250 2.0.0 delivered"));
    CHECK_EQ_INT(wipe_disarm(), 0);
    conn_close(c, "test");
    conn_release(c);
    close(sv[1]);
    worker_stop_all();
    worker_collect();
    metrics_shutdown();
    close(efd);
    memset(msg, 0, len);
    free(msg);
}

int main(void)
{
    TEST(test_no_plaintext_freed);
    TEST(test_server_buffers_wiped);
    TEST(test_free_touches_only_written);
    TEST(test_lmtp_delivery_wiped);
    return th_summary();
}
