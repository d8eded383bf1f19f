/*
 * test_imap_kw.c -- a message's keyword list as the server's views hold it (imapd/imap_kw.c):
 * names interned once in the process, a list their numbers. The views held each list as its
 * text, so a user who gave every message its own subset of 256 long keywords made each
 * message cost ~33 KB in mailvaultd (2,000 messages: +63 MB at a SELECT; issue 13, "memory
 * stays bounded"). These tests count the bytes the module reports and compare texts; nothing
 * is timed.
 */
#include "../imapd/buf.h"
#include "../imapd/imap_kw.h"
#include "failalloc.h"
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAMES     1000
#define NAME_LEN  100
#define LISTS     2000
#define PER_LIST  256
#define LIST_TEXT (PER_LIST * (NAME_LEN + 1))

/* Name i: "kw0042" padded with x to NAME_LEN bytes. */
static void name_of(int i, char *out)
{
    int n = snprintf(out, NAME_LEN + 1, "kw%04d", i);
    memset(out + n, 'x', (size_t)(NAME_LEN - n));
    out[NAME_LEN] = '\0';
}

/* The text of list j: PER_LIST of the NAMES names, a run of its own (step 3 from 7j). */
static void list_text(int j, char *text)
{
    size_t at = 0;
    for (int i = 0; i < PER_LIST; i++) {
        if (i > 0) {
            text[at++] = ' ';
        }
        name_of((7 * j + 3 * i) % NAMES, text + at);
        at += NAME_LEN;
    }
    text[at] = '\0';
}

/* LISTS lists of PER_LIST 100-byte names out of NAMES: the text alone would be ~52 MB; the
 * lists cost 2 bytes a name and each name is held once. Everything goes with the last list. */
static void test_distinct_long_lists_cost_numbers_not_text(void)
{
    size_t before = imap_kw_bytes();
    char *text = malloc(LIST_TEXT + 1);
    const struct imap_kw **kw = calloc(LISTS, sizeof *kw);
    CHECK(text != NULL && kw != NULL);
    for (int j = 0; j < LISTS; j++) {
        list_text(j, text);
        kw[j] = imap_kw_new(text, j > 0 ? kw[j - 1] : NULL);
        CHECK(kw[j] != NULL);
        CHECK_EQ_INT(imap_kw_count(kw[j]), PER_LIST);
    }
    CHECK_EQ_INT(imap_kw_names_held(), NAMES);
    size_t used = imap_kw_bytes() - before;
    size_t text_bytes = (size_t)LISTS * LIST_TEXT;
    size_t bound = (size_t)LISTS * (32 + 2 * PER_LIST) + (size_t)NAMES * (32 + NAME_LEN + 1);
    printf("# %d lists of %d names: %zu bytes (their text: %zu)\n", LISTS, PER_LIST, used,
           text_bytes);
    CHECK(used <= bound);
    CHECK(used * 40 < text_bytes);

    /* each list still reads back as its text */
    for (int j = 0; j < LISTS; j += 97) {
        list_text(j, text);
        CHECK_EQ_INT(imap_kw_text_len(kw[j]), strlen(text));
        char *back = malloc(LIST_TEXT + 1);
        CHECK(back != NULL);
        *imap_kw_text_put(kw[j], back) = '\0';
        int same = strcmp(back, text) == 0;
        free(back);
        CHECK(same);
    }
    for (int j = 0; j < LISTS; j++) {
        imap_kw_unref(kw[j]);
    }
    free(kw);
    free(text);
    CHECK_EQ_INT(imap_kw_names_held(), 0);
    CHECK_EQ_INT(imap_kw_bytes(), before);
}

/* A list reads back as its names joined by one space, compares by names, finds a keyword in
 * any case; like is taken again when it holds the same names; empty text is the one empty
 * list. */
