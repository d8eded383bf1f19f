/*
 * imap_search_sent.h -- SEARCH SENTSINCE / SENTBEFORE / SENTON from the open store's copy of
 * one mailbox's sent days, shared by the user's sessions (imap_search_sent.c).
 *
 * USAGE (a session's job)
 *   rc = imap_sent_dates_for(s, &dates);    MV_OK: dates covers s->view, the store's
 *                                           sent_lock held; MV_EUNSUPPORTED: not kept (ask
 *                                           the store); else the store's error
 *   imap_sent_dates_next(dates, &at, uid, &day)   the message's sent day: 0, or -1 (none)
 *   imap_sent_dates_done(s);                after MV_OK: the lock let go
 *   imap_sent_dates_save(os->sent_dates, store)   when the store closes (worker.c): the
 *                                           copy kept in the store (SAVED), under the lock
 *   imap_sent_dates_free(&os->sent_dates)   then, under the lock
 */
#ifndef MV_IMAPD_IMAP_SEARCH_SENT_H
#define MV_IMAPD_IMAP_SEARCH_SENT_H

#include <stddef.h>
#include <stdint.h>

#include "mailvault.h"

struct imap_session;
struct imap_sent_dates;

/* A store keeps the sent days of one mailbox of at most this many messages (8 bytes each:
 * 2 MiB), and all stores of the process together at most IMAP_SENT_DATES_BUDGET bytes; past
 * either, SENT* keys ask the store every time. */
#define IMAP_SENT_DATES_MAX    262144
#define IMAP_SENT_DATES_BUDGET (64u << 20)
/* A close saves the copy when it has at least this many messages read from the store since
 * it was saved; a saved copy with more than a quarter and this many messages beyond the view
 * is read afresh (imap_search_sent.c, SAVED). */
#define IMAP_SENT_MEMO_SAVE_NEW 256u
#define IMAP_SENT_MEMO_SLACK    1024u

/* The sent days of every message of s's view in s's open store (made, or brought up to
 * date: read again for another mailbox or UIDVALIDITY, else only the UIDs above those it
 * has). MV_OK with *out and the store's sent_lock held (imap_sent_dates_done), MV_EUNSUPPORTED
 * (no open store, more than IMAP_SENT_DATES_MAX messages, over the budget), or the store's
 * error (nothing held). */
int imap_sent_dates_for(struct imap_session *s, const struct imap_sent_dates **out);
void imap_sent_dates_done(struct imap_session *s);
/* Message uid's sent day (days since the epoch of its Date header's date as written) into
 * *day: 0, or -1 when it has none (no usable Date header, or not known). *cursor (0 at first)
 * moves past the UIDs below uid: asked in ascending UID order (a view's), a pass over the
 * view and the copy together, not a search a message. */
int imap_sent_dates_next(const struct imap_sent_dates *d,
                         size_t *cursor,
                         uint32_t uid,
                         int32_t *day);
/* Keeps d in its store (a mailbox memo) if it read enough since it was saved (SAVED); a
 * failure is logged, nothing else. d may be NULL. */
void imap_sent_dates_save(struct imap_sent_dates *d, mv_store *store);
void imap_sent_dates_free(struct imap_sent_dates **d);

#endif
