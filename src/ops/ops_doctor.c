/*
 * ops_doctor.c -- mv_doctor_run: the reference's deployment checklist as checks, each
 * OK, WARN or FAIL, without any password.
 *
 * USAGE
 *   struct mv_doctor_options o = MV_DOCTOR_OPTIONS_INIT;
 *   mv_doctor_run(&o, print_line, NULL, &summary);   summary.fail > 0: not ready
 *
 * IMPLEMENTATION NOTES
 *   The checklist (reference-system.md, "Operations") and how each item is checked here:
 *   - the ciphers work: the crypto layer's known-answer self-test (RFC 8439, RFC 7914 and
 *     page round trips), which is what the VFS runs before its first open;
 *   - the SQLite build: version 3.35+ (RETURNING), FTS5 and thread safety compiled in
 *     (FAIL without), dbstat (WARN: maintenance then judges free pages only); OpenSSL 3;
 *   - temporary files: the VFS writes them, encrypted, into each domain's tmp/, so that is
 *     what must exist, be writable (a file is created and removed) and sit on the stores'
 *     filesystem (st_dev), or VACUUM's copy fills another disk; $SQLITE_TMPDIR is only
 *     reported, since nothing of a store goes there;
 *   - free disk at least twice the largest store (statvfs of the root; the
 *     $MAILVAULT_TEST_FREE_BYTES test hook of ops_free_bytes applies);
 *   - WAL files against a limit, store headers (a plaintext or unknown header FAILs),
 *     permissions (0700 directories, 0600 files) from the keyless root scan;
 *   - leftovers of a killed `store import`: its staging directories (.import-XXXXXX in a
 *     domain) that no live import holds locked and unwritten for an hour (WARN; removed
 *     with mv_doctor_options.fix, `mailvault doctor --fix`);
 *   - the open-file limit: RLIMIT_NOFILE (soft) against files_per_store descriptors per
 *     store plus OPS_DOCTOR_FD_SPARE for the process itself, for a server that opens them all.
 */
#include "crypto/crypt.h"
#include "ops/ops_backup.h"
#include "ops/ops_inspect.h"

#include <dirent.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OPS_DOCTOR_FD_SPARE       64
#define OPS_DOCTOR_SQLITE_MIN     3035000 /* RETURNING */
#define OPS_DOCTOR_OPENSSL_MIN    0x30000000L
#define OPS_DOCTOR_STORE_FAIL_MAX 20   /* per check; the rest are counted */
#define OPS_DOCTOR_STAGING_IDLE_S 3600 /* unwritten this long: not a running import */

struct ops_doctor {
    const struct mv_doctor_options *o;
    mv_doctor_fn fn;
    void *arg;
    struct mv_doctor_summary *out;
    char root[MV_PATH_MAX];
    uint64_t largest_bytes;
    uint32_t bad_headers, bad_modes, big_wals;
};

__attribute__((format(printf, 4, 5))) static void
ops_doctor_say(struct ops_doctor *d, int status, const char *check, const char *fmt, ...)
{
    char detail[MV_PATH_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    uint32_t *counter = status == MV_DOCTOR_OK     ? &d->out->ok
                        : status == MV_DOCTOR_WARN ? &d->out->warn
                                                   : &d->out->fail;
    (*counter)++;
    if (d->fn != NULL) {
        d->fn(d->arg, status, check, detail);
    }
}

static void ops_doctor_software(struct ops_doctor *d)
{
    if (crypt_selftest() == CRYPT_OK) {
        ops_doctor_say(d, MV_DOCTOR_OK, "ciphers",
                       "chacha20, aes256cbc and sqlcipher pass their known-answer self-test");
    } else {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "ciphers",
                       "the known-answer self-test failed: this libcrypto computes something "
                       "else; no store can be trusted to open");
    }
    int version = sqlite3_libversion_number();
    ops_doctor_say(d, version >= OPS_DOCTOR_SQLITE_MIN ? MV_DOCTOR_OK : MV_DOCTOR_FAIL, "sqlite",
                   "SQLite %s (needs 3.35 or later)", sqlite3_libversion());
    static const struct {
        const char *option;
        int status_without;
        const char *why;
    } options[] = {
        {"ENABLE_FTS5", MV_DOCTOR_FAIL, "full-text search"},
        {"ENABLE_DBSTAT_VTAB", MV_DOCTOR_WARN, "maintenance measures page slack with it"},
    };
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
        int used = sqlite3_compileoption_used(options[i].option);
        ops_doctor_say(d, used ? MV_DOCTOR_OK : options[i].status_without, "sqlite",
                       "SQLITE_%s %s (%s)", options[i].option, used ? "compiled in" : "missing",
                       options[i].why);
    }
    ops_doctor_say(d, sqlite3_threadsafe() ? MV_DOCTOR_OK : MV_DOCTOR_FAIL, "sqlite",
                   "thread safety %s", sqlite3_threadsafe() ? "on" : "off (SQLITE_THREADSAFE=0)");
    ops_doctor_say(d,
                   OpenSSL_version_num() >= (unsigned long)OPS_DOCTOR_OPENSSL_MIN ? MV_DOCTOR_OK
                                                                                  : MV_DOCTOR_FAIL,
                   "openssl", "%s (needs 3.0 or later)", OpenSSL_version(OPENSSL_VERSION));
}

