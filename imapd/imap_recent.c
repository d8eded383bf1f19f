/*
 * imap_recent.c -- \Recent (RFC 3501 2.3.2): a message is recent in exactly one session, the
 * first to select its mailbox after it arrived (or the one that has the mailbox selected when
 * it arrives), as Dovecot keeps it per mailbox. The store holds, per mailbox, the first UID no
 * session has claimed yet (mv_mailbox_recent_claim); a claim is one write transaction, so the
 * sessions on every worker thread of this server, and other processes, never share one. The
 * session keeps what it claimed in its view's marks (IMAP_MARK_RECENT): FETCH FLAGS shows \Recent,
 * SELECT and the sync send "* n RECENT", SEARCH RECENT / NEW / OLD read it.
 *
 * EXAMINE (a read-only view) claims nothing (RFC 3501 6.3.2: it must not take \Recent away
 * from the session that will select the mailbox) but shows the unclaimed messages as recent.
 *
 * ON THE READER THREAD (worker.c READERS) a claim never waits for the write lock: the reader
 * runs every small read of its worker's users in turn, and SQLite's busy handler would hold
 * it (sleeping 1..100 ms between tries) for as long as the writer's transaction lasts (an
 * APPEND's fsync, an EXPUNGE, a drain step of mail that just came: exactly when the claim
 * is needed), and every read queued behind it with it. So there the claim is tried once
 * without waiting; if the lock is taken, the unclaimed messages are shown as recent without
 * the claim, as RFC 3501 2.3.2 asks when a server cannot tell whether this session is the
 * first to hear of a message ("SHOULD be considered recent"). The claim is owed, not
 * dropped (view.recent_owed): the session makes it at its next sync (any command, an IDLE
 * poll), before its view is replaced, or at its end, whichever first finds the lock free
 * (imap_view_recent_settle); an end on the reader that finds it taken goes on on the writer,
 * which waits for the lock (imap_session.c imap_end_run). Dropping it (as a build before this one
 * did) broke the rule for good: the messages stayed unclaimed, so the next session to SELECT the
 * mailbox, maybe days later, saw them as recent too. Only a session that syncs while the claim is
 * still owed (the writer's transaction and the owing session's next command) can see them as recent
 * as well, which is the case the RFC's SHOULD covers. SELECT runs on the reader thread too
 * (imap_lane.c SELECTS), so its claim follows this rule; the writer thread's commands (STORE,
 * APPEND ...) claim as before.
 */
#include "imap_session.h"
#include "mailvault.h"

#include <sqlite3.h>

/* The claim on the reader thread: tried without waiting for the lock (see above); MV_EBUSY
 * if another connection holds it. */
static int
imap_recent_claim_now(mv_store *store, const char *mailbox, uint32_t up_to, uint32_t *first)
{
    sqlite3 *db = mv_store_db(store);
    int timeout_ms = -1;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA busy_timeout", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        timeout_ms = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    if (timeout_ms < 0) { /* cannot put it back: wait as the writer does */
        return mv_mailbox_recent_claim(store, mailbox, up_to, first);
    }
    sqlite3_busy_timeout(db, 0);
    int rc = mv_mailbox_recent_claim(store, mailbox, up_to, first);
    sqlite3_busy_timeout(db, timeout_ms);
    return rc;
}

int imap_view_recent(struct imap_session *s, size_t from)
{
    struct imap_view *v = &s->view;
    if (v->mailbox == NULL || from >= v->count) {
        return MV_OK;
    }
    uint32_t first = 0, unclaimed = 0;
    uint32_t up_to = imap_view_msg(v, v->count - 1)->uid + 1; /* the end of this view */
    int rc;
    if (v->readonly) {
        rc = mv_mailbox_recent(imap_db(s), v->mailbox, &first, &unclaimed);
    } else if (s->on_reader) {
        rc = imap_recent_claim_now(imap_db(s), v->mailbox, up_to, &first);
        if (rc == MV_EBUSY) { /* the writer holds the lock: recent, claim owed (see above) */
            rc = mv_mailbox_recent(imap_db(s), v->mailbox, &first, &unclaimed);
            v->recent_owed = rc == MV_OK && up_to > v->recent_owed ? up_to : v->recent_owed;
        } else if (rc == MV_OK && up_to >= v->recent_owed) {
            v->recent_owed = 0; /* this claim covers what was owed */
        }
    } else {
        rc = mv_mailbox_recent_claim(imap_db(s), v->mailbox, up_to, &first);
        v->recent_owed = rc == MV_OK && up_to >= v->recent_owed ? 0 : v->recent_owed;
    }
    if (rc != MV_OK) {
        return rc; /* none marked: \Recent is advisory, the command goes on */
    }
    /* UIDs ascend: the recent ones are a tail, found by a binary search (a SELECT of a big
     * mailbox looks at its new messages only). */
    size_t at = imap_view_find_uid(v, first);
    for (size_t i = at > from ? at : from; i < v->count; i++) {
        if ((v->marks[i] & IMAP_MARK_RECENT) == 0) {
            imap_view_mark(v, i, IMAP_MARK_RECENT);
            v->recent_count++;
        }
    }
    return MV_OK;
}

void imap_view_recent_settle(struct imap_session *s)
{
    struct imap_view *v = &s->view;
    if (v->recent_owed == 0 || v->mailbox == NULL || v->readonly) {
        return;
    }
    uint32_t first = 0; /* what it answers was shown already, when the claim was owed */
    int rc = s->on_reader ? imap_recent_claim_now(imap_db(s), v->mailbox, v->recent_owed, &first)
                          : mv_mailbox_recent_claim(imap_db(s), v->mailbox, v->recent_owed, &first);
    if (rc == MV_OK) {
        v->recent_owed = 0;
    } /* else still owed: the next sync tries again (\Recent is advisory) */
}
