/*
 * vfs_interior.c -- a main file's copies of the interior B-tree pages the prefetch walk
 * (vfs_prefetch.c) decrypted, so that the next walk goes to the leaves without reading them.
 *
 * WHY
 *   The walk reads each level of a tree from the file itself: SQLite's page cache, which
 *   holds the same pages, cannot be reached from the VFS. From a file the kernel has evicted
 *   that is a disk wait per interior level before the leaves can even be asked for (issue
 *   13, UID FETCH of 50 random whole messages with the files evicted: the root and one
 *   interior level of the bodies' table at 10,000 messages, two at 100,000), and from a
 *   cached file a read and a decryption of each page at every walk.
 *
 * WHAT IS KEPT
 *   Interior pages only, never a leaf (leaves hold mail), as decrypted, at most
 *   MV_INTERIOR_PAGES_MAX a file, first come first kept: the upper levels, which every walk
 *   reads, are in after the first walk; a page past the bound is read from the file each time
 *   as before. The buffer grows as pages come (a 10,000-message store's bodies table has ~40
 *   interior pages, a 100,000-message one ~350), and is wiped whenever it is dropped or moved.
 *   The file's connection uses it from one thread at a time, as it uses the file.
 *
 *   And for a few trees, the level their last walk found the leaves at: a walk that expects
 *   the leaves there asks for each leaf's window at once, instead of the page first and its
 *   window once the page read turned out to be a leaf (two calls a leaf, the first wasted).
 *
 * STILL A HINT
 *   The walk reads the database file, not the WAL, and the file changes only when a
 *   checkpoint writes to it, or it is truncated or vacuumed, by any connection or process.
 *   Each walk compares the file's size and modification time with those the kept pages were
 *   read under and drops them all if either moved. A change within the file system's
 *   timestamp granularity after a page was kept can leave a stale copy until the next
 *   change; like any page the walk reads, a stale one costs reads, never bytes (nothing the
 *   walk reads is handed to SQLite).
 */
#include "crypto/crypt.h"
#include "vfs/vfs.h"

#include <stdlib.h>
#include <string.h>

/* Pages kept at most a file (4 MiB at 4 KiB pages), and the hash's slots: a power of two,
 * twice the pages, so a probe always ends at an empty slot. */
#define MV_INTERIOR_PAGES_MAX 1024u
#define MV_INTERIOR_SLOTS     2048u
/* Trees whose leaf level is remembered (a store's walks use three: bodies, body_parts,
 * attachments). */
#define MV_INTERIOR_ROOTS 8

struct mv_interior {
    uint32_t page_size;
    off_t size;                            /* the file's, when the pages were read */
    struct timespec mtime;                 /* ditto */
    uint32_t n, cap;                       /* pages kept; pages the buffer has room for */
    uint8_t *pages;                        /* n pages, in the order kept */
    uint32_t slot_pgno[MV_INTERIOR_SLOTS]; /* 0: an empty slot */
    uint32_t slot_at[MV_INTERIOR_SLOTS];   /* the page's index in pages */
    uint32_t root[MV_INTERIOR_ROOTS];      /* trees walked to their leaves (0: none) ... */
    int leaf_level[MV_INTERIOR_ROOTS];     /* ... and the level the leaves were at */
};

static uint32_t mv_interior_slot(uint32_t pgno)
{
    return (pgno * 2654435761u) & (MV_INTERIOR_SLOTS - 1); /* Knuth's multiplicative hash */
}

static void mv_interior_drop(struct mv_interior *c)
{
    if (c->pages != NULL) {
        crypt_wipe(c->pages, (size_t)c->n * c->page_size);
        free(c->pages);
    }
    c->pages = NULL;
    c->n = c->cap = 0;
    memset(c->slot_pgno, 0, sizeof c->slot_pgno);
    memset(c->root, 0, sizeof c->root);
}

struct mv_interior *mv_interior_for(struct mv_file *f, const struct stat *st, uint32_t page_size)
{
    struct mv_interior *c = f->interior;
    if (c == NULL) {
        c = calloc(1, sizeof *c);
        if (c == NULL) {
            return NULL;
        }
        f->interior = c;
    } else if (c->page_size == page_size && c->size == st->st_size &&
               c->mtime.tv_sec == st->st_mtim.tv_sec && c->mtime.tv_nsec == st->st_mtim.tv_nsec) {
        return c;
    }
    mv_interior_drop(c);
    c->page_size = page_size;
    c->size = st->st_size;
    c->mtime = st->st_mtim;
    return c;
}

const uint8_t *mv_interior_find(const struct mv_interior *c, uint32_t pgno)
{
    if (c == NULL || c->n == 0 || pgno == 0) {
        return NULL;
    }
    for (uint32_t s = mv_interior_slot(pgno);; s = (s + 1) & (MV_INTERIOR_SLOTS - 1)) {
        if (c->slot_pgno[s] == 0) {
            return NULL;
        }
        if (c->slot_pgno[s] == pgno) {
            return c->pages + (size_t)c->slot_at[s] * c->page_size;
        }
    }
}

void mv_interior_keep(struct mv_interior *c, uint32_t pgno, const uint8_t *page)
{
    if (c == NULL || pgno == 0 || c->n >= MV_INTERIOR_PAGES_MAX ||
        mv_interior_find(c, pgno) != NULL) {
        return;
    }
    if (c->n == c->cap) {
        uint32_t cap = c->cap == 0 ? 16 : 2 * c->cap;
        cap = cap < MV_INTERIOR_PAGES_MAX ? cap : MV_INTERIOR_PAGES_MAX;
        uint8_t *grown = malloc((size_t)cap * c->page_size);
        if (grown == NULL) {
            return; /* read from the file next time, as without it */
        }
        if (c->pages != NULL) { /* moved, not realloc'd: the old copy is wiped */
            memcpy(grown, c->pages, (size_t)c->n * c->page_size);
            crypt_wipe(c->pages, (size_t)c->n * c->page_size);
            free(c->pages);
        }
        c->pages = grown;
        c->cap = cap;
    }
    memcpy(c->pages + (size_t)c->n * c->page_size, page, c->page_size);
    uint32_t s = mv_interior_slot(pgno);
    while (c->slot_pgno[s] != 0) {
        s = (s + 1) & (MV_INTERIOR_SLOTS - 1);
    }
    c->slot_pgno[s] = pgno;
    c->slot_at[s] = c->n++;
}

int mv_interior_leaf_level(const struct mv_interior *c, uint32_t root)
{
    for (size_t i = 0; c != NULL && root != 0 && i < MV_INTERIOR_ROOTS; i++) {
        if (c->root[i] == root) {
            return c->leaf_level[i];
        }
    }
    return -1;
}

void mv_interior_note_leaf_level(struct mv_interior *c, uint32_t root, int level)
{
    if (c == NULL || root == 0) {
        return;
    }
    size_t at = MV_INTERIOR_ROOTS - 1; /* full: the last one gives way */
    for (size_t i = 0; i < MV_INTERIOR_ROOTS; i++) {
        if (c->root[i] == root || c->root[i] == 0) {
            at = i;
            break;
        }
    }
    c->root[at] = root;
    c->leaf_level[at] = level;
}

void mv_interior_free(struct mv_file *f)
{
    if (f->interior != NULL) {
        mv_interior_drop(f->interior);
        free(f->interior);
        f->interior = NULL;
    }
}
