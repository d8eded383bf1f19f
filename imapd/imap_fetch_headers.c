/*
 * imap_fetch_headers.c -- the headers of a FETCH's next messages read at once
 * (imap_fetch_headers.h).
 *
 * WHY
 *   A client's message list asks for header fields of up to every message of a mailbox
 *   (Thunderbird: UID FETCH 1:* (UID RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS (From To
 *   ...)]), in chunks of 200 later). Each read by UID (mv_message_fetch_header) was a
 *   statement of its own with a seek in the UID index and one in the bodies table: two thirds
 *   of such a FETCH's time at 10,000 messages, where Dovecot reads the fields from its cache
 *   file. The body keys of the view name the bodies' rows, and the rows of messages delivered
 *   one after another lie together: one statement steps over a window of them.
 */
#include "imap_fetch_headers.h"

#include <string.h>

/* What mv_message_headers_keyed's got() needs. */
struct imap_header_fill {
    struct imap_header_window *w;
    const uint32_t *at;
    size_t n;
};

/* mv_message_headers_keyed's got(): keeps key j's header for its position, within the bound. */
static int imap_header_window_got(void *arg, size_t j, const void *raw, size_t len)
{
    struct imap_header_fill *hf = arg;
    struct imap_header_window *w = hf->w;
    if (j >= hf->n || hf->at[j] < w->from || hf->at[j] >= w->to ||
        len > IMAP_HEADER_WINDOW_BYTES - w->text.len) {
        return MV_OK; /* past the bound: read by UID when answered */
    }
    size_t off = w->text.len;
    buf_add(&w->text, raw, len);
    if (!w->text.oom) {
        size_t k = hf->at[j] - w->from;
        w->slot[k].off = off;
        w->slot[k].len = len;
        w->slot[k].have = 1;
    }
    return MV_OK;
}

void imap_header_window_fill(struct imap_header_window *w,
                             mv_store *db,
                             const char *mailbox,
                             const struct mv_message_key *keys,
                             const uint32_t *at,
                             size_t n,
                             size_t from,
                             size_t to)
{
    if (w->text.oom) {
        buf_free(&w->text); /* unusable after a failed append: start again */
    }
    /* the last window's headers are wiped as a new one overwrites them; the rest at free */
    w->text.len = 0;
    memset(w->slot, 0, sizeof w->slot);
    w->from = from;
    w->to = to - from <= IMAP_HEADER_WINDOW ? to : from + IMAP_HEADER_WINDOW;
    struct imap_header_fill hf = {.w = w, .at = at, .n = n};
    /* from a file out of the page cache, the rows' leaves are asked of the disk together: one
     * wait for the window instead of one a leaf (a hint: it changes no byte read) */
    (void)mv_message_prefetch_headers(db, keys, n, MV_PREFETCH_HEADER_COPY, NULL);
    if (n > 0 &&
        mv_message_headers_keyed(db, mailbox, keys, n, imap_header_window_got, &hf) != MV_OK) {
        /* what it kept before it stopped is right; the rest is read by UID */
    }
}

int imap_header_window_get(const struct imap_header_window *w,
                           size_t k,
                           const void **raw,
                           size_t *len)
{
    if (k < w->from || k >= w->to || !w->slot[k - w->from].have || w->text.oom ||
        w->text.data == NULL) {
        return 0;
    }
    *raw = w->text.data + w->slot[k - w->from].off;
    *len = w->slot[k - w->from].len;
    return 1;
}

void imap_header_window_free(struct imap_header_window *w)
{
    buf_free(&w->text);
    memset(w, 0, sizeof *w);
}
