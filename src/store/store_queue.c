/*
 * store_queue.c -- delivery without the password: a message is sealed to the store's public
 * key (libsodium's crypto_box, store_queue_box.c) into a queue directory beside the store,
 * and the next writable open moves it into INBOX. The reference keys its queue with one
 * server-wide secret; here only the user's password opens the store that holds the secret
 * key, so only the user can read queued mail.
 *
 * USAGE
 *   mv_store_init()  -> store_queue_init_keys(): key pair; secret key in `meta`, public key
 *                       in ROOT/<domain>/<local>.pub
 *   mv_deliver_sealed(address, raw, len, &opts, err, sizeof err)   no password needed
 *   mv_queue_count(address, &opts, &count)
 *   mv_queue_usage(address, &opts, 0, &bytes, &messages)   what it holds, a bounded scan
 *   mv_store_open()  -> store_queue_drain(s, 0, ...): queue -> INBOX, one transaction
 *                       per STORE_QUEUE_BATCH deliveries, one WAL fsync per
 *                       STORE_QUEUE_SETTLE_MAX; with MV_STORE_DRAIN_LATER the open leaves
 *                       the queue
 *   mv_queue_drain(store, max, &moved, &more)   the same, at most max deliveries per call
 *                       (a server drains in steps between other work, not before a login)
 *
 * QUEUE FORMAT (docs/DELIVERY.md)
 *   ROOT/<domain>/<local>.queue/<20-digit Unix ns>-<32 hex>.sealed, mode 0600, holding
 *   a box (store_queue_box.h: form 2, a burst's ephemeral key; form 1, crypto_box_seal, still
 *   opened) of "MVQ1" | internal date (int64 LE, Unix s) | delivery id (16 random bytes) |
 *   the message. Names sort by arrival. Files that do not open with the store's
 *   key go to <local>.queue/rejected/; nothing is ever deleted unread.
 *
 * IMPLEMENTATION NOTES
 *   - Exactly once. The drain appends each delivery and inserts its meta row
 *     'delivered:<hex id>' (value: the queue file's name) in the batch's transaction (up to
 *     STORE_QUEUE_BATCH deliveries), commits it, and takes the files out of the queue only
 *     after a sync of the WAL made the commits durable: at the end of each step, and every
 *     STORE_QUEUE_SETTLE_MAX deliveries (store_queue_settle). A server's step
 *     (mv_queue_drain_step) that stored mail and ended a round of the queue (the mail that
 *     was there is all in) returns when it is committed and leaves the sync and the removal
 *     of its files to the start of the next step (SETTLE LATER), so the user's sessions hear
 *     of the mail first; until then those deliveries are in INBOX and still queued (a count
 *     of the queue, mv_queue_usage, includes them). A retry after a crash between commit
 *     and unlink finds the row and only unlinks. A message the store refuses (a
 *     limit) is refused before the append writes anything, so it goes to rejected/ and the
 *     batch goes on; any store error rolls the whole batch back and leaves its files. The id, not
 *     the SHA-256 of the bytes, decides: two deliveries of identical bytes are two messages.
 *     A row is deleted once its file is gone for good (after the directory fsync), so meta
 *     holds only deliveries in flight: by key for the files the step took out, and on a
 *     drain's first step by a walk of every row (what a crash left). A drain that read a
 *     file another drain has since finished checks, inside its write transaction, that the
 *     file still exists: a missing file means its delivery committed (files disappear only
 *     after their commit). It checks only if another connection committed since its round
 *     began listing (PRAGMA data_version): that drain's delete of the row, which made the
 *     check necessary, is such a commit.
 *   - The .pub file is checked against the public key in meta at every drain and rewritten
 *     from meta when missing or different (a note is left in mv_store_errmsg()).
 *   - READ-AHEAD. Reading, opening (X25519 + XSalsa20-Poly1305: ~37% of a delivery's CPU
 *     with a key agreement per file, form 1), parsing (~26%) and compressing (as the append
 *     would: store_blob_prepack) run on a thread of their own (store_queue_ahead.c), at most
 *     STORE_QUEUE_AHEAD_ITEMS files ahead of the drain's thread, which stores (and, when the
 *     next file is not ready, prepares a later one itself: HELPING there); it keeps working
 *     between a server's steps (the round holds it) and stops when the drain ends or the
 *     store closes. It only reads: storing, setting aside and removing files stay on the
 *     drain's thread in arrival order, so exactly-once is as above. A file it read that
 *     another drain then committed is caught by the meta row or the access() check.
 *   - Memory: the read-ahead's opened (plaintext) deliveries and their parses, wiped when
 *     let go; a file is read ahead only while those hold less than STORE_QUEUE_AHEAD_BYTES
 *     (so at most that plus two deliveries: the read-ahead's and the drain's thread's while
 *     it helps), plus the sealed copies of the ones being opened.
 *   - TWO PHASES. A stepped drain (mv_queue_drain_step, a server's) stores each delivery
 *     without its full-text row and notes the body in the full-text backlog, in the same
 *     transaction (store_fts_backlog.c): the row was ~40% of a delivery's CPU, and the mail
 *     is visible without it. mv_store_index_backlog() builds the rows later; a search reads
 *     the backlog's bodies meanwhile, so it finds them. A whole drain (an open) indexes at
 *     once, as before: its caller waits for it anyway. The step's parse leaves out the texts
 *     the row would hold (STORE_PARSE_NO_TEXT: transfer and charset decoding, HTML
 *     stripping, the header text; ~12% of a step's instructions): the backlog parses the
 *     stored body again for them.
 *
 * LIMITATIONS
 *   - A file larger than message_size_max (of the opener's options) plus the 104 bytes of
 *     framing is left in the queue and reported; a later open with a larger limit takes it.
 *   - Anyone who can write the queue directory can queue mail (the public key is public)
 *     or replay a copied file after its delivery finished; the directory is 0700.
 */
#include "store/store.h"
#include "store/store_queue_ahead.h"
#include "store/store_queue_box.h"
#include "store/store_scan.h"
#include "vfs/db_column.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#define STORE_QUEUE_MAGIC      "MVQ1"
#define STORE_QUEUE_MAGIC_SIZE 4
#define STORE_QUEUE_DATE_SIZE  8
#define STORE_QUEUE_ID_SIZE    16
#define STORE_QUEUE_HEADER_SIZE                                                                    \
    (STORE_QUEUE_MAGIC_SIZE + STORE_QUEUE_DATE_SIZE + STORE_QUEUE_ID_SIZE)
#define STORE_QUEUE_STAMP_DIGITS 20
#define STORE_QUEUE_SUFFIX       ".sealed"
#define STORE_QUEUE_SUFFIX_LEN   7
#define STORE_QUEUE_NAME_LEN                                                                       \
    (STORE_QUEUE_STAMP_DIGITS + 1 + 2 * STORE_QUEUE_ID_SIZE + STORE_QUEUE_SUFFIX_LEN)
#define STORE_QUEUE_TMP_PREFIX "tmp-"
/* A "tmp-" file older than this is a delivery that died before its rename. */
#define STORE_QUEUE_TMP_AGE_MAX_S (24L * 3600)
#define STORE_QUEUE_DELIVERED     "delivered:"
#define STORE_QUEUE_KEY_LEN       (sizeof STORE_QUEUE_DELIVERED - 1 + 2 * STORE_QUEUE_ID_SIZE)
/* Files of committed deliveries wait here for mv_queue_tidy() (store_queue_retire). */
#define STORE_QUEUE_DONE_DIR "done"
#define STORE_QUEUE_KEY_SIZE crypto_box_PUBLICKEYBYTES

_Static_assert(crypto_box_PUBLICKEYBYTES == 32 && crypto_box_SECRETKEYBYTES == 32,
               "X25519 keys are 32 bytes");
_Static_assert(sizeof STORE_QUEUE_SUFFIX - 1 == STORE_QUEUE_SUFFIX_LEN, "suffix length");
_Static_assert(STORE_QUEUE_KEY_SIZE == STORE_PUBLIC_KEY_SIZE, "public key size");

/* Threads a new read-ahead starts (store_queue_ahead_threads_set: tests and measurements). */
static _Atomic unsigned store_queue_ahead_threads = STORE_QUEUE_AHEAD_THREADS;

/* Called on the drain's thread before it stores each delivery (store_queue_take_hook_set). */
static _Atomic(store_queue_take_hook_fn) store_queue_take_hook;

void store_queue_take_hook_set(store_queue_take_hook_fn fn)
{
    atomic_store(&store_queue_take_hook, fn);
}

unsigned store_queue_ahead_threads_set(unsigned threads)
{
    if (threads > STORE_QUEUE_AHEAD_THREADS_MAX) {
        threads = STORE_QUEUE_AHEAD_THREADS_MAX;
    }
    return atomic_exchange(&store_queue_ahead_threads, threads);
}

/* prepare()'s "not a delivery sealed to this store": set aside (rejected/) */
#define STORE_QUEUE_NOT_OURS 1

/* The read-ahead's zstd contexts: one per thread that prepares at a time (its threads and
 * the drain's own while it helps), made on first use, freed with the round. */
struct store_queue_cctx_pool {
    pthread_mutex_t mu;
    ZSTD_CCtx *idle[STORE_QUEUE_AHEAD_THREADS_MAX + 1];
    size_t idle_count;
};

static ZSTD_CCtx *store_queue_cctx_take(struct store_queue_cctx_pool *p)
{
    pthread_mutex_lock(&p->mu);
    ZSTD_CCtx *c = p->idle_count > 0 ? p->idle[--p->idle_count] : NULL;
    pthread_mutex_unlock(&p->mu);
    return c != NULL ? c : ZSTD_createCCtx(); /* NULL: nothing compressed ahead */
}

