/*
 * control.c -- the control socket: a third protocol on the server's connections, spoken by
 * `mailvault who|kick|release|adopt` (docs/CONTROL.md has the protocol), as doveadm speaks
 * to Dovecot.
 *
 * AUTHORIZATION
 *   Only the Unix stream socket at control_socket speaks it, created owner-only (0600, the
 *   umask set around bind) by the account the server runs as: the file system's permissions
 *   are the authentication. Each request is logged with the peer's uid and pid
 *   (SO_PEERCRED); requests carry no secret.
 *
 * RELEASE, STEP BY STEP (all on the loop, the store work in jobs on the workers)
 *   1. The user is "held" (control_user_held): from now on LOGIN answers NO [UNAVAILABLE]
 *      and LMTP RCPT 451 (imap_cmd_auth.c, lmtp.c), checked on the worker, so a login that
 *      was queued before the hold and runs after it is refused too.
 *   2. Every IMAP session of the user ends with BYE [UNAVAILABLE] (imap_session_kick): one
 *      with a command in flight (an APPEND, a COPY) takes no new command, its answer goes
 *      out, and it ends on the next tick. LMTP transactions go on: a delivery that runs
 *      before step 4 commits (and is answered 250), one after it meets the fence (451).
 *   3. Once no session of the user is left, a job on every worker closes the user's store
 *      there (worker_store_close_user: a TRUNCATE checkpoint, then close) unless a session
 *      still holds it (a login that slipped in between: back to step 2).
 *   4. A job on the user's worker writes the fence (mv_store_release, under the store's lock
 *      taken exclusively, so no other process has it open either), and only then the answer
 *      is OK: the files are complete and nothing can be added to them on this node.
 *   Any step still unfinished at the deadline (wait=S, default 10 s) ends the release with
 *   NO and a reason; the fence is then not written and the user is served again. Releasing
 *   a released store is OK (the first marker is kept).
 *
 * LIMITATIONS
 *   Requests on one connection run one at a time (the connection is busy meanwhile); run
 *   several clients for parallel requests.
 */
#include "control.h"
#include "buf.h"
#include "config.h"
#include "conn.h"
#include "log.h"
#include "loop.h"
#include "mailvault.h"
#include "metrics.h"
#include "protocols.h"
#include "worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CONTROL_LINE_MAX       2048
#define CONTROL_WAIT_DEFAULT_S 10
#define CONTROL_WAIT_MAX_S     3600
#define CONTROL_NOTE_MAX       200  /* what the marker keeps (store_fence.c) */
#define CONTROL_FENCE_WAIT_MS  2000 /* one try at the store's lock (other processes) */
#define CONTROL_BYE_TEXT       "[UNAVAILABLE] your session was ended by the administrator"
#define CONTROL_BYE_RELEASE    "[UNAVAILABLE] this mailbox is being moved; try again later"

/* ---- users held by a release in progress (any thread) ---- */

struct control_hold {
    char user[MV_ADDRESS_MAX + 1];
    int count; /* releases of this user in progress */
};

static pthread_mutex_t control_hold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct control_hold *control_holds;
static size_t control_hold_count, control_hold_cap;

int control_user_held(const char *user)
{
    int held = 0;
    pthread_mutex_lock(&control_hold_lock);
    for (size_t i = 0; i < control_hold_count && !held; i++) {
        held = strcmp(control_holds[i].user, user) == 0;
    }
    pthread_mutex_unlock(&control_hold_lock);
    return held;
}

static int control_hold_add(const char *user)
{
    int rc = 0;
    pthread_mutex_lock(&control_hold_lock);
    size_t i = 0;
    while (i < control_hold_count && strcmp(control_holds[i].user, user) != 0) {
        i++;
    }
    if (i == control_hold_count) {
        if (control_hold_count == control_hold_cap) {
            size_t cap = control_hold_cap == 0 ? 8 : control_hold_cap * 2;
            struct control_hold *more = realloc(control_holds, cap * sizeof *more);
            if (more == NULL) {
                rc = -1;
                goto out;
            }
            control_holds = more;
            control_hold_cap = cap;
        }
        snprintf(control_holds[i].user, sizeof control_holds[i].user, "%s", user);
        control_holds[i].count = 0;
        control_hold_count++;
    }
    control_holds[i].count++;
out:
    pthread_mutex_unlock(&control_hold_lock);
    return rc;
}

