/*
 * quota.c -- per-user quota (RFC 9208) for APPEND, COPY, LMTP and GETQUOTA: two resources,
 * STORAGE (the user's logical size in KiB: the sum of the sizes of the messages in every
 * mailbox, a copy counting twice, as mv_store_stats() counts logical_bytes) and MESSAGE
 * (messages over all mailboxes). Each user's limits are the entry for the address in
 * quota_file if there is one, else the defaults quota_kib and quota_messages; 0 is unlimited.
 *
 * USAGE
 *   quota_file_load(path, err, size)    at start-up (config.c, key quota_file): 0 or -1
 *   quota_file_reload()                 SIGHUP (main.c): re-read now; 0 or -1 (logged)
 *   quota_limits_for(cfg, address)      the user's limits (re-reads a changed quota_file)
 *   quota_exceeded(store, cfg, address, add_bytes, add_messages)   the store is open
 *   quota_sealed_exceeded(cfg, address, add_bytes, why, size)      it is not (LMTP)
 *   quota_note(address, store)          the worker opened or is closing the store
 *
 * QUOTA FILE
 *   One entry a line, "address storage_kib messages", fields separated by blanks; '#' at the
 *   start of a line or after a blank begins a comment ('#' inside an address is part of
 *   it). Addresses are normalised (mv_address_normalize); 0 is unlimited. Any bad line
 *   (field count, address, number, range, a second entry for an address, a line longer than
 *   QUOTA_FILE_LINE_MAX) makes the whole file bad, with an error naming file:line. At
 *   start-up that stops the server; later the file is looked at again when a lookup comes
 *   QUOTA_FILE_CHECK_MS or more after the last look, re-read if its inode, size or mtime
 *   changed, and a bad new version is logged and ignored (the previous table stays).
 *   SIGHUP (quota_file_reload) re-reads it at once, changed or not.
 *
 * IMPLEMENTATION NOTES
 *   - The usage of an open store is summed over the mailbox rows (mv_mailbox_list_*:
 *     messages and size_bytes are columns the store keeps up to date), so it costs one row
 *     per mailbox, never a walk of the messages.
 *   - A sealed delivery (store not open, no password) cannot read those encrypted counters.
 *     It uses the usage last seen while the store was open here (quota_note: after each
 *     open, which has drained the queue, and before each close, so every append, copy,
 *     expunge and delete made while it was open is in it), plus the .sealed files in the
 *     store's queue directory (their bytes, one message each). With nothing seen since the
 *     start, the storage estimate is the store's file sizes (db + wal) plus the queue, and
 *     the message count is not checked. A queue that cannot be counted is an error (-1: the
 *     LMTP reply is a temporary failure), not a guess.
 *   - One mutex guards the table and the seen-usage cache; the quota file is parsed and the
 *     usage is read outside it.
 *
 * LIMITATIONS
 *   - The file-size estimate is rough both ways: pages, indexes and free space make it larger
 *     than the logical size, compression smaller.
 *   - Changes made by another process (the mailvault CLI opening the store drains the queue
 *     and may expunge) are not seen by the cache until the server opens the store again.
 *   - The queue's bytes include 76 bytes of sealing per message (docs/DELIVERY.md).
 */
#include "imapd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define QUOTA_FILE_BYTES_MAX   ((off_t)16 << 20) /* a larger quota_file is refused */
#define QUOTA_FILE_ENTRIES_MAX 1000000
#define QUOTA_FILE_LINE_MAX    1024   /* bytes of one line, without its line break */
#define QUOTA_FILE_CHECK_MS    2000   /* how often the file's inode, size and mtime are looked at */
#define QUOTA_SEEN_MAX         100000 /* addresses whose last usage is kept */
#define QUOTA_SEEN_BUCKETS     8192
#define QUOTA_QUEUE_SCAN_MAX   1000000 /* directory entries one sealed check reads */
#define QUOTA_SEALED_SUFFIX    ".sealed"

struct quota_entry {
    char *address; /* normalised */
    struct quota_limits limits;
    int line;
};

struct quota_table {
    struct quota_entry *entries; /* sorted by address */
    size_t count;
};

/* What identifies one version of the file: re-read when any of it changes. */
struct quota_file_sig {
    int exists;
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t mtime_ns;
};

struct quota_seen {
    struct quota_seen *next;
    struct quota_usage usage;
    int64_t at_ms;
    char address[];
};

