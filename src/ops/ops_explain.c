/*
 * ops_explain.c -- mv_explain_*: the query plan of every statement the store prepares.
 *
 * USAGE
 *   mv_explain *e; mv_explain_begin(store_or_NULL, &e, err, sizeof err);
 *   while (mv_explain_next(e, &row) == 1) ... row.sql, row.plan, row.scans_messages ...
 *   mv_explain_end(&e);
 *
 * IMPLEMENTATION NOTES
 *   There is no list of the store's SQL to keep in step with the code: a scratch store is
 *   made in a fresh directory under $TMPDIR with a random password, every operation of the
 *   public API is run on it (the workload below touches each statement path: threads,
 *   duplicates, attachments, each search criterion, the queue drain), and after each step
 *   the connection's statements are read off with sqlite3_next_stmt()/sqlite3_sql(). The
 *   store caches its hot statements, so they are all still there; statements an iterator
 *   holds (search, mailbox list) are read while the iterator is open. Statements that are
 *   not queries (PRAGMA, BEGIN, COMMIT, ...) are left out.
 *   Plans come from EXPLAIN QUERY PLAN on the caller's store when one is given -- its
 *   sqlite_stat1 decides the planner's choices -- else on the scratch store. The scratch
 *   directory is removed before begin returns.
 *
 * LIMITATIONS
 *   A statement only a rare path prepares (an error path, a migration) is missed unless the
 *   workload reaches it; the list is as complete as the workload.
 */
#include "crypto/crypt.h"
#include "ops/ops_inspect.h"
#include "vfs/db_column.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OPS_EXPLAIN_STATEMENTS_MAX 1000
#define OPS_EXPLAIN_DEPTH_MAX      64
#define OPS_EXPLAIN_ADDRESS        "explain@scratch.invalid"

struct mv_explain {
    char **sql;
    char **plan;
    int *scans;
    const char **origin; /* the workload step that first prepared it (static text) */
    size_t count;
    size_t index;
    mv_store *scratch;
    char dir[MV_PATH_MAX];
    char errmsg[512];
};

__attribute__((format(printf, 3, 4))) static int
ops_explain_fail(mv_explain *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->errmsg, sizeof e->errmsg, fmt, ap);
    va_end(ap);
    return code;
}

static int ops_explain_wanted(const char *sql)
{
    static const char *const skip[] = {"PRAGMA",  "BEGIN",   "COMMIT",  "ROLLBACK", "SAVEPOINT",
                                       "RELEASE", "EXPLAIN", "ANALYZE", "VACUUM",   "CREATE"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++) {
        if (strncasecmp(sql, skip[i], strlen(skip[i])) == 0) {
            return 0;
        }
    }
    return 1;
}

/* Adds the SQL of every statement db holds that is not yet in the list, as first seen in
 * the workload step origin. */
static int ops_explain_collect(mv_explain *e, const char *origin)
{
    sqlite3 *db = mv_store_db(e->scratch);
    for (sqlite3_stmt *st = sqlite3_next_stmt(db, NULL); st != NULL;
         st = sqlite3_next_stmt(db, st)) {
        const char *sql = sqlite3_sql(st);
        int known = sql == NULL || !ops_explain_wanted(sql);
        for (size_t i = 0; i < e->count && !known; i++) {
            known = strcmp(e->sql[i], sql) == 0;
        }
        if (known) {
            continue;
        }
        if (e->count >= OPS_EXPLAIN_STATEMENTS_MAX) {
            return ops_explain_fail(e, MV_ELIMIT, "more than %d statements",
                                    OPS_EXPLAIN_STATEMENTS_MAX);
        }
        char *copy = strdup(sql);
        if (copy == NULL) {
            return ops_explain_fail(e, MV_ENOMEM, "out of memory");
        }
        e->origin[e->count] = origin;
        e->sql[e->count++] = copy;
    }
    return MV_OK;
}

/* Checks an MV_* result of a workload step; collects statements after a success. */
static int ops_explain_step(mv_explain *e, int rc, const char *what)
{
    if (rc != MV_OK) {
        return ops_explain_fail(e, rc, "scratch workload: %s: %s", what,
                                mv_store_errmsg(e->scratch));
    }
    return ops_explain_collect(e, what);
}

