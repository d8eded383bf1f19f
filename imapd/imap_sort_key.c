/*
 * imap_sort_key.c -- SORT's compared strings: the base subject (RFC 5256 2.1) and the first
 * address's mailbox or display form (RFC 5256 FROM/TO/CC, RFC 5957 DISPLAYFROM/DISPLAYTO).
 *
 * IMPLEMENTATION NOTES
 *   - Written here from RFC 5256's rules: no library extracts a base subject (GMime has no
 *     such function; Dovecot's is inside Dovecot).
 *   - The store keeps the Subject decoded (RFC 2047) and unfolded, so step (1) is left with
 *     turning tabs and line breaks into spaces and runs of them into one.
 *   - Address lists are the store's display text ("Name <a@b>, c@d", a name with specials in
 *     quotes). A first address without quotes, comments or a group is read here (most mail;
 *     GMime's parse is ~2 us a message, a SORT FROM over 100,000 messages); anything else is
 *     GMime's internet_address_list_parse(). A group's first "address" is the group: its name
 *     (as an IMAP ENVELOPE gives a group's start, and as Dovecot sorts one).
 */
#include "imap_sort_key.h"

#include <gmime/gmime.h>
#include <stdlib.h>
#include <string.h>

/* Copies len bytes of src into out (cap > 0) in i;ascii-casemap form, cut at cap - 1. */
static size_t sort_key_copy(const char *src, size_t len, char *out, size_t cap)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        out[i] = c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
    }
    out[n] = '\0';
    return n;
}

static int sort_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* Whether s[at..end) starts with word (lower case ASCII), case-insensitively. */
static int sort_has(const char *s, size_t at, size_t end, const char *word)
{
    size_t n = strlen(word);
    if (end - at < n) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (sort_lower(s[at + i]) != word[i]) {
            return 0;
        }
    }
    return 1;
}

/* A subj-blob at s[at..end): "[" *BLOBCHAR "]" *WSP (BLOBCHAR: neither '[' nor ']'). Its end,
 * or at if there is none. */
static size_t sort_blob(const char *s, size_t at, size_t end)
{
    if (at >= end || s[at] != '[') {
        return at;
    }
    size_t p = at + 1;
    while (p < end && s[p] != '[' && s[p] != ']') {
        p++;
    }
    if (p >= end || s[p] != ']') {
        return at;
    }
    p++;
    while (p < end && s[p] == ' ') {
        p++;
    }
    return p;
}

/* A subj-leader at s[at..end) but its WSP form: *subj-blob subj-refwd, subj-refwd being
 * ("re" / ("fw" ["d"])) *WSP [subj-blob] ":". Its end, or at if there is none. */
static size_t sort_leader(const char *s, size_t at, size_t end)
{
    size_t p = at;
    for (size_t q; (q = sort_blob(s, p, end)) != p;) {
        p = q;
    }
    size_t word = sort_has(s, p, end, "re")    ? 2
                  : sort_has(s, p, end, "fwd") ? 3
                  : sort_has(s, p, end, "fw")  ? 2
                                               : 0;
    /* "fwd" is tried before "fw": a "fwd" not followed by its ':' cannot be "fw" then "d"
     * either (a 'd' is neither WSP, '[' nor ':') */
    if (word > 0) {
        size_t q = p + word;
        while (q < end && s[q] == ' ') {
            q++;
        }
        q = sort_blob(s, q, end);
        if (q < end && s[q] == ':') {
            return q + 1;
        }
    }
    return at;
}

/* Steps (2) to (6) of RFC 5256 2.1 over s[*start..*end), s normalized by step (1). */
static void sort_base(const char *s, size_t *start, size_t *end)
{
    size_t a = *start, b = *end;
    for (;;) {
        /* (2) trailing "(fwd)" and WSP */
        for (;;) {
            if (b > a && s[b - 1] == ' ') {
                b--;
            } else if (b - a >= 5 && sort_has(s, b - 5, b, "(fwd)")) {
                b -= 5;
            } else {
                break;
            }
        }
        /* (3) leaders, (4) a leading blob when text is left after it, (5) until neither */
        for (int changed = 1; changed;) {
            changed = 0;
            for (;;) {
                if (a < b && s[a] == ' ') {
                    a++;
                    continue;
                }
                size_t q = sort_leader(s, a, b);
                if (q == a) {
                    break;
                }
                a = q;
            }
            size_t q = sort_blob(s, a, b);
            if (q != a && q < b) {
                a = q;
                changed = 1;
            }
        }
        /* (6) "[fwd:" ... "]" around it all: taken off, and again from (2) */
        if (b - a >= 6 && sort_has(s, a, b, "[fwd:") && s[b - 1] == ']') {
            a += 5;
            b -= 1;
            continue;
        }
        break;
    }
    *start = a;
    *end = b;
}

size_t imap_sort_subject(const char *subject, char *out, size_t cap)
{
    if (cap == 0) {
        return 0;
    }
    size_t len = strlen(subject);
    char small[2048];
    char *s = len < sizeof small ? small : malloc(len + 1);
    if (s == NULL) {
        /* out of memory: the subject as it is, still a key (never seen at these sizes) */
        return sort_key_copy(subject, len, out, cap);
    }
    /* (1) tabs and line breaks as spaces, a run of them as one */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = subject[i];
        int blank = c == ' ' || c == '\t' || c == '\r' || c == '\n';
        if (!blank) {
            s[n++] = c;
        } else if (n == 0 || s[n - 1] != ' ') {
            s[n++] = ' ';
        }
    }
    size_t a = 0, b = n;
    sort_base(s, &a, &b);
    size_t got = sort_key_copy(s + a, b - a, out, cap);
    if (s != small) {
        free(s);
    }
    return got;
}

