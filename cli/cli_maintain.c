/*
 * cli_maintain.c -- `mailvault maintain USER|--all`: the periodic maintenance, for cron.
 *
 * USAGE
 *   mailvault maintain alice@example.org --password-file pw [--vacuum-free-percent N]
 *             [--vacuum-slack-percent N] [--quick-check-days N] [--changes-keep-days N]
 *             [--quick-check] [--no-vacuum]
 *   mailvault maintain --all [--wal-limit BYTES]
 *
 * IMPLEMENTATION NOTES
 *   With USER: mv_store_maintain() and one line per step saying what was done and why.
 *   Exit 75 when VACUUM was needed but refused for lack of disk, 65 when quick_check found
 *   problems or the full-text move a migration left cannot go on (the other steps are done;
 *   stderr and a `full-text move: FAILED` line name `mailvault repair`). With --all no
 *   password exists, so nothing that reads pages can run: each store gets the keyless checks
 *   (header, permissions, WAL size against --wal-limit) and the note that its keyed
 *   maintenance needs the password. Exit 1 if a keyless check failed. Progress (the current
 *   step, or the stores done) is drawn on stderr only when it is a terminal: cron and scripts
 *   see only the report.
 */
#include "cli.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct cli_command_spec cli_maintain_spec = {
    "maintain",
    "maintain USER|--all [--vacuum-free-percent N] [--vacuum-slack-percent N] "
    "[--quick-check-days N] [--changes-keep-days N] [--quick-check] [--no-vacuum] "
    "[--wal-limit BYTES]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_ALL) | CLI_OPT(CLI_OPT_VACUUM_FREE_PERCENT) |
        CLI_OPT(CLI_OPT_VACUUM_SLACK_PERCENT) | CLI_OPT(CLI_OPT_QUICK_CHECK_DAYS) |
        CLI_OPT(CLI_OPT_CHANGES_KEEP_DAYS) | CLI_OPT(CLI_OPT_QUICK_CHECK) |
        CLI_OPT(CLI_OPT_NO_VACUUM) | CLI_OPT(CLI_OPT_WAL_LIMIT),
    0, 1};

#define CLI_MAINTAIN_WAL_LIMIT_DEFAULT ((uint64_t)64 << 20)

/* A progress line on a terminal: the step and the seconds it has taken. */
struct cli_maintain_progress {
    int enabled;
    time_t start;
    time_t last;
    int drawn;
};

static void cli_maintain_progress(void *arg, const char *stage, uint64_t done, uint64_t total)
{
    struct cli_maintain_progress *p = arg;
    time_t now = time(NULL);
    (void)done;
    (void)total;
    if (!p->enabled || now == p->last) {
        return;
    }
    p->last = now;
    p->drawn = 1;
    fprintf(stderr, "\r%s... %lds   ", stage, (long)(now - p->start));
    fflush(stderr);
}

static void cli_maintain_progress_clear(struct cli_maintain_progress *p)
{
    if (p->drawn) {
        fprintf(stderr, "\r%40s\r", "");
        fflush(stderr);
        p->drawn = 0;
    }
}

static void cli_maintain_vacuum_line(const struct mv_maintain_report *r,
                                     const struct mv_maintain_options *o)
{
    char before[16], after[16], free_disk[16];
    cli_text_size(r->bytes_before, before, sizeof before);
    cli_text_size(r->bytes_after, after, sizeof after);
    cli_text_size(r->disk_free_bytes, free_disk, sizeof free_disk);
    switch (r->vacuum) {
    case MV_VACUUM_DONE:
        printf("VACUUM: done, %s -> %s (file + WAL)\n", before, after);
        break;
    case MV_VACUUM_REFUSED_DISK:
        printf("VACUUM: REFUSED, needed but only %s free; it needs twice the store (%s)\n",
               free_disk, before);
        break;
    case MV_VACUUM_SKIPPED:
        printf("VACUUM: needed, skipped (--no-vacuum)\n");
        break;
    default:
        printf("VACUUM: not needed (free pages <= %u%%, slack <= %u%%)\n", o->vacuum_free_percent,
               o->vacuum_slack_percent);
    }
}

