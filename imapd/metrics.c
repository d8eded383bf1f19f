/*
 * metrics.c -- mailvaultd's counters, gauges and latency histograms, served in the
 * Prometheus text exposition format (version 0.0.4) over HTTP at /metrics, as Dovecot's
 * stats service offers it. Off unless `metrics_listen` names an address and port.
 *
 * USAGE
 *   Anywhere, any thread (the hooks are one line each):
 *     metrics_count(METRIC_LOGINS_OK);
 *     metrics_gauge_add(METRIC_OPEN_STORES, +1);
 *     metrics_imap_start(&session->metrics_cmd, cmd.name, cmd.uid);   (command parsed)
 *     metrics_imap_done(&session->metrics_cmd, "OK");                 (tagged response)
 *     metrics_lmtp_reply(line);            (the per-recipient reply: 2xx, 4xx or 5xx)
 *     metrics_worker_queue(worker_index, +1);
 *   The loop thread: metrics_listen() before the switch of users, then metrics_tick() every
 *   tick; metrics_port() for the ports file.
 *
 * IMPLEMENTATION NOTES
 *   Every number is a C11 atomic updated with relaxed ordering: workers and the loop count
 *   at the same time without a lock, and a scrape reads each number once. A scrape is not a
 *   snapshot of one instant (a histogram's buckets may be one observation apart from its
 *   _sum), which Prometheus tolerates; the +Inf bucket and _count are the same read, so
 *   they always agree.
 *   Command labels come from a fixed table of the commands mailvaultd knows, "UID FETCH" and
 *   friends included; anything else is "other", so a client cannot create label values (or
 *   memory) by sending made-up command names. No user name, address or mailbox is ever a
 *   label.
 *   The HTTP side is the smallest server that is safe to expose on a management network:
 *   the loop accepts at most METRICS_CLIENTS_MAX clients at once (more are closed at once),
 *   reads at most METRICS_REQUEST_MAX bytes of request head, gives each client
 *   METRICS_TIMEOUT_MS from accept to the last byte written, answers only GET (and HEAD) of
 *   /metrics, 404 for any other path, 405 for other methods, 400 for a malformed or
 *   over-long request, and closes the connection after each answer. Why not a library
 *   (libmicrohttpd, civetweb): one fixed response for one fixed path; a library's thread
 *   pool, parser and options would be more code to keep safe than this, and another
 *   package to install.
 *
 * LIMITATIONS
 *   No TLS and no authentication: bind it to loopback or a management interface. The body
 *   is built in memory for each scrape (tens of KiB with every command in use).
 */
#include "metrics.h"
#include "buf.h"
#include "imap_structure_cache.h"
#include "log.h"
#include "loop.h"
#include "mailvault.h"
#include "worker.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define METRICS_CLIENTS_MAX 16
#define METRICS_REQUEST_MAX 4096
#define METRICS_TIMEOUT_MS  5000

/* ---- the numbers ---- */

static atomic_uint_fast64_t metrics_counters[METRIC_COUNTER_COUNT];
static atomic_int_fast64_t metrics_gauges[METRIC_GAUGE_COUNT];

/* The commands with a label of their own; the last is everything else. */
static const char *const metrics_imap_names[] = {
    "CAPABILITY",   "NOOP",         "CHECK",       "LOGOUT",    "STARTTLS",  "LOGIN",
    "AUTHENTICATE", "SELECT",       "EXAMINE",     "CREATE",    "DELETE",    "RENAME",
    "SUBSCRIBE",    "UNSUBSCRIBE",  "LIST",        "LSUB",      "STATUS",    "APPEND",
    "CLOSE",        "EXPUNGE",      "MOVE",        "IDLE",      "NAMESPACE", "ID",
    "ENABLE",       "UNSELECT",     "FETCH",       "STORE",     "COPY",      "SEARCH",
    "GETQUOTA",     "GETQUOTAROOT", "SETQUOTA",    "UID FETCH", "UID STORE", "UID COPY",
    "UID MOVE",     "UID SEARCH",   "UID EXPUNGE", "SORT",      "UID SORT",  "other",
};
#define METRICS_IMAP_COUNT (sizeof metrics_imap_names / sizeof metrics_imap_names[0])
#define METRICS_IMAP_OTHER ((int)METRICS_IMAP_COUNT - 1)

/* Upper bounds of the latency buckets, in microseconds (0.5 ms .. 10 s), then +Inf. */
static const int64_t metrics_bucket_us[] = {500,     1000,    2500,    5000,    10000,
                                            25000,   50000,   100000,  250000,  500000,
                                            1000000, 2500000, 5000000, 10000000};
#define METRICS_BUCKETS (sizeof metrics_bucket_us / sizeof metrics_bucket_us[0] + 1)

enum { METRICS_STATUS_OK, METRICS_STATUS_NO, METRICS_STATUS_BAD, METRICS_STATUS_COUNT };
static const char *const metrics_status_names[] = {"ok", "no", "bad"};

