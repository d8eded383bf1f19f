/*
 * huge_pages.c -- the free huge-page-sized blocks of the kernel's page allocator.
 *
 * WHY
 *   A fault in a mapping marked MADV_HUGEPAGE takes a free 2 MiB block if the allocator has
 *   one; if not, with the kernel's THP defrag setting "madvise" (its default), the faulting
 *   thread compacts memory first, which on a fragmented host can take a long time (a 1.16 s
 *   SELECT was seen on 2026-12-02). So mailvaultd asks for huge pages only when
 *   /proc/buddyinfo says enough such blocks are free at that moment (imap_msgs.c). No
 *   library reads buddyinfo; its format is one line per node and zone: "Node N, zone NAME"
 *   and then the count of free blocks of each order, 2^order pages each, from order 0 up.
 */
#include "huge_pages.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

size_t huge_pages_free_in(const char *text, size_t page_size)
{
    if (page_size == 0 || HUGE_PAGE_SIZE % page_size != 0) {
        return 0;
    }
    size_t total = 0;
    for (const char *line = text; line != NULL && *line != '\0';) {
        const char *end = strchr(line, '\n');
        const char *zone = strstr(line, "zone");
        if (zone != NULL && (end == NULL || zone < end)) {
            const char *p = zone + 4;
            while (*p == ' ') {
                p++;
            }
            const char *name = p;
            while (*p != ' ' && *p != '\n' && *p != '\0') {
                p++;
            }
            /* DMA: the first 16 MiB, kept for devices; a process's pages never come from it */
            int dma = p - name == 3 && memcmp(name, "DMA", 3) == 0;
            for (size_t order = 0; !dma && (end == NULL || p < end); order++) {
                char *next;
                unsigned long long n = strtoull(p, &next, 10);
                if (next == p || order >= 8 * sizeof(size_t) - 1) {
                    break;
                }
                p = next;
                size_t block = page_size << order;
                if (block >= HUGE_PAGE_SIZE) {
                    size_t each = block / HUGE_PAGE_SIZE;
                    total += n < (unsigned long long)(SIZE_MAX / 2 / each) ? (size_t)n * each
                                                                           : SIZE_MAX / 2;
                }
            }
        }
        line = end != NULL ? end + 1 : NULL;
    }
    return total;
}

size_t huge_pages_free(void)
{
    char buf[16384]; /* ~100 bytes a node and zone: room for 40 nodes */
    int fd = open("/proc/buddyinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    size_t len = 0;
    for (;;) {
        ssize_t got = read(fd, buf + len, sizeof buf - 1 - len);
        if (got <= 0) {
            break;
        }
        len += (size_t)got;
        if (len == sizeof buf - 1) {
            break; /* what fits is counted: fewer blocks, never more */
        }
    }
    (void)close(fd);
    buf[len] = '\0';
    long page = sysconf(_SC_PAGESIZE);
    return huge_pages_free_in(buf, page > 0 ? (size_t)page : 0);
}
