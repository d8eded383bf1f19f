/*
 * store_message.c -- messages: append, fetch, get, flags, copy, move, expunge, with the
 * change log and threads.
 *
 * USAGE
 *   Every public function here is one IMMEDIATE transaction (reads use a deferred one for a
 *   consistent snapshot); on any error it rolls back and returns the code with the handle's
 *   message set. store_message_append_in_txn() is the same append inside the caller's
 *   transaction (queue drain, import).
 *
 * IMPLEMENTATION NOTES
 *   - An append parses the message (GMime) before BEGIN, so the write lock is held only for
 *     the inserts. The body goes through store_blob.c (deduplicated by SHA-256); the
 *     messages row holds only small columns.
 *   - Threads: a message joins the thread of its parent (In-Reply-To, then References from
 *     the nearest), else of an earlier copy of itself (same Message-ID), else of a reply that
 *     arrived first (its In-Reply-To is our Message-ID); else it starts a thread whose id is
 *     its own row id. Every lookup is an index probe.
 *   - UID sets are walked range by range in chunks of STORE_MESSAGE_CHUNK rows (uid > last
 *     seen), read completely before any row is changed: no statement ever steps over rows
 *     that are being updated or deleted, and memory stays bounded whatever the set.
 *   - A flag change allocates one modseq for the whole command, on its first changed message,
 *     and writes one 'flags' change row per changed message; unchanged messages keep their
 *     modseq. mv_flags_set_unchanged_since is the same walk with a test per row (CONDSTORE's
 *     UNCHANGEDSINCE): a row whose modseq is above the bound is collected, not changed, and
 *     because the walk reads the rows inside the write transaction, no writer can change a
 *     message between its test and its change.
 *   - An expunge allocates one modseq the same way and writes 'expunge' rows. COPY gives
 *     each new message its own UID and modseq ('append' rows), shares the body (refcount
 *     + 1), and MOVE is COPY plus expunge of the source in the same transaction (the
 *     refcount does not change).
 *   - Keywords are IMAP atoms, compared case-insensitively, stored sorted and space-joined.
 *
 * LIMITATIONS
 *   Threads are never merged: a message that links two existing threads joins the first
 *   one found.
 */
#include "store/store_message.h"
#include "store/store_blob.h"
#include "store/store_uidset.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define STORE_MESSAGE_CHUNK 256 /* rows read before any is changed */

/* ---- keywords -------------------------------------------------------------------------- */

/* Keywords split out of a string: words point into buf, sorted, without duplicates. */
struct store_keywords {
    char *buf;
    char **words;
    size_t count;
};

static void store_message_keywords_free(struct store_keywords *k)
{
    free(k->buf);
    free(k->words);
    memset(k, 0, sizeof *k);
}

/* Case-insensitive; equal words keep their order in the text (the words point into one
 * buffer), so the first spelling survives deduplication. */
static int store_message_keyword_compare(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    int cmp = strcasecmp(x, y);
    return cmp != 0 ? cmp : x < y ? -1 : x > y ? 1 : 0;
}

/* An IMAP atom (RFC 3501 atom-char: no "(" ")" "{" SP CTL "%" "*" '"' "\" "]"), ASCII. */
static int store_message_keyword_check(mv_store *s, const char *word)
{
    size_t n = strlen(word);
    if (n > s->limits.keyword_size_max) {
        return store_fail(s, MV_ELIMIT, "a keyword of %zu bytes is over keyword_size_max (%u)", n,
                          s->limits.keyword_size_max);
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)word[i];
        if (c <= 0x20 || c >= 0x7f || strchr("(){%*\"\\]", c) != NULL) {
            return store_fail(s, MV_EINVAL, "keyword \"%.64s\" is not an IMAP atom (byte %zu)",
                              word, i);
        }
    }
    return MV_OK;
}

/* Splits text at spaces; checks each word if check is set; sorts and removes duplicates. */
static int
store_message_keywords_split(mv_store *s, const char *text, int check, struct store_keywords *out)
{
    memset(out, 0, sizeof *out);
    size_t n = text != NULL ? strlen(text) : 0;
    out->buf = malloc(n + 1);
    out->words = malloc((n / 2 + 1) * sizeof *out->words); /* a word and a space each */
    if (out->buf == NULL || out->words == NULL) {
        store_message_keywords_free(out);
        return store_fail(s, MV_ENOMEM, "out of memory reading keywords");
    }
    if (n != 0) {
        memcpy(out->buf, text, n);
    }
    out->buf[n] = '\0';
    for (char *p = out->buf; *p != '\0';) {
        if (*p == ' ') {
            p++;
            continue;
        }
        char *word = p;
        p += strcspn(p, " ");
        if (*p == ' ') {
            *p++ = '\0';
        }
        int rc = check ? store_message_keyword_check(s, word) : MV_OK;
        if (rc != MV_OK) {
            store_message_keywords_free(out);
            return rc;
        }
        out->words[out->count++] = word;
    }
    qsort(out->words, out->count, sizeof *out->words, store_message_keyword_compare);
    size_t kept = 0;
    for (size_t i = 0; i < out->count; i++) {
        if (kept == 0 || strcasecmp(out->words[kept - 1], out->words[i]) != 0) {
            out->words[kept++] = out->words[i];
        }
    }
    out->count = kept;
    return MV_OK;
}

