/*
 * test_backup.c -- mv_backup_write(), mv_backup_verify(), mv_backup_restore():
 *   - a backup taken while two writer threads deliver opens, passes quick_check, and holds
 *     for each writer exactly a prefix of its messages: everything acknowledged before the
 *     backup started, nothing started after it returned;
 *   - restore round trip (byte-identical fetch), also of a store that was lost;
 *   - a damaged snapshot (SHA-256 mismatch, and a consistent manifest over a damaged page)
 *     and a wrong password are refused with the store byte-identical;
 *   - a backup of another address, a store in use (MV_EBUSY);
 *   - a restore killed (SIGKILL) after each of its steps;
 *   - keyless snapshots: taken while two writers deliver (a prefix of each, restorable),
 *     a store busy for too long, the freeze observed from inside (no commit, no
 *     checkpoint), a damaged copy;
 *   - --keep pruning.
 */
#include "harness.h"
#include "testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TB_PW       "backup test password"
#define TB_MESSAGES 30
#define TB_WRITERS  2

static struct mv_store_options tb_options(void)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    return o;
}

static char *tb_message(const char *subject, int i, size_t *len)
{
    size_t body = (i % 5 == 0) ? 12000 : 150;
    char *m = malloc(body + 512);
    int n = snprintf(m, 512, "From: a%d@example.net\r\nTo: user@example.org\r\nSubject: %s\r\n\r\n",
                     i, subject);
    for (size_t k = 0; k < body; k++) {
        m[(size_t)n + k] = (char)('A' + (char)((k + (size_t)i * 3) % 26));
    }
    *len = (size_t)n + body;
    return m;
}

static int tb_append(mv_store *s, int i)
{
    char subject[32];
    snprintf(subject, sizeof subject, "m-%d", i);
    size_t len = 0;
    char *m = tb_message(subject, i, &len);
    int rc = mv_message_append(s, "INBOX", m, len, 0, NULL, 1700000000 + i, NULL);
    free(m);
    return rc;
}

static int tb_create(const char *address, int messages)
{
    struct mv_store_options o = tb_options();
    char err[512] = "";
    mv_store *s = NULL;
    int rc = mv_store_init(address, TB_PW, strlen(TB_PW), &o, err, sizeof err);
    if (rc == MV_OK) {
        rc = mv_store_open(address, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err);
    }
    for (int i = 0; rc == MV_OK && i < messages; i++) {
        rc = tb_append(s, i);
    }
    mv_store_close(&s);
    if (rc != MV_OK) {
        fprintf(stderr, "  create: %s (%s)\n", mv_strerror(rc), err);
    }
    return rc;
}

/* MV_OK if the store holds messages 0..count-1 in INBOX, byte for byte. */
static int tb_check_messages(const char *address, int count)
{
    struct mv_store_options o = tb_options();
    char err[512] = "";
    mv_store *s = NULL;
    int rc = mv_store_open(address, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err);
    struct mv_mailbox_info info;
    if (rc == MV_OK) {
        rc = mv_mailbox_get(s, "INBOX", &info);
    }
    if (rc == MV_OK && info.messages != (uint32_t)count) {
        fprintf(stderr, "  %u messages, want %d\n", info.messages, count);
        rc = MV_ECORRUPT;
    }
    for (int i = 0; rc == MV_OK && i < count; i++) {
        char subject[32];
        snprintf(subject, sizeof subject, "m-%d", i);
        size_t want_len = 0, len = 0;
        char *want = tb_message(subject, i, &want_len);
        void *raw = NULL;
        rc = mv_message_fetch(s, "INBOX", (uint32_t)i + 1, &raw, &len);
        if (rc == MV_OK && (len != want_len || memcmp(raw, want, len) != 0)) {
            rc = MV_ECORRUPT;
        }
        free(want);
        mv_free(raw);
    }
    mv_store_close(&s);
    return rc;
}

