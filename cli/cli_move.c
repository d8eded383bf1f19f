/*
 * cli_move.c -- moving a user to another node: `mailvault release`, `adopt`, and
 * `store export` / `store import` (docs/SCALEOUT.md has the whole procedure).
 *
 * USAGE
 *   mailvault release alice@example.org [--note TEXT] [--wait-seconds N] [--json]
 *   mailvault store export alice@example.org /tmp/alice.mvstore [--wait-seconds N]
 *   (copy the file to the new node)
 *   mailvault store import alice@example.org /tmp/alice.mvstore
 *   mailvault store export alice@example.org - | ssh node2 mailvault store import alice@example.org
 * - (FILE "-": the archive streamed to stdout / from stdin, never a terminal; the summary line of
 * export then goes to stderr) mailvault adopt alice@example.org        (undo a release on the old
 * node)
 *
 * None of them needs the password: they work on the store's files (mv_store_release and
 * mv_store_export in the library). release and adopt go through the running server when
 * there is one (its control socket: cli_control.c), which ends the user's sessions, waits
 * for their commands in flight and closes the store first; without one, on the files.
 */
#include "cli.h"

#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CLI_MOVE_WAIT_DEFAULT_S 10
#define CLI_MOVE_WAIT_MAX_S     3600

static const struct cli_command_spec cli_release_spec = {
    "release", "release USER [--note TEXT] [--wait-seconds N] [--json] [--control-socket PATH]",
    CLI_OPT(CLI_OPT_ROOT) | CLI_OPT(CLI_OPT_NOTE) | CLI_OPT(CLI_OPT_WAIT_SECONDS) |
        CLI_OPT(CLI_OPT_JSON) | CLI_OPT(CLI_OPT_CONTROL_SOCKET),
    1, 1};
static const struct cli_command_spec cli_adopt_spec = {
    "adopt", "adopt USER [--json] [--control-socket PATH]",
    CLI_OPT(CLI_OPT_ROOT) | CLI_OPT(CLI_OPT_JSON) | CLI_OPT(CLI_OPT_CONTROL_SOCKET), 1, 1};
static const struct cli_command_spec cli_export_spec = {
    "store export", "store export USER FILE|- [--wait-seconds N]",
    CLI_OPT(CLI_OPT_ROOT) | CLI_OPT(CLI_OPT_WAIT_SECONDS), 2, 2};
static const struct cli_command_spec cli_import_spec = {"store import", "store import USER FILE|-",
                                                        CLI_OPT(CLI_OPT_ROOT), 2, 2};

/* Parses the command line and the store's address; *wait_ms from --wait-seconds. */
static int cli_move_args(int argc,
                         char **argv,
                         const struct cli_command_spec *spec,
                         struct cli_args *args,
                         struct cli_store_target *target,
                         uint32_t *wait_ms)
{
    int rc = cli_args_parse(argc, argv, spec, args);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    uint64_t wait_s = CLI_MOVE_WAIT_DEFAULT_S;
    rc = cli_args_u64(args, CLI_OPT_WAIT_SECONDS, 0, CLI_MOVE_WAIT_MAX_S, &wait_s);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    *wait_ms = (uint32_t)wait_s * 1000u;
    rc = cli_store_target(args, target);
    if (rc == CLI_EXIT_OK && spec != &cli_import_spec) {
        rc = cli_store_check(target, 1); /* no store: the "no such user" exit code */
    }
    return rc;
}

static int64_t cli_move_now_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        return 0;
    }
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The --json document of release (verb "release") or adopt: what was done, by whom. res is
 * the server's answer when by_server, else res->already and res->duration_ms are the local
 * ones and the server's figures are null. */
