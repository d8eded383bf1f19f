/*
 * loop.c -- the event loop: one epoll instance, edge-triggered handlers (each owner embeds
 * a struct loop_handler and drains its fd until EAGAIN), and a tick at least once a second
 * for timers (idle timeouts, held output). See docs/IMAPD.md for why epoll.
 */
#include "loop.h"
#include "log.h"

#include <errno.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define LOOP_EVENTS_MAX 128

static int loop_fd = -1;
static volatile int loop_running;
/* The batch epoll_wait returned and the index of the next event to run: a handler that
 * closes another fd (a worker's completion closing a connection whose peer is gone) must
 * not leave that fd's pending event pointing at memory about to be freed. */
static struct epoll_event *loop_batch;
static int loop_batch_next, loop_batch_count;

int loop_init(void)
{
    loop_fd = epoll_create1(EPOLL_CLOEXEC);
    return loop_fd >= 0 ? 0 : -1;
}

int loop_add(int fd, uint32_t events, struct loop_handler *h)
{
    struct epoll_event ev = {.events = events, .data.ptr = h};
    return epoll_ctl(loop_fd, EPOLL_CTL_ADD, fd, &ev);
}

void loop_del(int fd, const struct loop_handler *h)
{
    (void)epoll_ctl(loop_fd, EPOLL_CTL_DEL, fd, NULL);
    for (int i = loop_batch_next; i < loop_batch_count; i++) {
        if (loop_batch[i].data.ptr == h) {
            loop_batch[i].data.ptr = NULL; /* already returned by epoll_wait: skip it */
        }
    }
}

int64_t loop_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void loop_stop(void)
{
    loop_running = 0;
}

void loop_run(void (*tick)(int64_t now_ms))
{
    struct epoll_event events[LOOP_EVENTS_MAX];
    int64_t next_tick = loop_now_ms();
    loop_running = 1;
    while (loop_running) {
        int64_t now = loop_now_ms();
        int timeout = next_tick > now ? (int)(next_tick - now) : 0;
        int n = epoll_wait(loop_fd, events, LOOP_EVENTS_MAX, timeout > 100 ? 100 : timeout);
        if (n < 0 && errno != EINTR) {
            log_error("epoll_wait failed: errno %d", errno);
            break;
        }
        loop_batch = events;
        loop_batch_count = n > 0 ? n : 0;
        for (int i = 0; i < loop_batch_count; i++) {
            loop_batch_next = i + 1;
            struct loop_handler *h = events[i].data.ptr;
            if (h != NULL) {
                h->fn(h->arg, events[i].events);
            }
        }
        loop_batch_count = 0;
        loop_batch_next = 0;
        now = loop_now_ms();
        if (now >= next_tick || n == 0) {
            tick(now);
            next_tick = now + 100;
        }
    }
}
