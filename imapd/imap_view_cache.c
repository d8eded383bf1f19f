/*
 * imap_view_cache.c -- a per-store cache of mailbox views, so SELECT and EXAMINE share a view
 * kept up to date instead of listing the whole mailbox from SQLite every time (issue 13:
 * at 100,000 messages the listing, one table seek per row plus page decryption, was 51 ms of
 * a warm LOGIN + SELECT).
 *
 * HOW
 *   - The cache hangs off the worker's open store (struct open_store), so it lives as long
 *     as the store stays open (store_idle_s after its last session). SELECT and EXAMINE
 *     run on the worker's reader thread (imap_lane.c), reading through the reader handle,
 *     and the writer's thread saves the views when it closes the store, so every use holds
 *     the store's view_lock; two SELECTs of one user on two threads take turns. A SELECT's
 *     reads begin after it has the lock, so they see at least what the cache's last update
 *     saw (WAL: a read transaction sees every commit made before it began; a SELECT never
 *     runs inside a transaction of its own handle). The cache holds the views of the
 *     IMAP_VIEW_CACHE_MAILBOXES mailboxes selected last (least recently selected goes
 *     first), keyed by the mailbox's id and UIDVALIDITY, so a rename keeps it and a mailbox
 *     made again under the same name does not find it.
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
 *   - Then the session shares the cached view's messages: a reference per chunk of 4,096
 *     (imap_msgs.c), no copy; whoever must change a message later (the cache at its next
 *     merge, a session at its sync) copies that chunk only. The merge costs the changes
 *     (a binary search each) and a chunk copy per shared chunk they touch, not the mailbox.
 *     Session state (\Recent, pending expunges, reported) is not in the cache: each session
 *     keeps its own marks beside the shared messages.
 *   - The cache keeps what SELECT would otherwise walk every message for: the keyword set
 *     (made when the view is filled, grown at each merge: a keyword once seen stays
 *     announced, as a session's set does) and seen_below, below which every message is
 *     \Seen (a merge lowers it to a changed unseen message; a SELECT moves it up to the
 *     first unseen, looking only at the messages in between).
 *
 *   - Saved views (issue 13: a cold SELECT of a 100,000-message INBOX listed every row, 216 ms
 *     against Dovecot's 312): when the store is closed (idle, evicted, server shutdown), each
 *     cached view is brought up to date and saved in the store (mv_mailbox_view_save, one row
 *     per mailbox, encoded below) unless the saved one already has its modseq. A SELECT that
 *     finds no cached view loads the saved one and brings it up to date exactly as a cached
 *     one (the changes since its modseq, the expunges since, the count check), so a saved
 *     view that is old, from before a crash, or from another server only costs the changes
 *     since; one that does not decode, cannot be read (a damaged page: logged as a warning)
 *     or has another UIDVALIDITY is ignored (full listing).
 *     The saved form and its load are imap_view_saved.c's: a SELECT that loads a saved
 *     view reads its (compressed) bytes and decodes their header only; each chunk of up to
 *     4,096 messages is decoded when a command first reads one of its messages, and a save
 *     copies the chunks still not decoded.
 *
 * MEMORY
 *   40 bytes a message per cached view, plus each distinct keyword list once: a 100,000-
 *   message INBOX costs 4 MB while its store is open, 1,000,000 messages 40 MB (a view
 *   loaded from its saved form: its compressed bytes, ~4.5 MB at 1,000,000, until every
 *   chunk is decoded, and 160 KB per chunk decoded); at most
 *   IMAP_VIEW_CACHE_MAILBOXES views per open store, and stores_per_worker open stores per
 *   worker bound the whole. A selected session shares them: it adds a byte a message (its
 *   marks) and the chunks it or the cache changed since its SELECT (160 KB each).
 */
#include "imap_session.h"
#include "log.h"
#include "mailvault.h"
#include "worker.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define IMAP_VIEW_CACHE_MAILBOXES 4

