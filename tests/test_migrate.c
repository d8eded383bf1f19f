/*
 * test_migrate.c -- the migration from schema version 8 leaves the full-text rebuild for
 * after the open (store_fts_move.c): the open only renames the old index, searches give the
 * answers of one complete index at every point of the move (rows moved or not, bodies purged
 * on either side of the move's cursor, mail appended meanwhile, another handle ending the move
 * under a prepared search), mv_store_check finds nothing wrong at any point, and a process
 * killed in the middle of a batch leaves a store that opens, answers the same and finishes
 * the move. A move that fails on a damaged old index does not block mv_store_repair: it
 * drops the old index and rebuilds the rows from the bodies, nor the other steps of
 * mv_store_maintain (which reports it and names the repair).
 *
 * The answers are checked against a model: message i says which words it holds.
 */
#include "harness.h"
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const PW = "migrate-test-password";

#define MESSAGES_MAX 64

/* What the store holds: alive[i] for message i (UID i, internal date 1700000000 + i). */
struct model {
    int alive[MESSAGES_MAX + 1];
    int last;
};

static int words_alpha(int i)
{
    return i % 3 == 0;
}
static int words_beta(int i)
{
    return i % 4 == 1;
}
static int words_gamma(int i)
{
    return i % 5 == 2;
} /* in the Subject only */
static int words_short(int i)
{
    return i % 7 == 0;
}

static int tm_append(mv_store *s, struct model *m, int i)
{
    char msg[512];
    snprintf(msg, sizeof msg,
             "From: sender%d@example.org\r\nSubject: m%d%s\r\n\r\ncommon text %s%s%send\r\n", i, i,
             words_gamma(i) ? " hdrgamma" : "", words_alpha(i) ? "tagalpha " : "",
             words_beta(i) ? "tagbeta " : "", words_short(i) ? "zq " : "");
    uint32_t uid = 0;
    int rc = mv_message_append(s, "INBOX", msg, strlen(msg), 0, NULL, 1700000000 + i, &uid);
    if (rc == MV_OK && uid != (uint32_t)i) {
        rc = MV_ERROR;
    }
    m->alive[i] = rc == MV_OK;
    m->last = i;
    return rc;
}

/* The searches, and which message each one finds. */
enum { Q_ALPHA, Q_BETA_BODY, Q_GAMMA_ANY, Q_GAMMA_BODY, Q_SHORT, Q_BOTH, Q_COUNT };

static int tm_matches(int q, int i)
{
    switch (q) {
    case Q_ALPHA:
        return words_alpha(i);
    case Q_BETA_BODY:
        return words_beta(i);
    case Q_GAMMA_ANY:
        return words_gamma(i);
    case Q_GAMMA_BODY:
        return 0; /* the word is in the header only */
    case Q_SHORT:
        return words_short(i);
    default:
        return words_alpha(i) && words_beta(i);
    }
}

static void tm_query(int q, struct mv_search_query *query)
{
    *query = (struct mv_search_query)MV_SEARCH_QUERY_INIT;
    query->mailbox = "INBOX";
    switch (q) {
    case Q_ALPHA:
        query->text = "tagalpha";
        break;
    case Q_BETA_BODY:
        query->body_contains = "tagbeta";
        break;
    case Q_GAMMA_ANY:
        query->text_contains = "hdrgamma";
        break;
    case Q_GAMMA_BODY:
        query->body_contains = "hdrgamma";
        break;
    case Q_SHORT:
        query->text_contains = "zq"; /* under three characters: LIKE */
        break;
    default:
        query->text = "tagalpha tagbeta";
        break;
    }
}

/* The UIDs a search gives, newest first, as text; -1 on an error. */
static int tm_run(mv_search *it, char *out, size_t size)
{
    struct mv_message_info info;
    size_t at = 0;
    int rc, rows = 0;
    out[0] = '\0';
    while ((rc = mv_search_next(it, &info)) == 1) {
        at += (size_t)snprintf(out + at, size - at, "%s%u", rows++ ? " " : "", info.uid);
    }
    return rc == 0 ? rows : -1;
}