static const char ops_explain_parent[] =
    "From: Alice <alice@example.org>\r\nTo: Bob <bob@example.net>\r\nSubject: Plans\r\n"
    "Date: Mon, 01 Jan 2024 10:00:00 +0000\r\nMessage-ID: <parent@example.org>\r\n\r\n"
    "The quarterly zebra plans.\r\n";
static const char ops_explain_reply[] =
    "From: Bob <bob@example.net>\r\nTo: Alice <alice@example.org>\r\nCc: c@example.com\r\n"
    "Subject: Re: Plans\r\nDate: Tue, 02 Jan 2024 10:00:00 +0000\r\n"
    "Message-ID: <reply@example.net>\r\nIn-Reply-To: <parent@example.org>\r\n"
    "References: <parent@example.org>\r\n\r\nAgreed.\r\n";
static const char ops_explain_orphan[] =
    "From: Carol <c@example.com>\r\nSubject: Re: Later\r\nMessage-ID: <orphan@example.com>\r\n"
    "In-Reply-To: <later@example.org>\r\n\r\nA reply before its parent.\r\n";
static const char ops_explain_later[] =
    "From: Alice <alice@example.org>\r\nSubject: Later\r\nMessage-ID: <later@example.org>\r\n"
    "\r\nThe parent, late.\r\n";

/* A message with one attachment large enough to be stored apart. */
static char *ops_explain_attachment_message(size_t *len)
{
    static const char head[] =
        "From: Dave <d@example.com>\r\nSubject: Report\r\nMessage-ID: <att@example.com>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\n"
        "Content-Type: text/plain\r\n\r\nSee attached.\r\n--b\r\n"
        "Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n";
    static const char tail[] = "--b--\r\n";
    size_t lines = 200, line = 78;
    size_t size = sizeof head - 1 + lines * line + sizeof tail - 1;
    char *m = malloc(size + 1);
    if (m == NULL) {
        return NULL;
    }
    memcpy(m, head, sizeof head - 1);
    char *p = m + sizeof head - 1;
    for (size_t i = 0; i < lines; i++) {
        for (size_t j = 0; j < line - 2; j++) {
            *p++ = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i * 7 + j) %
                                                                                      64];
        }
        *p++ = '\r';
        *p++ = '\n';
    }
    memcpy(p, tail, sizeof tail);
    *len = size;
    return m;
}

/* mv_mailbox_get_fields() and mv_mailbox_list_begin_fields() with each combination of
 * fields: one statement each (mailvaultd's LIST asks for none, STATUS DELETED for one); and
 * mv_mailbox_list_begin_range() as mailvaultd's LIST with a pattern's head asks for it. */
static int ops_explain_mailbox_fields(mv_explain *e)
{
    static const char *const get[] = {"mailbox get, no extra fields", "mailbox get, stored bytes",
                                      "mailbox get, deleted", "mailbox get, every field"};
    static const char *const list[] = {"mailbox list, no extra fields",
                                       "mailbox list, stored bytes", "mailbox list, deleted",
                                       "mailbox list, every field"};
    _Static_assert(sizeof get / sizeof get[0] == MV_MAILBOX_FIELDS_ALL + 1 &&
                       sizeof list / sizeof list[0] == MV_MAILBOX_FIELDS_ALL + 1,
                   "a name per combination of fields");
    struct mv_mailbox_info info;
    int rc = MV_OK;
    for (unsigned fields = 0; fields <= MV_MAILBOX_FIELDS_ALL && rc == MV_OK; fields++) {
        rc = ops_explain_step(e, mv_mailbox_get_fields(e->scratch, "INBOX", fields, &info),
                              get[fields]);
        mv_mailbox_iter *it = NULL;
        if (rc == MV_OK && (rc = mv_mailbox_list_begin_fields(e->scratch, fields, &it)) != MV_OK) {
            rc = ops_explain_step(e, rc, list[fields]);
        }
        if (rc == MV_OK) {
            int more = mv_mailbox_list_next(it, &info);
            rc = more < 0 ? ops_explain_step(e, more, list[fields])
                          : ops_explain_collect(e, list[fields]);
            mv_mailbox_list_end(&it);
        }
    }
    /* LIST's reads: a range (a pattern's head), and from a name on (every name, skips) */
    static const char *const ranged[] = {"mailbox list, a range of names",
                                         "mailbox list, from a name on"};
    for (size_t i = 0; i < 2 && rc == MV_OK; i++) {
        mv_mailbox_iter *it = NULL;
        if ((rc = mv_mailbox_list_begin_range(e->scratch, 0, "I", i == 0 ? "J" : NULL, &it)) !=
            MV_OK) {
            rc = ops_explain_step(e, rc, ranged[i]);
        }
        if (rc == MV_OK) {
            int more = mv_mailbox_list_next(it, &info);
            rc =
                more < 0 ? ops_explain_step(e, more, ranged[i]) : ops_explain_collect(e, ranged[i]);
            mv_mailbox_list_end(&it);
        }
    }
    return rc;
}

