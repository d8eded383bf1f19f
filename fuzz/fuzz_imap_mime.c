/*
 * fuzz_imap_mime.c -- feeds arbitrary bytes to the server's MIME description of a message
 * (imapd/imap_mime.c: GMime parse, ENVELOPE, BODYSTRUCTURE, BODY, part sections), as FETCH
 * would for a stored message.
 *
 * CHECKS (abort() on failure)
 *   - imap_mime_open() succeeds (every byte string is a message: unparsable ones are one
 *     text part);
 *   - ENVELOPE and BODYSTRUCTURE are non-empty, start with '(' and have balanced parentheses
 *     outside quoted strings and literals, with and without UTF8=ACCEPT (imap_mime_set_utf8);
 *   - a part section is either refused (-1) or a range inside the message.
 *   - ENVELOPE read from the header's bytes with the common address forms read without GMime
 *     is the same as through GMime's message and address parser.
 *   - BODYSTRUCTURE and BODY from the top part alone (imap_mime_open_structure, no GMime
 *     message) are the same as from the message.
 *   - BODYSTRUCTURE and BODY from the skeleton the store would keep (store_parse's leaf parts
 *     cut out, here every one of FUZZ_SPLIT bytes or more, with store_part_count's counts)
 *     are the same as from the message, or refused (imap_mime_open_skeleton MV_EUNSUPPORTED,
 *     imap_mime_bodystructure -1), never different.
 *   - The message that skeleton stands for (imap_mime_stand_in: the cut parts' places filled)
 *     has the message's header and its flat reading (imap_mime_stand_in_flat, from the
 *     skeleton), and every part section located in it that does not meet a cut part's place
 *     (or is no such part) is located the same in the message: what FETCH answers from it
 *     without reading the parts stored apart (imap_fetch_sparse_copy). A walk told where the
 *     fillers are (imap_mime_stand_in_gaps) locates every section as one reading through them.
 *   - A Content-Type value the walk takes for a leaf without GMime (imap_mime_plain_leaf) is
 *     neither a multipart nor a message to GMime.
 *   - A walk over the input's first bytes (A WALK OVER A PREFIX, imap_mime.h), at prefix
 *     lengths through it: every answer it says holds is the message's.
 *   - When the header makes the message one part (imap_mime_single_part), every section the
 *     header settles (imap_mime_header_settles) is located in the header's bytes where it is
 *     in the message: what FETCH answers from the header alone.
 *
 * Corpus: fuzz/corpus/imap_mime (multipart, nested message/rfc822, broken MIME, groups).
 */
#include "../imapd/imap_mime.h"
#include "store/store_blob.h"
#include "store/store_parse.h"

#include <gmime/gmime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Parentheses balance outside "quoted" strings and {n} literals. */
static int fuzz_balanced(const struct buf *b)
{
    long depth = 0;
    for (size_t i = 0; i < b->len; i++) {
        char c = b->data[i];
        if (c == '"') {
            for (i++; i < b->len && b->data[i] != '"'; i++) {
                i += b->data[i] == '\\';
            }
        } else if (c == '{') {
            char *end = NULL;
            unsigned long long n = strtoull(b->data + i + 1, &end, 10);
            if (end == NULL || end[0] != '}' || end + 3 + n > b->data + b->len) {
                return 0;
            }
            i = (size_t)(end - b->data) + 2 + (size_t)n;
        } else if (c == '(') {
            depth++;
        } else if (c == ')' && --depth < 0) {
            return 0;
        }
    }
    return depth == 0;
}

/* Parts this long are cut (the store's 128 KiB, small so that small inputs have cuts). */
#define FUZZ_SPLIT 16

static const uint32_t fuzz_paths[][3] = {{1, 0, 0}, {2, 0, 0}, {1, 1, 0}, {2, 1, 0}, {1, 2, 1}};
static const size_t fuzz_path_counts[] = {1, 1, 2, 2, 3};

