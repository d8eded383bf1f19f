/*
 * cli_outfile.c -- writing a message or an mbox to a file, whole or not at all.
 *
 * USAGE
 *   struct cli_outfile file;
 *   if (cli_outfile_open(&file, path) != CLI_EXIT_OK) return CLI_EXIT_ERROR;
 *   rc = cli_outfile_write(&file, bytes, size);            (or write to file.fd)
 *   rc = rc == CLI_EXIT_OK ? cli_outfile_commit(&file) : rc;
 *   cli_outfile_abort(&file);
 *
 * IMPLEMENTATION NOTES
 *   A file is written as PATH.XXXXXX (mkstemp: mode 0600, since it holds decrypted mail),
 *   fsync'd, and renamed over PATH only when everything was written: an export that fails
 *   half-way (disk full, a damaged page) never leaves a truncated mbox that looks complete,
 *   and never destroys an older PATH. Standard output ("-" or no --output) is written
 *   directly; a failed write there is reported and the exit status says so.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_outfile_open(struct cli_outfile *file, const char *path)
{
    file->temp_path[0] = '\0';
    file->path = NULL;
    file->fd = STDOUT_FILENO;
    if (path == NULL || strcmp(path, "-") == 0) {
        return CLI_EXIT_OK;
    }
    int n = snprintf(file->temp_path, sizeof file->temp_path, "%s.XXXXXX", path);
    if (n < 0 || (size_t)n >= sizeof file->temp_path) {
        file->temp_path[0] = '\0';
        cli_error("%s: file name too long", path);
        return CLI_EXIT_ERROR;
    }
    file->fd = mkstemp(file->temp_path);
    if (file->fd < 0) {
        cli_error("cannot create %s: %s", file->temp_path, strerror(errno));
        file->temp_path[0] = '\0';
        file->fd = STDOUT_FILENO;
        return CLI_EXIT_ERROR;
    }
    file->path = path;
    return CLI_EXIT_OK;
}

int cli_outfile_write(struct cli_outfile *file, const void *bytes, size_t size_bytes)
{
    const unsigned char *p = bytes;
    while (size_bytes > 0) {
        ssize_t n = write(file->fd, p, size_bytes);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            cli_error("cannot write to %s: %s", file->path != NULL ? file->path : "standard output",
                      n < 0 ? strerror(errno) : "no progress");
            return CLI_EXIT_ERROR;
        }
        p += n;
        size_bytes -= (size_t)n;
    }
    return CLI_EXIT_OK;
}

int cli_outfile_commit(struct cli_outfile *file)
{
    if (file->path == NULL) {
        return CLI_EXIT_OK;
    }
    int rc = CLI_EXIT_OK;
    int sync_rc = fsync(file->fd);
    int saved_errno = errno;
    int close_rc = close(file->fd);
    file->fd = -1;
    if (sync_rc != 0 || close_rc != 0) {
        cli_error("cannot write %s: %s", file->path, strerror(sync_rc != 0 ? saved_errno : errno));
        rc = CLI_EXIT_ERROR;
    } else if (rename(file->temp_path, file->path) != 0) {
        cli_error("cannot rename %s to %s: %s", file->temp_path, file->path, strerror(errno));
        rc = CLI_EXIT_ERROR;
    } else {
        file->temp_path[0] = '\0'; /* renamed: nothing left to remove */
    }
    return rc;
}

void cli_outfile_abort(struct cli_outfile *file)
{
    if (file->path == NULL || file->temp_path[0] == '\0') {
        return;
    }
    if (file->fd >= 0) {
        close(file->fd);
        file->fd = -1;
    }
    (void)unlink(file->temp_path);
    file->temp_path[0] = '\0';
}
