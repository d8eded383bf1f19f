/*
 * cli_sql_options.c -- the command line of `mailvault sql`.
 *
 * USAGE
 *   mailvault sql [--cipher NAME] [--kdf-iter N] [--legacy N] [--password-file FILE]
 *                 [--create] [--readonly] [--] DBFILE SQL...
 *
 * IMPLEMENTATION NOTES
 *   Options come before DBFILE; "--" ends them early (for a DBFILE that starts with '-').
 *   Everything after DBFILE is SQL, even if it starts with '-' (an SQL comment may).
 *   Options with a value take it as the next argument or after '=' (--cipher=sqlcipher).
 *   There is deliberately no option that takes the password itself: argv is visible to
 *   every user of the machine through /proc.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A server's checkpoint or WAL recovery is waited for this long (docs/CLI.md). */
#define CLI_SQL_BUSY_TIMEOUT_MS 30000

/* Every option of `sql`, for the parser and the help alike. */
static const struct cli_option_def cli_sql_option_defs[] = {
    {"--cipher", "NAME", "chacha20 (new files' default), aes256cbc, sqlcipher"},
    {"--kdf-iter", "N", "KDF iterations (default 0: the cipher's)"},
    {"--legacy", "N", "sqlcipher only: 4 for files made by SQLCipher 4"},
    {"--password-file", "FILE", "read the password from FILE ('-': stdin)"},
    {"--create", NULL, "create DBFILE if it does not exist"},
    {"--readonly", NULL, "open read-only"},
    {"-h, --help", NULL, "print this help"},
};
#define CLI_SQL_OPTION_COUNT (sizeof cli_sql_option_defs / sizeof cli_sql_option_defs[0])

void cli_sql_options_usage(FILE *out)
{
    fputs("usage: mailvault sql [OPTIONS] [--] DBFILE SQL...\n"
          "\n"
          "Runs each SQL argument (one or more statements) on the encrypted database DBFILE\n"
          "and prints result rows as tab-separated values (NULL empty, BLOB as hex).\n"
          "An existing file's cipher is recognised without --cipher.\n"
          "\n"
          "Options:\n",
          out);
    for (size_t i = 0; i < CLI_SQL_OPTION_COUNT; i++) {
        cli_args_print_option(out, &cli_sql_option_defs[i]);
    }
    fputs("\n"
          "Password: --password-file, else $MAILVAULT_PASSWORD, else a prompt on the\n"
          "terminal. Exit status: 0 success, 1 error, 2 usage error.\n",
          out);
}

/* Parses a decimal number in [0, max]; returns 0 or -1. */
static int cli_parse_unsigned(const char *text, unsigned long max, unsigned long *value_out)
{
    if (text[0] < '0' || text[0] > '9') {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (errno != 0 || *end != '\0' || value > max) {
        return -1;
    }
    *value_out = value;
    return 0;
}

/* Applies one option that takes a value. Returns CLI_EXIT_OK or CLI_EXIT_USAGE. */
static int cli_sql_option_value(const char *name, const char *value, struct cli_sql_options *opts)
{
    unsigned long number = 0;
    if (strcmp(name, "--cipher") == 0) {
        if (mv_cipher_from_name(value, &opts->db.cipher) != MV_OK) {
            cli_error("unknown cipher '%s' (use chacha20, aes256cbc or sqlcipher)", value);
            return CLI_EXIT_USAGE;
        }
    } else if (strcmp(name, "--kdf-iter") == 0) {
        if (cli_parse_unsigned(value, MV_KDF_ITER_MAX, &number) != 0) {
            cli_error("--kdf-iter: '%s' is not a number from 0 to %lu", value,
                      (unsigned long)MV_KDF_ITER_MAX);
            return CLI_EXIT_USAGE;
        }
        opts->db.kdf_iter = (uint32_t)number;
    } else if (strcmp(name, "--legacy") == 0) {
        if (cli_parse_unsigned(value, 4, &number) != 0 || (number != 0 && number != 4)) {
            cli_error("--legacy: '%s' is not supported (0, or 4 for SQLCipher 4 files)", value);
            return CLI_EXIT_USAGE;
        }
        opts->db.legacy = (int)number;
    } else {
        opts->password_file = value;
    }
    return CLI_EXIT_OK;
}

static int cli_sql_option_takes_value(const char *name)
{
    for (size_t i = 0; i < CLI_SQL_OPTION_COUNT; i++) {
        if (cli_sql_option_defs[i].arg != NULL && strcmp(name, cli_sql_option_defs[i].name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Handles argv[*index], an option; advances *index past its value if it takes one.
 * Returns CLI_EXIT_OK, CLI_EXIT_USAGE, or -1 for --help. */
static int cli_sql_option(int argc, char **argv, int *index, struct cli_sql_options *opts)
{
    const char *arg = argv[*index];
    if (strcmp(arg, "--create") == 0) {
        opts->db.flags |= MV_DB_CREATE;
        return CLI_EXIT_OK;
    }
    if (strcmp(arg, "--readonly") == 0) {
        opts->db.flags |= MV_DB_READONLY;
        return CLI_EXIT_OK;
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
        cli_sql_options_usage(stdout);
        return -1;
    }
    char name[32];
    const char *equals = strchr(arg, '=');
    size_t name_length = equals != NULL ? (size_t)(equals - arg) : strlen(arg);
    if (name_length >= sizeof name) {
        name_length = sizeof name - 1; /* too long for any option: rejected below */
    }
    memcpy(name, arg, name_length);
    name[name_length] = '\0';
    if (!cli_sql_option_takes_value(name)) {
        cli_error("sql: unknown option '%s' (try 'mailvault sql --help')", arg);
        return CLI_EXIT_USAGE;
    }
    if (equals != NULL) {
        return cli_sql_option_value(name, equals + 1, opts);
    }
    if (*index + 1 >= argc) {
        cli_error("sql: option %s needs a value", name);
        return CLI_EXIT_USAGE;
    }
    *index += 1;
    return cli_sql_option_value(name, argv[*index], opts);
}

int cli_sql_options_parse(int argc, char **argv, struct cli_sql_options *opts)
{
    static const struct mv_db_options db_defaults = MV_DB_OPTIONS_INIT;
    memset(opts, 0, sizeof *opts);
    opts->db = db_defaults;
    opts->db.busy_timeout_ms = CLI_SQL_BUSY_TIMEOUT_MS;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        int rc = cli_sql_option(argc, argv, &i, opts);
        if (rc != CLI_EXIT_OK) {
            return rc;
        }
    }
    if (i >= argc) {
        cli_error("sql: no DBFILE given (try 'mailvault sql --help')");
        return CLI_EXIT_USAGE;
    }
    opts->path = argv[i++];
    if (i >= argc) {
        cli_error("sql: no SQL given (try 'mailvault sql --help')");
        return CLI_EXIT_USAGE;
    }
    if ((opts->db.flags & MV_DB_CREATE) && (opts->db.flags & MV_DB_READONLY)) {
        cli_error("sql: --create and --readonly cannot be used together");
        return CLI_EXIT_USAGE;
    }
    opts->sql = argv + i;
    opts->sql_count = argc - i;
    return CLI_EXIT_OK;
}
