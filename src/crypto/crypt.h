/*
 * crypt.h -- page ciphers of SQLite3 Multiple Ciphers, on OpenSSL 3 libcrypto.
 *
 * The crypto layer knows nothing of SQLite: it derives keys and encrypts, decrypts and
 * authenticates one page given a key, a page number and a buffer, in the exact on-disk
 * formats of SQLite3MC's "chacha20", "aes256cbc" and "sqlcipher" ciphers
 * (docs/FORMAT.md; ../shared/docs/cipher-formats.md).
 *
 * USAGE
 *   crypt_ctx *c;
 *   crypt_ctx_create(&params, secret, secret_len, salt_or_NULL, &c);  // runs the KDF once
 *   crypt_page_encrypt(c, pgno, plain, out, page_size, flags);       // out: private buffer
 *   crypt_page_decrypt(c, pgno, page, page_size, flags);             // in place, tag first
 *   crypt_ctx_free(c);                                               // wipes the keys
 *
 * IMPLEMENTATION NOTES
 *   - Algorithms (EVP_CIPHER, EVP_MAC, EVP_MD) are fetched once per process; each context
 *     owns its EVP_*_CTX objects and re-initialises them per page, never re-allocates.
 *   - A context is used by one thread at a time. crypt_ctx_clone() gives another thread (or
 *     another temp file) its own context with the same key.
 *   - ChaCha20 wraps its 32-bit block counter modulo 2^32 without carrying into the nonce,
 *     as sqleet does; OpenSSL carries, so calls are split at the wrap (FORMAT.md §1.4).
 *
 * LIMITATIONS
 *   - Legacy formats: only sqlcipher legacy=4 (real SQLCipher 4, page size 4096). sqleet
 *     legacy=1 and SQLCipher 1..3 are refused (CRYPT_EINVAL).
 *   - chacha20 with reserve 0 ("encrypt only") and plaintext_header_size are not supported.
 */
#ifndef MV_CRYPT_H
#define MV_CRYPT_H

#include <stddef.h>
#include <stdint.h>

#define CRYPT_KEY_BYTES      32
#define CRYPT_SALT_BYTES     16
#define CRYPT_PAGE1_OFFSET   24 /* page-1 bytes 16..23 stay plain; encryption starts here */
#define CRYPT_PAGE_SIZE_MIN  512
#define CRYPT_PAGE_SIZE_MAX  65536
#define CRYPT_PASSPHRASE_MAX 4096 /* bytes; longer secrets are refused */
/* A larger kdf_iter is refused (CRYPT_EINVAL): about a minute of PBKDF2-HMAC-SHA512. The
 * public header says the same as MV_KDF_ITER_MAX (a compile-time assert ties them). */
#define CRYPT_KDF_ITER_MAX 16777216u

#define CRYPT_CHACHA20_NONCE_BYTES 16
#define CRYPT_CHACHA20_TAG_BYTES   16
#define CRYPT_CHACHA20_RESERVE     (CRYPT_CHACHA20_NONCE_BYTES + CRYPT_CHACHA20_TAG_BYTES)
#define CRYPT_SQLCIPHER_IV_BYTES   16
#define CRYPT_SQLCIPHER_HMAC_BYTES 64
#define CRYPT_SQLCIPHER_RESERVE    (CRYPT_SQLCIPHER_IV_BYTES + CRYPT_SQLCIPHER_HMAC_BYTES)
#define CRYPT_AES256CBC_RESERVE    0

#define CRYPT_CHACHA20_KDF_ITER_DEFAULT  64007u
#define CRYPT_SQLCIPHER_KDF_ITER_DEFAULT 256000u
#define CRYPT_AES256CBC_KDF_ROUNDS       4001u /* fixed by the format; kdf_iter is ignored */

/* Cipher identifiers; the numbers equal enum mv_cipher in include/mailvault.h. */
enum crypt_cipher {
    CRYPT_CIPHER_CHACHA20 = 1,
    CRYPT_CIPHER_AES256CBC = 2,
    CRYPT_CIPHER_SQLCIPHER = 3,
};

/* Results. CRYPT_EAUTH is the one a caller must act on: the page is not authentic. */
enum crypt_status {
    CRYPT_OK = 0,
    CRYPT_EAUTH = 1,  /* tag / HMAC mismatch, or aes256cbc page 1 check failed */
    CRYPT_EINVAL = 2, /* bad parameter: page size, legacy mode, malformed raw key ... */
    CRYPT_ENOMEM = 3,
    CRYPT_EFAIL = 4, /* libcrypto failed (never expected) */
};

