/*
 * conn.h -- connections (conn.c) and the table a protocol plugs into them (struct
 * conn_proto_ops). conn.c owns the socket, TLS, the buffers, timers and limits; a protocol
 * owns c->session. Loop thread only: a job never touches its connection.
 */
#ifndef MV_IMAPD_CONN_H
#define MV_IMAPD_CONN_H

#include "buf.h"
#include "loop.h"
#include "metrics.h"

#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

/* A response made in chunks (FETCH) gets its next chunk once less than this is queued: more
 * than one chunk (IMAP_FETCH_CHUNK), so the worker makes the next chunk while the socket
 * still sends the last one, rather than after the client has read it (issue 13). */
#define CONN_STREAM_RESUME_BELOW ((size_t)1 << 20)
/* An output buffer this large is freed once empty (a big response left it grown). */
#define CONN_OUTPUT_KEEP_MAX ((size_t)1 << 20)

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
    int busy;        /* a job is in flight, or output is held (auth delay) */
    int stream_wait; /* busy with a response that goes on once out drains (ops->drained) */
    /* The job in flight writes to the socket itself, through a duplicate of fd (a FETCH:
     * imap_fetch.c, "Direct sending"), so nothing may be written to the socket but through
     * out until its done(): a close shuts the socket down first (the job's next write fails
     * instead of going out after the close), and the shutdown's BYE is left out (it could
     * land inside a message the job is writing). Set and cleared by the protocol. */
    int job_writes;
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
/* Queues b's bytes and empties b: when nothing else is queued, b's memory becomes the
 * output and b gets the output's old (empty) buffer, so a FETCH chunk is not copied on the
 * loop (issue 13: that memcpy was ~3% of the CPU of a FETCH of whole messages). */
void conn_write_buf(struct conn *c, struct buf *b);
void conn_write_str(struct conn *c, const char *s);
/* Sends what is queued; closes on error. */
void conn_flush(struct conn *c);
/* A chunk of a streamed response is queued and more follows (stream_wait set): the next
 * chunk is asked for (ops->drained) at once if less than CONN_STREAM_RESUME_BELOW is queued,
 * before this one is sent, so the worker makes it while the loop writes this one (issue 13:
 * asked for after the send, the worker waited for each chunk's send() and two wake-ups),
 * else by conn_flush() once the output falls below; then sends. */
void conn_stream_continue(struct conn *c);
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

#endif /* MV_IMAPD_CONN_H */