static void tm_expected(const struct model *m, int q, char *out, size_t size)
{
    size_t at = 0;
    int rows = 0;
    out[0] = '\0';
    for (int i = m->last; i >= 1; i--) {
        if (m->alive[i] && tm_matches(q, i)) {
            at += (size_t)snprintf(out + at, size - at, "%s%d", rows++ ? " " : "", i);
        }
    }
}

/* 1 if every search gives the model's answer (differences printed). */
static int tm_answers_ok(mv_store *s, const struct model *m)
{
    int ok = 1;
    for (int q = 0; q < Q_COUNT; q++) {
        struct mv_search_query query;
        tm_query(q, &query);
        char got[512], want[512];
        mv_search *it = NULL;
        int rows = mv_search_begin(s, &query, &it) == MV_OK ? tm_run(it, got, sizeof got) : -1;
        mv_search_end(&it);
        tm_expected(m, q, want, sizeof want);
        if (rows < 0 || strcmp(got, want) != 0) {
            fprintf(stderr, "  search %d: got \"%s\" (%s), want \"%s\"\n", q, rows < 0 ? "" : got,
                    rows < 0 ? mv_store_errmsg(s) : "ok", want);
            ok = 0;
        }
    }
    return ok;
}

static void tm_problem(void *arg, const char *what, const char *detail)
{
    (void)arg;
    fprintf(stderr, "  check: %s: %s\n", what, detail);
}

static uint32_t tm_problems(mv_store *s)
{
    struct mv_check_report r;
    int rc = mv_store_check(s, tm_problem, NULL, &r);
    return rc == MV_OK || rc == MV_ECORRUPT ? r.problems : 1000000;
}

static int tm_open(const char *name, mv_store **s)
{
    char address[128], err[512] = "";
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    snprintf(address, sizeof address, "%s@example.org", name);
    int rc = mv_store_open(address, PW, strlen(PW), &o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open %s: %s\n", address, err);
    }
    return rc;
}

/* A store of `count` messages in version 8's shape (full-text index with positions). */
static int tm_make_v8(const char *name, int count, struct model *m)
{
    mv_store *s = NULL;
    memset(m, 0, sizeof *m);
    int rc = tu_store_create(name, PW, 0, &s);
    for (int i = 1; rc == MV_OK && i <= count; i++) {
        rc = tm_append(s, m, i);
    }
    if (rc == MV_OK &&
        tu_exec(mv_store_db(s), TU_DOWNGRADE_TO_V8 "PRAGMA user_version = 8") != SQLITE_OK) {
        rc = MV_ERROR;
    }
    mv_store_close(&s);
    return rc;
}

static long long tm_int(mv_store *s, const char *sql)
{
    return tu_int(mv_store_db(s), sql);
}

#define TM_OLD_EXISTS "SELECT count(*) FROM sqlite_schema WHERE name = 'fts_old'"

