/*
 * imap_cmd_mailbox.c -- commands on mailboxes: SELECT, EXAMINE, CREATE, DELETE, RENAME,
 * SUBSCRIBE, UNSUBSCRIBE, LIST, LSUB, STATUS, APPEND. Names travel in modified UTF-7 on the
 * wire (in UTF-8 once the session enabled UTF8=ACCEPT, RFC 6855) and in UTF-8 in the store;
 * '/' is the hierarchy separator. APPEND takes RFC 6855's UTF8 (~{n}...) data once enabled.
 *
 * LIST takes the LIST-EXTENDED form (RFC 5258: selection options, several patterns, RETURN
 * options), LIST-STATUS (RFC 5819) and the SPECIAL-USE option (RFC 6154); CREATE takes
 * (USE (...)) (CREATE-SPECIAL-USE). LIST reads every mailbox once (name order), keeps the
 * names its patterns can report or need for \HasChildren (imap_list_filter), adds the levels
 * above them that have no mailbox of their own, and marks children, selection and CHILDINFO
 * with binary searches over that sorted set: no per-pattern store query.
 * Neither LIST nor STATUS asks the store for stored_bytes (a walk of every message): the
 * mailbox rows answer everything but DELETED / DELETED-STORAGE (RFC 9051, RFC 9208), which
 * are counted over the index of \Deleted messages only when asked for.
 */
#include "buf.h"
#include "imap_session.h"
#include "mailvault.h"
#include "quota.h"
#include "worker.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

_Static_assert(IMAP_FLAG_SEEN == MV_FLAG_SEEN && IMAP_FLAG_ANSWERED == MV_FLAG_ANSWERED &&
                   IMAP_FLAG_FLAGGED == MV_FLAG_FLAGGED && IMAP_FLAG_DELETED == MV_FLAG_DELETED &&
                   IMAP_FLAG_DRAFT == MV_FLAG_DRAFT,
               "IMAP flag bits are the store's");

int imap_mailbox_arg(struct imap_ctx *x, const struct imap_node *n, char *out, size_t out_size)
{
    char wire[IMAP_MAILBOX_MAX + 1];
    if (imap_astring(n, wire, sizeof wire) != 0) {
        imap_tagged(x, "BAD", "expected a mailbox name");
        return -1;
    }
    if (strcasecmp(wire, "INBOX") == 0) {
        snprintf(out, out_size, "INBOX");
        return 0;
    }
    if (x->s->utf8_accept) { /* RFC 6855 3: the name as it is, no modified UTF-7 */
        size_t len = strlen(wire);
        if (!imap_utf8_name_valid(wire, len) || len >= out_size) {
            imap_tagged(x, "BAD", "mailbox name is not valid UTF-8 or holds a control character");
            return -1;
        }
        memcpy(out, wire, len + 1);
        return 0;
    }
    if (imap_utf7_decode(wire, strlen(wire), out, out_size) != 0) {
        imap_tagged(x, "BAD", "mailbox name is not valid modified UTF-7");
        return -1;
    }
    return 0;
}

void imap_mailbox_out(struct imap_ctx *x, const char *name)
{
    if (x->s->utf8_accept) {
        buf_imap_string_utf8(x->out, name, strlen(name), 1);
        return;
    }
    char wire[IMAP_MAILBOX_MAX * 3 + 8];
    if (imap_utf7_encode(name, wire, sizeof wire) != 0) {
        buf_str(x->out, "\"\"");
        return;
    }
    buf_imap_string(x->out, wire, strlen(wire));
}

static mv_store *imap_store(struct imap_ctx *x)
{
    return imap_db(x->s);
}

/* ---- SELECT / EXAMINE ---- */

/* The select parameter: (CONDSTORE) or, once QRESYNC is enabled, (QRESYNC (...)) into *q
 * (malloc'd). 0, or -1 with BAD written. */
static int
imap_select_param(struct imap_ctx *x, const struct imap_node *params, struct imap_qresync **q)
{
    const struct imap_node *p =
        params->type == IMAP_NODE_LIST ? imap_node(x->cmd, params->child) : NULL;
    if (imap_atom_is(p, "CONDSTORE") && p->next == IMAP_NODE_NONE) {
        return 0;
    }
    if (!imap_atom_is(p, "QRESYNC")) {
        imap_tagged(x, "BAD", "the %s parameters are (CONDSTORE) and (QRESYNC (...))",
                    x->cmd->name);
        return -1;
    }
    if (!x->s->qresync) {
        imap_tagged(x, "BAD", "QRESYNC must be enabled first (ENABLE QRESYNC)");
        return -1;
    }
    *q = malloc(sizeof **q);
    if (*q == NULL) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return -1;
    }
    if (imap_qresync_param(x->cmd, params, *q) != 0) {
        free(*q);
        *q = NULL;
        imap_tagged(x, "BAD", "QRESYNC takes (uidvalidity modseq [known-uids [(seqs uids)]])");
        return -1;
    }
    return 0;
}

