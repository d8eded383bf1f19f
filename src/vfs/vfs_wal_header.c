/*
 * vfs_wal_header.c -- a WAL whose header recovery refuses, looked at before SQLite ignores it.
 *
 * SQLite's recovery reads the WAL's 32-byte header first, and if its magic, version, page
 * size or checksum is wrong it treats the WAL as empty. That is right for a header torn
 * while the WAL was being restarted: a restart comes only after every frame was
 * checkpointed. It is wrong for a header damaged afterwards: every committed transaction
 * still only in the WAL is dropped without a word, and the next write restarts the WAL over
 * them. (A probe: one flipped bit anywhere in those 32 bytes, the open succeeded and 40 of
 * 50 committed rows were gone.)
 *
 * So when recovery reads a header it will refuse, the frames are looked at: the run from
 * frame 1 that carries frame 1's salts and whose pages authenticate under the key (nobody
 * without the key can make such a frame), up to its last commit frame. If the database
 * file already holds the newest committed version of each of their pages (compared as
 * plaintext: a checkpoint may have encrypted a page again), nothing is lost and SQLite may
 * ignore the WAL. Otherwise the header is rebuilt from frame 1: every field but the
 * checkpoint sequence is known (magic, version, the page size, the salts frame 1 repeats),
 * the checksum frame 1 chained from can be computed back out of frame 1, and the sequence
 * solved from it (sqlite_format.h, mv_wal_header_rebuild()). If every frame up to the last
 * commit chains under the rebuilt header, recovery is handed that header instead of the
 * damaged one and keeps the commits; only the read's result changes, nothing is written
 * (the damaged bytes stay on disk until SQLite restarts the WAL after a checkpoint, or the
 * last connection's checkpoint removes it). If the rebuilt header does not carry the frames
 * to their last commit (more damage than the header), the read fails with
 * SQLITE_IOERR_DATA (MV_ECORRUPT) and a message saying what the WAL holds, and nothing is
 * written: the frames stay for whoever repairs the store. A read that fails here fails the
 * recovery too (it cannot be decided).
 *
 * Only when the header is refused, so it costs nothing on any other open.
 */
#include "vfs/db_error.h"
#include "vfs/vfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mv_wal_version {
    uint32_t pgno;
    uint32_t frame_no; /* 1-based */
};

/* By page number, the newest frame first. */
static int mv_wal_version_cmp(const void *a, const void *b)
{
    const struct mv_wal_version *x = a, *y = b;
    if (x->pgno != y->pgno) {
        return x->pgno < y->pgno ? -1 : 1;
    }
    return x->frame_no > y->frame_no ? -1 : x->frame_no < y->frame_no;
}

struct mv_wal_look {
    struct mv_file *wal;
    struct mv_codec *c;
    uint32_t page_size;
    uint32_t frame_bytes;
    uint8_t *frame; /* header + page */
    uint8_t *page;  /* a page of the database, then a decrypted copy */
    uint8_t *plain; /* a frame's page decrypted */
};

static int mv_wal_look_frame(struct mv_wal_look *l, uint32_t n)
{
    sqlite3_int64 off = (sqlite3_int64)mv_wal_frame_offset(n, l->page_size);
    return l->wal->lower->pMethods->xRead(l->wal->lower, l->frame, (int)l->frame_bytes, off);
}

/* Whether frame's page authenticates under the key; *plain gets it decrypted. */
static int mv_wal_look_authentic(struct mv_wal_look *l, uint32_t pgno)
{
    memcpy(l->plain, l->frame + MV_WAL_FRAME_HEADER_BYTES, l->page_size);
    return crypt_page_decrypt(l->c->crypt, pgno, l->plain, l->page_size,
                              pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0) == CRYPT_OK;
}

/* 1 if the database file holds what frame (already in l->frame, its page decrypted in
 * l->plain) holds for pgno, 0 if not, or an SQLite error for a read the device failed. */
