/*
 * imap_sort_rank.c -- ranks of a criterion's keys, in full or for entries added since
 * (imap_sort_rank.h).
 *
 * WHY THIS SHAPE
 *   A full ranking sorts 100,000 keys; most of the comparisons are settled by the keys'
 *   first 8 bytes, so each entry is sorted as a 16-byte item with those bytes as one
 *   big-endian number (a byte after the key's NUL is 0, so numbers compare as the prefixes
 *   do) and strcmp() only on equal numbers. New mail between two SORTs is a few entries
 *   among many: they are sorted alone and put in place in the old order by binary search,
 *   the old order read back from the old ranks by a counting sort.
 */
#include "imap_sort_rank.h"

#include "mailvault.h"

#include <stdlib.h>
#include <string.h>

/* An entry as sorted: its key's first 8 bytes as a number, and the entry. */
struct sort_rank_item {
    uint64_t lead;
    uint32_t entry;
};

static const char *sort_rank_key(const struct imap_sort_keys *k, uint32_t e)
{
    return k->bytes + k->at[e];
}

/* qsort_r's order of items: by key, then by entry (a stable order). */
static int sort_rank_cmp(const void *pa, const void *pb, void *arg)
{
    const struct sort_rank_item *a = pa, *b = pb;
    if (a->lead != b->lead) {
        return a->lead < b->lead ? -1 : 1;
    }
    int r = strcmp(sort_rank_key(arg, a->entry), sort_rank_key(arg, b->entry));
    return r != 0 ? r : a->entry < b->entry ? -1 : a->entry > b->entry;
}

/* Entries first..first+n sorted by key into order[0..n): MV_OK or MV_ENOMEM. */
static int sort_rank_order(const struct imap_sort_keys *k, size_t first, size_t n, uint32_t *order)
{
    struct sort_rank_item *items = malloc((n > 0 ? n : 1) * sizeof *items);
    if (items == NULL) {
        return MV_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        items[i].entry = (uint32_t)(first + i);
        items[i].lead = imap_sort_key_lead(sort_rank_key(k, items[i].entry));
    }
    qsort_r(items, n, sizeof *items, sort_rank_cmp, (void *)k);
    for (size_t i = 0; i < n; i++) {
        order[i] = items[i].entry;
    }
    free(items);
    return MV_OK;
}

/* The ranks from an order of every entry; old_below: entries below it have their old ranks
 * (among themselves) in rank, and two of them side by side are equal exactly when those are. */
static void sort_rank_assign(const struct imap_sort_keys *k,
                             const uint32_t *order,
                             size_t count,
                             size_t old_below,
                             uint32_t *rank)
{
    uint32_t place = 0, prev_old = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t e = order[i], old = e < old_below ? rank[e] : 0;
        if (i > 0) {
            uint32_t p = order[i - 1];
            int same = e < old_below && p < old_below
                           ? old == prev_old
                           : strcmp(sort_rank_key(k, e), sort_rank_key(k, p)) == 0;
            place = same ? place : (uint32_t)i;
        }
        prev_old = old;
        rank[e] = sort_rank_key(k, e)[0] == '\0' ? 0 : place + 1;
    }
}

int imap_sort_rank_all(const struct imap_sort_keys *k, size_t count, uint32_t *rank)
{
    uint32_t *order = malloc((count > 0 ? count : 1) * sizeof *order);
    if (order == NULL || sort_rank_order(k, 0, count, order) != MV_OK) {
        free(order);
        return MV_ENOMEM;
    }
    sort_rank_assign(k, order, count, 0, rank);
    free(order);
    return MV_OK;
}

/* The old entries' order (by key, then entry) read back from their ranks: a counting sort
 * (ranks are at most ranked). */
static int sort_rank_old_order(const uint32_t *rank, size_t ranked, uint32_t *order)
{
    size_t *start = calloc(ranked + 2, sizeof *start);
    if (start == NULL) {
        return MV_ENOMEM;
    }
    for (size_t e = 0; e < ranked; e++) {
        start[rank[e] + 1]++;
    }
    for (size_t r = 1; r < ranked + 2; r++) {
        start[r] += start[r - 1];
    }
    for (size_t e = 0; e < ranked; e++) {
        order[start[rank[e]]++] = (uint32_t)e; /* ascending entries: stable */
    }
    free(start);
    return MV_OK;
}

int imap_sort_rank_more(const struct imap_sort_keys *k, size_t ranked, size_t count, uint32_t *rank)
{
    if (ranked == 0 || ranked > count) {
        return imap_sort_rank_all(k, count, rank);
    }
    size_t fresh = count - ranked;
    uint32_t *old = malloc(ranked * sizeof *old);
    uint32_t *added = malloc((fresh > 0 ? fresh : 1) * sizeof *added);
    uint32_t *order = malloc(count * sizeof *order);
    int rc = old != NULL && added != NULL && order != NULL ? MV_OK : MV_ENOMEM;
    rc = rc == MV_OK ? sort_rank_old_order(rank, ranked, old) : rc;
    rc = rc == MV_OK ? sort_rank_order(k, ranked, fresh, added) : rc;
    if (rc == MV_OK) {
        size_t lo = 0, out = 0;
        for (size_t j = 0; j < fresh; j++) {
            /* the first old entry whose key is above the new one's (equal keys: old first) */
            const char *key = sort_rank_key(k, added[j]);
            size_t hi = ranked, from = lo;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(sort_rank_key(k, old[mid]), key) > 0) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            memcpy(order + out, old + from, (lo - from) * sizeof *order);
            out += lo - from;
            order[out++] = added[j];
        }
        memcpy(order + out, old + lo, (ranked - lo) * sizeof *order);
        sort_rank_assign(k, order, count, ranked, rank);
    }
    free(old);
    free(added);
    free(order);
    return rc;
}