static int ops_explain_mailboxes(mv_explain *e)
{
    mv_store *s = e->scratch;
    struct mv_mailbox_info info;
    mv_mailbox_iter *it = NULL;
    int rc = ops_explain_step(e, mv_mailbox_create(s, "Work/Sub", NULL), "mailbox create");
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_mailbox_subscribe(s, "Work", 0), "mailbox subscribe");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_mailbox_rename(s, "Work", "Projects"), "mailbox rename");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_mailbox_get(s, "INBOX", &info), "mailbox get");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_mailbox_status(s, "INBOX", &info), "mailbox status");
    }
    if (rc == MV_OK && (rc = mv_mailbox_list_begin(s, &it)) == MV_OK) {
        int more = mv_mailbox_list_next(it, &info);
        rc = more < 0 ? more : ops_explain_collect(e, "mailbox list");
        while (rc == MV_OK && (more = mv_mailbox_list_next(it, &info)) == 1) {
        }
        mv_mailbox_list_end(&it);
        rc = rc == MV_OK && more < 0 ? ops_explain_step(e, more, "mailbox list") : rc;
    }
    return rc == MV_OK ? ops_explain_mailbox_fields(e) : rc;
}

static int ops_explain_messages(mv_explain *e)
{
    mv_store *s = e->scratch;
    static const char *const simple[] = {ops_explain_parent, ops_explain_reply, ops_explain_orphan,
                                         ops_explain_later, ops_explain_parent};
    int rc = MV_OK;
    for (size_t i = 0; i < sizeof simple / sizeof simple[0] && rc == MV_OK; i++) {
        rc = ops_explain_step(e,
                              mv_message_append(s, "INBOX", simple[i], strlen(simple[i]),
                                                i == 1 ? MV_FLAG_SEEN : 0, "$Work", 0, NULL),
                              "append");
    }
    size_t len = 0;
    char *big = rc == MV_OK ? ops_explain_attachment_message(&len) : NULL;
    if (rc == MV_OK && big == NULL) {
        return ops_explain_fail(e, MV_ENOMEM, "out of memory");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_message_append(s, "INBOX", big, len, 0, NULL, 0, NULL),
                              "append with an attachment");
    }
    free(big);
    void *raw = NULL;
    size_t raw_len = 0;
    struct mv_message_info info;
    uint32_t n = 0;
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_message_fetch(s, "INBOX", 6, &raw, &raw_len), "fetch");
        mv_free(raw);
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_message_get(s, "INBOX", 1, &info), "get");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(
            e, mv_flags_set(s, "INBOX", "1:3", MV_FLAGS_ADD, MV_FLAG_FLAGGED, "todo", &n),
            "flags add");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(
            e, mv_flags_set(s, "INBOX", "2", MV_FLAGS_REMOVE, MV_FLAG_SEEN, NULL, &n),
            "flags remove");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(
            e, mv_flags_set(s, "INBOX", "1:*", MV_FLAGS_REPLACE, MV_FLAG_SEEN, "$Work", &n),
            "flags replace");
    }
    return rc;
}

