/*
 * imap_sort_kept.c -- SORT's keys of one mailbox kept by the open store (issue 13).
 *
 * WHY
 *   A webmail sorts the message list at every page and every click on a column: UID SORT
 *   (DATE) or (SUBJECT) over the whole mailbox. Made afresh, a SORT SUBJECT at 100,000
 *   messages reads every message's kept fields (~45% of its time: rows decrypted again as
 *   the page cache turns over, the base subject of each) before sorting them; Dovecot keeps
 *   its sort order in its index and answered in 60-110 ms against our 150. A message's
 *   header never changes and a UID is never reused under one UIDVALIDITY, so a message's
 *   keys never change: the first SORT of a mailbox reads them into the open store's copy,
 *   later ones read only the messages that came since (UIDs above the last known), and a
 *   SORT is then its sort.
 *
 * RANKS
 *   Each string criterion's keys are also ranked once (their places in the keys' order,
 *   equal keys the same place), so a SORT compares numbers: a SORT SUBJECT's strcmp() calls
 *   through the keys were a third of it. Entries added since are ranked among the others at
 *   the next SORT that asks (imap_sort_rank.h), without sorting them all again.
 *
 * KEPT
 *   One mailbox a store (the last sorted), every message up to last_uid in UID order, for
 *   each criterion asked for so far: a SORT that asks for one more reads the mailbox's
 *   fields again and makes that criterion's keys alone. Expunged messages stay in the copy
 *   (never asked for again; a criterion added later gives them empty keys) until it holds a
 *   quarter more than the mailbox, then it is read afresh.
 *
 * SAVED
 *   The store's close saves the copy in the store (a mailbox memo, imap_sort_memo.h) with
 *   its ranks, when it read enough since it was saved (IMAP_SORT_MEMO_SAVE_NEW messages) or
 *   keeps other criteria; the first SORT after an open reads that one row and the messages
 *   that came since, whose ranks are put among the saved ones (imap_sort_rank_more). Dovecot
 *   keeps its sort order in its index likewise.
 *
 * LIMITS
 *   IMAP_SORT_KEPT_MAX messages a mailbox, sort_keys_kib for the process (mailvaultd.conf; a
 *   copy that would pass it is dropped, and not made again for the same mailbox and
 *   criteria: those SORTs make their keys alone), a key IMAP_SORT_KEPT_KEY_MAX bytes. A SORT
 *   holds the copy (sort_lock) while it reads it and copies its ranks out, not while it
 *   sorts.
 */
#include "imap_sort_kept.h"
#include "config.h"
#include "imap_session.h"
#include "imap_sort_rank.h"
#include "log.h"
#include "metrics.h"
#include "worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The bytes every store's copy holds (the config's sort_keys_kib). */
static _Atomic size_t imap_sort_kept_bytes;

struct imap_sort_kept {
    char *mailbox;
    uint32_t uidvalidity;
    struct imap_sort_table t;
    size_t saved_count;    /* entries of the store's saved copy (0: none read or written) */
    unsigned saved_kinds;  /* its criteria */
    unsigned saved_ranked; /* those it has ranks of */
    size_t charged;        /* of imap_sort_kept_bytes */
    int refused;           /* over the budget: no entries, and these kinds are not tried again */
};

static int imap_sort_kept_has(const struct imap_sort_table *t, int by)
{
    return (t->kinds >> by) & 1u;
}

static int imap_sort_kept_keyed(const struct imap_sort_table *t, int by)
{
    return imap_sort_kept_has(t, by) && imap_sort_is_string((enum imap_sort_by)by);
}

/* What the copy's arrays take. */
static size_t imap_sort_kept_size(const struct imap_sort_table *t)
{
    size_t n = t->cap * (sizeof *t->uids + (t->sent != NULL ? sizeof *t->sent : 0u));
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        n += t->keys[by].cap + (t->keys[by].at != NULL ? t->cap * sizeof(uint32_t) : 0) +
             (t->keys[by].rank != NULL ? t->count * sizeof(uint32_t) : 0);
    }
    return n;
}

