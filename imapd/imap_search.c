/*
 * imap_search.c -- SEARCH and UID SEARCH over the selected mailbox.
 *
 * IMPLEMENTATION NOTES
 *   - The program (imap_parse_search, flat) is evaluated key by key as sets of the view's
 *     messages, one bit a message: a key the view answers (flags, keywords, sizes, internal
 *     dates, sequence and UID sets) by a pass over the view; keys on headers and text as a
 *     set from the store: FROM/TO/CC/SUBJECT/BODY/TEXT through mv_search (the store's
 *     indexes and its full-text index), the SENT* dates from the open store's copy of them
 *     (imap_search_sent.c; mv_search for a mailbox too big to keep them), BCC and HEADER by
 *     reading each message's header (imap_search_fields.c: a field's value unfolded first,
 *     RFC 5322 2.2.3, so a folded value matches whole, then its RFC 2047 encoded words
 *     decoded to UTF-8, as FROM/TO/CC/SUBJECT compare the decoded fields: "HEADER Subject
 *     Grüße" finds "=?UTF-8?Q?Gr=C3=BC=C3=9Fe?=", and the encoded form itself matches
 *     nothing, as in Dovecot 2.3); HEADER keys that all name Message-ID over the open store's
 *     copy of those fields instead (imap_search_msgid.c: the same matcher over the same
 *     fields, taken from the headers once and saved at the store's close).
 *   - FROM/TO/CC/SUBJECT keys, when there are two or more, are answered before the
 *     evaluation, up to 64 in one pass over the mailbox (mv_search_headers), and HEADER/BCC
 *     keys likewise all in one pass reading each header once (mv_message_headers_each), every
 *     key tested in one walk over the header's fields, their sets kept (at most
 *     IMAP_SEARCH_BATCH_BYTES of them): a client's OR of 20 senders was 20 scans, an OR of 20
 *     Message-IDs 20 passes over every header. Sequence and UID sets mark their ranges, not
 *     a pass over the view each.
 *   - AND, OR and NOT combine their keys' sets as they come, so a search holds one set per
 *     level of nesting (at most IMAP_SEARCH_DEPTH_MAX + 1: 8 MB at 1,000,000 messages and the
 *     deepest program), not one per key (beyond the batches' budget, a key is a pass of its
 *     own, not a set kept). An AND whose set is already empty, or an OR whose set is already
 *     full, asks none of its remaining keys.
 *   - CONDSTORE's MODSEQ key compares the view's modseqs; the response then ends with
 *     "(MODSEQ n)", the highest modseq among the results.
 *
 *   - BODY and TEXT are mv_search's body_contains / text_contains: case-insensitive
 *     substrings of the decoded body / of the decoded header or body (RFC 3501 6.4.4),
 *     through the store's trigram index. SENT* compare the Date header's date as written
 *     (its zone disregarded, RFC 3501 6.4.4); SINCE/BEFORE/ON the internal date in UTC.
 *
 * LIMITATIONS
 *   FROM/TO/CC/SUBJECT/BCC/HEADER are substrings of the decoded header with Unicode case
 *   folded ("GRÜSSE" finds "Grüße": g_utf8_casefold in imap_search_fields.c, mv_fold_contains
 *   in the store), without normalization (a decomposed "ä" does not find a precomposed one).
 *   BODY/TEXT strings of one or two characters fold ASCII letters only (no trigram: LIKE).
 *   RECENT, NEW and OLD read the session's \Recent (imap_recent.c).
 */
#include "imap_search.h"
#include "buf.h"
#include "imap_search_fields.h"
#include "imap_search_msgid.h"
#include "imap_search_sent.h"
#include "imap_session.h"
#include "mailvault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IMAP_SEARCH_STRING_MAX 1024

/* A set of the view's messages: bit i (of word i / 64) for message i. */
typedef uint64_t imap_search_word;

struct imap_search_run {
    struct imap_ctx *x;
    const struct imap_search *prog;
    size_t words; /* a set's length: the view's messages, rounded up to whole words */
    /* per level of nesting, the set of the key being combined into that level's (malloc'd
     * on first use) */
    imap_search_word *scratch[IMAP_SEARCH_DEPTH_MAX + 1];
    /* per key, the set of a FROM/TO/CC/SUBJECT key answered in a batch with the others
     * (imap_search_batch); NULL: none (count entries, or NULL if no batch ran) */
    imap_search_word **batched;
};

/* The sets a search's batched header keys may hold together: past it, a key is a scan of
 * its own (at 1,000,000 messages 128 keys fit, at 100,000 1,280). */
#define IMAP_SEARCH_BATCH_BYTES (16u << 20)

