/*
 * store_tune.c -- mv_server_tune(): process-wide SQLite settings for a program that serves
 * many stores from several threads (mailvaultd, the benchmarks).
 *
 * Debian's SQLite is built with SQLITE_OMIT_LOOKASIDE, so every row, cursor and statement
 * step allocates through the system malloc, and with memory statistics on (the default)
 * each of those allocations and frees takes SQLite's global memory mutex: all the server's
 * workers queue on one lock for what is thread-local work. Turning the statistics off
 * removes that lock; the only loss is sqlite3_memory_used()/sqlite3_memory_highwater(),
 * which then report 0 (mailvault reads neither). sqlite3_config() is only allowed before
 * SQLite initialises, which is why this is a call of its own for the program's start.
 *
 * It also gets the MIME parser ready on the calling thread (store_parse_init), before the
 * program starts the threads that parse mail: see parse_init_once() for why.
 *
 * And the page cache does not let the pages of large BLOBs push out everything else.
 * SQLite (3.40 as Debian builds it) reads a BLOB's overflow pages through the page cache, so
 * reading one attachment of 1 MiB pushed 256 pages through a reader's cache of 2 MiB and
 * evicted half of what it held: the interior and leaf pages of the tables every next
 * message is looked up in, each then read and decrypted again (issue 13: a FETCH of 50
 * random whole messages, ~2.5 such attachments, found the cache all but emptied every time;
 * a cache of 16 MiB cut the command's CPU to 0.83x, at eight times the memory). SQLite's own
 * page cache stays; each cache is wrapped (struct tune_cache) so that of a run of overflow
 * pages let go of one after the other (a BLOB read along its chain) the first
 * TUNE_RUN_KEPT stay cached as before and the rest leave the cache as soon as they are let
 * go of (tune_pcache_unpin). A message's header, read from the start of its bytes, and
 * small bodies keep their pages; the bulk of a large one is read from the file again when
 * it is read again, as it was anyway once the next large BLOB went through.
 *
 * And interior B-tree pages stay while leaves come and go. SQLite's cache is one LRU list,
 * so at 100,000 messages the 120 interior pages of bodies_data, each used by about one
 * message in 240, were pushed out by the ~500 leaves and data pages a FETCH of 50 random
 * whole messages reads, and read and decrypted again (issue 13: ~0.8 of ~11.9 cache misses a
 * message; docs/BENCHMARKS.md, "Whole messages, seventh pass"). When SQLite lets go of an
 * interior page, the wrapper keeps it pinned in SQLite's cache (struct tune_cache.held, at
 * most half the cache, oldest out first) instead of letting go of it; SQLite, which no
 * longer holds it, sees it as any unpinned page: the next fetch of its number finds it, and
 * the wrapper then lets the page be SQLite's again (tune_fetch). Every held page is let go
 * of before a truncate (which is how SQLite drops its cache when the file changed under a
 * reader, or rolls back) and a shrink, so neither ever meets a pinned page it should drop.
 * A held page is pinned for pcache1, which refuses a new page once 90% of the cache is
 * pinned: when it does, held pages are let go of first (tune_fetch), so a write transaction
 * spills dirty pages to the WAL no sooner than with SQLite's own cache.
 *
 * And statement journals stay in memory up to TUNE_STMT_JOURNAL_SPILL. A statement that may
 * fail halfway inside a longer transaction (an INSERT into `messages`: its trigger and nine
 * indexes) copies each page it changes that the transaction had already changed into a
 * sub-journal, which SQLite keeps in memory up to 64 KiB and then moves to a temp file for
 * the rest of the transaction: here an encrypted one (vfs_temp.c), each page encrypted,
 * written, read back and decrypted per statement. One message's INSERT touches a dozen or
 * more such pages, so one of them now and then crossed 64 KiB, and every later INSERT of
 * that drain step went through the file (issue 13: 13% of the drain's writer thread). SQLite
 * allocates the in-memory journal as one block of this size, only while a statement writes, one per
 * connection at a time; larger ones (a STORE over a whole big mailbox) still go to the
 * encrypted temp file, so memory stays bounded.
 */
#include "store/store.h"
#include "store/store_parse.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define TUNE_RUN_KEPT 4   /* overflow pages of a run that stay cached */
#define TUNE_HELD_MAX 256 /* interior pages held, at most (and at most half the cache) */
/* Bytes of a statement journal kept in memory (SQLite's default: 64 KiB). Below 128 KiB
 * because SQLite writes the in-memory journal to its file in one write when it spills, and
 * its unix VFS (3.40) cuts any single write to 17 bits of length: a 256 KiB journal then
 * failed with SQLITE_FULL on a plain SQLite file (mailvault's own temp files take any
 * length, but a server may open plain files too). */
#define TUNE_STMT_JOURNAL_SPILL (128 * 1024 - 1)

static sqlite3_pcache_methods2 tune_inner; /* SQLite's own page cache */
static int tune_wrapped;

