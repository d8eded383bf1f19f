/*
 * store_queue_box.c -- a queue file's box: form 2 sealed with a burst's ephemeral key, both
 * forms opened (store_queue_box.h has the formats and why). libsodium does the cryptography
 * (crypto_box_beforenm / _easy_afternm, crypto_box_seal_open); what is written here is only
 * which key seals which file and for how long it is kept.
 */
#include "store/store_queue_box.h"

#include "mailvault.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STORE_BOX_NONCE_AT (STORE_BOX_FORM2_SIZE + STORE_BOX_KEY_SIZE)
#define STORE_BOX_BOX_AT   (STORE_BOX_NONCE_AT + crypto_box_NONCEBYTES)

_Static_assert(crypto_box_PUBLICKEYBYTES == STORE_BOX_KEY_SIZE, "X25519 public keys");
_Static_assert(crypto_box_SECRETKEYBYTES == STORE_BOX_KEY_SIZE, "X25519 secret keys");
_Static_assert(crypto_box_BEFORENMBYTES == 32, "shared keys");
_Static_assert(crypto_box_SEALBYTES == STORE_BOX_OVERHEAD_1, "form 1's overhead");
_Static_assert(STORE_BOX_BOX_AT + crypto_box_MACBYTES == STORE_BOX_OVERHEAD_2, "form 2's overhead");

/* ---- the sender's burst keys ----------------------------------------------------------- */

struct store_box_burst {
    int used;
    uint8_t pk[STORE_BOX_KEY_SIZE];  /* the store's */
    uint8_t epk[STORE_BOX_KEY_SIZE]; /* the burst's ephemeral public key */
    uint8_t k[crypto_box_BEFORENMBYTES];
    uint32_t uses;
    int64_t born_ms;
};

static struct store_box_burst store_box_bursts[STORE_BOX_BURST_KEYS];
static pthread_mutex_t store_box_bursts_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t store_box_burst_ms = STORE_BOX_BURST_MS; /* under the lock */

int64_t store_box_burst_ms_set(int64_t ms)
{
    pthread_mutex_lock(&store_box_bursts_mu);
    int64_t old = store_box_burst_ms;
    store_box_burst_ms = ms;
    pthread_mutex_unlock(&store_box_bursts_mu);
    return old;
}

static int64_t store_box_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wipes the keys past their window or uses (all: every key). Called with the lock held. */
static void store_box_bursts_wipe(int64_t now_ms, int all)
{
    for (size_t i = 0; i < STORE_BOX_BURST_KEYS; i++) {
        struct store_box_burst *b = &store_box_bursts[i];
        if (b->used &&
            (all || now_ms - b->born_ms >= store_box_burst_ms || b->uses >= STORE_BOX_BURST_USES)) {
            sodium_memzero(b, sizeof *b);
        }
    }
}

void store_box_seal_expire(int all)
{
    pthread_mutex_lock(&store_box_bursts_mu);
    store_box_bursts_wipe(store_box_now_ms(), all);
    pthread_mutex_unlock(&store_box_bursts_mu);
}

/* Copies the live burst key for pk into epk and k, or makes one (the X25519 outside the
 * lock: two senders racing for one store may each make a key; both are valid). */
static int store_box_burst_key(const uint8_t *pk, uint8_t *epk, uint8_t *k)
{
    int64_t now = store_box_now_ms();
    pthread_mutex_lock(&store_box_bursts_mu);
    store_box_bursts_wipe(now, 0);
    for (size_t i = 0; i < STORE_BOX_BURST_KEYS; i++) {
        struct store_box_burst *b = &store_box_bursts[i];
        if (b->used && sodium_memcmp(b->pk, pk, STORE_BOX_KEY_SIZE) == 0) {
            memcpy(epk, b->epk, STORE_BOX_KEY_SIZE);
            memcpy(k, b->k, crypto_box_BEFORENMBYTES);
            b->uses++;
            pthread_mutex_unlock(&store_box_bursts_mu);
            return MV_OK;
        }
    }
    pthread_mutex_unlock(&store_box_bursts_mu);

    uint8_t esk[crypto_box_SECRETKEYBYTES];
    int ok = crypto_box_keypair(epk, esk) == 0 && crypto_box_beforenm(k, pk, esk) == 0;
    sodium_memzero(esk, sizeof esk); /* the shared key is all a burst keeps */
    if (!ok) {
        sodium_memzero(k, crypto_box_BEFORENMBYTES);
        return MV_ECORRUPT; /* pk is no usable public key (a low-order point: all zeros, say) */
    }
    pthread_mutex_lock(&store_box_bursts_mu);
    struct store_box_burst *slot = &store_box_bursts[0];
    for (size_t i = 0; i < STORE_BOX_BURST_KEYS; i++) {
        struct store_box_burst *b = &store_box_bursts[i];
        if (!b->used) {
            slot = b;
            break;
        }
        if (b->born_ms < slot->born_ms) {
            slot = b; /* all in use: the oldest gives way */
        }
    }
    sodium_memzero(slot, sizeof *slot);
    slot->used = 1;
    memcpy(slot->pk, pk, STORE_BOX_KEY_SIZE);
    memcpy(slot->epk, epk, STORE_BOX_KEY_SIZE);
    memcpy(slot->k, k, crypto_box_BEFORENMBYTES);
    slot->uses = 1;
    slot->born_ms = now;
    pthread_mutex_unlock(&store_box_bursts_mu);
    return MV_OK;
}

