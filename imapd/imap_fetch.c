/*
 * imap_fetch.c -- FETCH and UID FETCH: FLAGS, UID, INTERNALDATE, RFC822.SIZE, RFC822,
 * RFC822.HEADER, RFC822.TEXT, BODY[], BODY[HEADER], BODY[TEXT], BODY[HEADER.FIELDS (..)],
 * BODY[HEADER.FIELDS.NOT (..)], the .PEEK forms and partial ranges <start.length>,
 * ENVELOPE, BODYSTRUCTURE, BODY, BODY[n], BODY[n.MIME], and CONDSTORE's MODSEQ item and
 * (CHANGEDSINCE n) modifier.
 *
 * IMPLEMENTATION NOTES
 *   - Flags, dates and sizes come from the view; a message's bytes are read (once per
 *     message) only when a section needs them, and go out as literals, byte for byte as
 *     stored. When every item needs only the header (a client's message list: ENVELOPE,
 *     HEADER.FIELDS), only the header is read (imap_fetch_header_only).
 *   - The header is everything up to and including the first empty line (CRLF CRLF, or a
 *     bare LF LF in a message stored with LF endings); the text is the rest.
 *   - A non-PEEK body fetch in a read-write mailbox sets \Seen first (one mv_flags_set_ranges for
 *     the whole command), and the response then carries FLAGS for those messages.
 *
 *   - ENVELOPE, BODYSTRUCTURE and BODY come from imap_mime.c (GMime), parsed once per
 *     message per command, only when asked for. BODYSTRUCTURE and BODY answers are kept
 *     in the open store's structure cache (imap_structure_cache.c): a later FETCH of the
 *     message, by any session of the store, copies them and reads the message only if
 *     another item needs it (the header alone for ENVELOPE or HEADER.FIELDS).
 *   - Sections of parts (BODY[1.2], [1.2.MIME], [2.HEADER], [2.TEXT], [2.HEADER.FIELDS
 *     (..)], through any mix of multipart and message/rfc822 nesting) are ranges of the raw
 *     message that imap_mime_section() finds without GMime's objects, so they are the stored
 *     bytes exactly; HEADER.FIELDS filters the range like the top-level header, and
 *     <partial> applies to all of them.
 *   - Streaming: the response is made in chunks. The job stops after the message that takes
 *     its output past IMAP_FETCH_CHUNK and leaves its state (parsed items, the message
 *     indexes, where it stopped) in s->fetch_more; the loop writes the chunk and keeps the
 *     connection busy until its output falls below CONN_STREAM_RESUME_BELOW (more than a
 *     chunk: the next chunk is made while the last one is sent), then posts the same job
 *     again, which goes on from there (imap_fetch_continue). So one FETCH of any size holds
 *     about one chunk plus one message on the worker and CONN_STREAM_RESUME_BELOW plus that
 *     in the connection's output, and a client that reads slowly slows the worker's reads
 *     down instead of growing the server. \Seen is set and the view synced once, before
 *     the first chunk; nothing else of the session runs in between (it stays busy).
 *   - Direct sending: on a plain connection whose output was empty when the job was posted,
 *     the job writes the response to the socket itself every IMAP_FETCH_DIRECT_MIN bytes
 *     (imap_fetch_direct) and goes on past the chunk size, up to IMAP_FETCH_DIRECT_JOB_MAX,
 *     until a write is not taken whole; then the loop writes the rest as above
 *     (docs/IMAPD.md, "Streaming FETCH"). The job that ends the response writes its last
 *     bytes, the tagged line included, itself as well, so a FETCH of any size is answered
 *     without waiting for the loop.
 *
 * LIMITATIONS
 *   A missing part, or HEADER / TEXT of a part that is not message/rfc822, is NIL. A single
 *   message's response (several sections of one message) is still built whole.
 */
#include "buf.h"
#include "imap_fetch_headers.h"
#include "imap_mime.h"
#include "imap_session.h"
#include "imap_structure_cache.h"
#include "imap_structure_save.h"
#include "mailvault.h"
#include "metrics.h"
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Length of the header including its terminating empty line: the store's rule, so a
 * header-only read (mv_message_fetch_header) and a cut of the whole message agree. */
static size_t imap_header_len(const char *raw, size_t len)
{
    return mv_message_header_len(raw, len);
}

/* HEADER.FIELDS (.NOT): the selected fields, each with its continuation lines, then CRLF. */
static void imap_header_fields(struct buf *b,
                               const struct imap_fetch_section *sec,
                               const char *raw,
                               size_t hlen)
{
    size_t at = 0;
    while (at < hlen) {
        size_t end = at;
        do { /* a field: its line and every line that starts with SP or TAB */
            const char *nl = memchr(raw + end, '\n', hlen - end);
            end = nl != NULL ? (size_t)(nl - raw) + 1 : hlen;
        } while (end < hlen && (raw[end] == ' ' || raw[end] == '\t'));
        const char *colon = memchr(raw + at, ':', end - at);
        if (colon != NULL && raw[at] != '\r' && raw[at] != '\n') {
            size_t name_len = (size_t)(colon - (raw + at));
            while (name_len > 0 &&
                   (raw[at + name_len - 1] == ' ' || raw[at + name_len - 1] == '\t')) {
                name_len--;
            }
            int listed = imap_fetch_section_lists(sec, raw + at, name_len);
            if (listed == (sec->kind == IMAP_SECTION_HEADER_FIELDS)) {
                buf_add(b, raw + at, end - at);
            }
        }
        at = end;
    }
    buf_str(b, "\r\n");
}

static void
imap_literal(struct buf *out, const char *data, size_t len, const struct imap_fetch_section *sec)
{
    if (sec != NULL && sec->partial) {
        uint64_t start = sec->start < len ? sec->start : len;
        uint64_t n = len - start < sec->length ? len - start : sec->length;
        data += start;
        len = (size_t)n;
    }
    buf_literal(out, data, len); /* NUL goes out as 0x80 (RFC 3501 9) */
}

/* What of part sec->part a section with part numbers locates (imap_mime_section). */
static enum imap_mime_what imap_section_what(const struct imap_fetch_section *sec)
{
    switch (sec->kind) {
    case IMAP_SECTION_ALL:
        return IMAP_MIME_CONTENT;
    case IMAP_SECTION_MIME:
        return IMAP_MIME_HEADER;
    case IMAP_SECTION_TEXT:
        return IMAP_MIME_MESSAGE_TEXT;
    default:
        return IMAP_MIME_MESSAGE_HEADER; /* HEADER, HEADER.FIELDS (.NOT) */
    }
}

/* A part section located once (imap_fetch_sparse_copy) for its answer after: rc and span of
 * imap_mime_section(); rc 1 when not located yet. */
struct imap_located {
    int rc;
    struct imap_mime_span span;
};
/* Sections a FETCH may have located ahead (more are located as they are answered). */
#define IMAP_FETCH_LOCATED 8

/* imap_mime_section() of sec in raw, or what known holds of it already; flat: raw's
 * imap_mime_flat() if known, else -1; gaps: raw's fillers when it is a stand-in, else NULL. */
static int imap_section_locate(const struct imap_fetch_section *sec,
                               const char *raw,
                               size_t len,
                               int flat,
                               struct imap_mime_reading *gaps,
                               const struct imap_located *known,
                               struct imap_mime_span *span)
{
    if (known != NULL && known->rc != 1) {
        *span = known->span;
        return known->rc;
    }
    return imap_mime_section_flat(raw, len, flat >= 0 ? flat : imap_mime_flat(raw, len), gaps,
                                  sec->part, sec->part_count, imap_section_what(sec), span);
}

/* BODY[1.2...]: a range of the raw message (imap_mime.c), or NIL when there is no such part. */
static void imap_part_section_out(struct buf *out,
                                  const struct imap_fetch_section *sec,
                                  const char *raw,
                                  size_t len,
                                  struct imap_mime_reading *gaps,
                                  const struct imap_located *known)
{
    struct imap_mime_span span;
    if (raw == NULL || imap_section_locate(sec, raw, len, -1, gaps, known, &span) != 0) {
        buf_str(out, "NIL");
    } else if (sec->kind == IMAP_SECTION_HEADER_FIELDS ||
               sec->kind == IMAP_SECTION_HEADER_FIELDS_NOT) {
        struct buf fields = {0};
        imap_header_fields(&fields, sec, raw + span.offset, span.length);
        imap_literal(out, fields.data != NULL ? fields.data : "", fields.len, sec);
        buf_free(&fields);
    } else {
        imap_literal(out, raw + span.offset, span.length, sec);
    }
}

/* sec of raw (len bytes, its header the first hlen; gaps: its fillers if a stand-in, else
 * NULL); known: where it was located, or NULL. */
