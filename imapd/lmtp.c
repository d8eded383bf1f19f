/*
 * lmtp.c -- LMTP (RFC 2033): LHLO, MAIL FROM, RCPT TO, DATA with one reply per recipient,
 * RSET, NOOP, VRFY, QUIT. Extensions: PIPELINING, ENHANCEDSTATUSCODES, 8BITMIME, SIZE, and
 * XCLIENT for trusted proxies (trusted_networks).
 *
 * IMPLEMENTATION NOTES
 *   - RCPT checks that the store exists (mv_store_exists: no password needed; 550 if not) in
 *     a job on the recipient's worker, so the loop never waits on the filesystem. The
 *     connection is busy meanwhile: pipelined RCPTs are checked one by one, answered in order.
 *   - After DATA each recipient's delivery is a job on the recipient's worker: if that
 *     worker has the store open (a user is logged in), the message is appended to its INBOX
 *     there, so IMAP sessions see it at once; else it is sealed into the store's queue with
 *     mv_deliver_sealed() (durable when it returns), and the next open drains it. The
 *     replies go out in recipient order once every job is done.
 *   - The message is stored as received, dot-unstuffed, with CRLF line ends as sent. Only
 *     CRLF ends a line in DATA (RFC 5321 2.3.8, 4.1.1.4): a bare LF (or CR) is a byte of the
 *     message, so "<LF>.<LF>" or "<LF>.<CRLF>" neither ends DATA nor is unstuffed; only
 *     "<CRLF>.<CRLF>" ends it. A lenient reading of the end mark is the SMTP-smuggling
 *     class: a message that ends early for us but not for the MTA that relayed it lets its
 *     sender append a second, forged message.
 *   - Each recipient's copy gets two header fields in front, as Dovecot's LMTP adds them
 *     (RFC 5321 4.4 for Return-Path; Delivered-To as Dovecot and Postfix write it):
 *     "Return-Path: <sender>" from MAIL FROM and "Delivered-To: recipient"; so each copy is
 *     built in its job and wiped and freed after the append (at most one copy per worker).
 *     Their line end is that of the message's first line.
 *   - A message over literal_max is read to its end and refused with 552 per recipient.
 *   - Messages held (being received or delivered) count against lmtp_data_total_max over
 *     all connections; one that would go over it is read to its end without being kept and
 *     answered 452 4.3.1 per recipient (try again later). It is refused only while others
 *     hold some of the budget, so one message within literal_max always gets through.
 *   - A recipient named twice in a transaction is delivered once; each of its RCPTs got a
 *     250, so each gets the delivery's reply (RFC 2033 4.2: one reply per accepted RCPT).
 *     Only distinct recipients count against lmtp_recipients_max (a repeated name refused
 *     with 452 would come back in a later transaction: a second copy); RCPT commands in one
 *     transaction are bounded by LMTP_RCPT_COMMANDS_PER_RECIPIENT times that limit.
 *   - Refused RCPTs count per transaction: from lmtp_rejected_recipients_max on, every RCPT
 *     gets 452 4.5.3 without a look at the store (no probing for addresses in bulk; a 4xx
 *     makes the MTA try the recipient again later, in another transaction).
 *   - A transaction (MAIL FROM to the replies after DATA) must end within
 *     lmtp_transaction_timeout_s: a client that trickles bytes is never idle.
 *   - The quota (quota.c) is checked per recipient in its job: against the open store, or
 *     for a sealed delivery against an estimate; a recipient over it gets 552 5.2.2, the
 *     others their own replies.
 */
#include "buf.h"
#include "config.h"
#include "conn.h"
#include "control.h"
#include "log.h"
#include "loop.h"
#include "mailvault.h"
#include "metrics.h"
#include "protocols.h"
#include "proxy.h"
#include "quota.h"
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum lmtp_state { LMTP_START = 0, LMTP_READY, LMTP_MAIL, LMTP_DATA, LMTP_DELIVERING };

struct lmtp_message {
    struct buf data;
    uint64_t held; /* bytes counted in lmtp_data_total */
    int refs;
    char return_path[MV_ADDRESS_MAX + 1]; /* MAIL FROM's path ("" for <>) */
};

/* RCPT commands one transaction may have accepted, per allowed distinct recipient. */
#define LMTP_RCPT_COMMANDS_PER_RECIPIENT 10

/* Message bytes held by every LMTP session (lmtp_data_total_max). Loop thread only. */
static uint64_t lmtp_data_total;