struct metrics_imap_stats {
    atomic_uint_fast64_t status[METRICS_STATUS_COUNT];
    atomic_uint_fast64_t bucket[METRICS_BUCKETS]; /* not cumulative: one bucket each */
    atomic_uint_fast64_t sum_us;
};
static struct metrics_imap_stats metrics_imap[METRICS_IMAP_COUNT];

static atomic_uint_fast64_t metrics_lmtp[3]; /* accepted, deferred, rejected */

/* Per lane (worker.c LANES): jobs waiting, and how long each waited before it ran. */
_Static_assert(METRICS_LANE_SYNC == JOB_LANES, "the sync pseudo-lane follows the lanes");
static atomic_int_fast64_t metrics_lane_len[METRICS_LANES];
static atomic_uint_fast64_t metrics_lane_bucket[METRICS_LANES][METRICS_BUCKETS];
static atomic_uint_fast64_t metrics_lane_sum_us[METRICS_LANES];
static const char *const metrics_lane_names[METRICS_LANES] = {"short", "long", "read", "sync"};
static atomic_uint_fast64_t metrics_drained;      /* sealed deliveries moved by drain steps */
static atomic_uint_fast64_t metrics_fetch_direct; /* bytes a FETCH job wrote to its socket */
/* structure answers: [enum metric_structure], and [3] written to the stores' memos */
/* lookups by enum metric_structure, then saved, made from a skeleton, made from a message */
static atomic_uint_fast64_t metrics_structure[6];
/* FETCH sections of messages with parts stored apart: [0] from the skeleton, [1] whole; [2]
 * messages of one part answered from their header, [3] previews from the first bytes */
static atomic_uint_fast64_t metrics_sections[4]; /* skeleton, whole, header, prefix */
/* headers of header-only FETCHes: [0] from the window read ahead, [1] by UID */
static atomic_uint_fast64_t metrics_headers[2];
static atomic_uint_fast64_t metrics_sent_days[3]; /* saved, store, saves */
static atomic_uint_fast64_t metrics_msgids[3];    /* saved, store, saves */
static atomic_uint_fast64_t metrics_sort_keys[3]; /* saved, store, saves */

/* Jobs waiting in each worker's queue (metrics_init). */
static atomic_int_fast64_t *metrics_queues;
static int metrics_queue_count;
static int64_t metrics_started_s;

int64_t metrics_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void metrics_count(enum metric_counter id)
{
    atomic_fetch_add_explicit(&metrics_counters[id], 1, memory_order_relaxed);
}

void metrics_gauge_add(enum metric_gauge id, int64_t delta)
{
    atomic_fetch_add_explicit(&metrics_gauges[id], delta, memory_order_relaxed);
}

void metrics_worker_queue(int worker_index, int delta)
{
    if (worker_index >= 0 && worker_index < metrics_queue_count) {
        atomic_fetch_add_explicit(&metrics_queues[worker_index], delta, memory_order_relaxed);
    }
}

void metrics_lane_queue(int lane, int delta)
{
    atomic_fetch_add_explicit(&metrics_lane_len[lane], delta, memory_order_relaxed);
}

/* The bucket of a latency in microseconds. */
static size_t metrics_bucket_of(int64_t us)
{
    size_t b = 0;
    while (b < METRICS_BUCKETS - 1 && us > metrics_bucket_us[b]) {
        b++;
    }
    return b;
}