/* The server's listing (UIDs, flags, modseqs): all of it, then what changed since. */
static int ops_explain_listing(mv_explain *e, uint64_t changed_since)
{
    mv_message_iter *it = NULL;
    struct mv_message_entry entry;
    int rc = mv_message_list_begin(e->scratch, "INBOX", 0, changed_since, &it);
    if (rc != MV_OK) {
        return ops_explain_step(e, rc, "message list");
    }
    int more = mv_message_list_next(it, &entry);
    rc = more < 0 ? ops_explain_step(e, more, "message list")
                  : ops_explain_collect(e, "message list");
    while (rc == MV_OK && (more = mv_message_list_next(it, &entry)) == 1) {
    }
    mv_message_list_end(&it);
    return rc == MV_OK && more < 0 ? ops_explain_step(e, more, "message list") : rc;
}

static int ops_explain_moves(mv_explain *e)
{
    mv_store *s = e->scratch;
    uint32_t n = 0;
    int rc = ops_explain_step(e, mv_message_copy(s, "INBOX", "1:2,6", "Projects", &n), "copy");
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_message_move(s, "INBOX", "3", "Projects/Sub", &n), "move");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(
            e, mv_flags_set(s, "INBOX", "4:5", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n),
            "flag deleted");
    }
    /* A UID set and the whole mailbox run the same statements: the first names them. */
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_mailbox_expunge(s, "INBOX", "5", &n), "expunge");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_mailbox_expunge(s, "INBOX", NULL, &n), "expunge all");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_store_purge(s, 0, NULL), "purge");
    }
    return rc;
}

#define OPS_EXPLAIN_SEARCH_ALL "search over every mailbox"

/* One search, its statements collected while it is open. */
static int ops_explain_search(mv_explain *e, const struct mv_search_query *q)
{
    const char *origin = q->mailbox != NULL ? "search in a mailbox" : OPS_EXPLAIN_SEARCH_ALL;
    mv_search *it = NULL;
    struct mv_message_info info;
    int rc = mv_search_begin(e->scratch, q, &it);
    if (rc != MV_OK) {
        return ops_explain_step(e, rc, origin);
    }
    int more = mv_search_next(it, &info);
    rc = more < 0 ? ops_explain_step(e, more, origin) : ops_explain_collect(e, origin);
    while (rc == MV_OK && (more = mv_search_next(it, &info)) == 1) {
    }
    mv_search_end(&it);
    return rc == MV_OK && more < 0 ? ops_explain_step(e, more, origin) : rc;
}

static int ops_explain_searches(mv_explain *e)
{
    int rc = MV_OK;
    for (int scoped = 0; scoped < 2 && rc == MV_OK; scoped++) {
        for (int criterion = 0; criterion < 13 && rc == MV_OK; criterion++) {
            struct mv_search_query q = MV_SEARCH_QUERY_INIT;
            q.mailbox = scoped ? "INBOX" : NULL;
            switch (criterion) {
            case 0:
                q.from = "alice";
                break;
            case 1:
                q.to = "bob";
                break;
            case 2:
                q.cc = "example";
                break;
            case 3:
                q.subject = "plans";
                break;
            case 4:
                q.message_id = "parent@example.org";
                break;
            case 5:
                q.text = "zebra";
                break;
            case 6:
                q.since = 1;
                q.before = 4000000000;
                break;
            case 7:
                q.sent_since = 1;
                q.sent_before = 4000000000;
                break;
            case 8:
                q.larger = 10;
                q.smaller = 1000000;
                break;
            case 9:
                q.flags_set = MV_FLAG_SEEN;
                break;
            case 10:
                q.flags_unset = MV_FLAG_SEEN;
                break;
            case 11:
                q.keyword = "$Work";
                break;
            default:
                break; /* everything */
            }
            rc = ops_explain_search(e, &q);
        }
    }
    return rc;
}

