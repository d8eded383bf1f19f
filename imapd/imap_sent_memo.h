/*
 * imap_sent_memo.h -- the saved form of a mailbox's sent days (imap_search_sent.c's copy),
 * kept in the store as a mailbox memo (mv_mailbox_memo_put, slot IMAP_SENT_MEMO_SLOT) so that
 * the first SEARCH SENT* after a start reads one row, not two rows of every message.
 *
 * FORMAT (imap_sent_memo.c)
 *   "MVSD" 1 | varint last_uid | varint count | count x (varint uid step, varint day code)
 *   - the UIDs ascend: the first step is the UID itself, each later one the difference (>= 1);
 *     every UID is at most last_uid (every message up to it was read: a UID not listed there
 *     is a message that had been expunged);
 *   - the day code is 0 for a message without a usable Date header, else the zigzag of the
 *     day's difference from the last dated message before it (the first: from day 0), plus 1:
 *     mail listed in UID order was mostly sent in order, so most entries take two bytes.
 *   - varints and zigzag as a saved view's (varint.h).
 *   Not compressed: 2 bytes a message is ~200 KB at 100,000, a few dozen pages (zstd would
 *   halve it).
 */
#ifndef MV_IMAPD_IMAP_SENT_MEMO_H
#define MV_IMAPD_IMAP_SENT_MEMO_H

#include <stddef.h>
#include <stdint.h>

/* mailvaultd's mailbox memo slots (below MV_MAILBOX_MEMO_SLOTS). */
#define IMAP_SENT_MEMO_SLOT 0u

/* The saved form of count entries (uids ascending, each day or INT32_MIN for none) covering
 * every UID up to last_uid: *out malloc'd (free()) and *len. MV_OK, MV_EINVAL (UIDs not
 * ascending, or above last_uid), MV_ENOMEM. */
int imap_sent_memo_encode(const uint32_t *uids,
                          const int32_t *days,
                          size_t count,
                          uint32_t last_uid,
                          unsigned char **out,
                          size_t *len);

/* Reads a saved form: *last_uid, then add(arg, uid, day) for each entry in order (day
 * INT32_MIN: none). MV_OK; MV_ECORRUPT when the bytes are not one whole saved form of at
 * most max_count entries (add may have been called for some: the caller drops them); or
 * what add returned when it was not MV_OK. */
int imap_sent_memo_decode(const unsigned char *p,
                          size_t len,
                          size_t max_count,
                          uint32_t *last_uid,
                          int (*add)(void *arg, uint32_t uid, int32_t day),
                          void *arg);

#endif
