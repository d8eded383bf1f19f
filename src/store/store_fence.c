/*
 * store_fence.c -- which node serves a store: the release marker
 * ROOT/<domain>/<localpart>.released, written by mv_store_release(), removed by
 * mv_store_adopt() and by mv_store_import() (src/ops/ops_move.c).
 *
 * WHY
 *   Moving a user between nodes copies the store. Mail committed on the old node after the
 *   copy is lost, so the old node must stop accepting mail for the user first, also after a
 *   restart: a file on disk beside the store, not a flag in a server's memory.
 *
 * HOW IT FENCES
 *   The marker is written and removed under the store's lock file held exclusively
 *   (store_lock.c): every writable mv_store_open() and every mv_deliver_sealed() holds the
 *   lock shared while it works, then checks the marker. So when mv_store_release() returns,
 *   every handle that could write was closed (its last append committed), no sealed delivery
 *   is half-written, and every later one is refused with MV_EMOVED: nothing can be committed
 *   on this node after the copy. Read-only opens stay allowed (check, stats, export's own
 *   reading), since they cannot add mail.
 *
 * FORMAT
 *   One line of text: "released <UTC time> on <host>[: <note>]". Informational only: the
 *   marker's presence is what counts. Written to a temporary name, fsynced, renamed, and the
 *   directory fsynced, so a crash leaves the old state or the new one.
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STORE_FENCE_SUFFIX   ".released"
#define STORE_FENCE_NOTE_MAX 200 /* bytes of the operator's note kept in the marker */

int store_fence_path(const char *db_path, char *out, size_t out_size)
{
    size_t n = strlen(db_path);
    if (n < 3 || strcmp(db_path + n - 3, ".db") != 0) {
        return MV_EINVAL;
    }
    int w = snprintf(out, out_size, "%.*s%s", (int)(n - 3), db_path, STORE_FENCE_SUFFIX);
    return w < 0 || (size_t)w >= out_size ? MV_EINVAL : MV_OK;
}

int store_fence_check(const char *db_path, char *errmsg, size_t errmsg_size)
{
    char path[MV_PATH_MAX + 16];
    if (store_fence_path(db_path, path, sizeof path) != MV_OK) {
        snprintf(errmsg, errmsg_size, "%s: not a store file name", db_path);
        return MV_EINVAL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT) {
            return MV_OK;
        }
        snprintf(errmsg, errmsg_size, "cannot read the release marker %s: %s", path,
                 strerror(errno));
        return MV_EIO;
    }
    char line[STORE_FENCE_NOTE_MAX + 128] = "";
    ssize_t r = read(fd, line, sizeof line - 1);
    close(fd);
    line[r > 0 ? r : 0] = '\0';
    line[strcspn(line, "\r\n")] = '\0';
    snprintf(errmsg, errmsg_size,
             "the store was released from this node (%s); it is served elsewhere, or "
             "`mailvault adopt` serves it here again",
             line[0] != '\0' ? line : "no details");
    return MV_EMOVED;
}

/* The marker's one line. */
static void store_fence_line(const char *note, char *out, size_t out_size)
{
    char when[32] = "?", host[256] = "?";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm) != NULL) {
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    if (gethostname(host, sizeof host) != 0) {
        snprintf(host, sizeof host, "?");
    }
    host[sizeof host - 1] = '\0';
    char clean[STORE_FENCE_NOTE_MAX + 1] = "";
    size_t n = 0;
    for (const char *p = note != NULL ? note : ""; *p != '\0' && n < STORE_FENCE_NOTE_MAX; p++) {
        clean[n++] = (*p >= 0x20 && *p != 0x7f) ? *p : ' '; /* one line, no control bytes */
    }
    clean[n] = '\0';
    snprintf(out, out_size, "released %s on %s%s%s\n", when, host, n > 0 ? ": " : "", clean);
}

