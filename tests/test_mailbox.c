/*
 * test_mailbox.c -- mailboxes and the store file around them: names and hierarchy, the
 * limits on them (mailbox_name_max, mailboxes_max, also through a rename that carries
 * children), per-mailbox accounting (logical and stored bytes), read-only opening, and a
 * store file left behind by an interrupted init.
 *
 * Every test uses its own address under the binary's temp dir.
 */
#include "harness.h"
#include "testutil.h"

#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MB_PASSWORD "mailbox test password"

static struct mv_store_options mb_options(void)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    o.cache_size_kib = 4096;
    return o;
}

/* Creates (if needed) and opens name@example.org with o (NULL: mb_options()). */
static int mb_open_with(const char *name, const struct mv_store_options *opts, mv_store **s)
{
    char address[128], err[512] = "";
    struct mv_store_options o = opts != NULL ? *opts : mb_options();
    snprintf(address, sizeof address, "%s@example.org", name);
    *s = NULL;
    int rc = mv_store_init(address, MB_PASSWORD, strlen(MB_PASSWORD), &o, err, sizeof err);
    if (rc != MV_OK && rc != MV_EEXISTS) {
        fprintf(stderr, "  init %s: %s\n", address, err);
        return rc;
    }
    rc = mv_store_open(address, MB_PASSWORD, strlen(MB_PASSWORD), &o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open %s: %s\n", address, err);
    }
    return rc;
}

static int mb_open(const char *name, mv_store **s)
{
    return mb_open_with(name, NULL, s);
}

static long long mb_int(mv_store *s, const char *sql)
{
    return tu_int(mv_store_db(s), sql);
}

/* Whether the store's message mentions what. */
static int mb_errmsg_has(mv_store *s, const char *what)
{
    if (strstr(mv_store_errmsg(s), what) == NULL) {
        fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", mv_store_errmsg(s), what);
        return 0;
    }
    return 1;
}

/* The mailbox names, in name order, joined by spaces, into out. */
static void mb_names(mv_store *s, char *out, size_t size)
{
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info info;
    size_t at = 0;
    out[0] = '\0';
    if (mv_mailbox_list_begin(s, &it) != MV_OK) {
        return;
    }
    while (mv_mailbox_list_next(it, &info) == 1 && at < size) {
        at += (size_t)snprintf(out + at, size - at, "%s%s", at != 0 ? " " : "", info.name);
    }
    mv_mailbox_list_end(&it);
}

#define MB_NAMES_ARE(s, want)                                                                      \
    do {                                                                                           \
        char names_[1024];                                                                         \
        mb_names(s, names_, sizeof names_);                                                        \
        if (strcmp(names_, want) != 0) {                                                           \
            fprintf(stderr, "  mailboxes \"%s\", want \"%s\"\n", names_, want);                    \
        }                                                                                          \
        CHECK(strcmp(names_, want) == 0);                                                          \
    } while (0)

/* A message with a text part and, if attach_size != 0, a base64 attachment of attach_size
 * deterministic bytes from seed (large enough to be stored apart). malloc'd. */
static char *mb_message(const char *subject, size_t attach_size, unsigned seed, size_t *len)
{
    size_t cap = 1024 + attach_size * 2;
    char *m = malloc(cap);
    if (m == NULL) {
        abort();
    }
    int n = snprintf(m, cap,
                     "From: a@example.org\r\nSubject: %s\r\nMIME-Version: 1.0\r\n"
                     "Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\n"
                     "Content-Type: text/plain\r\n\r\nhello %s\r\n--b\r\n"
                     "Content-Type: application/octet-stream\r\n"
                     "Content-Transfer-Encoding: base64\r\n\r\n",
                     subject, subject);
    size_t at = (size_t)n;
    uint8_t chunk[57];
    for (size_t done = 0; done < attach_size; done += sizeof chunk) {
        for (size_t i = 0; i < sizeof chunk; i++) {
            seed = seed * 1103515245u + 12345u;
            chunk[i] = (uint8_t)(seed >> 16);
        }
        at += (size_t)EVP_EncodeBlock((unsigned char *)m + at, chunk, sizeof chunk);
        memcpy(m + at, "\r\n", 2);
        at += 2;
    }
    at += (size_t)snprintf(m + at, cap - at, "--b--\r\n");
    *len = at;
    return m;
}

/* ---- names, hierarchy, limits ------------------------------------------------------------ */

static void test_create_and_limits(void)
{
    struct mv_store_options o = mb_options();
    o.limits.mailbox_name_max = 12;
    o.limits.mailboxes_max = 9; /* the six defaults and three more */
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open_with("names", &o, &s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "a/b/c", NULL), MV_OK); /* and its parents */
    MB_NAMES_ARE(s, "Archive Drafts INBOX Junk Sent Trash a a/b a/b/c");
    CHECK_EQ_INT(mv_mailbox_create(s, "a/b", NULL), MV_EEXISTS);
    CHECK_EQ_INT(mv_mailbox_create(s, "inbox", NULL), MV_EEXISTS);
    CHECK_EQ_INT(mv_mailbox_create(s, "x", NULL), MV_ELIMIT);
    CHECK(mb_errmsg_has(s, "mailboxes_max"));
    CHECK_EQ_INT(mv_mailbox_delete(s, "a/b/c"), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "1234567890123", NULL), MV_ELIMIT);
    CHECK(mb_errmsg_has(s, "mailbox_name_max"));
    CHECK_EQ_INT(mv_mailbox_create(s, "123456789012", NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "", NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_create(s, "a//b", NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_create(s, "tab\there", NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_create(s, "bad\xff", NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_create(s, "overlong\xc1\xbf", NULL), MV_EINVAL); /* "/" */
    CHECK_EQ_INT(mv_mailbox_create(s, "surrogate\xed\xa0\x80", NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_create(s, "past\xf4\x90\x80\x80", NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_create(s, "q", "\\Bogus"), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_delete(s, "Inbox"), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_rename(s, "INBOX", "Other"), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_rename(s, "a", "inbox"), MV_EINVAL);
    MB_NAMES_ARE(s, "123456789012 Archive Drafts INBOX Junk Sent Trash a a/b");
    mv_store_close(&s);
}

/* A rename carries the children along; each new name must fit mailbox_name_max, and a
 * child whose new name is taken fails the whole rename. */
static void test_rename_children(void)
{
    struct mv_store_options o = mb_options();
    o.limits.mailbox_name_max = 10;
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open_with("rename", &o, &s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "p/child", NULL), MV_OK);
    size_t len = 0;
    char *m = mb_message("in the child", 0, 1, &len);
    CHECK_EQ_INT(mv_message_append(s, "p/child", m, len, 0, NULL, 0, NULL), MV_OK);
    free(m);
    /* "longer" fits, but "longer/child" (12 bytes) does not */
    CHECK_EQ_INT(mv_mailbox_rename(s, "p", "longer"), MV_ELIMIT);
    CHECK(mb_errmsg_has(s, "mailbox_name_max"));
    MB_NAMES_ARE(s, "Archive Drafts INBOX Junk Sent Trash p p/child");
    CHECK_EQ_INT(mv_mailbox_rename(s, "p", "q"), MV_OK);
    MB_NAMES_ARE(s, "Archive Drafts INBOX Junk Sent Trash q q/child");
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "q/child", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 1);
    /* a child's new name is taken: nothing is renamed */
    CHECK_EQ_INT(mv_mailbox_create(s, "r/child", NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_delete(s, "r"), MV_OK);
    CHECK_EQ_INT(mv_mailbox_rename(s, "q", "r"), MV_EEXISTS);
    MB_NAMES_ARE(s, "Archive Drafts INBOX Junk Sent Trash q q/child r/child");
    /* into its own subtree: the missing superior names are created (RFC 3501 6.3.5) */
    CHECK_EQ_INT(mv_mailbox_rename(s, "q", "q/s"), MV_OK);
    MB_NAMES_ARE(s, "Archive Drafts INBOX Junk Sent Trash q q/s q/s/child r/child");
    CHECK_EQ_INT(mv_mailbox_rename(s, "q/s", "x/y"), MV_OK);
    MB_NAMES_ARE(s, "Archive Drafts INBOX Junk Sent Trash q r/child x x/y x/y/child");
    CHECK_EQ_INT(mv_mailbox_get(s, "x/y/child", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 1);
    mv_store_close(&s);
}

/* ---- accounting ------------------------------------------------------------------------ */

static uint64_t mb_stored(mv_store *s, const char *mailbox)
{
    struct mv_mailbox_info info;
    return mv_mailbox_get(s, mailbox, &info) == MV_OK ? info.stored_bytes : UINT64_MAX;
}

/* Prints the plan of the statement behind mv_mailbox_get (found among the store's cached
 * statements) and checks that no table is scanned. */
static int mb_info_plan_ok(mv_store *s)
{
    const char *sql = NULL;
    for (sqlite3_stmt *st = sqlite3_next_stmt(mv_store_db(s), NULL); st != NULL;
         st = sqlite3_next_stmt(mv_store_db(s), st)) {
        if (strstr(sqlite3_sql(st), "stored_size") != NULL &&
            strstr(sqlite3_sql(st), "FROM mailboxes m") != NULL) {
            sql = sqlite3_sql(st);
        }
    }
    if (sql == NULL) {
        fprintf(stderr, "  no mailbox statement reads stored_size\n");
        return 0;
    }
    char eqp[4096];
    snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", sql);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(mv_store_db(s), eqp, -1, &st, NULL) != SQLITE_OK) {
        return 0;
    }
    int ok = 1;
    printf("  # plan of the mailbox description:\n");
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(st, 3);
        printf("  #   %s\n", detail);
        if (strncmp(detail, "SCAN ", 5) == 0 && strstr(detail, "SUBQUERY") == NULL &&
            strstr(detail, "LIST SUBQUERY") == NULL) {
            fprintf(stderr, "  scans a table: %s\n", detail);
            ok = 0;
        }
    }
    sqlite3_finalize(st);
    return ok;
}

static void test_stored_bytes(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("quota", &s), MV_OK);
    CHECK_EQ_INT(mb_stored(s, "INBOX"), 0);
    size_t a_len = 0, b_len = 0;
    char *a = mb_message("first", 100000, 7, &a_len);  /* base64 over STORE_SPLIT_MIN */
    char *b = mb_message("second", 100000, 7, &b_len); /* the same attachment */
    CHECK_EQ_INT(mv_message_append(s, "INBOX", a, a_len, 0, NULL, 0, NULL), MV_OK);
    CHECK_EQ_INT(mb_int(s, "SELECT count(*) FROM attachments"), 1);
    struct mv_store_stats st;
    CHECK_EQ_INT(mv_store_stats(s, &st), MV_OK);
    uint64_t one = mb_stored(s, "INBOX");
    CHECK(one > 0);
    CHECK_EQ_INT(one, st.stored_bytes); /* the only message: the store's total */
    CHECK_EQ_INT(mv_message_append(s, "INBOX", b, b_len, 0, NULL, 0, NULL), MV_OK);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", a, a_len, 0, NULL, 0, NULL), MV_OK); /* dup */
    uint64_t inbox = mb_stored(s, "INBOX");
    /* the attachment once, each body once */
    CHECK_EQ_INT(inbox, mb_int(s, "SELECT (SELECT sum(stored_size) FROM bodies) + "
                                  "(SELECT sum(stored_size) FROM attachments)"));
    CHECK(inbox < 2 * one);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.size_bytes, 2 * a_len + b_len); /* logical counts every copy */
    CHECK_EQ_INT(mv_store_stats(s, &st), MV_OK);
    uint64_t total = st.stored_bytes;
    CHECK_EQ_INT(total, inbox);

    uint32_t count = 0;
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:*", "Archive", &count), MV_OK);
    CHECK_EQ_INT(count, 3);
    CHECK_EQ_INT(mb_stored(s, "Archive"), inbox); /* the same bytes, counted there too */
    CHECK_EQ_INT(mv_store_stats(s, &st), MV_OK);
    CHECK_EQ_INT(st.stored_bytes, total); /* ... but not stored again */
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "2", "Trash", &count), MV_OK);
    CHECK(mb_stored(s, "Trash") < inbox && mb_stored(s, "Trash") > 0);
    CHECK(mb_info_plan_ok(s));

    /* the listing carries the same numbers */
    mv_mailbox_iter *it = NULL;
    CHECK_EQ_INT(mv_mailbox_list_begin(s, &it), MV_OK);
    int seen = 0;
    while (mv_mailbox_list_next(it, &info) == 1) {
        if (strcmp(info.name, "Archive") == 0) {
            seen += info.stored_bytes == inbox;
        } else if (strcmp(info.name, "Junk") == 0) {
            seen += info.stored_bytes == 0;
        }
    }
    mv_mailbox_list_end(&it);
    CHECK_EQ_INT(seen, 2);
    free(a);
    free(b);
    mv_store_close(&s);
}

