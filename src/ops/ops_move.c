/*
 * ops_move.c -- mv_store_export() and mv_store_import(): everything a user's mail consists
 * of, moved to another node as one archive, without the password.
 *
 * WHAT IS IN THE ARCHIVE
 *   A POSIX tar (pax) file, written and read with libarchive:
 *     store.db        the encrypted database file
 *     store.db-wal    its WAL, when it holds frames (a store closed uncleanly)
 *     store.pub       the public key sealed deliveries are encrypted to
 *     queue/<name>    each sealed delivery not yet moved into the store
 *     MANIFEST        last: "mailvault-store-archive 1", "address <address>", "released 0|1",
 *                     then "file <sha256> <size> <name>" for every entry above
 *   Everything but the manifest is ciphertext or a public key; the manifest names only the
 *   address.
 *
 * EXPORT
 *   Holds the store's lock exclusively for the whole copy, so no handle is open and no sealed
 *   delivery is being written (store_fence.c): the files are what the store is. The store is
 *   checked as a keyless backup is (header, whole pages, the WAL's checksum chain) before it
 *   is shipped. The archive is written to a new temporary file beside archive_path, fsynced,
 *   and renamed to archive_path without replacing anything there.
 *
 * IMPORT
 *   Reads only the entry names above, regular files, each at most once, into a staging
 *   directory beside the store (same file system, so placing is renaming); then checks the
 *   manifest against every file (SHA-256 and size, no file missing or extra, the address),
 *   and the database and WAL as export did. Then, under the store's lock: refuses if any file
 *   of a store is already there, places the queue, the public key, the WAL and the database
 *   last (renameat2 RENAME_NOREPLACE), fsyncs the directories and removes a release marker:
 *   the store is served on this node. Until the database is in place no store exists; a
 *   failure while placing removes what it placed.
 *
 * LIMITATIONS
 *   At most MOVE_ENTRIES_MAX queue entries. The archive is not encrypted as a whole (its
 *   contents are), nor signed: the manifest catches damage, not a forgery made with the
 *   same tools, so carry it over a channel you trust (ssh). A forged database still cannot
 *   be read without the user's password; a forged public key would let later sealed
 *   deliveries go to a key the user does not hold (the next open rewrites it from the key
 *   inside the store).
 */
#include "ops/ops_backup.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MOVE_FORMAT       "mailvault-store-archive 1"
#define MOVE_MANIFEST     "MANIFEST"
#define MOVE_DB           "store.db"
#define MOVE_WAL          "store.db-wal"
#define MOVE_PUB          "store.pub"
#define MOVE_QUEUE        "queue/"
#define MOVE_ENTRIES_MAX  100000 /* queue entries in one archive */
#define MOVE_NAME_MAX     96     /* longest entry name: "queue/" + a queue entry's name */
#define MOVE_MANIFEST_MAX ((size_t)MOVE_ENTRIES_MAX * 180 + 4096)
#define MOVE_BLOCK        ((size_t)1 << 20)   /* read, write and tar block: few system calls */
#define MOVE_WRITEBACK    ((uint64_t)8 << 20) /* staged bytes handed to the disk as they come */

struct move_file {
    char name[MOVE_NAME_MAX];
    char sha256[65];
    uint64_t size;
};

struct move_list {
    struct move_file *v;
    size_t n;
    size_t cap;
};

static struct move_file *move_list_add(struct move_list *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap == 0 ? 16 : l->cap * 2;
        struct move_file *v = realloc(l->v, cap * sizeof *v);
        if (v == NULL) {
            return NULL;
        }
        l->v = v;
        l->cap = cap;
    }
    struct move_file *f = &l->v[l->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

static const struct move_file *move_list_find(const struct move_list *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->v[i].name, name) == 0) {
            return &l->v[i];
        }
    }
    return NULL;
}

static void move_hex(const unsigned char *md, char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
}

/* Whether name is one an archive may hold (other than the manifest). */
static int move_name_ok(const char *name)
{
    if (strcmp(name, MOVE_DB) == 0 || strcmp(name, MOVE_WAL) == 0 || strcmp(name, MOVE_PUB) == 0) {
        return 1;
    }
    size_t q = sizeof MOVE_QUEUE - 1;
    return strncmp(name, MOVE_QUEUE, q) == 0 && store_queue_entry_name_ok(name + q);
}

/* ---- export ----------------------------------------------------------------------------- */

struct move_writer {
    struct archive *a;
    struct move_list files;
    unsigned char *block;
    char *errmsg;
    size_t errmsg_size;
};

static int move_archive_fail(struct move_writer *w, const char *what)
{
    return ops_io_fail(w->errmsg, w->errmsg_size, MV_EIO, "cannot write the archive (%s): %s", what,
                       archive_error_string(w->a) != NULL ? archive_error_string(w->a) : "?");
}

