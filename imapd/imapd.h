/*
 * imapd.h -- what the files of mailvaultd share: configuration, byte buffers, the server and
 * its connections, jobs and workers, the log. The design is in docs/IMAPD.md.
 *
 * THREADS
 *   Everything here belongs to the loop thread except: a job's run function, which runs on
 *   the worker the job was posted to and may touch only the job, its session's mailbox state
 *   and the worker's open stores; and the worker structs themselves (their own locks).
 */
#ifndef MV_IMAPD_H
#define MV_IMAPD_H

#include "mailvault.h"

#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* ---- config.c ---- */
struct config {
    char listen[64];
    int imap_port; /* -1: off; 0: any free port (see ports_file) */
    int imaps_port;
    int lmtp_port;
    char root[MV_PATH_MAX];
    char tls_cert[MV_PATH_MAX];
    char tls_key[MV_PATH_MAX];
    char ports_file[MV_PATH_MAX];
    char log[16];                     /* "stderr" or "syslog" */
    char log_level[16];               /* "error", "warning", "info" (default), "debug" */
    char metrics_listen[80];          /* ADDRESS:PORT of the /metrics HTTP listener; "": off */
    char control_socket[MV_PATH_MAX]; /* "": ROOT/MV_CONTROL_SOCKET_NAME; "off": none */
    int workers;
    int stores_per_worker;
    int store_idle_s;
    size_t line_max;
    uint64_t literal_max; /* APPEND literals; other literals: CONFIG_SMALL_LITERAL_MAX */
    int connections_max;
    int connections_per_address_max;
    int idle_timeout_s;
    int auth_fail_delay_ms;
    int auth_fail_delay_max_ms;  /* no failed login is answered later (proxies time out) */
    char trusted_networks[1024]; /* CIDR list of proxies that may pass the client's address */
    int allow_plaintext;
    uint32_t kdf_iter;
    int lmtp_recipients_max;

    /* Hostile clients (docs/IMAPD.md "Limits"): what one may hold before it logs in, and
     * what LMTP keeps for itself so that no IMAP client can starve deliveries. */
    size_t prelogin_bytes_max;        /* a command (lines + literals) / input before login */
    int login_timeout_s;              /* the whole login phase, from the connect */
    uint64_t literal_total_max;       /* IMAP literals being received, all connections */
    int lmtp_connections_max;         /* LMTP's own pool (connections_max is IMAP's) */
    int lmtp_transaction_timeout_s;   /* MAIL FROM to the last reply after DATA */
    int lmtp_rejected_recipients_max; /* refused RCPTs per transaction, then 452 */
    uint64_t lmtp_data_total_max;     /* LMTP message bytes held, all connections */
    uint64_t quota_kib;      /* default storage quota per user in KiB (RFC 9208 STORAGE); 0: none */
    uint64_t quota_messages; /* default message quota per user (RFC 9208 MESSAGE); 0: none */
    char quota_file[MV_PATH_MAX]; /* per-user limits (quota_file.c), read when set; "" none */

    /* Running in production (docs/IMAPD.md). */
    char user[64];           /* started as root: switch to this account (main.c) */
    char group[64];          /* ... and group; "": the user's primary group */
    int allow_root;          /* started as root without user: serve as root anyway */
    int cache_size_kib;      /* each open store's page cache; 0: the library's default */
    int maintain_interval_s; /* maintain an idle-closed store at most this often; 0: off */
    int maintain_max_mib;    /* ... if it is at most this large (file + WAL) */
};
#define CONFIG_SMALL_LITERAL_MAX 65536
#define CONFIG_OUTPUT_MAX        (4u << 20) /* reading pauses while more is queued */
/* A response made in chunks (FETCH) gets its next chunk once less than this is queued. */
#define CONN_STREAM_RESUME_BELOW ((size_t)256 << 10)
/* An output buffer this large is freed once empty (a big response left it grown). */
#define CONN_OUTPUT_KEEP_MAX ((size_t)1 << 20)

void config_defaults(struct config *c);
/* Applies one "key = value" setting; 0, or -1 with a message in err. */
int config_set(struct config *c, const char *key, const char *value, char *err, size_t err_size);
/* Reads a config file of "key = value" lines ('#' comments). 0 or -1 (message in err). */
int config_load(struct config *c, const char *path, char *err, size_t err_size);
void config_usage(void);
/* The store options every open and delivery uses. */
struct mv_store_options config_store_options(const struct config *c);