void imap_cmd_select(struct imap_ctx *x)
{
    struct imap_session *s = x->s;
    char name[IMAP_MAILBOX_MAX + 1];
    int readonly = strcmp(x->cmd->name, "EXAMINE") == 0;
    size_t argc = imap_arg_count(x->cmd);
    struct imap_qresync *q = NULL;
    s->selected_ever = 1; /* RFC 6855 3: ENABLE UTF8=ACCEPT comes before any SELECT */
    if (argc < 1 || argc > 2) {
        imap_tagged(x, "BAD", "%s takes one mailbox name", x->cmd->name);
        return;
    }
    if (argc == 2 && imap_select_param(x, imap_arg(x->cmd, 1), &q) != 0) {
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        imap_qresync_free(&q);
        return;
    }
    if (argc == 2) {
        s->condstore = 1;
    }
    if (s->qresync && s->state == IMAP_SELECTED) {
        buf_str(x->out, "* OK [CLOSED] the previous mailbox is closed\r\n"); /* RFC 7162 3.2.11 */
    }
    imap_view_free(&s->view);
    s->state = IMAP_AUTH;
    int rc = imap_view_load(s, name, readonly);
    if (rc != MV_OK) {
        imap_qresync_free(&q);
        imap_tagged_store_error(x, rc, x->cmd->name);
        return;
    }
    struct imap_view *v = &s->view;
    size_t first_unseen = v->first_unseen; /* kept by the cached view: no walk here */
    imap_flags_announce(v, x->out);        /* with the mailbox's keywords (RFC 3501 7.2.6) */
    (void)imap_view_recent(s, 0);          /* this session's \Recent (RFC 3501 2.3.2) */
    buf_printf(x->out, "* %zu EXISTS\r\n* %zu RECENT\r\n", v->count, v->recent_count);
    if (first_unseen != 0) {
        buf_printf(x->out, "* OK [UNSEEN %zu] first unseen message\r\n", first_unseen);
    }
    buf_printf(x->out, "* OK [UIDVALIDITY %u] UIDs valid\r\n", v->uidvalidity);
    buf_printf(x->out, "* OK [UIDNEXT %u] predicted next UID\r\n", v->uidnext);
    buf_printf(x->out, "* OK [HIGHESTMODSEQ %llu] highest mod-sequence\r\n",
               (unsigned long long)v->highestmodseq);
    s->state = IMAP_SELECTED;
    if (q != NULL) {
        rc = imap_qresync_select(s, x->out, q);
        imap_qresync_free(&q);
        if (rc != MV_OK) { /* a NO leaves no mailbox selected (RFC 3501 6.3.1) */
            imap_view_free(&s->view);
            s->state = IMAP_AUTH;
            imap_tagged_store_error(x, rc, x->cmd->name);
            return;
        }
    }
    imap_tagged(x, "OK", "[%s] %s completed", readonly ? "READ-ONLY" : "READ-WRITE", x->cmd->name);
}

/* ---- DELETE / RENAME / SUBSCRIBE ---- */

void imap_cmd_delete(struct imap_ctx *x)
{
    char name[IMAP_MAILBOX_MAX + 1];
    if (imap_arg_count(x->cmd) != 1) {
        imap_tagged(x, "BAD", "DELETE takes one mailbox name");
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    if (strcmp(name, "INBOX") == 0) {
        imap_tagged(x, "NO", "[CANNOT] INBOX cannot be deleted");
        return;
    }
    int rc = mv_mailbox_delete(imap_store(x), name);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "DELETE");
        return;
    }
    imap_tagged(x, "OK", "DELETE completed");
}

void imap_cmd_rename(struct imap_ctx *x)
{
    char from[IMAP_MAILBOX_MAX + 1], to[IMAP_MAILBOX_MAX + 1];
    if (imap_arg_count(x->cmd) != 2) {
        imap_tagged(x, "BAD", "RENAME takes two mailbox names");
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), from, sizeof from) != 0 ||
        imap_mailbox_arg(x, imap_arg(x->cmd, 1), to, sizeof to) != 0) {
        return;
    }
    int rc = mv_mailbox_rename(imap_store(x), from, to);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "RENAME");
        return;
    }
    imap_tagged(x, "OK", "RENAME completed");
}

void imap_cmd_subscribe(struct imap_ctx *x, int on)
{
    char name[IMAP_MAILBOX_MAX + 1];
    if (imap_arg_count(x->cmd) != 1) {
        imap_tagged(x, "BAD", "%s takes one mailbox name", x->cmd->name);
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    int rc = mv_mailbox_subscribe(imap_store(x), name, on);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, x->cmd->name);
        return;
    }
    imap_tagged(x, "OK", "%s completed", x->cmd->name);
}

/* ---- LIST / LSUB (RFC 3501; LIST-EXTENDED RFC 5258, LIST-STATUS RFC 5819, RFC 6154) ---- */

/* '*' matches anything, '%' anything but the separator. One row of match states per name
 * byte (row[j]: the first j pattern bytes match the name so far), so a pattern such as
 * "*a*a*a*a*b" costs pattern x name steps rather than the exponential backtracking of a
 * recursive matcher; a row with no state left ends the walk early. */
static int imap_list_match(const char *pattern, const char *name)
{
    unsigned char rows[2][2 * IMAP_MAILBOX_MAX + 2];
    size_t m = strlen(pattern);
    if (m + 1 > sizeof rows[0]) {
        return 0; /* longer than any pattern imap_list_patterns() makes */
    }
    unsigned char *prev = rows[0], *cur = rows[1];
    prev[0] = 1;
    for (size_t j = 0; j < m; j++) {
        prev[j + 1] = prev[j] && (pattern[j] == '*' || pattern[j] == '%');
    }
    for (const char *c = name; *c != '\0'; c++) {
        int alive = 0;
        cur[0] = 0;
        for (size_t j = 0; j < m; j++) {
            if (pattern[j] == '*') {
                cur[j + 1] = cur[j] || prev[j + 1]; /* matches nothing more, or c too */
            } else if (pattern[j] == '%') {
                cur[j + 1] = cur[j] || (*c != '/' && prev[j + 1]);
            } else {
                cur[j + 1] = prev[j] && pattern[j] == *c;
            }
            alive |= cur[j + 1];
        }
        if (!alive) {
            return 0;
        }
        unsigned char *t = prev;
        prev = cur;
        cur = t;
    }
    return prev[m];
}

/* One name LIST may report: a mailbox, or a level above mailboxes that has no mailbox of its
 * own (its parent was deleted, or another process made "a/b" without "a"). */
struct imap_list_item {
    struct mv_mailbox_info info; /* name and special_use are malloc'd copies */
    int exists;
    int has_children;
    int selected;  /* exists and meets the selection options */
    int childinfo; /* a descendant is selected (RECURSIVEMATCH's CHILDINFO) */
};

struct imap_list_set {
    struct imap_list_item *items;
    size_t count;
    size_t cap;
};

static void imap_list_set_free(struct imap_list_set *set)
{
    for (size_t i = 0; i < set->count; i++) {
        free((char *)set->items[i].info.name);
        free((char *)set->items[i].info.special_use);
    }
    free(set->items);
    memset(set, 0, sizeof *set);
}

