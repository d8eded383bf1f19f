/*
 * cli_deliver.c -- `mailvault deliver`: one message into a user's store.
 *
 * USAGE
 *   mailvault deliver USER [--mailbox NAME] [--flags LIST] [--max-message-size BYTES]
 *                     [FILE|-]                    (with the password: appended at once)
 *   mailvault deliver USER --sealed [--max-message-size BYTES] [FILE|-]
 *                                                 (without it: queued for the next open)
 *
 * IMPLEMENTATION NOTES
 *   The message is read whole (from FILE, or stdin for "-" or no FILE) before the store is
 *   touched, but never more than message_size_max + 1 bytes: a larger input is refused
 *   without reading the rest, so a runaway pipe cannot fill memory. An empty input is
 *   refused on both paths (the sealed path and import refuse it in the library; the
 *   append path would store it), since it is always a mistake upstream. With --sealed no
 *   password is read at all: mv_deliver_sealed() encrypts the message to the store's public
 *   key and fsyncs it into the queue. Either way the exit status is 0 only after the library
 *   returned MV_OK, that is once the message is durable; a mail server may then accept
 *   responsibility for it. Nothing is printed on success.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLI_DELIVER_CHUNK_BYTES ((size_t)64 * 1024)

static const struct cli_command_spec cli_deliver_spec = {
    "deliver",
    "deliver USER [--mailbox NAME] [--flags LIST] [--sealed]\n"
    "                         [--max-message-size BYTES] [FILE|-]",
    CLI_OPTS_STORE | CLI_OPT(CLI_OPT_MAILBOX) | CLI_OPT(CLI_OPT_FLAGS) | CLI_OPT(CLI_OPT_SEALED) |
        CLI_OPT(CLI_OPT_MAX_MESSAGE_SIZE),
    1, 2};

struct cli_deliver_input {
    const char *name; /* for messages */
    unsigned char *bytes;
    size_t size_bytes;
    size_t capacity_bytes;
};

/* Reads fd to its end into input, refusing more than max_bytes. */
static int cli_deliver_read_fd(int fd, uint64_t max_bytes, struct cli_deliver_input *input)
{
    for (;;) {
        if (input->size_bytes == input->capacity_bytes) {
            size_t grown =
                input->capacity_bytes == 0 ? CLI_DELIVER_CHUNK_BYTES : input->capacity_bytes * 2;
            unsigned char *bigger = realloc(input->bytes, grown);
            if (bigger == NULL) {
                cli_error("out of memory reading %s", input->name);
                return CLI_EXIT_OSERR;
            }
            input->bytes = bigger;
            input->capacity_bytes = grown;
        }
        ssize_t n =
            read(fd, input->bytes + input->size_bytes, input->capacity_bytes - input->size_bytes);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            int e = errno;
            cli_error("cannot read %s: %s", input->name, strerror(e));
            return cli_exit_errno(e, CLI_EXIT_IOERR);
        }
        if (n == 0) {
            return CLI_EXIT_OK;
        }
        input->size_bytes += (size_t)n;
        if (input->size_bytes > max_bytes) {
            cli_error("%s: the message is larger than message_size_max (%llu bytes)", input->name,
                      (unsigned long long)max_bytes);
            return CLI_EXIT_DATA;
        }
    }
}

/* The message with CRLF line ends (mv_message_crlf): an MTA's pipe usually carries bare LFs,
 * and IMAP serves CRLF (RFC 3501 4.3; RFC822.SIZE counts the octets sent), so deliver stores
 * what import and LMTP store. */
static int cli_deliver_crlf(uint64_t max_bytes, struct cli_deliver_input *input)
{
    const size_t need = mv_message_crlf(input->bytes, input->size_bytes, NULL, 0);
    if (need == input->size_bytes) {
        return CLI_EXIT_OK;
    }
    if ((uint64_t)need > max_bytes) {
        cli_error("%s: the message is larger than message_size_max (%llu bytes) once its line "
                  "ends are CRLF (%zu bytes)",
                  input->name, (unsigned long long)max_bytes, need);
        return CLI_EXIT_DATA;
    }
    unsigned char *crlf = malloc(need);
    if (crlf == NULL) {
        cli_error("out of memory reading %s", input->name);
        return CLI_EXIT_OSERR;
    }
    input->size_bytes = mv_message_crlf(input->bytes, input->size_bytes, crlf, need);
    free(input->bytes);
    input->bytes = crlf;
    input->capacity_bytes = need;
    return CLI_EXIT_OK;
}

