/*
 * imap_utf7.c -- mailbox names: the wire's modified UTF-7 (RFC 3501 5.1.3) to the store's
 * UTF-8 and back. Decoding is strict: "&-" is '&', a shifted run is modified base64 of
 * UTF-16 with no padding bits set, and it must not encode printable ASCII; a name that holds
 * 8-bit bytes is taken as UTF-8 as it is (clients that send UTF-8 names, RFC 6855 style).
 * Once a session enables UTF8=ACCEPT no name goes through here: names travel as UTF-8, and
 * imap_utf8_name_valid() says which ones RFC 6855 allows.
 */
#include "imap_session.h"

#include <glib.h>
#include <string.h>

static const char imap_utf7_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+,";

static int imap_utf7_value(char c)
{
    const char *p = c != '\0' ? strchr(imap_utf7_alphabet, c) : NULL;
    return p != NULL ? (int)(p - imap_utf7_alphabet) : -1;
}

static int imap_utf8_put(uint32_t cp, char *out, size_t out_size, size_t *at)
{
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xc0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xe0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xf0 | (cp >> 18));
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    if (*at + n >= out_size) {
        return -1;
    }
    memcpy(out + *at, b, n);
    *at += n;
    return 0;
}

/* One shifted run in[0..len) (between '&' and '-'). */
static int imap_utf7_run(const char *in, size_t len, char *out, size_t out_size, size_t *at)
{
    uint32_t bits = 0, high = 0;
    int nbits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = imap_utf7_value(in[i]);
        if (v < 0) {
            return -1;
        }
        bits = (bits << 6) | (uint32_t)v;
        nbits += 6;
        if (nbits < 16) {
            continue;
        }
        nbits -= 16;
        uint32_t unit = (bits >> nbits) & 0xffff;
        if (high != 0) {
            if (unit < 0xdc00 || unit > 0xdfff) {
                return -1;
            }
            uint32_t cp = 0x10000 + ((high - 0xd800) << 10) + (unit - 0xdc00);
            high = 0;
            if (imap_utf8_put(cp, out, out_size, at) != 0) {
                return -1;
            }
        } else if (unit >= 0xd800 && unit <= 0xdbff) {
            high = unit;
        } else if ((unit >= 0xdc00 && unit <= 0xdfff) || (unit >= 0x20 && unit < 0x7f) ||
                   imap_utf8_put(unit, out, out_size, at) != 0) {
            return -1; /* a lone low surrogate, printable ASCII that must not be shifted, or
                          no room */
        }
    }
    /* Leftover bits must be fewer than 6 and zero; no dangling high surrogate. */
    return high == 0 && nbits < 6 && (bits & ((1u << nbits) - 1)) == 0 && len > 0 ? 0 : -1;
}

int imap_utf7_decode(const char *in, size_t in_len, char *out, size_t out_size)
{
    size_t at = 0;
    int eight_bit = 0;
    for (size_t i = 0; i < in_len; i++) {
        eight_bit |= (unsigned char)in[i] >= 0x80;
    }
    if (eight_bit) {
        if (in_len >= out_size) {
            return -1;
        }
        memcpy(out, in, in_len);
        out[in_len] = '\0';
        return 0;
    }
    for (size_t i = 0; i < in_len; i++) {
        if (in[i] != '&') {
            if (at + 1 >= out_size) {
                return -1;
            }
            out[at++] = in[i];
            continue;
        }
        const char *dash = memchr(in + i + 1, '-', in_len - i - 1);
        if (dash == NULL) {
            return -1;
        }
        size_t run = (size_t)(dash - (in + i + 1));
        if (run == 0) {
            if (at + 1 >= out_size) {
                return -1;
            }
            out[at++] = '&';
        } else if (imap_utf7_run(in + i + 1, run, out, out_size, &at) != 0) {
            return -1;
        }
        i += run + 1;
    }
    out[at] = '\0';
    return 0;
}

/* Next code point of UTF-8 at *p (advanced); 0xfffd for a malformed byte. */
static uint32_t imap_utf8_next(const unsigned char **p)
{
    const unsigned char *s = *p;
    uint32_t cp;
    size_t n = s[0] < 0x80         ? 1
               : (s[0] >> 5) == 6  ? 2
               : (s[0] >> 4) == 14 ? 3
               : (s[0] >> 3) == 30 ? 4
                                   : 0;
    if (n == 0) {
        (*p)++;
        return 0xfffd;
    }
    cp = n == 1 ? s[0] : (uint32_t)(s[0] & (0x7f >> n));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            (*p)++;
            return 0xfffd;
        }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    *p += n;
    return cp;
}

int imap_utf7_encode(const char *in, char *out, size_t out_size)
{
    size_t at = 0;
    const unsigned char *p = (const unsigned char *)in;
    while (*p != '\0') {
        if (*p >= 0x20 && *p < 0x7f) {
            size_t need = *p == '&' ? 2 : 1;
            if (at + need >= out_size) {
                return -1;
            }
            out[at++] = (char)*p;
            if (*p == '&') {
                out[at++] = '-';
            }
            p++;
            continue;
        }
        if (at + 1 >= out_size) {
            return -1;
        }
        out[at++] = '&';
        uint32_t bits = 0;
        int nbits = 0;
        while (*p != '\0' && (*p < 0x20 || *p >= 0x7f)) {
            uint32_t cp = imap_utf8_next(&p);
            uint32_t units[2];
            size_t count = 1;
            if (cp >= 0x10000) {
                units[0] = 0xd800 + ((cp - 0x10000) >> 10);
                units[1] = 0xdc00 + ((cp - 0x10000) & 0x3ff);
                count = 2;
            } else {
                units[0] = cp;
            }
            for (size_t k = 0; k < count; k++) {
                bits = (bits << 16) | units[k];
                nbits += 16;
                while (nbits >= 6) {
                    nbits -= 6;
                    if (at + 1 >= out_size) {
                        return -1;
                    }
                    out[at++] = imap_utf7_alphabet[(bits >> nbits) & 0x3f];
                }
            }
        }
        if (nbits > 0) {
            if (at + 1 >= out_size) {
                return -1;
            }
            out[at++] = imap_utf7_alphabet[(bits << (6 - nbits)) & 0x3f];
        }
        if (at + 1 >= out_size) {
            return -1;
        }
        out[at++] = '-';
    }
    out[at] = '\0';
    return 0;
}

int imap_utf8_name_valid(const char *in, size_t len)
{
    if (!g_utf8_validate(in, (gssize)len, NULL)) {
        return 0; /* also refuses a NUL inside len */
    }
    for (const char *p = in; p < in + len; p = g_utf8_next_char(p)) {
        gunichar cp = g_utf8_get_char(p);
        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029) {
            return 0;
        }
    }
    return 1;
}
