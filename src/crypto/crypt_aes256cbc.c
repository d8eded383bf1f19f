/*
 * crypt_aes256cbc.c -- SQLite3MC's "aes256cbc" cipher (wxSQLite3 AES-256), FORMAT.md §3.
 *
 * A legacy format we read and write for compatibility only: no salt, no nonce, no MAC,
 * deterministic per (key, page). Reserve is 0.
 *
 *   key       d = SHA256(password[0..m] || padding string[0..32-m]), m = min(len, 32),
 *             then 4001 more rounds of d = SHA256(d). Longer passwords are truncated. The
 *             padding continues from the START of the padding string (as in PDF's password
 *             padding), not from position m: the README's derived key settles it.
 *   page key  SHA256(key || LE32(pgno) || "sAlT")
 *   IV        MD5(four LE32 outputs of an LCG seeded with pgno + 1)
 *   page != 1 AES-256-CBC(page key, IV) over the whole page, no padding
 *   page 1    A = CBC(D[0..16]); B = CBC(D[16..P]) from the same IV;
 *             out = A[0..8] || B[0..8] || D[16..24] (plain) || B[8..]
 *
 * IMPLEMENTATION NOTES
 *   - Page 1 is decrypted without a scratch page: block 0 of B is out[8..16] || out[24..32],
 *     decrypted alone from a stack copy; the CBC chain then continues in place over
 *     out[32..P]. Block 0 carries D[16..24], so the check "decrypted 16..23 == plain 16..23"
 *     is made before the buffer is touched, and a mismatch leaves it unchanged.
 *   - OpenSSL 3.0 allocates inside EVP_DigestInit_ex2() (it frees and re-creates the
 *     provider context), so the page-key and IV digests cost two small allocations per
 *     page. Acceptable for a read-mostly legacy format.
 *
 * LIMITATIONS
 *   - legacy=1 (page 1 fully encrypted) is refused: a page 1 whose bytes 16..23 are not a
 *     plain header fails with CRYPT_EAUTH. Raw keys are refused (CRYPT_EINVAL).
 */
#include "crypto/crypt_internal.h"

#include <string.h>

#define CRYPT_AES256CBC_PASS_BYTES 32

_Static_assert(CRYPT_AES256CBC_RESERVE == 0, "aes256cbc has no reserve");

static const uint8_t crypt_aes256cbc_padding[CRYPT_AES256CBC_PASS_BYTES] = {
    0x28, 0xBF, 0x4E, 0x5E, 0x4E, 0x75, 0x8A, 0x41, 0x64, 0x00, 0x4E, 0x56, 0xFF, 0xFA, 0x01, 0x08,
    0x2E, 0x2E, 0x00, 0xB6, 0xD0, 0x68, 0x3E, 0x80, 0x2F, 0x0C, 0xA9, 0xFE, 0x64, 0x53, 0x69, 0x7A,
};

static int crypt_aes256cbc_hash(EVP_MD_CTX *md,
                                const EVP_MD *type,
                                const uint8_t *in,
                                size_t len,
                                uint8_t *out,
                                unsigned int out_len)
{
    unsigned int got = 0;
    if (EVP_DigestInit_ex2(md, type, NULL) != 1 || EVP_DigestUpdate(md, in, len) != 1 ||
        EVP_DigestFinal_ex(md, out, &got) != 1 || got != out_len) {
        return CRYPT_EFAIL;
    }
    return CRYPT_OK;
}

