/*
 * imap_kw.c -- a message's keyword list as the views of a selected mailbox hold it: each name
 * interned once in the process, a list being a count and its names' numbers.
 *
 * WHY
 *   The views held each message's list as its text. A mailbox defines at most
 *   mailbox_keywords_max keywords (1,000), but a message may carry keywords_max of them (256,
 *   up to 128 bytes each) and a user can give every message a subset of its own: k STOREs
 *   +FLAGS, each adding one keyword to every other message in a pattern of its own, give 2^k
 *   different lists. 2,000 messages with 256 of ~100-byte keywords each took mailvaultd (one
 *   process for every user) from 18 to 81 MB at a SELECT; 100,000 would have taken ~3 GB. A
 *   list now costs 2 bytes a name (4 if one of its names got a number past 65,535, i.e. the
 *   process held more than 65,536 names at once when it was interned)
 *   and each name is held once however many lists carry it: 256 keywords take 528 bytes, not
 *   33 KB. The text a FETCH or a SEARCH needs is the names', read by number.
 *
 * IMPLEMENTATION NOTES
 *   - One table of names for the process (lists of different users share only the table):
 *     a name's exact spelling once, counted by the lists that hold it, freed with the last
 *     and its number given out again, the lowest free one first (a heap), so that numbers
 *     stay low and lists narrow unless more than 65,536 names are held at once.
 *   - Lists are made and freed under one mutex (a list's names are looked up, counted or
 *     released together); reading a list takes none: a number a live list holds stays its
 *     name, and the blocks of the number -> name table never move, so a reader indexes them
 *     while a maker adds a block.
 *   - The spelling -> number lookup is open addressing keyed by libsodium's SipHash
 *     (crypto_shorthash) under a key drawn once per process, since a client chooses the
 *     names; a slot keeps the hash's high 32 bits and the number + 1, at most half the slots
 *     are used, and a freed name's slot is emptied by shifting its run back (no tombstones to
 *     fill the table over a long uptime).
 *   - Written here rather than taken from a library: glib (which GMime brings) has a hash
 *     table and a string chunk, but neither counts references per entry nor gives numbers
 *     that a lock-free reader can resolve.
 */
#include "imap_kw.h"

#include "buf.h"

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct imap_kw {
    atomic_size_t refs;
    uint32_t count;
    uint32_t wide; /* 1: each number is two of ids (low half first); 0: one */
    uint16_t ids[];
};

const struct imap_kw imap_kw_none = {.count = 0};

struct imap_kw_name {
    size_t holders; /* lists holding it (under imap_kw_lock) */
    size_t len;
    char text[];
};

/* Numbers below IMAP_KW_BLOCK * IMAP_KW_BLOCKS (16,777,216 names at once); a block (16 KB) is
 * made on first use and kept for the process's life: one for each 2,048 names the process
 * held at once at its most. */
#define IMAP_KW_BLOCK  2048u
#define IMAP_KW_BLOCKS 8192u
typedef _Atomic(struct imap_kw_name *) imap_kw_slot_t;
static _Atomic(imap_kw_slot_t *) imap_kw_blocks[IMAP_KW_BLOCKS];

static pthread_mutex_t imap_kw_lock = PTHREAD_MUTEX_INITIALIZER;
/* Under imap_kw_lock: the lookup (see the notes), the free numbers, the next new one. */
static uint64_t *imap_kw_slots;
static size_t imap_kw_slot_count; /* a power of two, or 0 */
static size_t imap_kw_held;       /* names held */
static uint32_t *imap_kw_free;
static size_t imap_kw_free_count, imap_kw_free_cap;
static uint32_t imap_kw_next;

static atomic_size_t imap_kw_total_bytes;

static unsigned char imap_kw_hash_key[crypto_shorthash_KEYBYTES];
static pthread_once_t imap_kw_hash_once = PTHREAD_ONCE_INIT;

