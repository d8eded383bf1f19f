/*
 * crypt_secret.c -- sorts a secret into a passphrase or a raw key, in SQLite3MC's syntax
 * (FORMAT.md §1.3).
 *
 *   x'<64 hex>'          exactly 67 bytes: raw 32-byte key
 *   x'<96 hex>'          exactly 99 bytes: raw key, then the 16-byte salt
 *   raw:<32 bytes>       binary key
 *   raw:<48 bytes>       binary key + salt
 *   raw:<64 hex>         hex key
 *   raw:<96 hex>         hex key + salt
 *   anything else        a passphrase, used byte for byte (no terminating NUL)
 *
 * A form that almost matches (a non-hex digit, a missing quote, another length) is a
 * passphrase, as in SQLite3MC: no secret is refused for its shape, only for being empty
 * or longer than CRYPT_PASSPHRASE_MAX.
 */
#include "crypto/crypt_internal.h"

#include <string.h>

#define CRYPT_SECRET_HEX_KEY      ((size_t)2 * CRYPT_KEY_BYTES)
#define CRYPT_SECRET_HEX_KEY_SALT ((size_t)2 * (CRYPT_KEY_BYTES + CRYPT_SALT_BYTES))

static int crypt_secret_hex_digit(uint8_t c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Decodes 2*n hex digits into out; 0 on success, -1 (out wiped) on a non-hex digit. */
static int crypt_secret_hex_decode(const uint8_t *hex, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = crypt_secret_hex_digit(hex[2 * i]);
        int lo = crypt_secret_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            crypt_wipe(out, n);
            return -1;
        }
        out[i] = (uint8_t)((hi << 4) | lo);
    }
    return 0;
}

/* Key (+ salt if hex_len says so) from hex digits into *out; 0 if they are all hex. */
static int crypt_secret_take_hex(const uint8_t *hex, size_t hex_len, struct crypt_secret *out)
{
    uint8_t bytes[CRYPT_KEY_BYTES + CRYPT_SALT_BYTES];
    size_t n = hex_len / 2;
    if (crypt_secret_hex_decode(hex, n, bytes) != 0) {
        return -1;
    }
    memcpy(out->raw_key, bytes, CRYPT_KEY_BYTES);
    if (n > CRYPT_KEY_BYTES) {
        memcpy(out->raw_salt, bytes + CRYPT_KEY_BYTES, CRYPT_SALT_BYTES);
        out->has_raw_salt = 1;
    }
    crypt_wipe(bytes, sizeof bytes);
    out->is_raw = 1;
    return 0;
}

static int crypt_secret_take_raw_prefix(const uint8_t *body, size_t len, struct crypt_secret *out)
{
    if (len == CRYPT_KEY_BYTES || len == CRYPT_KEY_BYTES + CRYPT_SALT_BYTES) {
        memcpy(out->raw_key, body, CRYPT_KEY_BYTES);
        if (len > CRYPT_KEY_BYTES) {
            memcpy(out->raw_salt, body + CRYPT_KEY_BYTES, CRYPT_SALT_BYTES);
            out->has_raw_salt = 1;
        }
        out->is_raw = 1;
        return 0;
    }
    if (len == CRYPT_SECRET_HEX_KEY || len == CRYPT_SECRET_HEX_KEY_SALT) {
        return crypt_secret_take_hex(body, len, out);
    }
    return -1;
}

int crypt_secret_parse(const uint8_t *secret, size_t secret_len, struct crypt_secret *out)
{
    memset(out, 0, sizeof *out);
    if (secret == NULL || secret_len == 0 || secret_len > CRYPT_PASSPHRASE_MAX) {
        return CRYPT_EINVAL;
    }
    size_t hex_len = secret_len >= 3 ? secret_len - 3 : 0; /* x' ... ' */
    /* (1) x' prefix, (2) closing quote, (3) 64 or 96 digits between. */
    if (secret_len >= 3 && secret[0] == 'x' && secret[1] == '\'' &&
        secret[secret_len - 1] == '\'' &&
        (hex_len == CRYPT_SECRET_HEX_KEY || hex_len == CRYPT_SECRET_HEX_KEY_SALT) &&
        crypt_secret_take_hex(secret + 2, hex_len, out) == 0) {
        return CRYPT_OK;
    }
    /* Byte by byte: the lint bans memcmp() on secrets. */
    if (secret_len > 4 && secret[0] == 'r' && secret[1] == 'a' && secret[2] == 'w' &&
        secret[3] == ':' && crypt_secret_take_raw_prefix(secret + 4, secret_len - 4, out) == 0) {
        return CRYPT_OK;
    }
    out->pass = secret;
    out->pass_len = secret_len;
    return CRYPT_OK;
}

void crypt_secret_wipe(struct crypt_secret *secret)
{
    crypt_wipe(secret, sizeof *secret);
}
