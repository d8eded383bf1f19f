/*
 * store_blob.h -- bodies and attachments: content-addressed, reference counted, zstd.
 *
 * USAGE (inside the caller's transaction)
 *   store_body_put(s, raw, len, &parsed, &body_id);   new body, or one more reference
 *   store_body_ref(s, body_id);                        COPY: one more reference
 *   store_bodies_drop(s, ids, count);                  (store.h) the purge: bodies at refcount 0
 *   store_body_get(s, body_id, &raw, &len);            the exact bytes; free(raw)
 *   store_body_get_header(s, body_id, &raw, &len);     only the header; free(raw)
 *   store_message_header_get(s, mailbox_id, uid, &raw, &len)   the same, by UID
 *   store_message_headers_each(s, mailbox_id, first, last, each, arg)  ... of a UID range
 *   store_message_headers_keyed(s, mailbox, keys, n, got, arg)  ... of a listing's keys
 *   store_blob_release(s);                             (store_open.c) at close
 *
 * The reassembly algorithm and the layout are in store_blob.c and docs/SCHEMA.md.
 */
#ifndef MV_STORE_BLOB_H
#define MV_STORE_BLOB_H

#include "store/store.h"
#include "store/store_parse.h"

#include <stddef.h>
#include <stdint.h>
#include <zstd.h>

/* One stored BLOB, and so one message, is at most SQLite's default SQLITE_MAX_LENGTH. */
#define STORE_BLOB_SIZE_MAX 1000000000u

/* Stores raw (len bytes; parsed->parts say which large leaf parts to keep apart) and sets
 * *body_id_out, or adds a reference to the body with the same SHA-256. A new body's full-text
 * row is deferred to the transaction's COMMIT (store_commit; store.h: fts_pending). sha256:
 * the SHA-256 of raw when the caller has computed it, else NULL (computed here). Returns MV_OK,
 * MV_ELIMIT (len > STORE_BLOB_SIZE_MAX), MV_ENOMEM, or the mapped SQLite error; message set. */
int store_body_put(mv_store *s,
                   const uint8_t *raw,
                   size_t len,
                   const uint8_t *sha256,
                   const struct store_parsed *parsed,
                   int64_t *body_id_out);

/* A message's skeleton compressed ahead of its store, off the store's thread (a drain's
 * read-ahead: the compression was ~16% of the drain's own thread, the slower of its two,
 * issue 13): what store_body_put() would store for a message of len bytes whose parse cut
 * no part. ready: made (data NULL: stored as is, compression STORE_BLOB_NONE). */
struct store_blob_prepacked {
    int ready;
    uint8_t *data; /* malloc'd: the zstd frames (header, lead, rest), or NULL */
    size_t size;   /* of data */
    size_t len;    /* of the message */
    size_t head;   /* store_header_end() of the message: the first frame's source */
    size_t head_stored;
    int compression;
};

/* Compresses raw as store_body_put() would, with cctx (the caller's, used by one thread at
 * a time), into *out, for a message whose parse p cut no part; otherwise leaves *out not
 * ready. MV_OK, MV_ENOMEM or MV_ERROR (*out not ready: store_body_put() compresses then).
 * Free with store_blob_prepacked_free(). */
int store_blob_prepack(ZSTD_CCtx *cctx,
                       const uint8_t *raw,
                       size_t len,
                       const struct store_parsed *p,
                       struct store_blob_prepacked *out);
void store_blob_prepacked_free(struct store_blob_prepacked *p);

/* Bodies stored from a prepacked skeleton since the process started (tests). */
uint64_t store_blob_prepacked_stored(void);

/* Adds one reference to body_id. MV_OK, MV_ECORRUPT (no such body) or an SQLite error. */
int store_body_ref(mv_store *s, int64_t body_id);

/* Reassembles body_id byte for byte into *raw_out (malloc'd, the caller frees; never NULL on
 * MV_OK, even for 0 bytes) and *len_out. Checks the size and SHA-256 recorded at put time.
 * Returns MV_OK, MV_ECORRUPT (missing rows, bad zstd frame, wrong size or digest), MV_ENOMEM
 * or an SQLite error. Call inside a read transaction for a consistent snapshot. */
int store_body_get(mv_store *s, int64_t body_id, uint8_t **raw_out, size_t *len_out);

/* The message's header exactly as store_body_get() would return its first bytes up to
 * store_header_end(): from the body's own header unit when it has one (schema version 3),
 * reading and decrypting only its pages, else by reading the whole body and cutting it. The
 * header unit is not checked against the message's SHA-256 (that needs every byte); the
 * cipher's per-page authentication still covers it, and its length and end are checked.
 * Returns MV_OK, MV_ECORRUPT, MV_ENOMEM or an SQLite error; call inside a read transaction. */
int store_body_get_header(mv_store *s, int64_t body_id, uint8_t **raw_out, size_t *len_out);