static void imap_search_bit_set(imap_search_word *set, size_t i)
{
    set[i / 64] |= (imap_search_word)1 << (i % 64);
}

static int imap_search_bit(const imap_search_word *set, size_t i)
{
    return (int)((set[i / 64] >> (i % 64)) & 1);
}

/* The bits of the last word that stand for messages (count of them in all). */
static imap_search_word imap_search_tail(size_t count)
{
    return count % 64 != 0 ? ((imap_search_word)1 << (count % 64)) - 1 : ~(imap_search_word)0;
}

/* A new set of r's view, empty (calloc: at least one word, so an empty view's is not NULL);
 * NULL if out of memory. */
static imap_search_word *imap_search_set_new(const struct imap_search_run *r)
{
    return calloc(r->words > 0 ? r->words : 1, sizeof(imap_search_word));
}

/* Every message of the view: count bits set, the rest of the last word clear. */
static void imap_search_fill(imap_search_word *set, size_t words, size_t count)
{
    memset(set, 0xff, words * sizeof *set);
    if (words > 0) {
        set[words - 1] = imap_search_tail(count);
    }
}

static int imap_search_copy(const char *s, size_t len, char *out)
{
    if (len >= IMAP_SEARCH_STRING_MAX || memchr(s, 0, len) != NULL) {
        return -1;
    }
    memcpy(out, s, len);
    out[len] = '\0';
    return 0;
}

static size_t imap_search_index(const struct imap_view *v, uint32_t uid)
{
    size_t lo = imap_view_find_uid(v, uid);
    return lo < v->count && imap_view_msg(v, lo)->uid == uid ? lo : SIZE_MAX;
}

/* One key answered by mv_search into hits. */
static int imap_search_store(struct imap_search_run *r,
                             const struct imap_search_key *k,
                             imap_search_word *hits)
{
    struct imap_view *v = &r->x->s->view;
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    char text[IMAP_SEARCH_STRING_MAX];
    q.mailbox = v->mailbox;
    /* Every match: each marks a bit, nothing is held per row, so the library's cap on the
     * rows a search returns (search_results_max, 100,000) is not ours; with it a SEARCH that
     * matched more than 100,000 messages of a big mailbox answered NO [LIMIT]. */
    q.limit = MV_SEARCH_UNLIMITED;
    if (k->str != NULL && imap_search_copy(k->str, k->str_len, text) != 0) {
        return MV_EINVAL;
    }
    switch (k->op) {
    case IMAP_SK_FROM:
        q.from = text;
        break;
    case IMAP_SK_TO:
        q.to = text;
        break;
    case IMAP_SK_CC:
        q.cc = text;
        break;
    case IMAP_SK_SUBJECT:
        q.subject = text;
        break;
    case IMAP_SK_BODY: /* RFC 3501 6.4.4: the body only; a substring, case-insensitive */
        q.body_contains = text;
        break;
    case IMAP_SK_TEXT: /* the header or the body */
        q.text_contains = text;
        break;
    case IMAP_SK_SENTSINCE:
        q.sent_since = k->number;
        break;
    case IMAP_SK_SENTBEFORE:
        q.sent_before = k->number;
        break;
    case IMAP_SK_SENTON:
        q.sent_since = k->number;
        q.sent_before = k->number + 86400;
        break;
    default:
        return MV_EINVAL;
    }
    if (k->str != NULL && text[0] == '\0') {
        imap_search_fill(hits, r->words, v->count); /* an empty string matches every message */
        return MV_OK;
    }
    mv_search *it = NULL;
    struct mv_message_info info;
    int rc = mv_search_begin(imap_db(r->x->s), &q, &it);
    while (rc == MV_OK && (rc = mv_search_next(it, &info)) == 1) {
        size_t i = imap_search_index(v, info.uid);
        if (i != SIZE_MAX) {
            imap_search_bit_set(hits, i);
        }
        rc = MV_OK;
    }
    mv_search_end(&it);
    return rc < 0 ? rc : MV_OK;
}

/* A HEADER or BCC key's field name and value, each a new NUL-terminated copy (*field and
 * *value, free() both, whatever the result). MV_OK, MV_EINVAL (a NUL or an overlong string)
 * or MV_ENOMEM. */
static int imap_search_field_of(const struct imap_search_key *k, char **field, char **value)
{
    char name[IMAP_SEARCH_STRING_MAX], text[IMAP_SEARCH_STRING_MAX];
    *field = NULL;
    *value = NULL;
    if (k->op == IMAP_SK_BCC) {
        snprintf(name, sizeof name, "Bcc");
        if (imap_search_copy(k->str, k->str_len, text) != 0) {
            return MV_EINVAL;
        }
    } else if (imap_search_copy(k->str, k->str_len, name) != 0 ||
               imap_search_copy(k->str2, k->str2_len, text) != 0) {
        return MV_EINVAL;
    }
    *field = strdup(name);
    *value = strdup(text);
    return *field != NULL && *value != NULL ? MV_OK : MV_ENOMEM;
}

