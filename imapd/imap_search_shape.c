/*
 * imap_search_shape.c -- a parsed SEARCH program put in the shape its evaluation
 * (imap_search.c) wants: flat, and with no key twice among the keys of one AND or OR.
 *
 * IMPLEMENTATION NOTES
 *   - Flat: an OR among an OR's keys gives its keys to it, and a list (AND) among an AND's
 *     likewise; a list of one key is that key; NOT NOT x is x. So "OR OR OR a b c d",
 *     "OR a OR b OR c d" and "((a))" nest one level whatever their length, and what is left
 *     nested is operators alternating (NOT OR NOT OR ...), which no client needs deep.
 *     Children are made after their parent (keys[] is in prefix order), so one pass from the
 *     last key back finds every child already flat.
 *   - No repeats: a key written again among the keys of the same AND or OR is the same set
 *     (x AND x = x OR x = x), and answering it costs what the first did (a scan of the
 *     mailbox for a text key): a filter built by appending terms sent 200 copies of SUBJECT
 *     a, 76 ms at 10,000 messages against Dovecot's 61, which merges them. Keys are the same
 *     when their kind and arguments are the same bytes, and an AND, OR or NOT when their
 *     keys are the same in the same order; "a" and "A" stay two keys (the same set, but not
 *     worth folding here). Each AND's and OR's keys are looked up one by one in a hash
 *     table of the keys before them (a hash of each key's fields and its keys' hashes); only
 *     keys of one hash are compared whole, and a key that collides with too many is simply
 *     kept. The keys kept stay in the client's order. Innermost first, so that two ORs that
 *     differ only by a repeat compare (and hash) equal. An AND or OR left with one key is
 *     that key (OR a a is a).
 *   - The comparison recurses once a level of nesting, which the caller has already
 *     bounded (IMAP_SEARCH_DEPTH_MAX): deeper programs are refused before repeats are
 *     looked for.
 *   - Keys left out of the tree (an OR that gave its keys to its parent, a repeat) become
 *     ALL: the batches that read keys[] as a whole (imap_search.c) then never answer a key
 *     the program no longer has.
 */
#include "imap_search_shape.h"

#include <stdlib.h>
#include <string.h>

/* The program made flat, in place. last[] (count entries) is scratch: each key's last child,
 * for splicing in O(1); depth[] gets each key's depth. Returns the depth of the flat
 * program. */
static uint32_t imap_search_flatten(struct imap_search *s, uint32_t *last, uint32_t *depth)
{
    for (size_t k = s->count; k-- > 0;) {
        struct imap_search_key *key = &s->keys[k];
        depth[k] = 1;
        last[k] = IMAP_NODE_NONE;
        if (key->op != IMAP_SK_AND && key->op != IMAP_SK_OR && key->op != IMAP_SK_NOT) {
            continue;
        }
        uint32_t head = IMAP_NODE_NONE, tail = IMAP_NODE_NONE;
        for (uint32_t c = key->child; c != IMAP_NODE_NONE;) {
            uint32_t next = s->keys[c].next;
            while (s->keys[c].op == IMAP_SK_AND && s->keys[c].child == last[c]) {
                c = s->keys[c].child; /* a list of one key: the key */
            }
            uint32_t first = c, end = c, below = depth[c] + 1;
            if (s->keys[c].op == key->op && key->op != IMAP_SK_NOT) {
                first = s->keys[c].child; /* OR in OR, AND in AND: its keys are ours */
                end = last[c];
                below = depth[c]; /* its keys' depth + 1 */
            }
            if (tail == IMAP_NODE_NONE) {
                head = first;
            } else {
                s->keys[tail].next = first;
            }
            tail = end;
            depth[k] = below > depth[k] ? below : depth[k];
            c = next;
        }
        s->keys[tail].next = IMAP_NODE_NONE;
        key->child = head;
        last[k] = tail;
        if (key->op == IMAP_SK_NOT && s->keys[head].op == IMAP_SK_NOT) {
            key->op = IMAP_SK_AND; /* NOT NOT x: a list of one key, x, which the parent unwraps */
            key->child = last[k] = s->keys[head].child;
            depth[k] = depth[key->child] + 1;
        }
    }
    return depth[0];
}

static int imap_search_bytes_cmp(const char *a, size_t a_len, const char *b, size_t b_len)
{
    if (a_len != b_len) {
        return a_len < b_len ? -1 : 1;
    }
    return a_len == 0 ? 0 : memcmp(a, b, a_len);
}

#define IMAP_SEARCH_CMP(x, y)                                                                      \
    do {                                                                                           \
        if ((x) != (y)) {                                                                          \
            return (x) < (y) ? -1 : 1;                                                             \
        }                                                                                          \
    } while (0)

