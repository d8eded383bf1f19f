/*
 * test_imap_frame.c -- IMAP command framing (imapd/imap_frame.c), apart from any socket: a
 * command is its line plus the literals announced at line ends (RFC 3501 4.3: "{n}" waits
 * for the server's "+", RFC 7888 LITERAL+ "{n+}" does not), within the limits of
 * docs/IMAPD.md "Limits": line_max, the pre-login bound on a whole command, literal_max for
 * APPEND and CONFIG_SMALL_LITERAL_MAX for other literals, and the server-wide
 * literal_total_max, which one command within literal_max always gets through.
 */
#include "../imapd/config.h"
#include "../imapd/imap_frame.h"
#include "harness.h"

#include <string.h>

struct config g_config; /* what imap_frame.c reads; set by tf_config() */

static void tf_config(void)
{
    memset(&g_config, 0, sizeof g_config);
    g_config.line_max = 100;
    g_config.prelogin_bytes_max = 200;
    g_config.literal_max = 1000;
    g_config.literal_total_max = 1500;
}

static void tf_add(struct buf *in, const char *s)
{
    buf_add(in, s, strlen(s));
}

static void test_frame_line(void)
{
    tf_config();
    struct imap_frame f = {0};
    struct buf in = {0};
    size_t len = 0;
    uint64_t literal = 0;
    tf_add(&in, "a1 NOO");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_MORE);
    tf_add(&in, "P\r\na2 NOOP\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_COMMAND);
    CHECK_EQ_INT(len, 9);
    buf_consume(&in, len);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_COMMAND);
    CHECK_EQ_INT(len, 9);
    buf_free(&in);
}

static void test_frame_literals(void)
{
    tf_config();
    struct imap_frame f = {0};
    struct buf in = {0};
    size_t len = 0;
    uint64_t literal = 0;
    /* {n}: the server says "+" (FRAME_CONTINUE) before the client sends the bytes. */
    tf_add(&in, "a LOGIN {5}\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_CONTINUE);
    CHECK_EQ_INT(literal, 5);
    tf_add(&in, "al{3}");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_MORE);
    tf_add(&in, " {4+}\r\npw\r\n\r\n"); /* "{3}" inside a literal is data */
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_COMMAND);
    CHECK_EQ_INT(len, in.len);
    CHECK_EQ_INT(f.literal_reserved, 0);
    buf_free(&in);
    /* A raw line (a SASL response, IDLE's DONE) announces no literal. */
    f.raw_line = 1;
    tf_add(&in, "abc {5}\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_COMMAND);
    CHECK_EQ_INT(len, in.len);
    buf_free(&in);
}

/* A line over line_max after login is read to its end and thrown away, then answered with
 * its command's tag: in pieces, whole, without a tag, after a literal of the same command,
 * as a raw line, and ending in a literal announcement split over two reads. */
