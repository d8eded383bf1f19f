/*
 * vfs_journal.c -- the rollback journal of an encrypted database.
 *
 * A journal record is a 4-byte big-endian page number, the page image, and a 4-byte
 * checksum. As in SQLite3 Multiple Ciphers, only the page image is encrypted, with the
 * codec of the database and the record's own page number; the journal header, the page
 * numbers and the checksums (which SQLite computes over the plaintext) stay as SQLite wrote
 * them. That keeps a hot journal left by either implementation recoverable by the other.
 *
 * IMPLEMENTATION NOTES
 *   SQLite always accesses a record's page-number field (4 bytes) right before its page
 *   image (page_size bytes at the next offset), both when writing and during rollback. So
 *   the file remembers the last 4-byte access and where it was; a page-sized access right
 *   after it is a page image. A 4-byte access that ends a page image is that record's
 *   checksum, never a page number: this keeps a journal header that happens to be exactly
 *   one page long (sector size = page size) from being mistaken for a page image.
 */
#include "vfs/vfs.h"

static int mv_journal_active(const struct mv_file *f)
{
    return f->codec != NULL && f->codec->crypt != NULL && f->codec->key_state == MV_KEY_OK &&
           f->codec->page_size != 0;
}

/* Notes a 4-byte access: a page number unless it directly follows a page image. */
static void mv_journal_note_small(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    if (amt != 4) {
        return;
    }
    if (off == f->record_page_end) {
        f->record_pgno_offset = -1; /* the record's checksum */
        return;
    }
    f->record_pgno_offset = off;
    f->record_pgno = mv_get_be32(buf);
}

static int mv_journal_is_page(const struct mv_file *f, int amt, sqlite3_int64 off)
{
    return mv_journal_active(f) && (uint32_t)amt == f->codec->page_size &&
           f->record_pgno_offset >= 0 && off == f->record_pgno_offset + 4 && f->record_pgno != 0;
}

int mv_journal_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off)
{
    int is_page = mv_journal_is_page(f, amt, off);
    int rc = f->lower->pMethods->xRead(f->lower, buf, amt, off);
    if (rc != SQLITE_OK) {
        return rc;
    }
    if (!is_page) {
        mv_journal_note_small(f, buf, amt, off);
        return SQLITE_OK;
    }
    f->record_page_end = off + amt;
    f->record_pgno_offset = -1;
    uint32_t pgno = f->record_pgno;
    rc = mv_codec_decrypt(f->codec, pgno, buf, (uint32_t)amt);
    if (rc == SQLITE_IOERR_DATA) {
        mv_codec_set_error(f->codec,
                           "the rollback journal's copy of page %u failed authentication: the "
                           "journal is damaged or was tampered with; it was left untouched",
                           pgno);
    }
    return rc;
}

int mv_journal_write(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    struct mv_codec *c = f->codec;
    if (mv_codec_write_blocked(c)) {
        return SQLITE_READONLY;
    }
    if (!mv_journal_is_page(f, amt, off)) {
        mv_journal_note_small(f, buf, amt, off);
        return f->lower->pMethods->xWrite(f->lower, buf, amt, off);
    }
    f->record_page_end = off + amt;
    f->record_pgno_offset = -1;
    int rc = mv_codec_scratch(c, (uint32_t)amt);
    if (rc == SQLITE_OK) {
        rc = mv_codec_encrypt(c, f->record_pgno, buf, c->scratch, (uint32_t)amt);
    }
    if (rc == SQLITE_OK) {
        rc = f->lower->pMethods->xWrite(f->lower, c->scratch, amt, off);
    }
    return rc;
}
