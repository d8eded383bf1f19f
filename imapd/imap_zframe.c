/*
 * imap_zframe.c -- a head and one zstd frame (imap_zframe.h). Every buffer that held the
 * plain bytes (mail's header text) is wiped before it is freed.
 */
#include "imap_zframe.h"

#include "mailvault.h"

#include <stdlib.h>
#include <string.h>
#include <zstd.h>

int imap_zframe_pack(const unsigned char *head,
                     size_t head_len,
                     const unsigned char *plain,
                     size_t plain_len,
                     int level,
                     unsigned char **out,
                     size_t *len)
{
    *out = NULL;
    *len = 0;
    size_t cap = head_len + ZSTD_compressBound(plain_len);
    unsigned char *p = malloc(cap);
    ZSTD_CCtx *z = p != NULL ? ZSTD_createCCtx() : NULL;
    size_t framed = (size_t)-1;
    if (z != NULL) {
        memcpy(p, head, head_len);
        if (!ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, level)) &&
            !ZSTD_isError(ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1))) {
            framed = ZSTD_compress2(z, p + head_len, cap - head_len, plain, plain_len);
        }
    }
    ZSTD_freeCCtx(z);
    if (z == NULL || ZSTD_isError(framed)) {
        if (p != NULL) {
            explicit_bzero(p, cap);
        }
        free(p);
        return MV_ENOMEM;
    }
    *out = p;
    *len = head_len + framed;
    return MV_OK;
}

int imap_zframe_unpack(const unsigned char *at, size_t n, uint64_t plain_len, unsigned char **plain)
{
    *plain = NULL;
    /* one frame, exactly the rest, saying the size it was written with */
    if (ZSTD_findFrameCompressedSize(at, n) != n || ZSTD_getFrameContentSize(at, n) != plain_len ||
        plain_len >= SIZE_MAX) {
        return MV_ECORRUPT;
    }
    unsigned char *p = malloc(plain_len > 0 ? (size_t)plain_len : 1);
    if (p == NULL) {
        return MV_ENOMEM;
    }
    /* the checksum checked: a damaged frame does not decode to other entries */
    size_t got = ZSTD_decompress(p, (size_t)plain_len, at, n);
    if (ZSTD_isError(got) || got != plain_len) {
        explicit_bzero(p, (size_t)plain_len);
        free(p);
        return MV_ECORRUPT;
    }
    *plain = p;
    return MV_OK;
}