/* Empties the copy: no entries, nothing charged. */
static void imap_sort_kept_empty(struct imap_sort_kept *k)
{
    atomic_fetch_sub(&imap_sort_kept_bytes, k->charged);
    k->charged = 0;
    unsigned kinds = k->t.kinds;
    imap_sort_table_free(&k->t); /* the keys wiped: subjects and addresses */
    k->t.kinds = kinds;
}

void imap_sort_kept_free(struct imap_sort_kept **kp)
{
    struct imap_sort_kept *k = *kp;
    if (k == NULL) {
        return;
    }
    imap_sort_kept_empty(k);
    free(k->mailbox);
    free(k);
    *kp = NULL;
}

/* Room for one more entry: MV_OK or MV_ENOMEM. */
static int imap_sort_kept_grow(struct imap_sort_table *t)
{
    if (t->count < t->cap) {
        return MV_OK;
    }
    size_t cap = t->cap > 0 ? t->cap * 2 : 1024;
    uint32_t *uids = realloc(t->uids, cap * sizeof *uids);
    if (uids == NULL) {
        return MV_ENOMEM;
    }
    t->uids = uids;
    if (imap_sort_kept_has(t, IMAP_SORT_DATE)) {
        int64_t *sent = realloc(t->sent, cap * sizeof *sent);
        if (sent == NULL) {
            return MV_ENOMEM;
        }
        t->sent = sent;
    }
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        if (imap_sort_kept_keyed(t, by)) {
            uint32_t *at = realloc(t->keys[by].at, cap * sizeof *at);
            if (at == NULL) {
                return MV_ENOMEM;
            }
            t->keys[by].at = at;
        }
    }
    t->cap = cap;
    return MV_OK;
}

/* Entry e's key of string criterion by, from the message's fields (NULL: an empty key). */
static int
imap_sort_kept_key(struct imap_sort_table *t, int by, size_t e, const struct mv_message_fields *f)
{
    struct imap_sort_keys *s = &t->keys[by];
    if (s->used > UINT32_MAX - IMAP_SORT_KEPT_KEY_MAX) {
        return MV_EUNSUPPORTED; /* past what an offset holds (and any budget) */
    }
    if (imap_sort_arena_room(&s->bytes, s->used, &s->cap, IMAP_SORT_KEPT_KEY_MAX) != MV_OK) {
        return MV_ENOMEM;
    }
    s->at[e] = (uint32_t)s->used;
    s->bytes[s->used] = '\0';
    s->used += (f != NULL ? imap_sort_key_of((enum imap_sort_by)by, f, s->bytes + s->used,
                                             IMAP_SORT_KEPT_KEY_MAX)
                          : 0) +
               1;
    return MV_OK;
}

/* Entry e's keys of the criteria in kinds (f NULL: none, a message no longer there). */
static int imap_sort_kept_fill(struct imap_sort_table *t,
                               unsigned kinds,
                               size_t e,
                               const struct mv_message_fields *f)
{
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        if (!((kinds >> by) & 1u)) {
            continue;
        }
        if (by == IMAP_SORT_DATE) {
            t->sent[e] = f != NULL ? f->sent_utc : MV_SENT_NONE;
        } else if (imap_sort_is_string((enum imap_sort_by)by)) {
            int rc = imap_sort_kept_key(t, by, e, f);
            if (rc != MV_OK) {
                return rc;
            }
        }
    }
    return MV_OK;
}

/* mv_message_fields_each's function: a message come since, its entry. */
static int imap_sort_kept_add(void *arg, const struct mv_message_fields *f)
{
    struct imap_sort_table *t = arg;
    int rc = imap_sort_kept_grow(t);
    rc = rc == MV_OK ? imap_sort_kept_fill(t, t->kinds, t->count, f) : rc;
    if (rc == MV_OK) {
        t->uids[t->count++] = f->uid;
    }
    return rc;
}

/* A pass filling criteria added to the copy's entries (imap_sort_kept_widen). */
struct imap_sort_kept_widening {
    struct imap_sort_table *t;
    unsigned kinds;
    size_t next; /* the next entry to fill */
};

/* mv_message_fields_each's function: the added criteria's keys of the message's entry,
 * empty ones for the entries before it that the store no longer has. */
