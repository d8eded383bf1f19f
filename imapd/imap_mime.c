/*
 * imap_mime.c -- the MIME side of FETCH: ENVELOPE, BODYSTRUCTURE / BODY, and the content of
 * leaf parts (BODY[1.2]) and their MIME headers (BODY[1.2.MIME]), with GMime 3.
 *
 * USAGE
 *   struct imap_mime *m; imap_mime_open(raw, len, &m);   (MV_OK or MV_ENOMEM)
 *   imap_mime_envelope(m, out); imap_mime_bodystructure(m, out, 1);
 *   imap_mime_close(&m);
 *   imap_mime_section(raw, len, part, count, IMAP_MIME_CONTENT, &span)  (0, or -1: no such
 *   part); the section is raw + span.offset, span.length bytes.
 *
 * IMPLEMENTATION NOTES
 *   - GMime parses a copy of the message with a persistent stream, so each leaf part's
 *     content is a substream of the original bytes: sizes and line counts are the part's
 *     encoded octets exactly as stored.
 *   - Sections of parts are found without GMime's objects, by walking the raw bytes: a
 *     part's header ends at its first empty line (CRLF or bare LF); a multipart's part k
 *     runs from the end of the k-th delimiter line ("--boundary" plus padding) to the line
 *     break before the next one (the break belongs to the delimiter, RFC 2046 5.1.1), or to
 *     the end of the enclosing entity when the close delimiter is missing. Only GMime's
 *     Content-Type parser is used, so the numbering agrees with BODYSTRUCTURE. BODY[n.MIME]
 *     is the part's header bytes as stored (with the empty line), not a re-serialisation.
 *   - GMime allocates about 1.3 KB per part and 0.5 KB per header field it builds (measured
 *     for the store, see src/store/store_parse.c), so a message with more than
 *     IMAP_MIME_STRUCTURE_MAX lines that could open a part or a field is described as one
 *     text/plain part instead of being handed to GMime; nesting stops at IMAP_MIME_DEPTH_MAX.
 *     The bound is what the store itself parses at delivery (50,000 such lines in the body,
 *     header_count_max 10,000 fields in the header): it was 10,000 in all, so a message of
 *     5,000 attachments the store had indexed (Dovecot describes up to 10,000 parts) was one
 *     text part here. 10,000 parts: ~160-250 ms and ~60 MB held while it is described.
 *   - ENVELOPE strings are the raw header values, unfolded (encoded-words left for the
 *     client, as RFC 3501 wants); a display name GMime had to decode from 8-bit is sent
 *     re-encoded as an RFC 2047 word. Sender and Reply-To default to From.
 *   - ENVELOPE alone (a client's message list) does not build a GMimeMessage when the
 *     header is plain (imap_mime_header_plain: every line a "name:" field with a printable
 *     ASCII name, or a continuation): the ten fields' raw values are found by a scan of the
 *     stored header bytes, and only the address fields go through GMime's address parser.
 *     Building and freeing the message was 56% of "UID FETCH last 200 (... ENVELOPE)" at
 *     100,000 messages (issue 13). On a plain header GMime yields the same first field of
 *     each name with the same raw value, so the answer is the same (tests/test_imap_mime.c
 *     compares both ways); any other header takes the GMime path as before.
 *   - 8-bit strings (raw UTF-8 header values, RFC 6532; parameter values GMime decoded) go
 *     out as literals, never raw in a quoted string (RFC 6855 3), unless the session enabled
 *     UTF8=ACCEPT (imap_mime_set_utf8): then valid UTF-8 is quoted as it is, display names
 *     included (no RFC 2047 re-encoding), and only other 8-bit bytes stay literals.
 *
 * LIMITATIONS
 *   The size and lines of a message/rfc822 part in BODYSTRUCTURE are those of its bytes as
 *   stored (BODY[n]'s length), found by the same raw walk as sections; only where that walk
 *   and GMime disagree on the structure (broken MIME) do they fall back to GMime's
 *   re-serialisation of the part. A part
 *   section costs a scan of the enclosing entities per level (fine for the 8 levels the
 *   parser allows).
 */
#include "imap_mime.h"
#include "buf.h"
#include "mailvault.h"

#include <gmime/gmime.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IMAP_MIME_DEPTH_MAX 32

struct imap_mime {
    GMimeMessage *message; /* NULL: not MIME-parsable, described as one text part */
    GMimeObject *top;      /* imap_mime_open_structure: the top part, parsed without the
                              message (message stays NULL); NULL as message is */
    const char *hdr;       /* imap_mime_open_envelope on a plain header: its bytes (the
                              caller's), used instead of message; else NULL */
    size_t hdr_len;
    GMimeStream *stream; /* GMime's copy of the message (with message) */
    const char *raw;     /* its bytes: the raw message, for exact part sizes */
    size_t size;
    size_t body_size; /* of the fallback single part */
    size_t body_lines;
    int utf8; /* imap_mime_set_utf8(): UTF-8 strings go out quoted, display names undecoded */
    int gmime_addresses; /* imap_mime_set_gmime_addresses(): no imap_mime_addresses_simple() */
    struct mv_message_cut *cuts; /* imap_mime_open_skeleton: the parts raw is without, at
                                    offsets of raw as GMime has it (less shift) */
    size_t cut_count;
    size_t shift; /* bytes of the top header GMime was not given (imap_mime_content_fields) */
};

/* What a BODYSTRUCTURE walk carries down: the session's UTF-8 setting and, for a skeleton,
 * its cuts and which of them a leaf part stood in for. */
struct imap_mime_walk {
    int utf8;
    const char *raw; /* the skeleton */
    size_t len;
    const struct mv_message_cut *cuts;
    size_t cut_count;
    size_t claimed; /* cuts whose leaf part the walk described */
    int lost;       /* a size the walk could not make whole: the answer is not the message's */
};

void imap_mime_set_gmime_addresses(struct imap_mime *m, int on)
{
    if (m != NULL) {
        m->gmime_addresses = on;
    }
}

void imap_mime_structure_tag(unsigned char tag[IMAP_MIME_TAG_LEN])
{
    tag[0] = IMAP_MIME_STRUCTURE_FORMAT;
    tag[1] = (unsigned char)gmime_major_version;
    tag[2] = (unsigned char)gmime_minor_version;
    tag[3] = (unsigned char)gmime_micro_version;
}

void imap_mime_set_utf8(struct imap_mime *m, int utf8)
{
    m->utf8 = utf8;
}

void imap_mime_init(void)
{
    g_mime_init();
}

/* Lines that could make GMime build a part ("--...") or a header field ("name:"). */
static size_t imap_mime_structure_lines(const char *raw, size_t len)
{
    size_t n = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(raw + at, '\n', len - at);
        size_t end = nl != NULL ? (size_t)(nl - raw) + 1 : len;
        int boundary = end - at >= 2 && raw[at] == '-' && raw[at + 1] == '-';
        int field = memchr(raw + at, ':', end - at) != NULL && raw[at] != ' ' && raw[at] != '\t';
        n += (size_t)(boundary || field);
        at = end;
    }
    return n;
}

/* Whether raw has more than IMAP_MIME_STRUCTURE_MAX - extra such lines. Each takes at least
 * one byte and, but the last, its LF: k of them take 2k - 1 bytes, so a message of at most
 * 2 * (IMAP_MIME_STRUCTURE_MAX - extra) bytes, nearly every one, is not scanned (the scan
 * was 6% of a first FETCH BODYSTRUCTURE). */
static int imap_mime_over_structure(const char *raw, size_t len, size_t extra)
{
    if (extra >= IMAP_MIME_STRUCTURE_MAX) {
        return extra > IMAP_MIME_STRUCTURE_MAX || imap_mime_structure_lines(raw, len) > 0;
    }
    size_t room = IMAP_MIME_STRUCTURE_MAX - extra;
    return len > 2 * room && imap_mime_structure_lines(raw, len) > room;
}

static size_t imap_count_lines(const char *p, size_t len)
{
    size_t n = 0;
    for (const char *q = p; (q = memchr(q, '\n', len - (size_t)(q - p))) != NULL; q++) {
        n++;
    }
    return n;
}

/* Lets go of the parse's memory stream, wiping the copy of the message it holds first (GMime
 * would free it as it is): the reference is the last one once the message is gone. */
static void imap_mime_stream_drop(GMimeStream *stream)
{
    GByteArray *bytes = g_mime_stream_mem_get_byte_array(GMIME_STREAM_MEM(stream));
    if (bytes != NULL && bytes->data != NULL) {
        explicit_bzero(bytes->data, bytes->len);
    }
    g_object_unref(stream);
}

