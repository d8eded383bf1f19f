/*
 * ops_backup.c -- mv_backup_write() and mv_backup_verify(): online, verified, still-encrypted
 * snapshots of one store, N generations of them in a directory.
 *
 * THE STEPS OF A BACKUP, AND WHAT AN INTERRUPTION LEAVES
 *   1. The store is opened with its password (a shared lock: no restore or password change
 *      can swap the file meanwhile; queued deliveries are moved in first).
 *   2. VACUUM INTO DIR/.<address>-<stamp>.mvbackup.tmp, then fsync (ops_snapshot.c). The
 *      snapshot point is the start of VACUUM's read transaction; deliveries go on.
 *   3. The store is closed; the copy is opened with the password and quick_check'ed, its
 *      state (counts, modseq, uidnext) read from the copy itself, its SHA-256 computed.
 *   4. The manifest is written to <final>.json.tmp, fsync'd, renamed to <final>.json.
 *   5. The snapshot is renamed to its final name; the directory is fsync'd.
 *   6. Snapshots of this address beyond `keep` are removed, oldest first (snapshot, then
 *      its manifest), and temporary files older than an hour (left by killed backups).
 *   Killed before 5, only dot-named or .tmp files and maybe a manifest without snapshot
 *   remain: no snapshot that was not verified ever carries a final name, and no old
 *   snapshot was removed. A snapshot with its final name always has its manifest.
 *
 * LIMITATIONS
 *   The temporary files of a backup that is still running are recognised by age (an hour
 *   without a write), not by a lock.
 */
#include "ops/ops_backup.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OPS_STALE_TEMP_S    3600
#define OPS_PRUNE_NAMES_MAX 100000 /* snapshots of one address considered in a directory */
#define OPS_STAMP_TRIES     50

/* "YYYYMMDDTHHMMSS.mmmZ" of now. */
static void ops_backup_stamp(char out[OPS_STAMP_LEN + 1])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char head[24];
    strftime(head, sizeof head, "%Y%m%dT%H%M%S", &tm);
    unsigned ms = (unsigned)(ts.tv_nsec / 1000000L) % 1000u;
    memcpy(out, head, 15);
    out[15] = '.';
    out[16] = (char)('0' + ms / 100);
    out[17] = (char)('0' + ms / 10 % 10);
    out[18] = (char)('0' + ms % 10);
    out[19] = 'Z';
    out[20] = '\0';
}

/* Whether name is "<address>-<stamp>.mvbackup". */
static int ops_backup_is_snapshot(const char *name, const char *address)
{
    static const char shape[] = "ddddddddTdddddd.dddZ";
    size_t alen = strlen(address), slen = strlen(OPS_BACKUP_SUFFIX);
    if (strlen(name) != alen + 1 + OPS_STAMP_LEN + slen || strncmp(name, address, alen) != 0 ||
        name[alen] != '-' || strcmp(name + alen + 1 + OPS_STAMP_LEN, OPS_BACKUP_SUFFIX) != 0) {
        return 0;
    }
    for (size_t i = 0; i < OPS_STAMP_LEN; i++) {
        char c = name[alen + 1 + i];
        if (shape[i] == 'd' ? (c < '0' || c > '9') : c != shape[i]) {
            return 0;
        }
    }
    return 1;
}

int ops_backup_names(const char *dir,
                     const char *address,
                     char *final,
                     char *tmp,
                     size_t size,
                     char *errmsg,
                     size_t errmsg_size)
{
    for (int i = 0; i < OPS_STAMP_TRIES; i++) {
        char stamp[OPS_STAMP_LEN + 1];
        ops_backup_stamp(stamp);
        int n1 = snprintf(final, size, "%s/%s-%s%s", dir, address, stamp, OPS_BACKUP_SUFFIX);
        int n2 = snprintf(tmp, size, "%s/.%s-%s%s%s", dir, address, stamp, OPS_BACKUP_SUFFIX,
                          OPS_TEMP_SUFFIX);
        if (n1 < 0 || n2 < 0 || (size_t)n1 + 8 >= size || (size_t)n2 >= size) {
            return ops_io_fail(errmsg, errmsg_size, MV_EINVAL,
                               "the backup directory name is "
                               "too long");
        }
        if (access(final, F_OK) != 0 && access(tmp, F_OK) != 0) {
            return MV_OK;
        }
        struct timespec pause = {0, 2000000L};
        nanosleep(&pause, NULL);
    }
    return ops_io_fail(errmsg, errmsg_size, MV_EEXISTS, "cannot find a free snapshot name in %s",
                       dir);
}

