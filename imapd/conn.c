/*
 * conn.c -- connections: accept with the connection limits, non-blocking reads and writes
 * (plain or TLS), idle and login timeouts, held output and back-pressure, for any protocol.
 *
 * USAGE
 *   A protocol is a struct conn_proto_ops (conn.h) in its own file; a listener passes it to
 *   conn_accept(), and conn.c calls its hooks: start on accept, input when bytes arrived or
 *   a job finished, tick on the loop's tick, drained when a streamed response may go on, end
 *   when the socket is gone. conn.c never looks into c->session.
 *
 * IMPLEMENTATION NOTES
 *   - Sockets are edge-triggered: every event drains the socket into the input buffer (up to
 *     a cap while a job is in flight or CONFIG_OUTPUT_MAX bytes wait to be written) and
 *     writes as much output as the socket takes. After a job finishes, conn_resume() reads
 *     and processes again, since no new edge may come.
 *   - References: each job in flight holds one (worker_post), and every path that may close
 *     the connection while using it takes one, so a close never frees memory in use.
 *   - A connection whose socket is gone is "dead": it leaves the list at once but is freed
 *     only when no job refers to it (jobs never touch the connection; their done() on the
 *     loop checks dead).
 *   - STARTTLS throws away any input that arrived before the handshake (RFC 3207's command
 *     injection lesson applies to IMAP as well).
 *   - The idle timeout is checked on the loop's tick (every 100 ms, a walk of the list);
 *     the protocol may lengthen it (ops->idle_timeout_ms: IMAP's IDLE gets four times
 *     idle_timeout_s).
 *   - Each protocol has its own pool (ops->connections_max) and, if ops->per_address_limit,
 *     its own per-address count; both are counted by a walk of the list at accept.
 *   - A response made in chunks (FETCH, see docs/IMAPD.md "Streaming FETCH") keeps the
 *     connection busy with stream_wait set; once conn_flush() has written all but
 *     CONN_STREAM_RESUME_BELOW bytes it calls ops->drained() for the next chunk, also when
 *     the socket is full (it used to wait for the output to empty: the worker then made
 *     the next chunk only after the client had read the last one).
 *     Bytes taken by the socket count as activity then, so only a reader that stops
 *     reading times out. An output buffer grown past CONN_OUTPUT_KEEP_MAX is freed once
 *     empty.
 */
#include "conn.h"
#include "buf.h"
#include "config.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "proxy.h"
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONN_READ_CHUNK 65536

static struct conn *conn_list;
static int conn_total; /* every connection (conn_count) */

int conn_count(void)
{
    return conn_total;
}

/* Whether c is in its protocol's login phase (the pre-login limits apply). */
static int conn_prelogin(const struct conn *c)
{
    return c->ops->prelogin != NULL && c->ops->prelogin(c);
}

size_t conn_output_max(const struct conn *c)
{
    return conn_prelogin(c) ? g_config.prelogin_bytes_max / 2 : CONFIG_OUTPUT_MAX;
}

static int64_t conn_idle_timeout_ms(const struct conn *c)
{
    return c->ops->idle_timeout_ms != NULL ? c->ops->idle_timeout_ms(c)
                                           : (int64_t)g_config.idle_timeout_s * 1000;
}

static void conn_event(void *arg, uint32_t events);

static void conn_free(struct conn *c)
{
    buf_free(&c->in);
    buf_free(&c->out);
    buf_free(&c->held);
    free(c);
}

void conn_release(struct conn *c)
{
    if (--c->refs == 0 && c->dead) {
        conn_free(c);
    }
}

static void conn_close_now(struct conn *c, const char *why)
{
    if (c->dead) {
        return;
    }
    log_info("disconnect %s (%s): %llu bytes in, %llu out", c->peer, why,
             (unsigned long long)c->bytes_in, (unsigned long long)c->bytes_out);
    c->dead = 1;
    metrics_connection(c->implicit_tls ? c->ops->metric_gauge_tls : c->ops->metric_gauge, -1);
    if (c->ssl != NULL && !SSL_is_init_finished(c->ssl)) {
        metrics_count(METRIC_TLS_FAILED); /* failed, or abandoned half-way */
    }
    loop_del(c->fd, &c->handler);
    if (c->ssl != NULL) {
        SSL_free(c->ssl);
        c->ssl = NULL;
    }
    if (c->job_writes) {
        (void)shutdown(c->fd, SHUT_RDWR); /* the job's duplicate would keep it open */
    }
    close(c->fd);
    c->fd = -1;
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        conn_list = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    conn_total--;
    c->refs++;
    c->ops->end(c);
    conn_release(c);
}

