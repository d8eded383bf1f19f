/*
 * test_imap_structure_cache.c -- the FETCH BODYSTRUCTURE / BODY answers kept per open store
 * (imapd/imap_structure_cache.c): an answer is found only under its own key (message, body,
 * size, BODYSTRUCTURE or BODY, UTF8=ACCEPT), the process's budget is never passed, room is
 * made by dropping the entry unused longest, and clearing gives every byte back. Counts,
 * never times.
 */
#include "../imapd/buf.h"
#include "../imapd/imap_structure_cache.h"
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct imap_structure_key key_of(uint32_t uid)
{
    return (struct imap_structure_key){
        .uidvalidity = 7, .uid = uid, .body_key = uid * 8 + 2, .size = 1000 + uid, .extensible = 1};
}

/* 1 if key's answer is found and is exactly want. */
static int
found_as(struct imap_structure_cache *c, const struct imap_structure_key *k, const char *want)
{
    struct buf out = {0};
    int hit = imap_structure_cache_get(c, k, &out);
    int same = hit && out.len == strlen(want) && memcmp(out.data, want, out.len) == 0;
    buf_free(&out);
    return same;
}

static void
put_str(struct imap_structure_cache *c, const struct imap_structure_key *k, const char *s)
{
    imap_structure_cache_put(c, k, s, strlen(s), 0);
}

/* An answer comes back byte for byte, and only for its own key: another message, another
 * body or size under the same UID, BODY for BODYSTRUCTURE, the UTF8=ACCEPT form, another
 * UIDVALIDITY. A second put of a key keeps the first answer. */
static void test_found_only_under_its_key(void)
{
    imap_structure_cache_budget(1 << 20);
    struct imap_structure_cache *c = imap_structure_cache_new();
    CHECK(c != NULL);
    struct imap_structure_key k = key_of(5);
    const char *answer =
        "(\"TEXT\" \"PLAIN\" (\"CHARSET\" \"utf-8\") NIL NIL \"7BIT\" 12 1 NIL NIL "
        "NIL NIL)";
    CHECK(!imap_structure_cache_has(c, &k));
    put_str(c, &k, answer);
    CHECK(imap_structure_cache_has(c, &k));
    CHECK(found_as(c, &k, answer));
    struct imap_structure_key other[6];
    for (int i = 0; i < 6; i++) {
        other[i] = k;
    }
    other[0].uid = 6;
    other[1].body_key ^= 8;
    other[2].size++;
    other[3].extensible = 0;
    other[4].utf8 = 1;
    other[5].uidvalidity = 8;
    for (int i = 0; i < 6; i++) {
        struct buf out = {0};
        CHECK(!imap_structure_cache_get(c, &other[i], &out));
        CHECK_EQ_INT(out.len, 0);
        buf_free(&out);
    }
    put_str(c, &k, "(\"other\")");
    CHECK(found_as(c, &k, answer));
    /* NUL bytes and the like are kept as they are (a literal's bytes) */
    struct imap_structure_key bin = key_of(9);
    imap_structure_cache_put(c, &bin, "a\0b\r\n{3}", 8, 0);
    struct buf out = {0};
    CHECK(imap_structure_cache_get(c, &bin, &out));
    CHECK(out.len == 8 && memcmp(out.data, "a\0b\r\n{3}", 8) == 0);
    buf_free(&out);
    struct imap_structure_cache_stats st;
    imap_structure_cache_stats(c, &st);
    CHECK_EQ_INT(st.entries, 2);
    CHECK_EQ_INT(st.hits, 3);
    CHECK_EQ_INT(st.misses, 6);
    imap_structure_cache_free(&c);
    CHECK(c == NULL);
    CHECK_EQ_INT(imap_structure_cache_bytes(), 0);
}

/* Many more answers than the budget holds: the bytes held never pass it, the table grows as
 * entries come (every answer kept is found again), and the newest answers are the ones kept. */