static int ops_backup_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Removes temporary files of address in dir that nothing wrote for an hour. */
static void ops_backup_remove_stale(const char *dir, const char *address, const char *name)
{
    size_t alen = strlen(address), nlen = strlen(name), tlen = strlen(OPS_TEMP_SUFFIX);
    const char *p = name[0] == '.' ? name + 1 : name;
    if (nlen <= tlen || strcmp(name + nlen - tlen, OPS_TEMP_SUFFIX) != 0 ||
        strncmp(p, address, alen) != 0 || p[alen] != '-') {
        return;
    }
    char path[MV_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
        time(NULL) - st.st_mtime > OPS_STALE_TEMP_S) {
        unlink(path);
    }
}

int ops_backup_prune(const char *dir, const char *address, uint32_t keep, uint32_t *pruned)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return MV_EIO;
    }
    char **names = NULL;
    size_t count = 0, cap = 0;
    int rc = MV_OK;
    struct dirent *e;
    while (rc == MV_OK && (e = readdir(d)) != NULL) {
        ops_backup_remove_stale(dir, address, e->d_name);
        if (!ops_backup_is_snapshot(e->d_name, address)) {
            continue;
        }
        if (count == cap) {
            size_t ncap = cap == 0 ? 16 : cap * 2;
            char **grown =
                ncap <= OPS_PRUNE_NAMES_MAX ? realloc(names, ncap * sizeof *names) : NULL;
            if (grown == NULL) {
                rc = MV_ENOMEM;
                break;
            }
            names = grown;
            cap = ncap;
        }
        names[count] = strdup(e->d_name);
        rc = names[count] != NULL ? MV_OK : MV_ENOMEM;
        count += names[count] != NULL;
    }
    closedir(d);
    if (rc == MV_OK && count > keep) {
        qsort(names, count, sizeof *names, ops_backup_name_cmp); /* the stamp sorts by time */
        char path[MV_PATH_MAX * 2];
        for (size_t i = 0; i < count - keep; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (access(path, F_OK) == 0) {
                ops_io_remove_db(path); /* with the -wal of a keyless snapshot */
                *pruned += 1;
            }
            snprintf(path, sizeof path, "%s/%s%s", dir, names[i], OPS_MANIFEST_SUFFIX);
            unlink(path);
        }
    }
    for (size_t i = 0; i < count; i++) {
        free(names[i]);
    }
    free(names);
    return rc == MV_OK ? store_fsync_dir(dir) : rc;
}

static void ops_backup_info_fill(struct mv_backup_info *info, const struct ops_state *state)
{
    info->cipher = state->cipher;
    info->page_size = state->page_size;
    info->page_count = state->page_count;
    info->schema_version = state->schema_version;
    info->messages = state->messages;
    info->mailboxes = state->mailboxes;
    info->highestmodseq = state->highestmodseq;
    info->uidnext_sum = state->uidnext_sum;
}