static int imap_sort_kept_widen_one(void *arg, const struct mv_message_fields *f)
{
    struct imap_sort_kept_widening *w = arg;
    struct imap_sort_table *t = w->t;
    int rc = MV_OK;
    for (; rc == MV_OK && w->next < t->count && t->uids[w->next] < f->uid; w->next++) {
        rc = imap_sort_kept_fill(t, w->kinds, w->next, NULL);
    }
    if (rc == MV_OK && w->next < t->count && t->uids[w->next] == f->uid) {
        rc = imap_sort_kept_fill(t, w->kinds, w->next++, f);
    }
    return rc;
}

/* The criteria in more (not kept yet) added to every entry of the copy: one pass over the
 * messages' fields making only their keys. MV_OK; else the copy is to be dropped. */
static int imap_sort_kept_widen(struct imap_session *s, struct imap_sort_table *t, unsigned more)
{
    t->kinds |= more;
    if ((more >> IMAP_SORT_DATE) & 1u) {
        t->sent = malloc((t->cap > 0 ? t->cap : 1) * sizeof *t->sent);
        if (t->sent == NULL) {
            return MV_ENOMEM;
        }
    }
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        if (((more >> by) & 1u) && imap_sort_is_string((enum imap_sort_by)by) &&
            (t->keys[by].at = malloc((t->cap > 0 ? t->cap : 1) * sizeof(uint32_t))) == NULL) {
            return MV_ENOMEM;
        }
    }
    struct imap_sort_kept_widening w = {t, more, 0};
    int rc = t->count == 0 ? MV_OK
                           : mv_message_fields_each(imap_db(s), s->view.mailbox, 1, t->last_uid,
                                                    imap_sort_kept_widen_one, &w);
    for (; rc == MV_OK && w.next < t->count; w.next++) {
        rc = imap_sort_kept_fill(t, more, w.next, NULL); /* expunged at the end */
    }
    return rc;
}

/* Charges the copy's growth against the budget: MV_OK, or MV_EUNSUPPORTED (over it). */
static int imap_sort_kept_charge(struct imap_sort_kept *k)
{
    size_t now = imap_sort_kept_size(&k->t);
    if (now <= k->charged) {
        return MV_OK;
    }
    size_t more = now - k->charged;
    size_t budget = (size_t)g_config.sort_keys_kib * 1024;
    if (atomic_fetch_add(&imap_sort_kept_bytes, more) + more > budget) {
        atomic_fetch_sub(&imap_sort_kept_bytes, more);
        return MV_EUNSUPPORTED;
    }
    k->charged = now;
    return MV_OK;
}

/* The copy filled from its store's saved one, if there is one that decodes and does not
 * hold too many messages no longer in the mailbox (k empty before). */
static void imap_sort_kept_load(mv_store *store, struct imap_sort_kept *k, size_t view_count)
{
    void *data = NULL;
    size_t len = 0;
    int rc = mv_mailbox_memo_get(store, k->uidvalidity, IMAP_SORT_MEMO_SLOT, &data, &len);
    if (rc != MV_OK) {
        if (rc != MV_ENOTFOUND) {
            log_warning("SORT keys of %s: the saved copy is not read: %s: %s", k->mailbox,
                        mv_strerror(rc), mv_store_errmsg(store));
        }
        return;
    }
    struct imap_sort_table t = {0};
    size_t max_count = view_count + view_count / 4 + IMAP_SORT_MEMO_SLACK;
    size_t budget = (size_t)g_config.sort_keys_kib * 1024;
    rc = imap_sort_memo_decode(data, len, max_count, budget, &t);
    mv_free(data);
    if (rc != MV_OK) {
        if (rc == MV_ECORRUPT) {
            log_info("SORT keys of %s: the saved copy does not decode, or holds many expunged "
                     "messages: read again",
                     k->mailbox);
        }
        return;
    }
    unsigned kinds = k->t.kinds;
    k->t = t;
    if (imap_sort_kept_charge(k) != MV_OK) {
        imap_sort_kept_empty(k); /* the saved copy is over this process's budget: not used */
        k->t.kinds = kinds;
        return;
    }
    k->saved_count = t.count;
    k->saved_kinds = t.kinds;
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        k->saved_ranked |= t.keys[by].rank != NULL ? 1u << by : 0u;
    }
    metrics_sort_keys_read(1, t.count);
}