/* stats, export, import, the sealed queue (drained by a reopen), mailbox delete. */
static int
ops_explain_rest(mv_explain *e, const struct mv_store_options *so, const void *pw, size_t pw_len)
{
    struct mv_store_stats stats;
    uint32_t n = 0;
    int rc = ops_explain_step(e, mv_store_stats(e->scratch, &stats), "stats");
    int fd = rc == MV_OK ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
    if (rc == MV_OK) {
        rc = fd < 0 ? ops_explain_fail(e, MV_EIO, "cannot open /dev/null")
                    : ops_explain_step(e, mv_export_mbox(e->scratch, "INBOX", fd, &n), "export");
    }
    if (fd >= 0) {
        close(fd);
    }
    char mbox[MV_PATH_MAX + 16];
    snprintf(mbox, sizeof mbox, "%s/import.mbox", e->dir);
    static const char mbox_text[] = "From a@example.org Mon Jan  1 00:00:00 2024\n"
                                    "From: a@example.org\nSubject: imported\n\nbody\n";
    fd = rc == MV_OK ? open(mbox, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    if (rc == MV_OK && (fd < 0 || write(fd, mbox_text, sizeof mbox_text - 1) < 0)) {
        rc = ops_explain_fail(e, MV_EIO, "cannot write %s", mbox);
    }
    if (fd >= 0) {
        close(fd);
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_import(e->scratch, mbox, "INBOX", NULL, NULL, NULL), "import");
    }
    if (rc == MV_OK) {
        rc = ops_explain_step(e, mv_mailbox_delete(e->scratch, "Projects"), "mailbox delete");
    }
    uint32_t *uids = NULL;
    size_t count = 0;
    if (rc == MV_OK) { /* QRESYNC's expunges, then the maintenance's prune of them: a
                          deleted mailbox's rows (Projects) and a mailbox's old ones */
        rc = ops_explain_step(e, mv_message_expunged_since(e->scratch, "INBOX", 0, &uids, &count),
                              "expunged since (QRESYNC)");
        mv_free(uids);
    }
    uint64_t pruned = 0;
    if (rc == MV_OK) {
        rc = ops_explain_step(e, store_changes_prune(e->scratch, INT64_MAX, &pruned),
                              "change log prune (maintain)");
    }
    if (rc == MV_OK) {
        rc = mv_deliver_sealed(OPS_EXPLAIN_ADDRESS, ops_explain_parent,
                               sizeof ops_explain_parent - 1, so, e->errmsg, sizeof e->errmsg);
        mv_deliver_sealed_wipe(1); /* the scratch delivery's burst key */
    }
    if (rc == MV_OK) {
        mv_store_close(&e->scratch);
        rc = mv_store_open(OPS_EXPLAIN_ADDRESS, pw, pw_len, so, &e->scratch, e->errmsg,
                           sizeof e->errmsg);
    }
    return rc == MV_OK ? ops_explain_collect(e, "queue drain at open") : rc;
}

static int ops_explain_workload(mv_explain *e)
{
    uint8_t key[24];
    char pw[2 * sizeof key + 1];
    if (crypt_random(key, sizeof key) != CRYPT_OK) {
        return ops_explain_fail(e, MV_ERROR, "no random bytes for the scratch password");
    }
    for (size_t i = 0; i < sizeof key; i++) {
        snprintf(pw + 2 * i, 3, "%02x", key[i]);
    }
    struct mv_store_options so = MV_STORE_OPTIONS_INIT;
    so.root = e->dir;
    so.kdf_iter = 2; /* a throwaway store: the key protects nothing */
    int rc = mv_store_init(OPS_EXPLAIN_ADDRESS, pw, strlen(pw), &so, e->errmsg, sizeof e->errmsg);
    if (rc == MV_OK) {
        rc = mv_store_open(OPS_EXPLAIN_ADDRESS, pw, strlen(pw), &so, &e->scratch, e->errmsg,
                           sizeof e->errmsg);
    }
    if (rc == MV_OK && (rc = ops_explain_mailboxes(e)) == MV_OK &&
        (rc = ops_explain_messages(e)) == MV_OK && (rc = ops_explain_listing(e, 0)) == MV_OK &&
        (rc = ops_explain_listing(e, 2)) == MV_OK && (rc = ops_explain_moves(e)) == MV_OK &&
        (rc = ops_explain_searches(e)) == MV_OK) {
        rc = ops_explain_rest(e, &so, pw, strlen(pw));
    }
    crypt_wipe(pw, sizeof pw);
    crypt_wipe(key, sizeof key);
    return rc;
}

