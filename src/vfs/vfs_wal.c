/*
 * vfs_wal.c -- the write-ahead log of an encrypted database, in SQLite3 Multiple Ciphers'
 * current (non-legacy) WAL format: frame pages encrypted, frame checksums over ciphertext.
 *
 * Stock SQLite computes a frame's checksum over the plaintext page it hands us. SQLite3MC
 * patches SQLite to encrypt first, so its checksums cover ciphertext, and WAL recovery on
 * either side drops frames whose checksum does not match. To stay byte-compatible this shim
 * recomputes the checksum chain over ciphertext (FORMAT.md §5.3):
 *
 *   writes  The 24-byte frame header is held back. When the frame's page follows at
 *           offset + 24, the page is encrypted, the chain is continued from the previous
 *           frame's checksum as stored on disk (or the WAL header's for frame 1) over header
 *           bytes 0..7 and the ciphertext, and header + ciphertext go down together (in a
 *           batch of frames, below).
 *           Any other operation first writes a held-back header as it is. A header SQLite
 *           writes right after reading its whole frame while rewriting checksums
 *           (walRewriteChecksums: over the raw frame, i.e. over ciphertext already) goes
 *           down at once: the commit returns after the last one with no further call that
 *           would flush it, and a process killed then would lose the committed transaction
 *           (its commit frame no longer chaining). A page written alone into an existing
 *           frame (an in-place overwrite within one transaction) is encrypted with the page
 *           number of that frame: as this connection recorded it when it wrote the frame
 *           under the same hold of the write lock (no I/O), else from the frame's header on
 *           disk; SQLite rewrites the checksums before the commit.
 *   reads   A page-sized read at a frame's page offset is decrypted with the page number
 *           from the frame header on disk; everything else (header, whole frames read by
 *           recovery, checksum fields) is returned raw, so SQLite verifies ciphertext.
 *           Whole frames read by recovery are also authenticated, so that damage in the
 *           middle of a WAL is an error instead of a silent loss of the transactions after
 *           it. (Whole frames read while SQLite rewrites checksums hold stale checksums by
 *           design and are not judged.)
 *
 * BATCHES
 *   SQLite writes a transaction's frames one by one, 4,120 bytes each for 4 KiB pages. Each in
 *   a system call of its own costs ~1 us of call on this kind of VM, and when the WAL grows
 *   (it starts empty at every first open of a store) the kernel zeroes the part of each new
 *   file page a write does not cover: 7% of the CPU of a queue drain at login in a profile.
 *   So consecutive whole frames are gathered in a buffer of MV_WAL_BATCH_BYTES and go down
 *   in one write:
 *     - at the commit frame (its header's database size is not 0), before that write
 *       returns: the transaction is in the file before SQLite publishes it in the WAL index
 *       (plain memory writes, no call through here), so no other connection can read a
 *       committed frame that is not there;
 *     - before anything else reaches the file: any other write (a frame not next in line, a
 *       header, a page overwritten in place), a read, a sync, a truncate, the file's size,
 *       its close; and before any shared-memory lock call of the connection
 *       (mv_wal_batch_flush_for), after which another connection may take the write lock:
 *       the frames of a transaction rolled back after a cache spill go down first, where
 *       SQLite itself had written them.
 *   Frames held back belong to a transaction no other connection can see, so holding them
 *   changes nothing another reader, a checkpoint or a crash could observe (a crash loses
 *   them as it loses any uncommitted frame). A failed batch write fails the SQLite call
 *   that caused it, which rolls the transaction back as after any failed frame write. The
 *   buffer holds ciphertext only; it belongs to the thread (taken while a batch is open,
 *   given back after), so an idle store holds none.
 *
 * LIMITATIONS
 *   SQLite's own running checksum in the WAL index mixes the two domains. Nothing here
 *   trusts it, but a concurrent SQLite3MC process would: never run both at once on one WAL
 *   database. Handing a WAL over while closed is safe in both directions.
 */
#include "vfs/vfs.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int mv_wal_active(const struct mv_file *f)
{
    return f->codec->crypt != NULL && f->codec->key_state == MV_KEY_OK;
}

static uint32_t mv_wal_page_size(struct mv_file *f)
{
    if (f->wal_page_size == 0) {
        uint8_t hdr[MV_WAL_HEADER_BYTES];
        if (f->lower->pMethods->xRead(f->lower, hdr, MV_WAL_HEADER_BYTES, 0) == SQLITE_OK) {
            f->wal_page_size = mv_get_be32(hdr + 8);
        }
        if (f->wal_page_size == 0) {
            f->wal_page_size = f->codec->page_size;
        }
    }
    return f->wal_page_size;
}

