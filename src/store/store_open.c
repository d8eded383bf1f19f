/*
 * store_open.c -- creating, opening and closing a store.
 *
 * Opening applies the production profile in an order that takes effect: page size, reserve
 * bytes and auto_vacuum=FULL are fixed by mv_db_open() before page 1 exists, and the busy
 * timeout before its first read (STORE_BUSY_MS: the key's proof waits for another process's
 * lock instead of failing); then busy_timeout again (read back below), journal_mode=WAL,
 * secure_delete, synchronous=NORMAL, foreign_keys, encoding, temp_store=FILE,
 * wal_autocheckpoint, analysis_limit, the cache size, and optimize=0x10002. Every setting is
 * then read back, and the open fails naming the first one that did not take: the reference
 * runs for years without auto_vacuum because nothing checks.
 */
#include "store/store.h"
#include "store/store_blob.h"
#include "store/store_files.h"
#include "vfs/db_reopen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_PASSWORD_MAX  4096
#define STORE_CACHE_KIB_MIN 2048
#define STORE_CACHE_KIB_MAX 65536
#define STORE_PAGE_SIZE     4096
#define STORE_BUSY_MS       30000 /* store_profile's busy_timeout, from the open's first read */
#define STORE_STR_(x)       #x
#define STORE_STR(x)        STORE_STR_(x)
#define STORE_MISSING_FMT   "no store for %s (create it with `mailvault init`)" /* the address */

struct store_pragma {
    const char *set; /* NULL: fixed at creation, only checked */
    const char *get;
    const char *want; /* as sqlite3_column_text prints it */
};

static const struct store_pragma store_profile[] = {
    {"PRAGMA busy_timeout=" STORE_STR(STORE_BUSY_MS), "PRAGMA busy_timeout",
     STORE_STR(STORE_BUSY_MS)},
    {"PRAGMA journal_mode=WAL", "PRAGMA journal_mode", "wal"},
    {"PRAGMA secure_delete=ON", "PRAGMA secure_delete", "1"},
    {"PRAGMA synchronous=NORMAL", "PRAGMA synchronous", "1"},
    {"PRAGMA foreign_keys=ON", "PRAGMA foreign_keys", "1"},
    {"PRAGMA encoding='UTF-8'", "PRAGMA encoding", "UTF-8"},
    {"PRAGMA temp_store=FILE", "PRAGMA temp_store", "1"},
    {"PRAGMA wal_autocheckpoint=1000", "PRAGMA wal_autocheckpoint", "1000"},
    {"PRAGMA analysis_limit=400", "PRAGMA analysis_limit", "400"},
    {NULL, "PRAGMA auto_vacuum", "1"},
};

static int store_error(char *errmsg, size_t size, int code, const char *text)
{
    if (errmsg != NULL && size > 0) {
        snprintf(errmsg, size, "%s", text);
    }
    return code;
}

/* A page cache of MemAvailable / 512, between 2 and 64 MiB (the reference's 64 MB for one
 * store; a server keeps many open). */
static int64_t store_cache_kib(const struct mv_store_options *o)
{
    if (o->cache_size_kib > 0) {
        return o->cache_size_kib;
    }
    int64_t avail_kib = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        long long v;
        if (sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
            avail_kib = v;
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    int64_t kib = avail_kib / 512;
    return kib < STORE_CACHE_KIB_MIN   ? STORE_CACHE_KIB_MIN
           : kib > STORE_CACHE_KIB_MAX ? STORE_CACHE_KIB_MAX
                                       : kib;
}

static int store_pragma_text(mv_store *s, const char *sql, char *out, size_t size)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        if (t == NULL && sqlite3_errcode(s->db) == SQLITE_NOMEM) {
            /* the number's text could not be allocated: not a setting that did not take
             * (the allocation-failure loop: a backup's open said "busy_timeout is , not
             * 30000", MV_ERROR) */
            sqlite3_finalize(st);
            return store_fail(s, MV_ENOMEM, "out of memory reading %s", sql);
        }
        snprintf(out, size, "%s", t != NULL ? (const char *)t : "");
        rc = SQLITE_OK;
    } else {
        rc = SQLITE_ERROR;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_OK ? MV_OK : store_fail_sqlite(s, sql);
}

