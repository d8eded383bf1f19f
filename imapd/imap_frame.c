/*
 * imap_frame.c -- IMAP's framing of a command out of lines and literals, with the line and
 * literal limits (imap_frame.h).
 *
 * IMPLEMENTATION NOTES
 *   - The limits are checked when a literal is announced, so nothing over a bound is ever
 *     asked for ("+") or buffered.
 *   - A line over line_max is read to its end and thrown away, and only then answered, with
 *     the command's tag (a client waits for its tagged answer: an untagged BAD left it
 *     waiting for ever, where Dovecot answers "tag BAD ... Too long argument"). If the line
 *     ended in a LITERAL+ announcement, the literal's bytes follow where the next command
 *     would be read, so the session ends instead (those bytes are never run as commands).
 *   - literal_total_max bounds the literal bytes accepted for commands still being received
 *     over every connection, and the bytes of lines past CONFIG_LINE_FREE (line_max is 1 MiB:
 *     a thousand connections each sending such a line would hold 1 GiB otherwise); each
 *     frame's share is its literal_reserved, given back once the command is whole (its bytes
 *     then belong to a job) or forgotten. A line takes its share as it arrives, so a refusal
 *     comes before more of it is held.
 */
#include "imap_frame.h"

#include "buf.h"
#include "config.h"

#include <string.h>
#include <strings.h>

/* IMAP literal bytes accepted for commands still being received, all connections
 * (literal_total_max). Loop thread only. */
static uint64_t imap_frame_literal_total;

/* Gives back the literal bytes the command in progress held. */
static void imap_frame_literal_release(struct imap_frame *f)
{
    imap_frame_literal_total -= f->literal_reserved;
    f->literal_reserved = 0;
    f->line_reserved = 0;
}

/* The literal count at the end of a line ("... {12}" or "{12+}", before CRLF), or -1. */
static int imap_frame_literal_at_end(const char *line, size_t len, uint64_t *count, int *plus)
{
    if (len > 0 && line[len - 1] == '\r') {
        len--;
    }
    if (len < 3 || line[len - 1] != '}') {
        return -1;
    }
    size_t end = len - 1;
    *plus = line[end - 1] == '+';
    if (*plus) {
        end--;
    }
    size_t start = end;
    while (start > 0 && line[start - 1] >= '0' && line[start - 1] <= '9') {
        start--;
    }
    if (start == end || start == 0 || line[start - 1] != '{' || end - start > 19) {
        return -1;
    }
    uint64_t n = 0;
    for (size_t i = start; i < end; i++) {
        n = n * 10 + (uint64_t)(line[i] - '0');
    }
    *count = n;
    return 0;
}

/* Whether the command whose first line starts at p is an APPEND (its literal may be big). */
static int imap_frame_is_append(const char *p, size_t len)
{
    const char *sp = memchr(p, ' ', len);
    if (sp == NULL) {
        return 0;
    }
    size_t rest = len - (size_t)(sp + 1 - p);
    return rest >= 7 && strncasecmp(sp + 1, "APPEND ", 7) == 0;
}

/* The server-wide budget (literal_total_max) for n more bytes of f's command: refused only
 * while other commands hold some of it, so one command within the limits always gets
 * through. 1 and the bytes taken, or 0. */
static int imap_frame_reserve(struct imap_frame *f, uint64_t n)
{
    if (imap_frame_literal_total > f->literal_reserved &&
        imap_frame_literal_total + n > g_config.literal_total_max) {
        return 0;
    }
    f->literal_reserved += n;
    imap_frame_literal_total += n;
    return 1;
}

/* Starts skipping the over-long (or refused) line at the end of in: the command's tag is
 * kept for the answer, and the command's share of the budget given back. */
static void imap_frame_discard_begin(struct imap_frame *f, const struct buf *in, int busy)
{
    f->long_tag[0] = '\0'; /* a raw line (IDLE's DONE, a SASL response) has none */
    if (!f->raw_line) {
        (void)imap_parse_tag(in->data, in->len, f->long_tag);
    }
    f->long_tail_len = 0;
    f->discard_line = 1;
    f->discard_busy = busy;
    imap_frame_literal_release(f); /* the command is given up */
}

/* Keeps the last bytes of the over-long line being discarded (its literal announcement, if
 * any, is at its very end). */
static void imap_frame_tail_keep(struct imap_frame *f, const char *p, size_t n)
{
    const size_t cap = sizeof f->long_tail;
    if (n == 0) {
        return; /* p may be null then: the connection frees an emptied input buffer */
    }
    if (n >= cap) {
        memcpy(f->long_tail, p + n - cap, cap);
        f->long_tail_len = cap;
        return;
    }
    size_t keep = f->long_tail_len + n > cap ? cap - n : f->long_tail_len;
    memmove(f->long_tail, f->long_tail + f->long_tail_len - keep, keep);
    memcpy(f->long_tail + keep, p, n);
    f->long_tail_len = keep + n;
}

