/*
 * cli_store.c -- from USER, --root and a password source to an open store.
 *
 * USAGE
 *   mv_store *store = NULL;
 *   int rc = cli_store_open_user(&args, 0, &store);   (USER is args.positional[0])
 *   if (rc != CLI_EXIT_OK) return rc;
 *   ... mv_*(store, ...) ..., on failure: return cli_store_fail(store, mv_rc);
 *   mv_store_close(&store);
 *
 * IMPLEMENTATION NOTES
 *   The address is checked with mv_address_normalize() before anything else happens, and
 *   the store's file is looked for (ROOT/<domain>/<localpart>.db, as include/mailvault.h
 *   lays it out) before a password is asked for: a typo in USER is reported at once, not
 *   after a prompt and a key derivation. The tool itself never creates a directory; only
 *   the library does (mv_store_init), after validating the address.
 *   The root is resolved here (--root, $MAILVAULT_ROOT, ./var/mail) and passed to the
 *   library explicitly, so the path checked and the path opened are the same.
 *   $MAILVAULT_KDF_ITER sets the KDF iterations: for tests only, which would otherwise
 *   spend most of their time deriving keys. It must be the same for every command on a
 *   store, since the iteration count is not recorded in the file.
 *   The password buffer is wiped right after mv_store_open()/mv_store_init() returns.
 *   A message the store holds after a successful open (the queue drain rejected a file) is
 *   printed as "mailvault: warning: ..." and does not change the exit status.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CLI_STORE_ROOT_DEFAULT "./var/mail"

int cli_store_fail_msg(const char *errmsg, int code)
{
    int has_detail = errmsg != NULL && errmsg[0] != '\0';
    cli_error("%s", has_detail ? errmsg : mv_strerror(code));
    return cli_exit_code(code);
}

int cli_store_fail(mv_store *store, int code)
{
    return cli_store_fail_msg(store != NULL ? mv_store_errmsg(store) : NULL, code);
}

const char *cli_store_mailbox(const struct cli_args *args)
{
    const char *mailbox = args->value[CLI_OPT_MAILBOX];
    return mailbox != NULL ? mailbox : "INBOX";
}

int cli_store_flush_stdout(void)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int e = errno;
        cli_error("cannot write to standard output: %s", strerror(e));
        return cli_exit_errno(e, CLI_EXIT_IOERR);
    }
    return CLI_EXIT_OK;
}

/* --root, $MAILVAULT_ROOT or the default, into target->root. */
static int cli_store_root(const struct cli_args *args, struct cli_store_target *target)
{
    const char *root = args->value[CLI_OPT_ROOT];
    if (root != NULL && root[0] == '\0') {
        return cli_args_usage_error(args, "--root: empty directory name");
    }
    if (root == NULL) {
        root = getenv("MAILVAULT_ROOT");
    }
    if (root == NULL || root[0] == '\0') {
        root = CLI_STORE_ROOT_DEFAULT;
    }
    size_t length = strlen(root);
    if (length >= sizeof target->root) {
        cli_error("the root directory name is longer than %d bytes", MV_PATH_MAX - 1);
        return root == args->value[CLI_OPT_ROOT] ? CLI_EXIT_USAGE : CLI_EXIT_CONFIG;
    }
    memcpy(target->root, root, length + 1);
    return CLI_EXIT_OK;
}

int cli_store_root_dir(const struct cli_args *args, char *root, size_t root_size)
{
    static struct cli_store_target scratch; /* one command per process */
    int rc = cli_store_root(args, &scratch);
    if (rc == CLI_EXIT_OK) {
        snprintf(root, root_size, "%s", scratch.root);
    }
    return rc;
}

