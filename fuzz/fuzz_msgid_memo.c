/*
 * fuzz_msgid_memo.c -- feeds arbitrary bytes to the decoder of a saved copy of a mailbox's
 * Message-ID fields (imapd/imap_msgid_memo.c), which reads what a store's mailbox memo holds.
 *
 * CHECKS (abort() on failure)
 *   - the result is MV_OK or MV_ECORRUPT, and the decoder never reads outside the input
 *     (ASan: the replay gives each input its own exact-size block), nor past the bounds it
 *     was given (entries, bytes once decompressed);
 *   - on MV_OK: the UIDs ascend, each at most the form's last UID; an entry not kept has no
 *     bytes; the list encodes again and that decodes to the same list and last UID.
 *
 * Corpus: fuzz/corpus/msgid_memo (saved forms: empty, one field, fields not kept, folded
 * fields, a long run of UIDs).
 */
#include "../imapd/imap_msgid_memo.h"
#include "mailvault.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MSGID_MAX   1024
#define FUZZ_MSGID_BYTES 65536

struct fuzz_msgids {
    uint32_t uids[FUZZ_MSGID_MAX];
    uint32_t lens[FUZZ_MSGID_MAX];
    char bytes[FUZZ_MSGID_BYTES];
    size_t count, used;
};

static int fuzz_msgid_add(void *arg, uint32_t uid, const char *bytes, uint32_t n)
{
    struct fuzz_msgids *l = arg;
    if (l->count == FUZZ_MSGID_MAX || uid == 0 || (l->count > 0 && uid <= l->uids[l->count - 1]) ||
        (n == IMAP_MSGID_NOT_KEPT) != (bytes == NULL)) {
        abort(); /* past the bound it was given, not ascending, or a kept entry without bytes */
    }
    if (n != IMAP_MSGID_NOT_KEPT) {
        if (n > FUZZ_MSGID_BYTES - l->used) {
            abort(); /* more than the decompressed bound */
        }
        memcpy(l->bytes + l->used, bytes, n);
        l->used += n;
    }
    l->uids[l->count] = uid;
    l->lens[l->count++] = n;
    return MV_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct fuzz_msgids first, second;
    first.count = first.used = 0;
    uint32_t last = 0;
    int rc = imap_msgid_memo_decode(data, size, FUZZ_MSGID_MAX, FUZZ_MSGID_BYTES, &last,
                                    fuzz_msgid_add, &first);
    if (rc == MV_ECORRUPT) {
        return 0;
    }
    if (rc != MV_OK) {
        abort();
    }
    for (size_t i = 0; i < first.count; i++) {
        if (first.uids[i] > last) {
            abort();
        }
    }
    unsigned char *again = NULL;
    size_t len = 0;
    if (imap_msgid_memo_encode(first.uids, first.lens, first.bytes, first.count, last, &again,
                               &len) != MV_OK) {
        abort();
    }
    second.count = second.used = 0;
    uint32_t last2 = 0;
    if (imap_msgid_memo_decode(again, len, FUZZ_MSGID_MAX, FUZZ_MSGID_BYTES, &last2, fuzz_msgid_add,
                               &second) != MV_OK ||
        last2 != last || second.count != first.count || second.used != first.used ||
        memcmp(second.uids, first.uids, first.count * sizeof first.uids[0]) != 0 ||
        memcmp(second.lens, first.lens, first.count * sizeof first.lens[0]) != 0 ||
        memcmp(second.bytes, first.bytes, first.used) != 0) {
        abort();
    }
    free(again);
    return 0;
}
