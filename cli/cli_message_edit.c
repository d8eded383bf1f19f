/*
 * cli_message_edit.c -- `mailvault flags`, `copy`, `move` and `expunge`: changing messages.
 *
 * USAGE
 *   mailvault flags USER UIDSET [--mailbox NAME] (--add|--remove|--set) FLAGS...
 *   mailvault copy USER UIDSET DEST [--mailbox SRC]
 *   mailvault move USER UIDSET DEST [--mailbox SRC]
 *   mailvault expunge USER [--mailbox NAME] [UIDSET]
 *
 * IMPLEMENTATION NOTES
 *   UIDSET is IMAP syntax ("1", "3:7", "1,4:6,9:*") and is checked by the library, which
 *   reports a malformed set as an error of the run (exit 1). Each command is one library
 *   call, hence one transaction: all the named messages change, or none. Each prints one
 *   line with the count the library returned.
 */
#include "cli.h"

static const struct cli_command_spec cli_message_flags_spec = {
    "flags", "flags USER UIDSET [--mailbox NAME] (--add|--remove|--set) FLAGS...",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX) | CLI_OPT(CLI_OPT_ADD) | CLI_OPT(CLI_OPT_REMOVE) |
        CLI_OPT(CLI_OPT_SET),
    2, -1};

static const struct cli_command_spec cli_message_copy_spec = {
    "copy", "copy USER UIDSET DEST [--mailbox SRC]", CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX), 3,
    3};

static const struct cli_command_spec cli_message_move_spec = {
    "move", "move USER UIDSET DEST [--mailbox SRC]", CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX), 3,
    3};

static const struct cli_command_spec cli_message_expunge_spec = {
    "expunge", "expunge USER [--mailbox NAME] [UIDSET]", CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX),
    1, 2};

/* The one mode option given, as MV_FLAGS_*; -1 after a usage error. */
static int cli_message_flags_mode(const struct cli_args *args)
{
    int add = cli_args_has(args, CLI_OPT_ADD), remove = cli_args_has(args, CLI_OPT_REMOVE),
        set = cli_args_has(args, CLI_OPT_SET);
    if (add + remove + set != 1) {
        cli_args_usage_error(args, "give exactly one of --add, --remove, --set");
        return -1;
    }
    if (!set && args->positional_count < 3) {
        cli_args_usage_error(args, "no FLAGS given");
        return -1;
    }
    return add ? MV_FLAGS_ADD : remove ? MV_FLAGS_REMOVE : MV_FLAGS_REPLACE;
}

static int
cli_message_flags_apply(const struct cli_args *args, int mode, const struct cli_flags *flags)
{
    mv_store *store = NULL;
    int rc = cli_store_open_user(args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    uint32_t changed = 0;
    int mv_rc = mv_flags_set(store, cli_store_mailbox(args), args->positional[1], mode, flags->bits,
                             flags->keywords, &changed);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    } else {
        printf("%lu message%s changed\n", (unsigned long)changed, changed == 1 ? "" : "s");
        rc = cli_store_flush_stdout();
    }
    mv_store_close(&store);
    return rc;
}

int cli_message_flags_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_message_flags_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    int mode = cli_message_flags_mode(&args);
    if (mode < 0) {
        return CLI_EXIT_USAGE;
    }
    struct cli_flags flags = {0, NULL, 0};
    for (int i = 2; rc == CLI_EXIT_OK && i < args.positional_count; i++) {
        rc = cli_flags_add(&flags, args.positional[i]);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_message_flags_apply(&args, mode, &flags);
    }
    cli_flags_free(&flags);
    return rc;
}

int cli_message_copy_main(int argc, char **argv)
{
    int is_move = argv[0][0] == 'm';
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, is_move ? &cli_message_move_spec : &cli_message_copy_spec,
                            &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    const char *from = cli_store_mailbox(&args), *set = args.positional[1],
               *to = args.positional[2];
    uint32_t count = 0;
    int mv_rc = is_move ? mv_message_move(store, from, set, to, &count)
                        : mv_message_copy(store, from, set, to, &count);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    } else {
        printf("%s %lu message%s to ", is_move ? "moved" : "copied", (unsigned long)count,
               count == 1 ? "" : "s");
        cli_text_print(stdout, to, 0, 0);
        fputc('\n', stdout);
        rc = cli_store_flush_stdout();
    }
    mv_store_close(&store);
    return rc;
}

int cli_message_expunge_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_message_expunge_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    const char *mailbox = cli_store_mailbox(&args);
    const char *set = args.positional_count > 1 ? args.positional[1] : NULL;
    uint32_t count = 0;
    int mv_rc = mv_mailbox_expunge(store, mailbox, set, &count);
    if (mv_rc == MV_OK) { /* the bodies' bytes and index rows too, before the command ends */
        mv_rc = mv_store_purge(store, 0, NULL);
    }
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    } else {
        printf("expunged %lu message%s from ", (unsigned long)count, count == 1 ? "" : "s");
        cli_text_print(stdout, mailbox, 0, 0);
        fputc('\n', stdout);
        rc = cli_store_flush_stdout();
    }
    mv_store_close(&store);
    return rc;
}
