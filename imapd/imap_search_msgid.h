/*
 * imap_search_msgid.h -- SEARCH HEADER Message-ID from the open store's copy of one
 * mailbox's Message-ID fields, shared by the user's sessions (imap_search_msgid.c).
 *
 * USAGE (a session's job)
 *   if (imap_msgids_field(name)) ...        a HEADER key the copy answers
 *   rc = imap_msgids_for(s, &ids);          MV_OK: ids covers s->view, the store's
 *                                           msgid_lock held; MV_EUNSUPPORTED: not kept (read
 *                                           the headers); else the store's error
 *   imap_msgids_next(ids, &cursor, uid, &fields, &len)   the message's fields, as its header
 *                                           has them: 0; 1: not kept (read its header);
 *                                           -1: not in the store
 *   imap_msgids_done(s);                    after MV_OK: the lock let go
 *   imap_msgids_save(os->msgids, store)     when the store closes (worker.c): the copy kept
 *                                           in the store (a mailbox memo), under the lock
 *   imap_msgids_free(&os->msgids)           then, under the lock
 */
#ifndef MV_IMAPD_IMAP_SEARCH_MSGID_H
#define MV_IMAPD_IMAP_SEARCH_MSGID_H

#include <stddef.h>
#include <stdint.h>

#include "mailvault.h"

struct imap_session;
struct imap_msgids;

/* The field the copy keeps. */
#define IMAP_MSGIDS_FIELD "Message-ID"
/* A store keeps the fields of one mailbox of at most this many messages, all stores of the
 * process together at most IMAP_MSGIDS_BUDGET bytes (8 bytes a message and the fields);
 * past either, HEADER Message-ID reads every header, as other HEADER keys do. A message's
 * fields longer than IMAP_MSGIDS_ENTRY_MAX bytes are not kept: its header is read each time. */
#define IMAP_MSGIDS_MAX       262144
#define IMAP_MSGIDS_BUDGET    (64u << 20)
#define IMAP_MSGIDS_ENTRY_MAX 1024u
/* As the sent days' (imap_search_sent.h): a close saves the copy when it has at least this
 * many messages read from the store since it was saved; a saved copy with more than a
 * quarter and this many messages beyond the view is read afresh. */
#define IMAP_MSGID_MEMO_SAVE_NEW 256u
#define IMAP_MSGID_MEMO_SLACK    1024u

/* Where a pass over the view is in the copy (imap_msgids_next); zero it to start. */
struct imap_msgids_cursor {
    size_t at;  /* entry */
    size_t off; /* its first byte */
};

/* Whether a HEADER key of field name is answered from the copy. */
int imap_msgids_field(const char *name);
/* The Message-ID fields of every message of s's view in s's open store (made, or brought up
 * to date: read again for another mailbox or UIDVALIDITY, else only the UIDs above those it
 * has). MV_OK with *out and the store's msgid_lock held (imap_msgids_done), MV_EUNSUPPORTED
 * (no open store, more than IMAP_MSGIDS_MAX messages, over the budget), or the store's error
 * (nothing held). */
int imap_msgids_for(struct imap_session *s, const struct imap_msgids **out);
void imap_msgids_done(struct imap_session *s);
/* Message uid's Message-ID fields, each whole as its header has it, one after another
 * (imap_fields_matcher_pick; *len 0: none): 0 with *fields (the copy's, valid while the
 * lock is held) and *len; 1 when they are not kept (longer than IMAP_MSGIDS_ENTRY_MAX:
 * read the message's header); -1 when the message is not in the copy (expunged from the
 * store, or its header damaged: a pass over the headers passes it over too). *cursor moves
 * past the UIDs below uid: asked in ascending UID order (a view's), one pass over both. */
int imap_msgids_next(const struct imap_msgids *ids,
                     struct imap_msgids_cursor *cursor,
                     uint32_t uid,
                     const char **fields,
                     size_t *len);
/* Keeps ids in its store (a mailbox memo, imap_msgid_memo.h) if it read enough since it was
 * saved; a failure is logged, nothing else. ids may be NULL. */
void imap_msgids_save(struct imap_msgids *ids, mv_store *store);
void imap_msgids_free(struct imap_msgids **ids);

#endif
