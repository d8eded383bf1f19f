/*
 * bench_imap.c -- an IMAP load generator: N client connections drive one IMAP server with a
 * fixed, weighted mix of commands for T seconds and report commands per second and
 * per-command latency. bench/imap_compare.sh runs it against mailvaultd and Dovecot in turn,
 * with the same users, the same messages and the same mix.
 *
 * USAGE
 *   BENCH_IMAP_PASSWORD=... build/rel/bench/bench_imap --port P [--host 127.0.0.1]
 *       [--clients C] [--users U] [--seconds T] [--messages M] [--user-prefix u]
 *       [--domain bench.example] [--password-file PATH] [--label NAME] [--seed S]
 *       [--populate-only] [--quick] [--json PATH]
 *     --clients C         connections, one thread each (default 10, at most 1000)
 *     --users U           users u1@DOMAIN .. uU@DOMAIN (default: C); client i logs in as
 *                         user (i mod U) + 1, so with U < C users are shared by sessions
 *     --messages M        each user's INBOX is filled up to M messages before the timed run
 *                         (default 500); already there: nothing is appended
 *     --seconds T         length of the timed mix (default 30)
 *     --password-file F   the users' password (one for all; a trailing newline is dropped);
 *                         else $BENCH_IMAP_PASSWORD. Never on the command line.
 *     --label NAME        the server's name in the output (default "server")
 *     --populate-only     fill the mailboxes, then stop
 *     --quick             defaults for a smoke run: 5 s, 100 messages
 *     --json PATH         write the figures as JSON ("schema": "mailvault-bench-imap/1")
 *
 * WHAT A CLIENT DOES
 *   1. Populate (untimed, one connection per user, users in parallel): LOGIN, SELECT INBOX,
 *      APPEND the generated messages number EXISTS .. M-1 of that user (fixed seed: every
 *      server gets the same bytes; 2-50 KB, a fifth multipart with a base64 attachment,
 *      seven in ten \Seen), LOGOUT.
 *   2. Connect, CAPABILITY, LOGIN (timed: "login"), SELECT INBOX (timed: "select"),
 *      UID SEARCH ALL (the UIDs it picks from). All clients then start together.
 *   3. Until T seconds are over, one operation at a time, drawn with these weights:
 *        fetch_headers 25  UID FETCH a:b (UID BODY.PEEK[HEADER.FIELDS (From Subject Date)])
 *                          over 50 consecutive UIDs
 *        fetch_body    20  UID FETCH u (UID BODY.PEEK[]) of one message
 *        search        15  UID SEARCH FROM name / SUBJECT word / UNSEEN, in turn
 *        store         15  UID STORE u +FLAGS (\Seen) or -FLAGS (\Seen), half each
 *        append        10  APPEND INBOX of a new generated message (LITERAL+ if offered)
 *        expunge       10  UID STORE u +FLAGS.SILENT (\Deleted), then UID EXPUNGE u, of a
 *                          message this client appended (two commands, timed together);
 *                          an append instead when it has none left
 *        noop           5  NOOP
 *      so appends and expunges balance and the mailbox stays near M messages.
 *   4. LOGOUT.
 *
 * OUTPUT
 *   A table: per operation its count, operations/s, IMAP commands, p50/p99/max ms, errors
 *   (tagged NO/BAD); the total commands/s; LOGIN and SELECT latency. With --json the same
 *   as one JSON document. Exit status 1 if a connection failed or any command was refused.
 *
 * IMPLEMENTATION NOTES
 *   - Plain IMAP over TCP, TCP_NODELAY, blocking sockets, one thread per connection: the
 *     client side costs the same for every server it drives.
 *   - Responses are read line by line; literals ({n}) are read and dropped (only their size
 *     is counted); the tagged line ends a command. APPENDUID (UIDPLUS) gives the UID of an
 *     appended message; without it the client does no expunges of its own.
 *   - Latency is from the first byte sent to the tagged response, nearest-rank quantiles
 *     over every operation of every client.
 *
 * LIMITATIONS
 *   The generator runs on the same machine as the server, so with many clients it competes
 *   with the server for the CPU (for both servers alike). No TLS, no IDLE, one mailbox.
 */
#include "buf.h"
#include "util.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define IMAP_CLIENTS_MAX       1000
#define IMAP_PASSWORD_BYTES    256
#define IMAP_NAME_BYTES        128
#define IMAP_IN_CHUNK_BYTES    65536
#define IMAP_HEADER_FETCH_UIDS 50
#define IMAP_SEED_DEFAULT      20261130u

enum imap_kind {
    IMAP_FETCH_HEADERS,
    IMAP_FETCH_BODY,
    IMAP_SEARCH,
    IMAP_STORE,
    IMAP_APPEND,
    IMAP_EXPUNGE,
    IMAP_NOOP,
    IMAP_KINDS,
    IMAP_LOGIN = IMAP_KINDS, /* outside the mix: timed once per client */
    IMAP_SELECT,
    IMAP_SAMPLE_SETS
};

static const char *const imap_kind_names[IMAP_SAMPLE_SETS] = {
    "fetch_headers", "fetch_body", "search", "store", "append",
    "expunge",       "noop",       "login",  "select"};
static const unsigned imap_kind_weights[IMAP_KINDS] = {25, 20, 15, 15, 10, 10, 5};

struct imap_options {
    const char *host, *label, *json_path, *user_prefix, *domain;
    long port, clients, users, messages;
    double seconds;
    uint64_t seed;
    int populate_only;
    char password[IMAP_PASSWORD_BYTES];
};