struct imap_view_cache {
    struct imap_view views[IMAP_VIEW_CACHE_MAILBOXES]; /* mailbox NULL: a free slot */
    int64_t ids[IMAP_VIEW_CACHE_MAILBOXES];            /* the mailbox's id */
    uint64_t used[IMAP_VIEW_CACHE_MAILBOXES];          /* the tick of the last select */
    uint64_t saved[IMAP_VIEW_CACHE_MAILBOXES]; /* the modseq of the store's saved view, 0: none */
    uint64_t tick;
};

/* How imap_view_cache_load reads a saved view: the view it fills, its decoder (made at the
 * first piece, if the view is one to use), what the view must be to be used, and the first
 * error of the decoding (the read then stops with it). */
struct imap_view_reading {
    struct imap_view *c;
    struct imap_view_decoder *dec;
    const struct mv_mailbox_info *info;
    uint32_t uidvalidity;
    uint64_t modseq;
    size_t len;
    int rc;
};

static int imap_view_cache_piece(void *arg, const void *bytes, size_t n)
{
    struct imap_view_reading *r = arg;
    if (r->dec == NULL) { /* the first piece: the tags are read already */
        if (r->uidvalidity != r->info->uidvalidity || r->modseq > r->info->highestmodseq) {
            return r->rc = MV_ENOTFOUND; /* made again since, or from a store that went back */
        }
        if ((r->dec = imap_view_decoder_new(r->c, r->len)) == NULL) {
            return r->rc = MV_ENOMEM;
        }
    }
    r->rc = imap_view_decoder_feed(r->dec, bytes, n);
    return r->rc;
}

/* Fills c (empty) from the store's saved view of mailbox, if there is one for the mailbox
 * as info describes it, with its keyword set, *current set if it is saved in the current
 * version (else it is one to save again); MV_OK, or MV_ENOTFOUND (none usable: list
 * instead) or MV_ENOMEM. */
static int imap_view_cache_load(mv_store *store,
                                const char *mailbox,
                                const struct mv_mailbox_info *info,
                                struct imap_view *c,
                                int *current)
{
    struct imap_view_reading r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.info = info;
    int rc = mv_mailbox_view_read(store, mailbox, &r.uidvalidity, &r.modseq, &r.len,
                                  imap_view_cache_piece, &r);
    if (r.rc != MV_OK) {
        rc = r.rc; /* the decoding's */
        if (rc == MV_ENOTFOUND && imap_view_decoder_version(r.dec) == 1) {
            log_msg(LOG_LEVEL_INFO,
                    "view cache: the saved view of %s is of version 1 (no body keys); listing it",
                    mailbox);
        } else if (rc == MV_ECORRUPT) {
            log_msg(LOG_LEVEL_WARNING,
                    "view cache: the saved view of %s does not decode; listing it", mailbox);
        }
    } else if (rc != MV_OK && rc != MV_ENOMEM) { /* a damaged page or row: the listing works */
        log_msg(LOG_LEVEL_WARNING,
                "view cache: the saved view of %s cannot be read (%s); listing it", mailbox,
                mv_store_errmsg(store));
    } else if (rc == MV_OK && r.len == 0) {
        rc = MV_ENOTFOUND; /* none saved */
    }
    *current = imap_view_decoder_version(r.dec) >= 3;
    imap_view_decoder_end(r.dec, rc);
    if (rc != MV_OK) {
        return rc == MV_ENOMEM ? rc : MV_ENOTFOUND;
    }
    c->uidvalidity = r.uidvalidity;
    c->highestmodseq = r.modseq;
    return MV_OK;
}

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

/* Everything imap_view_cache_merge may fail on, before it changes a message: room for the
 * new ones, the chunks of the updated and the gone ones made c's own (sessions keep the
 * chunks they share), the list of the gone (*drop, malloc'd), the keyword set. */