void imap_sort_kept_save(struct imap_sort_kept *k, mv_store *store)
{
    unsigned ranked = 0;
    for (int by = 0; k != NULL && by < IMAP_SORT_BY_COUNT; by++) {
        const struct imap_sort_keys *s = &k->t.keys[by];
        ranked |= s->rank != NULL && s->ranked == k->t.count ? 1u << by : 0u;
    }
    if (k == NULL || k->refused || k->t.count == 0 ||
        (k->saved_count != 0 && k->t.count - k->saved_count < IMAP_SORT_MEMO_SAVE_NEW &&
         (k->t.kinds & ~k->saved_kinds) == 0 && (ranked & ~k->saved_ranked) == 0)) {
        return; /* nothing read since the copy was saved, or too little to write it again */
    }
    unsigned char *data = NULL;
    size_t len = 0;
    int rc = imap_sort_memo_encode(&k->t, &data, &len);
    int encoded = rc == MV_OK;
    if (rc == MV_OK) {
        rc = mv_mailbox_memo_put(store, k->uidvalidity, IMAP_SORT_MEMO_SLOT, data, len);
        explicit_bzero(data, len);
    }
    free(data);
    if (rc == MV_OK) {
        k->saved_count = k->t.count;
        k->saved_kinds = k->t.kinds;
        k->saved_ranked = ranked;
        metrics_sort_keys_saved();
    } else if (rc == MV_ELIMIT) { /* mostly expunged messages, or long keys: read afresh */
        log_info("SORT keys of %s: not saved: %s", k->mailbox, mv_store_errmsg(store));
    } else if (rc != MV_ENOTFOUND) { /* ENOTFOUND: the mailbox is gone, or made again */
        log_warning("SORT keys of %s: not saved: %s: %s", k->mailbox, mv_strerror(rc),
                    !encoded && rc == MV_EINVAL ? "not in UID order (a bug)"
                                                : mv_store_errmsg(store));
    }
}

/* A new, empty copy for the view's mailbox and kinds; NULL when out of memory. */
static struct imap_sort_kept *imap_sort_kept_new(const struct imap_view *v, unsigned kinds)
{
    struct imap_sort_kept *k = calloc(1, sizeof *k);
    if (k == NULL || (k->mailbox = strdup(v->mailbox)) == NULL) {
        free(k);
        return NULL;
    }
    k->uidvalidity = v->uidvalidity;
    k->t.kinds = kinds;
    return k;
}

/* The ranks of string kind by's keys (RANKS), the entries added since put among the others:
 * MV_OK, MV_ENOMEM, or MV_EUNSUPPORTED (over the budget). */
static int imap_sort_kept_rank(struct imap_sort_kept *k, int by)
{
    struct imap_sort_keys *s = &k->t.keys[by];
    if ((s->rank != NULL && s->ranked == k->t.count) || k->t.count == 0) {
        return MV_OK;
    }
    uint32_t *rank = realloc(s->rank, k->t.count * sizeof *rank);
    if (rank == NULL) {
        return MV_ENOMEM;
    }
    size_t had = s->rank != NULL ? s->ranked : 0;
    s->rank = rank;
    int rc = had > 0 ? imap_sort_rank_more(s, had, k->t.count, rank)
                     : imap_sort_rank_all(s, k->t.count, rank);
    if (rc != MV_OK) {
        return rc; /* out of memory before a rank was written: the old ones stand */
    }
    s->ranked = k->t.count;
    return imap_sort_kept_charge(k);
}

/* The store's copy for the view's mailbox (made, loaded, or the one before if it is the
 * same mailbox's), its entries and criteria as _for needs them; under sort_lock. */
