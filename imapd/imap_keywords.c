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
 *   - A keyword is looked up in a hash table over the set, not by walking it: a mailbox
 *     whose messages carry thousands of distinct keywords (each message may have
 *     keywords_max of them) made a walk per keyword quadratic -- a first SELECT of 10,000
 *     messages with 10 of 10,000 keywords each took 2.8 s and every later one 0.37 s, where
 *     Dovecot takes 46 ms. The hash is libsodium's keyed SipHash (imap_kw_siphash) of the
 *     keyword folded to lower case, under a key drawn once per process, so a client cannot
 *     choose keywords that all land on one slot. Open addressing, linear probing, at most
 *     half full; a slot holds the hash's high 32 bits and the name's index + 1 (0: empty),
 *     so most probes compare no text and growing the table hashes nothing again.
 *   - A message's keyword list is an imap_kw (imap_kw.c: names interned once in the process,
 *     a list their numbers); the set here keeps its own copies of the names it announced,
 *     since it compares without regard to case and keeps the first spelling.
 */
#include "buf.h"
#include "imap_session.h"
#include "mailvault.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* SipHash of the keyword in ASCII lower case (flags compare without regard to it). */
static uint64_t imap_keyword_hash(const char *kw, size_t len)
{
    unsigned char small[256];
    unsigned char *folded = len <= sizeof small ? small : malloc(len);
    if (folded == NULL) {
        /* Out of memory for a keyword over 256 bytes: its length alone still finds it,
         * only with more comparisons of text. */
        return (uint64_t)len * 0x9e3779b97f4a7c15u;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)kw[i];
        folded[i] = c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c;
    }
    uint64_t h = imap_kw_siphash(folded, len);
    if (folded != small) {
        free(folded);
    }
    return h;
}

/* A slot: the hash's high 32 bits (which also choose its place) and the name's index + 1. */
#define IMAP_KW_SLOT(h, index)        (((h)&0xffffffff00000000u) | (uint64_t)((index) + 1))
#define IMAP_KW_SLOT_INDEX(slot)      ((size_t)((slot)&0xffffffffu) - 1)
#define IMAP_KW_SLOT_HOME(slot, mask) ((size_t)((slot) >> 32) & (mask))

/* The slot that holds kw, or the empty slot where it would go. */
static uint64_t *imap_keyword_slot(struct imap_view *v, const char *kw, size_t len, uint64_t h)
{
    size_t mask = v->keyword_slot_count - 1;
    for (size_t i = IMAP_KW_SLOT_HOME(h, mask);; i = (i + 1) & mask) {
        uint64_t *slot = &v->keyword_slots[i];
        if (*slot == 0) {
            return slot;
        }
        if ((*slot >> 32) != (h >> 32)) {
            continue;
        }
        const char *name = v->keyword_names[IMAP_KW_SLOT_INDEX(*slot)];
        v->keyword_compares++;
        if (strncasecmp(name, kw, len) == 0 && name[len] == '\0') {
            return slot;
        }
    }
}

/* Room for one more name with the table at most half full: doubled, each slot moved to its
 * place in the larger table by the hash bits it keeps (no name hashed or compared again). */
static int imap_keyword_room(struct imap_view *v)
{
    if ((v->keyword_count + 1) * 2 <= v->keyword_slot_count) {
        return MV_OK;
    }
    size_t count = v->keyword_slot_count != 0 ? v->keyword_slot_count * 2 : 64;
    uint64_t *slots = calloc(count, sizeof *slots);
    if (slots == NULL) {
        return MV_ENOMEM;
    }
    for (size_t i = 0; i < v->keyword_slot_count; i++) {
        uint64_t slot = v->keyword_slots[i];
        if (slot != 0) {
            size_t j = IMAP_KW_SLOT_HOME(slot, count - 1);
            while (slots[j] != 0) {
                j = (j + 1) & (count - 1);
            }
            slots[j] = slot;
        }
    }
    free(v->keyword_slots);
    v->keyword_slots = slots;
    v->keyword_slot_count = count;
    return MV_OK;
}

/* Adds one name (len bytes at p, len > 0): 1 if it was new, 0 if not, MV_ENOMEM. */
static int imap_view_keyword_add(struct imap_view *v, const char *p, size_t len)
{
    if (imap_keyword_room(v) != MV_OK) {
        return MV_ENOMEM;
    }
    uint64_t h = imap_keyword_hash(p, len);
    uint64_t *slot = imap_keyword_slot(v, p, len, h);
    if (*slot != 0) {
        return 0;
    }
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
    *slot = IMAP_KW_SLOT(h, v->keyword_count);
    v->keyword_names[v->keyword_count++] = copy;
    return 1;
}

int imap_view_keywords_add(struct imap_view *v, const char *keywords)
{
    int added = 0;
    for (const char *p = keywords; p != NULL && *p != '\0';) {
        size_t len = strcspn(p, " ");
        int rc = len > 0 ? imap_view_keyword_add(v, p, len) : 0;
        if (rc < 0) {
            return rc;
        }
        added |= rc;
        p += len;
        p += *p == ' ';
    }
    return added;
}

int imap_view_keywords_add_list(struct imap_view *v, const struct imap_kw *kw)
{
    int added = 0;
    for (size_t i = 0; i < imap_kw_count(kw); i++) {
        size_t len;
        const char *name = imap_kw_name(kw, i, &len);
        int rc = imap_view_keyword_add(v, name, len);
        if (rc < 0) {
            return rc;
        }
        added |= rc;
    }
    return added;
}

void imap_view_keywords_free(struct imap_view *v)
{
    for (size_t i = 0; i < v->keyword_count; i++) {
        free(v->keyword_names[i]);
    }
    free(v->keyword_names);
    free(v->keyword_slots);
    v->keyword_names = NULL;
    v->keyword_slots = NULL;
    v->keyword_count = v->keyword_cap = v->keyword_slot_count = v->keyword_compares = 0;
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
    buf_str(out, v->keywords_full ? ")] flags that stay\r\n" : " \\*)] flags that stay\r\n");
}
