/*
 * store_blob.c -- message bytes: bodies and attachments, content-addressed and reference
 * counted, compressed with zstd when that pays.
 *
 * A body is a whole message as delivered, named by the SHA-256 of its bytes. Storing a
 * message whose digest is already there adds a reference and writes no bytes: that is how
 * COPY, MOVE and duplicate deliveries cost nothing. A new body is split: the large leaf
 * parts the parser found (store_parsed.parts, their encoded bytes exactly as in the message)
 * are cut out and stored as attachments, each named by the SHA-256 of its bytes and shared
 * by every body that contains the same bytes; what remains is the skeleton (headers, MIME
 * boundaries, small parts), stored in bodies_data. body_parts(body_id, seq, position,
 * attachment_id) says where each cut part goes back: position is its byte offset in the
 * reassembled message.
 *
 * Each stored BLOB is zstd at its fast level -1 (compression = 1; STORE_BLOB_ZSTD_LEVEL says
 * why) when that saves enough, else the bytes as they are (compression = 0): a skeleton when
 * it saves at least 10 %, an attachment only when it saves at least a third
 * (STORE_BLOB_SAVE_DIV_*). Most attachments are base64 of already-compressed files (images,
 * PDF, archives), which zstd brings down to ~76 % by undoing base64's 4-for-3 and no
 * further; unpacking that on every read cost more than reading the third more pages (issue
 * 13: zstd was ~35 % of mailvaultd's CPU for a FETCH of 50 random whole messages;
 * docs/BENCHMARKS.md, "Attachments stored as they are").
 *
 * IMPLEMENTATION NOTES
 *   Reassembly uses one buffer of the message's size and no other: the skeleton is first
 *   unpacked into the buffer's tail, then, part by part in seq order, the skeleton bytes
 *   before the part are moved down to their place and the part is unpacked after them.
 *   Placed bytes never overtake unmoved skeleton bytes, because out_pos + skeleton bytes
 *   left + parts left == size at every step; each step checks the bound it relies on, so a
 *   damaged row gives MV_ECORRUPT instead of a write out of bounds. The result must then
 *   have the recorded size and SHA-256.
 *   Unref drops body_parts with DELETE ... RETURNING, whose rows SQLite computes in full on
 *   the first step, so the attachments can be updated and deleted while stepping through
 *   them. bodies_data and attachments_data go by ON DELETE CASCADE (the store's profile
 *   turns foreign keys on and checks that it took).
 *   Memory: the message, its skeleton and one compressed copy at most; never more than one
 *   message. Besides, the full-text rows of the open transaction wait in s->fts_pending
 *   (a copy of their texts, at most STORE_FTS_PENDING_BYTES) until store_commit inserts
 *   them one after the other: a statement that opens a statement journal (INSERT INTO
 *   messages, for its trigger and foreign keys) makes FTS5 write out its pending terms as a
 *   segment of their own, so a row inserted with each message cost one segment, and later
 *   merges, per message: ~40% of an import's CPU (docs/BENCHMARKS.md, "The append path").
 *
 * LIMITATIONS
 *   One message is at most STORE_BLOB_SIZE_MAX bytes (SQLite's default maximum BLOB).
 */
#include "store/store_blob.h"
#include "crypto/crypt.h"
#include "store/store_keyed.h"
#include "vfs/vfs_hint.h"

#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

/* zstd's fast level -1, which leaves the literals uncompressed: unpacking a small level-3
 * frame is mostly the building of its Huffman and FSE tables, a fixed ~3.5 us a frame here.
 * Per frame of the 10k bench corpus' first bytes, level 3 against -1 in one run: 1 KB 3.7 /
 * 0.5 us, 3 KB 6.0 / 2.3, 8 KB 11.8 / 5.3; 58 KB 217 / 61 in another (a loaded machine).
 * Every whole-message read unpacks a skeleton's one to three frames and each compressed
 * attachment, a header listing the header's frame (issue 13: zstd was ~21% of mailvaultd's
 * CPU for a FETCH of 50 random whole messages). The price: compressed bytes ~1.4x those of
 * level 3 (the bench corpus' store +3.7%: its 10,000 skeletons 15.5 -> 22.1 MB, 3,440 text
 * attachments 22.3 -> 32.0 MB). A frame of any level reads the same: what was stored before
 * keeps its level-3 frames. */
#define STORE_BLOB_ZSTD_LEVEL   (-1)
#define STORE_BLOB_PACK_MIN     64 /* smaller BLOBs are never worth a zstd frame */
#define STORE_BLOB_NONE         0
#define STORE_BLOB_ZSTD         1
#define STORE_FTS_PENDING_BYTES (8u << 20) /* deferred full-text bytes held at most */
#define STORE_FTS_PENDING_ROWS  1024       /* deferred full-text rows held at most */

/* A body's first bytes after its header as a frame of their own when the rest is over twice
 * this (THE LEAD FRAME, store_blob_pack_with): what a client's preview reads. */
#define STORE_BLOB_LEAD 4096u

/* Compressed only if that saves at least 1/DIV of the bytes (see the top of the file). */
#define STORE_BLOB_SAVE_DIV_SKELETON   10
#define STORE_BLOB_SAVE_DIV_ATTACHMENT 3

/* A BLOB ready to store: either the caller's bytes or a compressed copy in owned. */
struct store_blob_packed {
    const uint8_t *data;
    size_t size;
    int compression;
    uint8_t *owned;
};

int store_blob_sha256(mv_store *s, const void *data, size_t len, uint8_t out[32])
{
    unsigned int out_len = 0;
    static const uint8_t empty = 0;
    if (EVP_Digest(len != 0 ? data : &empty, len, out, &out_len, EVP_sha256(), NULL) != 1 ||
        out_len != 32) {
        return store_fail(s, MV_ERROR, "SHA-256 failed (OpenSSL)");
    }
    return MV_OK;
}

/* The handle's compression context, made on first use (store.h says why it is kept). */
static ZSTD_CCtx *store_blob_cctx(mv_store *s)
{
    if (s->zstd_c == NULL) {
        s->zstd_c = ZSTD_createCCtx();
    }
    return s->zstd_c;
}

static ZSTD_DCtx *store_blob_dctx(mv_store *s)
{
    if (s->zstd_d == NULL) {
        s->zstd_d = ZSTD_createDCtx();
    }
    return s->zstd_d;
}

void store_blob_snapshot_end(mv_store *s)
{
    sqlite3_blob_close(s->header_blob); /* a no-op on NULL */
    s->header_blob = NULL;
}

void store_blob_release(mv_store *s)
{
    store_blob_snapshot_end(s);
    ZSTD_freeCCtx(s->zstd_c);
    ZSTD_freeDCtx(s->zstd_d);
    s->zstd_c = NULL;
    s->zstd_d = NULL;
}

size_t store_header_end(const uint8_t *raw, size_t len)
{
    /* An empty first line is an empty header block (RFC 5322 2.1: the header is optional;
     * RFC 3501 6.4.5: HEADER is then just that line and TEXT all the rest). */
    if (len >= 1 && raw[0] == '\n') {
        return 1;
    }
    if (len >= 2 && raw[0] == '\r' && raw[1] == '\n') {
        return 2;
    }
    for (const uint8_t *p = memchr(raw, '\n', len); p != NULL;
         p = memchr(p + 1, '\n', len - (size_t)(p + 1 - raw))) {
        size_t i = (size_t)(p - raw);
        if (i + 1 < len && raw[i + 1] == '\n') {
            return i + 2;
        }
        if (i + 2 < len && raw[i + 1] == '\r' && raw[i + 2] == '\n') {
            return i + 3;
        }
    }
    return len;
}

/* Compresses src[0, n) as one zstd frame, or as two when 0 < head < n: src[0, head) then
 * src[head, n), so the first head bytes can later be read and unpacked alone (a header fetch
 * touches only the pages of the first frame). THE LEAD FRAME: when more than twice
 * STORE_BLOB_LEAD bytes follow the header, its first STORE_BLOB_LEAD are a frame of their own
 * (src[head, head + lead), then the rest), so that a preview (a client's BODY[TEXT]<0.512>,
 * BODY[1]<0.256>) unpacks the header and those alone (store_body_prefix_keyed): a frame is
 * unpacked whole, and unpacking whole bodies was a third of a FETCH of 500 previews (issue
 * 13). Any reader takes any number of frames (store_blob_frames_size); the lead costs the
 * rest the lead's bytes as context, ~1% of a text body. Compressed only when that saves at least
 * n / save_div bytes overall: the output buffer is n - n / save_div, so zstd itself reports
 * "destination too small" when it does not. *head_stored_out (if not NULL) gets the stored
 * length of the first unit: the first frame's, or head itself when stored as is. With the
 * caller's cctx, without the handle (a drain's read-ahead calls it too): MV_OK, MV_ENOMEM or
 * MV_ERROR (*zstd_error: zstd's name for it). */
static int store_blob_pack_with(ZSTD_CCtx *cctx,
                                const uint8_t *src,
                                size_t n,
                                size_t head,
                                size_t save_div,
                                struct store_blob_packed *out,
                                size_t *head_stored_out,
                                const char **zstd_error)
{
    out->data = src;
    out->size = n;
    out->compression = STORE_BLOB_NONE;
    out->owned = NULL;
    if (head == 0 || head > n) {
        head = n;
    }
    if (head_stored_out != NULL) {
        *head_stored_out = head;
    }
    if (n < STORE_BLOB_PACK_MIN) {
        return MV_OK;
    }
    size_t cap = n - n / save_div;
    uint8_t *buf = cctx != NULL ? malloc(cap) : NULL;
    if (buf == NULL) {
        return MV_ENOMEM;
    }
    size_t first = ZSTD_compressCCtx(cctx, buf, cap, src, head, STORE_BLOB_ZSTD_LEVEL);
    size_t got = first;
    size_t lead = n - head > 2 * STORE_BLOB_LEAD ? STORE_BLOB_LEAD : 0;
    if (!ZSTD_isError(got) && lead > 0) {
        size_t second =
            ZSTD_compressCCtx(cctx, buf + got, cap - got, src + head, lead, STORE_BLOB_ZSTD_LEVEL);
        got = ZSTD_isError(second) ? second : got + second;
    }
    if (!ZSTD_isError(got) && head + lead < n) {
        size_t rest = ZSTD_compressCCtx(cctx, buf + got, cap - got, src + head + lead,
                                        n - head - lead, STORE_BLOB_ZSTD_LEVEL);
        got = ZSTD_isError(rest) ? rest : got + rest;
    }
    if (ZSTD_isError(got)) {
        crypt_free_wiped(buf);
        if (ZSTD_getErrorCode(got) == ZSTD_error_dstSize_tooSmall) {
            return MV_OK; /* saves too little: store as is */
        }
        *zstd_error = ZSTD_getErrorName(got);
        return MV_ERROR;
    }
    out->data = buf;
    out->size = got;
    out->compression = STORE_BLOB_ZSTD;
    out->owned = buf;
    if (head_stored_out != NULL) {
        *head_stored_out = first;
    }
    return MV_OK;
}

/* store_blob_pack_with() with the handle's context; a failure sets the handle's message. */
static int store_blob_pack(mv_store *s,
                           const uint8_t *src,
                           size_t n,
                           size_t head,
                           size_t save_div,
                           struct store_blob_packed *out,
                           size_t *head_stored_out)
{
    const char *zstd_error = "";
    int rc = store_blob_pack_with(n < STORE_BLOB_PACK_MIN ? NULL : store_blob_cctx(s), src, n, head,
                                  save_div, out, head_stored_out, &zstd_error);
    if (rc == MV_ENOMEM) {
        return store_fail(s, MV_ENOMEM, "out of memory compressing %zu bytes", n);
    }
    if (rc != MV_OK) {
        return store_fail(s, MV_ERROR, "zstd compression failed: %s", zstd_error);
    }
    return MV_OK;
}

