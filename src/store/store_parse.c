/*
 * store_parse.c -- reads one raw message with GMime 3 and gives the store what it indexes
 * (decoded header fields, body text) and what it stores apart (the byte ranges of the large
 * leaf parts). See store_parse.h for the contract.
 *
 * USAGE
 *   store_parse(raw, len, &limits, STORE_SPLIT_MIN, &parsed, err, sizeof err);
 *   ... store_parsed_free(&parsed);
 *
 * IMPLEMENTATION NOTES
 *   1. Limits first, without GMime: one pass over the top-level header block counts the
 *      fields and measures each folded field, so an oversized header fails before GMime
 *      allocates anything for it. A second pass counts the body lines that could make GMime
 *      build an object (a line starting with "--" may open a part, a line "name:" may be a
 *      header field; GMime builds nothing for other lines). Past STORE_PARSE_STRUCTURE_MAX
 *      GMime is shown only the header block: measured with GMime 3.2, a part costs it about
 *      1.3 KB and a header field about 0.5 KB, so 5 MB of "--b\n\n" would take 1.3 GB.
 *   2. No copy of the message: GMime reads a GMimeStreamMem whose GByteArray wraps the
 *      caller's buffer (the stream does not own it and nothing writes to it). With a
 *      persistent stream the parser gives each leaf part a substream of that same stream,
 *      so a part's content stream bounds are offsets into raw. A range is taken only when
 *      that is proven: the content stream is a GMimeStreamMem over our very array, with
 *      bounds inside it, after the previous range.
 *   3. Text is decoded through a filter stream (transfer decoding, then the declared charset
 *      to UTF-8) and read in chunks, so at most the text cap (4x for HTML, before stripping)
 *      is held per part. NUL bytes become spaces. Undeclared 8-bit text that is not UTF-8 is
 *      read as ISO-8859-1 (it never fails and is what such mail usually is); text that is
 *      still invalid has its bad sequences replaced with U+FFFD.
 *   4. In a multipart/alternative that has a text/plain part, its text/html siblings are
 *      not indexed: the same words twice would only use up the text cap.
 *
 * LIMITATIONS
 *   - Only text/plain and text/html bodies are indexed (not text/calendar, not PDFs).
 *   - A message whose first line is not a header field (nor empty, nor an mbox "From "
 *     line) has no header block for GMime: it returns no message, and every field, the
 *     text and the parts are left empty.
 *   - Of repeated single-valued fields (Subject, Date, Message-ID) GMime keeps the last;
 *     repeated From/To/Cc are merged.
 *   - GMime itself stops nesting at 1024 levels; this walk stops at STORE_PARSE_DEPTH_MAX.
 */
#include "store/store_parse.h"
#include "crypto/crypt.h"

#include <assert.h>
#include <gmime/gmime.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* HTML read per part, before stripping */
#define PARSE_HTML_IN_MAX ((size_t)4 * STORE_PARSE_TEXT_MAX)
#define PARSE_READ_CHUNK  4096
#define PARSE_ENTITY_MAX  12 /* longest entity looked at, "&#x10FFFF;" plus room */

struct parse_buf {
    char *data; /* malloc'd */
    size_t len;
    size_t cap;
};

struct parse_walk {
    const GByteArray *array; /* the bytes GMime reads: raw itself (the proof of a range) */
    size_t split_min;
    int no_text;    /* STORE_PARSE_NO_TEXT: no body text, no header text */
    size_t visited; /* MIME objects seen, against STORE_PARSE_PARTS_MAX */
    struct parse_buf text;
    struct store_part_range *parts;
    size_t part_count;
    size_t part_cap;
    int oom;
};

static pthread_once_t parse_once = PTHREAD_ONCE_INIT;

/* GLib makes a GObject class on the first use of its type, under a lock of its own that
 * ThreadSanitizer cannot see (GLib is not instrumented), and the parser's later type checks
 * (GMIME_IS_PART, ...) read the class without one: two workers parsing their first messages
 * at once were reported as racing. So every type the parser can make is given its class
 * here, once, under pthread_once (which orders it before every later parse on any thread).
 * The references are kept: static types' classes live as long as the process anyway. */
static void parse_init_once(void)
{
    g_mime_init();
    GType (*const types[])(void) = {
        g_mime_object_get_type,
        g_mime_message_get_type,
        g_mime_part_get_type,
        g_mime_text_part_get_type,
        g_mime_multipart_get_type,
        g_mime_multipart_encrypted_get_type,
        g_mime_multipart_signed_get_type,
        g_mime_message_part_get_type,
        g_mime_message_partial_get_type,
        g_mime_application_pkcs7_mime_get_type,
        g_mime_parser_get_type,
        g_mime_stream_get_type,
        g_mime_stream_mem_get_type,
        g_mime_stream_filter_get_type,
        g_mime_stream_null_get_type,
        g_mime_filter_get_type,
        g_mime_filter_basic_get_type,
        g_mime_filter_charset_get_type,
        g_mime_data_wrapper_get_type,
        g_mime_content_type_get_type,
        g_mime_content_disposition_get_type,
        g_mime_header_list_get_type,
        g_mime_header_get_type,
        g_mime_param_list_get_type,
        g_mime_param_get_type,
        internet_address_get_type,
        internet_address_list_get_type,
        internet_address_mailbox_get_type,
        internet_address_group_get_type,
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        (void)g_type_class_ref(types[i]());
    }
}