/* The open migrates without rebuilding the index; every point of the move answers right. */
static void test_move_in_steps(void)
{
    struct model m;
    mv_store *s = NULL;
    CHECK_EQ_INT(tm_make_v8("steps", 40, &m), MV_OK);
    CHECK_EQ_INT(tm_open("steps", &s), MV_OK);
    CHECK_EQ_INT(tm_int(s, "PRAGMA user_version"), TU_SCHEMA_VERSION);
    /* the open rebuilt nothing: the new index is empty, the old one renamed (the old code
     * copied all 40 rows inside the open) */
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), 0);
    CHECK_EQ_INT(tm_int(s, TM_OLD_EXISTS), 1);
    CHECK_EQ_INT(tm_int(s, "SELECT instr(sql, 'detail=none') > 0 FROM sqlite_schema "
                           "WHERE name = 'fts'"),
                 1);
    struct mv_migration_status st;
    CHECK_EQ_INT(mv_store_migration(s, &st), MV_OK);
    CHECK_EQ_INT(st.schema_version, TU_SCHEMA_VERSION);
    CHECK_EQ_INT(st.migrated_from, 8);
    CHECK(st.migrate_ms >= 0);
    CHECK_EQ_INT(st.fts_moving, 1);
    CHECK_EQ_INT(st.fts_rows_left, 40);
    CHECK(tm_answers_ok(s, &m));
    CHECK_EQ_INT(tm_problems(s), 0);

    int more = 0;
    CHECK_EQ_INT(mv_store_migrate_step(s, 7, &more), MV_OK);
    CHECK_EQ_INT(more, 1);
    CHECK_EQ_INT(mv_store_migration(s, &st), MV_OK);
    CHECK_EQ_INT(st.fts_rows_left, 33);
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), 7);
    CHECK(tm_answers_ok(s, &m));
    CHECK_EQ_INT(tm_problems(s), 0);

    /* Purged on both sides of the cursor (3 moved, 30 not), and mail that comes meanwhile */
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "3,21,30", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL),
                 MV_OK);
    uint32_t expunged = 0;
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &expunged), MV_OK);
    CHECK_EQ_INT(expunged, 3);
    uint64_t left = 1;
    CHECK_EQ_INT(mv_store_purge(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    m.alive[3] = m.alive[21] = m.alive[30] = 0;
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts_old WHERE rowid > 7 AND rowid NOT IN "
                           "(SELECT id FROM bodies)"),
                 0);
    CHECK_EQ_INT(tm_append(s, &m, 41), MV_OK);
    CHECK_EQ_INT(tm_append(s, &m, 42), MV_OK);
    CHECK(tm_answers_ok(s, &m));
    CHECK_EQ_INT(tm_problems(s), 0);

    /* The rest, then the drop of the old index */
    CHECK_EQ_INT(mv_store_migrate_step(s, 0, &more), MV_OK);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(tm_int(s, TM_OLD_EXISTS), 0);
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM meta WHERE key = 'fts_moved'"), 0);
    CHECK_EQ_INT(mv_store_migration(s, &st), MV_OK);
    CHECK_EQ_INT(st.fts_moving, 0);
    CHECK_EQ_INT(st.fts_rows_left, 0);
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), tm_int(s, "SELECT count(*) FROM bodies"));
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), 39);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "INSERT INTO fts(fts) VALUES('integrity-check')"),
                 SQLITE_OK);
    CHECK(tm_answers_ok(s, &m));
    CHECK_EQ_INT(tm_problems(s), 0);
    CHECK_EQ_INT(mv_store_migrate_step(s, 0, &more), MV_OK); /* nothing left: a no-op */
    CHECK_EQ_INT(more, 0);
    mv_store_close(&s);

    /* The next open migrates nothing */
    CHECK_EQ_INT(tm_open("steps", &s), MV_OK);
    CHECK_EQ_INT(mv_store_migration(s, &st), MV_OK);
    CHECK_EQ_INT(st.migrated_from, 0);
    CHECK_EQ_INT(st.fts_moving, 0);
    mv_store_close(&s);
}

/* A search prepared while the old index exists, whose first step comes after another handle
 * ended the move (and dropped the old index), still answers. */
static void test_move_ends_under_a_search(void)
{
    struct model m;
    mv_store *s = NULL, *twin = NULL;
    CHECK_EQ_INT(tm_make_v8("race", 20, &m), MV_OK);
    CHECK_EQ_INT(tm_open("race", &s), MV_OK);
    CHECK_EQ_INT(mv_store_open_twin(s, &twin), MV_OK);
    struct mv_search_query q;
    tm_query(Q_ALPHA, &q);
    mv_search *it = NULL;
    CHECK_EQ_INT(mv_search_begin(s, &q, &it), MV_OK);
    int more = 1;
    CHECK_EQ_INT(mv_store_migrate_step(twin, 0, &more), MV_OK);
    CHECK_EQ_INT(more, 0);
    char got[512], want[512];
    int rows = tm_run(it, got, sizeof got);
    if (rows < 0) {
        fprintf(stderr, "  search: %s\n", mv_store_errmsg(s));
    }
    mv_search_end(&it);
    tm_expected(&m, Q_ALPHA, want, sizeof want);
    CHECK_EQ_INT(rows, 6);
    CHECK(strcmp(got, want) == 0);
    CHECK(tm_answers_ok(s, &m));
    /* the first handle finds the move done */
    CHECK_EQ_INT(mv_store_migrate_step(s, 0, &more), MV_OK);
    CHECK_EQ_INT(more, 0);
    mv_store_close(&twin);
    mv_store_close(&s);
}