/* The message the skeleton (len bytes, n cuts) stands for against data itself. */
static void fuzz_stand_in(const uint8_t *data,
                          size_t size,
                          const char *skel,
                          size_t len,
                          const struct mv_message_cut *cuts,
                          size_t n)
{
    char *whole = NULL;
    int rc = imap_mime_stand_in(skel, len, cuts, n, size, &whole);
    if (rc != MV_OK) {
        if (rc != MV_EUNSUPPORTED && rc != MV_ENOMEM) {
            abort();
        }
        return;
    }
    if (mv_message_header_len(whole, size) != mv_message_header_len(data, size)) {
        abort();
    }
    int flat = imap_mime_stand_in_flat(skel, len, size); /* as FETCH takes it */
    if (flat != imap_mime_flat(whole, size) || flat != imap_mime_flat((const char *)data, size)) {
        abort();
    }
    struct imap_mime_gap *gap = calloc(n + 1, sizeof *gap);
    if (gap == NULL) {
        imap_mime_stand_in_free(whole, size, cuts, n);
        return;
    }
    imap_mime_stand_in_gaps(cuts, n, gap);
    struct imap_mime_reading gaps = {.gap = gap, .count = n};
    for (size_t i = 0; i < sizeof fuzz_path_counts / sizeof fuzz_path_counts[0]; i++) {
        for (int what = IMAP_MIME_CONTENT; what <= IMAP_MIME_MESSAGE_TEXT; what++) {
            struct imap_mime_span s = {0, 0}, r = {0, 0};
            struct imap_mime_span u = {0, 0};
            int in_whole =
                imap_mime_section_flat(whole, size, flat, &gaps, fuzz_paths[i], fuzz_path_counts[i],
                                       (enum imap_mime_what)what, &s);
            /* the walk told of the fillers and the one reading through them agree */
            int unread = imap_mime_section_flat(whole, size, flat, NULL, fuzz_paths[i],
                                                fuzz_path_counts[i], (enum imap_mime_what)what, &u);
            if (unread != in_whole ||
                (in_whole == 0 && (u.offset != s.offset || u.length != s.length))) {
                abort();
            }
            int in_data = imap_mime_section((const char *)data, size, fuzz_paths[i],
                                            fuzz_path_counts[i], (enum imap_mime_what)what, &r);
            if (in_whole != 0
                    ? in_data != in_whole
                    : !imap_mime_stand_in_meets(cuts, n, s.offset, s.offset + s.length) &&
                          (in_data != 0 || r.offset != s.offset || r.length != s.length)) {
                abort();
            }
        }
    }
    free(gap);
    imap_mime_stand_in_free(whole, size, cuts, n);
}

/* The skeleton of data as the store would keep it, described: the same as t's answers
 * (the whole message, imap_mime_open_structure) or refused. */
/* The walk's shortcut for a Content-Type value (imap_mime_plain_leaf) against GMime's parse:
 * the input's first line as a value; a leaf by the shortcut must be neither a multipart nor
 * a message to GMime. */
static void fuzz_plain_leaf(const uint8_t *data, size_t size)
{
    char value[256];
    size_t n = 0;
    while (n < size && n < sizeof value - 1 && data[n] != '\n' && data[n] != '\r') {
        value[n] = data[n] != 0 ? (char)data[n] : ' ';
        n++;
    }
    value[n] = '\0';
    if (!imap_mime_plain_leaf(value)) {
        return;
    }
    GMimeContentType *ct = g_mime_content_type_parse(NULL, value);
    const char *type = ct != NULL ? g_mime_content_type_get_media_type(ct) : NULL;
    if (type != NULL && (strcasecmp(type, "multipart") == 0 || strcasecmp(type, "message") == 0)) {
        abort();
    }
    if (ct != NULL) {
        g_object_unref(ct);
    }
}

/* A WALK OVER A PREFIX: at prefix lengths through the input, every answer the walk over the
 * prefix says holds (imap_mime_reading_holds) is the message's: the same part or none, the
 * same range; with a partial, the part in the message is as long as the partial needs. */
