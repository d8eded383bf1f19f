/*
 * test_imap_lane.c -- which worker lane a command goes into (imapd/imap_lane.c): the size of
 * its sequence set, read with the command's own parser (imap_parse_seqset), clamped to the
 * mailbox, each number counted once however the client overlapped its ranges; and which
 * commands only read (JOB_LANE_READ: the worker's reader thread, worker.c READERS): a FETCH
 * that sets no \Seen (RFC 3501 6.4.5), SEARCH, NOOP; and SELECT and EXAMINE (imap_lane.c
 * SELECTS), unless the view owes a \Recent claim.
 */
#include "../imapd/imap_parse.h"
#include "../imapd/imap_session.h"
#include "../imapd/worker.h"
#include "harness.h"

#include <stdio.h>
#include <string.h>

/* The lane of line in a selected mailbox of count messages with UIDNEXT uidnext; -1 if
 * the line does not parse (no lane: the caller's check fails). */
static int il_readonly;         /* the view is read-only (EXAMINE) */
static int il_not_selected;     /* the session is authenticated, nothing selected */
static uint32_t il_recent_owed; /* the view's \Recent claim owed below this UID (0: none) */
static uint64_t il_backlog;     /* bodies in the store's full-text backlog (NULL store: none) */

static int il_lane(const char *line, size_t count, uint32_t uidnext)
{
    static struct imap_session s; /* large: zeroed once, only these fields read */
    s.state = il_not_selected ? IMAP_AUTH : IMAP_SELECTED;
    s.view.readonly = il_readonly;
    s.view.count = count;
    s.view.uidnext = uidnext;
    s.view.recent_owed = il_recent_owed;
    static struct open_store store;
    store.fts_backlog = il_backlog;
    s.store = il_backlog > 0 ? &store : NULL;
    struct imap_command cmd;
    char err[128], text[256];
    int n = snprintf(text, sizeof text, "%s\r\n", line);
    if (n < 0 || (size_t)n >= sizeof text ||
        imap_parse_command((const uint8_t *)text, (size_t)n, &cmd, err, sizeof err) !=
            IMAP_PARSE_OK) {
        return -1;
    }
    int lane = (int)imap_command_lane(&s, &cmd);
    imap_command_free(&cmd);
    return lane;
}

/* STORE costs 30 a message (3 us), the limit is 100000 (10 ms): a set of up to 3333
 * existing messages is short. */
static void test_set_sizes(void)
{
    CHECK_EQ_INT(il_lane("a STORE 1:3333 +FLAGS (\\Seen)", 10000, 10001), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a STORE 1:3334 +FLAGS (\\Seen)", 10000, 10001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a STORE 1:* +FLAGS (\\Seen)", 10000, 10001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a STORE 1:* +FLAGS (\\Seen)", 3000, 3001), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a STORE *:6668 +FLAGS (\\Seen)", 10000, 10001), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a STORE *:6667 +FLAGS (\\Seen)", 10000, 10001), JOB_LANE_LONG);
    /* past the end counts nothing: sequence numbers stop at the message count */
    CHECK_EQ_INT(il_lane("a STORE 9000:90000 +FLAGS (\\Seen)", 10000, 10001), JOB_LANE_SHORT);
    /* UIDs: clamped to UIDNEXT - 1, and to the messages there are */
    CHECK_EQ_INT(il_lane("a UID STORE 1:* +FLAGS (\\Seen)", 3000, 90000), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a UID STORE 86001:* +FLAGS (\\Seen)", 10000, 90000), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a UID STORE 86667:* +FLAGS (\\Seen)", 10000, 90000), JOB_LANE_SHORT);
    /* COPY costs 60 a message: 1666 are short */
    CHECK_EQ_INT(il_lane("a COPY 1:1666 Trash", 10000, 10001), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a COPY 1:1667 Trash", 10000, 10001), JOB_LANE_LONG);
}

/* Each number counts once: overlapping and repeated ranges, and ranges inside the '*'
 * span, are the messages they name, not the sum of what was written (the lane's own
 * counting parser added them up, sending a STORE of 600 messages to the long lane). */
static void test_overlaps_count_once(void)
{
    CHECK_EQ_INT(il_lane("a STORE 1:2000,1:2000 +FLAGS (\\Seen)", 20000, 20001), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a STORE 2000:1,1000:3000 +FLAGS (\\Seen)", 20000, 20001), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a STORE 18000:*,18500:19500,19999 +FLAGS (\\Seen)", 20000, 20001),
                 JOB_LANE_SHORT); /* 3001 */
    CHECK_EQ_INT(il_lane("a STORE 1:1500,18500:*,18000:18600 +FLAGS (\\Seen)", 20000, 20001),
                 JOB_LANE_LONG); /* 1500 + 1501 + 500 */
    CHECK_EQ_INT(il_lane("a STORE 1:1800,*:18800,18500:19500 +FLAGS (\\Seen)", 20000, 20001),
                 JOB_LANE_SHORT); /* 1800 + 1201 + 300 */
}