/* ---- listing without the message walk (MV_MAILBOX_* fields) ----------------------------- */

/* What one listing with fields cost and said: the VM steps of the iterator's statement (the
 * only uncached statement naming "ORDER BY m.name" while it is open), whether its plan names
 * the messages table, and INBOX's row. -1 steps on any failure. */
struct mb_listing {
    long long steps;
    int plan_messages;   /* a plan line mentions messages (or one of its indexes) */
    int plan_scans;      /* a plan line is "SCAN messages..." */
    int plan_deleted_ix; /* a plan line uses messages_deleted */
    int rows;
    struct mv_mailbox_info inbox; /* strings not kept */
};

static void mb_listing_plan(mv_store *s, const char *sql, struct mb_listing *out)
{
    char eqp[4096];
    snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", sql);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(mv_store_db(s), eqp, -1, &st, NULL) != SQLITE_OK) {
        out->steps = -1;
        return;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(st, 3);
        out->plan_messages |= strstr(detail, "messages") != NULL;
        out->plan_scans |= strncmp(detail, "SCAN messages", 13) == 0;
        out->plan_deleted_ix |= strstr(detail, "messages_deleted") != NULL;
    }
    sqlite3_finalize(st);
}

static struct mb_listing mb_list_cost(mv_store *s, unsigned fields)
{
    struct mb_listing out;
    memset(&out, 0, sizeof out);
    out.steps = -1;
    mv_mailbox_iter *it = NULL;
    if (mv_mailbox_list_begin_fields(s, fields, &it) != MV_OK) {
        return out;
    }
    struct mv_mailbox_info info;
    int more;
    while ((more = mv_mailbox_list_next(it, &info)) == 1) {
        out.rows++;
        if (strcmp(info.name, "INBOX") == 0) {
            out.inbox = info;
            out.inbox.name = out.inbox.special_use = NULL;
        }
    }
    sqlite3_stmt *mine = NULL;
    for (sqlite3_stmt *st = sqlite3_next_stmt(mv_store_db(s), NULL); st != NULL;
         st = sqlite3_next_stmt(mv_store_db(s), st)) {
        if (strstr(sqlite3_sql(st), "ORDER BY m.name") != NULL) {
            mine = st;
        }
    }
    if (more == 0 && mine != NULL) {
        out.steps = sqlite3_stmt_status(mine, SQLITE_STMTSTATUS_VM_STEP, 0);
        mb_listing_plan(s, sqlite3_sql(mine), &out);
    }
    mv_mailbox_list_end(&it);
    return out;
}

/* INBOX's \Deleted messages and their size, from the messages themselves. */
static long long mb_inbox_deleted(mv_store *s, int bytes)
{
    return mb_int(s, bytes ? "SELECT coalesce(sum(size), 0) FROM messages WHERE (flags & 8) != 0 "
                             "AND mailbox_id = (SELECT id FROM mailboxes WHERE name = 'INBOX')"
                           : "SELECT count(*) FROM messages WHERE (flags & 8) != 0 "
                             "AND mailbox_id = (SELECT id FROM mailboxes WHERE name = 'INBOX')");
}

/* IMAP LIST's listing (no fields) reads the mailboxes table alone: the same VM steps with 8
 * messages and with 1,024; the one with MV_MAILBOX_DELETED grows with the \Deleted messages
 * only; the full listing (stored_bytes) grows with the messages, which shows the count can
 * see a message walk. Values against the messages; unknown field bits refused. */
