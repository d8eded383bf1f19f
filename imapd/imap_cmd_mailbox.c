/*
 * imap_cmd_mailbox.c -- commands on mailboxes: SELECT, EXAMINE, CREATE, DELETE, RENAME,
 * SUBSCRIBE, UNSUBSCRIBE, LIST, LSUB, STATUS, APPEND. Names travel in modified UTF-7 on the
 * wire and in UTF-8 in the store; '/' is the hierarchy separator.
 */
#include "imap_session.h"

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
    if (imap_utf7_decode(wire, strlen(wire), out, out_size) != 0) {
        imap_tagged(x, "BAD", "mailbox name is not valid modified UTF-7");
        return -1;
    }
    return 0;
}

void imap_mailbox_out(struct buf *out, const char *name)
{
    char wire[IMAP_MAILBOX_MAX * 3 + 8];
    if (imap_utf7_encode(name, wire, sizeof wire) != 0) {
        buf_str(out, "\"\"");
        return;
    }
    buf_imap_string(out, wire, strlen(wire));
}

static mv_store *imap_store(struct imap_ctx *x)
{
    return x->s->store->store;
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
    if (argc < 1 || argc > 2) {
        imap_tagged(x, "BAD", "%s takes one mailbox name", x->cmd->name);
        return;
    }
    if (argc == 2 && imap_select_param(x, imap_arg(x->cmd, 1), &q) != 0) {
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        free(q);
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
        free(q);
        imap_tagged_store_error(x, rc, x->cmd->name);
        return;
    }
    struct imap_view *v = &s->view;
    size_t first_unseen = 0;
    for (size_t i = 0; i < v->count && first_unseen == 0; i++) {
        if ((v->msgs[i].flags & MV_FLAG_SEEN) == 0) {
            first_unseen = i + 1;
        }
    }
    buf_str(x->out, "* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)\r\n");
    buf_printf(x->out, "* OK [PERMANENTFLAGS (%s)] flags that stay\r\n",
               readonly ? "" : "\\Answered \\Flagged \\Deleted \\Seen \\Draft \\*");
    buf_printf(x->out, "* %zu EXISTS\r\n* 0 RECENT\r\n", v->count);
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
        free(q);
        if (rc != MV_OK) {
            imap_tagged_store_error(x, rc, x->cmd->name);
            return;
        }
    }
    imap_tagged(x, "OK", "[%s] %s completed", readonly ? "READ-ONLY" : "READ-WRITE", x->cmd->name);
}

/* ---- CREATE / DELETE / RENAME / SUBSCRIBE ---- */

void imap_cmd_create(struct imap_ctx *x)
{
    char name[IMAP_MAILBOX_MAX + 1];
    if (imap_arg_count(x->cmd) != 1) {
        imap_tagged(x, "BAD", "CREATE takes one mailbox name");
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    size_t n = strlen(name);
    if (n > 1 && name[n - 1] == '/') {
        name[n - 1] = '\0'; /* "foo/" declares that foo will have children */
    }
    int rc = mv_mailbox_create(imap_store(x), name, NULL);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "CREATE");
        return;
    }
    imap_tagged(x, "OK", "CREATE completed");
}

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

/* ---- LIST / LSUB ---- */

/* '*' matches anything, '%' anything but the separator. */
static int imap_list_match(const char *pattern, const char *name)
{
    if (*pattern == '\0') {
        return *name == '\0';
    }
    if (*pattern == '*' || *pattern == '%') {
        for (const char *p = name;; p++) {
            if (imap_list_match(pattern + 1, p)) {
                return 1;
            }
            if (*p == '\0' || (*pattern == '%' && *p == '/')) {
                return 0;
            }
        }
    }
    return *name == *pattern && imap_list_match(pattern + 1, name + 1);
}

struct imap_list_item {
    char *name;
    char *special_use;
    int subscribed;
};

static int imap_list_compare(const void *a, const void *b)
{
    return strcmp(((const struct imap_list_item *)a)->name,
                  ((const struct imap_list_item *)b)->name);
}

