/*
 * worker.c -- the worker threads: each has a job queue and owns the open stores of the
 * users placed on it (PLACEMENT), so a store handle is only ever used by one thread and one
 * user's slow command stalls only that worker's users. A finished job goes on one completion
 * list and the loop is woken through an eventfd.
 *
 * PLACEMENT
 *   A user is placed on a worker when something first needs it (a login, an LMTP delivery or
 *   recipient check, a control request) and stays there while anything holds it: each session
 *   that tried to log in as the user, each LMTP or control job for it, and its open store
 *   (from the open to the close, so a cached store is found again by the next login). When
 *   the last hold goes, so does the placement, and the user's next placement may pick another
 *   worker. A new placement goes to the worker with the fewest users placed (ties: the one
 *   FNV-1a(address) names, then the next ones), so that users in use at the same time share
 *   a worker only when there are more of them than workers: with a hash, 10 users on 8
 *   workers put 4 of them on 2 shared workers, and a STORE of one waited for the other's
 *   APPEND and its fsync (issue 13: 1.2-1.9 ms more STORE wait at the median than the users
 *   alone on their worker). One user is on one worker at a time: the loop takes its hold
 *   before it posts the job, and the store's own hold is taken by the job that opens it,
 *   which runs on the worker the user is placed on (imap_cmd_auth.c checks), so the count
 *   never drops to zero while a job or a store of the user is on a worker.
 *
 * OPEN STORES
 *   A small table per worker, looked up by address. A store in use (refs > 0) stays open; an
 *   unused one is closed (mv_store_close runs PRAGMA optimize) after store_idle_s, or when
 *   the table is full and a new store needs the slot (least recently used first). A cached
 *   store is handed out only to the right password: HMAC-SHA256 under a random per-process
 *   key of the password, compared in constant time. The sweep for idle stores runs every
 *   min(10 s, store_idle_s), between jobs.
 *
 * MAINTENANCE
 *   A store closed by the sweep (no session uses it, nobody has for store_idle_s) first gets
 *   mv_store_maintain() with the library's default thresholds, if its last run (the store's
 *   own record, so restarts and `mailvault maintain` count) is maintain_interval_s old, it is
 *   at most maintain_max_mib (VACUUM and quick_check read all of it, and the worker's other
 *   users wait meanwhile) and no job is waiting on the worker; the first two are the
 *   library's min_interval_s and store_bytes_max, so the rule lives beside the record. A store
 *   pushed out of a full table is not maintained: a login is waiting for its slot. One log
 *   line says what was done.
 *
 * LANES
 *   Each worker has two FIFO queues: short jobs (a NOOP, a flag change, a FETCH of a few
 *   hundred messages' headers, a login, a SELECT, an IDLE poll, an LMTP recipient check) and
 *   long ones (a FETCH of many bodies, a SEARCH or COPY over a big mailbox, and whatever
 *   waits for an fsync or deletes: APPEND, EXPUNGE, LMTP deliveries; the poster decides, for
 *   IMAP from the command and the size of its set: imap_lane.c). The worker takes the short lane
 *   first, so a short command waits at most for the job running when it came, not for every
 *   long job queued before it. Fairness: after WORKER_SHORT_BURST short jobs in a row taken
 *   while a long one waited, the long one goes next, so a stream of short jobs slows long
 *   ones down (to 1 in WORKER_SHORT_BURST + 1) but never stops them. A session has one job
 *   in flight at a time (its connection is busy), so its commands still run in order; the
 *   job that ends a session goes into the lane of the session's last job, behind it. A long
 *   FETCH also yields between its chunks: each chunk is a job of its own.
 *
 * WRITERS
 *   A worker runs its lanes on writers_per_worker threads (default 1), and never two jobs of
 *   one user at once: each job names its user (job.user, set by the poster), a writer takes
 *   the first job of a lane whose user no other writer of the worker holds, and holds that user
 *   until the job is done. One writer at a time has the worker's long turn: a long job, a
 *   drain step, the work between jobs (the purge, the full-text backlog, checkpoints) or the
 *   sweep; the others take short jobs meanwhile. So with two, one user's job that waits (an
 *   APPEND's fsync, an EXPUNGE's deletes) does not hold the STOREs of the other users placed
 *   on the worker (issue 13: at 10 clients 10 users share 8 workers, and a STORE's median
 *   wait was 3-5x longer for the users that shared one), while long work stays one at a time
 *   per worker as with one writer. A user's own jobs still run one at a time, on one SQLite
 *   connection, so SQLite's one writer and a session's order are kept. The work between jobs
 *   holds each store's user in turn and gives way only to a job that waits for it: one of
 *   that user, a long one (it waits for the turn), or any when no other writer is free; a
 *   writer that ends a short job while another has the long turn leaves that work to it. The
 *   open-store table is shared by the writers: a slot's address, store pointer, refs and last
 *   use are written under the worker's lock; the rest of an open store only by the writer
 *   that holds its user. A slot is reserved (its address set) before the store opens outside
 *   the lock, and a store pushed out of a full table is one no writer holds. Bounds:
 *   writers_per_worker x workers threads; the page caches are the stores' (one connection
 *   each, used by one thread at a time), so more writers add no memory but their stacks.
 *   Why the default is 1: two cut STORE's p99 at 10 clients to Dovecot's and raised the
 *   commands per second 1-80%, but the reads' p50 rose 1.3-2.3x in the same runs (2 loaded
 *   CPUs, a closed-loop benchmark; docs/BENCHMARKS.md).
 *
 * READERS
 *   A worker has a second thread, its reader, with a queue of its own (JOB_LANE_READ), and
 *   each open store a second handle on the same file (open_store.reader, mv_store_open_twin:
 *   the key is shared, no KDF). A command that only reads and touches few messages (a FETCH
 *   that sets no \Seen, a SEARCH, a NOOP), and SELECT and EXAMINE (imap_lane.c), run there,
 *   so they never wait for the writer thread's job: an APPEND's fsync, an EXPUNGE's deletes,
 *   a drain step, a purge batch. SQLite's WAL lets the reader read while the writer commits;
 *   every read begins after the session's previous command ended (a session has one job in
 *   flight), so it sees that command's writes (read-your-writes), and the session's view
 *   (sequence numbers) is the session's own, changed only by its own job. The rare write a
 *   read job makes (a sync or a SELECT that claims \Recent for messages that just arrived)
 *   goes through the reader's handle, tried once without waiting for the writer's transaction
 *   (imap_recent.c). The table of open stores stays the writer's: the reader only uses the
 *   reader handles of stores that its jobs' sessions hold (refs > 0, so none is closed
 *   meanwhile), and a session's end that runs on the reader hands the release to the writer
 *   (worker_store_release_from_reader); a store's view cache has a lock of its own
 *   (open_store.view_lock). Bounds: one reader thread per worker (2 x workers threads in all)
 *   and one more SQLite connection per open store (stores_per_worker x workers; each with the
 *   store's page cache size). The reader runs its queue in order (FIFO): only small reads go
 *   there, so each waits for a few milliseconds of other reads at most; big ones stay in the
 *   writer's long lane.
 *
 * THE DRAIN
 *   A store is opened with MV_STORE_DRAIN_LATER, so a login never waits for the sealed queue:
 *   the LOGIN and the SELECT that follows answer from the store as it is (issue 13: a step in
 *   the login, even of one delivery, cost a directory listing, an append and a durable commit,
 *   ~100 ms of a first LOGIN + SELECT that takes ~30 ms without it), and the worker drains the
 *   queue in steps (mv_queue_drain_step) once the job after the login's has run on the worker
 *   (the SELECT that follows a LOGIN: it must not wait behind a step, also when it comes late
 *   on a busy machine), or WORKER_DRAIN_GRACE_MS after the open if none comes, each taking
 *   a turn as a long job (alternating with queued long jobs, behind the short lane). A step is
 *   bounded by time, not by a count: it goes on while no job waits (up to WORKER_DRAIN_STEP_MS),
 *   and gives way to one that comes after WORKER_DRAIN_MIN_MS; each step is one durable commit,
 *   and the library keeps its place in the queue between steps (the directory is not listed
 *   again per step). A step stores the messages without their full-text rows (the library's
 *   full-text backlog: searches still find them); once the drain is over, the worker builds
 *   the rows between jobs (mv_store_index_backlog, WORKER_INDEX_BATCH a call, while no job
 *   waits), so the mail is visible without waiting for its indexing. After a step that
 *   moved messages, the loop is told (a finished pseudo-job) and wakes the user's IDLE
 *   sessions; selected sessions see the new messages (EXISTS, RFC 3501 7.3.1) at their next
 *   command, as with any change. While a store's queue is not yet empty, LMTP seals
 *   deliveries for that user instead of appending directly, so UIDs follow arrival order. The
 *   sweep does not close a store whose queue is draining. A failed step is logged and ends
 *   the draining of that store until its next open.
 *
 * SHARE
 *   The purge of expunged bodies and the full-text catch-up (THE DRAIN) run between jobs
 *   while no job waits, giving way to one that comes. On a worker that is never idle they
 *   would never run: the bodies stay, and every SEARCH TEXT/BODY parses each backlog body
 *   again. So when a job waits and WORKER_BACKGROUND_PERIOD_MS have passed since they last
 *   ran (or found nothing to do), stores get one batch of each anyway, store after store for
 *   WORKER_BACKGROUND_BUDGET_MS (worker_background_owed): a guaranteed share, as drain steps
 *   take turns with long jobs. Such a purge batch deletes its first chunk of 4 bodies and
 *   gives way there to the job that waits, which waits for that chunk at most.
 *
 * QUIET
 *   A session's commands often come in a row (a client's STORE, then its UID STORE or FETCH):
 *   after a job, the work between jobs waits WORKER_QUIET_MS for the next one, and runs only
 *   if none came (worker_quiet_set for tests): started right after the job, the work kept
 *   the command that followed waiting for a part of it. Only while that work has work (it
 *   did some within WORKER_QUIET_CAP_MS; else it runs right after the job, a flag test), and
 *   not when a job waits (SHARE decides then), so a session that never pauses for
 *   WORKER_QUIET_MS still gets the purge after its jobs once per cap.
 *
 * NICE
 *   The work between jobs (the purge, the full-text catch-up, the queue's tidy, checkpoints:
 *   worker_purge) runs at background_nice more nice than the jobs, and the writer goes back
 *   to the process' own nice value as soon as a job comes for the worker's writers
 *   (worker_post sets the thread back; so does the writer when it finds one waiting after it
 *   lowered itself, and when the work ends). On 2 CPUs that mailvaultd alone nearly fills at
 *   10 clients of the IMAP bench, that work competed at the same priority with every other
 *   worker's jobs: at 100 clients the STOREs' median wait fell from 21-22 to 5-6 ms and the
 *   reads' from 3.5 to 2.5, with a third more commands per second (issue 13,
 *   docs/BENCHMARKS.md). Going back needs the privilege to lower a nice value (CAP_SYS_NICE,
 *   or an RLIMIT_NICE that allows it, e.g. systemd's LimitNICE=): worker_start tries it on a
 *   thread of its own and leaves the work at the jobs' priority if it cannot (one log line).
 *
 * INDEX LATER
 *   With index_later (the default) a store the worker opens appends without full-text rows
 *   (mv_store_index_later): an IMAP APPEND's or LMTP delivery's body goes into the store's
 *   full-text backlog, as a drain step's does, and the work between jobs builds the rows
 *   (worker_index_batch, WORKER_INDEX_BATCH bodies a transaction, one FTS5 segment for them
 *   all). Searches find the messages meanwhile (the library reads the backlog's bodies) and
 *   the lane of a SEARCH TEXT/BODY counts them (worker_backlog_added). Why: at 10 clients of
 *   the IMAP bench an APPEND's durable commit wrote ~45 WAL frames, two thirds of them its
 *   trigram rows, and the fsyncs of those ~60 MB/s of WAL set the writes' p99 (STORE 18,
 *   APPEND 35 ms against Dovecot's 11 and 22; docs/BENCHMARKS.md). A catch-up batch gives way
 *   to a job after its next body (a batch of 32 held the writer for tens of milliseconds:
 *   STORE's p99 doubled); one forced through while jobs wait (SHARE) builds
 *   WORKER_INDEX_FORCED bodies first, so that it keeps up with a user's APPENDs.
 *
 * SYNC APART
 *   With sync_apart (off by default, below) a store the worker opens appends through
 *   mv_store_sync_later(): an IMAP APPEND's or LMTP delivery's commit does not wait for the
 *   WAL's fsync; its job asks for the sync (worker_sync_after) and, when run() returns, the
 *   writer hands the job to the sync threads (one per worker, one queue) and goes on with
 *   other users' jobs. A sync thread syncs (mv_store_sync), lets the job write its answer
 *   (the tagged OK or 250 only if the sync was done; NO or 451 if the disk refused), and
 *   finishes the job. The job's user stays held meanwhile (worker.sync_users, which
 *   worker_held counts as a writer's hold), so the user's next job, the work between jobs on
 *   its store and the sweep wait for the sync, and nothing else uses the writer handle; reads
 *   on the reader handle see the message from its commit on, a few milliseconds before it
 *   is durable (a crash then loses it as an append never acknowledged). A writer's end
 *   waits for its worker's syncs, and the sync threads stop after the writers. Why: a
 *   worker's writer runs several users' jobs, and with the sync inside the commit every
 *   APPEND holds the others for its fsync (2-20 ms on this VM's disk, more on a slow one). A
 *   second writer (WRITERS) takes that wait away too, but runs two users' CPU work at once; a
 *   sync thread only waits for the disk. Measured (docs/BENCHMARKS.md "An APPEND's fsync
 *   apart"): at 100 clients of the IMAP bench a third more commands a second and the writes'
 *   p50 halved, but the reads' p50 doubled on the 2 CPUs that then stayed saturated; at 10
 *   clients no change beyond the noise (the tails there are waits for a CPU). So it is off
 *   by default, for disks whose fsync is slow.
 *
 * MEMOS
 *   The FETCH BODYSTRUCTURE and BODY answers a job made (the store's structure cache marks
 *   them unsaved) are written to the store's memos as one more part of the work between jobs,
 *   IMAP_STRUCTURE_SAVE_BATCH a write transaction, giving way to jobs as the purge does, and
 *   all that are left at the store's close (imap_structure_save.c). A read job alone never
 *   starts that work, so the reader, after a job that made answers (worker_structure_unsaved),
 *   sets it due after WORKER_QUIET_MS and wakes the writers. A batch that fails is logged and
 *   not saved; its answers are made again after the next open.
 *
 * MIGRATION
 *   An open migrates a store of an older schema version; what would hold the login for
 *   minutes (from version 8: the full-text index rebuilt without positions, ~1.5-2 ms of CPU
 *   a message) the library leaves for mv_store_migrate_step(). The open logs one line
 *   (versions, user, time, rows left) and counts in the metrics; the worker then moves the
 *   rows in steps scheduled as drain steps are (after the login's next job, behind the short
 *   lane, taking turns with long jobs; after the queue's drain), each a few batches of
 *   ~50 ms (worker_migrate_batch_next) for up to WORKER_DRAIN_STEP_MS while no job waits. A
 *   batch gives way to a job that comes (rolled back, done again; the batch after one that
 *   gave way does not), so a command waits ~0.1 ms for it. Stores take turns for these
 *   steps and for drain steps (worker_drain_due: the next after the one served last), and a
 *   store with deliveries queued goes before one that only migrates, so a long move does not
 *   hold back another user's mail. Searches answer from both indexes meanwhile. The sweep does not
 * close a store whose move is under way; a line at the end says how long it took.
 */
