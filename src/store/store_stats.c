/*
 * store_stats.c -- mv_store_stats: what a store holds and what it costs on disk.
 *
 *   logical_bytes   SUM(messages.size): what the user sees (a copy counts twice)
 *   stored_bytes    SUM(bodies.stored_size) + SUM(attachments.stored_size): each distinct
 *                   body skeleton and attachment once, as stored (compressed)
 *   physical_bytes  the database file plus its WAL, from stat(2)
 *   pending         deliveries waiting in the sealed queue (mv_queue_count)
 *
 * IMPLEMENTATION NOTES
 *   The counts are read in one deferred transaction, so they describe one snapshot. The
 *   statements are prepared here and finalized, not cached: stats are rare and the cache is
 *   for the hot paths. The aggregates scan their tables (the smallest index for count(*));
 *   that is the price of not keeping counters in the write path.
 */
#include "store/store.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* Runs sql (one row of integer columns) and stores column i into out[i]. */
static int store_stats_query(mv_store *s, const char *sql, int64_t *out, int columns)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "preparing a statistics query");
    }
    int rc = MV_OK;
    if (sqlite3_step(st) == SQLITE_ROW) {
        for (int i = 0; i < columns; i++) {
            out[i] = sqlite3_column_int64(st, i);
        }
    } else {
        rc = store_fail_sqlite(s, "reading statistics");
    }
    sqlite3_finalize(st);
    return rc;
}

static int store_stats_counts(mv_store *s, struct mv_store_stats *out)
{
    int64_t v[6] = {0};
    int rc = store_stats_query(s,
                               "SELECT (SELECT count(*) FROM messages), "
                               "(SELECT coalesce(sum(size), 0) FROM messages), "
                               "(SELECT count(*) FROM mailboxes), "
                               "(SELECT coalesce(sum(stored_size), 0) FROM bodies), "
                               "(SELECT coalesce(sum(stored_size), 0) FROM attachments), "
                               "(SELECT count(*) FROM attachments)",
                               v, 6);
    if (rc == MV_OK) {
        out->messages = (uint64_t)v[0];
        out->logical_bytes = (uint64_t)v[1];
        out->mailboxes = (uint32_t)v[2];
        out->stored_bytes = (uint64_t)(v[3] + v[4]);
        out->attachments = (uint64_t)v[5];
        rc = store_stats_query(s, "PRAGMA user_version", v, 1);
    }
    if (rc == MV_OK) {
        out->schema_version = (int)v[0];
    }
    return rc;
}

/* Bytes of path on disk; a missing file (no WAL right now) counts 0. */
static int store_stats_file_size(mv_store *s, const char *path, uint64_t *size)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) {
            return MV_OK;
        }
        return store_fail(s, MV_EIO, "stat %s: %s", path, strerror(errno));
    }
    *size += (uint64_t)st.st_size;
    return MV_OK;
}

static int store_stats_physical(mv_store *s, uint64_t *size)
{
    char wal[MV_PATH_MAX + 4];
    *size = 0;
    int rc = store_stats_file_size(s, s->db_path, size);
    if (rc == MV_OK) {
        size_t n = strlen(s->db_path);
        if (n + 5 > sizeof wal) {
            return store_fail(s, MV_EINVAL, "database path too long");
        }
        memcpy(wal, s->db_path, n);
        memcpy(wal + n, "-wal", 5);
        rc = store_stats_file_size(s, wal, size);
    }
    return rc;
}

/* The queue is counted by mv_queue_count, which resolves paths from a root: the store's
 * root is the parent of its domain directory. */
static int store_stats_pending(mv_store *s, uint32_t *pending)
{
    char root[MV_PATH_MAX];
    struct mv_store_options opts = MV_STORE_OPTIONS_INIT;
    const char *slash = strrchr(s->domain_dir, '/');
    size_t n = slash != NULL ? (size_t)(slash - s->domain_dir) : 0;
    if (slash == NULL || n >= sizeof root) {
        return store_fail(s, MV_EINVAL, "cannot find the store's root in \"%s\"", s->domain_dir);
    }
    memcpy(root, s->domain_dir, n);
    root[n] = '\0';
    opts.root = n != 0 ? root : "/";
    opts.limits = s->limits;
    int rc = mv_queue_count(s->address, &opts, pending);
    if (rc != MV_OK) {
        return store_fail(s, rc, "counting the delivery queue %s: %s", s->queue_dir,
                          mv_strerror(rc));
    }
    return MV_OK;
}

int mv_store_stats(mv_store *s, struct mv_store_stats *out)
{
    if (out == NULL) {
        return store_fail(s, MV_EINVAL, "mv_store_stats: no output struct");
    }
    memset(out, 0, sizeof *out);
    store_enter(s);
    int began = sqlite3_get_autocommit(s->db);
    int rc = began ? store_read_begin(s) : MV_OK;
    if (rc == MV_OK) {
        rc = store_stats_counts(s, out);
    }
    if (began) {
        store_rollback(s); /* a read: ends the snapshot */
    }
    if (rc == MV_OK) {
        rc = store_stats_physical(s, &out->physical_bytes);
    }
    if (rc == MV_OK) {
        rc = store_stats_pending(s, &out->pending);
    }
    return rc;
}