/* What does not parse goes to the short lane: the command fails at once. */
static void test_bad_sets(void)
{
    CHECK_EQ_INT(il_lane("a STORE 1:x +FLAGS (\\Seen)", 5000, 5001), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a STORE 0:* +FLAGS (\\Seen)", 5000, 5001), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a FETCH (1:*) FLAGS", 5000, 5001), JOB_LANE_READ); /* a read */
}

/* Reads go to the reader; what sets \Seen (RFC 3501 6.4.5: BODY[...], BINARY[...], RFC822,
 * RFC822.TEXT, in a read-write view) and every other write stays on the writer; a long read
 * stays in the long lane. */
static void test_reads(void)
{
    CHECK_EQ_INT(
        il_lane("a UID FETCH 1:50 (UID BODY.PEEK[HEADER.FIELDS (From Subject Date)])", 500, 501),
        JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID FETCH 7 (UID BODY.PEEK[])", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1:10 (FLAGS RFC822.SIZE INTERNALDATE)", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1 (RFC822.HEADER ENVELOPE)", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1 BINARY.PEEK[1]", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1 FULL", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID FETCH 7 (UID BODY[])", 500, 501), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a FETCH 7 (FLAGS BODY[HEADER.FIELDS (From)])", 500, 501), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a FETCH 7 RFC822", 500, 501), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a FETCH 7 RFC822.TEXT", 500, 501), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a FETCH 1 BINARY[1]", 500, 501), JOB_LANE_SHORT);
    il_readonly = 1; /* EXAMINE: nothing sets \Seen */
    CHECK_EQ_INT(il_lane("a UID FETCH 7 (UID BODY[])", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 7 RFC822", 500, 501), JOB_LANE_READ);
    il_readonly = 0;
    CHECK_EQ_INT(il_lane("a UID SEARCH FROM anna", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a SEARCH FROM anna", 10000, 10001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a FETCH 1:* (UID BODY.PEEK[])", 5000, 5001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a NOOP", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a CHECK", 500, 501), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID STORE 7 +FLAGS (\\Seen)", 500, 501), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a SELECT INBOX", 500, 501), JOB_LANE_READ); /* SELECTS */
    CHECK_EQ_INT(il_lane("a EXAMINE INBOX", 500, 501), JOB_LANE_READ);
    il_recent_owed = 40; /* a claim the reader could not make: the writer waits to make it */
    CHECK_EQ_INT(il_lane("a SELECT INBOX", 500, 501), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a EXAMINE Other", 500, 501), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a NOOP", 500, 501), JOB_LANE_READ); /* a sync tries it again */
    il_recent_owed = 0;
    CHECK_EQ_INT(il_lane("a STATUS INBOX (MESSAGES)", 500, 501), JOB_LANE_READ); /* STATUS */
    il_recent_owed = 40; /* its sync tries the claim, as NOOP's */
    CHECK_EQ_INT(il_lane("a STATUS Other (UNSEEN RECENT)", 500, 501), JOB_LANE_READ);
    il_recent_owed = 0;
    CHECK_EQ_INT(il_lane("a EXPUNGE", 500, 501), JOB_LANE_LONG);
    il_not_selected = 1; /* nothing selected: no view to read */
    CHECK_EQ_INT(il_lane("a NOOP", 0, 0), JOB_LANE_SHORT);
    CHECK_EQ_INT(il_lane("a SELECT INBOX", 0, 0), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a EXAMINE INBOX", 0, 0), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a STATUS INBOX (MESSAGES UNSEEN)", 0, 0), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a LIST \"\" *", 0, 0), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a LSUB \"\" *", 0, 0), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a LIST \"\" * RETURN (STATUS (MESSAGES UNSEEN))", 0, 0), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a CREATE Work", 0, 0), JOB_LANE_SHORT); /* writes stay */
    il_not_selected = 0;
}

/* The estimate follows the measured CPU per message (imap_lane.c THE ESTIMATE, issue 13):
 * FETCH 1:* (UID FLAGS) of 10,000 messages is ~1 ms of work and goes to the reader, where
 * no drain step, purge batch or fsync of the writer holds it up (the table of 10 us per
 * message sent it to the writer's long lane); bigger or dearer reads stay long. */