static void imap_section_out(struct buf *out,
                             const struct imap_fetch_section *sec,
                             const char *raw,
                             size_t len,
                             size_t hlen,
                             struct imap_mime_reading *gaps,
                             const struct imap_located *known)
{
    BUF_LIT(out, "BODY[");
    buf_add(out, sec->spec, sec->spec_len);
    BUF_LIT(out, "]");
    if (sec->partial) {
        BUF_LIT(out, "<");
        buf_u64(out, sec->start);
        BUF_LIT(out, ">");
    }
    BUF_LIT(out, " ");
    if (sec->part_count > 0) {
        imap_part_section_out(out, sec, raw, len, gaps, known);
    } else if (sec->kind == IMAP_SECTION_ALL) {
        imap_literal(out, raw, len, sec);
    } else if (sec->kind == IMAP_SECTION_HEADER) {
        imap_literal(out, raw, hlen, sec);
    } else if (sec->kind == IMAP_SECTION_TEXT) {
        imap_literal(out, raw + hlen, len - hlen, sec);
    } else {
        struct buf fields = {0};
        imap_header_fields(&fields, sec, raw, hlen);
        imap_literal(out, fields.data != NULL ? fields.data : "", fields.len, sec);
        buf_free(&fields);
    }
}

/* The bytes of raw (len, its header the first hlen; flat: its imap_mime_flat(); gaps: its
 * fillers) sec's answer is made from: [*from, *to), as imap_section_out() reads them (a
 * partial's cut applied, except to HEADER.FIELDS, whose text is made from the whole header
 * first); empty for a part that is not there. A part section's location goes into *located
 * (if not NULL) for its answer. */
static void imap_section_range(const struct imap_fetch_section *sec,
                               const char *raw,
                               size_t len,
                               size_t hlen,
                               int flat,
                               struct imap_mime_reading *gaps,
                               struct imap_located *located,
                               size_t *from,
                               size_t *to)
{
    size_t at = 0, n = 0;
    int fields =
        sec->kind == IMAP_SECTION_HEADER_FIELDS || sec->kind == IMAP_SECTION_HEADER_FIELDS_NOT;
    if (sec->part_count > 0) {
        struct imap_mime_span span = {0, 0};
        int rc = imap_section_locate(sec, raw, len, flat, gaps, NULL, &span);
        if (located != NULL) { /* kept for the answer */
            *located = (struct imap_located){.rc = rc, .span = span};
        }
        if (rc == 0) {
            at = span.offset;
            n = span.length;
        }
    } else if (sec->kind == IMAP_SECTION_ALL) {
        n = len;
    } else if (sec->kind == IMAP_SECTION_TEXT) {
        at = hlen;
        n = len - hlen;
    } else {
        n = hlen; /* HEADER, HEADER.FIELDS (.NOT) */
    }
    if (sec->partial && !fields) {
        uint64_t start = sec->start < n ? sec->start : n;
        at += (size_t)start;
        n = n - (size_t)start < sec->length ? n - (size_t)start : (size_t)sec->length;
    }
    *from = at;
    *to = at + n;
}

/* 1 if items (f's, less those answered without the message) and f's sections can be answered
 * from the message's header alone (ENVELOPE, RFC822.HEADER, BODY[HEADER], BODY[HEADER.FIELDS
 * (..)] and .NOT, with or without partials): then only the header is read
 * (mv_message_fetch_header), which for a client's message list is a small fraction of the
 * bytes to read, decrypt and decompress. */
static int imap_fetch_header_only(const struct imap_fetch *f, unsigned items)
{
    if ((items & (IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY | IMAP_FETCH_RFC822 |
                  IMAP_FETCH_RFC822_TEXT)) != 0) {
        return 0;
    }
    for (size_t k = 0; k < f->section_count; k++) {
        const struct imap_fetch_section *sec = &f->sections[k];
        if (sec->part_count > 0 ||
            (sec->kind != IMAP_SECTION_HEADER && sec->kind != IMAP_SECTION_HEADER_FIELDS &&
             sec->kind != IMAP_SECTION_HEADER_FIELDS_NOT)) {
            return 0;
        }
    }
    return 1;
}

/* 1 if the message's bytes go out as exactly one literal of the whole message, RFC822 or
 * BODY[] (.PEEK) without a partial, and nothing else of items (f's, less those answered
 * without the message) needs them: then they are read straight into the response
 * (imap_fetch_placed), without a copy of the message of their own. */
static int imap_fetch_whole_only(const struct imap_fetch *f, unsigned items)
{
    if ((items & (IMAP_FETCH_ENVELOPE | IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY |
                  IMAP_FETCH_RFC822_HEADER | IMAP_FETCH_RFC822_TEXT)) != 0) {
        return 0;
    }
    if ((items & IMAP_FETCH_RFC822) != 0) {
        return f->section_count == 0;
    }
    return f->section_count == 1 && f->sections[0].part_count == 0 &&
           f->sections[0].kind == IMAP_SECTION_ALL && !f->sections[0].partial;
}

/* mv_message_fetch_into's place: the literal's head in the response, then its room. */
static void *imap_fetch_place(void *arg, size_t size)
{
    return buf_literal_place(arg, size);
}

/* mv_message_fetch_keyed_into's place for a copy of the message of its own (malloc'd into
 * *arg; mv_free wipes and frees it as it does the library's). */
static void *imap_fetch_place_copy(void *arg, size_t size)
{
    void **slot = arg;
    *slot = malloc(size != 0 ? size : 1);
    return *slot;
}

/* mv_message_fetch of message i, by its body key when it may be (imap_view_key): for the
 * sections, BODYSTRUCTURE and the rest that need the whole message but not as one literal.
 * *raw: free with mv_free. */
static int imap_fetch_whole_copy(struct imap_ctx *x, size_t i, void **raw, size_t *len)
{
    const struct imap_view *v = &x->s->view;
    struct mv_message_key key;
    if (!imap_view_key(v, i, &key)) {
        return mv_message_fetch(imap_db(x->s), v->mailbox, imap_view_msg(v, i)->uid, raw, len);
    }
    *raw = NULL;
    int rc = mv_message_fetch_keyed_into(imap_db(x->s), v->mailbox, imap_view_msg(v, i)->uid, &key,
                                         imap_fetch_place_copy, raw, len);
    if (rc != MV_OK) {
        mv_free(*raw);
        *raw = NULL;
    }
    return rc;
}

/* Parts stored apart one skeleton read takes (each is 128 KiB or more: 8 MiB of parts; a
 * message with more is read whole). */
#define IMAP_FETCH_SKELETON_CUTS 64

/* Items that need the message's every byte (or GMime's whole parse of it): a FETCH with one
 * of them reads the message whole. */
#define IMAP_FETCH_WHOLE_ITEMS                                                                     \
    (IMAP_FETCH_RFC822 | IMAP_FETCH_RFC822_TEXT | IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY)

/* 1 if f asks only for pieces of messages (partials, parts, headers: a preview, a part's
 * MIME header), which imap_fetch_sparse_copy() can mostly answer without the parts stored
 * apart: then only the skeletons are asked of the disk ahead. */
static int imap_fetch_sparse_likely(const struct imap_fetch *f)
{
    if ((f->items & IMAP_FETCH_WHOLE_ITEMS) != 0 || f->section_count == 0) {
        return 0;
    }
    for (size_t k = 0; k < f->section_count; k++) {
        const struct imap_fetch_section *sec = &f->sections[k];
        if (!sec->partial && sec->part_count == 0 &&
            (sec->kind == IMAP_SECTION_ALL || sec->kind == IMAP_SECTION_TEXT)) {
            return 0; /* the whole message or its whole text */
        }
    }
    return 1;
}

/* The parts a stand-in (imap_fetch_sparse_copy) was made without: where its fillers are, so
 * that only the skeleton's bytes in it are wiped when it goes (imap_fetch_raw_free). count 0:
 * the message's bytes are whole (or the skeleton is the message). */
struct imap_sparse {
    struct mv_message_cut cuts[IMAP_FETCH_SKELETON_CUTS];
    size_t count;
    struct imap_mime_gap gap[IMAP_FETCH_SKELETON_CUTS]; /* the fillers, for the walks */
    struct imap_mime_reading gaps;
};

/* Frees what imap_fetch_one() read of a message: a stand-in less its fillers' wipe. */
static void imap_fetch_raw_free(void *raw, size_t len, const struct imap_sparse *sp)
{
    if (sp->count > 0) {
        imap_mime_stand_in_free(raw, len, sp->cuts, sp->count);
    } else {
        mv_free(raw);
    }
}

/* Message i with its parts stored apart left out (issue 13), when every byte f's sections
 * answer with (and RFC822.HEADER, ENVELOPE: the header) lies outside them: its skeleton laid
 * out at the message's offsets, each cut part's place filled with 'x' and a final LF. A
 * client's preview (BODY.PEEK[TEXT]<0.512>, BODY.PEEK[1]<0.256>), a part's MIME header or
 * the text part of a message with an attachment then read the skeleton alone; before, they
 * read, decrypted and copied the attachments too, most of the bytes (2.5-3x Dovecot's time
 * for 500 previews). Where the parts lie is found in this stand-in by the same code as in
 * the message, which it can be because a cut part holds no line a MIME parser reads
 * (marks 0: its bytes and the filler are content alike) and starts a line; a section that
 * reaches into a cut part, a part with marks, or a message the skeleton cannot give
 * (mv_message_skeleton_keyed: MV_EUNSUPPORTED ...) is read whole, as before. Returns 1 with
 * *raw (len bytes; imap_fetch_raw_free with sp, whose cuts say where the fillers are), or 0
 * with nothing held. */