int store_blob_prepack(ZSTD_CCtx *cctx,
                       const uint8_t *raw,
                       size_t len,
                       const struct store_parsed *p,
                       struct store_blob_prepacked *out)
{
    memset(out, 0, sizeof *out);
    if (p->part_count != 0 || len > STORE_BLOB_SIZE_MAX || cctx == NULL) {
        return MV_OK; /* a skeleton without its parts: store_body_put() makes it */
    }
    struct store_blob_packed blob;
    const char *zstd_error = "";
    size_t head = store_header_end(raw, len), head_stored = 0;
    int rc = store_blob_pack_with(cctx, raw, len, head, STORE_BLOB_SAVE_DIV_SKELETON, &blob,
                                  &head_stored, &zstd_error);
    if (rc == MV_OK) {
        out->ready = 1;
        out->data = blob.owned; /* NULL: stored as is */
        out->size = blob.size;
        out->len = len;
        out->head = head;
        out->head_stored = head_stored;
        out->compression = blob.compression;
    }
    return rc;
}

static _Atomic uint64_t store_blob_prepacked_count;

uint64_t store_blob_prepacked_stored(void)
{
    return atomic_load(&store_blob_prepacked_count);
}

void store_blob_prepacked_free(struct store_blob_prepacked *p)
{
    crypt_free_wiped(p->data); /* compressed mail: wiped like the rest */
    memset(p, 0, sizeof *p);
}

/* The content size of the zstd frames in src, one after the other (a body's skeleton may be
 * two or three: header, lead, rest). ZSTD_CONTENTSIZE_ERROR if src is not a whole number of frames
 * that record their size. zstd's own ZSTD_findDecompressedSize() does this but is outside its
 * stable API (ZSTD_STATIC_LINKING_ONLY), so it is walked here with the stable calls. */
static unsigned long long store_blob_frames_size(const void *src, size_t src_len)
{
    const uint8_t *p = src;
    unsigned long long total = 0;
    while (src_len > 0) {
        unsigned long long content = ZSTD_getFrameContentSize(p, src_len);
        size_t frame = ZSTD_findFrameCompressedSize(p, src_len);
        if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
            ZSTD_isError(frame) || frame > src_len || content > STORE_BLOB_SIZE_MAX - total) {
            return ZSTD_CONTENTSIZE_ERROR;
        }
        total += content;
        p += frame;
        src_len -= frame;
    }
    return total;
}

/* Unpacks a stored BLOB into exactly dst_len bytes at dst. what/id name it in messages. */
static int store_blob_unpack(mv_store *s,
                             const char *what,
                             int64_t id,
                             int compression,
                             const void *src,
                             size_t src_len,
                             uint8_t *dst,
                             size_t dst_len)
{
    if (compression == STORE_BLOB_NONE) {
        if (src_len != dst_len) {
            return store_fail(s, MV_ECORRUPT, "%s %lld: %zu bytes stored, %zu expected", what,
                              (long long)id, src_len, dst_len);
        }
        if (dst_len != 0) {
            memcpy(dst, src, dst_len);
        }
        return MV_OK;
    }
    if (compression != STORE_BLOB_ZSTD || src_len == 0) {
        return store_fail(s, MV_ECORRUPT, "%s %lld: unknown compression %d or empty frame", what,
                          (long long)id, compression);
    }
    /* A body's skeleton may be several frames (header, lead, rest): count them all. */
    unsigned long long frames = store_blob_frames_size(src, src_len);
    if (frames == ZSTD_CONTENTSIZE_ERROR || frames == ZSTD_CONTENTSIZE_UNKNOWN ||
        frames != (unsigned long long)dst_len) {
        return store_fail(s, MV_ECORRUPT, "%s %lld: bad zstd frame header (%zu bytes expected)",
                          what, (long long)id, dst_len);
    }
    ZSTD_DCtx *dctx = store_blob_dctx(s);
    if (dctx == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory for a zstd context");
    }
    size_t got = ZSTD_decompressDCtx(dctx, dst, dst_len, src, src_len);
    if (ZSTD_isError(got) || got != dst_len) {
        return store_fail(s, MV_ECORRUPT, "%s %lld: zstd frame does not decompress: %s", what,
                          (long long)id, ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
    }
    return MV_OK;
}

/* The size a stored BLOB unpacks to. */
static int store_blob_unpacked_size(mv_store *s,
                                    const char *what,
                                    int64_t id,
                                    int compression,
                                    const void *src,
                                    size_t src_len,
                                    size_t *size_out)
{
    if (compression == STORE_BLOB_NONE) {
        *size_out = src_len;
        return MV_OK;
    }
    unsigned long long frame = compression == STORE_BLOB_ZSTD && src_len != 0
                                   ? store_blob_frames_size(src, src_len)
                                   : ZSTD_CONTENTSIZE_ERROR;
    if (frame == ZSTD_CONTENTSIZE_ERROR || frame == ZSTD_CONTENTSIZE_UNKNOWN ||
        frame > STORE_BLOB_SIZE_MAX) {
        return store_fail(s, MV_ECORRUPT, "%s %lld: bad compression %d or zstd frame header", what,
                          (long long)id, compression);
    }
    *size_out = (size_t)frame;
    return MV_OK;
}

/* Steps a statement that returns no rows, resets it; MV_OK or the SQLite failure. */
static int store_blob_step_done(mv_store *s, sqlite3_stmt *st, const char *what)
{
    int step = sqlite3_step(st);
    int rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, what);
    sqlite3_reset(st);
    return rc;
}

/* Runs sql (a literal with one integer parameter, no rows) for id. */
static int store_blob_exec_id(mv_store *s, const char *sql, int64_t id, const char *what)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, what);
    }
    sqlite3_bind_int64(st, 1, id);
    return store_blob_step_done(s, st, what);
}

/* Looks up the id of a digest with sql ("SELECT id FROM x WHERE sha256 = ?"): MV_OK and
 * *id_out, MV_ENOTFOUND (no message set), or an SQLite error. */
static int store_blob_find(mv_store *s, const char *sql, const uint8_t digest[32], int64_t *id_out)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, "looking up a digest");
    }
    sqlite3_bind_blob(st, 1, digest, 32, SQLITE_STATIC);
    int step = sqlite3_step(st);
    int rc = MV_ENOTFOUND;
    if (step == SQLITE_ROW) {
        *id_out = sqlite3_column_int64(st, 0);
        rc = MV_OK;
    } else if (step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "looking up a digest");
    }
    sqlite3_reset(st);
    return rc;
}

/* Inserts the BLOB row (id, data) with sql ("INSERT INTO x_data(id, data) VALUES (?, ?)"). */
static int store_blob_insert_data(mv_store *s,
                                  const char *sql,
                                  int64_t id,
                                  const struct store_blob_packed *blob)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, "storing message bytes");
    }
    sqlite3_bind_int64(st, 1, id);
    if (blob->size == 0) {
        sqlite3_bind_zeroblob(st, 2, 0); /* a NULL pointer would bind NULL */
    } else {
        sqlite3_bind_blob64(st, 2, blob->data, blob->size, SQLITE_STATIC);
    }
    return store_blob_step_done(s, st, "storing message bytes");
}

void store_part_count(const uint8_t *bytes, size_t n, uint64_t *lines, uint64_t *marks)
{
    *lines = 0;
    *marks = 0;
    for (size_t at = 0; at < n;) {
        const uint8_t *nl = memchr(bytes + at, '\n', n - at);
        size_t end = nl != NULL ? (size_t)(nl - bytes) + 1 : n;
        int dashes = end - at >= 2 && bytes[at] == '-' && bytes[at + 1] == '-';
        int colon = bytes[at] != ' ' && bytes[at] != '\t' && memchr(bytes + at, ':', end - at);
        *lines += nl != NULL;
        *marks += dashes || colon;
        at = end;
    }
}

int store_attachment_recount(mv_store *s, int64_t id, uint64_t *lines, uint64_t *marks, int *differ)
{
    sqlite3_stmt *st =
        store_stmt(s, "SELECT a.size, a.compression, d.data, a.lines, a.marks FROM attachments a "
                      "LEFT JOIN attachments_data d ON d.id = a.id WHERE a.id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading an attachment");
    }
    sqlite3_bind_int64(st, 1, id);
    int rc = MV_OK, step = sqlite3_step(st);
    uint8_t *bytes = NULL;
    size_t size = 0;
    if (step != SQLITE_ROW) {
        rc = step == SQLITE_DONE
                 ? store_fail(s, MV_ENOTFOUND, "attachment %lld is missing", (long long)id)
                 : store_fail_sqlite(s, "reading an attachment");
    } else if (sqlite3_column_int64(st, 0) < 0 ||
               sqlite3_column_int64(st, 0) > (sqlite3_int64)STORE_BLOB_SIZE_MAX ||
               sqlite3_column_type(st, 2) == SQLITE_NULL) {
        rc = store_fail(s, MV_ECORRUPT, "attachment %lld: a bad size or no bytes", (long long)id);
    } else {
        size = (size_t)sqlite3_column_int64(st, 0);
        bytes = malloc(size != 0 ? size : 1);
        rc = bytes == NULL ? store_fail(s, MV_ENOMEM, "out of memory reading an attachment")
                           : store_blob_unpack(s, "attachment", id, sqlite3_column_int(st, 1),
                                               sqlite3_column_blob(st, 2),
                                               (size_t)sqlite3_column_bytes(st, 2), bytes, size);
    }
    if (rc == MV_OK) {
        store_part_count(bytes, size, lines, marks);
        *differ = sqlite3_column_type(st, 3) == SQLITE_NULL ||
                  sqlite3_column_type(st, 4) == SQLITE_NULL ||
                  (uint64_t)sqlite3_column_int64(st, 3) != *lines ||
                  (uint64_t)sqlite3_column_int64(st, 4) != *marks;
    }
    sqlite3_reset(st);
    crypt_free_wiped(bytes);
    return rc;
}

int store_attachment_counts_set(mv_store *s, int64_t id, uint64_t lines, uint64_t marks)
{
    sqlite3_stmt *st = store_stmt(s, "UPDATE attachments SET lines = ?, marks = ? WHERE id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting an attachment");
    }
    sqlite3_bind_int64(st, 1, (sqlite3_int64)lines);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)marks);
    sqlite3_bind_int64(st, 3, id);
    int rc =
        sqlite3_step(st) == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "counting an attachment");
    sqlite3_reset(st);
    return rc;
}

/* Stores one attachment (bytes of a cut part) or adds a reference to the same bytes. Its line
 * counts (store_part_count, schema version 15) are written with it, and given to a row stored
 * before version 15 when the same bytes come again. */