static int ops_explain_ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Whether sql names the messages table "messages <alias>" or "messages AS <alias>". */
static int ops_explain_alias_of_messages(const char *sql, const char *alias, size_t alias_len)
{
    for (const char *p = strstr(sql, "messages"); p != NULL; p = strstr(p + 1, "messages")) {
        const char *q = p + 8;
        if ((p > sql && ops_explain_ident_char(p[-1])) || *q != ' ') {
            continue;
        }
        while (*q == ' ') {
            q++;
        }
        if (strncasecmp(q, "AS ", 3) == 0) {
            q += 3;
            while (*q == ' ') {
                q++;
            }
        }
        if (strncmp(q, alias, alias_len) == 0 && !ops_explain_ident_char(q[alias_len])) {
            return 1;
        }
    }
    return 0;
}

/* Whether an EXPLAIN QUERY PLAN step is a full scan of messages: "SCAN messages ..." or
 * "SCAN <alias> ..." where sql makes alias a name of messages. */
static int ops_explain_is_scan(const char *sql, const char *detail)
{
    if (strncmp(detail, "SCAN ", 5) != 0) {
        return 0;
    }
    const char *name = detail + 5;
    size_t len = 0;
    while (ops_explain_ident_char(name[len])) {
        len++;
    }
    return (len == 8 && strncmp(name, "messages", 8) == 0) ||
           (len > 0 && ops_explain_alias_of_messages(sql, name, len));
}

/* Whether a step inside a correlated subquery searches messages by a range:
 * "SEARCH messages|alias USING ... INDEX x (c)" where c has ">?" or "<?" (a UID range: the
 * outer row's values are equalities). Such a step walks a part of the mailbox once per row
 * of the outer statement, which is quadratic: EXPUNGE's count of a body's references walked
 * every \Deleted message of the range once per body that way (store_message.c). A
 * per-mailbox count (mailbox_id = the outer mailbox) is not flagged: it reads each message
 * once. */
static int ops_explain_is_correlated_range(const char *sql, const char *detail)
{
    if (strncmp(detail, "SEARCH ", 7) != 0) {
        return 0;
    }
    const char *name = detail + 7;
    size_t len = 0;
    while (ops_explain_ident_char(name[len])) {
        len++;
    }
    if (!((len == 8 && strncmp(name, "messages", 8) == 0) ||
          (len > 0 && ops_explain_alias_of_messages(sql, name, len)))) {
        return 0;
    }
    const char *open = strchr(name + len, '(');
    if (open == NULL) {
        return 1; /* an index walked without a constraint */
    }
    const char *close = strchr(open, ')');
    size_t clen = close != NULL ? (size_t)(close - open - 1) : strlen(open + 1);
    return memchr(open + 1, '>', clen) != NULL || memchr(open + 1, '<', clen) != NULL;
}

/* EXPLAIN QUERY PLAN of statement i on db, into e->plan[i] and e->scans[i]. */
static int ops_explain_plan(mv_explain *e, sqlite3 *db, size_t i)
{
    char *eqp = sqlite3_mprintf("EXPLAIN QUERY PLAN %s", e->sql[i]);
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    sqlite3_stmt *st = NULL;
    if (eqp == NULL || out == NULL) {
        sqlite3_free(eqp);
        if (out != NULL) {
            fclose(out);
        }
        free(text);
        return ops_explain_fail(e, MV_ENOMEM, "out of memory");
    }
    if (sqlite3_prepare_v2(db, eqp, -1, &st, NULL) != SQLITE_OK) {
        fprintf(out, "(cannot plan it here: %s)", sqlite3_errmsg(db));
    }
    /* correlated[k]: step ids[k] is, or is under, a CORRELATED ... SUBQUERY step */
    int ids[OPS_EXPLAIN_DEPTH_MAX], depths[OPS_EXPLAIN_DEPTH_MAX],
        correlated[OPS_EXPLAIN_DEPTH_MAX], known = 0, oom = 0;
    while (st != NULL && !oom && sqlite3_step(st) == SQLITE_ROW) {
        int id = sqlite3_column_int(st, 0), parent = sqlite3_column_int(st, 1), depth = 0;
        int under = 0;
        const char *detail = mv_db_column_text(st, 3, &oom); /* oom: a plan cut short */
        for (int k = 0; k < known; k++) {
            depth = ids[k] == parent ? depths[k] + 1 : depth;
            under |= ids[k] == parent && correlated[k];
        }
        if (known < OPS_EXPLAIN_DEPTH_MAX) {
            ids[known] = id;
            depths[known] = depth;
            correlated[known++] =
                under || (detail != NULL && strncmp(detail, "CORRELATED ", 11) == 0);
        }
        fprintf(out, "%s%*s%s", ftell(out) > 0 ? "\n" : "", 2 * depth, "",
                detail != NULL ? detail : "");
        e->scans[i] |= detail != NULL && ops_explain_is_scan(e->sql[i], detail);
        e->scans[i] |=
            under && detail != NULL && ops_explain_is_correlated_range(e->sql[i], detail);
    }
    sqlite3_finalize(st);
    sqlite3_free(eqp);
    if (fclose(out) != 0 || text == NULL || oom) {
        free(text);
        return ops_explain_fail(e, MV_ENOMEM, "out of memory");
    }
    e->plan[i] = text;
    return MV_OK;
}