static void control_hold_remove(const char *user)
{
    pthread_mutex_lock(&control_hold_lock);
    for (size_t i = 0; i < control_hold_count; i++) {
        if (strcmp(control_holds[i].user, user) == 0) {
            if (--control_holds[i].count == 0) {
                control_holds[i] = control_holds[--control_hold_count];
            }
            break;
        }
    }
    if (control_hold_count == 0) {
        free(control_holds);
        control_holds = NULL;
        control_hold_cap = 0;
    }
    pthread_mutex_unlock(&control_hold_lock);
}

/* ---- the protocol's values ---- */

void control_value(struct buf *b, const char *text)
{
    static const char hex[] = "0123456789ABCDEF";
    if (text == NULL || text[0] == '\0') {
        buf_str(b, "-"); /* empty; a literal "-" is sent as %2D */
        return;
    }
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        if (*p > 0x20 && *p < 0x7f && *p != '%' &&
            !(p == (const unsigned char *)text && *p == '-' && p[1] == '\0')) {
            buf_add(b, p, 1);
        } else {
            char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            buf_add(b, esc, 3);
        }
    }
}

long long control_wall_s(int64_t loop_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wall_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return (long long)((wall_ms - (loop_now_ms() - loop_ms)) / 1000);
}

/* ---- sessions and requests ---- */

enum control_kind { CONTROL_WHO = 1, CONTROL_KICK, CONTROL_RELEASE, CONTROL_ADOPT };
enum control_phase { PHASE_KICK = 1, PHASE_CLOSE, PHASE_FENCE, PHASE_DONE };

struct control_session {
    struct conn *conn;
    char who[256]; /* "local uid U pid P" for the log (c->peer) */
    /* The request in progress (the connection is busy until it is answered). */
    enum control_kind kind;
    enum control_phase phase;
    char user[MV_ADDRESS_MAX + 1];
    char note[CONTROL_NOTE_MAX + 1];
    int held; /* control_hold_add() done */
    int64_t started_ms, deadline_ms;
    int wait_s;
    int jobs_out;       /* jobs posted and not done */
    int store_busy;     /* a close job found the store in use (this round) */
    int store_was_busy; /* ... in some round: for the timeout's message */
    int stores_closed;  /* handles closed by the close jobs */
    int sessions_ended; /* IMAP sessions ended */
    int sessions_left;  /* at the last look, with a command in flight */
    int rounds;         /* close-and-fence attempts */
    int already;        /* the fence was there before this release */
    int fence_rc;
    char fence_err[512];
    struct buf list; /* who: the workers' store lines */
    int dead;        /* the connection is gone: freed when jobs_out is 0 */
    int in_request;  /* control_request is on the stack: finishing must not re-enter input */
    struct control_session *prev, *next; /* the list of requests in progress */
};

/* Sessions with a request in progress, for control_tick. Loop thread only. */
static struct control_session *control_active;

static void control_active_add(struct control_session *s)
{
    s->prev = NULL;
    s->next = control_active;
    if (control_active != NULL) {
        control_active->prev = s;
    }
    control_active = s;
}

static void control_active_remove(struct control_session *s)
{
    if (s->prev != NULL) {
        s->prev->next = s->next;
    } else if (control_active == s) {
        control_active = s->next;
    } else {
        return; /* not listed */
    }
    if (s->next != NULL) {
        s->next->prev = s->prev;
    }
    s->prev = s->next = NULL;
}

static void control_free(struct control_session *s)
{
    buf_free(&s->list);
    free(s);
}

