/*
 * vfs_prefetch.c -- the leaves of many rows of one table asked of the disk at once, before
 * SQLite reads them one by one (issue 13: a FETCH of 50 random whole messages from a cold
 * file waited for ~55 random reads in a row, ~0.15-0.25 ms each on this machine's disk).
 *
 * WHAT IT DOES
 *   Given a table B-tree's root page and the rowids about to be read, it walks the tree's
 *   interior pages itself, one level at a time for all the rowids together: at each level
 *   the distinct pages needed are first announced to the kernel (posix_fadvise WILLNEED,
 *   which queues their reads without waiting), then read, authenticated and decrypted here
 *   one after the other, so a level costs about one disk wait instead of one per row. The
 *   interior pages read are kept, decrypted, for the next walks on the connection while the
 *   file is unchanged (vfs_interior.c): a walk that finds its levels there goes to the
 *   leaves without a read (from an evicted file, without a disk wait per level). At
 *   the level whose pages are leaves (known from the first of them read), each leaf's
 *   window (the leaf and near pages on each side, as the near hint of vfs_hint.h reads it)
 *   is announced and not read: SQLite's own reads of the rows that follow then find the
 *   pages in the page cache, or wait for a read already under way.
 *
 *   If that leaf level's first page was not in the page cache before the level was asked
 *   for (preadv2 RWF_NOWAIT), the file is cold: the leaves are then read (on their way
 *   already) and each row's overflow chain that does not lie in its leaf's window is asked
 *   for too (mv_prefetch_chains). From a cached file that step would decrypt every leaf
 *   for nothing, and is skipped. The same walk runs over an index whose entries start with
 *   an integer column (the store's body_parts), and can read its leaves for another column
 *   of the matching entries (mv_prefetch_collect: the attachment ids of bodies).
 *
 * WHY BY HAND
 *   SQLite says nothing of where a row lies (no page number for a rowid; this build of
 *   libsqlite3 has no sqlite_dbpage), and its pager reads one page at a time. The B-tree
 *   page format is simple and fixed (https://www.sqlite.org/fileformat2.html, 1.6 and 2.1):
 *   an interior page's 12-byte header (type 0x05 table / 0x02 index, cell count at 3,
 *   right-most child at 8), then the cell pointers; each cell a 4-byte left child and the
 *   key (a table's varint rowid, an index's record), the child holding the keys <= it.
 *   Leaves (0x0d / 0x0a) have an 8-byte header; a table leaf's cell is the payload's size,
 *   the rowid, the payload's local part and the chain's first page.
 *
 * A HINT, NEVER DATA
 *   The pages walked are read from the database file, not the WAL: a page changed since the
 *   last checkpoint may send a row to a stale leaf. Every error (an unreadable or
 *   unauthenticated page, a page that is not what the walk expects, a cell out of bounds)
 *   drops the rows concerned silently. Nothing read here is handed to SQLite, so a wrong
 *   walk costs reads, never bytes. The pages decrypted here are wiped.
 *
 * THE FILE DESCRIPTOR
 *   posix_fadvise needs the descriptor of the lower (unix) VFS's file, which SQLite does not
 *   expose. A descriptor of our own cannot be used: closing it would drop the process's
 *   POSIX locks on the file, SQLite's included. The unix VFS's file starts with its methods,
 *   its VFS, its inode record and then the descriptor (a layout unchanged since 2010); the
 *   descriptor read there is used only if fstat() says it is the file f names, so a layout
 *   that ever changed turns the prefetch off, nothing worse.
 */
#include "vfs/vfs.h"
#include "vfs/vfs_hint.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* Levels walked at most (a 4 KiB-page table of 2^40 rows has fewer than 8). */
#define MV_PREFETCH_DEPTH_MAX 32

/* The leading fields of the unix VFS's sqlite3_file (os_unix.c, struct unixFile). */
struct mv_unix_file_head {
    const sqlite3_io_methods *methods;
    sqlite3_vfs *vfs;
    void *inode;
    int h;
};

/* The lower file's descriptor if it can be trusted to be f's file (by_fd: its fstat), else
 * -1. */
