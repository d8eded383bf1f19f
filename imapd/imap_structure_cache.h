/*
 * imap_structure_cache.h -- FETCH BODYSTRUCTURE and BODY answers kept per open store, so a
 * message is read and parsed for them once, not at every FETCH (imap_structure_cache.c).
 *
 * USAGE
 *   imap_structure_cache_budget(bytes);            once, at start (config structure_cache_kib)
 *   struct imap_structure_cache *c = imap_structure_cache_new();   one per store slot
 *   if (!imap_structure_cache_get(c, &key, out))   appends the answer to out on a hit
 *       ... parse, answer, imap_structure_cache_put(c, &key, answer, len, 1);
 *   imap_structure_cache_take_unsaved(c, max, fn, arg);  the answers to write to the store
 *   imap_structure_cache_clear(c);                 the store closes
 *   imap_structure_cache_free(&c);
 *
 * Every call is thread-safe (a store's reader and writer threads both answer FETCH).
 */
#ifndef MV_IMAPD_IMAP_STRUCTURE_CACHE_H
#define MV_IMAPD_IMAP_STRUCTURE_CACHE_H

#include "buf.h"

#include <stddef.h>
#include <stdint.h>

/* What an answer depends on. A message is immutable and its UID is never given again in a
 * mailbox of the same UIDVALIDITY, and the store hands out every UIDVALIDITY once (it keeps
 * the last one given, store_mailbox.c), so (uidvalidity, uid) names one message's bytes for
 * the store's life; body_key and size (the view's) are checked as well, so an answer is never
 * handed to another message even if that ever failed. extensible: BODYSTRUCTURE (1) or BODY
 * (0); utf8: UTF8=ACCEPT is on (an attached message's ENVELOPE is written differently). */
struct imap_structure_key {
    uint32_t uidvalidity;
    uint32_t uid;
    uint32_t body_key;
    uint32_t size;
    unsigned extensible : 1;
    unsigned utf8 : 1;
};

/* Bytes all caches of the process may hold together (entries, their text and their tables);
 * 0 turns caching off. Set once before any cache is used. */
void imap_structure_cache_budget(size_t bytes);
/* Bytes held now, all caches together (the metrics' gauge). */
size_t imap_structure_cache_bytes(void);

struct imap_structure_cache;

/* A new empty cache, or NULL when out of memory or when the budget is 0 (FETCH then parses
 * every time, and looks nothing up: no lock taken, no lookup counted in the metrics). */
struct imap_structure_cache *imap_structure_cache_new(void);

/* 1 and the answer appended to out if key's is kept, else 0 (out unchanged). c may be NULL. */
int imap_structure_cache_get(struct imap_structure_cache *c,
                             const struct imap_structure_key *key,
                             struct buf *out);

/* 1 if key's answer is kept now (a later get may still miss: it can be dropped meanwhile). */
int imap_structure_cache_has(struct imap_structure_cache *c, const struct imap_structure_key *key);

/* Keeps text (len bytes, the answer of key) if the budget allows: the entries this cache
 * kept longest without a use since are dropped first to make room; an answer is not kept if
 * even the whole of this cache would not make room (the other stores' caches hold the rest).
 * Nothing happens when out of memory, for a key kept already, or when c is NULL. unsaved: 1
 * for an answer to save in the store (imap_structure_cache_take_unsaved hands it out once):
 * FETCH puts only answers it made from the message; 0 for one not to save. */
void imap_structure_cache_put(struct imap_structure_cache *c,
                              const struct imap_structure_key *key,
                              const char *text,
                              size_t len,
                              int unsaved);

/* Calls fn(arg, key, text, len) for up to max unsaved answers, in the order put, under the
 * cache's lock (fn copies what it needs and must not call into the cache), and marks them
 * saved: each is handed out once. Returns how many. c may be NULL (0). */
typedef void imap_structure_unsaved_fn(void *arg,
                                       const struct imap_structure_key *key,
                                       const char *text,
                                       size_t len);
size_t imap_structure_cache_take_unsaved(struct imap_structure_cache *c,
                                         size_t max,
                                         imap_structure_unsaved_fn *fn,
                                         void *arg);

/* Drops every entry (wiped: answers quote mail), keeping the cache usable. */
void imap_structure_cache_clear(struct imap_structure_cache *c);
void imap_structure_cache_free(struct imap_structure_cache **c);

/* Counts for tests: answers found, answers kept now, of those not yet handed out to be
 * saved, unsaved answers dropped to make room, bytes this cache holds. */
struct imap_structure_cache_stats {
    uint64_t hits;
    uint64_t misses;
    size_t entries;
    size_t unsaved;
    uint64_t unsaved_lost;
    size_t bytes;
};
void imap_structure_cache_stats(struct imap_structure_cache *c,
                                struct imap_structure_cache_stats *out);

#endif /* MV_IMAPD_IMAP_STRUCTURE_CACHE_H */
