/*
 * test_passwd.c -- mv_store_passwd(): a password change, killed with SIGKILL after every one
 * of its steps (the $MAILVAULT_TEST_KILL_AT hook) and at random instants, must leave exactly
 * one of the two passwords opening a complete store (every message, byte for byte). Also:
 * an empty new password, a wrong old one, a store in use (MV_EBUSY both ways), and the
 * aes256cbc -> chacha20 upgrade.
 *
 * Each kill runs the password change in a forked child; the parent checks the store.
 */
#include "harness.h"
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PW_A            "first password"
#define PW_B            "second, longer password"
#define TP_MESSAGES     40
#define TP_RANDOM_KILLS 24

static uint32_t tp_rng = 0x2545f491u;

static uint32_t tp_next(void)
{
    tp_rng ^= tp_rng << 13;
    tp_rng ^= tp_rng >> 17;
    tp_rng ^= tp_rng << 5;
    return tp_rng;
}

static struct mv_store_options tp_options(void)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    return o;
}

/* Message i: its bytes are a pure function of i (some large enough to be split out). */
static char *tp_message(int i, size_t *len)
{
    size_t body = (i % 7 == 0) ? 20000 : 200;
    char *m = malloc(body + 512);
    int n = snprintf(m, 512,
                     "From: sender%d@example.net\r\nTo: user@example.org\r\nSubject: message %d\r\n"
                     "Message-ID: <m%d@example.net>\r\n\r\n",
                     i, i, i);
    for (size_t k = 0; k < body; k++) {
        m[(size_t)n + k] = (char)('a' + (char)((k * 7 + (size_t)i) % 26));
    }
    m[(size_t)n + body] = '\r';
    m[(size_t)n + body + 1] = '\n';
    *len = (size_t)n + body + 2;
    return m;
}

/* Creates the store of name@example.org with TP_MESSAGES messages under PW_A. */
static int tp_create(const char *address)
{
    struct mv_store_options o = tp_options();
    char err[512] = "";
    int rc = mv_store_init(address, PW_A, strlen(PW_A), &o, err, sizeof err);
    mv_store *s = NULL;
    if (rc == MV_OK) {
        rc = mv_store_open(address, PW_A, strlen(PW_A), &o, &s, err, sizeof err);
    }
    for (int i = 0; rc == MV_OK && i < TP_MESSAGES; i++) {
        size_t len = 0;
        char *m = tp_message(i, &len);
        rc = mv_message_append(s, "INBOX", m, len, i % 2 ? MV_FLAG_SEEN : 0, NULL, 1700000000 + i,
                               NULL);
        free(m);
    }
    mv_store_close(&s);
    if (rc != MV_OK) {
        fprintf(stderr, "  create %s: %s (%s)\n", address, mv_strerror(rc), err);
    }
    return rc;
}

/* Opens with pw: MV_OK only if every message is there, byte for byte. */
static int tp_complete(const char *address, const char *pw)
{
    struct mv_store_options o = tp_options();
    char err[512] = "";
    mv_store *s = NULL;
    int rc = mv_store_open(address, pw, strlen(pw), &o, &s, err, sizeof err);
    if (rc != MV_OK) {
        return rc;
    }
    struct mv_mailbox_info info;
    rc = mv_mailbox_get(s, "INBOX", &info);
    if (rc == MV_OK && info.messages != TP_MESSAGES) {
        fprintf(stderr, "  %u messages, want %d\n", info.messages, TP_MESSAGES);
        rc = MV_ECORRUPT;
    }
    for (uint32_t uid = 1; rc == MV_OK && uid <= TP_MESSAGES; uid++) {
        void *raw = NULL;
        size_t len = 0, want_len = 0;
        char *want = tp_message((int)uid - 1, &want_len);
        rc = mv_message_fetch(s, "INBOX", uid, &raw, &len);
        if (rc == MV_OK && (len != want_len || memcmp(raw, want, len) != 0)) {
            fprintf(stderr, "  message %u differs\n", uid);
            rc = MV_ECORRUPT;
        }
        mv_free(raw);
        free(want);
    }
    long long ok = tu_int(mv_store_db(s), "SELECT count(*) FROM pragma_quick_check "
                                          "WHERE quick_check = 'ok'");
    mv_store_close(&s);
    return rc == MV_OK && ok != 1 ? MV_ECORRUPT : rc;
}

/* Which password opens a complete store: 'A', 'B', or '?' (none, or both). */
static char tp_which(const char *address)
{
    int a = tp_complete(address, PW_A), b = tp_complete(address, PW_B);
    if (a == MV_OK && b == MV_EAUTH) {
        return 'A';
    }
    if (b == MV_OK && a == MV_EAUTH) {
        return 'B';
    }
    fprintf(stderr, "  after the kill: password A gives %s, B gives %s\n", mv_strerror(a),
            mv_strerror(b));
    return '?';
}