static int mv_prefetch_fd(const struct mv_file *f, struct stat *by_fd)
{
    const sqlite3_vfs *lower = mv_vfs_lower();
    if (lower == NULL || strncmp(lower->zName, "unix", 4) != 0 || f->name == NULL) {
        return -1;
    }
    int fd = ((const struct mv_unix_file_head *)(const void *)f->lower)->h;
    struct stat by_name;
    if (fd < 0 || fstat(fd, by_fd) != 0 || stat(f->name, &by_name) != 0 ||
        by_fd->st_dev != by_name.st_dev || by_fd->st_ino != by_name.st_ino) {
        return -1;
    }
    return fd;
}

static uint32_t mv_be16(const uint8_t *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t mv_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A SQLite varint (1-9 bytes, big-endian, 7 bits a byte but 8 in the ninth) at p, reading
 * no byte at or past end: its length with *out, or 0 if it runs past end. */
static size_t mv_varint(const uint8_t *p, const uint8_t *end, int64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 9; i++) {
        if (p + i >= end) {
            return 0;
        }
        if (i == 8) {
            *out = (int64_t)(v << 8 | p[i]);
            return 9;
        }
        v = v << 7 | (p[i] & 0x7f);
        if ((p[i] & 0x80) == 0) {
            *out = (int64_t)v;
            return i + 1;
        }
    }
    return 0;
}

/* The bytes of a payload of payload bytes kept on a page of usable bytes (fileformat2 1.6):
 * all of it up to max_local, else K = M + (P - M) % (U - 4) if K <= max_local, else M, with
 * M = (U - 12) * 32 / 255 - 23 (max_local: U - 35 on table leaves, (U - 12) * 64 / 255 - 23
 * in index pages). */
static uint64_t mv_local_bytes(uint64_t payload, uint32_t usable, uint64_t max_local)
{
    uint64_t min_local = (usable - 12) * 32 / 255 - 23;
    if (payload <= max_local) {
        return payload;
    }
    uint64_t local = min_local + (payload - min_local) % (usable - 4);
    return local <= max_local ? local : min_local;
}

/* Column column of the record at rec (its local bytes up to end) if it is an integer: 1 and
 * *out, else 0 (another type, or the record runs past end). Serial types (fileformat2 2.1):
 * 1-6 integers of 1, 2, 3, 4, 6, 8 bytes, 8 and 9 the constants 0 and 1. */
static int mv_record_int(const uint8_t *rec, const uint8_t *end, int column, int64_t *out)
{
    int64_t header = 0, type = 0;
    size_t len = mv_varint(rec, end, &header);
    if (len == 0 || header < (int64_t)len || header > end - rec) {
        return 0;
    }
    const uint8_t *types = rec + len, *types_end = rec + header, *value = types_end;
    static const uint8_t int_bytes[10] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0};
    for (int c = 0;; c++) {
        size_t tlen = types < types_end ? mv_varint(types, types_end, &type) : 0;
        if (tlen == 0 || type < 0) {
            return 0;
        }
        types += tlen;
        uint64_t bytes =
            type < 10 ? int_bytes[type] : ((uint64_t)type - 12 - (uint64_t)(type & 1)) / 2;
        if (type == 10 || type == 11 || (uint64_t)(end - value) < bytes) {
            return 0;
        }
        if (c < column) {
            value += bytes;
            continue;
        }
        if (type == 8 || type == 9) {
            *out = type - 8;
            return 1;
        }
        if (type < 1 || type > 6) {
            return 0;
        }
        uint64_t v = (value[0] & 0x80) != 0 ? UINT64_MAX : 0; /* big-endian, signed */
        for (uint64_t b = 0; b < bytes; b++) {
            v = v << 8 | value[b];
        }
        *out = (int64_t)v;
        return 1;
    }
}

/* The key of cell at of a page of a B-tree (index: the first column of an index cell's
 * record, which must be an integer; else a table interior cell's rowid), past the cell's
 * left child if interior: 1 and *key, or 0 if malformed. */
static int mv_cell_key(
    const uint8_t *page, uint32_t usable, uint32_t at, int index, int interior, int64_t *key)
{
    const uint8_t *end = page + usable;
    const uint8_t *cell = page + at + (interior ? 4 : 0);
    if (at >= usable || cell >= end) {
        return 0;
    }
    int64_t payload = 0; /* a table interior cell's first varint is its key, not a size */
    size_t len = mv_varint(cell, end, &payload);
    if (len == 0) {
        return 0;
    }
    if (!index && interior) {
        *key = payload;
        return 1;
    }
    if (!index) {
        return mv_varint(cell + len, end, key) != 0;
    }
    uint64_t local = mv_local_bytes((uint64_t)payload, usable, (usable - 12) * 64 / 255 - 23);
    const uint8_t *rec_end = cell + len + local < end ? cell + len + local : end;
    return mv_record_int(cell + len, rec_end, 0, key);
}