static int store_message_keywords_join(mv_store *s, char *const *words, size_t count, char **out)
{
    size_t total = 1;
    for (size_t i = 0; i < count; i++) {
        total += strlen(words[i]) + 1;
    }
    char *buf = malloc(total);
    if (buf == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory joining keywords");
    }
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = strlen(words[i]);
        if (i != 0) {
            buf[at++] = ' ';
        }
        memcpy(buf + at, words[i], n);
        at += n;
    }
    buf[at] = '\0';
    *out = buf;
    return MV_OK;
}

static int store_message_keywords_count_check(mv_store *s, size_t count)
{
    if (count > s->limits.keywords_max) {
        return store_fail(s, MV_ELIMIT, "%zu keywords on one message is over keywords_max (%u)",
                          count, s->limits.keywords_max);
    }
    return MV_OK;
}

int store_message_keywords_normalize(mv_store *s, const char *keywords, char **out)
{
    struct store_keywords k;
    *out = NULL;
    int rc = store_message_keywords_split(s, keywords, 1, &k);
    if (rc == MV_OK) {
        rc = store_message_keywords_count_check(s, k.count);
    }
    if (rc == MV_OK) {
        rc = store_message_keywords_join(s, k.words, k.count, out);
    }
    store_message_keywords_free(&k);
    return rc;
}

/* The keywords of a message after a STORE: arg replaces, is added to, or is removed from
 * current (a normalised string from the row). *out is malloc'd. */
static int store_message_keywords_apply(
    mv_store *s, const char *current, const struct store_keywords *arg, int mode, char **out)
{
    if (mode == MV_FLAGS_REPLACE) {
        return store_message_keywords_join(s, arg->words, arg->count, out);
    }
    struct store_keywords cur;
    int rc = store_message_keywords_split(s, current, 0, &cur);
    if (rc != MV_OK) {
        return rc;
    }
    char **merged = malloc((cur.count + arg->count + 1) * sizeof *merged);
    if (merged == NULL) {
        store_message_keywords_free(&cur);
        return store_fail(s, MV_ENOMEM, "out of memory merging keywords");
    }
    size_t i = 0, j = 0, k = 0;
    while (i < cur.count || j < arg->count) {
        int cmp = i == cur.count    ? 1
                  : j == arg->count ? -1
                                    : strcasecmp(cur.words[i], arg->words[j]);
        if (cmp < 0) {
            merged[k++] = cur.words[i++];
        } else if (cmp > 0) {
            if (mode == MV_FLAGS_ADD) {
                merged[k++] = arg->words[j];
            }
            j++;
        } else {
            if (mode == MV_FLAGS_ADD) {
                merged[k++] = cur.words[i]; /* the spelling already stored wins */
            }
            i++;
            j++;
        }
    }
    rc = k > cur.count ? store_message_keywords_count_check(s, k) : MV_OK;
    if (rc == MV_OK) {
        rc = store_message_keywords_join(s, merged, k, out);
    }
    free(merged);
    store_message_keywords_free(&cur);
    return rc;
}

/* ---- append ---------------------------------------------------------------------------- */

int store_message_check(mv_store *s,
                        const void *raw,
                        size_t len,
                        unsigned flags,
                        const char *keywords,
                        char **keywords_out)
{
    *keywords_out = NULL;
    if (raw == NULL || len == 0) {
        return store_fail(s, MV_EINVAL, "an empty message"); /* as delivery and import say */
    }
    if ((uint64_t)len > s->limits.message_size_max) {
        return store_fail(s, MV_ELIMIT, "a message of %zu bytes is over message_size_max (%llu)",
                          len, (unsigned long long)s->limits.message_size_max);
    }
    if ((flags & ~MV_FLAG_ALL) != 0) {
        return store_fail(s, MV_EINVAL, "unknown flag bits 0x%x", flags & ~MV_FLAG_ALL);
    }
    return store_message_keywords_normalize(s, keywords, keywords_out);
}

/* One change-log row. */
static int
store_message_log(mv_store *s, int64_t mailbox_id, uint64_t modseq, uint32_t uid, const char *kind)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT INTO changes(mailbox_id, modseq, uid, kind, at) "
                                     "VALUES (?, ?, ?, ?, ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "writing the change log");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)modseq);
    sqlite3_bind_int64(st, 3, uid);
    sqlite3_bind_text(st, 4, kind, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)time(NULL));
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "writing the change log");
}

/* Sets *thread_id from the first message sql finds for key, unless it is already set. */
static int
store_message_thread_probe(mv_store *s, const char *sql, const char *key, int64_t *thread_id)
{
    if (*thread_id != 0 || key == NULL || key[0] == '\0') {
        return MV_OK;
    }
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, "finding a thread");
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *thread_id = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW || step == SQLITE_DONE ? MV_OK
                                                     : store_fail_sqlite(s, "finding a thread");
}

/* The thread a new message joins, or 0 for a new thread (see the file comment). The
 * "!= ''" terms let SQLite use the partial indexes. */
static int store_message_thread(mv_store *s, const struct store_parsed *p, int64_t *thread_id)
{
    static const char *const by_id = "SELECT thread_id FROM messages WHERE message_id = ?1 "
                                     "AND message_id != '' ORDER BY id LIMIT 1";
    static const char *const by_parent = "SELECT thread_id FROM messages WHERE in_reply_to = ?1 "
                                         "AND in_reply_to != '' ORDER BY id LIMIT 1";
    *thread_id = 0;
    int rc = store_message_thread_probe(s, by_id, p->in_reply_to, thread_id);
    for (size_t i = p->reference_count; rc == MV_OK && i-- > 0;) {
        rc = store_message_thread_probe(s, by_id, p->references[i], thread_id);
    }
    if (rc == MV_OK) {
        rc = store_message_thread_probe(s, by_id, p->message_id, thread_id);
    }
    if (rc == MV_OK) {
        rc = store_message_thread_probe(s, by_parent, p->message_id, thread_id);
    }
    return rc;
}

