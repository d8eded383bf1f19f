/*
 * test_memo.c -- memos (mv_message_memos_put / mv_message_memo_get, schema version 14): byte
 * strings kept with a message's bytes across opens, shared by copies, gone with the bytes,
 * never attached to the wrong bytes (a body id given again after the purge, a writer whose
 * message was expunged meanwhile, a mailbox made again under the same name), and bounded.
 */
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MM_PASSWORD "memo test password"

/* Message i of n bytes: a short header and a body of filler (deterministic). */
static size_t mm_message(uint32_t i, size_t n, char *out, size_t cap)
{
    int h = snprintf(out, cap, "From: a%u@example.org\r\nSubject: memo %u\r\n\r\n", i, i);
    size_t len = (size_t)h;
    while (len < n && len + 2 < cap) {
        out[len] = (char)('a' + (len + i) % 26);
        len++;
    }
    return len;
}

static void mm_append(mv_store *s, const char *mailbox, uint32_t i, size_t n)
{
    char msg[96 << 10];
    size_t len = mm_message(i, n, msg, sizeof msg);
    CHECK_EQ_INT(len, n);
    CHECK_EQ_INT(mv_message_append(s, mailbox, msg, len, 0, NULL, 1700000000 + i, NULL), MV_OK);
}

static uint32_t mm_uidvalidity(mv_store *s, const char *mailbox)
{
    struct mv_mailbox_info info;
    if (mv_mailbox_status(s, mailbox, &info) != MV_OK) {
        return 0;
    }
    return info.uidvalidity;
}

/* 1 if slot of (uidvalidity, uid) holds exactly text. */
static int mm_is(mv_store *s, uint32_t uidvalidity, uint32_t uid, uint32_t slot, const char *text)
{
    void *data = NULL;
    size_t len = 0;
    int rc = mv_message_memo_get(s, uidvalidity, uid, slot, &data, &len);
    int same = rc == MV_OK && len == strlen(text) && memcmp(data, text, len) == 0;
    if (!same) {
        printf("  # memo %u/%u slot %u: rc %d, %zu bytes, wanted \"%s\"\n", uidvalidity, uid, slot,
               rc, len, text);
    }
    mv_free(data);
    return same;
}

static int mm_absent(mv_store *s, uint32_t uidvalidity, uint32_t uid, uint32_t slot)
{
    void *data = (void *)1;
    size_t len = 1;
    int rc = mv_message_memo_get(s, uidvalidity, uid, slot, &data, &len);
    int absent = rc == MV_ENOTFOUND && data == NULL && len == 0;
    if (rc == MV_OK) {
        mv_free(data);
    }
    return absent;
}

static size_t mm_put1(mv_store *s, uint32_t uidvalidity, uint32_t uid, uint32_t slot, const char *t)
{
    struct mv_memo m = {uid, slot, t, strlen(t)};
    size_t stored = 99;
    if (mv_message_memos_put(s, uidvalidity, &m, 1, &stored) != MV_OK) {
        return 99;
    }
    return stored;
}

