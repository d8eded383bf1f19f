/*
 * worker.h -- the worker threads (worker.c): jobs and their lanes, store pinning, the
 * open-store table. A job's run() runs on its worker and may touch only the job, its
 * session's mailbox state and that worker's open stores; done() runs on the loop.
 */
#ifndef MV_IMAPD_WORKER_H
#define MV_IMAPD_WORKER_H

#include "buf.h"
#include "config.h"
#include "imap_structure_cache.h"
#include "mailvault.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct conn;
struct worker;
struct job;
typedef void (*job_fn)(struct job *job);
/* A worker takes short jobs first (worker.c "LANES"): a NOOP, a flag change or a small FETCH
 * does not wait behind a FETCH of many bodies, a big SEARCH or COPY. Each job of a session
 * waits for the one before it (the connection is busy meanwhile), so lanes never reorder a
 * session's commands; the poster of a job that must follow another (a session's end) gives
 * it the same lane. */
enum job_lane { JOB_LANE_SHORT = 0, JOB_LANE_LONG = 1, JOB_LANE_READ = 2, JOB_LANES = 3 };
/* JOB_LANE_READ (worker.c "READERS"): a command that only reads (a FETCH that sets no \Seen,
 * a SEARCH, a NOOP) runs on the worker's reader thread with the store's second handle
 * (open_store.reader), so it does not wait for the writer thread's jobs (a commit and its
 * fsync, a delete). Its poster checks that the session's store has a reader. */
/* Short jobs a worker takes in a row while a long one waits, before the long one goes. */
#define WORKER_SHORT_BURST 8
struct job {
    struct job *next;
    struct conn *conn; /* the loop's; run() must not touch it */
    job_fn run;        /* on the worker */
    job_fn done;       /* on the loop, after run */
    struct worker *worker;
    void *arg;
    struct buf out; /* response bytes written by run() */
    int delay_ms;   /* done() holds the output this long */
    int result;
    enum job_lane lane; /* set by the poster (0: short) */
    int64_t queued_us;  /* worker_post: when it was queued (metrics) */
    /* The user whose store the job may touch (job_user(); 0: none, a job of the test's own
     * or one before a login). A worker's writer threads never run two jobs of one user at
     * once (worker.c "WRITERS"); jobs of user 0 take turns among themselves too. */
    uint64_t user;
    /* SYNC APART (worker.c): set by run() through worker_sync_after(); the job is done only
     * after sync_store's WAL sync and synced(). */
    struct open_store *sync_store;
    void (*synced)(struct job *job, int rc);
};
/* Sets job->user to address's key (its FNV-1a 64; "" is 0). Two addresses with one key only
 * take turns as one user would. */
void job_user(struct job *job, const char *address);
/* Starts count workers, each with cfg->writers_per_worker writer threads (worker.c
 * "WRITERS") and one reader thread. 0 or -1. */
int worker_start(const struct config *cfg, int count, int eventfd);
void worker_stop_all(void);
/* How long after a store's open the first drain step waits for the next job at most
 * (WORKER_DRAIN_GRACE_MS; ms <= 0 restores it); returns the old value. For tests, which
 * lengthen it so that their "the next command runs before any step" does not race a timer. */
int worker_drain_grace_set(int ms);
/* worker.c SHARE: the period after which the purge and the full-text catch-up take a batch
 * although jobs wait (WORKER_BACKGROUND_PERIOD_MS; ms < 0 restores it, 0: after every job
 * that leaves one waiting); returns the old value. For tests. */
int worker_background_period_set(int ms);
/* worker.c QUIET: how long the work between jobs waits after a job for the session's next
 * command (WORKER_QUIET_MS; ms < 0 restores it, 0: not at all); a quiet longer than
 * WORKER_QUIET_CAP_MS lengthens the cap to it (the quiet then holds however late a job runs);
 * returns the old value. For tests. */
int worker_quiet_set(int ms);
/* For tests: fn runs on the worker right before each checkpoint between jobs starts, with the
 * store's address (and may post a job, which then interrupts it); NULL: none. */
void worker_checkpoint_hook_set(void (*fn)(struct worker *w, const char *address));
/* For tests: fn runs on the worker right after the drain step that emptied a store's sealed
 * queue (THE DRAIN), with the store's address; NULL: none. */
