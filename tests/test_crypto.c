/*
 * test_crypto.c -- the crypto layer (src/crypto): known answers for every primitive, the
 * derived keys of the SQLite3MC test vectors, round trips of every cipher, tamper and
 * wrong-key detection, secret parsing, clones, and decryption of the reference files in
 * ../shared/testvectors/sqlite3mc when that directory exists.
 *
 * Vectors: RFC 8439 §2.3.2, §2.4.2, §2.5.2; RFC 7914 §11 (PBKDF2-HMAC-SHA256); the
 * PBKDF2-HMAC-SHA512 "password"/"salt"/1 vector; ../shared/testvectors/sqlite3mc/README.md.
 * Round trips use kdf_iter 2 to stay fast; the vector tests use the real defaults.
 */
#include "crypto/crypt.h"
#include "crypto/crypt_internal.h" /* crypt_chacha20_otk_pool_fill: the pool at the wrap */
#include "harness.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_PASSWORD    "fe-testvector-password"
#define TEST_PAGE_MAX    65536
#define TEST_KEY_HEX_OTK "8c1f0e2d3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9011223344ff"

static const uint32_t test_page_sizes[] = {512, 4096, 8192, 65536};

static void test_hex(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
            abort();
        }
        out[i] = (uint8_t)v;
    }
}

static int test_eq_hex(const uint8_t *got, const char *hex)
{
    uint8_t want[128];
    size_t n = strlen(hex) / 2;
    if (n > sizeof want) {
        abort();
    }
    test_hex(hex, want, n);
    return memcmp(got, want, n) == 0;
}

/* A plausible page: pattern bytes; page 1 gets the magic and a header at 16..23. */
static void test_fill_page(uint8_t *page, uint32_t page_size, uint32_t pgno, int cipher)
{
    for (uint32_t i = 0; i < page_size; i++) {
        page[i] = (uint8_t)(i * 31u + pgno * 7u + (i >> 8));
    }
    if (pgno == 1) {
        memcpy(page, "SQLite format 3", 16);
        page[16] = page_size == 65536 ? 0 : (uint8_t)(page_size >> 8);
        page[17] = page_size == 65536 ? 1 : (uint8_t)page_size;
        page[18] = 1;
        page[19] = 1;
        page[20] = (uint8_t)crypt_reserve_bytes(cipher);
        page[21] = 0x40;
        page[22] = 0x20;
        page[23] = 0x20;
    }
}

/* ---- primitives ------------------------------------------------------------------------ */

static void test_chacha20_rfc8439_block(void)
{
    uint8_t key[32], nonce[12], zero[64] = {0}, out[64];
    for (int i = 0; i < 32; i++) {
        key[i] = (uint8_t)i;
    }
    test_hex("000000090000004a00000000", nonce, 12);
    CHECK_EQ_INT(crypt_chacha20_xor(key, 1, nonce, zero, out, 64), CRYPT_OK);
    CHECK(test_eq_hex(out, "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"));
    CHECK(
        test_eq_hex(out + 32, "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"));
}

static void test_chacha20_rfc8439_encrypt(void)
{
    static const char text[] = "Ladies and Gentlemen of the class of '99: If I could offer you "
                               "only one tip for the future, sunscreen would be it.";
    static const char *const want =
        "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b"
        "f91b65c5524733ab8f593dabcd62b3571639d624e65152ab8f530c359f0861d8"
        "07ca0dbf500d6a6156a38e088a22b65e52bc514d16ccf806818ce91ab7793736"
        "5af90bbf74a35be6b40b8eedf2785e42874d";
    uint8_t key[32], nonce[12], out[sizeof text - 1], back[sizeof text - 1], ref[sizeof out];
    for (int i = 0; i < 32; i++) {
        key[i] = (uint8_t)i;
    }
    test_hex("000000000000004a00000000", nonce, 12);
    test_hex(want, ref, sizeof ref);
    CHECK_EQ_INT(crypt_chacha20_xor(key, 1, nonce, (const uint8_t *)text, out, sizeof out),
                 CRYPT_OK);
    CHECK(memcmp(out, ref, sizeof out) == 0);
    memcpy(back, out, sizeof back); /* in place, back to the plaintext */
    CHECK_EQ_INT(crypt_chacha20_xor(key, 1, nonce, back, back, sizeof back), CRYPT_OK);
    CHECK(memcmp(back, text, sizeof back) == 0);
}

static void test_poly1305_rfc8439(void)
{
    static const char msg[] = "Cryptographic Forum Research Group";
    uint8_t key[32], tag[16];
    test_hex("85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b", key, 32);
    CHECK_EQ_INT(crypt_poly1305(key, (const uint8_t *)msg, sizeof msg - 1, tag), CRYPT_OK);
    CHECK(test_eq_hex(tag, "a8061dc1305136c6c22b8baf0c0127a9"));
}

/* OpenSSL's own ChaCha20 at a counter/nonce, to show what it does at the wrap. */
static int test_openssl_chacha20(
    const uint8_t key[32], uint32_t counter, const uint8_t nonce[12], uint8_t *out, int len)
{
    uint8_t iv[16], zero[256] = {0};
    int out_len = 0;
    iv[0] = (uint8_t)counter;
    iv[1] = (uint8_t)(counter >> 8);
    iv[2] = (uint8_t)(counter >> 16);
    iv[3] = (uint8_t)(counter >> 24);
    memcpy(iv + 4, nonce, 12);
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int ok = c != NULL && EVP_EncryptInit_ex(c, EVP_chacha20(), NULL, key, iv) == 1 &&
             EVP_EncryptUpdate(c, out, &out_len, zero, len) == 1 && out_len == len;
    EVP_CIPHER_CTX_free(c);
    return ok;
}

static void test_chacha20_counter_wrap(void)
{
    uint8_t key[32], nonce[12], zero[200] = {0}, wrapped[200], block[64], carried[128];
    for (int i = 0; i < 32; i++) {
        key[i] = (uint8_t)(0xa0 + i);
    }
    test_hex("0102030405060708090a0b0c", nonce, 12);
    CHECK_EQ_INT(crypt_chacha20_xor(key, 0xffffffffu, nonce, zero, wrapped, 128), CRYPT_OK);
    CHECK_EQ_INT(crypt_chacha20_xor(key, 0, nonce, zero, block, 64), CRYPT_OK);
    CHECK(memcmp(wrapped + 64, block, 64) == 0); /* sqleet: counter 0, same nonce */
    CHECK_EQ_INT(crypt_chacha20_xor(key, 0xffffffffu, nonce, zero, block, 64), CRYPT_OK);
    CHECK(memcmp(wrapped, block, 64) == 0);
    CHECK(test_openssl_chacha20(key, 0xffffffffu, nonce, carried, 128));
    CHECK(memcmp(carried, wrapped, 64) == 0);           /* before the wrap they agree */
    CHECK(memcmp(carried + 64, wrapped + 64, 64) != 0); /* OpenSSL carries into the nonce */
    /* A wrap inside a block-unaligned call: 0xfffffffe, 200 bytes = blocks fe, ff, 0, 1. */
    CHECK_EQ_INT(crypt_chacha20_xor(key, 0xfffffffeu, nonce, zero, wrapped, 200), CRYPT_OK);
    CHECK_EQ_INT(crypt_chacha20_xor(key, 0, nonce, zero, block, 64), CRYPT_OK);
    CHECK(memcmp(wrapped + 128, block, 64) == 0);
    CHECK_EQ_INT(crypt_chacha20_xor(key, 1, nonce, zero, block, 8), CRYPT_OK);
    CHECK(memcmp(wrapped + 192, block, 8) == 0);
}

static void test_pbkdf2_sha256_rfc7914(void)
{
    uint8_t out[64];
    CHECK_EQ_INT(
        crypt_pbkdf2_sha256((const uint8_t *)"passwd", 6, (const uint8_t *)"salt", 4, 1, out, 64),
        CRYPT_OK);
    CHECK(test_eq_hex(out, "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"));
    CHECK(
        test_eq_hex(out + 32, "49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783"));
    CHECK_EQ_INT(crypt_pbkdf2_sha256((const uint8_t *)"Password", 8, (const uint8_t *)"NaCl", 4,
                                     80000, out, 64),
                 CRYPT_OK);
    CHECK(test_eq_hex(out, "4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08876b34ab56"));
    CHECK(
        test_eq_hex(out + 32, "a1d425a1225833549adb841b51c9b3176a272bdebba1d078478f62b397f33c8d"));
}

/* OpenSSL's allocations, counted (test_pbkdf2_sha256_allocations); installed first in main. */
static atomic_ulong test_ossl_allocs;

static void *test_ossl_malloc(size_t n, const char *file, int line)
{
    (void)file, (void)line;
    atomic_fetch_add(&test_ossl_allocs, 1);
    return malloc(n);
}

static void *test_ossl_realloc(void *p, size_t n, const char *file, int line)
{
    (void)file, (void)line;
    atomic_fetch_add(&test_ossl_allocs, 1);
    return realloc(p, n);
}

static void test_ossl_free(void *p, const char *file, int line)
{
    (void)file, (void)line;
    free(p);
}

