/*
 * store_files.c -- which store database files this process has open through SQLite, so that
 * keyless readers never close a descriptor of one (store_files.h says why and how to use
 * it).
 *
 * IMPLEMENTATION NOTES
 *   One table behind one mutex, for the whole process: locks are per process, so the
 *   registry has to be too (STYLE.md allows no other global state; this is the exception,
 *   and it needs no initialisation beyond its static initialisers). Rows are of two kinds,
 *   keyed by the store file's (st_dev, st_ino):
 *     OPEN    a store handle's connection (owner = the handle), registered BEFORE SQLite
 *             opens the file and removed AFTER sqlite3_close(), with the file's first 24
 *             bytes as they were when no connection of this process had it open (or, for a
 *             store being created, as its connection made them);
 *     PARKED  a descriptor of the file (or of its -shm) that keyless code is done with while
 *             an OPEN row exists: closing it would drop the connection's locks, so it stays
 *             open, its own OFD locks released, until the file's last OPEN row goes, as
 *             SQLite's unix VFS defers such closes itself.
 *   Every open(), pread() and close() decision of a keyless reader happens with the mutex
 *   held, so no registration (and so no SQLite open by the store layer) can start in
 *   between; a descriptor opened earlier is closed only if no OPEN row exists at its close.
 *   The table is small (one row per open store) and scanned linearly.
 *
 * LIMITATIONS
 *   A file is identified by the inode its path names when it is registered; the store's
 *   lock (shared for every handle, exclusive for passwd and restore) keeps that path from
 *   being renamed over while a handle is open, and mv_store_init creates the file itself.
 */
#include "store/store_files.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum store_files_kind { STORE_FILES_OPEN, STORE_FILES_PARKED };

struct store_files_row {
    enum store_files_kind kind;
    const void *owner; /* OPEN: the store handle */
    dev_t dev;
    ino_t ino;
    int fd; /* PARKED: the descriptor kept open */
    uint8_t header[STORE_FILES_HEADER_BYTES];
    size_t header_len;
};

static pthread_mutex_t store_files_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct store_files_row *store_files_rows;
static size_t store_files_count;
static size_t store_files_cap;

/* Index of the first row of kind for (dev, ino), or store_files_count. Mutex held. */
static size_t store_files_find(enum store_files_kind kind, dev_t dev, ino_t ino)
{
    size_t i = 0;
    while (i < store_files_count &&
           (store_files_rows[i].kind != kind || store_files_rows[i].dev != dev ||
            store_files_rows[i].ino != ino)) {
        i++;
    }
    return i;
}

/* Appends a copy of row. MV_OK, MV_ENOMEM or MV_ELIMIT. Mutex held. */
static int store_files_add(const struct store_files_row *row)
{
    if (store_files_count == store_files_cap) {
        size_t next = store_files_cap != 0 ? store_files_cap * 2 : 16;
        if (next > STORE_FILES_MAX) {
            return MV_ELIMIT;
        }
        struct store_files_row *grown = realloc(store_files_rows, next * sizeof *grown);
        if (grown == NULL) {
            return MV_ENOMEM;
        }
        store_files_rows = grown;
        store_files_cap = next;
    }
    store_files_rows[store_files_count++] = *row;
    return MV_OK;
}

/* Removes row i (order does not matter). Mutex held. */
static void store_files_remove(size_t i)
{
    store_files_rows[i] = store_files_rows[--store_files_count];
    if (store_files_count == 0) {
        free(store_files_rows); /* a process that closed every store holds no memory here */
        store_files_rows = NULL;
        store_files_cap = 0;
    }
}

static void store_files_park(int fd, dev_t dev, ino_t ino);

/* READ-AHEAD (issue 13): bytes at each end of the file whose reading an open starts. */
#define STORE_FILES_AHEAD (256 * 1024)

