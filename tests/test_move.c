/*
 * test_move.c -- the library side of moving a store between nodes: mv_store_release() fences
 * the store (only once every handle is closed; afterwards writable opens and sealed
 * deliveries fail with MV_EMOVED, read-only opens work), mv_store_adopt() lifts the fence,
 * and mv_store_export() / mv_store_import() carry a store whose WAL still holds commits (a
 * node that crashed) without losing them; mv_store_export_fd() / mv_store_import_fd() stream
 * it (a cut stream is refused). The command-line side is tests/cli_move.sh.
 */
#include "harness.h"
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MT_PASSWORD "move test"

static const char mt_message[] = "From: a@example.org\r\nSubject: move\r\n\r\nbody\r\n";

static struct mv_store_options mt_options(const char *root)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = root;
    o.kdf_iter = TU_KDF_ITER;
    return o;
}

static int mt_open(const char *root, const char *address, unsigned flags, mv_store **s)
{
    struct mv_store_options o = mt_options(root);
    o.flags = flags;
    char err[512] = "";
    int rc = mv_store_open(address, MT_PASSWORD, strlen(MT_PASSWORD), &o, s, err, sizeof err);
    if (rc != MV_OK && rc != MV_EMOVED) {
        printf("  # open %s: %s\n", address, err);
    }
    return rc;
}

static int mt_count(mv_store *s)
{
    struct mv_mailbox_info info;
    return mv_mailbox_status(s, "INBOX", &info) == MV_OK ? (int)info.messages : -1;
}

static void test_release_fences_the_store(void)
{
    const char *root = tu_path("root");
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("fence", MT_PASSWORD, 0, &s), MV_OK);
    struct mv_store_options o = mt_options(root);
    char err[512] = "";

    /* An open handle (a server session) keeps the release out. */
    CHECK_EQ_INT(mv_store_release("fence@example.org", &o, "test", 50, err, sizeof err), MV_EBUSY);
    CHECK(strstr(err, "is open") != NULL);
    CHECK_EQ_INT(mv_store_released("fence@example.org", &o), 0);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", mt_message, sizeof mt_message - 1, 0, NULL, 0, NULL),
                 MV_OK);
    mv_store_close(&s);

    CHECK_EQ_INT(mv_store_release("fence@example.org", &o, "to node2", 50, err, sizeof err), MV_OK);
    CHECK_EQ_INT(mv_store_released("fence@example.org", &o), 1);
    CHECK_EQ_INT(mt_open(root, "fence@example.org", 0, &s), MV_EMOVED);
    CHECK(s == NULL);
    CHECK_EQ_INT(mv_deliver_sealed("fence@example.org", mt_message, sizeof mt_message - 1, &o, err,
                                   sizeof err),
                 MV_EMOVED);
    CHECK(strstr(err, "to node2") != NULL);

    /* Read-only opens add no mail: allowed (check, stats). */
    CHECK_EQ_INT(mt_open(root, "fence@example.org", MV_STORE_READONLY, &s), MV_OK);
    CHECK_EQ_INT(mt_count(s), 1);
    mv_store_close(&s);

    CHECK_EQ_INT(mv_store_adopt("fence@example.org", &o, err, sizeof err), MV_OK);
    CHECK_EQ_INT(mv_store_released("fence@example.org", &o), 0);
    CHECK_EQ_INT(mv_deliver_sealed("fence@example.org", mt_message, sizeof mt_message - 1, &o, err,
                                   sizeof err),
                 MV_OK);
    CHECK_EQ_INT(mt_open(root, "fence@example.org", 0, &s), MV_OK);
    CHECK_EQ_INT(mt_count(s), 2);
    mv_store_close(&s);
}

static int mt_copy(const char *from, const char *to)
{
    size_t len = 0;
    uint8_t *data = tu_read_file(from, &len);
    int rc = data != NULL ? tu_write_file(to, data, len) : -1;
    free(data);
    return rc;
}

