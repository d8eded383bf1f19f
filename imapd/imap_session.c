/*
 * imap_session.c -- the IMAP state machine on the loop and IMAP's protocol table for conn.c
 * (imap_conn_proto): the greeting, framing the input into commands (imap_frame.c), parsing them,
 * answering the ones that need no store (CAPABILITY, NOOP, LOGOUT, STARTTLS before login, every
 * BAD) and handing the rest to the session's worker as a job; the job's response goes back out on
 * the loop.
 */
#include "imap_session.h"
#include "buf.h"
#include "config.h"
#include "conn.h"
#include "control.h"
#include "idle_watch.h"
#include "log.h"
#include "loop.h"
#include "mailvault.h"
#include "metrics.h"
#include "protocols.h"
#include "proxy.h"
#include "throttle.h"
#include "tls.h"
#include "worker.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

struct imap_job {
    struct job job;
    struct imap_session *s;
    uint8_t *bytes;
    size_t len;
    struct imap_command cmd;
    int raw; /* an AUTHENTICATE response line, not a command */
    int delay_ms;
    int logout;
    int64_t posted_ms;      /* when the command reached the worker's queue */
    const char *failed_why; /* a failed login: see struct imap_ctx */
    char failed_user[MV_ADDRESS_MAX + 1];
    int failed_user_normal;
    char sync_ok[80]; /* struct imap_ctx's: the tagged OK's text after the sync */
};

void imap_tagged(struct imap_ctx *x, const char *status, const char *fmt, ...)
{
    /* Sized to the text: a long [MODIFIED set] must never be cut (the line would lose its
     * closing bracket). */
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (text != NULL) {
        vsnprintf(text, (size_t)n + 1, fmt, again);
    }
    va_end(again);
    buf_printf(x->out, "%s %s %s\r\n", x->cmd->tag, status,
               text != NULL ? text : "[SERVERBUG] out of memory");
    free(text);
    metrics_imap_done(&x->s->metrics_cmd, status);
}

/* Whether a failure's detail may be shown to the user: written for people by the library
 * (a missing mailbox, a limit and its value), not SQLite's or the file system's text. */
static int imap_detail_for_user(int rc, const mv_store *store)
{
    if (store == NULL || mv_store_errmsg_internal(store) || mv_store_errmsg(store)[0] == '\0') {
        return 0;
    }
    return rc == MV_ENOTFOUND || rc == MV_EEXISTS || rc == MV_ELIMIT || rc == MV_EINVAL ||
           rc == MV_ENOSPC;
}

void imap_internal_error(struct imap_ctx *x, const char *code, const char *what, const char *detail)
{
    /* Dovecot's model: the client gets a generic text with a time stamp and an id, the log
     * gets the detail under the same id, so an operator finds the line from a user's report. */
    static _Atomic unsigned imap_error_seq;
    unsigned id = ++imap_error_seq;
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    log_error("user %s: %s failed (error %s-%u): %s", x->s->user[0] != '\0' ? x->s->user : "-",
              what, stamp, id, detail);
    imap_tagged(x, "NO",
                "%s%s failed: internal error; the server log has the details under \"error %s-%u\" "
                "[%s UTC]",
                code, what, stamp, id, stamp);
}

void imap_tagged_store_error(struct imap_ctx *x, int rc, const char *what)
{
    const char *code = rc == MV_ENOTFOUND ? "[NONEXISTENT] "
                       : rc == MV_EEXISTS ? "[ALREADYEXISTS] "
                       : rc == MV_ELIMIT  ? "[LIMIT] "
                       : rc == MV_EINVAL  ? "[CANNOT] "
                       : rc == MV_EBUSY   ? "[INUSE] "
                       : rc == MV_ENOSPC  ? "[OVERQUOTA] "
                                          : "[SERVERBUG] ";
    const mv_store *store = x->s->store != NULL ? imap_db(x->s) : NULL;
    if (imap_detail_for_user(rc, store)) {
        imap_tagged(x, "NO", "%s%s: %s", code, what, mv_store_errmsg(store));
    } else if (rc == MV_EBUSY) { /* worth a retry; the detail ("database is locked") is logged */
        log_warning("user %s: %s: store busy: %s", x->s->user, what,
                    store != NULL ? mv_store_errmsg(store) : "");
        imap_tagged(x, "NO", "%s%s: the mailbox is busy, try again", code, what);
    } else {
        char detail[600];
        snprintf(detail, sizeof detail, "%s (%s)",
                 store != NULL && mv_store_errmsg(store)[0] != '\0' ? mv_store_errmsg(store)
                                                                    : "no detail",
                 mv_strerror(rc));
        imap_internal_error(x, code, what, detail);
    }
}

/* ---- commands on the worker ---- */

static void imap_cmd_noop(struct imap_ctx *x)
{
    if (x->s->state == IMAP_SELECTED) {
        (void)imap_view_sync(x->s, x->out, 1);
    }
    imap_tagged(x, "OK", "%s completed", x->cmd->name);
}

static void imap_cmd_logout(struct imap_ctx *x)
{
    buf_str(x->out, "* BYE logging out\r\n");
    imap_tagged(x, "OK", "LOGOUT completed");
    x->logout = 1;
}

static void imap_cmd_namespace(struct imap_ctx *x)
{
    buf_str(x->out, "* NAMESPACE ((\"\" \"/\")) NIL NIL\r\n");
    imap_tagged(x, "OK", "NAMESPACE completed");
}

/* ID (RFC 2971): the client's parameters are read and ignored (not logged: they can hold
 * anything); the server names itself. */
static void imap_cmd_id(struct imap_ctx *x)
{
    const struct imap_node *n = imap_arg(x->cmd, 0);
    if (imap_arg_count(x->cmd) != 1 || (n->type != IMAP_NODE_LIST && !imap_atom_is(n, "NIL"))) {
        imap_tagged(x, "BAD", "ID takes a parameter list or NIL");
        return;
    }
    buf_printf(x->out, "* ID (\"name\" \"mailvaultd\" \"version\" \"%s\")\r\n", mv_version());
    imap_tagged(x, "OK", "ID completed");
}

/* ENABLE (RFC 5161): CONDSTORE, QRESYNC (which implies CONDSTORE, RFC 7162 3.2.3) and
 * UTF8=ACCEPT (RFC 6855). UTF8=ACCEPT changes how every mailbox name is read and written, so
 * it is enabled only before the session's first SELECT or EXAMINE (RFC 6855 3, RFC 5161 3.1):
 * later it is left out of the ENABLED response, which tells the client it is not on. */
