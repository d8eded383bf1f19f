/*
 * ops_maintain.c -- mv_store_maintain: the reference's maintenance, safe to run from cron
 * while deliveries and reads go on.
 *
 * USAGE
 *   struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
 *   struct mv_maintain_report r;
 *   rc = mv_store_maintain(store, &o, &r);   MV_ENOSPC: VACUUM refused, the rest done
 *
 * IMPLEMENTATION NOTES
 *   In this order, each step short unless it has to be long:
 *   1. PRAGMA optimize (analysis_limit=400 so ANALYZE reads a bounded sample).
 *   2. wal_checkpoint(PASSIVE): never waits; busy=1 or log > checkpointed frames means a
 *      reader (an IMAP session in a long read) holds the WAL.
 *   3. If (1) PASSIVE saw nobody and (2) copied every frame, wal_checkpoint(TRUNCATE) with
 *      the busy timeout cut to OPS_IDLE_WAIT_MS: it empties the WAL file when the store is
 *      idle and gives up quickly when it is not.
 *   4. Free pages (freelist_count / page_count, the reference's "fragmentation") and slack
 *      (unused bytes inside the b-tree pages, from the dbstat table). With auto_vacuum=FULL
 *      the freelist is emptied at every commit, so deleted mail shows up as half-empty
 *      pages, not free ones: slack is the fragmentation such a store can have. VACUUM when
 *      either passes its threshold, and only if the free disk of the store's directory is
 *      at least twice the store (VACUUM writes a temporary copy and then the whole database
 *      through the WAL). VACUUM holds the write lock for its duration: deliveries wait
 *      (busy_timeout 30 s) or go to the sealed queue.
 *   5. PRAGMA quick_check when the last one recorded in meta is older than
 *      quick_check_days; its time and result are recorded.
 *   Before them, the purge of expunged bodies, the change log's old expunges
 *   (changes_keep_days; store_changes.c says how), what a migration left (the full-text move
 *   of schema 9) and the line counts of attachments stored before schema 15 (ops_maintain_counts);
 * a move that fails on its old index is reported (fts_move_failed, an MV_ECORRUPT that names
 * `mailvault repair`) and the steps above still run, so a damaged old index never stops a store's
 * checkpoints, VACUUM and quick_check. Before all of them, min_interval_s and store_bytes_max may
 * end the call with nothing done (ops_maintain_skip); the run's time is recorded in meta
 * (ops:maintained_at) after them, which is what min_interval_s reads.
 */
#include "ops/ops_inspect.h"
#include "store/store_blob.h"
#include "vfs/db_column.h"
#include "vfs/db_error.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define OPS_IDLE_WAIT_MS    100
#define OPS_BUSY_TIMEOUT_MS 30000
#define OPS_PROGRESS_OPS    200000
#define OPS_SECONDS_PER_DAY 86400

struct ops_progress {
    const struct mv_maintain_options *opts;
    const char *stage;
    uint64_t ticks;
};

static int ops_progress_tick(void *arg)
{
    struct ops_progress *p = arg;
    p->ticks++;
    if (p->opts->progress != NULL) {
        p->opts->progress(p->opts->progress_arg, p->stage, p->ticks, 0);
    }
    return 0;
}

/* Runs sql with the progress callback armed under stage. */
static int ops_exec_long(mv_store *s, struct ops_progress *p, const char *stage, const char *sql)
{
    p->stage = stage;
    p->ticks = 0;
    sqlite3_progress_handler(s->db, OPS_PROGRESS_OPS, ops_progress_tick, p);
    int rc = store_exec(s, sql);
    sqlite3_progress_handler(s->db, 0, NULL, NULL);
    return rc;
}

/* A wal_checkpoint pragma's row: busy, log frames, checkpointed frames. */
static int ops_checkpoint(mv_store *s, const char *sql, int64_t result[3])
{
    return ops_query_ints(s, sql, result, 3);
}

/* TRUNCATE checkpoint that waits at most OPS_IDLE_WAIT_MS; *done = 1 if it emptied the WAL. */
static int ops_truncate_if_idle(mv_store *s, int *done)
{
    int64_t r[3] = {0, 0, 0};
    int64_t saved_ms = OPS_BUSY_TIMEOUT_MS;
    *done = 0;
    int rc = ops_query_int(s, "PRAGMA busy_timeout", &saved_ms);
    if (rc != MV_OK) {
        return rc;
    }
    sqlite3_busy_timeout(s->db, OPS_IDLE_WAIT_MS);
    rc = ops_checkpoint(s, "PRAGMA wal_checkpoint(TRUNCATE)", r);
    sqlite3_busy_timeout(s->db, (int)saved_ms); /* the profile's, whatever it is */
    if (rc == MV_OK) {
        *done = r[0] == 0;
    }
    return rc;
}