/* Whether off is where a frame's page starts (page_offset 1) or its header starts (0). */
static int mv_wal_frame_at(sqlite3_int64 off, uint32_t page_size, int page_offset)
{
    sqlite3_int64 frame = (sqlite3_int64)page_size + MV_WAL_FRAME_HEADER_BYTES;
    sqlite3_int64 base = MV_WAL_HEADER_BYTES + (page_offset ? MV_WAL_FRAME_HEADER_BYTES : 0);
    return page_size != 0 && off >= base && (off - base) % frame == 0;
}

static sqlite3_int64 mv_wal_frame_number(sqlite3_int64 header_off, uint32_t page_size)
{
    return (header_off - MV_WAL_HEADER_BYTES) /
               ((sqlite3_int64)page_size + MV_WAL_FRAME_HEADER_BYTES) +
           1;
}

/* SQLite's WAL write and checkpoint locks are slots 0 and 1 of its shared-memory locks
 * (WAL_WRITE_LOCK, WAL_CKPT_LOCK in wal.c). */
#define MV_WAL_WRITE_LOCK_SLOT 0
#define MV_WAL_CKPT_LOCK_SLOT  1

void mv_wal_forget_chain(struct mv_file *f)
{
    f->chain_valid = 0;
}

/* Frames whose page numbers are recorded: 1M (4 MiB of record); frames past it are
 * overwritten with the header read, as before. */
#define MV_WAL_FRAME_PGNOS_MAX (UINT32_C(1) << 20)

void mv_wal_forget_frame_pgnos(struct mv_file *f)
{
    if (f->frame_pgnos != NULL) {
        memset(f->frame_pgnos, 0, (size_t)f->frame_pgnos_used * sizeof f->frame_pgnos[0]);
    }
    f->frame_pgnos_used = 0;
}

void mv_wal_free_frame_pgnos(struct mv_file *f)
{
    free(f->frame_pgnos);
    f->frame_pgnos = NULL;
    f->frame_pgnos_cap = 0;
    f->frame_pgnos_used = 0;
}

/* Records that this connection wrote frame (1-based) for page pgno. The record is of one
 * hold of the WAL write lock: SQLite holds it across every frame of a transaction, so while
 * no shared-memory lock call on it came since, no other connection can have written the
 * WAL, and this connection's own other writes (a WAL header, a lone frame header, a
 * truncate, any other write) forget the record. Without memory for it, nothing is
 * recorded (the overwrite then reads the header). */
static void mv_wal_record_frame_pgno(struct mv_file *f, sqlite3_int64 frame, uint32_t pgno)
{
    if (f->frame_pgnos_lock_calls != f->codec->wal_write_lock_calls) {
        mv_wal_forget_frame_pgnos(f);
        f->frame_pgnos_lock_calls = f->codec->wal_write_lock_calls;
    }
    if (frame < 1 || frame > (sqlite3_int64)MV_WAL_FRAME_PGNOS_MAX) {
        return;
    }
    if ((uint64_t)frame > f->frame_pgnos_cap) {
        uint32_t cap = f->frame_pgnos_cap != 0 ? f->frame_pgnos_cap : 1024;
        while ((uint64_t)cap < (uint64_t)frame) {
            cap *= 2;
        }
        uint32_t *p = realloc(f->frame_pgnos, (size_t)cap * sizeof *p);
        if (p == NULL) {
            return;
        }
        memset(p + f->frame_pgnos_cap, 0, (size_t)(cap - f->frame_pgnos_cap) * sizeof *p);
        f->frame_pgnos = p;
        f->frame_pgnos_cap = cap;
    }
    f->frame_pgnos[frame - 1] = pgno;
    if ((uint64_t)frame > f->frame_pgnos_used) {
        f->frame_pgnos_used = (uint32_t)frame;
    }
}

/* The page number this connection recorded for frame, or 0. */
static uint32_t mv_wal_recorded_frame_pgno(const struct mv_file *f, sqlite3_int64 frame)
{
    if (f->frame_pgnos == NULL || frame < 1 || (uint64_t)frame > f->frame_pgnos_cap ||
        f->frame_pgnos_lock_calls != f->codec->wal_write_lock_calls) {
        return 0;
    }
    return f->frame_pgnos[frame - 1];
}