static void imap_kw_hash_init(void)
{
    /* sodium_init() fails only without a random source; the key then stays zero, which keeps
     * every lookup right and gives up only the protection against chosen names. */
    if (sodium_init() >= 0) {
        randombytes_buf(imap_kw_hash_key, sizeof imap_kw_hash_key);
    }
}

uint64_t imap_kw_siphash(const void *bytes, size_t len)
{
    unsigned char out[crypto_shorthash_BYTES];
    uint64_t h;
    (void)pthread_once(&imap_kw_hash_once, imap_kw_hash_init);
    crypto_shorthash(out, bytes, len, imap_kw_hash_key);
    memcpy(&h, out, sizeof h);
    return h;
}

static struct imap_kw_name *imap_kw_name_of(uint32_t id)
{
    imap_kw_slot_t *block =
        atomic_load_explicit(&imap_kw_blocks[id / IMAP_KW_BLOCK], memory_order_acquire);
    return atomic_load_explicit(&block[id % IMAP_KW_BLOCK], memory_order_acquire);
}

static uint32_t imap_kw_id(const struct imap_kw *kw, size_t i)
{
    return kw->wide ? ((uint32_t)kw->ids[2 * i] | (uint32_t)kw->ids[2 * i + 1] << 16) : kw->ids[i];
}

#define IMAP_KW_SLOT(h, id)      (((h)&0xffffffff00000000u) | ((uint64_t)(id) + 1))
#define IMAP_KW_SLOT_ID(slot)    ((uint32_t)((slot)&0xffffffffu) - 1)
#define IMAP_KW_HOME(slot, mask) ((size_t)((slot) >> 32) & (mask))

/* Under the lock: the slot holding the name, or the empty slot where it would go. */
static uint64_t *imap_kw_find(const char *name, size_t len, uint64_t h)
{
    size_t mask = imap_kw_slot_count - 1;
    for (size_t i = IMAP_KW_HOME(h, mask);; i = (i + 1) & mask) {
        uint64_t *slot = &imap_kw_slots[i];
        if (*slot == 0) {
            return slot;
        }
        if ((*slot >> 32) == (h >> 32)) {
            const struct imap_kw_name *n = imap_kw_name_of(IMAP_KW_SLOT_ID(*slot));
            if (n->len == len && memcmp(n->text, name, len) == 0) {
                return slot;
            }
        }
    }
}

/* Under the lock: room in the lookup for one more name (at most half full). */
static int imap_kw_room(void)
{
    if ((imap_kw_held + 1) * 2 <= imap_kw_slot_count) {
        return 0;
    }
    size_t count = imap_kw_slot_count != 0 ? imap_kw_slot_count * 2 : 256;
    uint64_t *slots = calloc(count, sizeof *slots);
    if (slots == NULL) {
        return -1;
    }
    for (size_t i = 0; i < imap_kw_slot_count; i++) {
        if (imap_kw_slots[i] != 0) {
            size_t j = IMAP_KW_HOME(imap_kw_slots[i], count - 1);
            while (slots[j] != 0) {
                j = (j + 1) & (count - 1);
            }
            slots[j] = imap_kw_slots[i];
        }
    }
    free(imap_kw_slots);
    imap_kw_slots = slots;
    imap_kw_slot_count = count;
    return 0;
}

/* Under the lock: the free numbers are a binary min-heap, so a new name takes the lowest. */
static void imap_kw_free_push(uint32_t id)
{
    size_t i = imap_kw_free_count++;
    while (i > 0 && imap_kw_free[(i - 1) / 2] > id) {
        imap_kw_free[i] = imap_kw_free[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    imap_kw_free[i] = id;
}

static uint32_t imap_kw_free_pop(void)
{
    uint32_t top = imap_kw_free[0], last = imap_kw_free[--imap_kw_free_count];
    size_t i = 0, n = imap_kw_free_count;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && imap_kw_free[c + 1] < imap_kw_free[c]) {
            c++;
        }
        if (imap_kw_free[c] >= last) {
            break;
        }
        imap_kw_free[i] = imap_kw_free[c];
        i = c;
    }
    if (n > 0) {
        imap_kw_free[i] = last;
    }
    return top;
}

