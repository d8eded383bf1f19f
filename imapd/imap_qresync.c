/*
 * imap_qresync.c -- QRESYNC (RFC 7162 section 3.2): the VANISHED (EARLIER) responses of
 * SELECT/EXAMINE ... (QRESYNC (...)) and UID FETCH ... (CHANGEDSINCE m VANISHED), read from
 * the store's change log (mv_message_expunged_since), and the parsing of the QRESYNC
 * select parameter. The VANISHED that replaces EXPUNGE once QRESYNC is enabled is written
 * by the view's sync (imap_view.c).
 *
 * IMPLEMENTATION NOTES
 *   - The change log keeps every expunge, so the optional sequence-match data of the
 *     QRESYNC parameter (a hint for servers that forget expunges) is parsed and ignored:
 *     the answer is exact without it.
 */
#include "buf.h"
#include "imap_session.h"
#include "mailvault.h"

#include <stdlib.h>
#include <string.h>

void imap_uid_set_out(struct buf *out, const uint32_t *uids, size_t count)
{
    for (size_t i = 0; i < count;) {
        uint32_t first = uids[i], last = first;
        size_t k = i + 1;
        while (k < count && uids[k] == last + 1) {
            last = uids[k++];
        }
        if (first == last) {
            buf_printf(out, "%s%u", i == 0 ? "" : ",", first);
        } else {
            buf_printf(out, "%s%u:%u", i == 0 ? "" : ",", first, last);
        }
        i = k;
    }
}

int imap_qresync_vanished(struct imap_session *s,
                          struct buf *out,
                          uint64_t since,
                          const struct imap_seqset *known)
{
    uint32_t *uids = NULL;
    size_t count = 0, kept = 0;
    int rc = mv_message_expunged_since(imap_db(s), s->view.mailbox, since, &uids, &count);
    if (rc != MV_OK) {
        return rc;
    }
    for (size_t i = 0; i < count; i++) {
        if (known == NULL || imap_seqset_contains(known, uids[i], UINT32_MAX)) {
            uids[kept++] = uids[i];
        }
    }
    if (kept > 0) {
        buf_str(out, "* VANISHED (EARLIER) ");
        imap_uid_set_out(out, uids, kept);
        buf_str(out, "\r\n");
    }
    mv_free(uids);
    return MV_OK;
}

int imap_qresync_param(const struct imap_command *cmd,
                       const struct imap_node *list,
                       struct imap_qresync *q)
{
    /* (QRESYNC (uidvalidity modseq [known-uids [(seq-set uid-set)]])) */
    memset(q, 0, sizeof *q);
    const struct imap_node *name =
        list != NULL && list->type == IMAP_NODE_LIST ? imap_node(cmd, list->child) : NULL;
    const struct imap_node *args = name != NULL ? imap_node(cmd, name->next) : NULL;
    if (!imap_atom_is(name, "QRESYNC") || args == NULL || args->type != IMAP_NODE_LIST ||
        args->next != IMAP_NODE_NONE) {
        return -1;
    }
    const struct imap_node *validity = imap_node(cmd, args->child);
    const struct imap_node *modseq = validity != NULL ? imap_node(cmd, validity->next) : NULL;
    const struct imap_node *known = modseq != NULL ? imap_node(cmd, modseq->next) : NULL;
    const struct imap_node *match = known != NULL ? imap_node(cmd, known->next) : NULL;
    uint64_t n = 0;
    if (validity == NULL || imap_number(validity, UINT32_MAX, &n) != 0 || n == 0) {
        return -1;
    }
    q->uidvalidity = (uint32_t)n;
    if (modseq == NULL || imap_number(modseq, INT64_MAX, &q->modseq) != 0 || q->modseq == 0) {
        return -1;
    }
    if (known != NULL) {
        if (known->type != IMAP_NODE_ATOM ||
            imap_parse_seqset(known->data, known->len, &q->known) != 0) {
            return -1;
        }
        q->has_known = 1;
    }
    if (match != NULL) {
        const struct imap_node *seqs =
            match->type == IMAP_NODE_LIST ? imap_node(cmd, match->child) : NULL;
        const struct imap_node *uids = seqs != NULL ? imap_node(cmd, seqs->next) : NULL;
        if (uids == NULL || seqs->type != IMAP_NODE_ATOM || uids->type != IMAP_NODE_ATOM ||
            uids->next != IMAP_NODE_NONE || match->next != IMAP_NODE_NONE) {
            imap_seqset_free(&q->known);
            q->has_known = 0;
            return -1;
        }
    }
    return 0;
}

void imap_qresync_free(struct imap_qresync **q)
{
    if (*q != NULL) {
        imap_seqset_free(&(*q)->known); /* all zero when there was none */
        free(*q);
        *q = NULL;
    }
}

int imap_qresync_select(struct imap_session *s, struct buf *out, const struct imap_qresync *q)
{
    struct imap_view *v = &s->view;
    if (q->uidvalidity != v->uidvalidity) {
        return MV_OK; /* the client's cache is void: a full resync, nothing to add */
    }
    const struct imap_seqset *known = q->has_known ? &q->known : NULL;
    int rc = imap_qresync_vanished(s, out, q->modseq, known);
    for (size_t i = 0; rc == MV_OK && i < v->count; i++) {
        const struct imap_msg *m = imap_view_msg(v, i);
        if (m->modseq > q->modseq &&
            (known == NULL || imap_seqset_contains(known, m->uid, UINT32_MAX))) {
            imap_fetch_flags_line(out, v, i, 1);
        }
    }
    return rc;
}
