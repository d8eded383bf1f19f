/*
 * test_listing.c -- mv_message_list_begin/next/end: UID order, flags, keywords, modseq,
 * size and date; uid_after and changed_since; a listing of changes (changed_since > 0)
 * returns appends, copies in and flag changes only and is planned on the modseq index, so
 * it reads the changed rows, not the mailbox; a listing left open across an append;
 * mv_message_copy_uids (the UID pairs of COPY and MOVE); errors (unknown
 * mailbox, NULL arguments); saved views (mv_mailbox_view_save/load, schema version 8): the
 * bytes back as saved, the UIDVALIDITY and modseq checks, the size limit, gone with the
 * mailbox, kept by a rename, and the migration from version 7; mv_mailbox_view_read gives
 * the same bytes in pieces.
 */
#include "harness.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LS_PASSWORD "listing test password"

static int ls_open(const char *name, mv_store **s)
{
    return tu_store_create(name, LS_PASSWORD, 2048, s);
}

static int ls_append(mv_store *s, const char *mailbox, int n, unsigned flags, uint32_t *uid)
{
    char msg[256];
    int len = snprintf(msg, sizeof msg,
                       "From: a@example.org\r\nSubject: message %d\r\n\r\nbody %d\r\n", n, n);
    return mv_message_append(s, mailbox, msg, (size_t)len, flags, NULL, 1700000000 + n, uid);
}

/* Lists mailbox into uids[] (at most max); returns the count, or -1 on error. */
static int
ls_uids(mv_store *s, const char *mailbox, uint32_t after, uint64_t since, uint32_t *uids, int max)
{
    mv_message_iter *it = NULL;
    struct mv_message_entry e;
    if (mv_message_list_begin(s, mailbox, after, since, &it) != MV_OK) {
        return -1;
    }
    int n = 0, rc;
    while ((rc = mv_message_list_next(it, &e)) == 1) {
        if (n < max) {
            uids[n] = e.uid;
        }
        n++;
    }
    mv_message_list_end(&it);
    return rc == 0 ? n : -1;
}

static void test_list_order_and_fields(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(ls_open("order", &s), MV_OK);
    uint32_t uid = 0;
    for (int i = 1; i <= 5; i++) {
        CHECK_EQ_INT(ls_append(s, "INBOX", i, i == 3 ? MV_FLAG_FLAGGED : 0, &uid), MV_OK);
    }
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "2", MV_FLAGS_ADD, MV_FLAG_SEEN, "$Work", NULL), MV_OK);
    mv_message_iter *it = NULL;
    struct mv_message_entry e;
    CHECK_EQ_INT(mv_message_list_begin(s, "inbox", 0, 0, &it), MV_OK);
    uint32_t expect = 1;
    uint64_t modseq_2 = 0, max_modseq = 0;
    int rc;
    while ((rc = mv_message_list_next(it, &e)) == 1) {
        CHECK_EQ_INT(e.uid, expect);
        CHECK(e.size > 40);
        CHECK_EQ_INT(e.internal_date, 1700000000 + (int64_t)expect);
        CHECK_EQ_INT(e.flags, expect == 2 ? MV_FLAG_SEEN : expect == 3 ? MV_FLAG_FLAGGED : 0);
        CHECK(strcmp(e.keywords, expect == 2 ? "$Work" : "") == 0);
        if (expect == 2) {
            modseq_2 = e.modseq;
        }
        max_modseq = e.modseq > max_modseq ? e.modseq : max_modseq;
        expect++;
    }
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(mv_message_list_next(it, &e), 0); /* stays at the end */
    mv_message_list_end(&it);
    CHECK(it == NULL);
    CHECK_EQ_INT(expect, 6);
    CHECK_EQ_INT(modseq_2, max_modseq); /* the flag change came last */
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.highestmodseq, max_modseq);
    mv_store_close(&s);
}

static void test_list_after_and_since(void)
{
    mv_store *s = NULL;
    uint32_t uids[16];
    CHECK_EQ_INT(ls_open("since", &s), MV_OK);
    for (int i = 1; i <= 6; i++) {
        CHECK_EQ_INT(ls_append(s, "INBOX", i, 0, NULL), MV_OK);
    }
    CHECK_EQ_INT(ls_uids(s, "INBOX", 4, 0, uids, 16), 2);
    CHECK_EQ_INT(uids[0], 5);
    CHECK_EQ_INT(uids[1], 6);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    uint64_t before = info.highestmodseq;
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, before, uids, 16), 0);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "2,4", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, before, uids, 16), 2);
    CHECK_EQ_INT(uids[0], 2);
    CHECK_EQ_INT(uids[1], 4);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, NULL), MV_OK);
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, 0, uids, 16), 4);
    CHECK_EQ_INT(uids[0], 1);
    CHECK_EQ_INT(uids[1], 3);
    CHECK_EQ_INT(uids[3], 6);
    CHECK_EQ_INT(ls_uids(s, "Sent", 0, 0, uids, 16), 0);
    mv_store_close(&s);
}

