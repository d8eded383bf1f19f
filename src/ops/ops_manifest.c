/*
 * ops_manifest.c -- the JSON manifest beside a backup snapshot.
 *
 * {
 *   "format": "mailvault-backup-1",
 *   "address": "alice@example.org",
 *   "file": "alice@example.org-20261130T141338.123Z.mvbackup",
 *   "size_bytes": 1228800,
 *   "sha256": "<64 lowercase hex digits>",
 *   "cipher": "chacha20",
 *   "page_size": 4096,
 *   "page_count": 300,
 *   "schema_version": 1,
 *   "messages": 120,
 *   "mailboxes": 6,
 *   "highestmodseq": 241,
 *   "uidnext_sum": 127,
 *   "created": 1796051618,
 *   "created_utc": "2026-11-30T14:13:38Z"
 * }
 *
 * IMPLEMENTATION NOTES
 *   The reader accepts what the writer writes: one flat object, string and unsigned
 *   integer values, keys found by name whatever their order. It is not a general JSON
 *   parser (no nesting, no floats); anything else is MV_ECORRUPT. A manifest is at most
 *   OPS_MANIFEST_BYTES_MAX bytes.
 */
#include "ops/ops_backup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OPS_MANIFEST_FORMAT    "mailvault-backup-1"
#define OPS_MANIFEST_BYTES_MAX 8192

/* Appends a JSON string (quotes and backslashes escaped; addresses hold no controls). */
static void ops_manifest_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            fputc('\\', f);
            fputc(*p, f);
        } else if (*p < 0x20) {
            fprintf(f, "\\u%04x", *p);
        } else {
            fputc(*p, f);
        }
    }
    fputc('"', f);
}

static void ops_manifest_fields(FILE *f, const struct mv_backup_info *info)
{
    const char *base = strrchr(info->path, '/');
    base = base != NULL ? base + 1 : info->path;
    char utc[32] = "";
    time_t t = (time_t)info->created;
    struct tm tm;
    if (gmtime_r(&t, &tm) != NULL) {
        strftime(utc, sizeof utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    fprintf(f, "{\n  \"format\": \"%s\",\n  \"address\": ", OPS_MANIFEST_FORMAT);
    ops_manifest_string(f, info->address);
    fputs(",\n  \"file\": ", f);
    ops_manifest_string(f, base);
    fprintf(f,
            ",\n  \"size_bytes\": %llu,\n  \"sha256\": \"%s\",\n  \"cipher\": \"%s\",\n"
            "  \"page_size\": %u,\n  \"page_count\": %llu,\n  \"schema_version\": %d,\n"
            "  \"messages\": %llu,\n  \"mailboxes\": %u,\n  \"highestmodseq\": %llu,\n"
            "  \"uidnext_sum\": %llu,\n  \"created\": %lld,\n  \"created_utc\": \"%s\"",
            (unsigned long long)info->size_bytes, info->sha256, mv_cipher_name(info->cipher),
            info->page_size, (unsigned long long)info->page_count, info->schema_version,
            (unsigned long long)info->messages, info->mailboxes,
            (unsigned long long)info->highestmodseq, (unsigned long long)info->uidnext_sum,
            (long long)info->created, utc);
    if (info->keyless) {
        fprintf(f,
                ",\n  \"keyless\": 1,\n  \"wal_size_bytes\": %llu,\n  \"wal_sha256\": \"%s\",\n"
                "  \"wal_frames\": %llu,\n  \"wal_commits\": %llu",
                (unsigned long long)info->wal_size_bytes, info->wal_sha256,
                (unsigned long long)info->wal_frames, (unsigned long long)info->wal_commits);
    }
    fputs("\n}\n", f);
}

int ops_manifest_write(const char *path,
                       const struct mv_backup_info *info,
                       char *errmsg,
                       size_t errmsg_size)
{
    char tmp[MV_PATH_MAX + 8];
    int n = snprintf(tmp, sizeof tmp, "%s%s", path, OPS_TEMP_SUFFIX);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "the manifest path is too long");
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
        }
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(e), "cannot create %s: %s", tmp,
                           strerror(e));
    }
    ops_manifest_fields(f, info);
    int failed = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    int e = errno;
    failed |= fclose(f) != 0;
    if (failed || rename(tmp, path) != 0) {
        e = failed ? e : errno;
        unlink(tmp);
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(e), "cannot write %s: %s", path,
                           strerror(e));
    }
    return MV_OK;
}

/* Finds "key": in text and returns the first character of its value, or NULL. */
static const char *ops_manifest_find(const char *text, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    for (const char *p = strstr(text, quoted); p != NULL; p = strstr(p + 1, quoted)) {
        const char *q = p + strlen(quoted);
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') {
            q++;
        }
        if (*q != ':') {
            continue;
        }
        q++;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') {
            q++;
        }
        return q;
    }
    return NULL;
}