/* One read; >0 bytes, 0 would block, -1 closed or failed. */
static long conn_read_some(struct conn *c, char *into, size_t len)
{
    if (c->ssl != NULL) {
        ERR_clear_error();
        int n = SSL_read(c->ssl, into, len > INT32_MAX ? INT32_MAX : (int)len);
        if (n > 0) {
            return n;
        }
        int e = SSL_get_error(c->ssl, n);
        return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
    }
    ssize_t n = read(c->fd, into, len);
    if (n > 0) {
        return (long)n;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return 0;
    }
    return -1;
}

/* How many more bytes c->in may take now. Before login, input and output queued together
 * stay within prelogin_bytes_max (IMAP's framing refuses a command that cannot fit, and
 * queued output drains only if the client reads: then reading goes on); while a job is in
 * flight or the output is full, a line and a chunk. */
static size_t conn_input_room(const struct conn *c)
{
    size_t cap = SIZE_MAX, held = c->in.len;
    if (conn_prelogin(c)) {
        cap = g_config.prelogin_bytes_max;
        held += c->out.len;
    } else if (c->busy || c->out.len >= conn_output_max(c)) {
        /* not line_max: only the framing, which runs between jobs, charges a longer line to
         * literal_total_max (CONFIG_LINE_FREE) */
        cap = (g_config.line_max < CONFIG_LINE_FREE ? g_config.line_max : CONFIG_LINE_FREE) +
              CONN_READ_CHUNK;
    }
    return held >= cap ? 0 : cap - held;
}

/* Drains the socket into c->in (up to conn_input_room). -1 if the peer is gone. Reads go
 * through a fixed buffer so that c->in grows by what arrived, not by a chunk per read (a
 * thousand connections that sent a byte each hold a thousand bytes, not 64 MiB). A
 * connection that is closing takes no more input: what it sends is read and dropped. */
static int conn_read(struct conn *c)
{
    static char chunk[CONN_READ_CHUNK]; /* loop thread only */
    for (;;) {
        size_t room = c->closing ? sizeof chunk : conn_input_room(c);
        if (room == 0) {
            c->read_paused = 1; /* resumed by conn_process() or conn_resume() */
            return 0;
        }
        long n = conn_read_some(c, chunk, room < sizeof chunk ? room : sizeof chunk);
        if (n == 0) {
            return 0;
        }
        if (n < 0) {
            return -1;
        }
        c->bytes_in += (uint64_t)n;
        c->last_active_ms = loop_now_ms();
        if (c->closing) {
            continue;
        }
        buf_add(&c->in, chunk, (size_t)n);
        if (c->in.oom) {
            return -1;
        }
    }
}

void conn_flush(struct conn *c)
{
    while (!c->dead && c->out.len > 0) {
        long n;
        size_t len = c->out.len > INT32_MAX ? INT32_MAX : c->out.len;
        if (c->ssl != NULL) {
            ERR_clear_error();
            int w = SSL_write(c->ssl, c->out.data, (int)len);
            if (w <= 0) {
                int e = SSL_get_error(c->ssl, w);
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
                    break; /* the socket is full: a stream may still go on (below) */
                }
                conn_close_now(c, "TLS write failed");
                return;
            }
            n = w;
        } else {
            ssize_t w = send(c->fd, c->out.data, len, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                    break; /* the socket is full: a stream may still go on (below) */
                }
                conn_close_now(c, "write failed");
                return;
            }
            n = (long)w;
        }
        buf_consume(&c->out, (size_t)n);
        c->bytes_out += (uint64_t)n;
        if (c->stream_wait) {
            c->last_active_ms = loop_now_ms(); /* a slow reader is not idle */
        }
    }
    if (!c->dead && c->out.len == 0 && c->out.cap > CONN_OUTPUT_KEEP_MAX) {
        buf_free(&c->out);
    }
    if (!c->dead && c->stream_wait && c->out.len < CONN_STREAM_RESUME_BELOW &&
        c->ops->drained != NULL) {
        c->ops->drained(c); /* posts the next chunk: c stays busy */
    }
    if (!c->dead && c->closing && c->out.len == 0 && !c->busy) {
        conn_close_now(c, "closed");
    }
}