struct lmtp_session {
    struct conn *conn;
    enum lmtp_state state;
    char (*rcpt)[MV_ADDRESS_MAX + 1]; /* the distinct recipients, in the order first named */
    int *result;                      /* ... the result of each one's delivery */
    size_t distinct;                  /* how many (at most lmtp_recipients_max) */
    size_t *order;                    /* each accepted RCPT: the index of its recipient */
    size_t rcpt_count;                /* accepted RCPTs (at most lmtp_rcpt_commands_max()) */
    size_t rejected;                  /* RCPTs refused in this transaction */
    size_t pending;
    struct lmtp_message *msg;
    int too_big;
    int over_budget; /* DATA: over lmtp_data_total_max, being read and dropped */
    int line_start;  /* DATA: the next byte starts a line (the last ones were CRLF) */
    int last_cr;     /* DATA: the last byte taken was CR */
    int64_t mail_ms; /* when the transaction began (MAIL FROM) */
    int dead;        /* the connection is gone; freed when the last job is done */
};

struct lmtp_job {
    struct job job;
    struct lmtp_session *s;
    struct lmtp_message *msg;
    size_t index;
    char address[MV_ADDRESS_MAX + 1];
    int rc;
    int direct;
    char err[256]; /* why it failed, for the log line (lmtp_job_log) */
};

static void lmtp_reply(struct conn *c, const char *line)
{
    conn_write_str(c, line);
    conn_write_str(c, "\r\n");
}

static void lmtp_message_drop(struct lmtp_message *m)
{
    if (m != NULL && --m->refs == 0) {
        lmtp_data_total -= m->held;
        buf_free(&m->data);
        free(m);
    }
}

static void lmtp_reset(struct lmtp_session *s)
{
    s->rcpt_count = 0;
    s->distinct = 0;
    s->rejected = 0;
    s->too_big = 0;
    s->over_budget = 0;
    lmtp_message_drop(s->msg);
    s->msg = NULL;
    s->state = s->state == LMTP_START ? LMTP_START : LMTP_READY;
}

static void lmtp_free(struct lmtp_session *s)
{
    lmtp_message_drop(s->msg);
    free(s->rcpt);
    free(s->result);
    free(s->order);
    free(s);
}

static size_t lmtp_rcpt_commands_max(void)
{
    return (size_t)g_config.lmtp_recipients_max * LMTP_RCPT_COMMANDS_PER_RECIPIENT;
}

static void lmtp_session_start(struct conn *c)
{
    struct lmtp_session *s = calloc(1, sizeof *s);
    size_t max = (size_t)g_config.lmtp_recipients_max;
    if (s != NULL) {
        s->rcpt = calloc(max, sizeof *s->rcpt);
        s->result = calloc(max, sizeof *s->result);
        s->order = calloc(lmtp_rcpt_commands_max(), sizeof *s->order);
    }
    if (s == NULL || s->rcpt == NULL || s->result == NULL || s->order == NULL) {
        if (s != NULL) {
            lmtp_free(s);
        }
        lmtp_reply(c, "421 4.3.0 out of memory");
        conn_close_after_output(c);
        return;
    }
    s->conn = c;
    c->session = s;
    lmtp_reply(c, "220 mailvaultd LMTP ready");
}

static void lmtp_session_end(struct conn *c)
{
    struct lmtp_session *s = c->session;
    c->session = NULL;
    if (s == NULL) {
        return;
    }
    s->dead = 1;
    if (s->pending == 0) {
        lmtp_free(s);
    }
}

/* "<addr>" after "MAIL FROM:" / "RCPT TO:" into out; the rest (parameters) in *params. */
static int lmtp_path(const char *arg, char *out, size_t out_size, const char **params)
{
    while (*arg == ' ') {
        arg++;
    }
    if (*arg != '<') {
        return -1;
    }
    const char *end = strchr(arg, '>');
    if (end == NULL || (size_t)(end - arg - 1) >= out_size) {
        return -1;
    }
    memcpy(out, arg + 1, (size_t)(end - arg - 1));
    out[end - arg - 1] = '\0';
    *params = end + 1;
    return 0;
}

/* The sender path goes into Return-Path: as it is: no control bytes, no angle brackets. */
static int lmtp_path_printable(const char *path)
{
    for (const unsigned char *p = (const unsigned char *)path; *p != '\0'; p++) {
        if (*p < 0x20 || *p == 0x7f || *p == '<' || *p == '>') {
            return 0;
        }
    }
    return 1;
}

/* A delivery refused by the quota (quota.c): 552 5.2.2 (RFC 3463: mailbox full). */
#define LMTP_OVERQUOTA 1
/* Not kept: lmtp_data_total_max was reached. 452 4.3.1 (RFC 3463: mail system full). */
#define LMTP_BUSY 2

