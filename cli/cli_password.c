/*
 * cli_password.c -- where the tool gets the database password from.
 *
 * USAGE
 *   struct cli_password pw = {0};
 *   if (cli_password_read(opts.password_file, create, &pw) != CLI_EXIT_OK) ... ;
 *   rc = mv_db_open(path, pw.bytes, pw.size_bytes, ...);
 *   cli_password_wipe(&pw);
 *
 * IMPLEMENTATION NOTES
 *   Sources, first match wins: --password-file FILE ("-" is stdin), $MAILVAULT_PASSWORD, a
 *   prompt on the terminal when stdin is one. Never argv: other users can read it in /proc.
 *   Files are read with read(2), not stdio, so no FILE buffer keeps a copy of the password;
 *   the one buffer is malloc'd, wiped with OPENSSL_cleanse and freed by cli_password_wipe().
 *
 * LIMITATIONS
 *   MAILVAULT_PASSWORD is wiped from this process's environment once read, but it was there
 *   from exec until then, and stays in the environment of the shell that set it. Prefer a
 *   file.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The buffer: the limit, plus "\r\n", plus one byte that proves the input was longer. */
#define CLI_PASSWORD_CAPACITY_BYTES (CLI_PASSWORD_BYTES_MAX + 3)

void cli_password_wipe(struct cli_password *pw)
{
    if (pw->bytes != NULL) {
        OPENSSL_cleanse(pw->bytes, CLI_PASSWORD_CAPACITY_BYTES);
        free(pw->bytes);
    }
    pw->bytes = NULL;
    pw->size_bytes = 0;
}

/* Reads fd to its end or until the buffer is full. Returns 0 or -1 (errno set). */
static int cli_password_read_fd(int fd, struct cli_password *pw)
{
    while (pw->size_bytes < CLI_PASSWORD_CAPACITY_BYTES) {
        ssize_t n =
            read(fd, pw->bytes + pw->size_bytes, CLI_PASSWORD_CAPACITY_BYTES - pw->size_bytes);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            break;
        }
        pw->size_bytes += (size_t)n;
    }
    return 0;
}

static int cli_password_from_file(const char *path, struct cli_password *pw)
{
    int is_stdin = strcmp(path, "-") == 0;
    int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        cli_error("%s: %s", path, strerror(e));
        return cli_exit_errno(e, CLI_EXIT_NOINPUT);
    }
    int rc = cli_password_read_fd(fd, pw);
    int saved_errno = errno;
    if (!is_stdin) {
        close(fd);
    }
    if (rc != 0) {
        cli_error("%s: %s", is_stdin ? "standard input" : path, strerror(saved_errno));
        return cli_exit_errno(saved_errno, CLI_EXIT_IOERR);
    }
    /* Strip exactly one line ending: "\n" or "\r\n". */
    if (pw->size_bytes > 0 && pw->bytes[pw->size_bytes - 1] == '\n') {
        pw->size_bytes--;
        if (pw->size_bytes > 0 && pw->bytes[pw->size_bytes - 1] == '\r') {
            pw->size_bytes--;
        }
    }
    return CLI_EXIT_OK;
}

/* Copies the variable's value, then wipes it where it lives (the process's initial
 * environment, which /proc/PID/environ shows for as long as the process runs) and removes
 * the variable, so the buffer is the one copy left. (C leaves writing through getenv()'s
 * pointer undefined; on the POSIX systems this tool supports it is the environment's own
 * writable memory.) */
static int cli_password_from_env(const char *name, char *value, struct cli_password *pw)
{
    size_t length = strlen(value);
    size_t copied = length > CLI_PASSWORD_BYTES_MAX ? CLI_PASSWORD_BYTES_MAX + 1 : length;
    memcpy(pw->bytes, value, copied); /* one byte over the limit is enough to refuse it */
    pw->size_bytes = copied;
    OPENSSL_cleanse(value, length);
    (void)unsetenv(name);
    return CLI_EXIT_OK;
}

