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
 *   through the keys were a third of it. Entries added since make the ranks again at the
 *   next SORT that asks.
 *
 * KEPT
 *   One mailbox a store (the last sorted), every message up to last_uid in UID order, for
 *   each criterion asked for so far: a SORT that asks for one more reads the mailbox's
 *   fields again for all of them. Expunged messages stay in the copy (never asked for
 *   again) until it holds a quarter more than the mailbox, then it is read afresh.
 *
 * LIMITS
 *   IMAP_SORT_KEPT_MAX messages a mailbox, sort_keys_kib for the process (mailvaultd.conf; a
 *   copy that would pass it is dropped, and not made again for the same mailbox and
 *   criteria: those SORTs make their keys alone), a key IMAP_SORT_KEPT_KEY_MAX bytes. Not
 *   saved when the store closes: the first SORT after an open reads the fields. A SORT
 *   holds the copy (sort_lock) while it reads it and copies its ranks out, not while it
 *   sorts.
 */
#include "imap_sort_kept.h"
#include "config.h"
#include "imap_session.h"
#include "worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The bytes every store's copy holds (the config's sort_keys_kib). */
static _Atomic size_t imap_sort_kept_bytes;

struct imap_sort_kept_keys {
    uint32_t *at;   /* per entry, its key's offset in bytes (an arena stays under 4 GiB) */
    uint32_t *rank; /* per entry, 1 + its key's place among the entries' keys (equal keys:
                       the same), 0 for "": NULL until a SORT asks, and again once entries
                       are added */
    char *bytes;
    size_t used, cap;
};

struct imap_sort_kept {
    char *mailbox;
    uint32_t uidvalidity;
    uint32_t last_uid; /* every UID up to it read */
    unsigned kinds;    /* the criteria kept: bit (1u << by) */
    uint32_t *uids;    /* ascending */
    int64_t *sent;     /* with DATE: the Date in UTC, or MV_SENT_NONE */
    size_t count, cap;
    struct imap_sort_kept_keys keys[IMAP_SORT_BY_COUNT]; /* the string criteria in kinds */
    size_t charged;                                      /* of imap_sort_kept_bytes */
    int refused; /* over the budget: no entries, and these kinds are not tried again */
};

/* What the copy's arrays take. */
static size_t imap_sort_kept_size(const struct imap_sort_kept *k)
{
    size_t n = k->cap * (sizeof *k->uids + ((k->kinds >> IMAP_SORT_DATE) & 1u ? 8u : 0u));
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        n += k->keys[by].cap + (k->keys[by].at != NULL ? k->cap * sizeof(uint32_t) : 0) +
             (k->keys[by].rank != NULL ? k->count * sizeof(uint32_t) : 0);
    }
    return n;
}

/* Empties the copy: no entries, nothing charged. */
static void imap_sort_kept_empty(struct imap_sort_kept *k)
{
    atomic_fetch_sub(&imap_sort_kept_bytes, k->charged);
    k->charged = 0;
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        if (k->keys[by].bytes != NULL) {
            explicit_bzero(k->keys[by].bytes, k->keys[by].used); /* subjects and addresses */
        }
        free(k->keys[by].bytes);
        free(k->keys[by].at);
        free(k->keys[by].rank);
        k->keys[by] = (struct imap_sort_kept_keys){0};
    }
    free(k->uids);
    free(k->sent);
    k->uids = NULL;
    k->sent = NULL;
    k->count = k->cap = 0;
    k->last_uid = 0;
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
static int imap_sort_kept_grow(struct imap_sort_kept *k)
{
    if (k->count < k->cap) {
        return MV_OK;
    }
    size_t cap = k->cap > 0 ? k->cap * 2 : 1024;
    uint32_t *uids = realloc(k->uids, cap * sizeof *uids);
    if (uids == NULL) {
        return MV_ENOMEM;
    }
    k->uids = uids;
    if ((k->kinds >> IMAP_SORT_DATE) & 1u) {
        int64_t *sent = realloc(k->sent, cap * sizeof *sent);
        if (sent == NULL) {
            return MV_ENOMEM;
        }
        k->sent = sent;
    }
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        if (((k->kinds >> by) & 1u) && imap_sort_is_string((enum imap_sort_by)by)) {
            uint32_t *at = realloc(k->keys[by].at, cap * sizeof *at);
            if (at == NULL) {
                return MV_ENOMEM;
            }
            k->keys[by].at = at;
        }
    }
    k->cap = cap;
    return MV_OK;
}

