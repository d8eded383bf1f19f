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
 *     Encoding (version 2, "MVV2"): a varint count, then per message LEB128 varints: the UID
 *     minus the previous one (> 0), flags, modseq, size, the internal date minus the previous
 *     one (zigzag), the body key minus the previous one (zigzag; keys ascend with the UIDs of
 *     mail as it arrived), and the keywords: 0 none, 1 the previous message's, 2 + n then n
 *     bytes. ~11 bytes a message: 1.1 MB for 100,000. Version 1 (the same without the body
 *     key) is listed again once, so every cached view has its keys.
 *
 * MEMORY
 *   40 bytes a message per cached view, plus each distinct keyword list once: a 100,000-
 *   message INBOX costs 4 MB while its store is open, 1,000,000 messages 40 MB; at most
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

/* ---- the saved view's encoding (see the file comment) ---- */
static const unsigned char imap_view_magic[4] = {'M', 'V', 'V', '2'};
/* The version before the body keys: not decoded, the mailbox is listed instead. */
static const unsigned char imap_view_magic_v1[4] = {'M', 'V', 'V', '1'};

static unsigned char *imap_view_put(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

/* imap_view_get of a value of more than one byte. */
static int imap_view_get_long(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    uint64_t out = 0;
    for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char b = *(*p)++;
        out |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *v = out;
            return 0;
        }
    }
    return -1;
}

/* 0 and *v set, or -1 (truncated, or more than 64 bits). Inline for the one-byte values that
 * most fields of most messages are (a call per field was a tenth of a decode). */
static inline int imap_view_get(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    if (*p < end && **p < 0x80) {
        *v = *(*p)++;
        return 0;
    }
    return imap_view_get_long(p, end, v);
}

/* The encoding of v's messages, malloc'd, or NULL out of memory. */
static unsigned char *imap_view_encode(const struct imap_view *v, size_t *len)
{
    size_t max = sizeof imap_view_magic + 10;
    for (size_t i = 0; i < v->count; i++) {
        max += 6 * 10 + 1 + strlen(imap_view_msg(v, i)->keywords);
    }
    unsigned char *out = malloc(max), *p = out;
    if (out == NULL) {
        return NULL;
    }
    memcpy(p, imap_view_magic, sizeof imap_view_magic);
    p = imap_view_put(p + sizeof imap_view_magic, v->count);
    uint32_t uid = 0, key = 0;
    int64_t date = 0;
    const char *kw = "";
    for (size_t i = 0; i < v->count; i++) {
        const struct imap_msg *m = imap_view_msg(v, i);
        p = imap_view_put(p, m->uid - uid);
        p = imap_view_put(p, m->flags);
        p = imap_view_put(p, m->modseq);
        p = imap_view_put(p, m->size);
        uint64_t d = (uint64_t)m->internal_date - (uint64_t)date; /* two's complement delta */
        p = imap_view_put(p, (d << 1) ^ (uint64_t) - (int64_t)(d >> 63));
        d = (uint64_t)m->body_key - (uint64_t)key;
        p = imap_view_put(p, (d << 1) ^ (uint64_t) - (int64_t)(d >> 63));
        if (m->keywords[0] == '\0') {
            *p++ = 0;
        } else if (m->keywords == kw || strcmp(m->keywords, kw) == 0) {
            *p++ = 1;
        } else {
            size_t n = strlen(m->keywords);
            p = imap_view_put(p, 2 + (uint64_t)n);
            memcpy(p, m->keywords, n);
            p += n;
        }
        uid = m->uid;
        date = m->internal_date;
        key = m->body_key;
        kw = m->keywords;
    }
    *len = (size_t)(p - out);
    return out;
}

/* A saved view decoded as its bytes come (mv_mailbox_view_read, a piece at a time): the
 * whole view in one buffer was ~10 MB of fresh pages at 1,000,000 messages, ~21 ms of a cold
 * SELECT on this VM, where the decode itself is not much more. The bytes not decoded yet
 * wait in pending: the tail of a piece that ends inside a message, then the next piece. */
