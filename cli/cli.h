/*
 * cli.h -- what the parts of the mailvault tool share: exit codes, limits, the password
 * buffer, and one function per command or job. The tool is built on include/mailvault.h
 * only; nothing here reaches into src/.
 *
 * EXIT CODES
 *   sysexits(3) values, as doveadm uses them, so scripts and MTAs (which defer on 75) can
 *   tell a typo from a wrong password from a busy store. One table, cli_exit_code(), turns
 *   the library's MV_E* classes into them; docs/CLI.md lists them:
 *     0  CLI_EXIT_OK         success
 *     1  CLI_EXIT_ERROR      a failure that fits no class below (MV_ERROR), or a check
 *                            that ran and found something (doctor FAIL, maintain refused)
 *     64 CLI_EXIT_USAGE      a malformed command line (EX_USAGE)
 *     65 CLI_EXIT_DATA       bad input data: a damaged store or page, a message over a
 *                            limit, an invalid address, an unsupported format (EX_DATAERR)
 *     66 CLI_EXIT_NOINPUT    an input file (password file, import source) is missing
 *     67 CLI_EXIT_NOUSER     no store for USER (EX_NOUSER)
 *     68 CLI_EXIT_NOTFOUND   no such mailbox, message or snapshot inside a store (EX_NOHOST:
 *                            doveadm's "not found")
 *     69 CLI_EXIT_UNAVAILABLE no server listens on the control socket (EX_UNAVAILABLE)
 *     71 CLI_EXIT_OSERR      out of memory, a system call that must not fail (EX_OSERR)
 *     73 CLI_EXIT_CANTCREAT  an output cannot be created, or already exists (EX_CANTCREAT)
 *     74 CLI_EXIT_IOERR      a read, write or sync failed (EX_IOERR)
 *     75 CLI_EXIT_TEMPFAIL   busy (locked beyond the timeout), disk full: try again later
 *                            (EX_TEMPFAIL; an MTA defers the message)
 *     77 CLI_EXIT_NOPERM     wrong password, not a store, permission denied (EX_NOPERM)
 *     78 CLI_EXIT_CONFIG     a bad environment setting ($MAILVAULT_*) (EX_CONFIG)
 */
#ifndef MV_CLI_H
#define MV_CLI_H

#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sysexits.h>

#define CLI_EXIT_OK          0
#define CLI_EXIT_ERROR       1
#define CLI_EXIT_USAGE       EX_USAGE
#define CLI_EXIT_DATA        EX_DATAERR
#define CLI_EXIT_NOINPUT     EX_NOINPUT
#define CLI_EXIT_NOUSER      EX_NOUSER
#define CLI_EXIT_NOTFOUND    EX_NOHOST
#define CLI_EXIT_UNAVAILABLE EX_UNAVAILABLE
#define CLI_EXIT_OSERR       EX_OSERR
#define CLI_EXIT_CANTCREAT   EX_CANTCREAT
#define CLI_EXIT_IOERR       EX_IOERR
#define CLI_EXIT_TEMPFAIL    EX_TEMPFAIL
#define CLI_EXIT_NOPERM      EX_NOPERM
#define CLI_EXIT_CONFIG      EX_CONFIG

/* The version of the --json documents; every document carries it as "format_version".
 * Raised when a member is renamed, removed or changes type (docs/CLI.md). */
#define CLI_JSON_FORMAT_VERSION 2

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

/* ---- cli_exit.c: the one mapping to exit codes ---- */

/* The exit code for an MV_E* code (MV_OK: CLI_EXIT_OK). MV_ENOTFOUND gives
 * CLI_EXIT_NOTFOUND; where "not found" means the store itself, callers say
 * CLI_EXIT_NOUSER. */
int cli_exit_code(int mv_code);
/* The exit code for an errno value from a system call on a file: ENOENT/ENOTDIR give
 * CLI_EXIT_CANTCREAT if fallback is CLI_EXIT_CANTCREAT (an output), else CLI_EXIT_NOINPUT;
 * EACCES/EPERM/EROFS CLI_EXIT_NOPERM, EIO CLI_EXIT_IOERR, ENOSPC/EDQUOT/EAGAIN/EBUSY/EINTR
 * CLI_EXIT_TEMPFAIL, ENOMEM CLI_EXIT_OSERR, anything else fallback. */
