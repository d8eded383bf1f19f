/*
 * imap_structure_cache.c -- FETCH BODYSTRUCTURE and BODY answers kept per open store.
 *
 * WHY
 *   BODYSTRUCTURE (and BODY) describe every MIME part: its type and parameters, its size and,
 *   for text, its lines. Answering it reads the whole message (attachments included: their
 *   sizes and lines are part of the answer), decrypts and decompresses it and parses it with
 *   GMime; a bulk FETCH 1:3000 (BODYSTRUCTURE) of the big-mailbox bench's INBOX took 305-374
 *   ms every time, while Dovecot keeps the answer in its cache file after the first FETCH and
 *   answers later ones in 146-157 ms (docs/BENCHMARKS.md). Clients ask again: a webmail opens
 *   a new IMAP session per page and asks the page's messages' structure each time, a client
 *   that opens a message asks its structure first. A message never changes, so its answer is
 *   kept here after the first FETCH that made it, and later FETCHes of the store's sessions,
 *   any of them, copy it without reading the message.
 *
 * HOW
 *   - One cache per open store (worker.h, struct open_store), emptied when the store closes
 *     (store_idle_s after its last session), so what a user's answers cost is held only while
 *     the user is active. Keyed by imap_structure_key (imap_structure_cache.h: UIDVALIDITY and
 *     UID name the message; body key and size are checked too).
 *   - One budget for the process (structure_cache_kib), shared by all caches: an answer is
 *     kept only if the bytes of every cache together stay within it, counting each entry's
 *     text and bookkeeping and each hash table. Room is made from the cache that holds the
 *     most: another store's when it holds more than this one would with the new answer, else
 *     this one's own. Taking only from caches holding their own share would leave the first
 *     busy store with the whole budget for as long as it stays open, and every other store
 *     with nothing to drop and so nothing kept (found by a threaded test that failed in CI
 *     now and then); this way the active stores' holdings even out. Within a cache, entries
 *     go oldest first, with one more turn for each entry used since its last turn (the
 *     "clock" order: a page a webmail shows again stays).
 *   - Locks: a cache's mutex is held while it puts; to take from another cache the registry
 *     of all caches is locked and the other cache's mutex only tried (never waited for, so
 *     two stores making room from each other cannot deadlock): when it is busy, the room
 *     comes from this cache's own entries, or the answer is not kept. Finding the largest
 *     reads every cache's byte count (workers x stores_per_worker, ~2,000 at most: a few
 *     microseconds, only once the budget is full, against the ~100 us parse a put follows).
 *   - Chained hash table (power-of-two buckets, at most one entry per bucket on average).
 *     The hash is a fixed multiplicative one, not keyed as the keyword table's is: UIDs and
 *     UIDVALIDITY are the server's numbers, which a client cannot choose.
 *   - A mutex per cache: the store's reader thread and its writer threads answer FETCH. An
 *     answer is copied out under it (a few hundred bytes).
 *   - Answers quote mail (parameters, file names, an attached message's envelope), so
 *     dropped entries are wiped, as the server's buffers are.
 *   - Kept in the store too (the memos, mv_message_memos_put): an answer made here from the
 *     message is marked unsaved, and the worker writes the unsaved ones between jobs and at
 *     the store's close (imap_structure_cache_take_unsaved, worker.c); a FETCH that does not
 *     find an answer here asks the store before it reads the message (imap_fetch.c), and
 *     answers from what the store gave without keeping it here (the store's read is about as
 *     fast). So the answers outlive the store's close and the server, as Dovecot's cache file
 *     does. An unsaved entry dropped to make room is only counted (made again at its next
 *     FETCH, and saved then).
 */
#include "imap_structure_cache.h"

#include <openssl/crypto.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct sc_entry {
    struct sc_entry *chain; /* the next entry of its bucket */
    struct sc_entry *newer; /* the clock's order: kept longest first */
    struct imap_structure_key key;
    unsigned used : 1;    /* found since its last turn in the clock */
    unsigned unsaved : 1; /* made here, not yet handed to imap_structure_cache_take_unsaved */
    size_t len;
    char text[];
};

