/*
 * imap_sort.c -- SORT and UID SORT (RFC 5256), with SORT=DISPLAY's DISPLAYFROM and DISPLAYTO
 * (RFC 5957).
 *
 *   SORT (sort-criteria) charset search-program
 *
 * IMPLEMENTATION NOTES
 *   - The program's matches are SEARCH's (imap_search_matches: the same keys, sets, copies and
 *     batches). A webmail that finds SORT sorts a message list on the server; without it,
 *     it fetches a header field of every message to sort them itself (at 100,000 messages a
 *     FETCH 1:* of every Date, From or Subject).
 *   - ARRIVAL and SIZE come from the view. DATE (the Date header in UTC, else the internal
 *     date, RFC 5256 2.2), SUBJECT (the base subject, 2.1), FROM, TO, CC and the DISPLAY
 *     forms come from the header fields the store keeps (mv_message_fields_each: one walk,
 *     no message read or parsed), turned into keys by imap_sort_key.c in i;ascii-casemap
 *     form. The open store keeps them, ranked, for the next SORT of the mailbox
 *     (imap_sort_kept.c); when it cannot (its bounds), this SORT makes its own over the
 *     matched UIDs' range, one arena per criterion.
 *   - What is sorted is a 16-byte item a message, its first criterion's key as a number
 *     (imap_sort_lead); the rest are compared only when those are equal.
 *   - Messages equal under every criterion keep the mailbox's order (RFC 5256 3: the
 *     sequence number decides), REVERSE included, which reverses its own criterion only.
 *   - A MODSEQ key in the program adds "(MODSEQ n)", the highest modseq of the answer
 *     (RFC 7162 3.1.5), as SEARCH does.
 *
 * LIMITATIONS
 *   A string key is compared on its first IMAP_SORT_KEY_MAX bytes, fewer when the matched
 *   messages times the string criteria would make the keys pass IMAP_SORT_KEYS_BUDGET (never
 *   fewer than IMAP_SORT_KEY_MIN): keys equal that far leave the order to the sequence
 *   numbers. At most IMAP_SORT_CRITERIA_MAX criteria.
 */
#include "buf.h"
#include "imap_search.h"
#include "imap_session.h"
#include "imap_sort_kept.h"
#include "imap_sort_key.h"
#include "mailvault.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define IMAP_SORT_CRITERIA_MAX 16
#define IMAP_SORT_KEY_MAX      1024
#define IMAP_SORT_KEY_MIN      32
#define IMAP_SORT_KEYS_BUDGET  (128u << 20)

static const char *const imap_sort_names[] = {
    [IMAP_SORT_ARRIVAL] = "ARRIVAL",
    [IMAP_SORT_CC] = "CC",
    [IMAP_SORT_DATE] = "DATE",
    [IMAP_SORT_FROM] = "FROM",
    [IMAP_SORT_SIZE] = "SIZE",
    [IMAP_SORT_SUBJECT] = "SUBJECT",
    [IMAP_SORT_TO] = "TO",
    [IMAP_SORT_DISPLAYFROM] = "DISPLAYFROM",
    [IMAP_SORT_DISPLAYTO] = "DISPLAYTO",
};

/* A string criterion's keys for the p-th matched message: rank[p] from the store's kept copy
 * (imap_sort_kept.c), or key[p] in this SORT's own arena (bytes; at[p] while it is made). */
struct imap_sort_strings {
    char *bytes;
    size_t len, cap;
    size_t *at;
    const char **key;
    uint32_t *rank; /* from the kept copy (then at, key and bytes are not used) */
};

struct imap_sort_criterion {
    enum imap_sort_by by;
    int reverse;
    struct imap_sort_strings keys; /* string criteria only */
};

