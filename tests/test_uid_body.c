/*
 * test_uid_body.c -- schema version 10's messages_uid_body (mailbox_id, uid, body_id): a
 * message read by UID finds its body in that index and reads no page of the messages table
 * (one B-tree leaf, read and decrypted, less per message of a FETCH of whole messages;
 * docs/BENCHMARKS.md, "Whole messages, seventh pass"); a store of version 9 gets it at its
 * next open and reads the same bytes; appends, copies and expunges keep it consistent. The
 * reads name the index (INDEXED BY): a store of version 10 that lost it (dropped by hand)
 * refuses them with SQLite's "no such index", its bytes untouched, until it is made again.
 *
 * Page reads are counted as SQLite's page cache misses from an emptied cache, never timed.
 */
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UB_PASSWORD "uid body index test password"
#define UB_MESSAGES 2000 /* enough rows for a messages table of more than one level */

static void ub_message(uint32_t i, char *out, size_t size, size_t *len)
{
    int n = snprintf(out, size,
                     "From: sender%u@example.org\r\nSubject: message %u\r\n\r\n"
                     "body of message %u\r\n",
                     i, i, i);
    *len = (size_t)n;
}

/* UB_MESSAGES small messages in INBOX, UIDs 1.. in order. */
static void ub_fill(mv_store *s)
{
    for (uint32_t i = 1; i <= UB_MESSAGES; i++) {
        char msg[256];
        size_t len = 0;
        uint32_t uid = 0;
        ub_message(i, msg, sizeof msg, &len);
        CHECK_EQ_INT(mv_message_append(s, "INBOX", msg, len, 0, NULL, 1700000000 + i, &uid), MV_OK);
        CHECK_EQ_INT(uid, i);
    }
}

/* Message uid read back whole, then its header, each from an emptied page cache (the
 * library's own): 1 if both are the right bytes; *misses and *header_misses get the pages
 * each read took from the file. */
static int ub_read_cold(mv_store *s, uint32_t uid, int *misses, int *header_misses)
{
    sqlite3 *db = mv_store_db(s);
    int cur = 0, high = 0;
    char want[256];
    size_t want_len = 0, len = 0, header_len = 0;
    void *raw = NULL, *header = NULL;
    ub_message(uid, want, sizeof want, &want_len);
    sqlite3_db_release_memory(db);
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_MISS, &cur, &high, 1);
    int rc = mv_message_fetch(s, "INBOX", uid, &raw, &len);
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_MISS, &cur, &high, 1);
    *misses = cur;
    sqlite3_db_release_memory(db);
    int header_rc = mv_message_fetch_header(s, "INBOX", uid, &header, &header_len);
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_MISS, &cur, &high, 0);
    *header_misses = cur;
    int ok = rc == MV_OK && len == want_len && memcmp(raw, want, len) == 0 && header_rc == MV_OK &&
             header_len == (size_t)(strstr(want, "\r\n\r\n") + 4 - want) &&
             memcmp(header, want, header_len) == 0;
    mv_free(raw);
    mv_free(header);
    return ok;
}

static long long ub_int(mv_store *s, const char *sql)
{
    return tu_int(mv_store_db(s), sql);
}

#define UB_HAS_INDEX                                                                               \
    "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'messages_uid_body'"

/* The read by UID takes fewer pages with the body id in the index than with an index of the
 * same name that gives only the row id (what the UNIQUE (mailbox_id, uid) index gave before
 * version 10, through which the body id is a descent into the messages table), both for the
 * whole message and for its header, with the same bytes read. A new store has no statistics:
 * the read names its index, as the planner would pick the UNIQUE one. */