/* tmp/ of one domain: a directory, writable, on the domain's filesystem. */
static void ops_doctor_tmp(struct ops_doctor *d, const char *domain_dir)
{
    char tmp[MV_PATH_MAX + 320], probe[MV_PATH_MAX + 340];
    struct stat dom, st;
    snprintf(tmp, sizeof tmp, "%s/tmp", domain_dir);
    int found = stat(tmp, &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "temp",
                       "%s is %s: temporary files (VACUUM, sorts) cannot be written", tmp,
                       found ? "not a directory" : "missing");
        return;
    }
    snprintf(probe, sizeof probe, "%s/doctor.XXXXXX", tmp);
    int fd = mkstemp(probe);
    if (fd < 0 || write(fd, "x", 1) != 1) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "temp", "%s is not writable: %s", tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(probe);
        }
        return;
    }
    close(fd);
    unlink(probe);
    if (stat(domain_dir, &dom) == 0 && dom.st_dev != st.st_dev) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "temp",
                       "%s is on another filesystem than the stores of %s: VACUUM's copy "
                       "would need room there",
                       tmp, domain_dir);
        return;
    }
    ops_doctor_say(d, MV_DOCTOR_OK, "temp", "%s exists, is writable, on the stores' filesystem",
                   tmp);
}

/* The newest modification time of dir and the entries directly in it (a staging directory
 * holds files only). */
static time_t ops_doctor_newest_mtime(const char *dir, time_t newest)
{
    DIR *dh = opendir(dir);
    if (dh == NULL) {
        return newest;
    }
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue; /* ".." is the domain, written by every store's work */
        }
        char path[MV_PATH_MAX + 900];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) == 0 && st.st_mtime > newest) {
            newest = st.st_mtime;
        }
    }
    closedir(dh);
    return newest;
}

/* Removes a stale staging directory held locked by lock_fd: its files (a staging directory
 * holds regular files only: anything else is left, and so is the directory), then itself.
 * 0 on success, else errno. */
static int ops_doctor_staging_remove(const char *path, int lock_fd)
{
    DIR *dh = fdopendir(dup(lock_fd));
    if (dh == NULL) {
        return errno;
    }
    int err = 0;
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        if (unlinkat(lock_fd, e->d_name, 0) != 0 && err == 0) {
            err = errno; /* EISDIR / EPERM for a directory: not ours to remove */
        }
    }
    closedir(dh);
    if (err == 0 && rmdir(path) != 0) {
        err = errno;
    }
    return err;
}

/* Staging directories of `store import` (ROOT/<domain>/.import-XXXXXX) that are stale: no
 * live import holds their lock (ops_staging_lock: an import holds it from creating the
 * directory to removing it, also when it fails) and nothing has written to them for
 * OPS_DOCTOR_STAGING_IDLE_S (an import of a version without the lock, still running).
 * Such a one is from an import that was killed (SIGKILL, a crash, power loss). It holds
 * ciphertext only and nothing reads it, but it takes disk space: reported (WARN), or with
 * fix removed (OK, or WARN naming what could not be removed); docs/SCALEOUT.md, "When a
 * step fails". */
