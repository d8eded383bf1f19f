/*
 * imap_view.c -- a session's view of its selected mailbox: the messages in UID order (index
 * + 1 is the sequence number) with flags, keywords and modseq, and the sync that brings the
 * view up to date and tells the client what changed.
 *
 * IMPLEMENTATION NOTES
 *   - A sync is cheap when nothing changed: one mv_mailbox_status() and a comparison of the
 *     mailbox's highest modseq with the view's.
 *   - When it moved, the sync is incremental: the messages changed or added since the view's
 *     modseq (mv_message_list_* with changed_since, a range on the modseq index) and the
 *     UIDs expunged since then (mv_message_expunged_since, a range on the change log). So a
 *     sync costs rows in proportion to what changed, not to the mailbox. Every change to a
 *     message row gives it a new modseq and every expunge leaves a change-log row, so the
 *     two answer completely back to where the maintenance pruned the log. The whole mailbox
 *     is listed again only when they cannot: the store's highest modseq went below the
 *     view's (a restored backup), or more than MV_EXPUNGED_MAX expunges since, or a view
 *     older than the log's pruned part (both MV_ELIMIT).
 *   - The reads are separate snapshots, all taken after the status: the view's new modseq is
 *     the status's, and whatever the later reads saw beyond it is seen again by the next
 *     sync, where it compares equal and is not reported twice (a UID already removed, a
 *     flag state already shown).
 *   - Reporting, in this order so every sequence number is right when the client reads it:
 *     the vanished messages first, as "* n EXPUNGE" in ascending order, each with the number
 *     the message has at that moment, or once QRESYNC is enabled as one "* VANISHED uids"
 *     (RFC 7162 3.2.10); then "* n FETCH (UID u FLAGS (...))" for messages whose flags or
 *     modseq moved, numbered after the removals; then "* n EXISTS" and "* n RECENT" for new
 *     ones, which go at the end (the new ones this session claims are its \Recent). When expunges
 * may not be reported (FETCH, STORE, SEARCH: RFC 3501 7.4.1) the message stays in the view marked
 *     expunged and goes at the next sync that may report it.
 */
#include "buf.h"
#include "imap_session.h"
#include "mailvault.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void imap_view_free(struct imap_view *v)
{
    imap_view_msgs_free(v);
    free(v->mailbox);
    imap_view_keywords_free(v);
    memset(v, 0, sizeof *v);
}

int imap_view_list(mv_store *store, const char *mailbox, uint64_t since, struct imap_view *v)
{
    mv_message_iter *it = NULL;
    int rc = mv_message_list_begin(store, mailbox, 0, since, &it);
    struct mv_message_entry e;
    while (rc == MV_OK && (rc = mv_message_list_next(it, &e)) == 1) {
        const struct imap_kw *like = v->count > 0 ? imap_view_msg(v, v->count - 1)->keywords : NULL;
        struct imap_msg m = {.uid = e.uid,
                             .flags = e.flags,
                             .modseq = e.modseq,
                             .size = IMAP_MSG_SIZE(e.size),
                             .body_key = IMAP_MSG_BODY_KEY(e.body_key),
                             .internal_date = e.internal_date,
                             .keywords = imap_kw_new(e.keywords, like)};
        rc = m.keywords != NULL ? imap_view_push(v, &m) : MV_ENOMEM;
        if (rc != MV_OK) {
            imap_kw_unref(m.keywords);
        }
    }
    mv_message_list_end(&it);
    return rc < 0 ? rc : MV_OK;
}

static int imap_view_read(mv_store *store, const char *mailbox, struct imap_view *v)
{
    struct mv_mailbox_info info;
    int rc = mv_mailbox_status(store, mailbox, &info);
    if (rc != MV_OK) {
        return rc;
    }
    v->uidvalidity = info.uidvalidity;
    v->uidnext = info.uidnext;
    v->highestmodseq = info.highestmodseq;
    return imap_view_list(store, mailbox, 0, v);
}

