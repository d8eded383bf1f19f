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
 *   - The chunk table against a model over 1,500 fixed steps (a linear congruential
 *     sequence, the same every run): the cache and two sessions remove (a few, runs across
 *     chunks, whole last chunks), append, change flags and keywords and select again, in
 *     the orders imap_view_apply and the cache's merge use; after each step every view
 *     still reads what its model holds, so no view ever wrote a chunk another one reads.
 *   - Mail that comes and mostly goes in a view that lives on: the chunks stay as many as
 *     the messages need (imap_view_compact), nothing else of the view changes.
 *   - The body keys: the view has the listing's key of every message; the saved view keeps
 *     them; a saved view of version 1 is listed again, not loaded; one of version 2 is
 *     decoded whole (with its keywords) and saved anew in version 3.
 *   - A saved view is decoded on first use: a SELECT that loads it decodes only the chunk of
 *     its first unseen message, the cache's merge only the chunks it changes, a save copies
 *     the chunks still pending; two threads reading one pending chunk see the same messages;
 *     a count whose bit is flipped does not decode (the SELECT lists instead).
 *   - A chunk reserved to be filled has its pages resident before anything is written to
 *     them (faulted in with one system call, not one fault a page: ~40% of a cold SELECT's
 *     CPU at 100,000 messages), and one reserved for a single message has not (a small
 *     mailbox's view keeps the memory it uses); mincore() tells.
 * At the end every chunk is freed (references balance) and ASan's leak check covers the
 * keyword strings.
 */
#include "harness.h"
#include "testutil.h"

#include "../imapd/buf.h"
#include "../imapd/config.h"
#include "../imapd/imap_session.h"
#include "../imapd/worker.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

struct config g_config; /* main.c's, which is not linked here */

#define TV_PW    "view password"
#define TV_COUNT 10000u

static mv_store *tv_store;
static struct open_store tv_os;

/* Takes \Seen off the messages whose UID is a multiple of 1000 plus 999 (first: 999). */
/* 1 if the keyword list reads as text. */
static int kw_is(const struct imap_kw *kw, const char *text)
{
    char got[256];
    if (imap_kw_text_len(kw) >= sizeof got) {
        return 0;
    }
    *imap_kw_text_put(kw, got) = '\0';
    return strcmp(got, text) == 0;
}

static void tv_unseen_999(void)
{
    char set[64];
    for (unsigned u = 999; u <= TV_COUNT; u += 1000) {
        snprintf(set, sizeof set, "%u", u);
        CHECK_EQ_INT(
            mv_flags_set(tv_store, "INBOX", set, MV_FLAGS_REMOVE, MV_FLAG_SEEN, NULL, NULL), MV_OK);
    }
}

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
    tv_unseen_999(); /* the first unseen is 999 */
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

/* Three sessions, a and b with INBOX selected, c not yet. */
static void
tv_sessions_three(struct imap_session *a, struct imap_session *b, struct imap_session *c)
{
    tv_session(a);
    tv_session(b);
    tv_session(c);
    CHECK_EQ_INT(imap_view_load(a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_view_load(b, "INBOX", 0), MV_OK);
}

static void tv_sessions_free(struct imap_session *a, struct imap_session *b, struct imap_session *c)
{
    imap_view_free(&a->view);
    imap_view_free(&b->view);
    imap_view_free(&c->view);
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

/* The saved view of the whole 10,000-message INBOX (three chunks, decoded in batches of 256)
 * reads back exactly as a fresh listing: every field of every message, some with keywords,
 * and the keyword set. */
static void test_saved_view_round_trip(void)
{
    CHECK(tv_store != NULL);
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "300:310,4095:4097", MV_FLAGS_ADD, 0,
                              "$Label1 round", NULL),
                 MV_OK);
    struct imap_session a;
    tv_session(&a);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK); /* the cache, brought up to date */
    imap_view_free(&a.view);
    imap_view_cache_save(tv_os.view_cache, tv_store);
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK); /* decoded from the saved view */
    struct imap_view listed;
    memset(&listed, 0, sizeof listed);
    CHECK_EQ_INT(imap_view_list(tv_store, "INBOX", 0, &listed), MV_OK);
    CHECK_EQ_INT(a.view.count, TV_COUNT);
    CHECK_EQ_INT(listed.count, TV_COUNT);
    size_t differ = 0, with_keywords = 0;
    for (size_t i = 0; i < listed.count && i < a.view.count; i++) {
        const struct imap_msg *x = imap_view_msg(&a.view, i), *y = imap_view_msg(&listed, i);
        differ += x->uid != y->uid || x->flags != y->flags || x->modseq != y->modseq ||
                  x->size != y->size || x->internal_date != y->internal_date ||
                  x->body_key != y->body_key || y->body_key == 0 ||
                  !imap_kw_equal(x->keywords, y->keywords);
        with_keywords += imap_kw_count(x->keywords) > 0;
    }
    CHECK_EQ_INT(differ, 0);
    CHECK_EQ_INT(with_keywords, 14);
    /* the keyword set SELECT announces in FLAGS, made by the decode, not a walk after it */
    CHECK_EQ_INT(a.view.keyword_count, 2);
    for (size_t i = 0; i < a.view.keyword_count && i < 2; i++) {
        CHECK(strcmp(a.view.keyword_names[i], "$Label1") == 0 ||
              strcmp(a.view.keyword_names[i], "round") == 0);
    }
    /* The same bytes given to the decoder in pieces that end anywhere: inside the magic, the
     * count, a message's values and its keyword text (1 byte at a time), around a message's
     * most fixed bytes (69-71), and as mv_mailbox_view_read cuts them. Cut short or with a
     * byte more, they do not decode. */
    void *saved = NULL;
    size_t saved_len = 0;
    uint32_t saved_uidvalidity = 0;
    uint64_t saved_modseq = 0;
    CHECK_EQ_INT(mv_mailbox_view_load(tv_store, "INBOX", &saved_uidvalidity, &saved_modseq, &saved,
                                      &saved_len),
                 MV_OK);
    CHECK(saved != NULL && saved_len > 256); /* compressed: these messages differ little */
    const size_t pieces[] = {1, 2, 7, 69, 70, 71, 4096, MV_VIEW_READ_PIECE, saved_len};
    for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
        struct imap_view d;
        memset(&d, 0, sizeof d);
        CHECK_EQ_INT(imap_view_decode_pieces(saved, saved_len, pieces[k], &d), MV_OK);
        CHECK_EQ_INT(d.count, listed.count);
        size_t wrong = 0;
        for (size_t i = 0; i < listed.count && i < d.count; i++) {
            const struct imap_msg *x = imap_view_msg(&d, i), *y = imap_view_msg(&listed, i);
            wrong += x->uid != y->uid || x->flags != y->flags || x->modseq != y->modseq ||
                     x->size != y->size || x->internal_date != y->internal_date ||
                     x->body_key != y->body_key || !imap_kw_equal(x->keywords, y->keywords);
        }
        CHECK_EQ_INT(wrong, 0);
        CHECK_EQ_INT(d.keyword_count, 2);
        CHECK_EQ_INT(d.seen_below, 999); /* the first unseen, from the decode: no walk after */
        imap_view_free(&d);
        CHECK_EQ_INT(imap_view_decode_pieces(saved, saved_len - 1, pieces[k], &d), MV_ECORRUPT);
        CHECK_EQ_INT(d.count, 0);
    }
    unsigned char *longer = malloc(saved_len + 1);
    CHECK(longer != NULL);
    memcpy(longer, saved, saved_len);
    longer[saved_len] = 0;
    struct imap_view d;
    memset(&d, 0, sizeof d);
    CHECK_EQ_INT(imap_view_decode_pieces(longer, saved_len + 1, 7, &d), MV_ECORRUPT);
    CHECK_EQ_INT(d.count, 0);
    /* a count one off (its lowest bit flipped) no longer adds up with the chunks' */
    longer[4] ^= 1;
    CHECK_EQ_INT(imap_view_decode_pieces(longer, saved_len, 7, &d), MV_ECORRUPT);
    CHECK_EQ_INT(d.count, 0);
    free(longer);
    mv_free(saved);
    imap_view_free(&listed);
    imap_view_free(&a.view);
    /* every message \Seen: the decode says none is unseen (the SELECT then walks nothing) */
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "1:*", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL),
                 MV_OK);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(a.view.first_unseen, 0);
    imap_view_free(&a.view);
    imap_view_cache_save(tv_os.view_cache, tv_store);
    CHECK_EQ_INT(mv_mailbox_view_load(tv_store, "INBOX", &saved_uidvalidity, &saved_modseq, &saved,
                                      &saved_len),
                 MV_OK);
    CHECK_EQ_INT(imap_view_decode_pieces(saved, saved_len, MV_VIEW_READ_PIECE, &d), MV_OK);
    CHECK_EQ_INT(d.seen_below, UINT32_MAX);
    imap_view_free(&d);
    mv_free(saved);
    tv_unseen_999();
    /* as it was for the tests below: no keywords, and a cache that never saw them */
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "300:310,4095:4097", MV_FLAGS_REMOVE, 0,
                              "$Label1 round", NULL),
                 MV_OK);
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(tu_exec(mv_store_db(tv_store), "DELETE FROM mailbox_views"), SQLITE_OK);
}