void store_parse_init(void)
{
    int rc = pthread_once(&parse_once, parse_init_once);
    assert(rc == 0);
    (void)rc;
}

__attribute__((format(printf, 4, 5))) static int
parse_fail(char *err, size_t err_size, int code, const char *fmt, ...)
{
    if (err != NULL && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---- Limits: the top-level header block, scanned by hand ------------------------------- */

/* Whether line (n bytes, no line break) starts a header field as GMime reads one: a name of
 * bytes other than ':', blanks and controls (possibly empty), optional blanks, then ':'. */
static int parse_is_field_line(const uint8_t *line, size_t n)
{
    size_t i = 0;
    while (i < n && line[i] != ':' && line[i] > ' ' && line[i] != 0x7f) {
        i++;
    }
    while (i < n && (line[i] == ' ' || line[i] == '\t')) {
        i++;
    }
    return i < n && line[i] == ':';
}

/* The end of the line that starts at pos (index of its '\n', or len), and where the next
 * line starts. */
static size_t parse_line_end(const uint8_t *raw, size_t len, size_t pos, size_t *next)
{
    const uint8_t *nl = memchr(raw + pos, '\n', len - pos);
    size_t end = nl != NULL ? (size_t)(nl - raw) : len;
    *next = nl != NULL ? end + 1 : len;
    return end;
}

static int
parse_field_size_check(size_t size, const struct mv_limits *limits, char *err, size_t err_size)
{
    if (size > limits->header_size_max) {
        return parse_fail(err, err_size, MV_ELIMIT,
                          "header_size_max: a header field of %zu bytes (limit %u)", size,
                          (unsigned)limits->header_size_max);
    }
    return MV_OK;
}

/* Counts the fields of the top-level header block and checks each one's folded size.
 * *body_start gets the offset just past the empty line that ends the block (len if none). */
static int parse_scan_headers(const uint8_t *raw,
                              size_t len,
                              const struct mv_limits *limits,
                              size_t *body_start,
                              char *err,
                              size_t err_size)
{
    size_t pos = 0, count = 0, field_start = 0, field_end = 0;
    int in_field = 0, rc = MV_OK;
    while (pos < len && rc == MV_OK) {
        size_t next;
        size_t end = parse_line_end(raw, len, pos, &next);
        size_t content_end = (end > pos && raw[end - 1] == '\r') ? end - 1 : end;
        if (content_end == pos) {
            pos = next; /* the empty line: the body starts after it */
            break;
        }
        if (raw[pos] == ' ' || raw[pos] == '\t') {
            field_end = in_field ? content_end : field_end; /* a folded continuation */
        } else {
            if (in_field) {
                rc = parse_field_size_check(field_end - field_start, limits, err, err_size);
            }
            in_field = parse_is_field_line(raw + pos, content_end - pos);
            if (in_field && ++count > limits->header_count_max) {
                rc = parse_fail(err, err_size, MV_ELIMIT,
                                "header_count_max: more than %u header fields",
                                (unsigned)limits->header_count_max);
            }
            field_start = pos;
            field_end = content_end;
        }
        pos = next;
    }
    if (rc == MV_OK && in_field) {
        rc = parse_field_size_check(field_end - field_start, limits, err, err_size);
    }
    *body_start = pos;
    return rc;
}

/* Whether the body has more lines that could become a GMime part or header than
 * STORE_PARSE_STRUCTURE_MAX (see IMPLEMENTATION NOTES 1). */
static int parse_body_too_structured(const uint8_t *raw, size_t len, size_t pos)
{
    size_t count = 0;
    while (pos < len) {
        size_t next;
        size_t end = parse_line_end(raw, len, pos, &next);
        int dashes = end - pos >= 2 && raw[pos] == '-' && raw[pos + 1] == '-';
        if ((dashes || parse_is_field_line(raw + pos, end - pos)) &&
            ++count > STORE_PARSE_STRUCTURE_MAX) {
            return 1;
        }
        pos = next;
    }
    return 0;
}

/* ---- Buffers and UTF-8 ----------------------------------------------------------------- */

static int parse_buf_append(struct parse_buf *b, const char *data, size_t n)
{
    if (b->data == NULL || b->cap - b->len < n + 1) {
        size_t cap = b->cap > 0 ? b->cap : 256;
        while (cap - b->len < n + 1) {
            cap *= 2;
        }
        char *grown = crypt_realloc_wiped(b->data, cap);
        if (grown == NULL) {
            return MV_ENOMEM;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return MV_OK;
}

/* A malloc'd copy of text (NULL: "") with line breaks removed (unfolding), leading and
 * trailing blanks trimmed, and any invalid UTF-8 replaced. NULL only if out of memory. */
static char *parse_text_dup(const char *text)
{
    const char *s = text != NULL ? text : "";
    gchar *valid = NULL;
    if (!g_utf8_validate(s, -1, NULL)) {
        valid = g_utf8_make_valid(s, -1);
        s = valid;
    }
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    if (out != NULL) {
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            if (s[i] != '\r' && s[i] != '\n' && (o > 0 || (s[i] != ' ' && s[i] != '\t'))) {
                out[o++] = s[i];
            }
        }
        while (o > 0 && (out[o - 1] == ' ' || out[o - 1] == '\t')) {
            o--;
        }
        out[o] = '\0';
    }
    if (valid != NULL) {
        crypt_wipe(valid, strlen(valid));
        g_free(valid);
    }
    return out;
}

/* Drops an incomplete UTF-8 sequence cut off at the end of data (after a capped read). */
static size_t parse_utf8_trim_cut(const char *data, size_t len)
{
    size_t i = len, back = 0;
    while (i > 0 && back < 3 && ((unsigned char)data[i - 1] & 0xc0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) {
        return len;
    }
    unsigned char lead = (unsigned char)data[i - 1];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    return (lead >= 0xc0 && len - (i - 1) < need) ? i - 1 : len;
}

/* Makes b NUL-free valid UTF-8: NUL -> ' '; undeclared non-UTF-8 read as ISO-8859-1;
 * anything still invalid replaced with U+FFFD. */
static int parse_make_utf8(struct parse_buf *b, int declared)
{
    for (size_t i = 0; i < b->len; i++) {
        if (b->data[i] == '\0') {
            b->data[i] = ' ';
        }
    }
    if (b->len == 0 || g_utf8_validate(b->data, (gssize)b->len, NULL)) {
        return MV_OK;
    }
    gsize fixed_len = 0;
    gchar *fixed = NULL;
    if (!declared) {
        fixed = g_convert(b->data, (gssize)b->len, "UTF-8", "ISO-8859-1", NULL, &fixed_len, NULL);
    }
    if (fixed == NULL) {
        fixed = g_utf8_make_valid(b->data, (gssize)b->len);
        fixed_len = strlen(fixed);
    }
    b->len = 0;
    int rc = parse_buf_append(b, fixed, (size_t)fixed_len);
    crypt_wipe(fixed, (size_t)fixed_len);
    g_free(fixed);
    return rc;
}

/* ---- HTML ------------------------------------------------------------------------------ */

/* Index of the first case-insensitive match of needle in s[from, len), or len. */
static size_t parse_find_ci(const char *s, size_t len, size_t from, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = from; i + n <= len; i++) {
        if (g_ascii_strncasecmp(s + i, needle, n) == 0) {
            return i;
        }
    }
    return len;
}

/* Where the tag (or comment, or script/style element) starting at s[at] == '<' ends. */
static size_t parse_html_skip_tag(const char *s, size_t len, size_t at)
{
    if (len - at >= 4 && memcmp(s + at, "<!--", 4) == 0) {
        size_t end = parse_find_ci(s, len, at + 4, "-->");
        return end == len ? len : end + 3;
    }
    size_t name = at + 1, name_end = name;
    while (name_end < len && g_ascii_isalnum(s[name_end])) {
        name_end++;
    }
    const char *close = NULL;
    if (name_end - name == 6 && g_ascii_strncasecmp(s + name, "script", 6) == 0) {
        close = "</script";
    } else if (name_end - name == 5 && g_ascii_strncasecmp(s + name, "style", 5) == 0) {
        close = "</style";
    }
    size_t from = close != NULL ? parse_find_ci(s, len, name_end, close) : name_end;
    const char *gt = from < len ? memchr(s + from, '>', len - from) : NULL;
    return gt != NULL ? (size_t)(gt - s) + 1 : len;
}

/* The code point of an entity body (between '&' and ';'), or 0 if it is not one we know. */
static gunichar parse_html_entity_value(const char *name, size_t n)
{
    static const struct {
        const char *name;
        gunichar value;
    } named[] = {{"amp", '&'},  {"lt", '<'},    {"gt", '>'},
                 {"quot", '"'}, {"apos", '\''}, {"nbsp", ' '}};
    if (n >= 2 && name[0] == '#') {
        int hex = name[1] == 'x' || name[1] == 'X';
        size_t i = hex ? 2 : 1;
        gunichar value = 0;
        if (i == n || n - i > 7) {
            return 0;
        }
        for (; i < n; i++) {
            int digit = hex ? g_ascii_xdigit_value(name[i]) : g_ascii_digit_value(name[i]);
            if (digit < 0) {
                return 0;
            }
            value = value * (hex ? 16u : 10u) + (gunichar)digit;
        }
        return g_unichar_validate(value) ? value : 0;
    }
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
        if (strlen(named[k].name) == n && memcmp(named[k].name, name, n) == 0) {
            return named[k].value;
        }
    }
    return 0;
}

/* Decodes the entity at s[*at] == '&' into dst (dst <= s + *at: the output of an entity is
 * never longer than its text), advances *at, returns the bytes written. */
static size_t parse_html_entity(char *s, size_t len, size_t *at, char *dst)
{
    size_t limit = len - *at < PARSE_ENTITY_MAX ? len : *at + PARSE_ENTITY_MAX;
    const char *semi = memchr(s + *at, ';', limit - *at);
    gunichar value = 0;
    if (semi != NULL) {
        value = parse_html_entity_value(s + *at + 1, (size_t)(semi - s) - *at - 1);
    }
    if (value == 0) {
        *dst = '&';
        (*at)++;
        return 1;
    }
    char utf8[6];
    size_t n = (size_t)g_unichar_to_utf8(value, utf8);
    size_t consumed = (size_t)(semi - s) + 1 - *at;
    assert(n <= consumed);
    memmove(dst, utf8, n);
    *at += consumed;
    return n;
}

/* Strips tags, comments, script and style elements and decodes the common entities, in
 * place; returns the new length. Why a tag remover and not an HTML parser: the text only
 * feeds the full-text index, where a stray fragment of markup costs one useless token,
 * while a real HTML5 parser would be the largest and most exposed code in the store. The
 * output is never longer than the input and stays valid UTF-8: only runs delimited by
 * ASCII bytes are removed, and entities become whole characters. */
static size_t parse_html_strip(char *s, size_t len)
{
    size_t in = 0, out = 0;
    while (in < len) {
        if (s[in] == '<') {
            in = parse_html_skip_tag(s, len, in);
            if (out > 0 && s[out - 1] != ' ') {
                s[out++] = ' '; /* "a<br>b" must not become one word */
            }
        } else if (s[in] == '&') {
            out += parse_html_entity(s, len, &in, s + out);
        } else {
            s[out++] = s[in++];
        }
    }
    return out;
}

/* ---- Text ------------------------------------------------------------------------------ */

/* Reads content decoded (transfer encoding, then charset -> UTF-8 if declared and known) into
 * out, at most max bytes. *converted: a charset filter was applied. */
static int parse_decode(GMimeDataWrapper *content,
                        const char *charset,
                        size_t max,
                        struct parse_buf *out,
                        int *converted)
{
    GMimeStream *source = g_mime_data_wrapper_get_stream(content);
    *converted = 0;
    if (source == NULL || g_mime_stream_reset(source) != 0) {
        return MV_OK;
    }
    GMimeStream *filtered = g_mime_stream_filter_new(source);
    GMimeContentEncoding encoding = g_mime_data_wrapper_get_encoding(content);
    if (encoding == GMIME_CONTENT_ENCODING_BASE64 ||
        encoding == GMIME_CONTENT_ENCODING_QUOTEDPRINTABLE ||
        encoding == GMIME_CONTENT_ENCODING_UUENCODE) {
        GMimeFilter *decoder = g_mime_filter_basic_new(encoding, FALSE);
        g_mime_stream_filter_add(GMIME_STREAM_FILTER(filtered), decoder);
        g_object_unref(decoder);
    }
    if (charset != NULL && g_ascii_strcasecmp(charset, "utf-8") != 0 &&
        g_ascii_strcasecmp(charset, "us-ascii") != 0) {
        GMimeFilter *convert = g_mime_filter_charset_new(charset, "UTF-8");
        if (convert != NULL) { /* NULL: a charset iconv does not know */
            g_mime_stream_filter_add(GMIME_STREAM_FILTER(filtered), convert);
            g_object_unref(convert);
            *converted = 1;
        }
    }
    int rc = MV_OK;
    char chunk[PARSE_READ_CHUNK];
    while (rc == MV_OK && out->len < max) {
        ssize_t n = g_mime_stream_read(filtered, chunk, sizeof chunk);
        if (n <= 0) {
            break;
        }
        size_t take = (size_t)n < max - out->len ? (size_t)n : max - out->len;
        rc = parse_buf_append(out, chunk, take);
    }
    g_object_unref(filtered);
    return rc;
}

/* Appends valid UTF-8 to the message text, after a '\n' separator, cut at a character
 * boundary so the text stays within STORE_PARSE_TEXT_MAX. */
static int parse_text_append(struct parse_walk *w, const char *data, size_t n)
{
    size_t sep = w->text.len > 0 ? 1 : 0;
    if (n == 0 || w->text.len + sep >= STORE_PARSE_TEXT_MAX) {
        return MV_OK;
    }
    size_t room = STORE_PARSE_TEXT_MAX - w->text.len - sep;
    if (n > room) {
        n = room;
        while (n > 0 && ((unsigned char)data[n] & 0xc0) == 0x80) {
            n--;
        }
    }
    int rc = sep ? parse_buf_append(&w->text, "\n", 1) : MV_OK;
    return rc == MV_OK ? parse_buf_append(&w->text, data, n) : rc;
}

static void
parse_add_text(struct parse_walk *w, GMimeObject *part, GMimeDataWrapper *content, int html)
{
    if (w->text.len >= STORE_PARSE_TEXT_MAX) {
        return;
    }
    const char *charset = g_mime_object_get_content_type_parameter(part, "charset");
    size_t max = html ? PARSE_HTML_IN_MAX : STORE_PARSE_TEXT_MAX - w->text.len + 4;
    struct parse_buf decoded = {NULL, 0, 0};
    int converted = 0;
    int rc = parse_decode(content, charset, max, &decoded, &converted);
    if (rc == MV_OK && decoded.len == max) {
        decoded.len = parse_utf8_trim_cut(decoded.data, decoded.len);
    }
    int declared = converted || (charset != NULL && g_ascii_strcasecmp(charset, "utf-8") == 0);
    if (rc == MV_OK) {
        rc = parse_make_utf8(&decoded, declared);
    }
    if (rc == MV_OK && html) {
        decoded.len = parse_html_strip(decoded.data, decoded.len);
    }
    if (rc == MV_OK) {
        rc = parse_text_append(w, decoded.data, decoded.len);
    }
    crypt_free_wiped(decoded.data);
    w->oom |= rc != MV_OK;
}

/* ---- Parts ----------------------------------------------------------------------------- */

/* Records the range of a leaf part's encoded content, if it is provably a view of raw. */
static void parse_add_range(struct parse_walk *w, GMimeStream *stream)
{
    if (stream == NULL || !GMIME_IS_STREAM_MEM(stream) ||
        g_mime_stream_mem_get_byte_array(GMIME_STREAM_MEM(stream)) != w->array) {
        return; /* not a substream of ours: no proof of where its bytes are */
    }
    gint64 size = (gint64)w->array->len;
    gint64 start = stream->bound_start;
    gint64 end = stream->bound_end == -1 ? size : stream->bound_end;
    /* (1) inside raw, (2) large enough, (3) after the previous range */
    if (start < 0 || end < start || end > size) {
        return;
    }
    if ((uint64_t)(end - start) < w->split_min) {
        return;
    }
    if (w->part_count > 0 && (uint64_t)start < w->parts[w->part_count - 1].end) {
        return;
    }
    if (w->part_count == w->part_cap) {
        size_t cap = w->part_cap > 0 ? w->part_cap * 2 : 8;
        struct store_part_range *grown = realloc(w->parts, cap * sizeof *grown);
        if (grown == NULL) {
            w->oom = 1;
            return;
        }
        w->parts = grown;
        w->part_cap = cap;
    }
    w->parts[w->part_count].start = (uint64_t)start;
    w->parts[w->part_count].end = (uint64_t)end;
    w->part_count++;
}

static void parse_leaf(struct parse_walk *w, GMimePart *part, int skip_html)
{
    GMimeDataWrapper *content = g_mime_part_get_content(part);
    if (content == NULL) {
        return;
    }
    parse_add_range(w, g_mime_data_wrapper_get_stream(content));
    GMimeContentType *type = g_mime_object_get_content_type(GMIME_OBJECT(part));
    if (type == NULL || w->no_text) {
        return;
    }
    if (g_mime_content_type_is_type(type, "text", "plain")) {
        parse_add_text(w, GMIME_OBJECT(part), content, 0);
    } else if (!skip_html && g_mime_content_type_is_type(type, "text", "html")) {
        parse_add_text(w, GMIME_OBJECT(part), content, 1);
    }
}

/* Whether multipart is a multipart/alternative with a text/plain child. */
static int parse_alternative_has_plain(GMimeMultipart *multipart)
{
    GMimeContentType *type = g_mime_object_get_content_type(GMIME_OBJECT(multipart));
    if (type == NULL || !g_mime_content_type_is_type(type, "multipart", "alternative")) {
        return 0;
    }
    int count = g_mime_multipart_get_count(multipart);
    for (int i = 0; i < count; i++) {
        GMimeObject *child = g_mime_multipart_get_part(multipart, i);
        GMimeContentType *child_type = child != NULL ? g_mime_object_get_content_type(child) : NULL;
        if (child_type != NULL && g_mime_content_type_is_type(child_type, "text", "plain")) {
            return 1;
        }
    }
    return 0;
}

/* Visits obj and what it contains, depth first, in document order (so ranges ascend). */
static void parse_walk_object(struct parse_walk *w, GMimeObject *obj, unsigned depth, int skip_html)
{
    if (obj == NULL || w->oom || depth > STORE_PARSE_DEPTH_MAX ||
        w->visited >= STORE_PARSE_PARTS_MAX) {
        return;
    }
    w->visited++;
    if (GMIME_IS_MULTIPART(obj)) {
        GMimeMultipart *multipart = GMIME_MULTIPART(obj);
        int count = g_mime_multipart_get_count(multipart);
        int has_plain = parse_alternative_has_plain(multipart);
        for (int i = 0; i < count; i++) {
            parse_walk_object(w, g_mime_multipart_get_part(multipart, i), depth + 1, has_plain);
        }
    } else if (GMIME_IS_MESSAGE_PART(obj)) {
        GMimeMessage *inner = g_mime_message_part_get_message(GMIME_MESSAGE_PART(obj));
        if (inner != NULL) {
            parse_walk_object(w, g_mime_message_get_mime_part(inner), depth + 1, 0);
        }
    } else if (GMIME_IS_PART(obj)) {
        parse_leaf(w, GMIME_PART(obj), skip_html);
    }
}

/* ---- Header fields --------------------------------------------------------------------- */

/* Whether id[0, n) is a msg-id worth keeping: not empty, no blanks, controls or angle
 * brackets, valid UTF-8. */
static int parse_msgid_ok(const char *id, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c <= ' ' || c == 0x7f || c == '<' || c == '>') {
            return 0;
        }
    }
    return n > 0 && g_utf8_validate(id, (gssize)n, NULL);
}

