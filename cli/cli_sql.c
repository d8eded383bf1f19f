/*
 * cli_sql.c -- `mailvault sql`: open an encrypted database and run SQL on it.
 *
 * USAGE
 *   mailvault sql --create --password-file pw var/mail.db 'CREATE TABLE t(x)' \
 *                 'INSERT INTO t VALUES (1); SELECT * FROM t'
 *
 * IMPLEMENTATION NOTES
 *   A missing DBFILE without --create is reported before any password is asked for.
 *   The password buffer is wiped right after mv_db_open(), on success and on failure.
 *   Each SQL argument may hold several statements: they are prepared one at a time with
 *   sqlite3_prepare_v2() and its tail pointer, and run in order; the first failure stops
 *   everything (statements already run stay run: there is no implicit transaction).
 *   A failing statement is reported with sqlite3_errmsg() and, when the encrypting VFS has
 *   more to say (a page that failed authentication), its message in parentheses.
 */
#include "cli.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* The exit code for an SQLite result code of a statement (the database is open: its own
 * open failing is mv_db_open's code, cli_exit_code): a bad statement is bad input data. */
static int cli_sql_exit(int sqlite_rc)
{
    if (sqlite_rc == SQLITE_IOERR_DATA) {
        return CLI_EXIT_DATA; /* a page failed authentication: damaged, not unreadable */
    }
    switch (sqlite_rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_FULL:
        return CLI_EXIT_TEMPFAIL;
    case SQLITE_NOTADB:
    case SQLITE_AUTH:
    case SQLITE_PERM:
    case SQLITE_READONLY:
        return CLI_EXIT_NOPERM;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
        /* a file a statement needed (an ATTACHed database, a temp file): the database
         * itself is open, so not 66 (EX_NOINPUT: "DBFILE is missing"), which was said */
        return CLI_EXIT_IOERR;
    case SQLITE_NOMEM:
        return CLI_EXIT_OSERR;
    default:
        return CLI_EXIT_DATA; /* syntax, constraint, corrupt, mismatch, too big ... */
    }
}

/* Reports the connection's last error. Returns its exit code (cli_sql_exit()). */
static int cli_sql_fail(sqlite3 *db)
{
    const char *vfs_message = mv_db_vfs_errmsg(db);
    const char *message = sqlite3_errmsg(db);
    if (vfs_message != NULL) {
        cli_error("%s (%s)", message, vfs_message);
    } else {
        cli_error("%s", message);
    }
    return cli_sql_exit(sqlite3_extended_errcode(db));
}

static int cli_sql_open(const struct cli_sql_options *opts, sqlite3 **db_out)
{
    struct cli_password pw = {NULL, 0};
    int rc = cli_password_read(opts->password_file, (opts->db.flags & MV_DB_CREATE) != 0, &pw);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    char *errmsg = NULL;
    int mv_rc = mv_db_open(opts->path, pw.bytes, pw.size_bytes, &opts->db, db_out, &errmsg);
    cli_password_wipe(&pw);
    if (mv_rc != MV_OK) {
        /* An empty detail says nothing: fall back to the code's static text. */
        int has_detail = errmsg != NULL && errmsg[0] != '\0';
        cli_error("%s", has_detail ? errmsg : mv_strerror(mv_rc));
        sqlite3_free(errmsg);
        return cli_exit_code(mv_rc);
    }
    return CLI_EXIT_OK;
}

/* The warning for files that have no integrity protection (the busy timeout is set by
 * mv_db_open, from the options). */
static int cli_sql_prepare_connection(sqlite3 *db, const char *path)
{
    struct mv_db_info info;
    if (mv_db_info(db, &info) == MV_OK && info.cipher == MV_CIPHER_AES256CBC) {
        cli_error("warning: %s uses the legacy aes256cbc cipher (no salt, no integrity "
                  "protection); upgrade it with `mailvault passwd --cipher chacha20`",
                  path);
    }
    return CLI_EXIT_OK;
}

/* Steps stmt to its end, printing each row. */
static int cli_sql_step_all(sqlite3 *db, sqlite3_stmt *stmt)
{
    for (;;) {
        int rc = sqlite3_step(stmt);
        if (rc == SQLITE_DONE) {
            return CLI_EXIT_OK;
        }
        if (rc != SQLITE_ROW) {
            return cli_sql_fail(db);
        }
        int out = cli_output_row(stdout, stmt);
        if (out == -2) {
            cli_error("out of memory printing a row");
            return CLI_EXIT_OSERR;
        }
        if (out != 0) {
            int e = errno;
            cli_error("cannot write to standard output: %s", strerror(e));
            return cli_exit_errno(e, CLI_EXIT_IOERR);
        }
    }
}

/* Runs every statement in one SQL argument, in order. */
static int cli_sql_run(sqlite3 *db, const char *sql)
{
    const char *next = sql;
    while (*next != '\0') {
        sqlite3_stmt *stmt = NULL;
        const char *tail = NULL;
        if (sqlite3_prepare_v2(db, next, -1, &stmt, &tail) != SQLITE_OK) {
            return cli_sql_fail(db);
        }
        int rc = stmt != NULL ? cli_sql_step_all(db, stmt) : CLI_EXIT_OK;
        sqlite3_finalize(stmt);
        if (rc != CLI_EXIT_OK) {
            return rc;
        }
        if (tail == NULL || tail == next) {
            break; /* only whitespace or comments were left */
        }
        next = tail;
    }
    return CLI_EXIT_OK;
}

static int cli_sql_run_all(sqlite3 *db, const struct cli_sql_options *opts)
{
    int rc = cli_sql_prepare_connection(db, opts->path);
    for (int i = 0; rc == CLI_EXIT_OK && i < opts->sql_count; i++) {
        rc = cli_sql_run(db, opts->sql[i]);
    }
    if (fflush(stdout) != 0 && rc == CLI_EXIT_OK) {
        int e = errno;
        cli_error("cannot write to standard output: %s", strerror(e));
        rc = cli_exit_errno(e, CLI_EXIT_IOERR);
    }
    return rc;
}

int cli_sql_main(int argc, char **argv)
{
    struct cli_sql_options opts;
    int rc = cli_sql_options_parse(argc, argv, &opts);
    if (rc != CLI_EXIT_OK) {
        return rc < 0 ? CLI_EXIT_OK : rc; /* rc < 0: --help, already printed */
    }
    struct stat st;
    if (!(opts.db.flags & MV_DB_CREATE) && stat(opts.path, &st) != 0 && errno == ENOENT) {
        cli_error("%s: no such database", opts.path);
        return CLI_EXIT_NOINPUT;
    }
    sqlite3 *db = NULL;
    rc = cli_sql_open(&opts, &db);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    rc = cli_sql_run_all(db, &opts);
    if (sqlite3_close(db) != SQLITE_OK && rc == CLI_EXIT_OK) {
        rc = cli_sql_fail(db);
    }
    return rc;
}