/* A new zeroed item owning name (taken even on failure); NULL when out of memory. */
static struct imap_list_item *imap_list_set_add(struct imap_list_set *set, char *name)
{
    if (name == NULL) {
        return NULL;
    }
    if (set->count == set->cap) {
        size_t cap = set->cap != 0 ? set->cap * 2 : 32;
        struct imap_list_item *grown = realloc(set->items, cap * sizeof *grown);
        if (grown == NULL) {
            free(name);
            return NULL;
        }
        set->items = grown;
        set->cap = cap;
    }
    struct imap_list_item *item = &set->items[set->count++];
    memset(item, 0, sizeof *item);
    item->info.name = name;
    return item;
}

/* By name; of equal names the mailbox comes first, then a subscription without a mailbox (the
 * others are dropped: a mailbox's row says whether it is subscribed). */
static int imap_list_compare(const void *a, const void *b)
{
    const struct imap_list_item *x = a, *y = b;
    int cmp = strcmp(x->info.name, y->info.name);
    if (cmp != 0) {
        return cmp;
    }
    return y->exists != x->exists ? y->exists - x->exists : y->info.subscribed - x->info.subscribed;
}

/* The index of the first len bytes of name in the sorted set, or SIZE_MAX. */
static size_t imap_list_find(const struct imap_list_set *set, const char *name, size_t len)
{
    size_t lo = 0, hi = set->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *other = set->items[mid].info.name;
        int cmp = strncmp(other, name, len);
        if (cmp == 0) {
            cmp = other[len] != '\0'; /* other is longer: it sorts after */
        }
        if (cmp == 0) {
            return mid;
        }
        if (cmp < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return SIZE_MAX;
}

/* The MV_MAILBOX_* fields STATUS items need beyond the mailbox's row: only DELETED and
 * DELETED-STORAGE (a read of the \Deleted messages through their index). The rest (stored
 * bytes, a walk of every message) no IMAP command reports. */
static unsigned imap_status_fields(unsigned items)
{
    return (items & (IMAP_STATUS_DELETED | IMAP_STATUS_DELETED_STORAGE)) != 0 ? MV_MAILBOX_DELETED
                                                                              : 0;
}

/* The names of the store a LIST needs: those it may report and those that say \HasChildren
 * of one it reports (issue 13: with 9,000 mailboxes, LIST "" "%" took 17-31 ms building,
 * sorting and marking every name and every level above one, where Dovecot takes 1 ms).
 *   - A name that does not begin with some pattern's head (its bytes before the first '*' or
 *     '%') cannot match it, nor can a level above it, and every descendant of a name that
 *     matches begins with the same head: such names are left out (INBOX and the names below
 *     it stay whatever the patterns say: INBOX matches in any case).
 *   - depth_max: with no '*' in any pattern (a '%' matches no '/') and no CHILDINFO wanted
 *     (RECURSIVEMATCH, LSUB's levels with subscribed names below), a name with more '/' than
 *     a pattern has cannot match, and one level below the deepest pattern says \HasChildren:
 *     names and levels deeper than that are left out (the levels above them are not).
 *   - from, below: when every pattern's head begins with the same bytes (not a beginning of
 *     "INBOX" in any case, which INBOX's rule would need), only the mailboxes from that
 *     head up to it with its last byte raised are read (mv_mailbox_list_begin_range, the
 *     names' index): LIST "" "Archive/2019/%" reads Archive/2019's descendants alone.
 * No filter (NULL): every name (CREATE's look for a special use). */
struct imap_list_filter {
    char *const *patterns;
    const size_t *heads; /* of each pattern */
    size_t count;
    size_t depth_max;  /* '/' in a name kept; SIZE_MAX: any */
    const char *from;  /* NULL: every mailbox is read */
    const char *below; /* with from */
};

/* Whether the first len bytes of name begin with a head of lf's patterns (or INBOX). */
static int imap_list_wanted(const struct imap_list_filter *lf, const char *name, size_t len)
{
    if (lf == NULL || (len >= 5 && strncasecmp(name, "INBOX", 5) == 0)) {
        return 1;
    }
    for (size_t i = 0; i < lf->count; i++) {
        if (lf->heads[i] <= len && memcmp(name, lf->patterns[i], lf->heads[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

/* name and the levels above it, as far as lf wants them: the levels into set, and the
 * return value whether name itself is wanted (0, 1, or -1 out of memory). prev: the name
 * given before in the same run of names in name order ("" at the start), whose levels are in
 * set already, so each level is added once per run rather than once per name below it (a
 * repeat is harmless: imap_list_read drops it after the sort). */
static int imap_list_levels(struct imap_list_set *set,
                            const struct imap_list_filter *lf,
                            const char *name,
                            const char *prev)
{
    size_t len = strlen(name);
    if (!imap_list_wanted(lf, name, len)) {
        return 0;
    }
    /* the level before the k-th '/' (from 0) has k of them, name has depth of them */
    size_t depth_max = lf != NULL ? lf->depth_max : SIZE_MAX, depth = 0;
    for (const char *slash = strchr(name, '/'); slash != NULL;
         slash = strchr(slash + 1, '/'), depth++) {
        if (depth > depth_max) {
            return 0;
        }
        size_t at = (size_t)(slash - name);
        if (strncmp(prev, name, at + 1) != 0 && imap_list_wanted(lf, name, at) &&
            imap_list_set_add(set, strndup(name, at)) == NULL) {
            return -1;
        }
    }
    return depth <= depth_max;
}

/* How far a name's descendants can matter to a LIST with a finite depth_max: the length of
 * name up to and including its depth_max-th '/', or 0 when it has fewer. Every name that
 * begins with those bytes is as deep as depth_max or deeper: none can match (no pattern has
 * a '*' or that many '/'), each level it adds is too deep to be listed, and the one level
 * that can be (the bytes before the last '/') has its \HasChildren from the first of them.
 * So once one such name is read, the rest are passed over (mv_mailbox_list_skip to the bytes
 * with the '/' raised to '0'): LIST "" "%" over 9,000 folders under a handful of top-level
 * ones reads a few names a folder, not every row (issue 13). The pass comes at the second
 * name below the cut, so a folder with one child costs no extra search. */
static size_t imap_list_cut(const char *name, size_t depth_max)
{
    if (depth_max == SIZE_MAX || depth_max == 0) {
        return 0;
    }
    size_t depth = 0;
    for (const char *slash = strchr(name, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        if (++depth == depth_max) {
            return (size_t)(slash - name) + 1;
        }
    }
    return 0;
}

/* A copy of name in *prev (grown as needed); 0 or -1 (out of memory). */
static int imap_list_prev(char **prev, size_t *cap, const char *name)
{
    size_t len = strlen(name);
    if (len + 1 > *cap) {
        char *grown = realloc(*prev, len + 1);
        if (grown == NULL) {
            return -1;
        }
        *prev = grown;
        *cap = len + 1;
    }
    memcpy(*prev, name, len + 1);
    return 0;
}

/* The subscribed names that are no mailbox (RFC 3501 6.3.9, RFC 5258 \NonExistent): items
 * with exists 0 and info.subscribed set, and their levels, as far as lf wants them. */
static int imap_list_read_subscriptions(mv_store *store,
                                        const struct imap_list_filter *lf,
                                        struct imap_list_set *set)
{
    char **names = NULL;
    size_t count = 0;
    int rc = mv_subscription_list(store, &names, &count);
    for (size_t i = 0; rc == MV_OK && i < count; i++) {
        int wanted = imap_list_levels(set, lf, names[i], i > 0 ? names[i - 1] : "");
        struct imap_list_item *item = wanted == 1 ? imap_list_set_add(set, strdup(names[i])) : NULL;
        if (wanted < 0 || (wanted == 1 && item == NULL)) {
            rc = MV_ENOMEM;
        } else if (item != NULL) {
            item->info.subscribed = 1;
        }
    }
    mv_free(names);
    return rc;
}

/* Every mailbox (with the MV_MAILBOX_* fields in fields), with subscriptions the subscribed
 * names that are no mailbox, and every level above one of them that has no mailbox, as far
 * as lf wants them (NULL: all); sorted by name, each name once. */
static int imap_list_read(mv_store *store,
                          unsigned fields,
                          int subscriptions,
                          const struct imap_list_filter *lf,
                          struct imap_list_set *set)
{
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info info;
    char *prev = NULL;
    size_t prev_cap = 0;
    int rc = imap_list_prev(&prev, &prev_cap, "") != 0 ? MV_ENOMEM
             : lf != NULL
                 ? mv_mailbox_list_begin_range(store, fields, lf->from != NULL ? lf->from : "",
                                               lf->from != NULL ? lf->below : NULL, &it)
                 : mv_mailbox_list_begin_fields(store, fields, &it);
    while (rc == MV_OK && (rc = mv_mailbox_list_next(it, &info)) == 1) {
        rc = MV_OK;
        int wanted = imap_list_levels(set, lf, info.name, prev);
        size_t cut = lf != NULL ? imap_list_cut(info.name, lf->depth_max) : 0;
        int pass = cut > 0 && strncmp(prev, info.name, cut) == 0;
        if (wanted < 0 || imap_list_prev(&prev, &prev_cap, info.name) != 0) {
            rc = MV_ENOMEM;
            break;
        }
        if (pass) { /* the second name below the cut: pass over the rest (prev is free now) */
            prev[cut - 1] = (char)('/' + 1);
            prev[cut] = '\0';
            if ((rc = mv_mailbox_list_skip(it, prev)) != MV_OK) {
                break;
            }
            prev[cut - 1] = '/'; /* prev still begins as the name, its levels in set */
        }
        if (wanted == 0) {
            continue;
        }
        struct imap_list_item *item = imap_list_set_add(set, strdup(info.name));
        if (item == NULL) {
            rc = MV_ENOMEM;
            break;
        }
        const char *name = item->info.name;
        item->info = info;
        item->info.name = name;
        item->info.special_use = info.special_use != NULL ? strdup(info.special_use) : NULL;
        item->exists = 1;
        if (info.special_use != NULL && item->info.special_use == NULL) {
            rc = MV_ENOMEM;
        }
    }
    mv_mailbox_list_end(&it);
    free(prev);
    if (rc == 0 && subscriptions) {
        rc = imap_list_read_subscriptions(store, lf, set);
    }
    if (rc != MV_OK && rc != 0) {
        imap_list_set_free(set);
        return rc;
    }
    if (set->count > 1) { /* (a range may hold no name: items is NULL then) */
        qsort(set->items, set->count, sizeof *set->items, imap_list_compare);
    }
    size_t kept = 0;
    for (size_t i = 0; i < set->count; i++) {
        if (kept > 0 && strcmp(set->items[kept - 1].info.name, set->items[i].info.name) == 0) {
            free((char *)set->items[i].info.name); /* a level seen before, or a mailbox's */
            continue;
        }
        set->items[kept++] = set->items[i];
    }
    set->count = kept;
    return MV_OK;
}

/* selected, has_children and childinfo of every item under the selection options. */
static void imap_list_mark(struct imap_list_set *set, unsigned select)
{
    for (size_t i = 0; i < set->count; i++) {
        struct imap_list_item *it = &set->items[i];
        /* A subscribed name without a mailbox is selected by SUBSCRIBED (RFC 5258 3.1). */
        it->selected =
            (it->exists || ((select & IMAP_LIST_SELECT_SUBSCRIBED) && it->info.subscribed)) &&
            ((select & IMAP_LIST_SELECT_SUBSCRIBED) == 0 || it->info.subscribed) &&
            ((select & IMAP_LIST_SELECT_SPECIAL_USE) == 0 || it->info.special_use != NULL);
    }
    for (size_t i = 0; i < set->count; i++) {
        const char *name = set->items[i].info.name;
        const char *last = strrchr(name, '/');
        if (last != NULL) { /* every level above a name is in the set */
            size_t parent = imap_list_find(set, name, (size_t)(last - name));
            if (parent != SIZE_MAX) {
                set->items[parent].has_children = 1;
            }
        }
        if (!set->items[i].selected) {
            continue;
        }
        /* Upwards, to the first level marked already: its levels above are marked too (each
         * is marked only on such a walk), so most names cost one search, not one a level. */
        for (size_t end = last != NULL ? (size_t)(last - name) : 0; end > 0;) {
            size_t above = imap_list_find(set, name, end);
            if (above != SIZE_MAX) {
                if (set->items[above].childinfo) {
                    break;
                }
                set->items[above].childinfo = 1;
            }
            while (end > 0 && name[--end] != '/') {
            }
        }
    }
}

/* "* STATUS name (...)" with the items asked for; HIGHESTMODSEQ enables CONDSTORE (RFC 7162
 * 3.1.11: STATUS HIGHESTMODSEQ is a CONDSTORE-enabling command). */
static void imap_status_out(struct imap_ctx *x, const struct mv_mailbox_info *info, unsigned items)
{
    struct buf line = {0};
    const char *sep = "";
    if (items & IMAP_STATUS_MESSAGES) {
        buf_printf(&line, "%sMESSAGES %u", sep, info->messages);
        sep = " ";
    }
    if (items & IMAP_STATUS_RECENT) { /* the messages no session has seen as recent yet */
        uint32_t first = 0, recent = 0;
        if (mv_mailbox_recent(imap_db(x->s), info->name, &first, &recent) != MV_OK) {
            recent = 0;
        }
        buf_printf(&line, "%sRECENT %u", sep, recent);
        sep = " ";
    }
    if (items & IMAP_STATUS_UIDNEXT) {
        buf_printf(&line, "%sUIDNEXT %u", sep, info->uidnext);
        sep = " ";
    }
    if (items & IMAP_STATUS_UIDVALIDITY) {
        buf_printf(&line, "%sUIDVALIDITY %u", sep, info->uidvalidity);
        sep = " ";
    }
    if (items & IMAP_STATUS_UNSEEN) {
        buf_printf(&line, "%sUNSEEN %u", sep, info->unseen);
        sep = " ";
    }
    if (items & IMAP_STATUS_HIGHESTMODSEQ) {
        buf_printf(&line, "%sHIGHESTMODSEQ %llu", sep, (unsigned long long)info->highestmodseq);
        sep = " ";
        x->s->condstore = 1;
    }
    if (items & IMAP_STATUS_DELETED) {
        buf_printf(&line, "%sDELETED %u", sep, info->deleted);
        sep = " ";
    }
    if (items & IMAP_STATUS_DELETED_STORAGE) {
        /* KiB rounded up, as STORAGE usage is (imap_cmd_quota.c): one \Deleted byte is
         * still something an EXPUNGE gives back. */
        buf_printf(&line, "%sDELETED-STORAGE %llu", sep,
                   (unsigned long long)((info->deleted_bytes + 1023) / 1024));
    }
    buf_str(x->out, "* STATUS ");
    imap_mailbox_out(x, info->name);
    buf_printf(x->out, " (%s)\r\n", line.data != NULL ? line.data : "");
    buf_free(&line);
}

/* Whether LIST reports the item for a pattern it matches. */
static int
imap_list_shows(const struct imap_list *l, const struct imap_list_item *it, int pct, int lsub)
{
    if (it->selected) {
        return 1;
    }
    if (lsub) { /* RFC 3501 6.3.9: "%" returns a level with subscribed names below as \Noselect */
        return pct && it->childinfo;
    }
    if ((l->select & IMAP_LIST_SELECT_RECURSIVEMATCH) && it->childinfo) {
        return 1; /* RFC 5258 3: returned with CHILDINFO for its descendants */
    }
    /* RFC 3501 6.3.8: a trailing '%' also returns matching levels that are not mailboxes. */
    return !it->exists && pct &&
           (l->select & (IMAP_LIST_SELECT_SUBSCRIBED | IMAP_LIST_SELECT_SPECIAL_USE)) == 0;
}

static void imap_list_line(struct imap_ctx *x,
                           const struct imap_list *l,
                           const struct imap_list_item *it,
                           int lsub)
{
    const struct mv_mailbox_info *info = &it->info;
    buf_printf(x->out, "* %s (", lsub ? "LSUB" : "LIST");
    if (lsub && (!it->exists || !it->selected)) {
        buf_str(x->out, "\\Noselect "); /* gone, or a level above subscribed names */
    } else if (!it->exists) {
        buf_str(x->out, l->extended ? "\\NonExistent " : "\\Noselect ");
    }
    buf_str(x->out, it->has_children ? "\\HasChildren" : "\\HasNoChildren");
    if (!lsub && info->subscribed &&
        ((l->select & IMAP_LIST_SELECT_SUBSCRIBED) || (l->ret & IMAP_LIST_RETURN_SUBSCRIBED))) {
        buf_str(x->out, " \\Subscribed");
    }
    if (info->special_use != NULL) { /* RFC 6154 allows them unasked; clients rely on it */
        buf_printf(x->out, " %s", info->special_use);
    }
    buf_str(x->out, ") \"/\" ");
    imap_mailbox_out(x, info->name);
    if ((l->select & IMAP_LIST_SELECT_RECURSIVEMATCH) && it->childinfo) {
        buf_str(x->out, " (\"CHILDINFO\" (");
        buf_str(x->out, (l->select & IMAP_LIST_SELECT_SUBSCRIBED) ? "\"SUBSCRIBED\"" : "");
        buf_str(x->out, (l->select & IMAP_LIST_SELECT_SUBSCRIBED) &&
                                (l->select & IMAP_LIST_SELECT_SPECIAL_USE)
                            ? " "
                            : "");
        buf_str(x->out, (l->select & IMAP_LIST_SELECT_SPECIAL_USE) ? "\"SPECIAL-USE\"" : "");
        buf_str(x->out, "))");
    }
    buf_str(x->out, "\r\n");
    if ((l->ret & IMAP_LIST_RETURN_STATUS) && it->exists) { /* RFC 5819: after its LIST */
        imap_status_out(x, info, l->status_items);
    }
}

/* The reference joined to pattern i, decoded to the store's UTF-8 (taken as it is, if valid,
 * once UTF8=ACCEPT is enabled), as a malloc'd string of its own length in out[i] (so a LIST
 * with thousands of patterns holds what they say, not a name's maximum each). 0, -1 (not
 * valid) or -2 (out of memory); out[i] is NULL on failure. */
static int imap_list_pattern(
    struct imap_ctx *x, const struct imap_list *l, const char *ref, size_t i, char **out)
{
    char pat[IMAP_MAILBOX_MAX + 1];
    char wire[2 * IMAP_MAILBOX_MAX + 2], decoded[2 * IMAP_MAILBOX_MAX + 2];
    const char *name = wire;
    out[i] = NULL;
    if (imap_astring(l->patterns[i], pat, sizeof pat) != 0) {
        return -1;
    }
    snprintf(wire, sizeof wire, "%s%s", ref, pat);
    if (x->s->utf8_accept) {
        if (!g_utf8_validate(wire, -1, NULL)) {
            return -1;
        }
    } else if (imap_utf7_decode(wire, strlen(wire), decoded, sizeof decoded) == 0) {
        name = decoded;
    } else {
        return -1;
    }
    size_t len = strlen(name);
    out[i] = malloc(len + 1);
    if (out[i] == NULL) {
        return -2;
    }
    memcpy(out[i], name, len + 1);
    return 0;
}

/* Every pattern of l through imap_list_pattern() into out[] (pattern_count slots). 0, or -1
 * with BAD (or NO for out of memory) written and nothing left allocated. */
static int imap_list_patterns(struct imap_ctx *x, const struct imap_list *l, char **out)
{
    char ref[IMAP_MAILBOX_MAX + 1];
    if (imap_astring(l->reference, ref, sizeof ref) != 0) {
        imap_tagged(x, "BAD", "bad reference name");
        return -1;
    }
    for (size_t i = 0; i < l->pattern_count; i++) {
        int rc = imap_list_pattern(x, l, ref, i, out);
        if (rc != 0) {
            for (size_t j = 0; j < i; j++) {
                free(out[j]);
            }
            if (rc == -2) {
                imap_tagged(x, "NO", "[SERVERBUG] out of memory");
            } else {
                imap_tagged(x, "BAD", "a pattern is not valid %s",
                            x->s->utf8_accept ? "UTF-8" : "modified UTF-7");
            }
            return -1;
        }
    }
    return 0;
}

static int imap_list_item_matches(const struct imap_list_item *it,
                                  char *const *patterns,
                                  size_t count,
                                  int *pct)
{
    int match = 0;
    *pct = 0;
    for (size_t i = 0; i < count; i++) {
        int m = imap_list_match(patterns[i], it->info.name);
        if (!m && strcmp(it->info.name, "INBOX") == 0) {
            m = strcasecmp(patterns[i], "INBOX") == 0; /* INBOX is case-insensitive */
        }
        size_t n = strlen(patterns[i]);
        *pct |= m && n > 0 && patterns[i][n - 1] == '%';
        match |= m;
    }
    return match;
}

/* LIST and LSUB once their arguments are read: l's patterns decoded (imap_list_patterns),
 * the mailboxes read and the matching ones listed. */
static void imap_list_answer(struct imap_ctx *x, const struct imap_list *l, int lsub)
{
    if (!lsub && l->pattern_count == 1 && l->patterns[0]->len == 0 && l->select == 0) {
        buf_str(x->out, "* LIST (\\Noselect) \"/\" \"\"\r\n"); /* the hierarchy separator */
        imap_tagged(x, "OK", "LIST completed");
        return;
    }
    /* One slot per pattern: as many as the command has (the node limit bounds them). */
    char **patterns = calloc(l->pattern_count, sizeof *patterns);
    if (patterns == NULL) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return;
    }
    if (imap_list_patterns(x, l, patterns) != 0) {
        free(patterns);
        return;
    }
    struct imap_list_set set = {0};
    unsigned fields = (l->ret & IMAP_LIST_RETURN_STATUS) ? imap_status_fields(l->status_items) : 0;
    size_t *heads = calloc(l->pattern_count, sizeof *heads);
    struct imap_list_filter lf = {patterns, heads, l->pattern_count, 0, NULL, NULL};
    int any_star = 0;
    size_t shared = SIZE_MAX; /* bytes every head begins with */
    for (size_t i = 0; heads != NULL && i < l->pattern_count; i++) {
        heads[i] = strcspn(patterns[i], "*%");
        size_t same = 0;
        while (i > 0 && same < heads[i] && same < shared &&
               patterns[i][same] == patterns[0][same]) {
            same++;
        }
        shared = i == 0 ? heads[0] : same;
        any_star |= strchr(patterns[i], '*') != NULL;
        size_t depth = 0;
        for (const char *c = patterns[i]; *c != '\0'; c++) {
            depth += *c == '/';
        }
        lf.depth_max = depth + 1 > lf.depth_max ? depth + 1 : lf.depth_max;
    }
    if (any_star || lsub || (l->select & IMAP_LIST_SELECT_RECURSIVEMATCH) != 0) {
        lf.depth_max = SIZE_MAX; /* (see imap_list_filter) */
    }
    char *from = NULL, *below = NULL;
    if (heads != NULL && shared > 0 && shared != SIZE_MAX &&
        strncasecmp(patterns[0], "INBOX", shared < 5 ? shared : 5) != 0 &&
        (unsigned char)patterns[0][shared - 1] < 0xff &&
        (from = strndup(patterns[0], shared)) != NULL &&
        (below = strndup(patterns[0], shared)) != NULL) {
        below[shared - 1] = (char)((unsigned char)below[shared - 1] + 1);
        lf.from = from; /* (out of memory: every mailbox is read, as before) */
        lf.below = below;
    }
    int rc = heads == NULL
                 ? MV_ENOMEM
                 : imap_list_read(imap_db(x->s), fields,
                                  (l->select & IMAP_LIST_SELECT_SUBSCRIBED) != 0, &lf, &set);
    free(heads);
    free(from);
    free(below);
    if (rc == MV_OK) {
        imap_list_mark(&set, l->select);
        for (size_t i = 0; i < set.count; i++) {
            int pct;
            if (imap_list_item_matches(&set.items[i], patterns, l->pattern_count, &pct) &&
                imap_list_shows(l, &set.items[i], pct, lsub)) {
                imap_list_line(x, l, &set.items[i], lsub);
            }
        }
    }
    imap_list_set_free(&set);
    for (size_t i = 0; i < l->pattern_count; i++) {
        free(patterns[i]);
    }
    free(patterns);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, x->cmd->name);
        return;
    }
    imap_tagged(x, "OK", "%s completed", x->cmd->name);
}

void imap_cmd_list(struct imap_ctx *x, int lsub)
{
    struct imap_list l;
    char err[160];
    int rc = imap_parse_list(x->cmd, &l, err, sizeof err);
    if (rc == -2) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return;
    }
    if (rc != 0 || (lsub && l.extended)) {
        imap_list_free(&l);
        imap_tagged(x, "BAD", "%s: %s", x->cmd->name,
                    lsub ? "takes a reference and a pattern" : err);
        return;
    }
    if (lsub) {
        l.select = IMAP_LIST_SELECT_SUBSCRIBED;
    }
    imap_list_answer(x, &l, lsub);
    imap_list_free(&l);
}

/* ---- CREATE (it reads the mailbox list for CREATE-SPECIAL-USE) ---- */

/* The special uses CREATE (USE ...) gives (RFC 6154). \All and \Flagged are left out: they
 * name virtual mailboxes (every message, the flagged ones) that the store does not make, so
 * a client asking for them is told NO [USEATTR] rather than handed an ordinary mailbox. */
static const char *const imap_create_uses[] = {"\\Archive", "\\Drafts", "\\Junk", "\\Sent",
                                               "\\Trash"};

/* The one special use CREATE's USE asks for (*use NULL for "USE ()"), in the store's
 * spelling. A store keeps one use per mailbox, and a use belongs to one mailbox (two \Sent
 * mailboxes would leave clients guessing). The check against the other mailboxes and the
 * create run on the user's one worker, so no session of this server can slip in between.
 * 0, or -1 with NO [USEATTR] (or a store error) written. */
static int imap_create_use(struct imap_ctx *x, const struct imap_create_params *p, const char **use)
{
    *use = NULL;
    if (p->use_count == 0) {
        return 0;
    }
    char asked[64];
    snprintf(asked, sizeof asked, "%.*s", (int)p->uses[0]->len, p->uses[0]->data);
    if (p->use_count > 1) {
        imap_tagged(x, "NO", "[USEATTR] a mailbox has one special use here");
        return -1;
    }
    for (size_t i = 0; i < sizeof imap_create_uses / sizeof imap_create_uses[0]; i++) {
        if (strcasecmp(asked, imap_create_uses[i]) == 0) {
            *use = imap_create_uses[i];
        }
    }
    if (*use == NULL) {
        imap_tagged(x, "NO", "[USEATTR] %s is not a special use this server gives", asked);
        return -1;
    }
    struct imap_list_set set = {0};
    int rc = imap_list_read(imap_store(x), 0, 0, NULL, &set);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "CREATE");
        return -1;
    }
    for (size_t i = 0; i < set.count; i++) {
        const struct mv_mailbox_info *info = &set.items[i].info;
        if (info->special_use != NULL && strcasecmp(info->special_use, *use) == 0) {
            imap_tagged(x, "NO", "[USEATTR] %s is already the special use of another mailbox",
                        *use);
            imap_list_set_free(&set);
            return -1;
        }
    }
    imap_list_set_free(&set);
    return 0;
}

/* CREATE name [(USE (\Sent))] (RFC 3501, RFC 4466 parameters, CREATE-SPECIAL-USE RFC 6154). */
void imap_cmd_create(struct imap_ctx *x)
{
    char name[IMAP_MAILBOX_MAX + 1], err[160];
    size_t argc = imap_arg_count(x->cmd);
    struct imap_create_params params = {0};
    if (argc != 1 && argc != 2) {
        imap_tagged(x, "BAD", "CREATE takes one mailbox name and optional parameters");
        return;
    }
    if (argc == 2 &&
        imap_parse_create_params(x->cmd, imap_arg(x->cmd, 1), &params, err, sizeof err) != 0) {
        imap_tagged(x, "BAD", "CREATE: %s", err);
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    size_t n = strlen(name);
    if (n > 1 && name[n - 1] == '/') {
        name[n - 1] = '\0'; /* "foo/" declares that foo will have children */
    }
    const char *use = NULL;
    if (imap_create_use(x, &params, &use) != 0) {
        return;
    }
    int rc = mv_mailbox_create(imap_store(x), name, use);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "CREATE");
        return;
    }
    imap_tagged(x, "OK", "CREATE completed");
}

