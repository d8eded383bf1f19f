/*
 * imap_search_msgid.c -- SEARCH HEADER Message-ID from the open store's copy of one
 * mailbox's Message-ID fields, shared by the user's sessions, saved in the store when it
 * closes (issue 13).
 *
 * WHY
 *   A client finds a message it knows by its Message-ID (after a COPY or an APPEND to a
 *   server without UIDPLUS, a thread's lookup, a duplicate check): UID SEARCH HEADER
 *   Message-ID <...>, often an OR of many. A HEADER key reads every message's header copy,
 *   ~36 MB of rows spread through the file at 100,000 messages: from a file out of the page
 *   cache 378 ms against Dovecot's 249 (which answers from its cache file once it has read
 *   the field). A message's bytes never change, so its Message-ID fields do not either: the
 *   first such key reads them with the headers into the open store's copy (about 60-100
 *   bytes a message), later ones run the same matcher over the copy, new messages read as
 *   they come (UIDs above the last known). The copy is saved in the store when it closes
 *   (a mailbox memo, imap_msgid_memo.h, compressed), as the sent days are
 *   (imap_search_sent.c, SAVED: the same rules for when, and for a saved copy with many
 *   expunged messages), and a new copy starts from it.
 *
 * EXACT
 *   The copy holds each message's Message-ID fields whole, picked by the matcher's own walk
 *   over the header (imap_fields_matcher_pick), so a HEADER Message-ID key over the copy
 *   marks exactly what it marks over the header: the same fields, the same bytes, the same
 *   unfolding and decoding. A message whose fields are longer than IMAP_MSGIDS_ENTRY_MAX
 *   (a hostile one) is kept as "not kept" and its header read when asked; one whose header
 *   is damaged is left out, as the pass over the headers leaves it.
 *
 * LIMITS
 *   IMAP_MSGIDS_MAX messages a store, IMAP_MSGIDS_BUDGET bytes for the process; past either,
 *   the headers are read each time.
 */
#include "imap_search_msgid.h"
#include "imap_msgid_memo.h"
#include "imap_search_fields.h"
#include "imap_session.h"
#include "log.h"
#include "metrics.h"
#include "worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The bytes every store's copy holds (IMAP_MSGIDS_BUDGET). */
static _Atomic size_t imap_msgid_bytes;

struct imap_msgids {
    char *mailbox;
    uint32_t uidvalidity;
    uint32_t last_uid;  /* every UID up to it read */
    size_t saved_count; /* entries the store's saved copy has */
    uint32_t *uids;     /* ascending */
    uint32_t *lens;     /* bytes of each entry, or IMAP_MSGID_NOT_KEPT (none in bytes) */
    size_t count, cap;
    char *bytes; /* the entries one after another */
    size_t used, bytes_cap;
};

/* An entry being read: the copy and the picker of its fields. */
struct imap_msgids_fill {
    struct imap_msgids *ids;
    const struct imap_fields_matcher *picker;
    size_t start; /* the entry's first byte */
};

/* imap_msgids_fill_field's answer for an entry over IMAP_MSGIDS_ENTRY_MAX (not an MV_ code) */
#define IMAP_MSGIDS_LONG 1

int imap_msgids_field(const char *name)
{
    return strcasecmp(name, IMAP_MSGIDS_FIELD) == 0;
}

/* Counts more bytes against IMAP_MSGIDS_BUDGET: MV_OK, or MV_EUNSUPPORTED (over it). */
static int imap_msgids_charge(size_t more)
{
    if (atomic_fetch_add(&imap_msgid_bytes, more) + more > IMAP_MSGIDS_BUDGET) {
        atomic_fetch_sub(&imap_msgid_bytes, more);
        return MV_EUNSUPPORTED; /* the process keeps enough already: read the headers */
    }
    return MV_OK;
}

