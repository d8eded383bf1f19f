/*
 * cli_args.c -- the command line of the store commands (everything but `sql`).
 *
 * USAGE
 *   static const struct cli_command_spec spec = {"list", "list USER [--mailbox NAME] ...",
 *       CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX), 1, 1};
 *   struct cli_args args;
 *   int rc = cli_args_parse(argc, argv, &spec, &args);
 *   if (rc != CLI_EXIT_OK) return cli_args_exit(rc);
 *
 * IMPLEMENTATION NOTES
 *   One table names every option; a command accepts the subset in its spec's mask, so an
 *   option that means nothing to a command is a usage error rather than silently ignored.
 *   Options may come before, between or after positional arguments (`list USER --json`),
 *   "--" ends them (for a keyword or file name starting with '-'). Positional arguments are
 *   gathered at the front of argv in place: no allocation, no limit on their number.
 *   There is no option that takes a password: argv is readable by every user through /proc.
 */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Indexed by enum cli_opt: the name as typed, the value's placeholder (NULL: the option
 * takes none) and one line of help. `mailvault COMMAND --help` lists a command's options
 * from here and man/mailvault.1 is generated from that listing (scripts/gen-man.py), so
 * the help, the manual and the parser cannot disagree. Keep each help under 52 columns. */
static const struct cli_option_def cli_option_defs[CLI_OPT_COUNT] = {
    [CLI_OPT_ROOT] = {"--root", "DIR", "the stores' root (default $MAILVAULT_ROOT, ./var/mail)"},
    [CLI_OPT_PASSWORD_FILE] = {"--password-file", "FILE",
                               "read the password from FILE ('-': stdin)"},
    [CLI_OPT_MAILBOX] = {"--mailbox", "NAME", "the mailbox to work in (default INBOX)"},
    [CLI_OPT_JSON] = {"--json", NULL, "print JSON instead of text"},
    [CLI_OPT_LIMIT] = {"--limit", "N", "print at most N messages (default: all)"},
    [CLI_OPT_OUTPUT] = {"--output", "FILE", "write to FILE instead of stdout ('-': stdout)"},
    [CLI_OPT_FLAGS] = {"--flags", "LIST", "flags and keywords of the new message"},
    [CLI_OPT_SEALED] = {"--sealed", NULL, "queue it without the password (public key)"},
    [CLI_OPT_MAX_MESSAGE_SIZE] = {"--max-message-size", "BYTES",
                                  "refuse larger messages (default 64 MiB)"},
    [CLI_OPT_MBOX] = {"--mbox", NULL, "write the mbox format (required)"},
    [CLI_OPT_SPECIAL_USE] = {"--special-use", "USE",
                             "RFC 6154 use: \\Sent \\Drafts \\Trash \\Junk ..."},
    [CLI_OPT_ADD] = {"--add", NULL, "add FLAGS to the messages"},
    [CLI_OPT_REMOVE] = {"--remove", NULL, "remove FLAGS from the messages"},
    [CLI_OPT_SET] = {"--set", NULL, "replace the messages' flags with FLAGS"},
    [CLI_OPT_FROM] = {"--from", "TEXT", "From: contains TEXT (any case)"},
    [CLI_OPT_TO] = {"--to", "TEXT", "To: contains TEXT (any case)"},
    [CLI_OPT_CC] = {"--cc", "TEXT", "Cc: contains TEXT (any case)"},
    [CLI_OPT_SUBJECT] = {"--subject", "TEXT", "Subject: contains TEXT (any case)"},
    [CLI_OPT_MESSAGE_ID] = {"--message-id", "ID", "Message-ID is ID (without <>)"},
    [CLI_OPT_TEXT] = {"--text", "QUERY", "words, each a substring of the header or body"},
    [CLI_OPT_SINCE] = {"--since", "YYYY-MM-DD", "received on or after that day (UTC)"},
    [CLI_OPT_BEFORE] = {"--before", "YYYY-MM-DD", "received before that day (UTC)"},
    [CLI_OPT_SEEN] = {"--seen", NULL, "flagged \\Seen"},
    [CLI_OPT_UNSEEN] = {"--unseen", NULL, "not flagged \\Seen"},
    [CLI_OPT_FLAGGED] = {"--flagged", NULL, "flagged \\Flagged"},
    [CLI_OPT_KEYWORD] = {"--keyword", "K", "has the keyword K"},
    [CLI_OPT_LARGER] = {"--larger", "N", "larger than N bytes"},
    [CLI_OPT_SMALLER] = {"--smaller", "N", "smaller than N bytes"},
    [CLI_OPT_ALL] = {"--all", NULL, "every store under the root, without passwords"},
    [CLI_OPT_PROMETHEUS] = {"--prometheus", NULL, "print the Prometheus text format"},
    [CLI_OPT_WITH_USER_LABELS] = {"--with-user-labels", NULL,
                                  "--prometheus --all: one series per store"},
    [CLI_OPT_VACUUM_FREE_PERCENT] = {"--vacuum-free-percent", "N",
                                     "VACUUM from N% free pages (0..100, default 25)"},
    [CLI_OPT_VACUUM_SLACK_PERCENT] = {"--vacuum-slack-percent", "N",
                                      "VACUUM from N% slack (0..100, default 15)"},
    [CLI_OPT_QUICK_CHECK_DAYS] = {"--quick-check-days", "N",
                                  "quick_check every N days (default 7; 0: always)"},
    [CLI_OPT_CHANGES_KEEP_DAYS] = {"--changes-keep-days", "N",
                                   "keep N days of expunges for QRESYNC (default 90; 0: all)"},
    [CLI_OPT_QUICK_CHECK] = {"--quick-check", NULL, "run quick_check now"},
    [CLI_OPT_NO_VACUUM] = {"--no-vacuum", NULL, "decide and report, never VACUUM"},
    [CLI_OPT_WAL_LIMIT] = {"--wal-limit", "BYTES", "a larger WAL is a problem (default 64 MiB)"},
    [CLI_OPT_KEEP] = {"--keep", "N", "keep the newest N snapshots (1..1000, default 7)"},
    [CLI_OPT_CIPHER] = {"--cipher", "NAME", "rewrite under chacha20, aes256cbc or sqlcipher"},
    [CLI_OPT_NEW_PASSWORD_FILE] = {"--new-password-file", "FILE",
                                   "read the new password from FILE ('-': stdin)"},
    [CLI_OPT_NOTE] = {"--note", "TEXT", "recorded in the release marker (one line)"},
    [CLI_OPT_CONTROL_SOCKET] = {"--control-socket", "PATH",
                                "a running server's socket (default: in the root)"},
    [CLI_OPT_FIX] = {"--fix", NULL, "remove what killed imports left (stale staging dirs)"},
    [CLI_OPT_WAIT_SECONDS] = {"--wait-seconds", "N",
                              "wait up to N s for the store to close (0..3600, default 10)"},
};