/* The message for one recipient: Return-Path and Delivered-To, then the bytes received
 * (see IMPLEMENTATION NOTES). NULL when out of memory; *len gets the length. */
static char *lmtp_with_trace(const struct lmtp_message *m, const char *rcpt, size_t *len)
{
    const char *nl = m->data.len > 0 ? memchr(m->data.data, '\n', m->data.len) : NULL;
    const char *eol = nl != NULL && nl > m->data.data && nl[-1] != '\r' ? "\n" : "\r\n";
    char head[2 * MV_ADDRESS_MAX + 64];
    int n = snprintf(head, sizeof head, "Return-Path: <%s>%sDelivered-To: %s%s", m->return_path,
                     eol, rcpt, eol);
    char *out = n > 0 ? malloc((size_t)n + m->data.len + 1) : NULL;
    if (out != NULL) {
        memcpy(out, head, (size_t)n);
        if (m->data.len > 0) {
            memcpy(out + n, m->data.data, m->data.len);
        }
        *len = (size_t)n + m->data.len;
    }
    return out;
}

/* The delivery's one log line. */
static void lmtp_job_log(const struct lmtp_job *j)
{
    log_msg(j->rc == MV_OK                                  ? LOG_LEVEL_INFO
            : j->rc == LMTP_OVERQUOTA || j->rc == MV_ELIMIT ? LOG_LEVEL_WARNING
                                                            : LOG_LEVEL_ERROR,
            "lmtp deliver %s: %zu bytes %s: %s%s%s", j->address, j->msg->data.len,
            j->direct ? "into the open store" : "sealed",
            j->rc == MV_OK            ? "ok"
            : j->rc == LMTP_OVERQUOTA ? "refused"
                                      : mv_strerror(j->rc),
            j->err[0] != '\0' && j->rc != MV_OK ? ": " : "", j->rc != MV_OK ? j->err : "");
}

/* worker.c SYNC APART, on the sync thread: the direct append is acknowledged (250) only if
 * its WAL sync was done; else 451, and the sender retries (the message may then be there
 * twice, never lost). */
static void lmtp_job_synced(struct job *job, int rc)
{
    struct lmtp_job *j = (struct lmtp_job *)job;
    j->rc = rc;
    if (rc != MV_OK) {
        snprintf(j->err, sizeof j->err, "the WAL's sync failed");
    }
    lmtp_job_log(j);
}

static void lmtp_job_run(struct job *job)
{
    struct lmtp_job *j = (struct lmtp_job *)job;
    char *err = j->err;
    const size_t err_size = sizeof j->err;
    err[0] = '\0';
    struct open_store *open = worker_store_find(job->worker, j->address);
    struct buf traced = {0};
    traced.data = lmtp_with_trace(j->msg, j->address, &traced.len);
    traced.cap = traced.len + 1; /* its whole block, which buf_free wipes: the message */
    if (traced.data == NULL) {
        j->rc = MV_ENOMEM;
        log_error("lmtp deliver %s: out of memory", j->address);
        return;
    }
    const struct buf *data = &traced;
    const struct config *cfg = worker_config(job->worker);
    char why[160] = "";
    int over = 0;
    /* A store whose queue still drains takes the delivery through the queue too, behind the
     * older ones (worker.c THE DRAIN): UIDs follow arrival order. */
    if (open != NULL && !open->drain_more) {
        j->direct = 1;
        over = quota_exceeded(open, cfg, j->address, data->len, 1);
        if (over != 0) {
            j->rc = LMTP_OVERQUOTA;
            snprintf(err, err_size, "over the %s quota", quota_over_text(over));
        } else {
            j->rc =
                mv_message_append(open->store, "INBOX", data->data, data->len, 0, NULL, 0, NULL);
            if (j->rc == MV_OK) {
                worker_backlog_added(open);
            }
            if (j->rc == MV_OK && mv_store_sync_owed(open->store)) {
                buf_free(&traced);
                worker_sync_after(job, open, lmtp_job_synced); /* it logs */
                return;
            }
        }
        if (j->rc != MV_OK && j->rc != LMTP_OVERQUOTA) {
            snprintf(err, err_size, "%s", mv_store_errmsg(open->store));
        }
    } else if ((over = quota_sealed_exceeded(cfg, j->address, data->len, why, sizeof why)) != 0) {
        /* no password: the usage is an estimate (quota.c), named in the log; a queue that
         * cannot be counted is a temporary failure (451) */
        j->rc = over < 0 ? MV_EIO : LMTP_OVERQUOTA;
        if (over < 0) {
            snprintf(err, err_size, "%s", why);
        } else {
            snprintf(err, err_size, "over the %s quota (%s)", quota_over_text(over), why);
        }
    } else {
        struct mv_store_options opts = config_store_options(cfg);
        j->rc = mv_deliver_sealed(j->address, data->data, data->len, &opts, err, err_size);
        if (j->rc == MV_OK) {
            quota_sealed_added(j->address, data->len); /* O(1) checks after it (quota.c) */
        }
    }
    lmtp_job_log(j);
    buf_free(&traced);
}

