/*
 * main.c -- the mailvault command-line tool: command dispatch, usage, `version`.
 *
 * USAGE
 *   mailvault help | --help | -h     this text, on stdout, exit 0
 *   mailvault version | --version    versions of mailvault, SQLite and OpenSSL
 *   mailvault sql [OPTIONS] DBFILE SQL...
 *   mailvault init|deliver|import|export|mailboxes|mailbox|list|fetch|flags|copy|move|
 *             expunge|search|info USER ...          the per-user mail store (docs/CLI.md)
 *
 * IMPLEMENTATION NOTES
 *   Each command is a cli_<command>_main(argc, argv) that returns a CLI_EXIT_* code; this
 *   file only picks one from a table that also gives the usage its lines. With no
 *   arguments the usage goes to stderr and the exit code is CLI_EXIT_USAGE, as for an
 *   unknown command.
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

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} cli_commands[] = {
    {"init", cli_init_main, "create the encrypted store of USER"},
    {"deliver", cli_deliver_main, "store one message (--sealed: without the password)"},
    {"import", cli_import_main, "import an mbox, a Maildir or a folder of .eml files"},
    {"export", cli_export_main, "write a mailbox as an mbox"},
    {"mailboxes", cli_mailbox_list_main, "list the mailboxes with their counts"},
    {"mailbox", cli_mailbox_main, "create, rename, delete, (un)subscribe a mailbox"},
    {"list", cli_message_list_main, "list the messages of a mailbox, newest first"},
    {"fetch", cli_message_fetch_main, "write one message's exact bytes"},
    {"flags", cli_message_flags_main, "add, remove or set flags and keywords"},
    {"copy", cli_message_copy_main, "copy messages to another mailbox"},
    {"move", cli_message_copy_main, "move messages to another mailbox"},
    {"expunge", cli_message_expunge_main, "remove the messages flagged \\Deleted"},
    {"search", cli_search_main, "find messages by header, text, date, flags, size"},
    {"info", cli_info_main, "store statistics"},
    {"stats", cli_stats_main, "statistics of USER or --all stores (--json, --prometheus)"},
    {"maintain", cli_maintain_main, "optimize, checkpoint, VACUUM if worth it, quick_check"},
    {"check", cli_check_main, "integrity, every page's authentication, store invariants"},
    {"repair", cli_repair_main, "rebuild the full-text index, counters and reference counts"},
    {"doctor", cli_doctor_main, "the deployment checklist: OK / WARN / FAIL"},
    {"explain", cli_explain_main, "query plans of every statement the store runs"},
    {"backup", cli_backup_main, "a verified encrypted snapshot of USER into DIR (--keep N)"},
    {"restore", cli_restore_main, "verify a snapshot and swap it in for USER's store"},
    {"passwd", cli_passwd_main, "change USER's password (rekeyed copy, atomic swap)"},
    {"who", cli_who_main, "users with open stores and sessions on the running server"},
    {"kick", cli_kick_main, "end USER's IMAP sessions on the running server"},
    {"release", cli_release_main, "stop serving USER on this node (before moving it away)"},
    {"adopt", cli_adopt_main, "serve a released USER on this node again"},
    {"store", cli_store_archive_main, "export|import USER FILE: the store as one archive"},
    {"sql", cli_sql_main, "run SQL on an encrypted database and print the rows as TSV"},
};
#define CLI_COMMAND_COUNT (sizeof cli_commands / sizeof cli_commands[0])

static void cli_usage(FILE *out)
{
    fputs("usage: mailvault COMMAND [ARGS...]    ('mailvault COMMAND --help' for one)\n"
          "\n"
          "Commands:\n",
          out);
    for (size_t i = 0; i < CLI_COMMAND_COUNT; i++) {
        fprintf(out, "  %-9s %s\n", cli_commands[i].name, cli_commands[i].summary);
    }
    fputs("  version   print the versions of mailvault, SQLite and OpenSSL\n"
          "  help      print this text\n"
          "\n"
          "USER is an e-mail address; stores live under --root DIR, else $MAILVAULT_ROOT,\n"
          "else ./var/mail. The password comes from --password-file FILE, else\n"
          "$MAILVAULT_PASSWORD, else a prompt on the terminal; never from the command line.\n"
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
        return CLI_EXIT_IOERR;
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
    for (size_t i = 0; i < CLI_COMMAND_COUNT; i++) {
        if (strcmp(command, cli_commands[i].name) == 0) {
            return cli_commands[i].run(argc - 1, argv + 1);
        }
    }
    cli_error("unknown command '%s' (try 'mailvault help')", command);
    return CLI_EXIT_USAGE;
}
