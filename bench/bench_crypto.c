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
 *   crypto.openssl.chacha20_poly1305_aead_speed_mbps   the loop apps/speed.c runs for
 *                                   `-aead` ("TLS-like"): per buffer the IV set again (so a
 *                                   new Poly1305 key from one ChaCha20 block), 13 bytes of
 *                                   AAD, 4096 bytes, the final. Debian's openssl 3.0.19
 *                                   runs the stream loop even with -aead (uprobes count no
 *                                   EVP_EncryptInit_ex), so this one is measured here only
 *   crypto.chacha20.ratio_vs_openssl_speed_aead   encrypt_mbps / that figure
 *   crypto.openssl.chacha20_poly1305_seal_mbps   one AEAD seal per 4096-byte page (new
 *                                   nonce, encrypt, tag): the same job as a page encryption
 *   crypto.chacha20.ratio_vs_openssl_seal    encrypt_mbps / that figure, alternating slices
 *   crypto.openssl.page_floor_mbps  the floor of the chacha20 page format on this OpenSSL:
 *                                   per 4096-byte buffer only the calls a page needs, a
 *                                   new ChaCha20 key + IV and 4096 bytes, a new Poly1305
 *                                   key and 4080 bytes (as 3968 + 112) and its tag,
 *                                   through the provider's functions as src/crypto calls
 *                                   them (EVP if they were not found); no one-time key,
 *                                   nonce, check or wipe
 *   crypto.openssl.page_floor_evp_mbps       the same calls through EVP
 *   crypto.openssl.ratio_floor_vs_openssl_speed   page_floor / the stream figure: the
 *                                   most any page cipher in this format can reach against
 *                                   `openssl speed` with OpenSSL's primitives
 *   crypto.chacha20.ratio_vs_floor  encrypt_mbps / page_floor (what src/crypto adds)
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
#include "crypto/crypt_internal.h" /* the provider's functions, for the floor */
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
    BENCH_OPENSSL_AEAD,   /* as `openssl speed -evp ... -aead`: IV, AAD, update, final */
    BENCH_OPENSSL_SEAL,   /* per buffer: new nonce, encrypt, final, tag */
    BENCH_OPENSSL_FLOOR,  /* per buffer: the primitives of one chacha20 page, new keys */
    BENCH_OPENSSL_FLOOR_EVP,
};

struct bench_openssl {
    EVP_CIPHER *aead;
    EVP_CIPHER_CTX *stream;
    EVP_CIPHER_CTX *aead_speed;
    EVP_CIPHER_CTX *seal;
    uint8_t key[32];
    uint8_t iv[12];
    /* The floor: ChaCha20 and Poly1305 contexts, EVP's and the provider's (prov NULL:
     * the provider's functions were not found, the floor runs through EVP). */
    EVP_CIPHER_CTX *floor_cipher;
    EVP_MAC_CTX *floor_mac;
    const struct crypt_provider *prov;
    void *prov_cipher;
    void *prov_mac;
    uint8_t otk[64]; /* the "one-time key": changed before every buffer */
    uint8_t floor_iv[16];
};

static void bench_openssl_open(struct bench_openssl *o)
{
    memset(o, 0, sizeof *o);
    o->key[0] = 1;
    o->aead = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
    o->stream = EVP_CIPHER_CTX_new();
    o->aead_speed = EVP_CIPHER_CTX_new();
    o->seal = EVP_CIPHER_CTX_new();
    if (o->aead == NULL || o->stream == NULL || o->aead_speed == NULL || o->seal == NULL ||
        EVP_EncryptInit_ex2(o->stream, o->aead, o->key, o->iv, NULL) != 1 ||
        EVP_EncryptInit_ex2(o->aead_speed, o->aead, o->key, o->iv, NULL) != 1 ||
        EVP_EncryptInit_ex2(o->seal, o->aead, o->key, o->iv, NULL) != 1) {
        bench_fail("ChaCha20-Poly1305 setup", NULL);
    }
    EVP_CIPHER *chacha20 = EVP_CIPHER_fetch(NULL, "ChaCha20", NULL);
    EVP_MAC *poly1305 = EVP_MAC_fetch(NULL, "Poly1305", NULL);
    o->floor_cipher = EVP_CIPHER_CTX_new();
    o->floor_mac = poly1305 != NULL ? EVP_MAC_CTX_new(poly1305) : NULL;
    if (chacha20 == NULL || o->floor_cipher == NULL || o->floor_mac == NULL ||
        EVP_EncryptInit_ex2(o->floor_cipher, chacha20, o->otk, o->floor_iv, NULL) != 1) {
        bench_fail("ChaCha20 / Poly1305 setup", NULL);
    }
    EVP_CIPHER_free(chacha20); /* the contexts keep their references */
    EVP_MAC_free(poly1305);
    o->prov = crypt_provider();
    if (o->prov != NULL) {
        o->prov_cipher = o->prov->cipher_newctx(o->prov->cipher_provctx);
        o->prov_mac = o->prov->mac_newctx(o->prov->mac_provctx);
        if (o->prov_cipher == NULL || o->prov_mac == NULL) {
            bench_fail("provider ChaCha20 / Poly1305 contexts", NULL);
        }
    }
}