#include "worker.h"
#include "buf.h"
#include "config.h"
#include "conn.h"
#include "imap_search_msgid.h"
#include "imap_search_sent.h"
#include "imap_sort_kept.h"
#include "imap_structure_save.h"
#include "log.h"
#include "mailvault.h"
#include "metrics.h"
#include "protocols.h"
#include "quota.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* The WAL a store's commits may grow before one of them checkpoints it anyway (~64 MiB):
 * a purge of 1,000 expunged bodies writes ~12,000 frames, and a worker busy with jobs for a
 * long time never gets to worker_checkpoint(). */
#define WORKER_WAL_FRAMES_MAX 16384

/* Drain steps (THE DRAIN), each made durable by one WAL fsync (docs/DELIVERY.md): a step goes
 * on while no job waits, up to WORKER_DRAIN_STEP_MS or WORKER_DRAIN_MAX deliveries, and gives
 * way to a job that comes once it has run WORKER_DRAIN_MIN_MS (so the fsync, a step's fixed
 * cost, is shared by several deliveries, and a command waits at most about that long).
 * WORKER_DRAIN_MAX is the library's bound of deliveries per fsync (STORE_QUEUE_SETTLE_MAX):
 * 1,200 queued messages are one step, whose files leave the queue after the sessions were
 * told (1,024 made two, the first step's 1,024 renames before the second step's notice). */
#define WORKER_DRAIN_MIN_MS  25 /* of the thread's CPU time: the same work on a busy machine */
#define WORKER_DRAIN_STEP_MS 250
#define WORKER_DRAIN_MAX     2048
/* After the open (a login), the first step waits for the worker's next job (the client's next
 * command, the SELECT that follows a LOGIN), so that it runs first instead of behind a step; a
 * fixed 50 ms was too short on a loaded machine, where the client's SELECT often came later and
 * waited for the first step and its commit. A client that sends nothing gets its mail after
 * this long. */
#define WORKER_DRAIN_GRACE_MS 1000
static _Atomic int worker_drain_grace_ms = WORKER_DRAIN_GRACE_MS; /* tests may lengthen it */
/* SHARE: the busy time after which the purge and the full-text catch-up take a batch each
 * although jobs wait. A purge batch then deletes one chunk of 4 bodies (the job that waits
 * makes it give way there; ~1 ms of CPU a body of the IMAP bench's mail), i.e. at least 80
 * bodies a second per store on a worker that never idles, twice the ~35 a second a user
 * expunges at 10 clients of the IMAP bench; a catch-up batch is ~10 ms at most. At 25 ms
 * the STOREs' p99 was the same and 2-3% fewer commands ran a second (issue 13). */
#define WORKER_BACKGROUND_PERIOD_MS 50
static _Atomic int worker_background_period_ms = WORKER_BACKGROUND_PERIOD_MS;
/* QUIET: after a job, the work between jobs (purge, catch-up, tidy, checkpoint) waits this
 * long for the session's next command, if it did work within WORKER_QUIET_CAP_MS: started
 * right after a command, it made the command that follows (a client's next, ~1 ms later)
 * wait for a part of it (issue 13: after two EXPUNGEs of 10% at 10,000 messages, the second
 * STORE of a pair waited for purge batches). The cap keeps a session that never pauses this
 * long from holding the purge off for good: it then runs right after a job, as before. */
#define WORKER_QUIET_MS     50
#define WORKER_QUIET_CAP_MS 1000
static _Atomic int worker_quiet_ms = WORKER_QUIET_MS; /* tests: 0 turns it off */
/* tests: a quiet longer than the cap lengthens the cap to it (worker_quiet_set), so that a job
 * that runs late on a loaded machine does not find the work "not run for the cap" */
static _Atomic int worker_quiet_cap_ms = WORKER_QUIET_CAP_MS;

/* SHARE: a forced round takes stores until it has run this long (worker_background_forced);
 * at least one */
#define WORKER_BACKGROUND_BUDGET_MS 5
static _Atomic int worker_background_budget_ms = WORKER_BACKGROUND_BUDGET_MS;

/* A writer thread of a worker (WRITERS); its fields under the worker's lock. */
struct worker_writer {
    struct worker *w;
    pthread_t thread;
    int started;
    int holds; /* it holds user (a job's, or the store's it works on between jobs) */
    uint64_t user;
    int holds_more; /* ... and more_user: a store it closes to free a slot for a login */
    uint64_t more_user;
    int in_long; /* it has the worker's long turn (worker.long_running) */
};

struct worker {
    struct worker_writer *writers;
    int writer_count;
    int writers_running; /* the last one to end closes the stores */
    int writers_idle;    /* waiting for a job (worker_job_waiting) */
    /* A writer runs a long job, a drain step, the work between jobs or the sweep: the
     * others take only short jobs meanwhile (WRITERS); 0 or 1. */
    int long_running;
    int64_t next_sweep_ms;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct job *head[JOB_LANES], *tail[JOB_LANES];
    /* jobs queued in the writers' lanes (short and long), also read without the lock: the
     * purge's give-way question, every few VM steps (worker_purge_give_way) */
    _Atomic int writer_jobs;
    int short_run;      /* short jobs taken in a row while a long one waited */
    uint64_t jobs_done; /* jobs run by its threads, reader too (THE DRAIN: the login's next one) */
    int drain_turn;     /* the next long turn goes to a drain step, if one is due */
    /* the slot the last drain or migration step was for (its turn): atomic, as a writer
     * sets it outside the lock while another scans (TSan with 2 writers, WRITERS) */
    _Atomic int drain_served;
    /* NEW MAIL FIRST: ms of a queue's drain steps since the work between jobs last took a
     * turn (or since no queue's step was due); atomic, as drain_served */
    _Atomic int64_t drain_streak_ms;
    int stop;
    int index;
    pthread_t reader; /* READERS: runs JOB_LANE_READ */
    pthread_cond_t reader_wake;
    int reader_stop;
    int reader_started;
    struct open_store *stores; /* stores_max slots; address "" = free */
    int stores_max;
    /* SHARE: when the purge and the catch-up last ran or were done (the writer with the
     * long turn's: WRITERS) */
    int64_t background_ms;
    struct worker_turns turns; /* the forced rounds' turns (worker_background_round) */
    /* SHARE, counted for tests (worker_background_counts): forced rounds, stores they served
     * (under the lock) */
    uint64_t background_rounds;
    uint64_t background_served;
    /* QUIET: when the work between jobs last did work (a batch), and when the work put off
     * after a job is due (0: none put off); the long turn's, as background_ms */
    int64_t background_ran_ms;
    int64_t between_due_ms;
    /* A checkpoint between jobs under way: its connection and user, so that a job posted
     * meanwhile interrupts it (worker_checkpoint); under the lock, NULL: none */
    sqlite3 *ckpt_db;
    uint64_t ckpt_user;
    int ckpt_interrupted;
    /* NICE: the writer thread doing the work between jobs at the lower priority; 0: none */
    _Atomic pid_t bg_tid;
    /* SYNC APART: the users whose job waits for its store's WAL sync on a sync thread; held
     * as a writer's user is (worker_held), so nothing else uses their writer handles. At most
     * one a user (the job holds it), so stores_max + writer_count entries are room enough. */
    uint64_t *sync_users;
    int sync_count;
    int sync_max;
};

static struct worker *workers;
static int worker_count;
static const struct config *worker_cfg;
static int worker_eventfd = -1;
static unsigned char worker_hmac_key[32];

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static struct job *done_head, *done_tail;

/* SYNC APART: the sync threads (worker_sync_count: 0 with sync_apart off) and their one
 * queue of jobs whose store's WAL sync is owed, under sync_lock. */
static pthread_mutex_t sync_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sync_wake = PTHREAD_COND_INITIALIZER;
static struct job *sync_head, *sync_tail;
static int sync_stop;
static pthread_t *sync_threads;
static int worker_sync_count;

/* The writer this thread is (WRITERS); NULL on other threads. */
static _Thread_local struct worker_writer *worker_self;

/* PLACEMENT: the users placed, by FNV-1a(address) % WORKER_PLACE_BUCKETS, and how many users
 * each worker has (place_users[worker]); under place_lock (the loop and the workers). */
#define WORKER_PLACE_BUCKETS 1024
struct worker_place {
    struct worker_place *next;
    int worker;
    int holds;
    char address[MV_ADDRESS_MAX + 1];
};
static pthread_mutex_t place_lock = PTHREAD_MUTEX_INITIALIZER;
static struct worker_place *place_table[WORKER_PLACE_BUCKETS];
static int *place_users;

const struct config *worker_config(const struct worker *w)
{
    (void)w;
    return worker_cfg;
}

static int64_t worker_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* WRITERS: the key of a user (FNV-1a 64; "" is 0). */
static uint64_t worker_user_key(const char *address)
{
    uint64_t h = 14695981039346656037ull;
    if (address == NULL || address[0] == '\0') {
        return 0;
    }
    for (const unsigned char *p = (const unsigned char *)address; *p != '\0'; p++) {
        h = (h ^ *p) * 1099511628211ull;
    }
    return h;
}

void job_user(struct job *job, const char *address)
{
    job->user = worker_user_key(address);
}

/* Whether a writer of w other than me holds user (lock held). */
static int worker_held(const struct worker *w, const struct worker_writer *me, uint64_t user)
{
    for (int i = 0; i < w->sync_count; i++) { /* SYNC APART: whichever writer ran the job */
        if (w->sync_users[i] == user) {
            return 1;
        }
    }
    for (int i = 0; i < w->writer_count; i++) {
        const struct worker_writer *t = &w->writers[i];
        if (t != me && ((t->holds && t->user == user) || (t->holds_more && t->more_user == user))) {
            return 1;
        }
    }
    return 0;
}

/* Whether this thread (a writer) holds user: only then may it open or close user's store. */
static int worker_self_holds(struct worker *w, uint64_t user)
{
    const struct worker_writer *me = worker_self;
    pthread_mutex_lock(&w->lock);
    int holds = me != NULL && me->w == w &&
                ((me->holds && me->user == user) || (me->holds_more && me->more_user == user));
    pthread_mutex_unlock(&w->lock);
    return holds;
}

/* A queued job of a user no writer holds can go now: wake the idle writers (lock held). */
static void worker_wake_writers(struct worker *w)
{
    if (w->writers_idle > 0 &&
        (w->head[JOB_LANE_SHORT] != NULL || w->head[JOB_LANE_LONG] != NULL)) {
        pthread_cond_broadcast(&w->wake);
    }
}

/* The writer me stops holding its user (lock held). */
static void worker_let_go(struct worker *w, struct worker_writer *me)
{
    me->holds = 0;
    worker_wake_writers(w);
}

/* The slot's last use, now (the table's field: under the lock). */
static void worker_store_touch(struct worker *w, struct open_store *s)
{
    pthread_mutex_lock(&w->lock);
    s->last_used_ms = worker_now_ms();
    pthread_mutex_unlock(&w->lock);
}

static void worker_verifier(const char *address,
                            const char *password,
                            size_t password_len,
                            unsigned char out[32])
{
    unsigned int len = 32;
    size_t address_len = strlen(address) + 1, total = address_len + password_len;
    unsigned char *data = malloc(total);
    if (data == NULL) {
        RAND_bytes(out, 32); /* matches nothing */
        return;
    }
    memcpy(data, address, address_len);
    memcpy(data + address_len, password, password_len);
    if (HMAC(EVP_sha256(), worker_hmac_key, sizeof worker_hmac_key, data, total, out, &len) ==
        NULL) {
        RAND_bytes(out, 32);
    }
    OPENSSL_cleanse(data, total);
    free(data);
}

/* The store's full-text backlog, for the lane estimate of SEARCH TEXT/BODY on the loop
 * (open_store.fts_backlog; imap_lane.c): noted at the open and after each drain step and
 * catch-up batch, and counted up by each append (worker_backlog_added); the purge only
 * shrinks it (the estimate errs on the long side until the next note). */
/* s->fts_backlog set to count, and the metric by the difference */
static void worker_backlog_set(struct open_store *s, uint64_t count)
{
    uint64_t old = atomic_exchange(&s->fts_backlog, count);
    metrics_gauge_add(METRIC_FTS_BACKLOG, (int64_t)count - (int64_t)old);
}

static void worker_backlog_note(struct open_store *s)
{
    uint64_t count = 0;
    if (mv_store_index_backlog_count(s->store, &count) == MV_OK) {
        worker_backlog_set(s, count);
    }
}

void worker_backlog_added(struct open_store *s)
{
    if (s != NULL && worker_cfg->index_later) {
        atomic_fetch_add(&s->fts_backlog, 1);
        metrics_gauge_add(METRIC_FTS_BACKLOG, +1);
    }
}