static pthread_mutex_t quota_lock = PTHREAD_MUTEX_INITIALIZER;
static char quota_path[MV_PATH_MAX];    /* "" : no quota_file */
static struct quota_table quota_table;  /* the file's entries */
static struct quota_file_sig quota_sig; /* of the version read (or refused) last */
static int64_t quota_checked_ms;
static int quota_reloading; /* one thread re-reads the file at a time */
static struct quota_seen *quota_seen[QUOTA_SEEN_BUCKETS];
static size_t quota_seen_count;

static int64_t quota_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void quota_table_free(struct quota_table *t)
{
    for (size_t i = 0; i < t->count; i++) {
        free(t->entries[i].address);
    }
    free(t->entries);
    t->entries = NULL;
    t->count = 0;
}

static struct quota_file_sig quota_sig_of(const struct stat *st)
{
    struct quota_file_sig sig = {1, st->st_dev, st->st_ino, st->st_size,
                                 (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec};
    return sig;
}

static int quota_sig_same(const struct quota_file_sig *a, const struct quota_file_sig *b)
{
    /* (1) both missing, or (2) the same inode with the same size and mtime */
    return (!a->exists && !b->exists) ||
           (a->exists && b->exists && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
            a->mtime_ns == b->mtime_ns);
}

/* A decimal number 0..max, digits only (no sign, no blanks). 0 or -1. */
static int quota_number(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t n = 0;
    if (*s == '\0') {
        return -1;
    }
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9') {
            return -1;
        }
        unsigned digit = (unsigned)(*s - '0');
        if (n > (max - digit) / 10) {
            return -1;
        }
        n = n * 10 + digit;
    }
    *out = n;
    return 0;
}

static int quota_entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct quota_entry *)a)->address,
                  ((const struct quota_entry *)b)->address);
}

/* Splits line into at most max blank-separated fields, stopping at a comment. The count. */
static size_t quota_fields(char *line, char **fields, size_t max)
{
    size_t n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
            *p++ = '\0';
        }
        if (*p == '\0' || *p == '#') {
            return n;
        }
        if (n == max) {
            return max + 1; /* too many */
        }
        fields[n++] = p;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            p++;
        }
    }
}

/* One line into e. 0, or -1 with the reason in why. */
static int quota_line(char *line, struct quota_entry *e, char *why, size_t why_size)
{
    char *f[3], normal[MV_ADDRESS_MAX + 1], detail[160] = "";
    size_t n = quota_fields(line, f, 3);
    if (n != 3) {
        snprintf(why, why_size, "expected \"address storage_kib messages\", found %s fields",
                 n > 3    ? "more than 3"
                 : n == 2 ? "2"
                          : "1");
        return -1;
    }
    if (mv_address_normalize(f[0], normal, sizeof normal, detail, sizeof detail) != MV_OK) {
        snprintf(why, why_size, "bad address \"%.64s\": %s", f[0], detail);
        return -1;
    }
    if (quota_number(f[1], QUOTA_STORAGE_KIB_MAX, &e->limits.storage_kib) != 0) {
        snprintf(why, why_size, "storage_kib \"%.32s\": expected a number from 0 to %llu", f[1],
                 (unsigned long long)QUOTA_STORAGE_KIB_MAX);
        return -1;
    }
    if (quota_number(f[2], QUOTA_MESSAGES_MAX, &e->limits.messages) != 0) {
        snprintf(why, why_size, "messages \"%.32s\": expected a number from 0 to %llu", f[2],
                 (unsigned long long)QUOTA_MESSAGES_MAX);
        return -1;
    }
    e->address = strdup(normal);
    if (e->address == NULL) {
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    return 0;
}

/* Reads every line of f into t (unsorted). 0, or -1 with "path:line: why" in err. */
static int
quota_file_lines(FILE *f, const char *path, struct quota_table *t, char *err, size_t err_size)
{
    char line[QUOTA_FILE_LINE_MAX + 2], why[256];
    size_t cap = 0;
    int number = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        number++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            snprintf(err, err_size, "%s:%d: line longer than %d bytes", path, number,
                     QUOTA_FILE_LINE_MAX);
            return -1;
        }
        char *fields[1];
        char copy[sizeof line];
        memcpy(copy, line, sizeof line);
        if (quota_fields(copy, fields, 1) == 0) {
            continue; /* blank or comment */
        }
        if (t->count == QUOTA_FILE_ENTRIES_MAX) {
            snprintf(err, err_size, "%s:%d: more than %d entries", path, number,
                     QUOTA_FILE_ENTRIES_MAX);
            return -1;
        }
        if (t->count == cap) {
            size_t grown = cap == 0 ? 64 : cap * 2;
            struct quota_entry *e = realloc(t->entries, grown * sizeof *e);
            if (e == NULL) {
                snprintf(err, err_size, "%s:%d: out of memory", path, number);
                return -1;
            }
            t->entries = e;
            cap = grown;
        }
        struct quota_entry *e = &t->entries[t->count];
        if (quota_line(line, e, why, sizeof why) != 0) {
            snprintf(err, err_size, "%s:%d: %s", path, number, why);
            return -1;
        }
        e->line = number;
        t->count++;
    }
    if (ferror(f)) {
        snprintf(err, err_size, "%s: read error", path);
        return -1;
    }
    return 0;
}