static void store_message_bind_text(sqlite3_stmt *st, int index, const char *text)
{
    sqlite3_bind_text(st, index, text != NULL ? text : "", -1, SQLITE_STATIC);
}

/* The messages row; *row_id gets its id. */
static int store_message_insert_row(mv_store *s,
                                    int64_t mailbox_id,
                                    uint32_t uid,
                                    uint64_t modseq,
                                    int64_t internal_date,
                                    size_t len,
                                    const struct store_parsed *p,
                                    unsigned flags,
                                    const char *keywords,
                                    int64_t thread_id,
                                    int64_t body_id)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT INTO messages(mailbox_id, uid, modseq, "
                                     "internal_date, sent_date, size, flags, keywords, subject, "
                                     "from_addr, to_addr, cc_addr, message_id, in_reply_to, "
                                     "thread_id, body_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                                     "?, ?, ?, ?, ?, ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "adding a message");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, uid);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)modseq);
    sqlite3_bind_int64(st, 4, internal_date);
    sqlite3_bind_int64(st, 5, p->sent_date);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)len);
    sqlite3_bind_int64(st, 7, flags);
    store_message_bind_text(st, 8, keywords);
    store_message_bind_text(st, 9, p->subject);
    store_message_bind_text(st, 10, p->from);
    store_message_bind_text(st, 11, p->to);
    store_message_bind_text(st, 12, p->cc);
    store_message_bind_text(st, 13, p->message_id);
    store_message_bind_text(st, 14, p->in_reply_to);
    sqlite3_bind_int64(st, 15, thread_id);
    sqlite3_bind_int64(st, 16, body_id);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "adding a message");
}

/* A message that starts a thread names it with its own row id. */
static int store_message_thread_start(mv_store *s, int64_t row_id)
{
    sqlite3_stmt *st = store_stmt(s, "UPDATE messages SET thread_id = id WHERE id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "starting a thread");
    }
    sqlite3_bind_int64(st, 1, row_id);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "starting a thread");
}

int store_message_insert(mv_store *s,
                         int64_t mailbox_id,
                         const uint8_t *raw,
                         size_t len,
                         const struct store_parsed *parsed,
                         unsigned flags,
                         const char *keywords,
                         int64_t internal_date,
                         uint32_t *uid_out)
{
    int64_t body_id = 0, thread_id = 0;
    uint32_t uid = 0;
    uint64_t modseq = 0;
    int rc = store_body_put(s, raw, len, parsed, &body_id);
    if (rc == MV_OK) {
        rc = store_mailbox_next_uid(s, mailbox_id, &uid, &modseq);
    }
    if (rc == MV_OK) {
        rc = store_message_thread(s, parsed, &thread_id);
    }
    if (rc == MV_OK) {
        int64_t date = internal_date != 0 ? internal_date : (int64_t)time(NULL);
        rc = store_message_insert_row(s, mailbox_id, uid, modseq, date, len, parsed, flags,
                                      keywords, thread_id, body_id);
    }
    if (rc == MV_OK && thread_id == 0) {
        rc = store_message_thread_start(s, sqlite3_last_insert_rowid(s->db));
    }
    if (rc == MV_OK) {
        rc = store_message_log(s, mailbox_id, modseq, uid, "append");
    }
    if (rc == MV_OK && uid_out != NULL) {
        *uid_out = uid;
    }
    return rc;
}

/* Parses raw with the store's limits; the parser's message becomes the handle's. */
static int store_message_parse(mv_store *s, const void *raw, size_t len, struct store_parsed *out)
{
    static const uint8_t empty = 0;
    char err[256] = "";
    int rc = store_parse(len != 0 ? raw : &empty, len, &s->limits, STORE_SPLIT_MIN, out, err,
                         sizeof err);
    if (rc != MV_OK) {
        return store_fail(s, rc, "%s", err[0] != '\0' ? err : mv_strerror(rc));
    }
    return MV_OK;
}

int store_message_append_in_txn(mv_store *s,
                                int64_t mailbox_id,
                                const void *raw,
                                size_t len,
                                unsigned flags,
                                const char *keywords,
                                int64_t internal_date,
                                uint32_t *uid_out)
{
    struct store_parsed parsed;
    char *normal = NULL;
    memset(&parsed, 0, sizeof parsed);
    int rc = store_message_check(s, raw, len, flags, keywords, &normal);
    if (rc == MV_OK) {
        rc = store_message_parse(s, raw, len, &parsed);
    }
    if (rc == MV_OK) {
        rc = store_message_insert(s, mailbox_id, raw, len, &parsed, flags, normal, internal_date,
                                  uid_out);
    }
    store_parsed_free(&parsed);
    free(normal);
    return rc;
}