static void test_list_fields_cost(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("listcost", &s), MV_OK);
    uint32_t n = 0;
    for (int i = 0; i < 8; i++) {
        size_t len = 0;
        char subject[32];
        snprintf(subject, sizeof subject, "message %d", i);
        char *m = mb_message(subject, 0, (unsigned)i, &len);
        CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL), MV_OK);
        free(m);
    }
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "2,5,7", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n), MV_OK);
    struct mb_listing none_small = mb_list_cost(s, 0);
    struct mb_listing deleted_small = mb_list_cost(s, MV_MAILBOX_DELETED);
    struct mb_listing all_small = mb_list_cost(s, MV_MAILBOX_FIELDS_ALL);
    CHECK(none_small.steps > 0 && deleted_small.steps > 0 && all_small.steps > 0);
    CHECK_EQ_INT(deleted_small.inbox.deleted, 3);
    CHECK_EQ_INT(deleted_small.inbox.deleted_bytes, mb_inbox_deleted(s, 1));

    /* 1,024 messages in INBOX (copies share bodies, so this is quick), the same three
     * \Deleted, and as many again in Archive. */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:*", MV_FLAGS_REMOVE, MV_FLAG_DELETED, NULL, &n),
                 MV_OK);
    for (int i = 0; i < 7; i++) {
        CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:*", "INBOX", &n), MV_OK);
    }
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:*", "Archive", &n), MV_OK);
    CHECK_EQ_INT(n, 1024);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "2,500,1000", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n),
                 MV_OK);
    struct mb_listing none = mb_list_cost(s, 0);
    struct mb_listing deleted = mb_list_cost(s, MV_MAILBOX_DELETED);
    struct mb_listing all = mb_list_cost(s, MV_MAILBOX_FIELDS_ALL);
    printf("  # VM steps of a listing, 8 -> 2048 messages: none %lld -> %lld, deleted %lld -> "
           "%lld, all %lld -> %lld\n",
           none_small.steps, none.steps, deleted_small.steps, deleted.steps, all_small.steps,
           all.steps);
    CHECK_EQ_INT(none.steps, none_small.steps);
    CHECK_EQ_INT(deleted.steps, deleted_small.steps);
    CHECK(all.steps > all_small.steps + 2048); /* at least a step per message: a walk */
    CHECK(!none.plan_messages);
    CHECK(deleted.plan_deleted_ix && !deleted.plan_scans);
    CHECK(all.plan_messages);

    /* what each listing says */
    CHECK_EQ_INT(none.rows, 6);
    CHECK_EQ_INT(none.inbox.messages, 1024);
    CHECK_EQ_INT(none.inbox.stored_bytes, 0);
    CHECK_EQ_INT(none.inbox.deleted, 0);
    CHECK_EQ_INT(none.inbox.deleted_bytes, 0);
    CHECK_EQ_INT(deleted.inbox.deleted, 3);
    CHECK_EQ_INT(deleted.inbox.deleted, mb_inbox_deleted(s, 0));
    CHECK_EQ_INT(deleted.inbox.deleted_bytes, mb_inbox_deleted(s, 1));
    CHECK(deleted.inbox.deleted_bytes > 0);
    CHECK_EQ_INT(deleted.inbox.stored_bytes, 0);
    CHECK_EQ_INT(deleted.inbox.size_bytes, none.inbox.size_bytes);
    struct mv_mailbox_info full, one;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &full), MV_OK);
    CHECK(full.stored_bytes > 0);
    CHECK_EQ_INT(all.inbox.stored_bytes, full.stored_bytes);
    CHECK_EQ_INT(all.inbox.deleted, 3);
    CHECK_EQ_INT(full.deleted, 3);
    CHECK_EQ_INT(full.deleted_bytes, deleted.inbox.deleted_bytes);
    CHECK_EQ_INT(mv_mailbox_get_fields(s, "inbox", MV_MAILBOX_DELETED, &one), MV_OK);
    CHECK_EQ_INT(one.deleted, 3);
    CHECK_EQ_INT(one.deleted_bytes, full.deleted_bytes);
    CHECK_EQ_INT(one.stored_bytes, 0);
    CHECK_EQ_INT(mv_mailbox_get_fields(s, "INBOX", MV_MAILBOX_STORED_BYTES, &one), MV_OK);
    CHECK_EQ_INT(one.stored_bytes, full.stored_bytes);
    CHECK_EQ_INT(one.deleted, 0);
    CHECK_EQ_INT(mv_mailbox_get_fields(s, "Nope", MV_MAILBOX_DELETED, &one), MV_ENOTFOUND);

    /* an expunge empties the index: nothing \Deleted is left to count */
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(mv_mailbox_get_fields(s, "INBOX", MV_MAILBOX_DELETED, &one), MV_OK);
    CHECK_EQ_INT(one.deleted, 0);
    CHECK_EQ_INT(one.deleted_bytes, 0);
    CHECK_EQ_INT(one.messages, 1021);

    mv_mailbox_iter *it = (mv_mailbox_iter *)&one; /* must come back NULL */
    CHECK_EQ_INT(mv_mailbox_list_begin_fields(s, 0x04u, &it), MV_EINVAL);
    CHECK(it == NULL);
    CHECK_EQ_INT(mv_mailbox_get_fields(s, "INBOX", MV_MAILBOX_FIELDS_ALL + 1, &one), MV_EINVAL);
    CHECK(mb_errmsg_has(s, "fields"));
    mv_store_close(&s);
}

/* ---- counters kept by triggers (schema version 2) ---------------------------------------- */

/* Whether every mailbox's counters (mv_mailbox_status and mv_mailbox_get) equal what its
 * messages say. */
static int mb_counters_ok(mv_store *s)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(mv_store_db(s), "SELECT name FROM mailboxes", -1, &st, NULL) !=
        SQLITE_OK) {
        return 0;
    }
    int ok = 1;
    while (ok && sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        char sql[512];
        struct mv_mailbox_info status, full;
        if (mv_mailbox_status(s, name, &status) != MV_OK) {
            return sqlite3_finalize(st), 0;
        }
        uint32_t messages = status.messages, unseen = status.unseen;
        uint64_t size = status.size_bytes;
        if (mv_mailbox_get(s, name, &full) != MV_OK) {
            return sqlite3_finalize(st), 0;
        }
        snprintf(sql, sizeof sql,
                 "SELECT count(*) * 1000000000000 + sum((flags & 1) = 0) * 1000000 + "
                 "coalesce(sum(size), 0) FROM messages WHERE mailbox_id = "
                 "(SELECT id FROM mailboxes WHERE name = '%s')",
                 name);
        long long want = mb_int(s, sql);
        long long got =
            (long long)messages * 1000000000000LL + (long long)unseen * 1000000LL + (long long)size;
        if (got != want || full.messages != messages || full.unseen != unseen ||
            full.size_bytes != size || status.stored_bytes != 0) {
            fprintf(stderr, "  %s: counters %lld, messages say %lld\n", name, got, want);
            ok = 0;
        }
    }
    sqlite3_finalize(st);
    return ok;
}

static int mb_count_statement(unsigned type, void *arg, void *p, void *x)
{
    (void)type;
    (void)p;
    (void)x;
    (*(int *)arg)++;
    return 0;
}

/* Describing a mailbox by name (IMAP STATUS, SELECT, APPEND's UID) runs one statement, so one
 * read transaction when none is open: looking its id up first was a second, each with its
 * WAL-index file locks (issue 13: 7.5 -> 6 fcntl calls per pipelined STATUS). Inside a
 * snapshot the id found stays known, and a missing name is still MV_ENOTFOUND. */
static void test_describe_one_statement(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("describeone", &s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Work", NULL), MV_OK);
    int statements = 0;
    sqlite3_trace_v2(mv_store_db(s), SQLITE_TRACE_STMT, mb_count_statement, &statements);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "work", &info), MV_ENOTFOUND);
    CHECK(strstr(mv_store_errmsg(s), "no mailbox") != NULL);
    statements = 0;
    CHECK_EQ_INT(mv_mailbox_status(s, "Work", &info), MV_OK);
    CHECK_EQ_INT(statements, 1);
    CHECK(strcmp(info.name, "Work") == 0);
    statements = 0;
    CHECK_EQ_INT(mv_mailbox_get_fields(s, "inbox", MV_MAILBOX_DELETED, &info), MV_OK);
    CHECK_EQ_INT(statements, 1);
    CHECK(strcmp(info.name, "INBOX") == 0);
    CHECK_EQ_INT(mv_store_read_begin(s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_status(s, "Work", &info), MV_OK);
    int64_t id = info.id;
    CHECK_EQ_INT(mv_mailbox_get(s, "Work", &info), MV_OK);
    CHECK_EQ_INT(info.id, id);
    mv_store_read_end(s);
    sqlite3_trace_v2(mv_store_db(s), 0, NULL, NULL);
    mv_store_close(&s);
}

