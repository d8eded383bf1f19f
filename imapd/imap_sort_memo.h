/*
 * imap_sort_memo.h -- SORT's kept keys of one mailbox (imap_sort_kept.c) as a table, and its
 * saved form, kept in the store as a mailbox memo (mv_mailbox_memo_put, slot
 * IMAP_SORT_MEMO_SLOT) so that the first SORT after a start reads one row, not the header
 * fields of every message, and does not rank them again.
 *
 * FORMAT (imap_sort_memo.c)
 *   "MVSK" 1 | varint last_uid | varint count | varint kinds | varint ranked |
 *   varint plain_len | one zstd frame of plain_len bytes (imap_zframe.h) holding, in columns
 *   (a column of like values compresses well):
 *   - count x varint uid step: the first step is the UID itself, each later one the
 *     difference (>= 1), every UID at most last_uid (every message up to it was read);
 *   - with DATE in kinds: count x varint date code, 0 for no usable Date, else the zigzag of
 *     the difference from the last dated entry before it (the first: from 0), plus 1;
 *   - for each string criterion in kinds, lowest first: count x (varint length, the key's
 *     bytes: under IMAP_SORT_KEPT_KEY_MAX, no NUL);
 *   - for each criterion in ranked (string ones in kinds), lowest first: count x varint
 *     rank (imap_sort_rank.h: at most count; 0 exactly for the empty keys).
 *   kinds and ranked: bit (1u << by) of enum imap_sort_by. Compressed: the keys repeat
 *   (senders, subjects of a thread); the bench corpus' dates and five string criteria with
 *   their ranks take 2.6 MB at 100,000 messages (26 bytes a message).
 */
#ifndef MV_IMAPD_IMAP_SORT_MEMO_H
#define MV_IMAPD_IMAP_SORT_MEMO_H

#include "imap_sort_key.h"

#include <stddef.h>
#include <stdint.h>

/* The slot (below MV_MAILBOX_MEMO_SLOTS; imap_sent_memo.h and imap_msgid_memo.h have 0, 1). */
#define IMAP_SORT_MEMO_SLOT 2u
/* A kept string key's bytes, its NUL included. */
#define IMAP_SORT_KEPT_KEY_MAX 1024u

/* One string criterion's keys: entry e's key is the NUL-terminated bytes + at[e]. */
struct imap_sort_keys {
    uint32_t *at;   /* per entry, its key's offset in bytes (an arena stays under 4 GiB) */
    uint32_t *rank; /* the first `ranked` entries' ranks (imap_sort_rank.h), or NULL */
    size_t ranked;  /* entries rank covers: all of them once a SORT asked (imap_sort_kept.c) */
    char *bytes;
    size_t used, cap;
};

/* A mailbox's entries in UID order and the keys of the criteria in kinds. */
struct imap_sort_table {
    uint32_t last_uid; /* every UID up to it read */
    unsigned kinds;    /* DATE and string criteria: bit (1u << by) */
    uint32_t *uids;    /* ascending */
    int64_t *sent;     /* with DATE: the Date in UTC, or MV_SENT_NONE */
    size_t count, cap;
    struct imap_sort_keys keys[IMAP_SORT_BY_COUNT]; /* the string criteria in kinds */
};

/* The kinds a table may keep: DATE and the string criteria. */
unsigned imap_sort_memo_kinds(void);
/* The saved form of t, with the ranks of every kind ranked in full: *out malloc'd (free())
 * and *len. MV_OK, MV_EINVAL (UIDs not ascending or above last_uid, a key over the bound),
 * MV_ENOMEM. */
int imap_sort_memo_encode(const struct imap_sort_table *t, unsigned char **out, size_t *len);
/* Reads a saved form of at most max_count entries and max_plain bytes decompressed into t
 * (zeroed by the caller): arrays malloc'd, cap = count (imap_sort_table_free). MV_OK;
 * MV_ECORRUPT when the bytes are not one whole saved form within those bounds; MV_ENOMEM.
 * On failure t holds nothing. */
int imap_sort_memo_decode(const unsigned char *p,
                          size_t len,
                          size_t max_count,
                          size_t max_plain,
                          struct imap_sort_table *t);
/* Frees t's arrays (its keys wiped: subjects and addresses) and zeroes it. */
void imap_sort_table_free(struct imap_sort_table *t);

#endif