/* SHA-256 of the store's db, -wal and .pub, concatenated. */
static void tb_store_digest(const char *local, char *out, size_t size)
{
    char path[1024], a[65], b[65], c[65];
    snprintf(path, sizeof path, "%s/example.org/%s.db", tu_path("root"), local);
    tu_file_sha256(path, a);
    snprintf(path, sizeof path, "%s/example.org/%s.db-wal", tu_path("root"), local);
    tu_file_sha256(path, b);
    snprintf(path, sizeof path, "%s/example.org/%s.pub", tu_path("root"), local);
    tu_file_sha256(path, c);
    snprintf(out, size, "%s %s %s", a, b, c);
}

/* ---- a backup under concurrent deliveries ---------------------------------------------- */

struct tb_writer {
    const char *address;
    int id;
    atomic_int started;
    atomic_int done;
    atomic_int stop;
    atomic_int failed;
    char why[600]; /* the failure, written before failed is set */
};

/* Waits (120 s at most) until w has acknowledged n more deliveries, or has failed: the
 * writers must still be going after the backup. A failed writer is reported by the caller's
 * check of failed, not by a wait that never ends. */
static void tb_writer_wait_more(struct tb_writer *w, int n)
{
    int from = atomic_load(&w->done);
    for (int i = 0; i < 120 * 1000 && atomic_load(&w->done) < from + n; i++) {
        if (atomic_load(&w->failed)) {
            return;
        }
        usleep(1000);
    }
}

static void *tb_writer_main(void *arg)
{
    struct tb_writer *w = arg;
    struct mv_store_options o = tb_options();
    char err[512] = "";
    mv_store *s = NULL;
    int rc;
    do { /* the same unfairness at the open (seen once in CI; the notes of the stop say) */
        rc = mv_store_open(w->address, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err);
    } while (rc == MV_EBUSY && !atomic_load(&w->stop));
    if (rc != MV_OK) {
        snprintf(w->why, sizeof w->why, "open: %s: %s", mv_strerror(rc), err);
        atomic_store(&w->failed, 1);
        return NULL;
    }
    for (int n = 0; !atomic_load(&w->stop); n++) {
        char subject[32];
        snprintf(subject, sizeof subject, "w%d-%d", w->id, n);
        size_t len = 0;
        char *m = tb_message(subject, n, &len);
        atomic_store(&w->started, n + 1);
        /* SQLite's busy handler is not fair: a writer can lose the write lock to the other
         * for the whole busy timeout on a slow machine (seen once under ASan in CI). The
         * test is about the backup's consistency, so a busy writer tries again. */
        do {
            rc = mv_message_append(s, "INBOX", m, len, 0, NULL, 0, NULL);
        } while (rc == MV_EBUSY && !atomic_load(&w->stop));
        free(m);
        if (rc == MV_EBUSY) {
            break; /* stopped while waiting: not acknowledged, not a failure */
        }
        if (rc != MV_OK) {
            snprintf(w->why, sizeof w->why, "append %d: %s: %s", n, mv_strerror(rc),
                     mv_store_errmsg(s));
            atomic_store(&w->failed, 1);
            break;
        }
        atomic_store(&w->done, n + 1);
    }
    mv_store_close(&s);
    return NULL;
}

/* For writer id, the highest n+1 in the backup, or -1 if its messages there are no prefix. */
static int tb_backup_prefix(sqlite3 *db, int id)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(*), coalesce(max(CAST(substr(subject, 4) AS INTEGER)), -1) "
             "FROM messages JOIN body_headers USING (body_id) WHERE subject LIKE 'w%d-%%'",
             id);
    sqlite3_stmt *st = NULL;
    int result = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        int count = sqlite3_column_int(st, 0), max = sqlite3_column_int(st, 1);
        result = count == max + 1 ? count : -1;
    }
    sqlite3_finalize(st);
    return result;
}