/* A string value (escapes \" and \\ only) into out. 0 or -1. */
static int ops_manifest_get_string(const char *text, const char *key, char *out, size_t size)
{
    const char *p = ops_manifest_find(text, key);
    if (p == NULL || *p != '"') {
        return -1;
    }
    size_t n = 0;
    for (p++; *p != '"'; p++) {
        if (*p == '\0' || n + 1 >= size) {
            return -1;
        }
        if (*p == '\\') {
            p++;
            if (*p != '"' && *p != '\\') {
                return -1;
            }
        }
        out[n++] = *p;
    }
    out[n] = '\0';
    return 0;
}

static int ops_manifest_get_u64(const char *text, const char *key, uint64_t *out)
{
    const char *p = ops_manifest_find(text, key);
    if (p == NULL || *p < '0' || *p > '9') {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno != 0 || (*end != ',' && *end != '\n' && *end != ' ' && *end != '}')) {
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static int ops_manifest_load(const char *path, char *text, char *errmsg, size_t errmsg_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "%s: %s", path,
                           strerror(errno));
    }
    size_t got = 0;
    ssize_t n;
    while (got < OPS_MANIFEST_BYTES_MAX &&
           (n = read(fd, text + got, OPS_MANIFEST_BYTES_MAX - got)) != 0) {
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            close(fd);
            return ops_io_fail(errmsg, errmsg_size, MV_EIO, "%s: %s", path, strerror(errno));
        }
        got += (size_t)n;
    }
    close(fd);
    if (got >= OPS_MANIFEST_BYTES_MAX) {
        return ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT,
                           "%s: not a backup manifest (over %d "
                           "bytes)",
                           path, OPS_MANIFEST_BYTES_MAX);
    }
    text[got] = '\0';
    return MV_OK;
}

/* The fields of a loaded manifest into *info. */
static int ops_manifest_parse(const char *text,
                              const char *path,
                              struct mv_backup_info *info,
                              char *errmsg,
                              size_t errmsg_size)
{
    char format[32], cipher[32], file[MV_PATH_MAX];
    uint64_t page_size = 0, schema = 0, mailboxes = 0, created = 0, keyless = 0;
    int bad = ops_manifest_get_string(text, "format", format, sizeof format) != 0 ||
              strcmp(format, OPS_MANIFEST_FORMAT) != 0 ||
              ops_manifest_get_string(text, "address", info->address, sizeof info->address) != 0 ||
              ops_manifest_get_string(text, "file", file, sizeof file) != 0 ||
              ops_manifest_get_string(text, "sha256", info->sha256, sizeof info->sha256) != 0 ||
              strlen(info->sha256) != 64 ||
              ops_manifest_get_string(text, "cipher", cipher, sizeof cipher) != 0 ||
              mv_cipher_from_name(cipher, &info->cipher) != MV_OK ||
              ops_manifest_get_u64(text, "size_bytes", &info->size_bytes) != 0 ||
              ops_manifest_get_u64(text, "page_size", &page_size) != 0 ||
              ops_manifest_get_u64(text, "page_count", &info->page_count) != 0 ||
              ops_manifest_get_u64(text, "schema_version", &schema) != 0 ||
              ops_manifest_get_u64(text, "messages", &info->messages) != 0 ||
              ops_manifest_get_u64(text, "mailboxes", &mailboxes) != 0 ||
              ops_manifest_get_u64(text, "highestmodseq", &info->highestmodseq) != 0 ||
              ops_manifest_get_u64(text, "uidnext_sum", &info->uidnext_sum) != 0 ||
              ops_manifest_get_u64(text, "created", &created) != 0 || page_size > 65536 ||
              schema > 1000000 || mailboxes > UINT32_MAX;
    if (!bad && ops_manifest_get_u64(text, "keyless", &keyless) == 0 && keyless == 1) {
        info->keyless = 1;
        bad = ops_manifest_get_u64(text, "wal_size_bytes", &info->wal_size_bytes) != 0 ||
              ops_manifest_get_u64(text, "wal_frames", &info->wal_frames) != 0 ||
              ops_manifest_get_u64(text, "wal_commits", &info->wal_commits) != 0 ||
              (info->wal_size_bytes > 0 &&
               (ops_manifest_get_string(text, "wal_sha256", info->wal_sha256,
                                        sizeof info->wal_sha256) != 0 ||
                strlen(info->wal_sha256) != 64));
    }
    if (bad) {
        return ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT,
                           "%s is not a mailvault backup manifest (a field is missing or "
                           "malformed)",
                           path);
    }
    const char *base = strrchr(info->path, '/');
    base = base != NULL ? base + 1 : info->path;
    if (info->path[0] != '\0' && strcmp(base, file) != 0) {
        return ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT,
                           "%s describes %s, not %s (was the snapshot renamed?)", path, file, base);
    }
    info->page_size = (uint32_t)page_size;
    info->schema_version = (int)schema;
    info->mailboxes = (uint32_t)mailboxes;
    info->created = (int64_t)created;
    return MV_OK;
}

int ops_manifest_read(const char *path,
                      struct mv_backup_info *info,
                      char *errmsg,
                      size_t errmsg_size)
{
    char *text = malloc(OPS_MANIFEST_BYTES_MAX + 1);
    if (text == NULL) {
        return ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
    }
    int rc = ops_manifest_load(path, text, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = ops_manifest_parse(text, path, info, errmsg, errmsg_size);
    }
    free(text);
    return rc;
}
