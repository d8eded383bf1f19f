/*
 * vfs_read_ahead.c -- reading ahead of a run of descending page reads of a main database
 * file, which the kernel does not do (issue 13).
 *
 * WHY
 *   SQLite reads an overflow chain (a big blob: mailvaultd's saved view of a mailbox, ~10 MB
 *   at 1,000,000 messages; a big message body) one page at a time in chain order. A blob
 *   written into pages its predecessor freed (the saved view is replaced every time it is
 *   saved) gets them from the free list in reverse: its chain runs DOWN the file, page n,
 *   n-1, n-2... The kernel reads ahead only runs that go up, so from a file not in the page
 *   cache every page of a descending chain was one synchronous disk read: a cold SELECT of a
 *   1,000,000-message INBOX spent 165-200 ms loading its saved view that way against 18-23 ms
 *   for the same view in ascending pages (measured on the benchmark's store, page reads of
 *   ~70 us each, 2,019 of 2,498 one page below the previous).
 *
 * HOW
 *   Every whole-page read of a main file is noted (struct mv_read_run in struct mv_file).
 *   Once MV_READ_RUN_MIN reads in a row each went one page down, and the page asked for is
 *   outside the window read last, the pages from it down to a window's size below it are
 *   read with ONE call of the lower VFS into a buffer that is then dropped: the disk serves
 *   one request and the kernel keeps the pages, so the run's next reads (each still its own
 *   read, authenticated and decrypted as always) come from the page cache. The window starts
 *   at MV_READ_AHEAD_FIRST bytes and doubles with each window of the same run up to
 *   MV_READ_AHEAD_MAX, as the kernel's own read-ahead grows.
 *   - Nothing read ahead is used or kept here: the page asked for is read again by the caller
 *     after the window, through the ordinary path, so a failure or a short read changes
 *     nothing (the window is a hint; its errors are ignored) and no page can be stale.
 *   - Ascending runs are left to the kernel (it reads those ahead already); a B-tree descent
 *     or a random read never makes a run of MV_READ_RUN_MIN adjacent pages.
 *   - Cost when it helps nothing (the pages are cached already): one copy of the window from
 *     the page cache per window, about a microsecond a page.
 *
 * HINTED RUNS (vfs_hint.h)
 *   The kernel's own read-ahead of an ascending run cannot know where a BLOB's chain ends,
 *   and with the read_ahead_kb of this machine (8 MiB) its windows grow to megabytes: from a
 *   cold file, a UID FETCH of 50 random whole messages at 100,000 read 4.4 MB from the disk
 *   to answer 1.1 MB (Dovecot reads 1.2 MB: a message file's read-ahead stops at its end).
 *   The store knows a BLOB's length once it has its row's leaf and tells the VFS before it
 *   reads the chain; the chain's first page is then the next page read from the file, and
 *   that read takes the chain's pages (an overflow page holds usable - 4 bytes) in ONE lower
 *   read from it: a read the kernel sees as random reads exactly that and no more (one that
 *   follows its row's leaf page, it takes for a sequential one and enlarges), and the
 *   chain's page reads that follow are served from it (HELD WINDOWS), so no window of the
 *   kernel's starts at all. A chain that does not run up the file from there (pages reused
 *   from the free list) costs at most the hinted pages read for nothing; the hint is used
 *   once, and the store takes it back after its read, so it never lands on another read.
 *
 * HELD WINDOWS
 *   A hinted window is not dropped: its pages (as on disk, encrypted) are held until the
 *   hint is taken back, and the chain's page reads are served from them, each authenticated
 *   and decrypted as always. So a chain costs one lower read, also when it is in the page
 *   cache: one system call and one copy instead of one per page (issue 13: the per-page
 *   preads were ~20% of the server's CPU in a FETCH of 50 random whole messages from the
 *   page cache, half of it in the calls themselves, not the copies). Reading the window
 *   first and the pages again, as before, cost that once more, so hints were taken only
 *   after a read that had taken the disk's time; a held window needs no such guess.
 *   - Why the held pages cannot be stale: the store reads a BLOB in one statement, inside
 *     one read transaction, and takes the hint back right after (store_blob.c). In WAL mode
 *     a page read from the database file inside a read transaction cannot change under it:
 *     a checkpoint copies into the file only frames every reader's snapshot includes, and
 *     a page with such a frame is read from the WAL, never from the file (with a rollback
 *     journal, no other connection writes the file while this one holds SHARED). And the
 *     window never outlives its transaction, even if a hint were never taken back: it is
 *     dropped at every lock and unlock of the file and of its WAL index (each transaction's
 *     begin and end, in either journal mode), at any write or truncation of the file
 *     through this handle, and at close.
 *   - A window that fails is not held: its pages are read one at a time, and report their
 *     own errors, as without a hint. One that runs past the end of the file (the last BLOB
 *     of the file: a hint counts the whole BLOB's pages, but its first bytes are in the
 *     row's cell) holds the pages before the end.
 *
 * NEAR WINDOWS
 *   Rows appended one after the other (an import, deliveries) get their overflow pages from
 *   the end of the file as they are inserted, so a row's chain lies close to its leaf: in
 *   the benchmark's stores, 80% of the bodies_data rows with a chain have all of it within
 *   2 pages of their leaf, 93% within 4, 97% within 8 (most often the page right below or
 *   right above). Reading the leaf and then the chain cost a cold message two random reads
 *   (each the disk's full latency) where Dovecot's message file takes one. With a near hint
 *   (vfs_hint.h), a page read that no window holds takes the hinted pages on both sides of
 *   it in the same lower read and holds them: the row's leaf comes with its chain, whose
 *   page reads are then served from the window. A chain that runs on past it continues in a
 *   hinted window from its next page (which may read up to the near window's size past the
 *   chain's end); one that starts outside it gets its own window, as without the near hint.
 *   The windows are held windows (above): dropped at the hint's take-back and at every
 *   lock, write and close, so never stale. Cost when the pages are in the page cache
 *   already: the window's copy (~1 us a page), against the chain's own system call saved.
 *
 * COLD WINDOWS
 *   A read that finds its first pages in the page cache and the rest not is taken by the
 *   kernel for a sequential stream: it reads ahead from the first missing page as many pages
 *   as it found cached before it, up to read_ahead_kb (8 MiB here). The prefetch walk asks
 *   for each chain before it is read, from the row's cell; a hinted window counts the whole
 *   BLOB from the page SQLite reads first and so often runs a few pages past what was asked
 *   for. Those few pages made the kernel read as much again past the chain's end: an evicted
 *   UID FETCH of 50 random whole messages at 100,000 read 7.7 MB from the disk for 3.6 MB
 *   answered, one draw's 1 MB attachment 1 MB more. So while the last prefetch walk of the
 *   file found it cold (struct mv_read_run's cold), each held window is first asked for
 *   itself (posix_fadvise WILLNEED on the walk's descriptor), which reads exactly its
 *   missing pages; its read then finds every page there or on its way, and the kernel never
 *   guesses. From a warm file nothing is asked (no call; the walk clears cold).
 *
 * LIMITS
 *   MV_READ_AHEAD_MAX bytes (2 MiB) of memory for the time of one lower read, per window; a
 *   hinted window is at most that too, held for the time of one BLOB's read. A longer chain
 *   is read in windows of that size, each taken when the chain's next page is the one right
 *   after the window (a chain that leaves the file's order is read as it comes from there).
 *   A file keeps the buffer of its held windows, up to MV_READ_HELD_KEEP (256 KiB), until it
 *   is closed; a bigger window's is freed when dropped. A near window is at most
 *   MV_READ_NEAR_MAX pages on each side (the store asks for 2: 20 KiB with 4 KiB pages).
 */