static int move_entry_header(struct move_writer *w, const char *name, uint64_t size)
{
    struct archive_entry *e = archive_entry_new();
    if (e == NULL) {
        return ops_io_fail(w->errmsg, w->errmsg_size, MV_ENOMEM, "out of memory");
    }
    archive_entry_set_pathname(e, name);
    archive_entry_set_size(e, (la_int64_t)size);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0600);
    archive_entry_set_mtime(e, time(NULL), 0);
    int r = archive_write_header(w->a, e);
    archive_entry_free(e);
    return r == ARCHIVE_OK ? MV_OK : move_archive_fail(w, name);
}

/* Adds the file at path as entry name, hashing what is written. */
static int move_add_file(struct move_writer *w, const char *path, const char *name)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = fd < 0 ? errno : EINVAL;
        if (fd >= 0) {
            close(fd);
        }
        return ops_io_fail(w->errmsg, w->errmsg_size, ops_io_errno_code(e), "cannot read %s: %s",
                           path, strerror(e));
    }
    struct move_file *f = move_list_add(&w->files, name);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = f == NULL || md == NULL
                 ? ops_io_fail(w->errmsg, w->errmsg_size, MV_ENOMEM, "out of memory")
                 : MV_OK;
    if (rc == MV_OK && EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        rc = ops_io_fail(w->errmsg, w->errmsg_size, MV_ERROR, "SHA-256 is not available");
    }
    if (rc == MV_OK) {
        f->size = (uint64_t)st.st_size;
        rc = move_entry_header(w, name, f->size);
    }
    uint64_t done = 0;
    while (rc == MV_OK && done < f->size) {
        size_t want = f->size - done < MOVE_BLOCK ? (size_t)(f->size - done) : MOVE_BLOCK;
        ssize_t r = read(fd, w->block, want);
        if (r <= 0) {
            rc = r < 0 && errno == EINTR
                     ? MV_OK
                     : ops_io_fail(w->errmsg, w->errmsg_size, MV_EIO, "cannot read %s: %s", path,
                                   r < 0 ? strerror(errno) : "it shrank");
            continue;
        }
        if (EVP_DigestUpdate(md, w->block, (size_t)r) != 1 ||
            archive_write_data(w->a, w->block, (size_t)r) != r) {
            rc = move_archive_fail(w, name);
        }
        done += (uint64_t)r;
    }
    unsigned char digest[32];
    unsigned int len = 0;
    if (rc == MV_OK && EVP_DigestFinal_ex(md, digest, &len) == 1 && len == 32) {
        move_hex(digest, f->sha256);
    } else if (rc == MV_OK) {
        rc = ops_io_fail(w->errmsg, w->errmsg_size, MV_ERROR, "SHA-256 failed");
    }
    EVP_MD_CTX_free(md);
    close(fd);
    return rc;
}