static void store_queue_cctx_give(struct store_queue_cctx_pool *p, ZSTD_CCtx *c)
{
    pthread_mutex_lock(&p->mu);
    if (c != NULL && p->idle_count < sizeof p->idle / sizeof p->idle[0]) {
        p->idle[p->idle_count++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    ZSTD_freeCCtx(c);
}

static void store_queue_cctx_pool_free(struct store_queue_cctx_pool *p)
{
    for (size_t i = 0; i < p->idle_count; i++) {
        ZSTD_freeCCtx(p->idle[i]);
    }
    p->idle_count = 0;
    pthread_mutex_destroy(&p->mu);
}

/* What the read-ahead's threads read: copies made when it starts, never the handle. */
struct store_queue_ahead_ctx {
    char queue_dir[MV_PATH_MAX];
    uint64_t file_size_max;
    struct mv_limits limits;
    unsigned parse_flags;               /* STORE_PARSE_NO_TEXT for a stepped drain (TWO PHASES) */
    const uint8_t *pk, *sk;             /* the round's */
    struct store_box_cache *box;        /* the round's: burst keys met in its files */
    struct store_queue_cctx_pool *cctx; /* the round's */
};

/* Where a drain is in the queue, kept in the store handle between steps (mv_queue_drain_step),
 * so a step costs what it takes, not a listing of the whole queue: a ROUND is one walk of the
 * queue in name (arrival) order, its directory read once per STORE_SCAN_BATCH names. When a
 * round ends, another starts if the round moved or set aside a file, or saw one stamped after
 * its start (a new arrival); a round that did neither ends the drain. So files that can never
 * be removed (an unlink refused, say) end the drain instead of being taken again forever. */
struct store_queue_round {
    struct store_scan *scan;
    struct store_queue_ahead *ahead; /* the scan's names not yet taken, prepared ahead */
    struct store_queue_ahead_ctx ctx;
    int listed; /* the scan handed out its last name (1) or failed (-1); 0 while it goes on */
    char now[STORE_QUEUE_STAMP_DIGITS + 1]; /* files stamped later wait for the next round */
    int full;                               /* mv_queue_drain(max 0): one round, no resume */
    int progress;                           /* this round moved or set aside a file */
    int later;                              /* this round skipped a file stamped after now */
    int prev_progress;                      /* the round before this one did */
    int64_t data_version; /* the store's PRAGMA data_version when the round began listing */
    int data_version_known;
    int keys; /* pk and sk loaded, .pub checked */
    uint8_t pk[crypto_box_PUBLICKEYBYTES];
    uint8_t sk[crypto_box_SECRETKEYBYTES];
    struct store_box_cache box; /* made with the round, wiped with it */
    struct store_queue_cctx_pool cctx;
    /* Files whose deliveries were committed but not yet synced (store_queue_drain's pending),
     * kept for the next step by a step that ended a round (SETTLE LATER, store_queue_run);
     * STORE_QUEUE_SETTLE_MAX of each (~135 KiB). */
    char (*pending)[STORE_QUEUE_NAME_LEN + 1];
    char (*pending_key)[STORE_QUEUE_KEY_LEN + 1];
    size_t pending_count;
};

struct store_queue_drain {
    mv_store *s;
    struct store_queue_round *round;
    const struct mv_drain_bounds *bounds; /* NULL: the whole queue (an open) */
    int settle_later; /* mv_queue_drain_step(): SETTLE LATER (see store_queue_run) */
    int settle_next;  /* this step ended its round and leaves its files to the next */
    struct timespec start;
    uint8_t *pk, *sk; /* the round's */
    int64_t inbox_id;
    uint64_t file_size_max;
    uint32_t rejected; /* moved to rejected/ */
    uint32_t left;     /* too large or unreadable: left in the queue */
    int dirty;         /* a file was unlinked or moved: fsync the directory */
    int done_ready;    /* done/ exists (1), cannot be made (-1), not yet looked at (0) */
    int unreadable;    /* the directory could not be read (completely) */
    /* Files whose deliveries were appended (or found appended) since the WAL was last
     * synced: [0, pending_txn) committed, the rest in the open transaction. They leave the
     * queue only after a sync made their commits durable (store_queue_settle). The round's
     * arrays, its count kept there between calls. */
    char (*pending)[STORE_QUEUE_NAME_LEN + 1];
    char (*pending_key)[STORE_QUEUE_KEY_LEN + 1]; /* their 'delivered:' keys */
    size_t pending_count, pending_txn;
    /* The keys of the files this step took out of the queue: their rows are deleted by key
     * once the directory's fsync made that durable (store_queue_forget). */
    char (*gone_key)[STORE_QUEUE_KEY_LEN + 1];
    size_t gone_count, gone_cap;
    int scan_rows; /* the drain's first step: store_queue_forget() also walks every row */
    /* No other connection committed since the round began listing (data_version): a listed
     * file that is gone was then not stored by another drain, whose forget would have
     * committed, so the per-file check of store_queue_store() is not needed. */
    int others_quiet;
    int in_txn;             /* the batch's transaction is open */
    uint32_t moved_pending; /* appended in the open transaction */
    uint32_t taken;         /* files opened and dealt with (stored, found stored, rejected) */
    uint32_t moved;         /* deliveries appended to INBOX */
    int more;               /* stopped at a bound with the round not finished */
};

/* Deliveries per commit at most (each commit makes its deliveries visible: EXISTS). */
#define STORE_QUEUE_BATCH 64
/* Deliveries per WAL sync at most: their files wait for it (store_queue_settle), which
 * comes at the end of a step (of a server's step that ended a round of the queue: at the
 * start of the next one), or once this many wait. Each sync took ~1 ms here, and one per
 * batch of 64 was ~10% of a drain's time. */
#define STORE_QUEUE_SETTLE_MAX 2048

__attribute__((format(printf, 4, 5))) static int
store_queue_error(char *errmsg, size_t size, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (errmsg != NULL && size > 0) {
        vsnprintf(errmsg, size, fmt, ap);
    }
    va_end(ap);
    return code;
}

static int store_queue_errno_code(int e)
{
    return (e == ENOSPC || e == EDQUOT) ? MV_ENOSPC : MV_EIO;
}

static int store_queue_sodium(void)
{
    return sodium_init() < 0 ? MV_ERROR : MV_OK; /* thread-safe, idempotent */
}

static int store_queue_write_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int store_queue_read_all(int fd, uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Writes dir/final_name durably: dir/tmp_name (O_EXCL, 0600), write, fsync, rename, fsync
 * of dir. On failure nothing is left under either name. */
static int store_queue_write_durable(const char *dir,
                                     const char *tmp_name,
                                     const char *final_name,
                                     const uint8_t *data,
                                     size_t len,
                                     char *errmsg,
                                     size_t errmsg_size)
{
    char tmp[MV_PATH_MAX], dst[MV_PATH_MAX];
    int n1 = snprintf(tmp, sizeof tmp, "%s/%s", dir, tmp_name);
    int n2 = snprintf(dst, sizeof dst, "%s/%s", dir, final_name);
    if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof tmp || (size_t)n2 >= sizeof dst) {
        return store_queue_error(errmsg, errmsg_size, MV_EINVAL, "path too long in %.200s", dir);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        int e = errno;
        return store_queue_error(errmsg, errmsg_size, store_queue_errno_code(e),
                                 "cannot create %s: %s", tmp, strerror(e));
    }
    int rc = MV_OK, e = 0;
    const char *what = "write";
    if (store_queue_write_all(fd, data, len) != 0) {
        e = errno != 0 ? errno : EIO;
    } else if (fsync(fd) != 0) {
        e = errno;
        what = "fsync";
    }
    if (close(fd) != 0 && e == 0) {
        e = errno;
        what = "close";
    }
    if (e == 0 && rename(tmp, dst) != 0) {
        e = errno;
        what = "rename";
    }
    if (e != 0) {
        unlink(tmp);
        return store_queue_error(errmsg, errmsg_size, store_queue_errno_code(e), "cannot %s %s: %s",
                                 what, tmp, strerror(e));
    }
    rc = store_fsync_dir(dir);
    if (rc != MV_OK) {
        return store_queue_error(errmsg, errmsg_size, rc, "cannot fsync directory %s", dir);
    }
    return MV_OK;
}

/* Reads the 32-byte public key file. MV_OK or MV_ECORRUPT (message says why). */
static int store_queue_pub_read(const char *path,
                                uint8_t pk[STORE_QUEUE_KEY_SIZE],
                                char *errmsg,
                                size_t errmsg_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        return store_queue_error(errmsg, errmsg_size, MV_ECORRUPT,
                                 "cannot read the delivery key %s: %s (opening the store with "
                                 "the password writes it again)",
                                 path, strerror(errno));
    }
    struct stat st;
    int rc = MV_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != STORE_QUEUE_KEY_SIZE ||
        store_queue_read_all(fd, pk, STORE_QUEUE_KEY_SIZE) != 0) {
        rc = store_queue_error(errmsg, errmsg_size, MV_ECORRUPT,
                               "the delivery key %s is not a 32-byte file (opening the store "
                               "with the password writes it again)",
                               path);
    }
    close(fd);
    return rc;
}

/* ---- keys in meta -------------------------------------------------------------------- */

/* Reads meta[key] into out (exactly size bytes). MV_OK, MV_ENOTFOUND, MV_ECORRUPT or an
 * SQLite error; message set. */