static uint64_t ops_store_bytes(mv_store *s)
{
    char wal[MV_PATH_MAX + 8];
    snprintf(wal, sizeof wal, "%s-wal", s->db_path);
    return ops_file_bytes(s->db_path) + ops_file_bytes(wal);
}

/* Slack: the pages the unused bytes inside each b-tree add up to (what VACUUM, which packs
 * every b-tree afresh, gives back), over all pages; -1 if dbstat is not compiled in. The
 * last page of an overflow chain is never full and VACUUM cannot change that, so overflow
 * pages are left out. */
static int ops_slack(mv_store *s, struct ops_progress *p, uint64_t page_count, double *slack)
{
    sqlite3_stmt *st = NULL;
    int64_t page_size = 0;
    *slack = -1;
    int rc = ops_query_int(s, "PRAGMA page_size", &page_size);
    if (rc != MV_OK || page_size <= 0) {
        return rc;
    }
    store_enter(s);
    if (sqlite3_prepare_v2(s->db,
                           "SELECT coalesce(sum(u / ?1), 0) FROM (SELECT sum(unused) AS u "
                           "FROM dbstat WHERE pagetype != 'overflow' GROUP BY name)",
                           -1, &st, NULL) != SQLITE_OK) {
        return MV_OK; /* no dbstat: the free-page rule alone decides */
    }
    sqlite3_bind_int64(st, 1, page_size);
    p->stage = "measuring";
    p->ticks = 0;
    sqlite3_progress_handler(s->db, OPS_PROGRESS_OPS, ops_progress_tick, p);
    rc = sqlite3_step(st);
    sqlite3_progress_handler(s->db, 0, NULL, NULL);
    if (rc == SQLITE_ROW) {
        double pages = (double)sqlite3_column_int64(st, 0);
        *slack = page_count > 0 ? pages / (double)page_count : 0.0;
        rc = MV_OK;
    } else {
        rc = store_fail_sqlite(s, "reading dbstat");
    }
    sqlite3_finalize(st);
    return rc;
}

static int ops_measure(mv_store *s, struct ops_progress *p, struct mv_maintain_report *out)
{
    int64_t pages = 0, free_pages = 0;
    int rc = ops_query_int(s, "PRAGMA page_count", &pages);
    if (rc == MV_OK) {
        rc = ops_query_int(s, "PRAGMA freelist_count", &free_pages);
    }
    if (rc != MV_OK) {
        return rc;
    }
    out->page_count = (uint64_t)pages;
    out->freelist_count = (uint64_t)free_pages;
    out->free_ratio = pages > 0 ? (double)free_pages / (double)pages : 0.0;
    return ops_slack(s, p, out->page_count, &out->slack_ratio);
}

static int ops_vacuum(mv_store *s,
                      const struct mv_maintain_options *o,
                      struct ops_progress *p,
                      struct mv_maintain_report *out)
{
    int needed = out->free_ratio * 100.0 > (double)o->vacuum_free_percent ||
                 out->slack_ratio * 100.0 > (double)o->vacuum_slack_percent ||
                 (o->flags & MV_MAINTAIN_FORCE_VACUUM) != 0;
    out->vacuum = MV_VACUUM_NOT_NEEDED;
    if (!needed) {
        return MV_OK;
    }
    if (o->flags & MV_MAINTAIN_NO_VACUUM) {
        out->vacuum = MV_VACUUM_SKIPPED;
        return MV_OK;
    }
    int rc = ops_free_bytes(s->domain_dir, &out->disk_free_bytes, s->errmsg, sizeof s->errmsg);
    if (rc != MV_OK) {
        return rc;
    }
    if (out->disk_free_bytes / 2 < out->bytes_before) {
        out->vacuum = MV_VACUUM_REFUSED_DISK;
        return MV_OK;
    }
    /* VACUUM refuses to run beside a statement in progress: a cached one left mid-way. */
    for (sqlite3_stmt *st = sqlite3_next_stmt(s->db, NULL); st != NULL;
         st = sqlite3_next_stmt(s->db, st)) {
        if (sqlite3_stmt_busy(st)) {
            sqlite3_reset(st);
        }
    }
    rc = ops_exec_long(s, p, "vacuuming", "VACUUM");
    if (rc != MV_OK) {
        return rc;
    }
    out->vacuum = MV_VACUUM_DONE;
    int truncated = 0;
    rc = ops_truncate_if_idle(s, &truncated);
    out->wal_truncated = out->wal_truncated || truncated;
    return rc;
}

