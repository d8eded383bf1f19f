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
 *   - A client further behind than one read of the log takes (more than MV_EXPUNGED_MAX,
 *     1,000,000, expunges since its modseq: a long-lived list folder that expires its mail)
 *     is answered from the view instead (imap_qresync_vanished_without_log): every UID it
 *     names (known-uids, the FETCH's set, or all below UIDNEXT) that the mailbox no longer
 *     holds. A QRESYNC client drops the UIDs of a VANISHED (EARLIER) it has and ignores
 *     the others (RFC 7162), so naming some it never had or lost before its modseq keeps
 *     the answer right; the known-uids a client sends exist for servers that cannot say
 *     what went when. Before, SELECT answered NO [LIMIT] after its untagged data, leaving
 *     the session selected.
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

/* A run of UIDs for "* VANISHED (EARLIER) ", joined to the last one when adjacent, so the
 * set is as compact as imap_uid_set_out's. */
struct imap_vanished_out {
    struct buf *out;
    uint32_t first, last;
    int pending; /* first..last not written yet */
    int written; /* the response's head and a run are out */
};

static void imap_vanished_flush(struct imap_vanished_out *w)
{
    if (!w->pending) {
        return;
    }
    buf_str(w->out, w->written ? "," : "* VANISHED (EARLIER) ");
    if (w->first == w->last) {
        buf_printf(w->out, "%u", w->first);
    } else {
        buf_printf(w->out, "%u:%u", w->first, w->last);
    }
    w->pending = 0;
    w->written = 1;
}

static void imap_vanished_run(struct imap_vanished_out *w, uint32_t first, uint32_t last)
{
    if (w->pending && w->last < UINT32_MAX && first <= w->last + 1) {
        w->last = last > w->last ? last : w->last;
        return;
    }
    imap_vanished_flush(w);
    w->first = first;
    w->last = last;
    w->pending = 1;
}

static int imap_range_compare(const void *a, const void *b)
{
    const struct imap_seq_range *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

int imap_qresync_vanished_without_log(struct imap_session *s,
                                      struct buf *out,
                                      const struct imap_seqset *known)
{
    const struct imap_view *v = &s->view;
    uint32_t top = v->uidnext > 0 ? v->uidnext - 1 : 0;
    /* The UIDs asked about, as ranges within 1..top in ascending order. */
    size_t n = known != NULL ? known->count : 0;
    struct imap_seq_range *asked = malloc((n + 1) * sizeof *asked);
    if (asked == NULL) {
        return MV_ENOMEM;
    }
    size_t count = 0;
    if (known == NULL) {
        asked[count++] = (struct imap_seq_range){1, top};
    } else {
        for (size_t i = 0; i < n; i++) {
            asked[count++] = known->ranges[i];
        }
        uint32_t lo, hi;
        if (imap_seqset_star_span(known, top, &lo, &hi)) {
            asked[count++] = (struct imap_seq_range){lo, hi};
        }
        qsort(asked, count, sizeof *asked, imap_range_compare);
        size_t merged = 0; /* the star's span may overlap the ranges: one pass, in order */
        for (size_t i = 0; i < count; i++) {
            if (merged > 0 && asked[merged - 1].last >= asked[i].first) {
                if (asked[i].last > asked[merged - 1].last) {
                    asked[merged - 1].last = asked[i].last;
                }
            } else {
                asked[merged++] = asked[i];
            }
        }
        count = merged;
    }
    struct imap_vanished_out w = {.out = out};
    for (size_t r = 0; r < count; r++) {
        uint64_t from = asked[r].first > 0 ? asked[r].first : 1;
        uint64_t to = asked[r].last < top ? asked[r].last : top;
        /* the gaps between the messages the view still holds (one marked expunged by
         * another session is gone from the store: a gap too) */
        for (size_t i = imap_view_find_uid(v, (uint32_t)(from <= top ? from : top));
             from <= to && i < v->count; i++) {
            uint32_t uid = imap_view_msg(v, i)->uid;
            if (uid > to) {
                break;
            }
            if ((imap_view_marks(v, i) & IMAP_MARK_EXPUNGED) != 0) {
                continue;
            }
            if (uid > from) {
                imap_vanished_run(&w, (uint32_t)from, uid - 1);
            }
            from = (uint64_t)uid + 1;
        }
        if (from <= to) {
            imap_vanished_run(&w, (uint32_t)from, (uint32_t)to);
        }
    }
    imap_vanished_flush(&w);
    if (w.written) {
        buf_str(out, "\r\n");
    }
    free(asked);
    return MV_OK;
}

int imap_qresync_vanished(struct imap_session *s,
                          struct buf *out,
                          uint64_t since,
                          const struct imap_seqset *known)
{
    uint32_t *uids = NULL;
    size_t count = 0, kept = 0;
    int rc = mv_message_expunged_since(imap_db(s), s->view.mailbox, since, &uids, &count);
    if (rc == MV_ELIMIT) { /* further behind than the log is read at once */
        return imap_qresync_vanished_without_log(s, out, known);
    }
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
