/*
 * ops_restore.c -- mv_backup_restore(): a verified snapshot swapped in for a store.
 *
 * THE STEPS (DB is the store's file, NEW is DB.new; the swap is ops_passwd.c's)
 *   0. The snapshot is verified where it lies (manifest, size, SHA-256, password,
 *      quick_check, counts) and its manifest must name this store's address. A damaged or
 *      wrong-key snapshot stops here: nothing in the store's directory was touched.
 *   1. The store's directories are made if missing (a lost store can be restored), the lock
 *      is taken exclusively, NEW left by an interrupted run removed.
 *   2. The snapshot is copied to NEW (its SHA-256 computed from the bytes written and
 *      compared with the manifest again), fsync'd.
 *   3. NEW is opened with the password, quick_check'ed, compared with the manifest, switched
 *      to WAL mode and closed.
 *   4. DB, if it exists, must not keep a WAL that could be replayed onto NEW: it is opened
 *      with the same password and checkpointed (TRUNCATE). If that password does not open
 *      it (changed since the snapshot) and DB-wal holds frames, the restore stops and says
 *      how to checkpoint it first: without the key the WAL can be neither checkpointed nor
 *      thrown away without losing the mail in it.
 *   5-7. Close, check DB-wal is missing or empty, rename(NEW, DB), fsync the directory.
 *   Killed before 6, DB and its WAL are the current store, NEW is removed by the next run;
 *   after 6, DB is the verified snapshot.
 *   8. The lock is released and the store opened once: the public delivery key file is
 *      rewritten from the restored store, queued deliveries are moved in.
 */
#include "ops/ops_backup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Copies from to to; MV_ECORRUPT if the bytes copied are not the manifest's (want_hex,
 * want_size). */
static int ops_restore_copy_file(const char *from,
                                 const char *to,
                                 struct ops_progress *progress,
                                 const char *want_hex,
                                 uint64_t want_size,
                                 char *errmsg,
                                 size_t errmsg_size)
{
    char sha[65];
    uint64_t size = 0;
    int rc = ops_io_copy(from, to, progress, sha, &size, errmsg, errmsg_size);
    if (rc == MV_OK && (size != want_size || strcmp(sha, want_hex) != 0)) {
        rc =
            ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT,
                        "%s changed while it was copied (SHA-256 differs from the manifest)", from);
    }
    return rc;
}

/* Step 2-3: the copy beside the store, checked against the manifest. */
static int ops_restore_copy(const char *backup_path,
                            const char *new_path,
                            const struct mv_backup_info *m,
                            const void *password,
                            size_t password_len,
                            const struct mv_store_options *o,
                            const struct mv_ops_options *p,
                            char *errmsg,
                            size_t errmsg_size)
{
    struct ops_progress copy = {p->progress, p->progress_arg, "copy", 0, -1, 0};
    int rc = ops_restore_copy_file(backup_path, new_path, &copy, m->sha256, m->size_bytes, errmsg,
                                   errmsg_size);
    if (rc == MV_OK && m->keyless && m->wal_size_bytes > 0) {
        char from[MV_PATH_MAX + 8], to[MV_PATH_MAX + 24];
        snprintf(from, sizeof from, "%s-wal", backup_path);
        snprintf(to, sizeof to, "%s-wal", new_path);
        rc = ops_restore_copy_file(from, to, &copy, m->wal_sha256, m->wal_size_bytes, errmsg,
                                   errmsg_size);
    }
    ops_io_kill_point("restore", 2);
    struct ops_state state = {0};
    if (rc == MV_OK) {
        rc = ops_snapshot_verify(new_path, password, password_len, o->kdf_iter, 1, p, &state,
                                 errmsg, errmsg_size);
    }
    if (rc == MV_OK && !m->keyless &&
        (state.messages != m->messages || state.page_count != m->page_count ||
         state.highestmodseq != m->highestmodseq)) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT,
                         "the copy of %s does not match its manifest", backup_path);
    }
    ops_io_kill_point("restore", 3);
    return rc;
}