static int imap_search_set_cmp(const struct imap_seqset *a, const struct imap_seqset *b)
{
    if (a == NULL || b == NULL) {
        return a == b ? 0 : a == NULL ? -1 : 1;
    }
    IMAP_SEARCH_CMP(a->count, b->count);
    IMAP_SEARCH_CMP(a->has_star, b->has_star);
    IMAP_SEARCH_CMP(a->star_low, b->star_low);
    IMAP_SEARCH_CMP(a->star_high, b->star_high);
    for (size_t i = 0; i < a->count; i++) {
        IMAP_SEARCH_CMP(a->ranges[i].first, b->ranges[i].first);
        IMAP_SEARCH_CMP(a->ranges[i].last, b->ranges[i].last);
    }
    return 0;
}

/* A total order on keys, 0 for the same key (see "No repeats"). */
static int imap_search_key_cmp(const struct imap_search *s, uint32_t a, uint32_t b)
{
    const struct imap_search_key *x = &s->keys[a], *y = &s->keys[b];
    IMAP_SEARCH_CMP(x->op, y->op);
    IMAP_SEARCH_CMP(x->flags, y->flags);
    IMAP_SEARCH_CMP(x->number, y->number);
    int c = imap_search_bytes_cmp(x->str, x->str_len, y->str, y->str_len);
    if (c == 0) {
        c = imap_search_bytes_cmp(x->str2, x->str2_len, y->str2, y->str2_len);
    }
    if (c == 0) {
        c = imap_search_set_cmp(x->set, y->set);
    }
    uint32_t p = x->child, q = y->child;
    for (; c == 0 && p != IMAP_NODE_NONE && q != IMAP_NODE_NONE;
         p = s->keys[p].next, q = s->keys[q].next) {
        c = imap_search_key_cmp(s, p, q);
    }
    if (c == 0 && p != q) {
        c = p == IMAP_NODE_NONE ? -1 : 1; /* the shorter list first */
    }
    return c;
}

/* FNV-1a (64 bits) of n bytes, continuing h: a key's fields hashed so that repeats meet in a
 * table (a few lines: the libraries at hand hash NUL-terminated strings, not a struct's
 * fields). */
static uint64_t imap_search_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 1099511628211u;
    }
    return h;
}

/* Key k's hash: its fields and, in order, its keys' hashes (made before). Equal keys
 * (imap_search_key_cmp 0) hash alike; never 0 (which marks a dropped key). */
static uint64_t imap_search_key_hash(const struct imap_search *s, uint32_t k)
{
    const struct imap_search_key *x = &s->keys[k];
    uint32_t op = (uint32_t)x->op;
    uint64_t h = imap_search_fnv(14695981039346656037u, &op, sizeof op);
    h = imap_search_fnv(h, &x->flags, sizeof x->flags);
    h = imap_search_fnv(h, &x->number, sizeof x->number);
    h = imap_search_fnv(h, &x->str_len, sizeof x->str_len);
    h = x->str_len > 0 ? imap_search_fnv(h, x->str, x->str_len) : h;
    h = imap_search_fnv(h, &x->str2_len, sizeof x->str2_len);
    h = x->str2_len > 0 ? imap_search_fnv(h, x->str2, x->str2_len) : h;
    if (x->set != NULL) {
        h = imap_search_fnv(h, &x->set->count, sizeof x->set->count);
        for (size_t i = 0; i < x->set->count; i++) {
            h = imap_search_fnv(h, &x->set->ranges[i].first, sizeof x->set->ranges[i].first);
            h = imap_search_fnv(h, &x->set->ranges[i].last, sizeof x->set->ranges[i].last);
        }
    }
    for (uint32_t c = x->child; c != IMAP_NODE_NONE; c = s->keys[c].next) {
        h = imap_search_fnv(h, &s->keys[c].hash, sizeof s->keys[c].hash);
    }
    return h | 1;
}

/* An AND or OR among key k's keys left with one key (its others were repeats) replaced by that
 * key, as the flattening replaces a list of one. */
static void imap_search_unwrap(struct imap_search *s, uint32_t k)
{
    uint32_t *link = &s->keys[k].child;
    while (*link != IMAP_NODE_NONE) {
        uint32_t c = *link, next = s->keys[c].next;
        while ((s->keys[c].op == IMAP_SK_AND || s->keys[c].op == IMAP_SK_OR) &&
               s->keys[c].child != IMAP_NODE_NONE &&
               s->keys[s->keys[c].child].next == IMAP_NODE_NONE) {
            c = s->keys[c].child;
        }
        s->keys[c].next = next;
        *link = c;
        link = &s->keys[c].next;
    }
}

