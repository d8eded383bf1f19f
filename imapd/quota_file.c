/*
 * quota_file.c -- the per-user limits of the quota (RFC 9208; the usage and the checks are in
 * quota.c): the quota_file, read into a table at start-up, looked at again while the server
 * runs and re-read by SIGHUP. Each user's limits are the entry for the address in quota_file
 * if there is one, else the defaults quota_kib and quota_messages; 0 is unlimited. A file of
 * its own because reading, validating and reloading the file has nothing to do with counting
 * what a store holds.
 *
 * USAGE
 *   quota_file_load(path, err, size)    at start-up (config.c, key quota_file): 0 or -1
 *   quota_file_reload()                 SIGHUP (main.c): re-read now; 0 or -1 (logged)
 *   quota_limits_for(cfg, address)      the user's limits (re-reads a changed quota_file)
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
 *   - The table is sorted by address once, when it is read, so a lookup is a binary search
 *     and two entries for one address are found next to each other.
 *   - quota_file_lock guards the table, the path, the identity of the version read last and
 *     the re-read in progress; the file is stat'ed and parsed outside it, so lookups go on
 *     while a large file is read, and one thread re-reads at a time (quota_reloading). The
 *     lock is taken alone: nothing here calls out while holding it, and quota.c's lock of
 *     the seen-usage cache is never held with it.
 *
 * LIMITATIONS
 *   - An edit is seen at the first lookup QUOTA_FILE_CHECK_MS after the last look, not at
 *     once (SIGHUP for at once); an edit that keeps the inode, the size and the mtime (to
 *     the nanosecond) is seen only by SIGHUP.
 *   - The file is read whole into memory: QUOTA_FILE_BYTES_MAX and QUOTA_FILE_ENTRIES_MAX
 *     bound it.
 */
#include "config.h"
#include "log.h"
#include "loop.h"
#include "mailvault.h"
#include "quota.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define QUOTA_FILE_BYTES_MAX   ((off_t)16 << 20) /* a larger quota_file is refused */
#define QUOTA_FILE_ENTRIES_MAX 1000000
#define QUOTA_FILE_LINE_MAX    1024 /* bytes of one line, without its line break */
#define QUOTA_FILE_CHECK_MS    2000 /* how often the file's inode, size and mtime are looked at */

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

static pthread_mutex_t quota_file_lock = PTHREAD_MUTEX_INITIALIZER;
static char quota_path[MV_PATH_MAX];    /* "" : no quota_file */
static struct quota_table quota_table;  /* the file's entries */
static struct quota_file_sig quota_sig; /* of the version read (or refused) last */
static int64_t quota_checked_ms;
static int quota_reloading; /* one thread re-reads the file at a time */

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
    pthread_mutex_lock(&quota_file_lock);
    quota_table_free(&quota_table);
    quota_table = t;
    quota_sig = sig;
    memcpy(quota_path, path, strlen(path) + 1);
    quota_checked_ms = loop_now_ms();
    pthread_mutex_unlock(&quota_file_lock);
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
    int64_t now = loop_now_ms();
    pthread_mutex_lock(&quota_file_lock);
    while (force && quota_reloading) {
        pthread_mutex_unlock(&quota_file_lock);
        nanosleep(&(struct timespec){0, 1000000}, NULL); /* a parse is bounded: 16 MiB */
        pthread_mutex_lock(&quota_file_lock);
    }
    int due = quota_path[0] != '\0' && !quota_reloading &&
              (force || now - quota_checked_ms >= QUOTA_FILE_CHECK_MS);
    if (due) {
        quota_reloading = 1;
        quota_checked_ms = now;
        memcpy(path, quota_path, sizeof path);
        old = quota_sig;
    }
    pthread_mutex_unlock(&quota_file_lock);
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
        log_error("quota file %s: %s; keeping the previous table", path, strerror(stat_errno));
    } else if (changed) {
        ok = quota_file_parse(path, &t, &sig, err, sizeof err) == 0;
        if (ok) {
            log_event("quota file %s: reloaded, %zu entries", path, t.count);
        } else {
            log_error("quota file %s; keeping the previous table", err);
        }
    }
    pthread_mutex_lock(&quota_file_lock);
    if (ok) {
        quota_table_free(&quota_table);
        quota_table = t;
    }
    quota_sig = sig; /* a bad or missing version is reported once, not at every look */
    quota_reloading = 0;
    pthread_mutex_unlock(&quota_file_lock);
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
    pthread_mutex_lock(&quota_file_lock);
    struct quota_entry key = {(char *)(uintptr_t)address, {0, 0}, 0};
    const struct quota_entry *e = quota_table.count == 0
                                      ? NULL
                                      : bsearch(&key, quota_table.entries, quota_table.count,
                                                sizeof *quota_table.entries, quota_entry_cmp);
    if (e != NULL) {
        limits = e->limits;
    }
    pthread_mutex_unlock(&quota_file_lock);
    return limits;
}