/* A flag change made elsewhere (another session's STORE, the CLI). */
static void test_change_copies_one_chunk(void)
{
    CHECK(tv_store != NULL);
    struct imap_session a, b, c;
    tv_sessions_three(&a, &b, &c);
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
    CHECK(kw_is(imap_view_msg(&c.view, 4999)->keywords, "$Work"));
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
    tv_sessions_free(&a, &b, &c);
}

/* Expunges pending in b while c selects. */
static void test_pending_expunge(void)
{
    CHECK(tv_store != NULL);
    struct imap_session a, b, c;
    tv_sessions_three(&a, &b, &c);
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
    tv_sessions_free(&a, &b, &c);
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
    tv_sessions_free(&a, &b, &c);
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
        CHECK(kw_is(imap_view_msg(&base, i)->keywords, "k"));
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

/* ---- the chunk table against a model, over a long fixed sequence of operations ---- */

/* A fixed linear congruential sequence: the same operations every run (no random byte). */
static uint32_t tv_seq = 20261202u;
static uint32_t tv_next(uint32_t n)
{
    tv_seq = tv_seq * 1103515245u + 12345u;
    return (tv_seq >> 8) % n;
}

/* What a view should hold: UIDs, flags, marks (a session's), in index order. */
struct tv_model {
    uint32_t *uid;
    unsigned *flags;
    unsigned char *marks;
    size_t count;
};

static int tv_model_fits(struct tv_model *m, size_t count)
{
    uint32_t *uid = realloc(m->uid, (count + 1) * sizeof *uid);
    if (uid != NULL) {
        m->uid = uid;
    }
    unsigned *flags = realloc(m->flags, (count + 1) * sizeof *flags);
    if (flags != NULL) {
        m->flags = flags;
    }
    unsigned char *marks = realloc(m->marks, count + 1);
    if (marks != NULL) {
        m->marks = marks;
    }
    return uid != NULL && flags != NULL && marks != NULL;
}

static void tv_model_free(struct tv_model *m)
{
    free(m->uid);
    free(m->flags);
    free(m->marks);
    memset(m, 0, sizeof *m);
}

/* Removes the model's messages at idx (ascending, distinct). */
static void tv_model_drop(struct tv_model *m, const size_t *idx, size_t n)
{
    size_t kept = 0;
    for (size_t i = 0, k = 0; i < m->count; i++) {
        if (k < n && idx[k] == i) {
            k++;
            continue;
        }
        m->uid[kept] = m->uid[i];
        m->flags[kept] = m->flags[i];
        m->marks[kept++] = m->marks[i];
    }
    m->count = kept;
}

/* The index of the first message of v that differs from m (checking every message when
 * full, else the ends and a few others), or -1 if none; -2: the counts differ. */
static long tv_model_diff(const struct imap_view *v, const struct tv_model *m, int full)
{
    if (v->count != m->count) {
        return -2;
    }
    for (size_t k = 0; k < (full ? m->count : 40) && m->count > 0; k++) {
        size_t i = full ? k : k == 0 ? 0 : k == 1 ? m->count - 1 : tv_next((uint32_t)m->count);
        const struct imap_msg *msg = imap_view_msg(v, i);
        if (msg->uid != m->uid[i] || msg->flags != m->flags[i] ||
            (v->marks != NULL && v->marks[i] != m->marks[i]) ||
            imap_view_find_uid(v, m->uid[i]) != i) {
            return (long)i;
        }
    }
    return -1;
}

/* Which messages an operation removes from v (ascending, distinct, into idx): none, a few,
 * a run that can span chunks, or the tail from the last chunk's first message on (that
 * chunk emptied, and at times more before it). */
static size_t tv_pick_drops(const struct imap_view *v, size_t *idx)
{
    size_t n = 0, count = v->count;
    uint32_t kind = count > 0 ? tv_next(4) : 0;
    if (kind == 1) {
        for (uint32_t k = 0, want = 1 + tv_next(5); k < want; k++) {
            size_t i = tv_next((uint32_t)count), at = n;
            while (at > 0 && idx[at - 1] > i) {
                at--;
            }
            if (at > 0 && idx[at - 1] == i) {
                continue;
            }
            memmove(idx + at + 1, idx + at, (n - at) * sizeof *idx);
            idx[at] = i;
            n++;
        }
    } else if (kind == 2 || kind == 3) {
        size_t last = v->parts[imap_view_part_of(v, count - 1)].start;
        size_t len =
            kind == 2 ? 1 + tv_next(5000) : count - last + (size_t)tv_next(2) * tv_next(300);
        len = len < count ? len : count;
        size_t from = kind == 2 ? tv_next((uint32_t)(count - len + 1)) : count - len;
        for (size_t k = 0; k < len; k++) {
            idx[n++] = from + k;
        }
    }
    return n;
}

/* A new message for v: the next UID, "k" as keywords now and then (references to count). */
static struct imap_msg tv_new_msg(uint32_t *next_uid)
{
    uint32_t uid = (*next_uid)++;
    return (struct imap_msg){.uid = uid,
                             .flags = uid % 5 == 0 ? MV_FLAG_SEEN : 0,
                             .keywords = imap_kw_new(uid % 7 == 0 ? "k" : NULL, NULL)};
}

/* One sync of a session's view as imap_view_apply does it (room first, the chunks of the
 * removed made its own, the removal, then the appends), or the cache's merge order (room,
 * own, appends, then the removal); then a flag and keyword change of one message. MV_OK or
 * the first call that failed. */
static int tv_step(struct imap_view *v, struct tv_model *m, int cache_order, uint32_t *next_uid)
{
    size_t *idx = malloc((v->count + 1) * sizeof *idx);
    if (idx == NULL || !tv_model_fits(m, m->count + 40)) {
        free(idx);
        return MV_ENOMEM;
    }
    size_t n = tv_pick_drops(v, idx);
    size_t add = tv_next(4) == 0 ? 0 : 1 + tv_next(30);
    int rc = imap_view_reserve(v, add);
    for (size_t k = 0; rc == MV_OK && k < n; k++) {
        rc = imap_view_own(v, idx[k]);
    }
    if (rc != MV_OK) {
        free(idx);
        return rc;
    }
    if (!cache_order) {
        imap_view_drop(v, idx, n);
        tv_model_drop(m, idx, n);
    }
    for (size_t k = 0; k < add; k++) {
        struct imap_msg msg = tv_new_msg(next_uid);
        imap_view_append(v, &msg);
        m->uid[m->count] = msg.uid;
        m->flags[m->count] = msg.flags;
        m->marks[m->count] = 0;
        if (v->marks != NULL && msg.uid % 3 == 0) {
            imap_view_mark(v, v->count - 1, IMAP_MARK_RECENT);
            m->marks[m->count] = IMAP_MARK_RECENT;
        }
        m->count++;
    }
    if (cache_order) {
        imap_view_drop(v, idx, n);
        tv_model_drop(m, idx, n);
    }
    if (n > 0) {
        imap_view_compact(v); /* as imap_view_apply and the merge do after removals */
    }
    free(idx);
    if (v->count > 0) { /* a flag change: the message's chunk made its own first */
        size_t i = tv_next((uint32_t)v->count);
        if ((rc = imap_view_own(v, i)) != MV_OK) {
            return rc;
        }
        struct imap_msg *msg = imap_view_msg_mut(v, i);
        msg->flags ^= MV_FLAG_FLAGGED;
        imap_kw_unref(msg->keywords);
        msg->keywords = imap_kw_new("changed", NULL);
        m->flags[i] ^= MV_FLAG_FLAGGED;
    }
    return MV_OK;
}

/* A session selects: its view shares the cache's messages, its marks none. */
static int tv_select(struct imap_view *s,
                     struct tv_model *sm,
                     const struct imap_view *c,
                     const struct tv_model *cm)
{
    imap_view_msgs_free(s);
    memset(s, 0, sizeof *s);
    if (imap_view_share(s, c) != MV_OK || (s->marks = calloc(c->count + 1, 1)) == NULL ||
        !tv_model_fits(sm, cm->count)) {
        return MV_ENOMEM;
    }
    s->marks_cap = c->count + 1;
    memcpy(sm->uid, cm->uid, cm->count * sizeof *sm->uid);
    memcpy(sm->flags, cm->flags, cm->count * sizeof *sm->flags);
    memset(sm->marks, 0, cm->count);
    sm->count = cm->count;
    return MV_OK;
}

/* The cache and two sessions, each changed in turn (syncs that remove and append, flag
 * changes, SELECTs that share again) over 1,500 steps, each checked against its model after
 * every step, every message every 100 steps: whatever one view does, what the others read
 * never moves (a chunk written while shared shows there), and every chunk and keyword
 * reference is given back at the end. The first build failed at its first sync that emptied
 * a last chunk behind a short shared one (the assert in imap_view_append). */
static void test_chunk_model(void)
{
    size_t live = imap_chunks_live();
    struct imap_view views[3];
    struct tv_model models[3];
    memset(views, 0, sizeof views);
    memset(models, 0, sizeof models);
    uint32_t next_uid = 1;
    CHECK(tv_model_fits(&models[0], (size_t)3 * IMAP_CHUNK_MSGS + 500));
    for (size_t i = 0; i < (size_t)3 * IMAP_CHUNK_MSGS + 500; i++) {
        struct imap_msg msg = tv_new_msg(&next_uid);
        CHECK_EQ_INT(imap_view_push(&views[0], &msg), MV_OK);
        models[0].uid[i] = msg.uid;
        models[0].flags[i] = msg.flags;
        models[0].marks[i] = 0;
        models[0].count++;
    }
    CHECK_EQ_INT(tv_select(&views[1], &models[1], &views[0], &models[0]), MV_OK);
    CHECK_EQ_INT(tv_select(&views[2], &models[2], &views[0], &models[0]), MV_OK);
    for (int step = 0; step < 1500; step++) {
        uint32_t who = tv_next(3), what = tv_next(8);
        if (who > 0 && what == 0) {
            CHECK_EQ_INT(tv_select(&views[who], &models[who], &views[0], &models[0]), MV_OK);
        } else {
            CHECK_EQ_INT(tv_step(&views[who], &models[who], who == 0, &next_uid), MV_OK);
        }
        if (views[0].count < (size_t)2 * IMAP_CHUNK_MSGS) { /* keep several chunks in play */
            CHECK_EQ_INT(tv_step(&views[0], &models[0], 1, &next_uid), MV_OK);
            for (int k = 0; k < 200 && views[0].count < (size_t)3 * IMAP_CHUNK_MSGS; k++) {
                struct imap_msg msg = tv_new_msg(&next_uid);
                CHECK(tv_model_fits(&models[0], models[0].count + 1));
                CHECK_EQ_INT(imap_view_push(&views[0], &msg), MV_OK);
                models[0].uid[models[0].count] = msg.uid;
                models[0].flags[models[0].count] = msg.flags;
                models[0].marks[models[0].count++] = 0;
            }
        }
        for (int k = 0; k < 3; k++) {
            CHECK_EQ_INT(tv_model_diff(&views[k], &models[k], step % 100 == 99), -1);
        }
    }
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(tv_model_diff(&views[k], &models[k], 1), -1);
        imap_view_msgs_free(&views[k]);
        tv_model_free(&models[k]);
    }
    CHECK_EQ_INT(imap_chunks_live(), live);
}