/* PRAGMA quick_check if due; records time and result. Only a finding about the data is
 * recorded as a failed check: a run the device or memory stopped returns that error and
 * records nothing (every later look at the store, stats and the server's metrics, would
 * report the recorded failure until the next check). */
static int ops_quick_check(mv_store *s,
                           const struct mv_maintain_options *o,
                           struct ops_progress *p,
                           struct mv_maintain_report *out)
{
    int64_t now = (int64_t)time(NULL);
    int64_t last = out->quick_check_last_at;
    int due = (o->flags & MV_MAINTAIN_QUICK_CHECK) || o->quick_check_days == 0 || last == 0 ||
              now - last >= (int64_t)o->quick_check_days * OPS_SECONDS_PER_DAY;
    out->quick_check = MV_QUICK_CHECK_NOT_DUE;
    if (!due) {
        return MV_OK;
    }
    sqlite3_stmt *st = NULL;
    store_enter(s);
    if (sqlite3_prepare_v2(s->db, "PRAGMA quick_check(100)", -1, &st, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "PRAGMA quick_check");
    }
    p->stage = "quick_check";
    p->ticks = 0;
    uint64_t read_errors = mv_db_read_errors(s->db);
    sqlite3_progress_handler(s->db, OPS_PROGRESS_OPS, ops_progress_tick, p);
    char first[256] = "";
    int rc, ok = 1, oom = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *line = mv_db_column_text(st, 0, &oom);
        if (oom && ok) { /* a finding not read is not "ok" either: the run says nothing */
            ok = 0;
            snprintf(first, sizeof first, "out of memory reading its findings");
        } else if (line != NULL && strcmp(line, "ok") != 0 && ok) {
            ok = 0;
            snprintf(first, sizeof first, "%s", line);
        }
    }
    sqlite3_progress_handler(s->db, 0, NULL, NULL);
    /* what stopped the run or made its findings: the data (MV_ECORRUPT, recorded), or the
     * device, memory, a lock (returned, not recorded) */
    int kind = MV_OK;
    if (rc != SQLITE_DONE) {
        ok = 0;
        kind = mv_db_error_cause(s->db, sqlite3_extended_errcode(s->db), first, sizeof first);
    } else if (!ok) {
        kind = oom ? MV_ENOMEM : ops_io_check_finding(first);
    }
    sqlite3_finalize(st);
    if (kind == MV_ECORRUPT && rc == SQLITE_DONE && mv_db_read_errors(s->db) == read_errors &&
        ops_io_check_clean_again(s->db)) {
        ok = 1; /* a page it could not get for a moment (ops_io_check_clean_again) */
        kind = MV_OK;
    }
    if (!ok && kind != MV_ENOMEM && mv_db_read_errors(s->db) != read_errors) {
        const char *vfs = mv_db_vfs_errmsg(s->db);
        kind = MV_EIO;
        snprintf(first, sizeof first, "%s", vfs != NULL ? vfs : "a read of the store failed");
    }
    if (kind != MV_OK && kind != MV_ECORRUPT) {
        out->quick_check = MV_QUICK_CHECK_NOT_DUE;
        return store_fail(s, kind, "quick_check could not run: %s", first);
    }
    out->quick_check = ok ? MV_QUICK_CHECK_OK : MV_QUICK_CHECK_FAILED;
    rc = ops_meta_set_int(s, OPS_META_QUICK_CHECK_AT, now);
    if (rc == MV_OK) {
        rc = ops_meta_set_int(s, OPS_META_QUICK_CHECK_OK, ok);
    }
    if (rc == MV_OK && !ok) {
        rc = store_fail(s, MV_ECORRUPT, "quick_check found problems: %s", first);
    }
    return rc;
}

/* Steps 1-3: optimize and checkpoints. */
static int ops_maintain_wal(mv_store *s, struct mv_maintain_report *out)
{
    int64_t r[3] = {0, 0, 0};
    int rc = store_exec(s, "PRAGMA analysis_limit=400");
    if (rc == MV_OK) {
        rc = store_exec(s, "PRAGMA optimize");
    }
    if (rc == MV_OK) {
        rc = ops_checkpoint(s, "PRAGMA wal_checkpoint(PASSIVE)", r);
    }
    if (rc != MV_OK) {
        return rc;
    }
    out->checkpoint_busy = (int)r[0];
    out->checkpoint_log_frames = r[1];
    out->checkpoint_done_frames = r[2];
    if (r[0] == 0 && r[1] == r[2]) {
        rc = ops_truncate_if_idle(s, &out->wal_truncated);
    }
    return rc;
}