static int store_queue_meta_get(mv_store *s, const char *key, uint8_t *out, size_t size)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT value FROM meta WHERE key = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading meta");
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    int rc = MV_OK;
    if (step == SQLITE_ROW) {
        const void *v = sqlite3_column_blob(st, 0);
        size_t n = (size_t)sqlite3_column_bytes(st, 0);
        if (v == NULL || n != size) {
            rc = store_fail(s, MV_ECORRUPT, "meta '%s' is %zu bytes, not %zu", key, n, size);
        } else {
            memcpy(out, v, size);
        }
    } else if (step == SQLITE_DONE) {
        rc = MV_ENOTFOUND;
    } else {
        rc = store_fail_sqlite(s, "reading meta");
    }
    sqlite3_reset(st);
    return rc;
}

static int
store_queue_meta_put(mv_store *s, const char *key, const void *value, size_t size, int as_text)
{
    sqlite3_stmt *st = store_stmt(s, "INSERT INTO meta(key, value) VALUES(?, ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "writing meta");
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (as_text) {
        sqlite3_bind_text(st, 2, value, (int)size, SQLITE_STATIC);
    } else {
        sqlite3_bind_blob(st, 2, value, (int)size, SQLITE_STATIC);
    }
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st); /* the secret key was bound SQLITE_STATIC */
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "writing meta");
}

/* Both keys from meta: MV_OK, MV_ENOTFOUND (neither), MV_ECORRUPT (one, or a mismatch). */
static int store_queue_keys_load(mv_store *s, uint8_t *pk, uint8_t *sk)
{
    int rc_pk = store_queue_meta_get(s, "queue_public_key", pk, crypto_box_PUBLICKEYBYTES);
    int rc_sk = store_queue_meta_get(s, "queue_secret_key", sk, crypto_box_SECRETKEYBYTES);
    if (rc_pk == MV_ENOTFOUND && rc_sk == MV_ENOTFOUND) {
        return MV_ENOTFOUND;
    }
    if (rc_pk != MV_OK || rc_sk != MV_OK) {
        int rc = rc_pk != MV_OK && rc_pk != MV_ENOTFOUND ? rc_pk : rc_sk;
        return rc != MV_ENOTFOUND ? rc
                                  : store_fail(s, MV_ECORRUPT,
                                               "meta holds only one of the "
                                               "queue keys");
    }
    /* The pair must belong together: pk is X25519(sk, base point). */
    uint8_t derived[crypto_box_PUBLICKEYBYTES];
    int ok =
        crypto_scalarmult_base(derived, sk) == 0 && sodium_memcmp(derived, pk, sizeof derived) == 0;
    return ok ? MV_OK : store_fail(s, MV_ECORRUPT, "the queue keys in meta do not form a key pair");
}

/* Loads the key pair from meta, creating it (in one transaction, committed durably) if the
 * store has none. */
