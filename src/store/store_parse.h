/*
 * store_parse.h -- what the store needs to know about one message: decoded header fields,
 * the body text for full-text search, and the byte ranges of the large leaf parts, which are
 * stored apart (deduplicated) and cut back in on fetch.
 *
 * USAGE
 *   struct store_parsed p;
 *   char err[256];
 *   int rc = store_parse(raw, len, &limits, STORE_SPLIT_MIN, &p, err, sizeof err);
 *   if (rc == MV_OK) { ...use p...; store_parsed_free(&p); }
 *
 * GUARANTEES (on MV_OK)
 *   - every char * is malloc'd, never NULL ("" when absent) and valid UTF-8 without NUL;
 *   - parts[] are non-empty ranges with start < end <= len, ascending and non-overlapping,
 *     each exactly the encoded content of one leaf part as it appears in raw (the bytes
 *     between the part's header block and the line break before the next boundary), so
 *     raw can be cut at the ranges and put back together byte for byte.
 *
 * The module is thread-safe: it has no mutable state of its own; GMime is initialised once
 * per process (pthread_once) and is thread-safe after that for objects not shared between
 * threads.
 */
#ifndef MV_STORE_PARSE_H
#define MV_STORE_PARSE_H

#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>

struct store_part_range {
    uint64_t start;
    uint64_t end;
}; /* [start,end) byte offsets in raw */

struct store_blob_prepacked;

struct store_parsed {
    char *subject; /* decoded (RFC 2047, charset -> UTF-8), unfolded; "" if absent */
    char *from;    /* decoded address list as display text: "Name <a@b>, c@d"; "" if absent */
    char *to;
    char *cc;
    char *message_id;  /* without <>; "" if absent or unparsable */
    char *in_reply_to; /* first msg-id of In-Reply-To, without <>; "" */
    char **references; /* msg-ids of References, without <>, in order; NULL if none */
    size_t reference_count;
    int64_t sent_date; /* Unix seconds from Date:, 0 if absent/unparsable */
    int32_t sent_zone; /* the Date: header's zone, seconds east of UTC (0 if none) */
    char *header_text; /* the top-level header for full-text search (IMAP SEARCH TEXT): one
                          "Name: value" line per field, values decoded (RFC 2047) and unfolded;
                          capped at STORE_PARSE_HEADER_TEXT_MAX bytes; "" if none */
    char *text;        /* plain body text for full-text search: every text/plain part decoded
                          (transfer encoding + charset -> UTF-8), plus text/html parts with tags
                          stripped; capped at STORE_PARSE_TEXT_MAX bytes; "" if none */
    struct store_part_range *parts; /* leaf parts whose encoded content is >= split_min bytes,
                                       ascending, non-overlapping; NULL if none */
    size_t part_count;
    /* Set only by a drain's read-ahead (store_queue.c): the message compressed ahead, for
     * store_body_put() (store_blob.h). Not owned (the read-ahead's item frees it); NULL from
     * store_parse() and everywhere else. */
    const struct store_blob_prepacked *prepacked;
};

#define STORE_PARSE_TEXT_MAX (1u << 20)
/* The header's text as indexed (SEARCH TEXT): as much as the body's. It was 64 KiB, which
 * left words past it in a header field of up to header_size_max (1 MiB) unfound by TEXT. */
#define STORE_PARSE_HEADER_TEXT_MAX (1u << 20)

/* Explicit bounds on the work one message can cause. Beyond the first two the walk stops
 * descending (the message still parses); beyond the third GMime sees only the top-level
 * header block (no text, no parts), because GMime builds an object per part and per header
 * line, and a small message made of nothing but those would cost gigabytes. */
#define STORE_PARSE_DEPTH_MAX      32    /* nesting of multiparts and message/rfc822 */
#define STORE_PARSE_PARTS_MAX      10000 /* MIME objects visited in one message */
#define STORE_PARSE_STRUCTURE_MAX  50000 /* body lines that may start a part or a header */
#define STORE_PARSE_REFERENCES_MAX 1024  /* References kept: the first and the last 1023 */

/* Parses raw (len bytes). Never fails on malformed mail: what cannot be parsed is left
 * empty. Fails only on limits (MV_ELIMIT, message names the limit: header count, header
 * field size, message size) and memory (MV_ENOMEM). err gets the message. */
/* text leaves out a text/html part whose multipart/alternative also holds a text/plain
 * part (the same words twice). limits NULL means MV_LIMITS_DEFAULT. split_min 0 is taken
 * as 1 (empty parts are never listed). Only the top-level header block counts against
 * header_count_max and header_size_max; a field is a line "name:" (name without blanks or
 * controls) with its continuation lines, and its size is the bytes from its first to its
 * last byte, folding line breaks included, the final line break not. On failure *out is
 * zeroed (nothing to free); on success the caller frees it with store_parsed_free(). err
 * may be NULL. */
int store_parse(const uint8_t *raw,
                size_t len,
                const struct mv_limits *limits,
                size_t split_min,
                struct store_parsed *out,
                char *err,
                size_t err_size);

/* store_parse() with flags. STORE_PARSE_NO_TEXT leaves text and header_text "" (everything
 * else as store_parse() gives it): for a message whose full-text row is made later from the
 * stored body (a stepped drain's, store_fts_backlog.c), decoding its text now (transfer
 * encoding, charset, HTML) is work thrown away. */
#define STORE_PARSE_NO_TEXT 0x1u
int store_parse_flags(const uint8_t *raw,
                      size_t len,
                      const struct mv_limits *limits,
                      size_t split_min,
                      unsigned flags,
                      struct store_parsed *out,
                      char *err,
                      size_t err_size);
/* Wipes and frees every member (they are the message's plaintext) and zeroes *p. NULL and
 * a zeroed struct are fine; calling it twice is fine. */
void store_parsed_free(struct store_parsed *p);

/* The bytes *p holds on the heap (its strings with their NULs, the references and the
 * ranges): what a parse kept in memory costs, for a bound on memory (the drain's read-ahead).
 * Up to STORE_PARSE_TEXT_MAX + STORE_PARSE_HEADER_TEXT_MAX and the fields. */
size_t store_parsed_size(const struct store_parsed *p);

/* g_mime_init() once per process (pthread_once); called by store_parse itself. */
void store_parse_init(void);

#endif /* MV_STORE_PARSE_H */
