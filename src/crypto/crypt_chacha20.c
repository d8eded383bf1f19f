/*
 * crypt_chacha20.c -- SQLite3MC's default "chacha20" cipher (sqleet-compatible), and the
 * ChaCha20 / Poly1305 primitives it is built from (FORMAT.md §2, §1.4).
 *
 * PAGE FORMAT (page size P, n = P - 32)
 *   out[n..n+16]     nonce: 16 bytes chosen by the writer (see the notes)
 *   ctr              LE32(nonce[12..16]) XOR pgno
 *   otk              64 bytes of ChaCha20(key, ctr, nonce[0..12]) keystream
 *   out[off..n]      plain XOR ChaCha20(otk[32..64], ctr + 1, nonce[0..12])
 *   out[n+16..n+32]  Poly1305(otk[0..32], out[0..n+16])
 *   page 1 (CRYPT_PAGE_DB_HEADER): off = 24, out[0..16] = salt, out[16..24] = plain.
 *
 * IMPLEMENTATION NOTES
 *   - Per context one ChaCha20 and one Poly1305 context of OpenSSL's provider, called
 *     through its function table (crypt_provider.c: EVP's per-call parameter queries cost
 *     ~110 ns of a page); every page re-keys each once. No allocation and no fetch per
 *     page. Without the provider's functions, the same through an EVP_CIPHER_CTX and an
 *     EVP_MAC_CTX (tests/test_crypto.c runs both and compares them byte for byte).
 *   - Encryption takes its one-time keys from a pool: 64 consecutive keystream blocks of
 *     the master key (counters R..R+63 under one 12-byte nonce N, both random, from one
 *     EVP call: ~15 ns a key instead of ~165 ns for a block of its own). The format lets
 *     the writer choose the nonce: page i of the pool stores N || LE32((R + i) XOR pgno),
 *     from which every reader derives counter R + i and so the same key. What the format
 *     needs is that no (nonce, counter) pair of the master key is ever used twice: inside
 *     a pool the counters differ; two pools would need the same random 96-bit N and
 *     overlapping counter ranges (as unlikely as two random 128-bit page nonces meeting).
 *     A key leaves the pool once and is wiped there; a fork() empties the pool, as it
 *     does the nonce pool.
 *   - Decryption derives its one-time key from the stored nonce: one ChaCha20 block from
 *     libsodium's one-call crypto_stream_chacha20_ietf_xor_ic() rather than through EVP
 *     (re-initialising an EVP context with the master key and a new IV and asking for 64
 *     bytes cost ~220 ns per page on the benchmark machine, libsodium's call ~165 ns).
 *     The data keystream (4 KiB and more) stays with OpenSSL's vector code.
 *   - Poly1305 is fed the vector-friendly prefix and the last < 128 bytes in two calls:
 *     see crypt_chacha20_poly1305().
 *   - OpenSSL's ChaCha20 IV is LE32(counter) || 12-byte nonce and carries a counter
 *     overflow into the nonce; sqleet wraps the counter to 0 and keeps the nonce.
 *     crypt_chacha20_stream() therefore ends a call at the 2^32 block boundary and
 *     continues at counter 0. With a random starting counter this happens on about one
 *     4 KiB page write in 2^32 / 65.
 *   - Decryption checks the tag first (constant time) and touches the buffer only after.
 */
#include "crypto/crypt_internal.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define CRYPT_CHACHA20_BLOCK_BYTES 64
#define CRYPT_CHACHA20_SLICE_BYTES ((size_t)1 << 30) /* per EVP call; int-sized, 64-aligned */
#define CRYPT_POLY1305_CHUNK_BYTES 128               /* see crypt_chacha20_poly1305() */

_Static_assert(CRYPT_CHACHA20_RESERVE == CRYPT_CHACHA20_NONCE_BYTES + CRYPT_CHACHA20_TAG_BYTES,
               "reserve = nonce + tag");
_Static_assert(CRYPT_CHACHA20_RESERVE == 32, "sqleet reserves 32 bytes");
_Static_assert(CRYPT_OTK_BYTES == CRYPT_CHACHA20_BLOCK_BYTES, "a one-time key is one block");

/* Where ChaCha20 and Poly1305 run: the provider's contexts when prov is set, else EVP. */
struct crypt_chacha20_engine {
    EVP_CIPHER_CTX *evp_cipher; /* bound to ChaCha20 */
    EVP_MAC_CTX *evp_mac;       /* Poly1305 */
    const struct crypt_provider *prov;
    void *prov_cipher;
    void *prov_mac;
};

static struct crypt_chacha20_engine crypt_chacha20_engine_of(const crypt_ctx *ctx)
{
    struct crypt_chacha20_engine e = {ctx->enc, ctx->mac, ctx->prov, ctx->prov_cipher,
                                      ctx->prov_mac};
    return e;
}