static int store_queue_keys_ensure(mv_store *s, uint8_t *pk, uint8_t *sk)
{
    int rc = store_queue_keys_load(s, pk, sk);
    if (rc != MV_ENOTFOUND) {
        return rc;
    }
    rc = store_begin(s);
    if (rc != MV_OK) {
        return rc;
    }
    rc = store_queue_keys_load(s, pk, sk); /* another opener may have just made them */
    if (rc == MV_ENOTFOUND) {
        rc = crypto_box_keypair(pk, sk) == 0 ? MV_OK
                                             : store_fail(s, MV_ERROR, "crypto_box_keypair failed");
        if (rc == MV_OK) {
            rc = store_queue_meta_put(s, "queue_secret_key", sk, crypto_box_SECRETKEYBYTES, 0);
        }
        if (rc == MV_OK) {
            rc = store_queue_meta_put(s, "queue_public_key", pk, crypto_box_PUBLICKEYBYTES, 0);
        }
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}

/* Makes the .pub file hold pk: rewritten (atomically) when missing or different. */
static int store_queue_pub_sync(mv_store *s, const uint8_t *pk, int *rewritten)
{
    *rewritten = 0;
    uint8_t on_disk[STORE_QUEUE_KEY_SIZE];
    char err[MV_PATH_MAX + 128];
    int rc = store_queue_pub_read(s->pub_path, on_disk, err, sizeof err);
    if (rc == MV_OK && sodium_memcmp(on_disk, pk, sizeof on_disk) == 0) {
        return MV_OK;
    }
    uint8_t random[8];
    char tmp_name[MV_ADDRESS_MAX + 64], random_hex[2 * sizeof random + 1];
    randombytes_buf(random, sizeof random);
    sodium_bin2hex(random_hex, sizeof random_hex, random, sizeof random);
    const char *base = strrchr(s->pub_path, '/') + 1;
    snprintf(tmp_name, sizeof tmp_name, "%s.tmp-%s", base, random_hex);
    rc = store_queue_write_durable(s->domain_dir, tmp_name, base, pk, STORE_QUEUE_KEY_SIZE, err,
                                   sizeof err);
    if (rc != MV_OK) {
        return store_fail(s, rc, "%s", err);
    }
    *rewritten = 1;
    return MV_OK;
}

int store_queue_init_keys(mv_store *s)
{
    uint8_t pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
    int rc = store_queue_sodium();
    if (rc != MV_OK) {
        return store_fail(s, rc, "libsodium failed to initialise");
    }
    rc = store_durable(s, 1);
    if (rc == MV_OK) {
        rc = store_queue_keys_ensure(s, pk, sk);
        int rc2 = store_durable(s, 0);
        rc = rc != MV_OK ? rc : rc2;
    }
    int rewritten = 0;
    if (rc == MV_OK) {
        rc = store_queue_pub_sync(s, pk, &rewritten);
    }
    sodium_memzero(sk, sizeof sk);
    return rc;
}

/* ---- delivery ------------------------------------------------------------------------ */

static void store_queue_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static uint64_t store_queue_get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

/* Seals header + raw to pk into *out (malloc'd, len + header + STORE_BOX_OVERHEAD_2 bytes). */
static int
store_queue_seal(const uint8_t *pk, const void *raw, size_t len, uint8_t **out, size_t *out_len)
{
    size_t plain_len = STORE_QUEUE_HEADER_SIZE + len;
    uint8_t *plain = malloc(plain_len);
    *out = NULL;
    *out_len = 0;
    if (plain == NULL) {
        return MV_ENOMEM;
    }
    memcpy(plain, STORE_QUEUE_MAGIC, STORE_QUEUE_MAGIC_SIZE);
    store_queue_put_le64(plain + STORE_QUEUE_MAGIC_SIZE, (uint64_t)(int64_t)time(NULL));
    randombytes_buf(plain + STORE_QUEUE_MAGIC_SIZE + STORE_QUEUE_DATE_SIZE, STORE_QUEUE_ID_SIZE);
    memcpy(plain + STORE_QUEUE_HEADER_SIZE, raw, len);
    int rc = store_box_seal(pk, plain, plain_len, out, out_len);
    sodium_memzero(plain, plain_len);
    free(plain);
    return rc;
}

/* "<20-digit ns>-<32 hex>.sealed" and "tmp-<32 hex>". */
static void store_queue_names(char *final_name, size_t final_size, char *tmp_name, size_t tmp_size)
{
    struct timespec ts;
    uint8_t random[STORE_QUEUE_ID_SIZE];
    char hex[2 * STORE_QUEUE_ID_SIZE + 1];
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    randombytes_buf(random, sizeof random);
    sodium_bin2hex(hex, sizeof hex, random, sizeof random);
    snprintf(final_name, final_size, "%020llu-%s%s", (unsigned long long)ns, hex,
             STORE_QUEUE_SUFFIX);
    randombytes_buf(random, sizeof random);
    sodium_bin2hex(hex, sizeof hex, random, sizeof random);
    snprintf(tmp_name, tmp_size, "%s%s", STORE_QUEUE_TMP_PREFIX, hex);
}

/* Checks what can be checked without the store or its lock: size, store present. */
static int store_queue_deliver_check(const struct store_paths *p,
                                     const void *raw,
                                     size_t len,
                                     const struct mv_store_options *o,
                                     char *errmsg,
                                     size_t errmsg_size)
{
    if (raw == NULL || len == 0) {
        return store_queue_error(errmsg, errmsg_size, MV_EINVAL, "an empty message");
    }
    if ((uint64_t)len > o->limits.message_size_max ||
        len > SIZE_MAX - STORE_QUEUE_HEADER_SIZE - STORE_BOX_OVERHEAD_MAX) {
        return store_queue_error(errmsg, errmsg_size, MV_ELIMIT,
                                 "message is %zu bytes; message_size_max is %llu", len,
                                 (unsigned long long)o->limits.message_size_max);
    }
    struct stat st;
    if (stat(p->db_path, &st) != 0) {
        int e = errno;
        return store_queue_error(errmsg, errmsg_size, e == ENOENT ? MV_ENOTFOUND : MV_EIO,
                                 "no store for %s (%s)", p->address, strerror(e));
    }
    if (store_queue_sodium() != MV_OK) {
        return store_queue_error(errmsg, errmsg_size, MV_ERROR, "libsodium failed to initialise");
    }
    return MV_OK;
}

/* Creates the queue directory if needed, durably (its entry in the domain directory too). */
static int store_queue_dir_make(const struct store_paths *p, char *errmsg, size_t errmsg_size)
{
    struct stat st;
    if (stat(p->queue_dir, &st) == 0 && S_ISDIR(st.st_mode)) {
        return MV_OK;
    }
    int rc = store_mkdirs(p->queue_dir, errmsg, errmsg_size);
    if (rc == MV_OK && store_fsync_dir(p->domain_dir) != MV_OK) {
        rc = store_queue_error(errmsg, errmsg_size, MV_EIO, "cannot fsync %s", p->domain_dir);
    }
    return rc;
}

int mv_deliver_sealed(const char *address,
                      const void *raw,
                      size_t len,
                      const struct mv_store_options *opts,
                      char *errmsg,
                      size_t errmsg_size)
{
    static const struct mv_store_options defaults = MV_STORE_OPTIONS_INIT;
    const struct mv_store_options *o = opts != NULL ? opts : &defaults;
    char scratch[16];
    if (errmsg == NULL || errmsg_size == 0) {
        errmsg = scratch; /* the lock and fence helpers always write a message */
        errmsg_size = sizeof scratch;
    }
    struct store_paths paths;
    uint8_t pk[STORE_QUEUE_KEY_SIZE];
    uint8_t *sealed = NULL;
    size_t sealed_len = 0;
    int rc = store_paths_resolve(address, o, &paths, errmsg, errmsg_size);
    if (rc == MV_OK) {
        rc = store_queue_deliver_check(&paths, raw, len, o, errmsg, errmsg_size);
    }
    /* The store's lock, shared, from before the key is read until the entry is written: an
     * init (exclusive until its key pair is written) is waited for, not taken for a missing
     * key; a release (exclusive) either comes after this delivery, which the moved store then
     * carries, or before it, and the delivery is refused (store_fence.c). */
    int lock_fd = -1;
    if (rc == MV_OK) {
        rc = store_lock_take(paths.db_path, STORE_LOCK_SHARED, STORE_LOCK_OPEN_WAIT_MS, 0, &lock_fd,
                             errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = store_fence_check(paths.db_path, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = store_queue_pub_read(paths.pub_path, pk, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = store_queue_dir_make(&paths, errmsg, errmsg_size);
    }
    if (rc == MV_OK) {
        rc = store_queue_seal(pk, raw, len, &sealed, &sealed_len);
        if (rc == MV_ECORRUPT) {
            store_queue_error(errmsg, errmsg_size, rc,
                              "%s holds no usable public key (opening the store with the "
                              "password writes it again)",
                              paths.pub_path);
        } else if (rc != MV_OK) {
            store_queue_error(errmsg, errmsg_size, rc, "cannot seal the message: %s",
                              mv_strerror(rc));
        }
    }
    if (rc == MV_OK) {
        char final_name[STORE_QUEUE_NAME_LEN + 1], tmp_name[64];
        store_queue_names(final_name, sizeof final_name, tmp_name, sizeof tmp_name);
        rc = store_queue_write_durable(paths.queue_dir, tmp_name, final_name, sealed, sealed_len,
                                       errmsg, errmsg_size);
    }
    store_lock_release(&lock_fd);
    free(sealed);
    return rc;
}

void mv_deliver_sealed_wipe(int all)
{
    store_box_seal_expire(all);
}

/* ---- the queue's files ------------------------------------------------------------------ */

/* Whether name is exactly "<20 digits>-<32 lowercase hex>.sealed". */
int store_queue_entry_name_ok(const char *name)
{
    if (strlen(name) != STORE_QUEUE_NAME_LEN || name[STORE_QUEUE_STAMP_DIGITS] != '-' ||
        strcmp(name + STORE_QUEUE_NAME_LEN - STORE_QUEUE_SUFFIX_LEN, STORE_QUEUE_SUFFIX) != 0) {
        return 0;
    }
    for (size_t i = 0; i < STORE_QUEUE_NAME_LEN - STORE_QUEUE_SUFFIX_LEN; i++) {
        char c = name[i];
        int digit = c >= '0' && c <= '9', hex = digit || (c >= 'a' && c <= 'f');
        /* (1) the stamp is digits  (2) the dash  (3) the random part is hex */
        if (!((i < STORE_QUEUE_STAMP_DIGITS && digit) || i == STORE_QUEUE_STAMP_DIGITS ||
              (i > STORE_QUEUE_STAMP_DIGITS && hex))) {
            return 0;
        }
    }
    return 1;
}

int mv_store_exists(const char *address, const struct mv_store_options *opts)
{
    struct store_paths paths;
    int rc = store_paths_resolve(address, opts, &paths, NULL, 0);
    if (rc != MV_OK) {
        return rc;
    }
    if (access(paths.db_path, F_OK) != 0) {
        return errno == ENOENT ? MV_ENOTFOUND : MV_EIO;
    }
    return MV_OK;
}

/* Opens the queue directory of address's store for a scan: MV_OK with *d set, MV_OK with *d
 * NULL when the store has no queue directory (nothing queued), MV_ENOTFOUND when there is no
 * store, else an MV_* code. access() and opendir() only: no descriptor of the store's own
 * files is opened (a close would drop the SQLite locks of a handle this process holds). */
static int store_queue_dir_open(const char *address, const struct mv_store_options *opts, DIR **d)
{
    struct store_paths paths;
    *d = NULL;
    int rc = mv_store_exists(address, opts);
    if (rc == MV_OK) {
        rc = store_paths_resolve(address, opts, &paths, NULL, 0);
    }
    if (rc != MV_OK) {
        return rc;
    }
    *d = opendir(paths.queue_dir);
    if (*d == NULL) {
        return errno == ENOENT ? MV_OK : MV_EIO;
    }
    return MV_OK;
}

/* Whether a directory entry is a regular file, not followed if it is a link (what the drain
 * opens, O_NOFOLLOW): from d_type, with an lstat only where the file system leaves it out.
 * mv_queue_count and mv_queue_usage both count by it, so they agree. */
static int store_queue_entry_regular(DIR *d, const struct dirent *e)
{
    if (e->d_type != DT_UNKNOWN) {
        return e->d_type == DT_REG;
    }
    struct stat st;
    return fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

int mv_queue_count(const char *address, const struct mv_store_options *opts, uint32_t *count_out)
{
    *count_out = 0;
    DIR *d;
    int rc = store_queue_dir_open(address, opts, &d);
    if (rc != MV_OK || d == NULL) {
        return rc;
    }
    struct dirent *e;
    uint32_t count = 0;
    for (errno = 0; (e = readdir(d)) != NULL; errno = 0) {
        if (store_queue_entry_name_ok(e->d_name) && store_queue_entry_regular(d, e) &&
            count < UINT32_MAX) {
            count++;
        }
    }
    rc = errno != 0 ? MV_EIO : MV_OK;
    closedir(d);
    *count_out = count;
    return rc;
}

int mv_queue_usage(const char *address,
                   const struct mv_store_options *opts,
                   uint32_t entries_max,
                   uint64_t *bytes_out,
                   uint64_t *messages_out)
{
    if (bytes_out == NULL || messages_out == NULL) {
        return MV_EINVAL;
    }
    *bytes_out = 0;
    *messages_out = 0;
    DIR *d;
    int rc = store_queue_dir_open(address, opts, &d);
    if (rc != MV_OK || d == NULL) {
        return rc;
    }
    /* stat of the queue's entries only (see store_queue_dir_open) */
    uint64_t max = entries_max != 0 ? entries_max : MV_QUEUE_SCAN_MAX, seen = 0;
    uint64_t bytes = 0, messages = 0;
    struct dirent *e;
    rc = MV_OK;
    for (errno = 0; (e = readdir(d)) != NULL; errno = 0) {
        if (++seen > max) {
            rc = MV_ELIMIT; /* a bounded scan: never a guess from part of the queue */
            break;
        }
        struct stat st;
        /* (1) a delivery's name (unfinished "tmp-" files and rejected/ are not)  (2) a
         * regular file, not followed if it is a link */
        if (store_queue_entry_name_ok(e->d_name) &&
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
            bytes += (uint64_t)st.st_size;
            messages++;
        }
    }
    if (rc == MV_OK && errno != 0) {
        rc = MV_EIO;
    }
    closedir(d);
    if (rc == MV_OK) {
        *bytes_out = bytes;
        *messages_out = messages;
    }
    return rc;
}

/* ---- the drain ------------------------------------------------------------------------ */

/* The scan's filter: a delivery's name, stamped no later than the round's start (a later one
 * is noted: the next round takes it). */
static int store_queue_accept_due(void *arg, const char *name)
{
    struct store_queue_round *r = arg;
    if (!store_queue_entry_name_ok(name)) {
        return 0;
    }
    if (strncmp(name, r->now, STORE_QUEUE_STAMP_DIGITS) > 0) {
        r->later = 1;
        return 0;
    }
    return 1;
}

static void
store_queue_path(const struct store_queue_drain *q, const char *name, char *out, size_t size)
{
    snprintf(out, size, "%s/%s", q->s->queue_dir, name);
}

/* Reads one queue file whole (on a read-ahead thread). MV_OK; MV_ENOTFOUND (gone: another
 * drain took it); MV_ELIMIT or MV_EIO (left in the queue); MV_ENOMEM. */
static int store_queue_file_read(const struct store_queue_ahead_ctx *c,
                                 const char *name,
                                 uint8_t **out,
                                 size_t *len)
{
    char path[MV_PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/%s", c->queue_dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        return errno == ENOENT ? MV_ENOTFOUND : MV_EIO;
    }
    struct stat st;
    int rc = MV_OK;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = MV_EIO;
    } else if ((uint64_t)st.st_size > c->file_size_max) {
        rc = MV_ELIMIT;
    } else if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
        rc = MV_ENOMEM;
    } else {
        rc = store_queue_read_all(fd, buf, (size_t)st.st_size) == 0 ? MV_OK : MV_EIO;
    }
    close(fd);
    if (rc != MV_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = (size_t)st.st_size;
    return MV_OK;
}

/* Moves a file that cannot be delivered to rejected/ (or, failing that, leaves it). */
static void store_queue_reject(struct store_queue_drain *q, const char *name)
{
    char dir[MV_PATH_MAX + 16], from[MV_PATH_MAX + 80], to[MV_PATH_MAX + 96];
    snprintf(dir, sizeof dir, "%s/rejected", q->s->queue_dir);
    store_queue_path(q, name, from, sizeof from);
    snprintf(to, sizeof to, "%s/%s", dir, name);
    if ((mkdir(dir, 0700) == 0 || errno == EEXIST) && rename(from, to) == 0) {
        q->rejected++;
        q->dirty = 1;
        q->round->progress = 1;
        (void)store_fsync_dir(dir); /* at worst the file reappears in the queue */
    } else {
        q->left++;
    }
}

static int store_queue_delivered(mv_store *s, const char *key, int *done)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT 1 FROM meta WHERE key = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "reading meta");
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    *done = step == SQLITE_ROW;
    return step == SQLITE_ROW || step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "reading meta");
}

/* The store's PRAGMA data_version: it changes when another connection commits. */
static int store_queue_data_version(mv_store *s, int64_t *out)
{
    sqlite3_stmt *st = store_stmt(s, "PRAGMA data_version");
    if (st == NULL) {
        return s->stmt_failure;
    }
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
    }
    sqlite3_reset(st);
    return step == SQLITE_ROW ? MV_OK : MV_ERROR;
}