/* PBKDF2-HMAC-SHA256 through OpenSSL's EVP_KDF, the reference for crypt_pbkdf2_sha256. */
static int test_pbkdf2_evp(const uint8_t *pass,
                           size_t pass_len,
                           const uint8_t *salt,
                           size_t salt_len,
                           uint32_t iter,
                           uint8_t *out,
                           size_t out_len)
{
    static const uint8_t empty[1];
    int pkcs5 = 1;
    uint64_t iter64 = iter;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PASSWORD,
                                          (void *)(pass_len > 0 ? pass : empty), pass_len),
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                          (void *)(salt_len > 0 ? salt : empty), salt_len),
        OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_ITER, &iter64),
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_PKCS5, &pkcs5),
        OSSL_PARAM_construct_end(),
    };
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, "PBKDF2", NULL);
    EVP_KDF_CTX *ctx = kdf != NULL ? EVP_KDF_CTX_new(kdf) : NULL;
    int ok = ctx != NULL && EVP_KDF_derive(ctx, out, out_len, params) == 1;
    EVP_KDF_CTX_free(ctx);
    EVP_KDF_free(kdf);
    return ok;
}

/* crypt_pbkdf2_sha256 gives EVP_KDF's bytes at every edge of its lengths: passwords below,
 * at and above the 64-byte block (hashed first), empty salt, iteration counts 1-3, outputs
 * of part of a block, one, and several blocks. */
static void test_pbkdf2_sha256_matches_evp(void)
{
    static const size_t pass_lens[] = {0, 1, 32, 63, 64, 65, 200};
    static const size_t salt_lens[] = {0, 1, 16, 100};
    static const uint32_t iters[] = {1, 2, 3, 100};
    static const size_t out_lens[] = {1, 31, 32, 33, 64, 100};
    uint8_t pass[200], salt[100], got[100], want[100];
    for (size_t i = 0; i < sizeof pass; i++) {
        pass[i] = (uint8_t)(i * 7u + 3u);
    }
    for (size_t i = 0; i < sizeof salt; i++) {
        salt[i] = (uint8_t)(i * 13u + 5u);
    }
    int mismatches = 0, failures = 0;
    for (size_t p = 0; p < sizeof pass_lens / sizeof pass_lens[0]; p++) {
        for (size_t s = 0; s < sizeof salt_lens / sizeof salt_lens[0]; s++) {
            for (size_t it = 0; it < sizeof iters / sizeof iters[0]; it++) {
                for (size_t o = 0; o < sizeof out_lens / sizeof out_lens[0]; o++) {
                    const uint8_t *pp = pass_lens[p] > 0 ? pass : NULL;
                    const uint8_t *sp = salt_lens[s] > 0 ? salt : NULL;
                    memset(got, 0xaa, sizeof got);
                    if (crypt_pbkdf2_sha256(pp, pass_lens[p], sp, salt_lens[s], iters[it], got,
                                            out_lens[o]) != CRYPT_OK ||
                        !test_pbkdf2_evp(pass, pass_lens[p], salt, salt_lens[s], iters[it], want,
                                         out_lens[o])) {
                        failures++;
                    } else if (memcmp(got, want, out_lens[o]) != 0 ||
                               (out_lens[o] < sizeof got && got[out_lens[o]] != 0xaa)) {
                        mismatches++;
                    }
                }
            }
        }
    }
    CHECK_EQ_INT(failures, 0);
    CHECK_EQ_INT(mismatches, 0);
    /* the arguments crypt_kdf.c refuses, refused alike */
    CHECK_EQ_INT(crypt_pbkdf2_sha256(pass, 8, salt, 4, 0, got, 32), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_pbkdf2_sha256(NULL, 8, salt, 4, 1, got, 32), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_pbkdf2_sha256(pass, 8, NULL, 4, 1, got, 32), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_pbkdf2_sha256(pass, 8, salt, 4, 1, NULL, 32), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_pbkdf2_sha256(pass, 8, salt, 4, 1, got, 0), CRYPT_EINVAL);
}

/* The derivation of every store open allocates a fixed number of times, not per iteration:
 * OpenSSL 3.0's EVP_KDF duplicated the digest contexts in each iteration's HMAC (4
 * allocations an iteration: half of the derivation's CPU, crypt_kdf_sha256.c). */
static void test_pbkdf2_sha256_allocations(void)
{
    uint8_t out[32];
    const uint8_t salt[16] = {1, 2, 3};
    CHECK_EQ_INT(crypt_pbkdf2_sha256((const uint8_t *)"pw", 2, salt, sizeof salt, 2, out, 32),
                 CRYPT_OK); /* whatever is fetched once per process */
    unsigned long before = atomic_load(&test_ossl_allocs);
    CHECK_EQ_INT(crypt_pbkdf2_sha256((const uint8_t *)"pw", 2, salt, sizeof salt, 4096, out, 32),
                 CRYPT_OK);
    unsigned long allocs = atomic_load(&test_ossl_allocs) - before;
    if (allocs >= 64) {
        fprintf(stderr, "  %lu allocations in a derivation of 4,096 iterations\n", allocs);
    }
    CHECK(allocs < 64);
}

static void test_pbkdf2_sha512(void)
{
    uint8_t out[64];
    CHECK_EQ_INT(
        crypt_pbkdf2_sha512((const uint8_t *)"password", 8, (const uint8_t *)"salt", 4, 1, out, 64),
        CRYPT_OK);
    CHECK(test_eq_hex(out, "867f70cf1ade02cff3752599a3a53dc4af34c7a669815ae5d513554e1c8cf252"));
    CHECK(
        test_eq_hex(out + 32, "c02d470a285a0501bad999bfe943c08f050235d7d68b1da55e63f73b60a57fce"));
    CHECK_EQ_INT(crypt_pbkdf2_sha512((const uint8_t *)"password", 8, NULL, 0, 0, out, 64),
                 CRYPT_EINVAL);
}

static void test_selftest(void)
{
    CHECK_EQ_INT(crypt_selftest(), CRYPT_OK);
}

static void test_helpers(void)
{
    uint8_t a[32], b[32];
    CHECK_EQ_INT(crypt_random(a, sizeof a), CRYPT_OK);
    CHECK_EQ_INT(crypt_random(b, sizeof b), CRYPT_OK);
    CHECK(crypt_memcmp_ct(a, b, sizeof a) != 0);
    memcpy(b, a, sizeof a);
    CHECK(crypt_memcmp_ct(a, b, sizeof a) == 0);
    crypt_wipe(a, sizeof a);
    for (size_t i = 0; i < sizeof a; i++) {
        CHECK(a[i] == 0);
    }
    CHECK_EQ_INT(crypt_reserve_bytes(CRYPT_CIPHER_CHACHA20), 32);
    CHECK_EQ_INT(crypt_reserve_bytes(CRYPT_CIPHER_AES256CBC), 0);
    CHECK_EQ_INT(crypt_reserve_bytes(CRYPT_CIPHER_SQLCIPHER), 80);
    CHECK_EQ_INT(crypt_reserve_bytes(0), 0);
}

/* ---- derived keys of the reference files (README "Derived key material") ---------------- */

static void test_kdf_chacha20_vector(void)
{
    uint8_t salt[16], key[32];
    test_hex("24e30a74922e041b9e82c4e87864c8f4", salt, 16);
    CHECK_EQ_INT(crypt_pbkdf2_sha256((const uint8_t *)TEST_PASSWORD, strlen(TEST_PASSWORD), salt,
                                     16, CRYPT_CHACHA20_KDF_ITER_DEFAULT, key, 32),
                 CRYPT_OK);
    CHECK(test_eq_hex(key, "ed59bf12cb76e24ad372647f8d91e6e77424c9ae4bea63f6bebe3359819f8c82"));
}

static void test_kdf_aes256cbc_vector(void)
{
    uint8_t key[32], page_key[32], iv[16], key32[32];
    CHECK_EQ_INT(crypt_aes256cbc_kdf((const uint8_t *)TEST_PASSWORD, strlen(TEST_PASSWORD), key),
                 CRYPT_OK);
    CHECK(test_eq_hex(key, "481772164e6c6b5f940af7087f5998f4e5dc8912d71fabebb72760cec5a7dd79"));
    CHECK_EQ_INT(crypt_aes256cbc_page_key(key, 1, page_key), CRYPT_OK);
    CHECK(
        test_eq_hex(page_key, "1151944aece828afb16177205fc2bcc6e2467b51152a2f38473f39d11991ee64"));
    CHECK_EQ_INT(crypt_aes256cbc_iv(1, iv), CRYPT_OK);
    CHECK(test_eq_hex(iv, "20d7420f9c37a35dca6fe92a1c6999a9"));
    CHECK_EQ_INT(crypt_aes256cbc_iv(2, iv), CRYPT_OK);
    CHECK(test_eq_hex(iv, "b2547aac5270eef583e1d267a725d988"));
    /* Passwords longer than 32 bytes are truncated. */
    static const char long_pw[] = "0123456789abcdef0123456789abcdef-and-more";
    CHECK_EQ_INT(crypt_aes256cbc_kdf((const uint8_t *)long_pw, sizeof long_pw - 1, key), CRYPT_OK);
    CHECK_EQ_INT(crypt_aes256cbc_kdf((const uint8_t *)long_pw, 32, key32), CRYPT_OK);
    CHECK(memcmp(key, key32, 32) == 0);
    CHECK_EQ_INT(crypt_aes256cbc_kdf((const uint8_t *)long_pw, 31, key32), CRYPT_OK);
    CHECK(memcmp(key, key32, 32) != 0);
}

