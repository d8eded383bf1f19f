/*
 * imap_search_fields.c -- a SEARCH program's HEADER and BCC keys against one message's header
 * (imap_search_fields.h), all keys in one walk over the header's fields.
 *
 * IMPLEMENTATION NOTES
 *   - The tests are grouped by field name once, so a header field finds its tests by one
 *     binary search, and a field's value is unfolded, decoded and case folded once, however
 *     many tests name the field. (Before, each field compared its name with every test and
 *     each test decoded and folded the value again: an OR of 1,000 HEADER Message-ID keys
 *     was 1.23 s at 10,000 messages, Dovecot 2.3 1.19 s.)
 *   - A field's tests with the same folded text are one text (a chain of tests).
 *   - Against a value, a field's texts are found one of two ways, whichever costs less for
 *     the value's length: one substring search per text (memmem), or, for many texts, one
 *     rolling hash a distinct text length sliding over the value, each window's hash looked
 *     up in a table of the texts' hashes (a bit filter first, so most windows cost no table
 *     probe), a hit confirmed by comparing the bytes. The second costs the value's length
 *     times the distinct lengths, not the texts: a thread's or a client's list of
 *     Message-IDs is a few dozen lengths however many IDs it has. Hand-written because
 *     neither libc nor the libraries of the brief search many substrings at once
 *     (GLib's GRegex would take the texts as one alternation, tried text by text at each
 *     position of the value).
 */
#include "imap_search_fields.h"

#include "mailvault.h"

#include <gmime/gmime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FM_NONE UINT32_MAX
/* The rolling hash's base: odd, so every byte of a window reaches the hash's top bits once
 * mixed (fm_mix) */
#define FM_BASE 0x100000001b3ull
/* The filter of a field's text hashes: 8 bits a text, at least 64 and at most 64 Ki bits
 * (8 KiB, in the first-level cache beside the value) */
#define FM_FILTER_BITS_MIN 64u
#define FM_FILTER_BITS_MAX (1u << 16)

/* One distinct case-folded value among a field's tests. */
struct fm_text {
    char *folded; /* g_free */
    size_t len;
    uint64_t hash;  /* fm_hash of its bytes */
    uint32_t first; /* its first test; the others follow in imap_fields_matcher.same */
};

/* The tests of one field name. */
struct fm_field {
    const char *name; /* one of the tests' names (the matcher's copy) */
    size_t name_len;
    uint32_t *empty; /* tests with an empty value: any field of the name passes them */
    size_t empty_count;
    struct fm_text *texts;
    size_t text_count;
    size_t *lengths;  /* the texts' distinct lengths, ascending */
    uint64_t *powers; /* FM_BASE^(length - 1) for each */
    size_t length_count;
    uint32_t *slots; /* open addressing by fm_mix(hash): text index + 1, 0 free */
    size_t slot_mask;
    uint64_t *filter; /* bit fm_mix(hash) & filter_mask set for each text */
    size_t filter_mask;
};

struct imap_fields_matcher {
    struct fm_field *fields; /* sorted by fm_name_cmp */
    size_t field_count;
    char **names;   /* the tests' names, copied */
    uint32_t *same; /* per test: the next test of the same field and text, or FM_NONE */
    size_t n;
    char *value; /* the value of the field being read, unfolded */
    size_t value_cap;
};

static uint64_t fm_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static uint64_t fm_hash(const char *p, size_t len)
{
    uint64_t h = 0;
    for (size_t i = 0; i < len; i++) {
        h = h * FM_BASE + (unsigned char)p[i];
    }
    return h;
}

/* Field names: by length, then ASCII case-insensitively. */
static int fm_name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen != blen) {
        return alen < blen ? -1 : 1;
    }
    return strncasecmp(a, b, alen);
}

char *imap_search_fold(const char *text)
{
    char *valid = g_utf8_make_valid(text, -1);
    char *folded = valid != NULL ? g_utf8_casefold(valid, -1) : NULL;
    g_free(valid);
    return folded;
}

