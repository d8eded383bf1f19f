/*
 * imap_view.c -- a session's view of its selected mailbox: the messages in UID order (index
 * + 1 is the sequence number) with flags, keywords and modseq, and the sync that brings the
 * view up to date and tells the client what changed.
 *
 * IMPLEMENTATION NOTES
 *   - A sync is cheap when nothing changed: one mv_mailbox_status() and a comparison of the
 *     mailbox's highest modseq with the view's. Otherwise the mailbox is listed again
 *     (mv_message_list_*) and merged with the view by UID (both ascending).
 *   - Vanished UIDs: when EXPUNGE responses are allowed they are sent in ascending order,
 *     each with the sequence number the message has at that moment (the earlier ones are
 *     already gone). When they are not (FETCH, STORE, SEARCH: RFC 3501 7.4.1), the message
 *     stays in the view marked expunged, and goes at the next sync that may report it.
 *   - Messages whose modseq moved get "* n FETCH (UID u FLAGS (...))"; new ones "* n EXISTS"
 *     (and "* 0 RECENT": this server has no \Recent).
 */
#include "imap_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void imap_view_free(struct imap_view *v)
{
    for (size_t i = 0; i < v->count; i++) {
        free(v->msgs[i].keywords);
    }
    free(v->msgs);
    free(v->mailbox);
    memset(v, 0, sizeof *v);
}

static int imap_view_push(struct imap_view *v, const struct imap_msg *m)
{
    if (v->count == v->cap) {
        size_t cap = v->cap != 0 ? v->cap * 2 : 64;
        struct imap_msg *msgs = realloc(v->msgs, cap * sizeof *msgs);
        if (msgs == NULL) {
            return MV_ENOMEM;
        }
        v->msgs = msgs;
        v->cap = cap;
    }
    v->msgs[v->count++] = *m;
    return MV_OK;
}

/* Reads the mailbox's current messages into a fresh view (name and readonly not set). */
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
    mv_message_iter *it = NULL;
    rc = mv_message_list_begin(store, mailbox, 0, 0, &it);
    struct mv_message_entry e;
    while (rc == MV_OK && (rc = mv_message_list_next(it, &e)) == 1) {
        struct imap_msg m = {.uid = e.uid,
                             .flags = e.flags,
                             .modseq = e.modseq,
                             .size = e.size,
                             .internal_date = e.internal_date,
                             .keywords = strdup(e.keywords)};
        rc = m.keywords != NULL ? imap_view_push(v, &m) : MV_ENOMEM;
        if (rc != MV_OK) {
            free(m.keywords);
        }
    }
    mv_message_list_end(&it);
    return rc < 0 ? rc : MV_OK;
}

int imap_view_load(struct imap_session *s, const char *mailbox, int readonly)
{
    struct imap_view v;
    memset(&v, 0, sizeof v);
    imap_view_free(&s->view);
    int rc = imap_view_read(s->store->store, mailbox, &v);
    if (rc == MV_OK && (v.mailbox = strdup(mailbox)) == NULL) {
        rc = MV_ENOMEM;
    }
    if (rc != MV_OK) {
        imap_view_free(&v);
        return rc;
    }
    v.readonly = readonly;
    s->view = v;
    return MV_OK;
}

void imap_flags_out(struct buf *out, unsigned flags, const char *keywords)
{
    static const char *const names[] = {"\\Seen", "\\Answered", "\\Flagged", "\\Deleted",
                                        "\\Draft"};
    int first = 1;
    buf_str(out, "(");
    for (unsigned i = 0; i < 5; i++) {
        if ((flags & (1u << i)) != 0) {
            buf_printf(out, "%s%s", first ? "" : " ", names[i]);
            first = 0;
        }
    }
    if (keywords != NULL && keywords[0] != '\0') {
        buf_printf(out, "%s%s", first ? "" : " ", keywords);
    }
    buf_str(out, ")");
}

void imap_fetch_flags_line(struct buf *out, size_t seq, const struct imap_msg *m, int condstore)
{
    buf_printf(out, "* %zu FETCH (UID %u FLAGS ", seq, m->uid);
    imap_flags_out(out, m->flags, m->keywords);
    if (condstore) {
        buf_printf(out, " MODSEQ (%llu)", (unsigned long long)m->modseq);
    }
    buf_str(out, ")\r\n");
}