/* key = PBKDF2-SHA512(pw, salt, 256000); hmac key = PBKDF2-SHA512(key, salt ^ 0x3a, 2). */
static void test_kdf_sqlcipher_one(const char *salt_hex, const char *key_hex, const char *hmac_hex)
{
    uint8_t salt[16], key[32], hmac_salt[16], hmac_key[32];
    test_hex(salt_hex, salt, 16);
    CHECK_EQ_INT(crypt_pbkdf2_sha512((const uint8_t *)TEST_PASSWORD, strlen(TEST_PASSWORD), salt,
                                     16, CRYPT_SQLCIPHER_KDF_ITER_DEFAULT, key, 32),
                 CRYPT_OK);
    CHECK(test_eq_hex(key, key_hex));
    for (int i = 0; i < 16; i++) {
        hmac_salt[i] = (uint8_t)(salt[i] ^ 0x3a);
    }
    CHECK_EQ_INT(crypt_pbkdf2_sha512(key, 32, hmac_salt, 16, 2, hmac_key, 32), CRYPT_OK);
    CHECK(test_eq_hex(hmac_key, hmac_hex));
}

static void test_kdf_sqlcipher_vectors(void)
{
    test_kdf_sqlcipher_one("db94366b620c3f980e41f65ddedbaca8",
                           "84ac1a99251cd2558f6b6026cc990338f9ecb518428a0e1a1df27bb6aa85b05a",
                           "88cfe3da01cc5bcc0c21586a0d62367d88f90d7eab3f1ed09d82bb77339e60bc");
    if (th_current_failed) {
        return;
    }
    test_kdf_sqlcipher_one("1d74d584749ac1843b466d47b566f975",
                           "51a0963b11b0045ee53bbee30a2e90a68865ad3a228cb35da13deed1af9797da",
                           "3203d4cf0252f7a4df982dd89e6a2113f2bad9f007d9e9b04d075c4c5321b046");
}

/* ---- contexts and pages ------------------------------------------------------------------ */

static crypt_ctx *test_ctx(int cipher, int legacy, const char *secret, const uint8_t *salt)
{
    const struct crypt_params params = {cipher, 2, legacy};
    crypt_ctx *ctx = NULL;
    if (crypt_ctx_create(&params, (const uint8_t *)secret, strlen(secret), salt, &ctx) !=
        CRYPT_OK) {
        return NULL;
    }
    return ctx;
}

/* Encrypts pgno (page 1 with the header flag), checks the layout, decrypts, compares. */
static int test_round_trip_one(crypt_ctx *ctx, uint32_t page_size, uint32_t pgno)
{
    static uint8_t plain[TEST_PAGE_MAX], enc[TEST_PAGE_MAX], again[TEST_PAGE_MAX];
    int cipher = crypt_ctx_cipher(ctx);
    unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
    uint32_t data = page_size - crypt_reserve_bytes(cipher);
    test_fill_page(plain, page_size, pgno, cipher);
    if (crypt_page_encrypt(ctx, pgno, plain, enc, page_size, flags) != CRYPT_OK ||
        crypt_page_encrypt(ctx, pgno, plain, again, page_size, flags) != CRYPT_OK) {
        return 0;
    }
    /* (1) ciphertext differs from the plaintext, (2) random nonces make two encryptions
     * differ except for the deterministic aes256cbc. */
    if (memcmp(enc + 32, plain + 32, data - 32) == 0 ||
        (memcmp(enc, again, page_size) == 0) != (cipher == CRYPT_CIPHER_AES256CBC)) {
        return 0;
    }
    if (pgno == 1 && memcmp(enc + 16, plain + 16, 8) != 0 && crypt_ctx_legacy(ctx) == 0) {
        return 0; /* bytes 16..23 stay plain */
    }
    if (pgno == 1 && cipher != CRYPT_CIPHER_AES256CBC && memcmp(enc, crypt_ctx_salt(ctx), 16)) {
        return 0; /* salt in 0..15 */
    }
    if (crypt_page_decrypt(ctx, pgno, enc, page_size, flags) != CRYPT_OK) {
        return 0;
    }
    return memcmp(enc, plain, data) == 0;
}

static void test_round_trip_cipher(int cipher, int legacy)
{
    crypt_ctx *ctx = test_ctx(cipher, legacy, "round-trip password", NULL);
    CHECK(ctx != NULL);
    for (size_t i = 0; i < sizeof test_page_sizes / sizeof test_page_sizes[0]; i++) {
        CHECK(test_round_trip_one(ctx, test_page_sizes[i], 1));
        CHECK(test_round_trip_one(ctx, test_page_sizes[i], 7));
    }
    CHECK(test_round_trip_one(ctx, 4096, 0xfffffffeu)); /* largest SQLite page number */
    crypt_ctx_free(ctx);
}

static void test_round_trip_chacha20(void)
{
    test_round_trip_cipher(CRYPT_CIPHER_CHACHA20, 0);
}

static void test_round_trip_aes256cbc(void)
{
    test_round_trip_cipher(CRYPT_CIPHER_AES256CBC, 0);
}

static void test_round_trip_sqlcipher(void)
{
    test_round_trip_cipher(CRYPT_CIPHER_SQLCIPHER, 0);
}

static void test_round_trip_sqlcipher_legacy4(void)
{
    test_round_trip_cipher(CRYPT_CIPHER_SQLCIPHER, 4);
}

/* ---- tamper and wrong-key detection ------------------------------------------------------- */

/* Flips one bit of every byte in [from, to) of an encrypted page in turn: each flip must
 * give CRYPT_EAUTH and leave the buffer as it was. */
static int test_flip_each(crypt_ctx *ctx,
                          uint32_t pgno,
                          const uint8_t *enc,
                          uint32_t from,
                          uint32_t to,
                          uint32_t page_size)
{
    static uint8_t work[TEST_PAGE_MAX], before[TEST_PAGE_MAX];
    unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
    for (uint32_t pos = from; pos < to; pos++) {
        memcpy(work, enc, page_size);
        work[pos] ^= (uint8_t)(1u << (pos % 8));
        memcpy(before, work, page_size);
        if (crypt_page_decrypt(ctx, pgno, work, page_size, flags) != CRYPT_EAUTH ||
            memcmp(work, before, page_size) != 0) {
            fprintf(stderr, "  flip at byte %u of page %u not detected\n", pos, pgno);
            return 0;
        }
    }
    return 1;
}

static void test_tamper_cipher(int cipher, int legacy)
{
    static uint8_t plain[4096], enc[4096];
    crypt_ctx *ctx = test_ctx(cipher, legacy, "tamper password", NULL);
    CHECK(ctx != NULL);
    for (uint32_t pgno = 1; pgno <= 7; pgno += 6) {
        unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
        test_fill_page(plain, sizeof plain, pgno, cipher);
        CHECK_EQ_INT(crypt_page_encrypt(ctx, pgno, plain, enc, sizeof enc, flags), CRYPT_OK);
        uint32_t from = 0;
        if (cipher == CRYPT_CIPHER_SQLCIPHER && pgno == 1) {
            from = legacy == 4 ? 16 : 24; /* by format the HMAC starts there */
        }
        CHECK(test_flip_each(ctx, pgno, enc, from, sizeof enc, sizeof enc));
    }
    crypt_ctx_free(ctx);
}

static void test_tamper_chacha20(void)
{
    test_tamper_cipher(CRYPT_CIPHER_CHACHA20, 0);
}

static void test_tamper_sqlcipher(void)
{
    test_tamper_cipher(CRYPT_CIPHER_SQLCIPHER, 0);
    if (!th_current_failed) {
        test_tamper_cipher(CRYPT_CIPHER_SQLCIPHER, 4);
    }
}

/* aes256cbc has no MAC; only page 1's check block (bytes 8..16, 24..32) and the plain
 * header (16..24) catch a change. */
static void test_tamper_aes256cbc(void)
{
    static uint8_t plain[4096], enc[4096];
    crypt_ctx *ctx = test_ctx(CRYPT_CIPHER_AES256CBC, 0, "tamper password", NULL);
    CHECK(ctx != NULL);
    test_fill_page(plain, sizeof plain, 1, CRYPT_CIPHER_AES256CBC);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 1, plain, enc, sizeof enc, CRYPT_PAGE_DB_HEADER),
                 CRYPT_OK);
    CHECK(test_flip_each(ctx, 1, enc, 8, 32, sizeof enc));
    crypt_ctx_free(ctx);
}

