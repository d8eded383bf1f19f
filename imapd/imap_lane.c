/*
 * imap_lane.c -- which worker lane an IMAP command goes into (worker.c "LANES"): short
 * unless the work it asks for grows with many messages or many bytes. Decided on the loop
 * from the command's name and arguments and the session's view (no job of the session is in
 * flight then, so the view is the loop's to read), before the command is parsed further.
 *
 * THE ESTIMATE
 *   A command costs about (messages it touches) x (work per message), in units of 0.1 us of
 *   a worker's CPU, each figure the server's CPU per message measured on the 10k-message
 *   bench store (release build, 433d65e + printf-free FETCH lines; issue 13):
 *     FETCH        per message 3 (flags, UID, size, dates, MODSEQ: 0.1-0.5 us), 100 (ENVELOPE,
 *                  a header or its fields: 9-11 us), 1500 (a body or a part, BODYSTRUCTURE,
 *                  RFC822, BINARY: 90-150 us)
 *     STORE        30 per message (2.8-4.5 us);   COPY / MOVE  60 per message (5.6 us)
 *     SEARCH       per message of the mailbox 1 (flags, dates, sizes, UIDs: 0.02-0.09 us),
 *                  plus for each key that reads the messages (each is answered once, as a
 *                  set, so two such keys cost twice): 20 for FROM, TO, CC, SUBJECT and SENT*
 *                  (the store's header indexes: 0.7-1.9 us), 80 for HEADER and BCC (each
 *                  message's header read and unfolded: 6.9-7.0 us), 250 for BODY and TEXT
 *                  (see "SEARCH BODY/TEXT" below)
 *     APPEND, EXPUNGE, UID EXPUNGE, CLOSE, DELETE, RENAME   long: each commits with an
 *                  fsync (APPEND: acknowledged means durable) or deletes rows, FTS entries
 *                  and blobs (10-25 ms here even for one message)
 *     anything else (NOOP, CHECK, LOGIN, SELECT, STATUS, LIST, IDLE ...)  short
 *   Up to IMAP_LANE_SHORT_MAX units (10 ms) the command is short: FETCH FLAGS of 33,000
 *   messages, the headers of 1,000, 66 whole messages, a STORE of 3,333, a COPY of 1,666, a
 *   SEARCH UNSEEN in a mailbox of 100,000, a SEARCH FROM in one of 4,761, a SEARCH HEADER
 *   in one of 1,234 or a SEARCH TEXT in one of 398. (The first
 *   table, in units of 10 us, counted FETCH FLAGS at 10 us a message, 30-100 times what it
 *   costs, so FETCH 1:* (UID FLAGS) of 10,000 messages, 1 ms of work, went to the writer's
 *   long lane and waited there behind drain steps and purge batches: 14 ms.) A set counts
 *   the numbers it names, clamped to the
 *   mailbox (sequence numbers to the message count, UIDs to UIDNEXT - 1 and the message
 *   count), so "1:*" is the whole mailbox and a UID set with gaps counts at most what exists.
 *   The set is read with imap_parse_seqset, as the command reads it: each number once,
 *   however the client overlapped its ranges.
 *
 * SEARCH BODY/TEXT
 *   Since schema 9 (a trigram index without positions, src/store/store_fts.c) the index
 *   gives the candidate rows, those holding all of the string's trigrams, and each
 *   candidate's stored text is then read and checked. Measured on the 10k-message bench
 *   store (release build, server CPU of every thread from /proc/PID/task/N/schedstat, load
 *   5-9, min and max of 3): a string every message holds costs 13-24 us a message
 *   ("bigmail", "corpus", "aaaofa"; two TEXT keys 33-35 us), a rare one 0.35-0.45 us a
 *   message (100 hits in 10,000: 3.5-4.4 ms), a string of one or two characters (no
 *   trigram: LIKE over every body) 10.5-11.6 us, one of exactly three in TEXT (the MATCH is
 *   exact, no text read) 3.5-4.9 us. How many candidates a string has is only known by
 *   reading the index, which the loop cannot do, so the estimate takes the common string:
 *   25 us a message (250). A rare string in a big mailbox then waits in the long lane for
 *   a few ms it did not need to; the other way round (the estimate before this one, 1.2 us
 *   a message), a common string in a mailbox of 8,000 took ~200 ms on the reader thread,
 *   and every short read of that worker's users waited behind it.
 *   Mail a drain step stored is in the store's full-text backlog until the worker builds its
 *   rows (worker.c THE DRAIN), and each BODY or TEXT key parses every backlog body again:
 *   ~0.11 ms a body (docs/BENCHMARKS.md, "Queued mail visible sooner"), counted as 1100 a
 *   body per such key (open_store.fts_backlog, the worker's count), so 91 backlog bodies
 *   make a TEXT search long however small the mailbox.
 *
 * READS
 *   A short command that only reads goes to the worker's reader thread (JOB_LANE_READ,
 *   worker.c READERS), where no write of the same user holds it up: NOOP and CHECK (a view
 *   sync), SEARCH, and a FETCH that sets no \Seen (RFC 3501 6.4.5: BODY[...], BINARY[...],
 *   RFC822 and RFC822.TEXT set it, their .PEEK forms and everything else do not; in a
 *   read-only view (EXAMINE) nothing does). A long read stays in the writer's long lane.
 *
 * SELECTS
 *   SELECT and EXAMINE go to the reader thread too, in any authenticated state: in the
 *   writer's short lane a SELECT waited for whatever job its worker's writer ran, its own
 *   user's long COPY or EXPUNGE included (issue 13). Their reads go through the reader
 *   handle; the store's view cache they share takes a lock (imap_view_cache.c); SELECT's
 *   \Recent claim, its one write, follows the reader's try-once rule (imap_recent.c). A
 *   session whose view still owes a \Recent claim (one a read job could not make) SELECTs
 *   on the writer: the claim must be made before the view is replaced, and only the writer
 *   waits for the lock to make it (else it would be dropped, and the next session to select
 *   that mailbox would see those messages as recent as well). A SELECT that must list a
 *   mailbox no view of which is cached or saved reads every message (seconds at 1,000,000)
 *   and holds up the worker's other reads for that long, as it held up the writer's short
 *   lane before.
 *
 * STATUS, LIST, LSUB
 *   These go to the reader thread too, in any authenticated state: STATUS reads the
 *   mailbox's row (its counters) and, with a mailbox selected, syncs the view as NOOP does;
 *   LIST and LSUB read the mailboxes and subscriptions (and with RETURN (STATUS ...) the
 *   counters). A client checking its folders for new mail sends a STATUS per folder, often
 *   all at once; on the writer each waited for whatever job the writer ran (another user's
 *   APPEND and its fsync) and was followed by the work between jobs (issue 13).
 */
