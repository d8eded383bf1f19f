/*
 * store_uidset.h -- IMAP UID sets ("1", "3:7", "7:3", "1,4:6,9:*") parsed into sorted,
 * merged, clamped ranges.
 *
 * USAGE
 *   struct store_uidset set = {0};
 *   rc = store_uidset_parse(s, text, max_uid, &set);      MV_OK / MV_EINVAL / MV_ELIMIT
 *   for (size_t i = 0; i < set.count; i++)
 *       ... WHERE mailbox_id = ? AND uid > ? AND uid <= ? (chunked, see store_message.c)
 *   store_uidset_free(&set);
 */
#ifndef MV_STORE_UIDSET_H
#define MV_STORE_UIDSET_H

#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_UIDSET_RANGES_MAX 10000 /* ranges in one set, as written by the client */
#define STORE_UIDSET_TEXT_MAX                                                                      \
    ((size_t)STORE_UIDSET_RANGES_MAX * 22) /* "4294967295:4294967295,"                             \
                                            */

struct store_uid_range {
    uint32_t first; /* first <= last, both inclusive */
    uint32_t last;
};

struct store_uidset {
    struct store_uid_range *ranges; /* ascending, non-overlapping, non-adjacent */
    size_t count;                   /* 0 when no range touches 1..max_uid */
};

/* Parses text: '*' stands for max_uid (the largest UID in the mailbox, 0 if empty); a range
 * written backwards ("7:3") is turned around. The result is sorted and merged, and clamped to
 * 1..max_uid: ranges wholly above max_uid are dropped (no message can be there), so a caller
 * that appends to the same mailbox while walking the set never meets its own new messages.
 * Returns MV_OK, MV_EINVAL (syntax; message names the offset), MV_ELIMIT (more than
 * STORE_UIDSET_RANGES_MAX ranges, or text longer than STORE_UIDSET_TEXT_MAX), MV_ENOMEM.
 * On failure *out is empty. Free with store_uidset_free(). */
int store_uidset_parse(mv_store *s, const char *text, uint32_t max_uid, struct store_uidset *out);
void store_uidset_free(struct store_uidset *set);

#endif /* MV_STORE_UIDSET_H */