static void test_wrong_key(void)
{
    static const int ciphers[] = {CRYPT_CIPHER_CHACHA20, CRYPT_CIPHER_AES256CBC,
                                  CRYPT_CIPHER_SQLCIPHER};
    static uint8_t plain[4096], enc[4096], before[4096];
    for (size_t i = 0; i < 3; i++) {
        int cipher = ciphers[i];
        crypt_ctx *right = test_ctx(cipher, 0, "right password", NULL);
        CHECK(right != NULL);
        crypt_ctx *wrong = test_ctx(cipher, 0, "wrong password", crypt_ctx_salt(right));
        CHECK(wrong != NULL);
        for (uint32_t pgno = 1; pgno <= 7; pgno += 6) {
            unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
            test_fill_page(plain, sizeof plain, pgno, cipher);
            CHECK_EQ_INT(crypt_page_encrypt(right, pgno, plain, enc, 4096, flags), CRYPT_OK);
            memcpy(before, enc, sizeof enc);
            int rc = crypt_page_decrypt(wrong, pgno, enc, 4096, flags);
            if (cipher == CRYPT_CIPHER_AES256CBC && pgno != 1) {
                CHECK_EQ_INT(rc, CRYPT_OK); /* no MAC: garbage comes out */
                CHECK(memcmp(enc, plain, sizeof plain) != 0);
            } else {
                CHECK_EQ_INT(rc, CRYPT_EAUTH);
                CHECK(memcmp(enc, before, sizeof enc) == 0);
            }
        }
        crypt_ctx_free(right);
        crypt_ctx_free(wrong);
    }
}

/* ---- the chacha20 page format, rebuilt from the primitives (FORMAT.md §2) ----------------- */

static int test_chacha20_ref_crypt(
    const uint8_t key[32], uint32_t pgno, uint8_t *page, uint32_t page_size, int page1, int encrypt)
{
    static const uint8_t zero[64];
    uint32_t n = page_size - 32, off = page1 ? 24 : 0;
    const uint8_t *nonce = page + n;
    uint8_t otk[64], tag[16];
    uint32_t ctr = ((uint32_t)nonce[12] | (uint32_t)nonce[13] << 8 | (uint32_t)nonce[14] << 16 |
                    (uint32_t)nonce[15] << 24) ^
                   pgno;
    if (crypt_chacha20_xor(key, ctr, nonce, zero, otk, 64) != CRYPT_OK) {
        return 0;
    }
    if (!encrypt && (crypt_poly1305(otk, page, n + 16, tag) != CRYPT_OK ||
                     memcmp(tag, page + n + 16, 16) != 0)) {
        return 0;
    }
    if (crypt_chacha20_xor(otk + 32, ctr + 1, nonce, page + off, page + off, n - off) != CRYPT_OK) {
        return 0;
    }
    return !encrypt || crypt_poly1305(otk, page, n + 16, page + n + 16) == CRYPT_OK;
}

/* Whether ctx encrypts pages under exactly this key (checked by the reference). */
static int test_ctx_key_is(crypt_ctx *ctx, const uint8_t key[32])
{
    static uint8_t plain[4096], enc[4096];
    test_fill_page(plain, sizeof plain, 7, CRYPT_CIPHER_CHACHA20);
    if (crypt_page_encrypt(ctx, 7, plain, enc, sizeof enc, 0) != CRYPT_OK) {
        return 0;
    }
    return test_chacha20_ref_crypt(key, 7, enc, sizeof enc, 0, 0) &&
           memcmp(enc, plain, sizeof plain - 32) == 0;
}

static void test_chacha20_page_reference(void)
{
    static uint8_t plain[4096], page[4096];
    uint8_t key[32];
    test_hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", key, 32);
    crypt_ctx *ctx =
        test_ctx(CRYPT_CIPHER_CHACHA20, 0,
                 "x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'", NULL);
    CHECK(ctx != NULL);
    CHECK(test_ctx_key_is(ctx, key)); /* raw key: no KDF, format as specified */
    /* A page whose data keystream wraps: ctr = 0xfffffff0, so the data starts at counter
     * 0xfffffff1 and wraps to 0 after 15 of its 64 blocks. */
    test_fill_page(plain, sizeof plain, 1, CRYPT_CIPHER_CHACHA20);
    memcpy(page, plain, sizeof page);
    memcpy(page, crypt_ctx_salt(ctx), 16);
    for (int i = 0; i < 12; i++) {
        page[4064 + i] = (uint8_t)(0x50 + i);
    }
    uint32_t ctr = 0xfffffff0u ^ 1u;
    for (int i = 0; i < 4; i++) {
        page[4064 + 12 + i] = (uint8_t)(ctr >> (8 * i));
    }
    CHECK(test_chacha20_ref_crypt(key, 1, page, sizeof page, 1, 1));
    CHECK_EQ_INT(crypt_page_decrypt(ctx, 1, page, sizeof page, CRYPT_PAGE_DB_HEADER), CRYPT_OK);
    CHECK(memcmp(page, plain, sizeof page - 32) == 0);
    crypt_ctx_free(ctx);
}

/* The page's one-time key (a libsodium ChaCha20 block in crypt_chacha20.c) at the edges
 * of the 32-bit counter, checked against the reference built on crypt_chacha20_xor() (EVP):
 * pages written by the reference at each counter decrypt. */
static void test_chacha20_otk_counter_edges(void)
{
    static const uint32_t ctrs[] = {0u, 1u, 0x7fffffffu, 0xfffffffeu, 0xffffffffu};
    static const uint32_t pgnos[] = {1u, 2u, 12345u};
    static uint8_t plain[4096], page[4096];
    uint8_t key[32];
    test_hex(TEST_KEY_HEX_OTK, key, 32);
    crypt_ctx *ctx = test_ctx(CRYPT_CIPHER_CHACHA20, 0, "x'" TEST_KEY_HEX_OTK "'", NULL);
    CHECK(ctx != NULL);
    for (size_t p = 0; p < sizeof pgnos / sizeof pgnos[0]; p++) {
        for (size_t c = 0; c < sizeof ctrs / sizeof ctrs[0]; c++) {
            uint32_t pgno = pgnos[p], ctr = ctrs[c] ^ pgnos[p];
            int page1 = pgno == 1;
            test_fill_page(plain, sizeof plain, pgno, CRYPT_CIPHER_CHACHA20);
            memcpy(page, plain, sizeof page);
            if (page1) {
                memcpy(page, crypt_ctx_salt(ctx), 16);
            }
            for (int i = 0; i < 12; i++) {
                page[4064 + i] = (uint8_t)(0x31u * (unsigned)(i + 1) + (unsigned)c);
            }
            for (int i = 0; i < 4; i++) {
                page[4064 + 12 + i] = (uint8_t)(ctr >> (8 * i));
            }
            CHECK(test_chacha20_ref_crypt(key, pgno, page, sizeof page, page1, 1));
            CHECK_EQ_INT(
                crypt_page_decrypt(ctx, pgno, page, sizeof page, page1 ? CRYPT_PAGE_DB_HEADER : 0),
                CRYPT_OK);
            CHECK(memcmp(page + 16, plain + 16, sizeof page - 48) == 0);
        }
    }
    crypt_ctx_free(ctx);
}

/* crypt_poly1305() feeds OpenSSL a multiple of 128 bytes and then the rest (a speed-up, see
 * crypt_chacha20.c): the tag equals libsodium's one-call Poly1305 at every length. */
static void test_poly1305_split_matches_libsodium(void)
{
    static const size_t big[] = {4064, 4080, 4096, 8160, 16352, 32736, 65504, 65520, 65536};
    static uint8_t msg[65536];
    uint8_t key[32], ours[16], theirs[16];
    for (size_t i = 0; i < sizeof msg; i++) {
        msg[i] = (uint8_t)(i * 7u + (i >> 8));
    }
    for (int i = 0; i < 32; i++) {
        key[i] = (uint8_t)(0xa0 + i);
    }
    CHECK(sodium_init() >= 0);
    for (size_t len = 0; len < 1200 + sizeof big / sizeof big[0]; len++) {
        size_t n = len < 1200 ? len : big[len - 1200];
        CHECK_EQ_INT(crypt_poly1305(key, msg, n, ours), CRYPT_OK);
        crypto_onetimeauth_poly1305(theirs, msg, n, key);
        if (memcmp(ours, theirs, 16) != 0) {
            fprintf(stderr, "  length %zu\n", n);
        }
        CHECK(memcmp(ours, theirs, 16) == 0);
    }
}

/* ---- secret parsing (FORMAT.md §1.3) ------------------------------------------------------ */

#define TEST_KEY_HEX  "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define TEST_SALT_HEX "f0e1d2c3b4a5968778695a4b3c2d1e0f"

static crypt_ctx *test_ctx_bytes(int cipher, const uint8_t *secret, size_t len, const uint8_t *salt)
{
    const struct crypt_params params = {cipher, 2, 0};
    crypt_ctx *ctx = NULL;
    return crypt_ctx_create(&params, secret, len, salt, &ctx) == CRYPT_OK ? ctx : NULL;
}

/* secret must be taken as a raw key equal to TEST_KEY_HEX, salt as given. */
static int test_secret_raw(const uint8_t *secret,
                           size_t len,
                           const uint8_t *file_salt,
                           const uint8_t *want_salt)
{
    uint8_t key[32];
    test_hex(TEST_KEY_HEX, key, 32);
    crypt_ctx *ctx = test_ctx_bytes(CRYPT_CIPHER_CHACHA20, secret, len, file_salt);
    int ok = ctx != NULL && test_ctx_key_is(ctx, key) &&
             (want_salt == NULL || memcmp(crypt_ctx_salt(ctx), want_salt, 16) == 0);
    crypt_ctx_free(ctx);
    return ok;
}