/* Adds every valid queue entry, in name order (the order deliveries arrived). */
static int move_add_queue(struct move_writer *w, const struct store_paths *p, uint64_t *entries)
{
    struct dirent **names = NULL;
    int n = scandir(p->queue_dir, &names, NULL, alphasort);
    if (n < 0) {
        return errno == ENOENT ? MV_OK
                               : ops_io_fail(w->errmsg, w->errmsg_size, MV_EIO,
                                             "cannot read %s: %s", p->queue_dir, strerror(errno));
    }
    int rc = MV_OK;
    for (int i = 0; i < n; i++) {
        if (rc == MV_OK && store_queue_entry_name_ok(names[i]->d_name)) {
            char path[MV_PATH_MAX + 320], name[MOVE_NAME_MAX + 256];
            int n1 = snprintf(path, sizeof path, "%s/%s", p->queue_dir, names[i]->d_name);
            int n2 = snprintf(name, sizeof name, "%s%s", MOVE_QUEUE, names[i]->d_name);
            if (n1 < 0 || (size_t)n1 >= sizeof path || n2 < 0 || (size_t)n2 >= MOVE_NAME_MAX) {
                rc = ops_io_fail(w->errmsg, w->errmsg_size, MV_EINVAL, "a path is too long");
            } else if (++*entries > MOVE_ENTRIES_MAX) {
                rc = ops_io_fail(w->errmsg, w->errmsg_size, MV_ELIMIT,
                                 "the queue has more than %d entries; open the store once to "
                                 "move them in, then export",
                                 MOVE_ENTRIES_MAX);
            } else {
                rc = move_add_file(w, path, name);
            }
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static int move_add_manifest(struct move_writer *w, const char *address, int released)
{
    size_t cap = 256 + w->files.n * 180, used = 0;
    char *text = malloc(cap);
    if (text == NULL) {
        return ops_io_fail(w->errmsg, w->errmsg_size, MV_ENOMEM, "out of memory");
    }
    used += (size_t)snprintf(text, cap, "%s\naddress %s\nreleased %d\n", MOVE_FORMAT, address,
                             released);
    for (size_t i = 0; i < w->files.n; i++) {
        const struct move_file *f = &w->files.v[i];
        used += (size_t)snprintf(text + used, cap - used, "file %s %llu %s\n", f->sha256,
                                 (unsigned long long)f->size, f->name);
    }
    int rc = move_entry_header(w, MOVE_MANIFEST, used);
    if (rc == MV_OK && archive_write_data(w->a, text, used) != (la_ssize_t)used) {
        rc = move_archive_fail(w, MOVE_MANIFEST);
    }
    free(text);
    return rc;
}

/* Writes the archive of the locked store into the open descriptor fd. */
static int move_write_archive(int fd,
                              const struct store_paths *p,
                              int released,
                              struct mv_store_archive_info *info,
                              char *errmsg,
                              size_t errmsg_size)
{
    struct move_writer w = {
        archive_write_new(), {NULL, 0, 0}, malloc(MOVE_BLOCK), errmsg, errmsg_size};
    int rc = MV_OK;
    if (w.a == NULL || w.block == NULL) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
    } else if (archive_write_set_format_pax_restricted(w.a) != ARCHIVE_OK ||
               archive_write_set_bytes_per_block(w.a, (int)MOVE_BLOCK) != ARCHIVE_OK ||
               archive_write_set_bytes_in_last_block(w.a, 1) != ARCHIVE_OK ||
               archive_write_open_fd(w.a, fd) != ARCHIVE_OK) {
        rc = move_archive_fail(&w, "open");
    }
    char wal[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", p->db_path);
    if (rc == MV_OK) {
        rc = move_add_file(&w, p->db_path, MOVE_DB);
    }
    if (rc == MV_OK && ops_io_size(wal) > 0) {
        rc = move_add_file(&w, wal, MOVE_WAL);
    }
    if (rc == MV_OK) {
        rc = move_add_file(&w, p->pub_path, MOVE_PUB);
    }
    if (rc == MV_OK) {
        rc = move_add_queue(&w, p, &info->queue_entries);
    }
    if (rc == MV_OK) {
        rc = move_add_manifest(&w, p->address, released);
    }
    if (rc == MV_OK && archive_write_close(w.a) != ARCHIVE_OK) {
        rc = move_archive_fail(&w, "close");
    }
    for (size_t i = 0; i < w.files.n; i++) {
        info->size_bytes += w.files.v[i].size;
    }
    info->files = w.files.n;
    if (w.a != NULL) {
        archive_write_free(w.a);
    }
    free(w.files.v);
    free(w.block);
    return rc;
}

/* Creates a new temporary file beside path: *fd and its name in tmp. */
static int move_temp_beside(
    const char *path, char *tmp, size_t tmp_size, int *fd, char *errmsg, size_t errmsg_size)
{
    if (snprintf(tmp, tmp_size, "%s.tmp-XXXXXX", path) >= (int)tmp_size) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the archive path is too long");
    }
    *fd = mkostemp(tmp, O_CLOEXEC);
    if (*fd < 0) {
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "cannot create %s: %s",
                           tmp, strerror(errno));
    }
    return MV_OK;
}

/* The directory of path (for its fsync), in out. */
static void move_dir_of(const char *path, char *out, size_t out_size)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        snprintf(out, out_size, ".");
    } else if (slash == path) {
        snprintf(out, out_size, "/");
    } else {
        snprintf(out, out_size, "%.*s", (int)(slash - path), path);
    }
}

/* Where the functions below write their message: the caller's errmsg, or scratch when it
 * passed none (NULL or size 0); emptied either way. */
static void
move_errmsg_or_scratch(char **errmsg, size_t *errmsg_size, char *scratch, size_t scratch_size)
{
    if (*errmsg == NULL || *errmsg_size == 0) {
        *errmsg = scratch;
        *errmsg_size = scratch_size;
    }
    (*errmsg)[0] = '\0';
}

/* A pipe between export and import (or ssh) holds 64 KiB by default: each side would wait
 * for the other every 64 KiB, a trip through the run queue on a busy machine. Best effort:
 * up to MOVE_BLOCK, as far as /proc/sys/fs/pipe-max-size allows. */
static void move_widen_pipe(int fd)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode)) {
        (void)fcntl(fd, F_SETPIPE_SZ, (int)MOVE_BLOCK);
    }
}

/* Export into archive_path (a new file) or, when archive_path is NULL, into the open
 * descriptor out_fd (a pipe: the archive is streamed, nothing is renamed or fsynced). */