static void lmtp_replies(struct lmtp_session *s)
{
    struct conn *c = s->conn;
    for (size_t i = 0; i < s->rcpt_count; i++) {
        char line[MV_ADDRESS_MAX + 96];
        size_t d = s->order[i]; /* a repeated name: the reply of its one delivery */
        int rc = s->result[d];
        snprintf(line, sizeof line, "%s <%s>",
                 rc == MV_OK            ? "250 2.0.0 delivered to"
                 : rc == MV_ELIMIT      ? "552 5.3.4 message too big for"
                 : rc == LMTP_BUSY      ? "452 4.3.1 too much mail in transit, try again later:"
                 : rc == LMTP_OVERQUOTA ? "552 5.2.2 mailbox full (over quota):"
                 : rc == MV_ENOTFOUND   ? "550 5.1.1 no such user"
                 : rc == MV_ENOSPC      ? "452 4.3.1 out of space for"
                                        : "451 4.3.0 temporary failure delivering to",
                 s->rcpt[d]);
        lmtp_reply(c, line);
        metrics_lmtp_reply(line);
    }
    lmtp_reset(s);
}

static void lmtp_job_done(struct job *job)
{
    struct lmtp_job *j = (struct lmtp_job *)job;
    struct lmtp_session *s = j->s;
    worker_unplace(j->address);
    s->result[j->index] = j->rc;
    if (j->direct && j->rc == MV_OK) {
        imap_session_notify(j->address, NULL); /* IDLE push: a new message in INBOX */
    }
    lmtp_message_drop(j->msg);
    struct conn *c = job->conn;
    free(j);
    if (--s->pending > 0) {
        return;
    }
    if (s->dead) {
        lmtp_free(s);
        return;
    }
    lmtp_replies(s);
    conn_resume(c);
}

static void lmtp_deliver(struct conn *c, struct lmtp_session *s)
{
    if (s->too_big || s->over_budget || s->msg->data.oom) {
        for (size_t d = 0; d < s->distinct; d++) {
            s->result[d] = s->too_big ? MV_ELIMIT : LMTP_BUSY;
        }
        lmtp_replies(s);
        return;
    }
    s->state = LMTP_DELIVERING;
    c->busy = 1;
    for (size_t i = 0; i < s->distinct; i++) { /* each recipient once, however often named */
        struct lmtp_job *j = calloc(1, sizeof *j);
        if (j == NULL) {
            s->result[i] = MV_ENOMEM;
            continue;
        }
        j->s = s;
        j->msg = s->msg;
        j->msg->refs++;
        j->index = i;
        snprintf(j->address, sizeof j->address, "%s", s->rcpt[i]);
        j->job.conn = c;
        j->job.run = lmtp_job_run;
        j->job.done = lmtp_job_done;
        /* a long job (worker.c LANES): acknowledged means durable, so each delivery waits
         * for an fsync (the store's commit, or the sealed file's and its directory's) */
        j->job.lane = JOB_LANE_LONG;
        s->pending++;
        job_user(&j->job, j->address);                  /* its store (worker.c WRITERS) */
        worker_post(worker_place(j->address), &j->job); /* held until done (PLACEMENT) */
    }
    if (s->pending == 0) {
        c->busy = 0;
        lmtp_replies(s);
    }
}

/* RCPT's store check, a job on the recipient's worker (see the notes at the top). */
struct lmtp_rcpt_job {
    struct job job;
    struct lmtp_session *s;
    char address[MV_ADDRESS_MAX + 1];
    int rc;
};

static void lmtp_rcpt_run(struct job *job)
{
    struct lmtp_rcpt_job *j = (struct lmtp_rcpt_job *)job;
    struct mv_store_options opts = config_store_options(worker_config(job->worker));
    /* Being released (control.c) or released (the fence): 451, and the MTA or the proxy
     * tries again, on the new node once the route changed. */
    if (control_user_held(j->address) || mv_store_released(j->address, &opts) == 1) {
        j->rc = MV_EMOVED;
        return;
    }
    if (worker_store_find(job->worker, j->address) != NULL) {
        j->rc = MV_OK; /* open on this worker, so it exists: no filesystem walk */
        return;
    }
    j->rc = mv_store_exists(j->address, &opts); /* not a count of its queue: one access() */
}