/* ---- quota_file.c, quota.c: the quota (RFC 9208) ---- */
#define QUOTA_STORAGE_KIB_MAX (1ULL << 40)  /* largest STORAGE limit (quota_kib, quota_file) */
#define QUOTA_MESSAGES_MAX    4294967295ULL /* largest MESSAGE limit */
#define QUOTA_OVER_STORAGE    1             /* quota_exceeded() bits */
#define QUOTA_OVER_MESSAGE    2
struct quota_limits {
    uint64_t storage_kib; /* 0: unlimited */
    uint64_t messages;    /* 0: unlimited */
};
struct quota_usage {
    uint64_t bytes; /* logical: the sum of the messages' sizes */
    uint64_t messages;
};

/* ---- quota_file.c ---- */
/* Reads the quota file at path ("" : none) and makes it the table; the server re-reads it
 * when it changes. 0, or -1 with "path:line: reason" in err (the table is unchanged). */
int quota_file_load(const char *path, char *err, size_t err_size);
/* Re-reads the quota file now, changed or not (SIGHUP); the outcome is logged. 0 (also with
 * no quota_file), or -1 when the file could not be read or parsed (the table is unchanged). */
int quota_file_reload(void);
/* The limits of address (normalised): its quota_file entry, else cfg's defaults. Thread-safe. */
struct quota_limits quota_limits_for(const struct config *cfg, const char *address);

/* ---- quota.c ---- */
/* The usage of an open store, summed over its mailbox rows. MV_OK or an MV_* code. */
int quota_used(mv_store *store, struct quota_usage *out);
/* 0, or QUOTA_OVER_* bits: storing add_bytes in add_messages more messages in the open store
 * of address would go over its limits. */
int quota_exceeded(mv_store *store,
                   const struct config *cfg,
                   const char *address,
                   uint64_t add_bytes,
                   uint64_t add_messages);
/* As quota_exceeded() for one sealed delivery (the store is not open): from the usage last
 * noted plus the queue, else the store's file sizes (see quota.c); -1 if the queue cannot be
 * counted (unreadable, or over 1,000,000 entries). why: what was counted. */
int quota_sealed_exceeded(
    const struct config *cfg, const char *address, uint64_t add_bytes, char *why, size_t why_size);
/* Records the usage of the open store of address for later sealed deliveries (the worker
 * calls it after opening the store and before closing it). */
void quota_note(const char *address, mv_store *store);
/* "storage", "message" or "storage and message" for QUOTA_OVER_* bits. */
const char *quota_over_text(int over);

/* ---- log.c ---- */
/* The levels, most severe first; syslog priorities LOG_ERR .. LOG_DEBUG. */
enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARNING, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
/* "error", "warning", "info", "debug" -> the level, or -1. */
int log_level_parse(const char *name);
/* Lines above threshold (less severe) are dropped. */
void log_open(int use_syslog, enum log_level threshold);
int log_enabled(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_error(...)   log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_info(...)    log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...)   log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
/* An event of the normal course (info): the name code written before the levels uses. */
#define log_event(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)