static int store_attachment_put(mv_store *s, const uint8_t *bytes, size_t n, int64_t *id_out)
{
    uint8_t digest[32];
    uint64_t lines = 0, marks = 0;
    store_part_count(bytes, n, &lines, &marks);
    int rc = store_blob_sha256(s, bytes, n, digest);
    if (rc == MV_OK) {
        rc = store_blob_find(s, "SELECT id FROM attachments WHERE sha256 = ?", digest, id_out);
    }
    if (rc == MV_OK) {
        sqlite3_stmt *st = store_stmt(s, "UPDATE attachments SET refcount = refcount + 1, "
                                         "lines = coalesce(lines, ?2), marks = coalesce(marks, ?3) "
                                         "WHERE id = ?1");
        if (st == NULL) {
            return store_fail_sqlite(s, "referencing an attachment");
        }
        sqlite3_bind_int64(st, 1, *id_out);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)lines);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)marks);
        return store_blob_step_done(s, st, "referencing an attachment");
    }
    if (rc != MV_ENOTFOUND) {
        return rc;
    }
    struct store_blob_packed blob;
    rc = store_blob_pack(s, bytes, n, 0, STORE_BLOB_SAVE_DIV_ATTACHMENT, &blob, NULL);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st =
        store_stmt(s, "INSERT INTO attachments(sha256, refcount, size, stored_size, compression, "
                      "lines, marks) VALUES (?, 1, ?, ?, ?, ?, ?)");
    if (st == NULL) {
        rc = store_fail_sqlite(s, "storing an attachment");
        goto cleanup;
    }
    sqlite3_bind_blob(st, 1, digest, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)n);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)blob.size);
    sqlite3_bind_int(st, 4, blob.compression);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)lines);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)marks);
    rc = store_blob_step_done(s, st, "storing an attachment");
    if (rc == MV_OK) {
        *id_out = sqlite3_last_insert_rowid(s->db);
        rc = store_blob_insert_data(s, "INSERT INTO attachments_data(id, data) VALUES (?, ?)",
                                    *id_out, &blob);
    }
cleanup:
    crypt_free_wiped(blob.owned);
    return rc;
}

/* Checks the parser's ranges: inside the message, non-empty, ascending, disjoint. Returns
 * the number of bytes they cover. */
static int
store_body_parts_check(mv_store *s, size_t len, const struct store_parsed *p, size_t *cut_out)
{
    uint64_t prev_end = 0, cut = 0;
    for (size_t i = 0; i < p->part_count; i++) {
        const struct store_part_range *r = &p->parts[i];
        /* (1) non-empty, (2) after the previous part, (3) inside the message */
        if (r->start >= r->end || r->start < prev_end || r->end > len) {
            return store_fail(s, MV_ERROR,
                              "the parser returned a bad part range %zu "
                              "[%llu, %llu) for a message of %zu bytes",
                              i, (unsigned long long)r->start, (unsigned long long)r->end, len);
        }
        cut += r->end - r->start;
        prev_end = r->end;
    }
    *cut_out = (size_t)cut;
    return MV_OK;
}

/* The message with its parts cut out, into a new buffer of len - cut bytes (at least 1). */
static int store_body_skeleton(mv_store *s,
                               const uint8_t *raw,
                               size_t len,
                               const struct store_parsed *p,
                               size_t cut,
                               uint8_t **out)
{
    size_t skeleton_len = len - cut;
    uint8_t *buf = malloc(skeleton_len != 0 ? skeleton_len : 1);
    if (buf == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory splitting a message of %zu bytes", len);
    }
    size_t at = 0, from = 0;
    for (size_t i = 0; i < p->part_count; i++) {
        size_t start = (size_t)p->parts[i].start;
        memcpy(buf + at, raw + from, start - from);
        at += start - from;
        from = (size_t)p->parts[i].end;
    }
    memcpy(buf + at, raw + from, len - from);
    *out = buf;
    return MV_OK;
}

/* Inserts the bodies row and its skeleton; *id_out is the new body id. head: the header's
 * length when the skeleton starts with the whole header (store_header_end), else 0; the
 * header then goes into a unit of its own and header_stored records its stored length. */
static int store_body_insert(mv_store *s,
                             const uint8_t *skeleton,
                             size_t skeleton_len,
                             size_t head,
                             size_t len,
                             const uint8_t digest[32],
                             int32_t sent_zone,
                             const struct store_blob_prepacked *pre,
                             int64_t *id_out)
{
    struct store_blob_packed blob;
    size_t head_stored = 0;
    int rc = MV_OK;
    if (pre != NULL) { /* compressed ahead, from the same bytes (store_body_put checked) */
        atomic_fetch_add(&store_blob_prepacked_count, 1);
        blob.data = pre->data != NULL ? pre->data : skeleton;
        blob.size = pre->size;
        blob.compression = pre->compression;
        blob.owned = NULL; /* the caller's */
        head_stored = pre->head_stored;
    } else {
        rc = store_blob_pack(s, skeleton, skeleton_len, head, STORE_BLOB_SAVE_DIV_SKELETON, &blob,
                             &head_stored);
    }
    if (rc != MV_OK) {
        return rc;
    }
    /* bodies.refcount is not used since version 12 (body_refs holds the count): 0 */
    sqlite3_stmt *st = store_stmt(s, "INSERT INTO bodies(sha256, refcount, size, stored_size, "
                                     "compression, header_stored, sent_zone, head) "
                                     "VALUES (?, 0, ?, ?, ?, ?, ?, ?)");
    if (st == NULL) {
        rc = store_fail_sqlite(s, "storing a message body");
        goto cleanup;
    }
    sqlite3_bind_blob(st, 1, digest, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)len);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)blob.size);
    sqlite3_bind_int(st, 4, blob.compression);
    sqlite3_bind_int64(st, 5, head != 0 ? (sqlite3_int64)head_stored : 0);
    sqlite3_bind_int(st, 6, sent_zone);
    /* The header unit again in the row (bodies.head) whenever the skeleton holds more than
     * its header: a header read is then this row alone, never the skeleton's (docs/SCHEMA.md,
     * "Version 11"). */
    if (head != 0 && blob.size > head_stored && head_stored > 0 &&
        head_stored <= STORE_BLOB_HEAD_COPY_MAX) {
        sqlite3_bind_blob(st, 7, blob.data, (int)head_stored, SQLITE_STATIC);
    } else {
        sqlite3_bind_null(st, 7);
    }
    rc = store_blob_step_done(s, st, "storing a message body");
    if (rc == MV_OK) {
        *id_out = sqlite3_last_insert_rowid(s->db);
        /* OR REPLACE: a count left without its body (damage; mv_store_check names it) is
         * not this new body's */
        rc = store_blob_exec_id(s, "INSERT OR REPLACE INTO body_refs(id, refcount) VALUES (?, 1)",
                                *id_out, "counting a body's references");
    }
    if (rc == MV_OK) {
        rc = store_blob_insert_data(s, "INSERT INTO bodies_data(id, data) VALUES (?, ?)", *id_out,
                                    &blob);
    }
cleanup:
    crypt_free_wiped(blob.owned);
    return rc;
}

/* Stores each cut part as an attachment and records where it goes back in. */
static int store_body_insert_parts(mv_store *s,
                                   int64_t body_id,
                                   const uint8_t *raw,
                                   const struct store_parsed *p)
{
    for (size_t i = 0; i < p->part_count; i++) {
        const struct store_part_range *r = &p->parts[i];
        int64_t attachment_id = 0;
        int rc =
            store_attachment_put(s, raw + r->start, (size_t)(r->end - r->start), &attachment_id);
        if (rc != MV_OK) {
            return rc;
        }
        sqlite3_stmt *st = store_stmt(s, "INSERT INTO body_parts(body_id, seq, position, "
                                         "attachment_id) VALUES (?, ?, ?, ?)");
        if (st == NULL) {
            return store_fail_sqlite(s, "storing a body part");
        }
        sqlite3_bind_int64(st, 1, body_id);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)i);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)r->start);
        sqlite3_bind_int64(st, 4, attachment_id);
        rc = store_blob_step_done(s, st, "storing a body part");
        if (rc != MV_OK) {
            return rc;
        }
    }
    return MV_OK;
}

/* A body's full-text row: rowid = body id, so copies share it. header is every field
 * (SEARCH TEXT), body the decoded text (SEARCH BODY); see store_search.c. */
static int store_fts_insert(mv_store *s, int64_t body_id, const char *header, const char *body)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT INTO fts(rowid, header, body) VALUES (?1, ?2, ?3)");
    if (st == NULL) {
        return store_fail_sqlite(s, "indexing a message");
    }
    sqlite3_bind_int64(st, 1, body_id);
    sqlite3_bind_text(st, 2, header != NULL ? header : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, body != NULL ? body : "", -1, SQLITE_STATIC);
    return store_blob_step_done(s, st, "indexing a message");
}

void store_fts_pending_discard(mv_store *s)
{
    struct store_fts_pending *q = &s->fts_pending;
    for (size_t i = 0; i < q->count; i++) {
        crypt_free_wiped(q->rows[i].header);
        crypt_free_wiped(q->rows[i].body);
    }
    free(q->rows);
    memset(q, 0, sizeof *q);
}

int store_fts_pending_flush(mv_store *s)
{
    struct store_fts_pending *q = &s->fts_pending;
    int rc = MV_OK;
    for (size_t i = 0; rc == MV_OK && i < q->count; i++) {
        rc = store_fts_insert(s, q->rows[i].rowid, q->rows[i].header, q->rows[i].body);
    }
    store_fts_pending_discard(s);
    return rc;
}

static char *store_fts_dup(const char *text, size_t *bytes)
{
    size_t n = text != NULL ? strlen(text) : 0;
    char *copy = malloc(n + 1);
    if (copy != NULL) {
        if (n != 0) {
            memcpy(copy, text, n);
        }
        copy[n] = '\0';
        *bytes += n;
    }
    return copy;
}

/* The body's full-text row, deferred to the end of the transaction (store.h says why): a
 * copy of the texts joins s->fts_pending. Past STORE_FTS_PENDING_BYTES or _ROWS the rows
 * held so far are inserted now, which bounds the memory (FTS5 itself writes its pending
 * terms out every ~1 MB anyway). */
int store_body_index(mv_store *s, int64_t body_id, const struct store_parsed *p)
{
    struct store_fts_pending *q = &s->fts_pending;
    if (q->bytes >= STORE_FTS_PENDING_BYTES || q->count >= STORE_FTS_PENDING_ROWS) {
        int rc = store_fts_pending_flush(s);
        if (rc != MV_OK) {
            return rc;
        }
    }
    if (q->count == q->cap) {
        size_t cap = q->cap != 0 ? 2 * q->cap : 16;
        struct store_fts_row *rows = realloc(q->rows, cap * sizeof *rows);
        if (rows == NULL) {
            return store_fail(s, MV_ENOMEM, "out of memory indexing a message");
        }
        q->rows = rows;
        q->cap = cap;
    }
    struct store_fts_row *row = &q->rows[q->count];
    row->rowid = body_id;
    row->header = store_fts_dup(p->header_text, &q->bytes);
    row->body = store_fts_dup(p->text, &q->bytes);
    if (row->header == NULL || row->body == NULL) {
        crypt_free_wiped(row->header);
        crypt_free_wiped(row->body);
        return store_fail(s, MV_ENOMEM, "out of memory indexing a message");
    }
    q->count++;
    return MV_OK;
}

int store_body_index_again(mv_store *s, int64_t body_id, const struct store_parsed *p)
{
    int rc = store_fts_insert(s, body_id, p->header_text, p->text);
    sqlite3_stmt *st =
        rc == MV_OK ? store_stmt(s, "UPDATE bodies SET sent_zone = ?1 WHERE id = ?2") : NULL;
    if (rc == MV_OK && st == NULL) {
        return store_fail_sqlite(s, "indexing a message");
    }
    if (rc == MV_OK) {
        sqlite3_bind_int(st, 1, p->sent_zone);
        sqlite3_bind_int64(st, 2, body_id);
        rc = store_blob_step_done(s, st, "indexing a message");
    }
    return rc;
}