static int move_export(const char *address,
                       const struct mv_store_options *opts,
                       const char *archive_path,
                       int out_fd,
                       uint32_t wait_ms,
                       struct mv_store_archive_info *info_out,
                       char *errmsg,
                       size_t errmsg_size)
{
    char scratch[16];
    move_errmsg_or_scratch(&errmsg, &errmsg_size, scratch, sizeof scratch);
    struct mv_store_archive_info info;
    memset(&info, 0, sizeof info);
    struct store_paths p;
    int lock_fd = -1, fd = -1;
    char tmp[MV_PATH_MAX + 32] = "";
    struct stat st;
    int streaming = archive_path == NULL;
    int rc =
        streaming
            ? (out_fd < 0 ? ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "no descriptor") : MV_OK)
        : archive_path[0] == '\0' ? ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "no archive path")
                                  : MV_OK;
    if (rc == MV_OK) {
        rc = store_paths_resolve(address, ops_io_store_options(opts), &p, errmsg, errmsg_size);
    }
    if (rc == MV_OK && stat(p.db_path, &st) != 0) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_ENOTFOUND, "no store for %s", p.address);
    }
    if (rc == MV_OK && !streaming && lstat(archive_path, &st) == 0) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_EEXISTS, "%s already exists", archive_path);
    }
    if (rc == MV_OK) {
        rc = store_lock_take(p.db_path, STORE_LOCK_EXCLUSIVE, wait_ms, 0, &lock_fd, errmsg,
                             errmsg_size);
        if (rc == MV_EBUSY) {
            ops_io_fail(errmsg, errmsg_size, rc,
                        "the store of %s is open (a server session, or another program); "
                        "release it first (`mailvault release`)",
                        p.address);
        }
    }
    if (rc == MV_OK) {
        char detail[16];
        info.released = store_fence_check(p.db_path, detail, sizeof detail) == MV_EMOVED;
        char wal[MV_PATH_MAX + 8];
        snprintf(wal, sizeof wal, "%s-wal", p.db_path);
        struct mv_backup_info checked;
        memset(&checked, 0, sizeof checked);
        /* Header and WAL chain only: the pages themselves are read once, by the copy. */
        rc = ops_keyless_verify_files(p.db_path, wal, &checked, errmsg, errmsg_size);
        info.wal_frames = checked.wal_frames;
    }
    if (rc == MV_OK && streaming) {
        move_widen_pipe(out_fd);
        rc = move_write_archive(out_fd, &p, info.released, &info, errmsg, errmsg_size);
    }
    if (rc == MV_OK && !streaming) {
        rc = move_temp_beside(archive_path, tmp, sizeof tmp, &fd, errmsg, errmsg_size);
    }
    if (rc == MV_OK && !streaming) {
        rc = move_write_archive(fd, &p, info.released, &info, errmsg, errmsg_size);
    }
    if (rc == MV_OK && !streaming && fsync(fd) != 0) {
        rc = ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "cannot fsync %s: %s", tmp,
                         strerror(errno));
    }
    if (fd >= 0 && close(fd) != 0 && rc == MV_OK) {
        rc = ops_io_fail(errmsg, errmsg_size, MV_EIO, "cannot close %s", tmp);
    }
    /* Never replaces what appeared at archive_path meanwhile (a file, link or device). */
    if (rc == MV_OK && !streaming &&
        renameat2(AT_FDCWD, tmp, AT_FDCWD, archive_path, RENAME_NOREPLACE) != 0) {
        rc = ops_io_fail(errmsg, errmsg_size, errno == EEXIST ? MV_EEXISTS : MV_EIO,
                         "cannot rename %s to %s: %s", tmp, archive_path, strerror(errno));
    }
    if (rc == MV_OK && !streaming) {
        char dir[MV_PATH_MAX];
        move_dir_of(archive_path, dir, sizeof dir);
        if (store_fsync_dir(dir) != MV_OK) {
            rc = ops_io_fail(errmsg, errmsg_size, MV_EIO, "cannot fsync %s", dir);
        }
    }
    if (rc != MV_OK && tmp[0] != '\0') {
        unlink(tmp);
    }
    store_lock_release(&lock_fd);
    if (info_out != NULL) {
        *info_out = info;
    }
    return rc;
}

int mv_store_export(const char *address,
                    const struct mv_store_options *opts,
                    const char *archive_path,
                    uint32_t wait_ms,
                    struct mv_store_archive_info *info_out,
                    char *errmsg,
                    size_t errmsg_size)
{
    if (archive_path == NULL) {
        archive_path = ""; /* "no archive path", not a stream */
    }
    return move_export(address, opts, archive_path, -1, wait_ms, info_out, errmsg, errmsg_size);
}

int mv_store_export_fd(const char *address,
                       const struct mv_store_options *opts,
                       int fd,
                       uint32_t wait_ms,
                       struct mv_store_archive_info *info_out,
                       char *errmsg,
                       size_t errmsg_size)
{
    return move_export(address, opts, NULL, fd, wait_ms, info_out, errmsg, errmsg_size);
}

/* ---- import ----------------------------------------------------------------------------- */

struct move_reader {
    struct archive *a;
    const char *archive_path;
    char staging[MV_PATH_MAX];
    int staging_fd;         /* holds the staging directory's lock (ops_staging_lock) */
    struct move_list files; /* what was read, with the SHA-256 of its bytes */
    char *manifest;
    size_t manifest_len;
    unsigned char *block;
    char *errmsg;
    size_t errmsg_size;
};

static int move_bad_archive(struct move_reader *r, const char *why, const char *name)
{
    return ops_io_fail(r->errmsg, r->errmsg_size, MV_ECORRUPT, "%s is not a store archive: %s%s%s",
                       r->archive_path, why, name != NULL ? ": " : "", name != NULL ? name : "");
}