static int imap_fetch_sparse_copy(struct imap_ctx *x,
                                  const struct imap_fetch *f,
                                  unsigned needs,
                                  size_t i,
                                  struct imap_located located[IMAP_FETCH_LOCATED],
                                  struct imap_sparse *sp,
                                  void **raw,
                                  size_t *len)
{
    struct mv_message_key key;
    sp->count = 0;
    if ((needs & IMAP_FETCH_WHOLE_ITEMS) != 0 || f->section_count == 0 ||
        !imap_view_key(&x->s->view, i, &key)) {
        return 0;
    }
    void *skeleton = NULL;
    size_t skeleton_len = 0, count = 0;
    if (mv_message_skeleton_keyed(imap_db(x->s), x->s->view.mailbox, &key, imap_fetch_place_copy,
                                  &skeleton, &skeleton_len, sp->cuts, IMAP_FETCH_SKELETON_CUTS,
                                  &count) != MV_OK) {
        mv_free(skeleton);
        return 0;
    }
    if (count == 0) { /* nothing stored apart: the skeleton is the message */
        *raw = skeleton;
        *len = skeleton_len;
        return 1;
    }
    char *whole = NULL;
    int usable =
        imap_mime_stand_in(skeleton, skeleton_len, sp->cuts, count, key.size, &whole) == MV_OK;
    int flat = usable && imap_mime_stand_in_flat(skeleton, skeleton_len, key.size);
    mv_free(skeleton);
    imap_mime_stand_in_gaps(sp->cuts, count, sp->gap);
    sp->gaps = (struct imap_mime_reading){.gap = sp->gap, .count = count};
    size_t hlen = usable ? imap_header_len(whole, (size_t)key.size) : 0;
    for (size_t k = 0; usable && k < f->section_count; k++) {
        size_t from, to;
        imap_section_range(&f->sections[k], whole, (size_t)key.size, hlen, flat, &sp->gaps,
                           k < IMAP_FETCH_LOCATED ? &located[k] : NULL, &from, &to);
        usable = !imap_mime_stand_in_meets(sp->cuts, count, from, to);
    }
    metrics_sections_read(usable);
    if (!usable) {
        for (size_t k = 0; k < IMAP_FETCH_LOCATED; k++) {
            located[k].rc = 1; /* located in the stand-in: not for the message read now */
        }
        if (whole != NULL) {
            imap_mime_stand_in_free(whole, key.size, sp->cuts, count);
        }
        return 0;
    }
    sp->count = count;
    *raw = whole;
    *len = (size_t)key.size;
    return 1;
}

/* 1 if items and f's sections would be header-only (imap_fetch_header_only) but for part
 * sections, each settled by the header of a message of one part (imap_mime.h, SECTIONS FROM
 * THE HEADER: a part's MIME header, a part that is not there); there is one at least. */
static int imap_fetch_header_parts(const struct imap_fetch *f, unsigned items)
{
    if ((items & (IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY | IMAP_FETCH_RFC822 |
                  IMAP_FETCH_RFC822_TEXT)) != 0) {
        return 0;
    }
    int parts = 0;
    for (size_t k = 0; k < f->section_count; k++) {
        const struct imap_fetch_section *sec = &f->sections[k];
        if (sec->part_count > 0) {
            if (!imap_mime_header_settles(sec->part, sec->part_count, imap_section_what(sec))) {
                return 0;
            }
            parts = 1;
        } else if (sec->kind != IMAP_SECTION_HEADER && sec->kind != IMAP_SECTION_HEADER_FIELDS &&
                   sec->kind != IMAP_SECTION_HEADER_FIELDS_NOT) {
            return 0;
        }
    }
    return parts;
}

/* For a FETCH of sections imap_fetch_header_parts() allows: message uid's header (the
 * window's, place, or read by UID) when it makes the message one part, so that its sections
 * are answered from the header alone. 1 with *raw and *len (the window's bytes when
 * *borrowed, else mv_free), 0 with nothing held (a multipart, a message/rfc822, a failed
 * read: then the message is read as before). */
static int imap_fetch_single_header(struct imap_ctx *x,
                                    const struct imap_header_window *headers,
                                    size_t place,
                                    uint32_t uid,
                                    void **raw,
                                    size_t *len,
                                    int *borrowed)
{
    const void *window_raw = NULL;
    void *own = NULL;
    size_t n = 0;
    int from_window = imap_header_window_get(headers, place, &window_raw, &n);
    if (!from_window &&
        mv_message_fetch_header(imap_db(x->s), x->s->view.mailbox, uid, &own, &n) != MV_OK) {
        mv_free(own);
        return 0;
    }
    const char *header = from_window ? window_raw : own;
    if (!imap_mime_single_part(header, n)) {
        mv_free(own);
        return 0;
    }
    metrics_headers_read(from_window);
    *raw = from_window ? (void *)window_raw : own;
    *len = n;
    *borrowed = from_window;
    return 1;
}

/* PREVIEWS FROM THE FIRST BYTES (issue 13). A client's preview (BODY.PEEK[TEXT]<0.512>,
 * BODY.PEEK[]<0.2048>, BODY.PEEK[1]<0.256>) or a part's MIME header needs the header and the
 * next few KiB; the store keeps a long body's first 4 KiB as a unit of their own
 * (mv_message_prefix_keyed), so such a FETCH unpacks that much instead of the whole body
 * (unpacking whole bodies was a third of a FETCH of 500 previews). The header comes from the
 * header window (read ahead for such FETCHes); partials of the message or its text lie at
 * offsets it tells; part sections are located by a walk over the first bytes alone, which
 * says whether its answer is the message's (imap_mime.h, A WALK OVER A PREFIX). Where the
 * header is not in the window, an answer is not sure from the first bytes, the message is
 * short or has parts stored apart, it is read as before. */

/* The body's first bytes the store keeps as a unit of their own when more than twice as
 * many follow the header (THE LEAD FRAME, src/store/store_blob.c). */
#define IMAP_FETCH_LEAD 4096u

/* 1 if f (beside items a header serves: ENVELOPE, RFC822.HEADER) asks only for what a
 * message's first bytes may answer: partials of the message or of its text, header sections,
 * part sections; at most IMAP_FETCH_LOCATED sections, each located before it is answered. */
static int imap_fetch_prefix_sections(const struct imap_fetch *f, unsigned items)
{
    if ((items & IMAP_FETCH_WHOLE_ITEMS) != 0 || f->section_count == 0 ||
        f->section_count > IMAP_FETCH_LOCATED) {
        return 0;
    }
    for (size_t k = 0; k < f->section_count; k++) {
        const struct imap_fetch_section *sec = &f->sections[k];
        if (sec->part_count == 0 && !sec->partial &&
            (sec->kind == IMAP_SECTION_ALL || sec->kind == IMAP_SECTION_TEXT)) {
            return 0;
        }
    }
    return 1;
}

/* How many of a message's first bytes (its header hlen bytes) f's sections answer from: the
 * header and every partial of the message or its text; with part sections, the lead too. */
static uint64_t imap_fetch_prefix_want(const struct imap_fetch *f, size_t hlen)
{
    uint64_t want = hlen;
    for (size_t k = 0; k < f->section_count; k++) {
        const struct imap_fetch_section *sec = &f->sections[k];
        uint64_t end = (uint64_t)hlen + IMAP_FETCH_LEAD; /* where a part is looked for */
        if (sec->part_count == 0 && sec->partial &&
            (sec->kind == IMAP_SECTION_ALL || sec->kind == IMAP_SECTION_TEXT)) {
            uint64_t at = sec->kind == IMAP_SECTION_ALL ? 0 : hlen;
            end = sec->start > UINT64_MAX - at ? UINT64_MAX : at + sec->start;
            end = sec->length > UINT64_MAX - end ? UINT64_MAX : end + sec->length;
        } else if (sec->part_count == 0) {
            end = hlen;
        }
        want = end > want ? end : want;
    }
    return want;
}

/* Message i's first bytes for a FETCH imap_fetch_prefix_sections() allows, with its header
 * from the window at place: 1 with *raw (mv_free; the first bytes only, though *len is the
 * message's size: every range f's sections answer from lies in them, and each part section
 * is in located already), *hlen; 0 with nothing held. */