/* The first address of GMime's parse of list: its mailbox (addr-mailbox) or display form
 * into out. */
static size_t
sort_address_parsed(const char *list, enum imap_sort_address_part how, char *out, size_t cap)
{
    InternetAddressList *l = internet_address_list_parse(NULL, list);
    size_t got = sort_key_copy("", 0, out, cap);
    if (l != NULL && internet_address_list_length(l) > 0) {
        InternetAddress *ia = internet_address_list_get_address(l, 0);
        const char *name = internet_address_get_name(ia);
        if (INTERNET_ADDRESS_IS_MAILBOX(ia)) {
            InternetAddressMailbox *mb = INTERNET_ADDRESS_MAILBOX(ia);
            const char *addr = mb->addr != NULL ? mb->addr : "";
            size_t at = mb->at >= 0 ? (size_t)mb->at : strlen(addr);
            got = how == IMAP_SORT_DISPLAY && name != NULL && name[0] != '\0'
                      ? sort_key_copy(name, strlen(name), out, cap)
                  : how == IMAP_SORT_DISPLAY ? sort_key_copy(addr, strlen(addr), out, cap)
                                             : sort_key_copy(addr, at, out, cap);
        } else if (name != NULL) { /* a group: its name */
            got = sort_key_copy(name, strlen(name), out, cap);
        }
    }
    if (l != NULL) {
        g_object_unref(l);
    }
    return got;
}

/* Whether c makes a first address one for GMime's parse: a quote, a comment, a quoted pair or
 * a group (a switch, not strchr(): this runs for every byte of 100,000 addresses). */
static int sort_special(char c)
{
    switch (c) {
    case '"':
    case '(':
    case ')':
    case '\\':
    case ':':
    case ';':
        return 1;
    default:
        return 0;
    }
}

size_t imap_sort_address(const char *list, enum imap_sort_address_part how, char *out, size_t cap)
{
    if (cap == 0) {
        return 0;
    }
    size_t end = 0;
    while (list[end] != '\0' && list[end] != ',') {
        if (sort_special(list[end])) {
            return sort_address_parsed(list, how, out, cap);
        }
        end++;
    }
    size_t a = 0;
    while (a < end && list[a] == ' ') {
        a++;
    }
    const char *lt = memchr(list + a, '<', end - a);
    size_t name_end = lt != NULL ? (size_t)(lt - list) : a;
    size_t addr_at = lt != NULL ? name_end + 1 : a;
    const char *gt = memchr(list + addr_at, '>', end - addr_at);
    size_t addr_end = gt != NULL ? (size_t)(gt - list) : end;
    while (addr_end > addr_at && list[addr_end - 1] == ' ') {
        addr_end--;
    }
    while (name_end > a && list[name_end - 1] == ' ') {
        name_end--;
    }
    if (how == IMAP_SORT_DISPLAY) {
        return name_end > a ? sort_key_copy(list + a, name_end - a, out, cap)
                            : sort_key_copy(list + addr_at, addr_end - addr_at, out, cap);
    }
    size_t local_end = addr_end;
    while (local_end > addr_at && list[local_end - 1] != '@') {
        local_end--;
    }
    local_end = local_end > addr_at ? local_end - 1 : addr_end; /* no '@': all of it */
    return sort_key_copy(list + addr_at, local_end - addr_at, out, cap);
}

int imap_sort_is_string(enum imap_sort_by by)
{
    return by != IMAP_SORT_ARRIVAL && by != IMAP_SORT_DATE && by != IMAP_SORT_SIZE;
}

size_t
imap_sort_key_of(enum imap_sort_by by, const struct mv_message_fields *f, char *out, size_t cap)
{
    if (by == IMAP_SORT_SUBJECT) {
        return imap_sort_subject(f->subject, out, cap);
    }
    const char *list = by == IMAP_SORT_CC                                ? f->cc
                       : by == IMAP_SORT_TO || by == IMAP_SORT_DISPLAYTO ? f->to
                                                                         : f->from;
    return imap_sort_address(list,
                             by == IMAP_SORT_DISPLAYFROM || by == IMAP_SORT_DISPLAYTO
                                 ? IMAP_SORT_DISPLAY
                                 : IMAP_SORT_MAILBOX,
                             out, cap);
}

uint64_t imap_sort_key_lead(const char *key)
{
    uint64_t v = 0;
    int i = 0;
    for (; i < 8 && key[i] != '\0'; i++) {
        v = v << 8 | (unsigned char)key[i];
    }
    return i == 0 ? 0 : i < 8 ? v << (8 * (8 - i)) : v; /* (a shift by 64 is undefined) */
}

int imap_sort_arena_room(char **bytes, size_t used, size_t *cap, size_t need)
{
    if (*cap - used >= need) {
        return MV_OK;
    }
    size_t grown = *cap > 0 ? *cap * 2 : 65536;
    grown = grown - used >= need ? grown : used + need;
    char *more = malloc(grown); /* not realloc: the old bytes are wiped first */
    if (more == NULL) {
        return MV_ENOMEM;
    }
    if (*bytes != NULL) {
        memcpy(more, *bytes, used);
        explicit_bzero(*bytes, used);
        free(*bytes);
    }
    *bytes = more;
    *cap = grown;
    return MV_OK;
}