struct imap_view_decoder {
    struct imap_view *v;
    size_t len;  /* the view's bytes in all */
    size_t fed;  /* of those, given so far */
    int started; /* the magic and the count are read */
    uint64_t count;
    uint64_t uid, date, key;
    const char *kw; /* the previous message's keywords */
    char *text;
    size_t text_cap;
    unsigned char *pending;
    size_t pending_len, pending_cap;
    /* Decoded into a batch appended at once (imap_view_append_many): appending one by one
     * looked the chunk up per message. */
    struct imap_msg batch[256];
    size_t batched;
};

/* The most bytes a message takes before its keyword text: seven values of up to 10 bytes. */
#define IMAP_VIEW_MSG_FIXED_MAX 70

/* imap_view_decode_start: not enough bytes yet (no MV_* code, all of which are <= 0). */
#define IMAP_VIEW_MORE 1

/* Reads the magic and the count from *p; MV_OK, IMAP_VIEW_MORE, or MV_ENOTFOUND for a view
 * of version 1, MV_ECORRUPT, MV_ENOMEM. */
static int imap_view_decode_start(struct imap_view_decoder *d,
                                  const unsigned char **p,
                                  const unsigned char *end,
                                  int final)
{
    if (!final && (size_t)(end - *p) < sizeof imap_view_magic + 10) {
        return IMAP_VIEW_MORE;
    }
    if ((size_t)(end - *p) >= sizeof imap_view_magic_v1 &&
        memcmp(*p, imap_view_magic_v1, sizeof imap_view_magic_v1) == 0) {
        return MV_ENOTFOUND;
    }
    const unsigned char *start = *p;
    if ((size_t)(end - *p) < sizeof imap_view_magic ||
        memcmp(*p, imap_view_magic, sizeof imap_view_magic) != 0 ||
        (*p += sizeof imap_view_magic, imap_view_get(p, end, &d->count)) != 0 ||
        d->count > (d->len - (size_t)(*p - start)) / 7) { /* each message takes >= 7 bytes */
        return MV_ECORRUPT;
    }
    d->started = 1;
    return imap_view_reserve(d->v, (size_t)d->count);
}

/* Decodes the messages whole in [*p, end) (all of them if final), moving *p past them. */
static int imap_view_decode_messages(struct imap_view_decoder *d,
                                     const unsigned char **p,
                                     const unsigned char *end,
                                     int final)
{
    struct imap_view *v = d->v;
    while (v->count + d->batched < d->count) {
        if (!final && (size_t)(end - *p) < IMAP_VIEW_MSG_FIXED_MAX) {
            return MV_OK; /* the rest of this message comes with the next piece */
        }
        const unsigned char *at = *p;
        uint64_t du, flags, modseq, size, dd, dk, tag;
        uint64_t key = d->key;
        if (imap_view_get(p, end, &du) != 0 || du == 0 || d->uid + du > UINT32_MAX ||
            imap_view_get(p, end, &flags) != 0 || flags > 0xff ||
            imap_view_get(p, end, &modseq) != 0 || modseq > INT64_MAX ||
            imap_view_get(p, end, &size) != 0 || size > UINT32_MAX ||
            imap_view_get(p, end, &dd) != 0 || imap_view_get(p, end, &dk) != 0 ||
            (key += (dk >> 1) ^ (uint64_t) - (int64_t)(dk & 1)) > UINT32_MAX ||
            imap_view_get(p, end, &tag) != 0 || (tag == 1 && d->kw[0] == '\0')) {
            return MV_ECORRUPT;
        }
        if (tag >= 2 && tag - 2 > (uint64_t)(end - *p)) {
            if (final) {
                return MV_ECORRUPT;
            }
            *p = at; /* its keyword text runs on into the next piece */
            return MV_OK;
        }
        const char *m_kw = imap_kw_new(NULL, NULL); /* the shared "" (never freed) */
        if (tag == 1) {
            m_kw = imap_kw_ref(d->kw);
        } else if (tag >= 2) {
            size_t n = (size_t)(tag - 2);
            if (n + 1 > d->text_cap) {
                char *grown = realloc(d->text, n + 1);
                if (grown == NULL) {
                    return MV_ENOMEM;
                }
                d->text = grown;
                d->text_cap = n + 1;
            }
            memcpy(d->text, *p, n);
            d->text[n] = '\0';
            *p += n;
            if (memchr(d->text, '\0', n) != NULL || n == 0) {
                return MV_ECORRUPT;
            }
            if ((m_kw = imap_kw_new(d->text, NULL)) == NULL) {
                return MV_ENOMEM;
            }
            /* the view's keyword set as it is decoded: a list only starts here (tag 1 is
             * the previous one, tag 0 none), and a walk over the messages afterwards read
             * every message again (40 MB at 1,000,000) */
            if (imap_view_keywords_add(v, m_kw) < 0) {
                imap_kw_unref(m_kw);
                return MV_ENOMEM;
            }
        }
        d->uid += du;
        if (v->seen_below == 0 && (flags & MV_FLAG_SEEN) == 0) {
            v->seen_below = (uint32_t)d->uid; /* the first unseen: see imap_view_decode_feed */
        }
        d->date += (dd >> 1) ^ (uint64_t) - (int64_t)(dd & 1);
        d->key = key;
        d->batch[d->batched++] = (struct imap_msg){.uid = (uint32_t)d->uid,
                                                   .flags = (unsigned)flags,
                                                   .modseq = modseq,
                                                   .size = (uint32_t)size,
                                                   .body_key = (uint32_t)key,
                                                   .internal_date = (int64_t)d->date,
                                                   .keywords = m_kw};
        d->kw = m_kw;
        if (d->batched == sizeof d->batch / sizeof d->batch[0]) {
            imap_view_append_many(v, d->batch, d->batched); /* reserved at the start */
            d->batched = 0;
        }
    }
    return MV_OK;
}