/* Latencies in ms of one kind, grown as needed. */
struct imap_samples {
    double *ms;
    size_t count, cap;
    long commands, errors;
};

/* One connection and what its reader has buffered. */
struct imap_conn {
    int fd;
    unsigned tag;
    int literal_plus, uidplus;
    char *in;
    size_t in_start, in_end, in_cap;
    struct bench_buf line; /* the logical line being read, literals left out */
    struct bench_buf out;
};

/* What one response carried that the client uses. */
struct imap_reply {
    int ok;              /* tagged OK */
    long exists;         /* last "* n EXISTS", -1 if none */
    uint32_t append_uid; /* from [APPENDUID v u], 0 if none */
    uint32_t *search;    /* "* SEARCH" UIDs when search_want */
    size_t search_count, search_cap;
    int search_want;
};

struct imap_client {
    const struct imap_options *opt;
    long index, user;
    pthread_t thread;
    struct bench_rng rng;
    struct imap_samples samples[IMAP_SAMPLE_SETS];
    long appended; /* populate: messages appended */
    int failed;    /* the connection broke, or login/select failed */
    char failure[160];
};

static pthread_barrier_t imap_start_barrier;
static double imap_deadline_s;

int main(int argc, char **argv);

/* ---- message generation --------------------------------------------------------------- */

static const char *const imap_first_names[] = {"Anna",  "Ben",  "Clara", "David", "Elena", "Farid",
                                               "Greta", "Hugo", "Ines",  "Jon",   "Kira",  "Lars",
                                               "Maya",  "Nils", "Olga",  "Pavel"};
static const char *const imap_last_names[] = {"Berg",    "Costa",    "Dubois", "Eriksen",
                                              "Fischer", "Garcia",   "Hansen", "Ivanova",
                                              "Jensen",  "Kowalski", "Larsen", "Moreau"};
static const char *const imap_domains[] = {"example.com", "example.net", "mail.example.org",
                                           "corp.example", "lists.example.edu"};
static const char *const imap_words[] = {
    "invoice",  "meeting", "report",   "quarterly", "budget",   "review",   "project",
    "deadline", "update",  "schedule", "contract",  "proposal", "travel",   "server",
    "release",  "backup",  "customer", "payment",   "order",    "shipping", "team",
    "agenda",   "notes",   "draft",    "summary",   "question", "answer",   "plan",
    "the",      "and",     "for",      "with",      "this",     "that",     "from",
    "please",   "thanks",  "regards",  "tomorrow",  "today",    "week",     "office"};
#define IMAP_COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *imap_pick(struct bench_rng *r, const char *const *list, size_t count)
{
    return list[bench_rng_below(r, (uint32_t)count)];
}

static void imap_put_words(struct bench_buf *b, struct bench_rng *r, size_t bytes)
{
    size_t start = b->len, line = 0;
    while (b->len - start < bytes) {
        const char *w = imap_pick(r, imap_words, IMAP_COUNT(imap_words));
        size_t n = strlen(w);
        if (line + n + 1 > 72) {
            bench_buf_put(b, "\r\n", 2);
            line = 0;
        } else if (line > 0) {
            bench_buf_put(b, " ", 1);
            line++;
        }
        bench_buf_put(b, w, n);
        line += n;
    }
    bench_buf_put(b, "\r\n", 2);
}

static void imap_put_base64(struct bench_buf *b, struct bench_rng *r, size_t bytes)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t done = 0; done < bytes; done += 77) {
        char line[78];
        for (size_t i = 0; i < 76; i++) {
            line[i] = alphabet[bench_rng_next(r) >> 58];
        }
        line[76] = '\r';
        line[77] = '\n';
        bench_buf_put(b, line, sizeof line);
    }
}

/* Message number `number` of user `user` (or, for number >= 1 << 30, a new one appended
 * during the run), CRLF line ends, 2-50 KB. */
static void imap_message_make(struct bench_buf *b, uint64_t seed, long user, uint64_t number)
{
    struct bench_rng r = bench_rng_seeded(bench_rng_mix(seed ^ ((uint64_t)user << 40) ^ number));
    double u = bench_rng_unit(&r);
    size_t size_bytes = 2048 + (size_t)(u * u * 48.0 * 1024.0);
    const char *first = imap_pick(&r, imap_first_names, IMAP_COUNT(imap_first_names));
    const char *last = imap_pick(&r, imap_last_names, IMAP_COUNT(imap_last_names));
    const char *domain = imap_pick(&r, imap_domains, IMAP_COUNT(imap_domains));
    int64_t date = 1767225600 - (int64_t)bench_rng_below(&r, 86400u * 365u);
    int multipart = bench_rng_below(&r, 5) == 0;

    b->len = 0;
    bench_buf_printf(b, "Return-Path: <%s.%s@%s>\r\n", first, last, domain);
    bench_buf_printf(b,
                     "Received: from mx.%s by mail.bench.example with ESMTPS id %016llx;\r\n"
                     "\t",
                     domain, (unsigned long long)bench_rng_next(&r));
    bench_buf_put_date(b, date);
    bench_buf_printf(b, "\r\nFrom: \"%s %s\" <%s.%s@%s>\r\n", first, last, first, last, domain);
    bench_buf_printf(b, "To: user%ld@bench.example\r\nSubject: ", user + 1);
    for (int i = 0; i < 4; i++) {
        bench_buf_printf(b, "%s%s", i > 0 ? " " : "",
                         imap_pick(&r, imap_words, IMAP_COUNT(imap_words)));
    }
    bench_buf_puts(b, "\r\nDate: ");
    bench_buf_put_date(b, date);
    bench_buf_printf(b, "\r\nMessage-ID: <%016llx.%llu@%s>\r\nMIME-Version: 1.0\r\n",
                     (unsigned long long)bench_rng_next(&r), (unsigned long long)number, domain);
    if (!multipart) {
        bench_buf_puts(b, "Content-Type: text/plain; charset=utf-8\r\n\r\n");
        imap_put_words(b, &r, size_bytes > b->len ? size_bytes - b->len : 100);
        return;
    }
    bench_buf_puts(b, "Content-Type: multipart/mixed; boundary=\"=-bench-boundary\"\r\n\r\n"
                      "--=-bench-boundary\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n");
    imap_put_words(b, &r, 600 + bench_rng_below(&r, 1400));
    bench_buf_puts(b, "--=-bench-boundary\r\nContent-Type: application/pdf; name=\"doc.pdf\"\r\n"
                      "Content-Transfer-Encoding: base64\r\n"
                      "Content-Disposition: attachment; filename=\"doc.pdf\"\r\n\r\n");
    imap_put_base64(b, &r, size_bytes > b->len + 200 ? size_bytes - b->len - 200 : 400);
    bench_buf_puts(b, "--=-bench-boundary--\r\n");
}

