/*
 * test_sync_later.c -- appends committed on one call and made durable by another
 * (mv_store_sync_later, mv_store_sync; issue 13: mailvaultd waits for an APPEND's fsync on a
 * thread of its own, so another user's STORE on the same worker does not wait for it).
 *
 *   - With the handle set, an append syncs nothing (the WAL's sync count stands still), the
 *     message is there and visible to a second handle, and mv_store_sync_owed() says 1;
 *     mv_store_sync() syncs the WAL once, and a second call syncs nothing.
 *   - Without it (and after setting it off again) the append syncs by itself and owes
 *     nothing; setting it off while a sync is owed syncs first.
 *   - mv_store_sync() on another thread than the append's; mv_store_close() syncs what a
 *     caller left owed.
 *   - The disk refuses the sync (every fsync fails, faultvfs under the encrypting VFS):
 *     mv_store_sync() says MV_EIO and the sync stays owed; with the disk healthy again it
 *     syncs, and the store is whole (mv_store_check) with every message in it.
 *   - NULL and a read-only handle are refused.
 * Nothing depends on timing or a random byte.
 */
#include "faultvfs.h"
#include "harness.h"
#include "testutil.h"
#include "vfs/vfs.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SL_PW "sync later password"

static int sl_append(mv_store *s, int i)
{
    char m[256];
    int n = snprintf(m, sizeof m,
                     "From: a%d@example.net\r\nTo: later@example.org\r\nSubject: sync %d\r\n"
                     "Message-ID: <sync%d@example.net>\r\n\r\nbody %d\r\n",
                     i, i, i, i);
    return mv_message_append(s, "INBOX", m, (size_t)n, 0, NULL, 0, NULL);
}

static long long sl_inbox(mv_store *s)
{
    struct mv_mailbox_info info;
    return mv_mailbox_get(s, "INBOX", &info) == MV_OK ? (long long)info.messages : -1;
}