static void test_frame_line_too_long(void)
{
    tf_config();
    struct imap_frame f = {0};
    struct buf in = {0};
    size_t len = 0;
    uint64_t literal = 0;
    char line[160];
    memset(line, 'x', sizeof line);
    tf_add(&in, "a1 FETCH ");
    buf_add(&in, line, sizeof line); /* over line_max, no end yet: discarded as it comes */
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_MORE);
    CHECK_EQ_INT(in.len, 0);
    /* the connection frees an emptied input buffer that had grown (conn_process) and asks
     * again: nothing to discard, and no null pointer handed to memcpy (UBSan caught it) */
    buf_free(&in);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_MORE);
    CHECK(f.discard_line);
    buf_add(&in, line, sizeof line);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_MORE);
    tf_add(&in, "xxx\r\na NOOP\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LINE_TOO_LONG);
    CHECK(strcmp(f.long_tag, "a1") == 0);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_COMMAND);
    CHECK_EQ_INT(len, 8);
    CHECK(memcmp(in.data, "a NOOP\r\n", 8) == 0);
    buf_free(&in);
    /* whole in one read; then one with no tag (answered untagged) */
    tf_add(&in, "b2 SEARCH ");
    buf_add(&in, line, sizeof line);
    tf_add(&in, "\r\n(b3 ");
    buf_add(&in, line, sizeof line);
    tf_add(&in, "\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LINE_TOO_LONG);
    CHECK(strcmp(f.long_tag, "b2") == 0);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LINE_TOO_LONG);
    CHECK(strcmp(f.long_tag, "") == 0);
    CHECK_EQ_INT(in.len, 0);
    /* a line after a literal: the command's tag, and its literal's share given back */
    tf_add(&in, "c4 APPEND INBOX {10}\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_CONTINUE);
    CHECK_EQ_INT(f.literal_reserved, 10);
    tf_add(&in, "0123456789 ");
    buf_add(&in, line, sizeof line);
    tf_add(&in, "\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LINE_TOO_LONG);
    CHECK(strcmp(f.long_tag, "c4") == 0);
    CHECK_EQ_INT(f.literal_reserved, 0);
    /* a raw line (IDLE's DONE) has no tag, whatever it starts with */
    f.raw_line = 1;
    tf_add(&in, "d5 ");
    buf_add(&in, line, sizeof line);
    tf_add(&in, "\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LINE_TOO_LONG);
    CHECK(strcmp(f.long_tag, "") == 0);
    f.raw_line = 0;
    /* ending in {n+}: the client sends the literal anyway (the announcement split over two
     * reads); ending in {n}: it waits for a "+" that never comes, a BAD is the answer */
    tf_add(&in, "e6 APPEND INBOX ");
    buf_add(&in, line, sizeof line);
    tf_add(&in, " {1");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_MORE);
    tf_add(&in, "2+}\r\nf7 CREATE x\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LINE_TOO_LONG_LITERAL_PLUS);
    CHECK(strcmp(f.long_tag, "e6") == 0);
    buf_free(&in);
    tf_add(&in, "g8 APPEND INBOX ");
    buf_add(&in, line, sizeof line);
    tf_add(&in, " {12}\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LINE_TOO_LONG);
    CHECK(strcmp(f.long_tag, "g8") == 0);
    CHECK_EQ_INT(in.len, 0);
    buf_free(&in);
    /* before login nothing is discarded: refused at once (the session ends) */
    f = (struct imap_frame){0};
    tf_add(&in, "h9 LOGIN ");
    buf_add(&in, line, sizeof line);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_LINE_TOO_LONG);
    buf_free(&in);
}

static void test_frame_prelogin_bound(void)
{
    tf_config();
    struct imap_frame f = {0};
    struct buf in = {0};
    size_t len = 0;
    uint64_t literal = 0;
    /* Before login the whole command must fit in prelogin_bytes_max (200). */
    tf_add(&in, "a LOGIN {190}\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_LITERAL_TOO_BIG);
    CHECK_EQ_INT(len, in.len); /* the command so far: the client sends nothing more */
    CHECK_EQ_INT(literal, 190);
    buf_free(&in);
    tf_add(&in, "a LOGIN {190+}\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 1, &len, &literal), FRAME_LITERAL_PLUS_TOO_BIG);
    buf_free(&in);
    /* The same after login is within the small-literal limit. */
    f = (struct imap_frame){0};
    tf_add(&in, "a LOGIN {190}\r\n");
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_CONTINUE);
    imap_frame_reset(&f);
    CHECK_EQ_INT(f.literal_reserved, 0);
    buf_free(&in);
}

static void test_frame_literal_limits(void)
{
    tf_config();
    g_config.literal_max = CONFIG_SMALL_LITERAL_MAX * 2;
    g_config.literal_total_max = CONFIG_SMALL_LITERAL_MAX * 4;
    struct imap_frame f = {0};
    struct buf in = {0};
    size_t len = 0;
    uint64_t literal = 0;
    char line[80];
    /* Only APPEND's literal may exceed CONFIG_SMALL_LITERAL_MAX. */
    snprintf(line, sizeof line, "a SEARCH TEXT {%d}\r\n", CONFIG_SMALL_LITERAL_MAX + 1);
    tf_add(&in, line);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LITERAL_TOO_BIG);
    buf_free(&in);
    snprintf(line, sizeof line, "a APPEND INBOX {%d}\r\n", CONFIG_SMALL_LITERAL_MAX + 1);
    tf_add(&in, line);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_CONTINUE);
    imap_frame_reset(&f);
    buf_free(&in);
    snprintf(line, sizeof line, "a APPEND INBOX {%d}\r\n", CONFIG_SMALL_LITERAL_MAX * 2 + 1);
    tf_add(&in, line);
    CHECK_EQ_INT(imap_frame_next(&f, &in, 0, &len, &literal), FRAME_LITERAL_TOO_BIG);
    buf_free(&in);
}

static void test_frame_literal_total(void)
{
    tf_config(); /* literal_max 1000, literal_total_max 1500 */
    struct imap_frame a = {0}, b = {0};
    struct buf in_a = {0}, in_b = {0};
    size_t len = 0;
    uint64_t literal = 0;
    /* One command within literal_max always gets through, even over the total alone. */
    g_config.literal_total_max = 500;
    tf_add(&in_a, "a APPEND INBOX {900}\r\n");
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_CONTINUE);
    CHECK_EQ_INT(a.literal_reserved, 900);
    /* While it holds the budget, another connection's literal is refused for now. */
    tf_add(&in_b, "b APPEND INBOX {10}\r\n");
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_LITERAL_BUSY);
    buf_free(&in_b);
    tf_add(&in_b, "b APPEND INBOX {10+}\r\n");
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_LITERAL_PLUS_BUSY);
    buf_free(&in_b);
    /* Once the first command is whole (its bytes go to a job), the budget is free again. */
    char data[900];
    memset(data, 'm', sizeof data);
    buf_add(&in_a, data, sizeof data);
    tf_add(&in_a, "\r\n");
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_COMMAND);
    CHECK_EQ_INT(len, in_a.len);
    CHECK_EQ_INT(a.literal_reserved, 0);
    buf_consume(&in_a, len);
    tf_add(&in_b, "b APPEND INBOX {10}\r\n");
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_CONTINUE);
    /* A connection that goes away gives its share back (imap_frame_reset). */
    imap_frame_reset(&b);
    buf_free(&in_b);
    tf_add(&in_a, "c APPEND INBOX {900}\r\n");
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_CONTINUE);
    imap_frame_reset(&a);
    buf_free(&in_a);
}

