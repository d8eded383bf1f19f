/*
 * ops_backup.h -- what the files of backup, restore and password change share:
 *
 *   ops_io.c        errors, option defaults, SHA-256 of a file, a copy with fsync, removal
 *                   of a db's files, progress throttling, the crash test hook
 *   ops_snapshot.c  opening a keyed database file; a keyed copy of a database through
 *                   VACUUM INTO; verifying a copy
 *   ops_manifest.c  the backup manifest: writing and reading it
 *   ops_backup.c    mv_backup_write, mv_backup_verify, pruning
 *   ops_keyless.c   mv_backup_write_keyless: the store frozen through SQLite's WAL locks
 *   ops_restore.c   mv_backup_restore
 *   ops_passwd.c    mv_store_passwd
 *
 * Nothing outside src/ops includes it.
 */
#ifndef MV_OPS_BACKUP_H
#define MV_OPS_BACKUP_H

#include "mailvault.h"
#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

#define OPS_PASSWORD_MAX      4096        /* as mv_store_open() */
#define OPS_NEW_SUFFIX        ".new"      /* db_path + this: the file restore/passwd swap in */
#define OPS_BACKUP_SUFFIX     ".mvbackup" /* a snapshot in a backup directory */
#define OPS_MANIFEST_SUFFIX   ".json"     /* the snapshot's name + this: its manifest */
#define OPS_TEMP_SUFFIX       ".tmp"      /* "." + final name + this: not yet complete */
#define OPS_STAMP_LEN         20          /* "YYYYMMDDTHHMMSS.mmmZ" */
#define OPS_TEST_KILL_ENV     "MAILVAULT_TEST_KILL_AT" /* "passwd:3": SIGKILL after step 3 */
#define OPS_PROGRESS_EVERY_MS 100
#define OPS_BUSY_TIMEOUT_MS   30000 /* the busy timeout of the connections opened here */

/* What a snapshot holds, read in one read transaction. */
struct ops_state {
    uint64_t messages;
    uint32_t mailboxes;
    uint64_t highestmodseq;
    uint64_t uidnext_sum;
    uint64_t page_count;
    uint32_t page_size;
    int schema_version;
    mv_cipher cipher;
};

/* Progress reports, at most every OPS_PROGRESS_EVERY_MS. */
struct ops_progress {
    mv_progress_fn fn; /* NULL: none */
    void *arg;
    const char *stage;
    uint64_t total;
    int fd; /* ops_snapshot_write: the file being written, sized with fstat */
    int64_t last_ms;
};

/* ---- ops_keyless.c ---- */
/* The checks a keyless copy gets, on a database file and its WAL (missing: none): header
 * bytes, whole pages, the WAL header and checksum chain as recovery walks it. Fills
 * info->page_size, page_count, cipher, wal_size_bytes, wal_frames, wal_commits. MV_OK or
 * MV_ECORRUPT / MV_EIO with errmsg. */
int ops_keyless_verify_files(const char *db_path,
                             const char *wal_path,
                             struct mv_backup_info *info,
                             char *errmsg,
                             size_t errmsg_size);

