/*
 * crypt_init.c -- fetches the OpenSSL algorithms once per process, and the small helpers
 * every cipher uses: random bytes, wiping, constant-time comparison.
 *
 * IMPLEMENTATION NOTES
 *   - Fetching an algorithm walks the provider tables under a lock; doing it per page
 *     would cost more than the page. crypt_init() fetches everything under pthread_once
 *     and keeps the objects for the life of the process (they stay reachable from
 *     crypt_algs_fetched, so leak checkers do not report them).
 *   - A pthread_atfork() child handler bumps crypt_fork_generation so per-context nonce
 *     pools (crypt_ctx.c) are refilled in the child instead of repeating the parent's.
 */
#include "crypto/crypt_internal.h"
#include <sodium.h>

#include <limits.h>
#include <malloc.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t crypt_init_once = PTHREAD_ONCE_INIT;
static int crypt_init_status = CRYPT_EFAIL;
static struct crypt_algs crypt_algs_fetched;
static _Atomic uint32_t crypt_fork_counter;

static void crypt_init_atfork_child(void)
{
    atomic_fetch_add_explicit(&crypt_fork_counter, 1u, memory_order_relaxed);
}

static void crypt_init_run(void)
{
    struct crypt_algs *a = &crypt_algs_fetched;
    a->chacha20 = EVP_CIPHER_fetch(NULL, "ChaCha20", NULL);
    a->aes256cbc = EVP_CIPHER_fetch(NULL, "AES-256-CBC", NULL);
    a->aes256cbc_cts = EVP_CIPHER_fetch(NULL, "AES-256-CBC-CTS", NULL);
    a->poly1305 = EVP_MAC_fetch(NULL, "POLY1305", NULL);
    a->hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    a->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
    a->sha512 = EVP_MD_fetch(NULL, "SHA512", NULL);
    a->md5 = EVP_MD_fetch(NULL, "MD5", NULL);
    a->pbkdf2 = EVP_KDF_fetch(NULL, "PBKDF2", NULL);
    /* (1) every algorithm present and (2) the fork hook installed: only then usable. */
    if (a->chacha20 == NULL || a->aes256cbc == NULL || a->aes256cbc_cts == NULL ||
        a->poly1305 == NULL || a->hmac == NULL || a->sha256 == NULL || a->sha512 == NULL ||
        a->md5 == NULL || a->pbkdf2 == NULL) {
        return;
    }
    crypt_provider_resolve(a); /* optional: chacha20 falls back to EVP */
    if (pthread_atfork(NULL, NULL, crypt_init_atfork_child) != 0) {
        return;
    }
    if (sodium_init() < 0) { /* picks libsodium's fastest ChaCha20 (crypt_chacha20.c) */
        return;
    }
    crypt_init_status = CRYPT_OK;
}

int crypt_init(void)
{
    if (pthread_once(&crypt_init_once, crypt_init_run) != 0) {
        return CRYPT_EFAIL;
    }
    return crypt_init_status;
}

const struct crypt_algs *crypt_algs(void)
{
    return &crypt_algs_fetched;
}

uint32_t crypt_fork_generation(void)
{
    return atomic_load_explicit(&crypt_fork_counter, memory_order_relaxed);
}

int crypt_random(uint8_t *buf, size_t len)
{
    if (buf == NULL && len > 0) {
        return CRYPT_EINVAL;
    }
    while (len > 0) {
        size_t chunk = len < (size_t)INT_MAX ? len : (size_t)INT_MAX;
        if (RAND_bytes(buf, (int)chunk) != 1) {
            return CRYPT_EFAIL;
        }
        buf += chunk;
        len -= chunk;
    }
    return CRYPT_OK;
}

void crypt_wipe(void *p, size_t n)
{
    if (p != NULL && n > 0) {
        OPENSSL_cleanse(p, n);
    }
}

void crypt_free_wiped(void *p)
{
    if (p != NULL) {
        /* sodium_memzero (explicit_bzero: memset's speed), not OPENSSL_cleanse, whose
         * 8-byte store loop wiped 9-13 GB/s against 20-190 here (256 KiB down to 4 KiB
         * blocks): these are whole messages, wiped on every fetch's mv_free */
        sodium_memzero(p, malloc_usable_size(p));
        free(p);
    }
}

void *crypt_realloc_wiped(void *p, size_t n)
{
    void *moved = malloc(n != 0 ? n : 1);
    if (moved == NULL) {
        return NULL;
    }
    if (p != NULL) {
        size_t old = malloc_usable_size(p);
        memcpy(moved, p, old < n ? old : n);
        crypt_free_wiped(p);
    }
    return moved;
}

int crypt_memcmp_ct(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0 ? 0 : 1;
}

int crypt_cipher_update(EVP_CIPHER_CTX *c, const uint8_t *in, uint8_t *out, size_t len)
{
    /* Pages are at most 64 KiB; longer inputs only come from crypt_chacha20_xor(), which
     * feeds them in slices. */
    if (len > (size_t)INT_MAX) {
        return CRYPT_EINVAL;
    }
    int out_len = 0;
    if (EVP_CipherUpdate(c, out, &out_len, in, (int)len) != 1 || out_len != (int)len) {
        return CRYPT_EFAIL;
    }
    return CRYPT_OK;
}
