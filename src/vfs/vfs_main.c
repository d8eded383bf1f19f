/*
 * vfs_main.c -- reads and writes of the main database file.
 *
 * A page-sized, page-aligned access is page number offset / page_size + 1: a write is
 * encrypted into the codec's scratch buffer (never in SQLite's buffer) and a read is
 * authenticated, then decrypted in place. Any other read (the 16-byte change counter at
 * offset 24, a 100-byte header read after keying) decrypts the pages it touches and returns
 * the slice. Before a key is given, reads are raw: SQLite then sees no "SQLite format 3"
 * magic and reports SQLITE_NOTADB, and writes are refused.
 *
 * LIMITATIONS
 *   - The page size of an encrypted database cannot change (VACUUM with a new page_size is
 *     refused), as in SQLite3 Multiple Ciphers.
 */
#include "vfs/vfs.h"

#include <errno.h>
#include <string.h>

static int mv_all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc |= p[i];
    }
    return acc == 0;
}

/* The page size, from the codec or, the first time, from the plain header on disk. */
static uint32_t mv_main_page_size(struct mv_file *f)
{
    struct mv_codec *c = f->codec;
    if (c->page_size == 0) {
        uint8_t hdr[24];
        if (f->lower->pMethods->xRead(f->lower, hdr, 24, 0) == SQLITE_OK) {
            c->page_size = mv_header_page_size(hdr);
        }
    }
    return c->page_size;
}

/* Reads and decrypts page pgno into buf. SQLITE_IOERR_SHORT_READ (buf zeroed) past the end
 * of the file; SQLITE_IOERR_DATA with a message naming the page if it does not
 * authenticate, except page 1, which is returned raw so that SQLite reports NOTADB. */
static int mv_main_read_page(struct mv_file *f, uint8_t *buf, uint32_t page_size, uint32_t pgno)
{
    struct mv_codec *c = f->codec;
    sqlite3_int64 off = (sqlite3_int64)(pgno - 1) * page_size;
    int rc = mv_main_read_held(f, pgno, page_size, buf) /* a hinted chain's (vfs_read_ahead.c) */
                 ? SQLITE_OK
                 : f->lower->pMethods->xRead(f->lower, buf, (int)page_size, off);
    if (rc == SQLITE_IOERR_SHORT_READ) {
        if (mv_all_zero(buf, page_size)) {
            return rc;
        }
        mv_codec_set_error(c, "page %u is truncated: the file is damaged", pgno);
        return SQLITE_IOERR_DATA;
    }
    if (rc != SQLITE_OK) {
        /* The system's reason, for a one-line message that blames the device, not the data
         * (SQLite's own text is "disk I/O error" for any failed call). */
        int e = errno;
        mv_codec_set_error(c, "cannot read page %u: %s", pgno, e != 0 ? strerror(e) : "I/O error");
        return rc;
    }
    rc = mv_codec_decrypt(c, pgno, buf, page_size);
    if (rc == SQLITE_IOERR_DATA) {
        if (pgno == 1) {
            mv_codec_set_error(c, "page 1 failed authentication: wrong password, or not a "
                                  "mailvault/SQLite3MC database");
            return SQLITE_OK;
        }
        mv_codec_set_error(c,
                           "page %u failed authentication: the file is damaged or was "
                           "tampered with",
                           pgno);
    }
    return rc;
}

static int mv_main_read_partial(
    struct mv_file *f, uint8_t *buf, int amt, sqlite3_int64 off, uint32_t page_size)
{
    struct mv_codec *c = f->codec;
    int rc = mv_codec_scratch(c, page_size);
    if (rc != SQLITE_OK) {
        return rc;
    }
    int short_read = 0;
    sqlite3_int64 end = off + amt;
    if (f->run.hinted != 0) { /* SQLite reads an overflow page's content alone, too */
        mv_main_read_hinted(f, (uint32_t)(off / page_size) + 1, page_size);
    }
    while (off < end) {
        uint32_t pgno = (uint32_t)(off / page_size) + 1;
        sqlite3_int64 page_off = (sqlite3_int64)(pgno - 1) * page_size;
        size_t skip = (size_t)(off - page_off);
        size_t take = page_size - skip;
        if ((sqlite3_int64)take > end - off) {
            take = (size_t)(end - off);
        }
        rc = mv_main_read_page(f, c->scratch, page_size, pgno);
        if (rc == SQLITE_IOERR_SHORT_READ) {
            short_read = 1;
        } else if (rc != SQLITE_OK) {
            return rc;
        }
        memcpy(buf, c->scratch + skip, take);
        buf += take;
        off += (sqlite3_int64)take;
    }
    return short_read ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

int mv_main_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off)
{
    struct mv_codec *c = f->codec;
    if (c->crypt == NULL || c->key_state != MV_KEY_OK) {
        return f->lower->pMethods->xRead(f->lower, buf, amt, off);
    }
    uint32_t page_size = mv_main_page_size(f);
    if (page_size == 0) {
        /* A new file that has no page yet: nothing to decrypt. */
        return f->lower->pMethods->xRead(f->lower, buf, amt, off);
    }
    if ((uint32_t)amt == page_size && off % page_size == 0) {
        uint32_t pgno = (uint32_t)(off / page_size) + 1;
        mv_main_read_ahead(f, pgno, page_size); /* descending runs (vfs_read_ahead.c) */
        if (f->run.near != 0) {
            mv_main_read_near(f, pgno, page_size); /* a row's leaf and its chain (vfs_hint.h) */
        }
        return mv_main_read_page(f, buf, page_size, pgno);
    }
    return mv_main_read_partial(f, buf, amt, off, page_size);
}