/* The held pages, oldest first, as a list through nodes of a fixed array; each held page
 * names its node in the bytes the wrapper asks pcache1 for after SQLite's own extra bytes
 * (tune_slot), so finding a page among them is one look, not a walk over up to 256 (1.6% of
 * the instructions of a loop of whole-message fetches at 100,000 messages went to that walk:
 * docs/BENCHMARKS.md). */
#define TUNE_NONE 0xffffu
/* The slot takes 2 bytes; pcache1 lays pages out one after another in a block, so the extra
 * bytes stay a multiple of 8 or every other page's header would be misaligned. */
#define TUNE_SLOT_BYTES 8
struct tune_node {
    sqlite3_pcache_page *page; /* NULL while the node is free */
    uint16_t older, newer;     /* TUNE_NONE at either end; a free node's newer: the next free */
};

struct tune_cache {
    sqlite3_pcache *inner;
    unsigned extra_size; /* SQLite's extra bytes a page; the wrapper's slot follows them */
    unsigned run;        /* overflow pages let go of in a row */
    int purgeable;
    unsigned held_cap; /* 0 for a cache that is not purgeable (SQLite's temporary files) */
    unsigned held_count;
    uint16_t oldest, newest, free_first;
    struct tune_node held[TUNE_HELD_MAX]; /* pinned in inner, not SQLite's */
};

static struct tune_cache *tune_of(sqlite3_pcache *p)
{
    return (struct tune_cache *)p;
}

/* An interior B-tree page (index 2, table 5) by its first byte; page 1 begins with the
 * file's header and is never one. A pointer-map page (a store is auto_vacuum) whose first
 * entry is a free page (2) or a B-tree page (5), and an overflow or freelist page of a file
 * past 2^24 pages (64 GiB), begin so as well: they are then held like one, which costs room,
 * never a wrong byte (a held page is SQLite's own copy of the file). */
static int tune_interior(const sqlite3_pcache_page *page)
{
    const unsigned char *data = page->pBuf;
    return data[0] == 2 || data[0] == 5;
}

/* The node number in the wrapper's bytes of page. pcache1 clears none of them for a new
 * page, so they may hold anything: a number counts only if that node holds this page. */
static unsigned tune_slot(const struct tune_cache *t, const sqlite3_pcache_page *page)
{
    uint16_t slot;
    memcpy(&slot, (const unsigned char *)page->pExtra + t->extra_size, sizeof slot);
    return slot;
}

/* The node that holds page, or TUNE_NONE. */
static unsigned tune_held_find(const struct tune_cache *t, const sqlite3_pcache_page *page)
{
    unsigned i = tune_slot(t, page);
    return i < TUNE_HELD_MAX && t->held[i].page == page ? i : TUNE_NONE;
}

static void tune_held_add(struct tune_cache *t, sqlite3_pcache_page *page)
{
    assert(t->held_count < TUNE_HELD_MAX && t->free_first != TUNE_NONE);
    uint16_t i = t->free_first;
    struct tune_node *n = &t->held[i];
    t->free_first = n->newer;
    n->page = page;
    n->older = t->newest;
    n->newer = TUNE_NONE;
    if (t->newest != TUNE_NONE) {
        t->held[t->newest].newer = i;
    } else {
        t->oldest = i;
    }
    t->newest = i;
    memcpy((unsigned char *)page->pExtra + t->extra_size, &i, sizeof i);
    t->held_count++;
}

static void tune_held_remove(struct tune_cache *t, unsigned i)
{
    struct tune_node *n = &t->held[i];
    if (n->older != TUNE_NONE) {
        t->held[n->older].newer = n->newer;
    } else {
        t->oldest = n->newer;
    }
    if (n->newer != TUNE_NONE) {
        t->held[n->newer].older = n->older;
    } else {
        t->newest = n->older;
    }
    n->page = NULL;
    n->newer = t->free_first;
    t->free_first = (uint16_t)i;
    t->held_count--;
}

/* Lets go of the oldest held pages until at most keep are held. */
static void tune_held_trim(struct tune_cache *t, unsigned keep)
{
    while (t->held_count > keep) {
        unsigned i = t->oldest;
        tune_inner.xUnpin(t->inner, t->held[i].page, 0);
        tune_held_remove(t, i);
    }
}

static sqlite3_pcache *tune_create(int page_size, int extra_size, int purgeable)
{
    struct tune_cache *t = calloc(1, sizeof *t);
    if (t == NULL) {
        return NULL;
    }
    t->purgeable = purgeable;
    t->extra_size = (unsigned)extra_size;
    t->oldest = t->newest = TUNE_NONE;
    for (unsigned i = 0; i < TUNE_HELD_MAX; i++) {
        t->held[i].newer = (uint16_t)(i + 1 < TUNE_HELD_MAX ? i + 1 : TUNE_NONE);
    }
    t->inner = tune_inner.xCreate(page_size, extra_size + TUNE_SLOT_BYTES, purgeable);
    if (t->inner == NULL) {
        free(t);
        return NULL;
    }
    return (sqlite3_pcache *)t;
}

static void tune_cachesize(sqlite3_pcache *p, int n)
{
    struct tune_cache *t = tune_of(p);
    unsigned half = n > 0 ? (unsigned)n / 2 : 0;
    t->held_cap = !t->purgeable ? 0 : half < TUNE_HELD_MAX ? half : TUNE_HELD_MAX;
    tune_held_trim(t, t->held_cap);
    tune_inner.xCachesize(t->inner, n);
}

