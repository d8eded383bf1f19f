/*
 * crypt_internal.h -- what the files of src/crypto share and nothing above them sees.
 *
 * IMPLEMENTATION NOTES
 *   - Every cipher is a descriptor (struct crypt_cipher_desc): its reserve, its default KDF
 *     iteration count and four functions. crypt_ctx.c validates arguments and dispatches;
 *     crypt_chacha20.c, crypt_aes256cbc.c and crypt_sqlcipher.c only do their cipher.
 *   - struct crypt_ctx holds everything any cipher needs; a cipher uses the fields it
 *     needs and leaves the others zero / NULL. crypt_ctx_free() frees what is not NULL.
 *   - Nonces and IVs come from RAND_bytes() through a per-context pool (crypt_ctx_nonce):
 *     one RAND_bytes() call costs about as much as encrypting a 4 KiB page, whatever its
 *     length, so the pool asks for CRYPT_NONCE_POOL_BYTES at a time. A fork() empties
 *     every pool (crypt_fork_generation), so parent and child never share a nonce.
 */
#ifndef MV_CRYPT_INTERNAL_H
#define MV_CRYPT_INTERNAL_H

#include "crypto/crypt.h"

#include <openssl/core_dispatch.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/provider.h>

#define CRYPT_NONCE_BYTES      16   /* chacha20 nonce and sqlcipher IV alike */
#define CRYPT_NONCE_POOL_BYTES 1024 /* 64 nonces per RAND_bytes() call */
#define CRYPT_OTK_POOL_KEYS    64   /* chacha20 one-time keys per keystream call */
#define CRYPT_OTK_BYTES        64   /* one ChaCha20 block */
#define CRYPT_AES_BLOCK_BYTES  16
#define CRYPT_SQLITE_MAGIC     "SQLite format 3" /* 15 chars + NUL = 16 bytes */

_Static_assert(sizeof(CRYPT_SQLITE_MAGIC) == CRYPT_SALT_BYTES, "magic fills bytes 0..15");
_Static_assert(CRYPT_NONCE_POOL_BYTES % CRYPT_NONCE_BYTES == 0, "pool holds whole nonces");
_Static_assert(CRYPT_CHACHA20_NONCE_BYTES == CRYPT_NONCE_BYTES, "one nonce size");
_Static_assert(CRYPT_SQLCIPHER_IV_BYTES == CRYPT_NONCE_BYTES, "one nonce size");

/* The algorithms, fetched once per process by crypt_init(). */
struct crypt_algs {
    EVP_CIPHER *chacha20;
    EVP_CIPHER *aes256cbc;
    EVP_CIPHER *aes256cbc_cts;
    EVP_MAC *poly1305;
    EVP_MAC *hmac;
    EVP_MD *sha256;
    EVP_MD *sha512;
    EVP_MD *md5;
    EVP_KDF *pbkdf2;
};

/* PBKDF2-HMAC-SHA256 on the SHA-256 block function (crypt_kdf_sha256.c): what
 * crypt_pbkdf2_sha256() runs, without EVP_KDF's allocations per iteration. Only where
 * libcrypto has its deprecated SHA-256 functions. Returns CRYPT_OK, CRYPT_EINVAL (as
 * crypt_pbkdf2_sha256) or CRYPT_EFAIL; out is cleansed on failure. */
#ifndef OPENSSL_NO_DEPRECATED_3_0
#define CRYPT_KDF_SHA256_FAST 1
int crypt_kdf_sha256_pbkdf2(const uint8_t *pass,
                            size_t pass_len,
                            const uint8_t *salt,
                            size_t salt_len,
                            uint32_t iter,
                            uint8_t *out,
                            size_t out_len);
#endif

/* The fetched algorithms; only valid after crypt_init() returned CRYPT_OK. */
const struct crypt_algs *crypt_algs(void);

/* Incremented in the child of every fork(); a nonce pool filled under another value is
 * stale. */
uint32_t crypt_fork_generation(void);

/* A secret after parsing (FORMAT.md §1.3). pass points into the caller's secret. */
struct crypt_secret {
    const uint8_t *pass; /* passphrase (NULL for a raw key) */
    size_t pass_len;
    int is_raw;
    int has_raw_salt;
    uint8_t raw_key[CRYPT_KEY_BYTES];
    uint8_t raw_salt[CRYPT_SALT_BYTES];
};

/* Sorts a secret into passphrase or raw key (+ salt). CRYPT_OK or CRYPT_EINVAL (empty,
 * longer than CRYPT_PASSPHRASE_MAX). Raw material lands in *out: crypt_secret_wipe() it. */
int crypt_secret_parse(const uint8_t *secret, size_t secret_len, struct crypt_secret *out);
void crypt_secret_wipe(struct crypt_secret *secret);