static void cli_maintain_print(const char *address,
                               const struct mv_maintain_report *r,
                               const struct mv_maintain_options *o)
{
    printf("store %s\n", address);
    if (o->changes_keep_days > 0) {
        printf("change log: %llu rows pruned (expunges older than %u days)\n",
               (unsigned long long)r->changes_pruned, o->changes_keep_days);
    } else {
        printf("change log: kept whole (--changes-keep-days 0)\n");
    }
    printf("attachments: %llu counted (stored before schema version 15: their messages' "
           "skeletons now stand in for them)\n",
           (unsigned long long)r->parts_counted);
    printf("optimize: done (analysis_limit=400)\n");
    printf("checkpoint (PASSIVE): busy %d, %lld of %lld WAL frames checkpointed%s\n",
           r->checkpoint_busy, (long long)r->checkpoint_done_frames,
           (long long)r->checkpoint_log_frames,
           r->checkpoint_busy || r->checkpoint_done_frames < r->checkpoint_log_frames
               ? " (readers are holding the WAL)"
               : "");
    printf("WAL: %s\n", r->wal_truncated ? "truncated (the store was idle)"
                                         : "kept (the store is in use; it shrinks when idle)");
    printf("free pages: %llu of %llu (%.1f%%, vacuum above %u%%)\n",
           (unsigned long long)r->freelist_count, (unsigned long long)r->page_count,
           r->free_ratio * 100.0, o->vacuum_free_percent);
    if (r->slack_ratio < 0) {
        printf("slack: unknown (this SQLite has no dbstat)\n");
    } else {
        printf("slack: %.1f%% of the pages are unused space inside b-tree pages (vacuum above "
               "%u%%)\n",
               r->slack_ratio * 100.0, o->vacuum_slack_percent);
    }
    cli_maintain_vacuum_line(r, o);
    if (r->fts_move_failed) {
        printf("full-text move: FAILED, the old index cannot be read (mailvault repair %s ends "
               "the move)\n",
               address);
    }
    char last[32] = "never";
    if (r->quick_check_last_at > 0) {
        cli_text_time_iso(r->quick_check_last_at, last, sizeof last);
    }
    printf("quick_check: %s (last before this run: %s, every %u days)\n",
           r->quick_check == MV_QUICK_CHECK_OK       ? "ok"
           : r->quick_check == MV_QUICK_CHECK_FAILED ? "FOUND PROBLEMS"
                                                     : "not due",
           last, o->quick_check_days);
}

static int cli_maintain_options(const struct cli_args *args, struct mv_maintain_options *o)
{
    uint64_t v = 0;
    int rc = CLI_EXIT_OK;
    if (cli_args_has(args, CLI_OPT_VACUUM_FREE_PERCENT) &&
        (rc = cli_args_u64(args, CLI_OPT_VACUUM_FREE_PERCENT, 0, 100, &v)) == CLI_EXIT_OK) {
        o->vacuum_free_percent = (uint32_t)v;
    }
    if (rc == CLI_EXIT_OK && cli_args_has(args, CLI_OPT_VACUUM_SLACK_PERCENT) &&
        (rc = cli_args_u64(args, CLI_OPT_VACUUM_SLACK_PERCENT, 0, 100, &v)) == CLI_EXIT_OK) {
        o->vacuum_slack_percent = (uint32_t)v;
    }
    if (rc == CLI_EXIT_OK && cli_args_has(args, CLI_OPT_QUICK_CHECK_DAYS) &&
        (rc = cli_args_u64(args, CLI_OPT_QUICK_CHECK_DAYS, 0, 36500, &v)) == CLI_EXIT_OK) {
        o->quick_check_days = (uint32_t)v;
    }
    if (rc == CLI_EXIT_OK && cli_args_has(args, CLI_OPT_CHANGES_KEEP_DAYS) &&
        (rc = cli_args_u64(args, CLI_OPT_CHANGES_KEEP_DAYS, 0, 36500, &v)) == CLI_EXIT_OK) {
        o->changes_keep_days = (uint32_t)v;
    }
    o->flags |= cli_args_has(args, CLI_OPT_QUICK_CHECK) ? MV_MAINTAIN_QUICK_CHECK : 0;
    o->flags |= cli_args_has(args, CLI_OPT_NO_VACUUM) ? MV_MAINTAIN_NO_VACUUM : 0;
    return rc;
}