static int cli_deliver_read(const char *path, uint64_t max_bytes, struct cli_deliver_input *input)
{
    memset(input, 0, sizeof *input);
    int is_stdin = path == NULL || strcmp(path, "-") == 0;
    input->name = is_stdin ? "standard input" : path;
    int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        cli_error("%s: %s", path, strerror(e));
        return cli_exit_errno(e, CLI_EXIT_NOINPUT);
    }
    struct stat st;
    int rc = CLI_EXIT_OK;
    int have_stat = fstat(fd, &st) == 0;
    if (have_stat && S_ISDIR(st.st_mode)) {
        cli_error("%s: is a directory (use 'mailvault import' for a folder)", input->name);
        rc = CLI_EXIT_NOINPUT;
    } else if (have_stat && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max_bytes) {
        cli_error("%s: the message is larger than message_size_max (%llu bytes)", input->name,
                  (unsigned long long)max_bytes);
        rc = CLI_EXIT_DATA;
    } else {
        rc = cli_deliver_read_fd(fd, max_bytes, input);
    }
    if (rc == CLI_EXIT_OK && input->size_bytes == 0) {
        cli_error("%s: an empty message is not mail; nothing delivered", input->name);
        rc = CLI_EXIT_DATA;
    }
    if (rc == CLI_EXIT_OK) {
        rc = cli_deliver_crlf(max_bytes, input);
    }
    if (!is_stdin) {
        close(fd);
    }
    return rc;
}

/* The options that make no sense together. */
static int cli_deliver_check(const struct cli_args *args, const char *path)
{
    int from_stdin = path == NULL || strcmp(path, "-") == 0;
    const char *password_file = args->value[CLI_OPT_PASSWORD_FILE];
    if (cli_args_has(args, CLI_OPT_SEALED) &&
        (password_file != NULL || cli_args_has(args, CLI_OPT_MAILBOX) ||
         cli_args_has(args, CLI_OPT_FLAGS))) {
        return cli_args_usage_error(args, "--sealed takes no password, --mailbox or --flags "
                                          "(sealed mail goes to INBOX, unflagged)");
    }
    if (from_stdin && password_file != NULL && strcmp(password_file, "-") == 0) {
        return cli_args_usage_error(args, "the message and the password cannot both come "
                                          "from standard input");
    }
    return CLI_EXIT_OK;
}

static int cli_deliver_append(const struct cli_args *args,
                              struct cli_store_target *target,
                              const struct cli_flags *flags,
                              const struct cli_deliver_input *input)
{
    mv_store *store = NULL;
    int rc = cli_store_open(args, target, 0, &store);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    uint32_t uid = 0;
    int mv_rc = mv_message_append(store, cli_store_mailbox(args), input->bytes, input->size_bytes,
                                  flags->bits, flags->keywords, 0, &uid);
    if (mv_rc != MV_OK) {
        rc = cli_store_fail(store, mv_rc);
    }
    mv_store_close(&store);
    return rc;
}

static int cli_deliver_sealed(struct cli_store_target *target,
                              const struct cli_deliver_input *input)
{
    char errmsg[512] = "";
    int mv_rc = mv_deliver_sealed(target->address, input->bytes, input->size_bytes, &target->opts,
                                  errmsg, sizeof errmsg);
    mv_deliver_sealed_wipe(1); /* one delivery: its burst key is wiped before the exit */
    return mv_rc == MV_OK ? CLI_EXIT_OK : cli_store_fail_msg(errmsg, mv_rc);
}

/* An MTA that runs deliver keeps (defers) the message on EX_TEMPFAIL and bounces it on any
 * other failure: a failure that may pass (an I/O error, memory, an unclassified one) must
 * not bounce mail, so it becomes CLI_EXIT_TEMPFAIL. */
static int cli_deliver_exit(int rc)
{
    if (rc == CLI_EXIT_IOERR || rc == CLI_EXIT_OSERR || rc == CLI_EXIT_ERROR) {
        return CLI_EXIT_TEMPFAIL;
    }
    return rc;
}

int cli_deliver_main(int argc, char **argv)
{
    struct cli_args args;
    int rc = cli_args_parse(argc, argv, &cli_deliver_spec, &args);
    const char *path = args.positional_count > 1 ? args.positional[1] : NULL;
    rc = rc == CLI_EXIT_OK ? cli_deliver_check(&args, path) : rc;
    struct cli_flags flags = {0, NULL, 0};
    if (rc == CLI_EXIT_OK && cli_args_has(&args, CLI_OPT_FLAGS)) {
        rc = cli_flags_add(&flags, args.value[CLI_OPT_FLAGS]);
    }
    struct cli_store_target target;
    rc = rc == CLI_EXIT_OK ? cli_store_target(&args, &target) : rc;
    rc = rc == CLI_EXIT_OK ? cli_store_check(&target, 1) : rc;
    struct cli_deliver_input input = {NULL, NULL, 0, 0};
    rc = rc == CLI_EXIT_OK ? cli_deliver_read(path, target.opts.limits.message_size_max, &input)
                           : rc;
    if (rc == CLI_EXIT_OK) {
        rc = cli_args_has(&args, CLI_OPT_SEALED)
                 ? cli_deliver_sealed(&target, &input)
                 : cli_deliver_append(&args, &target, &flags, &input);
    }
    free(input.bytes);
    cli_flags_free(&flags);
    return cli_deliver_exit(cli_args_exit(rc));
}
