/*
 * test_crash.c -- a writer killed with SIGKILL at random points, many times, in rollback and
 * WAL mode. After every kill the database must open, pass integrity_check, hold every
 * transaction the writer reported committed, and hold only whole transactions.
 *
 * The writer (a forked child) commits transactions of TXN_ROWS rows with consecutive ids,
 * some rows large enough for overflow pages, with a tiny page cache so uncommitted pages
 * spill into the database (hot journals) or the WAL, and reports each committed id through
 * a pipe only after COMMIT returned.
 */
#include "harness.h"
#include "testutil.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TXN_ROWS       7
#define KILLS_PER_MODE 25

static const char *const PW = "crash-test-password";

static uint32_t crash_rng = 0x9e3779b9u;

static uint32_t crash_next(void)
{
    /* xorshift32: a fixed sequence, so a failure can be replayed. */
    crash_rng ^= crash_rng << 13;
    crash_rng ^= crash_rng >> 17;
    crash_rng ^= crash_rng << 5;
    return crash_rng;
}

/* The child: writes until killed. Never returns. */
static void writer(const char *path, const char *mode, int fd)
{
    sqlite3 *db = NULL;
    if (tu_open(path, PW, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db) != MV_OK) {
        _exit(3);
    }
    char sql[256];
    snprintf(sql, sizeof sql,
             "PRAGMA journal_mode=%s; PRAGMA synchronous=NORMAL; PRAGMA cache_size=3;"
             "PRAGMA wal_autocheckpoint=20; PRAGMA busy_timeout=5000;"
             "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, txn INTEGER, body BLOB)",
             mode);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        _exit(4);
    }
    long long next = tu_int(db, "SELECT coalesce(max(id), 0) + 1 FROM t");
    sqlite3_stmt *ins = NULL;
    sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?, ?, randomblob(?))", -1, &ins, NULL);
    for (long long txn = next;; txn += TXN_ROWS) {
        sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        for (int i = 0; i < TXN_ROWS; i++) {
            sqlite3_bind_int64(ins, 1, txn + i);
            sqlite3_bind_int64(ins, 2, txn);
            sqlite3_bind_int(ins, 3, (i % 3 == 0) ? 9000 : 300);
            sqlite3_step(ins);
            sqlite3_reset(ins);
        }
        sqlite3_exec(db, "UPDATE t SET body = randomblob(200) WHERE id % 13 = 0 AND id < 200", NULL,
                     NULL, NULL);
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            _exit(5);
        }
        long long last = txn + TXN_ROWS - 1;
        if (write(fd, &last, sizeof last) != (ssize_t)sizeof last) {
            _exit(6);
        }
    }
}

/* Kills a writer a random moment after its first commit; returns the last id it reported
 * committed. */
static long long run_and_kill(const char *path, const char *mode)
{
    int fds[2];
    if (pipe(fds) != 0) {
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        writer(path, mode, fds[1]);
    }
    close(fds[1]);
    /* The kill lands inside the writer's work, not in its start-up: first its first commit
     * (waited for with a generous deadline: a loaded machine under ASan starts slowly), then
     * a random delay of up to a few transactions. */
    long long acked = 0, v;
    struct pollfd pfd = {fds[0], POLLIN, 0};
    if (poll(&pfd, 1, 60000) == 1 && read(fds[0], &v, sizeof v) == (ssize_t)sizeof v) {
        acked = v;
    }
    struct timespec delay = {0, (long)(crash_next() % 40) * 1000000L};
    nanosleep(&delay, NULL);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    while (read(fds[0], &v, sizeof v) == (ssize_t)sizeof v) {
        acked = v;
    }
    close(fds[0]);
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
        fprintf(stderr, "  writer exited early: status %d\n", status);
        return -1;
    }
    return acked;
}

/* 1 if the database is intact, holds ids 1..acked, and only whole transactions. */
static int verify(const char *path, long long acked, long long *rows_out)
{
    sqlite3 *db = NULL;
    if (tu_open(path, PW, MV_CIPHER_AUTO, 0, &db) != MV_OK) {
        fprintf(stderr, "  cannot open after the kill\n");
        return 0;
    }
    long long ok = tu_int(db, "SELECT count(*) FROM pragma_integrity_check "
                              "WHERE integrity_check='ok'");
    long long rows = tu_int(db, "SELECT count(*) FROM t");
    long long max_id = tu_int(db, "SELECT coalesce(max(id), 0) FROM t");
    long long partial = tu_int(db, "SELECT count(*) FROM (SELECT txn, count(*) AS n FROM t "
                                   "GROUP BY txn HAVING n != 7)");
    sqlite3_close(db);
    *rows_out = rows;
    int good = ok == 1 && rows == max_id && max_id >= acked && partial == 0;
    if (!good) {
        fprintf(stderr,
                "  after kill: integrity %lld, rows %lld, max id %lld, acked %lld, "
                "partial txns %lld\n",
                ok, rows, max_id, acked, partial);
    }
    return good;
}