int imap_view_load(struct imap_session *s, const char *mailbox, int readonly)
{
    struct imap_view v;
    memset(&v, 0, sizeof v);
    imap_view_recent_settle(s); /* the old view's owed \Recent claim (imap_recent.c) */
    imap_view_free(&s->view);
    /* The messages are the cached view's, shared (imap_msgs.c); the session adds its marks,
     * a byte per message (calloc: pages the session never marks are never touched). */
    int rc = imap_view_cache_copy(s->store, imap_db(s), mailbox, &v); /* imap_view_cache.c */
    if (rc == MV_OK && (v.mailbox = strdup(mailbox)) == NULL) {
        rc = MV_ENOMEM;
    }
    if (rc == MV_OK && (v.marks = calloc(v.count + 1, 1)) == NULL) {
        rc = MV_ENOMEM;
    }
    v.marks_cap = v.count + 1;
    if (rc != MV_OK) {
        imap_view_free(&v);
        return rc;
    }
    v.readonly = readonly;
    s->view = v;
    return MV_OK;
}

void imap_view_reported_clear(struct imap_view *v)
{
    for (size_t i = 0; v->reported_any && v->marks != NULL && i < v->count; i++) {
        v->marks[i] &= (unsigned char)~(IMAP_MARK_REPORTED | IMAP_MARK_QUIET);
    }
    v->reported_any = 0;
}

void imap_flags_out(struct buf *out, unsigned flags, const struct imap_kw *keywords)
{
    /* Each name with the space before it; the list's first item goes without (printf-free:
     * this runs once per line of a FETCH 1:* FLAGS). */
    static const struct {
        const char *text;
        size_t len;
    } names[] = {
        {" \\Seen", 6}, {" \\Answered", 10}, {" \\Flagged", 9}, {" \\Deleted", 9}, {" \\Draft", 7}};
    int first = (flags & IMAP_FLAG_RECENT) == 0;
    if ((flags & IMAP_FLAG_RECENT) != 0) {
        BUF_LIT(out, "(\\Recent");
    } else {
        BUF_LIT(out, "(");
    }
    for (unsigned i = 0; i < 5; i++) {
        if ((flags & (1u << i)) != 0) {
            buf_add(out, names[i].text + first, names[i].len - (size_t)first);
            first = 0;
        }
    }
    if (imap_kw_count(keywords) > 0) {
        if (!first) {
            BUF_LIT(out, " ");
        }
        imap_kw_out(out, keywords);
    }
    BUF_LIT(out, ")");
}

void imap_fetch_flags_line(struct buf *out, const struct imap_view *v, size_t i, int condstore)
{
    const struct imap_msg *m = imap_view_msg(v, i);
    int recent = (imap_view_marks(v, i) & IMAP_MARK_RECENT) != 0;
    BUF_LIT(out, "* ");
    buf_u64(out, i + 1);
    BUF_LIT(out, " FETCH (UID ");
    buf_u64(out, m->uid);
    BUF_LIT(out, " FLAGS ");
    imap_flags_out(out, m->flags | (recent ? IMAP_FLAG_RECENT : 0), m->keywords);
    if (condstore) {
        BUF_LIT(out, " MODSEQ (");
        buf_u64(out, m->modseq);
        BUF_LIT(out, ")");
    }
    BUF_LIT(out, ")\r\n");
}

int imap_uids_contain(const uint32_t *uids, size_t count, uint32_t uid)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (uids[mid] < uid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < count && uids[lo] == uid;
}

/* What a sync found: the messages changed or added (ascending UID, keywords owned here) and
 * the UIDs no longer in the mailbox (ascending; may hold UIDs the view never had). */
struct imap_view_delta {
    struct imap_view changed; /* also carries the mailbox's uidnext and highestmodseq */
    uint32_t *gone;
    size_t gone_count;
    int gone_from_store; /* gone is the store's (mv_free), else malloc'd here */
};

