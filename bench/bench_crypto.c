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
 *   crypto.openssl.chacha20_poly1305_mbps   EVP AEAD encrypt + decrypt of 4096 bytes
 *   crypto.chacha20.ratio_vs_aead   page_mbps / the AEAD figure (target >= 0.5)
 *   crypto.kdf.<cipher>_ms          one key derivation at the default iteration count
 *
 * IMPLEMENTATION NOTES
 *   A micro-benchmark of src/crypto, so unlike the other benchmarks it includes the
 *   internal crypto/crypt.h rather than only the public API. The AEAD baseline re-keys per
 *   buffer and counts its nonce up (no RNG); the page ciphers draw random nonces. Both
 *   count each 4096-byte buffer once for an encrypt + decrypt pair. Fixed data, fixed keys.
 */
#include "crypto/crypt.h"
#include "util.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#define BENCH_PAGE_SIZE 4096
#define BENCH_BATCH     64

int main(int argc, char **argv);

static const char bench_raw_key[] =
    "x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'";
static uint8_t bench_plain[BENCH_PAGE_SIZE];
static uint8_t bench_enc[BENCH_PAGE_SIZE];

/* MB/s of encrypt (+ decrypt when both) of 4096-byte pages for seconds. */
static double bench_pages(crypt_ctx *ctx, int both, double seconds)
{
    uint64_t pages = 0;
    uint32_t pgno = 2;
    double start = bench_now_s(), elapsed = 0;
    while (elapsed < seconds) {
        for (int i = 0; i < BENCH_BATCH; i++) {
            if (crypt_page_encrypt(ctx, pgno, bench_plain, bench_enc, BENCH_PAGE_SIZE, 0) !=
                CRYPT_OK) {
                bench_fail("crypt_page_encrypt", NULL);
            }
            if (both && crypt_page_decrypt(ctx, pgno, bench_enc, BENCH_PAGE_SIZE, 0) != CRYPT_OK) {
                bench_fail("crypt_page_decrypt", NULL);
            }
            pgno = pgno < 1000 ? pgno + 1 : 2;
        }
        pages += BENCH_BATCH;
        elapsed = bench_now_s() - start;
    }
    return (double)pages * BENCH_PAGE_SIZE / 1e6 / elapsed;
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
    double start = bench_now_s(), elapsed = 0;
    while (elapsed < seconds) {
        for (int i = 0; i < BENCH_BATCH; i++) {
            if (bench_aead_once(enc, dec, key, iv) != 0) {
                bench_fail("ChaCha20-Poly1305", NULL);
            }
        }
        buffers += BENCH_BATCH;
        elapsed = bench_now_s() - start;
    }
    EVP_CIPHER_CTX_free(enc);
    EVP_CIPHER_CTX_free(dec);
    EVP_CIPHER_free(aead);
    return (double)buffers * BENCH_PAGE_SIZE / 1e6 / elapsed;
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
    double start = bench_now_s();
    crypt_ctx *ctx = bench_ctx(cipher, 0, "bench password");
    printf("crypto.kdf.%s_ms %.1f\n", name, (bench_now_s() - start) * 1e3);
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
        chacha20_mbps = i == 0 ? both : chacha20_mbps;
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