static void test_budget_never_passed(void)
{
    enum { BUDGET = 64 << 10, ANSWERS = 20000 };
    imap_structure_cache_budget(BUDGET);
    struct imap_structure_cache *c = imap_structure_cache_new();
    char text[160];
    memset(text, 'x', sizeof text);
    size_t most = 0;
    for (uint32_t uid = 1; uid <= ANSWERS; uid++) {
        struct imap_structure_key k = key_of(uid);
        imap_structure_cache_put(c, &k, text, sizeof text, 0);
        size_t held = imap_structure_cache_bytes();
        CHECK(held <= BUDGET);
        most = held > most ? held : most;
    }
    CHECK(most > BUDGET / 2); /* it did fill up */
    struct imap_structure_cache_stats st;
    imap_structure_cache_stats(c, &st);
    CHECK(st.entries > 100 && st.entries < ANSWERS);
    CHECK_EQ_INT(st.bytes, imap_structure_cache_bytes());
    /* the last answers put are there, the first ones are gone */
    for (uint32_t uid = ANSWERS - 50; uid <= ANSWERS; uid++) {
        struct imap_structure_key k = key_of(uid);
        CHECK(imap_structure_cache_has(c, &k));
    }
    struct imap_structure_key first = key_of(1);
    CHECK(!imap_structure_cache_has(c, &first));
    /* an answer larger than the whole budget is never kept, and drops nothing */
    static char huge[BUDGET + 1];
    struct imap_structure_key big = key_of(ANSWERS + 1);
    imap_structure_cache_put(c, &big, huge, sizeof huge, 0);
    CHECK(!imap_structure_cache_has(c, &big));
    struct imap_structure_cache_stats after;
    imap_structure_cache_stats(c, &after);
    CHECK_EQ_INT(after.entries, st.entries);
    imap_structure_cache_clear(c);
    imap_structure_cache_stats(c, &after);
    CHECK_EQ_INT(after.entries, 0);
    CHECK_EQ_INT(after.bytes, 0);
    CHECK_EQ_INT(imap_structure_cache_bytes(), 0);
    /* still usable after the clear */
    put_str(c, &first, "(again)");
    CHECK(found_as(c, &first, "(again)"));
    imap_structure_cache_free(&c);
    CHECK_EQ_INT(imap_structure_cache_bytes(), 0);
}

/* Room is made from the entry unused longest: an answer found again since it was kept gets
 * one more turn (a page of messages shown again stays), the others go in the order kept. */
static void test_used_answers_stay(void)
{
    imap_structure_cache_budget(32 << 10);
    struct imap_structure_cache *c = imap_structure_cache_new();
    char text[100];
    memset(text, 'y', sizeof text);
    uint32_t uid = 1;
    struct imap_structure_cache_stats st = {0};
    /* fill until the first drop */
    for (;; uid++) {
        struct imap_structure_key k = key_of(uid);
        size_t before = st.entries;
        imap_structure_cache_put(c, &k, text, sizeof text, 0);
        imap_structure_cache_stats(c, &st);
        if (st.entries <= before) {
            break;
        }
    }
    uint32_t filled = uid; /* uid 1 went to make room for it */
    struct imap_structure_key second = key_of(2), third = key_of(3);
    struct buf out = {0};
    CHECK(imap_structure_cache_get(c, &second, &out)); /* used: kept past its turn */
    buf_free(&out);
    for (uid = filled + 1; uid < filled + 40; uid++) {
        struct imap_structure_key k = key_of(uid);
        imap_structure_cache_put(c, &k, text, sizeof text, 0);
    }
    CHECK(imap_structure_cache_has(c, &second));
    CHECK(!imap_structure_cache_has(c, &third));
    imap_structure_cache_free(&c);
}

/* What imap_structure_cache_take_unsaved hands out. */
struct taken {
    uint32_t uids[64];
    char first[64];
    size_t count;
};

static void take_one(void *arg, const struct imap_structure_key *key, const char *text, size_t len)
{
    struct taken *t = arg;
    if (t->count < 64) {
        t->uids[t->count] = key->uid;
    }
    if (t->count == 0) {
        snprintf(t->first, sizeof t->first, "%.*s", (int)len, text);
    }
    t->count++;
}

/* Answers made from a message (unsaved) are handed out to be saved once each, oldest first,
 * in batches of at most max; answers read from the store (saved) never; an unsaved answer
 * dropped to make room is counted, and its clear leaves none unsaved. */