/* The move ended by another handle between mv_search_begin's look for the old index and its
 * prepare: a trace callback on the searching handle runs the twin's last move step when the
 * look's statement ends, and the search must still answer. (The prepare then succeeds on the
 * handle's cached schema, which still has the old index; the first step's re-prepare fails,
 * "no such table", and mv_search_next's retry without it answers. mv_search_begin's own
 * retry is for a handle whose schema was read after the drop; with the cache it was not
 * reached here.) Then a search prepared, and a schema change of no concern to it by the twin
 * before its first step (SQLITE_SCHEMA, SQLite's re-prepare): the same answers. */
struct tm_race {
    mv_store *twin;
    int fired;
    int step_rc;
};

static int tm_race_trace(unsigned type, void *arg, void *p, void *x)
{
    (void)x;
    struct tm_race *r = arg;
    const char *sql = sqlite3_sql((sqlite3_stmt *)p);
    if (type == SQLITE_TRACE_PROFILE && !r->fired && sql != NULL &&
        strstr(sql, "FROM sqlite_schema WHERE type = 'table'") != NULL) {
        r->fired = 1;
        int more = 1;
        r->step_rc = mv_store_migrate_step(r->twin, 0, &more);
        r->step_rc = r->step_rc == MV_OK && more ? MV_ERROR : r->step_rc;
    }
    return 0;
}

static void test_move_ends_before_search_prepare(void)
{
    struct model m;
    mv_store *s = NULL, *twin = NULL;
    CHECK_EQ_INT(tm_make_v8("race2", 20, &m), MV_OK);
    CHECK_EQ_INT(tm_open("race2", &s), MV_OK);
    CHECK_EQ_INT(mv_store_open_twin(s, &twin), MV_OK);
    if (s == NULL || twin == NULL) {
        mv_store_close(&twin);
        mv_store_close(&s);
        return;
    }
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM sqlite_schema WHERE name = 'fts_old'"), 1);
    struct tm_race race = {twin, 0, MV_ERROR};
    CHECK_EQ_INT(sqlite3_trace_v2(mv_store_db(s), SQLITE_TRACE_PROFILE, tm_race_trace, &race),
                 SQLITE_OK);
    struct mv_search_query q;
    tm_query(Q_ALPHA, &q);
    mv_search *it = NULL;
    int rc = mv_search_begin(s, &q, &it);
    if (rc != MV_OK) {
        fprintf(stderr, "  search: %s\n", mv_store_errmsg(s));
    }
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(sqlite3_trace_v2(mv_store_db(s), 0, NULL, NULL), SQLITE_OK);
    CHECK_EQ_INT(race.fired, 1);
    CHECK_EQ_INT(race.step_rc, MV_OK); /* the move ended between the look and the prepare */
    char got[512], want[512];
    int rows = it != NULL ? tm_run(it, got, sizeof got) : -1;
    mv_search_end(&it);
    tm_expected(&m, Q_ALPHA, want, sizeof want);
    CHECK_EQ_INT(rows, 6);
    CHECK(rows < 0 || strcmp(got, want) == 0);

    /* prepared, then the schema changes under it before the first step */
    CHECK_EQ_INT(mv_search_begin(s, &q, &it), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(twin), "CREATE TABLE tm_unrelated(x); "
                                            "CREATE INDEX tm_unrelated_x ON tm_unrelated(x)"),
                 SQLITE_OK);
    rows = it != NULL ? tm_run(it, got, sizeof got) : -1;
    mv_search_end(&it);
    CHECK_EQ_INT(rows, 6);
    CHECK(rows < 0 || strcmp(got, want) == 0);
    CHECK(tm_answers_ok(s, &m));
    mv_store_close(&twin);
    mv_store_close(&s);
}

/* The child's give-way function: says it is inside a batch, then waits to be killed. */
static int tm_stall(void *arg)
{
    int fd = *(int *)arg;
    char c = 'b';
    if (write(fd, &c, 1) != 1) {
        _exit(7);
    }
    for (;;) {
        pause();
    }
}

/* Kills a process in the middle of a move batch (after `before` rows moved by batches that
 * committed) and checks the store afterwards. */