static void test_append_owes_its_sync(void)
{
    mv_store *s = NULL, *twin = NULL;
    CHECK_EQ_INT(tu_store_create("owes", SL_PW, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    CHECK_EQ_INT(sl_append(s, 0), MV_OK); /* the WAL's first header is synced once */
    CHECK_EQ_INT(mv_store_sync_owed(s), 0);

    CHECK_EQ_INT(mv_store_sync_later(s, 1), MV_OK);
    uint64_t syncs = mv_vfs_wal_syncs();
    CHECK_EQ_INT(sl_append(s, 1), MV_OK);
    CHECK_EQ_INT(sl_append(s, 2), MV_OK);
    CHECK_EQ_INT(mv_vfs_wal_syncs() - syncs, 0);
    CHECK_EQ_INT(mv_store_sync_owed(s), 1);
    CHECK_EQ_INT(sl_inbox(s), 3);
    CHECK_EQ_INT(mv_store_open_twin(s, &twin), MV_OK); /* visible before it is durable */
    CHECK_EQ_INT(sl_inbox(twin), 3);
    mv_store_close(&twin);

    CHECK_EQ_INT(mv_store_sync(s), MV_OK);
    CHECK_EQ_INT(mv_vfs_wal_syncs() - syncs, 1);
    CHECK_EQ_INT(mv_store_sync_owed(s), 0);
    CHECK_EQ_INT(mv_store_sync(s), MV_OK); /* nothing owed: no system call */
    CHECK_EQ_INT(mv_vfs_wal_syncs() - syncs, 1);

    /* off while owed: synced first; then appends sync by themselves again */
    CHECK_EQ_INT(sl_append(s, 3), MV_OK);
    syncs = mv_vfs_wal_syncs();
    CHECK_EQ_INT(mv_store_sync_later(s, 0), MV_OK);
    CHECK_EQ_INT(mv_vfs_wal_syncs() - syncs, 1);
    CHECK_EQ_INT(mv_store_sync_owed(s), 0);
    syncs = mv_vfs_wal_syncs();
    CHECK_EQ_INT(sl_append(s, 4), MV_OK);
    CHECK_EQ_INT(mv_vfs_wal_syncs() - syncs, 1);
    CHECK_EQ_INT(mv_store_sync_owed(s), 0);
    CHECK(tu_check_clean(s));

    CHECK_EQ_INT(mv_store_sync_later(NULL, 1), MV_EINVAL);
    CHECK_EQ_INT(mv_store_sync(NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_store_sync_owed(NULL), 0);
    mv_store_close(&s);
}

static void *sl_sync_thread(void *arg)
{
    static int rc;
    rc = mv_store_sync(arg);
    return &rc;
}

static void test_sync_on_another_thread_and_at_close(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("thread", SL_PW, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    CHECK_EQ_INT(mv_store_sync_later(s, 1), MV_OK);
    CHECK_EQ_INT(sl_append(s, 0), MV_OK);
    CHECK_EQ_INT(sl_append(s, 1), MV_OK);
    uint64_t syncs = mv_vfs_wal_syncs();
    pthread_t t;
    void *ret = NULL;
    CHECK_EQ_INT(pthread_create(&t, NULL, sl_sync_thread, s), 0);
    CHECK_EQ_INT(pthread_join(t, &ret), 0);
    CHECK(ret != NULL && *(int *)ret == MV_OK);
    CHECK_EQ_INT(mv_vfs_wal_syncs() - syncs, 1);
    CHECK_EQ_INT(mv_store_sync_owed(s), 0);

    CHECK_EQ_INT(sl_append(s, 2), MV_OK); /* owed at the close */
    syncs = mv_vfs_wal_syncs();
    mv_store_close(&s);
    CHECK(mv_vfs_wal_syncs() - syncs >= 1);
    CHECK_EQ_INT(tu_store_open("thread", SL_PW, &s), MV_OK);
    if (s != NULL) {
        CHECK_EQ_INT(sl_inbox(s), 3);
        CHECK_EQ_INT(mv_store_sync_later(s, 1), MV_OK); /* a writable open */
        mv_store_close(&s);
    }
}

static void test_refused_sync_stays_owed(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("refused", SL_PW, 0, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    CHECK_EQ_INT(sl_append(s, 0), MV_OK);
    CHECK_EQ_INT(mv_store_sync_later(s, 1), MV_OK);
    CHECK_EQ_INT(sl_append(s, 1), MV_OK);
    fv_arm(&(struct fv_plan){FV_SYNC, 1, FV_FAIL, 1}); /* every fsync fails */
    CHECK_EQ_INT(mv_store_sync(s), MV_EIO);
    CHECK(strstr(mv_store_errmsg(s), "WAL") != NULL);
    CHECK_EQ_INT(mv_store_sync_owed(s), 1);
    CHECK_EQ_INT(mv_store_sync(s), MV_EIO); /* still refused, still owed */
    CHECK_EQ_INT(mv_store_sync_owed(s), 1);
    CHECK_EQ_INT(fv_disarm(), 1);
    CHECK_EQ_INT(mv_store_sync(s), MV_OK); /* the disk is back */
    CHECK_EQ_INT(mv_store_sync_owed(s), 0);
    CHECK_EQ_INT(sl_inbox(s), 2);
    CHECK(tu_check_clean(s));
    mv_store_close(&s);

    /* read-only: nothing to set */
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    o.flags = MV_STORE_READONLY;
    char err[256];
    CHECK_EQ_INT(
        mv_store_open("refused@example.org", SL_PW, strlen(SL_PW), &o, &s, err, sizeof err), MV_OK);
    if (s != NULL) {
        CHECK_EQ_INT(mv_store_sync_later(s, 1), MV_EINVAL);
        CHECK_EQ_INT(mv_store_sync(s), MV_OK); /* owes nothing */
        mv_store_close(&s);
    }
}

int main(void)
{
    if (fv_register() != SQLITE_OK || mv_vfs_register(FV_VFS_NAME, 0) != MV_OK) {
        fprintf(stderr, "cannot register the VFS stack\n");
        return 1;
    }
    TEST(test_append_owes_its_sync);
    TEST(test_sync_on_another_thread_and_at_close);
    TEST(test_refused_sync_stays_owed);
    return th_summary();
}
