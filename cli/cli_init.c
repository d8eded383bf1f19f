/*
 * cli_init.c -- `mailvault init USER`: create a user's store.
 *
 * USAGE
 *   mailvault init USER [--root DIR] [--password-file FILE]
 *
 * IMPLEMENTATION NOTES
 *   The address is validated and an existing store reported before the password is asked
 *   for; on a terminal the password is asked twice. mv_store_init() creates the
 *   directories, the database, the default mailboxes and the delivery key pair, and leaves
 *   nothing behind when it fails. The password is wiped as soon as it returns.
 */
#include "cli.h"

static const struct cli_command_spec cli_init_spec = {"init", "init USER", CLI_OPTS_STORE, 1, 1};

int cli_init_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_init_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    struct cli_store_target target;
    rc = cli_store_target(&args, &target);
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_check(&target, 0);
    }
    struct cli_password pw = {NULL, 0};
    if (rc == CLI_EXIT_OK) {
        rc = cli_password_read(args.value[CLI_OPT_PASSWORD_FILE], 1, &pw);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    char errmsg[512] = "";
    int mv_rc =
        mv_store_init(target.address, pw.bytes, pw.size_bytes, &target.opts, errmsg, sizeof errmsg);
    cli_password_wipe(&pw);
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(errmsg, mv_rc);
    }
    printf("created the store of %s: %s\n", target.address, target.db_path);
    return cli_store_flush_stdout();
}