static void tm_kill_in_batch(const char *name, int before)
{
    struct model m;
    CHECK_EQ_INT(tm_make_v8(name, 30, &m), MV_OK);
    int pipefd[2];
    CHECK_EQ_INT(pipe(pipefd), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        mv_store *s = NULL;
        int more = 0;
        if (tm_open(name, &s) != MV_OK ||
            (before > 0 && mv_store_migrate_step(s, (uint32_t)before, &more) != MV_OK)) {
            _exit(3);
        }
        mv_store_purge_give_way(s, tm_stall, &pipefd[1]);
        if (mv_store_migrate_step(s, 20, &more) != MV_OK) { /* stalls in its first batch */
            _exit(4);
        }
        _exit(5);
    }
    close(pipefd[1]);
    char c = 0;
    ssize_t n = read(pipefd[0], &c, 1); /* blocks until the child is inside the batch */
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(pipefd[0]);
    CHECK_EQ_INT(n, 1);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    mv_store *s = NULL;
    CHECK_EQ_INT(tm_open(name, &s), MV_OK);
    struct mv_migration_status st;
    CHECK_EQ_INT(mv_store_migration(s, &st), MV_OK);
    CHECK_EQ_INT(st.schema_version, TU_SCHEMA_VERSION);
    CHECK_EQ_INT(st.migrated_from, 0); /* the killed process's open migrated it */
    CHECK_EQ_INT(st.fts_moving, 1);
    CHECK_EQ_INT(st.fts_rows_left, 30 - before); /* nothing of the killed batch kept */
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), before);
    CHECK(tm_answers_ok(s, &m));
    CHECK_EQ_INT(tm_problems(s), 0);
    int more = 1;
    CHECK_EQ_INT(mv_store_migrate_step(s, 0, &more), MV_OK);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), 30);
    CHECK_EQ_INT(tm_int(s, TM_OLD_EXISTS), 0);
    CHECK(tm_answers_ok(s, &m));
    CHECK_EQ_INT(tm_problems(s), 0);
    mv_store_close(&s);
}

static void test_kill_in_first_batch(void)
{
    tm_kill_in_batch("killfirst", 0);
}

static void test_kill_in_later_batch(void)
{
    tm_kill_in_batch("killlater", 11);
}

/* A batch that gives way keeps nothing; the next one goes on. */
static int tm_yes(void *arg)
{
    (void)arg;
    return 1;
}

static void test_move_gives_way(void)
{
    struct model m;
    mv_store *s = NULL;
    CHECK_EQ_INT(tm_make_v8("giveway", 12, &m), MV_OK);
    CHECK_EQ_INT(tm_open("giveway", &s), MV_OK);
    mv_store_purge_give_way(s, tm_yes, NULL);
    int more = 0;
    CHECK_EQ_INT(mv_store_migrate_step(s, 5, &more), MV_EBUSY);
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), 0);
    CHECK(tm_answers_ok(s, &m));
    mv_store_purge_give_way(s, NULL, NULL);
    CHECK_EQ_INT(mv_store_migrate_step(s, 5, &more), MV_OK);
    CHECK_EQ_INT(more, 1);
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), 5);
    CHECK(tm_answers_ok(s, &m));
    mv_store_close(&s);
}

/* Every state of the drop must be a sound database: PRAGMA integrity_check says ok, and each
 * FTS5 table passes FTS5's own integrity-check (which integrity_check runs itself from SQLite
 * 3.44 on; Debian 12 has 3.40, so it is run here by name). 1 if sound (problems printed). */
static int tm_sound(mv_store *s)
{
    sqlite3 *db = mv_store_db(s);
    sqlite3_stmt *st = NULL;
    int ok = 1;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK) {
        return 0;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *line = (const char *)sqlite3_column_text(st, 0);
        if (line == NULL || strcmp(line, "ok") != 0) {
            fprintf(stderr, "  integrity_check: %s\n", line != NULL ? line : "(null)");
            ok = 0;
        }
    }
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(db,
                           "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE "
                           "'CREATE VIRTUAL TABLE%USING fts5%'",
                           -1, &st, NULL) != SQLITE_OK) {
        return 0;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        char sql[256];
        const char *name = (const char *)sqlite3_column_text(st, 0);
        snprintf(sql, sizeof sql, "INSERT INTO \"%s\"(\"%s\") VALUES('integrity-check')", name,
                 name);
        if (tu_exec(db, sql) != SQLITE_OK) {
            fprintf(stderr, "  %s: FTS5 integrity-check: %s\n", name, sqlite3_errmsg(db));
            ok = 0;
        }
    }
    sqlite3_finalize(st);
    return ok && tm_problems(s) == 0;
}