#include "vfs/vfs.h"
#include "vfs/vfs_hint.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MV_READ_RUN_MIN     4                    /* descending reads in a row before a window */
#define MV_READ_AHEAD_FIRST (128u * 1024u)       /* the first window of a run, bytes */
#define MV_READ_AHEAD_MAX   (2u * 1024u * 1024u) /* the largest window, bytes */
#define MV_READ_HELD_KEEP   (256u * 1024u)       /* a held window's buffer kept per file */

/* BIG WINDOWS. A window over MV_READ_HELD_KEEP gets a block of MV_READ_AHEAD_MAX bytes, and
 * the last MV_READ_WINDOW_KEEP such blocks are kept for the next windows of any file: malloc'd
 * and freed per window, glibc handed each back to the kernel and the next was faulted in
 * afresh (with the response buffers', 16% of the server's CPU in a FETCH of 50 random whole
 * messages at 100,000). A window holds pages as on disk (ciphertext): nothing to wipe. */
#define MV_READ_WINDOW_KEEP 2
static pthread_mutex_t mv_read_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *mv_read_pool[MV_READ_WINDOW_KEEP];
static size_t mv_read_pool_count;

static uint8_t *mv_read_big_get(void)
{
    uint8_t *block = NULL;
    pthread_mutex_lock(&mv_read_pool_lock);
    if (mv_read_pool_count > 0) {
        block = mv_read_pool[--mv_read_pool_count];
    }
    pthread_mutex_unlock(&mv_read_pool_lock);
    return block != NULL ? block : malloc(MV_READ_AHEAD_MAX);
}

