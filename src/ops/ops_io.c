/*
 * ops_io.c -- file work for backup, restore and password change: SHA-256 of a file, a copy
 * that is on disk (fsync) before it is used, removal of a database's side files, progress
 * throttling, and the crash test hook; and the error and option plumbing they share.
 *
 * IMPLEMENTATION NOTES
 *   Files are read and written with read(2)/write(2) in 1 MiB chunks, retrying short
 *   transfers and EINTR; memory stays bounded whatever the store's size.
 *   The test hook ($MAILVAULT_TEST_KILL_AT="passwd:3") lets tests stop a password change
 *   or restore with SIGKILL exactly after a given step; unset, it costs one getenv().
 */
#include "ops/ops_backup.h"
#include "ops/ops_inspect.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OPS_IO_CHUNK_BYTES (1u << 20)

int ops_io_fail(char *errmsg, size_t errmsg_size, int code, const char *fmt, ...)
{
    if (errmsg != NULL && errmsg_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errmsg, errmsg_size, fmt, ap);
        va_end(ap);
    }
    return code;
}

int ops_io_errno_code(int e)
{
    return e == ENOSPC || e == EDQUOT ? MV_ENOSPC : e == ENOENT ? MV_ENOTFOUND : MV_EIO;
}

const struct mv_store_options *ops_io_store_options(const struct mv_store_options *opts)
{
    static const struct mv_store_options defaults = MV_STORE_OPTIONS_INIT;
    return opts != NULL ? opts : &defaults;
}

const struct mv_ops_options *ops_io_options(const struct mv_ops_options *opts)
{
    static const struct mv_ops_options defaults = MV_OPS_OPTIONS_INIT;
    return opts != NULL ? opts : &defaults;
}

uint32_t ops_io_lock_wait_ms(const struct mv_ops_options *opts)
{
    return opts->lock_wait_ms != 0 ? opts->lock_wait_ms : MV_OPS_LOCK_WAIT_DEFAULT_MS;
}

static void ops_io_hex(const uint8_t *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

static int64_t ops_io_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ops_io_progress(struct ops_progress *progress, uint64_t done, int force)
{
    if (progress == NULL || progress->fn == NULL) {
        return;
    }
    int64_t now_ms = ops_io_now_ms();
    if (!force && now_ms - progress->last_ms < OPS_PROGRESS_EVERY_MS) {
        return;
    }
    progress->last_ms = now_ms;
    progress->fn(progress->arg, progress->stage, done, progress->total);
}

/* Reads up to size bytes; returns the count (0 at the end) or -1. */
static ssize_t ops_io_read(int fd, uint8_t *buf, size_t size)
{
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            break;
        }
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static int ops_io_write_all(int fd, const uint8_t *buf, size_t size)
{
    while (size > 0) {
        ssize_t n = write(fd, buf, size);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        buf += n;
        size -= (size_t)n;
    }
    return 0;
}

/* Hashes fd from its current offset to the end; if out_fd >= 0 also writes the bytes there. */
static int ops_io_stream(int fd,
                         int out_fd,
                         struct ops_progress *progress,
                         char hex[65],
                         uint64_t *size_out,
                         int *errno_out)
{
    uint8_t *buf = malloc(OPS_IO_CHUNK_BYTES);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = buf != NULL && md != NULL && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1
                 ? MV_OK
                 : MV_ENOMEM;
    uint64_t total = 0;
    *errno_out = 0;
    while (rc == MV_OK) {
        ssize_t n = ops_io_read(fd, buf, OPS_IO_CHUNK_BYTES);
        if (n < 0 || (n > 0 && out_fd >= 0 && ops_io_write_all(out_fd, buf, (size_t)n) != 0)) {
            *errno_out = errno;
            rc = ops_io_errno_code(errno);
            break;
        }
        if (n == 0) {
            break;
        }
        if (EVP_DigestUpdate(md, buf, (size_t)n) != 1) {
            rc = MV_ERROR;
        }
        total += (uint64_t)n;
        ops_io_progress(progress, total, 0);
    }
    uint8_t digest[32];
    unsigned digest_len = 0;
    if (rc == MV_OK && (EVP_DigestFinal_ex(md, digest, &digest_len) != 1 || digest_len != 32)) {
        rc = MV_ERROR;
    }
    if (rc == MV_OK) {
        ops_io_hex(digest, 32, hex);
        *size_out = total;
    }
    EVP_MD_CTX_free(md);
    free(buf);
    return rc;
}

int ops_io_sha256(
    const char *path, char hex[65], uint64_t *size_out, char *errmsg, size_t errmsg_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "%s: %s", path,
                           strerror(errno));
    }
    int e = 0;
    int rc = ops_io_stream(fd, -1, NULL, hex, size_out, &e);
    close(fd);
    if (rc != MV_OK) {
        return ops_io_fail(errmsg, errmsg_size, rc, "cannot read %s: %s", path,
                           e != 0 ? strerror(e) : mv_strerror(rc));
    }
    return MV_OK;
}

