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
 *   - A UID set is one statement whatever its number of ranges: the set is a table
 *     (mv_uid_ranges, store_uidset.c) joined to the (mailbox_id, uid) index. Rows to change
 *     are selected by a subquery that SQLite reads completely before the first change, so
 *     no statement steps over rows it is updating.
 *   - A flag change allocates one modseq for the whole command; the changed messages carry
 *     it and unchanged ones keep theirs. mv_flags_set_unchanged_since adds a test per row
 *     (CONDSTORE's UNCHANGEDSINCE): a row whose modseq is above the bound is collected, not
 *     changed, and because the test reads the rows inside the write transaction, no writer
 *     can change a message between its test and its change.
 *   - The change log (`changes`) gets what `messages` cannot tell: expunges ('expunge' rows,
 *     for QRESYNC's VANISHED and the views' sync). An append, a flag change or a copy writes
 *     no log row: CONDSTORE, QRESYNC and the view sync read them off messages.modseq (a new
 *     message carries its mailbox's new modseq), and a row per message cost a quarter of a
 *     STORE 1:* and an index insert per delivery.
 *   - An expunge allocates one modseq the same way. COPY gives the new messages new UIDs
 *     and one modseq, shares the bodies (refcount + 1), and MOVE is COPY plus expunge of the
 *     source in the same transaction (the refcount does not change).
 *   - Keywords are IMAP atoms, compared case-insensitively, stored sorted and space-joined.
 *
 * LIMITATIONS
 *   Threads are never merged: a message that links two existing threads joins the first
 *   one found.
 */
#include "store/store_message.h"
#include "crypto/crypt.h"
#include "store/store_blob.h"
#include "store/store_keyword_registry.h"
#include "store/store_uidset.h"
#include "vfs/db_column.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define STORE_MESSAGE_UID_MAX 0xfffffffeu /* as store_mailbox.c: uidnext must stay a UID + 1 */

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
 * "!= ''" terms let SQLite use the partial indexes; CROSS JOIN keeps body_headers the outer
 * loop (a probe of its Message-ID index, then the messages of those bodies through
 * messages_body), which the planner, without statistics on a young store, would otherwise
 * turn around into a scan of messages. */
static int store_message_thread(mv_store *s, const struct store_parsed *p, int64_t *thread_id)
{
    static const char *const by_id = "SELECT m.thread_id FROM body_headers h CROSS JOIN messages m "
                                     "ON m.body_id = h.body_id WHERE h.message_id = ?1 "
                                     "AND h.message_id != '' ORDER BY m.id LIMIT 1";
    static const char *const by_parent =
        "SELECT m.thread_id FROM body_headers h CROSS JOIN messages m "
        "ON m.body_id = h.body_id WHERE h.in_reply_to = ?1 "
        "AND h.in_reply_to != '' ORDER BY m.id LIMIT 1";
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

/* The body's header text, unless the body already has it (the same bytes were stored
 * before: a copy, a second delivery, or a body waiting for the purge taken up again). */
int store_message_insert_headers(mv_store *s, int64_t body_id, const struct store_parsed *p)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT OR IGNORE INTO body_headers(body_id, sent_date, "
                                     "subject, from_addr, to_addr, cc_addr, message_id, "
                                     "in_reply_to) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "adding a message's header fields");
    }
    sqlite3_bind_int64(st, 1, body_id);
    sqlite3_bind_int64(st, 2, p->sent_date);
    store_message_bind_text(st, 3, p->subject);
    store_message_bind_text(st, 4, p->from);
    store_message_bind_text(st, 5, p->to);
    store_message_bind_text(st, 6, p->cc);
    store_message_bind_text(st, 7, p->message_id);
    store_message_bind_text(st, 8, p->in_reply_to);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "adding a message's header fields");
}

/* The messages row; *row_id gets its id. */
static int store_message_insert_row(mv_store *s,
                                    int64_t mailbox_id,
                                    uint32_t uid,
                                    uint64_t modseq,
                                    int64_t internal_date,
                                    size_t len,
                                    unsigned flags,
                                    const char *keywords,
                                    int64_t thread_id,
                                    int64_t body_id)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT INTO messages(mailbox_id, uid, modseq, "
                                     "internal_date, size, flags, keywords, thread_id, body_id) "
                                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "adding a message");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, uid);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)modseq);
    sqlite3_bind_int64(st, 4, internal_date);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)len);
    sqlite3_bind_int64(st, 6, flags);
    store_message_bind_text(st, 7, keywords);
    sqlite3_bind_int64(st, 8, thread_id);
    sqlite3_bind_int64(st, 9, body_id);
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
                         const uint8_t *sha256,
                         const struct store_parsed *parsed,
                         unsigned flags,
                         const char *keywords,
                         int64_t internal_date,
                         uint32_t *uid_out)
{
    int64_t body_id = 0, thread_id = 0;
    uint32_t uid = 0;
    uint64_t modseq = 0;
    /* first: a keyword the mailbox may not define fails before any work */
    int rc = store_keywords_register(s, mailbox_id, keywords);
    if (rc == MV_OK) {
        rc = store_body_put(s, raw, len, sha256, parsed, &body_id);
    }
    if (rc == MV_OK) {
        rc = store_message_insert_headers(s, body_id, parsed);
    }
    if (rc == MV_OK) {
        rc = store_mailbox_next_uid(s, mailbox_id, &uid, &modseq);
    }
    if (rc == MV_OK) {
        rc = store_message_thread(s, parsed, &thread_id);
    }
    if (rc == MV_OK) {
        int64_t date = internal_date != 0 ? internal_date : (int64_t)time(NULL);
        rc = store_message_insert_row(s, mailbox_id, uid, modseq, date, len, flags, keywords,
                                      thread_id, body_id);
    }
    if (rc == MV_OK && thread_id == 0) {
        rc = store_message_thread_start(s, sqlite3_last_insert_rowid(s->db));
    }
    if (rc == MV_OK && uid_out != NULL) {
        *uid_out = uid;
    }
    return rc;
}

int store_body_damaged(int rc)
{
    return rc != MV_OK && rc != MV_ENOMEM && rc != MV_EIO && rc != MV_EBUSY && rc != MV_ENOSPC &&
           rc != MV_EMOVED;
}

int store_body_parse_stored(mv_store *s, int64_t body_id, struct store_parsed *out)
{
    uint8_t *raw = NULL;
    size_t len = 0;
    int rc = store_body_get(s, body_id, &raw, &len);
    if (rc != MV_OK) {
        return rc;
    }
    /* No limits here: the message is already stored, only its text is wanted. */
    struct mv_limits unlimited = MV_LIMITS_DEFAULT;
    unlimited.message_size_max = UINT64_MAX;
    unlimited.header_count_max = UINT32_MAX;
    unlimited.header_size_max = UINT32_MAX;
    static const uint8_t empty = 0;
    char err[256] = "";
    rc = store_parse(len != 0 ? raw : &empty, len, &unlimited, STORE_SPLIT_MIN, out, err,
                     sizeof err);
    crypt_free_wiped(raw);
    if (rc != MV_OK) {
        return store_fail(s, rc, "parsing body %lld: %s", (long long)body_id,
                          err[0] != '\0' ? err : mv_strerror(rc));
    }
    return MV_OK;
}

int store_body_headers_rebuild(mv_store *s, int64_t body_id)
{
    struct store_parsed parsed;
    memset(&parsed, 0, sizeof parsed);
    int rc = store_body_parse_stored(s, body_id, &parsed);
    if (rc == MV_OK) {
        rc = store_message_insert_headers(s, body_id, &parsed);
        store_parsed_free(&parsed);
    }
    return rc;
}

/* Parses raw with the store's limits; the parser's message becomes the handle's. Without
 * the texts when the full-text row is deferred (s->fts_defer: a stepped drain's message,
 * whose row mv_store_index_backlog() makes from the stored body). */
static int store_message_parse(mv_store *s, const void *raw, size_t len, struct store_parsed *out)
{
    static const uint8_t empty = 0;
    char err[256] = "";
    int rc = store_parse_flags(len != 0 ? raw : &empty, len, &s->limits, STORE_SPLIT_MIN,
                               s->fts_defer ? STORE_PARSE_NO_TEXT : 0, out, err, sizeof err);
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
    return store_message_append_parsed_in_txn(s, mailbox_id, raw, len, NULL, NULL, flags, keywords,
                                              internal_date, uid_out);
}

int store_message_append_parsed_in_txn(mv_store *s,
                                       int64_t mailbox_id,
                                       const void *raw,
                                       size_t len,
                                       const struct store_parsed *parsed,
                                       const uint8_t *sha256,
                                       unsigned flags,
                                       const char *keywords,
                                       int64_t internal_date,
                                       uint32_t *uid_out)
{
    struct store_parsed own;
    char *normal = NULL;
    memset(&own, 0, sizeof own);
    int rc = store_message_check(s, raw, len, flags, keywords, &normal);
    if (rc == MV_OK && parsed == NULL) {
        rc = store_message_parse(s, raw, len, &own);
        parsed = &own;
        sha256 = NULL; /* a digest comes only with the caller's parse */
    }
    if (rc == MV_OK) {
        rc = store_message_insert(s, mailbox_id, raw, len, sha256, parsed, flags, normal,
                                  internal_date, uid_out);
    }
    store_parsed_free(&own);
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
    s->fts_defer = s->index_later; /* mv_store_index_later(): the row comes later */
    if (rc == MV_OK) {
        rc = store_message_parse(s, raw, len, &parsed); /* outside the write lock */
    }
    int durable = 0; /* the caller acknowledges the mail once this returns: sync the WAL */
    if (rc == MV_OK && !s->sync_later) { /* else mv_store_sync() does (store_sync_later.c) */
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
        rc = store_message_insert(s, mailbox_id, raw, len, NULL, &parsed, flags, normal,
                                  internal_date, uid_out);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
        s->sync_owed |= rc == MV_OK && s->sync_later;
    } else if (began) {
        store_rollback(s);
    }
    if (durable) {
        int rc2 = store_durable(s, 0);
        rc = rc != MV_OK ? rc : rc2;
    }
    s->fts_defer = 0;
    store_parsed_free(&parsed);
    free(normal);
    return rc;
}