/* Opens the batch's transaction unless it is open. Its commit is the profile's (NORMAL: no
 * sync); store_queue_settle() syncs before any of its files goes. */
static int store_queue_txn(struct store_queue_drain *q)
{
    if (q->in_txn) {
        return MV_OK;
    }
    int rc = store_begin(q->s);
    if (rc != MV_OK) {
        return rc;
    }
    q->in_txn = 1;
    int64_t now = 0;
    q->others_quiet = q->round->data_version_known &&
                      store_queue_data_version(q->s, &now) == MV_OK &&
                      now == q->round->data_version;
    return MV_OK;
}

/* Gives up the batch's transaction: its appends are undone and its files stay queued (a
 * later drain takes them). */
static void store_queue_abandon(struct store_queue_drain *q)
{
    if (q->in_txn) {
        store_rollback(q->s);
        q->in_txn = 0;
    }
    q->pending_count = q->pending_txn; /* the committed ones wait for a sync */
    q->moved_pending = 0;
}

/* Takes the file of a committed delivery out of the queue: renamed into done/, whose files
 * mv_queue_tidy() unlinks later, between other work. An unlink frees the file's blocks, and
 * on a file system mounted with online discard that waits for the device (~4 ms per queue
 * file on ext4 -o discard, where a rename takes ~0.01 ms): unlinked in the step, 1,200
 * deliveries spent more time in unlink than in everything else. The file is unlinked at once
 * if done/ cannot be made. 0, or -1 (the file is still in the queue). */
static int store_queue_retire(struct store_queue_drain *q, const char *name)
{
    char from[MV_PATH_MAX + 80], to[MV_PATH_MAX + 96];
    store_queue_path(q, name, from, sizeof from);
    if (!q->done_ready) {
        snprintf(to, sizeof to, "%s/" STORE_QUEUE_DONE_DIR, q->s->queue_dir);
        q->done_ready = mkdir(to, 0700) == 0 || errno == EEXIST ? 1 : -1;
    }
    if (q->done_ready > 0) {
        snprintf(to, sizeof to, "%s/" STORE_QUEUE_DONE_DIR "/%s", q->s->queue_dir, name);
        if (rename(from, to) == 0) {
            q->s->queue_done_hint = 1;
            q->s->queue_done_moves++;
            return 0;
        }
        if (errno == ENOENT) {
            return 0; /* another drain took it out (its commit came first) */
        }
    }
    return unlink(from) == 0 || errno == ENOENT ? 0 : -1;
}

/* Notes the key of a file taken out of the queue, for store_queue_forget(); out of memory,
 * the forget walks every row instead. */
static void store_queue_gone(struct store_queue_drain *q, const char *key)
{
    if (q->gone_count == q->gone_cap) {
        size_t cap = q->gone_cap == 0 ? STORE_QUEUE_BATCH : 2 * q->gone_cap;
        void *grown = realloc(q->gone_key, cap * sizeof *q->gone_key);
        if (grown == NULL) {
            q->scan_rows = 1;
            return;
        }
        q->gone_key = grown;
        q->gone_cap = cap;
    }
    snprintf(q->gone_key[q->gone_count++], sizeof q->gone_key[0], "%s", key);
}

/* With no transaction open: syncs the WAL, so the commits of the pending deliveries are
 * durable, then takes their files out of the queue. Before the sync a crash (or a power
 * loss) keeps the files: a delivery whose commit was lost is appended again, one whose
 * commit survived is found by its meta row and only taken out. The sync covers the commits
 * of other connections too, so a delivery another drain committed (found by its row) is
 * durable before its file goes. */
static int store_queue_settle(struct store_queue_drain *q)
{
    if (q->pending_count == 0) {
        return MV_OK;
    }
    int rc = store_wal_sync(q->s);
    if (rc != MV_OK) {
        return rc; /* the files stay; committed meta rows prevent a second append */
    }
    for (size_t i = 0; i < q->pending_count; i++) {
        if (store_queue_retire(q, q->pending[i]) != 0) {
            q->left++; /* stays; its meta row keeps it from being appended twice */
        } else {
            q->round->progress = 1; /* a file left the queue: the round did something */
            store_queue_gone(q, q->pending_key[i]);
        }
    }
    q->pending_count = q->pending_txn = 0;
    q->dirty = 1;
    return MV_OK;
}

/* Commits the batch (its deliveries are visible from here) and, with settle or once
 * STORE_QUEUE_SETTLE_MAX deliveries wait, syncs and takes their files out of the queue
 * (store_queue_settle). */
static int store_queue_flush(struct store_queue_drain *q, int settle)
{
    if (q->in_txn) {
        int rc = store_commit(q->s); /* rolls back on failure */
        q->in_txn = 0;
        if (rc != MV_OK) {
            q->pending_count = q->pending_txn; /* those files stay */
            q->moved_pending = 0;
            return rc;
        }
        q->moved += q->moved_pending;
        q->moved_pending = 0;
        q->pending_txn = q->pending_count;
    } else {
        q->pending_count = q->pending_txn;
    }
    return settle || q->pending_txn >= STORE_QUEUE_SETTLE_MAX - STORE_QUEUE_BATCH
               ? store_queue_settle(q)
               : MV_OK;
}

/* Appends one opened delivery to INBOX exactly once (see the file comment), inside the
 * batch's transaction; its file goes once the commit is synced (settle). Fails only on store
 * errors (the batch is then undone and its files stay queued); a message the store refuses
 * goes to rejected/ and the batch goes on (the append checks limits and parses before it
 * writes anything, as the importer relies on too). parsed and sha256: the read-ahead's parse
 * of the message (NULL: the append parses). */
/* The parse a message of this drain gets: without its texts when its full-text row is left
 * to the backlog (a stepped drain's, TWO PHASES; every message of a handle set by
 * mv_store_index_later), so that the read-ahead's parse is the one the append wants
 * (store_message_append_parsed_in_txn: STORE_PARSE_NO_TEXT exactly when s->fts_defer). */
static unsigned store_queue_parse_flags(const struct store_queue_drain *q)
{
    return q->bounds != NULL || q->s->index_later ? STORE_PARSE_NO_TEXT : 0;
}

static int store_queue_store(struct store_queue_drain *q,
                             const char *name,
                             const uint8_t *plain,
                             size_t plain_len,
                             const struct store_parsed *parsed,
                             const uint8_t *sha256)
{
    mv_store *s = q->s;
    char key[sizeof STORE_QUEUE_DELIVERED + 2 * (size_t)STORE_QUEUE_ID_SIZE],
        path[MV_PATH_MAX + 80];
    memcpy(key, STORE_QUEUE_DELIVERED, sizeof STORE_QUEUE_DELIVERED - 1);
    sodium_bin2hex(key + sizeof STORE_QUEUE_DELIVERED - 1, 2 * STORE_QUEUE_ID_SIZE + 1,
                   plain + STORE_QUEUE_MAGIC_SIZE + STORE_QUEUE_DATE_SIZE, STORE_QUEUE_ID_SIZE);
    store_queue_path(q, name, path, sizeof path);
    int64_t date = (int64_t)store_queue_get_le64(plain + STORE_QUEUE_MAGIC_SIZE);
    int done = 0;
    int rc = store_queue_txn(q);
    if (rc != MV_OK) {
        return rc;
    }
    rc = store_queue_delivered(s, key, &done);
    if (rc == MV_OK && !done && !q->others_quiet) {
        /* Under the write lock: a file that is gone was committed by another drain, whose
         * meta row has since been forgotten (that forget is a commit: others_quiet). */
        done = access(path, F_OK) != 0 && errno == ENOENT;
    }
    if (rc == MV_OK && !done) {
        uint32_t uid = 0;
        int changes = sqlite3_total_changes(s->db);
        /* A stepped drain (a server's) stores the message without its full-text row, which
         * mv_store_index_backlog() builds later (TWO PHASES above), as does any drain of a
         * handle set by mv_store_index_later(); an open's drain indexes. */
        s->fts_defer = store_queue_parse_flags(q) != 0;
        rc = store_message_append_parsed_in_txn(s, q->inbox_id, plain + STORE_QUEUE_HEADER_SIZE,
                                                plain_len - STORE_QUEUE_HEADER_SIZE, parsed, sha256,
                                                0, NULL, date, &uid);
        s->fts_defer = 0;
        if ((rc == MV_ELIMIT || rc == MV_EINVAL) && sqlite3_total_changes(s->db) == changes) {
            store_queue_reject(q, name); /* this message, not the store: never lost, set aside */
            return MV_OK;
        }
        if (rc == MV_ELIMIT || rc == MV_EINVAL) {
            /* refused after it wrote: undo the batch (its files stay queued), set this aside */
            store_queue_abandon(q);
            store_queue_reject(q, name);
            return MV_OK;
        }
        if (rc == MV_OK) {
            rc = store_queue_meta_put(s, key, name, strlen(name), 1);
        }
        q->moved_pending += rc == MV_OK;
    }
    if (rc != MV_OK) {
        store_queue_abandon(q);
        return rc;
    }
    snprintf(q->pending_key[q->pending_count], sizeof q->pending_key[0], "%s", key);
    snprintf(q->pending[q->pending_count++], sizeof q->pending[0], "%s", name);
    return q->pending_count - q->pending_txn == STORE_QUEUE_BATCH ? store_queue_flush(q, 0) : MV_OK;
}

