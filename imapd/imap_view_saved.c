/*
 * imap_view_saved.c -- a mailbox view as the store saves it between server runs
 * (mv_mailbox_view_save), and a saved view loaded so that its messages are decoded when a
 * command first reads them, not at the SELECT (issue 13: a cold SELECT of a 1,000,000-message
 * INBOX spent most of its time writing the 40 MB of fresh memory its decoded messages take --
 * the kernel zeroes each fresh page, and on this VM the host backs it at its first write --
 * and then checking 1,000,000 messages' values, while it answers with a few numbers).
 *
 * ENCODING (version 3, "MVV3"; LEB128 varints)
 *   "MVV3", the message count, the UID of the first message without \Seen (0: none), the
 *   keyword lists (their count, then each: its length (> 0) and its bytes, no NUL), the chunks
 *   (their count, then each: its message count (1..IMAP_CHUNK_MSGS), its first UID
 *   (ascending) and its length in bytes), then the chunks' bytes one after another. A chunk
 *   is one zstd frame of its messages' values in seven columns (imap_view_put_columns), each
 *   delta from the chunk's previous message, so every chunk decodes by itself. At 1,000,000
 *   messages of the benchmark's corpus: ~4.5 MB (the same values message by message without
 *   compression: 11 MB, which a cold SELECT read and decrypted whole). Version 2 (one run
 *   of messages, keyword text inline) is decoded whole, once, and saved again in this
 *   version; version 1 (no body keys) is not decoded: the mailbox is listed instead.
 *
 * DECODED ON FIRST USE
 *   A SELECT with no cached view reads the saved bytes whole into one buffer (the source,
 *   shared by reference) and reads only their header: the keyword lists are made (the
 *   source keeps a reference to each, in their order) with the view's keyword set, the first
 *   unseen message is taken from the header, and each saved chunk becomes a pending chunk
 *   (imap_view_add_pending) that knows where its bytes are and its first UID, so a UID
 *   search finds the chunk without decoding any. The first read of one of its messages
 *   decompresses and decodes the chunk (imap_chunk_fill -> imap_view_source_decode). A SELECT then
 * costs the chunks and keyword lists, not the messages, and a command pays for the chunks it reads.
 *   The source goes with its last pending chunk.
 *
 * CHECKED WHEN WRITTEN, AUTHENTICATED WHEN READ
 *   A pending chunk's decode cannot return an error (imap_view_msg cannot fail), so the
 *   bytes it decodes must be right: the encoder decodes every chunk it wrote and compares it
 *   with the view before the view is saved (a mismatch: nothing saved, an error logged), and
 *   the store's page cipher authenticates every byte read back (a damaged page fails the
 *   SELECT's read, which lists the mailbox instead). The header is checked whole at the
 *   SELECT (lengths, counts, the chunks' first UIDs ascending, the list indexes when a chunk
 *   is decoded). A chunk that still does not decode breaks that invariant: the server logs
 *   it and aborts rather than show a client wrong messages.
 *
 * SAVED AGAIN
 *   A view saved again after a few changes (the store closes) copies the bytes of every
 *   chunk still pending from its source as they are (the source's keyword lists go first in
 *   the new list table, in their order, so their indexes stay), and encodes only the chunks
 *   that were decoded: a save does not decode the view.
 */
#include "imap_session.h"
#include "log.h"
#include "mailvault.h"
#include "varint.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

static const unsigned char imap_view_magic[4] = {'M', 'V', 'V', '3'};
/* The versions before: not decoded, the mailbox is listed instead (imap_view_index). */
static const unsigned char imap_view_magic_v1[4] = {'M', 'V', 'V', '1'};
static const unsigned char imap_view_magic_v2[4] = {'M', 'V', 'V', '2'};

/* The most bytes a message takes: seven values of up to 10 bytes. */
#define IMAP_VIEW_MSG_MAX 70

struct imap_view_source {
    atomic_size_t refs;
    unsigned char *bytes;
    size_t len;
    const struct imap_kw **kws; /* the keyword lists, in the saved order: a reference each */
    size_t kw_count, kw_cap;
};

void imap_view_source_ref(struct imap_view_source *src)
{
    atomic_fetch_add_explicit(&src->refs, 1, memory_order_relaxed);
}

