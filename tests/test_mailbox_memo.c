/*
 * test_mailbox_memo.c -- mailbox memos (mv_mailbox_memo_put / mv_mailbox_memo_get, schema
 * version 16): byte strings kept with a mailbox across opens and renames, named by its
 * UIDVALIDITY (so never found for a mailbox made again under the same name), gone with the
 * mailbox, bounded by the mailbox's message count, and refused whole.
 */
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MB_PASSWORD "mailbox memo test password"

static uint32_t mb_uidvalidity(mv_store *s, const char *mailbox)
{
    struct mv_mailbox_info info;
    if (mv_mailbox_status(s, mailbox, &info) != MV_OK) {
        return 0;
    }
    return info.uidvalidity;
}

static void mb_append(mv_store *s, const char *mailbox, uint32_t i)
{
    char msg[128];
    int n = snprintf(msg, sizeof msg,
                     "From: a%u@example.org\r\nSubject: memo %u\r\n\r\nbody %u\r\n", i, i, i);
    CHECK_EQ_INT(mv_message_append(s, mailbox, msg, (size_t)n, 0, NULL, 1700000000 + i, NULL),
                 MV_OK);
}

/* 1 if slot of the mailbox with uidvalidity holds exactly len bytes of want. */
static int mb_is(mv_store *s, uint32_t uidvalidity, uint32_t slot, const void *want, size_t len)
{
    void *data = NULL;
    size_t got = 0;
    int rc = mv_mailbox_memo_get(s, uidvalidity, slot, &data, &got);
    int same = rc == MV_OK && data != NULL && got == len && memcmp(data, want, len) == 0;
    if (!same) {
        printf("  # mailbox memo %u slot %u: rc %d, %zu bytes, wanted %zu\n", uidvalidity, slot, rc,
               got, len);
    }
    mv_free(data);
    return same;
}

static int mb_absent(mv_store *s, uint32_t uidvalidity, uint32_t slot)
{
    void *data = (void *)1;
    size_t len = 1;
    int rc = mv_mailbox_memo_get(s, uidvalidity, slot, &data, &len);
    return rc == MV_ENOTFOUND && data == NULL && len == 0;
}

/* Kept across a close and a rename; each slot its own; a put replaces; an empty memo. */
static void test_kept_across_opens_and_renames(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("kept", MB_PASSWORD, 2048, &s), MV_OK);
    uint32_t uv = mb_uidvalidity(s, "INBOX");
    CHECK(uv != 0);
    CHECK(mb_absent(s, uv, 0));
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, "first", 5), MV_OK);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 3, "", 0), MV_OK);
    CHECK(mb_is(s, uv, 0, "first", 5));
    CHECK(mb_is(s, uv, 3, "", 0));
    CHECK(mb_absent(s, uv, 1));
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, "second", 6), MV_OK);
    CHECK(mb_is(s, uv, 0, "second", 6));
    mv_store_close(&s);
    CHECK_EQ_INT(tu_store_open("kept", MB_PASSWORD, &s), MV_OK);
    CHECK(mb_is(s, uv, 0, "second", 6));
    CHECK_EQ_INT(mv_mailbox_create(s, "Box", NULL), MV_OK);
    uint32_t box = mb_uidvalidity(s, "Box");
    CHECK(box != 0 && box != uv);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, box, 0, "box's", 5), MV_OK);
    CHECK_EQ_INT(mv_mailbox_rename(s, "Box", "Renamed"), MV_OK);
    CHECK(mb_is(s, box, 0, "box's", 5));
    CHECK(mb_is(s, uv, 0, "second", 6)); /* each mailbox its own */
    /* read inside the caller's snapshot as well */
    CHECK_EQ_INT(mv_store_read_begin(s), MV_OK);
    CHECK(mb_is(s, box, 0, "box's", 5));
    mv_store_read_end(s);
    mv_store_close(&s);
}

/* A deleted mailbox's memos go with it; one made again under the name finds none. */
static void test_gone_with_the_mailbox(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("gone", MB_PASSWORD, 2048, &s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Box", NULL), MV_OK);
    uint32_t old = mb_uidvalidity(s, "Box");
    CHECK_EQ_INT(mv_mailbox_memo_put(s, old, 1, "old days", 8), MV_OK);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, old, 2, "old more", 8), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM mailbox_memos"), 2);
    CHECK_EQ_INT(mv_mailbox_delete(s, "Box"), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM mailbox_memos"), 0);
    CHECK(mb_absent(s, old, 1));
    CHECK_EQ_INT(mv_mailbox_create(s, "Box", NULL), MV_OK);
    uint32_t again = mb_uidvalidity(s, "Box");
    CHECK(again != old);
    CHECK(mb_absent(s, again, 1));
    CHECK_EQ_INT(mv_mailbox_memo_put(s, old, 1, "late", 4), MV_ENOTFOUND); /* a late writer */
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM mailbox_memos"), 0);
    /* memos left over by damage (the trigger lost; a row of another UIDVALIDITY): check names
     * them, repair deletes them, the mailbox's own memo stays */
    CHECK_EQ_INT(mv_mailbox_memo_put(s, again, 1, "kept", 4), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "DROP TRIGGER mailbox_memos_gone; INSERT INTO "
                                         "mailbox_memos(id, uidvalidity, data) VALUES "
                                         "(999 * 4 + 1, 7, x'01')"),
                 SQLITE_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE mailbox_memos SET id = id + 1 WHERE id % 4 = 1 "
                                         "AND id / 4 != 999"),
                 SQLITE_OK); /* "kept" into slot 2: still its mailbox's */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "INSERT INTO mailbox_memos(id, uidvalidity, data) "
                                         "SELECT id * 4 + 3, uidvalidity + 1, x'02' FROM "
                                         "mailboxes WHERE name = 'Box'"),
                 SQLITE_OK);
    struct mv_check_report cr;
    CHECK_EQ_INT(mv_store_check(s, NULL, NULL, &cr), MV_ECORRUPT);
    CHECK_EQ_INT(cr.problems, 2);
    struct mv_repair_report rr;
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT(rr.memos_removed, 2);
    CHECK_EQ_INT(mv_store_check(s, NULL, NULL, &cr), MV_OK);
    CHECK(mb_is(s, again, 2, "kept", 4));
    mv_store_close(&s);
}