/* A node that crashed leaves its last commits in the WAL: they travel in the archive. */
static void test_export_import_carries_the_wal(void)
{
    const char *root = tu_path("root"), *crashed = tu_path("crashed"), *target = tu_path("target");
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("walcarry", MT_PASSWORD, 0, &s), MV_OK);
    CHECK_EQ_INT(sqlite3_exec(mv_store_db(s), "PRAGMA wal_autocheckpoint=0", NULL, NULL, NULL),
                 SQLITE_OK);
    for (int i = 0; i < 7; i++) {
        CHECK_EQ_INT(
            mv_message_append(s, "INBOX", mt_message, sizeof mt_message - 1, 0, NULL, 0, NULL),
            MV_OK);
    }
    /* The files as a crash would leave them: copied while the handle is open. */
    char dir[512], from[1024], to[1024];
    snprintf(dir, sizeof dir, "%s/example.org", crashed);
    CHECK(mkdir(crashed, 0700) == 0 && mkdir(dir, 0700) == 0);
    static const char *const files[] = {"walcarry.db", "walcarry.db-wal", "walcarry.pub"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s/example.org/%s", root, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        CHECK_EQ_INT(mt_copy(from, to), 0);
    }
    snprintf(to, sizeof to, "%s/walcarry.db-wal", dir);
    CHECK(tu_file_size(to) > 0);
    mv_store_close(&s);

    struct mv_store_options oc = mt_options(crashed), ot = mt_options(target);
    struct mv_store_archive_info info;
    char err[512] = "", archive[1024];
    snprintf(archive, sizeof archive, "%s", tu_path("walcarry.mvstore"));
    CHECK_EQ_INT(mv_store_export("walcarry@example.org", &oc, archive, 0, &info, err, sizeof err),
                 MV_OK);
    CHECK(info.wal_frames > 0);
    CHECK_EQ_INT(info.released, 0);
    CHECK_EQ_INT(mv_store_import("walcarry@example.org", &ot, archive, &info, err, sizeof err),
                 MV_OK);
    CHECK(mt_open(target, "walcarry@example.org", 0, &s) == MV_OK);
    CHECK_EQ_INT(mt_count(s), 7);
    mv_store_close(&s);
    /* A second import finds the store there and changes nothing. */
    CHECK_EQ_INT(mv_store_import("walcarry@example.org", &ot, archive, &info, err, sizeof err),
                 MV_EEXISTS);
}

/* mv_store_export_fd() into a pipe, mv_store_import_fd() from it: the store arrives whole;
 * an archive cut short (any prefix a dropped connection leaves) or of another address is
 * refused and leaves no file of a store behind. */
static void test_stream_through_a_pipe(void)
{
    const char *target = tu_path("streamed");
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("streamer", MT_PASSWORD, 0, &s), MV_OK);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(
            mv_message_append(s, "INBOX", mt_message, sizeof mt_message - 1, 0, NULL, 0, NULL),
            MV_OK);
    }
    mv_store_close(&s);
    struct mv_store_options oa = mt_options(tu_path("root")), ot = mt_options(target);
    struct mv_store_archive_info info;
    char err[512] = "";

    /* A whole archive in a file, then every cut of it through import_fd. */
    char archive[1024];
    snprintf(archive, sizeof archive, "%s", tu_path("streamer.tar"));
    int fd = open(archive, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK_EQ_INT(mv_store_export_fd("streamer@example.org", &oa, fd, 0, &info, err, sizeof err),
                 MV_OK);
    off_t whole = lseek(fd, 0, SEEK_END);
    CHECK(whole > 4096);
    char db[1024];
    snprintf(db, sizeof db, "%s/example.org/streamer.db", target);
    /* The manifest (one 512-byte header, its text in one block here) comes last, then the
     * end-of-archive's 1,024 zero bytes: a cut there loses nothing, every file having been
     * checked; cuts anywhere before it lose something and are refused. */
    const off_t manifest = whole - 1024 - 512 - 512;
    const off_t cuts[] = {
        0, 512, whole / 2, manifest - 1, manifest, manifest + 512, manifest + 512 + 100};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        int cut = open(tu_path("cut.tar"), O_RDWR | O_CREAT | O_TRUNC, 0600);
        char buf[4096];
        CHECK(lseek(fd, 0, SEEK_SET) == 0);
        for (off_t done = 0; done < cuts[i];) {
            size_t want =
                (size_t)(cuts[i] - done) < sizeof buf ? (size_t)(cuts[i] - done) : sizeof buf;
            ssize_t n = read(fd, buf, want);
            CHECK(n > 0 && write(cut, buf, (size_t)n) == n);
            done += n;
        }
        CHECK(lseek(cut, 0, SEEK_SET) == 0);
        int rc = mv_store_import_fd("streamer@example.org", &ot, cut, &info, err, sizeof err);
        if (rc != MV_ECORRUPT) {
            printf("  # cut at %lld of %lld: %d\n", (long long)cuts[i], (long long)whole, rc);
        }
        CHECK_EQ_INT(rc, MV_ECORRUPT);
        CHECK(access(db, F_OK) != 0);
        close(cut);
    }
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK_EQ_INT(mv_store_import_fd("someone@example.org", &ot, fd, &info, err, sizeof err),
                 MV_EINVAL);
    close(fd);

    /* Through a pipe, the exporter in a child process. */
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        int rc = mv_store_export_fd("streamer@example.org", &oa, p[1], 0, NULL, NULL, 0);
        close(p[1]);
        _exit(rc == MV_OK ? 0 : 1);
    }
    close(p[1]);
    CHECK_EQ_INT(mv_store_import_fd("streamer@example.org", &ot, p[0], &info, err, sizeof err),
                 MV_OK);
    close(p[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(mt_open(target, "streamer@example.org", 0, &s) == MV_OK);
    CHECK_EQ_INT(mt_count(s), 5);
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_release_fences_the_store);
    TEST(test_export_import_carries_the_wal);
    TEST(test_stream_through_a_pipe);
    return th_summary();
}