/* The calls of one chacha20 page (crypt_chacha20.c) on bench_plain, keys and IV new. */
static int bench_floor_once(struct bench_openssl *o, int evp)
{
    size_t len = 0, tag_len = 0;
    int outl = 0;
    o->otk[0]++; /* a new Poly1305 key (otk[0..32]) and data key (otk[32..64]) */
    o->otk[32]++;
    o->floor_iv[4]++;
    if (evp || o->prov == NULL) {
        return EVP_EncryptInit_ex2(o->floor_cipher, NULL, o->otk + 32, o->floor_iv, NULL) == 1 &&
                       EVP_EncryptUpdate(o->floor_cipher, bench_enc, &outl, bench_plain,
                                         BENCH_PAGE_SIZE) == 1 &&
                       EVP_MAC_init(o->floor_mac, o->otk, 32, NULL) == 1 &&
                       EVP_MAC_update(o->floor_mac, bench_enc, 3968) == 1 &&
                       EVP_MAC_update(o->floor_mac, bench_enc + 3968, 112) == 1 &&
                       EVP_MAC_final(o->floor_mac, bench_enc + 4080, &tag_len, 16) == 1
                   ? 0
                   : -1;
    }
    const struct crypt_provider *p = o->prov;
    return p->cipher_init(o->prov_cipher, o->otk + 32, 32, o->floor_iv, 16, NULL) == 1 &&
                   p->cipher_update(o->prov_cipher, bench_enc, &len, BENCH_PAGE_SIZE, bench_plain,
                                    BENCH_PAGE_SIZE) == 1 &&
                   p->mac_init(o->prov_mac, o->otk, 32, NULL) == 1 &&
                   p->mac_update(o->prov_mac, bench_enc, 3968) == 1 &&
                   p->mac_update(o->prov_mac, bench_enc + 3968, 112) == 1 &&
                   p->mac_final(o->prov_mac, bench_enc + 4080, &tag_len, 16) == 1
               ? 0
               : -1;
}

static void bench_openssl_close(struct bench_openssl *o)
{
    EVP_CIPHER_CTX_free(o->stream);
    EVP_CIPHER_CTX_free(o->aead_speed);
    EVP_CIPHER_CTX_free(o->seal);
    EVP_CIPHER_free(o->aead);
    EVP_CIPHER_CTX_free(o->floor_cipher);
    EVP_MAC_CTX_free(o->floor_mac);
    if (o->prov != NULL) {
        o->prov->cipher_freectx(o->prov_cipher);
        o->prov->mac_freectx(o->prov_mac);
    }
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
            } else if (mode == BENCH_OPENSSL_AEAD) {
                /* apps/speed.c's loop: the same IV every time, which still re-derives
                 * the Poly1305 key and re-initialises Poly1305 */
                static const uint8_t aad[13] = {0xcc};
                ok = EVP_EncryptInit_ex2(o->aead_speed, NULL, NULL, o->iv, NULL) == 1 &&
                     EVP_EncryptUpdate(o->aead_speed, NULL, &len, aad, sizeof aad) == 1 &&
                     EVP_EncryptUpdate(o->aead_speed, bench_enc, &len, bench_plain,
                                       BENCH_PAGE_SIZE) == 1 &&
                     EVP_EncryptFinal_ex(o->aead_speed, bench_enc + len, &fin) == 1;
            } else if (mode == BENCH_OPENSSL_FLOOR || mode == BENCH_OPENSSL_FLOOR_EVP) {
                ok = bench_floor_once(o, mode == BENCH_OPENSSL_FLOOR_EVP) == 0;
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
    struct bench_tally page = {0, 0}, stream = {0, 0}, aead = {0, 0}, seal = {0, 0}, floor = {0, 0},
                       floor_evp = {0, 0};
    double slice = seconds / BENCH_SLICES;
    bench_openssl_open(&o);
    for (int i = 0; i < BENCH_SLICES; i++) {
        bench_pages_into(chacha20, BENCH_ENCRYPT, slice, &page);
        bench_openssl_into(&o, BENCH_OPENSSL_STREAM, slice, &stream);
        bench_openssl_into(&o, BENCH_OPENSSL_FLOOR, slice, &floor);
        bench_pages_into(chacha20, BENCH_ENCRYPT, slice, &page);
        bench_openssl_into(&o, BENCH_OPENSSL_SEAL, slice, &seal);
        bench_openssl_into(&o, BENCH_OPENSSL_FLOOR_EVP, slice / 2, &floor_evp);
        bench_openssl_into(&o, BENCH_OPENSSL_AEAD, slice / 2, &aead);
    }
    bench_openssl_close(&o);
    printf("crypto.openssl.chacha20_poly1305_stream_mbps %.1f\n", bench_mbps(&stream));
    printf("crypto.openssl.chacha20_poly1305_aead_speed_mbps %.1f\n", bench_mbps(&aead));
    printf("crypto.openssl.chacha20_poly1305_seal_mbps %.1f\n", bench_mbps(&seal));
    printf("crypto.openssl.page_floor_mbps %.1f\n", bench_mbps(&floor));
    printf("crypto.openssl.page_floor_evp_mbps %.1f\n", bench_mbps(&floor_evp));
    printf("crypto.openssl.ratio_floor_vs_openssl_speed %.2f\n",
           bench_mbps(&floor) / bench_mbps(&stream));
    printf("crypto.chacha20.ratio_vs_floor %.2f\n", bench_mbps(&page) / bench_mbps(&floor));
    printf("crypto.chacha20.ratio_vs_openssl_speed %.2f\n",
           bench_mbps(&page) / bench_mbps(&stream));
    printf("crypto.chacha20.ratio_vs_openssl_speed_aead %.2f\n",
           bench_mbps(&page) / bench_mbps(&aead));
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