int mv_message_append(mv_store *s,
                      const char *mailbox,
                      const void *raw,
                      size_t len,
                      unsigned flags,
                      const char *keywords,
                      int64_t internal_date,
                      uint32_t *uid_out)
{
    struct store_parsed parsed;
    char *normal = NULL;
    int64_t mailbox_id = 0;
    int began = 0;
    memset(&parsed, 0, sizeof parsed);
    int rc = store_message_check(s, raw, len, flags, keywords, &normal);
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, mailbox, &mailbox_id); /* fail before parsing */
    }
    if (rc == MV_OK) {
        rc = store_message_parse(s, raw, len, &parsed); /* outside the write lock */
    }
    int durable = 0; /* the caller acknowledges the mail once this returns: sync the WAL */
    if (rc == MV_OK) {
        rc = store_durable(s, 1);
        durable = rc == MV_OK;
    }
    if (rc == MV_OK) {
        rc = store_begin(s);
        began = rc == MV_OK;
    }
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, mailbox, &mailbox_id); /* it may have gone meanwhile */
    }
    if (rc == MV_OK) {
        rc = store_message_insert(s, mailbox_id, raw, len, &parsed, flags, normal, internal_date,
                                  uid_out);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (durable) {
        int rc2 = store_durable(s, 0);
        rc = rc != MV_OK ? rc : rc2;
    }
    store_parsed_free(&parsed);
    free(normal);
    return rc;
}

/* ---- fetch, get ------------------------------------------------------------------------ */

/* A deferred transaction around several reads (one snapshot), unless the caller has one. */
static int store_message_read_begin(mv_store *s, int *began)
{
    *began = 0;
    if (!sqlite3_get_autocommit(s->db)) {
        return MV_OK;
    }
    int rc = store_read_begin(s);
    *began = rc == MV_OK;
    return rc;
}

static void store_message_read_end(mv_store *s, int began)
{
    if (began) {
        store_rollback(s); /* nothing was written: ends the snapshot */
    }
}

/* The body of message uid in mailbox_id: MV_OK, MV_ENOTFOUND or an SQLite error. */
static int store_message_body_id(
    mv_store *s, int64_t mailbox_id, const char *mailbox, uint32_t uid, int64_t *body_id)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT body_id FROM messages WHERE mailbox_id = ? AND "
                                     "uid = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "finding a message");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, uid);
    int step = sqlite3_step(st), rc = MV_OK;
    if (step == SQLITE_ROW) {
        *body_id = sqlite3_column_int64(st, 0);
    } else if (step == SQLITE_DONE) {
        rc = store_fail(s, MV_ENOTFOUND, "no message with UID %u in \"%s\"", uid, mailbox);
    } else {
        rc = store_fail_sqlite(s, "finding a message");
    }
    sqlite3_reset(st);
    return rc;
}

/* mv_message_fetch and mv_message_fetch_header: the whole message or only its header. */
static int store_message_fetch_bytes(mv_store *s,
                                     const char *mailbox,
                                     uint32_t uid,
                                     int header_only,
                                     void **raw_out,
                                     size_t *len_out)
{
    int64_t mailbox_id = 0, body_id = 0;
    uint8_t *raw = NULL;
    size_t len = 0;
    int began = 0;
    if (raw_out == NULL || len_out == NULL) {
        return store_fail(s, MV_EINVAL, "%s: no output pointers",
                          header_only ? "mv_message_fetch_header" : "mv_message_fetch");
    }
    *raw_out = NULL;
    *len_out = 0;
    int rc = store_message_read_begin(s, &began);
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, mailbox, &mailbox_id);
    }
    if (rc == MV_OK) {
        rc = store_message_body_id(s, mailbox_id, mailbox, uid, &body_id);
    }
    if (rc == MV_OK) {
        rc = header_only ? store_body_get_header(s, body_id, &raw, &len)
                         : store_body_get(s, body_id, &raw, &len);
    }
    store_message_read_end(s, began);
    if (rc == MV_OK) {
        *raw_out = raw;
        *len_out = len;
    }
    return rc;
}

int mv_message_fetch(
    mv_store *s, const char *mailbox, uint32_t uid, void **raw_out, size_t *len_out)
{
    return store_message_fetch_bytes(s, mailbox, uid, 0, raw_out, len_out);
}

int mv_message_fetch_header(
    mv_store *s, const char *mailbox, uint32_t uid, void **raw_out, size_t *len_out)
{
    return store_message_fetch_bytes(s, mailbox, uid, 1, raw_out, len_out);
}

size_t mv_message_header_len(const void *raw, size_t len)
{
    return raw != NULL ? store_header_end(raw, len) : 0;
}

int store_message_info_read(sqlite3_stmt *st,
                            struct store_strings *strings,
                            struct mv_message_info *info)
{
    int oom = 0;
    memset(info, 0, sizeof *info);
    info->mailbox = store_strings_add(strings, (const char *)sqlite3_column_text(st, 0), &oom);
    info->uid = (uint32_t)sqlite3_column_int64(st, 1);
    info->modseq = (uint64_t)sqlite3_column_int64(st, 2);
    info->internal_date = sqlite3_column_int64(st, 3);
    info->sent_date = sqlite3_column_int64(st, 4);
    info->size = (uint64_t)sqlite3_column_int64(st, 5);
    info->flags = (unsigned)sqlite3_column_int64(st, 6) & MV_FLAG_ALL;
    info->keywords = store_strings_add(strings, (const char *)sqlite3_column_text(st, 7), &oom);
    info->subject = store_strings_add(strings, (const char *)sqlite3_column_text(st, 8), &oom);
    info->from = store_strings_add(strings, (const char *)sqlite3_column_text(st, 9), &oom);
    info->to = store_strings_add(strings, (const char *)sqlite3_column_text(st, 10), &oom);
    info->cc = store_strings_add(strings, (const char *)sqlite3_column_text(st, 11), &oom);
    info->message_id = store_strings_add(strings, (const char *)sqlite3_column_text(st, 12), &oom);
    info->in_reply_to = store_strings_add(strings, (const char *)sqlite3_column_text(st, 13), &oom);
    info->thread_id = sqlite3_column_int64(st, 14);
    return oom ? MV_ENOMEM : MV_OK;
}