int store_body_put(mv_store *s,
                   const uint8_t *raw,
                   size_t len,
                   const uint8_t *sha256,
                   const struct store_parsed *parsed,
                   int64_t *body_id_out)
{
    static const uint8_t empty = 0;
    uint8_t digest[32];
    uint8_t *skeleton = NULL;
    size_t cut = 0;
    if (len > STORE_BLOB_SIZE_MAX) {
        return store_fail(s, MV_ELIMIT,
                          "a message of %zu bytes is over the store's maximum "
                          "of %u bytes",
                          len, STORE_BLOB_SIZE_MAX);
    }
    raw = len != 0 ? raw : &empty;
    int rc = MV_OK;
    if (sha256 != NULL) {
        memcpy(digest, sha256, sizeof digest);
    } else {
        rc = store_blob_sha256(s, raw, len, digest);
    }
    if (rc == MV_OK) {
        rc = store_blob_find(s, "SELECT id FROM bodies WHERE sha256 = ?", digest, body_id_out);
    }
    if (rc == MV_OK) {
        return store_body_ref(s, *body_id_out); /* the same bytes: one more reference */
    }
    if (rc != MV_ENOTFOUND) {
        return rc;
    }
    rc = store_body_parts_check(s, len, parsed, &cut);
    if (rc == MV_OK) {
        rc = store_body_skeleton(s, raw, len, parsed, cut, &skeleton);
    }
    /* The header is a unit of its own only when no cut part starts inside it (a parser
     * quirk on malformed mail could put one there): then skeleton and message share it. */
    size_t head = store_header_end(raw, len);
    if (parsed->part_count > 0 && parsed->parts[0].start < head) {
        head = 0;
    }
    /* compressed ahead (a drain's read-ahead) from these very bytes, as it would be here */
    const struct store_blob_prepacked *pre = parsed->prepacked;
    if (pre != NULL && !(pre->ready && cut == 0 && pre->len == len && pre->head == head &&
                         (pre->data != NULL || pre->size == len))) {
        pre = NULL;
    }
    if (rc == MV_OK) {
        rc = store_body_insert(s, skeleton, len - cut, head, len, digest, parsed->sent_zone, pre,
                               body_id_out);
    }
    crypt_free_wiped(skeleton); /* before the parts: at most one copy of the message besides raw */
    if (rc == MV_OK) {
        rc = store_body_insert_parts(s, *body_id_out, raw, parsed);
    }
    if (rc == MV_OK) {
        /* a stepped drain's body: its row comes later (store_fts_backlog.c) */
        rc = s->fts_defer ? store_fts_backlog_add(s, *body_id_out)
                          : store_body_index(s, *body_id_out, parsed);
    }
    return rc;
}

int store_body_ref(mv_store *s, int64_t body_id)
{
    /* An upsert: a body without its count's row (mv_store_check's "no reference count") is
     * used again, with a row, not refused (the caller found the body by its digest). */
    return store_blob_exec_id(s,
                              "INSERT INTO body_refs(id, refcount) VALUES (?, 1) "
                              "ON CONFLICT (id) DO UPDATE SET refcount = refcount + 1",
                              body_id, "referencing a message body");
}

/* Decrements a refcount with sql ("UPDATE x ... RETURNING refcount"); *left gets the count. */
static int
store_blob_decrement(mv_store *s, const char *sql, int64_t id, const char *what, int64_t *left)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, what);
    }
    sqlite3_bind_int64(st, 1, id);
    int step = sqlite3_step(st);
    int rc = MV_OK;
    if (step == SQLITE_ROW) {
        *left = sqlite3_column_int64(st, 0);
        step = sqlite3_step(st);
    } else if (step == SQLITE_DONE) {
        rc = store_fail(s, MV_ECORRUPT, "%s: %lld does not exist", what, (long long)id);
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, what);
    }
    sqlite3_reset(st);
    return rc;
}

static int store_attachment_unref(mv_store *s, int64_t attachment_id)
{
    int64_t left = 0;
    int rc = store_blob_decrement(s,
                                  "UPDATE attachments SET refcount = refcount - 1 "
                                  "WHERE id = ? RETURNING refcount",
                                  attachment_id, "dropping an attachment", &left);
    if (rc == MV_OK && left == 0) {
        rc = store_blob_exec_id(s, "DELETE FROM attachments WHERE id = ?", attachment_id,
                                "deleting an attachment"); /* cascades to attachments_data */
    }
    return rc;
}

/* Reassembly state: out has size bytes; out[0, pos) is final; the skeleton_left skeleton
 * bytes not yet placed sit at the tail, out[size - skeleton_left, size). */
struct store_body_build {
    int64_t body_id;
    uint8_t *out;
    size_t size;
    size_t pos;
    size_t skeleton_left;
    /* Where out comes from: NULL, malloc (owned, freed on failure); else place(place_arg,
     * size), the caller's memory (store_message_body_place). */
    void *(*place)(void *arg, size_t size);
    void *place_arg;
};

/* Frees b->out if it is the build's own. */
static void store_body_build_drop(struct store_body_build *b)
{
    if (b->place == NULL) {
        crypt_free_wiped(b->out);
    }
    b->out = NULL;
}

/* Moves the next n skeleton bytes from the tail down to pos. */
static void store_body_move_skeleton(struct store_body_build *b, size_t n)
{
    memmove(b->out + b->pos, b->out + (b->size - b->skeleton_left), n);
    b->pos += n;
    b->skeleton_left -= n;
}

/* Moves *blob (opened on the first part) to attachment_id's data row. */
static int store_body_part_blob(mv_store *s, sqlite3_blob **blob, int64_t attachment_id)
{
    int rc = *blob == NULL ? sqlite3_blob_open(s->db, "main", "attachments_data", "data",
                                               attachment_id, 0, blob)
                           : sqlite3_blob_reopen(*blob, attachment_id);
    if (rc == SQLITE_OK) {
        return MV_OK;
    }
    return rc == SQLITE_ERROR
               ? store_fail(s, MV_ECORRUPT, "attachment %lld: its data row is missing",
                            (long long)attachment_id)
               : store_fail_sqlite(s, "reading an attachment");
}

/* A stored BLOB longer than this may have an overflow chain (a 4 KiB page's cell holds less). */
#define STORE_BLOB_CHAIN_MIN 3500

/* Reads the length of row id's BLOB (length_sql: one leaf, no overflow page) and tells the
 * VFS that the next page read from the file starts its chain (vfs_hint.h), so the chain is
 * read from the disk in one request, and no further. The caller takes the hint back after
 * reading the BLOB. Nothing fails here: without the length there is no hint. */
static void store_blob_hint_chain(mv_store *s, const char *length_sql, int64_t id)
{
    sqlite3_stmt *st = store_stmt(s, length_sql);
    if (st == NULL) {
        return;
    }
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW) {
        mv_db_read_ahead_hint(s->db, sqlite3_column_int64(st, 0));
    }
    sqlite3_reset(st);
}

/* Places one attachment row (position, size, compression, stored length, id) at its
 * position. Its bytes come through SQLite's incremental BLOB I/O (*blob, moved from part to
 * part): an attachment stored as it is goes from SQLite's pages straight to its place in the
 * message, without a column value's copy of its own (issue 13: that copy, its malloc and
 * page faults were ~5% of the CPU of a FETCH of 50 random whole messages). */
static int store_body_place_part(mv_store *s,
                                 struct store_body_build *b,
                                 sqlite3_stmt *st,
                                 sqlite3_blob **blob)
{
    sqlite3_int64 position = sqlite3_column_int64(st, 0);
    sqlite3_int64 part_size = sqlite3_column_int64(st, 1);
    int compression = sqlite3_column_int(st, 2);
    sqlite3_int64 stored = sqlite3_column_int64(st, 3);
    int64_t attachment_id = sqlite3_column_int64(st, 4);
    /* (1) the part starts at or after what is placed, (2) the skeleton holds the bytes in
     * between, (3) the part ends before the skeleton bytes not yet moved. */
    if (sqlite3_column_type(st, 1) == SQLITE_NULL || sqlite3_column_type(st, 3) == SQLITE_NULL ||
        position < (sqlite3_int64)b->pos || (uint64_t)position - b->pos > b->skeleton_left ||
        part_size < 0 || stored < 0 || stored > (sqlite3_int64)STORE_BLOB_SIZE_MAX) {
        return store_fail(s, MV_ECORRUPT, "body %lld: attachment %lld is missing or misplaced",
                          (long long)b->body_id, (long long)attachment_id);
    }
    store_body_move_skeleton(b, (size_t)position - b->pos);
    if ((uint64_t)part_size > b->size - b->skeleton_left - b->pos) {
        return store_fail(s, MV_ECORRUPT,
                          "body %lld: attachment %lld (%lld bytes) overruns the "
                          "message size %zu",
                          (long long)b->body_id, (long long)attachment_id, (long long)part_size,
                          b->size);
    }
    int rc = store_body_part_blob(s, blob, attachment_id);
    if (rc == MV_OK && sqlite3_blob_bytes(*blob) != stored) {
        rc = store_fail(s, MV_ECORRUPT, "attachment %lld: %d bytes stored, %lld recorded",
                        (long long)attachment_id, sqlite3_blob_bytes(*blob), (long long)stored);
    }
    if (rc == MV_OK) {
        mv_db_read_ahead_hint(s->db, stored); /* the handle has the row: next, its chain */
    }
    if (rc == MV_OK && compression == STORE_BLOB_NONE) {
        if (stored != part_size) {
            rc = store_fail(s, MV_ECORRUPT, "attachment %lld: %lld bytes stored, %lld expected",
                            (long long)attachment_id, (long long)stored, (long long)part_size);
        } else if (part_size > 0 &&
                   sqlite3_blob_read(*blob, b->out + b->pos, (int)part_size, 0) != SQLITE_OK) {
            rc = store_fail_sqlite(s, "reading an attachment");
        }
    } else if (rc == MV_OK) {
        uint8_t *packed = malloc(stored != 0 ? (size_t)stored : 1);
        if (packed == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory reading an attachment of %lld bytes",
                            (long long)stored);
        } else if (stored > 0 && sqlite3_blob_read(*blob, packed, (int)stored, 0) != SQLITE_OK) {
            rc = store_fail_sqlite(s, "reading an attachment");
        } else {
            rc = store_blob_unpack(s, "attachment", attachment_id, compression, packed,
                                   (size_t)stored, b->out + b->pos, (size_t)part_size);
        }
        crypt_free_wiped(packed);
    }
    mv_db_read_ahead_hint(s->db, 0);
    if (rc == MV_OK) {
        b->pos += (size_t)part_size;
    }
    return rc;
}

/* Puts every attachment of the body back in, in seq order, then the skeleton's tail. A
 * skeleton of the message's whole size has no parts (each is STORE_SPLIT_MIN bytes or
 * more): unless verify, body_parts is then not even looked at, a B-tree seek less for most
 * messages (issue 13); a stray row there is found by mv_store_check, which verifies. The
 * rows give each part's stored length (length() reads no BLOB), the bytes come through
 * store_body_place_part's BLOB handle. */