/* Adds n bytes of 'u' (a long UID set, say) to in. */
static void tf_fill(struct buf *in, size_t n)
{
    static char block[4096];
    memset(block, 'u', sizeof block);
    for (size_t done = 0; done < n; done += sizeof block) {
        buf_add(in, block, n - done < sizeof block ? n - done : sizeof block);
    }
}

/* A line past CONFIG_LINE_FREE draws the rest from literal_total_max as it arrives, as
 * literals do: alone it always gets through (even past the budget), beside another command
 * holding the budget it is refused (read to its end, then NO [UNAVAILABLE] with its tag), and
 * every line of a command has its own free part. */
static void test_frame_long_line_budget(void)
{
    tf_config();
    g_config.line_max = 400000;
    g_config.literal_total_max = 100000;
    g_config.literal_max = 100000;
    struct imap_frame a = {0}, b = {0};
    struct buf in_a = {0}, in_b = {0};
    size_t len = 0;
    uint64_t literal = 0;
    /* alone: 150,000 bytes past the free part, over the budget, still taken */
    tf_add(&in_a, "a1 UID COPY ");
    tf_fill(&in_a, CONFIG_LINE_FREE + 150000);
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_MORE);
    CHECK(a.literal_reserved >= 150000);
    tf_add(&in_a, " Archive\r\n");
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_COMMAND);
    CHECK_EQ_INT(len, in_a.len);
    CHECK_EQ_INT(a.literal_reserved, 0);
    buf_free(&in_a);
    /* a line within the free part takes nothing */
    tf_add(&in_b, "b1 UID COPY ");
    tf_fill(&in_b, CONFIG_LINE_FREE - 100);
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_MORE);
    CHECK_EQ_INT(b.literal_reserved, 0);
    buf_free(&in_b);
    b = (struct imap_frame){0};
    /* beside a literal holding 90,000: 20,000 past the free part is refused, after its end */
    tf_add(&in_a, "a2 APPEND INBOX {90000}\r\n");
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_CONTINUE);
    tf_add(&in_b, "b2 UID MOVE ");
    tf_fill(&in_b, CONFIG_LINE_FREE + 20000);
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_MORE);
    CHECK_EQ_INT(b.literal_reserved, 0);
    tf_fill(&in_b, 1000);
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_MORE);
    tf_add(&in_b, " Trash\r\nb3 NOOP\r\n");
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_LINE_BUSY);
    CHECK(strcmp(b.long_tag, "b2") == 0);
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_COMMAND);
    CHECK(len == 9 && memcmp(in_b.data, "b3 NOOP\r\n", 9) == 0);
    buf_free(&in_b);
    /* once the literal's command is whole, the same line goes through */
    tf_fill(&in_a, 90000);
    tf_add(&in_a, "\r\n");
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_COMMAND);
    buf_free(&in_a);
    tf_add(&in_b, "b4 UID MOVE ");
    tf_fill(&in_b, CONFIG_LINE_FREE + 20000);
    tf_add(&in_b, " Trash\r\n");
    CHECK_EQ_INT(imap_frame_next(&b, &in_b, 0, &len, &literal), FRAME_COMMAND);
    buf_free(&in_b);
    /* two long lines of one command: each has its own free part; the first line's share
     * stays held (its bytes are still buffered) until the command is whole */
    tf_add(&in_a, "a5 APPEND INBOX (");
    tf_fill(&in_a, CONFIG_LINE_FREE + 10000);
    tf_add(&in_a, ") {5}\r\n");
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_CONTINUE);
    uint64_t first = a.literal_reserved;
    CHECK(first >= 10000 + 5 && first < 10000 + 100);
    tf_add(&in_a, "hello x");
    tf_fill(&in_a, CONFIG_LINE_FREE - 50);
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_MORE);
    CHECK_EQ_INT(a.literal_reserved, first); /* the second line is within its free part */
    tf_fill(&in_a, 5000);
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_MORE);
    CHECK(a.literal_reserved > first + 4000);
    tf_add(&in_a, "\r\n");
    CHECK_EQ_INT(imap_frame_next(&a, &in_a, 0, &len, &literal), FRAME_COMMAND);
    CHECK_EQ_INT(a.literal_reserved, 0);
    buf_free(&in_a);
}

int main(void)
{
    TEST(test_frame_line);
    TEST(test_frame_literals);
    TEST(test_frame_line_too_long);
    TEST(test_frame_prelogin_bound);
    TEST(test_frame_literal_limits);
    TEST(test_frame_literal_total);
    TEST(test_frame_long_line_budget);
    return th_summary();
}