int crypt_aes256cbc_kdf(const uint8_t *pass, size_t pass_len, uint8_t key[32])
{
    uint8_t pad[CRYPT_AES256CBC_PASS_BYTES];
    uint8_t d[CRYPT_KEY_BYTES];
    EVP_MD_CTX *md = NULL;
    int rc = crypt_init();
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if ((pass == NULL && pass_len > 0) || key == NULL) {
        rc = CRYPT_EINVAL;
        goto cleanup;
    }
    size_t take = pass_len < sizeof pad ? pass_len : sizeof pad;
    if (pass != NULL) { /* NULL only when pass_len is 0 */
        memcpy(pad, pass, take);
    }
    memcpy(pad + take, crypt_aes256cbc_padding, sizeof pad - take); /* from its start */
    md = EVP_MD_CTX_new();
    if (md == NULL) {
        rc = CRYPT_ENOMEM;
        goto cleanup;
    }
    const EVP_MD *sha256 = crypt_algs()->sha256;
    rc = crypt_aes256cbc_hash(md, sha256, pad, sizeof pad, d, sizeof d);
    for (uint32_t i = 0; i < CRYPT_AES256CBC_KDF_ROUNDS && rc == CRYPT_OK; i++) {
        rc = crypt_aes256cbc_hash(md, sha256, d, sizeof d, d, sizeof d);
    }
    if (rc == CRYPT_OK) {
        memcpy(key, d, sizeof d);
    }
cleanup:
    crypt_wipe(pad, sizeof pad);
    crypt_wipe(d, sizeof d);
    EVP_MD_CTX_free(md);
    return rc;
}

/* The 16 bytes the IV is the MD5 of. A seed above INT32_MAX wraps negative, as the
 * original's int does. No step overflows for any 32-bit z: 40692 * (z mod 52774) and
 * 3791 * q are each below 2^31 in magnitude, and have the same sign (so they subtract). */
static void crypt_aes256cbc_lcg(uint32_t pgno, uint8_t seq[16])
{
    int32_t z = (int32_t)(pgno + 1u);
    for (size_t i = 0; i < 4; i++) {
        int32_t q = z / 52774;
        z = 40692 * (z - 52774 * q) - 3791 * q;
        if (z < 0) {
            z += 2147483399;
        }
        crypt_put_le32(seq + 4 * i, (uint32_t)z);
    }
}

static int crypt_aes256cbc_iv_md(EVP_MD_CTX *md, uint32_t pgno, uint8_t iv[16])
{
    uint8_t seq[16];
    crypt_aes256cbc_lcg(pgno, seq);
    return crypt_aes256cbc_hash(md, crypt_algs()->md5, seq, sizeof seq, iv, 16);
}

int crypt_aes256cbc_iv(uint32_t pgno, uint8_t iv[16])
{
    int rc = crypt_init();
    EVP_MD_CTX *md = NULL;
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (iv == NULL) {
        rc = CRYPT_EINVAL;
        goto cleanup;
    }
    md = EVP_MD_CTX_new();
    if (md == NULL) {
        rc = CRYPT_ENOMEM;
        goto cleanup;
    }
    rc = crypt_aes256cbc_iv_md(md, pgno, iv);
cleanup:
    EVP_MD_CTX_free(md);
    return rc;
}

static int crypt_aes256cbc_page_key_md(EVP_MD_CTX *md,
                                       const uint8_t key[CRYPT_KEY_BYTES],
                                       uint32_t pgno,
                                       uint8_t page_key[CRYPT_KEY_BYTES])
{
    uint8_t in[CRYPT_KEY_BYTES + 8];
    memcpy(in, key, CRYPT_KEY_BYTES);
    crypt_put_le32(in + CRYPT_KEY_BYTES, pgno);
    memcpy(in + CRYPT_KEY_BYTES + 4, "sAlT", 4); /* 4 bytes, no NUL */
    int rc =
        crypt_aes256cbc_hash(md, crypt_algs()->sha256, in, sizeof in, page_key, CRYPT_KEY_BYTES);
    crypt_wipe(in, sizeof in);
    return rc;
}

int crypt_aes256cbc_page_key(const uint8_t key[32], uint32_t pgno, uint8_t page_key[32])
{
    int rc = crypt_init();
    EVP_MD_CTX *md = NULL;
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (key == NULL || page_key == NULL) {
        rc = CRYPT_EINVAL;
        goto cleanup;
    }
    md = EVP_MD_CTX_new();
    if (md == NULL) {
        rc = CRYPT_ENOMEM;
        goto cleanup;
    }
    rc = crypt_aes256cbc_page_key_md(md, key, pgno, page_key);
cleanup:
    EVP_MD_CTX_free(md);
    return rc;
}