/* A malloc'd copy of the msg-id GMime decoded (already without <>), or "" when there is
 * none or it is not one. NULL only if out of memory. */
static char *parse_msgid_dup(const char *id)
{
    return parse_text_dup(id != NULL && parse_msgid_ok(id, strlen(id)) ? id : "");
}

static char *parse_addresses_dup(InternetAddressList *list)
{
    if (list == NULL || internet_address_list_length(list) == 0) {
        return parse_text_dup("");
    }
    char *text = internet_address_list_to_string(list, NULL, FALSE);
    char *out = parse_text_dup(text);
    if (text != NULL) {
        crypt_wipe(text, strlen(text));
        g_free(text);
    }
    return out;
}

struct parse_ids {
    char **ids; /* malloc'd, each malloc'd */
    size_t count;
    size_t cap;
};

static int parse_ids_add(struct parse_ids *ids, const char *id, size_t n)
{
    if (!parse_msgid_ok(id, n)) {
        return MV_OK; /* skipped, and the next one is still read */
    }
    if (ids->count == ids->cap) {
        size_t cap = ids->cap > 0 ? ids->cap * 2 : 8;
        char **grown = realloc(ids->ids, cap * sizeof *grown);
        if (grown == NULL) {
            return MV_ENOMEM;
        }
        ids->ids = grown;
        ids->cap = cap;
    }
    char *copy = strndup(id, n);
    if (copy == NULL) {
        return MV_ENOMEM;
    }
    ids->ids[ids->count++] = copy;
    return MV_OK;
}