static char *imap_mime_content_fields(const char *raw, size_t len, size_t *out_len);

/* imap_mime_open, or with structure_only imap_mime_open_structure (whose header is plain:
 * GMime is given only its Content-* fields, imap_mime_content_fields). */
static int imap_mime_parse(const char *raw, size_t len, int structure_only, struct imap_mime **out)
{
    struct imap_mime *m = calloc(1, sizeof *m);
    *out = NULL;
    if (m == NULL) {
        return MV_ENOMEM;
    }
    m->size = len;
    size_t header = mv_message_header_len(raw, len);
    m->body_size = len - header;
    if (!imap_mime_over_structure(raw, len, 0)) {
        size_t given = len;
        char *fields = structure_only ? imap_mime_content_fields(raw, len, &given) : NULL;
        if (structure_only && fields == NULL) {
            free(m);
            return MV_ENOMEM;
        }
        /* GMime takes fields over (g_malloc is malloc), else copies raw */
        GMimeStream *stream = fields != NULL ? g_mime_stream_mem_new_with_byte_array(
                                                   g_byte_array_new_take((guint8 *)fields, given))
                                             : g_mime_stream_mem_new_with_buffer(raw, len);
        m->size = given;
        m->shift = len - given;
        GMimeParser *parser = g_mime_parser_new_with_stream(stream);
        g_mime_parser_set_persist_stream(parser, TRUE);
        if (structure_only) {
            m->top = g_mime_parser_construct_part(parser, NULL);
        } else {
            m->message = g_mime_parser_construct_message(parser, NULL);
        }
        g_object_unref(parser);
        if (m->message != NULL || m->top != NULL) {
            /* the copy is the raw message for BODYSTRUCTURE's sizes */
            GByteArray *bytes = g_mime_stream_mem_get_byte_array(GMIME_STREAM_MEM(stream));
            m->stream = stream;
            m->raw = bytes != NULL && bytes->len == given ? (const char *)bytes->data : NULL;
        } else {
            imap_mime_stream_drop(stream);
        }
    }
    if (m->message == NULL && m->top == NULL) {
        /* the single text part BODYSTRUCTURE falls back to: counted only for it (a pass over
         * the whole message, 2 of the ~5 a parse made when every message paid for it) */
        m->body_lines = imap_count_lines(raw + header, len - header);
    }
    *out = m;
    return MV_OK;
}

int imap_mime_open(const char *raw, size_t len, struct imap_mime **out)
{
    return imap_mime_parse(raw, len, 0, out);
}

/* The end of the line at at (after its LF, or end). */
static size_t imap_mime_eol(const char *raw, size_t at, size_t end)
{
    const char *nl = memchr(raw + at, '\n', end - at);
    return nl != NULL ? (size_t)(nl - raw) + 1 : end;
}

/* A copy of raw for a structure parse of its top part (construct_part): the top header cut
 * down to its Content-* fields (each with its continuation lines), the empty line and all
 * after it as they are; *out_len its length. A BODYSTRUCTURE reads no other top-level field,
 * and GMime builds an object and a copy of the value for each field it is given: with the
 * 10-20 fields of ordinary mail that was most of a first FETCH BODYSTRUCTURE's GMime time
 * (issue 13). Only for a plain header (imap_mime_header_plain: fields and continuations
 * only), where each field is read apart from the others, so the kept ones read the same; the
 * offsets after the header move back by the same number of bytes, len - *out_len. A header
 * without its empty line, and a message with a NUL byte, are copied whole. NULL: out of
 * memory. */
static char *imap_mime_content_fields(const char *raw, size_t len, size_t *out_len)
{
    char *out = malloc(len != 0 ? len : 1);
    size_t n = 0, at = 0;
    int keep = 0;
    if (out == NULL) {
        return NULL;
    }
    while (at < len) {
        size_t end = imap_mime_eol(raw, at, len), c = end - at;
        c -= c > 0 && raw[at + c - 1] == '\n';
        c -= c > 0 && raw[at + c - 1] == '\r';
        if (c == 0) {
            break; /* the empty line: it and the body go as they are */
        }
        if (raw[at] != ' ' && raw[at] != '\t') {
            keep = c >= 8 && strncasecmp(raw + at, "Content-", 8) == 0;
        }
        if (keep) {
            memcpy(out + n, raw + at, end - at);
            n += end - at;
        }
        at = end;
    }
    /* A header without its empty line (GMime reads an empty part there otherwise than no
     * part at all), or a NUL byte anywhere (GMime reads a header line with one as a C
     * string, where it stops depending on what its read buffer holds after, and those bytes
     * move with the fields left out): given whole. */
    if (at == len || memchr(raw + at, '\0', len - at) != NULL) {
        n = 0;
        at = 0;
    }
    memcpy(out + n, raw + at, len - at);
    *out_len = n + (len - at);
    return out;
}

/* Whether the header hdr[0..len) (with its empty line, if any) can be read without GMime:
 * every line up to the empty one is a field "name:" whose name is printable ASCII without
 * ':' (RFC 5322 2.2 ftext), or a continuation (SP or HTAB, then something not blank) after
 * a field; no NUL; at most IMAP_MIME_STRUCTURE_MAX fields (beyond, GMime is not asked and
 * the envelope is NIL: the same answer either way). */
static int imap_mime_header_plain(const char *hdr, size_t len)
{
    size_t fields = 0;
    if (memchr(hdr, '\0', len) != NULL) {
        return 0;
    }
    for (size_t at = 0; at < len;) {
        size_t end = imap_mime_eol(hdr, at, len), c = end - at;
        c -= c > 0 && hdr[at + c - 1] == '\n';
        c -= c > 0 && hdr[at + c - 1] == '\r';
        if (c == 0) {
            return end == len; /* the empty line ends the header */
        }
        if (hdr[at] == ' ' || hdr[at] == '\t') {
            size_t blank = 0; /* hdr need not end in a NUL: no strspn */
            while (blank < c && (hdr[at + blank] == ' ' || hdr[at + blank] == '\t')) {
                blank++;
            }
            if (fields == 0 || blank >= c) {
                return 0;
            }
        } else {
            size_t i = at;
            while (i < at + c && hdr[i] > ' ' && hdr[i] < 127 && hdr[i] != ':') {
                i++;
            }
            if (i == at || i == at + c || hdr[i] != ':' || ++fields > IMAP_MIME_STRUCTURE_MAX) {
                return 0;
            }
        }
        at = end;
    }
    return 1;
}

int imap_mime_open_envelope(const char *raw, size_t len, struct imap_mime **out)
{
    size_t header = mv_message_header_len(raw, len);
    if (!imap_mime_header_plain(raw, header)) {
        return imap_mime_open(raw, len, out);
    }
    struct imap_mime *m = calloc(1, sizeof *m);
    *out = m;
    if (m == NULL) {
        return MV_ENOMEM;
    }
    m->hdr = raw;
    m->hdr_len = header;
    return MV_OK;
}

int imap_mime_open_structure(const char *raw, size_t len, struct imap_mime **out)
{
    /* GMime's message and its top part part ways only on a header that is not plain (an mbox
     * From_ line, a line without a colon, a leading continuation): those keep the message. */
    return imap_mime_parse(raw, len, imap_mime_header_plain(raw, mv_message_header_len(raw, len)),
                           out);
}

int imap_mime_open_skeleton(const char *raw,
                            size_t len,
                            size_t size,
                            const struct mv_message_cut *cuts,
                            size_t cut_count,
                            struct imap_mime **out)
{
    *out = NULL;
    size_t marks = 0, lines = 0, cut = 0, at = 0;
    for (size_t i = 0; i < cut_count; i++) {
        size_t p = (size_t)cuts[i].position;
        /* (1) in order, inside the skeleton; (2) the part's content ended at a line break
         * or the end: there the skeleton's line is empty, so no line of the message was made
         * of skeleton and part bytes both, and counts over the two add up. */
        if (cuts[i].position > len || p < at ||
            !(p == len || raw[p] == '\n' ||
              (raw[p] == '\r' && p + 1 < len && raw[p + 1] == '\n'))) {
            return MV_EUNSUPPORTED;
        }
        at = p + 1;
        marks += (size_t)cuts[i].marks;
        lines += (size_t)cuts[i].lines;
        cut += (size_t)cuts[i].size;
    }
    /* the message itself would be one text part: read it whole for that answer. A NUL byte:
     * GMime reads a header line with one as a C string, and where it stops then depends on
     * what its read buffer holds after, so bytes cut out later in the message can change how
     * a part's header reads (found by the fuzz target); such mail is read whole. */
    if (cut != size - len || imap_mime_over_structure(raw, len, marks) ||
        memchr(raw, '\0', len) != NULL) {
        return MV_EUNSUPPORTED;
    }
    int rc = imap_mime_open_structure(raw, len, out);
    if (rc != MV_OK || cut_count == 0) {
        return rc;
    }
    struct imap_mime *m = *out;
    m->cuts = malloc(cut_count * sizeof *m->cuts);
    if (m->cuts == NULL) {
        imap_mime_close(out);
        return MV_ENOMEM;
    }
    memcpy(m->cuts, cuts, cut_count * sizeof *m->cuts);
    for (size_t i = 0; i < cut_count; i++) {
        m->cuts[i].position -= m->shift; /* after the header: past every byte not given */
    }
    m->cut_count = cut_count;
    m->body_size += cut;
    m->body_lines += lines;
    return MV_OK;
}