/* A listing left open while the same handle appends ends cleanly, seeing 3 or 4 messages
 * (a connection may see its own writes), and a new listing sees all four. */
static void test_list_snapshot(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(ls_open("snapshot", &s), MV_OK);
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ_INT(ls_append(s, "INBOX", i, MV_FLAG_DELETED, NULL), MV_OK);
    }
    mv_message_iter *it = NULL;
    struct mv_message_entry e;
    CHECK_EQ_INT(mv_message_list_begin(s, "INBOX", 0, 0, &it), MV_OK);
    CHECK_EQ_INT(mv_message_list_next(it, &e), 1);
    CHECK_EQ_INT(e.uid, 1);
    CHECK_EQ_INT(ls_append(s, "INBOX", 4, 0, NULL), MV_OK);
    int count = 1, rc;
    while ((rc = mv_message_list_next(it, &e)) == 1) {
        count++;
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(count == 3 || count == 4);
    mv_message_list_end(&it);
    uint32_t uids[8];
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, 0, uids, 8), 4);
    mv_store_close(&s);
}

/* mv_message_copy_uids: the pairs for COPY and MOVE, in source order. */
static void test_copy_uids(void)
{
    mv_store *s = NULL;
    uint32_t *pairs = NULL, count = 0, uids[8];
    CHECK_EQ_INT(ls_open("copyuid", &s), MV_OK);
    for (int i = 1; i <= 5; i++) {
        CHECK_EQ_INT(ls_append(s, "INBOX", i, 0, NULL), MV_OK);
    }
    CHECK_EQ_INT(ls_append(s, "Archive", 9, 0, NULL), MV_OK); /* Archive's next UID is 2 */
    CHECK_EQ_INT(mv_message_copy_uids(s, "INBOX", "4,2,5:9", "Archive", 0, &pairs, &count), MV_OK);
    CHECK_EQ_INT(count, 3);
    CHECK(pairs != NULL);
    CHECK(pairs[0] == 2 && pairs[1] == 2 && pairs[2] == 4 && pairs[3] == 3);
    CHECK(pairs[4] == 5 && pairs[5] == 4);
    mv_free(pairs);
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, 0, uids, 8), 5);
    CHECK_EQ_INT(mv_message_copy_uids(s, "INBOX", "1:3", "Trash", 1, &pairs, &count), MV_OK);
    CHECK_EQ_INT(count, 3);
    CHECK(pairs[0] == 1 && pairs[1] == 1 && pairs[4] == 3 && pairs[5] == 3);
    mv_free(pairs);
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, 0, uids, 8), 2); /* moved away */
    CHECK_EQ_INT(uids[0], 4);
    CHECK_EQ_INT(ls_uids(s, "Trash", 0, 0, uids, 8), 3);
    /* nothing matches: MV_OK, no pairs */
    pairs = (uint32_t *)&count;
    CHECK_EQ_INT(mv_message_copy_uids(s, "INBOX", "100:200", "Trash", 0, &pairs, &count), MV_OK);
    CHECK(count == 0 && pairs == NULL);
    CHECK_EQ_INT(mv_message_copy_uids(s, "INBOX", "1", "Nowhere", 0, &pairs, &count), MV_ENOTFOUND);
    CHECK(pairs == NULL);
    CHECK_EQ_INT(mv_message_copy_uids(s, "INBOX", "1", "Trash", 0, NULL, &count), MV_EINVAL);
    CHECK_EQ_INT(ls_uids(s, "Trash", 0, 0, uids, 8), 3); /* the failures changed nothing */
    mv_store_close(&s);
}

/* A mailbox deleted and made again at once never gets its old UIDVALIDITY back (RFC 3501
 * 2.3.1.1), even when it had the largest one. */
