/*
 * conn_frame.h -- IMAP command framing (conn.c): a command is its line plus every literal
 * announced at a line's end ("{n}" or "{n+}") and the lines after it, up to the last line.
 */
#ifndef MV_CONN_FRAME_H
#define MV_CONN_FRAME_H

#include "imapd.h"

enum conn_frame {
    FRAME_MORE = 0,             /* need more bytes */
    FRAME_COMMAND,              /* a whole command: the first *len bytes of c->in */
    FRAME_CONTINUE,             /* a synchronizing literal: send "+ ..." and wait */
    FRAME_LINE_TOO_LONG,        /* the line exceeds line_max: it is being discarded */
    FRAME_LITERAL_TOO_BIG,      /* {n} over the limit: the first *len bytes are the command so
                                   far (the client sends nothing more for it) */
    FRAME_LITERAL_PLUS_TOO_BIG, /* {n+} over the limit: the client is sending it anyway */
    FRAME_LITERAL_BUSY,         /* {n} within the limit but over literal_total_max now: as
                                   FRAME_LITERAL_TOO_BIG, a transient refusal */
    FRAME_LITERAL_PLUS_BUSY     /* {n+} so: as FRAME_LITERAL_PLUS_TOO_BIG */
};

/* Frames the next command of c->in. *literal_out gets the count of the last literal seen. */
enum conn_frame conn_frame_imap(struct conn *c, size_t *len_out, uint64_t *literal_out);
/* Forgets the command being framed (and gives back its share of literal_total_max). */
void conn_frame_reset(struct conn *c);
/* Drops a reference taken while a job referred to c; frees a dead connection at zero. */
void conn_release(struct conn *c);

#endif