static void test_backup_during_deliveries(void)
{
    CHECK_EQ_INT(tb_create("conc@example.org", 5), MV_OK);
    struct tb_writer writers[TB_WRITERS];
    pthread_t threads[TB_WRITERS];
    for (int i = 0; i < TB_WRITERS; i++) {
        writers[i].address = "conc@example.org";
        writers[i].id = i;
        atomic_init(&writers[i].started, 0);
        atomic_init(&writers[i].done, 0);
        atomic_init(&writers[i].stop, 0);
        atomic_init(&writers[i].failed, 0);
        writers[i].why[0] = '\0';
        CHECK_EQ_INT(pthread_create(&threads[i], NULL, tb_writer_main, &writers[i]), 0);
    }
    /* Both writers under way; a writer that fails stops the wait (reported below), and the
     * deadline is generous (15 appends each take well under a second). */
    for (int waited_ms = 0;
         (atomic_load(&writers[0].done) < 15 || atomic_load(&writers[1].done) < 15) &&
         !atomic_load(&writers[0].failed) && !atomic_load(&writers[1].failed) && waited_ms < 120000;
         waited_ms++) {
        usleep(1000);
    }
    for (int i = 0; i < TB_WRITERS; i++) {
        if (atomic_load(&writers[i].failed)) {
            printf("  writer %d failed: %s\n", i, writers[i].why);
        }
    }
    int acked_before[TB_WRITERS], started_after[TB_WRITERS];
    for (int i = 0; i < TB_WRITERS; i++) {
        acked_before[i] = atomic_load(&writers[i].done);
    }
    struct mv_store_options o = tb_options();
    struct mv_backup_info info;
    char err[512] = "";
    int rc = mv_backup_write("conc@example.org", TB_PW, strlen(TB_PW), &o, tu_path("bk-conc"), NULL,
                             &info, err, sizeof err);
    for (int i = 0; i < TB_WRITERS; i++) {
        started_after[i] = atomic_load(&writers[i].started);
    }
    tb_writer_wait_more(&writers[0], 10);
    for (int i = 0; i < TB_WRITERS; i++) {
        atomic_store(&writers[i].stop, 1);
        pthread_join(threads[i], NULL);
        CHECK_EQ_INT(writers[i].failed, 0);
    }
    if (rc != MV_OK) {
        fprintf(stderr, "  backup: %s\n", err);
    }
    CHECK_EQ_INT(rc, MV_OK);
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(info.path, TB_PW, MV_CIPHER_AUTO, MV_DB_READONLY, &db), MV_OK);
    long long ok = tu_int(db, "SELECT count(*) FROM pragma_quick_check WHERE quick_check='ok'");
    long long total = tu_int(db, "SELECT count(*) FROM messages");
    int prefix[TB_WRITERS];
    for (int i = 0; i < TB_WRITERS; i++) {
        prefix[i] = tb_backup_prefix(db, i);
    }
    sqlite3_close(db);
    CHECK_EQ_INT(ok, 1);
    CHECK_EQ_INT((long long)info.messages, total);
    for (int i = 0; i < TB_WRITERS; i++) {
        printf("  # writer %d: %d acknowledged before, %d in the backup, %d started after\n", i,
               acked_before[i], prefix[i], started_after[i]);
        CHECK(prefix[i] >= acked_before[i] && prefix[i] <= started_after[i]);
    }
    CHECK_EQ_INT(total, 5 + prefix[0] + prefix[1]);
    CHECK_EQ_INT(mv_backup_verify(info.path, TB_PW, strlen(TB_PW), &o, NULL, err, sizeof err),
                 MV_OK);
}

/* ---- keyless: the ciphertext frozen and copied while two writers deliver ------------------ */