void imap_msgids_free(struct imap_msgids **ids)
{
    struct imap_msgids *c = *ids;
    if (c == NULL) {
        return;
    }
    atomic_fetch_sub(&imap_msgid_bytes,
                     c->cap * (sizeof *c->uids + sizeof *c->lens) + c->bytes_cap);
    if (c->bytes != NULL) {
        explicit_bzero(c->bytes, c->bytes_cap); /* header text */
    }
    free(c->bytes);
    free(c->mailbox);
    free(c->uids);
    free(c->lens);
    free(c);
    *ids = NULL;
}

/* Room for one more entry. */
static int imap_msgids_room(struct imap_msgids *c)
{
    if (c->count < c->cap) {
        return MV_OK;
    }
    size_t cap = c->cap != 0 ? c->cap * 2 : 1024;
    size_t more = (cap - c->cap) * (sizeof *c->uids + sizeof *c->lens);
    if (imap_msgids_charge(more) != MV_OK) {
        return MV_EUNSUPPORTED;
    }
    uint32_t *uids = realloc(c->uids, cap * sizeof *uids);
    if (uids != NULL) {
        c->uids = uids;
    }
    uint32_t *lens = uids != NULL ? realloc(c->lens, cap * sizeof *lens) : NULL;
    if (lens == NULL) {
        atomic_fetch_sub(&imap_msgid_bytes, more);
        return MV_ENOMEM;
    }
    c->lens = lens;
    c->cap = cap;
    return MV_OK;
}

/* Appends n bytes to the copy's bytes (grown by a fresh block: the old one wiped, not left
 * behind by realloc). */
static int imap_msgids_append(struct imap_msgids *c, const char *b, size_t n)
{
    if (n > c->bytes_cap - c->used) {
        size_t cap = c->bytes_cap != 0 ? c->bytes_cap : 64 * 1024;
        while (cap - c->used < n) {
            cap *= 2;
        }
        if (imap_msgids_charge(cap - c->bytes_cap) != MV_OK) {
            return MV_EUNSUPPORTED;
        }
        char *grown = malloc(cap);
        if (grown == NULL) {
            atomic_fetch_sub(&imap_msgid_bytes, cap - c->bytes_cap);
            return MV_ENOMEM;
        }
        if (c->bytes != NULL) {
            memcpy(grown, c->bytes, c->used);
            explicit_bzero(c->bytes, c->bytes_cap);
            free(c->bytes);
        }
        c->bytes = grown;
        c->bytes_cap = cap;
    }
    memcpy(c->bytes + c->used, b, n);
    c->used += n;
    return MV_OK;
}

/* Appends an entry: uid with n bytes (IMAP_MSGID_NOT_KEPT: none). Also the memo decoder's. */
static int imap_msgids_put(void *arg, uint32_t uid, const char *bytes, uint32_t n)
{
    struct imap_msgids *c = arg;
    int rc = imap_msgids_room(c);
    if (rc == MV_OK && n != IMAP_MSGID_NOT_KEPT) {
        rc = n <= IMAP_MSGIDS_ENTRY_MAX ? imap_msgids_append(c, bytes, n) : MV_ECORRUPT;
    }
    if (rc == MV_OK) {
        c->uids[c->count] = uid;
        c->lens[c->count++] = n;
    }
    return rc;
}

/* imap_fields_matcher_pick's function: one field of the entry being read. */
static int imap_msgids_fill_field(void *arg, const char *bytes, size_t n)
{
    struct imap_msgids_fill *f = arg;
    if (n > IMAP_MSGIDS_ENTRY_MAX - (f->ids->used - f->start)) {
        return IMAP_MSGIDS_LONG;
    }
    return imap_msgids_append(f->ids, bytes, n);
}

