/*
 * test_imap_search_fields.c -- SEARCH's HEADER and BCC keys against a message's header
 * (imapd/imap_search_fields.c): the cases RFC 3501 6.4.4 names, written out (field names in
 * any case and with blanks before the colon, folded values, encoded words, Unicode case,
 * empty values, the same text in several keys, a NUL in a value), and thousands of generated
 * headers and key sets compared with a plain reading of the rule written here (each key on
 * its own: every field of its name unfolded, decoded, case folded, searched). The generated
 * sets take both ways the matcher has: many keys of one length against short values (the
 * rolling hashes), a few keys against long values (one search a key).
 */
#include "../imapd/imap_search_fields.h"
#include "harness.h"
#include "mailvault.h"

#include <gmime/gmime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the rule, key by key ---- */

static char *sf_fold(const char *text)
{
    char *valid = g_utf8_make_valid(text, -1);
    char *folded = g_utf8_casefold(valid, -1);
    g_free(valid);
    return folded;
}

static int sf_rule(const char *h, size_t len, const char *name, const char *value)
{
    char *want = sf_fold(value);
    int found = 0;
    size_t at = 0;
    while (!found && at < len && h[at] != '\r' && h[at] != '\n') {
        size_t end = at;
        for (;;) {
            while (end < len && h[end] != '\n') {
                end++;
            }
            end = end < len ? end + 1 : len;
            if (end >= len || (h[end] != ' ' && h[end] != '\t')) {
                break;
            }
        }
        const char *colon = memchr(h + at, ':', end - at);
        if (colon != NULL) {
            size_t n = (size_t)(colon - (h + at));
            while (n > 0 && (h[at + n - 1] == ' ' || h[at + n - 1] == '\t')) {
                n--;
            }
            if (n == strlen(name) && strncasecmp(h + at, name, n) == 0) {
                GString *v = g_string_new(NULL);
                for (const char *p = colon + 1; p < h + end; p++) {
                    if (*p != '\r' && *p != '\n') {
                        g_string_append_c(v, *p != '\0' ? *p : ' ');
                    }
                }
                char *decoded = strstr(v->str, "=?") != NULL
                                    ? g_mime_utils_header_decode_text(NULL, v->str)
                                    : g_strdup(v->str);
                char *folded = sf_fold(decoded);
                found = want[0] == '\0' || strstr(folded, want) != NULL;
                g_free(folded);
                g_free(decoded);
                g_string_free(v, TRUE);
            }
        }
        at = end;
    }
    g_free(want);
    return found;
}

/* The matcher's answers for n keys against one header into *out (malloc'd; NULL on a
 * failure, which is checked). */
static void sf_run(const char *const *names,
                   const char *const *values,
                   size_t n,
                   const char *header,
                   size_t len,
                   unsigned char **out)
{
    struct imap_fields_matcher *m = NULL;
    unsigned char *found = calloc(n > 0 ? n : 1, 1);
    *out = NULL;
    CHECK(found != NULL);
    int made = imap_fields_matcher_new(names, values, n, &m);
    if (made != MV_OK) {
        free(found);
    }
    CHECK_EQ_INT(made, MV_OK);
    int ran = imap_fields_matcher_run(m, header, len, found);
    imap_fields_matcher_free(m);
    if (ran != MV_OK) {
        free(found);
    }
    CHECK_EQ_INT(ran, MV_OK);
    *out = found;
}

/* ---- written-out cases ---- */

