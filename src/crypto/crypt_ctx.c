/*
 * crypt_ctx.c -- keyed contexts: create (runs the KDF once), clone, free; and the page
 * entry points, which check their arguments and dispatch to the cipher's descriptor.
 *
 * IMPLEMENTATION NOTES
 *   - The secret is parsed into a stack struct that is wiped before returning; the
 *     context keeps only derived keys and the salt, and crypt_ctx_free() wipes the whole
 *     struct (keys, salt, nonce pool) and the chacha20 one-time-key pool before freeing
 *     them.
 *   - Salt choice (FORMAT.md §1.3): the file's salt when given; else a raw key's own salt
 *     (x'<96 hex>', raw:<48 bytes>); else 16 random bytes. aes256cbc has no salt.
 *   - The page functions check everything a cipher relies on (page size a power of two in
 *     512..65536, pgno >= 1, flags, buffers) so the cipher files can assert instead.
 */
#include "crypto/crypt_internal.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Checks params and returns the descriptor, or NULL. */
static const struct crypt_cipher_desc *crypt_ctx_check_params(const struct crypt_params *p)
{
    const struct crypt_cipher_desc *desc = crypt_cipher_desc_of(p->cipher);
    if (desc == NULL || p->kdf_iter > CRYPT_KDF_ITER_MAX) {
        return NULL;
    }
    /* (1) legacy 0 everywhere, (2) legacy 4 (real SQLCipher 4) for sqlcipher only. */
    if (p->legacy != 0 && !(p->cipher == CRYPT_CIPHER_SQLCIPHER && p->legacy == 4)) {
        return NULL;
    }
    return desc;
}

static crypt_ctx *crypt_ctx_alloc(const struct crypt_cipher_desc *desc)
{
    crypt_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx != NULL) {
        ctx->desc = desc;
        ctx->nonce_pool_used_bytes = CRYPT_NONCE_POOL_BYTES;
        ctx->otk_pool_used = CRYPT_OTK_POOL_KEYS;
    }
    return ctx;
}

static int
crypt_ctx_pick_salt(crypt_ctx *ctx, const struct crypt_secret *secret, const uint8_t *file_salt)
{
    if (ctx->desc->cipher == CRYPT_CIPHER_AES256CBC) {
        return CRYPT_OK; /* no salt: stays all zero */
    }
    if (file_salt != NULL) {
        memcpy(ctx->salt, file_salt, CRYPT_SALT_BYTES);
        return CRYPT_OK;
    }
    if (secret->has_raw_salt) {
        memcpy(ctx->salt, secret->raw_salt, CRYPT_SALT_BYTES);
        return CRYPT_OK;
    }
    return crypt_random(ctx->salt, CRYPT_SALT_BYTES);
}

int crypt_ctx_create(const struct crypt_params *params,
                     const uint8_t *secret,
                     size_t secret_len,
                     const uint8_t *file_salt,
                     crypt_ctx **out)
{
    struct crypt_secret parsed;
    crypt_ctx *ctx = NULL;
    int rc = crypt_secret_parse(secret, secret_len, &parsed);
    if (out != NULL) {
        *out = NULL;
    }
    const struct crypt_cipher_desc *desc = params != NULL ? crypt_ctx_check_params(params) : NULL;
    if (rc != CRYPT_OK || desc == NULL || out == NULL) {
        rc = CRYPT_EINVAL;
        goto cleanup;
    }
    rc = crypt_init();
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    ctx = crypt_ctx_alloc(desc);
    if (ctx == NULL) {
        rc = CRYPT_ENOMEM;
        goto cleanup;
    }
    ctx->kdf_iter = params->kdf_iter != 0 ? params->kdf_iter : desc->kdf_iter_default;
    ctx->legacy = params->legacy;
    rc = crypt_ctx_pick_salt(ctx, &parsed, file_salt);
    if (rc == CRYPT_OK) {
        rc = desc->derive(ctx, &parsed);
    }
    if (rc == CRYPT_OK) {
        rc = desc->open(ctx);
    }
    if (rc == CRYPT_OK) {
        *out = ctx;
        ctx = NULL;
    }
cleanup:
    crypt_secret_wipe(&parsed);
    crypt_ctx_free(ctx);
    return rc;
}

