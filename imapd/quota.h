/*
 * quota.h -- the quota (RFC 9208): per-user limits (quota_file.c) and usage and checks
 * (quota.c).
 */
#ifndef MV_IMAPD_QUOTA_H
#define MV_IMAPD_QUOTA_H

#include "config.h"
#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>

#define QUOTA_STORAGE_KIB_MAX (1ULL << 40)  /* largest STORAGE limit (quota_kib, quota_file) */
#define QUOTA_MESSAGES_MAX    4294967295ULL /* largest MESSAGE limit */
#define QUOTA_OVER_STORAGE    1             /* quota_exceeded() bits */
#define QUOTA_OVER_MESSAGE    2
struct quota_limits {
    uint64_t storage_kib; /* 0: unlimited */
    uint64_t messages;    /* 0: unlimited */
};
struct quota_usage {
    uint64_t bytes; /* logical: the sum of the messages' sizes */
    uint64_t messages;
};

/* ---- quota_file.c ---- */
/* Reads the quota file at path ("" : none) and makes it the table; the server re-reads it
 * when it changes. 0, or -1 with "path:line: reason" in err (the table is unchanged). */
int quota_file_load(const char *path, char *err, size_t err_size);
/* Re-reads the quota file now, changed or not (SIGHUP); the outcome is logged. 0 (also with
 * no quota_file), or -1 when the file could not be read or parsed (the table is unchanged). */
int quota_file_reload(void);
/* The limits of address (normalised): its quota_file entry, else cfg's defaults. Thread-safe. */
struct quota_limits quota_limits_for(const struct config *cfg, const char *address);

/* ---- quota.c ---- */
/* The usage of an open store, summed over its mailbox rows. MV_OK or an MV_* code. */
int quota_used(mv_store *store, struct quota_usage *out);
struct open_store;
/* The usage of an open store, plus what its sealed queue still holds while it drains (worker
 * thread of the store only; the queue's part is the kept count, read from the directory only
 * when it is not known or stale, as for sealed deliveries). MV_OK or an MV_* code. */
int quota_used_open(const struct open_store *os, const struct config *cfg, struct quota_usage *out);
/* 0, or QUOTA_OVER_* bits: storing add_bytes in add_messages more messages in the open store
 * of address (with its queue, as quota_used_open) would go over its limits. */
int quota_exceeded(const struct open_store *os,
                   const struct config *cfg,
                   const char *address,
                   uint64_t add_bytes,
                   uint64_t add_messages);
/* As quota_exceeded() for one sealed delivery (the store is not open): from the usage last
 * noted plus the queue, else the store's file sizes (see quota.c); -1 if the queue cannot be
 * counted (unreadable, or over 1,000,000 entries). why: what was counted. */
int quota_sealed_exceeded(
    const struct config *cfg, const char *address, uint64_t add_bytes, char *why, size_t why_size);
/* Records the usage of the open store of address for later sealed deliveries (the worker
 * calls it after opening the store, after each drain step and before closing it); the kept
 * count of its queue is dropped (files left it). */
void quota_note(const char *address, mv_store *store);
/* As quota_note() after a drain step, with before the usage just before it and moved the
 * messages the step appended (mv_queue_drain_step's): what the step moved in is taken out of
 * the kept count of the queue instead of dropping it, so checks during a drain
 * (quota_used_open) stay O(1); if the store grew by other than moved messages (another
 * process wrote it meanwhile), the count is dropped. before NULL: as quota_note(). */
void quota_note_step(const char *address,
                     mv_store *store,
                     const struct quota_usage *before,
                     uint32_t moved);
/* A sealed delivery of bytes (the message) to address was queued: added to the kept count of
 * its queue, so the next sealed check need not read the queue directory. */
void quota_sealed_added(const char *address, uint64_t bytes);
/* How many times a queue directory was read for a sealed check, since the start, and how
 * long a kept count is used (default 10 s) -- for tests, which must not depend on speed. */
uint64_t quota_queue_count_reads(void);
void quota_queue_fresh_set(int64_t ms);
/* "storage", "message" or "storage and message" for QUOTA_OVER_* bits. */
const char *quota_over_text(int over);

#endif /* MV_IMAPD_QUOTA_H */