/* Steps 1-2: the snapshot into tmp, from the store opened with password. */
static int ops_backup_snapshot(const char *address,
                               const void *password,
                               size_t password_len,
                               const struct mv_store_options *o,
                               const char *dest_dir,
                               const struct mv_ops_options *opts,
                               struct mv_backup_info *info,
                               char *tmp,
                               char *errmsg,
                               size_t errmsg_size)
{
    mv_store *s = NULL;
    int rc = mv_store_open(address, password, password_len, o, &s, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    snprintf(info->address, sizeof info->address, "%s", s->address);
    rc = ops_backup_names(dest_dir, s->address, info->path, tmp, MV_PATH_MAX, errmsg, errmsg_size);
    if (rc == MV_OK) {
        store_enter(s); /* VACUUM's sorter spills encrypted temp files into the store's tmp/ */
        rc = ops_snapshot_write(s->db, tmp, password, password_len, MV_CIPHER_AUTO, o->kdf_iter,
                                opts, errmsg, errmsg_size);
    }
    mv_store_close(&s);
    return rc;
}

int ops_backup_check_args(const char *dest_dir,
                          const struct mv_ops_options *opts,
                          uint32_t *keep,
                          char *errmsg,
                          size_t errmsg_size)
{
    *keep = opts->keep != 0 ? opts->keep : MV_BACKUP_KEEP_DEFAULT;
    if (*keep > MV_BACKUP_KEEP_MAX || dest_dir == NULL || dest_dir[0] == '\0' ||
        strlen(dest_dir) >= MV_PATH_MAX - MV_ADDRESS_MAX - 64) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL,
                           "invalid backup arguments (keep 1..%d, a directory name)",
                           MV_BACKUP_KEEP_MAX);
    }
    return MV_OK;
}

int ops_backup_publish(const char *dest_dir,
                       const char *tmp,
                       uint32_t keep,
                       struct mv_backup_info *info,
                       char *errmsg,
                       size_t errmsg_size)
{
    snprintf(info->manifest_path, sizeof info->manifest_path, "%.*s%s",
             (int)(sizeof info->manifest_path - 8), info->path, OPS_MANIFEST_SUFFIX);
    int rc = ops_manifest_write(info->manifest_path, info, errmsg, errmsg_size);
    if (rc != MV_OK) {
        return rc;
    }
    if (rename(tmp, info->path) != 0) {
        rc = ops_io_fail(errmsg, errmsg_size, ops_io_errno_code(errno), "cannot rename %s: %s", tmp,
                         strerror(errno));
        unlink(info->manifest_path);
        return rc;
    }
    if (store_fsync_dir(dest_dir) != MV_OK) {
        return ops_io_fail(errmsg, errmsg_size, MV_EIO, "cannot fsync %s", dest_dir);
    }
    (void)ops_backup_prune(dest_dir, info->address, keep, &info->pruned);
    return MV_OK;
}

