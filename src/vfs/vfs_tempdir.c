/* vfs_tempdir.c -- see vfs_tempdir.h.
 *
 * The directory is copied, not referenced: the string the caller passed (a store's path) may
 * be freed while this thread still runs statements, on this store's connection or another's,
 * and a temp file must then never be named from freed memory. */
#include "vfs/vfs_tempdir.h"

#include "mailvault.h"

#include <string.h>

static _Thread_local char mv_temp_dir[MV_PATH_MAX]; /* "" when unset */

void mv_vfs_temp_dir_set(const char *dir)
{
    size_t n = dir != NULL ? strlen(dir) : 0;
    if (n == 0 || n >= sizeof mv_temp_dir) {
        mv_temp_dir[0] = '\0'; /* (1) unset, (2) cannot be a store's path: SQLite's default */
        return;
    }
    if (strcmp(mv_temp_dir, dir) != 0) {
        memcpy(mv_temp_dir, dir, n + 1);
    }
}

const char *mv_vfs_temp_dir_get(void)
{
    return mv_temp_dir[0] != '\0' ? mv_temp_dir : NULL;
}