static void control_reply(struct control_session *s, const char *status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void control_reply(struct control_session *s, const char *status, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    text[strcspn(text, "\r\n")] = '\0'; /* one line, whatever a message held */
    if (!s->dead) {
        conn_write_str(s->conn, status);
        conn_write_str(s->conn, " ");
        conn_write_str(s->conn, text);
        conn_write_str(s->conn, "\r\n");
    }
    log_msg(status[0] == 'O' ? LOG_LEVEL_INFO : LOG_LEVEL_WARNING, "control %s: %s %s", s->who,
            status, text);
}

/* A data line of the reply ("* TEXT"), before its final OK / NO: the figures of a kick or
 * release as key=value, for `mailvault kick|release --json` (the final line's text is for
 * people). Values here are numbers, yes/no and the user address, which has no space. */
static void control_data(struct control_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void control_data(struct control_session *s, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    text[strcspn(text, "\r\n")] = '\0';
    if (!s->dead) {
        conn_write_str(s->conn, "* ");
        conn_write_str(s->conn, text);
        conn_write_str(s->conn, "\r\n");
    }
}

/* The figures of a kick or release so far (docs/CONTROL.md: "kick USER ..." and
 * "release USER ..." data lines). */
static void control_figures(struct control_session *s, int released)
{
    if (s->kind == CONTROL_KICK) {
        control_data(s, "kick %s sessions_ended=%d sessions_left=%d", s->user, s->sessions_ended,
                     s->sessions_left);
        return;
    }
    control_data(s,
                 "release %s released=%s already=%s ms=%lld sessions_ended=%d sessions_left=%d "
                 "stores_closed=%d",
                 s->user, released ? "yes" : "no", released && s->already ? "yes" : "no",
                 (long long)(loop_now_ms() - s->started_ms), s->sessions_ended, s->sessions_left,
                 s->stores_closed);
}

/* The response code of a NO for a library failure (docs/CONTROL.md lists them). */
static const char *control_code(int rc)
{
    switch (rc) {
    case MV_ENOTFOUND:
        return "[NOUSER] ";
    case MV_EBUSY:
        return "[INUSE] ";
    case MV_EINVAL:
        return "[BADREQUEST] ";
    default:
        return "[ERROR] ";
    }
}

/* The request is answered: the connection takes the next one. */
static void control_finish(struct control_session *s)
{
    if (s->held) {
        control_hold_remove(s->user);
        s->held = 0;
    }
    control_active_remove(s);
    s->phase = PHASE_DONE;
    s->kind = 0;
    buf_free(&s->list);
    if (s->dead) {
        if (s->jobs_out == 0) {
            control_free(s);
        }
        return;
    }
    if (s->in_request) {
        s->conn->busy = 0; /* the input loop that called us goes on */
        return;
    }
    conn_resume(s->conn);
}

/* ---- jobs on the workers ---- */

enum control_job_kind { JOB_LIST = 1, JOB_CLOSE, JOB_FENCE, JOB_ADOPT };

struct control_job {
    struct job job;
    struct control_session *s;
    enum control_job_kind kind;
    char user[MV_ADDRESS_MAX + 1];
    char note[CONTROL_NOTE_MAX + 1];
    uint32_t wait_ms;
    int rc;
    int closed;
    int placed; /* the job holds the user's placement (worker.c PLACEMENT) until done */
    char err[512];
};

static void control_job_run(struct job *job)
{
    struct control_job *j = (struct control_job *)job;
    struct mv_store_options opts = config_store_options(worker_config(job->worker));
    switch (j->kind) {
    case JOB_LIST:
        worker_store_list(job->worker, &job->out);
        break;
    case JOB_CLOSE:
        j->rc = worker_store_close_user(job->worker, j->user, &j->closed);
        break;
    case JOB_FENCE:
        /* A store left open here would keep the lock shared: close it first (the close jobs
         * did, unless a session took it since, which the hold refuses). */
        j->rc = worker_store_close_user(job->worker, j->user, &j->closed);
        if (j->rc == MV_OK) {
            j->closed |= (mv_store_released(j->user, &opts) == 1) << 1; /* already: said so */
            j->rc = mv_store_release(j->user, &opts, j->note[0] != '\0' ? j->note : NULL,
                                     j->wait_ms, j->err, sizeof j->err);
        } else {
            snprintf(j->err, sizeof j->err, "a session still uses the store");
        }
        break;
    case JOB_ADOPT:
        j->rc = mv_store_adopt(j->user, &opts, j->err, sizeof j->err);
        break;
    }
}

static void control_job_done(struct job *job);

/* Posts kind to w, or with w NULL to the worker the session's user is placed on, holding
 * the placement until the job is done (worker.c PLACEMENT). */
static int control_post(struct control_session *s,
                        struct worker *w,
                        enum control_job_kind kind,
                        uint32_t wait_ms)
{
    struct control_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        return -1;
    }
    j->s = s;
    j->kind = kind;
    j->wait_ms = wait_ms;
    snprintf(j->user, sizeof j->user, "%s", s->user);
    snprintf(j->note, sizeof j->note, "%s", s->note);
    j->job.conn = s->conn;
    job_user(&j->job, j->user); /* the store it closes, fences or adopts (worker.c WRITERS) */
    j->job.run = control_job_run;
    j->job.done = control_job_done;
    s->jobs_out++;
    j->placed = w == NULL;
    worker_post(w != NULL ? w : worker_place(j->user), &j->job);
    return 0;
}

/* Posts kind to every worker; -1 if none could be posted. */
static int control_post_all(struct control_session *s, enum control_job_kind kind)
{
    int posted = 0;
    for (int i = 0; i < worker_total(); i++) {
        posted += control_post(s, worker_at(i), kind, 0) == 0;
    }
    return posted > 0 ? 0 : -1;
}

static void control_who_answer(struct control_session *s);
static void control_step(struct control_session *s);

static void control_job_done(struct job *job)
{
    struct control_job *j = (struct control_job *)job;
    struct control_session *s = j->s;
    if (j->placed) {
        worker_unplace(j->user);
    }
    s->jobs_out--;
    switch (j->kind) {
    case JOB_LIST:
        buf_add(&s->list, job->out.data, job->out.len);
        break;
    case JOB_CLOSE:
        s->store_busy |= j->rc == MV_EBUSY;
        s->stores_closed += j->closed;
        break;
    case JOB_FENCE:
        s->stores_closed += j->closed & 1;
        s->already = (j->closed & 2) != 0;
        s->fence_rc = j->rc;
        snprintf(s->fence_err, sizeof s->fence_err, "%s", j->err);
        break;
    case JOB_ADOPT:
        if (j->rc == MV_OK) {
            control_reply(s, "OK", "adopted %s: served on this node", s->user);
        } else {
            control_reply(s, "NO", "%sadopt %s failed: %s", control_code(j->rc), s->user,
                          j->err[0] != '\0' ? j->err : mv_strerror(j->rc));
        }
        break;
    }
    buf_free(&job->out);
    free(j);
    if (s->jobs_out > 0) {
        return;
    }
    if (s->kind == CONTROL_ADOPT) {
        control_finish(s);
    } else if (s->kind == CONTROL_WHO) {
        control_who_answer(s);
    } else if (s->kind == CONTROL_RELEASE || s->kind == CONTROL_KICK) {
        control_step(s); /* the next phase, now rather than on the next tick */
    } else if (s->dead) {
        control_free(s);
    }
}

/* ---- who ---- */

static void control_who_answer(struct control_session *s)
{
    struct buf out = {0};
    buf_add(&out, s->list.data, s->list.len);
    size_t stores = 0, sessions = 0;
    for (size_t i = 0; i < s->list.len; i++) {
        stores += s->list.data[i] == '\n';
    }
    for (struct conn *c = conn_next(NULL); c != NULL; c = conn_next(c)) {
        sessions += (size_t)imap_session_who(c, &out);
        sessions += (size_t)lmtp_session_who(c, &out);
    }
    if (out.oom) {
        buf_free(&out);
        control_reply(s, "NO", "[ERROR] out of memory");
    } else {
        if (!s->dead) {
            conn_write(s->conn, out.data, out.len);
        }
        buf_free(&out);
        control_reply(s, "OK", "%zu open stores, %zu sessions", stores, sessions);
    }
    control_finish(s);
}

/* ---- kick and release ---- */

/* Ends the user's IMAP sessions that have no command in flight; the others take no new
 * command and are counted in sessions_left. */
static void control_kick_sessions(struct control_session *s)
{
    const char *text = s->kind == CONTROL_RELEASE ? CONTROL_BYE_RELEASE : CONTROL_BYE_TEXT;
    s->sessions_left = 0;
    for (struct conn *c = conn_next(NULL), *next; c != NULL; c = next) {
        next = conn_next(c); /* c may leave the list */
        const char *user = imap_session_user(c);
        if (user == NULL || strcmp(user, s->user) != 0) {
            continue;
        }
        if (imap_session_kick(c, text)) {
            s->sessions_ended++;
        } else {
            s->sessions_left++;
        }
    }
}

static void control_fail_deadline(struct control_session *s)
{
    const char *what = s->sessions_left > 0 ? "sessions still running a command"
                       : s->store_was_busy  ? "the store still in use on this server"
                                            : "the store still open in another program (a "
                                              "mailvault command, or another server on this "
                                              "root)";
    /* The library's busy message speaks to a tool that found a server in its way; here the
     * server is the one asking, and `what` says it all. */
    const char *detail = s->fence_rc == MV_EBUSY ? "" : s->fence_err;
    control_figures(s, 0);
    if (s->kind == CONTROL_KICK) {
        control_reply(s, "NO",
                      "[TIMEOUT] kick %s: %d sessions ended, %d still running a command after %d s",
                      s->user, s->sessions_ended, s->sessions_left, s->wait_s);
    } else {
        control_reply(s, "NO",
                      "[TIMEOUT] release %s timed out after %d s (%s%s%s): NOT released, this node "
                      "still serves it; try again, or with a longer wait",
                      s->user, s->wait_s, what, detail[0] != '\0' ? ": " : "", detail);
    }
    control_finish(s);
}

/* Moves a kick or release on as far as it can now (on the tick, and when its jobs are done). */
static void control_step(struct control_session *s)
{
    if (s->jobs_out > 0) {
        return; /* the jobs' done() calls back */
    }
    if (s->dead && s->phase != PHASE_FENCE) {
        log_warning("control %s: %s %s abandoned: the client went away", s->who,
                    s->kind == CONTROL_KICK ? "kick" : "release", s->user);
        control_finish(s);
        return;
    }
    if (s->phase == PHASE_FENCE) { /* the fence job is back */
        if (s->fence_rc == MV_OK) {
            control_figures(s, 1);
            control_reply(s, "OK",
                          "released %s%s in %lld ms: %d sessions ended, %d store handles "
                          "closed; the store is complete on disk and this node takes no more "
                          "mail for it",
                          s->user, s->already ? " (it already was)" : "",
                          (long long)(loop_now_ms() - s->started_ms), s->sessions_ended,
                          s->stores_closed);
            control_finish(s);
            return;
        }
        if (s->fence_rc != MV_EBUSY) {
            control_figures(s, 0);
            control_reply(s, "NO", "%srelease %s failed: %s; NOT released",
                          control_code(s->fence_rc), s->user,
                          s->fence_err[0] != '\0' ? s->fence_err : mv_strerror(s->fence_rc));
            control_finish(s);
            return;
        }
        /* Another program had it open: again from the next tick until the deadline. */
        s->phase = PHASE_KICK;
        return;
    }
    if (s->phase == PHASE_CLOSE) { /* the close jobs are back */
        if (s->store_busy) {
            /* A session's end has not reached its worker yet, or a login slipped in before
             * the hold: again from the next tick (not at once: no ping-pong of jobs). */
            s->store_was_busy = 1;
            s->store_busy = 0;
            s->phase = PHASE_KICK;
            return;
        }
        int64_t left_ms = s->deadline_ms - loop_now_ms();
        uint32_t wait_ms = left_ms < 0                       ? 0
                           : left_ms > CONTROL_FENCE_WAIT_MS ? CONTROL_FENCE_WAIT_MS
                                                             : (uint32_t)left_ms;
        s->phase = PHASE_FENCE;
        s->fence_rc = MV_ERROR;
        s->fence_err[0] = '\0';
        if (control_post(s, NULL, JOB_FENCE, wait_ms) != 0) {
            control_reply(s, "NO", "[ERROR] release %s: out of memory; NOT released", s->user);
            control_finish(s);
        }
        return;
    }
    control_kick_sessions(s);
    if (s->kind == CONTROL_KICK && s->sessions_left == 0) {
        control_figures(s, 0);
        control_reply(s, "OK", "kicked %s: %d sessions ended", s->user, s->sessions_ended);
        control_finish(s);
        return;
    }
    /* The deadline ends the waiting, not a first try (wait=0: release only if nothing is
     * in the way right now). */
    if (loop_now_ms() >= s->deadline_ms && (s->rounds > 0 || s->sessions_left > 0)) {
        control_fail_deadline(s);
        return;
    }
    if (s->kind == CONTROL_RELEASE && s->sessions_left == 0) {
        s->rounds++;
        s->phase = PHASE_CLOSE;
        if (control_post_all(s, JOB_CLOSE) != 0) {
            control_reply(s, "NO", "[ERROR] release %s: out of memory; NOT released", s->user);
            control_finish(s);
        }
    }
}

void control_tick(int64_t now_ms)
{
    (void)now_ms;
    for (struct control_session *s = control_active, *next; s != NULL; s = next) {
        next = s->next;
        if (s->kind == CONTROL_KICK || s->kind == CONTROL_RELEASE) {
            control_step(s);
        }
    }
}

/* ---- parsing a request ---- */

/* "wait=S" and "note=TEXT" (the rest of the line) after USER. 0, or -1 with the reply sent. */
static int control_options(struct control_session *s, char *rest, int allow_note)
{
    s->wait_s = CONTROL_WAIT_DEFAULT_S;
    s->note[0] = '\0';
    while (rest != NULL && *rest != '\0') {
        while (*rest == ' ') {
            rest++;
        }
        if (*rest == '\0') {
            break;
        }
        if (allow_note && strncmp(rest, "note=", 5) == 0) {
            snprintf(s->note, sizeof s->note, "%s", rest + 5);
            break;
        }
        char *end = strchr(rest, ' ');
        if (end != NULL) {
            *end++ = '\0';
        }
        char *num_end = NULL;
        long wait = strncmp(rest, "wait=", 5) == 0 ? strtol(rest + 5, &num_end, 10) : -1;
        if (num_end == NULL || num_end == rest + 5 || *num_end != '\0' || wait < 0 ||
            wait > CONTROL_WAIT_MAX_S) {
            control_reply(s, "NO",
                          "[BADREQUEST] bad argument \"%.60s\" (expected wait=SECONDS, 0..%d%s)",
                          rest, CONTROL_WAIT_MAX_S, allow_note ? ", or note=TEXT last" : "");
            return -1;
        }
        s->wait_s = (int)wait;
        rest = end;
    }
    return 0;
}

static void control_start_kick(struct control_session *s, enum control_kind kind)
{
    s->kind = kind;
    s->phase = PHASE_KICK;
    s->sessions_ended = s->sessions_left = s->stores_closed = s->rounds = 0;
    s->store_busy = s->store_was_busy = 0;
    s->fence_err[0] = '\0';
    s->started_ms = loop_now_ms();
    s->deadline_ms = s->started_ms + (int64_t)s->wait_s * 1000;
    if (kind == CONTROL_RELEASE) {
        if (control_hold_add(s->user) != 0) {
            control_reply(s, "NO", "[ERROR] out of memory");
            s->kind = 0;
            return;
        }
        s->held = 1;
    }
    s->conn->busy = 1;
    control_active_add(s);
    control_step(s);
}

static void control_request_run(struct control_session *s, char *verb, char *arg, char *rest);

static void control_request(struct control_session *s, char *line)
{
    for (char *p = line; *p != '\0'; p++) {
        *p = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p; /* for the log and the note */
    }
    log_info("control %s: %s", s->who, line); /* requests hold no secret */
    char *verb = line, *arg = strchr(line, ' ');
    if (arg != NULL) {
        *arg++ = '\0';
    }
    char *rest = arg != NULL ? strchr(arg, ' ') : NULL;
    if (rest != NULL) {
        *rest++ = '\0';
    }
    s->in_request = 1;
    control_request_run(s, verb, arg, rest);
    s->in_request = 0;
}

static void control_request_run(struct control_session *s, char *verb, char *arg, char *rest)
{
    if (strcmp(verb, "who") == 0 && arg == NULL) {
        s->kind = CONTROL_WHO;
        s->list.len = 0;
        s->conn->busy = 1;
        if (control_post_all(s, JOB_LIST) != 0) {
            s->kind = 0;
            s->conn->busy = 0;
            control_reply(s, "NO", "[ERROR] out of memory");
        }
        return;
    }
    if (strcmp(verb, "quit") == 0 && arg == NULL) {
        control_reply(s, "OK", "bye");
        conn_close_after_output(s->conn);
        return;
    }
    int known =
        strcmp(verb, "kick") == 0 || strcmp(verb, "release") == 0 || strcmp(verb, "adopt") == 0;
    if (!known) {
        control_reply(s, "NO",
                      "[BADREQUEST] unknown request \"%.40s\" (who, kick USER, release USER, adopt "
                      "USER, quit)",
                      verb);
        return;
    }
    char err[256] = "";
    if (arg == NULL ||
        mv_address_normalize(arg, s->user, sizeof s->user, err, sizeof err) != MV_OK) {
        control_reply(s, "NO", "[BADREQUEST] %s needs a user address%s%s", verb,
                      err[0] != '\0' ? ": " : "", err);
        return;
    }
    if (control_options(s, rest, strcmp(verb, "release") == 0) != 0) {
        return;
    }
    if (strcmp(verb, "adopt") == 0) {
        if (control_user_held(s->user)) {
            control_reply(s, "NO", "[INUSE] a release of %s is in progress", s->user);
            return;
        }
        s->kind = CONTROL_ADOPT;
        s->conn->busy = 1;
        if (control_post(s, NULL, JOB_ADOPT, 0) != 0) {
            s->kind = 0;
            s->conn->busy = 0;
            control_reply(s, "NO", "[ERROR] out of memory");
        }
        return;
    }
    control_start_kick(s, strcmp(verb, "kick") == 0 ? CONTROL_KICK : CONTROL_RELEASE);
}

/* ---- the connection's protocol entry points ---- */

static void control_session_start(struct conn *c)
{
    struct control_session *s = calloc(1, sizeof *s);
    if (s == NULL) {
        conn_write_str(c, "NO out of memory\r\n");
        conn_close_after_output(c);
        return;
    }
    s->conn = c;
    snprintf(s->who, sizeof s->who, "%s", c->peer); /* "local uid U pid P" (conn.c) */
    c->session = s;
    conn_write_str(c, "OK mailvaultd control ready\r\n");
}

static void control_session_input(struct conn *c)
{
    struct control_session *s = c->session;
    while (s != NULL && !c->dead && !c->busy && !c->closing && c->out.len < conn_output_max(c)) {
        char *nl = c->in.len > 0 ? memchr(c->in.data, '\n', c->in.len) : NULL;
        if (nl == NULL) {
            if (c->in.len >= CONTROL_LINE_MAX) {
                conn_write_str(c, "NO request line too long\r\n");
                conn_close_after_output(c);
            }
            return;
        }
        size_t n = (size_t)(nl - c->in.data) + 1, len = n - 1;
        if (len > 0 && c->in.data[len - 1] == '\r') {
            len--;
        }
        char line[CONTROL_LINE_MAX];
        if (len >= sizeof line) {
            buf_consume(&c->in, n);
            control_reply(s, "NO", "[BADREQUEST] request line too long");
            continue;
        }
        memcpy(line, c->in.data, len);
        line[len] = '\0';
        buf_consume(&c->in, n);
        if (len == 0) {
            continue;
        }
        control_request(s, line);
    }
}

static void control_session_end(struct conn *c)
{
    struct control_session *s = c->session;
    c->session = NULL;
    if (s == NULL) {
        return;
    }
    s->dead = 1;
    if (s->kind == CONTROL_KICK || s->kind == CONTROL_RELEASE) {
        return; /* control_step notices on the tick, or the fence's answer ends it */
    }
    if (s->jobs_out == 0) {
        control_free(s);
    }
}

/* ---- control on conn.c ---- */

#define CONTROL_CONNECTIONS_MAX 16

static int control_connections_max(void)
{
    return CONTROL_CONNECTIONS_MAX;
}

/* A pool of its own (IMAP clients cannot take its slots, nor it theirs), no login phase,
 * no per-address count (every peer is local); idle ones close after idle_timeout_s. */
const struct conn_proto_ops control_conn_proto = {
    .name = "control",
    .start = control_session_start,
    .input = control_session_input,
    .end = control_session_end,
    .connections_max = control_connections_max,
    .per_address_limit = 0,
    .bye_shutdown = "NO server shutting down\r\n",
    .bye_idle_timeout = "NO idle timeout\r\n",
    .refuse_prefix = "NO ",
    .metric_gauge = METRIC_CONNECTIONS_CONTROL,
    .metric_gauge_tls = METRIC_CONNECTIONS_CONTROL,
};

/* ---- the listening socket ---- */

static int control_fd = -1;
static struct loop_handler control_handler;
static char control_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static dev_t control_dev;
static ino_t control_ino;

static void control_on_listen(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    conn_accept(control_fd, &control_conn_proto, 0);
}

/* An existing path is taken over only if it is a stale socket of this account: nothing
 * listens on it (a second server on the same root would). 0, or -1 with err. */
static int control_take_over(const char *path, const struct sockaddr_un *sa, char *err, size_t size)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) {
            return 0;
        }
        snprintf(err, size, "control_socket %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, size,
                 "control_socket %s exists and is not a socket: remove it or set "
                 "control_socket elsewhere",
                 path);
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(err, size, "control_socket %s belongs to uid %u, not to this server (uid %u)",
                 path, (unsigned)st.st_uid, (unsigned)geteuid());
        return -1;
    }
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) {
        snprintf(err, size, "control_socket: socket: %s", strerror(errno));
        return -1;
    }
    int rc = connect(probe, (const struct sockaddr *)sa, sizeof *sa);
    int e = errno;
    close(probe);
    if (rc == 0) {
        snprintf(err, size,
                 "control_socket %s: another mailvaultd listens there (the same "
                 "store root?): stop it first",
                 path);
        return -1;
    }
    if (e != ECONNREFUSED) {
        snprintf(err, size, "control_socket %s: cannot tell whether it is in use: %s", path,
                 strerror(e));
        return -1;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, size, "control_socket %s: cannot remove the stale socket: %s", path,
                 strerror(errno));
        return -1;
    }
    log_event("control socket %s: removed a stale socket (a server that did not stop cleanly)",
              path);
    return 0;
}

