/*
 * imap_msgid_memo.c -- the saved form of a mailbox's Message-ID fields: encode and decode
 * (imap_msgid_memo.h has the format and the reasons). Every buffer that held header text is
 * wiped before it is freed, as the matcher's are (imap_search_fields.c).
 */
#include "imap_msgid_memo.h"

#include "imap_zframe.h"
#include "mailvault.h"
#include "varint.h"

#include <stdlib.h>
#include <string.h>

#define MSGID_MEMO_TAG     "MVMI\x01"
#define MSGID_MEMO_TAG_LEN 5
/* zstd's level: the fast end (a close saves the form: ~6 MB at 100,000 messages) */
#define MSGID_MEMO_LEVEL 3

static void msgid_memo_wipe_free(unsigned char *p, size_t len)
{
    if (p != NULL) {
        explicit_bzero(p, len);
        free(p);
    }
}

/* The entries as the frame's content: *plain malloc'd, *plain_len. */
static int msgid_memo_plain(const uint32_t *uids,
                            const uint32_t *lens,
                            const char *bytes,
                            size_t count,
                            uint32_t last_uid,
                            unsigned char **plain,
                            size_t *plain_len)
{
    size_t need = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = lens[i] != IMAP_MSGID_NOT_KEPT ? lens[i] : 0;
        if (n > SIZE_MAX - need - 2 * IMAP_VARINT_MAX) {
            return MV_ENOMEM;
        }
        need += 2 * IMAP_VARINT_MAX + n;
    }
    unsigned char *p = malloc(need > 0 ? need : 1);
    if (p == NULL) {
        return MV_ENOMEM;
    }
    unsigned char *q = p;
    uint32_t prev = 0;
    for (size_t i = 0; i < count; i++) {
        if (uids[i] <= prev || uids[i] > last_uid) {
            msgid_memo_wipe_free(p, need);
            return MV_EINVAL;
        }
        q = imap_varint_put(q, uids[i] - prev);
        prev = uids[i];
        if (lens[i] == IMAP_MSGID_NOT_KEPT) {
            q = imap_varint_put(q, 0);
        } else {
            q = imap_varint_put(q, (uint64_t)lens[i] + 1);
            memcpy(q, bytes, lens[i]);
            q += lens[i];
            bytes += lens[i];
        }
    }
    *plain = p;
    *plain_len = (size_t)(q - p);
    return MV_OK;
}

int imap_msgid_memo_encode(const uint32_t *uids,
                           const uint32_t *lens,
                           const char *bytes,
                           size_t count,
                           uint32_t last_uid,
                           unsigned char **out,
                           size_t *len)
{
    *out = NULL;
    *len = 0;
    unsigned char *plain = NULL;
    size_t plain_len = 0;
    int rc = msgid_memo_plain(uids, lens, bytes, count, last_uid, &plain, &plain_len);
    if (rc != MV_OK) {
        return rc;
    }
    unsigned char head[MSGID_MEMO_TAG_LEN + 3 * IMAP_VARINT_MAX];
    memcpy(head, MSGID_MEMO_TAG, MSGID_MEMO_TAG_LEN);
    unsigned char *q = imap_varint_put(head + MSGID_MEMO_TAG_LEN, last_uid);
    q = imap_varint_put(q, count);
    q = imap_varint_put(q, plain_len);
    rc = imap_zframe_pack(head, (size_t)(q - head), plain, plain_len, MSGID_MEMO_LEVEL, out, len);
    msgid_memo_wipe_free(plain, plain_len);
    return rc;
}

/* The frame's entries (plain, n bytes) to add, every byte accounted for. */
static int msgid_memo_entries(const unsigned char *at,
                              const unsigned char *end,
                              uint64_t count,
                              uint64_t last,
                              int (*add)(void *arg, uint32_t uid, const char *bytes, uint32_t n),
                              void *arg)
{
    uint64_t uid = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t step = 0, code = 0;
        if (imap_varint_get(&at, end, &step) != 0 || step == 0 || step > last - uid ||
            imap_varint_get(&at, end, &code) != 0 ||
            (code != 0 && (code - 1 > (size_t)(end - at) || code - 1 >= IMAP_MSGID_NOT_KEPT))) {
            return MV_ECORRUPT;
        }
        uid += step;
        const char *bytes = code != 0 ? (const char *)at : NULL;
        uint32_t n = code != 0 ? (uint32_t)(code - 1) : IMAP_MSGID_NOT_KEPT;
        at += code != 0 ? code - 1 : 0;
        int rc = add(arg, (uint32_t)uid, bytes, n);
        if (rc != MV_OK) {
            return rc;
        }
    }
    return at == end ? MV_OK : MV_ECORRUPT;
}

int imap_msgid_memo_decode(const unsigned char *p,
                           size_t len,
                           size_t max_count,
                           size_t max_plain,
                           uint32_t *last_uid,
                           int (*add)(void *arg, uint32_t uid, const char *bytes, uint32_t n),
                           void *arg)
{
    *last_uid = 0;
    if (len < MSGID_MEMO_TAG_LEN || memcmp(p, MSGID_MEMO_TAG, MSGID_MEMO_TAG_LEN) != 0) {
        return MV_ECORRUPT;
    }
    const unsigned char *at = p + MSGID_MEMO_TAG_LEN, *end = p + len;
    uint64_t last = 0, count = 0, plain_len = 0;
    if (imap_varint_get(&at, end, &last) != 0 || last > UINT32_MAX ||
        imap_varint_get(&at, end, &count) != 0 || count > max_count ||
        imap_varint_get(&at, end, &plain_len) != 0 || plain_len > max_plain ||
        plain_len / 2 < count) { /* two bytes at least an entry */
        return MV_ECORRUPT;
    }
    unsigned char *plain = NULL;
    int rc = imap_zframe_unpack(at, (size_t)(end - at), plain_len, &plain);
    if (rc != MV_OK) {
        return rc;
    }
    rc = msgid_memo_entries(plain, plain + plain_len, count, last, add, arg);
    msgid_memo_wipe_free(plain, (size_t)plain_len);
    if (rc == MV_OK) {
        *last_uid = (uint32_t)last;
    }
    return rc;
}
