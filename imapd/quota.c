/*
 * quota.c -- per-user quota (RFC 9208) for APPEND, COPY, LMTP and GETQUOTA: the usage, and
 * the checks of it against the limits. Two resources, STORAGE (the user's logical size in
 * KiB: the sum of the sizes of the messages in every mailbox, a copy counting twice, as
 * mv_store_stats() counts logical_bytes) and MESSAGE (messages over all mailboxes). The
 * limits come from quota_limits_for() (quota_file.c: the quota_file entry, else the
 * defaults quota_kib and quota_messages; 0 is unlimited).
 *
 * USAGE
 *   quota_exceeded(open_store, cfg, address, add_bytes, add_messages)   the store is open
 *   quota_used_open(open_store, cfg, out)   its usage, with what its queue still holds
 *   quota_sealed_exceeded(cfg, address, add_bytes, why, size)      it is not (LMTP)
 *   quota_note(address, store)          the worker opened or is closing the store
 *   quota_note_step(address, store, before, moved)  after a drain step (before: the usage
 *                                       before it; moved: the messages it appended)
 *   quota_used(store, out)              the usage of an open store (GETQUOTA)
 *   quota_over_text(over)               the resources named in a refusal
 *
 * IMPLEMENTATION NOTES
 *   - The usage of an open store is summed over the mailbox rows (mv_mailbox_list_*:
 *     messages and size_bytes are columns the store keeps up to date), so it costs one row
 *     per mailbox, never a walk of the messages. While the worker still drains the store's
 *     sealed queue (worker.c THE DRAIN), what the queue holds counts too (mv_queue_usage,
 *     less the sealing), for GETQUOTA and for APPEND/COPY: mail sealed before the login is
 *     the user's mail even before it is moved into INBOX.
 *   - A sealed delivery (store not open, no password) cannot read those encrypted counters.
 *     It uses the usage last seen while the store was open here (quota_note: after each
 *     open, which has drained the queue, and before each close, so every append, copy,
 *     expunge and delete made while it was open is in it), plus what the store's sealed
 *     queue holds (mv_queue_usage: the bytes of its files, one message each; the library
 *     knows where the queue is). With nothing seen since the start, the storage estimate is
 *     the store's file sizes (db + wal, mv_store_file_inspect) plus the queue, and the
 *     message count is not checked. A queue that cannot be counted (unreadable, or over
 *     QUOTA_QUEUE_SCAN_MAX entries) is an error (-1: the LMTP reply is a temporary
 *     failure), not a guess.
 *   - The queue's count is kept with the seen usage, so a sealed delivery costs O(1), not a
 *     read of the whole queue directory (1,200 deliveries read ~720,000 entries): counted
 *     from the directory when not known or older than QUOTA_QUEUE_FRESH_MS, then each
 *     sealed delivery of this server adds its file (quota_sealed_added), a drain step takes
 *     out what it moved into the store (quota_note_step: the store's usage after the step
 *     less before it, plus the sealing, when the store grew by the step's messages alone;
 *     else another process wrote it meanwhile and the count is dropped), and an open
 *     (quota_note) forgets the count. APPEND and COPY while a drain runs (quota_used_open)
 *     use the same count, so they are O(1) too (they read the whole directory each
 *     before). What another
 *     process changes in the queue (`mailvault deliver`, a CLI open that drains) is seen at
 *     the next count, within QUOTA_QUEUE_FRESH_MS; a delivery, APPEND or COPY the kept
 *     count would refuse is counted again first, so a stale count never refuses mail.
 *   - quota_seen_lock guards the seen-usage cache only; the usage is read and the queue
 *     counted outside it. It is never held with quota_file.c's lock: the limits are looked
 *     up (quota_limits_for, which takes and drops that one) before the cache is touched.
 *
 * LIMITATIONS
 *   - The file-size estimate is rough both ways: pages, indexes and free space make it larger
 *     than the logical size, compression smaller.
 *   - Changes made by another process (the mailvault CLI opening the store drains the queue
 *     and may expunge) are not seen by the cache until the server opens the store again.
 *   - A drain step that ended a round of the queue leaves the files of what it moved in to
 *     the next step (docs/DELIVERY.md: the user's sessions are told first; the worker runs
 *     that step next unless a job waits): a count of the directory in between counts those
 *     deliveries twice (in INBOX and still queued), too high until the next count.
 *   - The queue's bytes include 104 bytes of sealing per message (docs/DELIVERY.md; 76 in
 *     files sealed before burst keys, so those count 28 bytes short).
 *   - The cache keeps QUOTA_SEEN_MAX addresses; past that a new one takes the place of the
 *     oldest in its hash bucket, whose user falls back to the file-size estimate.
 */
