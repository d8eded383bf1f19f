/*
 * store_checkpoint.c -- WAL checkpoints out of the commits of a handle that asks for it
 * (mv_store_checkpoint_defer): a server checkpoints between its commands instead.
 *
 * WHY
 *   SQLite's wal_autocheckpoint (1,000 frames in the profile) runs the checkpoint inside the
 *   COMMIT that takes the WAL past the threshold: that commit copies every frame back into
 *   the database (each page decrypted from the WAL and encrypted again) and syncs both
 *   files, so whichever client command happens to commit then waits for it (issue 13: 22%
 *   of an EXPUNGE at 100,000 messages). A purge of 1,000 expunged bodies alone writes
 *   ~12,000 frames, so the next command's commit often lands on a checkpoint.
 *
 * IMPLEMENTATION NOTES
 *   A WAL hook (sqlite3_wal_hook, which replaces the autocheckpoint on the connection) sees
 *   the WAL's frame count after each commit: from STORE_CHECKPOINT_DUE_FRAMES on, a
 *   checkpoint is due (mv_store_checkpoint_due) and mv_store_checkpoint() runs it when the
 *   caller has time; from frames_max on, the commit checkpoints itself (PASSIVE, as the
 *   autocheckpoint does), which bounds the WAL if nobody calls mv_store_checkpoint(). The
 *   hook is installed again on a replacement connection (store_ready).
 *
 * LIMITATIONS
 *   PASSIVE never waits: a reader in a long read keeps the frames after its snapshot in the
 *   WAL, and the checkpoint stays due (as with the autocheckpoint).
 */
#include "store/store.h"

/* The autocheckpoint's threshold of the profile (store_open.c: wal_autocheckpoint=1000). */
#define STORE_CHECKPOINT_DUE_FRAMES 1000

static int store_checkpoint_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    mv_store *s = arg;
    if (frames >= 0 && (uint32_t)frames >= s->checkpoint_frames_max) {
        int log = 0, done = 0;
        /* as SQLite's own autocheckpoint: PASSIVE, its result not the commit's */
        if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &log, &done) ==
            SQLITE_OK) {
            s->checkpoint_due = done < log;
        } else {
            s->checkpoint_due = 1; /* (another connection checkpoints): still to do */
        }
    } else if (frames >= STORE_CHECKPOINT_DUE_FRAMES) {
        s->checkpoint_due = 1;
    }
    return SQLITE_OK;
}

void store_checkpoint_install(mv_store *s)
{
    if (s->checkpoint_frames_max != 0) {
        (void)sqlite3_wal_hook(s->db, store_checkpoint_hook, s);
    }
}

int mv_store_checkpoint_defer(mv_store *s, uint32_t frames_max)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (s->readonly) {
        return store_fail(s, MV_EINVAL, "the store is open read-only");
    }
    if (frames_max != 0 && frames_max < STORE_CHECKPOINT_DUE_FRAMES) {
        return store_fail(s, MV_EINVAL, "mv_store_checkpoint_defer: frames_max %u is under %d",
                          frames_max, STORE_CHECKPOINT_DUE_FRAMES);
    }
    s->checkpoint_frames_max = frames_max;
    s->checkpoint_due = 0;
    if (frames_max == 0) { /* the profile's autocheckpoint again (it replaces the hook) */
        return sqlite3_wal_autocheckpoint(s->db, STORE_CHECKPOINT_DUE_FRAMES) == SQLITE_OK
                   ? MV_OK
                   : store_fail_sqlite(s, "restoring the WAL autocheckpoint");
    }
    store_checkpoint_install(s);
    return MV_OK;
}

int mv_store_checkpoint_due(const mv_store *s)
{
    return s != NULL && s->checkpoint_due;
}

/* SQLite clears an interrupt (sqlite3_interrupt: mailvaultd's worker interrupts a checkpoint
 * that a job waits for) only once no statement of the connection is running. A cached
 * statement left mid-step (read for its first row and not reset) would keep one running, so
 * the interrupt would outlive the checkpoint and fail the handle's next statement, whatever
 * it is. The store's own statements are reset here, before the checkpoint; a statement of
 * the caller's still running (an iterator not ended) makes it MV_EBUSY, nothing done. */
static int store_checkpoint_no_statement(mv_store *s)
{
    for (size_t i = 0; i < STORE_STMT_CACHE; i++) {
        if (s->stmts[i].stmt != NULL && sqlite3_stmt_busy(s->stmts[i].stmt)) {
            sqlite3_reset(s->stmts[i].stmt);
        }
    }
    for (sqlite3_stmt *st = sqlite3_next_stmt(s->db, NULL); st != NULL;
         st = sqlite3_next_stmt(s->db, st)) {
        if (sqlite3_stmt_busy(st)) {
            return store_fail(s, MV_EBUSY,
                              "mv_store_checkpoint: a statement is still running "
                              "(an iterator not ended)");
        }
    }
    return MV_OK;
}

int mv_store_checkpoint(mv_store *s, int64_t *log_frames, int64_t *done_frames)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (s->readonly || s->read_snapshot || !sqlite3_get_autocommit(s->db)) {
        return store_fail(s, MV_EINVAL, "mv_store_checkpoint: read-only, or inside a transaction");
    }
    int rc = store_ready(s);
    if (rc == MV_OK) {
        rc = store_checkpoint_no_statement(s);
    }
    int log = 0, done = 0;
    if (rc == MV_OK && sqlite3_wal_checkpoint_v2(s->db, "main", SQLITE_CHECKPOINT_PASSIVE, &log,
                                                 &done) != SQLITE_OK) {
        rc = store_fail_sqlite(s, "checkpointing the WAL");
    }
    if (rc == MV_OK) {
        s->checkpoint_due = done < log;
    }
    if (log_frames != NULL) {
        *log_frames = log;
    }
    if (done_frames != NULL) {
        *done_frames = done;
    }
    return rc;
}