/* MEMOS: one batch of s's unsaved FETCH BODYSTRUCTURE answers written to its memos
 * (imap_structure_save.c); *taken: how many (0: none waited). A failure is logged and the
 * batch is not saved (its answers are made again after the next open). */
static int worker_memo_save(struct open_store *s, size_t *taken)
{
    int rc = imap_structure_save(s->structure_cache, s->store, IMAP_STRUCTURE_SAVE_BATCH, taken);
    if (rc != MV_OK) {
        log_warning("store %s: saving %zu FETCH BODYSTRUCTURE answers: %s: %s", s->address, *taken,
                    mv_strerror(rc), mv_store_errmsg(s->store));
        *taken = 0;
    } else {
        metrics_structure_saved(*taken);
    }
    return rc;
}

/* Closes s; the caller holds its user (WRITERS), or is the last writer at a stop. */
static void worker_store_close(struct worker *w, struct open_store *s)
{
    log_info("store close %s%s", s->address,
             s->migrate_more ? " (its full-text move goes on at the next open)" : "");
    metrics_gauge_add(METRIC_OPEN_STORES, -1);
    if (s->migrate_more) {
        metrics_gauge_add(METRIC_MIGRATING_STORES, -1);
    }
    s->migrate_more = 0;
    s->migrate_batch = 0;
    s->migrate_gave_way = 0;
    quota_note(s->address, s->store);  /* what sealed deliveries count from (quota.c) */
    pthread_mutex_lock(&s->view_lock); /* refs is 0: no SELECT waits for it (READERS) */
    imap_view_cache_save(s->view_cache, s->store);
    imap_view_cache_free(&s->view_cache);
    pthread_mutex_unlock(&s->view_lock);
    /* every answer not yet saved (MEMOS), so the next open finds them: until none is left or
     * one batch fails (a failing disk is not written to again and again) */
    size_t taken = 0;
    while (worker_memo_save(s, &taken) == MV_OK && taken > 0) {
    }
    imap_structure_cache_clear(s->structure_cache); /* the next user's stores are others */
    pthread_mutex_lock(&s->sent_lock);
    imap_sent_dates_save(s->sent_dates, s->store); /* kept for the next open */
    imap_sent_dates_free(&s->sent_dates);
    pthread_mutex_unlock(&s->sent_lock);
    pthread_mutex_lock(&s->msgid_lock);
    imap_msgids_save(s->msgids, s->store); /* kept for the next open */
    imap_msgids_free(&s->msgids);
    pthread_mutex_unlock(&s->msgid_lock);
    pthread_mutex_lock(&s->sort_lock);
    imap_sort_kept_save(s->sort_kept, s->store); /* kept for the next open */
    imap_sort_kept_free(&s->sort_kept);
    pthread_mutex_unlock(&s->sort_lock);
    mv_store_close(&s->reader); /* no read job of it is in flight: refs is 0 (READERS) */
    mv_store *store = s->store;
    mv_store_close(&store);
    OPENSSL_cleanse(s->verifier, sizeof s->verifier);
    worker_unplace(s->address); /* the store's hold (PLACEMENT) */
    worker_backlog_set(s, 0);
    s->fts_aside_logged = 0;
    s->fts_aside_seen = 0;
    s->background_served = 0;
    /* what a body cost is the store's own: another user's bodies may be far larger */
    s->purge_batch = 0;
    pthread_mutex_lock(&w->lock); /* the slot is free for any writer from here on */
    s->store = NULL;
    s->address[0] = '\0';
    s->user = 0;
    s->refs = 0;
    pthread_mutex_unlock(&w->lock);
}

/* The page cache the store's connection really has, read back so the log shows what
 * cache_size_kib did: the library sets PRAGMA cache_size in KiB (a negative value); -1 if
 * unreadable or set as a page count. */