/* secret must be taken as a passphrase: key = PBKDF2-SHA256(secret, salt, 2). */
static int test_secret_pass(const char *secret)
{
    uint8_t salt[16], key[32];
    test_hex(TEST_SALT_HEX, salt, 16);
    size_t len = strlen(secret);
    crypt_ctx *ctx = test_ctx_bytes(CRYPT_CIPHER_CHACHA20, (const uint8_t *)secret, len, salt);
    int ok = ctx != NULL &&
             crypt_pbkdf2_sha256((const uint8_t *)secret, len, salt, 16, 2, key, 32) == CRYPT_OK &&
             test_ctx_key_is(ctx, key);
    crypt_ctx_free(ctx);
    return ok;
}

static void test_secret_raw_forms(void)
{
    uint8_t salt[16], file_salt[16], bin[4 + 48];
    test_hex(TEST_SALT_HEX, salt, 16);
    memset(file_salt, 0x77, sizeof file_salt);
    const char *x64 = "x'" TEST_KEY_HEX "'";
    const char *x96 = "x'" TEST_KEY_HEX TEST_SALT_HEX "'";
    CHECK_EQ_INT(strlen(x64), 67);
    CHECK(test_secret_raw((const uint8_t *)x64, 67, file_salt, file_salt));
    CHECK(test_secret_raw((const uint8_t *)x64, 67, NULL, NULL));           /* random salt */
    CHECK(test_secret_raw((const uint8_t *)x96, 99, NULL, salt));           /* the key's salt */
    CHECK(test_secret_raw((const uint8_t *)x96, 99, file_salt, file_salt)); /* file wins */
    const char *upper = "x'000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F'";
    CHECK(test_secret_raw((const uint8_t *)upper, 67, file_salt, file_salt));
    CHECK(test_secret_raw((const uint8_t *)"raw:" TEST_KEY_HEX, 68, file_salt, file_salt));
    CHECK(test_secret_raw((const uint8_t *)"raw:" TEST_KEY_HEX TEST_SALT_HEX, 100, NULL, salt));
    memcpy(bin, "raw:", 4);
    test_hex(TEST_KEY_HEX TEST_SALT_HEX, bin + 4, 48);
    CHECK(test_secret_raw(bin, 36, file_salt, file_salt));
    CHECK(test_secret_raw(bin, 52, NULL, salt));
}

static void test_secret_passphrase_forms(void)
{
    /* Near misses are passphrases, run through the KDF byte for byte. */
    CHECK(test_secret_pass("x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1g'"));
    CHECK(test_secret_pass("x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e'"));
    CHECK(test_secret_pass("x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"));
    CHECK(test_secret_pass("X'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f'"));
    CHECK(test_secret_pass("x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f0'"));
    CHECK(test_secret_pass("raw:0123456789abcdef0123456789abcde"));   /* 31 bytes */
    CHECK(test_secret_pass("raw:0123456789abcdef0123456789abcdef0")); /* 33 bytes */
    CHECK(test_secret_pass("raw:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1z"));
    CHECK(test_secret_pass("raw:"));
    CHECK(test_secret_pass("x''"));
    CHECK(test_secret_pass("p"));
}

static void test_secret_limits(void)
{
    static uint8_t big[CRYPT_PASSPHRASE_MAX + 1];
    memset(big, 'a', sizeof big);
    crypt_ctx *ctx = test_ctx_bytes(CRYPT_CIPHER_CHACHA20, big, CRYPT_PASSPHRASE_MAX, NULL);
    CHECK(ctx != NULL);
    crypt_ctx_free(ctx);
    const struct crypt_params params = {CRYPT_CIPHER_CHACHA20, 2, 0};
    static int sentinel;
    ctx = (crypt_ctx *)(void *)&sentinel; /* must be reset to NULL on failure */
    CHECK_EQ_INT(crypt_ctx_create(&params, big, sizeof big, NULL, &ctx), CRYPT_EINVAL);
    CHECK(ctx == NULL);
    CHECK_EQ_INT(crypt_ctx_create(&params, big, 0, NULL, &ctx), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_ctx_create(&params, NULL, 5, NULL, &ctx), CRYPT_EINVAL);
    /* aes256cbc has no raw keys. */
    const struct crypt_params aes = {CRYPT_CIPHER_AES256CBC, 0, 0};
    const char *x64 = "x'" TEST_KEY_HEX "'";
    CHECK_EQ_INT(crypt_ctx_create(&aes, (const uint8_t *)x64, 67, NULL, &ctx), CRYPT_EINVAL);
    uint8_t bin[36] = {'r', 'a', 'w', ':'};
    CHECK_EQ_INT(crypt_ctx_create(&aes, bin, sizeof bin, NULL, &ctx), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_ctx_create(&aes, (const uint8_t *)"pw", 2, NULL, &ctx), CRYPT_OK);
    CHECK_EQ_INT(crypt_ctx_kdf_iter(ctx), CRYPT_AES256CBC_KDF_ROUNDS);
    const uint8_t zero[16] = {0};
    CHECK(memcmp(crypt_ctx_salt(ctx), zero, 16) == 0);
    crypt_ctx_free(ctx);
}

/* ---- contexts ------------------------------------------------------------------------------ */

static void test_params(void)
{
    crypt_ctx *ctx = NULL;
    const uint8_t pw[] = "pw";
    const struct crypt_params bad[] = {
        {0, 2, 0},
        {4, 2, 0},
        {CRYPT_CIPHER_CHACHA20, 2, 1},
        {CRYPT_CIPHER_AES256CBC, 2, 1},
        {CRYPT_CIPHER_SQLCIPHER, 2, 3},
        {CRYPT_CIPHER_SQLCIPHER, CRYPT_KDF_ITER_MAX + 1, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(crypt_ctx_create(&bad[i], pw, 2, NULL, &ctx), CRYPT_EINVAL);
    }
    CHECK_EQ_INT(crypt_ctx_create(NULL, pw, 2, NULL, &ctx), CRYPT_EINVAL);
    const struct crypt_params deflt = {CRYPT_CIPHER_CHACHA20, 0, 0};
    CHECK_EQ_INT(crypt_ctx_create(&deflt, pw, 2, NULL, NULL), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_ctx_create(&deflt, pw, 2, NULL, &ctx), CRYPT_OK);
    CHECK_EQ_INT(crypt_ctx_cipher(ctx), CRYPT_CIPHER_CHACHA20);
    CHECK_EQ_INT(crypt_ctx_kdf_iter(ctx), CRYPT_CHACHA20_KDF_ITER_DEFAULT);
    CHECK_EQ_INT(crypt_ctx_legacy(ctx), 0);
    crypt_ctx_free(ctx);
    crypt_ctx_free(NULL);
    const struct crypt_params l4 = {CRYPT_CIPHER_SQLCIPHER, 2, 4};
    CHECK_EQ_INT(crypt_ctx_create(&l4, pw, 2, NULL, &ctx), CRYPT_OK);
    CHECK_EQ_INT(crypt_ctx_legacy(ctx), 4);
    CHECK_EQ_INT(crypt_ctx_kdf_iter(ctx), 2);
    crypt_ctx_free(ctx);
}

static void test_page_args(void)
{
    static uint8_t plain[TEST_PAGE_MAX * 2], out[TEST_PAGE_MAX * 2];
    crypt_ctx *ctx = test_ctx(CRYPT_CIPHER_CHACHA20, 0, "args", NULL);
    CHECK(ctx != NULL);
    static const uint32_t bad_sizes[] = {0, 256, 1000, 4095, 4097, 131072};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
        CHECK_EQ_INT(crypt_page_encrypt(ctx, 2, plain, out, bad_sizes[i], 0), CRYPT_EINVAL);
        CHECK_EQ_INT(crypt_page_decrypt(ctx, 2, out, bad_sizes[i], 0), CRYPT_EINVAL);
    }
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 0, plain, out, 4096, 0), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_page_decrypt(ctx, 0, out, 4096, 0), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 2, plain, out, 4096, CRYPT_PAGE_DB_HEADER), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 1, plain, out, 4096, 0x80u), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 1, NULL, out, 4096, 0), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 1, plain, NULL, 4096, 0), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_page_encrypt(NULL, 1, plain, out, 4096, 0), CRYPT_EINVAL);
    CHECK_EQ_INT(crypt_page_decrypt(ctx, 1, NULL, 4096, 0), CRYPT_EINVAL);
    /* Page 1 without the header flag (a temp file's first page) is a whole-page page. */
    test_fill_page(plain, 4096, 1, CRYPT_CIPHER_CHACHA20);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 1, plain, out, 4096, 0), CRYPT_OK);
    CHECK(memcmp(out + 16, plain + 16, 8) != 0);
    CHECK_EQ_INT(crypt_page_decrypt(ctx, 1, out, 4096, 0), CRYPT_OK);
    CHECK(memcmp(out, plain, 4096 - 32) == 0);
    crypt_ctx_free(ctx);
}

