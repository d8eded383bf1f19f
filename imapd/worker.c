/*
 * worker.c -- the worker threads: each has a job queue and owns the open stores of the
 * users pinned to it (worker = FNV-1a(address) % workers), so a store handle is only ever
 * used by one thread and one user's slow command stalls only that worker's users. A finished
 * job goes on one completion list and the loop is woken through an eventfd.
 *
 * OPEN STORES
 *   A small table per worker, looked up by address. A store in use (refs > 0) stays open; an
 *   unused one is closed (mv_store_close runs PRAGMA optimize) after store_idle_s, or when
 *   the table is full and a new store needs the slot (least recently used first). A cached
 *   store is handed out only to the right password: HMAC-SHA256 under a random per-process
 *   key of the password, compared in constant time.
 */
#include "conn_frame.h"
#include "imapd.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct worker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct job *head, *tail;
    int stop;
    int index;
    struct open_store *stores; /* stores_max slots; address "" = free */
    int stores_max;
};

static struct worker *workers;
static int worker_count;
static const struct config *worker_cfg;
static int worker_eventfd = -1;
static unsigned char worker_hmac_key[32];

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static struct job *done_head, *done_tail;

const struct config *worker_config(const struct worker *w)
{
    (void)w;
    return worker_cfg;
}

static int64_t worker_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void worker_verifier(const char *address,
                            const char *password,
                            size_t password_len,
                            unsigned char out[32])
{
    unsigned int len = 32;
    size_t address_len = strlen(address) + 1, total = address_len + password_len;
    unsigned char *data = malloc(total);
    if (data == NULL) {
        RAND_bytes(out, 32); /* matches nothing */
        return;
    }
    memcpy(data, address, address_len);
    memcpy(data + address_len, password, password_len);
    if (HMAC(EVP_sha256(), worker_hmac_key, sizeof worker_hmac_key, data, total, out, &len) ==
        NULL) {
        RAND_bytes(out, 32);
    }
    OPENSSL_cleanse(data, total);
    free(data);
}

static void worker_store_close(struct open_store *s)
{
    log_event("store close %s", s->address);
    mv_store_close(&s->store);
    OPENSSL_cleanse(s->verifier, sizeof s->verifier);
    s->address[0] = '\0';
    s->refs = 0;
}

struct open_store *worker_store_find(struct worker *w, const char *address)
{
    for (int i = 0; i < w->stores_max; i++) {
        if (w->stores[i].store != NULL && strcmp(w->stores[i].address, address) == 0) {
            return &w->stores[i];
        }
    }
    return NULL;
}

/* A free slot, closing the least recently used idle store if needed; NULL if all are busy. */
static struct open_store *worker_store_slot(struct worker *w)
{
    struct open_store *lru = NULL;
    for (int i = 0; i < w->stores_max; i++) {
        struct open_store *s = &w->stores[i];
        if (s->store == NULL) {
            return s;
        }
        if (s->refs == 0 && (lru == NULL || s->last_used_ms < lru->last_used_ms)) {
            lru = s;
        }
    }
    if (lru != NULL) {
        worker_store_close(lru);
    }
    return lru;
}

int worker_store_acquire(struct worker *w,
                         const char *address,
                         const char *password,
                         size_t password_len,
                         struct open_store **out,
                         char *errmsg,
                         size_t errmsg_size)
{
    unsigned char verifier[32];
    *out = NULL;
    worker_verifier(address, password, password_len, verifier);
    struct open_store *s = worker_store_find(w, address);
    if (s != NULL) {
        int same = CRYPTO_memcmp(verifier, s->verifier, sizeof verifier) == 0;
        OPENSSL_cleanse(verifier, sizeof verifier);
        if (!same) {
            snprintf(errmsg, errmsg_size, "wrong password");
            return MV_EAUTH;
        }
        s->refs++;
        s->last_used_ms = worker_now_ms();
        *out = s;
        return MV_OK;
    }
    s = worker_store_slot(w);
    if (s == NULL) {
        OPENSSL_cleanse(verifier, sizeof verifier);
        snprintf(errmsg, errmsg_size,
                 "every store slot of this worker is in use "
                 "(stores_per_worker)");
        return MV_ELIMIT;
    }
    struct mv_store_options opts = config_store_options(worker_cfg);
    int rc = mv_store_open(address, password, password_len, &opts, &s->store, errmsg, errmsg_size);
    if (rc != MV_OK) {
        OPENSSL_cleanse(verifier, sizeof verifier);
        return rc;
    }
    snprintf(s->address, sizeof s->address, "%s", address);
    memcpy(s->verifier, verifier, sizeof verifier);
    OPENSSL_cleanse(verifier, sizeof verifier);
    s->refs = 1;
    s->last_used_ms = worker_now_ms();
    log_event("store open %s (worker %d)", address, w->index);
    *out = s;
    return MV_OK;
}