void imap_view_source_unref(struct imap_view_source *src)
{
    if (src == NULL || atomic_fetch_sub_explicit(&src->refs, 1, memory_order_acq_rel) != 1) {
        return;
    }
    for (size_t i = 0; i < src->kw_count; i++) {
        imap_kw_unref(src->kws[i]);
    }
    free(src->kws);
    free(src->bytes);
    free(src);
}

/* Room for one more in a growing array of keyword lists (*names, *cap, count used): 0, or -1
 * out of memory. */
static int imap_view_names_room(const struct imap_kw ***names, size_t *cap, size_t count)
{
    if (count == *cap) {
        size_t grown_cap = *cap != 0 ? *cap * 2 : 16;
        const struct imap_kw **grown = realloc(*names, grown_cap * sizeof *grown);
        if (grown == NULL) {
            return -1;
        }
        *names = grown;
        *cap = grown_cap;
    }
    return 0;
}

/* ---- the encoder ---- */

/* The keyword lists of a view being encoded, with an index by their names (open addressing:
 * a mailbox may have many distinct lists, and each message's is looked up). */
struct imap_view_lists {
    const struct imap_kw **names;
    size_t count, cap;
    size_t *slots; /* index + 1, 0 free; slot_cap a power of two, at most half full */
    size_t slot_cap;
};

/* The index of list kw (added if new), or SIZE_MAX out of memory. */
static size_t imap_view_list_index(struct imap_view_lists *l, const struct imap_kw *kw)
{
    if (2 * (l->count + 1) > l->slot_cap) {
        size_t cap = l->slot_cap != 0 ? l->slot_cap * 2 : 64;
        size_t *slots = calloc(cap, sizeof *slots);
        if (slots == NULL) {
            return SIZE_MAX;
        }
        for (size_t i = 0; i < l->count; i++) {
            size_t s = (size_t)imap_kw_hash(l->names[i]) & (cap - 1);
            while (slots[s] != 0) {
                s = (s + 1) & (cap - 1);
            }
            slots[s] = i + 1;
        }
        free(l->slots);
        l->slots = slots;
        l->slot_cap = cap;
    }
    size_t s = (size_t)imap_kw_hash(kw) & (l->slot_cap - 1);
    for (; l->slots[s] != 0; s = (s + 1) & (l->slot_cap - 1)) {
        if (imap_kw_equal(l->names[l->slots[s] - 1], kw)) {
            return l->slots[s] - 1;
        }
    }
    if (imap_view_names_room(&l->names, &l->cap, l->count) != 0) {
        return SIZE_MAX;
    }
    l->names[l->count] = kw;
    l->slots[s] = ++l->count;
    return l->count - 1;
}

/* ---- a chunk's messages ---- */

/* The n messages at m (one chunk's, ascending UIDs) as seven columns, each a value per
 * message: the UID minus the previous one's (the first: minus 0), flags, modseq minus the
 * previous one's (zigzag), size, the internal date minus the previous one's (zigzag), the
 * body key minus the previous one's (zigzag; keys ascend with the UIDs of mail as it
 * arrived), the keywords (0 none, 1 the previous message's, 2 + i list i of l). Columns,
 * and modseqs as deltas, because zstd then takes a chunk to ~40% of its bytes (the same
 * values message by message: ~65%): a cold SELECT reads and decrypts all of them. Returns
 * the end (at most n * IMAP_VIEW_MSG_MAX bytes after q), NULL out of memory. */
static unsigned char *imap_view_put_columns(unsigned char *q,
                                            const struct imap_msg *m,
                                            size_t n,
                                            struct imap_view_lists *l)
{
    for (unsigned col = 0; col < 7; col++) {
        for (size_t k = 0; k < n; k++) {
            const struct imap_msg zero = {.keywords = IMAP_KW_NONE}, *b = k > 0 ? &m[k - 1] : &zero;
            uint64_t x = 0;
            switch (col) {
            case 0:
                x = m[k].uid - b->uid;
                break;
            case 1:
                x = m[k].flags;
                break;
            case 2:
                x = imap_varint_zigzag(m[k].modseq - b->modseq);
                break;
            case 3:
                x = m[k].size;
                break;
            case 4:
                x = imap_varint_zigzag((uint64_t)m[k].internal_date - (uint64_t)b->internal_date);
                break;
            case 5:
                x = imap_varint_zigzag((uint64_t)m[k].body_key - (uint64_t)b->body_key);
                break;
            default:
                if (imap_kw_count(m[k].keywords) == 0) {
                    x = 0;
                } else if (k > 0 && imap_kw_equal(m[k].keywords, b->keywords)) {
                    x = 1;
                } else if ((x = imap_view_list_index(l, m[k].keywords)) == SIZE_MAX) {
                    return NULL;
                } else {
                    x += 2;
                }
            }
            q = imap_varint_put(q, x);
        }
    }
    return q;
}