/* Mail that comes and mostly goes again, in a view that lives on (a store kept open by a
 * client in IDLE): 40 rounds of 4,096 new messages, each round removing all but one of the
 * round before's (no longer in the last chunk), the removal followed by imap_view_compact as
 * imap_view_apply and the cache's merge call it. The chunks stay about as many as the
 * messages need (a chunk is freed only when its last message goes: without the compaction
 * 41 chunks of 160 KB held 40 messages), and the messages, their order, their marks and a
 * view that shared the old chunks are unchanged. */
static void test_compact_after_churn(void)
{
    size_t live = imap_chunks_live();
    struct imap_view a, other;
    memset(&a, 0, sizeof a);
    memset(&other, 0, sizeof other);
    a.marks = calloc(1, 1);
    a.marks_cap = 1;
    CHECK(a.marks != NULL);
    uint32_t uid = 1;
    size_t *idx = malloc(IMAP_CHUNK_MSGS * sizeof *idx);
    CHECK(idx != NULL);
    for (size_t round = 0; round <= 40; round++) {
        size_t kept = round > 0 ? round - 1 : 0; /* one of each round before the last */
        if (round < 40) {
            CHECK_EQ_INT(imap_view_reserve(&a, IMAP_CHUNK_MSGS), MV_OK);
            for (size_t k = 0; k < IMAP_CHUNK_MSGS; k++) {
                struct imap_msg m = {.uid = uid++,
                                     .keywords = imap_kw_new(k % 2 ? "k" : NULL, NULL)};
                imap_view_append(&a, &m);
            }
            imap_view_mark(&a, a.count - IMAP_CHUNK_MSGS, IMAP_MARK_RECENT); /* it stays */
        }
        if (round == 0) {
            continue;
        }
        for (size_t k = 1; k < IMAP_CHUNK_MSGS; k++) { /* the round before's but its first */
            idx[k - 1] = kept + k;
            CHECK_EQ_INT(imap_view_own(&a, kept + k), MV_OK);
        }
        imap_view_drop(&a, idx, IMAP_CHUNK_MSGS - 1);
        imap_view_compact(&a);
        if (round == 20) { /* a view that shares the chunks of the moment */
            CHECK_EQ_INT(imap_view_share(&other, &a), MV_OK);
        }
    }
    CHECK_EQ_INT(a.count, 40);
    CHECK(a.part_count <= 3);
    for (size_t i = 0; i < a.count; i++) {
        CHECK_EQ_INT(imap_view_msg(&a, i)->uid, 1 + i * IMAP_CHUNK_MSGS);
        CHECK_EQ_INT(imap_view_marks(&a, i), IMAP_MARK_RECENT);
        CHECK_EQ_INT(imap_view_find_uid(&a, (uint32_t)(1 + i * IMAP_CHUNK_MSGS)), i);
    }
    CHECK_EQ_INT(other.count, 20 + IMAP_CHUNK_MSGS);
    for (size_t i = 0; i < other.count; i++) {
        CHECK_EQ_INT(imap_view_msg(&other, i)->uid,
                     i < 20 ? 1 + i * IMAP_CHUNK_MSGS : 1 + 20 * IMAP_CHUNK_MSGS + (i - 20));
    }
    imap_view_msgs_free(&other);
    CHECK(imap_chunks_live() <= live + 3);
    imap_view_msgs_free(&a);
    CHECK_EQ_INT(imap_chunks_live(), live);
    free(idx);
}

