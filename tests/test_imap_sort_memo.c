/*
 * test_imap_sort_memo.c -- SORT's kept keys saved and ranked (imapd/imap_sort_memo.c,
 * imapd/imap_sort_rank.c):
 *   - a table (dates with none among them, keys of two criteria with empty ones and every
 *     byte but NUL, the ranks of one) encodes and decodes back exactly, UIDs at their edges;
 *     the encoder refuses UIDs out of order;
 *   - a damaged form is refused whole: every bit of the compressed frame flipped in turn
 *     (its checksum), every length cut short, a byte more, a count or a size over the bounds
 *     given, a head naming criteria it cannot keep, columns that do not add up (a key with a
 *     NUL, a rank above the count, a rank that is not 0 exactly for an empty key);
 *   - ranks, in full and for entries added since, against the definition (0 for an empty
 *     key, else 1 + the number of keys below it), for keys drawn from a small alphabet so
 *     that many are equal, every split between old and new entries.
 */
#include "../imapd/imap_sort_memo.h"
#include "../imapd/imap_sort_rank.h"
#include "../imapd/imap_zframe.h"
#include "../imapd/varint.h"
#include "harness.h"
#include "mailvault.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SM_N 7

static const uint32_t sm_uids[SM_N] = {1, 2, 3, 70, 16384, 2000000000u, 4294967295u};
static const int64_t sm_sent[SM_N] = {0, MV_SENT_NONE, -86400, INT64_MAX, INT64_MIN + 1, 5, 5};
static const char *const sm_subjects[SM_N] = {"HELLO", "", "\x01\xff ZZ", "HELLO", "A", "", "B"};
static const char *const sm_froms[SM_N] = {"", "", "ALICE", "BOB", "ALICE", "\xc3\xa9T\xc3\xa9",
                                           ""};

/* Appends a key to a criterion's arena (test arenas are big enough). */
static void sm_key(struct imap_sort_keys *k, size_t e, const char *key)
{
    size_t n = strlen(key) + 1;
    k->at[e] = (uint32_t)k->used;
    memcpy(k->bytes + k->used, key, n);
    k->used += n;
}

/* A table of SM_N entries: DATE, SUBJECT (ranked), FROM. Freed by imap_sort_table_free. */
static void sm_table(struct imap_sort_table *t)
{
    *t = (struct imap_sort_table){.last_uid = UINT32_MAX, .count = SM_N, .cap = SM_N};
    t->kinds = 1u << IMAP_SORT_DATE | 1u << IMAP_SORT_SUBJECT | 1u << IMAP_SORT_FROM;
    t->uids = malloc(sizeof sm_uids);
    t->sent = malloc(sizeof sm_sent);
    memcpy(t->uids, sm_uids, sizeof sm_uids);
    memcpy(t->sent, sm_sent, sizeof sm_sent);
    const char *const *cols[] = {sm_subjects, sm_froms};
    int bys[] = {IMAP_SORT_SUBJECT, IMAP_SORT_FROM};
    for (int c = 0; c < 2; c++) {
        struct imap_sort_keys *k = &t->keys[bys[c]];
        k->cap = 256;
        k->bytes = malloc(k->cap);
        k->at = malloc(SM_N * sizeof *k->at);
        for (size_t e = 0; e < SM_N; e++) {
            sm_key(k, e, cols[c][e]);
        }
    }
    struct imap_sort_keys *s = &t->keys[IMAP_SORT_SUBJECT];
    s->rank = malloc(SM_N * sizeof *s->rank);
    CHECK(imap_sort_rank_all(s, SM_N, s->rank) == MV_OK);
    s->ranked = SM_N;
}

static int sm_same(const struct imap_sort_table *a, const struct imap_sort_table *b)
{
    if (a->last_uid != b->last_uid || a->kinds != b->kinds || a->count != b->count ||
        memcmp(a->uids, b->uids, a->count * sizeof *a->uids) != 0 ||
        memcmp(a->sent, b->sent, a->count * sizeof *a->sent) != 0) {
        return 0;
    }
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        const struct imap_sort_keys *x = &a->keys[by], *y = &b->keys[by];
        if ((x->at == NULL) != (y->at == NULL) || (x->rank == NULL) != (y->rank == NULL) ||
            x->ranked != y->ranked) {
            return 0;
        }
        for (size_t e = 0; x->at != NULL && e < a->count; e++) {
            if (strcmp(x->bytes + x->at[e], y->bytes + y->at[e]) != 0 ||
                (x->rank != NULL && x->rank[e] != y->rank[e])) {
                return 0;
            }
        }
    }
    return 1;
}