/* ---- buf.c ---- */
struct buf {
    char *data;
    size_t len;
    size_t cap;
    int oom; /* an append failed: the buffer is unusable */
};
void buf_free(struct buf *b);
int buf_reserve(struct buf *b, size_t extra);
void buf_add(struct buf *b, const void *data, size_t len);
void buf_str(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An IMAP literal "{len}" CRLF and the bytes, every NUL sent as 0x80 (RFC 3501 9: CHAR8
 * excludes NUL; what Dovecot sends). Every literal the server sends goes through here. */
void buf_literal(struct buf *b, const void *data, size_t len);
/* Drops the first n bytes. */
void buf_consume(struct buf *b, size_t n);
/* An IMAP string: quoted if short and plain, else a literal. */
void buf_imap_string(struct buf *b, const char *s, size_t len);
/* An nstring: NIL for NULL. */
void buf_imap_nstring(struct buf *b, const char *s);
/* As buf_imap_string(), but with utf8 set (the session enabled UTF8=ACCEPT, RFC 6855) a
 * string that is valid UTF-8 goes out quoted too; without it, 8-bit strings stay literals. */
void buf_imap_string_utf8(struct buf *b, const char *s, size_t len, int utf8);
/* Wipes and frees (buffers that held a password). */
void buf_wipe(struct buf *b);

/* ---- loop.c ---- */
typedef void (*loop_fn)(void *arg, uint32_t events);
struct loop_handler {
    loop_fn fn;
    void *arg;
};
int loop_init(void);
int loop_add(int fd, uint32_t events, struct loop_handler *h);
/* Removes fd from the loop; an event for h already returned in the batch being run is
 * dropped, so h's owner may be freed once this returns. */
void loop_del(int fd, const struct loop_handler *h);
int64_t loop_now_ms(void);
/* Runs until loop_stop(); calls tick at least every second with the current time. */
void loop_run(void (*tick)(int64_t now_ms));
void loop_stop(void);

/* ---- proxy.c ---- */
/* Whether list parses as trusted_networks (CIDR prefixes); 0, or -1 with err. */
int proxy_networks_check(const char *list, char *err, size_t err_size);
/* Whether a socket peer is in g_config.trusted_networks. */
int proxy_trusted(const struct sockaddr_storage *sa);
/* An address a proxy passed ("192.0.2.1", "2001:db8::1", "IPV6:2001:db8::1", "[::1]"),
 * normalised into out (an IPv4-mapped IPv6 address as IPv4). 0, or -1 if it is none. */
int proxy_parse_address(const char *text, char *out, size_t out_size);

/* ---- metrics.c: counters for /metrics (any thread; docs/IMAPD.md lists the families) ---- */
enum metric_counter {
    METRIC_ACCEPTED_IMAP, /* the four in METRIC_CONNECTIONS_* order: imap, imaps, lmtp, control */
    METRIC_ACCEPTED_IMAPS,
    METRIC_ACCEPTED_LMTP,
    METRIC_ACCEPTED_CONTROL,
    METRIC_REFUSED,    /* connections_max / connections_per_address_max */
    METRIC_TLS_FAILED, /* a connection with TLS closed before its handshake finished */
    METRIC_LOGINS_OK,
    METRIC_LOGINS_FAILED,
    METRIC_COUNTER_COUNT
};
enum metric_gauge {
    METRIC_CONNECTIONS_IMAP, /* same order as the METRIC_ACCEPTED_* */
    METRIC_CONNECTIONS_IMAPS,
    METRIC_CONNECTIONS_LMTP,
    METRIC_CONNECTIONS_CONTROL,
    METRIC_OPEN_STORES,
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
/* The same per lane (a JOB_LANE_*, all workers together): a job queued (+1) or taken (-1). */
void metrics_lane_queue(int lane, int delta);
/* A job of lane waited wait_us in the queue before its worker took it. */
void metrics_lane_wait(int lane, int64_t wait_us);
/* A drain step on a worker moved `moved` sealed deliveries into a store. */
void metrics_drain_step(uint32_t moved);
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

/* ---- conn.c: connections, and the table a protocol plugs into them ---- */
struct conn;

/* What conn.c needs of a protocol: one constant instance per protocol, defined in that
 * protocol's own file (imap_conn_proto in imap_session.c, lmtp_conn_proto in lmtp.c), named
 * by the listener that accepts the connection. conn.c owns the socket, TLS, the buffers,
 * the timers and the connection limits; the protocol owns c->session and what it means.
 * Every hook runs on the loop thread. A new protocol is one more instance. */
struct conn_proto_ops {
    const char *name; /* in logs ("connect ... imap") */
    /* Accepted: makes c->session and queues the greeting (or queues a refusal and calls
     * conn_close_after_output). */
    void (*start)(struct conn *c);
    /* Takes what it can of c->in; returns when busy, closing, out of complete commands or
     * with conn_output_max() bytes queued. */
    void (*input)(struct conn *c);
    /* Each tick (about every 100 ms) while the connection is not busy: the protocol's own
     * timers (IDLE polls, transaction deadlines). NULL: none. */
    void (*tick)(struct conn *c, int64_t now_ms);
    /* The output of a connection in stream_wait fell below CONN_STREAM_RESUME_BELOW: the
     * response goes on (the next chunk of a FETCH). NULL: never sets stream_wait. */
    void (*drained)(struct conn *c);
    /* The socket is gone: the protocol lets go of c->session (jobs in flight still hold c;
     * their done() sees c->dead). */
    void (*end)(struct conn *c);
    /* Whether c has not logged in yet. Such a connection holds input and output together
     * within prelogin_bytes_max (half of it for output), has login_timeout_s from its
     * connect for the login, and is pushed out (the oldest first) when a new connection
     * finds the pool full. NULL: the protocol has no login phase. */
    int (*prelogin)(const struct conn *c);
    /* The idle timeout of c in ms; NULL: idle_timeout_s (IMAP's IDLE gets longer). */
    int64_t (*idle_timeout_ms)(const struct conn *c);
    /* The size of the protocol's pool of connections (connections_max for IMAP,
     * lmtp_connections_max for LMTP): pools are apart so that one protocol's clients cannot
     * take another's slots. */
    int (*connections_max)(void);
    int per_address_limit; /* connections_per_address_max applies, counted per protocol */
    /* Lines (with CRLF) conn.c sends before it closes a connection of the protocol. */
    const char *bye_shutdown;      /* the server stops */
    const char *bye_idle_timeout;  /* idle for longer than idle_timeout_ms */
    const char *bye_login_timeout; /* prelogin for longer than login_timeout_s */
    const char *bye_evicted;       /* the oldest prelogin one, for a new connection */
    /* A refused connection (a limit) gets refuse_prefix, the reason and CRLF (not on an
     * implicit-TLS port, where no handshake happened). */
    const char *refuse_prefix;
    enum metric_gauge metric_gauge;     /* METRIC_CONNECTIONS_* of a plain connection */
    enum metric_gauge metric_gauge_tls; /* ... of one accepted on an implicit-TLS port */
};

/* The protocols (main.c names them for its listeners). */
extern const struct conn_proto_ops imap_conn_proto;
extern const struct conn_proto_ops lmtp_conn_proto;
extern const struct conn_proto_ops control_conn_proto;

struct conn {
    struct loop_handler handler;
    int fd;
    const struct conn_proto_ops *ops; /* the protocol spoken on it */
    int implicit_tls;   /* accepted on an implicit-TLS port (imaps; metrics count it apart) */
    char peer[256];     /* for logs: "addr:port", behind a proxy "addr:port via proxy ..." */
    char peer_addr[48]; /* the client's address alone, for the per-address limits */
    char via[64];       /* the trusted proxy's "addr:port" once it passed the client's; "" */
    int loopback;       /* the socket's peer is loopback (the proxy's, behind one) */
    int trusted;        /* the socket's peer is in trusted_networks (proxy.c) */
    SSL *ssl;
    int tls; /* 1 once TLS is on (implicit or after STARTTLS) */
    struct buf in;
    struct buf out;
    int busy;             /* a job is in flight, or output is held (auth delay) */
    int stream_wait;      /* busy with a response that goes on once out drains (ops->drained) */
    int closing;          /* close once the output is written */
    int dead;             /* the socket is gone; freed when refs drops to 0 */
    int refs;             /* jobs in flight that refer to this connection */
    int read_paused;      /* reading stopped on a full input buffer (conn_input_room) */
    int read_eof;         /* the peer is gone: close once what it sent is processed */
    int64_t connected_ms; /* for login_timeout_s */
    int64_t last_active_ms;
    int64_t hold_until_ms; /* output held (failed login) until then */
    struct buf held;
    uint64_t bytes_in, bytes_out;
    void *session; /* the protocol's (ops): struct imap_session, struct lmtp_session */
    struct conn *prev, *next;
};

/* A trusted proxy passed the client's address (normalised, proxy_parse_address), port
 * (0: unknown) and session id (NULL: none): from now on the per-address limits and the logs
 * use them. 0, or -1 if the client's address already has connections_per_address_max
 * connections of this protocol (the caller refuses the connection). */
int conn_set_client(struct conn *c, const char *addr, unsigned port, const char *session_id);

/* Iterates over the open connections: conn_next(NULL) is the first, NULL after the last. */
struct conn *conn_next(const struct conn *c);
/* Closes the connection now (what is queued and not yet written is dropped). */
void conn_close(struct conn *c, const char *why);
/* Writes (queues) bytes to the peer. */
void conn_write(struct conn *c, const void *data, size_t len);
void conn_write_str(struct conn *c, const char *s);
/* Sends what is queued; closes on error. */
void conn_flush(struct conn *c);
/* Marks the connection to close once its output is written. */
void conn_close_after_output(struct conn *c);
/* Starts TLS on the connection (STARTTLS, after the OK was flushed). 0 or -1. */
int conn_start_tls(struct conn *c);
/* Called by the protocol when a job finished: processes input that waited. */
void conn_resume(struct conn *c);
/* Drops a reference taken while a job referred to c; frees a dead connection at zero. */
void conn_release(struct conn *c);
/* Holds the queued output until now + delay_ms (failed login). */
void conn_hold(struct conn *c, int delay_ms);
/* Connection bookkeeping for the listeners. */
void conn_accept(int listen_fd, const struct conn_proto_ops *ops, int implicit_tls);
void conn_tick(int64_t now_ms);
/* Says BYE to every connection and closes it (jobs in flight finish; see main.c). */
void conn_shutdown_all(void);
int conn_count(void);
/* Output queued past which no new command is taken: CONFIG_OUTPUT_MAX, or before login
 * (ops->prelogin) half of prelogin_bytes_max (input and output together stay within it). */
size_t conn_output_max(const struct conn *c);

/* ---- tls.c (loop thread) ---- */
/* Loads cert and key ("": in cert); cert "" is no TLS. 0 with the certificate's SHA-256
 * fingerprint and expiry in info, or -1 with the reason in err. */
int tls_init(
    const char *cert, const char *key, char *info, size_t info_size, char *err, size_t err_size);
/* As tls_init, into a new context for connections made from now on (SIGHUP); on -1 the
 * previous context stays. Existing connections keep the context they were made with. */
int tls_reload(
    const char *cert, const char *key, char *info, size_t info_size, char *err, size_t err_size);
int tls_available(void);
SSL *tls_new(int fd);
void tls_shutdown(void);

/* ---- notify.c (loop thread): systemd's NOTIFY_SOCKET protocol, without libsystemd ---- */
/* Connects to $NOTIFY_SOCKET if set (before the switch of users); a failure is logged. */
void notify_init(void);
/* Sends "KEY=VALUE" lines (READY=1, STATUS=...) as one datagram; nothing without a socket. */
void notify_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void notify_close(void);

/* ---- throttle.c (loop thread) ---- */
struct throttle_counts {
    uint32_t address_failures; /* in the window, this one included */
    uint32_t user_failures;    /* 0: no user counted */
};
/* Records a failed login from addr for user (the normalised address tried, whether it
 * exists or not; NULL if the name is not an address); returns the delay (ms) before its
 * answer: base_delay_ms doubled for each earlier failure in the last 15 minutes from addr or
 * for user, whichever has more, at most 30 s. The counts go in counts (for the log). */
int throttle_failure(const char *addr,
                     const char *user,
                     int base_delay_ms,
                     struct throttle_counts *counts);

/* ---- worker.c ---- */
struct worker;
struct job;
typedef void (*job_fn)(struct job *job);
/* A worker takes short jobs first (worker.c "LANES"): a NOOP, a flag change or a small FETCH
 * does not wait behind a FETCH of many bodies, a big SEARCH or COPY. Each job of a session
 * waits for the one before it (the connection is busy meanwhile), so lanes never reorder a
 * session's commands; the poster of a job that must follow another (a session's end) gives
 * it the same lane. */
enum job_lane { JOB_LANE_SHORT = 0, JOB_LANE_LONG = 1, JOB_LANES = 2 };
/* Short jobs a worker takes in a row while a long one waits, before the long one goes. */
#define WORKER_SHORT_BURST 8
struct job {
    struct job *next;
    struct conn *conn; /* the loop's; run() must not touch it */
    job_fn run;        /* on the worker */
    job_fn done;       /* on the loop, after run */
    struct worker *worker;
    void *arg;
    struct buf out; /* response bytes written by run() */
    int delay_ms;   /* done() holds the output this long */
    int result;
    enum job_lane lane; /* set by the poster (0: short) */
    int64_t queued_us;  /* worker_post: when it was queued (metrics) */
};
/* Starts count workers. 0 or -1. */
int worker_start(const struct config *cfg, int count, int eventfd);
void worker_stop_all(void);
/* The worker pinned to address. */
struct worker *worker_for(const char *address);
/* Queues job on worker (job->worker set). */
void worker_post(struct worker *w, struct job *job);
/* The loop calls this when the eventfd fires: runs done() of every finished job. */
void worker_collect(void);

/* The open-store table of a worker (call only from a job running on that worker). */
struct imap_view_cache;
struct open_store {
    char address[MV_ADDRESS_MAX + 1];
    mv_store *store;
    unsigned char verifier[32];
    int refs;
    int64_t last_used_ms;
    /* Sealed deliveries still queued: the store was opened without draining them
     * (MV_STORE_DRAIN_LATER) and the worker drains them in steps between jobs (worker.c
     * "THE DRAIN"); LMTP seals into the queue meanwhile, so INBOX keeps arrival order. */
    int drain_more;
    struct imap_view_cache *view_cache; /* the IMAP views SELECT copies (imap_view_cache.c) */
};
/* Frees a store's cached views (when it is closed); *c becomes NULL. */
void imap_view_cache_free(struct imap_view_cache **c);
/* Opens (or finds, checking the password) the store of address. Returns MV_OK with *out,
 * MV_EAUTH / MV_ENOTFOUND, MV_ELIMIT (no room: every open store in use), or another code;
 * errmsg gets the detail. */
int worker_store_acquire(struct worker *w,
                         const char *address,
                         const char *password,
                         size_t password_len,
                         struct open_store **out,
                         char *errmsg,
                         size_t errmsg_size);
void worker_store_release(struct worker *w, struct open_store *s);
/* The open store of address without a password (LMTP delivery into an open store), or NULL. */
struct open_store *worker_store_find(struct worker *w, const char *address);
const struct config *worker_config(const struct worker *w);
/* For control.c: the number of workers, and the one at index (0 .. worker_total() - 1). */
int worker_total(void);
struct worker *worker_at(int index);
/* On the worker: a "* store ADDRESS worker=N sessions=N idle_s=N" line per open store. */
void worker_store_list(struct worker *w, struct buf *out);
/* On the worker: checkpoints (TRUNCATE) and closes the store of address if it is open and
 * no session holds it (*closed = 1). MV_OK (closed, or not open here) or MV_EBUSY. */
int worker_store_close_user(struct worker *w, const char *address, int *closed);

/* ---- imap_session.c ---- */
/* On the loop, after a job that may have changed a mailbox of user completed: every
 * session of user in IDLE (but except) looks for changes now (IDLE push). */
void imap_session_notify(const char *user, const void *except);
/* ---- idle_watch.c (loop thread): changes to a store by other processes, for IDLE ---- */
/* A session of user entered IDLE: watch its store (inotify), and imap_session_notify(user)
 * when another process changes it. Best effort: without inotify the IDLE poll is left. */
void idle_watch_add(const char *user);
/* A session of user left IDLE; the watch goes with the last one. */
void idle_watch_remove(const char *user);

/* ---- control.c: the control socket (docs/CONTROL.md) ---- */
/* Listens on path (owner-only; a stale socket of ours is replaced, anything else refused).
 * 0, or -1 with the reason in err. Call before any thread exists (it sets the umask). */
int control_listen(const char *path, char *err, size_t err_size);
/* Closes the socket and removes it (if it is still ours). */
void control_close(void);
/* After the workers stopped and their jobs were collected: ends the requests left. */
void control_shutdown(void);
void control_tick(int64_t now_ms);
/* Whether a release of user is in progress (any thread): LOGIN and RCPT are refused. */
int control_user_held(const char *user);
/* Appends a value of a reply line: bytes outside '!'..'~' and '%' as %XX; "" as "-". */
void control_value(struct buf *b, const char *text);
/* The Unix time (s) of a loop_now_ms() time stamp. */
long long control_wall_s(int64_t loop_ms);
/* For the control requests, on the loop: the user of a logged-in IMAP connection, else NULL;
 * ending it with "* BYE text" (1), or, with a command in flight, taking no new command (0:
 * ask again once it is done); a "* session ..." line per session of c (their count). */
const char *imap_session_user(const struct conn *c);
int imap_session_kick(struct conn *c, const char *text);
int imap_session_who(const struct conn *c, struct buf *out);
int lmtp_session_who(const struct conn *c, struct buf *out);

/* The running configuration (main.c). */
extern struct config g_config;

#endif /* MV_IMAPD_H */
