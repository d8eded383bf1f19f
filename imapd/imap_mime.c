/*
 * imap_mime.c -- the MIME side of FETCH: ENVELOPE, BODYSTRUCTURE / BODY, and the content of
 * leaf parts (BODY[1.2]) and their MIME headers (BODY[1.2.MIME]), with GMime 3.
 *
 * USAGE
 *   struct imap_mime *m; imap_mime_open(raw, len, &m);   (MV_OK or MV_ENOMEM)
 *   imap_mime_envelope(m, out); imap_mime_bodystructure(m, out, 1);
 *   imap_mime_section(m, part, count, mime_headers, &bytes)  (0, or -1: no such part)
 *   imap_mime_close(&m);
 *
 * IMPLEMENTATION NOTES
 *   - GMime parses a copy of the message with a persistent stream, so each leaf part's
 *     content is a substream of the original bytes: sizes, line counts and BODY[n] are the
 *     part's encoded octets exactly as stored.
 *   - GMime allocates about 1.3 KB per part and 0.5 KB per header field it builds (measured
 *     for the store, see src/store/store_parse.c), so a message with more than
 *     IMAP_MIME_STRUCTURE_MAX lines that could open a part or a field is described as one
 *     text/plain part instead of being handed to GMime; nesting stops at IMAP_MIME_DEPTH_MAX.
 *   - ENVELOPE strings are the raw header values, unfolded (encoded-words left for the
 *     client, as RFC 3501 wants); a display name GMime had to decode from 8-bit is sent
 *     re-encoded as an RFC 2047 word. Sender and Reply-To default to From.
 *
 * LIMITATIONS
 *   BODY[n] of a multipart or message/rfc822 part, and BODY[n.HEADER] / BODY[n.TEXT], are not
 *   served (the caller answers NO); the size of a message/rfc822 part is that of GMime's
 *   re-serialisation of it, which equals the original for well-formed mail.
 */
#include "imap_mime.h"

#include <gmime/gmime.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IMAP_MIME_STRUCTURE_MAX 10000
#define IMAP_MIME_DEPTH_MAX     32

struct imap_mime {
    GMimeMessage *message; /* NULL: not MIME-parsable, described as one text part */
    size_t size;
    size_t lines;
    size_t body_size; /* of the fallback single part */
    size_t body_lines;
};

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

static size_t imap_count_lines(const char *p, size_t len)
{
    size_t n = 0;
    for (const char *q = p; (q = memchr(q, '\n', len - (size_t)(q - p))) != NULL; q++) {
        n++;
    }
    return n;
}