/* Step 4: makes sure no WAL of the current store can meet the new file. */
static int ops_restore_quiesce(const struct store_paths *paths,
                               const void *password,
                               size_t password_len,
                               uint32_t kdf_iter,
                               sqlite3 **old_db,
                               char *errmsg,
                               size_t errmsg_size)
{
    char wal[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", paths->db_path);
    if (access(paths->db_path, F_OK) != 0) {
        if (ops_io_size(wal) > 0) {
            return ops_io_fail(errmsg, errmsg_size, MV_EINVAL,
                               "%s exists without its store file: remove it first", wal);
        }
        return MV_OK;
    }
    char detail[256] = "";
    int rc = ops_swap_open_old(paths->db_path, password, password_len, kdf_iter, old_db, detail,
                               sizeof detail);
    if (rc == MV_OK || rc == MV_EBUSY) {
        if (rc != MV_OK) {
            ops_io_fail(errmsg, errmsg_size, rc, "%s", detail);
        }
        return rc;
    }
    sqlite3_close(*old_db);
    *old_db = NULL;
    if (ops_io_size(wal) > 0) {
        return ops_io_fail(errmsg, errmsg_size, MV_EBUSY,
                           "the current store has changes in its WAL that only its own password "
                           "can checkpoint (%s): open it once with that password (e.g. "
                           "`mailvault info`), or move its files away, then restore again",
                           detail);
    }
    return MV_OK;
}

/* Step 8: one open, which rewrites the .pub file and drains the queue. */
static int ops_restore_reopen(const struct store_paths *paths,
                              const void *password,
                              size_t password_len,
                              const struct mv_store_options *o,
                              char *errmsg,
                              size_t errmsg_size)
{
    struct mv_store_options writable = *o;
    writable.flags &= ~(unsigned)(MV_STORE_READONLY | MV_STORE_CREATE);
    mv_store *s = NULL;
    char detail[512] = "";
    int rc =
        mv_store_open(paths->address, password, password_len, &writable, &s, detail, sizeof detail);
    mv_store_close(&s);
    if (rc != MV_OK) {
        return ops_io_fail(errmsg, errmsg_size, rc,
                           "the store was restored, but opening it failed: "
                           "%s",
                           detail);
    }
    return MV_OK;
}

/* Steps 0-1 checks: the snapshot verified, and of this address. */
static int ops_restore_check(const struct store_paths *paths,
                             const char *backup_path,
                             const void *password,
                             size_t password_len,
                             const struct mv_store_options *o,
                             struct mv_backup_info *m,
                             char *errmsg,
                             size_t errmsg_size)
{
    int rc = mv_backup_verify(backup_path, password, password_len, o, m, errmsg, errmsg_size);
    if (rc == MV_OK && strcmp(m->address, paths->address) != 0) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "%s is a backup of %s, not of %s",
                         backup_path, m->address, paths->address);
    }
    if (rc == MV_OK) {
        rc = store_mkdirs(paths->domain_dir, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = store_mkdirs(paths->tmp_dir, errmsg, errmsg_size);
    }
    return rc;
}

int mv_backup_restore(const char *address,
                      const void *password,
                      size_t password_len,
                      const struct mv_store_options *store_opts,
                      const char *backup_path,
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
    if (password == NULL || password_len == 0 || password_len > OPS_PASSWORD_MAX) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the password must be 1 to %d bytes",
                           OPS_PASSWORD_MAX);
    }
    struct mv_backup_info *m = calloc(1, sizeof *m);
    if (m == NULL) {
        return ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
    }
    rc = ops_restore_check(&paths, backup_path, password, password_len, o, m, errmsg, errmsg_size);
    int lock_fd = -1;
    char new_path[MV_PATH_MAX + 16];
    if (rc == MV_OK) {
        rc = ops_swap_begin(&paths, p, "restore", &lock_fd, new_path, sizeof new_path, errmsg,
                            errmsg_size);
    }
    if (rc != MV_OK) {
        free(m);
        return rc;
    }
    sqlite3 *old_db = NULL;
    rc = ops_restore_copy(backup_path, new_path, m, password, password_len, o, p, errmsg,
                          errmsg_size);
    if (rc == MV_OK) {
        rc = ops_restore_quiesce(&paths, password, password_len, o->kdf_iter, &old_db, errmsg,
                                 errmsg_size);
    }
    ops_io_kill_point("restore", 4);
    if (rc == MV_OK) {
        rc = ops_swap_commit(&old_db, new_path, paths.db_path, paths.domain_dir, "restore", errmsg,
                             errmsg_size);
    }
    ops_swap_end(rc, &old_db, new_path, &lock_fd);
    free(m);
    if (rc == MV_OK) {
        rc = ops_restore_reopen(&paths, password, password_len, o, errmsg, errmsg_size);
    }
    return rc;
}