/* The first cell of a page (header at hdr, header_bytes long, its cell pointers after it;
 * interior: each cell starts with a child) whose key is >= rowid (keys ascend): its index,
 * *cells the page's count (the index is *cells if there is none), or -1 if malformed. */
static long mv_first_cell_from(const uint8_t *page,
                               const uint8_t *hdr,
                               uint32_t header_bytes,
                               uint32_t usable,
                               int index,
                               int64_t rowid,
                               uint32_t *cells)
{
    *cells = mv_be16(hdr + 3);
    const uint8_t *pointers = hdr + header_bytes;
    if (pointers + 2 * (size_t)*cells > page + usable) {
        return -1;
    }
    int interior = header_bytes == 12;
    uint32_t lo = 0, hi = *cells;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int64_t key = 0;
        if (!mv_cell_key(page, usable, mv_be16(pointers + 2 * (size_t)mid), index, interior,
                         &key)) {
            return -1;
        }
        if (key < rowid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return (long)lo;
}

/* The child of interior page hdr (a table's, or an index's whose first column is an
 * integer: index) that holds rowid (for an index, the first entry whose first column is
 * rowid): the left child of the first cell whose key is >= rowid, else the right-most
 * child; 0 if the page is malformed. */
static uint32_t mv_interior_child(
    const uint8_t *page, const uint8_t *hdr, uint32_t usable, int index, int64_t rowid)
{
    uint32_t cells = 0;
    long k = mv_first_cell_from(page, hdr, 12, usable, index, rowid, &cells);
    if (k < 0) {
        return 0;
    }
    if ((uint32_t)k == cells) {
        return mv_be32(hdr + 8);
    }
    uint32_t at = mv_be16(hdr + 12 + 2 * (size_t)k);
    return at + 4 <= usable ? mv_be32(page + at) : 0;
}

/* The overflow chain of rowid's cell on table leaf page (its header at hdr): 1 with its
 * first page and its length in pages, 0 if the row has none or is not on the page. */
static int mv_leaf_chain(const uint8_t *page,
                         const uint8_t *hdr,
                         uint32_t usable,
                         int64_t rowid,
                         uint32_t *first,
                         uint32_t *pages)
{
    uint32_t cells = 0;
    long k = mv_first_cell_from(page, hdr, 8, usable, 0, rowid, &cells);
    if (k < 0 || (uint32_t)k == cells) {
        return 0;
    }
    const uint8_t *end = page + usable;
    uint32_t at = mv_be16(hdr + 8 + 2 * (size_t)k);
    int64_t payload = 0, key = 0;
    size_t size_len = mv_varint(page + at, end, &payload); /* at < usable: the search read it */
    size_t key_len = size_len > 0 ? mv_varint(page + at + size_len, end, &key) : 0;
    if (key_len == 0 || key != rowid || payload < 0 || (uint64_t)payload <= usable - 35) {
        return 0; /* not on the page, or all of it on the page */
    }
    const uint8_t *body = page + at + size_len + key_len;
    uint64_t local = mv_local_bytes((uint64_t)payload, usable, usable - 35);
    if (local > (uint64_t)(end - body) || (uint64_t)(end - body) - local < 4) {
        return 0;
    }
    *first = mv_be32(body + local);
    uint64_t n = ((uint64_t)payload - local + usable - 5) / (usable - 4);
    *pages = n < UINT32_MAX ? (uint32_t)n : UINT32_MAX;
    return *first != 0;
}

/* Reads and decrypts page pgno of f into buf from the file itself (fd; not the held
 * windows, not the WAL): 0, or -1 if it cannot be read or does not authenticate. */
static int
mv_prefetch_read(struct mv_file *f, int fd, uint8_t *buf, uint32_t page_size, uint32_t pgno)
{
    if (pread(fd, buf, page_size, (off_t)(pgno - 1) * page_size) != (ssize_t)page_size) {
        return -1;
    }
    return mv_codec_decrypt(f->codec, pgno, buf, page_size) == SQLITE_OK ? 0 : -1;
}

static void mv_prefetch_advise(int fd, uint32_t first, uint32_t last, uint32_t page_size)
{
    (void)posix_fadvise(fd, (off_t)(first - 1) * page_size, (off_t)(last - first + 1) * page_size,
                        POSIX_FADV_WILLNEED);
}

/* Page pgno and window pages on each side of it, within the file's pages. */
static void mv_prefetch_advise_around(
    int fd, uint32_t pgno, uint32_t window, uint32_t pages, uint32_t page_size)
{
    uint32_t first = pgno > window ? pgno - window : 1;
    uint32_t last = pgno + window < pages ? pgno + window : pages;
    mv_prefetch_advise(fd, first, last, page_size);
}

static int mv_u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The distinct nonzero values of cur[0..n) into set (sorted): their count. */
static size_t mv_distinct(const uint32_t *cur, size_t n, uint32_t *set)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (cur[i] != 0) {
            set[count++] = cur[i];
        }
    }
    qsort(set, count, sizeof *set, mv_u32_cmp);
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        if (kept == 0 || set[kept - 1] != set[i]) {
            set[kept++] = set[i];
        }
    }
    return kept;
}

