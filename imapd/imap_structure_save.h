/*
 * imap_structure_save.h -- a store's FETCH BODYSTRUCTURE and BODY answers written to its memos
 * (mv_message_memos_put), so that they outlive the store's close and the server
 * (imap_structure_save.c).
 *
 * USAGE (the worker's writer thread that holds the store's user)
 *   size_t taken;
 *   int rc = imap_structure_save(cache, store, IMAP_STRUCTURE_SAVE_BATCH, &taken);
 *       between jobs, while it returns MV_OK with taken > 0 and no job waits;
 *       at the store's close, until taken is 0 or it fails
 */
#ifndef MV_IMAPD_IMAP_STRUCTURE_SAVE_H
#define MV_IMAPD_IMAP_STRUCTURE_SAVE_H

#include "imap_structure_cache.h"
#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>

/* The memo slot of key's answer: BODYSTRUCTURE or BODY, UTF8=ACCEPT or not. */
static inline uint32_t imap_structure_memo_slot(const struct imap_structure_key *key)
{
    return (uint32_t)key->extensible | (uint32_t)key->utf8 << 1;
}

/* Answers one call writes at most: ~300 bytes each in the bench's corpus, so a write
 * transaction of ~80 KB (a few ms) that a waiting job waits for at most. */
#define IMAP_STRUCTURE_SAVE_BATCH 256

/* Writes up to max of cache's unsaved answers (imap_structure_cache_take_unsaved) to store's
 * memos, each tagged (imap_mime_structure_tag), one write transaction per UIDVALIDITY among
 * them. *taken: the answers handed out (0: none waited; each is handed out once, so on a
 * failure they are not saved, and are made again by the FETCH after the next open). Answers
 * of messages gone meanwhile or over the memo bounds are left out by the store. Returns MV_OK
 * or the first failure's code (the message in mv_store_errmsg(store)). */
int imap_structure_save(struct imap_structure_cache *cache,
                        mv_store *store,
                        size_t max,
                        size_t *taken);

#endif /* MV_IMAPD_IMAP_STRUCTURE_SAVE_H */