static int
imap_list_has_children(const struct imap_list_item *items, size_t count, const char *name)
{
    size_t n = strlen(name);
    size_t lo = 0, hi = count;
    while (lo < hi) { /* the first name > name + "/" prefix start */
        size_t mid = lo + (hi - lo) / 2;
        int cmp = strncmp(items[mid].name, name, n);
        if (cmp < 0 || (cmp == 0 && (unsigned char)items[mid].name[n] < '/')) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < count && strncmp(items[lo].name, name, n) == 0 && items[lo].name[n] == '/';
}

static int imap_list_read(mv_store *store, struct imap_list_item **items_out, size_t *count_out)
{
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info info;
    struct imap_list_item *items = NULL;
    size_t count = 0, cap = 0;
    int rc = mv_mailbox_list_begin(store, &it);
    while (rc == MV_OK && (rc = mv_mailbox_list_next(it, &info)) == 1) {
        rc = MV_OK;
        if (count == cap) {
            cap = cap != 0 ? cap * 2 : 32;
            struct imap_list_item *grown = realloc(items, cap * sizeof *items);
            if (grown == NULL) {
                rc = MV_ENOMEM;
                break;
            }
            items = grown;
        }
        struct imap_list_item *item = &items[count];
        item->name = strdup(info.name);
        item->special_use = info.special_use != NULL ? strdup(info.special_use) : NULL;
        item->subscribed = info.subscribed;
        count++;
        if (item->name == NULL || (info.special_use != NULL && item->special_use == NULL)) {
            rc = MV_ENOMEM;
        }
    }
    mv_mailbox_list_end(&it);
    if (rc == MV_OK || rc == 0) {
        qsort(items, count, sizeof *items, imap_list_compare);
        *items_out = items;
        *count_out = count;
        return MV_OK;
    }
    for (size_t i = 0; i < count; i++) {
        free(items[i].name);
        free(items[i].special_use);
    }
    free(items);
    return rc;
}

void imap_cmd_list(struct imap_ctx *x, int lsub)
{
    char ref[IMAP_MAILBOX_MAX + 1], pat[IMAP_MAILBOX_MAX + 1];
    char wire[2 * IMAP_MAILBOX_MAX + 2], pattern[2 * IMAP_MAILBOX_MAX + 2];
    if (imap_arg_count(x->cmd) != 2 || imap_astring(imap_arg(x->cmd, 0), ref, sizeof ref) != 0 ||
        imap_astring(imap_arg(x->cmd, 1), pat, sizeof pat) != 0) {
        imap_tagged(x, "BAD", "%s takes a reference and a pattern", x->cmd->name);
        return;
    }
    if (pat[0] == '\0' && !lsub) {
        buf_str(x->out, "* LIST (\\Noselect) \"/\" \"\"\r\n");
        imap_tagged(x, "OK", "LIST completed");
        return;
    }
    snprintf(wire, sizeof wire, "%s%s", ref, pat);
    if (imap_utf7_decode(wire, strlen(wire), pattern, sizeof pattern) != 0) {
        imap_tagged(x, "BAD", "pattern is not valid modified UTF-7");
        return;
    }
    struct imap_list_item *items = NULL;
    size_t count = 0;
    int rc = imap_list_read(x->s->store->store, &items, &count);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, x->cmd->name);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const struct imap_list_item *item = &items[i];
        int inbox = strcmp(item->name, "INBOX") == 0;
        int match = imap_list_match(pattern, item->name);
        if (!match && inbox) {
            match = strcasecmp(pattern, "INBOX") == 0; /* INBOX is case-insensitive */
        }
        if (!match || (lsub && !item->subscribed)) {
            continue;
        }
        buf_printf(x->out, "* %s (%s", lsub ? "LSUB" : "LIST",
                   imap_list_has_children(items, count, item->name) ? "\\HasChildren"
                                                                    : "\\HasNoChildren");
        if (item->special_use != NULL) {
            buf_printf(x->out, " %s", item->special_use);
        }
        buf_str(x->out, ") \"/\" ");
        imap_mailbox_out(x->out, item->name);
        buf_str(x->out, "\r\n");
    }
    for (size_t i = 0; i < count; i++) {
        free(items[i].name);
        free(items[i].special_use);
    }
    free(items);
    imap_tagged(x, "OK", "%s completed", x->cmd->name);
}

/* ---- STATUS ---- */

