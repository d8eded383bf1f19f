/*
 * test_imap_msgid_memo.c -- the saved form of a mailbox's Message-ID fields
 * (imapd/imap_msgid_memo.c): what is encoded decodes back exactly (fields with every byte,
 * empty ones, ones not kept, the edges of the UID range, none at all), the form of a real
 * mailbox's fields is compressed, the encoder refuses UIDs out of order, and a damaged form
 * is refused or decodes to a well-formed list, never read past its end: every bit of the
 * compressed frame flipped in turn is refused (its checksum), as is every length cut short,
 * a byte more, a count or a size over the bounds given.
 */
#include "../imapd/imap_msgid_memo.h"
#include "../imapd/varint.h"
#include "harness.h"
#include "mailvault.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MM_MAX 2000

struct mm_list {
    uint32_t uids[MM_MAX];
    uint32_t lens[MM_MAX];
    char bytes[MM_MAX * 64];
    size_t count, used;
    int well_formed; /* ascending UIDs, every entry within the list */
    size_t fail_at;  /* add returns MV_ELIMIT at this entry (1-based; 0: never) */
};

static int mm_add(void *arg, uint32_t uid, const char *bytes, uint32_t n)
{
    struct mm_list *l = arg;
    if (l->fail_at != 0 && l->count + 1 == l->fail_at) {
        return MV_ELIMIT;
    }
    if (l->count == MM_MAX || uid == 0 || (l->count > 0 && uid <= l->uids[l->count - 1]) ||
        (n == IMAP_MSGID_NOT_KEPT) != (bytes == NULL) ||
        (n != IMAP_MSGID_NOT_KEPT && n > sizeof l->bytes - l->used)) {
        l->well_formed = 0;
        return MV_OK;
    }
    if (n != IMAP_MSGID_NOT_KEPT) {
        memcpy(l->bytes + l->used, bytes, n);
        l->used += n;
    }
    l->uids[l->count] = uid;
    l->lens[l->count++] = n;
    return MV_OK;
}

static const uint32_t mm_uids[] = {1, 2, 3, 70, 16384, 2000000000u, 4294967295u};
static const uint32_t mm_lens[] = {31, 0, IMAP_MSGID_NOT_KEPT, 45, 6, 0, 27};
static const char mm_bytes[] = "Message-ID: <Abc.123@Example>\r\n"                   /* 31 */
                               "Message-ID:\r\n <folded@x>\r\nMessage-Id: <2@x>\r\n" /* 45 */
                               "\0\xff\r\n\t "                                       /* 6 */
                               "message-id: =?UTF-8?Q?x?=\r\n";                      /* 27 */
#define MM_N (sizeof mm_uids / sizeof mm_uids[0])

static void mm_encode(unsigned char **p, size_t *len)
{
    CHECK_EQ_INT(imap_msgid_memo_encode(mm_uids, mm_lens, mm_bytes, MM_N, UINT32_MAX, p, len),
                 MV_OK);
}