static void ops_doctor_staging(struct ops_doctor *d, const char *domain_dir)
{
    DIR *dh = opendir(domain_dir);
    if (dh == NULL) {
        return;
    }
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(dh)) != NULL) {
        if (strncmp(e->d_name, OPS_STAGING_PREFIX, sizeof OPS_STAGING_PREFIX - 1) != 0) {
            continue;
        }
        char path[MV_PATH_MAX + 600];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", domain_dir, e->d_name);
        int lock_fd = -1;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) ||
            ops_staging_lock(path, &lock_fd) != MV_OK) {
            continue; /* gone, not a directory, or a live import's */
        }
        time_t newest = ops_doctor_newest_mtime(path, st.st_mtime);
        long long idle_min = (long long)((now - newest) / 60);
        if (now - newest < OPS_DOCTOR_STAGING_IDLE_S) {
            close(lock_fd);
            continue;
        }
        if (!d->o->fix) {
            ops_doctor_say(d, MV_DOCTOR_WARN, "staging",
                           "%s: left by a `store import` that did not finish (killed?), "
                           "untouched for %lld min; ciphertext only, nothing uses it: remove it "
                           "(mailvault doctor --fix)",
                           path, idle_min);
        } else {
            int err = ops_doctor_staging_remove(path, lock_fd);
            if (err == 0) {
                ops_doctor_say(d, MV_DOCTOR_OK, "staging",
                               "%s: removed (left by a `store import` that did not finish, "
                               "untouched for %lld min)",
                               path, idle_min);
            } else {
                ops_doctor_say(d, MV_DOCTOR_WARN, "staging", "%s: cannot remove it: %s", path,
                               strerror(err));
            }
        }
        close(lock_fd);
    }
    closedir(dh);
}

static void ops_doctor_domains(struct ops_doctor *d)
{
    DIR *dir = opendir(d->root);
    if (dir == NULL) {
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        char path[MV_PATH_MAX + 300];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", d->root, e->d_name);
        if (e->d_name[0] == '.' || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            continue;
        }
        ops_doctor_tmp(d, path);
        ops_doctor_staging(d, path);
    }
    closedir(dir);
    const char *sqlite_tmp = getenv("SQLITE_TMPDIR");
    if (sqlite_tmp != NULL && sqlite_tmp[0] != '\0' && access(sqlite_tmp, W_OK) != 0) {
        ops_doctor_say(d, MV_DOCTOR_WARN, "temp",
                       "SQLITE_TMPDIR=%s is not a writable directory (stores do not use it: "
                       "their temporary files go to the domain's tmp/)",
                       sqlite_tmp);
    }
}

static void ops_doctor_store(struct ops_doctor *d, const struct mv_store_file *f)
{
    uint64_t size = f->file_bytes + f->wal_bytes;
    d->largest_bytes = size > d->largest_bytes ? size : d->largest_bytes;
    d->out->stores++;
    if (!f->header_ok && d->bad_headers++ < OPS_DOCTOR_STORE_FAIL_MAX) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "store", "%s: %s", f->db_path,
                       f->cipher == MV_CIPHER_NONE
                           ? "a plaintext SQLite file, not encrypted"
                           : "the header is not a known encrypted store (empty, short or foreign)");
    }
    if (!f->modes_ok && d->bad_modes++ < OPS_DOCTOR_STORE_FAIL_MAX) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "permissions", "%s", f->mode_problem);
    }
    if (f->wal_bytes > d->o->wal_bytes_max && d->big_wals++ < OPS_DOCTOR_STORE_FAIL_MAX) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "wal",
                       "%s-wal is %llu bytes, over the limit of %llu: a reader that never ends "
                       "keeps it from being checkpointed (mailvault maintain)",
                       f->db_path, (unsigned long long)f->wal_bytes,
                       (unsigned long long)d->o->wal_bytes_max);
    }
}