static int tp_passwd(const char *address, const char *from, const char *to)
{
    struct mv_store_options o = tp_options();
    char err[512] = "";
    int rc =
        mv_store_passwd(address, from, strlen(from), to, strlen(to), &o, NULL, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  passwd: %s (%s)\n", mv_strerror(rc), err);
    }
    return rc;
}

/* Runs a password change in a child; kill_at "passwd:K" or NULL; delay_us > 0 kills the
 * child after that long. Returns the child's wait status. */
static int
tp_child(const char *address, const char *from, const char *to, const char *kill_at, long delay_us)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (kill_at != NULL) {
            setenv("MAILVAULT_TEST_KILL_AT", kill_at, 1);
        }
        _exit(tp_passwd(address, from, to) == MV_OK ? 0 : 1);
    }
    if (delay_us > 0) {
        struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void test_passwd_round_trip(void)
{
    const char *a = "basic@example.org";
    CHECK_EQ_INT(tp_create(a), MV_OK);
    CHECK_EQ_INT(tp_passwd(a, PW_A, PW_B), MV_OK);
    CHECK_EQ_INT(tp_which(a), 'B');
    char path[1024];
    snprintf(path, sizeof path, "%s/example.org/basic.db.new", tu_path("root"));
    CHECK(!tu_file_exists(path));
    snprintf(path, sizeof path, "%s/example.org/basic.db", tu_path("root"));
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_EQ_INT(tp_passwd(a, PW_B, PW_A), MV_OK);
    CHECK_EQ_INT(tp_which(a), 'A');
}

static void test_passwd_refusals(void)
{
    const char *a = "refuse@example.org";
    CHECK_EQ_INT(tp_create(a), MV_OK);
    char db[1024], before[65], after[65];
    snprintf(db, sizeof db, "%s/example.org/refuse.db", tu_path("root"));
    tu_file_sha256(db, before);
    struct mv_store_options o = tp_options();
    char err[512] = "";
    CHECK_EQ_INT(mv_store_passwd(a, PW_A, strlen(PW_A), "", 0, &o, NULL, err, sizeof err),
                 MV_EINVAL);
    CHECK(strstr(err, "empty") != NULL);
    CHECK_EQ_INT(mv_store_passwd(a, "wrong", 5, PW_B, strlen(PW_B), &o, NULL, err, sizeof err),
                 MV_EAUTH);
    CHECK_EQ_INT(mv_store_passwd("nobody@example.org", PW_A, strlen(PW_A), PW_B, strlen(PW_B), &o,
                                 NULL, err, sizeof err),
                 MV_ENOTFOUND);
    CHECK_EQ_INT(mv_store_passwd("../x@example.org", PW_A, strlen(PW_A), PW_B, strlen(PW_B), &o,
                                 NULL, err, sizeof err),
                 MV_EINVAL);
    tu_file_sha256(db, after);
    CHECK(strcmp(before, after) == 0);
    CHECK_EQ_INT(tp_which(a), 'A');
}

/* A handle open -> passwd is MV_EBUSY; passwd holding the lock -> open is MV_EBUSY. */
static void test_passwd_store_in_use(void)
{
    const char *a = "busy@example.org";
    CHECK_EQ_INT(tp_create(a), MV_OK);
    struct mv_store_options o = tp_options();
    char err[512] = "";
    mv_store *s = NULL;
    CHECK_EQ_INT(mv_store_open(a, PW_A, strlen(PW_A), &o, &s, err, sizeof err), MV_OK);
    struct mv_ops_options po = MV_OPS_OPTIONS_INIT;
    po.lock_wait_ms = 200;
    int rc = mv_store_passwd(a, PW_A, strlen(PW_A), PW_B, strlen(PW_B), &o, &po, err, sizeof err);
    mv_store_close(&s);
    CHECK_EQ_INT(rc, MV_EBUSY);
    CHECK(strstr(err, "in use") != NULL);
    CHECK_EQ_INT(tp_which(a), 'A');
    /* The other way round: the lock file held exclusively, as a password change holds it. */
    char lock[1024];
    snprintf(lock, sizeof lock, "%s/example.org/busy.lock", tu_path("root"));
    int fd = open(lock, O_RDWR);
    CHECK(fd >= 0);
    CHECK_EQ_INT(flock(fd, LOCK_EX), 0);
    rc = mv_store_open(a, PW_A, strlen(PW_A), &o, &s, err, sizeof err);
    close(fd);
    CHECK_EQ_INT(rc, MV_EBUSY);
    CHECK(strstr(err, "password changed") != NULL);
}

/* SIGKILL after each step (1..7), alternating direction. */
static void test_passwd_killed_after_each_step(void)
{
    const char *a = "steps@example.org";
    CHECK_EQ_INT(tp_create(a), MV_OK);
    char current = 'A';
    for (int step = 1; step <= 7; step++) {
        char at[32];
        snprintf(at, sizeof at, "passwd:%d", step);
        const char *from = current == 'A' ? PW_A : PW_B, *to = current == 'A' ? PW_B : PW_A;
        int status = tp_child(a, from, to, at, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        char now = tp_which(a);
        printf("  # killed after step %d: password %c opens the store\n", step, now);
        CHECK(now != '?');
        /* Before the rename (step 6) the old password must still be the one. */
        CHECK(step < 6 ? now == current : now != current);
        current = now;
    }
    /* A run that is not killed cleans up whatever the kills left. */
    CHECK_EQ_INT(tp_passwd(a, current == 'A' ? PW_A : PW_B, current == 'A' ? PW_B : PW_A), MV_OK);
    CHECK_EQ_INT(tp_which(a), current == 'A' ? 'B' : 'A');
}

/* SIGKILL at random instants. */
static void test_passwd_killed_at_random(void)
{
    const char *a = "random@example.org";
    CHECK_EQ_INT(tp_create(a), MV_OK);
    /* How long an uninterrupted change takes, to spread the kills over it. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_EQ_INT(tp_passwd(a, PW_A, PW_B), MV_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long span_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000L;
    char current = 'B';
    int changed = 0;
    for (int i = 0; i < TP_RANDOM_KILLS; i++) {
        long delay_us = 1 + (long)(tp_next() % (uint32_t)(3 * span_us + 1)); /* fork costs too */
        const char *from = current == 'A' ? PW_A : PW_B, *to = current == 'A' ? PW_B : PW_A;
        (void)tp_child(a, from, to, NULL, delay_us);
        char now = tp_which(a);
        CHECK(now != '?');
        changed += now != current;
        current = now;
    }
    printf("  # %d random kills over %ld us: %d changes completed before the kill\n",
           TP_RANDOM_KILLS, span_us, changed);
}

/* An aes256cbc store becomes chacha20. */
static void test_passwd_cipher_upgrade(void)
{
    const char *a = "legacy@example.org";
    CHECK_EQ_INT(tu_store_file_create("legacy", PW_A, MV_CIPHER_AES256CBC), MV_OK);
    /* The first open makes the schema and the key pair; then the messages. */
    struct mv_store_options o = tp_options();
    char err[512] = "";
    mv_store *s = NULL;
    CHECK_EQ_INT(mv_store_open(a, PW_A, strlen(PW_A), &o, &s, err, sizeof err), MV_OK);
    struct mv_db_info info;
    CHECK_EQ_INT(mv_db_info(mv_store_db(s), &info), MV_OK);
    CHECK_EQ_INT(info.cipher, MV_CIPHER_AES256CBC);
    for (int i = 0; i < TP_MESSAGES; i++) {
        size_t len = 0;
        char *m = tp_message(i, &len);
        int rc = mv_message_append(s, "INBOX", m, len, i % 2 ? MV_FLAG_SEEN : 0, NULL,
                                   1700000000 + i, NULL);
        free(m);
        CHECK_EQ_INT(rc, MV_OK);
    }
    mv_store_close(&s);
    struct mv_ops_options po = MV_OPS_OPTIONS_INIT;
    po.cipher = MV_CIPHER_CHACHA20;
    CHECK_EQ_INT(
        mv_store_passwd(a, PW_A, strlen(PW_A), PW_B, strlen(PW_B), &o, &po, err, sizeof err),
        MV_OK);
    CHECK_EQ_INT(tp_which(a), 'B');
    CHECK_EQ_INT(mv_store_open(a, PW_B, strlen(PW_B), &o, &s, err, sizeof err), MV_OK);
    CHECK_EQ_INT(mv_db_info(mv_store_db(s), &info), MV_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(info.cipher, MV_CIPHER_CHACHA20);
    CHECK_EQ_INT(info.reserve_bytes, 32);
    /* And no way back: chacha20 -> aes256cbc cannot lower the reserve bytes. */
    po.cipher = MV_CIPHER_AES256CBC;
    CHECK_EQ_INT(
        mv_store_passwd(a, PW_B, strlen(PW_B), PW_A, strlen(PW_A), &o, &po, err, sizeof err),
        MV_EINVAL);
    CHECK_EQ_INT(tp_which(a), 'B');
}

int main(void)
{
    if (mv_vfs_register(NULL, 0) != MV_OK) {
        return 1;
    }
    TEST(test_passwd_round_trip);
    TEST(test_passwd_refusals);
    TEST(test_passwd_store_in_use);
    TEST(test_passwd_killed_after_each_step);
    TEST(test_passwd_killed_at_random);
    TEST(test_passwd_cipher_upgrade);
    return th_summary();
}