/* The callers of imap_view_compact (d38f4aa): a session's sync and the cache's merge compact
 * after their removals. test_compact_after_churn calls it itself, so it passed with both calls
 * taken out. INBOX's messages, over three chunks or more, lose all but the first of each
 * chunk: the sync that reports it leaves the session one chunk, and the merge of the next
 * SELECT leaves the cache one (without the calls: one chunk per message kept, 3 != 1). */
static void test_sync_and_merge_compact(void)
{
    CHECK(tv_store != NULL);
    struct imap_session a, b;
    tv_session(&a);
    tv_session(&b);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK(a.view.part_count >= 3 && a.view.part_count <= 8);
    char keep[128] = "";
    uint32_t kept[8];
    size_t parts = a.view.part_count;
    for (size_t p = 0; p < parts && p < 8; p++) {
        kept[p] = imap_view_msg(&a.view, a.view.parts[p].start)->uid;
        size_t at = strlen(keep);
        snprintf(keep + at, sizeof keep - at, "%s%u", p > 0 ? "," : "", kept[p]);
    }
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "1:*", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL),
                 MV_OK);
    CHECK_EQ_INT(
        mv_flags_set(tv_store, "INBOX", keep, MV_FLAGS_REMOVE, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    uint32_t n = 0;
    CHECK_EQ_INT(mv_mailbox_expunge(tv_store, "INBOX", NULL, &n), MV_OK);
    CHECK_EQ_INT(n + parts, a.view.count);
    struct buf out = {0};
    CHECK_EQ_INT(imap_view_sync(&a, &out, 1), MV_OK); /* reports the expunges and removes */
    buf_free(&out);
    CHECK_EQ_INT(a.view.count, parts);
    CHECK_EQ_INT(a.view.part_count, 1);                  /* the session's sync compacted */
    CHECK_EQ_INT(imap_view_load(&b, "INBOX", 0), MV_OK); /* the cache's merge removes */
    CHECK_EQ_INT(b.view.count, parts);
    CHECK_EQ_INT(b.view.part_count, 1); /* the cache's chunks, shared: compacted too */
    for (size_t i = 0; i < parts; i++) {
        CHECK_EQ_INT(imap_view_msg(&a.view, i)->uid, kept[i]);
        CHECK_EQ_INT(imap_view_msg(&b.view, i)->uid, kept[i]);
    }
    imap_view_free(&a.view);
    imap_view_free(&b.view);
    CHECK_EQ_INT(imap_chunks_live(), 1); /* the cache's one */
}

/* LEB128, as the saved view's encoding (imapd/imap_view_cache.c). */
static size_t tv_put(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7) {
        p[n++] = (unsigned char)(v | 0x80);
    }
    p[n++] = (unsigned char)v;
    return n;
}

/* The version of INBOX's saved view: its magic's last byte ('1', '2', '3'), 0 if none. */
static int tv_saved_version(void)
{
    return (int)tu_int(mv_store_db(tv_store), "SELECT unicode(substr(CAST(data AS TEXT), 4, 1)) "
                                              "FROM mailbox_views v JOIN mailboxes m ON "
                                              "m.id = v.mailbox_id WHERE m.name = 'INBOX'");
}

/* INBOX's listing, in UID order: its entries' body keys (malloc'd) and count. */
static uint64_t *tv_listed_keys(size_t *count)
{
    mv_message_iter *it = NULL;
    struct mv_message_entry e;
    size_t n = 0, cap = TV_COUNT + 16;
    uint64_t *keys = calloc(cap, sizeof *keys);
    int rc = keys != NULL ? mv_message_list_begin(tv_store, "INBOX", 0, 0, &it) : MV_ENOMEM;
    while (rc == MV_OK && n < cap && mv_message_list_next(it, &e) == 1) {
        keys[n++] = e.body_key;
    }
    mv_message_list_end(&it);
    *count = n;
    return keys;
}

/* 1 if every message of v has the listing's body key (none 0). */
static int tv_keys_match(const struct imap_view *v, const uint64_t *keys, size_t n)
{
    int ok = v->count == n;
    for (size_t i = 0; ok && i < n; i++) {
        ok = keys[i] != 0 && imap_view_msg(v, i)->body_key == keys[i];
    }
    return ok;
}

/* The body keys (FETCH of whole messages by key, mv_message_fetch_keyed_into): a listed view
 * has the listing's key for every message, the saved view keeps them (version 3), and a
 * saved view of version 1, which has none, is listed again instead of loaded, so no cached
 * view is ever without its keys (a version 1 view that matches the mailbox would otherwise
 * load, and every message would be read by UID). A view of version 2 (its messages in one
 * run, keyword text inline: no chunk can be decoded by itself) is decoded whole once, as
 * before version 3, and saved in version 3 when the store closes. */