#define TM_GONE_TABLES                                                                             \
    "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'fts\\_gone\\_%' ESCAPE '\\'"
#define TM_DROP_LEFT                                                                               \
    "SELECT count(*) FROM sqlite_schema WHERE name = 'fts_old_drop' OR name LIKE "                 \
    "'fts\\_gone\\_%' ESCAPE '\\'"

static long long max_ll(long long a, long long b)
{
    return a > b ? a : b;
}

/* The rows left in the detached tables of the old index (each dropped once empty). */
static long long tm_gone_rows(mv_store *s)
{
    static const char *const tables[] = {"fts_gone_data", "fts_gone_idx", "fts_gone_content",
                                         "fts_gone_docsize"};
    long long rows = 0;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM sqlite_schema WHERE name = '%s'",
                 tables[i]);
        if (tm_int(s, sql) == 1) {
            snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", tables[i]);
            rows += tm_int(s, sql);
        }
    }
    return rows;
}

/* A store whose move is over and whose old index is about to be dropped (rows all moved). */
static void tm_moved(const char *name, int count, struct model *m, mv_store **s)
{
    CHECK_EQ_INT(tm_make_v8(name, count, m), MV_OK);
    CHECK_EQ_INT(tm_open(name, s), MV_OK);
    int more = 0;
    CHECK_EQ_INT(mv_store_migrate_step(*s, (uint32_t)count, &more), MV_OK); /* every row */
    CHECK_EQ_INT(more, 1);
}

/* The old index is freed in batches, and the database is sound between any two of them (the
 * old code deleted the rows of a virtual table's shadow tables under it: its FTS5
 * integrity-check failed after the first drop batch). */
static void test_drop_in_batches(void)
{
    struct model m;
    mv_store *s = NULL;
    tm_moved("dropsteps", 40, &m, &s);
    long long pages_moved = tm_int(s, "PRAGMA page_count");
    int more = 1, batches = 0;
    long long vtabs_max = 0;
    while (more && batches < 1000) {
        CHECK_EQ_INT(mv_store_migrate_step(s, 1, &more), MV_OK);
        batches++;
        CHECK(tm_sound(s));
        CHECK_EQ_INT(tm_int(s, TM_OLD_EXISTS), 0);
        vtabs_max = max_ll(vtabs_max, tm_int(s, "SELECT count(*) FROM sqlite_schema WHERE sql "
                                                "LIKE 'CREATE VIRTUAL TABLE%'"));
        CHECK_EQ_INT(more, tm_int(s, TM_DROP_LEFT) > 0);
        struct mv_migration_status st;
        CHECK_EQ_INT(mv_store_migration(s, &st), MV_OK);
        CHECK_EQ_INT(st.fts_moving, more);
        CHECK(tm_answers_ok(s, &m));
    }
    CHECK(batches >= 4);        /* detached, then 16 rows a batch of ~100 */
    CHECK_EQ_INT(vtabs_max, 1); /* fts alone from the first batch on */
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(tm_int(s, TM_DROP_LEFT), 0);
    CHECK(tm_int(s, "PRAGMA page_count") < pages_moved);
    mv_store_close(&s);
}

/* A process killed inside a drop batch (after some committed) leaves a sound store whose next
 * calls finish the drop; a batch that gives way deletes nothing. */