static int imap_fetch_prefix(struct imap_ctx *x,
                             const struct imap_fetch *f,
                             const struct imap_header_window *headers,
                             size_t place,
                             size_t i,
                             struct imap_located located[IMAP_FETCH_LOCATED],
                             void **raw,
                             size_t *len,
                             size_t *hlen)
{
    const void *header = NULL;
    size_t header_len = 0;
    struct mv_message_key key;
    if (!imap_header_window_get(headers, place, &header, &header_len) ||
        !imap_view_key(&x->s->view, i, &key) || key.size > SIZE_MAX) {
        return 0;
    }
    int single = imap_mime_single_part(header, header_len);
    for (size_t k = 0; k < f->section_count; k++) {
        const struct imap_fetch_section *sec = &f->sections[k];
        if (sec->part_count > 0 &&
            ((single && !sec->partial &&
              !imap_mime_header_settles(sec->part, sec->part_count, imap_section_what(sec))) ||
             (!single && key.size > 2 * (uint64_t)IMAP_MIME_STRUCTURE_MAX))) {
            return 0; /* a one-part body whole, or a walk that may be flat */
        }
    }
    uint64_t want = imap_fetch_prefix_want(f, header_len);
    if (key.size - header_len <= 2 * IMAP_FETCH_LEAD || want > header_len + IMAP_FETCH_LEAD) {
        return 0; /* no lead frame, or beyond it: the skeleton's one read is as cheap */
    }
    void *got = NULL;
    size_t n = 0;
    if (mv_message_prefix_keyed(imap_db(x->s), x->s->view.mailbox, &key, (size_t)want,
                                imap_fetch_place_copy, &got, &n) != MV_OK ||
        n < want || n < header_len) {
        mv_free(got);
        return 0;
    }
    for (size_t k = 0; k < f->section_count; k++) {
        const struct imap_fetch_section *sec = &f->sections[k];
        if (sec->part_count == 0) {
            continue;
        }
        struct imap_mime_reading r = {.prefix = 0};
        if (n < key.size) {
            imap_mime_reading_prefix(&r, got, n);
        }
        located[k].rc = imap_mime_section_flat(got, n, 0, &r, sec->part, sec->part_count,
                                               imap_section_what(sec), &located[k].span);
        if (!imap_mime_reading_holds(&r, located[k].rc, &located[k].span, sec->partial, sec->start,
                                     sec->length)) {
            for (size_t j = 0; j <= k; j++) {
                located[j].rc = 1; /* not for the message read now */
            }
            mv_free(got);
            return 0;
        }
    }
    *raw = got;
    *len = (size_t)key.size;
    *hlen = header_len;
    return 1;
}

/* The whole message i as the literal of RFC822 or BODY[] (imap_fetch_whole_only). -1 (the
 * response back to mark) if its bytes are gone (expunged meanwhile) or unreadable. */
static int imap_fetch_placed(struct imap_ctx *x, const struct imap_fetch *f, size_t i, size_t mark)
{
    const struct imap_view *v = &x->s->view;
    const struct imap_msg *m = imap_view_msg(v, i);
    struct buf *out = x->out;
    if (f->section_count == 0) {
        buf_str(out, " RFC822 ");
    } else {
        buf_printf(out, " BODY[%.*s] ", (int)f->sections[0].spec_len, f->sections[0].spec);
    }
    size_t len = 0;
    struct mv_message_key key;
    int rc =
        imap_view_key(v, i, &key)
            ? mv_message_fetch_keyed_into(imap_db(x->s), v->mailbox, m->uid, &key, imap_fetch_place,
                                          out, &len)
            : mv_message_fetch_into(imap_db(x->s), v->mailbox, m->uid, imap_fetch_place, out, &len);
    if (rc != MV_OK) {
        out->len = mark < out->len ? mark : out->len;
        if (out->data != NULL) {
            out->data[out->len] = '\0';
        }
        return -1;
    }
    buf_literal_placed(out, len);
    return 0;
}

/* The key of message i's BODYSTRUCTURE (extensible 1) or BODY (0) answer in the store's
 * structure cache (imap_structure_cache.h). */
static struct imap_structure_key
imap_fetch_structure_key(struct imap_ctx *x, size_t i, int extensible)
{
    const struct imap_msg *m = imap_view_msg(&x->s->view, i);
    return (struct imap_structure_key){.uidvalidity = x->s->view.uidvalidity,
                                       .uid = m->uid,
                                       .body_key = m->body_key,
                                       .size = m->size,
                                       .extensible = extensible != 0,
                                       .utf8 = x->s->utf8_accept != 0};
}

/* Messages whose bodies are asked of the disk together, ahead of their reads: enough to
 * cover a chunk of ordinary messages, few enough that a client that disconnects midway
 * leaves little read for nothing. */
#define IMAP_FETCH_PREFETCH 64

/* The store's structure answers for the read-ahead window, st->idx[from..to)
 * (imap_fetch_structure_window): read with one statement per item, and answered from here.
 * They are not put in the structure cache: that put (a fresh allocation and hash entry each)
 * cost more than the read itself (30,000 answers after a restart: 66 ms, against Dovecot's 44
 * from its cache file), and the next FETCH reads them as fast from the store. */
struct imap_fetch_stored {
    size_t from, to; /* the window; from == to: none */
    unsigned asked;  /* items (BODYSTRUCTURE, BODY) asked of the store for the whole window */
    struct {
        size_t off;
        size_t len;
        int have;
    } slot[IMAP_FETCH_PREFETCH][2]; /* [message - from][extensible] */
    struct buf text;                /* the answers' bytes (wiped when freed: they quote mail) */
};

/* key's answer from the store's memos (this server or an earlier run made it, and the worker
 * saved it: worker_memo_save) appended to out: 1, or 0 if the store has none, or one another
 * format or GMime made (imap_mime_structure_tag). Any failure to read is a miss: the answer is
 * then made from the message. */
static int imap_fetch_structure_stored(struct imap_ctx *x,
                                       const struct imap_structure_key *key,
                                       struct buf *out)
{
    void *data = NULL;
    size_t len = 0;
    if (mv_message_memo_get(imap_db(x->s), key->uidvalidity, key->uid,
                            imap_structure_memo_slot(key), &data, &len) != MV_OK) {
        return 0;
    }
    unsigned char tag[IMAP_MIME_TAG_LEN];
    imap_mime_structure_tag(tag);
    int ours = len >= IMAP_MIME_TAG_LEN && memcmp(data, tag, IMAP_MIME_TAG_LEN) == 0;
    if (ours) {
        buf_add(out, (const char *)data + IMAP_MIME_TAG_LEN, len - IMAP_MIME_TAG_LEN);
    }
    mv_free(data);
    return ours && !out->oom;
}

/* 1 if the answers of every item of structure (BODYSTRUCTURE, BODY) of message st->idx[k] are
 * at hand: in the structure cache, or read from the store for the window (stored). */
static int imap_fetch_structure_kept(struct imap_ctx *x,
                                     const struct imap_fetch_stored *stored,
                                     size_t k,
                                     uint32_t i,
                                     unsigned structure)
{
    struct imap_structure_cache *c = x->s->store != NULL ? x->s->store->structure_cache : NULL;
    if (c == NULL) {
        return 0;
    }
    for (int extensible = 0; extensible <= 1; extensible++) {
        unsigned item = extensible ? IMAP_FETCH_BODYSTRUCTURE : IMAP_FETCH_BODY;
        if ((structure & item) == 0 || (k >= stored->from && k < stored->to &&
                                        stored->slot[k - stored->from][extensible].have)) {
            continue;
        }
        struct imap_structure_key key = imap_fetch_structure_key(x, i, extensible);
        if (!imap_structure_cache_has(c, &key)) {
            return 0;
        }
    }
    return 1;
}

/* BODYSTRUCTURE or BODY (item) of message i (st->idx[k]) into cached[extensible]: from the
 * store's structure cache, else from what the window read from the store (stored; NULL: no
 * window), else from the store's memos unless the window asked already: the item, if
 * found, or 0. */
static unsigned imap_fetch_structure_cached(struct imap_ctx *x,
                                            const struct imap_fetch_stored *stored,
                                            size_t k,
                                            size_t i,
                                            unsigned item,
                                            struct buf *cached)
{
    struct imap_structure_cache *c = x->s->store != NULL ? x->s->store->structure_cache : NULL;
    if (c == NULL) {
        return 0;
    }
    int extensible = item == IMAP_FETCH_BODYSTRUCTURE;
    struct imap_structure_key key = imap_fetch_structure_key(x, i, extensible);
    enum metric_structure result = METRIC_STRUCTURE_MISS;
    int in_window = stored != NULL && k >= stored->from && k < stored->to;
    if (imap_structure_cache_get(c, &key, cached)) {
        result = METRIC_STRUCTURE_HIT;
    } else if (in_window && stored->slot[k - stored->from][extensible].have) {
        buf_add(cached, stored->text.data + stored->slot[k - stored->from][extensible].off,
                stored->slot[k - stored->from][extensible].len);
        result = METRIC_STRUCTURE_STORED;
    } else if (!(in_window && (stored->asked & item) != 0) &&
               imap_fetch_structure_stored(x, &key, cached)) {
        result = METRIC_STRUCTURE_STORED;
    }
    if (result != METRIC_STRUCTURE_MISS && cached->oom) {
        buf_free(cached); /* the copy failed: answered from the message, as on a miss */
        result = METRIC_STRUCTURE_MISS;
    }
    metrics_structure_cache(result);
    return result != METRIC_STRUCTURE_MISS ? item : 0;
}

