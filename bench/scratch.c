/*
 * scratch.c -- see scratch.h. One scratch directory per benchmark process, removed at exit
 * however the process ends normally, so repeated runs never fill the disk.
 */
#define _XOPEN_SOURCE 700
#include "scratch.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char *bench_scratch_dir; /* the directory atexit removes; NULL until made */

static int
bench_scratch_remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    (void)(type == FTW_DP ? rmdir(path) : unlink(path)); /* best effort: go on regardless */
    return 0;
}

void bench_scratch_remove_tree(const char *path)
{
    (void)nftw(path, bench_scratch_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void bench_scratch_cleanup(void)
{
    if (bench_scratch_dir != NULL) {
        bench_scratch_remove_tree(bench_scratch_dir);
        bench_scratch_dir = NULL;
    }
}

int bench_scratch_make(const char *parent_dir, const char *prefix, char *out, size_t out_size)
{
    const char *parent = parent_dir;
    const char *tmpdir = getenv("TMPDIR");
    if (parent == NULL && tmpdir != NULL && tmpdir[0] != '\0') {
        parent = tmpdir;
    }
    if (parent == NULL) {
        (void)mkdir("var", 0700);
        (void)mkdir("var/bench", 0700);
        parent = "var/bench";
    }
    int len = snprintf(out, out_size, "%s/%s-XXXXXX", parent, prefix);
    /* Leave room for the file names the benchmarks put inside. */
    if (len < 0 || (size_t)len + 256 >= out_size || mkdtemp(out) == NULL) {
        fprintf(stderr, "bench: cannot make a scratch directory under %s\n", parent);
        out[0] = '\0';
        return -1;
    }
    bench_scratch_dir = out;
    if (atexit(bench_scratch_cleanup) != 0) {
        bench_scratch_cleanup();
        return -1;
    }
    return 0;
}
