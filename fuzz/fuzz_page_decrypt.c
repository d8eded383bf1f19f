/*
 * fuzz_page_decrypt.c -- feeds arbitrary pages to crypt_page_decrypt() of every cipher, and
 * round-trips the same bytes through crypt_page_encrypt() / crypt_page_decrypt().
 *
 * INPUT
 *   byte 0      cipher: 0 chacha20, 1 aes256cbc, 2 sqlcipher, 3 sqlcipher legacy=4
 *   byte 1      page size: 512 << (b % 8), so 512..65536
 *   bytes 2..5  pgno, little-endian (0 is allowed: must be refused)
 *   byte 6      flags: bit 0 CRYPT_PAGE_DB_HEADER; bit 1 set: the whole byte is passed
 *               as flags (unknown bits must be refused)
 *   bytes 7..   the page, zero-padded or truncated to the page size
 *
 * CHECKS (abort() on failure)
 *   - decrypt returns OK, EAUTH or EINVAL; on EAUTH the buffer is unchanged;
 *   - encrypt then decrypt gives back every byte outside the reserve (page 1: the magic in
 *     0..15), except an aes256cbc page 1 whose bytes 16..23 are not a valid header, which
 *     must fail with EAUTH.
 *
 * The contexts are made once, under raw keys (chacha20, sqlcipher) or a passphrase
 * (aes256cbc, whose KDF is fixed), with a fixed salt. Corpus: fuzz/corpus/page_decrypt,
 * made by fuzz/make_corpus_page_decrypt.py.
 */
#include "crypto/crypt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_HEADER_BYTES 7
#define FUZZ_CTX_COUNT    4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fuzz_raw_key[] =
    "x'404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f'";

static crypt_ctx *fuzz_ctx[FUZZ_CTX_COUNT];
static uint8_t fuzz_page[CRYPT_PAGE_SIZE_MAX];
static uint8_t fuzz_work[CRYPT_PAGE_SIZE_MAX];
static uint8_t fuzz_enc[CRYPT_PAGE_SIZE_MAX];

static void fuzz_setup(void)
{
    static const struct crypt_params params[FUZZ_CTX_COUNT] = {
        {CRYPT_CIPHER_CHACHA20, 0, 0},
        {CRYPT_CIPHER_AES256CBC, 0, 0},
        {CRYPT_CIPHER_SQLCIPHER, 0, 0},
        {CRYPT_CIPHER_SQLCIPHER, 0, 4},
    };
    uint8_t salt[CRYPT_SALT_BYTES];
    memset(salt, 0x11, sizeof salt);
    for (int i = 0; i < FUZZ_CTX_COUNT; i++) {
        int aes = params[i].cipher == CRYPT_CIPHER_AES256CBC;
        const char *secret = aes ? "fuzz" : fuzz_raw_key;
        if (crypt_ctx_create(&params[i], (const uint8_t *)secret, strlen(secret), salt,
                             &fuzz_ctx[i]) != CRYPT_OK) {
            abort();
        }
    }
}

/* Decrypting garbage: any answer but a crash, and EAUTH leaves the buffer alone. */
static void fuzz_decrypt(crypt_ctx *ctx, uint32_t pgno, uint32_t page_size, unsigned flags)
{
    memcpy(fuzz_work, fuzz_page, page_size);
    int rc = crypt_page_decrypt(ctx, pgno, fuzz_work, page_size, flags);
    if (rc != CRYPT_OK && rc != CRYPT_EAUTH && rc != CRYPT_EINVAL) {
        abort();
    }
    if (rc == CRYPT_EAUTH && memcmp(fuzz_work, fuzz_page, page_size) != 0) {
        abort();
    }
}

static int fuzz_aes_header_valid(const uint8_t *hdr)
{
    uint32_t size = ((uint32_t)hdr[0] << 8) | hdr[1];
    size = size == 1 ? 65536 : size;
    return size >= 512 && (size & (size - 1)) == 0 && hdr[5] == 0x40 && hdr[6] == 0x20 &&
           hdr[7] == 0x20;
}

static void fuzz_round_trip(crypt_ctx *ctx, uint32_t pgno, uint32_t page_size, unsigned flags)
{
    int rc = crypt_page_encrypt(ctx, pgno, fuzz_page, fuzz_enc, page_size, flags);
    if (rc == CRYPT_EINVAL) {
        return; /* refused arguments: decrypt refused them too (fuzz_decrypt) */
    }
    if (rc != CRYPT_OK) {
        abort();
    }
    rc = crypt_page_decrypt(ctx, pgno, fuzz_enc, page_size, flags);
    int cipher = crypt_ctx_cipher(ctx);
    int header = (flags & CRYPT_PAGE_DB_HEADER) != 0;
    if (cipher == CRYPT_CIPHER_AES256CBC && header && !fuzz_aes_header_valid(fuzz_page + 16)) {
        if (rc != CRYPT_EAUTH) {
            abort();
        }
        return;
    }
    if (rc != CRYPT_OK) {
        abort();
    }
    uint32_t data = page_size - crypt_reserve_bytes(cipher);
    uint32_t from = header ? CRYPT_SALT_BYTES : 0;
    if (memcmp(fuzz_enc + from, fuzz_page + from, data - from) != 0 ||
        (header && memcmp(fuzz_enc, "SQLite format 3", CRYPT_SALT_BYTES) != 0)) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_ctx[0] == NULL) {
        fuzz_setup();
    }
    if (size < FUZZ_HEADER_BYTES) {
        return 0;
    }
    crypt_ctx *ctx = fuzz_ctx[data[0] % FUZZ_CTX_COUNT];
    uint32_t page_size = (uint32_t)CRYPT_PAGE_SIZE_MIN << (data[1] % 8);
    uint32_t pgno = (uint32_t)data[2] | ((uint32_t)data[3] << 8) | ((uint32_t)data[4] << 16) |
                    ((uint32_t)data[5] << 24);
    unsigned flags = (data[6] & 2) ? data[6] : (data[6] & CRYPT_PAGE_DB_HEADER);
    size_t body = size - FUZZ_HEADER_BYTES;
    body = body < page_size ? body : page_size;
    memset(fuzz_page, 0, page_size);
    memcpy(fuzz_page, data + FUZZ_HEADER_BYTES, body);
    fuzz_decrypt(ctx, pgno, page_size, flags);
    fuzz_round_trip(ctx, pgno, page_size, flags);
    return 0;
}
