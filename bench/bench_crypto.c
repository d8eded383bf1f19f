/*
 * bench_crypto.c -- page-cipher throughput of the crypto layer, against OpenSSL's own
 * ChaCha20-Poly1305 AEAD on the same buffers in the same process.
 *
 * USAGE
 *   build/rel/bench/bench_crypto [SECONDS_PER_ITEM]     (default 1.5)
 *
 * OUTPUT (one "name value" line per item; MB = 10^6 bytes)
 *   crypto.<cipher>.page_mbps       4096-byte pages encrypted then decrypted, per second
 *   crypto.<cipher>.encrypt_mbps    encryption alone
 *   crypto.chacha20.decrypt_mbps    chacha20 authentication + decryption alone
 *   crypto.openssl.chacha20_poly1305_mbps   EVP AEAD encrypt + decrypt of 4096 bytes
 *   crypto.chacha20.ratio_vs_aead   page_mbps / the AEAD figure
 *   crypto.openssl.chacha20_poly1305_stream_mbps   what `openssl speed -evp
 *                                   chacha20-poly1305 -bytes 4096` measures: one
 *                                   EVP_EncryptUpdate() of 4096 bytes after another on one
 *                                   context (no nonce, no tag, no re-keying)
 *   crypto.chacha20.ratio_vs_openssl_speed   encrypt_mbps / that figure, measured in
 *                                   alternating slices (target >= 0.9, issue 13)
 *   crypto.openssl.chacha20_poly1305_seal_mbps   one AEAD seal per 4096-byte page (new
 *                                   nonce, encrypt, tag): the same job as a page encryption
 *   crypto.chacha20.ratio_vs_openssl_seal    encrypt_mbps / that figure, alternating slices
 *   crypto.kdf.<cipher>_ms          one key derivation at the default iteration count
 *
 * IMPLEMENTATION NOTES
 *   A micro-benchmark of src/crypto, so unlike the other benchmarks it includes the
 *   internal crypto/crypt.h rather than only the public API. The AEAD baseline re-keys per
 *   buffer and counts its nonce up (no RNG); the page ciphers draw random nonces. Both
 *   count each 4096-byte buffer once for an encrypt + decrypt pair. Fixed data, fixed keys.
 *   Throughput is per second of this thread's CPU time, as `openssl speed` counts user
 *   time by default: on a shared machine wall time would mostly measure the neighbours.
 *   The ratios against OpenSSL alternate the two loops in BENCH_SLICES slices each, so a
 *   change in the machine's speed during the run hits both sides alike.
 */
#include "crypto/crypt.h"
#include "util.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define BENCH_PAGE_SIZE 4096
#define BENCH_BATCH     64
#define BENCH_SLICES    8

int main(int argc, char **argv);

static const char bench_raw_key[] =
    "x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'";
static uint8_t bench_plain[BENCH_PAGE_SIZE];
static uint8_t bench_enc[BENCH_PAGE_SIZE];

/* This thread's CPU time in seconds. */
static double bench_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        bench_fail("clock_gettime(CLOCK_THREAD_CPUTIME_ID)", NULL);
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Bytes and CPU seconds of a measurement, summed over slices. */
struct bench_tally {
    double bytes;
    double seconds;
};

static double bench_mbps(const struct bench_tally *t)
{
    return t->seconds > 0 ? t->bytes / 1e6 / t->seconds : 0;
}

enum bench_page_op { BENCH_ENCRYPT, BENCH_DECRYPT, BENCH_BOTH };

/* Adds seconds of page operations (4096-byte pages) to *t. Decryption runs on pages
 * encrypted beforehand (outside the clock) under their page numbers. */