/* The staged file of entry name ("queue/x" is staged as "queue-x": one flat directory). */
static void move_staged_path(const struct move_reader *r, const char *name, char *out, size_t size)
{
    size_t q = sizeof MOVE_QUEUE - 1;
    if (strncmp(name, MOVE_QUEUE, q) == 0) {
        snprintf(out, size, "%s/queue-%s", r->staging, name + q);
    } else {
        snprintf(out, size, "%s/%s", r->staging, name);
    }
}

/* Reads the current entry's data into the staged file, hashing it; exactly size bytes. */
static int move_read_entry(struct move_reader *r, struct move_file *f, uint64_t size)
{
    char path[MV_PATH_MAX + 128];
    move_staged_path(r, f->name, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        return ops_io_fail(r->errmsg, r->errmsg_size, ops_io_errno_code(errno),
                           "cannot create %s: %s", path, strerror(errno));
    }
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = md != NULL && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1
                 ? MV_OK
                 : ops_io_fail(r->errmsg, r->errmsg_size, MV_ENOMEM, "out of memory");
    uint64_t got = 0, handed = 0;
    while (rc == MV_OK) {
        /* Start the disk on what is written so far while the rest arrives: the fsync at the
         * end then waits for the tail only (a hint; errors surface at the fsync). */
        if (got - handed >= MOVE_WRITEBACK) {
            (void)sync_file_range(fd, (off_t)handed, (off_t)(got - handed), SYNC_FILE_RANGE_WRITE);
            handed = got;
        }
        la_ssize_t n = archive_read_data(r->a, r->block, MOVE_BLOCK);
        if (n == 0) {
            break;
        }
        if (n < 0) {
            rc = move_bad_archive(r,
                                  archive_error_string(r->a) != NULL ? archive_error_string(r->a)
                                                                     : "unreadable data",
                                  f->name);
            break;
        }
        got += (uint64_t)n;
        if (EVP_DigestUpdate(md, r->block, (size_t)n) != 1) {
            rc = ops_io_fail(r->errmsg, r->errmsg_size, MV_ERROR, "SHA-256 failed");
        }
        for (la_ssize_t off = 0; rc == MV_OK && off < n;) {
            ssize_t w = write(fd, r->block + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR) {
                continue;
            }
            if (w <= 0) {
                rc = ops_io_fail(r->errmsg, r->errmsg_size, ops_io_errno_code(errno),
                                 "cannot write %s: %s", path, strerror(errno));
                break;
            }
            off += w;
        }
    }
    if (rc == MV_OK && got != size) {
        rc = move_bad_archive(r, "an entry is shorter than its header says", f->name);
    }
    unsigned char digest[32];
    unsigned int len = 0;
    if (rc == MV_OK && (EVP_DigestFinal_ex(md, digest, &len) != 1 || len != 32)) {
        rc = ops_io_fail(r->errmsg, r->errmsg_size, MV_ERROR, "SHA-256 failed");
    }
    if (rc == MV_OK) {
        move_hex(digest, f->sha256);
        f->size = got;
    }
    if (rc == MV_OK && fsync(fd) != 0) {
        rc = ops_io_fail(r->errmsg, r->errmsg_size, ops_io_errno_code(errno), "cannot fsync %s: %s",
                         path, strerror(errno));
    }
    EVP_MD_CTX_free(md);
    close(fd);
    return rc;
}

static int move_read_manifest(struct move_reader *r, uint64_t size)
{
    if (r->manifest != NULL) {
        return move_bad_archive(r, "two manifests", NULL);
    }
    if (size > MOVE_MANIFEST_MAX) {
        return move_bad_archive(r, "the manifest is too large", NULL);
    }
    r->manifest = malloc((size_t)size + 1);
    if (r->manifest == NULL) {
        return ops_io_fail(r->errmsg, r->errmsg_size, MV_ENOMEM, "out of memory");
    }
    la_ssize_t n = size > 0 ? archive_read_data(r->a, r->manifest, (size_t)size) : 0;
    if (n < 0 || (uint64_t)n != size) {
        return move_bad_archive(r, "the manifest is truncated", NULL);
    }
    r->manifest[size] = '\0';
    r->manifest_len = (size_t)size;
    return strlen(r->manifest) == r->manifest_len
               ? MV_OK
               : move_bad_archive(r, "the manifest holds a NUL byte", NULL);
}