/* store_body_get_header() of message uid of mailbox_id, its rows found and the header unit's
 * copy (bodies.head, schema version 11) or, for a body without one and a stored skeleton of at
 * most STORE_BLOB_HEADER_INLINE bytes, the skeleton read by one statement. MV_ENOTFOUND (no message
 * set: the caller says which of mailbox and message is missing), else as store_body_get_header().
 */
#define STORE_BLOB_HEADER_INLINE     8192
#define STORE_BLOB_HEADER_INLINE_STR "8192"
/* A body's header unit of at most this many stored bytes is also kept in its bodies row
 * (bodies.head, schema version 11) when the skeleton holds more than the header, so a header
 * read is that row and never the skeleton's pages. Bounded so that the copy stays inside the
 * row's cell on a 4 KiB page (no overflow page of its own); a larger unit (a few headers in a
 * thousand) is read from the skeleton, as before. */
#define STORE_BLOB_HEAD_COPY_MAX 2048

/* The rows of message uid (?2) in mailbox ?1 that a read of its bytes needs: its body (b) and
 * the body's stored skeleton (d), found through messages_uid_body (schema version 10), which
 * holds the body id, so no page of the messages table is read. Named, because SQLite's planner
 * prefers the UNIQUE (mailbox_id, uid) index while a store has no statistics (a new store
 * until it is analyzed), and that index gives only the row id: one more B-tree descent. */
#define STORE_BODY_BY_UID_FROM                                                                     \
    "messages m INDEXED BY messages_uid_body JOIN bodies b ON b.id = m.body_id "                   \
    "LEFT JOIN bodies_data d ON d.id = b.id WHERE m.mailbox_id = ?1 AND m.uid = ?2"
int store_message_header_get(
    mv_store *s, int64_t mailbox_id, uint32_t uid, uint8_t **raw_out, size_t *len_out);
/* Each message's header of mailbox_id with a UID in [first_uid, last_uid], in UID order, as
 * store_message_header_get() reads it, through one statement: each(arg, uid, raw, len) (raw
 * valid during the call only; NULL for a message whose rows are damaged, the walk going on);
 * a non-zero return stops the walk and is returned. Inside the caller's transaction. */
int store_message_headers_each(mv_store *s,
                               int64_t mailbox_id,
                               uint32_t first_uid,
                               uint32_t last_uid,
                               int (*each)(void *arg, uint32_t uid, const void *raw, size_t len),
                               void *arg);

/* mv_message_headers_keyed (mailvault.h) once its arguments are checked: by
 * store_keyed_read, each header decoded once for the keys that share its body; damaged ones
 * passed over. */
int store_message_headers_keyed(mv_store *s,
                                const char *mailbox,
                                const struct mv_message_key *keys,
                                size_t n,
                                int (*got)(void *arg, size_t index, const void *raw, size_t len),
                                void *arg);

/* store_body_get() of message uid of mailbox_id, the message's and body's rows read by one
 * statement. MV_ENOTFOUND (no message set: the caller says what is missing), else as
 * store_body_get(), except that the SHA-256 is checked only when the store's cipher does not
 * authenticate its pages (s->pages_authenticated; docs/SCHEMA.md "Reading a body back"). */
int store_message_body_get(
    mv_store *s, int64_t mailbox_id, uint32_t uid, uint8_t **raw_out, size_t *len_out);

/* store_message_body_get() into the caller's memory: place(place_arg, size) is called once,
 * when the message's size is known, and returns size bytes (NULL: MV_ENOMEM) that are filled
 * with the message; on failure after the call their content is undefined. MV_ENOTFOUND (place
 * not called), else as store_message_body_get(). */
int store_message_body_place(mv_store *s,
                             int64_t mailbox_id,
                             uint32_t uid,
                             void *(*place)(void *arg, size_t size),
                             void *place_arg,
                             size_t *len_out);

/* The body key of a listing (struct mv_message_entry's body_key): the body's id and its
 * compression in one number, (body_id << 3) | (compression + 1), so 0 is never a key; 0 for
 * an id or compression that does not fit (compression -1: the body's row is missing). The
 * key is what mv_message_fetch_keyed_into needs to read the bytes without the body's row. */
#define STORE_BODY_KEY_ID_MAX (INT64_MAX >> 3)
uint64_t store_body_key(int64_t body_id, int64_t compression);
/* 1 and the parts of key, or 0 (not a key). */
int store_body_key_parts(uint64_t key, int64_t *body_id, int *compression);

/* Pages on each side of a body row's leaf read with it (vfs_hint.h, mv_db_read_near_hint):
 * in the benchmark's stores 80% of the chains lie wholly within 2 pages of their leaf (93%
 * within 4), so a cold message mostly costs one random read, not two (leaf, then chain), for
 * 16 KiB more read with the leaf. Measured (docs/BENCHMARKS.md, the twelfth pass): 2 pages
 * made an evicted FETCH of 50 whole messages 3-11% faster (median 7%), 4 pages 2-6% (more
 * bytes read for the few chains more they cover). */
#define STORE_BLOB_NEAR_PAGES 2