static void
bench_pages_into(crypt_ctx *ctx, enum bench_page_op op, double seconds, struct bench_tally *t)
{
    static uint8_t sealed[BENCH_BATCH][BENCH_PAGE_SIZE];
    static uint8_t work[BENCH_PAGE_SIZE];
    if (op == BENCH_DECRYPT) {
        for (uint32_t i = 0; i < BENCH_BATCH; i++) {
            if (crypt_page_encrypt(ctx, i + 2, bench_plain, sealed[i], BENCH_PAGE_SIZE, 0) !=
                CRYPT_OK) {
                bench_fail("crypt_page_encrypt", NULL);
            }
        }
    }
    uint64_t pages = 0;
    uint32_t pgno = 2;
    double start = bench_cpu_s(), elapsed = 0;
    while (elapsed < seconds) {
        for (uint32_t i = 0; i < BENCH_BATCH; i++) {
            if (op == BENCH_DECRYPT) {
                memcpy(work, sealed[i], BENCH_PAGE_SIZE);
                if (crypt_page_decrypt(ctx, i + 2, work, BENCH_PAGE_SIZE, 0) != CRYPT_OK) {
                    bench_fail("crypt_page_decrypt", NULL);
                }
                continue;
            }
            if (crypt_page_encrypt(ctx, pgno, bench_plain, bench_enc, BENCH_PAGE_SIZE, 0) !=
                CRYPT_OK) {
                bench_fail("crypt_page_encrypt", NULL);
            }
            if (op == BENCH_BOTH &&
                crypt_page_decrypt(ctx, pgno, bench_enc, BENCH_PAGE_SIZE, 0) != CRYPT_OK) {
                bench_fail("crypt_page_decrypt", NULL);
            }
            pgno = pgno < 1000 ? pgno + 1 : 2;
        }
        pages += BENCH_BATCH;
        elapsed = bench_cpu_s() - start;
    }
    t->bytes += (double)pages * BENCH_PAGE_SIZE;
    t->seconds += elapsed;
}

/* MB/s of encrypt (+ decrypt when both) of 4096-byte pages for seconds. */
static double bench_pages(crypt_ctx *ctx, int both, double seconds)
{
    struct bench_tally t = {0, 0};
    bench_pages_into(ctx, both ? BENCH_BOTH : BENCH_ENCRYPT, seconds, &t);
    return bench_mbps(&t);
}

/* One AEAD encrypt + decrypt of bench_plain; 0 on success. */
static int
bench_aead_once(EVP_CIPHER_CTX *enc, EVP_CIPHER_CTX *dec, const uint8_t key[32], uint8_t iv[12])
{
    uint8_t tag[16];
    int len = 0, fin = 0;
    iv[0]++;
    if (EVP_EncryptInit_ex2(enc, NULL, key, iv, NULL) != 1 ||
        EVP_EncryptUpdate(enc, bench_enc, &len, bench_plain, BENCH_PAGE_SIZE) != 1 ||
        EVP_EncryptFinal_ex(enc, bench_enc + len, &fin) != 1 ||
        EVP_CIPHER_CTX_ctrl(enc, EVP_CTRL_AEAD_GET_TAG, 16, tag) != 1) {
        return -1;
    }
    if (EVP_DecryptInit_ex2(dec, NULL, key, iv, NULL) != 1 ||
        EVP_CIPHER_CTX_ctrl(dec, EVP_CTRL_AEAD_SET_TAG, 16, tag) != 1 ||
        EVP_DecryptUpdate(dec, bench_enc, &len, bench_enc, BENCH_PAGE_SIZE) != 1 ||
        EVP_DecryptFinal_ex(dec, bench_enc + len, &fin) != 1) {
        return -1;
    }
    return 0;
}

static double bench_aead(double seconds)
{
    uint8_t key[32] = {1}, iv[12] = {0};
    EVP_CIPHER *aead = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    EVP_CIPHER_CTX *enc = EVP_CIPHER_CTX_new(), *dec = EVP_CIPHER_CTX_new();
    if (aead == NULL || enc == NULL || dec == NULL ||
        EVP_EncryptInit_ex2(enc, aead, key, iv, NULL) != 1 ||
        EVP_DecryptInit_ex2(dec, aead, key, iv, NULL) != 1) {
        bench_fail("ChaCha20-Poly1305 setup", NULL);
    }
    uint64_t buffers = 0;
    double start = bench_cpu_s(), elapsed = 0;
    while (elapsed < seconds) {
        for (int i = 0; i < BENCH_BATCH; i++) {
            if (bench_aead_once(enc, dec, key, iv) != 0) {
                bench_fail("ChaCha20-Poly1305", NULL);
            }
        }
        buffers += BENCH_BATCH;
        elapsed = bench_cpu_s() - start;
    }
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
    EVP_CIPHER_free(aead);
    return (double)buffers * BENCH_PAGE_SIZE / 1e6 / elapsed;
}