static void fuzz_prefix_walk(const uint8_t *data, size_t size)
{
    const char *msg = (const char *)data;
    size_t lens[] = {size / 4, size / 2, size - size / 4, size - 1};
    static const uint64_t partial[][2] = {{0, 1}, {0, 16}, {3, 200}};
    for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
        size_t n = lens[c];
        if (n == 0 || n >= size) {
            continue;
        }
        for (size_t i = 0; i < sizeof fuzz_path_counts / sizeof fuzz_path_counts[0]; i++) {
            for (int what = IMAP_MIME_CONTENT; what <= IMAP_MIME_MESSAGE_TEXT; what++) {
                struct imap_mime_reading r;
                struct imap_mime_span p = {0, 0}, w = {0, 0};
                imap_mime_reading_prefix(&r, msg, n);
                int in_prefix =
                    imap_mime_section_flat(msg, n, 0, &r, fuzz_paths[i], fuzz_path_counts[i],
                                           (enum imap_mime_what)what, &p);
                int in_msg = imap_mime_section(msg, size, fuzz_paths[i], fuzz_path_counts[i],
                                               (enum imap_mime_what)what, &w);
                if (imap_mime_reading_holds(&r, in_prefix, &p, 0, 0, 0) &&
                    (in_prefix != in_msg ||
                     (in_msg == 0 && (p.offset != w.offset || p.length != w.length)))) {
                    abort();
                }
                for (size_t k = 0; k < sizeof partial / sizeof partial[0]; k++) {
                    uint64_t start = partial[k][0], length = partial[k][1];
                    if (!imap_mime_reading_holds(&r, in_prefix, &p, 1, start, length)) {
                        continue;
                    }
                    /* the partial's literal: as long, from the same place, inside the prefix */
                    uint64_t lit_p = start < p.length ? p.length - start : 0;
                    uint64_t lit_w = start < w.length ? w.length - start : 0;
                    lit_p = lit_p < length ? lit_p : length;
                    lit_w = lit_w < length ? lit_w : length;
                    if (in_prefix != in_msg ||
                        (in_msg == 0 && (p.offset != w.offset || lit_p != lit_w ||
                                         p.offset + start + lit_p > n))) {
                        abort();
                    }
                }
            }
        }
    }
}

/* SECTIONS FROM THE HEADER: when the header makes the message one part, every section it
 * settles is located in the header's bytes where it is in the message. */
static void fuzz_from_header(const uint8_t *data, size_t size)
{
    const char *msg = (const char *)data;
    size_t hlen = mv_message_header_len(msg, size);
    if (!imap_mime_single_part(msg, hlen)) {
        return;
    }
    for (size_t i = 0; i < sizeof fuzz_path_counts / sizeof fuzz_path_counts[0]; i++) {
        for (int what = IMAP_MIME_CONTENT; what <= IMAP_MIME_MESSAGE_TEXT; what++) {
            if (!imap_mime_header_settles(fuzz_paths[i], fuzz_path_counts[i],
                                          (enum imap_mime_what)what)) {
                continue;
            }
            struct imap_mime_span h = {0, 0}, w = {0, 0};
            int in_header = imap_mime_section(msg, hlen, fuzz_paths[i], fuzz_path_counts[i],
                                              (enum imap_mime_what)what, &h);
            int in_msg = imap_mime_section(msg, size, fuzz_paths[i], fuzz_path_counts[i],
                                           (enum imap_mime_what)what, &w);
            if (in_header != in_msg ||
                (in_msg == 0 && (h.offset != w.offset || h.length != w.length))) {
                abort();
            }
        }
    }
}