static void test_keyless_during_deliveries(void)
{
    const char *a = "keyless@example.org";
    CHECK_EQ_INT(tb_create(a, 5), MV_OK);
    struct tb_writer writers[TB_WRITERS];
    pthread_t threads[TB_WRITERS];
    for (int i = 0; i < TB_WRITERS; i++) {
        writers[i].address = a;
        writers[i].id = i;
        atomic_init(&writers[i].started, 0);
        atomic_init(&writers[i].done, 0);
        atomic_init(&writers[i].stop, 0);
        atomic_init(&writers[i].failed, 0);
        writers[i].why[0] = '\0';
        CHECK_EQ_INT(pthread_create(&threads[i], NULL, tb_writer_main, &writers[i]), 0);
    }
    /* Both writers under way; a writer that fails stops the wait (reported below), and the
     * deadline is generous (15 appends each take well under a second). */
    for (int waited_ms = 0;
         (atomic_load(&writers[0].done) < 15 || atomic_load(&writers[1].done) < 15) &&
         !atomic_load(&writers[0].failed) && !atomic_load(&writers[1].failed) && waited_ms < 120000;
         waited_ms++) {
        usleep(1000);
    }
    for (int i = 0; i < TB_WRITERS; i++) {
        if (atomic_load(&writers[i].failed)) {
            printf("  writer %d failed: %s\n", i, writers[i].why);
        }
    }
    int acked_before[TB_WRITERS], started_after[TB_WRITERS];
    for (int i = 0; i < TB_WRITERS; i++) {
        acked_before[i] = atomic_load(&writers[i].done);
    }
    struct mv_store_options o = tb_options();
    struct mv_backup_info info;
    char err[512] = "";
    int rc = mv_backup_write_keyless(a, &o, tu_path("bk-keyless"), NULL, &info, err, sizeof err);
    for (int i = 0; i < TB_WRITERS; i++) {
        started_after[i] = atomic_load(&writers[i].started);
    }
    tb_writer_wait_more(&writers[0], 10);
    for (int i = 0; i < TB_WRITERS; i++) {
        atomic_store(&writers[i].stop, 1);
        pthread_join(threads[i], NULL);
        CHECK_EQ_INT(writers[i].failed, 0);
    }
    if (rc != MV_OK) {
        fprintf(stderr, "  keyless backup: %s\n", err);
    }
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(info.keyless, 1);
    printf("  # keyless: %llu bytes + WAL %llu bytes (%llu frames, %llu commits)\n",
           (unsigned long long)info.size_bytes, (unsigned long long)info.wal_size_bytes,
           (unsigned long long)info.wal_frames, (unsigned long long)info.wal_commits);
    /* With the password: verified (WAL replayed read-only), and a prefix of each writer. */
    CHECK_EQ_INT(mv_backup_verify(info.path, TB_PW, strlen(TB_PW), &o, NULL, err, sizeof err),
                 MV_OK);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s/keyless-copy.db", tu_path("bk-keyless"));
    CHECK_EQ_INT(tu_copy_db(info.path, copy), 0);
    sqlite3 *db = NULL;
    CHECK_EQ_INT(tu_open(copy, TB_PW, MV_CIPHER_AUTO, 0, &db), MV_OK);
    long long ok = tu_int(db, "SELECT count(*) FROM pragma_integrity_check "
                              "WHERE integrity_check='ok'");
    long long total = tu_int(db, "SELECT count(*) FROM messages");
    int prefix[TB_WRITERS];
    for (int i = 0; i < TB_WRITERS; i++) {
        prefix[i] = tb_backup_prefix(db, i);
    }
    sqlite3_close(db);
    CHECK_EQ_INT(ok, 1);
    for (int i = 0; i < TB_WRITERS; i++) {
        printf("  # writer %d: %d acknowledged before, %d in the keyless copy, %d started after\n",
               i, acked_before[i], prefix[i], started_after[i]);
        CHECK(prefix[i] >= acked_before[i] && prefix[i] <= started_after[i]);
    }
    CHECK_EQ_INT(total, 5 + prefix[0] + prefix[1]);
    /* Restored, it is the store as of the freeze. */
    CHECK_EQ_INT(mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, info.path, NULL, err, sizeof err),
                 MV_OK);
    mv_store *s = NULL;
    struct mv_mailbox_info mi;
    CHECK_EQ_INT(mv_store_open(a, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err), MV_OK);
    rc = mv_mailbox_get(s, "INBOX", &mi);
    mv_store_close(&s);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT((long long)mi.messages, total);
}

