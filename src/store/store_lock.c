/*
 * store_lock.c -- the per-store lock file, ROOT/<domain>/<localpart>.lock (mode 0600).
 *
 * Every mv_store_open() holds it shared (flock LOCK_SH) for the handle's lifetime; a password
 * change or a restore, which replace the store's file by rename, hold it exclusive. So a
 * rename never happens while a handle still has the old file open: such a handle would go
 * on writing mail into an unlinked inode, and that mail would be lost. mv_store_init() holds
 * it exclusive from before it creates the file until the store is whole, so an open that
 * finds the file meanwhile waits instead of refusing it as an interrupted init.
 *
 * USAGE
 *   int fd = -1;
 *   rc = store_lock_take(db_path, STORE_LOCK_SHARED, wait_ms, readonly, &fd, err, size);
 *   ...
 *   store_lock_release(&fd);
 *
 * IMPLEMENTATION NOTES
 *   - flock(2), not fcntl(2) locks: SQLite uses fcntl locks on the database, and closing
 *     any descriptor of a file drops all of a process's fcntl locks on it; flock locks
 *     belong to the open file description and do not interfere. Two descriptors in one
 *     process conflict like two processes, so a handle open in this process also keeps a
 *     password change in this process out.
 *   - The wait is a bounded retry with LOCK_NB (a blocking flock cannot time out).
 *   - The lock file is never removed: removing it would let two processes lock two
 *     different inodes under the same name.
 *
 * LIMITATIONS
 *   Only code that goes through mv_store_open() takes the lock. `mailvault sql` on a store
 *   file, or any other SQLite client, does not; sealed deliveries write only the queue and
 *   need no lock.
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define STORE_LOCK_POLL_MS 20

int store_lock_path(const char *db_path, char *out, size_t out_size)
{
    size_t n = strlen(db_path);
    if (n < 3 || strcmp(db_path + n - 3, ".db") != 0) {
        return MV_EINVAL;
    }
    int w = snprintf(out, out_size, "%.*s.lock", (int)(n - 3), db_path);
    return w < 0 || (size_t)w >= out_size ? MV_EINVAL : MV_OK;
}

/* Opens (creating it 0600 if it is missing and the store may be written) the lock file. */
static int store_lock_open(const char *path, int readonly)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && readonly && (errno == EROFS || errno == EACCES)) {
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    }
    return fd;
}

static void store_lock_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int store_lock_take(const char *db_path,
                    int exclusive,
                    uint32_t wait_ms,
                    int readonly,
                    int *fd_out,
                    char *errmsg,
                    size_t errmsg_size)
{
    char path[MV_PATH_MAX + 8];
    *fd_out = -1;
    if (store_lock_path(db_path, path, sizeof path) != MV_OK) {
        snprintf(errmsg, errmsg_size, "%s: not a store file name", db_path);
        return MV_EINVAL;
    }
    int fd = store_lock_open(path, readonly);
    if (fd < 0) {
        if (readonly && errno == ENOENT) {
            return MV_OK; /* read-only and no lock file: nothing can be swapping the store */
        }
        snprintf(errmsg, errmsg_size, "cannot open the lock file %s: %s", path, strerror(errno));
        return MV_EIO;
    }
    int op = (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
    for (uint32_t waited_ms = 0;; waited_ms += STORE_LOCK_POLL_MS) {
        if (flock(fd, op) == 0) {
            *fd_out = fd;
            return MV_OK;
        }
        if (errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(errmsg, errmsg_size, "cannot lock %s: %s", path, strerror(errno));
            close(fd);
            return MV_EIO;
        }
        if (waited_ms >= wait_ms) {
            break;
        }
        store_lock_sleep_ms(STORE_LOCK_POLL_MS);
    }
    close(fd);
    snprintf(errmsg, errmsg_size,
             exclusive
                 ? "the store is in use (open elsewhere; close it and try again)"
                 : "the store is being created, restored or its password changed; try again later");
    return MV_EBUSY;
}

void store_lock_release(int *fd)
{
    if (*fd >= 0) {
        close(*fd); /* drops the flock */
    }
    *fd = -1;
}
