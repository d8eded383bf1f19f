/*
 * test_conn_stream.c -- a streamed response's hand-over from the worker to the socket
 * (imapd/conn.c: conn_write_buf, conn_stream_continue; issue 13, a FETCH of whole messages).
 * A connection of the test's own on one end of a socketpair; nothing here waits on time.
 *
 *   - conn_write_buf() hands a chunk's memory over when nothing is queued (no copy on the
 *     loop) and leaves the caller the output's old, empty buffer; behind queued bytes it
 *     appends them. Either way the bytes go out in order.
 *   - conn_stream_continue() asks for the next chunk before it sends this one when less
 *     than CONN_STREAM_RESUME_BELOW is queued, so the worker makes it while the loop
 *     writes (the old code sent first and asked after: the worker waited for every
 *     chunk's send). With more queued it asks only once a flush got below the mark.
 *   - A connection whose job writes to the socket itself (job_writes: a FETCH, imapd/
 *     imap_fetch.c "Direct sending", through a duplicate of the descriptor) is shut down
 *     when it is closed, so the job's next write fails and the client sees the end; a plain
 *     close() would leave the socket open through the duplicate and the job writing on.
 */
#include "harness.h"

#include "../imapd/buf.h"
#include "../imapd/config.h"
#include "../imapd/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct config g_config; /* main.c's, which is not linked here */

/* What the connection's drained hook saw when it was called. */
static int cs_calls;
static uint64_t cs_sent_at_call;
static size_t cs_queued_at_call;

static void cs_drained(struct conn *c)
{
    cs_calls++;
    cs_sent_at_call = c->bytes_out;
    cs_queued_at_call = c->out.len;
    c->stream_wait = 0; /* as imap_session_drained: the next chunk is posted */
}

static const struct conn_proto_ops cs_ops = {.name = "test", .drained = cs_drained};

/* A connection on sv[0] of a fresh socketpair (non-blocking, as accepted ones are). */
static int cs_open(struct conn *c, int sv[2])
{
    memset(c, 0, sizeof *c);
    cs_calls = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        return -1;
    }
    (void)fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    c->fd = sv[0];
    c->ops = &cs_ops;
    c->busy = 1;
    return 0;
}

/* A buffer of n bytes, byte i = (i * 7 + seed) & 0xff. */
static int cs_fill(struct buf *b, size_t n, unsigned seed)
{
    if (buf_reserve(b, n) != 0) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        b->data[b->len + i] = (char)((i * 7 + seed) & 0xff);
    }
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* Reads from fd until n bytes arrived or the peer has nothing more (non-blocking reads
 * after the writer is done: the test writes before it reads). */
static size_t cs_read_all(int fd, unsigned char *to, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, to + got, n - got, MSG_DONTWAIT);
        if (r <= 0) {
            break;
        }
        got += (size_t)r;
    }
    return got;
}

static void test_write_buf_hands_over(void)
{
    struct conn c;
    int sv[2];
    CHECK(cs_open(&c, sv) == 0);
    struct buf b = {0};
    CHECK(cs_fill(&b, 1000, 1) == 0);
    char *chunk = b.data;
    conn_write_buf(&c, &b);
    CHECK(c.out.data == chunk); /* the memory itself, not a copy */
    CHECK_EQ_INT(c.out.len, 1000);
    CHECK_EQ_INT(b.len, 0);
    CHECK(b.data != chunk);
    /* behind queued bytes: appended, the caller keeps its buffer */
    struct buf b2 = {0};
    CHECK(cs_fill(&b2, 500, 2) == 0);
    char *second = b2.data;
    conn_write_buf(&c, &b2);
    CHECK_EQ_INT(c.out.len, 1500);
    CHECK(b2.data == second);
    CHECK_EQ_INT(b2.len, 0);
    conn_flush(&c);
    CHECK_EQ_INT(c.out.len, 0);
    unsigned char got[1500];
    CHECK_EQ_INT(cs_read_all(sv[1], got, sizeof got), 1500);
    for (size_t i = 0; i < 1500; i++) {
        unsigned want =
            i < 1000 ? (unsigned)((i * 7 + 1) & 0xff) : (unsigned)(((i - 1000) * 7 + 2) & 0xff);
        CHECK_EQ_INT(got[i], want);
    }
    buf_free(&b);
    buf_free(&b2);
    buf_free(&c.out);
    close(sv[0]);
    close(sv[1]);
}