static int store_apply_profile(mv_store *s, const struct mv_store_options *o)
{
    char sql[64], want[32], got[64];
    for (size_t i = 0; i < sizeof store_profile / sizeof store_profile[0]; i++) {
        const struct store_pragma *p = &store_profile[i];
        int skip = p->set == NULL || (s->readonly && strstr(p->set, "journal_mode") != NULL);
        /* store_exec's message names the statement; its code says why (MV_ENOMEM, MV_EIO,
         * MV_EBUSY...): a generic MV_ERROR here hid a failed allocation, and formatting
         * s->errmsg into itself garbled the text (the allocation-failure loop found both). */
        int rc = skip ? MV_OK : store_exec(s, p->set);
        if (rc != MV_OK) {
            return rc;
        }
    }
    long long cache_kib = (long long)store_cache_kib(o); /* once: MemAvailable moves */
    s->cache_kib = cache_kib;
    snprintf(sql, sizeof sql, "PRAGMA cache_size=-%lld", cache_kib);
    snprintf(want, sizeof want, "-%lld", cache_kib);
    int set_rc = store_exec(s, sql);
    if (set_rc != MV_OK) {
        return set_rc;
    }
    /* Read everything back: a setting that silently did not take is an error. */
    for (size_t i = 0; i < sizeof store_profile / sizeof store_profile[0]; i++) {
        const struct store_pragma *p = &store_profile[i];
        int rc = store_pragma_text(s, p->get, got, sizeof got);
        if (rc != MV_OK) {
            return rc;
        }
        if (strcmp(got, p->want) != 0) {
            return store_fail(s, MV_ERROR, "%s is %s, not %s: the store cannot run with it%s",
                              p->get, got, p->want,
                              strstr(p->get, "auto_vacuum") != NULL
                                  ? " (created without auto_vacuum; VACUUM it into a new store)"
                                  : "");
        }
    }
    int rc = store_pragma_text(s, "PRAGMA cache_size", got, sizeof got);
    if (rc == MV_OK && strcmp(got, want) != 0) {
        return store_fail(s, MV_ERROR, "PRAGMA cache_size is %s, not %s", got, want);
    }
    return rc == MV_OK && !s->readonly ? store_exec(s, "PRAGMA optimize=0x10002") : rc;
}

static mv_store *store_alloc(const struct store_paths *p, const struct mv_store_options *o)
{
    mv_store *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return NULL;
    }
    snprintf(s->address, sizeof s->address, "%s", p->address);
    snprintf(s->domain_dir, sizeof s->domain_dir, "%s", p->domain_dir);
    snprintf(s->db_path, sizeof s->db_path, "%s", p->db_path);
    snprintf(s->tmp_dir, sizeof s->tmp_dir, "%s", p->tmp_dir);
    snprintf(s->pub_path, sizeof s->pub_path, "%s", p->pub_path);
    snprintf(s->queue_dir, sizeof s->queue_dir, "%s", p->queue_dir);
    size_t local_len = (size_t)(strrchr(p->address, '@') - p->address);
    snprintf(s->localpart, sizeof s->localpart, "%.*s", (int)local_len, p->address);
    s->limits = o->limits;
    s->readonly = (o->flags & MV_STORE_READONLY) != 0;
    s->lock_fd = -1;
    s->purge_hint = 1;       /* unknown until the first purge looks */
    s->fts_backlog_hint = 1; /* unknown until mv_store_index_backlog() looks */
    return s;
}