/* One level of the walk: every row at an interior page moves to its child (0: dropped).
 * Returns 1 if the level's pages are leaves (cur then names each row's leaf; 2 if the first
 * of them was not in the page cache before the level was asked for), 0 if the walk goes
 * on, -1 if it ends (nothing left, or the first page is unreadable). Interior pages come
 * from kept (an earlier walk's, vfs_interior.c) where it has them, without a read; those
 * read from the file are kept there. Each page is asked for with window pages on each side
 * (the leaves' windows, where the leaves are expected at this level; else 0). */
static int mv_prefetch_level(struct mv_file *f,
                             int fd,
                             uint8_t *page,
                             uint32_t page_size,
                             uint32_t usable,
                             uint32_t pages_in_file,
                             struct mv_interior *kept,
                             uint32_t window,
                             struct mv_fcntl_prefetch *p,
                             uint32_t *cur,
                             uint32_t *set)
{
    size_t n = p->n;
    size_t distinct = mv_distinct(cur, n, set);
    if (distinct == 0) {
        return -1;
    }
    /* Whether the level's first page is in the page cache, asked before the level is asked
     * for (after, it may be there already): for the leaves, whether the file is cold. A kept
     * page is an interior one: no leaf level to judge, and nothing to ask the disk for. */
    int cold = 0;
    if (mv_interior_find(kept, set[0]) == NULL) {
        struct iovec probe = {.iov_base = page, .iov_len = page_size};
        cold = preadv2(fd, &probe, 1, (off_t)(set[0] - 1) * page_size, RWF_NOWAIT) !=
               (ssize_t)page_size;
    }
    for (size_t k = 0; k < distinct; k++) {
        if (mv_interior_find(kept, set[k]) == NULL) {
            mv_prefetch_advise_around(fd, set[k], window, pages_in_file, page_size);
            p->advice_calls++;
        }
    }
    for (size_t k = 0; k < distinct; k++) {
        uint32_t pgno = set[k];
        const uint8_t *hdr = page + (pgno == 1 ? MV_DB_HEADER_BYTES : 0);
        const uint8_t *copy = mv_interior_find(kept, pgno);
        int ok;
        if (copy != NULL) {
            memcpy(page, copy, page_size);
            ok = 1;
            p->interior_kept++;
        } else {
            ok = mv_prefetch_read(f, fd, page, page_size, pgno) == 0;
        }
        if (ok && hdr[0] == (p->index ? 0x0a : 0x0d)) { /* a leaf: every page of the level is */
            return k > 0 ? -1 : cold ? 2 : 1;
        }
        ok = ok && hdr[0] == (p->index ? 0x02 : 0x05);
        if (ok && copy == NULL) {
            p->interior_read++;
            mv_interior_keep(kept, pgno, page);
        }
        for (size_t i = 0; i < n; i++) {
            if (cur[i] != pgno) {
                continue;
            }
            uint32_t child = ok ? mv_interior_child(page, hdr, usable, p->index, p->rowids[i]) : 0;
            cur[i] = child >= 1 && child <= pages_in_file ? child : 0;
        }
        if (!ok && k == 0) {
            return -1;
        }
    }
    return 0;
}

