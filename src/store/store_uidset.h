/*
 * store_uidset.h -- IMAP UID sets ("1", "3:7", "7:3", "1,4:6,9:*") parsed into sorted,
 * merged, clamped ranges.
 *
 * USAGE
 *   struct store_uidset set = {0};
 *   rc = store_uidset_parse(s, text, max_uid, &set);      MV_OK / MV_EINVAL / MV_ELIMIT
 *   (or store_uidset_from_ranges(s, ranges, count, max_uid, &set) for typed ranges)
 *   ... FROM mv_uid_ranges(?9) r JOIN messages m ON m.mailbox_id = ?1
 *           AND m.uid BETWEEN r.first AND r.last       (one statement for the whole set;
 *   sqlite3_bind_pointer(st, 9, &set, STORE_UIDSET_POINTER, NULL))
 *   store_uidset_free(&set);
 */
#ifndef MV_STORE_UIDSET_H
#define MV_STORE_UIDSET_H

#include "store/store.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_UIDSET_RANGES_MAX MV_UIDSET_TEXT_RANGES_MAX /* ranges in one set as text */
#define STORE_UIDSET_TEXT_MAX                                                                      \
    ((size_t)STORE_UIDSET_RANGES_MAX * 22) /* "4294967295:4294967295,"                             \
                                            */

struct store_uidset {
    struct mv_uid_range *ranges; /* ascending, non-overlapping, non-adjacent */
    size_t count;                /* 0 when no range touches 1..max_uid */
};

/* Parses text: '*' stands for max_uid (the largest UID in the mailbox, 0 if empty); a range
 * written backwards ("7:3") is turned around. The result is sorted and merged, and clamped to
 * 1..max_uid: ranges wholly above max_uid are dropped (no message can be there), so a caller
 * that appends to the same mailbox while walking the set never meets its own new messages.
 * Returns MV_OK, MV_EINVAL (syntax; message names the offset), MV_ELIMIT (more than
 * STORE_UIDSET_RANGES_MAX ranges, or text longer than STORE_UIDSET_TEXT_MAX), MV_ENOMEM.
 * On failure *out is empty. Free with store_uidset_free(). */
int store_uidset_parse(mv_store *s, const char *text, uint32_t max_uid, struct store_uidset *out);
/* The same from typed ranges (mv_*_ranges): copied, checked (first >= 1, first <= last:
 * else MV_EINVAL), sorted, merged and clamped as above; no cap on count. MV_ENOMEM. */
int store_uidset_from_ranges(mv_store *s,
                             const struct mv_uid_range *ranges,
                             size_t count,
                             uint32_t max_uid,
                             struct store_uidset *out);
void store_uidset_free(struct store_uidset *set);

/* The pointer type of a set bound to mv_uid_ranges(?) with sqlite3_bind_pointer. */
#define STORE_UIDSET_POINTER "mv_uidset"
/* Registers the table-valued function mv_uid_ranges(set) on the store's connection: the
 * rows (first, last) of a struct store_uidset bound as a pointer of type
 * STORE_UIDSET_POINTER, ascending; no rows if the pointer is of another type or NULL. */
int store_uidset_register(mv_store *s);

#endif /* MV_STORE_UIDSET_H */