static void test_text_equality_and_lookup(void)
{
    const struct imap_kw *a = imap_kw_new("$Label1  Junk $label1 ", NULL);
    const struct imap_kw *b = imap_kw_new("$Label1 Junk $label1", NULL);
    const struct imap_kw *c = imap_kw_new("$Label1 Junk", NULL);
    CHECK(a != NULL && b != NULL && c != NULL);
    CHECK(a != b);
    CHECK_EQ_INT(imap_kw_count(a), 3);
    CHECK(imap_kw_equal(a, b));
    CHECK(!imap_kw_equal(a, c));
    CHECK(!imap_kw_equal(c, IMAP_KW_NONE));
    CHECK(imap_kw_has(a, "JUNK", 4));
    CHECK(!imap_kw_has(a, "Jun", 3));
    CHECK(!imap_kw_has(IMAP_KW_NONE, "Junk", 4));
    size_t len;
    CHECK(strcmp(imap_kw_name(a, 2, &len), "$label1") == 0 && len == 7);
    struct buf out = {0};
    imap_kw_out(&out, a);
    CHECK(!out.oom);
    CHECK(out.len == strlen("$Label1 Junk $label1") &&
          memcmp(out.data, "$Label1 Junk $label1", out.len) == 0);
    buf_free(&out);
    CHECK_EQ_INT(imap_kw_text_len(a), 20);
    CHECK_EQ_INT(imap_kw_hash(a), imap_kw_hash(b));

    CHECK(imap_kw_new("$Label1 Junk $label1", a) == a);
    imap_kw_unref(a);
    const struct imap_kw *d = imap_kw_new("$Label1 Junk", a);
    CHECK(d != NULL && d != a && imap_kw_equal(d, c));
    CHECK(imap_kw_new(NULL, NULL) == IMAP_KW_NONE);
    CHECK(imap_kw_new("", a) == IMAP_KW_NONE);
    CHECK(imap_kw_new("   ", NULL) == IMAP_KW_NONE);
    CHECK_EQ_INT(imap_kw_count(IMAP_KW_NONE), 0);
    CHECK_EQ_INT(imap_kw_text_len(IMAP_KW_NONE), 0);
    imap_kw_unref(IMAP_KW_NONE);
    imap_kw_unref(NULL);
    CHECK(imap_kw_ref(IMAP_KW_NONE) == IMAP_KW_NONE);
    imap_kw_unref(a);
    imap_kw_unref(b);
    imap_kw_unref(c);
    /* d, made against a above, still holds two names */
    CHECK_EQ_INT(imap_kw_names_held(), 2);
    imap_kw_unref(d);
    CHECK_EQ_INT(imap_kw_names_held(), 0);
}

/* Names freed in the middle of the lookup's runs: every name left is found again (not
 * interned a second time), and names freed come back under the numbers they left. */
static void test_lookup_right_after_frees(void)
{
    enum { N = 6000 };
    size_t held0 = imap_kw_names_held();
    const struct imap_kw **kw = calloc(N, sizeof *kw);
    CHECK(kw != NULL);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        CHECK((kw[i] = imap_kw_new(name, NULL)) != NULL);
    }
    CHECK_EQ_INT(imap_kw_names_held(), held0 + N);
    for (int i = 0; i < N; i += 2) {
        imap_kw_unref(kw[i]);
        kw[i] = NULL;
    }
    CHECK_EQ_INT(imap_kw_names_held(), held0 + N / 2);
    for (int i = 1; i < N; i += 2) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        const struct imap_kw *again = imap_kw_new(name, NULL);
        CHECK(again != NULL && imap_kw_equal(again, kw[i]));
        imap_kw_unref(again);
    }
    CHECK_EQ_INT(imap_kw_names_held(), held0 + N / 2);
    for (int i = 0; i < N; i += 2) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        CHECK((kw[i] = imap_kw_new(name, NULL)) != NULL);
        size_t len;
        CHECK(strcmp(imap_kw_name(kw[i], 0, &len), name) == 0);
    }
    CHECK_EQ_INT(imap_kw_names_held(), held0 + N);
    for (int i = 0; i < N; i++) {
        imap_kw_unref(kw[i]);
    }
    free(kw);
    CHECK_EQ_INT(imap_kw_names_held(), held0);
}

/* More than 65,536 names at once: lists of the higher numbers are wide (4 bytes a name) and
 * read back right; once the names are gone a new list is narrow again. */
static void test_wide_numbers(void)
{
    enum { N = 70000 };
    const struct imap_kw **kw = calloc(N, sizeof *kw);
    CHECK(kw != NULL);
    for (int i = 0; i < N; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        CHECK((kw[i] = imap_kw_new(name, NULL)) != NULL);
    }
    size_t before = imap_kw_bytes();
    const struct imap_kw *two = imap_kw_new("w69999 w1", NULL);
    CHECK(two != NULL);
    size_t wide = imap_kw_bytes() - before;
    size_t len;
    CHECK(strcmp(imap_kw_name(two, 0, &len), "w69999") == 0);
    CHECK(strcmp(imap_kw_name(two, 1, &len), "w1") == 0);
    CHECK(imap_kw_has(two, "W69999", 6));
    imap_kw_unref(two);
    for (int i = 0; i < N; i++) {
        imap_kw_unref(kw[i]);
    }
    free(kw);
    const struct imap_kw *names = imap_kw_new("w69999 w1", NULL); /* the lowest numbers now */
    CHECK(names != NULL);
    before = imap_kw_bytes();
    two = imap_kw_new("w69999 w1", NULL);
    CHECK(two != NULL);
    size_t narrow = imap_kw_bytes() - before;
    imap_kw_unref(two);
    imap_kw_unref(names);
    CHECK_EQ_INT(wide - narrow, 4); /* two names, 2 bytes each more */
}