/* Entries in dir other than "." and "..". */
static int tb_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

/* A write transaction that stays open: the freeze times out, nothing is written. */
static void test_keyless_busy(void)
{
    const char *a = "kbusy@example.org";
    CHECK_EQ_INT(tb_create(a, 2), MV_OK);
    struct mv_store_options o = tb_options();
    char err[512] = "";
    mv_store *s = NULL;
    CHECK_EQ_INT(mv_store_open(a, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err), MV_OK);
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "BEGIN IMMEDIATE"), SQLITE_OK);
    struct mv_ops_options po = MV_OPS_OPTIONS_INIT;
    po.lock_wait_ms = 200;
    int rc = mv_backup_write_keyless(a, &o, tu_path("bk-kbusy"), &po, NULL, err, sizeof err);
    (void)tu_exec(mv_store_db(s), "ROLLBACK");
    mv_store_close(&s);
    CHECK_EQ_INT(rc, MV_EBUSY);
    CHECK_EQ_INT(tb_count_entries(tu_path("bk-kbusy")), 0);
    /* Idle, it works, and a bit flipped in the copy is caught before any key is used. */
    struct mv_backup_info info;
    CHECK_EQ_INT(mv_backup_write_keyless(a, &o, tu_path("bk-kbusy"), &po, &info, err, sizeof err),
                 MV_OK);
    CHECK_EQ_INT(tu_flip_bit(info.path, (long long)info.size_bytes - 100, 1), 0);
    CHECK_EQ_INT(mv_backup_verify(info.path, TB_PW, strlen(TB_PW), &o, NULL, err, sizeof err),
                 MV_ECORRUPT);
}

/* While the copy runs (the progress callback is called from inside the freeze), a writer
 * cannot begin, a checkpoint cannot run, and a closing connection cannot checkpoint; all
 * from this very process, whose locks SQLite takes as POSIX locks. */
struct tb_probe {
    char db_path[1024];
    int calls;
    int begin_rc;
    int checkpoint_busy;
};