void metrics_lane_wait(int lane, int64_t wait_us)
{
    wait_us = wait_us < 0 ? 0 : wait_us;
    atomic_fetch_add_explicit(&metrics_lane_bucket[lane][metrics_bucket_of(wait_us)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&metrics_lane_sum_us[lane], (uint_fast64_t)wait_us,
                              memory_order_relaxed);
}

void metrics_drain_step(uint32_t moved)
{
    atomic_fetch_add_explicit(&metrics_drained, moved, memory_order_relaxed);
}

void metrics_fetch_direct_add(uint64_t bytes)
{
    atomic_fetch_add_explicit(&metrics_fetch_direct, bytes, memory_order_relaxed);
}

void metrics_structure_cache(enum metric_structure result)
{
    atomic_fetch_add_explicit(&metrics_structure[result], 1, memory_order_relaxed);
}

void metrics_structure_saved(uint64_t n)
{
    atomic_fetch_add_explicit(&metrics_structure[3], n, memory_order_relaxed);
}

void metrics_structure_made(int from_skeleton)
{
    atomic_fetch_add_explicit(&metrics_structure[from_skeleton ? 4 : 5], 1, memory_order_relaxed);
}

void metrics_sections_read(int from_skeleton)
{
    atomic_fetch_add_explicit(&metrics_sections[from_skeleton ? 0 : 1], 1, memory_order_relaxed);
}

void metrics_sections_from_header(void)
{
    atomic_fetch_add_explicit(&metrics_sections[2], 1, memory_order_relaxed);
}

void metrics_sections_prefix(void)
{
    atomic_fetch_add_explicit(&metrics_sections[3], 1, memory_order_relaxed);
}

void metrics_sent_days_read(int from_saved, uint64_t n)
{
    atomic_fetch_add_explicit(&metrics_sent_days[from_saved ? 0 : 1], n, memory_order_relaxed);
}

void metrics_sent_days_saved(void)
{
    atomic_fetch_add_explicit(&metrics_sent_days[2], 1, memory_order_relaxed);
}

void metrics_msgids_read(int from_saved, uint64_t n)
{
    atomic_fetch_add_explicit(&metrics_msgids[from_saved ? 0 : 1], n, memory_order_relaxed);
}

void metrics_msgids_saved(void)
{
    atomic_fetch_add_explicit(&metrics_msgids[2], 1, memory_order_relaxed);
}

void metrics_sort_keys_read(int from_saved, uint64_t n)
{
    atomic_fetch_add_explicit(&metrics_sort_keys[from_saved ? 0 : 1], n, memory_order_relaxed);
}

void metrics_sort_keys_saved(void)
{
    atomic_fetch_add_explicit(&metrics_sort_keys[2], 1, memory_order_relaxed);
}

void metrics_headers_read(int from_window)
{
    atomic_fetch_add_explicit(&metrics_headers[from_window ? 0 : 1], 1, memory_order_relaxed);
}

void metrics_connection(enum metric_gauge g, int delta)
{
    if (delta > 0) {
        metrics_count((enum metric_counter)(METRIC_ACCEPTED_IMAP + (g - METRIC_CONNECTIONS_IMAP)));
    }
    metrics_gauge_add(g, delta);
}

static int metrics_imap_index(const char *name, int uid)
{
    for (int i = 0; i < METRICS_IMAP_OTHER; i++) {
        const char *label = metrics_imap_names[i];
        int label_uid = strncmp(label, "UID ", 4) == 0;
        if (label_uid == (uid != 0) && strcasecmp(label + (label_uid ? 4 : 0), name) == 0) {
            return i;
        }
    }
    return METRICS_IMAP_OTHER;
}

void metrics_imap_start(struct metrics_cmd *m, const char *name, int uid)
{
    m->index = metrics_imap_index(name, uid) + 1;
    m->started_us = metrics_now_us();
}

void metrics_imap_done(struct metrics_cmd *m, const char *status)
{
    int st = strncmp(status, "OK", 2) == 0   ? METRICS_STATUS_OK
             : strncmp(status, "NO", 2) == 0 ? METRICS_STATUS_NO
                                             : METRICS_STATUS_BAD;
    /* (1) no command parsed (a literal refused before its line was complete): "other",
     * no latency; (2) otherwise the time since the command's line was complete. */
    int index = m->index > 0 ? m->index - 1 : METRICS_IMAP_OTHER;
    struct metrics_imap_stats *s = &metrics_imap[index];
    atomic_fetch_add_explicit(&s->status[st], 1, memory_order_relaxed);
    if (m->index > 0) {
        int64_t elapsed_us = metrics_now_us() - m->started_us;
        elapsed_us = elapsed_us < 0 ? 0 : elapsed_us;
        atomic_fetch_add_explicit(&s->bucket[metrics_bucket_of(elapsed_us)], 1,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&s->sum_us, (uint_fast64_t)elapsed_us, memory_order_relaxed);
    }
    m->index = 0;
}

void metrics_lmtp_reply(const char *reply)
{
    int kind = reply[0] == '2' ? 0 : reply[0] == '4' ? 1 : 2;
    atomic_fetch_add_explicit(&metrics_lmtp[kind], 1, memory_order_relaxed);
}

/* ---- the exposition text ---- */

static uint64_t metrics_read(atomic_uint_fast64_t *v)
{
    return (uint64_t)atomic_load_explicit(v, memory_order_relaxed);
}

static int64_t metrics_read_gauge(atomic_int_fast64_t *v)
{
    return (int64_t)atomic_load_explicit(v, memory_order_relaxed);
}

static void metrics_family(struct buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
metrics_labelled(struct buf *b, const char *name, const char *label, const char *value, uint64_t n)
{
    buf_printf(b, "%s{%s=\"%s\"} %llu\n", name, label, value, (unsigned long long)n);
}

static void metrics_render_connections(struct buf *b)
{
    static const char *const protocols[] = {"imap", "imaps", "lmtp", "control"};
    metrics_family(b, "mailvaultd_connections_accepted_total", "counter",
                   "Connections accepted, by protocol (imaps: implicit TLS).");
    for (int i = 0; i < 4; i++) {
        metrics_labelled(b, "mailvaultd_connections_accepted_total", "protocol", protocols[i],
                         metrics_read(&metrics_counters[METRIC_ACCEPTED_IMAP + i]));
    }
    metrics_family(b, "mailvaultd_connections", "gauge", "Connections open now, by protocol.");
    for (int i = 0; i < 4; i++) {
        int64_t n = metrics_read_gauge(&metrics_gauges[METRIC_CONNECTIONS_IMAP + i]);
        metrics_labelled(b, "mailvaultd_connections", "protocol", protocols[i],
                         n < 0 ? 0 : (uint64_t)n);
    }
    metrics_family(b, "mailvaultd_connections_refused_total", "counter",
                   "Connections refused by connections_max or connections_per_address_max.");
    buf_printf(b, "mailvaultd_connections_refused_total %llu\n",
               (unsigned long long)metrics_read(&metrics_counters[METRIC_REFUSED]));
    metrics_family(b, "mailvaultd_tls_handshakes_failed_total", "counter",
                   "TLS handshakes that failed or were abandoned (implicit TLS and STARTTLS).");
    buf_printf(b, "mailvaultd_tls_handshakes_failed_total %llu\n",
               (unsigned long long)metrics_read(&metrics_counters[METRIC_TLS_FAILED]));
    metrics_family(b, "mailvaultd_logins_total", "counter", "IMAP logins, by result.");
    metrics_labelled(b, "mailvaultd_logins_total", "result", "ok",
                     metrics_read(&metrics_counters[METRIC_LOGINS_OK]));
    metrics_labelled(b, "mailvaultd_logins_total", "result", "failed",
                     metrics_read(&metrics_counters[METRIC_LOGINS_FAILED]));
}

static void metrics_render_commands(struct buf *b)
{
    uint64_t by_status[METRICS_STATUS_COUNT] = {0, 0, 0};
    metrics_family(b, "mailvaultd_imap_commands_total", "counter",
                   "IMAP commands answered, by command and tagged status (ok, no, bad).");
    for (size_t i = 0; i < METRICS_IMAP_COUNT; i++) {
        for (int st = 0; st < METRICS_STATUS_COUNT; st++) {
            uint64_t n = metrics_read(&metrics_imap[i].status[st]);
            by_status[st] += n;
            if (n > 0) {
                buf_printf(b, "mailvaultd_imap_commands_total{command=\"%s\",status=\"%s\"} %llu\n",
                           metrics_imap_names[i], metrics_status_names[st], (unsigned long long)n);
            }
        }
    }
    metrics_family(b, "mailvaultd_imap_responses_total", "counter",
                   "Tagged IMAP responses, by status: NO and BAD are failures.");
    for (int st = 0; st < METRICS_STATUS_COUNT; st++) {
        metrics_labelled(b, "mailvaultd_imap_responses_total", "status", metrics_status_names[st],
                         by_status[st]);
    }
    metrics_family(b, "mailvaultd_imap_command_duration_seconds", "histogram",
                   "Time from a command's complete line to its tagged response, by command.");
    for (size_t i = 0; i < METRICS_IMAP_COUNT; i++) {
        uint64_t cumulative = 0;
        uint64_t counts[METRICS_BUCKETS];
        for (size_t k = 0; k < METRICS_BUCKETS; k++) {
            counts[k] = metrics_read(&metrics_imap[i].bucket[k]);
            cumulative += counts[k];
        }
        if (cumulative == 0) {
            continue;
        }
        const char *name = metrics_imap_names[i];
        uint64_t running = 0;
        for (size_t k = 0; k < METRICS_BUCKETS - 1; k++) {
            running += counts[k];
            buf_printf(b,
                       "mailvaultd_imap_command_duration_seconds_bucket{command=\"%s\",le=\"%g\"} "
                       "%llu\n",
                       name, (double)metrics_bucket_us[k] / 1e6, (unsigned long long)running);
        }
        buf_printf(b,
                   "mailvaultd_imap_command_duration_seconds_bucket{command=\"%s\",le=\"+Inf\"} "
                   "%llu\n"
                   "mailvaultd_imap_command_duration_seconds_sum{command=\"%s\"} %.6f\n"
                   "mailvaultd_imap_command_duration_seconds_count{command=\"%s\"} %llu\n",
                   name, (unsigned long long)cumulative, name,
                   (double)metrics_read(&metrics_imap[i].sum_us) / 1e6, name,
                   (unsigned long long)cumulative);
    }
}

static void metrics_render_work(struct buf *b)
{
    static const char *const results[] = {"accepted", "deferred", "rejected"};
    metrics_family(b, "mailvaultd_lmtp_deliveries_total", "counter",
                   "LMTP deliveries per recipient: accepted (2xx), deferred (4xx, the sender "
                   "retries), rejected (5xx).");
    for (int i = 0; i < 3; i++) {
        metrics_labelled(b, "mailvaultd_lmtp_deliveries_total", "result", results[i],
                         metrics_read(&metrics_lmtp[i]));
    }
    metrics_family(b, "mailvaultd_open_stores", "gauge", "User stores open in the workers.");
    buf_printf(b, "mailvaultd_open_stores %lld\n",
               (long long)metrics_read_gauge(&metrics_gauges[METRIC_OPEN_STORES]));
    metrics_family(b, "mailvaultd_stores_migrated_total", "counter",
                   "Stores of an older schema version migrated when they were opened.");
    buf_printf(b, "mailvaultd_stores_migrated_total %llu\n",
               (unsigned long long)metrics_read(&metrics_counters[METRIC_STORES_MIGRATED]));
    metrics_family(b, "mailvaultd_fts_bodies_set_aside_total", "counter",
                   "Bodies the full-text catch-up set aside because their bytes could not be "
                   "read (damaged), as logged with their ids: counted once per store open.");
    buf_printf(b, "mailvaultd_fts_bodies_set_aside_total %llu\n",
               (unsigned long long)metrics_read(&metrics_counters[METRIC_FTS_SET_ASIDE]));
    metrics_family(b, "mailvaultd_stores_migrating", "gauge",
                   "Open stores whose migration left work that runs between commands (the "
                   "full-text index rebuilt from schema version 8): searches are correct "
                   "meanwhile.");
    buf_printf(b, "mailvaultd_stores_migrating %lld\n",
               (long long)metrics_read_gauge(&metrics_gauges[METRIC_MIGRATING_STORES]));
    metrics_family(b, "mailvaultd_fts_backlog_bodies", "gauge",
                   "Messages of open stores whose full-text rows the work between commands has "
                   "still to build (new mail and drained deliveries; each store's counted up "
                   "to 1,000): searches find them meanwhile, parsing each again.");
    buf_printf(b, "mailvaultd_fts_backlog_bodies %lld\n",
               (long long)metrics_read_gauge(&metrics_gauges[METRIC_FTS_BACKLOG]));
    int64_t total = 0;
    metrics_family(b, "mailvaultd_worker_queue_length", "gauge",
                   "Jobs (commands, deliveries) waiting for each worker thread.");
    for (int i = 0; i < metrics_queue_count; i++) {
        int64_t n = metrics_read_gauge(&metrics_queues[i]);
        n = n < 0 ? 0 : n;
        total += n;
        buf_printf(b, "mailvaultd_worker_queue_length{worker=\"%d\"} %lld\n", i, (long long)n);
    }
    metrics_family(b, "mailvaultd_queue_depth", "gauge",
                   "Jobs waiting for a worker, all workers together.");
    buf_printf(b, "mailvaultd_queue_depth %lld\n", (long long)total);
    metrics_family(b, "mailvaultd_worker_lane_queue_length", "gauge",
                   "Jobs waiting in each lane (short commands pass long ones), all workers.");
    for (int l = 0; l < METRICS_LANES; l++) {
        int64_t n = metrics_read_gauge(&metrics_lane_len[l]);
        buf_printf(b, "mailvaultd_worker_lane_queue_length{lane=\"%s\"} %lld\n",
                   metrics_lane_names[l], (long long)(n < 0 ? 0 : n));
    }
    metrics_family(b, "mailvaultd_worker_lane_wait_seconds", "histogram",
                   "Time a job waited in its worker's lane before it ran, by lane (sync: an "
                   "answer waiting for its append's WAL sync with sync_apart, until the sync "
                   "is done).");
    for (int l = 0; l < METRICS_LANES; l++) {
        uint64_t running = 0;
        for (size_t k = 0; k < METRICS_BUCKETS - 1; k++) {
            running += metrics_read(&metrics_lane_bucket[l][k]);
            buf_printf(b,
                       "mailvaultd_worker_lane_wait_seconds_bucket{lane=\"%s\",le=\"%g\"} %llu\n",
                       metrics_lane_names[l], (double)metrics_bucket_us[k] / 1e6,
                       (unsigned long long)running);
        }
        running += metrics_read(&metrics_lane_bucket[l][METRICS_BUCKETS - 1]);
        buf_printf(b,
                   "mailvaultd_worker_lane_wait_seconds_bucket{lane=\"%s\",le=\"+Inf\"} %llu\n"
                   "mailvaultd_worker_lane_wait_seconds_sum{lane=\"%s\"} %.6f\n"
                   "mailvaultd_worker_lane_wait_seconds_count{lane=\"%s\"} %llu\n",
                   metrics_lane_names[l], (unsigned long long)running, metrics_lane_names[l],
                   (double)metrics_read(&metrics_lane_sum_us[l]) / 1e6, metrics_lane_names[l],
                   (unsigned long long)running);
    }
    metrics_family(b, "mailvaultd_queue_drained_total", "counter",
                   "Sealed deliveries moved into stores by the workers' drain steps (after "
                   "a login, not before it).");
    buf_printf(b, "mailvaultd_queue_drained_total %llu\n",
               (unsigned long long)metrics_read(&metrics_drained));
    metrics_family(b, "mailvaultd_fetch_direct_bytes_total", "counter",
                   "Bytes of FETCH responses the worker wrote to the client's socket itself, "
                   "without handing them to the event loop (docs/IMAPD.md, Streaming FETCH).");
    buf_printf(b, "mailvaultd_fetch_direct_bytes_total %llu\n",
               (unsigned long long)metrics_read(&metrics_fetch_direct));
    metrics_family(b, "mailvaultd_structure_cache_lookups_total", "counter",
                   "FETCH BODYSTRUCTURE and BODY answers looked for: found in the open store's "
                   "cache (hit) or in the store's memos (stored), the message not read either "
                   "way; or not (miss: read, parsed, then kept and saved).");
    buf_printf(b,
               "mailvaultd_structure_cache_lookups_total{result=\"hit\"} %llu\n"
               "mailvaultd_structure_cache_lookups_total{result=\"stored\"} %llu\n"
               "mailvaultd_structure_cache_lookups_total{result=\"miss\"} %llu\n",
               (unsigned long long)metrics_read(&metrics_structure[METRIC_STRUCTURE_HIT]),
               (unsigned long long)metrics_read(&metrics_structure[METRIC_STRUCTURE_STORED]),
               (unsigned long long)metrics_read(&metrics_structure[METRIC_STRUCTURE_MISS]));
    metrics_family(b, "mailvaultd_structure_memos_saved_total", "counter",
                   "BODYSTRUCTURE and BODY answers written to the stores' memos, so that they "
                   "outlive the store's close and the server.");
    buf_printf(b, "mailvaultd_structure_memos_saved_total %llu\n",
               (unsigned long long)metrics_read(&metrics_structure[3]));
    metrics_family(b, "mailvaultd_structure_made_total", "counter",
                   "BODYSTRUCTURE and BODY answers made on a miss: from the message's skeleton, "
                   "its parts stored apart (128 KiB and more) neither read nor parsed, or from "
                   "the whole message.");
    buf_printf(b,
               "mailvaultd_structure_made_total{read=\"skeleton\"} %llu\n"
               "mailvaultd_structure_made_total{read=\"whole\"} %llu\n",
               (unsigned long long)metrics_read(&metrics_structure[4]),
               (unsigned long long)metrics_read(&metrics_structure[5]));
    metrics_family(b, "mailvaultd_fetch_sections_read_total", "counter",
                   "Messages with parts stored apart whose FETCH body sections were answered: "
                   "from the skeleton, the parts stored apart not read (every byte asked for "
                   "outside them), or from the whole message; messages of one part whose "
                   "sections (a part's MIME header, a part not there) came from the header; "
                   "previews answered from a message's first bytes.");
    buf_printf(b,
               "mailvaultd_fetch_sections_read_total{read=\"skeleton\"} %llu\n"
               "mailvaultd_fetch_sections_read_total{read=\"whole\"} %llu\n"
               "mailvaultd_fetch_sections_read_total{read=\"header\"} %llu\n"
               "mailvaultd_fetch_sections_read_total{read=\"prefix\"} %llu\n",
               (unsigned long long)metrics_read(&metrics_sections[0]),
               (unsigned long long)metrics_read(&metrics_sections[1]),
               (unsigned long long)metrics_read(&metrics_sections[2]),
               (unsigned long long)metrics_read(&metrics_sections[3]));
    metrics_family(b, "mailvaultd_fetch_headers_read_total", "counter",
                   "Headers read for FETCHes that need only the header (a client's message "
                   "list): with the next messages' at once by their body keys, or one by UID.");
    buf_printf(b,
               "mailvaultd_fetch_headers_read_total{read=\"window\"} %llu\n"
               "mailvaultd_fetch_headers_read_total{read=\"uid\"} %llu\n",
               (unsigned long long)metrics_read(&metrics_headers[0]),
               (unsigned long long)metrics_read(&metrics_headers[1]));
    metrics_family(b, "mailvaultd_sent_days_read_total", "counter",
                   "Messages' sent days read for SEARCH SENTBEFORE/SENTON/SENTSINCE: from the "
                   "copy a store keeps of them (a mailbox memo, written at the store's close), "
                   "or from the messages' rows.");
    buf_printf(b,
               "mailvaultd_sent_days_read_total{from=\"saved\"} %llu\n"
               "mailvaultd_sent_days_read_total{from=\"store\"} %llu\n",
               (unsigned long long)metrics_read(&metrics_sent_days[0]),
               (unsigned long long)metrics_read(&metrics_sent_days[1]));
    metrics_family(b, "mailvaultd_sent_days_saved_total", "counter",
                   "Copies of a mailbox's sent days written to its store.");
    buf_printf(b, "mailvaultd_sent_days_saved_total %llu\n",
               (unsigned long long)metrics_read(&metrics_sent_days[2]));
    metrics_family(b, "mailvaultd_message_ids_read_total", "counter",
                   "Messages' Message-ID fields read for SEARCH HEADER Message-ID: from the copy "
                   "a store keeps of them (a mailbox memo, written at the store's close), or "
                   "from the messages' headers.");
    buf_printf(b,
               "mailvaultd_message_ids_read_total{from=\"saved\"} %llu\n"
               "mailvaultd_message_ids_read_total{from=\"store\"} %llu\n",
               (unsigned long long)metrics_read(&metrics_msgids[0]),
               (unsigned long long)metrics_read(&metrics_msgids[1]));
    metrics_family(b, "mailvaultd_message_ids_saved_total", "counter",
                   "Copies of a mailbox's Message-ID fields saved in its store.");
    buf_printf(b, "mailvaultd_message_ids_saved_total %llu\n",
               (unsigned long long)metrics_read(&metrics_msgids[2]));
    metrics_family(b, "mailvaultd_sort_keys_read_total", "counter",
                   "Messages' SORT keys read: from the copy a store keeps of them (a mailbox "
                   "memo, written at the store's close), or from the messages' header fields.");
    buf_printf(b,
               "mailvaultd_sort_keys_read_total{from=\"saved\"} %llu\n"
               "mailvaultd_sort_keys_read_total{from=\"store\"} %llu\n",
               (unsigned long long)metrics_read(&metrics_sort_keys[0]),
               (unsigned long long)metrics_read(&metrics_sort_keys[1]));
    metrics_family(b, "mailvaultd_sort_keys_saved_total", "counter",
                   "Copies of a mailbox's SORT keys saved in its store.");
    buf_printf(b, "mailvaultd_sort_keys_saved_total %llu\n",
               (unsigned long long)metrics_read(&metrics_sort_keys[2]));
    metrics_family(b, "mailvaultd_structure_cache_bytes", "gauge",
                   "Bytes the open stores' caches of BODYSTRUCTURE and BODY answers hold "
                   "together, at most structure_cache_kib.");
    buf_printf(b, "mailvaultd_structure_cache_bytes %zu\n", imap_structure_cache_bytes());
    metrics_family(b, "mailvaultd_start_time_seconds", "gauge",
                   "When the server started, seconds since the Unix epoch.");
    buf_printf(b, "mailvaultd_start_time_seconds %lld\n", (long long)metrics_started_s);
    metrics_family(b, "mailvaultd_build_info", "gauge", "The version of the server, as a label.");
    buf_printf(b, "mailvaultd_build_info{version=\"%s\"} 1\n", mv_version());
}

/* The whole exposition into b (which the caller frees). */
void metrics_render(struct buf *b)
{
    metrics_render_connections(b);
    metrics_render_commands(b);
    metrics_render_work(b);
}

/* ---- HTTP ---- */

struct metrics_client {
    struct loop_handler handler;
    int fd;
    int64_t deadline_ms;
    char request[METRICS_REQUEST_MAX];
    size_t request_len;
    struct buf response; /* head and body; written from `sent` on */
    size_t sent;
};

static struct loop_handler metrics_listen_handler;
static int metrics_fd = -1;
static int metrics_bound_port = -1;
static struct metrics_client *metrics_clients[METRICS_CLIENTS_MAX];

static void metrics_client_close(struct metrics_client *m)
{
    loop_del(m->fd, &m->handler);
    close(m->fd);
    buf_free(&m->response);
    for (int i = 0; i < METRICS_CLIENTS_MAX; i++) {
        if (metrics_clients[i] == m) {
            metrics_clients[i] = NULL;
        }
    }
    free(m);
}

static void metrics_respond(struct metrics_client *m,
                            const char *status,
                            const char *extra,
                            const struct buf *body,
                            int head_only)
{
    size_t length = body != NULL ? body->len : strlen(status) + 1;
    buf_printf(&m->response,
               "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: "
               "close\r\nCache-Control: no-store\r\n\r\n",
               status, body != NULL ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain",
               length, extra);
    if (head_only) {
        return;
    }
    if (body != NULL) {
        buf_add(&m->response, body->data, body->len);
    } else {
        buf_printf(&m->response, "%s\n", status);
    }
}

/* The request head is complete in m->request: decide the answer. */
static void metrics_answer(struct metrics_client *m)
{
    char method[16], target[256], version[16];
    m->request[m->request_len] = '\0';
    char *line_end = strpbrk(m->request, "\r\n");
    if (line_end != NULL) {
        *line_end = '\0';
    }
    if (sscanf(m->request, "%15s %255s %15s", method, target, version) != 3 ||
        strncmp(version, "HTTP/1.", 7) != 0) {
        metrics_respond(m, "400 Bad Request", "", NULL, 0);
        return;
    }
    int head = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") != 0 && !head) {
        metrics_respond(m, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", NULL, 0);
        return;
    }
    char *query = strchr(target, '?');
    if (query != NULL) {
        *query = '\0'; /* Prometheus may add parameters; they select nothing here */
    }
    if (strcmp(target, "/metrics") != 0) {
        metrics_respond(m, "404 Not Found", "", NULL, head);
        return;
    }
    struct buf body = {0};
    metrics_render(&body);
    if (body.oom) {
        buf_free(&body);
        metrics_respond(m, "503 Service Unavailable", "", NULL, head);
        return;
    }
    metrics_respond(m, "200 OK", "", &body, head);
    buf_free(&body);
}

/* Writes what is left; 1 when all is written (or the peer is gone), 0 to wait. */
static int metrics_client_write(struct metrics_client *m)
{
    while (m->sent < m->response.len) {
        ssize_t n =
            send(m->fd, m->response.data + m->sent, m->response.len - m->sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        }
        if (n <= 0) {
            return 1;
        }
        m->sent += (size_t)n;
    }
    return 1;
}

/* Reads the request head; 1 once it is complete (or refused), 0 to wait, -1 on EOF/error. */
static int metrics_client_read(struct metrics_client *m)
{
    for (;;) {
        if (m->request_len >= sizeof m->request - 1) {
            metrics_respond(m, "400 Bad Request", "", NULL, 0); /* head over the limit */
            return 1;
        }
        ssize_t n =
            recv(m->fd, m->request + m->request_len, sizeof m->request - 1 - m->request_len, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        }
        if (n <= 0) {
            return -1;
        }
        m->request_len += (size_t)n;
        m->request[m->request_len] = '\0';
        if (strstr(m->request, "\r\n\r\n") != NULL || strstr(m->request, "\n\n") != NULL) {
            metrics_answer(m);
            return 1;
        }
    }
}

static void metrics_on_client(void *arg, uint32_t events)
{
    struct metrics_client *m = arg;
    if (m->response.len == 0 && !m->response.oom) {
        int r = metrics_client_read(m);
        if (r < 0 || (r == 0 && (events & (EPOLLERR | EPOLLHUP)) != 0)) {
            metrics_client_close(m);
            return;
        }
        if (r == 0) {
            return;
        }
    }
    if (m->response.oom || metrics_client_write(m)) {
        shutdown(m->fd, SHUT_WR);
        metrics_client_close(m);
    }
}

static void metrics_on_accept(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    for (;;) {
        int fd = accept4(metrics_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            return;
        }
        int slot = -1;
        for (int i = 0; i < METRICS_CLIENTS_MAX && slot < 0; i++) {
            slot = metrics_clients[i] == NULL ? i : -1;
        }
        struct metrics_client *m = slot >= 0 ? calloc(1, sizeof *m) : NULL;
        if (m == NULL) {
            close(fd); /* too many scrapers at once */
            continue;
        }
        m->fd = fd;
        m->deadline_ms = loop_now_ms() + METRICS_TIMEOUT_MS;
        m->handler.fn = metrics_on_client;
        m->handler.arg = m;
        if (loop_add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, &m->handler) != 0) {
            close(fd);
            free(m);
            continue;
        }
        metrics_clients[slot] = m;
    }
}

int metrics_parse_address(const char *spec, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[64];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || colon == spec || (size_t)(colon - spec) >= sizeof host) {
        return -1;
    }
    const char *h = spec;
    size_t host_len = (size_t)(colon - spec);
    if (h[0] == '[' && host_len >= 2 && h[host_len - 1] == ']') { /* [::1]:9117 */
        h++;
        host_len -= 2;
    }
    memcpy(host, h, host_len);
    host[host_len] = '\0';
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535) {
        return -1;
    }
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *in = (struct sockaddr_in *)(void *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)ss;
    if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        *len = sizeof *in;
    } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        *len = sizeof *in6;
    } else {
        return -1;
    }
    return 0;
}

