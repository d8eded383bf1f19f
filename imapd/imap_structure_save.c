/*
 * imap_structure_save.c -- a store's unsaved FETCH BODYSTRUCTURE and BODY answers written to
 * its memos (imap_structure_save.h).
 *
 * WHY
 *   The structure cache (imap_structure_cache.c) goes with the store's close (store_idle_s
 *   after its last session) and with the server, and the answers cost a read, decryption,
 *   decompression and a MIME parse of every message, attachments included: FETCH 1:*
 *   (BODYSTRUCTURE) of a 100,000-message INBOX took ~13 s the first time after every start,
 *   and a webmail's or client's first page of the day paid that per message again. Dovecot
 *   keeps the answers in its cache file. The memos are that file's part for this server.
 *
 * HOW
 *   The answers are copied out of the cache under its lock (a few hundred bytes each, with
 *   the tag in front: imap_mime_structure_tag), sorted by UIDVALIDITY and UID, and written
 *   one mv_message_memos_put per UIDVALIDITY (one write transaction each; nearly always one:
 *   a FETCH names one mailbox). The store resolves each (UIDVALIDITY, UID) to the message's
 *   body inside its statement, so an answer of a message expunged meanwhile is dropped there.
 */
#include "imap_structure_save.h"

#include "imap_mime.h"

#include <stdlib.h>
#include <string.h>

struct save_item {
    struct imap_structure_key key;
    unsigned char *bytes; /* the tag, then the answer (malloc'd; mail: wiped when freed) */
    size_t len;
};

struct save_batch {
    struct save_item *items;
    size_t count, cap;
    unsigned char tag[IMAP_MIME_TAG_LEN];
};

/* imap_structure_unsaved_fn: copies one answer (under the cache's lock: no call back into
 * it). Out of memory: that answer is not saved (made again after the next open). */
static void save_take(void *arg, const struct imap_structure_key *key, const char *text, size_t len)
{
    struct save_batch *b = arg;
    if (b->count == b->cap || len > MV_MEMO_MAX - IMAP_MIME_TAG_LEN) {
        return; /* (over MV_MEMO_MAX the store would not keep it: not copied for nothing) */
    }
    unsigned char *bytes = malloc(IMAP_MIME_TAG_LEN + len);
    if (bytes == NULL) {
        return;
    }
    memcpy(bytes, b->tag, IMAP_MIME_TAG_LEN);
    memcpy(bytes + IMAP_MIME_TAG_LEN, text, len);
    struct save_item *it = &b->items[b->count++];
    it->key = *key;
    it->bytes = bytes; /* freed by imap_structure_save */
    it->len = IMAP_MIME_TAG_LEN + len;
}

static int save_order(const void *pa, const void *pb)
{
    const struct save_item *a = pa, *b = pb;
    if (a->key.uidvalidity != b->key.uidvalidity) {
        return a->key.uidvalidity < b->key.uidvalidity ? -1 : 1;
    }
    return a->key.uid < b->key.uid ? -1 : a->key.uid > b->key.uid;
}

int imap_structure_save(struct imap_structure_cache *cache,
                        mv_store *store,
                        size_t max,
                        size_t *taken)
{
    *taken = 0;
    if (cache == NULL || store == NULL || max == 0) {
        return MV_OK;
    }
    if (max > MV_MEMO_BATCH_MAX) {
        max = MV_MEMO_BATCH_MAX;
    }
    struct save_batch b = {.items = calloc(max, sizeof *b.items), .cap = max};
    struct mv_memo *memos = calloc(max, sizeof *memos);
    if (b.items == NULL || memos == NULL) {
        free(b.items);
        free(memos);
        return MV_ENOMEM; /* nothing handed out: tried again later */
    }
    imap_mime_structure_tag(b.tag);
    *taken = imap_structure_cache_take_unsaved(cache, max, save_take, &b);
    qsort(b.items, b.count, sizeof *b.items, save_order);
    int rc = MV_OK;
    for (size_t at = 0; at < b.count;) {
        size_t n = 0;
        uint32_t uidvalidity = b.items[at].key.uidvalidity;
        while (at + n < b.count && b.items[at + n].key.uidvalidity == uidvalidity) {
            const struct save_item *it = &b.items[at + n];
            memos[n] = (struct mv_memo){.uid = it->key.uid,
                                        .slot = imap_structure_memo_slot(&it->key),
                                        .data = it->bytes,
                                        .len = it->len};
            n++;
        }
        if (rc == MV_OK) {
            rc = mv_message_memos_put(store, uidvalidity, memos, n, NULL);
        }
        at += n;
    }
    for (size_t i = 0; i < b.count; i++) {
        mv_free(b.items[i].bytes); /* wiped: answers quote mail */
    }
    free(b.items);
    free(memos);
    return rc;
}