void mv_wal_shm_lock_seen(struct mv_file *main_file, int offset, int n, int flags, int rc)
{
    struct mv_codec *c = main_file->codec;
    if (main_file->kind != MV_FILE_MAIN || c == NULL) {
        return;
    }
    if (offset <= MV_WAL_WRITE_LOCK_SLOT && offset + n > MV_WAL_WRITE_LOCK_SLOT) {
        c->wal_write_lock_calls++; /* taken or released, granted or not */
    }
    if (offset <= MV_WAL_CKPT_LOCK_SLOT && offset + n > MV_WAL_CKPT_LOCK_SLOT) {
        /* Held only after a granted exclusive lock; any other call ends it. */
        c->ckpt_lock_held = rc == SQLITE_OK && (flags & SQLITE_SHM_LOCK) != 0 &&
                            (flags & SQLITE_SHM_EXCLUSIVE) != 0;
        if (!c->ckpt_raw) {
            /* (A page handed out as ciphertext stays recognisable: SQLite may only write
             * it back, see mv_codec_ckpt_match().) */
            c->ckpt_valid = 0;
        }
    }
}

/* Makes room for the checkpoint copy of a page_size page; SQLITE_NOMEM if there is none
 * (the old copy is then forgotten). */
static int mv_wal_ckpt_room(struct mv_codec *c, uint32_t page_size)
{
    if (c->ckpt_page_size == page_size) {
        return SQLITE_OK;
    }
    c->ckpt_valid = 0;
    c->ckpt_raw = 0;
    uint8_t *p = malloc(2 * (size_t)page_size);
    if (p == NULL) {
        return SQLITE_NOMEM;
    }
    if (c->ckpt_pages != NULL) {
        crypt_wipe(c->ckpt_pages, 2 * (size_t)c->ckpt_page_size);
        free(c->ckpt_pages);
    }
    c->ckpt_pages = p;
    c->ckpt_page_size = page_size;
    return SQLITE_OK;
}

/* Keeps the page the checkpoint just read (ciphertext at cipher, plaintext at plain; plain
 * NULL: SQLite was handed the ciphertext, and mv_wal_ckpt_room() made room before). */
static void mv_wal_ckpt_keep(struct mv_codec *c,
                             uint32_t pgno,
                             const uint8_t *cipher,
                             const uint8_t *plain,
                             uint32_t page_size)
{
    c->ckpt_valid = 0;
    c->ckpt_raw = 0;
    if (mv_wal_ckpt_room(c, page_size) != SQLITE_OK) {
        return; /* plaintext: only an optimisation */
    }
    memcpy(c->ckpt_pages, cipher, page_size);
    if (plain != NULL) {
        memcpy(c->ckpt_pages + page_size, plain, page_size);
    }
    c->ckpt_pgno = pgno;
    c->ckpt_raw = plain == NULL;
    c->ckpt_valid = 1;
}

int mv_codec_ckpt_match(
    struct mv_codec *c, uint32_t pgno, const uint8_t *buf, uint32_t size, const uint8_t **cipher)
{
    *cipher = NULL;
    if (!c->ckpt_valid || c->ckpt_page_size != size) {
        return 0;
    }
    if (c->ckpt_raw) {
        /* buf must be the very ciphertext handed out, authenticated for this page number
         * (the WAL encrypts under the database page number). Plaintext from SQLite equal
         * to a page's own ciphertext does not happen by chance; the same bytes for another
         * page number cannot be written correctly at all. */
        if (memcmp(c->ckpt_pages, buf, size) != 0) {
            return 0;
        }
        c->ckpt_valid = 0;
        c->ckpt_raw = 0;
        if (c->ckpt_pgno != pgno) {
            return -1;
        }
        *cipher = c->ckpt_pages;
        return 1;
    }
    int same = c->ckpt_pgno == pgno && memcmp(c->ckpt_pages + size, buf, size) == 0;
    c->ckpt_valid = 0;
    *cipher = same ? c->ckpt_pages : NULL;
    return same;
}

/* ---- BATCHES (see the top) -------------------------------------------------------------- */

/* The most SQLite's unix VFS writes in one call: its seekAndWriteFd() masks the length
 * with 0x1ffff, so a longer write comes back short (SQLITE_FULL). 31 frames of 4 KiB pages;
 * under glibc's mmap threshold, so a buffer a thread takes again is warm heap memory. A
 * frame larger than this is written alone. */
#define MV_WAL_BATCH_BYTES 0x1ffffu

