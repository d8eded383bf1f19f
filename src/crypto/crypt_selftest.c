/*
 * crypt_selftest.c -- a fast known-answer test of every primitive the ciphers use, for a
 * build or a libcrypto that computes something else than it should.
 *
 * USAGE
 *   if (crypt_selftest() != CRYPT_OK) refuse to open anything;
 *
 * IMPLEMENTATION NOTES
 *   Published vectors only: RFC 8439 §2.4.2 (ChaCha20) and §2.5.2 (Poly1305), RFC 7914 §11
 *   (PBKDF2-HMAC-SHA256, 1 iteration), the PBKDF2-HMAC-SHA512 "password"/"salt"/1 vector,
 *   and the aes256cbc IV check values of FORMAT.md §3. Plus the counter-wrap rule and a
 *   round trip of one page per cipher under a raw key or a 1-iteration KDF. Takes about a
 *   millisecond (the aes256cbc KDF's 4002 SHA-256 rounds dominate).
 */
#include "crypto/crypt_internal.h"

#include <string.h>

static const uint8_t crypt_selftest_sunscreen[] =
    "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the "
    "future, sunscreen would be it.";

/* RFC 8439 §2.4.2: key 00..1f, nonce 00 00 00 00 00 00 00 4a 00 00 00 00, counter 1; the
 * first 32 bytes of the ciphertext. */
static const uint8_t crypt_selftest_chacha20_ct[32] = {
    0x6e, 0x2e, 0x35, 0x9a, 0x25, 0x68, 0xf9, 0x80, 0x41, 0xba, 0x07, 0x28, 0xdd, 0x0d, 0x69, 0x81,
    0xe9, 0x7e, 0x7a, 0xec, 0x1d, 0x43, 0x60, 0xc2, 0x0a, 0x27, 0xaf, 0xcc, 0xfd, 0x9f, 0xae, 0x0b,
};

static const uint8_t crypt_selftest_poly1305_key[32] = {
    0x85, 0xd6, 0xbe, 0x78, 0x57, 0x55, 0x6d, 0x33, 0x7f, 0x44, 0x52, 0xfe, 0x42, 0xd5, 0x06, 0xa8,
    0x01, 0x03, 0x80, 0x8a, 0xfb, 0x0d, 0xb2, 0xfd, 0x4a, 0xbf, 0xf6, 0xaf, 0x41, 0x49, 0xf5, 0x1b,
};
static const uint8_t crypt_selftest_poly1305_tag[16] = {
    0xa8, 0x06, 0x1d, 0xc1, 0x30, 0x51, 0x36, 0xc6, 0xc2, 0x2b, 0x8b, 0xaf, 0x0c, 0x01, 0x27, 0xa9,
};

static const uint8_t crypt_selftest_pbkdf2_sha256[16] = {
    0x55, 0xac, 0x04, 0x6e, 0x56, 0xe3, 0x08, 0x9f, 0xec, 0x16, 0x91, 0xc2, 0x25, 0x44, 0xb6, 0x05,
};
static const uint8_t crypt_selftest_pbkdf2_sha512[16] = {
    0x86, 0x7f, 0x70, 0xcf, 0x1a, 0xde, 0x02, 0xcf, 0xf3, 0x75, 0x25, 0x99, 0xa3, 0xa5, 0x3d, 0xc4,
};
static const uint8_t crypt_selftest_aes_iv1[16] = {
    0x20, 0xd7, 0x42, 0x0f, 0x9c, 0x37, 0xa3, 0x5d, 0xca, 0x6f, 0xe9, 0x2a, 0x1c, 0x69, 0x99, 0xa9,
};

