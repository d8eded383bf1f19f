/*
 * test_body_refs.c -- schema version 12's body_refs: a body's reference count in a narrow
 * table of its own, not in the bodies row (which holds the header copy, a few rows a page).
 * A COPY adds its references there, so the pages it writes follow the messages it copies,
 * not the size of their bodies' rows; a store of version 11 gets the table at its next open
 * with the counts it had (the references an EXPUNGE noted for the purge included), and the
 * purge, the check and the repair use it.
 *
 * Pages are counted as SQLite's pages written from its cache (SQLITE_DBSTATUS_CACHE_WRITE),
 * never timed.
 */
#include "harness.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BR_PASSWORD "body refs test password"
#define BR_MESSAGES 600

/* Message i: a header of ~2 KiB that compresses to about half (hex digits of a simple
 * generator, so its bodies row holds a copy of it, version 11, a few rows a page) and a body
 * of its own. */
static size_t br_message(uint32_t i, char *out, size_t size)
{
    int n = snprintf(out, size, "From: sender%u@example.org\r\nSubject: message %u\r\n", i, i);
    uint32_t x = i * 2654435761u + 1;
    for (int k = 0; k < 24; k++) {
        n += snprintf(out + n, size - (size_t)n, "X-Trace-%02d: ", k);
        for (int w = 0; w < 8; w++) {
            x = x * 1664525u + 1013904223u; /* deterministic: no random byte in a test */
            n += snprintf(out + n, size - (size_t)n, "%08x", x);
        }
        n += snprintf(out + n, size - (size_t)n, "\r\n");
    }
    n += snprintf(out + n, size - (size_t)n, "\r\nbody of message %u\r\n", i);
    return (size_t)n;
}

static void br_fill(const char *name, mv_store **s)
{
    CHECK_EQ_INT(tu_store_create(name, BR_PASSWORD, 2048, s), MV_OK);
    for (uint32_t i = 1; *s != NULL && i <= BR_MESSAGES; i++) {
        char msg[4096];
        size_t len = br_message(i, msg, sizeof msg);
        CHECK_EQ_INT(mv_message_append(*s, "INBOX", msg, len, 0, NULL, 1700000000 + i, NULL),
                     MV_OK);
    }
}

/* Opens name@example.org's store again, as a server's login would (its migration runs). */
static void br_reopen(const char *name, mv_store **s)
{
    CHECK_EQ_INT(tu_store_open(name, BR_PASSWORD, s), MV_OK);
}

static void br_problem(void *arg, const char *what, const char *detail)
{
    char *out = arg;
    size_t n = strlen(out);
    snprintf(out + n, 1024 - n, "%s: %s; ", what, detail);
}

/* mv_store_check finds nothing, and every count is what uses its body plus what waits. */
static int br_consistent(mv_store *s)
{
    char problems[1024] = "";
    struct mv_check_report cr;
    int rc = mv_store_check(s, br_problem, problems, &cr);
    if (rc != MV_OK) {
        printf("  # check: %s\n", problems);
    }
    return rc == MV_OK &&
           tu_int(mv_store_db(s),
                  "SELECT count(*) FROM body_refs r WHERE refcount != (SELECT count(*) FROM "
                  "messages m WHERE m.body_id = r.id) + coalesce((SELECT value FROM meta WHERE "
                  "key = printf('purge_unref:%020d', r.id)), 0)") == 0 &&
           tu_int(mv_store_db(s), "SELECT count(*) FROM bodies") ==
               tu_int(mv_store_db(s), "SELECT count(*) FROM body_refs");
}

/* A COPY of all 600 messages writes the pages of their new rows and indexes and of the
 * counts (43 here), not the bodies' pages: with the count in the bodies row (version 11) the
 * same COPY rewrote every page of bodies (301 here) besides. */
