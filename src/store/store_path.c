/*
 * store_path.c -- from an e-mail address to the store's files, safely.
 *
 * A store's paths are built from a user-supplied address, so the address is validated
 * before any path exists: exactly one '@', no '/', '\\', "..", NUL, control characters or
 * spaces, no leading '.' or '-' in either part, bounded lengths. The domain is lowercased;
 * the local part is kept as given (RFC 5321 leaves its case to the receiving system).
 */
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STORE_LOCALPART_MAX 64
#define STORE_DOMAIN_MAX    253

__attribute__((format(printf, 3, 4))) static int
store_path_error(char *errmsg, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (errmsg != NULL && size > 0) {
        vsnprintf(errmsg, size, fmt, ap);
    }
    va_end(ap);
    return MV_EINVAL;
}

static int store_address_part_ok(const char *p, size_t n, const char **why)
{
    if (n == 0) {
        *why = "an empty local part or domain";
        return 0;
    }
    if (p[0] == '.' || p[0] == '-') {
        *why = "a part that starts with '.' or '-'";
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f || c == ' ' || c == '/' || c == '\\' || c == '@') {
            *why = "a control character, space, '/', '\\\\' or second '@'";
            return 0;
        }
        if (c == '.' && i + 1 < n && p[i + 1] == '.') {
            *why = "\"..\"";
            return 0;
        }
    }
    return 1;
}

int mv_address_normalize(
    const char *address, char *out, size_t out_size, char *errmsg, size_t errmsg_size)
{
    if (address == NULL || out == NULL || out_size < 2) {
        return store_path_error(errmsg, errmsg_size, "invalid address");
    }
    size_t len = strlen(address);
    const char *at = strrchr(address, '@');
    if (len > MV_ADDRESS_MAX || at == NULL) {
        return store_path_error(errmsg, errmsg_size,
                                "invalid address \"%.80s\": want local@domain, at most 320 bytes",
                                address);
    }
    size_t local_len = (size_t)(at - address), domain_len = len - local_len - 1;
    const char *why = NULL;
    if (local_len > STORE_LOCALPART_MAX || domain_len > STORE_DOMAIN_MAX) {
        why = "a local part over 64 bytes or a domain over 253 bytes";
    } else if (!store_address_part_ok(address, local_len, &why) ||
               !store_address_part_ok(at + 1, domain_len, &why)) {
        /* why is set */
    } else if (address[local_len - 1] == '.' || at[domain_len] == '.') {
        why = "a part that ends with '.'";
    }
    if (why != NULL) {
        char msg[200];
        snprintf(msg, sizeof msg, "invalid address: it has %s", why);
        return store_path_error(errmsg, errmsg_size, "%s", msg);
    }
    if (len + 1 > out_size) {
        return store_path_error(errmsg, errmsg_size, "address too long");
    }
    memcpy(out, address, local_len + 1);
    for (size_t i = 0; i < domain_len; i++) {
        char c = at[1 + i];
        out[local_len + 1 + i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    out[len] = '\0';
    return MV_OK;
}

int store_paths_resolve(const char *address,
                        const struct mv_store_options *opts,
                        struct store_paths *out,
                        char *errmsg,
                        size_t errmsg_size)
{
    int rc = mv_address_normalize(address, out->address, sizeof out->address, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    const char *root = opts != NULL ? opts->root : NULL;
    if (root == NULL || root[0] == '\0') {
        root = getenv("MAILVAULT_ROOT");
    }
    if (root == NULL || root[0] == '\0') {
        root = "./var/mail";
    }
    const char *at = strrchr(out->address, '@');
    int local_len = (int)(at - out->address);
    int n1 = snprintf(out->domain_dir, sizeof out->domain_dir, "%s/%s", root, at + 1);
    int n2 = snprintf(out->db_path, sizeof out->db_path, "%s/%.*s.db", out->domain_dir, local_len,
                      out->address);
    int n3 = snprintf(out->tmp_dir, sizeof out->tmp_dir, "%s/tmp", out->domain_dir);
    int n4 = snprintf(out->pub_path, sizeof out->pub_path, "%s/%.*s.pub", out->domain_dir,
                      local_len, out->address);
    int n5 = snprintf(out->queue_dir, sizeof out->queue_dir, "%s/%.*s.queue", out->domain_dir,
                      local_len, out->address);
    if (n1 < 0 || n2 < 0 || n3 < 0 || n4 < 0 || n5 < 0 || (size_t)n2 >= sizeof out->db_path ||
        (size_t)n5 >= sizeof out->queue_dir || (size_t)n4 >= sizeof out->pub_path) {
        return store_path_error(errmsg, errmsg_size, "the store path is too long (root %.200s)",
                                root);
    }
    return MV_OK;
}

int store_mkdirs(const char *dir, char *errmsg, size_t errmsg_size)
{
    char path[MV_PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) {
        return store_path_error(errmsg, errmsg_size, "invalid directory");
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') {
            continue;
        }
        char saved = path[i];
        path[i] = '\0';
        struct stat st;
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            int e = errno;
            path[i] = saved;
            if (errmsg != NULL) {
                snprintf(errmsg, errmsg_size, "cannot create %s: %s", dir, strerror(e));
            }
            return e == ENOSPC ? MV_ENOSPC : MV_EIO;
        }
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            path[i] = saved;
            return store_path_error(errmsg, errmsg_size, "%s is not a directory", dir);
        }
        path[i] = saved;
    }
    return MV_OK;
}

int store_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return MV_EIO;
    }
    int rc = fsync(fd) == 0 ? MV_OK : MV_EIO;
    close(fd);
    return rc;
}

/* ---- what a watcher of the store looks at ------------------------------------------------ */

int mv_store_watch_target(const char *address,
                          const struct mv_store_options *opts,
                          char *dir_out,
                          size_t dir_size,
                          char *name_out,
                          size_t name_size)
{
    if (dir_out == NULL || name_out == NULL || dir_size == 0 || name_size == 0) {
        return MV_EINVAL;
    }
    dir_out[0] = '\0';
    name_out[0] = '\0';
    struct store_paths paths;
    int rc = store_paths_resolve(address, opts, &paths, NULL, 0);
    if (rc != MV_OK) {
        return rc;
    }
    /* db_path is domain_dir "/" <local>.db (store_paths_resolve). */
    const char *name = paths.db_path + strlen(paths.domain_dir) + 1;
    int n1 = snprintf(dir_out, dir_size, "%s", paths.domain_dir);
    int n2 = snprintf(name_out, name_size, "%s", name);
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= dir_size || (size_t)n2 >= name_size) {
        dir_out[0] = '\0';
        name_out[0] = '\0';
        return MV_EINVAL;
    }
    return MV_OK;
}

int mv_store_watch_match(const char *name, const char *entry)
{
    if (name == NULL || entry == NULL || name[0] == '\0') {
        return 0;
    }
    size_t n = strlen(name);
    /* (1) the database itself: a checkpoint writes it, a restore or import renames onto it
     * (2) its WAL, which every commit writes (SQLite deletes it when the last connection
     * closes and makes a new one at the next write, hence a watch on the directory). Not
     * "-shm": readers write their read marks into it, so it changes on reads too. */
    return strncmp(entry, name, n) == 0 && (entry[n] == '\0' || strcmp(entry + n, "-wal") == 0);
}