static int cli_maintain_user(const struct cli_args *args)
{
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    struct cli_maintain_progress progress = {isatty(STDERR_FILENO), time(NULL), 0, 0};
    o.progress = cli_maintain_progress;
    o.progress_arg = &progress;
    int rc = cli_maintain_options(args, &o);
    if (rc == CLI_EXIT_OK && cli_args_has(args, CLI_OPT_WAL_LIMIT)) {
        rc = cli_args_usage_error(args, "--wal-limit goes with --all");
    }
    mv_store *store = NULL;
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_open_user(args, 0, &store);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    struct mv_maintain_report r;
    int mv_rc = mv_store_maintain(store, &o, &r);
    cli_maintain_progress_clear(&progress);
    if (mv_rc == MV_OK || mv_rc == MV_ENOSPC || mv_rc == MV_ECORRUPT) {
        char address[MV_ADDRESS_MAX + 1];
        if (mv_address_normalize(args->positional[0], address, sizeof address, NULL, 0) != MV_OK) {
            snprintf(address, sizeof address, "%s", args->positional[0]);
        }
        cli_maintain_print(address, &r, &o);
    }
    rc = cli_store_flush_stdout();
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    }
    mv_store_close(&store);
    return rc;
}

/* One store without its password: the keyless checks. Returns 1 if one failed. */
static int cli_maintain_keyless(const struct mv_store_file *f, uint64_t wal_limit)
{
    char wal[16];
    cli_text_size(f->wal_bytes, wal, sizeof wal);
    int bad = !f->header_ok || !f->modes_ok || f->wal_bytes > wal_limit;
    printf("%s: needs the password for optimize, checkpoint, VACUUM and quick_check; keyless: "
           "WAL %s%s, %lu pending, %s%s\n",
           f->address, wal, f->wal_bytes > wal_limit ? " (OVER THE LIMIT)" : "",
           (unsigned long)f->pending, !f->header_ok ? "BAD HEADER, " : "",
           f->modes_ok ? "permissions ok" : f->mode_problem);
    return bad;
}

static int cli_maintain_all(const struct cli_args *args)
{
    static const enum cli_opt keyed[] = {CLI_OPT_VACUUM_FREE_PERCENT, CLI_OPT_VACUUM_SLACK_PERCENT,
                                         CLI_OPT_QUICK_CHECK_DAYS, CLI_OPT_QUICK_CHECK,
                                         CLI_OPT_NO_VACUUM};
    for (size_t i = 0; i < sizeof keyed / sizeof keyed[0]; i++) {
        if (cli_args_has(args, keyed[i])) {
            return cli_args_usage_error(args, "%s needs USER (--all cannot open stores)",
                                        cli_args_name(keyed[i]));
        }
    }
    uint64_t wal_limit = CLI_MAINTAIN_WAL_LIMIT_DEFAULT;
    char root[MV_PATH_MAX];
    struct mv_store_options opts;
    int rc = cli_args_u64(args, CLI_OPT_WAL_LIMIT, 0, UINT64_MAX, &wal_limit);
    if (rc == CLI_EXIT_OK) {
        rc = cli_ops_root(args, root, &opts);
    }
    mv_root_scan *scan = NULL;
    int mv_rc = rc == CLI_EXIT_OK ? mv_root_scan_begin(&opts, &scan) : MV_OK;
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    if (mv_rc != MV_OK) {
        cli_error("%s: %s", root, mv_strerror(mv_rc));
        return mv_rc == MV_ENOTFOUND ? CLI_EXIT_NOINPUT : cli_exit_code(mv_rc);
    }
    struct cli_maintain_progress progress = {isatty(STDERR_FILENO), time(NULL), 0, 0};
    struct mv_store_file f;
    uint64_t count = 0, bad = 0;
    while ((mv_rc = mv_root_scan_next(scan, &f)) == 1) {
        cli_maintain_progress(&progress, "maintain --all: stores", ++count, 0);
        bad += (uint64_t)cli_maintain_keyless(&f, wal_limit);
    }
    mv_root_scan_end(&scan);
    cli_maintain_progress_clear(&progress);
    printf("%llu stores, %llu with a problem. Keyed maintenance runs with each user's password "
           "(mailvault maintain USER); meanwhile every open runs PRAGMA optimize=0x10002 and "
           "the last connection to close checkpoints the WAL.\n",
           (unsigned long long)count, (unsigned long long)bad);
    rc = cli_store_flush_stdout();
    if (mv_rc < 0) {
        cli_error("reading the stores under %s: %s", root, mv_strerror(mv_rc));
        return cli_exit_code(mv_rc);
    }
    return rc == CLI_EXIT_OK && bad > 0 ? CLI_EXIT_ERROR : rc;
}

int cli_maintain_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_maintain_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    if ((rc = cli_ops_user_or_all(&args)) != CLI_EXIT_OK) {
        return rc;
    }
    return cli_args_has(&args, CLI_OPT_ALL) ? cli_maintain_all(&args) : cli_maintain_user(&args);
}