static int tune_pagecount(sqlite3_pcache *p)
{
    return tune_inner.xPagecount(tune_of(p)->inner);
}

/* A held page fetched again is SQLite's again (pinned already). A new page's slot may name
 * a node by chance; that node then holds another page (or none), and nothing is found.
 * A page SQLite's cache will not make (createFlag 1: 90% of it pinned; 2: out of memory) is
 * made from the held pages first, oldest first, as SQLite's own LRU list would have given
 * them up: held pages count as pinned there, and a write transaction whose dirty pages
 * filled the rest would otherwise spill them to the WAL or journal before its commit. */
static sqlite3_pcache_page *tune_fetch(sqlite3_pcache *p, unsigned key, int create)
{
    struct tune_cache *t = tune_of(p);
    sqlite3_pcache_page *page = tune_inner.xFetch(t->inner, key, create);
    while (page == NULL && create != 0 && t->held_count > 0) {
        tune_held_trim(t, t->held_count - 1);
        page = tune_inner.xFetch(t->inner, key, create);
    }
    if (page != NULL && t->held_count > 0) {
        unsigned i = tune_held_find(t, page);
        if (i != TUNE_NONE) {
            tune_held_remove(t, i);
        }
    }
    return page;
}

/* A B-tree page begins with its type (2, 5, 10 or 13) and page 1 with "SQLite format 3"; an
 * overflow page begins with the number of the next page in its chain, whose first byte is
 * 0 in any file of fewer than 2^24 pages (64 GiB of 4 KiB pages), as does a free page.
 * Dropping a page nobody uses is always allowed: only clean copies of what the file or WAL
 * holds are let go of here (pinned and dirty pages never are). A larger file's overflow
 * pages are kept, as before. */
static void tune_unpin(sqlite3_pcache *p, sqlite3_pcache_page *page, int discard)
{
    struct tune_cache *t = tune_of(p);
    const unsigned char *data = page->pBuf;
    if (!discard && t->held_cap > 0 && tune_interior(page)) {
        t->run = 0;
        tune_held_trim(t, t->held_cap - 1);
        tune_held_add(t, page); /* stays pinned in inner: SQLite let go of it */
        return;
    }
    if (discard) {
        t->run = 0; /* dropped anyway (e.g. after a failed read: the buffer may hold nothing) */
    } else if (data[0] != 0) {
        t->run = 0;
    } else if (t->run < TUNE_RUN_KEPT) {
        t->run++;
    } else {
        discard = 1;
    }
    tune_inner.xUnpin(t->inner, page, discard);
}

static void tune_rekey(sqlite3_pcache *p, sqlite3_pcache_page *page, unsigned from, unsigned to)
{
    tune_inner.xRekey(tune_of(p)->inner, page, from, to);
}

static void tune_truncate(sqlite3_pcache *p, unsigned limit)
{
    struct tune_cache *t = tune_of(p);
    tune_held_trim(t, 0); /* the truncate may drop any of them: they must be unpinned first */
    tune_inner.xTruncate(t->inner, limit);
}

static void tune_destroy(sqlite3_pcache *p)
{
    struct tune_cache *t = tune_of(p);
    tune_inner.xDestroy(t->inner);
    free(t);
}

static void tune_shrink(sqlite3_pcache *p)
{
    struct tune_cache *t = tune_of(p);
    tune_held_trim(t, 0); /* a shrink frees what is unpinned: memory wanted back */
    tune_inner.xShrink(t->inner);
}

int mv_server_tune(void)
{
    store_parse_init(); /* the MIME parser's types, made on this thread (store_parse.c) */
    if (sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) != SQLITE_OK) {
        return MV_EBUSY;
    }
    if (sqlite3_config(SQLITE_CONFIG_STMTJRNL_SPILL, TUNE_STMT_JOURNAL_SPILL) != SQLITE_OK) {
        return MV_EBUSY;
    }
    if (!tune_wrapped) {
        if (sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &tune_inner) != SQLITE_OK ||
            tune_inner.iVersion < 1 || tune_inner.xCreate == NULL) {
            return MV_EBUSY;
        }
        sqlite3_pcache_methods2 wrapped = tune_inner; /* xInit, xShutdown, pArg: SQLite's */
        wrapped.xCreate = tune_create;
        wrapped.xCachesize = tune_cachesize;
        wrapped.xPagecount = tune_pagecount;
        wrapped.xFetch = tune_fetch;
        wrapped.xUnpin = tune_unpin;
        wrapped.xRekey = tune_rekey;
        wrapped.xTruncate = tune_truncate;
        wrapped.xDestroy = tune_destroy;
        wrapped.xShrink = tune_inner.xShrink != NULL ? tune_shrink : NULL;
        if (sqlite3_config(SQLITE_CONFIG_PCACHE2, &wrapped) != SQLITE_OK) {
            return MV_EBUSY;
        }
        tune_wrapped = 1;
    }
    return MV_OK;
}
