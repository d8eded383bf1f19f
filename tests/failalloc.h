/*
 * failalloc.h -- fail the Nth allocation, for the allocation-failure loop of
 * tests/test_faults.c (curl's "torture" tests, in small).
 *
 * Two doors are watched, one counter for both:
 *   - SQLite's allocator (sqlite3_config(SQLITE_CONFIG_MALLOC) wrapping the default one):
 *     every allocation SQLite and FTS5 make;
 *   - malloc, calloc, realloc, strdup and strndup as called by the objects linked into the
 *     test program (the library's and the test's own), through the linker's --wrap
 *     (the Makefile links test_faults with -Wl,--wrap=malloc,...). Shared libraries
 *     (GLib/GMime, OpenSSL, zstd) allocate through their own calls and are not failed:
 *     GLib aborts on a failed allocation by design.
 *
 * USAGE
 *   fa_install();            // first thing in main, before SQLite initialises
 *   fa_arm(n, 0);            // the nth allocation from now fails (persist: and every later)
 *   rc = ...;
 *   fired = fa_disarm();
 */
#ifndef MV_FAILALLOC_H
#define MV_FAILALLOC_H

/* Wraps SQLite's allocator; 0 on success (SQLite must not be initialised yet). */
int fa_install(void);
void fa_arm(unsigned long nth, int persist);
/* Ends the plan; 1 if an allocation was failed since fa_arm(). */
int fa_disarm(void);
/* Allocations counted since fa_arm(). */
unsigned long fa_calls(void);

#endif /* MV_FAILALLOC_H */