static void test_read_skips_messages_table(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("skip", UB_PASSWORD, 2048, &s), MV_OK);
    ub_fill(s);
    CHECK_EQ_INT(ub_int(s, "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(ub_int(s, UB_HAS_INDEX), 1);
    CHECK_EQ_INT(ub_int(s, "SELECT count(*) FROM sqlite_schema WHERE name = 'sqlite_stat1'"), 0);
    const uint32_t uids[] = {1, 1234, UB_MESSAGES};
    int with[3], without[3], header_with[3], header_without[3];
    for (size_t i = 0; i < 3; i++) {
        CHECK(ub_read_cold(s, uids[i], &with[i], &header_with[i]));
    }
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "DROP INDEX messages_uid_body; CREATE INDEX "
                                         "messages_uid_body ON messages(mailbox_id, uid)"),
                 SQLITE_OK);
    for (size_t i = 0; i < 3; i++) {
        CHECK(ub_read_cold(s, uids[i], &without[i], &header_without[i]));
        printf("  # UID %u: pages read %d (header %d) with the body id in the index, %d (%d) "
               "without\n",
               uids[i], with[i], header_with[i], without[i], header_without[i]);
        CHECK(with[i] < without[i]);
        CHECK(header_with[i] < header_without[i]);
    }
    mv_store_close(&s);
}

/* A store of version 9 gets the index at its next open, in the open's migration; what it
 * holds equals the table, and every message reads as before. */
static void test_migration_from_9(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("from9", UB_PASSWORD, 2048, &s), MV_OK);
    ub_fill(s);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), TU_DOWNGRADE_TO_V9 "PRAGMA user_version = 9"), SQLITE_OK);
    mv_store_close(&s);

    char err[256] = "";
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    o.cache_size_kib = 2048;
    /* a read-only open cannot migrate: refused, so no read meets the store without the index */
    o.flags = MV_STORE_READONLY;
    CHECK_EQ_INT(mv_store_open("from9@example.org", UB_PASSWORD, strlen(UB_PASSWORD), &o, &s, err,
                               sizeof err),
                 MV_EUNSUPPORTED);
    CHECK(strstr(err, "schema version 9 needs a writable open") != NULL);
    o.flags = 0;
    CHECK_EQ_INT(mv_store_open("from9@example.org", UB_PASSWORD, strlen(UB_PASSWORD), &o, &s, err,
                               sizeof err),
                 MV_OK);
    struct mv_migration_status st;
    CHECK_EQ_INT(mv_store_migration(s, &st), MV_OK);
    CHECK_EQ_INT(st.schema_version, TU_SCHEMA_VERSION);
    CHECK_EQ_INT(st.migrated_from, 9);
    CHECK_EQ_INT(ub_int(s, "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(ub_int(s, UB_HAS_INDEX), 1);
    CHECK_EQ_INT(ub_int(s, "SELECT count(*) FROM messages INDEXED BY messages_uid_body "
                           "WHERE mailbox_id > 0"),
                 UB_MESSAGES);
    int misses = 0, header_misses = 0;
    for (uint32_t uid = 1; uid <= UB_MESSAGES; uid += 299) {
        CHECK(ub_read_cold(s, uid, &misses, &header_misses));
    }
    struct mv_check_report report;
    CHECK_EQ_INT(mv_store_check(s, NULL, NULL, &report), MV_OK);
    mv_store_close(&s);
}

/* Every change of messages' rows keeps the index in step: COPY, EXPUNGE, MOVE, then reads of
 * what is left and SQLite's integrity check (which compares each index with its table). */
static void test_index_follows_changes(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("changes", UB_PASSWORD, 2048, &s), MV_OK);
    ub_fill(s);
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(tu_exec(db, "UPDATE messages SET flags = flags | 8 WHERE uid % 3 = 0"), SQLITE_OK);
    uint32_t n = 0;
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:500", "Archive", &n), MV_OK);
    CHECK_EQ_INT(n, 500);
    CHECK_EQ_INT(mv_message_move(s, "INBOX", "501:600", "Trash", &n), MV_OK);
    CHECK_EQ_INT(n, 100);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK);
    CHECK_EQ_INT(ub_int(s, "SELECT count(*) FROM messages INDEXED BY messages_uid_body "
                           "WHERE mailbox_id > 0"),
                 ub_int(s, "SELECT count(*) FROM messages"));
    int misses = 0, header_misses = 0;
    for (uint32_t uid = 1; uid <= UB_MESSAGES; uid += 97) {
        void *raw = NULL;
        size_t len = 0;
        if (uid % 3 == 0 || (uid > 500 && uid <= 600)) {
            CHECK_EQ_INT(mv_message_fetch(s, "INBOX", uid, &raw, &len), MV_ENOTFOUND);
        } else {
            CHECK(ub_read_cold(s, uid, &misses, &header_misses));
        }
    }
    CHECK_EQ_INT(ub_int(s, "SELECT count(*) FROM pragma_integrity_check WHERE "
                           "integrity_check != 'ok'"),
                 0);
    mv_store_close(&s);
}

