/*
 * buf.c -- see buf.h. The capacity doubles from 4 KiB.
 */
#include "buf.h"

#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void bench_buf_reserve(struct bench_buf *b, size_t extra)
{
    if (b->len + extra <= b->cap) {
        return;
    }
    size_t cap = b->cap > 0 ? b->cap : 4096;
    while (cap < b->len + extra) {
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        bench_die("out of memory (%zu bytes)", cap);
    }
    b->data = p;
    b->cap = cap;
}

void bench_buf_put(struct bench_buf *b, const char *s, size_t n)
{
    bench_buf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

void bench_buf_puts(struct bench_buf *b, const char *s)
{
    bench_buf_put(b, s, strlen(s));
}

void bench_buf_printf(struct bench_buf *b, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof text) {
        bench_die("bench_buf_printf: line too long");
    }
    bench_buf_put(b, text, (size_t)len);
}

void bench_buf_put_date(struct bench_buf *b, int64_t date)
{
    char text[64];
    time_t t = (time_t)date;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S +0000", &tm);
    bench_buf_puts(b, text);
}

void bench_buf_free(struct bench_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}
