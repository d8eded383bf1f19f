/*
 * imap_msgs.c -- the messages of a view (struct imap_view), kept in reference-counted
 * chunks that views share until one must write (issue 13: every SELECT copied the store's
 * whole cached view into the session, 48 MB at 1,000,000 messages, 75 ms of a warm LOGIN +
 * SELECT, and each selected session kept its own copy).
 *
 * HOW
 *   - A view holds a table of parts, each a chunk of up to IMAP_CHUNK_MSGS messages and the
 *     view index of its first one. imap_view_share copies the table and takes a reference
 *     per chunk: cost in chunks (245 at 1,000,000 messages), not messages.
 *   - A chunk with more than one reference is never written. A view about to write a
 *     message makes its chunk its own first (imap_view_own: copy it, taking a reference to
 *     each message's keywords, and drop its reference to the shared one), so one changed
 *     message costs one chunk copy, and the other views keep what they had. Callers make
 *     every chunk they will write their own before they change anything, so a failure to
 *     copy leaves the view as it was.
 *   - A chunk holds a reference to each of its messages' keyword lists (imap_kw.c),
 *     dropped when its last reference goes. The counts are atomic: the store's cached view
 *     lives on the store's worker, sessions sync on its reader thread as well (IDLE).
 *     Testing refs == 1 before writing is safe: a view that holds the only reference is the
 *     only one that could hand out another.
 *   - Chunks are full but the last while only appends happen, so finding message i is a
 *     division; expunges leave chunks shorter (an emptied one is dropped), and then a
 *     binary search over the parts' starts (imap_view_part_of).
 *   - Marks (what one session alone knows of a message, IMAP_MARK_*) are a byte per message
 *     beside the table, in the session's view only; they follow appends and removals here.
 *   - A chunk of a view loaded from its saved form is pending (imap_view_saved.c): it knows
 *     its message count and first UID, and its messages are decoded at the first read of
 *     one (imap_view_msg -> imap_chunk_fill, once, under one lock); its pages are not
 *     written until then. Whatever reads or writes a chunk's messages other than through
 *     imap_view_msg decodes it first (imap_chunk_ready), and a UID search finds the part by
 *     its first UID before it looks inside, so it decodes one chunk, not the ones a search
 *     over every message would pass.
 *   - A chunk is freed only when its last message goes, so a view that lives long while mail
 *     comes and most of it goes again (a store kept open by a client in IDLE, an INBOX whose
 *     mail is moved on) would keep a 160 KB chunk for a few messages: once its chunks are
 *     less than half full on average, the cache's merge and a session's sync copy the
 *     messages into full chunks (imap_view_compact; a copy of the view, at most once per
 *     as many removals as half the view holds).
 */
#include "imap_session.h"
#include "mailvault.h"

#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The start of an empty part (reserved for appends, at the end of the table): above every
 * index, so the search for the part of message i never stops at one. */
#define IMAP_PART_EMPTY SIZE_MAX

static atomic_size_t imap_chunks_in_memory;
static atomic_size_t imap_chunks_not_decoded;
/* One lock for every pending chunk's decode: a chunk is decoded once in its life, and two
 * threads rarely want one at the same moment (a session and the cache's merge). */
static pthread_mutex_t imap_chunk_fill_lock = PTHREAD_MUTEX_INITIALIZER;

size_t imap_chunks_live(void)
{
    return atomic_load_explicit(&imap_chunks_in_memory, memory_order_relaxed);
}

size_t imap_chunks_pending(void)
{
    return atomic_load_explicit(&imap_chunks_not_decoded, memory_order_relaxed);
}

/* Faults in, with one system call, the pages of a fresh chunk that its first fill messages
 * will take, before they are written: a decoded or listed view fills its chunks whole, a copy
 * of a shared chunk as far as that one is, and page by page each of those pages was a fault
 * of its own on its first write. A cold SELECT of a 100,000-message INBOX spent ~40% of its
 * CPU on those first writes (perf: the copy into the chunk and the hypervisor's interrupt
 * enable under the fault), at 1,000,000 messages ~10,000 pages; populated at once they cost
 * about two thirds (40 MB fresh on this VM: 117-135 ms written page by page, 64-90 ms
 * populated first; docs/BENCHMARKS.md "The cold SELECT"). Only what will be written: a chunk
 * started for one new message keeps its other pages untouched (not resident), as a small
 * mailbox's view does. A hint: a kernel without MADV_POPULATE_WRITE (before Linux 5.14)
 * says EINVAL, and the pages then fault in as before. */