static int cli_move_json(const char *verb,
                         const char *address,
                         int by_server,
                         const struct cli_control_result *res)
{
    int release = strcmp(verb, "release") == 0;
    struct cli_json j;
    cli_json_document_begin(&j, stdout);
    cli_json_key(&j, "user");
    cli_json_string(&j, address);
    cli_json_key(&j, release ? "released" : "adopted");
    cli_json_bool(&j, 1);
    cli_json_key(&j, "by_server");
    cli_json_bool(&j, by_server);
    cli_json_key(&j, "control_socket");
    cli_json_string(&j, by_server ? res->socket : NULL);
    if (release) {
        cli_json_key(&j, "already_released");
        if (by_server && !res->has_figures) {
            cli_json_null(&j);
        } else {
            cli_json_bool(&j, res->already);
        }
        cli_json_key(&j, "duration_ms");
        if (by_server && !res->has_figures) {
            cli_json_null(&j);
        } else {
            cli_json_int(&j, res->duration_ms);
        }
        /* Only a server has sessions and store handles to end and close. */
        struct cli_control_result none = {0};
        const struct cli_control_result *figures = by_server ? res : &none;
        cli_json_key(&j, "sessions_ended");
        cli_control_json_figure(&j, figures, figures->sessions_ended);
        cli_json_key(&j, "store_handles_closed");
        cli_control_json_figure(&j, figures, figures->stores_closed);
    }
    cli_json_object_end(&j);
    if (cli_json_finish(&j) != 0) {
        cli_error("cannot write the JSON output");
        return CLI_EXIT_IOERR;
    }
    return cli_store_flush_stdout();
}

int cli_release_main(int argc, char **argv)
{
    struct cli_args args;
    struct cli_store_target t;
    uint32_t wait_ms = 0;
    int rc = cli_move_args(argc, argv, &cli_release_spec, &args, &t, &wait_ms);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    int json = cli_args_has(&args, CLI_OPT_JSON);
    int handled = 0;
    struct cli_control_result res;
    rc = cli_control_move(&args, &t, "release", wait_ms, &res, &handled);
    if (handled) { /* the server did it (or said why not) */
        if (rc != CLI_EXIT_OK) {
            return rc;
        }
        if (json) {
            return cli_move_json("release", t.address, 1, &res);
        }
        printf("%s (by the server at %s)\n", res.text, res.socket);
        return cli_store_flush_stdout();
    }
    memset(&res, 0, sizeof res);
    res.already = mv_store_released(t.address, &t.opts) == 1;
    int64_t started_ms = cli_move_now_ms();
    char err[1024] = "";
    int mv_rc =
        mv_store_release(t.address, &t.opts, args.value[CLI_OPT_NOTE], wait_ms, err, sizeof err);
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(err, mv_rc);
    }
    res.duration_ms = cli_move_now_ms() - started_ms;
    if (json) {
        return cli_move_json("release", t.address, 0, &res);
    }
    printf("released %s%s: this node accepts no more mail for it (LMTP 4xx, IMAP UNAVAILABLE); "
           "export it with `mailvault store export`\n",
           t.address, res.already ? " (it already was)" : "");
    return cli_store_flush_stdout();
}

int cli_adopt_main(int argc, char **argv)
{
    struct cli_args args;
    struct cli_store_target t;
    uint32_t wait_ms = 0;
    int rc = cli_move_args(argc, argv, &cli_adopt_spec, &args, &t, &wait_ms);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    int json = cli_args_has(&args, CLI_OPT_JSON);
    int handled = 0;
    struct cli_control_result res;
    rc = cli_control_move(&args, &t, "adopt", wait_ms, &res, &handled);
    if (handled) {
        if (rc != CLI_EXIT_OK) {
            return rc;
        }
        if (json) {
            return cli_move_json("adopt", t.address, 1, &res);
        }
        printf("%s (by the server at %s)\n", res.text, res.socket);
        return cli_store_flush_stdout();
    }
    char err[1024] = "";
    int mv_rc = mv_store_adopt(t.address, &t.opts, err, sizeof err);
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(err, mv_rc);
    }
    if (json) {
        return cli_move_json("adopt", t.address, 0, &res);
    }
    printf("adopted %s: served on this node\n", t.address);
    return cli_store_flush_stdout();
}