/* A header pass: the keys' matcher, where each key's matches go, and the view's message the
 * walk has come to. */
struct imap_search_pass {
    const struct imap_view *view;
    struct imap_fields_matcher *m;
    imap_search_word *const *sets;
    size_t n;
    unsigned char *found;
    size_t at; /* the view's first message not before the walk's UID */
};

static int imap_search_pass_one(void *arg, uint32_t uid, const void *raw, size_t len)
{
    struct imap_search_pass *p = arg;
    const struct imap_view *v = p->view;
    while (p->at < v->count && imap_view_msg(v, p->at)->uid < uid) {
        p->at++; /* in the view, not in the store any more: no match */
    }
    if (raw == NULL || p->at == v->count || imap_view_msg(v, p->at)->uid != uid ||
        (imap_view_marks(v, p->at) & IMAP_MARK_EXPUNGED) != 0) {
        return 0; /* damaged (no match, as before), or not (or no more) in the view */
    }
    memset(p->found, 0, p->n);
    int rc = imap_fields_matcher_run(p->m, raw, len, p->found);
    for (size_t j = 0; rc == MV_OK && j < p->n; j++) {
        if (p->found[j]) {
            imap_search_bit_set(p->sets[j], p->at);
        }
    }
    return rc;
}

/* Whether the store's copy of Message-ID fields answers every one of n HEADER keys of these
 * fields (imap_search_msgid.c). */
static int imap_search_fields_kept(char *const *fields, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        if (!imap_msgids_field(fields[j])) {
            return 0;
        }
    }
    return n > 0;
}

/* Whether key k is a HEADER key the copy of Message-ID fields answers. */
static int imap_search_key_kept(const struct imap_search_key *k)
{
    char name[IMAP_SEARCH_STRING_MAX];
    return k->op == IMAP_SK_HEADER && imap_search_copy(k->str, k->str_len, name) == 0 &&
           imap_msgids_field(name);
}

/* The pass below over the store's copy of the view's Message-ID fields instead of their
 * headers (imap_search_msgid.c, EXACT: the same matcher over the same fields); a message whose
 * fields are not kept has its header read. MV_EUNSUPPORTED when there is no copy: the caller
 * reads the headers. */
static int imap_search_headers_kept(struct imap_search_run *r, struct imap_search_pass *p)
{
    const struct imap_msgids *ids = NULL;
    int rc = imap_msgids_for(r->x->s, &ids);
    if (rc != MV_OK) {
        return rc;
    }
    const struct imap_view *v = p->view;
    struct imap_msgids_cursor at = {0};
    for (size_t i = 0; rc == MV_OK && i < v->count; i++) {
        uint32_t uid = imap_view_msg(v, i)->uid;
        const char *fields = NULL;
        size_t len = 0;
        void *raw = NULL;
        int has = imap_msgids_next(ids, &at, uid, &fields, &len);
        if (has < 0 || (imap_view_marks(v, i) & IMAP_MARK_EXPUNGED) != 0) {
            continue; /* not in the store (or damaged), or expunged: no match, as in the pass */
        }
        if (has > 0) {
            rc = mv_message_fetch_header(imap_db(r->x->s), v->mailbox, uid, &raw, &len);
            if (rc == MV_ENOTFOUND || rc == MV_ECORRUPT) {
                rc = MV_OK; /* gone since, or damaged: no match, as in the pass */
                continue;
            }
            fields = raw;
        }
        if (rc == MV_OK) {
            memset(p->found, 0, p->n);
            rc = imap_fields_matcher_run(p->m, fields, len, p->found);
        }
        mv_free(raw);
        for (size_t j = 0; rc == MV_OK && j < p->n; j++) {
            if (p->found[j]) {
                imap_search_bit_set(p->sets[j], i);
            }
        }
    }
    imap_msgids_done(r->x->s);
    return rc;
}

/* HEADER field value (and BCC): n keys (fields[j], values[j]) in one pass over the mailbox's
 * headers in UID order (mv_message_headers_each: one statement, not a lookup a message),
 * every key tested in one walk over each header's fields (imap_search_fields.c); key j's
 * matches go into sets[j]. (An OR of 20 HEADER Message-ID keys, a thread's lookup, was 20
 * passes: 427 ms at 10,000 messages against Dovecot's 35.) */
