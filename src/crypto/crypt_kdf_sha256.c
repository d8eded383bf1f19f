/*
 * crypt_kdf_sha256.c -- PBKDF2-HMAC-SHA256 (RFC 8018 5.2) on OpenSSL's SHA-256 block
 * function, for the chacha20 key derivation of every store open (64,007 iterations).
 *
 * WHY
 *   OpenSSL 3.0's PBKDF2 (EVP_KDF "PBKDF2", crypt_kdf.c) starts each iteration's HMAC again
 *   from the keyed template, which duplicates the provider's digest contexts (an allocation,
 *   a copy and a free for the inner and the outer hash, through the provider dispatch) for
 *   two 64-byte compressions of real work: 4 allocations per iteration, and half of the
 *   derivation's CPU (64,007 iterations on the benchmark machine, CPU time alternating in one
 *   process: 20.1-23.7 ms through EVP_KDF, 10.9-11.2 ms here). The derivation is in the
 *   first login of every user after a server start, the cold LOGIN + SELECT of issue 13
 *   (~28 ms at 10,000 messages, Dovecot ~39 ms). OpenSSL has no PBKDF2 that keeps the
 *   keyed states (its 3.0 digests cannot be copied without an allocation), and libsodium
 *   has no PBKDF2 and a portable SHA-256 (~5x slower than OpenSSL's SHA-NI code here).
 *   So the HMAC is written out on the block function: the inner and outer states after the
 *   padded key are computed once, and each iteration is two SHA256_Transform() calls on a
 *   block that already holds the padding of a 32-byte message after one 64-byte block.
 *   The hash itself is OpenSSL's (same assembly); nothing here is a primitive of our own.
 *
 * IMPLEMENTATION NOTES
 *   - SHA256_Init/Update/Final/Transform are deprecated in OpenSSL 3.0 but built into
 *     Debian's libcrypto 3; OPENSSL_SUPPRESS_DEPRECATED (this file only) keeps -Werror quiet.
 *     A libcrypto built without them (OPENSSL_NO_DEPRECATED_3_0) leaves this file empty and
 *     crypt_pbkdf2_sha256() (crypt_kdf.c) on EVP_KDF.
 *   - Every buffer and state that derives from the password is cleansed before returning.
 *   - tests/test_crypto.c compares this with EVP_KDF over edge cases of every length and
 *     counts OpenSSL's allocations during a derivation (a constant here, per iteration there).
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "crypto/crypt_internal.h"

#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <string.h>

#define CRYPT_KDF_SHA256_BLOCK  64 /* SHA-256's block, also HMAC's padded key */
#define CRYPT_KDF_SHA256_DIGEST 32

#ifndef OPENSSL_NO_DEPRECATED_3_0

/* The digest a state holds after a whole number of blocks, big-endian (SHA-256's order). */
static void crypt_kdf_sha256_state_out(const SHA256_CTX *c, uint8_t out[CRYPT_KDF_SHA256_DIGEST])
{
    for (size_t i = 0; i < 8; i++, out += 4) {
        out[0] = (uint8_t)(c->h[i] >> 24);
        out[1] = (uint8_t)(c->h[i] >> 16);
        out[2] = (uint8_t)(c->h[i] >> 8);
        out[3] = (uint8_t)c->h[i];
    }
}

/* The HMAC's inner and outer states after the key's padded block (RFC 2104): a key longer
 * than a block is hashed first. */
static int
crypt_kdf_sha256_keyed(const uint8_t *pass, size_t pass_len, SHA256_CTX *in, SHA256_CTX *out)
{
    uint8_t key[CRYPT_KDF_SHA256_BLOCK] = {0}, pad[CRYPT_KDF_SHA256_BLOCK];
    int ok = 1;
    if (pass_len > CRYPT_KDF_SHA256_BLOCK) {
        ok = EVP_Digest(pass, pass_len, key, NULL, EVP_sha256(), NULL) == 1;
    } else if (pass_len > 0) {
        memcpy(key, pass, pass_len);
    }
    for (size_t i = 0; i < sizeof pad; i++) {
        pad[i] = key[i] ^ 0x36;
    }
    ok = ok && SHA256_Init(in) == 1 && SHA256_Update(in, pad, sizeof pad) == 1;
    for (size_t i = 0; i < sizeof pad; i++) {
        pad[i] = key[i] ^ 0x5c;
    }
    ok = ok && SHA256_Init(out) == 1 && SHA256_Update(out, pad, sizeof pad) == 1;
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(pad, sizeof pad);
    return ok;
}