/* ---- fetch, get ------------------------------------------------------------------------ */

/* A deferred transaction around several reads (one snapshot), unless the caller has one. */
int store_message_read_begin(mv_store *s, int *began)
{
    *began = 0;
    if (!sqlite3_get_autocommit(s->db)) {
        return MV_OK;
    }
    int rc = store_read_begin(s);
    *began = rc == MV_OK;
    return rc;
}

void store_message_read_end(mv_store *s, int began)
{
    if (began) {
        store_rollback(s); /* nothing was written: ends the snapshot */
    }
}

/* The body of message uid in mailbox_id: MV_OK, MV_ENOTFOUND or an SQLite error. */
static int store_message_body_id(
    mv_store *s, int64_t mailbox_id, const char *mailbox, uint32_t uid, int64_t *body_id)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT body_id FROM messages INDEXED BY messages_uid_body "
                                     "WHERE mailbox_id = ? AND uid = ?");
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

/* mv_message_fetch and mv_message_fetch_header: the whole message or only its header;
 * mv_message_fetch_into: the whole message at place's memory (raw_out NULL). */
static int store_message_fetch_bytes(mv_store *s,
                                     const char *mailbox,
                                     uint32_t uid,
                                     int header_only,
                                     void *(*place)(void *arg, size_t size),
                                     void *place_arg,
                                     void **raw_out,
                                     size_t *len_out)
{
    int64_t mailbox_id = 0, body_id = 0;
    uint8_t *raw = NULL;
    size_t len = 0;
    int began = 0;
    if ((raw_out == NULL && place == NULL) || len_out == NULL) {
        return store_fail(s, MV_EINVAL, "%s: no output pointers",
                          header_only     ? "mv_message_fetch_header"
                          : place != NULL ? "mv_message_fetch_into"
                                          : "mv_message_fetch");
    }
    if (raw_out != NULL) {
        *raw_out = NULL;
    }
    *len_out = 0;
    int rc = store_message_read_begin(s, &began);
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, mailbox, &mailbox_id);
    }
    if (rc == MV_OK) {
        /* found in one statement; when not, the steps below say what is missing */
        rc = header_only     ? store_message_header_get(s, mailbox_id, uid, &raw, &len)
             : place != NULL ? store_message_body_place(s, mailbox_id, uid, place, place_arg, &len)
                             : store_message_body_get(s, mailbox_id, uid, &raw, &len);
        if (rc != MV_ENOTFOUND) {
            goto done;
        }
        rc = MV_OK;
    }
    if (rc == MV_OK) {
        rc = store_message_body_id(s, mailbox_id, mailbox, uid, &body_id);
    }
    if (rc == MV_OK) {
        /* the message is there now, or its rows are damaged: store_body_get() says which */
        rc = header_only ? store_body_get_header(s, body_id, &raw, &len)
                         : store_body_get(s, body_id, &raw, &len);
        if (rc == MV_OK && place != NULL) {
            void *to = place(place_arg, len);
            if (to == NULL) {
                rc = store_fail(s, MV_ENOMEM, "out of memory reading a message of %zu bytes", len);
            } else if (len > 0) {
                memcpy(to, raw, len);
            }
            free(raw);
            raw = NULL;
        }
    }
done:
    store_message_read_end(s, began);
    if (rc == MV_OK) {
        if (raw_out != NULL) {
            *raw_out = raw;
        }
        *len_out = len;
    }
    return rc;
}

/* The start of a walk over a mailbox's messages (store_walk_rows,
 * mv_message_headers_each): the store and the function there, a read snapshot (*began when
 * it is the walk's own: store_message_read_end after, whatever the result) and the mailbox's
 * id. MV_OK, MV_EINVAL, MV_ENOTFOUND, or the store's error. */
static int store_walk_begin(mv_store *s,
                            const char *mailbox,
                            int have_each,
                            const char *name,
                            int64_t *mailbox_id,
                            int *began)
{
    *began = 0;
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (!have_each) {
        return store_fail(s, MV_EINVAL, "%s: no function", name);
    }
    int rc = store_message_read_begin(s, began);
    return rc == MV_OK ? store_mailbox_id(s, mailbox, mailbox_id) : rc;
}

/* A walk over a mailbox's messages by one statement (sql: ?1 the mailbox's id, ?2 and ?3 the
 * UIDs' range, in UID order): row(arg, st) for each row, until it returns nonzero, which the
 * walk returns. Not a cached statement: the caller's function may read the store. what names
 * the walk in an error. */
static int store_walk_rows(mv_store *s,
                           const char *mailbox,
                           uint32_t first_uid,
                           uint32_t last_uid,
                           const char *name,
                           const char *sql,
                           const char *what,
                           int (*row)(void *arg, sqlite3_stmt *st),
                           void *arg)
{
    int64_t mailbox_id = 0;
    int began = 0;
    int rc = store_walk_begin(s, mailbox, arg != NULL, name, &mailbox_id, &began);
    if (rc == MV_EINVAL && s == NULL) {
        return rc;
    }
    sqlite3_stmt *st = NULL;
    if (rc == MV_OK && first_uid <= last_uid &&
        sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = store_fail_sqlite(s, what);
    }
    if (st != NULL) {
        sqlite3_bind_int64(st, 1, mailbox_id);
        sqlite3_bind_int64(st, 2, first_uid);
        sqlite3_bind_int64(st, 3, last_uid);
        int step = SQLITE_DONE;
        while (rc == MV_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
            rc = row(arg, st);
        }
        if (rc == MV_OK && step != SQLITE_DONE) {
            rc = store_fail_sqlite(s, what);
        }
        sqlite3_finalize(st);
    }
    store_message_read_end(s, began);
    return rc;
}

/* mv_message_sent_each's caller's function, for store_walk_rows (NULL: none given). */
struct store_sent_walk {
    int (*each)(void *arg, uint32_t uid, int64_t sent);
    void *arg;
};

static int store_sent_row(void *arg, sqlite3_stmt *st)
{
    const struct store_sent_walk *w = arg;
    int64_t date = sqlite3_column_int64(st, 1);
    return w->each(w->arg, (uint32_t)sqlite3_column_int64(st, 0),
                   date == 0 ? MV_SENT_NONE : date + sqlite3_column_int64(st, 2));
}

int mv_message_sent_each(mv_store *s,
                         const char *mailbox,
                         uint32_t first_uid,
                         uint32_t last_uid,
                         int (*each)(void *arg, uint32_t uid, int64_t sent),
                         void *arg)
{
    struct store_sent_walk w = {each, arg};
    /* The zone is the body's (bodies), the date the header row's (body_headers, which a
     * damaged store may lack: no date). */
    return store_walk_rows(s, mailbox, first_uid, last_uid, "mv_message_sent_each",
                           "SELECT m.uid, h.sent_date, b.sent_zone FROM messages m INDEXED BY "
                           "messages_uid_body JOIN bodies b ON b.id = m.body_id LEFT JOIN "
                           "body_headers h ON h.body_id = m.body_id WHERE m.mailbox_id = ?1 "
                           "AND m.uid BETWEEN ?2 AND ?3 ORDER BY m.uid",
                           "reading the messages' dates", store_sent_row, each != NULL ? &w : NULL);
}

/* A text column, or "" for a NULL one (a message without its body_headers row). */
static const char *store_column_text(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t != NULL ? (const char *)t : "";
}

/* mv_message_fields_each's caller's function, for store_walk_rows. */
struct store_fields_walk {
    int (*each)(void *arg, const struct mv_message_fields *fields);
    void *arg;
};

static int store_fields_row(void *arg, sqlite3_stmt *st)
{
    const struct store_fields_walk *w = arg;
    int64_t date = sqlite3_column_int64(st, 1);
    struct mv_message_fields f = {
        .uid = (uint32_t)sqlite3_column_int64(st, 0),
        .sent_utc = date == 0 ? MV_SENT_NONE : date,
        .subject = store_column_text(st, 2),
        .from = store_column_text(st, 3),
        .to = store_column_text(st, 4),
        .cc = store_column_text(st, 5),
    };
    return w->each(w->arg, &f);
}

int mv_message_fields_each(mv_store *s,
                           const char *mailbox,
                           uint32_t first_uid,
                           uint32_t last_uid,
                           int (*each)(void *arg, const struct mv_message_fields *fields),
                           void *arg)
{
    struct store_fields_walk w = {each, arg};
    /* The fields are the body's header row's, which a damaged store may lack (LEFT JOIN:
     * empty fields, no date). */
    return store_walk_rows(s, mailbox, first_uid, last_uid, "mv_message_fields_each",
                           "SELECT m.uid, h.sent_date, h.subject, h.from_addr, h.to_addr, "
                           "h.cc_addr FROM messages m INDEXED BY messages_uid_body LEFT JOIN "
                           "body_headers h ON h.body_id = m.body_id WHERE m.mailbox_id = ?1 "
                           "AND m.uid BETWEEN ?2 AND ?3 ORDER BY m.uid",
                           "reading the messages' header fields", store_fields_row,
                           each != NULL ? &w : NULL);
}