void conn_stream_continue(struct conn *c)
{
    c->stream_wait = 1;
    if (!c->dead && c->out.len < CONN_STREAM_RESUME_BELOW && c->ops->drained != NULL) {
        c->ops->drained(c); /* posts the next chunk: c stays busy */
    }
    conn_flush(c);
}

struct conn *conn_next(const struct conn *c)
{
    return c == NULL ? conn_list : c->next;
}

void conn_close(struct conn *c, const char *why)
{
    conn_close_now(c, why);
}

void conn_write(struct conn *c, const void *data, size_t len)
{
    if (c->dead) {
        return;
    }
    buf_add(&c->out, data, len);
    if (c->out.oom) {
        conn_close_now(c, "out of memory");
    }
}

void conn_write_buf(struct conn *c, struct buf *b)
{
    if (c->dead || c->out.len > 0 || b->oom) {
        conn_write(c, b->data, b->len);
    } else {
        struct buf old = c->out;
        c->out = *b;
        *b = old;
    }
    b->len = 0;
    if (b->data != NULL) {
        b->data[0] = '\0';
    }
}

void conn_write_str(struct conn *c, const char *s)
{
    conn_write(c, s, strlen(s));
}

void conn_close_after_output(struct conn *c)
{
    c->closing = 1;
}

int conn_start_tls(struct conn *c)
{
    if (c->ssl != NULL || !tls_available()) {
        return -1;
    }
    conn_flush(c);
    if (c->dead || c->out.len != 0) {
        return -1; /* the OK must be on the wire before the handshake */
    }
    c->ssl = tls_new(c->fd);
    if (c->ssl == NULL) {
        return -1;
    }
    c->tls = 1;
    buf_consume(&c->in, c->in.len); /* nothing sent in plaintext survives (the protocol
                                       forgets what it had framed of it) */
    return 0;
}

/* Writes, then handles input, as long as that makes progress. The protocols stop taking
 * commands while CONFIG_OUTPUT_MAX bytes wait to be written (a client that pipelines
 * commands without reading the answers gets back-pressure, not our memory). */
static void conn_process(struct conn *c)
{
    while (!c->dead) {
        conn_flush(c);
        if (c->dead || c->busy) {
            return;
        }
        /* Reading stopped on a full input buffer (before login) and commands have made room
         * since: no new edge will come for what the socket still holds. */
        if (c->read_paused && conn_input_room(c) > 0) {
            c->read_paused = 0;
            if (conn_read(c) != 0) {
                c->read_eof = 1; /* closed by the caller, after what came before */
            }
        }
        size_t in_before = c->in.len, out_before = c->out.len;
        c->ops->input(c);
        if (!c->dead && c->in.len == 0 && c->in.cap > CONN_OUTPUT_KEEP_MAX) {
            buf_free(&c->in); /* a big command (APPEND) left it grown */
        }
        if (!c->dead && c->in.len == in_before && c->out.len == out_before) {
            conn_flush(c);
            return;
        }
    }
}

static void conn_event(void *arg, uint32_t events)
{
    struct conn *c = arg;
    if (c->dead) {
        return;
    }
    c->refs++;    /* a close inside must not free c under us */
    (void)events; /* edge-triggered: always drain (reading may have paused on a cap) */
    c->read_paused = 0;
    if (conn_read(c) != 0) {
        c->read_eof = 1;
    }
    /* Process what came before the end (a pipelined LOGOUT), then close. */
    conn_process(c);
    if (c->read_eof) {
        conn_close_now(c, "peer closed");
    }
    conn_release(c);
}

void conn_shutdown_all(void)
{
    while (conn_list != NULL) {
        struct conn *c = conn_list;
        c->refs++;
        if (!c->job_writes) {
            conn_write_str(c, c->ops->bye_shutdown);
            conn_flush(c);
        }
        conn_close_now(c, "server shutdown");
        conn_release(c);
    }
}

void conn_resume(struct conn *c)
{
    if (c->dead) {
        return;
    }
    c->busy = 0;
    if (c->hold_until_ms != 0) {
        c->busy = 1; /* output held: resumes in conn_tick */
        return;
    }
    c->read_paused = 0;
    if (conn_read(c) != 0) {
        c->read_eof = 1;
    }
    conn_process(c);
    if (c->read_eof) {
        conn_close_now(c, "peer closed");
    }
}