/* Before login one command, its lines and literals together, and the input held must fit
 * in prelogin_bytes_max (64 KiB by default: AUTHENTICATE PLAIN needs a line); after it the
 * line_max, literal_max and literal_total_max limits apply. */
enum imap_frame_status imap_frame_next(
    struct imap_frame *f, struct buf *in, int prelogin, size_t *len_out, uint64_t *literal_out)
{
    size_t line_max = g_config.line_max;
    if (prelogin && g_config.prelogin_bytes_max < line_max) {
        line_max = g_config.prelogin_bytes_max;
    }
    for (;;) {
        if (f->literal_left > 0) {
            uint64_t have = in->len - f->scanned;
            if (have < f->literal_left) {
                return FRAME_MORE;
            }
            f->scanned += (size_t)f->literal_left;
            f->literal_left = 0;
        }
        if (in->data == NULL) {
            return FRAME_MORE; /* freed while empty (conn_process): nothing to scan yet */
        }
        char *start = in->data + f->scanned;
        size_t avail = in->len - f->scanned;
        char *nl = avail > 0 ? memchr(start, '\n', avail) : NULL;
        uint64_t count;
        int plus;
        if (f->discard_line) {
            size_t line_part = (size_t)((nl != NULL ? nl : in->data + in->len) - start);
            imap_frame_tail_keep(f, start, line_part);
            buf_consume(in, nl != NULL ? (size_t)(nl + 1 - in->data) : in->len);
            f->scanned = 0;
            if (nl == NULL) {
                return FRAME_MORE;
            }
            f->discard_line = 0;
            int literal = imap_frame_literal_at_end(f->long_tail, f->long_tail_len, &count, &plus);
            if (literal == 0 && plus) {
                return FRAME_LINE_TOO_LONG_LITERAL_PLUS;
            }
            return f->discard_busy ? FRAME_LINE_BUSY : FRAME_LINE_TOO_LONG;
        }
        /* Before login the input is capped at prelogin_bytes_max (conn.c): a command not
         * complete by then never will be, and nothing is discarded (the session ends). */
        if (prelogin && nl == NULL && in->len >= g_config.prelogin_bytes_max) {
            return FRAME_LINE_TOO_LONG;
        }
        size_t line_len = (size_t)((nl != NULL ? nl : in->data + in->len) - start);
        if (line_len > line_max) {
            if (prelogin) {
                return FRAME_LINE_TOO_LONG;
            }
            imap_frame_discard_begin(f, in, 0);
            continue;
        }
        if (!prelogin && line_len > CONFIG_LINE_FREE &&
            line_len - CONFIG_LINE_FREE > f->line_reserved) {
            uint64_t more = line_len - CONFIG_LINE_FREE - f->line_reserved;
            if (!imap_frame_reserve(f, more)) {
                imap_frame_discard_begin(f, in, 1);
                continue;
            }
            f->line_reserved += more;
        }
        if (nl == NULL) {
            return FRAME_MORE;
        }
        if (f->raw_line || imap_frame_literal_at_end(start, line_len, &count, &plus) != 0) {
            *len_out = (size_t)(nl + 1 - in->data);
            f->scanned = 0;
            imap_frame_literal_release(f); /* the command is whole: its bytes go to a job */
            return FRAME_COMMAND;
        }
        uint64_t max = imap_frame_is_append(in->data, in->len) ? g_config.literal_max
                                                               : CONFIG_SMALL_LITERAL_MAX;
        uint64_t end = (uint64_t)(nl + 1 - in->data) + count; /* the command up to here */
        *literal_out = count;
        if (prelogin ? end > g_config.prelogin_bytes_max
                     : count > max || f->scanned + count > max + g_config.line_max * 4) {
            imap_frame_literal_release(f);
            if (plus) {
                return FRAME_LITERAL_PLUS_TOO_BIG;
            }
            *len_out = (size_t)(nl + 1 - in->data);
            f->scanned = 0;
            return FRAME_LITERAL_TOO_BIG;
        }
        /* The server-wide budget: a transient refusal. */
        if (!imap_frame_reserve(f, count)) {
            imap_frame_literal_release(f);
            if (plus) {
                return FRAME_LITERAL_PLUS_BUSY;
            }
            *len_out = (size_t)(nl + 1 - in->data);
            f->scanned = 0;
            return FRAME_LITERAL_BUSY;
        }
        f->line_reserved = 0; /* the next line has its own CONFIG_LINE_FREE */
        f->scanned = (size_t)(nl + 1 - in->data);
        f->literal_left = count;
        if (!plus && count > 0 && in->len - f->scanned < count) {
            return FRAME_CONTINUE;
        }
    }
}

void imap_frame_reset(struct imap_frame *f)
{
    f->scanned = 0;
    f->literal_left = 0;
    imap_frame_literal_release(f);
}