static int crypt_selftest_chacha20(void)
{
    uint8_t key[32];
    uint8_t nonce[12] = {0, 0, 0, 0, 0, 0, 0, 0x4a, 0, 0, 0, 0};
    uint8_t out[sizeof crypt_selftest_sunscreen - 1];
    uint8_t wrap[128];
    uint8_t fresh[64];
    for (size_t i = 0; i < sizeof key; i++) {
        key[i] = (uint8_t)i;
    }
    if (crypt_chacha20_xor(key, 1, nonce, crypt_selftest_sunscreen, out, sizeof out) != CRYPT_OK ||
        memcmp(out, crypt_selftest_chacha20_ct, sizeof crypt_selftest_chacha20_ct) != 0) {
        return CRYPT_EFAIL;
    }
    /* sqleet's wrap: the block after counter 0xffffffff is block 0 of the same nonce. */
    memset(wrap, 0, sizeof wrap);
    memset(fresh, 0, sizeof fresh);
    if (crypt_chacha20_xor(key, UINT32_MAX, nonce, wrap, wrap, sizeof wrap) != CRYPT_OK ||
        crypt_chacha20_xor(key, 0, nonce, fresh, fresh, sizeof fresh) != CRYPT_OK ||
        memcmp(wrap + 64, fresh, sizeof fresh) != 0) {
        return CRYPT_EFAIL;
    }
    uint8_t tag[16];
    static const char msg[] = "Cryptographic Forum Research Group";
    if (crypt_poly1305(crypt_selftest_poly1305_key, (const uint8_t *)msg, sizeof msg - 1, tag) !=
            CRYPT_OK ||
        memcmp(tag, crypt_selftest_poly1305_tag, sizeof tag) != 0) {
        return CRYPT_EFAIL;
    }
    return CRYPT_OK;
}

static int crypt_selftest_kdf(void)
{
    uint8_t out[16];
    if (crypt_pbkdf2_sha256((const uint8_t *)"passwd", 6, (const uint8_t *)"salt", 4, 1, out,
                            sizeof out) != CRYPT_OK ||
        memcmp(out, crypt_selftest_pbkdf2_sha256, sizeof out) != 0) {
        return CRYPT_EFAIL;
    }
    if (crypt_pbkdf2_sha512((const uint8_t *)"password", 8, (const uint8_t *)"salt", 4, 1, out,
                            sizeof out) != CRYPT_OK ||
        memcmp(out, crypt_selftest_pbkdf2_sha512, sizeof out) != 0) {
        return CRYPT_EFAIL;
    }
    if (crypt_aes256cbc_iv(1, out) != CRYPT_OK ||
        memcmp(out, crypt_selftest_aes_iv1, sizeof out) != 0) {
        return CRYPT_EFAIL;
    }
    return CRYPT_OK;
}

/* Encrypts and decrypts page 1 and page 2 of 512 bytes under cipher. */
static int crypt_selftest_round_trip(int cipher)
{
    static const uint8_t secret[] = "selftest";
    const struct crypt_params params = {cipher, 1, 0};
    uint8_t plain[512], page[512];
    crypt_ctx *ctx = NULL;
    int rc = crypt_ctx_create(&params, secret, sizeof secret - 1, NULL, &ctx);
    for (uint32_t pgno = 1; pgno <= 2 && rc == CRYPT_OK; pgno++) {
        unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
        size_t data = sizeof plain - crypt_reserve_bytes(cipher);
        for (size_t i = 0; i < sizeof plain; i++) {
            plain[i] = (uint8_t)(i * 7 + pgno);
        }
        memcpy(plain, CRYPT_SQLITE_MAGIC, 16);
        static const uint8_t hdr[8] = {0x02, 0x00, 0x01, 0x01, 0x00, 0x40, 0x20, 0x20};
        memcpy(plain + 16, hdr, sizeof hdr);
        plain[20] = (uint8_t)crypt_reserve_bytes(cipher);
        rc = crypt_page_encrypt(ctx, pgno, plain, page, sizeof page, flags);
        if (rc == CRYPT_OK) {
            rc = crypt_page_decrypt(ctx, pgno, page, sizeof page, flags);
        }
        if (rc == CRYPT_OK && memcmp(plain, page, data) != 0) {
            rc = CRYPT_EFAIL;
        }
    }
    crypt_ctx_free(ctx);
    return rc == CRYPT_OK ? CRYPT_OK : CRYPT_EFAIL;
}

int crypt_selftest(void)
{
    if (crypt_init() != CRYPT_OK || crypt_selftest_chacha20() != CRYPT_OK ||
        crypt_selftest_kdf() != CRYPT_OK) {
        return CRYPT_EFAIL;
    }
    static const int ciphers[] = {CRYPT_CIPHER_CHACHA20, CRYPT_CIPHER_AES256CBC,
                                  CRYPT_CIPHER_SQLCIPHER};
    for (size_t i = 0; i < sizeof ciphers / sizeof ciphers[0]; i++) {
        if (crypt_selftest_round_trip(ciphers[i]) != CRYPT_OK) {
            return CRYPT_EFAIL;
        }
    }
    return CRYPT_OK;
}