/* Decodes the n messages of a chunk's columns [p, end) into m (their keywords lists of the
 * kw_count at kws: no reference taken). 0, or -1 if the bytes are no such messages. */
static int imap_view_get_columns(const unsigned char *p,
                                 const unsigned char *end,
                                 const struct imap_kw *const *kws,
                                 size_t kw_count,
                                 struct imap_msg *m,
                                 size_t n)
{
    for (unsigned col = 0; col < 7; col++) {
        uint64_t acc = 0; /* the running UID, modseq, date or key */
        for (size_t k = 0; k < n; k++) {
            uint64_t x;
            if (imap_varint_get(&p, end, &x) != 0) {
                return -1;
            }
            switch (col) {
            case 0:
                if (x == 0 || (acc += x) > UINT32_MAX) {
                    return -1; /* UIDs ascend */
                }
                m[k].uid = (uint32_t)acc;
                break;
            case 1:
                if (x > 0xff) {
                    return -1;
                }
                m[k].flags = (unsigned)x;
                break;
            case 2:
                if ((acc += imap_varint_unzigzag(x)) > INT64_MAX) {
                    return -1;
                }
                m[k].modseq = acc;
                break;
            case 3:
                if (x > UINT32_MAX) {
                    return -1;
                }
                m[k].size = (uint32_t)x;
                break;
            case 4:
                acc += imap_varint_unzigzag(x);
                m[k].internal_date = (int64_t)acc;
                break;
            case 5:
                if ((acc += imap_varint_unzigzag(x)) > UINT32_MAX) {
                    return -1;
                }
                m[k].body_key = (uint32_t)acc;
                break;
            default:
                if (x == 0) {
                    m[k].keywords = IMAP_KW_NONE;
                } else if (x == 1 && k > 0 && imap_kw_count(m[k - 1].keywords) > 0) {
                    m[k].keywords = m[k - 1].keywords;
                } else if (x >= 2 && x - 2 < kw_count) {
                    m[k].keywords = kws[x - 2];
                } else {
                    return -1;
                }
            }
        }
    }
    return p == end ? 0 : -1;
}

/* The decompressed columns of the chunk being decoded: one buffer, large enough for any
 * chunk, and one zstd context for every pending chunk's decode (they run under
 * imap_chunk_fill's lock), made once in the process by the first load of a saved view, which
 * fails if they cannot be had (a decode must not), and kept: a decode writes no fresh pages
 * but the chunk's own. */
#define IMAP_VIEW_SCRATCH (IMAP_CHUNK_MSGS * IMAP_VIEW_MSG_MAX)
static unsigned char *imap_view_scratch;
static ZSTD_DCtx *imap_view_dctx;
static pthread_once_t imap_view_scratch_once = PTHREAD_ONCE_INIT;

static void imap_view_scratch_make(void)
{
    imap_view_scratch = malloc(IMAP_VIEW_SCRATCH);
    imap_view_dctx = ZSTD_createDCtx();
}

/* Whether the decode's buffer and context are there (made at the first call). */
static int imap_view_scratch_ready(void)
{
    pthread_once(&imap_view_scratch_once, imap_view_scratch_make);
    return imap_view_scratch != NULL && imap_view_dctx != NULL;
}

/* Decompresses the chunk [p, p + len) of n messages into imap_view_scratch: its length, or
 * SIZE_MAX if it is no zstd frame of at most n * IMAP_VIEW_MSG_MAX bytes. */
static size_t imap_view_unpack(const unsigned char *p, size_t len, size_t n)
{
    size_t got =
        ZSTD_decompressDCtx(imap_view_dctx, imap_view_scratch, n * IMAP_VIEW_MSG_MAX, p, len);
    return ZSTD_isError(got) ? SIZE_MAX : got;
}

