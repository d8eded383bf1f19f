/*
 * store_queue_ahead.c -- the sealed queue's read-ahead (store_queue_ahead.h): a ring of
 * items_max slots under one mutex; the threads take the oldest slot nobody prepares yet,
 * prepare it without the lock, and mark it ready; the drain's thread waits only for the
 * head, and prepares untaken slots itself while it is not ready (HELPING). Hand-written:
 * GLib's thread pool (GMime brings GLib) runs tasks in no fixed order and has no bound on
 * the bytes they hold.
 */
#include "store/store_queue_ahead.h"

#include "mailvault.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

enum { AHEAD_QUEUED = 0, AHEAD_BUSY = 1, AHEAD_READY = 2 };

struct store_queue_ahead {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a thread may go on: a push, a pop, a stop */
    pthread_cond_t done; /* an item became ready */
    store_queue_ahead_fn prepare, release;
    void *arg;
    struct store_queue_ahead_item *items;
    int *state;
    size_t items_max, bytes_max;
    size_t head;  /* the oldest slot */
    size_t count; /* slots in use from head on */
    size_t next;  /* slots from head on already taken by a thread (prepared or busy) */
    size_t bytes; /* held by ready items */
    size_t items_peak, bytes_peak;
    uint64_t prepared_total, prepared_by_caller;
    int stopping;
    unsigned threads;
    pthread_t tid[STORE_QUEUE_AHEAD_THREADS_MAX];
};

static size_t store_queue_ahead_slot(const struct store_queue_ahead *a, size_t i)
{
    return (a->head + i) % a->items_max;
}

/* The next slot a thread may prepare: queued, and (1) the head, or (2) the ready ones hold
 * less than bytes_max. Called with the lock held. */
static int store_queue_ahead_may_take(const struct store_queue_ahead *a)
{
    return a->next < a->count && (a->next == 0 || a->bytes < a->bytes_max);
}

/* Takes the next slot store_queue_ahead_may_take() allows, prepares it without the lock and
 * marks it ready. Called with the lock held; returns with it held. */
static void store_queue_ahead_prepare_one(struct store_queue_ahead *a)
{
    size_t slot = store_queue_ahead_slot(a, a->next++);
    a->state[slot] = AHEAD_BUSY;
    struct store_queue_ahead_item *it = &a->items[slot];
    pthread_mutex_unlock(&a->mu);
    a->prepare(a->arg, it); /* no lock: the slot is this thread's until it is ready */
    pthread_mutex_lock(&a->mu);
    a->state[slot] = AHEAD_READY;
    a->bytes += it->cost;
    a->bytes_peak = a->bytes > a->bytes_peak ? a->bytes : a->bytes_peak;
    a->prepared_total++;
    pthread_cond_broadcast(&a->done);
}

static void *store_queue_ahead_thread(void *p)
{
    struct store_queue_ahead *a = p;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stopping && !store_queue_ahead_may_take(a)) {
            pthread_cond_wait(&a->work, &a->mu);
        }
        if (a->stopping) {
            break;
        }
        store_queue_ahead_prepare_one(a);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int store_queue_ahead_start(store_queue_ahead_fn prepare,
                            store_queue_ahead_fn release,
                            void *arg,
                            unsigned threads,
                            size_t items_max,
                            size_t bytes_max,
                            struct store_queue_ahead **out)
{
    *out = NULL;
    if (prepare == NULL || release == NULL || threads > STORE_QUEUE_AHEAD_THREADS_MAX ||
        items_max == 0) {
        return MV_EINVAL;
    }
    struct store_queue_ahead *a = calloc(1, sizeof *a);
    if (a == NULL || (a->items = calloc(items_max, sizeof *a->items)) == NULL ||
        (a->state = calloc(items_max, sizeof *a->state)) == NULL) {
        if (a != NULL) {
            free(a->items);
        }
        free(a);
        return MV_ENOMEM;
    }
    a->prepare = prepare;
    a->release = release;
    a->arg = arg;
    a->items_max = items_max;
    a->bytes_max = bytes_max;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->done, NULL);
    /* The threads start with every signal blocked (they inherit this thread's mask). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (unsigned i = 0; i < threads; i++) {
        if (pthread_create(&a->tid[a->threads], NULL, store_queue_ahead_thread, a) == 0) {
            a->threads++;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* With fewer threads than asked (none, at worst) the pipeline still works: with none,
     * store_queue_ahead_head() prepares on the caller's thread. */
    *out = a;
    return MV_OK;
}

