/*
 * imap_session.h -- an IMAP session and what its command files share: the selected mailbox's
 * view (sequence number <-> UID map with flags), the command job, and the handlers.
 *
 * THREADS
 *   A command runs as a job on the session's worker; while it runs the loop does not touch
 *   the session. Handlers write their whole response (untagged lines and the tagged one)
 *   into `out`.
 */
#ifndef MV_IMAP_SESSION_H
#define MV_IMAP_SESSION_H

#include "buf.h"
#include "conn.h"
#include "imap_frame.h"
#include "imap_kw.h"
#include "imap_parse.h"
#include "mailvault.h"
#include "metrics.h"
#include "worker.h"

#include <stdatomic.h>

enum imap_state { IMAP_NOT_AUTH = 0, IMAP_AUTH, IMAP_SELECTED, IMAP_LOGOUT };

/* 40 bytes a message: a 100,000-message view is 4 MB, 1,000,000 is 40 MB (plus the distinct
 * keyword lists, shared: 2 bytes a name, each name once in the process). What only one session
 * knows of a message (pending expunge, \Recent, reported) is not here but in the session's marks
 * (struct imap_view), so the messages can be shared (imap_msgs.c). */
struct imap_msg {
    uint64_t modseq;
    int64_t internal_date;
    const struct imap_kw *keywords; /* shared (imap_kw.h), IMAP_KW_NONE if none; never NULL */
    uint32_t uid;
    uint32_t size; /* the store keeps messages below STORE_BLOB_SIZE_MAX, 10^9 bytes */
    /* The listing's body key (mv_message_fetch_keyed_into) if it fits in 32 bits (a store of
     * fewer than 2^29 bodies), else 0: whole-message FETCHes then go by UID. */
    uint32_t body_key;
    unsigned flags;
};

_Static_assert(sizeof(struct imap_msg) <= 40, "a view's message grew past 40 bytes");

/* The imap_msg fields of a listing's entry (keywords aside). */
#define IMAP_MSG_SIZE(n)     ((uint32_t)((n) < UINT32_MAX ? (n) : UINT32_MAX))
#define IMAP_MSG_BODY_KEY(k) ((uint32_t)((k) <= UINT32_MAX ? (k) : 0))

/* The messages of a view are kept in chunks of at most IMAP_CHUNK_MSGS (imap_msgs.c): a
 * chunk is shared by the store's cached view and by every session that selected the mailbox
 * (reference-counted, atomic: views are freed on several threads) and is never written
 * while shared; a view that must change a message copies that chunk only (160 KB), so a
 * SELECT of a 1,000,000-message mailbox takes a reference per chunk (245) instead of
 * copying 40 MB, and a STORE that follows copies one chunk. */
#define IMAP_CHUNK_MSGS 4096
/* Where a pending chunk's messages are in a saved view's bytes (imap_view_saved.c,
 * "Decoded on first use"), and its first UID, so that a UID search needs no decode. */
struct imap_view_source;
struct imap_chunk_at {
    struct imap_view_source *src; /* a reference while the chunk is pending */
    size_t offset;
    size_t len;
    uint32_t first_uid;
};
struct imap_chunk {
    atomic_size_t refs;
    size_t count; /* messages in use, 1..IMAP_CHUNK_MSGS (0 only while being filled) */
    /* 1 while msgs is not written yet: decoded from `at` at the first read of a message
     * (imap_view_msg -> imap_chunk_fill), once, under a lock; 0 after (release/acquire). */
    atomic_int pending;
    struct imap_chunk_at at;
    struct imap_msg msgs[IMAP_CHUNK_MSGS];
};
struct imap_part {
    struct imap_chunk *chunk;
    size_t start; /* the view index of chunk->msgs[0]; SIZE_MAX while the chunk is empty */
};

/* A session's marks of a message (one byte each, struct imap_view.marks). */
#define IMAP_MARK_EXPUNGED 0x01u /* gone from the store, not yet reported (RFC 3501 7.4.1) */
#define IMAP_MARK_RECENT   0x04u /* \Recent in this session (imap_recent.c) */
#define IMAP_MARK_REPORTED 0x08u /* scratch: a FETCH was sent for it during this command */
#define IMAP_MARK_QUIET                                                                            \
    0x10u /* scratch: a STORE .SILENT or FETCH \Seen of this command:                              \
             the sync must not announce its change */