/* Reads every entry: names, types, counts and sizes checked as they come. */
static int move_read_entries(struct move_reader *r)
{
    struct archive_entry *e = NULL;
    int rc = MV_OK;
    for (;;) {
        int h = archive_read_next_header(r->a, &e);
        if (h == ARCHIVE_EOF) {
            break;
        }
        if (h != ARCHIVE_OK) {
            return move_bad_archive(
                r, archive_error_string(r->a) != NULL ? archive_error_string(r->a) : "unreadable",
                NULL);
        }
        const char *name = archive_entry_pathname(e);
        if (name == NULL || archive_entry_filetype(e) != AE_IFREG ||
            !archive_entry_size_is_set(e) || archive_entry_size(e) < 0) {
            return move_bad_archive(r, "an entry that is not a regular file of known size", name);
        }
        uint64_t size = (uint64_t)archive_entry_size(e);
        if (r->manifest != NULL) {
            return move_bad_archive(r, "an entry after the manifest", name);
        }
        if (strcmp(name, MOVE_MANIFEST) == 0) {
            rc = move_read_manifest(r, size);
        } else if (!move_name_ok(name) || strlen(name) >= MOVE_NAME_MAX) {
            return move_bad_archive(r, "an unexpected entry", name);
        } else if (move_list_find(&r->files, name) != NULL) {
            return move_bad_archive(r, "an entry twice", name);
        } else if (r->files.n > MOVE_ENTRIES_MAX + 3) {
            return move_bad_archive(r, "too many entries", NULL);
        } else {
            struct move_file *f = move_list_add(&r->files, name);
            rc = f == NULL ? ops_io_fail(r->errmsg, r->errmsg_size, MV_ENOMEM, "out of memory")
                           : move_read_entry(r, f, size);
        }
        if (rc != MV_OK) {
            return rc;
        }
    }
    return r->manifest != NULL ? MV_OK : move_bad_archive(r, "no manifest", NULL);
}

/* Checks the manifest against what was read. */
static int move_check_manifest(struct move_reader *r, const char *address, int *released)
{
    char *save = NULL;
    char *line = strtok_r(r->manifest, "\n", &save);
    if (line == NULL || strcmp(line, MOVE_FORMAT) != 0) {
        return move_bad_archive(r, "unknown manifest format", line);
    }
    size_t listed = 0;
    int have_address = 0;
    *released = 0;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        char sha[65], name[MOVE_NAME_MAX];
        unsigned long long size = 0;
        if (strncmp(line, "address ", 8) == 0) {
            if (strcmp(line + 8, address) != 0) {
                return ops_io_fail(r->errmsg, r->errmsg_size, MV_EINVAL,
                                   "%s holds the store of %s, not of %s", r->archive_path, line + 8,
                                   address);
            }
            have_address = 1;
        } else if (strncmp(line, "released ", 9) == 0) {
            *released = strcmp(line + 9, "1") == 0;
        } else if (sscanf(line, "file %64[0-9a-f] %llu %95s", sha, &size, name) == 3) {
            const struct move_file *f = move_list_find(&r->files, name);
            if (f == NULL) {
                return move_bad_archive(r, "a file the manifest lists is missing", name);
            }
            if (f->size != size || strcmp(f->sha256, sha) != 0) {
                return move_bad_archive(r, "a file differs from the manifest (damaged in transit?)",
                                        name);
            }
            listed++;
        } else {
            return move_bad_archive(r, "a manifest line not understood", line);
        }
    }
    if (!have_address || listed != r->files.n) {
        return move_bad_archive(r,
                                !have_address ? "the manifest names no address"
                                              : "a file the manifest does not list",
                                NULL);
    }
    if (move_list_find(&r->files, MOVE_DB) == NULL || move_list_find(&r->files, MOVE_PUB) == NULL) {
        return move_bad_archive(r, "no database or no public key", NULL);
    }
    return MV_OK;
}

/* Checks the staged database, WAL and public key as a keyless backup is checked. */
static int move_check_staged(struct move_reader *r, struct mv_store_archive_info *info)
{
    char db[MV_PATH_MAX + 32], wal[MV_PATH_MAX + 32];
    move_staged_path(r, MOVE_DB, db, sizeof db);
    move_staged_path(r, MOVE_WAL, wal, sizeof wal);
    struct mv_backup_info checked;
    memset(&checked, 0, sizeof checked);
    int rc = ops_keyless_verify_files(db, wal, &checked, r->errmsg, r->errmsg_size);
    info->wal_frames = checked.wal_frames;
    const struct move_file *pub = move_list_find(&r->files, MOVE_PUB);
    if (rc == MV_OK && pub->size != STORE_PUBLIC_KEY_SIZE) {
        rc = move_bad_archive(r, "the public key is not 32 bytes", NULL);
    }
    return rc;
}

/* Whether any file of a store is already at p's paths; names it in errmsg. */
static int move_target_free(const struct store_paths *p, char *errmsg, size_t errmsg_size)
{
    char wal[MV_PATH_MAX + 8], shm[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", p->db_path);
    snprintf(shm, sizeof shm, "%s-shm", p->db_path);
    const char *const paths[] = {p->db_path, wal, shm, p->pub_path};
    struct stat st;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if (lstat(paths[i], &st) == 0) {
            return ops_io_fail(errmsg, errmsg_size, MV_EEXISTS,
                               "%s already exists: this node has (or had) a store of %s; remove "
                               "it first if it is stale",
                               paths[i], p->address);
        }
    }
    DIR *d = opendir(p->queue_dir);
    if (d != NULL) {
        struct dirent *e;
        int used = 0;
        while (!used && (e = readdir(d)) != NULL) {
            used = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
        }
        closedir(d);
        if (used) {
            return ops_io_fail(errmsg, errmsg_size, MV_EEXISTS, "%s is not empty", p->queue_dir);
        }
    }
    return MV_OK;
}