struct imap_structure_cache {
    pthread_mutex_t lock;
    struct imap_structure_cache *prev, *next; /* all caches (sc_all; under sc_all_lock) */
    struct sc_entry **buckets; /* bucket_count of them, a power of two; NULL: none yet */
    size_t bucket_count;
    struct sc_entry *oldest, *newest;
    size_t entries;
    size_t unsaved;        /* entries with unsaved set */
    uint64_t unsaved_lost; /* unsaved entries dropped to make room */
    /* The keys of the answers put unsaved, in the order put (some since dropped, which
     * imap_structure_cache_take_unsaved skips): it finds what to save without walking every
     * entry (up to ~230,000 under the lock every FETCH waits for). Not charged to the budget:
     * it holds the keys put since the last take (every take empties it of what it passes),
     * at most about twice as many as there are entries (sc_pending_add). */
    struct imap_structure_key *pending;
    size_t pending_count, pending_cap;
    /* charged to the budget: entries and the table. Changed under lock; read by other
     * caches' puts without it, to choose where room is taken from */
    atomic_size_t bytes;
    uint64_t hits, misses;
};

#define SC_BUCKETS_MIN 64

static size_t sc_budget;
static atomic_size_t sc_total;
static pthread_mutex_t sc_all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct imap_structure_cache *sc_all;

void imap_structure_cache_budget(size_t bytes)
{
    sc_budget = bytes;
}

size_t imap_structure_cache_bytes(void)
{
    return atomic_load_explicit(&sc_total, memory_order_relaxed);
}