static void test_clone_cipher(int cipher, int legacy)
{
    static uint8_t plain[8192], enc[8192], a[8192], b[8192];
    crypt_ctx *ctx = test_ctx(cipher, legacy, "clone password", NULL);
    crypt_ctx *clone = NULL;
    CHECK(ctx != NULL);
    CHECK_EQ_INT(crypt_ctx_clone(ctx, &clone), CRYPT_OK);
    CHECK_EQ_INT(crypt_ctx_cipher(clone), cipher);
    CHECK_EQ_INT(crypt_ctx_kdf_iter(clone), crypt_ctx_kdf_iter(ctx));
    CHECK_EQ_INT(crypt_ctx_legacy(clone), legacy);
    CHECK(memcmp(crypt_ctx_salt(clone), crypt_ctx_salt(ctx), 16) == 0);
    for (uint32_t pgno = 1; pgno <= 3; pgno++) {
        unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
        test_fill_page(plain, sizeof plain, pgno, cipher);
        CHECK_EQ_INT(crypt_page_encrypt(ctx, pgno, plain, enc, sizeof enc, flags), CRYPT_OK);
        memcpy(a, enc, sizeof a);
        memcpy(b, enc, sizeof b);
        CHECK_EQ_INT(crypt_page_decrypt(ctx, pgno, a, sizeof a, flags), CRYPT_OK);
        CHECK_EQ_INT(crypt_page_decrypt(clone, pgno, b, sizeof b, flags), CRYPT_OK);
        CHECK(memcmp(a, b, sizeof a) == 0);
    }
    crypt_ctx_free(ctx); /* the clone lives on alone */
    CHECK_EQ_INT(crypt_page_encrypt(clone, 9, plain, enc, sizeof enc, 0), CRYPT_OK);
    CHECK_EQ_INT(crypt_page_decrypt(clone, 9, enc, sizeof enc, 0), CRYPT_OK);
    CHECK(memcmp(enc, plain, sizeof enc - crypt_reserve_bytes(cipher)) == 0);
    crypt_ctx_free(clone);
}

static void test_clone(void)
{
    test_clone_cipher(CRYPT_CIPHER_CHACHA20, 0);
    if (!th_current_failed) {
        test_clone_cipher(CRYPT_CIPHER_AES256CBC, 0);
    }
    if (!th_current_failed) {
        test_clone_cipher(CRYPT_CIPHER_SQLCIPHER, 0);
    }
    if (!th_current_failed) {
        test_clone_cipher(CRYPT_CIPHER_SQLCIPHER, 4);
    }
}

/* The cipher registry: the one map of reserve bytes, names and KDF defaults (issue 15.7: three
 * copies, one of which took any unknown reserve for aes256cbc). Every reserve byte value is
 * tried: only the three ciphers' own are recognised. */
static void test_cipher_registry(void)
{
    static const struct {
        int cipher;
        const char *name;
        uint32_t reserve;
        uint32_t kdf_default;
    } want[] = {
        {CRYPT_CIPHER_CHACHA20, "chacha20", 32, 64007},
        {CRYPT_CIPHER_AES256CBC, "aes256cbc", 0, 4001},
        {CRYPT_CIPHER_SQLCIPHER, "sqlcipher", 80, 256000},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_EQ_INT(crypt_reserve_bytes(want[i].cipher), want[i].reserve);
        CHECK(strcmp(crypt_cipher_name(want[i].cipher), want[i].name) == 0);
        CHECK_EQ_INT(crypt_cipher_by_name(want[i].name), want[i].cipher);
        CHECK_EQ_INT(crypt_kdf_iter_default(want[i].cipher), want[i].kdf_default);
    }
    int recognised = 0;
    for (uint32_t reserve = 0; reserve <= 255; reserve++) {
        int cipher = crypt_cipher_by_reserve(reserve);
        recognised += cipher != 0;
        CHECK(cipher == 0 || crypt_reserve_bytes(cipher) == reserve);
    }
    CHECK_EQ_INT(recognised, CRYPT_CIPHER_COUNT);
    CHECK_EQ_INT(crypt_cipher_by_reserve(48), 0);
    CHECK_EQ_INT(crypt_cipher_by_name("aes128cbc"), 0);
    CHECK(crypt_cipher_name(0) == NULL && crypt_cipher_name(CRYPT_CIPHER_COUNT + 1) == NULL);
    CHECK_EQ_INT(crypt_reserve_bytes(CRYPT_CIPHER_COUNT + 1), 0);
}

static void test_create_random(void)
{
    static uint8_t plain[4096], enc[4096];
    crypt_ctx *a = NULL, *b = NULL;
    CHECK_EQ_INT(crypt_ctx_create_random(&a), CRYPT_OK);
    CHECK_EQ_INT(crypt_ctx_create_random(&b), CRYPT_OK);
    CHECK_EQ_INT(crypt_ctx_cipher(a), CRYPT_CIPHER_CHACHA20);
    CHECK(memcmp(crypt_ctx_salt(a), crypt_ctx_salt(b), 16) != 0);
    test_fill_page(plain, sizeof plain, 3, CRYPT_CIPHER_CHACHA20);
    CHECK_EQ_INT(crypt_page_encrypt(a, 3, plain, enc, sizeof enc, 0), CRYPT_OK);
    CHECK_EQ_INT(crypt_page_decrypt(b, 3, enc, sizeof enc, 0), CRYPT_EAUTH);
    CHECK_EQ_INT(crypt_page_decrypt(a, 3, enc, sizeof enc, 0), CRYPT_OK);
    crypt_ctx_free(a);
    crypt_ctx_free(b);
}

/* Many pages through one context: the nonce pool refills and never repeats a nonce. */
static void test_nonce_pool(void)
{
    static uint8_t plain[512], enc[512];
    static uint8_t nonces[300][16];
    crypt_ctx *ctx = test_ctx(CRYPT_CIPHER_SQLCIPHER, 0, "pool", NULL);
    CHECK(ctx != NULL);
    test_fill_page(plain, sizeof plain, 2, CRYPT_CIPHER_SQLCIPHER);
    for (int i = 0; i < 300; i++) {
        CHECK_EQ_INT(crypt_page_encrypt(ctx, 2, plain, enc, sizeof enc, 0), CRYPT_OK);
        memcpy(nonces[i], enc + sizeof enc - 80, 16);
        for (int j = 0; j < i; j++) {
            CHECK(memcmp(nonces[i], nonces[j], 16) != 0);
        }
    }
    crypt_ctx_free(ctx);
}

/* crypt_page_authenticate: the tag check of crypt_page_decrypt() without the decryption
 * (the page is left as it is); only for chacha20. */
static void test_page_authenticate(void)
{
    static uint8_t plain[4096], page[4096], copy[4096];
    crypt_ctx *ctx = test_ctx(CRYPT_CIPHER_CHACHA20, 0, "x'" TEST_KEY_HEX_OTK "'", NULL);
    crypt_ctx *aes = test_ctx(CRYPT_CIPHER_AES256CBC, 0, "auth", NULL);
    CHECK(ctx != NULL && aes != NULL);
    CHECK(crypt_ctx_can_authenticate(ctx) && !crypt_ctx_can_authenticate(aes));
    for (uint32_t pgno = 1; pgno <= 3; pgno++) {
        unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
        test_fill_page(plain, sizeof plain, pgno, CRYPT_CIPHER_CHACHA20);
        CHECK_EQ_INT(crypt_page_encrypt(ctx, pgno, plain, page, sizeof page, flags), CRYPT_OK);
        memcpy(copy, page, sizeof copy);
        CHECK_EQ_INT(crypt_page_authenticate(ctx, pgno, page, sizeof page, flags), CRYPT_OK);
        CHECK(memcmp(copy, page, sizeof page) == 0);
        CHECK_EQ_INT(crypt_page_authenticate(ctx, pgno + 1, page, sizeof page, 0), CRYPT_EAUTH);
        for (size_t at = 0; at < sizeof page; at += 1021) {
            page[at] ^= 0x10;
            CHECK_EQ_INT(crypt_page_authenticate(ctx, pgno, page, sizeof page, flags), CRYPT_EAUTH);
            page[at] ^= 0x10;
        }
        CHECK_EQ_INT(crypt_page_decrypt(ctx, pgno, page, sizeof page, flags), CRYPT_OK);
        CHECK(memcmp(page + 24, plain + 24, sizeof page - 56) == 0);
    }
    CHECK_EQ_INT(crypt_page_encrypt(aes, 2, plain, page, sizeof page, 0), CRYPT_OK);
    CHECK_EQ_INT(crypt_page_authenticate(aes, 2, page, sizeof page, 0), CRYPT_EINVAL);
    crypt_ctx_free(ctx);
    crypt_ctx_free(aes);
}

/* The (nonce, block counter) pair of the master key a chacha20 page's one-time key came
 * from (FORMAT.md §2: counter = LE32(nonce[12..16]) XOR pgno), as 16 bytes. */
static void test_otk_input(const uint8_t *page, uint32_t page_size, uint32_t pgno, uint8_t out[16])
{
    const uint8_t *nonce = page + page_size - 32;
    memcpy(out, nonce, 12);
    for (int i = 0; i < 4; i++) {
        out[12 + i] = (uint8_t)(nonce[12 + i] ^ (uint8_t)(pgno >> (8 * i)));
    }
}

/* chacha20 encryption takes its one-time keys from a pool of consecutive master-key blocks
 * (crypt_chacha20.c): over several refills and page numbers, every page decrypts with the
 * reference built from the primitives, and no (nonce, counter) pair comes twice -- also
 * not for one page number written again and again. */