/* BODYSTRUCTURE (extensible) or BODY of message i: from cached if found there, else from
 * mime, and then kept in the store's structure cache for the next FETCH. */
static void imap_fetch_structure_out(
    struct imap_ctx *x, size_t i, int extensible, const struct buf *cached, struct imap_mime *mime)
{
    struct buf *out = x->out;
    buf_str(out, extensible ? " BODYSTRUCTURE " : " BODY ");
    if (mime == NULL) {
        buf_add(out, cached->data, cached->len);
        return;
    }
    size_t start = out->len;
    (void)imap_mime_bodystructure(mime, out, extensible); /* not a skeleton: never -1 */
    metrics_structure_made(0);
    if (!out->oom && x->s->store != NULL) {
        struct imap_structure_key key = imap_fetch_structure_key(x, i, extensible);
        imap_structure_cache_put(x->s->store->structure_cache, &key, out->data + start,
                                 out->len - start, 1);
        worker_structure_unsaved(); /* saved in the store's memos between jobs */
    }
}

/* The items of needs a FETCH answers from message i's skeleton: BODYSTRUCTURE and BODY when
 * nothing else of it needs more of the message than its header (ENVELOPE, header sections:
 * read after, header only, as without the structure items), or nothing at all. */
static unsigned imap_fetch_skeleton_items(const struct imap_fetch *f, unsigned needs)
{
    const unsigned structure = IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY;
    return imap_fetch_header_only(f, needs & ~structure) ? needs & structure : 0;
}

/* BODYSTRUCTURE and BODY (want: either or both) of message i made from its skeleton
 * (issue 13): the parts stored apart, 128 KiB or more each, were most of the bytes the first
 * FETCH BODYSTRUCTURE of a mailbox read, decrypted and had GMime scan, where only their sizes
 * and line counts go into the answer. Into answers[1] (BODYSTRUCTURE) and answers[0], and
 * kept in the structure cache as imap_fetch_structure_out() keeps what it makes. Returns want,
 * or 0 (nothing kept) when the skeleton cannot stand in for the message: no body key, parts
 * stored before the store counted their lines, a parse that does not account for every cut
 * (imap_mime_open_skeleton); then the message is read whole, as before. */
static unsigned
imap_fetch_structure_skeleton(struct imap_ctx *x, size_t i, unsigned want, struct buf answers[2])
{
    struct mv_message_key key;
    if (want == 0 || !imap_view_key(&x->s->view, i, &key)) {
        return 0;
    }
    struct mv_message_cut cuts[IMAP_FETCH_SKELETON_CUTS];
    void *raw = NULL;
    size_t len = 0, cut_count = 0;
    struct imap_mime *mime = NULL;
    int rc =
        mv_message_skeleton_keyed(imap_db(x->s), x->s->view.mailbox, &key, imap_fetch_place_copy,
                                  &raw, &len, cuts, IMAP_FETCH_SKELETON_CUTS, &cut_count);
    if (rc == MV_OK) {
        rc = imap_mime_open_skeleton(raw, len, (size_t)key.size, cuts, cut_count, &mime);
    }
    unsigned made = 0;
    for (int extensible = 1; rc == MV_OK && extensible >= 0; extensible--) {
        unsigned item = extensible ? IMAP_FETCH_BODYSTRUCTURE : IMAP_FETCH_BODY;
        if ((want & item) != 0) {
            imap_mime_set_utf8(mime, x->s->utf8_accept);
            rc = imap_mime_bodystructure(mime, &answers[extensible], extensible) == 0 &&
                         !answers[extensible].oom
                     ? MV_OK
                     : MV_ERROR;
            made |= rc == MV_OK ? item : 0;
        }
    }
    imap_mime_close(&mime);
    mv_free(raw);
    if (rc != MV_OK) {
        buf_free(&answers[0]);
        buf_free(&answers[1]);
        return 0;
    }
    for (int extensible = 1; extensible >= 0 && x->s->store != NULL; extensible--) {
        if ((made & (extensible ? IMAP_FETCH_BODYSTRUCTURE : IMAP_FETCH_BODY)) != 0) {
            struct imap_structure_key k = imap_fetch_structure_key(x, i, extensible);
            imap_structure_cache_put(x->s->store->structure_cache, &k, answers[extensible].data,
                                     answers[extensible].len, 1);
            worker_structure_unsaved();
            metrics_structure_made(1);
        }
    }
    return made;
}

/* One message's FETCH response: message i of the view, st->idx[place] of its FETCH, whose
 * read-ahead window's answers from the store are in stored. -1 if its bytes are gone
 * (expunged meanwhile). */