static void mv_read_big_put(uint8_t *block)
{
    pthread_mutex_lock(&mv_read_pool_lock);
    if (block != NULL && mv_read_pool_count < MV_READ_WINDOW_KEEP) {
        mv_read_pool[mv_read_pool_count++] = block;
        block = NULL;
    }
    pthread_mutex_unlock(&mv_read_pool_lock);
    free(block);
}

/* Reads pages lo..hi (inclusive) with one lower read into a buffer that is dropped. */
static void mv_read_window(struct mv_file *f, uint32_t lo, uint32_t hi, uint32_t page_size)
{
    size_t bytes = (size_t)(hi - lo + 1) * page_size;
    uint8_t *scratch = bytes <= MV_READ_AHEAD_MAX ? mv_read_big_get() : NULL;
    if (scratch == NULL) {
        return; /* a hint: the run's pages are read one at a time as before */
    }
    (void)f->lower->pMethods->xRead(f->lower, scratch, (int)bytes,
                                    (sqlite3_int64)(lo - 1) * page_size);
    mv_read_big_put(scratch);
    f->run.lo = lo;
    f->run.hi = hi;
}

void mv_main_read_drop(struct mv_file *f)
{
    struct mv_read_run *r = &f->run;
    if (r->held != NULL && r->held != r->kept) {
        mv_read_big_put(r->held); /* a window too big for the file's own buffer */
    }
    r->held = NULL;
    r->held_lo = 0;
    r->held_pages = 0;
    r->held_near = 0;
}

void mv_main_read_release(struct mv_file *f)
{
    mv_main_read_drop(f);
    free(f->run.kept);
    f->run.kept = NULL;
    f->run.kept_size = 0;
}

/* A buffer for a window of bytes: the file's kept one (grown up to MV_READ_HELD_KEEP: a
 * buffer malloc'd per window was paged in afresh each time, 4% of the server's CPU in a hot
 * FETCH of 50 whole messages), or a big block for a bigger window (BIG WINDOWS). NULL: none. */
static uint8_t *mv_read_window_buffer(struct mv_file *f, size_t bytes)
{
    struct mv_read_run *r = &f->run;
    if (bytes > MV_READ_HELD_KEEP) {
        return bytes <= MV_READ_AHEAD_MAX ? mv_read_big_get() : NULL;
    }
    if (bytes > r->kept_size) {
        uint8_t *grown = realloc(r->kept, bytes);
        if (grown == NULL) {
            return NULL;
        }
        r->kept = grown;
        r->kept_size = bytes;
    }
    return r->kept;
}

