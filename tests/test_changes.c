/*
 * test_changes.c -- mv_message_expunged_since (store_changes.c): the UIDs expunged after a
 * modseq, from EXPUNGE, from a move away and from a UID EXPUNGE subset; nothing for a
 * modseq at or above the last expunge; per mailbox; errors (unknown mailbox, NULL
 * arguments, a modseq out of range); the log pruned by mv_store_maintain (changes_keep_days).
 * mv_flags_set_unchanged_since (store_message.c,
 * CONDSTORE's STORE UNCHANGEDSINCE): only messages at or below the modseq change, the others
 * come back as failed UIDs and keep their flags and modseq; a change made through another
 * handle after the caller read its modseq fails the test; unchanged_since 0 fails all;
 * errors change nothing.
 */
#include "harness.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CH_PASSWORD "changes test password"

static int ch_open(const char *name, mv_store **s)
{
    return tu_store_create(name, CH_PASSWORD, 2048, s);
}

static int ch_append(mv_store *s, const char *mailbox, int n, unsigned flags)
{
    char msg[256];
    int len = snprintf(msg, sizeof msg, "From: a@example.org\r\nSubject: m %d\r\n\r\nbody\r\n", n);
    return mv_message_append(s, mailbox, msg, (size_t)len, flags, NULL, 1700000000 + n, NULL);
}

static uint64_t ch_modseq(mv_store *s, const char *mailbox)
{
    struct mv_mailbox_info info;
    return mv_mailbox_status(s, mailbox, &info) == MV_OK ? info.highestmodseq : 0;
}

static void test_expunged_since(void)
{
    mv_store *s = NULL;
    uint32_t *uids = NULL, n32 = 0;
    size_t count = 99;
    CHECK_EQ_INT(ch_open("since", &s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Other", NULL), MV_OK);
    for (int i = 1; i <= 6; i++) {
        CHECK_EQ_INT(ch_append(s, "INBOX", i, i == 2 || i == 3 ? MV_FLAG_DELETED : 0), MV_OK);
    }
    uint64_t before = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", 0, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 0);
    CHECK(uids == NULL);

    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n32), MV_OK); /* UIDs 2 and 3 */
    CHECK_EQ_INT(n32, 2);
    uint64_t after_expunge = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_message_move(s, "INBOX", "5", "Other", &n32), MV_OK);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", before, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 3);
    CHECK(uids[0] == 2 && uids[1] == 3 && uids[2] == 5);
    mv_free(uids);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", 0, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 3);
    mv_free(uids);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", after_expunge, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 1);
    CHECK(uids[0] == 5);
    mv_free(uids);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", ch_modseq(s, "INBOX"), &uids, &count),
                 MV_OK);
    CHECK_EQ_INT(count, 0);
    /* Flag changes are not expunges; other mailboxes are separate. */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", after_expunge, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 1);
    mv_free(uids);
    CHECK_EQ_INT(mv_message_expunged_since(s, "Other", 0, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 0);
    /* A UID set limits an expunge to a subset. */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1,4", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    uint64_t before_subset = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", "4", &n32), MV_OK);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", before_subset, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 1);
    CHECK(uids[0] == 4);
    mv_free(uids);
    mv_store_close(&s);
}

static void test_expunged_since_errors(void)
{
    mv_store *s = NULL;
    uint32_t *uids = (uint32_t *)&s; /* must come back NULL */
    size_t count = 7;
    CHECK_EQ_INT(ch_open("errors", &s), MV_OK);
    CHECK_EQ_INT(mv_message_expunged_since(s, "No such box", 0, &uids, &count), MV_ENOTFOUND);
    CHECK(uids == NULL);
    CHECK_EQ_INT(count, 0);
    CHECK(strstr(mv_store_errmsg(s), "No such box") != NULL);
    CHECK_EQ_INT(mv_message_expunged_since(s, NULL, 0, &uids, &count), MV_EINVAL);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", 0, NULL, &count), MV_EINVAL);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", 0, &uids, NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", UINT64_MAX, &uids, &count), MV_EINVAL);
    CHECK_EQ_INT(mv_message_expunged_since(NULL, "INBOX", 0, &uids, &count), MV_EINVAL);
    mv_store_close(&s);
}