/* The chains of the rows at leaves set[0..distinct) (cur: each row's leaf) that do not lie
 * within near pages of their leaf, asked for: at most MV_PREFETCH_CHAIN_MAX bytes each (the
 * VFS reads a longer chain in windows of its own), MV_PREFETCH_CHAINS_MAX bytes in all (a
 * FETCH of many big messages asks for the rest on its next call, and the page cache is not
 * filled far ahead of the reads). Waits for the leaves (asked for already). Returns the
 * chains asked for. */
#define MV_PREFETCH_CHAIN_MAX  (2u * 1024u * 1024u)
#define MV_PREFETCH_CHAINS_MAX (32u * 1024u * 1024u)
static size_t mv_prefetch_chains(struct mv_file *f,
                                 int fd,
                                 uint8_t *page,
                                 uint32_t page_size,
                                 uint32_t usable,
                                 uint32_t pages_in_file,
                                 const struct mv_fcntl_prefetch *p,
                                 const uint32_t *cur,
                                 const uint32_t *set,
                                 size_t distinct)
{
    size_t advised = 0;
    uint32_t cap = MV_PREFETCH_CHAIN_MAX / page_size;
    uint64_t budget = MV_PREFETCH_CHAINS_MAX / page_size; /* pages */
    for (size_t k = 0; k < distinct && budget > 0; k++) {
        uint32_t leaf = set[k];
        if (mv_prefetch_read(f, fd, page, page_size, leaf) != 0 || page[0] != 0x0d) {
            continue;
        }
        for (size_t i = 0; i < p->n; i++) {
            uint32_t first = 0, pages = 0;
            if (cur[i] != leaf ||
                !mv_leaf_chain(page, page, usable, p->rowids[i], &first, &pages) ||
                first > pages_in_file) {
                continue;
            }
            uint32_t last = pages > cap ? first + cap - 1 : first + pages - 1;
            if (last > pages_in_file || last < first) {
                last = pages_in_file;
            }
            if (first + p->near >= leaf && last <= leaf + p->near) {
                continue; /* within the leaf's window, asked for with it */
            }
            if (last - first + 1 > budget) {
                return advised;
            }
            budget -= last - first + 1;
            mv_prefetch_advise(fd, first, last, page_size);
            advised++;
            if (p->chain_firsts != NULL) {
                p->chain_firsts[i] = first;
            }
        }
    }
    return advised;
}

static int mv_i64_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* For an index: reads its leaves set[0..distinct) (asked for already) and collects column
 * p->collect_column of every entry whose first column is one of p->rowids into
 * p->collected (p->collected_cap at most). Entries kept in interior cells are not looked
 * at (a hint). */
static void mv_prefetch_collect(struct mv_file *f,
                                int fd,
                                uint8_t *page,
                                uint32_t page_size,
                                uint32_t usable,
                                struct mv_fcntl_prefetch *p,
                                const uint32_t *set,
                                size_t distinct)
{
    int64_t *sorted = malloc(p->n * sizeof *sorted);
    if (sorted == NULL) {
        return;
    }
    memcpy(sorted, p->rowids, p->n * sizeof *sorted);
    qsort(sorted, p->n, sizeof *sorted, mv_i64_cmp);
    uint64_t max_local = (usable - 12) * 64 / 255 - 23;
    for (size_t k = 0; k < distinct && p->collected_n < p->collected_cap; k++) {
        if (mv_prefetch_read(f, fd, page, page_size, set[k]) != 0 || page[0] != 0x0a) {
            continue;
        }
        uint32_t cells = mv_be16(page + 3);
        if (8 + 2 * (size_t)cells > usable) {
            continue;
        }
        for (uint32_t c = 0; c < cells && p->collected_n < p->collected_cap; c++) {
            uint32_t at = mv_be16(page + 8 + 2 * (size_t)c);
            int64_t key = 0, payload = 0, value = 0;
            if (!mv_cell_key(page, usable, at, 1, 0, &key) ||
                bsearch(&key, sorted, p->n, sizeof *sorted, mv_i64_cmp) == NULL) {
                continue;
            }
            size_t len = mv_varint(page + at, page + usable, &payload);
            uint64_t local = mv_local_bytes((uint64_t)payload, usable, max_local);
            const uint8_t *rec = page + at + len;
            const uint8_t *rec_end =
                local < (uint64_t)(page + usable - rec) ? rec + local : page + usable;
            if (mv_record_int(rec, rec_end, p->collect_column, &value)) {
                p->collected[p->collected_n++] = value;
            }
        }
    }
    free(sorted);
}