static void test_counters(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("counters", &s), MV_OK);
    CHECK_EQ_INT(mb_int(s, "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK(mb_counters_ok(s));
    size_t len = 0;
    char *m = mb_message("count me", 0, 1, &len);
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, i % 2 ? MV_FLAG_SEEN : 0, NULL, 0, NULL),
                     MV_OK);
    }
    CHECK(mb_counters_ok(s));
    uint32_t n = 0;
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:3", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, &n), MV_OK);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "4", MV_FLAGS_REMOVE, MV_FLAG_SEEN, NULL, &n), MV_OK);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "5", MV_FLAGS_ADD, MV_FLAG_FLAGGED, NULL, &n), MV_OK);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:4", "Archive", &n), MV_OK);
    CHECK_EQ_INT(mv_message_move(s, "INBOX", "5", "Trash", &n), MV_OK);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_flags_set(s, "Archive", "1:2", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "Archive", NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 2);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_mailbox_create(s, "Projects/2026", NULL), MV_OK);
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:*", "Projects/2026", &n), MV_OK);
    CHECK_EQ_INT(mv_mailbox_rename(s, "Projects", "Old"), MV_OK);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_mailbox_delete(s, "Old/2026"), MV_OK);
    CHECK(mb_counters_ok(s));
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "inbox", &info), MV_OK); /* INBOX in any case */
    CHECK_EQ_INT(info.messages, 5);
    CHECK_EQ_INT(mv_mailbox_status(s, "Nope", &info), MV_ENOTFOUND);

    /* A version 1 store (no counters, no triggers) is migrated on open, counters filled. */
    sqlite3 *db = mv_store_db(s);
    static const char downgrade[] =
        TU_DOWNGRADE_TO_V6 "DROP TRIGGER messages_count_insert; "
                           "DROP TRIGGER messages_count_delete; "
                           "DROP TRIGGER messages_count_update; "
                           "ALTER TABLE mailboxes DROP COLUMN message_count; "
                           "ALTER TABLE mailboxes DROP COLUMN unseen_count; "
                           "ALTER TABLE mailboxes DROP COLUMN size_sum; "
                           "ALTER TABLE bodies DROP COLUMN header_stored; "
                           "ALTER TABLE bodies DROP COLUMN sent_zone; "
                           "DROP TABLE fts; "
                           "CREATE VIRTUAL TABLE fts USING fts5(subject, addresses, "
                           "body, tokenize='unicode61 remove_diacritics 2'); "
                           "DROP TABLE subscriptions; "
                           "ALTER TABLE mailboxes DROP COLUMN recent_uid; "
                           "DROP INDEX bodies_unreferenced; "
                           "PRAGMA user_version = 1";
    CHECK_EQ_INT(tu_exec(db, downgrade), SQLITE_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(mb_open("counters", &s), MV_OK);
    /* through every later version */
    CHECK_EQ_INT(mb_int(s, "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL), MV_OK);
    CHECK(mb_counters_ok(s));
    free(m);
    mv_store_close(&s);
}

/* The runs of one trigger through a connection (mb_trace_trigger's arg). */
struct mb_trigger_runs {
    const char *name; /* "messages_count_delete", ... */
    int runs;
};

/* SQLITE_TRACE_STMT reports each run of a trigger as "-- TRIGGER name": counts the runs of
 * the one named. */
static int mb_trace_trigger(unsigned type, void *arg, void *stmt, void *text)
{
    (void)type;
    (void)stmt;
    struct mb_trigger_runs *t = arg;
    const char *at = text != NULL ? strstr((const char *)text, "-- TRIGGER ") : NULL;
    size_t len = strlen(t->name);
    if (at != NULL && strncmp(at + 11, t->name, len) == 0 &&
        (at[11 + len] == '\0' || at[11 + len] == ' ' || at[11 + len] == '\n')) {
        t->runs++;
    }
    return 0;
}

/* How many times the connection's prepared statements were prepared again (a statement
 * expired: the schema or the connection's settings changed), summed over all of them. */
static long mb_reprepares(sqlite3 *db)
{
    long n = 0;
    for (sqlite3_stmt *st = sqlite3_next_stmt(db, NULL); st != NULL;
         st = sqlite3_next_stmt(db, st)) {
        n += sqlite3_stmt_status(st, SQLITE_STMTSTATUS_REPREPARE, 0);
    }
    return n;
}

/* Appends 300 messages to INBOX, subjects "<what> <i>", every third \Seen (i = 0, 3, ...),
 * bodies (i % size_mod) * size_step bytes longer; 0 if every append worked. */
static int mb_fill_300(mv_store *s, const char *what, unsigned size_mod, size_t size_step)
{
    for (int i = 0; i < 300; i++) {
        size_t len = 0;
        char subject[32];
        snprintf(subject, sizeof subject, "%s %d", what, i);
        char *m = mb_message(subject, ((unsigned)i % size_mod) * size_step, (unsigned)i, &len);
        int rc = m != NULL ? mv_message_append(s, "INBOX", m, len, i % 3 == 0 ? MV_FLAG_SEEN : 0,
                                               NULL, 0, NULL)
                           : MV_ENOMEM;
        free(m);
        if (rc != MV_OK) {
            return -1;
        }
    }
    return 0;
}

/* An EXPUNGE of 128 messages or more deletes its rows with the connection's triggers off and
 * keeps the counters itself (one UPDATE per range): the delete trigger does not run for it (it
 * ran once per expunged message before). A smaller one runs the trigger and leaves the
 * connection's prepared statements alone: turning the triggers off and on expires them all,
 * and preparing them again cost more than the trigger saves on a few rows (the EXPUNGE of one
 * message took 3x its CPU, and the session's next calls 2-3x theirs). The counters are right
 * after each, and every other delete still runs the trigger and keeps them: one through the
 * same connection right after an EXPUNGE (the triggers are back on), one through a second
 * handle (another connection, as any SQLite program). */
static void test_counters_expunge_untriggered(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("counters_expunge", &s), MV_OK);
    CHECK_EQ_INT(mb_fill_300(s, "expunge", 3, 100), 0);
    struct mb_trigger_runs deletes = {"messages_count_delete", 0};
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(sqlite3_trace_v2(db, SQLITE_TRACE_STMT, mb_trace_trigger, &deletes), SQLITE_OK);
    uint32_t n = 0;
    /* under 128 messages a STORE: as the few below, nothing prepared again */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "2:120", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n), MV_OK);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "121:240", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n),
                 MV_OK);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "241:290", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n),
                 MV_OK);
    /* a few: the trigger, no statement prepared again */
    long reprepared = mb_reprepares(db);
    struct mv_uid_range ranges[] = {{1, 5}, {9, 12}, {20, 24}}; /* 13 \Deleted */
    CHECK_EQ_INT(mv_mailbox_expunge_ranges(s, "INBOX", ranges, 3, &n), MV_OK);
    CHECK_EQ_INT(n, 13);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", "25:27", &n), MV_OK);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "295", MV_FLAGS_ADD, MV_FLAG_FLAGGED, NULL, &n), MV_OK);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(deletes.runs, 16);
    CHECK_EQ_INT(mb_reprepares(db), reprepared);
    /* many: no trigger */
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 289 - 16);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK); /* nothing: unchanged */
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(deletes.runs, 16);
    CHECK(mb_reprepares(db) > reprepared); /* (what the few are spared) */
    CHECK(mb_counters_ok(s));

    /* any other delete: the trigger runs and keeps the counters */
    CHECK_EQ_INT(tu_exec(db, "DELETE FROM messages WHERE uid IN (291, 292)"), SQLITE_OK);
    CHECK_EQ_INT(deletes.runs, 18);
    CHECK(mb_counters_ok(s));
    mv_store *twin = NULL;
    CHECK_EQ_INT(mv_store_open_twin(s, &twin), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(twin), "DELETE FROM messages WHERE uid = 293"), SQLITE_OK);
    mv_store_close(&twin);
    CHECK(mb_counters_ok(s));
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 8);
    CHECK_EQ_INT(sqlite3_trace_v2(db, 0, NULL, NULL), SQLITE_OK);
    mv_store_close(&s);
}

/* A STORE over 128 messages or more (the smaller of the UIDs its set spans and the mailbox's
 * messages) runs with the connection's triggers off, and keeps the unseen counter itself when
 * \Seen may change (a count over the set before and after): the update trigger does not run
 * for it (it ran once per changed message, whether its \Seen changed or not). A smaller one
 * runs with the trigger and prepares nothing again. The counters are right after each: +, -,
 * a replacement, keywords merged per message, a flag other than \Seen, a set with gaps, a
 * STORE that changes nothing and an UNCHANGEDSINCE that refuses some; any other UPDATE still
 * runs the trigger. */
