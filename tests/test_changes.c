/*
 * test_changes.c -- mv_message_expunged_since (store_changes.c): the UIDs expunged after a
 * modseq, from EXPUNGE, from a move away and from a UID EXPUNGE subset; nothing for a
 * modseq at or above the last expunge; per mailbox; errors (unknown mailbox, NULL
 * arguments, a modseq out of range).
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

int main(void)
{
    TEST(test_expunged_since);
    TEST(test_expunged_since_errors);
    return th_summary();
}