/* The valid msg-ids of header name, in order: the contents of each "<...>". Not GMime's
 * references parser, because it stops at the first malformed id and loses the valid ones
 * after it; GMime reads only a value without any '<' (bare ids, from broken mailers). */
static int parse_ids_collect(GMimeMessage *message, const char *name, struct parse_ids *ids)
{
    const char *value = g_mime_object_get_header(GMIME_OBJECT(message), name);
    int rc = MV_OK;
    if (value == NULL) {
        return MV_OK;
    }
    if (strchr(value, '<') == NULL) {
        GMimeReferences *refs = g_mime_references_parse(NULL, value);
        int count = refs != NULL ? g_mime_references_length(refs) : 0;
        for (int i = 0; i < count && rc == MV_OK; i++) {
            const char *id = g_mime_references_get_message_id(refs, i);
            rc = id != NULL ? parse_ids_add(ids, id, strlen(id)) : MV_OK;
        }
        if (refs != NULL) {
            g_mime_references_free(refs);
        }
        return rc;
    }
    for (const char *open = strchr(value, '<'); open != NULL && rc == MV_OK;
         open = strchr(open + 1, '<')) {
        const char *close = strchr(open + 1, '>');
        if (close == NULL) {
            break;
        }
        rc = parse_ids_add(ids, open + 1, (size_t)(close - open - 1));
        open = close;
    }
    return rc;
}