static long long worker_cache_kib(mv_store *store)
{
    sqlite3_stmt *st = NULL;
    long long kib = -1;
    if (sqlite3_prepare_v2(mv_store_db(store), "PRAGMA cache_size", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        long long v = sqlite3_column_int64(st, 0);
        kib = v < 0 ? -v : -1;
    }
    sqlite3_finalize(st);
    return kib;
}

/* The open store of address (lock held), or NULL. */
static struct open_store *worker_store_find_locked(struct worker *w, const char *address)
{
    for (int i = 0; i < w->stores_max; i++) {
        if (w->stores[i].store != NULL && strcmp(w->stores[i].address, address) == 0) {
            return &w->stores[i];
        }
    }
    return NULL;
}

void worker_background_counts(struct worker *w,
                              const char *address,
                              uint64_t *rounds,
                              uint64_t *served,
                              uint64_t *store_served,
                              int *open)
{
    pthread_mutex_lock(&w->lock);
    struct open_store *s = address != NULL ? worker_store_find_locked(w, address) : NULL;
    *rounds = w->background_rounds;
    *served = w->background_served;
    *store_served = s != NULL ? s->background_served : 0;
    *open = 0;
    for (int i = 0; i < w->stores_max; i++) {
        *open += w->stores[i].store != NULL;
    }
    pthread_mutex_unlock(&w->lock);
}

struct open_store *worker_store_find(struct worker *w, const char *address)
{
    pthread_mutex_lock(&w->lock);
    struct open_store *s = worker_store_find_locked(w, address);
    pthread_mutex_unlock(&w->lock);
    return s;
}

/* A free slot reserved for address (its address set, its store NULL), closing the least
 * recently used store that no session uses and no other writer holds if needed; NULL if
 * there is none (WRITERS). */
static struct open_store *worker_store_slot(struct worker *w, const char *address)
{
    struct worker_writer *me = worker_self;
    for (int tries = 0; tries < 4; tries++) {
        struct open_store *lru = NULL;
        pthread_mutex_lock(&w->lock);
        for (int i = 0; i < w->stores_max; i++) {
            struct open_store *s = &w->stores[i];
            if (s->store == NULL && s->address[0] == '\0') {
                snprintf(s->address, sizeof s->address, "%s", address);
                s->user = worker_user_key(address);
                pthread_mutex_unlock(&w->lock);
                return s;
            }
            if (s->store != NULL && s->refs == 0 && !worker_held(w, me, s->user) &&
                (lru == NULL || s->last_used_ms < lru->last_used_ms)) {
                lru = s;
            }
        }
        if (lru == NULL || me == NULL) {
            pthread_mutex_unlock(&w->lock);
            return NULL;
        }
        me->holds_more = 1; /* its user's jobs wait until it is closed */
        me->more_user = lru->user;
        pthread_mutex_unlock(&w->lock);
        worker_store_close(w, lru);
        pthread_mutex_lock(&w->lock);
        me->holds_more = 0;
        worker_wake_writers(w);
        pthread_mutex_unlock(&w->lock);
        /* the freed slot is found by the next pass, unless another writer took it */
    }
    return NULL;
}

/* Frees a slot reserved by worker_store_slot() whose store did not open. */
static void worker_store_unreserve(struct worker *w, struct open_store *s)
{
    pthread_mutex_lock(&w->lock);
    s->address[0] = '\0';
    s->user = 0;
    pthread_mutex_unlock(&w->lock);
}

static void worker_drain_step(struct worker *w, struct open_store *s); /* THE DRAIN */

/* After an open (MIGRATION): the log line of a migration, and whether work is left. */
static void worker_store_migration(struct open_store *s)
{
    struct mv_migration_status m;
    if (mv_store_migration(s->store, &m) != MV_OK) {
        log_warning("store %s: cannot read its migration status: %s", s->address,
                    mv_store_errmsg(s->store));
        return;
    }
    if (m.migrated_from != 0) {
        metrics_count(METRIC_STORES_MIGRATED);
        log_event("store migrate %s: schema version %d -> %d in %lld ms%s", s->address,
                  m.migrated_from, m.schema_version, (long long)m.migrate_ms,
                  m.fts_moving ? "; the full-text index is rebuilt between commands" : "");
    }
    if (m.fts_moving) {
        log_event("store migrate %s: full-text index: %llu rows to move (searches read the old "
                  "and the new index meanwhile)",
                  s->address, (unsigned long long)m.fts_rows_left);
        s->migrate_more = 1;
        s->migrate_start_ms = worker_now_ms();
        metrics_gauge_add(METRIC_MIGRATING_STORES, +1);
    }
}

int worker_store_acquire(struct worker *w,
                         const char *address,
                         const char *password,
                         size_t password_len,
                         struct open_store **out,
                         char *errmsg,
                         size_t errmsg_size)
{
    unsigned char verifier[32];
    *out = NULL;
    /* Only the writer that holds the user may open or use its store (WRITERS): a job that
     * names another user (or none) would race that user's own jobs. */
    if (!worker_self_holds(w, worker_user_key(address))) {
        log_error("store %s: a job of another user asked for it", address);
        snprintf(errmsg, errmsg_size, "the job is not this user's");
        return MV_EBUSY;
    }
    worker_verifier(address, password, password_len, verifier);
    pthread_mutex_lock(&w->lock);
    struct open_store *s = worker_store_find_locked(w, address);
    if (s != NULL) {
        int same = CRYPTO_memcmp(verifier, s->verifier, sizeof verifier) == 0;
        OPENSSL_cleanse(verifier, sizeof verifier);
        if (same) {
            s->refs++;
            s->last_used_ms = worker_now_ms();
            *out = s;
        }
        pthread_mutex_unlock(&w->lock);
        if (!same) {
            snprintf(errmsg, errmsg_size, "wrong password");
            return MV_EAUTH;
        }
        return MV_OK;
    }
    pthread_mutex_unlock(&w->lock);
    s = worker_store_slot(w, address);
    if (s == NULL) {
        OPENSSL_cleanse(verifier, sizeof verifier);
        snprintf(errmsg, errmsg_size,
                 "every store slot of this worker is in use "
                 "(stores_per_worker)");
        return MV_ELIMIT;
    }
    struct mv_store_options opts = config_store_options(worker_cfg);
    opts.flags |= MV_STORE_DRAIN_LATER; /* drained in steps after the login (THE DRAIN) */
    mv_store *store = NULL;             /* the slot's pointer is set under the lock, below */
    int rc = mv_store_open(address, password, password_len, &opts, &store, errmsg, errmsg_size);
    if (rc != MV_OK) {
        OPENSSL_cleanse(verifier, sizeof verifier);
        worker_store_unreserve(w, s);
        return rc;
    }
    /* Checkpoints between jobs (worker_checkpoint), not inside the commit of whichever
     * command takes the WAL past 1,000 frames; a commit still does it from
     * WORKER_WAL_FRAMES_MAX on. */
    if (mv_store_checkpoint_defer(store, WORKER_WAL_FRAMES_MAX) != MV_OK) {
        log_warning("store %s: checkpoints stay in the commits: %s", address,
                    mv_store_errmsg(store));
    }
    /* INDEX LATER: an APPEND's or LMTP delivery's full-text row is built between jobs */
    if (worker_cfg->index_later && mv_store_index_later(store, 1) != MV_OK) {
        log_warning("store %s: full-text rows stay in the appends: %s", address,
                    mv_store_errmsg(store));
    }
    /* SYNC APART: an APPEND's or LMTP delivery's fsync on a sync thread, not the writer */
    if (worker_sync_count > 0 && mv_store_sync_later(store, 1) != MV_OK) {
        log_warning("store %s: appends sync on the writer thread: %s", address,
                    mv_store_errmsg(store));
    }
    /* The store's own hold (PLACEMENT): the job that opens it holds one already, so this is
     * the worker the user is placed on. */
    if (worker_place(address) != w) {
        log_error("store %s: open on worker %d, placed elsewhere", address, w->index);
    }
    /* In the table from here on; no other writer touches it while this one holds the user
     * (WRITERS), and refs 1 keeps it from being pushed out. */
    pthread_mutex_lock(&w->lock);
    s->store = store;
    s->refs = 1;
    s->last_used_ms = worker_now_ms();
    /* The first step after the login's job (this one) and the next one, or after the grace. */
    s->drain_after_job = w->jobs_done + 2;
    s->drain_after_ms = worker_now_ms() + worker_drain_grace_ms;
    pthread_mutex_unlock(&w->lock);
    /* a fresh count; sealed deliveries count from it plus the queue (quota.c), and each
     * drain step notes it again */
    quota_note(address, s->store);
    s->drain_more = 1; /* the first step finds out whether anything is queued */
    worker_backlog_note(s);
    memcpy(s->verifier, verifier, sizeof verifier);
    OPENSSL_cleanse(verifier, sizeof verifier);
    metrics_gauge_add(METRIC_OPEN_STORES, +1);
    log_info("store open %s (worker %d, page cache %lld KiB)", address, w->index,
             worker_cache_kib(s->store));
    worker_store_migration(s);
    if (mv_store_open_twin(s->store, &s->reader) != MV_OK) { /* READERS */
        log_warning("store %s: no second handle for reads (%s): its reads wait for its writes",
                    address, mv_store_errmsg(s->store));
        s->reader = NULL;
    } else if (mv_store_checkpoint_defer(s->reader, WORKER_WAL_FRAMES_MAX) != MV_OK) {
        /* The reader commits too (a \Recent claim, imap_recent.c): with SQLite's
         * autocheckpoint that commit would run the checkpoint the writer's commits left
         * (up to WORKER_WAL_FRAMES_MAX frames) inside a NOOP or FETCH on the fast lane. Its
         * own due flag is not read: the writer's next commit sees the same WAL. */
        log_warning("store %s: the reader's checkpoints stay in its commits: %s", address,
                    mv_store_errmsg(s->reader));
    }
    /* No step here: the login answers from the store as it is (THE DRAIN). */
    *out = s;
    return MV_OK;
}

int worker_drain_grace_set(int ms)
{
    return atomic_exchange(&worker_drain_grace_ms, ms > 0 ? ms : WORKER_DRAIN_GRACE_MS);
}

int worker_quiet_set(int ms)
{
    int quiet = ms >= 0 ? ms : WORKER_QUIET_MS;
    atomic_store(&worker_quiet_cap_ms, quiet > WORKER_QUIET_CAP_MS ? quiet : WORKER_QUIET_CAP_MS);
    return atomic_exchange(&worker_quiet_ms, quiet);
}

int worker_background_budget_set(int ms)
{
    return atomic_exchange(&worker_background_budget_ms,
                           ms >= 0 ? ms : WORKER_BACKGROUND_BUDGET_MS);
}

int worker_background_period_set(int ms)
{
    return atomic_exchange(&worker_background_period_ms,
                           ms >= 0 ? ms : WORKER_BACKGROUND_PERIOD_MS);
}

int worker_total(void)
{
    return worker_count;
}

struct worker *worker_at(int index)
{
    return &workers[index];
}

void worker_store_list(struct worker *w, struct buf *out)
{
    int64_t now = worker_now_ms();
    pthread_mutex_lock(&w->lock); /* the table's fields (WRITERS) */
    for (int i = 0; i < w->stores_max; i++) {
        const struct open_store *s = &w->stores[i];
        if (s->store != NULL) {
            buf_printf(out, "* store %s worker=%d sessions=%d idle_s=%lld\r\n", s->address,
                       w->index, s->refs,
                       s->refs > 0 ? 0LL : (long long)((now - s->last_used_ms) / 1000));
        }
    }
    pthread_mutex_unlock(&w->lock);
}

int worker_store_close_user(struct worker *w, const char *address, int *closed)
{
    *closed = 0;
    if (!worker_self_holds(w, worker_user_key(address))) { /* as worker_store_acquire */
        log_error("store %s: a job of another user asked to close it", address);
        return MV_EBUSY;
    }
    pthread_mutex_lock(&w->lock);
    struct open_store *s = worker_store_find_locked(w, address);
    int refs = s != NULL ? s->refs : 0;
    pthread_mutex_unlock(&w->lock);
    if (s == NULL) {
        return MV_OK;
    }
    if (refs > 0) {
        return MV_EBUSY;
    }
    /* The views are saved first, so their pages go into the main file with the rest. */
    pthread_mutex_lock(&s->view_lock); /* refs is 0: no SELECT waits for it (READERS) */
    imap_view_cache_save(s->view_cache, s->store);
    imap_view_cache_free(&s->view_cache);
    pthread_mutex_unlock(&s->view_lock);
    /* Everything into the main file now, so a copy of the store needs no WAL; the last close
     * would checkpoint too, but without saying whether it could. */
    int log_frames = -1, done_frames = -1;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(mv_store_db(s->store), "PRAGMA wal_checkpoint(TRUNCATE)", -1, &st,
                           NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        log_frames = sqlite3_column_int(st, 1);
        done_frames = sqlite3_column_int(st, 2);
    }
    sqlite3_finalize(st);
    log_info("store checkpoint %s: %d of %d WAL frames (control request)", address, done_frames,
             log_frames);
    worker_store_close(w, s);
    *closed = 1;
    return MV_OK;
}

void worker_store_release(struct worker *w, struct open_store *s)
{
    if (s == NULL) {
        return;
    }
    pthread_mutex_lock(&w->lock);
    if (s->refs > 0) {
        s->refs--;
        s->last_used_ms = worker_now_ms();
    }
    pthread_mutex_unlock(&w->lock);
}

int worker_store_sessions(struct worker *w, const struct open_store *s)
{
    pthread_mutex_lock(&w->lock);
    int refs = s->refs;
    pthread_mutex_unlock(&w->lock);
    return refs;
}

static void worker_release_run(struct job *job)
{
    worker_store_release(job->worker, job->arg);
}

static void worker_release_done(struct job *job)
{
    free(job);
}

void worker_store_release_from_reader(struct worker *w, struct open_store *s)
{
    if (s == NULL) {
        return;
    }
    struct job *job = calloc(1, sizeof *job);
    if (job == NULL) { /* the store stays open (in use, as far as the table knows) */
        log_error("store %s: out of memory releasing a session's hold", s->address);
        return;
    }
    job->arg = s;
    job->run = worker_release_run;
    job->done = worker_release_done;
    job->lane = JOB_LANE_SHORT;
    job_user(job, s->address); /* refs is at least 1 until it runs: the address stays */
    worker_post(w, job);
}

/* Whether a queued job waits for this thread (WRITERS): one of a user it holds, or one no
 * writer holds while no other writer is free to take it. On another thread: any job. */
static int worker_job_waiting(struct worker *w)
{
    const struct worker_writer *me = worker_self;
    int waiting = 0;
    pthread_mutex_lock(&w->lock);
    for (int lane = JOB_LANE_SHORT; lane <= JOB_LANE_LONG && !waiting; lane++) {
        for (const struct job *j = w->head[lane]; j != NULL && !waiting; j = j->next) {
            if (me == NULL || me->w != w || (me->holds && j->user == me->user) ||
                (me->holds_more && j->user == me->more_user)) {
                waiting = 1; /* on another thread: any job; else one of a user it holds */
            } else if (lane == JOB_LANE_LONG && me->in_long) {
                waiting = !worker_held(w, me, j->user); /* it waits for my long turn */
            } else {
                waiting = w->writers_idle == 0 && !worker_held(w, me, j->user);
            }
        }
    }
    pthread_mutex_unlock(&w->lock);
    return waiting;
}

static int worker_stopping(struct worker *w)
{
    pthread_mutex_lock(&w->lock);
    int stop = w->stop;
    pthread_mutex_unlock(&w->lock);
    return stop;
}

int worker_stop_requested(struct worker *w)
{
    return worker_stopping(w);
}

static const char *worker_vacuum_text(int vacuum)
{
    switch (vacuum) {
    case MV_VACUUM_DONE:
        return "done";
    case MV_VACUUM_REFUSED_DISK:
        return "refused (free disk under twice the store)";
    case MV_VACUUM_SKIPPED:
        return "skipped";
    default:
        return "not needed";
    }
}

/* Runs mv_store_maintain() on an idle store about to be closed, if it is due and small enough
 * (see MAINTENANCE above), and logs one line: what was done, sizes and ratios, no contents. */
static void worker_store_maintain(struct worker *w, struct open_store *s)
{
    const struct config *cfg = worker_cfg;
    if (cfg->maintain_interval_s == 0 || worker_job_waiting(w)) {
        return;
    }
    /* The library decides, from its own record and the store's size, whether this run is
     * due (so restarts and `mailvault maintain` count); a skip costs a meta read and a stat. */
    struct mv_maintain_options o = MV_MAINTAIN_OPTIONS_INIT;
    o.min_interval_s = (uint32_t)cfg->maintain_interval_s;
    o.store_bytes_max = (uint64_t)cfg->maintain_max_mib << 20;
    o.changes_keep_days = (uint32_t)cfg->changes_keep_days;
    struct mv_maintain_report r;
    int64_t start_ms = worker_now_ms();
    int rc = mv_store_maintain(s->store, &o, &r);
    if (rc == MV_OK && r.skipped == MV_MAINTAIN_SKIPPED_RECENT) {
        return;
    }
    if (rc == MV_OK && r.skipped == MV_MAINTAIN_SKIPPED_SIZE) {
        log_event("store maintain %s: not run, %llu MiB is over maintain_max_mib (%d)", s->address,
                  (unsigned long long)(r.bytes_before >> 20), cfg->maintain_max_mib);
        return;
    }
    log_msg(
        rc != MV_OK || r.quick_check == MV_QUICK_CHECK_FAILED ? LOG_LEVEL_ERROR : LOG_LEVEL_INFO,
        "store maintain %s: %s in %lld ms: checkpoint %s, vacuum %s (free %.1f%%, slack "
        "%.1f%%), quick_check %s, change log %llu rows pruned, %llu -> %llu bytes%s%s",
        s->address, rc == MV_OK ? "ok" : mv_strerror(rc), (long long)(worker_now_ms() - start_ms),
        r.checkpoint_busy ? "busy"
        : r.wal_truncated ? "done, WAL truncated"
                          : "done",
        worker_vacuum_text(r.vacuum), r.free_ratio * 100.0,
        r.slack_ratio < 0 ? 0.0 : r.slack_ratio * 100.0,
        r.quick_check == MV_QUICK_CHECK_OK       ? "ok"
        : r.quick_check == MV_QUICK_CHECK_FAILED ? "FAILED (run mailvault check)"
                                                 : "not due",
        (unsigned long long)r.changes_pruned, (unsigned long long)r.bytes_before,
        (unsigned long long)r.bytes_after, rc != MV_OK ? ": " : "",
        rc != MV_OK ? mv_store_errmsg(s->store) : "");
}

/* Holds the user of slot i for the work between jobs if it has an open store that no
 * other writer holds and that ok() accepts (both under the lock: ok() may read the store's
 * fields, which its last holder wrote before letting go); 1 if held (WRITERS). */
static int worker_hold_store(struct worker *w,
                             struct worker_writer *me,
                             struct open_store *s,
                             int (*ok)(const struct open_store *s, int64_t now))
{
    pthread_mutex_lock(&w->lock);
    int held =
        s->store != NULL && !worker_held(w, me, s->user) && (ok == NULL || ok(s, worker_now_ms()));
    if (held) {
        me->holds = 1;
        me->user = s->user;
    }
    pthread_mutex_unlock(&w->lock);
    return held;
}

static void worker_let_go_locking(struct worker *w, struct worker_writer *me)
{
    pthread_mutex_lock(&w->lock);
    worker_let_go(w, me);
    pthread_mutex_unlock(&w->lock);
}

/* For the work between jobs on s (lock held): 1 if this writer may work on it, holding its
 * user as more_user unless it holds it already (the user of the job it just ran: that
 * user's next job waits for this work, as with one writer); 0 if another writer holds it. */
static int worker_hold_more(struct worker *w, struct worker_writer *me, const struct open_store *s)
{
    if (me->holds && me->user == s->user) {
        return 1;
    }
    if (worker_held(w, me, s->user)) {
        return 0;
    }
    me->holds_more = 1;
    me->more_user = s->user;
    return 1;
}

static void worker_let_go_more(struct worker *w, struct worker_writer *me)
{
    if (me->holds_more) {
        me->holds_more = 0;
        worker_wake_writers(w);
    }
}

/* The sweep closes s: no session uses it, nobody has for store_idle_s, no drain or move. */
static int worker_sweep_ok(const struct open_store *s, int64_t now)
{
    return s->refs == 0 && !s->drain_more && !s->migrate_more &&
           now - s->last_used_ms >= (int64_t)worker_cfg->store_idle_s * 1000;
}

static void worker_sweep(struct worker *w, struct worker_writer *me)
{
    for (int i = 0; i < w->stores_max; i++) {
        struct open_store *s = &w->stores[i];
        if (worker_hold_store(w, me, s, worker_sweep_ok)) {
            worker_store_maintain(w, s);
            worker_store_close(w, s);
            worker_let_go_locking(w, me);
        }
    }
}

/* How often the sweep runs: often enough that a store is closed within a few seconds of
 * store_idle_s, never more than every 10 s. */
static int64_t worker_sweep_period_ms(void)
{
    int64_t idle_ms = (int64_t)worker_cfg->store_idle_s * 1000;
    return idle_ms < 10000 ? idle_ms : 10000;
}

/* Bodies one mv_store_purge() call deletes, adapted to what a body costs (its full-text
 * row's delete re-tokenizes the text: ~0.7 ms for a small message, ~5 ms for the 5.6 KiB of
 * the big-mailbox corpus, more for long ones), so that a job that arrives meanwhile waits
 * ~15 ms at most instead of a fixed 48 bodies' worth (measured 150-250 ms at 10,000
 * messages: the EXPUNGE after an EXPUNGE, and STOREs, waited behind it). */
#define WORKER_PURGE_TARGET_US   15000
#define WORKER_PURGE_BATCH_FIRST 8
#define WORKER_PURGE_BATCH_MAX   48

/* The next size of a batch that should take about target_us, from the last one's (batch
 * items in elapsed_us; 0: none yet, WORKER_PURGE_BATCH_FIRST): at most twice the last and
 * max, at least 1 (the purge's and the full-text move's batches). */
static uint32_t
worker_batch_next(uint32_t batch, int64_t elapsed_us, uint64_t target_us, uint64_t max)
{
    if (batch == 0) {
        return WORKER_PURGE_BATCH_FIRST;
    }
    uint64_t grown = (uint64_t)batch * 2;
    uint64_t fit = elapsed_us > 0 ? (uint64_t)batch * target_us / (uint64_t)elapsed_us : grown;
    uint64_t next = fit < grown ? fit : grown;
    next = next > max ? max : next;
    return next < 1 ? 1 : (uint32_t)next;
}

uint32_t worker_purge_batch_next(uint32_t batch, int64_t elapsed_us)
{
    return worker_batch_next(batch, elapsed_us, WORKER_PURGE_TARGET_US, WORKER_PURGE_BATCH_MAX);
}

/* After a job, while no other job waits: deletes what expunges left for mv_store_purge() on
 * this worker's open stores (their bytes and full-text rows), a batch at a time, so an
 * EXPUNGE is answered without that work and it is done right after, between jobs. A store
 * with nothing waiting costs a flag test. A job that comes during a batch stops it at its
 * next chunk of 4 bodies (mv_store_purge_give_way: what the batch deleted is kept), so it
 * waits for one chunk at most (~4-5 ms of CPU for the IMAP bench's mail). Until the library kept
 * a batch's chunks, a yes rolled the batch back: a batch gave way only in its first half
 * (giving way at any point threw away 17-30% of the purge's CPU under steady traffic), a job
 * that came later waited for up to half a batch, a forced one (SHARE) for all of it, and
 * those waits were ~80% of the time the slowest 2% of the short jobs waited at 10 clients of
 * the IMAP bench (issue 13). */
/* Queue files one mv_queue_tidy() call unlinks: each unlink may wait for the disk (online
 * discard: ~4 ms), so ~30 ms is the longest a job that arrives meanwhile waits. */
#define WORKER_TIDY_BATCH 8
/* Full-text rows one mv_store_index_backlog() call builds (THE DRAIN): ~0.3 ms of CPU each
 * for a small message, so ~10 ms is about the longest a job that arrives meanwhile waits. */
#define WORKER_INDEX_BATCH 32
/* Bodies a catch-up batch forced through while jobs wait (SHARE) builds before it gives way:
 * as many as a purge batch deletes then (a chunk of 4). */
#define WORKER_INDEX_FORCED 4

typedef void (*worker_hook_fn)(struct worker *w, const char *address);
static _Atomic worker_hook_fn worker_checkpoint_hook; /* tests */

void worker_checkpoint_hook_set(void (*fn)(struct worker *w, const char *address))
{
    atomic_store(&worker_checkpoint_hook, fn);
}

static _Atomic worker_hook_fn worker_drained_hook; /* tests */

void worker_drained_hook_set(void (*fn)(struct worker *w, const char *address))
{
    atomic_store(&worker_drained_hook, fn);
}

/* The checkpoint the store's commits left due (mv_store_checkpoint_defer), if no job waits:
 * a PASSIVE one, which never waits for a lock; what a reader holds stays due. A job posted
 * while it runs interrupts it (worker_post: sqlite3_interrupt, which SQLite's checkpoint
 * looks at between frames; the frames copied so far are copied again by the next one, the
 * checkpoint stays due): it copies ~1,000 frames and syncs, and a STORE that came during one
 * waited 3-100 ms for it on a loaded disk (issue 13), the longest waits left after QUIET. */
static void worker_checkpoint(struct worker *w, struct open_store *s)
{
    if (s->store == NULL || !mv_store_checkpoint_due(s->store) || worker_job_waiting(w)) {
        return;
    }
    /* A connection that an I/O error left to be replaced is replaced here (any call that
     * begins a transaction does it), not inside the checkpoint: a poster may interrupt the
     * connection taken below until the checkpoint has returned, so it must not be closed. */
    if (mv_store_read_begin(s->store) != MV_OK) {
        return; /* the next job reports what is wrong */
    }
    mv_store_read_end(s->store);
    pthread_mutex_lock(&w->lock);
    w->ckpt_db = mv_store_db(s->store);
    w->ckpt_user = s->user;
    w->ckpt_interrupted = 0;
    pthread_mutex_unlock(&w->lock);
    worker_hook_fn hook = atomic_load(&worker_checkpoint_hook);
    if (hook != NULL) {
        hook(w, s->address);
    }
    int rc = mv_store_checkpoint(s->store, NULL, NULL);
    pthread_mutex_lock(&w->lock);
    w->ckpt_db = NULL; /* no interrupt from here on: the connection is the store's again */
    int interrupted = w->ckpt_interrupted;
    pthread_mutex_unlock(&w->lock);
    if (rc != MV_OK && interrupted) {
        log_msg(LOG_LEVEL_DEBUG, "store checkpoint %s: gave way to a job", s->address);
    } else if (rc != MV_OK) {
        log_msg(rc == MV_EBUSY ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARNING, "store checkpoint %s: %s",
                s->address, mv_store_errmsg(s->store));
    }
}

static int64_t worker_thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A batch under way, for its give-way (the worker's own batch only). */
struct worker_purge_way {
    struct worker *w;
    unsigned asked; /* questions so far: the stop is looked at every 64th without a job */
    unsigned floor; /* the first this many questions are answered no (SHARE's catch-up) */
};

/* mv_store_purge_give_way(): a batch under way stops at its next chunk (store_purge.c GIVING
 * WAY: what it deleted is kept) when a job comes for this worker, and at a stop (PURGE AND
 * STOP). Nothing a batch did is rolled back when it gives way, so it may give way at any
 * chunk (a yes threw the batch's work away before: see above), and a batch forced through
 * while jobs wait (SHARE) still deletes its first chunk. */
static int worker_purge_give_way(void *arg)
{
    struct worker_purge_way *way = arg;
    if (way->asked < way->floor) {
        way->asked++;
        return 0;
    }
    /* Asked after every chunk of a batch: the usual answer, no job queued, without the
     * lock; a stop is looked at every 64th question. */
    if (atomic_load_explicit(&way->w->writer_jobs, memory_order_relaxed) == 0 &&
        ++way->asked % 64 != 0) {
        return 0;
    }
    return worker_stopping(way->w) || worker_job_waiting(way->w);
}

/* New mail goes before reclaiming space: while a drain step is due on the worker, a call
 * purges one batch and returns, so the drain step and the purge's batches take turns. The
 * purge ran to its end first, as it only looked for jobs: at 100,000 messages, after two
 * EXPUNGEs of 10% (~19,000 bodies to purge), 1,200 deliveries queued before the login took
 * 215 s to show in INBOX (the bench's "until EXISTS shows all of them"), as long as the
 * purge. One batch per turn keeps the purge going under steady deliveries.
 * NEW MAIL FIRST: taking turns from the first step on still put a purge batch and a WAL
 * checkpoint (~25 and ~40 ms) before the first step and between the steps of 1,200 queued
 * deliveries (~65 of the 270 ms until the IDLE client saw them all, at ~100,000 messages
 * with 5,000 bodies to purge); now the drain has its first WORKER_DRAIN_FIRST_MS of steps
 * (w->drain_streak_ms) before that work takes a turn, and again after each turn. */
int worker_purge_may_go_on(
    int batches_run, int job_waiting, int drain_due, int64_t drain_streak_ms, int stopping)
{
    if (stopping || job_waiting) {
        return 0;
    }
    return !drain_due || (batches_run == 0 && drain_streak_ms >= WORKER_DRAIN_FIRST_MS);
}

static struct open_store *
worker_drain_due(struct worker *w, const struct worker_writer *me, int64_t *wait_ms);

/* A drain step is due on this worker (a writer thread only); *new_mail (if not NULL): it is
 * a step of a queue's drain, not a MIGRATION step alone (NEW MAIL FIRST holds the work
 * between jobs back only for the former). */
static int worker_drain_waits_of(struct worker *w, int *new_mail)
{
    int64_t wait_ms = INT64_MAX;
    pthread_mutex_lock(&w->lock);
    const struct open_store *s = worker_drain_due(w, worker_self, &wait_ms);
    if (new_mail != NULL) {
        *new_mail = s != NULL && s->drain_more;
    }
    pthread_mutex_unlock(&w->lock);
    return s != NULL;
}

static int worker_drain_waits(struct worker *w)
{
    return worker_drain_waits_of(w, NULL);
}

/* LOGIN FIRST: nothing runs between a store's open and the next job on its worker (the
 * login's client's SELECT), or WORKER_DRAIN_GRACE_MS if none comes, as for the drain's first
 * step (THE DRAIN). A purge batch gives way to a job that comes, but not inside the statement
 * or commit under way: the first SELECT after a restart with ~19,000 expunged bodies left
 * (100,000 messages) waited 82 ms for the purge batch that had started after the LOGIN. */
/* (lock held, or the writer that holds s's user: jobs_done is written under the lock) */
static int worker_store_settled(const struct worker *w, const struct open_store *s)
{
    return w->jobs_done >= s->drain_after_job || worker_now_ms() >= s->drain_after_ms;
}

int worker_background_owed(int job_waiting, int64_t now_ms, int64_t last_ms, int64_t period_ms)
{
    return job_waiting && now_ms - last_ms >= period_ms;
}

/* One purge batch of s (its size adapted: worker_purge_batch_next); gives way to a job at
 * its next chunk. *purged: the bodies it deleted (0 on a store with nothing to purge: a flag
 * test); *left: the bodies still waiting. */
static int
worker_purge_batch(struct worker *w, struct open_store *s, uint64_t *purged, uint64_t *left)
{
    if (s->purge_batch == 0) {
        s->purge_batch = worker_purge_batch_next(0, 0);
    }
    /* mv_store_maintain()'s purge on the same handle must not give way: set for this batch */
    int64_t t0 = metrics_now_us();
    struct worker_purge_way way = {w, 0, 0};
    mv_store_purge_give_way(s->store, worker_purge_give_way, &way);
    int rc = mv_store_purge_counted(s->store, s->purge_batch, purged, left);
    mv_store_purge_give_way(s->store, NULL, NULL);
    /* A batch that gave way says nothing about its cost, nor does one that found fewer
     * bodies than its size (the last of a purge: it would seem cheap, and the next purge's
     * first batch too large). */
    if (rc == MV_OK && *left > 0) {
        s->purge_batch = worker_purge_batch_next(s->purge_batch, metrics_now_us() - t0);
    }
    if (rc != MV_OK && rc != MV_EBUSY) { /* tried again after the next job */
        log_warning("store purge %s: %s: %s", s->address, mv_strerror(rc),
                    mv_store_errmsg(s->store));
    }
    return rc;
}

/* Logs, each with its id, the bodies the catch-up set aside as damaged (their bytes could
 * not be read; mv_store_index_backlog) since the last it logged, and counts them in the
 * metrics: they have no full-text row until mailvault repair gives them one. */
static void worker_index_aside_log(struct open_store *s)
{
    int64_t ids[16];
    uint32_t count = 0;
    do {
        if (mv_store_index_set_aside(s->store, s->fts_aside_logged, ids, 16, &count) != MV_OK) {
            return; /* looked for again after the next batch */
        }
        for (uint32_t i = 0; i < count; i++) {
            log_warning("store %s: body %lld set aside by the full-text catch-up, its bytes "
                        "unreadable: searches do not find its messages (mailvault check "
                        "names it; repair once restored)",
                        s->address, (long long)ids[i]);
            metrics_count(METRIC_FTS_SET_ASIDE);
            s->fts_aside_logged = ids[i];
        }
    } while (count == 16);
    s->fts_aside_seen = 1;
}

/* One batch of the full-text rows the drain's steps and the appends left (THE DRAIN, INDEX
 * LATER), once the drain is over. *backlog: the bodies still waiting. A batch gives way to a
 * job after its next body, as the purge's does; one that SHARE forces through while jobs wait
 * (forced) builds WORKER_INDEX_FORCED first, so that the catch-up keeps up with a user's
 * APPENDs on a worker that is never idle (a body a turn did not: tests/test_worker.c). */
static int worker_index_batch(struct worker *w, struct open_store *s, uint64_t *backlog, int forced)
{
    uint64_t noted = s->fts_backlog; /* 0: nothing to build, so nothing new set aside */
    struct worker_purge_way way = {w, 0, forced ? WORKER_INDEX_FORCED - 1 : 0};
    mv_store_purge_give_way(s->store, worker_purge_give_way, &way);
    int rc = mv_store_index_backlog(s->store, WORKER_INDEX_BATCH, backlog);
    mv_store_purge_give_way(s->store, NULL, NULL);
    if (rc == MV_OK) {
        worker_backlog_set(s, *backlog); /* what the lane of a SEARCH TEXT counts (imap_lane.c) */
        if (!s->fts_aside_seen || noted > 0 || *backlog > 0) {
            worker_index_aside_log(s);
        }
    }
    if (rc != MV_OK) { /* tried again after the next job */
        log_warning("store %s: building full-text rows: %s: %s", s->address, mv_strerror(rc),
                    mv_store_errmsg(s->store));
    }
    return rc;
}

/* SHARE: whose turn it is. A round takes first the stores earlier rounds passed over (owed,
 * from next on), then the rest from next on; a store it cannot serve now is owed a turn from
 * then on. Without that, a store passed over (its first drain step still to come, or its user
 * held by another writer) lost its turn to the store after it, and one passed over whenever
 * a round started at it was never served. owed[i]: 1 owed, 2 served this round from owed (so
 * the rest of the round does not take it again); 0 again when the round ends. */
void worker_background_round(struct worker_turns *t, int slots, worker_turn_fn serve, void *arg)
{
    int done = 0;
    for (int n = 0; n < slots && !done; n++) {
        int i = (t->next + n) % slots;
        int r = t->owed[i] == 1 ? serve(arg, i) : WORKER_TURN_SKIP;
        if (r == WORKER_TURN_EMPTY) {
            t->owed[i] = 0; /* its store went: the slot owes nothing */
        } else if (r != WORKER_TURN_SKIP) {
            t->owed[i] = 2;
            done = r == WORKER_TURN_LAST; /* the rotation stays where it was */
        }
    }
    for (int n = 0; n < slots && !done; n++) {
        int i = (t->next + n) % slots;
        int r = t->owed[i] == 0 ? serve(arg, i) : WORKER_TURN_EMPTY;
        if (r == WORKER_TURN_SKIP) {
            t->owed[i] = 1;
        } else if (r == WORKER_TURN_LAST) {
            t->next = (i + 1) % slots; /* the next round starts there */
            done = 1;
        }
    }
    for (int i = 0; i < slots; i++) {
        t->owed[i] = t->owed[i] == 2 ? 0 : t->owed[i];
    }
}

struct worker_forced {
    struct worker *w;
    struct worker_writer *me;
    int64_t start_ms;
};

/* worker_turn_fn of a forced round: one batch of each on slot i's store, called and
 * returning with the lock held. */
static int worker_forced_serve(void *arg, int i)
{
    struct worker_forced *f = arg;
    struct worker *w = f->w;
    struct open_store *s = &w->stores[i];
    uint64_t purged = 0, left = 0;
    if (s->store == NULL) {
        return WORKER_TURN_EMPTY;
    }
    if (!worker_store_settled(w, s) || !worker_hold_more(w, f->me, s)) {
        return WORKER_TURN_SKIP; /* LOGIN FIRST; another writer's user (WRITERS) */
    }
    pthread_mutex_unlock(&w->lock);
    (void)worker_purge_batch(w, s, &purged, &left);
    if (!s->drain_more) {
        (void)worker_index_batch(w, s, &left, 1);
    }
    pthread_mutex_lock(&w->lock);
    worker_let_go_more(w, f->me);
    w->background_served++;
    s->background_served++;
    return worker_now_ms() - f->start_ms >= worker_background_budget_ms ? WORKER_TURN_LAST
                                                                        : WORKER_TURN_SERVED;
}

/* SHARE: a job waits and the purge and the catch-up have not run for a period: one batch of
 * each on the stores that have them (a flag test on one that has none), none giving way,
 * store after store in turn (worker_background_round), until the round has taken
 * worker_background_budget_ms: one batch on every store of the worker made the wait
 * (stores x ~25 ms) unbounded. At least one store per round. */
static void worker_background_forced(struct worker *w, struct worker_writer *me)
{
    struct worker_forced f = {w, me, worker_now_ms()};
    pthread_mutex_lock(&w->lock);
    w->background_rounds++;
    worker_background_round(&w->turns, w->stores_max, worker_forced_serve, &f);
    pthread_mutex_unlock(&w->lock);
}

/* The work between jobs on s, whose user this writer holds; *batches: purge and catch-up
 * batches run in this round so far (worker_purge_may_go_on, SHARE); streak: the queue's
 * drain steps since this work's last turn, WORKER_DRAIN_FIRST_MS if no queue's step is due
 * (NEW MAIL FIRST, looked at once by worker_purge_run). */
static void worker_purge_store(struct worker *w, struct open_store *s, int *batches, int64_t streak)
{
    uint64_t left = 1;
    while (s->store != NULL && left > 0 &&
           worker_purge_may_go_on(*batches, worker_job_waiting(w), worker_drain_waits(w), streak,
                                  worker_stopping(w))) {
        uint64_t purged = 0;
        int rc = worker_purge_batch(w, s, &purged, &left);
        *batches += purged > 0;
        if (rc != MV_OK || purged == 0) {
            break; /* gave way: the rest after the next job; or nothing it could delete */
        }
        worker_checkpoint(w, s); /* a batch's commits may have made one due */
    }
    /* the job's own commit may have made one due; not while NEW MAIL FIRST holds it back */
    if (streak >= WORKER_DRAIN_FIRST_MS) {
        worker_checkpoint(w, s);
    }
    /* the files of drained deliveries (THE DRAIN), once the drain is over; not at a stop
     * (an open finds what is left) */
    int more = 1;
    while (s->store != NULL && !s->drain_more && more &&
           worker_purge_may_go_on(*batches, worker_job_waiting(w), worker_drain_waits(w), streak,
                                  worker_stopping(w))) {
        int rc = mv_queue_tidy(s->store, WORKER_TIDY_BATCH, &more);
        if (rc != MV_OK) {
            log_warning("store %s: %s", s->address, mv_store_errmsg(s->store));
            break;
        }
        /* its unlinks (~4 ms each) wait for a due drain step as the purge's batches do; a call
         * that found nothing to unlink is not a batch (it would use up the one a call has) */
        *batches += more;
    }
    /* the full-text rows the drain's steps left (THE DRAIN), once the drain is over */
    uint64_t backlog = 1;
    while (s->store != NULL && !s->drain_more && backlog > 0 &&
           worker_purge_may_go_on(*batches, worker_job_waiting(w), worker_drain_waits(w), streak,
                                  worker_stopping(w))) {
        /* as the purge's: a call that found no row to build is not a batch */
        uint64_t noted = s->fts_backlog; /* before the batch: 0 if none waits */
        if (worker_index_batch(w, s, &backlog, 0) != MV_OK) {
            break;
        }
        *batches += noted > 0 || backlog > 0;
        worker_checkpoint(w, s); /* as after a purge batch */
    }
    /* the FETCH BODYSTRUCTURE answers made since (MEMOS) */
    size_t taken = 1;
    while (s->store != NULL && taken > 0 &&
           worker_purge_may_go_on(*batches, worker_job_waiting(w), worker_drain_waits(w), streak,
                                  worker_stopping(w))) {
        if (worker_memo_save(s, &taken) != MV_OK) {
            break;
        }
        *batches += taken > 0; /* as the purge's: one that found none is not a batch */
        if (taken > 0) {
            worker_checkpoint(w, s);
        }
    }
}

/* PURGE AND STOP: a stop (SIGTERM) ends the purge at its next batch (a batch under way gives
 * way); the bodies left wait for the store's next open, which finds them. The purge looked
 * only for jobs, so a stop waited for all of it: after two EXPUNGEs of 10% at 100,000
 * messages (~19,000 bodies, ~5 ms each) longer than the 60 s a supervisor (and the bench)
 * gives a stop before SIGKILL, and then the close never saved the SELECT views and never
 * checkpointed: the next first LOGIN + SELECT replayed the WAL and listed INBOX again. */
static void worker_purge_run(struct worker *w, struct worker_writer *me);

/* NICE: the process' nice value at the start (the jobs'), and how much more the work between
 * jobs gets (0: off) */
static int worker_nice_base;
static _Atomic int worker_nice_more;

/* NICE: worker_purge_run at the lower priority, back to the jobs' at its end. */
static void worker_purge(struct worker *w, struct worker_writer *me)
{
    int more = atomic_load(&worker_nice_more);
    if (more == 0) {
        worker_purge_run(w, me);
        return;
    }
    pid_t tid = gettid();
    atomic_store(&w->bg_tid, tid);
    (void)setpriority(PRIO_PROCESS, (id_t)tid, worker_nice_base + more);
    if (worker_job_waiting(w)) { /* posted before bg_tid was set: its post did not see it */
        (void)setpriority(PRIO_PROCESS, (id_t)tid, worker_nice_base);
    }
    worker_purge_run(w, me);
    atomic_store(&w->bg_tid, 0);
    (void)setpriority(PRIO_PROCESS, (id_t)tid, worker_nice_base);
}

static void worker_purge_run(struct worker *w, struct worker_writer *me)
{
    /* background_ms is the long turn's (WRITERS): only its holder runs this */
    int new_mail = 0;
    (void)worker_drain_waits_of(w, &new_mail);
    const int64_t streak = new_mail ? atomic_load(&w->drain_streak_ms) : WORKER_DRAIN_FIRST_MS;
    if (streak < WORKER_DRAIN_FIRST_MS) {
        return; /* NEW MAIL FIRST: the drain's next step first, also before SHARE's batch */
    }
    int64_t now_ms = worker_now_ms();
    if (!worker_stopping(w) &&
        worker_background_owed(worker_job_waiting(w), now_ms, w->background_ms,
                               worker_background_period_ms)) {
        worker_background_forced(w, me);
        /* the period counts from the forced work's end: from its start, work that took a
         * period made every next job wait for another round */
        w->background_ms = worker_now_ms();
        w->background_ran_ms = w->background_ms;
        return;
    }
    /* This call's batches over all stores (worker_purge_may_go_on), only those that did work:
     * a store with nothing to purge costs a flag test, and counting it used up the one batch a
     * call has while a drain step is due, so the stores in later slots were never purged while
     * another store drained or moved its full-text index. */
    int batches = 0;
    /* one pass under the lock, let go only around each store's work: the reader and the
     * loop take the same lock for every job; each store's user is held meanwhile */
    pthread_mutex_lock(&w->lock);
    for (int i = 0; i < w->stores_max; i++) {
        struct open_store *s = &w->stores[i];
        if (s->store == NULL || !worker_store_settled(w, s) || !worker_hold_more(w, me, s)) {
            continue; /* LOGIN FIRST; another writer's user (WRITERS) */
        }
        pthread_mutex_unlock(&w->lock);
        worker_purge_store(w, s, &batches, streak);
        pthread_mutex_lock(&w->lock);
        worker_let_go_more(w, me);
    }
    pthread_mutex_unlock(&w->lock);
    /* NEW MAIL FIRST: after this work's turn, or with no queue's step due, a drain (again)
     * has its first WORKER_DRAIN_FIRST_MS of steps before the next turn */
    if (batches > 0 || !new_mail) {
        atomic_store(&w->drain_streak_ms, 0);
    }
    /* SHARE: they ran, or had nothing to do, or no job kept them from it */
    if (batches > 0 || !worker_job_waiting(w)) {
        w->background_ms = now_ms;
    }
    if (batches > 0) { /* QUIET: there is work; it ran until now */
        w->background_ran_ms = worker_now_ms();
    }
}

static void worker_finish(struct job *job)
{
    uint64_t one = 1;
    pthread_mutex_lock(&done_lock);
    job->next = NULL;
    if (done_tail != NULL) {
        done_tail->next = job;
    } else {
        done_head = job;
    }
    done_tail = job;
    pthread_mutex_unlock(&done_lock);
    if (write(worker_eventfd, &one, sizeof one) < 0) {
        /* the counter is saturated only if the loop is gone; nothing to do */
    }
}

/* Waits on the worker's condition variable (lock held) until a job comes or wait_ms pass. */
static void worker_wait(struct worker *w, int64_t wait_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = (int64_t)until.tv_nsec + (wait_ms % 1000) * 1000000;
    until.tv_sec += (time_t)(wait_ms / 1000 + ns / 1000000000);
    until.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&w->wake, &w->lock, &until);
}

/* On the loop after a drain step moved messages: the user's IDLE sessions look now. */
static void worker_drain_done(struct job *job)
{
    imap_session_notify((const char *)job->arg, NULL);
    free(job->arg);
    free(job);
}

/* The open store due for a drain step (or, its queue drained, a MIGRATION step), or NULL
 * (lock held; a store another writer than me holds is left out); *wait_ms: how long until one that
 * is not due yet is (unchanged if none waits). Stores take turns: the scan starts after the slot
 * served last (drain_served), so a store that stays due (a full-text move is, for minutes at
 * 100,000 messages) does not keep the others from their steps; and a store with deliveries queued
 * goes before one that only migrates, as its mail stays invisible until drained (with the
 * first due slot taken, a migrating store in a lower slot held another store's queued mail
 * back for the whole move). */
static struct open_store *
worker_drain_due(struct worker *w, const struct worker_writer *me, int64_t *wait_ms)
{
    int64_t now = worker_now_ms();
    struct open_store *migrate = NULL;
    int served = atomic_load_explicit(&w->drain_served, memory_order_relaxed);
    for (int k = 1; k <= w->stores_max; k++) {
        struct open_store *s = &w->stores[(served + k) % w->stores_max];
        if (s->store == NULL || worker_held(w, me, s->user) ||
            (!s->drain_more && !s->migrate_more)) {
            continue; /* (another writer's user: its fields are that writer's, WRITERS) */
        }
        if (now >= s->drain_after_ms || w->jobs_done >= s->drain_after_job) {
            if (s->drain_more) {
                return s;
            }
            migrate = migrate != NULL ? migrate : s;
        } else if (s->drain_after_ms - now < *wait_ms) {
            *wait_ms = s->drain_after_ms - now;
        }
    }
    return migrate;
}

static int64_t worker_thread_cpu_ms(void)
{
    return worker_thread_cpu_us() / 1000;
}

struct worker_drain_yield {
    struct worker *w;
    int64_t start_cpu_ms;
};

/* mv_drain_bounds.yield_fn: a job waits and the step has had its WORKER_DRAIN_MIN_MS of CPU
 * (wall time would shrink the steps, and add commits, on a machine busy with other work).
 * Called before every delivery: the waiting job first, as the thread's CPU time is a system
 * call (clock_gettime and the bound's checks were ~2% of a drain's samples) and most of the
 * time no job waits. */
static int worker_drain_yield(void *arg)
{
    const struct worker_drain_yield *y = arg;
    return worker_job_waiting(y->w) &&
           worker_thread_cpu_ms() - y->start_cpu_ms >= WORKER_DRAIN_MIN_MS;
}

/* Rows one mv_store_migrate_step() batch moves, from the last batch's: sized to take about
 * WORKER_MIGRATE_TARGET_US, at most twice the last and WORKER_MIGRATE_BATCH_MAX. Larger than
 * the purge's: a batch gives way to a job at once either way (only the work of the batch so
 * far is lost), and each batch commits a segment of the new index, so batches of 16 rows cost
 * 18.0 s of CPU at 10,000 messages against 14.0 s for 128 (library level, load ~12). */
#define WORKER_MIGRATE_TARGET_US 50000
#define WORKER_MIGRATE_BATCH_MAX 256

static uint32_t worker_migrate_batch_next(uint32_t batch, int64_t elapsed_us)
{
    return worker_batch_next(batch, elapsed_us, WORKER_MIGRATE_TARGET_US, WORKER_MIGRATE_BATCH_MAX);
}

/* mv_store_purge_give_way() for a batch of the move: it stops when a job comes for this
 * worker (arg), whenever that is (a batch is ~50 ms; nothing of it is kept). */
static int worker_migrate_give_way(void *arg)
{
    return worker_job_waiting(arg);
}

/* One step of MIGRATION: batches of the full-text move while no job waits, up to
 * WORKER_DRAIN_STEP_MS. */
static void worker_migrate_step(struct worker *w, struct open_store *s)
{
    int64_t start_ms = worker_now_ms();
    int more = 1;
    while (more && worker_now_ms() - start_ms < WORKER_DRAIN_STEP_MS) {
        if (s->migrate_batch == 0) {
            s->migrate_batch = worker_migrate_batch_next(0, 0);
        }
        /* as the purge: only a batch after one that ran to its end gives way */
        mv_store_purge_give_way(s->store, s->migrate_gave_way ? NULL : worker_migrate_give_way, w);
        int64_t t0 = metrics_now_us();
        int rc = mv_store_migrate_step(s->store, s->migrate_batch, &more);
        mv_store_purge_give_way(s->store, NULL, NULL);
        s->migrate_gave_way = rc == MV_EBUSY;
        if (rc == MV_EBUSY) {
            return; /* the job that came goes first */
        }
        if (rc != MV_OK) {
            log_error("store migrate %s: full-text move failed: %s (%s); tried again at the next "
                      "open%s",
                      s->address, mv_strerror(rc), mv_store_errmsg(s->store),
                      rc == MV_ECORRUPT || rc == MV_ERROR
                          ? "; if it fails again, `mailvault repair` on the store ends the move"
                          : "");
            s->migrate_more = 0;
            metrics_gauge_add(METRIC_MIGRATING_STORES, -1);
            return;
        }
        s->migrate_batch = worker_migrate_batch_next(s->migrate_batch, metrics_now_us() - t0);
        worker_checkpoint(w, s); /* as after a purge batch */
        if (worker_job_waiting(w)) {
            break;
        }
    }
    worker_store_touch(w, s);
    if (!more) {
        s->migrate_more = 0;
        metrics_gauge_add(METRIC_MIGRATING_STORES, -1);
        log_event("store migrate %s: full-text index moved in %lld ms (between commands)",
                  s->address, (long long)(worker_now_ms() - s->migrate_start_ms));
    }
}

/* One drain step of s (THE DRAIN), or, with the queue drained, of its MIGRATION. */
static void worker_drain_step(struct worker *w, struct open_store *s)
{
    /* the next scan starts after it */
    atomic_store_explicit(&w->drain_served, (int)(s - w->stores), memory_order_relaxed);
    if (!s->drain_more) {
        worker_migrate_step(w, s);
        return;
    }
    uint32_t moved = 0;
    int more = 0;
    int64_t start_ms = worker_now_ms();
    struct worker_drain_yield y = {w, worker_thread_cpu_ms()};
    struct mv_drain_bounds b = {.max = WORKER_DRAIN_MAX,
                                .time_ms = WORKER_DRAIN_STEP_MS,
                                .yield_fn = worker_drain_yield,
                                .yield_arg = &y};
    struct quota_usage before; /* what the step moves in leaves the queue's count (quota.c) */
    int counted = quota_used(s->store, &before) == MV_OK;
    int rc = mv_queue_drain_step(s->store, &b, &moved, &more);
    /* NEW MAIL FIRST; at least 1 ms a step, so steps that find nothing ready still end the
     * hold-back */
    int64_t step_ms = worker_now_ms() - start_ms;
    atomic_fetch_add(&w->drain_streak_ms, step_ms > 0 ? step_ms : 1);
    s->drain_more = rc == MV_OK && more;
    worker_hook_fn drained = atomic_load(&worker_drained_hook);
    if (drained != NULL && rc == MV_OK && !more) {
        drained(w, s->address);
    }
    if (rc != MV_OK) {
        log_error("store %s: queue drain failed: %s (%s); the rest stays queued for the next open",
                  s->address, mv_strerror(rc), mv_store_errmsg(s->store));
    } else if (mv_store_errmsg(s->store)[0] != '\0') {
        log_warning("store %s: %s", s->address, mv_store_errmsg(s->store));
    }
    if (moved == 0) {
        return;
    }
    log_debug("store %s: %u queued deliveries moved in %lld ms%s", s->address, moved,
              (long long)(worker_now_ms() - start_ms), s->drain_more ? ", more queued" : "");
    metrics_drain_step(moved);
    quota_note_step(s->address, s->store, counted ? &before : NULL, moved);
    worker_backlog_note(s); /* the step's messages wait for their full-text rows */
    worker_store_touch(w, s);
    struct job *job = calloc(1, sizeof *job);
    if (job != NULL && (job->arg = strdup(s->address)) != NULL) {
        job->done = worker_drain_done;
        worker_finish(job);
    } else {
        free(job); /* IDLE sessions see the messages at their next poll */
    }
}

/* The worker's long turn (lock held): me takes it, or gives it back. */
static void worker_long_begin(struct worker *w, struct worker_writer *me)
{
    w->long_running++;
    me->in_long = 1;
}

static void worker_long_end(struct worker *w, struct worker_writer *me)
{
    if (me->in_long) {
        me->in_long = 0;
        w->long_running--;
        if (w->writers_idle > 0) { /* a long job, a drain step or the sweep may wait for it */
            pthread_cond_broadcast(&w->wake);
        }
    }
}

/* The first job of lane whose user no other writer than me holds (lock held), or NULL;
 * *prev: the job before it (NULL: it is the head). */
static struct job *
worker_lane_first(struct worker *w, const struct worker_writer *me, int lane, struct job **prev)
{
    *prev = NULL;
    for (struct job *j = w->head[lane]; j != NULL; *prev = j, j = j->next) {
        if (!worker_held(w, me, j->user)) {
            return j;
        }
    }
    return NULL;
}

/* The next job for writer me (lock held), per LANES above, among the jobs whose user no
 * other writer holds (WRITERS); me then holds its user. NULL with *drain set when a drain
 * step of drain_ready has the turn (me then holds its user), NULL alone when there is
 * nothing to do. */
static struct job *worker_take(struct worker *w,
                               struct worker_writer *me,
                               const struct open_store *drain_ready,
                               int *drain)
{
    *drain = 0;
    struct job *prev_short = NULL, *prev_long = NULL;
    struct job *first_short = worker_lane_first(w, me, JOB_LANE_SHORT, &prev_short);
    struct job *first_long = worker_lane_first(w, me, JOB_LANE_LONG, &prev_long);
    /* A long job or drain step waits; it may go only when no writer has the long turn (one
     * at a time: a second writer is there for the short jobs, WRITERS). The burst counts
     * short jobs taken while one waits, either way: after WORKER_SHORT_BURST of them the
     * waiting one goes next, as with one writer, also if this writer must wait for the turn
     * to end first. */
    int long_waiting = first_long != NULL || drain_ready != NULL;
    int long_ready = long_waiting && w->long_running == 0;
    enum job_lane lane;
    struct job *job, *prev;
    if (first_short != NULL && (!long_waiting || w->short_run < WORKER_SHORT_BURST)) {
        w->short_run = long_waiting ? w->short_run + 1 : 0;
        lane = JOB_LANE_SHORT;
        job = first_short;
        prev = prev_short;
    } else if (long_ready) {
        w->short_run = 0;
        if (drain_ready != NULL && (first_long == NULL || w->drain_turn)) {
            w->drain_turn = 0; /* a drain step and a long job take turns */
            *drain = 1;
            me->holds = 1;
            me->user = drain_ready->user;
            worker_long_begin(w, me);
            return NULL;
        }
        w->drain_turn = 1;
        lane = JOB_LANE_LONG;
        job = first_long;
        prev = prev_long;
    } else {
        return NULL;
    }
    if (prev != NULL) {
        prev->next = job->next;
    } else {
        w->head[lane] = job->next;
    }
    atomic_fetch_sub(&w->writer_jobs, 1);
    if (w->tail[lane] == job) {
        w->tail[lane] = prev;
    }
    me->holds = 1;
    me->user = job->user;
    if (lane == JOB_LANE_LONG) {
        worker_long_begin(w, me);
    }
    return job;
}

/* A job the reader ran counts as the worker's as one a writer ran (THE DRAIN: the login's
 * client's SELECT runs here); a writer that waits for a store's first step (its
 * drain_after_job) is woken when this one is it, not WORKER_DRAIN_GRACE_MS later (lock
 * held). */
static void worker_reader_counted(struct worker *w)
{
    w->jobs_done++;
    for (int k = 0; k < w->stores_max; k++) {
        if (w->stores[k].store != NULL && w->stores[k].drain_after_job == w->jobs_done) {
            pthread_cond_broadcast(&w->wake);
            return;
        }
    }
}

/* MEMOS: set by worker_structure_unsaved() on the thread whose job made an answer to save. */
static _Thread_local int worker_unsaved_noted;

void worker_structure_unsaved(void)
{
    worker_unsaved_noted = 1;
}

/* The reader thread (READERS): JOB_LANE_READ in order, until stopped and empty. */
static void *worker_reader_main(void *arg)
{
    struct worker *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->reader_stop || w->head[JOB_LANE_READ] != NULL) {
        struct job *job = w->head[JOB_LANE_READ];
        if (job == NULL) {
            pthread_cond_wait(&w->reader_wake, &w->lock);
            continue;
        }
        w->head[JOB_LANE_READ] = job->next;
        if (w->head[JOB_LANE_READ] == NULL) {
            w->tail[JOB_LANE_READ] = NULL;
        }
        pthread_mutex_unlock(&w->lock);
        metrics_worker_queue(w->index, -1);
        metrics_lane_queue(job->lane, -1);
        metrics_lane_wait(job->lane, metrics_now_us() - job->queued_us);
        job->run(job);
        worker_finish(job);
        pthread_mutex_lock(&w->lock);
        worker_reader_counted(w);
        /* MEMOS: a FETCH made answers to save; the writers do it as the work between jobs,
         * which a read job alone never starts (QUIET: after the session's next command, if
         * one comes soon) */
        if (worker_unsaved_noted) {
            worker_unsaved_noted = 0;
            if (w->between_due_ms == 0) {
                w->between_due_ms = worker_now_ms() + worker_quiet_ms;
            }
            worker_wake_writers(w);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Whether a job is queued for the writers (lock held). */
static int worker_lanes_busy(const struct worker *w)
{
    return w->head[JOB_LANE_SHORT] != NULL || w->head[JOB_LANE_LONG] != NULL;
}

/* SYNC APART: the sync owed by the job's store, and the job's synced(); both fields cleared. */
static void worker_sync_run(struct job *job)
{
    struct open_store *s = job->sync_store;
    void (*synced)(struct job *, int) = job->synced;
    job->sync_store = NULL;
    job->synced = NULL;
    int rc = mv_store_sync(s->store);
    if (rc != MV_OK) {
        log_error("store %s: the WAL's sync failed, the append is not acknowledged: %s", s->address,
                  mv_store_errmsg(s->store));
    }
    synced(job, rc);
}

void worker_sync_after(struct job *job, struct open_store *s, void (*synced)(struct job *, int))
{
    job->sync_store = s;
    job->synced = synced;
    if (worker_sync_count == 0 || worker_self == NULL) {
        worker_sync_run(job); /* no sync threads, or not a writer's job: here */
    }
}

/* After run() on writer me: a job that owes its store's sync goes to the sync threads, its
 * user held by the worker until it is done (worker_held), and me lets the user go; 1 if it
 * went (the sync thread finishes it), 0 if the caller finishes it (owes none, or no room:
 * synced here). */
static int worker_sync_hand_over(struct worker *w, struct worker_writer *me, struct job *job)
{
    if (job->sync_store == NULL) {
        return 0;
    }
    pthread_mutex_lock(&w->lock);
    int room = w->sync_count < w->sync_max;
    if (room) {
        w->sync_users[w->sync_count++] = job->user;
        me->holds = 0; /* the worker holds it now: no purge of it before the sync */
    }
    pthread_mutex_unlock(&w->lock);
    if (!room) {
        worker_sync_run(job);
        return 0;
    }
    job->queued_us = metrics_now_us(); /* its wait for the sync, in the metrics */
    metrics_lane_queue(METRICS_LANE_SYNC, +1);
    pthread_mutex_lock(&sync_lock);
    job->next = NULL;
    if (sync_tail != NULL) {
        sync_tail->next = job;
    } else {
        sync_head = job;
    }
    sync_tail = job;
    pthread_cond_signal(&sync_wake);
    pthread_mutex_unlock(&sync_lock);
    return 1;
}

static void (*worker_sync_hook)(const char *address);

void worker_sync_hook_set(void (*fn)(const char *address))
{
    worker_sync_hook = fn;
}

/* A sync thread (SYNC APART): the queue's jobs in order, until stopped and empty. */
static void *worker_sync_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&sync_lock);
    while (!sync_stop || sync_head != NULL) {
        struct job *job = sync_head;
        if (job == NULL) {
            pthread_cond_wait(&sync_wake, &sync_lock);
            continue;
        }
        sync_head = job->next;
        if (sync_head == NULL) {
            sync_tail = NULL;
        }
        pthread_mutex_unlock(&sync_lock);
        struct worker *w = job->worker;
        uint64_t user = job->user;
        metrics_lane_queue(METRICS_LANE_SYNC, -1);
        if (worker_sync_hook != NULL) {
            worker_sync_hook(job->sync_store->address);
        }
        worker_sync_run(job);
        metrics_lane_wait(METRICS_LANE_SYNC, metrics_now_us() - job->queued_us);
        pthread_mutex_lock(&w->lock);
        for (int i = 0; i < w->sync_count; i++) {
            if (w->sync_users[i] == user) {
                w->sync_users[i] = w->sync_users[--w->sync_count];
                break;
            }
        }
        /* its user's next job, the work between jobs on its store, a writer's end */
        pthread_cond_broadcast(&w->wake);
        pthread_mutex_unlock(&w->lock);
        worker_finish(job); /* after the user is free: its next command may come at once */
        pthread_mutex_lock(&sync_lock);
    }
    pthread_mutex_unlock(&sync_lock);
    return NULL;
}

/* A writer thread (WRITERS): jobs per LANES, one user at a time, and the work between. */
static void *worker_writer_main(void *arg)
{
    struct worker_writer *me = arg;
    struct worker *w = me->w;
    worker_self = me;
    int64_t period_ms = worker_sweep_period_ms();
    pthread_mutex_lock(&w->lock);
    /* at a stop, the queued jobs still run (drain steps do not: the queue stays on disk) */
    while (!w->stop || worker_lanes_busy(w)) {
        int64_t wait_ms = w->next_sweep_ms - worker_now_ms();
        struct open_store *drain = w->stop ? NULL : worker_drain_due(w, me, &wait_ms);
        int drain_turn = 0;
        struct job *job = worker_take(w, me, drain, &drain_turn);
        if (job != NULL) {
            pthread_mutex_unlock(&w->lock);
            metrics_worker_queue(w->index, -1);
            metrics_lane_queue(job->lane, -1);
            metrics_lane_wait(job->lane, metrics_now_us() - job->queued_us);
            job->run(job);
            int syncing = worker_sync_hand_over(w, me, job); /* SYNC APART */
            if (!syncing) {
                worker_finish(job);
            }
            pthread_mutex_lock(&w->lock);
            w->jobs_done++;
            /* The work between jobs takes the long turn; if another writer has it, that
             * one does this work after its own (it goes over every store not held). The
             * job's user stays held through it, so its next job waits for its store's
             * purge as with one writer (another writer would take it first). */
            int between = me->in_long || w->long_running == 0;
            /* QUIET: put off for the session's next command, unless a job waits (SHARE
             * decides then) or the work has not run for the cap */
            int64_t now_ms = worker_now_ms();
            int quiet = worker_quiet_ms;
            if (between && quiet > 0 && !worker_lanes_busy(w) &&
                now_ms - w->background_ran_ms < worker_quiet_cap_ms) {
                w->between_due_ms = now_ms + quiet;
                between = 0;
            }
            if (between && !me->in_long) {
                worker_long_begin(w, me);
            }
            if (!between) {
                worker_let_go(w, me);
            }
            pthread_mutex_unlock(&w->lock);
            if (between) {
                worker_purge(w, me);
            }
            pthread_mutex_lock(&w->lock);
            worker_let_go(w, me);
            worker_long_end(w, me);
        } else if (drain_turn) {
            pthread_mutex_unlock(&w->lock);
            worker_drain_step(w, drain);
            worker_purge(w, me); /* after the last step: its files (mv_queue_tidy) */
            pthread_mutex_lock(&w->lock);
            worker_let_go(w, me);
            worker_long_end(w, me);
        } else if (!w->stop && w->between_due_ms != 0 && w->long_running == 0 &&
                   worker_now_ms() >= w->between_due_ms) {
            /* QUIET: no command came meanwhile; the work put off after the last job */
            w->between_due_ms = 0;
            worker_long_begin(w, me);
            pthread_mutex_unlock(&w->lock);
            worker_purge(w, me);
            pthread_mutex_lock(&w->lock);
            worker_long_end(w, me);
        } else if (w->stop || worker_now_ms() < w->next_sweep_ms || w->long_running > 0 ||
                   w->between_due_ms != 0) {
            /* nothing this writer may take: a job comes, another writer lets its user go,
             * a drain step or the sweep is due */
            w->writers_idle++;
            /* (a drain step or the sweep due while another writer has the long turn: the
             * end of that turn wakes it) */
            if (w->between_due_ms != 0 && w->between_due_ms - worker_now_ms() < wait_ms) {
                wait_ms = w->between_due_ms - worker_now_ms(); /* QUIET */
            }
            worker_wait(w, w->stop ? 1000 : wait_ms > 0 ? wait_ms : w->long_running > 0 ? 100 : 1);
            w->writers_idle--;
        }
        /* Also between jobs: on a busy worker idle stores still close (and the sweep leaves
         * out maintenance while a job waits); one writer at a time does it. */
        if (!w->stop && worker_now_ms() >= w->next_sweep_ms && w->long_running == 0) {
            w->next_sweep_ms = worker_now_ms() + period_ms;
            worker_long_begin(w, me); /* maintenance may take long */
            pthread_mutex_unlock(&w->lock);
            worker_sweep(w, me);
            pthread_mutex_lock(&w->lock);
            worker_long_end(w, me);
        }
    }
    while (w->sync_count > 0) { /* SYNC APART: their stores stay open until synced */
        pthread_cond_wait(&w->wake, &w->lock);
    }
    int last = --w->writers_running == 0;
    pthread_mutex_unlock(&w->lock);
    if (last) { /* no job is left, and the other writers have ended */
        for (int i = 0; i < w->stores_max; i++) {
            if (w->stores[i].store != NULL) {
                worker_store_close(w, &w->stores[i]);
            }
        }
    }
    return NULL;
}

/* NICE: whether a thread may go more nice by *arg and back (1 into *arg, else 0). */
static void *worker_nice_probe(void *arg)
{
    int *more = arg;
    id_t tid = (id_t)gettid();
    *more = setpriority(PRIO_PROCESS, tid, worker_nice_base + *more) == 0 &&
            setpriority(PRIO_PROCESS, tid, worker_nice_base) == 0;
    return NULL;
}

int worker_background_nice_set(int more)
{
    int old = atomic_load(&worker_nice_more);
    int ok = more > 0 && worker_nice_base + more <= 19 ? more : 0;
    pthread_t t;
    if (ok > 0 && pthread_create(&t, NULL, worker_nice_probe, &ok) == 0) {
        pthread_join(t, NULL);
    } else {
        ok = 0;
    }
    if (more > 0 && ok == 0) {
        log_info("the work between jobs stays at the jobs' priority: this process may not "
                 "lower a thread's nice value again (CAP_SYS_NICE, RLIMIT_NICE)");
    }
    atomic_store(&worker_nice_more, ok ? more : 0);
    return old;
}

int worker_start(const struct config *cfg, int count, int eventfd)
{
    errno = 0;
    int base = getpriority(PRIO_PROCESS, 0);
    worker_nice_base = errno == 0 ? base : 0;
    (void)worker_background_nice_set(cfg->background_nice);
    worker_cfg = cfg;
    worker_eventfd = eventfd;
    imap_structure_cache_budget((size_t)cfg->structure_cache_kib << 10);
    if (RAND_bytes(worker_hmac_key, sizeof worker_hmac_key) != 1) {
        return -1;
    }
    workers = calloc((size_t)count, sizeof *workers);
    place_users = calloc((size_t)count, sizeof *place_users);
    if (workers == NULL || place_users == NULL) {
        return -1;
    }
    /* SYNC APART: one sync thread per worker, before any store opens (the opens ask) */
    if (cfg->sync_apart) {
        sync_threads = calloc((size_t)count, sizeof *sync_threads);
        if (sync_threads == NULL) {
            return -1;
        }
        for (int i = 0; i < count; i++) {
            if (pthread_create(&sync_threads[i], NULL, worker_sync_main, NULL) != 0) {
                return -1;
            }
            worker_sync_count = i + 1;
        }
    }
    for (int i = 0; i < count; i++) {
        struct worker *w = &workers[i];
        w->index = i;
        w->stores_max = cfg->stores_per_worker;
        w->stores = calloc((size_t)w->stores_max, sizeof *w->stores);
        w->turns.owed = calloc((size_t)w->stores_max, sizeof *w->turns.owed);
        if (w->stores == NULL || w->turns.owed == NULL) {
            return -1;
        }
        for (int k = 0; k < w->stores_max; k++) {
            pthread_mutex_init(&w->stores[k].view_lock, NULL);
            pthread_mutex_init(&w->stores[k].sent_lock, NULL);
            pthread_mutex_init(&w->stores[k].msgid_lock, NULL);
            pthread_mutex_init(&w->stores[k].sort_lock, NULL);
            w->stores[k].structure_cache = imap_structure_cache_new();
        }
        int writers = cfg->writers_per_worker >= 1 ? cfg->writers_per_worker : 1;
        w->writers = calloc((size_t)writers, sizeof *w->writers);
        w->sync_max = w->stores_max + writers;
        w->sync_users = calloc((size_t)w->sync_max, sizeof *w->sync_users);
        if (w->writers == NULL || w->sync_users == NULL) {
            return -1;
        }
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->wake, NULL);
        pthread_cond_init(&w->reader_wake, NULL);
        w->writer_count = writers;
        w->next_sweep_ms = worker_now_ms() + worker_sweep_period_ms();
        worker_count = i + 1;
        for (int k = 0; k < writers; k++) {
            struct worker_writer *t = &w->writers[k];
            t->w = w;
            pthread_mutex_lock(&w->lock);
            w->writers_running++;
            pthread_mutex_unlock(&w->lock);
            if (pthread_create(&t->thread, NULL, worker_writer_main, t) != 0) {
                pthread_mutex_lock(&w->lock);
                w->writers_running--;
                pthread_mutex_unlock(&w->lock);
                return -1;
            }
            t->started = 1;
        }
        if (pthread_create(&w->reader, NULL, worker_reader_main, w) != 0) {
            return -1;
        }
        w->reader_started = 1;
    }
    return 0;
}

