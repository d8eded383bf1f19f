/*
 * cli_check.c -- `mailvault check USER`: integrity, authentication of every page, and the
 * store's own invariants (mv_store_check).
 *
 * USAGE
 *   mailvault check alice@example.org --password-file pw [--json]
 *
 * IMPLEMENTATION NOTES
 *   Each problem is one line "WHAT: DETAIL" on stdout (or one object in --json), then a
 *   summary line. Exit 0 when nothing was found, 1 when something was (or the check could
 *   not run), 2 for a usage error.
 */
#include "cli.h"

static const struct cli_command_spec cli_check_spec = {
    "check", "check USER [--json]", CLI_OPTS_STORE | CLI_OPT(CLI_OPT_JSON), 1, 1};

struct cli_check_out {
    int json;
    struct cli_json writer;
};

static void cli_check_problem(void *arg, const char *what, const char *detail)
{
    struct cli_check_out *out = arg;
    if (!out->json) {
        printf("%s: %s\n", what, detail);
        return;
    }
    cli_json_object_begin(&out->writer);
    cli_json_key(&out->writer, "check");
    cli_json_string(&out->writer, what);
    cli_json_key(&out->writer, "problem");
    cli_json_string(&out->writer, detail);
    cli_json_object_end(&out->writer);
}

int cli_check_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_check_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    if ((rc = cli_store_open_user(&args, 0, &store)) != CLI_EXIT_OK) {
        return rc;
    }
    struct cli_check_out out = {cli_args_has(&args, CLI_OPT_JSON), {0}};
    struct mv_check_report r;
    if (out.json) {
        cli_json_document_begin(&out.writer, stdout);
        cli_json_key(&out.writer, "problems");
        cli_json_array_begin(&out.writer);
    }
    int mv_rc = mv_store_check(store, cli_check_problem, &out, &r);
    if (out.json) {
        cli_json_array_end(&out.writer);
        cli_json_key(&out.writer, "pages_read");
        cli_json_uint(&out.writer, r.pages_read);
        cli_json_key(&out.writer, "wal_frames_read");
        cli_json_uint(&out.writer, r.wal_frames_read);
        cli_json_key(&out.writer, "problem_count");
        cli_json_uint(&out.writer, r.problems);
        cli_json_object_end(&out.writer);
        if (cli_json_finish(&out.writer) != 0) {
            cli_error("cannot write the JSON output");
        }
    } else if (mv_rc == MV_OK || mv_rc == MV_ECORRUPT) {
        printf("%llu pages and %llu WAL frames authenticated; %u problem%s\n",
               (unsigned long long)r.pages_read, (unsigned long long)r.wal_frames_read, r.problems,
               r.problems == 1 ? "" : "s");
    }
    rc = cli_store_flush_stdout();
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    }
    mv_store_close(&store);
    return rc;
}