static void test_next_chunk_before_send(void)
{
    struct conn c;
    int sv[2];
    CHECK(cs_open(&c, sv) == 0);
    struct buf b = {0};
    CHECK(cs_fill(&b, 300000, 3) == 0); /* about one FETCH chunk */
    conn_write_buf(&c, &b);
    conn_stream_continue(&c);
    CHECK_EQ_INT(cs_calls, 1);
    CHECK_EQ_INT(cs_sent_at_call, 0);        /* asked for before the send ... */
    CHECK_EQ_INT(cs_queued_at_call, 300000); /* ... with the chunk still queued */
    CHECK(c.bytes_out > 0);                  /* then sent (as much as the socket took) */
    CHECK_EQ_INT(c.bytes_out + c.out.len, 300000);
    CHECK_EQ_INT(c.stream_wait, 0);
    buf_free(&b);
    buf_free(&c.out);
    close(sv[0]);
    close(sv[1]);
}

static void test_next_chunk_waits_when_full(void)
{
    struct conn c;
    int sv[2];
    CHECK(cs_open(&c, sv) == 0);
    int small = 65536;
    CHECK(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small) == 0);
    size_t total = CONN_STREAM_RESUME_BELOW + (CONN_STREAM_RESUME_BELOW >> 1);
    struct buf b = {0};
    CHECK(cs_fill(&b, total, 4) == 0);
    conn_write_buf(&c, &b);
    conn_stream_continue(&c);
    /* the socket takes far less than half a MiB: more than the mark stays queued */
    CHECK(c.out.len >= CONN_STREAM_RESUME_BELOW);
    CHECK_EQ_INT(cs_calls, 0);
    CHECK_EQ_INT(c.stream_wait, 1);
    unsigned char *got = malloc(total);
    CHECK(got != NULL);
    size_t have = 0;
    for (int round = 0; round < 100000 && cs_calls == 0 && have < total; round++) {
        have += cs_read_all(sv[1], got + have, total - have);
        conn_flush(&c);
    }
    CHECK_EQ_INT(cs_calls, 1);
    CHECK(cs_queued_at_call < CONN_STREAM_RESUME_BELOW);
    conn_flush(&c);
    have += cs_read_all(sv[1], got + have, total - have);
    for (int round = 0; round < 100000 && have < total; round++) {
        conn_flush(&c);
        have += cs_read_all(sv[1], got + have, total - have);
    }
    CHECK_EQ_INT(have, total);
    int same = 1;
    for (size_t i = 0; i < total; i++) {
        same &= got[i] == (unsigned char)((i * 7 + 4) & 0xff);
    }
    CHECK(same);
    free(got);
    buf_free(&b);
    buf_free(&c.out);
    close(sv[0]);
    close(sv[1]);
}

static void cs_end(struct conn *c)
{
    (void)c;
}

static const struct conn_proto_ops cs_end_ops = {.name = "test", .end = cs_end};

static void test_close_ends_job_writes(void)
{
    for (int job_writes = 0; job_writes <= 1; job_writes++) {
        struct conn *c = calloc(1, sizeof *c);
        int sv[2];
        CHECK(c != NULL && socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        c->fd = sv[0];
        c->ops = &cs_end_ops;
        c->busy = 1;
        c->refs = 1; /* the job in flight */
        c->job_writes = job_writes;
        int dup = fcntl(sv[0], F_DUPFD_CLOEXEC, 0); /* the job's, as imap_direct_grant */
        CHECK(dup >= 0);
        conn_close(c, "test");
        CHECK_EQ_INT(c->dead, 1);
        errno = 0;
        ssize_t n = send(dup, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        char got = 0;
        ssize_t r = recv(sv[1], &got, 1, MSG_DONTWAIT);
        if (job_writes) {
            CHECK(n == -1 && errno == EPIPE); /* the job's write fails ... */
            CHECK_EQ_INT(r, 0);               /* ... and the client sees the end */
        } else {
            CHECK_EQ_INT(n, 1); /* without a job writing: the duplicate keeps it open */
            CHECK_EQ_INT(r, 1);
        }
        close(dup);
        close(sv[1]);
        conn_release(c); /* the job's done: frees the dead connection */
    }
}

int main(void)
{
    TEST(test_write_buf_hands_over);
    TEST(test_next_chunk_before_send);
    TEST(test_next_chunk_waits_when_full);
    TEST(test_close_ends_job_writes);
    return th_summary();
}