static int mv_wal_look_in_database(struct mv_wal_look *l, uint32_t pgno)
{
    sqlite3_file *db = l->c->main_file->lower;
    sqlite3_int64 off = (sqlite3_int64)(pgno - 1) * l->page_size;
    int rc = db->pMethods->xRead(db, l->page, (int)l->page_size, off);
    if (rc == SQLITE_IOERR_SHORT_READ) {
        return 0; /* the database does not reach that page */
    }
    if (rc != SQLITE_OK) {
        return rc;
    }
    if (memcmp(l->page, l->frame + MV_WAL_FRAME_HEADER_BYTES, l->page_size) == 0) {
        return 1; /* checkpointed as it was (the usual case: ciphertext copied) */
    }
    if (crypt_page_decrypt(l->c->crypt, pgno, l->page, l->page_size,
                           pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0) != CRYPT_OK) {
        return 0;
    }
    uint32_t reserve = crypt_reserve_bytes(crypt_ctx_cipher(l->c->crypt));
    return memcmp(l->page, l->plain, l->page_size - reserve) == 0;
}

/* The newest committed version of each page of the run [1, commit] that the database
 * lacks: their count (0: none), or a negative SQLite error code. */
static int64_t mv_wal_look_lacking(struct mv_wal_look *l, const uint32_t *pgnos, uint32_t commit)
{
    struct mv_wal_version *v = malloc((size_t)commit * sizeof *v);
    if (v == NULL) {
        return -SQLITE_NOMEM;
    }
    for (uint32_t i = 0; i < commit; i++) {
        v[i] = (struct mv_wal_version){pgnos[i], i + 1};
    }
    qsort(v, commit, sizeof *v, mv_wal_version_cmp);
    int64_t lacking = 0;
    for (uint32_t i = 0; i < commit; i++) {
        if (i > 0 && v[i].pgno == v[i - 1].pgno) {
            continue; /* an older version of the page before */
        }
        int rc = mv_wal_look_frame(l, v[i].frame_no);
        int held = rc != SQLITE_OK ? rc
                   /* it authenticated a moment ago: the file changed, count it as lacking */
                   : !mv_wal_look_authentic(l, v[i].pgno) ? 0
                                                          : mv_wal_look_in_database(l, v[i].pgno);
        if (held != 0 && held != 1) {
            lacking = -(int64_t)held;
            break;
        }
        lacking += held == 0;
    }
    free(v);
    return lacking;
}

/* The run of genuine frames from frame 1 (frame 1's salts, pages that authenticate): each
 * frame's page number into pgnos, and the last commit frame in it (0: none). A read the
 * device failed is its SQLite error code. */
static int
mv_wal_look_run(struct mv_wal_look *l, uint32_t frames, uint32_t *pgnos, uint32_t *commit)
{
    uint8_t salts[8];
    *commit = 0;
    for (uint32_t n = 1; n <= frames; n++) {
        int rc = mv_wal_look_frame(l, n);
        if (rc == SQLITE_IOERR_SHORT_READ) {
            break;
        }
        if (rc != SQLITE_OK) {
            return rc;
        }
        uint32_t pgno = mv_get_be32(l->frame);
        if (n == 1) {
            memcpy(salts, l->frame + 8, sizeof salts);
        }
        if (pgno == 0 || memcmp(salts, l->frame + 8, sizeof salts) != 0 ||
            !mv_wal_look_authentic(l, pgno)) {
            break;
        }
        pgnos[n - 1] = pgno;
        if (mv_get_be32(l->frame + 4) != 0) {
            *commit = n; /* a commit frame: its header holds the database size */
        }
    }
    return SQLITE_OK;
}

/* A header that makes recovery keep every frame up to commit: rebuilt from frame 1 (see
 * mv_wal_header_rebuild()), in either byte order, and accepted only if each frame after
 * frame 1 up to commit chains from the one before under it, as recovery will check. */
static int
mv_wal_look_rebuild(struct mv_wal_look *l, uint32_t commit, uint8_t out[MV_WAL_HEADER_BYTES])
{
    for (int big_endian = 0; big_endian <= 1; big_endian++) {
        uint8_t hdr[MV_WAL_HEADER_BYTES];
        struct mv_wal_header parsed;
        if (mv_wal_look_frame(l, 1) != SQLITE_OK ||
            !mv_wal_header_rebuild(l->frame, l->page_size, big_endian, hdr) ||
            !mv_wal_header_parse(hdr, &parsed)) {
            continue;
        }
        uint32_t seed[2] = {parsed.checksum[0], parsed.checksum[1]};
        uint32_t n = 1;
        for (; n <= commit; n++) {
            if (mv_wal_look_frame(l, n) != SQLITE_OK ||
                !mv_wal_frame_chains(l->frame, l->page_size, &parsed, seed)) {
                break;
            }
            mv_wal_frame_stored_checksum(l->frame, seed);
        }
        if (n > commit) {
            memcpy(out, hdr, MV_WAL_HEADER_BYTES);
            return 1;
        }
    }
    return 0;
}

