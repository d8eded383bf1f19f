/*
 * imap_view_cache.c -- a per-store cache of mailbox views, so SELECT and EXAMINE copy a view
 * kept up to date instead of listing the whole mailbox from SQLite every time (issue 13:
 * at 100,000 messages the listing, one table seek per row plus page decryption, was 51 ms of
 * a warm LOGIN + SELECT).
 *
 * HOW
 *   - The cache hangs off the worker's open store (struct open_store), so it lives as long
 *     as the store stays open (store_idle_s after its last session) and is only ever used by
 *     the one thread that uses the store. It holds the views of the IMAP_VIEW_CACHE_MAILBOXES
 *     mailboxes selected last (least recently selected goes first), keyed by the mailbox's
 *     id and UIDVALIDITY, so a rename keeps it and a mailbox made again under the same name
 *     does not find it.
 *   - A SELECT brings the cached view up to date the way a session's view is synced
 *     (imap_view.c): nothing if the mailbox's highest modseq did not move; else the rows
 *     changed since the cached modseq and the UIDs expunged since (ranges on the modseq and
 *     change-log indexes: cost in proportion to the changes), merged in one pass; the whole
 *     mailbox is listed again when the log cannot say (the modseq went back: a restored
 *     backup; more than MV_EXPUNGED_MAX expunges). All reads of one SELECT are one read
 *     transaction, so the status and the changes are one snapshot, and the cached view must
 *     then hold exactly the mailbox's message count (kept in the mailbox row by triggers):
 *     if it does not (the store changed in a way the log does not show), the view is listed
 *     again. Changes by other sessions, other workers, the CLI or another process all reach
 *     the store's change log, so they are all seen.
 *   - Then the session gets a copy: one memcpy of the compact array (48 bytes a message)
 *     plus a reference per message that has keywords (shared strings, imap_keywords.c).
 *     Session state (\Recent, pending expunges, reported) is not in the cache: each session
 *     adds its own on the copy, exactly as it did on a fresh listing.
 *
 * MEMORY
 *   48 bytes a message per cached view, plus each distinct keyword list once: a 100,000-
 *   message INBOX costs 4.8 MB while its store is open, 1,000,000 messages 48 MB; at most
 *   IMAP_VIEW_CACHE_MAILBOXES views per open store, and stores_per_worker open stores per
 *   worker bound the whole. A session's own view is one more copy while it has the mailbox
 *   selected (as before).
 */
#include "imap_session.h"
#include "log.h"
#include "mailvault.h"
#include "worker.h"

#include <stdlib.h>
#include <string.h>

#define IMAP_VIEW_CACHE_MAILBOXES 4

struct imap_view_cache {
    struct imap_view views[IMAP_VIEW_CACHE_MAILBOXES]; /* mailbox NULL: a free slot */
    int64_t ids[IMAP_VIEW_CACHE_MAILBOXES];            /* the mailbox's id */
    uint64_t used[IMAP_VIEW_CACHE_MAILBOXES];          /* the tick of the last select */
    uint64_t tick;
};

void imap_view_cache_free(struct imap_view_cache **c)
{
    if (c == NULL || *c == NULL) {
        return;
    }
    for (int i = 0; i < IMAP_VIEW_CACHE_MAILBOXES; i++) {
        imap_view_free(&(*c)->views[i]);
    }
    free(*c);
    *c = NULL;
}

/* Merges the changed rows (ascending UID: updates and new messages) into c and drops the
 * gone UIDs (ascending), in one pass; changed's keywords move into c. MV_OK or MV_ENOMEM
 * (then c is as it was). */
static int imap_view_cache_merge(struct imap_view *c,
                                 struct imap_view *changed,
                                 const uint32_t *gone,
                                 size_t gone_count)
{
    size_t cap = c->count + changed->count;
    struct imap_msg *out = malloc((cap > 0 ? cap : 1) * sizeof *out);
    if (out == NULL) {
        return MV_ENOMEM;
    }
    size_t i = 0, j = 0, k = 0;
    while (i < c->count || j < changed->count) {
        struct imap_msg m;
        if (j == changed->count || (i < c->count && c->msgs[i].uid < changed->msgs[j].uid)) {
            m = c->msgs[i++];
        } else {
            if (i < c->count && c->msgs[i].uid == changed->msgs[j].uid) {
                imap_kw_unref(c->msgs[i++].keywords); /* replaced by its newer row */
            }
            m = changed->msgs[j++];
        }
        if (gone_count > 0 && imap_uids_contain(gone, gone_count, m.uid)) {
            imap_kw_unref(m.keywords);
            continue;
        }
        out[k++] = m;
    }
    changed->count = 0; /* its keywords are c's or dropped now */
    free(c->msgs);
    c->msgs = out;
    c->count = k;
    c->cap = cap > 0 ? cap : 1;
    return MV_OK;
}

/* Brings the cached view c up to date with the mailbox as info describes it (read in the
 * same transaction). MV_ELIMIT: the log cannot say, list it all again. */