static void test_unsaved_handed_out_once(void)
{
    imap_structure_cache_budget(1 << 20);
    struct imap_structure_cache *c = imap_structure_cache_new();
    for (uint32_t uid = 1; uid <= 10; uid++) {
        struct imap_structure_key k = key_of(uid);
        char text[32];
        snprintf(text, sizeof text, "(answer %u)", uid);
        imap_structure_cache_put(c, &k, text, strlen(text), uid % 2); /* odd: made here */
    }
    struct imap_structure_cache_stats st;
    imap_structure_cache_stats(c, &st);
    CHECK_EQ_INT(st.entries, 10);
    CHECK_EQ_INT(st.unsaved, 5);
    struct taken t = {0};
    CHECK_EQ_INT(imap_structure_cache_take_unsaved(c, 3, take_one, &t), 3);
    CHECK_EQ_INT(t.count, 3);
    CHECK_EQ_INT(t.uids[0], 1);
    CHECK_EQ_INT(t.uids[1], 3);
    CHECK_EQ_INT(t.uids[2], 5);
    CHECK(strcmp(t.first, "(answer 1)") == 0);
    t = (struct taken){0};
    CHECK_EQ_INT(imap_structure_cache_take_unsaved(c, 100, take_one, &t), 2);
    CHECK_EQ_INT(t.uids[0], 7);
    CHECK_EQ_INT(t.uids[1], 9);
    CHECK_EQ_INT(imap_structure_cache_take_unsaved(c, 100, take_one, &t), 0);
    struct imap_structure_key k1 = key_of(1), k2 = key_of(2);
    CHECK(found_as(c, &k1, "(answer 1)")); /* handed out, still kept */
    CHECK(found_as(c, &k2, "(answer 2)")); /* not to save: kept all the same */
    /* a second put of a kept key changes nothing, not even to unsaved */
    imap_structure_cache_put(c, &k1, "(other)", 7, 1);
    imap_structure_cache_stats(c, &st);
    CHECK_EQ_INT(st.unsaved, 0);
    imap_structure_cache_clear(c);
    CHECK_EQ_INT(imap_structure_cache_take_unsaved(NULL, 5, take_one, &t), 0);

    /* a small budget: unsaved answers dropped to make room are counted, never handed out */
    imap_structure_cache_free(&c);
    imap_structure_cache_budget(8 << 10);
    c = imap_structure_cache_new();
    char text[200];
    memset(text, 'z', sizeof text);
    /* (3,000: the keys of dropped answers are let go on the way, sc_pending_add) */
    for (uint32_t uid = 1; uid <= 3000; uid++) {
        struct imap_structure_key k = key_of(uid);
        imap_structure_cache_put(c, &k, text, sizeof text, 1);
    }
    imap_structure_cache_stats(c, &st);
    CHECK(st.unsaved_lost > 0);
    CHECK_EQ_INT(st.unsaved + st.unsaved_lost, 3000);
    CHECK_EQ_INT(st.unsaved, st.entries);
    t = (struct taken){0};
    CHECK_EQ_INT(imap_structure_cache_take_unsaved(c, 1000, take_one, &t), st.entries);
    CHECK_EQ_INT(t.uids[0], st.unsaved_lost + 1); /* the oldest kept */
    imap_structure_cache_free(&c);
}

/* A budget of 0 makes no cache (so a FETCH looks nothing up: none counted as a miss) and
 * keeps nothing; a NULL cache finds nothing. */
static void test_off(void)
{
    imap_structure_cache_budget(0);
    struct imap_structure_cache *c = imap_structure_cache_new();
    CHECK(c == NULL);
    struct imap_structure_key k = key_of(1);
    put_str(c, &k, "(x)");
    CHECK(!imap_structure_cache_has(c, &k));
    CHECK_EQ_INT(imap_structure_cache_bytes(), 0);
    imap_structure_cache_free(&c);
    struct buf out = {0};
    CHECK(!imap_structure_cache_get(NULL, &k, &out));
    imap_structure_cache_put(NULL, &k, "(x)", 3, 0);
    CHECK(!imap_structure_cache_has(NULL, &k));
}

/* One store that filled the whole budget does not keep the others' answers out: a second
 * store's answers are kept from its first one on (room taken from the larger cache), their
 * holdings even out as both go on, and then each makes room from its own. */
