/*
 * test_quota_sealed.c -- the quota of sealed LMTP deliveries (imapd/quota.c, RFC 9208
 * STORAGE): each check costs O(1), not a read of the whole queue directory, and the count it
 * keeps is never the reason mail is refused.
 *
 * Drives quota.c as imapd/lmtp.c does (quota_sealed_exceeded, mv_deliver_sealed,
 * quota_sealed_added) and counts the queue directory reads through
 * quota_queue_count_reads(): the old code read the directory at every delivery. The same
 * for APPEND and COPY while the worker drains the queue of an open store (quota_used_open,
 * quota_exceeded, with quota_note_step after each drain step as worker.c makes it): the old
 * code read the whole directory at every one, uncounted.
 */
#include "harness.h"
#include "testutil.h"

#include "../imapd/config.h"
#include "../imapd/quota.h"
#include "../imapd/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct config g_config; /* main.c's, which is not linked here */

#define QS_PW       "quota sealed password"
#define QS_MESSAGES 40
#define QS_SIZE     20000 /* bytes per message */

static char *qs_message(int i, size_t *len)
{
    char *m = malloc(QS_SIZE + 256);
    if (m == NULL) {
        return NULL;
    }
    int n = snprintf(m, 256, "From: a@example.net\r\nSubject: quota %d\r\n\r\n", i);
    for (size_t k = (size_t)n; k < QS_SIZE; k++) {
        m[k] = (char)('a' + (k * 7 + (size_t)i) % 26); /* text: the queue holds it sealed */
    }
    memcpy(m + QS_SIZE - 2, "\r\n", 2);
    *len = QS_SIZE;
    return m;
}

/* One sealed delivery as lmtp.c makes it: 0 delivered, 1 refused, -1 an error. */
static int qs_deliver(const char *who, int i)
{
    char why[160] = "", err[256] = "";
    size_t len = 0;
    char *m = qs_message(i, &len);
    if (m == NULL) {
        return -1;
    }
    int over = quota_sealed_exceeded(&g_config, who, len, why, sizeof why);
    int rc = -1;
    if (over > 0) {
        rc = 1;
    } else if (over == 0) {
        struct mv_store_options o = config_store_options(&g_config);
        if (mv_deliver_sealed(who, m, len, &o, err, sizeof err) == MV_OK) {
            quota_sealed_added(who, len);
            rc = 0;
        } else {
            fprintf(stderr, "  deliver: %s\n", err);
        }
    }
    free(m);
    return rc;
}

/* The server's configuration under tu_path("root") with a quota far above what a test
 * delivers, kept queue counts that do not expire (a slow machine must not make a check count
 * again), and the store of who. MV_OK or mv_store_init's code. */
static int qs_setup(const char *who)
{
    config_defaults(&g_config);
    snprintf(g_config.root, sizeof g_config.root, "%s", tu_path("root"));
    g_config.kdf_iter = TU_KDF_ITER;
    g_config.quota_kib = 64 * 1024;
    quota_queue_fresh_set(3600 * 1000);
    struct mv_store_options o = config_store_options(&g_config);
    char err[256] = "";
    int rc = mv_store_init(who, QS_PW, strlen(QS_PW), &o, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  init %s: %s\n", who, err);
    }
    return rc;
}