/* A mailvault refuses a store of a later schema version than it knows (what an older
 * mailvault does with a store of this one), writable or not, and leaves it as it is. */
static void test_later_version_refused(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("later", UB_PASSWORD, 2048, &s), MV_OK);
    char later[64], want[128];
    snprintf(later, sizeof later, "PRAGMA user_version = %d", TU_SCHEMA_VERSION + 1);
    snprintf(want, sizeof want, "schema version %d; this mailvault knows up to %d",
             TU_SCHEMA_VERSION + 1, TU_SCHEMA_VERSION);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), later), SQLITE_OK);
    mv_store_close(&s);
    char err[256] = "";
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    CHECK_EQ_INT(mv_store_open("later@example.org", UB_PASSWORD, strlen(UB_PASSWORD), &o, &s, err,
                               sizeof err),
                 MV_EUNSUPPORTED);
    CHECK(strstr(err, want) != NULL);
    o.flags = MV_STORE_READONLY;
    CHECK_EQ_INT(mv_store_open("later@example.org", UB_PASSWORD, strlen(UB_PASSWORD), &o, &s, err,
                               sizeof err),
                 MV_EUNSUPPORTED);
    char path[512];
    snprintf(path, sizeof path, "%s/example.org/later.db", tu_path("root"));
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, UB_PASSWORD, MV_CIPHER_AUTO, MV_DB_READONLY, &db), MV_OK);
    CHECK_EQ_INT(tu_int(db, "PRAGMA user_version"), TU_SCHEMA_VERSION + 1);
    sqlite3_close(db);
}

/* The problems a check reports, "what: detail" lines. */
static void ub_problem(void *arg, const char *what, const char *detail)
{
    char *all = arg;
    size_t used = strlen(all);
    snprintf(all + used, 2048 - used, "%s: %s\n", what, detail);
}

/* A store of version 10 without the index (dropped by hand: no open, migration or command
 * of mailvault drops it) fails its reads by UID with an error naming the index, and changes
 * nothing; the check reports it and each other index statements name (INDEXED BY) that is
 * gone, the repair makes them again, and the store reads the same bytes. */
static void test_read_without_index(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("noindex", UB_PASSWORD, 2048, &s), MV_OK);
    ub_fill(s);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "DROP INDEX messages_uid_body; DROP INDEX "
                                         "messages_deleted"),
                 SQLITE_OK);
    void *raw = NULL;
    size_t len = 0;
    CHECK(mv_message_fetch(s, "INBOX", 7, &raw, &len) != MV_OK);
    printf("  # %s\n", mv_store_errmsg(s));
    CHECK(strstr(mv_store_errmsg(s), "no such index: messages_uid_body") != NULL);
    CHECK(mv_message_fetch_header(s, "INBOX", 7, &raw, &len) != MV_OK);

    static char problems[2048];
    problems[0] = '\0';
    struct mv_check_report cr;
    CHECK_EQ_INT(mv_store_check(s, ub_problem, problems, &cr), MV_ECORRUPT);
    printf("  # %s", problems);
    CHECK_EQ_INT((int)cr.problems, 2);
    CHECK(strstr(problems, "index: index messages_uid_body is missing") != NULL);
    CHECK(strstr(problems, "index: index messages_deleted is missing") != NULL);

    struct mv_repair_report rr;
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    problems[0] = '\0';
    CHECK_EQ_INT(mv_store_check(s, ub_problem, problems, &cr), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM sqlite_schema WHERE type = "
                                        "'index' AND name IN ('messages_uid_body', "
                                        "'messages_deleted', 'messages_body')"),
                 3);
    int misses = 0, header_misses = 0;
    CHECK(ub_read_cold(s, 7, &misses, &header_misses));
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_read_skips_messages_table);
    TEST(test_migration_from_9);
    TEST(test_index_follows_changes);
    TEST(test_read_without_index);
    TEST(test_later_version_refused);
    return th_summary();
}