/* Tells every worker's reader threads (readers != 0) or writer threads to stop. */
static void worker_stop_signal_all(int readers)
{
    for (int i = 0; i < worker_count; i++) {
        struct worker *w = &workers[i];
        pthread_mutex_lock(&w->lock);
        *(readers ? &w->reader_stop : &w->stop) = 1;
        pthread_cond_broadcast(readers ? &w->reader_wake : &w->wake);
        pthread_mutex_unlock(&w->lock);
    }
}

void worker_stop_all(void)
{
    /* The readers first: their last jobs may hand releases to the writers (READERS), and
     * the writers close the stores (and their reader handles) when they end. */
    worker_stop_signal_all(1);
    for (int i = 0; i < worker_count; i++) {
        if (workers[i].reader_started) {
            pthread_join(workers[i].reader, NULL);
        }
    }
    worker_stop_signal_all(0);
    for (int i = 0; i < worker_count; i++) {
        for (int k = 0; k < workers[i].writer_count; k++) {
            if (workers[i].writers[k].started) {
                pthread_join(workers[i].writers[k].thread, NULL);
            }
        }
        free(workers[i].writers);
        for (int k = 0; k < workers[i].stores_max; k++) {
            imap_structure_cache_free(&workers[i].stores[k].structure_cache);
            imap_sent_dates_free(&workers[i].stores[k].sent_dates);
            pthread_mutex_destroy(&workers[i].stores[k].sent_lock);
            imap_msgids_free(&workers[i].stores[k].msgids);
            pthread_mutex_destroy(&workers[i].stores[k].msgid_lock);
            imap_sort_kept_free(&workers[i].stores[k].sort_kept);
            pthread_mutex_destroy(&workers[i].stores[k].sort_lock);
        }
        free(workers[i].stores);
        free(workers[i].turns.owed);
        free(workers[i].sync_users);
        pthread_mutex_destroy(&workers[i].lock);
        pthread_cond_destroy(&workers[i].wake);
        pthread_cond_destroy(&workers[i].reader_wake);
    }
    /* SYNC APART: last, as the writers waited for their users' syncs (none is left) */
    pthread_mutex_lock(&sync_lock);
    sync_stop = 1;
    pthread_cond_broadcast(&sync_wake);
    pthread_mutex_unlock(&sync_lock);
    for (int i = 0; i < worker_sync_count; i++) {
        pthread_join(sync_threads[i], NULL);
    }
    free(sync_threads);
    sync_threads = NULL;
    worker_sync_count = 0;
    sync_stop = 0;
    /* what is still placed (holds of a caller that did not end them, e.g. a test) */
    for (size_t b = 0; b < WORKER_PLACE_BUCKETS; b++) {
        while (place_table[b] != NULL) {
            struct worker_place *p = place_table[b];
            place_table[b] = p->next;
            free(p);
        }
    }
    free(place_users);
    place_users = NULL;
    free(workers);
    workers = NULL;
    worker_count = 0;
    OPENSSL_cleanse(worker_hmac_key, sizeof worker_hmac_key);
}