void worker_drained_hook_set(void (*fn)(struct worker *w, const char *address));
/* worker.c SHARE: how long a forced round takes stores for (WORKER_BACKGROUND_BUDGET_MS; ms < 0
 * restores it, 0: one store a round); returns the old value. For tests. */
int worker_background_budget_set(int ms);
/* worker.c SHARE, for tests: the forced rounds w has run, the stores they served in all,
 * those of them that served address's open store (0 if it is not open), and the stores open
 * on w now. */
void worker_background_counts(struct worker *w,
                              const char *address,
                              uint64_t *rounds,
                              uint64_t *served,
                              uint64_t *store_served,
                              int *open);
/* PLACEMENT (worker.c): the worker address is placed on, placing it on the worker with the
 * fewest users if it is not; takes a hold, which keeps it there until worker_unplace(). Call
 * before posting a job for the user, and end the hold when nothing of the caller's is on the
 * worker any more (the job's done(), a session's end). */
struct worker *worker_place(const char *address);
void worker_unplace(const char *address);
/* The worker address is placed on, or NULL; takes no hold. */
struct worker *worker_placed(const char *address);
/* Users placed on w (for tests and control). */
int worker_placed_users(const struct worker *w);
/* worker.c NICE: the work between jobs runs more nice by `more` (0: at the jobs' priority),
 * if this process may go back (tried on a thread of its own; else 0, logged); returns the old
 * value. worker_start sets cfg->background_nice; for tests. */
int worker_background_nice_set(int more);
/* Queues job on worker (job->worker set). */
void worker_post(struct worker *w, struct job *job);
/* The loop calls this when the eventfd fires: runs done() of every finished job. */
void worker_collect(void);

/* The open-store table of a worker (call only from a job running on that worker). */
struct imap_view_cache;
struct open_store {
    /* address, store, refs and last_used_ms are the worker's table: written under its lock
     * (worker.c "WRITERS"); the rest only by the writer thread that holds the user. */
    char address[MV_ADDRESS_MAX + 1]; /* "" and store NULL: free; set, store NULL: opening */
    uint64_t user;                    /* job_user()'s key of address */
    mv_store *store;
    unsigned char verifier[32];
    int refs;
    int64_t last_used_ms;
    /* Sealed deliveries still queued: the store was opened without draining them
     * (MV_STORE_DRAIN_LATER) and the worker drains them in steps between jobs (worker.c
     * "THE DRAIN"); LMTP seals into the queue meanwhile, so INBOX keeps arrival order. */
    int drain_more;
    /* Bodies of the store's full-text backlog (mv_store_index_backlog_count), which each
     * SEARCH TEXT/BODY key parses again: written by the worker thread (worker.c), read by
     * the loop for the command's lane (imap_lane.c). */
    _Atomic uint64_t fts_backlog;
    /* The highest id of a body the full-text catch-up set aside (damaged) that the worker
     * has logged (worker.c THE DRAIN); 0 after the open: it logs them once per open. */
    int64_t fts_aside_logged;
    /* The set-aside bodies were looked for since the open: after that only a catch-up batch
     * that had bodies to build can set more aside, so a batch with none looks no more (the
     * look is a statement, and the purge runs after every job). */
    int fts_aside_seen;
    /* Forced rounds (worker.c SHARE) that served this store, under the worker's lock; for
     * worker_background_counts. */
    uint64_t background_served;
    /* No step before the worker has run this many jobs (the login's and the next, its
     * client's next command) or before drain_after_ms (monotonic), whichever comes first;
     * no purge batch either (worker.c LOGIN FIRST). */
    uint64_t drain_after_job;
    int64_t drain_after_ms;
    struct imap_view_cache *view_cache; /* the IMAP views SELECT copies (imap_view_cache.c) */
    /* view_cache's: SELECT and EXAMINE run on the reader thread (worker.c READERS) and the
     * writer's thread (its close saves the views), so the cache is used under this lock.
     * Made with the worker's table, kept for the slot's life. */
    pthread_mutex_t view_lock;
    /* FETCH BODYSTRUCTURE and BODY answers (imap_structure_cache.c): made with the worker's
     * table, kept for the slot's life (NULL if that failed: every FETCH parses), emptied when
     * the store closes. It has a lock of its own. */
    struct imap_structure_cache *structure_cache;
    /* The sent days of one mailbox's messages, read at a SEARCH SENT* key and kept for the
     * next, of any session of the user (imap_search_sent.c); NULL: none. Used under
     * sent_lock (SEARCH runs on the reader thread and the writers), freed when the store
     * closes. */
    struct imap_sent_dates *sent_dates;
    pthread_mutex_t sent_lock;
    /* The Message-ID fields of one mailbox's messages, read at a SEARCH HEADER Message-ID
     * key and kept for the next (imap_search_msgid.c); NULL: none. As sent_dates, under
     * msgid_lock. */
    struct imap_msgids *msgids;
    pthread_mutex_t msgid_lock;
    /* SORT's keys of one mailbox, made at a SORT and kept for the next
     * (imap_sort_kept.c); NULL: none. Under sort_lock, freed when the store closes. */
    struct imap_sort_kept *sort_kept;
    pthread_mutex_t sort_lock;
    /* The second handle (mv_store_open_twin) for jobs of JOB_LANE_READ, used only on the
     * worker's reader thread; NULL if it could not be opened (reads then stay on the
     * writer). Set when the store opens, closed with it (no session holds it then, so no
     * read job of it is in flight). */
    mv_store *reader;
    /* Bodies the next mv_store_purge() call between jobs may delete (worker_purge_batch_next;
     * 0: not measured yet). */
    uint32_t purge_batch;
    /* What the store's migration left (mv_store_migrate_step: the full-text move) is not done:
     * the worker does it in steps, as it drains (worker.c "MIGRATION"); the rows one batch
     * moves (worker_migrate_batch_next, 0: not measured yet); the last batch gave way;
     * when the work started (monotonic ms), for the log line at its end. */
    int migrate_more;
    uint32_t migrate_batch;
    int migrate_gave_way;
    int64_t migrate_start_ms;
};
/* A job made FETCH BODYSTRUCTURE answers that its store's memos do not have yet
 * (imap_fetch.c): after a read job the writers are woken to save them between jobs
 * (worker.c MEMOS); a writer's own jobs are followed by that work anyway. */