int mv_message_headers_each(mv_store *s,
                            const char *mailbox,
                            uint32_t first_uid,
                            uint32_t last_uid,
                            int (*each)(void *arg, uint32_t uid, const void *raw, size_t len),
                            void *arg)
{
    int64_t mailbox_id = 0;
    int began = 0;
    int rc =
        store_walk_begin(s, mailbox, each != NULL, "mv_message_headers_each", &mailbox_id, &began);
    if (rc == MV_EINVAL && s == NULL) {
        return rc;
    }
    if (rc == MV_OK && first_uid <= last_uid) {
        rc = store_message_headers_each(s, mailbox_id, first_uid, last_uid, each, arg);
    }
    store_message_read_end(s, began);
    return rc;
}

int mv_message_headers_keyed(mv_store *s,
                             const char *mailbox,
                             const struct mv_message_key *keys,
                             size_t n,
                             int (*got)(void *arg, size_t index, const void *raw, size_t len),
                             void *arg)
{
    if (s == NULL) {
        return MV_EINVAL;
    }
    if (mailbox == NULL || (keys == NULL && n > 0) || got == NULL) {
        return store_fail(s, MV_EINVAL, "mv_message_headers_keyed: NULL argument");
    }
    return store_message_headers_keyed(s, mailbox, keys, n, got, arg);
}

int mv_message_fetch(
    mv_store *s, const char *mailbox, uint32_t uid, void **raw_out, size_t *len_out)
{
    return store_message_fetch_bytes(s, mailbox, uid, 0, NULL, NULL, raw_out, len_out);
}

int mv_message_fetch_into(mv_store *s,
                          const char *mailbox,
                          uint32_t uid,
                          void *(*place)(void *arg, size_t size),
                          void *place_arg,
                          size_t *len_out)
{
    if (place == NULL) {
        return store_fail(s, MV_EINVAL, "mv_message_fetch_into: no place function");
    }
    return store_message_fetch_bytes(s, mailbox, uid, 0, place, place_arg, NULL, len_out);
}

int store_mailbox_unchanged(mv_store *s, int64_t mailbox_id, uint32_t uidvalidity, uint64_t modseq)
{
    sqlite3_stmt *st =
        store_stmt(s, "SELECT uidvalidity, highestmodseq FROM mailboxes WHERE id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading a mailbox");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    int step = sqlite3_step(st), rc = 0;
    if (step == SQLITE_ROW) {
        rc = (uint64_t)sqlite3_column_int64(st, 0) == uidvalidity &&
             (uint64_t)sqlite3_column_int64(st, 1) == modseq;
    } else if (step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, "reading a mailbox");
    }
    sqlite3_reset(st);
    return rc;
}

int store_message_key_holds(mv_store *s,
                            const char *mailbox,
                            const struct mv_message_key *key,
                            int *began)
{
    int64_t mailbox_id = 0;
    int rc = store_message_read_begin(s, began);
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, mailbox, &mailbox_id);
    }
    if (rc != MV_OK) {
        return rc;
    }
    if (s->read_snapshot && s->snapshot_key_mailbox == mailbox_id &&
        s->snapshot_key_uidvalidity == key->uidvalidity && s->snapshot_key_modseq == key->modseq) {
        return 1; /* found to hold in this snapshot already (store.h) */
    }
    rc = store_mailbox_unchanged(s, mailbox_id, key->uidvalidity, key->modseq);
    if (rc == 1 && s->read_snapshot) {
        s->snapshot_key_mailbox = mailbox_id;
        s->snapshot_key_uidvalidity = key->uidvalidity;
        s->snapshot_key_modseq = key->modseq;
    }
    return rc;
}

int mv_message_fetch_keyed_into(mv_store *s,
                                const char *mailbox,
                                uint32_t uid,
                                const struct mv_message_key *key,
                                void *(*place)(void *arg, size_t size),
                                void *place_arg,
                                size_t *len_out)
{
    int64_t body_id = 0;
    int compression = 0;
    /* The key skips the SHA-256 check, so only where every page read is authenticated. */
    if (s == NULL || mailbox == NULL || key == NULL || place == NULL || len_out == NULL ||
        !s->pages_authenticated || key->size > SIZE_MAX ||
        !store_body_key_parts(key->body_key, &body_id, &compression)) {
        return mv_message_fetch_into(s, mailbox, uid, place, place_arg, len_out);
    }
    *len_out = 0;
    int began = 0;
    int rc = store_message_key_holds(s, mailbox, key, &began);
    if (rc == 1) {
        rc = store_body_place_keyed(s, body_id, compression, (size_t)key->size, place, place_arg,
                                    len_out);
    } else if (rc == 0) {
        rc = MV_ENOTFOUND;
    }
    store_message_read_end(s, began);
    if (rc == MV_ENOTFOUND) { /* changed since, or the body row gone: by UID, as ever */
        return mv_message_fetch_into(s, mailbox, uid, place, place_arg, len_out);
    }
    return rc;
}

int mv_message_skeleton_keyed(mv_store *s,
                              const char *mailbox,
                              const struct mv_message_key *key,
                              void *(*place)(void *arg, size_t size),
                              void *place_arg,
                              size_t *len_out,
                              struct mv_message_cut *cuts,
                              size_t cuts_max,
                              size_t *cut_count)
{
    int64_t body_id = 0;
    int compression = 0;
    if (s == NULL || mailbox == NULL || place == NULL || len_out == NULL || cut_count == NULL ||
        (cuts == NULL && cuts_max > 0)) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_message_skeleton_keyed: NULL argument")
                         : MV_EINVAL;
    }
    *len_out = 0;
    *cut_count = 0;
    /* Without authenticated pages a read checks the SHA-256 of every byte (fetch_keyed_into). */
    if (key == NULL || !s->pages_authenticated || key->size > SIZE_MAX ||
        !store_body_key_parts(key->body_key, &body_id, &compression)) {
        return store_fail(s, MV_EUNSUPPORTED, "no skeleton read here: read the whole message");
    }
    int began = 0;
    int rc = store_message_key_holds(s, mailbox, key, &began);
    if (rc == 1) {
        rc = store_body_skeleton_keyed(s, body_id, compression, (size_t)key->size, place, place_arg,
                                       len_out, cuts, cuts_max, cut_count);
    } else if (rc == 0) {
        rc = MV_ENOTFOUND;
    }
    store_message_read_end(s, began);
    return rc;
}

int mv_message_prefix_keyed(mv_store *s,
                            const char *mailbox,
                            const struct mv_message_key *key,
                            size_t want,
                            void *(*place)(void *arg, size_t size),
                            void *place_arg,
                            size_t *len_out)
{
    int64_t body_id = 0;
    int compression = 0;
    if (s == NULL || mailbox == NULL || place == NULL || len_out == NULL) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_message_prefix_keyed: NULL argument")
                         : MV_EINVAL;
    }
    *len_out = 0;
    /* Without authenticated pages a read checks the SHA-256 of every byte (fetch_keyed_into). */
    if (key == NULL || !s->pages_authenticated || key->size > SIZE_MAX ||
        !store_body_key_parts(key->body_key, &body_id, &compression)) {
        return store_fail(s, MV_EUNSUPPORTED, "no prefix read here: read the whole message");
    }
    int began = 0;
    int rc = store_message_key_holds(s, mailbox, key, &began);
    if (rc == 1) {
        rc = store_body_prefix_keyed(s, body_id, compression, (size_t)key->size, want, place,
                                     place_arg, len_out);
    } else if (rc == 0) {
        rc = MV_ENOTFOUND;
    }
    store_message_read_end(s, began);
    return rc;
}