static void test_round_trip(void)
{
    unsigned char *p = NULL;
    size_t len = 0;
    mm_encode(&p, &len);
    struct mm_list *l = calloc(1, sizeof *l);
    CHECK(l != NULL && p != NULL);
    l->well_formed = 1;
    uint32_t last = 0;
    CHECK_EQ_INT(imap_msgid_memo_decode(p, len, MM_N, 4096, &last, mm_add, l), MV_OK);
    CHECK_EQ_INT(last, UINT32_MAX);
    CHECK(l->well_formed);
    CHECK_EQ_INT(l->count, MM_N);
    CHECK(memcmp(l->uids, mm_uids, sizeof mm_uids) == 0);
    CHECK(memcmp(l->lens, mm_lens, sizeof mm_lens) == 0);
    CHECK_EQ_INT(l->used, 31 + 45 + 6 + 27);
    CHECK(memcmp(l->bytes, mm_bytes, l->used) == 0);
    /* one entry fewer allowed, or fewer bytes than the entries take: refused whole */
    *l = (struct mm_list){.well_formed = 1};
    CHECK_EQ_INT(imap_msgid_memo_decode(p, len, MM_N - 1, 4096, &last, mm_add, l), MV_ECORRUPT);
    CHECK_EQ_INT(last, 0);
    CHECK_EQ_INT(l->count, 0);
    CHECK_EQ_INT(imap_msgid_memo_decode(p, len, MM_N, 64, &last, mm_add, l), MV_ECORRUPT);
    CHECK_EQ_INT(l->count, 0);
    /* add's error ends the read and is returned */
    *l = (struct mm_list){.well_formed = 1, .fail_at = 3};
    CHECK_EQ_INT(imap_msgid_memo_decode(p, len, MM_N, 4096, &last, mm_add, l), MV_ELIMIT);
    CHECK_EQ_INT(l->count, 2);
    free(p);
    /* none at all */
    CHECK_EQ_INT(imap_msgid_memo_encode(NULL, NULL, NULL, 0, 0, &p, &len), MV_OK);
    *l = (struct mm_list){.well_formed = 1};
    CHECK_EQ_INT(imap_msgid_memo_decode(p, len, 0, 0, &last, mm_add, l), MV_OK);
    CHECK_EQ_INT(l->count, 0);
    free(p);
    free(l);
}

/* A mailbox's fields as mail has them (one name, a few senders' domains): the saved form
 * is well under the fields' own size, and within the store's bound for a mailbox memo. */
static void test_compressed(void)
{
    static uint32_t uids[MM_MAX], lens[MM_MAX];
    static char bytes[MM_MAX * 80];
    size_t used = 0;
    static const char *const domains[] = {"mail.gmail.com", "eurprd07.prod.outlook.com",
                                          "lists.debian.org", "example.org"};
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < MM_MAX; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int n = snprintf(bytes + used, sizeof bytes - used, "Message-ID: <%016llx.%zu@%s>\r\n",
                         (unsigned long long)x, i, domains[x % 4]);
        uids[i] = (uint32_t)(i * 3 + 1);
        lens[i] = (uint32_t)n;
        used += (size_t)n;
    }
    unsigned char *p = NULL;
    size_t len = 0;
    CHECK_EQ_INT(imap_msgid_memo_encode(uids, lens, bytes, MM_MAX, uids[MM_MAX - 1], &p, &len),
                 MV_OK);
    CHECK(len < used / 2);
    CHECK(len <= MV_MAILBOX_MEMO_FLOOR + (size_t)MV_MAILBOX_MEMO_PER_MESSAGE * MM_MAX);
    struct mm_list *l = calloc(1, sizeof *l);
    CHECK(l != NULL);
    l->well_formed = 1;
    uint32_t last = 0;
    CHECK_EQ_INT(imap_msgid_memo_decode(p, len, MM_MAX, sizeof bytes, &last, mm_add, l), MV_OK);
    CHECK(l->well_formed && l->count == MM_MAX && l->used == used);
    CHECK(memcmp(l->bytes, bytes, used) == 0);
    free(l);
    free(p);
}

static void test_encoder_refuses_disorder(void)
{
    unsigned char *p = (unsigned char *)1;
    size_t len = 1;
    const uint32_t twice[] = {5, 5}, down[] = {6, 5}, zero[] = {0}, lens[] = {1, 1};
    CHECK_EQ_INT(imap_msgid_memo_encode(twice, lens, "ab", 2, 10, &p, &len), MV_EINVAL);
    CHECK(p == NULL && len == 0);
    CHECK_EQ_INT(imap_msgid_memo_encode(down, lens, "ab", 2, 10, &p, &len), MV_EINVAL);
    CHECK_EQ_INT(imap_msgid_memo_encode(down, lens, "ab", 1, 5, &p, &len), MV_EINVAL);
    CHECK_EQ_INT(imap_msgid_memo_encode(zero, lens, "ab", 1, 5, &p, &len), MV_EINVAL);
    CHECK(p == NULL);
}

