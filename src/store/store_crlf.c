/*
 * store_crlf.c -- a message's bare LFs made CRLF (mv_message_crlf).
 *
 * Internet mail ends its lines with CRLF (RFC 5322 2.1, 2.3) and IMAP serves messages so
 * (RFC 3501 2.3.1.1, 4.3; RFC822.SIZE counts the octets sent). LMTP receives CRLF by its
 * protocol, but Maildir and mbox files, .eml exports and the pipe of an MTA's local
 * delivery usually hold bare LFs: `mailvault import` and `mailvault deliver` convert with
 * this before they store, so size, SHA-256 and the full-text index all agree with what
 * FETCH sends. Bare CRs are left as they are (a byte of the message; rare outside old Mac
 * files). Hand-written: no library of the brief's list offers this one loop without a
 * parse (GMime's stream filters would rewrite more than line ends).
 */
#include "mailvault.h"

#include <string.h>

size_t mv_message_crlf(const void *msg, size_t len, void *out, size_t out_cap)
{
    const unsigned char *raw = msg;
    size_t bare = 0;
    for (const unsigned char *p = raw, *end = raw + len;
         (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++) {
        bare += p == raw || p[-1] != '\r';
    }
    const size_t need = len + bare; /* bare <= len: no overflow below SIZE_MAX / 2 */
    if (out == NULL || out_cap < need) {
        return need;
    }
    unsigned char *o = out;
    for (size_t i = 0; i < len; i++) {
        if (raw[i] == '\n' && (i == 0 || raw[i - 1] != '\r')) {
            *o++ = '\r';
        }
        *o++ = raw[i];
    }
    return need;
}