/* Page key and IV of pgno under the context's key. */
static int crypt_aes256cbc_page_key_iv(crypt_ctx *ctx,
                                       uint32_t pgno,
                                       uint8_t page_key[CRYPT_KEY_BYTES],
                                       uint8_t iv[CRYPT_AES_BLOCK_BYTES])
{
    int rc = crypt_aes256cbc_page_key_md(ctx->md, ctx->key, pgno, page_key);
    if (rc != CRYPT_OK) {
        return rc;
    }
    return crypt_aes256cbc_iv_md(ctx->md, pgno, iv);
}

static int crypt_aes256cbc_derive(crypt_ctx *ctx, const struct crypt_secret *secret)
{
    if (secret->is_raw) {
        return CRYPT_EINVAL; /* the format has no raw keys */
    }
    ctx->kdf_iter = CRYPT_AES256CBC_KDF_ROUNDS; /* fixed by the format */
    return crypt_aes256cbc_kdf(secret->pass, secret->pass_len, ctx->key);
}

static int crypt_aes256cbc_open(crypt_ctx *ctx)
{
    const EVP_CIPHER *cbc = crypt_algs()->aes256cbc;
    ctx->enc = EVP_CIPHER_CTX_new();
    ctx->dec = EVP_CIPHER_CTX_new();
    ctx->md = EVP_MD_CTX_new();
    if (ctx->enc == NULL || ctx->dec == NULL || ctx->md == NULL) {
        return CRYPT_ENOMEM;
    }
    /* Bound once, padding off once; pages re-key with EVP_*Init_ex2(ctx, NULL, key, iv). */
    if (EVP_EncryptInit_ex2(ctx->enc, cbc, NULL, NULL, NULL) != 1 ||
        EVP_DecryptInit_ex2(ctx->dec, cbc, NULL, NULL, NULL) != 1 ||
        EVP_CIPHER_CTX_set_padding(ctx->enc, 0) != 1 ||
        EVP_CIPHER_CTX_set_padding(ctx->dec, 0) != 1) {
        return CRYPT_EFAIL;
    }
    return CRYPT_OK;
}

/* Page 1: A from D[0..16], B from D[16..P], both from IV; see the file comment. */
static int crypt_aes256cbc_encrypt_page1(crypt_ctx *ctx,
                                         const uint8_t *key,
                                         const uint8_t *iv,
                                         const uint8_t *plain,
                                         uint8_t *out,
                                         size_t page_size)
{
    uint8_t a[CRYPT_AES_BLOCK_BYTES];
    uint8_t b0[CRYPT_AES_BLOCK_BYTES];
    int rc = CRYPT_EFAIL;
    if (EVP_EncryptInit_ex2(ctx->enc, NULL, key, iv, NULL) != 1) {
        goto cleanup;
    }
    rc = crypt_cipher_update(ctx->enc, plain, a, sizeof a);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (EVP_EncryptInit_ex2(ctx->enc, NULL, NULL, iv, NULL) != 1) {
        rc = CRYPT_EFAIL;
        goto cleanup;
    }
    rc = crypt_cipher_update(ctx->enc, plain + 16, b0, sizeof b0);
    if (rc == CRYPT_OK) {
        rc = crypt_cipher_update(ctx->enc, plain + 32, out + 32, page_size - 32);
    }
    if (rc == CRYPT_OK) {
        memcpy(out, a, 8);
        memcpy(out + 8, b0, 8);
        memcpy(out + 16, plain + 16, 8);
        memcpy(out + 24, b0 + 8, 8);
    }
cleanup:
    crypt_wipe(a, sizeof a);
    crypt_wipe(b0, sizeof b0);
    return rc;
}