void conn_hold(struct conn *c, int delay_ms)
{
    /* What is queued now goes out after the delay; the session stays busy until then. */
    buf_add(&c->held, c->out.data, c->out.len);
    buf_consume(&c->out, c->out.len);
    c->hold_until_ms = loop_now_ms() + delay_ms;
    c->busy = 1;
}

void conn_tick(int64_t now_ms)
{
    for (struct conn *c = conn_list, *next; c != NULL; c = next) {
        next = c->next;
        if (c->hold_until_ms != 0 && now_ms >= c->hold_until_ms) {
            c->hold_until_ms = 0;
            conn_write(c, c->held.data, c->held.len);
            buf_free(&c->held);
            c->refs++;
            conn_resume(c);
            conn_release(c);
            continue;
        }
        if (c->ops->tick != NULL && !c->busy) {
            c->refs++;
            c->ops->tick(c, now_ms);
            int dead = c->dead;
            conn_release(c); /* may free c if it died */
            if (dead) {
                continue;
            }
        }
        /* The whole login phase has a deadline of its own: a client that trickles a byte a
         * second is never idle, and would hold its connection slot for ever. A login job in
         * flight (or a failed login's held answer) is let finish first. */
        if (!c->busy && !c->closing && conn_prelogin(c) &&
            now_ms - c->connected_ms > (int64_t)g_config.login_timeout_s * 1000) {
            c->refs++;
            conn_write_str(c, c->ops->bye_login_timeout);
            conn_flush(c);
            conn_close_now(c, "login timeout");
            conn_release(c);
            continue;
        }
        if ((!c->busy || c->stream_wait) && now_ms - c->last_active_ms > conn_idle_timeout_ms(c)) {
            c->refs++;
            conn_write_str(c, c->ops->bye_idle_timeout);
            c->closing = 1;
            conn_flush(c);
            conn_close_now(c, "idle timeout");
            conn_release(c);
        }
    }
}

/* "a.b.c.d:port" or "[v6]:port", the address alone, and whether it is loopback. */
static void conn_describe(struct conn *c, const struct sockaddr_storage *sa)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
        c->loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        snprintf(c->peer, sizeof c->peer, "%s:%u", host, port);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        port = ntohs(in6->sin6_port);
        c->loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        snprintf(c->peer, sizeof c->peer, "[%s]:%u", host, port);
    } else if (sa->ss_family == AF_UNIX) {
        /* A local socket (the control socket): the peer's account is what identifies it. */
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
            snprintf(c->peer, sizeof c->peer, "local uid %u pid %d", (unsigned)cred.uid,
                     (int)cred.pid);
        } else {
            snprintf(c->peer, sizeof c->peer, "local");
        }
        snprintf(host, sizeof host, "local");
    } else {
        snprintf(c->peer, sizeof c->peer, "unknown");
    }
    snprintf(c->peer_addr, sizeof c->peer_addr, "%s", host);
}

/* Connections of ops (its pool) and, if addr is not NULL, how many of them are from addr
 * into *from_addr (each protocol has its own per-address count). */
static int conn_count_of(const struct conn_proto_ops *ops, const char *addr, int *from_addr)
{
    int n = 0, from = 0;
    for (struct conn *c = conn_list; c != NULL; c = c->next) {
        if (c->ops == ops) {
            n++;
            from += addr != NULL && strcmp(c->peer_addr, addr) == 0;
        }
    }
    if (from_addr != NULL) {
        *from_addr = from;
    }
    return n;
}

int conn_set_client(struct conn *c, const char *addr, unsigned port, const char *session_id)
{
    if (c->via[0] == '\0') {
        snprintf(c->via, sizeof c->via, "%.63s", c->peer);
    }
    /* The proxy's own connection counted against its address until now; from here it counts
     * against the client's (conn_count_of walks the connections, this one included). */
    int from_addr = 0;
    (void)conn_count_of(c->ops, addr, &from_addr);
    if (c->ops->per_address_limit && strcmp(c->peer_addr, addr) != 0 &&
        from_addr >= g_config.connections_per_address_max) {
        log_warning("refused %s via %s: too many connections from the client's address", addr,
                    c->via);
        metrics_count(METRIC_REFUSED);
        return -1;
    }
    snprintf(c->peer_addr, sizeof c->peer_addr, "%s", addr);
    const char *v6 = strchr(addr, ':') != NULL ? "[" : "";
    snprintf(c->peer, sizeof c->peer, "%s%s%s:%u via %s%s%s", v6, addr, v6[0] != '\0' ? "]" : "",
             port, c->via, session_id != NULL ? " session " : "",
             session_id != NULL ? session_id : "");
    log_info("client %s", c->peer);
    return 0;
}

