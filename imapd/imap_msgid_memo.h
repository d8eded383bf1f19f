/*
 * imap_msgid_memo.h -- the saved form of a mailbox's Message-ID fields (imap_search_msgid.c's
 * copy), kept in the store as a mailbox memo (mv_mailbox_memo_put, slot IMAP_MSGID_MEMO_SLOT)
 * so that the first SEARCH HEADER Message-ID after a start reads one row, not the header of
 * every message.
 *
 * FORMAT (imap_msgid_memo.c)
 *   "MVMI" 1 | varint last_uid | varint count | varint plain_len | one zstd frame of plain_len
 *   bytes, with its content size and checksum, holding
 *   count x (varint uid step, varint code, code - 1 bytes)
 *   - the UIDs ascend as in the saved sent days (imap_sent_memo.h): the first step is the UID
 *     itself, each later one the difference (>= 1), every UID at most last_uid;
 *   - code 0: the message's fields are not kept (longer than the copy keeps: the header is
 *     read from the store when asked); else the message's Message-ID fields, code - 1 bytes
 *     (0 for a message without one), as the header has them (line breaks and all).
 *   Compressed: Message-ID lines repeat their name and their senders' domains, so the form is
 *   well under half of the ~60-100 bytes a message they take (test_imap_msgid_memo: random
 *   16-digit IDs at four domains; the bench corpus' IDs, a counter apart, take 66 KB at
 *   100,000 messages).
 */
#ifndef MV_IMAPD_IMAP_MSGID_MEMO_H
#define MV_IMAPD_IMAP_MSGID_MEMO_H

#include <stddef.h>
#include <stdint.h>

/* The slot (below MV_MAILBOX_MEMO_SLOTS; the sent days have 0: imap_sent_memo.h). */
#define IMAP_MSGID_MEMO_SLOT 1u
/* A length that says "not kept" (the code 0 above). */
#define IMAP_MSGID_NOT_KEPT UINT32_MAX

/* The saved form of count entries (uids ascending, lens[i] bytes of each in bytes one after
 * another, or IMAP_MSGID_NOT_KEPT with none) covering every UID up to last_uid: *out
 * malloc'd (free()) and *len. MV_OK, MV_EINVAL (UIDs not ascending, or above last_uid),
 * MV_ENOMEM. */
int imap_msgid_memo_encode(const uint32_t *uids,
                           const uint32_t *lens,
                           const char *bytes,
                           size_t count,
                           uint32_t last_uid,
                           unsigned char **out,
                           size_t *len);

/* Reads a saved form of at most max_count entries and max_plain bytes once decompressed:
 * *last_uid, then add(arg, uid, bytes, n) for each entry in order (n IMAP_MSGID_NOT_KEPT and
 * bytes NULL: not kept). MV_OK; MV_ECORRUPT when the bytes are not one whole saved form
 * within those bounds (add may have been called for some: the caller drops them);
 * MV_ENOMEM; or what add returned when it was not MV_OK. */
int imap_msgid_memo_decode(const unsigned char *p,
                           size_t len,
                           size_t max_count,
                           size_t max_plain,
                           uint32_t *last_uid,
                           int (*add)(void *arg, uint32_t uid, const char *bytes, uint32_t n),
                           void *arg);

#endif