/* Sets out->skipped if o's min_interval_s or store_bytes_max says this call does nothing.
 * Reads only the meta record and stat(2): cheap enough for a server to call on every idle
 * store. */
static int
ops_maintain_skip(mv_store *s, const struct mv_maintain_options *o, struct mv_maintain_report *out)
{
    int rc = ops_meta_get_int(s, OPS_META_MAINTAINED_AT, &out->maintain_last_at);
    if (rc != MV_OK) {
        return rc;
    }
    int64_t now = (int64_t)time(NULL), last = out->maintain_last_at;
    /* Recent when (1) the interval is on, (2) a run is recorded, (3) it is not in the future
     * (a clock set back must not hold maintenance off until it catches up) and (4) it is
     * younger than the interval. */
    if (o->min_interval_s > 0 && last > 0 && now >= last &&
        now - last < (int64_t)o->min_interval_s) {
        out->skipped = MV_MAINTAIN_SKIPPED_RECENT;
    } else if (o->store_bytes_max > 0 && out->bytes_before > o->store_bytes_max) {
        out->skipped = MV_MAINTAIN_SKIPPED_SIZE;
    }
    return MV_OK;
}

/* The full-text move a migration left (store_fts_move.c), to its end. A batch that fails on
 * the old index itself (damaged, a shadow table gone: MV_ECORRUPT or MV_ERROR, the classes
 * mv_store_repair() ends the move on) fails the same way at every try, so it does not stop
 * the other steps: out->fts_move_failed is set and its detail kept in error for the end of
 * the run. Anything else (busy, I/O, memory) ends the run as any step's failure does. */
static int
ops_maintain_move(mv_store *s, struct mv_maintain_report *out, char *error, size_t error_size)
{
    int rc = mv_store_migrate_step(s, 0, NULL);
    if (rc == MV_ECORRUPT || rc == MV_ERROR) {
        snprintf(error, error_size, "%s", s->errmsg);
        out->fts_move_failed = 1;
        rc = MV_OK;
    }
    return rc;
}

/* Attachments counted a transaction (each is read whole: 128 KiB or more). */
#define OPS_COUNT_BATCH 32

/* The line counts of attachments stored before schema version 15 (NULL: the migration reads
 * no attachment), counted from their bytes (store_attachment_recount) so that their messages'
 * skeletons can stand in for them (mv_message_skeleton_keyed: MV_EUNSUPPORTED while a part has
 * none): OPS_COUNT_BATCH a transaction, so deliveries wait for one batch at most. A part whose
 * bytes do not read is left uncounted (`mailvault check` names it); the walk goes on past it
 * by id. */
static int ops_maintain_counts(mv_store *s, struct mv_maintain_report *out)
{
    int64_t after = 0;
    for (;;) {
        int rc = store_begin(s);
        if (rc != MV_OK) {
            return rc;
        }
        sqlite3_stmt *ids = NULL;
        if (sqlite3_prepare_v2(s->db,
                               "SELECT id FROM attachments WHERE (lines IS NULL OR marks IS NULL)"
                               " AND id > ?1 ORDER BY id LIMIT ?2",
                               -1, &ids, NULL) != SQLITE_OK) {
            rc = store_fail_sqlite(s, "listing attachments to count");
        }
        size_t listed = 0, counted = 0;
        int64_t batch[OPS_COUNT_BATCH];
        if (ids != NULL) {
            sqlite3_bind_int64(ids, 1, after);
            sqlite3_bind_int64(ids, 2, OPS_COUNT_BATCH);
            int step;
            while (listed < OPS_COUNT_BATCH && (step = sqlite3_step(ids)) == SQLITE_ROW) {
                batch[listed++] = sqlite3_column_int64(ids, 0);
            }
            if (listed < OPS_COUNT_BATCH && step != SQLITE_DONE) {
                rc = store_fail_sqlite(s, "listing attachments to count"); /* a failing disk */
            }
            sqlite3_finalize(ids);
        }
        for (size_t i = 0; rc == MV_OK && i < listed; i++) {
            uint64_t lines = 0, marks = 0;
            int differ = 0;
            int read = store_attachment_recount(s, batch[i], &lines, &marks, &differ);
            if (read != MV_OK && read != MV_ECORRUPT && read != MV_ENOTFOUND) {
                rc = read; /* memory, the disk, a lock: not the part's fault */
            } else if (read == MV_OK) {
                rc = store_attachment_counts_set(s, batch[i], lines, marks);
                counted += rc == MV_OK;
            } /* else damaged: left uncounted, as the check reports it */
            after = batch[i];
        }
        if (rc == MV_OK) {
            rc = store_commit(s);
        } else {
            store_rollback(s); /* the batches before stay counted */
        }
        if (rc != MV_OK) {
            return rc;
        }
        out->parts_counted += counted;
        if (listed < OPS_COUNT_BATCH) {
            return MV_OK;
        }
    }
}