static void ops_doctor_stores(struct ops_doctor *d)
{
    struct mv_store_options so = MV_STORE_OPTIONS_INIT;
    so.root = d->root;
    mv_root_scan *scan = NULL;
    struct mv_store_file f;
    int rc = mv_root_scan_begin(&so, &scan);
    while (rc == MV_OK && (rc = mv_root_scan_next(scan, &f)) == 1) {
        ops_doctor_store(d, &f);
        rc = MV_OK;
    }
    mv_root_scan_end(&scan);
    if (rc < 0) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "store", "cannot read the stores under %s: %s", d->root,
                       mv_strerror(rc));
    }
    const struct {
        uint32_t bad;
        const char *check;
        const char *what;
    } totals[] = {
        {d->bad_headers, "store", "headers"},
        {d->bad_modes, "permissions", "permissions (0700 directories, 0600 files)"},
        {d->big_wals, "wal", "WAL sizes"},
    };
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++) {
        if (totals[i].bad == 0) {
            ops_doctor_say(d, MV_DOCTOR_OK, totals[i].check, "%u stores: %s fine", d->out->stores,
                           totals[i].what);
        } else if (totals[i].bad > OPS_DOCTOR_STORE_FAIL_MAX) {
            ops_doctor_say(d, MV_DOCTOR_FAIL, totals[i].check, "%u stores in all with bad %s",
                           totals[i].bad, totals[i].what);
        }
    }
}

static void ops_doctor_limits(struct ops_doctor *d)
{
    uint64_t free_bytes = 0;
    char err[MV_PATH_MAX + 64] = "";
    if (ops_free_bytes(d->root, &free_bytes, err, sizeof err) != MV_OK) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "disk", "%s", err);
    } else {
        int ok = free_bytes / 2 >= d->largest_bytes;
        ops_doctor_say(d, ok ? MV_DOCTOR_OK : MV_DOCTOR_FAIL, "disk",
                       "%llu bytes free; the largest store (file + WAL) is %llu bytes and VACUUM "
                       "needs twice that",
                       (unsigned long long)free_bytes, (unsigned long long)d->largest_bytes);
    }
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "open files", "getrlimit: %s", strerror(errno));
        return;
    }
    uint64_t need = (uint64_t)d->out->stores * d->o->files_per_store + OPS_DOCTOR_FD_SPARE;
    int ok = lim.rlim_cur == RLIM_INFINITY || (uint64_t)lim.rlim_cur >= need;
    ops_doctor_say(d, ok ? MV_DOCTOR_OK : MV_DOCTOR_FAIL, "open files",
                   "limit %llu (hard %llu); %u stores open at once need %llu "
                   "(%u per store + %u)",
                   (unsigned long long)lim.rlim_cur, (unsigned long long)lim.rlim_max,
                   d->out->stores, (unsigned long long)need, d->o->files_per_store,
                   OPS_DOCTOR_FD_SPARE);
}

static int ops_doctor_root(struct ops_doctor *d)
{
    struct stat st;
    if (stat(d->root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ops_doctor_say(d, MV_DOCTOR_FAIL, "root", "%s is not a directory: %s", d->root,
                       strerror(errno != 0 ? errno : ENOTDIR));
        return 0;
    }
    ops_doctor_say(d, (st.st_mode & 077) == 0 ? MV_DOCTOR_OK : MV_DOCTOR_WARN, "root",
                   "%s, mode %04o%s", d->root, (unsigned)(st.st_mode & 07777),
                   (st.st_mode & 077) == 0 ? "" : " (0700 keeps even the store names private)");
    return 1;
}

int mv_doctor_run(const struct mv_doctor_options *opts,
                  mv_doctor_fn fn,
                  void *fn_arg,
                  struct mv_doctor_summary *out)
{
    static const struct mv_doctor_options defaults = MV_DOCTOR_OPTIONS_INIT;
    if (out == NULL) {
        return MV_EINVAL;
    }
    memset(out, 0, sizeof *out);
    struct ops_doctor d;
    memset(&d, 0, sizeof d);
    d.o = opts != NULL ? opts : &defaults;
    d.fn = fn;
    d.arg = fn_arg;
    d.out = out;
    const char *root = d.o->root;
    if (root == NULL || root[0] == '\0') {
        root = getenv("MAILVAULT_ROOT");
    }
    snprintf(d.root, sizeof d.root, "%s", root != NULL && root[0] != '\0' ? root : "./var/mail");
    ops_doctor_software(&d);
    errno = 0;
    if (ops_doctor_root(&d)) {
        ops_doctor_domains(&d);
        ops_doctor_stores(&d);
    }
    ops_doctor_limits(&d);
    return MV_OK;
}