static void test_saved_view_keys(void)
{
    CHECK(tv_store != NULL);
    size_t n = 0;
    uint64_t *keys = tv_listed_keys(&n);
    CHECK(keys != NULL && n >= 3);
    struct imap_session a;
    tv_session(&a);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK(tv_keys_match(&a.view, keys, n));
    uint32_t uidvalidity = a.view.uidvalidity;
    uint64_t modseq = a.view.highestmodseq;
    imap_view_free(&a.view);
    imap_view_cache_save(tv_os.view_cache, tv_store);
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(tv_saved_version(), '3');
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK); /* from the saved view */
    CHECK(tv_keys_match(&a.view, keys, n));
    /* the same messages in version 1 (no keys), saved at the mailbox's modseq */
    unsigned char *v1 = malloc(16 + n * 64);
    CHECK(v1 != NULL);
    size_t len = 0;
    memcpy(v1, "MVV1", 4);
    len = 4 + tv_put(v1 + 4, n);
    uint64_t uid = 0, date = 0;
    for (size_t i = 0; i < n; i++) {
        const struct imap_msg *m = imap_view_msg(&a.view, i);
        uint64_t d = (uint64_t)m->internal_date - date;
        len += tv_put(v1 + len, m->uid - uid);
        len += tv_put(v1 + len, m->flags);
        len += tv_put(v1 + len, m->modseq);
        len += tv_put(v1 + len, m->size);
        len += tv_put(v1 + len, (d << 1) ^ (uint64_t) - (int64_t)(d >> 63));
        CHECK(imap_kw_count(m->keywords) == 0);
        v1[len++] = 0; /* no keywords */
        uid = m->uid;
        date = (uint64_t)m->internal_date;
    }
    imap_view_free(&a.view);
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(mv_mailbox_view_save(tv_store, "INBOX", uidvalidity, modseq, v1, len), MV_OK);
    free(v1);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK(tv_keys_match(&a.view, keys, n));
    /* version 2: the same with the body key's delta before the keywords, the first message
     * \Flagged there only (the store does not have it), message 2 with keywords and message 3
     * with the same (the tests before left three): decoded whole (a listing would not have
     * the flag), saved anew */
    unsigned char *v2 = malloc(16 + n * 80);
    CHECK(v2 != NULL);
    memcpy(v2, "MVV2", 4);
    len = 4 + tv_put(v2 + 4, n);
    uid = date = 0;
    uint64_t key = 0;
    for (size_t i = 0; i < n; i++) {
        const struct imap_msg *m = imap_view_msg(&a.view, i);
        uint64_t d = (uint64_t)m->internal_date - date, k = (uint64_t)m->body_key - key;
        len += tv_put(v2 + len, m->uid - uid);
        len += tv_put(v2 + len, i == 0 ? m->flags | MV_FLAG_FLAGGED : m->flags);
        len += tv_put(v2 + len, m->modseq);
        len += tv_put(v2 + len, m->size);
        len += tv_put(v2 + len, (d << 1) ^ (uint64_t) - (int64_t)(d >> 63));
        len += tv_put(v2 + len, (k << 1) ^ (uint64_t) - (int64_t)(k >> 63));
        if (i == 1) {
            len += tv_put(v2 + len, 2 + 5);
            memcpy(v2 + len, "$Work", 5);
            len += 5;
        } else {
            v2[len++] = i == 2 ? 1 : 0; /* 1: message 2's */
        }
        uid = m->uid;
        date = (uint64_t)m->internal_date;
        key = m->body_key;
    }
    imap_view_free(&a.view);
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(mv_mailbox_view_save(tv_store, "INBOX", uidvalidity, modseq, v2, len), MV_OK);
    free(v2);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK(tv_keys_match(&a.view, keys, n));
    CHECK_EQ_INT(imap_chunks_pending(), 0); /* decoded whole */
    CHECK_EQ_INT(imap_view_msg(&a.view, 0)->flags & MV_FLAG_FLAGGED, MV_FLAG_FLAGGED);
    CHECK(kw_is(imap_view_msg(&a.view, 1)->keywords, "$Work"));
    CHECK(kw_is(imap_view_msg(&a.view, 2)->keywords, "$Work"));
    CHECK_EQ_INT(a.view.keyword_count, 1);
    imap_view_free(&a.view);
    imap_view_cache_save(tv_os.view_cache, tv_store); /* no change since: saved all the same */
    CHECK_EQ_INT(tv_saved_version(), '3');
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK); /* version 3 of the same */
    CHECK_EQ_INT(imap_view_msg(&a.view, 0)->flags & MV_FLAG_FLAGGED, MV_FLAG_FLAGGED);
    CHECK(kw_is(imap_view_msg(&a.view, 2)->keywords, "$Work"));
    imap_view_free(&a.view);
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(tu_exec(mv_store_db(tv_store), "DELETE FROM mailbox_views"), SQLITE_OK);
    free(keys);
}

/* Resident pages of the whole pages inside [p, p + len), and how many there are. */
static size_t tv_resident_pages(const void *p, size_t len, size_t *pages)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)p + len) & ~(page - 1);
    *pages = hi > lo ? (size_t)((hi - lo) / page) : 0;
    unsigned char vec[64];
    if (*pages == 0 || *pages > sizeof vec || mincore((void *)lo, hi - lo, vec) != 0) {
        return 0; /* the caller's checks fail on it */
    }
    size_t resident = 0;
    for (size_t i = 0; i < *pages; i++) {
        resident += vec[i] & 1;
    }
    return resident;
}

/* A whole chunk reserved is resident before it is written; a chunk for one message is not. */
static void test_chunk_pages_populated(void)
{
    /* Blocks of a chunk's size as fresh mappings (under ASan they are: its large allocator),
     * not recycled heap whose pages may be resident already. */
    (void)mallopt(M_MMAP_THRESHOLD, 64 * 1024);
    size_t live = imap_chunks_live();
    struct imap_view v;
    memset(&v, 0, sizeof v);
    CHECK_EQ_INT(imap_view_reserve(&v, IMAP_CHUNK_MSGS + 1), MV_OK);
    CHECK_EQ_INT(v.part_count, 2);
    size_t pages = 0;
    size_t resident = tv_resident_pages(v.parts[0].chunk, sizeof *v.parts[0].chunk, &pages);
    CHECK(pages >= 30);
    CHECK_EQ_INT(resident, pages); /* before: the first page only (the count written there) */
    resident = tv_resident_pages(v.parts[1].chunk, sizeof *v.parts[1].chunk, &pages);
    CHECK(resident <= 2);
    imap_view_free(&v);
    CHECK_EQ_INT(imap_chunks_live(), live);
}

/* Reads every message of v in a thread of its own (tv_read_all). */
struct tv_reader {
    const struct imap_view *v;
    uint64_t uid_sum;
};

static void *tv_read_all(void *arg)
{
    struct tv_reader *r = arg;
    for (size_t i = 0; i < r->v->count; i++) {
        r->uid_sum += imap_view_msg(r->v, i)->uid;
    }
    return NULL;
}

/* A SELECT that loads the saved view decodes no chunk but the one its first unseen message
 * is in, and the cache's merge only the chunks of the messages changed since it was saved;
 * each other chunk is decoded at the first read of one of its messages (two threads at once
 * read the same bytes), after which none is pending and they read as a fresh listing. A view
 * dropped while its chunks are pending gives everything back (ASan's leak check). The old
 * decode wrote all 10,000 messages at the SELECT. */