/* The bounds: MV_MAILBOX_MEMO_FLOOR + MV_MAILBOX_MEMO_PER_MESSAGE a message, and
 * MV_MAILBOX_MEMO_MAX; a refused put keeps the memo before. Bad arguments. */
static void test_bounds_and_bad_arguments(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("bounds", MB_PASSWORD, 2048, &s), MV_OK);
    uint32_t uv = mb_uidvalidity(s, "INBOX");
    size_t big = MV_MAILBOX_MEMO_MAX + 1;
    unsigned char *bytes = calloc(1, big);
    CHECK(bytes != NULL);
    if (bytes == NULL) {
        mv_store_close(&s);
        return;
    }
    for (size_t i = 0; i < big; i++) {
        bytes[i] = (unsigned char)(i * 7);
    }
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, bytes, 16), MV_OK);
    /* an empty mailbox: the floor */
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, bytes, MV_MAILBOX_MEMO_FLOOR), MV_OK);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, bytes, MV_MAILBOX_MEMO_FLOOR + 1), MV_ELIMIT);
    CHECK(mb_is(s, uv, 0, bytes, MV_MAILBOX_MEMO_FLOOR));
    /* three messages: three shares more */
    for (uint32_t i = 1; i <= 3; i++) {
        mb_append(s, "INBOX", i);
    }
    size_t allowed = MV_MAILBOX_MEMO_FLOOR + 3 * MV_MAILBOX_MEMO_PER_MESSAGE;
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, bytes, allowed + 1), MV_ELIMIT);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, bytes, allowed), MV_OK);
    CHECK(mb_is(s, uv, 0, bytes, allowed));
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, bytes, big), MV_ELIMIT);
    CHECK(mb_is(s, uv, 0, bytes, allowed));
    /* arguments */
    CHECK_EQ_INT(mv_mailbox_memo_put(NULL, uv, 0, bytes, 1), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, MV_MAILBOX_MEMO_SLOTS, bytes, 1), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, NULL, 1), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv + 1000, 0, bytes, 1), MV_ENOTFOUND);
    CHECK(strstr(mv_store_errmsg(s), "UIDVALIDITY") != NULL);
    void *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(mv_mailbox_memo_get(NULL, uv, 0, &data, &len), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_memo_get(s, uv, MV_MAILBOX_MEMO_SLOTS, &data, &len), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_memo_get(s, uv, 0, NULL, &len), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_memo_get(s, uv, 0, &data, NULL), MV_EINVAL);
    CHECK(mb_is(s, uv, 0, bytes, allowed)); /* every refusal kept it whole */
    /* a stored row that is no memo: text, not bytes */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE mailbox_memos SET data = 'text' WHERE id % 4 = 0"),
                 SQLITE_OK);
    CHECK_EQ_INT(mv_mailbox_memo_get(s, uv, 0, &data, &len), MV_ECORRUPT);
    CHECK(data == NULL && len == 0);
    free(bytes);
    mv_store_close(&s);
}

/* A store of version 15 gets the table and its trigger at its next open. */
static void test_migration_from_15(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("migrate", MB_PASSWORD, 2048, &s), MV_OK);
    mb_append(s, "INBOX", 1);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), TU_DOWNGRADE_TO_V15 "PRAGMA user_version = 15"),
                 SQLITE_OK);
    uint32_t uv = mb_uidvalidity(s, "INBOX");
    mv_store_close(&s);
    CHECK_EQ_INT(tu_store_open("migrate", MB_PASSWORD, &s), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM sqlite_schema WHERE name IN "
                                        "('mailbox_memos', 'mailbox_memos_gone')"),
                 2);
    CHECK_EQ_INT(mv_mailbox_memo_put(s, uv, 0, "after", 5), MV_OK);
    CHECK(mb_is(s, uv, 0, "after", 5));
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_kept_across_opens_and_renames);
    TEST(test_gone_with_the_mailbox);
    TEST(test_bounds_and_bad_arguments);
    TEST(test_migration_from_15);
    return th_summary();
}