static int imap_search_headers_pass(struct imap_search_run *r,
                                    char *const *fields,
                                    char *const *values,
                                    size_t n,
                                    imap_search_word *const *sets)
{
    struct imap_view *v = &r->x->s->view;
    struct imap_search_pass p = {.view = v, .sets = sets, .n = n, .found = malloc(n)};
    int rc = p.found != NULL ? imap_fields_matcher_new((const char *const *)fields,
                                                       (const char *const *)values, n, &p.m)
                             : MV_ENOMEM;
    int kept = imap_search_fields_kept(fields, n);
    if (rc == MV_OK && v->count > 0) {
        rc = kept ? imap_search_headers_kept(r, &p) : MV_EUNSUPPORTED;
    }
    if (rc == MV_EUNSUPPORTED) {
        if (kept) { /* not asked for up front (imap_search_rows_read): the copy was to answer */
            imap_view_prefetch_headers(imap_db(r->x->s), v, MV_PREFETCH_HEADER_COPY);
        }
        rc = mv_message_headers_each(imap_db(r->x->s), v->mailbox, imap_view_msg(v, 0)->uid,
                                     imap_view_msg(v, v->count - 1)->uid, imap_search_pass_one, &p);
    }
    imap_fields_matcher_free(p.m);
    free(p.found);
    return rc;
}

/* One HEADER or BCC key into hits. */
static int imap_search_header(struct imap_search_run *r,
                              const struct imap_search_key *k,
                              imap_search_word *hits)
{
    char *field, *value;
    int rc = imap_search_field_of(k, &field, &value);
    if (rc == MV_OK) {
        rc = imap_search_headers_pass(r, &field, &value, 1, &hits);
    }
    free(field);
    free(value);
    return rc;
}

/* Whether message i has key k, one the view answers. */
static int imap_search_leaf(const struct imap_search_run *r, uint32_t k, size_t i)
{
    const struct imap_search_key *key = &r->prog->keys[k];
    const struct imap_view *v = &r->x->s->view;
    const struct imap_msg *m = imap_view_msg(v, i);
    int recent = (imap_view_marks(v, i) & IMAP_MARK_RECENT) != 0;
    int64_t day = key->number;
    switch (key->op) {
    case IMAP_SK_ALL:
        return 1;
    case IMAP_SK_OLD: /* RFC 3501 6.4.4: NOT RECENT; NEW: RECENT UNSEEN */
        return !recent;
    case IMAP_SK_NEW:
        return recent && (m->flags & IMAP_FLAG_SEEN) == 0;
    case IMAP_SK_RECENT:
        return recent;
    case IMAP_SK_FLAG_SET:
        return (m->flags & key->flags) == key->flags;
    case IMAP_SK_FLAG_UNSET:
        return (m->flags & key->flags) == 0;
    case IMAP_SK_KEYWORD:
        return imap_kw_has(m->keywords, key->str, key->str_len);
    case IMAP_SK_UNKEYWORD:
        return !imap_kw_has(m->keywords, key->str, key->str_len);
    case IMAP_SK_SINCE:
        return m->internal_date >= day;
    case IMAP_SK_BEFORE:
        return m->internal_date < day;
    case IMAP_SK_ON:
        return m->internal_date >= day && m->internal_date < day + 86400;
    case IMAP_SK_LARGER:
        return m->size > (uint64_t)key->number;
    case IMAP_SK_SMALLER:
        return m->size < (uint64_t)key->number;
    case IMAP_SK_MODSEQ:
        return m->modseq >= (uint64_t)key->number;
    default:
        return 0;
    }
}

static int
imap_search_set_of(struct imap_search_run *r, uint32_t k, int level, imap_search_word *out);

/* Bits [from, to) of set set. */
static void imap_search_bits_set(imap_search_word *set, size_t from, size_t to)
{
    for (; from < to && from % 64 != 0; from++) {
        imap_search_bit_set(set, from);
    }
    for (; from + 64 <= to; from += 64) {
        set[from / 64] = ~(imap_search_word)0;
    }
    for (; from < to; from++) {
        imap_search_bit_set(set, from);
    }
}

/* The messages of a sequence or UID set key, range by range, as imap_search_leaf tests them
 * ('*' the last message's number or UID): a pass over the view per key made an OR of 3,000
 * single numbers 3,000 passes (100 ms at 10,000 messages; Dovecot 5). */