/* ---- building ---- */

struct fm_entry { /* a test while sorting */
    const char *name;
    size_t name_len;
    const char *folded;
    size_t len;
    uint32_t test;
};

static int fm_entry_cmp(const void *pa, const void *pb)
{
    const struct fm_entry *a = pa, *b = pb;
    int c = fm_name_cmp(a->name, a->name_len, b->name, b->name_len);
    if (c == 0 && a->len != b->len) {
        c = a->len < b->len ? -1 : 1;
    }
    if (c == 0) {
        c = memcmp(a->folded, b->folded, a->len);
    }
    if (c == 0) {
        c = a->test < b->test ? -1 : a->test > b->test;
    }
    return c;
}

static size_t fm_pow2_at_least(size_t n)
{
    size_t p = 1;
    while (p < n) {
        p <<= 1;
    }
    return p;
}

/* The lookup structures of f, whose texts are sorted by length. MV_OK or MV_ENOMEM. */
static int fm_field_index(struct fm_field *f)
{
    if (f->text_count == 0) {
        return MV_OK;
    }
    size_t slots = fm_pow2_at_least(f->text_count * 2);
    size_t bits = fm_pow2_at_least(f->text_count * 8);
    bits = bits < FM_FILTER_BITS_MIN   ? FM_FILTER_BITS_MIN
           : bits > FM_FILTER_BITS_MAX ? FM_FILTER_BITS_MAX
                                       : bits;
    f->slots = calloc(slots, sizeof *f->slots);
    f->filter = calloc(bits / 64, sizeof *f->filter);
    f->lengths = malloc(f->text_count * sizeof *f->lengths);
    f->powers = malloc(f->text_count * sizeof *f->powers);
    if (f->slots == NULL || f->filter == NULL || f->lengths == NULL || f->powers == NULL) {
        return MV_ENOMEM;
    }
    f->slot_mask = slots - 1;
    f->filter_mask = bits - 1;
    for (size_t t = 0; t < f->text_count; t++) {
        struct fm_text *x = &f->texts[t];
        x->hash = fm_hash(x->folded, x->len);
        uint64_t mixed = fm_mix(x->hash);
        f->filter[(mixed & f->filter_mask) / 64] |= (uint64_t)1 << (mixed & 63);
        size_t s = (size_t)(mixed >> 32) & f->slot_mask;
        while (f->slots[s] != 0) {
            s = (s + 1) & f->slot_mask;
        }
        f->slots[s] = (uint32_t)t + 1;
        if (f->length_count == 0 || f->lengths[f->length_count - 1] != x->len) {
            uint64_t power = 1;
            for (size_t i = 1; i < x->len; i++) {
                power *= FM_BASE;
            }
            f->lengths[f->length_count] = x->len;
            f->powers[f->length_count++] = power;
        }
    }
    return MV_OK;
}

/* The fields of m from its tests' entries e (n of them, sorted by fm_entry_cmp), each
 * entry's folded text taken over (set to NULL in folded[]). MV_OK or MV_ENOMEM. */