/* (Re-)initialises the ChaCha20 state: key (NULL: keep it) and the 16-byte IV. */
static int
crypt_chacha20_init(const struct crypt_chacha20_engine *e, const uint8_t *key, const uint8_t iv[16])
{
    if (e->prov != NULL) {
        return e->prov->cipher_init(e->prov_cipher, key, CRYPT_KEY_BYTES, iv, 16, NULL) == 1
                   ? CRYPT_OK
                   : CRYPT_EFAIL;
    }
    return EVP_EncryptInit_ex2(e->evp_cipher, NULL, key, iv, NULL) == 1 ? CRYPT_OK : CRYPT_EFAIL;
}

static int crypt_chacha20_update(const struct crypt_chacha20_engine *e,
                                 const uint8_t *in,
                                 uint8_t *out,
                                 size_t len)
{
    if (e->prov != NULL) {
        size_t out_len = 0;
        return e->prov->cipher_update(e->prov_cipher, out, &out_len, len, in, len) == 1 &&
                       out_len == len
                   ? CRYPT_OK
                   : CRYPT_EFAIL;
    }
    return crypt_cipher_update(e->evp_cipher, in, out, len);
}

/* ChaCha20 with the sqleet counter rule. key NULL keeps the state's key. Splits at the
 * 2^32 block boundary. */