/* Prompts once, or twice with confirm, and requires the two answers to match. */
static int cli_password_from_tty(int confirm,
                                 const char *prompt,
                                 const char *prompt_again,
                                 struct cli_password *pw)
{
    int rc = cli_tty_read_password(prompt, pw->bytes, CLI_PASSWORD_BYTES_MAX, &pw->size_bytes);
    if (rc != CLI_EXIT_OK || !confirm || pw->size_bytes == 0) {
        return rc;
    }
    char *again = malloc(CLI_PASSWORD_BYTES_MAX);
    if (again == NULL) {
        cli_error("out of memory");
        return CLI_EXIT_OSERR;
    }
    size_t again_size = 0;
    rc = cli_tty_read_password(prompt_again, again, CLI_PASSWORD_BYTES_MAX, &again_size);
    if (rc == CLI_EXIT_OK &&
        (again_size != pw->size_bytes || CRYPTO_memcmp(again, pw->bytes, again_size) != 0)) {
        cli_error("the passwords do not match");
        rc = CLI_EXIT_DATA;
    }
    OPENSSL_cleanse(again, CLI_PASSWORD_BYTES_MAX);
    free(again);
    return rc;
}

/* Picks the source and fills pw (already allocated). */
static int cli_password_from_source(const char *password_file, int confirm, struct cli_password *pw)
{
    if (password_file != NULL) {
        return cli_password_from_file(password_file, pw);
    }
    char *env = getenv("MAILVAULT_PASSWORD");
    if (env != NULL) {
        return cli_password_from_env("MAILVAULT_PASSWORD", env, pw);
    }
    if (isatty(STDIN_FILENO)) {
        return cli_password_from_tty(confirm, "Password: ", "Repeat password: ", pw);
    }
    cli_error("no password: use --password-file, MAILVAULT_PASSWORD or a terminal");
    return CLI_EXIT_NOPERM;
}

/* The checks every source shares; wipes pw on failure. */
static int cli_password_finish(int rc, struct cli_password *pw)
{
    if (rc == CLI_EXIT_OK && pw->size_bytes == 0) {
        cli_error("empty password refused");
        rc = CLI_EXIT_DATA;
    } else if (rc == CLI_EXIT_OK && pw->size_bytes > CLI_PASSWORD_BYTES_MAX) {
        cli_error("password longer than %d bytes refused", CLI_PASSWORD_BYTES_MAX);
        rc = CLI_EXIT_DATA;
    }
    if (rc != CLI_EXIT_OK) {
        cli_password_wipe(pw);
    }
    return rc;
}

static int cli_password_alloc(struct cli_password *pw)
{
    pw->size_bytes = 0;
    pw->bytes = malloc(CLI_PASSWORD_CAPACITY_BYTES);
    if (pw->bytes == NULL) {
        cli_error("out of memory");
        return CLI_EXIT_OSERR;
    }
    return CLI_EXIT_OK;
}

int cli_password_read(const char *password_file, int confirm, struct cli_password *pw)
{
    int rc = cli_password_alloc(pw);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    return cli_password_finish(cli_password_from_source(password_file, confirm, pw), pw);
}

int cli_password_read_new(const char *new_password_file, struct cli_password *pw)
{
    int rc = cli_password_alloc(pw);
    if (rc != CLI_EXIT_OK) {
        return rc;
    }
    rc = CLI_EXIT_NOPERM;
    char *env = getenv("MAILVAULT_NEW_PASSWORD");
    if (new_password_file != NULL) {
        rc = cli_password_from_file(new_password_file, pw);
    } else if (env != NULL) {
        rc = cli_password_from_env("MAILVAULT_NEW_PASSWORD", env, pw);
    } else if (isatty(STDIN_FILENO)) {
        rc = cli_password_from_tty(1, "New password: ", "Repeat new password: ", pw);
    } else {
        cli_error("no new password: use --new-password-file, MAILVAULT_NEW_PASSWORD or a "
                  "terminal");
    }
    if (rc == CLI_EXIT_OK && pw->size_bytes == 0) {
        cli_error("empty new password refused");
        rc = CLI_EXIT_DATA;
    }
    return cli_password_finish(rc, pw);
}