static void test_uidvalidity_never_repeats(void)
{
    mv_store *s = NULL;
    struct mv_mailbox_info info;
    CHECK_EQ_INT(ls_open("validity", &s), MV_OK);
    uint32_t seen[8];
    for (int i = 0; i < 8; i++) {
        CHECK_EQ_INT(mv_mailbox_create(s, "Again", NULL), MV_OK);
        CHECK_EQ_INT(mv_mailbox_get(s, "Again", &info), MV_OK);
        seen[i] = info.uidvalidity;
        for (int k = 0; k < i; k++) {
            CHECK(seen[k] != seen[i]);
        }
        CHECK_EQ_INT(mv_mailbox_delete(s, "Again"), MV_OK);
    }
    mv_store_close(&s);
}

static void test_list_errors(void)
{
    mv_store *s = NULL;
    mv_message_iter *it = (mv_message_iter *)&s; /* must come back NULL */
    CHECK_EQ_INT(ls_open("errors", &s), MV_OK);
    CHECK_EQ_INT(mv_message_list_begin(s, "No such box", 0, 0, &it), MV_ENOTFOUND);
    CHECK(it == NULL);
    CHECK(strstr(mv_store_errmsg(s), "No such box") != NULL);
    CHECK_EQ_INT(mv_message_list_begin(s, NULL, 0, 0, &it), MV_EINVAL);
    CHECK_EQ_INT(mv_message_list_begin(s, "INBOX", 0, 0, NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_message_list_begin(s, "INBOX", 0, UINT64_MAX, &it), MV_EINVAL);
    CHECK_EQ_INT(mv_message_list_next(NULL, NULL), MV_EINVAL);
    mv_message_list_end(NULL);
    mv_message_list_end(&it);
    mv_store_close(&s);
}

/* changed_since > 0: what the server's incremental sync reads. Appends, copies into the
 * mailbox and flag changes after the modseq; nothing else, whatever the mailbox holds. */
static void test_list_changes_since(void)
{
    mv_store *s = NULL;
    uint32_t uids[64];
    struct mv_mailbox_info info;
    CHECK_EQ_INT(ls_open("changes", &s), MV_OK);
    for (int i = 1; i <= 40; i++) {
        CHECK_EQ_INT(ls_append(s, "INBOX", i, 0, NULL), MV_OK);
    }
    CHECK_EQ_INT(ls_append(s, "Archive", 99, 0, NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    uint64_t known = info.highestmodseq;
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "7,30", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL), MV_OK);
    CHECK_EQ_INT(ls_append(s, "INBOX", 41, 0, NULL), MV_OK);
    CHECK_EQ_INT(mv_message_copy(s, "Archive", "1", "INBOX", NULL), MV_OK);
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, known, uids, 64), 4);
    CHECK(uids[0] == 7 && uids[1] == 30 && uids[2] == 41 && uids[3] == 42);
    CHECK_EQ_INT(ls_uids(s, "INBOX", 30, known, uids, 64), 2); /* with uid_after */
    CHECK(uids[0] == 41 && uids[1] == 42);
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, info.highestmodseq, uids, 64), 0);
    CHECK_EQ_INT(ls_uids(s, "INBOX", 0, 0, uids, 64), 42);
    mv_store_close(&s);
}

/* The plans: the full listing walks the UID index, the listing of changes ranges over the
 * modseq index (so an idle session's sync on a large mailbox reads what changed only). */
static void test_list_changes_plan(void)
{
    mv_explain *e = NULL;
    char err[256] = "";
    struct mv_explain_row row;
    int full = 0, changed = 0;
    CHECK_EQ_INT(mv_explain_begin(NULL, &e, err, sizeof err), MV_OK);
    while (mv_explain_next(e, &row) == 1) {
        if (strcmp(row.operation, "message list") != 0 ||
            strstr(row.sql, "m.keywords, m.body_id") == NULL) {
            continue;
        }
        if (strstr(row.sql, "INDEXED BY messages_modseq") != NULL) {
            changed +=
                strstr(row.plan, "USING INDEX messages_modseq") != NULL && !row.scans_messages;
        } else {
            full += !row.scans_messages;
        }
    }
    mv_explain_end(&e);
    CHECK_EQ_INT(changed, 1);
    CHECK_EQ_INT(full, 1);
}