static void imap_search_set_ranges(const struct imap_search_run *r,
                                   const struct imap_search_key *key,
                                   imap_search_word *out)
{
    const struct imap_view *v = &r->x->s->view;
    if (v->count == 0) {
        return;
    }
    int uids = key->op == IMAP_SK_UIDSET;
    uint32_t star = uids ? imap_view_msg(v, v->count - 1)->uid : (uint32_t)v->count;
    for (size_t i = 0; i <= key->set->count; i++) {
        uint32_t lo, hi;
        if (i < key->set->count) {
            lo = key->set->ranges[i].first;
            hi = key->set->ranges[i].last;
        } else if (!imap_seqset_star_span(key->set, star, &lo, &hi)) {
            break;
        }
        size_t from, to;
        if (uids) {
            from = imap_view_find_uid(v, lo);
            to = hi == UINT32_MAX ? v->count : imap_view_find_uid(v, hi + 1);
        } else {
            from = lo > 0 ? lo - 1 : 0;
            to = hi < v->count ? hi : v->count;
        }
        if (from < to) {
            imap_search_bits_set(out, from, to);
        }
    }
}

/* The set of an AND, OR or NOT: its first key's set made in out, each further key's in the
 * scratch set of this level and combined into out at once. */
static int
imap_search_combine(struct imap_search_run *r, uint32_t k, int level, imap_search_word *out)
{
    const struct imap_search_key *key = &r->prog->keys[k];
    size_t count = r->x->s->view.count;
    if (level >= IMAP_SEARCH_DEPTH_MAX) {
        return MV_EINVAL; /* the parser refuses deeper programs */
    }
    int rc = imap_search_set_of(r, key->child, level + 1, out);
    if (rc != MV_OK) {
        return rc;
    }
    if (key->op == IMAP_SK_NOT) {
        for (size_t w = 0; w < r->words; w++) {
            out[w] = ~out[w];
        }
        if (r->words > 0) {
            out[r->words - 1] &= imap_search_tail(count);
        }
        return MV_OK;
    }
    int is_and = key->op == IMAP_SK_AND;
    for (uint32_t c = r->prog->keys[key->child].next; c != IMAP_NODE_NONE;
         c = r->prog->keys[c].next) {
        int decided = 1; /* an AND's set empty, an OR's full: the other keys cannot change it */
        for (size_t w = 0; decided && w < r->words; w++) {
            imap_search_word whole =
                w + 1 == r->words ? imap_search_tail(count) : ~(imap_search_word)0;
            decided = is_and ? out[w] == 0 : out[w] == whole;
        }
        if (decided) {
            break;
        }
        if (r->scratch[level] == NULL && (r->scratch[level] = imap_search_set_new(r)) == NULL) {
            return MV_ENOMEM;
        }
        imap_search_word *part = r->scratch[level];
        if ((rc = imap_search_set_of(r, c, level + 1, part)) != MV_OK) {
            return rc;
        }
        for (size_t w = 0; w < r->words; w++) {
            out[w] = is_and ? out[w] & part[w] : out[w] | part[w];
        }
    }
    return MV_OK;
}

/* A SENTSINCE, SENTBEFORE or SENTON key from the sent days the open store keeps
 * (imap_search_sent.c), or, where they are not kept, from the store (mv_search). The key's date is
 * a day's midnight, so comparing days compares what the store compares in seconds. */
static int imap_search_sent(struct imap_search_run *r,
                            const struct imap_search_key *key,
                            imap_search_word *out)
{
    const struct imap_sent_dates *d = NULL;
    int rc = imap_sent_dates_for(r->x->s, &d);
    if (rc == MV_EUNSUPPORTED) {
        return imap_search_store(r, key, out);
    }
    if (rc != MV_OK) {
        return rc;
    }
    const struct imap_view *v = &r->x->s->view;
    int64_t day = key->number / 86400 - (key->number % 86400 < 0);
    size_t at = 0; /* the view and the copy are both in UID order: one pass over both */
    for (size_t i = 0; i < v->count; i++) {
        int32_t sent;
        if (imap_sent_dates_next(d, &at, imap_view_msg(v, i)->uid, &sent) != 0) {
            continue; /* no Date header: no SENT* key matches (as in the store) */
        }
        int has = key->op == IMAP_SK_SENTSINCE    ? sent >= day
                  : key->op == IMAP_SK_SENTBEFORE ? sent < day
                                                  : sent == day;
        if (has) {
            imap_search_bit_set(out, i);
        }
    }
    imap_sent_dates_done(r->x->s);
    return MV_OK;
}

/* The set of messages that have key k (at nesting level level), into out (r->words words,
 * overwritten). */