int cli_exit_errno(int errno_value, int fallback);

/* ---- cli_password.c ---- */

/* Fills pw from, in this order: password_file (path, or "-" for stdin) if not NULL; the
 * environment variable MAILVAULT_PASSWORD; a prompt on the terminal if stdin is one (asked
 * twice, and the two must match, if confirm is non-zero). Refuses an empty password and one
 * longer than CLI_PASSWORD_BYTES_MAX. Returns CLI_EXIT_OK, or CLI_EXIT_ERROR after printing
 * the reason; on failure pw holds nothing (no buffer, nothing to wipe). */
int cli_password_read(const char *password_file, int confirm, struct cli_password *pw);

/* The new password of `passwd`: new_password_file if not NULL ("-": stdin), else
 * $MAILVAULT_NEW_PASSWORD (wiped from the environment once read), else the terminal, asked
 * twice. Same limits and ownership as cli_password_read(). */
int cli_password_read_new(const char *new_password_file, struct cli_password *pw);

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
 * Returns 0, -1 if out reports a write error, or -2 if a value's text could not be allocated
 * (the row is cut short; the caller says so). */
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

/* ---- cli_args.c: the command line of the store commands ---- */

/* One command-line option: the name as typed ("--limit"), the placeholder of its value
 * ("N"; NULL: it takes none) and one line of help for --help and the manual page. */
struct cli_option_def {
    const char *name;
    const char *arg;
    const char *help;
};

/* "  --name ARG   help" on one line, as every --help lists its options. */
void cli_args_print_option(FILE *out, const struct cli_option_def *def);

/* Every option any store command knows; each command accepts a subset (a CLI_OPT() mask). */
enum cli_opt {
    CLI_OPT_ROOT,
    CLI_OPT_PASSWORD_FILE,
    CLI_OPT_MAILBOX,
    CLI_OPT_JSON,
    CLI_OPT_LIMIT,
    CLI_OPT_OUTPUT,
    CLI_OPT_FLAGS,
    CLI_OPT_SEALED,
    CLI_OPT_MAX_MESSAGE_SIZE,
    CLI_OPT_MBOX,
    CLI_OPT_SPECIAL_USE,
    CLI_OPT_ADD,
    CLI_OPT_REMOVE,
    CLI_OPT_SET,
    CLI_OPT_FROM,
    CLI_OPT_TO,
    CLI_OPT_CC,
    CLI_OPT_SUBJECT,
    CLI_OPT_MESSAGE_ID,
    CLI_OPT_TEXT,
    CLI_OPT_SINCE,
    CLI_OPT_BEFORE,
    CLI_OPT_SEEN,
    CLI_OPT_UNSEEN,
    CLI_OPT_FLAGGED,
    CLI_OPT_KEYWORD,
    CLI_OPT_LARGER,
    CLI_OPT_SMALLER,
    CLI_OPT_ALL,                  /* stats, maintain: every store under the root */
    CLI_OPT_PROMETHEUS,           /* stats */
    CLI_OPT_WITH_USER_LABELS,     /* stats --prometheus */
    CLI_OPT_VACUUM_FREE_PERCENT,  /* maintain */
    CLI_OPT_VACUUM_SLACK_PERCENT, /* maintain */
    CLI_OPT_QUICK_CHECK_DAYS,     /* maintain */
    CLI_OPT_CHANGES_KEEP_DAYS,    /* maintain */
    CLI_OPT_QUICK_CHECK,          /* maintain: run quick_check now */
    CLI_OPT_NO_VACUUM,            /* maintain */
    CLI_OPT_WAL_LIMIT,            /* doctor, maintain --all */
    CLI_OPT_KEEP,                 /* backup: snapshots kept */
    CLI_OPT_CIPHER,               /* passwd: the new cipher */
    CLI_OPT_NEW_PASSWORD_FILE,    /* passwd */
    CLI_OPT_NOTE,                 /* release: recorded in the marker */
    CLI_OPT_WAIT_SECONDS,         /* release, store export: wait for the store to close */
    CLI_OPT_CONTROL_SOCKET,       /* who, kick, release, adopt: a running server */
    CLI_OPT_FIX,                  /* doctor: remove killed imports' staging directories */
    CLI_OPT_COUNT
};
#define CLI_OPT(id) (UINT64_C(1) << (id))
/* What every command that opens a store accepts. */
#define CLI_OPTS_STORE (CLI_OPT(CLI_OPT_ROOT) | CLI_OPT(CLI_OPT_PASSWORD_FILE))
/* Returned by cli_args_parse() after printing the usage for --help. */
#define CLI_ARGS_HELP (-1)

