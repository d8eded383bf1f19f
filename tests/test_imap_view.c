/*
 * test_imap_view.c -- the sessions' views share the store's cached view (imapd/imap_msgs.c,
 * issue 13: every SELECT copied the whole cached view into the session, 48 MB at 1,000,000
 * messages, and each selected session kept its copy). Nothing here is timed: the cost is
 * counted in chunks in memory (imap_chunks_live) and in shared pointers.
 *
 *   - Two sessions select the same 10,000-message mailbox (three chunks): the second SELECT
 *     allocates no chunk, and both read the same bytes as the cache (the old SELECT made a
 *     copy of every message: no pointer was shared).
 *   - A flag change made elsewhere: the session that syncs copies the one chunk it changes
 *     (not the mailbox) and reports "* n FETCH"; the other session sees the old flags until
 *     its own sync; a third SELECT sees the change, the first unseen and the new keyword
 *     in FLAGS without walking the messages.
 *   - Expunges pending in one session (a sync that may not report them, as during a FETCH)
 *     while another selects: the first keeps its sequence numbers until it may report, then
 *     reports "* n EXPUNGE" with the numbers of that moment; the second never had them.
 *   - \Recent stays per session on shared messages: the first SELECT claims them all, the
 *     second sees none, and a new message is recent in the one session that claims it.
 *   - The chunk table itself (no store): drops across chunk boundaries, an emptied chunk,
 *     appends after drops, against a plain array; the shared view never changes. And a
 *     sync that empties the last chunk and appends, with a short shared chunk before it.
 * At the end every chunk is freed (references balance) and ASan's leak check covers the
 * keyword strings.
 */
#include "harness.h"
#include "testutil.h"

#include "../imapd/buf.h"
#include "../imapd/config.h"
#include "../imapd/imap_session.h"
#include "../imapd/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct config g_config; /* main.c's, which is not linked here */

#define TV_PW    "view password"
#define TV_COUNT 10000u

static mv_store *tv_store;
static struct open_store tv_os;

/* A store with TV_COUNT small distinct messages in INBOX (one import), all \Seen but the
 * ones whose UID is a multiple of 1000 plus 999 (so the first unseen is 999). */
static void test_setup(void)
{
    config_defaults(&g_config);
    snprintf(g_config.root, sizeof g_config.root, "%s", tu_path("root"));
    g_config.kdf_iter = TU_KDF_ITER;
    CHECK_EQ_INT(tu_store_create("view", TV_PW, 8192, &tv_store), MV_OK);
    const char *mbox = tu_path("seed.mbox");
    FILE *f = fopen(mbox, "w");
    CHECK(f != NULL);
    for (unsigned i = 1; i <= TV_COUNT; i++) {
        fprintf(f,
                "From s@example.org Mon Jan  5 10:00:00 2026\nFrom: s@example.org\n"
                "Subject: m %u\n\nbody %u\n\n",
                i, i);
    }
    CHECK(fclose(f) == 0);
    struct mv_import_stats st;
    CHECK_EQ_INT(mv_import(tv_store, mbox, "INBOX", NULL, NULL, &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, TV_COUNT);
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "1:*", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL),
                 MV_OK);
    char set[64];
    for (unsigned u = 999; u <= TV_COUNT; u += 1000) {
        snprintf(set, sizeof set, "%u", u);
        CHECK_EQ_INT(
            mv_flags_set(tv_store, "INBOX", set, MV_FLAGS_REMOVE, MV_FLAG_SEEN, NULL, NULL), MV_OK);
    }
    memset(&tv_os, 0, sizeof tv_os);
    snprintf(tv_os.address, sizeof tv_os.address, "view@example.org");
    tv_os.store = tv_store;
}

static void tv_session(struct imap_session *s)
{
    memset(s, 0, sizeof *s);
    s->store = &tv_os;
    s->state = IMAP_SELECTED;
}