static int ops_explain_remove_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    (void)remove(path); /* best effort: keep removing the rest */
    return 0;
}

int mv_explain_begin(mv_store *store, mv_explain **out, char *errmsg, size_t errmsg_size)
{
    if (out == NULL) {
        return MV_EINVAL;
    }
    *out = NULL;
    mv_explain *e = calloc(1, sizeof *e);
    char **sql = calloc(OPS_EXPLAIN_STATEMENTS_MAX, sizeof *sql);
    char **plan = calloc(OPS_EXPLAIN_STATEMENTS_MAX, sizeof *plan);
    int *scans = calloc(OPS_EXPLAIN_STATEMENTS_MAX, sizeof *scans);
    const char **origin = calloc(OPS_EXPLAIN_STATEMENTS_MAX, sizeof *origin);
    int rc = e != NULL && sql != NULL && plan != NULL && scans != NULL && origin != NULL
                 ? MV_OK
                 : MV_ENOMEM;
    if (e != NULL) {
        e->sql = sql;
        e->plan = plan;
        e->scans = scans;
        e->origin = origin;
    } else {
        free(sql);
        free(plan);
        free(scans);
        free(origin);
    }
    const char *tmp = getenv("TMPDIR");
    if (rc == MV_OK) {
        snprintf(e->dir, sizeof e->dir, "%s/mailvault-explain.XXXXXX",
                 tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
        if (mkdtemp(e->dir) == NULL) {
            rc = ops_explain_fail(e, MV_EIO, "cannot make a scratch directory in %s",
                                  tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
            e->dir[0] = '\0';
        }
    }
    if (rc == MV_OK) {
        rc = ops_explain_workload(e);
    }
    sqlite3 *db = store != NULL ? mv_store_db(store) : mv_store_db(e != NULL ? e->scratch : NULL);
    for (size_t i = 0; rc == MV_OK && i < e->count; i++) {
        rc = ops_explain_plan(e, db, i);
    }
    if (e != NULL) {
        mv_store_close(&e->scratch);
        if (e->dir[0] != '\0') {
            nftw(e->dir, ops_explain_remove_one, 16, FTW_DEPTH | FTW_PHYS);
        }
    }
    if (rc != MV_OK) {
        if (errmsg != NULL && errmsg_size > 0) {
            snprintf(errmsg, errmsg_size, "%s", e != NULL ? e->errmsg : "out of memory");
        }
        mv_explain_end(&e);
        return rc;
    }
    *out = e;
    return MV_OK;
}

int mv_explain_next(mv_explain *e, struct mv_explain_row *row)
{
    if (e == NULL || row == NULL) {
        return MV_EINVAL;
    }
    if (e->index >= e->count) {
        return 0;
    }
    row->sql = e->sql[e->index];
    row->plan = e->plan[e->index];
    row->scans_messages = e->scans[e->index];
    row->operation = e->origin[e->index];
    row->scan_expected = row->scans_messages && strcmp(row->operation, OPS_EXPLAIN_SEARCH_ALL) == 0;
    e->index++;
    return 1;
}

void mv_explain_end(mv_explain **e)
{
    if (e == NULL || *e == NULL) {
        return;
    }
    mv_explain *x = *e;
    for (size_t i = 0; i < x->count; i++) {
        free(x->sql[i]);
        free(x->plan[i]);
    }
    free(x->sql);
    free(x->plan);
    free(x->scans);
    free(x->origin);
    mv_store_close(&x->scratch);
    free(x);
    *e = NULL;
}
