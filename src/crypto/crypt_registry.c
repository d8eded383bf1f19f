/*
 * crypt_registry.c -- the cipher registry: each cipher's descriptor (its identifier, name,
 * reserve bytes, KDF default and functions, defined next to its code) listed once, and
 * every lookup by identifier, name or reserve bytes answered from that list. The VFS (the
 * cipher of a file from its header), the operations (stats, keyless backups) and the
 * public mv_cipher_name() all ask here, so no layer keeps a map of its own.
 */
#include "crypto/crypt_internal.h"

#include <strings.h>

/* Each cipher is recognised from a file's reserve bytes, so no two may share a value. */
_Static_assert(CRYPT_CHACHA20_RESERVE != CRYPT_SQLCIPHER_RESERVE &&
                   CRYPT_CHACHA20_RESERVE != CRYPT_AES256CBC_RESERVE &&
                   CRYPT_SQLCIPHER_RESERVE != CRYPT_AES256CBC_RESERVE,
               "reserve bytes identify a cipher");
_Static_assert(CRYPT_CIPHER_CHACHA20 == 1 && CRYPT_CIPHER_AES256CBC == 2 &&
                   CRYPT_CIPHER_SQLCIPHER == CRYPT_CIPHER_COUNT,
               "identifiers 1..CRYPT_CIPHER_COUNT index the registry");

static const struct crypt_cipher_desc *const crypt_registry[CRYPT_CIPHER_COUNT] = {
    &crypt_chacha20_desc,
    &crypt_aes256cbc_desc,
    &crypt_sqlcipher_desc,
};

const struct crypt_cipher_desc *crypt_cipher_desc_of(int cipher)
{
    if (cipher < 1 || cipher > CRYPT_CIPHER_COUNT) {
        return NULL;
    }
    return crypt_registry[cipher - 1];
}

uint32_t crypt_reserve_bytes(int cipher)
{
    const struct crypt_cipher_desc *d = crypt_cipher_desc_of(cipher);
    return d != NULL ? d->reserve_bytes : 0;
}

const char *crypt_cipher_name(int cipher)
{
    const struct crypt_cipher_desc *d = crypt_cipher_desc_of(cipher);
    return d != NULL ? d->name : NULL;
}

int crypt_cipher_by_name(const char *name)
{
    for (int i = 0; name != NULL && i < CRYPT_CIPHER_COUNT; i++) {
        if (strcasecmp(name, crypt_registry[i]->name) == 0) {
            return crypt_registry[i]->cipher;
        }
    }
    return 0;
}

int crypt_cipher_by_reserve(uint32_t reserve_bytes)
{
    for (int i = 0; i < CRYPT_CIPHER_COUNT; i++) {
        if (crypt_registry[i]->reserve_bytes == reserve_bytes) {
            return crypt_registry[i]->cipher;
        }
    }
    return 0;
}

uint32_t crypt_kdf_iter_default(int cipher)
{
    const struct crypt_cipher_desc *d = crypt_cipher_desc_of(cipher);
    return d != NULL ? d->kdf_iter_default : 0;
}
