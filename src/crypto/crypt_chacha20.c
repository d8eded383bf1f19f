/*
 * crypt_chacha20.c -- SQLite3MC's default "chacha20" cipher (sqleet-compatible), and the
 * ChaCha20 / Poly1305 primitives it is built from (FORMAT.md §2, §1.4).
 *
 * PAGE FORMAT (page size P, n = P - 32)
 *   out[n..n+16]     nonce: 16 random bytes
 *   ctr              LE32(nonce[12..16]) XOR pgno
 *   otk              64 bytes of ChaCha20(key, ctr, nonce[0..12]) keystream
 *   out[off..n]      plain XOR ChaCha20(otk[32..64], ctr + 1, nonce[0..12])
 *   out[n+16..n+32]  Poly1305(otk[0..32], out[0..n+16])
 *   page 1 (CRYPT_PAGE_DB_HEADER): off = 24, out[0..16] = salt, out[16..24] = plain.
 *
 * IMPLEMENTATION NOTES
 *   - One EVP_CIPHER_CTX per context, bound to ChaCha20 once; every page re-initialises it
 *     twice (key and IV for the one-time key, then the data key) and re-keys the Poly1305
 *     EVP_MAC_CTX once. No allocation and no fetch per page.
 *   - OpenSSL's ChaCha20 IV is LE32(counter) || 12-byte nonce and carries a counter
 *     overflow into the nonce; sqleet wraps the counter to 0 and keeps the nonce.
 *     crypt_chacha20_stream() therefore ends a call at the 2^32 block boundary and
 *     continues at counter 0. With a random starting counter this happens on about one
 *     4 KiB page write in 2^32 / 65.
 *   - Decryption checks the tag first (constant time) and touches the buffer only after.
 */
#include "crypto/crypt_internal.h"

#include <string.h>

#define CRYPT_CHACHA20_BLOCK_BYTES 64
#define CRYPT_CHACHA20_OTK_BYTES   64
#define CRYPT_CHACHA20_SLICE_BYTES ((size_t)1 << 30) /* per EVP call; int-sized, 64-aligned */

_Static_assert(CRYPT_CHACHA20_RESERVE == CRYPT_CHACHA20_NONCE_BYTES + CRYPT_CHACHA20_TAG_BYTES,
               "reserve = nonce + tag");
_Static_assert(CRYPT_CHACHA20_RESERVE == 32, "sqleet reserves 32 bytes");

static const uint8_t crypt_chacha20_zero[CRYPT_CHACHA20_OTK_BYTES];

int crypt_chacha20_stream(EVP_CIPHER_CTX *c,
                          const uint8_t *key,
                          uint32_t counter,
                          const uint8_t nonce[12],
                          const uint8_t *in,
                          uint8_t *out,
                          size_t len)
{
    uint8_t iv[16];
    memcpy(iv + 4, nonce, 12);
    while (len > 0) {
        /* Bytes before the block counter wraps: (2^32 - counter) whole blocks. */
        uint64_t room = ((UINT64_C(1) << 32) - counter) * CRYPT_CHACHA20_BLOCK_BYTES;
        size_t piece = (uint64_t)len < room ? len : (size_t)room;
        crypt_put_le32(iv, counter);
        if (EVP_EncryptInit_ex2(c, NULL, key, iv, NULL) != 1) {
            return CRYPT_EFAIL;
        }
        key = NULL; /* the context keeps it across the wrap */
        for (size_t done = 0; done < piece;) {
            size_t slice = piece - done;
            slice = slice < CRYPT_CHACHA20_SLICE_BYTES ? slice : CRYPT_CHACHA20_SLICE_BYTES;
            int rc = crypt_cipher_update(c, in + done, out + done, slice);
            if (rc != CRYPT_OK) {
                return rc;
            }
            done += slice;
        }
        in += piece;
        out += piece;
        len -= piece;
        counter = 0;
    }
    return CRYPT_OK;
}

static int crypt_chacha20_poly1305(
    EVP_MAC_CTX *mac, const uint8_t key[32], const uint8_t *msg, size_t len, uint8_t tag[16])
{
    size_t tag_len = 0;
    if (EVP_MAC_init(mac, key, 32, NULL) != 1 || EVP_MAC_update(mac, msg, len) != 1 ||
        EVP_MAC_final(mac, tag, &tag_len, 16) != 1 || tag_len != 16) {
        return CRYPT_EFAIL;
    }
    return CRYPT_OK;
}

int crypt_chacha20_xor(const uint8_t key[32],
                       uint32_t counter,
                       const uint8_t nonce[12],
                       const uint8_t *in,
                       uint8_t *out,
                       size_t len)
{
    int rc = crypt_init();
    EVP_CIPHER_CTX *c = NULL;
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (key == NULL || nonce == NULL || (len > 0 && (in == NULL || out == NULL))) {
        rc = CRYPT_EINVAL;
        goto cleanup;
    }
    c = EVP_CIPHER_CTX_new();
    if (c == NULL) {
        rc = CRYPT_ENOMEM;
        goto cleanup;
    }
    if (EVP_EncryptInit_ex2(c, crypt_algs()->chacha20, NULL, NULL, NULL) != 1) {
        rc = CRYPT_EFAIL;
        goto cleanup;
    }
    rc = crypt_chacha20_stream(c, key, counter, nonce, in, out, len);
cleanup:
    EVP_CIPHER_CTX_free(c);
    return rc;
}

