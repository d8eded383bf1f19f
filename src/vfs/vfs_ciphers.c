/*
 * vfs_ciphers.c -- the public cipher names (mv_cipher_name, mv_cipher_from_name), answered
 * from the cipher registry in src/crypto, and the compile-time asserts that tie the public
 * enum mv_cipher and MV_KDF_ITER_MAX to it: the VFS is the lowest layer that sees both.
 */
#include "vfs/vfs.h"

#include <strings.h>

_Static_assert((int)MV_CIPHER_CHACHA20 == CRYPT_CIPHER_CHACHA20, "mv_cipher = crypt_cipher");
_Static_assert((int)MV_CIPHER_AES256CBC == CRYPT_CIPHER_AES256CBC, "mv_cipher = crypt_cipher");
_Static_assert((int)MV_CIPHER_SQLCIPHER == CRYPT_CIPHER_SQLCIPHER, "mv_cipher = crypt_cipher");
_Static_assert((int)MV_CIPHER_AUTO == 0 && (int)MV_CIPHER_NONE == CRYPT_CIPHER_COUNT + 1,
               "the ciphers are exactly the registry's, between AUTO and NONE");
_Static_assert(MV_KDF_ITER_MAX == CRYPT_KDF_ITER_MAX, "one KDF iteration limit");

const char *mv_cipher_name(mv_cipher cipher)
{
    if (cipher == MV_CIPHER_AUTO) {
        return "auto";
    }
    if (cipher == MV_CIPHER_NONE) {
        return "none";
    }
    return crypt_cipher_name((int)cipher);
}

int mv_cipher_from_name(const char *name, mv_cipher *cipher_out)
{
    if (name == NULL) {
        return MV_EINVAL;
    }
    int cipher = crypt_cipher_by_name(name);
    if (cipher == 0 && strcasecmp(name, "auto") == 0) {
        cipher = MV_CIPHER_AUTO;
    } else if (cipher == 0 && strcasecmp(name, "none") == 0) {
        cipher = MV_CIPHER_NONE;
    } else if (cipher == 0) {
        return MV_EINVAL;
    }
    *cipher_out = (mv_cipher)cipher;
    return MV_OK;
}
