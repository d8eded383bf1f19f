/*
 * crypt_kdf.c -- PBKDF2-HMAC-SHA256 (chacha20) and PBKDF2-HMAC-SHA512 (sqlcipher).
 *
 * The SHA-256 one runs on the SHA-256 block function (crypt_kdf_sha256.c: the same bytes at
 * half the CPU of EVP_KDF, which allocates in every iteration) wherever libcrypto has it.
 *
 * IMPLEMENTATION NOTES
 *   - The PBKDF2 EVP_KDF is fetched once (crypt_init.c); each derivation makes its own
 *     EVP_KDF_CTX, since a derivation runs once per key, not per page.
 *   - OSSL_KDF_PARAM_PKCS5 = 1 turns off OpenSSL's SP 800-132 lower bounds (salt >= 16
 *     bytes, >= 1000 iterations): the formats fix their own parameters, and the RFC test
 *     vectors use a 4-byte salt and 1 iteration.
 */
#include "crypto/crypt_internal.h"

#include <limits.h>
#include <openssl/core_names.h>
#include <openssl/params.h>

static int crypt_kdf_pbkdf2(const char *digest,
                            const uint8_t *pass,
                            size_t pass_len,
                            const uint8_t *salt,
                            size_t salt_len,
                            uint32_t iter,
                            uint8_t *out,
                            size_t out_len)
{
    int rc = crypt_init();
    EVP_KDF_CTX *kctx = NULL;
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    /* (1) buffers present when non-empty, (2) at least one iteration, (3) output wanted. */
    if ((pass == NULL && pass_len > 0) || (salt == NULL && salt_len > 0) || iter == 0 ||
        out == NULL || out_len == 0 || pass_len > (size_t)INT_MAX || salt_len > (size_t)INT_MAX) {
        rc = CRYPT_EINVAL;
        goto cleanup;
    }
    static const uint8_t empty[1];
    int pkcs5 = 1;
    uint64_t iter64 = iter;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)(uintptr_t)digest, 0),
        OSSL_PARAM_construct_octet_string(
            OSSL_KDF_PARAM_PASSWORD, (void *)(uintptr_t)(pass != NULL ? pass : empty), pass_len),
        OSSL_PARAM_construct_octet_string(
            OSSL_KDF_PARAM_SALT, (void *)(uintptr_t)(salt != NULL ? salt : empty), salt_len),
        OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_ITER, &iter64),
        OSSL_PARAM_construct_int(OSSL_KDF_PARAM_PKCS5, &pkcs5),
        OSSL_PARAM_construct_end(),
    };
    kctx = EVP_KDF_CTX_new(crypt_algs()->pbkdf2);
    if (kctx == NULL) {
        rc = CRYPT_ENOMEM;
        goto cleanup;
    }
    if (EVP_KDF_derive(kctx, out, out_len, params) != 1) {
        rc = CRYPT_EFAIL;
        goto cleanup;
    }
    rc = CRYPT_OK;
cleanup:
    EVP_KDF_CTX_free(kctx); /* cleanses the copy of the password it holds */
    return rc;
}

int crypt_pbkdf2_sha256(const uint8_t *pass,
                        size_t pass_len,
                        const uint8_t *salt,
                        size_t salt_len,
                        uint32_t iter,
                        uint8_t *out,
                        size_t out_len)
{
#ifdef CRYPT_KDF_SHA256_FAST /* the same bytes at half the CPU (crypt_kdf_sha256.c) */
    int rc = crypt_init();
    return rc != CRYPT_OK
               ? rc
               : crypt_kdf_sha256_pbkdf2(pass, pass_len, salt, salt_len, iter, out, out_len);
#else
    return crypt_kdf_pbkdf2("SHA256", pass, pass_len, salt, salt_len, iter, out, out_len);
#endif
}

int crypt_pbkdf2_sha512(const uint8_t *pass,
                        size_t pass_len,
                        const uint8_t *salt,
                        size_t salt_len,
                        uint32_t iter,
                        uint8_t *out,
                        size_t out_len)
{
    return crypt_kdf_pbkdf2("SHA512", pass, pass_len, salt, salt_len, iter, out, out_len);
}