static void test_counters_flags_untriggered(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("counters_flags", &s), MV_OK);
    CHECK_EQ_INT(mb_fill_300(s, "flags", 3, 100), 0);
    struct mb_trigger_runs updates = {"messages_count_update", 0};
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(sqlite3_trace_v2(db, SQLITE_TRACE_STMT, mb_trace_trigger, &updates), SQLITE_OK);
    uint32_t n = 0;
    /* warm: every statement below prepared once */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:20", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 13); /* 1, 4, ..., 19 were seen */
    CHECK_EQ_INT(updates.runs, 13);
    long reprepared = mb_reprepares(db);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:30", MV_FLAGS_REMOVE, MV_FLAG_SEEN, NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 23); /* 1:20, and 22, 25, 28 */
    CHECK_EQ_INT(updates.runs, 36);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "100:127", MV_FLAGS_ADD, MV_FLAG_FLAGGED, NULL, &n),
                 MV_OK);
    CHECK_EQ_INT(n, 28); /* the trigger starts for each, whatever its WHEN says */
    CHECK_EQ_INT(updates.runs, 64);
    CHECK_EQ_INT(mb_reprepares(db), reprepared);
    CHECK(mb_counters_ok(s));

    /* many: no trigger */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:*", MV_FLAGS_ADD, MV_FLAG_FLAGGED, NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 300 - 28);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:*", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 300 - 90); /* 31, 34, ..., 298 were seen */
    CHECK(mb_counters_ok(s));
    CHECK(mb_reprepares(db) > reprepared);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:*", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 0); /* nothing changes: the counter stays */
    CHECK(mb_counters_ok(s));
    struct mv_uid_range gaps[] = {{2, 60}, {100, 180}, {250, 260}};
    CHECK_EQ_INT(mv_flags_set_ranges(s, "INBOX", gaps, 3, MV_FLAGS_REMOVE, MV_FLAG_SEEN, NULL,
                                     MV_UNCHANGEDSINCE_NONE, &n, NULL, NULL),
                 MV_OK);
    CHECK_EQ_INT(n, 59 + 81 + 11);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:200", MV_FLAGS_REPLACE, MV_FLAG_ANSWERED, NULL, &n),
                 MV_OK);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "50:300", MV_FLAGS_ADD, MV_FLAG_SEEN, "$Label1 work", &n),
                 MV_OK);
    CHECK_EQ_INT(n, 251); /* keywords merged per message: every one changes */
    CHECK(mb_counters_ok(s));
    uint32_t *failed = NULL;
    size_t failed_count = 0;
    struct mv_message_info info;
    CHECK_EQ_INT(mv_message_get(s, "INBOX", 120, &info), MV_OK);
    uint64_t bound = info.modseq;
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "100:140", MV_FLAGS_ADD, MV_FLAG_DRAFT, NULL, &n), MV_OK);
    CHECK_EQ_INT(mv_flags_set_unchanged_since(s, "INBOX", "1:*", MV_FLAGS_REMOVE, MV_FLAG_SEEN,
                                              NULL, bound, &n, &failed, &failed_count),
                 MV_OK);
    CHECK_EQ_INT(failed_count, 41); /* 100:140 moved past the bound and keep \Seen */
    mv_free(failed);
    CHECK(mb_counters_ok(s));
    struct mv_mailbox_info status;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &status), MV_OK);
    CHECK_EQ_INT(status.unseen, 300 - 41);
    CHECK_EQ_INT(updates.runs, 64 + 41); /* 100:140 +\Draft ran it, none of the big ones */

    /* any other update: the trigger runs and keeps the counters */
    CHECK_EQ_INT(tu_exec(db, "UPDATE messages SET flags = flags | 1 WHERE uid IN (1, 2)"),
                 SQLITE_OK);
    CHECK_EQ_INT(updates.runs, 64 + 41 + 2);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(sqlite3_trace_v2(db, 0, NULL, NULL), SQLITE_OK);
    mv_store_close(&s);
}

/* A MOVE of 128 messages or more runs with the connection's triggers off and moves the
 * counters of both mailboxes by one tally of the set: the update trigger does not run for it
 * (it ran per message, two UPDATEs of mailbox rows each). A smaller MOVE runs it. The
 * counters are right after each, a MOVE within one mailbox included; a COPY keeps its insert
 * trigger (cheaper than the tally there). */
static void test_counters_move_untriggered(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("counters_move", &s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Kept", NULL), MV_OK);
    CHECK_EQ_INT(mb_fill_300(s, "move", 5, 70), 0);
    struct mb_trigger_runs updates = {"messages_count_update", 0};
    struct mb_trigger_runs inserts = {"messages_count_insert", 0};
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(sqlite3_trace_v2(db, SQLITE_TRACE_STMT, mb_trace_trigger, &updates), SQLITE_OK);
    uint32_t n = 0;
    CHECK_EQ_INT(mv_message_move(s, "INBOX", "1:20", "Kept", &n), MV_OK);
    CHECK_EQ_INT(n, 20);
    CHECK_EQ_INT(updates.runs, 20); /* a few: the trigger */
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_message_move(s, "INBOX", "30:250", "Kept", &n), MV_OK);
    CHECK_EQ_INT(n, 221);
    CHECK_EQ_INT(updates.runs, 20); /* many: none */
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_message_move(s, "Kept", "1:*", "Kept", &n), MV_OK); /* one mailbox */
    CHECK_EQ_INT(n, 241);
    CHECK_EQ_INT(updates.runs, 20);
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(mv_message_move(s, "Kept", "1:*", "INBOX", &n), MV_OK);
    CHECK_EQ_INT(n, 241);
    CHECK(mb_counters_ok(s));
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 300);
    CHECK_EQ_INT(info.unseen, 200);
    CHECK_EQ_INT(mv_mailbox_status(s, "Kept", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 0);
    CHECK_EQ_INT(info.unseen, 0);
    CHECK_EQ_INT(info.size_bytes, 0);
    CHECK_EQ_INT(sqlite3_trace_v2(db, SQLITE_TRACE_STMT, mb_trace_trigger, &inserts), SQLITE_OK);
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:*", "Kept", &n), MV_OK);
    CHECK_EQ_INT(n, 300);
    CHECK_EQ_INT(inserts.runs, 300); /* COPY: the insert trigger, as before */
    CHECK(mb_counters_ok(s));
    CHECK_EQ_INT(sqlite3_trace_v2(db, 0, NULL, NULL), SQLITE_OK);
    mv_store_close(&s);
}

/* ---- opening ------------------------------------------------------------------------------ */

static void test_readonly_open(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("readonly", &s), MV_OK);
    size_t len = 0;
    char *m = mb_message("read me", 0, 3, &len);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL), MV_OK);
    mv_store_close(&s);
    char sha_before[65], sha_after[65];
    tu_file_sha256(tu_path("root/example.org/readonly.db"), sha_before);
    struct mv_store_options o = mb_options();
    o.flags = MV_STORE_READONLY;
    char err[512] = "";
    CHECK_EQ_INT(mv_store_open("readonly@example.org", MB_PASSWORD, strlen(MB_PASSWORD), &o, &s,
                               err, sizeof err),
                 MV_OK);
    void *raw = NULL;
    size_t raw_len = 0;
    CHECK_EQ_INT(mv_message_fetch(s, "INBOX", 1, &raw, &raw_len), MV_OK);
    CHECK(raw_len == len && memcmp(raw, m, len) == 0);
    mv_free(raw);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL), MV_EINVAL);
    CHECK(mb_errmsg_has(s, "read-only"));
    CHECK_EQ_INT(mv_mailbox_create(s, "New", NULL), MV_EINVAL);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "INBOX", 0), MV_EINVAL);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1", MV_FLAGS_ADD, MV_FLAG_SEEN, NULL, NULL), MV_EINVAL);
    mv_store_close(&s);
    tu_file_sha256(tu_path("root/example.org/readonly.db"), sha_after);
    CHECK(strcmp(sha_before, sha_after) == 0);
    free(m);
}

/* An init killed between creating the file and writing its first page leaves an empty file.
 * Opening it must not turn it into a store keyed with whatever password comes first. */
static void test_empty_store_file_refused(void)
{
    struct mv_store_options o = mb_options();
    mv_store *s = NULL;
    char err[512] = "";
    CHECK_EQ_INT(
        mv_store_init("empty@example.org", MB_PASSWORD, strlen(MB_PASSWORD), &o, err, sizeof err),
        MV_OK);
    const char *db = tu_path("root/example.org/empty.db");
    const char *pub = tu_path("root/example.org/empty.pub");
    CHECK_EQ_INT(truncate(db, 0), 0);
    CHECK_EQ_INT(unlink(pub), 0);
    int rc = mv_store_open("empty@example.org", "anyone", 6, &o, &s, err, sizeof err);
    CHECK(rc != MV_OK && s == NULL);
    CHECK(strstr(err, "interrupted init") != NULL);
    printf("  # %s\n", err);
    CHECK_EQ_INT(tu_file_size(db), 0);
    CHECK(!tu_file_exists(pub));
    CHECK(!tu_file_exists(tu_path("root/example.org/empty.db-wal")));
}

/* The state an init leaves when it is killed at any point: no file, what its first
 * transaction left (refused with a message that says so), or a store that opens with the
 * password and has its INBOX. */
static int mb_after_killed_init(const char *address, int *opened)
{
    struct mv_store_options o = mb_options();
    mv_store *s = NULL;
    char err[512] = "";
    *opened = 0;
    int rc = mv_store_open(address, MB_PASSWORD, strlen(MB_PASSWORD), &o, &s, err, sizeof err);
    if (rc == MV_ENOTFOUND && strstr(err, "no store") != NULL) {
        return 1;
    }
    if (rc != MV_OK) {
        int refused = strstr(err, "interrupted init") != NULL;
        if (!refused) {
            fprintf(stderr, "  after a killed init: %s (%s)\n", mv_strerror(rc), err);
        }
        return refused;
    }
    struct mv_mailbox_info info;
    int ok =
        mv_mailbox_get(s, "INBOX", &info) == MV_OK &&
        mv_message_append(s, "INBOX", "Subject: x\r\n\r\nx\r\n", 16, 0, NULL, 0, NULL) == MV_OK;
    if (!ok) {
        fprintf(stderr, "  after a killed init: %s\n", mv_store_errmsg(s));
    }
    mv_store_close(&s);
    *opened = ok;
    return ok;
}