void worker_structure_unsaved(void);
/* Frees a store's cached views (when it is closed); *c becomes NULL. */
void imap_view_cache_free(struct imap_view_cache **c);
/* Saves each cached view that is newer than the store's saved one (mv_mailbox_view_save),
 * brought up to date first, for the next SELECT after the store is opened again; failures
 * are logged and change nothing (imap_view_cache.c). */
void imap_view_cache_save(struct imap_view_cache *c, mv_store *store);
/* Opens (or finds, checking the password) the store of address. Returns MV_OK with *out,
 * MV_EAUTH / MV_ENOTFOUND, MV_ELIMIT (no room: every open store in use), or another code;
 * errmsg gets the detail. */
int worker_store_acquire(struct worker *w,
                         const char *address,
                         const char *password,
                         size_t password_len,
                         struct open_store **out,
                         char *errmsg,
                         size_t errmsg_size);
void worker_store_release(struct worker *w, struct open_store *s);
/* The sessions holding s (its references), for the login's user_sessions_max. */
int worker_store_sessions(struct worker *w, const struct open_store *s);
/* The same from a job on the reader thread: the release is a job of the writer thread (the
 * table is the writer's). */
void worker_store_release_from_reader(struct worker *w, struct open_store *s);

/* worker.c SYNC APART: from run() of a job on a writer thread, after an append through s's
 * writer handle left its WAL sync owed (mv_store_sync_owed): the job is not done when run()
 * returns; a sync thread makes the append durable (mv_store_sync) while the writer goes on
 * with other users' jobs, then calls synced(job, rc) with mv_store_sync's code (it may
 * rewrite job->out: the answer must not say stored unless rc is MV_OK), and the job is done.
 * The job's user stays held until then, so nothing else uses s's writer handle meanwhile.
 * Without sync threads (sync_apart 0) the sync and synced() run here, at once. */