/* Under the lock: a number no name has, its block made. UINT32_MAX if none can be had. */
static uint32_t imap_kw_take_id(void)
{
    if (imap_kw_free_count > 0) {
        return imap_kw_free_pop();
    }
    if (imap_kw_next >= IMAP_KW_BLOCK * IMAP_KW_BLOCKS) {
        return UINT32_MAX;
    }
    size_t b = imap_kw_next / IMAP_KW_BLOCK;
    if (atomic_load_explicit(&imap_kw_blocks[b], memory_order_relaxed) == NULL) {
        imap_kw_slot_t *block = calloc(IMAP_KW_BLOCK, sizeof *block);
        if (block == NULL) {
            return UINT32_MAX;
        }
        atomic_store_explicit(&imap_kw_blocks[b], block, memory_order_release);
    }
    return imap_kw_next++;
}

/* Under the lock: the number of the name (len bytes at name), held once more; UINT32_MAX out
 * of memory. */
static uint32_t imap_kw_hold(const char *name, size_t len)
{
    uint64_t h = imap_kw_siphash(name, len);
    if (imap_kw_room() != 0) {
        return UINT32_MAX;
    }
    uint64_t *slot = imap_kw_find(name, len, h);
    if (*slot != 0) {
        uint32_t id = IMAP_KW_SLOT_ID(*slot);
        imap_kw_name_of(id)->holders++;
        return id;
    }
    struct imap_kw_name *n = malloc(sizeof *n + len + 1);
    uint32_t id = n != NULL ? imap_kw_take_id() : UINT32_MAX;
    if (id == UINT32_MAX) {
        free(n);
        return UINT32_MAX;
    }
    n->holders = 1;
    n->len = len;
    memcpy(n->text, name, len);
    n->text[len] = '\0';
    imap_kw_slot_t *block =
        atomic_load_explicit(&imap_kw_blocks[id / IMAP_KW_BLOCK], memory_order_relaxed);
    atomic_store_explicit(&block[id % IMAP_KW_BLOCK], n, memory_order_release);
    *slot = IMAP_KW_SLOT(h, id);
    imap_kw_held++;
    atomic_fetch_add_explicit(&imap_kw_total_bytes, sizeof *n + len + 1, memory_order_relaxed);
    return id;
}

/* Under the lock: the lookup's slot of name number id emptied, the run after it shifted back
 * so that every name stays reachable from its home slot. */
static void imap_kw_unslot(const struct imap_kw_name *n, uint32_t id)
{
    size_t mask = imap_kw_slot_count - 1;
    uint64_t h = imap_kw_siphash(n->text, n->len);
    size_t i = IMAP_KW_HOME(h, mask);
    while (IMAP_KW_SLOT_ID(imap_kw_slots[i]) != id) {
        i = (i + 1) & mask;
    }
    for (size_t j = (i + 1) & mask; imap_kw_slots[j] != 0; j = (j + 1) & mask) {
        size_t home = IMAP_KW_HOME(imap_kw_slots[j], mask);
        /* j's entry may move to the hole at i unless its home lies cyclically in (i, j] */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            imap_kw_slots[i] = imap_kw_slots[j];
            i = j;
        }
    }
    imap_kw_slots[i] = 0;
}

/* Under the lock: one holder of name number id less; the last frees the name and its number.
 * The number goes on the free heap, which always has room: it was sized as numbers were
 * given out. */
static void imap_kw_release(uint32_t id)
{
    struct imap_kw_name *n = imap_kw_name_of(id);
    if (--n->holders > 0) {
        return;
    }
    imap_kw_unslot(n, id);
    imap_kw_slot_t *block =
        atomic_load_explicit(&imap_kw_blocks[id / IMAP_KW_BLOCK], memory_order_relaxed);
    atomic_store_explicit(&block[id % IMAP_KW_BLOCK], NULL, memory_order_relaxed);
    imap_kw_free_push(id);
    imap_kw_held--;
    atomic_fetch_sub_explicit(&imap_kw_total_bytes, sizeof *n + n->len + 1, memory_order_relaxed);
    free(n);
}

