/*
 * test_imap_sent_memo.c -- the saved form of a mailbox's sent days (imapd/imap_sent_memo.c):
 * what is encoded decodes back exactly (the edges of the day and UID ranges, messages
 * without a date, none at all), the encoder refuses UIDs out of order, and a damaged form
 * (every bit flipped in turn, every length cut short, a count over the bound) is refused or
 * decodes to a well-formed list, never read past its end.
 */
#include "../imapd/imap_sent_memo.h"
#include "harness.h"
#include "mailvault.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SM_MAX 64

struct sm_list {
    uint32_t uids[SM_MAX];
    int32_t days[SM_MAX];
    size_t count;
    int well_formed; /* ascending UIDs, each day a day or INT32_MIN */
    size_t fail_at;  /* add returns MV_ELIMIT at this entry (1-based; 0: never) */
};

static int sm_add(void *arg, uint32_t uid, int32_t day)
{
    struct sm_list *l = arg;
    if (l->fail_at != 0 && l->count + 1 == l->fail_at) {
        return MV_ELIMIT;
    }
    if (l->count == SM_MAX || uid == 0 || (l->count > 0 && uid <= l->uids[l->count - 1])) {
        l->well_formed = 0;
        return MV_OK;
    }
    l->uids[l->count] = uid;
    l->days[l->count++] = day;
    return MV_OK;
}

static const uint32_t sm_uids[] = {1, 2, 3, 70, 200, 16384, 16385, 2000000000u, 4294967294u};
static const int32_t sm_days[] = {18295,         INT32_MIN, 18296, 18294, INT32_MAX,
                                  INT32_MIN + 1, 0,         -1,    18300};
#define SM_N (sizeof sm_uids / sizeof sm_uids[0])

static void test_round_trip(void)
{
    unsigned char *p = NULL;
    size_t len = 0;
    CHECK_EQ_INT(imap_sent_memo_encode(sm_uids, sm_days, SM_N, UINT32_MAX, &p, &len), MV_OK);
    struct sm_list l = {.well_formed = 1};
    uint32_t last = 0;
    CHECK_EQ_INT(imap_sent_memo_decode(p, len, SM_N, &last, sm_add, &l), MV_OK);
    CHECK_EQ_INT(last, UINT32_MAX);
    CHECK_EQ_INT(l.count, SM_N);
    CHECK(memcmp(l.uids, sm_uids, sizeof sm_uids) == 0);
    CHECK(memcmp(l.days, sm_days, sizeof sm_days) == 0);
    /* one fewer allowed: refused whole */
    l = (struct sm_list){.well_formed = 1};
    CHECK_EQ_INT(imap_sent_memo_decode(p, len, SM_N - 1, &last, sm_add, &l), MV_ECORRUPT);
    CHECK_EQ_INT(last, 0);
    /* add's error ends the read and is returned */
    l = (struct sm_list){.well_formed = 1, .fail_at = 3};
    CHECK_EQ_INT(imap_sent_memo_decode(p, len, SM_N, &last, sm_add, &l), MV_ELIMIT);
    CHECK_EQ_INT(l.count, 2);
    free(p);
    /* none at all, and mail listed in order takes two bytes a message */
    CHECK_EQ_INT(imap_sent_memo_encode(NULL, NULL, 0, 0, &p, &len), MV_OK);
    l = (struct sm_list){.well_formed = 1};
    CHECK_EQ_INT(imap_sent_memo_decode(p, len, 0, &last, sm_add, &l), MV_OK);
    CHECK_EQ_INT(l.count, 0);
    free(p);
    uint32_t uids[SM_MAX];
    int32_t days[SM_MAX];
    for (size_t i = 0; i < SM_MAX; i++) {
        uids[i] = (uint32_t)i + 1;
        days[i] = 18000 + (int32_t)(i / 3);
    }
    CHECK_EQ_INT(imap_sent_memo_encode(uids, days, SM_MAX, SM_MAX, &p, &len), MV_OK);
    CHECK(len <= 16 + 2 * SM_MAX);
    free(p);
}

