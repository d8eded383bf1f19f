/*
 * ops_keyless.c -- mv_backup_write_keyless(): a consistent copy of a store's ciphertext
 * (database file + WAL) without its password, for `mailvault backup --all`.
 *
 * HOW THE COPY IS MADE CONSISTENT
 *   In WAL mode the database file changes only in a checkpoint, and the WAL only when a
 *   writer appends (or restarts it). SQLite's unix VFS serialises those with locks on bytes
 *   of the -shm file: byte 120 + 0 is WAL_WRITE_LOCK (held by a writer for its transaction,
 *   and by recovery), 120 + 1 is WAL_CKPT_LOCK (held by a checkpointer). Holding both as
 *   write locks stops every writer, every checkpoint and every recovery, while readers go on
 *   (they use the read-mark bytes 123..127). One path escapes them: a connection that closes
 *   last takes an EXCLUSIVE lock on the database file and then checkpoints in "exclusive
 *   mode", without shm locks. A read lock on the database file's SHARED range (the bytes
 *   SQLite's readers lock, from 0x40000002, 510 of them) makes that EXCLUSIVE lock fail, so
 *   the close leaves the WAL alone. With the three locks held, neither file changes; the
 *   copy of both is the store as of its last commit, as a power loss would leave it.
 *   The locks are open-file-description locks (F_OFD_SETLK): they conflict with SQLite's
 *   POSIX locks of other processes and of this one. Closing our descriptors would still
 *   drop every POSIX lock of this process on the file (and on the -shm, where SQLite keeps
 *   its WAL locks): so the database file is copied through the freeze's own descriptor, and
 *   both are ended with store_files_close(), which parks them while this process has the
 *   store open (store_files.h). The WAL file is opened and closed as any file: SQLite's
 *   unix VFS takes no lock on it. Writers wait meanwhile (the store's busy timeout is 30 s);
 *   the freeze waits at most lock_wait_ms for a running transaction to end.
 *   If there is no -shm (no connection has had the store open since the last clean close)
 *   it is created, empty, 0600: a connection that then opens the store runs recovery,
 *   which needs the write lock, and so waits as a writer does.
 *
 * CHECKS WITHOUT THE KEY
 *   Header bytes 16..23 (page size, file format 1 or 2, a reserve byte of a known cipher,
 *   the fixed payload fractions 64/32/32), a whole number of pages, the WAL's magic,
 *   version, page size and header checksum, and its frame checksum chain (computed by the
 *   VFS over ciphertext), stopping as recovery would at the first frame that breaks it;
 *   and the copies re-read against the SHA-256 of what was read while frozen.
 *
 * LIMITATIONS
 *   The lock offsets are those of SQLite's unix VFS (documented in its WAL file format), on
 *   which the mailvault VFS stacks and whose shm methods it passes through. A store opened
 *   with locking_mode=EXCLUSIVE (mailvault never does) keeps its WAL index in private
 *   memory; its EXCLUSIVE lock makes the freeze time out (MV_EBUSY) instead.
 */
#include "crypto/crypt.h"
#include "ops/ops_backup.h"
#include "store/store_files.h"
#include "vfs/sqlite_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OPS_SHM_WRITE_LOCK_OFFSET 120 /* unix VFS: WAL_WRITE_LOCK, then WAL_CKPT_LOCK */
#define OPS_SHM_LOCKS_FROZEN      2
#define OPS_DB_SHARED_FIRST       (0x40000000 + 2)
#define OPS_DB_SHARED_SIZE        510
#define OPS_LOCK_POLL_MS          1 /* short: writers take and drop WAL_WRITE often */

struct ops_freeze {
    int db_fd;
    int shm_fd;
    dev_t db_dev; /* the database file's identity, for store_files_close() */
    ino_t db_ino;
};