static int imap_fetch_one(struct imap_ctx *x,
                          const struct imap_fetch *f,
                          const struct imap_fetch_stored *stored,
                          const struct imap_header_window *headers,
                          size_t place,
                          size_t i,
                          int with_flags)
{
    const struct imap_msg *m = imap_view_msg(&x->s->view, i);
    unsigned items = f->items;
    void *raw = NULL;
    size_t len = 0, mark = x->out->len;
    struct imap_mime *mime = NULL;
    /* BODYSTRUCTURE and BODY kept from an earlier FETCH need neither the message nor GMime:
     * cached[1] and cached[0] hold them, and `needs` is items without them. */
    struct buf cached[2] = {{0}, {0}};
    unsigned found = 0;
    /* part sections located ahead (imap_fetch_sparse_copy), so not located twice */
    struct imap_located located[IMAP_FETCH_LOCATED];
    for (size_t k = 0; k < IMAP_FETCH_LOCATED; k++) {
        located[k].rc = 1;
    }
    struct imap_sparse sparse; /* raw is a stand-in when its count is > 0 */
    sparse.count = 0;
    int prefix = 0; /* raw holds the message's first bytes only (PREVIEWS ...), prefix_hlen */
    size_t prefix_hlen = 0;
    if ((items & IMAP_FETCH_BODYSTRUCTURE) != 0) {
        found |=
            imap_fetch_structure_cached(x, stored, place, i, IMAP_FETCH_BODYSTRUCTURE, &cached[1]);
    }
    if ((items & IMAP_FETCH_BODY) != 0) {
        found |= imap_fetch_structure_cached(x, stored, place, i, IMAP_FETCH_BODY, &cached[0]);
    }
    unsigned needs = items & ~found;
    found |= imap_fetch_structure_skeleton(x, i, imap_fetch_skeleton_items(f, needs), cached);
    needs = items & ~found;
    int need_mime =
        (needs & (IMAP_FETCH_ENVELOPE | IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY)) != 0;
    int whole_only = imap_fetch_whole_only(f, needs);
    int header_only = 0; /* raw is exactly the header (mv_message_fetch_header's contract) */
    int borrowed = 0;    /* raw is the header window's (imap_fetch_headers.h), not freed here */
    if (!whole_only &&
        (need_mime || f->section_count > 0 ||
         (needs & (IMAP_FETCH_RFC822 | IMAP_FETCH_RFC822_HEADER | IMAP_FETCH_RFC822_TEXT)) != 0)) {
        header_only = imap_fetch_header_only(f, needs);
        const void *window_raw = NULL; /* the header the window read ahead (not ours to free) */
        borrowed = header_only && imap_header_window_get(headers, place, &window_raw, &len);
        raw = (void *)window_raw;
        int single = 0; /* raw is the header of a message of one part, read here */
        if (header_only) {
            metrics_headers_read(borrowed);
        } else if (imap_fetch_header_parts(f, needs) &&
                   imap_fetch_single_header(x, headers, place, m->uid, &raw, &len, &borrowed)) {
            single = header_only = 1; /* its sections settled by the header */
            metrics_sections_from_header();
        } else if (imap_fetch_prefix_sections(f, needs) &&
                   imap_fetch_prefix(x, f, headers, place, i, located, &raw, &len, &prefix_hlen)) {
            prefix = 1;
            metrics_sections_prefix();
        }
        int rc = borrowed || single || prefix ? MV_OK
                 : header_only ? mv_message_fetch_header(imap_db(x->s), x->s->view.mailbox, m->uid,
                                                         &raw, &len)
                 : imap_fetch_sparse_copy(x, f, needs, i, located, &sparse, &raw, &len)
                     ? MV_OK
                     : imap_fetch_whole_copy(x, i, &raw, &len);
        if (rc == MV_OK && need_mime) {
            /* ENVELOPE alone reads a plain header's fields without GMime's message (raw
             * stays until after imap_mime_close()); BODYSTRUCTURE or BODY alone parses the
             * top part without the message's address fields */
            int structure = (needs & (IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY)) != 0;
            rc = prefix       ? imap_mime_open_envelope(raw, prefix_hlen, &mime) /* bytes held */
                 : !structure ? imap_mime_open_envelope(raw, len, &mime)
                 : (needs & IMAP_FETCH_ENVELOPE) == 0 ? imap_mime_open_structure(raw, len, &mime)
                                                      : imap_mime_open(raw, len, &mime);
            if (rc == MV_OK) {
                imap_mime_set_utf8(mime, x->s->utf8_accept);
            }
        }
        if (rc != MV_OK) {
            if (!borrowed) {
                imap_fetch_raw_free(raw, len, &sparse);
            }
            buf_free(&cached[0]);
            buf_free(&cached[1]);
            return -1;
        }
    }
    struct buf *out = x->out;
    /* Written piece by piece, without printf: a FETCH 1:* of the flags, sizes or dates is
     * this per message and little else (buf.h, buf_u64). */
    BUF_LIT(out, "* ");
    buf_u64(out, i + 1);
    BUF_LIT(out, " FETCH (UID ");
    buf_u64(out, m->uid);
    if ((items & IMAP_FETCH_FLAGS) != 0 || with_flags) {
        BUF_LIT(out, " FLAGS ");
        int recent = (imap_view_marks(&x->s->view, i) & IMAP_MARK_RECENT) != 0;
        imap_flags_out(out, m->flags | (recent ? IMAP_FLAG_RECENT : 0), m->keywords);
    }
    if ((items & IMAP_FETCH_INTERNALDATE) != 0) {
        BUF_LIT(out, " INTERNALDATE ");
        buf_imap_date(out, m->internal_date);
    }
    if ((items & IMAP_FETCH_RFC822_SIZE) != 0) {
        BUF_LIT(out, " RFC822.SIZE ");
        buf_u64(out, m->size);
    }
    if ((items & IMAP_FETCH_MODSEQ) != 0 || (with_flags && x->s->condstore)) {
        BUF_LIT(out, " MODSEQ (");
        buf_u64(out, m->modseq);
        BUF_LIT(out, ")");
    }
    if ((items & IMAP_FETCH_ENVELOPE) != 0) {
        buf_str(out, " ENVELOPE ");
        imap_mime_envelope(mime, out);
    }
    for (int extensible = 1; extensible >= 0; extensible--) {
        unsigned item = extensible ? IMAP_FETCH_BODYSTRUCTURE : IMAP_FETCH_BODY;
        if ((items & item) != 0) {
            imap_fetch_structure_out(x, i, extensible, &cached[extensible],
                                     (found & item) != 0 ? NULL : mime);
        }
        buf_free(&cached[extensible]);
    }
    if (whole_only) {
        if (imap_fetch_placed(x, f, i, mark) != 0) {
            return -1;
        }
        buf_str(out, ")\r\n");
        return 0;
    }
    /* Where the header ends: found once, and not looked for in a header-only read, whose
     * bytes the store has already checked to be exactly the header (a header listing
     * scanned each header three times: 7% of its instructions). */
    size_t hlen = raw == NULL   ? 0
                  : prefix      ? prefix_hlen /* raw holds the first bytes alone */
                  : header_only ? len
                                : imap_header_len(raw, len);
    if ((items & IMAP_FETCH_RFC822_HEADER) != 0) {
        buf_str(out, " RFC822.HEADER ");
        imap_literal(out, raw, hlen, NULL);
    }
    if ((items & IMAP_FETCH_RFC822_TEXT) != 0) {
        buf_str(out, " RFC822.TEXT ");
        imap_literal(out, (const char *)raw + hlen, len - hlen, NULL);
    }
    if ((items & IMAP_FETCH_RFC822) != 0) {
        buf_str(out, " RFC822 ");
        imap_literal(out, raw, len, NULL);
    }
    for (size_t k = 0; k < f->section_count; k++) {
        buf_str(out, " ");
        imap_section_out(out, &f->sections[k], raw, len, hlen,
                         sparse.count > 0 ? &sparse.gaps : NULL,
                         k < IMAP_FETCH_LOCATED ? &located[k] : NULL);
    }
    buf_str(out, ")\r\n");
    imap_mime_close(&mime);
    if (!borrowed) {
        imap_fetch_raw_free(raw, len, &sparse);
    }
    return 0;
}

static int imap_fetch_sets_seen(const struct imap_fetch *f)
{
    if ((f->items & (IMAP_FETCH_RFC822 | IMAP_FETCH_RFC822_TEXT)) != 0) {
        return 1;
    }
    for (size_t k = 0; k < f->section_count; k++) {
        if (!f->sections[k].peek) {
            return 1;
        }
    }
    return 0;
}

/* Sets \Seen on the unseen messages among idx; marks them for FLAGS in the response. */
static int
imap_fetch_mark_seen(struct imap_ctx *x, const uint32_t *idx, size_t count, unsigned char *mark)
{
    struct imap_view *v = &x->s->view;
    uint32_t *unseen = malloc((count + 1) * sizeof *unseen);
    size_t n = 0;
    if (unseen == NULL) {
        return MV_ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        if ((imap_view_msg(v, idx[i])->flags & MV_FLAG_SEEN) == 0 &&
            (imap_view_marks(v, idx[i]) & IMAP_MARK_EXPUNGED) == 0) {
            unseen[n++] = idx[i];
        }
    }
    int rc = MV_OK;
    if (n > 0) {
        struct mv_uid_range *ranges = NULL;
        size_t nranges = 0;
        rc = imap_view_uid_ranges(v, unseen, n, &ranges, &nranges) == 0
                 ? mv_flags_set_ranges(imap_db(x->s), v->mailbox, ranges, nranges, MV_FLAGS_ADD,
                                       MV_FLAG_SEEN, NULL, MV_UNCHANGEDSINCE_NONE, NULL, NULL, NULL)
                 : MV_ENOMEM;
        free(ranges);
        for (size_t i = 0; rc == MV_OK && i < n; i++) {
            mark[unseen[i]] = 1;
            imap_view_mark(v, unseen[i], IMAP_MARK_QUIET); /* the sync must not announce it */
            v->reported_any = 1;
        }
    }
    free(unseen);
    return rc;
}

/* The FETCH modifiers (RFC 7162): (CHANGEDSINCE n) and, for UID FETCH once QRESYNC is
 * enabled, VANISHED with it, in either order. 0, or -1 with BAD written. */
static int imap_fetch_modifiers(struct imap_ctx *x,
                                const struct imap_node *mod,
                                uint64_t *changed_since,
                                int *vanished)
{
    const struct imap_node *n = mod->type == IMAP_NODE_LIST ? imap_node(x->cmd, mod->child) : NULL;
    int have_since = 0;
    for (; n != NULL; n = imap_node(x->cmd, n->next)) {
        if (imap_atom_is(n, "VANISHED") && !*vanished) {
            *vanished = 1;
            continue;
        }
        const struct imap_node *value = imap_node(x->cmd, n->next);
        if (!imap_atom_is(n, "CHANGEDSINCE") || have_since || value == NULL ||
            imap_number(value, INT64_MAX, changed_since) != 0) {
            imap_tagged(x, "BAD", "the FETCH modifiers are (CHANGEDSINCE mod-sequence [VANISHED])");
            return -1;
        }
        have_since = 1;
        n = value;
    }
    if (!have_since) {
        imap_tagged(x, "BAD", "the FETCH modifiers are (CHANGEDSINCE mod-sequence [VANISHED])");
        return -1;
    }
    if (*vanished && (!x->cmd->uid || !x->s->qresync)) {
        imap_tagged(x, "BAD", "VANISHED needs UID FETCH and ENABLE QRESYNC");
        return -1;
    }
    x->s->condstore = 1;
    return 0;
}

/* A FETCH between two chunks of its response (see IMPLEMENTATION NOTES). */
struct imap_fetch_state {
    struct imap_fetch *f; /* its sections, and their names, allocated once at parse time */
    struct imap_seqset *set;
    uint32_t *idx;       /* the messages, as view indexes */
    unsigned char *mark; /* per view index: FLAGS go with it (\Seen just set) */
    size_t count;
    size_t next; /* idx[next] is the next message to answer */
    uint64_t changed_since;
    size_t prefetched; /* idx[..prefetched) had their bodies asked for (imap_fetch_prefetch) */
    struct imap_fetch_stored stored;   /* the store's answers for the read-ahead window */
    struct imap_header_window headers; /* a header-only FETCH's headers read ahead */
};

void imap_fetch_state_free(struct imap_fetch_state **st)
{
    if (st == NULL || *st == NULL) {
        return;
    }
    free((*st)->mark);
    free((*st)->idx);
    buf_free(&(*st)->stored.text);
    imap_header_window_free(&(*st)->headers);
    if ((*st)->set != NULL) {
        imap_seqset_free((*st)->set);
    }
    free((*st)->set);
    if ((*st)->f != NULL) {
        imap_fetch_free((*st)->f);
    }
    free((*st)->f);
    free(*st);
    *st = NULL;
}