/* Reads pages lo..lo+pages-1 with one lower read and holds them for the chain's page reads
 * (HELD WINDOWS). Nothing is held if the read fails or comes short: the pages are then read
 * one at a time, and report their own errors, as without a hint. */
static void mv_read_window_held(struct mv_file *f, uint32_t lo, uint32_t pages, uint32_t page_size)
{
    struct mv_read_run *r = &f->run;
    size_t bytes = (size_t)pages * page_size;
    uint8_t *held = NULL;
    if (r->held != NULL && r->held != r->kept && bytes > MV_READ_HELD_KEEP &&
        bytes <= MV_READ_AHEAD_MAX) {
        held = r->held; /* a long chain's next window: the last one's big block again */
    } else {
        mv_main_read_drop(f);
        held = mv_read_window_buffer(f, bytes);
    }
    r->held = held;
    r->held_pages = 0;
    r->held_near = 0;
    if (held == NULL) {
        return;
    }
    sqlite3_int64 off = (sqlite3_int64)(lo - 1) * page_size;
    if (r->cold) {
        (void)posix_fadvise(r->cold_fd, (off_t)off, (off_t)bytes, POSIX_FADV_WILLNEED);
    }
    int rc = f->lower->pMethods->xRead(f->lower, held, (int)bytes, off);
    sqlite3_int64 size = 0;
    if (rc == SQLITE_IOERR_SHORT_READ &&
        f->lower->pMethods->xFileSize(f->lower, &size) == SQLITE_OK && size > off) {
        /* The window ran past the end of the file (a hint counts the pages of the whole
         * BLOB; its first bytes are in the row's cell): the pages before it are good. */
        sqlite3_int64 whole = (size - off) / page_size;
        pages = whole < (sqlite3_int64)pages ? (uint32_t)whole : pages;
        rc = pages > 0 ? SQLITE_OK : rc;
    }
    if (rc != SQLITE_OK) {
        mv_main_read_drop(f); /* frees one of its own */
        return;
    }
    r->held_lo = lo;
    r->held_pages = pages;
    r->lo = lo;
    r->hi = lo + pages - 1;
}

int mv_main_read_held(struct mv_file *f, uint32_t pgno, uint32_t page_size, uint8_t *out)
{
    const struct mv_read_run *r = &f->run;
    if (r->held == NULL || pgno < r->held_lo || pgno - r->held_lo >= r->held_pages) {
        return 0;
    }
    memcpy(out, r->held + (size_t)(pgno - r->held_lo) * page_size, page_size);
    return 1;
}

void mv_main_read_ahead_hint(struct mv_file *f, int64_t bytes)
{
    const struct mv_codec *c = f->codec;
    uint32_t page_size = c->page_size;
    uint32_t reserve = c->crypt != NULL ? crypt_reserve_bytes(crypt_ctx_cipher(c->crypt)) : 0;
    f->run.hinted = 0;
    f->run.near = 0; /* the row is found (its chain is hinted next) or the hint taken back */
    /* A new hint, or the last one taken back: its window is done; but a near window stays for
     * a new hint, as the chain may lie in it (NEAR WINDOWS). */
    if (bytes <= 0 || !f->run.held_near) {
        mv_main_read_drop(f);
    }
    if (bytes <= 0 || page_size == 0 || page_size > MV_READ_AHEAD_MAX ||
        page_size < reserve + 512) {
        return;
    }
    uint64_t per_page = page_size - reserve - 4; /* an overflow page's bytes */
    uint64_t pages = ((uint64_t)bytes + per_page - 1) / per_page;
    f->run.hinted = (uint32_t)(pages < UINT32_MAX ? pages : UINT32_MAX);
}

