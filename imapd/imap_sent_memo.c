/*
 * imap_sent_memo.c -- the saved form of a mailbox's sent days: encode and decode
 * (imap_sent_memo.h has the format and the reasons).
 */
#include "imap_sent_memo.h"

#include "mailvault.h"

#include <stdlib.h>
#include <string.h>

#define SENT_MEMO_TAG     "MVSD\x01"
#define SENT_MEMO_TAG_LEN 5
#define SENT_MEMO_VARINT  10 /* bytes of the longest varint (64 bits) */

static size_t sent_memo_put(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

/* One varint at *at (below len) into *v; -1 if cut short or longer than 64 bits. */
static int sent_memo_get(const unsigned char *p, size_t len, size_t *at, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64 && *at < len; shift += 7) {
        unsigned char b = p[(*at)++];
        if (shift == 63 && (b & 0x7e) != 0) {
            return -1; /* bits past the 64th */
        }
        x |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static uint64_t sent_memo_zigzag(int64_t d)
{
    return d < 0 ? ((uint64_t)(-(d + 1)) << 1) | 1 : (uint64_t)d << 1;
}

static int64_t sent_memo_unzigzag(uint64_t z)
{
    return (z & 1) != 0 ? -(int64_t)(z >> 1) - 1 : (int64_t)(z >> 1);
}

int imap_sent_memo_encode(const uint32_t *uids,
                          const int32_t *days,
                          size_t count,
                          uint32_t last_uid,
                          unsigned char **out,
                          size_t *len)
{
    *out = NULL;
    *len = 0;
    if (count > (SIZE_MAX - SENT_MEMO_TAG_LEN - 2 * SENT_MEMO_VARINT) / (2 * SENT_MEMO_VARINT)) {
        return MV_ENOMEM;
    }
    unsigned char *p = malloc(SENT_MEMO_TAG_LEN + 2 * SENT_MEMO_VARINT * (count + 1));
    if (p == NULL) {
        return MV_ENOMEM;
    }
    memcpy(p, SENT_MEMO_TAG, SENT_MEMO_TAG_LEN);
    size_t n = SENT_MEMO_TAG_LEN;
    n += sent_memo_put(p + n, last_uid);
    n += sent_memo_put(p + n, count);
    uint32_t prev_uid = 0;
    int64_t prev_day = 0;
    for (size_t i = 0; i < count; i++) {
        if (uids[i] <= prev_uid || uids[i] > last_uid) {
            free(p);
            return MV_EINVAL;
        }
        n += sent_memo_put(p + n, uids[i] - prev_uid);
        prev_uid = uids[i];
        if (days[i] == INT32_MIN) {
            n += sent_memo_put(p + n, 0);
        } else {
            n += sent_memo_put(p + n, sent_memo_zigzag((int64_t)days[i] - prev_day) + 1);
            prev_day = days[i];
        }
    }
    *out = p;
    *len = n;
    return MV_OK;
}

int imap_sent_memo_decode(const unsigned char *p,
                          size_t len,
                          size_t max_count,
                          uint32_t *last_uid,
                          int (*add)(void *arg, uint32_t uid, int32_t day),
                          void *arg)
{
    *last_uid = 0;
    if (len < SENT_MEMO_TAG_LEN || memcmp(p, SENT_MEMO_TAG, SENT_MEMO_TAG_LEN) != 0) {
        return MV_ECORRUPT;
    }
    size_t at = SENT_MEMO_TAG_LEN;
    uint64_t last = 0, count = 0;
    if (sent_memo_get(p, len, &at, &last) != 0 || last > UINT32_MAX ||
        sent_memo_get(p, len, &at, &count) != 0 || count > max_count ||
        count > (len - at) / 2) { /* two bytes at least an entry */
        return MV_ECORRUPT;
    }
    uint64_t uid = 0;
    int64_t day = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t step = 0, code = 0;
        if (sent_memo_get(p, len, &at, &step) != 0 || step == 0 || step > last - uid ||
            sent_memo_get(p, len, &at, &code) != 0) {
            return MV_ECORRUPT;
        }
        uid += step;
        int32_t d = INT32_MIN;
        if (code != 0) {
            int64_t next = day + sent_memo_unzigzag(code - 1);
            /* INT32_MIN is "none": a dated message's day is above it */
            if ((code - 1) >> 34 != 0 || next <= INT32_MIN || next > INT32_MAX) {
                return MV_ECORRUPT;
            }
            day = next;
            d = (int32_t)next;
        }
        int rc = add(arg, (uint32_t)uid, d);
        if (rc != MV_OK) {
            return rc;
        }
    }
    if (at != len) {
        return MV_ECORRUPT;
    }
    *last_uid = (uint32_t)last;
    return MV_OK;
}
