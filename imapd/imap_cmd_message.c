/*
 * imap_cmd_message.c -- commands on the selected mailbox's messages: STORE (with CONDSTORE's
 * UNCHANGEDSINCE), COPY and MOVE (with UIDPLUS's COPYUID), EXPUNGE and UID EXPUNGE, CLOSE,
 * UNSELECT, IDLE, and their UID forms. Sequence numbers are turned into UIDs through the
 * session's view; the store works on UID sets.
 */
#include "buf.h"
#include "imap_session.h"
#include "mailvault.h"
#include "quota.h"
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Reads the set argument and resolves it. 0, or -1 with a response written. */
static int
imap_set_arg(struct imap_ctx *x, const struct imap_node *n, uint32_t **idx, size_t *count)
{
    struct imap_seqset *set = malloc(sizeof *set);
    if (set == NULL) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return -1;
    }
    int parsed =
        n != NULL && n->type == IMAP_NODE_ATOM ? imap_parse_seqset(n->data, n->len, set) : -1;
    if (parsed != 0) {
        free(set);
        if (parsed == -2) {
            imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        } else {
            imap_tagged(x, "BAD", "bad sequence set");
        }
        return -1;
    }
    int rc = imap_view_resolve(&x->s->view, set, x->cmd->uid, idx, count);
    imap_seqset_free(set);
    free(set);
    if (rc == -1) {
        imap_tagged(x, "BAD", "no such message sequence number");
        return -1;
    }
    if (rc != 0) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return -1;
    }
    return 0;
}

/* Drops messages the view knows are expunged. */
static void imap_drop_expunged(const struct imap_view *v, uint32_t *idx, size_t *count)
{
    size_t k = 0;
    for (size_t i = 0; i < *count; i++) {
        if ((imap_view_marks(v, idx[i]) & IMAP_MARK_EXPUNGED) == 0) {
            idx[k++] = idx[i];
        }
    }
    *count = k;
}

static int imap_store_mode(const struct imap_node *item, int *mode, int *silent)
{
    if (item == NULL || item->type != IMAP_NODE_ATOM) {
        return -1;
    }
    const char *p = item->data;
    size_t len = item->len;
    *mode = MV_FLAGS_REPLACE;
    if (len > 0 && (p[0] == '+' || p[0] == '-')) {
        *mode = p[0] == '+' ? MV_FLAGS_ADD : MV_FLAGS_REMOVE;
        p++;
        len--;
    }
    *silent = len == 12 && strncasecmp(p, "FLAGS.SILENT", 12) == 0;
    return *silent || (len == 5 && strncasecmp(p, "FLAGS", 5) == 0) ? 0 : -1;
}

/* UNCHANGEDSINCE: drops from idx the messages the store refused (failed, ascending UIDs,
 * as mv_flags_set_unchanged_since returned them) and lists them in modified, as sequence
 * numbers or UIDs (RFC 7162 3.1.3). idx ascends by UID too: one merge pass. */
static int imap_store_modified(struct imap_ctx *x,
                               const uint32_t *failed,
                               size_t failed_count,
                               uint32_t *idx,
                               size_t *count,
                               struct buf *modified)
{
    const struct imap_view *v = &x->s->view;
    size_t kept = 0, f = 0;
    for (size_t i = 0; i < *count; i++) {
        uint32_t uid = imap_view_msg(v, idx[i])->uid;
        while (f < failed_count && failed[f] < uid) {
            f++;
        }
        if (f < failed_count && failed[f] == uid) {
            buf_printf(modified, "%s%u", modified->len != 0 ? "," : "",
                       x->cmd->uid ? uid : idx[i] + 1);
        } else {
            idx[kept++] = idx[i];
        }
    }
    *count = kept;
    return modified->oom ? MV_ENOMEM : MV_OK;
}