static void test_encoder_refuses_disorder(void)
{
    unsigned char *p = (unsigned char *)1;
    size_t len = 1;
    const uint32_t twice[] = {5, 5};
    const uint32_t down[] = {6, 5};
    const int32_t days[] = {1, 2};
    CHECK_EQ_INT(imap_sent_memo_encode(twice, days, 2, 10, &p, &len), MV_EINVAL);
    CHECK(p == NULL && len == 0);
    CHECK_EQ_INT(imap_sent_memo_encode(down, days, 2, 10, &p, &len), MV_EINVAL);
    CHECK_EQ_INT(imap_sent_memo_encode(down, days, 1, 5, &p, &len), MV_EINVAL); /* above last */
    const uint32_t zero[] = {0};
    CHECK_EQ_INT(imap_sent_memo_encode(zero, days, 1, 5, &p, &len), MV_EINVAL);
    CHECK(p == NULL);
}

/* Decodes p[0..len) into a list; the list must be well formed whatever the bytes. */
static int sm_damaged(const unsigned char *p, size_t len)
{
    struct sm_list l = {.well_formed = 1};
    uint32_t last = 0;
    int rc = imap_sent_memo_decode(p, len, SM_MAX, &last, sm_add, &l);
    if (rc != MV_OK && rc != MV_ECORRUPT) {
        return 0;
    }
    if (!l.well_formed) {
        return 0;
    }
    for (size_t i = 0; rc == MV_OK && i < l.count; i++) {
        if (l.uids[i] > last) {
            return 0;
        }
    }
    return 1;
}

static void test_damaged_forms(void)
{
    unsigned char *p = NULL;
    size_t len = 0;
    CHECK_EQ_INT(imap_sent_memo_encode(sm_uids, sm_days, SM_N, UINT32_MAX - 1, &p, &len), MV_OK);
    int bad = 0;
    for (size_t bit = 0; bit < len * 8; bit++) {
        /* each copy exactly len bytes (malloc'd: ASan sees any read past it) */
        unsigned char *q = malloc(len);
        CHECK(q != NULL);
        if (q == NULL) {
            break;
        }
        memcpy(q, p, len);
        q[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        bad += !sm_damaged(q, len);
        free(q);
    }
    CHECK_EQ_INT(bad, 0);
    for (size_t cut = 0; cut < len; cut++) {
        unsigned char *q = malloc(cut > 0 ? cut : 1);
        CHECK(q != NULL);
        if (q == NULL) {
            break;
        }
        memcpy(q, p, cut);
        struct sm_list l = {.well_formed = 1};
        uint32_t last = 0;
        bad += imap_sent_memo_decode(q, cut, SM_MAX, &last, sm_add, &l) != MV_ECORRUPT;
        free(q);
    }
    CHECK_EQ_INT(bad, 0);
    /* a byte more at the end */
    unsigned char *longer = malloc(len + 1);
    CHECK(longer != NULL);
    if (longer != NULL) {
        memcpy(longer, p, len);
        longer[len] = 0;
        struct sm_list l = {.well_formed = 1};
        uint32_t last = 0;
        CHECK_EQ_INT(imap_sent_memo_decode(longer, len + 1, SM_MAX, &last, sm_add, &l),
                     MV_ECORRUPT);
        free(longer);
    }
    /* a varint longer than 64 bits, a count beyond the bytes */
    const unsigned char huge[] = {'M',  'V',  'S',  'D',  1,    0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0};
    struct sm_list l = {.well_formed = 1};
    uint32_t last = 0;
    CHECK_EQ_INT(imap_sent_memo_decode(huge, sizeof huge, SM_MAX, &last, sm_add, &l), MV_ECORRUPT);
    const unsigned char many[] = {'M', 'V', 'S', 'D', 1, 10, 40, 1, 1};
    CHECK_EQ_INT(imap_sent_memo_decode(many, sizeof many, SM_MAX, &last, sm_add, &l), MV_ECORRUPT);
    CHECK_EQ_INT(l.count, 0);
    free(p);
}

int main(void)
{
    TEST(test_round_trip);
    TEST(test_encoder_refuses_disorder);
    TEST(test_damaged_forms);
    return th_summary();
}