#include "imap_session.h"
#include "worker.h"

#include <string.h>
#include <strings.h>

#define IMAP_LANE_SHORT_MAX 100000
/* Work per message (THE ESTIMATE). */
#define IMAP_LANE_FETCH_META    3
#define IMAP_LANE_FETCH_HEADER  100
#define IMAP_LANE_FETCH_BODY    1500
#define IMAP_LANE_STORE         30
#define IMAP_LANE_COPY          60
#define IMAP_LANE_SEARCH_META   1   /* any SEARCH, per message of the mailbox */
#define IMAP_LANE_SEARCH_INDEX  20  /* + each FROM, TO, CC, SUBJECT, SENT* key */
#define IMAP_LANE_SEARCH_HEADER 80  /* + each HEADER, BCC key */
#define IMAP_LANE_SEARCH_TEXT   250 /* + each BODY, TEXT key (SEARCH BODY/TEXT) */
/* + each BODY, TEXT key, per body of the store's full-text backlog (SEARCH BODY/TEXT) */
#define IMAP_LANE_SEARCH_BACKLOG 1100
/* + SORT: each message's keys from the kept header fields, and the sort (0.7-1.6 us a
 * message at 10,000 for DATE, SUBJECT or FROM) */
#define IMAP_LANE_SORT 15