int crypt_ctx_create_random(crypt_ctx **out)
{
    uint8_t secret[4 + CRYPT_KEY_BYTES + CRYPT_SALT_BYTES] = {'r', 'a', 'w', ':'};
    int rc = CRYPT_EINVAL;
    if (out == NULL) {
        goto cleanup;
    }
    *out = NULL;
    rc = crypt_random(secret + 4, sizeof secret - 4);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    const struct crypt_params params = {CRYPT_CIPHER_CHACHA20, 0, 0};
    rc = crypt_ctx_create(&params, secret, sizeof secret, NULL, out);
cleanup:
    crypt_wipe(secret, sizeof secret);
    return rc;
}

int crypt_ctx_clone(const crypt_ctx *src, crypt_ctx **out)
{
    if (out == NULL) {
        return CRYPT_EINVAL;
    }
    *out = NULL;
    if (src == NULL) {
        return CRYPT_EINVAL;
    }
    crypt_ctx *ctx = crypt_ctx_alloc(src->desc);
    if (ctx == NULL) {
        return CRYPT_ENOMEM;
    }
    ctx->kdf_iter = src->kdf_iter;
    ctx->legacy = src->legacy;
    memcpy(ctx->salt, src->salt, sizeof ctx->salt);
    memcpy(ctx->key, src->key, sizeof ctx->key);
    memcpy(ctx->hmac_key, src->hmac_key, sizeof ctx->hmac_key);
    int rc = ctx->desc->open(ctx); /* own OpenSSL state; empty nonce and key pools */
    if (rc != CRYPT_OK) {
        crypt_ctx_free(ctx);
        return rc;
    }
    *out = ctx;
    return CRYPT_OK;
}

void crypt_ctx_free(crypt_ctx *ctx)
{
    if (ctx == NULL) {
        return;
    }
    EVP_CIPHER_CTX_free(ctx->enc); /* each of these cleanses its key schedule */
    EVP_CIPHER_CTX_free(ctx->dec);
    EVP_CIPHER_CTX_free(ctx->cts_enc);
    EVP_CIPHER_CTX_free(ctx->cts_dec);
    EVP_MAC_CTX_free(ctx->mac);
    EVP_MD_CTX_free(ctx->md);
    if (ctx->prov != NULL) { /* both free with a cleansing free */
        if (ctx->prov_cipher != NULL) {
            ctx->prov->cipher_freectx(ctx->prov_cipher);
        }
        if (ctx->prov_mac != NULL) {
            ctx->prov->mac_freectx(ctx->prov_mac);
        }
    }
    if (ctx->otk_pool != NULL) {
        crypt_wipe(ctx->otk_pool, CRYPT_OTK_POOL_KEYS * CRYPT_OTK_BYTES);
        free(ctx->otk_pool);
    }
    crypt_wipe(ctx, sizeof *ctx);
    free(ctx);
}

int crypt_ctx_cipher(const crypt_ctx *ctx)
{
    return ctx->desc->cipher;
}

uint32_t crypt_ctx_kdf_iter(const crypt_ctx *ctx)
{
    return ctx->kdf_iter;
}

int crypt_ctx_legacy(const crypt_ctx *ctx)
{
    return ctx->legacy;
}

const uint8_t *crypt_ctx_salt(const crypt_ctx *ctx)
{
    return ctx->salt;
}

int crypt_ctx_nonce(crypt_ctx *ctx, uint8_t nonce[CRYPT_NONCE_BYTES])
{
    uint32_t generation = crypt_fork_generation();
    /* (1) pool used up or (2) filled before a fork(): refill. */
    if (ctx->nonce_pool_used_bytes >= CRYPT_NONCE_POOL_BYTES ||
        ctx->nonce_pool_generation != generation) {
        int rc = crypt_random(ctx->nonce_pool, CRYPT_NONCE_POOL_BYTES);
        if (rc != CRYPT_OK) {
            return rc;
        }
        ctx->nonce_pool_used_bytes = 0;
        ctx->nonce_pool_generation = generation;
    }
    uint8_t *take = ctx->nonce_pool + ctx->nonce_pool_used_bytes;
    memcpy(nonce, take, CRYPT_NONCE_BYTES);
    crypt_wipe(take, CRYPT_NONCE_BYTES); /* a nonce is handed out once */
    ctx->nonce_pool_used_bytes += CRYPT_NONCE_BYTES;
    return CRYPT_OK;
}