/* In-Reply-To: its first valid msg-id. References: all, keeping the first and the last
 * STORE_PARSE_REFERENCES_MAX - 1 when there are more (the root and the nearest ancestors
 * are what threading needs). */
static int parse_threading(GMimeMessage *message, struct store_parsed *out)
{
    struct parse_ids ids = {NULL, 0, 0};
    int rc = parse_ids_collect(message, "In-Reply-To", &ids);
    if (rc == MV_OK) {
        out->in_reply_to = parse_text_dup(ids.count > 0 ? ids.ids[0] : "");
        rc = out->in_reply_to != NULL ? MV_OK : MV_ENOMEM;
    }
    for (size_t i = 0; i < ids.count; i++) {
        crypt_free_wiped(ids.ids[i]);
    }
    ids.count = 0;
    rc = rc == MV_OK ? parse_ids_collect(message, "References", &ids) : rc;
    if (ids.count > STORE_PARSE_REFERENCES_MAX) {
        size_t drop = ids.count - STORE_PARSE_REFERENCES_MAX;
        for (size_t i = 1; i <= drop; i++) {
            crypt_free_wiped(ids.ids[i]);
        }
        memmove(ids.ids + 1, ids.ids + 1 + drop, (ids.count - 1 - drop) * sizeof *ids.ids);
        ids.count = STORE_PARSE_REFERENCES_MAX;
    }
    out->references = ids.count > 0 ? ids.ids : NULL;
    out->reference_count = ids.count;
    if (ids.count == 0) {
        free(ids.ids);
    }
    return rc;
}