void imap_view_source_decode(struct imap_chunk *c)
{
    const struct imap_view_source *src = c->at.src;
    size_t got = imap_view_unpack(src->bytes + c->at.offset, c->at.len, c->count);
    if (got == SIZE_MAX ||
        imap_view_get_columns(imap_view_scratch, imap_view_scratch + got, src->kws, src->kw_count,
                              c->msgs, c->count) != 0 ||
        c->msgs[0].uid != c->at.first_uid) {
        /* Checked when written, authenticated when read (see the file): a bug. */
        log_msg(LOG_LEVEL_ERROR,
                "view cache: a saved view's chunk (UID %u on, %zu messages) does not decode: "
                "aborting rather than answer from it",
                (unsigned)c->at.first_uid, c->count);
        abort();
    }
    for (size_t k = 0; k < c->count; k++) {
        imap_kw_ref(c->msgs[k].keywords);
    }
}

/* The source of v's pending chunks with a reference taken, if any (a view's pending chunks
 * all come from the one load that made it: merges and appends write chunks of their own).
 * The reference keeps the bytes while a session on another thread decodes the last pending
 * chunk (a save at the server's end, sessions still open). */
static struct imap_view_source *imap_view_pending_source(const struct imap_view *v)
{
    for (size_t p = 0; p < v->part_count; p++) {
        struct imap_chunk *c = v->parts[p].chunk;
        struct imap_view_source *src = c->count > 0 ? imap_chunk_source(c) : NULL;
        if (src != NULL) {
            return src;
        }
    }
    return NULL;
}

/* Whether part p's chunk is pending from src: then its bytes are copied as they are. Asked
 * once per part (a decode on another thread may end the pending state meanwhile; the bytes
 * stay right, since only this view's thread writes its chunks, and src is referenced). */
static int
imap_view_part_verbatim(const struct imap_view *v, size_t p, const struct imap_view_source *src)
{
    struct imap_chunk *c = v->parts[p].chunk;
    return src != NULL && atomic_load_explicit(&c->pending, memory_order_acquire) != 0 &&
           c->at.src == src;
}

/* Decompresses and decodes the chunk just made at [p, p + len) and compares its n messages
 * with m's. MV_OK if they are the same, MV_ECORRUPT if not, MV_ENOMEM. */
static int imap_view_check_chunk(const unsigned char *p,
                                 size_t len,
                                 const struct imap_view_lists *l,
                                 const struct imap_msg *m,
                                 size_t n)
{
    size_t max = n * IMAP_VIEW_MSG_MAX;
    unsigned char *cols = malloc(max);
    struct imap_msg *got = malloc(n * sizeof *got);
    int rc = cols != NULL && got != NULL ? MV_OK : MV_ENOMEM;
    size_t clen = rc == MV_OK ? ZSTD_decompress(cols, max, p, len) : 0;
    if (rc == MV_OK && (ZSTD_isError(clen) || imap_view_get_columns(cols, cols + clen, l->names,
                                                                    l->count, got, n) != 0)) {
        rc = MV_ECORRUPT;
    }
    for (size_t k = 0; rc == MV_OK && k < n; k++) {
        if (got[k].uid != m[k].uid || got[k].flags != m[k].flags || got[k].modseq != m[k].modseq ||
            got[k].size != m[k].size || got[k].internal_date != m[k].internal_date ||
            got[k].body_key != m[k].body_key || !imap_kw_equal(got[k].keywords, m[k].keywords)) {
            rc = MV_ECORRUPT;
        }
    }
    free(cols);
    free(got);
    return rc;
}

/* The saved chunks of v's first `parts` parts (those with messages), one after another in
 * *body (malloc'd), each part one chunk: its message count, first UID and length into
 * counts, firsts and lens; the keyword lists into l. A chunk still pending from src is
 * copied; another is encoded (imap_view_put_columns), compressed and checked. MV_OK,
 * MV_ENOMEM, or MV_ECORRUPT when a chunk does not decode back to v's messages. */
struct imap_view_table {
    size_t *counts, *lens;
    uint32_t *firsts;
    unsigned char *verbatim; /* imap_view_part_verbatim, asked once */
};