static void tb_probe_progress(void *arg, const char *stage, uint64_t done, uint64_t total)
{
    struct tb_probe *p = arg;
    (void)stage;
    (void)done;
    (void)total;
    if (p->calls++ > 0) {
        return;
    }
    sqlite3 *db = NULL;
    if (tu_open(p->db_path, TB_PW, MV_CIPHER_AUTO, 0, &db) != MV_OK) {
        p->begin_rc = -1;
        return;
    }
    sqlite3_busy_timeout(db, 50);
    p->begin_rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    (void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    p->checkpoint_busy = (int)tu_int(db, "PRAGMA wal_checkpoint(TRUNCATE)"); /* 1st column */
    sqlite3_close(db);
}

static void test_keyless_freezes_writers(void)
{
    const char *a = "freeze@example.org";
    CHECK_EQ_INT(tb_create(a, 3), MV_OK);
    struct tb_probe probe;
    memset(&probe, 0, sizeof probe);
    snprintf(probe.db_path, sizeof probe.db_path, "%s/example.org/freeze.db", tu_path("root"));
    /* A WAL with frames to copy: a handle that keeps the store open while it writes. */
    struct mv_store_options o = tb_options();
    char err[512] = "";
    mv_store *s = NULL;
    CHECK_EQ_INT(mv_store_open(a, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err), MV_OK);
    int rc = tb_append(s, 3);
    CHECK_EQ_INT(rc, MV_OK);
    struct mv_ops_options po = MV_OPS_OPTIONS_INIT;
    po.progress = tb_probe_progress;
    po.progress_arg = &probe;
    struct mv_backup_info info;
    rc = mv_backup_write_keyless(a, &o, tu_path("bk-freeze"), &po, &info, err, sizeof err);
    mv_store_close(&s);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK(probe.calls > 0);
    CHECK_EQ_INT(probe.begin_rc, SQLITE_BUSY);
    CHECK_EQ_INT(probe.checkpoint_busy, 1);
    CHECK(info.wal_size_bytes > 0 && info.wal_commits > 0);
    /* Thawed, the same works. */
    probe.calls = 0;
    tb_probe_progress(&probe, "after", 0, 0);
    CHECK_EQ_INT(probe.begin_rc, SQLITE_OK);
    CHECK_EQ_INT(probe.checkpoint_busy, 0);
    CHECK_EQ_INT(mv_backup_verify(info.path, TB_PW, strlen(TB_PW), &o, NULL, err, sizeof err),
                 MV_OK);
}

/* ---- restore ------------------------------------------------------------------------------ */

static void test_restore_round_trip(void)
{
    const char *a = "round@example.org";
    CHECK_EQ_INT(tb_create(a, TB_MESSAGES), MV_OK);
    struct mv_store_options o = tb_options();
    struct mv_backup_info info;
    char err[512] = "";
    CHECK_EQ_INT(mv_backup_write(a, TB_PW, strlen(TB_PW), &o, tu_path("bk-round"), NULL, &info, err,
                                 sizeof err),
                 MV_OK);
    CHECK_EQ_INT((long long)info.messages, TB_MESSAGES);
    CHECK(tu_file_exists(info.manifest_path));
    /* Change the store after the backup: more mail, an expunge. */
    mv_store *s = NULL;
    CHECK_EQ_INT(mv_store_open(a, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err), MV_OK);
    int rc = tb_append(s, 100);
    uint32_t n = 0;
    if (rc == MV_OK) {
        rc = mv_flags_set(s, "INBOX", "1:3", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL);
    }
    if (rc == MV_OK) {
        rc = mv_mailbox_expunge(s, "INBOX", NULL, &n);
    }
    mv_store_close(&s);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, info.path, NULL, err, sizeof err),
                 MV_OK);
    CHECK_EQ_INT(tb_check_messages(a, TB_MESSAGES), MV_OK);
    CHECK(tu_file_exists(info.path)); /* the snapshot stays */
    char path[1024];
    snprintf(path, sizeof path, "%s/example.org/round.db.new", tu_path("root"));
    CHECK(!tu_file_exists(path));
    /* A lost store (files gone) is restored too. */
    snprintf(path, sizeof path, "%s/example.org/round.db", tu_path("root"));
    tu_remove_db(path);
    unlink(path);
    snprintf(path, sizeof path, "%s/example.org/round.pub", tu_path("root"));
    unlink(path);
    CHECK_EQ_INT(mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, info.path, NULL, err, sizeof err),
                 MV_OK);
    CHECK_EQ_INT(tb_check_messages(a, TB_MESSAGES), MV_OK);
    CHECK(tu_file_exists(path));
}

/* Replaces the "sha256" value of the manifest with the file's current digest. */
static int tb_manifest_resign(const struct mv_backup_info *info)
{
    size_t len = 0;
    uint8_t *text = tu_read_file(info->manifest_path, &len);
    char now[65];
    tu_file_sha256(info->path, now);
    char *at = text != NULL ? strstr((char *)text, info->sha256) : NULL;
    if (at == NULL) {
        free(text);
        return -1;
    }
    memcpy(at, now, 64);
    int rc = tu_write_file(info->manifest_path, text, len);
    free(text);
    return rc;
}