const char *cli_args_name(enum cli_opt id)
{
    return cli_option_defs[id].name;
}

int cli_args_has(const struct cli_args *args, enum cli_opt id)
{
    return args->value[id] != NULL;
}

int cli_args_exit(int rc)
{
    return rc == CLI_ARGS_HELP ? CLI_EXIT_OK : rc;
}

int cli_args_usage_error(const struct cli_args *args, const char *fmt, ...)
{
    fprintf(stderr, "mailvault: %s: ", args->spec->name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (try 'mailvault %s --help')\n", args->spec->name);
    return CLI_EXIT_USAGE;
}

void cli_args_print_option(FILE *out, const struct cli_option_def *def)
{
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", def->name, def->arg != NULL ? " " : "",
             def->arg != NULL ? def->arg : "");
    fprintf(out, "  %-24s  %s\n", left, def->help);
}

static void cli_args_help(const struct cli_command_spec *spec)
{
    printf("usage: mailvault %s\n", spec->synopsis);
    fputs("\nOptions:\n", stdout);
    for (int id = 0; id < CLI_OPT_COUNT; id++) {
        if (spec->options & CLI_OPT(id)) {
            cli_args_print_option(stdout, &cli_option_defs[id]);
        }
    }
    static const struct cli_option_def help = {"-h, --help", NULL, "print this help"};
    cli_args_print_option(stdout, &help);
    if (spec->options & CLI_OPT(CLI_OPT_ROOT)) {
        fputs("\nUSER is an e-mail address. The store lives under --root DIR, else\n"
              "$MAILVAULT_ROOT, else ./var/mail.\n",
              stdout);
    }
    if (spec->options & CLI_OPT(CLI_OPT_PASSWORD_FILE)) {
        fputs("Password: --password-file FILE ('-': stdin), else $MAILVAULT_PASSWORD, else a\n"
              "prompt on the terminal. Exit status: 0 success, 1 error, 2 usage error.\n"
              "The whole contract is in docs/CLI.md.\n",
              stdout);
    }
}

/* Finds the option named by arg (up to '=' if any); -1 if unknown. */
static int cli_args_lookup(const char *arg, size_t name_length)
{
    for (int id = 0; id < CLI_OPT_COUNT; id++) {
        const char *name = cli_option_defs[id].name;
        if (strlen(name) == name_length && strncmp(name, arg, name_length) == 0) {
            return id;
        }
    }
    return -1;
}