static void cli_move_describe(FILE *out,
                              const char *verb,
                              const char *address,
                              const char *path,
                              const struct mv_store_archive_info *info)
{
    char size[16];
    cli_text_size(info->size_bytes, size, sizeof size);
    fprintf(out, "%s %s %s %s: %llu files, %s, %llu queued deliveries, %llu WAL frames\n", verb,
            address, strcmp(verb, "exported") == 0 ? "to" : "from", path,
            (unsigned long long)info->files, size, (unsigned long long)info->queue_entries,
            (unsigned long long)info->wal_frames);
}

static int cli_store_export_main(int argc, char **argv)
{
    struct cli_args args;
    struct cli_store_target t;
    uint32_t wait_ms = 0;
    int rc = cli_move_args(argc, argv, &cli_export_spec, &args, &t, &wait_ms);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    const char *path = args.positional[1];
    int streaming = strcmp(path, "-") == 0;
    if (streaming && isatty(STDOUT_FILENO)) {
        cli_error("store export: refusing to write an archive to a terminal (pipe it into "
                  "`mailvault store import USER -`, or give a FILE)");
        return CLI_EXIT_USAGE;
    }
    if (streaming) {
        /* A reader that goes away is an error to report, not a silent death. */
        signal(SIGPIPE, SIG_IGN);
    }
    char err[1024] = "";
    struct mv_store_archive_info info;
    int mv_rc =
        streaming
            ? mv_store_export_fd(t.address, &t.opts, STDOUT_FILENO, wait_ms, &info, err, sizeof err)
            : mv_store_export(t.address, &t.opts, path, wait_ms, &info, err, sizeof err);
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(err, mv_rc);
    }
    cli_move_describe(streaming ? stderr : stdout, "exported", t.address,
                      streaming ? "stdout" : path, &info);
    if (!info.released) {
        cli_error("warning: %s was not released: this node may accept mail for it after "
                  "this copy (run `mailvault release` first)",
                  t.address);
    }
    return cli_store_flush_stdout();
}

static int cli_store_import_main(int argc, char **argv)
{
    struct cli_args args;
    struct cli_store_target t;
    uint32_t wait_ms = 0;
    int rc = cli_move_args(argc, argv, &cli_import_spec, &args, &t, &wait_ms);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    const char *path = args.positional[1];
    int streaming = strcmp(path, "-") == 0;
    if (streaming && isatty(STDIN_FILENO)) {
        cli_error("store import: refusing to read an archive from a terminal (pipe `mailvault "
                  "store export USER -` into it, or give a FILE)");
        return CLI_EXIT_USAGE;
    }
    char err[1024] = "";
    struct mv_store_archive_info info;
    int mv_rc = streaming
                    ? mv_store_import_fd(t.address, &t.opts, STDIN_FILENO, &info, err, sizeof err)
                    : mv_store_import(t.address, &t.opts, path, &info, err, sizeof err);
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(err, mv_rc);
    }
    cli_move_describe(stdout, "imported", t.address, streaming ? "stdin" : path, &info);
    return cli_store_flush_stdout();
}

static void cli_store_archive_usage(FILE *out)
{
    fprintf(out,
            "usage:\n  mailvault %s\n  mailvault %s\n"
            "('mailvault store SUBCOMMAND --help' lists its options)\n",
            cli_export_spec.synopsis, cli_import_spec.synopsis);
}

int cli_store_archive_main(int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : "";
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        cli_store_archive_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(sub, "export") == 0) {
        return cli_store_export_main(argc - 1, argv + 1);
    }
    if (strcmp(sub, "import") == 0) {
        return cli_store_import_main(argc - 1, argv + 1);
    }
    cli_error("store: unknown sub-command '%s'", sub);
    cli_store_archive_usage(stderr);
    return CLI_EXIT_USAGE;
}