struct imap_view {
    char *mailbox; /* the store's (UTF-8) name; NULL: nothing selected */
    int readonly;
    /* The mailbox defined mailbox_keywords_max keywords at the SELECT: PERMANENTFLAGS offers
     * no new ones (no "\*"), since a STORE of one would be refused. The store's cached view
     * asks (mv_mailbox_keyword_room) when the mailbox's modseq moved since it last did
     * (keywords_full_at; 0: never): every write that can define a keyword moves it. */
    int keywords_full;
    uint64_t keywords_full_at;
    uint32_t uidvalidity;
    uint32_t uidnext;
    uint64_t highestmodseq;
    /* The messages (UID order): parts[0..part_count) in index order; trailing parts may be
     * empty chunks reserved for appends (imap_view_reserve). Read them with imap_view_msg. */
    struct imap_part *parts;
    size_t part_count;
    size_t part_cap;
    size_t count;
    /* A session's marks, a byte per message (IMAP_MARK_*), calloc'd at load: NULL in the
     * store's cached view and in a sync's delta, which have none. */
    unsigned char *marks;
    size_t marks_cap;
    size_t expunged_count; /* messages marked expunged: a sync knows without walking them */
    size_t recent_count;   /* messages marked recent */
    uint32_t recent_owed;  /* UIDs below it were shown as \Recent without their claim, which
                              waits for the lock (imap_recent.c); 0: none */
    int reported_any;      /* some message has a scratch mark (imap_view_reported_clear) */
    /* The cached view only (imap_view_cache.c): every message below this UID is \Seen. */
    uint32_t seen_below;
    /* Set by imap_view_load: the sequence number of the first message without \Seen, 0 if
     * none (SELECT's UNSEEN); not kept up to date after. */
    size_t first_unseen;
    /* The keywords announced in FLAGS (imap_keywords.c): malloc'd strings, in the order
     * they were first seen, and a hash table over them (keyword_slot_count slots, a power of
     * two, 0 when keyword_slots is NULL) so that looking one up does not walk the set. */
    char **keyword_names;
    size_t keyword_count;
    size_t keyword_cap;
    uint64_t *keyword_slots;
    size_t keyword_slot_count;
    size_t keyword_compares; /* names compared as text so far (a test's count of the work) */
};

struct imap_session {
    struct conn *conn;              /* the loop's: used only on the loop */
    struct metrics_cmd metrics_cmd; /* the command in progress: set on the loop, ended by
                                       its tagged response (loop or worker) */
    enum imap_state state;
    char user[MV_ADDRESS_MAX + 1];
    struct worker *worker; /* set when a login is first attempted */
    /* The user the session holds a placement of (worker.c PLACEMENT) since its last login
     * attempt, "" if none: ended at the next attempt or at the session's end. */
    char placed[MV_ADDRESS_MAX + 1];
    int is_placed;
    struct open_store *store;
    struct imap_view view;
    char auth_tag[IMAP_TAG_MAX + 1]; /* AUTHENTICATE waiting for its response line */
    int tls;                         /* a copy of conn->tls for handlers on the worker */
    int login_allowed;
    int login_failures; /* the connection closes after IMAP_LOGIN_FAILURES_MAX */
    int condstore;      /* CONDSTORE enabled (RFC 7162): FETCH responses carry MODSEQ */
    int qresync;        /* QRESYNC enabled (RFC 7162): VANISHED instead of EXPUNGE */
    /* UTF8=ACCEPT enabled (RFC 6855): mailbox names in UTF-8 rather than modified UTF-7,
     * UTF-8 in quoted strings both ways, APPEND's UTF8 data, no SEARCH CHARSET. */
    int utf8_accept;
    int selected_ever; /* a SELECT or EXAMINE was issued: too late for ENABLE UTF8=ACCEPT */
    int gone;          /* the selected mailbox vanished: BYE sent, close after the command */
    int idling;        /* in IDLE (RFC 2177): the next line must be DONE */
    char idle_tag[IMAP_TAG_MAX + 1];
    int64_t next_poll_ms; /* IDLE: when the loop next asks the worker for changes */
    /* The loop's list of sessions in IDLE (imap_session_notify); loop thread only. */
    struct imap_session *idle_prev, *idle_next;
    int idle_listed;
    int idle_notified; /* a change came while a job was in flight: look again after it */
    /* A FETCH whose response goes on (imap_fetch.c): set by the job, read by the loop after
     * it, which posts the job again (stream_job) once the output has drained. */
    struct imap_fetch_state *fetch_more;
    void *stream_job; /* loop thread only: the job waiting for the drain */
    /* The loop's side of the connection (loop thread only): the framing of its input, and
     * what the loop took from the last job (no job is in flight when it is read). */
    struct imap_frame frame;
    int authenticated; /* logged in: the pre-login limits no longer apply */
    int in_idle;       /* in IDLE: the idle timeout is IMAP_IDLE_TIMEOUT_FACTOR times longer */
    /* The lane of the session's last job (loop thread): the job that ends the session goes
     * into the same lane, so it runs after that one (worker.c LANES). */
    enum job_lane last_lane;
    /* The running job is on the worker's reader thread (JOB_LANE_READ): the store calls use
     * the store's reader handle (imap_db). Set and cleared by the job itself. */
    int on_reader;
    /* Loop thread only, for the control socket (control.c): the mailbox selected as of the
     * last completed command (`who`), and an end asked for (no new command is taken). */
    char shown_mailbox[256];
    int kicked;
    /* A FETCH job may write its response to the socket itself (imap_fetch.c, "Direct
     * sending"): a duplicate of the plain (no TLS) socket's descriptor, made by the loop when
     * it posts the job with nothing of the connection's output still queued; -1: none. The
     * job stops using it at the first write the socket does not take whole (direct_off) and
     * counts what it wrote (direct_sent); the loop closes it and counts the bytes after the
     * job (imap_job_done). */
    int direct_fd;
    int direct_off;
    uint64_t direct_sent;
};