/* Asks the kernel to read the first and last STORE_FILES_AHEAD bytes of the store file into
 * its page cache, without waiting (posix_fadvise WILLNEED), before the open that registers it
 * runs the key derivation (~11 ms of CPU for the default KDF) and only then reads pages one
 * at a time: a cold first LOGIN + SELECT read ~10 pages from the disk that way (~1.3 ms), the
 * schema's (created first: the file's start) and the saved views' and last changes' (with
 * auto_vacuum=FULL no page is free, so a commit's new pages go at the file's end). 512 KiB at
 * most, once per open of a file no connection of this process has; a hint only. */
static void store_files_read_ahead(int fd, off_t size)
{
    off_t head = size < STORE_FILES_AHEAD ? size : STORE_FILES_AHEAD;
    (void)posix_fadvise(fd, 0, head, POSIX_FADV_WILLNEED);
    if (size > head) {
        off_t tail = size - head < STORE_FILES_AHEAD ? size - head : STORE_FILES_AHEAD;
        (void)posix_fadvise(fd, size - tail, tail, POSIX_FADV_WILLNEED);
    }
}

/* Reads up to size header bytes of path, which no OPEN row had under want's inode. If the
 * descriptor turns out to be of an OPEN file (path renamed since the stat), the bytes come
 * from that row and the descriptor is parked instead of closed. read_ahead: an open follows
 * (store_files_read_ahead). Mutex held. */
static int store_files_peek(const char *path,
                            const struct stat *want,
                            uint8_t *buf,
                            size_t size,
                            size_t *got,
                            int read_ahead)
{
    *got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        return errno == ENOENT ? MV_ENOTFOUND : MV_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_dev != want->st_dev || st.st_ino != want->st_ino)) {
        size_t i = store_files_find(STORE_FILES_OPEN, st.st_dev, st.st_ino);
        if (i < store_files_count) {
            *got = size < store_files_rows[i].header_len ? size : store_files_rows[i].header_len;
            memcpy(buf, store_files_rows[i].header, *got);
            store_files_park(fd, st.st_dev, st.st_ino);
            return MV_OK;
        }
    }
    ssize_t n = pread(fd, buf, size, 0);
    int saved = errno;
    if (read_ahead && n >= 0) {
        store_files_read_ahead(fd, want->st_size);
    }
    close(fd); /* no connection of this process has this file: the mutex is held */
    errno = saved;
    if (n < 0) {
        return MV_EIO;
    }
    *got = (size_t)n;
    return MV_OK;
}

int store_files_register(const void *owner, const char *db_path)
{
    struct store_files_row row = {STORE_FILES_OPEN, owner, 0, 0, -1, {0}, 0};
    struct stat st;
    int rc = MV_OK;
    pthread_mutex_lock(&store_files_mutex);
    if (stat(db_path, &st) != 0) {
        rc = errno == ENOENT ? MV_ENOTFOUND : MV_EIO;
    }
    if (rc == MV_OK) {
        row.dev = st.st_dev;
        row.ino = st.st_ino;
        size_t i = store_files_find(STORE_FILES_OPEN, st.st_dev, st.st_ino);
        if (i < store_files_count) {
            memcpy(row.header, store_files_rows[i].header, sizeof row.header);
            row.header_len = store_files_rows[i].header_len;
        } else {
            rc = store_files_peek(db_path, &st, row.header, sizeof row.header, &row.header_len, 1);
        }
    }
    if (rc == MV_OK) {
        rc = store_files_add(&row);
    }
    pthread_mutex_unlock(&store_files_mutex);
    return rc;
}

/* Header bytes 16..23 as SQLite wrote them for db: page size (1 for 65536), file format 2
 * and 2 (WAL), the reserve bytes, the payload fractions 64/32/32. Bytes 0..15 stay zero:
 * not the plaintext magic, as on every encrypted file. */