int mv_wal_header_check(struct mv_file *f, uint8_t hdr[MV_WAL_HEADER_BYTES])
{
    struct mv_wal_header parsed;
    struct mv_codec *c = f->codec;
    if (mv_wal_header_parse(hdr, &parsed) || c->crypt == NULL || c->main_file == NULL ||
        c->page_size == 0) {
        return SQLITE_OK; /* recovery takes the header, or there is nothing to judge by */
    }
    struct mv_wal_look l = {f,    c,    c->page_size, c->page_size + MV_WAL_FRAME_HEADER_BYTES,
                            NULL, NULL, NULL};
    sqlite3_int64 size = 0;
    int rc = f->lower->pMethods->xFileSize(f->lower, &size);
    if (rc != SQLITE_OK || size < (sqlite3_int64)(MV_WAL_HEADER_BYTES + l.frame_bytes)) {
        return rc; /* no whole frame: nothing to lose */
    }
    uint64_t frames = ((uint64_t)size - MV_WAL_HEADER_BYTES) / l.frame_bytes;
    if (frames > UINT32_MAX) {
        frames = UINT32_MAX; /* SQLite's frame numbers are 32-bit */
    }
    uint32_t *pgnos = malloc((size_t)frames * sizeof *pgnos);
    l.frame = malloc(l.frame_bytes);
    l.page = malloc(l.page_size);
    l.plain = malloc(l.page_size);
    uint32_t commit = 0;
    int64_t lacking = 0;
    rc = pgnos == NULL || l.frame == NULL || l.page == NULL || l.plain == NULL
             ? SQLITE_NOMEM
             : mv_wal_look_run(&l, (uint32_t)frames, pgnos, &commit);
    int rebuilt = 0;
    if (rc == SQLITE_OK && commit > 0) {
        lacking = mv_wal_look_lacking(&l, pgnos, commit);
        rc = lacking < 0 ? (int)-lacking : SQLITE_OK;
    }
    if (rc == SQLITE_OK && lacking > 0) {
        rebuilt = mv_wal_look_rebuild(&l, commit, hdr);
    }
    if (l.plain != NULL) {
        crypt_wipe(l.plain, l.page_size);
    }
    if (l.page != NULL) {
        crypt_wipe(l.page, l.page_size);
    }
    free(l.plain);
    free(l.page);
    free(l.frame);
    free(pgnos);
    if (rc == SQLITE_OK && lacking > 0 && !rebuilt) {
        mv_codec_set_error(c,
                           "the WAL's header is damaged, and its %u committed frames hold %lld "
                           "pages the database lacks: SQLite would drop them; the WAL was left "
                           "untouched (copy the store's files aside before repairing it)",
                           commit, (long long)lacking);
        rc = SQLITE_IOERR_DATA;
    }
    return rc;
}

int mv_db_wal_header_damaged(sqlite3 *db, char *detail, size_t detail_size)
{
    sqlite3_file *p = NULL;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &p) != SQLITE_OK ||
        p == NULL || !mv_vfs_file_is_ours(p)) {
        return 0; /* no WAL open (or not ours) */
    }
    struct mv_file *f = (struct mv_file *)p;
    uint8_t hdr[MV_WAL_HEADER_BYTES], on_disk[MV_WAL_HEADER_BYTES];
    if (f->kind != MV_FILE_WAL ||
        f->lower->pMethods->xRead(f->lower, hdr, MV_WAL_HEADER_BYTES, 0) != SQLITE_OK) {
        return 0;
    }
    memcpy(on_disk, hdr, sizeof hdr);
    int rc = mv_wal_header_check(f, hdr);
    if (rc == SQLITE_IOERR_DATA) {
        snprintf(detail, detail_size, "%s", f->codec->errmsg);
        return 1;
    }
    if (rc == SQLITE_OK && memcmp(on_disk, hdr, sizeof hdr) != 0) {
        snprintf(detail, detail_size,
                 "the WAL's header is damaged: SQLite alone would drop the commits in the WAL; "
                 "they are read through a header rebuilt from its frames until a checkpoint "
                 "empties the WAL (mailvault maintain)");
        return 1;
    }
    return 0;
}