int mv_store_maintain(mv_store *s,
                      const struct mv_maintain_options *opts,
                      struct mv_maintain_report *out)
{
    static const struct mv_maintain_options defaults = MV_MAINTAIN_OPTIONS_INIT;
    const struct mv_maintain_options *o = opts != NULL ? opts : &defaults;
    if (s == NULL || out == NULL) {
        return s != NULL ? store_fail(s, MV_EINVAL, "mv_store_maintain: no report") : MV_EINVAL;
    }
    memset(out, 0, sizeof *out);
    if (s->readonly) {
        return store_fail(s, MV_EINVAL, "maintenance needs a writable store, not read-only");
    }
    if (o->vacuum_free_percent > 100 || o->vacuum_slack_percent > 100) {
        return store_fail(s, MV_EINVAL, "vacuum thresholds are percentages (0..100)");
    }
    struct ops_progress progress = {o, "", 0};
    out->bytes_before = ops_store_bytes(s);
    int rc = ops_maintain_skip(s, o, out);
    if (rc != MV_OK || out->skipped != MV_MAINTAIN_SKIPPED_NONE) {
        return rc;
    }
    rc = ops_meta_get_int(s, OPS_META_QUICK_CHECK_AT, &out->quick_check_last_at);
    if (rc == MV_OK) {
        rc = mv_store_purge(s, 0, NULL); /* expunged bodies first: the checkpoint and the
                                            measurements then see the store without them */
    }
    char move_error[sizeof s->errmsg] = "";
    if (rc == MV_OK && o->changes_keep_days > 0) { /* before the checkpoint, as the purge */
        rc = store_changes_prune(
            s, (int64_t)time(NULL) - (int64_t)o->changes_keep_days * OPS_SECONDS_PER_DAY,
            &out->changes_pruned);
    }
    if (rc == MV_OK) { /* what a migration left (the full-text move), and its old index's pages */
        rc = ops_maintain_move(s, out, move_error, sizeof move_error);
    }
    if (rc == MV_OK) { /* the attachments a store from before schema version 15 has */
        rc = ops_maintain_counts(s, out);
    }
    if (rc == MV_OK) {
        rc = ops_maintain_wal(s, out);
    }
    if (rc == MV_OK) {
        rc = ops_measure(s, &progress, out);
    }
    if (rc == MV_OK) {
        rc = ops_vacuum(s, o, &progress, out);
    }
    if (rc == MV_OK) {
        rc = ops_quick_check(s, o, &progress, out);
    }
    if (rc == MV_OK || rc == MV_ECORRUPT) {
        int meta_rc = ops_meta_set_int(s, OPS_META_MAINTAINED_AT, (int64_t)time(NULL));
        rc = rc == MV_OK ? meta_rc : rc;
    }
    out->bytes_after = ops_store_bytes(s);
    if ((rc == MV_OK || rc == MV_ENOSPC) && out->fts_move_failed) {
        rc = store_fail(s, MV_ECORRUPT,
                        "the full-text move of the schema 9 migration cannot go on (%s); "
                        "`mailvault repair` ends it (it drops the old index and rebuilds its "
                        "rows from the bodies); the other maintenance steps were done",
                        move_error);
    } else if (rc == MV_OK && out->vacuum == MV_VACUUM_REFUSED_DISK) {
        rc = store_fail(s, MV_ENOSPC,
                        "VACUUM refused: %llu bytes free on the disk of %s, it needs twice the "
                        "store (%llu bytes)",
                        (unsigned long long)out->disk_free_bytes, s->domain_dir,
                        (unsigned long long)out->bytes_before * 2);
    }
    return rc;
}