/* Decodes the next n bytes of the view into d->v's messages and keyword set. MV_OK, MV_ENOMEM,
 * MV_ENOTFOUND for a view of version 1, or MV_ECORRUPT for bytes that are not a view; after
 * an error d is done with (imap_view_decode_end frees what it holds). */
static int imap_view_decode_feed(struct imap_view_decoder *d, const void *bytes, size_t n)
{
    if (n > d->len - d->fed) {
        return MV_ECORRUPT; /* more than the view's length: the reader's mistake */
    }
    d->fed += n;
    int final = d->fed == d->len;
    const unsigned char *p = bytes, *end = p + n;
    if (d->pending_len > 0) { /* the tail of the last piece goes first */
        if (d->pending_len + n > d->pending_cap) {
            size_t cap = d->pending_len + n;
            unsigned char *grown = realloc(d->pending, cap);
            if (grown == NULL) {
                return MV_ENOMEM;
            }
            d->pending = grown;
            d->pending_cap = cap;
        }
        memcpy(d->pending + d->pending_len, bytes, n);
        d->pending_len += n;
        p = d->pending;
        end = p + d->pending_len;
    }
    int rc = d->started ? MV_OK : imap_view_decode_start(d, &p, end, final);
    if (rc == MV_OK) {
        rc = imap_view_decode_messages(d, &p, end, final);
    } else if (rc == IMAP_VIEW_MORE) {
        rc = MV_OK;
    }
    if (rc == MV_OK && final) {
        imap_view_append_many(d->v, d->batch, d->batched);
        d->batched = 0;
        if (p != end || d->v->count != d->count) {
            rc = MV_ECORRUPT; /* bytes after the last message */
        }
        /* Where the first unseen is, found by the decode (0 until then: none yet), so the
         * first SELECT does not walk the view for it: in a mailbox read all but its newest
         * mail that walk read every message, 40 MB at 1,000,000. */
        if (d->v->seen_below == 0) {
            d->v->seen_below = UINT32_MAX; /* every message is \Seen */
        }
        return rc;
    }
    if (rc != MV_OK) {
        return rc;
    }
    size_t left = (size_t)(end - p); /* what the next piece completes */
    if (left > d->pending_cap) {
        unsigned char *grown = realloc(d->pending, left);
        if (grown == NULL) {
            return MV_ENOMEM;
        }
        d->pending = grown;
        d->pending_cap = left;
    }
    memmove(d->pending, p, left);
    d->pending_len = left;
    return MV_OK;
}

/* Frees what d holds; with rc not MV_OK, also d->v's messages (taken keyword references of
 * the batch not yet appended included). */