/* The numbers of 1..hi in [first, last] (0 if none). */
static uint64_t imap_lane_span(uint64_t first, uint64_t last, uint64_t hi)
{
    first = first < 1 ? 1 : first;
    last = last > hi ? hi : last;
    return last >= first ? last - first + 1 : 0;
}

/* How many numbers of 1..star the set names, read by imap_parse_seqset (the parser the
 * command itself uses): its ranges are disjoint, so each number counts once; the ranges
 * naming '*' are one interval, whose overlap with the others is counted once too. 0 for
 * anything that does not parse (the command fails at once). */
static uint64_t imap_lane_set_count(const struct imap_node *n, uint64_t star)
{
    if (n == NULL || n->type != IMAP_NODE_ATOM) {
        return 0;
    }
    struct imap_seqset set;
    if (imap_parse_seqset(n->data, n->len, &set) != 0) {
        return 0;
    }
    uint32_t star32 = star > UINT32_MAX ? UINT32_MAX : (uint32_t)star;
    uint32_t lo = 0, hi = 0;
    int has_span = imap_seqset_star_span(&set, star32, &lo, &hi);
    uint64_t total = has_span ? imap_lane_span(lo, hi, star) : 0;
    for (size_t i = 0; i < set.count; i++) {
        uint64_t first = set.ranges[i].first, last = set.ranges[i].last;
        total += imap_lane_span(first, last, star);
        if (has_span) { /* already counted as part of the star span */
            total -= imap_lane_span(first > lo ? first : lo, last < hi ? last : hi, star);
        }
    }
    imap_seqset_free(&set);
    return total;
}

