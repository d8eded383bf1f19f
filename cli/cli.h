/*
 * cli.h -- what the parts of the mailvault tool share: exit codes, limits, the password
 * buffer, and one function per command or job. The tool is built on include/mailvault.h
 * only; nothing here reaches into src/.
 *
 * EXIT CODES
 *   CLI_EXIT_OK (0) success, CLI_EXIT_ERROR (1) any failure at run time (open, password,
 *   SQL, output), CLI_EXIT_USAGE (2) a malformed command line. docs/CLI.md promises these.
 */
#ifndef MV_CLI_H
#define MV_CLI_H

#include "mailvault.h"

#include <stddef.h>
#include <stdio.h>

#define CLI_EXIT_OK    0
#define CLI_EXIT_ERROR 1
#define CLI_EXIT_USAGE 2

/* The longest password accepted from any source, in bytes (after stripping the newline). */
#define CLI_PASSWORD_BYTES_MAX 4096

/* Where the password lives between reading it and handing it to mv_db_open(): a malloc'd
 * buffer of CLI_PASSWORD_BYTES_MAX + 3 bytes (room to detect an overlong input), wiped and
 * freed by cli_password_wipe(). */
struct cli_password {
    char *bytes;
    size_t size_bytes;
};

/* ---- main.c ---- */

/* "mailvault: <message>" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- cli_password.c ---- */

/* Fills pw from, in this order: password_file (path, or "-" for stdin) if not NULL; the
 * environment variable MAILVAULT_PASSWORD; a prompt on the terminal if stdin is one (asked
 * twice, and the two must match, if confirm is non-zero). Refuses an empty password and one
 * longer than CLI_PASSWORD_BYTES_MAX. Returns CLI_EXIT_OK, or CLI_EXIT_ERROR after printing
 * the reason; on failure pw holds nothing (no buffer, nothing to wipe). */
int cli_password_read(const char *password_file, int confirm, struct cli_password *pw);

/* Wipes (OPENSSL_cleanse) and frees the buffer; safe to call twice or on an empty pw. */
void cli_password_wipe(struct cli_password *pw);

/* ---- cli_tty.c ---- */

/* Prompts on the controlling terminal (/dev/tty, else stdin + stderr) with echo off and reads
 * one line into buf (at most capacity_bytes; the newline is not stored). The terminal's
 * settings are restored afterwards, also when a signal ends the program mid-prompt.
 * Returns CLI_EXIT_OK with *length_out set, or CLI_EXIT_ERROR after printing the reason
 * (including a line longer than capacity_bytes). */
int cli_tty_read_password(const char *prompt, char *buf, size_t capacity_bytes, size_t *length_out);

/* ---- cli_output.c ---- */

/* Prints the current row of stmt to out as tab-separated values and a newline: NULL as an
 * empty field, BLOB as lowercase hex, everything else as sqlite3_column_text() gives it.
 * Returns 0, or -1 if out reports a write error. */
int cli_output_row(FILE *out, sqlite3_stmt *stmt);

/* ---- cli_sql_options.c ---- */

struct cli_sql_options {
    struct mv_db_options db;   /* cipher, kdf_iter, legacy, flags for mv_db_open() */
    const char *password_file; /* --password-file, or NULL */
    const char *path;          /* DBFILE */
    char **sql;                /* the SQL arguments, in order */
    int sql_count;
};

/* Parses the arguments after "sql". Returns CLI_EXIT_OK, CLI_EXIT_USAGE after printing the
 * problem, or -1 if --help was asked for (usage already printed to stdout). */
int cli_sql_options_parse(int argc, char **argv, struct cli_sql_options *opts);

/* The usage text of the sql command. */
void cli_sql_options_usage(FILE *out);

/* ---- cli_sql.c ---- */

/* `mailvault sql ...`: argv[0] is "sql". Returns a CLI_EXIT_* code. */
int cli_sql_main(int argc, char **argv);

#endif /* MV_CLI_H */