static int crypt_chacha20_stream(const struct crypt_chacha20_engine *e,
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
        int rc = crypt_chacha20_init(e, key, iv);
        if (rc != CRYPT_OK) {
            return rc;
        }
        key = NULL; /* the state keeps it across the wrap */
        for (size_t done = 0; done < piece;) {
            size_t slice = piece - done;
            slice = slice < CRYPT_CHACHA20_SLICE_BYTES ? slice : CRYPT_CHACHA20_SLICE_BYTES;
            rc = crypt_chacha20_update(e, in + done, out + done, slice);
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

/* Poly1305 of msg under key. OpenSSL 3.0's AVX-512/AVX2 Poly1305 takes ~1.7x as long for
 * a message leaving 64..127 bytes past a multiple of 128 (a 4096-byte page's 4080 MACed
 * bytes leave 112) as for one that does not: ~800 against ~470 ns on the benchmark
 * machine. Fed as the multiple of 128 and then the rest, the rest is a few blocks of
 * scalar code. The tag is the same, Poly1305 being defined over the concatenation
 * (tests/test_crypto.c checks every split against one call). */
static int crypt_chacha20_poly1305(const struct crypt_chacha20_engine *e,
                                   const uint8_t key[32],
                                   const uint8_t *msg,
                                   size_t len,
                                   uint8_t tag[16])
{
    size_t tag_len = 0;
    size_t head = len & ~(size_t)(CRYPT_POLY1305_CHUNK_BYTES - 1);
    if (e->prov != NULL) {
        const struct crypt_provider *p = e->prov;
        if (p->mac_init(e->prov_mac, key, 32, NULL) != 1 ||
            (head > 0 && p->mac_update(e->prov_mac, msg, head) != 1) ||
            (len > head && p->mac_update(e->prov_mac, msg + head, len - head) != 1) ||
            p->mac_final(e->prov_mac, tag, &tag_len, 16) != 1 || tag_len != 16) {
            return CRYPT_EFAIL;
        }
        return CRYPT_OK;
    }
    if (EVP_MAC_init(e->evp_mac, key, 32, NULL) != 1 ||
        (head > 0 && EVP_MAC_update(e->evp_mac, msg, head) != 1) ||
        (len > head && EVP_MAC_update(e->evp_mac, msg + head, len - head) != 1) ||
        EVP_MAC_final(e->evp_mac, tag, &tag_len, 16) != 1 || tag_len != 16) {
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
    const struct crypt_chacha20_engine e = {c, NULL, NULL, NULL, NULL};
    rc = crypt_chacha20_stream(&e, key, counter, nonce, in, out, len);
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
    const struct crypt_chacha20_engine e = {NULL, mac, NULL, NULL, NULL};
    rc = crypt_chacha20_poly1305(&e, key, msg, len, tag);
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
    const struct crypt_provider *prov = crypt_provider();
    if (prov != NULL) {
        ctx->prov = prov; /* first, so crypt_ctx_free() frees what was made */
        ctx->prov_cipher = prov->cipher_newctx(prov->cipher_provctx);
        ctx->prov_mac = prov->mac_newctx(prov->mac_provctx);
        if (ctx->prov_cipher == NULL || ctx->prov_mac == NULL) {
            return CRYPT_ENOMEM;
        }
    }
    return CRYPT_OK;
}

/* One 64-byte ChaCha20 keystream block (RFC 8439 2.3: 32-bit block counter, 96-bit nonce)
 * from libsodium, which takes key, nonce and counter in one call with no context to set up
 * (see the notes at the top). Encrypting 64 zero bytes yields the block itself. */
static int crypt_chacha20_block(const uint8_t key[32],
                                uint32_t counter,
                                const uint8_t nonce[12],
                                uint8_t out[CRYPT_CHACHA20_BLOCK_BYTES])
{
    static const uint8_t zeros[CRYPT_CHACHA20_BLOCK_BYTES];
    _Static_assert(crypto_stream_chacha20_ietf_KEYBYTES == 32, "a 256-bit key");
    _Static_assert(crypto_stream_chacha20_ietf_NONCEBYTES == 12, "a 96-bit nonce");
    return crypto_stream_chacha20_ietf_xor_ic(out, zeros, sizeof zeros, nonce, counter, key) == 0
               ? CRYPT_OK
               : CRYPT_EFAIL;
}

/* The one-time key a reader derives from a page's stored nonce (one block: no counter wrap
 * inside it), and the counter its
 * data keystream starts at. */
static int crypt_chacha20_otk(const crypt_ctx *ctx,
                              uint32_t pgno,
                              const uint8_t nonce[CRYPT_CHACHA20_NONCE_BYTES],
                              uint8_t otk[CRYPT_OTK_BYTES],
                              uint32_t *data_counter)
{
    uint32_t counter = crypt_get_le32(nonce + 12) ^ pgno;
    *data_counter = counter + 1u; /* modulo 2^32, as sqleet */
    return crypt_chacha20_block(ctx->key, counter, nonce, otk);
}

int crypt_chacha20_otk_pool_fill(crypt_ctx *ctx, const uint8_t seed[16])
{
    const size_t bytes = (size_t)CRYPT_OTK_POOL_KEYS * CRYPT_OTK_BYTES;
    ctx->otk_pool_used = CRYPT_OTK_POOL_KEYS; /* empty until filled */
    if (ctx->otk_pool == NULL) {
        ctx->otk_pool = malloc(bytes);
        if (ctx->otk_pool == NULL) {
            return CRYPT_ENOMEM;
        }
    }
    memcpy(ctx->otk_pool_nonce, seed, sizeof ctx->otk_pool_nonce);
    ctx->otk_pool_counter = crypt_get_le32(seed + 12);
    memset(ctx->otk_pool, 0, bytes); /* keystream XOR zeros = the keystream */
    const struct crypt_chacha20_engine e = crypt_chacha20_engine_of(ctx);
    int rc = crypt_chacha20_stream(&e, ctx->key, ctx->otk_pool_counter, ctx->otk_pool_nonce,
                                   ctx->otk_pool, ctx->otk_pool, bytes);
    if (rc != CRYPT_OK) {
        crypt_wipe(ctx->otk_pool, bytes);
        return rc;
    }
    ctx->otk_pool_used = 0;
    ctx->otk_pool_generation = crypt_fork_generation();
    return CRYPT_OK;
}

/* The next one-time key from the pool (refilled when used up or filled before a fork()),
 * the nonce that makes a reader of page pgno derive that key, and the counter the page's
 * data keystream starts at. The key stays in the pool: the caller wipes it after use. */
static int crypt_chacha20_next_otk(crypt_ctx *ctx,
                                   uint32_t pgno,
                                   uint8_t nonce[CRYPT_CHACHA20_NONCE_BYTES],
                                   uint8_t **otk,
                                   uint32_t *data_counter)
{
    if (ctx->otk_pool_used >= CRYPT_OTK_POOL_KEYS ||
        ctx->otk_pool_generation != crypt_fork_generation()) {
        uint8_t seed[16];
        int rc = crypt_ctx_nonce(ctx, seed);
        if (rc == CRYPT_OK) {
            rc = crypt_chacha20_otk_pool_fill(ctx, seed);
        }
        crypt_wipe(seed, sizeof seed);
        if (rc != CRYPT_OK) {
            return rc;
        }
    }
    uint32_t counter = ctx->otk_pool_counter + ctx->otk_pool_used; /* modulo 2^32, as sqleet */
    *otk = ctx->otk_pool + (size_t)ctx->otk_pool_used * CRYPT_OTK_BYTES;
    ctx->otk_pool_used++;
    memcpy(nonce, ctx->otk_pool_nonce, sizeof ctx->otk_pool_nonce);
    crypt_put_le32(nonce + 12, counter ^ pgno);
    *data_counter = counter + 1u;
    return CRYPT_OK;
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
    uint8_t nonce[CRYPT_CHACHA20_NONCE_BYTES];
    uint8_t *otk = NULL;
    uint32_t data_counter = 0;
    int rc = crypt_chacha20_next_otk(ctx, pgno, nonce, &otk, &data_counter);
    if (rc != CRYPT_OK) {
        return rc;
    }
    /* The keystream runs on over the 32 reserve bytes (nonce and tag overwrite them
     * below): OpenSSL then gets whole 64-byte blocks, and a trailing partial block costs
     * it a separate keystream call (~0.1 us of a 4 KiB page's ~1.7). */
    const struct crypt_chacha20_engine e = crypt_chacha20_engine_of(ctx);
    rc = crypt_chacha20_stream(&e, otk + 32, data_counter, nonce, plain + off, out + off,
                               page_size - off);
    if (rc != CRYPT_OK) {
        goto cleanup;
    }
    memcpy(out + n, nonce, CRYPT_CHACHA20_NONCE_BYTES);
    if (off > 0) {
        memcpy(out, ctx->salt, CRYPT_SALT_BYTES);
        memcpy(out + CRYPT_SALT_BYTES, plain + CRYPT_SALT_BYTES, off - CRYPT_SALT_BYTES);
    }
    rc = crypt_chacha20_poly1305(&e, otk, out, n + CRYPT_CHACHA20_NONCE_BYTES,
                                 out + n + CRYPT_CHACHA20_NONCE_BYTES);
cleanup:
    crypt_wipe(otk, CRYPT_OTK_BYTES); /* used once */
    return rc;
}

/* Derives the one-time key of a stored page (nonce in its reserve) and checks the tag over
 * the stored bytes. The key stays in otk for the caller, who wipes it. CRYPT_OK,
 * CRYPT_EAUTH (nothing else happened) or CRYPT_EFAIL. */
static int crypt_chacha20_check(crypt_ctx *ctx,
                                uint32_t pgno,
                                const uint8_t *page,
                                uint32_t page_size,
                                uint8_t otk[CRYPT_OTK_BYTES],
                                uint32_t *data_counter)
{
    const size_t n = (size_t)page_size - CRYPT_CHACHA20_RESERVE;
    uint8_t tag[CRYPT_CHACHA20_TAG_BYTES];
    int rc = crypt_chacha20_otk(ctx, pgno, page + n, otk, data_counter);
    if (rc == CRYPT_OK) {
        const struct crypt_chacha20_engine e = crypt_chacha20_engine_of(ctx);
        rc = crypt_chacha20_poly1305(&e, otk, page, n + CRYPT_CHACHA20_NONCE_BYTES, tag);
    }
    if (rc == CRYPT_OK &&
        crypt_memcmp_ct(tag, page + n + CRYPT_CHACHA20_NONCE_BYTES, sizeof tag) != 0) {
        rc = CRYPT_EAUTH;
    }
    return rc;
}

static int crypt_chacha20_authenticate(
    crypt_ctx *ctx, uint32_t pgno, const uint8_t *page, uint32_t page_size, unsigned flags)
{
    (void)flags; /* page 1's tag covers its salt as stored, like any other page's bytes */
    uint8_t otk[CRYPT_OTK_BYTES];
    uint32_t data_counter = 0;
    int rc = crypt_chacha20_check(ctx, pgno, page, page_size, otk, &data_counter);
    crypt_wipe(otk, sizeof otk);
    return rc;
}

static int crypt_chacha20_decrypt(
    crypt_ctx *ctx, uint32_t pgno, uint8_t *page, uint32_t page_size, unsigned flags)
{
    const size_t n = (size_t)page_size - CRYPT_CHACHA20_RESERVE;
    const size_t off = (flags & CRYPT_PAGE_DB_HEADER) ? CRYPT_PAGE1_OFFSET : 0;
    uint8_t reserve[CRYPT_CHACHA20_RESERVE]; /* nonce || tag, kept across the decryption */
    uint8_t otk[CRYPT_OTK_BYTES];
    uint32_t data_counter = 0;
    memcpy(reserve, page + n, sizeof reserve);
    int rc = crypt_chacha20_check(ctx, pgno, page, page_size, otk, &data_counter);
    if (rc != CRYPT_OK) {
        goto cleanup; /* nothing written yet */
    }
    /* Whole blocks, as in crypt_chacha20_encrypt(); the reserve bytes are put back. */
    const struct crypt_chacha20_engine e = crypt_chacha20_engine_of(ctx);
    rc = crypt_chacha20_stream(&e, otk + 32, data_counter, reserve, page + off, page + off,
                               page_size - off);
    memcpy(page + n, reserve, sizeof reserve);
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
    .authenticate = crypt_chacha20_authenticate,
};