void worker_sync_after(struct job *job, struct open_store *s, void (*synced)(struct job *, int));
/* For tests: fn runs on the sync thread right before each sync of SYNC APART, with the
 * store's address; NULL: none. */
void worker_sync_hook_set(void (*fn)(const char *address));
/* A message was appended through s's writer handle (IMAP APPEND, LMTP): with index_later its
 * body waits in the full-text backlog, which s->fts_backlog counts for the lane of a SEARCH
 * TEXT/BODY (imap_lane.c) until the next catch-up batch notes the count again. */
void worker_backlog_added(struct open_store *s);
/* The purge's next batch size (bodies), from the last one's: batch bodies took elapsed_us.
 * Sized so a batch takes about WORKER_PURGE_TARGET_US (a job that arrives meanwhile waits
 * for one chunk of it: mv_store_purge_give_way), at least 1, at most WORKER_PURGE_BATCH_MAX,
 * and at most twice the last. */
uint32_t worker_purge_batch_next(uint32_t batch, int64_t elapsed_us);
/* NEW MAIL FIRST: while a drain step is due, the work between jobs (the purge's batches, the
 * full-text catch-up, the WAL checkpoint) waits until the drain has had this long of steps
 * since that work last took a turn. */
#define WORKER_DRAIN_FIRST_MS 500
/* Whether the purge between jobs runs another batch, having run batches_run in this call
 * (batches that deleted bodies, built full-text rows or gave way; not a store's call that
 * found nothing to do):
 * never while a job waits or at a stop (worker.c PURGE AND STOP: the next open finds the
 * rest); while a drain step is due, none before a queue's drain has had
 * WORKER_DRAIN_FIRST_MS of steps since the last turn of this work (drain_streak_ms: that
 * value when the step due is a full-text MIGRATION's), then only the call's first batch (new
 * mail goes first, and the purge still moves on under steady deliveries). */
int worker_purge_may_go_on(
    int batches_run, int job_waiting, int drain_due, int64_t drain_streak_ms, int stopping);
/* Whether worker_stop_all() has asked w to stop (its writer thread ends once its queued jobs
 * have run): a job that waits for something may end early. */
int worker_stop_requested(struct worker *w);
/* worker.c SHARE: whether the purge and the catch-up take a batch now although a job waits:
 * when one waits and period_ms have passed since they last ran (last_ms; monotonic ms). */
int worker_background_owed(int job_waiting, int64_t now_ms, int64_t last_ms, int64_t period_ms);
/* worker.c SHARE: the turns of the forced rounds over a worker's slots. */
struct worker_turns {
    int next;            /* the slot the rotation goes on at */
    unsigned char *owed; /* per slot: a round passed its store over; it goes first */
};
#define WORKER_TURN_EMPTY  (-2) /* no store in the slot */
#define WORKER_TURN_SKIP   (-1) /* a store that cannot be served now: owed a turn */
#define WORKER_TURN_SERVED 0
#define WORKER_TURN_LAST   1 /* served, and the round's budget is spent */
/* serve(arg, slot): one of WORKER_TURN_*. */
typedef int (*worker_turn_fn)(void *arg, int slot);
/* One forced round over slots slots: the owed stores first, then the rest from t->next on,
 * until serve() says WORKER_TURN_LAST or every slot was offered; updates t. */
void worker_background_round(struct worker_turns *t, int slots, worker_turn_fn serve, void *arg);
/* The open store of address without a password (LMTP delivery into an open store), or NULL. */
struct open_store *worker_store_find(struct worker *w, const char *address);
const struct config *worker_config(const struct worker *w);
/* For control.c: the number of workers, and the one at index (0 .. worker_total() - 1). */
int worker_total(void);
struct worker *worker_at(int index);
/* On the worker: a "* store ADDRESS worker=N sessions=N idle_s=N" line per open store. */
void worker_store_list(struct worker *w, struct buf *out);
/* On the worker: checkpoints (TRUNCATE) and closes the store of address if it is open and
 * no session holds it (*closed = 1). MV_OK (closed, or not open here) or MV_EBUSY. */
int worker_store_close_user(struct worker *w, const char *address, int *closed);

#endif /* MV_IMAPD_WORKER_H */
