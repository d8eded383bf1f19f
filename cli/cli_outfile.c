/*
 * cli_outfile.c -- writing a message or an mbox to a file, whole or not at all.
 *
 * USAGE
 *   struct cli_outfile file;
 *   if ((rc = cli_outfile_open(&file, path)) != CLI_EXIT_OK) return rc;
 *   rc = cli_outfile_write(&file, bytes, size);            (or write to file.fd)
 *   rc = rc == CLI_EXIT_OK ? cli_outfile_commit(&file) : rc;
 *   cli_outfile_abort(&file);
 *
 * IMPLEMENTATION NOTES
 *   What PATH names decides how it is written:
 *   (1) "-" (or no --output): standard output, written directly; a failed write there is
 *       reported and the exit status says so.
 *   (2) a symbolic link: followed (up to CLI_OUTFILE_LINKS_MAX links, relative targets taken
 *       from the link's directory) to what it names, and that target is what (3)..(5) look
 *       at; the link itself is never replaced.
 *   (3) a regular file, or nothing yet: written as TARGET.XXXXXX beside it (mkstemp: mode
 *       0600, since it holds decrypted mail), fsync'd, and renamed over TARGET only when
 *       everything was written: an export that fails half-way (disk full, a damaged page)
 *       never leaves a truncated mbox that looks complete, and never destroys an older file.
 *   (4) a FIFO, a character or block device, a socket: opened and written in place
 *       (O_WRONLY, no O_CREAT, no O_TRUNC). Renaming a temporary file over such a name would
 *       replace the device node or pipe with a plain file (as root, --output /dev/null used
 *       to leave a 0600 regular file at /dev/null); a reader of a pipe or a device cannot
 *       be given "all or nothing" anyway.
 *   (5) a directory: refused.
 *
 * LIMITATIONS
 *   Between the lstat() that classifies TARGET and the rename, another process could put
 *   something else at that name; the tool is run by the operator on paths the operator
 *   chose, so this race is not defended against.
 */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* As the kernel's limit on nested links (ELOOP after 40). */
#define CLI_OUTFILE_LINKS_MAX 40

/* Follows symbolic links from path into target (MV_PATH_MAX bytes): target names the first
 * thing that is not a link (or does not exist, *st_out->st_mode is 0 then). Returns 0, or
 * an errno value. */
static int cli_outfile_resolve(const char *path, char *target, struct stat *st_out)
{
    size_t length = strlen(path);
    if (length >= MV_PATH_MAX) {
        return ENAMETOOLONG;
    }
    memcpy(target, path, length + 1);
    for (int links = 0; links <= CLI_OUTFILE_LINKS_MAX; links++) {
        if (lstat(target, st_out) != 0) {
            if (errno != ENOENT) {
                return errno;
            }
            memset(st_out, 0, sizeof *st_out);
            return 0;
        }
        if (!S_ISLNK(st_out->st_mode)) {
            return 0;
        }
        char link[MV_PATH_MAX];
        ssize_t n = readlink(target, link, sizeof link - 1);
        if (n < 0) {
            return errno;
        }
        link[n] = '\0';
        const char *slash = strrchr(target, '/');
        size_t dir_length = link[0] == '/' || slash == NULL ? 0 : (size_t)(slash - target) + 1;
        if (dir_length + (size_t)n >= MV_PATH_MAX) {
            return ENAMETOOLONG;
        }
        memmove(target + dir_length, link, (size_t)n + 1); /* keeps "dir/" of the link */
    }
    return ELOOP;
}

/* Case (4): writes in place into a FIFO or device. */
static int cli_outfile_open_in_place(struct cli_outfile *file, const char *path)
{
    file->fd = open(file->target, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (file->fd < 0) {
        int e = errno;
        cli_error("cannot open %s for writing: %s", path, strerror(e));
        file->fd = STDOUT_FILENO;
        return cli_exit_errno(e, CLI_EXIT_CANTCREAT);
    }
    file->path = path;
    file->in_place = 1;
    return CLI_EXIT_OK;
}

int cli_outfile_open(struct cli_outfile *file, const char *path)
{
    file->temp_path[0] = '\0';
    file->target[0] = '\0';
    file->path = NULL;
    file->in_place = 0;
    file->fd = STDOUT_FILENO;
    if (path == NULL || strcmp(path, "-") == 0) {
        return CLI_EXIT_OK;
    }
    struct stat st;
    int e = cli_outfile_resolve(path, file->target, &st);
    if (e != 0) {
        cli_error("%s: %s", path, strerror(e));
        return cli_exit_errno(e, CLI_EXIT_CANTCREAT);
    }
    if (S_ISDIR(st.st_mode)) {
        cli_error("%s: is a directory (give a file name)", path);
        return CLI_EXIT_CANTCREAT;
    }
    if (st.st_mode != 0 && !S_ISREG(st.st_mode)) {
        return cli_outfile_open_in_place(file, path);
    }
    int n = snprintf(file->temp_path, sizeof file->temp_path, "%s.XXXXXX", file->target);
    if (n < 0 || (size_t)n >= sizeof file->temp_path) {
        file->temp_path[0] = '\0';
        cli_error("%s: file name too long", path);
        return CLI_EXIT_CANTCREAT;
    }
    file->fd = mkstemp(file->temp_path);
    if (file->fd < 0) {
        e = errno;
        cli_error("cannot create %s: %s", file->temp_path, strerror(e));
        file->temp_path[0] = '\0';
        file->fd = STDOUT_FILENO;
        return cli_exit_errno(e, CLI_EXIT_CANTCREAT);
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
            int e = n < 0 ? errno : EIO;
            cli_error("cannot write to %s: %s", file->path != NULL ? file->path : "standard output",
                      n < 0 ? strerror(e) : "no progress");
            return cli_exit_errno(e, CLI_EXIT_IOERR);
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
    /* A pipe or a terminal cannot be fsync'd (EINVAL); only a real file's data must be. */
    int sync_rc = file->in_place ? 0 : fsync(file->fd);
    int saved_errno = errno;
    int close_rc = close(file->fd);
    file->fd = -1;
    if (sync_rc != 0 || close_rc != 0) {
        int e = sync_rc != 0 ? saved_errno : errno;
        cli_error("cannot write %s: %s", file->path, strerror(e));
        rc = cli_exit_errno(e, CLI_EXIT_IOERR);
    } else if (file->in_place) {
        return CLI_EXIT_OK;
    } else if (rename(file->temp_path, file->target) != 0) {
        int e = errno;
        cli_error("cannot rename %s to %s: %s", file->temp_path, file->target, strerror(e));
        rc = cli_exit_errno(e, CLI_EXIT_CANTCREAT);
    } else {
        file->temp_path[0] = '\0'; /* renamed: nothing left to remove */
    }
    return rc;
}

void cli_outfile_abort(struct cli_outfile *file)
{
    if (file->path == NULL) {
        return;
    }
    if (file->fd >= 0) {
        close(file->fd);
        file->fd = -1;
    }
    if (file->temp_path[0] != '\0') {
        (void)unlink(file->temp_path);
        file->temp_path[0] = '\0';
    }
}