static void test_rfc_cases(void)
{
    static const char header[] = "Message-ID: <Abc.123@Example.ORG>\r\n"
                                 "References: <one@x> <two@x>\r\n"
                                 " <three@x>\r\n"
                                 "X-Shape  : v1\r\n"
                                 "Subject: =?UTF-8?Q?Gr=C3=BC=C3=9Fe?= aus Wien\r\n"
                                 "Bcc: M\xc3\xbcller <m@example.org>\r\n"
                                 "X-Empty:\r\n"
                                 "\r\n"
                                 "Message-ID: <body@not.header>\r\n";
    static const struct {
        const char *name, *value;
        int want;
        const char *what;
    } cases[] = {
        {"Message-ID", "<abc.123@example.org>", 1, "a whole id, case ignored"},
        {"message-id", "ABC.123", 1, "a field name in any case, a piece of the value"},
        {"Message-ID", "<body@not.header>", 0, "the body is not the header"},
        {"References", "<two@x> <three@x>", 1, "a folded value matches unfolded"},
        {"References", "<four@x>", 0, "an id not there"},
        {"X-Shape", "V1", 1, "blanks before the colon"},
        {"Subject", "GR\xc3\x9cSSE", 1, "an encoded word decoded, Unicode case folded"},
        {"Subject", "=?UTF-8", 0, "not the encoded form"},
        {"Bcc", "m\xc3\x9cller", 1, "8-bit text folded"},
        {"X-Empty", "", 1, "an empty value: the field is there"},
        {"X-Missing", "", 0, "an empty value: the field is not there"},
        {"X-Shape", "", 1, "an empty value beside others of the name"},
        {"Message-ID", "<abc.123@example.org>", 1, "the same text in a second key"},
        {"Message-ID:", "a", 0, "a name with a colon names no field"},
    };
    size_t n = sizeof cases / sizeof cases[0];
    const char *names[sizeof cases / sizeof cases[0]];
    const char *values[sizeof cases / sizeof cases[0]];
    for (size_t i = 0; i < n; i++) {
        names[i] = cases[i].name;
        values[i] = cases[i].value;
    }
    unsigned char *found;
    sf_run(names, values, n, header, sizeof header - 1, &found);
    for (size_t i = 0; found != NULL && i < n; i++) {
        if (found[i] != cases[i].want) {
            fprintf(stderr, "  %s: got %d\n", cases[i].what, found[i]);
        }
        CHECK_EQ_INT(found[i], cases[i].want);
        /* and each alone: the same answer */
        unsigned char *one;
        sf_run(&names[i], &values[i], 1, header, sizeof header - 1, &one);
        CHECK(one != NULL && one[0] == cases[i].want);
        free(one);
    }
    free(found);

    /* A NUL in a value reads as a space; LF-only line ends; a header without an empty line */
    static const char nul[] = "X-A: left\0right\nX-B: folded\n more\n";
    const char *nn[] = {"X-A", "X-B", "X-A"};
    const char *nv[] = {"left right", "folded more", "leftright"};
    unsigned char *f2;
    sf_run(nn, nv, 3, nul, sizeof nul - 1, &f2);
    CHECK(f2 != NULL && f2[0] == 1 && f2[1] == 1 && f2[2] == 0);
    free(f2);

    /* No keys at all, and an empty header */
    unsigned char *f3;
    sf_run(NULL, NULL, 0, header, sizeof header - 1, &f3);
    CHECK(f3 != NULL);
    free(f3);
    const char *en[] = {"X-Empty"}, *ev[] = {""};
    unsigned char *f4;
    sf_run(en, ev, 1, "", 0, &f4);
    CHECK(f4 != NULL && f4[0] == 0);
    free(f4);
}

/* ---- generated ---- */

static uint64_t sf_state = 0x9e3779b97f4a7c15ull;

static uint64_t sf_next(void)
{
    sf_state ^= sf_state >> 12;
    sf_state ^= sf_state << 25;
    sf_state ^= sf_state >> 27;
    return sf_state * 0x2545f4914f6cdd1dull;
}

static size_t sf_below(size_t n)
{
    return (size_t)(sf_next() % n);
}

static const char *const sf_names[] = {"Message-ID", "References", "X-Shape", "Subject", "Bcc"};

static void sf_token(GString *s, size_t len)
{
    static const char chars[] = "abcdeABCDE<>@.-0123456789";
    for (size_t i = 0; i < len; i++) {
        g_string_append_c(s, chars[sf_below(sizeof chars - 1)]);
    }
}

/* A header of 4-12 fields over sf_names (names in varied case and spacing), values short
 * or long, some folded, some with an encoded word or 8-bit text. */