int mv_message_get(mv_store *s, const char *mailbox, uint32_t uid, struct mv_message_info *info)
{
    int64_t mailbox_id = 0;
    if (info == NULL) {
        return store_fail(s, MV_EINVAL, "mv_message_get: no output struct");
    }
    int rc = store_mailbox_id(s, mailbox, &mailbox_id);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, "SELECT " STORE_MESSAGE_INFO_COLUMNS " FROM messages m "
                                     "JOIN mailboxes mb ON mb.id = m.mailbox_id "
                                     "WHERE m.mailbox_id = ? AND m.uid = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading a message");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, uid);
    store_strings_clear(&s->strings);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        rc = store_message_info_read(st, &s->strings, info);
        if (rc != MV_OK) {
            rc = store_fail(s, rc, "out of memory reading a message");
        }
    } else if (step == SQLITE_DONE) {
        rc = store_fail(s, MV_ENOTFOUND, "no message with UID %u in \"%s\"", uid, mailbox);
    } else {
        rc = store_fail_sqlite(s, "reading a message");
    }
    sqlite3_reset(st);
    return rc;
}

int store_message_exists(mv_store *s, int64_t mailbox_id, const uint8_t sha256[32], int *exists)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT 1 FROM bodies b JOIN messages m ON m.body_id = b.id "
                                     "WHERE b.sha256 = ? AND m.mailbox_id = ? LIMIT 1");
    if (st == NULL) {
        return store_fail_sqlite(s, "looking for a message");
    }
    sqlite3_bind_blob(st, 1, sha256, 32, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, mailbox_id);
    int step = sqlite3_step(st);
    *exists = step == SQLITE_ROW;
    sqlite3_reset(st);
    return step == SQLITE_ROW || step == SQLITE_DONE
               ? MV_OK
               : store_fail_sqlite(s, "looking for a message");
}

void mv_free(void *p)
{
    free(p);
}

/* ---- walking a UID set ----------------------------------------------------------------- */

/* The same columns in both walks. EXPUNGE reads only \Deleted messages, through the partial
 * index messages_deleted ("(flags & 8) != 0" is its WHERE). INDEXED BY because with
 * sqlite_stat1 (PRAGMA optimize) the planner prefers the (mailbox_id, uid) index, which
 * reads every message in the range; and if the index ever goes, prepare fails loudly. */
static const char *const store_message_walk_all =
    "SELECT id, uid, flags, body_id, keywords, modseq FROM messages WHERE mailbox_id = ?1 "
    "AND uid > ?2 AND uid <= ?3 ORDER BY uid LIMIT ?4";
static const char *const store_message_walk_deleted =
    "SELECT id, uid, flags, body_id, keywords, modseq FROM messages INDEXED BY messages_deleted "
    "WHERE mailbox_id = ?1 AND uid > ?2 AND uid <= ?3 AND (flags & 8) != 0 ORDER BY uid "
    "LIMIT ?4";

struct store_message_row {
    int64_t id;
    uint32_t uid;
    unsigned flags;
    int64_t body_id;
    uint64_t modseq;
    char *keywords; /* NULL unless the walk asked for them */
};

struct store_message_chunk {
    struct store_message_row rows[STORE_MESSAGE_CHUNK];
    size_t count;
};

typedef int (*store_message_visit_fn)(mv_store *s, const struct store_message_row *row, void *arg);

static void store_message_chunk_clear(struct store_message_chunk *c)
{
    for (size_t i = 0; i < c->count; i++) {
        free(c->rows[i].keywords);
        c->rows[i].keywords = NULL;
    }
    c->count = 0;
}

/* Reads up to STORE_MESSAGE_CHUNK rows with after < uid <= last into c, then resets the
 * statement: nothing is stepping over messages while the caller changes them. */
static int store_message_chunk_read(mv_store *s,
                                    const char *sql,
                                    int64_t mailbox_id,
                                    uint32_t after,
                                    uint32_t last,
                                    int with_keywords,
                                    struct store_message_chunk *c)
{
    sqlite3_stmt *st = store_stmt(s, sql);
    if (st == NULL) {
        return store_fail_sqlite(s, "reading messages");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, last);
    sqlite3_bind_int(st, 4, STORE_MESSAGE_CHUNK);
    int rc = MV_OK, step = SQLITE_DONE;
    while (rc == MV_OK && c->count < STORE_MESSAGE_CHUNK &&
           (step = sqlite3_step(st)) == SQLITE_ROW) {
        struct store_message_row *row = &c->rows[c->count++];
        row->id = sqlite3_column_int64(st, 0);
        row->uid = (uint32_t)sqlite3_column_int64(st, 1);
        row->flags = (unsigned)sqlite3_column_int64(st, 2);
        row->body_id = sqlite3_column_int64(st, 3);
        row->modseq = (uint64_t)sqlite3_column_int64(st, 5);
        row->keywords = NULL;
        if (with_keywords) {
            const char *text = (const char *)sqlite3_column_text(st, 4);
            row->keywords = strdup(text != NULL ? text : "");
            if (row->keywords == NULL) {
                rc = store_fail(s, MV_ENOMEM, "out of memory reading messages");
            }
        }
    }
    if (rc == MV_OK && c->count < STORE_MESSAGE_CHUNK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "reading messages");
    }
    sqlite3_reset(st);
    return rc;
}

