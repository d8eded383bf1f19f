/*
 * test_quota_sealed.c -- the quota of sealed LMTP deliveries (imapd/quota.c, RFC 9208
 * STORAGE): each check costs O(1), not a read of the whole queue directory, and the count it
 * keeps is never the reason mail is refused.
 *
 * Drives quota.c as imapd/lmtp.c does (quota_sealed_exceeded, mv_deliver_sealed,
 * quota_sealed_added) and counts the queue directory reads through
 * quota_queue_count_reads(): the old code read the directory at every delivery.
 */
#include "harness.h"
#include "testutil.h"

#include "../imapd/config.h"
#include "../imapd/quota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void test_sealed_checks_do_not_read_the_queue(void)
{
    const char *who = "q@example.org";
    config_defaults(&g_config);
    snprintf(g_config.root, sizeof g_config.root, "%s", tu_path("root"));
    g_config.kdf_iter = TU_KDF_ITER;
    struct mv_store_options o = config_store_options(&g_config);
    char err[256] = "";
    CHECK_EQ_INT(mv_store_init(who, QS_PW, strlen(QS_PW), &o, err, sizeof err), MV_OK);
    g_config.quota_kib = 64 * 1024;     /* far above what this test delivers */
    quota_queue_fresh_set(3600 * 1000); /* a slow machine must not make it count again */

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

int main(void)
{
    TEST(test_sealed_checks_do_not_read_the_queue);
    return th_summary();
}