int metrics_init(int workers)
{
    metrics_started_s = (int64_t)time(NULL);
    metrics_queues = calloc((size_t)workers, sizeof *metrics_queues);
    if (metrics_queues == NULL) {
        return -1;
    }
    metrics_queue_count = workers;
    return 0;
}

int metrics_listen(const char *spec, char *err, size_t err_size)
{
    if (spec[0] == '\0') {
        return 0;
    }
    struct sockaddr_storage ss;
    socklen_t len = 0;
    if (metrics_parse_address(spec, &ss, &len) != 0) {
        snprintf(err, err_size, "metrics_listen: \"%s\" is not ADDRESS:PORT", spec);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 16) != 0) {
        snprintf(err, err_size, "metrics_listen: cannot listen on %s: %s", spec, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        metrics_bound_port =
            ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)(void *)&ss)->sin_port
                                          : ((struct sockaddr_in6 *)(void *)&ss)->sin6_port);
    }
    metrics_fd = fd;
    metrics_listen_handler.fn = metrics_on_accept;
    if (loop_add(fd, EPOLLIN, &metrics_listen_handler) != 0) {
        snprintf(err, err_size, "metrics_listen: %s", strerror(errno));
        return -1;
    }
    log_info("metrics: http://%s/metrics (port %d)", spec, metrics_bound_port);
    return 0;
}

int metrics_port(void)
{
    return metrics_fd >= 0 ? metrics_bound_port : -1;
}

void metrics_tick(int64_t now_ms)
{
    for (int i = 0; i < METRICS_CLIENTS_MAX; i++) {
        if (metrics_clients[i] != NULL && now_ms >= metrics_clients[i]->deadline_ms) {
            metrics_client_close(metrics_clients[i]); /* slow or silent: METRICS_TIMEOUT_MS */
        }
    }
}

void metrics_shutdown(void)
{
    for (int i = 0; i < METRICS_CLIENTS_MAX; i++) {
        if (metrics_clients[i] != NULL) {
            metrics_client_close(metrics_clients[i]);
        }
    }
    if (metrics_fd >= 0) {
        loop_del(metrics_fd, &metrics_listen_handler);
        close(metrics_fd);
        metrics_fd = -1;
    }
    free(metrics_queues);
    metrics_queues = NULL;
    metrics_queue_count = 0;
}