/* mv_message_fields_each's function: a message's entry. */
static int imap_sort_kept_add(void *arg, const struct mv_message_fields *f)
{
    struct imap_sort_kept *k = arg;
    if (imap_sort_kept_grow(k) != MV_OK) {
        return MV_ENOMEM;
    }
    for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
        struct imap_sort_kept_keys *s = &k->keys[by];
        if (!((k->kinds >> by) & 1u) || !imap_sort_is_string((enum imap_sort_by)by)) {
            continue;
        }
        if (s->used > UINT32_MAX - IMAP_SORT_KEPT_KEY_MAX) {
            return MV_EUNSUPPORTED; /* past what an offset holds (and any budget) */
        }
        if (imap_sort_arena_room(&s->bytes, s->used, &s->cap, IMAP_SORT_KEPT_KEY_MAX) != MV_OK) {
            return MV_ENOMEM;
        }
        s->at[k->count] = (uint32_t)s->used;
        s->used +=
            imap_sort_key_of((enum imap_sort_by)by, f, s->bytes + s->used, IMAP_SORT_KEPT_KEY_MAX) +
            1;
    }
    if (k->sent != NULL) {
        k->sent[k->count] = f->sent_utc;
    }
    k->uids[k->count++] = f->uid;
    return 0;
}