static int store_body_place_parts(mv_store *s, struct store_body_build *b, int verify)
{
    if (!verify && b->skeleton_left == b->size && b->pos == 0) {
        b->pos = b->size;
        b->skeleton_left = 0;
        return MV_OK;
    }
    sqlite3_stmt *st = store_stmt(s, "SELECT bp.position, a.size, a.compression, "
                                     "length(d.data), bp.attachment_id FROM body_parts bp "
                                     "LEFT JOIN attachments a ON a.id = bp.attachment_id "
                                     "LEFT JOIN attachments_data d ON d.id = bp.attachment_id "
                                     "WHERE bp.body_id = ? ORDER BY bp.seq");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading body parts");
    }
    sqlite3_bind_int64(st, 1, b->body_id);
    sqlite3_blob *blob = NULL;
    int rc = MV_OK, step = SQLITE_DONE;
    while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        rc = store_body_place_part(s, b, st, &blob);
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "reading body parts");
    }
    sqlite3_blob_close(blob);
    sqlite3_reset(st);
    if (rc != MV_OK) {
        return rc;
    }
    store_body_move_skeleton(b, b->skeleton_left);
    if (b->pos != b->size) {
        return store_fail(s, MV_ECORRUPT, "body %lld: reassembled %zu bytes, %zu expected",
                          (long long)b->body_id, b->pos, b->size);
    }
    return MV_OK;
}

/* Allocates the output of a body of size bytes and unpacks its stored skeleton (data,
 * data_len bytes, compression) into its tail. */
static int store_body_stage_data(mv_store *s,
                                 struct store_body_build *b,
                                 size_t size,
                                 int compression,
                                 const void *data,
                                 size_t data_len)
{
    size_t skeleton_len = 0;
    b->size = size;
    int rc =
        store_blob_unpacked_size(s, "body", b->body_id, compression, data, data_len, &skeleton_len);
    if (rc == MV_OK && skeleton_len > b->size) {
        rc = store_fail(s, MV_ECORRUPT, "body %lld: skeleton of %zu bytes in a message of %zu",
                        (long long)b->body_id, skeleton_len, b->size);
    }
    if (rc == MV_OK) {
        b->out =
            b->place != NULL ? b->place(b->place_arg, b->size) : malloc(b->size != 0 ? b->size : 1);
        if (b->out == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory reading a message of %zu bytes", b->size);
        }
    }
    if (rc == MV_OK) {
        b->skeleton_left = skeleton_len;
        rc = store_blob_unpack(s, "body", b->body_id, compression, data, data_len,
                               b->out + (b->size - skeleton_len), skeleton_len);
    }
    return rc;
}

/* From a row (size, compression, sha256, data) stepped on st: allocates the output and
 * unpacks the skeleton into its tail. digest gets the recorded SHA-256. */
static int store_body_stage_row(
    mv_store *s, struct store_body_build *b, sqlite3_stmt *st, int col, uint8_t digest[32])
{
    sqlite3_int64 size = sqlite3_column_int64(st, col);
    if (size < 0 || size > (sqlite3_int64)STORE_BLOB_SIZE_MAX ||
        sqlite3_column_bytes(st, col + 2) != 32 ||
        sqlite3_column_type(st, col + 3) == SQLITE_NULL) {
        return store_fail(s, MV_ECORRUPT, "body %lld: bad size, digest or missing data",
                          (long long)b->body_id);
    }
    memcpy(digest, sqlite3_column_blob(st, col + 2), 32);
    return store_body_stage_data(s, b, (size_t)size, sqlite3_column_int(st, col + 1),
                                 sqlite3_column_blob(st, col + 3),
                                 (size_t)sqlite3_column_bytes(st, col + 3));
}

uint64_t store_body_key(int64_t body_id, int64_t compression)
{
    if (body_id <= 0 || body_id > STORE_BODY_KEY_ID_MAX || compression < 0 || compression > 6) {
        return 0;
    }
    return ((uint64_t)body_id << 3) | (uint64_t)(compression + 1);
}

int store_body_key_parts(uint64_t key, int64_t *body_id, int *compression)
{
    if ((key & 7) == 0 || key >> 3 == 0) {
        return 0;
    }
    *body_id = (int64_t)(key >> 3);
    *compression = (int)(key & 7) - 1;
    return 1;
}

/* Reads the bodies row of b->body_id and stages it (store_body_stage_row). */
static int store_body_stage(mv_store *s, struct store_body_build *b, uint8_t digest[32])
{
    sqlite3_stmt *st = store_stmt(s, "SELECT b.size, b.compression, b.sha256, d.data "
                                     "FROM bodies b LEFT JOIN bodies_data d ON d.id = b.id "
                                     "WHERE b.id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading a message body");
    }
    sqlite3_bind_int64(st, 1, b->body_id);
    int rc = MV_OK, step = sqlite3_step(st);
    if (step != SQLITE_ROW) {
        rc = step == SQLITE_DONE
                 ? store_fail(s, MV_ECORRUPT, "body %lld is missing", (long long)b->body_id)
                 : store_fail_sqlite(s, "reading a message body");
    } else {
        rc = store_body_stage_row(s, b, st, 0, digest);
    }
    sqlite3_reset(st);
    return rc;
}

/* Places the parts of a staged body and, if verify, checks its SHA-256 (want); b->out
 * dropped on failure. */
static int store_body_finish(mv_store *s,
                             struct store_body_build *b,
                             const uint8_t want[32],
                             int verify,
                             uint8_t **raw_out,
                             size_t *len_out)
{
    uint8_t got[32];
    int rc = store_body_place_parts(s, b, verify);
    if (rc == MV_OK && verify) {
        rc = store_blob_sha256(s, b->out, b->size, got);
        if (rc == MV_OK && memcmp(want, got, 32) != 0) {
            rc = store_fail(s, MV_ECORRUPT,
                            "body %lld: the reassembled message does not match "
                            "its SHA-256",
                            (long long)b->body_id);
        }
    }
    if (rc != MV_OK) {
        store_body_build_drop(b);
        return rc;
    }
    *raw_out = b->out;
    *len_out = b->size;
    return MV_OK;
}

int store_body_get(mv_store *s, int64_t body_id, uint8_t **raw_out, size_t *len_out)
{
    struct store_body_build b = {.body_id = body_id};
    uint8_t want[32];
    *raw_out = NULL;
    *len_out = 0;
    int rc = store_body_stage(s, &b, want);
    if (rc != MV_OK) {
        store_body_build_drop(&b);
        return rc;
    }
    return store_body_finish(s, &b, want, 1, raw_out, len_out);
}

/* store_message_body_get() and store_message_body_place(): b->place says where. */
static int store_message_body_read(
    mv_store *s, int64_t mailbox_id, uint32_t uid, struct store_body_build *b, size_t *len_out)
{
    uint8_t want[32], *raw = NULL;
    *len_out = 0;
    /* The message's row and its body's in one statement (issue 13: one statement less per
     * message of a FETCH of whole messages). */
    sqlite3_stmt *st = store_stmt(s, "SELECT b.id, b.size, b.compression, b.sha256, d.data "
                                     "FROM " STORE_BODY_BY_UID_FROM);
    if (st == NULL) {
        return store_fail_sqlite(s, "reading a message body");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, uid);
    int rc = MV_OK, step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        b->body_id = sqlite3_column_int64(st, 0);
        rc = store_body_stage_row(s, b, st, 1, want);
    } else {
        rc = step == SQLITE_DONE ? MV_ENOTFOUND : store_fail_sqlite(s, "reading a message body");
    }
    sqlite3_reset(st);
    if (rc != MV_OK) {
        store_body_build_drop(b);
        return rc;
    }
    /* A read for a client: with authenticated pages, the SHA-256 adds nothing a forger
     * could defeat (docs/SCHEMA.md, "Reading a body back"); mv_store_check verifies it. */
    return store_body_finish(s, b, want, !s->pages_authenticated, &raw, len_out);
}

int store_message_body_get(
    mv_store *s, int64_t mailbox_id, uint32_t uid, uint8_t **raw_out, size_t *len_out)
{
    struct store_body_build b = {0};
    *raw_out = NULL;
    int rc = store_message_body_read(s, mailbox_id, uid, &b, len_out);
    if (rc == MV_OK) {
        *raw_out = b.out;
    }
    return rc;
}

int store_message_body_place(mv_store *s,
                             int64_t mailbox_id,
                             uint32_t uid,
                             void *(*place)(void *arg, size_t size),
                             void *place_arg,
                             size_t *len_out)
{
    struct store_body_build b = {.place = place, .place_arg = place_arg};
    return store_message_body_read(s, mailbox_id, uid, &b, len_out);
}

int store_body_place_keyed(mv_store *s,
                           int64_t body_id,
                           int compression,
                           size_t size,
                           void *(*place)(void *arg, size_t size),
                           void *place_arg,
                           size_t *len_out)
{
    struct store_body_build b = {.body_id = body_id, .place = place, .place_arg = place_arg};
    *len_out = 0;
    if (size > STORE_BLOB_SIZE_MAX) {
        return store_fail(s, MV_ECORRUPT, "body %lld: a size of %zu bytes", (long long)body_id,
                          size);
    }
    if (size > STORE_BLOB_CHAIN_MIN) {
        mv_db_read_near_hint(s->db, STORE_BLOB_NEAR_PAGES); /* taken back with the chain's */
        store_blob_hint_chain(s, "SELECT length(data) FROM bodies_data WHERE id = ?", body_id);
    }
    sqlite3_stmt *st = store_stmt(s, "SELECT data FROM bodies_data WHERE id = ?");
    if (st == NULL) {
        mv_db_read_ahead_hint(s->db, 0);
        return store_fail_sqlite(s, "reading a message body");
    }
    sqlite3_bind_int64(st, 1, body_id);
    int rc = MV_OK, step = sqlite3_step(st);
    mv_db_read_ahead_hint(s->db, 0); /* the column is read: never left for another read */
    if (step == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        rc = store_body_stage_data(s, &b, size, compression, sqlite3_column_blob(st, 0),
                                   (size_t)sqlite3_column_bytes(st, 0));
    } else {
        rc = step == SQLITE_DONE || step == SQLITE_ROW
                 ? MV_ENOTFOUND
                 : store_fail_sqlite(s, "reading a message body");
    }
    sqlite3_reset(st);
    if (rc != MV_OK) {
        store_body_build_drop(&b);
        return rc;
    }
    uint8_t *raw = NULL;
    return store_body_finish(s, &b, NULL, 0, &raw, len_out);
}

/* The cuts of body_id, a body of size bytes whose skeleton has skeleton_len: each part's
 * offset in the skeleton, size and counts, checked to add up to the message. */
static int store_body_cuts(mv_store *s,
                           int64_t body_id,
                           size_t size,
                           size_t skeleton_len,
                           struct mv_message_cut *cuts,
                           size_t cuts_max,
                           size_t *cut_count)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT bp.position, a.size, a.lines, a.marks "
                                     "FROM body_parts bp LEFT JOIN attachments a "
                                     "ON a.id = bp.attachment_id WHERE bp.body_id = ? "
                                     "ORDER BY bp.seq");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading body parts");
    }
    sqlite3_bind_int64(st, 1, body_id);
    uint64_t cut = 0, placed = 0; /* bytes of parts so far; message bytes before the next */
    size_t n = 0;
    int rc = MV_OK, step;
    while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        sqlite3_int64 position = sqlite3_column_int64(st, 0);
        sqlite3_int64 part = sqlite3_column_int64(st, 1);
        /* (1) recorded, (2) after the previous part, (3) inside the message */
        if (sqlite3_column_type(st, 1) == SQLITE_NULL || position < 0 || part < 0 ||
            (uint64_t)position < placed || (uint64_t)part > size ||
            (uint64_t)position > size - (uint64_t)part) {
            rc = store_fail(s, MV_ECORRUPT, "body %lld: a part is missing or misplaced",
                            (long long)body_id);
        } else if (sqlite3_column_type(st, 2) == SQLITE_NULL ||
                   sqlite3_column_type(st, 3) == SQLITE_NULL) {
            rc = store_fail(s, MV_EUNSUPPORTED,
                            "body %lld: a part stored before schema version 15 (not counted)",
                            (long long)body_id);
        } else if (n == cuts_max) {
            rc = store_fail(s, MV_EUNSUPPORTED, "body %lld: more than %zu parts stored apart",
                            (long long)body_id, cuts_max);
        } else {
            cuts[n].position = (uint64_t)position - cut;
            cuts[n].size = (uint64_t)part;
            cuts[n].lines = (uint64_t)sqlite3_column_int64(st, 2);
            cuts[n].marks = (uint64_t)sqlite3_column_int64(st, 3);
            n++;
            cut += (uint64_t)part;
            placed = (uint64_t)position + (uint64_t)part;
        }
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "reading body parts");
    }
    sqlite3_reset(st);
    if (rc == MV_OK && (cut > size || skeleton_len != size - cut)) {
        rc = store_fail(s, MV_ECORRUPT,
                        "body %lld: a skeleton of %zu bytes and parts of %llu "
                        "in a message of %zu",
                        (long long)body_id, skeleton_len, (unsigned long long)cut, size);
    }
    *cut_count = rc == MV_OK ? n : 0;
    return rc;
}