static void test_kept_and_read_back(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("kept", MM_PASSWORD, 2048, &s), MV_OK);
    for (uint32_t i = 1; i <= 3; i++) {
        mm_append(s, "INBOX", i, 400);
    }
    uint32_t uv = mm_uidvalidity(s, "INBOX");
    CHECK(uv != 0);
    struct mv_memo memos[] = {
        {1, 0, "one-zero", 8}, {1, 3, "one-three", 9}, {2, 0, "", 0}, {9, 0, "no such", 7}};
    size_t stored = 0;
    CHECK_EQ_INT(mv_message_memos_put(s, uv, memos, 4, &stored), MV_OK);
    CHECK_EQ_INT(stored, 3); /* uid 9 is not there */
    CHECK(mm_is(s, uv, 1, 0, "one-zero"));
    CHECK(mm_is(s, uv, 1, 3, "one-three"));
    CHECK(mm_is(s, uv, 2, 0, ""));
    CHECK(mm_absent(s, uv, 1, 1));
    CHECK(mm_absent(s, uv, 3, 0));
    CHECK(mm_absent(s, uv, 9, 0));
    CHECK(mm_absent(s, uv + 1, 1, 0)); /* no mailbox has it */
    CHECK_EQ_INT(mm_put1(s, uv + 1, 1, 1, "x"), 0);
    /* replaced, not added */
    CHECK_EQ_INT(mm_put1(s, uv, 1, 0, "one-zero again"), 1);
    CHECK(mm_is(s, uv, 1, 0, "one-zero again"));
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM body_memos"), 3);

    /* across a close and an open, and a rename (the UIDVALIDITY stays) */
    CHECK_EQ_INT(mv_mailbox_create(s, "Work", NULL), MV_OK);
    mm_append(s, "Work", 4, 400);
    uint32_t work = mm_uidvalidity(s, "Work");
    CHECK_EQ_INT(mm_put1(s, work, 1, 2, "work"), 1);
    mv_store_close(&s);
    CHECK_EQ_INT(tu_store_open("kept", MM_PASSWORD, &s), MV_OK);
    CHECK(mm_is(s, uv, 1, 3, "one-three"));
    CHECK_EQ_INT(mv_mailbox_rename(s, "Work", "Play"), MV_OK);
    CHECK(mm_is(s, work, 1, 2, "work"));

    /* a mailbox deleted and made again under its name has another UIDVALIDITY: its new
     * message 1 (other bytes) has no memo, and the old UIDVALIDITY names nothing */
    CHECK_EQ_INT(mv_mailbox_delete(s, "Play"), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Play", NULL), MV_OK);
    mm_append(s, "Play", 5, 400);
    uint32_t play = mm_uidvalidity(s, "Play");
    CHECK(play != work);
    CHECK(mm_absent(s, play, 1, 2));
    CHECK(mm_absent(s, work, 1, 2));
    mv_store_close(&s);
}