/* Calls visit for each message of mailbox_id in set (with sql's filter), ascending UID. */
static int store_message_walk(mv_store *s,
                              const char *sql,
                              int64_t mailbox_id,
                              const struct store_uidset *set,
                              int with_keywords,
                              store_message_visit_fn visit,
                              void *arg)
{
    struct store_message_chunk *c = calloc(1, sizeof *c);
    if (c == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory walking a UID set");
    }
    int rc = MV_OK;
    for (size_t r = 0; rc == MV_OK && r < set->count; r++) {
        uint32_t after = set->ranges[r].first - 1, last = set->ranges[r].last;
        int full = 0;
        do {
            rc = store_message_chunk_read(s, sql, mailbox_id, after, last, with_keywords, c);
            for (size_t i = 0; rc == MV_OK && i < c->count; i++) {
                rc = visit(s, &c->rows[i], arg);
            }
            full = c->count == STORE_MESSAGE_CHUNK;
            if (c->count != 0) {
                after = c->rows[c->count - 1].uid;
            }
            store_message_chunk_clear(c);
        } while (rc == MV_OK && full);
    }
    free(c);
    return rc;
}

/* Resolves mailbox and parses uid_set against its largest UID. uid_set NULL means every
 * message when allow_all is set, else it is an error. */
static int store_message_open_set(mv_store *s,
                                  const char *mailbox,
                                  const char *uid_set,
                                  int allow_all,
                                  int64_t *mailbox_id,
                                  struct store_uidset *set)
{
    int rc = store_mailbox_id(s, mailbox, mailbox_id);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, "SELECT coalesce(max(uid), 0) FROM messages "
                                     "WHERE mailbox_id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading the largest UID");
    }
    sqlite3_bind_int64(st, 1, *mailbox_id);
    int step = sqlite3_step(st);
    uint32_t max_uid = (uint32_t)sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (step != SQLITE_ROW) {
        return store_fail_sqlite(s, "reading the largest UID");
    }
    if (uid_set == NULL && allow_all) {
        return store_uidset_parse(s, "1:*", max_uid, set);
    }
    return store_uidset_parse(s, uid_set, max_uid, set);
}

/* Deletes one message row and logs its expunge under the command's modseq (allocated on
 * the first one); drops its body reference if unref is set (not for MOVE). */
static int store_message_remove(mv_store *s,
                                int64_t mailbox_id,
                                const struct store_message_row *row,
                                int unref,
                                uint64_t *modseq)
{
    int rc = *modseq == 0 ? store_mailbox_next_modseq(s, mailbox_id, modseq) : MV_OK;
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, "DELETE FROM messages WHERE id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "expunging a message");
    }
    sqlite3_bind_int64(st, 1, row->id);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    if (step != SQLITE_DONE) {
        return store_fail_sqlite(s, "expunging a message");
    }
    rc = unref ? store_body_unref(s, row->body_id) : MV_OK;
    if (rc == MV_OK) {
        rc = store_message_log(s, mailbox_id, *modseq, row->uid, "expunge");
    }
    return rc;
}

/* ---- flags ----------------------------------------------------------------------------- */

struct store_message_flags {
    int mode;
    unsigned flags;
    struct store_keywords keywords;
    int64_t mailbox_id;
    uint64_t modseq; /* one for the command, allocated on the first change */
    uint32_t changed;
    /* mv_flags_set_unchanged_since: messages whose modseq is above this one are left alone
     * and their UIDs collected in failed (UINT64_MAX: no condition, nothing fails). */
    uint64_t unchanged_since;
    uint32_t *failed;
    size_t failed_count;
    size_t failed_cap;
};

/* Records a message that failed the UNCHANGEDSINCE test. */
static int store_message_flags_failed(mv_store *s, struct store_message_flags *c, uint32_t uid)
{
    if (c->failed_count == c->failed_cap) {
        size_t cap = c->failed_cap != 0 ? c->failed_cap * 2 : 64;
        uint32_t *grown =
            cap <= SIZE_MAX / sizeof *grown ? realloc(c->failed, cap * sizeof *grown) : NULL;
        if (grown == NULL) {
            return store_fail(s, MV_ENOMEM, "out of memory recording modified messages");
        }
        c->failed = grown;
        c->failed_cap = cap;
    }
    c->failed[c->failed_count++] = uid;
    return MV_OK;
}