static void test_saved_view_decoded_on_first_use(void)
{
    CHECK(tv_store != NULL);
    struct imap_session a, b;
    tv_session(&a);
    tv_session(&b);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    imap_view_free(&a.view);
    imap_view_cache_save(tv_os.view_cache, tv_store);
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(imap_chunks_live(), 0);
    /* loaded and dropped untouched: the saved bytes go with the pending chunks */
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_chunks_pending(), 2);
    imap_view_free(&a.view);
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(imap_chunks_live(), 0);
    CHECK_EQ_INT(imap_chunks_pending(), 0);
    /* chunks: UIDs 1-4096 (the first unseen, 999), 4097-8192, 8193-10000 */
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(a.view.first_unseen, 999);
    CHECK_EQ_INT(imap_chunks_live(), 3);
    CHECK_EQ_INT(imap_chunks_pending(), 2);
    imap_view_free(&a.view);
    imap_view_cache_free(&tv_os.view_cache);
    /* a change since the save, in the last chunk: the merge decodes that one */
    CHECK_EQ_INT(mv_flags_set(tv_store, "INBOX", "9000", MV_FLAGS_ADD, MV_FLAG_FLAGGED, NULL, NULL),
                 MV_OK);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_chunks_pending(), 1);
    CHECK_EQ_INT(imap_view_load(&b, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_chunks_pending(), 1);
    CHECK_EQ_INT(imap_view_msg(&b.view, 8999)->flags & MV_FLAG_FLAGGED, MV_FLAG_FLAGGED);
    /* saved again (the store closes): the pending chunk's bytes copied, not decoded */
    imap_view_cache_save(tv_os.view_cache, tv_store);
    CHECK_EQ_INT(imap_chunks_pending(), 1);
    /* the pending chunk read by two threads at once: decoded once, the same for both */
    struct tv_reader ra = {.v = &a.view}, rb = {.v = &b.view};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, tv_read_all, &ra) == 0);
    CHECK(pthread_create(&tb, NULL, tv_read_all, &rb) == 0);
    CHECK(pthread_join(ta, NULL) == 0 && pthread_join(tb, NULL) == 0);
    CHECK_EQ_INT(ra.uid_sum, (uint64_t)TV_COUNT * (TV_COUNT + 1) / 2);
    CHECK_EQ_INT(rb.uid_sum, ra.uid_sum);
    CHECK_EQ_INT(imap_chunks_pending(), 0);
    CHECK_EQ_INT(imap_chunks_live(), 3);
    struct imap_view listed;
    memset(&listed, 0, sizeof listed);
    CHECK_EQ_INT(imap_view_list(tv_store, "INBOX", 0, &listed), MV_OK);
    CHECK_EQ_INT(listed.count, a.view.count);
    size_t differ = 0;
    for (size_t i = 0; i < listed.count && i < a.view.count; i++) {
        const struct imap_msg *x = imap_view_msg(&a.view, i), *y = imap_view_msg(&listed, i);
        differ += x != imap_view_msg(&b.view, i) || x->uid != y->uid || x->flags != y->flags ||
                  x->modseq != y->modseq || x->size != y->size ||
                  x->internal_date != y->internal_date || x->body_key != y->body_key ||
                  !imap_kw_equal(x->keywords, y->keywords);
    }
    CHECK_EQ_INT(differ, 0);
    imap_view_free(&a.view);
    imap_view_free(&b.view);
    /* what that save wrote (a copied chunk, two encoded) reads as the listing */
    imap_view_cache_free(&tv_os.view_cache);
    CHECK_EQ_INT(imap_view_load(&a, "INBOX", 0), MV_OK);
    CHECK_EQ_INT(imap_chunks_pending(), 2);
    for (size_t i = 0; i < listed.count && i < a.view.count; i++) {
        const struct imap_msg *x = imap_view_msg(&a.view, i), *y = imap_view_msg(&listed, i);
        differ += x->uid != y->uid || x->flags != y->flags || x->modseq != y->modseq ||
                  x->internal_date != y->internal_date || x->body_key != y->body_key;
    }
    CHECK_EQ_INT(differ, 0);
    imap_view_free(&a.view);
    imap_view_free(&listed);
    CHECK_EQ_INT(
        mv_flags_set(tv_store, "INBOX", "9000", MV_FLAGS_REMOVE, MV_FLAG_FLAGGED, NULL, NULL),
        MV_OK);
}

/* A saved view whose header lists one keyword list twice (no encoder of this version writes
 * that; a damaged or foreign one might) is saved again all the same: its pending chunks are
 * decoded and encoded anew instead of copied with indexes that would move (the encoder
 * refused it as out of memory before, so the view was never saved again). */
static void test_saved_view_list_twice(void)
{
    unsigned char v[256], cols[2][64], frame[2][128];
    size_t n = 0, flen[2];
    for (unsigned k = 0; k < 2; k++) { /* message k: UID 10 + k, body key 7 + k, list 1 */
        const uint64_t values[7] = {10 + k, MV_FLAG_SEEN, 2 * 5, 100, 2 * 1000, 2 * (7 + k), 3};
        size_t c = 0;
        for (unsigned i = 0; i < 7; i++) {
            c += tv_put(cols[k] + c, values[i]);
        }
        flen[k] = ZSTD_compress(frame[k], sizeof frame[k], cols[k], c, 1);
        CHECK(!ZSTD_isError(flen[k]));
    }
    memcpy(v, "MVV3", 4);
    n = 4 + tv_put(v + 4, 2); /* messages */
    n += tv_put(v + n, 0);    /* none unseen */
    n += tv_put(v + n, 2);    /* lists: "a" twice */
    for (unsigned i = 0; i < 2; i++) {
        n += tv_put(v + n, 1);
        v[n++] = 'a';
    }
    n += tv_put(v + n, 2); /* chunks */
    for (unsigned k = 0; k < 2; k++) {
        n += tv_put(v + n, 1);
        n += tv_put(v + n, 10 + k);
        n += tv_put(v + n, flen[k]);
    }
    for (unsigned k = 0; k < 2; k++) {
        memcpy(v + n, frame[k], flen[k]);
        n += flen[k];
    }
    struct imap_view d, again;
    memset(&d, 0, sizeof d);
    memset(&again, 0, sizeof again);
    CHECK_EQ_INT(imap_view_decode_pieces(v, n, n, &d), MV_OK);
    CHECK_EQ_INT(imap_chunks_pending(), 2);
    unsigned char *out = NULL;
    size_t len = 0;
    CHECK_EQ_INT(imap_view_encode(&d, 0, &out, &len), MV_OK);
    CHECK_EQ_INT(imap_view_decode_pieces(out, len, len, &again), MV_OK);
    CHECK_EQ_INT(again.count, 2);
    for (size_t i = 0; i < again.count && i < 2; i++) {
        const struct imap_msg *m = imap_view_msg(&again, i);
        CHECK_EQ_INT(m->uid, 10 + i);
        CHECK_EQ_INT(m->body_key, 7 + i);
        CHECK(kw_is(m->keywords, "a") && m->modseq == 5 && m->size == 100);
    }
    free(out);
    imap_view_free(&again);
    imap_view_free(&d);
    CHECK_EQ_INT(imap_chunks_pending(), 0);
}

/* The UIDs of the view as a compressed set ("1:4,7"), malloc'd; NULL when out of memory. */
static char *tv_uid_set(const struct imap_view *v)
{
    uint32_t *uids = malloc((v->count + 1) * sizeof *uids);
    if (uids == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < v->count; i++) {
        uids[i] = imap_view_msg(v, i)->uid;
    }
    struct buf out = {0};
    imap_uid_set_out(&out, uids, v->count);
    free(uids);
    char *s = strdup(out.data != NULL ? out.data : "");
    buf_free(&out);
    return s;
}

/* What VANISHED (EARLIER) without the log must say for known (NULL: 1:top), worked out one
 * UID at a time: every UID asked about, up to UIDNEXT - 1, that the view does not hold.
 * malloc'd; NULL on a bad set or out of memory. */
