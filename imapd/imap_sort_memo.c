/*
 * imap_sort_memo.c -- the saved form of SORT's kept keys: encode and decode
 * (imap_sort_memo.h has the format and the reasons). Every buffer that held keys (subjects
 * and addresses) is wiped before it is freed.
 */
#include "imap_sort_memo.h"

#include "imap_zframe.h"
#include "mailvault.h"
#include "varint.h"

#include <stdlib.h>
#include <string.h>

#define SORT_MEMO_TAG     "MVSK\x01"
#define SORT_MEMO_TAG_LEN 5
/* zstd's level: the fast end (a close saves the form) */
#define SORT_MEMO_LEVEL 3

static void sort_memo_wipe_free(void *p, size_t len)
{
    if (p != NULL) {
        explicit_bzero(p, len);
        free(p);
    }
}

unsigned imap_sort_memo_kinds(void)
{
    unsigned kinds = 1u << IMAP_SORT_DATE;
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        kinds |= imap_sort_is_string((enum imap_sort_by)by) ? 1u << by : 0u;
    }
    return kinds;
}

void imap_sort_table_free(struct imap_sort_table *t)
{
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        sort_memo_wipe_free(t->keys[by].bytes, t->keys[by].used);
        free(t->keys[by].at);
        free(t->keys[by].rank);
    }
    free(t->uids);
    free(t->sent);
    *t = (struct imap_sort_table){0};
}

/* The kinds whose ranks cover every entry. */
static unsigned sort_memo_ranked(const struct imap_sort_table *t)
{
    unsigned ranked = 0;
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        const struct imap_sort_keys *k = &t->keys[by];
        ranked |= ((t->kinds >> by) & 1u) && imap_sort_is_string((enum imap_sort_by)by) &&
                          k->rank != NULL && k->ranked == t->count
                      ? 1u << by
                      : 0u;
    }
    return ranked;
}

/* The columns as the frame's content: *plain malloc'd, *plain_len. */
static int sort_memo_plain(const struct imap_sort_table *t,
                           unsigned ranked,
                           unsigned char **plain,
                           size_t *plain_len)
{
    size_t need = t->count * 2 * IMAP_VARINT_MAX; /* uid steps and dates */
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        if ((t->kinds >> by) & 1u && imap_sort_is_string((enum imap_sort_by)by)) {
            need += t->keys[by].used + t->count * 2 * IMAP_VARINT_MAX; /* lengths, ranks */
        }
    }
    unsigned char *p = malloc(need > 0 ? need : 1), *q = p;
    if (p == NULL) {
        return MV_ENOMEM;
    }
    uint32_t prev = 0;
    for (size_t i = 0; i < t->count; i++) {
        if (t->uids[i] <= prev || t->uids[i] > t->last_uid) {
            free(p); /* nothing written but UIDs yet */
            return MV_EINVAL;
        }
        q = imap_varint_put(q, t->uids[i] - prev);
        prev = t->uids[i];
    }
    int64_t last_sent = 0;
    for (size_t i = 0; (t->kinds >> IMAP_SORT_DATE) & 1u && i < t->count; i++) {
        if (t->sent[i] == MV_SENT_NONE) {
            q = imap_varint_put(q, 0);
        } else {
            q = imap_varint_put(q,
                                imap_varint_zigzag((uint64_t)t->sent[i] - (uint64_t)last_sent) + 1);
            last_sent = t->sent[i];
        }
    }
    int rc = MV_OK;
    for (int by = 0; rc == MV_OK && by < IMAP_SORT_BY_COUNT; by++) {
        const struct imap_sort_keys *k = &t->keys[by];
        if (!((t->kinds >> by) & 1u) || !imap_sort_is_string((enum imap_sort_by)by)) {
            continue;
        }
        for (size_t i = 0; i < t->count; i++) {
            size_t n = strlen(k->bytes + k->at[i]);
            if (n >= IMAP_SORT_KEPT_KEY_MAX) {
                rc = MV_EINVAL;
                break;
            }
            q = imap_varint_put(q, n);
            memcpy(q, k->bytes + k->at[i], n);
            q += n;
        }
    }
    for (int by = 0; rc == MV_OK && by < IMAP_SORT_BY_COUNT; by++) {
        for (size_t i = 0; (ranked >> by) & 1u && i < t->count; i++) {
            q = imap_varint_put(q, t->keys[by].rank[i]);
        }
    }
    if (rc != MV_OK) {
        sort_memo_wipe_free(p, need);
        return rc;
    }
    *plain = p;
    *plain_len = (size_t)(q - p);
    return MV_OK;
}

