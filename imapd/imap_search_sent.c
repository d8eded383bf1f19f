/*
 * imap_search_sent.c -- SEARCH SENTSINCE / SENTBEFORE / SENTON from the open store's copy of
 * one mailbox's sent days, shared by the user's sessions (issue 13).
 *
 * WHY
 *   The Date header's date is in the store (body_headers.sent_date, the zone in bodies), so a
 *   SENT* key was a statement reading both rows of every message: 14-16 ms at 10,000
 *   messages against Dovecot's 4.3-4.6, which answers from its cache file once it has read
 *   the field. A message's bytes never change, so its sent day does not either: they are
 *   read once (mv_message_sent_each, one statement) into the open store's copy, which every
 *   session of the user finds (a webmail opens a session a page), and later keys are a pass
 *   over an array, new messages read as they come (UIDs above the last known), expunged
 *   ones simply no longer asked about. Kept for one mailbox at a time (the last searched).
 *
 * LIMITS
 *   IMAP_SENT_DATES_MAX messages a store (8 bytes each), IMAP_SENT_DATES_BUDGET bytes for the
 *   process; past either the store is asked each time. The copy goes with the store's close.
 */
#include "imap_search_sent.h"
#include "imap_session.h"
#include "worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The bytes every store's copy holds (IMAP_SENT_DATES_BUDGET). */
static _Atomic size_t imap_sent_bytes;

struct imap_sent_dates {
    char *mailbox;
    uint32_t uidvalidity;
    uint32_t last_uid; /* every UID up to it read */
    uint32_t *uids;    /* ascending */
    int32_t *days;     /* INT32_MIN: no date */
    size_t count, cap;
};

void imap_sent_dates_free(struct imap_sent_dates **d)
{
    if (*d != NULL) {
        atomic_fetch_sub(&imap_sent_bytes, (*d)->cap * (sizeof *(*d)->uids + sizeof *(*d)->days));
        free((*d)->mailbox);
        free((*d)->uids);
        free((*d)->days);
        free(*d);
        *d = NULL;
    }
}

static int imap_sent_dates_add(void *arg, uint32_t uid, int64_t sent)
{
    struct imap_sent_dates *d = arg;
    if (d->count == d->cap) {
        size_t cap = d->cap != 0 ? d->cap * 2 : 1024;
        size_t more = (cap - d->cap) * (sizeof *d->uids + sizeof *d->days);
        if (atomic_fetch_add(&imap_sent_bytes, more) + more > IMAP_SENT_DATES_BUDGET) {
            atomic_fetch_sub(&imap_sent_bytes, more);
            return MV_EUNSUPPORTED; /* the process keeps enough already: ask the store */
        }
        uint32_t *uids = realloc(d->uids, cap * sizeof *uids);
        if (uids != NULL) {
            d->uids = uids;
        }
        int32_t *days = uids != NULL ? realloc(d->days, cap * sizeof *days) : NULL;
        if (days == NULL) {
            atomic_fetch_sub(&imap_sent_bytes, more); /* counted by cap, which stays */
            return MV_ENOMEM;
        }
        d->days = days;
        d->cap = cap;
    }
    int64_t day = sent / 86400 - (sent % 86400 < 0); /* floor, also before 1970 */
    d->uids[d->count] = uid;
    d->days[d->count++] =
        sent == MV_SENT_NONE || day <= INT32_MIN || day > INT32_MAX ? INT32_MIN : (int32_t)day;
    return MV_OK;
}

int imap_sent_dates_for(struct imap_session *s, const struct imap_sent_dates **out)
{
    const struct imap_view *v = &s->view;
    struct open_store *os = s->store;
    *out = NULL;
    if (os == NULL || v->count > IMAP_SENT_DATES_MAX) {
        return MV_EUNSUPPORTED;
    }
    pthread_mutex_lock(&os->sent_lock);
    struct imap_sent_dates *d = os->sent_dates;
    if (d != NULL && (strcmp(d->mailbox, v->mailbox) != 0 || d->uidvalidity != v->uidvalidity)) {
        imap_sent_dates_free(&os->sent_dates); /* one mailbox at a time: the last searched */
        d = NULL;
    }
    if (d == NULL) {
        d = calloc(1, sizeof *d);
        if (d == NULL || (d->mailbox = strdup(v->mailbox)) == NULL) {
            free(d);
            pthread_mutex_unlock(&os->sent_lock);
            return MV_ENOMEM;
        }
        d->uidvalidity = v->uidvalidity;
        os->sent_dates = d;
    }
    uint32_t last = v->count > 0 ? imap_view_msg(v, v->count - 1)->uid : 0;
    if (last > d->last_uid) {
        size_t had = d->count;
        if (had == 0) { /* a first read of the whole mailbox: from a cold file, asked at once */
            imap_view_prefetch_headers(imap_db(s), v, MV_PREFETCH_HEADER_COPY | MV_PREFETCH_FIELDS);
        }
        int rc = mv_message_sent_each(imap_db(s), v->mailbox, d->last_uid + 1, last,
                                      imap_sent_dates_add, d);
        if (rc != MV_OK) {
            d->count = had; /* what was read before stays good */
            pthread_mutex_unlock(&os->sent_lock);
            return rc;
        }
        d->last_uid = last;
    }
    *out = d;
    return MV_OK;
}

void imap_sent_dates_done(struct imap_session *s)
{
    pthread_mutex_unlock(&s->store->sent_lock);
}

int imap_sent_dates_next(const struct imap_sent_dates *d,
                         size_t *cursor,
                         uint32_t uid,
                         int32_t *day)
{
    size_t at = *cursor;
    while (at < d->count && d->uids[at] < uid) {
        at++;
    }
    *cursor = at;
    if (at == d->count || d->uids[at] != uid || d->days[at] == INT32_MIN) {
        return -1;
    }
    *day = d->days[at];
    return 0;
}