static int fm_fields_make(struct imap_fields_matcher *m, struct fm_entry *e, char **folded)
{
    size_t n = m->n;
    m->fields = calloc(n > 0 ? n : 1, sizeof *m->fields);
    if (m->fields == NULL) {
        return MV_ENOMEM;
    }
    for (size_t i = 0; i < n;) {
        size_t end = i + 1;
        while (end < n &&
               fm_name_cmp(e[i].name, e[i].name_len, e[end].name, e[end].name_len) == 0) {
            end++;
        }
        struct fm_field *f = &m->fields[m->field_count++];
        f->name = e[i].name;
        f->name_len = e[i].name_len;
        f->empty = malloc((end - i) * sizeof *f->empty);
        f->texts = calloc(end - i, sizeof *f->texts);
        if (f->empty == NULL || f->texts == NULL) {
            return MV_ENOMEM;
        }
        for (size_t k = i; k < end; k++) {
            if (e[k].len == 0) {
                f->empty[f->empty_count++] = e[k].test;
                continue;
            }
            struct fm_text *last = f->text_count > 0 ? &f->texts[f->text_count - 1] : NULL;
            if (last != NULL && last->len == e[k].len &&
                memcmp(last->folded, e[k].folded, e[k].len) == 0) {
                /* the same text again: chained after the previous test with it */
                uint32_t j = last->first;
                while (m->same[j] != FM_NONE) {
                    j = m->same[j];
                }
                m->same[j] = e[k].test;
                continue;
            }
            struct fm_text *x = &f->texts[f->text_count++];
            x->folded = folded[e[k].test];
            folded[e[k].test] = NULL;
            x->len = e[k].len;
            x->first = e[k].test;
        }
        if (fm_field_index(f) != MV_OK) {
            return MV_ENOMEM;
        }
        i = end;
    }
    return MV_OK;
}

int imap_fields_matcher_new(const char *const *names,
                            const char *const *values,
                            size_t n,
                            struct imap_fields_matcher **out)
{
    *out = NULL;
    struct imap_fields_matcher *m = calloc(1, sizeof *m);
    char **folded = calloc(n > 0 ? n : 1, sizeof *folded);
    struct fm_entry *e = calloc(n > 0 ? n : 1, sizeof *e);
    int rc = m != NULL && folded != NULL && e != NULL ? MV_OK : MV_ENOMEM;
    if (rc == MV_OK) {
        m->n = n;
        m->names = calloc(n > 0 ? n : 1, sizeof *m->names);
        m->same = malloc((n > 0 ? n : 1) * sizeof *m->same);
        rc = m->names != NULL && m->same != NULL ? MV_OK : MV_ENOMEM;
    }
    for (size_t j = 0; rc == MV_OK && j < n; j++) {
        m->names[j] = strdup(names[j]);
        folded[j] = imap_search_fold(values[j]); /* once, not once a message */
        if (m->names[j] == NULL || folded[j] == NULL) {
            rc = MV_ENOMEM;
            break;
        }
        m->same[j] = FM_NONE;
        e[j] = (struct fm_entry){.name = m->names[j],
                                 .name_len = strlen(m->names[j]),
                                 .folded = folded[j],
                                 .len = strlen(folded[j]),
                                 .test = (uint32_t)j};
    }
    if (rc == MV_OK) {
        qsort(e, n, sizeof *e, fm_entry_cmp);
        rc = fm_fields_make(m, e, folded);
    }
    for (size_t j = 0; folded != NULL && j < n; j++) {
        g_free(folded[j]); /* those not taken over by a text */
    }
    free(folded);
    free(e);
    if (rc != MV_OK) {
        imap_fields_matcher_free(m);
        return rc;
    }
    *out = m;
    return MV_OK;
}

void imap_fields_matcher_free(struct imap_fields_matcher *m)
{
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->field_count; i++) {
        struct fm_field *f = &m->fields[i];
        for (size_t t = 0; t < f->text_count; t++) {
            g_free(f->texts[t].folded);
        }
        free(f->texts);
        free(f->empty);
        free(f->lengths);
        free(f->powers);
        free(f->slots);
        free(f->filter);
    }
    for (size_t j = 0; m->names != NULL && j < m->n; j++) {
        free(m->names[j]);
    }
    free(m->names);
    free(m->fields);
    free(m->same);
    if (m->value != NULL) {
        explicit_bzero(m->value, m->value_cap); /* a message's header text */
    }
    free(m->value);
    free(m);
}

/* ---- matching ---- */

static void fm_mark(const struct imap_fields_matcher *m, uint32_t test, unsigned char *found)
{
    for (uint32_t j = test; j != FM_NONE; j = m->same[j]) {
        found[j] = 1;
    }
}

