/*
 * bench_scale.c -- mailvault at the scale of a server: many user stores opened and closed,
 * many of them held open at once, and one writer delivering into a store while N readers
 * (IMAP sessions, each with its own handle) read it.
 *
 * USAGE
 *   build/rel/bench/bench_scale [--quick] [--stores N] [--hold K] [--store-messages M]
 *                               [--messages P] [--seconds S] [--readers 1,4,16]
 *                               [--kdf-iter I] [--small-cache-kib C] [--only stores|concurrency]
 *                               [--dir DIR] [--json PATH]
 *     --quick             scaled down so the whole program takes ~15 s (make bench QUICK=1
 *                         has two minutes for everything): 40 stores, 16 held, 200
 *                         messages, 1.5 s per reader count
 *     --stores N          user stores created and opened (default 1000)
 *     --hold K            stores held open at once for file handles and memory (default 200;
 *                         at most N); the first K stores get M messages each first
 *     --store-messages M  messages delivered into each held store (default 10), so that the
 *                         touch after the open has pages to cache
 *     --messages P        the concurrency store's messages before the readers start (2000)
 *     --seconds S         length of each writer + readers run (default 10)
 *     --readers LIST      reader counts, comma-separated (default 1,4,16; at most 64)
 *     --kdf-iter I        KDF iterations of every store (default 0: the library's default,
 *                         64007 for chacha20). Only the smoke test lowers it; the JSON says so
 *     --small-cache-kib C the small page cache of the second memory measurement (default 512)
 *     --only SECTION      stores or concurrency
 *     --dir DIR           parent of the scratch directory (default $TMPDIR, else ./var/bench)
 *     --json PATH         where the figures go (default build/bench-results/scale.json)
 *
 * SECTIONS
 *   stores       1. mv_store_init of N stores (ROOT/scale.example/userNNNN.db), timed each,
 *                   plus F = min(N, 20) stores made with kdf_iter 1 for the KDF share.
 *                2. M messages into each of the first K stores (untimed set-up).
 *                3. The open/close pass: every store once, the kdf_iter-1 stores spread
 *                   among them: mv_store_open and mv_store_close timed separately.
 *                   kdf_ms = p50 open (default KDF) - p50 open (kdf_iter 1); kdf_share =
 *                   kdf_ms / p50 open.
 *                4. Held open: a child process (fork + exec of this program, so its memory
 *                   starts from a fresh image) opens one store and closes it (libraries and
 *                   one-time state loaded), counts /proc/self/fd and reads VmRSS, then opens
 *                   the K stores and holds them: fds and VmRSS again; then touches each
 *                   (mailbox get, the 20 newest by search, 3 fetches) and reads VmRSS again.
 *                   Done twice: the default page cache, and cache_size_kib = C.
 *                   Memory per open store = RSS delta / K.
 *   concurrency  A store with P messages; for each reader count N: N reader threads, each
 *                with its own mv_store handle (opened read-write, as an IMAP session would),
 *                and one writer thread with its own handle appending generated messages
 *                without pause, for S seconds. Readers loop over a mix chosen at random:
 *                mv_mailbox_status(INBOX) (what an IMAP session asks on SELECT, STATUS and
 *                NOOP); a search of INBOX read to its 50 newest results;
 *                mv_message_fetch of a random UID; mv_message_get of a random UID. Every
 *                call is timed; any MV_EBUSY is counted (there should be none: WAL readers
 *                never wait for the writer, and the busy timeout is 30 s), any other error
 *                stops the program. VmRSS is sampled every 20 ms: the peak per run.
 *                Before the runs, memory per handle once a session has read the whole
 *                mailbox: a child opens 4 handles on the store and each reads every message
 *                (mv_message_get + mv_message_fetch); VmRSS after the opens and after the
 *                reads, with the default page cache and with cache_size_kib = C.
 *
 * OUTPUT
 *   One line per figure on stdout, a table at the end, and a JSON document
 *   ("schema": "mailvault-bench-scale/1", bench/results/SCHEMA.md).
 *
 * IMPLEMENTATION NOTES
 *   - Only the public API (mailvault.h), libc and pthreads; mv_store_db() only to read
 *     PRAGMA cache_size back.
 *   - The message generator is this file's own: fixed seed, xorshift64*, one message at a
 *     time (nothing holds the corpus); sizes 2 KB .. 200 KB, a tenth with a base64
 *     attachment; multipart/alternative text + html bodies of skewed word frequencies.
 *   - Latency percentiles are nearest-rank over every call.
 *
 * LIMITATIONS
 *   A 2-core machine runs 16 readers and a writer on 2 cores: the figures then measure how
 *   the work shares the CPU, not contention inside the library. The memory of a held store
 *   grows with use up to its page cache; the touch gives a lower bound, not the ceiling.
 */
#include "buf.h"
#include "mailvault.h"
#include "scratch.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SCALE_SEED              0x7363616c65626e63u /* "scalebnc" */
#define SCALE_PATH_BYTES_MAX    4096
#define SCALE_STORES_MAX        100000L
#define SCALE_READER_RUNS_MAX   8
#define SCALE_READERS_MAX       64
#define SCALE_FAST_KDF_STORES   20
#define SCALE_TOUCH_NEWEST      20
#define SCALE_TOUCH_FETCHES     3
#define SCALE_SEARCH_NEWEST     50
#define SCALE_RSS_SAMPLE_NS     20000000L
#define SCALE_DATE_LAST         1767139200L /* 2025-12-31 00:00:00 UTC */
#define SCALE_MESSAGE_BYTES_MAX (256u * 1024u)

int main(int argc, char **argv);

static const char scale_password[] = "scale bench password";
static const char scale_domain[] = "scale.example";

struct scale_opts {
    int quick;
    long stores, hold, store_messages, messages;
    double seconds;
    int readers[SCALE_READER_RUNS_MAX];
    int reader_runs;
    uint32_t kdf_iter;
    int64_t small_cache_kib;
    const char *only; /* NULL: both sections */
    const char *parent_dir;
    const char *json_path;
};

static struct scale_opts scale_opts;
static char scale_dir[SCALE_PATH_BYTES_MAX];
static char scale_root[SCALE_PATH_BYTES_MAX];

/* ---- small utilities --------------------------------------------------------------------- */

/* Open file descriptors of this process (the directory stream's own one not counted). */
static long scale_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    long count = 0;
    if (d == NULL) {
        return -1;
    }
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        count += e->d_name[0] != '.';
    }
    closedir(d);
    return count - 1;
}

/* The soft limit on open files raised to the hard limit: K stores hold several fds each. */
static void scale_raise_fd_limit(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &r);
    }
}

/* ---- random numbers ---------------------------------------------------------------------- */

static struct bench_rng scale_rng_for(uint64_t stream, uint64_t index)
{
    return bench_rng_seeded(
        bench_rng_mix(SCALE_SEED ^ bench_rng_mix(stream) ^ bench_rng_mix(index)));
}

/* A rank in [0, n) skewed to the front: u^3 (the top tenth of ranks gets ~46% of draws). */
static uint32_t scale_rng_skewed(struct bench_rng *r, uint32_t n)
{
    double u = bench_rng_unit(r);
    uint32_t rank = (uint32_t)(u * u * u * (double)n);
    return rank < n ? rank : n - 1;
}

