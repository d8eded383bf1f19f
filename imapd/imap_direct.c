/*
 * imap_direct.c -- direct sending: a command's job writes its answer to the client's socket
 * itself instead of handing it to the loop thread.
 *
 * WHY
 *   A job's output left to the loop waits for the loop thread to wake after the job (on this
 *   kind of machine ~0.1-1 ms after an idle moment); for a short command that is most of the
 *   answer's time (issue 13: STORE's p50 and p99 at 10 clients above Dovecot's, FETCH of 50
 *   messages ~1 ms slower after an idle moment).
 *
 * THE RULES
 *   - The loop grants it (imap_direct_grant) when it posts a command's job on a plain
 *     connection (no TLS: the TLS state is the loop's) with nothing of the connection's
 *     output queued or held, so no byte the job writes can overtake one the loop still has.
 *     While the job runs the connection is busy: the loop queues whatever it would write and
 *     reads no command, so what the job sends comes before anything later.
 *   - The job gets a duplicate of the descriptor: a close of the connection meanwhile cannot
 *     hand the number to another connection while the job may still write to it.
 *   - The job stops writing at the first send the socket does not take whole (direct_off);
 *     the loop writes the rest, after it (imap_direct_send).
 *   - What the loop decides about an answer stays with the loop: a failed login's answer is
 *     held (throttle.c), a LOGOUT's or an out-of-memory BYE closes the connection after it;
 *     those are never sent by the job (imap_job_run). Everything the loop does after the job
 *     (IDLE's raw line mode, the login's state) happens before it reads the client's next
 *     command, which it only reads once the job is done, so a client that answers at once
 *     (DONE after "+ idling") is read in the new state.
 *   - After the job the loop closes the duplicate and counts the bytes as its own
 *     (imap_direct_end): bytes out, last activity, mailvaultd_direct_bytes_total.
 */
#include "imap_session.h"
#include "loop.h"
#include "metrics.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

void imap_direct_grant(struct conn *c, struct imap_session *s)
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

void imap_direct_end(struct conn *c, struct imap_session *s)
{
    if (s->direct_fd >= 0) {
        close(s->direct_fd);
        s->direct_fd = -1;
    }
    c->job_writes = 0;
    if (s->direct_sent > 0) {
        metrics_direct_add(s->direct_sent);
        c->bytes_out += s->direct_sent;
        c->last_active_ms = loop_now_ms();
        s->direct_sent = 0;
    }
}

void imap_direct_send(struct imap_ctx *x, size_t min)
{
    struct imap_session *s = x->s;
    struct buf *out = x->out;
    if (s->direct_fd < 0 || s->direct_off || out->oom || out->len < min) {
        return;
    }
    ssize_t n = send(s->direct_fd, out->data, out->len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
        s->direct_sent += (uint64_t)n;
        buf_consume(out, (size_t)n);
    }
    if (out->len != 0) {
        s->direct_off = 1; /* full, or an error the loop's own write then reports */
    }
}
