/*
 * conn.c -- connections: accept with the connection limits, non-blocking reads and writes
 * (plain or TLS), idle timeouts, held output, and IMAP's framing of a command out of lines
 * and literals with the line and literal limits.
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
 *     a session in IDLE gets four times idle_timeout_s.
 *   - A response made in chunks (FETCH, see docs/IMAPD.md "Streaming FETCH") keeps the
 *     connection busy with stream_wait set; once conn_flush() has written all but
 *     CONN_STREAM_RESUME_BELOW bytes it calls imap_session_drained() for the next chunk.
 *     Bytes taken by the socket count as activity then, so only a reader that stops
 *     reading times out. An output buffer grown past CONN_OUTPUT_KEEP_MAX is freed once
 *     empty.
 */
#include "conn_frame.h"
#include "imapd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONN_READ_CHUNK 65536

static struct conn *conn_list;
static int conn_total;      /* every connection (conn_count) */
static int conn_total_lmtp; /* of which LMTP: lmtp_connections_max, apart from IMAP's pool */
/* IMAP literal bytes accepted for commands still being received, all connections
 * (literal_total_max); each connection's share is its literal_reserved. */
static uint64_t conn_literal_total;

int conn_count(void)
{
    return conn_total;
}

size_t conn_output_max(const struct conn *c)
{
    return c->proto == PROTO_IMAP && !c->authenticated ? g_config.prelogin_bytes_max / 2
                                                       : CONFIG_OUTPUT_MAX;
}