/* Key k's repeated keys unlinked (the first of each kept), their hash set to 0. Each key is
 * looked up by its hash among the keys before it, in table[] (open addressing; at least twice
 * as many slots as k has keys): O(keys); sorting them by whole comparisons instead (qsort)
 * doubled the parse of an OR of 3,000 distinct keys. Keys of one hash are compared whole. A key
 * that meets more than IMAP_SEARCH_COLLISIONS_MAX other keys of its hash (only crafted collisions
 * do) is kept as it is: dropping a repeat only saves work, so giving up is always right. */
#define IMAP_SEARCH_COLLISIONS_MAX 16
static void imap_search_dedupe_one(struct imap_search *s, uint32_t k, uint32_t *table)
{
    uint32_t n = 0, slots = 1, repeats = 0;
    for (uint32_t c = s->keys[k].child; c != IMAP_NODE_NONE; c = s->keys[c].next) {
        n++;
    }
    if (n < 2) {
        return;
    }
    while (slots < 2 * n) {
        slots <<= 1;
    }
    memset(table, 0xff, slots * sizeof *table); /* IMAP_NODE_NONE: empty */
    for (uint32_t c = s->keys[k].child; c != IMAP_NODE_NONE; c = s->keys[c].next) {
        uint64_t h = s->keys[c].hash;
        uint32_t slot = (uint32_t)(h ^ (h >> 32)) & (slots - 1), collisions = 0;
        while (table[slot] != IMAP_NODE_NONE) {
            uint32_t d = table[slot];
            if (s->keys[d].hash == h) {
                if (imap_search_key_cmp(s, d, c) == 0) {
                    s->keys[c].hash = 0;
                    repeats++;
                    break;
                }
                if (++collisions > IMAP_SEARCH_COLLISIONS_MAX) {
                    break;
                }
            }
            slot = (slot + 1) & (slots - 1);
        }
        if (s->keys[c].hash != 0 && table[slot] == IMAP_NODE_NONE) {
            table[slot] = c;
        }
    }
    if (repeats == 0) {
        return;
    }
    uint32_t *link = &s->keys[k].child;
    for (uint32_t c = *link; c != IMAP_NODE_NONE; c = s->keys[c].next) {
        if (s->keys[c].hash != 0) {
            *link = c;
            link = &s->keys[c].next;
        }
    }
    *link = IMAP_NODE_NONE;
}

/* The keys reachable from the top level, each before its keys (order, count entries), and
 * how many; stack is scratch of count entries. */
static size_t imap_search_reachable(const struct imap_search *s, uint32_t *order, uint32_t *stack)
{
    size_t n = 0, top = 0;
    stack[top++] = 0;
    while (top > 0) {
        uint32_t k = stack[--top];
        order[n++] = k;
        for (uint32_t c = s->keys[k].child; c != IMAP_NODE_NONE; c = s->keys[c].next) {
            stack[top++] = c; /* a tree: each key is pushed once, so count entries suffice */
        }
    }
    return n;
}

int imap_search_shape(struct imap_search *s, uint32_t depth_max)
{
    /* One block: two arrays of count entries (the flattening's, then the walks' order and
     * stack), then the table (imap_search_dedupe_one: 2 x keys slots, rounded up to a power
     * of two, for an AND or OR of up to count - 1 keys) */
    size_t slots = 1;
    while (slots < 2 * s->count) {
        slots <<= 1;
    }
    uint32_t *scratch = malloc((s->count * 2 + slots) * sizeof *scratch);
    int depth = scratch != NULL ? (int)imap_search_flatten(s, scratch, scratch + s->count) : -1;
    if (depth <= 0 || (uint32_t)depth > depth_max) {
        free(scratch);
        return depth;
    }
    uint32_t *table = scratch + 2 * s->count;
    size_t n = imap_search_reachable(s, scratch, scratch + s->count);
    for (size_t i = n; i-- > 0;) { /* innermost first */
        uint32_t k = scratch[i];
        imap_search_unwrap(s, k); /* its keys have lost their repeats already */
        if (s->keys[k].op == IMAP_SK_AND || s->keys[k].op == IMAP_SK_OR) {
            imap_search_dedupe_one(s, k, table);
        }
        s->keys[k].hash = imap_search_key_hash(s, k);
    }
    /* what is no longer in the tree becomes ALL (marked by a hash of 0 first) */
    for (size_t k = 0; k < s->count; k++) {
        s->keys[k].hash = 0;
    }
    n = imap_search_reachable(s, scratch, scratch + s->count);
    for (size_t i = 0; i < n; i++) {
        s->keys[scratch[i]].hash = 1;
    }
    for (size_t k = 0; k < s->count; k++) {
        if (s->keys[k].hash == 0) {
            s->keys[k].op = IMAP_SK_ALL;
        }
    }
    free(scratch);
    return depth;
}
