/*
 * test_store_layout.c -- what a server asks the library instead of knowing where a store's
 * files lie (issue 11, "Shape": the server stops knowing the store's disk layout):
 *
 *   - mv_queue_usage: the sealed queue's deliveries and bytes (each message plus 104 bytes of
 *     sealing, docs/DELIVERY.md), without the password; unfinished "tmp-" files, names that
 *     are not deliveries, links and rejected/ do not count; a store without a queue is
 *     empty; the scan is bounded (MV_ELIMIT past entries_max, never part of a count); the
 *     errors for a missing store, a bad address and NULL outputs.
 *   - mv_store_watch_target / mv_store_watch_match: the directory and name to watch; the
 *     database and its WAL match, -shm, -journal, the queue, the key and other stores do
 *     not; and, with inotify on the directory as a server watches it, a commit through
 *     another handle (as by another process) produces an event that matches.
 */
#include "harness.h"
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define PW                 "layout-password"
#define SEALING            104 /* "MVQ1", date, delivery id (28 bytes) + the box (76) */
#define ALICE              "alice@example.org"
#define QUEUE_DIR          "root/example.org/alice.queue"
#define NAME_OF_A_DELIVERY "00000000000000000001-0123456789abcdef0123456789abcdef.sealed"

static struct mv_store_options sl_options(void)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    o.cache_size_kib = 2048;
    return o;
}

/* Creates the store of address once (the tests share it). */
static int sl_init(const char *address)
{
    struct mv_store_options o = sl_options();
    char err[256] = "";
    int rc = mv_store_init(address, PW, strlen(PW), &o, err, sizeof err);
    if (rc != MV_OK && rc != MV_EEXISTS) {
        fprintf(stderr, "  init %s: %s\n", address, err);
        return rc;
    }
    return MV_OK;
}

static int sl_deliver(const char *address, size_t len)
{
    struct mv_store_options o = sl_options();
    char *raw = malloc(len), err[256] = "";
    if (raw == NULL) {
        return MV_ENOMEM;
    }
    memset(raw, 'x', len);
    memcpy(raw, "Subject: q\r\n\r\n", 14);
    int rc = mv_deliver_sealed(address, raw, len, &o, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  deliver: %s\n", err);
    }
    free(raw);
    return rc;
}

static void test_queue_usage_counts(void)
{
    struct mv_store_options o = sl_options();
    uint64_t bytes = 1, messages = 1;
    CHECK_EQ_INT(sl_init(ALICE), MV_OK);
    /* A fresh store: nothing queued (with or without a queue directory). */
    CHECK_EQ_INT(mv_queue_usage(ALICE, &o, 0, &bytes, &messages), MV_OK);
    CHECK_EQ_INT(bytes, 0);
    CHECK_EQ_INT(messages, 0);
    CHECK_EQ_INT(sl_deliver(ALICE, 100), MV_OK);
    CHECK_EQ_INT(sl_deliver(ALICE, 2000), MV_OK);
    CHECK_EQ_INT(sl_deliver(ALICE, 30000), MV_OK);
    CHECK_EQ_INT(mv_queue_usage(ALICE, &o, 0, &bytes, &messages), MV_OK);
    CHECK_EQ_INT(messages, 3);
    CHECK_EQ_INT(bytes, 100 + 2000 + 30000 + 3 * SEALING);
    uint32_t count = 0; /* mv_queue_count agrees */
    CHECK_EQ_INT(mv_queue_count(ALICE, &o, &count), MV_OK);
    CHECK_EQ_INT(count, 3);
    /* Not deliveries: an unfinished one, a name of another shape, a link with a delivery's
     * name, the rejected/ directory. */
    char path[600];
    snprintf(path, sizeof path, "%s/tmp-%s", tu_path(QUEUE_DIR), NAME_OF_A_DELIVERY);
    CHECK_EQ_INT(tu_write_file(path, "half", 4), 0);
    snprintf(path, sizeof path, "%s/junk.sealed", tu_path(QUEUE_DIR));
    CHECK_EQ_INT(tu_write_file(path, "junk", 4), 0);
    snprintf(path, sizeof path, "%s/%s", tu_path(QUEUE_DIR), NAME_OF_A_DELIVERY);
    CHECK_EQ_INT(symlink("/etc/passwd", path), 0);
    snprintf(path, sizeof path, "%s/rejected", tu_path(QUEUE_DIR));
    CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
    CHECK_EQ_INT(mv_queue_usage(ALICE, &o, 0, &bytes, &messages), MV_OK);
    CHECK_EQ_INT(messages, 3);
    CHECK_EQ_INT(bytes, 100 + 2000 + 30000 + 3 * SEALING);
}

static void test_queue_usage_bound(void)
{
    struct mv_store_options o = sl_options();
    uint64_t bytes = 1, messages = 1;
    CHECK_EQ_INT(sl_init("bound@example.org"), MV_OK);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(sl_deliver("bound@example.org", 50), MV_OK);
    }
    /* "." and ".." are entries too: 6 in all. At the bound: counted; one less: refused. */
    CHECK_EQ_INT(mv_queue_usage("bound@example.org", &o, 6, &bytes, &messages), MV_OK);
    CHECK_EQ_INT(messages, 4);
    CHECK_EQ_INT(mv_queue_usage("bound@example.org", &o, 5, &bytes, &messages), MV_ELIMIT);
    CHECK_EQ_INT(bytes, 0);
    CHECK_EQ_INT(messages, 0);
}