/* ---- STATUS ---- */

void imap_cmd_status(struct imap_ctx *x)
{
    char name[IMAP_MAILBOX_MAX + 1], err[160];
    unsigned items;
    if (imap_arg_count(x->cmd) != 2) {
        imap_tagged(x, "BAD", "STATUS takes a mailbox and a list of items");
        return;
    }
    if (imap_parse_status_items(x->cmd, imap_arg(x->cmd, 1), &items, err, sizeof err) != 0) {
        imap_tagged(x, "BAD", "STATUS: %s", err);
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    struct mv_mailbox_info info;
    int rc = mv_mailbox_get_fields(imap_db(x->s), name, imap_status_fields(items), &info);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "STATUS");
        return;
    }
    info.name = name; /* as the client wrote it: "inbox" is answered as INBOX either way */
    imap_status_out(x, &info, items);
    if (x->s->state == IMAP_SELECTED) {
        (void)imap_view_sync(x->s, x->out, 1);
    }
    imap_tagged(x, "OK", "STATUS completed");
}

/* ---- APPEND ---- */

/* APPEND's message: the last argument, a string, or (RFC 6855 4) "UTF8 (~{n}...)", the
 * literal8 in a list after the atom UTF8, only once UTF8=ACCEPT is enabled. *taken: how many
 * arguments it spans (1 or 2). The node, or NULL with BAD written. */