/* Opens the database of s and applies the profile and the schema. */
static int store_connect(
    mv_store *s, const void *pw, size_t pw_len, const struct mv_store_options *o, int create)
{
    struct mv_db_options dbo = MV_DB_OPTIONS_INIT;
    dbo.kdf_iter = o->kdf_iter;
    dbo.page_size = STORE_PAGE_SIZE;
    dbo.auto_vacuum = 1;
    dbo.busy_timeout_ms = STORE_BUSY_MS;
    dbo.flags = s->readonly ? MV_DB_READONLY : (create ? MV_DB_CREATE : 0);
    char *err = NULL;
    store_enter(s);
    /* Registered before SQLite opens the file: from here until store_free() no keyless
     * code of this process closes a descriptor of it (store_files.h). */
    int rc = store_files_register(s, s->db_path);
    if (rc != MV_OK) {
        return store_fail(s, rc, "%s: cannot register %s: %s", s->address, s->db_path,
                          mv_strerror(rc));
    }
    rc = mv_db_open(s->db_path, pw, pw_len, &dbo, &s->db, &err);
    if (rc != MV_OK) {
        store_fail(s, rc, "%s: %s", s->address, err != NULL ? err : mv_strerror(rc));
        sqlite3_free(err);
        return rc;
    }
    rc = store_apply_profile(s, o);
    if (rc == MV_OK) {
        rc = store_message_functions(s);
    }
    if (rc != MV_OK) {
        return rc;
    }
    store_files_learn(s, s->db); /* a new store's header exists only now */
    struct mv_db_info info;
    /* chacha20 with reserve 0 is "encrypt only" (no tag); sqlcipher's IV + HMAC-SHA512 take 80 */
    s->pages_authenticated = mv_db_info(s->db, &info) == MV_OK &&
                             ((info.cipher == MV_CIPHER_CHACHA20 && info.reserve_bytes >= 32) ||
                              (info.cipher == MV_CIPHER_SQLCIPHER && info.reserve_bytes >= 80));
    if (s->readonly) {
        char version[16];
        rc = store_pragma_text(s, "PRAGMA user_version", version, sizeof version);
        if (rc == MV_OK && strtol(version, NULL, 10) != STORE_SCHEMA_VERSION) {
            rc = store_fail(s, MV_EUNSUPPORTED,
                            "schema version %s needs a writable open to "
                            "migrate",
                            version);
        }
        return rc;
    }
    return store_schema_migrate(s);
}

int store_ready(mv_store *s)
{
    if (!s->reconnect || s->read_snapshot || !sqlite3_get_autocommit(s->db)) {
        return MV_OK;
    }
    sqlite3 *fresh = NULL;
    char *err = NULL;
    store_enter(s);
    int rc = mv_db_reopen(s->db, &fresh, &err);
    if (rc != MV_OK) {
        rc = store_fail(s, rc == MV_EINVAL ? MV_EIO : rc,
                        "%s: after an I/O error the store's connection must be replaced, and "
                        "opening a new one failed: %s",
                        s->address, err != NULL ? err : mv_strerror(rc));
        sqlite3_free(err);
        return rc;
    }
    store_stmts_finalize(s);
    sqlite3 *old = s->db;
    s->db = fresh;
    (void)sqlite3_close_v2(old); /* a zombie until a statement still open on it ends */
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.cache_size_kib = s->cache_kib;
    rc = store_apply_profile(s, &o);
    if (rc == MV_OK) {
        rc = store_message_functions(s); /* functions belong to a connection, not the file */
    }
    if (rc == MV_OK) {
        store_checkpoint_install(s); /* so does the WAL hook */
        s->reconnect = 0;
        s->reconnects++;
    }
    return rc;
}

uint32_t mv_store_reconnects(const mv_store *store)
{
    return store != NULL ? store->reconnects : 0;
}

static void store_free(mv_store *s)
{
    store_fts_pending_discard(s);
    store_stmts_finalize(s);
    store_blob_release(s);
    store_queue_round_free(s);
    store_queue_tidy_close(s);
    /* Unregistered only once the connection is really gone: a connection that failed to
     * close still holds the file's locks, and keyless readers must keep off it. */
    if (sqlite3_close(s->db) == SQLITE_OK) {
        store_files_unregister(s);
    }
    store_strings_free(&s->strings);
    store_lock_release(&s->lock_fd); /* after the close: no connection outlives the lock */
    free(s);
}