/* The snapshot's kept BLOB handle (or a new one: s->header_blob is taken) moved to body_id's
 * skeleton, with the VFS told to read the row's leaf with the pages near it: MV_OK,
 * MV_ENOTFOUND (no row) or an SQLite error; *blob is to be kept or closed by the caller
 * either way (a failed reopen leaves it spent). */
static int store_body_blob(mv_store *s, int64_t body_id, sqlite3_blob **blob)
{
    *blob = s->header_blob;
    s->header_blob = NULL;
    mv_db_read_near_hint(s->db, STORE_BLOB_NEAR_PAGES); /* with the row's leaf */
    if ((*blob != NULL ? sqlite3_blob_reopen(*blob, body_id)
                       : sqlite3_blob_open(s->db, "main", "bodies_data", "data", body_id, 0,
                                           blob)) != SQLITE_OK) {
        return sqlite3_errcode(s->db) == SQLITE_ERROR
                   ? MV_ENOTFOUND
                   : store_fail_sqlite(s, "reading a message body");
    }
    return MV_OK;
}

/* Reads the stored skeleton of body_id into *data (malloc'd, *data_len bytes) through the
 * snapshot's kept BLOB handle (s->header_blob, as the header reads): one B-tree descent, where
 * a statement needs a second one first for the length that tells the VFS how long a chain to
 * read at once (store_blob_hint_chain; ~8% of a first FETCH BODYSTRUCTURE). MV_ENOTFOUND (no
 * row), MV_ENOMEM or an SQLite error. */
static int store_body_skeleton_read(mv_store *s, int64_t body_id, uint8_t **data, size_t *data_len)
{
    sqlite3_blob *blob = NULL;
    *data = NULL;
    *data_len = 0;
    int rc = store_body_blob(s, body_id, &blob);
    if (rc == MV_OK) {
        int stored = sqlite3_blob_bytes(blob);
        mv_db_read_ahead_hint(s->db, stored); /* the handle has the row: next, its chain */
        *data = malloc(stored > 0 ? (size_t)stored : 1);
        if (*data == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory reading a message body");
        } else if (stored > 0 && sqlite3_blob_read(blob, *data, stored, 0) != SQLITE_OK) {
            rc = store_fail_sqlite(s, "reading a message body");
        } else {
            *data_len = (size_t)stored;
        }
    }
    mv_db_read_ahead_hint(s->db, 0);
    if (rc == MV_OK && s->read_snapshot) {
        s->header_blob = blob; /* for the snapshot's next read (closed at its end) */
    } else {
        sqlite3_blob_close(blob); /* after a failed reopen too: the handle is spent */
    }
    if (rc != MV_OK) {
        crypt_free_wiped(*data);
        *data = NULL;
    }
    return rc;
}

int store_body_skeleton_keyed(mv_store *s,
                              int64_t body_id,
                              int compression,
                              size_t size,
                              void *(*place)(void *arg, size_t size),
                              void *place_arg,
                              size_t *len_out,
                              struct mv_message_cut *cuts,
                              size_t cuts_max,
                              size_t *cut_count)
{
    *len_out = 0;
    *cut_count = 0;
    if (size > STORE_BLOB_SIZE_MAX) {
        return store_fail(s, MV_ECORRUPT, "body %lld: a size of %zu bytes", (long long)body_id,
                          size);
    }
    uint8_t *data = NULL, *out = NULL;
    size_t data_len = 0, skeleton_len = 0;
    int rc = store_body_skeleton_read(s, body_id, &data, &data_len);
    if (rc == MV_OK) {
        rc = store_blob_unpacked_size(s, "body", body_id, compression, data, data_len,
                                      &skeleton_len);
    }
    if (rc == MV_OK && skeleton_len > size) {
        rc = store_fail(s, MV_ECORRUPT, "body %lld: skeleton of %zu bytes in a message of %zu",
                        (long long)body_id, skeleton_len, size);
    }
    /* A skeleton of the message's whole size has no parts (as store_body_place_parts). */
    if (rc == MV_OK && skeleton_len != size) {
        rc = store_body_cuts(s, body_id, size, skeleton_len, cuts, cuts_max, cut_count);
    }
    if (rc == MV_OK) {
        out = place(place_arg, skeleton_len);
        if (out == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory reading a skeleton of %zu bytes",
                            skeleton_len);
        }
    }
    if (rc == MV_OK) {
        rc = store_blob_unpack(s, "body", body_id, compression, data, data_len, out, skeleton_len);
    }
    crypt_free_wiped(data);
    if (rc == MV_OK) {
        *len_out = skeleton_len;
    } else {
        *cut_count = 0;
    }
    return rc;
}

/* Grows *data to hold the stored bytes [0, to) of blob, reading those past *have. */
static int
store_blob_read_more(mv_store *s, sqlite3_blob *blob, uint8_t **data, size_t *have, size_t to)
{
    uint8_t *grown = crypt_realloc_wiped(*data, to);
    if (grown == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory reading a message body");
    }
    *data = grown;
    if (to > *have &&
        sqlite3_blob_read(blob, grown + *have, (int)(to - *have), (int)*have) != SQLITE_OK) {
        return store_fail_sqlite(s, "reading a message body");
    }
    *have = to;
    return MV_OK;
}

/* The stored bytes a prefix of take bytes needs (THE LEAD FRAME): the first frames until they
 * unpack to take bytes or more, read through the snapshot's BLOB handle (as
 * store_body_skeleton_read) and no further, so the pages of the rest are neither read nor
 * decrypted. *data (malloc'd) holds *frames_in stored bytes that unpack to *unpack. Proves
 * there is no part stored apart without reading the rest: the next frame's header gives its
 * size, and the frames must then unpack to the message's size (a skeleton is never longer;
 * with a cut part, or a layout it does not know, it is shorter: MV_EUNSUPPORTED, read the
 * skeleton). */
static int store_body_prefix_read(mv_store *s,
                                  int64_t body_id,
                                  int compression,
                                  size_t size,
                                  size_t take,
                                  uint8_t **data,
                                  size_t *frames_in,
                                  size_t *unpack)
{
    sqlite3_blob *blob = NULL;
    size_t have = 0, stored = 0, at = 0, got = 0;
    *data = NULL;
    int rc = store_body_blob(s, body_id, &blob);
    if (rc == MV_OK) {
        stored = (size_t)sqlite3_blob_bytes(blob);
    }
    if (rc == MV_OK && compression == STORE_BLOB_NONE) {
        rc = stored != size ? store_fail(s, MV_EUNSUPPORTED,
                                         "parts stored apart: read the "
                                         "skeleton")
                            : store_blob_read_more(s, blob, data, &have, take);
        at = got = have;
    }
    /* zstd: a first read of what the header and the lead take at most, then more as needed */
    size_t first = take / 2 + 2 * STORE_BLOB_LEAD;
    if (rc == MV_OK && compression != STORE_BLOB_NONE) {
        mv_db_read_ahead_hint(s->db, (int64_t)(first < stored ? first : stored));
        rc = store_blob_read_more(s, blob, data, &have, first < stored ? first : stored);
    }
    /* The frames that unpack to take bytes are read and walked (frames_in of them, unpack
     * bytes); after them the walk goes on over the frames already read, and the first one
     * the read did not take in whole must be the last: its header's size and the rest's
     * add up to the message. */
    size_t need_in = stored, need_out = 0;
    while (rc == MV_OK && compression != STORE_BLOB_NONE && at < stored) {
        size_t frame = ZSTD_findFrameCompressedSize(*data + at, have - at);
        unsigned long long content = ZSTD_getFrameContentSize(*data + at, have - at);
        if (ZSTD_isError(frame) && have < stored &&
            (got < take || content == ZSTD_CONTENTSIZE_ERROR)) { /* cut short: read on */
            size_t more = have + (have < stored - have ? have : stored - have);
            rc = store_blob_read_more(s, blob, data, &have, more);
            continue;
        }
        if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
            content > size - got || (ZSTD_isError(frame) && got < take)) {
            rc = store_fail(s, MV_EUNSUPPORTED, "body %lld: frames not read here",
                            (long long)body_id);
        } else if (ZSTD_isError(frame)) { /* past the read: the last frame, or not ours */
            got += (size_t)content;
            break;
        } else {
            at += frame;
            got += (size_t)content;
            if (need_out < take) {
                need_in = at;
                need_out = got;
            }
        }
    }
    if (rc == MV_OK && compression != STORE_BLOB_NONE) {
        rc = got == size ? MV_OK : store_fail(s, MV_EUNSUPPORTED, "parts stored apart");
        at = need_in;
        got = need_out;
    }
    mv_db_read_ahead_hint(s->db, 0);
    if (blob != NULL && (rc == MV_OK || rc == MV_EUNSUPPORTED) && s->read_snapshot) {
        s->header_blob = blob; /* for the snapshot's next read (closed at its end) */
    } else {
        sqlite3_blob_close(blob); /* a no-op on NULL; after a failed reopen too */
    }
    if (rc != MV_OK) {
        crypt_free_wiped(*data);
        *data = NULL;
        return rc;
    }
    *frames_in = at;
    *unpack = got;
    return MV_OK;
}