static int
imap_search_set_of(struct imap_search_run *r, uint32_t k, int level, imap_search_word *out)
{
    const struct imap_search_key *key = &r->prog->keys[k];
    const struct imap_view *v = &r->x->s->view;
    if (r->batched != NULL && r->batched[k] != NULL) { /* answered with others of its kind */
        memcpy(out, r->batched[k], r->words * sizeof *out);
        return MV_OK;
    }
    memset(out, 0, r->words * sizeof *out);
    switch (key->op) {
    case IMAP_SK_AND:
    case IMAP_SK_OR:
    case IMAP_SK_NOT:
        return imap_search_combine(r, k, level, out);
    case IMAP_SK_FROM:
    case IMAP_SK_TO:
    case IMAP_SK_CC:
    case IMAP_SK_SUBJECT:
    case IMAP_SK_BODY:
    case IMAP_SK_TEXT:
        return imap_search_store(r, key, out);
    case IMAP_SK_SENTSINCE:
    case IMAP_SK_SENTBEFORE:
    case IMAP_SK_SENTON:
        return imap_search_sent(r, key, out);
    case IMAP_SK_HEADER:
    case IMAP_SK_BCC:
        return imap_search_header(r, key, out);
    case IMAP_SK_SEQSET:
    case IMAP_SK_UIDSET:
        imap_search_set_ranges(r, key, out);
        return MV_OK;
    default:
        for (size_t i = 0; i < v->count; i++) {
            if (imap_search_leaf(r, k, i)) {
                imap_search_bit_set(out, i);
            }
        }
        return MV_OK;
    }
}

static enum mv_header_field imap_search_field(enum imap_search_op op)
{
    switch (op) {
    case IMAP_SK_FROM:
        return MV_HEADER_FROM;
    case IMAP_SK_TO:
        return MV_HEADER_TO;
    case IMAP_SK_CC:
        return MV_HEADER_CC;
    case IMAP_SK_SUBJECT:
        return MV_HEADER_SUBJECT;
    default:
        return (enum mv_header_field)0;
    }
}

/* Whether key k can go into a batch: FROM/TO/CC/SUBJECT with a string mv_search would take
 * (an empty one matches every message without a search; a NUL or an overlong one is EINVAL
 * either way, from imap_search_store). */
static int imap_search_batchable(const struct imap_search_key *key)
{
    return imap_search_field(key->op) != 0 && key->str_len > 0 &&
           key->str_len < IMAP_SEARCH_STRING_MAX && memchr(key->str, 0, key->str_len) == NULL;
}

/* One batch's keys and the sets their matches go into. */
struct imap_search_batch_ctx {
    struct imap_search_run *r;
    const uint32_t *keys; /* key index of criterion i */
};

static int imap_search_batch_hit(void *arg, uint32_t uid, uint64_t matched)
{
    struct imap_search_batch_ctx *b = arg;
    size_t i = imap_search_index(&b->r->x->s->view, uid);
    for (unsigned c = 0; i != SIZE_MAX && matched != 0; c++, matched >>= 1) {
        if ((matched & 1) != 0) {
            imap_search_bit_set(b->r->batched[b->keys[c]], i);
        }
    }
    return 0;
}

/* r->batched, made on first use; MV_OK or MV_ENOMEM. */
static int imap_search_batched_init(struct imap_search_run *r)
{
    if (r->batched == NULL && (r->batched = calloc(r->prog->count, sizeof *r->batched)) == NULL) {
        return MV_ENOMEM;
    }
    return MV_OK;
}

/* FROM/TO/CC/SUBJECT keys, when a program has two or more, answered together: up to
 * MV_HEADER_CRITERIA_MAX a pass (mv_search_headers) instead of a scan each (a client's OR of
 * 20 FROM keys was 20 scans: 117 ms at 10,000 messages, Dovecot 40). *budget: how many more
 * keys' sets may be kept. */
static int imap_search_batch_fields(struct imap_search_run *r, size_t *budget)
{
    const struct imap_search *prog = r->prog;
    size_t n = 0;
    for (size_t k = 0; k < prog->count; k++) {
        n += (size_t)imap_search_batchable(&prog->keys[k]);
    }
    if (n < 2 || imap_search_batched_init(r) != MV_OK) {
        return n < 2 ? MV_OK : MV_ENOMEM;
    }
    struct mv_header_criterion criteria[MV_HEADER_CRITERIA_MAX];
    char *texts[MV_HEADER_CRITERIA_MAX];
    uint32_t keys[MV_HEADER_CRITERIA_MAX];
    struct imap_search_batch_ctx ctx = {.r = r, .keys = keys};
    int rc = MV_OK;
    size_t k = 0, left = *budget;
    while (rc == MV_OK && k < prog->count && left > 0) {
        size_t c = 0;
        for (; k < prog->count && c < MV_HEADER_CRITERIA_MAX && c < left; k++) {
            const struct imap_search_key *key = &prog->keys[k];
            if (!imap_search_batchable(key)) {
                continue;
            }
            r->batched[k] = imap_search_set_new(r);
            texts[c] = r->batched[k] != NULL ? strndup(key->str, key->str_len) : NULL;
            if (texts[c] == NULL) {
                rc = MV_ENOMEM;
                break;
            }
            criteria[c] =
                (struct mv_header_criterion){.field = imap_search_field(key->op), .text = texts[c]};
            keys[c++] = (uint32_t)k;
        }
        if (rc == MV_OK && c > 0) {
            rc = mv_search_headers(imap_db(r->x->s), r->x->s->view.mailbox, criteria, c,
                                   imap_search_batch_hit, &ctx);
        }
        for (size_t i = 0; i < c; i++) {
            free(texts[i]);
        }
        left -= c;
    }
    *budget = left;
    return rc;
}