int ops_io_sha256_check(const char *path,
                        const char *want_hex,
                        uint64_t want_size,
                        const char *damage,
                        char *errmsg,
                        size_t errmsg_size)
{
    char hex[65];
    uint64_t size = 0;
    int rc = ops_io_sha256(path, hex, &size, errmsg, errmsg_size);
    if (rc == MV_OK && (size != want_size || strcmp(hex, want_hex) != 0)) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT, "%s %s", path, damage);
    }
    return rc;
}

int ops_io_copy(const char *src,
                const char *dst,
                struct ops_progress *progress,
                char hex[65],
                uint64_t *size_out,
                char *errmsg,
                size_t errmsg_size)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "%s: %s", src,
                           strerror(errno));
    }
    int rc = ops_io_copy_fd(in, src, dst, progress, hex, size_out, errmsg, errmsg_size);
    close(in);
    return rc;
}

int ops_io_copy_fd(int in,
                   const char *src,
                   const char *dst,
                   struct ops_progress *progress,
                   char hex[65],
                   uint64_t *size_out,
                   char *errmsg,
                   size_t errmsg_size)
{
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (out < 0) {
        int e = errno;
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(e), "cannot create %s: %s", dst,
                           strerror(e));
    }
    struct stat st;
    if (progress != NULL && fstat(in, &st) == 0) {
        progress->total = (uint64_t)st.st_size;
    }
    int e = 0;
    int rc = ops_io_stream(in, out, progress, hex, size_out, &e);
    if (rc == MV_OK && fsync(out) != 0) {
        e = errno;
        rc = ops_io_errno_code(e);
    }
    if (close(out) != 0 && rc == MV_OK) {
        e = errno;
        rc = ops_io_errno_code(e);
    }
    if (rc != MV_OK) {
        unlink(dst);
        return ops_io_fail(errmsg, errmsg_size, rc, "cannot copy %s to %s: %s", src, dst,
                           e != 0 ? strerror(e) : mv_strerror(rc));
    }
    ops_io_progress(progress, *size_out, 1);
    return MV_OK;
}

int ops_io_fsync(const char *path, char *errmsg, size_t errmsg_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
        }
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(e), "cannot fsync %s: %s", path,
                           strerror(e));
    }
    close(fd);
    return MV_OK;
}

void ops_io_remove_db(const char *path)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char name[MV_PATH_MAX + 16];
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        snprintf(name, sizeof name, "%s%s", path, suffixes[i]);
        unlink(name);
    }
}

uint64_t ops_io_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

void ops_io_kill_point(const char *op, int step)
{
    const char *at = getenv(OPS_TEST_KILL_ENV);
    if (at == NULL || at[0] == '\0') {
        return;
    }
    char want[64];
    snprintf(want, sizeof want, "%s:%d", op, step);
    if (strcmp(at, want) == 0) {
        raise(SIGKILL);
    }
}

int ops_io_check_finding(const char *line)
{
    const char *ec = line != NULL ? strstr(line, "error code=") : NULL;
    long code = ec != NULL ? strtol(ec + 11, NULL, 10) : 0;
    if (code <= 0 || code > INT32_MAX) {
        return MV_ECORRUPT;
    }
    if ((code & 0xff) == SQLITE_NOMEM || code == SQLITE_IOERR_NOMEM) {
        return MV_ENOMEM;
    }
    return (code & 0xff) == SQLITE_IOERR && code != SQLITE_IOERR_DATA ? MV_EIO : MV_ECORRUPT;
}

int ops_io_check_clean_again(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int rows = 0, ok = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const unsigned char *t = sqlite3_column_text(st, 0);
            ok = rows++ == 0 && t != NULL && strcmp((const char *)t, "ok") == 0;
        }
    }
    int done = sqlite3_finalize(st) == SQLITE_OK;
    return done && rows == 1 && ok;
}