/* Takes n bytes of the process's budget: 1, or 0 if they do not fit now. */
static int sc_charge(size_t n)
{
    size_t cur = atomic_load_explicit(&sc_total, memory_order_relaxed);
    while (n <= sc_budget && cur <= sc_budget - n) {
        if (atomic_compare_exchange_weak_explicit(&sc_total, &cur, cur + n, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            return 1;
        }
    }
    return 0;
}

/* Gives n bytes that c held back to the budget. */
static void sc_uncharge(struct imap_structure_cache *c, size_t n)
{
    atomic_fetch_sub_explicit(&c->bytes, n, memory_order_relaxed);
    atomic_fetch_sub_explicit(&sc_total, n, memory_order_relaxed);
}

static size_t sc_held(struct imap_structure_cache *c)
{
    return atomic_load_explicit(&c->bytes, memory_order_relaxed);
}

static size_t sc_entry_bytes(size_t len)
{
    return offsetof(struct sc_entry, text) + len + 1;
}

static size_t sc_hash(const struct imap_structure_key *k)
{
    uint64_t h = ((uint64_t)k->uidvalidity << 32 | k->uid) * UINT64_C(0x9E3779B97F4A7C15);
    h ^= (uint64_t)(k->extensible | k->utf8 << 1) << 61;
    return (size_t)(h >> 32);
}

static int sc_same(const struct imap_structure_key *a, const struct imap_structure_key *b)
{
    return a->uidvalidity == b->uidvalidity && a->uid == b->uid && a->body_key == b->body_key &&
           a->size == b->size && a->extensible == b->extensible && a->utf8 == b->utf8;
}

static struct sc_entry **sc_slot(struct imap_structure_cache *c, const struct imap_structure_key *k)
{
    struct sc_entry **at = &c->buckets[sc_hash(k) & (c->bucket_count - 1)];
    while (*at != NULL && !sc_same(&(*at)->key, k)) {
        at = &(*at)->chain;
    }
    return at;
}

struct imap_structure_cache *imap_structure_cache_new(void)
{
    if (sc_budget == 0) { /* off (structure_cache_kib = 0): a FETCH then asks nothing */
        return NULL;
    }
    struct imap_structure_cache *c = calloc(1, sizeof *c);
    if (c != NULL && pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (c != NULL) {
        pthread_mutex_lock(&sc_all_lock);
        c->next = sc_all;
        if (sc_all != NULL) {
            sc_all->prev = c;
        }
        sc_all = c;
        pthread_mutex_unlock(&sc_all_lock);
    }
    return c;
}

int imap_structure_cache_get(struct imap_structure_cache *c,
                             const struct imap_structure_key *key,
                             struct buf *out)
{
    if (c == NULL) {
        return 0;
    }
    pthread_mutex_lock(&c->lock);
    struct sc_entry *e = c->buckets != NULL ? *sc_slot(c, key) : NULL;
    if (e != NULL) {
        e->used = 1;
        c->hits++;
        buf_add(out, e->text, e->len);
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return e != NULL;
}

int imap_structure_cache_has(struct imap_structure_cache *c, const struct imap_structure_key *key)
{
    if (c == NULL) {
        return 0;
    }
    pthread_mutex_lock(&c->lock);
    int kept = c->buckets != NULL && *sc_slot(c, key) != NULL;
    pthread_mutex_unlock(&c->lock);
    return kept;
}

static void sc_entry_free(struct imap_structure_cache *c, struct sc_entry *e)
{
    size_t n = sc_entry_bytes(e->len);
    c->unsaved -= e->unsaved;
    OPENSSL_cleanse(e->text, e->len);
    free(e);
    c->entries--;
    sc_uncharge(c, n);
}

/* Drops the entry kept longest that was not used since its last turn (a used one loses
 * its mark and goes to the back). 0 if the cache is empty. */
static int sc_drop_one(struct imap_structure_cache *c)
{
    while (c->oldest != NULL) {
        struct sc_entry *e = c->oldest;
        c->oldest = e->newer;
        if (c->oldest == NULL) {
            c->newest = NULL;
        }
        e->newer = NULL;
        if (e->used) { /* one more turn: at most one pass over the entries clears them all */
            e->used = 0;
            if (c->newest != NULL) {
                c->newest->newer = e;
            } else {
                c->oldest = e;
            }
            c->newest = e;
            continue;
        }
        *sc_slot(c, &e->key) = e->chain;
        c->unsaved_lost += e->unsaved;
        sc_entry_free(c, e);
        return 1;
    }
    return 0;
}

/* Drops one entry of the cache holding the most, if that is another than c (whose lock the
 * caller holds) and it holds more than c would with want more bytes: 1 if one was dropped. 0
 * (c makes room from its own) when c holds as much, or that cache is busy or empty. */
static int sc_drop_from_larger(struct imap_structure_cache *c, size_t want)
{
    int dropped = 0;
    pthread_mutex_lock(&sc_all_lock);
    struct imap_structure_cache *larger = NULL;
    size_t most = sc_held(c) + want;
    for (struct imap_structure_cache *o = sc_all; o != NULL; o = o->next) {
        if (o != c && sc_held(o) > most) {
            larger = o;
            most = sc_held(o);
        }
    }
    if (larger != NULL && pthread_mutex_trylock(&larger->lock) == 0) {
        dropped = sc_drop_one(larger);
        pthread_mutex_unlock(&larger->lock);
    }
    pthread_mutex_unlock(&sc_all_lock);
    return dropped;
}

/* Charges n bytes to c, dropping entries (the largest cache's first) as long as they do not
 * fit. 1 or 0. */
static int sc_make_room(struct imap_structure_cache *c, size_t n)
{
    while (!sc_charge(n)) {
        if (!sc_drop_from_larger(c, n) && !sc_drop_one(c)) {
            return 0;
        }
    }
    atomic_fetch_add_explicit(&c->bytes, n, memory_order_relaxed);
    return 1;
}

/* Doubles the table (from SC_BUCKETS_MIN) when it holds as many entries as buckets. 1 if
 * there is room for one more entry's bucket, 0 if there is no table and none could be made. */
static int sc_grow(struct imap_structure_cache *c)
{
    if (c->buckets != NULL && c->entries < c->bucket_count) {
        return 1;
    }
    size_t count = c->buckets != NULL ? 2 * c->bucket_count : SC_BUCKETS_MIN;
    size_t more = (count - c->bucket_count) * sizeof *c->buckets;
    if (!sc_make_room(c, more)) {
        return c->buckets != NULL; /* longer chains, still correct */
    }
    struct sc_entry **grown = calloc(count, sizeof *grown);
    if (grown == NULL) {
        sc_uncharge(c, more);
        return c->buckets != NULL;
    }
    for (struct sc_entry *e = c->oldest; e != NULL; e = e->newer) {
        size_t b = sc_hash(&e->key) & (count - 1);
        e->chain = grown[b];
        grown[b] = e;
    }
    free(c->buckets);
    c->buckets = grown;
    c->bucket_count = count;
    return 1;
}

/* Notes key as an answer to save (imap_structure_cache_take_unsaved): 1, or 0 when out of
 * memory (the answer is then kept but not saved). */
static int sc_pending_add(struct imap_structure_cache *c, const struct imap_structure_key *key)
{
    /* Bounded by the entries: past twice their count (and a floor), the keys of entries gone
     * or already handed out are dropped, which leaves at most one key an entry. */
    if (c->pending_count >= 2 * c->entries + 1024) {
        size_t kept = 0;
        for (size_t i = 0; i < c->pending_count; i++) {
            struct sc_entry *e = *sc_slot(c, &c->pending[i]);
            if (e != NULL && e->unsaved) {
                c->pending[kept++] = c->pending[i];
            }
        }
        c->pending_count = kept;
    }
    if (c->pending_count == c->pending_cap) {
        size_t cap = c->pending_cap != 0 ? 2 * c->pending_cap : 64;
        struct imap_structure_key *grown = realloc(c->pending, cap * sizeof *grown);
        if (grown == NULL) {
            return 0;
        }
        c->pending = grown;
        c->pending_cap = cap;
    }
    c->pending[c->pending_count++] = *key;
    return 1;
}

void imap_structure_cache_put(struct imap_structure_cache *c,
                              const struct imap_structure_key *key,
                              const char *text,
                              size_t len,
                              int unsaved)
{
    if (c == NULL || sc_budget == 0 || sc_entry_bytes(len) > sc_budget) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    if ((c->buckets == NULL || *sc_slot(c, key) == NULL) && sc_grow(c)) {
        size_t n = sc_entry_bytes(len);
        struct sc_entry *e = NULL;
        if (sc_make_room(c, n)) {
            e = malloc(n);
            if (e == NULL) {
                sc_uncharge(c, n);
            }
        }
        if (e != NULL) {
            e->key = *key;
            e->used = 0;
            e->unsaved = unsaved != 0 && sc_pending_add(c, key);
            c->unsaved += e->unsaved;
            e->len = len;
            memcpy(e->text, text, len);
            e->text[len] = '\0';
            /* the room made may have dropped entries, never the table: the slot is found
             * again after it */
            struct sc_entry **at = &c->buckets[sc_hash(key) & (c->bucket_count - 1)];
            e->chain = *at;
            *at = e;
            e->newer = NULL;
            if (c->newest != NULL) {
                c->newest->newer = e;
            } else {
                c->oldest = e;
            }
            c->newest = e;
            c->entries++;
        }
    }
    pthread_mutex_unlock(&c->lock);
}

size_t imap_structure_cache_take_unsaved(struct imap_structure_cache *c,
                                         size_t max,
                                         imap_structure_unsaved_fn *fn,
                                         void *arg)
{
    if (c == NULL) {
        return 0;
    }
    size_t taken = 0, at = 0;
    pthread_mutex_lock(&c->lock);
    /* in the order put; keys whose entry went (dropped) or was handed out are passed over */
    for (; at < c->pending_count && taken < max; at++) {
        struct sc_entry *e = c->buckets != NULL ? *sc_slot(c, &c->pending[at]) : NULL;
        if (e != NULL && e->unsaved) {
            e->unsaved = 0;
            c->unsaved--;
            fn(arg, &e->key, e->text, e->len);
            taken++;
        }
    }
    if (at > 0) {
        memmove(c->pending, c->pending + at, (c->pending_count - at) * sizeof *c->pending);
        c->pending_count -= at;
    }
    pthread_mutex_unlock(&c->lock);
    return taken;
}

void imap_structure_cache_clear(struct imap_structure_cache *c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    while (c->oldest != NULL) {
        struct sc_entry *e = c->oldest;
        c->oldest = e->newer;
        sc_entry_free(c, e);
    }
    c->newest = NULL;
    free(c->pending); /* keys only: UIDs, no mail */
    c->pending = NULL;
    c->pending_count = c->pending_cap = 0;
    size_t table = c->bucket_count * sizeof *c->buckets;
    free(c->buckets);
    c->buckets = NULL;
    c->bucket_count = 0;
    sc_uncharge(c, table);
    pthread_mutex_unlock(&c->lock);
}

void imap_structure_cache_free(struct imap_structure_cache **c)
{
    if (c == NULL || *c == NULL) {
        return;
    }
    /* out of the registry first: no other cache's put can then be dropping its entries */
    pthread_mutex_lock(&sc_all_lock);
    if ((*c)->prev != NULL) {
        (*c)->prev->next = (*c)->next;
    } else {
        sc_all = (*c)->next;
    }
    if ((*c)->next != NULL) {
        (*c)->next->prev = (*c)->prev;
    }
    pthread_mutex_unlock(&sc_all_lock);
    imap_structure_cache_clear(*c);
    pthread_mutex_destroy(&(*c)->lock);
    free(*c);
    *c = NULL;
}

void imap_structure_cache_stats(struct imap_structure_cache *c,
                                struct imap_structure_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    out->hits = c->hits;
    out->misses = c->misses;
    out->entries = c->entries;
    out->unsaved = c->unsaved;
    out->unsaved_lost = c->unsaved_lost;
    out->bytes = sc_held(c);
    pthread_mutex_unlock(&c->lock);
}