int store_body_prefix_keyed(mv_store *s,
                            int64_t body_id,
                            int compression,
                            size_t size,
                            size_t want,
                            void *(*place)(void *arg, size_t size),
                            void *place_arg,
                            size_t *len_out)
{
    *len_out = 0;
    if (size > STORE_BLOB_SIZE_MAX) {
        return store_fail(s, MV_ECORRUPT, "body %lld: a size of %zu bytes", (long long)body_id,
                          size);
    }
    if (compression != STORE_BLOB_NONE && compression != STORE_BLOB_ZSTD) {
        return store_fail(s, MV_ECORRUPT, "body %lld: unknown compression %d", (long long)body_id,
                          compression);
    }
    size_t take = want < size ? want : size, frames_in = 0, unpack = 0;
    take = take == 0 && size > 0 ? 1 : take; /* the first frame at least */
    uint8_t *data = NULL, *out = NULL;
    int rc =
        store_body_prefix_read(s, body_id, compression, size, take, &data, &frames_in, &unpack);
    if (rc == MV_OK && (out = place(place_arg, unpack)) == NULL) {
        rc = store_fail(s, MV_ENOMEM, "out of memory reading %zu bytes of a message", unpack);
    }
    if (rc == MV_OK && compression == STORE_BLOB_NONE) {
        memcpy(out, data, unpack);
    } else if (rc == MV_OK && unpack > 0) {
        ZSTD_DCtx *dctx = store_blob_dctx(s);
        size_t got = dctx != NULL ? ZSTD_decompressDCtx(dctx, out, unpack, data, frames_in) : 0;
        if (dctx == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory for a zstd context");
        } else if (ZSTD_isError(got) || got != unpack) {
            rc = store_fail(s, MV_ECORRUPT, "body %lld: zstd frame does not decompress: %s",
                            (long long)body_id,
                            ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
        }
    }
    crypt_free_wiped(data);
    if (rc == MV_OK) {
        *len_out = unpack;
    }
    return rc;
}

/* The header unit of body_id (unit: its head_stored stored bytes) unpacked into *out and
 * checked to be exactly the header (size: the whole message's). */
static int store_body_header_unit_decode(mv_store *s,
                                         int64_t body_id,
                                         int compression,
                                         const uint8_t *unit,
                                         size_t head_stored,
                                         size_t size,
                                         uint8_t **out,
                                         size_t *len_out)
{
    uint8_t *header = NULL;
    int rc = MV_OK;
    if (compression == STORE_BLOB_NONE) {
        if ((header = malloc(head_stored != 0 ? head_stored : 1)) == NULL) {
            return store_fail(s, MV_ENOMEM, "out of memory reading a header of %zu bytes",
                              head_stored);
        }
        memcpy(header, unit, head_stored);
        *len_out = head_stored;
    } else {
        unsigned long long content = compression == STORE_BLOB_ZSTD
                                         ? ZSTD_getFrameContentSize(unit, head_stored)
                                         : ZSTD_CONTENTSIZE_ERROR;
        if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN ||
            content == 0 || content > size ||
            ZSTD_findFrameCompressedSize(unit, head_stored) != head_stored) {
            rc = store_fail(s, MV_ECORRUPT, "body %lld: bad header frame", (long long)body_id);
            goto cleanup; /* header is still NULL; one exit keeps cppcheck's leak check quiet */
        }
        ZSTD_DCtx *dctx = store_blob_dctx(s);
        if (dctx == NULL || (header = malloc((size_t)content)) == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory reading a header");
            goto cleanup;
        }
        size_t got = ZSTD_decompressDCtx(dctx, header, (size_t)content, unit, head_stored);
        if (ZSTD_isError(got) || got != content) {
            rc = store_fail(s, MV_ECORRUPT, "body %lld: header frame does not decompress",
                            (long long)body_id);
            goto cleanup;
        }
        *len_out = (size_t)content;
    }
    /* The unit must be exactly the header: what a whole read would cut there. Short of the
     * whole message, that means it ends with its empty line (a unit cut short anywhere else
     * would otherwise pass as a header without one). */
    size_t n = *len_out;
    int ends_blank =
        (n >= 2 && header[n - 1] == '\n' && header[n - 2] == '\n') ||
        (n >= 3 && header[n - 1] == '\n' && header[n - 2] == '\r' && header[n - 3] == '\n') ||
        (n == 1 && header[0] == '\n') || (n == 2 && header[0] == '\r' && header[1] == '\n');
    size_t end = store_header_end(header, n);
    int old_empty_first =
        end < n && end == (header[0] == '\n' ? 1u : 2u) && (ends_blank || n == size);
    if (old_empty_first) {
        /* Written before an empty first line counted as an empty header (that unit runs to
         * the next empty line, or is the whole message): still a prefix of the message, and
         * today's header is its first line, so such stores need no migration. */
        *len_out = end;
    } else if (end != n || (n < size && !ends_blank)) {
        rc = store_fail(s, MV_ECORRUPT, "body %lld: the stored header does not end where recorded",
                        (long long)body_id);
        goto cleanup;
    }
    *out = header;
    header = NULL;
cleanup:
    crypt_free_wiped(header);
    return rc;
}

/* The header unit's copy in the body's row (bodies.head, schema version 11; copy: copy_len
 * bytes, which must be exactly head_stored) unpacked as store_body_header_unit_decode does.
 * The copy is checked like the unit itself (a whole zstd frame that is exactly the header);
 * `mailvault check` also compares it with the skeleton's first bytes. */
static int store_body_header_copy_decode(mv_store *s,
                                         int64_t body_id,
                                         int compression,
                                         const uint8_t *copy,
                                         size_t copy_len,
                                         size_t head_stored,
                                         size_t size,
                                         uint8_t **out,
                                         size_t *len_out)
{
    if (copy == NULL || copy_len != head_stored) {
        return store_fail(s, MV_ECORRUPT, "body %lld: its header copy has %zu bytes, not %zu",
                          (long long)body_id, copy_len, head_stored);
    }
    return store_body_header_unit_decode(s, body_id, compression, copy, head_stored, size, out,
                                         len_out);
}

/* The stored header unit of body_id (header_stored bytes at the start of its data) unpacked
 * into *out. Read through SQLite's incremental BLOB I/O, which walks the overflow chain only
 * as far as the bytes asked for: the rest of the message is neither read nor decrypted.
 * Inside a read snapshot the BLOB handle is kept (s->header_blob) and moved to the next
 * body's row: since skeletons keep parts under 128 KiB (STORE_SPLIT_MIN), a fifth of the IMAP
 * benchmark's messages take this path, and sqlite3_blob_open() compiles a statement of its
 * own on every call (the layout cost that benchmark 5-10% of its commands a second). */
static int store_body_read_header_unit(mv_store *s,
                                       int64_t body_id,
                                       int compression,
                                       size_t head_stored,
                                       size_t size,
                                       uint8_t **out,
                                       size_t *len_out)
{
    sqlite3_blob *blob = s->header_blob;
    uint8_t *unit = NULL;
    int rc = MV_OK;
    s->header_blob = NULL;
    if ((blob != NULL ? sqlite3_blob_reopen(blob, body_id)
                      : sqlite3_blob_open(s->db, "main", "bodies_data", "data", body_id, 0,
                                          &blob)) != SQLITE_OK) {
        rc = sqlite3_errcode(s->db) == SQLITE_ERROR
                 ? store_fail(s, MV_ECORRUPT, "body %lld: its data row is missing",
                              (long long)body_id)
                 : store_fail_sqlite(s, "reading a message header");
        goto cleanup;
    }
    if ((size_t)sqlite3_blob_bytes(blob) < head_stored) {
        rc = store_fail(s, MV_ECORRUPT, "body %lld: header unit of %zu bytes in %d stored",
                        (long long)body_id, head_stored, sqlite3_blob_bytes(blob));
        goto cleanup;
    }
    if ((unit = malloc(head_stored != 0 ? head_stored : 1)) == NULL) {
        rc = store_fail(s, MV_ENOMEM, "out of memory reading a header of %zu bytes", head_stored);
        goto cleanup;
    }
    if (sqlite3_blob_read(blob, unit, (int)head_stored, 0) != SQLITE_OK) {
        rc = store_fail_sqlite(s, "reading a message header");
        goto cleanup;
    }
    rc = store_body_header_unit_decode(s, body_id, compression, unit, head_stored, size, out,
                                       len_out);
cleanup:
    if (rc == MV_OK && s->read_snapshot) {
        s->header_blob = blob; /* for the snapshot's next header (closed at its end) */
    } else {
        sqlite3_blob_close(blob); /* after a failed reopen too: the handle is spent */
    }
    crypt_free_wiped(unit);
    return rc;
}

/* A body read whole and cut after its header (stored before schema version 3, or with a
 * part inside the header). */
static int
store_body_get_header_cut(mv_store *s, int64_t body_id, uint8_t **raw_out, size_t *len_out)
{
    uint8_t *raw = NULL;
    size_t len = 0;
    int rc = store_body_get(s, body_id, &raw, &len);
    if (rc != MV_OK) {
        return rc;
    }
    size_t head = store_header_end(raw, len);
    uint8_t *shrunk = crypt_realloc_wiped(raw, head != 0 ? head : 1);
    if (shrunk != NULL) {
        raw = shrunk; /* a failed shrink leaves raw as it was, still good */
    }
    *raw_out = raw;
    *len_out = head;
    return MV_OK;
}

/* Checks a bodies row's size, header_stored and stored_size. */
static int store_body_header_row_check(mv_store *s,
                                       int64_t body_id,
                                       sqlite3_int64 size,
                                       sqlite3_int64 head_stored,
                                       sqlite3_int64 stored_size)
{
    if (size < 0 || size > (sqlite3_int64)STORE_BLOB_SIZE_MAX || head_stored < 0 ||
        head_stored > stored_size) {
        return store_fail(s, MV_ECORRUPT, "body %lld: bad size or header length",
                          (long long)body_id);
    }
    return MV_OK;
}

int store_body_get_header(mv_store *s, int64_t body_id, uint8_t **raw_out, size_t *len_out)
{
    *raw_out = NULL;
    *len_out = 0;
    sqlite3_stmt *st = store_stmt(s, "SELECT size, compression, header_stored, stored_size, head "
                                     "FROM bodies WHERE id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading a message header");
    }
    sqlite3_bind_int64(st, 1, body_id);
    int step = sqlite3_step(st);
    sqlite3_int64 size = step == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    int compression = step == SQLITE_ROW ? sqlite3_column_int(st, 1) : 0;
    sqlite3_int64 head_stored = step == SQLITE_ROW ? sqlite3_column_int64(st, 2) : 0;
    sqlite3_int64 stored_size = step == SQLITE_ROW ? sqlite3_column_int64(st, 3) : 0;
    if (step != SQLITE_ROW) {
        sqlite3_reset(st);
        return step == SQLITE_DONE
                   ? store_fail(s, MV_ECORRUPT, "body %lld is missing", (long long)body_id)
                   : store_fail_sqlite(s, "reading a message header");
    }
    int rc = store_body_header_row_check(s, body_id, size, head_stored, stored_size);
    if (rc == MV_OK && head_stored > 0 && sqlite3_column_type(st, 4) != SQLITE_NULL) {
        rc = store_body_header_copy_decode(s, body_id, compression, sqlite3_column_blob(st, 4),
                                           (size_t)sqlite3_column_bytes(st, 4), (size_t)head_stored,
                                           (size_t)size, raw_out, len_out);
        sqlite3_reset(st);
        return rc;
    }
    sqlite3_reset(st);
    if (rc != MV_OK) {
        return rc;
    }
    if (head_stored > 0) {
        return store_body_read_header_unit(s, body_id, compression, (size_t)head_stored,
                                           (size_t)size, raw_out, len_out);
    }
    return store_body_get_header_cut(s, body_id, raw_out, len_out);
}

/* The header of the body whose row st is on (a statement of STORE_HEADER_ROW's columns).
 * keep_row: st stays on its row for the caller's next step (a walk over many rows); else it
 * is reset before a read that needs other statements or a BLOB handle, as a single read's
 * caller resets it anyway. */