/* Whether the n bytes at p contain word, ASCII case-insensitively. */
static int imap_lane_has(const char *p, size_t n, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++) {
        if (strncasecmp(p + i, word, w) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The work per message of one FETCH item (an atom; a list's atoms are looked at one by
 * one). */
static uint64_t imap_lane_fetch_item(const struct imap_node *n)
{
    const char *p = n->data;
    size_t len = n->len;
    if (imap_lane_has(p, len, "BODY[HEADER") || imap_lane_has(p, len, "BODY.PEEK[HEADER") ||
        imap_lane_has(p, len, "RFC822.HEADER") || imap_lane_has(p, len, "ENVELOPE") ||
        imap_lane_has(p, len, "ALL")) {
        return IMAP_LANE_FETCH_HEADER;
    }
    if (imap_lane_has(p, len, "BODY") || imap_lane_has(p, len, "BINARY") ||
        imap_lane_has(p, len, "FULL") ||
        (imap_lane_has(p, len, "RFC822") && !imap_lane_has(p, len, "RFC822.SIZE"))) {
        return IMAP_LANE_FETCH_BODY;
    }
    return IMAP_LANE_FETCH_META;
}

/* Whether one FETCH item (an atom) sets \Seen in a read-write view. */
static int imap_lane_fetch_item_writes(const struct imap_node *n)
{
    const char *p = n->data;
    size_t len = n->len;
    if (imap_lane_has(p, len, "BODY[") || imap_lane_has(p, len, "BINARY[")) {
        return 1;
    }
    if (imap_lane_has(p, len, "RFC822")) {
        return !imap_lane_has(p, len, "RFC822.SIZE") && !imap_lane_has(p, len, "RFC822.HEADER");
    }
    return 0;
}

/* Whether a FETCH only reads (sets no \Seen); anything it cannot read counts as a write. */
static int imap_lane_fetch_reads_only(const struct imap_session *s, const struct imap_command *cmd)
{
    const struct imap_node *items = imap_arg(cmd, 1);
    if (s->view.readonly) {
        return 1;
    }
    if (items != NULL && items->type == IMAP_NODE_ATOM) {
        return !imap_lane_fetch_item_writes(items);
    }
    if (items == NULL || items->type != IMAP_NODE_LIST) {
        return 0;
    }
    for (uint32_t i = items->child; i != IMAP_NODE_NONE;) {
        const struct imap_node *n = imap_node(cmd, i);
        if (n->type == IMAP_NODE_ATOM && imap_lane_fetch_item_writes(n)) {
            return 0;
        }
        i = n->next;
    }
    return 1;
}

static uint64_t imap_lane_fetch_cost(const struct imap_command *cmd)
{
    const struct imap_node *items = imap_arg(cmd, 1);
    uint64_t per = IMAP_LANE_FETCH_META;
    if (items != NULL && items->type == IMAP_NODE_LIST) {
        for (uint32_t i = items->child; i != IMAP_NODE_NONE;) {
            const struct imap_node *n = imap_node(cmd, i);
            if (n->type == IMAP_NODE_ATOM) {
                uint64_t c = imap_lane_fetch_item(n);
                per = c > per ? c : per;
            }
            i = n->next;
        }
    } else if (items != NULL && items->type == IMAP_NODE_ATOM) {
        per = imap_lane_fetch_item(items);
    }
    return per;
}

/* The work per message of one SEARCH key (an atom) that reads the messages, 0 for any
 * other; *values: how many arguments it takes (strings, never keys). */
static uint64_t imap_lane_search_key(const struct imap_node *n, int *values)
{
    static const struct {
        const char *name;
        uint64_t cost;
        int values;
    } keys[] = {
        {"FROM", IMAP_LANE_SEARCH_INDEX, 1},       {"TO", IMAP_LANE_SEARCH_INDEX, 1},
        {"CC", IMAP_LANE_SEARCH_INDEX, 1},         {"SUBJECT", IMAP_LANE_SEARCH_INDEX, 1},
        {"SENTBEFORE", IMAP_LANE_SEARCH_INDEX, 1}, {"SENTON", IMAP_LANE_SEARCH_INDEX, 1},
        {"SENTSINCE", IMAP_LANE_SEARCH_INDEX, 1},  {"BCC", IMAP_LANE_SEARCH_HEADER, 1},
        {"HEADER", IMAP_LANE_SEARCH_HEADER, 2},    {"BODY", IMAP_LANE_SEARCH_TEXT, 1},
        {"TEXT", IMAP_LANE_SEARCH_TEXT, 1},
    };
    *values = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (n->len == strlen(keys[i].name) && strncasecmp(n->data, keys[i].name, n->len) == 0) {
            *values = keys[i].values;
            return keys[i].cost;
        }
    }
    return 0;
}

/* The work per message of the keys from node i on (siblings, and lists at any depth; NOT
 * and OR only nest keys), each key counted: each is answered once over the mailbox. A key's
 * values are skipped, so "SUBJECT from" counts SUBJECT alone; an atom elsewhere that only
 * looks like a key (KEYWORD text) counts too: an estimate on the safe side. *text_keys gets
 * the BODY and TEXT keys among them (added to). */
static uint64_t
imap_lane_search_keys(const struct imap_command *cmd, uint32_t i, int depth, uint64_t *text_keys)
{
    uint64_t per = 0;
    while (i != IMAP_NODE_NONE) {
        const struct imap_node *n = imap_node(cmd, i);
        int values = 0;
        if (n->type == IMAP_NODE_ATOM) {
            uint64_t key = imap_lane_search_key(n, &values);
            per += key;
            *text_keys += key == IMAP_LANE_SEARCH_TEXT ? 1U : 0U;
        } else if (n->type == IMAP_NODE_LIST && depth < IMAP_PARSE_DEPTH_MAX) {
            per += imap_lane_search_keys(cmd, n->child, depth + 1, text_keys);
        }
        i = n->next;
        for (; values > 0 && i != IMAP_NODE_NONE; values--) {
            i = imap_node(cmd, i)->next;
        }
    }
    return per;
}

/* The work of a SEARCH (THE ESTIMATE, SEARCH BODY/TEXT): per message of the mailbox, and
 * per body of the full-text backlog for each BODY or TEXT key (each such body is parsed
 * again, ~110 us, as long as its full-text row is not built). */
static uint64_t imap_lane_search_cost(const struct imap_session *s,
                                      const struct imap_command *cmd,
                                      uint32_t keys,
                                      uint64_t messages)
{
    uint64_t text_keys = 0;
    uint64_t per = IMAP_LANE_SEARCH_META + imap_lane_search_keys(cmd, keys, 0, &text_keys);
    uint64_t backlog = s->store != NULL ? s->store->fts_backlog : 0;
    return messages * per + text_keys * backlog * IMAP_LANE_SEARCH_BACKLOG;
}

enum job_lane imap_command_lane(const struct imap_session *s, const struct imap_command *cmd)
{
    const char *name = cmd->name;
    uint64_t messages = s->state == IMAP_SELECTED ? s->view.count : 0;
    /* UIDs name at most the messages there are, and none past UIDNEXT - 1. */
    uint64_t star = cmd->uid && s->view.uidnext > 0 ? s->view.uidnext - 1 : messages;
    uint64_t cost = 0;
    int reads = strcmp(name, "NOOP") == 0 || strcmp(name, "CHECK") == 0 ||
                strcmp(name, "SEARCH") == 0 || strcmp(name, "SORT") == 0 ||
                (strcmp(name, "FETCH") == 0 && imap_lane_fetch_reads_only(s, cmd));
    if (strcmp(name, "FETCH") == 0 || strcmp(name, "STORE") == 0 || strcmp(name, "COPY") == 0 ||
        strcmp(name, "MOVE") == 0) {
        uint64_t count = imap_lane_set_count(imap_arg(cmd, 0), star);
        count = count > messages ? messages : count;
        uint64_t per = strcmp(name, "FETCH") == 0   ? imap_lane_fetch_cost(cmd)
                       : strcmp(name, "STORE") == 0 ? IMAP_LANE_STORE
                                                    : IMAP_LANE_COPY;
        cost = count * per;
    } else if (strcmp(name, "SEARCH") == 0) {
        cost = imap_lane_search_cost(s, cmd, cmd->first, messages);
    } else if (strcmp(name, "SORT") == 0) { /* SORT (criteria) charset keys */
        const struct imap_node *keys = imap_arg(cmd, 2);
        cost =
            messages * IMAP_LANE_SORT +
            (keys != NULL ? imap_lane_search_cost(s, cmd, (uint32_t)(keys - cmd->nodes), messages)
                          : 0);
    } else if (strcmp(name, "APPEND") == 0 || strcmp(name, "EXPUNGE") == 0 ||
               strcmp(name, "CLOSE") == 0 || strcmp(name, "DELETE") == 0 ||
               strcmp(name, "RENAME") == 0) {
        return JOB_LANE_LONG;
    }
    if (cost > IMAP_LANE_SHORT_MAX) {
        return JOB_LANE_LONG;
    }
    if (strcmp(name, "STATUS") == 0 || strcmp(name, "LIST") == 0 ||
        strcmp(name, "LSUB") == 0) { /* STATUS, LIST, LSUB */
        return s->state != IMAP_NOT_AUTH ? JOB_LANE_READ : JOB_LANE_SHORT;
    }
    if (strcmp(name, "SELECT") == 0 || strcmp(name, "EXAMINE") == 0) { /* SELECTS */
        return s->state != IMAP_NOT_AUTH && s->view.recent_owed == 0 ? JOB_LANE_READ
                                                                     : JOB_LANE_SHORT;
    }
    return reads && s->state == IMAP_SELECTED ? JOB_LANE_READ : JOB_LANE_SHORT;
}