static int store_files_header_build(sqlite3 *db, uint8_t header[STORE_FILES_HEADER_BYTES])
{
    struct mv_db_info info;
    if (mv_db_info(db, &info) != MV_OK || info.page_size < 512 || info.page_size > 65536) {
        return 0;
    }
    unsigned page_field = info.page_size == 65536 ? 1u : (unsigned)info.page_size;
    memset(header, 0, STORE_FILES_HEADER_BYTES);
    header[16] = (uint8_t)(page_field >> 8);
    header[17] = (uint8_t)(page_field & 0xffu);
    header[18] = 2;
    header[19] = 2;
    header[20] = (uint8_t)info.reserve_bytes;
    header[21] = 64;
    header[22] = 32;
    header[23] = 32;
    return 1;
}

void store_files_learn(const void *owner, sqlite3 *db)
{
    uint8_t header[STORE_FILES_HEADER_BYTES];
    if (!store_files_header_build(db, header)) {
        return; /* the row keeps what the file had: a reader sees what it would have read */
    }
    pthread_mutex_lock(&store_files_mutex);
    for (size_t i = 0; i < store_files_count; i++) {
        struct store_files_row *r = &store_files_rows[i];
        if (r->kind == STORE_FILES_OPEN && r->owner == owner &&
            r->header_len < STORE_FILES_HEADER_BYTES) {
            memcpy(r->header, header, sizeof header);
            r->header_len = sizeof header;
        }
    }
    pthread_mutex_unlock(&store_files_mutex);
}

void store_files_unregister(const void *owner)
{
    pthread_mutex_lock(&store_files_mutex);
    size_t i = 0;
    while (i < store_files_count &&
           (store_files_rows[i].kind != STORE_FILES_OPEN || store_files_rows[i].owner != owner)) {
        i++;
    }
    if (i < store_files_count) {
        dev_t dev = store_files_rows[i].dev;
        ino_t ino = store_files_rows[i].ino;
        store_files_remove(i);
        /* The file's last connection is closed: its locks are gone, so parked descriptors
         * can be closed now without dropping anything. */
        if (store_files_find(STORE_FILES_OPEN, dev, ino) == store_files_count) {
            size_t p;
            while ((p = store_files_find(STORE_FILES_PARKED, dev, ino)) < store_files_count) {
                close(store_files_rows[p].fd);
                store_files_remove(p);
            }
        }
    }
    pthread_mutex_unlock(&store_files_mutex);
}

int store_files_header_read(
    const char *path, const struct stat *st, uint8_t *buf, size_t size, size_t *got)
{
    int rc = MV_OK;
    size = size < STORE_FILES_HEADER_BYTES ? size : STORE_FILES_HEADER_BYTES;
    pthread_mutex_lock(&store_files_mutex);
    size_t i = store_files_find(STORE_FILES_OPEN, st->st_dev, st->st_ino);
    if (i < store_files_count) {
        *got = size < store_files_rows[i].header_len ? size : store_files_rows[i].header_len;
        memcpy(buf, store_files_rows[i].header, *got);
    } else {
        rc = store_files_peek(path, st, buf, size, got, 0);
    }
    pthread_mutex_unlock(&store_files_mutex);
    return rc;
}

/* Parks fd under the store file (dev, ino), its OFD locks released first: a parked
 * descriptor must hold nothing a connection could wait for. Mutex held. */
static void store_files_park(int fd, dev_t dev, ino_t ino)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_UNLCK;
    fl.l_whence = SEEK_SET;
    (void)fcntl(fd, F_OFD_SETLK, &fl); /* only this description's locks, never SQLite's */
    struct store_files_row parked = {STORE_FILES_PARKED, NULL, dev, ino, fd, {0}, 0};
    /* If even parking fails, the descriptor leaks: better than dropping the locks. */
    (void)store_files_add(&parked);
}

void store_files_close(int fd, dev_t db_dev, ino_t db_ino)
{
    if (fd < 0) {
        return;
    }
    pthread_mutex_lock(&store_files_mutex);
    if (store_files_find(STORE_FILES_OPEN, db_dev, db_ino) < store_files_count) {
        store_files_park(fd, db_dev, db_ino);
    } else {
        close(fd); /* no connection of this process has the file: the mutex is held */
    }
    pthread_mutex_unlock(&store_files_mutex);
}