/* HEADER and BCC keys, when a program has two or more, answered in one pass over the view
 * (imap_search_headers_pass), as many as *budget allows; one a key cannot take (EINVAL) is
 * left to its own pass, which says so. */
static int imap_search_batch_headers(struct imap_search_run *r, size_t *budget)
{
    const struct imap_search *prog = r->prog;
    size_t n = 0;
    for (size_t k = 0; k < prog->count; k++) {
        n += prog->keys[k].op == IMAP_SK_HEADER || prog->keys[k].op == IMAP_SK_BCC;
    }
    n = n < *budget ? n : *budget;
    if (n < 2) {
        return MV_OK;
    }
    char **fields = calloc(n, sizeof *fields);
    char **values = calloc(n, sizeof *values);
    imap_search_word **sets = calloc(n, sizeof *sets);
    int rc =
        fields != NULL && values != NULL && sets != NULL ? imap_search_batched_init(r) : MV_ENOMEM;
    size_t c = 0;
    for (size_t k = 0; rc == MV_OK && k < prog->count && c < n; k++) {
        const struct imap_search_key *key = &prog->keys[k];
        if (key->op != IMAP_SK_HEADER && key->op != IMAP_SK_BCC) {
            continue;
        }
        int made = imap_search_field_of(key, &fields[c], &values[c]);
        if (made == MV_EINVAL) {
            free(fields[c]);
            free(values[c]);
            continue;
        }
        if (made != MV_OK || (sets[c] = r->batched[k] = imap_search_set_new(r)) == NULL) {
            free(fields[c]);
            free(values[c]);
            rc = MV_ENOMEM;
            break;
        }
        c++;
    }
    if (rc == MV_OK && c > 0) {
        rc = imap_search_headers_pass(r, fields, values, c, sets);
        *budget -= c;
    }
    for (size_t j = 0; j < c; j++) {
        free(fields[j]);
        free(values[j]);
    }
    free(fields);
    free(values);
    free(sets);
    return rc;
}

/* The keys answered together before the evaluation (their sets wait in r->batched, within
 * IMAP_SEARCH_BATCH_BYTES; the keys past it, and a lone one of a kind, are answered alone as
 * the evaluation comes to them). */
static int imap_search_batch(struct imap_search_run *r)
{
    size_t budget =
        IMAP_SEARCH_BATCH_BYTES / ((r->words > 0 ? r->words : 1) * sizeof(imap_search_word));
    int rc = imap_search_batch_fields(r, &budget);
    return rc == MV_OK ? imap_search_batch_headers(r, &budget) : rc;
}

/* The rows of every message the program's keys read in a pass over the mailbox
 * (MV_PREFETCH_*): HEADER and BCC the headers' copies, FROM/TO/CC/SUBJECT the kept fields
 * (SENT* read theirs once into the store's copy: imap_search_sent.c). */
static unsigned imap_search_rows_read(const struct imap_search *prog)
{
    unsigned what = 0;
    for (size_t k = 0; k < prog->count; k++) {
        enum imap_search_op op = prog->keys[k].op;
        /* a HEADER Message-ID key reads the store's copy (imap_search_msgid.c: made from the
         * headers, which it asks for itself, at most once a mailbox) */
        int copied = imap_search_key_kept(&prog->keys[k]);
        what |=
            (op == IMAP_SK_HEADER && !copied) || op == IMAP_SK_BCC ? MV_PREFETCH_HEADER_COPY : 0u;
        what |= imap_search_field(op) != 0 ? MV_PREFETCH_FIELDS : 0u;
    }
    return what;
}

/* The program's set, inside one read snapshot: one transaction for every header read and
 * store search instead of one each. */
