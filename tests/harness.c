/* harness.c -- see harness.h. */
#include "harness.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int th_current_failed;
static int th_passed_count;
static int th_failed_count;
static char th_dir[512]; /* th_tmpdir()'s, "" until it is first asked for */

void th_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "  %s:%d: check failed: %s\n", file, line, what);
    th_current_failed = 1;
}

void th_run(const char *name, void (*fn)(void))
{
    th_current_failed = 0;
    fn();
    if (th_current_failed) {
        th_failed_count++;
        printf("FAIL %s\n", name);
    } else {
        th_passed_count++;
        printf("PASS %s\n", name);
    }
    fflush(stdout);
}

static int th_remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0; /* a file that will not go stays; tests/run.sh removes its whole $TMPDIR */
}

int th_summary(void)
{
    printf("# %d passed, %d failed\n", th_passed_count, th_failed_count);
    /* The directory goes when every test passed: run by hand, outside tests/run.sh's
     * $TMPDIR, binaries left one mvtest.* per run in /tmp. A failure keeps it to look at. */
    if (th_dir[0] != '\0') {
        if (th_failed_count == 0) {
            nftw(th_dir, th_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        } else {
            printf("# kept for inspection: %s\n", th_dir);
        }
    }
    return th_failed_count == 0 ? 0 : 1;
}

const char *th_tmpdir(void)
{
    if (th_dir[0] == '\0') {
        const char *base = getenv("TMPDIR");
        snprintf(th_dir, sizeof th_dir, "%s/mvtest.XXXXXX", base != NULL ? base : "/tmp");
        if (mkdtemp(th_dir) == NULL) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return th_dir;
}