/* The header's fields as text for the full-text index: "Name: value\n" with GMime's
 * decoded, unfolded value, up to STORE_PARSE_HEADER_TEXT_MAX bytes (cut at a character). */
static char *parse_header_text(GMimeMessage *message)
{
    GMimeHeaderList *list = g_mime_object_get_header_list(GMIME_OBJECT(message));
    int count = list != NULL ? g_mime_header_list_get_count(list) : 0;
    struct parse_buf b = {NULL, 0, 0};
    int rc = parse_buf_append(&b, "", 0);
    for (int i = 0; i < count && rc == MV_OK && b.len < STORE_PARSE_HEADER_TEXT_MAX; i++) {
        GMimeHeader *h = g_mime_header_list_get_header_at(list, i);
        const char *name = h != NULL ? g_mime_header_get_name(h) : NULL;
        const char *value = h != NULL ? g_mime_header_get_value(h) : NULL;
        char *clean = parse_text_dup(value);
        if (clean == NULL) {
            rc = MV_ENOMEM;
            break;
        }
        char *line = g_strdup_printf("%s: %s\n", name != NULL ? name : "", clean);
        crypt_free_wiped(clean);
        size_t n = strlen(line);
        if (b.len + n > STORE_PARSE_HEADER_TEXT_MAX) {
            n = parse_utf8_trim_cut(line, STORE_PARSE_HEADER_TEXT_MAX - b.len);
        }
        rc = parse_buf_append(&b, line, n);
        crypt_wipe(line, strlen(line));
        g_free(line);
    }
    if (rc == MV_OK && !g_utf8_validate(b.data, (gssize)b.len, NULL)) {
        rc = parse_make_utf8(&b, 1); /* a raw 8-bit name or value */
    }
    if (rc != MV_OK) {
        crypt_free_wiped(b.data);
        return NULL;
    }
    return b.data;
}