struct imap_sort {
    const struct imap_view *view;
    struct imap_sort_criterion crit[IMAP_SORT_CRITERIA_MAX];
    size_t count;
    uint32_t *index; /* the matched messages' view indexes, in the view's order at first */
    size_t n;
    int64_t *date;  /* DATE's key, per matched message (NULL without DATE) */
    size_t key_cap; /* a string key's bytes, its NUL included */
    size_t fill;    /* the walk's next matched message */
    int failed;     /* out of memory in the walk */
};

/* The criteria list at node into so: 0, or -1 with err set. */
static int imap_sort_parse(const struct imap_command *cmd,
                           const struct imap_node *node,
                           struct imap_sort *so,
                           const char **err)
{
    if (node == NULL || node->type != IMAP_NODE_LIST || node->child == IMAP_NODE_NONE) {
        *err = "expected a list of sort criteria";
        return -1;
    }
    int reverse = 0;
    for (const struct imap_node *c = imap_node(cmd, node->child); c != NULL;
         c = imap_node(cmd, c->next)) {
        if (imap_atom_is(c, "REVERSE") && !reverse) {
            reverse = 1;
            continue;
        }
        size_t k = 0;
        while (k < sizeof imap_sort_names / sizeof imap_sort_names[0] &&
               !imap_atom_is(c, imap_sort_names[k])) {
            k++;
        }
        if (k == sizeof imap_sort_names / sizeof imap_sort_names[0]) {
            *err = "unknown sort criterion";
            return -1;
        }
        if (so->count == IMAP_SORT_CRITERIA_MAX) {
            *err = "too many sort criteria (at most 16)";
            return -1;
        }
        so->crit[so->count++] = (struct imap_sort_criterion){.by = k, .reverse = reverse};
        reverse = 0;
    }
    if (reverse) {
        *err = "REVERSE ends the sort criteria";
        return -1;
    }
    return 0;
}

/* Appends the key of the matched message fill (from fields, or "" without them) to each
 * string criterion's arena. */
static int imap_sort_add_keys(struct imap_sort *so, const struct mv_message_fields *f)
{
    for (size_t k = 0; k < so->count; k++) {
        struct imap_sort_criterion *c = &so->crit[k];
        if (!imap_sort_is_string(c->by)) {
            continue;
        }
        struct imap_sort_strings *s = &c->keys;
        if (imap_sort_arena_room(&s->bytes, s->len, &s->cap, so->key_cap) != MV_OK) {
            return MV_ENOMEM;
        }
        char *out = s->bytes + s->len;
        size_t n = 0;
        if (f == NULL) {
            out[0] = '\0';
        } else {
            n = imap_sort_key_of(c->by, f, out, so->key_cap);
        }
        s->at[so->fill] = s->len;
        s->len += n + 1;
    }
    return MV_OK;
}

/* The keys of the matched messages before uid that the walk had no row for. */
static int imap_sort_skip_to(struct imap_sort *so, uint32_t uid)
{
    while (so->fill < so->n && imap_view_msg(so->view, so->index[so->fill])->uid < uid) {
        const struct imap_msg *m = imap_view_msg(so->view, so->index[so->fill]);
        if (so->date != NULL) {
            so->date[so->fill] = m->internal_date;
        }
        if (imap_sort_add_keys(so, NULL) != MV_OK) {
            return MV_ENOMEM;
        }
        so->fill++;
    }
    return MV_OK;
}

/* mv_message_fields_each's function: the keys of a matched message. */
static int imap_sort_fields(void *arg, const struct mv_message_fields *f)
{
    struct imap_sort *so = arg;
    if (imap_sort_skip_to(so, f->uid) != MV_OK) {
        so->failed = 1;
        return MV_ENOMEM;
    }
    if (so->fill == so->n || imap_view_msg(so->view, so->index[so->fill])->uid != f->uid) {
        return 0; /* not a matched message */
    }
    const struct imap_msg *m = imap_view_msg(so->view, so->index[so->fill]);
    if (so->date != NULL) {
        so->date[so->fill] = f->sent_utc != MV_SENT_NONE ? f->sent_utc : m->internal_date;
    }
    if (imap_sort_add_keys(so, f) != MV_OK) {
        so->failed = 1;
        return MV_ENOMEM;
    }
    so->fill++;
    return 0;
}

