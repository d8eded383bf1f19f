/*
 * main.c -- the mailvault command-line tool: command dispatch, usage, `version`.
 *
 * USAGE
 *   mailvault help | --help | -h     this text, on stdout, exit 0
 *   mailvault version | --version    versions of mailvault, SQLite and OpenSSL
 *   mailvault sql [OPTIONS] DBFILE SQL...
 *
 * IMPLEMENTATION NOTES
 *   Each command is a cli_<command>_main(argc, argv) that returns a CLI_EXIT_* code; this
 *   file only picks one. With no arguments the usage goes to stderr and the exit code is
 *   CLI_EXIT_USAGE, as for an unknown command.
 */
#include "cli.h"

#include <openssl/crypto.h>
#include <stdarg.h>
#include <string.h>

void cli_error(const char *fmt, ...)
{
    fputs("mailvault: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void cli_usage(FILE *out)
{
    fputs("usage: mailvault COMMAND [ARGS...]\n"
          "\n"
          "Commands:\n"
          "  sql       run SQL on an encrypted database and print the rows as TSV\n"
          "  version   print the versions of mailvault, SQLite and OpenSSL\n"
          "  help      print this text\n"
          "\n",
          out);
    cli_sql_options_usage(out);
}

static int cli_version_main(void)
{
    printf("mailvault %s\n", mv_version());
    printf("SQLite %s\n", sqlite3_libversion());
    printf("%s\n", OpenSSL_version(OPENSSL_VERSION));
    if (fflush(stdout) != 0) {
        cli_error("cannot write to standard output");
        return CLI_EXIT_ERROR;
    }
    return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        cli_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *command = argv[1];
    if (strcmp(command, "help") == 0 || strcmp(command, "--help") == 0 ||
        strcmp(command, "-h") == 0) {
        cli_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(command, "version") == 0 || strcmp(command, "--version") == 0) {
        return cli_version_main();
    }
    if (strcmp(command, "sql") == 0) {
        return cli_sql_main(argc - 1, argv + 1);
    }
    cli_error("unknown command '%s' (try 'mailvault help')", command);
    return CLI_EXIT_USAGE;
}
