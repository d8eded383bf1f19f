/*
 * cli_export.c -- `mailvault export USER --mbox`: a mailbox as an mbox file.
 *
 * USAGE
 *   mailvault export USER --mbox [--mailbox NAME] [--output FILE|-]
 *
 * IMPLEMENTATION NOTES
 *   --mbox names the format and is required, so that other formats can be added without
 *   changing what an existing command line means. mv_export_mbox() writes straight to the
 *   descriptor (mboxrd quoting, "From " lines with the internal date); to a FILE it goes
 *   through cli_outfile, so the file appears (mode 0600: it is decrypted mail) only once it
 *   is complete. With --output FILE a line "exported N messages to FILE" goes to stdout;
 *   with stdout as the output nothing else is printed there.
 */
#include "cli.h"

static const struct cli_command_spec cli_export_spec = {
    "export", "export USER --mbox [--mailbox NAME] [--output FILE|-]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MBOX) | CLI_OPT(CLI_OPT_MAILBOX) | CLI_OPT(CLI_OPT_OUTPUT), 1,
    1};

static int cli_export_run(mv_store *store, const char *mailbox, const char *output)
{
    struct cli_outfile file;
    int rc = cli_outfile_open(&file, output);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    uint32_t count = 0;
    int mv_rc = mv_export_mbox(store, mailbox, file.fd, &count);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    } else {
        rc = cli_outfile_commit(&file);
    }
    cli_outfile_abort(&file);
    if (rc == CLI_EXIT_OK && file.path != NULL) {
        printf("exported %lu message%s to ", (unsigned long)count, count == 1 ? "" : "s");
        cli_text_print(stdout, file.path, 0, 0);
        fputc('\n', stdout);
        rc = cli_store_flush_stdout();
    }
    return rc;
}

int cli_export_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_export_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    if (!cli_args_has(&args, CLI_OPT_MBOX)) {
        return cli_args_usage_error(&args, "give the format: --mbox");
    }
    mv_store *store = NULL;
    rc = cli_store_open_user(&args, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    rc = cli_export_run(store, cli_store_mailbox(&args), args.value[CLI_OPT_OUTPUT]);
    mv_store_close(&store);
    return rc;
}