/* Handles argv[*index], an option; advances *index past its value if it takes one. */
static int cli_args_option(int argc, char **argv, int *index, struct cli_args *out)
{
    const char *arg = argv[*index];
    const char *equals = strchr(arg, '=');
    size_t name_length = equals != NULL ? (size_t)(equals - arg) : strlen(arg);
    int id = cli_args_lookup(arg, name_length);
    if (id < 0 || !(out->spec->options & CLI_OPT(id))) {
        return cli_args_usage_error(out, "unknown option '%s'", arg);
    }
    const struct cli_option_def *def = &cli_option_defs[id];
    if (out->value[id] != NULL) {
        return cli_args_usage_error(out, "option %s given twice", def->name);
    }
    if (def->arg == NULL) {
        if (equals != NULL) {
            return cli_args_usage_error(out, "option %s takes no value", def->name);
        }
        out->value[id] = "";
        return CLI_EXIT_OK;
    }
    if (equals != NULL) {
        out->value[id] = equals + 1;
        return CLI_EXIT_OK;
    }
    if (*index + 1 >= argc) {
        return cli_args_usage_error(out, "option %s needs a value", def->name);
    }
    *index += 1;
    out->value[id] = argv[*index];
    return CLI_EXIT_OK;
}

static int cli_args_count_check(const struct cli_args *out)
{
    const struct cli_command_spec *spec = out->spec;
    if (out->positional_count < spec->positional_min) {
        return cli_args_usage_error(out, "missing arguments");
    }
    if (spec->positional_max >= 0 && out->positional_count > spec->positional_max) {
        return cli_args_usage_error(out, "unexpected argument '%s'",
                                    out->positional[spec->positional_max]);
    }
    return CLI_EXIT_OK;
}

int cli_args_parse(int argc, char **argv, const struct cli_command_spec *spec, struct cli_args *out)
{
    memset(out, 0, sizeof *out);
    out->spec = spec;
    out->positional = argv + 1;
    int options_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int is_option = !options_done && arg[0] == '-' && arg[1] != '\0';
        if (is_option && strcmp(arg, "--") == 0) {
            options_done = 1;
        } else if (is_option && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)) {
            cli_args_help(spec);
            return CLI_ARGS_HELP;
        } else if (is_option) {
            int rc = cli_args_option(argc, argv, &i, out);
            if (rc != CLI_EXIT_OK) {
                return rc;
            }
        } else {
            /* The write index never passes the read index: options only shrink the list. */
            out->positional[out->positional_count++] = argv[i];
        }
    }
    return cli_args_count_check(out);
}

int cli_args_parse_u64(const char *text, uint64_t max, uint64_t *value_out)
{
    if (text[0] < '0' || text[0] > '9') {
        return -1; /* strtoull would accept " 1", "+1" and "-1" */
    }
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || value > max) {
        return -1;
    }
    *value_out = (uint64_t)value;
    return 0;
}

int cli_args_u64(
    const struct cli_args *args, enum cli_opt id, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *text = args->value[id];
    if (text == NULL) {
        return CLI_EXIT_OK;
    }
    uint64_t value = 0;
    if (cli_args_parse_u64(text, max, &value) != 0 || value < min) {
        return cli_args_usage_error(args, "%s: '%s' is not a number from %llu to %llu",
                                    cli_args_name(id), text, (unsigned long long)min,
                                    (unsigned long long)max);
    }
    *out = value;
    return CLI_EXIT_OK;
}

int cli_args_uid(const char *text, uint32_t *uid_out)
{
    uint64_t value = 0;
    if (cli_args_parse_u64(text, UINT32_MAX, &value) != 0 || value == 0) {
        return -1;
    }
    *uid_out = (uint32_t)value;
    return 0;
}

/* Parses exactly "YYYY-MM-DD"; the day must exist (timegm would roll 02-30 into March). */
static int cli_args_parse_date(const char *text, int64_t *out)
{
    static const char shape[] = "dddd-dd-dd";
    if (strlen(text) != sizeof shape - 1) {
        return -1;
    }
    for (size_t i = 0; i < sizeof shape - 1; i++) {
        int is_digit = text[i] >= '0' && text[i] <= '9';
        if ((shape[i] == 'd') != is_digit || (shape[i] == '-' && text[i] != '-')) {
            return -1;
        }
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = (text[0] - '0') * 1000 + (text[1] - '0') * 100 + (text[2] - '0') * 10 +
                 (text[3] - '0') - 1900;
    tm.tm_mon = (text[5] - '0') * 10 + (text[6] - '0') - 1;
    tm.tm_mday = (text[8] - '0') * 10 + (text[9] - '0');
    int year = tm.tm_year, month = tm.tm_mon, day = tm.tm_mday;
    time_t t = timegm(&tm);
    if (year < 70 || t == (time_t)-1 || tm.tm_year != year || tm.tm_mon != month ||
        tm.tm_mday != day) {
        return -1;
    }
    *out = (int64_t)t;
    return 0;
}

int cli_args_date(const struct cli_args *args, enum cli_opt id, int64_t *out)
{
    const char *text = args->value[id];
    if (text == NULL) {
        return CLI_EXIT_OK;
    }
    if (cli_args_parse_date(text, out) != 0) {
        return cli_args_usage_error(args, "%s: '%s' is not a date YYYY-MM-DD from 1970 on",
                                    cli_args_name(id), text);
    }
    return CLI_EXIT_OK;
}