static const struct imap_node *imap_append_data(struct imap_ctx *x, size_t argc, size_t *taken)
{
    const struct imap_node *msg = imap_arg(x->cmd, argc > 0 ? argc - 1 : 0);
    *taken = 1;
    if (msg != NULL && msg->type == IMAP_NODE_LIST && argc >= 3 &&
        imap_atom_is(imap_arg(x->cmd, argc - 2), "UTF8")) {
        if (!x->s->utf8_accept) {
            imap_tagged(x, "BAD", "APPEND UTF8 (...) needs ENABLE UTF8=ACCEPT first");
            return NULL;
        }
        const struct imap_node *lit = imap_node(x->cmd, msg->child);
        if (lit == NULL || !lit->literal8 || lit->next != IMAP_NODE_NONE) {
            imap_tagged(x, "BAD", "APPEND UTF8 takes one literal8: UTF8 (~{n}...)");
            return NULL;
        }
        *taken = 2;
        return lit;
    }
    if (argc < 2 || argc > 4 || msg->type != IMAP_NODE_STRING) {
        imap_tagged(x, "BAD", "APPEND takes a mailbox, optional flags and date, and a message");
        return NULL;
    }
    return msg;
}

static void imap_append_message(struct imap_ctx *x,
                                const char *name,
                                const struct imap_node *msg,
                                size_t taken,
                                char *keywords,
                                size_t keywords_size);