static pthread_key_t mv_wal_batch_key;
static pthread_once_t mv_wal_batch_once = PTHREAD_ONCE_INIT;
static int mv_wal_batch_key_ok;

static void mv_wal_batch_key_make(void)
{
    mv_wal_batch_key_ok = pthread_key_create(&mv_wal_batch_key, free) == 0;
}

/* The calling thread's buffer (taken from it), else a new one; NULL without memory. */
static uint8_t *mv_wal_batch_take(void)
{
    (void)pthread_once(&mv_wal_batch_once, mv_wal_batch_key_make);
    if (mv_wal_batch_key_ok) {
        uint8_t *b = pthread_getspecific(mv_wal_batch_key);
        if (b != NULL) {
            (void)pthread_setspecific(mv_wal_batch_key, NULL);
            return b;
        }
    }
    return malloc(MV_WAL_BATCH_BYTES);
}

/* Gives a buffer to the calling thread, or frees it if the thread has one. */
static void mv_wal_batch_give(uint8_t *b)
{
    if (mv_wal_batch_key_ok && pthread_getspecific(mv_wal_batch_key) == NULL &&
        pthread_setspecific(mv_wal_batch_key, b) == 0) {
        return;
    }
    free(b);
}

/* Writes the open batch, if any, in one call and closes it. If the write fails, what this
 * connection remembers of those frames (the chain, their page numbers) is forgotten. */
static int mv_wal_batch_write(struct mv_file *f)
{
    if (f->batch == NULL) {
        return SQLITE_OK;
    }
    int rc = f->batch_len == 0
                 ? SQLITE_OK
                 : f->lower->pMethods->xWrite(f->lower, f->batch, (int)f->batch_len, f->batch_off);
    mv_wal_batch_give(f->batch);
    f->batch = NULL;
    f->batch_len = 0;
    if (f->codec->wal_batch_file == f) {
        f->codec->wal_batch_file = NULL;
    }
    if (rc != SQLITE_OK) {
        mv_wal_forget_chain(f);
        mv_wal_forget_frame_pgnos(f);
    }
    return rc;
}

int mv_wal_batch_flush_for(struct mv_file *main_file)
{
    struct mv_codec *c = main_file->codec;
    if (main_file->kind != MV_FILE_MAIN || c == NULL || c->wal_batch_file == NULL) {
        return SQLITE_OK;
    }
    return mv_wal_batch_write(c->wal_batch_file);
}

/* A whole frame (header and ciphertext, checksummed) for offset off: into the batch, or
 * written at once if it is a commit frame with no batch before it, or too large, or there is
 * no memory for a buffer. A commit frame closes the batch with one write. */
static int mv_wal_put_frame(struct mv_file *f, const uint8_t *frame, uint32_t n, sqlite3_int64 off)
{
    int commit = mv_get_be32(frame + 4) != 0;
    if (f->batch != NULL &&
        (off != f->batch_off + f->batch_len || f->batch_len + n > MV_WAL_BATCH_BYTES)) {
        int rc = mv_wal_batch_write(f);
        if (rc != SQLITE_OK) {
            return rc;
        }
    }
    if (f->batch == NULL) {
        if (commit || n > MV_WAL_BATCH_BYTES || (f->batch = mv_wal_batch_take()) == NULL) {
            return f->lower->pMethods->xWrite(f->lower, frame, (int)n, off);
        }
        f->batch_off = off;
        f->batch_len = 0;
        f->codec->wal_batch_file = f;
    }
    memcpy(f->batch + f->batch_len, frame, n);
    f->batch_len += n;
    return commit ? mv_wal_batch_write(f) : SQLITE_OK;
}

int mv_wal_flush(struct mv_file *f)
{
    int rc = mv_wal_batch_write(f);
    if (!f->pending_header) {
        return rc;
    }
    f->pending_header = 0;
    mv_wal_forget_chain(f);
    mv_wal_forget_frame_pgnos(f);
    return rc != SQLITE_OK
               ? rc
               : f->lower->pMethods->xWrite(f->lower, f->pending, MV_WAL_FRAME_HEADER_BYTES,
                                            f->pending_offset);
}

/* The WAL header of the generation whose salts a frame carries. A restart always changes
 * the salts, so a cached header with the same salts is the one on disk: no read per frame. */