int mv_message_fetch_header(
    mv_store *s, const char *mailbox, uint32_t uid, void **raw_out, size_t *len_out)
{
    return store_message_fetch_bytes(s, mailbox, uid, 1, NULL, NULL, raw_out, len_out);
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
    info->mailbox = store_strings_add(strings, mv_db_column_text(st, 0, &oom), &oom);
    info->uid = (uint32_t)sqlite3_column_int64(st, 1);
    info->modseq = (uint64_t)sqlite3_column_int64(st, 2);
    info->internal_date = sqlite3_column_int64(st, 3);
    info->sent_date = sqlite3_column_int64(st, 4);
    info->size = (uint64_t)sqlite3_column_int64(st, 5);
    info->flags = (unsigned)sqlite3_column_int64(st, 6) & MV_FLAG_ALL;
    info->keywords = store_strings_add(strings, mv_db_column_text(st, 7, &oom), &oom);
    info->subject = store_strings_add(strings, mv_db_column_text(st, 8, &oom), &oom);
    info->from = store_strings_add(strings, mv_db_column_text(st, 9, &oom), &oom);
    info->to = store_strings_add(strings, mv_db_column_text(st, 10, &oom), &oom);
    info->cc = store_strings_add(strings, mv_db_column_text(st, 11, &oom), &oom);
    info->message_id = store_strings_add(strings, mv_db_column_text(st, 12, &oom), &oom);
    info->in_reply_to = store_strings_add(strings, mv_db_column_text(st, 13, &oom), &oom);
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
    sqlite3_stmt *st =
        store_stmt(s, "SELECT " STORE_MESSAGE_INFO_COLUMNS " FROM " STORE_MESSAGE_INFO_FROM
                      " WHERE m.mailbox_id = ? AND m.uid = ?");
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
    /* The body by its hash, then its messages. Named: on a store without statistics the
     * planner would walk the mailbox's entries of messages_uid_body (which holds all this
     * join needs of messages) and look each body up, per imported message. */
    sqlite3_stmt *st = store_stmt(s, "SELECT 1 FROM bodies b JOIN messages m INDEXED BY "
                                     "messages_body ON m.body_id = b.id "
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
    crypt_free_wiped(p);
}

/* ---- set-based changes ----------------------------------------------------------------- */
/*
 * Every change below is one statement per UID range (plus a few per command), whatever the
 * number of messages in the range: SQLite walks the (mailbox_id, uid) index itself. What
 * varies per message and needs C (keyword merging, the new UID of a copy) is done by two
 * SQL functions registered on the connection, which get their per-command state through
 * sqlite3_bind_pointer (so no state lives on the connection between commands).
 *
 * UPDATE OR FAIL / INSERT OR FAIL: with the default conflict rule (ABORT) a statement that
 * writes several rows or fires triggers needs a statement journal to undo itself on an
 * error; every error here rolls the whole transaction back anyway, so FAIL (stop, keep what
 * was done, the caller rolls back) is as safe and spares the journal, which is what cost
 * most of a bulk STORE or COPY (each page journalled through an encrypted temp file).
 */

#define STORE_MESSAGE_FN_FLAGS "mv_flags_fn"
#define STORE_MESSAGE_FN_UIDS  "mv_uids_fn"

/* The state of mv_keywords_apply(keywords, state) for one STORE. */
struct store_message_flags_fn {
    mv_store *s;
    int mode;
    struct store_keywords keywords;
    int rc;        /* the first failure inside the function */
    char msg[256]; /* and its message (SQLite's error replaces the handle's) */
};

/* mv_keywords_apply(current, state): the message's keywords after the STORE. */
static void store_message_keywords_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct store_message_flags_fn *f = sqlite3_value_pointer(argv[1], STORE_MESSAGE_FN_FLAGS);
    if (f == NULL) {
        sqlite3_result_error(ctx, "mv_keywords_apply: no state", -1);
        return;
    }
    if (f->mode != MV_FLAGS_REPLACE && f->keywords.count == 0) {
        sqlite3_result_value(ctx, argv[0]); /* +FLAGS / -FLAGS without keywords */
        return;
    }
    int current_type = sqlite3_value_type(argv[0]); /* before the text: see vfs/db_column.h */
    const char *current = (const char *)sqlite3_value_text(argv[0]);
    if (current == NULL && current_type != SQLITE_NULL) {
        sqlite3_result_error_nomem(ctx); /* not "no keywords": they would be overwritten */
        return;
    }
    char *out = NULL;
    int rc = store_message_keywords_apply(f->s, current != NULL ? current : "", &f->keywords,
                                          f->mode, &out);
    if (rc != MV_OK) {
        if (f->rc == MV_OK) {
            f->rc = rc;
            snprintf(f->msg, sizeof f->msg, "%s", mv_store_errmsg(f->s));
        }
        sqlite3_result_error(ctx, "keywords", -1);
        return;
    }
    sqlite3_result_text(ctx, out, -1, free);
}

/* The state of mv_uid_map(uid, state) for one COPY or MOVE: the source UIDs, ascending; the
 * i-th gets first_new + i. */
struct store_message_uids_fn {
    const uint32_t *source;
    size_t count;
    uint32_t first_new;
};

/* mv_uid_map(uid, state): the UID the copy of source message uid gets. A binary search, so
 * the order in which SQLite visits the rows does not matter. */
static void store_message_uid_map_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const struct store_message_uids_fn *m = sqlite3_value_pointer(argv[1], STORE_MESSAGE_FN_UIDS);
    sqlite3_int64 uid = sqlite3_value_int64(argv[0]);
    size_t lo = 0, hi = m != NULL ? m->count : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((sqlite3_int64)m->source[mid] < uid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (m == NULL || lo == m->count || (sqlite3_int64)m->source[lo] != uid) {
        sqlite3_result_error(ctx, "mv_uid_map: a message outside the copied set", -1);
        return;
    }
    sqlite3_result_int64(ctx, (sqlite3_int64)m->first_new + (sqlite3_int64)lo);
}

int store_message_functions(mv_store *s)
{
    int flags = SQLITE_UTF8 | SQLITE_DIRECTONLY;
    if (sqlite3_create_function_v2(s->db, "mv_keywords_apply", 2, flags, NULL,
                                   store_message_keywords_fn, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function_v2(s->db, "mv_uid_map", 2, flags, NULL, store_message_uid_map_fn,
                                   NULL, NULL, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "registering the store's SQL functions");
    }
    int rc = store_uidset_register(s);
    if (rc == MV_OK) {
        rc = store_fts_backlog_functions(s);
    }
    if (rc == MV_OK) {
        rc = store_fold_functions(s);
    }
    return rc == MV_OK ? store_fts_functions(s) : rc;
}

/* Steps st (no rows, or rows to ignore) to its end and resets it; *changes gets
 * sqlite3_changes() if not NULL. */
static int store_message_run(mv_store *s, sqlite3_stmt *st, const char *what, int64_t *changes)
{
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    }
    if (changes != NULL) {
        *changes = sqlite3_changes64(s->db);
    }
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, what);
}

/* The mailbox's highest modseq (*modseq), next UID (*uidnext) and message count (*messages);
 * uidnext and messages may be NULL. */
static int store_message_counters(
    mv_store *s, int64_t mailbox_id, uint64_t *modseq, uint32_t *uidnext, int64_t *messages)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT highestmodseq, uidnext, message_count FROM mailboxes "
                                     "WHERE id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading a mailbox's counters");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *modseq = (uint64_t)sqlite3_column_int64(st, 0);
        if (uidnext != NULL) {
            sqlite3_int64 next = sqlite3_column_int64(st, 1);
            *uidnext = next >= 1 && next <= UINT32_MAX ? (uint32_t)next : 0;
        }
        if (messages != NULL) {
            *messages = sqlite3_column_int64(st, 2);
        }
    }
    sqlite3_reset(st);
    if (step != SQLITE_ROW) {
        return step == SQLITE_DONE
                   ? store_fail(s, MV_ECORRUPT, "mailbox %lld has gone", (long long)mailbox_id)
                   : store_fail_sqlite(s, "reading a mailbox's counters");
    }
    return MV_OK;
}

/* Raises the mailbox's highest modseq to modseq (never lowers it). */
static int store_message_modseq_raise(mv_store *s, int64_t mailbox_id, uint64_t modseq)
{
    sqlite3_stmt *st = store_stmt(s, "UPDATE mailboxes SET highestmodseq = max(highestmodseq, ?2) "
                                     "WHERE id = ?1");
    if (st == NULL) {
        return store_fail_sqlite(s, "allocating a modseq");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)modseq);
    return store_message_run(s, st, "allocating a modseq", NULL);
}

/* Resolves mailbox and turns the set (text, or typed ranges when text is NULL and ranges is
 * not; neither: every message when allow_all is set) into clamped ranges. */
struct store_message_setarg {
    const char *text;
    const struct mv_uid_range *ranges;
    size_t count;
    int all; /* no set given: every message */
};

static int store_message_open_set(mv_store *s,
                                  const char *mailbox,
                                  const struct store_message_setarg *arg,
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
    if (arg->all) {
        return store_uidset_parse(s, "1:*", max_uid, set);
    }
    if (arg->text == NULL) {
        return store_uidset_from_ranges(s, arg->ranges, arg->count, max_uid, set);
    }
    return store_uidset_parse(s, arg->text, max_uid, set);
}

/* ---- flags ----------------------------------------------------------------------------- */

/* Binds (mailbox, set) of a set statement as ?1 and ?2 (the set for mv_uid_ranges(?2)). */
static void
store_message_bind_set(sqlite3_stmt *st, int64_t mailbox_id, const struct store_uidset *set)
{
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_pointer(st, 2, (void *)set, STORE_UIDSET_POINTER, NULL);
}

/* Binds (mailbox, first, last) of a range statement as ?1, ?2, ?3. */
static void
store_message_bind_range(sqlite3_stmt *st, int64_t mailbox_id, const struct mv_uid_range *r)
{
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, r->first);
    sqlite3_bind_int64(st, 3, r->last);
}

/* Turns this connection's triggers on or off (SQLITE_DBCONFIG_ENABLE_TRIGGER: this
 * connection only, no schema change, every other connection and program still runs them). */
static int store_message_triggers(mv_store *s, int on)
{
    int now = -1;
    if (sqlite3_db_config(s->db, SQLITE_DBCONFIG_ENABLE_TRIGGER, on, &now) != SQLITE_OK ||
        now != on) {
        return store_fail(s, MV_ERROR,
                          on ? "could not turn the store's triggers back on"
                             : "could not turn the store's triggers off");
    }
    return MV_OK;
}

/* From this many messages on, an EXPUNGE, a STORE, a COPY or a MOVE runs its statements on
 * messages with the connection's triggers off (store_message_triggers) and keeps the
 * mailboxes' counters itself, with one statement per command or range instead of the
 * counters' trigger per row. Below it they run with the trigger: turning the triggers off and
 * on expires every prepared statement of the connection, and preparing them again at their
 * next use (the command's own, then the session's next FETCH, STORE, STATUS ...) cost ~0.4
 * ms of CPU, against ~3 us a row for the trigger (one message at a time on the 10k bench
 * store, library level, alternating: EXPUNGE 0.10-0.12 -> 0.28-0.32 ms and the three calls
 * after it 0.08-0.15 -> 0.27-0.30 ms with the triggers turned off for every EXPUNGE); about
 * where the two cost the same. */
#define STORE_UNTRIGGERED_MIN 128

/* The UIDs the set spans (an upper bound of its messages). */
static uint64_t store_message_set_span(const struct store_uidset *set)
{
    uint64_t span = 0;
    for (size_t r = 0; r < set->count; r++) {
        span += (uint64_t)set->ranges[r].last - set->ranges[r].first + 1;
    }
    return span;
}