char *imap_keywords_buf(const struct imap_command *cmd, size_t *size)
{
    size_t n = 1;
    for (size_t i = 0; i < cmd->node_count; i++) {
        n += cmd->nodes[i].len + 1; /* every keyword and the space after it */
    }
    *size = n;
    char *b = malloc(n);
    if (b != NULL) {
        b[0] = '\0';
    }
    return b;
}

/* The flags of STORE's arguments from base + 1 on (one list, or several flags) into *flags
 * and keywords (keywords_size bytes, imap_keywords_buf: room for every keyword the command
 * holds, so nothing is cut; the store applies its own limits and names them). 0, or -1 with
 * BAD written. */
static int imap_store_flags(
    struct imap_ctx *x, size_t base, unsigned *flags, char *keywords, size_t keywords_size)
{
    char err[160];
    size_t argc = imap_arg_count(x->cmd);
    for (size_t i = base + 1; i < argc; i++) {
        unsigned f = 0;
        const struct imap_node *n = imap_arg(x->cmd, i);
        int several = argc > base + 2;
        size_t at = strlen(keywords), start = at > 0 ? at + 1 : 0; /* after a space */
        if ((several && n->type == IMAP_NODE_LIST) ||
            imap_parse_flags(x->cmd, n, &f, keywords + start, keywords_size - start, err,
                             sizeof err) != 0) {
            imap_tagged(x, "BAD", "%s", several && n->type == IMAP_NODE_LIST ? "bad flags" : err);
            return -1;
        }
        *flags |= f;
        if (at > 0 && keywords[start] != '\0') {
            keywords[at] = ' ';
        }
    }
    return 0;
}

/* After a STORE in a CONDSTORE session (RFC 7162 3.1.3): an untagged FETCH with MODSEQ for
 * every message the STORE applied to, even with .SILENT (then without FLAGS), so the client
 * learns the mod-sequence of its own change. */
static void imap_store_report(struct imap_ctx *x, const uint32_t *uids, size_t count, int silent)
{
    struct imap_view *v = &x->s->view;
    if (silent && !x->s->condstore) {
        return; /* nothing to say of any of them */
    }
    for (size_t i = 0, k = 0; i < count; i++) {
        /* uids ascend: each search starts where the last ended and gallops, so a dense set
         * costs a step a UID and a sparse one a few, not a walk from message 1 */
        k = imap_view_find_uid_from(v, k, uids[i]);
        if (k == v->count || imap_view_msg(v, k)->uid != uids[i] ||
            (imap_view_marks(v, k) & IMAP_MARK_EXPUNGED) != 0) {
            continue;
        }
        if (!silent && (imap_view_marks(v, k) & (IMAP_MARK_REPORTED | IMAP_MARK_QUIET)) == 0) {
            imap_fetch_flags_line(x->out, v, k, x->s->condstore);
        } else if (silent && x->s->condstore) {
            buf_printf(x->out, "* %zu FETCH (UID %u MODSEQ (%llu))\r\n", k + 1, uids[i],
                       (unsigned long long)imap_view_msg(v, k)->modseq);
        }
    }
}

