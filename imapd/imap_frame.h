/*
 * imap_frame.h -- IMAP command framing: a command is its line plus every literal announced at
 * a line's end ("{n}" or "{n+}") and the lines after it, up to the last line. The IMAP
 * session owns one struct imap_frame (loop thread only) and frames its connection's input
 * with it; conn.c knows nothing of it.
 */
#ifndef MV_IMAP_FRAME_H
#define MV_IMAP_FRAME_H

#include "buf.h"
#include "imap_parse.h"

#include <stddef.h>
#include <stdint.h>

/* What imap_frame_next() found. */
enum imap_frame_status {
    /* need more bytes */
    FRAME_MORE = 0,
    /* a whole command: the first *len bytes of the input */
    FRAME_COMMAND,
    /* a synchronizing literal: send "+ ..." and wait */
    FRAME_CONTINUE,
    /* a line over line_max. Before login at once (answer BYE: nothing more is read); after
     * it once the rest of the line was read and discarded, with the command's tag in
     * imap_frame.long_tag ("" if it had none) for the BAD */
    FRAME_LINE_TOO_LONG,
    /* as FRAME_LINE_TOO_LONG, but the discarded line ended in "{n+}": the client sends the
     * literal's bytes anyway, where the next command would be read (answer BYE) */
    FRAME_LINE_TOO_LONG_LITERAL_PLUS,
    /* a line within line_max but past CONFIG_LINE_FREE while literal_total_max was held by
     * other commands: discarded as FRAME_LINE_TOO_LONG is, a transient refusal (answer NO
     * [UNAVAILABLE]; with "{n+}" at its end FRAME_LINE_TOO_LONG_LITERAL_PLUS) */
    FRAME_LINE_BUSY,
    /* {n} over the limit: the first *len bytes are the command so far (the client sends
     * nothing more for it) */
    FRAME_LITERAL_TOO_BIG,
    /* {n+} over the limit: the client is sending it anyway */
    FRAME_LITERAL_PLUS_TOO_BIG,
    /* {n} within the limit but over literal_total_max now: as FRAME_LITERAL_TOO_BIG, a
     * transient refusal */
    FRAME_LITERAL_BUSY,
    /* {n+} so: as FRAME_LITERAL_PLUS_TOO_BIG */
    FRAME_LITERAL_PLUS_BUSY
};

/* The framing state of one IMAP connection. Zeroed is the start state. */
struct imap_frame {
    size_t scanned;            /* bytes of the command in progress already scanned */
    uint64_t literal_left;     /* literal bytes still to come */
    uint64_t literal_reserved; /* bytes of literal_total_max this command holds */
    uint64_t line_reserved;    /* of them, for the current line's bytes past CONFIG_LINE_FREE */
    int raw_line;              /* the next line is a SASL response or IDLE's DONE: no literal */
    /* An over-long line being skipped: its command's tag, and its last bytes read so far
     * (did it end in a literal announcement?) */
    int discard_line;
    int discard_busy; /* ... refused for the budget, not for line_max */
    char long_tag[IMAP_TAG_MAX + 1];
    char long_tail[24];
    size_t long_tail_len;
};

/* Frames the next command of in. Before login (prelogin set) one command, its lines and
 * literals together, and the input held must fit in prelogin_bytes_max; after it the
 * line_max, literal_max and literal_total_max limits apply. *literal_out gets the count of
 * the last literal seen. */
enum imap_frame_status imap_frame_next(
    struct imap_frame *f, struct buf *in, int prelogin, size_t *len_out, uint64_t *literal_out);
/* Forgets the command being framed and gives back its share of literal_total_max (STARTTLS,
 * and the end of the connection). */
void imap_frame_reset(struct imap_frame *f);

#endif /* MV_IMAP_FRAME_H */