#define IMAP_LOGIN_FAILURES_MAX 3
/* An IDLE session is told at once about changes made through this server (the loop wakes
 * it when a job of the same user that may change a mailbox completes: imap_session_notify);
 * changes made by other processes (the CLI, a second server) wake it through inotify on the
 * store's directory (idle_watch.c). It still looks every IMAP_IDLE_POLL_MS, for when inotify
 * is unavailable or out of watches. */
#define IMAP_IDLE_POLL_MS 30000
/* A session in IDLE is quiet by design: it may stay so this many times idle_timeout_s. */
#define IMAP_IDLE_TIMEOUT_FACTOR 4

/* The context of one command on the worker. */
struct imap_ctx {
    struct imap_session *s;
    const struct imap_command *cmd;
    struct buf *out;
    int delay_ms; /* a failed login */
    int logout;   /* close after the response */
    /* A failed login, which the loop counts (throttle.c) and logs with the client's address:
     * why (static text; NULL: none), and the name tried, normalised if it is an address
     * (failed_user_normal set), else as given, cut for the log. */
    const char *failed_why;
    char failed_user[MV_ADDRESS_MAX + 1];
    int failed_user_normal;
    /* An APPEND left its store's WAL sync owed (mv_store_sync_owed: worker.c SYNC APART):
     * the tagged OK, sync_ok's text, is written once the sync is done. */
    int sync_owed;
    char sync_ok[80];
};

#define IMAP_MAILBOX_MAX 1024 /* bytes of a mailbox name, either form */