/* The pool of ops is full: closes its connection that has waited longest without logging
 * in and has no login in flight, to make room for a new one (so clients that never log in cannot
 * keep out one that does: each new connection pushes out the oldest of them, which gets
 * login_timeout_s at most anyway). One whose failed login's answer is being held back
 * counts as waiting (else failing logins slowly would keep a connection safe). 0 if one was
 * closed, -1 if every one is logged in or has a login in flight. */
static int conn_evict_prelogin(const struct conn_proto_ops *ops)
{
    if (ops->prelogin == NULL) {
        return -1; /* no login phase: nothing to push out */
    }
    struct conn *oldest = NULL;
    for (struct conn *c = conn_list; c != NULL; c = c->next) {
        if (c->ops == ops && ops->prelogin(c) && (!c->busy || c->hold_until_ms != 0) &&
            (oldest == NULL || c->connected_ms <= oldest->connected_ms)) {
            oldest = c;
        }
    }
    if (oldest == NULL) {
        return -1;
    }
    oldest->refs++;
    conn_write_str(oldest, ops->bye_evicted);
    conn_flush(oldest);
    conn_close_now(oldest, "too many connections: the oldest not logged in");
    conn_release(oldest);
    return 0;
}

void conn_accept(int listen_fd, const struct conn_proto_ops *ops, int implicit_tls)
{
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sa_len = sizeof sa;
        int fd = accept4(listen_fd, (struct sockaddr *)&sa, &sa_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                log_error("accept failed: errno %d", errno);
            }
            return;
        }
        struct conn *c = calloc(1, sizeof *c);
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->ops = ops;
        c->last_active_ms = loop_now_ms();
        c->connected_ms = c->last_active_ms;
        conn_describe(c, &sa);
        c->trusted = proxy_trusted(&sa);
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        const char *refuse = NULL;
        /* A pool per protocol (ops->connections_max) and a per-address count within each,
         * so the clients of one protocol cannot take another's slots (IMAP's the local MTA's).
         * A trusted proxy's connections count against the client each names (ID, XCLIENT:
         * conn_set_client), not against the proxy: it may open many before naming any. The
         * pool still bounds them. */
        int from_addr = 0;
        int pool = conn_count_of(ops, c->peer_addr, &from_addr);
        if (ops->per_address_limit && !c->trusted &&
            from_addr >= g_config.connections_per_address_max) {
            refuse = "too many connections from your address";
        } else if (pool >= ops->connections_max() && conn_evict_prelogin(ops) != 0) {
            refuse = "too many connections";
        }
        if (refuse != NULL) {
            char line[128];
            int n = snprintf(line, sizeof line, "%s%s\r\n", ops->refuse_prefix, refuse);
            if (!implicit_tls) {
                (void)send(fd, line, (size_t)n, MSG_NOSIGNAL);
            }
            log_warning("refused %s: %s", c->peer, refuse);
            metrics_count(METRIC_REFUSED);
            close(fd);
            free(c);
            continue;
        }
        if (implicit_tls) {
            c->ssl = tls_new(fd);
            c->tls = 1;
            if (c->ssl == NULL) {
                close(fd);
                free(c);
                continue;
            }
        }
        c->handler.fn = conn_event;
        c->handler.arg = c;
        if (loop_add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, &c->handler) != 0) {
            SSL_free(c->ssl);
            close(fd);
            free(c);
            continue;
        }
        c->next = conn_list;
        if (conn_list != NULL) {
            conn_list->prev = c;
        }
        conn_list = c;
        conn_total++;
        c->implicit_tls = implicit_tls;
        metrics_connection(implicit_tls ? ops->metric_gauge_tls : ops->metric_gauge, +1);
        log_info("connect %s %s%s", c->peer, ops->name, implicit_tls ? " tls" : "");
        ops->start(c);
        conn_flush(c);
    }
}
