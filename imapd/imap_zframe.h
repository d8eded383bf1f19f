/*
 * imap_zframe.h -- one zstd frame after a caller's head: the saved forms of mailvaultd's
 * mailbox memos (imap_msgid_memo.c, imap_sort_memo.c) are a tag and counts, then their
 * entries compressed as one frame that says its content size and carries a checksum, so a
 * damaged memo never decodes to other entries.
 *
 * USAGE
 *   rc = imap_zframe_pack(head, head_len, plain, plain_len, level, &out, &len);
 *        out (malloc'd, free()) holds head then the frame
 *   rc = imap_zframe_unpack(at, n, plain_len, &plain);
 *        at[0..n) must be exactly one frame of plain_len bytes: plain malloc'd (the caller
 *        wipes and frees it)
 */
#ifndef MV_IMAPD_IMAP_ZFRAME_H
#define MV_IMAPD_IMAP_ZFRAME_H

#include <stddef.h>
#include <stdint.h>

/* MV_OK, or MV_ENOMEM (out of memory, or zstd failing, which only memory makes it do). */
int imap_zframe_pack(const unsigned char *head,
                     size_t head_len,
                     const unsigned char *plain,
                     size_t plain_len,
                     int level,
                     unsigned char **out,
                     size_t *len);
/* MV_OK, MV_ECORRUPT (not one whole frame of plain_len bytes, or its checksum wrong), or
 * MV_ENOMEM. */
int imap_zframe_unpack(const unsigned char *at,
                       size_t n,
                       uint64_t plain_len,
                       unsigned char **plain);

#endif