static void test_restore_refusals(void)
{
    const char *a = "refuse@example.org";
    CHECK_EQ_INT(tb_create(a, TB_MESSAGES), MV_OK);
    CHECK_EQ_INT(tb_create("other@example.org", 3), MV_OK);
    struct mv_store_options o = tb_options();
    struct mv_backup_info info, other;
    char err[512] = "";
    CHECK_EQ_INT(mv_backup_write(a, TB_PW, strlen(TB_PW), &o, tu_path("bk-refuse"), NULL, &info,
                                 err, sizeof err),
                 MV_OK);
    CHECK_EQ_INT(mv_backup_write("other@example.org", TB_PW, strlen(TB_PW), &o,
                                 tu_path("bk-refuse"), NULL, &other, err, sizeof err),
                 MV_OK);
    mv_store *s = NULL; /* the store moves on after the backup */
    CHECK_EQ_INT(mv_store_open(a, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err), MV_OK);
    int rc = tb_append(s, TB_MESSAGES);
    mv_store_close(&s);
    CHECK_EQ_INT(rc, MV_OK);
    char before[300], after[300];
    tb_store_digest("refuse", before, sizeof before);

    /* Wrong password. */
    CHECK_EQ_INT(mv_backup_restore(a, "wrong", 5, &o, info.path, NULL, err, sizeof err), MV_EAUTH);
    /* Another address's backup. */
    CHECK_EQ_INT(mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, other.path, NULL, err, sizeof err),
                 MV_EINVAL);
    CHECK(strstr(err, "other@example.org") != NULL);
    /* Missing snapshot, missing manifest. */
    CHECK_EQ_INT(
        mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, tu_path("nothing"), NULL, err, sizeof err),
        MV_ENOTFOUND);
    /* Store in use. */
    struct mv_ops_options po = MV_OPS_OPTIONS_INIT;
    po.lock_wait_ms = 100;
    CHECK_EQ_INT(mv_store_open(a, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err), MV_OK);
    rc = mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, info.path, &po, err, sizeof err);
    mv_store_close(&s);
    CHECK_EQ_INT(rc, MV_EBUSY);
    tb_store_digest("refuse", before, sizeof before); /* the open and close may have written */
    /* Damaged: one bit flipped in the middle of the snapshot. */
    long long size = tu_file_size(info.path);
    CHECK_EQ_INT(tu_flip_bit(info.path, size / 2, 3), 0);
    CHECK_EQ_INT(mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, info.path, NULL, err, sizeof err),
                 MV_ECORRUPT);
    CHECK(strstr(err, "SHA-256") != NULL);
    /* Damaged, with a manifest that agrees: the page fails authentication. */
    CHECK_EQ_INT(tb_manifest_resign(&info), 0);
    CHECK_EQ_INT(mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, info.path, NULL, err, sizeof err),
                 MV_ECORRUPT);
    tb_store_digest("refuse", after, sizeof after);
    CHECK(strcmp(before, after) == 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/example.org/refuse.db.new", tu_path("root"));
    CHECK(!tu_file_exists(path));
    CHECK_EQ_INT(tb_check_messages(a, TB_MESSAGES + 1), MV_OK);
}

/* Messages in INBOX, or -1 if the store does not open or fails quick_check. */
static long long tb_inbox_count(const char *address)
{
    struct mv_store_options o = tb_options();
    char err[512] = "";
    mv_store *s = NULL;
    if (mv_store_open(address, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err) != MV_OK) {
        fprintf(stderr, "  open: %s\n", err);
        return -1;
    }
    struct mv_mailbox_info mi;
    long long ok = tu_int(mv_store_db(s), "SELECT count(*) FROM pragma_quick_check "
                                          "WHERE quick_check = 'ok'");
    long long n = mv_mailbox_get(s, "INBOX", &mi) == MV_OK && ok == 1 ? (long long)mi.messages : -1;
    mv_store_close(&s);
    return n;
}

/* A restore killed after each of its steps: before the rename the store is the current
 * one, after it the snapshot; both complete. */
