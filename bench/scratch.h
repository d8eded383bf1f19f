/*
 * scratch.h -- the benchmarks' private scratch directory, shared by every bench_*.c.
 */
#ifndef MV_BENCH_SCRATCH_H
#define MV_BENCH_SCRATCH_H

#include <stddef.h>

/* Makes "<parent>/<prefix>-XXXXXX" (parent: parent_dir, else $TMPDIR, else ./var/bench,
 * created 0700) into out (out_size bytes) and registers its removal, with everything in it,
 * at exit. Returns 0, or -1 with a message on stderr. */
int bench_scratch_make(const char *parent_dir, const char *prefix, char *out, size_t out_size);

/* Removes path and everything under it (best effort). */
void bench_scratch_remove_tree(const char *path);

#endif
