/*
 * vfs_temp.c -- temporary files (temp database, temp journals, statement sub-journals,
 * VACUUM's scratch database, sorter spills), encrypted under a random key of their own.
 *
 * SQLite3 Multiple Ciphers writes these in plaintext; with temp_store=FILE a large sort or
 * a VACUUM then puts mail on the disk unencrypted. Here each temp file gets a fresh random
 * ChaCha20-Poly1305 key that never leaves memory and is wiped on close.
 *
 * IMPLEMENTATION NOTES
 *   SQLite writes temp files at arbitrary offsets and lengths (a sorter writes partial
 *   blocks, a sub-journal writes 4-byte page numbers next to pages), so the file is cut into
 *   logical blocks of MV_TEMP_BLOCK bytes, each stored as MV_TEMP_BLOCK + 32 bytes: the
 *   chacha20 page format with the block index + 1 as page number, i.e. a fresh nonce and a
 *   Poly1305 tag per store. A temp file is private to one connection and never reopened, so
 *   its logical size lives in memory, and so does its last-used block: temp_block holds one
 *   block's plaintext (temp_cached), which is encrypted and written only when another block
 *   is needed (temp_dirty). SQLite writes a statement journal as a 4-byte page number and
 *   then the page, so each record straddles blocks; patching the block on disk per write
 *   cost three decryptions, encryptions and writes per journalled page (a bulk COPY spent
 *   a third of its time there), the cached block makes it one of each per 4 KiB. Plaintext
 *   stays in memory only (as in SQLite's page cache) and is wiped on close. Invariant: bytes
 *   past the logical size inside the last block are zero.
 *
 * LIMITATIONS
 *   Temp files larger than 2^32 blocks (16 TiB) are refused.
 */
#include "vfs/vfs.h"

#include <stdlib.h>
#include <string.h>

#define MV_TEMP_BLOCK      4096u
#define MV_TEMP_PHYS       (MV_TEMP_BLOCK + CRYPT_CHACHA20_RESERVE)
#define MV_TEMP_BLOCKS_MAX 0xfffffffeull

_Static_assert(MV_TEMP_PHYS == 4128, "temp block layout");

int mv_temp_open(struct mv_file *f)
{
    /* Two blocks: plaintext on the left, ciphertext on the right. */
    f->temp_block = malloc(2 * MV_TEMP_PHYS);
    if (f->temp_block == NULL) {
        return SQLITE_NOMEM;
    }
    int crc = crypt_ctx_create_random(&f->temp_crypt);
    if (crc != CRYPT_OK) {
        return crc == CRYPT_ENOMEM ? SQLITE_NOMEM : SQLITE_IOERR;
    }
    f->temp_size = 0;
    f->temp_cached = -1;
    f->temp_dirty = 0;
    return SQLITE_OK;
}

void mv_temp_close(struct mv_file *f)
{
    crypt_ctx_free(f->temp_crypt);
    f->temp_crypt = NULL;
    if (f->temp_block != NULL) {
        crypt_wipe(f->temp_block, 2 * MV_TEMP_PHYS);
        free(f->temp_block);
        f->temp_block = NULL;
    }
}

static int mv_all_zero_block(const uint8_t *p)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < MV_TEMP_PHYS; i++) {
        acc |= p[i];
    }
    return acc == 0;
}

static int mv_temp_store(struct mv_file *f, uint64_t b)
{
    uint8_t *cipher = f->temp_block + MV_TEMP_PHYS;
    int crc = crypt_page_encrypt(f->temp_crypt, (uint32_t)(b + 1), f->temp_block, cipher,
                                 MV_TEMP_PHYS, CRYPT_PAGE_ANY_SIZE);
    if (crc != CRYPT_OK) {
        /* the first encryption allocates the context's pool of one-time keys: without
         * memory that is SQLITE_NOMEM, not a write the disk failed */
        return crc == CRYPT_ENOMEM ? SQLITE_NOMEM : SQLITE_IOERR_WRITE;
    }
    return f->lower->pMethods->xWrite(f->lower, cipher, MV_TEMP_PHYS,
                                      (sqlite3_int64)(b * MV_TEMP_PHYS));
}

/* Writes the cached block if it changed. */
static int mv_temp_flush(struct mv_file *f)
{
    if (!f->temp_dirty) {
        return SQLITE_OK;
    }
    int rc = mv_temp_store(f, (uint64_t)f->temp_cached);
    if (rc == SQLITE_OK) {
        f->temp_dirty = 0;
    }
    return rc;
}

/* Makes logical block b the cached one (plaintext in f->temp_block), writing out the one
 * cached before if it changed. Blocks never written read as zero; with whole set the caller
 * overwrites all of it, so its old content is not read. */
