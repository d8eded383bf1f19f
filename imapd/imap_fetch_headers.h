/*
 * imap_fetch_headers.h -- the headers of a FETCH's next messages read at once (issue 13),
 * for FETCHes that need only the header (imap_fetch.c: ENVELOPE, RFC822.HEADER,
 * BODY[HEADER...]: a client's message list).
 *
 * USAGE (imap_fetch.c, in the FETCH's read transaction)
 *   struct imap_header_window w = {0};
 *   imap_header_window_fill(&w, db, mailbox, keys, at, n, from, to);   positions [from, to)
 *   if (imap_header_window_get(&w, k, &raw, &len)) ...   position k's header, or read by UID
 *   imap_header_window_free(&w);                          wipes the headers
 */
#ifndef MV_IMAPD_IMAP_FETCH_HEADERS_H
#define MV_IMAPD_IMAP_FETCH_HEADERS_H

#include "buf.h"
#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>

/* Messages a window reads at once: a scan's start (a statement, a seek) shared by enough
 * messages to cost little each, few enough that a client that stops reading midway leaves
 * little read for nothing. */
#define IMAP_HEADER_WINDOW 128
/* Header bytes a window keeps (ordinary headers are 1-4 KB; one may be 1 MiB): the headers
 * past it are read one at a time by UID when their message is answered. */
#define IMAP_HEADER_WINDOW_BYTES ((size_t)1 << 20)

struct imap_header_window {
    size_t from, to; /* the FETCH's positions it covers; from == to: none */
    struct {
        size_t off, len;
        int have;
    } slot[IMAP_HEADER_WINDOW]; /* [position - from] */
    struct buf text;            /* the headers' bytes, wiped when freed */
};

/* Reads into w the headers of keys[0..n), key j that of the FETCH's position at[j] (ascending
 * or not, within [from, to), to - from <= IMAP_HEADER_WINDOW), by their body keys
 * (mv_message_headers_keyed); what w held before goes. Whatever it cannot read (the mailbox
 * changed since the view, a damaged message, a failing read, the byte bound) it leaves out. */
void imap_header_window_fill(struct imap_header_window *w,
                             mv_store *db,
                             const char *mailbox,
                             const struct mv_message_key *keys,
                             const uint32_t *at,
                             size_t n,
                             size_t from,
                             size_t to);

/* 1 and position k's header (*raw, *len: valid until the next fill or free), or 0: read it
 * by UID (mv_message_fetch_header). */
int imap_header_window_get(const struct imap_header_window *w,
                           size_t k,
                           const void **raw,
                           size_t *len);

void imap_header_window_free(struct imap_header_window *w);

#endif /* MV_IMAPD_IMAP_FETCH_HEADERS_H */