/* ---- statistics -------------------------------------------------------------------------- */

struct scale_samples { /* a growable array of latencies in seconds */
    double *values;
    size_t count, cap;
};

static void scale_samples_add(struct scale_samples *s, double v)
{
    if (s->count == s->cap) {
        size_t cap = s->cap > 0 ? s->cap * 2 : 1024;
        double *p = realloc(s->values, cap * sizeof *p);
        if (p == NULL) {
            bench_die("out of memory");
        }
        s->values = p;
        s->cap = cap;
    }
    s->values[s->count++] = v;
}

static void scale_samples_append(struct scale_samples *to, const struct scale_samples *from)
{
    for (size_t i = 0; i < from->count; i++) {
        scale_samples_add(to, from->values[i]);
    }
}

static void scale_samples_free(struct scale_samples *s)
{
    free(s->values);
    memset(s, 0, sizeof *s);
}

/* Summary of latencies: count, p50, p99 and max in ms, sum in seconds. */
struct scale_lat {
    size_t count;
    double p50_ms, p99_ms, max_ms, sum_s;
};

/* Sorts s in place. */
static struct scale_lat scale_lat_of(struct scale_samples *s)
{
    struct scale_lat l = {s->count, 0, 0, 0, 0};
    if (s->count == 0) {
        return l;
    }
    bench_sort_doubles(s->values, s->count);
    for (size_t i = 0; i < s->count; i++) {
        l.sum_s += s->values[i];
    }
    l.p50_ms = bench_rank(s->values, s->count, 0.50) * 1e3;
    l.p99_ms = bench_rank(s->values, s->count, 0.99) * 1e3;
    l.max_ms = s->values[s->count - 1] * 1e3;
    return l;
}

/* ---- the message generator --------------------------------------------------------------- */

static const char *const scale_words[] = {
    "the",      "and",     "to",       "of",        "a",        "in",        "is",
    "for",      "on",      "that",     "with",      "this",     "we",        "you",
    "it",       "be",      "are",      "as",        "at",       "have",      "will",
    "not",      "can",     "our",      "please",    "meeting",  "project",   "update",
    "report",   "team",    "thanks",   "next",      "week",     "today",     "tomorrow",
    "review",   "budget",  "invoice",  "contract",  "schedule", "draft",     "attached",
    "customer", "release", "deadline", "question",  "answer",   "proposal",  "quarter",
    "sales",    "server",  "database", "backup",    "deploy",   "issue",     "ticket",
    "support",  "office",  "travel",   "agenda",    "minutes",  "feedback",  "design",
    "testing",  "results", "forecast", "planning",  "notes",    "summary",   "approval",
    "payment",  "order",   "shipping", "warehouse", "supplier", "account",   "password",
    "security", "audit",   "policy",   "training",  "hiring",   "interview", "salary",
    "benefits", "tax",     "receipt",  "expense",   "board",    "strategy",  "marketing",
    "campaign", "launch",  "website",  "metrics",   "latency",  "outage",    "incident"};
#define SCALE_WORD_COUNT ((uint32_t)(sizeof scale_words / sizeof scale_words[0]))

static const char *const scale_syllables[] = {"ba", "ce", "di", "fo", "gu", "ha", "ke", "li",
                                              "mo", "nu", "pa", "re", "si", "to", "va", "ze"};

static const char *const scale_people[] = {
    "Maria Garcia", "James Smith", "Aiko Tanaka",   "Olga Ivanova", "Pierre Dubois",
    "Fatima Khan",  "Chen Wang",   "Lars Berg",     "Priya Patel",  "Diego Lopez",
    "Emma Muller",  "Noah Rossi",  "Sofia Novak",   "Ahmed Haddad", "Ingrid Larsen",
    "Kenji Sato",   "Lucia Silva", "Marco Bianchi", "Nadia Petrov", "Oscar Nilsson"};
#define SCALE_PEOPLE_COUNT ((uint32_t)(sizeof scale_people / sizeof scale_people[0]))

/* A word: mostly the common list (skewed), a fifth a pseudo-word of two or three syllables. */
static void scale_put_word(struct bench_buf *b, struct bench_rng *r)
{
    if (bench_rng_below(r, 5) != 0) {
        const char *w = scale_words[scale_rng_skewed(r, SCALE_WORD_COUNT)];
        bench_buf_put(b, w, strlen(w));
        return;
    }
    uint32_t syllables = 2 + bench_rng_below(r, 2);
    for (uint32_t s = 0; s < syllables; s++) {
        bench_buf_put(b, scale_syllables[bench_rng_below(r, 16)], 2);
    }
}

/* Lines of words, about target bytes, each line ending in "\n". */
static void scale_put_text(struct bench_buf *b, struct bench_rng *r, size_t target)
{
    size_t start = b->len, column = 0;
    while (b->len - start < target) {
        if (column > 66) {
            bench_buf_put(b, "\n", 1);
            column = 0;
        } else if (column > 0) {
            bench_buf_put(b, " ", 1);
        }
        size_t before = b->len;
        scale_put_word(b, r);
        column += b->len - before + 1;
    }
    bench_buf_put(b, "\n", 1);
}

/* Base64-looking lines (76 columns) of random letters, about bytes long. */
static void scale_put_base64(struct bench_buf *b, struct bench_rng *r, size_t bytes)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char line[77];
    for (size_t done = 0; done < bytes; done += sizeof line) {
        for (size_t k = 0; k < 76; k += 8) {
            uint64_t v = bench_rng_next(r);
            for (size_t j = 0; j < 8 && k + j < 76; j++) {
                line[k + j] = alphabet[(v >> (6 * j)) & 63];
            }
        }
        line[76] = '\n';
        bench_buf_put(b, line, sizeof line);
    }
}

/* Message index of stream into out (replacing it); *date_out gets its date. Sizes: 70%
 * 2 .. 8 KB, 20% 8 .. 40 KB of text, 10% with an attachment of 40 .. 200 KB. */