static int mv_temp_load(struct mv_file *f, uint64_t b, int whole)
{
    if (f->temp_cached == (int64_t)b) {
        return SQLITE_OK;
    }
    int rc = mv_temp_flush(f);
    if (rc != SQLITE_OK) {
        return rc;
    }
    f->temp_cached = -1;
    uint8_t *plain = f->temp_block;
    if (whole || (sqlite3_int64)(b * MV_TEMP_BLOCK) >= f->temp_size) {
        memset(plain, 0, MV_TEMP_PHYS);
        f->temp_cached = (int64_t)b;
        return SQLITE_OK;
    }
    rc =
        f->lower->pMethods->xRead(f->lower, plain, MV_TEMP_PHYS, (sqlite3_int64)(b * MV_TEMP_PHYS));
    if (rc == SQLITE_IOERR_SHORT_READ || (rc == SQLITE_OK && mv_all_zero_block(plain))) {
        memset(plain, 0, MV_TEMP_PHYS); /* a hole: never written */
        f->temp_cached = (int64_t)b;
        return SQLITE_OK;
    }
    if (rc != SQLITE_OK) {
        return rc;
    }
    int crc = crypt_page_decrypt(f->temp_crypt, (uint32_t)(b + 1), plain, MV_TEMP_PHYS,
                                 CRYPT_PAGE_ANY_SIZE);
    if (crc != CRYPT_OK) {
        return crc == CRYPT_ENOMEM ? SQLITE_NOMEM : SQLITE_IOERR_DATA;
    }
    f->temp_cached = (int64_t)b;
    return SQLITE_OK;
}

int mv_temp_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off)
{
    uint8_t *out = buf;
    sqlite3_int64 end = off + amt;
    while (off < end) {
        uint64_t b = (uint64_t)off / MV_TEMP_BLOCK;
        size_t skip = (size_t)((uint64_t)off % MV_TEMP_BLOCK);
        size_t take = MV_TEMP_BLOCK - skip;
        if ((sqlite3_int64)take > end - off) {
            take = (size_t)(end - off);
        }
        if (off >= f->temp_size) {
            memset(out, 0, (size_t)(end - off));
            return SQLITE_IOERR_SHORT_READ;
        }
        int rc = mv_temp_load(f, b, 0);
        if (rc != SQLITE_OK) {
            return rc;
        }
        memcpy(out, f->temp_block + skip, take);
        out += take;
        off += (sqlite3_int64)take;
    }
    return end > f->temp_size ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

int mv_temp_write(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    const uint8_t *in = buf;
    sqlite3_int64 end = off + amt;
    if (off < 0 || (uint64_t)end / MV_TEMP_BLOCK > MV_TEMP_BLOCKS_MAX) {
        return SQLITE_FULL;
    }
    while (off < end) {
        uint64_t b = (uint64_t)off / MV_TEMP_BLOCK;
        size_t skip = (size_t)((uint64_t)off % MV_TEMP_BLOCK);
        size_t take = MV_TEMP_BLOCK - skip;
        if ((sqlite3_int64)take > end - off) {
            take = (size_t)(end - off);
        }
        int rc = mv_temp_load(f, b, take == MV_TEMP_BLOCK);
        if (rc != SQLITE_OK) {
            return rc;
        }
        memcpy(f->temp_block + skip, in, take);
        f->temp_dirty = 1;
        in += take;
        off += (sqlite3_int64)take;
        if (off > f->temp_size) {
            f->temp_size = off;
        }
    }
    return SQLITE_OK;
}

int mv_temp_truncate(struct mv_file *f, sqlite3_int64 size)
{
    if (size < 0) {
        return SQLITE_IOERR_TRUNCATE;
    }
    if (size >= f->temp_size) {
        f->temp_size = size; /* the blocks past the old end read as zero */
        return SQLITE_OK;
    }
    uint64_t b = (uint64_t)size / MV_TEMP_BLOCK;
    size_t keep = (size_t)((uint64_t)size % MV_TEMP_BLOCK);
    uint64_t first_gone = keep != 0 ? b + 1 : b;
    if (f->temp_cached >= 0 && (uint64_t)f->temp_cached >= first_gone) {
        f->temp_cached = -1; /* cut off: nothing of it is needed any more */
        f->temp_dirty = 0;
    }
    if (keep != 0) {
        int rc = mv_temp_load(f, b, 0);
        if (rc != SQLITE_OK) {
            return rc;
        }
        memset(f->temp_block + keep, 0, MV_TEMP_BLOCK - keep);
        f->temp_dirty = 1;
        rc = mv_temp_flush(f);
        if (rc != SQLITE_OK) {
            return rc;
        }
        b++;
    }
    f->temp_size = size;
    return f->lower->pMethods->xTruncate(f->lower, (sqlite3_int64)(b * MV_TEMP_PHYS));
}
