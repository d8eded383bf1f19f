/*
 * imap_sort_rank.h -- the ranks of a string criterion's keys (imap_sort_kept.c): entry e's
 * rank is 0 for an empty key, else 1 + the place of the first key equal to its own in the
 * keys' order (strcmp: they are in i;ascii-casemap form already). Equal keys have equal
 * ranks, and ranks compare as their keys do, so a SORT compares numbers.
 *
 * USAGE
 *   rc = imap_sort_rank_all(keys, count, rank);           every entry's rank
 *   rc = imap_sort_rank_more(keys, ranked, count, rank);  rank[0..ranked) holds the ranks of
 *        the first `ranked` entries among themselves; entries ranked..count came since:
 *        every rank made again in O(count + k log count) for k new entries (their keys
 *        sorted, placed by binary search, the old order read back from the old ranks), not
 *        by sorting all of them again.
 *   Both: MV_OK or MV_ENOMEM (rank as it was).
 */
#ifndef MV_IMAPD_IMAP_SORT_RANK_H
#define MV_IMAPD_IMAP_SORT_RANK_H

#include "imap_sort_memo.h"

#include <stddef.h>
#include <stdint.h>

int imap_sort_rank_all(const struct imap_sort_keys *keys, size_t count, uint32_t *rank);
int imap_sort_rank_more(const struct imap_sort_keys *keys,
                        size_t ranked,
                        size_t count,
                        uint32_t *rank);

#endif