static void scale_message(uint64_t stream, uint32_t index, struct bench_buf *out, int64_t *date_out)
{
    struct bench_rng r = scale_rng_for(stream, index);
    uint32_t kind = bench_rng_below(&r, 10);
    size_t text_bytes = kind < 7   ? 1000 + bench_rng_below(&r, 3000)
                        : kind < 9 ? 4000 + bench_rng_below(&r, 16000)
                                   : 600 + bench_rng_below(&r, 1500);
    int64_t date = SCALE_DATE_LAST - 86400L * 365 + (int64_t)index * 600;
    const char *from = scale_people[scale_rng_skewed(&r, SCALE_PEOPLE_COUNT)];
    char boundary[40];
    snprintf(boundary, sizeof boundary, "=_b_%016llx", (unsigned long long)bench_rng_next(&r));
    out->len = 0;
    bench_buf_printf(out,
                     "Return-Path: <%.5s@example.com>\nReceived: from mx.example.com by "
                     "mx.scale.example with ESMTPS id %08x\nDate: ",
                     from, (unsigned)bench_rng_next(&r));
    bench_buf_put_date(out, date);
    bench_buf_printf(out, "\nFrom: \"%s\" <%.5s@example.com>\nTo: <user@scale.example>\n", from,
                     from);
    bench_buf_printf(out, "Message-ID: <%u.%016llx@example.com>\nSubject: ", index,
                     (unsigned long long)bench_rng_mix(stream ^ index));
    for (int w = 0; w < 5; w++) {
        scale_put_word(out, &r);
        bench_buf_put(out, w < 4 ? " " : "\n", 1);
    }
    bench_buf_printf(out, "MIME-Version: 1.0\nContent-Type: multipart/%s; boundary=\"%s\"\n\n",
                     kind == 9 ? "mixed" : "alternative", boundary);
    bench_buf_printf(out, "--%s\nContent-Type: text/plain; charset=utf-8\n\n", boundary);
    size_t text_at = out->len;
    scale_put_text(out, &r, text_bytes);
    size_t text_len = out->len - text_at;
    bench_buf_printf(out, "--%s\nContent-Type: text/html; charset=utf-8\n\n<html><body><p>\n",
                     boundary);
    struct bench_rng again = scale_rng_for(stream ^ 0x68746d6cu, index);
    scale_put_text(out, &again, text_len);
    bench_buf_printf(out, "</p></body></html>\n");
    if (kind == 9) {
        bench_buf_printf(out,
                         "--%s\nContent-Type: application/pdf; name=\"doc%u.pdf\"\n"
                         "Content-Disposition: attachment; filename=\"doc%u.pdf\"\n"
                         "Content-Transfer-Encoding: base64\n\n",
                         boundary, index, index);
        scale_put_base64(out, &r, 40000 + bench_rng_below(&r, 160000));
    }
    bench_buf_printf(out, "--%s--\n", boundary);
    *date_out = date;
}

/* ---- stores ---------------------------------------------------------------------------------- */

static void scale_address(char *out, size_t size, const char *kind, long index)
{
    snprintf(out, size, "%s%05ld@%s", kind, index, scale_domain);
}

static struct mv_store_options scale_store_options(uint32_t kdf_iter, int64_t cache_kib)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = scale_root;
    o.kdf_iter = kdf_iter;
    o.cache_size_kib = cache_kib;
    return o;
}

static void scale_store_init(const char *address, uint32_t kdf_iter)
{
    struct mv_store_options o = scale_store_options(kdf_iter, 0);
    char errmsg[512];
    int rc =
        mv_store_init(address, scale_password, strlen(scale_password), &o, errmsg, sizeof errmsg);
    if (rc != MV_OK) {
        bench_die("mv_store_init(%s): %s: %s", address, mv_strerror(rc), errmsg);
    }
}

static mv_store *scale_store_open(const char *address, uint32_t kdf_iter, int64_t cache_kib)
{
    struct mv_store_options o = scale_store_options(kdf_iter, cache_kib);
    char errmsg[512];
    mv_store *store = NULL;
    int rc = mv_store_open(address, scale_password, strlen(scale_password), &o, &store, errmsg,
                           sizeof errmsg);
    if (rc != MV_OK) {
        bench_die("mv_store_open(%s): %s: %s", address, mv_strerror(rc), errmsg);
    }
    return store;
}

/* Appends count generated messages (stream, first .. first+count-1) to INBOX. */
static void scale_fill(mv_store *store, uint64_t stream, uint32_t first, uint32_t count)
{
    struct bench_buf msg = {0};
    for (uint32_t i = first; i < first + count; i++) {
        int64_t date = 0;
        scale_message(stream, i, &msg, &date);
        bench_check(mv_message_append(store, "INBOX", msg.data, msg.len, 0, NULL, date, NULL),
                    "mv_message_append", store);
    }
    bench_buf_free(&msg);
}