struct crypt_ctx {
    const struct crypt_cipher_desc *desc;
    uint32_t kdf_iter;
    int legacy;
    uint8_t salt[CRYPT_SALT_BYTES];
    uint8_t key[CRYPT_KEY_BYTES];
    uint8_t hmac_key[CRYPT_KEY_BYTES]; /* sqlcipher only */
    EVP_CIPHER_CTX *enc;               /* chacha20 stream / CBC encrypt */
    EVP_CIPHER_CTX *dec;               /* CBC decrypt */
    EVP_CIPHER_CTX *cts_enc;           /* sqlcipher page 1: CBC-CTS (CS3) */
    EVP_CIPHER_CTX *cts_dec;
    EVP_MAC_CTX *mac; /* Poly1305 (re-keyed per page) / HMAC-SHA512 (keyed once) */
    EVP_MD_CTX *md;   /* aes256cbc page key and IV */
    /* chacha20's per-page ChaCha20 and Poly1305 through the provider's functions
     * (crypt_provider.c); prov NULL: through enc and mac. */
    const struct crypt_provider *prov;
    void *prov_cipher;
    void *prov_mac;
    uint32_t nonce_pool_generation;
    uint32_t nonce_pool_used_bytes; /* == CRYPT_NONCE_POOL_BYTES: empty */
    uint8_t nonce_pool[CRYPT_NONCE_POOL_BYTES];
    /* chacha20 page encryption (crypt_chacha20.c): CRYPT_OTK_POOL_KEYS one-time keys, the
     * consecutive keystream blocks of the master key from block counter otk_pool_counter
     * under otk_pool_nonce; allocated at the first page encryption (readers never do). */
    uint8_t *otk_pool;
    uint32_t otk_pool_generation;
    uint32_t otk_pool_used; /* == CRYPT_OTK_POOL_KEYS: empty */
    uint32_t otk_pool_counter;
    uint8_t otk_pool_nonce[12];
};

/* A cipher's row in the registry (crypt_registry.c), the one place each fact about it is
 * written: its identifier, name, reserve bytes, KDF default, and its functions. */
struct crypt_cipher_desc {
    int cipher;
    const char *name; /* as PRAGMA cipher spells it */
    uint32_t reserve_bytes;
    uint32_t kdf_iter_default;
    /* Sets ctx->key (and hmac_key) from the secret and ctx->salt, ctx->kdf_iter. */
    int (*derive)(crypt_ctx *ctx, const struct crypt_secret *secret);
    /* Allocates and keys the OpenSSL state from ctx->key (after derive, or in a clone). */
    int (*open)(crypt_ctx *ctx);
    /* Arguments already checked by crypt_ctx.c: page size, pgno, flags, reserve. */
    int (*encrypt)(crypt_ctx *ctx,
                   uint32_t pgno,
                   const uint8_t *plain,
                   uint8_t *out,
                   uint32_t page_size,
                   unsigned flags);
    int (*decrypt)(
        crypt_ctx *ctx, uint32_t pgno, uint8_t *page, uint32_t page_size, unsigned flags);
    /* The tag check alone (crypt_page_authenticate); NULL: the cipher has none. */
    int (*authenticate)(
        crypt_ctx *ctx, uint32_t pgno, const uint8_t *page, uint32_t page_size, unsigned flags);
};

extern const struct crypt_cipher_desc crypt_chacha20_desc;
extern const struct crypt_cipher_desc crypt_aes256cbc_desc;
extern const struct crypt_cipher_desc crypt_sqlcipher_desc;

/* The registry's row of cipher (enum crypt_cipher), or NULL (crypt_registry.c). */
const struct crypt_cipher_desc *crypt_cipher_desc_of(int cipher);

/* Next 16 random bytes for a nonce / IV from the context's pool. CRYPT_OK or CRYPT_EFAIL. */
int crypt_ctx_nonce(crypt_ctx *ctx, uint8_t nonce[CRYPT_NONCE_BYTES]);

/* Fills ctx's chacha20 one-time-key pool from seed: nonce seed[0..12], first block counter
 * LE32(seed[12..16]). Page encryption calls it with 16 random bytes; tests with chosen
 * ones (the counter wrap). CRYPT_OK, CRYPT_ENOMEM or CRYPT_EFAIL. */
int crypt_chacha20_otk_pool_fill(crypt_ctx *ctx, const uint8_t seed[16]);

/* ChaCha20 and Poly1305 functions of the provider EVP fetched them from (crypt_provider.c):
 * per-page re-keying without EVP's parameter queries. */
struct crypt_provider {
    void *cipher_provctx;
    OSSL_FUNC_cipher_newctx_fn *cipher_newctx;
    OSSL_FUNC_cipher_freectx_fn *cipher_freectx;
    OSSL_FUNC_cipher_encrypt_init_fn *cipher_init;
    OSSL_FUNC_cipher_update_fn *cipher_update;
    void *mac_provctx;
    OSSL_FUNC_mac_newctx_fn *mac_newctx;
    OSSL_FUNC_mac_freectx_fn *mac_freectx;
    OSSL_FUNC_mac_init_fn *mac_init;
    OSSL_FUNC_mac_update_fn *mac_update;
    OSSL_FUNC_mac_final_fn *mac_final;
};

/* Resolves the functions from a's ChaCha20 and Poly1305 (crypt_init, once). */
void crypt_provider_resolve(const struct crypt_algs *a);
/* The resolved functions, or NULL (not found, or disabled): then EVP. */
const struct crypt_provider *crypt_provider(void);
/* on 0: contexts created from now on use EVP (tests run both paths); on 1: the default. */
void crypt_provider_enable(int on);

/* One EVP_CipherUpdate() call that must turn len bytes into exactly len bytes. */
int crypt_cipher_update(EVP_CIPHER_CTX *c, const uint8_t *in, uint8_t *out, size_t len);

static inline void crypt_put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t crypt_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#endif /* MV_CRYPT_INTERNAL_H */