static void test_restore_killed_after_each_step(void)
{
    const char *a = "rkill@example.org";
    CHECK_EQ_INT(tb_create(a, 10), MV_OK);
    struct mv_store_options o = tb_options();
    struct mv_backup_info info;
    char err[512] = "";
    CHECK_EQ_INT(mv_backup_write(a, TB_PW, strlen(TB_PW), &o, tu_path("bk-rkill"), NULL, &info, err,
                                 sizeof err),
                 MV_OK);
    for (int step = 1; step <= 7; step++) {
        mv_store *s = NULL; /* the store moves on: 3 more messages each round */
        CHECK_EQ_INT(mv_store_open(a, TB_PW, strlen(TB_PW), &o, &s, err, sizeof err), MV_OK);
        int rc = MV_OK;
        for (int i = 0; rc == MV_OK && i < 3; i++) {
            rc = tb_append(s, 100 + step * 3 + i);
        }
        mv_store_close(&s);
        CHECK_EQ_INT(rc, MV_OK);
        long long before = tb_inbox_count(a);
        pid_t pid = fork();
        if (pid == 0) {
            char at[32];
            snprintf(at, sizeof at, "restore:%d", step);
            setenv("MAILVAULT_TEST_KILL_AT", at, 1);
            _exit(mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, info.path, NULL, err,
                                    sizeof err) == MV_OK
                      ? 0
                      : 1);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        long long now = tb_inbox_count(a);
        printf("  # restore killed after step %d: %lld messages (before %lld, snapshot 10)\n", step,
               now, before);
        CHECK_EQ_INT(now, step < 6 ? before : 10);
    }
    CHECK_EQ_INT(mv_backup_restore(a, TB_PW, strlen(TB_PW), &o, info.path, NULL, err, sizeof err),
                 MV_OK);
    CHECK_EQ_INT(tb_inbox_count(a), 10);
    char path[1024];
    snprintf(path, sizeof path, "%s/example.org/rkill.db.new", tu_path("root"));
    CHECK(!tu_file_exists(path));
}

/* ---- pruning ------------------------------------------------------------------------------ */

static int tb_count_suffix(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name), slen = strlen(suffix);
        n += len > slen && strcmp(e->d_name + len - slen, suffix) == 0 && e->d_name[0] != '.';
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

static void test_backup_keep(void)
{
    const char *a = "keep@example.org";
    CHECK_EQ_INT(tb_create(a, 3), MV_OK);
    struct mv_store_options o = tb_options();
    struct mv_ops_options po = MV_OPS_OPTIONS_INIT;
    po.keep = 3;
    struct mv_backup_info info[5];
    char err[512] = "";
    const char *dir = tu_path("bk-keep");
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(
            mv_backup_write(a, TB_PW, strlen(TB_PW), &o, dir, &po, &info[i], err, sizeof err),
            MV_OK);
    }
    CHECK_EQ_INT(tb_count_suffix(dir, ".mvbackup"), 3);
    CHECK_EQ_INT(tb_count_suffix(dir, ".mvbackup.json"), 3);
    CHECK(!tu_file_exists(info[0].path) && !tu_file_exists(info[1].path));
    CHECK(!tu_file_exists(info[0].manifest_path));
    for (int i = 2; i < 5; i++) {
        CHECK(tu_file_exists(info[i].path) && tu_file_exists(info[i].manifest_path));
    }
    CHECK_EQ_INT(info[4].pruned, 1);
    po.keep = MV_BACKUP_KEEP_MAX + 1;
    CHECK_EQ_INT(mv_backup_write(a, TB_PW, strlen(TB_PW), &o, dir, &po, NULL, err, sizeof err),
                 MV_EINVAL);
    CHECK_EQ_INT(mv_backup_write(a, "wrong", 5, &o, dir, NULL, NULL, err, sizeof err), MV_EAUTH);
    CHECK_EQ_INT(tb_count_suffix(dir, ".mvbackup"), 3);
}

int main(void)
{
    if (mv_vfs_register(NULL, 0) != MV_OK) {
        return 1;
    }
    TEST(test_backup_during_deliveries);
    TEST(test_keyless_during_deliveries);
    TEST(test_keyless_busy);
    TEST(test_keyless_freezes_writers);
    TEST(test_restore_round_trip);
    TEST(test_restore_refusals);
    TEST(test_restore_killed_after_each_step);
    TEST(test_backup_keep);
    return th_summary();
}