static void lmtp_rcpt_done(struct job *job)
{
    struct lmtp_rcpt_job *j = (struct lmtp_rcpt_job *)job;
    struct lmtp_session *s = j->s;
    struct conn *c = job->conn;
    worker_unplace(j->address);
    s->pending--;
    if (s->dead) {
        if (s->pending == 0) {
            lmtp_free(s);
        }
        free(j);
        return;
    }
    /* No command ran while the check was out (the connection was busy): still in MAIL. */
    if (j->rc == MV_OK && s->state == LMTP_MAIL &&
        s->distinct < (size_t)g_config.lmtp_recipients_max &&
        s->rcpt_count < lmtp_rcpt_commands_max()) {
        s->order[s->rcpt_count++] = s->distinct;
        snprintf(s->rcpt[s->distinct++], sizeof s->rcpt[0], "%s", j->address);
        lmtp_reply(c, "250 2.1.5 recipient ok");
    } else if (j->rc == MV_EMOVED) {
        s->rejected++;
        lmtp_reply(c, "451 4.2.1 mailbox unavailable here (moved or being moved), try again later");
        metrics_lmtp_reply("451");
    } else if (j->rc == MV_OK || j->rc == MV_ENOTFOUND || j->rc == MV_EINVAL) {
        s->rejected++;
        lmtp_reply(c, "550 5.1.1 no such user");
        metrics_lmtp_reply("550");
    } else {
        /* a disk error is not a verdict on the address: the sender tries again later */
        s->rejected++;
        lmtp_reply(c, "451 4.3.0 cannot check the recipient now");
        metrics_lmtp_reply("451");
    }
    free(j);
    conn_resume(c);
}

/* The index of the accepted recipient address (normalised), or SIZE_MAX. */
static size_t lmtp_rcpt_find(const struct lmtp_session *s, const char *address)
{
    for (size_t d = 0; d < s->distinct; d++) {
        if (strcmp(s->rcpt[d], address) == 0) {
            return d;
        }
    }
    return SIZE_MAX;
}

static void lmtp_rcpt_check(struct conn *c, struct lmtp_session *s, const char *address)
{
    struct lmtp_rcpt_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        lmtp_reply(c, "452 4.3.0 out of memory");
        return;
    }
    j->s = s;
    snprintf(j->address, sizeof j->address, "%s", address);
    j->job.conn = c;
    j->job.run = lmtp_rcpt_run;
    j->job.done = lmtp_rcpt_done;
    s->pending++;
    c->busy = 1;
    job_user(&j->job, j->address);
    worker_post(worker_place(j->address), &j->job); /* held until done (PLACEMENT) */
}

/* Keeps n bytes of the message being received, within literal_max (else too_big) and the
 * server-wide lmtp_data_total_max (else over_budget); past either, bytes are dropped. */
static void lmtp_keep(struct lmtp_session *s, const char *bytes, size_t n)
{
    struct lmtp_message *m = s->msg;
    if (s->too_big || s->over_budget || n == 0) {
        return;
    }
    if ((uint64_t)m->data.len + n > g_config.literal_max) {
        s->too_big = 1;
    } else if (lmtp_data_total > m->held && lmtp_data_total + n > g_config.lmtp_data_total_max) {
        s->over_budget = 1; /* others hold the budget: a transient refusal (452) */
    } else {
        buf_add(&m->data, bytes, n);
        m->held += n;
        lmtp_data_total += n;
        return;
    }
    lmtp_data_total -= m->held;
    m->held = 0;
    buf_free(&m->data);
}

/* DATA: consumes input up to the end mark; returns 1 when the message is complete. Only
 * CRLF ends a line (see the notes at the top): a line starts after CRLF, only a line that
 * is ".<CRLF>" ends the message, and only a line's leading dot is unstuffed. */
static int lmtp_data(struct conn *c, struct lmtp_session *s)
{
    while (c->in.len > 0) {
        char *nl = memchr(c->in.data, '\n', c->in.len);
        size_t n = nl != NULL ? (size_t)(nl - c->in.data) + 1 : c->in.len;
        if (nl == NULL && c->in.len < 1024) {
            return 0; /* wait for the rest of a short line (it may be the end mark) */
        }
        const char *line = c->in.data;
        int at_start = s->line_start;
        int crlf = nl != NULL && (n >= 2 ? line[n - 2] == '\r' : s->last_cr);
        if (at_start && n == 3 && memcmp(line, ".\r\n", 3) == 0) {
            buf_consume(&c->in, n);
            return 1;
        }
        s->line_start = crlf;
        s->last_cr = line[n - 1] == '\r';
        size_t skip = at_start && line[0] == '.' ? 1 : 0; /* dot-stuffing */
        lmtp_keep(s, line + skip, n - skip);
        buf_consume(&c->in, n);
    }
    return 0;
}