#include "quota.h"
#include "config.h"
#include "loop.h"
#include "mailvault.h"
#include "worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUOTA_SEEN_MAX       100000 /* addresses whose last usage is kept */
#define QUOTA_SEEN_BUCKETS   8192
#define QUOTA_QUEUE_SCAN_MAX MV_QUEUE_SCAN_MAX /* directory entries one sealed check reads */
#define QUOTA_QUEUE_FRESH_MS 10000 /* a kept queue count is used this long, then counted again */
/* The sealing around each queued message (docs/DELIVERY.md): what a queue file holds beyond
 * the message it delivers. */
#define QUOTA_SEAL_BYTES 104

struct quota_seen {
    struct quota_seen *next;
    struct quota_usage usage; /* the open store's, last noted (usage_known) */
    struct quota_usage queue; /* what the sealed queue holds (queue_at_ms != 0) */
    int usage_known;
    int64_t at_ms;       /* last noted: a full bucket gives up its oldest */
    int64_t queue_at_ms; /* when queue was counted from the directory; 0: not known */
    char address[];
};

static pthread_mutex_t quota_seen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct quota_seen *quota_seen[QUOTA_SEEN_BUCKETS];
static size_t quota_seen_count;
static uint64_t quota_queue_counts; /* reads of a queue directory (tests) */
static int64_t quota_queue_fresh_ms = QUOTA_QUEUE_FRESH_MS;

void quota_queue_fresh_set(int64_t ms)
{
    pthread_mutex_lock(&quota_seen_lock);
    quota_queue_fresh_ms = ms;
    pthread_mutex_unlock(&quota_seen_lock);
}

uint64_t quota_queue_count_reads(void)
{
    pthread_mutex_lock(&quota_seen_lock);
    uint64_t n = quota_queue_counts;
    pthread_mutex_unlock(&quota_seen_lock);
    return n;
}

int quota_used(mv_store *store, struct quota_usage *out)
{
    mv_mailbox_iter *it = NULL;
    struct mv_mailbox_info info;
    struct quota_usage total = {0, 0};
    /* Counts and sizes only: they are in the mailbox rows, no walk over the messages. */
    int rc = mv_mailbox_list_begin_fields(store, 0, &it);
    if (rc != MV_OK) {
        return rc;
    }
    while ((rc = mv_mailbox_list_next(it, &info)) == 1) {
        total.bytes += info.size_bytes;
        total.messages += info.messages;
    }
    mv_mailbox_list_end(&it);
    if (rc < 0) {
        return rc;
    }
    *out = total;
    return MV_OK;
}

/* Whether used + add goes over limit (0: unlimited), without overflow. */
static int quota_over(uint64_t used, uint64_t add, uint64_t limit)
{
    return limit != 0 && (used > limit || add > limit - used);
}

static int quota_check(const struct quota_limits *limits,
                       const struct quota_usage *used,
                       uint64_t add_bytes,
                       uint64_t add_messages,
                       int count_messages)
{
    int over = 0;
    if (quota_over(used->bytes, add_bytes, limits->storage_kib * 1024u)) {
        over |= QUOTA_OVER_STORAGE;
    }
    if (count_messages && quota_over(used->messages, add_messages, limits->messages)) {
        over |= QUOTA_OVER_MESSAGE;
    }
    return over;
}

const char *quota_over_text(int over)
{
    return over == (QUOTA_OVER_STORAGE | QUOTA_OVER_MESSAGE) ? "storage and message"
           : over == QUOTA_OVER_MESSAGE                      ? "message"
                                                             : "storage";
}

static size_t quota_seen_bucket(const char *address)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)address; *p != '\0'; p++) {
        h = (h ^ *p) * 16777619u;
    }
    return h % QUOTA_SEEN_BUCKETS;
}

/* The cache entry of address (quota_seen_lock held), or NULL. */
static struct quota_seen *quota_seen_find(const char *address)
{
    for (struct quota_seen *e = quota_seen[quota_seen_bucket(address)]; e != NULL; e = e->next) {
        if (strcmp(e->address, address) == 0) {
            return e;
        }
    }
    return NULL;
}

