/*
 * util.h -- what the benchmarks share besides their scratch directory (scratch.h) and text
 * buffer (buf.h): the monotonic clock, stopping with a message, statistics of timings, the
 * xorshift64* generator, readings of /proc, JSON text and numeric arguments. Each bench_*.c
 * keeps its own workload, its own figures and its own output format.
 *
 * IMPLEMENTATION NOTES
 *   - Messages on stderr start with the program's name (program_invocation_short_name,
 *     "bench_store" ...), as each program's own copy of these helpers used to print it.
 *   - rand() is banned: the generator is xorshift64*, seeded by the caller (each program
 *     has its own seed and its own way of deriving a stream's generator).
 */
#ifndef MV_BENCH_UTIL_H
#define MV_BENCH_UTIL_H

#include "mailvault.h"

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_STAT_VALUES_MAX 128 /* bench_stat_of: rounds or slices, never more */
#define BENCH_NOTES_MAX       8   /* bench_note: kept for the JSON; later ones only printed */
#define BENCH_NOTE_BYTES      240
#define BENCH_CHILD_ARGS_MAX  16

/* ---- time and failure ---- */

/* Seconds on the monotonic clock. */
double bench_now_s(void);

/* Prints "<program>: <message>" on stderr and exits with status 1. */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Dies with "what: <mv_strerror(rc)>[: <mv_store_errmsg(store)>]" unless rc is MV_OK. */
void bench_check(int rc, const char *what, const mv_store *store);

/* Dies with "<program>: <what> failed[: <sqlite3_errmsg(db)>]" (db may be NULL). */
void bench_fail(const char *what, sqlite3 *db) __attribute__((noreturn));

/* sqlite3_exec of sql, or bench_fail. */
void bench_exec(sqlite3 *db, const char *sql);

/* Removes db_path and its -wal, -shm and -journal files (best effort). */
void bench_remove_files(const char *db_path);

/* Zeroed memory of size bytes (at least 1), or bench_die; the caller frees it. */
void *bench_alloc(size_t size);

/* ---- statistics ---- */

/* Median, minimum and maximum of a few values (rounds, slices). */
struct bench_stat {
    double median, min, max;
};

/* The stat of values[0 .. count), 1 <= count <= BENCH_STAT_VALUES_MAX; values untouched. */
struct bench_stat bench_stat_of(const double *values, int count);

/* Sorts values ascending, in place. */
void bench_sort_doubles(double *values, size_t count);

/* The nearest-rank quantile q in [0, 1] of sorted[0 .. count), count >= 1. */
double bench_rank(const double *sorted, size_t count, double q);

/* Sorts values in place; returns the nearest-rank quantile q in [0, 1] (0 if count is 0). */
double bench_quantile(double *values, size_t count, double q);

/* 1 if v is finite (not NaN, not infinite), else 0. */
int bench_finite(double v);

/* ---- random numbers ---- */

struct bench_rng {
    uint64_t state; /* never 0 when made by bench_rng_seeded */
};

/* SplitMix64's finaliser: spreads the bits of x (seeds, per-message tags). */
uint64_t bench_rng_mix(uint64_t x);

/* A generator starting from state seed (0 is replaced by 1). */
struct bench_rng bench_rng_seeded(uint64_t seed);

/* The next 64 bits of xorshift64*. */
uint64_t bench_rng_next(struct bench_rng *r);

/* Uniform in [0, 1). */
double bench_rng_unit(struct bench_rng *r);

/* Uniform in [0, n); 0 if n is 0. */
uint32_t bench_rng_below(struct bench_rng *r, uint32_t n);

/* ---- the machine ---- */

/* A field of /proc/self/status in KiB ("VmRSS", "VmHWM", without the colon); -1 if absent. */
long bench_status_kib(const char *field);

/* The 1-minute load average (the machine may be shared: say how busy it was); -1 unknown. */
double bench_loadavg(void);

/* The CPU's model name from /proc/cpuinfo into out ("" if unknown). */
void bench_cpu_name(char *out, size_t size);

/* Runs this program again as a child: fork, then exec of /proc/self/exe with args (NULL-
 * terminated, at most BENCH_CHILD_ARGS_MAX), so that the child's memory figures start from a
 * fresh image, not from this process's heap. args[fd_index] is replaced by the number of a
 * pipe's write end, to which the child writes exactly size bytes: they land in out. Returns
 * 0, or -1 if the child did not exit with 0 or sent less; *status_out gets its wait status.
 * A failed pipe or fork stops the program. */
int bench_child_run(char *const *args, size_t fd_index, void *out, size_t size, int *status_out);

/* ---- output and arguments ---- */

/* Prints "note: <text>" (something the reader of the figures must know) and keeps the first
 * BENCH_NOTES_MAX, cut to BENCH_NOTE_BYTES - 1 bytes, for bench_json_notes. */
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The kept notes as JSON strings separated by ", " (the caller writes the brackets). */
void bench_json_notes(FILE *f);

/* s as a JSON string, quotes included. */
void bench_json_string(FILE *f, const char *s);

/* mkdir -p of the directory part of path (best effort: fopen reports what failed). */
void bench_make_parents(const char *path);

/* A decimal long in [min, max] from all of text into *out; 0, or -1 if it is not one. */
int bench_parse_long(const char *text, long min, long max, long *out);

#endif