static int mv_wal_header(struct mv_file *f, const uint8_t salts[8], const uint8_t **hdr)
{
    if (!f->wal_header_valid || memcmp(f->wal_header + 16, salts, 8) != 0) {
        int rc = f->lower->pMethods->xRead(f->lower, f->wal_header, MV_WAL_HEADER_BYTES, 0);
        if (rc != SQLITE_OK) {
            f->wal_header_valid = 0;
            return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_IOERR_WRITE : rc;
        }
        f->wal_header_valid = 1;
    }
    *hdr = f->wal_header;
    return SQLITE_OK;
}

static void mv_wal_header_seen(struct mv_file *f, const uint8_t *hdr)
{
    memcpy(f->wal_header, hdr, MV_WAL_HEADER_BYTES);
    f->wal_header_valid = 1;
    f->wal_page_size = mv_get_be32(hdr + 8);
}

/* Whether the previous frame's checksum can be taken from this connection's record of the
 * frame it wrote last instead of from disk: (1) that frame is the one at prev_off, (2) of the
 * same WAL generation (salts: a restart always changes them), and (3) no shared-memory lock
 * call on the WAL write lock came since. SQLite holds the write lock across every frame of
 * a transaction, so while (3) holds no other connection can have written the WAL, and every
 * other write of this connection (a lone header, a rewritten checksum, a page overwritten
 * in place, a truncate) already forgot the record. Without shared memory (exclusive
 * locking mode) no lock call comes at all, and no other connection can open the WAL. The
 * first frame of a transaction therefore still reads 8 bytes; the others read nothing. */
static int
mv_wal_chain_cached(const struct mv_file *f, sqlite3_int64 prev_off, const uint8_t salts[8])
{
    return f->chain_valid && f->chain_off == prev_off && memcmp(f->chain_salts, salts, 8) == 0 &&
           f->chain_lock_calls == f->codec->wal_write_lock_calls;
}

/* The checksum the frame at header_off (whose header carries salts) continues from, and
 * the WAL's word order. The previous frame's checksum is read from disk unless use_record
 * and mv_wal_chain_cached() say this connection wrote it and nobody can have since. */
static int mv_wal_chain_seed(struct mv_file *f,
                             sqlite3_int64 header_off,
                             uint32_t page_size,
                             const uint8_t salts[8],
                             int use_record,
                             uint32_t seed[2],
                             int *big_endian)
{
    const uint8_t *hdr;
    int rc = mv_wal_header(f, salts, &hdr);
    if (rc != SQLITE_OK) {
        return rc;
    }
    struct mv_wal_header wal;
    (void)mv_wal_header_parse(hdr, &wal); /* SQLite wrote it: its fields, valid or not */
    *big_endian = wal.big_endian;
    if (header_off == MV_WAL_HEADER_BYTES) {
        seed[0] = wal.checksum[0];
        seed[1] = wal.checksum[1];
        return SQLITE_OK;
    }
    uint8_t prev[8];
    sqlite3_int64 prev_off = header_off - (sqlite3_int64)page_size - MV_WAL_FRAME_HEADER_BYTES;
    if (use_record && mv_wal_chain_cached(f, prev_off, salts)) {
        seed[0] = f->chain_sum[0];
        seed[1] = f->chain_sum[1];
        return SQLITE_OK;
    }
    rc = mv_wal_batch_write(f); /* the previous frame may be in it */
    if (rc == SQLITE_OK) {
        rc = f->lower->pMethods->xRead(f->lower, prev, 8, prev_off + 16);
    }
    if (rc != SQLITE_OK) {
        return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_IOERR_WRITE : rc;
    }
    seed[0] = mv_get_be32(prev);
    seed[1] = mv_get_be32(prev + 4);
    return SQLITE_OK;
}

/* Whether SQLite left this frame header's salts and checksum to its commit: the frames of a
 * transaction that overwrote one of its own frames in place are written with both zero and
 * all rewritten before the commit returns (wal.c: walEncodeFrame with iReCksum set, then
 * walRewriteChecksums, which reads the frames raw, i.e. sums ciphertext). Real salts and
 * checksum all zero together do not happen (2^-128). */
static int mv_wal_checksum_deferred(const uint8_t *hdr)
{
    uint8_t acc = 0;
    for (int i = 8; i < MV_WAL_FRAME_HEADER_BYTES; i++) {
        acc |= hdr[i];
    }
    return acc == 0;
}