/* ---- the read-ahead's work (on its threads: the item and the context only) ------------ */

/* Opens a sealed file into it->plain: MV_OK, STORE_QUEUE_NOT_OURS (too short, not sealed to
 * this key, or not our format) or MV_ENOMEM. */
static int store_queue_open_sealed(const struct store_queue_ahead_ctx *c,
                                   const uint8_t *sealed,
                                   size_t sealed_len,
                                   struct store_queue_ahead_item *it)
{
    /* (1) long enough  (2) authentic and for this key  (3) our format */
    if (sealed_len < STORE_BOX_OVERHEAD_1 + STORE_QUEUE_HEADER_SIZE) {
        return STORE_QUEUE_NOT_OURS;
    }
    size_t len = 0;
    uint8_t *plain = malloc(sealed_len); /* the plaintext is shorter by either form's overhead */
    if (plain == NULL) {
        return MV_ENOMEM;
    }
    if (store_box_open(c->box, c->pk, c->sk, sealed, sealed_len, plain, &len) != 0 ||
        len < STORE_QUEUE_HEADER_SIZE ||
        memcmp(plain, STORE_QUEUE_MAGIC, STORE_QUEUE_MAGIC_SIZE) != 0) {
        sodium_memzero(plain, sealed_len);
        free(plain);
        return STORE_QUEUE_NOT_OURS;
    }
    it->plain = plain;
    it->plain_len = len;
    it->cost = len;
    return MV_OK;
}

/* Parses the opened message as the append would (the store's limits; without the texts in a
 * stepped drain) and hashes it. A message the parse or the size limit refuses is left
 * unparsed: the append on the drain's thread refuses it again, with the store's message. */
static void store_queue_parse_ahead(const struct store_queue_ahead_ctx *c,
                                    struct store_queue_ahead_item *it)
{
    const uint8_t *msg = it->plain + STORE_QUEUE_HEADER_SIZE;
    size_t len = it->plain_len - STORE_QUEUE_HEADER_SIZE;
    if (len == 0 || (uint64_t)len > c->limits.message_size_max) {
        return;
    }
    if (store_parse_flags(msg, len, &c->limits, STORE_SPLIT_MIN, c->parse_flags, &it->parsed, NULL,
                          0) != MV_OK) {
        return;
    }
    /* OpenSSL's SHA-256 (SHA-NI where the CPU has it), as the append's own hash
     * (store_blob_sha256): libsodium 1.0.18's portable code took 4x as long (15 against 3.7 us
     * for 6 KB here), ~7% of a drain's samples. On failure the append hashes again itself. */
    unsigned int digest_len = 0;
    if (EVP_Digest(msg, len, it->sha256, &digest_len, EVP_sha256(), NULL) != 1 ||
        digest_len != sizeof it->sha256) {
        store_parsed_free(&it->parsed);
        return;
    }
    it->parse_flags = c->parse_flags;
    it->parsed_ok = 1;
    /* the texts count against the bound too: up to ~1 MiB + 64 KiB besides the message */
    it->cost += store_parsed_size(&it->parsed);
    /* The compression store_body_put() would do on the drain's thread, done here: with new
     * bodies that thread is the slower of the two, and this one idles half the time. Not
     * done (a message with parts to cut, no context, an error): the append compresses. */
    ZSTD_CCtx *cctx = store_queue_cctx_take(c->cctx);
    if (store_blob_prepack(cctx, msg, len, &it->parsed, &it->prepacked) == MV_OK &&
        it->prepacked.ready) {
        it->parsed.prepacked = &it->prepacked;
        it->cost += it->prepacked.data != NULL ? it->prepacked.size : 0;
    }
    store_queue_cctx_give(c->cctx, cctx);
}

/* store_queue_ahead_fn: reads, opens and parses it->name (it->rc says how it went). */
static void store_queue_prepare(void *arg, struct store_queue_ahead_item *it)
{
    const struct store_queue_ahead_ctx *c = arg;
    uint8_t *sealed = NULL;
    size_t sealed_len = 0;
    it->rc = store_queue_file_read(c, it->name, &sealed, &sealed_len);
    if (it->rc == MV_OK) {
        it->rc = store_queue_open_sealed(c, sealed, sealed_len, it);
        free(sealed); /* ciphertext: nothing to wipe */
    }
    if (it->rc == MV_OK) {
        store_queue_parse_ahead(c, it);
    }
}

/* store_queue_ahead_fn: wipes and frees what it holds of the message. */
static void store_queue_release(void *arg, struct store_queue_ahead_item *it)
{
    (void)arg;
    if (it->plain != NULL) {
        sodium_memzero(it->plain, it->plain_len);
        free(it->plain);
        it->plain = NULL;
    }
    store_parsed_free(&it->parsed); /* wipes the texts */
    store_blob_prepacked_free(&it->prepacked);
}

/* ---- the drain's thread --------------------------------------------------------------- */

/* Stores the read-ahead's oldest item (read, opened and parsed on its thread) and lets it go.
 * Fails only on store errors. */
static int store_queue_take(struct store_queue_drain *q)
{
    store_queue_take_hook_fn hook = atomic_load(&store_queue_take_hook);
    if (hook != NULL) {
        hook(q->s);
    }
    struct store_queue_ahead *a = q->round->ahead;
    struct store_queue_ahead_item *it = store_queue_ahead_head(a);
    int rc = MV_OK;
    if (it->rc == MV_ENOMEM) {
        rc = store_fail(q->s, MV_ENOMEM, "out of memory reading or opening %s", it->name);
    } else if (it->rc == MV_ELIMIT || it->rc == MV_EIO) {
        q->left++; /* too large for this opener, or unreadable: stays queued */
    } else if (it->rc != MV_ENOTFOUND) { /* gone: another drain took it */
        q->taken++; /* stored, found stored or rejected below: it counts against the bound */
        if (it->rc == STORE_QUEUE_NOT_OURS) {
            store_queue_reject(q, it->name);
        } else {
            unsigned want = store_queue_parse_flags(q);
            int ahead = it->parsed_ok && it->parse_flags == want;
            rc = store_queue_store(q, it->name, it->plain, it->plain_len,
                                   ahead ? &it->parsed : NULL, ahead ? it->sha256 : NULL);
        }
    }
    store_queue_ahead_pop(a);
    return rc;
}

/* Hands the round's next due names (arrival order) to the read-ahead while it has room,
 * starting it on the round's first name. */
static int store_queue_fill(struct store_queue_drain *q)
{
    struct store_queue_round *r = q->round;
    while (r->listed == 0 && (r->ahead == NULL || store_queue_ahead_room(r->ahead))) {
        const char *next = NULL;
        int more = r->scan != NULL ? store_scan_next(r->scan, &next) : 0;
        if (more != 1) {
            r->listed = more < 0 ? -1 : 1;
            break;
        }
        if (r->ahead == NULL) {
            struct store_queue_ahead_ctx *c = &r->ctx;
            snprintf(c->queue_dir, sizeof c->queue_dir, "%s", q->s->queue_dir);
            c->file_size_max = q->file_size_max;
            c->limits = q->s->limits;
            c->parse_flags = store_queue_parse_flags(q);
            c->pk = r->pk;
            c->sk = r->sk;
            c->box = &r->box;
            c->cctx = &r->cctx;
            int rc = store_queue_ahead_start(store_queue_prepare, store_queue_release, c,
                                             atomic_load(&store_queue_ahead_threads),
                                             STORE_QUEUE_AHEAD_ITEMS, STORE_QUEUE_AHEAD_BYTES,
                                             &r->ahead);
            if (rc != MV_OK) {
                return store_fail(q->s, rc, "cannot start reading the queue ahead");
            }
        }
        (void)store_queue_ahead_push(r->ahead, next); /* room checked; the scan checked the name */
    }
    return MV_OK;
}

/* Whether the step has reached its bounds (asked before each file after the first). */
static int store_queue_bound_reached(const struct store_queue_drain *q)
{
    const struct mv_drain_bounds *b = q->bounds;
    if (b == NULL || q->taken == 0) {
        return 0;
    }
    if (b->max != 0 && q->taken >= b->max) {
        return 1;
    }
    if (b->time_ms != 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t ms = (int64_t)(ts.tv_sec - q->start.tv_sec) * 1000 +
                     (ts.tv_nsec - q->start.tv_nsec) / 1000000;
        if (ms >= (int64_t)b->time_ms) {
            return 1;
        }
    }
    return b->yield_fn != NULL && b->yield_fn(b->yield_arg) != 0;
}

/* Starts a round: the cutoff, a fresh listing. MV_OK (r->scan NULL: no queue directory),
 * or an error (q->unreadable set for a directory that cannot be read). */