void imap_cmd_store(struct imap_ctx *x)
{
    struct imap_view *v = &x->s->view;
    unsigned flags = 0;
    int mode, silent;
    size_t argc = imap_arg_count(x->cmd), base = 1;
    uint64_t unchanged_since = UINT64_MAX; /* CONDSTORE: (UNCHANGEDSINCE n) */
    const struct imap_node *mod = imap_arg(x->cmd, 1);
    if (mod != NULL && mod->type == IMAP_NODE_LIST) {
        const struct imap_node *name = imap_node(x->cmd, mod->child);
        const struct imap_node *value = name != NULL ? imap_node(x->cmd, name->next) : NULL;
        if (!imap_atom_is(name, "UNCHANGEDSINCE") || value == NULL ||
            value->next != IMAP_NODE_NONE || imap_number(value, INT64_MAX, &unchanged_since) != 0) {
            imap_tagged(x, "BAD", "the only STORE modifier is (UNCHANGEDSINCE mod-sequence)");
            return;
        }
        x->s->condstore = 1;
        base = 2;
    }
    if (argc < base + 2 || imap_store_mode(imap_arg(x->cmd, base), &mode, &silent) != 0) {
        imap_tagged(x, "BAD", "STORE takes a set, FLAGS, +FLAGS or -FLAGS (.SILENT) and flags");
        return;
    }
    size_t keywords_size;
    char *keywords = imap_keywords_buf(x->cmd, &keywords_size);
    if (keywords == NULL) {
        imap_tagged(x, "NO", "[SERVERBUG] out of memory");
        return;
    }
    if (imap_store_flags(x, base, &flags, keywords, keywords_size) != 0) {
        free(keywords);
        return;
    }
    if (v->readonly) {
        free(keywords);
        imap_tagged(x, "NO", "[READ-ONLY] the mailbox is open read-only");
        return;
    }
    uint32_t *idx = NULL;
    size_t count = 0;
    if (imap_set_arg(x, imap_arg(x->cmd, 0), &idx, &count) != 0) {
        free(keywords);
        return;
    }
    imap_drop_expunged(v, idx, &count);
    struct buf modified = {0};
    uint32_t *failed = NULL, changed = 0;
    size_t failed_count = 0;
    int own_known = 0;
    /* Typed ranges, never text: the set's size was limited where the client wrote it. */
    struct mv_uid_range *ranges = NULL;
    size_t nranges = 0;
    int rc = imap_view_uid_ranges(v, idx, count, &ranges, &nranges) == 0 ? MV_OK : MV_ENOMEM;
    if (rc == MV_OK && count > 0 && unchanged_since != UINT64_MAX) {
        /* The test and the change in one store transaction: no other session or process
         * can change a message in between (RFC 7162 3.1.3). */
        rc = mv_flags_set_ranges(imap_db(x->s), v->mailbox, ranges, nranges, mode, flags, keywords,
                                 unchanged_since, NULL, &failed, &failed_count);
        if (rc == MV_OK) {
            rc = imap_store_modified(x, failed, failed_count, idx, &count, &modified);
        }
    } else if (rc == MV_OK && count > 0) {
        rc = mv_flags_set_ranges(imap_db(x->s), v->mailbox, ranges, nranges, mode, flags, keywords,
                                 MV_UNCHANGEDSINCE_NONE, &changed, NULL, NULL);
        /* Flags alone, added or removed: the view can apply the change itself. */
        own_known = mode != MV_FLAGS_REPLACE && keywords[0] == '\0';
    }
    mv_free(failed);
    free(ranges);
    free(keywords);
    if (rc != MV_OK) {
        free(idx);
        buf_free(&modified);
        imap_tagged_store_error(x, rc, "STORE");
        return;
    }
    /* Our own changes come back through the sync; .SILENT keeps them quiet there. */
    imap_view_reported_clear(v);
    uint32_t *uids = malloc((count + 1) * sizeof *uids);
    for (size_t i = 0; uids != NULL && i < count; i++) {
        uids[i] = imap_view_msg(v, idx[i])->uid;
        if (silent) {
            imap_view_mark(v, idx[i], IMAP_MARK_QUIET);
            v->reported_any = 1;
        }
    }
    struct imap_own_flags own = {
        .idx = idx, .count = count, .mode = mode, .flags = flags, .changed = changed};
    (void)imap_view_sync_own(x->s, x->out, x->cmd->uid, own_known ? &own : NULL);
    if (uids != NULL) {
        imap_store_report(x, uids, count, silent);
    }
    imap_view_reported_clear(v);
    free(uids);
    free(idx);
    if (modified.len > 0) {
        imap_tagged(x, "OK", "[MODIFIED %s] conditional STORE failed for some messages",
                    modified.data);
    } else {
        imap_tagged(x, "OK", "STORE completed");
    }
    buf_free(&modified);
}