int imap_mime_open(const char *raw, size_t len, struct imap_mime **out)
{
    struct imap_mime *m = calloc(1, sizeof *m);
    *out = NULL;
    if (m == NULL) {
        return MV_ENOMEM;
    }
    m->size = len;
    m->lines = imap_count_lines(raw, len);
    size_t header = len;
    for (size_t i = 0; i + 1 < len; i++) {
        if (raw[i] == '\n' &&
            (raw[i + 1] == '\n' || (raw[i + 1] == '\r' && i + 2 < len && raw[i + 2] == '\n'))) {
            header = i + (raw[i + 1] == '\n' ? 2 : 3);
            break;
        }
    }
    m->body_size = len - header;
    m->body_lines = imap_count_lines(raw + header, len - header);
    if (imap_mime_structure_lines(raw, len) <= IMAP_MIME_STRUCTURE_MAX) {
        GMimeStream *stream = g_mime_stream_mem_new_with_buffer(raw, len);
        GMimeParser *parser = g_mime_parser_new_with_stream(stream);
        g_mime_parser_set_persist_stream(parser, TRUE);
        m->message = g_mime_parser_construct_message(parser, NULL);
        g_object_unref(parser);
        g_object_unref(stream); /* the message's substreams keep it alive */
    }
    *out = m;
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

static void imap_mime_nstring_field(struct buf *out, GMimeObject *obj, const char *name)
{
    char *value = imap_mime_field(obj, name);
    if (value == NULL || value[0] == '\0') {
        buf_str(out, "NIL");
    } else {
        buf_imap_string(out, value, strlen(value));
    }
    g_free(value);
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

static void imap_mime_address(struct buf *out, InternetAddress *ia, int depth);

static void imap_mime_address_list(struct buf *out, InternetAddressList *list, int depth)
{
    int n = list != NULL ? internet_address_list_length(list) : 0;
    for (int i = 0; i < n; i++) {
        imap_mime_address(out, internet_address_list_get_address(list, i), depth);
    }
}

static void imap_mime_address(struct buf *out, InternetAddress *ia, int depth)
{
    const char *name = internet_address_get_name(ia);
    if (INTERNET_ADDRESS_IS_GROUP(ia)) {
        if (depth > 0) {
            return; /* groups do not nest in RFC 5322 */
        }
        buf_str(out, "(NIL NIL ");
        buf_imap_nstring(out, name != NULL ? name : "");
        buf_str(out, " NIL)");
        imap_mime_address_list(out, internet_address_group_get_members(INTERNET_ADDRESS_GROUP(ia)),
                               depth + 1);
        buf_str(out, "(NIL NIL NIL NIL)");
        return;
    }
    const char *addr = internet_address_mailbox_get_addr(INTERNET_ADDRESS_MAILBOX(ia));
    buf_str(out, "(");
    if (name == NULL || name[0] == '\0') {
        buf_str(out, "NIL");
    } else if (imap_mime_ascii(name)) {
        buf_imap_string(out, name, strlen(name));
    } else {
        char *encoded = g_mime_utils_header_encode_phrase(NULL, name, "utf-8");
        buf_imap_nstring(out, encoded);
        g_free(encoded);
    }
    buf_str(out, " NIL ");
    const char *at = addr != NULL ? strrchr(addr, '@') : NULL;
    if (addr == NULL || addr[0] == '\0') {
        buf_str(out, "NIL NIL");
    } else if (at == NULL) {
        buf_imap_string(out, addr, strlen(addr));
        buf_str(out, " NIL");
    } else {
        buf_imap_string(out, addr, (size_t)(at - addr));
        buf_str(out, " ");
        buf_imap_string(out, at + 1, strlen(at + 1));
    }
    buf_str(out, ")");
}

/* An address list field: (addr addr ...) or NIL; fallback names the field to use when this
 * one is absent (Sender, Reply-To -> From). */
static void
imap_mime_addresses(struct buf *out, GMimeObject *obj, const char *name, const char *fallback)
{
    char *value = imap_mime_field(obj, name);
    if ((value == NULL || value[0] == '\0') && fallback != NULL) {
        g_free(value);
        value = imap_mime_field(obj, fallback);
    }
    InternetAddressList *list =
        value != NULL && value[0] != '\0' ? internet_address_list_parse(NULL, value) : NULL;
    g_free(value);
    if (list == NULL || internet_address_list_length(list) == 0) {
        buf_str(out, "NIL");
    } else {
        buf_str(out, "(");
        imap_mime_address_list(out, list, 0);
        buf_str(out, ")");
    }
    if (list != NULL) {
        g_object_unref(list);
    }
}

static void imap_mime_envelope_of(struct buf *out, GMimeObject *obj)
{
    buf_str(out, "(");
    imap_mime_nstring_field(out, obj, "Date");
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "Subject");
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "From", NULL);
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "Sender", "From");
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "Reply-To", "From");
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "To", NULL);
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "Cc", NULL);
    buf_str(out, " ");
    imap_mime_addresses(out, obj, "Bcc", NULL);
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "In-Reply-To");
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "Message-ID");
    buf_str(out, ")");
}

void imap_mime_envelope(const struct imap_mime *m, struct buf *out)
{
    if (m->message == NULL) {
        buf_str(out, "(NIL NIL NIL NIL NIL NIL NIL NIL NIL NIL)");
        return;
    }
    imap_mime_envelope_of(out, GMIME_OBJECT(m->message));
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

static void imap_mime_params(struct buf *out, GMimeParamList *params)
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
        buf_imap_nstring(out, value != NULL ? value : "");
    }
    buf_str(out, ")");
}

static void imap_mime_disposition(struct buf *out, GMimeObject *obj)
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
    imap_mime_params(out, g_mime_content_disposition_get_parameters(d));
    buf_str(out, ")");
}