/* Gives back the literal bytes the connection's command in progress held. */
static void conn_literal_release(struct conn *c)
{
    conn_literal_total -= c->literal_reserved;
    c->literal_reserved = 0;
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
    metrics_connection(c->proto, c->implicit_tls, -1);
    if (c->ssl != NULL && !SSL_is_init_finished(c->ssl)) {
        metrics_count(METRIC_TLS_FAILED); /* failed, or abandoned half-way */
    }
    loop_del(c->fd, &c->handler);
    if (c->ssl != NULL) {
        SSL_free(c->ssl);
        c->ssl = NULL;
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
    conn_total_lmtp -= c->proto == PROTO_LMTP;
    conn_literal_release(c);
    c->refs++;
    if (c->proto == PROTO_IMAP) {
        imap_session_end(c);
    } else {
        lmtp_session_end(c);
    }
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
 * stay within prelogin_bytes_max (conn_frame_imap refuses a command that cannot fit, and
 * queued output drains only if the client reads: then reading goes on); while a job is in
 * flight or the output is full, a line and a chunk. */
static size_t conn_input_room(const struct conn *c)
{
    size_t cap = SIZE_MAX, held = c->in.len;
    if (c->proto == PROTO_IMAP && !c->authenticated) {
        cap = g_config.prelogin_bytes_max;
        held += c->out.len;
    } else if (c->busy || c->out.len >= conn_output_max(c)) {
        cap = g_config.line_max + CONN_READ_CHUNK;
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
                    return;
                }
                conn_close_now(c, "TLS write failed");
                return;
            }
            n = w;
        } else {
            ssize_t w = send(c->fd, c->out.data, len, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                    return;
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
    if (!c->dead && c->stream_wait && c->out.len < CONN_STREAM_RESUME_BELOW) {
        imap_session_drained(c); /* posts the next chunk: c stays busy */
    }
    if (!c->dead && c->closing && c->out.len == 0 && !c->busy) {
        conn_close_now(c, "closed");
    }
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
    buf_consume(&c->in, c->in.len); /* nothing sent in plaintext survives */
    conn_frame_reset(c);
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
        if (c->proto == PROTO_IMAP) {
            imap_session_input(c);
        } else {
            lmtp_session_input(c);
        }
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
        conn_write_str(c, c->proto == PROTO_IMAP ? "* BYE server shutting down\r\n"
                                                 : "421 4.3.2 server shutting down\r\n");
        conn_flush(c);
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
    int64_t idle_ms = (int64_t)g_config.idle_timeout_s * 1000;
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
        if (c->proto == PROTO_IMAP && !c->busy) {
            c->refs++;
            imap_session_tick(c, now_ms);
            int dead = c->dead;
            conn_release(c); /* may free c if it died */
            if (dead) {
                continue;
            }
        }
        /* The whole login phase has a deadline of its own: a client that trickles a byte a
         * second is never idle, and would hold its connection slot for ever. A login job in
         * flight (or a failed login's held answer) is let finish first. */
        if (c->proto == PROTO_IMAP && !c->authenticated && !c->busy && !c->closing &&
            now_ms - c->connected_ms > (int64_t)g_config.login_timeout_s * 1000) {
            c->refs++;
            conn_write_str(c, "* BYE login timeout\r\n");
            conn_flush(c);
            conn_close_now(c, "login timeout");
            conn_release(c);
            continue;
        }
        if (c->proto == PROTO_LMTP && !c->busy) {
            c->refs++;
            lmtp_session_tick(c, now_ms);
            int dead = c->dead;
            conn_release(c); /* may free c if it died */
            if (dead) {
                continue;
            }
        }
        if ((!c->busy || c->stream_wait) &&
            now_ms - c->last_active_ms > (c->in_idle ? 4 * idle_ms : idle_ms)) {
            c->refs++;
            conn_write_str(c, c->proto == PROTO_IMAP ? "* BYE idle timeout\r\n"
                                                     : "421 4.4.2 idle timeout\r\n");
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
    } else {
        snprintf(c->peer, sizeof c->peer, "unknown");
    }
    snprintf(c->peer_addr, sizeof c->peer_addr, "%s", host);
}

/* Connections of proto from addr (each protocol has its own per-address count). */
static int conn_count_from(const char *addr, enum conn_proto proto)
{
    int n = 0;
    for (struct conn *c = conn_list; c != NULL; c = c->next) {
        n += c->proto == proto && strcmp(c->peer_addr, addr) == 0;
    }
    return n;
}

int conn_set_client(struct conn *c, const char *addr, unsigned port, const char *session_id)
{
    if (c->via[0] == '\0') {
        snprintf(c->via, sizeof c->via, "%.63s", c->peer);
    }
    /* The proxy's own connection counted against its address until now; from here it counts
     * against the client's (conn_count_from walks the connections, this one included). */
    if (strcmp(c->peer_addr, addr) != 0 &&
        conn_count_from(addr, c->proto) >= g_config.connections_per_address_max) {
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

/* IMAP is full: closes the IMAP connection that has waited longest without logging in and
 * has no login in flight, to make room for a new one (so clients that never log in cannot
 * keep out one that does: each new connection pushes out the oldest of them, which gets
 * login_timeout_s at most anyway). One whose failed login's answer is being held back
 * counts as waiting (else failing logins slowly would keep a connection safe). 0 if one was
 * closed, -1 if every one is logged in or has a login in flight. */
static int conn_evict_prelogin(void)
{
    struct conn *oldest = NULL;
    for (struct conn *c = conn_list; c != NULL; c = c->next) {
        if (c->proto == PROTO_IMAP && !c->authenticated && (!c->busy || c->hold_until_ms != 0) &&
            (oldest == NULL || c->connected_ms <= oldest->connected_ms)) {
            oldest = c;
        }
    }
    if (oldest == NULL) {
        return -1;
    }
    oldest->refs++;
    conn_write_str(oldest, "* BYE too many connections: closing the oldest not logged in\r\n");
    conn_flush(oldest);
    conn_close_now(oldest, "too many connections: the oldest not logged in");
    conn_release(oldest);
    return 0;
}

void conn_accept(int listen_fd, enum conn_proto proto, int implicit_tls)
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
        c->proto = proto;
        c->last_active_ms = loop_now_ms();
        c->connected_ms = c->last_active_ms;
        conn_describe(c, &sa);
        c->trusted = proxy_trusted(&sa);
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        const char *refuse = NULL;
        /* Two pools: IMAP's connections_max and LMTP's lmtp_connections_max, and a
         * per-address count within each, so IMAP clients cannot take the local MTA's slots. */
        /* A trusted proxy's connections count against the client each names (ID, XCLIENT:
         * conn_set_client), not against the proxy: it may open many before naming any.
         * connections_max and lmtp_connections_max still bound them. */
        if (!c->trusted &&
            conn_count_from(c->peer_addr, proto) >= g_config.connections_per_address_max) {
            refuse = "too many connections from your address";
        } else if (proto == PROTO_LMTP ? conn_total_lmtp >= g_config.lmtp_connections_max
                                       : conn_total - conn_total_lmtp >= g_config.connections_max &&
                                             conn_evict_prelogin() != 0) {
            refuse = "too many connections";
        }
        if (refuse != NULL) {
            char line[128];
            int n = snprintf(line, sizeof line,
                             proto == PROTO_IMAP ? "* BYE %s\r\n" : "421 4.7.0 %s\r\n", refuse);
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
        conn_total_lmtp += proto == PROTO_LMTP;
        c->implicit_tls = implicit_tls;
        metrics_connection(proto, implicit_tls, +1);
        log_info("connect %s %s%s", c->peer, proto == PROTO_IMAP ? "imap" : "lmtp",
                 implicit_tls ? " tls" : "");
        if (proto == PROTO_IMAP) {
            imap_session_start(c);
        } else {
            lmtp_session_start(c);
        }
        conn_flush(c);
    }
}

/* ---- IMAP framing ---------------------------------------------------------------------- */

/* The literal count at the end of a line ("... {12}" or "{12+}", before CRLF), or -1. */
static int conn_literal_at_end(const char *line, size_t len, uint64_t *count, int *plus)
{
    if (len > 0 && line[len - 1] == '\r') {
        len--;
    }
    if (len < 3 || line[len - 1] != '}') {
        return -1;
    }
    size_t end = len - 1;
    *plus = line[end - 1] == '+';
    if (*plus) {
        end--;
    }
    size_t start = end;
    while (start > 0 && line[start - 1] >= '0' && line[start - 1] <= '9') {
        start--;
    }
    if (start == end || start == 0 || line[start - 1] != '{' || end - start > 19) {
        return -1;
    }
    uint64_t n = 0;
    for (size_t i = start; i < end; i++) {
        n = n * 10 + (uint64_t)(line[i] - '0');
    }
    *count = n;
    return 0;
}

/* Whether the command whose first line starts at p is an APPEND (its literal may be big). */
static int conn_is_append(const char *p, size_t len)
{
    const char *sp = memchr(p, ' ', len);
    if (sp == NULL) {
        return 0;
    }
    size_t rest = len - (size_t)(sp + 1 - p);
    return rest >= 7 && strncasecmp(sp + 1, "APPEND ", 7) == 0;
}

/* Before login one command, its lines and literals together, and the input held must fit
 * in prelogin_bytes_max (64 KiB by default: AUTHENTICATE PLAIN needs a line); after it the
 * line_max, literal_max and literal_total_max limits apply. Checked when a literal is
 * announced, so nothing over the bound is ever asked for ("+") or buffered. */
enum conn_frame conn_frame_imap(struct conn *c, size_t *len_out, uint64_t *literal_out)
{
    int pre = !c->authenticated;
    size_t line_max = g_config.line_max;
    if (pre && g_config.prelogin_bytes_max < line_max) {
        line_max = g_config.prelogin_bytes_max;
    }
    for (;;) {
        if (c->literal_left > 0) {
            uint64_t have = c->in.len - c->frame_at;
            if (have < c->literal_left) {
                return FRAME_MORE;
            }
            c->frame_at += (size_t)c->literal_left;
            c->literal_left = 0;
        }
        char *start = c->in.data + c->frame_at;
        size_t avail = c->in.len - c->frame_at;
        char *nl = avail > 0 ? memchr(start, '\n', avail) : NULL;
        if (c->discard_line) {
            if (nl == NULL) {
                buf_consume(&c->in, c->in.len);
                c->frame_at = 0;
                return FRAME_MORE;
            }
            buf_consume(&c->in, (size_t)(nl + 1 - c->in.data));
            c->frame_at = 0;
            c->discard_line = 0;
            continue;
        }
        if (nl == NULL) {
            /* Before login the input is capped at prelogin_bytes_max (conn_read): a command
             * not complete by then never will be. */
            if (avail > line_max || (pre && c->in.len >= g_config.prelogin_bytes_max)) {
                c->discard_line = 1;
                return FRAME_LINE_TOO_LONG;
            }
            return FRAME_MORE;
        }
        size_t line_len = (size_t)(nl - start);
        if (line_len > line_max) {
            buf_consume(&c->in, (size_t)(nl + 1 - c->in.data));
            c->frame_at = 0;
            return FRAME_LINE_TOO_LONG;
        }
        uint64_t count;
        int plus;
        if (c->raw_line || conn_literal_at_end(start, line_len, &count, &plus) != 0) {
            *len_out = (size_t)(nl + 1 - c->in.data);
            c->frame_at = 0;
            conn_literal_release(c); /* the command is whole: its bytes go to a job */
            return FRAME_COMMAND;
        }
        uint64_t max =
            conn_is_append(c->in.data, c->in.len) ? g_config.literal_max : CONFIG_SMALL_LITERAL_MAX;
        uint64_t end = (uint64_t)(nl + 1 - c->in.data) + count; /* the command up to here */
        *literal_out = count;
        if (pre ? end > g_config.prelogin_bytes_max
                : count > max || c->frame_at + count > max + g_config.line_max * 4) {
            conn_literal_release(c);
            if (plus) {
                return FRAME_LITERAL_PLUS_TOO_BIG;
            }
            *len_out = (size_t)(nl + 1 - c->in.data);
            c->frame_at = 0;
            return FRAME_LITERAL_TOO_BIG;
        }
        /* The server-wide budget: refused only while other commands hold some of it, so one
         * command within literal_max always gets through. A transient refusal. */
        if (conn_literal_total > c->literal_reserved &&
            conn_literal_total + count > g_config.literal_total_max) {
            conn_literal_release(c);
            if (plus) {
                return FRAME_LITERAL_PLUS_BUSY;
            }
            *len_out = (size_t)(nl + 1 - c->in.data);
            c->frame_at = 0;
            return FRAME_LITERAL_BUSY;
        }
        c->literal_reserved += count;
        conn_literal_total += count;
        c->frame_at = (size_t)(nl + 1 - c->in.data);
        c->literal_left = count;
        if (!plus && count > 0 && c->in.len - c->frame_at < count) {
            return FRAME_CONTINUE;
        }
    }
}

void conn_frame_reset(struct conn *c)
{
    c->frame_at = 0;
    c->literal_left = 0;
    conn_literal_release(c);
}
