/*
 * metrics.h -- counters, gauges and histograms for /metrics (metrics.c; any thread;
 * docs/IMAPD.md lists the families), and the HTTP listener (loop thread).
 */
#ifndef MV_IMAPD_METRICS_H
#define MV_IMAPD_METRICS_H

#include "buf.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum metric_counter {
    METRIC_ACCEPTED_IMAP, /* the four in METRIC_CONNECTIONS_* order: imap, imaps, lmtp, control */
    METRIC_ACCEPTED_IMAPS,
    METRIC_ACCEPTED_LMTP,
    METRIC_ACCEPTED_CONTROL,
    METRIC_REFUSED,    /* connections_max / connections_per_address_max */
    METRIC_TLS_FAILED, /* a connection with TLS closed before its handshake finished */
    METRIC_LOGINS_OK,
    METRIC_LOGINS_FAILED,
    METRIC_STORES_MIGRATED, /* stores an open migrated to the current schema version */
    METRIC_FTS_SET_ASIDE,   /* bodies the full-text catch-up set aside, logged (worker.c) */
    METRIC_COUNTER_COUNT
};
enum metric_gauge {
    METRIC_CONNECTIONS_IMAP, /* same order as the METRIC_ACCEPTED_* */
    METRIC_CONNECTIONS_IMAPS,
    METRIC_CONNECTIONS_LMTP,
    METRIC_CONNECTIONS_CONTROL,
    METRIC_OPEN_STORES,
    METRIC_MIGRATING_STORES, /* open stores whose migration's background work is not done */
    METRIC_FTS_BACKLOG,      /* bodies of open stores waiting for their full-text rows */
    METRIC_GAUGE_COUNT
};
/* The IMAP command a session is running, for its latency and status (metrics_imap_*). */
struct metrics_cmd {
    int index; /* 0: none; else 1 + the command's row */
    int64_t started_us;
};
int64_t metrics_now_us(void);
void metrics_count(enum metric_counter id);
void metrics_gauge_add(enum metric_gauge id, int64_t delta);
/* A connection opened (+1: its METRIC_ACCEPTED_* counts too) or closed (-1); gauge is one
 * of the METRIC_CONNECTIONS_*. */
void metrics_connection(enum metric_gauge gauge, int delta);
/* A command's line is complete (name as parsed, uid: a UID command). */
void metrics_imap_start(struct metrics_cmd *m, const char *name, int uid);
/* Its tagged response: status is the text after the tag ("OK ...", "NO ...", "BAD ..."). */
void metrics_imap_done(struct metrics_cmd *m, const char *status);
/* An LMTP recipient's final reply ("250 ...", "451 ...", "550 ..."). */
void metrics_lmtp_reply(const char *reply);
/* A job was queued on (+1) or taken off (-1) worker_index's queue. */
void metrics_worker_queue(int worker_index, int delta);
/* The pseudo-lane of jobs whose answer waits for an append's WAL sync on a sync thread
 * (worker.c SYNC APART): queued at the hand-over, its wait until the sync's end. */
#define METRICS_LANE_SYNC 3
#define METRICS_LANES     4
/* The same per lane (a JOB_LANE_* or METRICS_LANE_SYNC, all workers together): a job queued
 * (+1) or taken (-1). */
void metrics_lane_queue(int lane, int delta);
/* A job of lane waited wait_us in the queue before its worker took it. */
void metrics_lane_wait(int lane, int64_t wait_us);
/* A drain step on a worker moved `moved` sealed deliveries into a store. */
void metrics_drain_step(uint32_t moved);
/* Bytes of a FETCH response its job wrote to the socket itself (imap_fetch.c). */
void metrics_fetch_direct_add(uint64_t bytes);
/* A FETCH BODYSTRUCTURE or BODY looked for its answer: made from the message (miss), found
 * in the open store's structure cache (hit), or read from the store's memos (stored). */
enum metric_structure { METRIC_STRUCTURE_MISS, METRIC_STRUCTURE_HIT, METRIC_STRUCTURE_STORED };
void metrics_structure_cache(enum metric_structure result);
/* n answers written to a store's memos (the worker, between jobs and at a store's close). */
void metrics_structure_saved(uint64_t n);
/* An answer made on a miss: from the message's skeleton, without the parts stored apart
 * (imap_mime_open_skeleton), or from the whole message. */
void metrics_structure_made(int from_skeleton);
/* A FETCH's body sections of a message with parts stored apart answered from its skeleton
 * (imap_fetch_sparse_copy), or from the whole message. */
void metrics_sections_read(int from_skeleton);
/* A message of one part whose FETCH sections its header settled (imap_fetch_single_header). */
void metrics_sections_from_header(void);
/* A preview answered from the message's first bytes (imap_fetch_prefix). */
void metrics_sections_prefix(void);
/* A header-only FETCH's header of one message: from the window read ahead by body keys
 * (imap_fetch_headers.h), or read by UID. */
void metrics_headers_read(int from_window);
/* n messages' sent days read for SEARCH SENT*: from the store's saved copy (a mailbox memo),
 * or from the messages' rows (imap_search_sent.c); a copy saved at a store's close. */
void metrics_sent_days_read(int from_saved, uint64_t n);
void metrics_sent_days_saved(void);
/* Messages whose Message-ID fields a copy read from its saved form (from_saved 1) or from
 * their headers; and each copy saved (imap_search_msgid.c). */
void metrics_msgids_read(int from_saved, uint64_t n);
void metrics_msgids_saved(void);
/* Messages whose SORT keys a store's kept copy read from its saved form (from_saved 1) or
 * from their header fields; and each copy saved (imap_sort_kept.c). */
void metrics_sort_keys_read(int from_saved, uint64_t n);
void metrics_sort_keys_saved(void);
/* Before the workers start: room for their queue lengths. 0 or -1. */
int metrics_init(int workers);
/* Loop thread: listens on metrics_listen ("" : off). 0, or -1 with the reason in err. */
int metrics_listen(const char *spec, char *err, size_t err_size);
/* The bound port, or -1 when off. */
int metrics_port(void);
void metrics_tick(int64_t now_ms);
void metrics_shutdown(void);
/* The exposition text (tests, the HTTP side). */
void metrics_render(struct buf *b);
/* Parses "ADDRESS:PORT" ("[v6]:PORT" too) into ss. 0 or -1. */
int metrics_parse_address(const char *spec, struct sockaddr_storage *ss, socklen_t *len);

#endif /* MV_IMAPD_METRICS_H */
