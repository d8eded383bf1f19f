/*
 * cli_explain.c -- `mailvault explain [USER]`: the query plan of every statement the store
 * runs (mv_explain_*).
 *
 * USAGE
 *   mailvault explain                       plans on a scratch store (no password needed)
 *   mailvault explain alice@example.org     plans on alice's store, opened read-only: its
 *                                           statistics decide the planner's choices
 *
 * IMPLEMENTATION NOTES
 *   Each statement is printed as "-- OPERATION", its SQL, then its plan indented; a full
 *   scan of messages is marked "SCAN OF messages" (or "expected" for a search over every
 *   mailbox by criteria no index can answer). Exit 1 if any other statement scans
 *   messages: that is a missing index on a hot path.
 */
#include "cli.h"

#include <string.h>

static const struct cli_command_spec cli_explain_spec = {
    "explain", "explain [USER] [--json]", CLI_OPTS_STORE | CLI_OPT(CLI_OPT_JSON), 0, 1};

static void cli_explain_human(const struct mv_explain_row *row)
{
    printf("-- %s%s\n%s\n", row->operation,
           row->scan_expected    ? " (SCAN OF messages: expected, no index can answer it)"
           : row->scans_messages ? " (SCAN OF messages)"
                                 : "",
           row->sql);
    const char *line = row->plan;
    while (*line != '\0') {
        const char *end = strchr(line, '\n');
        size_t len = end != NULL ? (size_t)(end - line) : strlen(line);
        printf("    %.*s\n", (int)len, line);
        line += len + (end != NULL);
    }
    printf("\n");
}

static void cli_explain_json(struct cli_json *json, const struct mv_explain_row *row)
{
    cli_json_object_begin(json);
    cli_json_key(json, "operation");
    cli_json_string(json, row->operation);
    cli_json_key(json, "sql");
    cli_json_string(json, row->sql);
    cli_json_key(json, "plan");
    cli_json_string(json, row->plan);
    cli_json_key(json, "scans_messages");
    cli_json_bool(json, row->scans_messages);
    cli_json_key(json, "scan_expected");
    cli_json_bool(json, row->scan_expected);
    cli_json_object_end(json);
}

int cli_explain_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_explain_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    if (args.positional_count == 1 &&
        (rc = cli_store_open_user(&args, MV_STORE_READONLY, &store)) != CLI_EXIT_OK) {
        return rc;
    }
    char err[512] = "";
    mv_explain *e = NULL;
    int mv_rc = mv_explain_begin(store, &e, err, sizeof err);
    if (mv_rc != MV_OK) {
        mv_store_close(&store);
        return cli_store_fail_msg(err, mv_rc);
    }
    int json = cli_args_has(&args, CLI_OPT_JSON);
    struct cli_json writer;
    struct mv_explain_row row;
    unsigned count = 0, scans = 0, expected = 0;
    cli_json_init(&writer, stdout);
    if (json) {
        cli_json_document_begin(&writer, stdout);
        cli_json_key(&writer, "statements");
        cli_json_array_begin(&writer);
    }
    while (mv_explain_next(e, &row) == 1) {
        count++;
        scans += (unsigned)(row.scans_messages && !row.scan_expected);
        expected += (unsigned)row.scan_expected;
        if (json) {
            cli_explain_json(&writer, &row);
        } else {
            cli_explain_human(&row);
        }
    }
    mv_explain_end(&e);
    mv_store_close(&store);
    if (json) {
        cli_json_array_end(&writer);
        cli_json_object_end(&writer);
        if (cli_json_finish(&writer) != 0) {
            cli_error("cannot write the JSON output");
        }
    } else {
        printf("%u statements; %u scan messages where an index should serve; %u expected scans "
               "(searches over every mailbox)\n",
               count, scans, expected);
    }
    rc = cli_store_flush_stdout();
    if (scans > 0) {
        cli_error("%u statement%s scan the messages table", scans, scans == 1 ? "" : "s");
        return CLI_EXIT_ERROR;
    }
    return rc;
}