int imap_sort_memo_encode(const struct imap_sort_table *t, unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    unsigned ranked = sort_memo_ranked(t);
    unsigned char *plain = NULL;
    size_t plain_len = 0;
    int rc = sort_memo_plain(t, ranked, &plain, &plain_len);
    if (rc != MV_OK) {
        return rc;
    }
    unsigned char head[SORT_MEMO_TAG_LEN + 5 * IMAP_VARINT_MAX];
    memcpy(head, SORT_MEMO_TAG, SORT_MEMO_TAG_LEN);
    unsigned char *q = imap_varint_put(head + SORT_MEMO_TAG_LEN, t->last_uid);
    q = imap_varint_put(q, t->count);
    q = imap_varint_put(q, t->kinds);
    q = imap_varint_put(q, ranked);
    q = imap_varint_put(q, plain_len);
    rc = imap_zframe_pack(head, (size_t)(q - head), plain, plain_len, SORT_MEMO_LEVEL, out, len);
    sort_memo_wipe_free(plain, plain_len);
    return rc;
}

/* One criterion's column of keys at *at into k (at allocated): its bytes' arena sized to
 * them once they are counted. */
static int sort_memo_key_column(const unsigned char **at,
                                const unsigned char *end,
                                size_t count,
                                struct imap_sort_keys *k)
{
    const unsigned char *p = *at;
    size_t bytes = 0;
    uint64_t v = 0;
    for (size_t i = 0; i < count; i++) {
        if (imap_varint_get(&p, end, &v) != 0 || v >= IMAP_SORT_KEPT_KEY_MAX ||
            v > (size_t)(end - p) || memchr(p, '\0', (size_t)v) != NULL) {
            return MV_ECORRUPT;
        }
        p += v;
        bytes += (size_t)v + 1; /* and its NUL */
    }
    k->cap = bytes > 0 ? bytes : 1;
    if ((k->bytes = malloc(k->cap)) == NULL) {
        return MV_ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        (void)imap_varint_get(at, end, &v); /* read above */
        k->at[i] = (uint32_t)k->used;
        memcpy(k->bytes + k->used, *at, (size_t)v);
        k->used += (size_t)v;
        k->bytes[k->used++] = '\0';
        *at += v;
    }
    return MV_OK;
}

/* The frame's columns (plain[at..end)) into t, whose arrays are allocated, every byte
 * accounted for. */
static int sort_memo_columns(const unsigned char *at,
                             const unsigned char *end,
                             unsigned ranked,
                             struct imap_sort_table *t)
{
    uint64_t uid = 0, v = 0;
    for (size_t i = 0; i < t->count; i++) {
        if (imap_varint_get(&at, end, &v) != 0 || v == 0 || v > t->last_uid - uid) {
            return MV_ECORRUPT;
        }
        uid += v;
        t->uids[i] = (uint32_t)uid;
    }
    uint64_t last_sent = 0;
    for (size_t i = 0; t->sent != NULL && i < t->count; i++) {
        if (imap_varint_get(&at, end, &v) != 0) {
            return MV_ECORRUPT;
        }
        if (v == 0) {
            t->sent[i] = MV_SENT_NONE;
        } else {
            last_sent += imap_varint_unzigzag(v - 1);
            t->sent[i] = (int64_t)last_sent;
            if (t->sent[i] == MV_SENT_NONE) {
                return MV_ECORRUPT; /* a date that reads as none */
            }
        }
    }
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        struct imap_sort_keys *k = &t->keys[by];
        if (k->at == NULL) {
            continue;
        }
        int rc = sort_memo_key_column(&at, end, t->count, k);
        if (rc != MV_OK) {
            return rc;
        }
    }
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        struct imap_sort_keys *k = &t->keys[by];
        for (size_t i = 0; (ranked >> by) & 1u && i < t->count; i++) {
            /* at most count, and 0 exactly for an empty key: any other damage gives a wrong
             * order, never a read out of bounds (imap_sort_rank_more counts by rank) */
            if (imap_varint_get(&at, end, &v) != 0 || v > t->count ||
                (v == 0) != (k->bytes[k->at[i]] == '\0')) {
                return MV_ECORRUPT;
            }
            k->rank[i] = (uint32_t)v;
        }
        k->ranked = (ranked >> by) & 1u ? t->count : 0;
    }
    return at == end ? MV_OK : MV_ECORRUPT;
}