void imap_mime_close(struct imap_mime **m)
{
    if (m == NULL || *m == NULL) {
        return;
    }
    if ((*m)->message != NULL) {
        g_object_unref((*m)->message);
    }
    if ((*m)->top != NULL) {
        g_object_unref((*m)->top);
    }
    if ((*m)->stream != NULL) {
        imap_mime_stream_drop((*m)->stream);
    }
    free((*m)->cuts);
    free(*m);
    *m = NULL;
}

/* ---- ENVELOPE ---- */

/* The raw value of the first field name of obj, unfolded and trimmed (g_free), or NULL. */
static char *imap_mime_field(GMimeObject *obj, const char *name)
{
    GMimeHeaderList *list = g_mime_object_get_header_list(obj);
    GMimeHeader *h = list != NULL ? g_mime_header_list_get_header(list, name) : NULL;
    const char *raw = h != NULL ? g_mime_header_get_raw_value(h) : NULL;
    if (raw == NULL) {
        return NULL;
    }
    char *value = g_mime_utils_header_unfold(raw);
    if (value == NULL) {
        return NULL;
    }
    size_t start = strspn(value, " \t\r\n"), n = strlen(value);
    while (n > start && strchr(" \t\r\n", value[n - 1]) != NULL) {
        n--;
    }
    memmove(value, value + start, n - start);
    value[n - start] = '\0';
    return value;
}

/* The fields ENVELOPE reads (imap_mime_envelope_of), in the order of imap_mime_src.at. */
static const char *const imap_mime_envelope_names[] = {"Date",        "Subject",   "From", "Sender",
                                                       "Reply-To",    "To",        "Cc",   "Bcc",
                                                       "In-Reply-To", "Message-ID"};
#define IMAP_MIME_ENVELOPE_FIELDS                                                                  \
    (sizeof imap_mime_envelope_names / sizeof imap_mime_envelope_names[0])

/* Where ENVELOPE's fields come from: a GMime object, or a plain header's bytes. For the
 * latter, at[] (filled by imap_mime_hdr_index) holds each ENVELOPE field's first occurrence
 * as the offset of its value and end[] the end of its last continuation line; at[k] == 0:
 * absent (a value never starts at offset 0). */
struct imap_mime_src {
    GMimeObject *obj;
    const char *hdr;
    size_t hdr_len;
    int gmime_addresses; /* every address field through GMime (tests compare both ways) */
    int indexed;
    size_t at[IMAP_MIME_ENVELOPE_FIELDS];
    size_t end[IMAP_MIME_ENVELOPE_FIELDS];
};

/* The value hdr[at, end) of a plain header's field, unfolded and trimmed like
 * imap_mime_field() (g_free), or NULL. */
static char *imap_mime_hdr_value(const char *hdr, size_t at, size_t end)
{
    char *raw = g_strndup(hdr + at, end - at);
    char *value = g_mime_utils_header_unfold(raw);
    g_free(raw);
    if (value == NULL) {
        return NULL;
    }
    size_t start = strspn(value, " \t\r\n"), k = strlen(value);
    while (k > start && strchr(" \t\r\n", value[k - 1]) != NULL) {
        k--;
    }
    memmove(value, value + start, k - start);
    value[k - start] = '\0';
    return value;
}

/* The end of the field whose first line ends at end: past its continuation lines. */
static size_t imap_mime_hdr_field_end(const char *hdr, size_t len, size_t end)
{
    while (end < len && (hdr[end] == ' ' || hdr[end] == '\t')) {
        end = imap_mime_eol(hdr, end, len);
    }
    return end;
}

/* imap_mime_field() of a plain header (imap_mime_header_plain): the first field name, its
 * value up to the end of its last continuation line, unfolded and trimmed alike. */
static char *imap_mime_hdr_field(const char *hdr, size_t len, const char *name)
{
    size_t n = strlen(name);
    for (size_t at = 0; at < len;) {
        size_t end = imap_mime_eol(hdr, at, len);
        if (end - at > n && hdr[at + n] == ':' && g_ascii_strncasecmp(hdr + at, name, n) == 0) {
            return imap_mime_hdr_value(hdr, at + n + 1, imap_mime_hdr_field_end(hdr, len, end));
        }
        at = end;
    }
    return NULL;
}

/* Finds the first occurrence of every ENVELOPE field of a plain header in one pass (instead
 * of one pass per field: 13 scans of the header per message for a message list), with the
 * rule of imap_mime_hdr_field(): a line that starts with the name and ':'. */
static void imap_mime_hdr_index(struct imap_mime_src *src)
{
    const char *hdr = src->hdr;
    size_t len = src->hdr_len, found = 0;
    memset(src->at, 0, sizeof src->at);
    for (size_t at = 0; at < len && found < IMAP_MIME_ENVELOPE_FIELDS;) {
        size_t end = imap_mime_eol(hdr, at, len);
        const char *colon = memchr(hdr + at, ':', end - at);
        size_t n = colon != NULL ? (size_t)(colon - (hdr + at)) : 0;
        for (size_t k = 0; n > 0 && k < IMAP_MIME_ENVELOPE_FIELDS; k++) {
            const char *name = imap_mime_envelope_names[k];
            if (src->at[k] == 0 && strlen(name) == n &&
                g_ascii_strncasecmp(hdr + at, name, n) == 0) {
                src->at[k] = at + n + 1;
                src->end[k] = imap_mime_hdr_field_end(hdr, len, end);
                found++;
                break;
            }
        }
        at = end;
    }
    src->indexed = 1;
}

static char *imap_mime_src_field(const struct imap_mime_src *src, const char *name)
{
    if (src->obj != NULL) {
        return imap_mime_field(src->obj, name);
    }
    for (size_t k = 0; src->indexed && k < IMAP_MIME_ENVELOPE_FIELDS; k++) {
        if (strcmp(name, imap_mime_envelope_names[k]) == 0) {
            return src->at[k] != 0 ? imap_mime_hdr_value(src->hdr, src->at[k], src->end[k]) : NULL;
        }
    }
    return imap_mime_hdr_field(src->hdr, src->hdr_len, name);
}

static void
imap_mime_src_nstring(struct buf *out, const struct imap_mime_src *src, const char *name, int utf8)
{
    char *value = imap_mime_src_field(src, name);
    if (value == NULL || value[0] == '\0') {
        buf_str(out, "NIL");
    } else {
        buf_imap_string_utf8(out, value, strlen(value), utf8);
    }
    g_free(value);
}

static void imap_mime_nstring_field(struct buf *out, GMimeObject *obj, const char *name, int utf8)
{
    struct imap_mime_src src = {.obj = obj};
    imap_mime_src_nstring(out, &src, name, utf8);
}

static int imap_mime_ascii(const char *s)
{
    for (; *s != '\0'; s++) {
        if ((unsigned char)*s >= 0x80) {
            return 0;
        }
    }
    return 1;
}

/* The source routes of an address field (RFC 5322 4.4 obs-route, "<@a,@b:user@host>"), which
 * GMime parses away: the route ("@a,@b") with the addr-spec after it, in field order, so
 * ENVELOPE's adl (RFC 3501 7.4.2) can carry it. */
#define IMAP_MIME_ROUTES_MAX 16
struct imap_mime_routes {
    size_t count;
    char *route[IMAP_MIME_ROUTES_MAX]; /* g_malloc'd */
    char *addr[IMAP_MIME_ROUTES_MAX];
};

/* A copy of s[0..len) without white space (g_malloc). */
static char *imap_mime_squeeze(const char *s, size_t len)
{
    char *out = g_malloc(len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') {
            out[n++] = s[i];
        }
    }
    out[n] = '\0';
    return out;
}