int crypt_poly1305(const uint8_t key[32], const uint8_t *msg, size_t len, uint8_t tag[16])
{
    int rc = crypt_init();
    EVP_MAC_CTX *mac = NULL;
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (key == NULL || tag == NULL || (msg == NULL && len > 0)) {
        rc = CRYPT_EINVAL;
        goto cleanup;
    }
    mac = EVP_MAC_CTX_new(crypt_algs()->poly1305);
    if (mac == NULL) {
        rc = CRYPT_ENOMEM;
        goto cleanup;
    }
    rc = crypt_chacha20_poly1305(mac, key, msg, len, tag);
cleanup:
    EVP_MAC_CTX_free(mac);
    return rc;
}

static int crypt_chacha20_derive(crypt_ctx *ctx, const struct crypt_secret *secret)
{
    if (secret->is_raw) {
        memcpy(ctx->key, secret->raw_key, CRYPT_KEY_BYTES);
        return CRYPT_OK;
    }
    return crypt_pbkdf2_sha256(secret->pass, secret->pass_len, ctx->salt, CRYPT_SALT_BYTES,
                               ctx->kdf_iter, ctx->key, CRYPT_KEY_BYTES);
}

static int crypt_chacha20_open(crypt_ctx *ctx)
{
    ctx->enc = EVP_CIPHER_CTX_new();
    ctx->mac = EVP_MAC_CTX_new(crypt_algs()->poly1305);
    if (ctx->enc == NULL || ctx->mac == NULL) {
        return CRYPT_ENOMEM;
    }
    if (EVP_EncryptInit_ex2(ctx->enc, crypt_algs()->chacha20, ctx->key, NULL, NULL) != 1) {
        return CRYPT_EFAIL;
    }
    return CRYPT_OK;
}

/* The one-time key of a page, and the counter its data keystream starts at. */
static int crypt_chacha20_otk(crypt_ctx *ctx,
                              uint32_t pgno,
                              const uint8_t nonce[CRYPT_CHACHA20_NONCE_BYTES],
                              uint8_t otk[CRYPT_CHACHA20_OTK_BYTES],
                              uint32_t *data_counter)
{
    uint32_t counter = crypt_get_le32(nonce + 12) ^ pgno;
    *data_counter = counter + 1u; /* modulo 2^32, as sqleet */
    return crypt_chacha20_stream(ctx->enc, ctx->key, counter, nonce, crypt_chacha20_zero, otk,
                                 CRYPT_CHACHA20_OTK_BYTES);
}

static int crypt_chacha20_encrypt(crypt_ctx *ctx,
                                  uint32_t pgno,
                                  const uint8_t *plain,
                                  uint8_t *out,
                                  uint32_t page_size,
                                  unsigned flags)
{
    const size_t n = (size_t)page_size - CRYPT_CHACHA20_RESERVE;
    const size_t off = (flags & CRYPT_PAGE_DB_HEADER) ? CRYPT_PAGE1_OFFSET : 0;
    uint8_t *nonce = out + n;
    uint8_t otk[CRYPT_CHACHA20_OTK_BYTES];
    uint32_t data_counter = 0;
    int rc = crypt_ctx_nonce(ctx, nonce);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    rc = crypt_chacha20_otk(ctx, pgno, nonce, otk, &data_counter);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    rc = crypt_chacha20_stream(ctx->enc, otk + 32, data_counter, nonce, plain + off, out + off,
                               n - off);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (off > 0) {
        memcpy(out, ctx->salt, CRYPT_SALT_BYTES);
        memcpy(out + CRYPT_SALT_BYTES, plain + CRYPT_SALT_BYTES, off - CRYPT_SALT_BYTES);
    }
    rc = crypt_chacha20_poly1305(ctx->mac, otk, out, n + CRYPT_CHACHA20_NONCE_BYTES,
                                 out + n + CRYPT_CHACHA20_NONCE_BYTES);
cleanup:
    crypt_wipe(otk, sizeof otk);
    return rc;
}

static int crypt_chacha20_decrypt(
    crypt_ctx *ctx, uint32_t pgno, uint8_t *page, uint32_t page_size, unsigned flags)
{
    const size_t n = (size_t)page_size - CRYPT_CHACHA20_RESERVE;
    const size_t off = (flags & CRYPT_PAGE_DB_HEADER) ? CRYPT_PAGE1_OFFSET : 0;
    const uint8_t *nonce = page + n;
    const uint8_t *stored_tag = page + n + CRYPT_CHACHA20_NONCE_BYTES;
    uint8_t otk[CRYPT_CHACHA20_OTK_BYTES];
    uint8_t tag[CRYPT_CHACHA20_TAG_BYTES];
    uint32_t data_counter = 0;
    int rc = crypt_chacha20_otk(ctx, pgno, nonce, otk, &data_counter);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    rc = crypt_chacha20_poly1305(ctx->mac, otk, page, n + CRYPT_CHACHA20_NONCE_BYTES, tag);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (crypt_memcmp_ct(tag, stored_tag, sizeof tag) != 0) {
        rc = CRYPT_EAUTH; /* nothing written yet */
        goto cleanup;
    }
    rc = crypt_chacha20_stream(ctx->enc, otk + 32, data_counter, nonce, page + off, page + off,
                               n - off);
    if (rc == CRYPT_OK && off > 0) {
        memcpy(page, CRYPT_SQLITE_MAGIC, CRYPT_SALT_BYTES);
    }
cleanup:
    crypt_wipe(otk, sizeof otk);
    return rc;
}

const struct crypt_cipher_desc crypt_chacha20_desc = {
    .cipher = CRYPT_CIPHER_CHACHA20,
    .name = "chacha20",
    .reserve_bytes = CRYPT_CHACHA20_RESERVE,
    .kdf_iter_default = CRYPT_CHACHA20_KDF_ITER_DEFAULT,
    .derive = crypt_chacha20_derive,
    .open = crypt_chacha20_open,
    .encrypt = crypt_chacha20_encrypt,
    .decrypt = crypt_chacha20_decrypt,
};