/* One maintenance run that prunes the change log at keep_days (no VACUUM, no quick_check);
 * the rows it deleted, or -1 on failure. */
static long long ch_maintain(mv_store *s, uint32_t keep_days)
{
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    struct mv_maintain_report r;
    o.changes_keep_days = keep_days;
    o.quick_check_days = 36500;
    o.flags = MV_MAINTAIN_NO_VACUUM;
    int rc = mv_store_maintain(s, &o, &r);
    return rc == MV_OK ? (long long)r.changes_pruned : -1;
}

/* The change log pruned by mv_store_maintain (changes_keep_days): a mailbox's expunges older
 * than the cut go and a question about the changes since a modseq below them gets MV_ELIMIT
 * (mailvaultd answers from the mailbox), one at or above them the same UIDs as before; the
 * rows of a deleted mailbox go whatever their age; keep 0 keeps all; a second run prunes
 * nothing; more rows than a batch go in several. */
static void test_changes_prune(void)
{
    mv_store *s = NULL;
    uint32_t *uids = NULL, n32 = 0;
    size_t count = 0;
    CHECK_EQ_INT(ch_open("prune", &s), MV_OK);
    sqlite3 *db = mv_store_db(s);
    for (int i = 1; i <= 8; i++) {
        CHECK_EQ_INT(ch_append(s, "INBOX", i, i == 2 || i == 3 ? MV_FLAG_DELETED : 0), MV_OK);
    }
    uint64_t first = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n32), MV_OK); /* 2 and 3: "old" */
    CHECK_EQ_INT(tu_exec(db, "UPDATE changes SET at = at - 200 * 86400"), 0);
    uint64_t old = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "5", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n32), MV_OK); /* 5: recent */
    CHECK_EQ_INT(mv_mailbox_create(s, "Gone", NULL), MV_OK);
    CHECK_EQ_INT(ch_append(s, "Gone", 1, MV_FLAG_DELETED), MV_OK);
    CHECK_EQ_INT(ch_append(s, "Gone", 2, 0), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "Gone", NULL, &n32), MV_OK);
    long long gone_id = tu_int(db, "SELECT id FROM mailboxes WHERE name = 'Gone'");
    CHECK_EQ_INT(mv_mailbox_delete(s, "Gone"), MV_OK); /* its rows stay in the log */
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM changes WHERE mailbox_id = %lld", gone_id);
    CHECK_EQ_INT(tu_int(db, sql), 2);
    long long rows = tu_int(db, "SELECT count(*) FROM changes");
    CHECK_EQ_INT(rows, 5);

    CHECK_EQ_INT(ch_maintain(s, 0), 0); /* 0: keep all */
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM changes"), rows);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", first, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 3);
    mv_free(uids);

    CHECK_EQ_INT(ch_maintain(s, 90), 4); /* INBOX's 2 old, Gone's 2 */
    CHECK_EQ_INT(tu_int(db, sql), 0);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM changes"), 2); /* 5 and the floor */
    uids = (uint32_t *)&s;
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", first, &uids, &count), MV_ELIMIT);
    CHECK(uids == NULL && count == 0);
    CHECK(strstr(mv_store_errmsg(s), "pruned") != NULL);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", 0, &uids, &count), MV_ELIMIT);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", old, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 1);
    CHECK(uids != NULL && uids[0] == 5);
    mv_free(uids);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", ch_modseq(s, "INBOX"), &uids, &count),
                 MV_OK);
    CHECK_EQ_INT(count, 0);
    CHECK_EQ_INT(ch_maintain(s, 90), 0); /* nothing new is old */
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM changes"), 2);

    /* More old rows than one batch (20,000; ten modseqs of 4,500, so the batches end between
     * modseqs): all go, one floor is left at the highest, and 5's row (now old too) with
     * them. */
    CHECK_EQ_INT(tu_exec(db, "UPDATE changes SET at = at - 200 * 86400"), 0);
    static const char *const many =
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
        "FROM n WHERE i < 45000) INSERT INTO changes(mailbox_id, "
        "modseq, uid, kind, at) SELECT (SELECT id FROM mailboxes "
        "WHERE name = 'INBOX'), i % 10 + 1, 100000 + i, 'expunge', 1000 "
        "FROM n";
    CHECK_EQ_INT(tu_exec(db, many), 0);
    CHECK_EQ_INT(ch_maintain(s, 90), 45001 + 1); /* the rows, 5's, the floor before */
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM changes"), 1);
    CHECK_EQ_INT(tu_int(db, "SELECT uid FROM changes"), 0);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", old, &uids, &count), MV_ELIMIT);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", ch_modseq(s, "INBOX"), &uids, &count),
                 MV_OK);
    CHECK_EQ_INT(count, 0);
    /* new expunges after the prune are read as before */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "7", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    uint64_t now = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n32), MV_OK);
    CHECK_EQ_INT(mv_message_expunged_since(s, "INBOX", now, &uids, &count), MV_OK);
    CHECK_EQ_INT(count, 1);
    CHECK(uids != NULL && uids[0] == 7);
    mv_free(uids);
    mv_store_close(&s);
}