static int store_message_flags_visit(mv_store *s, const struct store_message_row *row, void *arg)
{
    struct store_message_flags *c = arg;
    if (row->modseq > c->unchanged_since) {
        return store_message_flags_failed(s, c, row->uid); /* changed since: left alone */
    }
    unsigned flags = c->mode == MV_FLAGS_REPLACE ? c->flags
                     : c->mode == MV_FLAGS_ADD   ? row->flags | c->flags
                                                 : row->flags & ~c->flags;
    char *keywords = NULL;
    int rc = store_message_keywords_apply(s, row->keywords, &c->keywords, c->mode, &keywords);
    if (rc != MV_OK || (flags == row->flags && strcmp(keywords, row->keywords) == 0)) {
        free(keywords);
        return rc; /* unchanged: keeps its modseq */
    }
    if (c->modseq == 0) {
        rc = store_mailbox_next_modseq(s, c->mailbox_id, &c->modseq);
    }
    sqlite3_stmt *st = rc == MV_OK ? store_stmt(s, "UPDATE messages SET flags = ?, keywords = ?, "
                                                   "modseq = ? WHERE id = ?")
                                   : NULL;
    if (rc == MV_OK && st == NULL) {
        rc = store_fail_sqlite(s, "changing flags");
    }
    if (rc == MV_OK) {
        sqlite3_bind_int64(st, 1, flags);
        sqlite3_bind_text(st, 2, keywords, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)c->modseq);
        sqlite3_bind_int64(st, 4, row->id);
        int step = sqlite3_step(st);
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "changing flags");
    }
    free(keywords);
    if (rc == MV_OK) {
        rc = store_message_log(s, c->mailbox_id, c->modseq, row->uid, "flags");
    }
    c->changed += rc == MV_OK;
    return rc;
}

/* The flag change of mv_flags_set and mv_flags_set_unchanged_since: the test and the change
 * read and write in the same IMMEDIATE transaction, so no writer comes between them. */
static int store_message_flags_run(mv_store *s,
                                   const char *mailbox,
                                   const char *uid_set,
                                   const char *keywords,
                                   struct store_message_flags *c)
{
    struct store_uidset set = {0};
    int rc = MV_OK, began = 0;
    if (c->mode < MV_FLAGS_REPLACE || c->mode > MV_FLAGS_REMOVE || (c->flags & ~MV_FLAG_ALL) != 0) {
        return store_fail(s, MV_EINVAL, "bad flag mode %d or flag bits 0x%x", c->mode, c->flags);
    }
    rc = store_message_keywords_split(s, keywords, 1, &c->keywords);
    if (rc == MV_OK && c->mode != MV_FLAGS_REMOVE) {
        rc = store_message_keywords_count_check(s, c->keywords.count);
    }
    if (rc == MV_OK) {
        rc = store_begin(s);
        began = rc == MV_OK;
    }
    if (rc == MV_OK) {
        rc = store_message_open_set(s, mailbox, uid_set, 0, &c->mailbox_id, &set);
    }
    if (rc == MV_OK) {
        rc = store_message_walk(s, store_message_walk_all, c->mailbox_id, &set, 1,
                                store_message_flags_visit, c);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    store_uidset_free(&set);
    store_message_keywords_free(&c->keywords);
    return rc;
}

int mv_flags_set(mv_store *s,
                 const char *mailbox,
                 const char *uid_set,
                 int mode,
                 unsigned flags,
                 const char *keywords,
                 uint32_t *changed_out)
{
    struct store_message_flags c = {.mode = mode, .flags = flags, .unchanged_since = UINT64_MAX};
    if (changed_out != NULL) {
        *changed_out = 0;
    }
    int rc = store_message_flags_run(s, mailbox, uid_set, keywords, &c);
    assert(c.failed == NULL); /* no condition: nothing can fail it */
    if (rc == MV_OK && changed_out != NULL) {
        *changed_out = c.changed;
    }
    return rc;
}

int mv_flags_set_unchanged_since(mv_store *s,
                                 const char *mailbox,
                                 const char *uid_set,
                                 int mode,
                                 unsigned flags,
                                 const char *keywords,
                                 uint64_t unchanged_since,
                                 uint32_t *changed_out,
                                 uint32_t **failed_out,
                                 size_t *failed_count_out)
{
    struct store_message_flags c = {
        .mode = mode, .flags = flags, .unchanged_since = unchanged_since};
    if (changed_out != NULL) {
        *changed_out = 0;
    }
    if (failed_out != NULL) {
        *failed_out = NULL;
    }
    if (failed_count_out != NULL) {
        *failed_count_out = 0;
    }
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (failed_out == NULL || failed_count_out == NULL) {
        return store_fail(s, MV_EINVAL, "mv_flags_set_unchanged_since: NULL output pointer");
    }
    int rc = store_message_flags_run(s, mailbox, uid_set, keywords, &c);
    if (rc != MV_OK) {
        free(c.failed);
        return rc;
    }
    if (changed_out != NULL) {
        *changed_out = c.changed;
    }
    *failed_out = c.failed;
    *failed_count_out = c.failed_count;
    return MV_OK;
}

/* ---- copy, move, expunge --------------------------------------------------------------- */

struct store_message_transfer {
    int64_t from_id;
    int64_t to_id;
    int move;
    uint64_t expunge_modseq; /* MOVE: one for the command in the source */
    uint32_t count;
    int want_pairs;      /* mv_message_copy_uids: record (source UID, new UID) pairs */
    uint32_t *pairs;     /* 2 * count entries */
    uint32_t pairs_room; /* messages the array has room for */
};

/* Appends (from, to) to the transfer's UID pairs. */
static int store_message_transfer_pair(mv_store *s,
                                       struct store_message_transfer *t,
                                       uint32_t from,
                                       uint32_t to)
{
    if (t->count == t->pairs_room) {
        size_t room = t->pairs_room != 0 ? (size_t)t->pairs_room * 2 : 64;
        uint32_t *pairs = NULL;
        if (room <= UINT32_MAX) {
            pairs = realloc(t->pairs, room * 2 * sizeof *pairs);
        }
        if (pairs == NULL) {
            return store_fail(s, MV_ENOMEM, "out of memory recording copied UIDs");
        }
        t->pairs = pairs;
        t->pairs_room = (uint32_t)room;
    }
    t->pairs[2 * (size_t)t->count] = from;
    t->pairs[2 * (size_t)t->count + 1] = to;
    return MV_OK;
}

static int store_message_transfer_visit(mv_store *s, const struct store_message_row *row, void *arg)
{
    struct store_message_transfer *t = arg;
    uint32_t uid = 0;
    uint64_t modseq = 0;
    int rc = store_mailbox_next_uid(s, t->to_id, &uid, &modseq);
    sqlite3_stmt *st = rc == MV_OK ? store_stmt(s, "INSERT INTO messages(mailbox_id, uid, modseq, "
                                                   "internal_date, sent_date, size, flags, "
                                                   "keywords, subject, from_addr, to_addr, "
                                                   "cc_addr, message_id, in_reply_to, thread_id, "
                                                   "body_id) SELECT ?1, ?2, ?3, internal_date, "
                                                   "sent_date, size, flags, keywords, subject, "
                                                   "from_addr, to_addr, cc_addr, message_id, "
                                                   "in_reply_to, thread_id, body_id "
                                                   "FROM messages WHERE id = ?4")
                                   : NULL;
    if (rc == MV_OK && st == NULL) {
        rc = store_fail_sqlite(s, "copying a message");
    }
    if (rc == MV_OK) {
        sqlite3_bind_int64(st, 1, t->to_id);
        sqlite3_bind_int64(st, 2, uid);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)modseq);
        sqlite3_bind_int64(st, 4, row->id);
        int step = sqlite3_step(st);
        sqlite3_reset(st);
        rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "copying a message");
    }
    if (rc == MV_OK) {
        rc = store_message_log(s, t->to_id, modseq, uid, "append");
    }
    if (rc == MV_OK) {
        /* COPY adds a reference; MOVE hands the source's reference over. */
        rc = t->move ? store_message_remove(s, t->from_id, row, 0, &t->expunge_modseq)
                     : store_body_ref(s, row->body_id);
    }
    if (rc == MV_OK && t->want_pairs) {
        rc = store_message_transfer_pair(s, t, row->uid, uid);
    }
    t->count += rc == MV_OK;
    return rc;
}

