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
 * SAVED
 *   The copy went with the store's close, and the first SENT* key after each start read the
 *   Date of every message again, from two rows of each spread over the whole file: at 100,000
 *   messages out of the page cache 452 ms against Dovecot's 269 (issue 13). So the worker
 *   saves the copy in the store when it closes it (imap_sent_dates_save: a mailbox memo,
 *   imap_sent_memo.h, ~2 bytes a message), if it read at least IMAP_SENT_MEMO_SAVE_NEW
 *   messages from the store since the copy was saved (or there was none), and a new copy
 *   starts from the saved one, reading from the store only the UIDs above it. A message's
 *   sent day never changes and a UID is never given twice under one UIDVALIDITY, so the
 *   saved days stay true; expunged messages stay in it (never asked about) until it holds a
 *   quarter more than the view, when it is read afresh. A saved copy that does not decode is
 *   ignored (read afresh, saved again).
 *
 * LIMITS
 *   IMAP_SENT_DATES_MAX messages a store (8 bytes each), IMAP_SENT_DATES_BUDGET bytes for the
 *   process; past either the store is asked each time. The copy goes with the store's close,
 *   saved as above.
 */
#include "imap_search_sent.h"
#include "imap_sent_memo.h"
#include "imap_session.h"
#include "log.h"
#include "metrics.h"
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
    uint32_t last_uid;  /* every UID up to it read */
    size_t saved_count; /* entries the store's saved copy has (SAVED) */
    uint32_t *uids;     /* ascending */
    int32_t *days;      /* INT32_MIN: no date */
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

/* Appends (uid, day) to d (INT32_MIN: no date), within IMAP_SENT_DATES_BUDGET. */
static int imap_sent_dates_put(void *arg, uint32_t uid, int32_t day)
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
    d->uids[d->count] = uid;
    d->days[d->count++] = day;
    return MV_OK;
}

/* mv_message_sent_each's function: the message's day as written (the date with its zone). */
static int imap_sent_dates_add(void *arg, uint32_t uid, int64_t sent)
{
    int64_t day = sent / 86400 - (sent % 86400 < 0); /* floor, also before 1970 */
    return imap_sent_dates_put(
        arg, uid,
        sent == MV_SENT_NONE || day <= INT32_MIN || day > INT32_MAX ? INT32_MIN : (int32_t)day);
}

/* SAVED: d (new, empty) filled from its store's saved copy, if there is one that decodes and
 * does not hold many more messages than the view has (expunged since: the copy is then read
 * afresh, and saved again smaller). Anything else leaves d empty and the store is read. */
static void imap_sent_dates_load(mv_store *store, struct imap_sent_dates *d, size_t view_count)
{
    void *data = NULL;
    size_t len = 0;
    int rc = mv_mailbox_memo_get(store, d->uidvalidity, IMAP_SENT_MEMO_SLOT, &data, &len);
    if (rc != MV_OK) {
        if (rc != MV_ENOTFOUND) {
            log_warning("sent days of %s: the saved copy is not read: %s: %s", d->mailbox,
                        mv_strerror(rc), mv_store_errmsg(store));
        }
        return;
    }
    uint32_t last = 0;
    rc = imap_sent_memo_decode(data, len, view_count + view_count / 4 + IMAP_SENT_MEMO_SLACK, &last,
                               imap_sent_dates_put, d);
    mv_free(data);
    if (rc != MV_OK) {
        if (rc == MV_ECORRUPT) {
            log_info("sent days of %s: the saved copy does not decode, or holds many expunged "
                     "messages: read again",
                     d->mailbox);
        }
        d->count = 0;
        return;
    }
    d->last_uid = last;
    d->saved_count = d->count;
    metrics_sent_days_read(1, d->count);
}

void imap_sent_dates_save(struct imap_sent_dates *d, mv_store *store)
{
    if (d == NULL || d->count == 0 ||
        (d->saved_count != 0 && d->count - d->saved_count < IMAP_SENT_MEMO_SAVE_NEW)) {
        return; /* nothing read since the copy was saved, or too little to write it again */
    }
    unsigned char *data = NULL;
    size_t len = 0;
    int rc = imap_sent_memo_encode(d->uids, d->days, d->count, d->last_uid, &data, &len);
    int encoded = rc == MV_OK;
    if (rc == MV_OK) {
        rc = mv_mailbox_memo_put(store, d->uidvalidity, IMAP_SENT_MEMO_SLOT, data, len);
    }
    free(data);
    if (rc == MV_OK) {
        d->saved_count = d->count;
        metrics_sent_days_saved();
    } else if (rc == MV_ELIMIT) { /* mostly expunged messages: read afresh at the next open */
        log_info("sent days of %s: not saved: %s", d->mailbox, mv_store_errmsg(store));
    } else if (rc != MV_ENOTFOUND) { /* ENOTFOUND: the mailbox is gone, or made again */
        log_warning("sent days of %s: not saved: %s: %s", d->mailbox, mv_strerror(rc),
                    !encoded && rc == MV_EINVAL ? "not in UID order (a bug)"
                                                : mv_store_errmsg(store));
    }
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
        imap_sent_dates_load(imap_db(s), d, v->count);
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
        metrics_sent_days_read(0, d->count - had);
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