static int ops_keyless_lock(int fd, short type, off_t start, off_t len, uint32_t wait_ms)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = start;
    fl.l_len = len;
    for (uint32_t waited_ms = 0;; waited_ms += OPS_LOCK_POLL_MS) {
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
            return MV_OK;
        }
        if (errno != EAGAIN && errno != EACCES && errno != EINTR) {
            return MV_EIO;
        }
        if (waited_ms >= wait_ms) {
            return MV_EBUSY;
        }
        struct timespec ts = {0, OPS_LOCK_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Ends the freeze. Never a plain close(): with the store open in this process (a handle on
 * any thread) it would drop the connection's POSIX locks on the file and on the -shm; the
 * registry parks the descriptors instead, their OFD locks released (store_files.h). */
static void ops_thaw(struct ops_freeze *fz)
{
    store_files_close(fz->shm_fd, fz->db_dev, fz->db_ino);
    store_files_close(fz->db_fd, fz->db_dev, fz->db_ino);
    fz->shm_fd = fz->db_fd = -1;
}

static int ops_freeze(
    const char *db_path, uint32_t wait_ms, struct ops_freeze *fz, char *errmsg, size_t errmsg_size)
{
    fz->db_fd = open(db_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    fz->shm_fd = -1;
    fz->db_dev = 0;
    fz->db_ino = 0;
    struct stat st;
    if (fz->db_fd < 0 || fstat(fz->db_fd, &st) != 0) {
        int e = errno;
        /* A descriptor whose file is unknown is left open rather than closed: the file may
         * be a store this process has open (fstat of an open descriptor does not fail). */
        fz->db_fd = -1;
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(e), "%s: %s", db_path,
                           strerror(e));
    }
    fz->db_dev = st.st_dev;
    fz->db_ino = st.st_ino;
    int rc = ops_keyless_lock(fz->db_fd, F_RDLCK, OPS_DB_SHARED_FIRST, OPS_DB_SHARED_SIZE, wait_ms);
    char shm[MV_PATH_MAX + 8];
    snprintf(shm, sizeof shm, "%s-shm", db_path);
    if (rc == MV_OK) {
        fz->shm_fd = open(shm, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        rc = fz->shm_fd >= 0 ? MV_OK : MV_EIO;
    }
    if (rc == MV_OK) {
        rc = ops_keyless_lock(fz->shm_fd, F_WRLCK, OPS_SHM_WRITE_LOCK_OFFSET, OPS_SHM_LOCKS_FROZEN,
                              wait_ms);
    }
    if (rc != MV_OK) {
        ops_thaw(fz);
        return ops_io_fail(errmsg, errmsg_size, rc,
                           rc == MV_EBUSY ? "%s: the store stayed busy (a long transaction or an "
                                            "exclusive connection); try again"
                                          : "%s: cannot lock it: %s",
                           db_path, strerror(errno));
    }
    return MV_OK;
}

static int ops_read_at(int fd, uint8_t *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

/* The header of a mailvault database file; *page_size, *cipher, *pages from it. */
static int ops_keyless_check_db(const char *path,
                                struct mv_backup_info *info,
                                char *errmsg,
                                size_t errmsg_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    uint8_t hdr[24];
    struct stat st;
    int ok = fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= 512 &&
             ops_read_at(fd, hdr, sizeof hdr, 0) == 0;
    if (fd >= 0) {
        close(fd);
    }
    uint32_t page_size = ok ? mv_header_page_size(hdr) : 0;
    int cipher = ok ? crypt_cipher_by_reserve(mv_header_reserve(hdr)) : 0;
    ok = ok && mv_header_plain_valid(hdr) && cipher != 0 && !mv_header_is_plaintext(hdr) &&
         (uint64_t)st.st_size % page_size == 0;
    if (!ok) {
        return ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT,
                           "%s does not look like a mailvault store (header bytes 16..23, "
                           "size a multiple of the page size)",
                           path);
    }
    info->page_size = page_size;
    info->page_count = (uint64_t)st.st_size / page_size;
    info->cipher = (mv_cipher)cipher;
    return MV_OK;
}

/* Walks the WAL copy as recovery would (vfs/sqlite_format.h): valid frames and commit
 * frames of its header's generation, up to the first frame that breaks the chain (without
 * the key, damage cannot be told from a page overwritten in place; restoring the copy
 * opens it through the VFS, which can). A WAL without a valid header has none. */
static int ops_keyless_check_wal(const char *path,
                                 struct mv_backup_info *info,
                                 char *errmsg,
                                 size_t errmsg_size)
{
    info->wal_frames = info->wal_commits = 0;
    if (info->wal_size_bytes < MV_WAL_HEADER_BYTES) {
        return MV_OK;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct mv_wal_walk w;
    if (fd < 0 || mv_wal_walk_begin(&w, fd, info->page_size) != 0) {
        int e = errno;
        if (fd >= 0) {
            mv_wal_walk_end(&w);
            close(fd);
        }
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(e), "cannot read %s: %s", path,
                           strerror(e));
    }
    int step;
    while ((step = mv_wal_walk_next(&w)) == MV_WAL_STEP_FRAME) {
    }
    int e = errno;
    info->wal_frames = w.last_commit; /* frames up to the last commit are what counts */
    info->wal_commits = w.commits;
    mv_wal_walk_end(&w);
    close(fd);
    if (step == MV_WAL_STEP_ERROR) {
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(e), "cannot read %s: %s", path,
                           strerror(e));
    }
    return MV_OK;
}

int ops_keyless_verify_files(const char *db_path,
                             const char *wal_path,
                             struct mv_backup_info *info,
                             char *errmsg,
                             size_t errmsg_size)
{
    info->wal_size_bytes = ops_io_size(wal_path);
    int rc = ops_keyless_check_db(db_path, info, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = ops_keyless_check_wal(wal_path, info, errmsg, errmsg_size);
    }
    return rc;
}

/* Frozen: copies the database file and its WAL to tmp and tmp_wal. */
static int ops_keyless_copy(const struct store_paths *paths,
                            const char *tmp,
                            const char *tmp_wal,
                            const struct mv_ops_options *p,
                            struct mv_backup_info *info,
                            char *errmsg,
                            size_t errmsg_size)
{
    struct ops_freeze fz;
    int rc = ops_freeze(paths->db_path, ops_io_lock_wait_ms(p), &fz, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    /* From the freeze's descriptor: a descriptor of its own would have to be closed. */
    struct ops_progress progress = {p->progress, p->progress_arg, "copy", 0, -1, 0};
    rc = ops_io_copy_fd(fz.db_fd, paths->db_path, tmp, &progress, info->sha256, &info->size_bytes,
                        errmsg, errmsg_size);
    char wal[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", paths->db_path);
    info->wal_size_bytes = 0;
    info->wal_sha256[0] = '\0';
    if (rc == MV_OK && ops_io_size(wal) > 0) {
        rc = ops_io_copy(wal, tmp_wal, &progress, info->wal_sha256, &info->wal_size_bytes, errmsg,
                         errmsg_size);
    }
    ops_thaw(&fz);
    return rc;
}

static int ops_keyless_check(const char *tmp,
                             const char *tmp_wal,
                             struct mv_backup_info *info,
                             char *errmsg,
                             size_t errmsg_size)
{
    /* The copies re-read: their bytes are what was read while the store was frozen. */
    static const char damage[] = "differs from what was copied into it (disk or filesystem error)";
    int rc = ops_io_sha256_check(tmp, info->sha256, info->size_bytes, damage, errmsg, errmsg_size);
    if (rc == MV_OK && info->wal_size_bytes > 0) {
        rc = ops_io_sha256_check(tmp_wal, info->wal_sha256, info->wal_size_bytes, damage, errmsg,
                                 errmsg_size);
    }
    if (rc == MV_OK) {
        rc = ops_keyless_check_db(tmp, info, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = ops_keyless_check_wal(tmp_wal, info, errmsg, errmsg_size);
    }
    return rc;
}

/* Moves the checked copies to their final names: WAL, manifest, then the snapshot; then
 * prunes (ops_backup_publish). */
static int ops_keyless_publish(const char *dest_dir,
                               const char *tmp,
                               const char *tmp_wal,
                               uint32_t keep,
                               struct mv_backup_info *info,
                               char *errmsg,
                               size_t errmsg_size)
{
    char final_wal[MV_PATH_MAX + 8];
    snprintf(final_wal, sizeof final_wal, "%s-wal", info->path);
    int rc = MV_OK;
    if (info->wal_size_bytes > 0 && rename(tmp_wal, final_wal) != 0) {
        rc = ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "cannot rename %s: %s",
                         tmp_wal, strerror(errno));
    }
    if (rc == MV_OK) {
        rc = ops_backup_publish(dest_dir, tmp, keep, info, errmsg, errmsg_size);
    }
    if (rc != MV_OK && access(tmp, F_OK) == 0) {
        unlink(final_wal); /* the snapshot was not renamed (after that only the fsync failed) */
    }
    return rc;
}

/* Everything after the arguments are checked; tmp and tmp_wal are MV_PATH_MAX buffers. */
static int ops_keyless_run(const struct store_paths *paths,
                           const char *dest_dir,
                           const struct mv_ops_options *p,
                           uint32_t keep,
                           struct mv_backup_info *info,
                           char *tmp,
                           char *tmp_wal,
                           char *errmsg,
                           size_t errmsg_size)
{
    int lock_fd = -1;
    int rc = ops_backup_names(dest_dir, paths->address, info->path, tmp, MV_PATH_MAX, errmsg,
                              errmsg_size);
    if (rc == MV_OK) {
        snprintf(tmp_wal, MV_PATH_MAX, "%.*s-wal%s", (int)(strlen(tmp) - 4), tmp, OPS_TEMP_SUFFIX);
        /* Shared, as a reader: no restore or password change swaps the file meanwhile. */
        rc = store_lock_take(paths->db_path, STORE_LOCK_SHARED, ops_io_lock_wait_ms(p), 0, &lock_fd,
                             errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = ops_keyless_copy(paths, tmp, tmp_wal, p, info, errmsg, errmsg_size);
    }
    store_lock_release(&lock_fd);
    if (rc == MV_OK) {
        rc = ops_keyless_check(tmp, tmp_wal, info, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        info->keyless = 1;
        info->created = (int64_t)time(NULL);
        rc = ops_keyless_publish(dest_dir, tmp, tmp_wal, keep, info, errmsg, errmsg_size);
    }
    if (rc != MV_OK) {
        unlink(tmp);
        unlink(tmp_wal);
    }
    return rc;
}

int mv_backup_write_keyless(const char *address,
                            const struct mv_store_options *store_opts,
                            const char *dest_dir,
                            const struct mv_ops_options *opts,
                            struct mv_backup_info *info_out,
                            char *errmsg,
                            size_t errmsg_size)
{
    const struct mv_store_options *o = ops_io_store_options(store_opts);
    const struct mv_ops_options *p = ops_io_options(opts);
    uint32_t keep = 0;
    struct store_paths paths;
    int rc = store_paths_resolve(address, o, &paths, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = ops_backup_check_args(dest_dir, p, &keep, errmsg, errmsg_size);
    }
    if (rc != MV_OK) {
        return rc;
    }
    if (access(paths.db_path, F_OK) != 0) {
        return ops_io_fail(errmsg, errmsg_size, MV_ENOTFOUND, "no store for %s", paths.address);
    }
    rc = store_mkdirs(dest_dir, errmsg, errmsg_size);
    struct mv_backup_info *info = calloc(1, sizeof *info);
    char *tmp = malloc(MV_PATH_MAX), *tmp_wal = malloc(MV_PATH_MAX);
    if (rc == MV_OK && (info == NULL || tmp == NULL || tmp_wal == NULL)) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
    }
    if (rc == MV_OK) {
        snprintf(info->address, sizeof info->address, "%s", paths.address);
        rc = ops_keyless_run(&paths, dest_dir, p, keep, info, tmp, tmp_wal, errmsg, errmsg_size);
    }
    if (rc == MV_OK && info_out != NULL) {
        *info_out = *info;
    }
    free(tmp_wal);
    free(tmp);
    free(info);
    return rc;
}