/* A new frame: the held-back header plus this page, encrypted and re-checksummed. */
static int mv_wal_write_frame(struct mv_file *f, const uint8_t *page, uint32_t page_size)
{
    struct mv_codec *c = f->codec;
    uint32_t frame_bytes = page_size + MV_WAL_FRAME_HEADER_BYTES;
    int rc = mv_codec_scratch(c, frame_bytes);
    if (rc != SQLITE_OK) {
        return rc;
    }
    uint8_t *frame = c->scratch;
    memcpy(frame, f->pending, MV_WAL_FRAME_HEADER_BYTES);
    f->pending_header = 0;
    f->wal_rewriting = 0;
    f->wal_rewrite_off = 0;
    uint32_t pgno = mv_get_be32(frame);
    rc = mv_codec_encrypt(c, pgno, page, frame + MV_WAL_FRAME_HEADER_BYTES, page_size);
    if (rc != SQLITE_OK) {
        return rc;
    }
    if (mv_wal_checksum_deferred(frame)) {
        /* Written as SQLite wrote it: a chain summed now would be thrown away, and finding
         * its seed read the WAL header for every such frame (the zero salts never match
         * the cached one). */
        mv_wal_forget_chain(f);
        rc = mv_wal_put_frame(f, frame, frame_bytes, f->pending_offset);
        if (rc == SQLITE_OK) {
            mv_wal_record_frame_pgno(f, mv_wal_frame_number(f->pending_offset, page_size), pgno);
        }
        return rc;
    }
    uint32_t sum[2];
    int big_endian;
    rc = mv_wal_chain_seed(f, f->pending_offset, page_size, frame + 8, 1, sum, &big_endian);
    mv_wal_forget_chain(f); /* until this frame is written or in the batch */
    if (rc != SQLITE_OK) {
        return rc;
    }
    mv_wal_checksum(big_endian, frame, 8, sum);
    mv_wal_checksum(big_endian, frame + MV_WAL_FRAME_HEADER_BYTES, page_size, sum);
    mv_put_be32(frame + 16, sum[0]);
    mv_put_be32(frame + 20, sum[1]);
    rc = mv_wal_put_frame(f, frame, frame_bytes, f->pending_offset);
    if (rc == SQLITE_OK) {
        f->chain_valid = 1;
        f->chain_off = f->pending_offset;
        memcpy(f->chain_salts, frame + 8, 8);
        f->chain_sum[0] = sum[0];
        f->chain_sum[1] = sum[1];
        f->chain_lock_calls = f->codec->wal_write_lock_calls;
        mv_wal_record_frame_pgno(f, mv_wal_frame_number(f->pending_offset, page_size), pgno);
    }
    return rc;
}

/* A page written alone into an existing frame; its checksum is rewritten by SQLite. */
static int
mv_wal_overwrite_page(struct mv_file *f, const uint8_t *page, uint32_t page_size, sqlite3_int64 off)
{
    struct mv_codec *c = f->codec;
    sqlite3_int64 header_off = off - MV_WAL_FRAME_HEADER_BYTES;
    mv_wal_forget_chain(f);
    /* The frame's page number: recorded when this connection wrote the frame (no I/O), else
     * from its header on disk. */
    uint32_t pgno = mv_wal_recorded_frame_pgno(f, mv_wal_frame_number(header_off, page_size));
    if (pgno == 0) {
        uint8_t hdr[4];
        int rc = f->lower->pMethods->xRead(f->lower, hdr, 4, header_off);
        if (rc != SQLITE_OK) {
            return rc == SQLITE_IOERR_SHORT_READ ? SQLITE_IOERR_WRITE : rc;
        }
        pgno = mv_get_be32(hdr);
    }
    int rc = mv_codec_scratch(c, page_size);
    if (rc == SQLITE_OK) {
        rc = mv_codec_encrypt(c, pgno, page, c->scratch, page_size);
    }
    if (rc == SQLITE_OK) {
        rc = f->lower->pMethods->xWrite(f->lower, c->scratch, (int)page_size, off);
    }
    return rc;
}