static void test_view_save(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(ls_open("views", &s), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "PRAGMA user_version"), TU_SCHEMA_VERSION);
    uint32_t uid = 0, uidvalidity = 1;
    uint64_t modseq = 1;
    void *data = (void *)&uid;
    size_t len = 1;
    CHECK_EQ_INT(mv_mailbox_view_load(s, "INBOX", &uidvalidity, &modseq, &data, &len), MV_OK);
    CHECK(data == NULL && len == 0 && uidvalidity == 0 && modseq == 0); /* none saved */
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ_INT(ls_append(s, "INBOX", i, 0, &uid), MV_OK);
    }
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    static const char bytes[] = "opaque \0 bytes";
    CHECK_EQ_INT(
        mv_mailbox_view_save(s, "INBOX", info.uidvalidity, info.highestmodseq, bytes, sizeof bytes),
        MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_load(s, "INBOX", &uidvalidity, &modseq, &data, &len), MV_OK);
    CHECK(data != NULL && len == sizeof bytes && memcmp(data, bytes, len) == 0);
    CHECK(uidvalidity == info.uidvalidity && modseq == info.highestmodseq);
    mv_free(data);
    /* A save replaces the one before; a modseq above the mailbox's highest, another
     * UIDVALIDITY, an unknown mailbox and a size above the limit are refused and keep it. */
    CHECK_EQ_INT(mv_mailbox_view_save(s, "INBOX", info.uidvalidity, 1, "x", 1), MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "INBOX", info.uidvalidity, info.highestmodseq + 1, "y", 1),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "INBOX", info.uidvalidity + 1, 1, "y", 1), MV_ENOTFOUND);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "Nowhere", info.uidvalidity, 1, "y", 1), MV_ENOTFOUND);
    /* Refused before a byte is read: the length alone decides. */
    CHECK_EQ_INT(
        mv_mailbox_view_save(s, "INBOX", info.uidvalidity, 1, "y", (size_t)MV_VIEW_SAVE_MAX + 1),
        MV_ELIMIT);
    CHECK(strstr(mv_store_errmsg(s), "MV_VIEW_SAVE_MAX") != NULL);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "INBOX", info.uidvalidity, 1, NULL, 1), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_view_load(s, "INBOX", &uidvalidity, &modseq, NULL, &len), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_view_load(s, "Nowhere", &uidvalidity, &modseq, &data, &len),
                 MV_ENOTFOUND);
    CHECK_EQ_INT(mv_mailbox_view_load(s, "INBOX", &uidvalidity, &modseq, &data, &len), MV_OK);
    CHECK(data != NULL && len == 1 && memcmp(data, "x", 1) == 0 && modseq == 1);
    mv_free(data);

    /* A rename keeps it (the same mailbox); a delete drops it, and a mailbox made again under
     * the name has none. */
    CHECK_EQ_INT(mv_mailbox_create(s, "Box", NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_status(s, "Box", &info), MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "Box", info.uidvalidity, info.highestmodseq, "b", 1),
                 MV_OK);
    CHECK_EQ_INT(mv_mailbox_rename(s, "Box", "Renamed"), MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_load(s, "Renamed", &uidvalidity, &modseq, &data, &len), MV_OK);
    CHECK(data != NULL && len == 1 && uidvalidity == info.uidvalidity);
    mv_free(data);
    CHECK_EQ_INT(mv_mailbox_delete(s, "Renamed"), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM mailbox_views"), 1); /* INBOX's */
    CHECK_EQ_INT(mv_mailbox_create(s, "Renamed", NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_load(s, "Renamed", &uidvalidity, &modseq, &data, &len), MV_OK);
    CHECK(data == NULL && len == 0);

    /* From version 7 (no mailbox_views): the migration makes the table, nothing else moves. */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), TU_DOWNGRADE_TO_V7 "PRAGMA user_version = 7"), SQLITE_OK);
    mv_store_close(&s);
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    char err[256] = "";
    CHECK_EQ_INT(mv_store_open("views@example.org", LS_PASSWORD, strlen(LS_PASSWORD), &o, &s, err,
                               sizeof err),
                 MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM mailbox_views"), 0);
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    CHECK(info.messages == 3);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "INBOX", info.uidvalidity, info.highestmodseq, "z", 1),
                 MV_OK);
    mv_store_close(&s);
}

/* How many times the overflow chain of the saved views goes down the file (its pages in
 * chain order: dbstat's paths of one cell sort so). */
static long long ls_view_chain_descents(mv_store *s)
{
    return tu_int(mv_store_db(s),
                  "SELECT count(*) FROM (SELECT pageno, lag(pageno) OVER (ORDER BY path) AS prev "
                  "FROM dbstat WHERE name = 'mailbox_views' AND pagetype = 'overflow') "
                  "WHERE pageno < prev");
}

