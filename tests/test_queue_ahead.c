/*
 * test_queue_ahead.c -- the sealed queue's read-ahead pipeline (store_queue_ahead.c) on its
 * own, with a prepare() of the test's: items come out in order, each prepared once, and a
 * caller whose head is not ready prepares the next untaken items itself (HELPING).
 */
#include "harness.h"
#include "store/store_queue_ahead.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define QA_ITEMS  8
#define QA_WAIT_S 30 /* a thread's prepare waits at most this long for the caller to help */

struct qa_state {
    pthread_mutex_t mu;
    pthread_cond_t helped;
    pthread_t caller;
    int block_threads;       /* a thread's prepare waits until the caller prepared one */
    int by_caller;           /* prepares run on the caller's thread */
    int prepared[QA_ITEMS];  /* times each item was prepared */
    int on_caller[QA_ITEMS]; /* 1: item i was prepared on the caller's thread */
    int released[QA_ITEMS];  /* times each item was released */
};

static int qa_index(const struct store_queue_ahead_item *it)
{
    int i = it->name[0] - 'a';
    return i >= 0 && i < QA_ITEMS ? i : 0;
}

static void qa_prepare(void *arg, struct store_queue_ahead_item *it)
{
    struct qa_state *q = arg;
    int i = qa_index(it);
    int mine = pthread_equal(pthread_self(), q->caller);
    pthread_mutex_lock(&q->mu);
    if (!mine && q->block_threads) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += QA_WAIT_S;
        while (q->by_caller == 0 && pthread_cond_timedwait(&q->helped, &q->mu, &until) == 0) {
        }
        q->block_threads = 0; /* helped or not, the next ones do not wait (one timeout) */
    }
    q->prepared[i]++;
    q->on_caller[i] = mine;
    if (mine) {
        q->by_caller++;
        pthread_cond_broadcast(&q->helped);
    }
    pthread_mutex_unlock(&q->mu);
    it->rc = 0;
    it->cost = 1;
}

static void qa_release(void *arg, struct store_queue_ahead_item *it)
{
    struct qa_state *q = arg;
    pthread_mutex_lock(&q->mu);
    q->released[qa_index(it)]++;
    pthread_mutex_unlock(&q->mu);
}

/* Pushes QA_ITEMS names, pops them all; each comes out in order, prepared and released once. */
static void qa_run(struct qa_state *q, unsigned threads, struct store_queue_ahead_stats *st)
{
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->helped, NULL);
    q->caller = pthread_self();
    struct store_queue_ahead *a = NULL;
    CHECK_EQ_INT(
        store_queue_ahead_start(qa_prepare, qa_release, q, threads, QA_ITEMS, 1u << 20, &a), 0);
    if (a == NULL) {
        return;
    }
    for (int i = 0; i < QA_ITEMS; i++) {
        char name[2] = {(char)('a' + i), '\0'};
        CHECK_EQ_INT(store_queue_ahead_push(a, name), 0);
    }
    for (int i = 0; i < QA_ITEMS; i++) {
        struct store_queue_ahead_item *it = store_queue_ahead_head(a);
        CHECK(it != NULL);
        if (it == NULL) {
            break;
        }
        CHECK_EQ_INT(it->name[0], 'a' + i);
        store_queue_ahead_pop(a);
    }
    CHECK(store_queue_ahead_head(a) == NULL);
    store_queue_ahead_stats_get(a, st);
    store_queue_ahead_stop(&a);
    for (int i = 0; i < QA_ITEMS; i++) {
        CHECK_EQ_INT(q->prepared[i], 1);
        CHECK_EQ_INT(q->released[i], 1);
    }
    pthread_cond_destroy(&q->helped);
    pthread_mutex_destroy(&q->mu);
}

/* The thread's prepares wait until the caller has prepared one: a caller that only waited
 * for its head (the pipeline before HELPING) left them waiting QA_WAIT_S and prepared none. */
static void test_caller_helps_while_head_not_ready(void)
{
    struct qa_state q = {.block_threads = 1};
    struct store_queue_ahead_stats st;
    qa_run(&q, 1, &st);
    CHECK(q.by_caller >= 1);
    CHECK_EQ_INT((int)st.prepared_total, QA_ITEMS);
    CHECK_EQ_INT((int)st.prepared_by_caller, q.by_caller);
}

/* With no thread the caller prepares every item itself, in order. */
static void test_no_thread_caller_prepares_all(void)
{
    struct qa_state q = {.block_threads = 0};
    struct store_queue_ahead_stats st;
    qa_run(&q, 0, &st);
    CHECK_EQ_INT(q.by_caller, QA_ITEMS);
    for (int i = 0; i < QA_ITEMS; i++) {
        CHECK_EQ_INT(q.on_caller[i], 1);
    }
    CHECK_EQ_INT((int)st.prepared_total, QA_ITEMS);
    CHECK_EQ_INT((int)st.prepared_by_caller, QA_ITEMS);
}

int main(void)
{
    TEST(test_caller_helps_while_head_not_ready);
    TEST(test_no_thread_caller_prepares_all);
    return th_summary();
}