static int imap_view_encode_chunks(const struct imap_view *v,
                                   const struct imap_view_source *src,
                                   struct imap_view_lists *l,
                                   size_t parts,
                                   const struct imap_view_table *t,
                                   unsigned char **body,
                                   size_t *body_len)
{
    size_t max = 0, cols_max = 0;
    for (size_t p = 0; p < parts; p++) {
        struct imap_chunk *c = v->parts[p].chunk;
        t->verbatim[p] = (unsigned char)imap_view_part_verbatim(v, p, src);
        if (t->verbatim[p]) {
            max += c->at.len;
        } else {
            max += ZSTD_compressBound(c->count * IMAP_VIEW_MSG_MAX);
            cols_max =
                c->count * IMAP_VIEW_MSG_MAX > cols_max ? c->count * IMAP_VIEW_MSG_MAX : cols_max;
        }
    }
    unsigned char *out = malloc(max > 0 ? max : 1), *q = out;
    unsigned char *cols = cols_max > 0 ? malloc(cols_max) : NULL;
    ZSTD_CCtx *cctx = cols_max > 0 ? ZSTD_createCCtx() : NULL;
    int rc = out != NULL && (cols_max == 0 || (cols != NULL && cctx != NULL)) ? MV_OK : MV_ENOMEM;
    for (size_t p = 0; rc == MV_OK && p < parts; p++) {
        struct imap_chunk *c = v->parts[p].chunk;
        unsigned char *at = q;
        t->counts[p] = c->count;
        if (t->verbatim[p]) {
            memcpy(q, src->bytes + c->at.offset, c->at.len);
            q += c->at.len;
            t->firsts[p] = c->at.first_uid;
        } else {
            /* the part's messages, contiguous in its chunk (decoded by imap_view_msg) */
            const struct imap_msg *m = imap_view_msg(v, v->parts[p].start);
            unsigned char *end = imap_view_put_columns(cols, m, c->count, l);
            size_t z = end == NULL ? 0
                                   : ZSTD_compressCCtx(cctx, q, (size_t)(out + max - q), cols,
                                                       (size_t)(end - cols), 1);
            if (end == NULL) {
                rc = MV_ENOMEM;
            } else if (ZSTD_isError(z)) {
                rc = MV_ECORRUPT; /* room for the bound was made: a bug */
            } else {
                rc = imap_view_check_chunk(q, z, l, m, c->count);
                q += z;
            }
            t->firsts[p] = m[0].uid;
        }
        t->lens[p] = (size_t)(q - at);
    }
    ZSTD_freeCCtx(cctx);
    free(cols);
    if (rc != MV_OK) {
        free(out);
        return rc;
    }
    *body = out;
    *body_len = (size_t)(q - out);
    return MV_OK;
}