/* The unseen messages of the set, through the messages_unseen index (*n). */
static int store_message_unseen_in_set(mv_store *s,
                                       int64_t mailbox_id,
                                       const struct store_uidset *set,
                                       int64_t *n)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT count(*) FROM mv_uid_ranges(?2) r JOIN messages m "
                                     "INDEXED BY messages_unseen ON m.mailbox_id = ?1 AND m.uid "
                                     "BETWEEN r.first AND r.last AND (m.flags & 1) = 0");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting unseen messages");
    }
    store_message_bind_set(st, mailbox_id, set);
    int step = sqlite3_step(st);
    *n = step == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "counting unseen messages");
}

/* Adds delta to the mailbox's unseen counter (what the update trigger would have done for a
 * flag change that ran without it). */
static int store_message_unseen_add(mv_store *s, int64_t mailbox_id, int64_t delta)
{
    if (delta == 0) {
        return MV_OK;
    }
    sqlite3_stmt *st = store_stmt(s, "UPDATE OR FAIL mailboxes SET unseen_count = unseen_count "
                                     "+ ?2 WHERE id = ?1");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting unseen messages");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, delta);
    return store_message_run(s, st, "counting unseen messages", NULL);
}

/* What the counters hold of a set of messages (a MOVE without the triggers). */
struct store_message_tally {
    int64_t messages;
    int64_t unseen;
    int64_t bytes;
};

/* The tally of the set's messages in mailbox_id: one walk over them. */
static int store_message_set_tally(mv_store *s,
                                   int64_t mailbox_id,
                                   const struct store_uidset *set,
                                   struct store_message_tally *t)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT count(*), coalesce(sum((m.flags & 1) = 0), 0), "
                                     "coalesce(sum(m.size), 0) FROM mv_uid_ranges(?2) r JOIN "
                                     "messages m ON m.mailbox_id = ?1 AND m.uid BETWEEN r.first "
                                     "AND r.last");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting messages");
    }
    store_message_bind_set(st, mailbox_id, set);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        t->messages = sqlite3_column_int64(st, 0);
        t->unseen = sqlite3_column_int64(st, 1);
        t->bytes = sqlite3_column_int64(st, 2);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "counting messages");
}

/* Adds the tally to the mailbox's counters (sign 1) or takes it off them (sign -1): what
 * the insert, update and delete triggers do a row at a time. */
static int store_message_tally_apply(mv_store *s,
                                     int64_t mailbox_id,
                                     const struct store_message_tally *t,
                                     int sign)
{
    sqlite3_stmt *st = store_stmt(s, "UPDATE OR FAIL mailboxes SET message_count = message_count "
                                     "+ ?2, unseen_count = unseen_count + ?3, size_sum = "
                                     "size_sum + ?4 WHERE id = ?1");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting messages");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, sign * t->messages);
    sqlite3_bind_int64(st, 3, sign * t->unseen);
    sqlite3_bind_int64(st, 4, sign * t->bytes);
    return store_message_run(s, st, "counting messages", NULL);
}

static int store_message_uid_compare(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts UIDs read through a join on mv_uid_ranges: SQLite walks the ranges in order and
 * each range in index order, so they normally come ascending already (checked in one pass);
 * SQL does not promise it, and an ORDER BY would sort them in a temp b-tree. */
static void store_message_uids_sort(uint32_t *uids, size_t count)
{
    for (size_t i = 1; i < count; i++) {
        if (uids[i - 1] > uids[i]) {
            qsort(uids, count, sizeof *uids, store_message_uid_compare);
            return;
        }
    }
}

/* Steps st (prepared and bound by the caller), appending its first column, a UID, to *uids
 * (grown as needed); what names the read in errors. Resets st. */
static int store_message_collect_uids(
    mv_store *s, sqlite3_stmt *st, const char *what, uint32_t **uids, size_t *count, size_t *cap)
{
    int rc = MV_OK, step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (*count == *cap) {
            size_t grown = *cap != 0 ? *cap * 2 : 256;
            uint32_t *p = grown <= SIZE_MAX / sizeof *p ? realloc(*uids, grown * sizeof *p) : NULL;
            if (p == NULL) {
                rc = store_fail(s, MV_ENOMEM, "out of memory %s", what);
                break;
            }
            *uids = p;
            *cap = grown;
        }
        (*uids)[(*count)++] = (uint32_t)sqlite3_column_int64(st, 0);
    }
    if (rc == MV_OK && step != SQLITE_DONE) {
        rc = store_fail_sqlite(s, what);
    }
    sqlite3_reset(st);
    return rc;
}

/* UIDs of the set whose modseq is above the UNCHANGEDSINCE bound, into *failed
 * (ascending). */
static int store_message_flags_failed(mv_store *s,
                                      int64_t mailbox_id,
                                      const struct store_uidset *set,
                                      uint64_t unchanged_since,
                                      uint32_t **failed,
                                      size_t *count,
                                      size_t *cap)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT m.uid FROM mv_uid_ranges(?2) r JOIN messages m "
                                     "ON m.mailbox_id = ?1 AND m.uid BETWEEN r.first AND r.last "
                                     "WHERE m.modseq > ?3");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading modseqs");
    }
    store_message_bind_set(st, mailbox_id, set);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)unchanged_since);
    int rc = store_message_collect_uids(s, st, "reading modseqs", failed, count, cap);
    store_message_uids_sort(*failed, *count);
    return rc;
}

/* The flag change of every mv_flags_set* function: in one IMMEDIATE transaction, per range
 * one UPDATE of the messages whose flags or keywords change (and whose modseq is within the
 * bound), all under one new modseq; then one change-log INSERT for them. The test and the
 * change share the write transaction, so no writer comes between them. */