/* mv_message_headers_each's function: a message's header, its Message-ID fields kept. */
static int imap_msgids_fill_one(void *arg, uint32_t uid, const void *raw, size_t len)
{
    struct imap_msgids_fill *f = arg;
    struct imap_msgids *c = f->ids;
    if (raw == NULL) {
        return MV_OK; /* damaged: left out, as the pass over the headers leaves it */
    }
    int rc = imap_msgids_room(c);
    f->start = c->used;
    if (rc == MV_OK) {
        rc = imap_fields_matcher_pick(f->picker, raw, len, imap_msgids_fill_field, f);
    }
    size_t n = c->used - f->start;
    if (rc == IMAP_MSGIDS_LONG) {
        if (n > 0) { /* fields before the one too long (none: bytes may be NULL yet) */
            explicit_bzero(c->bytes + f->start, n);
        }
        c->used = f->start;
        n = IMAP_MSGID_NOT_KEPT;
        rc = MV_OK;
    }
    if (rc != MV_OK) {
        return rc;
    }
    c->uids[c->count] = uid;
    c->lens[c->count++] = (uint32_t)n;
    return MV_OK;
}

/* Drops the entries from count on (a read that failed part way). */
static void imap_msgids_cut(struct imap_msgids *c, size_t count)
{
    size_t used = 0;
    for (size_t i = 0; i < count; i++) {
        used += c->lens[i] != IMAP_MSGID_NOT_KEPT ? c->lens[i] : 0;
    }
    if (c->bytes != NULL) {
        explicit_bzero(c->bytes + used, c->used - used);
    }
    c->used = used;
    c->count = count;
}

/* c (new, empty) filled from its store's saved copy, if there is one that decodes and does
 * not hold many more messages than the view has. Anything else leaves it empty. */
static void imap_msgids_load(mv_store *store, struct imap_msgids *c, size_t view_count)
{
    void *data = NULL;
    size_t len = 0;
    int rc = mv_mailbox_memo_get(store, c->uidvalidity, IMAP_MSGID_MEMO_SLOT, &data, &len);
    if (rc != MV_OK) {
        if (rc != MV_ENOTFOUND) {
            log_warning("Message-IDs of %s: the saved copy is not read: %s: %s", c->mailbox,
                        mv_strerror(rc), mv_store_errmsg(store));
        }
        return;
    }
    size_t max_count = view_count + view_count / 4 + IMAP_MSGID_MEMO_SLACK;
    uint32_t last = 0;
    rc =
        imap_msgid_memo_decode(data, len, max_count, IMAP_MSGIDS_BUDGET, &last, imap_msgids_put, c);
    mv_free(data);
    if (rc != MV_OK) {
        if (rc == MV_ECORRUPT) {
            log_info("Message-IDs of %s: the saved copy does not decode, or holds many expunged "
                     "messages: read again",
                     c->mailbox);
        }
        imap_msgids_cut(c, 0);
        return;
    }
    c->last_uid = last;
    c->saved_count = c->count;
    metrics_msgids_read(1, c->count);
}

void imap_msgids_save(struct imap_msgids *ids, mv_store *store)
{
    if (ids == NULL || ids->count == 0 ||
        (ids->saved_count != 0 && ids->count - ids->saved_count < IMAP_MSGID_MEMO_SAVE_NEW)) {
        return; /* nothing read since the copy was saved, or too little to write it again */
    }
    unsigned char *data = NULL;
    size_t len = 0;
    int rc = imap_msgid_memo_encode(ids->uids, ids->lens, ids->bytes, ids->count, ids->last_uid,
                                    &data, &len);
    int encoded = rc == MV_OK;
    if (rc == MV_OK) {
        rc = mv_mailbox_memo_put(store, ids->uidvalidity, IMAP_MSGID_MEMO_SLOT, data, len);
        explicit_bzero(data, len);
    }
    free(data);
    if (rc == MV_OK) {
        ids->saved_count = ids->count;
        metrics_msgids_saved();
    } else if (rc == MV_ELIMIT) { /* mostly expunged messages, or long fields: read afresh */
        log_info("Message-IDs of %s: not saved: %s", ids->mailbox, mv_store_errmsg(store));
    } else if (rc != MV_ENOTFOUND) { /* ENOTFOUND: the mailbox is gone, or made again */
        log_warning("Message-IDs of %s: not saved: %s: %s", ids->mailbox, mv_strerror(rc),
                    !encoded && rc == MV_EINVAL ? "not in UID order (a bug)"
                                                : mv_store_errmsg(store));
    }
}

