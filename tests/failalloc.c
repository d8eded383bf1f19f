/*
 * failalloc.c -- see failalloc.h.
 */
#include "failalloc.h"

#include <sqlite3.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

static atomic_int fa_armed;
static atomic_int fa_fired;
static atomic_ulong fa_count;
static unsigned long fa_nth;
static int fa_persist;

void fa_arm(unsigned long nth, int persist)
{
    fa_nth = nth;
    fa_persist = persist;
    atomic_store(&fa_count, 0);
    atomic_store(&fa_fired, 0);
    atomic_store(&fa_armed, 1);
}

int fa_disarm(void)
{
    atomic_store(&fa_armed, 0);
    return atomic_load(&fa_fired);
}

unsigned long fa_calls(void)
{
    return atomic_load(&fa_count);
}

static int fa_fail_now(void)
{
    if (!atomic_load(&fa_armed)) {
        return 0;
    }
    unsigned long n = atomic_fetch_add(&fa_count, 1) + 1;
    if (n == fa_nth || (fa_persist && n > fa_nth)) {
        atomic_store(&fa_fired, 1);
        return 1;
    }
    return 0;
}

/* ---- the C library's allocator, through -Wl,--wrap ---------------------------------- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

void *__wrap_malloc(size_t size)
{
    return fa_fail_now() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return fa_fail_now() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    return fa_fail_now() ? NULL : __real_realloc(p, size);
}

char *__wrap_strdup(const char *s)
{
    return fa_fail_now() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    return fa_fail_now() ? NULL : __real_strndup(s, n);
}

/* ---- SQLite's allocator ------------------------------------------------------------- */

static sqlite3_mem_methods fa_sqlite_default;

static void *fa_sqlite_malloc(int n)
{
    return fa_fail_now() ? NULL : fa_sqlite_default.xMalloc(n);
}

static void *fa_sqlite_realloc(void *p, int n)
{
    return fa_fail_now() ? NULL : fa_sqlite_default.xRealloc(p, n);
}

int fa_install(void)
{
    if (sqlite3_config(SQLITE_CONFIG_GETMALLOC, &fa_sqlite_default) != SQLITE_OK) {
        return -1;
    }
    sqlite3_mem_methods wrapped = fa_sqlite_default;
    wrapped.xMalloc = fa_sqlite_malloc;
    wrapped.xRealloc = fa_sqlite_realloc;
    return sqlite3_config(SQLITE_CONFIG_MALLOC, &wrapped) == SQLITE_OK ? 0 : -1;
}