static char *tv_vanished_model(const struct imap_view *v, const char *known)
{
    struct imap_seqset set = {0};
    if (known != NULL && imap_parse_seqset(known, strlen(known), &set) != 0) {
        return NULL;
    }
    uint32_t top = v->uidnext - 1, *gone = malloc((size_t)top * sizeof *gone + 1);
    if (gone == NULL) {
        imap_seqset_free(&set);
        return NULL;
    }
    size_t n = 0;
    for (uint32_t u = 1; u <= top; u++) {
        size_t i = imap_view_find_uid(v, u);
        int held = i < v->count && imap_view_msg(v, i)->uid == u;
        if (!held && (known == NULL || imap_seqset_contains(&set, u, top))) {
            gone[n++] = u;
        }
    }
    struct buf out = {0};
    if (n > 0) {
        buf_str(&out, "* VANISHED (EARLIER) ");
        imap_uid_set_out(&out, gone, n);
        buf_str(&out, "\r\n");
    }
    free(gone);
    imap_seqset_free(&set);
    char *s = strdup(out.data != NULL ? out.data : "");
    buf_free(&out);
    return s;
}

/* imap_qresync_vanished_without_log for known (NULL: none given), as a malloc'd string;
 * NULL on failure. */
static char *tv_vanished(struct imap_session *s, const char *known)
{
    struct imap_seqset set = {0};
    if (known != NULL && imap_parse_seqset(known, strlen(known), &set) != 0) {
        return NULL;
    }
    struct buf out = {0};
    int rc = imap_qresync_vanished_without_log(s, &out, known != NULL ? &set : NULL);
    imap_seqset_free(&set);
    if (rc != MV_OK) {
        buf_free(&out);
        return NULL;
    }
    char *r = strdup(out.data != NULL ? out.data : "");
    buf_free(&out);
    return r;
}

/* VANISHED (EARLIER) for a client further behind than one read of the change log (more than
 * MV_EXPUNGED_MAX expunges since its modseq: SELECT (QRESYNC ...) answered NO [LIMIT] and left
 * the session selected). Answered from the view: for the UIDs a session held before some
 * expunges, exactly what the log says since then; for other sets (with '*', overlapping
 * ranges, none at all) every asked UID the mailbox no longer holds, as a UID-by-UID model
 * works it out. Then the log pruned by mv_store_maintain (changes_keep_days): the answer for
 * the held UIDs is the same, from the view, and a view of before syncs by a full listing. */