/* Writes the marker durably (temporary name, fsync, rename, fsync of the directory). */
static int
store_fence_write(const struct store_paths *p, const char *note, char *errmsg, size_t errmsg_size)
{
    char path[MV_PATH_MAX + 16], tmp[MV_PATH_MAX + 32];
    if (store_fence_path(p->db_path, path, sizeof path) != MV_OK ||
        snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        snprintf(errmsg, errmsg_size, "the store path is too long");
        return MV_EINVAL;
    }
    char line[STORE_FENCE_NOTE_MAX + 512];
    store_fence_line(note, line, sizeof line);
    size_t len = strlen(line);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    int ok = fd >= 0 && write(fd, line, len) == (ssize_t)len && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        snprintf(errmsg, errmsg_size, "cannot write the release marker %s: %s", path, strerror(e));
        return e == ENOSPC ? MV_ENOSPC : MV_EIO;
    }
    if (store_fsync_dir(p->domain_dir) != MV_OK) {
        snprintf(errmsg, errmsg_size, "cannot fsync %s", p->domain_dir);
        return MV_EIO;
    }
    return MV_OK;
}

/* Resolves the store's paths and takes its lock exclusively (the store must exist). */
static int store_fence_begin(const char *address,
                             const struct mv_store_options *opts,
                             uint32_t wait_ms,
                             struct store_paths *p,
                             int *lock_fd,
                             char *errmsg,
                             size_t errmsg_size)
{
    int rc = store_paths_resolve(address, opts, p, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    struct stat st;
    if (stat(p->db_path, &st) != 0) {
        snprintf(errmsg, errmsg_size, "no store for %s", p->address);
        return MV_ENOTFOUND;
    }
    return store_lock_take(p->db_path, STORE_LOCK_EXCLUSIVE, wait_ms, 0, lock_fd, errmsg,
                           errmsg_size);
}

int mv_store_release(const char *address,
                     const struct mv_store_options *opts,
                     const char *note,
                     uint32_t wait_ms,
                     char *errmsg,
                     size_t errmsg_size)
{
    char scratch[16];
    if (errmsg == NULL) {
        errmsg = scratch;
        errmsg_size = sizeof scratch;
    }
    errmsg[0] = '\0';
    struct store_paths p;
    int lock_fd = -1;
    int rc = store_fence_begin(address, opts, wait_ms, &p, &lock_fd, errmsg, errmsg_size);
    if (rc == MV_EBUSY) {
        snprintf(errmsg, errmsg_size,
                 "the store of %s is open (a server session, or another program); end its "
                 "sessions or let the server release it, then try again",
                 p.address);
    }
    if (rc == MV_OK) {
        char detail[16];
        /* Already released: keep the first marker (it says when the store left). */
        if (store_fence_check(p.db_path, detail, sizeof detail) != MV_EMOVED) {
            rc = store_fence_write(&p, note, errmsg, errmsg_size);
        }
    }
    store_lock_release(&lock_fd);
    return rc;
}

int mv_store_adopt(const char *address,
                   const struct mv_store_options *opts,
                   char *errmsg,
                   size_t errmsg_size)
{
    char scratch[16];
    if (errmsg == NULL) {
        errmsg = scratch;
        errmsg_size = sizeof scratch;
    }
    errmsg[0] = '\0';
    struct store_paths p;
    int lock_fd = -1;
    int rc = store_fence_begin(address, opts, STORE_LOCK_OPEN_WAIT_MS, &p, &lock_fd, errmsg,
                               errmsg_size);
    if (rc == MV_OK) {
        rc = store_fence_remove(&p, errmsg, errmsg_size);
    }
    store_lock_release(&lock_fd);
    return rc;
}

int store_fence_remove(const struct store_paths *p, char *errmsg, size_t errmsg_size)
{
    char path[MV_PATH_MAX + 16];
    if (store_fence_path(p->db_path, path, sizeof path) != MV_OK) {
        snprintf(errmsg, errmsg_size, "the store path is too long");
        return MV_EINVAL;
    }
    if (unlink(path) != 0) {
        if (errno == ENOENT) {
            return MV_OK;
        }
        snprintf(errmsg, errmsg_size, "cannot remove the release marker %s: %s", path,
                 strerror(errno));
        return MV_EIO;
    }
    if (store_fsync_dir(p->domain_dir) != MV_OK) {
        snprintf(errmsg, errmsg_size, "cannot fsync %s", p->domain_dir);
        return MV_EIO;
    }
    return MV_OK;
}

int mv_store_released(const char *address, const struct mv_store_options *opts)
{
    struct store_paths p;
    char err[256];
    int rc = store_paths_resolve(address, opts, &p, err, sizeof err);
    if (rc != MV_OK) {
        return rc;
    }
    rc = store_fence_check(p.db_path, err, sizeof err);
    return rc == MV_EMOVED ? 1 : rc;
}