/* Direct sending: the response so far, once it holds at least min bytes, goes to the socket
 * from here when the loop granted it (s->direct_fd, imap_direct_grant) and the socket takes
 * all of it at once; else it stays in x->out for the loop, and the job writes nothing more
 * itself (direct_off), so the bytes stay in order. min is at least 1: nothing is sent empty. */
static void imap_fetch_direct(struct imap_ctx *x, size_t min)
{
    struct imap_session *s = x->s;
    struct buf *out = x->out;
    if (s->direct_fd < 0 || s->direct_off || out->oom || out->len < min) {
        return;
    }
    ssize_t n = send(s->direct_fd, out->data, out->len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
        s->direct_sent += (uint64_t)n;
        buf_consume(out, (size_t)n);
    }
    if (out->len != 0) {
        s->direct_off = 1; /* full, or an error the loop's own write then reports */
    }
}

/* 1 if items (of f) and f's sections read each message's whole bytes (imap_fetch_one: a
 * literal of the whole message, or a copy of it for sections, BODYSTRUCTURE and the rest),
 * not the header alone nor none. */
static int imap_fetch_reads_bodies(const struct imap_fetch *f, unsigned items)
{
    if (imap_fetch_whole_only(f, items)) {
        return 1;
    }
    int needs =
        (items & (IMAP_FETCH_ENVELOPE | IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY |
                  IMAP_FETCH_RFC822 | IMAP_FETCH_RFC822_HEADER | IMAP_FETCH_RFC822_TEXT)) != 0 ||
        f->section_count > 0;
    return needs && !imap_fetch_header_only(f, items);
}

/* What the window's reads' got() need: the window's messages that the structure cache lacks,
 * by UID, with their body keys. */
struct imap_fetch_window {
    struct imap_fetch_stored *stored;
    int extensible;
    size_t n;
    uint32_t uids[IMAP_FETCH_PREFETCH];              /* ascending */
    uint32_t k[IMAP_FETCH_PREFETCH];                 /* uids[j]'s place in the window */
    struct mv_message_key keys[IMAP_FETCH_PREFETCH]; /* the messages' body keys, by place */
    unsigned char tag[IMAP_MIME_TAG_LEN];
};

/* Keeps one answer for the window's message k (its tag already taken off). */
static void imap_fetch_stored_add(
    struct imap_fetch_stored *stored, size_t k, int extensible, const void *data, size_t len)
{
    size_t off = stored->text.len;
    buf_add(&stored->text, data, len);
    if (!stored->text.oom) {
        stored->slot[k][extensible].off = off;
        stored->slot[k][extensible].len = len;
        stored->slot[k][extensible].have = 1;
    }
}

/* mv_message_memos_range's got(): a memo of one of the window's messages, kept if its tag is
 * this server's (imap_fetch_structure_stored); others are passed over. */
static int imap_fetch_window_got(void *arg, uint32_t uid, const void *data, size_t len)
{
    struct imap_fetch_window *wd = arg;
    size_t lo = 0, hi = wd->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (wd->uids[mid] < uid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo < wd->n && wd->uids[lo] == uid && len >= IMAP_MIME_TAG_LEN &&
        memcmp(data, wd->tag, IMAP_MIME_TAG_LEN) == 0) {
        imap_fetch_stored_add(wd->stored, wd->k[lo], wd->extensible,
                              (const char *)data + IMAP_MIME_TAG_LEN, len - IMAP_MIME_TAG_LEN);
    }
    return MV_OK;
}

/* mv_message_memos_keyed's got(): the memo of the message with key keys[j], kept as
 * imap_fetch_window_got keeps one. */
static int imap_fetch_window_keyed(void *arg, size_t j, const void *data, size_t len)
{
    struct imap_fetch_window *wd = arg;
    if (j < wd->n && len >= IMAP_MIME_TAG_LEN && memcmp(data, wd->tag, IMAP_MIME_TAG_LEN) == 0) {
        imap_fetch_stored_add(wd->stored, wd->k[j], wd->extensible,
                              (const char *)data + IMAP_MIME_TAG_LEN, len - IMAP_MIME_TAG_LEN);
    }
    return MV_OK;
}

/* Before the read-ahead looks at st->idx[from..to) (at most IMAP_FETCH_PREFETCH): the
 * structure answers (items of structure) the cache lacks, asked of the store's memos for the
 * whole window into st->stored, one statement per item instead of a lookup a message (3,000
 * answers after a restart: ~8 ms of lookups, more than Dovecot's whole FETCH from its cache
 * file): by the view's body keys (mv_message_memos_keyed), or, once the mailbox changed since
 * the view's sync, by the UIDs' range when they lie close together (mv_message_memos_range).
 * The messages an answered ask found nothing for are not asked again; when neither could
 * ask, each message is looked up when it is answered. */
static void imap_fetch_structure_window(
    struct imap_ctx *x, struct imap_fetch_state *st, size_t from, size_t to, unsigned structure)
{
    struct imap_fetch_stored *stored = &st->stored;
    stored->from = stored->to = from;
    stored->asked = 0;
    stored->text.len = 0;
    memset(stored->slot, 0, sizeof stored->slot);
    struct imap_structure_cache *c = x->s->store != NULL ? x->s->store->structure_cache : NULL;
    if (c == NULL) {
        return;
    }
    stored->to = to;
    const struct imap_view *v = &x->s->view;
    struct imap_fetch_window wd = {.stored = stored};
    imap_mime_structure_tag(wd.tag);
    for (wd.extensible = 0; wd.extensible <= 1; wd.extensible++) {
        unsigned item = wd.extensible ? IMAP_FETCH_BODYSTRUCTURE : IMAP_FETCH_BODY;
        if ((structure & item) == 0) {
            continue;
        }
        wd.n = 0;
        for (size_t i = from; i < to; i++) {
            uint32_t at = st->idx[i];
            struct imap_structure_key key = imap_fetch_structure_key(x, at, wd.extensible);
            if ((imap_view_marks(v, at) & IMAP_MARK_EXPUNGED) != 0 ||
                imap_structure_cache_has(c, &key)) {
                continue;
            }
            size_t j = wd.n++; /* insertion into UID order (a FETCH's order is the client's) */
            while (j > 0 && wd.uids[j - 1] > key.uid) {
                wd.uids[j] = wd.uids[j - 1];
                wd.k[j] = wd.k[j - 1];
                j--;
            }
            wd.uids[j] = key.uid;
            wd.k[j] = (uint32_t)(i - from);
        }
        if (wd.n == 0) {
            continue;
        }
        struct imap_structure_key first =
            imap_fetch_structure_key(x, st->idx[from + wd.k[0]], wd.extensible);
        uint32_t slot = imap_structure_memo_slot(&first);
        /* by the view's body keys while the mailbox is as the view saw it (the memos' rows
         * read in one scan, no UID index), else by UID when the UIDs lie close together */
        int keyed = 1;
        for (size_t j = 0; keyed && j < wd.n; j++) {
            keyed = imap_view_key(v, st->idx[from + wd.k[j]], &wd.keys[j]);
        }
        int rc = keyed ? mv_message_memos_keyed(imap_db(x->s), v->mailbox, wd.keys, wd.n, slot,
                                                imap_fetch_window_keyed, &wd)
                       : MV_ENOTFOUND;
        if (rc != MV_OK && wd.uids[wd.n - 1] - wd.uids[0] < 4 * (uint32_t)wd.n + 64) {
            /* (what a keyed read that failed midway kept is right: the range adds it again) */
            rc = mv_message_memos_range(imap_db(x->s), v->uidvalidity, wd.uids[0],
                                        wd.uids[wd.n - 1], slot, imap_fetch_window_got, &wd);
        }
        if (rc == MV_OK) {
            stored->asked |= item; /* what it did not find, the store does not have */
        }
    }
}

/* Before message st->next is answered: if the bodies from it on have not been asked for,
 * asks for the next IMAP_FETCH_PREFETCH of them at once (mv_message_prefetch_keyed), so a
 * mailbox whose file is not in the page cache waits for the disk about once for them, not
 * once each (issue 13: UID FETCH of 50 random whole messages from an evicted file). */
