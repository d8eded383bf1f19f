/*
 * cli_import.c -- `mailvault import USER PATH`: an mbox, a Maildir or a folder of .eml files.
 *
 * USAGE
 *   mailvault import USER PATH [--mailbox NAME] [--max-message-size BYTES]
 *
 * IMPLEMENTATION NOTES
 *   mv_import() streams the input and commits in batches; this file adds the progress line
 *   (stderr, only on a terminal: messages, MB, percentage, ETA) and a summary line on
 *   stdout: "imported N, skipped N, failed N". Skipped messages were already in the
 *   mailbox (a re-run after an interruption); failed ones were refused by a limit, and make
 *   the exit status 1 although the rest was imported.
 *   Ctrl-C (SIGINT), SIGTERM and SIGHUP do not kill the import mid-batch: the handler only
 *   sets a flag, the progress callback asks the library to stop, the committed batches
 *   stay, and the same command resumes later without duplicates.
 */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

static const struct cli_command_spec cli_import_spec = {
    "import", "import USER PATH [--mailbox NAME] [--max-message-size BYTES]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX) | CLI_OPT(CLI_OPT_MAX_MESSAGE_SIZE), 2, 2};

static const int cli_import_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define CLI_IMPORT_SIGNAL_COUNT (sizeof cli_import_signals / sizeof cli_import_signals[0])

static volatile sig_atomic_t cli_import_stop_requested;

struct cli_import_run {
    struct cli_progress progress;
};

static void cli_import_on_signal(int signo)
{
    (void)signo;
    cli_import_stop_requested = 1;
}

static void cli_import_signals_catch(void)
{
    struct sigaction action, old;
    memset(&action, 0, sizeof action);
    action.sa_handler = cli_import_on_signal;
    sigemptyset(&action.sa_mask);
    cli_import_stop_requested = 0;
    for (size_t i = 0; i < CLI_IMPORT_SIGNAL_COUNT; i++) {
        (void)sigaction(cli_import_signals[i], &action, &old);
        if (old.sa_handler == SIG_IGN) {
            (void)sigaction(cli_import_signals[i], &old, NULL); /* nohup */
        }
    }
}

static int
cli_import_on_progress(void *arg, const struct mv_import_stats *stats, uint64_t bytes_total)
{
    struct cli_import_run *run = arg;
    cli_progress_update(&run->progress, stats->messages_seen, stats->bytes, bytes_total, 0);
    return cli_import_stop_requested ? 1 : 0;
}

/* The summary line, and the exit status it implies. */
static int cli_import_report(const struct mv_import_stats *stats, int mv_rc, mv_store *store)
{
    char size[32];
    cli_text_size(stats->bytes, size, sizeof size);
    printf("imported %llu, skipped %llu, failed %llu (%llu messages, %s read)\n",
           (unsigned long long)stats->messages_imported,
           (unsigned long long)stats->messages_skipped, (unsigned long long)stats->messages_failed,
           (unsigned long long)stats->messages_seen, size);
    int rc = cli_store_flush_stdout();
    if (cli_import_stop_requested) {
        cli_error("interrupted; run the same command again to import the rest (messages "
                  "already imported are skipped)");
        return CLI_EXIT_TEMPFAIL;
    }
    if (mv_rc != MV_OK) {
        return cli_store_fail(store, mv_rc);
    }
    if (stats->messages_failed > 0) {
        cli_error("%llu message%s refused (over a limit)",
                  (unsigned long long)stats->messages_failed,
                  stats->messages_failed == 1 ? " was" : "s were");
        return CLI_EXIT_DATA;
    }
    return rc;
}

int cli_import_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_import_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    const char *path = args.positional[1];
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        cli_error("%s: %s", path, strerror(e));
        return cli_exit_errno(e, CLI_EXIT_NOINPUT);
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    struct cli_import_run run;
    cli_progress_init(&run.progress);
    cli_import_signals_catch();
    struct mv_import_stats stats = {0, 0, 0, 0, 0};
    int mv_rc =
        mv_import(store, path, cli_store_mailbox(&args), cli_import_on_progress, &run, &stats);
    cli_progress_finish(&run.progress);
    rc = cli_import_report(&stats, mv_rc, store);
    /* The handlers stay to the process' exit (this returns into main()): a signal that came
     * after the summary, while the close checkpointed or after the handlers were restored,
     * killed the process with the import done and reported (exit 143 after "imported N");
     * now the import's status stands, and a late signal only sets a flag nobody reads. */
    mv_store_close(&store);
    return rc;
}
