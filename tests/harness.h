/*
 * harness.h -- the test harness: a hundred lines, no dependencies.
 *
 * USAGE
 *   static void test_something(void) { CHECK(x == 1); CHECK_EQ_INT(rc, MV_OK); }
 *   int main(void) { TEST(test_something); return th_summary(); }
 *
 * A failed CHECK prints file:line and the condition, marks the current test failed and
 * returns from the test function. Each binary ends with "# N passed, N failed"; tests/run.sh
 * adds the binaries up into the suite's last line.
 */
#ifndef MV_TEST_HARNESS_H
#define MV_TEST_HARNESS_H

#include <stdio.h>

extern int th_current_failed;

void th_fail(const char *file, int line, const char *what);
void th_run(const char *name, void (*fn)(void));
int th_summary(void);
/* A fresh empty directory for this test binary (under $TMPDIR); the string is static.
 * th_summary() removes it when every test passed and names it when one failed. */
const char *th_tmpdir(void);

#define TEST(fn) th_run(#fn, fn)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            th_fail(__FILE__, __LINE__, #cond);                                                    \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long th_a_ = (long long)(a), th_b_ = (long long)(b);                                  \
        if (th_a_ != th_b_) {                                                                      \
            char th_msg_[256];                                                                     \
            snprintf(th_msg_, sizeof th_msg_, "%s == %s (%lld != %lld)", #a, #b, th_a_, th_b_);    \
            th_fail(__FILE__, __LINE__, th_msg_);                                                  \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#endif