int imap_view_encode(const struct imap_view *v,
                     uint32_t first_unseen,
                     unsigned char **out,
                     size_t *len)
{
    struct imap_view_lists l;
    memset(&l, 0, sizeof l);
    struct imap_view_source *src = imap_view_pending_source(v);
    int rc = MV_OK;
    for (size_t i = 0; src != NULL && i < src->kw_count && rc == MV_OK; i++) {
        /* first, in their order: the copied chunks' indexes stay right */
        size_t at = imap_view_list_index(&l, src->kws[i]);
        if (at == SIZE_MAX) {
            rc = MV_ENOMEM;
        } else if (at != i) {
            /* a list twice (no encoder of this version writes that): the indexes would
             * move, so nothing is copied; every chunk is decoded and encoded anew */
            imap_view_source_unref(src);
            src = NULL;
            l.count = 0;
            memset(l.slots, 0, l.slot_cap * sizeof *l.slots);
        }
    }
    size_t parts = 0;
    while (parts < v->part_count && v->parts[parts].chunk->count > 0) {
        parts++; /* the parts with messages; reserved empty ones follow */
    }
    struct imap_view_table t = {.counts = malloc((parts + 1) * sizeof *t.counts),
                                .lens = malloc((parts + 1) * sizeof *t.lens),
                                .firsts = malloc((parts + 1) * sizeof *t.firsts),
                                .verbatim = malloc(parts + 1)};
    unsigned char *body = NULL, *head = NULL;
    size_t body_len = 0;
    if (rc == MV_OK &&
        (t.counts == NULL || t.lens == NULL || t.firsts == NULL || t.verbatim == NULL)) {
        rc = MV_ENOMEM;
    }
    if (rc == MV_OK) {
        rc = imap_view_encode_chunks(v, src, &l, parts, &t, &body, &body_len);
    }
    size_t head_max = sizeof imap_view_magic + 4 * 10 + parts * 30;
    for (size_t i = 0; i < l.count; i++) {
        head_max += 10 + imap_kw_text_len(l.names[i]);
    }
    if (rc == MV_OK && (head = malloc(head_max + body_len)) == NULL) {
        rc = MV_ENOMEM;
    }
    if (rc == MV_OK) {
        unsigned char *q = head;
        memcpy(q, imap_view_magic, sizeof imap_view_magic);
        q = imap_varint_put(q + sizeof imap_view_magic, v->count);
        q = imap_varint_put(q, first_unseen);
        q = imap_varint_put(q, l.count);
        for (size_t i = 0; i < l.count; i++) {
            q = imap_varint_put(q, imap_kw_text_len(l.names[i]));
            q = (unsigned char *)imap_kw_text_put(l.names[i], (char *)q);
        }
        q = imap_varint_put(q, parts);
        for (size_t p = 0; p < parts; p++) {
            q = imap_varint_put(q, t.counts[p]);
            q = imap_varint_put(q, t.firsts[p]);
            q = imap_varint_put(q, t.lens[p]);
        }
        memcpy(q, body, body_len);
        *out = head;
        *len = (size_t)(q - head) + body_len;
        head = NULL;
    }
    free(head);
    free(body);
    free(t.counts);
    free(t.lens);
    free(t.firsts);
    free(t.verbatim);
    free(l.names);
    free(l.slots);
    imap_view_source_unref(src);
    return rc;
}

/* ---- the decoder ---- */

struct imap_view_decoder {
    struct imap_view *v;
    struct imap_view_source *src; /* NULL until the first piece */
    size_t len;                   /* the view's bytes in all */
    size_t fed;                   /* of those, given so far */
    int version;                  /* of the view read, once it is */
};

/* Makes the n bytes at p (a list of the header) a keyword list of the source and of the
 * view's keyword set. MV_OK, MV_ECORRUPT or MV_ENOMEM. */
static int imap_view_index_list(struct imap_view_decoder *d, const unsigned char *p, size_t n)
{
    struct imap_view_source *src = d->src;
    if (n == 0 || memchr(p, '\0', n) != NULL) {
        return MV_ECORRUPT;
    }
    if (imap_view_names_room(&src->kws, &src->kw_cap, src->kw_count) != 0) {
        return MV_ENOMEM;
    }
    char *text = malloc(n + 1);
    if (text == NULL) {
        return MV_ENOMEM;
    }
    memcpy(text, p, n);
    text[n] = '\0';
    const struct imap_kw *kw = imap_kw_new(text, NULL);
    free(text);
    if (kw == NULL) {
        return MV_ENOMEM;
    }
    src->kws[src->kw_count++] = kw; /* the source's reference */
    return imap_view_keywords_add_list(d->v, kw) < 0 ? MV_ENOMEM : MV_OK;
}

/* ---- version 2, decoded once after an upgrade ----
 * The form before this one: the count, then the messages in one run, each with the values
 * of version 3's columns message by message (deltas from the previous message of the view),
 * the keywords 0 none, 1 the previous message's, 2 + n and n bytes of text. No chunk of it
 * decodes by itself, so it is decoded whole at the SELECT as before this version, and the
 * cache saves the view in version 3 when the store closes (imap_view_decoder_version):
 * listing a 1,000,000-message mailbox instead took 32-41 s on the benchmark's store. */