static uint64_t ch_message_modseq(mv_store *s, uint32_t uid, unsigned *flags)
{
    struct mv_message_info info;
    if (mv_message_get(s, "INBOX", uid, &info) != MV_OK) {
        return 0;
    }
    *flags = info.flags;
    return info.modseq;
}

static void test_flags_unchanged_since(void)
{
    mv_store *s = NULL;
    uint32_t *failed = NULL, changed = 99;
    size_t failed_count = 99;
    unsigned flags = 0;
    CHECK_EQ_INT(ch_open("unchanged", &s), MV_OK);
    for (int i = 1; i <= 5; i++) {
        CHECK_EQ_INT(ch_append(s, "INBOX", i, 0), MV_OK);
    }
    uint64_t known = ch_modseq(s, "INBOX"); /* what a client saw */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "2,4", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL), MV_OK);
    uint64_t m2 = ch_message_modseq(s, 2, &flags);
    CHECK(m2 > known);
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1:5", MV_FLAGS_ADD, MV_FLAG_FLAGGED,
                                              "$Todo", known, &changed, &failed, &failed_count),
                 MV_OK);
    CHECK_EQ_INT(changed, 3);
    CHECK_EQ_INT(failed_count, 2);
    CHECK(failed != NULL && failed[0] == 2 && failed[1] == 4);
    mv_free(failed);
    CHECK_EQ_INT(ch_message_modseq(s, 2, &flags), m2); /* left alone */
    CHECK_EQ_INT(flags, MV_FLAG_SEEN);
    uint64_t m1 = ch_message_modseq(s, 1, &flags);
    CHECK_EQ_INT(flags, MV_FLAG_FLAGGED);
    CHECK(m1 > m2);
    CHECK_EQ_INT(ch_message_modseq(s, 5, &flags), m1); /* one modseq for the command */
    struct mv_message_info info;
    CHECK_EQ_INT(mv_message_get(s, "INBOX", 3, &info), MV_OK);
    CHECK(strcmp(info.keywords, "$Todo") == 0);

    /* Passing the test without changing anything keeps the modseq; unchanged_since 0 fails
     * every message; a set with holes reports only messages that exist. */
    uint64_t top = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1,3", MV_FLAGS_ADD, MV_FLAG_FLAGGED,
                                              NULL, top, &changed, &failed, &failed_count),
                 MV_OK);
    CHECK(changed == 0 && failed_count == 0 && failed == NULL);
    CHECK_EQ_INT(ch_modseq(s, "INBOX"), top);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "5", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, NULL), MV_OK);
    top = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1:9", MV_FLAGS_REPLACE, 0, NULL, 0,
                                              &changed, &failed, &failed_count),
                 MV_OK);
    CHECK_EQ_INT(changed, 0);
    CHECK_EQ_INT(failed_count, 4);
    CHECK(failed[0] == 1 && failed[3] == 4);
    mv_free(failed);
    CHECK_EQ_INT(ch_modseq(s, "INBOX"), top);
    CHECK_EQ_INT(ch_message_modseq(s, 1, &flags), m1);
    CHECK_EQ_INT(flags, MV_FLAG_FLAGGED);
    /* Without a condition that can fail (the largest modseq): the plain flag change. */
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1:*", MV_FLAGS_REMOVE, MV_FLAG_FLAGGED,
                                              NULL, UINT64_MAX, NULL, &failed, &failed_count),
                 MV_OK);
    CHECK_EQ_INT(failed_count, 0);
    CHECK(ch_message_modseq(s, 3, &flags) > top);
    CHECK_EQ_INT(flags, 0);
    mv_store_close(&s);
}