static uint32_t worker_hash(const char *address)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)address; *p != '\0'; p++) {
        h = (h ^ *p) * 16777619u;
    }
    return h;
}

/* The placement of address (place_lock held), or NULL; *link: where it is linked from. */
static struct worker_place *worker_place_find(const char *address, struct worker_place ***link)
{
    struct worker_place **l = &place_table[worker_hash(address) % WORKER_PLACE_BUCKETS];
    while (*l != NULL && strcmp((*l)->address, address) != 0) {
        l = &(*l)->next;
    }
    if (link != NULL) {
        *link = l;
    }
    return *l;
}

struct worker *worker_place(const char *address)
{
    uint32_t h = worker_hash(address);
    pthread_mutex_lock(&place_lock);
    struct worker_place *p = worker_place_find(address, NULL);
    if (p == NULL) {
        p = calloc(1, sizeof *p);
        if (p == NULL) { /* out of memory: the hash's worker, unheld (as before placements) */
            pthread_mutex_unlock(&place_lock);
            log_error("placing %s: out of memory", address);
            return &workers[h % (uint32_t)worker_count];
        }
        int best = (int)(h % (uint32_t)worker_count);
        for (int i = 1; i < worker_count; i++) {
            int k = (int)((h + (uint32_t)i) % (uint32_t)worker_count);
            if (place_users[k] < place_users[best]) {
                best = k;
            }
        }
        snprintf(p->address, sizeof p->address, "%s", address);
        p->worker = best;
        place_users[best]++;
        struct worker_place **bucket = &place_table[h % WORKER_PLACE_BUCKETS];
        p->next = *bucket;
        *bucket = p;
    }
    p->holds++;
    struct worker *w = &workers[p->worker];
    pthread_mutex_unlock(&place_lock);
    return w;
}