static void test_init_killed(void)
{
    struct mv_store_options o = mb_options();
    /* how long an init takes here, to spread the kills over it */
    struct timespec t0, t1;
    char err[512] = "";
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_INT(
        mv_store_init("timing@example.org", MB_PASSWORD, strlen(MB_PASSWORD), &o, err, sizeof err),
        MV_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long init_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
    int opened = 0, total_opened = 0;
    for (int i = 0; i < 40; i++) {
        char address[64];
        snprintf(address, sizeof address, "killed%d@example.org", i);
        pid_t pid = fork();
        if (pid == 0) {
            char child_err[512];
            _exit(mv_store_init(address, MB_PASSWORD, strlen(MB_PASSWORD), &o, child_err,
                                sizeof child_err) == MV_OK
                      ? 0
                      : 1);
        }
        usleep((useconds_t)(init_us * i / 40));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        CHECK(mb_after_killed_init(address, &opened));
        total_opened += opened;
    }
    printf("  # init (%ld us) killed 40 times: %d stores usable afterwards\n", init_us,
           total_opened);
}

/* A failure's detail is internal (for a log) when SQLite wrote it ("BEGIN IMMEDIATE: database
 * is locked"), for people when the store wrote it: a server shows only the latter (issue 12,
 * "internal text never reaches a client"). */
static void test_errmsg_internal(void)
{
    mv_store *a = NULL, *b = NULL;
    CHECK_EQ_INT(mb_open("busy", &a), MV_OK);
    CHECK_EQ_INT(mb_open("busy", &b), MV_OK);
    if (a == NULL || b == NULL) {
        mv_store_close(&a);
        mv_store_close(&b);
        return;
    }
    CHECK_EQ_INT(sqlite3_exec(mv_store_db(b), "PRAGMA busy_timeout=0", NULL, NULL, NULL),
                 SQLITE_OK);
    CHECK_EQ_INT(sqlite3_exec(mv_store_db(a), "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    CHECK_EQ_INT(mv_mailbox_create(b, "locked", NULL), MV_EBUSY);
    CHECK(strstr(mv_store_errmsg(b), "locked") != NULL);
    CHECK_EQ_INT(mv_store_errmsg_internal(b), 1);
    CHECK_EQ_INT(sqlite3_exec(mv_store_db(a), "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    CHECK_EQ_INT(mv_mailbox_create(b, "INBOX", NULL), MV_EEXISTS);
    CHECK_EQ_INT(mv_store_errmsg_internal(b), 0);
    CHECK_EQ_INT(mv_mailbox_delete(b, "no such"), MV_ENOTFOUND);
    CHECK_EQ_INT(mv_store_errmsg_internal(b), 0);
    CHECK_EQ_INT(mv_store_errmsg_internal(NULL), 1);
    mv_store_close(&a);
    mv_store_close(&b);
}

/* Whether the subscribed names are exactly want (space-separated, in order). */
static int mb_subscriptions_are(mv_store *s, const char *want)
{
    char **names = NULL;
    size_t count = 0;
    if (mv_subscription_list(s, &names, &count) != MV_OK) {
        return 0;
    }
    char got[1024] = "";
    for (size_t i = 0; i < count; i++) {
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", i > 0 ? " " : "", names[i]);
    }
    mv_free(names);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "  subscriptions: got \"%s\", want \"%s\"\n", got, want);
        return 0;
    }
    return 1;
}

/* Subscriptions are names of their own (RFC 3501 6.3.4, 6.3.6, 6.3.7; issue 12 item 8):
 * CREATE does not subscribe, DELETE keeps the subscription, a name that never existed can be
 * subscribed and unsubscribed, RENAME carries them; a version 4 store keeps its own. */
/* The VM steps of the open statement with "m.name >= ?1" (-1 if none). */
static long long mb_range_steps(mv_store *s)
{
    long long steps = -1;
    for (sqlite3_stmt *st = sqlite3_next_stmt(mv_store_db(s), NULL); st != NULL;
         st = sqlite3_next_stmt(mv_store_db(s), st)) {
        if (strstr(sqlite3_sql(st), "m.name >= ?1") != NULL) {
            steps = sqlite3_stmt_status(st, SQLITE_STMTSTATUS_VM_STEP, 0);
        }
    }
    return steps;
}

/* Makes the mailboxes named in made, then count more: prefix and 000, 001, ... */
static int mb_make(mv_store *s, const char *const *made, size_t n, const char *prefix, int count)
{
    int rc = MV_OK;
    for (size_t i = 0; rc == MV_OK && i < n; i++) {
        rc = mv_mailbox_create(s, made[i], NULL);
    }
    for (int i = 0; rc == MV_OK && i < count; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s%03d", prefix, i);
        rc = mv_mailbox_create(s, name, NULL);
    }
    return rc;
}

/* The names of one range listing, space-separated, into out (cut at size); and the VM steps its
 * statement took (the only open statement with "m.name >= ?1"). -1 steps on failure. */
static long long mb_range(mv_store *s, const char *from, const char *below, char *out, size_t size)
{
    out[0] = '\0';
    char lo[64], hi[64];
    snprintf(lo, sizeof lo, "%s", from);
    snprintf(hi, sizeof hi, "%s", below);
    mv_mailbox_iter *it = NULL;
    if (mv_mailbox_list_begin_range(s, 0, lo, hi, &it) != MV_OK) {
        return -1;
    }
    memset(lo, 'x', sizeof lo - 1); /* the bounds are the iterator's own copies */
    memset(hi, 'x', sizeof hi - 1);
    struct mv_mailbox_info info;
    int more;
    size_t at = 0;
    while ((more = mv_mailbox_list_next(it, &info)) == 1) {
        if (at + 1 < size) { /* what does not fit is cut */
            int n = snprintf(out + at, size - at, "%s%s", at > 0 ? " " : "", info.name);
            at = n > 0 && at + (size_t)n < size ? at + (size_t)n : size - 1;
        }
    }
    long long steps = mb_range_steps(s);
    mv_mailbox_list_end(&it);
    return more == 0 ? steps : -1;
}

/* mv_mailbox_list_begin_range: the names from <= n < below in name order (a LIST pattern's
 * head and the head with its last byte raised: "Work/" .. "Work0" is Work's descendants and
 * not "Work-x"), read through the names' index: 3 names among 500 cost a few percent of the
 * VM steps of all 500 (a walk of every mailbox does not). Bounds copied; NULL bounds and
 * unknown field bits refused. */
static void test_list_range(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("range", &s), MV_OK);
    const char *const made[] = {"Work", "Work/a", "Work/b/c", "Work-x", "Work0", "Workz"};
    CHECK_EQ_INT(mb_make(s, made, sizeof made / sizeof made[0], "Other/", 480), MV_OK);
    char got[512];
    long long few = mb_range(s, "Work/", "Work0", got, sizeof got);
    CHECK(strcmp(got, "Work/a Work/b Work/b/c") == 0);
    long long all = mb_range(s, "", "\xf4\x90", got, sizeof got);
    CHECK(few > 0 && all > 0);
    CHECK(few * 20 < all);
    CHECK(mb_range(s, "Work", "Worl", got, sizeof got) > 0);
    CHECK(strcmp(got, "Work Work-x Work/a Work/b Work/b/c Work0 Workz") == 0);
    CHECK(mb_range(s, "Zzz", "Zzz0", got, sizeof got) >= 0);
    CHECK(strcmp(got, "") == 0);
    mv_mailbox_iter *it = (mv_mailbox_iter *)&got; /* must come back NULL */
    CHECK_EQ_INT(mv_mailbox_list_begin_range(s, 0, NULL, "x", &it), MV_EINVAL);
    CHECK(it == NULL);
    CHECK_EQ_INT(mv_mailbox_list_begin_range(s, 0x04u, "a", "b", &it), MV_EINVAL);
    CHECK(it == NULL);
    mv_store_close(&s);
}

/* mv_mailbox_list_skip: a range listing goes on from a new lower bound, the names between
 * passed over by one search (VM steps far below a read of them), the upper bound kept; a
 * range with no upper bound (below NULL) lists to the end; a skip backwards reads names
 * again; a listing of every mailbox (begin_fields) cannot skip. */
static void test_list_skip(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("skip", &s), MV_OK);
    const char *const made[] = {"Tree", "Tree-x", "Tree0", "Zed"};
    CHECK_EQ_INT(mb_make(s, made, sizeof made / sizeof made[0], "Tree/", 480), MV_OK);
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info info;
    char got[256] = "";
    size_t at = 0;
    CHECK_EQ_INT(mv_mailbox_list_begin_range(s, 0, "", NULL, &it), MV_OK);
    int more;
    while ((more = mv_mailbox_list_next(it, &info)) == 1) {
        /* the listing's own names after the defaults (INBOX, Sent, ...) */
        if (strncmp(info.name, "Tree", 4) == 0 || strcmp(info.name, "Zed") == 0) {
            at += (size_t)snprintf(got + at, sizeof got - at, "%s%s", at > 0 ? " " : "", info.name);
        }
        if (strcmp(info.name, "Tree/001") == 0) {
            char to[] = "Tree/";
            to[4] = '0';
            CHECK_EQ_INT(mv_mailbox_list_skip(it, to), MV_OK);
            memset(to, 'x', sizeof to - 1); /* the iterator's own copy */
        }
        CHECK(at < sizeof got);
    }
    CHECK_EQ_INT(more, 0);
    CHECK(strcmp(got, "Tree Tree-x Tree/000 Tree/001 Tree0 Zed") == 0);
    long long skipped = mb_range_steps(s);
    mv_mailbox_list_end(&it);
    CHECK_EQ_INT(mv_mailbox_list_begin_range(s, 0, "", NULL, &it), MV_OK);
    while ((more = mv_mailbox_list_next(it, &info)) == 1) {
    }
    long long all = mb_range_steps(s);
    mv_mailbox_list_end(&it);
    CHECK(skipped > 0 && skipped * 20 < all);

    /* the upper bound stays; backwards reads again */
    CHECK_EQ_INT(mv_mailbox_list_begin_range(s, 0, "Tree/", "Tree/003", &it), MV_OK);
    CHECK_EQ_INT(mv_mailbox_list_next(it, &info), 1);
    CHECK(strcmp(info.name, "Tree/000") == 0);
    CHECK_EQ_INT(mv_mailbox_list_skip(it, "Tree/002"), MV_OK);
    CHECK_EQ_INT(mv_mailbox_list_next(it, &info), 1);
    CHECK(strcmp(info.name, "Tree/002") == 0);
    CHECK_EQ_INT(mv_mailbox_list_next(it, &info), 0);
    CHECK_EQ_INT(mv_mailbox_list_skip(it, "Tree/001"), MV_OK);
    CHECK_EQ_INT(mv_mailbox_list_next(it, &info), 1);
    CHECK(strcmp(info.name, "Tree/001") == 0);
    CHECK_EQ_INT(mv_mailbox_list_skip(it, NULL), MV_EINVAL);
    mv_mailbox_list_end(&it);

    CHECK_EQ_INT(mv_mailbox_list_begin_fields(s, 0, &it), MV_OK);
    CHECK_EQ_INT(mv_mailbox_list_skip(it, "Tree0"), MV_EINVAL);
    mv_mailbox_list_end(&it);
    CHECK_EQ_INT(mv_mailbox_list_skip(NULL, "Tree0"), MV_EINVAL);
    mv_store_close(&s);
}

static void test_subscriptions(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open("subs", &s), MV_OK);
    CHECK(mb_subscriptions_are(s, "Archive Drafts INBOX Junk Sent Trash"));
    CHECK_EQ_INT(mv_mailbox_create(s, "Work/Old", NULL), MV_OK);
    CHECK(mb_subscriptions_are(s, "Archive Drafts INBOX Junk Sent Trash"));
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Work/Old", 1), MV_OK);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Work/Old", 1), MV_OK); /* already: fine */
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Never/There", 1), MV_OK);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "inbox", 0), MV_OK);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "a//b", 1), MV_EINVAL);
    CHECK(mb_subscriptions_are(s, "Archive Drafts Junk Never/There Sent Trash Work/Old"));
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "Work/Old", &info), MV_OK);
    CHECK_EQ_INT(info.subscribed, 1);
    CHECK_EQ_INT(mv_mailbox_status(s, "Work", &info), MV_OK);
    CHECK_EQ_INT(info.subscribed, 0);
    CHECK_EQ_INT(mv_mailbox_rename(s, "Work", "Job"), MV_OK);
    CHECK(mb_subscriptions_are(s, "Archive Drafts Job/Old Junk Never/There Sent Trash"));
    CHECK_EQ_INT(mv_mailbox_delete(s, "Job/Old"), MV_OK);
    CHECK(mb_subscriptions_are(s, "Archive Drafts Job/Old Junk Never/There Sent Trash"));
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Job/Old", 0), MV_OK); /* a deleted name too */
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Never/There", 0), MV_OK);
    CHECK(mb_subscriptions_are(s, "Archive Drafts Junk Sent Trash"));

    /* From version 4: the subscribed column becomes the set; nothing is \Recent. */
    size_t len = 0;
    char *m = mb_message("old", 0, 1, &len);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL), MV_OK);
    static const char downgrade[] =
        TU_DOWNGRADE_TO_V6 "DROP TABLE subscriptions; "
                           "ALTER TABLE mailboxes DROP COLUMN recent_uid; "
                           "UPDATE mailboxes SET subscribed = name IN ('INBOX', 'Job'); "
                           "DROP INDEX bodies_unreferenced; "
                           "PRAGMA user_version = 4";
    CHECK_EQ_INT(tu_exec(mv_store_db(s), downgrade), SQLITE_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(mb_open("subs", &s), MV_OK);
    CHECK_EQ_INT(mb_int(s, "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK(mb_subscriptions_are(s, "INBOX Job"));
    uint32_t first = 0, count = 9;
    CHECK_EQ_INT(mv_mailbox_recent(s, "INBOX", &first, &count), MV_OK);
    CHECK_EQ_INT(first, 2);
    CHECK_EQ_INT(count, 0);
    free(m);
    mv_store_close(&s);
}

/* limits.subscriptions_max bounds the names subscribed (a name need not exist, so before
 * the bound SUBSCRIBE added names without end, and each LSUB read them all into memory): a
 * new name past it is MV_ELIMIT and changes nothing; a name already subscribed, in any
 * spelling of INBOX, is still MV_OK; unsubscribing makes room; a rename moves names without
 * adding any. */
static void test_subscriptions_bound(void)
{
    struct mv_store_options o = mb_options();
    o.limits.subscriptions_max = 8; /* the six defaults and two more */
    mv_store *s = NULL;
    CHECK_EQ_INT(mb_open_with("subsmax", &o, &s), MV_OK);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Never/There", 1), MV_OK);
    CHECK_EQ_INT(mv_mailbox_create(s, "Work/Old", NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Work/Old", 1), MV_OK);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Work", 1), MV_ELIMIT);
    CHECK(mb_errmsg_has(s, "subscriptions_max is 8"));
    CHECK(mb_subscriptions_are(s, "Archive Drafts INBOX Junk Never/There Sent Trash Work/Old"));
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Work/Old", 1), MV_OK); /* already: fine */
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "inbox", 1), MV_OK);
    CHECK_EQ_INT(mv_mailbox_rename(s, "Work", "Job"), MV_OK);
    CHECK(mb_subscriptions_are(s, "Archive Drafts INBOX Job/Old Junk Never/There Sent Trash"));
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Never/There", 0), MV_OK);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Job", 1), MV_OK);
    CHECK_EQ_INT(mv_mailbox_subscribe(s, "Never/There", 1), MV_ELIMIT);
    CHECK(mb_subscriptions_are(s, "Archive Drafts INBOX Job Job/Old Junk Sent Trash"));
    mv_store_close(&s);
}

