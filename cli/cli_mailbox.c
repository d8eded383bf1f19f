/*
 * cli_mailbox.c -- `mailvault mailboxes` and `mailvault mailbox create|rename|delete|...`.
 *
 * USAGE
 *   mailvault mailboxes USER [--json]
 *   mailvault mailbox create USER NAME [--special-use \Sent]
 *   mailvault mailbox rename USER NAME NEWNAME
 *   mailvault mailbox delete USER NAME
 *   mailvault mailbox subscribe|unsubscribe USER NAME
 *
 * IMPLEMENTATION NOTES
 *   The human listing puts the one unbounded column, NAME, last, so the numbers stay
 *   aligned whatever the names; names pass through cli_text_print() (a name is UTF-8 the
 *   user chose, but an IMAP client may have chosen it). Names and special-use attributes
 *   are validated by the library, which knows the limits.
 */
#include "cli.h"

#include <string.h>

static const struct cli_command_spec cli_mailbox_list_spec = {
    "mailboxes", "mailboxes USER [--json]", CLI_OPTS_STORE | CLI_OPT(CLI_OPT_JSON), 1, 1};

static const struct cli_command_spec cli_mailbox_specs[] = {
    {"mailbox create", "mailbox create USER NAME [--special-use \\Sent]",
     CLI_OPTS_STORE | CLI_OPT(CLI_OPT_SPECIAL_USE), 2, 2},
    {"mailbox rename", "mailbox rename USER NAME NEWNAME", CLI_OPTS_STORE, 3, 3},
    {"mailbox delete", "mailbox delete USER NAME", CLI_OPTS_STORE, 2, 2},
    {"mailbox subscribe", "mailbox subscribe USER NAME", CLI_OPTS_STORE, 2, 2},
    {"mailbox unsubscribe", "mailbox unsubscribe USER NAME", CLI_OPTS_STORE, 2, 2},
};
#define CLI_MAILBOX_SPEC_COUNT (sizeof cli_mailbox_specs / sizeof cli_mailbox_specs[0])

static void cli_mailbox_print_human(const struct mv_mailbox_info *info, int first)
{
    if (first) {
        printf("%8s %8s %12s %12s %11s %8s %13s %3s %-9s %s\n", "MESSAGES", "UNSEEN", "SIZE",
               "STORED", "UIDVALIDITY", "UIDNEXT", "HIGHESTMODSEQ", "SUB", "SPECIAL", "NAME");
    }
    printf("%8lu %8lu %12llu %12llu %11lu %8lu %13llu %3s ", (unsigned long)info->messages,
           (unsigned long)info->unseen, (unsigned long long)info->size_bytes,
           (unsigned long long)info->stored_bytes, (unsigned long)info->uidvalidity,
           (unsigned long)info->uidnext, (unsigned long long)info->highestmodseq,
           info->subscribed ? "yes" : "no");
    cli_text_print(stdout, info->special_use != NULL ? info->special_use : "-", 9, 9);
    fputc(' ', stdout);
    cli_text_print(stdout, info->name, 0, 0);
    fputc('\n', stdout);
}

static void cli_mailbox_print_json(struct cli_json *json, const struct mv_mailbox_info *info)
{
    cli_json_object_begin(json);
    cli_json_key(json, "name");
    cli_json_string(json, info->name);
    cli_json_key(json, "messages");
    cli_json_uint(json, info->messages);
    cli_json_key(json, "unseen");
    cli_json_uint(json, info->unseen);
    cli_json_key(json, "size_bytes");
    cli_json_uint(json, info->size_bytes);
    cli_json_key(json, "stored_bytes");
    cli_json_uint(json, info->stored_bytes);
    cli_json_key(json, "uidvalidity");
    cli_json_uint(json, info->uidvalidity);
    cli_json_key(json, "uidnext");
    cli_json_uint(json, info->uidnext);
    cli_json_key(json, "highestmodseq");
    cli_json_uint(json, info->highestmodseq);
    cli_json_key(json, "special_use");
    cli_json_string(json, info->special_use);
    cli_json_key(json, "subscribed");
    cli_json_bool(json, info->subscribed);
    cli_json_object_end(json);
}

/* Prints every mailbox; on a failure the JSON array stays open (see cli_message_print.c). */
static int cli_mailbox_print_all(mv_store *store, int json_wanted)
{
    mv_mailbox_iter *iter = NULL;
    int mv_rc = mv_mailbox_list_begin(store, &iter);
    if (mv_rc != MV_OK) {
        return cli_store_fail(store, mv_rc);
    }
    struct cli_json json;
    cli_json_init(&json, stdout);
    if (json_wanted) {
        cli_json_document_begin(&json, stdout);
        cli_json_key(&json, "mailboxes");
        cli_json_array_begin(&json);
    }
    struct mv_mailbox_info info;
    int next = 0;
    for (int first = 1; (next = mv_mailbox_list_next(iter, &info)) > 0; first = 0) {
        if (json_wanted) {
            cli_mailbox_print_json(&json, &info);
        } else {
            cli_mailbox_print_human(&info, first);
        }
    }
    mv_mailbox_list_end(&iter);
    if (next < 0) {
        (void)cli_store_flush_stdout();
        return cli_store_fail(store, next);
    }
    if (json_wanted) {
        cli_json_array_end(&json);
        cli_json_object_end(&json);
        if (cli_json_finish(&json) != 0) {
            cli_error("cannot write the JSON output");
            return CLI_EXIT_IOERR;
        }
    }
    return cli_store_flush_stdout();
}

int cli_mailbox_list_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_mailbox_list_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    rc = cli_mailbox_print_all(store, cli_args_has(&args, CLI_OPT_JSON));
    mv_store_close(&store);
    return rc;
}

/* Runs the sub-command spec_index on the open store. */
static int cli_mailbox_apply(mv_store *store, size_t spec_index, const struct cli_args *args)
{
    const char *name = args->positional[1];
    switch (spec_index) {
    case 0:
        return mv_mailbox_create(store, name, args->value[CLI_OPT_SPECIAL_USE]);
    case 1:
        return mv_mailbox_rename(store, name, args->positional[2]);
    case 2: {
        int rc = mv_mailbox_delete(store, name);
        return rc == MV_OK ? mv_store_purge(store, 0, NULL) : rc; /* its bodies' bytes too */
    }
    default:
        return mv_mailbox_subscribe(store, name, spec_index == 3);
    }
}

static void cli_mailbox_usage(FILE *out)
{
    fputs("usage:\n", out);
    for (size_t i = 0; i < CLI_MAILBOX_SPEC_COUNT; i++) {
        fprintf(out, "  mailvault %s\n", cli_mailbox_specs[i].synopsis);
    }
    fputs("('mailvault mailbox SUBCOMMAND --help' lists its options)\n", out);
}

int cli_mailbox_main(int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : "";
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        cli_mailbox_usage(stdout);
        return CLI_EXIT_OK;
    }
    size_t index = 0;
    while (index < CLI_MAILBOX_SPEC_COUNT &&
           strcmp(cli_mailbox_specs[index].name + strlen("mailbox "), sub) != 0) {
        index++;
    }
    if (index == CLI_MAILBOX_SPEC_COUNT) {
        cli_error("mailbox: unknown sub-command '%s'", sub);
        cli_mailbox_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    struct cli_args args;
    int rc = cli_args_parse(argc - 1, argv + 1, &cli_mailbox_specs[index], &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    int mv_rc = cli_mailbox_apply(store, index, &args);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    }
    mv_store_close(&store);
    return rc;
}