static void test_chacha20_otk_pool(void)
{
    static uint8_t plain[4096], page[4096];
    static uint8_t inputs[300][16];
    uint8_t key[32];
    test_hex(TEST_KEY_HEX_OTK, key, 32);
    crypt_ctx *ctx = test_ctx(CRYPT_CIPHER_CHACHA20, 0, "x'" TEST_KEY_HEX_OTK "'", NULL);
    CHECK(ctx != NULL);
    for (int i = 0; i < 300; i++) {
        uint32_t pgno = i < 150 ? 5u : (uint32_t)i * 977u + 1u;
        unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
        test_fill_page(plain, sizeof plain, pgno, CRYPT_CIPHER_CHACHA20);
        CHECK_EQ_INT(crypt_page_encrypt(ctx, pgno, plain, page, sizeof page, flags), CRYPT_OK);
        test_otk_input(page, sizeof page, pgno, inputs[i]);
        for (int j = 0; j < i; j++) {
            CHECK(memcmp(inputs[i], inputs[j], 16) != 0);
        }
        CHECK(test_chacha20_ref_crypt(key, pgno, page, sizeof page, pgno == 1, 0));
        CHECK(memcmp(page + 24, plain + 24, sizeof page - 56) == 0);
    }
    crypt_ctx_free(ctx);
}

/* A pool whose 64 block counters run over 2^32 (chosen seed): the keys after the wrap are
 * sqleet's (counter 0, same nonce), so every page decrypts with the reference and with a
 * second context. */
static void test_chacha20_otk_pool_wrap(void)
{
    static uint8_t plain[4096], page[4096], copy[4096];
    uint8_t key[32], seed[16];
    test_hex(TEST_KEY_HEX_OTK, key, 32);
    test_hex("a1a2a3a4a5a6a7a8a9aaabace0ffffff", seed, 16); /* counter 0xffffffe0 */
    crypt_ctx *ctx = test_ctx(CRYPT_CIPHER_CHACHA20, 0, "x'" TEST_KEY_HEX_OTK "'", NULL);
    crypt_ctx *other = test_ctx(CRYPT_CIPHER_CHACHA20, 0, "x'" TEST_KEY_HEX_OTK "'", NULL);
    CHECK(ctx != NULL && other != NULL);
    CHECK_EQ_INT(crypt_chacha20_otk_pool_fill(ctx, seed), CRYPT_OK);
    for (uint32_t i = 0; i < CRYPT_OTK_POOL_KEYS; i++) {
        uint32_t pgno = 3u + i * 11u;
        uint8_t input[16];
        test_fill_page(plain, sizeof plain, pgno, CRYPT_CIPHER_CHACHA20);
        CHECK_EQ_INT(crypt_page_encrypt(ctx, pgno, plain, page, sizeof page, 0), CRYPT_OK);
        test_otk_input(page, sizeof page, pgno, input);
        CHECK(memcmp(input, seed, 12) == 0);
        uint32_t want = 0xffffffe0u + i; /* modulo 2^32 */
        CHECK(input[12] == (uint8_t)want && input[13] == (uint8_t)(want >> 8) &&
              input[14] == (uint8_t)(want >> 16) && input[15] == (uint8_t)(want >> 24));
        memcpy(copy, page, sizeof copy);
        CHECK(test_chacha20_ref_crypt(key, pgno, copy, sizeof copy, 0, 0));
        CHECK(memcmp(copy, plain, sizeof copy - 32) == 0);
        CHECK_EQ_INT(crypt_page_decrypt(other, pgno, page, sizeof page, 0), CRYPT_OK);
        CHECK(memcmp(page, plain, sizeof page - 32) == 0);
    }
    crypt_ctx_free(ctx);
    crypt_ctx_free(other);
}

/* A fork() empties the one-time-key pool: parent and child, each writing its next page
 * after the fork, use different master-key blocks (a shared pool would hand both the same
 * key, i.e. the same keystream for two different pages). */
static void test_chacha20_otk_pool_fork(void)
{
    static uint8_t plain[4096], page[4096];
    uint8_t mine[16], child_input[16];
    int fds[2];
    crypt_ctx *ctx = test_ctx(CRYPT_CIPHER_CHACHA20, 0, "x'" TEST_KEY_HEX_OTK "'", NULL);
    CHECK(ctx != NULL);
    test_fill_page(plain, sizeof plain, 9, CRYPT_CIPHER_CHACHA20);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 9, plain, page, sizeof page, 0), CRYPT_OK);
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int ok = crypt_page_encrypt(ctx, 9, plain, page, sizeof page, 0) == CRYPT_OK;
        test_otk_input(page, sizeof page, 9, mine);
        _exit(ok && write(fds[1], mine, 16) == 16 ? 0 : 1);
    }
    close(fds[1]);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 9, plain, page, sizeof page, 0), CRYPT_OK);
    test_otk_input(page, sizeof page, 9, mine);
    CHECK(read(fds[0], child_input, 16) == 16);
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(memcmp(mine, child_input, 16) != 0);
    crypt_ctx_free(ctx);
}

/* ---- the reference files (../shared/testvectors/sqlite3mc) -------------------------------- */

/* The vector directory, or NULL (with the skip note printed) when ../shared is absent. */
static const char *test_vector_dir(void)
{
    static char dir[1024];
    const char *root = getenv("MV_TEST_ROOT");
    snprintf(dir, sizeof dir, "%s/../shared/testvectors/sqlite3mc", root != NULL ? root : ".");
    char readme[1100];
    snprintf(readme, sizeof readme, "%s/README.md", dir);
    FILE *f = fopen(readme, "rb");
    if (f == NULL) {
        printf("  skipped: ../shared not present\n");
        return NULL;
    }
    fclose(f);
    return dir;
}

/* Reads the first two 4096-byte pages of a vector file. */
static int test_read_vector(const char *dir, const char *name, uint8_t *buf)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return 0;
    }
    size_t got = fread(buf, 1, 8192, f);
    fclose(f);
    return got == 8192;
}

/* Decrypts pages 1 and 2 of a vector and checks what SQLite would: the magic on page 1 and
 * a leaf table b-tree page (0x0d) on page 2. Then re-encrypts: aes256cbc, being
 * deterministic, must give back the file's exact bytes. */
static void test_vector_file(const char *name, int cipher, int legacy, const char *secret)
{
    static uint8_t file[8192], buf[8192], again[8192];
    const char *dir = test_vector_dir();
    if (dir == NULL) {
        return;
    }
    CHECK(test_read_vector(dir, name, file));
    memcpy(buf, file, sizeof buf);
    const struct crypt_params params = {cipher, 0, legacy};
    crypt_ctx *ctx = NULL;
    const uint8_t *salt = cipher == CRYPT_CIPHER_AES256CBC ? NULL : file;
    CHECK_EQ_INT(crypt_ctx_create(&params, (const uint8_t *)secret, strlen(secret), salt, &ctx),
                 CRYPT_OK);
    CHECK_EQ_INT(crypt_page_decrypt(ctx, 1, buf, 4096, CRYPT_PAGE_DB_HEADER), CRYPT_OK);
    CHECK(memcmp(buf, "SQLite format 3\0", 16) == 0);
    CHECK_EQ_INT(buf[20], crypt_reserve_bytes(cipher));
    CHECK_EQ_INT(crypt_page_decrypt(ctx, 2, buf + 4096, 4096, 0), CRYPT_OK);
    CHECK_EQ_INT(buf[4096], 0x0d);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 1, buf, again, 4096, CRYPT_PAGE_DB_HEADER), CRYPT_OK);
    CHECK_EQ_INT(crypt_page_encrypt(ctx, 2, buf + 4096, again + 4096, 4096, 0), CRYPT_OK);
    if (cipher == CRYPT_CIPHER_AES256CBC) {
        CHECK(memcmp(again, file, sizeof file) == 0);
    } else {
        CHECK(memcmp(again, file, 16) == 0); /* the same salt */
        CHECK_EQ_INT(crypt_page_decrypt(ctx, 1, again, 4096, CRYPT_PAGE_DB_HEADER), CRYPT_OK);
        CHECK_EQ_INT(crypt_page_decrypt(ctx, 2, again + 4096, 4096, 0), CRYPT_OK);
        uint32_t data = 4096 - crypt_reserve_bytes(cipher);
        CHECK(memcmp(again, buf, data) == 0 && memcmp(again + 4096, buf + 4096, data) == 0);
    }
    crypt_ctx_free(ctx);
}

static void test_vector_chacha20(void)
{
    test_vector_file("chacha20-delete.db", CRYPT_CIPHER_CHACHA20, 0, TEST_PASSWORD);
}

static void test_vector_chacha20_rawkey(void)
{
    test_vector_file("chacha20-rawkey-delete.db", CRYPT_CIPHER_CHACHA20, 0, "x'" TEST_KEY_HEX "'");
}

static void test_vector_aes256cbc(void)
{
    test_vector_file("aes256cbc-delete.db", CRYPT_CIPHER_AES256CBC, 0, TEST_PASSWORD);
}