/* The page cache the store runs with, in KiB (PRAGMA cache_size read back); -1 unknown. */
static long scale_cache_kib(mv_store *store)
{
    sqlite3_stmt *st = NULL;
    long kib = -1;
    if (sqlite3_prepare_v2(mv_store_db(store), "PRAGMA cache_size", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        sqlite3_int64 v = sqlite3_column_int64(st, 0);
        kib = (long)(v < 0 ? -v : v * 4);
    }
    sqlite3_finalize(st);
    return kib;
}

/* Reads the newest `newest` messages of INBOX by search (each result's info read). Returns the
 * number read, or a negative MV_E* code. */
static int scale_read_newest(mv_store *store, uint32_t newest)
{
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    q.mailbox = "INBOX";
    mv_search *search = NULL;
    int rc = mv_search_begin(store, &q, &search);
    if (rc != MV_OK) {
        return rc;
    }
    struct mv_message_info info;
    int read = 0;
    while ((uint32_t)read < newest && (rc = mv_search_next(search, &info)) == 1) {
        read++;
    }
    mv_search_end(&search);
    return rc < 0 ? rc : read;
}

/* ---- section: stores --------------------------------------------------------------------- */

struct scale_held { /* what a hold child measured */
    long stores, fds_before, fds_held, rss_before_kib, rss_open_kib, rss_touched_kib, hwm_kib;
    long cache_kib;
    double open_s, touch_s;
};

struct scale_stores_result {
    long stores, fast_stores;
    struct scale_lat init, open, close, open_fast;
    double init_wall_s, pass_wall_s, fill_wall_s;
    double kdf_ms, kdf_share;
    struct scale_held held[2];
    int64_t held_cache_kib[2];
};

/* The hold child's use of a held store: the mailbox, its newest messages by search and a
 * few fetches, as a client opening it would. */
static void scale_touch(mv_store *store)
{
    struct mv_mailbox_info info;
    bench_check(mv_mailbox_get(store, "INBOX", &info), "mv_mailbox_get", store);
    int rc = scale_read_newest(store, SCALE_TOUCH_NEWEST);
    bench_check(rc < 0 ? rc : MV_OK, "search", store);
    for (uint32_t k = 0; k < SCALE_TOUCH_FETCHES && k < info.messages; k++) {
        void *raw = NULL;
        size_t len = 0;
        bench_check(mv_message_fetch(store, "INBOX", info.uidnext - 1 - k, &raw, &len),
                    "mv_message_fetch", store);
        mv_free(raw);
    }
}

/* The read child's use of a handle: mv_message_get and mv_message_fetch of every UID. */
static void scale_read_all(mv_store *store)
{
    struct mv_mailbox_info box;
    bench_check(mv_mailbox_get(store, "INBOX", &box), "mv_mailbox_get", store);
    for (uint32_t uid = 1; uid < box.uidnext; uid++) {
        struct mv_message_info info;
        void *raw = NULL;
        size_t len = 0;
        bench_check(mv_message_get(store, "INBOX", uid, &info), "mv_message_get", store);
        bench_check(mv_message_fetch(store, "INBOX", uid, &raw, &len), "mv_message_fetch", store);
        mv_free(raw);
    }
}

/* Child: opens one store (warm-up), then count handles and uses each; writes a struct
 * scale_held to fd. address NULL (the hold child): user stores 0..count-1, each touched
 * (scale_touch), the warm-up on another one; else (the read child): count handles on
 * address, each reading every message (scale_read_all). Never returns. */
static void scale_held_child(
    const char *address, long count, long total, uint32_t kdf_iter, int64_t cache_kib, int fd)
    __attribute__((noreturn));
static void scale_held_child(
    const char *address, long count, long total, uint32_t kdf_iter, int64_t cache_kib, int fd)
{
    struct scale_held h;
    char user[128];
    memset(&h, 0, sizeof h);
    h.stores = count;
    if (address == NULL) {
        scale_raise_fd_limit();
        scale_address(user, sizeof user, "user", count < total ? count : 0);
    }
    mv_store *warm = scale_store_open(address != NULL ? address : user, kdf_iter, cache_kib);
    mv_store_close(&warm);
    mv_store **held = bench_alloc((size_t)count * sizeof(mv_store *));
    h.fds_before = scale_fd_count();
    h.rss_before_kib = bench_status_kib("VmRSS");
    double start = bench_now_s();
    for (long i = 0; i < count; i++) {
        if (address == NULL) {
            scale_address(user, sizeof user, "user", i);
        }
        held[i] = scale_store_open(address != NULL ? address : user, kdf_iter, cache_kib);
    }
    h.open_s = bench_now_s() - start;
    h.fds_held = scale_fd_count();
    h.rss_open_kib = bench_status_kib("VmRSS");
    h.cache_kib = scale_cache_kib(held[0]);
    start = bench_now_s();
    for (long i = 0; i < count; i++) {
        if (address == NULL) {
            scale_touch(held[i]);
        } else {
            scale_read_all(held[i]);
        }
    }
    h.touch_s = bench_now_s() - start;
    h.rss_touched_kib = bench_status_kib("VmRSS");
    h.hwm_kib = bench_status_kib("VmHWM");
    for (long i = 0; i < count; i++) {
        mv_store_close(&held[i]);
    }
    free(held);
    ssize_t n = write(fd, &h, sizeof h);
    _exit(n == (ssize_t)sizeof h ? 0 : 1);
}

/* Runs a child (bench_child_run: a fresh image) and returns its figures: the first count
 * user stores held open (address NULL), or count handles on address, each reading every
 * message. */
static struct scale_held
scale_hold_run(long count, long total, int64_t cache_kib, const char *address)
{
    char a_count[24], a_total[24], a_kdf[24], a_cache[24];
    snprintf(a_count, sizeof a_count, "%ld", count);
    snprintf(a_total, sizeof a_total, "%ld", total);
    snprintf(a_kdf, sizeof a_kdf, "%u", scale_opts.kdf_iter);
    snprintf(a_cache, sizeof a_cache, "%lld", (long long)cache_kib);
    char *args[] = {(char *)(uintptr_t) "bench_scale",
                    (char *)(uintptr_t) "--hold-child",
                    scale_root,
                    a_count,
                    a_total,
                    a_kdf,
                    a_cache,
                    (char *)(uintptr_t) "FD", /* the pipe's number, filled in */
                    (char *)(uintptr_t)(address != NULL ? address : "-"),
                    NULL};
    struct scale_held h;
    int status = 0;
    if (bench_child_run(args, 7, &h, sizeof h, &status) != 0) {
        bench_die("the hold child failed (status 0x%x)", (unsigned)status);
    }
    return h;
}

/* 1. mv_store_init of every store, the kdf_iter-1 ones interleaved. */
static void scale_stores_init(struct scale_stores_result *res)
{
    struct scale_samples lat = {0};
    char address[128];
    double start = bench_now_s();
    for (long i = 0; i < res->stores; i++) {
        scale_address(address, sizeof address, "user", i);
        double t0 = bench_now_s();
        scale_store_init(address, scale_opts.kdf_iter);
        scale_samples_add(&lat, bench_now_s() - t0);
        if (i % (res->stores / res->fast_stores) == 0 &&
            i / (res->stores / res->fast_stores) < res->fast_stores) {
            scale_address(address, sizeof address, "fastkdf", i / (res->stores / res->fast_stores));
            scale_store_init(address, 1);
        }
    }
    res->init_wall_s = bench_now_s() - start;
    res->init = scale_lat_of(&lat);
    scale_samples_free(&lat);
}

/* 3. Every store opened and closed once, the kdf_iter-1 stores spread among them. */
static void scale_stores_pass(struct scale_stores_result *res)
{
    struct scale_samples open = {0}, close = {0}, fast = {0};
    char address[128];
    long step = res->stores / res->fast_stores;
    double start = bench_now_s();
    for (long i = 0; i < res->stores; i++) {
        int is_fast = i % step == step / 2 && i / step < res->fast_stores;
        for (int k = 0; k < 1 + is_fast; k++) {
            if (k == 0) {
                scale_address(address, sizeof address, "user", i);
            } else {
                scale_address(address, sizeof address, "fastkdf", i / step);
            }
            double t0 = bench_now_s();
            mv_store *store = scale_store_open(address, k == 0 ? scale_opts.kdf_iter : 1, 0);
            double t1 = bench_now_s();
            mv_store_close(&store);
            double t2 = bench_now_s();
            scale_samples_add(k == 0 ? &open : &fast, t1 - t0);
            scale_samples_add(&close, t2 - t1);
        }
    }
    res->pass_wall_s = bench_now_s() - start;
    res->open = scale_lat_of(&open);
    res->close = scale_lat_of(&close);
    res->open_fast = scale_lat_of(&fast);
    res->kdf_ms = res->open.p50_ms - res->open_fast.p50_ms;
    res->kdf_share = res->kdf_ms / res->open.p50_ms;
    scale_samples_free(&open);
    scale_samples_free(&close);
    scale_samples_free(&fast);
}

/* One figure: calls per second of time inside the call (count / seconds), p50, p99, max. */
static void scale_print_lat(const char *name, const struct scale_lat *l, double seconds)
{
    printf("%-34s %8.1f /s  p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms  (%zu calls)\n", name,
           seconds > 0 ? (double)l->count / seconds : 0, l->p50_ms, l->p99_ms, l->max_ms, l->count);
    fflush(stdout);
}

static void scale_print_held(const char *label, const struct scale_held *h)
{
    printf("scale.held.%-7s %ld stores: fds %ld -> %ld (%.2f per store); RSS %.1f -> %.1f MiB "
           "open, %.1f MiB touched: %.0f KiB per open store, %.0f KiB touched; cache %ld KiB\n",
           label, h->stores, h->fds_before, h->fds_held,
           (double)(h->fds_held - h->fds_before) / (double)h->stores,
           (double)h->rss_before_kib / 1024.0, (double)h->rss_open_kib / 1024.0,
           (double)h->rss_touched_kib / 1024.0,
           (double)(h->rss_open_kib - h->rss_before_kib) / (double)h->stores,
           (double)(h->rss_touched_kib - h->rss_before_kib) / (double)h->stores, h->cache_kib);
    fflush(stdout);
}

static void scale_section_stores(struct scale_stores_result *res)
{
    const struct scale_opts *o = &scale_opts;
    res->stores = o->stores;
    res->fast_stores = o->stores < SCALE_FAST_KDF_STORES ? o->stores : SCALE_FAST_KDF_STORES;
    printf("== stores: %ld stores (kdf_iter %u%s), %ld held open with %ld messages each\n",
           o->stores, o->kdf_iter, o->kdf_iter == 0 ? ": the default" : ": NOT the default",
           o->hold, o->store_messages);
    scale_stores_init(res);
    scale_print_lat("scale.stores.init", &res->init, res->init.sum_s);
    double start = bench_now_s();
    char address[128];
    for (long i = 0; i < o->hold && o->store_messages > 0; i++) {
        scale_address(address, sizeof address, "user", i);
        mv_store *store = scale_store_open(address, o->kdf_iter, 0);
        scale_fill(store, 0x686f6c64u + (uint64_t)i, 0, (uint32_t)o->store_messages);
        mv_store_close(&store);
    }
    res->fill_wall_s = bench_now_s() - start;
    scale_stores_pass(res);
    scale_print_lat("scale.stores.open", &res->open, res->open.sum_s);
    scale_print_lat("scale.stores.close", &res->close, res->close.sum_s);
    scale_print_lat("scale.stores.open_kdf_iter1", &res->open_fast, res->open_fast.sum_s);
    printf("scale.stores.kdf_ms %.2f (share of the p50 open %.0f%%)\n", res->kdf_ms,
           res->kdf_share * 100);
    res->held_cache_kib[0] = 0;
    res->held_cache_kib[1] = o->small_cache_kib;
    for (int k = 0; k < 2; k++) {
        res->held[k] = scale_hold_run(o->hold, o->stores, res->held_cache_kib[k], NULL);
        scale_print_held(k == 0 ? "default" : "small", &res->held[k]);
    }
}

/* ---- section: one writer, N readers -------------------------------------------------------- */

enum { OP_MAILBOX_STATUS, OP_SEARCH_NEWEST, OP_FETCH, OP_MESSAGE_GET, OP_COUNT };
static const char *const scale_op_names[OP_COUNT] = {"mailbox_status", "search_newest50", "fetch",
                                                     "message_get"};

struct scale_thread {
    pthread_t thread;
    int index;
    mv_store *store;
    struct scale_samples lat[OP_COUNT]; /* readers: per op; the writer: lat[0] */
    long busy;
    double bytes;
    uint32_t next_index; /* writer: the next corpus message */
};

struct scale_run_shared {
    atomic_int started;
    atomic_int stop;
};
static struct scale_run_shared scale_shared;
static const char scale_conc_user[] = "concurrency@scale.example";

/* Counts MV_EBUSY; stops the program on any other error. */
static void scale_thread_check(struct scale_thread *t, int rc, const char *what)
{
    if (rc == MV_EBUSY) {
        t->busy++;
    } else if (rc < 0) {
        bench_die("%s (thread %d): %s: %s", what, t->index, mv_strerror(rc),
                  mv_store_errmsg(t->store));
    }
}

static void scale_reader_op(struct scale_thread *t, int op, uint32_t *uidnext, struct bench_rng *r)
{
    struct mv_mailbox_info mbox;
    struct mv_message_info info;
    uint32_t uid = 1 + bench_rng_below(r, *uidnext > 1 ? *uidnext - 1 : 1);
    void *raw = NULL;
    size_t len = 0;
    double start = bench_now_s();
    int rc;
    switch (op) {
    case OP_MAILBOX_STATUS:
        rc = mv_mailbox_status(t->store, "INBOX", &mbox);
        break;
    case OP_SEARCH_NEWEST:
        rc = scale_read_newest(t->store, SCALE_SEARCH_NEWEST);
        break;
    case OP_FETCH:
        rc = mv_message_fetch(t->store, "INBOX", uid, &raw, &len);
        break;
    default:
        rc = mv_message_get(t->store, "INBOX", uid, &info);
        break;
    }
    scale_samples_add(&t->lat[op], bench_now_s() - start);
    scale_thread_check(t, rc, scale_op_names[op]);
    if (op == OP_MAILBOX_STATUS && rc == MV_OK) {
        *uidnext = mbox.uidnext;
    }
    t->bytes += (double)len;
    mv_free(raw);
}

static void *scale_reader_main(void *arg)
{
    struct scale_thread *t = arg;
    struct bench_rng r = scale_rng_for(0x72656164u, (uint64_t)t->index);
    uint32_t uidnext = 2;
    scale_reader_op(t, OP_MAILBOX_STATUS, &uidnext, &r);
    atomic_fetch_add(&scale_shared.started, 1);
    while (!atomic_load(&scale_shared.stop)) {
        scale_reader_op(t, (int)bench_rng_below(&r, OP_COUNT), &uidnext, &r);
    }
    return NULL;
}

static void *scale_writer_main(void *arg)
{
    struct scale_thread *t = arg;
    struct bench_buf msg = {0};
    atomic_fetch_add(&scale_shared.started, 1);
    while (!atomic_load(&scale_shared.stop)) {
        int64_t date = 0;
        scale_message(0x636f6e63u, t->next_index++, &msg, &date);
        double start = bench_now_s();
        int rc = mv_message_append(t->store, "INBOX", msg.data, msg.len, 0, NULL, date, NULL);
        scale_samples_add(&t->lat[0], bench_now_s() - start);
        scale_thread_check(t, rc, "mv_message_append");
        t->bytes += rc == MV_OK ? (double)msg.len : 0;
    }
    bench_buf_free(&msg);
    return NULL;
}

/* Handles on the concurrency store for the full-read memory measurement. */
#define SCALE_READ_HANDLES 4

struct scale_full_read {
    struct scale_held held[2]; /* default cache, small cache */
    double file_bytes;         /* the store's database file */
};

struct scale_conc_result {
    int readers;
    double wall_s;
    struct scale_lat writer, reader_all, reader_op[OP_COUNT];
    double writer_mb;
    long busy;
    long rss_before_kib, rss_readers_open_kib, rss_peak_kib;
    double reader_open_ms; /* p50 of the readers' mv_store_open */
};

/* Sleeps for seconds, sampling VmRSS every SCALE_RSS_SAMPLE_NS; returns the peak in KiB. */
static long scale_sample_rss(double seconds)
{
    long peak = bench_status_kib("VmRSS");
    double end = bench_now_s() + seconds;
    while (bench_now_s() < end) {
        struct timespec ts = {0, SCALE_RSS_SAMPLE_NS};
        nanosleep(&ts, NULL);
        long rss = bench_status_kib("VmRSS");
        peak = rss > peak ? rss : peak;
    }
    return peak;
}

static void scale_conc_collect(struct scale_conc_result *res, struct scale_thread *threads, int n)
{
    struct scale_samples all = {0};
    for (int op = 0; op < OP_COUNT; op++) {
        struct scale_samples one = {0};
        for (int i = 1; i <= n; i++) {
            scale_samples_append(&one, &threads[i].lat[op]);
        }
        scale_samples_append(&all, &one);
        res->reader_op[op] = scale_lat_of(&one);
        scale_samples_free(&one);
    }
    res->reader_all = scale_lat_of(&all);
    res->writer = scale_lat_of(&threads[0].lat[0]);
    res->writer_mb = threads[0].bytes / 1e6;
    for (int i = 0; i <= n; i++) {
        res->busy += threads[i].busy;
        for (int op = 0; op < OP_COUNT; op++) {
            scale_samples_free(&threads[i].lat[op]);
        }
        mv_store_close(&threads[i].store);
    }
    scale_samples_free(&all);
}

/* One run: the writer (threads[0]) and n readers for o->seconds. */
static void scale_conc_run(int n, uint32_t *next_index, struct scale_conc_result *res)
{
    struct scale_thread *threads = bench_alloc((size_t)(n + 1) * sizeof *threads);
    struct scale_samples opens = {0};
    memset(res, 0, sizeof *res);
    res->readers = n;
    res->rss_before_kib = bench_status_kib("VmRSS");
    for (int i = 0; i <= n; i++) {
        threads[i].index = i;
        double start = bench_now_s();
        threads[i].store = scale_store_open(scale_conc_user, scale_opts.kdf_iter, 0);
        if (i > 0) {
            scale_samples_add(&opens, bench_now_s() - start);
        }
    }
    res->reader_open_ms = scale_lat_of(&opens).p50_ms;
    scale_samples_free(&opens);
    res->rss_readers_open_kib = bench_status_kib("VmRSS");
    threads[0].next_index = *next_index;
    atomic_store(&scale_shared.started, 0);
    atomic_store(&scale_shared.stop, 0);
    for (int i = 0; i <= n; i++) {
        if (pthread_create(&threads[i].thread, NULL, i == 0 ? scale_writer_main : scale_reader_main,
                           &threads[i]) != 0) {
            bench_die("pthread_create failed");
        }
    }
    while (atomic_load(&scale_shared.started) < n + 1) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    double start = bench_now_s();
    res->rss_peak_kib = scale_sample_rss(scale_opts.seconds);
    atomic_store(&scale_shared.stop, 1);
    for (int i = 0; i <= n; i++) {
        pthread_join(threads[i].thread, NULL);
    }
    res->wall_s = bench_now_s() - start;
    *next_index = threads[0].next_index;
    scale_conc_collect(res, threads, n);
    free(threads);
}

/* The store's database file size (ROOT/<domain>/<localpart>.db, mailvault.h). */
static double scale_store_file_bytes(const char *address)
{
    char path[SCALE_PATH_BYTES_MAX + 64];
    const char *at = strchr(address, '@');
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/%.*s.db", scale_root, at + 1, (int)(at - address), address);
    return stat(path, &st) == 0 ? (double)st.st_size : -1;
}

/* Memory per handle once a session has read the whole mailbox: both caches. */
static void scale_full_read(struct scale_full_read *fr)
{
    fr->file_bytes = scale_store_file_bytes(scale_conc_user);
    for (int k = 0; k < 2; k++) {
        fr->held[k] = scale_hold_run(SCALE_READ_HANDLES, 0, k == 0 ? 0 : scale_opts.small_cache_kib,
                                     scale_conc_user);
        const struct scale_held *h = &fr->held[k];
        printf("scale.full_read.%-7s %ld handles on a %.1f MB store, each read every message: "
               "%.0f KiB per handle open, %.0f KiB per handle after the read; cache %ld KiB\n",
               k == 0 ? "default" : "small", h->stores, fr->file_bytes / 1e6,
               (double)(h->rss_open_kib - h->rss_before_kib) / (double)h->stores,
               (double)(h->rss_touched_kib - h->rss_before_kib) / (double)h->stores, h->cache_kib);
        fflush(stdout);
    }
}

static void scale_section_concurrency(struct scale_conc_result *runs,
                                      double *fill_s,
                                      struct scale_full_read *fr)
{
    const struct scale_opts *o = &scale_opts;
    printf("== concurrency: one writer + N readers on a store of %ld messages, %.1f s each\n",
           o->messages, o->seconds);
    scale_store_init(scale_conc_user, o->kdf_iter);
    mv_store *store = scale_store_open(scale_conc_user, o->kdf_iter, 0);
    double start = bench_now_s();
    scale_fill(store, 0x636f6e63u, 0, (uint32_t)o->messages);
    *fill_s = bench_now_s() - start;
    mv_store_close(&store);
    scale_full_read(fr);
    uint32_t next_index = (uint32_t)o->messages;
    for (int k = 0; k < o->reader_runs; k++) {
        struct scale_conc_result *r = &runs[k];
        scale_conc_run(o->readers[k], &next_index, r);
        printf("scale.conc.readers_%d writer %.1f appends/s (p50 %.2f ms p99 %.2f ms max %.1f "
               "ms); readers %.0f ops/s (p50 %.3f ms p99 %.2f ms max %.1f ms); busy %ld; peak "
               "RSS %.1f MiB\n",
               r->readers, (double)r->writer.count / r->wall_s, r->writer.p50_ms, r->writer.p99_ms,
               r->writer.max_ms, (double)r->reader_all.count / r->wall_s, r->reader_all.p50_ms,
               r->reader_all.p99_ms, r->reader_all.max_ms, r->busy,
               (double)r->rss_peak_kib / 1024.0);
        fflush(stdout);
    }
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static double scale_finite(double v)
{
    return bench_finite(v) ? v : 0;
}

static void scale_json_lat(FILE *f, const char *key, const struct scale_lat *l, double wall_s)
{
    fprintf(f,
            "\"%s\": {\"count\": %zu, \"per_s\": %.6g, \"p50_ms\": %.6g, \"p99_ms\": %.6g, "
            "\"max_ms\": %.6g}",
            key, l->count,
            scale_finite(wall_s > 0 ? (double)l->count / wall_s : (double)l->count / l->sum_s),
            scale_finite(l->p50_ms), scale_finite(l->p99_ms), scale_finite(l->max_ms));
}

static void scale_json_held(FILE *f, const char *cache, int64_t kib, const struct scale_held *h)
{
    double k = (double)h->stores;
    fprintf(f,
            "{\"cache\": \"%s\", \"cache_size_kib_option\": %lld, \"cache_size_kib\": %ld, "
            "\"stores\": %ld, \"fds_before\": %ld, \"fds_held\": %ld, \"fds_per_store\": %.4g, "
            "\"rss_before_kib\": %ld, \"rss_open_kib\": %ld, \"rss_touched_kib\": %ld, "
            "\"vmhwm_kib\": %ld, \"kib_per_open_store\": %.6g, \"kib_per_touched_store\": "
            "%.6g, \"open_ms_each\": %.6g, \"touch_ms_each\": %.6g}",
            cache, (long long)kib, h->cache_kib, h->stores, h->fds_before, h->fds_held,
            (double)(h->fds_held - h->fds_before) / k, h->rss_before_kib, h->rss_open_kib,
            h->rss_touched_kib, h->hwm_kib, (double)(h->rss_open_kib - h->rss_before_kib) / k,
            (double)(h->rss_touched_kib - h->rss_before_kib) / k, h->open_s * 1e3 / k,
            h->touch_s * 1e3 / k);
}

static void scale_json_stores(FILE *f, const struct scale_stores_result *s)
{
    fprintf(f, "  \"stores\": {\"count\": %ld, \"fast_kdf_stores\": %ld, ", s->stores,
            s->fast_stores);
    scale_json_lat(f, "init", &s->init, 0);
    fputs(", ", f);
    scale_json_lat(f, "open", &s->open, 0);
    fputs(", ", f);
    scale_json_lat(f, "close", &s->close, 0);
    fputs(", ", f);
    scale_json_lat(f, "open_kdf_iter1", &s->open_fast, 0);
    fprintf(f,
            ",\n    \"open_close_per_s\": %.6g, \"kdf_ms\": %.6g, \"kdf_share\": %.6g, "
            "\"init_wall_s\": %.6g, \"fill_wall_s\": %.6g, \"pass_wall_s\": %.6g,\n"
            "    \"held\": [",
            (double)(s->open.count + s->open_fast.count) / s->pass_wall_s, scale_finite(s->kdf_ms),
            scale_finite(s->kdf_share), s->init_wall_s, s->fill_wall_s, s->pass_wall_s);
    scale_json_held(f, "default", s->held_cache_kib[0], &s->held[0]);
    fputs(",\n      ", f);
    scale_json_held(f, "small", s->held_cache_kib[1], &s->held[1]);
    fputs("]},\n", f);
}

static void scale_json_conc(FILE *f,
                            const struct scale_conc_result *runs,
                            int count,
                            double fill_s,
                            const struct scale_full_read *fr)
{
    fprintf(f,
            "  \"concurrency\": {\"store_messages\": %ld, \"seconds\": %.6g, \"fill_s\": %.6g, "
            "\"store_file_bytes\": %.0f,\n    \"full_read\": [",
            scale_opts.messages, scale_opts.seconds, fill_s, fr->file_bytes);
    scale_json_held(f, "default", 0, &fr->held[0]);
    fputs(",\n      ", f);
    scale_json_held(f, "small", scale_opts.small_cache_kib, &fr->held[1]);
    fputs("],\n    \"runs\": [", f);
    for (int k = 0; k < count; k++) {
        const struct scale_conc_result *r = &runs[k];
        fprintf(f, "%s\n    {\"readers\": %d, \"wall_s\": %.6g, \"busy_errors\": %ld, ",
                k > 0 ? "," : "", r->readers, r->wall_s, r->busy);
        fprintf(f,
                "\"rss_before_kib\": %ld, \"rss_readers_open_kib\": %ld, \"peak_rss_kib\": %ld, "
                "\"reader_open_p50_ms\": %.6g, \"writer_mb_per_s\": %.6g,\n     ",
                r->rss_before_kib, r->rss_readers_open_kib, r->rss_peak_kib,
                scale_finite(r->reader_open_ms), r->writer_mb / r->wall_s);
        scale_json_lat(f, "writer", &r->writer, r->wall_s);
        fputs(",\n     ", f);
        scale_json_lat(f, "readers_all", &r->reader_all, r->wall_s);
        fputs(",\n     \"reader_ops\": {", f);
        for (int op = 0; op < OP_COUNT; op++) {
            fputs(op > 0 ? ", " : "", f);
            scale_json_lat(f, scale_op_names[op], &r->reader_op[op], r->wall_s);
        }
        fputs("}}", f);
    }
    fputs("]},\n", f);
}

static void scale_json_head(FILE *f, double duration_s, double load_start)
{
    const struct scale_opts *o = &scale_opts;
    char when[32], cpu[160];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    bench_cpu_name(cpu, sizeof cpu);
    fprintf(f,
            "{\n  \"schema\": \"mailvault-bench-scale/1\",\n  \"time_utc\": \"%s\",\n"
            "  \"duration_s\": %.6g,\n  \"quick\": %s,\n",
            when, duration_s, o->quick ? "true" : "false");
    fprintf(f, "  \"machine\": {\"cpus\": %ld, \"cpu\": ", sysconf(_SC_NPROCESSORS_ONLN));
    bench_json_string(f, cpu);
    fprintf(f, ", \"loadavg_start\": %.2f, \"loadavg_end\": %.2f},\n", load_start, bench_loadavg());
    fprintf(f,
            "  \"params\": {\"stores\": %ld, \"hold\": %ld, \"store_messages\": %ld, "
            "\"messages\": %ld, \"seconds\": %.6g, \"readers\": [",
            o->stores, o->hold, o->store_messages, o->messages, o->seconds);
    for (int k = 0; k < o->reader_runs; k++) {
        fprintf(f, "%s%d", k > 0 ? ", " : "", o->readers[k]);
    }
    fprintf(f,
            "], \"kdf_iter\": %u, \"kdf_default\": %s, \"small_cache_kib\": %lld, "
            "\"only\": \"%s\", \"seed\": \"0x%016llx\", \"sqlite\": \"%s\", \"mailvault\": "
            "\"%s\"},\n  \"notes\": [",
            o->kdf_iter, o->kdf_iter == 0 ? "true" : "false", (long long)o->small_cache_kib,
            o->only != NULL ? o->only : "", (unsigned long long)SCALE_SEED, sqlite3_libversion(),
            mv_version());
    bench_json_notes(f);
    fputs("],\n", f);
}

struct scale_results {
    int has_stores, has_conc;
    struct scale_stores_result stores;
    struct scale_conc_result conc[SCALE_READER_RUNS_MAX];
    struct scale_full_read full_read;
    double conc_fill_s;
};

static void scale_write_json(const struct scale_results *r, double duration_s, double load_start)
{
    const char *path = scale_opts.json_path;
    bench_make_parents(path);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        bench_die("cannot write %s: %s", path, strerror(errno));
    }
    scale_json_head(f, duration_s, load_start);
    if (r->has_stores) {
        scale_json_stores(f, &r->stores);
    } else {
        fputs("  \"stores\": null,\n", f);
    }
    if (r->has_conc) {
        scale_json_conc(f, r->conc, scale_opts.reader_runs, r->conc_fill_s, &r->full_read);
    } else {
        fputs("  \"concurrency\": null,\n", f);
    }
    fputs("  \"end\": true\n}\n", f);
    if (fclose(f) != 0) {
        bench_die("writing %s failed", path);
    }
}

/* ---- the table ------------------------------------------------------------------------------ */

static void scale_print_table(const struct scale_results *r)
{
    printf("\n== bench_scale summary\n");
    printf("%-44s %12s %10s %10s\n", "item", "rate", "p50 ms", "p99 ms");
    if (r->has_stores) {
        const struct scale_stores_result *s = &r->stores;
        printf("%-44s %10.1f/s %10.2f %10.2f\n", "store init (mv_store_init)",
               (double)s->init.count / s->init.sum_s, s->init.p50_ms, s->init.p99_ms);
        printf("%-44s %10.1f/s %10.2f %10.2f\n", "store open + close, each store once",
               (double)(s->open.count + s->open_fast.count) / s->pass_wall_s, s->open.p50_ms,
               s->open.p99_ms);
        printf("%-44s %12s %10.2f %10.2f\n", "  close alone", "", s->close.p50_ms, s->close.p99_ms);
        printf("%-44s %12s %10.2f %10s  (KDF %.1f ms = %.0f%% of open)\n", "  open with kdf_iter 1",
               "", s->open_fast.p50_ms, "", s->kdf_ms, s->kdf_share * 100);
        for (int k = 0; k < 2; k++) {
            const struct scale_held *h = &s->held[k];
            printf("%ld held open, cache %-7s (%5ld KiB): %.2f fds/store, %.0f KiB/store open, "
                   "%.0f KiB/store touched\n",
                   h->stores, k == 0 ? "default" : "small", h->cache_kib,
                   (double)(h->fds_held - h->fds_before) / (double)h->stores,
                   (double)(h->rss_open_kib - h->rss_before_kib) / (double)h->stores,
                   (double)(h->rss_touched_kib - h->rss_before_kib) / (double)h->stores);
        }
    }
    for (int k = 0; r->has_conc && k < 2; k++) {
        const struct scale_held *h = &r->full_read.held[k];
        printf("%ld handles, each read all %.1f MB, cache %-7s: %.0f KiB/handle\n", h->stores,
               r->full_read.file_bytes / 1e6, k == 0 ? "default" : "small",
               (double)(h->rss_touched_kib - h->rss_before_kib) / (double)h->stores);
    }
    for (int k = 0; r->has_conc && k < scale_opts.reader_runs; k++) {
        const struct scale_conc_result *c = &r->conc[k];
        char label[64];
        snprintf(label, sizeof label, "writer, %d reader%s", c->readers, c->readers > 1 ? "s" : "");
        printf("%-44s %10.1f/s %10.2f %10.2f\n", label, (double)c->writer.count / c->wall_s,
               c->writer.p50_ms, c->writer.p99_ms);
        snprintf(label, sizeof label, "  readers (%d), all ops", c->readers);
        printf("%-44s %10.0f/s %10.3f %10.2f  busy %ld, peak RSS %.1f MiB\n", label,
               (double)c->reader_all.count / c->wall_s, c->reader_all.p50_ms, c->reader_all.p99_ms,
               c->busy, (double)c->rss_peak_kib / 1024.0);
    }
}

/* ---- arguments and main ---------------------------------------------------------------------- */

static void scale_usage(void)
{
    fprintf(stderr,
            "usage: bench_scale [--quick] [--stores N] [--hold K] [--store-messages M]\n"
            "                   [--messages P] [--seconds S] [--readers 1,4,16] [--kdf-iter I]\n"
            "                   [--small-cache-kib C] [--only stores|concurrency] [--dir DIR]\n"
            "                   [--json PATH]\n");
    exit(2);
}

/* A number in [min, max], or the usage message. */
static long scale_parse_long(const char *text, long min, long max)
{
    long v = 0;
    if (bench_parse_long(text, min, max, &v) != 0) {
        scale_usage();
    }
    return v;
}

static void scale_parse_readers(const char *text, struct scale_opts *o)
{
    char copy[128];
    snprintf(copy, sizeof copy, "%s", text);
    o->reader_runs = 0;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        if (o->reader_runs >= SCALE_READER_RUNS_MAX) {
            scale_usage();
        }
        o->readers[o->reader_runs++] = (int)scale_parse_long(tok, 1, SCALE_READERS_MAX);
    }
    if (o->reader_runs == 0) {
        scale_usage();
    }
}