static int imap_view_cache_merge_prepare(struct imap_view *c,
                                         const struct imap_view *changed,
                                         const uint32_t *gone,
                                         size_t gone_count,
                                         size_t **drop,
                                         size_t *dropped)
{
    uint32_t last_uid = c->count > 0 ? imap_view_msg(c, c->count - 1)->uid : 0;
    size_t added = 0;
    int rc = MV_OK;
    for (size_t j = 0; rc == MV_OK && j < changed->count; j++) {
        const struct imap_msg *f = imap_view_msg(changed, j);
        size_t i = imap_view_find_uid(c, f->uid);
        if (f->uid > last_uid) {
            added++;
        } else if (i < c->count && imap_view_msg(c, i)->uid == f->uid) {
            rc = imap_view_own(c, i);
        }
        if (rc == MV_OK && imap_view_keywords_add_list(c, f->keywords) < 0) {
            rc = MV_ENOMEM;
        }
    }
    if (rc == MV_OK) {
        rc = imap_view_reserve(c, added);
    }
    if (rc == MV_OK && (*drop = malloc((gone_count + 1) * sizeof **drop)) == NULL) {
        rc = MV_ENOMEM;
    }
    for (size_t g = 0; rc == MV_OK && g < gone_count; g++) {
        size_t i = imap_view_find_uid(c, gone[g]);
        if (i < c->count && imap_view_msg(c, i)->uid == gone[g]) {
            (*drop)[(*dropped)++] = i;
            rc = imap_view_own(c, i);
        }
    }
    return rc;
}

/* Merges the changed rows (ascending UID: updates and new messages) into c and drops the
 * gone UIDs (ascending); changed's keywords move into c. Cost in the changes (and a chunk
 * copy per chunk they touch that sessions share), not the mailbox. MV_OK or MV_ENOMEM (then
 * c's messages are as they were). */