/* t's arrays for count entries of its kinds (the keys' bytes: sort_memo_key_column). */
static int sort_memo_alloc(struct imap_sort_table *t, size_t count, unsigned ranked)
{
    size_t n = count > 0 ? count : 1;
    t->uids = malloc(n * sizeof *t->uids);
    t->sent = (t->kinds >> IMAP_SORT_DATE) & 1u ? malloc(n * sizeof *t->sent) : NULL;
    int ok = t->uids != NULL && (t->sent != NULL || !((t->kinds >> IMAP_SORT_DATE) & 1u));
    for (int by = 0; ok && by < IMAP_SORT_BY_COUNT; by++) {
        struct imap_sort_keys *k = &t->keys[by];
        if (!((t->kinds >> by) & 1u) || !imap_sort_is_string((enum imap_sort_by)by)) {
            continue;
        }
        k->at = malloc(n * sizeof *k->at);
        k->rank = (ranked >> by) & 1u ? malloc(n * sizeof *k->rank) : NULL;
        ok = k->at != NULL && (k->rank != NULL || !((ranked >> by) & 1u));
    }
    t->cap = n;
    return ok ? MV_OK : MV_ENOMEM;
}

int imap_sort_memo_decode(const unsigned char *p,
                          size_t len,
                          size_t max_count,
                          size_t max_plain,
                          struct imap_sort_table *t)
{
    if (len < SORT_MEMO_TAG_LEN || memcmp(p, SORT_MEMO_TAG, SORT_MEMO_TAG_LEN) != 0) {
        return MV_ECORRUPT;
    }
    const unsigned char *at = p + SORT_MEMO_TAG_LEN, *end = p + len;
    uint64_t last = 0, count = 0, kinds = 0, ranked = 0, plain_len = 0;
    if (imap_varint_get(&at, end, &last) != 0 || last > UINT32_MAX ||
        imap_varint_get(&at, end, &count) != 0 || count > max_count || count > last ||
        imap_varint_get(&at, end, &kinds) != 0 || (kinds & ~(uint64_t)imap_sort_memo_kinds()) ||
        imap_varint_get(&at, end, &ranked) != 0 || (ranked & ~kinds) ||
        (ranked & (1u << IMAP_SORT_DATE)) || imap_varint_get(&at, end, &plain_len) != 0 ||
        plain_len > max_plain || plain_len < count) { /* a byte at least an entry */
        return MV_ECORRUPT;
    }
    unsigned char *plain = NULL;
    int rc = imap_zframe_unpack(at, (size_t)(end - at), plain_len, &plain);
    if (rc != MV_OK) {
        return rc;
    }
    *t = (struct imap_sort_table){
        .last_uid = (uint32_t)last, .kinds = (unsigned)kinds, .count = (size_t)count};
    rc = sort_memo_alloc(t, (size_t)count, (unsigned)ranked);
    rc = rc == MV_OK ? sort_memo_columns(plain, plain + plain_len, (unsigned)ranked, t) : rc;
    sort_memo_wipe_free(plain, (size_t)plain_len);
    if (rc != MV_OK) {
        imap_sort_table_free(t);
    }
    return rc;
}
