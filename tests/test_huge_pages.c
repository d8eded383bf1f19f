/*
 * test_huge_pages.c -- the count of free huge-page-sized blocks read from /proc/buddyinfo
 * (imapd/huge_pages.c): orders of 2 MiB and above counted by their size, the DMA zone left
 * out, several nodes, a cut or odd text counting fewer (never more), other page sizes.
 */
#include "../imapd/huge_pages.h"
#include "harness.h"

#include <string.h>

/* This machine's own, 2026-12-04 (orders 0..10 of 4 KiB pages: order 9 = 2 MiB). */
static const char *const BUDDY = "Node 0, zone      DMA      0      0      0      0      0      0  "
                                 "    0      0      1      1      3 \n"
                                 "Node 0, zone    DMA32      0      4      2      2      1      2  "
                                 "    0      3      3      1    753 \n"
                                 "Node 0, zone   Normal      4     12      2     12      8     28  "
                                 "   16      9      5      2     14 \n";

static void test_counts_orders_of_a_huge_page_and_above(void)
{
    /* DMA32: 1 of order 9, 753 of order 10 (2 each); Normal: 2 + 2 * 14; DMA left out */
    CHECK_EQ_INT(huge_pages_free_in(BUDDY, 4096), 1 + 2 * 753 + 2 + 2 * 14);
    /* 64 KiB pages: order 5 is 2 MiB */
    CHECK_EQ_INT(huge_pages_free_in("Node 0, zone Normal 9 9 9 9 9 3 1\n", 65536), 3 + 2);
    /* a page size that does not divide 2 MiB, or none: unknown, 0 */
    CHECK_EQ_INT(huge_pages_free_in(BUDDY, 3000), 0);
    CHECK_EQ_INT(huge_pages_free_in(BUDDY, 0), 0);
}

static void test_nodes_and_odd_text(void)
{
    const char *two = "Node 0, zone   Normal 0 0 0 0 0 0 0 0 0 4 1\n"
                      "Node 1, zone   Normal 0 0 0 0 0 0 0 0 0 5 0\n"
                      "Node 1, zone  Movable 0 0 0 0 0 0 0 0 0 0 2";
    CHECK_EQ_INT(huge_pages_free_in(two, 4096), 4 + 2 + 5 + 4);
    CHECK_EQ_INT(huge_pages_free_in("", 4096), 0);
    CHECK_EQ_INT(huge_pages_free_in("no zones here\n\n", 4096), 0);
    /* a line cut short counts the orders it has */
    CHECK_EQ_INT(huge_pages_free_in("Node 0, zone Normal 0 0 0 0 0 0 0 0 0 7", 4096), 7);
    CHECK_EQ_INT(huge_pages_free_in("Node 0, zone Normal 0 0 0 0 0 0 0 0 0", 4096), 0);
    /* text where a count should be ends the line's counting */
    CHECK_EQ_INT(
        huge_pages_free_in("Node 0, zone Normal 0 0 0 0 0 0 0 0 0 x 9\nNode 1, zone Normal "
                           "0 0 0 0 0 0 0 0 0 1\n",
                           4096),
        1);
    /* a zone named like DMA but not DMA counts */
    CHECK_EQ_INT(huge_pages_free_in("Node 0, zone DMA32 0 0 0 0 0 0 0 0 0 3\n", 4096), 3);
}

static void test_this_kernel(void)
{
    /* whatever it says now; the call must not fail or hang (0 where /proc/buddyinfo is hidden) */
    size_t n = huge_pages_free();
    CHECK(n < ((size_t)1 << 40));
}

int main(void)
{
    TEST(test_counts_orders_of_a_huge_page_and_above);
    TEST(test_nodes_and_odd_text);
    TEST(test_this_kernel);
    return th_summary();
}
