/*
 * buf.c -- growable byte buffers for input, output and responses. An allocation failure
 * sets oom and makes every later append a no-op: the caller checks once, at the end.
 */
#include "buf.h"

#include <glib.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every buffer may hold a message (a FETCH response, an APPEND literal) or a password:
 * wiped whenever it is let go, on a free and on a move. Only as far as anything may have
 * been written (buf.h dirty): the rest of the capacity was never touched, and wiping it
 * faulted its pages in only to free them (issue 13: a whole-message FETCH's buffers, about
 * half the page faults of a UID FETCH of 50 random messages). */
static size_t buf_written(const struct buf *b)
{
    size_t n = b->dirty > b->len ? b->dirty : b->len + 1;
    return n < b->cap ? n : b->cap;
}

/* BIG BLOCKS. A FETCH of whole messages builds its response in a job's buffer of up to a few
 * MiB, freed with the job: glibc gives blocks that large back to the kernel at once (munmap,
 * or madvise at a trim) and the next one is faulted in afresh, page by page: 16% of the
 * server's CPU in a UID FETCH of 50 random whole messages at 100,000 (perf). So the last
 * BUF_POOL_KEEP blocks of BUF_POOL_MIN to BUF_POOL_MAX bytes are kept, already wiped, for the
 * next buffer that grows that large (BUF_POOL_KEEP x BUF_POOL_MAX of memory at most; a few
 * lines here rather than a general allocator: glibc's own has no such per-size cache and
 * no other Debian library offers one worth the dependency). */
#define BUF_POOL_MIN  (256u * 1024u)
#define BUF_POOL_MAX  (4u * 1024u * 1024u)
#define BUF_POOL_KEEP 2
static pthread_mutex_t buf_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *data;
    size_t cap;
} buf_pool[BUF_POOL_KEEP];
static size_t buf_pool_count;

/* A block of at least *cap bytes (*cap: what it has): a kept one if one is large enough. */
static char *buf_block_get(size_t *cap)
{
    char *data = NULL;
    if (*cap >= BUF_POOL_MIN && *cap <= BUF_POOL_MAX) {
        pthread_mutex_lock(&buf_pool_lock);
        for (size_t i = 0; i < buf_pool_count; i++) {
            if (buf_pool[i].cap >= *cap) {
                data = buf_pool[i].data;
                *cap = buf_pool[i].cap;
                buf_pool[i] = buf_pool[--buf_pool_count];
                break;
            }
        }
        pthread_mutex_unlock(&buf_pool_lock);
    }
    return data != NULL ? data : malloc(*cap);
}

/* Lets a wiped block go: kept if it is big and there is room (a larger one replaces the
 * smallest kept), else freed. */
static void buf_block_put(char *data, size_t cap)
{
    if (data != NULL && cap >= BUF_POOL_MIN && cap <= BUF_POOL_MAX) {
        pthread_mutex_lock(&buf_pool_lock);
        if (buf_pool_count < BUF_POOL_KEEP) {
            buf_pool[buf_pool_count].data = data;
            buf_pool[buf_pool_count].cap = cap;
            buf_pool_count++;
            data = NULL;
        } else {
            size_t smallest = 0;
            for (size_t i = 1; i < buf_pool_count; i++) {
                smallest = buf_pool[i].cap < buf_pool[smallest].cap ? i : smallest;
            }
            if (buf_pool[smallest].cap < cap) {
                char *old = buf_pool[smallest].data;
                buf_pool[smallest].data = data;
                buf_pool[smallest].cap = cap;
                data = old;
            }
        }
        pthread_mutex_unlock(&buf_pool_lock);
    }
    free(data);
}

/* The block b's bytes live in (NULL: none), and its size. */
static char *buf_block(const struct buf *b)
{
    return b->data != NULL ? b->data - b->skip : NULL;
}

/* Wipes the block as far as anything may have been written (the bytes consumed in front of
 * data included) and lets it go. */