/* The octets and lines of a leaf part's content, as in the message. */
static void imap_mime_content_size(GMimePart *part, size_t *size, size_t *lines)
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
}

static void imap_mime_body(struct buf *out, GMimeObject *obj, int ext, int depth);

static void imap_mime_multipart(struct buf *out, GMimeObject *obj, int ext, int depth)
{
    GMimeMultipart *mp = GMIME_MULTIPART(obj);
    int n = g_mime_multipart_get_count(mp);
    GMimeContentType *ct = g_mime_object_get_content_type(obj);
    buf_str(out, "(");
    for (int i = 0; i < n; i++) {
        imap_mime_body(out, g_mime_multipart_get_part(mp, i), ext, depth + 1);
    }
    if (n == 0) { /* RFC 3501 needs at least one part: an empty text part */
        buf_str(out, "(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 0 0)");
    }
    buf_str(out, " ");
    imap_mime_upper_string(out, ct != NULL ? g_mime_content_type_get_media_subtype(ct) : NULL,
                           "MIXED");
    if (ext) {
        buf_str(out, " ");
        imap_mime_params(out, ct != NULL ? g_mime_content_type_get_parameters(ct) : NULL);
        buf_str(out, " ");
        imap_mime_disposition(out, obj);
        buf_str(out, " NIL NIL");
    }
    buf_str(out, ")");
}

/* The fields every single part has: type subtype params id description encoding size. */
static void imap_mime_basic(struct buf *out, GMimeObject *obj, const char *encoding, size_t size)
{
    GMimeContentType *ct = g_mime_object_get_content_type(obj);
    imap_mime_upper_string(out, ct != NULL ? g_mime_content_type_get_media_type(ct) : NULL, "TEXT");
    buf_str(out, " ");
    imap_mime_upper_string(out, ct != NULL ? g_mime_content_type_get_media_subtype(ct) : NULL,
                           "PLAIN");
    buf_str(out, " ");
    imap_mime_params(out, ct != NULL ? g_mime_content_type_get_parameters(ct) : NULL);
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "Content-ID");
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "Content-Description");
    buf_str(out, " ");
    imap_mime_upper_string(out, encoding, "7BIT");
    buf_printf(out, " %zu", size);
}

static void imap_mime_extension(struct buf *out, GMimeObject *obj)
{
    buf_str(out, " ");
    imap_mime_nstring_field(out, obj, "Content-MD5");
    buf_str(out, " ");
    imap_mime_disposition(out, obj);
    buf_str(out, " NIL ");
    imap_mime_nstring_field(out, obj, "Content-Location");
}

static void imap_mime_message_part(struct buf *out, GMimeObject *obj, int ext, int depth)
{
    GMimeMessage *inner = g_mime_message_part_get_message(GMIME_MESSAGE_PART(obj));
    char *text = inner != NULL ? g_mime_object_to_string(GMIME_OBJECT(inner), NULL) : NULL;
    size_t size = text != NULL ? strlen(text) : 0;
    size_t lines = text != NULL ? imap_count_lines(text, size) : 0;
    g_free(text);
    char *encoding = imap_mime_field(obj, "Content-Transfer-Encoding");
    buf_str(out, "(");
    imap_mime_basic(out, obj, encoding, size);
    g_free(encoding);
    buf_str(out, " ");
    if (inner != NULL) {
        imap_mime_envelope_of(out, GMIME_OBJECT(inner));
        buf_str(out, " ");
        imap_mime_body(out, g_mime_message_get_mime_part(inner), ext, depth + 1);
    } else {
        buf_str(out, "(NIL NIL NIL NIL NIL NIL NIL NIL NIL NIL) (\"TEXT\" \"PLAIN\" NIL NIL NIL "
                     "\"7BIT\" 0 0)");
    }
    buf_printf(out, " %zu", lines);
    if (ext) {
        imap_mime_extension(out, obj);
    }
    buf_str(out, ")");
}

