/*
 * cli_backup.c -- `mailvault backup USER DIR [--keep N]` and `mailvault restore USER SNAPSHOT`,
 * and the progress line they and `passwd` draw.
 *
 * USAGE
 *   mailvault backup alice@example.org /srv/backup --keep 14
 *   mailvault restore alice@example.org /srv/backup/alice@example.org-20261130T141338.123Z.mvbackup
 *
 * IMPLEMENTATION NOTES
 *   The work is the library's (mv_backup_write, mv_backup_restore: see include/mailvault.h
 *   and docs/OPERATIONS.md); this file reads the password, draws progress on a terminal and
 *   prints one line of result on stdout.
 *   `backup --all DIR` takes a keyless snapshot of every store under the root
 *   (mv_backup_write_keyless: passwords are never stored), one line per store; a store that
 *   fails is reported on stderr and the others go on; the exit status is 1 if any failed.
 */
#include "cli.h"

#include <string.h>
#include <time.h>

static const struct cli_command_spec cli_backup_spec = {
    "backup", "backup USER DIR [--keep N]  |  backup --all DIR [--keep N]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_KEEP) | CLI_OPT(CLI_OPT_ALL), 1, 2};

static const struct cli_command_spec cli_restore_spec = {"restore", "restore USER SNAPSHOT",
                                                         CLI_OPTS_STORE, 2, 2};

void cli_ops_progress(void *arg, const char *stage, uint64_t done, uint64_t total)
{
    struct cli_ops_progress *p = arg;
    if (!p->line.enabled) {
        return;
    }
    char line[160];
    if (total > 0 && done <= total) {
        snprintf(line, sizeof line, "%s: %s %.1f/%.1f MB  %3u%%", p->command, stage,
                 (double)done / 1e6, (double)total / 1e6, (unsigned)(done * 100 / total));
    } else if (done > 0) {
        snprintf(line, sizeof line, "%s: %s %.1f MB", p->command, stage, (double)done / 1e6);
    } else {
        snprintf(line, sizeof line, "%s: %s ...", p->command, stage);
    }
    size_t width = strlen(line);
    int pad = p->line.last_width > width ? (int)(p->line.last_width - width) : 0;
    fprintf(stderr, "\r%s%*s", line, pad, "");
    fflush(stderr);
    p->line.last_width = width;
}

/* One keyless snapshot; prints its line or the error. */
static int cli_backup_one_keyless(const char *address,
                                  const struct mv_store_options *opts,
                                  const char *dir,
                                  struct mv_ops_options *ops)
{
    struct mv_backup_info info;
    char errmsg[1024] = "";
    int mv_rc = mv_backup_write_keyless(address, opts, dir, ops, &info, errmsg, sizeof errmsg);
    if (mv_rc != MV_OK) {
        cli_error("%s: %s", address, errmsg[0] != '\0' ? errmsg : mv_strerror(mv_rc));
        return cli_exit_code(mv_rc);
    }
    char size[16];
    cli_text_size(info.size_bytes + info.wal_size_bytes, size, sizeof size);
    printf("%s\tkeyless\t%s\t%llu WAL frames\tsha256:%s\n", info.path, size,
           (unsigned long long)info.wal_frames, info.sha256);
    return CLI_EXIT_OK;
}

/* backup --all DIR: every store under the root, without passwords. */
static int cli_backup_all(const struct cli_args *args, struct mv_ops_options *ops)
{
    char root[MV_PATH_MAX];
    struct mv_store_options opts = MV_STORE_OPTIONS_INIT;
    int rc = cli_ops_root(args, root, &opts);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    mv_root_scan *scan = NULL;
    int mv_rc = mv_root_scan_begin(&opts, &scan);
    if (mv_rc != MV_OK) {
        cli_error("%s: %s", root, mv_strerror(mv_rc));
        return mv_rc == MV_ENOTFOUND ? CLI_EXIT_NOINPUT : cli_exit_code(mv_rc);
    }
    struct mv_store_file file;
    int failures = 0, stores = 0;
    int first_failure = CLI_EXIT_OK; /* the exit code: the first store's failure */
    while ((mv_rc = mv_root_scan_next(scan, &file)) == 1) {
        stores++;
        int one = cli_backup_one_keyless(file.address, &opts, args->positional[0], ops);
        failures += one != CLI_EXIT_OK;
        first_failure = first_failure != CLI_EXIT_OK ? first_failure : one;
        fflush(stdout);
    }
    mv_root_scan_end(&scan);
    if (mv_rc < 0) {
        cli_error("%s: %s", root, mv_strerror(mv_rc));
        failures++;
        first_failure = first_failure != CLI_EXIT_OK ? first_failure : cli_exit_code(mv_rc);
    }
    if (failures > 0) {
        cli_error("%d of %d stores not backed up", failures, stores);
    }
    rc = cli_store_flush_stdout();
    return failures > 0 ? first_failure : rc;
}

int cli_backup_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_backup_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    int all = cli_args_has(&args, CLI_OPT_ALL);
    if (args.positional_count != (all ? 1 : 2)) {
        return cli_args_usage_error(&args, all ? "--all takes only DIR" : "want USER DIR");
    }
    struct mv_ops_options ops = MV_OPS_OPTIONS_INIT;
    uint64_t keep = MV_BACKUP_KEEP_DEFAULT;
    struct cli_store_target target;
    rc = cli_args_u64(&args, CLI_OPT_KEEP, 1, MV_BACKUP_KEEP_MAX, &keep);
    if (rc == CLI_EXIT_OK && all) {
        ops.keep = (uint32_t)keep;
        return cli_backup_all(&args, &ops);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_target(&args, &target);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_check(&target, 1);
    }
    struct cli_password pw = {NULL, 0};
    if (rc == CLI_EXIT_OK) {
        rc = cli_password_read(args.value[CLI_OPT_PASSWORD_FILE], 0, &pw);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    struct cli_ops_progress progress;
    cli_progress_init(&progress.line);
    progress.command = "backup";
    ops.keep = (uint32_t)keep;
    ops.progress = cli_ops_progress;
    ops.progress_arg = &progress;
    struct mv_backup_info info;
    char errmsg[1024] = "";
    int mv_rc = mv_backup_write(target.address, pw.bytes, pw.size_bytes, &target.opts,
                                args.positional[1], &ops, &info, errmsg, sizeof errmsg);
    cli_password_wipe(&pw);
    cli_progress_finish(&progress.line);
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(errmsg, mv_rc);
    }
    char size[16];
    cli_text_size(info.size_bytes, size, sizeof size);
    printf("%s\t%llu messages\t%s\tsha256:%s\n", info.path, (unsigned long long)info.messages, size,
           info.sha256);
    if (info.pruned > 0) {
        printf("pruned %u older snapshot%s (keeping %llu)\n", info.pruned,
               info.pruned == 1 ? "" : "s", (unsigned long long)keep);
    }
    return cli_store_flush_stdout();
}

int cli_restore_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_restore_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    struct cli_store_target target;
    rc = cli_store_target(&args, &target);
    struct cli_password pw = {NULL, 0};
    if (rc == CLI_EXIT_OK) {
        rc = cli_password_read(args.value[CLI_OPT_PASSWORD_FILE], 0, &pw);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    struct cli_ops_progress progress;
    cli_progress_init(&progress.line);
    progress.command = "restore";
    struct mv_ops_options ops = MV_OPS_OPTIONS_INIT;
    ops.progress = cli_ops_progress;
    ops.progress_arg = &progress;
    char errmsg[1024] = "";
    const char *snapshot = args.positional[1];
    int mv_rc = mv_backup_restore(target.address, pw.bytes, pw.size_bytes, &target.opts, snapshot,
                                  &ops, errmsg, sizeof errmsg);
    cli_password_wipe(&pw);
    cli_progress_finish(&progress.line);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail_msg(errmsg, mv_rc);
        return mv_rc == MV_ENOTFOUND ? CLI_EXIT_NOINPUT : rc; /* the snapshot is an input */
    }
    printf("restored %s from %s\n", target.address, snapshot);
    return cli_store_flush_stdout();
}
