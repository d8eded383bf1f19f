/*
 * sqlite_format.c -- SQLite's database header, WAL header, WAL frames and checksum, and the
 * walk over a WAL's frames (sqlite_format.h). Hand-written: SQLite exports no function for
 * any of it, and an encrypted WAL must be judged over its ciphertext, below SQLite.
 */
#include "vfs/sqlite_format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(MV_SQLITE_MAGIC) == 16, "the magic fills bytes 0..15");

uint32_t mv_header_page_size(const uint8_t hdr[MV_DB_HEADER_BYTES])
{
    uint32_t v = ((uint32_t)hdr[16] << 8) | hdr[17];
    if (v == 1) {
        return 65536;
    }
    if (v < 512 || (v & (v - 1)) != 0) {
        return 0;
    }
    return v;
}

int mv_header_plain_valid(const uint8_t hdr[MV_DB_HEADER_BYTES])
{
    return mv_header_page_size(hdr) != 0 && hdr[18] >= 1 && hdr[18] <= 2 && hdr[19] >= 1 &&
           hdr[19] <= 2 && hdr[21] == 64 && hdr[22] == 32 && hdr[23] == 32;
}

int mv_header_is_plaintext(const uint8_t hdr[MV_DB_HEADER_BYTES])
{
    return memcmp(hdr, MV_SQLITE_MAGIC, sizeof MV_SQLITE_MAGIC) == 0;
}

static uint32_t mv_get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint32_t mv_wal_word(int big_endian, const uint8_t *p)
{
    return big_endian ? mv_get_be32(p) : mv_get_le32(p);
}

/* SQLite's WAL checksum over pairs 8-byte pairs from p, one pair after another. */
static inline void
mv_wal_checksum_run(int big_endian, const uint8_t *p, size_t pairs, uint32_t s[2])
{
    uint32_t s0 = s[0], s1 = s[1];
    for (size_t i = 0; i < pairs; i++, p += 8) {
        s0 += mv_wal_word(big_endian, p) + s1;
        s1 += mv_wal_word(big_endian, p + 4) + s0;
    }
    s[0] = s0;
    s[1] = s1;
}