static int parse_header_fields(GMimeMessage *message, int no_text, struct store_parsed *out)
{
    out->subject = parse_text_dup(g_mime_message_get_subject(message));
    out->from = parse_addresses_dup(g_mime_message_get_from(message));
    out->to = parse_addresses_dup(g_mime_message_get_to(message));
    out->cc = parse_addresses_dup(g_mime_message_get_cc(message));
    out->message_id = parse_msgid_dup(g_mime_message_get_message_id(message));
    GDateTime *date = g_mime_message_get_date(message);
    out->sent_date = date != NULL ? (int64_t)g_date_time_to_unix(date) : 0;
    out->sent_zone =
        date != NULL ? (int32_t)(g_date_time_get_utc_offset(date) / G_TIME_SPAN_SECOND) : 0;
    out->header_text = no_text ? parse_text_dup("") : parse_header_text(message);
    if (out->subject == NULL || out->from == NULL || out->to == NULL || out->cc == NULL ||
        out->message_id == NULL || out->header_text == NULL) {
        return MV_ENOMEM;
    }
    return parse_threading(message, out);
}

/* ---- The parse ------------------------------------------------------------------------- */

/* Runs GMime over raw[0, gm_len) (see IMPLEMENTATION NOTES 2) and fills out and w. */
static int
parse_with_gmime(const uint8_t *raw, size_t gm_len, struct parse_walk *w, struct store_parsed *out)
{
    /* The array wraps raw without copying it. GMime only reads through it; the stream is
     * told it does not own the bytes, and the wrapper is freed with free_segment FALSE. */
    GByteArray *array = g_byte_array_new_take((guint8 *)(uintptr_t)raw, gm_len);
    GMimeStream *stream = g_mime_stream_mem_new_with_byte_array(array);
    g_mime_stream_mem_set_owner(GMIME_STREAM_MEM(stream), FALSE);
    GMimeParser *parser = g_mime_parser_new_with_stream(stream);
    g_mime_parser_set_persist_stream(parser, TRUE);
    GMimeMessage *message = g_mime_parser_construct_message(parser, NULL);
    w->array = array;
    int rc = MV_OK;
    if (message != NULL) {
        rc = parse_header_fields(message, w->no_text, out);
        if (rc == MV_OK) {
            parse_walk_object(w, g_mime_message_get_mime_part(message), 0, 0);
            rc = w->oom ? MV_ENOMEM : MV_OK;
        }
        g_object_unref(message);
    }
    g_object_unref(parser);
    /* Every substream is gone with the message: ours is the last reference to the stream,
     * so nothing can read the array after it is freed below. */
    assert(G_OBJECT(stream)->ref_count == 1);
    g_object_unref(stream);
    guint8 *bytes = g_byte_array_free(array, FALSE);
    assert(bytes == raw || gm_len == 0);
    (void)bytes;
    w->array = NULL;
    return rc;
}