/* Parses the quota file at path into *out (sorted) and its identity into *sig. 0, or -1
 * with the reason in err (and *out empty). */
static int quota_file_parse(const char *path,
                            struct quota_table *out,
                            struct quota_file_sig *sig,
                            char *err,
                            size_t err_size)
{
    struct quota_table t = {NULL, 0};
    struct stat st;
    int rc = -1;
    memset(sig, 0, sizeof *sig);
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, err_size, "%s: not a regular file", path);
    } else if (st.st_size > QUOTA_FILE_BYTES_MAX) {
        *sig = quota_sig_of(&st);
        snprintf(err, err_size, "%s: larger than %lld bytes", path,
                 (long long)QUOTA_FILE_BYTES_MAX);
    } else {
        *sig = quota_sig_of(&st);
        rc = quota_file_lines(f, path, &t, err, err_size);
    }
    fclose(f);
    if (rc == 0 && t.count > 1) {
        qsort(t.entries, t.count, sizeof *t.entries, quota_entry_cmp);
        for (size_t i = 1; i < t.count; i++) {
            const struct quota_entry *a = &t.entries[i - 1], *b = &t.entries[i];
            if (strcmp(a->address, b->address) == 0) {
                int first = a->line < b->line ? a->line : b->line;
                int second = a->line < b->line ? b->line : a->line;
                snprintf(err, err_size, "%s:%d: a second entry for %s (the first is line %d)", path,
                         second, a->address, first);
                rc = -1;
                break;
            }
        }
    }
    if (rc != 0) {
        quota_table_free(&t);
    }
    *out = t;
    return rc;
}

int quota_file_load(const char *path, char *err, size_t err_size)
{
    struct quota_table t = {NULL, 0};
    struct quota_file_sig sig;
    memset(&sig, 0, sizeof sig);
    if (strlen(path) >= sizeof quota_path) {
        snprintf(err, err_size, "quota_file: path too long");
        return -1;
    }
    if (path[0] != '\0' && quota_file_parse(path, &t, &sig, err, err_size) != 0) {
        return -1;
    }
    pthread_mutex_lock(&quota_lock);
    quota_table_free(&quota_table);
    quota_table = t;
    quota_sig = sig;
    memcpy(quota_path, path, strlen(path) + 1);
    quota_checked_ms = quota_now_ms();
    pthread_mutex_unlock(&quota_lock);
    return 0;
}

/* Looks at the quota file again if it is time; re-reads it if it changed. With force
 * (SIGHUP) it looks now and re-reads even an unchanged file, after waiting for a re-read
 * another thread has begun (that one may have read the version before the edit). 0, or -1
 * when the version looked at was refused. */
static int quota_file_check(int force)
{
    char path[MV_PATH_MAX], err[512];
    struct quota_file_sig sig, old;
    int64_t now = quota_now_ms();
    pthread_mutex_lock(&quota_lock);
    while (force && quota_reloading) {
        pthread_mutex_unlock(&quota_lock);
        nanosleep(&(struct timespec){0, 1000000}, NULL); /* a parse is bounded: 16 MiB */
        pthread_mutex_lock(&quota_lock);
    }
    int due = quota_path[0] != '\0' && !quota_reloading &&
              (force || now - quota_checked_ms >= QUOTA_FILE_CHECK_MS);
    if (due) {
        quota_reloading = 1;
        quota_checked_ms = now;
        memcpy(path, quota_path, sizeof path);
        old = quota_sig;
    }
    pthread_mutex_unlock(&quota_lock);
    if (!due) {
        return 0;
    }
    struct stat st;
    int stat_errno = 0;
    memset(&sig, 0, sizeof sig);
    if (stat(path, &st) == 0) {
        sig = quota_sig_of(&st);
    } else {
        stat_errno = errno;
    }
    struct quota_table t = {NULL, 0};
    int changed = force || !quota_sig_same(&sig, &old), ok = 0;
    if (changed && !sig.exists) {
        log_event("quota file %s: %s; keeping the previous table", path, strerror(stat_errno));
    } else if (changed) {
        ok = quota_file_parse(path, &t, &sig, err, sizeof err) == 0;
        if (ok) {
            log_event("quota file %s: reloaded, %zu entries", path, t.count);
        } else {
            log_event("quota file %s; keeping the previous table", err);
        }
    }
    pthread_mutex_lock(&quota_lock);
    if (ok) {
        quota_table_free(&quota_table);
        quota_table = t;
    }
    quota_sig = sig; /* a bad or missing version is reported once, not at every look */
    quota_reloading = 0;
    pthread_mutex_unlock(&quota_lock);
    return changed && !ok ? -1 : 0;
}