static GString *sf_header(size_t value_max)
{
    GString *h = g_string_new(NULL);
    size_t fields = 4 + sf_below(9);
    for (size_t f = 0; f < fields; f++) {
        const char *name = sf_names[sf_below(sizeof sf_names / sizeof sf_names[0])];
        for (const char *p = name; *p != '\0'; p++) {
            char c = *p;
            g_string_append_c(h, sf_below(4) == 0 ? (char)(c ^ (c >= 'A' ? 0x20 : 0)) : c);
        }
        g_string_append(h, sf_below(8) == 0 ? " : " : ": ");
        size_t parts = 1 + sf_below(3);
        for (size_t p = 0; p < parts; p++) {
            if (p > 0) {
                g_string_append(h, sf_below(2) ? "\r\n\t" : " ");
            }
            switch (sf_below(10)) {
            case 0:
                g_string_append(h, "=?UTF-8?Q?Gr=C3=BC=C3=9Fe?=");
                break;
            case 1:
                g_string_append(h, "Gr\xc3\xbc\xc3\x9f"
                                   "e");
                break;
            default:
                sf_token(h, sf_below(value_max + 1));
            }
        }
        g_string_append(h, "\r\n");
    }
    g_string_append(h, "\r\nbody\r\n");
    return h;
}

/* n keys: pieces of the header's own text (so some match), case flipped at times, random
 * tokens, empty values, repeats; lengths all len_fixed when it is not 0. */
static void sf_keys(const GString *h, size_t n, size_t len_fixed, char **names, char **values)
{
    for (size_t k = 0; k < n; k++) {
        names[k] = g_strdup(sf_names[sf_below(sizeof sf_names / sizeof sf_names[0])]);
        size_t len = len_fixed != 0 ? len_fixed : sf_below(40);
        GString *v = g_string_new(NULL);
        size_t kind = sf_below(10);
        if (k > 0 && kind == 0) {
            g_string_append(v, values[sf_below(k)]); /* a repeat */
        } else if (kind <= 5 && h->len > len + 10) {
            size_t from = sf_below(h->len - len - 8); /* stops before the body */
            for (size_t i = 0; i < len; i++) {
                char c = h->str[from + i];
                if (c == '\r' || c == '\n' || c == '\t') {
                    c = ' ';
                }
                g_string_append_c(v, sf_below(3) == 0 && c >= 'a' && c <= 'e' ? (char)(c - 32) : c);
            }
        } else if (kind == 6 && len_fixed == 0) {
            /* empty */
        } else {
            sf_token(v, len);
        }
        values[k] = g_string_free(v, FALSE);
    }
}