static int store_message_flags_run(mv_store *s,
                                   const char *mailbox,
                                   const struct store_message_setarg *arg,
                                   int mode,
                                   unsigned flags,
                                   const char *keywords,
                                   uint64_t unchanged_since,
                                   uint32_t *changed_out,
                                   uint32_t **failed_out,
                                   size_t *failed_count_out)
{
    /* Keywords merged per message (+FLAGS / -FLAGS with keywords) need C: mv_keywords_apply.
     * Any other STORE sets keywords to one value for every message (FLAGS: the given list,
     * ?9) or leaves them (?9 NULL) and runs without a function call, which matters: SQLite
     * opens a statement journal for a writing statement that calls a function (it may fail
     * half-way), and for a STORE of thousands of messages that journal, spilled into the
     * encrypted temp file, cost more than the change itself. */
    static const char *const update_fn_sql =
        "UPDATE OR FAIL messages SET flags = (CASE ?4 WHEN 0 THEN ?5 WHEN 1 THEN flags | ?5 "
        "ELSE flags & ~?5 END), keywords = mv_keywords_apply(keywords, ?6), modseq = ?8 "
        "WHERE id IN (SELECT m.id FROM mv_uid_ranges(?2) r JOIN messages m ON m.mailbox_id = "
        "?1 AND m.uid BETWEEN r.first AND r.last) AND modseq <= ?7 AND "
        "(flags != (CASE ?4 WHEN 0 THEN ?5 WHEN 1 THEN flags | ?5 ELSE flags & ~?5 END) "
        "OR keywords != mv_keywords_apply(keywords, ?6))";
    static const char *const update_sql =
        "UPDATE OR FAIL messages SET flags = (CASE ?4 WHEN 0 THEN ?5 WHEN 1 THEN flags | ?5 "
        "ELSE flags & ~?5 END), keywords = (CASE WHEN ?9 IS NULL THEN keywords ELSE ?9 END), "
        "modseq = ?8 WHERE id IN (SELECT m.id FROM mv_uid_ranges(?2) r JOIN messages m ON "
        "m.mailbox_id = ?1 AND m.uid BETWEEN r.first AND r.last) AND modseq <= ?7 AND "
        "(flags != (CASE ?4 WHEN 0 THEN ?5 WHEN 1 THEN flags | ?5 ELSE flags & ~?5 END) "
        "OR keywords != (CASE WHEN ?9 IS NULL THEN keywords ELSE ?9 END))";
    struct store_message_flags_fn fn = {.s = s, .mode = mode};
    char *replacement = NULL; /* FLAGS: the message's keywords after the STORE, normalised */
    struct store_uidset set = {0};
    int64_t mailbox_id = 0, messages = 0;
    uint64_t modseq = 0;
    int64_t changed = 0;
    uint32_t *failed = NULL;
    size_t failed_count = 0, failed_cap = 0;
    int rc = MV_OK, began = 0;
    if (mode < MV_FLAGS_REPLACE || mode > MV_FLAGS_REMOVE || (flags & ~MV_FLAG_ALL) != 0) {
        return store_fail(s, MV_EINVAL, "bad flag mode %d or flag bits 0x%x", mode, flags);
    }
    rc = store_message_keywords_split(s, keywords, 1, &fn.keywords);
    if (rc == MV_OK && mode != MV_FLAGS_REMOVE) {
        rc = store_message_keywords_count_check(s, fn.keywords.count);
    }
    if (rc == MV_OK && mode == MV_FLAGS_REPLACE) {
        rc = store_message_keywords_join(s, fn.keywords.words, fn.keywords.count, &replacement);
    }
    int per_message = mode != MV_FLAGS_REPLACE && fn.keywords.count > 0;
    if (rc == MV_OK) {
        rc = store_begin(s);
        began = rc == MV_OK;
    }
    if (rc == MV_OK) {
        rc = store_message_open_set(s, mailbox, arg, &mailbox_id, &set);
    }
    if (rc == MV_OK) {
        rc = store_message_counters(s, mailbox_id, &modseq, NULL, &messages);
        modseq++; /* the command's: used only if something changes */
    }
    /* Modseqs are stored as SQLite integers: a bound above INT64_MAX is no bound. */
    sqlite3_int64 bound =
        unchanged_since > (uint64_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)unchanged_since;
    if (rc == MV_OK && set.count > 0 && mode != MV_FLAGS_REMOVE && fn.keywords.count > 0) {
        /* The keywords the STORE gives, defined before the UPDATE, so that one the mailbox
         * may not define fails before any row is written. (If the UPDATE then changes no
         * message, they stay defined: harmless, the mailbox's set only has to hold every
         * keyword its messages carry.) */
        char *given = replacement;
        if (given == NULL) {
            rc = store_message_keywords_join(s, fn.keywords.words, fn.keywords.count, &given);
        }
        rc = rc != MV_OK ? rc : store_keywords_register(s, mailbox_id, given);
        if (given != replacement) {
            free(given);
        }
    }
    if (rc == MV_OK && set.count > 0) {
        if (unchanged_since != MV_UNCHANGEDSINCE_NONE) {
            rc = store_message_flags_failed(s, mailbox_id, &set, (uint64_t)bound, &failed,
                                            &failed_count, &failed_cap);
        }
        sqlite3_stmt *st =
            rc == MV_OK ? store_stmt(s, per_message ? update_fn_sql : update_sql) : NULL;
        if (rc == MV_OK && st == NULL) {
            rc = store_fail_sqlite(s, "changing flags");
        }
        /* The update trigger's sub-program starts for every row the UPDATE changes, whatever
         * its WHEN says, and runs two UPDATEs of the mailbox row when \Seen changes (UID
         * STORE of every 10th of 10,000 +FLAGS.SILENT (\Deleted): 7.2 -> 5.6 ms; STORE 1:*
         * +FLAGS.SILENT (\Seen) a quarter less). Past the break-even (STORE_UNTRIGGERED_MIN,
         * on the smaller of the UIDs the set spans and the mailbox's messages: counting the
         * set's messages would cost the walk the trigger's absence saves) the triggers are
         * off, and the unseen counter moves by a count over the set before and after. */
        uint64_t span = store_message_set_span(&set);
        int untriggered = span >= STORE_UNTRIGGERED_MIN && messages >= STORE_UNTRIGGERED_MIN;
        int seen_may_change = mode == MV_FLAGS_REPLACE || (flags & MV_FLAG_SEEN) != 0;
        int64_t unseen_before = 0, unseen_after = 0;
        if (rc == MV_OK && untriggered && seen_may_change) {
            rc = store_message_unseen_in_set(s, mailbox_id, &set, &unseen_before);
        }
        if (rc == MV_OK && untriggered) {
            rc = store_message_triggers(s, 0); /* st is prepared again at its step */
        }
        if (rc == MV_OK) {
            int64_t n = 0;
            store_message_bind_set(st, mailbox_id, &set);
            sqlite3_bind_int(st, 4, mode);
            sqlite3_bind_int64(st, 5, flags);
            if (per_message) {
                sqlite3_bind_pointer(st, 6, &fn, STORE_MESSAGE_FN_FLAGS, NULL);
            } else if (replacement != NULL) {
                sqlite3_bind_text(st, 9, replacement, -1, SQLITE_STATIC);
            } /* else ?9 stays NULL: keywords unchanged */
            sqlite3_bind_int64(st, 7, bound);
            sqlite3_bind_int64(st, 8, (sqlite3_int64)modseq);
            rc = store_message_run(s, st, "changing flags", &n);
            if (fn.rc != MV_OK) {
                rc = store_fail(s, fn.rc, "%s", fn.msg); /* a keyword limit, not SQLite's */
            }
            changed += rc == MV_OK ? n : 0;
        }
        if (untriggered) {
            int on = store_message_triggers(s, 1); /* always, whatever failed */
            rc = rc != MV_OK ? rc : on;
        }
        if (rc == MV_OK && untriggered && seen_may_change && changed > 0) {
            rc = store_message_unseen_in_set(s, mailbox_id, &set, &unseen_after);
            rc = rc != MV_OK
                     ? rc
                     : store_message_unseen_add(s, mailbox_id, unseen_after - unseen_before);
        }
    }
    if (rc == MV_OK && changed > 0) {
        rc = store_message_modseq_raise(s, mailbox_id, modseq);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    store_uidset_free(&set);
    store_message_keywords_free(&fn.keywords);
    free(replacement);
    if (rc != MV_OK) {
        free(failed);
        return rc;
    }
    if (changed_out != NULL) {
        *changed_out = (uint32_t)changed;
    }
    if (failed_out != NULL) {
        *failed_out = failed;
        *failed_count_out = failed_count;
    } else {
        assert(failed == NULL); /* no condition: nothing can fail it */
        free(failed);
    }
    return MV_OK;
}

int mv_flags_set(mv_store *s,
                 const char *mailbox,
                 const char *uid_set,
                 int mode,
                 unsigned flags,
                 const char *keywords,
                 uint32_t *changed_out)
{
    struct store_message_setarg arg = {.text = uid_set};
    if (changed_out != NULL) {
        *changed_out = 0;
    }
    if (uid_set == NULL) {
        return store_fail(s, MV_EINVAL, "empty UID set");
    }
    return store_message_flags_run(s, mailbox, &arg, mode, flags, keywords, MV_UNCHANGEDSINCE_NONE,
                                   changed_out, NULL, NULL);
}

/* The output checks of the conditional forms; MV_OK or MV_EINVAL. */
static int store_message_flags_outputs(mv_store *s,
                                       uint64_t unchanged_since,
                                       uint32_t *changed_out,
                                       uint32_t **failed_out,
                                       size_t *failed_count_out)
{
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
    if (unchanged_since != MV_UNCHANGEDSINCE_NONE &&
        (failed_out == NULL || failed_count_out == NULL)) {
        return store_fail(s, MV_EINVAL, "UNCHANGEDSINCE without failed_out / failed_count_out");
    }
    if ((failed_out == NULL) != (failed_count_out == NULL)) {
        return store_fail(s, MV_EINVAL, "failed_out and failed_count_out go together");
    }
    return MV_OK;
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
    struct store_message_setarg arg = {.text = uid_set};
    int rc = store_message_flags_outputs(s, 0, changed_out, failed_out, failed_count_out);
    if (rc != MV_OK) {
        return rc;
    }
    if (uid_set == NULL) {
        return store_fail(s, MV_EINVAL, "empty UID set");
    }
    /* 0 fails every message (modseqs start at 1); UINT64_MAX is as high as a bound goes. */
    return store_message_flags_run(s, mailbox, &arg, mode, flags, keywords,
                                   unchanged_since == MV_UNCHANGEDSINCE_NONE ? UINT64_MAX - 1
                                                                             : unchanged_since,
                                   changed_out, failed_out, failed_count_out);
}

int mv_flags_set_ranges(mv_store *s,
                        const char *mailbox,
                        const struct mv_uid_range *ranges,
                        size_t count,
                        int mode,
                        unsigned flags,
                        const char *keywords,
                        uint64_t unchanged_since,
                        uint32_t *changed_out,
                        uint32_t **failed_out,
                        size_t *failed_count_out)
{
    struct store_message_setarg arg = {.ranges = ranges, .count = count};
    int rc =
        store_message_flags_outputs(s, unchanged_since, changed_out, failed_out, failed_count_out);
    if (rc != MV_OK) {
        return rc;
    }
    return store_message_flags_run(s, mailbox, &arg, mode, flags, keywords, unchanged_since,
                                   changed_out, failed_out, failed_count_out);
}

/* ---- copy, move, expunge --------------------------------------------------------------- */

/* The UIDs of the messages of mailbox_id in set, into *uids (ascending). */
static int store_message_uids(mv_store *s,
                              int64_t mailbox_id,
                              const struct store_uidset *set,
                              uint32_t **uids,
                              size_t *count,
                              size_t *cap)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT m.uid FROM mv_uid_ranges(?2) r JOIN messages m "
                                     "ON m.mailbox_id = ?1 AND m.uid BETWEEN r.first AND r.last");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading messages");
    }
    store_message_bind_set(st, mailbox_id, set);
    int rc = store_message_collect_uids(s, st, "reading messages", uids, count, cap);
    store_message_uids_sort(*uids, *count);
    return rc;
}

/* COPY of the set: one INSERT ... SELECT; the copies get their UIDs from mv_uid_map. */
static int store_message_copy_set(mv_store *s,
                                  int64_t from_id,
                                  int64_t to_id,
                                  const struct store_uidset *set,
                                  uint64_t modseq,
                                  struct store_message_uids_fn *map)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT OR FAIL INTO messages(mailbox_id, uid, modseq, "
                                     "internal_date, size, flags, keywords, thread_id, body_id) "
                                     "SELECT ?4, mv_uid_map(m.uid, ?5), ?6, m.internal_date, "
                                     "m.size, m.flags, m.keywords, m.thread_id, m.body_id FROM "
                                     "mv_uid_ranges(?2) r JOIN messages m ON m.mailbox_id = ?1 "
                                     "AND m.uid BETWEEN r.first AND r.last");
    if (st == NULL) {
        return store_fail_sqlite(s, "copying messages");
    }
    store_message_bind_set(st, from_id, set);
    sqlite3_bind_int64(st, 4, to_id);
    sqlite3_bind_pointer(st, 5, map, STORE_MESSAGE_FN_UIDS, NULL);
    sqlite3_bind_int64(st, 6, (sqlite3_int64)modseq);
    return store_message_run(s, st, "copying messages", NULL);
}

