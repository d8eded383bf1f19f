/*
 * test_durable.c -- which commits sync the WAL before they return.
 *
 * The production profile keeps PRAGMA synchronous=NORMAL (the WAL is synced at checkpoints),
 * which may lose the last commits on power loss. mv_message_append is what a server
 * acknowledges mail on (IMAP APPEND, an LMTP delivery into an open store), so its commit runs
 * with synchronous=FULL and the profile's NORMAL is back afterwards, also when the append
 * fails; a flag change keeps NORMAL. Checked on the statements the store's connection runs
 * (sqlite3_trace_v2), since a power cut cannot be staged in a test.
 */
#include "harness.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DU_PASSWORD "durable test password"

struct du_trace {
    char log[4096];
};

static int du_trace_stmt(unsigned type, void *ctx, void *stmt, void *sql)
{
    (void)stmt;
    struct du_trace *t = ctx;
    if (type == SQLITE_TRACE_STMT) {
        const char *text = sql;
        /* Only transaction and synchronous statements: the order is what is checked. */
        if (strncmp(text, "PRAGMA synchronous", 18) == 0 || strncmp(text, "BEGIN", 5) == 0 ||
            strcmp(text, "COMMIT") == 0 || strcmp(text, "ROLLBACK") == 0) {
            size_t used = strlen(t->log);
            snprintf(t->log + used, sizeof t->log - used, "%s;", text);
        }
    }
    return 0;
}

static const char du_message[] = "From: a@example.org\r\nSubject: durable\r\n\r\nbody\r\n";

static void test_append_commit_is_full(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("durable", DU_PASSWORD, 2048, &s), MV_OK);
    sqlite3 *db = mv_store_db(s);
    struct du_trace t = {""};
    CHECK_EQ_INT(sqlite3_trace_v2(db, SQLITE_TRACE_STMT, du_trace_stmt, &t), SQLITE_OK);

    CHECK_EQ_INT(mv_message_append(s, "INBOX", du_message, sizeof du_message - 1, 0, NULL, 0, NULL),
                 MV_OK);
    static const char want[] = "PRAGMA synchronous=FULL;BEGIN IMMEDIATE;COMMIT;"
                               "PRAGMA synchronous=NORMAL;";
    if (strcmp(t.log, want) != 0) {
        printf("  # append ran: %s\n", t.log);
    }
    CHECK(strcmp(t.log, want) == 0);

    /* A flag change is not acknowledged mail: the profile's NORMAL. */
    t.log[0] = '\0';
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL), MV_OK);
    CHECK(strstr(t.log, "synchronous") == NULL);
    CHECK(strstr(t.log, "COMMIT") != NULL);

    /* Refused appends (an empty message, a mailbox gone) leave NORMAL behind too. */
    t.log[0] = '\0';
    CHECK_EQ_INT(mv_message_append(s, "INBOX", "", 0, 0, NULL, 0, NULL), MV_EINVAL);
    CHECK_EQ_INT(tu_int(db, "PRAGMA synchronous"), 1);
    CHECK_EQ_INT(mv_mailbox_delete(s, "Junk"), MV_OK);
    t.log[0] = '\0';
    CHECK_EQ_INT(mv_message_append(s, "Junk", du_message, sizeof du_message - 1, 0, NULL, 0, NULL),
                 MV_ENOTFOUND);
    CHECK_EQ_INT(tu_int(db, "PRAGMA synchronous"), 1);
    sqlite3_trace_v2(db, 0, NULL, NULL);
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_append_commit_is_full);
    return th_summary();
}