static int imap_search_run_all(struct imap_search_run *r, imap_search_word *out)
{
    mv_store *store = imap_db(r->x->s);
    if (mv_store_read_begin(store) != MV_OK) {
        /* nothing lost: each read then has a transaction of its own */
    }
    unsigned what = imap_search_rows_read(r->prog);
    if (what != 0) {
        imap_view_prefetch_headers(store, &r->x->s->view, what);
    }
    int rc = imap_search_batch(r);
    if (rc == MV_OK) {
        rc = imap_search_set_of(r, 0, 0, out);
    }
    mv_store_read_end(store); /* nothing if none was begun */
    return rc;
}

int imap_search_matches(struct imap_ctx *x, const struct imap_search *prog, uint64_t **found)
{
    struct imap_search_run r = {.x = x, .prog = prog, .words = (x->s->view.count + 63) / 64};
    *found = imap_search_set_new(&r);
    int rc = *found != NULL ? imap_search_run_all(&r, *found) : MV_ENOMEM;
    for (size_t l = 0; l <= IMAP_SEARCH_DEPTH_MAX; l++) {
        free(r.scratch[l]);
    }
    for (size_t k = 0; r.batched != NULL && k < prog->count; k++) {
        free(r.batched[k]);
    }
    free(r.batched);
    if (rc != MV_OK) {
        free(*found);
        *found = NULL;
    }
    return rc;
}

int imap_search_matched(const uint64_t *found, const struct imap_view *v, size_t i)
{
    return imap_search_bit(found, i) && (imap_view_marks(v, i) & IMAP_MARK_EXPUNGED) == 0;
}

int imap_search_parse_program(struct imap_ctx *x,
                              const struct imap_node *node,
                              struct imap_search *prog)
{
    char err[256];
    if (imap_parse_search(x->cmd, node, prog, err, sizeof err) != 0) {
        imap_tagged(x, strncmp(err, "[BADCHARSET", 11) == 0 ? "NO" : "BAD", "%s", err);
        return -1;
    }
    return 0;
}

void imap_search_answer_add(struct imap_ctx *x, size_t i, uint64_t *highest)
{
    const struct imap_msg *m = imap_view_msg(&x->s->view, i);
    /* not buf_printf: a vsnprintf a hit was most of a UID SEARCH ALL's CPU */
    buf_add(x->out, " ", 1);
    buf_u64(x->out, x->cmd->uid ? m->uid : (uint64_t)i + 1);
    *highest = m->modseq > *highest ? m->modseq : *highest;
}

void imap_search_answer_end(struct imap_ctx *x, int with_modseq, uint64_t highest)
{
    if (with_modseq && highest > 0) {
        buf_printf(x->out, " (MODSEQ %llu)", (unsigned long long)highest);
        x->s->condstore = 1;
    }
    buf_str(x->out, "\r\n");
}

int imap_search_has_modseq(const struct imap_search *prog)
{
    for (size_t k = 0; k < prog->count; k++) {
        if (prog->keys[k].op == IMAP_SK_MODSEQ) {
            return 1;
        }
    }
    return 0;
}

void imap_cmd_search(struct imap_ctx *x)
{
    struct imap_view *v = &x->s->view;
    struct imap_search *prog = malloc(sizeof *prog);
    if (prog == NULL) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return;
    }
    if (x->s->utf8_accept && imap_atom_is(imap_arg(x->cmd, 0), "CHARSET")) {
        /* RFC 6855 3: after ENABLE UTF8=ACCEPT a SEARCH names no charset (its strings are
         * UTF-8), and the server SHOULD answer one that does with BAD, whatever it names. */
        imap_tagged(x, "BAD", "no CHARSET after ENABLE UTF8=ACCEPT: search strings are UTF-8");
        free(prog);
        return;
    }
    if (imap_search_parse_program(x, imap_arg(x->cmd, 0), prog) != 0) {
        free(prog);
        return;
    }
    imap_search_word *found = NULL;
    int rc = imap_search_matches(x, prog, &found);
    if (rc == MV_OK) {
        /* RFC 7162: a MODSEQ key adds the highest modseq found */
        int with_modseq = imap_search_has_modseq(prog);
        uint64_t highest = 0;
        buf_str(x->out, "* SEARCH");
        for (size_t i = 0; i < v->count; i++) {
            if (imap_search_matched(found, v, i)) {
                imap_search_answer_add(x, i, &highest);
            }
        }
        imap_search_answer_end(x, with_modseq, highest);
    }
    free(found);
    imap_search_free(prog);
    free(prog);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "SEARCH");
        return;
    }
    (void)imap_view_sync(x->s, x->out, x->cmd->uid);
    imap_tagged(x, "OK", "SEARCH completed");
}