static void fuzz_skeleton(const uint8_t *data, size_t size, struct imap_mime *t)
{
    struct store_parsed p;
    if (store_parse(data, size, NULL, FUZZ_SPLIT, &p, NULL, 0) != MV_OK) {
        return; /* over a limit: the store refuses the message */
    }
    struct mv_message_cut *cuts = calloc(p.part_count + 1, sizeof *cuts);
    char *skel = malloc(size + 1);
    size_t len = 0, from = 0;
    for (size_t i = 0; cuts != NULL && skel != NULL && i < p.part_count; i++) {
        const struct store_part_range *r = &p.parts[i];
        memcpy(skel + len, data + from, (size_t)r->start - from);
        len += (size_t)r->start - from;
        cuts[i].position = len;
        cuts[i].size = r->end - r->start;
        store_part_count(data + r->start, (size_t)(r->end - r->start), &cuts[i].lines,
                         &cuts[i].marks);
        from = (size_t)r->end;
    }
    struct imap_mime *k = NULL;
    if (cuts != NULL && skel != NULL) {
        memcpy(skel + len, data + from, size - from);
        len += size - from;
        int rc = imap_mime_open_skeleton(skel, len, size, cuts, p.part_count, &k);
        if (rc != MV_OK && rc != MV_EUNSUPPORTED) {
            abort();
        }
        fuzz_stand_in(data, size, skel, len, cuts, p.part_count);
    }
    struct buf a = {0}, b = {0};
    for (int utf8 = 0; k != NULL && utf8 <= 1; utf8++) {
        imap_mime_set_utf8(k, utf8);
        imap_mime_set_utf8(t, utf8);
        for (int ext = 0; ext <= 1; ext++) {
            buf_free(&a);
            buf_free(&b);
            imap_mime_bodystructure(t, &a, ext);
            if (imap_mime_bodystructure(k, &b, ext) == 0 &&
                (b.len != a.len || memcmp(a.data, b.data, a.len) != 0)) {
                abort();
            }
        }
    }
    buf_free(&a);
    buf_free(&b);
    imap_mime_close(&k);
    free(skel);
    free(cuts);
    store_parsed_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int initialised;
    if (!initialised) {
        imap_mime_init();
        initialised = 1;
    }
    struct imap_mime *m = NULL;
    if (imap_mime_open((const char *)data, size, &m) != MV_OK || m == NULL) {
        abort();
    }
    imap_mime_set_gmime_addresses(m, 1); /* GMime's address parser for every field here */
    struct imap_mime *e = NULL;          /* ENVELOPE without GMime's message: the same answer */
    if (imap_mime_open_envelope((const char *)data, size, &e) != MV_OK || e == NULL) {
        abort();
    }
    struct imap_mime *t = NULL; /* BODYSTRUCTURE without GMime's message: the same answer */
    if (imap_mime_open_structure((const char *)data, size, &t) != MV_OK || t == NULL) {
        abort();
    }
    struct buf out = {0}, env = {0};
    for (int utf8 = 0; utf8 <= 1; utf8++) { /* a plain session, then one with UTF8=ACCEPT */
        imap_mime_set_utf8(m, utf8);
        imap_mime_set_utf8(e, utf8);
        imap_mime_set_utf8(t, utf8);
        buf_free(&out);
        buf_free(&env);
        imap_mime_envelope(m, &out);
        imap_mime_envelope(e, &env);
        if (out.oom || out.len == 0 || out.data[0] != '(' || !fuzz_balanced(&out)) {
            abort();
        }
        if (env.oom || env.len != out.len || memcmp(env.data, out.data, out.len) != 0) {
            abort();
        }
        for (int ext = 0; ext <= 1; ext++) {
            buf_free(&out);
            imap_mime_bodystructure(m, &out, ext);
            if (out.oom || out.len == 0 || out.data[0] != '(' || !fuzz_balanced(&out)) {
                abort();
            }
            buf_free(&env);
            imap_mime_bodystructure(t, &env, ext);
            if (env.oom || env.len != out.len || memcmp(env.data, out.data, out.len) != 0) {
                abort();
            }
        }
    }
    for (size_t i = 0; i < sizeof fuzz_path_counts / sizeof fuzz_path_counts[0]; i++) {
        for (int what = IMAP_MIME_CONTENT; what <= IMAP_MIME_MESSAGE_TEXT; what++) {
            struct imap_mime_span span = {0, 0};
            int rc = imap_mime_section((const char *)data, size, fuzz_paths[i], fuzz_path_counts[i],
                                       (enum imap_mime_what)what, &span);
            if (rc != 0 && rc != -1) {
                abort();
            }
            if (rc == 0 && (span.offset > size || span.length > size - span.offset)) {
                abort();
            }
        }
    }
    buf_free(&out);
    buf_free(&env);
    fuzz_skeleton(data, size, t);
    fuzz_plain_leaf(data, size);
    fuzz_from_header(data, size);
    fuzz_prefix_walk(data, size);
    imap_mime_close(&t);
    imap_mime_close(&e);
    imap_mime_close(&m);
    return 0;
}