static void crash_mode(const char *mode)
{
    char name[64];
    snprintf(name, sizeof name, "crash-%s.db", mode);
    char *path = tu_path(name);
    tu_remove_db(path);
    int failures = 0;
    long long rows = 0, total_acked = 0;
    int left_behind = 0; /* kills that left a journal or WAL to recover */
    char side[1100];
    snprintf(side, sizeof side, "%s%s", path, strcmp(mode, "WAL") == 0 ? "-wal" : "-journal");
    /* The file and its table exist before the first kill: the subject is recovering
     * committed transactions, not a kill inside the creation of the file (a journal that
     * would empty the database is refused by the VFS as a possible forgery), which under
     * load the first kill could otherwise hit. */
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db), MV_OK);
    char sql[160];
    snprintf(sql, sizeof sql,
             "PRAGMA journal_mode=%s; "
             "CREATE TABLE t(id INTEGER PRIMARY KEY, txn INTEGER, body BLOB)",
             mode);
    int created = tu_exec(db, sql);
    sqlite3_close(db);
    CHECK_EQ_INT(created, SQLITE_OK);
    for (int i = 0; i < KILLS_PER_MODE; i++) {
        long long acked = run_and_kill(path, mode);
        left_behind += tu_file_size(side) > 0;
        if (acked < 0 || !verify(path, acked, &rows)) {
            failures++;
            break;
        }
        total_acked = acked > total_acked ? acked : total_acked; /* a kill may beat any ack */
    }
    printf("  %s: %d kills (%d left a journal or WAL behind), %lld rows committed and found\n",
           mode, KILLS_PER_MODE, left_behind, rows);
    CHECK_EQ_INT(failures, 0);
    CHECK(left_behind > KILLS_PER_MODE / 2);
    CHECK(total_acked > 0);
    tu_remove_db(path);
}

static void test_sigkill_rollback_journal(void)
{
    crash_mode("DELETE");
}

static void test_sigkill_wal(void)
{
    crash_mode("WAL");
}

/* A process that ends right after COMMIT returned (no close: as a SIGKILL after the
 * acknowledgement) must leave the transaction in the database. The transaction spills pages
 * into the WAL (tiny cache) and writes them again, so SQLite overwrites frames in place and
 * rewrites the checksums of the frames after them at commit; WAL mode, synchronous=NORMAL
 * (no sync at commit, as the store runs). */
static void test_wal_commit_then_exit(void)
{
    char *path = tu_path("exit-after-commit.db");
    tu_remove_db(path);
    pid_t pid = fork();
    if (pid == 0) {
        sqlite3 *db = NULL;
        if (tu_open(path, PW, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db) != MV_OK ||
            tu_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                        "PRAGMA cache_size=3; PRAGMA wal_autocheckpoint=0; "
                        "CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB)") != SQLITE_OK ||
            tu_exec(db, "BEGIN; "
                        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                        "WHERE x < 200) INSERT INTO t SELECT x, randomblob(600) FROM c; "
                        "UPDATE t SET body = randomblob(600); "
                        "UPDATE t SET body = randomblob(700) WHERE id % 2 = 0; "
                        "COMMIT") != SQLITE_OK) {
            _exit(1);
        }
        _exit(0); /* committed and acknowledged; nothing closed */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db), MV_OK);
    long long rows = tu_int(db, "SELECT count(*) FROM t");
    long long ok = tu_int(db, "SELECT count(*) FROM pragma_integrity_check "
                              "WHERE integrity_check = 'ok'");
    sqlite3_close(db);
    CHECK_EQ_INT(ok, 1);
    CHECK_EQ_INT(rows, 200);
    tu_remove_db(path);
}

/* A process that ends inside a transaction that spilled pages into the WAL and then wrote
 * some of them again (overwritten in place, their checksums not yet rewritten) leaves a
 * WAL whose tail recovery drops: the database opens, with every committed transaction and
 * nothing of the unfinished one. */
static void test_wal_exit_inside_spilled_transaction(void)
{
    char *path = tu_path("exit-inside-txn.db");
    tu_remove_db(path);
    pid_t pid = fork();
    if (pid == 0) {
        sqlite3 *db = NULL;
        if (tu_open(path, PW, MV_CIPHER_CHACHA20, MV_DB_CREATE, &db) != MV_OK ||
            tu_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                        "PRAGMA cache_size=3; PRAGMA wal_autocheckpoint=0; "
                        "CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB); "
                        "INSERT INTO t VALUES (1, randomblob(100))") != SQLITE_OK ||
            tu_exec(db,
                    "BEGIN; "
                    "WITH RECURSIVE c(x) AS (SELECT 2 UNION ALL SELECT x + 1 FROM c "
                    "WHERE x < 200) INSERT INTO t SELECT x, randomblob(600) FROM c; "
                    "UPDATE t SET body = randomblob(600) WHERE id = 3; "
                    "WITH RECURSIVE c(x) AS (SELECT 201 UNION ALL SELECT x + 1 FROM c "
                    "WHERE x < 400) INSERT INTO t SELECT x, randomblob(600) FROM c") != SQLITE_OK) {
            _exit(1);
        }
        _exit(0); /* inside the transaction, as a SIGKILL would leave it */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(path, PW, MV_CIPHER_AUTO, 0, &db), MV_OK);
    long long rows = tu_int(db, "SELECT count(*) FROM t");
    long long ok = tu_int(db, "SELECT count(*) FROM pragma_integrity_check "
                              "WHERE integrity_check = 'ok'");
    sqlite3_close(db);
    CHECK_EQ_INT(ok, 1);
    CHECK_EQ_INT(rows, 1);
    tu_remove_db(path);
}

int main(void)
{
    if (mv_vfs_register(NULL, 0) != MV_OK) {
        return 1;
    }
    TEST(test_sigkill_rollback_journal);
    TEST(test_sigkill_wal);
    TEST(test_wal_commit_then_exit);
    TEST(test_wal_exit_inside_spilled_transaction);
    return th_summary();
}