static int store_message_transfer(mv_store *s,
                                  const char *from,
                                  const char *uid_set,
                                  const char *to,
                                  int move,
                                  uint32_t *count_out,
                                  uint32_t **pairs_out)
{
    struct store_message_transfer t = {.move = move, .want_pairs = pairs_out != NULL};
    struct store_uidset set = {0};
    if (count_out != NULL) {
        *count_out = 0;
    }
    if (pairs_out != NULL) {
        *pairs_out = NULL;
    }
    int rc = store_begin(s), began = rc == MV_OK;
    if (rc == MV_OK) {
        rc = store_message_open_set(s, from, uid_set, 0, &t.from_id, &set);
    }
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, to, &t.to_id);
    }
    if (rc == MV_OK) {
        rc = store_message_walk(s, store_message_walk_all, t.from_id, &set, 0,
                                store_message_transfer_visit, &t);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (rc == MV_OK && count_out != NULL) {
        *count_out = t.count;
    }
    if (rc == MV_OK && pairs_out != NULL && t.count > 0) {
        *pairs_out = t.pairs;
        t.pairs = NULL;
    }
    free(t.pairs);
    store_uidset_free(&set);
    return rc;
}

int mv_message_copy(
    mv_store *s, const char *from, const char *uid_set, const char *to, uint32_t *count_out)
{
    return store_message_transfer(s, from, uid_set, to, 0, count_out, NULL);
}

int mv_message_move(
    mv_store *s, const char *from, const char *uid_set, const char *to, uint32_t *count_out)
{
    return store_message_transfer(s, from, uid_set, to, 1, count_out, NULL);
}

int mv_message_copy_uids(mv_store *s,
                         const char *from,
                         const char *uid_set,
                         const char *to,
                         int move,
                         uint32_t **pairs_out,
                         uint32_t *count_out)
{
    if (pairs_out == NULL || count_out == NULL) {
        return store_fail(s, MV_EINVAL, "mv_message_copy_uids: no output pointers");
    }
    return store_message_transfer(s, from, uid_set, to, move != 0, count_out, pairs_out);
}

struct store_message_expunge {
    int64_t mailbox_id;
    uint64_t modseq;
    uint32_t count;
};

static int store_message_expunge_visit(mv_store *s, const struct store_message_row *row, void *arg)
{
    struct store_message_expunge *e = arg;
    int rc = store_message_remove(s, e->mailbox_id, row, 1, &e->modseq);
    e->count += rc == MV_OK;
    return rc;
}

int mv_mailbox_expunge(mv_store *s, const char *mailbox, const char *uid_set, uint32_t *count_out)
{
    struct store_message_expunge e = {0};
    struct store_uidset set = {0};
    if (count_out != NULL) {
        *count_out = 0;
    }
    int rc = store_begin(s), began = rc == MV_OK;
    if (rc == MV_OK) {
        rc = store_message_open_set(s, mailbox, uid_set, 1, &e.mailbox_id, &set);
    }
    if (rc == MV_OK) {
        rc = store_message_walk(s, store_message_walk_deleted, e.mailbox_id, &set, 0,
                                store_message_expunge_visit, &e);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (rc == MV_OK && count_out != NULL) {
        *count_out = e.count;
    }
    store_uidset_free(&set);
    return rc;
}