static void test_sealed_checks_do_not_read_the_queue(void)
{
    const char *who = "q@example.org";
    CHECK_EQ_INT(qs_setup(who), MV_OK);
    struct mv_store_options o = config_store_options(&g_config);
    char err[256] = "";

    uint64_t reads0 = quota_queue_count_reads();
    for (int i = 0; i < QS_MESSAGES; i++) {
        CHECK_EQ_INT(qs_deliver(who, i), 0);
    }
    uint32_t queued = 0;
    CHECK_EQ_INT(mv_queue_count(who, &o, &queued), MV_OK);
    CHECK_EQ_INT(queued, QS_MESSAGES);
    /* one read of the directory for all of them (each used to read it once) */
    CHECK_EQ_INT(quota_queue_count_reads() - reads0, 1);

    /* Another process drains the queue (a CLI open): the kept count is now too high. A limit
     * between the truth and that count: the check counts again rather than refuse. */
    mv_store *s = NULL;
    CHECK_EQ_INT(mv_store_open(who, QS_PW, strlen(QS_PW), &o, &s, err, sizeof err), MV_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(mv_queue_count(who, &o, &queued), MV_OK);
    CHECK_EQ_INT(queued, 0);
    struct mv_store_file file;
    CHECK_EQ_INT(mv_store_file_inspect(who, &o, &file), MV_OK);
    uint64_t files = file.file_bytes + file.wal_bytes;
    g_config.quota_kib = (files + (uint64_t)QS_MESSAGES * QS_SIZE / 2) / 1024;
    CHECK_EQ_INT(qs_deliver(who, QS_MESSAGES), 0);
    CHECK_EQ_INT(quota_queue_count_reads() - reads0, 2);

    /* ... and a limit the queue really is over still refuses (552 in LMTP). */
    g_config.quota_kib = (files + QS_SIZE / 2) / 1024;
    CHECK_EQ_INT(qs_deliver(who, QS_MESSAGES + 1), 1);

    /* The server's own open or drain step (quota_note) drops the kept count. */
    g_config.quota_kib = 64 * 1024;
    CHECK_EQ_INT(qs_deliver(who, QS_MESSAGES + 2), 0);
    uint64_t before = quota_queue_count_reads();
    CHECK_EQ_INT(mv_store_open(who, QS_PW, strlen(QS_PW), &o, &s, err, sizeof err), MV_OK);
    quota_note(who, s);
    mv_store_close(&s);
    CHECK_EQ_INT(qs_deliver(who, QS_MESSAGES + 3), 0);
    CHECK_EQ_INT(quota_queue_count_reads() - before, 1);
    CHECK_EQ_INT(qs_deliver(who, QS_MESSAGES + 4), 0);
    CHECK_EQ_INT(quota_queue_count_reads() - before, 1);
}

/* A store opened as the worker opens it (MV_STORE_DRAIN_LATER, quota_note), its queue
 * drained in steps (quota_note_step after each) while APPEND and COPY check the quota: the
 * usage is the store's plus the queue's throughout, from one read of the queue directory. */
static void test_open_checks_do_not_read_the_queue(void)
{
    const char *who = "open@example.org";
    CHECK_EQ_INT(qs_setup(who), MV_OK);
    struct mv_store_options o = config_store_options(&g_config);
    char err[256] = "";
    for (int i = 0; i < QS_MESSAGES; i++) {
        CHECK_EQ_INT(qs_deliver(who, i), 0);
    }
    struct open_store os = {0};
    snprintf(os.address, sizeof os.address, "%s", who);
    o.flags |= MV_STORE_DRAIN_LATER;
    CHECK_EQ_INT(mv_store_open(who, QS_PW, strlen(QS_PW), &o, &os.store, err, sizeof err), MV_OK);
    if (os.store == NULL) {
        return;
    }
    quota_note(who, os.store);
    os.drain_more = 1;
    struct quota_usage empty, used;
    CHECK_EQ_INT(quota_used(os.store, &empty), MV_OK);
    CHECK_EQ_INT(empty.messages, 0);

    uint64_t reads0 = quota_queue_count_reads();
    for (int i = 0; i < 5; i++) { /* APPENDs before the first step */
        CHECK_EQ_INT(quota_used_open(&os, &g_config, &used), MV_OK);
        CHECK_EQ_INT(used.messages, QS_MESSAGES);
        CHECK_EQ_INT(used.bytes, (uint64_t)QS_MESSAGES * QS_SIZE);
    }
    CHECK_EQ_INT(quota_queue_count_reads() - reads0, 1);
    int steps = 0, more = 1;
    while (more && steps < QS_MESSAGES) {
        struct quota_usage before;
        uint32_t moved = 0;
        struct mv_drain_bounds b = {.max = 7};
        CHECK_EQ_INT(quota_used(os.store, &before), MV_OK);
        CHECK_EQ_INT(mv_queue_drain_step(os.store, &b, &moved, &more), MV_OK);
        quota_note_step(who, os.store, &before, moved);
        steps++;
        /* each step moves mail from the queue into INBOX: the sum stays */
        CHECK_EQ_INT(quota_used_open(&os, &g_config, &used), MV_OK);
        CHECK_EQ_INT(used.messages, QS_MESSAGES);
        CHECK_EQ_INT(used.bytes, (uint64_t)QS_MESSAGES * QS_SIZE);
        CHECK_EQ_INT(quota_exceeded(&os, &g_config, who, QS_SIZE, 1), 0);
    }
    CHECK(steps >= 5);
    CHECK_EQ_INT(quota_queue_count_reads() - reads0, 1);

    /* A kept count too high (another process took queue files: here a CLI-like drain by a
     * second handle) never refuses an APPEND the true usage allows: it counts again. */
    CHECK_EQ_INT(quota_used(os.store, &used), MV_OK);
    uint64_t in_store = used.bytes;
    mv_store_close(&os.store);
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(qs_deliver(who, QS_MESSAGES + i), 0);
    }
    CHECK_EQ_INT(mv_store_open(who, QS_PW, strlen(QS_PW), &o, &os.store, err, sizeof err), MV_OK);
    if (os.store == NULL) {
        return;
    }
    os.drain_more = 1; /* without quota_note: the kept count (6 queued) stays */
    CHECK_EQ_INT(quota_used_open(&os, &g_config, &used), MV_OK);
    CHECK_EQ_INT(used.messages, QS_MESSAGES + 6);
    uint64_t reads1 = quota_queue_count_reads();
    mv_store *cli = NULL;
    o.flags &= ~(unsigned)MV_STORE_DRAIN_LATER;
    CHECK_EQ_INT(mv_store_open(who, QS_PW, strlen(QS_PW), &o, &cli, err, sizeof err), MV_OK);
    mv_store_close(&cli);
    CHECK_EQ_INT(quota_used(os.store, &used), MV_OK);
    CHECK_EQ_INT(used.messages, QS_MESSAGES + 6);
    /* room for the true usage plus one message, not for the kept count's 6 more */
    g_config.quota_kib = (in_store + 6 * (uint64_t)QS_SIZE + QS_SIZE + 3 * QS_SIZE) / 1024;
    CHECK_EQ_INT(quota_exceeded(&os, &g_config, who, QS_SIZE, 1), 0);
    CHECK_EQ_INT(quota_queue_count_reads() - reads1, 1);
    /* ... and a limit the store really is over still refuses */
    g_config.quota_kib = (in_store + 6 * (uint64_t)QS_SIZE) / 1024;
    CHECK_EQ_INT(quota_exceeded(&os, &g_config, who, QS_SIZE, 1), QUOTA_OVER_STORAGE);
    mv_store_close(&os.store);
}