/* A UID set from every stride-th value of vals (ascending runs collapse to "a:b"). */
static void imap_uid_list(struct buf *out, const uint32_t *vals, size_t stride, size_t count)
{
    for (size_t i = 0; i < count;) {
        uint32_t first = vals[i * stride], last = first;
        size_t k = i + 1;
        while (k < count && vals[k * stride] == last + 1) {
            last = vals[k++ * stride];
        }
        buf_printf(out, i == 0 ? "%u" : ",%u", first);
        if (last != first) {
            buf_printf(out, ":%u", last);
        }
        i = k;
    }
}

/* COPY and MOVE (move set): the store copies by UID and reports the new UIDs (COPYUID). */
static void imap_transfer(struct imap_ctx *x, int move)
{
    struct imap_view *v = &x->s->view;
    char target[IMAP_MAILBOX_MAX + 1];
    if (imap_arg_count(x->cmd) != 2) {
        imap_tagged(x, "BAD", "%s takes a set and a mailbox", x->cmd->name);
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 1), target, sizeof target) != 0) {
        return;
    }
    if (move && v->readonly) {
        imap_tagged(x, "NO", "[READ-ONLY] the mailbox is open read-only");
        return;
    }
    struct mv_mailbox_info info;
    int rc = mv_mailbox_status(imap_db(x->s), target, &info);
    if (rc != MV_OK) {
        imap_tagged(x, "NO",
                    rc == MV_ENOTFOUND ? "[TRYCREATE] no mailbox \"%s\""
                                       : "[SERVERBUG] cannot read mailbox \"%s\"",
                    target);
        return;
    }
    uint32_t validity = info.uidvalidity;
    uint32_t *idx = NULL, *pairs = NULL, count = 0;
    size_t n = 0;
    if (imap_set_arg(x, imap_arg(x->cmd, 0), &idx, &n) != 0) {
        return;
    }
    imap_drop_expunged(v, idx, &n);
    uint64_t copy_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        copy_bytes += imap_view_msg(v, idx[i])->size;
    }
    int over = move || n == 0 ? 0
                              : quota_exceeded(x->s->store, worker_config(x->s->worker), x->s->user,
                                               copy_bytes, n);
    if (over != 0) { /* MOVE never grows the usage */
        free(idx);
        imap_tagged(x, "NO", "[OVERQUOTA] the copy would exceed your %s quota",
                    quota_over_text(over));
        return;
    }
    struct mv_uid_range *ranges = NULL;
    size_t nranges = 0;
    rc = imap_view_uid_ranges(v, idx, n, &ranges, &nranges) == 0 ? MV_OK : MV_ENOMEM;
    free(idx);
    if (rc == MV_OK && n > 0) {
        rc = mv_message_copy_ranges(imap_db(x->s), v->mailbox, ranges, nranges, target, move,
                                    &pairs, &count);
    }
    free(ranges);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, x->cmd->name);
        return;
    }
    struct buf code = {0};
    if (count > 0) {
        buf_printf(&code, "[COPYUID %u ", validity);
        imap_uid_list(&code, pairs, 2, count);
        buf_str(&code, " ");
        imap_uid_list(&code, pairs + 1, 2, count);
        buf_str(&code, "] ");
    }
    mv_free(pairs);
    if (move && code.len > 0) { /* RFC 6851: before the EXPUNGEs; resp-text needs text */
        buf_printf(x->out, "* OK %smoved\r\n", code.data);
    }
    (void)imap_view_sync(x->s, x->out, 1);
    imap_tagged(x, "OK", "%s%s completed", !move && code.data != NULL ? code.data : "",
                x->cmd->name);
    buf_free(&code);
}

void imap_cmd_copy(struct imap_ctx *x)
{
    imap_transfer(x, 0);
}

void imap_cmd_move(struct imap_ctx *x)
{
    imap_transfer(x, 1);
}

/* EXPUNGE's OK: with the mailbox's HIGHESTMODSEQ after the expunges in a CONDSTORE session
 * (RFC 7162 3.1.11 / 3.2.10), as Dovecot sends it, so a sync client need not re-read its own
 * change. */