static void sf_compare(size_t rounds, size_t n, size_t len_fixed, size_t value_max)
{
    char **names = calloc(n, sizeof *names);
    char **values = calloc(n, sizeof *values);
    unsigned char *found = calloc(n, 1);
    CHECK(names != NULL && values != NULL && found != NULL);
    size_t hits = 0, misses = 0, wrong = 0;
    for (size_t r = 0; names != NULL && values != NULL && found != NULL && r < rounds; r++) {
        GString *h = sf_header(value_max);
        sf_keys(h, n, len_fixed, names, values);
        struct imap_fields_matcher *m = NULL;
        CHECK_EQ_INT(
            imap_fields_matcher_new((const char *const *)names, (const char *const *)values, n, &m),
            MV_OK);
        /* the same matcher over several headers: nothing of one message stays for the next */
        for (size_t again = 0; m != NULL && again < 3; again++) {
            GString *other = again == 0 ? h : sf_header(value_max);
            memset(found, 0, n);
            CHECK_EQ_INT(imap_fields_matcher_run(m, other->str, other->len, found), MV_OK);
            for (size_t k = 0; k < n; k++) {
                int want = sf_rule(other->str, other->len, names[k], values[k]);
                if (found[k] != want && wrong++ < 5) {
                    fprintf(stderr, "  key %s \"%s\": got %d, want %d in\n%s\n", names[k],
                            values[k], found[k], want, other->str);
                }
                hits += want != 0;
                misses += want == 0;
            }
            if (other != h) {
                g_string_free(other, TRUE);
            }
        }
        imap_fields_matcher_free(m);
        for (size_t k = 0; k < n; k++) {
            g_free(names[k]);
            g_free(values[k]);
        }
        g_string_free(h, TRUE);
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK(hits > 0 && misses > 0); /* the sets test both answers */
    free(names);
    free(values);
    free(found);
}

/* Many keys of one length against short values: the rolling hashes. */
static void test_many_keys_one_length(void)
{
    sf_compare(40, 600, 12, 30);
    sf_compare(40, 300, 3, 20);
}

/* A few keys of any length against long values: one search a key. */
static void test_few_keys_long_values(void)
{
    sf_compare(200, 3, 0, 400);
    sf_compare(200, 1, 0, 60);
}

/* Keys of many lengths, values of any length: either way, value by value. */
static void test_mixed(void)
{
    sf_compare(100, 80, 0, 120);
    sf_compare(30, 2000, 0, 80);
}

/* An OR of 5,000 Message-IDs against one message: the one it has is found, none other. */
static void test_five_thousand_ids(void)
{
    size_t n = 5000;
    char **names = calloc(n, sizeof *names), **values = calloc(n, sizeof *values);
    CHECK(names != NULL && values != NULL);
    for (size_t k = 0; names != NULL && values != NULL && k < n; k++) {
        names[k] = g_strdup(k % 2 ? "Message-ID" : "message-id");
        values[k] = g_strdup_printf("<%zu.%zu@host%zu.example>", k * 7919, k, k % 13);
    }
    char *header = g_strdup_printf("From: a@b\r\nMessage-ID: <%zu.%zu@host%zu.example>\r\n\r\n",
                                   (size_t)4321 * 7919, (size_t)4321, (size_t)4321 % 13);
    unsigned char *found;
    sf_run((const char *const *)names, (const char *const *)values, n, header, strlen(header),
           &found);
    size_t count = 0;
    for (size_t k = 0; found != NULL && k < n; k++) {
        count += found[k];
    }
    CHECK(found != NULL && found[4321] == 1);
    CHECK_EQ_INT(count, 1);
    free(found);
    g_free(header);
    for (size_t k = 0; names != NULL && values != NULL && k < n; k++) {
        g_free(names[k]);
        g_free(values[k]);
    }
    free(names);
    free(values);
}

/* ---- picked fields (imap_fields_matcher_pick: the store's copy of Message-ID fields) ---- */

static int sf_pick_put(void *arg, const char *bytes, size_t n)
{
    g_string_append_len(arg, bytes, (gssize)n);
    return MV_OK;
}

/* The fields named name of a header, one after another, as a picker takes them, into
 * *picked (made here, freed by the caller). */
static void sf_pick(const char *name, const char *header, size_t len, GString **picked)
{
    const char *any = "";
    struct imap_fields_matcher *picker = NULL;
    *picked = g_string_new(NULL);
    int made = imap_fields_matcher_new(&name, &any, 1, &picker);
    int rc =
        made == MV_OK ? imap_fields_matcher_pick(picker, header, len, sf_pick_put, *picked) : made;
    imap_fields_matcher_free(picker);
    CHECK_EQ_INT(rc, MV_OK);
}

/* Keys (name, values[k]) run over the picked fields of the header answer as the rule does
 * over the whole header; answers that differ are added to *wrong, matches to *hits. */
static void sf_picked_same(const char *name,
                           const char *header,
                           size_t len,
                           char *const *values,
                           size_t n,
                           size_t *wrong,
                           size_t *hits)
{
    GString *picked = NULL;
    sf_pick(name, header, len, &picked);
    const char **names = calloc(n, sizeof *names);
    unsigned char *found = NULL;
    for (size_t k = 0; names != NULL && k < n; k++) {
        names[k] = name;
    }
    if (names != NULL) {
        sf_run(names, (const char *const *)values, n, picked->str, picked->len, &found);
    }
    *wrong += found == NULL;
    for (size_t k = 0; found != NULL && k < n; k++) {
        int want = sf_rule(header, len, name, values[k]);
        *hits += want != 0;
        if (found[k] != want && (*wrong)++ < 5) {
            fprintf(stderr, "  picked %s \"%s\": got %d, want %d; picked\n%s\nof\n%.*s\n", name,
                    values[k], found[k], want, picked->str, (int)len, header);
        }
    }
    free(found);
    free(names);
    g_string_free(picked, TRUE);
}

/* The picked Message-ID fields answer every Message-ID key as the whole header does: headers
 * written out at the walk's edges (folded, twice, a blank or tab before the colon, names
 * that only begin or end alike, a line without a colon, a header opening with a continuation
 * line, a last field without a line break, a NUL, a lone CR, LF-only lines, an encoded word,
 * an empty line before it), then generated headers; other fields are never taken. */
static void test_picked_fields(void)
{
    static const struct {
        const char *text;
        size_t len; /* 0: strlen */
    } headers[] = {
        {"Message-ID: <a@b>\r\n\r\nMessage-ID: <body@x>\r\n", 0},
        {"Subject: s\r\nMessage-ID:\r\n <folded@x>\r\nTo: t\r\n\r\n", 0},
        {"Message-ID: <one@x>\r\nSubject: hi\r\nmessage-id : <two@x>\r\n\r\n", 0},
        {"X-Message-ID: <xa@x>\r\nMessage-IDs: <xb@x>\r\nResent-Message-ID: <xc@x>\r\n\r\n", 0},
        {"Message-ID <nocolon@x>\r\nMessage-ID: <c@x>\r\n\r\n", 0},
        {" Message-ID: <lead@x>\r\nMessage-ID: <d@x>\r\n\r\n", 0},
        {"Subject: s\r\nMessage-ID: <e@x>", 0},
        {"Message-ID: <f\0g@x>\r\nTo: <f g@x>\r\n\r\n", 36},
        {"Message-ID: =?UTF-8?Q?=3Cq@x=3E?=\r\n\r\n", 0},
        {"Message-ID: <h@x>\n\t<i@x>\nTo: y\n\nbody\n", 0},
        {"\r\nMessage-ID: <none@x>\r\n", 0},
        {"Message-ID\t: <j@x>\r\nMESSAGE-ID:<J2@X>\r\n\r\n", 0},
        {"Message-ID: <k@x>\rX: y\r\n\r\n", 0},
        {"To: a\r\n\tMessage-ID: <cont@x>\r\n\r\n", 0},
    };
    char *values[] = {"",     "<a@b>", "A@B",   "body",    "folded", "one",  "two",
                      "xa",   "xb",    "xc",    "nocolon", "c@x",    "lead", "d@x",
                      "e@x>", "f g",   "<q@x>", "h@x> <i", "none",   "j@x",  "j2@x",
                      "k@x>", "x: y",  "cont",  "\r",      "s"};
    size_t n = sizeof values / sizeof values[0], wrong = 0, hits = 0;
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        size_t len = headers[i].len != 0 ? headers[i].len : strlen(headers[i].text);
        sf_picked_same("Message-ID", headers[i].text, len, values, n, &wrong, &hits);
        GString *picked = NULL;
        sf_pick("Message-ID", headers[i].text, len, &picked);
        /* only fields of the name: never another's, never the body */
        CHECK(strstr(picked->str, "body") == NULL && strstr(picked->str, "X-") == NULL &&
              strstr(picked->str, "IDs") == NULL && strstr(picked->str, "Resent") == NULL &&
              strstr(picked->str, "To:") == NULL && strstr(picked->str, "none") == NULL);
        g_string_free(picked, TRUE);
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK(hits >= 15);
    /* generated headers over every name, their keys pieces of the header's own text */
    char *gen[40];
    size_t gen_n = sizeof gen / sizeof gen[0];
    char *ignored[40];
    for (size_t r = 0; r < 300; r++) {
        GString *h = sf_header(r % 2 ? 30 : 120);
        sf_keys(h, gen_n, 0, ignored, gen);
        const char *name = sf_names[r % (sizeof sf_names / sizeof sf_names[0])];
        sf_picked_same(name, h->str, h->len, gen, gen_n, &wrong, &hits);
        for (size_t k = 0; k < gen_n; k++) {
            g_free(ignored[k]);
            g_free(gen[k]);
        }
        g_string_free(h, TRUE);
    }
    CHECK_EQ_INT(wrong, 0);
}

int main(void)
{
    g_mime_init();
    TEST(test_rfc_cases);
    TEST(test_many_keys_one_length);
    TEST(test_few_keys_long_values);
    TEST(test_mixed);
    TEST(test_five_thousand_ids);
    TEST(test_picked_fields);
    g_mime_shutdown();
    return th_summary();
}