static void imap_view_delta_free(struct imap_view_delta *d)
{
    imap_view_free(&d->changed);
    if (d->gone_from_store) {
        mv_free(d->gone);
    } else {
        free(d->gone);
    }
    memset(d, 0, sizeof *d);
}

/* Reports the removal of the messages at idx (ascending: the expunged ones this sync may
 * report, see the file comment) and removes them. */
static void imap_view_remove(struct imap_session *s, struct buf *out, const size_t *idx, size_t n)
{
    struct imap_view *v = &s->view;
    if (s->qresync) { /* RFC 7162 3.2.10: one VANISHED for them all */
        buf_str(out, "* VANISHED ");
        for (size_t k = 0; k < n;) {
            uint32_t lo = imap_view_msg(v, idx[k])->uid, hi = lo;
            size_t e = k + 1;
            while (e < n && imap_view_msg(v, idx[e])->uid == hi + 1) {
                hi = imap_view_msg(v, idx[e++])->uid;
            }
            buf_printf(out, lo == hi ? "%s%u" : "%s%u:%u", k == 0 ? "" : ",", lo, hi);
            k = e;
        }
        buf_str(out, "\r\n");
    }
    for (size_t k = 0; k < n; k++) {
        v->recent_count -= (imap_view_marks(v, idx[k]) & IMAP_MARK_RECENT) != 0;
        if (!s->qresync) {
            /* its number at this moment: the k before it are gone already; one line a
             * message, so no vsnprintf (as SEARCH's hits) */
            buf_add(out, "* ", 2);
            buf_u64(out, idx[k] - k + 1);
            buf_str(out, " EXPUNGE\r\n");
        }
    }
    imap_view_drop(v, idx, n);
}

/* Everything imap_view_apply may fail on, done before it changes anything: room for the
 * new messages, the chunks of the updated and removed ones made the view's own, and the
 * list of the removed (*remove, malloc'd, *removed of them). */
static int imap_view_apply_prepare(struct imap_session *s,
                                   struct imap_view_delta *d,
                                   uint32_t last_uid,
                                   size_t added,
                                   int allow_expunge,
                                   size_t **remove,
                                   size_t *removed)
{
    struct imap_view *v = &s->view;
    int rc = imap_view_reserve(v, added);
    for (size_t j = 0; rc == MV_OK && j < d->changed.count; j++) {
        uint32_t uid = imap_view_msg(&d->changed, j)->uid;
        size_t i = imap_view_find_uid(v, uid);
        if (uid <= last_uid && i < v->count && imap_view_msg(v, i)->uid == uid) {
            rc = imap_view_own(v, i);
        }
    }
    if (rc != MV_OK) {
        return rc;
    }
    for (size_t g = 0; g < d->gone_count; g++) { /* a mark only: nothing is reported yet */
        size_t i = imap_view_find_uid(v, d->gone[g]);
        if (i < v->count && imap_view_msg(v, i)->uid == d->gone[g] &&
            (v->marks[i] & IMAP_MARK_EXPUNGED) == 0) {
            imap_view_mark(v, i, IMAP_MARK_EXPUNGED);
            v->expunged_count++;
        }
    }
    if (!allow_expunge || v->expunged_count == 0) {
        return MV_OK;
    }
    *remove = malloc(v->expunged_count * sizeof **remove);
    if (*remove == NULL) {
        return MV_ENOMEM;
    }
    for (size_t i = 0; rc == MV_OK && i < v->count && *removed < v->expunged_count; i++) {
        if ((v->marks[i] & IMAP_MARK_EXPUNGED) != 0) {
            (*remove)[(*removed)++] = i;
            rc = imap_view_own(v, i);
        }
    }
    assert(rc != MV_OK || *removed == v->expunged_count);
    return rc;
}

/* Applies d to the session's view and reports it. Fails (MV_ENOMEM) only before anything
 * is reported or changed but the marks of messages found gone. */