/* One delivery of the shapes LMTP and `mailvault deliver --sealed` hand over, as lmtp.c makes
 * it (quota_sealed_exceeded, mv_deliver_sealed, quota_sealed_added of the bytes sealed). */
static int qs_deliver_bytes(const char *who, const char *m, size_t len)
{
    char why[160] = "", err[256] = "";
    if (quota_sealed_exceeded(&g_config, who, len, why, sizeof why) != 0) {
        return -1;
    }
    struct mv_store_options o = config_store_options(&g_config);
    if (mv_deliver_sealed(who, m, len, &o, err, sizeof err) != MV_OK) {
        fprintf(stderr, "  deliver: %s\n", err);
        return -1;
    }
    quota_sealed_added(who, len);
    return 0;
}

/* The queue's part of the usage counted from the directory, as a recount makes it. */
static int qs_queue_truth(const char *who, struct quota_usage *out)
{
    struct mv_store_options o = config_store_options(&g_config);
    uint64_t bytes = 0, messages = 0;
    int rc = mv_queue_usage(who, &o, 0, &bytes, &messages);
    out->bytes = bytes - messages * 104; /* the sealing (docs/DELIVERY.md) */
    out->messages = messages;
    return rc;
}

/* Deliveries in the store whose queue files are still there: a step that ended a round of
 * the queue leaves its files to the next step (docs/DELIVERY.md, SETTLE LATER). Their meta
 * rows name the files (local@domain's queue is ROOT/domain/local.queue). */
static int qs_stored_still_queued(mv_store *store, const char *who, struct quota_usage *out)
{
    char local[64], queue[4096 + 256];
    const char *at = strchr(who, '@');
    snprintf(local, sizeof local, "%.*s", (int)(at - who), who);
    snprintf(queue, sizeof queue, "%s/%s/%s.queue", g_config.root, at + 1, local);
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(mv_store_db(store),
                           "SELECT value FROM meta WHERE key LIKE 'delivered:%'", -1, &st,
                           NULL) != SQLITE_OK) {
        return -1;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        char path[sizeof queue + 128];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", queue, (const char *)sqlite3_column_text(st, 0));
        if (stat(path, &sb) == 0) {
            out->messages++;
            out->bytes += (uint64_t)sb.st_size - 104;
        }
    }
    sqlite3_finalize(st);
    return 0;
}

/* The count kept for the queue follows it exactly while the worker drains it in steps
 * (quota_note_step after each takes out the store's growth plus the sealing), whatever the
 * deliveries' shapes: the trace fields LMTP puts in front with the message's own line ends
 * (lmtp.c lmtp_with_trace), bare LFs, no final line end, a bare CR, 8-bit bytes, an empty
 * body, a big one. The store keeps each delivery's bytes as sealed, so the step's growth is
 * what left the queue: after every step the kept usage is the one a recount gives, neither
 * lower (mail over the quota let in) nor higher (mail refused until the next count). Another
 * process that appends during a step (a second handle here) is not taken for queued mail:
 * the old code took its message out of the kept count too, which was then too low by it. */