static void test_bounds_and_bad_arguments(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("bounds", MM_PASSWORD, 2048, &s), MV_OK);
    mm_append(s, "INBOX", 1, 400);
    mm_append(s, "INBOX", 2, 4 * (MV_MEMO_MAX + 1) + 100);
    uint32_t uv = mm_uidvalidity(s, "INBOX");
    static char big[MV_MEMO_MAX + 1];
    memset(big, 'b', sizeof big);
    /* MV_MEMO_FLOOR and a quarter of the message's 400 bytes are kept, a byte more is not */
    struct mv_memo at[] = {{1, 0, big, MV_MEMO_FLOOR + 100}, {1, 1, big, MV_MEMO_FLOOR + 101}};
    size_t stored = 0;
    CHECK_EQ_INT(mv_message_memos_put(s, uv, at, 2, &stored), MV_OK);
    CHECK_EQ_INT(stored, 1);
    CHECK(mm_absent(s, uv, 1, 1));
    /* MV_MEMO_MAX bytes are kept, one more is not, whatever the message's size */
    struct mv_memo max[] = {{2, 0, big, MV_MEMO_MAX}, {2, 1, big, MV_MEMO_MAX + 1}};
    CHECK_EQ_INT(mv_message_memos_put(s, uv, max, 2, &stored), MV_OK);
    CHECK_EQ_INT(stored, 1);
    CHECK(mm_absent(s, uv, 2, 1));
    void *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(mv_message_memo_get(s, uv, 2, 0, &data, &len), MV_OK);
    CHECK_EQ_INT(len, MV_MEMO_MAX);
    mv_free(data);

    /* refused whole: nothing of the call kept */
    struct mv_memo bad[] = {{1, 2, "fine", 4}, {1, MV_MEMO_SLOTS, "slot", 4}};
    CHECK_EQ_INT(mv_message_memos_put(s, uv, bad, 2, &stored), MV_EINVAL);
    CHECK_EQ_INT(stored, 0);
    CHECK(strstr(mv_store_errmsg(s), "slot") != NULL);
    CHECK(mm_absent(s, uv, 1, 2));
    struct mv_memo null_bytes = {1, 0, NULL, 3};
    CHECK_EQ_INT(mv_message_memos_put(s, uv, &null_bytes, 1, NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memos_put(s, uv, NULL, 1, NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memos_put(s, uv, at, MV_MEMO_BATCH_MAX + 1, NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memos_put(s, uv, NULL, 0, &stored), MV_OK);
    CHECK_EQ_INT(mv_message_memos_put(NULL, uv, at, 1, NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memo_get(s, uv, 1, MV_MEMO_SLOTS, &data, &len), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memo_get(s, uv, 1, 0, NULL, &len), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memo_get(NULL, uv, 1, 0, &data, &len), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memo_get(s, uv, 1, 0, &data, &len), MV_OK);
    CHECK_EQ_INT(len, MV_MEMO_FLOOR + 100);
    mv_free(data);
    mv_store_close(&s);
}

/* The body id of message uid of INBOX. */
static long long mm_body_id(mv_store *s, uint32_t uid)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT body_id FROM messages WHERE uid = %u AND mailbox_id = "
             "(SELECT id FROM mailboxes WHERE name = 'INBOX')",
             uid);
    return tu_int(mv_store_db(s), sql);
}

static void test_copies_share_and_the_purge_takes_them(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("copies", MM_PASSWORD, 2048, &s), MV_OK);
    mm_append(s, "INBOX", 1, 400);
    mm_append(s, "INBOX", 2, 500);
    CHECK_EQ_INT(mv_mailbox_create(s, "Saved", NULL), MV_OK);
    uint32_t inbox = mm_uidvalidity(s, "INBOX"), saved = mm_uidvalidity(s, "Saved");
    CHECK_EQ_INT(mm_put1(s, inbox, 2, 0, "answer of 2"), 1);
    uint32_t copied = 0;
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "2", "Saved", &copied), MV_OK);
    CHECK_EQ_INT(copied, 1);
    CHECK(mm_is(s, saved, 1, 0, "answer of 2")); /* the copy shares its bytes' memo */

    /* the original goes: the copy keeps the bytes and the memo */
    long long body = mm_body_id(s, 2);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "2", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", "1:*", NULL), MV_OK);
    CHECK_EQ_INT(mv_store_purge(s, 0, NULL), MV_OK);
    CHECK(mm_is(s, saved, 1, 0, "answer of 2"));
    CHECK(mm_absent(s, inbox, 2, 0));

    /* then the copy: the purge deletes the body and its memo with it */
    CHECK_EQ_INT(mv_flags_set(s, "Saved", "1", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "Saved", "1:*", NULL), MV_OK);
    CHECK_EQ_INT(mv_store_purge(s, 0, NULL), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM body_memos"), 0);

    /* a memo left over by damage (the trigger lost): check names it, repair deletes it */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "DROP TRIGGER body_memos_gone; INSERT INTO "
                                         "body_memos(id, data) VALUES (999 * 4 + 1, x'01')"),
                 SQLITE_OK);
    struct mv_check_report cr;
    CHECK_EQ_INT(mv_store_check(s, NULL, NULL, &cr), MV_ECORRUPT);
    CHECK_EQ_INT(cr.problems, 1);
    struct mv_repair_report rr;
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT(rr.memos_removed, 1);
    CHECK_EQ_INT(mv_store_check(s, NULL, NULL, &cr), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "CREATE TRIGGER body_memos_gone AFTER DELETE ON bodies "
                                         "BEGIN DELETE FROM body_memos WHERE id >= old.id * 4 "
                                         "AND id < old.id * 4 + 4; END"),
                 SQLITE_OK);

    /* the next body takes the purged body's id (it was the highest): it has no memo */
    mm_append(s, "INBOX", 3, 600);
    CHECK_EQ_INT(mm_body_id(s, 3), body);
    CHECK(mm_absent(s, inbox, 3, 0));
    mv_store_close(&s);
}

/* A memo made from a message that was expunged and purged before the memo was written (a
 * server writes its memos between commands, later): nothing kept, and the body that takes
 * the id gets no memo either. */
static void test_late_writer_of_a_gone_message(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("late", MM_PASSWORD, 2048, &s), MV_OK);
    mm_append(s, "INBOX", 1, 400);
    mm_append(s, "INBOX", 2, 400);
    uint32_t uv = mm_uidvalidity(s, "INBOX");
    long long body = mm_body_id(s, 2);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "2", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", "1:*", NULL), MV_OK);
    CHECK_EQ_INT(mv_store_purge(s, 0, NULL), MV_OK);
    mm_append(s, "INBOX", 3, 400);
    CHECK_EQ_INT(mm_body_id(s, 3), body);
    CHECK_EQ_INT(mm_put1(s, uv, 2, 0, "answer of the gone message 2"), 0);
    CHECK(mm_absent(s, uv, 3, 0));
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM body_memos"), 0);
    mv_store_close(&s);
}

