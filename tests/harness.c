/* harness.c -- see harness.h. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

int th_current_failed;
static int th_passed_count;
static int th_failed_count;

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

int th_summary(void)
{
    printf("# %d passed, %d failed\n", th_passed_count, th_failed_count);
    return th_failed_count == 0 ? 0 : 1;
}

const char *th_tmpdir(void)
{
    static char dir[512];
    if (dir[0] == '\0') {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/mvtest.XXXXXX", base != NULL ? base : "/tmp");
        if (mkdtemp(dir) == NULL) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return dir;
}