int mv_backup_write(const char *address,
                    const void *password,
                    size_t password_len,
                    const struct mv_store_options *store_opts,
                    const char *dest_dir,
                    const struct mv_ops_options *opts,
                    struct mv_backup_info *info_out,
                    char *errmsg,
                    size_t errmsg_size)
{
    const struct mv_store_options *o = ops_io_store_options(store_opts);
    const struct mv_ops_options *p = ops_io_options(opts);
    uint32_t keep = 0;
    int rc = ops_backup_check_args(dest_dir, p, &keep, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = store_mkdirs(dest_dir, errmsg, errmsg_size);
    }
    if (rc != MV_OK) {
        return rc;
    }
    struct mv_backup_info *info = calloc(1, sizeof *info);
    char *tmp = malloc(MV_PATH_MAX);
    if (info == NULL || tmp == NULL) {
        free(info);
        free(tmp);
        return ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
    }
    tmp[0] = '\0';
    rc = ops_backup_snapshot(address, password, password_len, o, dest_dir, p, info, tmp, errmsg,
                             errmsg_size);
    struct ops_state state = {0};
    if (rc == MV_OK) {
        rc = ops_snapshot_verify(tmp, password, password_len, o->kdf_iter, 0, p, &state, errmsg,
                                 errmsg_size);
    }
    if (rc == MV_OK) {
        rc = ops_io_sha256(tmp, info->sha256, &info->size_bytes, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        ops_backup_info_fill(info, &state);
        info->created = (int64_t)time(NULL);
        rc = ops_backup_publish(dest_dir, tmp, keep, info, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        if (info_out != NULL) {
            *info_out = *info;
        }
    } else if (tmp[0] != '\0') {
        ops_io_remove_db(tmp);
    }
    free(tmp);
    free(info);
    return rc;
}

/* The manifest's figures against what the snapshot holds. */
static int ops_backup_compare(const struct mv_backup_info *m,
                              const struct ops_state *s,
                              char *errmsg,
                              size_t errmsg_size)
{
    if (m->keyless) {
        return MV_OK; /* no counts without the key: the SHA-256 and quick_check stand */
    }
    if (m->messages != s->messages || m->mailboxes != s->mailboxes ||
        m->highestmodseq != s->highestmodseq || m->uidnext_sum != s->uidnext_sum ||
        m->schema_version != s->schema_version || m->page_count != s->page_count ||
        m->page_size != s->page_size || m->cipher != s->cipher) {
        return ops_io_fail(errmsg, errmsg_size, MV_ECORRUPT,
                           "the snapshot does not match its manifest (%llu messages, manifest "
                           "%llu; %llu pages, manifest %llu)",
                           (unsigned long long)s->messages, (unsigned long long)m->messages,
                           (unsigned long long)s->page_count, (unsigned long long)m->page_count);
    }
    return MV_OK;
}

int mv_backup_verify(const char *backup_path,
                     const void *password,
                     size_t password_len,
                     const struct mv_store_options *store_opts,
                     struct mv_backup_info *info_out,
                     char *errmsg,
                     size_t errmsg_size)
{
    const struct mv_store_options *o = ops_io_store_options(store_opts);
    if (backup_path == NULL || strlen(backup_path) >= MV_PATH_MAX - 8 || password == NULL ||
        password_len == 0) {
        return ops_io_fail(errmsg, errmsg_size, MV_EINVAL, "invalid arguments");
    }
    struct mv_backup_info *m = calloc(1, sizeof *m);
    if (m == NULL) {
        return ops_io_fail(errmsg, errmsg_size, MV_ENOMEM, "out of memory");
    }
    snprintf(m->path, sizeof m->path, "%s", backup_path);
    snprintf(m->manifest_path, sizeof m->manifest_path, "%s%s", backup_path, OPS_MANIFEST_SUFFIX);
    int rc = access(backup_path, F_OK) == 0
                 ? ops_manifest_read(m->manifest_path, m, errmsg, errmsg_size)
                 : ops_io_fail(errmsg, errmsg_size, MV_ENOTFOUND, "%s: %s", backup_path,
                               strerror(errno));
    static const char damage[] = "is damaged: its SHA-256 or size differs from the manifest";
    if (rc == MV_OK) {
        rc =
            ops_io_sha256_check(backup_path, m->sha256, m->size_bytes, damage, errmsg, errmsg_size);
    }
    char wal[MV_PATH_MAX + 8], shm[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", backup_path);
    snprintf(shm, sizeof shm, "%s-shm", backup_path);
    if (rc == MV_OK && m->keyless && m->wal_size_bytes > 0) {
        rc =
            ops_io_sha256_check(wal, m->wal_sha256, m->wal_size_bytes, damage, errmsg, errmsg_size);
    }
    int had_shm = access(shm, F_OK) == 0;
    struct ops_state state = {0};
    if (rc == MV_OK) {
        rc = ops_snapshot_verify(backup_path, password, password_len, o->kdf_iter, 0, NULL, &state,
                                 errmsg, errmsg_size);
    }
    if (m->keyless && !had_shm) {
        unlink(shm); /* the read-only open of a WAL-mode snapshot made it */
    }
    if (rc == MV_OK) {
        rc = ops_backup_compare(m, &state, errmsg, errmsg_size);
    }
    if (rc == MV_OK && info_out != NULL) {
        *info_out = *m;
    }
    free(m);
    return rc;
}