static void test_kept_count_follows_the_queue(void)
{
    const char *who = "shapes@example.org";
    CHECK_EQ_INT(qs_setup(who), MV_OK);
    struct mv_store_options o = config_store_options(&g_config);
    char err[256] = "";
    static char big[300000];
    for (size_t k = 0; k < sizeof big; k++) {
        big[k] = k % 77 == 76 ? '\n' : (char)('a' + k % 23);
    }
    memcpy(big, "Subject: big\n\n", 14);
    const char *shapes[] = {
        "Return-Path: <a@example.net>\nDelivered-To: shapes@example.org\nSubject: lf\n\nbody\n",
        "Return-Path: <>\r\nDelivered-To: shapes@example.org\r\nSubject: crlf\r\n\r\nbody\r\n",
        "Subject: no final line end\r\n\r\nbody",
        "Subject: bare cr\r\n\r\none\rtwo\r\n",
        "Subject: 8bit\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nGr\xc3\xbc\xc3\x9f"
        "e \xe2\x82\xac\r\n",
        "Subject: empty body\r\n\r\n",
        "Subject: mixed\r\n\nline\r\nline\n",
    };
    size_t n_shapes = sizeof shapes / sizeof shapes[0];
    uint64_t sent_bytes = 0;
    for (size_t i = 0; i < n_shapes; i++) {
        CHECK_EQ_INT(qs_deliver_bytes(who, shapes[i], strlen(shapes[i])), 0);
        sent_bytes += strlen(shapes[i]);
    }
    CHECK_EQ_INT(qs_deliver_bytes(who, big, sizeof big), 0);
    sent_bytes += sizeof big;

    struct open_store os = {0};
    snprintf(os.address, sizeof os.address, "%s", who);
    o.flags |= MV_STORE_DRAIN_LATER;
    CHECK_EQ_INT(mv_store_open(who, QS_PW, strlen(QS_PW), &o, &os.store, err, sizeof err), MV_OK);
    if (os.store == NULL) {
        return;
    }
    quota_note(who, os.store);
    os.drain_more = 1;
    struct quota_usage used, in_store, queued;
    CHECK_EQ_INT(quota_used_open(&os, &g_config, &used), MV_OK); /* counts the queue once */
    CHECK_EQ_INT(used.bytes, sent_bytes);
    CHECK_EQ_INT(used.messages, n_shapes + 1);

    /* More while it drains (LMTP seals for a draining store), then steps of two. */
    for (size_t i = 0; i < n_shapes; i++) {
        CHECK_EQ_INT(
            qs_deliver_bytes(who, shapes[n_shapes - 1 - i], strlen(shapes[n_shapes - 1 - i])), 0);
    }
    mv_store *other = NULL;
    CHECK_EQ_INT(mv_store_open(who, QS_PW, strlen(QS_PW), &o, &other, err, sizeof err), MV_OK);
    if (other == NULL) {
        mv_store_close(&os.store);
        return;
    }
    uint64_t reads0 = quota_queue_count_reads();
    int steps = 0, more = 1, settled_later = 0;
    while (more && steps < 20) {
        struct quota_usage before;
        uint32_t moved = 0;
        struct mv_drain_bounds b = {.max = 2};
        CHECK_EQ_INT(quota_used(os.store, &before), MV_OK);
        if (steps == 3) { /* another process appends meanwhile (mailvault import, deliver) */
            CHECK_EQ_INT(
                mv_message_append(other, "INBOX", shapes[0], strlen(shapes[0]), 0, NULL, 0, NULL),
                MV_OK);
        }
        CHECK_EQ_INT(mv_queue_drain_step(os.store, &b, &moved, &more), MV_OK);
        quota_note_step(who, os.store, &before, moved);
        steps++;
        CHECK_EQ_INT(quota_used_open(&os, &g_config, &used), MV_OK); /* the kept count */
        CHECK_EQ_INT(quota_used(os.store, &in_store), MV_OK);
        CHECK_EQ_INT(qs_queue_truth(who, &queued), MV_OK);
        /* a step that ended a round leaves its files to the next: counted once, in INBOX */
        struct quota_usage twice;
        CHECK_EQ_INT(qs_stored_still_queued(os.store, who, &twice), 0);
        settled_later += twice.messages > 0;
        CHECK_EQ_INT(used.messages + twice.messages, in_store.messages + queued.messages);
        CHECK_EQ_INT(used.bytes + twice.bytes, in_store.bytes + queued.bytes);
    }
    CHECK(settled_later >= 1);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(in_store.messages, 2 * n_shapes + 2);
    CHECK(steps >= 7);
    /* the kept count throughout, but once after the other process's append */
    CHECK_EQ_INT(quota_queue_count_reads() - reads0, 1);
    mv_store_close(&other);
    mv_store_close(&os.store);
}

int main(void)
{
    TEST(test_sealed_checks_do_not_read_the_queue);
    TEST(test_open_checks_do_not_read_the_queue);
    TEST(test_kept_count_follows_the_queue);
    return th_summary();
}