static int imap_view_decode_v2(struct imap_view_decoder *d, const unsigned char *p)
{
    struct imap_view *v = d->v;
    const unsigned char *end = d->src->bytes + d->src->len;
    uint64_t count;
    if (imap_varint_get(&p, end, &count) != 0 || count > (size_t)(end - p) / 7) {
        return MV_ECORRUPT; /* each message takes >= 7 bytes */
    }
    int rc = imap_view_reserve(v, (size_t)count);
    struct imap_msg prev = {.keywords = IMAP_KW_NONE};
    char *text = NULL;
    for (uint64_t i = 0; rc == MV_OK && i < count; i++) {
        uint64_t du, flags, modseq, size, dd, dk, tag;
        struct imap_msg m = prev;
        if (imap_varint_get(&p, end, &du) != 0 || du == 0 || prev.uid + du > UINT32_MAX ||
            imap_varint_get(&p, end, &flags) != 0 || flags > 0xff ||
            imap_varint_get(&p, end, &modseq) != 0 || modseq > INT64_MAX ||
            imap_varint_get(&p, end, &size) != 0 || size > UINT32_MAX ||
            imap_varint_get(&p, end, &dd) != 0 || imap_varint_get(&p, end, &dk) != 0 ||
            prev.body_key + imap_varint_unzigzag(dk) > UINT32_MAX ||
            imap_varint_get(&p, end, &tag) != 0 ||
            (tag == 1 && imap_kw_count(prev.keywords) == 0) ||
            (tag >= 2 && (tag - 2 == 0 || tag - 2 > (uint64_t)(end - p) ||
                          memchr(p, '\0', (size_t)(tag - 2)) != NULL))) {
            rc = MV_ECORRUPT;
            break;
        }
        m.uid = (uint32_t)(prev.uid + du);
        m.flags = (unsigned)flags;
        m.modseq = modseq;
        m.size = (uint32_t)size;
        m.internal_date = (int64_t)((uint64_t)prev.internal_date + imap_varint_unzigzag(dd));
        m.body_key = (uint32_t)(prev.body_key + imap_varint_unzigzag(dk));
        if (tag == 0) {
            m.keywords = IMAP_KW_NONE;
        } else if (tag == 1) {
            m.keywords = imap_kw_ref(prev.keywords);
        } else {
            size_t n = (size_t)(tag - 2);
            char *grown = realloc(text, n + 1);
            if (grown == NULL) {
                rc = MV_ENOMEM;
                break;
            }
            text = grown;
            memcpy(text, p, n);
            text[n] = '\0';
            p += n;
            if ((m.keywords = imap_kw_new(text, NULL)) == NULL) {
                rc = MV_ENOMEM;
                break;
            }
            if (imap_view_keywords_add_list(v, m.keywords) < 0) {
                imap_kw_unref(m.keywords);
                rc = MV_ENOMEM;
                break;
            }
        }
        if (v->seen_below == 0 && (m.flags & MV_FLAG_SEEN) == 0) {
            v->seen_below = m.uid;
        }
        imap_view_append(v, &m); /* reserved above; its keyword reference goes with it */
        prev = m;
    }
    free(text);
    if (rc == MV_OK && p != end) {
        rc = MV_ECORRUPT; /* bytes after the last message */
    }
    if (rc == MV_OK && v->seen_below == 0) {
        v->seen_below = UINT32_MAX; /* every message is \Seen */
    }
    return rc;
}

/* Reads the source's header and makes d->v (empty) its pending chunks, its keyword set and
 * seen_below. MV_OK, MV_ENOTFOUND (an older version), MV_ECORRUPT or MV_ENOMEM. */
