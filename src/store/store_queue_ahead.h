/*
 * store_queue_ahead.h -- the sealed queue's read-ahead: threads of their own read, open
 * (store_queue_box.h), parse and compress the next queue files of a drain while the drain's
 * own thread stores the one before (store_queue.c). Opening and parsing were ~63% of a drained
 * delivery's CPU (issue 13), and the drain runs on mailvaultd's writer thread, so on two
 * cores the second one did nothing for it.
 *
 * USAGE
 *   a = store_queue_ahead_start(prepare, release, arg, threads, items_max, bytes_max);
 *   while (store_queue_ahead_room(a)) store_queue_ahead_push(a, name);  (in queue order)
 *   struct store_queue_ahead_item *it = store_queue_ahead_head(a);   (waits until prepared)
 *   ... store it ... store_queue_ahead_pop(a);                       (release()s it)
 *   store_queue_ahead_stop(&a);                      (joins the threads, releases the rest)
 *
 * IMPLEMENTATION NOTES
 *   - Bounded: at most items_max names are in the pipeline (pushed and not yet popped), and
 *     a thread (or a helping caller) takes the next one only while the prepared items not
 *     yet popped hold less than bytes_max bytes (item->cost), except the head (so one
 *     message larger than bytes_max still goes through): they hold at most bytes_max plus
 *     one item per preparer (the threads and the caller). The queue's limits are
 *     STORE_QUEUE_AHEAD_ITEMS and STORE_QUEUE_AHEAD_BYTES below.
 *   - Items come out in the order they were pushed, however many threads prepare them.
 *   - HELPING. A caller of store_queue_ahead_head() whose head is not ready yet prepares the
 *     next item no thread has taken (within the same bounds) instead of waiting, and looks
 *     at the head again after it. With the store now cheaper than the opening and parsing
 *     (issue 13: at ~100,000 messages the drain's thread was busy ~65% of a drain, the
 *     read-ahead's ~90%), the drain's thread did nothing a third of the time; a second
 *     read-ahead thread instead competed with it for the two cores and was slower (0.94x).
 *     With no thread at all (none could start) the caller prepares every item itself.
 *   - prepare() runs with no lock held, on a pipeline thread or on the caller's (HELPING),
 *     and must touch nothing but the item and what arg points to (never the store handle);
 *     release() runs on whichever thread pops or stops, and must wipe what the item holds of
 *     a message.
 *   - The threads block every signal (a server's signals go to its own threads).
 *   - The pipeline only reads: every decision about a file (store, reject, leave, unlink)
 *     stays with the thread that pops it, so the drain's durability rules do not change.
 */
#ifndef MV_STORE_QUEUE_AHEAD_H
#define MV_STORE_QUEUE_AHEAD_H

#include "store/store_blob.h"
#include "store/store_parse.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_QUEUE_AHEAD_NAME_SIZE   64 /* a queue file's name (61 characters) and its NUL */
#define STORE_QUEUE_AHEAD_THREADS_MAX 4

/* The drain's read-ahead (store_queue.c): names handed out by the scan and not yet taken, at
 * most STORE_QUEUE_AHEAD_ITEMS of them, read, opened and parsed ahead by
 * STORE_QUEUE_AHEAD_THREADS threads while their prepared ones hold less than
 * STORE_QUEUE_AHEAD_BYTES of plaintext. One thread: the drain's thread stores (~40% of a
 * delivery's CPU) while it opens and parses the next (~60%), so two cores keep pace. A
 * server keeps one per store whose drain is under way (the round holds it between steps):
 * a thread and up to the byte bound (plus two deliveries: the thread's and the helping
 * drain's) each, let go when the drain ends. */
#define STORE_QUEUE_AHEAD_THREADS 1
#define STORE_QUEUE_AHEAD_ITEMS   32
#define STORE_QUEUE_AHEAD_BYTES   (4u << 20)

struct store_queue_ahead_item {
    char name[STORE_QUEUE_AHEAD_NAME_SIZE];
    /* Set by prepare(): */
    int rc;         /* MV_OK: plain holds the opened file; else what the drain does */
    uint8_t *plain; /* the opened delivery (framing and message), owned by the item */
    size_t plain_len;
    int parsed_ok;        /* parsed and sha256 are the message's (else the drain parses) */
    unsigned parse_flags; /* the store_parse_flags() flags parsed was made with */
    struct store_parsed parsed;
    struct store_blob_prepacked prepacked; /* compressed ahead; parsed.prepacked points here */
    uint8_t sha256[32];
    size_t cost; /* bytes it holds (plain, the parse's texts, prepacked), against bytes_max */
};

typedef void (*store_queue_ahead_fn)(void *arg, struct store_queue_ahead_item *item);

struct store_queue_ahead;

/* Starts up to threads (0 .. STORE_QUEUE_AHEAD_THREADS_MAX) threads; items_max >= 1. With
 * no thread (0 asked, or none could be started) store_queue_ahead_head() prepares each item
 * on the caller's thread. MV_OK, MV_EINVAL or MV_ENOMEM. */
int store_queue_ahead_start(store_queue_ahead_fn prepare,
                            store_queue_ahead_fn release,
                            void *arg,
                            unsigned threads,
                            size_t items_max,
                            size_t bytes_max,
                            struct store_queue_ahead **out);
/* Whether another name may be pushed (fewer than items_max in the pipeline). */
int store_queue_ahead_room(const struct store_queue_ahead *a);
/* Names in the pipeline (pushed, not yet popped). */
size_t store_queue_ahead_count(const struct store_queue_ahead *a);
/* Appends name (shorter than STORE_QUEUE_AHEAD_NAME_SIZE) if there is room: MV_OK or
 * MV_ELIMIT. */
int store_queue_ahead_push(struct store_queue_ahead *a, const char *name);
/* The oldest item, once prepared (meanwhile it prepares the next untaken ones itself:
 * HELPING); NULL if the pipeline is empty. Owned by the pipeline until
 * store_queue_ahead_pop(). */
struct store_queue_ahead_item *store_queue_ahead_head(struct store_queue_ahead *a);
/* Releases the head and frees its slot. */
void store_queue_ahead_pop(struct store_queue_ahead *a);
/* Stops and joins the threads, releases every item, frees *a and sets it NULL. NULL is fine. */
void store_queue_ahead_stop(struct store_queue_ahead **a);

/* What the pipeline holds now and has done: for tests of its bounds. */
struct store_queue_ahead_stats {
    size_t items;                /* in the pipeline */
    size_t prepared;             /* of those, prepared */
    size_t bytes;                /* held by the prepared ones */
    size_t items_peak;           /* the most ever in the pipeline */
    size_t bytes_peak;           /* the most ever held by prepared items not yet popped */
    uint64_t prepared_total;     /* items prepared since the start (threads and caller) */
    uint64_t prepared_by_caller; /* of those, by store_queue_ahead_head()'s caller (HELPING) */
};
void store_queue_ahead_stats_get(struct store_queue_ahead *a, struct store_queue_ahead_stats *out);

#endif /* MV_STORE_QUEUE_AHEAD_H */