/* m = a * b for 2x2 matrices mod 2^32, row-major. */
static void mv_wal_mat_mul(const uint32_t a[4], const uint32_t b[4], uint32_t m[4])
{
    uint32_t r[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                     a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
    memcpy(m, r, sizeof r);
}

/* Four runs of q pairs summed at once, and the rest after them (see mv_wal_checksum). */
static void mv_wal_checksum_4(int big_endian, const uint8_t *p, size_t pairs, uint32_t s[2])
{
    size_t q = pairs / 4, stride = q * 8;
    uint32_t a0 = s[0], a1 = s[1], b0 = 0, b1 = 0, c0 = 0, c1 = 0, d0 = 0, d1 = 0;
    const uint8_t *pa = p, *pb = p + stride, *pc = p + 2 * stride, *pd = p + 3 * stride;
    for (size_t i = 0; i < q; i++, pa += 8, pb += 8, pc += 8, pd += 8) {
        a0 += mv_wal_word(big_endian, pa) + a1;
        b0 += mv_wal_word(big_endian, pb) + b1;
        c0 += mv_wal_word(big_endian, pc) + c1;
        d0 += mv_wal_word(big_endian, pd) + d1;
        a1 += mv_wal_word(big_endian, pa + 4) + a0;
        b1 += mv_wal_word(big_endian, pb + 4) + b0;
        c1 += mv_wal_word(big_endian, pc + 4) + c0;
        d1 += mv_wal_word(big_endian, pd + 4) + d0;
    }
    /* M^q by squaring (M = [[1,1],[1,2]], the matrix of one step). */
    uint32_t mq[4] = {1, 0, 0, 1}, sq[4] = {1, 1, 1, 2};
    for (size_t e = q; e > 0; e >>= 1) {
        if (e & 1u) {
            mv_wal_mat_mul(mq, sq, mq);
        }
        mv_wal_mat_mul(sq, sq, sq);
    }
    const uint32_t runs[3][2] = {{b0, b1}, {c0, c1}, {d0, d1}};
    uint32_t x = a0, y = a1;
    for (int r = 0; r < 3; r++) { /* shift what came before past the next run, add it */
        uint32_t nx = mq[0] * x + mq[1] * y + runs[r][0];
        uint32_t ny = mq[2] * x + mq[3] * y + runs[r][1];
        x = nx;
        y = ny;
    }
    s[0] = x;
    s[1] = y;
    mv_wal_checksum_run(big_endian, p + 4 * stride, pairs - 4 * q, s);
}

/* One step is linear over 32-bit words: (s0, s1) -> M (s0, s1) + (a, a + b), M = [[1,1],
 * [1,2]]. So a run of q pairs can be summed from (0, 0) on its own and joined later as
 * M^q (sum so far) + (its sum). Four runs in flight break the chain of the pair-at-a-time
 * loop, where every add waits for the one before: a 4 KiB frame in about a third of the
 * time, and each frame written or recovered is checksummed over its ciphertext here.
 * tests/test_wal_io.c compares it with the pair-at-a-time loop at every length. */
void mv_wal_checksum(int big_endian, const uint8_t *p, size_t n, uint32_t s[2])
{
    size_t pairs = n / 8;
    if (pairs < MV_WAL_CHECKSUM_SPLIT_PAIRS) {
        mv_wal_checksum_run(big_endian, p, pairs, s);
    } else if (big_endian) {
        mv_wal_checksum_4(1, p, pairs, s);
    } else {
        mv_wal_checksum_4(0, p, pairs, s);
    }
}

void mv_wal_checksum_simple(int big_endian, const uint8_t *p, size_t n, uint32_t s[2])
{
    mv_wal_checksum_run(big_endian, p, n / 8, s);
}

/* One step of the checksum is s0' = s0 + x0 + s1, s1' = s1 + x1 + s0': given s0', s1' and
 * the pair, s1 = s1' - x1 - s0' and then s0 = s0' - x0 - s1. Pairs are undone last first. */
void mv_wal_checksum_unwind(int big_endian, const uint8_t *p, size_t n, uint32_t s[2])
{
    uint32_t s0 = s[0], s1 = s[1];
    for (size_t i = n / 8; i-- > 0;) {
        s1 = s1 - mv_wal_word(big_endian, p + 8 * i + 4) - s0;
        s0 = s0 - mv_wal_word(big_endian, p + 8 * i) - s1;
    }
    s[0] = s0;
    s[1] = s1;
}

int mv_wal_header_rebuild(const uint8_t *frame1,
                          uint32_t page_size,
                          int big_endian,
                          uint8_t hdr[MV_WAL_HEADER_BYTES])
{
    /* The seed frame 1 chained from: its stored checksum with the frame summed back out. */
    uint32_t seed[2];
    mv_wal_frame_stored_checksum(frame1, seed);
    mv_wal_checksum_unwind(big_endian, frame1 + MV_WAL_FRAME_HEADER_BYTES, page_size, seed);
    mv_wal_checksum_unwind(big_endian, frame1, 8, seed);
    mv_put_be32(hdr, MV_WAL_MAGIC | (big_endian ? 1u : 0u));
    mv_put_be32(hdr + 4, MV_WAL_VERSION);
    mv_put_be32(hdr + 8, page_size);
    memset(hdr + 12, 0, 4);
    memcpy(hdr + 16, frame1 + 8, 8); /* the salts every frame repeats */
    mv_put_be32(hdr + 24, seed[0]);
    mv_put_be32(hdr + 28, seed[1]);
    /* The seed is the sum of bytes 0..23; all but the checkpoint sequence (12..15) are
     * known. Unwind the salts' pair, then solve the second pair (page size, sequence) for
     * the sequence: s0 after it must equal what magic, version and page size give. */
    uint32_t s[2] = {seed[0], seed[1]};
    mv_wal_checksum_unwind(big_endian, hdr + 16, 8, s);
    uint32_t a[2] = {0, 0};
    mv_wal_checksum_run(big_endian, hdr, 1, a);
    if (s[0] != a[0] + mv_wal_word(big_endian, hdr + 8) + a[1]) {
        return 0; /* no sequence number gives this seed: not this byte order or page size */
    }
    uint32_t seq = s[1] - a[1] - s[0];
    uint8_t word[4];
    if (big_endian) {
        mv_put_be32(word, seq);
    } else {
        word[0] = (uint8_t)seq;
        word[1] = (uint8_t)(seq >> 8);
        word[2] = (uint8_t)(seq >> 16);
        word[3] = (uint8_t)(seq >> 24);
    }
    memcpy(hdr + 12, word, 4);
    struct mv_wal_header check;
    return mv_wal_header_parse(hdr, &check);
}

int mv_wal_header_parse(const uint8_t hdr[MV_WAL_HEADER_BYTES], struct mv_wal_header *out)
{
    uint32_t magic = mv_get_be32(hdr);
    out->big_endian = (int)(magic & 1u);
    out->page_size = mv_get_be32(hdr + 8);
    out->checkpoint_seq = mv_get_be32(hdr + 12);
    memcpy(out->salts, hdr + 16, sizeof out->salts);
    out->checksum[0] = mv_get_be32(hdr + 24);
    out->checksum[1] = mv_get_be32(hdr + 28);
    uint32_t sum[2] = {0, 0};
    mv_wal_checksum(out->big_endian, hdr, 24, sum);
    uint32_t ps = out->page_size;
    return (magic & ~1u) == MV_WAL_MAGIC && mv_get_be32(hdr + 4) == MV_WAL_VERSION && ps >= 512 &&
           ps <= 65536 && (ps & (ps - 1)) == 0 && sum[0] == out->checksum[0] &&
           sum[1] == out->checksum[1];
}

void mv_wal_frame_stored_checksum(const uint8_t *frame, uint32_t out[2])
{
    out[0] = mv_get_be32(frame + 16);
    out[1] = mv_get_be32(frame + 20);
}

int mv_wal_frame_chains(const uint8_t *frame,
                        uint32_t page_size,
                        const struct mv_wal_header *wal,
                        const uint32_t seed[2])
{
    if (memcmp(frame + 8, wal->salts, sizeof wal->salts) != 0 || mv_get_be32(frame) == 0) {
        return 0;
    }
    uint32_t sum[2] = {seed[0], seed[1]};
    mv_wal_checksum(wal->big_endian, frame, 8, sum);
    mv_wal_checksum(wal->big_endian, frame + MV_WAL_FRAME_HEADER_BYTES, page_size, sum);
    return sum[0] == mv_get_be32(frame + 16) && sum[1] == mv_get_be32(frame + 20);
}

/* Reads n bytes at off: 1 if all were there, 0 if the file ends first, -1 on an error. */
static int mv_wal_read_at(int fd, uint8_t *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            return -1;
        }
        if (r == 0) {
            return 0;
        }
        got += (size_t)r;
    }
    return 1;
}