static int crypt_aes256cbc_encrypt(crypt_ctx *ctx,
                                   uint32_t pgno,
                                   const uint8_t *plain,
                                   uint8_t *out,
                                   uint32_t page_size,
                                   unsigned flags)
{
    uint8_t key[CRYPT_KEY_BYTES];
    uint8_t iv[CRYPT_AES_BLOCK_BYTES];
    int rc = crypt_aes256cbc_page_key_iv(ctx, pgno, key, iv);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (flags & CRYPT_PAGE_DB_HEADER) {
        rc = crypt_aes256cbc_encrypt_page1(ctx, key, iv, plain, out, page_size);
        goto cleanup;
    }
    if (EVP_EncryptInit_ex2(ctx->enc, NULL, key, iv, NULL) != 1) {
        rc = CRYPT_EFAIL;
        goto cleanup;
    }
    rc = crypt_cipher_update(ctx->enc, plain, out, page_size);
cleanup:
    crypt_wipe(key, sizeof key);
    return rc;
}

/* Bytes 16..23 of page 1 as a plain SQLite header: page size a power of two in 512..65536
 * (1 meaning 65536), and bytes 21..23 = 64, 32, 32 (payload fractions). */
static int crypt_aes256cbc_header_plain(const uint8_t *hdr)
{
    uint32_t size = ((uint32_t)hdr[0] << 8) | hdr[1];
    if (size == 1) {
        size = 65536;
    }
    return size >= 512 && (size & (size - 1)) == 0 && hdr[5] == 0x40 && hdr[6] == 0x20 &&
           hdr[7] == 0x20;
}

static int crypt_aes256cbc_decrypt_page1(
    crypt_ctx *ctx, const uint8_t *key, const uint8_t *iv, uint8_t *page, size_t page_size)
{
    uint8_t b0[CRYPT_AES_BLOCK_BYTES];
    uint8_t d0[CRYPT_AES_BLOCK_BYTES];
    int rc = CRYPT_EAUTH;
    if (!crypt_aes256cbc_header_plain(page + 16)) {
        goto cleanup; /* legacy=1 or not this format */
    }
    memcpy(b0, page + 8, 8);
    memcpy(b0 + 8, page + 24, 8);
    if (EVP_DecryptInit_ex2(ctx->dec, NULL, key, iv, NULL) != 1) {
        rc = CRYPT_EFAIL;
        goto cleanup;
    }
    rc = crypt_cipher_update(ctx->dec, b0, d0, sizeof d0);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (crypt_memcmp_ct(d0, page + 16, 8) != 0) {
        rc = CRYPT_EAUTH; /* wrong key: buffer untouched */
        goto cleanup;
    }
    /* The chain continues from b0, which the context holds. */
    rc = crypt_cipher_update(ctx->dec, page + 32, page + 32, page_size - 32);
    if (rc == CRYPT_OK) {
        memcpy(page + 24, d0 + 8, 8);
        memcpy(page, CRYPT_SQLITE_MAGIC, CRYPT_SALT_BYTES);
    }
cleanup:
    crypt_wipe(d0, sizeof d0);
    return rc;
}

static int crypt_aes256cbc_decrypt(
    crypt_ctx *ctx, uint32_t pgno, uint8_t *page, uint32_t page_size, unsigned flags)
{
    uint8_t key[CRYPT_KEY_BYTES];
    uint8_t iv[CRYPT_AES_BLOCK_BYTES];
    int rc = crypt_aes256cbc_page_key_iv(ctx, pgno, key, iv);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    if (flags & CRYPT_PAGE_DB_HEADER) {
        rc = crypt_aes256cbc_decrypt_page1(ctx, key, iv, page, page_size);
        goto cleanup;
    }
    if (EVP_DecryptInit_ex2(ctx->dec, NULL, key, iv, NULL) != 1) {
        rc = CRYPT_EFAIL;
        goto cleanup;
    }
    rc = crypt_cipher_update(ctx->dec, page, page, page_size);
cleanup:
    crypt_wipe(key, sizeof key);
    return rc;
}

const struct crypt_cipher_desc crypt_aes256cbc_desc = {
    .cipher = CRYPT_CIPHER_AES256CBC,
    .name = "aes256cbc",
    .reserve_bytes = CRYPT_AES256CBC_RESERVE,
    .kdf_iter_default = CRYPT_AES256CBC_KDF_ROUNDS,
    .derive = crypt_aes256cbc_derive,
    .open = crypt_aes256cbc_open,
    .encrypt = crypt_aes256cbc_encrypt,
    .decrypt = crypt_aes256cbc_decrypt,
};