static int imap_view_cache_merge(struct imap_view *c,
                                 struct imap_view *changed,
                                 const uint32_t *gone,
                                 size_t gone_count)
{
    uint32_t last_uid = c->count > 0 ? imap_view_msg(c, c->count - 1)->uid : 0;
    size_t *drop = NULL, dropped = 0;
    int rc = imap_view_cache_merge_prepare(c, changed, gone, gone_count, &drop, &dropped);
    if (rc != MV_OK) {
        free(drop);
        return rc;
    }
    for (size_t j = 0; j < changed->count; j++) {
        struct imap_msg *f = imap_view_msg_mut(changed, j);
        if ((f->flags & MV_FLAG_SEEN) == 0 && f->uid < c->seen_below) {
            c->seen_below = f->uid; /* the first unseen may be this one now */
        }
        size_t i = imap_view_find_uid(c, f->uid);
        if (f->uid > last_uid) {
            imap_view_append(c, f); /* reserved; a new one that is gone goes with the drop */
            f->keywords = NULL;
        } else if (i < c->count && imap_view_msg(c, i)->uid == f->uid) {
            struct imap_msg *m = imap_view_msg_mut(c, i); /* its own: prepared */
            const struct imap_kw *keywords = m->keywords;
            *m = *f;
            f->keywords = keywords; /* freed with changed */
        }
    }
    /* New messages that are gone already: after the last old one, and gone lists them in
     * ascending order after those found before. */
    for (size_t g = 0, i = 0; g < gone_count; g++) {
        if (gone[g] <= last_uid) {
            continue;
        }
        i = imap_view_find_uid(c, gone[g]);
        if (i < c->count && imap_view_msg(c, i)->uid == gone[g]) {
            drop[dropped++] = i; /* its chunk is c's own: appended to it */
        }
    }
    imap_view_drop(c, drop, dropped);
    free(drop);
    if (dropped > 0) {
        imap_view_compact(c); /* chunks left short by the removals (imap_msgs.c) */
    }
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

/* The keyword set of c's messages (a run of the same shared list is looked at once): made
 * once when c is listed (a saved view's decode makes it as it goes), then grown by each merge
 * (imap_view_cache_merge_prepare), so a SELECT copies the set instead of walking the
 * messages. */
static int imap_view_cache_keywords(struct imap_view *c)
{
    const struct imap_kw *last = NULL;
    for (size_t i = 0; i < c->count; i++) {
        const struct imap_kw *kw = imap_view_msg(c, i)->keywords;
        if (kw != last) {
            last = kw;
            if (imap_view_keywords_add_list(c, kw) < 0) {
                return MV_ENOMEM;
            }
        }
    }
    return MV_OK;
}

/* The slot a view not in the cache goes to: a free one, else the least recently selected. */
static int imap_view_cache_victim(const struct imap_view_cache *cache)
{
    int slot = 0;
    for (int i = 1; i < IMAP_VIEW_CACHE_MAILBOXES; i++) {
        if (cache->views[i].mailbox == NULL ||
            (cache->views[slot].mailbox != NULL && cache->used[i] < cache->used[slot])) {
            slot = i;
        }
    }
    return slot;
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
    struct imap_view *c;
    if (slot >= 0) {
        c = &cache->views[slot];
        *rc = imap_view_cache_update(store, mailbox, &info, c);
    } else { /* not cached: the store's saved view, brought up to date, else a listing */
        slot = imap_view_cache_victim(cache);
        c = &cache->views[slot];
        imap_view_free(c);
        cache->ids[slot] = info.id;
        cache->saved[slot] = 0;
        int current = 0;
        *rc = imap_view_cache_load(store, mailbox, &info, c, &current); /* with keyword set */
        if (*rc == MV_OK) {
            cache->saved[slot] = current ? c->highestmodseq : 0; /* 0: saved at the close */
            *rc = imap_view_cache_update(store, mailbox, &info, c);
            log_msg(LOG_LEVEL_INFO, "view cache: %s loaded (%zu messages)%s", mailbox, c->count,
                    *rc == MV_ELIMIT ? ", does not match: listing it" : "");
        } else if (*rc == MV_ENOTFOUND) {
            *rc = MV_ELIMIT;
        }
    }
    if (*rc == MV_ELIMIT) { /* not cached or saved, or the log cannot say: list it all */
        imap_view_free(c);
        *rc = imap_view_list(store, mailbox, 0, c);
        if (*rc == MV_OK) {
            *rc = imap_view_cache_keywords(c);
        }
        log_msg(LOG_LEVEL_DEBUG, "view cache: %s listed (%zu messages)", mailbox, c->count);
        c->uidvalidity = info.uidvalidity;
        c->uidnext = info.uidnext;
        c->highestmodseq = info.highestmodseq;
    }
    if (*rc == MV_OK && c->mailbox == NULL && (c->mailbox = strdup(mailbox)) == NULL) {
        *rc = MV_ENOMEM;
    }
    uint32_t room; /* in the SELECT's read transaction; on an error "\*" and asked again */
    if (*rc == MV_OK && c->keywords_full_at != c->highestmodseq &&
        mv_mailbox_keyword_room(store, mailbox, &room) == MV_OK) {
        c->keywords_full = room == 0;
        c->keywords_full_at = c->highestmodseq;
    }
    if (*rc != MV_OK) {
        imap_view_free(c); /* nothing half-updated stays behind */
        return NULL;
    }
    cache->used[slot] = ++cache->tick;
    return c;
}

static int64_t imap_view_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The sequence number of c's first message without \Seen, 0 if none: from c->seen_below on,
 * which it moves up to that message (every message before it is \Seen), so a SELECT looks
 * only at the messages seen since the last one looked (none, usually). */
static size_t imap_view_cache_unseen(struct imap_view *c)
{
    size_t i = imap_view_find_uid(c, c->seen_below);
    while (i < c->count && (imap_view_msg(c, i)->flags & MV_FLAG_SEEN) != 0) {
        i++;
    }
    c->seen_below = i < c->count ? imap_view_msg(c, i)->uid : UINT32_MAX;
    return i < c->count ? i + 1 : 0;
}

/* Brings slot's view up to date and saves it in the store, unless the saved one is as new. */
static void imap_view_cache_save_one(struct imap_view_cache *cache, mv_store *store, int slot)
{
    struct imap_view *c = &cache->views[slot];
    int64_t start_ms = imap_view_now_ms();
    struct mv_mailbox_info info;
    if (mv_store_read_begin(store) != MV_OK) {
        /* nothing lost: each read has its own, and the count check stays */
    }
    int rc = mv_mailbox_status(store, c->mailbox, &info);
    if (rc == MV_OK && (info.id != cache->ids[slot] || info.uidvalidity != c->uidvalidity)) {
        rc = MV_ENOTFOUND; /* renamed, or deleted (and made again) since */
    }
    if (rc == MV_OK) {
        rc = imap_view_cache_update(store, c->mailbox, &info, c);
    }
    mv_store_read_end(store);
    if (rc != MV_OK || cache->saved[slot] == c->highestmodseq) {
        return;
    }
    size_t len = 0;
    unsigned char *data = NULL;
    imap_view_cache_unseen(c); /* the first unseen, saved with the view */
    rc = imap_view_encode(c, c->seen_below != UINT32_MAX ? c->seen_below : 0, &data, &len);
    if (rc == MV_OK) {
        rc = mv_mailbox_view_save(store, c->mailbox, c->uidvalidity, c->highestmodseq, data, len);
    } else if (rc == MV_ECORRUPT) {
        log_msg(LOG_LEVEL_ERROR,
                "view cache: the saved form of %s does not decode back to its "
                "view (a bug); not saved",
                c->mailbox);
    }
    free(data);
    if (rc == MV_OK) {
        cache->saved[slot] = c->highestmodseq;
    }
    log_msg(LOG_LEVEL_INFO, "view cache: %s saved (%zu messages, %zu bytes) in %lld ms: %s",
            c->mailbox, c->count, len, (long long)(imap_view_now_ms() - start_ms),
            rc == MV_OK         ? "ok"
            : rc == MV_ECORRUPT ? "not saved"
                                : mv_store_errmsg(store));
}

void imap_view_cache_save(struct imap_view_cache *cache, mv_store *store)
{
    for (int i = 0; cache != NULL && store != NULL && i < IMAP_VIEW_CACHE_MAILBOXES; i++) {
        if (cache->views[i].mailbox != NULL) {
            imap_view_cache_save_one(cache, store, i);
        }
    }
}

/* imap_view_cache_copy with the cache's lock held. */
static int imap_view_cache_copy_locked(struct open_store *os,
                                       mv_store *db,
                                       const char *mailbox,
                                       struct imap_view *out)
{
    if (os->view_cache == NULL && (os->view_cache = calloc(1, sizeof *os->view_cache)) == NULL) {
        return MV_ENOMEM;
    }
    /* One read transaction: the status and the changes are one snapshot. Without it (it
     * cannot fail here but for a store error, which the reads then report) each read has
     * its own, and the count check at worst lists the mailbox again. */
    if (mv_store_read_begin(db) != MV_OK) {
        /* nothing lost: each read has its own */
    }
    int rc = MV_OK;
    struct imap_view *c = imap_view_cache_get(os->view_cache, db, mailbox, &rc);
    mv_store_read_end(db);
    if (c == NULL) {
        return rc;
    }
    /* The messages shared, not copied (imap_msgs.c); the keyword set copied (a few dozen
     * names); the first unseen from where the cache last found it. */
    rc = imap_view_share(out, c);
    for (size_t i = 0; rc == MV_OK && i < c->keyword_count; i++) {
        rc = imap_view_keywords_add(out, c->keyword_names[i]) < 0 ? MV_ENOMEM : MV_OK;
    }
    if (rc != MV_OK) {
        imap_view_free(out);
        return rc;
    }
    out->first_unseen = imap_view_cache_unseen(c);
    out->keywords_full = c->keywords_full;
    out->uidvalidity = c->uidvalidity;
    out->uidnext = c->uidnext;
    out->highestmodseq = c->highestmodseq;
    return MV_OK;
}

int imap_view_cache_copy(struct open_store *os,
                         mv_store *db,
                         const char *mailbox,
                         struct imap_view *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&os->view_lock);
    int rc = imap_view_cache_copy_locked(os, db, mailbox, out);
    pthread_mutex_unlock(&os->view_lock);
    return rc;
}