int quota_file_reload(void)
{
    return quota_file_check(1);
}

struct quota_limits quota_limits_for(const struct config *cfg, const char *address)
{
    struct quota_limits limits = {cfg->quota_kib, cfg->quota_messages};
    (void)quota_file_check(0);
    pthread_mutex_lock(&quota_lock);
    struct quota_entry key = {(char *)(uintptr_t)address, {0, 0}, 0};
    const struct quota_entry *e = quota_table.count == 0
                                      ? NULL
                                      : bsearch(&key, quota_table.entries, quota_table.count,
                                                sizeof *quota_table.entries, quota_entry_cmp);
    if (e != NULL) {
        limits = e->limits;
    }
    pthread_mutex_unlock(&quota_lock);
    return limits;
}

int quota_used(mv_store *store, struct quota_usage *out)
{
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info info;
    struct quota_usage total = {0, 0};
    /* Counts and sizes only: they are in the mailbox rows, no walk over the messages. */
    int rc = mv_mailbox_list_begin_fields(store, 0, &it);
    if (rc != MV_OK) {
        return rc;
    }
    while ((rc = mv_mailbox_list_next(it, &info)) == 1) {
        total.bytes += info.size_bytes;
        total.messages += info.messages;
    }
    mv_mailbox_list_end(&it);
    if (rc < 0) {
        return rc;
    }
    *out = total;
    return MV_OK;
}

/* Whether used + add goes over limit (0: unlimited), without overflow. */
static int quota_over(uint64_t used, uint64_t add, uint64_t limit)
{
    return limit != 0 && (used > limit || add > limit - used);
}

static int quota_check(const struct quota_limits *limits,
                       const struct quota_usage *used,
                       uint64_t add_bytes,
                       uint64_t add_messages,
                       int count_messages)
{
    int over = 0;
    if (quota_over(used->bytes, add_bytes, limits->storage_kib * 1024u)) {
        over |= QUOTA_OVER_STORAGE;
    }
    if (count_messages && quota_over(used->messages, add_messages, limits->messages)) {
        over |= QUOTA_OVER_MESSAGE;
    }
    return over;
}

int quota_exceeded(mv_store *store,
                   const struct config *cfg,
                   const char *address,
                   uint64_t add_bytes,
                   uint64_t add_messages)
{
    struct quota_limits limits = quota_limits_for(cfg, address);
    struct quota_usage used;
    if (limits.storage_kib == 0 && limits.messages == 0) {
        return 0;
    }
    if (quota_used(store, &used) != MV_OK) {
        return 0; /* the append itself will report a broken store */
    }
    return quota_check(&limits, &used, add_bytes, add_messages, 1);
}

const char *quota_over_text(int over)
{
    return over == (QUOTA_OVER_STORAGE | QUOTA_OVER_MESSAGE) ? "storage and message"
           : over == QUOTA_OVER_MESSAGE                      ? "message"
                                                             : "storage";
}

static size_t quota_seen_bucket(const char *address)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)address; *p != '\0'; p++) {
        h = (h ^ *p) * 16777619u;
    }
    return h % QUOTA_SEEN_BUCKETS;
}

/* The cache entry of address (quota_lock held), or NULL. */
static struct quota_seen *quota_seen_find(const char *address)
{
    for (struct quota_seen *e = quota_seen[quota_seen_bucket(address)]; e != NULL; e = e->next) {
        if (strcmp(e->address, address) == 0) {
            return e;
        }
    }
    return NULL;
}