/* ---- the connection ------------------------------------------------------------------- */

static int imap_connect(struct imap_conn *c, const struct imap_options *opt)
{
    char port[16];
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof port, "%ld", opt->port);
    if (getaddrinfo(opt->host, port, &hints, &res) != 0 || res == NULL) {
        return -1;
    }
    c->fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
    int rc = -1;
    if (c->fd >= 0 && connect(c->fd, res->ai_addr, res->ai_addrlen) == 0) {
        int one = 1;
        (void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        rc = 0;
    }
    freeaddrinfo(res);
    c->in_cap = (size_t)IMAP_IN_CHUNK_BYTES * 2;
    c->in = bench_alloc(c->in_cap);
    return rc;
}

static void imap_close(struct imap_conn *c)
{
    if (c->fd >= 0) {
        close(c->fd);
    }
    c->fd = -1;
    free(c->in);
    c->in = NULL;
    bench_buf_free(&c->line);
    bench_buf_free(&c->out);
}

static int imap_send(struct imap_conn *c, const char *data, size_t size)
{
    while (size > 0) {
        ssize_t n = send(c->fd, data, size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        data += n;
        size -= (size_t)n;
    }
    return 0;
}

/* More bytes into c->in; -1 at end of stream or on an error. */
static int imap_fill(struct imap_conn *c)
{
    if (c->in_start > 0) {
        memmove(c->in, c->in + c->in_start, c->in_end - c->in_start);
        c->in_end -= c->in_start;
        c->in_start = 0;
    }
    if (c->in_cap - c->in_end < IMAP_IN_CHUNK_BYTES) {
        c->in_cap *= 2;
        char *grown = realloc(c->in, c->in_cap);
        if (grown == NULL) {
            bench_die("out of memory");
        }
        c->in = grown;
    }
    ssize_t n;
    do {
        n = recv(c->fd, c->in + c->in_end, c->in_cap - c->in_end, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        return -1;
    }
    c->in_end += (size_t)n;
    return 0;
}

/* Drops `size` literal bytes. */
static int imap_skip(struct imap_conn *c, size_t size)
{
    while (size > 0) {
        if (c->in_start == c->in_end && imap_fill(c) != 0) {
            return -1;
        }
        size_t have = c->in_end - c->in_start;
        size_t take = have < size ? have : size;
        c->in_start += take;
        size -= take;
    }
    return 0;
}

/* The literal size if the text before CRLF, t[0 .. n), ends with "{digits}", else -1. */
static long imap_literal_size(const char *t, size_t n)
{
    if (n < 3 || t[n - 1] != '}') {
        return -1;
    }
    size_t i = n - 1;
    long size = 0, scale = 1;
    while (i > 0 && t[i - 1] >= '0' && t[i - 1] <= '9') {
        i--;
        size += (t[i] - '0') * scale;
        scale *= 10;
    }
    return (i > 0 && i < n - 1 && t[i - 1] == '{') ? size : -1;
}

/* Reads one logical response line into c->line (NUL-terminated, without CRLF, literals
 * dropped). Returns 0, or -1 if the connection broke. */
static int imap_read_line(struct imap_conn *c)
{
    c->line.len = 0;
    for (;;) {
        char *crlf = NULL;
        while ((crlf = memmem(c->in + c->in_start, c->in_end - c->in_start, "\r\n", 2)) == NULL) {
            if (imap_fill(c) != 0) {
                return -1;
            }
        }
        size_t n = (size_t)(crlf - (c->in + c->in_start));
        bench_buf_put(&c->line, c->in + c->in_start, n);
        c->in_start += n + 2;
        long literal = imap_literal_size(c->line.data, c->line.len);
        if (literal < 0) {
            break;
        }
        if (imap_skip(c, (size_t)literal) != 0) {
            return -1;
        }
    }
    bench_buf_put(&c->line, "", 1);
    c->line.len--;
    return 0;
}

static void imap_reply_search_add(struct imap_reply *r, uint32_t uid)
{
    if (r->search_count == r->search_cap) {
        r->search_cap = r->search_cap ? r->search_cap * 2 : 256;
        uint32_t *grown = realloc(r->search, r->search_cap * sizeof *grown);
        if (grown == NULL) {
            bench_die("out of memory");
        }
        r->search = grown;
    }
    r->search[r->search_count++] = uid;
}

static void imap_untagged(struct imap_reply *r, const char *line)
{
    char *end;
    if (strncmp(line, "* SEARCH", 8) == 0) {
        if (r->search_want) {
            for (const char *p = line + 8; *p == ' ';) {
                unsigned long v = strtoul(p + 1, &end, 10);
                if (end == p + 1) {
                    break;
                }
                imap_reply_search_add(r, (uint32_t)v);
                p = end;
            }
        }
        return;
    }
    long n = strtol(line + 2, &end, 10);
    if (end != line + 2 && strcmp(end, " EXISTS") == 0) {
        r->exists = n;
    }
}

/* Reads lines up to the one tagged `tag`; returns 0 (r->ok says OK or not), or -1 if the
 * connection broke. A "+" continuation is returned as 1 (sync literals). */
static int imap_read_reply(struct imap_conn *c, unsigned tag, struct imap_reply *r)
{
    char prefix[24];
    int prefix_len = snprintf(prefix, sizeof prefix, "a%u ", tag);
    r->ok = 0;
    r->exists = -1;
    r->append_uid = 0;
    r->search_count = 0;
    for (;;) {
        if (imap_read_line(c) != 0) {
            return -1;
        }
        const char *line = c->line.data;
        if (line[0] == '+') {
            return 1;
        }
        if (line[0] == '*') {
            imap_untagged(r, line);
            continue;
        }
        if (strncmp(line, prefix, (size_t)prefix_len) != 0) {
            continue; /* another tag: not expected, ignored */
        }
        r->ok = strncmp(line + prefix_len, "OK", 2) == 0;
        const char *au = strstr(line, "[APPENDUID ");
        if (au != NULL) {
            char *end;
            (void)strtoul(au + 11, &end, 10);
            r->append_uid = (uint32_t)strtoul(end, NULL, 10);
        }
        return 0;
    }
}

/* Sends "aTAG " + text + CRLF and reads the reply. 0 or -1 as imap_read_reply. */
static int imap_command(struct imap_conn *c, struct imap_reply *r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int imap_command(struct imap_conn *c, struct imap_reply *r, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof text) {
        bench_die("command too long");
    }
    unsigned tag = ++c->tag;
    c->out.len = 0;
    bench_buf_printf(&c->out, "a%u %s\r\n", tag, text);
    if (imap_send(c, c->out.data, c->out.len) != 0) {
        return -1;
    }
    return imap_read_reply(c, tag, r) < 0 ? -1 : 0;
}

/* APPEND INBOX of msg with flags ("" for none); LITERAL+ if the server offers it. */
static int imap_append(struct imap_conn *c,
                       struct imap_reply *r,
                       const char *flags,
                       const struct bench_buf *msg)
{
    unsigned tag = ++c->tag;
    c->out.len = 0;
    bench_buf_printf(&c->out, "a%u APPEND INBOX (%s) {%zu%s}\r\n", tag, flags, msg->len,
                     c->literal_plus ? "+" : "");
    if (imap_send(c, c->out.data, c->out.len) != 0) {
        return -1;
    }
    if (!c->literal_plus) {
        int rc = imap_read_reply(c, tag, r);
        if (rc != 1) {
            return rc < 0 ? -1 : 0; /* refused before the literal */
        }
    }
    if (imap_send(c, msg->data, msg->len) != 0 || imap_send(c, "\r\n", 2) != 0) {
        return -1;
    }
    return imap_read_reply(c, tag, r) == 0 ? 0 : -1;
}

static void imap_user_name(const struct imap_options *opt, long user, char *out, size_t size)
{
    snprintf(out, size, "%s%ld%s%s", opt->user_prefix, user + 1, opt->domain[0] ? "@" : "",
             opt->domain);
}

/* Greeting, CAPABILITY, LOGIN; timed into login if samples is not NULL. 0 or -1. */
static int imap_login(struct imap_conn *c,
                      const struct imap_options *opt,
                      long user,
                      struct imap_samples *samples,
                      struct imap_reply *r);

/* ---- samples ----------------------------------------------------------------------------- */

static void imap_sample_add(struct imap_samples *s, double ms, long commands, int ok)
{
    if (s->count == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        double *grown = realloc(s->ms, s->cap * sizeof *grown);
        if (grown == NULL) {
            bench_die("out of memory");
        }
        s->ms = grown;
    }
    s->ms[s->count++] = ms;
    s->commands += commands;
    s->errors += ok ? 0 : 1;
}

static int imap_login(struct imap_conn *c,
                      const struct imap_options *opt,
                      long user,
                      struct imap_samples *samples,
                      struct imap_reply *r)
{
    char name[IMAP_NAME_BYTES], quoted[2 * IMAP_PASSWORD_BYTES + 1];
    size_t q = 0;
    for (const char *p = opt->password; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            quoted[q++] = '\\';
        }
        quoted[q++] = *p;
    }
    quoted[q] = '\0';
    imap_user_name(opt, user, name, sizeof name);
    if (imap_connect(c, opt) != 0 || imap_read_line(c) != 0 ||
        strncmp(c->line.data, "* OK", 4) != 0) {
        return -1;
    }
    if (imap_command(c, r, "CAPABILITY") != 0 || !r->ok) {
        return -1;
    }
    double t0 = bench_now_s();
    int rc = imap_command(c, r, "LOGIN \"%s\" \"%s\"", name, quoted);
    if (samples != NULL && rc == 0) {
        imap_sample_add(samples, (bench_now_s() - t0) * 1e3, 1, r->ok);
    }
    memset(quoted, 0, sizeof quoted);
    if (rc != 0 || !r->ok) {
        return -1;
    }
    /* Capabilities after login may differ: ask again (untimed) for LITERAL+ and UIDPLUS. */
    unsigned tag = ++c->tag;
    c->out.len = 0;
    bench_buf_printf(&c->out, "a%u CAPABILITY\r\n", tag);
    if (imap_send(c, c->out.data, c->out.len) != 0) {
        return -1;
    }
    for (;;) {
        if (imap_read_line(c) != 0) {
            return -1;
        }
        if (strncmp(c->line.data, "* CAPABILITY ", 13) == 0) {
            c->literal_plus = strstr(c->line.data, " LITERAL+") != NULL;
            c->uidplus = strstr(c->line.data, " UIDPLUS") != NULL;
        } else if (c->line.data[0] == 'a') {
            return 0;
        }
    }
}

/* ---- populate ------------------------------------------------------------------------------ */

static void *imap_populate_thread(void *arg)
{
    struct imap_client *cl = arg;
    const struct imap_options *opt = cl->opt;
    struct imap_conn c = {.fd = -1};
    struct imap_reply r = {0};
    struct bench_buf msg = {0};
    if (imap_login(&c, opt, cl->user, NULL, &r) != 0 || imap_command(&c, &r, "SELECT INBOX") != 0 ||
        !r.ok) {
        cl->failed = 1;
        snprintf(cl->failure, sizeof cl->failure, "populate: login or SELECT failed");
        imap_close(&c);
        return NULL;
    }
    long exists = r.exists < 0 ? 0 : r.exists;
    for (long i = exists; i < opt->messages; i++) {
        imap_message_make(&msg, opt->seed, cl->user, (uint64_t)i);
        if (imap_append(&c, &r, bench_rng_below(&cl->rng, 10) < 7 ? "\\Seen" : "", &msg) != 0 ||
            !r.ok) {
            cl->failed = 1;
            snprintf(cl->failure, sizeof cl->failure, "populate: APPEND %ld failed: %.100s", i,
                     c.line.data != NULL ? c.line.data : "");
            break;
        }
        cl->appended++;
    }
    (void)imap_command(&c, &r, "LOGOUT");
    imap_close(&c);
    bench_buf_free(&msg);
    free(r.search);
    return NULL;
}

static void imap_populate(const struct imap_options *opt)
{
    struct imap_client *users = bench_alloc((size_t)opt->users * sizeof *users);
    double t0 = bench_now_s();
    for (long u = 0; u < opt->users; u++) {
        users[u].opt = opt;
        users[u].user = u;
        users[u].rng = bench_rng_seeded(bench_rng_mix(opt->seed + (uint64_t)u * 7919u));
        if (pthread_create(&users[u].thread, NULL, imap_populate_thread, &users[u]) != 0) {
            bench_die("pthread_create failed");
        }
    }
    long appended = 0;
    for (long u = 0; u < opt->users; u++) {
        pthread_join(users[u].thread, NULL);
        if (users[u].failed) {
            bench_die("user %ld: %s", u + 1, users[u].failure);
        }
        appended += users[u].appended;
    }
    printf("populate: %ld users, %ld messages each, %ld appended in %.1f s\n", opt->users,
           opt->messages, appended, bench_now_s() - t0);
    free(users);
}

/* ---- the timed mix ------------------------------------------------------------------------- */

struct imap_session {
    struct imap_conn conn;
    struct imap_reply reply;
    uint32_t *uids; /* INBOX at the start, ascending */
    size_t uid_count;
    uint32_t *mine; /* appended by this client, not yet expunged */
    size_t mine_count, mine_cap;
    struct bench_buf msg;
    uint64_t appends;
    unsigned search_turn;
};

static uint32_t imap_random_uid(struct imap_client *cl, struct imap_session *s)
{
    return s->uids[bench_rng_below(&cl->rng, (uint32_t)s->uid_count)];
}

static enum imap_kind imap_draw(struct imap_client *cl)
{
    uint32_t total = 0, x;
    for (int k = 0; k < IMAP_KINDS; k++) {
        total += imap_kind_weights[k];
    }
    x = bench_rng_below(&cl->rng, total);
    for (int k = 0; k < IMAP_KINDS; k++) {
        if (x < imap_kind_weights[k]) {
            return (enum imap_kind)k;
        }
        x -= imap_kind_weights[k];
    }
    return IMAP_NOOP;
}

/* One operation of kind k; returns the commands it sent, or -1 if the connection broke.
 * *ok is 0 if any command was refused. */
static long
imap_operation(struct imap_client *cl, struct imap_session *s, enum imap_kind k, int *ok)
{
    struct imap_conn *c = &s->conn;
    struct imap_reply *r = &s->reply;
    static const char *const search_keys[] = {"FROM", "SUBJECT", "UNSEEN"};
    int rc = 0;
    long commands = 1;
    switch (k) {
    case IMAP_FETCH_HEADERS: {
        size_t span = IMAP_HEADER_FETCH_UIDS;
        size_t first = s->uid_count > span
                           ? bench_rng_below(&cl->rng, (uint32_t)(s->uid_count - span + 1))
                           : 0;
        size_t last = first + (s->uid_count > span ? span : s->uid_count) - 1;
        rc =
            imap_command(c, r, "UID FETCH %u:%u (UID BODY.PEEK[HEADER.FIELDS (From Subject Date)])",
                         s->uids[first], s->uids[last]);
        break;
    }
    case IMAP_FETCH_BODY:
        rc = imap_command(c, r, "UID FETCH %u (UID BODY.PEEK[])", imap_random_uid(cl, s));
        break;
    case IMAP_SEARCH: {
        const char *key = search_keys[s->search_turn++ % 3];
        if (strcmp(key, "FROM") == 0) {
            rc = imap_command(c, r, "UID SEARCH FROM \"%s\"",
                              imap_pick(&cl->rng, imap_last_names, IMAP_COUNT(imap_last_names)));
        } else if (strcmp(key, "SUBJECT") == 0) {
            rc = imap_command(c, r, "UID SEARCH SUBJECT \"%s\"",
                              imap_pick(&cl->rng, imap_words, 28)); /* the non-stop words */
        } else {
            rc = imap_command(c, r, "UID SEARCH UNSEEN");
        }
        break;
    }
    case IMAP_STORE:
        rc = imap_command(c, r, "UID STORE %u %sFLAGS (\\Seen)", imap_random_uid(cl, s),
                          bench_rng_below(&cl->rng, 2) ? "+" : "-");
        break;
    case IMAP_APPEND:
        imap_message_make(&s->msg, cl->opt->seed, cl->user,
                          ((uint64_t)1 << 30) + ((uint64_t)cl->index << 24) + s->appends++);
        rc = imap_append(c, r, "", &s->msg);
        if (rc == 0 && r->ok && r->append_uid != 0) {
            if (s->mine_count == s->mine_cap) {
                s->mine_cap = s->mine_cap ? s->mine_cap * 2 : 64;
                uint32_t *grown = realloc(s->mine, s->mine_cap * sizeof *grown);
                if (grown == NULL) {
                    bench_die("out of memory");
                }
                s->mine = grown;
            }
            s->mine[s->mine_count++] = r->append_uid;
        }
        break;
    case IMAP_EXPUNGE: {
        uint32_t uid = s->mine[--s->mine_count];
        rc = imap_command(c, r, "UID STORE %u +FLAGS.SILENT (\\Deleted)", uid);
        if (rc == 0 && r->ok) {
            commands++;
            rc = imap_command(c, r, "UID EXPUNGE %u", uid);
        }
        break;
    }
    default:
        rc = imap_command(c, r, "NOOP");
        break;
    }
    *ok = rc == 0 && r->ok;
    return rc != 0 ? -1 : commands;
}

static int imap_session_start(struct imap_client *cl, struct imap_session *s)
{
    struct imap_reply *r = &s->reply;
    if (imap_login(&s->conn, cl->opt, cl->user, &cl->samples[IMAP_LOGIN], r) != 0) {
        snprintf(cl->failure, sizeof cl->failure, "LOGIN failed: %.100s",
                 s->conn.line.data != NULL ? s->conn.line.data : "(no answer)");
        return -1;
    }
    double t0 = bench_now_s();
    if (imap_command(&s->conn, r, "SELECT INBOX") != 0 || !r->ok) {
        snprintf(cl->failure, sizeof cl->failure, "SELECT failed");
        return -1;
    }
    imap_sample_add(&cl->samples[IMAP_SELECT], (bench_now_s() - t0) * 1e3, 1, 1);
    r->search_want = 1;
    int rc = imap_command(&s->conn, r, "UID SEARCH ALL");
    r->search_want = 0;
    if (rc != 0 || !r->ok || r->search_count == 0) {
        snprintf(cl->failure, sizeof cl->failure, "UID SEARCH ALL failed or INBOX is empty");
        return -1;
    }
    s->uid_count = r->search_count;
    s->uids = bench_alloc(s->uid_count * sizeof *s->uids);
    memcpy(s->uids, r->search, s->uid_count * sizeof *s->uids);
    return 0;
}

static void *imap_client_thread(void *arg)
{
    struct imap_client *cl = arg;
    struct imap_session s = {.conn = {.fd = -1}};
    if (imap_session_start(cl, &s) != 0) {
        cl->failed = 1;
    }
    pthread_barrier_wait(&imap_start_barrier); /* all logged in */
    pthread_barrier_wait(&imap_start_barrier); /* the deadline is set */
    while (!cl->failed && bench_now_s() < imap_deadline_s) {
        enum imap_kind k = imap_draw(cl);
        if (k == IMAP_EXPUNGE && (s.mine_count == 0 || !s.conn.uidplus)) {
            k = IMAP_APPEND;
        }
        int ok = 0;
        double t0 = bench_now_s();
        long commands = imap_operation(cl, &s, k, &ok);
        double ms = (bench_now_s() - t0) * 1e3;
        if (commands < 0) {
            cl->failed = 1;
            snprintf(cl->failure, sizeof cl->failure, "connection lost during %s",
                     imap_kind_names[k]);
            break;
        }
        imap_sample_add(&cl->samples[k], ms, commands, ok);
    }
    if (!cl->failed) {
        (void)imap_command(&s.conn, &s.reply, "LOGOUT");
    }
    imap_close(&s.conn);
    free(s.uids);
    free(s.mine);
    free(s.reply.search);
    bench_buf_free(&s.msg);
    return NULL;
}

/* ---- figures ------------------------------------------------------------------------------- */

struct imap_figure {
    long ops, commands, errors;
    double per_s, p50_ms, p99_ms, max_ms;
};

static struct imap_figure
imap_merge(struct imap_client *clients, long count, int kind, double seconds)
{
    struct imap_figure f = {0};
    size_t total = 0;
    for (long i = 0; i < count; i++) {
        total += clients[i].samples[kind].count;
    }
    double *all = bench_alloc((total ? total : 1) * sizeof *all);
    size_t at = 0;
    for (long i = 0; i < count; i++) {
        struct imap_samples *s = &clients[i].samples[kind];
        if (s->count > 0) {
            memcpy(all + at, s->ms, s->count * sizeof *all);
        }
        at += s->count;
        f.commands += s->commands;
        f.errors += s->errors;
    }
    f.ops = (long)total;
    f.per_s = seconds > 0 ? (double)total / seconds : 0;
    if (total > 0) {
        bench_sort_doubles(all, total);
        f.p50_ms = bench_rank(all, total, 0.50);
        f.p99_ms = bench_rank(all, total, 0.99);
        f.max_ms = all[total - 1];
    }
    free(all);
    return f;
}

static void imap_json_figure(FILE *f, const char *name, const struct imap_figure *g, int last)
{
    fprintf(f,
            "    \"%s\": {\"ops\": %ld, \"commands\": %ld, \"ops_per_s\": %.2f, "
            "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f, \"errors\": %ld}%s\n",
            name, g->ops, g->commands, g->per_s, g->p50_ms, g->p99_ms, g->max_ms, g->errors,
            last ? "" : ",");
}

static void imap_report(const struct imap_options *opt,
                        struct imap_client *clients,
                        double seconds,
                        double load_start,
                        long failed)
{
    struct imap_figure figs[IMAP_SAMPLE_SETS];
    long commands = 0, errors = 0;
    printf("\n%s: %ld clients, %ld users, %.1f s, %ld messages per INBOX\n", opt->label,
           opt->clients, opt->users, seconds, opt->messages);
    printf("%-14s %9s %10s %9s %9s %9s %9s %7s\n", "operation", "count", "ops/s", "commands",
           "p50 ms", "p99 ms", "max ms", "errors");
    for (int k = 0; k < IMAP_SAMPLE_SETS; k++) {
        figs[k] = imap_merge(clients, opt->clients, k, seconds);
        if (k < IMAP_KINDS) {
            commands += figs[k].commands;
            errors += figs[k].errors;
        } else {
            errors += figs[k].errors;
        }
        printf("%-14s %9ld %10.1f %9ld %9.3f %9.3f %9.3f %7ld\n", imap_kind_names[k], figs[k].ops,
               k < IMAP_KINDS ? figs[k].per_s : 0.0, figs[k].commands, figs[k].p50_ms,
               figs[k].p99_ms, figs[k].max_ms, figs[k].errors);
    }
    double per_s = (double)commands / seconds;
    double load_end = bench_loadavg();
    printf("total: %ld IMAP commands, %.1f commands/s, %ld errors, %ld failed clients "
           "(load %.2f -> %.2f)\n",
           commands, per_s, errors, failed, load_start, load_end);
    if (opt->json_path == NULL) {
        return;
    }
    bench_make_parents(opt->json_path);
    FILE *f = fopen(opt->json_path, "w");
    if (f == NULL) {
        bench_die("cannot write %s: %s", opt->json_path, strerror(errno));
    }
    char cpu[160];
    bench_cpu_name(cpu, sizeof cpu);
    fprintf(f, "{\n  \"schema\": \"mailvault-bench-imap/1\",\n  \"server\": ");
    bench_json_string(f, opt->label);
    fprintf(f, ",\n  \"host\": ");
    bench_json_string(f, opt->host);
    fprintf(f,
            ",\n  \"port\": %ld,\n  \"clients\": %ld,\n  \"users\": %ld,\n  \"seconds\": %.3f,\n"
            "  \"messages\": %ld,\n  \"seed\": %llu,\n  \"cpu\": ",
            opt->port, opt->clients, opt->users, seconds, opt->messages,
            (unsigned long long)opt->seed);
    bench_json_string(f, cpu);
    fprintf(f,
            ",\n  \"load_start\": %.2f,\n  \"load_end\": %.2f,\n  \"failed_clients\": %ld,\n"
            "  \"commands\": %ld,\n  \"commands_per_s\": %.2f,\n  \"errors\": %ld,\n"
            "  \"weights\": {",
            load_start, load_end, failed, commands, per_s, errors);
    for (int k = 0; k < IMAP_KINDS; k++) {
        fprintf(f, "%s\"%s\": %u", k ? ", " : "", imap_kind_names[k], imap_kind_weights[k]);
    }
    fprintf(f, "},\n  \"ops\": {\n");
    for (int k = 0; k < IMAP_SAMPLE_SETS; k++) {
        imap_json_figure(f, imap_kind_names[k], &figs[k], k == IMAP_SAMPLE_SETS - 1);
    }
    fprintf(f, "  }\n}\n");
    if (fclose(f) != 0) {
        bench_die("cannot write %s", opt->json_path);
    }
}

static long imap_run(const struct imap_options *opt)
{
    struct imap_client *clients = bench_alloc((size_t)opt->clients * sizeof *clients);
    if (pthread_barrier_init(&imap_start_barrier, NULL, (unsigned)opt->clients + 1) != 0) {
        bench_die("pthread_barrier_init failed");
    }
    for (long i = 0; i < opt->clients; i++) {
        clients[i].opt = opt;
        clients[i].index = i;
        clients[i].user = i % opt->users;
        clients[i].rng = bench_rng_seeded(bench_rng_mix(opt->seed * 31u + (uint64_t)i + 1));
        if (pthread_create(&clients[i].thread, NULL, imap_client_thread, &clients[i]) != 0) {
            bench_die("pthread_create failed (client %ld)", i);
        }
    }
    /* Two barriers: every client has logged in and selected; then the deadline is set and
     * all start together (a barrier orders the write before the clients' reads). */
    pthread_barrier_wait(&imap_start_barrier);
    double load_start = bench_loadavg();
    double start = bench_now_s();
    imap_deadline_s = start + opt->seconds;
    pthread_barrier_wait(&imap_start_barrier);
    long failed = 0;
    for (long i = 0; i < opt->clients; i++) {
        pthread_join(clients[i].thread, NULL);
    }
    double seconds = bench_now_s() - start;
    for (long i = 0; i < opt->clients; i++) {
        if (clients[i].failed) {
            failed++;
            if (failed <= 5) {
                fprintf(stderr, "bench_imap: client %ld (user %ld): %s\n", i, clients[i].user + 1,
                        clients[i].failure);
            }
        }
    }
    imap_report(opt, clients, seconds, load_start, failed);
    long errors = failed;
    for (long i = 0; i < opt->clients; i++) {
        for (int k = 0; k < IMAP_SAMPLE_SETS; k++) {
            errors += clients[i].samples[k].errors;
            free(clients[i].samples[k].ms);
        }
    }
    pthread_barrier_destroy(&imap_start_barrier);
    free(clients);
    return errors;
}

/* ---- options ------------------------------------------------------------------------------- */

static void imap_usage(void)
{
    fprintf(stderr,
            "usage: bench_imap --port P [--host H] [--clients C] [--users U] [--seconds T]\n"
            "                  [--messages M] [--user-prefix u] [--domain D] [--label NAME]\n"
            "                  [--password-file F] [--seed S] [--populate-only] [--quick]\n"
            "                  [--json PATH]   (password: --password-file or "
            "$BENCH_IMAP_PASSWORD)\n");
    exit(2);
}

static void imap_read_password(struct imap_options *opt, const char *path)
{
    size_t n;
    if (path != NULL) {
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            bench_die("cannot read %s: %s", path, strerror(errno));
        }
        n = fread(opt->password, 1, sizeof opt->password - 1, f);
        fclose(f);
    } else {
        const char *env = getenv("BENCH_IMAP_PASSWORD");
        if (env == NULL) {
            bench_die("no password: --password-file F or $BENCH_IMAP_PASSWORD");
        }
        n = strlen(env);
        if (n >= sizeof opt->password) {
            bench_die("password too long");
        }
        memcpy(opt->password, env, n);
    }
    while (n > 0 && (opt->password[n - 1] == '\n' || opt->password[n - 1] == '\r')) {
        n--;
    }
    opt->password[n] = '\0';
    if (n == 0) {
        bench_die("empty password");
    }
}

