/* vfs_tempdir.c -- see vfs_tempdir.h. */
#include "vfs/vfs_tempdir.h"

static _Thread_local const char *mv_temp_dir;

void mv_vfs_temp_dir_set(const char *dir)
{
    mv_temp_dir = dir;
}

const char *mv_vfs_temp_dir_get(void)
{
    return mv_temp_dir;
}