static void test_vector_sqlcipher(void)
{
    test_vector_file("sqlcipher-delete.db", CRYPT_CIPHER_SQLCIPHER, 0, TEST_PASSWORD);
}

static void test_vector_sqlcipher_legacy4(void)
{
    test_vector_file("sqlcipher-legacy4-delete.db", CRYPT_CIPHER_SQLCIPHER, 4, TEST_PASSWORD);
}

/* A wrong password fails page 1 and leaves it as it was (SQLite then says NOTADB). */
static void test_vector_wrong_password(void)
{
    static const struct {
        const char *name;
        int cipher;
    } files[] = {{"chacha20-delete.db", CRYPT_CIPHER_CHACHA20},
                 {"aes256cbc-delete.db", CRYPT_CIPHER_AES256CBC}};
    static uint8_t file[8192], buf[8192];
    const char *dir = test_vector_dir();
    if (dir == NULL) {
        return;
    }
    for (size_t i = 0; i < 2; i++) {
        CHECK(test_read_vector(dir, files[i].name, file));
        memcpy(buf, file, sizeof buf);
        const struct crypt_params params = {files[i].cipher, 0, 0};
        crypt_ctx *ctx = NULL;
        const uint8_t *salt = files[i].cipher == CRYPT_CIPHER_AES256CBC ? NULL : file;
        CHECK_EQ_INT(
            crypt_ctx_create(&params, (const uint8_t *)"fe-testvector-passwore", 22, salt, &ctx),
            CRYPT_OK);
        CHECK_EQ_INT(crypt_page_decrypt(ctx, 1, buf, 4096, CRYPT_PAGE_DB_HEADER), CRYPT_EAUTH);
        CHECK(memcmp(buf, file, sizeof buf) == 0);
        crypt_ctx_free(ctx);
    }
}

/* ---- chacha20 through the provider's functions and through EVP (crypt_provider.c) ------ */

static uint32_t test_xorshift(uint32_t *state)
{
    uint32_t x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *state = x;
}

/* A context on the provider's functions and one on EVP, same key: with their one-time-key
 * pools filled from the same seed they write identical bytes for identical pages (page
 * sizes 512..65536, page 1 with its header, a temp-file block of any size); each decrypts
 * and authenticates the other's pages and the reference's; a flipped bit in the data, the
 * nonce or the tag is refused by both, the buffer left as it was. */
static void test_chacha20_provider_matches_evp(void)
{
    static const uint32_t sizes[] = {512, 4096, 4096 + 32, 65536};
    static uint8_t plain[65536], a[65536], b[65536], work[65536];
    const char *secret = "x'" TEST_KEY_HEX_OTK "'";
    uint8_t key[32], seed[16], salt[16];
    test_hex(TEST_KEY_HEX_OTK, key, 32);
    memcpy(salt, key + 8, sizeof salt); /* page 1 carries it: the same on both sides */
    CHECK(crypt_init() == CRYPT_OK && crypt_provider() != NULL); /* resolved on Debian 12 */
    crypt_ctx *prov = test_ctx(CRYPT_CIPHER_CHACHA20, 0, secret, salt);
    crypt_provider_enable(0);
    crypt_ctx *evp = test_ctx(CRYPT_CIPHER_CHACHA20, 0, secret, salt);
    crypt_provider_enable(1);
    CHECK(prov != NULL && evp != NULL);
    CHECK(prov->prov != NULL && prov->prov_cipher != NULL && prov->prov_mac != NULL);
    CHECK(evp->prov == NULL && evp->prov_cipher == NULL);
    uint32_t rng = 0x9e3779b9u;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint32_t size = sizes[s];
        unsigned any = size % 512 != 0 ? CRYPT_PAGE_ANY_SIZE : 0;
        for (int round = 0; round < 6; round++) {
            uint32_t pgno = round == 0 && !any ? 1 : 2 + (test_xorshift(&rng) % 100000u);
            unsigned flags = any | (pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0);
            for (uint32_t i = 0; i < size; i++) {
                plain[i] = (uint8_t)test_xorshift(&rng);
            }
            if (pgno == 1) {
                test_fill_page(plain, 24, 1, CRYPT_CIPHER_CHACHA20); /* header bytes only */
            }
            for (size_t i = 0; i < sizeof seed; i++) {
                seed[i] = (uint8_t)test_xorshift(&rng);
            }
            CHECK_EQ_INT(crypt_chacha20_otk_pool_fill(prov, seed), CRYPT_OK);
            CHECK_EQ_INT(crypt_chacha20_otk_pool_fill(evp, seed), CRYPT_OK);
            CHECK_EQ_INT(crypt_page_encrypt(prov, pgno, plain, a, size, flags), CRYPT_OK);
            CHECK_EQ_INT(crypt_page_encrypt(evp, pgno, plain, b, size, flags), CRYPT_OK);
            CHECK(memcmp(a, b, size) == 0);
            memcpy(work, a, size);
            CHECK(any || test_chacha20_ref_crypt(key, pgno, work, size, pgno == 1, 0));
            for (int side = 0; side < 2; side++) {
                crypt_ctx *ctx = side == 0 ? prov : evp;
                if (!any) {
                    CHECK_EQ_INT(crypt_page_authenticate(ctx, pgno, a, size, flags), CRYPT_OK);
                }
                memcpy(work, a, size);
                CHECK_EQ_INT(crypt_page_decrypt(ctx, pgno, work, size, flags), CRYPT_OK);
                uint32_t from = pgno == 1 ? 16 : 0; /* page 1: magic for the salt */
                CHECK(memcmp(work + from, plain + from, size - 32 - from) == 0);
                /* a bit flipped in the data, the nonce, the tag */
                const uint32_t at[] = {test_xorshift(&rng) % (size - 32), size - 32 + 5, size - 1};
                for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
                    memcpy(work, a, size);
                    work[at[k]] ^= (uint8_t)(1u << (k + 2));
                    memcpy(b, work, size);
                    CHECK_EQ_INT(crypt_page_decrypt(ctx, pgno, work, size, flags), CRYPT_EAUTH);
                    CHECK(memcmp(work, b, size) == 0);
                    if (!any) {
                        CHECK_EQ_INT(crypt_page_authenticate(ctx, pgno, work, size, flags),
                                     CRYPT_EAUTH);
                    }
                }
            }
        }
    }
    crypt_ctx_free(prov);
    crypt_ctx_free(evp);
}

/* The SQLite3MC vectors through EVP as well (the default run takes the provider path). */
static void test_vector_chacha20_evp(void)
{
    crypt_provider_enable(0);
    test_vector_file("chacha20-delete.db", CRYPT_CIPHER_CHACHA20, 0, TEST_PASSWORD);
    test_vector_file("chacha20-rawkey-delete.db", CRYPT_CIPHER_CHACHA20, 0, "x'" TEST_KEY_HEX "'");
    crypt_provider_enable(1);
}

int main(void)
{
    /* before OpenSSL allocates anything (test_pbkdf2_sha256_allocations) */
    if (CRYPTO_set_mem_functions(test_ossl_malloc, test_ossl_realloc, test_ossl_free) != 1) {
        fprintf(stderr, "CRYPTO_set_mem_functions: OpenSSL allocated before main\n");
        return 1;
    }
    TEST(test_chacha20_rfc8439_block);
    TEST(test_chacha20_rfc8439_encrypt);
    TEST(test_poly1305_rfc8439);
    TEST(test_chacha20_counter_wrap);
    TEST(test_pbkdf2_sha256_rfc7914);
    TEST(test_pbkdf2_sha256_matches_evp);
    TEST(test_pbkdf2_sha256_allocations);
    TEST(test_pbkdf2_sha512);
    TEST(test_selftest);
    TEST(test_helpers);
    TEST(test_kdf_chacha20_vector);
    TEST(test_kdf_aes256cbc_vector);
    TEST(test_kdf_sqlcipher_vectors);
    TEST(test_round_trip_chacha20);
    TEST(test_round_trip_aes256cbc);
    TEST(test_round_trip_sqlcipher);
    TEST(test_round_trip_sqlcipher_legacy4);
    TEST(test_tamper_chacha20);
    TEST(test_tamper_sqlcipher);
    TEST(test_tamper_aes256cbc);
    TEST(test_wrong_key);
    TEST(test_chacha20_page_reference);
    TEST(test_chacha20_otk_counter_edges);
    TEST(test_poly1305_split_matches_libsodium);
    TEST(test_secret_raw_forms);
    TEST(test_secret_passphrase_forms);
    TEST(test_secret_limits);
    TEST(test_params);
    TEST(test_page_args);
    TEST(test_clone);
    TEST(test_cipher_registry);
    TEST(test_create_random);
    TEST(test_nonce_pool);
    TEST(test_chacha20_otk_pool);
    TEST(test_page_authenticate);
    TEST(test_chacha20_otk_pool_wrap);
    TEST(test_chacha20_otk_pool_fork);
    TEST(test_vector_chacha20);
    TEST(test_vector_chacha20_rawkey);
    TEST(test_vector_aes256cbc);
    TEST(test_vector_sqlcipher);
    TEST(test_vector_sqlcipher_legacy4);
    TEST(test_vector_wrong_password);
    TEST(test_chacha20_provider_matches_evp);
    TEST(test_vector_chacha20_evp);
    return th_summary();
}