/* The UIDs above the copy's last, up to last, read from the store's headers. */
static int
imap_msgids_read(mv_store *db, const struct imap_view *v, struct imap_msgids *c, uint32_t last)
{
    const char *name = IMAP_MSGIDS_FIELD, *any = "";
    struct imap_fields_matcher *picker = NULL;
    int rc = imap_fields_matcher_new(&name, &any, 1, &picker);
    if (rc != MV_OK) {
        return rc;
    }
    size_t had = c->count;
    if (had == 0) { /* a first read of the whole mailbox: from a cold file, asked at once */
        imap_view_prefetch_headers(db, v, MV_PREFETCH_HEADER_COPY);
    }
    struct imap_msgids_fill f = {.ids = c, .picker = picker};
    rc = mv_message_headers_each(db, v->mailbox, c->last_uid + 1, last, imap_msgids_fill_one, &f);
    imap_fields_matcher_free(picker);
    if (rc != MV_OK) {
        imap_msgids_cut(c, had); /* what was read before stays good */
        return rc;
    }
    c->last_uid = last;
    metrics_msgids_read(0, c->count - had);
    return MV_OK;
}

int imap_msgids_for(struct imap_session *s, const struct imap_msgids **out)
{
    const struct imap_view *v = &s->view;
    struct open_store *os = s->store;
    *out = NULL;
    if (os == NULL || v->count > IMAP_MSGIDS_MAX) {
        return MV_EUNSUPPORTED;
    }
    pthread_mutex_lock(&os->msgid_lock);
    struct imap_msgids *c = os->msgids;
    if (c != NULL && (strcmp(c->mailbox, v->mailbox) != 0 || c->uidvalidity != v->uidvalidity)) {
        imap_msgids_free(&os->msgids); /* one mailbox at a time: the last searched */
        c = NULL;
    }
    if (c == NULL) {
        c = calloc(1, sizeof *c);
        if (c == NULL || (c->mailbox = strdup(v->mailbox)) == NULL) {
            free(c);
            pthread_mutex_unlock(&os->msgid_lock);
            return MV_ENOMEM;
        }
        c->uidvalidity = v->uidvalidity;
        os->msgids = c;
        imap_msgids_load(imap_db(s), c, v->count);
    }
    uint32_t last = v->count > 0 ? imap_view_msg(v, v->count - 1)->uid : 0;
    if (last > c->last_uid) {
        int rc = imap_msgids_read(imap_db(s), v, c, last);
        if (rc != MV_OK) {
            pthread_mutex_unlock(&os->msgid_lock);
            return rc;
        }
    }
    *out = c;
    return MV_OK;
}

void imap_msgids_done(struct imap_session *s)
{
    pthread_mutex_unlock(&s->store->msgid_lock);
}

int imap_msgids_next(const struct imap_msgids *ids,
                     struct imap_msgids_cursor *cursor,
                     uint32_t uid,
                     const char **fields,
                     size_t *len)
{
    size_t at = cursor->at, off = cursor->off;
    while (at < ids->count && ids->uids[at] < uid) {
        off += ids->lens[at] != IMAP_MSGID_NOT_KEPT ? ids->lens[at] : 0;
        at++;
    }
    cursor->at = at;
    cursor->off = off;
    if (at == ids->count || ids->uids[at] != uid) {
        return -1;
    }
    if (ids->lens[at] == IMAP_MSGID_NOT_KEPT) {
        return 1;
    }
    *fields = ids->bytes != NULL ? ids->bytes + off : "";
    *len = ids->lens[at];
    return 0;
}