/* Under the lock: room on the free heap for every number given out so far and count more,
 * so that a release never needs memory. */
static int imap_kw_free_room(size_t count)
{
    size_t need = (size_t)imap_kw_next + count;
    if (need <= imap_kw_free_cap) {
        return 0;
    }
    size_t cap = imap_kw_free_cap != 0 ? imap_kw_free_cap : 256;
    while (cap < need) {
        cap *= 2;
    }
    uint32_t *grown = realloc(imap_kw_free, cap * sizeof *grown);
    if (grown == NULL) {
        return -1;
    }
    imap_kw_free = grown;
    imap_kw_free_cap = cap;
    return 0;
}

/* The next name of text at *p (spaces before it skipped): its start, its length in *len; NULL
 * at the end. */
static const char *imap_kw_next_name(const char **p, size_t *len)
{
    const char *s = *p;
    while (*s == ' ') {
        s++;
    }
    if (*s == '\0') {
        *p = s;
        return NULL;
    }
    *len = strcspn(s, " ");
    *p = s + *len;
    return s;
}

/* 1 if kw holds exactly the names of text, in order. */
static int imap_kw_is_text(const struct imap_kw *kw, const char *text)
{
    const char *p = text, *name;
    size_t len, i = 0;
    while ((name = imap_kw_next_name(&p, &len)) != NULL) {
        const struct imap_kw_name *n;
        if (i >= kw->count || (n = imap_kw_name_of(imap_kw_id(kw, i)))->len != len ||
            memcmp(n->text, name, len) != 0) {
            return 0;
        }
        i++;
    }
    return i == kw->count;
}

const struct imap_kw *imap_kw_new(const char *text, const struct imap_kw *like)
{
    size_t count = 0, len;
    for (const char *p = text != NULL ? text : ""; imap_kw_next_name(&p, &len) != NULL;) {
        count++;
    }
    if (count == 0) {
        return IMAP_KW_NONE;
    }
    if (like != NULL && like != IMAP_KW_NONE && imap_kw_is_text(like, text)) {
        return imap_kw_ref(like);
    }
    if (count > UINT32_MAX) {
        return NULL;
    }
    uint32_t small[256];
    uint32_t *ids = count <= 256 ? small : malloc(count * sizeof *ids);
    if (ids == NULL) {
        return NULL;
    }
    size_t held = 0;
    uint32_t top = 0;
    pthread_mutex_lock(&imap_kw_lock);
    if (imap_kw_free_room(count) == 0) {
        const char *p = text, *name;
        while (held < count && (name = imap_kw_next_name(&p, &len)) != NULL &&
               (ids[held] = imap_kw_hold(name, len)) != UINT32_MAX) {
            top = ids[held] > top ? ids[held] : top;
            held++;
        }
    }
    pthread_mutex_unlock(&imap_kw_lock);
    int wide = top > UINT16_MAX;
    size_t size = sizeof(struct imap_kw) + count * (wide ? 4 : 2);
    struct imap_kw *kw = held == count ? malloc(size) : NULL;
    if (kw == NULL) {
        pthread_mutex_lock(&imap_kw_lock);
        for (size_t i = 0; i < held; i++) {
            imap_kw_release(ids[i]);
        }
        pthread_mutex_unlock(&imap_kw_lock);
    } else {
        atomic_init(&kw->refs, 1);
        kw->count = (uint32_t)count;
        kw->wide = (uint32_t)wide;
        for (size_t i = 0; i < count; i++) {
            if (wide) {
                kw->ids[2 * i] = (uint16_t)(ids[i] & 0xffffu);
                kw->ids[2 * i + 1] = (uint16_t)(ids[i] >> 16);
            } else {
                kw->ids[i] = (uint16_t)ids[i];
            }
        }
        atomic_fetch_add_explicit(&imap_kw_total_bytes, size, memory_order_relaxed);
    }
    if (ids != small) {
        free(ids);
    }
    return kw;
}