/* One message as mv_message_get() reports it, on one line (for before/after comparisons). */
static int mb_info_line(mv_store *s, const char *mailbox, uint32_t uid, char *out, size_t size)
{
    struct mv_message_info i;
    int rc = mv_message_get(s, mailbox, uid, &i);
    if (rc != MV_OK) {
        snprintf(out, size, "%s %u: %s", mailbox, uid, mv_strerror(rc));
        return rc;
    }
    snprintf(out, size,
             "%s %u m%llu d%lld s%lld z%llu f%u k[%s] [%s] [%s] [%s] [%s] [%s] [%s] t%lld",
             i.mailbox, i.uid, (unsigned long long)i.modseq, (long long)i.internal_date,
             (long long)i.sent_date, (unsigned long long)i.size, i.flags, i.keywords, i.subject,
             i.from, i.to, i.cc, i.message_id, i.in_reply_to, (long long)i.thread_id);
    return MV_OK;
}

static int mb_search_count(mv_store *s, const char *subject, const char *from)
{
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    q.subject = subject;
    q.from = from;
    mv_search *it = NULL;
    if (mv_search_begin(s, &q, &it) != MV_OK) {
        return -1;
    }
    struct mv_message_info info;
    int n = 0;
    while (mv_search_next(it, &info) == 1) {
        n++;
    }
    mv_search_end(&it);
    return n;
}