/* On the tick, when the connection is not busy: closes a transaction over its deadline. */
static void lmtp_session_tick(struct conn *c, int64_t now_ms)
{
    struct lmtp_session *s = c->session;
    if (s == NULL || c->closing || (s->state != LMTP_MAIL && s->state != LMTP_DATA) ||
        now_ms - s->mail_ms <= (int64_t)g_config.lmtp_transaction_timeout_s * 1000) {
        return;
    }
    log_warning("lmtp %s: transaction timeout (%d s)", c->peer,
                g_config.lmtp_transaction_timeout_s);
    lmtp_reply(c, "421 4.4.2 transaction timeout, closing");
    conn_close_after_output(c);
    conn_flush(c);
}

static int lmtp_hex(char ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* An xtext value (RFC 3461 4: "+XX" is the byte 0xXX) decoded into out, for logs and
 * addresses: only printable ASCII survives, the rest becomes '_'. 0, or -1 if too long. */
static int lmtp_xtext(const char *in, size_t len, char *out, size_t out_size)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned ch = (unsigned char)in[i];
        int hi = i + 2 < len ? lmtp_hex(in[i + 1]) : -1,
            lo = i + 2 < len ? lmtp_hex(in[i + 2]) : -1;
        if (ch == '+' && hi >= 0 && lo >= 0) {
            ch = (unsigned)(hi << 4 | lo);
            i += 2;
        }
        if (n + 1 >= out_size) {
            return -1;
        }
        out[n++] = ch > 0x20 && ch < 0x7f ? (char)ch : '_';
    }
    out[n] = '\0';
    return 0;
}

/* XCLIENT (Postfix's XCLIENT_README; what Dovecot's LMTP proxy sends when LHLO lists it):
 * from a trusted peer (trusted_networks) ADDR= and PORT= name the real client, which the
 * per-address limit and the logs use from now on; HELO= and LOGIN= are logged. As in Postfix
 * the answer is the greeting again and the session starts over (LHLO next). From any other
 * peer it is refused (550, as Postfix does) and logged. */
static void lmtp_xclient(struct conn *c, struct lmtp_session *s, const char *args)
{
    if (!c->trusted) {
        log_warning("lmtp %s: XCLIENT ignored (not in trusted_networks)", c->peer);
        lmtp_reply(c, "550 5.7.0 insufficient authorization");
        return;
    }
    if (s->state != LMTP_START && s->state != LMTP_READY) {
        lmtp_reply(c, "503 5.5.1 XCLIENT not in a mail transaction");
        return;
    }
    char addr[64] = "", port[16] = "", helo[80] = "", login[80] = "", value[256];
    for (const char *p = args; *p != '\0';) {
        p += strspn(p, " ");
        size_t len = strcspn(p, " ");
        if (len == 0) {
            break;
        }
        const char *eq = memchr(p, '=', len);
        if (eq == NULL || eq == p) {
            lmtp_reply(c, "501 5.5.4 XCLIENT takes NAME=VALUE attributes");
            return;
        }
        size_t name_len = (size_t)(eq - p);
        if (lmtp_xtext(eq + 1, len - name_len - 1, value, sizeof value) != 0) {
            lmtp_reply(c, "501 5.5.4 XCLIENT attribute too long");
            return;
        }
        /* "[UNAVAILABLE]" and "[TEMPUNAVAIL]": the proxy does not know; left unset. */
        int unknown = value[0] == '[' && (strcasecmp(value, "[UNAVAILABLE]") == 0 ||
                                          strcasecmp(value, "[TEMPUNAVAIL]") == 0);
        char *into = NULL;
        size_t into_size = 0;
        if (name_len == 4 && strncasecmp(p, "ADDR", 4) == 0) {
            into = addr, into_size = sizeof addr;
        } else if (name_len == 4 && strncasecmp(p, "PORT", 4) == 0) {
            into = port, into_size = sizeof port;
        } else if (name_len == 4 && strncasecmp(p, "HELO", 4) == 0) {
            into = helo, into_size = sizeof helo;
        } else if (name_len == 5 && strncasecmp(p, "LOGIN", 5) == 0) {
            into = login, into_size = sizeof login;
        } /* PROTO, TTL, TIMEOUT, NAME, DEST*: accepted, nothing to do with them here */
        if (into != NULL && !unknown) {
            size_t n = strlen(value) < into_size ? strlen(value) : into_size - 1; /* cut */
            memcpy(into, value, n);
            into[n] = '\0';
        }
        p += len;
    }
    if (addr[0] != '\0') {
        char normal[64];
        char *end = NULL;
        unsigned long pn = strtoul(port, &end, 10);
        if (proxy_parse_address(addr, normal, sizeof normal) != 0) {
            lmtp_reply(c, "501 5.5.4 XCLIENT ADDR is not an address");
            return;
        }
        if (conn_set_client(c, normal,
                            end != port && *end == '\0' && pn <= 65535 ? (unsigned)pn : 0,
                            NULL) != 0) {
            lmtp_reply(c, "421 4.7.0 too many connections from your address");
            conn_close_after_output(c);
            return;
        }
    }
    if (helo[0] != '\0' || login[0] != '\0') {
        log_info("lmtp %s: xclient helo %s login %s", c->peer, helo[0] != '\0' ? helo : "-",
                 login[0] != '\0' ? login : "-");
    }
    lmtp_reset(s);
    s->state = LMTP_START;
    lmtp_reply(c, "220 mailvaultd LMTP ready");
}