void mv_main_read_hinted(struct mv_file *f, uint32_t pgno, uint32_t page_size)
{
    struct mv_read_run *r = &f->run;
    if (r->held != NULL) { /* a long chain: the pages after the held window are hinted */
        if (pgno >= r->held_lo && pgno - r->held_lo < r->held_pages) {
            return; /* still in the window */
        }
        if (!r->held_near && pgno != r->held_lo + r->held_pages) {
            r->hinted = 0; /* the chain left the file's order: the rest is read as it comes */
            return;
        }
    }
    uint32_t pages = r->hinted, max = MV_READ_AHEAD_MAX / page_size;
    uint32_t take = pages < max ? pages : max;
    r->hinted = 0;
    if (take >= 2 && pgno <= UINT32_MAX - take) {
        mv_read_window_held(f, pgno, take, page_size);
        if (r->held != NULL && pages > take) {
            r->hinted = pages - take; /* the next window, if the chain goes on up the file */
        }
    }
}

/* At most this many pages on each side of a near window's page. */
#define MV_READ_NEAR_MAX 64

void mv_main_read_near_hint(struct mv_file *f, int pages)
{
    struct mv_read_run *r = &f->run;
    r->near = pages <= 0 ? 0 : pages > MV_READ_NEAR_MAX ? MV_READ_NEAR_MAX : (uint32_t)pages;
    if (r->near == 0 && r->held_near) {
        mv_main_read_drop(f);
    }
}

void mv_main_read_near(struct mv_file *f, uint32_t pgno, uint32_t page_size)
{
    struct mv_read_run *r = &f->run;
    if (r->near == 0 || page_size == 0 ||
        page_size > MV_READ_AHEAD_MAX / (2 * MV_READ_NEAR_MAX + 1) ||
        (r->held != NULL && pgno >= r->held_lo && pgno - r->held_lo < r->held_pages) ||
        pgno > UINT32_MAX - r->near) {
        return;
    }
    uint32_t lo = pgno > r->near ? pgno - r->near : 1;
    mv_read_window_held(f, lo, pgno - lo + r->near + 1, page_size);
    if (r->held != NULL) {
        r->held_near = 1;
    }
}

void mv_main_read_ahead(struct mv_file *f, uint32_t pgno, uint32_t page_size)
{
    struct mv_read_run *r = &f->run;
    if (r->hinted != 0) {
        mv_main_read_hinted(f, pgno, page_size);
    }
    if (r->dir < 0 && pgno + 1 == r->last) {
        r->length++;
    } else if (pgno + 1 == r->last) {
        r->dir = -1; /* a new descending run */
        r->length = 1;
        r->next = MV_READ_AHEAD_FIRST;
    } else if (pgno != r->last) {
        r->dir = 0; /* anything else ends it (the same page again leaves it be) */
        r->length = 0;
    }
    r->last = pgno;
    if (r->dir >= 0 || r->length < MV_READ_RUN_MIN ||
        (r->lo != 0 && pgno >= r->lo && pgno <= r->hi) || page_size == 0 ||
        page_size > MV_READ_AHEAD_MAX) {
        return;
    }
    uint32_t pages = r->next / page_size;
    if (pages < 2) {
        pages = 2;
    }
    uint32_t lo = pgno > pages ? pgno - pages + 1 : 1;
    mv_read_window(f, lo, pgno, page_size);
    if (r->next < MV_READ_AHEAD_MAX) {
        r->next *= 2;
    }
}

void mv_db_read_near_hint(sqlite3 *db, int pages)
{
    if (db != NULL) {
        (void)sqlite3_file_control(db, "main", MV_FCNTL_READ_NEAR, &pages);
    }
}

void mv_db_read_ahead_hint(sqlite3 *db, int64_t bytes)
{
    sqlite3_int64 arg = bytes;
    if (db != NULL) {
        (void)sqlite3_file_control(db, "main", MV_FCNTL_READ_AHEAD, &arg);
    }
}