/* Page flags. */
#define CRYPT_PAGE_DB_HEADER 0x1u /* this is page 1 of a database: salt + plain bytes 16..23 */
/* chacha20 only: page_size may be any multiple of 16 in 512..65536+32 (temp-file blocks of
 * 4096 data bytes + 32 reserve bytes), not just a power of two. */
#define CRYPT_PAGE_ANY_SIZE 0x2u

struct crypt_params {
    int cipher;        /* enum crypt_cipher */
    uint32_t kdf_iter; /* 0: the cipher's default */
    int legacy;        /* 0; or 4 for sqlcipher (real SQLCipher 4) */
};

typedef struct crypt_ctx crypt_ctx;

/* Fetches the algorithms once per process (thread-safe). Returns CRYPT_OK or CRYPT_EFAIL.
 * Every other function calls it; calling it early only moves the cost. */
int crypt_init(void);

/* ---- The cipher registry (crypt_registry.c): every layer asks it, none keeps a copy ---- */

#define CRYPT_CIPHER_COUNT 3 /* identifiers 1..CRYPT_CIPHER_COUNT */

/* Reserve bytes the cipher needs at the end of every page (32, 0 or 80); 0 for unknown. */
uint32_t crypt_reserve_bytes(int cipher);
/* The cipher's name as PRAGMA cipher spells it ("chacha20", ...); NULL for unknown. */
const char *crypt_cipher_name(int cipher);
/* The cipher named name (case-insensitive), or 0. */
int crypt_cipher_by_name(const char *name);
/* The cipher whose pages reserve reserve_bytes (32 chacha20, 0 aes256cbc, 80 sqlcipher),
 * or 0 for any other value: an unknown reserve is never guessed to be some cipher. */
int crypt_cipher_by_reserve(uint32_t reserve_bytes);
/* The KDF iterations a kdf_iter of 0 means for the cipher (aes256cbc: its fixed rounds,
 * which kdf_iter does not change); 0 for unknown. Any cipher takes 1..CRYPT_KDF_ITER_MAX. */
uint32_t crypt_kdf_iter_default(int cipher);

/* Creates a keyed context. secret is a passphrase or a raw key in SQLite3MC's syntax
 * (x'<64 hex>', x'<96 hex>', raw:<32|48 bytes>, raw:<64|96 hex>); see FORMAT.md §1.3.
 * file_salt is the file's 16 salt bytes (offset 0) for an existing file, or NULL for a new
 * file, in which case the salt is the raw key+salt's or 16 random bytes. aes256cbc ignores
 * salts and refuses raw keys. The context keeps no copy of the secret.
 * Returns CRYPT_OK (and *out), CRYPT_EINVAL (unknown cipher, unsupported legacy mode,
 * kdf_iter > CRYPT_KDF_ITER_MAX, empty secret or one longer than CRYPT_PASSPHRASE_MAX, a
 * raw key for aes256cbc), CRYPT_ENOMEM or CRYPT_EFAIL. A secret that only resembles a raw
 * key (bad hex digit, other length) is a passphrase, as in SQLite3MC. */
int crypt_ctx_create(const struct crypt_params *params,
                     const uint8_t *secret,
                     size_t secret_len,
                     const uint8_t *file_salt,
                     crypt_ctx **out);

/* A chacha20 context under a fresh random key and salt (for temporary files). */
int crypt_ctx_create_random(crypt_ctx **out);

/* A new context with the same cipher, keys and salt and its own OpenSSL state. */
int crypt_ctx_clone(const crypt_ctx *src, crypt_ctx **out);

/* Wipes the keys and frees. NULL is a no-op. */
void crypt_ctx_free(crypt_ctx *ctx);

int crypt_ctx_cipher(const crypt_ctx *ctx);
uint32_t crypt_ctx_kdf_iter(const crypt_ctx *ctx);
int crypt_ctx_legacy(const crypt_ctx *ctx);
/* The 16-byte salt written to page 1 (all zero for aes256cbc). Owned by ctx. */
const uint8_t *crypt_ctx_salt(const crypt_ctx *ctx);

/* Encrypts the page_size bytes at plain (page number pgno >= 1) into out (page_size bytes,
 * must not overlap plain). The last crypt_reserve_bytes() bytes of plain are ignored; out
 * receives nonce/IV and tag/HMAC there. With CRYPT_PAGE_DB_HEADER, out[0..16] is the salt
 * (chacha20, sqlcipher) and out[16..24] = plain[16..24], per format.
 * Returns CRYPT_OK, CRYPT_EINVAL (page size not a power of two in 512..65536, pgno 0,
 * CRYPT_PAGE_DB_HEADER with pgno != 1, unknown flags) or CRYPT_EFAIL. */