/* Limits and the test-only KDF setting. */
static int cli_store_limits(const struct cli_args *args, struct mv_store_options *opts)
{
    const char *kdf_iter = getenv("MAILVAULT_KDF_ITER");
    uint64_t value = 0;
    if (kdf_iter != NULL && kdf_iter[0] != '\0') {
        if (cli_args_parse_u64(kdf_iter, MV_KDF_ITER_MAX, &value) != 0 || value == 0) {
            cli_error("MAILVAULT_KDF_ITER: '%s' is not a number from 1 to %lu", kdf_iter,
                      (unsigned long)MV_KDF_ITER_MAX);
            return CLI_EXIT_CONFIG;
        }
        opts->kdf_iter = (uint32_t)value;
    }
    return cli_args_u64(args, CLI_OPT_MAX_MESSAGE_SIZE, 1, UINT64_MAX,
                        &opts->limits.message_size_max);
}

int cli_store_target(const struct cli_args *args, struct cli_store_target *target)
{
    static const struct mv_store_options defaults = MV_STORE_OPTIONS_INIT;
    memset(target, 0, sizeof *target);
    target->opts = defaults;
    char errmsg[256] = "";
    const char *user = args->positional[0];
    int mv_rc =
        mv_address_normalize(user, target->address, sizeof target->address, errmsg, sizeof errmsg);
    if (mv_rc != MV_OK) {
        return cli_store_fail_msg(errmsg, mv_rc);
    }
    int rc = cli_store_root(args, target);
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_limits(args, &target->opts);
    }
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    target->opts.root = target->root;
    const char *at = strrchr(target->address, '@'); /* normalised: exactly one '@' */
    int n = snprintf(target->db_path, sizeof target->db_path, "%s/%s/%.*s.db", target->root, at + 1,
                     (int)(at - target->address), target->address);
    if (n < 0 || (size_t)n >= sizeof target->db_path) {
        cli_error("the store path under %s is too long", target->root);
        return CLI_EXIT_DATA;
    }
    return CLI_EXIT_OK;
}

int cli_store_check(const struct cli_store_target *target, int must_exist)
{
    struct stat st;
    int exists = stat(target->db_path, &st) == 0;
    if (!exists && errno != ENOENT) {
        int e = errno;
        cli_error("%s: %s", target->db_path, strerror(e));
        return cli_exit_errno(e, CLI_EXIT_IOERR);
    }
    if (must_exist && !exists) {
        cli_error("no store for %s under %s (create it with 'mailvault init %s')", target->address,
                  target->root, target->address);
        return CLI_EXIT_NOUSER;
    }
    if (!must_exist && exists) {
        cli_error("the store of %s already exists (%s)", target->address, target->db_path);
        return CLI_EXIT_CANTCREAT;
    }
    return CLI_EXIT_OK;
}

int cli_store_open(const struct cli_args *args,
                   struct cli_store_target *target,
                   unsigned flags,
                   mv_store **out)
{
    *out = NULL;
    struct cli_password pw = {NULL, 0};
    int rc = cli_password_read(args->value[CLI_OPT_PASSWORD_FILE], 0, &pw);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    target->opts.flags = flags;
    char errmsg[512] = "";
    int mv_rc = mv_store_open(target->address, pw.bytes, pw.size_bytes, &target->opts, out, errmsg,
                              sizeof errmsg);
    cli_password_wipe(&pw);
    if (mv_rc != MV_OK) {
        mv_store_close(out); /* the header promises NULL on failure; do not rely on it */
        return cli_store_fail_msg(errmsg, mv_rc);
    }
    const char *warning = mv_store_errmsg(*out); /* e.g. a queue file the drain rejected */
    if (warning != NULL && warning[0] != '\0') {
        cli_error("warning: %s", warning);
    }
    return CLI_EXIT_OK;
}

int cli_store_open_user(const struct cli_args *args, unsigned flags, mv_store **out)
{
    *out = NULL;
    struct cli_store_target target;
    int rc = cli_store_target(args, &target);
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_check(&target, 1);
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_store_open(args, &target, flags, out);
    }
    return rc;
}