static long imap_long_arg(const char *name, const char *text, long min, long max)
{
    long v;
    if (text == NULL || bench_parse_long(text, min, max, &v) != 0) {
        bench_die("%s wants a number in [%ld, %ld]", name, min, max);
    }
    return v;
}

static void imap_parse_args(int argc, char **argv, struct imap_options *opt)
{
    const char *password_file = NULL;
    long seconds = -1, messages = -1;
    int quick = 0;
    opt->host = "127.0.0.1";
    opt->label = "server";
    opt->user_prefix = "u";
    opt->domain = "bench.example";
    opt->clients = 10;
    opt->seed = IMAP_SEED_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (strcmp(a, "--host") == 0 && v) {
            opt->host = v;
        } else if (strcmp(a, "--port") == 0) {
            opt->port = imap_long_arg(a, v, 1, 65535);
        } else if (strcmp(a, "--clients") == 0) {
            opt->clients = imap_long_arg(a, v, 1, IMAP_CLIENTS_MAX);
        } else if (strcmp(a, "--users") == 0) {
            opt->users = imap_long_arg(a, v, 1, IMAP_CLIENTS_MAX);
        } else if (strcmp(a, "--seconds") == 0) {
            seconds = imap_long_arg(a, v, 1, 3600);
        } else if (strcmp(a, "--messages") == 0) {
            messages = imap_long_arg(a, v, 1, 1000000);
        } else if (strcmp(a, "--seed") == 0) {
            opt->seed = (uint64_t)imap_long_arg(a, v, 1, 1L << 40);
        } else if (strcmp(a, "--user-prefix") == 0 && v) {
            opt->user_prefix = v;
        } else if (strcmp(a, "--domain") == 0 && v) {
            opt->domain = v;
        } else if (strcmp(a, "--label") == 0 && v) {
            opt->label = v;
        } else if (strcmp(a, "--json") == 0 && v) {
            opt->json_path = v;
        } else if (strcmp(a, "--password-file") == 0 && v) {
            password_file = v;
        } else {
            used = 0;
            if (strcmp(a, "--quick") == 0) {
                quick = 1;
            } else if (strcmp(a, "--populate-only") == 0) {
                opt->populate_only = 1;
            } else {
                imap_usage();
            }
        }
        i += used;
    }
    if (opt->port == 0) {
        imap_usage();
    }
    if (opt->users == 0) {
        opt->users = opt->clients;
    }
    opt->seconds = (double)(seconds > 0 ? seconds : quick ? 5 : 30);
    opt->messages = messages > 0 ? messages : quick ? 100 : 500;
    if (strlen(opt->user_prefix) + strlen(opt->domain) > IMAP_NAME_BYTES - 24) {
        bench_die("--user-prefix and --domain are too long");
    }
    imap_read_password(opt, password_file);
}

int main(int argc, char **argv)
{
    static struct imap_options opt;
    imap_parse_args(argc, argv, &opt);
    setvbuf(stdout, NULL, _IOLBF, 0);
    imap_populate(&opt);
    if (opt.populate_only) {
        return 0;
    }
    long errors = imap_run(&opt);
    memset(opt.password, 0, sizeof opt.password);
    return errors == 0 ? 0 : 1;
}
