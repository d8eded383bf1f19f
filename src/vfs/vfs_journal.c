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

#include <string.h>

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

static const uint8_t mv_journal_magic[8] = {0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7};

/* Authenticates the record at rec (page number, page image) into the codec's scratch. */
static int
mv_journal_record_ok(struct mv_file *f, sqlite3_int64 rec, uint32_t page_size, uint32_t *pgno)
{
    struct mv_codec *c = f->codec;
    uint8_t field[4];
    if (f->lower->pMethods->xRead(f->lower, field, 4, rec) != SQLITE_OK ||
        f->lower->pMethods->xRead(f->lower, c->scratch, (int)page_size, rec + 4) != SQLITE_OK) {
        return 1; /* short: SQLite ends the playback here by itself */
    }
    *pgno = mv_get_be32(field);
    return *pgno == 0 || crypt_page_decrypt(c->crypt, *pgno, c->scratch, page_size,
                                            *pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0) == CRYPT_OK;
}

/* The database size in pages that page 1 (plaintext) records, or 0 if that field is not
 * valid (its version-valid-for number differs from the change counter). */
static uint32_t mv_journal_header_pages(const uint8_t *page1)
{
    return memcmp(page1 + 24, page1 + 92, 4) == 0 ? mv_get_be32(page1 + 28) : 0;
}

/* The current database's page 1, authenticated, into the codec's scratch; its size too. */
static int mv_journal_db_page1(struct mv_file *f, sqlite3_int64 *db_size)
{
    struct mv_codec *c = f->codec;
    sqlite3_file *db = c->main_file != NULL ? c->main_file->lower : NULL;
    if (db == NULL || db->pMethods->xFileSize(db, db_size) != SQLITE_OK ||
        db->pMethods->xRead(db, c->scratch, (int)c->page_size, 0) != SQLITE_OK) {
        return 0;
    }
    return crypt_page_decrypt(c->crypt, 1, c->scratch, c->page_size, CRYPT_PAGE_DB_HEADER) ==
           CRYPT_OK;
}

/* The header's page size and original database size are plain, so they are checked against
 * authenticated bytes: a forged header must not truncate the database.
 *   (1) the page size must be the database's;
 *   (2) a journal with no record cannot have changed pages that existed, so it may shrink
 *       the database only if the database was empty before: the first transaction of a new
 *       file, whose page 1 (authenticated) shows at most one commit (change counter <= 1);
 *   (3) with records, the original size must be what page 1 said before the transaction:
 *       the journal's copy of page 1 if it saved one, else page 1 as it is (unchanged, or
 *       it would have been journaled). */
static int mv_journal_check_header(struct mv_file *f,
                                   const uint8_t first_hdr[28],
                                   uint32_t records,
                                   int saw_page1,
                                   uint32_t page1_pages)
{
    struct mv_codec *c = f->codec;
    uint32_t original = mv_get_be32(first_hdr + 16);
    sqlite3_int64 db_size = 0;
    int have_db_page1 = !saw_page1 && mv_journal_db_page1(f, &db_size);
    uint32_t expected = saw_page1       ? page1_pages
                        : have_db_page1 ? mv_journal_header_pages(c->scratch)
                                        : 0;
    const char *why = NULL;
    int first_txn = original == 0 && have_db_page1 && mv_get_be32(c->scratch + 24) <= 1;
    if (records == 0 && !first_txn && c->main_file != NULL &&
        c->main_file->lower->pMethods->xFileSize(c->main_file->lower, &db_size) == SQLITE_OK &&
        (sqlite3_int64)original * c->page_size < db_size) {
        why = "it saved no page yet would shrink the database";
    } else if (records > 0 && expected != 0 && original != expected) {
        why = "its original database size does not match the database's page 1";
    }
    if (why == NULL) {
        return SQLITE_OK;
    }
    mv_codec_set_error(c,
                       "the rollback journal's header was altered (%s): the database and the "
                       "journal were left untouched",
                       why);
    return SQLITE_IOERR_DATA;
}

/* Before SQLite rolls back a journal it did not write, every record is authenticated and
 * the header is checked against them. SQLite truncates the database to its original size
 * before it reads the first record, so a damaged journal found record by record would
 * already have changed the database; found here, the rollback never starts and no byte
 * changes. Records a journal header counts were synced before the database was touched,
 * so any failure among them is damage; only in no-sync journals (count 0xffffffff) may the
 * last record be torn. */
static int mv_journal_validate(struct mv_file *f)
{
    struct mv_codec *c = f->codec;
    uint32_t page_size = c->page_size, records = 0, page1_pages = 0;
    int saw_page1 = 0;
    uint8_t first_hdr[28];
    sqlite3_int64 size, hdr_off = 0;
    if (f->lower->pMethods->xFileSize(f->lower, &size) != SQLITE_OK ||
        mv_codec_scratch(c, page_size) != SQLITE_OK) {
        return SQLITE_OK;
    }
    for (;;) {
        uint8_t hdr[28];
        if (hdr_off + 28 > size ||
            f->lower->pMethods->xRead(f->lower, hdr, 28, hdr_off) != SQLITE_OK ||
            memcmp(hdr, mv_journal_magic, 8) != 0) {
            break;
        }
        uint32_t count = mv_get_be32(hdr + 8), sector = mv_get_be32(hdr + 20);
        if (hdr_off == 0) {
            memcpy(first_hdr, hdr, sizeof first_hdr);
        }
        if (sector < 32 || sector > 65536 || mv_get_be32(hdr + 24) != page_size) {
            mv_codec_set_error(c,
                               "the rollback journal's header was altered (page size %u, "
                               "sector size %u): the database and the journal were left "
                               "untouched",
                               mv_get_be32(hdr + 24), sector);
            return SQLITE_IOERR_DATA;
        }
        sqlite3_int64 rec = hdr_off + sector, rec_size = (sqlite3_int64)page_size + 8;
        int no_sync = count == 0xffffffffu;
        if (no_sync) {
            count = (uint32_t)((size - rec) / rec_size);
        }
        for (uint32_t i = 0; i < count && rec + rec_size <= size; i++, rec += rec_size) {
            uint32_t pgno = 0;
            if (!mv_journal_record_ok(f, rec, page_size, &pgno)) {
                if (no_sync && i + 1 == count) {
                    break;
                }
                mv_codec_set_error(c,
                                   "the rollback journal's copy of page %u (record %u) failed "
                                   "authentication: the journal is damaged or was tampered "
                                   "with; the database and the journal were left untouched",
                                   pgno, i + 1);
                return SQLITE_IOERR_DATA;
            }
            records += pgno != 0;
            if (pgno == 1 && !saw_page1) {
                saw_page1 = 1;
                page1_pages = mv_journal_header_pages(c->scratch);
            }
        }
        hdr_off = ((rec - 1) / sector + 1) * sector;
    }
    return hdr_off == 0 ? SQLITE_OK
                        : mv_journal_check_header(f, first_hdr, records, saw_page1, page1_pages);
}

int mv_journal_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off)
{
    if (off == 0 && amt == 8 && !f->journal_written && !f->journal_validated &&
        mv_journal_active(f)) {
        f->journal_validated = 1;
        int rc = mv_journal_validate(f);
        if (rc != SQLITE_OK) {
            return rc;
        }
    }
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
    f->journal_written = 1;
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
