/*
 * util.c -- see util.h. Plain helpers with no state of their own.
 */
#include "util.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_UTIL_PATH_BYTES_MAX 4096

static char bench_notes[BENCH_NOTES_MAX][BENCH_NOTE_BYTES];
static int bench_note_count;

/* ---- time and failure ---- */

double bench_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program_invocation_short_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void bench_check(int rc, const char *what, const mv_store *store)
{
    if (rc != MV_OK) {
        bench_die("%s: %s%s%s", what, mv_strerror(rc), store != NULL ? ": " : "",
                  store != NULL ? mv_store_errmsg(store) : "");
    }
}

void bench_fail(const char *what, sqlite3 *db)
{
    fprintf(stderr, "%s: %s failed%s%s\n", program_invocation_short_name, what,
            db != NULL ? ": " : "", db != NULL ? sqlite3_errmsg(db) : "");
    exit(1);
}

void bench_exec(sqlite3 *db, const char *sql)
{
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        bench_fail(sql, db);
    }
}

void bench_remove_files(const char *db_path)
{
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    char path[BENCH_UTIL_PATH_BYTES_MAX + 16];
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        snprintf(path, sizeof path, "%s%s", db_path, suffixes[i]);
        (void)unlink(path);
    }
}

void *bench_alloc(size_t size)
{
    void *p = calloc(1, size > 0 ? size : 1);
    if (p == NULL) {
        bench_die("out of memory (%zu bytes)", size);
    }
    return p;
}

/* ---- statistics ---- */

static int bench_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort_doubles(double *values, size_t count)
{
    qsort(values, count, sizeof values[0], bench_compare_double);
}

struct bench_stat bench_stat_of(const double *values, int count)
{
    assert(count >= 1 && count <= BENCH_STAT_VALUES_MAX);
    double sorted[BENCH_STAT_VALUES_MAX];
    memcpy(sorted, values, (size_t)count * sizeof sorted[0]);
    bench_sort_doubles(sorted, (size_t)count);
    struct bench_stat s = {sorted[count / 2], sorted[0], sorted[count - 1]};
    if (count % 2 == 0) {
        s.median = (sorted[count / 2 - 1] + sorted[count / 2]) / 2;
    }
    return s;
}

double bench_rank(const double *sorted, size_t count, double q)
{
    assert(count >= 1);
    size_t rank = (size_t)(q * (double)count + 0.999999);
    rank = rank < 1 ? 1 : rank > count ? count : rank;
    return sorted[rank - 1];
}

double bench_quantile(double *values, size_t count, double q)
{
    if (count == 0) {
        return 0;
    }
    bench_sort_doubles(values, count);
    return bench_rank(values, count, q);
}

int bench_finite(double v)
{
    return v == v && v - v == 0;
}

/* ---- random numbers ---- */

uint64_t bench_rng_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

struct bench_rng bench_rng_seeded(uint64_t seed)
{
    struct bench_rng r = {seed != 0 ? seed : 1};
    return r;
}

uint64_t bench_rng_next(struct bench_rng *r)
{
    r->state ^= r->state >> 12;
    r->state ^= r->state << 25;
    r->state ^= r->state >> 27;
    return r->state * 0x2545f4914f6cdd1du;
}

double bench_rng_unit(struct bench_rng *r)
{
    return (double)(bench_rng_next(r) >> 11) * 0x1p-53;
}

uint32_t bench_rng_below(struct bench_rng *r, uint32_t n)
{
    return n == 0 ? 0 : (uint32_t)(bench_rng_next(r) % n);
}

/* ---- the machine ---- */

long bench_status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    size_t len = strlen(field);
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, len) == 0 && line[len] == ':') {
            kib = strtol(line + len + 1, NULL, 10);
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kib;
}

double bench_loadavg(void)
{
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &load) != 1) {
            load = -1;
        }
        fclose(f);
    }
    return load;
}

void bench_cpu_name(char *out, size_t size)
{
    FILE *info = fopen("/proc/cpuinfo", "r");
    char line[256];
    out[0] = '\0';
    while (info != NULL && fgets(line, sizeof line, info) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon != NULL) {
            snprintf(out, size, "%s", colon + 2);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    }
    if (info != NULL) {
        fclose(info);
    }
}

int bench_child_run(char *const *args, size_t fd_index, void *out, size_t size, int *status_out)
{
    char *child_args[BENCH_CHILD_ARGS_MAX + 1];
    size_t count = 0;
    for (; args[count] != NULL; count++) {
        assert(count < BENCH_CHILD_ARGS_MAX);
        child_args[count] = args[count];
    }
    child_args[count] = NULL;
    assert(fd_index < count);
    int fds[2];
    if (pipe(fds) != 0) {
        bench_die("pipe: %s", strerror(errno));
    }
    char fd_text[16];
    snprintf(fd_text, sizeof fd_text, "%d", fds[1]);
    child_args[fd_index] = fd_text;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        bench_die("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        execv("/proc/self/exe", child_args);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fds[0], (char *)out + got, size - got);
        if (n <= 0 && !(n < 0 && errno == EINTR)) {
            break;
        }
        got += n > 0 ? (size_t)n : 0;
    }
    close(fds[0]);
    *status_out = 0;
    if (waitpid(pid, status_out, 0) != pid || !WIFEXITED(*status_out) ||
        WEXITSTATUS(*status_out) != 0 || got != size) {
        return -1;
    }
    return 0;
}

/* ---- output and arguments ---- */

void bench_note(const char *fmt, ...)
{
    char text[BENCH_NOTE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("note: %s\n", text);
    if (bench_note_count < BENCH_NOTES_MAX) {
        snprintf(bench_notes[bench_note_count++], BENCH_NOTE_BYTES, "%s", text);
    }
}

void bench_json_notes(FILE *f)
{
    for (int i = 0; i < bench_note_count; i++) {
        fputs(i > 0 ? ", " : "", f);
        bench_json_string(f, bench_notes[i]);
    }
}

void bench_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            fprintf(f, "\\%c", ch);
        } else if (ch < 0x20) {
            fprintf(f, "\\u%04x", ch);
        } else {
            fputc(ch, f);
        }
    }
    fputc('"', f);
}

void bench_make_parents(const char *path)
{
    char dir[BENCH_UTIL_PATH_BYTES_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            (void)mkdir(dir, 0755);
            *p = '/';
        }
    }
}

int bench_parse_long(const char *text, long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min || value > max) {
        return -1;
    }
    *out = value;
    return 0;
}