/* ---- ops_io.c ---- */
/* Formats errmsg (may be NULL) and returns code. */
int ops_io_fail(char *errmsg, size_t errmsg_size, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* MV_ENOSPC, MV_ENOTFOUND or MV_EIO for an errno value. */
int ops_io_errno_code(int e);
/* opts, or if it is NULL the defaults (MV_STORE_OPTIONS_INIT, MV_OPS_OPTIONS_INIT, static):
 * never NULL. */
const struct mv_store_options *ops_io_store_options(const struct mv_store_options *opts);
const struct mv_ops_options *ops_io_options(const struct mv_ops_options *opts);
/* How long to wait for the store's lock or for a freeze: opts->lock_wait_ms, with 0 meaning
 * MV_OPS_LOCK_WAIT_DEFAULT_MS. */
uint32_t ops_io_lock_wait_ms(const struct mv_ops_options *opts);
/* SHA-256 (lowercase hex) and size of the file at path. */
int ops_io_sha256(
    const char *path, char hex[65], uint64_t *size_out, char *errmsg, size_t errmsg_size);
/* Hashes path again and compares with want_hex and want_size: MV_ECORRUPT, errmsg
 * "<path> <damage>", if either differs. */
int ops_io_sha256_check(const char *path,
                        const char *want_hex,
                        uint64_t want_size,
                        const char *damage,
                        char *errmsg,
                        size_t errmsg_size);
/* Copies src to dst (created 0600, must not exist), fsyncs it, and returns the SHA-256 and
 * size of the bytes written. dst is removed on failure. */
int ops_io_copy(const char *src,
                const char *dst,
                struct ops_progress *progress,
                char hex[65],
                uint64_t *size_out,
                char *errmsg,
                size_t errmsg_size);
/* The same from the descriptor in (read from its offset to the end; src names it in
 * messages), which stays open: the caller decides how to close it (store_files_close for a
 * store's file, whose close could drop this process's SQLite locks). */
int ops_io_copy_fd(int in,
                   const char *src,
                   const char *dst,
                   struct ops_progress *progress,
                   char hex[65],
                   uint64_t *size_out,
                   char *errmsg,
                   size_t errmsg_size);
/* fsyncs the file at path. */
int ops_io_fsync(const char *path, char *errmsg, size_t errmsg_size);
/* Removes path and its -wal, -shm and -journal (missing ones are fine). */
void ops_io_remove_db(const char *path);
/* Size of path, 0 if it does not exist. */
uint64_t ops_io_size(const char *path);
/* Calls progress->fn if it is set and enough time has passed (always if force). */
void ops_io_progress(struct ops_progress *progress, uint64_t done, int force);
/* Test hook: if $MAILVAULT_TEST_KILL_AT is "<op>:<step>", the process kills itself. */
void ops_io_kill_point(const char *op, int step);

/* ---- ops_snapshot.c ---- */
/* Opens the mailvault database at path with password (flags: MV_DB_READONLY or 0) and sets
 * its busy timeout to OPS_BUSY_TIMEOUT_MS. On failure errmsg is "<label>: <why>" (just
 * "<why>" if label is NULL) and *db_out is NULL. */
int ops_snapshot_open(const char *path,
                      const void *password,
                      size_t password_len,
                      uint32_t kdf_iter,
                      unsigned flags,
                      const char *label,
                      sqlite3 **db_out,
                      char *errmsg,
                      size_t errmsg_size);
/* Writes a copy of src's main database into path (created here, 0600; must not exist), keyed
 * with password under cipher (MV_CIPHER_AUTO: src's) and kdf_iter (0: the cipher's default)
 * and a new salt, through VACUUM INTO from one read transaction, then fsyncs it. path is
 * removed on failure. */
int ops_snapshot_write(sqlite3 *src,
                       const char *path,
                       const void *password,
                       size_t password_len,
                       mv_cipher cipher,
                       uint32_t kdf_iter,
                       const struct mv_ops_options *opts,
                       char *errmsg,
                       size_t errmsg_size);
/* Reads db's state (counts, page figures, cipher) in one read transaction. */
int ops_state_read(sqlite3 *db, struct ops_state *out, char *errmsg, size_t errmsg_size);
/* Reports the "verify" stage to opts's progress callback (opts NULL: none), opens the copy
 * at path with password, runs PRAGMA quick_check and reads its state; with make_wal,
 * switches it to WAL mode and closes it so that no -wal is left. MV_EAUTH for a wrong
 * password, MV_ECORRUPT for a failed check. */
int ops_snapshot_verify(const char *path,
                        const void *password,
                        size_t password_len,
                        uint32_t kdf_iter,
                        int make_wal,
                        const struct mv_ops_options *opts,
                        struct ops_state *out,
                        char *errmsg,
                        size_t errmsg_size);
/* Whether two states hold the same mail (counts, modseq and uidnext figures, schema). */
int ops_state_same_mail(const struct ops_state *a, const struct ops_state *b);

/* ---- ops_manifest.c ---- */
/* Writes info as JSON to path through path.tmp (fsync, rename). */
int ops_manifest_write(const char *path,
                       const struct mv_backup_info *info,
                       char *errmsg,
                       size_t errmsg_size);
/* Reads the manifest at path into *info. If info->path is set (the snapshot's path), the
 * manifest's "file" must be its base name. MV_ENOTFOUND, MV_ECORRUPT (not a mailvault
 * manifest, a field missing or malformed, another file's manifest). */
int ops_manifest_read(const char *path,
                      struct mv_backup_info *info,
                      char *errmsg,
                      size_t errmsg_size);

/* ---- ops_backup.c: shared with ops_keyless.c ---- */
/* Checks dest_dir and opts->keep (1..MV_BACKUP_KEEP_MAX, 0: MV_BACKUP_KEEP_DEFAULT), which
 * goes to *keep. MV_EINVAL. */
int ops_backup_check_args(const char *dest_dir,
                          const struct mv_ops_options *opts,
                          uint32_t *keep,
                          char *errmsg,
                          size_t errmsg_size);
/* Names a new snapshot of address in dir (final, and the temporary name it is written
 * under), each size bytes: a stamp that no file has yet. */
int ops_backup_names(const char *dir,
                     const char *address,
                     char *final,
                     char *tmp,
                     size_t size,
                     char *errmsg,
                     size_t errmsg_size);
/* Removes the oldest snapshots of address in dir beyond keep (with their manifests and
 * WALs) and temporary files an hour old; *pruned counts the snapshots removed. */
int ops_backup_prune(const char *dir, const char *address, uint32_t keep, uint32_t *pruned);
/* The last steps of a backup whose checked snapshot is at tmp, in this order: info's
 * manifest written to info->path + OPS_MANIFEST_SUFFIX (info->manifest_path set), tmp
 * renamed to info->path (the manifest removed if that fails), dest_dir fsync'd, then the
 * snapshots of info->address beyond keep pruned (info->pruned). */
int ops_backup_publish(const char *dest_dir,
                       const char *tmp,
                       uint32_t keep,
                       struct mv_backup_info *info,
                       char *errmsg,
                       size_t errmsg_size);

/* ---- ops_passwd.c: the swap steps passwd and restore share (see the comment there) ---- */
/* Step 1: names NEW (db_path + OPS_NEW_SUFFIX), takes the store's lock exclusively (waiting
 * up to opts->lock_wait_ms), removes what an interrupted run left at NEW, points the VFS's
 * temporary files at the store's tmp/ and passes kill point 1 of op ("passwd", "restore").
 * On success the caller ends with ops_swap_end(). */
int ops_swap_begin(const struct store_paths *paths,
                   const struct mv_ops_options *opts,
                   const char *op,
                   int *lock_fd,
                   char *new_path,
                   size_t new_path_size,
                   char *errmsg,
                   size_t errmsg_size);
/* Opens the store's file with password and checkpoints its WAL with TRUNCATE. MV_EBUSY (with
 * *db_out open) if the checkpoint could not finish. */
int ops_swap_open_old(const char *db_path,
                      const void *password,
                      size_t password_len,
                      uint32_t kdf_iter,
                      sqlite3 **db_out,
                      char *errmsg,
                      size_t errmsg_size);
/* Steps 5-7: closes *old_db (NULL is fine), requires db_path-wal missing or empty, renames
 * new_path over db_path, fsyncs dir. op names the kill points ("passwd", "restore"). */
int ops_swap_commit(sqlite3 **old_db,
                    const char *new_path,
                    const char *db_path,
                    const char *dir,
                    const char *op,
                    char *errmsg,
                    size_t errmsg_size);
/* After ops_swap_begin(), whatever happened since (rc): closes *old_db (NULL is fine); if rc
 * is an error and NEW is still there (not renamed: the store is the old one), removes NEW
 * and its side files; resets the VFS's temporary directory; releases the lock. */
void ops_swap_end(int rc, sqlite3 **old_db, const char *new_path, int *lock_fd);

/* `store import`'s staging directories (ROOT/<domain>/.import-XXXXXX, ops_move.c): the
 * import holds an exclusive flock(2) on the directory from just after creating it until
 * it has removed it, so the lock says whether an import is alive (the kernel drops it when
 * the process dies, however it dies). ops_staging_lock() takes it without waiting: MV_OK
 * with *fd_out (close it to release), MV_EBUSY when a live import holds it, MV_ENOTFOUND
 * (gone, or not a directory: never followed through a link), MV_EIO. The doctor removes
 * only directories whose lock it gets (ops_doctor.c). */
#define OPS_STAGING_PREFIX ".import-"
int ops_staging_lock(const char *dir, int *fd_out);

#endif /* MV_OPS_BACKUP_H */