void quota_note(const char *address, mv_store *store)
{
    struct quota_usage used;
    if (quota_used(store, &used) != MV_OK) {
        return; /* the previous value, if any, stays: better than none */
    }
    int64_t now = quota_now_ms();
    pthread_mutex_lock(&quota_lock);
    struct quota_seen *e = quota_seen_find(address);
    if (e == NULL) {
        size_t b = quota_seen_bucket(address);
        if (quota_seen_count >= QUOTA_SEEN_MAX) {
            /* Full: the oldest entry of this bucket makes room (its user falls back to the
             * file-size estimate); an empty bucket means no room. */
            struct quota_seen **oldest = NULL;
            for (struct quota_seen **p = &quota_seen[b]; *p != NULL; p = &(*p)->next) {
                if (oldest == NULL || (*p)->at_ms < (*oldest)->at_ms) {
                    oldest = p;
                }
            }
            if (oldest != NULL) {
                struct quota_seen *gone = *oldest;
                *oldest = gone->next;
                free(gone);
                quota_seen_count--;
            }
        }
        size_t len = strlen(address) + 1;
        e = quota_seen_count < QUOTA_SEEN_MAX ? malloc(sizeof *e + len) : NULL;
        if (e != NULL) {
            memcpy(e->address, address, len);
            e->next = quota_seen[b];
            quota_seen[b] = e;
            quota_seen_count++;
        }
    }
    if (e != NULL) {
        e->usage = used;
        e->at_ms = now;
    }
    pthread_mutex_unlock(&quota_lock);
}

/* The .sealed files in queue_dir: their bytes and their count. 0, or -1 (unreadable, or
 * more than QUOTA_QUEUE_SCAN_MAX entries). A missing directory is an empty queue. */
static int quota_queue(const char *queue_dir, struct quota_usage *out)
{
    out->bytes = 0;
    out->messages = 0;
    DIR *d = opendir(queue_dir);
    if (d == NULL) {
        return errno == ENOENT ? 0 : -1;
    }
    struct dirent *de;
    size_t seen = 0, suffix = sizeof QUOTA_SEALED_SUFFIX - 1;
    int rc = 0;
    for (errno = 0; (de = readdir(d)) != NULL; errno = 0) {
        size_t len = strlen(de->d_name);
        struct stat st;
        if (++seen > QUOTA_QUEUE_SCAN_MAX) {
            rc = -1;
            break;
        }
        /* (1) a delivery's name ends in .sealed  (2) an unfinished one starts with tmp- */
        if (len <= suffix || strcmp(de->d_name + len - suffix, QUOTA_SEALED_SUFFIX) != 0 ||
            strncmp(de->d_name, "tmp-", 4) == 0) {
            continue;
        }
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            out->bytes += (uint64_t)st.st_size;
            out->messages++;
        }
    }
    if (rc == 0 && errno != 0) {
        rc = -1;
    }
    closedir(d);
    return rc;
}

int quota_sealed_exceeded(
    const struct config *cfg, const char *address, uint64_t add_bytes, char *why, size_t why_size)
{
    struct quota_limits limits = quota_limits_for(cfg, address);
    if (limits.storage_kib == 0 && limits.messages == 0) {
        return 0;
    }
    struct mv_store_options opts = config_store_options(cfg);
    struct mv_store_file file;
    /* The store may be open on another thread: the library keeps that safe (an open store's
     * header comes from its registry, and the file read of a closed one excludes a
     * concurrent open), so no lock of that connection is dropped here. */
    if (mv_store_file_inspect(address, &opts, &file) != MV_OK) {
        return 0; /* the delivery itself reports a missing or broken store */
    }
    char queue_dir[MV_PATH_MAX + 8];
    size_t n = strlen(file.db_path);
    if (n < 3 || strcmp(file.db_path + n - 3, ".db") != 0) {
        return 0; /* not the documented layout: nothing to count */
    }
    snprintf(queue_dir, sizeof queue_dir, "%.*s.queue", (int)(n - 3), file.db_path);
    struct quota_usage queued, used;
    if (quota_queue(queue_dir, &queued) != 0) {
        /* a temporary failure rather than a queue that grows unmeasured */
        snprintf(why, why_size, "the queue %s cannot be counted", queue_dir);
        return -1;
    }
    pthread_mutex_lock(&quota_lock);
    const struct quota_seen *seen = quota_seen_find(address);
    int known = seen != NULL;
    if (known) {
        used = seen->usage;
    }
    pthread_mutex_unlock(&quota_lock);
    if (!known) {
        used.bytes = file.file_bytes + file.wal_bytes;
        used.messages = 0;
    }
    used.bytes += queued.bytes;
    used.messages += queued.messages;
    int over = quota_check(&limits, &used, add_bytes, 1, known);
    snprintf(why, why_size, "%s %llu bytes + %llu queued, %s", known ? "last seen" : "store files",
             (unsigned long long)(used.bytes - queued.bytes), (unsigned long long)queued.bytes,
             known ? "messages checked" : "messages not checked");
    return over;
}