static void imap_fetch_prefetch(struct imap_ctx *x, struct imap_fetch_state *st, mv_store *store)
{
    if (st->next < st->prefetched || !imap_fetch_reads_bodies(st->f, st->f->items)) {
        return;
    }
    /* the bodies are read only for BODYSTRUCTURE or BODY: not those of messages whose
     * answers are kept (a FETCH that finds them all asks the disk for nothing) */
    unsigned structure = st->f->items & (IMAP_FETCH_BODYSTRUCTURE | IMAP_FETCH_BODY);
    int for_structure =
        structure != 0 && !imap_fetch_reads_bodies(st->f, st->f->items & ~structure);
    const struct imap_view *v = &x->s->view;
    struct mv_message_key keys[IMAP_FETCH_PREFETCH];
    size_t n = 0, i = st->next, end = st->count;
    if (for_structure) { /* one window at a time: what it read from the store is answered next */
        end = i + IMAP_FETCH_PREFETCH < st->count ? i + IMAP_FETCH_PREFETCH : st->count;
        imap_fetch_structure_window(x, st, i, end, structure);
    }
    for (; i < end && n < IMAP_FETCH_PREFETCH; i++) {
        uint32_t at = st->idx[i];
        if (for_structure && imap_fetch_structure_kept(x, &st->stored, i, at, structure)) {
            continue;
        }
        if (imap_view_msg(v, at)->modseq > st->changed_since && imap_view_key(v, at, &keys[n])) {
            n++;
        }
    }
    st->prefetched = i;
    if (n > 1 && ((for_structure && imap_fetch_skeleton_items(st->f, st->f->items) != 0) ||
                  imap_fetch_sparse_likely(st->f))) {
        /* imap_fetch_structure_skeleton, imap_fetch_sparse_copy */
        (void)mv_message_prefetch_skeletons(store, keys, n);
    } else if (n > 1) { /* one message alone: its own reads are as soon */
        (void)mv_message_prefetch_keyed(store, keys, n);
    }
}

/* Before message st->next is answered, for a FETCH that reads only headers (a client's
 * message list): if the header window does not cover it, the headers of the next
 * IMAP_HEADER_WINDOW messages to answer are read at once by their body keys
 * (imap_fetch_headers.h); messages without a usable key are read by UID when answered. */
static void imap_fetch_headers_ahead(struct imap_ctx *x, struct imap_fetch_state *st)
{
    const struct imap_fetch *f = st->f;
    if (st->next < st->headers.to ||
        (!imap_fetch_header_only(f, f->items) && !imap_fetch_header_parts(f, f->items) &&
         !imap_fetch_prefix_sections(f, f->items)) ||
        ((f->items & (IMAP_FETCH_ENVELOPE | IMAP_FETCH_RFC822_HEADER)) == 0 &&
         f->section_count == 0)) {
        return;
    }
    const struct imap_view *v = &x->s->view;
    struct mv_message_key keys[IMAP_HEADER_WINDOW];
    uint32_t at[IMAP_HEADER_WINDOW];
    size_t n = 0, from = st->next;
    size_t to = st->count - from > IMAP_HEADER_WINDOW ? from + IMAP_HEADER_WINDOW : st->count;
    for (size_t k = from; k < to; k++) {
        uint32_t i = st->idx[k];
        if (imap_view_msg(v, i)->modseq > st->changed_since && imap_view_key(v, i, &keys[n])) {
            at[n++] = (uint32_t)k;
        }
    }
    imap_header_window_fill(&st->headers, imap_db(x->s), v->mailbox, keys, at, n, from, to);
}

/* Answers messages from st->next on until the job's output holds IMAP_FETCH_CHUNK bytes
 * (then x->s->fetch_more = st: the loop posts the job again once the client has read most
 * of it), or to the end (then the tagged response, and st is freed). */
static void imap_fetch_produce(struct imap_ctx *x, struct imap_fetch_state *st)
{
    struct imap_view *v = &x->s->view;
    mv_store *store = imap_db(x->s);
    /* One read transaction for the chunk instead of one per message (each costs WAL-index
     * file locks); ended before the chunk goes out, so no reader is held while a slow client
     * reads (the job's own writes never wait for the client: they stop at a full socket).
     * Without it (MV_EINVAL cannot happen here) each read simply has its own. */
    if (mv_store_read_begin(store) != MV_OK) {
        /* nothing lost: each read then has a transaction of its own */
    }
    for (; st->next < st->count; st->next++) {
        /* a job that writes to the socket itself goes on for more (no hand-over to the
         * loop), but not forever: other sessions' reads wait for the reader thread */
        size_t limit = x->s->direct_fd >= 0 && !x->s->direct_off ? IMAP_FETCH_DIRECT_JOB_MAX
                                                                 : IMAP_FETCH_CHUNK;
        if (x->out->len + x->s->direct_sent >= limit || x->out->oom) {
            mv_store_read_end(store); /* nothing if none was begun */
            x->s->fetch_more = st;
            return;
        }
        imap_fetch_prefetch(x, st, store);
        imap_fetch_headers_ahead(x, st);
        uint32_t i = st->idx[st->next];
        if ((imap_view_marks(v, i) & IMAP_MARK_EXPUNGED) == 0 &&
            imap_view_msg(v, i)->modseq > st->changed_since) {
            (void)imap_fetch_one(x, st->f, &st->stored, &st->headers, st->next, i, st->mark[i]);
            imap_fetch_direct(x, IMAP_FETCH_DIRECT_MIN);
        }
    }
    mv_store_read_end(store);
    imap_view_reported_clear(v);
    if (x->cmd->uid) {
        (void)imap_view_sync(x->s, x->out, 1);
    }
    imap_tagged(x, "OK", "FETCH completed");
    /* The rest, the tagged line with it, goes out from here too: left to the loop, the
     * client's answer waited for the loop thread to wake after the job (on an idle machine
     * ~0.1-1 ms here; issue 13: after an idle moment a FETCH of 50 messages cost ~1 ms
     * more). One send either way. */
    imap_fetch_direct(x, 1);
    imap_fetch_state_free(&st);
}

void imap_fetch_continue(struct imap_ctx *x)
{
    struct imap_fetch_state *st = x->s->fetch_more;
    x->s->fetch_more = NULL;
    imap_fetch_produce(x, st);
}

void imap_cmd_fetch(struct imap_ctx *x)
{
    struct imap_view *v = &x->s->view;
    char err[160];
    uint64_t changed_since = 0; /* CONDSTORE: (CHANGEDSINCE n); 0: none */
    const struct imap_node *mod = imap_arg(x->cmd, 2);
    if (imap_arg_count(x->cmd) < 2 || imap_arg_count(x->cmd) > 3) {
        imap_tagged(x, "BAD", "FETCH takes a set, attributes and optional modifiers");
        return;
    }
    int vanished = 0; /* QRESYNC: (CHANGEDSINCE n VANISHED) */
    if (mod != NULL && imap_fetch_modifiers(x, mod, &changed_since, &vanished) != 0) {
        return;
    }
    struct imap_fetch_state *st = calloc(1, sizeof *st);
    struct imap_fetch *f = calloc(1, sizeof *f);      /* all zero: nothing to free yet */
    struct imap_seqset *set = calloc(1, sizeof *set); /* likewise */
    const struct imap_node *set_node = imap_arg(x->cmd, 0);
    int parsed = -1;
    if (st != NULL) {
        st->f = f;
        st->set = set;
        st->changed_since = changed_since;
    }
    if (st == NULL || f == NULL || set == NULL) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
    } else if (set_node->type != IMAP_NODE_ATOM ||
               (parsed = imap_parse_seqset(set_node->data, set_node->len, set)) != 0) {
        if (parsed == -2) {
            imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        } else {
            imap_tagged(x, "BAD", "bad sequence set");
        }
    } else if ((parsed = imap_parse_fetch(x->cmd, imap_arg(x->cmd, 1), f, err, sizeof err)) != 0) {
        if (parsed == -2) {
            imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        } else {
            imap_tagged(x, "BAD", "%s", err);
        }
    } else {
        if (mod != NULL || (f->items & IMAP_FETCH_MODSEQ) != 0) {
            f->items |= IMAP_FETCH_MODSEQ;
            x->s->condstore = 1;
        }
        int rc = imap_view_resolve(v, set, x->cmd->uid, &st->idx, &st->count);
        st->mark = calloc(v->count + 1, 1);
        if (rc == -1) {
            imap_tagged(x, "BAD", "no such message sequence number");
        } else if (rc != 0 || st->mark == NULL) {
            imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        } else {
            imap_view_reported_clear(v);
            rc = !v->readonly && imap_fetch_sets_seen(f)
                     ? imap_fetch_mark_seen(x, st->idx, st->count, st->mark)
                     : MV_OK;
            if (rc == MV_OK && vanished) {
                /* RFC 7162 3.2.6: before any FETCH, also the sync's unsolicited ones. */
                rc = imap_qresync_vanished(x->s, x->out, changed_since, set);
            }
            if (rc == MV_OK) {
                /* Picks up the \Seen just set (quietly) before the responses use the flags;
                 * no EXPUNGE during FETCH (RFC 3501 7.4.1), so indexes stay valid. */
                rc = imap_view_sync(x->s, x->out, 0);
            }
            if (rc == MV_OK) {
                imap_fetch_produce(x, st); /* takes st */
                return;
            }
            imap_view_reported_clear(v);
            imap_tagged_store_error(x, rc, "FETCH");
        }
    }
    if (st == NULL) {
        free(set);
        free(f);
    }
    imap_fetch_state_free(&st);
}