/* Schema version 7 (issue 13: narrow messages rows, the header text in body_headers, one row
 * per body). A store in version 6's shape migrates on open with every message's UID, flags,
 * modseq, dates, header fields and thread as they were; copies share one header row;
 * searches, threading, a body waiting for the purge taken up again by the same bytes, and
 * the purge (which deletes header rows with their bodies) work on the migrated store, and
 * mv_store_check() finds nothing. */
static void test_schema_v7(void)
{
    static const char parent[] = "From: Alice <alice@example.org>\r\nTo: bob@example.org\r\n"
                                 "Cc: carol@example.org\r\nSubject: plans\r\n"
                                 "Date: Tue, 01 Dec 2026 10:00:00 +0100\r\n"
                                 "Message-ID: <p@example.org>\r\n\r\nhello\r\n";
    static const char reply[] = "From: bob@example.org\r\nSubject: Re: plans\r\n"
                                "Message-ID: <r@example.org>\r\nIn-Reply-To: <p@example.org>\r\n"
                                "\r\nok\r\n";
    static const char gone[] = "From: x@example.org\r\nSubject: gone\r\n"
                               "Message-ID: <g@example.org>\r\n\r\nbye\r\n";
    static const char late[] = "From: alice@example.org\r\nSubject: Re: Re: plans\r\n"
                               "In-Reply-To: <r@example.org>\r\n\r\nlater\r\n";
    mv_store *s = NULL;
    uint32_t n = 0;
    CHECK_EQ_INT(mb_open("narrow", &s), MV_OK);
    CHECK_EQ_INT(
        mv_message_append(s, "INBOX", parent, strlen(parent), MV_FLAG_SEEN, "$work", 1000, NULL),
        MV_OK);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", reply, strlen(reply), 0, NULL, 2000, NULL), MV_OK);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", gone, strlen(gone), 0, NULL, 3000, NULL), MV_OK);
    CHECK_EQ_INT(mv_message_copy(s, "INBOX", "1:2", "Archive", &n), MV_OK);
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "3", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK); /* its body waits, unpurged */
    char before[4][1024], after[1024];
    static const char *const boxes[4] = {"INBOX", "INBOX", "Archive", "Archive"};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(mb_info_line(s, boxes[i], (uint32_t)(i % 2 + 1), before[i], sizeof before[i]),
                     MV_OK);
    }
    CHECK(strstr(before[0], "[plans] [Alice <alice@example.org>] [bob@example.org] "
                            "[carol@example.org] [p@example.org] []") != NULL);
    CHECK_EQ_INT(mb_int(s, "SELECT count(*) FROM body_headers"), 3); /* copies share theirs */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), TU_DOWNGRADE_TO_V6 "PRAGMA user_version = 6"), SQLITE_OK);
    CHECK_EQ_INT(mb_int(s, "SELECT count(*) FROM pragma_table_info('messages') "
                           "WHERE name = 'subject'"),
                 1);
    mv_store_close(&s);

    CHECK_EQ_INT(mb_open("narrow", &s), MV_OK);
    CHECK_EQ_INT(mb_int(s, "PRAGMA user_version"), TU_SCHEMA_VERSION);
    CHECK_EQ_INT(mb_int(s, "SELECT count(*) FROM pragma_table_info('messages') "
                           "WHERE name IN ('subject', 'from_addr', 'message_id', 'sent_date')"),
                 0);
    CHECK_EQ_INT(mb_int(s, "SELECT count(*) FROM body_headers"), 2); /* one per body in use */
    CHECK_EQ_INT(mb_int(s, "SELECT count(*) FROM sqlite_master WHERE name = 'messages_thread'"), 0);
    /* the rebuild dropped messages' statistics: the migration analyzed it again */
    CHECK(mb_int(s, "SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'messages'") > 0);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(mb_info_line(s, boxes[i], (uint32_t)(i % 2 + 1), after, sizeof after), MV_OK);
        if (strcmp(after, before[i]) != 0) {
            fprintf(stderr, "  before: %s\n  after:  %s\n", before[i], after);
            CHECK(0);
        }
    }
    CHECK_EQ_INT(mb_search_count(s, "PLANS", NULL), 4);
    CHECK_EQ_INT(mb_search_count(s, NULL, "alice"), 2);
    CHECK_EQ_INT(mb_search_count(s, "gone", NULL), 0);
    CHECK(mb_counters_ok(s));

    /* Threading reads body_headers: a reply to the reply joins the parent's thread. */
    uint32_t uid = 0;
    struct mv_message_info info;
    CHECK_EQ_INT(mv_message_get(s, "INBOX", 1, &info), MV_OK);
    int64_t thread = info.thread_id;
    CHECK_EQ_INT(mv_message_append(s, "INBOX", late, strlen(late), 0, NULL, 4000, &uid), MV_OK);
    CHECK_EQ_INT(mv_message_get(s, "INBOX", uid, &info), MV_OK);
    CHECK_EQ_INT(info.thread_id, thread);
    /* The unpurged body taken up again gets its header row back. */
    CHECK_EQ_INT(mv_message_append(s, "Trash", gone, strlen(gone), 0, NULL, 5000, &uid), MV_OK);
    CHECK_EQ_INT(mv_message_get(s, "Trash", uid, &info), MV_OK);
    CHECK(strcmp(info.subject, "gone") == 0 && strcmp(info.message_id, "g@example.org") == 0);
    struct mv_check_report report;
    CHECK_EQ_INT(mv_store_check(s, NULL, NULL, &report), MV_OK);

    /* The purge deletes a header row with its body, only when no message uses the body. */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:*", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK);
    uint64_t left = 1;
    CHECK_EQ_INT(mv_store_purge(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(mb_int(s, "SELECT count(*) FROM body_headers"), 3); /* Archive's two, Trash's */
    CHECK_EQ_INT(mb_search_count(s, "plans", NULL), 2);
    CHECK_EQ_INT(mv_mailbox_delete(s, "Archive"), MV_OK);
    CHECK_EQ_INT(mv_store_purge(s, 0, &left), MV_OK);
    CHECK_EQ_INT(mb_int(s, "SELECT count(*) FROM body_headers"), 1);
    CHECK_EQ_INT(mv_store_check(s, NULL, NULL, &report), MV_OK);
    mv_store_close(&s);
}

/* \Recent (RFC 3501 2.3.2; issue 12 item 9): each UID is claimed once, across handles. */
static void test_recent_claim(void)
{
    mv_store *a = NULL, *b = NULL;
    CHECK_EQ_INT(mb_open("recent", &a), MV_OK);
    CHECK_EQ_INT(mb_open("recent", &b), MV_OK);
    if (a == NULL || b == NULL) {
        mv_store_close(&a);
        mv_store_close(&b);
        return;
    }
    size_t len = 0;
    char *m = mb_message("new", 0, 1, &len);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(mv_message_append(a, "INBOX", m, len, 0, NULL, 0, NULL), MV_OK);
    }
    uint32_t first = 0, count = 0;
    CHECK_EQ_INT(mv_mailbox_recent(b, "INBOX", &first, &count), MV_OK);
    CHECK_EQ_INT(first, 1);
    CHECK_EQ_INT(count, 3);
    CHECK_EQ_INT(mv_mailbox_recent_claim(a, "INBOX", 3, &first), MV_OK); /* UIDs 1, 2 */
    CHECK_EQ_INT(first, 1);
    CHECK_EQ_INT(mv_mailbox_recent_claim(b, "INBOX", 4, &first), MV_OK); /* UID 3 only */
    CHECK_EQ_INT(first, 3);
    CHECK_EQ_INT(mv_mailbox_recent_claim(a, "INBOX", 4, &first), MV_OK); /* nothing left */
    CHECK_EQ_INT(first, 4);
    CHECK_EQ_INT(mv_mailbox_recent_claim(a, "INBOX", 2, &first), MV_OK); /* never backwards */
    CHECK_EQ_INT(first, 4);
    CHECK_EQ_INT(mv_mailbox_recent(b, "INBOX", &first, &count), MV_OK);
    CHECK_EQ_INT(count, 0);
    CHECK_EQ_INT(mv_mailbox_recent_claim(a, "Nope", 4, &first), MV_ENOTFOUND);
    free(m);
    mv_store_close(&a);
    mv_store_close(&b);
}

int main(void)
{
    TEST(test_create_and_limits);
    TEST(test_rename_children);
    TEST(test_stored_bytes);
    TEST(test_list_fields_cost);
    TEST(test_describe_one_statement);
    TEST(test_counters);
    TEST(test_counters_expunge_untriggered);
    TEST(test_counters_flags_untriggered);
    TEST(test_counters_move_untriggered);
    TEST(test_readonly_open);
    TEST(test_empty_store_file_refused);
    TEST(test_init_killed);
    TEST(test_errmsg_internal);
    TEST(test_list_range);
    TEST(test_list_skip);
    TEST(test_subscriptions);
    TEST(test_subscriptions_bound);
    TEST(test_recent_claim);
    TEST(test_schema_v7);
    return th_summary();
}