/* p's outputs were reset by mv_db_prefetch, the one way here (an fcntl of this library). */
void mv_main_prefetch(struct mv_file *f, struct mv_fcntl_prefetch *p)
{
    struct mv_codec *c = f->codec;
    if (c->crypt == NULL || c->key_state != MV_KEY_OK || p->n == 0 || p->root < 2 ||
        p->n > MV_PREFETCH_ROWS_MAX || p->near > MV_PREFETCH_NEAR_MAX) {
        return;
    }
    uint32_t page_size = c->page_size;
    uint32_t reserve = crypt_reserve_bytes(crypt_ctx_cipher(c->crypt));
    sqlite3_int64 file_size = 0;
    struct stat st;
    int fd = mv_prefetch_fd(f, &st);
    if (fd < 0 || page_size < 512 || reserve >= page_size - 480 ||
        f->lower->pMethods->xFileSize(f->lower, &file_size) != SQLITE_OK) {
        return;
    }
    uint32_t pages_in_file = (uint32_t)(file_size / page_size);
    if (p->root > pages_in_file) {
        return;
    }
    struct mv_interior *kept = mv_interior_for(f, &st, page_size); /* NULL: none kept */
    uint8_t *page = malloc(page_size);
    uint32_t *cur = malloc(p->n * sizeof *cur);
    uint32_t *set = malloc(p->n * sizeof *set);
    if (page != NULL && cur != NULL && set != NULL) {
        for (size_t i = 0; i < p->n; i++) {
            cur[i] = p->root;
        }
        int leaves = 0, depth = 0;
        int expect = mv_interior_leaf_level(kept, p->root); /* -1: not known */
        for (; depth < MV_PREFETCH_DEPTH_MAX && leaves == 0; depth++) {
            leaves = mv_prefetch_level(f, fd, page, page_size, page_size - reserve, pages_in_file,
                                       kept, depth == expect ? p->near : 0, p, cur, set);
        }
        if (leaves >= 1) {
            size_t distinct = mv_distinct(cur, p->n, set);
            int level = depth - 1;
            mv_interior_note_leaf_level(kept, p->root, level);
            for (size_t k = 0; k < distinct && level != expect; k++) {
                mv_prefetch_advise_around(fd, set[k], p->near, pages_in_file, page_size);
                p->advice_calls++;
            }
            p->advised = distinct;
            /* The chains too, but only where the leaves were not in the page cache (the
             * first was not, before the level was asked for): reading every leaf here costs
             * a decryption each, for nothing when the pages are there already. */
            p->cold = leaves == 2;
            f->run.cold = p->cold; /* the reads that follow: COLD WINDOWS (vfs_read_ahead.c) */
            f->run.cold_fd = fd;
            if (p->index && p->collected != NULL) {
                mv_prefetch_collect(f, fd, page, page_size, page_size - reserve, p, set, distinct);
            } else if (!p->index && (leaves == 2 || p->always_chains)) {
                p->chains = mv_prefetch_chains(f, fd, page, page_size, page_size - reserve,
                                               pages_in_file, p, cur, set, distinct);
                p->advice_calls += p->chains; /* one call a chain */
            }
            if (p->leaves != NULL) {
                memcpy(p->leaves, cur, p->n * sizeof *cur);
            }
        }
    }
    if (page != NULL) {
        crypt_wipe(page, page_size); /* the last page decrypted: a leaf holds mail's bytes */
    }
    free(page);
    free(cur);
    free(set);
}

size_t mv_db_prefetch(sqlite3 *db, struct mv_fcntl_prefetch *p)
{
    if (db == NULL || p == NULL || p->rowids == NULL) {
        return 0;
    }
    /* The outputs say "nothing" before the VFS is asked: a connection on another VFS
     * answers the fcntl with SQLITE_NOTFOUND and never sees p. */
    p->advised = 0;
    p->chains = 0;
    p->cold = 0;
    p->interior_read = 0;
    p->interior_kept = 0;
    p->advice_calls = 0;
    p->collected_n = 0;
    if (p->leaves != NULL) {
        memset(p->leaves, 0, p->n * sizeof *p->leaves);
    }
    if (p->chain_firsts != NULL) {
        memset(p->chain_firsts, 0, p->n * sizeof *p->chain_firsts);
    }
    if (sqlite3_file_control(db, "main", MV_FCNTL_PREFETCH, p) != SQLITE_OK) {
        return 0;
    }
    return p->advised;
}
