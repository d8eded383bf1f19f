/*
 * cli_message.c -- `mailvault list` and `mailvault fetch`: reading messages.
 *
 * USAGE
 *   mailvault list USER [--mailbox NAME] [--json] [--limit N]
 *   mailvault fetch USER UID [--mailbox NAME] [--output FILE]
 *
 * IMPLEMENTATION NOTES
 *   `list` is a search with no criteria but the mailbox, so it shares the row printer with
 *   `search` and comes newest first; --limit stops after N rows (it is not the library's
 *   search limit, which turns "more rows than that" into an error).
 *   `fetch` writes the stored bytes exactly, with write(2) on the raw descriptor (no stdio
 *   text translation, no locale), through cli_outfile so that --output FILE appears whole
 *   or not at all.
 */
#include "cli.h"

#include <string.h>

static const struct cli_command_spec cli_message_list_spec = {
    "list", "list USER [--mailbox NAME] [--json] [--limit N]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX) | CLI_OPT(CLI_OPT_JSON) | CLI_OPT(CLI_OPT_LIMIT), 1,
    1};

static const struct cli_command_spec cli_message_fetch_spec = {
    "fetch", "fetch USER UID [--mailbox NAME] [--output FILE]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX) | CLI_OPT(CLI_OPT_OUTPUT), 2, 2};

int cli_message_list_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_message_list_spec, &args);
    uint64_t limit = 0;
    if (rc == CLI_EXIT_OK) {
        rc = cli_args_u64(&args, CLI_OPT_LIMIT, 1, UINT32_MAX, &limit);
    }
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    struct mv_search_query query = MV_SEARCH_QUERY_INIT;
    query.mailbox = cli_store_mailbox(&args);
    rc = cli_message_print_search(store, &query, limit, cli_args_has(&args, CLI_OPT_JSON), 0);
    mv_store_close(&store);
    return rc;
}

/* Writes raw to --output FILE or stdout. */
static int cli_message_write(const struct cli_args *args, const void *raw, size_t size_bytes)
{
    struct cli_outfile file;
    int rc = cli_outfile_open(&file, args->value[CLI_OPT_OUTPUT]);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    rc = cli_outfile_write(&file, raw, size_bytes);
    if (rc == CLI_EXIT_OK) {
        rc = cli_outfile_commit(&file);
    }
    cli_outfile_abort(&file);
    return rc;
}

int cli_message_fetch_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_message_fetch_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    uint32_t uid = 0;
    if (cli_args_uid(args.positional[1], &uid) != 0) {
        return cli_args_usage_error(&args, "'%s' is not a UID (1 to 4294967295)",
                                    args.positional[1]);
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    void *raw = NULL;
    size_t size_bytes = 0;
    int mv_rc = mv_message_fetch(store, cli_store_mailbox(&args), uid, &raw, &size_bytes);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    } else {
        rc = cli_message_write(&args, raw, size_bytes);
    }
    mv_free(raw);
    mv_store_close(&store);
    return rc;
}