static void imap_mime_routes_read(const char *value, struct imap_mime_routes *r)
{
    memset(r, 0, sizeof *r);
    int depth = 0; /* inside comments */
    for (const char *p = value; *p != '\0' && r->count < IMAP_MIME_ROUTES_MAX; p++) {
        if (*p == '\\' && p[1] != '\0') {
            p++;
        } else if (*p == '"' && depth == 0) { /* a quoted string: skip it */
            for (p++; *p != '\0' && *p != '"'; p++) {
                p += *p == '\\' && p[1] != '\0';
            }
            if (*p == '\0') {
                break;
            }
        } else if (*p == '(') {
            depth++;
        } else if (*p == ')' && depth > 0) {
            depth--;
        } else if (*p == '<' && depth == 0) {
            const char *q = p + 1 + strspn(p + 1, " \t\r\n");
            const char *colon = *q == '@' ? strpbrk(q, ":>") : NULL;
            const char *close = colon != NULL && *colon == ':' ? strchr(colon, '>') : NULL;
            if (close != NULL) {
                r->route[r->count] = imap_mime_squeeze(q, (size_t)(colon - q));
                r->addr[r->count++] = imap_mime_squeeze(colon + 1, (size_t)(close - colon - 1));
                p = close;
            }
        }
    }
}

static void imap_mime_routes_free(struct imap_mime_routes *r)
{
    for (size_t i = 0; i < r->count; i++) {
        g_free(r->route[i]);
        g_free(r->addr[i]);
    }
    r->count = 0;
}

/* The route written before addr in the field, taken (each route is used once), or NULL. */
static const char *imap_mime_route_of(struct imap_mime_routes *r, const char *addr)
{
    for (size_t i = 0; r != NULL && addr != NULL && i < r->count; i++) {
        if (r->addr[i] != NULL && strcmp(r->addr[i], addr) == 0) {
            g_free(r->addr[i]);
            r->addr[i] = NULL;
            return r->route[i];
        }
    }
    return NULL;
}

static void imap_mime_address(
    struct buf *out, InternetAddress *ia, int depth, int utf8, struct imap_mime_routes *routes);

static void imap_mime_address_list(struct buf *out,
                                   InternetAddressList *list,
                                   int depth,
                                   int utf8,
                                   struct imap_mime_routes *routes)
{
    int n = list != NULL ? internet_address_list_length(list) : 0;
    for (int i = 0; i < n; i++) {
        imap_mime_address(out, internet_address_list_get_address(list, i), depth, utf8, routes);
    }
}

static void imap_mime_address(
    struct buf *out, InternetAddress *ia, int depth, int utf8, struct imap_mime_routes *routes)
{
    const char *name = internet_address_get_name(ia);
    if (INTERNET_ADDRESS_IS_GROUP(ia)) {
        if (depth > 0) {
            return; /* groups do not nest in RFC 5322 */
        }
        buf_str(out, "(NIL NIL ");
        buf_imap_string_utf8(out, name != NULL ? name : "", name != NULL ? strlen(name) : 0, utf8);
        buf_str(out, " NIL)");
        imap_mime_address_list(out, internet_address_group_get_members(INTERNET_ADDRESS_GROUP(ia)),
                               depth + 1, utf8, routes);
        buf_str(out, "(NIL NIL NIL NIL)");
        return;
    }
    const char *addr = internet_address_mailbox_get_addr(INTERNET_ADDRESS_MAILBOX(ia));
    buf_str(out, "(");
    if (name == NULL || name[0] == '\0') {
        buf_str(out, "NIL");
    } else if (imap_mime_ascii(name) || (utf8 && g_utf8_validate(name, -1, NULL))) {
        /* GMime decoded the name to UTF-8: a UTF8=ACCEPT session takes it as it is */
        buf_imap_string_utf8(out, name, strlen(name), utf8);
    } else {
        char *encoded = g_mime_utils_header_encode_phrase(NULL, name, "utf-8");
        buf_imap_nstring(out, encoded);
        g_free(encoded);
    }
    const char *route = imap_mime_route_of(routes, addr);
    buf_str(out, " ");
    buf_imap_nstring(out, route); /* the adl: "@a,@b" or NIL */
    buf_str(out, " ");
    const char *at = addr != NULL ? strrchr(addr, '@') : NULL;
    if (addr == NULL || addr[0] == '\0') {
        buf_str(out, "NIL NIL");
    } else if (at == NULL) {
        buf_imap_string_utf8(out, addr, strlen(addr), utf8);
        buf_str(out, " NIL");
    } else { /* an internationalised address (RFC 6532) is UTF-8 on both sides of '@' */
        buf_imap_string_utf8(out, addr, (size_t)(at - addr), utf8);
        buf_str(out, " ");
        buf_imap_string_utf8(out, at + 1, strlen(at + 1), utf8);
    }
    buf_str(out, ")");
}

/* ---- Common address lists without GMime ----
 * GMime's address parser builds a GObject per address and list (with signal handlers and
 * locks): after the header scan it was most of a client's message list (issue 13). The
 * forms nearly every message uses, plain ASCII "Name Surname <local@domain>", "\"Surname,
 * Name\" <local@domain>" and "local@domain", comma-separated, are read here instead; any
 * other byte or form (comments, groups, routes, encoded words, escapes, obsolete syntax,
 * 8-bit, punycode domains, several spaces in a name) leaves the field to GMime. The answer
 * is the same bytes (tests/test_imap_mime.c and the imap_mime fuzz target compare both ways:
 * imap_mime_set_gmime_addresses). */
#define IMAP_MIME_SIMPLE_MAX 32 /* addresses per field read here; more go to GMime */

struct imap_mime_simple {
    const char *name; /* NULL: none */
    size_t name_len;
    const char *local, *domain;
    size_t local_len, domain_len;
};