static void test_copy_writes_few_pages(void)
{
    mv_store *s = NULL;
    br_fill("copy", &s);
    if (s == NULL) {
        return;
    }
    sqlite3 *db = mv_store_db(s);
    long long body_pages = tu_int(db, "SELECT count(*) FROM dbstat WHERE name = 'bodies'");
    printf("  # bodies: %lld pages, %lld header copies\n", body_pages,
           tu_int(db, "SELECT count(*) FROM bodies WHERE head IS NOT NULL"));
    CHECK(body_pages > BR_MESSAGES / 8); /* the header copies make the rows wide */
    int cur = 0, high = 0;
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_WRITE, &cur, &high, 1);
    uint32_t n = 0;
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:*", "Archive", &n), MV_OK);
    CHECK_EQ_INT((int)n, BR_MESSAGES);
    sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_WRITE, &cur, &high, 0);
    printf("  # COPY of %d messages: %d pages written (bodies: %lld pages)\n", BR_MESSAGES, cur,
           body_pages);
    CHECK(cur > 0);
    CHECK(cur < body_pages / 2);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM body_refs WHERE refcount = 2"), BR_MESSAGES);
    CHECK(br_consistent(s));
    /* the copies share the bodies: expunged and purged, the originals keep theirs */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:*", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    uint32_t count = 0;
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &count), MV_OK);
    uint64_t left = 0;
    CHECK_EQ_INT(mv_store_purge(s, 0, &left), MV_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies"), BR_MESSAGES);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM body_refs WHERE refcount = 1"), BR_MESSAGES);
    CHECK(br_consistent(s));
    /* and the last references gone, the purge deletes the bodies with their counts */
    CHECK_EQ_INT(mv_mailbox_delete(s, "Archive"), MV_OK);
    CHECK_EQ_INT(mv_store_purge(s, 0, &left), MV_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies"), 0);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM body_refs"), 0);
    CHECK(br_consistent(s));
    mv_store_close(&s);
}

/* A store of version 11 (counts in bodies.refcount) opens as version 12 with the same
 * counts in body_refs, made from what uses each body: its messages (some in a second
 * mailbox), the references an EXPUNGE noted and the purge has yet to take off, and the
 * bodies a mailbox delete left at 0 for the purge; a count no use explains (set by hand
 * here) is not carried over. The purge's index moves, and only the new table is analyzed. */
