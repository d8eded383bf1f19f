/*
 * test_move.c -- the library side of moving a store between nodes: mv_store_release() fences
 * the store (only once every handle is closed; afterwards writable opens and sealed
 * deliveries fail with MV_EMOVED, read-only opens work), mv_store_adopt() lifts the fence,
 * and mv_store_export() / mv_store_import() carry a store whose WAL still holds commits (a
 * node that crashed) without losing them. The command-line side is tests/cli_move.sh.
 */
#include "harness.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int main(void)
{
    TEST(test_release_fences_the_store);
    TEST(test_export_import_carries_the_wal);
    return th_summary();
}