/* Where entry name goes in the store p. */
static void move_target_path(const struct store_paths *p, const char *name, char *out, size_t size)
{
    if (strncmp(name, MOVE_QUEUE, sizeof MOVE_QUEUE - 1) == 0) {
        snprintf(out, size, "%s/%s", p->queue_dir, name + sizeof MOVE_QUEUE - 1);
    } else if (strcmp(name, MOVE_PUB) == 0) {
        snprintf(out, size, "%s", p->pub_path);
    } else if (strcmp(name, MOVE_WAL) == 0) {
        snprintf(out, size, "%s-wal", p->db_path);
    } else {
        snprintf(out, size, "%s", p->db_path);
    }
}

/* Moves the staged files into place, the database last; undoes its renames on failure. */
static int move_place(struct move_reader *r, const struct store_paths *p)
{
    char from[MV_PATH_MAX + 128], to[MV_PATH_MAX + 128];
    unsigned char *placed = calloc(r->files.n + 1, 1);
    int rc =
        placed != NULL ? MV_OK : ops_io_fail(r->errmsg, r->errmsg_size, MV_ENOMEM, "out of memory");
    int queued = 0;
    /* Queue entries, public key and WAL first; the database last: it makes the store exist. */
    for (int pass = 0; pass < 2 && rc == MV_OK; pass++) {
        for (size_t i = 0; i < r->files.n && rc == MV_OK; i++) {
            const char *name = r->files.v[i].name;
            if ((strcmp(name, MOVE_DB) == 0) != (pass == 1)) {
                continue;
            }
            int is_queue = strncmp(name, MOVE_QUEUE, sizeof MOVE_QUEUE - 1) == 0;
            if (is_queue && !queued) {
                rc = store_mkdirs(p->queue_dir, r->errmsg, r->errmsg_size);
                queued = 1;
            }
            move_staged_path(r, name, from, sizeof from);
            move_target_path(p, name, to, sizeof to);
            if (rc == MV_OK && renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) != 0) {
                rc = ops_io_fail(r->errmsg, r->errmsg_size,
                                 errno == EEXIST ? MV_EEXISTS : ops_io_errno_code(errno),
                                 "cannot place %s: %s", to, strerror(errno));
            }
            placed[i] = rc == MV_OK;
        }
    }
    if (rc == MV_OK && queued && store_fsync_dir(p->queue_dir) != MV_OK) {
        rc = ops_io_fail(r->errmsg, r->errmsg_size, MV_EIO, "cannot fsync %s", p->queue_dir);
    }
    if (rc == MV_OK && store_fsync_dir(p->domain_dir) != MV_OK) {
        rc = ops_io_fail(r->errmsg, r->errmsg_size, MV_EIO, "cannot fsync %s", p->domain_dir);
    }
    /* On failure before the database was placed nothing of a half-placed store stays (once
     * it is placed the store exists, and only a directory fsync may have failed). */
    int db_placed = 0;
    for (size_t i = 0; placed != NULL && i < r->files.n; i++) {
        db_placed |= placed[i] && strcmp(r->files.v[i].name, MOVE_DB) == 0;
    }
    for (size_t i = 0; rc != MV_OK && !db_placed && placed != NULL && i < r->files.n; i++) {
        if (placed[i]) {
            move_target_path(p, r->files.v[i].name, to, sizeof to);
            unlink(to);
        }
    }
    free(placed);
    return rc;
}

int ops_staging_lock(const char *dir, int *fd_out)
{
    *fd_out = -1;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? MV_ENOTFOUND : MV_EIO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        return e == EWOULDBLOCK ? MV_EBUSY : MV_EIO;
    }
    *fd_out = fd;
    return MV_OK;
}

/* Removes the staging directory and whatever is left in it, then drops its lock. */
static void move_staging_remove(struct move_reader *r)
{
    if (r->staging[0] == '\0') {
        return;
    }
    for (size_t i = 0; i < r->files.n; i++) {
        char path[MV_PATH_MAX + 128];
        move_staged_path(r, r->files.v[i].name, path, sizeof path);
        unlink(path);
    }
    rmdir(r->staging);
    if (r->staging_fd >= 0) {
        close(r->staging_fd);
        r->staging_fd = -1;
    }
}

/* Import from archive_path or, when in_fd >= 0, from that descriptor (a pipe: archive_path
 * only names it in messages). */