static int imap_view_index(struct imap_view_decoder *d)
{
    struct imap_view *v = d->v;
    const unsigned char *bytes = d->src->bytes, *p = bytes, *end = bytes + d->src->len;
    uint64_t count, unseen, lists, chunks;
    if (d->src->len >= sizeof imap_view_magic &&
        memcmp(p, imap_view_magic_v1, sizeof imap_view_magic) == 0) {
        d->version = 1;
        return MV_ENOTFOUND; /* no body keys: listed instead */
    }
    if (d->src->len >= sizeof imap_view_magic &&
        memcmp(p, imap_view_magic_v2, sizeof imap_view_magic) == 0) {
        d->version = 2;
        return imap_view_decode_v2(d, p + sizeof imap_view_magic);
    }
    d->version = 3;
    if (!imap_view_scratch_ready()) {
        return MV_ENOMEM; /* what a decode will need, had now */
    }
    if (d->src->len < sizeof imap_view_magic ||
        memcmp(p, imap_view_magic, sizeof imap_view_magic) != 0 ||
        (p += sizeof imap_view_magic, imap_varint_get(&p, end, &count)) != 0 ||
        imap_varint_get(&p, end, &unseen) != 0 || unseen > UINT32_MAX ||
        imap_varint_get(&p, end, &lists) != 0 || lists > (size_t)(end - p)) {
        return MV_ECORRUPT;
    }
    for (uint64_t i = 0; i < lists; i++) {
        uint64_t n;
        if (imap_varint_get(&p, end, &n) != 0 || n > (size_t)(end - p)) {
            return MV_ECORRUPT;
        }
        int rc = imap_view_index_list(d, p, (size_t)n);
        if (rc != MV_OK) {
            return rc;
        }
        p += n;
    }
    if (imap_varint_get(&p, end, &chunks) != 0 || chunks > (size_t)(end - p) / 3) {
        return MV_ECORRUPT; /* each chunk's entry takes >= 3 bytes */
    }
    /* The table, then the chunks' bytes: where they start is known after the table. */
    const unsigned char *table = p;
    uint64_t total = 0, bytes_total = 0, last_first = 0;
    for (uint64_t i = 0; i < chunks; i++) {
        uint64_t n, first, b;
        if (imap_varint_get(&p, end, &n) != 0 || n == 0 || n > IMAP_CHUNK_MSGS ||
            imap_varint_get(&p, end, &first) != 0 || first <= last_first || first > UINT32_MAX ||
            imap_varint_get(&p, end, &b) != 0 || b == 0 || b > (size_t)(end - p)) {
            return MV_ECORRUPT; /* the chunks' UIDs ascend */
        }
        total += n;
        bytes_total += b;
        last_first = first;
    }
    if (total != count || bytes_total != (size_t)(end - p)) {
        return MV_ECORRUPT;
    }
    size_t offset = (size_t)(p - bytes);
    for (uint64_t i = 0; i < chunks; i++) {
        uint64_t n = 0, first = 0, b = 0;
        (void)imap_varint_get(&table, end, &n); /* read above */
        (void)imap_varint_get(&table, end, &first);
        (void)imap_varint_get(&table, end, &b);
        struct imap_chunk_at where = {
            .src = d->src, .offset = offset, .len = (size_t)b, .first_uid = (uint32_t)first};
        int rc = imap_view_add_pending(v, (size_t)n, &where);
        if (rc != MV_OK) {
            return rc;
        }
        offset += (size_t)b;
    }
    v->seen_below = unseen != 0 ? (uint32_t)unseen : UINT32_MAX;
    return MV_OK;
}

struct imap_view_decoder *imap_view_decoder_new(struct imap_view *v, size_t len)
{
    struct imap_view_decoder *d = calloc(1, sizeof *d);
    if (d != NULL) {
        d->v = v;
        d->len = len;
    }
    return d;
}

int imap_view_decoder_version(const struct imap_view_decoder *d)
{
    return d != NULL ? d->version : 0;
}

int imap_view_decoder_feed(struct imap_view_decoder *d, const void *bytes, size_t n)
{
    if (n > d->len - d->fed) {
        return MV_ECORRUPT; /* more than the view's length: the reader's mistake */
    }
    if (d->src == NULL) {
        if ((d->src = calloc(1, sizeof *d->src)) == NULL) {
            return MV_ENOMEM;
        }
        atomic_init(&d->src->refs, 1); /* the decoder's, until imap_view_decoder_end */
        if ((d->src->bytes = malloc(d->len)) == NULL) {
            return MV_ENOMEM;
        }
        d->src->len = d->len;
    }
    memcpy(d->src->bytes + d->fed, bytes, n);
    d->fed += n;
    return d->fed == d->len ? imap_view_index(d) : MV_OK;
}

void imap_view_decoder_end(struct imap_view_decoder *d, int rc)
{
    if (d == NULL) {
        return;
    }
    if (rc != MV_OK) {
        imap_view_free(d->v);
    }
    imap_view_source_unref(d->src); /* the pending chunks hold theirs */
    free(d);
}

int imap_view_decode_pieces(const void *data, size_t len, size_t piece, struct imap_view *v)
{
    struct imap_view_decoder *d = imap_view_decoder_new(v, len);
    int rc = d != NULL ? MV_OK : MV_ENOMEM;
    for (size_t at = 0; rc == MV_OK && at < len; at += piece) {
        rc = imap_view_decoder_feed(d, (const unsigned char *)data + at,
                                    len - at < piece ? len - at : piece);
    }
    imap_view_decoder_end(d, rc);
    return rc;
}