void imap_cmd_status(struct imap_ctx *x)
{
    char name[IMAP_MAILBOX_MAX + 1];
    const struct imap_node *items = imap_arg(x->cmd, 1);
    if (imap_arg_count(x->cmd) != 2 || items->type != IMAP_NODE_LIST ||
        items->child == IMAP_NODE_NONE) {
        imap_tagged(x, "BAD", "STATUS takes a mailbox and a list of items");
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    struct mv_mailbox_info info;
    int rc = mv_mailbox_status(x->s->store->store, name, &info);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "STATUS");
        return;
    }
    struct buf line = {0};
    for (uint32_t i = items->child; i != IMAP_NODE_NONE; i = x->cmd->nodes[i].next) {
        const struct imap_node *n = &x->cmd->nodes[i];
        const char *sep = line.len != 0 ? " " : "";
        if (imap_atom_is(n, "MESSAGES")) {
            buf_printf(&line, "%sMESSAGES %u", sep, info.messages);
        } else if (imap_atom_is(n, "RECENT")) {
            buf_printf(&line, "%sRECENT 0", sep);
        } else if (imap_atom_is(n, "UIDNEXT")) {
            buf_printf(&line, "%sUIDNEXT %u", sep, info.uidnext);
        } else if (imap_atom_is(n, "UIDVALIDITY")) {
            buf_printf(&line, "%sUIDVALIDITY %u", sep, info.uidvalidity);
        } else if (imap_atom_is(n, "UNSEEN")) {
            buf_printf(&line, "%sUNSEEN %u", sep, info.unseen);
        } else if (imap_atom_is(n, "HIGHESTMODSEQ")) {
            buf_printf(&line, "%sHIGHESTMODSEQ %llu", sep, (unsigned long long)info.highestmodseq);
            x->s->condstore = 1;
        } else {
            buf_free(&line);
            imap_tagged(x, "BAD", "unknown STATUS item");
            return;
        }
    }
    buf_str(x->out, "* STATUS ");
    imap_mailbox_out(x->out, name);
    buf_printf(x->out, " (%s)\r\n", line.data != NULL ? line.data : "");
    buf_free(&line);
    if (x->s->state == IMAP_SELECTED) {
        (void)imap_view_sync(x->s, x->out, 1);
    }
    imap_tagged(x, "OK", "STATUS completed");
}

/* ---- APPEND ---- */

void imap_cmd_append(struct imap_ctx *x)
{
    char name[IMAP_MAILBOX_MAX + 1], keywords[4096], err[160];
    size_t argc = imap_arg_count(x->cmd);
    const struct imap_node *msg = imap_arg(x->cmd, argc > 0 ? argc - 1 : 0);
    unsigned flags = 0;
    int64_t date = 0;
    keywords[0] = '\0';
    if (argc < 2 || argc > 4 || msg->type != IMAP_NODE_STRING) {
        imap_tagged(x, "BAD", "APPEND takes a mailbox, optional flags and date, and a message");
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    for (size_t i = 1; i + 1 < argc; i++) {
        const struct imap_node *n = imap_arg(x->cmd, i);
        if (n->type == IMAP_NODE_LIST && i == 1) {
            if (imap_parse_flags(x->cmd, n, &flags, keywords, sizeof keywords, err, sizeof err) !=
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
    if (quota_exceeded(x->s->store->store, worker_config(x->s->worker), msg->len) &&
        mv_mailbox_status(x->s->store->store, name, &target) == MV_OK) {
        /* (a missing mailbox falls through to TRYCREATE below) */
        imap_tagged(x, "NO", "[OVERQUOTA] the message would exceed your storage quota");
        return;
    }
    uint32_t uid = 0;
    int rc = mv_message_append(x->s->store->store, name, msg->data, msg->len, flags, keywords,
                               date > 0 ? date : 0, &uid);
    if (rc == MV_ENOTFOUND) {
        imap_tagged(x, "NO", "[TRYCREATE] no mailbox \"%s\"", name);
        return;
    }
    if (rc == MV_ELIMIT) {
        imap_tagged(x, "NO", "[TOOBIG] %s", mv_store_errmsg(x->s->store->store));
        return;
    }
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "APPEND");
        return;
    }
    if (x->s->state == IMAP_SELECTED) {
        (void)imap_view_sync(x->s, x->out, 1);
    }
    struct mv_mailbox_info info;
    if (mv_mailbox_status(x->s->store->store, name, &info) == MV_OK) {
        imap_tagged(x, "OK", "[APPENDUID %u %u] APPEND completed", info.uidvalidity, uid);
    } else {
        imap_tagged(x, "OK", "APPEND completed");
    }
}