/* OpenSSL's ChaCha20-Poly1305 on 4096-byte buffers, two ways (bench_openssl_into). */
enum bench_openssl_mode {
    BENCH_OPENSSL_STREAM, /* as `openssl speed -evp`: EVP_EncryptUpdate after update */
    BENCH_OPENSSL_SEAL,   /* per buffer: new nonce, encrypt, final, tag */
};

struct bench_openssl {
    EVP_CIPHER *aead;
    EVP_CIPHER_CTX *stream;
    EVP_CIPHER_CTX *seal;
    uint8_t key[32];
    uint8_t iv[12];
};

static void bench_openssl_open(struct bench_openssl *o)
{
    memset(o, 0, sizeof *o);
    o->key[0] = 1;
    o->aead = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    o->stream = EVP_CIPHER_CTX_new();
    o->seal = EVP_CIPHER_CTX_new();
    if (o->aead == NULL || o->stream == NULL || o->seal == NULL ||
        EVP_EncryptInit_ex2(o->stream, o->aead, o->key, o->iv, NULL) != 1 ||
        EVP_EncryptInit_ex2(o->seal, o->aead, o->key, o->iv, NULL) != 1) {
        bench_fail("ChaCha20-Poly1305 setup", NULL);
    }
}

static void bench_openssl_close(struct bench_openssl *o)
{
    EVP_CIPHER_CTX_free(o->stream);
    EVP_CIPHER_CTX_free(o->seal);
    EVP_CIPHER_free(o->aead);
}

