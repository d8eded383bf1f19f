/*
 * ops_stats.c -- statistics of stores: keyless (one file, or every store under a root) and
 * keyed (an open store's PRAGMA figures, sizes, cipher, checkpoint and maintenance history).
 *
 * USAGE
 *   mv_store_file_inspect("alice@example.org", &opts, &file);     no password
 *   mv_root_scan_begin(&opts, &scan); while (mv_root_scan_next(scan, &file) == 1) ...;
 *   mv_store_inspect(store, &inspection);                          an open store
 *
 * IMPLEMENTATION NOTES
 *   The keyless path never opens SQLite: a stat(2) per file, one 24-byte pread of the
 *   header (bytes 16..23 are plaintext in every cipher: FORMAT.md), and a readdir of the
 *   queue. That keeps `stats --all` over a thousand stores to a few milliseconds each at
 *   worst. A store this process has open is not read at all: its header comes from the
 *   registry of store_files.c, since closing a descriptor of the file would drop the
 *   connection's SQLite locks (store_files.h); the same registry makes the read of any
 *   other store wait out a store open by another thread, and the reverse.
 *   The page count of a keyless description is the file size over the page size: pages
 *   written since the last checkpoint live in the WAL and are not counted.
 *   The free-space probe is here because every operation uses it; its test hook is the
 *   only reader of $MAILVAULT_TEST_FREE_BYTES.
 *
 * LIMITATIONS
 *   A directory with more than OPS_SCAN_ENTRIES_MAX entries ends a root scan (MV_ELIMIT).
 */
#include "crypto/crypt.h"
#include "ops/ops_inspect.h"
#include "store/store_files.h"
#include "vfs/sqlite_format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define OPS_SCAN_ENTRIES_MAX 1000000u
#define OPS_HEADER_BYTES     24
_Static_assert(OPS_HEADER_BYTES == STORE_FILES_HEADER_BYTES, "the registry keeps what we read");

int ops_free_bytes(const char *dir, uint64_t *out, char *errmsg, size_t errmsg_size)
{
    const char *hook = getenv(OPS_FREE_BYTES_TEST_HOOK);
    if (hook != NULL && hook[0] >= '0' && hook[0] <= '9') {
        *out = (uint64_t)strtoull(hook, NULL, 10);
        return MV_OK;
    }
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0) {
        if (errmsg != NULL && errmsg_size > 0) {
            snprintf(errmsg, errmsg_size, "statvfs %s: %s", dir, strerror(errno));
        }
        return MV_EIO;
    }
    *out = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    return MV_OK;
}

uint64_t ops_file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Records the first permission problem: (1) a directory or (2) a file that group or others
 * may use. A missing path is no problem (a WAL exists only while the store is open). */
static void ops_mode_check(struct mv_store_file *out, const char *path, int is_dir)
{
    struct stat st;
    if (!out->modes_ok || lstat(path, &st) != 0) {
        return;
    }
    if ((st.st_mode & 077) != 0) {
        out->modes_ok = 0;
        snprintf(out->mode_problem, sizeof out->mode_problem, "%s is mode %04o, want %s", path,
                 (unsigned)(st.st_mode & 07777), is_dir ? "0700" : "0600");
    }
}

static void ops_header_parse(struct mv_store_file *out, const uint8_t hdr[OPS_HEADER_BYTES])
{
    if (!mv_header_plain_valid(hdr)) {
        return;
    }
    out->page_size = mv_header_page_size(hdr);
    out->page_count = out->file_bytes / out->page_size;
    out->reserve_bytes = (int)mv_header_reserve(hdr);
    if (mv_header_is_plaintext(hdr)) {
        out->cipher = MV_CIPHER_NONE;
        return;
    }
    /* The cipher registry maps only its ciphers' reserves; anything else stays AUTO. */
    out->cipher = (mv_cipher)crypt_cipher_by_reserve(mv_header_reserve(hdr));
    out->header_ok = out->cipher != MV_CIPHER_AUTO;
}

/* Header bytes 0..23 of the store file, whose stat(2) is *st. Never open()+close() here:
 * closing any descriptor of a file drops every POSIX lock this process holds on it, SQLite's
 * SHARED lock included, so a store this process has open is answered from the registry of
 * store_files.c, and the read of any other one happens while no thread can be opening it. */
static int ops_header_read(struct mv_store_file *out, const struct stat *st)
{
    uint8_t hdr[OPS_HEADER_BYTES];
    size_t got = 0;
    int rc = store_files_header_read(out->db_path, st, hdr, sizeof hdr, &got);
    if (rc == MV_OK && got == sizeof hdr) {
        ops_header_parse(out, hdr);
    }
    return rc;
}

