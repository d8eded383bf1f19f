/*
 * varint.h -- LEB128 varints (7 bits a byte, low first, at most 10 bytes for 64 bits) and
 * zigzag for signed steps: the saved forms of mailvaultd's views (imap_view_saved.c) and of
 * a mailbox's sent days (imap_sent_memo.c).
 *
 * Hand-written: a few lines no library of the brief offers (zstd's and SQLite's are
 * internal). Inline: a view's decode reads one a field of every message, most of one byte.
 */
#ifndef MV_IMAPD_VARINT_H
#define MV_IMAPD_VARINT_H

#include <stdint.h>

#define IMAP_VARINT_MAX 10 /* bytes of the longest varint (64 bits) */

/* v at p; returns the byte after it (p needs IMAP_VARINT_MAX bytes of room). */
static inline unsigned char *imap_varint_put(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

/* imap_varint_get of a value of more than one byte. */
static inline int
imap_varint_get_long(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    uint64_t out = 0;
    for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char b = *(*p)++;
        if (shift == 63 && (b & 0x7e) != 0) {
            return -1; /* bits past the 64th */
        }
        out |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *v = out;
            return 0;
        }
    }
    return -1;
}

/* 0 with *v set and *p past the varint, or -1 (cut short, or more than 64 bits). */
static inline int imap_varint_get(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    if (*p < end && **p < 0x80) {
        *v = *(*p)++;
        return 0;
    }
    return imap_varint_get_long(p, end, v);
}

/* A signed step (two's complement in d) as an unsigned one, small either way: 0, -1, 1, -2, ... */
static inline uint64_t imap_varint_zigzag(uint64_t d)
{
    return (d << 1) ^ (uint64_t) - (int64_t)(d >> 63);
}

static inline uint64_t imap_varint_unzigzag(uint64_t z)
{
    return (z >> 1) ^ (uint64_t) - (int64_t)(z & 1);
}

#endif