static void imap_cmd_enable(struct imap_ctx *x)
{
    if (imap_arg_count(x->cmd) == 0) {
        imap_tagged(x, "BAD", "ENABLE takes capability names");
        return;
    }
    int condstore = 0, qresync = 0, utf8 = 0;
    for (size_t i = 0; i < imap_arg_count(x->cmd); i++) {
        condstore |= imap_atom_is(imap_arg(x->cmd, i), "CONDSTORE");
        qresync |= imap_atom_is(imap_arg(x->cmd, i), "QRESYNC");
        utf8 |= imap_atom_is(imap_arg(x->cmd, i), "UTF8=ACCEPT");
    }
    int utf8_late = utf8 && x->s->selected_ever;
    utf8 = utf8 && !utf8_late;
    buf_str(x->out, "* ENABLED");
    if (condstore && !x->s->condstore) {
        buf_str(x->out, " CONDSTORE");
    }
    if (qresync && !x->s->qresync) {
        buf_str(x->out, " QRESYNC");
    }
    if (utf8 && !x->s->utf8_accept) {
        buf_str(x->out, " UTF8=ACCEPT");
    }
    buf_str(x->out, "\r\n");
    x->s->condstore |= condstore | qresync;
    x->s->qresync |= qresync;
    x->s->utf8_accept |= utf8;
    imap_tagged(x, "OK", "%s",
                utf8_late ? "ENABLE completed; UTF8=ACCEPT only before SELECT or EXAMINE"
                          : "ENABLE completed");
}

static void imap_cmd_capability(struct imap_ctx *x)
{
    buf_printf(x->out, "* CAPABILITY %s\r\n", imap_capabilities(x->s));
    imap_tagged(x, "OK", "CAPABILITY completed");
}

/* A command: its name, the state it needs, whether a UID form exists, its handler, and the
 * capabilities (space-separated; NULL: none) that it or its extended forms add. CAPABILITY
 * is made from these (imap_capabilities): a command is advertised exactly when it is here. */
struct imap_dispatch {
    const char *name;
    int min_state; /* IMAP_AUTH or IMAP_SELECTED */
    int uid_ok;
    void (*fn)(struct imap_ctx *x);
    const char *capabilities;
};

static void imap_cmd_lsub(struct imap_ctx *x)
{
    imap_cmd_list(x, 1);
}
static void imap_cmd_list_all(struct imap_ctx *x)
{
    imap_cmd_list(x, 0);
}
static void imap_cmd_subscribe_on(struct imap_ctx *x)
{
    imap_cmd_subscribe(x, 1);
}
static void imap_cmd_subscribe_off(struct imap_ctx *x)
{
    imap_cmd_subscribe(x, 0);
}

static const struct imap_dispatch imap_commands[] = {
    {"CAPABILITY", IMAP_AUTH, 0, imap_cmd_capability, NULL},
    {"NOOP", IMAP_AUTH, 0, imap_cmd_noop, NULL},
    {"CHECK", IMAP_SELECTED, 0, imap_cmd_noop, NULL},
    {"LOGOUT", IMAP_AUTH, 0, imap_cmd_logout, NULL},
    {"SELECT", IMAP_AUTH, 0, imap_cmd_select, "CONDSTORE QRESYNC"}, /* (CONDSTORE), (QRESYNC) */
    {"EXAMINE", IMAP_AUTH, 0, imap_cmd_select, NULL},
    {"CREATE", IMAP_AUTH, 0, imap_cmd_create, "CREATE-SPECIAL-USE"},
    {"DELETE", IMAP_AUTH, 0, imap_cmd_delete, NULL},
    {"RENAME", IMAP_AUTH, 0, imap_cmd_rename, NULL},
    {"SUBSCRIBE", IMAP_AUTH, 0, imap_cmd_subscribe_on, NULL},
    {"UNSUBSCRIBE", IMAP_AUTH, 0, imap_cmd_subscribe_off, NULL},
    {"LIST", IMAP_AUTH, 0, imap_cmd_list_all, "LIST-EXTENDED LIST-STATUS SPECIAL-USE"},
    {"LSUB", IMAP_AUTH, 0, imap_cmd_lsub, NULL},
    {"STATUS", IMAP_AUTH, 0, imap_cmd_status, NULL},
    {"APPEND", IMAP_AUTH, 0, imap_cmd_append, NULL},
    {"CLOSE", IMAP_SELECTED, 0, imap_cmd_close, NULL},
    {"EXPUNGE", IMAP_SELECTED, 1, imap_cmd_expunge, "UIDPLUS"}, /* UID EXPUNGE, COPYUID */
    {"MOVE", IMAP_SELECTED, 1, imap_cmd_move, "MOVE"},
    {"IDLE", IMAP_AUTH, 0, imap_cmd_idle, "IDLE"},
    {"NAMESPACE", IMAP_AUTH, 0, imap_cmd_namespace, "NAMESPACE"},
    {"ID", IMAP_AUTH, 0, imap_cmd_id, "ID"},
    {"ENABLE", IMAP_AUTH, 0, imap_cmd_enable, "ENABLE UTF8=ACCEPT"},
    {"UNSELECT", IMAP_SELECTED, 0, imap_cmd_unselect, "UNSELECT"},
    {"FETCH", IMAP_SELECTED, 1, imap_cmd_fetch, NULL},
    {"STORE", IMAP_SELECTED, 1, imap_cmd_store, NULL},
    {"COPY", IMAP_SELECTED, 1, imap_cmd_copy, NULL},
    {"SEARCH", IMAP_SELECTED, 1, imap_cmd_search, NULL},
    {"SORT", IMAP_SELECTED, 1, imap_cmd_sort, "SORT SORT=DISPLAY"},
    {"GETQUOTA", IMAP_AUTH, 0, imap_cmd_getquota, "QUOTA QUOTA=RES-STORAGE QUOTA=RES-MESSAGE"},
    {"GETQUOTAROOT", IMAP_AUTH, 0, imap_cmd_getquotaroot, NULL},
    {"SETQUOTA", IMAP_AUTH, 0, imap_cmd_setquota, NULL},
};

/* What the framing and the login offer (not commands of the table). */
#define IMAP_CAPS_BASE "IMAP4rev1 LITERAL+ SASL-IR"

static char imap_caps_authed[1024];
static pthread_once_t imap_caps_once = PTHREAD_ONCE_INIT;

/* Whether the space-separated list has word (n bytes) as a whole word. */
static int imap_caps_have(const char *list, const char *word, size_t n)
{
    for (const char *p = list; *p != '\0';) {
        size_t len = strcspn(p, " ");
        if (len == n && strncmp(p, word, n) == 0) {
            return 1;
        }
        p += len;
        p += *p == ' ';
    }
    return 0;
}