/* Shared checks of crypt_page_encrypt() and crypt_page_decrypt(). */
static int crypt_ctx_page_valid(
    const crypt_ctx *ctx, uint32_t pgno, const uint8_t *page, uint32_t page_size, unsigned flags)
{
    /* (1) a context and a buffer, (2) pgno >= 1, (3) page size a power of two in range,
     * (4) only known flags, and the header flag on page 1 only. */
    if (ctx == NULL || page == NULL || pgno == 0) {
        return 0;
    }
    if ((flags & CRYPT_PAGE_ANY_SIZE) != 0) {
        /* (5) temp-file blocks: chacha20, no database header, 16-byte multiples. */
        if (ctx->desc->cipher != CRYPT_CIPHER_CHACHA20 || (flags & CRYPT_PAGE_DB_HEADER) ||
            page_size < CRYPT_PAGE_SIZE_MIN || page_size > CRYPT_PAGE_SIZE_MAX + 32 ||
            page_size % 16 != 0) {
            return 0;
        }
    } else if (page_size < CRYPT_PAGE_SIZE_MIN || page_size > CRYPT_PAGE_SIZE_MAX ||
               (page_size & (page_size - 1)) != 0) {
        return 0;
    }
    if ((flags & ~(CRYPT_PAGE_DB_HEADER | CRYPT_PAGE_ANY_SIZE)) != 0 ||
        ((flags & CRYPT_PAGE_DB_HEADER) && pgno != 1)) {
        return 0;
    }
    return 1;
}

int crypt_page_encrypt(crypt_ctx *ctx,
                       uint32_t pgno,
                       const uint8_t *plain,
                       uint8_t *out,
                       uint32_t page_size,
                       unsigned flags)
{
    if (!crypt_ctx_page_valid(ctx, pgno, plain, page_size, flags) || out == NULL) {
        return CRYPT_EINVAL;
    }
    /* out is a private buffer; an overlap is a programmer error. */
    assert(out + page_size <= plain || plain + page_size <= out);
    return ctx->desc->encrypt(ctx, pgno, plain, out, page_size, flags);
}

static atomic_uint_fast64_t crypt_decrypt_calls;

uint64_t crypt_pages_decrypted(void)
{
    return (uint64_t)atomic_load_explicit(&crypt_decrypt_calls, memory_order_relaxed);
}

int crypt_page_decrypt(
    crypt_ctx *ctx, uint32_t pgno, uint8_t *page, uint32_t page_size, unsigned flags)
{
    if (!crypt_ctx_page_valid(ctx, pgno, page, page_size, flags)) {
        return CRYPT_EINVAL;
    }
    atomic_fetch_add_explicit(&crypt_decrypt_calls, 1, memory_order_relaxed);
    int rc = ctx->desc->decrypt(ctx, pgno, page, page_size, flags);
    /* Paired with the encrypt side: a page 1 that decrypted carries the SQLite magic. */
    assert(rc != CRYPT_OK || !(flags & CRYPT_PAGE_DB_HEADER) ||
           (page[0] == 'S' && page[15] == '\0'));
    return rc;
}

int crypt_ctx_can_authenticate(const crypt_ctx *ctx)
{
    return ctx != NULL && ctx->desc->authenticate != NULL;
}

int crypt_page_authenticate(
    crypt_ctx *ctx, uint32_t pgno, const uint8_t *page, uint32_t page_size, unsigned flags)
{
    if (!crypt_ctx_page_valid(ctx, pgno, page, page_size, flags) ||
        (flags & CRYPT_PAGE_ANY_SIZE) != 0 || ctx->desc->authenticate == NULL) {
        return CRYPT_EINVAL;
    }
    return ctx->desc->authenticate(ctx, pgno, page, page_size, flags);
}