/* The cache entry of address, made if needed (quota_seen_lock held), or NULL (no room). */
static struct quota_seen *quota_seen_get(const char *address, int64_t now)
{
    struct quota_seen *e = quota_seen_find(address);
    if (e == NULL) {
        size_t b = quota_seen_bucket(address);
        if (quota_seen_count >= QUOTA_SEEN_MAX) {
            /* Full: the oldest entry of this bucket makes room (its user falls back to the
             * file-size estimate); an empty bucket means no room. */
            struct quota_seen **oldest = NULL;
            for (struct quota_seen **p = &quota_seen[b]; *p != NULL; p = &(*p)->next) {
                if (oldest == NULL || (*p)->at_ms < (*oldest)->at_ms) {
                    oldest = p;
                }
            }
            if (oldest != NULL) {
                struct quota_seen *gone = *oldest;
                *oldest = gone->next;
                free(gone);
                quota_seen_count--;
            }
        }
        size_t len = strlen(address) + 1;
        e = quota_seen_count < QUOTA_SEEN_MAX ? calloc(1, sizeof *e + len) : NULL;
        if (e != NULL) {
            memcpy(e->address, address, len);
            e->next = quota_seen[b];
            quota_seen[b] = e;
            quota_seen_count++;
            e->at_ms = now;
        }
    }
    return e;
}

/* quota_note() and quota_note_step(): before NULL forgets the kept queue count. */
static void quota_note_with(const char *address,
                            mv_store *store,
                            const struct quota_usage *before,
                            uint32_t step_moved)
{
    struct quota_usage used;
    int ok = quota_used(store, &used) == MV_OK; /* else the previous value, if any, stays */
    int64_t now = loop_now_ms();
    pthread_mutex_lock(&quota_seen_lock);
    struct quota_seen *e = quota_seen_get(address, now);
    if (e != NULL) {
        if (ok) {
            e->usage = used;
            e->usage_known = 1;
            e->at_ms = now;
        }
        if (ok && before != NULL && e->queue_at_ms != 0 &&
            used.messages - before->messages == step_moved && used.bytes >= before->bytes) {
            /* What the step moved in left the queue, with its sealing: the store keeps each
             * delivery's bytes as they were sealed (LMTP's trace fields and `mailvault
             * deliver`'s CRLF are added before sealing), so its growth is exactly what left.
             * Files it set aside (rejected/) or found stored already stay in the count until
             * the next count: too high, and a check the kept count would refuse counts again
             * first. A growth other than the step's own messages is another process writing
             * the store meanwhile (an import, a CLI drain): its mail never was in the kept
             * count, so it is counted again rather than taken out (too low otherwise). */
            uint64_t moved = used.messages - before->messages;
            uint64_t moved_bytes = used.bytes - before->bytes + moved * QUOTA_SEAL_BYTES;
            e->queue.messages = e->queue.messages > moved ? e->queue.messages - moved : 0;
            e->queue.bytes = e->queue.bytes > moved_bytes ? e->queue.bytes - moved_bytes : 0;
        } else {
            e->queue_at_ms = 0; /* an open took files out of the queue: count it again */
        }
    }
    pthread_mutex_unlock(&quota_seen_lock);
}

void quota_note(const char *address, mv_store *store)
{
    quota_note_with(address, store, NULL, 0);
}

void quota_note_step(const char *address,
                     mv_store *store,
                     const struct quota_usage *before,
                     uint32_t moved)
{
    quota_note_with(address, store, before, moved);
}

/* What the queue of address holds: the kept count if fresh and !recount, else counted from
 * the directory and kept. MV_OK or mv_queue_usage()'s code. */
static int quota_queue(const struct config *cfg,
                       const char *address,
                       int recount,
                       struct quota_usage *queued,
                       int *was_kept)
{
    int64_t now = loop_now_ms();
    *was_kept = 0;
    pthread_mutex_lock(&quota_seen_lock);
    const struct quota_seen *e = quota_seen_find(address);
    if (!recount && e != NULL && e->queue_at_ms != 0 &&
        now - e->queue_at_ms < quota_queue_fresh_ms) {
        *queued = e->queue;
        *was_kept = 1;
    }
    pthread_mutex_unlock(&quota_seen_lock);
    if (*was_kept) {
        return MV_OK;
    }
    struct mv_store_options opts = config_store_options(cfg);
    int rc =
        mv_queue_usage(address, &opts, QUOTA_QUEUE_SCAN_MAX, &queued->bytes, &queued->messages);
    pthread_mutex_lock(&quota_seen_lock);
    quota_queue_counts++;
    struct quota_seen *k = rc == MV_OK ? quota_seen_get(address, now) : NULL;
    if (k != NULL) {
        k->queue = *queued;
        k->queue_at_ms = now;
    }
    pthread_mutex_unlock(&quota_seen_lock);
    return rc;
}

/* quota_used_open(), with recount as quota_queue()'s and *was_kept set when the queue's
 * part came from the kept count (0 when the store is not draining). */