/* IMAP_CAPS_BASE and each row's capabilities once, in table order. */
static void imap_caps_build(void)
{
    snprintf(imap_caps_authed, sizeof imap_caps_authed, "%s", IMAP_CAPS_BASE);
    size_t len = strlen(imap_caps_authed);
    for (size_t i = 0; i < sizeof imap_commands / sizeof imap_commands[0]; i++) {
        for (const char *c = imap_commands[i].capabilities; c != NULL && *c != '\0';) {
            size_t n = strcspn(c, " ");
            if (!imap_caps_have(imap_caps_authed, c, n)) {
                /* A build-time table that does not fit is a programming error: loud. */
                if (len + 1 + n + 1 > sizeof imap_caps_authed) {
                    abort();
                }
                imap_caps_authed[len++] = ' ';
                memcpy(imap_caps_authed + len, c, n);
                len += n;
                imap_caps_authed[len] = '\0';
            }
            c += n;
            c += *c == ' ';
        }
    }
}

const char *imap_capabilities(const struct imap_session *s)
{
    if (s->state != IMAP_NOT_AUTH) {
        pthread_once(&imap_caps_once, imap_caps_build);
        return imap_caps_authed;
    }
    /* ID before login only to a trusted proxy: Dovecot's proxy sends the client's address in
     * ID exactly when the backend lists ID here (docs/SCALEOUT.md). */
    int id = s->conn != NULL && s->conn->trusted;
    if (!s->login_allowed) {
        if (id) {
            return tls_available() && !s->tls ? IMAP_CAPS_BASE " ID STARTTLS LOGINDISABLED"
                                              : IMAP_CAPS_BASE " ID LOGINDISABLED";
        }
        return tls_available() && !s->tls ? IMAP_CAPS_BASE " STARTTLS LOGINDISABLED"
                                          : IMAP_CAPS_BASE " LOGINDISABLED";
    }
    if (id) {
        return tls_available() && !s->tls ? IMAP_CAPS_BASE " ID STARTTLS AUTH=PLAIN"
                                          : IMAP_CAPS_BASE " ID AUTH=PLAIN";
    }
    return tls_available() && !s->tls ? IMAP_CAPS_BASE " STARTTLS AUTH=PLAIN"
                                      : IMAP_CAPS_BASE " AUTH=PLAIN";
}

/* worker.c SYNC APART, on the sync thread: the APPEND's answer, once its WAL sync is done
 * (rc MV_OK: durable, so acknowledged; else a NO: the message is in the store but not known
 * to be on the disk, and a client that retries may store it twice, never lose it). */
static void imap_job_synced(struct job *job, int rc)
{
    struct imap_job *j = (struct imap_job *)job;
    struct imap_ctx x = {.s = j->s, .cmd = &j->cmd, .out = &job->out};
    if (rc == MV_OK) {
        imap_tagged(&x, "OK", "%s", j->sync_ok);
    } else {
        imap_tagged_store_error(&x, rc, "APPEND");
    }
}

static void imap_job_run(struct job *job)
{
    struct imap_job *j = (struct imap_job *)job;
    struct imap_ctx x = {.s = j->s, .cmd = &j->cmd, .out = &job->out};
    j->s->on_reader = job->lane == JOB_LANE_READ; /* imap_db: which handle */
    if (j->s->fetch_more != NULL) {               /* the next chunk of a FETCH response */
        imap_fetch_continue(&x);
    } else if (j->raw) {
        imap_cmd_authenticate(&x, (const char *)j->bytes, j->len);
    } else if (j->s->state == IMAP_NOT_AUTH) {
        if (strcmp(j->cmd.name, "LOGIN") == 0) {
            imap_cmd_login(&x);
        } else {
            imap_cmd_authenticate(&x, NULL, 0);
        }
    } else {
        const struct imap_dispatch *d = NULL;
        for (size_t i = 0; i < sizeof imap_commands / sizeof imap_commands[0]; i++) {
            if (strcmp(imap_commands[i].name, j->cmd.name) == 0) {
                d = &imap_commands[i];
            }
        }
        if (d == NULL || (j->cmd.uid && !d->uid_ok)) {
            imap_tagged(&x, "BAD", "unknown command");
        } else if ((int)j->s->state < d->min_state) {
            imap_tagged(&x, "BAD", "no mailbox selected");
        } else {
            d->fn(&x);
        }
    }
    if (x.sync_owed) { /* the answer waits for the sync (worker.c SYNC APART) */
        memcpy(j->sync_ok, x.sync_ok, sizeof j->sync_ok);
        worker_sync_after(job, j->s->store, imap_job_synced);
    }
    if (job->out.oom) {
        buf_free(&job->out);
        buf_printf(&job->out, "* BYE out of memory\r\n");
        x.logout = 1;
        imap_fetch_state_free(&j->s->fetch_more);
    }
    x.logout |= j->s->gone;
    j->s->on_reader = 0;
    j->delay_ms = x.delay_ms;
    j->logout = x.logout;
    j->failed_why = x.failed_why;
    memcpy(j->failed_user, x.failed_user, sizeof j->failed_user);
    j->failed_user_normal = x.failed_user_normal;
}

static void imap_job_free(struct imap_job *j)
{
    imap_command_free(&j->cmd); /* wipes the unquoted strings: a LOGIN password */
    if (j->bytes != NULL) {
        OPENSSL_cleanse(j->bytes, j->len); /* may hold a password */
        free(j->bytes);
    }
    buf_free(&j->job.out);
    free(j);
}

/* ---- IDLE push: the loop's list of sessions in IDLE ---- */

static struct imap_session *imap_idle_head;
static void imap_idle_post(struct conn *c, struct imap_session *s);

static void imap_idle_list_add(struct imap_session *s)
{
    if (s->idle_listed) {
        return;
    }
    s->idle_prev = NULL;
    s->idle_next = imap_idle_head;
    if (imap_idle_head != NULL) {
        imap_idle_head->idle_prev = s;
    }
    imap_idle_head = s;
    s->idle_listed = 1;
    idle_watch_add(s->user); /* changes by other processes (idle_watch.c) */
}

static void imap_idle_list_remove(struct imap_session *s)
{
    if (!s->idle_listed) {
        return;
    }
    if (s->idle_prev != NULL) {
        s->idle_prev->idle_next = s->idle_next;
    } else {
        imap_idle_head = s->idle_next;
    }
    if (s->idle_next != NULL) {
        s->idle_next->idle_prev = s->idle_prev;
    }
    s->idle_prev = s->idle_next = NULL;
    s->idle_listed = 0;
    s->idle_notified = 0;
    idle_watch_remove(s->user);
}