int mv_wal_write(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    if (mv_codec_write_blocked(f->codec)) {
        return SQLITE_READONLY;
    }
    if (!mv_wal_active(f)) {
        int rc = mv_wal_flush(f);
        mv_wal_forget_chain(f);
        mv_wal_forget_frame_pgnos(f);
        return rc != SQLITE_OK ? rc : f->lower->pMethods->xWrite(f->lower, buf, amt, off);
    }
    if (amt == MV_WAL_HEADER_BYTES && off == 0) {
        int rc = mv_wal_flush(f);
        if (rc != SQLITE_OK) {
            return rc;
        }
        mv_wal_forget_chain(f);
        mv_wal_forget_frame_pgnos(f);
        mv_wal_header_seen(f, buf);
        return f->lower->pMethods->xWrite(f->lower, buf, amt, off);
    }
    uint32_t page_size = mv_wal_page_size(f);
    if (amt == MV_WAL_FRAME_HEADER_BYTES && mv_wal_frame_at(off, page_size, 0)) {
        /* A header held back without its page goes down as it is (with the batch before
         * it); an open batch alone stays open for this frame. */
        int rc = f->pending_header ? mv_wal_flush(f) : SQLITE_OK;
        if (rc != SQLITE_OK) {
            return rc;
        }
        if (f->wal_rewriting && off == f->wal_rewrite_off) {
            f->wal_rewrite_off = 0; /* a rewritten checksum: no page follows */
            rc = mv_wal_flush(f);
            mv_wal_forget_chain(f);
            mv_wal_forget_frame_pgnos(f);
            return rc != SQLITE_OK ? rc : f->lower->pMethods->xWrite(f->lower, buf, amt, off);
        }
        memcpy(f->pending, buf, MV_WAL_FRAME_HEADER_BYTES);
        f->pending_offset = off;
        f->pending_header = 1;
        return SQLITE_OK;
    }
    if ((uint32_t)amt == page_size && mv_wal_frame_at(off, page_size, 1)) {
        if (f->pending_header && f->pending_offset + MV_WAL_FRAME_HEADER_BYTES == off) {
            return mv_wal_write_frame(f, buf, page_size);
        }
        int rc = mv_wal_flush(f);
        return rc != SQLITE_OK ? rc : mv_wal_overwrite_page(f, buf, page_size, off);
    }
    int rc = mv_wal_flush(f);
    mv_wal_forget_chain(f);
    mv_wal_forget_frame_pgnos(f);
    return rc != SQLITE_OK ? rc : f->lower->pMethods->xWrite(f->lower, buf, amt, off);
}

/* Recovery reads whole frames and stops, silently, at the first frame whose checksum does
 * not chain: right for a torn tail after a crash, wrong for a damaged frame in the middle,
 * which would drop every committed transaction after it. So a whole-frame read is checked
 * here: a frame that chains but does not authenticate, or a broken frame (neither chaining
 * nor authentic) followed by one that chains from it, is damage, reported as
 * SQLITE_IOERR_DATA naming the frame. */
static int
mv_wal_check_frame(struct mv_file *f, const uint8_t *frame, sqlite3_int64 off, uint32_t page_size)
{
    struct mv_codec *c = f->codec;
    uint8_t whdr_bytes[MV_WAL_HEADER_BYTES];
    struct mv_wal_header whdr;
    uint32_t seed[2];
    int big_endian;
    uint32_t frame_bytes = page_size + MV_WAL_FRAME_HEADER_BYTES;
    if (f->lower->pMethods->xRead(f->lower, whdr_bytes, MV_WAL_HEADER_BYTES, 0) != SQLITE_OK ||
        mv_wal_chain_seed(f, off, page_size, frame + 8, 0, seed, &big_endian) != SQLITE_OK ||
        mv_codec_scratch(c, frame_bytes) != SQLITE_OK) {
        return SQLITE_OK; /* nothing to add to what SQLite itself will find */
    }
    (void)mv_wal_header_parse(whdr_bytes, &whdr);
    int chains = mv_wal_frame_chains(frame, page_size, &whdr, seed);
    uint32_t pgno = mv_get_be32(frame);
    memcpy(c->scratch, frame + MV_WAL_FRAME_HEADER_BYTES, page_size);
    int authentic =
        pgno != 0 && crypt_page_decrypt(c->crypt, pgno, c->scratch, page_size,
                                        pgno == 1 ? CRYPT_PAGE_DB_HEADER : 0) == CRYPT_OK;
    if (chains && authentic) {
        return SQLITE_OK;
    }
    /* (1) chains but forged or damaged inside; (2) neither chains nor authenticates, and
     * the next frame chains from it. A frame that does not chain but authenticates is a
     * page SQLite overwrote in place in the last, unfinished transaction (its checksum
     * not yet rewritten): the tail SQLite drops from there was never committed. (Authentic
     * old bytes put there on purpose drop no more than truncating the WAL would.) */
    int damaged = chains;
    if (!chains && !authentic &&
        f->lower->pMethods->xRead(f->lower, c->scratch, (int)frame_bytes, off + frame_bytes) ==
            SQLITE_OK) {
        uint32_t stored[2];
        mv_wal_frame_stored_checksum(frame, stored);
        damaged = mv_wal_frame_chains(c->scratch, page_size, &whdr, stored);
    }
    if (!damaged) {
        return SQLITE_OK; /* a torn tail: SQLite drops it, as it should */
    }
    mv_codec_set_error(c,
                       "WAL frame %lld (page %u) failed authentication and committed frames "
                       "follow it: the WAL is damaged or was tampered with; it was left untouched",
                       (long long)mv_wal_frame_number(off, page_size), pgno);
    return SQLITE_IOERR_DATA;
}