static void imap_tagged_expunge_ok(struct imap_ctx *x)
{
    const char *name = x->cmd->uid ? "UID EXPUNGE" : "EXPUNGE";
    if (x->s->condstore && x->s->view.mailbox != NULL) {
        imap_tagged(x, "OK", "[HIGHESTMODSEQ %llu] %s completed",
                    (unsigned long long)x->s->view.highestmodseq, name);
    } else {
        imap_tagged(x, "OK", "%s completed", name);
    }
}

void imap_cmd_expunge(struct imap_ctx *x)
{
    struct imap_view *v = &x->s->view;
    struct mv_uid_range *ranges = NULL;
    size_t nranges = 0;
    if (imap_arg_count(x->cmd) != (x->cmd->uid ? 1u : 0u)) {
        imap_tagged(x, "BAD",
                    x->cmd->uid ? "UID EXPUNGE takes a UID set" : "EXPUNGE takes no arguments");
        return;
    }
    if (v->readonly) {
        imap_tagged(x, "NO", "[READ-ONLY] the mailbox is open read-only");
        return;
    }
    if (x->cmd->uid) { /* UIDPLUS: only the \Deleted messages among these UIDs */
        uint32_t *idx = NULL;
        size_t n = 0;
        if (imap_set_arg(x, imap_arg(x->cmd, 0), &idx, &n) != 0) {
            return;
        }
        imap_drop_expunged(v, idx, &n);
        int oom = imap_view_uid_ranges(v, idx, n, &ranges, &nranges) != 0;
        free(idx);
        if (n == 0 || oom) {
            (void)imap_view_sync(x->s, x->out, 1);
            if (n == 0) {
                imap_tagged_expunge_ok(x);
            } else {
                imap_tagged(x, "NO", "[SERVERBUG] out of memory");
            }
            return;
        }
    }
    int rc = x->cmd->uid
                 ? mv_mailbox_expunge_ranges(imap_db(x->s), v->mailbox, ranges, nranges, NULL)
                 : mv_mailbox_expunge(imap_db(x->s), v->mailbox, NULL, NULL);
    free(ranges);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "EXPUNGE");
        return;
    }
    (void)imap_view_sync(x->s, x->out, 1);
    imap_tagged_expunge_ok(x);
}

void imap_cmd_close(struct imap_ctx *x)
{
    struct imap_view *v = &x->s->view;
    if (imap_arg_count(x->cmd) != 0) {
        imap_tagged(x, "BAD", "CLOSE takes no arguments");
        return;
    }
    int rc = v->readonly ? MV_OK : mv_mailbox_expunge(imap_db(x->s), v->mailbox, NULL, NULL);
    imap_view_free(v);
    x->s->state = IMAP_AUTH;
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "CLOSE");
        return;
    }
    imap_tagged(x, "OK", "CLOSE completed");
}

/* IDLE (RFC 2177): report what is pending, then "+ idling"; the session stays in IDLE (the
 * loop polls the mailbox, imap_session.c) until the client sends DONE. */
void imap_cmd_idle(struct imap_ctx *x)
{
    if (imap_arg_count(x->cmd) != 0) {
        imap_tagged(x, "BAD", "IDLE takes no arguments");
        return;
    }
    if (x->s->state == IMAP_SELECTED) {
        (void)imap_view_sync(x->s, x->out, 1);
    }
    snprintf(x->s->idle_tag, sizeof x->s->idle_tag, "%s", x->cmd->tag);
    x->s->idling = 1;
    buf_str(x->out, "+ idling\r\n");
}

/* UNSELECT (RFC 3691): CLOSE without the expunge. */
void imap_cmd_unselect(struct imap_ctx *x)
{
    if (imap_arg_count(x->cmd) != 0) {
        imap_tagged(x, "BAD", "UNSELECT takes no arguments");
        return;
    }
    imap_view_free(&x->s->view);
    x->s->state = IMAP_AUTH;
    imap_tagged(x, "OK", "UNSELECT completed");
}
