/*
 * sqlite_format.h -- SQLite's on-disk formats, written down once: the database header's
 * bytes 16..23, the WAL header, WAL frames, the WAL checksum, and a walk over a WAL's
 * frames that decides what is committed exactly as SQLite's recovery does (SQLite's "Database
 * File Format", §1.3 and §4). The VFS (vfs_wal.c, vfs_codec.c) and the operations that
 * read store files directly (ops_check.c, ops_keyless.c, ops_stats.c) all use this module,
 * so they can never disagree about what a header or a committed frame is.
 *
 * USAGE
 *   struct mv_wal_walk w;
 *   if (mv_wal_walk_begin(&w, fd, page_size) == 0) {
 *       int step;
 *       while ((step = mv_wal_walk_next(&w)) > 0) { ... w.frame_no, w.pgno, w.commit ... }
 *       ... w.last_commit: the frames recovery would keep ...
 *   }
 *   mv_wal_walk_end(&w);
 *
 * IMPLEMENTATION NOTES
 *   - A frame is valid when, as in SQLite's walDecodeFrame(), its salts equal the WAL
 *     header's, its page number is not 0 and its checksum continues the chain (over frame
 *     header bytes 0..7 and the page as stored: for an encrypted WAL, the ciphertext).
 *     Recovery keeps the frames up to the last valid commit frame before the first invalid
 *     frame; whatever follows (a torn write, an older generation) is not part of the log.
 *   - One more step than recovery: a frame that breaks the chain but is followed by a frame
 *     that chains from its *stored* checksum is reported as MV_WAL_STEP_BROKEN. Recovery
 *     would silently drop every commit after it; only a reader that can authenticate pages
 *     (the VFS, `check`) can tell damage from a page overwritten in place by the last,
 *     unfinished transaction, so the walk leaves that decision to its caller.
 */
#ifndef MV_SQLITE_FORMAT_H
#define MV_SQLITE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define MV_SQLITE_MAGIC           "SQLite format 3" /* 15 chars + NUL: bytes 0..15 */
#define MV_DB_HEADER_BYTES        24 /* what mailvault reads: bytes 0..15 and 16..23 */
#define MV_WAL_HEADER_BYTES       32
#define MV_WAL_FRAME_HEADER_BYTES 24
#define MV_WAL_MAGIC              0x377f0682u /* | 1: checksums of big-endian words */
#define MV_WAL_VERSION            3007000u

static inline uint32_t mv_get_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void mv_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* ---- database header ---------------------------------------------------------------------- */

/* Page size from header bytes 16..17 (1 means 65536); 0 if not a valid page size. */
uint32_t mv_header_page_size(const uint8_t hdr[MV_DB_HEADER_BYTES]);
/* Whether bytes 16..23 are as SQLite writes them: a valid page size, file format versions
 * 1 or 2, payload fractions 64/32/32. Bytes 0..15 (magic or salt) are not looked at. */
int mv_header_plain_valid(const uint8_t hdr[MV_DB_HEADER_BYTES]);
/* Whether bytes 0..15 are SQLite's magic: a plaintext database. */
int mv_header_is_plaintext(const uint8_t hdr[MV_DB_HEADER_BYTES]);
/* The reserve bytes per page (byte 20); meaningful only if mv_header_plain_valid(). */
static inline uint32_t mv_header_reserve(const uint8_t hdr[MV_DB_HEADER_BYTES])
{
    return hdr[20];
}

/* ---- WAL ------------------------------------------------------------------------------- */

struct mv_wal_header {
    int big_endian; /* checksums over big-endian words (magic & 1) */
    uint32_t page_size;
    uint32_t checkpoint_seq;
    uint8_t salts[8];     /* bytes 16..23; every frame of this generation repeats them */
    uint32_t checksum[2]; /* over bytes 0..23: the seed of frame 1's checksum */
};

/* SQLite's WAL checksum over n bytes (n a multiple of 8): pairs of 32-bit words,
 * s0 += x0 + s1, s1 += x1 + s0, continuing s[0], s[1]. */
void mv_wal_checksum(int big_endian, const uint8_t *p, size_t n, uint32_t s[2]);
/* The same, one 8-byte pair after another (the definition; for tests). */
void mv_wal_checksum_simple(int big_endian, const uint8_t *p, size_t n, uint32_t s[2]);
/* Below this many 8-byte pairs mv_wal_checksum() runs pair after pair. */
#define MV_WAL_CHECKSUM_SPLIT_PAIRS 64