int mv_wal_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off)
{
    int rc = mv_wal_flush(f);
    if (rc != SQLITE_OK) {
        return rc;
    }
    if (!mv_wal_active(f)) {
        return f->lower->pMethods->xRead(f->lower, buf, amt, off);
    }
    uint32_t page_size = mv_wal_page_size(f);
    if ((uint32_t)amt == page_size + MV_WAL_FRAME_HEADER_BYTES &&
        mv_wal_frame_at(off, page_size, 0)) {
        rc = f->lower->pMethods->xRead(f->lower, buf, amt, off);
        if (rc != SQLITE_OK || f->wal_rewriting) {
            f->wal_rewrite_off = rc == SQLITE_OK && f->wal_rewriting ? off : 0;
            return rc;
        }
        return mv_wal_check_frame(f, buf, off, page_size);
    }
    if (amt == 8) {
        /* SQLite starts rewriting checksums (walRewriteChecksums) by reading the previous
         * frame's checksum; the frames it then reads hold stale checksums by design. */
        f->wal_rewriting = 1;
    } else if (amt == MV_WAL_HEADER_BYTES && off == 0) {
        f->wal_rewriting = 0; /* recovery starts by reading the WAL header */
    }
    if ((uint32_t)amt != page_size || !mv_wal_frame_at(off, page_size, 1)) {
        rc = f->lower->pMethods->xRead(f->lower, buf, amt, off);
        if (rc == SQLITE_OK && amt == MV_WAL_HEADER_BYTES && off == 0) {
            rc = mv_wal_header_check(f, buf); /* a refused header must not drop commits */
            mv_wal_header_seen(f, buf);
        }
        return rc;
    }
    /* The frame header (for its page number) and the page in one read: a second read per
     * page costs a system call, a copy of the page in memory much less. */
    uint32_t frame_bytes = page_size + MV_WAL_FRAME_HEADER_BYTES;
    rc = mv_codec_scratch(f->codec, frame_bytes);
    if (rc != SQLITE_OK) {
        return rc;
    }
    uint8_t *frame = f->codec->scratch;
    rc = f->lower->pMethods->xRead(f->lower, frame, (int)frame_bytes,
                                   off - MV_WAL_FRAME_HEADER_BYTES);
    memcpy(buf, frame + MV_WAL_FRAME_HEADER_BYTES, page_size); /* zero-filled if short */
    if (rc != SQLITE_OK) {
        return rc;
    }
    uint32_t pgno = mv_get_be32(frame);
    struct mv_codec *c = f->codec;
    if (c->ckpt_lock_held && crypt_ctx_can_authenticate(c->crypt) &&
        mv_wal_ckpt_room(c, page_size) == SQLITE_OK) {
        /* The checkpoint: SQLite copies this page into the database file and looks at
         * nothing in it (wal.c, walCheckpoint). So it gets the frame's ciphertext, checked
         * but not decrypted (a damaged frame still stops the copy), and mv_main_write()
         * writes that ciphertext as it is. */
        rc = mv_codec_authenticate(c, pgno, buf, page_size);
        if (rc == SQLITE_OK) {
            mv_wal_ckpt_keep(c, pgno, buf, NULL, page_size);
        }
    } else {
        rc = mv_codec_decrypt(c, pgno, buf, page_size);
        if (rc == SQLITE_OK && c->ckpt_lock_held) {
            mv_wal_ckpt_keep(c, pgno, frame + MV_WAL_FRAME_HEADER_BYTES, buf, page_size);
        }
    }
    if (rc == SQLITE_IOERR_DATA) {
        mv_codec_set_error(
            f->codec,
            "WAL frame %lld (page %u) failed authentication: the WAL is damaged "
            "or was tampered with",
            (long long)mv_wal_frame_number(off - MV_WAL_FRAME_HEADER_BYTES, page_size), pgno);
    }
    return rc;
}
