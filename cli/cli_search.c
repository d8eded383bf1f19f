/*
 * cli_search.c -- `mailvault search`: messages matching every criterion given.
 *
 * USAGE
 *   mailvault search USER [--mailbox NAME] [--from S] [--to S] [--cc S] [--subject S]
 *                    [--message-id ID] [--text S] [--since YYYY-MM-DD]
 *                    [--before YYYY-MM-DD] [--seen|--unseen] [--flagged] [--keyword K]
 *                    [--larger N] [--smaller N] [--limit N] [--json]
 *
 * IMPLEMENTATION NOTES
 *   Each option fills one field of struct mv_search_query; the library ANDs them. Without
 *   --mailbox every mailbox is searched and the human output gets a MAILBOX column.
 *   Dates are whole UTC days, as in IMAP: --since D matches from D's midnight on, --before
 *   D up to (not including) D's midnight. --text is words, each a case-insensitive
 *   substring of the header or body (the store's trigram index); the header options are
 *   case-insensitive substrings.
 *   Contradictions the library would accept but that can never match are refused as
 *   usage errors: --seen with --unseen, --before 1970-01-01, --smaller 0.
 */
#include "cli.h"

static const struct cli_command_spec cli_search_spec = {
    "search",
    "search USER [--mailbox NAME] [--from S] [--to S] [--cc S] [--subject S]\n"
    "                        [--message-id ID] [--text S] [--since YYYY-MM-DD]\n"
    "                        [--before YYYY-MM-DD] [--seen|--unseen] [--flagged]\n"
    "                        [--keyword K] [--larger N] [--smaller N] [--limit N] [--json]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX) | CLI_OPT(CLI_OPT_FROM) | CLI_OPT(CLI_OPT_TO) |
        CLI_OPT(CLI_OPT_CC) | CLI_OPT(CLI_OPT_SUBJECT) | CLI_OPT(CLI_OPT_MESSAGE_ID) |
        CLI_OPT(CLI_OPT_TEXT) | CLI_OPT(CLI_OPT_SINCE) | CLI_OPT(CLI_OPT_BEFORE) |
        CLI_OPT(CLI_OPT_SEEN) | CLI_OPT(CLI_OPT_UNSEEN) | CLI_OPT(CLI_OPT_FLAGGED) |
        CLI_OPT(CLI_OPT_KEYWORD) | CLI_OPT(CLI_OPT_LARGER) | CLI_OPT(CLI_OPT_SMALLER) |
        CLI_OPT(CLI_OPT_LIMIT) | CLI_OPT(CLI_OPT_JSON),
    1, 1};

/* The flag options. */
static int cli_search_flags(const struct cli_args *args, struct mv_search_query *query)
{
    if (cli_args_has(args, CLI_OPT_SEEN) && cli_args_has(args, CLI_OPT_UNSEEN)) {
        return cli_args_usage_error(args, "--seen and --unseen cannot be used together");
    }
    if (cli_args_has(args, CLI_OPT_SEEN)) {
        query->flags_set |= MV_FLAG_SEEN;
    }
    if (cli_args_has(args, CLI_OPT_UNSEEN)) {
        query->flags_unset |= MV_FLAG_SEEN;
    }
    if (cli_args_has(args, CLI_OPT_FLAGGED)) {
        query->flags_set |= MV_FLAG_FLAGGED;
    }
    return CLI_EXIT_OK;
}

/* Dates and sizes. */
static int cli_search_bounds(const struct cli_args *args, struct mv_search_query *query)
{
    int rc = cli_args_date(args, CLI_OPT_SINCE, &query->since);
    if (rc == CLI_EXIT_OK) {
        rc = cli_args_date(args, CLI_OPT_BEFORE, &query->before);
    }
    if (rc == CLI_EXIT_OK && cli_args_has(args, CLI_OPT_BEFORE) && query->before == 0) {
        rc = cli_args_usage_error(args, "--before 1970-01-01 matches nothing");
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_args_u64(args, CLI_OPT_LARGER, 0, UINT64_MAX, &query->larger);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_args_u64(args, CLI_OPT_SMALLER, 1, UINT64_MAX, &query->smaller);
    }
    return rc;
}

static int
cli_search_query(const struct cli_args *args, struct mv_search_query *query, uint64_t *limit)
{
    query->mailbox = args->value[CLI_OPT_MAILBOX];
    query->from = args->value[CLI_OPT_FROM];
    query->to = args->value[CLI_OPT_TO];
    query->cc = args->value[CLI_OPT_CC];
    query->subject = args->value[CLI_OPT_SUBJECT];
    query->message_id = args->value[CLI_OPT_MESSAGE_ID];
    query->text = args->value[CLI_OPT_TEXT];
    query->keyword = args->value[CLI_OPT_KEYWORD];
    int rc = cli_search_flags(args, query);
    if (rc == CLI_EXIT_OK) {
        rc = cli_search_bounds(args, query);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_args_u64(args, CLI_OPT_LIMIT, 1, UINT32_MAX, limit);
    }
    return rc;
}

int cli_search_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_search_spec, &args);
    struct mv_search_query query = MV_SEARCH_QUERY_INIT;
    uint64_t limit = 0;
    if (rc == CLI_EXIT_OK) {
        rc = cli_search_query(&args, &query, &limit);
    }
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    rc = cli_message_print_search(store, &query, limit, cli_args_has(&args, CLI_OPT_JSON),
                                  query.mailbox == NULL);
    mv_store_close(&store);
    return rc;
}