/* The text of f equal to the len bytes at p whose hash is h, if any. */
static const struct fm_text *
fm_lookup(const struct fm_field *f, const char *p, size_t len, uint64_t h)
{
    uint64_t mixed = fm_mix(h);
    if ((f->filter[(mixed & f->filter_mask) / 64] & ((uint64_t)1 << (mixed & 63))) == 0) {
        return NULL;
    }
    for (size_t s = (size_t)(mixed >> 32) & f->slot_mask; f->slots[s] != 0;
         s = (s + 1) & f->slot_mask) {
        const struct fm_text *x = &f->texts[f->slots[s] - 1];
        if (x->hash == h && x->len == len && memcmp(x->folded, p, len) == 0) {
            return x; /* the texts are distinct: no other can match these bytes */
        }
    }
    return NULL;
}

/* Marks the tests of f whose text the folded value (len bytes) contains. */
static void fm_field_match(const struct imap_fields_matcher *m,
                           const struct fm_field *f,
                           const char *value,
                           size_t len,
                           unsigned char *found)
{
    /* Windows the rolling hashes would look at, against a memmem a text (~8 bytes a
     * nanosecond once started, a few nanoseconds to start) */
    uint64_t windows = 0;
    for (size_t l = 0; l < f->length_count && f->lengths[l] <= len; l++) {
        windows += len - f->lengths[l] + 1;
    }
    if (windows * 2 >= (uint64_t)f->text_count * (len / 8 + 4)) {
        for (size_t t = 0; t < f->text_count; t++) {
            const struct fm_text *x = &f->texts[t];
            if (x->len <= len && memmem(value, len, x->folded, x->len) != NULL) {
                fm_mark(m, x->first, found);
            }
        }
        return;
    }
    for (size_t l = 0; l < f->length_count && f->lengths[l] <= len; l++) {
        size_t w = f->lengths[l];
        uint64_t h = fm_hash(value, w);
        for (size_t p = 0;; p++) {
            const struct fm_text *x = fm_lookup(f, value + p, w, h);
            if (x != NULL) {
                fm_mark(m, x->first, found);
            }
            if (p + w == len) {
                break;
            }
            h = (h - (unsigned char)value[p] * f->powers[l]) * FM_BASE +
                (unsigned char)value[p + w];
        }
    }
}

static int fm_ascii(const char *text)
{
    for (; *text != '\0'; text++) {
        if ((unsigned char)*text >= 0x80) {
            return 0;
        }
    }
    return 1;
}

/* m->value (NUL-terminated) as the tests compare it: its encoded words decoded (GMime: the
 * charsets it knows, a malformed word left as it is; a value without "=?" has none), then
 * case folded (ASCII in place; anything else by imap_search_fold). *owned gets what the caller
 * g_frees (NULL if the result is m->value itself). NULL if out of memory. */
static char *fm_value_form(struct imap_fields_matcher *m, char **owned)
{
    char *text = m->value;
    *owned = NULL;
    if (strstr(text, "=?") != NULL) {
        char *decoded = g_mime_utils_header_decode_text(NULL, text);
        if (decoded != NULL) {
            text = *owned = decoded;
        }
    }
    if (fm_ascii(text)) {
        for (char *p = text; *p != '\0'; p++) {
            if (*p >= 'A' && *p <= 'Z') {
                *p = (char)(*p - 'A' + 'a');
            }
        }
        return text;
    }
    char *folded = imap_search_fold(text);
    g_free(*owned);
    *owned = folded;
    return folded;
}

/* A field's value (bytes [from, end) of the header, after its colon) into m->value,
 * unfolded: the line breaks removed, a NUL read as a space. MV_OK or MV_ENOMEM. */