static void test_busy_store_shares(void)
{
    enum { BUDGET = 64 << 10 };
    imap_structure_cache_budget(BUDGET);
    struct imap_structure_cache *busy = imap_structure_cache_new();
    struct imap_structure_cache *other = imap_structure_cache_new();
    char text[100];
    memset(text, 'z', sizeof text);
    for (uint32_t uid = 1; uid <= 5000; uid++) {
        struct imap_structure_key k = key_of(uid);
        imap_structure_cache_put(busy, &k, text, sizeof text, 0);
    }
    struct imap_structure_cache_stats b, o;
    imap_structure_cache_stats(busy, &b);
    CHECK(b.bytes > BUDGET - 200); /* full */
    for (uint32_t uid = 1; uid <= 50; uid++) {
        struct imap_structure_key k = key_of(uid);
        imap_structure_cache_put(other, &k, text, sizeof text, 0);
        CHECK(imap_structure_cache_has(other, &k));
    }
    /* both go on: they end up holding about half each, the budget full and never passed */
    for (uint32_t uid = 5001; uid <= 15000; uid++) {
        struct imap_structure_key k = key_of(uid);
        imap_structure_cache_put(uid % 2 ? busy : other, &k, text, sizeof text, 0);
        CHECK(imap_structure_cache_bytes() <= BUDGET);
    }
    imap_structure_cache_stats(busy, &b);
    imap_structure_cache_stats(other, &o);
    CHECK(o.bytes > BUDGET * 2 / 5 && b.bytes > BUDGET * 2 / 5);
    CHECK_EQ_INT(b.bytes + o.bytes, imap_structure_cache_bytes());
    /* the latest answers of each are kept */
    struct imap_structure_key last_busy = key_of(14999), last_other = key_of(15000);
    CHECK(imap_structure_cache_has(busy, &last_busy));
    CHECK(imap_structure_cache_has(other, &last_other));
    /* a store gone gives its share to the one left */
    imap_structure_cache_free(&busy);
    CHECK_EQ_INT(o.bytes, imap_structure_cache_bytes());
    for (uint32_t uid = 15001; uid <= 20000; uid++) {
        struct imap_structure_key k = key_of(uid);
        imap_structure_cache_put(other, &k, text, sizeof text, 0);
    }
    imap_structure_cache_stats(other, &o);
    CHECK(o.bytes > BUDGET - 200);
    imap_structure_cache_free(&other);
    CHECK_EQ_INT(imap_structure_cache_bytes(), 0);
}

/* Two caches (two stores) put and get at once on two threads each, over one budget: every
 * answer found is its own key's, and the budget holds (ASan/TSan-clean under the tests).
 * Whether a thread finds the other's answers depends on how they are scheduled, so hits
 * are not counted here (test_busy_store_shares shows both stores keep answers). */
struct worker_arg {
    struct imap_structure_cache *c;
    uint32_t base;
    int bad;
};

static void *put_get(void *p)
{
    struct worker_arg *a = p;
    for (uint32_t i = 0; i < 20000; i++) {
        uint32_t uid = a->base + i % 3000;
        struct imap_structure_key k = key_of(uid);
        char text[32];
        int n = snprintf(text, sizeof text, "(uid %u)", uid);
        struct buf out = {0};
        if (imap_structure_cache_get(a->c, &k, &out)) {
            a->bad += out.len != (size_t)n || memcmp(out.data, text, (size_t)n) != 0;
        } else {
            imap_structure_cache_put(a->c, &k, text, (size_t)n, 0);
        }
        buf_free(&out);
        a->bad += imap_structure_cache_bytes() > (96 << 10);
    }
    return NULL;
}

static void test_threads_share_one_budget(void)
{
    imap_structure_cache_budget(96 << 10);
    struct imap_structure_cache *c[2] = {imap_structure_cache_new(), imap_structure_cache_new()};
    struct worker_arg args[4] = {{c[0], 1, 0}, {c[0], 1, 0}, {c[1], 100000, 0}, {c[1], 100000, 0}};
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(pthread_create(&t[i], NULL, put_get, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(args[i].bad, 0);
    }
    struct imap_structure_cache_stats a, b;
    imap_structure_cache_stats(c[0], &a);
    imap_structure_cache_stats(c[1], &b);
    CHECK_EQ_INT(a.bytes + b.bytes, imap_structure_cache_bytes());
    imap_structure_cache_free(&c[0]);
    imap_structure_cache_free(&c[1]);
    CHECK_EQ_INT(imap_structure_cache_bytes(), 0);
}

int main(void)
{
    TEST(test_found_only_under_its_key);
    TEST(test_budget_never_passed);
    TEST(test_used_answers_stay);
    TEST(test_unsaved_handed_out_once);
    TEST(test_off);
    TEST(test_busy_store_shares);
    TEST(test_threads_share_one_budget);
    return th_summary();
}