void mv_store_close(mv_store **store)
{
    if (store == NULL || *store == NULL) {
        return;
    }
    mv_store *s = *store;
    store_enter(s); /* PRAGMA optimize may run ANALYZE */
    /* A caller that left appends owed (mv_store_sync_later): durable all the same. A refusal
     * has nobody to go to; the close's checkpoint, if this is the last connection, tries
     * the WAL's sync again. */
    if (s->db != NULL && s->sync_owed && mv_store_sync(s) != MV_OK) {
        s->sync_owed = 0;
    }
    if (s->db != NULL && !s->readonly) {
        (void)sqlite3_exec(s->db, "PRAGMA optimize", NULL, NULL, NULL);
    }
    store_free(s);
    *store = NULL;
}

const char *mv_store_errmsg(const mv_store *store)
{
    return store != NULL ? store->errmsg : "";
}

int mv_store_errmsg_internal(const mv_store *store)
{
    return store == NULL || store->errmsg_internal;
}

sqlite3 *mv_store_db(mv_store *store)
{
    return store != NULL ? store->db : NULL;
}

static int
store_create_files(mv_store *s, const void *pw, size_t pw_len, const struct mv_store_options *o)
{
    /* Create the file 0600 ourselves: SQLite gives -wal and -shm the same mode. */
    int fd = open(s->db_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        return store_fail(s, errno == EEXIST ? MV_EEXISTS : MV_EIO, "cannot create %s: %s",
                          s->db_path, strerror(errno));
    }
    close(fd);
    int rc = store_connect(s, pw, pw_len, o, 1); /* the schema with the default mailboxes */
    if (rc == MV_OK) {
        rc = store_queue_init_keys(s);
    }
    if (rc == MV_OK) {
        rc = store_fsync_dir(s->domain_dir);
    }
    return rc;
}

static void store_remove_files(const mv_store *s)
{
    char path[MV_PATH_MAX + 8];
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        snprintf(path, sizeof path, "%s%s", s->db_path, suffixes[i]);
        unlink(path);
    }
    unlink(s->pub_path);
}