static int imap_view_apply(struct imap_session *s,
                           struct imap_view_delta *d,
                           struct buf *out,
                           int allow_expunge)
{
    struct imap_view *v = &s->view;
    uint32_t last_uid = v->count > 0 ? imap_view_msg(v, v->count - 1)->uid : 0;
    size_t added = 0, removed = 0, *remove = NULL;
    for (size_t j = 0; j < d->changed.count; j++) {
        uint32_t uid = imap_view_msg(&d->changed, j)->uid;
        added += uid > last_uid && !imap_uids_contain(d->gone, d->gone_count, uid);
    }
    int rc = imap_view_apply_prepare(s, d, last_uid, added, allow_expunge, &remove, &removed);
    if (rc != MV_OK) {
        free(remove);
        return rc;
    }
    int new_keyword = 0; /* RFC 3501 7.2.6: FLAGS names a keyword before any FETCH shows it */
    for (size_t j = 0; j < d->changed.count; j++) {
        new_keyword |= imap_view_keywords_add_list(v, imap_view_msg(&d->changed, j)->keywords) > 0;
    }
    if (new_keyword) {
        imap_flags_announce(v, out);
    }
    if (removed > 0) {
        imap_view_remove(s, out, remove, removed);
        v->expunged_count = 0;
    }
    free(remove);
    for (size_t j = 0; j < d->changed.count; j++) {
        struct imap_msg *f = imap_view_msg_mut(&d->changed, j);
        size_t i = imap_view_find_uid(v, f->uid);
        if (f->uid > last_uid || i == v->count || imap_view_msg(v, i)->uid != f->uid ||
            (v->marks[i] & IMAP_MARK_EXPUNGED) != 0) {
            continue; /* new (below), or gone since: nothing to update */
        }
        const struct imap_msg *was = imap_view_msg(v, i);
        if (f->modseq != was->modseq || f->flags != was->flags ||
            !imap_kw_equal(f->keywords, was->keywords)) {
            struct imap_msg *m = imap_view_msg_mut(v, i); /* its own: prepared */
            const struct imap_kw *keywords = m->keywords;
            m->keywords = f->keywords;
            f->keywords = keywords; /* freed with the delta */
            m->flags = f->flags;
            m->modseq = f->modseq;
            if ((v->marks[i] & IMAP_MARK_QUIET) == 0) { /* a STORE .SILENT or FETCH \Seen */
                imap_fetch_flags_line(out, v, i, s->condstore);
            }
            imap_view_unmark(v, i, IMAP_MARK_QUIET);
            imap_view_mark(v, i, IMAP_MARK_REPORTED);
            v->reported_any = 1;
        }
    }
    size_t appended = 0;
    for (size_t j = 0; j < d->changed.count; j++) {
        struct imap_msg *f = imap_view_msg_mut(&d->changed, j);
        if (f->uid > last_uid && !imap_uids_contain(d->gone, d->gone_count, f->uid)) {
            assert(appended < added);
            imap_view_append(v, f); /* reserved: prepared */
            appended++;
            f->keywords = NULL; /* the view owns them now */
        }
    }
    if (removed > 0) {
        imap_view_compact(v); /* chunks left short by the removals (imap_msgs.c) */
    }
    if (added > 0 || removed > 0) {
        buf_printf(out, "* %zu EXISTS\r\n", v->count);
        if (added > 0) { /* the new ones may be this session's \Recent (imap_recent.c) */
            (void)imap_view_recent(s, v->count - added);
            buf_printf(out, "* %zu RECENT\r\n", v->recent_count);
        }
    }
    v->uidnext = d->changed.uidnext;
    v->highestmodseq = d->changed.highestmodseq;
    return MV_OK;
}