void imap_cmd_append(struct imap_ctx *x)
{
    char name[IMAP_MAILBOX_MAX + 1];
    size_t argc = imap_arg_count(x->cmd), taken;
    const struct imap_node *msg = imap_append_data(x, argc, &taken);
    if (msg == NULL) {
        return;
    }
    if (argc > 3 + taken) {
        imap_tagged(x, "BAD", "APPEND takes a mailbox, optional flags and date, and a message");
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    size_t keywords_size;
    char *keywords = imap_keywords_buf(x->cmd, &keywords_size);
    if (keywords == NULL) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return;
    }
    imap_append_message(x, name, msg, taken, keywords, keywords_size);
    free(keywords);
}

/* APPEND after its mailbox and buffers: flags, date, quota, the store, the answer. */
static void imap_append_message(struct imap_ctx *x,
                                const char *name,
                                const struct imap_node *msg,
                                size_t taken,
                                char *keywords,
                                size_t keywords_size)
{
    char err[160];
    size_t argc = imap_arg_count(x->cmd);
    unsigned flags = 0;
    int64_t date = 0;
    for (size_t i = 1; i + taken < argc; i++) {
        const struct imap_node *n = imap_arg(x->cmd, i);
        if (n->type == IMAP_NODE_LIST && i == 1) {
            if (imap_parse_flags(x->cmd, n, &flags, keywords, keywords_size, err, sizeof err) !=
                0) {
                imap_tagged(x, "BAD", "%s", err);
                return;
            }
        } else if (imap_parse_date_time(n, &date) != 0) {
            imap_tagged(x, "BAD", "bad date-time");
            return;
        }
    }
    if (msg->len == 0) {
        imap_tagged(x, "NO", "[CANNOT] an empty message");
        return;
    }
    struct mv_mailbox_info target;
    int over = quota_exceeded(x->s->store, worker_config(x->s->worker), x->s->user, msg->len, 1);
    if (over != 0 && mv_mailbox_status(imap_db(x->s), name, &target) == MV_OK) {
        /* (a missing mailbox falls through to TRYCREATE below) */
        imap_tagged(x, "NO", "[OVERQUOTA] the message would exceed your %s quota",
                    quota_over_text(over));
        return;
    }
    uint32_t uid = 0;
    int rc = mv_message_append(imap_db(x->s), name, msg->data, msg->len, flags, keywords,
                               date > 0 ? date : 0, &uid);
    if (rc == MV_ENOTFOUND) {
        imap_tagged(x, "NO", "[TRYCREATE] no mailbox \"%s\"", name);
        return;
    }
    if (rc == MV_ELIMIT && !mv_store_errmsg_internal(imap_db(x->s))) {
        imap_tagged(x, "NO", "[%s] %s",
                    strstr(mv_store_errmsg(imap_db(x->s)), "keyword") != NULL ? "LIMIT" : "TOOBIG",
                    mv_store_errmsg(imap_db(x->s)));
        return;
    }
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "APPEND");
        return;
    }
    worker_backlog_added(x->s->store);
    if (x->s->state == IMAP_SELECTED) {
        (void)imap_view_sync(x->s, x->out, 1);
        if (x->s->condstore && x->s->view.mailbox != NULL &&
            strcmp(x->s->view.mailbox, name) == 0) {
            /* As Dovecot: the client learns the modseq its append made (RFC 7162 3.1.2.1) */
            buf_printf(x->out, "* OK [HIGHESTMODSEQ %llu] highest mod-sequence\r\n",
                       (unsigned long long)x->s->view.highestmodseq);
        }
    }
    struct mv_mailbox_info info;
    char done[sizeof x->sync_ok];
    if (mv_mailbox_status(imap_db(x->s), name, &info) == MV_OK) {
        snprintf(done, sizeof done, "[APPENDUID %u %u] APPEND completed", info.uidvalidity, uid);
    } else {
        snprintf(done, sizeof done, "APPEND completed");
    }
    if (mv_store_sync_owed(imap_db(x->s))) { /* acknowledged once durable: SYNC APART */
        memcpy(x->sync_ok, done, sizeof done);
        x->sync_owed = 1;
    } else {
        imap_tagged(x, "OK", "%s", done);
    }
}
