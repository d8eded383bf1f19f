/*
 * buf.h -- growable byte buffers, IMAP strings and literals (buf.c).
 */
#ifndef MV_IMAPD_BUF_H
#define MV_IMAPD_BUF_H

#include <stddef.h>
#include <stdint.h>

struct buf {
    char *data;
    size_t len;
    size_t cap; /* bytes of the block from data on */
    /* How far from data on bytes may have been written: the end of the furthest room
     * buf_reserve gave (its NUL included). 0 in a buffer made by hand, whose len + 1 is. */
    size_t dirty;
    /* Bytes buf_consume dropped in front of data: the block begins at data - skip. */
    size_t skip;
    int oom; /* an append failed: the buffer is unusable */
};
/* Wipes every byte that may have been written (dirty, at least len + 1; not the capacity
 * beyond, never written: wiping it faulted in pages nothing had used, the capacity doubles)
 * and frees; a grown buffer's old block is wiped so too. */
void buf_free(struct buf *b);
int buf_reserve(struct buf *b, size_t extra);
void buf_add(struct buf *b, const void *data, size_t len);
void buf_str(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A string constant, its length known when compiling (no strlen: responses of 100,000
 * lines add several of these per line). */
#define BUF_LIT(b, s) buf_add((b), "" s, sizeof(s) - 1)
/* v in decimal, as "%llu" would write it, without vsnprintf's format parsing (which was
 * half the CPU of a FETCH 1:* (UID FLAGS)). */
void buf_u64(struct buf *b, uint64_t v);
/* RFC 3501 date-time of when (seconds since the epoch, UTC), quoted, as "%02d-%.3s-%04d
 * %02d:%02d:%02d +0000" would write it: "\"02-Dec-2026 07:25:21 +0000\"" (INTERNALDATE). */
void buf_imap_date(struct buf *b, int64_t when);
/* An IMAP literal "{len}" CRLF and the bytes, every NUL sent as 0x80 (RFC 3501 9: CHAR8
 * excludes NUL; what Dovecot sends). Every literal the server sends goes through here. */
void buf_literal(struct buf *b, const void *data, size_t len);
/* buf_literal() in two steps, for bytes made straight into the buffer: buf_literal_place()
 * writes "{len}" CRLF and returns where the len bytes go (NULL: out of memory, oom set);
 * buf_literal_placed() then takes them in, every NUL as 0x80. */
char *buf_literal_place(struct buf *b, size_t len);
void buf_literal_placed(struct buf *b, size_t len);
/* Drops the first n bytes, without moving the rest: data advances (a client's pipelined
 * commands are taken from the front of the input one by one, and moving what followed each
 * cost a copy of up to the whole buffer per command). The room they held is taken back
 * when the buffer empties, or by buf_reserve when what is left is no more than it. */
void buf_consume(struct buf *b, size_t n);
/* An IMAP string: quoted if short and plain, else a literal. */
void buf_imap_string(struct buf *b, const char *s, size_t len);
/* An nstring: NIL for NULL. */
void buf_imap_nstring(struct buf *b, const char *s);
/* As buf_imap_string(), but with utf8 set (the session enabled UTF8=ACCEPT, RFC 6855) a
 * string that is valid UTF-8 goes out quoted too; without it, 8-bit strings stay literals. */
void buf_imap_string_utf8(struct buf *b, const char *s, size_t len, int utf8);
/* buf_free() after OPENSSL_cleanse, as keys are wiped: for a buffer that held a password. */
void buf_wipe(struct buf *b);

#endif /* MV_IMAPD_BUF_H */