static void imap_chunk_populate(struct imap_chunk *c, size_t fill)
{
    long got = sysconf(_SC_PAGESIZE); /* from the auxiliary vector: no system call */
    uintptr_t page = got > 0 ? (uintptr_t)got : 4096;
    uintptr_t lo = ((uintptr_t)c + page - 1) & ~(page - 1);
    uintptr_t hi = (uintptr_t)(c->msgs + fill) & ~(page - 1);
    if (hi > lo + page) { /* a page or two fault in as cheaply by themselves */
        (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
    }
}

/* A chunk whose first fill messages are about to be written. */
static struct imap_chunk *imap_chunk_new(size_t fill)
{
    struct imap_chunk *c = malloc(sizeof *c);
    if (c != NULL) {
        imap_chunk_populate(c, fill);
        atomic_init(&c->refs, 1);
        atomic_init(&c->pending, 0);
        memset(&c->at, 0, sizeof c->at);
        c->count = 0;
        atomic_fetch_add_explicit(&imap_chunks_in_memory, 1, memory_order_relaxed);
    }
    return c;
}

void imap_chunk_fill(struct imap_chunk *c)
{
    pthread_mutex_lock(&imap_chunk_fill_lock);
    struct imap_view_source *src = NULL;
    if (atomic_load_explicit(&c->pending, memory_order_relaxed) != 0) {
        imap_chunk_populate(c, c->count);
        imap_view_source_decode(c); /* under the lock: it uses one buffer for all */
        src = c->at.src;            /* kept in at: read only while pending */
        atomic_store_explicit(&c->pending, 0, memory_order_release);
        atomic_fetch_sub_explicit(&imap_chunks_not_decoded, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&imap_chunk_fill_lock);
    imap_view_source_unref(src); /* the saved bytes go with the last pending chunk */
}

struct imap_view_source *imap_chunk_source(struct imap_chunk *c)
{
    struct imap_view_source *src = NULL;
    if (atomic_load_explicit(&c->pending, memory_order_acquire) == 0) {
        return NULL; /* decoded: it stays so, no lock needed */
    }
    pthread_mutex_lock(&imap_chunk_fill_lock);
    if (atomic_load_explicit(&c->pending, memory_order_relaxed) != 0) {
        src = c->at.src;
        imap_view_source_ref(src);
    }
    pthread_mutex_unlock(&imap_chunk_fill_lock);
    return src;
}

/* c decoded, if it was pending: before anything reads or writes its messages directly. */
static void imap_chunk_ready(struct imap_chunk *c)
{
    if (atomic_load_explicit(&c->pending, memory_order_acquire) != 0) {
        imap_chunk_fill(c);
    }
}

/* Room in v's table of parts for one more: MV_OK or MV_ENOMEM. */
static int imap_view_part_room(struct imap_view *v)
{
    if (v->part_count == v->part_cap) {
        size_t cap = v->part_cap != 0 ? v->part_cap * 2 : 4;
        struct imap_part *parts = realloc(v->parts, cap * sizeof *parts);
        if (parts == NULL) {
            return MV_ENOMEM;
        }
        v->parts = parts;
        v->part_cap = cap;
    }
    return MV_OK;
}

int imap_view_add_pending(struct imap_view *v, size_t count, const struct imap_chunk_at *at)
{
    assert(count > 0 && count <= IMAP_CHUNK_MSGS && at->src != NULL);
    assert(v->part_count == 0 || v->parts[v->part_count - 1].chunk->count > 0);
    if (imap_view_part_room(v) != MV_OK) {
        return MV_ENOMEM;
    }
    /* Not populated (imap_chunk_populate): its pages are written when it is decoded, and
     * until then only the header's page is. */
    struct imap_chunk *c = malloc(sizeof *c);
    if (c == NULL) {
        return MV_ENOMEM;
    }
    atomic_init(&c->refs, 1);
    atomic_init(&c->pending, 1);
    c->count = count;
    c->at = *at;
    imap_view_source_ref(at->src);
    atomic_fetch_add_explicit(&imap_chunks_in_memory, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&imap_chunks_not_decoded, 1, memory_order_relaxed);
    v->parts[v->part_count++] = (struct imap_part){.chunk = c, .start = v->count};
    v->count += count;
    return MV_OK;
}

static void imap_chunk_unref(struct imap_chunk *c)
{
    if (c == NULL || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1) {
        return;
    }
    if (atomic_load_explicit(&c->pending, memory_order_acquire) != 0) {
        imap_view_source_unref(c->at.src); /* never decoded: it holds no keywords */
        atomic_fetch_sub_explicit(&imap_chunks_not_decoded, 1, memory_order_relaxed);
    } else {
        for (size_t i = 0; i < c->count; i++) {
            imap_kw_unref(c->msgs[i].keywords);
        }
    }
    free(c);
    atomic_fetch_sub_explicit(&imap_chunks_in_memory, 1, memory_order_relaxed);
}

static int imap_chunk_shared(const struct imap_chunk *c)
{
    return atomic_load_explicit(&c->refs, memory_order_acquire) != 1;
}

/* The first index in [lo, hi) whose UID is >= uid, hi if none: a binary search. */
static size_t imap_view_search_uid(const struct imap_view *v, size_t lo, size_t hi, uint32_t uid)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (imap_view_msg(v, mid)->uid < uid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* The first UID of a chunk with messages, without decoding it if it is pending. */
static uint32_t imap_chunk_first_uid(struct imap_chunk *c)
{
    if (atomic_load_explicit(&c->pending, memory_order_acquire) != 0) {
        return c->at.first_uid;
    }
    return c->msgs[0].uid;
}

static size_t imap_view_first_empty(const struct imap_view *v);

size_t imap_view_find_uid(const struct imap_view *v, uint32_t uid)
{
    /* The part first (the last whose first UID is at most uid), then within it: a view
     * decoded on first use decodes the one chunk the UID is in, not the chunks a search
     * over all messages would pass through. */
    size_t lo = 0, hi = imap_view_first_empty(v);
    if (hi == 0 || imap_chunk_first_uid(v->parts[0].chunk) >= uid) {
        return 0;
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (imap_chunk_first_uid(v->parts[mid].chunk) <= uid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    size_t start = v->parts[lo].start;
    return imap_view_search_uid(v, start, start + v->parts[lo].chunk->count, uid);
}

size_t imap_view_find_uid_from(const struct imap_view *v, size_t from, uint32_t uid)
{
    size_t lo = from, step = 1, hi = from; /* the answer is in [lo, hi] */
    while (hi < v->count && imap_view_msg(v, hi)->uid < uid) {
        lo = hi + 1;
        hi = step < v->count - hi ? hi + step : v->count;
        step *= 2;
    }
    return imap_view_search_uid(v, lo, hi, uid);
}

/* Makes part p's chunk the view's own. */
static int imap_view_own_part(struct imap_view *v, size_t p)
{
    struct imap_chunk *old = v->parts[p].chunk;
    imap_chunk_ready(old); /* written after this, or copied */
    if (!imap_chunk_shared(old)) {
        return MV_OK;
    }
    struct imap_chunk *c = imap_chunk_new(old->count);
    if (c == NULL) {
        return MV_ENOMEM;
    }
    memcpy(c->msgs, old->msgs, old->count * sizeof *c->msgs);
    c->count = old->count;
    for (size_t i = 0; i < c->count; i++) {
        imap_kw_ref(c->msgs[i].keywords);
    }
    v->parts[p].chunk = c;
    imap_chunk_unref(old);
    return MV_OK;
}

int imap_view_own(struct imap_view *v, size_t i)
{
    assert(i < v->count);
    return imap_view_own_part(v, imap_view_part_of(v, i));
}

struct imap_msg *imap_view_msg_mut(struct imap_view *v, size_t i)
{
    struct imap_part *p = &v->parts[imap_view_part_of(v, i)];
    assert(!imap_chunk_shared(p->chunk) && atomic_load(&p->chunk->pending) == 0);
    return &p->chunk->msgs[i - p->start];
}

/* The first empty part (part_count if none). The parts with messages are a prefix: a binary
 * search, so that filling a view reserved whole (a saved view's decode) costs O(log) a
 * message, not a walk over the empty chunks ahead. */
static size_t imap_view_first_empty(const struct imap_view *v)
{
    size_t p = 0, hi = v->part_count;
    while (p < hi) {
        size_t mid = p + (hi - p) / 2;
        if (v->parts[mid].chunk->count > 0) {
            p = mid + 1;
        } else {
            hi = mid;
        }
    }
    return p;
}

/* The part the next append goes to: the last one with messages if it has room, else the
 * first empty one; part_count if none. */
static size_t imap_view_fill_part(const struct imap_view *v)
{
    size_t p = imap_view_first_empty(v);
    if (p > 0 && v->parts[p - 1].chunk->count < IMAP_CHUNK_MSGS) {
        return p - 1;
    }
    return p;
}

int imap_view_reserve(struct imap_view *v, size_t n)
{
    if (n == 0) {
        return MV_OK;
    }
    if (v->marks != NULL && v->count + n > v->marks_cap) {
        size_t cap = v->marks_cap * 2 > v->count + n ? v->marks_cap * 2 : v->count + n;
        unsigned char *marks = realloc(v->marks, cap);
        if (marks == NULL) {
            return MV_ENOMEM;
        }
        memset(marks + v->marks_cap, 0, cap - v->marks_cap);
        v->marks = marks;
        v->marks_cap = cap;
    }
    size_t p = imap_view_fill_part(v), room = 0;
    if (p < v->part_count && v->parts[p].chunk->count > 0) {
        if (imap_view_own_part(v, p) != MV_OK) {
            return MV_ENOMEM;
        }
        room = IMAP_CHUNK_MSGS - v->parts[p].chunk->count;
        p++;
    }
    room += (v->part_count - p) * IMAP_CHUNK_MSGS; /* empty chunks reserved before */
    while (room < n) {
        if (imap_view_part_room(v) != MV_OK) {
            return MV_ENOMEM;
        }
        /* it takes what the room so far leaves over, up to a whole chunk */
        struct imap_chunk *c =
            imap_chunk_new(n - room < IMAP_CHUNK_MSGS ? n - room : IMAP_CHUNK_MSGS);
        if (c == NULL) {
            return MV_ENOMEM;
        }
        v->parts[v->part_count++] = (struct imap_part){.chunk = c, .start = IMAP_PART_EMPTY};
        room += IMAP_CHUNK_MSGS;
    }
    return MV_OK;
}

void imap_view_append(struct imap_view *v, const struct imap_msg *m)
{
    size_t p = imap_view_fill_part(v);
    if (p < v->part_count && imap_chunk_shared(v->parts[p].chunk)) {
        /* The part imap_view_reserve made its own was emptied since (imap_view_drop keeps
         * it, empty, as the room it counted) and the one before it has room but is shared
         * (shortened by expunges before the view was shared): the room is the empty one. */
        p = imap_view_first_empty(v);
    }
    assert(p < v->part_count && !imap_chunk_shared(v->parts[p].chunk));
    struct imap_chunk *c = v->parts[p].chunk;
    assert(atomic_load(&c->pending) == 0); /* imap_view_reserve made it its own */
    if (c->count == 0) {
        v->parts[p].start = v->count;
    }
    c->msgs[c->count++] = *m;
    if (v->marks != NULL) {
        assert(v->count < v->marks_cap);
        v->marks[v->count] = 0;
    }
    v->count++;
}

int imap_view_push(struct imap_view *v, const struct imap_msg *m)
{
    int rc = imap_view_reserve(v, 1);
    if (rc == MV_OK) {
        imap_view_append(v, m);
    }
    return rc;
}

int imap_view_share(struct imap_view *dst, const struct imap_view *src)
{
    assert(dst->count == 0 && dst->part_count == 0);
    size_t n = 0;
    for (size_t p = 0; p < src->part_count; p++) {
        n += src->parts[p].chunk->count > 0;
    }
    struct imap_part *parts = malloc((n > 0 ? n : 1) * sizeof *parts);
    if (parts == NULL) {
        return MV_ENOMEM;
    }
    free(dst->parts);
    dst->parts = parts;
    dst->part_cap = n > 0 ? n : 1;
    dst->part_count = 0;
    for (size_t p = 0; p < src->part_count; p++) {
        if (src->parts[p].chunk->count > 0) {
            atomic_fetch_add_explicit(&src->parts[p].chunk->refs, 1, memory_order_relaxed);
            dst->parts[dst->part_count++] = src->parts[p];
        }
    }
    dst->count = src->count;
    return MV_OK;
}

void imap_view_drop(struct imap_view *v, const size_t *idx, size_t n)
{
    if (n == 0) {
        return;
    }
    /* The marks first, while the indexes still mean what they meant: one pass from the
     * first removed on. */
    if (v->marks != NULL) {
        size_t kept = idx[0];
        for (size_t i = idx[0], k = 0; i < v->count; i++) {
            if (k < n && idx[k] == i) {
                k++;
            } else {
                v->marks[kept++] = v->marks[i];
            }
        }
    }
    size_t k = 0, removed = 0, out = 0;
    for (size_t p = 0; p < v->part_count; p++) {
        struct imap_chunk *c = v->parts[p].chunk;
        size_t start = v->parts[p].start, end = start + c->count;
        if (c->count == 0) { /* reserved, at the end */
            v->parts[out++] = v->parts[p];
            continue;
        }
        if (k < n && idx[k] < end) {
            assert(!imap_chunk_shared(c) && atomic_load(&c->pending) == 0);
            size_t kept = 0;
            for (size_t i = start; i < end; i++) {
                if (k < n && idx[k] == i) {
                    imap_kw_unref(c->msgs[i - start].keywords);
                    k++;
                    removed++;
                } else {
                    c->msgs[kept++] = c->msgs[i - start];
                }
            }
            c->count = kept;
            /* Emptied: dropped, unless no message follows it (then it stays, as the room
             * an imap_view_reserve counted on; parts[p + 1] is not rewritten yet). */
            if (kept == 0 && p + 1 < v->part_count && v->parts[p + 1].chunk->count > 0) {
                imap_chunk_unref(c);
                continue;
            }
            v->parts[out] = v->parts[p];
            v->parts[out++].start =
                kept == 0 ? IMAP_PART_EMPTY : start - (removed - (end - start - kept));
            continue;
        }
        v->parts[out] = v->parts[p];
        v->parts[out++].start = start - removed;
    }
    assert(k == n && removed == n);
    v->part_count = out;
    v->count -= n;
}

void imap_view_compact(struct imap_view *v)
{
    size_t used = 0;
    for (size_t p = 0; p < v->part_count; p++) {
        used += v->parts[p].chunk->count > 0;
    }
    if (used <= 2 * (v->count / IMAP_CHUNK_MSGS + 1)) {
        return; /* at least half full on average: not worth a copy */
    }
    struct imap_view fresh;
    memset(&fresh, 0, sizeof fresh);
    if (imap_view_reserve(&fresh, v->count) != MV_OK) {
        imap_view_msgs_free(&fresh);
        return; /* a saving, not a need: the view stays as it is */
    }
    for (size_t i = 0; i < v->count; i++) {
        struct imap_msg m = *imap_view_msg(v, i);
        imap_kw_ref(m.keywords); /* the new chunk's reference; the old goes with its chunk */
        imap_view_append(&fresh, &m);
    }
    unsigned char *marks = v->marks; /* by index: the same after the copy */
    size_t marks_cap = v->marks_cap, count = v->count;
    v->marks = NULL;
    imap_view_msgs_free(v);
    v->parts = fresh.parts;
    v->part_count = fresh.part_count;
    v->part_cap = fresh.part_cap;
    v->count = count;
    v->marks = marks;
    v->marks_cap = marks_cap;
}

void imap_view_msgs_free(struct imap_view *v)
{
    for (size_t p = 0; p < v->part_count; p++) {
        imap_chunk_unref(v->parts[p].chunk);
    }
    free(v->parts);
    free(v->marks);
    v->parts = NULL;
    v->marks = NULL;
    v->part_count = v->part_cap = v->count = v->marks_cap = 0;
}