void worker_unplace(const char *address)
{
    struct worker_place **link = NULL;
    pthread_mutex_lock(&place_lock);
    struct worker_place *p = worker_place_find(address, &link);
    if (p != NULL && --p->holds == 0) {
        *link = p->next;
        place_users[p->worker]--;
        free(p);
    }
    pthread_mutex_unlock(&place_lock);
}

struct worker *worker_placed(const char *address)
{
    pthread_mutex_lock(&place_lock);
    const struct worker_place *p = worker_place_find(address, NULL);
    struct worker *w = p != NULL ? &workers[p->worker] : NULL;
    pthread_mutex_unlock(&place_lock);
    return w;
}

int worker_placed_users(const struct worker *w)
{
    pthread_mutex_lock(&place_lock);
    int n = place_users[w->index];
    pthread_mutex_unlock(&place_lock);
    return n;
}

void worker_post(struct worker *w, struct job *job)
{
    job->worker = w;
    job->next = NULL;
    job->lane =
        job->lane == JOB_LANE_LONG || job->lane == JOB_LANE_READ ? job->lane : JOB_LANE_SHORT;
    job->queued_us = metrics_now_us();
    if (job->conn != NULL) {
        job->conn->refs++;
    }
    enum job_lane lane = job->lane;
    pthread_mutex_lock(&w->lock);
    if (w->tail[lane] != NULL) {
        w->tail[lane]->next = job;
    } else {
        w->head[lane] = job;
    }
    w->tail[lane] = job;
    if (lane != JOB_LANE_READ) {
        atomic_fetch_add(&w->writer_jobs, 1);
        /* a checkpoint between jobs gives way to a job that waits for it (worker_checkpoint):
         * its user's, a long one (the checkpoint has the long turn) or any with no writer free */
        if (w->ckpt_db != NULL &&
            (job->user == w->ckpt_user || lane == JOB_LANE_LONG || w->writers_idle == 0)) {
            sqlite3_interrupt(w->ckpt_db);
            w->ckpt_interrupted = 1;
        }
    }
    metrics_worker_queue(w->index, +1);
    metrics_lane_queue(lane, +1);
    pthread_cond_signal(lane == JOB_LANE_READ ? &w->reader_wake : &w->wake);
    pthread_mutex_unlock(&w->lock);
    pid_t bg = lane == JOB_LANE_READ ? 0 : atomic_load(&w->bg_tid);
    if (bg != 0) { /* NICE: the writer doing the work between jobs, back to the jobs' priority */
        (void)setpriority(PRIO_PROCESS, (id_t)bg, worker_nice_base);
    }
}

void worker_collect(void)
{
    uint64_t count;
    if (read(worker_eventfd, &count, sizeof count) < 0) {
        /* EAGAIN: a previous collect took them */
    }
    pthread_mutex_lock(&done_lock);
    struct job *list = done_head;
    done_head = done_tail = NULL;
    pthread_mutex_unlock(&done_lock);
    while (list != NULL) {
        struct job *job = list;
        list = job->next;
        struct conn *c = job->conn;
        job->done(job); /* frees the job */
        if (c != NULL) {
            conn_release(c);
        }
    }
}