static void test_migration_from_11(void)
{
    mv_store *s = NULL;
    br_fill("migrate", &s);
    if (s == NULL) {
        return;
    }
    uint32_t n = 0;
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:100", "Archive", &n), MV_OK);
    CHECK_EQ_INT(
        mv_flags_set(s, "INBOX", "1:50,301:320", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    uint32_t count = 0;
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &count), MV_OK);
    CHECK_EQ_INT((int)count, 70);
    CHECK_EQ_INT(mv_mailbox_create(s, "Gone", NULL), MV_OK);
    CHECK_EQ_INT(mv_message_move(s, "INBOX", "401:410", "Gone", &n), MV_OK);
    CHECK_EQ_INT(mv_mailbox_delete(s, "Gone"), MV_OK);
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM body_refs WHERE refcount = 0"), 10);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM meta WHERE key LIKE 'purge_unref:%'"), 70);
    CHECK_EQ_INT(tu_exec(db, "CREATE TABLE refs_before AS SELECT id, refcount FROM body_refs"),
                 SQLITE_OK);
    /* body 450's count says 5 with one message: no use explains it */
    CHECK_EQ_INT(tu_exec(db, TU_DOWNGRADE_TO_V11 "PRAGMA user_version = 11; "
                                                 "UPDATE bodies SET refcount = 5 WHERE id = 450"),
                 SQLITE_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies b JOIN refs_before r "
                            "ON r.id = b.id AND r.refcount = b.refcount"),
                 BR_MESSAGES - 1);
    mv_store_close(&s); /* its PRAGMA optimize analyzes what was queried */
    /* no statistics, to see which tables the migration analyzes */
    char path[512];
    snprintf(path, sizeof path, "%s/example.org/migrate.db", tu_path("root"));
    sqlite3 *raw = NULL;
    CHECK_EQ_INT(tu_open(path, BR_PASSWORD, MV_CIPHER_AUTO, 0, &raw), MV_OK);
    CHECK_EQ_INT(tu_exec(raw, "ANALYZE messages; DELETE FROM sqlite_stat1"), SQLITE_OK);
    sqlite3_close(raw);
    br_reopen("migrate", &s);
    if (s == NULL) {
        return;
    }
    db = mv_store_db(s);
    CHECK_EQ_INT(tu_int(db, "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM body_refs b JOIN refs_before r "
                            "ON r.id = b.id AND r.refcount = b.refcount"),
                 BR_MESSAGES); /* 450 counted from its message: 1, as before the edit */
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM sqlite_schema WHERE name IN "
                            "('bodies_unreferenced', 'body_refs_unreferenced')"),
                 1);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = "
                            "'body_refs_unreferenced'"),
                 1);
    /* the new table analyzed, and only it: a whole ANALYZE counts every table without an
     * index row by row (45.7 s at 1,000,000 messages) */
    CHECK(tu_int(db, "SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'body_refs'") > 0);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM sqlite_stat1 WHERE tbl != 'body_refs'"), 0);
    CHECK(br_consistent(s));
    uint64_t left = 0;
    CHECK_EQ_INT(mv_store_purge(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    /* 1:50 were copied (their bodies stay, used by Archive); 301:320 and 401:410 were not */
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies"), BR_MESSAGES - 30);
    CHECK(br_consistent(s));
    mv_store_close(&s);
}

/* A body of version 11 that nothing uses and whose count is not 0 (a count check reported)
 * has no row after the migration: check names it, repair gives it 0 and the purge deletes
 * it; before the repair, an append of the same bytes uses the body again and gives it its
 * row. */
static void test_migration_unexplained_count(void)
{
    mv_store *s = NULL;
    br_fill("unexplained", &s);
    if (s == NULL) {
        return;
    }
    sqlite3 *db = mv_store_db(s);
    /* messages 7 and 8 lose their rows by hand: bodies 7 and 8 keep their count of 1 */
    CHECK_EQ_INT(tu_exec(db, TU_DOWNGRADE_TO_V11 "PRAGMA user_version = 11; DELETE FROM "
                                                 "messages WHERE uid IN (7, 8)"),
                 SQLITE_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT refcount FROM bodies WHERE id = 7"), 1);
    mv_store_close(&s);
    br_reopen("unexplained", &s);
    if (s == NULL) {
        return;
    }
    db = mv_store_db(s);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM body_refs WHERE id IN (7, 8)"), 0);
    char problems[1024] = "";
    struct mv_check_report cr;
    CHECK_EQ_INT(mv_store_check(s, br_problem, problems, &cr), MV_ECORRUPT);
    printf("  # %s\n", problems);
    CHECK(strstr(problems, "refcount: body 7 has no reference count") != NULL);
    CHECK(strstr(problems, "refcount: body 8 has no reference count") != NULL);
    /* the bytes of message 8 appended again take body 8 up, with its row */
    char msg[4096];
    size_t len = br_message(8, msg, sizeof msg);
    uint32_t uid = 0;
    CHECK_EQ_INT(mv_message_append(s, "INBOX", msg, len, 0, NULL, 1700000008, &uid), MV_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT refcount FROM body_refs WHERE id = 8"), 1);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies"), BR_MESSAGES);
    struct mv_repair_report rr;
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT((int)rr.refcounts_fixed, 1); /* body 7's row */
    CHECK_EQ_INT(tu_int(db, "SELECT refcount FROM body_refs WHERE id = 7"), 0);
    uint64_t left = 0;
    CHECK_EQ_INT(mv_store_purge(s, 0, &left), MV_OK);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM bodies"), BR_MESSAGES - 1);
    CHECK(br_consistent(s));
    mv_store_close(&s);
}

/* A body without its count's row, or a count without its body (a hand edit, a damaged
 * store: no foreign key holds them together), is a problem the check names; the repair
 * gives the body its row with the count of its messages and drops the other. */
static void test_missing_count_checked_and_repaired(void)
{
    mv_store *s = NULL;
    br_fill("repair", &s);
    if (s == NULL) {
        return;
    }
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(tu_exec(db, "DELETE FROM body_refs WHERE id IN (3, 7); "
                             "INSERT INTO body_refs(id, refcount) VALUES (9999, 2)"),
                 SQLITE_OK);
    char problems[1024] = "";
    struct mv_check_report cr;
    CHECK_EQ_INT(mv_store_check(s, br_problem, problems, &cr), MV_ECORRUPT);
    printf("  # %s\n", problems);
    CHECK(strstr(problems, "refcount: body 3 has no reference count") != NULL);
    CHECK(strstr(problems, "refcount: body 7 has no reference count") != NULL);
    CHECK(strstr(problems, "refcount: reference count 9999 belongs to no body") != NULL);
    struct mv_repair_report rr;
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT((int)rr.refcounts_fixed, 3);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM body_refs WHERE id = 9999"), 0);
    CHECK_EQ_INT(tu_int(db, "SELECT refcount FROM body_refs WHERE id = 7"), 1);
    CHECK(br_consistent(s));
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_copy_writes_few_pages);
    TEST(test_migration_from_11);
    TEST(test_migration_unexplained_count);
    TEST(test_missing_count_checked_and_repaired);
    return th_summary();
}