/* The full re-list: d gets every message, and the view's UIDs that are missing as gone. */
static int imap_view_delta_full(struct imap_session *s, struct imap_view_delta *d)
{
    struct imap_view *v = &s->view;
    int rc = imap_view_read(imap_db(s), v->mailbox, &d->changed);
    if (rc != MV_OK) {
        return rc;
    }
    if (d->changed.uidvalidity != v->uidvalidity) {
        return MV_ENOTFOUND; /* made again under the same name: the view means nothing */
    }
    d->gone = malloc((v->count + 1) * sizeof *d->gone);
    if (d->gone == NULL) {
        return MV_ENOMEM;
    }
    for (size_t i = 0, j = 0; i < v->count; i++) { /* both ascend by UID: one merge pass */
        uint32_t uid = imap_view_msg(v, i)->uid;
        while (j < d->changed.count && imap_view_msg(&d->changed, j)->uid < uid) {
            j++;
        }
        if (j == d->changed.count || imap_view_msg(&d->changed, j)->uid != uid) {
            d->gone[d->gone_count++] = uid;
        }
    }
    return MV_OK;
}

/* The incremental read (see the file comment); info is the status read just before. */
static int imap_view_delta_since(struct imap_session *s,
                                 const struct mv_mailbox_info *info,
                                 struct imap_view_delta *d)
{
    struct imap_view *v = &s->view;
    d->changed.uidvalidity = info->uidvalidity;
    d->changed.uidnext = info->uidnext;
    d->changed.highestmodseq = info->highestmodseq;
    int rc = imap_view_list(imap_db(s), v->mailbox, v->highestmodseq, &d->changed);
    if (rc == MV_OK) {
        rc = mv_message_expunged_since(imap_db(s), v->mailbox, v->highestmodseq, &d->gone,
                                       &d->gone_count);
        d->gone_from_store = 1;
    }
    return rc;
}

/* The selected mailbox was deleted, renamed, or deleted and made again (a new UIDVALIDITY):
 * its sequence numbers mean nothing any more. RFC 3501 leaves it to the server; this one
 * ends the session (the client reconnects and sees the mailboxes as they are). */
static int imap_view_gone(struct imap_session *s, struct buf *out)
{
    if (!s->gone) {
        buf_str(out, "* BYE the selected mailbox was deleted or renamed\r\n");
        s->gone = 1;
    }
    return MV_ENOTFOUND;
}

/* The change of own (see imap_view_sync_own) applied to the view as the store made it: 1 if
 * done, 0 if the view must read it back instead -- the mailbox's highest modseq is not the
 * view's plus the one the STORE took (another change came between, which the read back must
 * see too), or the view does not count the messages the store says it changed -- or
 * MV_ENOMEM before anything changed but chunks made the view's own. */
static int imap_view_apply_own(struct imap_session *s,
                               const struct mv_mailbox_info *info,
                               const struct imap_own_flags *own,
                               struct buf *out)
{
    struct imap_view *v = &s->view;
    if (own->changed == 0 || info->highestmodseq != v->highestmodseq + 1 ||
        info->uidnext != v->uidnext) {
        return 0;
    }
    size_t changed = 0;
    for (size_t k = 0; k < own->count; k++) {
        unsigned was = imap_view_msg(v, own->idx[k])->flags;
        changed += imap_own_flags_after(own, was) != was;
    }
    if (changed != own->changed) {
        return 0;
    }
    for (size_t k = 0; k < own->count; k++) {
        size_t i = own->idx[k];
        unsigned was = imap_view_msg(v, i)->flags;
        if (imap_own_flags_after(own, was) != was && imap_view_own(v, i) != MV_OK) {
            return MV_ENOMEM; /* chunks copied, nothing else changed */
        }
    }
    for (size_t k = 0; k < own->count; k++) {
        size_t i = own->idx[k];
        unsigned was = imap_view_msg(v, i)->flags, now = imap_own_flags_after(own, was);
        if (now == was) {
            continue; /* the store left its row (and modseq) as it was */
        }
        struct imap_msg *m = imap_view_msg_mut(v, i);
        m->flags = now;
        m->modseq = info->highestmodseq;
        if ((v->marks[i] & IMAP_MARK_QUIET) == 0) { /* as imap_view_apply */
            imap_fetch_flags_line(out, v, i, s->condstore);
        }
        imap_view_unmark(v, i, IMAP_MARK_QUIET);
        imap_view_mark(v, i, IMAP_MARK_REPORTED);
        v->reported_any = 1;
    }
    v->highestmodseq = info->highestmodseq;
    return 1;
}