static void buf_block_drop(const struct buf *b)
{
    char *block = buf_block(b);
    if (block != NULL) {
        explicit_bzero(block, b->skip + buf_written(b)); /* memset's speed: not a key */
    }
    buf_block_put(block, b->skip + b->cap);
}

void buf_free(struct buf *b)
{
    buf_block_drop(b);
    memset(b, 0, sizeof *b);
}

void buf_wipe(struct buf *b)
{
    if (b->data != NULL) {
        OPENSSL_cleanse(buf_block(b), b->skip + b->cap); /* a password: wiped as keys are */
    }
    buf_free(b);
}

/* The bytes consumed in front of data given back: what is left moves to the block's start
 * (copying len bytes, which is no more than the skip bytes consumed since the last move
 * whenever buf_reserve does it, so each byte is moved about once). */
static void buf_compact(struct buf *b)
{
    if (b->skip == 0) {
        return;
    }
    char *block = buf_block(b);
    memmove(block, b->data, b->len + 1 <= b->cap ? b->len + 1 : b->len);
    b->dirty = b->skip + buf_written(b); /* from the block's start now */
    b->cap += b->skip;
    b->data = block;
    b->skip = 0;
}

int buf_reserve(struct buf *b, size_t extra)
{
    if (b->oom) {
        return -1;
    }
    if (b->cap - b->len <= extra && b->skip >= b->len && b->skip + b->cap - b->len > extra) {
        buf_compact(b); /* the room consumed in front suffices, and moving is cheap */
    }
    if (b->cap - b->len > extra) {
        b->dirty = b->len + extra + 1 > b->dirty ? b->len + extra + 1 : b->dirty;
        return 0;
    }
    size_t cap = b->cap != 0 ? b->cap : 256;
    while (cap - b->len <= extra) {
        if (cap > SIZE_MAX / 2) {
            b->oom = 1;
            return -1;
        }
        cap *= 2;
    }
    char *data = buf_block_get(&cap); /* not realloc: it would free the old block as it is */
    if (data == NULL) {
        b->oom = 1;
        return -1;
    }
    if (b->data != NULL) {
        memcpy(data, b->data, b->len + 1 <= b->cap ? b->len + 1 : b->len);
        buf_block_drop(b);
    }
    b->data = data;
    b->cap = cap;
    b->skip = 0;
    b->dirty = b->len + extra + 1; /* the old block's dirty bytes past len are not copied */
    return 0;
}

