/*
 * imap_sort_kept.h -- SORT's keys of one mailbox kept by the open store for the next SORT of
 * any session of the user (issue 13).
 *
 * USAGE
 *   rc = imap_sort_kept_for(s, kinds, &kept);   MV_OK: kept has every message of the view
 *                                               up to its last UID for each criterion in
 *                                               kinds, and the store's sort_lock is held
 *   for messages in UID order:
 *       e = imap_sort_kept_find(kept, &cursor, uid)     its entry, or SIZE_MAX (none)
 *       imap_sort_kept_rank_of(kept, by, e) / imap_sort_kept_sent(kept, e)
 *   imap_sort_kept_done(s);                     the lock let go; kept no longer used
 *   imap_sort_kept_save(os->sort_kept, store)    when the store closes, under the lock: kept
 *                                               in the store for the next open (a memo)
 *   imap_sort_kept_free(&os->sort_kept)         then, under the lock
 *   MV_EUNSUPPORTED from _for: nothing kept (a mailbox over IMAP_SORT_KEPT_MAX messages, or
 *   the process's budget, sort_keys_kib, spent or 0): make the keys for this SORT alone. A
 *   copy refused by the budget is not tried again for the same mailbox and criteria until
 *   another mailbox or criterion is sorted or the store is opened again.
 */
#ifndef MAILVAULT_IMAP_SORT_KEPT_H
#define MAILVAULT_IMAP_SORT_KEPT_H

#include "imap_sort_memo.h"

#include <stddef.h>
#include <stdint.h>

#define IMAP_SORT_KEPT_MAX 262144u
/* As the sent days' (imap_search_sent.h): a close saves the copy when it has at least this
 * many messages read from the store since it was saved (or criteria or ranks the saved one
 * lacks); a copy with more than a quarter and this many messages beyond the view is read
 * afresh. */
#define IMAP_SORT_MEMO_SAVE_NEW 256u
#define IMAP_SORT_MEMO_SLACK    1024u

struct imap_session;
struct imap_sort_kept;

/* kinds: bit (1u << by) for each criterion whose keys come from the store (DATE and the
 * string ones). */
int imap_sort_kept_for(struct imap_session *s, unsigned kinds, const struct imap_sort_kept **out);
void imap_sort_kept_done(struct imap_session *s);
size_t imap_sort_kept_find(const struct imap_sort_kept *k, size_t *cursor, uint32_t uid);
/* The entry's rank by string criterion by (kept: in kinds): 0 for an empty key, else 1 + its
 * key's place among the copy's keys in i;ascii-casemap order; equal keys the same rank. */
uint32_t imap_sort_kept_rank_of(const struct imap_sort_kept *k, enum imap_sort_by by, size_t entry);
/* The entry's Date in UTC, or MV_SENT_NONE. */
int64_t imap_sort_kept_sent(const struct imap_sort_kept *k, size_t entry);
/* Keeps k in its store (a mailbox memo, imap_sort_memo.h) if it read enough since it was saved;
 * a failure is logged, nothing else. k may be NULL. Under the lock, at the store's close. */
void imap_sort_kept_save(struct imap_sort_kept *k, mv_store *store);
void imap_sort_kept_free(struct imap_sort_kept **k);

#endif
