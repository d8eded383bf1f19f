/*
 * cli_info.c -- `mailvault info USER`: what a store holds (mv_store_stats).
 *
 * USAGE
 *   mailvault info USER [--json]
 *
 * IMPLEMENTATION NOTES
 *   What the open migrated, and the full-text rebuild a migration from schema version 8
 *   leaves for later, come from mv_store_migration().
 *   Opening a store moves sealed deliveries from its queue into INBOX, so the queue is
 *   counted first, without the password (mv_queue_count), and reported as "delivered at
 *   this open": that is how a delivery made with `deliver --sealed` is seen arriving.
 *   Sizes are printed in bytes and, for people, in kB/MB as well.
 */
#include "cli.h"

static const struct cli_command_spec cli_info_spec = {"info", "info USER [--json]",
                                                      CLI_OPTS_STORE | CLI_OPT(CLI_OPT_JSON), 1, 1};

struct cli_info {
    const struct cli_store_target *target;
    struct mv_store_stats stats;
    int64_t queued; /* deliveries drained by this open; -1 if the queue could not be read */
    struct mv_migration_status migration; /* what this open migrated, what is left */
};

static void cli_info_size_line(const char *label, uint64_t size_bytes)
{
    char human[32];
    cli_text_size(size_bytes, human, sizeof human);
    printf("%-22s %llu (%s)\n", label, (unsigned long long)size_bytes, human);
}

static void cli_info_print_human(const struct cli_info *info)
{
    const struct mv_store_stats *s = &info->stats;
    printf("%-22s %s\n", "store", info->target->address);
    printf("%-22s %s\n", "file", info->target->db_path);
    printf("%-22s %llu\n", "messages", (unsigned long long)s->messages);
    printf("%-22s %lu\n", "mailboxes", (unsigned long)s->mailboxes);
    cli_info_size_line("logical size", s->logical_bytes);
    cli_info_size_line("stored size", s->stored_bytes);
    printf("%-22s %llu\n", "attachments", (unsigned long long)s->attachments);
    cli_info_size_line("on disk (db + WAL)", s->physical_bytes);
    printf("%-22s %lu\n", "pending deliveries", (unsigned long)s->pending);
    if (info->queued >= 0) {
        printf("%-22s %lld\n", "delivered at this open", (long long)info->queued);
    }
    printf("%-22s %d\n", "schema version", s->schema_version);
    const struct mv_migration_status *m = &info->migration;
    if (m->migrated_from != 0) {
        printf("%-22s from schema version %d in %lld ms\n", "migrated at this open",
               m->migrated_from, (long long)m->migrate_ms);
    }
    if (m->fts_moving) {
        printf("%-22s %llu rows of the old index left to move (searches read both; mailvaultd "
               "moves them between commands, `mailvault maintain` finishes it)\n",
               "full-text rebuild", (unsigned long long)m->fts_rows_left);
    }
}

/* Returns CLI_EXIT_OK or CLI_EXIT_IOERR (printed). */
static int cli_info_print_json(const struct cli_info *info)
{
    const struct mv_store_stats *s = &info->stats;
    struct cli_json json;
    cli_json_document_begin(&json, stdout);
    cli_json_key(&json, "address");
    cli_json_string(&json, info->target->address);
    cli_json_key(&json, "file");
    cli_json_string(&json, info->target->db_path);
    static const char *const keys[] = {"messages", "logical_bytes", "stored_bytes", "attachments",
                                       "physical_bytes"};
    const uint64_t values[] = {s->messages, s->logical_bytes, s->stored_bytes, s->attachments,
                               s->physical_bytes};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        cli_json_key(&json, keys[i]);
        cli_json_uint(&json, values[i]);
    }
    cli_json_key(&json, "mailboxes");
    cli_json_uint(&json, s->mailboxes);
    cli_json_key(&json, "pending");
    cli_json_uint(&json, s->pending);
    cli_json_key(&json, "delivered_at_open");
    if (info->queued >= 0) {
        cli_json_int(&json, info->queued);
    } else {
        cli_json_null(&json);
    }
    cli_json_key(&json, "schema_version");
    cli_json_int(&json, s->schema_version);
    const struct mv_migration_status *m = &info->migration;
    cli_json_key(&json, "migrated_from"); /* null: this open migrated nothing */
    if (m->migrated_from != 0) {
        cli_json_int(&json, m->migrated_from);
    } else {
        cli_json_null(&json);
    }
    cli_json_key(&json, "migrate_ms");
    if (m->migrated_from != 0) {
        cli_json_int(&json, m->migrate_ms);
    } else {
        cli_json_null(&json);
    }
    cli_json_key(&json, "fts_rows_left"); /* of a full-text rebuild still under way */
    cli_json_uint(&json, m->fts_rows_left);
    cli_json_object_end(&json);
    if (cli_json_finish(&json) != 0) {
        cli_error("cannot write the JSON output");
        return CLI_EXIT_IOERR;
    }
    return CLI_EXIT_OK;
}

int cli_info_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_info_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    struct cli_store_target target;
    rc = cli_store_target(&args, &target);
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_check(&target, 1);
    }
    struct cli_info info = {&target, {0, 0, 0, 0, 0, 0, 0, 0}, -1, {0, 0, 0, 0, 0}};
    uint32_t queued = 0;
    if (rc == CLI_EXIT_OK && mv_queue_count(target.address, &target.opts, &queued) == MV_OK) {
        info.queued = queued;
    }
    mv_store *store = NULL;
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_open(&args, &target, 0, &store);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    int mv_rc = mv_store_stats(store, &info.stats);
    if (mv_rc == MV_OK) {
        mv_rc = mv_store_migration(store, &info.migration);
    }
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    } else if (cli_args_has(&args, CLI_OPT_JSON)) {
        rc = cli_info_print_json(&info);
        rc = rc == CLI_EXIT_OK ? cli_store_flush_stdout() : rc;
    } else {
        cli_info_print_human(&info);
        rc = cli_store_flush_stdout();
    }
    mv_store_close(&store);
    return rc;
}
