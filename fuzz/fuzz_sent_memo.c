/*
 * fuzz_sent_memo.c -- feeds arbitrary bytes to the decoder of a saved copy of a mailbox's
 * sent days (imapd/imap_sent_memo.c), which reads what a store's mailbox memo holds.
 *
 * CHECKS (abort() on failure)
 *   - the result is MV_OK or MV_ECORRUPT, and the decoder never reads outside the input
 *     (ASan: the replay gives each input its own exact-size block);
 *   - on MV_OK: the UIDs ascend, each at most the form's last UID, each day a day or
 *     INT32_MIN (none); the list encodes again and that decodes to the same list and last
 *     UID.
 *
 * Corpus: fuzz/corpus/sent_memo (saved forms: empty, in order, out of order, undated).
 */
#include "../imapd/imap_sent_memo.h"
#include "mailvault.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SENT_MAX 4096

struct fuzz_sent {
    uint32_t uids[FUZZ_SENT_MAX];
    int32_t days[FUZZ_SENT_MAX];
    size_t count;
};

static int fuzz_sent_add(void *arg, uint32_t uid, int32_t day)
{
    struct fuzz_sent *l = arg;
    if (l->count == FUZZ_SENT_MAX || uid == 0 || (l->count > 0 && uid <= l->uids[l->count - 1])) {
        abort(); /* past the bound it was given, or not ascending */
    }
    l->uids[l->count] = uid;
    l->days[l->count++] = day;
    return MV_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct fuzz_sent first, second;
    first.count = 0;
    uint32_t last = 0;
    int rc = imap_sent_memo_decode(data, size, FUZZ_SENT_MAX, &last, fuzz_sent_add, &first);
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
    if (imap_sent_memo_encode(first.uids, first.days, first.count, last, &again, &len) != MV_OK) {
        abort();
    }
    second.count = 0;
    uint32_t last2 = 0;
    if (imap_sent_memo_decode(again, len, FUZZ_SENT_MAX, &last2, fuzz_sent_add, &second) != MV_OK ||
        last2 != last || second.count != first.count ||
        memcmp(second.uids, first.uids, first.count * sizeof first.uids[0]) != 0 ||
        memcmp(second.days, first.days, first.count * sizeof first.days[0]) != 0) {
        abort();
    }
    free(again);
    return 0;
}