void worker_store_release(struct worker *w, struct open_store *s)
{
    (void)w;
    if (s != NULL && s->refs > 0) {
        s->refs--;
        s->last_used_ms = worker_now_ms();
    }
}

static void worker_sweep(struct worker *w)
{
    int64_t now = worker_now_ms(), idle = (int64_t)worker_cfg->store_idle_s * 1000;
    for (int i = 0; i < w->stores_max; i++) {
        struct open_store *s = &w->stores[i];
        if (s->store != NULL && s->refs == 0 && now - s->last_used_ms >= idle) {
            worker_store_close(s);
        }
    }
}

static void worker_finish(struct job *job)
{
    uint64_t one = 1;
    pthread_mutex_lock(&done_lock);
    job->next = NULL;
    if (done_tail != NULL) {
        done_tail->next = job;
    } else {
        done_head = job;
    }
    done_tail = job;
    pthread_mutex_unlock(&done_lock);
    if (write(worker_eventfd, &one, sizeof one) < 0) {
        /* the counter is saturated only if the loop is gone; nothing to do */
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->stop || w->head != NULL) { /* at a stop, the queued jobs still run */
        if (w->head == NULL) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 10;
            pthread_cond_timedwait(&w->wake, &w->lock, &until);
            if (w->head == NULL && !w->stop) {
                pthread_mutex_unlock(&w->lock);
                worker_sweep(w);
                pthread_mutex_lock(&w->lock);
                continue;
            }
            if (w->head == NULL) {
                break;
            }
        }
        struct job *job = w->head;
        w->head = job->next;
        if (w->head == NULL) {
            w->tail = NULL;
        }
        pthread_mutex_unlock(&w->lock);
        job->run(job);
        worker_finish(job);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < w->stores_max; i++) {
        if (w->stores[i].store != NULL) {
            worker_store_close(&w->stores[i]);
        }
    }
    return NULL;
}

int worker_start(const struct config *cfg, int count, int eventfd)
{
    worker_cfg = cfg;
    worker_eventfd = eventfd;
    if (RAND_bytes(worker_hmac_key, sizeof worker_hmac_key) != 1) {
        return -1;
    }
    workers = calloc((size_t)count, sizeof *workers);
    if (workers == NULL) {
        return -1;
    }
    for (int i = 0; i < count; i++) {
        struct worker *w = &workers[i];
        w->index = i;
        w->stores_max = cfg->stores_per_worker;
        w->stores = calloc((size_t)w->stores_max, sizeof *w->stores);
        if (w->stores == NULL) {
            return -1;
        }
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->wake, NULL);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            return -1;
        }
        worker_count = i + 1;
    }
    return 0;
}

void worker_stop_all(void)
{
    for (int i = 0; i < worker_count; i++) {
        pthread_mutex_lock(&workers[i].lock);
        workers[i].stop = 1;
        pthread_cond_signal(&workers[i].wake);
        pthread_mutex_unlock(&workers[i].lock);
    }
    for (int i = 0; i < worker_count; i++) {
        pthread_join(workers[i].thread, NULL);
        free(workers[i].stores);
        pthread_mutex_destroy(&workers[i].lock);
        pthread_cond_destroy(&workers[i].wake);
    }
    free(workers);
    workers = NULL;
    worker_count = 0;
    OPENSSL_cleanse(worker_hmac_key, sizeof worker_hmac_key);
}

struct worker *worker_for(const char *address)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)address; *p != '\0'; p++) {
        h = (h ^ *p) * 16777619u;
    }
    return &workers[h % (uint32_t)worker_count];
}

void worker_post(struct worker *w, struct job *job)
{
    job->worker = w;
    job->next = NULL;
    if (job->conn != NULL) {
        job->conn->refs++;
    }
    pthread_mutex_lock(&w->lock);
    if (w->tail != NULL) {
        w->tail->next = job;
    } else {
        w->head = job;
    }
    w->tail = job;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

void worker_collect(void)
{
    uint64_t count;
    if (read(worker_eventfd, &count, sizeof count) < 0) {
        /* EAGAIN: a previous collect took them */
    }
    pthread_mutex_lock(&done_lock);
    struct job *list = done_head;
    done_head = done_tail = NULL;
    pthread_mutex_unlock(&done_lock);
    while (list != NULL) {
        struct job *job = list;
        list = job->next;
        struct conn *c = job->conn;
        job->done(job); /* frees the job */
        if (c != NULL) {
            conn_release(c);
        }
    }
}