int imap_view_sync(struct imap_session *s, struct buf *out, int allow_expunge)
{
    return imap_view_sync_own(s, out, allow_expunge, NULL);
}

int imap_view_sync_own(struct imap_session *s,
                       struct buf *out,
                       int allow_expunge,
                       const struct imap_own_flags *own)
{
    struct imap_view *v = &s->view;
    struct mv_mailbox_info info;
    int pending_expunge = allow_expunge && v->expunged_count > 0;
    if (v->mailbox == NULL) {
        return MV_OK;
    }
    imap_view_recent_settle(s); /* a claim a sync on the reader owed (imap_recent.c) */
    /* One read transaction for the status's two statements (the mailbox's id, then its
     * counters) instead of one each: each costs WAL-index file locks, ~9% of the CPU of a
     * FETCH 1:* (UID FLAGS) of 10,000 messages (issue 13). Not when the caller already has
     * a transaction open (begin fails, and the caller's stays as it was). */
    int snapshot = mv_store_read_begin(imap_db(s)) == MV_OK;
    int rc = mv_mailbox_status(imap_db(s), v->mailbox, &info);
    if (snapshot) {
        mv_store_read_end(imap_db(s));
    }
    if (rc == MV_ENOTFOUND || (rc == MV_OK && info.uidvalidity != v->uidvalidity)) {
        return imap_view_gone(s, out);
    }
    if (rc != MV_OK) {
        return rc;
    }
    if (info.highestmodseq == v->highestmodseq && !pending_expunge) {
        return MV_OK;
    }
    if (own != NULL && !pending_expunge && imap_view_apply_own(s, &info, own, out) == 1) {
        return MV_OK; /* else (also out of memory) the read back below */
    }
    struct imap_view_delta d;
    memset(&d, 0, sizeof d);
    if (info.highestmodseq == v->highestmodseq) { /* only the expunges held back before */
        d.changed.uidnext = v->uidnext;
        d.changed.highestmodseq = v->highestmodseq;
    } else if (info.highestmodseq > v->highestmodseq) {
        rc = imap_view_delta_since(s, &info, &d);
        if (rc == MV_ELIMIT) { /* too far behind for one read of the log */
            imap_view_delta_free(&d);
            rc = imap_view_delta_full(s, &d);
        }
    } else { /* the store went back in time (a restore): the log cannot say what changed */
        rc = imap_view_delta_full(s, &d);
    }
    if (rc == MV_OK) {
        rc = imap_view_apply(s, &d, out, allow_expunge);
    }
    imap_view_delta_free(&d);
    return rc == MV_ENOTFOUND ? imap_view_gone(s, out) : rc;
}

/* The set's ranges with its '*' span merged in (star given): ascending, disjoint. *out is
 * malloc'd; its count, or -1 out of memory. */
static long
imap_view_intervals(const struct imap_seqset *set, uint32_t star, struct imap_seq_range **out)
{
    struct imap_seq_range span = {0, 0};
    int has_span = imap_seqset_star_span(set, star, &span.first, &span.last);
    *out = malloc((set->count + 1) * sizeof **out);
    if (*out == NULL) {
        return -1;
    }
    long n = 0;
    for (size_t r = 0; r <= set->count; r++) {
        struct imap_seq_range next;
        if (r < set->count && (!has_span || set->ranges[r].first < span.first)) {
            next = set->ranges[r];
        } else if (has_span) {
            next = span;
            has_span = 0;
            r--; /* the range at r still comes */
        } else {
            break;
        }
        if (n > 0 && next.first <= (*out)[n - 1].last) { /* overlaps the span */
            (*out)[n - 1].last = next.last > (*out)[n - 1].last ? next.last : (*out)[n - 1].last;
        } else {
            (*out)[n++] = next;
        }
    }
    return n;
}