static int mv_main_check_page1(struct mv_file *f, const uint8_t *page, uint32_t amt)
{
    struct mv_codec *c = f->codec;
    uint32_t need = crypt_reserve_bytes(crypt_ctx_cipher(c->crypt));
    if (amt < CRYPT_PAGE_SIZE_MIN || amt > CRYPT_PAGE_SIZE_MAX || (amt & (amt - 1)) != 0) {
        mv_codec_set_error(c, "refused a write of %u bytes to page 1", amt);
        return SQLITE_IOERR_WRITE;
    }
    if (c->page_size != 0 && c->page_size != amt) {
        mv_codec_set_error(c, "the page size of an encrypted database cannot change (%u to %u)",
                           c->page_size, amt);
        return SQLITE_IOERR_WRITE;
    }
    if (page[20] < need) {
        mv_codec_set_error(c,
                           "page 1 reserves %u bytes per page but the cipher needs %u: set "
                           "SQLITE_FCNTL_RESERVE_BYTES before the first write (mv_db_open "
                           "and the mailvault extension do)",
                           page[20], need);
        return SQLITE_IOERR_WRITE;
    }
    c->page_size = amt;
    return SQLITE_OK;
}

int mv_main_write(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    struct mv_codec *c = f->codec;
    if (mv_codec_write_blocked(c)) {
        mv_codec_set_error(c, "refused to write: the database is encrypted and no valid key "
                              "was given");
        return SQLITE_READONLY;
    }
    if (c->crypt == NULL) {
        return f->lower->pMethods->xWrite(f->lower, buf, amt, off);
    }
    int rc;
    if (off == 0) {
        rc = mv_main_check_page1(f, buf, (uint32_t)amt);
        if (rc != SQLITE_OK) {
            return rc;
        }
    }
    uint32_t page_size = mv_main_page_size(f);
    if (page_size == 0 && amt >= CRYPT_PAGE_SIZE_MIN && amt <= CRYPT_PAGE_SIZE_MAX &&
        (amt & (amt - 1)) == 0 && off % amt == 0) {
        /* A new file whose first transaction spills a page before page 1 exists: SQLite
         * writes only whole pages here, so this is the page size (page 1 confirms it). */
        page_size = c->page_size = (uint32_t)amt;
    }
    if (page_size == 0 || (uint32_t)amt != page_size || off % page_size != 0) {
        mv_codec_set_error(c, "refused a partial-page write of %d bytes at offset %lld", amt,
                           (long long)off);
        return SQLITE_IOERR_WRITE;
    }
    uint32_t pgno = (uint32_t)(off / page_size) + 1;
    /* A checkpoint copying a page from the WAL: the frame's ciphertext is a valid
     * encryption of this page at this page number (the WAL encrypts under the database
     * page number), already authenticated when it was read. */
    const uint8_t *same = NULL;
    int match = mv_codec_ckpt_match(c, pgno, buf, page_size, &same);
    if (match > 0) {
        return f->lower->pMethods->xWrite(f->lower, same, amt, off);
    }
    if (match < 0) {
        mv_codec_set_error(c, "refused to write page %u: a checkpoint copy for another page", pgno);
        return SQLITE_IOERR_WRITE;
    }
    rc = mv_codec_scratch(c, page_size);
    if (rc != SQLITE_OK) {
        return rc;
    }
    rc = mv_codec_encrypt(c, pgno, buf, c->scratch, page_size);
    if (rc != SQLITE_OK) {
        return rc;
    }
    return f->lower->pMethods->xWrite(f->lower, c->scratch, amt, off);
}
