/*
 * imap_keywords.c -- the keywords a selected mailbox defines, and their announcement: the
 * FLAGS and PERMANENTFLAGS that SELECT sends, and again whenever a keyword the client has not
 * been told of appears (a STORE of this session, or of another session or process, reported
 * by the view's sync) -- RFC 3501 7.2.6 and 6.3.1: FLAGS lists the flags and keywords
 * defined in the mailbox, and a client must never see a keyword that FLAGS did not name.
 *
 * IMPLEMENTATION NOTES
 *   - The set is the union of the keywords of the mailbox's messages when it was selected
 *     plus every keyword seen since; it only grows while the mailbox is selected (a keyword
 *     once announced stays valid, as Dovecot keeps it). Keywords compare without regard to
 *     ASCII case (RFC 3501 2.3.2 flags are case-insensitive); the first spelling is kept.
 *   - A linear scan per keyword: mailboxes define a few dozen keywords, the store limits a
 *     message to keywords_max of them.
 *   - A message's keywords (its space-separated list) are a shared, reference-counted string
 *     (imap_kw_*): consecutive messages with the same list point at the same bytes, and a
 *     chunk of messages (imap_msgs.c) holds a reference per message, so sharing a chunk
 *     between views costs nothing here and copying one (a view that must change it) a
 *     count per message that has keywords, not a malloc. "" is one static string and never
 *     counted. The counts are atomic: a view is freed on the session's worker,
 *     but nothing here needs to know which thread that is.
 */
#include "buf.h"
#include "imap_session.h"
#include "mailvault.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct imap_kw {
    atomic_size_t refs;
    char text[];
};

static const char imap_kw_none[] = "";

static struct imap_kw *imap_kw_of(const char *text)
{
    return (struct imap_kw *)(void *)((char *)(uintptr_t)text - offsetof(struct imap_kw, text));
}

const char *imap_kw_new(const char *text, const char *like)
{
    if (text == NULL || text[0] == '\0') {
        return imap_kw_none;
    }
    if (like != NULL && strcmp(like, text) == 0) {
        return imap_kw_ref(like);
    }
    size_t len = strlen(text);
    struct imap_kw *k = malloc(sizeof *k + len + 1);
    if (k == NULL) {
        return NULL;
    }
    atomic_init(&k->refs, 1);
    memcpy(k->text, text, len + 1);
    return k->text;
}

const char *imap_kw_ref(const char *kw)
{
    if (kw != NULL && kw != imap_kw_none) {
        atomic_fetch_add_explicit(&imap_kw_of(kw)->refs, 1, memory_order_relaxed);
    }
    return kw;
}

void imap_kw_unref(const char *kw)
{
    if (kw == NULL || kw == imap_kw_none) {
        return;
    }
    struct imap_kw *k = imap_kw_of(kw);
    if (atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) == 1) {
        free(k);
    }
}

static int imap_keyword_known(const struct imap_view *v, const char *kw, size_t len)
{
    for (size_t i = 0; i < v->keyword_count; i++) {
        if (strlen(v->keyword_names[i]) == len && strncasecmp(v->keyword_names[i], kw, len) == 0) {
            return 1;
        }
    }
    return 0;
}

int imap_view_keywords_add(struct imap_view *v, const char *keywords)
{
    int added = 0;
    for (const char *p = keywords; p != NULL && *p != '\0';) {
        size_t len = strcspn(p, " ");
        if (len > 0 && !imap_keyword_known(v, p, len)) {
            if (v->keyword_count == v->keyword_cap) {
                size_t cap = v->keyword_cap != 0 ? v->keyword_cap * 2 : 16;
                char **grown = realloc(v->keyword_names, cap * sizeof *grown);
                if (grown == NULL) {
                    return MV_ENOMEM;
                }
                v->keyword_names = grown;
                v->keyword_cap = cap;
            }
            char *copy = strndup(p, len);
            if (copy == NULL) {
                return MV_ENOMEM;
            }
            v->keyword_names[v->keyword_count++] = copy;
            added = 1;
        }
        p += len;
        p += *p == ' ';
    }
    return added;
}

void imap_view_keywords_free(struct imap_view *v)
{
    for (size_t i = 0; i < v->keyword_count; i++) {
        free(v->keyword_names[i]);
    }
    free(v->keyword_names);
    v->keyword_names = NULL;
    v->keyword_count = v->keyword_cap = 0;
}

void imap_flags_announce(const struct imap_view *v, struct buf *out)
{
    static const char system[] = "\\Answered \\Flagged \\Deleted \\Seen \\Draft";
    buf_printf(out, "* FLAGS (%s", system);
    for (size_t i = 0; i < v->keyword_count; i++) {
        buf_printf(out, " %s", v->keyword_names[i]);
    }
    buf_str(out, ")\r\n");
    if (v->readonly) {
        buf_str(out, "* OK [PERMANENTFLAGS ()] read-only mailbox\r\n");
        return;
    }
    buf_printf(out, "* OK [PERMANENTFLAGS (%s", system);
    for (size_t i = 0; i < v->keyword_count; i++) {
        buf_printf(out, " %s", v->keyword_names[i]);
    }
    buf_str(out, " \\*)] flags that stay\r\n");
}