/* MOVE of the set: the expunge rows in the source, then one UPDATE that moves the rows
 * (the bodies keep their references; the counter triggers move the counts). */
static int store_message_move_set(mv_store *s,
                                  int64_t from_id,
                                  int64_t to_id,
                                  const struct store_uidset *set,
                                  uint64_t modseq,
                                  uint64_t expunge_modseq,
                                  struct store_message_uids_fn *map)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT OR FAIL INTO changes(mailbox_id, modseq, uid, kind, "
                                     "at) SELECT ?1, ?4, m.uid, 'expunge', ?5 FROM "
                                     "mv_uid_ranges(?2) r JOIN messages m ON m.mailbox_id = ?1 "
                                     "AND m.uid BETWEEN r.first AND r.last");
    if (st == NULL) {
        return store_fail_sqlite(s, "writing the change log");
    }
    store_message_bind_set(st, from_id, set);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)expunge_modseq);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)time(NULL));
    int rc = store_message_run(s, st, "writing the change log", NULL);
    st = rc == MV_OK ? store_stmt(s, "UPDATE OR FAIL messages SET mailbox_id = ?4, "
                                     "uid = mv_uid_map(uid, ?5), modseq = ?6 WHERE id IN "
                                     "(SELECT m.id FROM mv_uid_ranges(?2) r JOIN messages m ON "
                                     "m.mailbox_id = ?1 AND m.uid BETWEEN r.first AND r.last)")
                     : NULL;
    if (rc == MV_OK && st == NULL) {
        rc = store_fail_sqlite(s, "moving messages");
    }
    if (rc == MV_OK) {
        store_message_bind_set(st, from_id, set);
        sqlite3_bind_int64(st, 4, to_id);
        sqlite3_bind_pointer(st, 5, map, STORE_MESSAGE_FN_UIDS, NULL);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)modseq);
        rc = store_message_run(s, st, "moving messages", NULL);
    }
    return rc;
}

/* After a COPY: one more reference to the body of each new message (UIDs from first_new):
 * the new messages counted per body (a walk of messages_uid_body, which holds all it needs,
 * and a sort), then one row of the narrow body_refs per body, in id order (schema version
 * 12). Named: with statistics the planner walks all of messages_body instead, to save the
 * sort (mv_store_explain's test). Through messages_body, a count per body read every
 * message of that body, new or old, from the messages table. */
static int store_message_copy_refs(mv_store *s, int64_t to_id, uint32_t first_new)
{
    sqlite3_stmt *st = store_stmt(s, "WITH n(body_id, c) AS (SELECT body_id, count(*) FROM "
                                     "messages INDEXED BY messages_uid_body WHERE mailbox_id = ?1 "
                                     "AND uid >= ?2 GROUP BY body_id) UPDATE OR FAIL body_refs "
                                     "SET refcount = refcount + n.c FROM n WHERE body_refs.id = "
                                     "n.body_id");
    if (st == NULL) {
        return store_fail_sqlite(s, "referencing message bodies");
    }
    sqlite3_bind_int64(st, 1, to_id);
    sqlite3_bind_int64(st, 2, first_new);
    return store_message_run(s, st, "referencing message bodies", NULL);
}

/* The new UIDs and the mailbox's next one after n copies from first_new. */
static int store_message_uidnext_set(mv_store *s, int64_t to_id, uint32_t first_new, size_t n)
{
    sqlite3_stmt *st = store_stmt(s, "UPDATE mailboxes SET uidnext = ?2 WHERE id = ?1");
    if (st == NULL) {
        return store_fail_sqlite(s, "allocating UIDs");
    }
    sqlite3_bind_int64(st, 1, to_id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)first_new + (sqlite3_int64)n);
    return store_message_run(s, st, "allocating UIDs", NULL);
}

/* COPY and MOVE: the source UIDs are read first (they fix the new UIDs: the i-th source
 * message gets uidnext + i, so the copies keep the source order), then one statement per
 * range copies or moves the rows, and a few statements per command write the change log,
 * the references and the counters. One modseq for the command in the target (and one in
 * the source for MOVE's expunges). */
static int store_message_transfer(mv_store *s,
                                  const char *from,
                                  const struct store_message_setarg *arg,
                                  const char *to,
                                  int move,
                                  uint32_t *count_out,
                                  uint32_t **pairs_out)
{
    struct store_uidset set = {0};
    struct store_message_uids_fn map = {0};
    uint32_t *source = NULL;
    size_t count = 0, cap = 0;
    int64_t from_id = 0, to_id = 0;
    uint64_t modseq = 0, expunge_modseq = 0;
    if (count_out != NULL) {
        *count_out = 0;
    }
    if (pairs_out != NULL) {
        *pairs_out = NULL;
    }
    int rc = store_begin(s), began = rc == MV_OK;
    if (rc == MV_OK) {
        rc = store_message_open_set(s, from, arg, &from_id, &set);
    }
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, to, &to_id);
    }
    if (rc == MV_OK && set.count > 0) {
        rc = store_message_uids(s, from_id, &set, &source, &count, &cap);
    }
    if (rc == MV_OK && count > 0) {
        rc = store_message_counters(s, to_id, &modseq, &map.first_new, NULL);
        modseq++;
    }
    if (rc == MV_OK && count > 0 &&
        (map.first_new == 0 || (uint64_t)map.first_new + count - 1 > STORE_MESSAGE_UID_MAX)) {
        rc =
            store_fail(s, MV_ELIMIT, "the mailbox \"%s\" has no room for %zu more UIDs", to, count);
    }
    if (rc == MV_OK && count > 0 && move) {
        rc = store_message_counters(s, from_id, &expunge_modseq, NULL, NULL);
        expunge_modseq = from_id == to_id ? modseq + 1 : expunge_modseq + 1;
    }
    if (rc == MV_OK && count > 0 && from_id != to_id) { /* before a move changes the rows */
        rc = store_keywords_register_set(s, from_id, to_id, &set);
    }
    map.source = source;
    map.count = count;
    /* A MOVE past the break-even (STORE_UNTRIGGERED_MIN) with the triggers off: the update
     * trigger ran two UPDATEs of mailbox rows per message, and a tally of the set, one walk
     * over it, moves the counters at once (MOVE 1:5000 of 10,000: 55-60 -> 47-51 ms). Not a COPY:
     * its insert trigger costs less than the tally's walk and the statements prepared again
     * (COPY 1:1000: 7.2 -> 9.1 ms with it, 1:5000 the same). */
    int untriggered = move && count >= STORE_UNTRIGGERED_MIN;
    struct store_message_tally tally = {0};
    if (rc == MV_OK && untriggered) {
        rc = store_message_set_tally(s, from_id, &set, &tally);
    }
    if (rc == MV_OK && untriggered && tally.messages != (int64_t)count) {
        rc = store_fail(s, MV_ECORRUPT, "a set of %zu messages counted as %lld", count,
                        (long long)tally.messages);
    }
    if (rc == MV_OK && untriggered) {
        rc = store_message_triggers(s, 0);
    }
    if (rc == MV_OK && count > 0) {
        rc = move ? store_message_move_set(s, from_id, to_id, &set, modseq, expunge_modseq, &map)
                  : store_message_copy_set(s, from_id, to_id, &set, modseq, &map);
    }
    if (untriggered) {
        int on = store_message_triggers(s, 1); /* always, whatever failed */
        rc = rc != MV_OK ? rc : on;
    }
    if (rc == MV_OK && untriggered && from_id != to_id) { /* within one mailbox: no change */
        rc = store_message_tally_apply(s, to_id, &tally, 1);
        rc = rc != MV_OK ? rc : store_message_tally_apply(s, from_id, &tally, -1);
    }
    if (rc == MV_OK && count > 0) {
        rc = store_message_uidnext_set(s, to_id, map.first_new, count);
    }
    if (rc == MV_OK && count > 0) {
        rc = store_message_modseq_raise(s, to_id, modseq);
    }
    if (rc == MV_OK && count > 0 && move) {
        rc = store_message_modseq_raise(s, from_id, expunge_modseq);
    }
    if (rc == MV_OK && count > 0 && !move) {
        rc = store_message_copy_refs(s, to_id, map.first_new);
    }
    uint32_t *pairs = NULL;
    if (rc == MV_OK && count > 0 && pairs_out != NULL) {
        pairs = count <= SIZE_MAX / (2 * sizeof *pairs) ? malloc(count * 2 * sizeof *pairs) : NULL;
        if (pairs == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory recording copied UIDs");
        }
        for (size_t i = 0; pairs != NULL && i < count; i++) {
            pairs[2 * i] = source[i];
            pairs[2 * i + 1] = map.first_new + (uint32_t)i;
        }
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    free(source);
    store_uidset_free(&set);
    if (rc != MV_OK) {
        free(pairs);
        return rc;
    }
    if (count_out != NULL) {
        *count_out = (uint32_t)count;
    }
    if (pairs_out != NULL) {
        *pairs_out = pairs;
    }
    return MV_OK;
}

int mv_message_copy(
    mv_store *s, const char *from, const char *uid_set, const char *to, uint32_t *count_out)
{
    struct store_message_setarg arg = {.text = uid_set};
    if (uid_set == NULL) {
        return store_fail(s, MV_EINVAL, "empty UID set");
    }
    return store_message_transfer(s, from, &arg, to, 0, count_out, NULL);
}

int mv_message_move(
    mv_store *s, const char *from, const char *uid_set, const char *to, uint32_t *count_out)
{
    struct store_message_setarg arg = {.text = uid_set};
    if (uid_set == NULL) {
        return store_fail(s, MV_EINVAL, "empty UID set");
    }
    return store_message_transfer(s, from, &arg, to, 1, count_out, NULL);
}

