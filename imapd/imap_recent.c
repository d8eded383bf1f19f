/*
 * imap_recent.c -- \Recent (RFC 3501 2.3.2): a message is recent in exactly one session, the
 * first to select its mailbox after it arrived (or the one that has the mailbox selected when
 * it arrives), as Dovecot keeps it per mailbox. The store holds, per mailbox, the first UID no
 * session has claimed yet (mv_mailbox_recent_claim); a claim is one write transaction, so the
 * sessions on every worker thread of this server, and other processes, never share one. The
 * session keeps what it claimed in its view (imap_msg.recent): FETCH FLAGS shows \Recent,
 * SELECT and the sync send "* n RECENT", SEARCH RECENT / NEW / OLD read it.
 *
 * EXAMINE (a read-only view) claims nothing (RFC 3501 6.3.2: it must not take \Recent away
 * from the session that will select the mailbox) but shows the unclaimed messages as recent.
 */
#include "imap_session.h"
#include "mailvault.h"

int imap_view_recent(struct imap_session *s, size_t from)
{
    struct imap_view *v = &s->view;
    if (v->mailbox == NULL || from >= v->count) {
        return MV_OK;
    }
    uint32_t first = 0, unclaimed = 0;
    uint32_t up_to = v->msgs[v->count - 1].uid + 1; /* the end of this view: no more */
    int rc = v->readonly ? mv_mailbox_recent(imap_db(s), v->mailbox, &first, &unclaimed)
                         : mv_mailbox_recent_claim(imap_db(s), v->mailbox, up_to, &first);
    if (rc != MV_OK) {
        return rc; /* none marked: \Recent is advisory, the command goes on */
    }
    for (size_t i = from; i < v->count; i++) {
        if (v->msgs[i].uid >= first && !v->msgs[i].recent) {
            v->msgs[i].recent = 1;
            v->recent_count++;
        }
    }
    return MV_OK;
}