static int move_import(const char *address,
                       const struct mv_store_options *opts,
                       const char *archive_path,
                       int in_fd,
                       struct mv_store_archive_info *info_out,
                       char *errmsg,
                       size_t errmsg_size)
{
    char scratch[16];
    move_errmsg_or_scratch(&errmsg, &errmsg_size, scratch, sizeof scratch);
    struct mv_store_archive_info info;
    memset(&info, 0, sizeof info);
    struct move_reader r;
    memset(&r, 0, sizeof r);
    r.staging_fd = -1;
    r.archive_path = archive_path;
    r.errmsg = errmsg;
    r.errmsg_size = errmsg_size;
    struct store_paths p;
    int lock_fd = -1;
    int rc =
        archive_path == NULL || archive_path[0] == '\0'
            ? ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "no archive path")
            : store_paths_resolve(address, ops_io_store_options(opts), &p, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = move_target_free(&p, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = store_mkdirs(p.domain_dir, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        int n = snprintf(r.staging, sizeof r.staging, "%s/.import-XXXXXX", p.domain_dir);
        if (n < 0 || (size_t)n >= sizeof r.staging) {
            rc = ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the store path is too long");
            r.staging[0] = '\0';
        } else if (mkdtemp(r.staging) == NULL) {
            rc = ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "cannot create %s: %s",
                             r.staging, strerror(errno));
            r.staging[0] = '\0';
        } else if (ops_staging_lock(r.staging, &r.staging_fd) != MV_OK) {
            /* Nobody else knows the fresh name yet; a failure here is the file system's. */
            rc = ops_io_fail(errmsg, errmsg_size, MV_EIO, "cannot lock %s: %s", r.staging,
                             strerror(errno));
        }
    }
    if (rc == MV_OK) {
        r.a = archive_read_new();
        r.block = malloc(MOVE_BLOCK);
        /* Plain tar only: no decompression filters (some run external programs). */
        if (r.a == NULL || r.block == NULL) {
            rc = ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
        } else if (in_fd < 0 && access(archive_path, R_OK) != 0) {
            rc = ops_io_fail(errmsg, errmsg_size, errno == ENOENT ? MV_ENOTFOUND : MV_EIO,
                             "cannot read %s: %s", archive_path, strerror(errno));
        } else if (archive_read_support_format_tar(r.a) != ARCHIVE_OK ||
                   (in_fd >= 0 ? archive_read_open_fd(r.a, in_fd, MOVE_BLOCK)
                               : archive_read_open_filename(r.a, archive_path, MOVE_BLOCK)) !=
                       ARCHIVE_OK) {
            rc = move_bad_archive(
                &r, archive_error_string(r.a) != NULL ? archive_error_string(r.a) : "unreadable",
                NULL);
        }
    }
    if (rc == MV_OK) {
        rc = move_read_entries(&r);
    }
    if (rc == MV_OK) {
        rc = move_check_manifest(&r, p.address, &info.released);
    }
    if (rc == MV_OK) {
        rc = move_check_staged(&r, &info);
    }
    if (rc == MV_OK) {
        rc = store_lock_take(p.db_path, STORE_LOCK_EXCLUSIVE, STORE_LOCK_OPEN_WAIT_MS, 0, &lock_fd,
                             errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = move_target_free(&p, errmsg, errmsg_size); /* again, under the lock */
    }
    if (rc == MV_OK) {
        rc = move_place(&r, &p);
    }
    if (rc == MV_OK) {
        rc = store_fence_remove(&p, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        /* The store's temporary directory, as mv_store_open makes it: a node that never had
         * a store in this domain has none, and `mailvault doctor` failed the imported store
         * until its first open. Only on success: a failed import leaves nothing. The first
         * open makes it too, so a failure here is not the import's. */
        char tmp_err[256];
        (void)store_mkdirs(p.tmp_dir, tmp_err, sizeof tmp_err);
    }
    store_lock_release(&lock_fd);
    for (size_t i = 0; i < r.files.n; i++) {
        info.size_bytes += r.files.v[i].size;
        info.queue_entries += strncmp(r.files.v[i].name, MOVE_QUEUE, sizeof MOVE_QUEUE - 1) == 0;
    }
    info.files = r.files.n;
    move_staging_remove(&r);
    if (r.a != NULL) {
        archive_read_free(r.a);
    }
    free(r.files.v);
    free(r.manifest);
    free(r.block);
    if (info_out != NULL) {
        *info_out = info;
    }
    return rc;
}

int mv_store_import(const char *address,
                    const struct mv_store_options *opts,
                    const char *archive_path,
                    struct mv_store_archive_info *info_out,
                    char *errmsg,
                    size_t errmsg_size)
{
    return move_import(address, opts, archive_path, -1, info_out, errmsg, errmsg_size);
}

int mv_store_import_fd(const char *address,
                       const struct mv_store_options *opts,
                       int fd,
                       struct mv_store_archive_info *info_out,
                       char *errmsg,
                       size_t errmsg_size)
{
    if (fd < 0) {
        char scratch[16];
        move_errmsg_or_scratch(&errmsg, &errmsg_size, scratch, sizeof scratch);
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "no descriptor");
    }
    move_widen_pipe(fd);
    return move_import(address, opts, "the stream", fd, info_out, errmsg, errmsg_size);
}