static int imap_sort_kept_ready(struct imap_session *s, unsigned kinds, struct imap_sort_kept **out)
{
    const struct imap_view *v = &s->view;
    struct open_store *os = s->store;
    struct imap_sort_kept *k = os->sort_kept;
    *out = NULL;
    if (k != NULL && k->refused && strcmp(k->mailbox, v->mailbox) == 0 &&
        k->uidvalidity == v->uidvalidity && (kinds & ~k->t.kinds) == 0) {
        return MV_EUNSUPPORTED; /* tried and over the budget: not again */
    }
    if (k != NULL &&
        (k->refused || strcmp(k->mailbox, v->mailbox) != 0 || k->uidvalidity != v->uidvalidity ||
         k->t.count > v->count + v->count / 4 + IMAP_SORT_MEMO_SLACK)) {
        kinds |= strcmp(k->mailbox, v->mailbox) == 0 && k->uidvalidity == v->uidvalidity
                     ? k->t.kinds
                     : 0u;                   /* the same mailbox: what it kept, and more */
        imap_sort_kept_free(&os->sort_kept); /* one mailbox at a time: the last sorted */
        k = NULL;
    }
    if (k == NULL) {
        if ((k = os->sort_kept = imap_sort_kept_new(v, kinds)) == NULL) {
            return MV_ENOMEM;
        }
        imap_sort_kept_load(imap_db(s), k, v->count);
    }
    int rc = MV_OK;
    unsigned more = kinds & ~k->t.kinds;
    if (more != 0) {
        size_t had = k->t.count;
        rc = imap_sort_kept_widen(s, &k->t, more);
        rc = rc == MV_OK ? imap_sort_kept_charge(k) : rc;
        metrics_sort_keys_read(0, rc == MV_OK ? had : 0);
    }
    uint32_t last = v->count > 0 ? imap_view_msg(v, v->count - 1)->uid : 0;
    if (rc == MV_OK && last > k->t.last_uid) {
        size_t had = k->t.count;
        rc = mv_message_fields_each(imap_db(s), v->mailbox, k->t.last_uid + 1, last,
                                    imap_sort_kept_add, &k->t);
        rc = rc == MV_OK ? imap_sort_kept_charge(k) : rc;
        if (rc == MV_OK) {
            k->t.last_uid = last;
            metrics_sort_keys_read(0, k->t.count - had);
        }
    }
    if (rc == MV_EUNSUPPORTED) {
        imap_sort_kept_empty(k); /* too much: none kept, nor tried again for these kinds */
        k->refused = 1;
    } else if (rc != MV_OK) {
        imap_sort_kept_free(&os->sort_kept); /* a failed read: none kept */
    }
    *out = rc == MV_OK ? k : NULL;
    return rc;
}

int imap_sort_kept_for(struct imap_session *s, unsigned kinds, const struct imap_sort_kept **out)
{
    struct open_store *os = s->store;
    *out = NULL;
    if (os == NULL || s->view.count > IMAP_SORT_KEPT_MAX || g_config.sort_keys_kib == 0) {
        return MV_EUNSUPPORTED;
    }
    pthread_mutex_lock(&os->sort_lock);
    struct imap_sort_kept *k = NULL;
    int rc = imap_sort_kept_ready(s, kinds, &k);
    for (int by = 0; rc == MV_OK && by < IMAP_SORT_BY_COUNT; by++) {
        if (((kinds >> by) & 1u) && imap_sort_is_string((enum imap_sort_by)by)) {
            rc = imap_sort_kept_rank(k, by); /* only the criteria asked */
        }
    }
    if (rc == MV_EUNSUPPORTED && k != NULL) {
        imap_sort_kept_empty(k); /* the ranks were too much: none kept, nor tried again */
        k->refused = 1;
    }
    if (rc != MV_OK) {
        pthread_mutex_unlock(&os->sort_lock);
        return rc;
    }
    *out = k;
    return MV_OK;
}

void imap_sort_kept_done(struct imap_session *s)
{
    pthread_mutex_unlock(&s->store->sort_lock);
}

size_t imap_sort_kept_find(const struct imap_sort_kept *k, size_t *cursor, uint32_t uid)
{
    size_t at = *cursor;
    while (at < k->t.count && k->t.uids[at] < uid) {
        at++;
    }
    *cursor = at;
    return at < k->t.count && k->t.uids[at] == uid ? at : SIZE_MAX;
}

uint32_t imap_sort_kept_rank_of(const struct imap_sort_kept *k, enum imap_sort_by by, size_t entry)
{
    return k->t.keys[by].rank[entry];
}

int64_t imap_sort_kept_sent(const struct imap_sort_kept *k, size_t entry)
{
    return k->t.sent[entry];
}