/* store_message_body_place() of body_id, known to be the body of a message that still
 * exists, stored with compression and size bytes long (as a body key and a listing say):
 * reads only the body's stored skeleton (bodies_data) and its parts, not the message's or the
 * body's row. Never checks the SHA-256 (for a store whose pages are authenticated). Sizes,
 * frames and the reassembled length are checked as on every read: a wrong size or compression
 * gives MV_ECORRUPT. MV_ENOTFOUND: no such bodies_data row (place not called). */
int store_body_place_keyed(mv_store *s,
                           int64_t body_id,
                           int compression,
                           size_t size,
                           void *(*place)(void *arg, size_t size),
                           void *place_arg,
                           size_t *len_out);

/* store_body_place_keyed() of only the body's skeleton (mv_message_skeleton_keyed): place
 * gets the skeleton's size, cuts (cuts_max) the parts stored apart, in the skeleton's
 * offsets, with their sizes and counts. MV_ENOTFOUND (no bodies_data row), MV_EUNSUPPORTED
 * (a part without counts, stored before schema version 15, or more than cuts_max parts),
 * MV_ECORRUPT (sizes that do not add up to size), MV_ENOMEM or an SQLite error; place is
 * called only on the way to MV_OK. */
int store_body_skeleton_keyed(mv_store *s,
                              int64_t body_id,
                              int compression,
                              size_t size,
                              void *(*place)(void *arg, size_t size),
                              void *place_arg,
                              size_t *len_out,
                              struct mv_message_cut *cuts,
                              size_t cuts_max,
                              size_t *cut_count);

/* The first bytes of body_id's message (size bytes, no part stored apart), at least want of
 * them (all, if the message is shorter), unpacked frame by frame no further than that (THE
 * LEAD FRAME, store_blob.c) into place(place_arg, n); *len_out = n. MV_EUNSUPPORTED when parts
 * are stored apart (read the skeleton), MV_ENOTFOUND (no row), MV_ECORRUPT, MV_ENOMEM or an
 * SQLite error; place is called only on the way to MV_OK. */
int store_body_prefix_keyed(mv_store *s,
                            int64_t body_id,
                            int compression,
                            size_t size,
                            size_t want,
                            void *(*place)(void *arg, size_t size),
                            void *place_arg,
                            size_t *len_out);

/* The lines (LF bytes) and marks of a part's bytes as struct mv_message_cut counts them:
 * lines that begin with "--" or begin with neither SP nor HTAB and hold a ':'. */
void store_part_count(const uint8_t *bytes, size_t n, uint64_t *lines, uint64_t *marks);

/* The lines and marks of attachment id counted again from its stored bytes, and *differ set
 * when its row records other counts or only one (mv_store_check, mv_store_repair, over the
 * rows STORE_ATTACHMENTS_COUNTED lists). MV_OK, MV_ENOTFOUND, MV_ECORRUPT, MV_ENOMEM or an
 * SQLite error. */
#define STORE_ATTACHMENTS_COUNTED                                                                  \
    "SELECT id FROM attachments WHERE lines IS NOT NULL OR marks IS NOT NULL ORDER BY id"
int store_attachment_recount(
    mv_store *s, int64_t id, uint64_t *lines, uint64_t *marks, int *differ);
/* Records lines and marks as attachment id's counts (after store_attachment_recount: the
 * repair of counts that differ, the maintenance's of parts stored before version 15). MV_OK or
 * the mapped SQLite error. */
int store_attachment_counts_set(mv_store *s, int64_t id, uint64_t lines, uint64_t marks);

/* Length of the header of raw: up to and including the first empty line (an empty first
 * line, or the first LF followed by LF or by CR LF); len if there is none. mailvaultd uses
 * it too (mv_message_header_len), for the message and for every MIME part's header. */
size_t store_header_end(const uint8_t *raw, size_t len);

/* Writes body_id's full-text row (store_parse's header text and body text) and its Date
 * zone again: the schema migration that rebuilt the index (store_schema.c). MV_OK or an
 * SQLite error (message set). */
int store_body_index_again(mv_store *s, int64_t body_id, const struct store_parsed *p);

/* Queues body_id's full-text row (store_parse's header text and body text) for the
 * transaction's COMMIT (store.h: fts_pending), as an append does. MV_OK or MV_ENOMEM. */
int store_body_index(mv_store *s, int64_t body_id, const struct store_parsed *p);

/* Frees the handle's zstd contexts and its kept BLOB handle (store.h). */
void store_blob_release(mv_store *s);

/* Closes the BLOB handle kept for a read snapshot's header reads (store.h: header_blob); at
 * the snapshot's end, before its transaction ends. */
void store_blob_snapshot_end(mv_store *s);

/* SHA-256 of data into out. MV_OK or MV_ERROR (OpenSSL failed; message set). */
int store_blob_sha256(mv_store *s, const void *data, size_t len, uint8_t out[32]);

#endif /* MV_STORE_BLOB_H */