/* "* VANISHED uid-set" of the view's messages the merge removed (expunged == 2). */
static void imap_view_vanished_out(const struct imap_view *v, size_t count, struct buf *out)
{
    buf_str(out, "* VANISHED ");
    int first = 1;
    for (size_t i = 0; i < count;) {
        if (v->msgs[i].expunged != 2) {
            i++;
            continue;
        }
        uint32_t lo = v->msgs[i].uid, hi = lo;
        size_t k = i + 1;
        while (k < count && v->msgs[k].expunged == 2 && v->msgs[k].uid == hi + 1) {
            hi = v->msgs[k++].uid;
        }
        buf_printf(out, lo == hi ? "%s%u" : "%s%u:%u", first ? "" : ",", lo, hi);
        first = 0;
        i = k;
    }
    buf_str(out, "\r\n");
}

/* Merges fresh (the store now) into the session's view, reporting as it goes. */
static int
imap_view_merge(struct imap_session *s, struct imap_view *fresh, struct buf *out, int allow_expunge)
{
    struct imap_view *v = &s->view;
    struct imap_view merged;
    memset(&merged, 0, sizeof merged);
    size_t i = 0, j = 0, old_count = v->count;
    size_t removed = 0, vanished_count = 0;
    int rc = MV_OK;
    while (rc == MV_OK && i < v->count) {
        struct imap_msg *m = &v->msgs[i];
        while (j < fresh->count && fresh->msgs[j].uid < m->uid) {
            j++; /* a UID below the view's last one it never saw: cannot happen (UIDs grow) */
        }
        if (j < fresh->count && fresh->msgs[j].uid == m->uid) {
            struct imap_msg *f = &fresh->msgs[j++];
            if (f->modseq != m->modseq || f->flags != m->flags ||
                strcmp(f->keywords, m->keywords) != 0) {
                free(m->keywords);
                m->keywords = f->keywords;
                f->keywords = NULL;
                m->flags = f->flags;
                m->modseq = f->modseq;
                if (m->reported != 2) { /* 2: a STORE .SILENT of this command */
                    imap_fetch_flags_line(out, merged.count + 1, m, s->condstore);
                }
                m->reported = 1;
            }
            rc = imap_view_push(&merged, m);
        } else if (allow_expunge) {
            if (s->qresync) { /* RFC 7162 3.2.10: one VANISHED for them all, below */
                vanished_count++;
            } else {
                buf_printf(out, "* %zu EXPUNGE\r\n", merged.count + 1);
            }
            m->expunged = 2; /* its keywords are freed once the merge has succeeded */
            removed++;
        } else {
            m->expunged = 1;
            rc = imap_view_push(&merged, m);
        }
        i++;
    }
    uint32_t last_uid = old_count > 0 ? v->msgs[old_count - 1].uid : 0;
    for (; rc == MV_OK && j < fresh->count; j++) {
        if (fresh->msgs[j].uid > last_uid) {
            rc = imap_view_push(&merged, &fresh->msgs[j]);
            if (rc == MV_OK) {
                fresh->msgs[j].keywords = NULL;
            }
        }
    }
    if (rc != MV_OK) {
        free(merged.msgs); /* keywords are still owned by v or fresh */
        for (size_t k = 0; k < old_count; k++) {
            v->msgs[k].expunged = v->msgs[k].expunged == 2 ? 0 : v->msgs[k].expunged;
        }
        return rc;
    }
    if (vanished_count > 0) {
        imap_view_vanished_out(v, old_count, out);
    }
    for (size_t k = 0; k < old_count; k++) {
        if (v->msgs[k].expunged == 2) {
            free(v->msgs[k].keywords);
        }
    }
    if (merged.count != old_count - removed || removed > 0) {
        buf_printf(out, "* %zu EXISTS\r\n", merged.count);
        if (merged.count > old_count - removed) {
            buf_str(out, "* 0 RECENT\r\n");
        }
    }
    free(v->msgs);
    v->msgs = merged.msgs;
    v->count = merged.count;
    v->cap = merged.cap;
    v->uidnext = fresh->uidnext;
    v->highestmodseq = fresh->highestmodseq;
    return MV_OK;
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

int imap_view_sync(struct imap_session *s, struct buf *out, int allow_expunge)
{
    struct imap_view *v = &s->view;
    struct mv_mailbox_info info;
    int pending_expunge = 0;
    if (v->mailbox == NULL) {
        return MV_OK;
    }
    for (size_t i = 0; i < v->count && !pending_expunge; i++) {
        pending_expunge = v->msgs[i].expunged;
    }
    int rc = mv_mailbox_status(s->store->store, v->mailbox, &info);
    if (rc == MV_ENOTFOUND || (rc == MV_OK && info.uidvalidity != v->uidvalidity)) {
        return imap_view_gone(s, out);
    }
    if (rc != MV_OK) {
        return rc;
    }
    if (info.highestmodseq == v->highestmodseq && !(pending_expunge && allow_expunge)) {
        return MV_OK;
    }
    struct imap_view fresh;
    memset(&fresh, 0, sizeof fresh);
    rc = imap_view_read(s->store->store, v->mailbox, &fresh);
    if (rc == MV_ENOTFOUND || (rc == MV_OK && fresh.uidvalidity != v->uidvalidity)) {
        imap_view_free(&fresh);
        return imap_view_gone(s, out);
    }
    if (rc == MV_OK) {
        rc = imap_view_merge(s, &fresh, out, allow_expunge);
    }
    imap_view_free(&fresh);
    return rc;
}

static size_t imap_view_find_uid(const struct imap_view *v, uint32_t uid)
{
    size_t lo = 0, hi = v->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->msgs[mid].uid < uid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo; /* first index with uid >= the one sought */
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
    unsigned char *mark = calloc(v->count, 1);
    if (mark == NULL) {
        return -2;
    }
    uint32_t star = uid ? v->msgs[v->count - 1].uid : (uint32_t)v->count;
    int rc = 0;
    for (size_t r = 0; r < set->count; r++) {
        uint32_t a = set->ranges[r].first == IMAP_SEQ_STAR ? star : set->ranges[r].first;
        uint32_t b = set->ranges[r].last == IMAP_SEQ_STAR ? star : set->ranges[r].last;
        uint32_t lo = a < b ? a : b, hi = a < b ? b : a;
        if (uid) {
            for (size_t i = imap_view_find_uid(v, lo); i < v->count && v->msgs[i].uid <= hi; i++) {
                mark[i] = 1;
            }
        } else if (hi > v->count) {
            rc = -1;
        } else {
            memset(mark + lo - 1, 1, (size_t)(hi - lo) + 1);
        }
    }
    size_t n = 0;
    for (size_t i = 0; rc == 0 && i < v->count; i++) {
        n += mark[i];
    }
    if (rc == 0 && n > 0) {
        *idx = malloc(n * sizeof **idx);
        if (*idx == NULL) {
            rc = -2;
        }
    }
    for (size_t i = 0, k = 0; rc == 0 && i < v->count; i++) {
        if (mark[i]) {
            (*idx)[k++] = (uint32_t)i;
        }
    }
    if (rc == 0) {
        *count = n;
    }
    free(mark);
    return rc;
}

char *imap_view_uid_set(const struct imap_view *v, const uint32_t *idx, size_t count)
{
    struct buf b = {0};
    for (size_t i = 0; i < count;) {
        uint32_t first = v->msgs[idx[i]].uid, last = first;
        size_t k = i + 1;
        while (k < count && v->msgs[idx[k]].uid == last + 1) {
            last = v->msgs[idx[k++]].uid;
        }
        if (first == last) {
            buf_printf(&b, "%s%u", i == 0 ? "" : ",", first);
        } else {
            buf_printf(&b, "%s%u:%u", i == 0 ? "" : ",", first, last);
        }
        i = k;
    }
    if (b.oom || b.data == NULL) {
        buf_free(&b);
        return NULL;
    }
    return b.data;
}
