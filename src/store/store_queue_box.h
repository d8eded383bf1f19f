/*
 * store_queue_box.h -- the box a queue file's plaintext is sealed in (store_queue_box.c), in
 * two forms that the drain both opens:
 *
 *   form 1 (before issue 13's burst keys):  crypto_box_seal(pk, plain)
 *       = ephemeral public key (32) | XSalsa20-Poly1305 box (16 + len)          48 + len
 *   form 2 (written now):  "MVB2" | ephemeral public key (32) | nonce (24, random)
 *       | crypto_box_easy(plain, nonce, recipient pk, ephemeral sk) (16 + len)  76 + len
 *
 * Form 2 is libsodium's crypto_box with the ephemeral key as the sender: opened with
 * crypto_box_open_easy(box, nonce, ephemeral pk, the store's sk). Its ephemeral key is shared
 * by the deliveries sealed to one store within a BURST (at most STORE_BOX_BURST_USES of them
 * within STORE_BOX_BURST_MS of the key's making), so sender and drain do one X25519 per burst
 * instead of one per delivery (each ~55 us here: ~40% of the drain's read-ahead, issue 13).
 * Sealed boxes' property stays: once a burst's key is wiped (at the latest at the first
 * sealing or store_box_seal_expire() after its window), nobody without the store's secret key
 * opens its files; within the window the sealing process could, as it could read the
 * plaintext it was handed.
 */
#ifndef MV_STORE_QUEUE_BOX_H
#define MV_STORE_QUEUE_BOX_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_BOX_KEY_SIZE   32
#define STORE_BOX_FORM2      "MVB2"
#define STORE_BOX_FORM2_SIZE 4
/* What each form adds to the plaintext. */
#define STORE_BOX_OVERHEAD_1   48
#define STORE_BOX_OVERHEAD_2   (STORE_BOX_FORM2_SIZE + 32 + 24 + 16)
#define STORE_BOX_OVERHEAD_MAX STORE_BOX_OVERHEAD_2

/* A burst key's window and its uses at most; the sealing keys of this many stores at once. */
#define STORE_BOX_BURST_MS   2000
#define STORE_BOX_BURST_USES 4096
#define STORE_BOX_BURST_KEYS 32

/* Seals plain (len bytes) to pk in form 2 into *out (malloc'd, len + STORE_BOX_OVERHEAD_2
 * bytes, the caller frees it: ciphertext). MV_OK, MV_ENOMEM, MV_ECORRUPT (pk is no usable
 * X25519 key) or MV_ERROR. Thread-safe. */
int store_box_seal(const uint8_t pk[STORE_BOX_KEY_SIZE],
                   const uint8_t *plain,
                   size_t len,
                   uint8_t **out,
                   size_t *out_len);

/* Wipes the burst keys whose window has passed (all: every one). Thread-safe. */
void store_box_seal_expire(int all);

/* Sets the burst window in ms (tests: a long one so a burst's files share a key whatever
 * the machine's speed, 0 so each delivery makes its own); returns the one it replaces. */
int64_t store_box_burst_ms_set(int64_t ms);

/* A drain's shared keys (ephemeral public key -> crypto_box_beforenm), for the threads that
 * open its files: init before, wipe after (store_box_cache_free). */
struct store_box_cache {
    pthread_mutex_t mu;
    unsigned next; /* the slot the next key goes to */
    struct {
        int used;
        uint8_t epk[STORE_BOX_KEY_SIZE];
        uint8_t k[32];
    } slot[4];
};

int store_box_cache_init(struct store_box_cache *c);
void store_box_cache_free(struct store_box_cache *c);

/* Opens a queue file's box of either form with the store's keys into plain (room for
 * sealed_len bytes); *plain_len the plaintext's length. 0, or -1 if it is no box of ours for
 * these keys (too short, forged, damaged, another key). cache: may be NULL. */
int store_box_open(struct store_box_cache *cache,
                   const uint8_t pk[STORE_BOX_KEY_SIZE],
                   const uint8_t sk[STORE_BOX_KEY_SIZE],
                   const uint8_t *sealed,
                   size_t sealed_len,
                   uint8_t *plain,
                   size_t *plain_len);

#endif