int ops_file_describe(const char *address,
                      const struct mv_store_options *opts,
                      struct mv_store_file *out)
{
    struct store_paths paths;
    memset(out, 0, sizeof *out);
    out->cipher = MV_CIPHER_AUTO;
    out->modes_ok = 1;
    int rc = store_paths_resolve(address, opts, &paths, NULL, 0);
    if (rc != MV_OK) {
        return rc;
    }
    snprintf(out->address, sizeof out->address, "%s", paths.address);
    snprintf(out->db_path, sizeof out->db_path, "%s", paths.db_path);
    struct stat st;
    if (stat(paths.db_path, &st) != 0) {
        return errno == ENOENT ? MV_ENOTFOUND : MV_EIO;
    }
    out->file_bytes = (uint64_t)st.st_size;
    rc = S_ISREG(st.st_mode) ? ops_header_read(out, &st) : MV_OK; /* else: header_ok stays 0 */
    if (rc != MV_OK) {
        return rc;
    }
    char wal[MV_PATH_MAX + 8], shm[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", paths.db_path);
    snprintf(shm, sizeof shm, "%s-shm", paths.db_path);
    out->wal_bytes = ops_file_bytes(wal);
    ops_mode_check(out, paths.domain_dir, 1);
    ops_mode_check(out, paths.db_path, 0);
    ops_mode_check(out, wal, 0);
    ops_mode_check(out, shm, 0);
    ops_mode_check(out, paths.pub_path, 0);
    char lock[MV_PATH_MAX + 8];
    size_t stem = strlen(paths.db_path) - 3; /* without ".db" */
    snprintf(lock, sizeof lock, "%.*s.lock", (int)stem, paths.db_path);
    ops_mode_check(out, lock, 0);
    ops_mode_check(out, paths.queue_dir, 1);
    ops_mode_check(out, paths.tmp_dir, 1);
    rc = mv_queue_count(paths.address, opts, &out->pending);
    return rc == MV_ENOTFOUND ? MV_OK : rc;
}

int mv_store_file_inspect(const char *address,
                          const struct mv_store_options *opts,
                          struct mv_store_file *out)
{
    if (address == NULL || out == NULL) {
        return MV_EINVAL;
    }
    return ops_file_describe(address, opts, out);
}

/* ---- every store under a root ---------------------------------------------------------- */

struct mv_root_scan {
    struct mv_store_options opts;
    char root[MV_PATH_MAX];
    char **domains;
    size_t domain_count;
    size_t domain_index;
    char **names; /* local parts of the current domain */
    size_t name_count;
    size_t name_index;
};

static void ops_names_free(char ***names, size_t *count)
{
    for (size_t i = 0; i < *count; i++) {
        free((*names)[i]);
    }
    free(*names);
    *names = NULL;
    *count = 0;
}

static int ops_name_compare(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether entry e of dir is a domain directory (want_dirs) or a store file "<local>.db";
 * for a store, the local part is copied into name. */
static int ops_entry_wanted(const char *dir, const struct dirent *e, int want_dirs, char *name)
{
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || n >= MV_ADDRESS_MAX) {
        return 0;
    }
    if (!want_dirs) {
        if (n < 4 || strcmp(e->d_name + n - 3, ".db") != 0) {
            return 0;
        }
        memcpy(name, e->d_name, n - 3);
        name[n - 3] = '\0';
        return 1;
    }
    char path[MV_PATH_MAX + MV_ADDRESS_MAX + 2];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (strcmp(e->d_name, "tmp") == 0 || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        return 0;
    }
    memcpy(name, e->d_name, n + 1);
    return 1;
}

/* Lists the wanted entries of dir, sorted. MV_OK, MV_ENOTFOUND, MV_EIO, MV_ENOMEM, MV_ELIMIT. */
static int ops_dir_list(const char *dir, int want_dirs, char ***names_out, size_t *count_out)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return errno == ENOENT ? MV_ENOTFOUND : MV_EIO;
    }
    char **names = NULL;
    size_t count = 0, cap = 0;
    int rc = MV_OK;
    char name[MV_ADDRESS_MAX + 1];
    struct dirent *e;
    for (errno = 0; rc == MV_OK && (e = readdir(d)) != NULL; errno = 0) {
        if (!ops_entry_wanted(dir, e, want_dirs, name)) {
            continue;
        }
        if (count == cap) {
            size_t next = cap != 0 ? cap * 2 : 64;
            char **grown =
                next > OPS_SCAN_ENTRIES_MAX ? NULL : realloc(names, next * sizeof *names);
            if (grown == NULL) {
                rc = next > OPS_SCAN_ENTRIES_MAX ? MV_ELIMIT : MV_ENOMEM;
                break;
            }
            names = grown;
            cap = next;
        }
        names[count] = strdup(name);
        rc = names[count] != NULL ? MV_OK : MV_ENOMEM;
        count += names[count] != NULL;
    }
    if (rc == MV_OK && errno != 0) {
        rc = MV_EIO;
    }
    closedir(d);
    if (rc != MV_OK) {
        ops_names_free(&names, &count);
        return rc;
    }
    if (count > 1) {
        qsort(names, count, sizeof *names, ops_name_compare);
    }
    *names_out = names;
    *count_out = count;
    return MV_OK;
}