static void test_vanished_without_log(void)
{
    /* a mailbox of its own: the tests before changed INBOX */
    CHECK_EQ_INT(mv_mailbox_create(tv_store, "Vanish", NULL), MV_OK);
    struct mv_import_stats st;
    CHECK_EQ_INT(mv_import(tv_store, tu_path("seed.mbox"), "Vanish", NULL, NULL, &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, TV_COUNT);
    struct imap_session a, b;
    tv_session(&a);
    CHECK_EQ_INT(imap_view_load(&a, "Vanish", 0), MV_OK);
    CHECK_EQ_INT(a.view.count, TV_COUNT);
    uint64_t before = a.view.highestmodseq;
    char *held = tv_uid_set(&a.view);
    CHECK(held != NULL);
    size_t pick[] = {10, 11, 12, 500, a.view.count - 2, a.view.count - 1};
    char uids[256] = "";
    uint32_t picked[6];
    for (size_t k = 0; k < 6; k++) {
        picked[k] = imap_view_msg(&a.view, pick[k])->uid;
        snprintf(uids + strlen(uids), sizeof uids - strlen(uids), "%s%u", k > 0 ? "," : "",
                 picked[k]);
    }
    imap_view_free(&a.view);
    struct imap_session c; /* a view of before, synced only after the log is pruned */
    tv_session(&c);
    CHECK_EQ_INT(imap_view_load(&c, "Vanish", 0), MV_OK);
    uint32_t n = 0;
    CHECK_EQ_INT(mv_flags_set(tv_store, "Vanish", uids, MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL),
                 MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(tv_store, "Vanish", uids, &n), MV_OK);
    CHECK_EQ_INT(n, 6);
    tv_session(&b);
    CHECK_EQ_INT(imap_view_load(&b, "Vanish", 0), MV_OK);

    struct imap_seqset set = {0};
    CHECK_EQ_INT(imap_parse_seqset(held, strlen(held), &set), 0);
    struct buf logged = {0};
    CHECK_EQ_INT(imap_qresync_vanished(&b, &logged, before, &set), MV_OK);
    imap_seqset_free(&set);
    char *viewed = tv_vanished(&b, held);
    CHECK(viewed != NULL);
    char want[320];
    snprintf(want, sizeof want, "* VANISHED (EARLIER) %u:%u,%u,%u:%u\r\n", picked[0], picked[2],
             picked[3], picked[4], picked[5]);
    CHECK(logged.data != NULL && strcmp(logged.data, want) == 0);
    CHECK(strcmp(viewed, want) == 0);
    free(viewed);
    buf_free(&logged);

    /* The log pruned by the maintenance (changes_keep_days): the same QRESYNC answer, now
     * from the view, and a session's view of before synced by a full listing. */
    CHECK_EQ_INT(tu_exec(mv_store_db(tv_store), "UPDATE changes SET at = at - 200 * 86400"), 0);
    struct mv_maintain_options mo = MV_MAINTAIN_OPTIONS_INIT;
    struct mv_maintain_report mr;
    mo.flags = MV_MAINTAIN_NO_VACUUM;
    mo.quick_check_days = 36500;
    CHECK_EQ_INT(mv_store_maintain(tv_store, &mo, &mr), MV_OK);
    CHECK(mr.changes_pruned >= 6);
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    CHECK_EQ_INT(mv_message_expunged_since(tv_store, "Vanish", before, &gone, &gone_count),
                 MV_ELIMIT);
    CHECK_EQ_INT(imap_parse_seqset(held, strlen(held), &set), 0);
    CHECK_EQ_INT(imap_qresync_vanished(&b, &logged, before, &set), MV_OK);
    imap_seqset_free(&set);
    CHECK(logged.data != NULL && strcmp(logged.data, want) == 0);
    buf_free(&logged);
    struct buf synced = {0};
    CHECK_EQ_INT(imap_view_sync(&c, &synced, 1), MV_OK);
    CHECK_EQ_INT(c.view.count, TV_COUNT - 6);
    size_t expunges = 0;
    for (const char *at = synced.data; at != NULL && (at = strstr(at, " EXPUNGE\r\n")) != NULL;
         at++) {
        expunges++;
    }
    CHECK_EQ_INT(expunges, 6);
    buf_free(&synced);
    imap_view_free(&c.view);
    free(held);

    const char *asked[] = {NULL, "1:*", "3:50,40:60,9000:*", "1:4", "*", "20000:*"};
    for (size_t k = 0; k < sizeof asked / sizeof asked[0]; k++) {
        char *got = tv_vanished(&b, asked[k]);
        char *model = tv_vanished_model(&b.view, asked[k]);
        CHECK(got != NULL && model != NULL && strcmp(got, model) == 0);
        free(got);
        free(model);
    }
    imap_view_free(&b.view);
}

/* SQLITE_TRACE_ROW: counts the rows the store's statements return. */
static int tv_trace_row(unsigned type, void *arg, void *stmt, void *x)
{
    (void)type;
    (void)stmt;
    (void)x;
    (*(long *)arg)++;
    return 0;
}

/* The STORE's change, made in the store as imap_cmd_store makes it, then applied with
 * imap_view_sync_own; *rows gets the rows the sync read from the store. */
static void tv_store_own(struct imap_session *a,
                         const uint32_t *idx,
                         size_t count,
                         int mode,
                         unsigned flags,
                         uint32_t claim_extra,
                         struct buf *out,
                         long *rows)
{
    struct mv_uid_range *ranges = NULL;
    size_t nranges = 0;
    CHECK_EQ_INT(imap_view_uid_ranges(&a->view, idx, count, &ranges, &nranges), 0);
    uint32_t changed = 0;
    CHECK_EQ_INT(mv_flags_set_ranges(tv_store, "Own", ranges, nranges, mode, flags, "",
                                     MV_UNCHANGEDSINCE_NONE, &changed, NULL, NULL),
                 MV_OK);
    free(ranges);
    struct imap_own_flags own = {
        .idx = idx, .count = count, .mode = mode, .flags = flags, .changed = changed + claim_extra};
    *rows = 0;
    CHECK_EQ_INT(sqlite3_trace_v2(mv_store_db(tv_store), SQLITE_TRACE_ROW, tv_trace_row, rows),
                 SQLITE_OK);
    CHECK_EQ_INT(imap_view_sync_own(a, out, 1, &own), MV_OK);
    CHECK_EQ_INT(sqlite3_trace_v2(mv_store_db(tv_store), 0, NULL, NULL), SQLITE_OK);
}

/* Every message of v as a fresh SELECT (c) sees it: UID, flags, keywords, modseq. */
static int tv_view_matches(struct imap_session *v, struct imap_session *c)
{
    imap_view_free(&c->view);
    if (imap_view_load(c, "Own", 0) != MV_OK || v->view.count != c->view.count ||
        v->view.highestmodseq != c->view.highestmodseq) {
        return 0;
    }
    for (size_t i = 0; i < v->view.count; i++) {
        const struct imap_msg *x = imap_view_msg(&v->view, i), *y = imap_view_msg(&c->view, i);
        if (x->uid != y->uid || x->flags != y->flags || x->modseq != y->modseq ||
            !imap_kw_equal(x->keywords, y->keywords)) {
            return 0;
        }
    }
    return 1;
}

/* A STORE's own change applied to its session's view without reading it back (issue 13: a
 * STORE 1:* of 10,000 read every changed row back through the modseq index, a third of the
 * command). The view then holds what a fresh SELECT reads (flags and the STORE's modseq), the
 * FETCH lines went out for the messages not kept quiet (.SILENT), the chunks another session
 * shares were copied, not written, and the sync read a handful of rows, not 10,000. When
 * something else changed the mailbox in between, or the counts disagree, the sync reads back
 * and reports both. */
static void test_own_store_applied(void)
{
    CHECK(tv_store != NULL);
    /* a mailbox of its own: the tests before changed INBOX */
    CHECK_EQ_INT(mv_mailbox_create(tv_store, "Own", NULL), MV_OK);
    struct mv_import_stats st;
    CHECK_EQ_INT(mv_import(tv_store, tu_path("seed.mbox"), "Own", NULL, NULL, &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, TV_COUNT);
    CHECK_EQ_INT(mv_flags_set(tv_store, "Own", "1:*", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL),
                 MV_OK);
    CHECK_EQ_INT(mv_flags_set(tv_store, "Own", "999", MV_FLAGS_REMOVE, MV_FLAG_SEEN, NULL, NULL),
                 MV_OK);
    struct imap_session a, b, c;
    tv_session(&a);
    tv_session(&b);
    tv_session(&c);
    CHECK_EQ_INT(imap_view_load(&a, "Own", 0), MV_OK);
    CHECK_EQ_INT(imap_view_load(&b, "Own", 0), MV_OK);
    size_t n = a.view.count;
    CHECK_EQ_INT(n, TV_COUNT);
    uint32_t *idx = malloc(n * sizeof *idx);
    CHECK(idx != NULL);
    for (size_t i = 0; i < n; i++) {
        idx[i] = (uint32_t)i;
        if (i != 41) {
            imap_view_mark(&a.view, i, IMAP_MARK_QUIET); /* .SILENT, but one */
        }
    }
    a.view.reported_any = 1;
    unsigned before41 = imap_view_msg(&a.view, 41)->flags;
    struct buf out = {0};
    long rows = 0;
    tv_store_own(&a, idx, n, MV_FLAGS_ADD, MV_FLAG_ANSWERED, 0, &out, &rows);
    CHECK(rows < 10); /* the status; the read back was a row per message */
    CHECK(out.data != NULL);
    char line[96];
    snprintf(line, sizeof line, "* 42 FETCH (UID %u FLAGS (", imap_view_msg(&a.view, 41)->uid);
    CHECK(strstr(out.data, line) == out.data); /* the one not quiet */
    CHECK(strstr(out.data + 1, "* ") == NULL); /* and none other */
    CHECK(strstr(out.data, "\\Answered") != NULL);
    CHECK_EQ_INT(imap_view_msg(&a.view, 41)->flags, before41 | MV_FLAG_ANSWERED);
    CHECK_EQ_INT(imap_view_msg(&b.view, 41)->flags, before41); /* b's chunk was not written */
    CHECK(tv_view_matches(&a, &c));
    imap_view_reported_clear(&a.view);
    buf_free(&out);

    /* -FLAGS on a few with gaps: only the changed ones take the modseq */
    uint32_t some[] = {3, 998, 4000, 4001, 9999};
    tv_store_own(&a, some, 5, MV_FLAGS_REMOVE, MV_FLAG_SEEN, 0, &out, &rows);
    CHECK(rows < 10);
    CHECK(tv_view_matches(&a, &c));
    CHECK(imap_view_msg(&a.view, 998)->modseq < a.view.highestmodseq); /* 999: was unseen */
    CHECK_EQ_INT(imap_view_msg(&a.view, 3)->modseq, a.view.highestmodseq);
    buf_free(&out);

    /* another change came first: read back, both reported */
    CHECK_EQ_INT(mv_flags_set(tv_store, "Own", "7", MV_FLAGS_ADD, MV_FLAG_DRAFT, NULL, NULL),
                 MV_OK);
    uint32_t two[] = {10, 11};
    tv_store_own(&a, two, 2, MV_FLAGS_ADD, MV_FLAG_FLAGGED, 0, &out, &rows);
    CHECK(out.data != NULL && strstr(out.data, "* 7 FETCH (UID 7 FLAGS (") != NULL);
    CHECK(strstr(out.data, "* 11 FETCH (UID 11 FLAGS (") != NULL);
    CHECK(tv_view_matches(&a, &c));
    buf_free(&out);

    /* the view counts other than the store: read back */
    tv_store_own(&a, two, 2, MV_FLAGS_REMOVE, MV_FLAG_FLAGGED, 1, &out, &rows);
    CHECK(rows >= 2);
    CHECK(tv_view_matches(&a, &c));
    buf_free(&out);

    /* b, which shared every chunk, reads the whole change back and sees the same */
    CHECK_EQ_INT(imap_view_sync(&b, &out, 1), MV_OK);
    CHECK(tv_view_matches(&b, &c));
    buf_free(&out);
    free(idx);
    tv_sessions_free(&a, &b, &c);
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
    TEST(test_saved_view_round_trip);
    TEST(test_saved_view_decoded_on_first_use);
    TEST(test_change_copies_one_chunk);
    TEST(test_pending_expunge);
    TEST(test_recent_per_session);
    TEST(test_chunk_table);
    TEST(test_append_after_last_chunk_emptied);
    TEST(test_chunk_model);
    TEST(test_compact_after_churn);
    TEST(test_sync_and_merge_compact);
    TEST(test_saved_view_keys);
    TEST(test_chunk_pages_populated);
    TEST(test_saved_view_list_twice);
    TEST(test_vanished_without_log);
    TEST(test_own_store_applied);
    TEST(test_teardown);
    return th_summary();
}