static struct mm_list mm_last; /* mm_damaged's list */

/* Whether mm_last is the list mm_encode encodes. */
static int mm_last_is_original(void)
{
    return mm_last.count == MM_N && memcmp(mm_last.uids, mm_uids, sizeof mm_uids) == 0 &&
           memcmp(mm_last.lens, mm_lens, sizeof mm_lens) == 0 && mm_last.used == 31 + 45 + 6 + 27 &&
           memcmp(mm_last.bytes, mm_bytes, mm_last.used) == 0;
}

/* Decodes p[0..len) into mm_last: 1 when refused (MV_ECORRUPT) or a well-formed list. */
static int mm_damaged(const unsigned char *p, size_t len, int *refused)
{
    mm_last = (struct mm_list){.well_formed = 1};
    uint32_t last = 0;
    int rc = imap_msgid_memo_decode(p, len, MM_MAX, 4096, &last, mm_add, &mm_last);
    *refused = rc == MV_ECORRUPT;
    if (rc != MV_OK && rc != MV_ECORRUPT) {
        return 0;
    }
    for (size_t i = 0; rc == MV_OK && i < mm_last.count; i++) {
        if (mm_last.uids[i] > last) {
            return 0;
        }
    }
    return mm_last.well_formed;
}

/* A copy of p[0..len) with one change: exactly len2 bytes (malloc'd: ASan sees any read
 * past it). */
static unsigned char *mm_copy(const unsigned char *p, size_t len, size_t len2)
{
    unsigned char *q = malloc(len2 > 0 ? len2 : 1);
    if (q != NULL) {
        memcpy(q, p, len < len2 ? len : len2);
        if (len2 > len) {
            memset(q + len, 0, len2 - len);
        }
    }
    return q;
}

static void test_damaged_forms(void)
{
    unsigned char *p = NULL;
    size_t len = 0;
    mm_encode(&p, &len); /* returns before anything is held if it fails */
    /* where the frame starts: after the tag and three varints */
    const unsigned char *at = p + 5, *end = p + len;
    uint64_t v = 0;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(imap_varint_get(&at, end, &v), 0);
    }
    size_t frame = (size_t)(at - p);
    int bad = 0, frame_decoded = 0, refused = 0;
    for (size_t bit = 0; bit < len * 8; bit++) {
        unsigned char *q = mm_copy(p, len, len);
        CHECK(q != NULL);
        if (q == NULL) {
            break;
        }
        q[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        bad += !mm_damaged(q, len, &refused);
        /* a flip in the frame is refused (its checksum), or is one zstd reads past (the
         * window's size, say): never other entries */
        frame_decoded += bit / 8 >= frame && !refused && !mm_last_is_original();
        free(q);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(frame_decoded, 0);
    CHECK(len > frame);
    for (size_t cut = 0; cut < len; cut++) {
        unsigned char *q = mm_copy(p, len, cut);
        CHECK(q != NULL);
        if (q == NULL) {
            break;
        }
        bad += !mm_damaged(q, cut, &refused) || !refused;
        free(q);
    }
    CHECK_EQ_INT(bad, 0);
    unsigned char *longer = mm_copy(p, len, len + 1); /* a byte more at the end */
    CHECK(longer != NULL);
    CHECK(longer != NULL && mm_damaged(longer, len + 1, &refused) && refused);
    free(longer);
    /* a varint longer than 64 bits; a count beyond what the bytes could hold */
    const unsigned char huge[] = {'M',  'V',  'M',  'I',  1,    0xff, 0xff, 0xff,
                                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0};
    CHECK(mm_damaged(huge, sizeof huge, &refused) && refused);
    const unsigned char many[] = {'M', 'V', 'M', 'I', 1, 10, 40, 4, 0};
    CHECK(mm_damaged(many, sizeof many, &refused) && refused);
    free(p);
}

int main(void)
{
    TEST(test_round_trip);
    TEST(test_compressed);
    TEST(test_encoder_refuses_disorder);
    TEST(test_damaged_forms);
    return th_summary();
}