static void test_round_trip(void)
{
    struct imap_sort_table t, back = {0};
    sm_table(&t);
    unsigned char *p = NULL;
    size_t len = 0;
    CHECK_EQ_INT(imap_sort_memo_encode(&t, &p, &len), MV_OK);
    CHECK_EQ_INT(imap_sort_memo_decode(p, len, SM_N, 4096, &back), MV_OK);
    CHECK(sm_same(&t, &back));
    CHECK(back.keys[IMAP_SORT_FROM].rank == NULL && back.sent[1] == MV_SENT_NONE);
    imap_sort_table_free(&back);
    CHECK(back.uids == NULL && back.count == 0);
    /* the bounds: one entry fewer, or fewer plain bytes than the form has */
    CHECK_EQ_INT(imap_sort_memo_decode(p, len, SM_N - 1, 4096, &back), MV_ECORRUPT);
    CHECK_EQ_INT(imap_sort_memo_decode(p, len, SM_N, 16, &back), MV_ECORRUPT);
    free(p);
    /* no entries at all */
    struct imap_sort_table none = {.kinds = 1u << IMAP_SORT_CC};
    CHECK_EQ_INT(imap_sort_memo_encode(&none, &p, &len), MV_OK);
    CHECK_EQ_INT(imap_sort_memo_decode(p, len, 0, 0, &back), MV_OK);
    CHECK(back.count == 0 && back.kinds == none.kinds);
    imap_sort_table_free(&back);
    free(p);
    /* UIDs out of order, or above the last, are a bug the encoder names */
    t.uids[3] = 2;
    CHECK_EQ_INT(imap_sort_memo_encode(&t, &p, &len), MV_EINVAL);
    t.uids[3] = 70;
    t.last_uid = 16000;
    CHECK_EQ_INT(imap_sort_memo_encode(&t, &p, &len), MV_EINVAL);
    imap_sort_table_free(&t);
}

/* Decodes a damaged form: 1 if refused (nothing left in the table). */
static int sm_refused(const unsigned char *p, size_t len)
{
    unsigned char *copy = malloc(len > 0 ? len : 1); /* exact size: ASan sees a read past it */
    memcpy(copy, p, len);
    struct imap_sort_table t = {0};
    int rc = imap_sort_memo_decode(copy, len, SM_N, 4096, &t);
    int refused = rc == MV_ECORRUPT && t.uids == NULL && t.count == 0;
    imap_sort_table_free(&t);
    free(copy);
    return refused;
}

/* A form of the given head fields and plain columns, framed as the encoder frames them. */
static size_t sm_form(unsigned char *out,
                      uint64_t last,
                      uint64_t count,
                      uint64_t kinds,
                      uint64_t ranked,
                      const unsigned char *plain,
                      size_t plain_len)
{
    unsigned char head[64];
    memcpy(head, "MVSK\x01", 5);
    unsigned char *q = imap_varint_put(head + 5, last);
    q = imap_varint_put(q, count);
    q = imap_varint_put(q, kinds);
    q = imap_varint_put(q, ranked);
    q = imap_varint_put(q, plain_len);
    unsigned char *framed = NULL;
    size_t len = 0;
    if (imap_zframe_pack(head, (size_t)(q - head), plain, plain_len, 3, &framed, &len) != MV_OK ||
        len > 256) {
        abort(); /* the test's own forms: memory only */
    }
    memcpy(out, framed, len);
    free(framed);
    return len;
}