static int quota_used_open_counted(const struct open_store *os,
                                   const struct config *cfg,
                                   int recount,
                                   struct quota_usage *out,
                                   int *was_kept)
{
    *was_kept = 0;
    int rc = quota_used(os->store, out);
    if (rc != MV_OK || !os->drain_more) {
        return rc;
    }
    /* Still draining: the deliveries not yet moved in are the user's mail too. The worker
     * thread runs both this and the drain steps, so no step runs between the two reads. The
     * queue's part is the count kept for sealed deliveries (O(1), not a read of the queue
     * directory per APPEND or COPY): each drain step takes what it moved in out of it
     * (quota_note_step). */
    struct quota_usage queued;
    rc = quota_queue(cfg, os->address, recount, &queued, was_kept);
    if (rc != MV_OK) {
        return rc;
    }
    out->bytes += queued.bytes > queued.messages * QUOTA_SEAL_BYTES
                      ? queued.bytes - queued.messages * QUOTA_SEAL_BYTES
                      : 0;
    out->messages += queued.messages;
    return MV_OK;
}

int quota_used_open(const struct open_store *os, const struct config *cfg, struct quota_usage *out)
{
    int kept = 0;
    return quota_used_open_counted(os, cfg, 0, out, &kept);
}

int quota_exceeded(const struct open_store *os,
                   const struct config *cfg,
                   const char *address,
                   uint64_t add_bytes,
                   uint64_t add_messages)
{
    struct quota_limits limits = quota_limits_for(cfg, address);
    if (limits.storage_kib == 0 && limits.messages == 0) {
        return 0;
    }
    int over = 0, kept = 1;
    for (int recount = 0; kept && recount < 2; recount++) { /* kept and over: count again */
        struct quota_usage used;
        if (quota_used_open_counted(os, cfg, recount, &used, &kept) != MV_OK) {
            return 0; /* the append itself will report a broken store */
        }
        over = quota_check(&limits, &used, add_bytes, add_messages, 1);
        kept = kept && over != 0;
    }
    return over;
}

void quota_sealed_added(const char *address, uint64_t bytes)
{
    pthread_mutex_lock(&quota_seen_lock);
    struct quota_seen *e = quota_seen_find(address);
    if (e != NULL && e->queue_at_ms != 0) {
        e->queue.bytes += bytes + QUOTA_SEAL_BYTES;
        e->queue.messages++;
    }
    pthread_mutex_unlock(&quota_seen_lock);
}

int quota_sealed_exceeded(
    const struct config *cfg, const char *address, uint64_t add_bytes, char *why, size_t why_size)
{
    struct quota_limits limits = quota_limits_for(cfg, address);
    if (limits.storage_kib == 0 && limits.messages == 0) {
        return 0;
    }
    struct mv_store_options opts = config_store_options(cfg);
    struct mv_store_file file;
    /* The store may be open on another thread: the library keeps that safe (an open store's
     * header comes from its registry, and the file read of a closed one excludes a
     * concurrent open), so no lock of that connection is dropped here. */
    if (mv_store_file_inspect(address, &opts, &file) != MV_OK) {
        return 0; /* the delivery itself reports a missing or broken store */
    }
    struct quota_usage queued, used;
    int over = 0, known = 0, kept = 1;
    for (int recount = 0; kept && recount < 2; recount++) { /* kept and over: count again */
        int rc = quota_queue(cfg, address, recount, &queued, &kept);
        if (rc == MV_ENOTFOUND || rc == MV_EINVAL) {
            return 0; /* gone meanwhile: the delivery itself reports it */
        }
        if (rc != MV_OK) {
            /* a temporary failure rather than a queue that grows unmeasured */
            snprintf(why, why_size, "the queue of %s cannot be counted: %s", address,
                     rc == MV_ELIMIT ? "too many entries" : mv_strerror(rc));
            return -1;
        }
        pthread_mutex_lock(&quota_seen_lock);
        const struct quota_seen *seen = quota_seen_find(address);
        known = seen != NULL && seen->usage_known;
        if (known) {
            used = seen->usage;
        }
        pthread_mutex_unlock(&quota_seen_lock);
        if (!known) {
            used.bytes = file.file_bytes + file.wal_bytes;
            used.messages = 0;
        }
        used.bytes += queued.bytes;
        used.messages += queued.messages;
        over = quota_check(&limits, &used, add_bytes, 1, known);
        kept = kept && over != 0;
    }
    snprintf(why, why_size, "%s %llu bytes + %llu queued, %s", known ? "last seen" : "store files",
             (unsigned long long)(used.bytes - queued.bytes), (unsigned long long)queued.bytes,
             known ? "messages checked" : "messages not checked");
    return over;
}