/* The state the checksum had before the n bytes at p were summed into s (n a multiple of 8):
 * SQLite's checksum can be run backwards. */
void mv_wal_checksum_unwind(int big_endian, const uint8_t *p, size_t n, uint32_t s[2]);
/* Rebuilds the WAL header frame 1 (header + page_size bytes) was written under, for a
 * header that was damaged: magic (with big_endian), version, page_size, frame 1's salts,
 * and the checksum frame 1 chained from; the checkpoint sequence, the one field nothing
 * else repeats, is solved from that checksum. Returns 1 if such a header exists and
 * recovery would accept it, else 0 (another byte order or page size). It only says frame 1
 * chains from it: the caller checks the frames after it. */
int mv_wal_header_rebuild(const uint8_t *frame1,
                          uint32_t page_size,
                          int big_endian,
                          uint8_t hdr[MV_WAL_HEADER_BYTES]);

/* Fills *out from the 32 header bytes whatever they hold; returns 1 if recovery accepts
 * the header (magic, version, a valid page size, its checksum), else 0. */
int mv_wal_header_parse(const uint8_t hdr[MV_WAL_HEADER_BYTES], struct mv_wal_header *out);

/* Whether frame (header + page_size bytes) is valid under wal's salts with its checksum
 * continuing seed (the previous frame's checksum, or the WAL header's for frame 1). */
int mv_wal_frame_chains(const uint8_t *frame,
                        uint32_t page_size,
                        const struct mv_wal_header *wal,
                        const uint32_t seed[2]);

/* The checksum frame stores (header bytes 16..23). */
void mv_wal_frame_stored_checksum(const uint8_t *frame, uint32_t out[2]);

/* Byte offset of frame n's header (n >= 1). Its page follows MV_WAL_FRAME_HEADER_BYTES on. */
static inline uint64_t mv_wal_frame_offset(uint64_t n, uint32_t page_size)
{
    return MV_WAL_HEADER_BYTES + (n - 1) * ((uint64_t)page_size + MV_WAL_FRAME_HEADER_BYTES);
}

/* ---- a walk over a WAL file ---------------------------------------------------------------- */

enum mv_wal_step {
    MV_WAL_STEP_ERROR = -1, /* a read failed (errno says why), or out of memory */
    MV_WAL_STEP_END = 0,    /* the end of the log as recovery sees it */
    MV_WAL_STEP_FRAME = 1,  /* a valid frame */
    MV_WAL_STEP_BROKEN = 2, /* a frame that breaks the chain, and the next frame chains from
                               its stored checksum: damage, or a page overwritten in place
                               (see above). Calling next again goes on past it. */
};

struct mv_wal_walk {
    int fd;
    uint64_t file_bytes;      /* the size when the walk began */
    struct mv_wal_header hdr; /* valid only if header_valid */
    int header_valid;         /* 0: recovery ignores this WAL (no frames) */
    uint8_t *frame;           /* the current frame, header + page (owned) */
    uint8_t *next_frame;      /* scratch for looking one frame ahead (owned) */
    uint64_t frame_no;        /* 1-based number of the current frame */
    uint32_t pgno;            /* the current frame's page number */
    int commit;               /* the current frame ends a transaction */
    uint64_t last_commit;     /* the last valid commit frame so far (0: none) */
    uint64_t commits;         /* valid commit frames so far */
    uint32_t sum[2];          /* the running checksum */
};

/* Begins a walk over the WAL open on fd (read with pread; the caller keeps fd). With
 * expect_page_size != 0 a header of another page size counts as invalid. Returns 0 (the
 * header is valid or not: an invalid one ends the walk at once) or -1 (a read failed or
 * out of memory, errno set). mv_wal_walk_end() is needed either way. */
int mv_wal_walk_begin(struct mv_wal_walk *w, int fd, uint32_t expect_page_size);
/* The next frame: an enum mv_wal_step. */
int mv_wal_walk_next(struct mv_wal_walk *w);
void mv_wal_walk_end(struct mv_wal_walk *w);

#endif /* MV_SQLITE_FORMAT_H */
