/*
 * test_big_blocks.c -- the big blocks kept for reuse (issue 13): a FETCH of whole messages
 * builds its response in a job buffer of up to a few MiB (imapd/buf.c "BIG BLOCKS"), which
 * was malloc'd and freed per command, each new block faulted in afresh, page by page (with
 * the read windows', src/vfs/vfs_read_ahead.c "BIG WINDOWS", 16% of the server's CPU in a
 * FETCH of 50 random whole messages at 100,000).
 *
 * Counted, never timed: the minor page faults (getrusage) of the second of two identical
 * rounds. With the block kept, the second round touches only memory it touched before; with
 * a block malloc'd per round (under ASan a freed block stays in quarantine, so a new one is
 * always fresh memory) it faults every page in again: ~256 for 1 MiB. A kept buffer is wiped
 * before it is kept: the next user sees zeros, never the last response.
 */
#include "../imapd/buf.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static long bb_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* One job's response: 1 MiB of message bytes appended in 64 KiB pieces, then freed. */
static void bb_response_round(const char *fill)
{
    struct buf b = {0};
    for (int i = 0; i < 16; i++) {
        buf_add(&b, fill, 64 * 1024);
    }
    CHECK(!b.oom && b.len == 1024 * 1024);
    buf_free(&b);
}

static void test_response_buffer_kept(void)
{
    char *fill = malloc(64 * 1024);
    CHECK(fill != NULL);
    if (fill == NULL) {
        return;
    }
    memset(fill, 'm', 64 * 1024);
    bb_response_round(fill);
    long before = bb_faults();
    bb_response_round(fill);
    long faults = bb_faults() - before;
    printf("  # page faults of the second 1 MiB response: %ld\n", faults);
    CHECK(faults < 64);
    /* the kept block was wiped: a buffer that grows into it reads no old byte */
    struct buf b = {0};
    CHECK_EQ_INT(buf_reserve(&b, 1024 * 1024 - 1), 0);
    size_t nonzero = 0;
    for (size_t i = 0; i < b.cap; i++) {
        nonzero += b.data[i] != 0;
    }
    CHECK_EQ_INT((int)nonzero, 0);
    buf_free(&b);
    free(fill);
}

int main(void)
{
    TEST(test_response_buffer_kept);
    return th_summary();
}