/* ---- imap_session.c ---- */
void imap_tagged(struct imap_ctx *x, const char *status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "tag NO <text from an MV_* failure>", with a response code where one fits. */
void imap_tagged_store_error(struct imap_ctx *x, int rc, const char *what);
/* "tag NO <code><what> failed: internal error ..." with a time stamp and an id; the detail
 * (SQL, paths, library text: never for the client) goes to the log under that id. */
void imap_internal_error(struct imap_ctx *x,
                         const char *code,
                         const char *what,
                         const char *detail);
const char *imap_capabilities(const struct imap_session *s);

/* The store handle a command of s uses: the reader handle on the reader thread (worker.c
 * READERS), else the store's own. */
static inline mv_store *imap_db(const struct imap_session *s)
{
    return s->on_reader && s->store->reader != NULL ? s->store->reader : s->store->store;
}

/* ---- imap_lane.c ---- */
/* The worker lane of a parsed command of session s (loop thread, no job of s in flight):
 * JOB_LANE_LONG when its work grows with many messages or bytes, JOB_LANE_READ when it only
 * reads and touches few messages, or is a SELECT or EXAMINE (the caller keeps it on the
 * writer if the session's store has no reader handle; see imap_lane.c). */
enum job_lane imap_command_lane(const struct imap_session *s, const struct imap_command *cmd);

/* ---- imap_cmd_auth.c ---- */
void imap_cmd_login(struct imap_ctx *x);
void imap_cmd_authenticate(struct imap_ctx *x, const char *response, size_t len);
/* The authentication identity of a base64 SASL PLAIN response (to pick the worker on the
 * loop). 0 or -1. */
int imap_sasl_plain_user(const char *b64, size_t len, char *user, size_t user_size);

/* ---- imap_cmd_mailbox.c ---- */
void imap_cmd_select(struct imap_ctx *x);
void imap_cmd_create(struct imap_ctx *x);
void imap_cmd_delete(struct imap_ctx *x);
void imap_cmd_rename(struct imap_ctx *x);
void imap_cmd_subscribe(struct imap_ctx *x, int on);
void imap_cmd_list(struct imap_ctx *x, int lsub);
void imap_cmd_status(struct imap_ctx *x);
void imap_cmd_append(struct imap_ctx *x);
/* Reads a mailbox argument into the store's UTF-8 form: modified UTF-7 on the wire, or UTF-8
 * once UTF8=ACCEPT is enabled (then a name that is not valid UTF-8 or breaks RFC 6855's
 * rules, imap_utf8_name_valid(), is BAD). 0 or -1 (BAD already written). */
int imap_mailbox_arg(struct imap_ctx *x, const struct imap_node *n, char *out, size_t out_size);
/* Writes a mailbox name (the store's UTF-8) to x->out in the session's wire form: modified
 * UTF-7, or UTF-8 once UTF8=ACCEPT is enabled; quoted, or a literal where it must be. */
void imap_mailbox_out(struct imap_ctx *x, const char *name);

/* ---- imap_cmd_quota.c ---- */
void imap_cmd_getquota(struct imap_ctx *x);
void imap_cmd_getquotaroot(struct imap_ctx *x);
void imap_cmd_setquota(struct imap_ctx *x);

/* ---- imap_cmd_message.c ---- */
/* A buffer for the keywords of any flag list in cmd (its size in *size): every keyword the
 * command holds fits, so none is ever cut; the store applies its own limits. malloc'd, "";
 * NULL when out of memory. */
char *imap_keywords_buf(const struct imap_command *cmd, size_t *size);
void imap_cmd_store(struct imap_ctx *x);
void imap_cmd_copy(struct imap_ctx *x);
void imap_cmd_move(struct imap_ctx *x);
void imap_cmd_expunge(struct imap_ctx *x);
void imap_cmd_close(struct imap_ctx *x);
void imap_cmd_idle(struct imap_ctx *x);
void imap_cmd_unselect(struct imap_ctx *x);
/* ---- imap_fetch.c ---- */
/* A FETCH response is produced in chunks of about IMAP_FETCH_CHUNK bytes (plus one message's
 * response); the next chunk is made once the connection's output is below
 * CONN_STREAM_RESUME_BELOW bytes (conn.h). Small enough that the first bytes leave soon
 * (the client reads one chunk while the worker makes the next), large enough that the
 * hand-offs between worker and loop stay a small part of it. */
#define IMAP_FETCH_CHUNK ((size_t)256 << 10)
/* With direct sending (imap_fetch.c) the job writes its response to the socket whenever
 * this much is made: the client reads the first messages while the next are read. */
#define IMAP_FETCH_DIRECT_MIN ((size_t)32 << 10)
/* ... and goes on for up to this many bytes before the loop takes over (the next job): the
 * bench's 50 random messages (0.6-4 MB) in one or two jobs, while other sessions' reads on
 * the worker's reader thread wait for a few ms of it at most. */
#define IMAP_FETCH_DIRECT_JOB_MAX ((size_t)2 << 20)
struct imap_fetch_state;
void imap_cmd_fetch(struct imap_ctx *x);
/* The next chunk of the FETCH in x->s->fetch_more. */
void imap_fetch_continue(struct imap_ctx *x);
/* Frees a FETCH that will not go on (the connection is gone). */
void imap_fetch_state_free(struct imap_fetch_state **st);
/* ---- imap_search.c ---- */
void imap_cmd_search(struct imap_ctx *x);
void imap_cmd_sort(struct imap_ctx *x); /* imap_sort.c */

/* ---- imap_msgs.c: a view's messages (chunks shared until written, see struct imap_chunk) ---- */
/* The part (index into v->parts) holding message i (< v->count): the chunks are full but
 * where expunges emptied some (then a binary search over the parts). */
static inline size_t imap_view_part_of(const struct imap_view *v, size_t i)
{
    size_t g = i / IMAP_CHUNK_MSGS;
    if (g < v->part_count && v->parts[g].start <= i &&
        i - v->parts[g].start < v->parts[g].chunk->count) {
        return g;
    }
    size_t lo = 0, hi = v->part_count; /* the last part starting at or before i */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (v->parts[mid].start <= i) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}
/* Decodes a pending chunk's messages (imap_msgs.c); nothing if another thread did. */
void imap_chunk_fill(struct imap_chunk *c);
/* The source of chunk c with a reference taken (imap_view_source_unref), if c is pending;
 * else NULL. The source then outlives a decode of c on another thread. */
struct imap_view_source *imap_chunk_source(struct imap_chunk *c);
/* Message i (< v->count), valid until the view next changes; a pending chunk is decoded. */
static inline const struct imap_msg *imap_view_msg(const struct imap_view *v, size_t i)
{
    const struct imap_part *p = &v->parts[imap_view_part_of(v, i)];
    if (atomic_load_explicit(&p->chunk->pending, memory_order_acquire) != 0) {
        imap_chunk_fill(p->chunk);
    }
    return &p->chunk->msgs[i - p->start];
}
/* The session's marks of message i (IMAP_MARK_*; none in a view without marks). */
static inline unsigned imap_view_marks(const struct imap_view *v, size_t i)
{
    return v->marks != NULL ? v->marks[i] : 0u;
}
/* 1 and *key if message i of the view may be read by its body key: it has one, and it is
 * not a message the view knows is gone (expunged by another session, not yet reported): the
 * key holds only for the messages the mailbox had at the view's highest modseq, which the
 * store checks. Then the UID index and the body's row are not read. */
static inline int imap_view_key(const struct imap_view *v, size_t i, struct mv_message_key *key)
{
    const struct imap_msg *m = imap_view_msg(v, i);
    *key = (struct mv_message_key){.body_key = m->body_key,
                                   .size = m->size,
                                   .modseq = v->highestmodseq,
                                   .uidvalidity = v->uidvalidity};
    return m->body_key != 0 && (imap_view_marks(v, i) & IMAP_MARK_EXPUNGED) == 0;
}
/* Before a pass that reads rows of every message of v (what: MV_PREFETCH_*, as
 * mv_message_prefetch_headers): when the store's file is out of the page cache (the first
 * 1,024 messages' leaves were not in it), every message's leaves are asked of
 * the disk at once, so the pass waits about once for each batch instead of once a leaf
 * (issue 13: a first SEARCH HEADER of 100,000 messages from an evicted file was 1.0 s
 * against Dovecot's 0.24); from a file in the cache, one batch's hint and nothing more. */
void imap_view_prefetch_headers(mv_store *db, const struct imap_view *v, unsigned what);
/* Sets / clears marks of message i of a session's view (one with marks). */
static inline void imap_view_mark(struct imap_view *v, size_t i, unsigned bits)
{
    v->marks[i] = (unsigned char)(v->marks[i] | bits);
}
static inline void imap_view_unmark(struct imap_view *v, size_t i, unsigned bits)
{
    v->marks[i] = (unsigned char)(v->marks[i] & ~bits);
}
/* The first index whose UID is >= uid (v->count if none): a binary search. */
size_t imap_view_find_uid(const struct imap_view *v, uint32_t uid);
/* The same, knowing it is not below from: a galloping search from there, O(log distance). */
size_t imap_view_find_uid_from(const struct imap_view *v, size_t from, uint32_t uid);
/* Makes the chunk of message i the view's own, copying it if it is shared, so that
 * imap_view_msg_mut may write it. MV_OK or MV_ENOMEM (then nothing changed). */
int imap_view_own(struct imap_view *v, size_t i);
/* Message i for writing: its chunk must be the view's own (imap_view_own). */
struct imap_msg *imap_view_msg_mut(struct imap_view *v, size_t i);
/* Room to append n messages without allocating (the last chunk made the view's own, chunks
 * and marks reserved). MV_OK or MV_ENOMEM (then the messages are as they were). */
int imap_view_reserve(struct imap_view *v, size_t n);
/* Appends m (its keywords reference moves into the view; its marks are none) into room
 * imap_view_reserve made: cannot fail. */
void imap_view_append(struct imap_view *v, const struct imap_msg *m);
/* imap_view_reserve(v, 1) and imap_view_append: MV_OK or MV_ENOMEM (m not taken). */
int imap_view_push(struct imap_view *v, const struct imap_msg *m);
/* Gives dst (no messages) src's messages, sharing every chunk: a reference per chunk, no
 * copy of a message. No marks. MV_OK or MV_ENOMEM (dst still empty). */
int imap_view_share(struct imap_view *dst, const struct imap_view *src);
/* Removes the messages at idx (n ascending, distinct indexes; their chunks the view's own,
 * imap_view_own) with their marks; drops their keyword references. Cannot fail. */
void imap_view_drop(struct imap_view *v, const size_t *idx, size_t n);
/* Copies v's messages into full chunks of its own when its chunks are less than half full
 * on average (removals leave them short: see imap_msgs.c); else, or out of memory, nothing.
 * Indexes, marks and what the messages hold stay the same. */
void imap_view_compact(struct imap_view *v);
/* Drops every message (and the marks): a chunk whose last reference this was is freed. */
void imap_view_msgs_free(struct imap_view *v);
/* Appends to v (its parts all hold messages: none reserved) a chunk of count messages
 * still to be decoded from at (imap_chunk_fill), taking a reference to at->src; its memory is
 * not written until then. MV_OK or MV_ENOMEM (nothing taken). */
int imap_view_add_pending(struct imap_view *v, size_t count, const struct imap_chunk_at *at);
/* For tests: the chunks in memory now, in every view of the process, and of those the ones
 * not decoded yet. */
size_t imap_chunks_live(void);
size_t imap_chunks_pending(void);

/* ---- imap_view.c ---- */
/* Appends to v the messages of mailbox changed after since (0: all of them), UID order. */
int imap_view_list(mv_store *store, const char *mailbox, uint64_t since, struct imap_view *v);
/* Loads the mailbox into the view (replacing what was there). MV_OK or an MV_* code. */
int imap_view_load(struct imap_session *s, const char *mailbox, int readonly);
void imap_view_free(struct imap_view *v);
/* Whether uid is among the count UIDs at uids (ascending): a binary search. */
int imap_uids_contain(const uint32_t *uids, size_t count, uint32_t uid);
/* Clears every message's reported mark: nothing to walk unless reported_any (whoever sets
 * a mark sets it too), so a command's cost does not grow with the mailbox. */
void imap_view_reported_clear(struct imap_view *v);
/* Brings the view up to date and reports the changes (EXPUNGE only if allow_expunge). */
int imap_view_sync(struct imap_session *s, struct buf *out, int allow_expunge);
/* A flag change this session's STORE just made: +FLAGS or -FLAGS of flags alone (no
 * keywords, no UNCHANGEDSINCE), on the view's messages at idx (ascending), of which the store
 * changed `changed` (mv_flags_set_ranges), all under the one modseq it took. */
struct imap_own_flags {
    const uint32_t *idx;
    size_t count;
    int mode; /* MV_FLAGS_ADD or MV_FLAGS_REMOVE */
    unsigned flags;
    uint32_t changed;
};
/* A message's flags after own's change. */
static inline unsigned imap_own_flags_after(const struct imap_own_flags *own, unsigned flags)
{
    return own->mode == MV_FLAGS_ADD ? flags | own->flags : flags & ~own->flags;
}
/* imap_view_sync after this session's own STORE (own NULL: imap_view_sync). When nothing
 * else changed the mailbox since the view's last sync (its highest modseq is the view's plus
 * the STORE's one), the change is applied to the view as the store made it, without reading
 * the changed rows back: after a STORE 1:* of 10,000 messages the read back was a third of
 * the command (a row lookup through the modseq index per message). Otherwise, or if the
 * view's count of changed messages is not the store's, the sync reads back as always. */
int imap_view_sync_own(struct imap_session *s,
                       struct buf *out,
                       int allow_expunge,
                       const struct imap_own_flags *own);
/* The indexes (0-based) of the messages a set names: sequence numbers or UIDs (uid set).
 * *idx is malloc'd. 0, or -1 if a sequence number is beyond the mailbox (BAD). */
int imap_view_resolve(const struct imap_view *v,
                      const struct imap_seqset *set,
                      int uid,
                      uint32_t **idx,
                      size_t *count);
/* "(\Seen \Flagged kw)"; IMAP_FLAG_RECENT in flags adds \Recent (a session's, never stored) */
#define IMAP_FLAG_RECENT 0x100u
void imap_flags_out(struct buf *out, unsigned flags, const struct imap_kw *keywords);
/* "* seq FETCH (UID u FLAGS (...) [MODSEQ (n)])" of message i of the session's view v. */
void imap_fetch_flags_line(struct buf *out, const struct imap_view *v, size_t i, int condstore);
/* The UID ranges for the store (mv_*_ranges) of the messages at view indexes idx
 * (ascending): a run of indexes, also across messages the view knows are expunged, is one
 * range from its first to its last UID, whatever UID gaps lie between (a UID never comes
 * back once used). *ranges is malloc'd (NULL when *n is 0). 0, or -1 out of memory. */
int imap_view_uid_ranges(const struct imap_view *v,
                         const uint32_t *idx,
                         size_t count,
                         struct mv_uid_range **ranges,
                         size_t *n);

/* ---- imap_view_cache.c ---- */
/* The store's cached view of mailbox, brought up to date first (see the file) by reads
 * through db (os's store or its reader handle: the calling thread's, imap_db), for a
 * session: out (empty) shares its messages (imap_view_share: no copy) and gets uidvalidity,
 * uidnext, highestmodseq, the keyword set and first_unseen (no name, no marks). MV_OK or an
 * MV_* code (then out holds nothing). Takes os->view_lock. */
int imap_view_cache_copy(struct open_store *os,
                         mv_store *db,
                         const char *mailbox,
                         struct imap_view *out);

/* ---- imap_view_saved.c ---- */
/* The saved form of view v (the store's cached view: its messages ascend by UID), with
 * first_unseen the UID of its first message without \Seen (0: none): *out malloc'd, *len its
 * length. Chunks still pending are copied as they are, the others encoded and decoded back
 * against v. MV_OK, MV_ENOMEM, or MV_ECORRUPT if one does not decode back (a bug: nothing to
 * save). */
int imap_view_encode(const struct imap_view *v,
                     uint32_t first_unseen,
                     unsigned char **out,
                     size_t *len);
/* A saved view's len bytes taken as they come (imap_view_decoder_feed, in order; the last
 * piece reads its header) into v (empty): pending chunks (version 2: decoded messages), the
 * keyword set, seen_below.
 * imap_view_decoder_new returns NULL out of memory. Feed returns MV_OK, MV_ENOMEM,
 * MV_ENOTFOUND (a view of an older version: list the mailbox instead) or MV_ECORRUPT; after
 * an error the decoder is done with. imap_view_decoder_end frees it, and with rc not MV_OK
 * also v's messages. */
struct imap_view_decoder;
struct imap_view_decoder *imap_view_decoder_new(struct imap_view *v, size_t len);
int imap_view_decoder_feed(struct imap_view_decoder *d, const void *bytes, size_t n);
/* The version of the view read (after the last piece; 0 if none or not a view): 1 is not
 * decoded (MV_ENOTFOUND), 2 is decoded and to be saved again in this version. */
int imap_view_decoder_version(const struct imap_view_decoder *d);
void imap_view_decoder_end(struct imap_view_decoder *d, int rc);
/* The decoder given data piece bytes at a time, for tests of where the pieces end. */
int imap_view_decode_pieces(const void *data, size_t len, size_t piece, struct imap_view *v);
/* Writes pending chunk c's messages from its saved bytes, taking their keyword references
 * (checked when saved: see the file; aborts if they still do not decode); c->at.src stays
 * for the caller to drop. */
void imap_view_source_decode(struct imap_chunk *c);
void imap_view_source_ref(struct imap_view_source *src);
void imap_view_source_unref(struct imap_view_source *src);

/* ---- imap_recent.c ---- */
/* \Recent (RFC 3501 2.3.2): marks the view's messages from index `from` on that are this
 * session's recent ones: claimed in the store for a read-write view (each message is recent
 * in one session only, mv_mailbox_recent_claim), only looked at for EXAMINE (RFC 3501 6.3.2:
 * it must not take \Recent away). Updates recent_count. MV_OK or an MV_* code (then none is
 * marked). */
int imap_view_recent(struct imap_session *s, size_t from);
/* Records the \Recent claim a sync on the reader thread could not make (the lock was taken:
 * view.recent_owed), so that no later session sees those messages as recent too. Tried at
 * every sync, before a view is replaced and at the session's end; on the reader thread
 * again without waiting. Nothing to do costs a test. */
void imap_view_recent_settle(struct imap_session *s);

/* ---- imap_keywords.c ---- */
/* Adds the space-separated keywords (imap_view_keywords_add) or a message's list
 * (imap_view_keywords_add_list) to the view's set: 1 if one was new, 0 if not, MV_ENOMEM. */
int imap_view_keywords_add(struct imap_view *v, const char *keywords);
int imap_view_keywords_add_list(struct imap_view *v, const struct imap_kw *kw);
void imap_view_keywords_free(struct imap_view *v);
/* "* FLAGS (...)" and "* OK [PERMANENTFLAGS (...)]" with the view's keywords. */
void imap_flags_announce(const struct imap_view *v, struct buf *out);

/* ---- imap_qresync.c ---- */
/* The QRESYNC select parameter (RFC 7162 3.2.5). */
struct imap_qresync {
    uint32_t uidvalidity;
    uint64_t modseq;
    int has_known;
    struct imap_seqset known; /* known-uids (has_known) */
};
/* A compressed UID set ("1:3,7") of ascending uids. */
void imap_uid_set_out(struct buf *out, const uint32_t *uids, size_t count);
/* "* VANISHED (EARLIER) set" of the UIDs expunged from the selected mailbox after since
 * (those in known only, if not NULL); nothing if none. MV_OK or an MV_* code. */
/* The same without the change log, for a client further behind than MV_EXPUNGED_MAX
 * expunges or than the log's pruned part (changes_keep_days): every UID of known (every UID below
 * UIDNEXT if NULL) that the view does not hold or has marked expunged. MV_OK or MV_ENOMEM. */
int imap_qresync_vanished_without_log(struct imap_session *s,
                                      struct buf *out,
                                      const struct imap_seqset *known);
int imap_qresync_vanished(struct imap_session *s,
                          struct buf *out,
                          uint64_t since,
                          const struct imap_seqset *known);
/* Parses "(QRESYNC (uidvalidity modseq [known-uids [(seqs uids)]]))"; 0 or -1 (then q
 * holds nothing). */
int imap_qresync_param(const struct imap_command *cmd,
                       const struct imap_node *list,
                       struct imap_qresync *q);
/* Frees a malloc'd *q and its known-uids; *q becomes NULL. */
void imap_qresync_free(struct imap_qresync **q);
/* After SELECT/EXAMINE's untagged data: VANISHED (EARLIER) and FETCH of what changed since
 * q->modseq, if q->uidvalidity is the mailbox's. MV_OK or an MV_* code. */
int imap_qresync_select(struct imap_session *s, struct buf *out, const struct imap_qresync *q);

/* ---- imap_utf7.c ---- */
/* Modified UTF-7 (RFC 3501 5.1.3) to UTF-8 and back. 0 or -1 (malformed / no room). */
int imap_utf7_decode(const char *in, size_t in_len, char *out, size_t out_size);
int imap_utf7_encode(const char *in, char *out, size_t out_size);
/* Whether in[0..len) is a mailbox name RFC 6855 3 allows in UTF-8: valid UTF-8 (strict:
 * GLib's validator) holding no control character (U+0000-U+001F, U+007F-U+009F) and no line
 * or paragraph separator (U+2028, U+2029). 1 or 0. */
int imap_utf8_name_valid(const char *in, size_t len);

#endif /* MV_IMAP_SESSION_H */