static int fm_unfold(struct imap_fields_matcher *m, const char *text, size_t from, size_t end)
{
    size_t need = end - from + 1;
    if (need > m->value_cap) {
        char *grown = malloc(need); /* not realloc: the old copy is wiped, not left behind */
        if (grown == NULL) {
            return MV_ENOMEM;
        }
        if (m->value != NULL) {
            explicit_bzero(m->value, m->value_cap);
        }
        free(m->value);
        m->value = grown;
        m->value_cap = need;
    }
    size_t u = 0;
    for (size_t k = from; k < end; k++) {
        if (text[k] != '\r' && text[k] != '\n') {
            m->value[u++] = text[k] != '\0' ? text[k] : ' ';
        }
    }
    m->value[u] = '\0';
    return MV_OK;
}

static const struct fm_field *
fm_field_find(const struct imap_fields_matcher *m, const char *name, size_t len)
{
    size_t lo = 0, hi = m->field_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = fm_name_cmp(m->fields[mid].name, m->fields[mid].name_len, name, len);
        if (c == 0) {
            return &m->fields[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

/* The header field at text[at] (at < len): *end past its last line (continuation lines
 * included), *name the bytes before its colon (*name == *end - at: no colon). 0 when at is
 * where the fields end (an empty line). One walk for imap_fields_matcher_run and
 * imap_fields_matcher_pick, so a picked field reads exactly as it did in its header. */
static int fm_field_at(const char *text, size_t len, size_t at, size_t *end, size_t *name)
{
    if (at >= len || text[at] == '\r' || text[at] == '\n') {
        return 0;
    }
    size_t e = at;
    do { /* the field: its line and every continuation line */
        const char *nl = memchr(text + e, '\n', len - e);
        e = nl != NULL ? (size_t)(nl - text) + 1 : len;
    } while (e < len && (text[e] == ' ' || text[e] == '\t'));
    size_t n = 0;
    while (at + n < e && text[at + n] != ':') {
        n++;
    }
    *end = e;
    *name = n;
    return 1;
}

/* The tests of m for the field [at, at + name) (name bytes up to its colon), or NULL. */
static const struct fm_field *fm_field_of(
    const struct imap_fields_matcher *m, const char *text, size_t at, size_t name, size_t end)
{
    if (at + name >= end) {
        return NULL; /* no colon: no field name */
    }
    size_t trimmed = name;
    while (trimmed > 0 && (text[at + trimmed - 1] == ' ' || text[at + trimmed - 1] == '\t')) {
        trimmed--;
    }
    return fm_field_find(m, text + at, trimmed);
}

int imap_fields_matcher_run(struct imap_fields_matcher *m,
                            const char *text,
                            size_t len,
                            unsigned char *found)
{
    size_t end = 0, name = 0;
    for (size_t at = 0; fm_field_at(text, len, at, &end, &name); at = end) {
        const struct fm_field *f = fm_field_of(m, text, at, name, end);
        if (f != NULL) {
            for (size_t k = 0; k < f->empty_count; k++) {
                found[f->empty[k]] = 1;
            }
        }
        if (f != NULL && f->text_count > 0) {
            if (fm_unfold(m, text, at + name + 1, end) != MV_OK) {
                return MV_ENOMEM;
            }
            char *owned;
            const char *value = fm_value_form(m, &owned);
            if (value == NULL) {
                return MV_ENOMEM;
            }
            fm_field_match(m, f, value, strlen(value), found);
            g_free(owned);
        }
    }
    return MV_OK;
}

int imap_fields_matcher_pick(const struct imap_fields_matcher *m,
                             const char *text,
                             size_t len,
                             int (*put)(void *arg, const char *bytes, size_t n),
                             void *arg)
{
    size_t end = 0, name = 0;
    for (size_t at = 0; fm_field_at(text, len, at, &end, &name); at = end) {
        if (fm_field_of(m, text, at, name, end) != NULL) {
            int rc = put(arg, text + at, end - at);
            if (rc != MV_OK) {
                return rc;
            }
        }
    }
    return MV_OK;
}