/* Adds seconds of OpenSSL's AEAD on 4096-byte buffers to *t. */
static void bench_openssl_into(struct bench_openssl *o,
                               enum bench_openssl_mode mode,
                               double seconds,
                               struct bench_tally *t)
{
    uint64_t buffers = 0;
    double start = bench_cpu_s(), elapsed = 0;
    while (elapsed < seconds) {
        for (int i = 0; i < BENCH_BATCH; i++) {
            int len = 0, fin = 0, ok = 1;
            uint8_t tag[16];
            if (mode == BENCH_OPENSSL_STREAM) {
                ok = EVP_EncryptUpdate(o->stream, bench_enc, &len, bench_plain, BENCH_PAGE_SIZE) ==
                     1;
            } else {
                o->iv[0]++;
                ok = EVP_EncryptInit_ex2(o->seal, NULL, o->key, o->iv, NULL) == 1 &&
                     EVP_EncryptUpdate(o->seal, bench_enc, &len, bench_plain, BENCH_PAGE_SIZE) ==
                         1 &&
                     EVP_EncryptFinal_ex(o->seal, bench_enc + len, &fin) == 1 &&
                     EVP_CIPHER_CTX_ctrl(o->seal, EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1;
            }
            if (!ok) {
                bench_fail("ChaCha20-Poly1305", NULL);
            }
        }
        buffers += BENCH_BATCH;
        elapsed = bench_cpu_s() - start;
    }
    t->bytes += (double)buffers * BENCH_PAGE_SIZE;
    t->seconds += elapsed;
}

/* The page cipher's encryption against OpenSSL's AEAD for the same primitive and size,
 * in alternating slices; prints the figures and the ratios. */
static void bench_vs_openssl(crypt_ctx *chacha20, double seconds)
{
    struct bench_openssl o;
    struct bench_tally page = {0, 0}, stream = {0, 0}, seal = {0, 0};
    double slice = seconds / BENCH_SLICES;
    bench_openssl_open(&o);
    for (int i = 0; i < BENCH_SLICES; i++) {
        bench_pages_into(chacha20, BENCH_ENCRYPT, slice, &page);
        bench_openssl_into(&o, BENCH_OPENSSL_STREAM, slice, &stream);
        bench_pages_into(chacha20, BENCH_ENCRYPT, slice, &page);
        bench_openssl_into(&o, BENCH_OPENSSL_SEAL, slice, &seal);
    }
    bench_openssl_close(&o);
    printf("crypto.openssl.chacha20_poly1305_stream_mbps %.1f\n", bench_mbps(&stream));
    printf("crypto.openssl.chacha20_poly1305_seal_mbps %.1f\n", bench_mbps(&seal));
    printf("crypto.chacha20.ratio_vs_openssl_speed %.2f\n",
           bench_mbps(&page) / bench_mbps(&stream));
    printf("crypto.chacha20.ratio_vs_openssl_seal %.2f\n", bench_mbps(&page) / bench_mbps(&seal));
}

static crypt_ctx *bench_ctx(int cipher, uint32_t kdf_iter, const char *secret)
{
    const struct crypt_params params = {cipher, kdf_iter, 0};
    uint8_t salt[CRYPT_SALT_BYTES] = {0x5a};
    crypt_ctx *ctx = NULL;
    if (crypt_ctx_create(&params, (const uint8_t *)secret, strlen(secret), salt, &ctx) !=
        CRYPT_OK) {
        bench_fail("crypt_ctx_create", NULL);
    }
    return ctx;
}

static void bench_kdf(const char *name, int cipher)
{
    double start = bench_cpu_s();
    crypt_ctx *ctx = bench_ctx(cipher, 0, "bench password");
    printf("crypto.kdf.%s_ms %.1f\n", name, (bench_cpu_s() - start) * 1e3);
    crypt_ctx_free(ctx);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int cipher;
    } ciphers[] = {{"chacha20", CRYPT_CIPHER_CHACHA20},
                   {"aes256cbc", CRYPT_CIPHER_AES256CBC},
                   {"sqlcipher", CRYPT_CIPHER_SQLCIPHER}};
    double seconds = argc > 1 ? strtod(argv[1], NULL) : 1.5;
    seconds = seconds > 0.01 ? seconds : 1.5;
    if (crypt_init() != CRYPT_OK || crypt_selftest() != CRYPT_OK) {
        bench_fail("crypt_init / crypt_selftest", NULL);
    }
    for (size_t i = 0; i < sizeof bench_plain; i++) {
        bench_plain[i] = (uint8_t)(i * 131u + 7u);
    }
    double chacha20_mbps = 0;
    for (size_t i = 0; i < sizeof ciphers / sizeof ciphers[0]; i++) {
        int aes = ciphers[i].cipher == CRYPT_CIPHER_AES256CBC;
        crypt_ctx *ctx = bench_ctx(ciphers[i].cipher, 0, aes ? "bench password" : bench_raw_key);
        double both = bench_pages(ctx, 1, seconds);
        printf("crypto.%s.page_mbps %.1f\n", ciphers[i].name, both);
        printf("crypto.%s.encrypt_mbps %.1f\n", ciphers[i].name, bench_pages(ctx, 0, seconds));
        if (ciphers[i].cipher == CRYPT_CIPHER_CHACHA20) {
            struct bench_tally dec = {0, 0};
            bench_pages_into(ctx, BENCH_DECRYPT, seconds, &dec);
            printf("crypto.chacha20.decrypt_mbps %.1f\n", bench_mbps(&dec));
            bench_vs_openssl(ctx, 2 * seconds);
            chacha20_mbps = both;
        }
        crypt_ctx_free(ctx);
    }
    double aead_mbps = bench_aead(seconds);
    printf("crypto.openssl.chacha20_poly1305_mbps %.1f\n", aead_mbps);
    printf("crypto.chacha20.ratio_vs_aead %.2f\n", chacha20_mbps / aead_mbps);
    bench_kdf("chacha20", CRYPT_CIPHER_CHACHA20);
    bench_kdf("sqlcipher", CRYPT_CIPHER_SQLCIPHER);
    fflush(stdout);
    return 0;
}
