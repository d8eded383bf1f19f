/*
 * ops_passwd.c -- mv_store_passwd(): a new key and a new salt (and maybe a new cipher) for a
 * store, by writing a rekeyed copy and renaming it over the store's file; and the swap steps
 * it shares with mv_backup_restore() (ops_restore.c).
 *
 * THE STEPS, AND WHY A KILL AT ANY INSTANT IS SAFE
 *   DB is ROOT/<domain>/<local>.db, NEW is DB.new; "old" and "new" are the two passwords.
 *   1. Lock: the store's lock file exclusively (every mv_store_open() holds it shared), so
 *      no handle has DB open, and none can open it until we are done. Then NEW, NEW-wal,
 *      NEW-shm and NEW-journal left by an interrupted run are removed: while NEW exists the
 *      rename (step 6) has not happened, so DB is still the old store and NEW is garbage.
 *      Killed here: DB untouched. Old opens.
 *   2. DB is opened with old (a wrong one stops here, nothing written), its WAL checkpointed
 *      with TRUNCATE (every committed frame into DB, the WAL emptied), its state read.
 *      Killed here: a checkpoint is SQLite's own crash-safe operation. Old opens.
 *   3. VACUUM INTO NEW under new (new salt), fsync NEW. Killed here: NEW is partial, DB and
 *      its WAL are whole. Old opens; the next run removes NEW.
 *   4. NEW is opened with new, quick_check'ed, its counts compared with DB's (a mismatch
 *      stops here), switched to WAL mode (header bytes 18-19, a write whose commit must be
 *      seen to finish) and closed (no NEW-wal, and no NEW-journal of a commit that failed
 *      and could not roll back: NEW is not whole without it). Killed here: as 3.
 *   5. DB's connection is closed: as the last connection it checkpoints and deletes DB-wal.
 *      DB-wal must now be missing or empty, or we stop (a writer outside the lock protocol):
 *      a WAL of the old file must never meet the new one, whose pages it would overwrite.
 *      Killed here: the close is SQLite's crash-safe checkpoint. Old opens.
 *   6. rename(NEW, DB): atomic. Killed before it: old opens DB; after it: new opens DB,
 *      which is complete (verified in 4, fsync'd in 3), and no WAL of the old file exists
 *      (5); a stale DB-shm is rebuilt by the first opener, which finds no other user of it.
 *   7. fsync of the directory: makes the rename durable. A power loss before it leaves
 *      either name binding, each a complete store under its own password.
 *   Then the lock is released (closing its descriptor; a kill releases it too).
 *   $MAILVAULT_TEST_KILL_AT="passwd:K" kills the process after step K (tests).
 */
#include "ops/ops_backup.h"
#include "vfs/db_error.h"
#include "vfs/vfs_tempdir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ops_swap_begin(const struct store_paths *paths,
                   const struct mv_ops_options *opts,
                   const char *op,
                   int *lock_fd,
                   char *new_path,
                   size_t new_path_size,
                   char *errmsg,
                   size_t errmsg_size)
{
    int n = snprintf(new_path, new_path_size, "%s%s", paths->db_path, OPS_NEW_SUFFIX);
    if (n < 0 || (size_t)n + 16 >= new_path_size) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the store path is too long");
    }
    int rc = store_lock_take(paths->db_path, STORE_LOCK_EXCLUSIVE, ops_io_lock_wait_ms(opts), 0,
                             lock_fd, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    ops_io_remove_db(new_path); /* an interrupted run's copy: the rename never happened */
    ops_io_kill_point(op, 1);
    mv_vfs_temp_dir_set(paths->tmp_dir); /* VACUUM's encrypted temp files: the store's tmp/ */
    return MV_OK;
}