static int store_header_from_row(
    mv_store *s, sqlite3_stmt *st, int keep_row, uint8_t **raw_out, size_t *len_out)
{
    int64_t body_id = sqlite3_column_int64(st, 0);
    sqlite3_int64 size = sqlite3_column_int64(st, 1);
    int compression = sqlite3_column_int(st, 2);
    sqlite3_int64 head_stored = sqlite3_column_int64(st, 3);
    sqlite3_int64 stored_size = sqlite3_column_int64(st, 4);
    int rc = store_body_header_row_check(s, body_id, size, head_stored, stored_size);
    if (rc == MV_OK && head_stored > 0 && sqlite3_column_type(st, 6) != SQLITE_NULL) {
        return store_body_header_copy_decode(s, body_id, compression, sqlite3_column_blob(st, 6),
                                             (size_t)sqlite3_column_bytes(st, 6),
                                             (size_t)head_stored, (size_t)size, raw_out, len_out);
    }
    if (rc == MV_OK && head_stored > 0 && stored_size <= STORE_BLOB_HEADER_INLINE) {
        const uint8_t *data = sqlite3_column_blob(st, 5);
        size_t data_len = (size_t)sqlite3_column_bytes(st, 5);
        if (sqlite3_column_type(st, 5) == SQLITE_NULL) {
            return store_fail(s, MV_ECORRUPT, "body %lld: its data row is missing",
                              (long long)body_id);
        }
        if (data_len < (size_t)head_stored) {
            return store_fail(s, MV_ECORRUPT, "body %lld: header unit of %lld bytes in %zu stored",
                              (long long)body_id, (long long)head_stored, data_len);
        }
        return store_body_header_unit_decode(s, body_id, compression, data, (size_t)head_stored,
                                             (size_t)size, raw_out, len_out);
    }
    if (!keep_row) {
        sqlite3_reset(st);
    }
    if (rc != MV_OK) {
        return rc;
    }
    if (head_stored > 0) {
        return store_body_read_header_unit(s, body_id, compression, (size_t)head_stored,
                                           (size_t)size, raw_out, len_out);
    }
    return store_body_get_header_cut(s, body_id, raw_out, len_out);
}

/* One statement for the message's row, its body's row with the header unit's copy
 * (bodies.head) when it has one, and, when the stored skeleton is small, its bytes: per
 * message of a client's message list, that replaces a second statement and a BLOB handle
 * (issue 13's profile). The skeleton's row is a subquery, not a join: a body with a copy
 * then never descends into bodies_data, and one read through the BLOB handle descends
 * once (the join descended for every row, used or not). The message's UID is column 7. */
#define STORE_HEADER_COLUMNS                                                                       \
    "SELECT b.id, b.size, b.compression, b.header_stored, b.stored_size, "                         \
    "CASE WHEN b.head IS NULL AND b.header_stored > 0 AND b.stored_size "                          \
    "<= " STORE_BLOB_HEADER_INLINE_STR                                                             \
    " THEN (SELECT d.data FROM bodies_data d WHERE d.id = b.id)"                                   \
    " END, b.head"
#define STORE_HEADER_ROW                                                                           \
    STORE_HEADER_COLUMNS ", m.uid FROM messages m INDEXED BY messages_uid_body JOIN bodies b ON "  \
                         "b.id = m.body_id WHERE m.mailbox_id = ?1 "

int store_message_header_get(
    mv_store *s, int64_t mailbox_id, uint32_t uid, uint8_t **raw_out, size_t *len_out)
{
    *raw_out = NULL;
    *len_out = 0;
    sqlite3_stmt *st = store_stmt(s, STORE_HEADER_ROW "AND m.uid = ?2");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading a message header");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, uid);
    int step = sqlite3_step(st);
    if (step != SQLITE_ROW) {
        sqlite3_reset(st);
        return step == SQLITE_DONE ? MV_ENOTFOUND
                                   : store_fail_sqlite(s, "reading a message header");
    }
    int rc = store_header_from_row(s, st, 0, raw_out, len_out);
    sqlite3_reset(st);
    return rc;
}

int store_message_headers_each(mv_store *s,
                               int64_t mailbox_id,
                               uint32_t first_uid,
                               uint32_t last_uid,
                               int (*each)(void *arg, uint32_t uid, const void *raw, size_t len),
                               void *arg)
{
    /* Not a cached statement: each() may read the store (another header by UID, say), and
     * a cached statement in use cannot serve it too. */
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, STORE_HEADER_ROW "AND m.uid BETWEEN ?2 AND ?3 ORDER BY m.uid", -1,
                           &st, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "reading message headers");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, first_uid);
    sqlite3_bind_int64(st, 3, last_uid);
    int rc = MV_OK, step = SQLITE_DONE;
    while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        uint32_t uid = (uint32_t)sqlite3_column_int64(st, 7);
        uint8_t *raw = NULL;
        size_t len = 0;
        rc = store_header_from_row(s, st, 1, &raw, &len);
        if (rc == MV_ECORRUPT) {
            /* one damaged message does not hide the others: each() hears of it (raw NULL)
             * with the store's message saying what is wrong */
            crypt_free_wiped(raw);
            raw = NULL;
            len = 0;
            rc = MV_OK;
        }
        if (rc == MV_OK) {
            rc = each(arg, uid, raw, len);
        }
        crypt_free_wiped(raw);
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "reading message headers");
    }
    sqlite3_finalize(st);
    return rc;
}

/* What store_message_headers_keyed hands its headers to. */
struct store_headers_keyed {
    int (*got)(void *arg, size_t index, const void *raw, size_t len);
    void *arg;
};

/* store_keyed_read's row: one body's header, decoded once for every key that wants it. A
 * damaged one is passed over: the caller reads those by UID, which says what is wrong. */
static int store_header_keyed_row(
    void *ctx, mv_store *s, sqlite3_stmt *st, const struct store_keyed_want *want, size_t n)
{
    const struct store_headers_keyed *hk = ctx;
    uint8_t *raw = NULL;
    size_t len = 0;
    int rc = store_header_from_row(s, st, 1, &raw, &len);
    for (size_t k = 0; rc == MV_OK && k < n; k++) {
        rc = hk->got(hk->arg, want[k].index, raw, len);
    }
    crypt_free_wiped(raw);
    return rc == MV_ECORRUPT ? MV_OK : rc;
}

int store_message_headers_keyed(mv_store *s,
                                const char *mailbox,
                                const struct mv_message_key *keys,
                                size_t n,
                                int (*got)(void *arg, size_t index, const void *raw, size_t len),
                                void *arg)
{
    struct store_headers_keyed hk = {.got = got, .arg = arg};
    const struct store_keyed_read r = {
        .what = "reading message headers",
        .scan_sql = STORE_HEADER_COLUMNS " FROM bodies b WHERE b.id BETWEEN ?1 AND ?2",
        .one_sql = STORE_HEADER_COLUMNS " FROM bodies b WHERE b.id = ?1",
        .per_body = 1,
        .slot = 0,
        .row = store_header_keyed_row,
        .ctx = &hk};
    return store_keyed_read(s, "mv_message_headers_keyed", mailbox, keys, n, &r);
}

/* ---- dropping many bodies at once (EXPUNGE) -------------------------------------------- */

#define STORE_BODIES_DROP_BATCH 4096 /* ids per statement (a JSON array of ~80 KB) */

/* ids as a JSON array for json_each(): "[1,2,3]". *out is malloc'd. */
static int store_bodies_json(mv_store *s, const int64_t *ids, size_t count, char **out)
{
    size_t cap = 3 + count * 21, at = 0;
    char *json = malloc(cap);
    if (json == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory listing message bodies");
    }
    json[at++] = '[';
    for (size_t i = 0; i < count; i++) {
        at += (size_t)snprintf(json + at, cap - at, "%s%lld", i != 0 ? "," : "", (long long)ids[i]);
    }
    json[at++] = ']';
    json[at] = '\0';
    *out = json;
    return MV_OK;
}

/* Runs sql (?1: the JSON array of ids) to its end; the rows of a RETURNING clause (one
 * column, an attachment id) go to returned if not NULL. */
static int store_bodies_exec(
    mv_store *s, const char *sql, const char *json, struct store_ids *returned, const char *what)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, what);
    }
    sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
    int rc = MV_OK, step;
    while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
        if (returned != NULL) {
            rc = store_ids_push(s, returned, sqlite3_column_int64(st, 0));
        }
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, what);
    }
    sqlite3_reset(st);
    return rc;
}

/* One batch: the parts (and a reference to each of their attachments), then the FTS rows in
 * one statement (FTS5 flushes its pending changes once per statement, not once per
 * message), then the bodies (cascading to bodies_data) and their counts (body_refs). */
static int store_bodies_drop_batch(mv_store *s, const int64_t *ids, size_t count)
{
    struct store_ids attachments = {0};
    char *json = NULL;
    int rc = store_fts_pending_flush(s); /* before deleting fts rows: none may come after */
    if (rc == MV_OK) {
        rc = store_bodies_json(s, ids, count, &json);
    }
    if (rc == MV_OK) {
        rc = store_bodies_exec(s,
                               "DELETE FROM body_parts WHERE body_id IN (SELECT value FROM "
                               "json_each(?1)) RETURNING attachment_id",
                               json, &attachments, "deleting body parts");
    }
    for (size_t i = 0; rc == MV_OK && i < attachments.count; i++) {
        rc = store_attachment_unref(s, attachments.ids[i]);
    }
    if (rc == MV_OK) {
        rc = store_bodies_exec(s,
                               "DELETE FROM fts WHERE rowid IN (SELECT value FROM "
                               "json_each(?1))",
                               json, NULL, "deleting full-text rows");
    }
    /* While the old index's rows move (store_fts_move.c, INVARIANTS (2)): a body purged
     * before its row moved leaves none behind for the move or a search to find. */
    int old_index = 0;
    if (rc == MV_OK && !s->fts_moved_all) {
        rc = store_fts_old_exists(s, &old_index);
    }
    if (rc == MV_OK && old_index) {
        rc = store_bodies_exec(
            s,
            "DELETE FROM " STORE_FTS_OLD " WHERE rowid IN (SELECT value FROM "
            "json_each(?1)) AND rowid > (SELECT value FROM meta WHERE key = '" STORE_FTS_MOVED_KEY
            "')",
            json, NULL, "deleting old full-text rows");
    }
    /* A body the full-text catch-up set aside (store_fts_backlog.c) loses that key with it,
     * as it loses its row: ids are reused once the highest goes, and a new body must not be
     * taken for the old one set aside (nor a server log a gone one at every open). */
    if (rc == MV_OK) {
        rc = store_bodies_exec(s,
                               "DELETE FROM meta WHERE key IN (SELECT '" STORE_FTS_ASIDE_KEY
                               "' || printf('%020d', value) FROM json_each(?1))",
                               json, NULL, "deleting set-aside keys");
    }
    if (rc == MV_OK) {
        rc = store_bodies_exec(s,
                               "DELETE FROM bodies WHERE id IN (SELECT r.id FROM body_refs r "
                               "WHERE r.id IN (SELECT value FROM json_each(?1)) AND "
                               "r.refcount <= 0)",
                               json, NULL, "deleting message bodies");
    }
    /* their counts after them (no foreign key: store_schema.c, version 12) */
    if (rc == MV_OK) {
        rc = store_bodies_exec(s,
                               "DELETE FROM body_refs WHERE id IN (SELECT value FROM "
                               "json_each(?1)) AND id NOT IN (SELECT id FROM bodies)",
                               json, NULL, "deleting reference counts");
    }
    free(json);
    store_ids_free(&attachments);
    return rc;
}

int store_bodies_drop(mv_store *s, const int64_t *ids, size_t count)
{
    int rc = MV_OK;
    for (size_t at = 0; rc == MV_OK && at < count; at += STORE_BODIES_DROP_BATCH) {
        size_t n = count - at < STORE_BODIES_DROP_BATCH ? count - at : STORE_BODIES_DROP_BATCH;
        rc = store_bodies_drop_batch(s, ids + at, n);
    }
    return rc;
}