int mv_root_scan_begin(const struct mv_store_options *opts, mv_root_scan **scan)
{
    static const struct mv_store_options defaults = MV_STORE_OPTIONS_INIT;
    if (scan == NULL) {
        return MV_EINVAL;
    }
    *scan = NULL;
    mv_root_scan *r = calloc(1, sizeof *r);
    if (r == NULL) {
        return MV_ENOMEM;
    }
    r->opts = opts != NULL ? *opts : defaults;
    const char *root = r->opts.root;
    if (root == NULL || root[0] == '\0') {
        root = getenv("MAILVAULT_ROOT");
    }
    if (root == NULL || root[0] == '\0') {
        root = "./var/mail";
    }
    snprintf(r->root, sizeof r->root, "%s", root);
    r->opts.root = r->root;
    int rc = ops_dir_list(r->root, 1, &r->domains, &r->domain_count);
    if (rc != MV_OK) {
        free(r);
        return rc;
    }
    *scan = r;
    return MV_OK;
}

/* Loads the next domain's store names; 0 when no domain is left. */
static int ops_scan_next_domain(mv_root_scan *r)
{
    while (r->domain_index < r->domain_count) {
        char dir[MV_PATH_MAX + MV_ADDRESS_MAX + 2];
        snprintf(dir, sizeof dir, "%s/%s", r->root, r->domains[r->domain_index]);
        ops_names_free(&r->names, &r->name_count);
        r->name_index = 0;
        int rc = ops_dir_list(dir, 0, &r->names, &r->name_count);
        r->domain_index++;
        if (rc != MV_OK && rc != MV_ENOTFOUND) {
            return rc;
        }
        if (r->name_count > 0) {
            return 1;
        }
    }
    return 0;
}

int mv_root_scan_next(mv_root_scan *scan, struct mv_store_file *out)
{
    if (scan == NULL || out == NULL) {
        return MV_EINVAL;
    }
    for (;;) {
        if (scan->name_index >= scan->name_count) {
            int more = ops_scan_next_domain(scan);
            if (more <= 0) {
                return more;
            }
        }
        char address[2 * MV_ADDRESS_MAX + 2], normal[MV_ADDRESS_MAX + 1];
        const char *domain = scan->domains[scan->domain_index - 1];
        snprintf(address, sizeof address, "%s@%s", scan->names[scan->name_index++], domain);
        if (mv_address_normalize(address, normal, sizeof normal, NULL, 0) != MV_OK ||
            strcmp(normal, address) != 0) {
            continue; /* not a store name this root would have made */
        }
        int rc = ops_file_describe(normal, &scan->opts, out);
        if (rc == MV_ENOTFOUND) {
            continue; /* removed meanwhile */
        }
        return rc == MV_OK ? 1 : rc;
    }
}

void mv_root_scan_end(mv_root_scan **scan)
{
    if (scan == NULL || *scan == NULL) {
        return;
    }
    mv_root_scan *r = *scan;
    ops_names_free(&r->names, &r->name_count);
    ops_names_free(&r->domains, &r->domain_count);
    free(r);
    *scan = NULL;
}

/* ---- an open store ----------------------------------------------------------------------- */

int ops_query_int(mv_store *s, const char *sql, int64_t *out)
{
    return ops_query_ints(s, sql, out, 1);
}

int ops_query_ints(mv_store *s, const char *sql, int64_t *out, int columns)
{
    sqlite3_stmt *st = NULL;
    store_enter(s);
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, sql);
    }
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        for (int i = 0; i < columns; i++) {
            out[i] = sqlite3_column_int64(st, i);
        }
        rc = MV_OK;
    } else {
        rc = rc == SQLITE_DONE ? store_fail(s, MV_ERROR, "%s returned no row", sql)
                               : store_fail_sqlite(s, sql);
    }
    sqlite3_finalize(st);
    return rc;
}