int mv_wal_walk_begin(struct mv_wal_walk *w, int fd, uint32_t expect_page_size)
{
    memset(w, 0, sizeof *w);
    w->fd = fd;
    struct stat st;
    uint8_t hdr[MV_WAL_HEADER_BYTES];
    if (fstat(fd, &st) != 0) {
        return -1;
    }
    w->file_bytes = (uint64_t)st.st_size;
    int r = mv_wal_read_at(fd, hdr, sizeof hdr, 0);
    if (r < 0) {
        return -1;
    }
    if (r == 0 || !mv_wal_header_parse(hdr, &w->hdr) ||
        (expect_page_size != 0 && w->hdr.page_size != expect_page_size)) {
        return 0; /* recovery ignores a WAL without a valid header */
    }
    size_t frame_bytes = (size_t)w->hdr.page_size + MV_WAL_FRAME_HEADER_BYTES;
    w->frame = malloc(frame_bytes);
    w->next_frame = malloc(frame_bytes);
    if (w->frame == NULL || w->next_frame == NULL) {
        errno = ENOMEM;
        return -1;
    }
    w->header_valid = 1;
    w->sum[0] = w->hdr.checksum[0];
    w->sum[1] = w->hdr.checksum[1];
    return 0;
}

/* Reads frame n into buf: 1, 0 if it is not all in the file, -1 on an error. */
static int mv_wal_walk_read(struct mv_wal_walk *w, uint64_t n, uint8_t *buf)
{
    size_t frame_bytes = (size_t)w->hdr.page_size + MV_WAL_FRAME_HEADER_BYTES;
    uint64_t off = mv_wal_frame_offset(n, w->hdr.page_size);
    if (off + frame_bytes > w->file_bytes) {
        return 0;
    }
    return mv_wal_read_at(w->fd, buf, frame_bytes, off);
}

int mv_wal_walk_next(struct mv_wal_walk *w)
{
    if (!w->header_valid) {
        return MV_WAL_STEP_END;
    }
    uint64_t n = w->frame_no + 1;
    int r = mv_wal_walk_read(w, n, w->frame);
    if (r < 0) {
        return MV_WAL_STEP_ERROR;
    }
    if (r == 0) {
        w->header_valid = 0; /* no whole frame left */
        return MV_WAL_STEP_END;
    }
    uint32_t page_size = w->hdr.page_size;
    int step = MV_WAL_STEP_FRAME;
    if (!mv_wal_frame_chains(w->frame, page_size, &w->hdr, w->sum)) {
        uint32_t stored[2];
        mv_wal_frame_stored_checksum(w->frame, stored);
        r = mv_wal_walk_read(w, n + 1, w->next_frame);
        if (r < 0) {
            return MV_WAL_STEP_ERROR;
        }
        if (r == 0 || !mv_wal_frame_chains(w->next_frame, page_size, &w->hdr, stored)) {
            w->header_valid = 0; /* the end of the log: nothing after it counts */
            return MV_WAL_STEP_END;
        }
        step = MV_WAL_STEP_BROKEN;
    }
    w->frame_no = n;
    w->pgno = mv_get_be32(w->frame);
    w->commit = mv_get_be32(w->frame + 4) != 0;
    mv_wal_frame_stored_checksum(w->frame, w->sum);
    if (step == MV_WAL_STEP_FRAME && w->commit) {
        w->last_commit = n;
        w->commits++;
    }
    return step;
}

void mv_wal_walk_end(struct mv_wal_walk *w)
{
    free(w->frame);
    free(w->next_frame);
    w->frame = w->next_frame = NULL;
    w->header_valid = 0;
}