static void test_queue_usage_errors(void)
{
    struct mv_store_options o = sl_options();
    uint64_t bytes = 1, messages = 1;
    CHECK_EQ_INT(mv_queue_usage("nobody@example.org", &o, 0, &bytes, &messages), MV_ENOTFOUND);
    CHECK_EQ_INT(bytes, 0);
    CHECK_EQ_INT(messages, 0);
    CHECK_EQ_INT(mv_queue_usage("../etc@example.org", &o, 0, &bytes, &messages), MV_EINVAL);
    CHECK_EQ_INT(mv_queue_usage("x/y@example.org", &o, 0, &bytes, &messages), MV_EINVAL);
    CHECK_EQ_INT(mv_queue_usage(ALICE, &o, 0, NULL, &messages), MV_EINVAL);
    CHECK_EQ_INT(mv_queue_usage(ALICE, &o, 0, &bytes, NULL), MV_EINVAL);
    /* Nothing was created for the names refused. */
    CHECK(!tu_file_exists(tu_path("root/example.org/nobody.db")));
    CHECK(!tu_file_exists(tu_path("root/example.org/nobody.queue")));
}

static void test_watch_target(void)
{
    struct mv_store_options o = sl_options();
    char dir[MV_PATH_MAX], name[MV_PATH_MAX], path[2 * MV_PATH_MAX];
    CHECK_EQ_INT(sl_init("Carol@Example.ORG"), MV_OK);
    CHECK_EQ_INT(mv_store_watch_target("Carol@Example.ORG", &o, dir, sizeof dir, name, sizeof name),
                 MV_OK);
    /* The domain is lowercased, the local part kept (as the store's file is named). */
    CHECK(strcmp(dir, tu_path("root/example.org")) == 0);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode)); /* the store's database file */
    CHECK(mv_store_watch_match(name, name));
    char entry[MV_PATH_MAX + 16];
    snprintf(entry, sizeof entry, "%s-wal", name);
    CHECK(mv_store_watch_match(name, entry));
    snprintf(entry, sizeof entry, "%s-shm", name);
    CHECK(!mv_store_watch_match(name, entry)); /* readers write it */
    snprintf(entry, sizeof entry, "%s-journal", name);
    CHECK(!mv_store_watch_match(name, entry));
    snprintf(entry, sizeof entry, "%sx", name);
    CHECK(!mv_store_watch_match(name, entry));
    CHECK(!mv_store_watch_match(name, "Carol.queue"));
    CHECK(!mv_store_watch_match(name, "Carol.pub"));
    CHECK(!mv_store_watch_match(name, "alice.db-wal"));
    CHECK(!mv_store_watch_match(name, ""));
    CHECK(!mv_store_watch_match("", name));
    /* Too small a buffer, a bad address: MV_EINVAL and "" in both. */
    char small[8];
    CHECK_EQ_INT(
        mv_store_watch_target("Carol@Example.ORG", &o, small, sizeof small, name, sizeof name),
        MV_EINVAL);
    CHECK(small[0] == '\0' && name[0] == '\0');
    CHECK_EQ_INT(mv_store_watch_target("a/b@example.org", &o, dir, sizeof dir, name, sizeof name),
                 MV_EINVAL);
    CHECK(dir[0] == '\0' && name[0] == '\0');
}

/* Whether the inotify events waiting on fd name an entry that matches name. */
static int sl_events_match(int fd, const char *name)
{
    _Alignas(struct inotify_event) char buf[16384];
    int matched = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) {
            return matched;
        }
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
            matched |= ev->len > 0 && mv_store_watch_match(name, ev->name);
            p += sizeof *ev + ev->len;
        }
    }
}

static void test_watch_sees_a_commit(void)
{
    struct mv_store_options o = sl_options();
    char dir[MV_PATH_MAX], name[MV_PATH_MAX], err[256] = "";
    CHECK_EQ_INT(sl_init("dave@example.org"), MV_OK);
    CHECK_EQ_INT(mv_store_watch_target("dave@example.org", &o, dir, sizeof dir, name, sizeof name),
                 MV_OK);
    mv_store *s = NULL;
    CHECK_EQ_INT(mv_store_open("dave@example.org", PW, strlen(PW), &o, &s, err, sizeof err), MV_OK);
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(inotify_add_watch(fd, dir, IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE) >= 0);
    (void)sl_events_match(fd, name); /* what the open did */
    static const char msg[] = "Subject: watched\r\n\r\nbody\r\n";
    uint32_t uid = 0;
    int rc = mv_message_append(s, "INBOX", msg, sizeof msg - 1, 0, NULL, 0, &uid);
    int matched = sl_events_match(fd, name);
    mv_store_close(&s);
    close(fd);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK(matched); /* a commit wrote an entry the watcher recognises */
}

int main(void)
{
    TEST(test_queue_usage_counts);
    TEST(test_queue_usage_bound);
    TEST(test_queue_usage_errors);
    TEST(test_watch_target);
    TEST(test_watch_sees_a_commit);
    return th_summary();
}