int ops_meta_get_int(mv_store *s, const char *key, int64_t *out)
{
    sqlite3_stmt *st = NULL;
    *out = 0;
    store_enter(s);
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = ?", -1, &st, NULL) !=
        SQLITE_OK) {
        return store_fail_sqlite(s, "reading the meta table");
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "reading meta");
    sqlite3_finalize(st);
    return rc;
}

int ops_meta_set_int(mv_store *s, const char *key, int64_t value)
{
    sqlite3_stmt *st = NULL;
    int rc = store_begin(s);
    if (rc != MV_OK) {
        return rc;
    }
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO meta(key, value) VALUES(?, ?) "
                           "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                           -1, &st, NULL) != SQLITE_OK) {
        rc = store_fail_sqlite(s, "writing the meta table");
        store_rollback(s);
        return rc;
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, value);
    rc = sqlite3_step(st) == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "writing meta");
    sqlite3_finalize(st);
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}

static int ops_inspect_pragmas(mv_store *s, struct mv_store_inspection *out)
{
    int64_t v = 0;
    int rc = ops_query_int(s, "PRAGMA page_size", &v);
    out->page_size = (uint32_t)v;
    if (rc == MV_OK && (rc = ops_query_int(s, "PRAGMA page_count", &v)) == MV_OK) {
        out->page_count = (uint64_t)v;
    }
    if (rc == MV_OK && (rc = ops_query_int(s, "PRAGMA freelist_count", &v)) == MV_OK) {
        out->freelist_count = (uint64_t)v;
    }
    out->fragmentation =
        out->page_count > 0 ? (double)out->freelist_count / (double)out->page_count : 0.0;
    return rc;
}

static int ops_inspect_history(mv_store *s, struct mv_store_inspection *out)
{
    int64_t ok = 0;
    int rc = ops_meta_get_int(s, OPS_META_MAINTAINED_AT, &out->last_maintain_at);
    if (rc == MV_OK) {
        rc = ops_meta_get_int(s, OPS_META_QUICK_CHECK_AT, &out->last_quick_check_at);
    }
    if (rc == MV_OK) {
        rc = ops_meta_get_int(s, OPS_META_QUICK_CHECK_OK, &ok);
    }
    out->last_quick_check_ok = out->last_quick_check_at == 0 ? -1 : ok != 0;
    return rc;
}

static int ops_inspect_checkpoint(mv_store *s, struct mv_store_inspection *out)
{
    out->checkpoint_busy = -1;
    out->checkpoint_log_frames = -1;
    out->checkpoint_done_frames = -1;
    if (s->readonly) {
        return MV_OK;
    }
    sqlite3_stmt *st = NULL;
    store_enter(s);
    if (sqlite3_prepare_v2(s->db, "PRAGMA wal_checkpoint(PASSIVE)", -1, &st, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "PRAGMA wal_checkpoint(PASSIVE)");
    }
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        out->checkpoint_busy = sqlite3_column_int(st, 0);
        out->checkpoint_log_frames = sqlite3_column_int64(st, 1);
        out->checkpoint_done_frames = sqlite3_column_int64(st, 2);
        rc = MV_OK;
    } else {
        rc = store_fail_sqlite(s, "PRAGMA wal_checkpoint(PASSIVE)");
    }
    sqlite3_finalize(st);
    return rc;
}

int mv_store_inspect(mv_store *s, struct mv_store_inspection *out)
{
    if (s == NULL || out == NULL) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_store_inspect: no output struct")
                         : MV_EINVAL;
    }
    memset(out, 0, sizeof *out);
    int rc = mv_store_stats(s, &out->stats);
    if (rc == MV_OK) {
        rc = ops_inspect_checkpoint(s, out); /* first: the sizes then show its effect */
    }
    if (rc == MV_OK) {
        rc = ops_inspect_pragmas(s, out);
    }
    if (rc == MV_OK) {
        rc = ops_inspect_history(s, out);
    }
    if (rc != MV_OK) {
        return rc;
    }
    struct mv_db_info info;
    if (mv_db_info(s->db, &info) == MV_OK) {
        out->cipher = info.cipher;
        out->kdf_iter = info.kdf_iter;
    }
    char wal[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", s->db_path);
    out->file_bytes = ops_file_bytes(s->db_path);
    out->wal_bytes = ops_file_bytes(wal);
    return MV_OK;
}