/* T_i = U_1 ^ ... ^ U_iter (RFC 8018 5.2 step 3) into t. */
static int crypt_kdf_sha256_block(const SHA256_CTX *in,
                                  const SHA256_CTX *out,
                                  const uint8_t *salt,
                                  size_t salt_len,
                                  uint32_t index,
                                  uint32_t iter,
                                  uint8_t t[CRYPT_KDF_SHA256_DIGEST])
{
    const uint8_t be_index[4] = {(uint8_t)(index >> 24), (uint8_t)(index >> 16),
                                 (uint8_t)(index >> 8), (uint8_t)index};
    SHA256_CTX c = *in;
    uint8_t u[CRYPT_KDF_SHA256_DIGEST];
    /* U_1 = HMAC(P, S || INT(i)): a salt of any length, so through Update/Final */
    int ok = (salt_len == 0 || SHA256_Update(&c, salt, salt_len) == 1) &&
             SHA256_Update(&c, be_index, sizeof be_index) == 1 && SHA256_Final(u, &c) == 1;
    c = *out;
    ok = ok && SHA256_Update(&c, u, sizeof u) == 1 && SHA256_Final(u, &c) == 1;
    memcpy(t, u, sizeof u);
    /* U_j = HMAC(P, U_{j-1}): both hashes are one block after the key's, a 32-byte message
     * padded to 64: 0x80, zeros, and the length in bits of key block + message, 768. */
    uint8_t block[CRYPT_KDF_SHA256_BLOCK] = {0};
    block[CRYPT_KDF_SHA256_DIGEST] = 0x80;
    block[CRYPT_KDF_SHA256_BLOCK - 2] = 0x03; /* 768 = 0x0300 */
    for (uint32_t j = 1; ok && j < iter; j++) {
        memcpy(block, u, sizeof u);
        c = *in;
        SHA256_Transform(&c, block);
        crypt_kdf_sha256_state_out(&c, block);
        c = *out;
        SHA256_Transform(&c, block);
        crypt_kdf_sha256_state_out(&c, u);
        for (size_t k = 0; k < sizeof u; k++) {
            t[k] ^= u[k];
        }
    }
    OPENSSL_cleanse(&c, sizeof c);
    OPENSSL_cleanse(u, sizeof u);
    OPENSSL_cleanse(block, sizeof block);
    return ok;
}

int crypt_kdf_sha256_pbkdf2(const uint8_t *pass,
                            size_t pass_len,
                            const uint8_t *salt,
                            size_t salt_len,
                            uint32_t iter,
                            uint8_t *out,
                            size_t out_len)
{
    /* (1) buffers present when non-empty, (2) at least one iteration, (3) output wanted,
     * (4) lengths EVP_KDF takes too (crypt_kdf.c), (5) at most 2^32 - 1 blocks (RFC 8018
     * 5.2 step 1). */
    if ((pass == NULL && pass_len > 0) || (salt == NULL && salt_len > 0) || iter == 0 ||
        out == NULL || out_len == 0 || pass_len > (size_t)INT_MAX || salt_len > (size_t)INT_MAX ||
        out_len / CRYPT_KDF_SHA256_DIGEST >= UINT32_MAX) {
        return CRYPT_EINVAL;
    }
    SHA256_CTX in, outer;
    uint8_t t[CRYPT_KDF_SHA256_DIGEST];
    int ok = crypt_kdf_sha256_keyed(pass, pass_len, &in, &outer);
    uint32_t index = 1;
    for (size_t done = 0; ok && done < out_len; done += sizeof t, index++) {
        ok = crypt_kdf_sha256_block(&in, &outer, salt, salt_len, index, iter, t);
        size_t n = out_len - done < sizeof t ? out_len - done : sizeof t;
        memcpy(out + done, t, n);
    }
    OPENSSL_cleanse(&in, sizeof in);
    OPENSSL_cleanse(&outer, sizeof outer);
    OPENSSL_cleanse(t, sizeof t);
    if (!ok) {
        OPENSSL_cleanse(out, out_len);
        return CRYPT_EFAIL;
    }
    return CRYPT_OK;
}

#endif /* OPENSSL_NO_DEPRECATED_3_0 */