static int imap_sort_cmp3(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

/* The order of matched messages a and b (positions into so->index, in the view's order)
 * under every criterion, then by position. */
static int imap_sort_order(const struct imap_sort *so, uint32_t a, uint32_t b)
{
    const struct imap_msg *ma = imap_view_msg(so->view, so->index[a]);
    const struct imap_msg *mb = imap_view_msg(so->view, so->index[b]);
    for (size_t k = 0; k < so->count; k++) {
        const struct imap_sort_criterion *c = &so->crit[k];
        int r = c->by == IMAP_SORT_ARRIVAL ? imap_sort_cmp3(ma->internal_date, mb->internal_date)
                : c->by == IMAP_SORT_SIZE  ? imap_sort_cmp3(ma->size, mb->size)
                : c->by == IMAP_SORT_DATE  ? imap_sort_cmp3(so->date[a], so->date[b])
                : c->keys.rank != NULL     ? imap_sort_cmp3(c->keys.rank[a], c->keys.rank[b])
                                           : strcmp(c->keys.key[a], c->keys.key[b]);
        if (r != 0) {
            return c->reverse ? -r : r;
        }
    }
    return imap_sort_cmp3(a, b);
}

/* What is sorted: a matched message's position and its first criterion's key as a number
 * that orders as the key does (a string's first 8 bytes, big-endian, zeros after its end;
 * REVERSE complemented). Most comparisons end on the number, in a 16-byte item, instead of
 * a strcmp() through the arenas and the view (they were a third of a SORT SUBJECT's CPU
 * at 100,000 messages). */
struct imap_sort_item {
    uint64_t key;
    uint32_t pos;
};

static uint64_t imap_sort_lead(const struct imap_sort *so, uint32_t pos)
{
    const struct imap_sort_criterion *c = &so->crit[0];
    uint64_t key = 0;
    if (c->keys.rank != NULL) {
        key = c->keys.rank[pos];
    } else if (imap_sort_is_string(c->by)) {
        key = imap_sort_key_lead(c->keys.key[pos]);
    } else {
        const struct imap_msg *m = imap_view_msg(so->view, so->index[pos]);
        int64_t v = c->by == IMAP_SORT_ARRIVAL ? m->internal_date
                    : c->by == IMAP_SORT_SIZE  ? (int64_t)m->size
                                               : so->date[pos];
        key = (uint64_t)v ^ (UINT64_C(1) << 63); /* signed order as unsigned */
    }
    return c->reverse ? ~key : key;
}

static int imap_sort_compare(const void *pa, const void *pb, void *arg)
{
    const struct imap_sort_item *a = pa, *b = pb;
    if (a->key != b->key) {
        return a->key < b->key ? -1 : 1;
    }
    return imap_sort_order(arg, a->pos, b->pos);
}

/* The keys of the matched messages from the store's kept copy: each message's entry found
 * by UID (both in UID order); a message the copy lacks (expunged before it was read) has
 * empty keys and its internal date. */
static void imap_sort_from_kept(struct imap_sort *so, const struct imap_sort_kept *kept)
{
    size_t cursor = 0;
    for (size_t p = 0; p < so->n; p++) {
        const struct imap_msg *m = imap_view_msg(so->view, so->index[p]);
        size_t e = imap_sort_kept_find(kept, &cursor, m->uid);
        if (so->date != NULL) {
            int64_t sent = e != SIZE_MAX ? imap_sort_kept_sent(kept, e) : MV_SENT_NONE;
            so->date[p] = sent != MV_SENT_NONE ? sent : m->internal_date;
        }
        for (size_t k = 0; k < so->count; k++) {
            struct imap_sort_criterion *c = &so->crit[k];
            if (imap_sort_is_string(c->by)) {
                /* no entry: "", whose rank is 0 */
                c->keys.rank[p] = e != SIZE_MAX ? imap_sort_kept_rank_of(kept, c->by, e) : 0;
            }
        }
    }
}

/* The keys of the matched messages the criteria need from the store: the open store's kept
 * copy (imap_sort_kept.c), else read for this SORT alone. */
static int imap_sort_keys(struct imap_ctx *x, struct imap_sort *so)
{
    size_t strings = 0;
    int dates = 0;
    unsigned kinds = 0; /* the criteria the store's kept copy is asked for */
    for (size_t k = 0; k < so->count; k++) {
        strings += imap_sort_is_string(so->crit[k].by) ? 1u : 0u;
        dates |= so->crit[k].by == IMAP_SORT_DATE;
        kinds |= imap_sort_is_string(so->crit[k].by) || so->crit[k].by == IMAP_SORT_DATE
                     ? 1u << so->crit[k].by
                     : 0u;
    }
    if ((strings == 0 && !dates) || so->n == 0) {
        return MV_OK;
    }
    size_t cap = strings > 0 ? IMAP_SORT_KEYS_BUDGET / (so->n * strings) : IMAP_SORT_KEY_MAX;
    so->key_cap = cap > IMAP_SORT_KEY_MAX   ? IMAP_SORT_KEY_MAX
                  : cap < IMAP_SORT_KEY_MIN ? IMAP_SORT_KEY_MIN
                                            : cap;
    if (dates && (so->date = malloc(so->n * sizeof *so->date)) == NULL) {
        return MV_ENOMEM;
    }
    const struct imap_sort_kept *kept = NULL;
    int rc = imap_sort_kept_for(x->s, kinds, &kept);
    for (size_t k = 0; rc == MV_OK && k < so->count; k++) {
        struct imap_sort_strings *s = &so->crit[k].keys;
        if (imap_sort_is_string(so->crit[k].by) &&
            (s->rank = malloc(so->n * sizeof *s->rank)) == NULL) {
            imap_sort_kept_done(x->s);
            return MV_ENOMEM;
        }
    }
    if (rc == MV_OK) {
        imap_sort_from_kept(so, kept); /* ranks copied: the copy is let go before the sort */
        imap_sort_kept_done(x->s);
        return MV_OK;
    }
    if (rc != MV_EUNSUPPORTED) {
        return rc;
    }
    for (size_t k = 0; k < so->count; k++) { /* the keys made here, for this SORT alone */
        struct imap_sort_strings *s = &so->crit[k].keys;
        if (imap_sort_is_string(so->crit[k].by) &&
            ((s->at = malloc(so->n * sizeof *s->at)) == NULL ||
             (s->key = malloc(so->n * sizeof *s->key)) == NULL)) {
            return MV_ENOMEM;
        }
    }
    const struct imap_view *v = so->view;
    uint32_t first = imap_view_msg(v, so->index[0])->uid;
    uint32_t last = imap_view_msg(v, so->index[so->n - 1])->uid;
    rc = mv_message_fields_each(imap_db(x->s), v->mailbox, first, last, imap_sort_fields, so);
    if (rc == MV_OK || (rc == MV_ENOMEM && so->failed)) {
        /* the matched messages past the walk's last row (expunged by another session) */
        int tail = imap_sort_skip_to(so, UINT32_MAX);
        rc = rc == MV_OK ? tail : rc;
    }
    for (size_t k = 0; rc == MV_OK && k < so->count; k++) {
        struct imap_sort_strings *s = &so->crit[k].keys;
        for (size_t p = 0; s->key != NULL && p < so->n; p++) {
            s->key[p] = s->bytes + s->at[p]; /* the arena grows no more */
        }
    }
    return rc;
}

static void imap_sort_free(struct imap_sort *so)
{
    for (size_t k = 0; k < so->count; k++) {
        struct imap_sort_strings *s = &so->crit[k].keys;
        if (s->bytes != NULL) {
            explicit_bzero(s->bytes, s->len); /* a message's subject and addresses */
        }
        free(s->bytes);
        free(s->at);
        free(s->key);
        free(s->rank);
    }
    free(so->date);
    free(so->index);
}

/* The answer: "* SORT" and the sorted numbers (UIDs for UID SORT), "(MODSEQ n)" after a
 * MODSEQ key. */
static int imap_sort_answer(struct imap_ctx *x, struct imap_sort *so, int with_modseq)
{
    struct imap_sort_item *order = malloc((so->n > 0 ? so->n : 1) * sizeof *order);
    if (order == NULL) {
        return MV_ENOMEM;
    }
    for (size_t p = 0; p < so->n; p++) {
        order[p] =
            (struct imap_sort_item){.key = imap_sort_lead(so, (uint32_t)p), .pos = (uint32_t)p};
    }
    if (so->count > 0 && so->n > 1) {
        qsort_r(order, so->n, sizeof *order, imap_sort_compare, so);
    }
    uint64_t highest = 0;
    buf_str(x->out, "* SORT");
    for (size_t p = 0; p < so->n; p++) {
        imap_search_answer_add(x, so->index[order[p].pos], &highest);
    }
    imap_search_answer_end(x, with_modseq, highest);
    free(order);
    return MV_OK;
}

void imap_cmd_sort(struct imap_ctx *x)
{
    const struct imap_view *v = &x->s->view;
    struct imap_sort so = {.view = v};
    const char *err = NULL;
    char charset[32];
    if (imap_sort_parse(x->cmd, imap_arg(x->cmd, 0), &so, &err) != 0) {
        imap_tagged(x, "BAD", "%s", err);
        return;
    }
    if (imap_astring(imap_arg(x->cmd, 1), charset, sizeof charset) != 0 ||
        imap_arg(x->cmd, 2) == NULL) {
        imap_tagged(x, "BAD", "expected SORT (criteria) charset search-keys");
        return;
    }
    if (strcasecmp(charset, "UTF-8") != 0 && strcasecmp(charset, "US-ASCII") != 0) {
        imap_tagged(x, "NO", "[BADCHARSET (US-ASCII UTF-8)] unknown charset");
        return;
    }
    if (imap_atom_is(imap_arg(x->cmd, 2), "CHARSET")) {
        imap_tagged(x, "BAD", "SORT names its charset before the search keys, not as CHARSET");
        return;
    }
    struct imap_search *prog = malloc(sizeof *prog);
    if (prog == NULL) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return;
    }
    if (imap_search_parse_program(x, imap_arg(x->cmd, 2), prog) != 0) {
        free(prog);
        return;
    }
    /* The matches are one snapshot, the keys another (a search ends its own): a message
     * expunged between the two sorts with empty keys and its internal date. */
    uint64_t *found = NULL;
    int rc = imap_search_matches(x, prog, &found);
    if (rc == MV_OK &&
        (so.index = malloc((v->count > 0 ? v->count : 1) * sizeof(uint32_t))) == NULL) {
        rc = MV_ENOMEM;
    }
    for (size_t i = 0; rc == MV_OK && i < v->count; i++) {
        if (imap_search_matched(found, v, i)) {
            so.index[so.n++] = (uint32_t)i;
        }
    }
    if (rc == MV_OK) {
        rc = imap_sort_keys(x, &so);
    }
    if (rc == MV_OK) {
        rc = imap_sort_answer(x, &so, imap_search_has_modseq(prog));
    }
    free(found);
    imap_sort_free(&so);
    imap_search_free(prog);
    free(prog);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "SORT");
        return;
    }
    (void)imap_view_sync(x->s, x->out, x->cmd->uid);
    imap_tagged(x, "OK", "SORT completed");
}