static void test_damaged_forms(void)
{
    struct imap_sort_table t, back = {0};
    sm_table(&t);
    unsigned char *p = NULL;
    size_t len = 0;
    CHECK_EQ_INT(imap_sort_memo_encode(&t, &p, &len), MV_OK);
    int bad = 0, same = 0;
    for (size_t bit = 0; bit < len * 8; bit++) {
        p[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        /* refused, or (a bit zstd does not read, an offset to equal bytes) the same table:
         * the frame's checksum is of the decoded bytes */
        if (!sm_refused(p, len)) {
            int rc = imap_sort_memo_decode(p, len, SM_N, 4096, &back);
            int ok = rc == MV_OK && sm_same(&t, &back);
            same += ok;
            bad += !ok;
            imap_sort_table_free(&back);
        }
        p[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    imap_sort_table_free(&t);
    CHECK_EQ_INT(bad, 0);
    CHECK(same < 8); /* nearly every flip refused */
    for (size_t cut = 0; cut < len; cut++) {
        bad += !sm_refused(p, cut);
    }
    CHECK_EQ_INT(bad, 0);
    unsigned char *longer = calloc(1, len + 1);
    memcpy(longer, p, len);
    CHECK(sm_refused(longer, len + 1));
    free(longer);
    free(p);
    /* columns that frame well but do not add up */
    unsigned char form[256];
    const unsigned char nul_key[] = {1, 3, 'A', 0, 'B'}; /* CC: a key with a NUL */
    const unsigned char rank_big[] = {1, 1, 'A', 2};     /* a rank above the count */
    const unsigned char rank_empty[] = {1, 0, 1};        /* an empty key ranked 1 */
    const unsigned char rank_zero[] = {1, 1, 'A', 0};    /* a key ranked as empty */
    const unsigned char extra[] = {1, 1, 'A', 1, 9};     /* a byte left over */
    const unsigned char good[] = {1, 1, 'A', 1};         /* the same, well formed */
    unsigned cc = 1u << IMAP_SORT_CC;
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc, 0, nul_key, sizeof nul_key)));
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc, cc, rank_big, sizeof rank_big)));
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc, cc, rank_empty, sizeof rank_empty)));
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc, cc, rank_zero, sizeof rank_zero)));
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc, cc, extra, sizeof extra)));
    /* criteria it cannot keep (ARRIVAL, SIZE, a bit past them), ranks of a criterion not
     * kept or of DATE, a UID above the last, more entries than UIDs */
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc | 1u, 0, good, 3)));
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc | 1u << IMAP_SORT_SIZE, 0, good, 3)));
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc | 1u << 20, 0, good, 3)));
    CHECK(sm_refused(form, sm_form(form, 1, 1, cc, 1u << IMAP_SORT_FROM, good, sizeof good)));
    CHECK(sm_refused(form, sm_form(form, 0, 1, cc, 0, good, 3)));
    CHECK(sm_refused(form, sm_form(form, 5, 6, cc, 0, good, 3)));
    back = (struct imap_sort_table){0};
    size_t n = sm_form(form, 1, 1, cc, cc, good, sizeof good);
    CHECK_EQ_INT(imap_sort_memo_decode(form, n, 1, 64, &back), MV_OK);
    CHECK(back.count == 1 && back.keys[IMAP_SORT_CC].rank != NULL &&
          back.keys[IMAP_SORT_CC].rank[0] == 1 && strcmp(back.keys[IMAP_SORT_CC].bytes, "A") == 0);
    imap_sort_table_free(&back);
}

/* Ranks by their definition: 0 for an empty key, else 1 + the keys below it. */
static uint32_t sm_rank_of(const struct imap_sort_keys *k, size_t count, size_t e)
{
    const char *key = k->bytes + k->at[e];
    if (key[0] == '\0') {
        return 0;
    }
    uint32_t below = 0;
    for (size_t j = 0; j < count; j++) {
        below += strcmp(k->bytes + k->at[j], key) < 0;
    }
    return below + 1;
}

static void test_ranks(void)
{
    enum { N = 300 };
    struct imap_sort_keys k = {0};
    k.cap = N * 16;
    k.bytes = malloc(k.cap);
    k.at = malloc(N * sizeof *k.at);
    uint32_t rank[N];
    unsigned seed = 7;
    for (size_t e = 0; e < N; e++) {
        char key[12];
        size_t n = 0, len = (seed = seed * 1103515245u + 12345u) >> 16 & 7u; /* 0-7: many "" */
        for (; n < len && n < 11; n++) {
            seed = seed * 1103515245u + 12345u;
            key[n] = "AB\xff"[(seed >> 16) % 3]; /* few letters: many equal keys */
        }
        key[n] = '\0';
        /* keys of 9-11 bytes equal in their first 8: the lead number cannot tell them */
        if (e % 10 == 0) {
            memcpy(key, e % 20 == 0 ? "ABABABABA" : "ABABABABB", 10);
        }
        sm_key(&k, e, key);
    }
    int bad = 0;
    CHECK_EQ_INT(imap_sort_rank_all(&k, N, rank), MV_OK);
    for (size_t e = 0; e < N; e++) {
        bad += rank[e] != sm_rank_of(&k, N, e);
    }
    CHECK_EQ_INT(bad, 0);
    const size_t splits[] = {1, 2, 50, 150, 298, 299, 300};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
        size_t old = splits[s];
        CHECK_EQ_INT(imap_sort_rank_all(&k, old, rank), MV_OK); /* the first old among them */
        CHECK_EQ_INT(imap_sort_rank_more(&k, old, N, rank), MV_OK);
        for (size_t e = 0; e < N; e++) {
            bad += rank[e] != sm_rank_of(&k, N, e);
        }
        if (bad != 0) {
            printf("# ranks wrong with %zu old entries of %d\n", old, N);
            break;
        }
    }
    CHECK_EQ_INT(bad, 0);
    free(k.bytes);
    free(k.at);
}

int main(void)
{
    TEST(test_round_trip);
    TEST(test_damaged_forms);
    TEST(test_ranks);
    return th_summary();
}
