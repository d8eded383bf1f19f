/*
 * loop.h -- the event loop (loop.c): epoll, edge-triggered, and the tick for timers. Loop
 * thread only.
 */
#ifndef MV_IMAPD_LOOP_H
#define MV_IMAPD_LOOP_H

#include <stdint.h>

typedef void (*loop_fn)(void *arg, uint32_t events);
struct loop_handler {
    loop_fn fn;
    void *arg;
};
int loop_init(void);
int loop_add(int fd, uint32_t events, struct loop_handler *h);
/* Removes fd from the loop; an event for h already returned in the batch being run is
 * dropped, so h's owner may be freed once this returns. */
void loop_del(int fd, const struct loop_handler *h);
int64_t loop_now_ms(void);
/* Runs until loop_stop(); calls tick at least every second with the current time. */
void loop_run(void (*tick)(int64_t now_ms));
void loop_stop(void);

#endif /* MV_IMAPD_LOOP_H */
