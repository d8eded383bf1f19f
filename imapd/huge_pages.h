/*
 * huge_pages.h -- whether the kernel has free memory in blocks of a transparent huge page
 * right now, so that a mapping that asks for huge pages gets them without the kernel
 * compacting memory first (imap_msgs.c).
 */
#ifndef MAILVAULTD_HUGE_PAGES_H
#define MAILVAULTD_HUGE_PAGES_H

#include <stddef.h>

/* The size of a transparent huge page with 4 KiB pages (x86-64's and arm64's PMD size). */
#define HUGE_PAGE_SIZE ((size_t)2 << 20)

/* How many free blocks of HUGE_PAGE_SIZE the kernel's page allocator holds now, from
 * /proc/buddyinfo (the zones a process's memory comes from; the DMA zone left out); 0 if
 * that cannot be read or the page size is not 4 KiB. A file read, ~20-50 us. */
size_t huge_pages_free(void);

/* The same from the text of a buddyinfo file (for tests): page_size is the base page's. */
size_t huge_pages_free_in(const char *buddyinfo, size_t page_size);

#endif