int control_listen(const char *path, char *err, size_t err_size)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, err_size, "control_socket %s: longer than %zu bytes (a Unix socket's limit)",
                 path, sizeof sa.sun_path - 1);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (control_take_over(path, &sa, err, err_size) != 0) {
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_size, "control_socket: socket: %s", strerror(errno));
        return -1;
    }
    /* Owner-only from the start: no moment at which another account could connect. The
     * umask is the process's, so this runs before any thread exists (main.c). */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    umask(old);
    struct stat st;
    if (rc != 0 || listen(fd, 16) != 0 || stat(path, &st) != 0) {
        e = rc != 0 ? e : errno;
        snprintf(err, err_size, "control_socket %s: %s", path, strerror(e));
        close(fd);
        return -1;
    }
    control_dev = st.st_dev;
    control_ino = st.st_ino;
    control_handler.fn = control_on_listen;
    if (loop_add(fd, EPOLLIN, &control_handler) != 0) {
        snprintf(err, err_size, "control_socket %s: cannot watch it", path);
        close(fd);
        unlink(path);
        return -1;
    }
    control_fd = fd;
    snprintf(control_path, sizeof control_path, "%s", path);
    log_event("control socket %s (mode 0600)", path);
    return 0;
}

void control_shutdown(void)
{
    while (control_active != NULL) {
        struct control_session *s = control_active;
        s->dead = 1;     /* conn_shutdown_all closed its connection */
        s->jobs_out = 0; /* the workers have stopped: every job ran and was collected */
        log_warning("control %s: %s of %s not finished: the server stopped", s->who,
                    s->kind == CONTROL_KICK ? "kick" : "release", s->user);
        control_finish(s);
    }
}

void control_close(void)
{
    if (control_fd < 0) {
        return;
    }
    close(control_fd);
    control_fd = -1;
    /* Only our own socket: another server may have replaced it meanwhile. */
    struct stat st;
    if (lstat(control_path, &st) == 0 && st.st_dev == control_dev && st.st_ino == control_ino) {
        unlink(control_path);
    }
}