void imap_session_notify(const char *user, const void *except)
{
    for (struct imap_session *s = imap_idle_head; s != NULL; s = s->idle_next) {
        if ((const void *)s == except || strcmp(s->user, user) != 0 || s->conn == NULL ||
            s->conn->dead) {
            continue;
        }
        if (s->conn->busy) {
            s->idle_notified = 1; /* imap_poll_done looks again */
        } else {
            imap_idle_post(s->conn, s);
        }
    }
}

/* Whether a command may change a mailbox (and so wake the IDLE sessions of its user). */
static int imap_command_changes(const char *name)
{
    static const char *const changing[] = {"APPEND", "STORE", "COPY",   "MOVE",  "EXPUNGE",
                                           "CLOSE",  "FETCH", "DELETE", "RENAME"};
    for (size_t i = 0; i < sizeof changing / sizeof changing[0]; i++) {
        if (strcmp(name, changing[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Counts a failed login against the client's address and the user it tried, and logs it
 * (one line, no password); returns how much longer its answer waits. The delay runs from the
 * command, not from the job's end, so the answer comes as late for a user with no store
 * (found out at once) as for a wrong password (a KDF run first). Counted even when the
 * client has gone: it made the guess. */
static int64_t imap_login_failure(const struct conn *c, const struct imap_job *j)
{
    struct throttle_counts counts;
    int hold_ms = throttle_failure(c->peer_addr, j->failed_user_normal ? j->failed_user : NULL,
                                   j->delay_ms, &counts);
    metrics_count(METRIC_LOGINS_FAILED);
    log_info("login failed %s from %s: %s (failures in 15 min: %u from the address, %u for "
             "the user; answer after %d ms)",
             j->failed_user, c->peer, j->failed_why, counts.address_failures, counts.user_failures,
             hold_ms);
    return j->posted_ms + hold_ms - loop_now_ms();
}

/* Direct sending (imap_fetch.c): a FETCH job may write to the socket itself when the
 * connection is plain and nothing of its output is queued, so that no byte the job writes
 * can overtake one the loop still holds; the loop writes nothing to a busy connection
 * (it only queues) until the job's done, which comes after the job's last write. The job
 * gets a duplicate of the descriptor: a close of the connection meanwhile cannot hand the
 * number to another connection while the job may still write to it. */
static void imap_direct_grant(struct conn *c, struct imap_session *s)
{
    s->direct_off = 0;
    s->direct_sent = 0;
    if (s->direct_fd >= 0 || c->tls || c->ssl != NULL || c->out.len != 0 || c->held.len != 0 ||
        c->closing || c->dead) {
        return;
    }
    s->direct_fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 0); /* -1: the loop writes it all */
    c->job_writes = s->direct_fd >= 0;
}

/* After the job: the duplicate closed, the bytes the job wrote counted as the loop's. */
static void imap_direct_end(struct conn *c, struct imap_session *s)
{
    if (s->direct_fd >= 0) {
        close(s->direct_fd);
        s->direct_fd = -1;
    }
    c->job_writes = 0;
    if (s->direct_sent > 0) {
        metrics_fetch_direct_add(s->direct_sent);
        c->bytes_out += s->direct_sent;
        c->last_active_ms = loop_now_ms();
        s->direct_sent = 0;
    }
}

static void imap_job_done(struct job *job)
{
    struct imap_job *j = (struct imap_job *)job;
    struct conn *c = job->conn;
    imap_direct_end(c, j->s);
    int64_t hold_ms = j->failed_why != NULL ? imap_login_failure(c, j) : 0;
    if (!j->s->authenticated && j->s->state != IMAP_NOT_AUTH) {
        /* here, not on the worker: c->peer (the client, behind a proxy also the proxy) is
         * the loop's */
        log_info("login %s from %s", j->s->user, c->peer);
    }
    if (!c->dead) {
        /* No job is in flight now, so the state the job left is safe to read here. */
        j->s->authenticated = j->s->state != IMAP_NOT_AUTH;
        snprintf(j->s->shown_mailbox, sizeof j->s->shown_mailbox, "%s",
                 j->s->state == IMAP_SELECTED && j->s->view.mailbox != NULL ? j->s->view.mailbox
                                                                            : "");
        conn_write_buf(c, &job->out);
        if (j->s->idling && !j->s->in_idle) { /* IDLE began: wait for DONE */
            j->s->frame.raw_line = 1;
            j->s->in_idle = 1;
            j->s->next_poll_ms = loop_now_ms() + IMAP_IDLE_POLL_MS;
            imap_idle_list_add(j->s);
        }
        if (j->logout) {
            conn_close_after_output(c);
        }
        if (hold_ms > 0) {
            conn_hold(c, (int)hold_ms);
        }
    }
    if (j->s->fetch_more != NULL) { /* a FETCH response goes on: see imap_session_drained */
        if (c->dead || j->logout) {
            imap_fetch_state_free(&j->s->fetch_more);
        } else {
            /* job->out (empty: the output's old buffer, conn_write_buf) is kept for the next
             * chunk, which the worker makes while the loop sends this one */
            j->s->stream_job = j;    /* the connection stays busy */
            conn_stream_continue(c); /* may post the job again at once */
            return;
        }
    }
    buf_free(&job->out);
    if (!j->raw && j->s->state != IMAP_NOT_AUTH && imap_command_changes(j->cmd.name)) {
        imap_session_notify(j->s->user, j->s);
    }
    imap_job_free(j);
    conn_resume(c);
}

/* Frees a command that goes no further, wiping what may hold a password. */
static void imap_discard(struct imap_command *cmd, uint8_t *bytes, size_t len)
{
    imap_command_free(cmd); /* wipes the unquoted strings */
    OPENSSL_cleanse(bytes, len);
    free(bytes);
}

/* Hands a parsed command (or a raw SASL line) to the worker; takes bytes. */
static void imap_post(struct conn *c, uint8_t *bytes, size_t len, struct imap_command *cmd, int raw)
{
    struct imap_session *s = c->session;
    struct imap_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        imap_discard(cmd, bytes, len);
        conn_write_str(c, "* BYE out of memory\r\n");
        conn_close_after_output(c);
        return;
    }
    j->s = s;
    j->bytes = bytes;
    j->len = len;
    j->cmd = *cmd;
    j->raw = raw;
    j->job.conn = c;
    j->job.run = imap_job_run;
    j->job.done = imap_job_done;
    j->posted_ms = loop_now_ms();
    /* before the worker can touch the session: the view is the loop's to read now */
    j->job.lane = raw ? JOB_LANE_SHORT : imap_command_lane(s, &j->cmd);
    if (j->job.lane == JOB_LANE_READ && (s->store == NULL || s->store->reader == NULL)) {
        j->job.lane = JOB_LANE_SHORT; /* no reader handle: the writer reads too */
    }
    s->last_lane = j->job.lane;
    s->tls = c->tls;
    s->login_allowed = c->tls || c->loopback || g_config.allow_plaintext;
    c->busy = 1;
    if (!raw && strcmp(j->cmd.name, "FETCH") == 0) {
        imap_direct_grant(c, s);
    }
    /* the user placed (a LOGIN's just now): the store its job may touch (worker.c WRITERS) */
    job_user(&j->job, s->is_placed ? s->placed : "");
    worker_post(s->worker, &j->job);
}

/* The worker of the user a LOGIN or AUTHENTICATE names, placing the user there
 * (worker.c PLACEMENT; the session holds it until its next attempt or its end); the
 * placement of "" if the name is unreadable (the job will refuse it). */
static struct worker *imap_login_worker(struct imap_session *s,
                                        const struct imap_command *cmd,
                                        const uint8_t *raw,
                                        size_t raw_len)
{
    char user[MV_ADDRESS_MAX + 1] = "", normal[MV_ADDRESS_MAX + 1];
    if (raw != NULL) {
        (void)imap_sasl_plain_user((const char *)raw, raw_len, user, sizeof user);
    } else if (strcmp(cmd->name, "LOGIN") == 0) {
        (void)imap_astring(imap_arg(cmd, 0), user, sizeof user);
    } else {
        const struct imap_node *ir = imap_arg(cmd, 1);
        if (ir != NULL && ir->type == IMAP_NODE_ATOM) {
            (void)imap_sasl_plain_user(ir->data, ir->len, user, sizeof user);
        }
    }
    if (mv_address_normalize(user, normal, sizeof normal, NULL, 0) != MV_OK) {
        normal[0] = '\0';
    }
    OPENSSL_cleanse(user, sizeof user);
    /* The new hold first, so a second attempt for the same user keeps its worker; no job of
     * the session is in flight (it is not busy), so nothing of its last attempt is left on
     * that worker but what the store holds itself. */
    struct worker *w = worker_place(normal);
    if (s->is_placed) {
        worker_unplace(s->placed);
    }
    snprintf(s->placed, sizeof s->placed, "%s", normal);
    s->is_placed = 1;
    return w;
}

/* ---- the loop side ---- */

static void imap_reply(struct conn *c, const char *tag, const char *text)
{
    conn_write_str(c, tag[0] != '\0' ? tag : "*");
    conn_write_str(c, " ");
    conn_write_str(c, text);
    conn_write_str(c, "\r\n");
    metrics_imap_done(&((struct imap_session *)c->session)->metrics_cmd, text);
}

/* A string or atom value of ID into out (sanitised for logs: what is not [A-Za-z0-9.:_+/=-]
 * becomes '_'); "" for NIL or too long. */
static void imap_id_value(const struct imap_node *n, char *out, size_t out_size)
{
    out[0] = '\0';
    if (n == NULL || n->type == IMAP_NODE_LIST || imap_atom_is(n, "NIL") || n->len >= out_size) {
        return;
    }
    for (size_t i = 0; i < n->len; i++) {
        char ch = n->data[i];
        out[i] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                         (ch != '\0' && strchr(".:_+/=-", ch) != NULL)
                     ? ch
                     : '_';
    }
    out[n->len] = '\0';
}

/* ID before login (RFC 2971) with Dovecot's proxy fields: from a trusted peer
 * (trusted_networks), x-originating-ip / x-originating-port / x-session-id name the real
 * client, and the connection counts and logs as the client's from now on; from any other
 * peer they are ignored and logged. 0, or -1 if the client's address is over its
 * connection limit (the caller closes). */
static int imap_id_client(struct conn *c, const struct imap_command *cmd)
{
    const struct imap_node *list = imap_arg(cmd, 0);
    if (list == NULL || list->type != IMAP_NODE_LIST) {
        return 0;
    }
    char ip[64] = "", port[16] = "", session[48] = "", key[32];
    for (uint32_t i = list->child; i != IMAP_NODE_NONE;) {
        const struct imap_node *k = imap_node(cmd, i);
        const struct imap_node *v = k->next != IMAP_NODE_NONE ? imap_node(cmd, k->next) : NULL;
        if (k->type != IMAP_NODE_LIST && k->len < sizeof key) {
            memcpy(key, k->data, k->len);
            key[k->len] = '\0';
            if (strcasecmp(key, "x-originating-ip") == 0) {
                imap_id_value(v, ip, sizeof ip);
            } else if (strcasecmp(key, "x-originating-port") == 0) {
                imap_id_value(v, port, sizeof port);
            } else if (strcasecmp(key, "x-session-id") == 0) {
                imap_id_value(v, session, sizeof session);
            }
        }
        i = v != NULL ? v->next : IMAP_NODE_NONE;
    }
    if (ip[0] == '\0') {
        return 0;
    }
    if (!c->trusted) {
        log_warning("ID from %s: x-originating-ip %s ignored (not in trusted_networks)", c->peer,
                    ip);
        return 0;
    }
    char addr[INET6_ADDRSTRLEN];
    char *end = NULL;
    unsigned long p = strtoul(port, &end, 10);
    if (proxy_parse_address(ip, addr, sizeof addr) != 0) {
        log_warning("ID from %s: x-originating-ip %s is not an address; ignored", c->peer, ip);
        return 0;
    }
    return conn_set_client(c, addr, end != port && *end == '\0' && p <= 65535 ? (unsigned)p : 0,
                           session[0] != '\0' ? session : NULL);
}

static void imap_not_auth(struct conn *c, struct imap_command *cmd, uint8_t *bytes, size_t len)
{
    struct imap_session *s = c->session;
    s->tls = c->tls;
    s->login_allowed = c->tls || c->loopback || g_config.allow_plaintext;
    char line[256];
    if (strcmp(cmd->name, "CAPABILITY") == 0 && imap_arg_count(cmd) == 0) {
        snprintf(line, sizeof line, "* CAPABILITY %s\r\n", imap_capabilities(s));
        conn_write_str(c, line);
        imap_reply(c, cmd->tag, "OK CAPABILITY completed");
    } else if (strcmp(cmd->name, "NOOP") == 0 && imap_arg_count(cmd) == 0) {
        imap_reply(c, cmd->tag, "OK NOOP completed");
    } else if (strcmp(cmd->name, "ID") == 0 && imap_arg_count(cmd) == 1) {
        if (imap_id_client(c, cmd) != 0) {
            conn_write_str(c, "* BYE too many connections from your address\r\n");
            conn_close_after_output(c);
            imap_discard(cmd, bytes, len);
            return;
        }
        snprintf(line, sizeof line, "* ID (\"name\" \"mailvaultd\" \"version\" \"%s\")\r\n",
                 mv_version());
        conn_write_str(c, line);
        imap_reply(c, cmd->tag, "OK ID completed");
    } else if (strcmp(cmd->name, "LOGOUT") == 0 && imap_arg_count(cmd) == 0) {
        conn_write_str(c, "* BYE logging out\r\n");
        imap_reply(c, cmd->tag, "OK LOGOUT completed");
        conn_close_after_output(c);
    } else if (strcmp(cmd->name, "STARTTLS") == 0 && imap_arg_count(cmd) == 0) {
        if (c->tls || !tls_available()) {
            imap_reply(c, cmd->tag, c->tls ? "BAD TLS is already on" : "BAD STARTTLS unavailable");
        } else {
            imap_reply(c, cmd->tag, "OK begin TLS negotiation now");
            if (conn_start_tls(c) != 0) {
                conn_close_after_output(c);
            } else {
                imap_frame_reset(&s->frame); /* the input it framed was thrown away */
            }
        }
    } else if ((strcmp(cmd->name, "LOGIN") == 0 || strcmp(cmd->name, "AUTHENTICATE") == 0) &&
               !cmd->uid) {
        if (!s->login_allowed) {
            imap_reply(c, cmd->tag, "NO [PRIVACYREQUIRED] use STARTTLS first");
        } else if (strcmp(cmd->name, "AUTHENTICATE") == 0 && imap_arg_count(cmd) == 1 &&
                   imap_atom_is(imap_arg(cmd, 0), "PLAIN")) {
            snprintf(s->auth_tag, sizeof s->auth_tag, "%s", cmd->tag);
            conn_write_str(c, "+ \r\n");
            s->frame.raw_line = 1;
        } else {
            s->worker = imap_login_worker(s, cmd, NULL, 0);
            imap_post(c, bytes, len, cmd, 0);
            return; /* the job owns bytes and cmd */
        }
    } else if (strcmp(cmd->name, "CAPABILITY") == 0 || strcmp(cmd->name, "NOOP") == 0 ||
               strcmp(cmd->name, "LOGOUT") == 0 || strcmp(cmd->name, "STARTTLS") == 0) {
        imap_reply(c, cmd->tag, "BAD unexpected arguments");
    } else {
        imap_reply(c, cmd->tag, "BAD log in first (or unknown command)");
    }
    imap_discard(cmd, bytes, len);
}

/* The AUTHENTICATE PLAIN response line arrived. */
static void imap_sasl_line(struct conn *c, uint8_t *bytes, size_t len)
{
    struct imap_session *s = c->session;
    struct imap_command cmd;
    memset(&cmd, 0, sizeof cmd);
    cmd.first = IMAP_NODE_NONE;
    snprintf(cmd.tag, sizeof cmd.tag, "%s", s->auth_tag);
    snprintf(cmd.name, sizeof cmd.name, "AUTHENTICATE");
    s->frame.raw_line = 0;
    s->auth_tag[0] = '\0';
    s->worker = imap_login_worker(s, &cmd, bytes, len);
    imap_post(c, bytes, len, &cmd, 1);
}

static void imap_command(struct conn *c, uint8_t *bytes, size_t len)
{
    struct imap_session *s = c->session;
    struct imap_command cmd;
    char err[256];
    if (s->frame.raw_line && s->idling) {
        s->frame.raw_line = 0;
        s->in_idle = 0;
        s->idling = 0;
        imap_idle_list_remove(s);
        int done = (len == 6 && strncasecmp((const char *)bytes, "DONE\r\n", 6) == 0) ||
                   (len == 5 && strncasecmp((const char *)bytes, "DONE\n", 5) == 0);
        imap_reply(c, s->idle_tag, done ? "OK IDLE terminated" : "BAD expected DONE");
        free(bytes);
        return;
    }
    if (s->frame.raw_line) {
        imap_sasl_line(c, bytes, len);
        return;
    }
    int rc = imap_parse_command(bytes, len, &cmd, err, sizeof err);
    metrics_imap_start(&s->metrics_cmd, cmd.name, cmd.uid);
    if (rc != IMAP_PARSE_OK) {
        char line[512];
        snprintf(line, sizeof line, "BAD %s", rc == IMAP_PARSE_NOMEM ? "out of memory" : err);
        imap_reply(c, cmd.tag, line);
        OPENSSL_cleanse(bytes, len);
        free(bytes);
        return;
    }
    if (s->state == IMAP_NOT_AUTH) {
        imap_not_auth(c, &cmd, bytes, len);
        return;
    }
    if (strcmp(cmd.name, "STARTTLS") == 0 || strcmp(cmd.name, "LOGIN") == 0 ||
        strcmp(cmd.name, "AUTHENTICATE") == 0) {
        imap_reply(c, cmd.tag, "BAD already authenticated");
        imap_discard(&cmd, bytes, len);
        return;
    }
    /* RFC 6855 3: once UTF8=ACCEPT is on, 8-bit bytes in a quoted string must be UTF-8.
     * (No job is in flight here, so reading the flag the last job may have set is safe.) */
    if (s->utf8_accept && !imap_command_utf8_valid(&cmd)) {
        imap_reply(c, cmd.tag, "BAD a quoted string is not valid UTF-8");
        imap_discard(&cmd, bytes, len);
        return;
    }
    imap_post(c, bytes, len, &cmd, 0);
}

static void imap_session_input(struct conn *c)
{
    struct imap_session *s = c->session;
    if (s != NULL && s->kicked) {
        return; /* ended by a control request: BYE once the command in flight is done */
    }
    while (s != NULL && !c->dead && !c->busy && !c->closing && c->out.len < conn_output_max(c)) {
        size_t len = 0;
        uint64_t literal = 0;
        enum imap_frame_status f =
            imap_frame_next(&s->frame, &c->in, !s->authenticated, &len, &literal);
        if (f == FRAME_MORE) {
            return;
        }
        if (f == FRAME_CONTINUE) {
            conn_write_str(c, "+ ready for literal data\r\n");
            continue;
        }
        if (f == FRAME_LINE_TOO_LONG && !s->authenticated) {
            /* Before login nothing over prelogin_bytes_max is read: no discarding either. */
            conn_write_str(c, "* BYE command too long before login\r\n");
            conn_close_after_output(c);
            return;
        }
        if (f == FRAME_LINE_TOO_LONG_LITERAL_PLUS) {
            conn_write_str(c, "* BYE command line too long, and its literal cannot be "
                              "skipped\r\n");
            conn_close_after_output(c);
            return;
        }
        if (f == FRAME_LINE_BUSY) {
            imap_reply(c, s->frame.long_tag,
                       "NO [UNAVAILABLE] server busy receiving other long commands, try again "
                       "later");
            continue;
        }
        if (f == FRAME_LINE_TOO_LONG) {
            char line[96];
            snprintf(line, sizeof line, "BAD command line longer than %zu bytes (line_max)",
                     g_config.line_max);
            imap_reply(c, s->frame.long_tag, line);
            continue;
        }
        if (f == FRAME_LITERAL_PLUS_TOO_BIG || f == FRAME_LITERAL_PLUS_BUSY) {
            /* LITERAL+ (RFC 7888 4): the client sends the bytes anyway; they are not read. */
            conn_write_str(c, f == FRAME_LITERAL_PLUS_BUSY
                                  ? "* BYE [UNAVAILABLE] server busy receiving other literals, "
                                    "try again later\r\n"
                              : s->authenticated
                                  ? "* BYE [TOOBIG] literal too large\r\n"
                                  : "* BYE [TOOBIG] literal too large before login\r\n");
            conn_close_after_output(c);
            return;
        }
        if (f == FRAME_LITERAL_TOO_BIG || f == FRAME_LITERAL_BUSY) {
            char tag[IMAP_TAG_MAX + 1];
            (void)imap_parse_tag(c->in.data, len, tag); /* "": answered untagged */
            char line[160];
            if (f == FRAME_LITERAL_BUSY) {
                snprintf(line, sizeof line,
                         "NO [UNAVAILABLE] server busy receiving other literals, try again later");
            } else {
                snprintf(line, sizeof line, "NO [TOOBIG] literal of %llu bytes is over the limit%s",
                         (unsigned long long)literal, s->authenticated ? "" : " before login");
            }
            imap_reply(c, tag, line);
            buf_consume(&c->in, len);
            continue;
        }
        uint8_t *bytes = malloc(len + 1);
        if (bytes == NULL) {
            conn_write_str(c, "* BYE out of memory\r\n");
            conn_close_after_output(c);
            return;
        }
        memcpy(bytes, c->in.data, len);
        bytes[len] = '\0';
        OPENSSL_cleanse(c->in.data, len);
        buf_consume(&c->in, len);
        imap_command(c, bytes, len);
    }
}

/* ---- IDLE: the loop asks the worker for changes every IMAP_IDLE_POLL_MS ---- */

static void imap_poll_run(struct job *job)
{
    struct imap_session *s = job->arg;
    s->on_reader = job->lane == JOB_LANE_READ; /* imap_db: this thread's handle */
    if (s->idling && s->state == IMAP_SELECTED) {
        (void)imap_view_sync(s, &job->out, 1);
    }
    s->on_reader = 0;
}

static void imap_poll_done(struct job *job)
{
    struct conn *c = job->conn;
    if (!c->dead && job->out.len > 0) {
        conn_write(c, job->out.data, job->out.len);
    }
    buf_free(&job->out);
    free(job);
    conn_resume(c);
    struct imap_session *s = c->session;
    if (!c->dead && s != NULL && s->idle_notified && !c->busy) {
        imap_idle_post(c, s); /* a change was committed while this poll was in flight */
    }
}

static void imap_session_tick(struct conn *c, int64_t now_ms)
{
    struct imap_session *s = c->session;
    if (s == NULL || !s->idling || c->busy) {
        return;
    }
    if (now_ms >= s->next_poll_ms || s->idle_notified) {
        imap_idle_post(c, s);
    }
}

/* Asks the session's worker for changes now (IDLE). The session must not be busy. */
static void imap_idle_post(struct conn *c, struct imap_session *s)
{
    s->next_poll_ms = loop_now_ms() + IMAP_IDLE_POLL_MS;
    s->idle_notified = 0;
    struct job *job = calloc(1, sizeof *job);
    if (job == NULL) {
        return;
    }
    job->arg = s;
    job->conn = c;
    job->run = imap_poll_run;
    job->done = imap_poll_done;
    /* The sync only reads, as NOOP's does: on the reader thread when the store has a reader
     * handle (imap_command_lane, worker.c READERS). On the writer's short lane each sync
     * after a drain step's EXISTS made the next step give way once it had run
     * WORKER_DRAIN_MIN_MS, so a client in IDLE got its 1,200 queued messages in ~25 steps,
     * each with its own durable commit and its own sync. */
    job->lane = s->state == IMAP_SELECTED && s->store != NULL && s->store->reader != NULL
                    ? JOB_LANE_READ
                    : JOB_LANE_SHORT;
    s->last_lane = job->lane;
    c->busy = 1;
    job_user(job, s->is_placed ? s->placed : "");
    worker_post(s->worker, job);
}

static void imap_session_start(struct conn *c)
{
    struct imap_session *s = calloc(1, sizeof *s);
    if (s == NULL) {
        conn_write_str(c, "* BYE out of memory\r\n");
        conn_close_after_output(c);
        return;
    }
    s->conn = c;
    s->direct_fd = -1;
    s->tls = c->tls;
    s->login_allowed = c->tls || c->loopback || g_config.allow_plaintext;
    c->session = s;
    char line[256];
    snprintf(line, sizeof line, "* OK [CAPABILITY %s] mailvaultd ready\r\n", imap_capabilities(s));
    conn_write_str(c, line);
}

/* The session's end on its worker: the \Recent claim its view still owes (imap_recent.c),
 * then the view and the store. On the reader thread the claim does not wait for the lock; if
 * the writer holds it, the end goes on on the writer, which waits: dropped, the claim left
 * messages this session had shown as \Recent unclaimed, and the next session to select saw
 * them as recent too (RFC 3501 2.3.2: recent in one session). The reader posts that job
 * itself, as a reader's release is posted (worker.c READERS), not the end's done: at a stop
 * the readers' last jobs run before the writers are told to stop, so the writers still run
 * it, whereas the dones run only after every worker has ended and been freed (main.c), and a
 * post from there went to a freed worker. */
static void imap_end_done(struct job *job);

static void imap_end_run(struct job *job)
{
    struct imap_session *s = job->arg;
    if (s->store != NULL) {
        s->on_reader = job->lane == JOB_LANE_READ; /* imap_db: this thread's handle */
        imap_view_recent_settle(s);
        s->on_reader = 0;
        struct job *writer = job->lane == JOB_LANE_READ && s->view.recent_owed != 0
                                 ? calloc(1, sizeof *writer)
                                 : NULL;
        if (writer != NULL) { /* (out of memory: ends here, the claim dropped) */
            writer->arg = s;
            writer->run = imap_end_run;
            writer->done = imap_end_done;
            writer->lane = JOB_LANE_SHORT;
            writer->user = job->user;
            job->arg = NULL; /* the session is the writer job's now: its done frees it */
            worker_post(job->worker, writer); /* the store stays held for it */
            return;
        }
    }
    imap_view_free(&s->view);
    if (s->store != NULL) {
        if (job->lane == JOB_LANE_READ) { /* the table is the writer's (worker.c READERS) */
            worker_store_release_from_reader(job->worker, s->store);
        } else {
            worker_store_release(job->worker, s->store);
        }
        s->store = NULL;
    }
}

static void imap_end_done(struct job *job)
{
    struct imap_session *s = job->arg;
    if (s == NULL) { /* its end went on on the writer (imap_end_run) */
        free(job);
        return;
    }
    if (s->is_placed) { /* its store's hold, if open, keeps the user there (PLACEMENT) */
        worker_unplace(s->placed);
    }
    free(s);
    free(job);
}

static void imap_session_drained(struct conn *c)
{
    struct imap_session *s = c->session;
    struct imap_job *j = s != NULL ? s->stream_job : NULL;
    c->stream_wait = 0;
    if (j == NULL) {
        return;
    }
    s->stream_job = NULL;
    s->last_lane = j->job.lane;
    imap_direct_grant(c, s);
    worker_post(s->worker, &j->job); /* the next chunk, in the lane of the FETCH */
}

static void imap_session_end(struct conn *c)
{
    struct imap_session *s = c->session;
    c->session = NULL;
    if (s == NULL) {
        return;
    }
    imap_frame_reset(&s->frame); /* gives back its share of literal_total_max */
    if (s->stream_job != NULL) { /* a FETCH waiting for the client to read: dropped */
        imap_fetch_state_free(&s->fetch_more);
        imap_job_free(s->stream_job);
        s->stream_job = NULL;
    }
    imap_idle_list_remove(s);
    s->conn = NULL;
    if (s->user[0] != '\0') {
        log_event("logout %s from %s", s->user, c->peer);
    }
    if (s->worker == NULL) {
        free(s);
        return;
    }
    /* After any job of this session on the same worker (FIFO within the lane of the
     * session's last job, which is the only one that can still be queued): releases the
     * store there. */
    struct job *job = calloc(1, sizeof *job);
    if (job == NULL) {
        return; /* leaks the session rather than racing its job */
    }
    job->arg = s;
    job->run = imap_end_run;
    job->done = imap_end_done;
    job->lane = s->last_lane;
    job_user(job, s->is_placed ? s->placed : "");
    worker_post(s->worker, job);
}

/* ---- IMAP on conn.c ---- */

/* Not logged in yet (also a session that could not be made: it is closing). */
static int imap_session_prelogin(const struct conn *c)
{
    const struct imap_session *s = c->session;
    return s == NULL || !s->authenticated;
}

static int64_t imap_session_idle_timeout_ms(const struct conn *c)
{
    const struct imap_session *s = c->session;
    int64_t ms = (int64_t)g_config.idle_timeout_s * 1000;
    return s != NULL && s->in_idle ? IMAP_IDLE_TIMEOUT_FACTOR * ms : ms;
}

static int imap_session_connections_max(void)
{
    return g_config.connections_max;
}

const struct conn_proto_ops imap_conn_proto = {
    .name = "imap",
    .start = imap_session_start,
    .input = imap_session_input,
    .tick = imap_session_tick,
    .drained = imap_session_drained,
    .end = imap_session_end,
    .prelogin = imap_session_prelogin,
    .idle_timeout_ms = imap_session_idle_timeout_ms,
    .connections_max = imap_session_connections_max,
    .per_address_limit = 1,
    .bye_shutdown = "* BYE server shutting down\r\n",
    .bye_idle_timeout = "* BYE idle timeout\r\n",
    .bye_login_timeout = "* BYE login timeout\r\n",
    .bye_evicted = "* BYE too many connections: closing the oldest not logged in\r\n",
    .refuse_prefix = "* BYE ",
    .metric_gauge = METRIC_CONNECTIONS_IMAP,
    .metric_gauge_tls = METRIC_CONNECTIONS_IMAPS,
};

/* ---- the control socket's view (control.c) ---- */

const char *imap_session_user(const struct conn *c)
{
    const struct imap_session *s = c->ops == &imap_conn_proto ? c->session : NULL;
    /* authenticated is set on the loop once the login's job is done: s->user is final. */
    return s != NULL && !c->dead && s->authenticated ? s->user : NULL;
}

int imap_session_kick(struct conn *c, const char *text)
{
    struct imap_session *s = c->ops == &imap_conn_proto ? c->session : NULL;
    if (s == NULL || c->dead) {
        return 1;
    }
    s->kicked = 1;
    if (c->refs > 0) {
        return 0; /* a job holds the connection: its answer goes out first */
    }
    /* No job in flight (a FETCH waiting for its reader holds none): what is queued goes out
     * as far as the socket takes it, then the BYE, then the close. */
    c->refs++;
    conn_write_str(c, "* BYE ");
    conn_write_str(c, text);
    conn_write_str(c, "\r\n");
    conn_flush(c);
    conn_close(c, "ended by a control request");
    conn_release(c);
    return 1;
}

int imap_session_who(const struct conn *c, struct buf *out)
{
    const struct imap_session *s = c->ops == &imap_conn_proto ? c->session : NULL;
    const char *user = imap_session_user(c);
    if (s == NULL || user == NULL) {
        return 0;
    }
    int64_t now = loop_now_ms();
    buf_printf(out, "* session %s proto=imap client=", user);
    control_value(out, c->peer);
    buf_printf(out, " since=%lld idle_s=%lld state=%s mailbox=", control_wall_s(c->connected_ms),
               (long long)((now - c->last_active_ms) / 1000),
               s->in_idle ? "idle"
               : c->busy  ? "busy"
                          : "ready");
    control_value(out, s->shown_mailbox);
    buf_str(out, "\r\n");
    return 1;
}