static int store_queue_round_begin(struct store_queue_drain *q)
{
    struct store_queue_round *r = q->round;
    /* before the listing: a commit by another drain after it changes the value */
    r->data_version_known = store_queue_data_version(q->s, &r->data_version) == MV_OK;
    store_scan_close(&r->scan);
    r->listed = 0;
    r->prev_progress = r->progress;
    r->progress = 0;
    r->later = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    snprintf(r->now, sizeof r->now, "%020llu", (unsigned long long)ns);
    int rc = store_scan_open(q->s->queue_dir, store_queue_accept_due, r, &r->scan);
    if (rc == MV_ENOTFOUND) {
        return MV_OK;
    }
    if (rc != MV_OK) {
        q->unreadable = 1;
        return rc == MV_ENOMEM ? store_fail(q->s, rc, "out of memory") : MV_OK;
    }
    return MV_OK;
}

/* Due queue files in name (arrival) order, within the step's bounds (q->more: the round goes
 * on at the next step). Round after round while rounds do something (struct
 * store_queue_round); a whole-queue drain (an open) is one round. */
static int store_queue_run(struct store_queue_drain *q)
{
    struct store_queue_round *r = q->round;
    /* SETTLE LATER: the files of what the last step stored leave the queue first, so they
     * are in it (and in INBOX) only until the server's next step */
    int rc = store_queue_settle(q);
    if (rc != MV_OK) {
        return rc; /* they stay pending (and queued) */
    }
    for (;;) {
        rc = store_queue_fill(q);
        if (rc != MV_OK) {
            break;
        }
        if (r->ahead == NULL || store_queue_ahead_count(r->ahead) == 0) {
            /* The round is over: another one (bounded steps only) if it did something, or
             * if it skipped newer files after a round that did (not after two idle rounds:
             * a file stamped in the future stays "newer"). */
            q->unreadable |= r->listed < 0;
            if (r->full || r->listed < 0) {
                break;
            }
            /* SETTLE LATER: a step that stored mail returns once it is committed, so the
             * server tells the user's sessions (IDLE) now, not after the sync and the
             * renames of its files (~17 ms for 1,200); the next step does those first, and
             * then walks the queue again */
            if (q->settle_later && q->moved + q->moved_pending > 0) {
                q->more = 1;
                q->settle_next = 1;
                break;
            }
            /* the round's files leave the queue before it is listed again */
            rc = store_queue_flush(q, 1);
            if (rc != MV_OK || !(r->progress || (r->later && r->prev_progress))) {
                break;
            }
            rc = store_queue_round_begin(q);
            if (rc != MV_OK || r->scan == NULL) {
                break;
            }
            continue;
        }
        if (store_queue_bound_reached(q)) {
            q->more = 1; /* the next step starts with the read-ahead's oldest */
            break;
        }
        rc = store_queue_take(q);
        if (rc != MV_OK) {
            break;
        }
    }
    if (rc == MV_OK) {
        rc = store_queue_flush(q, !q->settle_next);
    } else {
        /* the batches committed before the error stay queued: their meta rows make a later
         * round only take them out (after its own sync) */
        store_queue_abandon(q);
        q->pending_count = q->pending_txn = 0;
    }
    return rc;
}

/* Deletes the 'delivered:' rows whose queue files are gone: once a file is unlinked (and
 * the unlink is durable) it cannot come back, so its row has no more work to do. Walks every
 * row, checking its file: rows a crash or a refused rename left behind. */
static int store_queue_forget_walk(struct store_queue_drain *q)
{
    mv_store *s = q->s;
    char cursor[64] = STORE_QUEUE_DELIVERED, name[STORE_QUEUE_NAME_LEN + 1], path[MV_PATH_MAX + 80];
    int in_txn = 0, rc = MV_OK;
    while (rc == MV_OK) {
        sqlite3_stmt *st = store_stmt(s, "SELECT key, value FROM meta WHERE key > ? AND "
                                         "key < 'delivered;' ORDER BY key LIMIT 1");
        if (st == NULL) {
            rc = store_fail_sqlite(s, "reading meta");
            break;
        }
        sqlite3_bind_text(st, 1, cursor, -1, SQLITE_STATIC);
        int step = sqlite3_step(st), oom = 0;
        if (step == SQLITE_ROW) {
            const char *key = mv_db_column_text(st, 0, &oom);
            const char *value = mv_db_column_text(st, 1, &oom);
            snprintf(cursor, sizeof cursor, "%s", key != NULL ? key : "");
            snprintf(name, sizeof name, "%s", value != NULL ? value : "");
        }
        sqlite3_reset(st);
        if (oom) {
            rc = store_fail(s, MV_ENOMEM, "out of memory reading meta");
            break;
        }
        if (step != SQLITE_ROW) {
            rc = step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "reading meta");
            break;
        }
        store_queue_path(q, name, path, sizeof path);
        if (!store_queue_entry_name_ok(name) || access(path, F_OK) == 0 || errno != ENOENT) {
            continue; /* still there (or unknown): keep the row */
        }
        if (!in_txn && (rc = store_begin(s)) == MV_OK) {
            in_txn = 1;
        }
        st = rc == MV_OK ? store_stmt(s, "DELETE FROM meta WHERE key = ?") : NULL;
        if (st != NULL) {
            sqlite3_bind_text(st, 1, cursor, -1, SQLITE_STATIC);
            rc = sqlite3_step(st) == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "writing meta");
            sqlite3_reset(st);
        } else if (rc == MV_OK) {
            rc = store_fail_sqlite(s, "writing meta");
        }
    }
    if (in_txn) {
        if (rc == MV_OK) {
            rc = store_commit(s);
        } else {
            store_rollback(s);
        }
    }
    return rc;
}

/* Deletes the rows of the files this step took out of the queue (their keys noted when they
 * went: no walk, no check of each file), and on the drain's first step walks every row. Only
 * after the directory's fsync made their going durable. */
static int store_queue_forget(struct store_queue_drain *q)
{
    mv_store *s = q->s;
    int rc = MV_OK;
    if (q->gone_count > 0 && (rc = store_begin(s)) == MV_OK) {
        sqlite3_stmt *st = store_stmt(s, "DELETE FROM meta WHERE key = ?");
        rc = st != NULL ? MV_OK : store_fail_sqlite(s, "writing meta");
        for (size_t i = 0; rc == MV_OK && i < q->gone_count; i++) {
            sqlite3_bind_text(st, 1, q->gone_key[i], -1, SQLITE_STATIC);
            rc = sqlite3_step(st) == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "writing meta");
            sqlite3_reset(st);
        }
        if (rc == MV_OK) {
            rc = store_commit(s);
        } else {
            store_rollback(s);
        }
    }
    q->gone_count = 0;
    return rc == MV_OK && q->scan_rows ? store_queue_forget_walk(q) : rc;
}

/* Removes "tmp-" files older than a day: deliveries that died before their rename were never
 * acknowledged, so the sender still has them. */
static void store_queue_sweep(const char *queue_dir)
{
    DIR *d = opendir(queue_dir);
    if (d == NULL) {
        return;
    }
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (strncmp(e->d_name, STORE_QUEUE_TMP_PREFIX, sizeof STORE_QUEUE_TMP_PREFIX - 1) == 0 &&
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            st.st_mtime < now - STORE_QUEUE_TMP_AGE_MAX_S) {
            (void)unlinkat(dirfd(d), e->d_name, 0);
        }
    }
    closedir(d);
}

/* Leaves a note in the store's message when something needs the user's attention. */
static void store_queue_note(const struct store_queue_drain *q, int pub_rewritten)
{
    char note[sizeof q->s->errmsg] = "";
    size_t n = 0;
    if (q->rejected > 0) {
        n += (size_t)snprintf(note + n, sizeof note - n,
                              "queue: %u deliveries moved to %.200s/rejected (not sealed to this "
                              "store's key, or refused by a limit). ",
                              q->rejected, q->s->queue_dir);
    }
    if ((q->left > 0 || q->unreadable) && n < sizeof note) {
        n += (size_t)snprintf(note + n, sizeof note - n,
                              "queue: %u deliveries left in %.200s (over message_size_max, or "
                              "unreadable)%s. ",
                              q->left, q->s->queue_dir,
                              q->unreadable ? "; the directory could not be read" : "");
    }
    if (pub_rewritten && n < sizeof note) {
        snprintf(note + n, sizeof note - n,
                 "the delivery key %.200s was missing or wrong and was "
                 "written again.",
                 q->s->pub_path);
    }
    if (note[0] != '\0') {
        store_fail(q->s, MV_OK, "%s", note);
    }
}

/* Keys, .pub check (once per drain), INBOX, the size bound: what a step needs before the
 * first file. */
static int store_queue_drain_prepare(struct store_queue_drain *q, int *pub_rewritten)
{
    mv_store *s = q->s;
    struct store_queue_round *r = q->round;
    int rc = MV_OK;
    if (!r->keys) {
        rc = store_queue_keys_ensure(s, r->pk, r->sk);
        if (rc == MV_OK) {
            rc = store_queue_pub_sync(s, r->pk, pub_rewritten);
        }
        r->keys = rc == MV_OK;
    }
    q->pk = r->pk;
    q->sk = r->sk;
    if (rc == MV_OK) {
        rc = store_mailbox_id(s, "INBOX", &q->inbox_id);
    }
    uint64_t framing = STORE_QUEUE_HEADER_SIZE + STORE_BOX_OVERHEAD_MAX;
    q->file_size_max = s->limits.message_size_max > UINT64_MAX - framing
                           ? UINT64_MAX
                           : s->limits.message_size_max + framing;
    if (rc == MV_OK && r->scan == NULL && r->now[0] == '\0') {
        r->progress = 1; /* the drain's first round: newer files get one more round */
        rc = store_queue_round_begin(q);
    }
    return rc;
}

void store_queue_ahead_stats_of(mv_store *s, struct store_queue_ahead_stats *out)
{
    store_queue_ahead_stats_get(s->queue_round != NULL ? s->queue_round->ahead : NULL, out);
}