/* Two threads make, read and drop lists of the same 300 names at once (a window of 64 lists
 * each, the oldest dropped): every list reads back its own text while the other thread frees
 * and makes names again, and the table is empty at the end (ASan: no use after free). */
#define RACE_ROUNDS 20000
#define RACE_WINDOW 64

static void *race_thread(void *arg)
{
    uintptr_t bad = 0;
    uint32_t seed = (uint32_t)(uintptr_t)arg;
    const struct imap_kw *window[RACE_WINDOW] = {0};
    char texts[RACE_WINDOW][64];
    for (int r = 0; r < RACE_ROUNDS; r++) {
        int w = r % RACE_WINDOW;
        imap_kw_unref(window[w]);
        seed = seed * 1103515245u + 12345u;
        snprintf(texts[w], sizeof texts[w], "r%u r%u r%u", (seed >> 8) % 300, (seed >> 16) % 300,
                 (seed >> 4) % 300);
        window[w] = imap_kw_new(texts[w], NULL);
        if (window[w] == NULL) {
            bad++;
            continue;
        }
        int back = (w + RACE_WINDOW / 2) % RACE_WINDOW; /* one made a while ago */
        if (window[back] != NULL) {
            char got[64];
            *imap_kw_text_put(window[back], got) = '\0';
            bad += strcmp(got, texts[back]) != 0;
        }
    }
    for (int w = 0; w < RACE_WINDOW; w++) {
        imap_kw_unref(window[w]);
    }
    return (void *)bad;
}

static void test_two_threads(void)
{
    size_t held0 = imap_kw_names_held();
    pthread_t t[2];
    for (uintptr_t i = 0; i < 2; i++) {
        CHECK_EQ_INT(pthread_create(&t[i], NULL, race_thread, (void *)(i + 1)), 0);
    }
    uintptr_t bad = 0;
    for (int i = 0; i < 2; i++) {
        void *out;
        CHECK_EQ_INT(pthread_join(t[i], &out), 0);
        bad += (uintptr_t)out;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(imap_kw_names_held(), held0);
}

/* Each allocation of a new 300-name list failed in turn (the ids' array, the lookup's growth,
 * the free heap, each name, a number block, the list): NULL, and nothing held or counted
 * afterwards; the first run that meets no failure makes the list. */
static void test_out_of_memory(void)
{
    char text[300 * 8];
    size_t at = 0;
    for (int i = 0; i < 300; i++) {
        at += (size_t)snprintf(text + at, sizeof text - at, "%soom%03d", i > 0 ? " " : "", i);
    }
    size_t held0 = imap_kw_names_held(), bytes0 = imap_kw_bytes();
    unsigned long n;
    for (n = 1; n < 10000; n++) {
        fa_arm(n, 0);
        const struct imap_kw *kw = imap_kw_new(text, NULL);
        int fired = fa_disarm();
        if (!fired) {
            CHECK(kw != NULL);
            CHECK_EQ_INT(imap_kw_count(kw), 300);
            CHECK_EQ_INT(imap_kw_names_held(), held0 + 300);
            imap_kw_unref(kw);
            break;
        }
        CHECK(kw == NULL);
        CHECK_EQ_INT(imap_kw_names_held(), held0);
        CHECK_EQ_INT(imap_kw_bytes(), bytes0);
    }
    printf("# %lu allocations failed in turn\n", n - 1);
    CHECK(n > 300); /* at least every name's (the tables made once stay made) */
    CHECK_EQ_INT(imap_kw_names_held(), held0);
    CHECK_EQ_INT(imap_kw_bytes(), bytes0);
}

int main(void)
{
    if (fa_install() != 0) {
        return 1;
    }
    TEST(test_out_of_memory); /* first: the tables are still to be made */
    TEST(test_distinct_long_lists_cost_numbers_not_text);
    TEST(test_text_equality_and_lookup);
    TEST(test_lookup_right_after_frees);
    TEST(test_wide_numbers);
    TEST(test_two_threads);
    return th_summary();
}