static void lmtp_command(struct conn *c, struct lmtp_session *s, char *line)
{
    char path[MV_ADDRESS_MAX + 1], normal[MV_ADDRESS_MAX + 1], text[MV_ADDRESS_MAX + 64];
    const char *params = "";
    if (strncasecmp(line, "LHLO ", 5) == 0) {
        lmtp_reset(s);
        s->state = LMTP_READY;
        snprintf(text, sizeof text,
                 "250-mailvaultd\r\n250-PIPELINING\r\n250-ENHANCEDSTATUSCODES\r\n250-8BITMIME\r\n"
                 "%s250 SIZE %llu",
                 c->trusted ? "250-XCLIENT ADDR PORT PROTO HELO LOGIN TTL TIMEOUT\r\n" : "",
                 (unsigned long long)g_config.literal_max);
        lmtp_reply(c, text);
    } else if (strncasecmp(line, "MAIL FROM:", 10) == 0) {
        if (s->state != LMTP_READY) {
            lmtp_reply(c,
                       s->state == LMTP_START ? "503 5.5.1 LHLO first" : "503 5.5.1 nested MAIL");
            return;
        }
        if (lmtp_path(line + 10, path, sizeof path, &params) != 0 || !lmtp_path_printable(path)) {
            lmtp_reply(c, "501 5.5.4 bad sender path");
            return;
        }
        const char *size = strcasestr(params, "SIZE=");
        if (size != NULL && strtoull(size + 5, NULL, 10) > g_config.literal_max) {
            lmtp_reply(c, "552 5.3.4 message size exceeds the limit");
            return;
        }
        s->msg = calloc(1, sizeof *s->msg);
        if (s->msg == NULL) {
            lmtp_reply(c, "452 4.3.0 out of memory");
            return;
        }
        s->msg->refs = 1;
        snprintf(s->msg->return_path, sizeof s->msg->return_path, "%s", path);
        s->state = LMTP_MAIL;
        s->mail_ms = loop_now_ms();
        lmtp_reply(c, "250 2.1.0 sender ok");
    } else if (strncasecmp(line, "RCPT TO:", 8) == 0) {
        size_t dup = SIZE_MAX;
        if (s->state != LMTP_MAIL) {
            lmtp_reply(c, "503 5.5.1 MAIL first");
        } else if (s->rejected >= (size_t)g_config.lmtp_rejected_recipients_max) {
            lmtp_reply(c, "452 4.5.3 too many refused recipients in this transaction");
        } else if (lmtp_path(line + 8, path, sizeof path, &params) != 0) {
            s->rejected++;
            lmtp_reply(c, "501 5.5.4 bad recipient path");
        } else if (s->rcpt_count == lmtp_rcpt_commands_max()) {
            s->rejected++;
            lmtp_reply(c, "452 4.5.3 too many RCPT commands in this transaction");
        } else if (mv_address_normalize(path, normal, sizeof normal, NULL, 0) != MV_OK) {
            s->rejected++;
            lmtp_reply(c, "550 5.1.1 no such user");
        } else if ((dup = lmtp_rcpt_find(s, normal)) != SIZE_MAX) {
            s->order[s->rcpt_count++] = dup;
            lmtp_reply(c, "250 2.1.5 recipient ok (named before: delivered once)");
        } else if (s->distinct == (size_t)g_config.lmtp_recipients_max) {
            s->rejected++;
            lmtp_reply(c, "452 4.5.3 too many recipients");
        } else {
            lmtp_rcpt_check(c, s, normal); /* the reply comes from lmtp_rcpt_done() */
        }
    } else if (strcasecmp(line, "DATA") == 0) {
        if (s->state != LMTP_MAIL || s->rcpt_count == 0) {
            lmtp_reply(c, "503 5.5.1 no valid recipients");
            return;
        }
        s->state = LMTP_DATA;
        s->line_start = 1;
        s->last_cr = 0;
        lmtp_reply(c, "354 send the message, end with <CRLF>.<CRLF>");
    } else if (strncasecmp(line, "XCLIENT", 7) == 0 && (line[7] == ' ' || line[7] == '\0')) {
        lmtp_xclient(c, s, line + 7);
    } else if (strcasecmp(line, "RSET") == 0) {
        lmtp_reset(s);
        lmtp_reply(c, "250 2.0.0 reset");
    } else if (strcasecmp(line, "NOOP") == 0) {
        lmtp_reply(c, "250 2.0.0 ok");
    } else if (strncasecmp(line, "VRFY", 4) == 0) {
        lmtp_reply(c, "252 2.5.2 cannot verify, send it");
    } else if (strcasecmp(line, "QUIT") == 0) {
        lmtp_reply(c, "221 2.0.0 bye");
        conn_close_after_output(c);
    } else if (strncasecmp(line, "HELO", 4) == 0 || strncasecmp(line, "EHLO", 4) == 0) {
        lmtp_reply(c, "500 5.5.1 this is LMTP: use LHLO");
    } else {
        lmtp_reply(c, "500 5.5.2 unknown command");
    }
}