static void imap_mime_body(struct buf *out, GMimeObject *obj, int ext, int depth)
{
    if (obj == NULL || depth > IMAP_MIME_DEPTH_MAX) {
        buf_str(out, "(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 0 0)");
        return;
    }
    if (GMIME_IS_MULTIPART(obj)) {
        imap_mime_multipart(out, obj, ext, depth);
        return;
    }
    if (GMIME_IS_MESSAGE_PART(obj)) {
        imap_mime_message_part(out, obj, ext, depth);
        return;
    }
    size_t size = 0, lines = 0;
    const char *encoding = NULL;
    if (GMIME_IS_PART(obj)) {
        imap_mime_content_size(GMIME_PART(obj), &size, &lines);
        encoding =
            g_mime_content_encoding_to_string(g_mime_part_get_content_encoding(GMIME_PART(obj)));
    }
    GMimeContentType *ct = g_mime_object_get_content_type(obj);
    const char *type = ct != NULL ? g_mime_content_type_get_media_type(ct) : NULL;
    buf_str(out, "(");
    imap_mime_basic(out, obj, encoding, size);
    if (type == NULL || strcasecmp(type, "text") == 0) {
        buf_printf(out, " %zu", lines);
    }
    if (ext) {
        imap_mime_extension(out, obj);
    }
    buf_str(out, ")");
}

void imap_mime_bodystructure(const struct imap_mime *m, struct buf *out, int extensible)
{
    if (m->message == NULL) {
        buf_printf(out,
                   "(\"TEXT\" \"PLAIN\" (\"CHARSET\" \"US-ASCII\") NIL NIL \"7BIT\" %zu %zu%s)",
                   m->body_size, m->body_lines, extensible ? " NIL NIL NIL NIL" : "");
        return;
    }
    imap_mime_body(out, g_mime_message_get_mime_part(m->message), extensible, 0);
}

/* ---- BODY[part] ---- */

static GMimeObject *imap_mime_find(const struct imap_mime *m, const uint32_t *part, size_t count)
{
    GMimeObject *obj = m->message != NULL ? g_mime_message_get_mime_part(m->message) : NULL;
    for (size_t i = 0; obj != NULL && i < count; i++) {
        if (GMIME_IS_MESSAGE_PART(obj)) {
            GMimeMessage *inner = g_mime_message_part_get_message(GMIME_MESSAGE_PART(obj));
            obj = inner != NULL ? g_mime_message_get_mime_part(inner) : NULL;
            if (obj == NULL) {
                return NULL;
            }
        }
        if (GMIME_IS_MULTIPART(obj)) {
            GMimeMultipart *mp = GMIME_MULTIPART(obj);
            if (part[i] > (uint32_t)g_mime_multipart_get_count(mp)) {
                return NULL;
            }
            obj = g_mime_multipart_get_part(mp, (int)part[i] - 1);
        } else if (part[i] != 1) {
            return NULL; /* a single part has only part 1 */
        }
    }
    return obj;
}

int imap_mime_section(const struct imap_mime *m,
                      const uint32_t *part,
                      size_t count,
                      int mime_headers,
                      struct buf *bytes)
{
    GMimeObject *obj = imap_mime_find(m, part, count);
    if (obj == NULL) {
        return -1;
    }
    if (mime_headers) {
        GMimeFormatOptions *opts = g_mime_format_options_new();
        g_mime_format_options_set_newline_format(opts, GMIME_NEWLINE_FORMAT_DOS);
        char *headers = g_mime_object_get_headers(obj, opts);
        g_mime_format_options_free(opts);
        if (headers != NULL) {
            buf_str(bytes, headers);
        }
        buf_str(bytes, "\r\n");
        g_free(headers);
        return 0;
    }
    if (!GMIME_IS_PART(obj)) {
        return -1;
    }
    GMimeDataWrapper *w = g_mime_part_get_content(GMIME_PART(obj));
    GMimeStream *s = w != NULL ? g_mime_data_wrapper_get_stream(w) : NULL;
    char chunk[8192];
    ssize_t n;
    if (s == NULL || g_mime_stream_reset(s) != 0) {
        return 0; /* an empty part */
    }
    while ((n = g_mime_stream_read(s, chunk, sizeof chunk)) > 0) {
        buf_add(bytes, chunk, (size_t)n);
    }
    (void)g_mime_stream_reset(s);
    return 0;
}