void store_queue_round_free(mv_store *s)
{
    struct store_queue_round *r = s->queue_round;
    if (r != NULL) {
        store_queue_ahead_stop(&r->ahead); /* its threads read r->ctx and the keys */
        store_scan_close(&r->scan);
        store_box_cache_free(&r->box);
        store_queue_cctx_pool_free(&r->cctx);
        /* files still pending stay queued: their meta rows make a later drain only take
         * them out */
        free(r->pending);
        free(r->pending_key);
        sodium_memzero(r, sizeof *r);
        free(r);
        s->queue_round = NULL;
    }
}

void store_queue_tidy_close(mv_store *s)
{
    if (s->queue_tidy_dir != NULL) {
        closedir(s->queue_tidy_dir);
        s->queue_tidy_dir = NULL;
    }
}

/* Unlinks up to max files (0: all) of done/; *more: 1 if it stopped at max or must look
 * again. Once done/ is empty it is removed and the hint cleared. Not while a stepped drain is
 * under way (its steps move files into done/ meanwhile, and the unlinks would only slow them
 * down): *more 0.
 * One pass of the directory spans the bounded calls: a call goes on where the last one
 * stopped. Reading it from its start in every call made a done/ that interrupted runs had
 * grown large (11,296 files; ext4 keeps a directory's blocks after its files go) cost 2.1 s
 * of calls of 8 files each, each call reading past the emptied blocks again. A file
 * moved in after the pass began may not be in it (readdir(3)), so a pass that saw a move
 * happen ends with *more and the next call begins a new one. */
static int store_queue_tidy_pass(mv_store *s, uint32_t max, int *more)
{
    *more = 0;
    if (!s->queue_done_hint || s->queue_round != NULL) {
        return MV_OK;
    }
    char dir[MV_PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/" STORE_QUEUE_DONE_DIR, s->queue_dir);
    if (s->queue_tidy_dir == NULL) {
        s->queue_tidy_dir = opendir(dir);
        if (s->queue_tidy_dir == NULL) {
            s->queue_done_hint = errno == ENOENT ? 0 : s->queue_done_hint;
            return errno == ENOENT
                       ? MV_OK
                       : store_fail(s, MV_EIO, "cannot read %s: %s", dir, strerror(errno));
        }
        s->queue_tidy_moves = s->queue_done_moves;
        s->queue_tidy_others = 0;
        s->queue_tidy_opens++;
    }
    DIR *d = s->queue_tidy_dir;
    uint32_t removed = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        if (!store_queue_entry_name_ok(e->d_name)) {
            s->queue_tidy_others = 1; /* not ours: left alone (and done/ with it) */
            continue;
        }
        if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT) {
            int rc = store_fail(s, store_queue_errno_code(errno), "cannot remove %s/%s: %s", dir,
                                e->d_name, strerror(errno));
            store_queue_tidy_close(s); /* the next call reads it afresh */
            return rc;
        }
        if (max != 0 && ++removed == max) {
            *more = 1; /* the pass stays open for the next call */
            return MV_OK;
        }
        errno = 0;
    }
    int others = s->queue_tidy_others, complete = s->queue_tidy_moves == s->queue_done_moves;
    store_queue_tidy_close(s);
    if (!complete) {
        *more = 1; /* files moved in during the pass: one more, from the start */
        return MV_OK;
    }
    if (!others) {
        (void)rmdir(dir); /* fails harmlessly if another process's drain put a file there */
    }
    s->queue_done_hint = 0;
    return MV_OK;
}

static int store_queue_tidy(mv_store *s, uint32_t max, int *more)
{
    int rc = store_queue_tidy_pass(s, max, more);
    if (rc == MV_OK && *more && max == 0) {
        /* all asked for: the pass went on from an earlier call's, before the latest moves;
         * a new one begun now sees every file (nothing moves in during a call) */
        rc = store_queue_tidy_pass(s, max, more);
    }
    return rc;
}

int mv_queue_tidy(mv_store *store, uint32_t max, int *more_out)
{
    int more = 0, rc;
    if (store == NULL) {
        rc = MV_EINVAL;
    } else if (store->readonly) {
        rc = MV_OK; /* a read-only handle drains nothing, so it leaves nothing to tidy */
    } else {
        rc = store_queue_tidy(store, max, &more);
    }
    if (more_out != NULL) {
        *more_out = more;
    }
    return rc;
}

/* One drain call: bounds NULL drains the whole queue (what was due when it started). */
static int store_queue_drain_bounded(
    mv_store *s, const struct mv_drain_bounds *bounds, int settle_later, uint32_t *moved, int *more)
{
    struct store_queue_drain q;
    memset(&q, 0, sizeof q);
    q.s = s;
    q.bounds = bounds;
    q.settle_later = bounds != NULL && settle_later;
    clock_gettime(CLOCK_MONOTONIC, &q.start);
    *moved = 0;
    *more = 0;
    int pub_rewritten = 0;
    int rc = store_queue_sodium();
    if (rc != MV_OK) {
        return store_fail(s, rc, "libsodium failed to initialise");
    }
    if (bounds == NULL) {
        store_queue_round_free(s); /* a whole drain walks the queue afresh */
    }
    q.scan_rows = s->queue_round == NULL; /* the drain's first step: rows a crash left */
    if (s->queue_round == NULL) {
        struct store_queue_round *r = calloc(1, sizeof *r);
        if (r != NULL) {
            /* Each drained entry's commit must be on disk before its queue file is deleted:
             * deliveries are committed STORE_QUEUE_BATCH at a time and their files go after
             * one WAL sync (store_queue_settle), once per step. */
            r->pending = malloc(STORE_QUEUE_SETTLE_MAX * sizeof *r->pending);
            r->pending_key = malloc(STORE_QUEUE_SETTLE_MAX * sizeof *r->pending_key);
        }
        if (r == NULL || r->pending == NULL || r->pending_key == NULL ||
            store_box_cache_init(&r->box) != MV_OK) {
            if (r != NULL) {
                free(r->pending);
                free(r->pending_key);
            }
            free(r);
            return store_fail(s, MV_ENOMEM, "out of memory draining the queue");
        }
        if (pthread_mutex_init(&r->cctx.mu, NULL) != 0) {
            store_box_cache_free(&r->box);
            free(r->pending);
            free(r->pending_key);
            free(r);
            return store_fail(s, MV_ENOMEM, "out of memory draining the queue");
        }
        s->queue_round = r;
    }
    q.round = s->queue_round;
    q.round->full = bounds == NULL;
    q.pending = q.round->pending;
    q.pending_key = q.round->pending_key;
    q.pending_count = q.pending_txn = q.round->pending_count; /* committed by the last step */
    rc = store_queue_drain_prepare(&q, &pub_rewritten);
    if (rc == MV_OK) {
        rc = store_queue_run(&q);
    }
    q.round->pending_count = q.pending_txn; /* no transaction is open here */
    /* The unlinks must be durable before their meta rows go (see store_queue_forget). */
    if (rc == MV_OK && q.dirty && store_fsync_dir(s->queue_dir) != MV_OK) {
        rc = store_fail(s, MV_EIO, "cannot fsync %s: %s", s->queue_dir, strerror(errno));
    }
    if (rc == MV_OK) {
        rc = store_queue_forget(&q);
    }
    if (rc == MV_OK) {
        if (!q.more) { /* a directory walk: once per drain, not per step */
            store_queue_sweep(s->queue_dir);
        }
        store_queue_note(&q, pub_rewritten);
    }
    *moved = q.moved;
    *more = rc == MV_OK && q.more;
    free(q.gone_key);
    if (bounds == NULL) { /* an open: the files of what it moved go now, as they always did */
        int tidy_more = 0;
        store_queue_round_free(s);
        (void)store_queue_tidy(s, 0, &tidy_more);
    }
    if (!*more) {
        store_queue_round_free(s); /* done (or failed): the next drain starts afresh */
    }
    return rc;
}

int store_queue_drain(mv_store *s, uint32_t max, uint32_t *moved, int *more)
{
    struct mv_drain_bounds b = {.max = max};
    return store_queue_drain_bounded(s, max == 0 ? NULL : &b, 0, moved, more);
}

static int store_queue_drain_api(mv_store *store,
                                 const struct mv_drain_bounds *bounds,
                                 int settle_later,
                                 uint32_t *moved_out,
                                 int *more_out)
{
    uint32_t moved = 0;
    int more = 0, rc;
    if (store == NULL) {
        rc = MV_EINVAL;
    } else if (store->readonly) {
        rc = store_fail(store, MV_EINVAL, "the store is open read-only: the queue is not drained");
    } else {
        (void)store_fail(store, MV_OK, "%s", ""); /* a note is about this drain only */
        rc = store_queue_drain_bounded(store, bounds, settle_later, &moved, &more);
    }
    if (moved_out != NULL) {
        *moved_out = moved;
    }
    if (more_out != NULL) {
        *more_out = more;
    }
    return rc;
}

int mv_queue_drain(mv_store *store, uint32_t max, uint32_t *moved_out, int *more_out)
{
    struct mv_drain_bounds b = {.max = max};
    return store_queue_drain_api(store, max == 0 ? NULL : &b, 0, moved_out, more_out);
}

int mv_queue_drain_step(mv_store *store,
                        const struct mv_drain_bounds *bounds,
                        uint32_t *moved_out,
                        int *more_out)
{
    const struct mv_drain_bounds *b = bounds;
    if (b == NULL || (b->max == 0 && b->time_ms == 0 && b->yield_fn == NULL)) {
        if (moved_out != NULL) {
            *moved_out = 0;
        }
        if (more_out != NULL) {
            *more_out = 0;
        }
        return MV_EINVAL;
    }
    return store_queue_drain_api(store, b, 1, moved_out, more_out);
}