/* A view saved over another lies in pages that ascend the file in chain order, so a cold read
 * of it is read ahead by the kernel: the old one's pages are freed in a commit before the new
 * bytes are written. Replaced in one statement, the new bytes took the old pages from the free
 * list in whatever order it gave them: here the chain went down once, in the 1,000,000-message
 * benchmark store 1,092 times in 1,100 pages. */
static void test_view_save_ascends(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(ls_open("ascend", &s), MV_OK);
    uint32_t uid = 0;
    CHECK_EQ_INT(ls_append(s, "INBOX", 1, 0, &uid), MV_OK);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    size_t len = 1u << 20;
    unsigned char *bytes = malloc(len);
    CHECK(bytes != NULL);
    for (int round = 0; bytes != NULL && round < 3; round++) {
        for (size_t i = 0; i < len; i++) {
            bytes[i] = (unsigned char)(i * 7 + (size_t)round);
        }
        CHECK_EQ_INT(
            mv_mailbox_view_save(s, "INBOX", info.uidvalidity, info.highestmodseq, bytes, len),
            MV_OK);
        CHECK(tu_int(mv_store_db(s), "SELECT count(*) FROM dbstat WHERE name = 'mailbox_views' "
                                     "AND pagetype = 'overflow'") > 200);
        CHECK_EQ_INT(ls_view_chain_descents(s), 0);
        uint32_t uv = 0;
        uint64_t ms = 0;
        void *got = NULL;
        size_t got_len = 0;
        CHECK_EQ_INT(mv_mailbox_view_load(s, "INBOX", &uv, &ms, &got, &got_len), MV_OK);
        CHECK(got != NULL && got_len == len && memcmp(got, bytes, len) == 0);
        mv_free(got);
    }
    free(bytes);
    mv_store_close(&s);
}

/* mv_mailbox_view_load reads the saved bytes straight into the buffer it returns: SQLite
 * allocates no buffer of the view's size on the way (an 8 MiB view loads with SQLite's
 * allocations peaking less than 4 MiB above what they were, its page cache of 2 MiB
 * included; the old load took the column's value, which SQLite first assembles in a buffer
 * of its own the size of the view, and copied it: +8 MiB and more). The bytes are the saved
 * ones, the empty view loads as one too, and a row that is not bytes is MV_ECORRUPT. */
static void test_view_load_one_buffer(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(ls_open("viewbuf", &s), MV_OK);
    size_t len = (size_t)8 << 20;
    unsigned char *view = malloc(len);
    CHECK(s != NULL && view != NULL);
    if (s == NULL || view == NULL) {
        free(view);
        mv_store_close(&s);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        view[i] = (unsigned char)(i * 131 + i / 4051);
    }
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "INBOX", info.uidvalidity, info.highestmodseq, view, len),
                 MV_OK);
    void *data = NULL;
    size_t got = 0;
    uint32_t uidvalidity = 0;
    uint64_t modseq = 0;
    sqlite3_int64 before = sqlite3_memory_used();
    (void)sqlite3_memory_highwater(1); /* from what is in use now */
    CHECK_EQ_INT(mv_mailbox_view_load(s, "INBOX", &uidvalidity, &modseq, &data, &got), MV_OK);
    sqlite3_int64 peak = sqlite3_memory_highwater(0);
    CHECK(before > 0); /* SQLite counts its allocations (SQLITE_DEFAULT_MEMSTATUS) */
    CHECK(peak - before < (sqlite3_int64)4 << 20);
    CHECK(got == len && data != NULL && memcmp(data, view, len) == 0);
    CHECK(uidvalidity == info.uidvalidity && modseq == info.highestmodseq);
    mv_free(data);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "INBOX", info.uidvalidity, info.highestmodseq, "", 0),
                 MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_load(s, "INBOX", &uidvalidity, &modseq, &data, &got), MV_OK);
    CHECK(data != NULL && got == 0);
    mv_free(data);
    /* A row that is no saved view (text whose characters are fewer than its bytes, as no save
     * writes): a clear error, not a short or overrun read. */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE mailbox_views SET data = 'h\xc3\xa9llo'"),
                 SQLITE_OK);
    CHECK_EQ_INT(mv_mailbox_view_load(s, "INBOX", &uidvalidity, &modseq, &data, &got), MV_ECORRUPT);
    CHECK(data == NULL && got == 0);
    CHECK(strstr(mv_store_errmsg(s), "saved view") != NULL);
    free(view);
    mv_store_close(&s);
}