int store_queue_ahead_room(const struct store_queue_ahead *a)
{
    return a->count < a->items_max; /* count changes only on the drain's thread */
}

size_t store_queue_ahead_count(const struct store_queue_ahead *a)
{
    return a->count;
}

int store_queue_ahead_push(struct store_queue_ahead *a, const char *name)
{
    if (a->count == a->items_max || strlen(name) >= STORE_QUEUE_AHEAD_NAME_SIZE) {
        return MV_ELIMIT;
    }
    pthread_mutex_lock(&a->mu);
    size_t slot = store_queue_ahead_slot(a, a->count);
    struct store_queue_ahead_item *it = &a->items[slot];
    memset(it, 0, sizeof *it);
    memcpy(it->name, name, strlen(name) + 1);
    a->state[slot] = AHEAD_QUEUED;
    a->count++;
    a->items_peak = a->count > a->items_peak ? a->count : a->items_peak;
    pthread_cond_signal(&a->work);
    pthread_mutex_unlock(&a->mu);
    return MV_OK;
}

struct store_queue_ahead_item *store_queue_ahead_head(struct store_queue_ahead *a)
{
    if (a->count == 0) {
        return NULL;
    }
    struct store_queue_ahead_item *it = &a->items[a->head];
    pthread_mutex_lock(&a->mu);
    while (a->state[a->head] != AHEAD_READY) {
        if (store_queue_ahead_may_take(a)) {
            /* HELPING: rather than wait, the caller prepares the next item nobody took */
            store_queue_ahead_prepare_one(a);
            a->prepared_by_caller++;
            continue;
        }
        pthread_cond_wait(&a->done, &a->mu);
    }
    pthread_mutex_unlock(&a->mu);
    return it;
}

void store_queue_ahead_pop(struct store_queue_ahead *a)
{
    struct store_queue_ahead_item *it = store_queue_ahead_head(a);
    if (it == NULL) {
        return;
    }
    size_t cost = it->cost;
    a->release(a->arg, it); /* the slot is ready and not yet freed: nobody else touches it */
    memset(it, 0, sizeof *it);
    pthread_mutex_lock(&a->mu);
    a->state[a->head] = AHEAD_QUEUED;
    a->head = (a->head + 1) % a->items_max;
    a->count--;
    a->next--;
    a->bytes -= cost;
    pthread_cond_broadcast(&a->work); /* bytes went down: a thread may go on */
    pthread_mutex_unlock(&a->mu);
}

void store_queue_ahead_stop(struct store_queue_ahead **ap)
{
    struct store_queue_ahead *a = *ap;
    if (a == NULL) {
        return;
    }
    pthread_mutex_lock(&a->mu);
    a->stopping = 1;
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->mu);
    for (unsigned i = 0; i < a->threads; i++) {
        pthread_join(a->tid[i], NULL);
    }
    /* Joined: every slot a thread took is ready; release what they hold. */
    for (size_t i = 0; i < a->count; i++) {
        size_t slot = store_queue_ahead_slot(a, i);
        if (a->state[slot] == AHEAD_READY) {
            a->release(a->arg, &a->items[slot]);
        }
    }
    pthread_cond_destroy(&a->done);
    pthread_cond_destroy(&a->work);
    pthread_mutex_destroy(&a->mu);
    free(a->state);
    free(a->items);
    free(a);
    *ap = NULL;
}

void store_queue_ahead_stats_get(struct store_queue_ahead *a, struct store_queue_ahead_stats *out)
{
    memset(out, 0, sizeof *out);
    if (a == NULL) {
        return;
    }
    pthread_mutex_lock(&a->mu);
    out->items = a->count;
    for (size_t i = 0; i < a->count; i++) {
        out->prepared += a->state[store_queue_ahead_slot(a, i)] == AHEAD_READY;
    }
    out->bytes = a->bytes;
    out->items_peak = a->items_peak;
    out->bytes_peak = a->bytes_peak;
    out->prepared_total = a->prepared_total;
    out->prepared_by_caller = a->prepared_by_caller;
    pthread_mutex_unlock(&a->mu);
}