static int imap_view_cache_update(mv_store *store,
                                  const char *mailbox,
                                  const struct mv_mailbox_info *info,
                                  struct imap_view *c)
{
    if (info->highestmodseq < c->highestmodseq) {
        return MV_ELIMIT; /* back in time: a restored backup */
    }
    if (info->highestmodseq > c->highestmodseq) {
        struct imap_view changed;
        memset(&changed, 0, sizeof changed);
        uint32_t *gone = NULL;
        size_t gone_count = 0;
        int rc = imap_view_list(store, mailbox, c->highestmodseq, &changed);
        if (rc == MV_OK) {
            rc = mv_message_expunged_since(store, mailbox, c->highestmodseq, &gone, &gone_count);
        }
        if (rc == MV_OK) {
            rc = imap_view_cache_merge(c, &changed, gone, gone_count);
        }
        mv_free(gone);
        imap_view_free(&changed);
        if (rc != MV_OK) {
            return rc;
        }
    }
    c->uidnext = info->uidnext;
    c->highestmodseq = info->highestmodseq;
    /* One snapshot: the view must hold exactly the mailbox's count, else the log missed
     * something (a store replaced behind the server's back) and a full listing decides. */
    return c->count == info->messages ? MV_OK : MV_ELIMIT;
}

/* The cached view of mailbox, up to date; NULL with *rc set when it cannot be had. */
static struct imap_view *
imap_view_cache_get(struct imap_view_cache *cache, mv_store *store, const char *mailbox, int *rc)
{
    struct mv_mailbox_info info;
    *rc = mv_mailbox_status(store, mailbox, &info);
    if (*rc != MV_OK) {
        return NULL;
    }
    int slot = -1;
    for (int i = 0; i < IMAP_VIEW_CACHE_MAILBOXES; i++) {
        if (cache->views[i].mailbox != NULL && cache->ids[i] == info.id &&
            cache->views[i].uidvalidity == info.uidvalidity) {
            slot = i;
        }
    }
    struct imap_view *c = slot >= 0 ? &cache->views[slot] : NULL;
    *rc = c != NULL ? imap_view_cache_update(store, mailbox, &info, c) : MV_ELIMIT;
    if (*rc == MV_ELIMIT) { /* not cached, or the log cannot say: list it all */
        if (slot < 0) {
            slot = 0;
            for (int i = 1; i < IMAP_VIEW_CACHE_MAILBOXES; i++) {
                if (cache->views[i].mailbox == NULL ||
                    (cache->views[slot].mailbox != NULL && cache->used[i] < cache->used[slot])) {
                    slot = i;
                }
            }
        }
        c = &cache->views[slot];
        imap_view_free(c);
        *rc = imap_view_list(store, mailbox, 0, c);
        log_msg(LOG_LEVEL_DEBUG, "view cache: %s listed (%zu messages)", mailbox, c->count);
        c->uidvalidity = info.uidvalidity;
        c->uidnext = info.uidnext;
        c->highestmodseq = info.highestmodseq;
        cache->ids[slot] = info.id;
        if (*rc == MV_OK && (c->mailbox = strdup(mailbox)) == NULL) {
            *rc = MV_ENOMEM;
        }
    }
    if (*rc != MV_OK) {
        imap_view_free(c); /* nothing half-updated stays behind */
        return NULL;
    }
    cache->used[slot] = ++cache->tick;
    return c;
}

int imap_view_cache_copy(struct open_store *os, const char *mailbox, struct imap_view *out)
{
    memset(out, 0, sizeof *out);
    if (os->view_cache == NULL && (os->view_cache = calloc(1, sizeof *os->view_cache)) == NULL) {
        return MV_ENOMEM;
    }
    /* One read transaction: the status and the changes are one snapshot. Without it (it
     * cannot fail here but for a store error, which the reads then report) each read has
     * its own, and the count check at worst lists the mailbox again. */
    if (mv_store_read_begin(os->store) != MV_OK) {
        /* nothing lost: each read has its own */
    }
    int rc = MV_OK;
    const struct imap_view *c = imap_view_cache_get(os->view_cache, os->store, mailbox, &rc);
    mv_store_read_end(os->store);
    if (c == NULL) {
        return rc;
    }
    out->msgs = malloc((c->count > 0 ? c->count : 1) * sizeof *out->msgs);
    if (out->msgs == NULL) {
        return MV_ENOMEM;
    }
    if (c->count > 0) {
        memcpy(out->msgs, c->msgs, c->count * sizeof *out->msgs);
    }
    for (size_t i = 0; i < c->count; i++) {
        imap_kw_ref(out->msgs[i].keywords);
    }
    out->count = c->count;
    out->cap = c->count > 0 ? c->count : 1;
    out->uidvalidity = c->uidvalidity;
    out->uidnext = c->uidnext;
    out->highestmodseq = c->highestmodseq;
    return MV_OK;
}