static void test_drop_killed_and_gives_way(void)
{
    struct model m;
    mv_store *s = NULL;
    tm_moved("dropkill", 40, &m, &s);
    int more = 0;
    CHECK_EQ_INT(mv_store_migrate_step(s, 1, &more), MV_OK); /* detaches */
    CHECK_EQ_INT(mv_store_migrate_step(s, 1, &more), MV_OK); /* 16 rows deleted */
    CHECK_EQ_INT(more, 1);
    long long gone = tm_gone_rows(s);
    CHECK(gone > 16);
    mv_store_purge_give_way(s, tm_yes, NULL);
    CHECK_EQ_INT(mv_store_migrate_step(s, 1, &more), MV_EBUSY);
    mv_store_purge_give_way(s, NULL, NULL);
    CHECK_EQ_INT(tm_gone_rows(s), gone);
    CHECK(tm_sound(s));
    mv_store_close(&s);

    int pipefd[2];
    CHECK_EQ_INT(pipe(pipefd), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        if (tm_open("dropkill", &s) != MV_OK || mv_store_migrate_step(s, 1, &more) != MV_OK) {
            _exit(3);
        }
        mv_store_purge_give_way(s, tm_stall, &pipefd[1]);
        if (mv_store_migrate_step(s, 1, &more) != MV_OK) { /* stalls in its first delete */
            _exit(4);
        }
        _exit(5);
    }
    close(pipefd[1]);
    char c = 0;
    ssize_t n = read(pipefd[0], &c, 1); /* blocks until the child is inside the batch */
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(pipefd[0]);
    CHECK_EQ_INT(n, 1);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    CHECK_EQ_INT(tm_open("dropkill", &s), MV_OK);
    long long left = tm_gone_rows(s);
    CHECK_EQ_INT(left, gone - 16); /* the child's first batch, not its killed one */
    struct mv_migration_status st;
    CHECK_EQ_INT(mv_store_migration(s, &st), MV_OK);
    CHECK_EQ_INT(st.fts_moving, 1);
    CHECK(tm_sound(s));
    CHECK(tm_answers_ok(s, &m));
    CHECK_EQ_INT(mv_store_migrate_step(s, 0, &more), MV_OK);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(tm_int(s, TM_DROP_LEFT), 0);
    CHECK(tm_sound(s));
    CHECK(tm_answers_ok(s, &m));
    mv_store_close(&s);
}

/* A store an earlier build left mid-drop (the old index renamed fts_old_drop, rows of its
 * shadow tables deleted under it but the two FTS5 reads to connect) is detached by the next
 * batch and freed as any other. */
static void test_drop_of_earlier_build(void)
{
    struct model m;
    mv_store *s = NULL;
    tm_moved("droplegacy", 30, &m, &s);
    static const char *const earlier_build =
        "BEGIN; ALTER TABLE fts_old RENAME TO fts_old_drop; DELETE FROM meta WHERE "
        "key = 'fts_moved'; DELETE FROM fts_old_drop_content WHERE rowid <= 10; "
        "DELETE FROM fts_old_drop_docsize WHERE rowid <= 10; DELETE FROM "
        "fts_old_drop_data WHERE rowid NOT IN (1, 10) AND rowid IN (SELECT rowid "
        "FROM fts_old_drop_data WHERE rowid NOT IN (1, 10) LIMIT 3); COMMIT";
    CHECK_EQ_INT(tu_exec(mv_store_db(s), earlier_build), SQLITE_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(tm_open("droplegacy", &s), MV_OK);
    int more = 0;
    CHECK_EQ_INT(mv_store_migrate_step(s, 1, &more), MV_OK);
    CHECK_EQ_INT(more, 1);
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM sqlite_schema WHERE name LIKE 'fts_old%'"), 0);
    CHECK_EQ_INT(tm_int(s, TM_GONE_TABLES), 4);
    CHECK(tm_sound(s));
    CHECK_EQ_INT(mv_store_migrate_step(s, 0, &more), MV_OK);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(tm_int(s, TM_DROP_LEFT), 0);
    CHECK(tm_sound(s));
    CHECK(tm_answers_ok(s, &m));
    mv_store_close(&s);
}

/* A move that fails on every batch (the old index damaged: here its content table gone)
 * does not block the repair: it drops the old index and makes the rows from the bodies
 * (the repair returned the move's error at every try, and so did maintenance). */
static void test_repair_after_failed_move(void)
{
    struct model m;
    mv_store *s = NULL;
    CHECK_EQ_INT(tm_make_v8("broken", 20, &m), MV_OK);
    CHECK_EQ_INT(tm_open("broken", &s), MV_OK);
    int more = 0;
    CHECK_EQ_INT(mv_store_migrate_step(s, 5, &more), MV_OK);
    CHECK_EQ_INT(more, 1);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "DROP TABLE fts_old_content"), SQLITE_OK);
    CHECK(mv_store_migrate_step(s, 5, &more) != MV_OK);
    struct mv_repair_report r;
    int rc = mv_store_repair(s, &r);
    if (rc != MV_OK) {
        fprintf(stderr, "  repair: %s\n", mv_store_errmsg(s));
    }
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(tm_int(s, TM_OLD_EXISTS), 0);
    CHECK_EQ_INT(tm_int(s, "SELECT count(*) FROM fts"), 20);
    CHECK(r.fts_rows_added >= 15);
    CHECK(tm_answers_ok(s, &m));
    CHECK_EQ_INT(tm_problems(s), 0);
    CHECK_EQ_INT(mv_store_migrate_step(s, 0, &more), MV_OK);
    CHECK_EQ_INT(more, 0);
    mv_store_close(&s);
}