static void imap_view_decode_end(struct imap_view_decoder *d, int rc)
{
    if (rc != MV_OK) {
        while (d->batched > 0) { /* their keyword references were taken */
            imap_kw_unref(d->batch[--d->batched].keywords);
        }
        imap_view_free(d->v);
    }
    free(d->text);
    free(d->pending);
}

int imap_view_decode_pieces(const void *data, size_t len, size_t piece, struct imap_view *v)
{
    struct imap_view_decoder d;
    memset(&d, 0, sizeof d);
    d.v = v;
    d.kw = "";
    d.len = len;
    int rc = MV_OK;
    for (size_t at = 0; rc == MV_OK && at < len; at += piece) {
        rc = imap_view_decode_feed(&d, (const unsigned char *)data + at,
                                   len - at < piece ? len - at : piece);
    }
    imap_view_decode_end(&d, rc);
    return rc;
}

/* How imap_view_cache_load reads a saved view: the decoder, what the view must be to be
 * used, and the first error of the decoding (the read then stops with it). */
struct imap_view_reading {
    struct imap_view_decoder dec;
    const struct mv_mailbox_info *info;
    uint32_t uidvalidity;
    uint64_t modseq;
    size_t len;
    int rc;
};

static int imap_view_cache_piece(void *arg, const void *bytes, size_t n)
{
    struct imap_view_reading *r = arg;
    if (r->dec.fed == 0) { /* the first piece: the tags are read already */
        if (r->uidvalidity != r->info->uidvalidity || r->modseq > r->info->highestmodseq) {
            return r->rc = MV_ENOTFOUND; /* made again since, or from a store that went back */
        }
        r->dec.len = r->len;
    }
    r->rc = imap_view_decode_feed(&r->dec, bytes, n);
    return r->rc;
}

/* Fills c (empty) from the store's saved view of mailbox, if there is one for the mailbox
 * as info describes it, with its keyword set; MV_OK, or MV_ENOTFOUND (none usable: list
 * instead) or MV_ENOMEM. */
static int imap_view_cache_load(mv_store *store,
                                const char *mailbox,
                                const struct mv_mailbox_info *info,
                                struct imap_view *c)
{
    struct imap_view_reading r;
    memset(&r, 0, sizeof r);
    r.dec.v = c;
    r.dec.kw = "";
    r.info = info;
    int rc = mv_mailbox_view_read(store, mailbox, &r.uidvalidity, &r.modseq, &r.len,
                                  imap_view_cache_piece, &r);
    if (r.rc != MV_OK) {
        rc = r.rc; /* the decoding's */
        if (rc == MV_ENOTFOUND && r.dec.fed > 0) {
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
    imap_view_decode_end(&r.dec, rc);
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
        if (rc == MV_OK && imap_view_keywords_add(c, f->keywords) < 0) {
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
            const char *keywords = m->keywords;
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
    const char *last = NULL;
    for (size_t i = 0; i < c->count; i++) {
        const char *kw = imap_view_msg(c, i)->keywords;
        if (kw != last) {
            last = kw;
            if (imap_view_keywords_add(c, kw) < 0) {
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
        *rc = imap_view_cache_load(store, mailbox, &info, c); /* with its keyword set */
        if (*rc == MV_OK) {
            cache->saved[slot] = c->highestmodseq;
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
    unsigned char *data = imap_view_encode(c, &len);
    rc = data != NULL
             ? mv_mailbox_view_save(store, c->mailbox, c->uidvalidity, c->highestmodseq, data, len)
             : MV_ENOMEM;
    free(data);
    if (rc == MV_OK) {
        cache->saved[slot] = c->highestmodseq;
    }
    log_msg(LOG_LEVEL_INFO, "view cache: %s saved (%zu messages, %zu bytes) in %lld ms: %s",
            c->mailbox, c->count, len, (long long)(imap_view_now_ms() - start_ms),
            rc == MV_OK ? "ok" : mv_store_errmsg(store));
}

void imap_view_cache_save(struct imap_view_cache *cache, mv_store *store)
{
    for (int i = 0; cache != NULL && store != NULL && i < IMAP_VIEW_CACHE_MAILBOXES; i++) {
        if (cache->views[i].mailbox != NULL) {
            imap_view_cache_save_one(cache, store, i);
        }
    }
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