/* The test reads the store at the moment of the change, not what this handle saw before: a
 * change through another handle (another session, the CLI, a delivery) in between fails it. */
static void test_flags_unchanged_since_two_handles(void)
{
    mv_store *a = NULL, *b = NULL;
    uint32_t *failed = NULL, changed = 0;
    size_t failed_count = 0;
    unsigned flags = 0;
    char err[256] = "";
    CHECK_EQ_INT(ch_open("twohandles", &a), MV_OK);
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ_INT(ch_append(a, "INBOX", i, 0), MV_OK);
    }
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    CHECK_EQ_INT(mv_store_open("twohandles@example.org", CH_PASSWORD, strlen(CH_PASSWORD), &o, &b,
                               err, sizeof err),
                 MV_OK);
    uint64_t known = ch_modseq(a, "INBOX");
    CHECK_EQ_INT(mv_flags_set(b, "INBOX", "3", MV_FLAGS_ADD, MV_FLAG_ANSWERED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_flags_set_unchanged_since(a, "INBOX", "1:3", MV_FLAGS_ADD, MV_FLAG_DELETED,
                                              NULL, known, &changed, &failed, &failed_count),
                 MV_OK);
    CHECK_EQ_INT(changed, 2);
    CHECK_EQ_INT(failed_count, 1);
    CHECK_EQ_INT(failed[0], 3);
    mv_free(failed);
    CHECK_EQ_INT(ch_message_modseq(b, 3, &flags) > 0, 1);
    CHECK_EQ_INT(flags, MV_FLAG_ANSWERED);
    CHECK_EQ_INT(ch_message_modseq(b, 2, &flags) > 0, 1);
    CHECK_EQ_INT(flags, MV_FLAG_DELETED);
    mv_store_close(&b);
    mv_store_close(&a);
}

static void test_flags_unchanged_since_errors(void)
{
    mv_store *s = NULL;
    uint32_t *failed = (uint32_t *)&s; /* must come back NULL */
    uint32_t changed = 5;
    size_t failed_count = 7;
    CHECK_EQ_INT(ch_open("unchanged_errors", &s), MV_OK);
    CHECK_EQ_INT(ch_append(s, "INBOX", 1, 0), MV_OK);
    uint64_t top = ch_modseq(s, "INBOX");
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "No such box", "1", MV_FLAGS_ADD, MV_FLAG_SEEN,
                                              NULL, 0, &changed, &failed, &failed_count),
                 MV_ENOTFOUND);
    CHECK(failed == NULL && failed_count == 0 && changed == 0);
    CHECK_EQ_INT(
        mv_flags_set_unchanged_since(s, "INBOX", "1", 7, 0, NULL, 0, NULL, &failed, &failed_count),
        MV_EINVAL);
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1:x", MV_FLAGS_ADD, 0, NULL, 0, NULL,
                                              &failed, &failed_count),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1", MV_FLAGS_ADD, 0, "a(b", top, NULL,
                                              &failed, &failed_count),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL,
                                              top, NULL, NULL, &failed_count),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL,
                                              top, NULL, &failed, NULL),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_flags_set_unchanged_since(NULL, "INBOX", "1", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL,
                                              top, NULL, &failed, &failed_count),
                 MV_EINVAL);
    CHECK_EQ_INT(ch_modseq(s, "INBOX"), top); /* none of them changed anything */
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_expunged_since);
    TEST(test_expunged_since_errors);
    TEST(test_changes_prune);
    TEST(test_flags_unchanged_since);
    TEST(test_flags_unchanged_since_two_handles);
    TEST(test_flags_unchanged_since_errors);
    return th_summary();
}