/* Sessions a and b select INBOX; the second allocates no chunk. */
static void test_second_select_shares(void)
{
    CHECK(tv_store != NULL);
    struct imap_session a, b;
    tv_session(&a);
    tv_session(&b);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    size_t live = imap_chunks_live();
    CHECK_EQ_INT(live, (TV_COUNT + IMAP_CHUNK_MSGS - 1) / IMAP_CHUNK_MSGS); /* the cache's */
    CHECK_EQ_INT(imap_view_load(&b, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_chunks_live(), live); /* the old SELECT copied every message */
    CHECK_EQ_INT(a.view.count, TV_COUNT);
    CHECK_EQ_INT(b.view.count, TV_COUNT);
    for (size_t i = 0; i < TV_COUNT; i += 997) {
        CHECK(imap_view_msg(&a.view, i) == imap_view_msg(&b.view, i));
        CHECK_EQ_INT(imap_view_msg(&b.view, i)->uid, i + 1);
    }
    CHECK_EQ_INT(a.view.first_unseen, 999);
    CHECK_EQ_INT(b.view.first_unseen, 999);
    imap_view_free(&a.view);
    imap_view_free(&b.view);
    CHECK_EQ_INT(imap_chunks_live(), live); /* the cache keeps its own */
}

/* A flag change made elsewhere (another session's STORE, the CLI). */
static void test_change_copies_one_chunk(void)
{
    CHECK(tv_store != NULL);
    struct imap_session a, b, c;
    tv_session(&a);
    tv_session(&b);
    tv_session(&c);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_view_load(&b, "INBOX", 0), MV_OK);
    size_t live = imap_chunks_live();
    CHECK_EQ_INT(
        mv_flags_set(tv_store, "INBOX", "5000", MV_FLAGS_ADD, MV_FLAG_FLAGGED, "$Work", NULL),
        MV_OK);
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "20", MV_FLAGS_REMOVE, MV_FLAG_SEEN, NULL, NULL),
                 MV_OK);
    struct buf out = {0};
    CHECK_EQ_INT(imap_view_sync(&b, &out, 1), MV_OK);
    CHECK(out.data != NULL);
    CHECK(strstr(out.data, "* 5000 FETCH (UID 5000 FLAGS (\\Seen \\Flagged $Work))\r\n") != NULL);
    CHECK(strstr(out.data, "* 20 FETCH (UID 20 FLAGS ())\r\n") != NULL);
    CHECK(strstr(out.data, "* FLAGS (") != NULL && strstr(out.data, "$Work)") != NULL);
    CHECK_EQ_INT(imap_chunks_live(), live + 2); /* UIDs 20 and 5000: two chunks, not all */
    /* a has not synced: what it shows has not moved */
    CHECK_EQ_INT(imap_view_msg(&a.view, 4999)->flags, MV_FLAG_SEEN);
    CHECK_EQ_INT(imap_view_msg(&b.view, 4999)->flags, MV_FLAG_SEEN | MV_FLAG_FLAGGED);
    CHECK(imap_view_msg(&a.view, 9000) == imap_view_msg(&b.view, 9000)); /* still shared */
    /* a third SELECT: the cache merged the change; the first unseen and the keyword set
     * come from the cache */
    CHECK_EQ_INT(imap_view_load(&c, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(c.view.first_unseen, 20);
    CHECK_EQ_INT(c.view.keyword_count, 1);
    CHECK(c.view.keyword_count == 1 && strcmp(c.view.keyword_names[0], "$Work") == 0);
    CHECK_EQ_INT(imap_view_msg(&c.view, 4999)->flags, MV_FLAG_SEEN | MV_FLAG_FLAGGED);
    CHECK_EQ_INT(strcmp(imap_view_msg(&c.view, 4999)->keywords, "$Work"), 0);
    buf_free(&out);
    CHECK_EQ_INT(imap_view_sync(&a, &out, 1), MV_OK);
    CHECK(out.data != NULL && strstr(out.data, "* 5000 FETCH (UID 5000 FLAGS (\\Seen \\Flagged "
                                               "$Work))\r\n") != NULL);
    buf_free(&out);
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "20", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL),
                 MV_OK);
    imap_view_free(&c.view);
    CHECK_EQ_INT(imap_view_load(&c, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(c.view.first_unseen, 999); /* seen again: the cache looks further */
    imap_view_free(&a.view);
    imap_view_free(&b.view);
    imap_view_free(&c.view);
}

/* Expunges pending in b while c selects. */
static void test_pending_expunge(void)
{
    CHECK(tv_store != NULL);
    struct imap_session a, b, c;
    tv_session(&a);
    tv_session(&b);
    tv_session(&c);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_view_load(&b, "INBOX", 0), MV_OK);
    uint32_t n = 0;
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "10,4096:4097,9999", MV_FLAGS_ADD, MV_FLAG_DELETED,
                              NULL, NULL),
                 MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(tv_store, "INBOX", NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 4);
    struct buf out = {0};
    CHECK_EQ_INT(imap_view_sync(&b, &out, 0), MV_OK); /* as in a FETCH: not reported */
    CHECK(out.data == NULL || strstr(out.data, "EXPUNGE") == NULL);
    CHECK_EQ_INT(b.view.count, TV_COUNT);
    CHECK_EQ_INT(b.view.expunged_count, 4);
    CHECK_EQ_INT(imap_view_msg(&b.view, 9)->uid, 10); /* its numbers hold */
    CHECK((imap_view_marks(&b.view, 9) & IMAP_MARK_EXPUNGED) != 0);
    CHECK_EQ_INT(imap_view_load(&c, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(c.view.count, TV_COUNT - 4);
    CHECK_EQ_INT(imap_view_msg(&c.view, 9)->uid, 11);
    CHECK_EQ_INT(imap_view_msg(&c.view, 4093)->uid, 4095);
    CHECK_EQ_INT(imap_view_msg(&c.view, 4094)->uid, 4098);
    CHECK_EQ_INT(imap_view_marks(&c.view, 9), 0); /* b's marks are b's */
    buf_free(&out);
    CHECK_EQ_INT(imap_view_sync(&b, &out, 1), MV_OK);
    CHECK(out.data != NULL &&
          strstr(out.data, "* 10 EXPUNGE\r\n* 4095 EXPUNGE\r\n* 4095 EXPUNGE\r\n"
                           "* 9996 EXPUNGE\r\n* 9996 EXISTS\r\n") != NULL);
    CHECK_EQ_INT(b.view.count, TV_COUNT - 4);
    CHECK_EQ_INT(b.view.expunged_count, 0);
    for (size_t i = 0; i < b.view.count; i += 331) {
        CHECK_EQ_INT(imap_view_msg(&b.view, i)->uid, imap_view_msg(&c.view, i)->uid);
        CHECK_EQ_INT(imap_view_find_uid(&b.view, imap_view_msg(&b.view, i)->uid), i);
    }
    CHECK_EQ_INT(imap_view_msg(&b.view, b.view.count - 1)->uid, TV_COUNT);
    CHECK_EQ_INT(a.view.count, TV_COUNT); /* a never synced */
    CHECK_EQ_INT(imap_view_msg(&a.view, 9)->uid, 10);
    buf_free(&out);
    imap_view_free(&a.view);
    imap_view_free(&b.view);
    imap_view_free(&c.view);
}

/* \Recent on shared messages. */
static void test_recent_per_session(void)
{
    CHECK(tv_store != NULL);
    struct imap_session a, b;
    tv_session(&a);
    tv_session(&b);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_view_recent(&a, 0), MV_OK); /* as SELECT does */
    CHECK_EQ_INT(a.view.recent_count, a.view.count);
    CHECK_EQ_INT(imap_view_load(&b, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_view_recent(&b, 0), MV_OK);
    CHECK_EQ_INT(b.view.recent_count, 0);
    CHECK((imap_view_marks(&a.view, 0) & IMAP_MARK_RECENT) != 0);
    CHECK_EQ_INT(imap_view_marks(&b.view, 0) & IMAP_MARK_RECENT, 0);
    CHECK(imap_view_msg(&a.view, 0) == imap_view_msg(&b.view, 0));
    static const char msg[] = "From: n@example.org\r\nSubject: new\r\n\r\nnew\r\n";
    uint32_t uid = 0;
    CHECK_EQ_INT(mv_message_append(tv_store, "INBOX", msg, sizeof msg - 1, 0, NULL, 0, &uid),
                 MV_OK);
    struct buf out = {0};
    CHECK_EQ_INT(imap_view_sync(&b, &out, 1), MV_OK);
    CHECK(out.data != NULL && strstr(out.data, "EXISTS\r\n* 1 RECENT\r\n") != NULL);
    buf_free(&out);
    CHECK_EQ_INT(imap_view_sync(&a, &out, 1), MV_OK);
    CHECK_EQ_INT(a.view.recent_count, a.view.count - 1); /* the new one is b's */
    CHECK_EQ_INT(imap_view_marks(&a.view, a.view.count - 1) & IMAP_MARK_RECENT, 0);
    CHECK_EQ_INT(imap_view_msg(&a.view, a.view.count - 1)->uid, uid);
    buf_free(&out);
    struct imap_session c; /* the cache appends the new one to its last chunk */
    tv_session(&c);
    CHECK_EQ_INT(imap_view_load(&c, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(c.view.count, a.view.count);
    CHECK_EQ_INT(imap_view_msg(&c.view, c.view.count - 1)->uid, uid);
    CHECK_EQ_INT(c.view.first_unseen, 999 - 1); /* UID 10 went before it */
    CHECK_EQ_INT(imap_view_recent(&c, 0), MV_OK);
    CHECK_EQ_INT(c.view.recent_count, 0);
    imap_view_free(&a.view);
    imap_view_free(&b.view);
    imap_view_free(&c.view);
}

/* The chunk table against a plain array: base holds 3 * IMAP_CHUNK_MSGS + 100 messages;
 * a shares it, drops across boundaries and a whole chunk, appends; base never moves. */
static void test_chunk_table(void)
{
    size_t live = imap_chunks_live();
    struct imap_view base, a;
    memset(&base, 0, sizeof base);
    memset(&a, 0, sizeof a);
    size_t total = 3 * IMAP_CHUNK_MSGS + 100;
    uint32_t *model = malloc((total + 20000) * sizeof *model);
    CHECK(model != NULL);
    for (size_t i = 0; i < total; i++) {
        struct imap_msg m = {.uid = (uint32_t)(2 * i + 1), .keywords = imap_kw_new("k", NULL)};
        CHECK_EQ_INT(imap_view_push(&base, &m), MV_OK);
        model[i] = m.uid;
    }
    CHECK_EQ_INT(imap_chunks_live(), live + 4);
    CHECK_EQ_INT(imap_view_share(&a, &base), MV_OK);
    a.marks = calloc(total + 1, 1);
    a.marks_cap = total + 1;
    CHECK(a.marks != NULL);
    imap_view_mark(&a, total - 1, IMAP_MARK_RECENT);
    /* drop: 5, the whole second chunk, the first of the third, the last */
    size_t n = 0, *idx = malloc((IMAP_CHUNK_MSGS + 8) * sizeof *idx);
    CHECK(idx != NULL);
    idx[n++] = 5;
    for (size_t i = IMAP_CHUNK_MSGS; i <= 2 * IMAP_CHUNK_MSGS; i++) {
        idx[n++] = i;
    }
    idx[n++] = total - 2;
    for (size_t k = 0; k < n; k++) {
        CHECK_EQ_INT(imap_view_own(&a, idx[k]), MV_OK);
    }
    imap_view_drop(&a, idx, n);
    size_t kept = 0;
    for (size_t i = 0, k = 0; i < total; i++) {
        if (k < n && idx[k] == i) {
            k++;
        } else {
            model[kept++] = model[i];
        }
    }
    CHECK_EQ_INT(a.count, kept);
    CHECK_EQ_INT(a.marks[kept - 1], IMAP_MARK_RECENT); /* the marks moved with them */
    /* appends after the drops: into the short last chunk, then new ones */
    CHECK_EQ_INT(imap_view_reserve(&a, 5000), MV_OK);
    for (uint32_t i = 0; i < 5000; i++) {
        struct imap_msg m = {.uid = (uint32_t)(2 * total + 1 + i),
                             .keywords = imap_kw_new(NULL, NULL)};
        imap_view_append(&a, &m);
        model[kept++] = m.uid;
    }
    CHECK_EQ_INT(a.count, kept);
    for (size_t i = 0, from = 0; i < kept; i++) {
        CHECK_EQ_INT(imap_view_msg(&a, i)->uid, model[i]);
        CHECK_EQ_INT(imap_view_find_uid(&a, model[i]), i);
        CHECK_EQ_INT(imap_view_find_uid(&a, model[i] + 1), i + 1); /* no UID between */
        CHECK_EQ_INT(imap_view_find_uid_from(&a, from, model[i]), i);
        from = i % 7 == 0 ? i : from; /* gallops over gaps of 0-6 messages */
    }
    CHECK_EQ_INT(imap_view_find_uid_from(&a, 0, model[kept - 1] + 1), kept);
    CHECK_EQ_INT(imap_view_find_uid_from(&a, kept, UINT32_MAX), kept);
    CHECK_EQ_INT(imap_view_find_uid_from(&a, 0, 0), 0);
    CHECK_EQ_INT(a.marks[kept - 5001], IMAP_MARK_RECENT);
    for (size_t i = 0; i < total; i++) { /* the shared view is untouched */
        CHECK_EQ_INT(imap_view_msg(&base, i)->uid, 2 * i + 1);
        CHECK_EQ_INT(strcmp(imap_view_msg(&base, i)->keywords, "k"), 0);
    }
    imap_view_free(&a);
    CHECK_EQ_INT(imap_chunks_live(), live + 4);
    imap_view_free(&base);
    CHECK_EQ_INT(imap_chunks_live(), live);
    free(idx);
    free(model);
}

/* A sync that expunges every message of the last chunk and appends a new one, in a view
 * whose chunk before it is short (expunges merged before the view was shared) and shared:
 * the new message goes to the emptied chunk, the room imap_view_reserve counted (the first
 * build put it into the shared chunk before it: an assertion, or a write another view sees). */
static void test_append_after_last_chunk_emptied(void)
{
    size_t live = imap_chunks_live();
    struct imap_view cache, s;
    memset(&cache, 0, sizeof cache);
    memset(&s, 0, sizeof s);
    size_t total = IMAP_CHUNK_MSGS + 10;
    for (size_t i = 0; i < total; i++) {
        struct imap_msg m = {.uid = (uint32_t)(i + 1), .keywords = imap_kw_new(NULL, NULL)};
        CHECK_EQ_INT(imap_view_push(&cache, &m), MV_OK);
    }
    size_t one = 100; /* the first chunk made short: 4,095 messages */
    CHECK_EQ_INT(imap_view_own(&cache, one), MV_OK);
    imap_view_drop(&cache, &one, 1);
    CHECK_EQ_INT(imap_view_share(&s, &cache), MV_OK);
    s.marks = calloc(s.count + 1, 1);
    s.marks_cap = s.count + 1;
    CHECK(s.marks != NULL);
    CHECK_EQ_INT(imap_view_reserve(&s, 1), MV_OK); /* as imap_view_apply prepares */
    size_t idx[10];
    for (size_t k = 0; k < 10; k++) {
        idx[k] = IMAP_CHUNK_MSGS - 1 + k; /* the last chunk, all of it */
        CHECK_EQ_INT(imap_view_own(&s, idx[k]), MV_OK);
    }
    imap_view_drop(&s, idx, 10);
    CHECK_EQ_INT(s.count, IMAP_CHUNK_MSGS - 1);
    struct imap_msg m = {.uid = 90000, .keywords = imap_kw_new(NULL, NULL)};
    imap_view_append(&s, &m);
    CHECK_EQ_INT(s.count, IMAP_CHUNK_MSGS);
    CHECK_EQ_INT(imap_view_msg(&s, IMAP_CHUNK_MSGS - 1)->uid, 90000);
    CHECK_EQ_INT(imap_view_msg(&s, IMAP_CHUNK_MSGS - 2)->uid, IMAP_CHUNK_MSGS);
    CHECK_EQ_INT(imap_view_find_uid(&s, 90000), IMAP_CHUNK_MSGS - 1);
    /* the cache's view never saw it */
    CHECK_EQ_INT(cache.count, total - 1);
    CHECK_EQ_INT(imap_view_msg(&cache, IMAP_CHUNK_MSGS - 2)->uid, IMAP_CHUNK_MSGS);
    CHECK_EQ_INT(imap_view_msg(&cache, IMAP_CHUNK_MSGS - 1)->uid, IMAP_CHUNK_MSGS + 1);
    CHECK_EQ_INT(imap_view_msg(&cache, total - 2)->uid, total);
    imap_view_free(&s);
    imap_view_free(&cache);
    CHECK_EQ_INT(imap_chunks_live(), live);
}

static void test_teardown(void)
{
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(imap_chunks_live(), 0); /* every reference given back */
    mv_store_close(&tv_store);
}

int main(void)
{
    TEST(test_setup);
    TEST(test_second_select_shares);
    TEST(test_change_copies_one_chunk);
    TEST(test_pending_expunge);
    TEST(test_recent_per_session);
    TEST(test_chunk_table);
    TEST(test_append_after_last_chunk_emptied);
    TEST(test_teardown);
    return th_summary();
}