/* A store of version 13 gets the table, its trigger and the index at its next open. */
static void test_migration_from_13(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("migrate", MM_PASSWORD, 2048, &s), MV_OK);
    mm_append(s, "INBOX", 1, 400);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), TU_DOWNGRADE_TO_V13 "PRAGMA user_version = 13"),
                 SQLITE_OK);
    uint32_t uv = mm_uidvalidity(s, "INBOX");
    mv_store_close(&s);
    CHECK_EQ_INT(tu_store_open("migrate", MM_PASSWORD, &s), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM sqlite_schema WHERE name IN "
                                        "('body_memos', 'body_memos_gone', "
                                        "'mailboxes_uidvalidity')"),
                 3);
    CHECK_EQ_INT(mm_put1(s, uv, 1, 1, "after the migration"), 1);
    CHECK(mm_is(s, uv, 1, 1, "after the migration"));
    mv_store_close(&s);
}

struct mm_seen {
    uint32_t uids[16];
    char texts[16][16];
    size_t count;
    int stop_at; /* got() returns MV_ELIMIT at this call (1-based; 0: never) */
};

static int mm_got(void *arg, uint32_t uid, const void *data, size_t len)
{
    struct mm_seen *seen = arg;
    if (seen->count < 16) {
        seen->uids[seen->count] = uid;
        snprintf(seen->texts[seen->count], sizeof seen->texts[0], "%.*s", (int)len,
                 (const char *)data);
    }
    seen->count++;
    return seen->stop_at != 0 && (int)seen->count == seen->stop_at ? MV_ELIMIT : MV_OK;
}

/* A range's memos in UID order, one slot's only, messages without one passed over; what
 * got() returns ends the read; another UIDVALIDITY gives none. */
static void test_range(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("range", MM_PASSWORD, 2048, &s), MV_OK);
    for (uint32_t i = 1; i <= 8; i++) {
        mm_append(s, "INBOX", i, 400);
    }
    uint32_t uv = mm_uidvalidity(s, "INBOX");
    struct mv_memo memos[] = {{2, 0, "two", 3},  {3, 0, "three", 5}, {3, 1, "other slot", 10},
                              {5, 0, "five", 4}, {8, 0, "eight", 5}, {1, 1, "one", 3}};
    CHECK_EQ_INT(mv_message_memos_put(s, uv, memos, 6, NULL), MV_OK);
    struct mm_seen seen = {0};
    CHECK_EQ_INT(mv_message_memos_range(s, uv, 2, 7, 0, mm_got, &seen), MV_OK);
    CHECK_EQ_INT(seen.count, 3);
    CHECK_EQ_INT(seen.uids[0], 2);
    CHECK_EQ_INT(seen.uids[1], 3);
    CHECK_EQ_INT(seen.uids[2], 5);
    CHECK(strcmp(seen.texts[1], "three") == 0);
    seen = (struct mm_seen){.stop_at = 2};
    CHECK_EQ_INT(mv_message_memos_range(s, uv, 1, 8, 0, mm_got, &seen), MV_ELIMIT);
    CHECK_EQ_INT(seen.count, 2);
    seen = (struct mm_seen){0};
    CHECK_EQ_INT(mv_message_memos_range(s, uv + 1, 1, 8, 0, mm_got, &seen), MV_OK);
    CHECK_EQ_INT(seen.count, 0);
    CHECK_EQ_INT(mv_message_memos_range(s, uv, 1, 8, MV_MEMO_SLOTS, mm_got, &seen), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memos_range(s, uv, 1, 8, 0, NULL, &seen), MV_EINVAL);
    mv_store_close(&s);
}

/* The keys of INBOX's messages 1..n as a caller's listing holds them now. */
static int mm_keys(mv_store *s, struct mv_message_key *keys, size_t n)
{
    struct mv_mailbox_info info;
    mv_message_iter *it = NULL;
    if (mv_mailbox_status(s, "INBOX", &info) != MV_OK ||
        mv_message_list_begin(s, "INBOX", 0, 0, &it) != MV_OK) {
        return -1;
    }
    struct mv_message_entry e;
    size_t got = 0;
    while (got < n && mv_message_list_next(it, &e) == 1) {
        keys[got++] = (struct mv_message_key){.body_key = e.body_key,
                                              .size = e.size,
                                              .modseq = info.highestmodseq,
                                              .uidvalidity = info.uidvalidity};
    }
    mv_message_list_end(&it);
    return got == n ? 0 : -1;
}