int imap_view_resolve(const struct imap_view *v,
                      const struct imap_seqset *set,
                      int uid,
                      uint32_t **idx,
                      size_t *count)
{
    *idx = NULL;
    *count = 0;
    if (v->count == 0) {
        return uid ? 0 : -1; /* "1:*" on an empty mailbox is an error without UID */
    }
    /* Cost in the set's ranges and the messages named, not the mailbox: each range is a
     * binary search (UIDs) or plain arithmetic (sequence numbers). */
    uint32_t star = uid ? imap_view_msg(v, v->count - 1)->uid : (uint32_t)v->count;
    struct imap_seq_range *iv = NULL;
    long n = imap_view_intervals(set, star, &iv);
    if (n < 0) {
        return -2;
    }
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t k = 0;
        for (long r = 0; r < n; r++) {
            size_t from, to; /* view indexes [from, to) */
            if (uid) {
                from = imap_view_find_uid(v, iv[r].first);
                to = iv[r].last == UINT32_MAX ? v->count : imap_view_find_uid(v, iv[r].last + 1);
            } else if (iv[r].last > v->count) {
                free(iv);
                return -1;
            } else {
                from = iv[r].first - 1;
                to = iv[r].last;
            }
            for (size_t i = from; pass == 1 && i < to; i++) {
                (*idx)[k++] = (uint32_t)i;
            }
            k += pass == 0 && to > from ? to - from : 0;
        }
        if (pass == 0) {
            total = k;
            if (total == 0) {
                break;
            }
            *idx = malloc(total * sizeof **idx);
            if (*idx == NULL) {
                free(iv);
                return -2;
            }
        }
    }
    free(iv);
    *count = total;
    return 0;
}

int imap_view_uid_ranges(const struct imap_view *v,
                         const uint32_t *idx,
                         size_t count,
                         struct mv_uid_range **ranges,
                         size_t *n)
{
    *ranges = NULL;
    *n = 0;
    size_t runs = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t k = 0;
        for (size_t i = 0; i < count;) {
            size_t end = i; /* the run is idx[i..end] */
            while (end + 1 < count) {
                uint32_t j = idx[end] + 1;
                while (j < idx[end + 1] && (imap_view_marks(v, j) & IMAP_MARK_EXPUNGED) != 0) {
                    j++; /* gone from the store: no message there to touch */
                }
                if (j != idx[end + 1]) {
                    break;
                }
                end++;
            }
            if (pass == 1) {
                (*ranges)[k].first = imap_view_msg(v, idx[i])->uid;
                (*ranges)[k].last = imap_view_msg(v, idx[end])->uid;
            }
            k++;
            i = end + 1;
        }
        if (pass == 0) {
            runs = k;
            if (runs == 0) {
                return 0;
            }
            *ranges = malloc(runs * sizeof **ranges);
            if (*ranges == NULL) {
                return -1;
            }
        }
    }
    *n = runs;
    return 0;
}

/* Keys one prefetch call takes (mv_message_prefetch_keyed: only the first 1024 are used). */
#define IMAP_VIEW_PREFETCH_KEYS 1024

void imap_view_prefetch_headers(mv_store *db, const struct imap_view *v, unsigned what)
{
    struct mv_message_key keys[IMAP_VIEW_PREFETCH_KEYS];
    for (size_t i = 0; i < v->count;) {
        size_t n = 0, first = i;
        for (; i < v->count && n < IMAP_VIEW_PREFETCH_KEYS; i++) {
            n += (size_t)imap_view_key(v, i, &keys[n]);
        }
        /* judged by the first batch only: the reads a cold batch makes bring the pages
         * after them into the cache (the kernel's read-ahead), so a later batch's first leaf
         * says nothing of the file */
        int cold = 0;
        if (mv_message_prefetch_headers(db, keys, n, what, first == 0 ? &cold : NULL) != MV_OK ||
            (first == 0 && !cold)) {
            return; /* a file in the page cache: the rest is there too, or as good as */
        }
    }
}