static int imap_mime_atext(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-/=?^_`{|}~", c) != NULL);
}

/* A dot-atom (RFC 5322 3.2.3) at p: its length, or 0. */
static size_t imap_mime_dot_atom(const char *p)
{
    size_t n = 0;
    for (;;) {
        size_t run = 0;
        while (imap_mime_atext(p[n + run])) {
            run++;
        }
        if (run == 0) {
            return 0; /* empty, or a dot first, last or twice */
        }
        n += run;
        if (p[n] != '.') {
            return n;
        }
        n++;
    }
}

/* local@domain at p (both dot-atoms; no punycode domain, which GMime decodes): its length,
 * or 0. */
static size_t imap_mime_addr_spec(const char *p, struct imap_mime_simple *a)
{
    size_t local = imap_mime_dot_atom(p);
    if (local == 0 || p[local] != '@') {
        return 0;
    }
    size_t domain = imap_mime_dot_atom(p + local + 1);
    for (size_t i = 0; i + 4 <= domain; i++) {
        if (g_ascii_strncasecmp(p + local + 1 + i, "xn--", 4) == 0) {
            return 0;
        }
    }
    if (domain == 0) {
        return 0;
    }
    a->local = p;
    a->local_len = local;
    a->domain = p + local + 1;
    a->domain_len = domain;
    return local + 1 + domain;
}

/* A display name at p: atoms separated by single spaces, or one quoted string of printable
 * ASCII without quote or backslash, not empty, not starting or ending with a space and
 * without two in a row. Its length (with the quotes), or 0. */
static size_t imap_mime_simple_name(const char *p, struct imap_mime_simple *a)
{
    size_t n = 0;
    if (p[0] == '"') {
        for (n = 1; p[n] != '"'; n++) {
            if (p[n] < ' ' || p[n] > '~' || p[n] == '\\' ||
                (p[n] == ' ' && (n == 1 || p[n - 1] == ' ' || p[n + 1] == '"'))) {
                return 0;
            }
        }
        if (n == 1) {
            return 0;
        }
        a->name = p + 1;
        a->name_len = n - 1;
        return n + 1;
    }
    for (;;) {
        size_t run = 0;
        while (imap_mime_atext(p[n + run])) {
            run++;
        }
        if (run == 0) {
            return 0;
        }
        n += run;
        if (p[n] != ' ' || !imap_mime_atext(p[n + 1])) {
            break;
        }
        n++;
    }
    a->name = p;
    a->name_len = n;
    return n;
}

/* One address at p ("local@domain" or "name <local@domain>"): its length, or 0. */
static size_t imap_mime_simple_one(const char *p, struct imap_mime_simple *a)
{
    memset(a, 0, sizeof *a);
    size_t n = imap_mime_addr_spec(p, a);
    if (n != 0) {
        return n;
    }
    if (p[0] != '<') {
        n = imap_mime_simple_name(p, a);
        if (n == 0) {
            return 0;
        }
        while (p[n] == ' ' || p[n] == '\t') {
            n++;
        }
        if (p[n] != '<') {
            return 0;
        }
    }
    size_t spec = imap_mime_addr_spec(p + n + 1, a);
    if (spec == 0 || p[n + 1 + spec] != '>') {
        return 0;
    }
    return n + 1 + spec + 1;
}

/* The address list value (unfolded, trimmed, NUL-terminated) written as ENVELOPE's list when
 * every address is of a simple form: 1; else 0 with nothing written. */
static int imap_mime_addresses_simple(struct buf *out, const char *value, int utf8)
{
    if (strstr(value, "=?") != NULL) {
        return 0; /* encoded words: GMime decodes them */
    }
    struct imap_mime_simple a[IMAP_MIME_SIMPLE_MAX];
    size_t count = 0;
    for (const char *p = value;;) {
        while (*p == ' ' || *p == '\t') {
            p++;
        }
        size_t n = count < IMAP_MIME_SIMPLE_MAX ? imap_mime_simple_one(p, &a[count]) : 0;
        if (n == 0) {
            return 0;
        }
        count++;
        for (p += n; *p == ' ' || *p == '\t'; p++) {
        }
        if (*p == '\0') {
            break;
        }
        if (*p++ != ',') {
            return 0;
        }
    }
    buf_str(out, "(");
    for (size_t i = 0; i < count; i++) {
        buf_str(out, "(");
        if (a[i].name == NULL) {
            buf_str(out, "NIL");
        } else {
            buf_imap_string_utf8(out, a[i].name, a[i].name_len, utf8);
        }
        buf_str(out, " NIL ");
        buf_imap_string_utf8(out, a[i].local, a[i].local_len, utf8);
        buf_str(out, " ");
        buf_imap_string_utf8(out, a[i].domain, a[i].domain_len, utf8);
        buf_str(out, ")");
    }
    buf_str(out, ")");
    return 1;
}

/* An address list field: (addr addr ...) or NIL. With from (Sender, Reply-To), an absent
 * or empty field is answered as From was: from is the [offset, end) of From's answer in out,
 * copied instead of parsing From again (GMime's address parser and its objects were most of
 * a client's message list, issue 13). */
static void imap_mime_addresses(struct buf *out,
                                const struct imap_mime_src *src,
                                const char *name,
                                const size_t *from,
                                int utf8)
{
    char *value = imap_mime_src_field(src, name);
    if ((value == NULL || value[0] == '\0') && from != NULL) {
        g_free(value);
        size_t n = from[1] - from[0];
        if (buf_reserve(out, n) == 0) { /* first: out->data may move */
            buf_add(out, out->data + from[0], n);
        }
        return;
    }
    if (value != NULL && value[0] != '\0' && !src->gmime_addresses &&
        imap_mime_addresses_simple(out, value, utf8)) {
        g_free(value);
        return;
    }
    InternetAddressList *list =
        value != NULL && value[0] != '\0' ? internet_address_list_parse(NULL, value) : NULL;
    struct imap_mime_routes routes;
    imap_mime_routes_read(value != NULL ? value : "", &routes);
    g_free(value);
    if (list == NULL || internet_address_list_length(list) == 0) {
        buf_str(out, "NIL");
    } else {
        buf_str(out, "(");
        imap_mime_address_list(out, list, 0, utf8, &routes);
        buf_str(out, ")");
    }
    imap_mime_routes_free(&routes);
    if (list != NULL) {
        g_object_unref(list);
    }
}

static void imap_mime_envelope_of(struct buf *out, struct imap_mime_src *obj, int utf8)
{
    if (obj->obj == NULL) {
        imap_mime_hdr_index(obj);
    }
    buf_str(out, "(");
    imap_mime_src_nstring(out, obj, "Date", utf8);
    buf_str(out, " ");
    imap_mime_src_nstring(out, obj, "Subject", utf8);
    buf_str(out, " ");
    size_t from[2] = {out->len, 0};
    imap_mime_addresses(out, obj, "From", NULL, utf8);
    from[1] = out->len;
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "Sender", out->oom ? NULL : from, utf8);
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "Reply-To", out->oom ? NULL : from, utf8);
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "To", NULL, utf8);
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "Cc", NULL, utf8);
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "Bcc", NULL, utf8);
    buf_str(out, " ");
    imap_mime_src_nstring(out, obj, "In-Reply-To", utf8);
    buf_str(out, " ");
    imap_mime_src_nstring(out, obj, "Message-ID", utf8);
    buf_str(out, ")");
}

void imap_mime_envelope(const struct imap_mime *m, struct buf *out)
{
    struct imap_mime_src src = {.obj = m->message != NULL ? GMIME_OBJECT(m->message) : NULL,
                                .hdr = m->hdr,
                                .hdr_len = m->hdr_len,
                                .gmime_addresses = m->gmime_addresses};
    if (src.obj == NULL && src.hdr == NULL) {
        buf_str(out, "(NIL NIL NIL NIL NIL NIL NIL NIL NIL NIL)");
        return;
    }
    imap_mime_envelope_of(out, &src, m->utf8);
}

/* ---- The raw message: entities, delimiters, parts (for sections and sizes) ---- */

enum imap_mime_kind {
    IMAP_MIME_LEAF = 0,
    IMAP_MIME_MULTIPART,
    IMAP_MIME_DIGEST, /* multipart/digest: its parts default to message/rfc822 */
    IMAP_MIME_MESSAGE
};

/* An entity: header [begin, body), content [body, end). message: a message (the top one or
 * one inside a message/rfc822 part), whose part numbers count into its body. */
struct imap_mime_entity {
    size_t begin;
    size_t body;
    size_t end;
    int message;
    int digest_child;
};

static size_t imap_mime_line_end(const char *raw, size_t at, size_t end)
{
    const char *nl = memchr(raw + at, '\n', end - at);
    return nl != NULL ? (size_t)(nl - raw) + 1 : end;
}

/* Where the content of the entity at begin starts: after its first empty line (CRLF or LF,
 * the first line included: an empty header), or end when it is all header. The store's rule
 * (mv_message_header_len), so message and part headers are cut alike. */
static size_t imap_mime_body_start(const char *raw, size_t begin, size_t end)
{
    return begin + mv_message_header_len(raw + begin, end - begin);
}

/* The Content-Type value of the header [begin, body) (malloc'd, NUL-terminated), or NULL. */
static char *imap_mime_content_type_value(const char *raw, size_t begin, size_t body)
{
    static const char name[] = "Content-Type";
    for (size_t at = begin; at < body;) {
        size_t end = at;
        do { /* a field: its line and the continuation lines */
            end = imap_mime_line_end(raw, end, body);
        } while (end < body && (raw[end] == ' ' || raw[end] == '\t'));
        const char *colon = memchr(raw + at, ':', end - at);
        size_t name_len = colon != NULL ? (size_t)(colon - (raw + at)) : 0;
        while (name_len > 0 && (raw[at + name_len - 1] == ' ' || raw[at + name_len - 1] == '\t')) {
            name_len--;
        }
        if (name_len == sizeof name - 1 && strncasecmp(raw + at, name, name_len) == 0) {
            size_t from = (size_t)(colon - raw) + 1;
            char *value = malloc(end - from + 1);
            if (value == NULL) {
                return NULL;
            }
            /* Unfolding removes the line breaks and keeps the blank that follows each
             * (RFC 5322 2.2.3): a quoted boundary="foo CRLF bar" is "foo bar", as GMime
             * reads it for BODYSTRUCTURE. A NUL would end the string early: a space. */
            size_t n = 0;
            for (size_t i = from; i < end; i++) {
                if (raw[i] != '\r' && raw[i] != '\n') {
                    value[n++] = raw[i] != '\0' ? raw[i] : ' ';
                }
            }
            value[n] = '\0';
            return value;
        }
        at = end;
    }
    return NULL;
}

/* 1 for an RFC 2045 token character (printable US-ASCII but SPACE and the tspecials), the
 * characters GMime's Content-Type parser takes for a media type. */
static int imap_mime_token_char(char c)
{
    return c > ' ' && c < 0x7f && strchr("()<>@,;:\\\"/[]?=", c) == NULL;
}

/* 1 if a Content-Type value names a leaf for certain: after blanks only, a media type of
 * token characters right before its '/', neither "multipart" nor "message". GMime reads the
 * same type from such a value (it skips blanks and comments, then takes token characters),
 * and a value it cannot parse at all is application/octet-stream to it: a leaf either way.
 * Anything else (a comment, a quote, a fold before the type, an 8-bit byte, multipart or
 * message) goes to GMime's parser. Why: a GMimeContentType made and freed for every part a
 * section steps through was 10% of "FETCH 1:500 (BODY.PEEK[1]<0.256>)" (issue 13), and most
 * parts are text or an attachment, whose kind their type's first word settles. */
int imap_mime_plain_leaf(const char *value)
{
    const char *p = value;
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    const char *type = p;
    while (imap_mime_token_char(*p)) {
        p++;
    }
    size_t n = (size_t)(p - type);
    if (n == 0 || *p != '/') {
        return 0;
    }
    return !(n == 9 && strncasecmp(type, "multipart", 9) == 0) &&
           !(n == 7 && strncasecmp(type, "message", 7) == 0);
}

/* The kind of e from its Content-Type (as GMime reads it); *boundary (g_free) for multiparts. */
static enum imap_mime_kind
imap_mime_entity_kind(const char *raw, const struct imap_mime_entity *e, char **boundary)
{
    enum imap_mime_kind kind = e->digest_child ? IMAP_MIME_MESSAGE : IMAP_MIME_LEAF;
    char *value = imap_mime_content_type_value(raw, e->begin, e->body);
    *boundary = NULL;
    if (value == NULL) {
        return kind;
    }
    if (imap_mime_plain_leaf(value)) {
        free(value);
        return IMAP_MIME_LEAF;
    }
    GMimeContentType *ct = g_mime_content_type_parse(NULL, value);
    free(value);
    const char *type = ct != NULL ? g_mime_content_type_get_media_type(ct) : NULL;
    const char *sub = ct != NULL ? g_mime_content_type_get_media_subtype(ct) : NULL;
    kind = IMAP_MIME_LEAF;
    if (type != NULL && sub != NULL && strcasecmp(type, "multipart") == 0) {
        const char *b = g_mime_content_type_get_parameter(ct, "boundary");
        *boundary = b != NULL ? g_strdup(b) : NULL;
        kind = strcasecmp(sub, "digest") == 0 ? IMAP_MIME_DIGEST : IMAP_MIME_MULTIPART;
    } else if (type != NULL && sub != NULL && strcasecmp(type, "message") == 0 &&
               (strcasecmp(sub, "rfc822") == 0 || strcasecmp(sub, "news") == 0 ||
                strcasecmp(sub, "global") == 0)) {
        kind = IMAP_MIME_MESSAGE;
    }
    if (ct != NULL) {
        g_object_unref(ct);
    }
    return kind;
}

/* 1 if the line at [at, end) is a delimiter of boundary; *close set for "--boundary--". */
static int
imap_mime_delimiter(const char *raw, size_t at, size_t end, const char *boundary, int *close)
{
    size_t n = strlen(boundary);
    if (end - at < n + 2 || raw[at] != '-' || raw[at + 1] != '-' ||
        strncmp(raw + at + 2, boundary, n) != 0) {
        return 0;
    }
    at += n + 2;
    *close = end - at >= 2 && raw[at] == '-' && raw[at + 1] == '-';
    for (at += *close ? 2 : 0; at < end; at++) { /* only transport padding may follow */
        if (raw[at] != ' ' && raw[at] != '\t' && raw[at] != '\r' && raw[at] != '\n') {
            return 0;
        }
    }
    return 1;
}

/* The end of the line at `at` (imap_mime_line_end), but a stand-in's filler (r's gaps) is one
 * line that is not read: its first byte is 'x', its end is known. */
static size_t
imap_mime_line_end_r(const char *raw, size_t at, size_t end, const struct imap_mime_reading *r)
{
    if (r != NULL && r->count > 0 && raw[at] == 'x') {
        size_t lo = 0, hi = r->count; /* the first gap starting at or after at */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (r->gap[mid].start < at) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (lo < r->count && r->gap[lo].start == at && r->gap[lo].end <= end) {
            return r->gap[lo].end;
        }
    }
    return imap_mime_line_end(raw, at, end);
}

/* 1 if the line at `at` of a prefix (r->prefix > 0) may go on past it: it starts at or after
 * the prefix's last LF (A WALK OVER A PREFIX, imap_mime.h). */
static int imap_mime_open_line(const struct imap_mime_reading *r, size_t at)
{
    return r != NULL && r->prefix > 0 && at >= r->tail;
}

/* imap_mime_body_start() in r's reading. Of an entity open to a prefix's end, a header may
 * end past it, and an empty line found at the prefix's last line break may be the one in
 * front of a delimiter there, which belongs to the delimiter: the header's end is sure only
 * before that (else uncertain). */
static size_t
imap_mime_body_start_r(const char *raw, size_t begin, size_t end, struct imap_mime_reading *r)
{
    size_t body = imap_mime_body_start(raw, begin, end);
    if (r != NULL && r->prefix > 0 && end == r->prefix && body + 2 > r->tail) {
        r->uncertain = 1;
    }
    return body;
}

/* The next part of the multipart parent after *at (a line start in its content): skips to the
 * next delimiter line (past the preamble the first time); the part runs to the line break
 * before the following delimiter (the break belongs to the delimiter, RFC 2046 5.1.1) or,
 * when the close delimiter is missing, to parent->end. 0, or -1 after the last part. In a
 * prefix (r), looking for the part's start on a line that may go on past it, or running out of
 * lines at its end, makes the reading uncertain; looking for its end there leaves the part
 * open, to the prefix's end. */
static int imap_mime_next_part(const char *raw,
                               struct imap_mime_reading *r,
                               const struct imap_mime_entity *parent,
                               const char *boundary,
                               int digest,
                               size_t *at,
                               struct imap_mime_entity *part)
{
    size_t pos = *at, next = *at;
    int close = 0, found = 0;
    for (; pos < parent->end && !found; pos = found ? pos : next) {
        if (imap_mime_open_line(r, pos)) {
            r->uncertain = 1;
            return -1;
        }
        next = imap_mime_line_end_r(raw, pos, parent->end, r);
        found = imap_mime_delimiter(raw, pos, next, boundary, &close);
    }
    if (!found && r != NULL && r->prefix > 0 && parent->end == r->prefix) {
        r->uncertain = 1; /* more lines may follow the prefix */
    }
    if (!found || close) {
        return -1;
    }
    size_t start = next;
    for (pos = start; pos < parent->end; pos = next) {
        if (imap_mime_open_line(r, pos)) {
            pos = parent->end; /* open: the part goes on at least to the line before */
            break;
        }
        next = imap_mime_line_end_r(raw, pos, parent->end, r);
        if (imap_mime_delimiter(raw, pos, next, boundary, &close)) {
            break;
        }
    }
    size_t stop = pos;
    if (pos < parent->end) {
        stop -= stop > start && raw[stop - 1] == '\n';
        stop -= stop > start && raw[stop - 1] == '\r';
    }
    part->begin = start;
    part->body = imap_mime_body_start_r(raw, start, stop, r);
    part->end = stop;
    part->message = 0;
    part->digest_child = digest;
    *at = pos;
    return 0;
}

/* Part number (1-based) of the multipart e: e becomes that part. */
static int imap_mime_child(const char *raw,
                           struct imap_mime_reading *r,
                           struct imap_mime_entity *e,
                           const char *boundary,
                           uint32_t number,
                           int digest)
{
    struct imap_mime_entity part = {0, 0, 0, 0, 0};
    size_t at = e->body;
    for (uint32_t i = 0; i < number; i++) {
        if (imap_mime_next_part(raw, r, e, boundary, digest, &at, &part) != 0) {
            return -1;
        }
    }
    *e = part;
    return 0;
}

/* ---- BODYSTRUCTURE ---- */

static void imap_mime_upper_string(struct buf *out, const char *s, const char *fallback)
{
    char tmp[128];
    if (s == NULL || s[0] == '\0') {
        s = fallback;
    }
    size_t n = strlen(s);
    if (n >= sizeof tmp) {
        buf_imap_string(out, s, n);
        return;
    }
    for (size_t i = 0; i <= n; i++) {
        tmp[i] = s[i];
        if (s[i] >= 'a' && s[i] <= 'z') {
            tmp[i] = (char)(s[i] - ('a' - 'A'));
        }
    }
    buf_imap_string(out, tmp, n);
}

static void imap_mime_params(struct buf *out, GMimeParamList *params, int utf8)
{
    int n = params != NULL ? g_mime_param_list_length(params) : 0;
    if (n == 0) {
        buf_str(out, "NIL");
        return;
    }
    buf_str(out, "(");
    for (int i = 0; i < n; i++) {
        GMimeParam *p = g_mime_param_list_get_parameter_at(params, i);
        const char *value = g_mime_param_get_value(p);
        if (i != 0) {
            buf_str(out, " ");
        }
        imap_mime_upper_string(out, g_mime_param_get_name(p), "X");
        buf_str(out, " ");
        buf_imap_string_utf8(out, value != NULL ? value : "", value != NULL ? strlen(value) : 0,
                             utf8);
    }
    buf_str(out, ")");
}

static void imap_mime_disposition(struct buf *out, GMimeObject *obj, int utf8)
{
    GMimeContentDisposition *d = g_mime_object_get_content_disposition(obj);
    const char *kind = d != NULL ? g_mime_content_disposition_get_disposition(d) : NULL;
    if (kind == NULL) {
        buf_str(out, "NIL");
        return;
    }
    buf_str(out, "(");
    imap_mime_upper_string(out, kind, "ATTACHMENT");
    buf_str(out, " ");
    imap_mime_params(out, g_mime_content_disposition_get_parameters(d), utf8);
    buf_str(out, ")");
}

/* The bytes and lines of the walk's cuts at skeleton offsets from to to (both included: a
 * part cut at the end of an entity's span belongs to it). A part cut at the end of the span
 * where the skeleton goes on with a bare LF may have ended with the CR of a CR LF, which
 * GMime leaves in a part's content and the span (the raw walk: the line break before a
 * delimiter is the delimiter's) does not: that span's size is not known (lost). */
static void
imap_mime_cuts_within(struct imap_mime_walk *w, size_t from, size_t to, size_t *size, size_t *lines)
{
    for (size_t i = 0; i < w->cut_count; i++) {
        if (w->cuts[i].position >= from && w->cuts[i].position <= to) {
            *size += (size_t)w->cuts[i].size;
            *lines += (size_t)w->cuts[i].lines;
            w->lost |= w->cuts[i].position == to && to < w->len && w->raw[to] == '\n';
        }
    }
}

/* The octets and lines of a leaf part's content, as in the message. In a skeleton, a part
 * whose content is empty where a part was cut out is that part: its recorded counts. */
static void
imap_mime_content_size(struct imap_mime_walk *walk, GMimePart *part, size_t *size, size_t *lines)
{
    GMimeDataWrapper *w = g_mime_part_get_content(part);
    GMimeStream *s = w != NULL ? g_mime_data_wrapper_get_stream(w) : NULL;
    char chunk[8192];
    *size = 0;
    *lines = 0;
    if (s == NULL || g_mime_stream_reset(s) != 0) {
        return;
    }
    ssize_t n;
    while ((n = g_mime_stream_read(s, chunk, sizeof chunk)) > 0) {
        *size += (size_t)n;
        *lines += imap_count_lines(chunk, (size_t)n);
    }
    (void)g_mime_stream_reset(s);
    for (size_t i = 0;
         walk->cut_count > 0 && *size == 0 && s->bound_start >= 0 && i < walk->cut_count; i++) {
        if (walk->cuts[i].position == (uint64_t)s->bound_start) {
            *size = (size_t)walk->cuts[i].size;
            *lines = (size_t)walk->cuts[i].lines;
            walk->claimed++;
            break;
        }
    }
}

/* The BODYSTRUCTURE walk: raw is the message, span the bytes of the object described (NULL
 * when the raw walk lost track of GMime's structure: then GMime's sizes are used). */
static void imap_mime_body(struct buf *out,
                           GMimeObject *obj,
                           int ext,
                           int depth,
                           const char *raw,
                           const struct imap_mime_entity *span,
                           struct imap_mime_walk *w);

static void imap_mime_multipart(struct buf *out,
                                GMimeObject *obj,
                                int ext,
                                int depth,
                                const char *raw,
                                const struct imap_mime_entity *span,
                                struct imap_mime_walk *w)
{
    int utf8 = w->utf8;
    GMimeMultipart *mp = GMIME_MULTIPART(obj);
    int n = g_mime_multipart_get_count(mp);
    GMimeContentType *ct = g_mime_object_get_content_type(obj);
    /* The parameter as the message has it: g_mime_multipart_get_boundary() makes up a random
     * one when there is none and sets it on the content type, so BODYSTRUCTURE listed a
     * BOUNDARY the message does not have, different at every FETCH. */
    const char *boundary = ct != NULL ? g_mime_content_type_get_parameter(ct, "boundary") : NULL;
    const char *sub = ct != NULL ? g_mime_content_type_get_media_subtype(ct) : NULL;
    int digest = sub != NULL && strcasecmp(sub, "digest") == 0;
    int known = span != NULL && boundary != NULL && boundary[0] != '\0';
    size_t at = known ? span->body : 0;
    buf_str(out, "(");
    for (int i = 0; i < n; i++) {
        struct imap_mime_entity part = {0, 0, 0, 0, 0};
        known = known && imap_mime_next_part(raw, NULL, span, boundary, digest, &at, &part) == 0;
        imap_mime_body(out, g_mime_multipart_get_part(mp, i), ext, depth + 1, raw,
                       known ? &part : NULL, w);
    }
    if (n == 0) { /* RFC 3501 needs at least one part: an empty text part */
        buf_str(out, "(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 0 0)");
    }
    buf_str(out, " ");
    imap_mime_upper_string(out, ct != NULL ? g_mime_content_type_get_media_subtype(ct) : NULL,
                           "MIXED");
    if (ext) {
        buf_str(out, " ");
        imap_mime_params(out, ct != NULL ? g_mime_content_type_get_parameters(ct) : NULL, utf8);
        buf_str(out, " ");
        imap_mime_disposition(out, obj, utf8);
        buf_str(out, " NIL NIL");
    }
    buf_str(out, ")");
}

/* The fields every single part has: type subtype params id description encoding size. */
static void
imap_mime_basic(struct buf *out, GMimeObject *obj, const char *encoding, size_t size, int utf8)
{
    GMimeContentType *ct = g_mime_object_get_content_type(obj);
    imap_mime_upper_string(out, ct != NULL ? g_mime_content_type_get_media_type(ct) : NULL, "TEXT");
    buf_str(out, " ");
    imap_mime_upper_string(out, ct != NULL ? g_mime_content_type_get_media_subtype(ct) : NULL,
                           "PLAIN");
    buf_str(out, " ");
    imap_mime_params(out, ct != NULL ? g_mime_content_type_get_parameters(ct) : NULL, utf8);
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "Content-ID", utf8);
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "Content-Description", utf8);
    buf_str(out, " ");
    imap_mime_upper_string(out, encoding, "7BIT");
    buf_printf(out, " %zu", size);
}

static void imap_mime_extension(struct buf *out, GMimeObject *obj, int utf8)
{
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "Content-MD5", utf8);
    buf_str(out, " ");
    imap_mime_disposition(out, obj, utf8);
    buf_str(out, " NIL ");
    imap_mime_nstring_field(out, obj, "Content-Location", utf8);
}

static void imap_mime_message_part(struct buf *out,
                                   GMimeObject *obj,
                                   int ext,
                                   int depth,
                                   const char *raw,
                                   const struct imap_mime_entity *span,
                                   struct imap_mime_walk *w)
{
    int utf8 = w->utf8;
    GMimeMessage *inner = g_mime_message_part_get_message(GMIME_MESSAGE_PART(obj));
    size_t size = 0, lines = 0;
    struct imap_mime_entity message = {0, 0, 0, 1, 0};
    if (span != NULL) { /* the bytes as stored: BODY[n] has exactly this size */
        size = span->end - span->body;
        lines = imap_count_lines(raw + span->body, size);
        imap_mime_cuts_within(w, span->body, span->end, &size, &lines);
        message.begin = span->body;
        message.body = imap_mime_body_start(raw, span->body, span->end);
        message.end = span->end;
    } else if (inner != NULL) {
        w->lost |= w->cut_count > 0; /* which cuts are inside is not known */
        char *text = g_mime_object_to_string(GMIME_OBJECT(inner), NULL);
        size = text != NULL ? strlen(text) : 0;
        lines = text != NULL ? imap_count_lines(text, size) : 0;
        g_free(text);
    }
    char *encoding = imap_mime_field(obj, "Content-Transfer-Encoding");
    buf_str(out, "(");
    imap_mime_basic(out, obj, encoding, size, utf8);
    g_free(encoding);
    buf_str(out, " ");
    if (inner != NULL) {
        struct imap_mime_src src = {.obj = GMIME_OBJECT(inner)};
        imap_mime_envelope_of(out, &src, utf8);
        buf_str(out, " ");
        imap_mime_body(out, g_mime_message_get_mime_part(inner), ext, depth + 1, raw,
                       span != NULL ? &message : NULL, w);
    } else {
        buf_str(out, "(NIL NIL NIL NIL NIL NIL NIL NIL NIL NIL) (\"TEXT\" \"PLAIN\" NIL NIL NIL "
                     "\"7BIT\" 0 0)");
    }
    buf_printf(out, " %zu", lines);
    if (ext) {
        imap_mime_extension(out, obj, utf8);
    }
    buf_str(out, ")");
}

static void imap_mime_body(struct buf *out,
                           GMimeObject *obj,
                           int ext,
                           int depth,
                           const char *raw,
                           const struct imap_mime_entity *span,
                           struct imap_mime_walk *w)
{
    int utf8 = w->utf8;
    if (obj == NULL || depth > IMAP_MIME_DEPTH_MAX) {
        buf_str(out, "(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 0 0)");
        return;
    }
    if (GMIME_IS_MULTIPART(obj)) {
        imap_mime_multipart(out, obj, ext, depth, raw, span, w);
        return;
    }
    if (GMIME_IS_MESSAGE_PART(obj)) {
        imap_mime_message_part(out, obj, ext, depth, raw, span, w);
        return;
    }
    size_t size = 0, lines = 0;
    const char *encoding = NULL;
    if (GMIME_IS_PART(obj)) {
        imap_mime_content_size(w, GMIME_PART(obj), &size, &lines);
        encoding =
            g_mime_content_encoding_to_string(g_mime_part_get_content_encoding(GMIME_PART(obj)));
    }
    GMimeContentType *ct = g_mime_object_get_content_type(obj);
    const char *type = ct != NULL ? g_mime_content_type_get_media_type(ct) : NULL;
    buf_str(out, "(");
    imap_mime_basic(out, obj, encoding, size, utf8);
    if (type == NULL || strcasecmp(type, "text") == 0) {
        buf_printf(out, " %zu", lines);
    }
    if (ext) {
        imap_mime_extension(out, obj, utf8);
    }
    buf_str(out, ")");
}

int imap_mime_bodystructure(const struct imap_mime *m, struct buf *out, int extensible)
{
    GMimeObject *part = m->message != NULL ? g_mime_message_get_mime_part(m->message) : m->top;
    if (m->message == NULL && m->top == NULL) {
        buf_printf(out,
                   "(\"TEXT\" \"PLAIN\" (\"CHARSET\" \"US-ASCII\") NIL NIL \"7BIT\" %zu %zu%s)",
                   m->body_size, m->body_lines, extensible ? " NIL NIL NIL NIL" : "");
        return 0;
    }
    /* The top part has the message's header and body. */
    struct imap_mime_entity top = {0, 0, m->size, 1, 0};
    if (m->raw != NULL) {
        top.body = imap_mime_body_start(m->raw, 0, m->size);
    }
    struct imap_mime_walk w = {
        .utf8 = m->utf8, .raw = m->raw, .len = m->size, .cuts = m->cuts, .cut_count = m->cut_count};
    size_t start = out->len;
    imap_mime_body(out, part, extensible, 0, m->raw, m->raw != NULL ? &top : NULL, &w);
    if (w.lost || w.claimed != w.cut_count) {
        out->len = start; /* a skeleton GMime did not parse as the message: read it whole */
        if (out->data != NULL) {
            out->data[out->len] = '\0';
        }
        return -1;
    }
    return 0;
}

/* ---- BODY[part] ---- */

/* One part number from e (RFC 3501 6.4.5): into a multipart's parts; a message/rfc822 part
 * steps into its message first; a single part has only part 1, itself. */
static int imap_mime_step(const char *raw,
                          struct imap_mime_reading *r,
                          struct imap_mime_entity *e,
                          uint32_t number,
                          int flat)
{
    char *boundary = NULL;
    if (number == 0) {
        return -1;
    }
    enum imap_mime_kind kind = flat ? IMAP_MIME_LEAF : imap_mime_entity_kind(raw, e, &boundary);
    if (!e->message && kind == IMAP_MIME_MESSAGE) {
        e->begin = e->body;
        e->body = imap_mime_body_start_r(raw, e->begin, e->end, r);
        e->message = 1;
        e->digest_child = 0;
        kind = imap_mime_entity_kind(raw, e, &boundary);
    }
    int rc = 0;
    if (kind == IMAP_MIME_MULTIPART || kind == IMAP_MIME_DIGEST) {
        rc = boundary != NULL && boundary[0] != '\0'
                 ? imap_mime_child(raw, r, e, boundary, number, kind == IMAP_MIME_DIGEST)
                 : -1; /* GMime: no parts */
    } else if (number == 1) {
        e->message = 0; /* the same bytes, now as the part */
    } else {
        rc = -1;
    }
    g_free(boundary);
    return rc;
}

int imap_mime_single_part(const char *header, size_t len)
{
    struct imap_mime_entity e = {0, imap_mime_body_start(header, 0, len), len, 1, 0};
    char *boundary = NULL;
    enum imap_mime_kind kind = imap_mime_entity_kind(header, &e, &boundary);
    g_free(boundary);
    return kind == IMAP_MIME_LEAF;
}

int imap_mime_header_settles(const uint32_t *part, size_t count, enum imap_mime_what what)
{
    if (what != IMAP_MIME_CONTENT) {
        return 1; /* a single part's MIME header is the message's; it has no HEADER or TEXT */
    }
    for (size_t i = 0; i < count; i++) {
        if (part[i] != 1) {
            return 1; /* no such part */
        }
    }
    return 0; /* the body itself */
}

void imap_mime_reading_prefix(struct imap_mime_reading *r, const char *raw, size_t n)
{
    const char *lf = n > 0 ? memrchr(raw, '\n', n) : NULL;
    *r = (struct imap_mime_reading){.gap = NULL, .count = 0, .prefix = n, .uncertain = 0};
    r->tail = lf != NULL ? (size_t)(lf - raw) + 1 : 0;
}

int imap_mime_reading_holds(const struct imap_mime_reading *r,
                            int rc,
                            const struct imap_mime_span *span,
                            int partial,
                            uint64_t start,
                            uint64_t length)
{
    if (r->prefix == 0) {
        return 1; /* the whole message */
    }
    if (r->uncertain) {
        return 0;
    }
    if (rc != 0 || span->offset + span->length < r->prefix) {
        return 1; /* no such part, or a range ended before the prefix's end */
    }
    /* open to the prefix's end: the part runs at least to the line break before the first
     * line that may go on past it, which may be a delimiter's */
    uint64_t sure = r->tail >= 2 ? r->tail - 2 : 0;
    return partial && span->offset <= sure && start <= sure - span->offset &&
           length <= sure - span->offset - start;
}

int imap_mime_flat(const char *raw, size_t len)
{
    return imap_mime_over_structure(raw, len, 0);
}

int imap_mime_stand_in_flat(const char *skeleton, size_t len, uint64_t size)
{
    size_t room = IMAP_MIME_STRUCTURE_MAX;
    return size > 2 * (uint64_t)room && imap_mime_structure_lines(skeleton, len) > room;
}

int imap_mime_section(const char *raw,
                      size_t len,
                      const uint32_t *part,
                      size_t count,
                      enum imap_mime_what what,
                      struct imap_mime_span *span)
{
    return imap_mime_section_flat(raw, len, imap_mime_flat(raw, len), NULL, part, count, what,
                                  span);
}

int imap_mime_section_flat(const char *raw,
                           size_t len,
                           int flat,
                           struct imap_mime_reading *r,
                           const uint32_t *part,
                           size_t count,
                           enum imap_mime_what what,
                           struct imap_mime_span *span)
{
    struct imap_mime_entity e = {0, imap_mime_body_start_r(raw, 0, len, r), len, 1, 0};
    if (count == 0 || count > IMAP_MIME_DEPTH_MAX) {
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        if (imap_mime_step(raw, r, &e, part[i], flat) != 0) {
            return -1;
        }
        flat = 0; /* the fallback describes the top message only */
    }
    size_t from = e.body, to = e.end; /* IMAP_MIME_CONTENT */
    if (what == IMAP_MIME_HEADER) {
        from = e.begin;
        to = e.body;
    } else if (what == IMAP_MIME_MESSAGE_HEADER || what == IMAP_MIME_MESSAGE_TEXT) {
        char *boundary = NULL;
        enum imap_mime_kind kind = imap_mime_entity_kind(raw, &e, &boundary);
        g_free(boundary);
        if (kind != IMAP_MIME_MESSAGE) {
            return -1; /* HEADER and TEXT name parts of a message/rfc822 part */
        }
        size_t inner = imap_mime_body_start_r(raw, e.body, e.end, r);
        from = what == IMAP_MIME_MESSAGE_HEADER ? e.body : inner;
        to = what == IMAP_MIME_MESSAGE_HEADER ? inner : e.end;
    }
    span->offset = from;
    span->length = to - from;
    return 0;
}
