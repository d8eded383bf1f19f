/*
 * quota.c -- the per-user storage quota (RFC 9208 STORAGE) that APPEND, LMTP and GETQUOTA
 * share: one limit, quota_kib in the config (0: unlimited), against the user's logical
 * size, the sum of the sizes of the messages in every mailbox (a copy counts twice, as
 * mv_store_stats() counts logical_bytes).
 *
 * IMPLEMENTATION NOTES
 *   The usage is summed over the mailbox rows (mv_mailbox_list_*: size_bytes is a column
 *   the store keeps up to date as messages come and go), so it costs one row per mailbox,
 *   never a walk of the messages.
 *
 * LIMITATIONS
 *   A sealed LMTP delivery (the store is not open, no password) cannot read the usage: it is
 *   accepted, and the quota is checked again at the next APPEND or direct delivery.
 */
#include "imapd.h"

int quota_used(mv_store *store, uint64_t *used_bytes)
{
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info info;
    uint64_t total = 0;
    int rc = mv_mailbox_list_begin(store, &it);
    if (rc != MV_OK) {
        return rc;
    }
    while ((rc = mv_mailbox_list_next(it, &info)) == 1) {
        total += info.size_bytes;
    }
    mv_mailbox_list_end(&it);
    if (rc < 0) {
        return rc;
    }
    *used_bytes = total;
    return MV_OK;
}

int quota_exceeded(mv_store *store, const struct config *cfg, uint64_t add_bytes)
{
    if (cfg->quota_kib == 0) {
        return 0;
    }
    uint64_t used = 0;
    if (quota_used(store, &used) != MV_OK) {
        return 0; /* the append itself will report a broken store */
    }
    uint64_t limit = cfg->quota_kib * 1024u;
    return used > limit || add_bytes > limit - used;
}