/* Charges the copy's growth against the budget: MV_OK, or MV_EUNSUPPORTED (over it). */
static int imap_sort_kept_charge(struct imap_sort_kept *k)
{
    size_t now = imap_sort_kept_size(k);
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

/* A new, empty copy for the view's mailbox and kinds; NULL when out of memory. */
static struct imap_sort_kept *imap_sort_kept_new(const struct imap_view *v, unsigned kinds)
{
    struct imap_sort_kept *k = calloc(1, sizeof *k);
    if (k == NULL || (k->mailbox = strdup(v->mailbox)) == NULL) {
        free(k);
        return NULL;
    }
    k->uidvalidity = v->uidvalidity;
    k->kinds = kinds;
    return k;
}

/* qsort_r's order of entries by one kind's keys (then by entry, for a stable order). */
static int imap_sort_kept_by_key(const void *pa, const void *pb, void *arg)
{
    const struct imap_sort_kept_keys *s = arg;
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    int r = strcmp(s->bytes + s->at[a], s->bytes + s->at[b]);
    return r != 0 ? r : a < b ? -1 : a > b;
}

/* The ranks of string kind by's keys (RANKS): MV_OK, MV_ENOMEM, or MV_EUNSUPPORTED (over the
 * budget). */
static int imap_sort_kept_rank(struct imap_sort_kept *k, int by)
{
    struct imap_sort_kept_keys *s = &k->keys[by];
    if (s->rank != NULL || k->count == 0) {
        return MV_OK;
    }
    uint32_t *order = malloc(k->count * sizeof *order);
    s->rank = malloc(k->count * sizeof *s->rank);
    if (order == NULL || s->rank == NULL) {
        free(order);
        free(s->rank);
        s->rank = NULL;
        return MV_ENOMEM;
    }
    for (size_t e = 0; e < k->count; e++) {
        order[e] = (uint32_t)e;
    }
    qsort_r(order, k->count, sizeof *order, imap_sort_kept_by_key, s);
    uint32_t place = 0;
    for (size_t i = 0; i < k->count; i++) {
        if (i > 0 && strcmp(s->bytes + s->at[order[i]], s->bytes + s->at[order[i - 1]]) != 0) {
            place = (uint32_t)i;
        }
        s->rank[order[i]] = s->bytes[s->at[order[i]]] == '\0' ? 0 : place + 1; /* 0: "" */
    }
    free(order);
    return imap_sort_kept_charge(k);
}

int imap_sort_kept_for(struct imap_session *s, unsigned kinds, const struct imap_sort_kept **out)
{
    const struct imap_view *v = &s->view;
    struct open_store *os = s->store;
    unsigned asked = kinds; /* ranked below: not the other kinds kept */
    *out = NULL;
    if (os == NULL || v->count > IMAP_SORT_KEPT_MAX || g_config.sort_keys_kib == 0) {
        return MV_EUNSUPPORTED;
    }
    pthread_mutex_lock(&os->sort_lock);
    struct imap_sort_kept *k = os->sort_kept;
    if (k != NULL && k->refused && strcmp(k->mailbox, v->mailbox) == 0 &&
        k->uidvalidity == v->uidvalidity && (kinds & ~k->kinds) == 0) {
        pthread_mutex_unlock(&os->sort_lock); /* tried and over the budget: not again */
        return MV_EUNSUPPORTED;
    }
    if (k != NULL &&
        (k->refused || strcmp(k->mailbox, v->mailbox) != 0 || k->uidvalidity != v->uidvalidity ||
         (kinds & ~k->kinds) != 0 || k->count > v->count + v->count / 4 + 1024)) {
        kinds |= strcmp(k->mailbox, v->mailbox) == 0 && k->uidvalidity == v->uidvalidity
                     ? k->kinds
                     : 0u;                   /* the same mailbox: what it kept, and more */
        imap_sort_kept_free(&os->sort_kept); /* one mailbox at a time: the last sorted */
        k = NULL;
    }
    if (k == NULL && (k = os->sort_kept = imap_sort_kept_new(v, kinds)) == NULL) {
        pthread_mutex_unlock(&os->sort_lock);
        return MV_ENOMEM;
    }
    uint32_t last = v->count > 0 ? imap_view_msg(v, v->count - 1)->uid : 0;
    int rc = MV_OK;
    if (last > k->last_uid) {
        rc = mv_message_fields_each(imap_db(s), v->mailbox, k->last_uid + 1, last,
                                    imap_sort_kept_add, k);
        rc = rc == MV_OK ? imap_sort_kept_charge(k) : rc;
        for (int by = 0; by < IMAP_SORT_BY_COUNT; by++) {
            free(k->keys[by].rank); /* new entries: ranked again when asked */
            k->keys[by].rank = NULL;
        }
        if (rc == MV_OK) {
            k->last_uid = last;
        } else if (rc == MV_EUNSUPPORTED) {
            imap_sort_kept_empty(k); /* too much: none kept, nor tried again for these kinds */
            k->refused = 1;
        } else {
            imap_sort_kept_free(&os->sort_kept); /* a failed read: none kept */
        }
    }
    for (int by = 0; rc == MV_OK && by < IMAP_SORT_BY_COUNT; by++) {
        if (((asked >> by) & 1u) && imap_sort_is_string((enum imap_sort_by)by)) {
            rc = imap_sort_kept_rank(k, by);
        }
    }
    if (rc == MV_EUNSUPPORTED) {
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
    while (at < k->count && k->uids[at] < uid) {
        at++;
    }
    *cursor = at;
    return at < k->count && k->uids[at] == uid ? at : SIZE_MAX;
}

uint32_t imap_sort_kept_rank_of(const struct imap_sort_kept *k, enum imap_sort_by by, size_t entry)
{
    return k->keys[by].rank[entry];
}

int64_t imap_sort_kept_sent(const struct imap_sort_kept *k, size_t entry)
{
    return k->sent[entry];
}
