/*
 * fuzz_sort_memo.c -- feeds arbitrary bytes to the decoder of a saved copy of a mailbox's
 * SORT keys (imapd/imap_sort_memo.c), which reads what a store's mailbox memo holds, then
 * ranks what it decoded as a SORT would (imapd/imap_sort_rank.c).
 *
 * CHECKS (abort() on failure)
 *   - the result is MV_OK or MV_ECORRUPT, and the decoder never reads outside the input
 *     (ASan: the replay gives each input its own exact-size block), nor past the bounds it
 *     was given (entries);
 *   - on MV_OK: the UIDs ascend, each at most the form's last UID; every kept criterion has
 *     a key per entry within its arena; saved ranks are at most the count; ranking the keys
 *     again (in full, and the last half among the first) stays within the entries; the
 *     table encodes again and that decodes to the same table.
 *
 * Corpus: fuzz/corpus/sort_memo (saved forms: no entries, dates only, keys of several
 * criteria with and without ranks, a long run of UIDs).
 */
#include "../imapd/imap_sort_memo.h"
#include "../imapd/imap_sort_rank.h"
#include "mailvault.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SORT_MAX   1024
#define FUZZ_SORT_PLAIN (256u << 10)

static void fuzz_sort_check(const struct imap_sort_table *t)
{
    for (size_t i = 0; i < t->count; i++) {
        if (t->uids[i] == 0 || t->uids[i] > t->last_uid ||
            (i > 0 && t->uids[i] <= t->uids[i - 1])) {
            abort();
        }
    }
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        const struct imap_sort_keys *k = &t->keys[by];
        for (size_t i = 0; k->at != NULL && i < t->count; i++) {
            if (k->at[i] >= k->used ||
                memchr(k->bytes + k->at[i], '\0', k->used - k->at[i]) == NULL ||
                (k->rank != NULL && k->rank[i] > t->count)) {
                abort();
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct imap_sort_table t = {0}, again = {0};
    int rc = imap_sort_memo_decode(data, size, FUZZ_SORT_MAX, FUZZ_SORT_PLAIN, &t);
    if (rc == MV_ECORRUPT) {
        return 0;
    }
    if (rc != MV_OK || t.count > FUZZ_SORT_MAX) {
        abort();
    }
    fuzz_sort_check(&t);
    unsigned char *p = NULL;
    size_t len = 0;
    if (imap_sort_memo_encode(&t, &p, &len) != MV_OK ||
        imap_sort_memo_decode(p, len, FUZZ_SORT_MAX, FUZZ_SORT_PLAIN, &again) != MV_OK ||
        again.count != t.count || again.kinds != t.kinds || again.last_uid != t.last_uid ||
        memcmp(again.uids, t.uids, t.count * sizeof *t.uids) != 0 ||
        (t.sent != NULL && memcmp(again.sent, t.sent, t.count * sizeof *t.sent) != 0)) {
        abort();
    }
    free(p);
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        const struct imap_sort_keys *k = &t.keys[by];
        if (k->at == NULL) {
            continue;
        }
        uint32_t rank[FUZZ_SORT_MAX];
        for (size_t i = 0; i < t.count; i++) {
            if (strcmp(k->bytes + k->at[i], again.keys[by].bytes + again.keys[by].at[i]) != 0 ||
                (k->rank != NULL && k->rank[i] != again.keys[by].rank[i])) {
                abort();
            }
        }
        if (imap_sort_rank_all(k, t.count / 2, rank) != MV_OK ||
            imap_sort_rank_more(k, t.count / 2, t.count, rank) != MV_OK) {
            abort();
        }
        for (size_t i = 0; i < t.count; i++) {
            if (rank[i] > t.count) {
                abort();
            }
        }
    }
    imap_sort_table_free(&t);
    imap_sort_table_free(&again);
    return 0;
}