/* A move that fails on a damaged old index does not stop the rest of mv_store_maintain: the
 * checkpoint, the measurements and the quick_check run, the run is recorded, and the call
 * says what is wrong (MV_ECORRUPT, fts_move_failed, a message naming the repair). The old
 * code returned the move's error before any other step (page_count 0, no quick_check). */
static void test_maintain_after_failed_move(void)
{
    struct model m;
    mv_store *s = NULL;
    CHECK_EQ_INT(tm_make_v8("maintainbroken", 20, &m), MV_OK);
    CHECK_EQ_INT(tm_open("maintainbroken", &s), MV_OK);
    int more = 0;
    CHECK_EQ_INT(mv_store_migrate_step(s, 5, &more), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "DROP TABLE fts_old_content"), SQLITE_OK);
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    o.flags |= MV_MAINTAIN_QUICK_CHECK | MV_MAINTAIN_NO_VACUUM;
    struct mv_maintain_report r;
    int rc = mv_store_maintain(s, &o, &r);
    CHECK_EQ_INT(rc, MV_ECORRUPT);
    CHECK_EQ_INT(r.fts_move_failed, 1);
    CHECK(strstr(mv_store_errmsg(s), "full-text move") != NULL);
    CHECK(strstr(mv_store_errmsg(s), "mailvault repair") != NULL);
    CHECK(r.page_count > 0);
    CHECK_EQ_INT(r.quick_check, MV_QUICK_CHECK_OK);
    CHECK(tm_int(s, "SELECT count(*) FROM meta WHERE key = 'ops:maintained_at'") == 1);
    /* the repair ends it, and the next maintenance is clean */
    struct mv_repair_report rr;
    CHECK_EQ_INT(mv_store_repair(s, &rr), MV_OK);
    CHECK_EQ_INT(mv_store_maintain(s, &o, &r), MV_OK);
    CHECK_EQ_INT(r.fts_move_failed, 0);
    CHECK(tm_answers_ok(s, &m));
    mv_store_close(&s);
}

/* A search that fails on a damaged old index during the move says why: the retry's look for
 * the old index ran a statement that cleared the connection's error ("not an error"). */
static void test_search_error_kept(void)
{
    struct model m;
    mv_store *s = NULL;
    CHECK_EQ_INT(tm_make_v8("errmsg", 20, &m), MV_OK);
    CHECK_EQ_INT(tm_open("errmsg", &s), MV_OK);
    int more = 0;
    CHECK_EQ_INT(mv_store_migrate_step(s, 5, &more), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "DROP TABLE fts_old_content"), SQLITE_OK);
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    q.text_contains = "tagalpha";
    mv_search *it = NULL;
    struct mv_message_info info;
    int rc = mv_search_begin(s, &q, &it);
    if (rc == MV_OK) {
        while ((rc = mv_search_next(it, &info)) == 1) {
        }
        mv_search_end(&it);
    }
    CHECK(rc < 0);
    CHECK(strstr(mv_store_errmsg(s), "fts_old_content") != NULL);
    if (strstr(mv_store_errmsg(s), "fts_old_content") == NULL) {
        fprintf(stderr, "  search: rc %d: %s\n", rc, mv_store_errmsg(s));
    }
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_move_in_steps);
    TEST(test_move_ends_under_a_search);
    TEST(test_move_ends_before_search_prepare);
    TEST(test_kill_in_first_batch);
    TEST(test_kill_in_later_batch);
    TEST(test_move_gives_way);
    TEST(test_repair_after_failed_move);
    TEST(test_maintain_after_failed_move);
    TEST(test_drop_in_batches);
    TEST(test_drop_killed_and_gives_way);
    TEST(test_drop_of_earlier_build);
    TEST(test_search_error_kept);
    return th_summary();
}