int ops_swap_open_old(const char *db_path,
                      const void *password,
                      size_t password_len,
                      uint32_t kdf_iter,
                      sqlite3 **db_out,
                      char *errmsg,
                      size_t errmsg_size)
{
    int rc = ops_snapshot_open(db_path, password, password_len, kdf_iter, 0, NULL, db_out, errmsg,
                               errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = NULL;
    int busy = -1;
    int step = sqlite3_prepare_v2(*db_out, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &st, NULL);
    if (step == SQLITE_OK) {
        step = sqlite3_step(st);
    }
    if (step == SQLITE_ROW) {
        busy = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    if (step != SQLITE_ROW) {
        /* The checkpoint itself failed (a read or write error, a full disk): that is the
         * cause to name, not another connection. */
        char cause[512];
        int code =
            mv_db_error_cause(*db_out, sqlite3_extended_errcode(*db_out), cause, sizeof cause);
        return ops_io_fail(errmsg, errmsg_size, code, "cannot checkpoint the store's WAL: %s",
                           cause);
    }
    if (busy != 0) {
        return ops_io_fail(errmsg, errmsg_size, MV_EBUSY,
                           "cannot checkpoint the store's WAL: another connection (outside "
                           "mailvault's lock) is using it");
    }
    return MV_OK;
}

int ops_swap_commit(sqlite3 **old_db,
                    const char *new_path,
                    const char *db_path,
                    const char *dir,
                    const char *op,
                    char *errmsg,
                    size_t errmsg_size)
{
    if (*old_db != NULL && sqlite3_close(*old_db) != SQLITE_OK) {
        return ops_io_fail(errmsg, errmsg_size, MV_EBUSY, "cannot close the store");
    }
    *old_db = NULL;
    char wal[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", db_path);
    if (ops_io_size(wal) > 0) {
        return ops_io_fail(errmsg, errmsg_size, MV_EBUSY,
                           "%s is not empty after the store was closed: another connection "
                           "(outside mailvault's lock) is writing; nothing was changed",
                           wal);
    }
    ops_io_kill_point(op, 5);
    if (rename(new_path, db_path) != 0) {
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "cannot rename %s: %s",
                           new_path, strerror(errno));
    }
    ops_io_kill_point(op, 6);
    if (store_fsync_dir(dir) != MV_OK) {
        return ops_io_fail(errmsg, errmsg_size, MV_EIO,
                           "the store was replaced, but fsync of %s failed", dir);
    }
    ops_io_kill_point(op, 7);
    return MV_OK;
}

void ops_swap_end(int rc, sqlite3 **old_db, const char *new_path, int *lock_fd)
{
    sqlite3_close(*old_db);
    *old_db = NULL;
    if (rc != MV_OK && access(new_path, F_OK) == 0) {
        ops_io_remove_db(new_path); /* not renamed: the store is the old one */
    }
    mv_vfs_temp_dir_set(NULL);
    store_lock_release(lock_fd);
}

/* Steps 2-4: open with old, copy under new, verify the copy. */
static int ops_passwd_copy(const struct store_paths *paths,
                           const char *new_path,
                           const void *old_pw,
                           size_t old_len,
                           const void *new_pw,
                           size_t new_len,
                           const struct mv_store_options *o,
                           const struct mv_ops_options *p,
                           sqlite3 **old_db,
                           char *errmsg,
                           size_t errmsg_size)
{
    int rc = ops_swap_open_old(paths->db_path, old_pw, old_len, o->kdf_iter, old_db, errmsg,
                               errmsg_size);
    struct ops_state before = {0}, after = {0};
    if (rc == MV_OK) {
        rc = ops_state_read(*old_db, &before, errmsg, errmsg_size);
    }
    ops_io_kill_point("passwd", 2);
    if (rc == MV_OK) {
        rc = ops_snapshot_write(*old_db, new_path, new_pw, new_len, p->cipher, o->kdf_iter, p,
                                errmsg, errmsg_size);
    }
    ops_io_kill_point("passwd", 3);
    if (rc == MV_OK) {
        rc = ops_snapshot_verify(new_path, new_pw, new_len, o->kdf_iter, 1, p, &after, errmsg,
                                 errmsg_size);
    }
    if (rc == MV_OK && !ops_state_same_mail(&before, &after)) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT,
                         "the rekeyed copy differs from the store (%llu messages, store %llu): "
                         "nothing was changed",
                         (unsigned long long)after.messages, (unsigned long long)before.messages);
    }
    ops_io_kill_point("passwd", 4);
    return rc;
}

int mv_store_passwd(const char *address,
                    const void *old_password,
                    size_t old_password_len,
                    const void *new_password,
                    size_t new_password_len,
                    const struct mv_store_options *store_opts,
                    const struct mv_ops_options *opts,
                    char *errmsg,
                    size_t errmsg_size)
{
    const struct mv_store_options *o = ops_io_store_options(store_opts);
    const struct mv_ops_options *p = ops_io_options(opts);
    struct store_paths paths;
    int rc = store_paths_resolve(address, o, &paths, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    if (old_password == NULL || old_password_len == 0 || old_password_len > OPS_PASSWORD_MAX ||
        new_password == NULL || new_password_len == 0 || new_password_len > OPS_PASSWORD_MAX) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL,
                           "the passwords must be 1 to %d bytes (an empty new password is "
                           "refused)",
                           OPS_PASSWORD_MAX);
    }
    if (p->cipher == MV_CIPHER_NONE || (unsigned)p->cipher > MV_CIPHER_NONE) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the new file needs a cipher");
    }
    struct stat st;
    if (stat(paths.db_path, &st) != 0) {
        return ops_io_fail(errmsg, errmsg_size, MV_ENOTFOUND, "no store for %s", paths.address);
    }
    int lock_fd = -1;
    char new_path[MV_PATH_MAX + 16];
    rc = ops_swap_begin(&paths, p, "passwd", &lock_fd, new_path, sizeof new_path, errmsg,
                        errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3 *old_db = NULL;
    rc = ops_passwd_copy(&paths, new_path, old_password, old_password_len, new_password,
                         new_password_len, o, p, &old_db, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = ops_swap_commit(&old_db, new_path, paths.db_path, paths.domain_dir, "passwd", errmsg,
                             errmsg_size);
    }
    ops_swap_end(rc, &old_db, new_path, &lock_fd);
    return rc;
}