const struct imap_kw *imap_kw_ref(const struct imap_kw *kw)
{
    if (kw != NULL && kw != IMAP_KW_NONE) {
        struct imap_kw *k = (struct imap_kw *)(uintptr_t)kw;
        atomic_fetch_add_explicit(&k->refs, 1, memory_order_relaxed);
    }
    return kw;
}

void imap_kw_unref(const struct imap_kw *kw)
{
    if (kw == NULL || kw == IMAP_KW_NONE) {
        return;
    }
    struct imap_kw *k = (struct imap_kw *)(uintptr_t)kw;
    if (atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) != 1) {
        return;
    }
    pthread_mutex_lock(&imap_kw_lock);
    for (size_t i = 0; i < k->count; i++) {
        imap_kw_release(imap_kw_id(k, i));
    }
    pthread_mutex_unlock(&imap_kw_lock);
    atomic_fetch_sub_explicit(&imap_kw_total_bytes,
                              sizeof *k + (size_t)k->count * (k->wide ? 4 : 2),
                              memory_order_relaxed);
    free(k);
}

size_t imap_kw_count(const struct imap_kw *kw)
{
    return kw != NULL ? kw->count : 0;
}

const char *imap_kw_name(const struct imap_kw *kw, size_t i, size_t *len)
{
    const struct imap_kw_name *n = imap_kw_name_of(imap_kw_id(kw, i));
    *len = n->len;
    return n->text;
}

int imap_kw_equal(const struct imap_kw *a, const struct imap_kw *b)
{
    if (a == b) {
        return 1;
    }
    if (imap_kw_count(a) != imap_kw_count(b)) {
        return 0;
    }
    /* one table for the process: the same spelling is the same number */
    for (size_t i = 0; i < a->count; i++) {
        if (imap_kw_id(a, i) != imap_kw_id(b, i)) {
            return 0;
        }
    }
    return 1;
}

int imap_kw_has(const struct imap_kw *kw, const char *word, size_t len)
{
    for (size_t i = 0; i < imap_kw_count(kw); i++) {
        size_t n;
        const char *name = imap_kw_name(kw, i, &n);
        if (n == len && strncasecmp(name, word, len) == 0) {
            return 1;
        }
    }
    return 0;
}

void imap_kw_out(struct buf *out, const struct imap_kw *kw)
{
    for (size_t i = 0; i < imap_kw_count(kw); i++) {
        size_t n;
        const char *name = imap_kw_name(kw, i, &n);
        if (i > 0) {
            BUF_LIT(out, " ");
        }
        buf_add(out, name, n);
    }
}

size_t imap_kw_text_len(const struct imap_kw *kw)
{
    size_t total = 0;
    for (size_t i = 0; i < imap_kw_count(kw); i++) {
        size_t n;
        (void)imap_kw_name(kw, i, &n);
        total += n + (i > 0);
    }
    return total;
}

char *imap_kw_text_put(const struct imap_kw *kw, char *q)
{
    for (size_t i = 0; i < imap_kw_count(kw); i++) {
        size_t n;
        const char *name = imap_kw_name(kw, i, &n);
        if (i > 0) {
            *q++ = ' ';
        }
        memcpy(q, name, n);
        q += n;
    }
    return q;
}

uint64_t imap_kw_hash(const struct imap_kw *kw)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a over the numbers */
    for (size_t i = 0; i < imap_kw_count(kw); i++) {
        h = (h ^ imap_kw_id(kw, i)) * 1099511628211u;
    }
    return h;
}

size_t imap_kw_bytes(void)
{
    return atomic_load_explicit(&imap_kw_total_bytes, memory_order_relaxed);
}

size_t imap_kw_names_held(void)
{
    pthread_mutex_lock(&imap_kw_lock);
    size_t held = imap_kw_held;
    pthread_mutex_unlock(&imap_kw_lock);
    return held;
}