int mv_message_copy_uids(mv_store *s,
                         const char *from,
                         const char *uid_set,
                         const char *to,
                         int move,
                         uint32_t **pairs_out,
                         uint32_t *count_out)
{
    struct store_message_setarg arg = {.text = uid_set};
    if (pairs_out == NULL || count_out == NULL) {
        return store_fail(s, MV_EINVAL, "mv_message_copy_uids: no output pointers");
    }
    if (uid_set == NULL) {
        *pairs_out = NULL;
        *count_out = 0;
        return store_fail(s, MV_EINVAL, "empty UID set");
    }
    return store_message_transfer(s, from, &arg, to, move != 0, count_out, pairs_out);
}

int mv_message_copy_ranges(mv_store *s,
                           const char *from,
                           const struct mv_uid_range *ranges,
                           size_t count,
                           const char *to,
                           int move,
                           uint32_t **pairs_out,
                           uint32_t *count_out)
{
    struct store_message_setarg arg = {.ranges = ranges, .count = count};
    if (pairs_out == NULL || count_out == NULL) {
        return store_fail(s, MV_EINVAL, "mv_message_copy_ranges: no output pointers");
    }
    return store_message_transfer(s, from, &arg, to, move != 0, count_out, pairs_out);
}

/* EXPUNGE of one range, before its rows go: the expunge rows, and one dropped reference per
 * message noted for each body (STORE_PURGE_UNREF_KEY, an upsert into meta, in key order),
 * which mv_store_purge() takes off body_refs.refcount later, before it deletes the bodies left
 * without a reference (store_purge.c). The EXPUNGE itself used to decrement the counts: one
 * bodies row per message, spread over the whole table, and a count through messages_body
 * per body, ~200 random page reads at 10,000 messages (~125 of them the bodies table's),
 * cold once the OS dropped them (the bench's first EXPUNGE after its cold login; library
 * level with the file evicted first, 48.6 against 21.8 ms wall), and ~125 more pages in the
 * commit's WAL frames. A body's count stays above its messages until the purge:
 * mv_store_check and mv_store_repair count the noted references with it. *count gets the
 * messages the range expunges. */
static int store_message_expunge_range(
    mv_store *s, int64_t mailbox_id, const struct mv_uid_range *r, uint64_t modseq, int64_t *count)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT OR FAIL INTO changes(mailbox_id, modseq, uid, kind, "
                                     "at) SELECT ?1, ?4, uid, 'expunge', ?5 FROM messages "
                                     "INDEXED BY messages_deleted WHERE mailbox_id = ?1 AND uid "
                                     "BETWEEN ?2 AND ?3 AND (flags & 8) != 0");
    if (st == NULL) {
        return store_fail_sqlite(s, "writing the change log");
    }
    store_message_bind_range(st, mailbox_id, r);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)modseq);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)time(NULL));
    int rc = store_message_run(s, st, "writing the change log", count);
    if (rc != MV_OK || *count == 0) {
        return rc;
    }
    st = store_stmt(s, "INSERT INTO meta(key, value) SELECT printf('" STORE_PURGE_UNREF_KEY
                       "%020d', body_id), 1 FROM messages INDEXED BY messages_deleted WHERE "
                       "mailbox_id = ?1 AND uid BETWEEN ?2 AND ?3 AND (flags & 8) != 0 "
                       "ON CONFLICT(key) DO UPDATE SET value = value + excluded.value");
    if (st == NULL) {
        return store_fail_sqlite(s, "dropping message bodies");
    }
    store_message_bind_range(st, mailbox_id, r);
    rc = store_message_run(s, st, "dropping message bodies", NULL);
    s->purge_hint = 1;
    return rc;
}

/* The mailbox's counters less the \Deleted messages of one range, before their rows go
 * without the trigger (store_message_expunge_rows). */
static int
store_message_expunge_counters(mv_store *s, int64_t mailbox_id, const struct mv_uid_range *r)
{
    sqlite3_stmt *st =
        store_stmt(s, "UPDATE OR FAIL mailboxes SET message_count = message_count - d.n, "
                      "unseen_count = unseen_count - d.unseen, size_sum = size_sum - d.bytes "
                      "FROM (SELECT count(*) AS n, coalesce(sum((flags & 1) = 0), 0) AS unseen, "
                      "coalesce(sum(size), 0) AS bytes FROM messages INDEXED BY "
                      "messages_deleted WHERE mailbox_id = ?1 AND uid BETWEEN ?2 AND ?3 AND "
                      "(flags & 8) != 0) AS d WHERE mailboxes.id = ?1");
    if (st == NULL) {
        return store_fail_sqlite(s, "counting expunged messages");
    }
    store_message_bind_range(st, mailbox_id, r);
    return store_message_run(s, st, "counting expunged messages", NULL);
}

/* The rows of the ranges that store_message_expunge_range() prepared (counts[r] of range r,
 * 0: nothing to delete; total of all). Of STORE_UNTRIGGERED_MIN or more, deleted with
 * this connection's triggers off, so the counters' delete trigger (store_schema.c) does not
 * run per row: a sub-program and an UPDATE of the mailbox row per deleted message, and the
 * statement journal through the encrypted temp file that a DELETE with a trigger needs (1,000
 * of 10,000 expunged: 14-16.5 -> 11.7-13 ms of CPU, the temp file's share gone from the
 * profile); the counters are then kept by one UPDATE per range, in the same transaction. The
 * trigger stays in the schema for every other writer (mailvault sql, any SQLite program), and
 * is off only while these DELETEs run, in this transaction: nothing else runs on the
 * connection meanwhile (one thread per handle). No other trigger fires on a delete from
 * messages, and foreign keys are not triggers (they stay on). Fewer rows are deleted with the
 * trigger (STORE_UNTRIGGERED_MIN). */
static int store_message_expunge_rows(mv_store *s,
                                      int64_t mailbox_id,
                                      const struct store_uidset *set,
                                      const int64_t *counts,
                                      int64_t total)
{
    int untriggered = total >= STORE_UNTRIGGERED_MIN;
    int rc = untriggered ? store_message_triggers(s, 0) : MV_OK;
    for (size_t r = 0; rc == MV_OK && r < set->count; r++) {
        if (counts[r] == 0) {
            continue;
        }
        if (untriggered) {
            rc = store_message_expunge_counters(s, mailbox_id, &set->ranges[r]);
            if (rc != MV_OK) {
                break;
            }
        }
        sqlite3_stmt *st = store_stmt(s, "DELETE FROM messages INDEXED BY messages_deleted "
                                         "WHERE mailbox_id = ?1 AND uid BETWEEN ?2 AND ?3 "
                                         "AND (flags & 8) != 0");
        if (st == NULL) {
            rc = store_fail_sqlite(s, "expunging messages");
            break;
        }
        store_message_bind_range(st, mailbox_id, &set->ranges[r]);
        int64_t deleted = 0;
        rc = store_message_run(s, st, "expunging messages", &deleted);
        if (rc == MV_OK && deleted != counts[r]) { /* the counters were kept for counts[r] */
            rc = store_fail(s, MV_ECORRUPT, "expunged %lld messages of a range, counted %lld",
                            (long long)deleted, (long long)counts[r]);
        }
    }
    int on = untriggered ? store_message_triggers(s, 1) : MV_OK; /* always, whatever failed */
    return rc != MV_OK ? rc : on;
}

static int store_message_expunge(mv_store *s,
                                 const char *mailbox,
                                 const struct store_message_setarg *arg,
                                 uint32_t *count_out)
{
    struct store_uidset set = {0};
    int64_t mailbox_id = 0, total = 0;
    uint64_t modseq = 0;
    if (count_out != NULL) {
        *count_out = 0;
    }
    int rc = store_begin(s), began = rc == MV_OK;
    if (rc == MV_OK) {
        rc = store_message_open_set(s, mailbox, arg, &mailbox_id, &set);
    }
    if (rc == MV_OK) {
        rc = store_message_counters(s, mailbox_id, &modseq, NULL, NULL);
        modseq++;
    }
    int64_t *counts = rc == MV_OK ? calloc(set.count + 1, sizeof *counts) : NULL;
    if (rc == MV_OK && counts == NULL) {
        rc = store_fail(s, MV_ENOMEM, "out of memory counting an expunge's ranges");
    }
    for (size_t r = 0; rc == MV_OK && r < set.count; r++) {
        rc = store_message_expunge_range(s, mailbox_id, &set.ranges[r], modseq, &counts[r]);
        total += counts[r];
    }
    if (rc == MV_OK && total > 0) {
        rc = store_message_expunge_rows(s, mailbox_id, &set, counts, total);
    }
    free(counts);
    if (rc == MV_OK && total > 0) {
        rc = store_message_modseq_raise(s, mailbox_id, modseq);
    }
    if (rc == MV_OK) {
        rc = store_commit(s);
    } else if (began) {
        store_rollback(s);
    }
    if (rc == MV_OK && count_out != NULL) {
        *count_out = (uint32_t)total;
    }
    store_uidset_free(&set);
    return rc;
}

int mv_mailbox_expunge(mv_store *s, const char *mailbox, const char *uid_set, uint32_t *count_out)
{
    struct store_message_setarg arg = {.text = uid_set, .all = uid_set == NULL};
    return store_message_expunge(s, mailbox, &arg, count_out);
}

int mv_mailbox_expunge_ranges(mv_store *s,
                              const char *mailbox,
                              const struct mv_uid_range *ranges,
                              size_t count,
                              uint32_t *count_out)
{
    struct store_message_setarg arg = {.ranges = ranges, .count = count};
    return store_message_expunge(s, mailbox, &arg, count_out);
}
