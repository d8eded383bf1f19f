/*
 * store_sync_later.c -- appends committed now and made durable by a separate call
 * (mv_store_sync_later, mv_store_sync), so that a server can wait for the WAL's fsync on
 * another thread than the one that runs its commands.
 *
 * WHY
 *   An append's durable commit (synchronous=FULL for its transaction) blocks the calling
 *   thread for the WAL's fdatasync: 2-12 ms on a loaded disk, up to 20 ms and more. In
 *   mailvaultd a worker's writer runs the jobs of several users, so another user's STORE
 *   waited for that fsync although it has nothing to do with it (issue 13: at 10 IMAP
 *   clients 10 users share 8 workers). With the commit and the sync apart the writer goes
 *   on, and a thread of its own waits for the disk (mailvaultd's sync_apart).
 *
 * WHAT IT KEEPS
 *   The caller acknowledges the mail only after mv_store_sync() returned MV_OK, so nothing
 *   acknowledged is ever lost. The commit itself is SQLite's (synchronous=NORMAL, as every
 *   other change of the profile), so the message is visible to other connections from the
 *   commit on, a few milliseconds before it is durable: a crash in that window loses it as
 *   it loses an append that was never acknowledged. The sync is of the WAL the frames were
 *   written to (store_wal_sync: the same file SQLite syncs with FULL), and a checkpoint
 *   meanwhile syncs the WAL before it copies anything, so nothing is lost by one either.
 *
 * THREADS
 *   mv_store_sync() may run on another thread than the append, as long as nothing else uses
 *   the handle meanwhile (the header's THREADS rule: one thread at a time).
 */
#include "store/store.h"

int mv_store_sync_later(mv_store *s, int on)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (s->readonly) {
        return store_fail(s, MV_EINVAL, "the store is open read-only");
    }
    int rc = on ? MV_OK : mv_store_sync(s); /* what was owed is owed by nobody after this */
    if (rc == MV_OK) {
        s->sync_later = on != 0;
    }
    return rc;
}

int mv_store_sync(mv_store *s)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (!s->sync_owed) {
        return MV_OK;
    }
    int rc = store_wal_sync(s);
    if (rc == MV_OK) {
        s->sync_owed = 0;
    }
    return rc;
}

int mv_store_sync_owed(const mv_store *s)
{
    return s != NULL && s->sync_owed;
}