/* The value after option argv[*i], or the usage message. */
static const char *scale_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        scale_usage();
    }
    return argv[++*i];
}

static void scale_parse_args(int argc, char **argv, struct scale_opts *o)
{
    long stores = -1, hold = -1, per_store = -1, messages = -1;
    double seconds = -1;
    memset(o, 0, sizeof *o);
    o->json_path = "build/bench-results/scale.json";
    o->small_cache_kib = 512;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--quick") == 0) {
            o->quick = 1;
        } else if (strcmp(a, "--stores") == 0) {
            stores = scale_parse_long(scale_value(argc, argv, &i), 1, SCALE_STORES_MAX);
        } else if (strcmp(a, "--hold") == 0) {
            hold = scale_parse_long(scale_value(argc, argv, &i), 1, SCALE_STORES_MAX);
        } else if (strcmp(a, "--store-messages") == 0) {
            per_store = scale_parse_long(scale_value(argc, argv, &i), 0, 100000);
        } else if (strcmp(a, "--messages") == 0) {
            messages = scale_parse_long(scale_value(argc, argv, &i), 1, 10000000);
        } else if (strcmp(a, "--seconds") == 0) {
            seconds = strtod(scale_value(argc, argv, &i), NULL);
            if (!(seconds > 0 && seconds <= 3600)) {
                scale_usage();
            }
        } else if (strcmp(a, "--readers") == 0) {
            scale_parse_readers(scale_value(argc, argv, &i), o);
        } else if (strcmp(a, "--kdf-iter") == 0) {
            o->kdf_iter = (uint32_t)scale_parse_long(scale_value(argc, argv, &i), 1, 10000000);
        } else if (strcmp(a, "--small-cache-kib") == 0) {
            o->small_cache_kib = scale_parse_long(scale_value(argc, argv, &i), 64, 1 << 20);
        } else if (strcmp(a, "--only") == 0) {
            o->only = scale_value(argc, argv, &i);
            if (strcmp(o->only, "stores") != 0 && strcmp(o->only, "concurrency") != 0) {
                scale_usage();
            }
        } else if (strcmp(a, "--dir") == 0) {
            o->parent_dir = scale_value(argc, argv, &i);
        } else if (strcmp(a, "--json") == 0) {
            o->json_path = scale_value(argc, argv, &i);
        } else {
            scale_usage();
        }
    }
    o->stores = stores > 0 ? stores : o->quick ? 40 : 1000;
    o->hold = hold > 0 ? hold : o->quick ? 16 : 200;
    o->hold = o->hold < o->stores ? o->hold : o->stores;
    o->store_messages = per_store >= 0 ? per_store : 10;
    o->messages = messages > 0 ? messages : o->quick ? 200 : 2000;
    o->seconds = seconds > 0 ? seconds : o->quick ? 1.5 : 10;
    if (o->reader_runs == 0) {
        static const int defaults[] = {1, 4, 16};
        memcpy(o->readers, defaults, sizeof defaults);
        o->reader_runs = 3;
    }
}

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[1], "--hold-child") == 0) { /* scale_hold_run */
        snprintf(scale_root, sizeof scale_root, "%s", argv[2]);
        scale_raise_fd_limit();
        scale_held_child(strcmp(argv[8], "-") != 0 ? argv[8] : NULL, strtol(argv[3], NULL, 10),
                         strtol(argv[4], NULL, 10), (uint32_t)strtoul(argv[5], NULL, 10),
                         strtoll(argv[6], NULL, 10), (int)strtol(argv[7], NULL, 10));
    }
    struct scale_opts *o = &scale_opts;
    scale_parse_args(argc, argv, o);
    scale_raise_fd_limit();
    if (bench_scratch_make(o->parent_dir, "mailvault-bench-scale", scale_dir, sizeof scale_dir) !=
        0) {
        bench_die("cannot make a scratch directory");
    }
    int len = snprintf(scale_root, sizeof scale_root, "%.4000s/mail", scale_dir);
    if (len < 0 || (size_t)len >= sizeof scale_root) {
        bench_die("scratch path too long");
    }
    double load_start = bench_loadavg(), start = bench_now_s();
    printf("scale.params stores=%ld hold=%ld store_messages=%ld messages=%ld seconds=%.1f "
           "kdf_iter=%u dir=%s sqlite=%s load=%.2f%s\n",
           o->stores, o->hold, o->store_messages, o->messages, o->seconds, o->kdf_iter, scale_dir,
           sqlite3_libversion(), load_start, o->quick ? " (quick)" : "");
    if (o->kdf_iter != 0) {
        bench_note("kdf_iter %u, not the default: key derivation is cheaper than in production",
                   o->kdf_iter);
    }
    static struct scale_results r;
    if (o->only == NULL || strcmp(o->only, "stores") == 0) {
        scale_section_stores(&r.stores);
        r.has_stores = 1;
        bench_scratch_remove_tree(scale_root); /* the disk space, before the next section */
    }
    if (o->only == NULL || strcmp(o->only, "concurrency") == 0) {
        scale_section_concurrency(r.conc, &r.conc_fill_s, &r.full_read);
        r.has_conc = 1;
    }
    double duration_s = bench_now_s() - start;
    scale_print_table(&r);
    printf("bench_scale took %.1f s; results: %s\n", duration_s, o->json_path);
    scale_write_json(&r, duration_s, load_start);
    return 0;
}