struct mm_keyed {
    char texts[16][16];
    int calls;
};

static int mm_keyed_got(void *arg, size_t index, const void *data, size_t len)
{
    struct mm_keyed *k = arg;
    if (index < 16) {
        snprintf(k->texts[index], sizeof k->texts[0], "%.*s", (int)len, (const char *)data);
    }
    k->calls++;
    return MV_OK;
}

/* Memos read by the listing's body keys: each key gets its own message's, copies of one body
 * both get it; the lookups one by one (bodies far apart) give the same; once the mailbox
 * changed, MV_ENOTFOUND and nothing read (the keys may no longer hold). */
static void test_keyed(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("keyed", MM_PASSWORD, 2048, &s), MV_OK);
    for (uint32_t i = 1; i <= 6; i++) {
        mm_append(s, "INBOX", i, 400);
    }
    uint32_t copied = 0;
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "2", "INBOX", &copied), MV_OK); /* uid 7 */
    uint32_t uv = mm_uidvalidity(s, "INBOX");
    struct mv_memo memos[] = {{2, 1, "two", 3}, {4, 1, "four", 4}, {5, 0, "slot 0", 6}};
    CHECK_EQ_INT(mv_message_memos_put(s, uv, memos, 3, NULL), MV_OK);
    struct mv_message_key keys[7];
    CHECK_EQ_INT(mm_keys(s, keys, 7), 0);
    struct mm_keyed got = {0};
    CHECK_EQ_INT(mv_message_memos_keyed(s, "INBOX", keys, 7, 1, mm_keyed_got, &got), MV_OK);
    CHECK_EQ_INT(got.calls, 3);
    CHECK(strcmp(got.texts[1], "two") == 0);
    CHECK(strcmp(got.texts[3], "four") == 0);
    CHECK(strcmp(got.texts[6], "two") == 0); /* the copy shares the bytes */
    CHECK(got.texts[4][0] == '\0');          /* slot 0 only */
    /* bodies far apart: the same answers through a lookup each */
    struct mv_message_key apart[2] = {keys[1], keys[3]};
    apart[1].body_key += (uint64_t)1000 << 3; /* another body, far off: none */
    got = (struct mm_keyed){0};
    CHECK_EQ_INT(mv_message_memos_keyed(s, "INBOX", apart, 2, 1, mm_keyed_got, &got), MV_OK);
    CHECK_EQ_INT(got.calls, 1);
    CHECK(strcmp(got.texts[0], "two") == 0);
    /* keys of two listings, bad slot, NULLs */
    struct mv_message_key mixed[2] = {keys[0], keys[1]};
    mixed[1].modseq++;
    CHECK_EQ_INT(mv_message_memos_keyed(s, "INBOX", mixed, 2, 1, mm_keyed_got, &got), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memos_keyed(s, "INBOX", keys, 7, MV_MEMO_SLOTS, mm_keyed_got, &got),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_message_memos_keyed(s, "INBOX", keys, 7, 1, NULL, &got), MV_EINVAL);
    CHECK_EQ_INT(mv_message_memos_keyed(s, "INBOX", NULL, 0, 1, mm_keyed_got, &got), MV_OK);
    /* the mailbox changed (a flag): the listing's keys are not used */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL), MV_OK);
    got = (struct mm_keyed){0};
    CHECK_EQ_INT(mv_message_memos_keyed(s, "INBOX", keys, 7, 1, mm_keyed_got, &got), MV_ENOTFOUND);
    CHECK_EQ_INT(got.calls, 0);
    CHECK_EQ_INT(mv_message_memos_keyed(s, "Nope", keys, 7, 1, mm_keyed_got, &got), MV_ENOTFOUND);
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_kept_and_read_back);
    TEST(test_bounds_and_bad_arguments);
    TEST(test_copies_share_and_the_purge_takes_them);
    TEST(test_late_writer_of_a_gone_message);
    TEST(test_migration_from_13);
    TEST(test_range);
    TEST(test_keyed);
    return th_summary();
}