struct cli_command_spec {
    const char *name;     /* as typed: "list", "mailbox create" */
    const char *synopsis; /* what follows "usage: mailvault " */
    uint64_t options;     /* CLI_OPT() bits accepted (--help always is) */
    int positional_min;
    int positional_max; /* -1: no upper bound */
};

struct cli_args {
    const struct cli_command_spec *spec;
    const char *value[CLI_OPT_COUNT]; /* NULL: not given; "" for options without a value */
    char **positional;                /* in order, inside argv (which parsing reorders) */
    int positional_count;
};

/* Parses argv[1..argc-1] against spec: options may come anywhere, "--" ends them, a lone
 * "-" is a positional argument, values follow as the next argument or after '='. An option
 * given twice is a usage error. Returns CLI_EXIT_OK, CLI_EXIT_USAGE (problem printed), or
 * CLI_ARGS_HELP (usage printed on stdout). argv is reordered in place. */
int cli_args_parse(int argc,
                   char **argv,
                   const struct cli_command_spec *spec,
                   struct cli_args *out);
/* Maps cli_args_parse()'s result to an exit code: CLI_ARGS_HELP is success. */
int cli_args_exit(int rc);
/* "mailvault: NAME: <problem> (try ...)" on stderr. Returns CLI_EXIT_USAGE. */
int cli_args_usage_error(const struct cli_args *args, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The option's name as typed ("--limit"). */
const char *cli_args_name(enum cli_opt id);
/* Whether the option was given. */
int cli_args_has(const struct cli_args *args, enum cli_opt id);
/* Parses a decimal number in [min, max]; *out untouched when the option is absent.
 * Returns CLI_EXIT_OK or CLI_EXIT_USAGE (printed). */
int cli_args_u64(
    const struct cli_args *args, enum cli_opt id, uint64_t min, uint64_t max, uint64_t *out);
/* Parses a YYYY-MM-DD option as the Unix time of that day's midnight UTC (1970..9999). */
int cli_args_date(const struct cli_args *args, enum cli_opt id, int64_t *out);
/* Parses a UID, a decimal number from 1 to 4294967295. Returns 0 or -1. */
int cli_args_uid(const char *text, uint32_t *uid_out);
/* Parses a decimal number in [0, max]. Returns 0 or -1. */
int cli_args_parse_u64(const char *text, uint64_t max, uint64_t *value_out);

/* ---- cli_flags.c: IMAP flag words <-> MV_FLAG_* bits and keywords ---- */

struct cli_flags {
    unsigned bits;  /* MV_FLAG_* */
    char *keywords; /* space-separated, malloc'd (NULL: none) */
    size_t keywords_size_bytes;
};

/* Adds the words of list (separated by spaces or commas): \Seen \Answered \Flagged
 * \Deleted \Draft (any case) set bits, any other word without a backslash is a keyword.
 * Returns CLI_EXIT_OK, CLI_EXIT_USAGE (unknown system flag, printed) or CLI_EXIT_ERROR. */
int cli_flags_add(struct cli_flags *flags, const char *list);
void cli_flags_free(struct cli_flags *flags);
/* The IMAP word of the n-th flag bit (n from 0), or NULL past the last. */
const char *cli_flags_word(unsigned n, unsigned *bit_out);

/* ---- cli_json.c: a small streaming JSON writer ---- */

#define CLI_JSON_DEPTH_MAX 16

struct cli_json {
    FILE *out;
    int depth;
    unsigned char count[CLI_JSON_DEPTH_MAX]; /* values written at each level (0, 1, many) */
    unsigned char is_array[CLI_JSON_DEPTH_MAX];
    int after_key;
    int error; /* nesting misuse */
};

void cli_json_init(struct cli_json *json, FILE *out);
/* cli_json_init() and the document object, with "format_version" as its first member: how
 * every --json output starts (end it with cli_json_object_end() and cli_json_finish()). */
void cli_json_document_begin(struct cli_json *json, FILE *out);
void cli_json_object_begin(struct cli_json *json);
void cli_json_object_end(struct cli_json *json);
void cli_json_array_begin(struct cli_json *json);
void cli_json_array_end(struct cli_json *json);
void cli_json_key(struct cli_json *json, const char *key);
/* A string value: NULL writes null; bytes that are not UTF-8 become \ufffd. */
void cli_json_string(struct cli_json *json, const char *text);
void cli_json_string_n(struct cli_json *json, const char *text, size_t size_bytes);
void cli_json_uint(struct cli_json *json, uint64_t value);
void cli_json_int(struct cli_json *json, int64_t value);
void cli_json_bool(struct cli_json *json, int value);
void cli_json_null(struct cli_json *json);
/* Ends the document with a newline. Returns 0, or -1 after misuse or a write error. */
int cli_json_finish(struct cli_json *json);

/* ---- cli_text.c: text for people ---- */

/* Decodes one UTF-8 sequence of s (size_bytes > 0 available). Returns its length and sets
 * *code_point, or 0 if the bytes are not well-formed UTF-8 (overlong, surrogate, > U+10FFFF,
 * truncated). */
size_t cli_text_utf8_next(const unsigned char *s, size_t size_bytes, uint32_t *code_point);
/* Prints text for a terminal: control characters (C0, DEL, C1) and bad UTF-8 become '?',
 * at most width_max characters (0: no limit; longer text ends in "~"), padded with spaces
 * to pad_width characters. Returns the characters printed. */
size_t cli_text_print(FILE *out, const char *text, size_t width_max, size_t pad_width);
/* "2024-03-01T12:00:00Z" for a Unix time. buf must hold 32 bytes. */
void cli_text_time_iso(int64_t unix_seconds, char *buf, size_t buf_size);
/* "1.5 MB" style (powers of 1000, one decimal). buf must hold 16 bytes. */
void cli_text_size(uint64_t size_bytes, char *buf, size_t buf_size);

/* ---- cli_store.c: opening a store from the command line ---- */

/* Where a store command works and how it opens the store. */
struct cli_store_target {
    char address[MV_ADDRESS_MAX + 1]; /* normalised */
    char root[MV_PATH_MAX];
    char db_path[MV_PATH_MAX];
    struct mv_store_options opts;
};

/* Validates USER (args->positional[0]) and fills target: root from --root, else
 * $MAILVAULT_ROOT, else ./var/mail; kdf_iter from $MAILVAULT_KDF_ITER (tests);
 * message_size_max from --max-message-size. Creates nothing. Returns a CLI_EXIT_* code
 * (printed). */
int cli_store_target(const struct cli_args *args, struct cli_store_target *target);
/* Whether the store file exists. If it does not and must_exist is non-zero (or it does and
 * must_exist is zero), prints why and returns CLI_EXIT_ERROR; else CLI_EXIT_OK. */
int cli_store_check(const struct cli_store_target *target, int must_exist);
/* Reads the password (--password-file, $MAILVAULT_PASSWORD, the terminal), opens the store
 * and wipes the password. Returns a CLI_EXIT_* code (printed); *out is NULL on failure. */
int cli_store_open(const struct cli_args *args,
                   struct cli_store_target *target,
                   unsigned flags,
                   mv_store **out);
/* Parses USER, checks the store exists, opens it: the three above in one. */
int cli_store_open_user(const struct cli_args *args, unsigned flags, mv_store **out);
/* Prints the store's error for code (its detail, or mv_strerror()). Returns CLI_EXIT_ERROR. */
int cli_store_fail(mv_store *store, int code);
/* Prints an errmsg buffer, or mv_strerror(code) if it is empty. Returns CLI_EXIT_ERROR. */
int cli_store_fail_msg(const char *errmsg, int code);
/* The mailbox option, or "INBOX". */
const char *cli_store_mailbox(const struct cli_args *args);
/* Flushes stdout; on a write error prints it and returns CLI_EXIT_ERROR. */
int cli_store_flush_stdout(void);
/* --root, $MAILVAULT_ROOT or ./var/mail into root (root_size bytes). A CLI_EXIT_* code. */
int cli_store_root_dir(const struct cli_args *args, char *root, size_t root_size);

/* ---- cli_control.c: a running server, through its control socket ---- */

struct cli_control {
    int fd;
    FILE *in;       /* the reading side of fd */
    char path[108]; /* the socket (a Unix socket's path limit) */
};
/* Returned by cli_control_open() when no socket was named and none answers at the root's
 * default path: there is no server; release and adopt work on the files. */
#define CLI_CONTROL_LOCAL (-2)
/* Connects to --control-socket, $MAILVAULT_CONTROL_SOCKET, else ROOT/.mailvaultd.sock
 * (see cli_control.c for when each counts as "no server"). required: who and kick, for which
 * no server is an error. CLI_EXIT_OK, CLI_CONTROL_LOCAL, or an exit code (printed). */
int cli_control_open(const struct cli_args *args,
                     const char *root,
                     int required,
                     struct cli_control *ctl);
/* Sends request (one line) and reads the reply within timeout_s per line: "* " lines go to
 * on_line (may be NULL; the line without "* " and CRLF, writable), the final OK's text to
 * final. CLI_EXIT_OK, or the exit code of the NO's response code (printed). */
int cli_control_request(struct cli_control *ctl,
                        const char *request,
                        int timeout_s,
                        void (*on_line)(void *arg, char *line),
                        void *arg,
                        char *final,
                        size_t final_size);
void cli_control_close(struct cli_control *ctl);
/* Decodes a reply value in place: %XX escapes, "-" for empty. */
void cli_control_value_decode(char *value);
/* What the server said it did for a kick, release or adopt: its final OK text, and the
 * figures of its "* kick|release USER key=value ..." data line (docs/CONTROL.md), for the
 * text and the --json output. */
struct cli_control_result {
    char socket[108]; /* the control socket that answered */
    char text[1024];  /* the final OK's text */
    int has_figures;  /* the server sent the data line (older servers do not) */
    int already;      /* release: the store was released before */
    long long duration_ms, sessions_ended, sessions_left, stores_closed;
};
/* release / adopt through a running server ("release" sends wait_ms and --note); nothing is
 * printed on success (the caller prints res). *handled is 0 when there is none (the caller
 * works on the files), else 1 and the exit code is the request's. */
int cli_control_move(const struct cli_args *args,
                     const struct cli_store_target *t,
                     const char *verb,
                     uint32_t wait_ms,
                     struct cli_control_result *res,
                     int *handled);

/* A figure of res as a JSON number, or null when the server did not send its figures. */
void cli_control_json_figure(struct cli_json *j, const struct cli_control_result *res, long long n);

/* ---- cli_outfile.c: writing a file whole or not at all ---- */

struct cli_outfile {
    int fd;                      /* where to write: the temporary file, the target, stdout */
    const char *path;            /* the name as given; NULL for stdout */
    char target[MV_PATH_MAX];    /* path with symbolic links followed */
    char temp_path[MV_PATH_MAX]; /* TARGET.XXXXXX beside it, renamed over TARGET at commit */
    int in_place;                /* target is a FIFO or device: written directly */
};

/* Opens path ("-" or NULL: stdout) for writing: a regular file (or a new one) through a
 * temporary file of mode 0600 renamed over it at commit, after following symbolic links; a
 * FIFO or device in place (never replaced); a directory is refused. Returns CLI_EXIT_OK or
 * a CLI_EXIT_* code (printed). */
int cli_outfile_open(struct cli_outfile *file, const char *path);
/* Writes all size_bytes, retrying short writes. Returns CLI_EXIT_OK or a CLI_EXIT_* code. */
int cli_outfile_write(struct cli_outfile *file, const void *bytes, size_t size_bytes);
/* fsyncs, closes and renames the temporary file into place (in place: closes). Returns a
 * CLI_EXIT_* code. */
int cli_outfile_commit(struct cli_outfile *file);
/* Closes and removes the temporary file. Safe after commit. */
void cli_outfile_abort(struct cli_outfile *file);

/* ---- cli_progress.c: a progress line on a terminal ---- */

struct cli_progress {
    int enabled;      /* stderr is a terminal */
    int64_t start_ms; /* monotonic */
    int64_t last_draw_ms;
    size_t last_width;
};

void cli_progress_init(struct cli_progress *progress);
/* Redraws at most ten times a second (always when force is non-zero). */
void cli_progress_update(struct cli_progress *progress,
                         uint64_t messages,
                         uint64_t bytes,
                         uint64_t bytes_total,
                         int force);
/* Clears the line. */
void cli_progress_finish(struct cli_progress *progress);

/* ---- cli_message_print.c: message rows for list and search ---- */

struct cli_message_printer {
    int json;
    int with_mailbox; /* human output: a MAILBOX column (search over every mailbox) */
    uint64_t rows;
    struct cli_json writer;
};

void cli_message_print_begin(struct cli_message_printer *printer, int json, int with_mailbox);
void cli_message_print_row(struct cli_message_printer *printer, const struct mv_message_info *info);
/* Ends the output and flushes stdout. Returns a CLI_EXIT_* code. */
int cli_message_print_end(struct cli_message_printer *printer);
/* Runs a search and prints up to limit rows (0: all). Returns a CLI_EXIT_* code. */
int cli_message_print_search(mv_store *store,
                             const struct mv_search_query *query,
                             uint64_t limit,
                             int json,
                             int with_mailbox);

/* ---- the store commands: argv[0] is the command name. Each returns a CLI_EXIT_* code. ---- */

int cli_init_main(int argc, char **argv);            /* cli_init.c */
int cli_info_main(int argc, char **argv);            /* cli_info.c */
int cli_deliver_main(int argc, char **argv);         /* cli_deliver.c */
int cli_import_main(int argc, char **argv);          /* cli_import.c */
int cli_export_main(int argc, char **argv);          /* cli_export.c */
int cli_mailbox_list_main(int argc, char **argv);    /* cli_mailbox.c: mailboxes */
int cli_mailbox_main(int argc, char **argv);         /* cli_mailbox.c: mailbox create|... */
int cli_message_list_main(int argc, char **argv);    /* cli_message.c: list */
int cli_message_fetch_main(int argc, char **argv);   /* cli_message.c: fetch */
int cli_message_flags_main(int argc, char **argv);   /* cli_message_edit.c: flags */
int cli_message_copy_main(int argc, char **argv);    /* cli_message_edit.c: copy, move */
int cli_message_expunge_main(int argc, char **argv); /* cli_message_edit.c: expunge */
int cli_search_main(int argc, char **argv);          /* cli_search.c */
int cli_stats_main(int argc, char **argv);           /* cli_stats.c */
int cli_maintain_main(int argc, char **argv);        /* cli_maintain.c */
int cli_check_main(int argc, char **argv);           /* cli_check.c */
int cli_repair_main(int argc, char **argv);          /* cli_repair.c */
int cli_doctor_main(int argc, char **argv);          /* cli_doctor.c */
int cli_explain_main(int argc, char **argv);         /* cli_explain.c */
int cli_backup_main(int argc, char **argv);          /* cli_backup.c */
int cli_restore_main(int argc, char **argv);         /* cli_backup.c */
int cli_passwd_main(int argc, char **argv);          /* cli_passwd.c */
int cli_release_main(int argc, char **argv);         /* cli_move.c */
int cli_who_main(int argc, char **argv);             /* cli_control.c */
int cli_kick_main(int argc, char **argv);            /* cli_control.c */
int cli_adopt_main(int argc, char **argv);           /* cli_move.c */
int cli_store_archive_main(int argc, char **argv);   /* cli_move.c: store export|import */

/* ---- cli_backup.c: progress of backup, restore and passwd ---- */

struct cli_ops_progress {
    struct cli_progress line; /* cli_progress_init()'d: enabled only on a terminal */
    const char *command;      /* "backup", "restore", "passwd" */
};
/* An mv_progress_fn (arg: struct cli_ops_progress) drawing "backup: copy 12.3/45.6 MB  27%"
 * on stderr when it is a terminal, at most ten times a second; nothing otherwise. Clear the
 * line with cli_progress_finish(&p->line). */
void cli_ops_progress(void *arg, const char *stage, uint64_t done, uint64_t total);

/* ---- cli_stats.c: what the operations commands share ---- */

/* The root of --root, $MAILVAULT_ROOT or ./var/mail into root (MV_PATH_MAX bytes), and
 * kdf_iter from $MAILVAULT_KDF_ITER, for commands that take USER or --all. Returns a
 * CLI_EXIT_* code (printed). */
int cli_ops_root(const struct cli_args *args, char *root, struct mv_store_options *opts);
/* USER or --all, exactly one. Returns CLI_EXIT_OK or CLI_EXIT_USAGE (printed). */
int cli_ops_user_or_all(const struct cli_args *args);

#endif /* MV_CLI_H */