int mv_store_init(const char *address,
                  const void *password,
                  size_t password_len,
                  const struct mv_store_options *opts,
                  char *errmsg,
                  size_t errmsg_size)
{
    static const struct mv_store_options defaults = MV_STORE_OPTIONS_INIT;
    const struct mv_store_options *o = opts != NULL ? opts : &defaults;
    struct store_paths paths;
    int rc = store_paths_resolve(address, o, &paths, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    if (password == NULL || password_len == 0 || password_len > STORE_PASSWORD_MAX) {
        return store_error(errmsg, errmsg_size, MV_EINVAL, "the password must be 1 to 4096 bytes");
    }
    if (access(paths.db_path, F_OK) == 0) {
        return store_error(errmsg, errmsg_size, MV_EEXISTS, "the store already exists");
    }
    rc = store_mkdirs(paths.domain_dir, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = store_mkdirs(paths.tmp_dir, errmsg, errmsg_size);
    }
    if (rc != MV_OK) {
        return rc;
    }
    /* Exclusive until the store is whole: an open that finds the file meanwhile (empty, or
     * its first transaction under way) waits for its shared lock and then sees the finished
     * store, instead of taking the half-made one for what an interrupted init leaves. */
    int lock_fd = -1;
    rc = store_lock_take(paths.db_path, STORE_LOCK_EXCLUSIVE, STORE_LOCK_OPEN_WAIT_MS, 0, &lock_fd,
                         errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    struct mv_store_options writable = *o;
    writable.flags &= ~(unsigned)MV_STORE_READONLY;
    mv_store *s = store_alloc(&paths, &writable);
    if (s == NULL) {
        store_lock_release(&lock_fd);
        return store_error(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
    }
    rc = store_create_files(s, password, password_len, &writable);
    if (rc != MV_OK) {
        store_error(errmsg, errmsg_size, rc, s->errmsg);
        sqlite3 *db = s->db;
        store_stmts_finalize(s);
        if (sqlite3_close(db) == SQLITE_OK) {
            s->db = NULL; /* else store_free() tries again, and keeps the registration */
        }
        if (rc != MV_EEXISTS) {
            store_remove_files(s); /* nothing half-made is left behind */
        }
    }
    store_free(s);
    store_lock_release(&lock_fd); /* after the close: the store is whole, or gone */
    return rc;
}

/* Whether db_path is what an init killed in its first transaction leaves: (1) an empty
 * file (killed before the first page: keying it now would hand the store to whatever
 * password comes first), or (2) at most that first page with a journal beside it (the VFS
 * refuses to roll back a journal that would empty the database, since that could as well be
 * an attack). */
static int store_open_interrupted_init(const char *db_path, const struct stat *st)
{
    char journal[MV_PATH_MAX + 16];
    snprintf(journal, sizeof journal, "%s-journal", db_path);
    return S_ISREG(st->st_mode) &&
           (st->st_size == 0 || (st->st_size <= STORE_PAGE_SIZE && access(journal, F_OK) == 0));
}

/* Finds the store file of an open: creates the store if it is missing and o asks for it. */
static int store_open_find(const struct store_paths *paths,
                           const void *password,
                           size_t password_len,
                           const struct mv_store_options *o,
                           char *errmsg,
                           size_t errmsg_size)
{
    char msg[MV_PATH_MAX + 160];
    struct stat st;
    if (stat(paths->db_path, &st) != 0) {
        if (!(o->flags & MV_STORE_CREATE) || (o->flags & MV_STORE_READONLY)) {
            snprintf(msg, sizeof msg, STORE_MISSING_FMT, paths->address);
            return store_error(errmsg, errmsg_size, MV_ENOTFOUND, msg);
        }
        int rc = mv_store_init(paths->address, password, password_len, o, errmsg, errmsg_size);
        if (rc != MV_OK && rc != MV_EEXISTS) {
            return rc;
        }
    }
    return MV_OK;
}

/* Under the store's shared lock, which an init holds exclusively until the store is whole:
 * refuses what an interrupted init left, and a file that a failed init removed meanwhile. */
static int store_open_refuse_partial(mv_store *s)
{
    struct stat st;
    if (stat(s->db_path, &st) != 0) {
        return store_fail(s, MV_ENOTFOUND, STORE_MISSING_FMT, s->address);
    }
    if (store_open_interrupted_init(s->db_path, &st)) {
        return store_fail(s, MV_ECORRUPT,
                          "the store file %s was left by an interrupted init (%s): remove it and "
                          "run init again",
                          s->db_path, st.st_size == 0 ? "it is empty" : "one page and a journal");
    }
    return MV_OK;
}

int mv_store_open(const char *address,
                  const void *password,
                  size_t password_len,
                  const struct mv_store_options *opts,
                  mv_store **out,
                  char *errmsg,
                  size_t errmsg_size)
{
    static const struct mv_store_options defaults = MV_STORE_OPTIONS_INIT;
    const struct mv_store_options *o = opts != NULL ? opts : &defaults;
    struct store_paths paths;
    *out = NULL;
    int rc = store_paths_resolve(address, o, &paths, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    if (password == NULL || password_len == 0 || password_len > STORE_PASSWORD_MAX) {
        return store_error(errmsg, errmsg_size, MV_EINVAL, "the password must be 1 to 4096 bytes");
    }
    rc = store_open_find(&paths, password, password_len, o, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    if (!(o->flags & MV_STORE_READONLY) &&
        (rc = store_mkdirs(paths.tmp_dir, errmsg, errmsg_size)) != MV_OK) {
        return rc;
    }
    mv_store *s = store_alloc(&paths, o);
    if (s == NULL) {
        return store_error(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
    }
    /* Shared for the handle's lifetime: a password change or restore (exclusive) cannot
     * rename a new file over the one this handle has open. */
    rc = store_lock_take(s->db_path, STORE_LOCK_SHARED, STORE_LOCK_OPEN_WAIT_MS, s->readonly,
                         &s->lock_fd, s->errmsg, sizeof s->errmsg);
    if (rc == MV_OK) {
        rc = store_open_refuse_partial(s);
    }
    /* Checked under the shared lock, which mv_store_release() needs exclusively: a store
     * released from this node is never written here again (store_fence.c). */
    if (rc == MV_OK && !s->readonly) {
        rc = store_fence_check(s->db_path, s->errmsg, sizeof s->errmsg);
    }
    if (rc == MV_OK) {
        rc = store_connect(s, password, password_len, o, 0);
    }
    if (rc == MV_OK && !s->readonly) { /* files a drain left for mv_queue_tidy() */
        char done[MV_PATH_MAX + 16];
        snprintf(done, sizeof done, "%s/done", s->queue_dir);
        s->queue_done_hint = access(done, F_OK) == 0;
    }
    if (rc == MV_OK && !s->readonly && !(o->flags & MV_STORE_DRAIN_LATER)) {
        uint32_t moved = 0;
        int more = 0;
        rc = store_queue_drain(s, 0, &moved, &more);
    }
    if (rc != MV_OK) {
        store_error(errmsg, errmsg_size, rc, s->errmsg);
        store_free(s);
        return rc;
    }
    *out = s;
    return MV_OK;
}

int mv_store_open_twin(mv_store *store, mv_store **out)
{
    *out = NULL;
    if (store == NULL || store->db == NULL) {
        return MV_EINVAL;
    }
    struct store_paths paths;
    memset(&paths, 0, sizeof paths);
    snprintf(paths.address, sizeof paths.address, "%s", store->address);
    snprintf(paths.domain_dir, sizeof paths.domain_dir, "%s", store->domain_dir);
    snprintf(paths.db_path, sizeof paths.db_path, "%s", store->db_path);
    snprintf(paths.tmp_dir, sizeof paths.tmp_dir, "%s", store->tmp_dir);
    snprintf(paths.pub_path, sizeof paths.pub_path, "%s", store->pub_path);
    snprintf(paths.queue_dir, sizeof paths.queue_dir, "%s", store->queue_dir);
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.limits = store->limits;
    o.cache_size_kib = store->cache_kib;
    o.flags = store->readonly ? MV_STORE_READONLY : 0;
    mv_store *s = store_alloc(&paths, &o);
    if (s == NULL) {
        return store_fail(store, MV_ENOMEM, "%s: out of memory for a second handle",
                          store->address);
    }
    /* Its own shared lock (flock: per open file description, so closing either handle keeps
     * the other's), as every handle of the store holds one. */
    int rc = store_lock_take(s->db_path, STORE_LOCK_SHARED, STORE_LOCK_OPEN_WAIT_MS, s->readonly,
                             &s->lock_fd, s->errmsg, sizeof s->errmsg);
    if (rc == MV_OK) {
        store_enter(s);
        rc = store_files_register(s, s->db_path);
    }
    char *err = NULL;
    if (rc == MV_OK) {
        /* The key is copied from the open connection (MV_FCNTL_KEY_SHARE): no KDF run. */
        rc = mv_db_reopen(store->db, &s->db, &err);
        if (rc != MV_OK) {
            rc = store_fail(s, rc == MV_EINVAL ? MV_EIO : rc, "%s: a second connection: %s",
                            s->address, err != NULL ? err : mv_strerror(rc));
        }
        sqlite3_free(err);
    }
    if (rc == MV_OK) {
        rc = store_apply_profile(s, &o);
    }
    if (rc == MV_OK) {
        rc = store_message_functions(s);
    }
    if (rc == MV_OK) {
        store_files_learn(s, s->db);
        s->pages_authenticated = store->pages_authenticated; /* the same file and cipher */
    }
    if (rc != MV_OK) {
        store_fail(store, rc, "%s", s->errmsg);
        store_free(s);
        return rc;
    }
    *out = s;
    return MV_OK;
}
