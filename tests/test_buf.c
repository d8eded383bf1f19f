/*
 * test_buf.c -- mailvaultd's byte buffers (imapd/buf.c) as a queue: bytes appended at the
 * back and consumed from the front, as the input takes a client's pipelined commands and the
 * output gives the socket what it takes. buf_consume() used to move everything after the
 * consumed bytes to the front: a client that pipelines thousands of short commands (STATUS of
 * every folder) had up to the whole input buffer copied once per command (~6% of the server's
 * CPU in 20,000 pipelined STATUS, perf; issue 13). Now data advances and the room in front is
 * taken back when the buffer empties or when reserving needs it and what is left is no more
 * than it.
 */
#include "../imapd/buf.h"
#include "harness.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Consuming moves nothing: data advances over the consumed bytes, the rest stays where it
 * was, and the buffer stays a NUL-terminated string. */
static void test_consume_moves_nothing(void)
{
    struct buf b = {0};
    for (int i = 0; i < 1000; i++) {
        buf_printf(&b, "a%04d STATUS f%d (MESSAGES)\r\n", i, i);
    }
    CHECK(!b.oom);
    size_t line = strlen("a0000 STATUS f0 (MESSAGES)\r\n");
    const char *second = b.data + line;
    buf_consume(&b, line);
    CHECK(b.data == second);
    CHECK(strncmp(b.data, "a0001 STATUS f1 (MESSAGES)\r\n", line) == 0);
    CHECK_EQ_INT(b.data[b.len], '\0');
    /* emptied: the whole block is room again, from its start */
    size_t block = b.cap + line;
    buf_consume(&b, b.len);
    CHECK_EQ_INT(b.len, 0);
    CHECK_EQ_INT(b.cap, block);
    CHECK_EQ_INT(b.data[0], '\0');
    buf_free(&b);
}

/* The room consumed in front is used again once what is left fits in it: appending after
 * consuming most of the buffer takes no bigger block. */
static void test_room_in_front_reused(void)
{
    struct buf b = {0};
    char chunk[4096];
    memset(chunk, 'c', sizeof chunk);
    for (int i = 0; i < 16; i++) {
        buf_add(&b, chunk, sizeof chunk);
    }
    size_t block = b.cap;
    buf_consume(&b, b.len - 100);
    for (int round = 0; round < 100; round++) { /* a queue at 100..4196 bytes: never grows */
        buf_add(&b, chunk, sizeof chunk);
        buf_consume(&b, sizeof chunk);
        CHECK(b.cap + b.skip == block);
    }
    CHECK_EQ_INT(b.len, 100);
    buf_free(&b);
}

/* The buffer against a model: appends of 1 to 5,000 bytes and consumes of any part, from a
 * fixed seed (no random byte at run time). Content and terminator always right; the block
 * never more than a few times what was ever held at once. */
static void test_queue_against_model(void)
{
    struct buf b = {0};
    size_t cap = 1 << 20, head = 0, tail = 0, most = 0;
    char *model = malloc(cap);
    CHECK(model != NULL);
    if (model == NULL) {
        return;
    }
    uint64_t x = 88172645463325252u;
    for (int step = 0; step < 20000 && !b.oom; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if ((x & 3) != 0 && tail + 5000 < cap) {
            size_t n = 1 + (size_t)(x >> 8) % 5000;
            for (size_t i = 0; i < n; i++) {
                model[tail + i] = (char)('a' + (tail + i) % 26);
            }
            buf_add(&b, model + tail, n);
            tail += n;
        } else {
            size_t n = tail - head == 0 ? 0 : (size_t)(x >> 8) % (tail - head + 1);
            buf_consume(&b, n);
            head += n;
        }
        if (tail - head > most) {
            most = tail - head;
        }
        if (b.len != tail - head || (b.len > 0 && memcmp(b.data, model + head, b.len) != 0) ||
            (b.data != NULL && b.data[b.len] != '\0')) {
            CHECK(!"the buffer differs from the model");
            break;
        }
        if (head == tail) { /* keep the model within its array */
            head = tail = 0;
        }
    }
    CHECK(!b.oom);
    CHECK(b.skip + b.cap <= 4 * most + 256);
    buf_free(&b);
    free(model);
}

int main(void)
{
    TEST(test_consume_moves_nothing);
    TEST(test_room_in_front_reused);
    TEST(test_queue_against_model);
    return th_summary();
}
