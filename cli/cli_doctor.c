/*
 * cli_doctor.c -- `mailvault doctor`: the deployment checklist (mv_doctor_run).
 *
 * USAGE
 *   mailvault doctor [--root DIR] [--wal-limit BYTES] [--fix] [--json]
 *
 * IMPLEMENTATION NOTES
 *   One line per result, "OK   check: detail", "WARN ..." or "FAIL ...", then a summary;
 *   exit 1 if any check FAILed. No password is asked for: every check is keyless. --fix
 *   removes the staging directories of killed `store import`s instead of reporting them
 *   (only those no live import holds: ops_doctor.c); nothing else is ever changed.
 */
#include "cli.h"

static const struct cli_command_spec cli_doctor_spec = {
    "doctor", "doctor [--root DIR] [--wal-limit BYTES] [--fix] [--json]",
    CLI_OPT(CLI_OPT_ROOT) | CLI_OPT(CLI_OPT_WAL_LIMIT) | CLI_OPT(CLI_OPT_FIX) |
        CLI_OPT(CLI_OPT_JSON),
    0, 0};

struct cli_doctor_out {
    int json;
    struct cli_json writer;
};

static void cli_doctor_line(void *arg, int status, const char *check, const char *detail)
{
    static const char *const words[] = {"OK", "WARN", "FAIL"};
    struct cli_doctor_out *out = arg;
    const char *word = status >= 0 && status <= 2 ? words[status] : "?";
    if (!out->json) {
        printf("%-4s %s: %s\n", word, check, detail);
        return;
    }
    cli_json_object_begin(&out->writer);
    cli_json_key(&out->writer, "status");
    cli_json_string(&out->writer, word);
    cli_json_key(&out->writer, "check");
    cli_json_string(&out->writer, check);
    cli_json_key(&out->writer, "detail");
    cli_json_string(&out->writer, detail);
    cli_json_object_end(&out->writer);
}

int cli_doctor_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_doctor_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    char root[MV_PATH_MAX];
    struct mv_store_options store_opts;
    struct mv_doctor_options o = MV_DOCTOR_OPTIONS_INIT;
    rc = cli_ops_root(&args, root, &store_opts);
    if (rc == CLI_EXIT_OK) {
        rc = cli_args_u64(&args, CLI_OPT_WAL_LIMIT, 0, UINT64_MAX, &o.wal_bytes_max);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    o.root = root;
    o.fix = cli_args_has(&args, CLI_OPT_FIX);
    struct cli_doctor_out out = {cli_args_has(&args, CLI_OPT_JSON), {0}};
    struct mv_doctor_summary sum;
    if (out.json) {
        cli_json_document_begin(&out.writer, stdout);
        cli_json_key(&out.writer, "results");
        cli_json_array_begin(&out.writer);
    }
    int mv_rc = mv_doctor_run(&o, cli_doctor_line, &out, &sum);
    if (out.json) {
        cli_json_array_end(&out.writer);
        cli_json_object_end(&out.writer);
        if (cli_json_finish(&out.writer) != 0) {
            cli_error("cannot write the JSON output");
        }
    } else if (mv_rc == MV_OK) {
        printf("%u ok, %u warnings, %u failures (%u stores under %s)\n", sum.ok, sum.warn, sum.fail,
               sum.stores, root);
    }
    rc = cli_store_flush_stdout();
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(NULL, mv_rc);
    }
    return rc == CLI_EXIT_OK && sum.fail > 0 ? CLI_EXIT_ERROR : rc;
}
