/*
 * cli_passwd.c -- `mailvault passwd USER [--cipher chacha20] [--new-password-file FILE]`.
 *
 * USAGE
 *   mailvault passwd alice@example.org --password-file old.txt --new-password-file new.txt
 *   MAILVAULT_PASSWORD=... MAILVAULT_NEW_PASSWORD=... mailvault passwd alice@example.org
 *   mailvault passwd alice@example.org --cipher chacha20     (upgrade an aes256cbc store)
 *
 * IMPLEMENTATION NOTES
 *   The current password comes as for every command (--password-file, $MAILVAULT_PASSWORD,
 *   a prompt); the new one from --new-password-file, else $MAILVAULT_NEW_PASSWORD, else a
 *   prompt asked twice. Neither is ever on the command line. Both buffers are wiped as soon
 *   as mv_store_passwd() returns. The work, and its crash safety, is the library's
 *   (src/ops/ops_passwd.c).
 */
#include "cli.h"

#include <string.h>

static const struct cli_command_spec cli_passwd_spec = {
    "passwd", "passwd USER [--cipher chacha20] [--new-password-file FILE]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_CIPHER) | CLI_OPT(CLI_OPT_NEW_PASSWORD_FILE), 1, 1};

static int cli_passwd_options(const struct cli_args *args, struct mv_ops_options *ops)
{
    const char *cipher = args->value[CLI_OPT_CIPHER];
    if (cipher != NULL && (mv_cipher_from_name(cipher, &ops->cipher) != MV_OK ||
                           ops->cipher == MV_CIPHER_AUTO || ops->cipher == MV_CIPHER_NONE)) {
        return cli_args_usage_error(args, "--cipher: '%s' is not chacha20, aes256cbc or sqlcipher",
                                    cipher);
    }
    const char *old_file = args->value[CLI_OPT_PASSWORD_FILE];
    const char *new_file = args->value[CLI_OPT_NEW_PASSWORD_FILE];
    if (old_file != NULL && new_file != NULL && strcmp(old_file, "-") == 0 &&
        strcmp(new_file, "-") == 0) {
        return cli_args_usage_error(args, "only one of the passwords can come from stdin");
    }
    return CLI_EXIT_OK;
}

int cli_passwd_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_passwd_spec, &args);
    if (rc != CLI_EXIT_OK) {
        return cli_args_exit(rc);
    }
    struct mv_ops_options ops = MV_OPS_OPTIONS_INIT;
    struct cli_store_target target;
    rc = cli_passwd_options(&args, &ops);
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_target(&args, &target);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_check(&target, 1);
    }
    struct cli_password old_pw = {NULL, 0}, new_pw = {NULL, 0};
    if (rc == CLI_EXIT_OK) {
        rc = cli_password_read(args.value[CLI_OPT_PASSWORD_FILE], 0, &old_pw);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_password_read_new(args.value[CLI_OPT_NEW_PASSWORD_FILE], &new_pw);
    }
    if (rc != CLI_EXIT_OK) {
        cli_password_wipe(&old_pw);
        return rc;
    }
    struct cli_ops_progress progress;
    cli_progress_init(&progress.line);
    progress.command = "passwd";
    ops.progress = cli_ops_progress;
    ops.progress_arg = &progress;
    char errmsg[1024] = "";
    int mv_rc = mv_store_passwd(target.address, old_pw.bytes, old_pw.size_bytes, new_pw.bytes,
                                new_pw.size_bytes, &target.opts, &ops, errmsg, sizeof errmsg);
    cli_password_wipe(&old_pw);
    cli_password_wipe(&new_pw);
    cli_progress_finish(&progress.line);
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(errmsg, mv_rc);
    }
    printf("password changed for %s%s%s\n", target.address,
           ops.cipher != MV_CIPHER_AUTO ? "; cipher " : "",
           ops.cipher != MV_CIPHER_AUTO ? mv_cipher_name(ops.cipher) : "");
    return cli_store_flush_stdout();
}