int crypt_page_encrypt(crypt_ctx *ctx,
                       uint32_t pgno,
                       const uint8_t *plain,
                       uint8_t *out,
                       uint32_t page_size,
                       unsigned flags);

/* Authenticates, then decrypts in place the page_size bytes at page. With
 * CRYPT_PAGE_DB_HEADER on success bytes 0..15 become "SQLite format 3\0".
 * Returns CRYPT_OK; CRYPT_EAUTH if the tag/HMAC does not match (the buffer is then left
 * unchanged, so for page 1 bytes 0..15 are not the SQLite magic); CRYPT_EINVAL; CRYPT_EFAIL. */
int crypt_page_decrypt(
    crypt_ctx *ctx, uint32_t pgno, uint8_t *page, uint32_t page_size, unsigned flags);

/* Checks the page's tag without decrypting it (chacha20: the one-time key and Poly1305 over
 * what is stored, i.e. what crypt_page_decrypt() checks first). For a page that is only
 * copied, never read: a WAL checkpoint. Returns CRYPT_OK, CRYPT_EAUTH, or CRYPT_EINVAL
 * (as crypt_page_decrypt(), and for a cipher without such a check: see
 * crypt_ctx_can_authenticate()). */
int crypt_page_authenticate(
    crypt_ctx *ctx, uint32_t pgno, const uint8_t *page, uint32_t page_size, unsigned flags);
/* Whether crypt_page_authenticate() works for ctx's cipher (chacha20: yes; aes256cbc has
 * no tag; sqlcipher: not implemented, its pages are decrypted to be checked). */
int crypt_ctx_can_authenticate(const crypt_ctx *ctx);

/* Pages decrypted (crypt_page_decrypt() calls) by this process so far: for tests that
 * show a path no longer decrypts. */
uint64_t crypt_pages_decrypted(void);

/* ---- Primitives, exposed for known-answer tests ------------------------------------------ */

/* ChaCha20 (RFC 8439) with the sqleet counter rule: the 32-bit block counter wraps to 0 and
 * the nonce never changes. out may equal in. */
int crypt_chacha20_xor(const uint8_t key[32],
                       uint32_t counter,
                       const uint8_t nonce[12],
                       const uint8_t *in,
                       uint8_t *out,
                       size_t len);

/* Poly1305 one-time authenticator. */
int crypt_poly1305(const uint8_t key[32], const uint8_t *msg, size_t len, uint8_t tag[16]);

/* PBKDF2-HMAC-SHA256 / -SHA512, out_len bytes. */
int crypt_pbkdf2_sha256(const uint8_t *pass,
                        size_t pass_len,
                        const uint8_t *salt,
                        size_t salt_len,
                        uint32_t iter,
                        uint8_t *out,
                        size_t out_len);
int crypt_pbkdf2_sha512(const uint8_t *pass,
                        size_t pass_len,
                        const uint8_t *salt,
                        size_t salt_len,
                        uint32_t iter,
                        uint8_t *out,
                        size_t out_len);

/* The aes256cbc KDF (wxSQLite3: 32-byte padded password, SHA-256, 4001 more rounds). */
int crypt_aes256cbc_kdf(const uint8_t *pass, size_t pass_len, uint8_t key[32]);

/* The aes256cbc per-page IV (MD5 of an LCG sequence seeded with pgno + 1). */
int crypt_aes256cbc_iv(uint32_t pgno, uint8_t iv[16]);

/* The aes256cbc per-page key: SHA256(key || LE32(pgno) || "sAlT"). */
int crypt_aes256cbc_page_key(const uint8_t key[32], uint32_t pgno, uint8_t page_key[32]);

/* Cryptographically secure random bytes. */
int crypt_random(uint8_t *buf, size_t len);

/* Runs a known-answer self-test of every primitive. CRYPT_OK or CRYPT_EFAIL. */
int crypt_selftest(void);

/* Wipes n bytes (OPENSSL_cleanse: not optimised away). */
void crypt_wipe(void *p, size_t n);
/* free(p) of a malloc'd block that held plaintext (a message, its texts): the whole block
 * (malloc_usable_size) is wiped first (sodium_memzero). NULL is fine. */
void crypt_free_wiped(void *p);
/* realloc(p, n) for such a block: never leaves a copy behind (realloc frees a moved block
 * as it is, and a shrink in place leaves the tail in the freed rest), so it always moves to
 * a new block and wipes the old one. NULL (p untouched) when out of memory; n 0 is taken
 * as 1. */
void *crypt_realloc_wiped(void *p, size_t n);

/* Constant-time comparison: 0 if equal. */
int crypt_memcmp_ct(const void *a, const void *b, size_t n);

#endif /* MV_CRYPT_H */