void buf_add(struct buf *b, const void *data, size_t len)
{
    if (len == 0 || buf_reserve(b, len) != 0) {
        return;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

char *buf_literal_place(struct buf *b, size_t len)
{
    BUF_LIT(b, "{");
    buf_u64(b, len);
    BUF_LIT(b, "}\r\n");
    return buf_reserve(b, len) == 0 ? b->data + b->len : NULL;
}

void buf_literal_placed(struct buf *b, size_t len)
{
    if (b->oom) {
        return;
    }
    char *at = b->data + b->len;
    b->len += len;
    b->data[b->len] = '\0';
    /* RFC 3501 9: a literal is CHAR8, which excludes NUL. Dovecot's choice, which clients
     * are used to: 0x80 in its place (the length stays; BINARY, RFC 3516, would be the way
     * to get the bytes as they are). */
    for (char *p = len > 0 ? memchr(at, '\0', len) : NULL; p != NULL;
         p = memchr(p + 1, '\0', (size_t)(at + len - (p + 1)))) {
        *p = (char)0x80;
    }
}

void buf_literal(struct buf *b, const void *data, size_t len)
{
    char *to = buf_literal_place(b, len);
    if (to == NULL) {
        return;
    }
    if (len > 0) {
        memcpy(to, data, len);
    }
    buf_literal_placed(b, len);
}

void buf_str(struct buf *b, const char *s)
{
    buf_add(b, s, strlen(s));
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        buf_add(b, small, (size_t)n);
        return;
    }
    if (buf_reserve(b, (size_t)n + 1) != 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void buf_u64(struct buf *b, uint64_t v)
{
    char digits[20]; /* UINT64_MAX has 20 */
    size_t at = sizeof digits;
    do {
        digits[--at] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    buf_add(b, digits + at, sizeof digits - at);
}

/* n (0..99) as two digits at to. */
static void buf_two_digits(char *to, int n)
{
    to[0] = (char)('0' + n / 10);
    to[1] = (char)('0' + n % 10);
}

void buf_imap_date(struct buf *b, int64_t when)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    time_t t = (time_t)when;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL) {
        memset(&tm, 0, sizeof tm); /* a year past INT_MAX: "00-Jan-0000 00:00:00", not garbage */
        tm.tm_year = -1900;
    }
    int year = tm.tm_year + 1900;
    if (year < 0 || year > 9999) { /* a width of its own: leave it to printf */
        buf_printf(b, "\"%02d-%.3s-%04d %02d:%02d:%02d +0000\"", tm.tm_mday,
                   months + (size_t)3 * (size_t)tm.tm_mon, year, tm.tm_hour, tm.tm_min, tm.tm_sec);
        return;
    }
    char s[] = "\"dd-Mon-yyyy hh:mm:ss +0000\"";
    buf_two_digits(s + 1, tm.tm_mday);
    memcpy(s + 4, months + (size_t)3 * (size_t)tm.tm_mon, 3);
    buf_two_digits(s + 8, year / 100);
    buf_two_digits(s + 10, year % 100);
    buf_two_digits(s + 13, tm.tm_hour);
    buf_two_digits(s + 16, tm.tm_min);
    buf_two_digits(s + 19, tm.tm_sec);
    buf_add(b, s, sizeof s - 1);
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        buf_compact(b); /* nothing left to move: the whole block is room again */
    } else {
        b->data += n;
        b->len -= n;
        b->cap -= n;
        b->skip += n;
        b->dirty = b->dirty > n ? b->dirty - n : 0;
    }
    if (b->data != NULL) {
        b->data[b->len] = '\0';
    }
}

void buf_imap_string(struct buf *b, const char *s, size_t len)
{
    buf_imap_string_utf8(b, s, len, 0);
}

void buf_imap_string_utf8(struct buf *b, const char *s, size_t len, int utf8)
{
    int plain = len <= 1024, eight_bit = 0;
    size_t escapes = 0;
    for (size_t i = 0; plain && i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        eight_bit |= c >= 0x80;
        escapes += c == '"' || c == '\\';
        plain = (c >= 0x20 && c < 0x7f) || (utf8 && c >= 0x80);
    }
    /* RFC 6855 3: UTF-8 in a quoted string only for a session that enabled it, and then only
     * well-formed UTF-8 (other 8-bit bytes still go as a literal). */
    if (plain && eight_bit && !g_utf8_validate(s, (gssize)len, NULL)) {
        plain = 0;
    }
    if (!plain) {
        buf_literal(b, s, len);
        return;
    }
    /* One reserve for the whole quoted string (len <= 1024 here, so no overflow); one
     * memcpy when nothing needs a backslash, else one before each '"' and '\\'. */
    if (buf_reserve(b, len + escapes + 2) != 0) {
        return;
    }
    char *o = b->data + b->len;
    *o++ = '"';
    if (escapes == 0 && len != 0) {
        memcpy(o, s, len);
        o += len;
    } else {
        for (size_t i = 0; i < len; i++) {
            if (s[i] == '"' || s[i] == '\\') {
                *o++ = '\\';
            }
            *o++ = s[i];
        }
    }
    *o++ = '"';
    *o = '\0';
    b->len = (size_t)(o - b->data);
}

void buf_imap_nstring(struct buf *b, const char *s)
{
    if (s == NULL) {
        buf_str(b, "NIL");
    } else {
        buf_imap_string(b, s, strlen(s));
    }
}