static void test_measured_costs(void)
{
    CHECK_EQ_INT(il_lane("a FETCH 1:* (UID FLAGS)", 10000, 10001), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID FETCH 1:* (UID FLAGS)", 10000, 10001), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1:* (UID RFC822.SIZE INTERNALDATE FLAGS)", 10000, 10001),
                 JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1:* (UID FLAGS MODSEQ)", 33333, 33334), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1:* (UID FLAGS)", 100000, 100001), JOB_LANE_LONG);
    /* a header or the envelope: 10 us a message, 1000 of them */
    CHECK_EQ_INT(il_lane("a FETCH 1:1000 (ENVELOPE)", 10000, 10001), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1:1001 (ENVELOPE)", 10000, 10001), JOB_LANE_LONG);
    CHECK_EQ_INT(
        il_lane("a FETCH 1:1001 (UID BODY.PEEK[HEADER.FIELDS (From Subject)])", 10000, 10001),
        JOB_LANE_LONG);
    /* a whole message or BODYSTRUCTURE: 150 us, 66 of them */
    CHECK_EQ_INT(il_lane("a FETCH 1:66 (BODY.PEEK[])", 10000, 10001), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a FETCH 1:67 (FLAGS BODYSTRUCTURE)", 10000, 10001), JOB_LANE_LONG);
    /* SEARCH: flags, dates and sets are 0.1 us a message; keys on the header indexes 2 us
     * more each, at any depth */
    CHECK_EQ_INT(il_lane("a UID SEARCH UNSEEN", 10000, 10001), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID SEARCH SINCE 1-Jan-2020 NOT DELETED", 100000, 100001),
                 JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID SEARCH FROM anna", 4761, 4762), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID SEARCH FROM anna", 4762, 4763), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a SEARCH OR UNSEEN (NOT (SUBJECT x))", 10000, 10001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a SEARCH CHARSET UTF-8 text x", 10000, 10001), JOB_LANE_LONG);
    /* SORT: its program's cost and 1.5 us a message for the keys and the sort */
    CHECK_EQ_INT(il_lane("a UID SORT (DATE) UTF-8 ALL", 6250, 6251), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID SORT (DATE) UTF-8 ALL", 6251, 6252), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a SORT (SUBJECT) UTF-8 FROM anna", 3000, 3001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a SORT (SUBJECT) UTF-8", 6000, 6001), JOB_LANE_READ);
}

/* SEARCH BODY/TEXT since schema 9 (imap_lane.c SEARCH BODY/TEXT): each candidate of the
 * trigram index has its stored text read and checked, 13-24 us a message for a string every
 * message holds. The estimate before counted 1.2 us a message for any header or text key, so
 * a TEXT search in a mailbox of 8,000 went to the reader thread and held it ~200 ms. */
static void test_search_text(void)
{
    CHECK_EQ_INT(il_lane("a UID SEARCH TEXT meeting", 8000, 8001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a UID SEARCH BODY meeting", 2000, 2001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a UID SEARCH NOT (TEXT \"a\")", 1000, 1001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a UID SEARCH TEXT meeting", 398, 399), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID SEARCH TEXT meeting", 399, 400), JOB_LANE_LONG);
    /* each key is answered once over the mailbox: two cost twice */
    CHECK_EQ_INT(il_lane("a SEARCH BODY x", 300, 301), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a SEARCH BODY x OR TEXT y FROM z", 300, 301), JOB_LANE_LONG);
    /* HEADER and BCC read each message's header: 7 us */
    CHECK_EQ_INT(il_lane("a SEARCH HEADER X-Spam yes", 1234, 1235), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a SEARCH HEADER X-Spam yes", 1235, 1236), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a SEARCH BCC anna", 2000, 2001), JOB_LANE_LONG);
    /* SENT* read the Date header's index: 1.3 us, not a view key */
    CHECK_EQ_INT(il_lane("a SEARCH SENTSINCE 1-Dec-2025", 10000, 10001), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a SEARCH SINCE 1-Dec-2025", 10000, 10001), JOB_LANE_READ);
    /* a key's values are not keys: "SUBJECT text" is one index key, short at 4,761 */
    CHECK_EQ_INT(il_lane("a SEARCH SUBJECT text", 4761, 4762), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a SEARCH HEADER body text", 1234, 1235), JOB_LANE_READ);
}

/* Each BODY or TEXT key parses every body of the full-text backlog again (~110 us each,
 * 1100 units): 90 of them keep a TEXT search of one message short, 91 make it long, two
 * keys count them twice; keys that read no text do not count them. The old estimate counted
 * the mailbox alone: a TEXT search of 10 messages with 1,000 drained bodies waiting (~110
 * ms) went to the reader thread. */
static void test_search_backlog(void)
{
    il_backlog = 1000;
    CHECK_EQ_INT(il_lane("a UID SEARCH TEXT meeting", 10, 11), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a UID SEARCH FROM anna", 10, 11), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a UID SEARCH HEADER X-Spam yes", 10, 11), JOB_LANE_READ);
    il_backlog = 90;
    CHECK_EQ_INT(il_lane("a SEARCH TEXT x", 1, 2), JOB_LANE_READ);
    il_backlog = 91;
    CHECK_EQ_INT(il_lane("a SEARCH TEXT x", 1, 2), JOB_LANE_LONG);
    CHECK_EQ_INT(il_lane("a SEARCH NOT (BODY x)", 1, 2), JOB_LANE_LONG);
    il_backlog = 46;
    CHECK_EQ_INT(il_lane("a SEARCH BODY x", 1, 2), JOB_LANE_READ);
    CHECK_EQ_INT(il_lane("a SEARCH BODY x OR TEXT y SEEN", 1, 2), JOB_LANE_LONG);
    il_backlog = 0;
    CHECK_EQ_INT(il_lane("a UID SEARCH TEXT meeting", 398, 399), JOB_LANE_READ);
}

int main(void)
{
    TEST(test_set_sizes);
    TEST(test_overlaps_count_once);
    TEST(test_bad_sets);
    TEST(test_reads);
    TEST(test_measured_costs);
    TEST(test_search_text);
    TEST(test_search_backlog);
    return th_summary();
}