/* Gives every string member that is still NULL the value "". */
static int parse_fill_empty(struct store_parsed *out)
{
    char **fields[] = {&out->subject,    &out->from,        &out->to,   &out->cc,
                       &out->message_id, &out->in_reply_to, &out->text, &out->header_text};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (*fields[i] == NULL && (*fields[i] = strdup("")) == NULL) {
            return MV_ENOMEM;
        }
    }
    return MV_OK;
}

int store_parse(const uint8_t *raw,
                size_t len,
                const struct mv_limits *limits,
                size_t split_min,
                struct store_parsed *out,
                char *err,
                size_t err_size)
{
    return store_parse_flags(raw, len, limits, split_min, 0, out, err, err_size);
}

int store_parse_flags(const uint8_t *raw,
                      size_t len,
                      const struct mv_limits *limits,
                      size_t split_min,
                      unsigned flags,
                      struct store_parsed *out,
                      char *err,
                      size_t err_size)
{
    static const struct mv_limits defaults = MV_LIMITS_DEFAULT;
    assert(out != NULL && (raw != NULL || len == 0));
    memset(out, 0, sizeof *out);
    limits = limits != NULL ? limits : &defaults;
    if (len > limits->message_size_max || len > G_MAXUINT) {
        return parse_fail(err, err_size, MV_ELIMIT,
                          "message_size_max: a message of %zu bytes (limit %llu)", len,
                          (unsigned long long)limits->message_size_max);
    }
    size_t body_start = 0;
    int rc = parse_scan_headers(raw, len, limits, &body_start, err, err_size);
    if (rc != MV_OK) {
        return rc;
    }
    store_parse_init();
    struct parse_walk w = {.split_min = split_min > 0 ? split_min : 1,
                           .no_text = (flags & STORE_PARSE_NO_TEXT) != 0};
    size_t gm_len = parse_body_too_structured(raw, len, body_start) ? body_start : len;
    if (len > 0) {
        rc = parse_with_gmime(raw, gm_len, &w, out);
    }
    out->text = w.text.data;
    out->parts = w.parts;
    out->part_count = w.part_count;
    if (rc == MV_OK) {
        rc = parse_fill_empty(out);
    }
    if (rc != MV_OK) {
        store_parsed_free(out);
        return parse_fail(err, err_size, rc, "out of memory parsing a message");
    }
    return MV_OK;
}

static size_t parse_string_size(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

size_t store_parsed_size(const struct store_parsed *p)
{
    const char *texts[] = {p->subject,    p->from,        p->to,          p->cc,
                           p->message_id, p->in_reply_to, p->header_text, p->text};
    size_t n = 0;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        n += parse_string_size(texts[i]);
    }
    for (size_t i = 0; p->references != NULL && i < p->reference_count; i++) {
        n += parse_string_size(p->references[i]) + sizeof p->references[i];
    }
    return n + p->part_count * sizeof *p->parts;
}

void store_parsed_free(struct store_parsed *p)
{
    if (p == NULL) {
        return;
    }
    crypt_free_wiped(p->subject);
    crypt_free_wiped(p->from);
    crypt_free_wiped(p->to);
    crypt_free_wiped(p->cc);
    crypt_free_wiped(p->message_id);
    crypt_free_wiped(p->in_reply_to);
    for (size_t i = 0; i < p->reference_count; i++) {
        crypt_free_wiped(p->references[i]);
    }
    free(p->references);
    crypt_free_wiped(p->text);
    crypt_free_wiped(p->header_text);
    free(p->parts);
    memset(p, 0, sizeof *p);
}
