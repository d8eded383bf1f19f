/*
 * buf.h -- a growable text buffer for the benchmarks that generate messages (bench_store,
 * bench_scale). Out of memory stops the program (bench_die).
 *
 * USAGE
 *   struct bench_buf b = {0};
 *   bench_buf_printf(&b, "Subject: %s\n", subject);
 *   ... b.data[0 .. b.len) ...; b.len = 0 to reuse it; bench_buf_free(&b) at the end.
 *   The data is not NUL-terminated.
 */
#ifndef MV_BENCH_BUF_H
#define MV_BENCH_BUF_H

#include <stddef.h>
#include <stdint.h>

struct bench_buf {
    char *data; /* owned; NULL until the first put */
    size_t len, cap;
};

/* Room for extra more bytes after len (so a caller may write b->data + b->len directly). */
void bench_buf_reserve(struct bench_buf *b, size_t extra);

/* Appends s[0 .. n). */
void bench_buf_put(struct bench_buf *b, const char *s, size_t n);

/* Appends the string s. */
void bench_buf_puts(struct bench_buf *b, const char *s);

/* Appends printf text of at most 1023 bytes (longer stops the program). */
void bench_buf_printf(struct bench_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Appends date (seconds since the epoch) as an RFC 5322 date in UTC:
 * "Tue, 30 Dec 2025 09:15:00 +0000". */
void bench_buf_put_date(struct bench_buf *b, int64_t date);

/* Frees the data and zeroes *b. */
void bench_buf_free(struct bench_buf *b);

#endif