int store_box_seal(const uint8_t pk[STORE_BOX_KEY_SIZE],
                   const uint8_t *plain,
                   size_t len,
                   uint8_t **out,
                   size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (len > SIZE_MAX - STORE_BOX_OVERHEAD_2) {
        return MV_ENOMEM;
    }
    uint8_t *box = malloc(len + STORE_BOX_OVERHEAD_2);
    if (box == NULL) {
        return MV_ENOMEM;
    }
    uint8_t k[crypto_box_BEFORENMBYTES];
    memcpy(box, STORE_BOX_FORM2, STORE_BOX_FORM2_SIZE);
    int rc = store_box_burst_key(pk, box + STORE_BOX_FORM2_SIZE, k);
    if (rc == MV_OK) {
        /* random nonces: 192 bits, so a burst's 4,096 never meet */
        randombytes_buf(box + STORE_BOX_NONCE_AT, crypto_box_NONCEBYTES);
        rc = crypto_box_easy_afternm(box + STORE_BOX_BOX_AT, plain, len, box + STORE_BOX_NONCE_AT,
                                     k) == 0
                 ? MV_OK
                 : MV_ERROR;
    }
    sodium_memzero(k, sizeof k);
    if (rc != MV_OK) {
        free(box);
        return rc;
    }
    *out = box;
    *out_len = len + STORE_BOX_OVERHEAD_2;
    return MV_OK;
}

/* ---- the drain's side ---------------------------------------------------------------- */

int store_box_cache_init(struct store_box_cache *c)
{
    memset(c, 0, sizeof *c);
    return pthread_mutex_init(&c->mu, NULL) == 0 ? MV_OK : MV_ERROR;
}

void store_box_cache_free(struct store_box_cache *c)
{
    pthread_mutex_destroy(&c->mu);
    sodium_memzero(c, sizeof *c);
}

/* The shared key of a form-2 box's ephemeral key with sk, from the cache or made (and kept). */
static int
store_box_shared(struct store_box_cache *c, const uint8_t *epk, const uint8_t *sk, uint8_t *k)
{
    if (c != NULL) {
        pthread_mutex_lock(&c->mu);
        for (size_t i = 0; i < sizeof c->slot / sizeof c->slot[0]; i++) {
            if (c->slot[i].used && memcmp(c->slot[i].epk, epk, STORE_BOX_KEY_SIZE) == 0) {
                memcpy(k, c->slot[i].k, sizeof c->slot[i].k);
                pthread_mutex_unlock(&c->mu);
                return 0;
            }
        }
        pthread_mutex_unlock(&c->mu);
    }
    if (crypto_box_beforenm(k, epk, sk) != 0) {
        return -1; /* a low-order point: no box of ours */
    }
    if (c != NULL) {
        pthread_mutex_lock(&c->mu);
        size_t i = c->next++ % (sizeof c->slot / sizeof c->slot[0]);
        c->slot[i].used = 1;
        memcpy(c->slot[i].epk, epk, STORE_BOX_KEY_SIZE);
        memcpy(c->slot[i].k, k, sizeof c->slot[i].k);
        pthread_mutex_unlock(&c->mu);
    }
    return 0;
}

int store_box_open(struct store_box_cache *cache,
                   const uint8_t pk[STORE_BOX_KEY_SIZE],
                   const uint8_t sk[STORE_BOX_KEY_SIZE],
                   const uint8_t *sealed,
                   size_t sealed_len,
                   uint8_t *plain,
                   size_t *plain_len)
{
    if (sealed_len >= STORE_BOX_OVERHEAD_2 &&
        memcmp(sealed, STORE_BOX_FORM2, STORE_BOX_FORM2_SIZE) == 0) {
        uint8_t k[crypto_box_BEFORENMBYTES];
        int ok = store_box_shared(cache, sealed + STORE_BOX_FORM2_SIZE, sk, k) == 0 &&
                 crypto_box_open_easy_afternm(plain, sealed + STORE_BOX_BOX_AT,
                                              sealed_len - STORE_BOX_BOX_AT,
                                              sealed + STORE_BOX_NONCE_AT, k) == 0;
        sodium_memzero(k, sizeof k);
        if (ok) {
            *plain_len = sealed_len - STORE_BOX_OVERHEAD_2;
            return 0;
        }
        /* else maybe form 1, whose random ephemeral key began with the four bytes (2^-32) */
    }
    if (sealed_len < STORE_BOX_OVERHEAD_1 ||
        crypto_box_seal_open(plain, sealed, sealed_len, pk, sk) != 0) {
        return -1;
    }
    *plain_len = sealed_len - STORE_BOX_OVERHEAD_1;
    return 0;
}