static void lmtp_session_input(struct conn *c)
{
    struct lmtp_session *s = c->session;
    while (s != NULL && !c->dead && !c->busy && !c->closing && c->out.len < conn_output_max(c)) {
        if (s->state == LMTP_DATA) {
            if (!lmtp_data(c, s)) {
                return;
            }
            lmtp_deliver(c, s);
            continue;
        }
        char *nl = c->in.len > 0 ? memchr(c->in.data, '\n', c->in.len) : NULL;
        if (nl == NULL) {
            if (c->in.len > g_config.line_max) {
                lmtp_reply(c, "500 5.5.6 line too long");
                conn_close_after_output(c);
            }
            return;
        }
        size_t n = (size_t)(nl - c->in.data) + 1;
        char line[1024];
        size_t len = n - 1;
        if (len > 0 && c->in.data[len - 1] == '\r') {
            len--;
        }
        if (len >= sizeof line) {
            lmtp_reply(c, "500 5.5.6 line too long");
        } else {
            memcpy(line, c->in.data, len);
            line[len] = '\0';
            buf_consume(&c->in, n);
            lmtp_command(c, s, line);
            continue;
        }
        buf_consume(&c->in, n);
    }
}

/* ---- LMTP on conn.c ---- */

static int lmtp_session_connections_max(void)
{
    return g_config.lmtp_connections_max;
}

/* No login phase; the idle timeout is idle_timeout_s. */
const struct conn_proto_ops lmtp_conn_proto = {
    .name = "lmtp",
    .start = lmtp_session_start,
    .input = lmtp_session_input,
    .tick = lmtp_session_tick,
    .end = lmtp_session_end,
    .connections_max = lmtp_session_connections_max,
    .per_address_limit = 1,
    .bye_shutdown = "421 4.3.2 server shutting down\r\n",
    .bye_idle_timeout = "421 4.4.2 idle timeout\r\n",
    .refuse_prefix = "421 4.7.0 ",
    .metric_gauge = METRIC_CONNECTIONS_LMTP,
    .metric_gauge_tls = METRIC_CONNECTIONS_LMTP,
};

int lmtp_session_who(const struct conn *c, struct buf *out)
{
    const struct lmtp_session *s = c->ops == &lmtp_conn_proto ? c->session : NULL;
    if (s == NULL || c->dead) {
        return 0;
    }
    int64_t now = loop_now_ms();
    const char *state = s->state == LMTP_MAIL   ? "rcpt"
                        : s->state == LMTP_DATA ? "data"
                                                : "delivering";
    /* One line per recipient of the transaction in progress: LMTP sessions belong to no
     * user otherwise. */
    for (size_t d = 0; d < s->distinct && s->state >= LMTP_MAIL; d++) {
        buf_printf(out, "* session %s proto=lmtp client=", s->rcpt[d]);
        control_value(out, c->peer);
        buf_printf(out, " since=%lld idle_s=%lld state=%s mailbox=INBOX\r\n",
                   control_wall_s(s->mail_ms), (long long)((now - c->last_active_ms) / 1000),
                   state);
    }
    return (int)(s->state >= LMTP_MAIL ? s->distinct : 0);
}
