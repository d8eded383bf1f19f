/*
 * vfs_codec.c -- the per-database codec: key, page size, scratch buffer and last error,
 * shared (by reference count) between a main file and its journal and WAL.
 */
#include "vfs/vfs.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mv_codec *mv_codec_new(void)
{
    struct mv_codec *c = calloc(1, sizeof *c);
    if (c != NULL) {
        c->refs = 1;
        c->key_state = MV_KEY_NONE;
    }
    return c;
}

void mv_codec_release(struct mv_codec *c)
{
    if (c == NULL || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0) {
        return;
    }
    crypt_ctx_free(c->crypt);
    if (c->scratch != NULL) {
        /* The scratch buffer held plaintext pages on their way in or out. */
        crypt_wipe(c->scratch, c->scratch_size);
        free(c->scratch);
    }
    if (c->ckpt_pages != NULL) {
        crypt_wipe(c->ckpt_pages, 2 * (size_t)c->ckpt_page_size); /* plaintext half */
        free(c->ckpt_pages);
    }
    crypt_wipe(c, sizeof *c);
    free(c);
}

int mv_codec_scratch(struct mv_codec *c, uint32_t size)
{
    if (c->scratch_size >= size) {
        return SQLITE_OK;
    }
    uint8_t *p = malloc(size);
    if (p == NULL) {
        return SQLITE_NOMEM;
    }
    if (c->scratch != NULL) {
        crypt_wipe(c->scratch, c->scratch_size);
        free(c->scratch);
    }
    c->scratch = p;
    c->scratch_size = size;
    return SQLITE_OK;
}

void mv_codec_set_error(struct mv_codec *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
}

int mv_codec_write_blocked(const struct mv_codec *c)
{
    if (c == NULL) {
        return 0;
    }
    /* (1) a key that page 1 rejected, or (2) an encrypted file nobody gave a key for. */
    return c->key_state == MV_KEY_REJECTED || (c->encrypted_on_disk && c->crypt == NULL);
}

int mv_codec_encrypt(
    struct mv_codec *c, uint32_t pgno, const uint8_t *in, uint8_t *out, uint32_t page_size)
{
    unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
    int rc = crypt_page_encrypt(c->crypt, pgno, in, out, page_size, flags);
    if (rc == CRYPT_OK) {
        return SQLITE_OK;
    }
    mv_codec_set_error(c, "cannot encrypt page %u (page size %u)", pgno, page_size);
    return rc == CRYPT_ENOMEM ? SQLITE_NOMEM : SQLITE_IOERR_WRITE;
}

int mv_codec_decrypt(struct mv_codec *c, uint32_t pgno, uint8_t *page, uint32_t page_size)
{
    unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
    int rc = crypt_page_decrypt(c->crypt, pgno, page, page_size, flags);
    if (rc == CRYPT_OK) {
        return SQLITE_OK;
    }
    if (rc == CRYPT_EAUTH) {
        return SQLITE_IOERR_DATA;
    }
    mv_codec_set_error(c, "cannot decrypt page %u (page size %u)", pgno, page_size);
    return rc == CRYPT_ENOMEM ? SQLITE_NOMEM : SQLITE_IOERR_READ;
}

int mv_codec_authenticate(struct mv_codec *c,
                          uint32_t pgno,
                          const uint8_t *page,
                          uint32_t page_size)
{
    unsigned flags = pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0;
    int rc = crypt_page_authenticate(c->crypt, pgno, page, page_size, flags);
    if (rc == CRYPT_OK) {
        return SQLITE_OK;
    }
    if (rc == CRYPT_EAUTH) {
        return SQLITE_IOERR_DATA;
    }
    mv_codec_set_error(c, "cannot check page %u (page size %u)", pgno, page_size);
    return rc == CRYPT_ENOMEM ? SQLITE_NOMEM : SQLITE_IOERR_READ;
}
