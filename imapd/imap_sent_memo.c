/*
 * imap_sent_memo.c -- the saved form of a mailbox's sent days: encode and decode
 * (imap_sent_memo.h has the format and the reasons).
 */
#include "imap_sent_memo.h"

#include "mailvault.h"
#include "varint.h"

#include <stdlib.h>
#include <string.h>

#define SENT_MEMO_TAG     "MVSD\x01"
#define SENT_MEMO_TAG_LEN 5

int imap_sent_memo_encode(const uint32_t *uids,
                          const int32_t *days,
                          size_t count,
                          uint32_t last_uid,
                          unsigned char **out,
                          size_t *len)
{
    *out = NULL;
    *len = 0;
    if (count > (SIZE_MAX - SENT_MEMO_TAG_LEN - 2 * IMAP_VARINT_MAX) / (2 * IMAP_VARINT_MAX)) {
        return MV_ENOMEM;
    }
    unsigned char *p = malloc(SENT_MEMO_TAG_LEN + 2 * IMAP_VARINT_MAX * (count + 1));
    if (p == NULL) {
        return MV_ENOMEM;
    }
    memcpy(p, SENT_MEMO_TAG, SENT_MEMO_TAG_LEN);
    unsigned char *q = imap_varint_put(p + SENT_MEMO_TAG_LEN, last_uid);
    q = imap_varint_put(q, count);
    uint32_t prev_uid = 0;
    int64_t prev_day = 0;
    for (size_t i = 0; i < count; i++) {
        if (uids[i] <= prev_uid || uids[i] > last_uid) {
            free(p);
            return MV_EINVAL;
        }
        q = imap_varint_put(q, uids[i] - prev_uid);
        prev_uid = uids[i];
        if (days[i] == INT32_MIN) {
            q = imap_varint_put(q, 0);
        } else {
            q = imap_varint_put(q, imap_varint_zigzag((uint64_t)((int64_t)days[i] - prev_day)) + 1);
            prev_day = days[i];
        }
    }
    *out = p;
    *len = (size_t)(q - p);
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
    const unsigned char *at = p + SENT_MEMO_TAG_LEN, *end = p + len;
    uint64_t last = 0, count = 0;
    if (imap_varint_get(&at, end, &last) != 0 || last > UINT32_MAX ||
        imap_varint_get(&at, end, &count) != 0 || count > max_count ||
        count > (size_t)(end - at) / 2) { /* two bytes at least an entry */
        return MV_ECORRUPT;
    }
    uint64_t uid = 0;
    int64_t day = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t step = 0, code = 0;
        if (imap_varint_get(&at, end, &step) != 0 || step == 0 || step > last - uid ||
            imap_varint_get(&at, end, &code) != 0) {
            return MV_ECORRUPT;
        }
        uid += step;
        int32_t d = INT32_MIN;
        if (code != 0) {
            /* a step between two days is under 2^33 either way: its zigzag under 2^34 */
            if ((code - 1) >> 34 != 0) {
                return MV_ECORRUPT;
            }
            int64_t next = day + (int64_t)imap_varint_unzigzag(code - 1);
            if (next <= INT32_MIN || next > INT32_MAX) { /* INT32_MIN is "none" */
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
    if (at != end) {
        return MV_ECORRUPT;
    }
    *last_uid = (uint32_t)last;
    return MV_OK;
}