/* What the pieces of test_view_read brought: their bytes in order, how many, the longest. */
struct ls_pieces {
    unsigned char *bytes;
    size_t len, cap, calls, longest;
    size_t stop_after; /* 0: never stop; else return MV_ECORRUPT at that call */
};

static int ls_piece(void *arg, const void *bytes, size_t n)
{
    struct ls_pieces *p = arg;
    p->calls++;
    p->longest = n > p->longest ? n : p->longest;
    if (p->stop_after != 0 && p->calls == p->stop_after) {
        return MV_ECORRUPT;
    }
    if (p->len + n <= p->cap) {
        memcpy(p->bytes + p->len, bytes, n);
        p->len += n;
    }
    return MV_OK;
}

/* mv_mailbox_view_read gives the saved bytes in order, in pieces of at most
 * MV_VIEW_READ_PIECE, with the tags set before the first; a piece() that says no ends the read
 * with its code; none saved is MV_OK with no piece; the row that is not bytes, NULL
 * arguments and an unknown mailbox are errors. */
static void test_view_read(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(ls_open("viewread", &s), MV_OK);
    size_t len = (size_t)3 * MV_VIEW_READ_PIECE + 123;
    unsigned char *view = malloc(len);
    struct ls_pieces got = {.bytes = malloc(len + 1), .cap = len + 1};
    CHECK(s != NULL && view != NULL && got.bytes != NULL);
    if (s == NULL || view == NULL || got.bytes == NULL) {
        free(view);
        free(got.bytes);
        mv_store_close(&s);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        view[i] = (unsigned char)(i * 7 + i / 509);
    }
    uint32_t uidvalidity = 1;
    uint64_t modseq = 1;
    size_t n = 1;
    CHECK_EQ_INT(mv_mailbox_view_read(s, "INBOX", &uidvalidity, &modseq, &n, ls_piece, &got),
                 MV_OK);
    CHECK(n == 0 && got.calls == 0 && uidvalidity == 0 && modseq == 0); /* none saved */
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_save(s, "INBOX", info.uidvalidity, info.highestmodseq, view, len),
                 MV_OK);
    CHECK_EQ_INT(mv_mailbox_view_read(s, "INBOX", &uidvalidity, &modseq, &n, ls_piece, &got),
                 MV_OK);
    CHECK(n == len && uidvalidity == info.uidvalidity && modseq == info.highestmodseq);
    CHECK(got.len == len && memcmp(got.bytes, view, len) == 0);
    CHECK_EQ_INT(got.calls, 4);
    CHECK_EQ_INT(got.longest, MV_VIEW_READ_PIECE);
    got = (struct ls_pieces){.bytes = got.bytes, .cap = got.cap, .stop_after = 2};
    CHECK_EQ_INT(mv_mailbox_view_read(s, "INBOX", &uidvalidity, &modseq, &n, ls_piece, &got),
                 MV_ECORRUPT);
    CHECK_EQ_INT(got.calls, 2); /* no piece after the one that said no */
    CHECK_EQ_INT(mv_mailbox_view_read(s, "INBOX", &uidvalidity, &modseq, &n, NULL, &got),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_view_read(s, "INBOX", &uidvalidity, NULL, &n, ls_piece, &got),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_view_read(s, "Nowhere", &uidvalidity, &modseq, &n, ls_piece, &got),
                 MV_ENOTFOUND);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE mailbox_views SET data = 'h\xc3\xa9llo'"),
                 SQLITE_OK);
    got = (struct ls_pieces){.bytes = got.bytes, .cap = got.cap};
    CHECK_EQ_INT(mv_mailbox_view_read(s, "INBOX", &uidvalidity, &modseq, &n, ls_piece, &got),
                 MV_ECORRUPT);
    CHECK(got.calls == 0 && n == 0);
    free(view);
    free(got.bytes);
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_list_order_and_fields);
    TEST(test_list_after_and_since);
    TEST(test_list_changes_since);
    TEST(test_list_changes_plan);
    TEST(test_list_snapshot);
    TEST(test_copy_uids);
    TEST(test_uidvalidity_never_repeats);
    TEST(test_list_errors);
    TEST(test_view_save);
    TEST(test_view_save_ascends);
    TEST(test_view_load_one_buffer);
    TEST(test_view_read);
    return th_summary();
}
