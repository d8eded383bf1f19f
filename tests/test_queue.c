/*
 * test_queue.c -- delivery without the password (mv_deliver_sealed) and the drain on open.
 *
 *   - Five sealed deliveries: no plaintext in the queue, mv_queue_count, then an open with
 *     the password moves them into INBOX byte for byte and empties the queue.
 *   - Tampered, garbage and foreign-key files go to rejected/; the rest is delivered.
 *   - Identical bytes delivered twice are two messages (exactly-once is by delivery id).
 *   - A drain SIGKILLed at random points, many times: after every kill each delivery is in
 *     INBOX at most once and in INBOX or the queue; after a clean open, exactly once.
 *   - Missing store, over-size message, bad addresses: the right code, nothing created.
 *   - A wrong .pub is rewritten from the store; a file over the opener's size limit waits.
 *   - Drain in steps (MV_STORE_DRAIN_LATER, mv_queue_drain): the open moves nothing, each
 *     step at most its bound, every delivery exactly once and in arrival order, also one
 *     queued between steps, also with a second handle draining the same queue.
 *   - Processes delivering sealed while others open (and so drain) and close the store:
 *     nothing fails, every delivery exactly once.
 *   - The read-ahead: at most STORE_QUEUE_AHEAD_ITEMS files and STORE_QUEUE_AHEAD_BYTES of
 *     opened mail ahead, prepared on its own thread (also between steps), stopped at the
 *     drain's end and at a close; a damaged file among them set aside, the rest in order;
 *     SIGKILL during a stepped drain: exactly once as above.
 *   - A message a limit refuses in the middle of a batch goes to rejected/, the rest of the
 *     batch is stored once each.
 *   - Two phases: a drain step stores mail without its full-text rows (the backlog); every
 *     kind of full-text search finds exactly what it finds once mv_store_index_backlog() has
 *     built them, on a read-only handle too; a check counts no problem; a purged body only
 *     leaves the backlog. The catch-up SIGKILLed at random points: searches and the check
 *     stay right after every kill, and a later call finishes it.
 */
#include "harness.h"
#include "store/store.h"
#include "store/store_queue_ahead.h"
#include "store/store_queue_box.h"
#include "testutil.h"
#include "vfs/vfs.h"

#include <dirent.h>
#include <signal.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PW          "queue-password"
#define CRASH_FIRST 320 /* deliveries queued before the kills: five batches */
#define CRASH_LATER 40  /* queued after a few kills */
#define CRASH_MAX   (CRASH_FIRST + CRASH_LATER)
#define CRASH_KILLS 40 /* most kills; the loop ends when the queue is empty */

static uint32_t qt_rng = 0x2545f491u;

static uint32_t qt_next(void)
{
    qt_rng ^= qt_rng << 13;
    qt_rng ^= qt_rng >> 17;
    qt_rng ^= qt_rng << 5;
    return qt_rng;
}

static struct mv_store_options qt_options(const char *root)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path(root);
    o.kdf_iter = TU_KDF_ITER;
    o.cache_size_kib = 4096;
    return o;
}

static int qt_init(const char *address, const struct mv_store_options *o)
{
    char err[256] = "";
    int rc = mv_store_init(address, PW, strlen(PW), o, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  init %s: %s\n", address, err);
    }
    return rc;
}

static int qt_open(const char *address, const struct mv_store_options *o, mv_store **s)
{
    char err[512] = "";
    int rc = mv_store_open(address, PW, strlen(PW), o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open %s: %s\n", address, err);
    }
    return rc;
}

/* A message whose subject and body carry "MARKER-<tag>-<i>". */
static size_t qt_message(char *buf, size_t size, const char *tag, int i)
{
    int n = snprintf(buf, size,
                     "From: sender%d@example.net\r\nTo: someone@example.org\r\n"
                     "Subject: MARKER-%s-%04d\r\nMessage-ID: <%s-%d@example.net>\r\n\r\n"
                     "secret body of MARKER-%s-%04d: the quick brown fox\r\n",
                     i, tag, i, tag, i, tag, i);
    return (size_t)n;
}

static int qt_deliver(const char *address, const struct mv_store_options *o, const char *tag, int i)
{
    char msg[512], err[256] = "";
    size_t len = qt_message(msg, sizeof msg, tag, i);
    int rc = mv_deliver_sealed(address, msg, len, o, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  deliver: %s\n", err);
    }
    return rc;
}

static uint32_t qt_count(const char *address, const struct mv_store_options *o)
{
    uint32_t n = 0;
    return mv_queue_count(address, o, &n) == MV_OK ? n : 0xffffffffu;
}

/* Number of entries in dir whose names contain part ("" for every one), leaving out dot
 * files and the rejected/ directory; -1 if dir does not exist. */
static int qt_files_named(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return -1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.' && strcmp(e->d_name, "rejected") != 0 &&
             strstr(e->d_name, part) != NULL;
    }
    closedir(d);
    return n;
}

/* Number of files in dir (deliveries, not rejected/); -1 if it does not exist. */
static int qt_files(const char *dir)
{
    return qt_files_named(dir, "");
}

/* Whether any file in dir contains needle. */
static int qt_dir_contains(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    int found = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        uint8_t *data = e->d_name[0] != '.' ? tu_read_file(path, &n) : NULL;
        found |= data != NULL && tu_contains(data, n, needle, strlen(needle));
        free(data);
    }
    if (d != NULL) {
        closedir(d);
    }
    return found;
}

static void test_deliver_then_open(void)
{
    struct mv_store_options o = qt_options("root1");
    const char *who = "alice@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    char pub[1024], queue[1024];
    snprintf(pub, sizeof pub, "%s/example.org/alice.pub", o.root);
    snprintf(queue, sizeof queue, "%s/example.org/alice.queue", o.root);
    struct stat st;
    CHECK(stat(pub, &st) == 0 && st.st_size == 32 && (st.st_mode & 0777) == 0600);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "plain", i), MV_OK);
    }
    CHECK(stat(queue, &st) == 0 && (st.st_mode & 0777) == 0700);
    CHECK_EQ_INT(qt_files(queue), 5);
    CHECK(!qt_dir_contains(queue, "MARKER-"));
    CHECK(!qt_dir_contains(queue, "secret body"));
    CHECK_EQ_INT(qt_count(who, &o), 5);

    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 5);
    for (uint32_t uid = 1; uid <= 5; uid++) {
        char want[512];
        size_t want_len = qt_message(want, sizeof want, "plain", (int)uid - 1);
        void *raw = NULL;
        size_t len = 0;
        CHECK_EQ_INT(mv_message_fetch(s, "INBOX", uid, &raw, &len), MV_OK);
        int same = len == want_len && memcmp(raw, want, len) == 0;
        mv_free(raw);
        CHECK(same);
        struct mv_message_info mi;
        CHECK_EQ_INT(mv_message_get(s, "INBOX", uid, &mi), MV_OK);
        CHECK(mi.internal_date > time(NULL) - 600 && mi.internal_date <= time(NULL));
        CHECK(mi.flags == 0);
    }
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM meta WHERE key LIKE 'deliver%'"), 0);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 0);
    CHECK_EQ_INT(qt_files(queue), 0);
}

/* Seals msg to a fresh key pair that is not the store's. */
static void qt_foreign_file(const char *queue)
{
    uint8_t pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
    const char msg[] = "MVQ1xxxxxxxxyyyyyyyyyyyyyyyySubject: foreign\r\n\r\nx\r\n";
    uint8_t sealed[sizeof msg + crypto_box_SEALBYTES];
    crypto_box_keypair(pk, sk);
    crypto_box_seal(sealed, (const uint8_t *)msg, sizeof msg, pk);
    char path[1200];
    snprintf(path, sizeof path, "%s/00000000000000000001-%032x.sealed", queue, 1u);
    tu_write_file(path, sealed, sizeof sealed);
    snprintf(path, sizeof path, "%s/00000000000000000002-%032x.sealed", queue, 2u);
    tu_write_file(path, "garbage", 7); /* shorter than any sealed box */
}

static void test_tampered_files_rejected(void)
{
    struct mv_store_options o = qt_options("root2");
    const char *who = "bob@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    CHECK(sodium_init() >= 0);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "tamper", i), MV_OK);
    }
    char queue[1024], rejected[1100], victim[1400] = "";
    snprintf(queue, sizeof queue, "%s/example.org/bob.queue", o.root);
    snprintf(rejected, sizeof rejected, "%s/rejected", queue);
    DIR *d = opendir(queue);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.' && victim[0] == '\0') {
            snprintf(victim, sizeof victim, "%s/%s", queue, e->d_name);
        }
    }
    closedir(d);
    CHECK(tu_flip_bit(victim, 100, 3) == 0);
    qt_foreign_file(queue);
    CHECK_EQ_INT(qt_count(who, &o), 6);

    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    CHECK(strstr(mv_store_errmsg(s), "rejected") != NULL);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 3);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 0);
    CHECK_EQ_INT(qt_files(rejected), 3); /* kept, never deleted */
    CHECK(!tu_file_exists(victim));
}

/* The queue's files in name (arrival) order, read whole; returns how many (at most max). */
static int qt_queue_files(const char *queue, uint8_t **data, size_t *len, int max)
{
    struct dirent **names = NULL;
    int n = scandir(queue, &names, NULL, alphasort), got = 0;
    for (int i = 0; i < n; i++) {
        if (strstr(names[i]->d_name, ".sealed") != NULL && got < max) {
            char path[1600];
            snprintf(path, sizeof path, "%s/%s", queue, names[i]->d_name);
            data[got] = tu_read_file(path, &len[got]);
            got += data[got] != NULL;
        }
        free(names[i]);
    }
    free(names);
    return got;
}

/* Deliveries to one store in a burst share its ephemeral key (one X25519 for all, on both
 * sides); each has its own nonce; a wiped key, or a window of 0, makes the next one new; the
 * drain opens them all. The old sealing (crypto_box_seal per file) fails the first check. */
static void test_burst_shares_a_key(void)
{
    struct mv_store_options o = qt_options("root_burst");
    const char *who = "burst@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    char queue[1024];
    snprintf(queue, sizeof queue, "%s/example.org/burst.queue", o.root);
    mv_deliver_sealed_wipe(1);
    int64_t window = store_box_burst_ms_set(3600 * 1000); /* however slow this machine is */
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "burst", i), MV_OK);
    }
    mv_deliver_sealed_wipe(0); /* the burst is not over: kept */
    CHECK_EQ_INT(qt_deliver(who, &o, "burst", 3), MV_OK);
    mv_deliver_sealed_wipe(1);
    CHECK_EQ_INT(qt_deliver(who, &o, "burst", 4), MV_OK);
    store_box_burst_ms_set(0); /* every delivery its own key */
    CHECK_EQ_INT(qt_deliver(who, &o, "burst", 5), MV_OK);
    CHECK_EQ_INT(qt_deliver(who, &o, "burst", 6), MV_OK);
    store_box_burst_ms_set(window);
    mv_deliver_sealed_wipe(1);

    uint8_t *f[7] = {0};
    size_t n[7] = {0};
    CHECK_EQ_INT(qt_queue_files(queue, f, n, 7), 7);
    for (int i = 0; i < 7; i++) {
        CHECK(f[i] != NULL && n[i] > STORE_BOX_OVERHEAD_2 && memcmp(f[i], "MVB2", 4) == 0);
    }
    if (f[6] != NULL) {
        for (int i = 1; i < 4; i++) {
            CHECK(memcmp(f[i] + 4, f[0] + 4, 32) == 0);   /* one ephemeral key */
            CHECK(memcmp(f[i] + 36, f[0] + 36, 24) != 0); /* each its nonce */
        }
        CHECK(memcmp(f[4] + 4, f[0] + 4, 32) != 0); /* after the wipe: a new key */
        CHECK(memcmp(f[5] + 4, f[4] + 4, 32) != 0);
        CHECK(memcmp(f[6] + 4, f[5] + 4, 32) != 0);
    }
    for (int i = 0; i < 7; i++) {
        free(f[i]);
    }

    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    for (uint32_t uid = 1; uid <= 7; uid++) {
        char want[512];
        size_t want_len = qt_message(want, sizeof want, "burst", (int)uid - 1);
        void *raw = NULL;
        size_t len = 0;
        CHECK_EQ_INT(mv_message_fetch(s, "INBOX", uid, &raw, &len), MV_OK);
        CHECK(len == want_len && memcmp(raw, want, len) == 0);
        mv_free(raw);
    }
    mv_store_close(&s);
    CHECK_EQ_INT(qt_files(queue), 0);
}

/* A file in the sealing of before burst keys (crypto_box_seal of "MVQ1" | date | id |
 * message to the store's key: what a queue holds across an upgrade) is drained as before;
 * a burst's file whose ephemeral key lost a bit, or its nonce, is set aside, the others of
 * its burst drained. */
static void test_form1_and_damaged_form2(void)
{
    struct mv_store_options o = qt_options("root_form1");
    const char *who = "form1@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    CHECK(sodium_init() >= 0);
    char pub[1024], queue[1024], rejected[1100], path[1600];
    snprintf(pub, sizeof pub, "%s/example.org/form1.pub", o.root);
    snprintf(queue, sizeof queue, "%s/example.org/form1.queue", o.root);
    snprintf(rejected, sizeof rejected, "%s/rejected", queue);
    int64_t window = store_box_burst_ms_set(3600 * 1000);
    mv_deliver_sealed_wipe(1);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "form2", i), MV_OK);
    }
    store_box_burst_ms_set(window);
    mv_deliver_sealed_wipe(1);
    struct dirent **names = NULL;
    int k = scandir(queue, &names, NULL, alphasort), seen = 0;
    for (int i = 0; i < k; i++) {
        if (strstr(names[i]->d_name, ".sealed") != NULL && seen++ < 2) {
            snprintf(path, sizeof path, "%s/%s", queue, names[i]->d_name);
            CHECK(tu_flip_bit(path, seen == 1 ? 9 : 40, 0) == 0); /* the key; the nonce */
        }
        free(names[i]);
    }
    free(names);

    size_t pk_len = 0;
    uint8_t *pk = tu_read_file(pub, &pk_len);
    CHECK(pk != NULL && pk_len == crypto_box_PUBLICKEYBYTES);
    char msg[512];
    size_t msg_len = qt_message(msg, sizeof msg, "form1", 0);
    uint8_t plain[600], sealed[600 + crypto_box_SEALBYTES];
    memcpy(plain, "MVQ1", 4);
    uint64_t when = (uint64_t)time(NULL);
    for (int i = 0; i < 8; i++) {
        plain[4 + i] = (uint8_t)(when >> (8 * i));
    }
    memset(plain + 12, 0x5a, 16); /* the delivery id */
    memcpy(plain + 28, msg, msg_len);
    if (pk != NULL && pk_len == crypto_box_PUBLICKEYBYTES) {
        CHECK(crypto_box_seal(sealed, plain, 28 + msg_len, pk) == 0);
        snprintf(path, sizeof path, "%s/%020llu-%032x.sealed", queue, 99999999999999999ULL, 7u);
        tu_write_file(path, sealed, 28 + msg_len + crypto_box_SEALBYTES);
    }
    free(pk);

    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 2); /* the form-1 file and the undamaged form-2 one */
    void *raw = NULL;
    size_t len = 0;
    CHECK_EQ_INT(mv_message_fetch(s, "INBOX", 1, &raw, &len), MV_OK);
    CHECK(len == msg_len && memcmp(raw, msg, len) == 0); /* the form-1 file is named first */
    mv_free(raw);
    char want[512];
    size_t want_len = qt_message(want, sizeof want, "form2", 2);
    CHECK_EQ_INT(mv_message_fetch(s, "INBOX", 2, &raw, &len), MV_OK);
    CHECK(len == want_len && memcmp(raw, want, len) == 0);
    mv_free(raw);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_files(rejected), 2); /* kept, never deleted */
    CHECK_EQ_INT(qt_count(who, &o), 0);
}

/* Builds message k of test_drain_compresses_ahead into buf (size bytes); its length. */
static size_t qt_prepack_message(char *buf, size_t size, int k)
{
    size_t n =
        (size_t)snprintf(buf, size, "From: a@example.net\r\nSubject: prepack %d\r\n%s\r\n", k,
                         k == 3 ? "Content-Type: multipart/mixed; boundary=\"b\"\r\n" : "");
    uint32_t x = 12345u + (uint32_t)k; /* a fixed generator: the same bytes every run */
    if (k == 0) {
        n += (size_t)snprintf(buf + n, size - n, "x\r\n"); /* under 64 bytes: kept as is */
    } else if (k == 1 || k == 4) {                         /* text, compressible; 4 is ~200 KB */
        for (int line = 0; line < (k == 1 ? 40 : 3000); line++) {
            n += (size_t)snprintf(buf + n, size - n,
                                  "line %d of the body, words again and again\r\n", line % 7);
        }
    } else if (k == 2) { /* printable noise: saves little */
        for (int i = 0; i < 6000; i++) {
            x = x * 1103515245u + 12345u;
            buf[n++] = (char)(33 + (x >> 16) % 94);
            if (i % 76 == 75) {
                buf[n++] = '\r';
                buf[n++] = '\n';
            }
        }
    } else { /* an attachment over STORE_SPLIT_MIN: cut out, so compressed by the append */
        n += (size_t)snprintf(buf + n, size - n,
                              "--b\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n--b\r\n"
                              "Content-Type: application/octet-stream\r\n"
                              "Content-Transfer-Encoding: base64\r\n\r\n");
        for (int line = 0; line < 2400; line++) {
            for (int i = 0; i < 76; i++) {
                x = x * 1103515245u + 12345u;
                buf[n++] =
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(x >> 16) %
                                                                                       64];
            }
            buf[n++] = '\r';
            buf[n++] = '\n';
        }
        n += (size_t)snprintf(buf + n, size - n, "--b--\r\n");
    }
    return n;
}

/* The stored body of message uid of INBOX: its bodies row and skeleton, as one string. */
static char *qt_body_row(mv_store *s, uint32_t uid, size_t *len)
{
    sqlite3_stmt *st = NULL;
    char *out = NULL;
    *len = 0;
    if (sqlite3_prepare_v2(
            mv_store_db(s),
            "SELECT b.size, b.stored_size, b.compression, b.header_stored, "
            "quote(b.head), quote(d.data) FROM messages m JOIN mailboxes x ON "
            "x.id = m.mailbox_id AND x.name = 'INBOX' JOIN bodies b ON "
            "b.id = m.body_id LEFT JOIN bodies_data d ON d.id = b.id WHERE m.uid = ?",
            -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, uid);
        if (sqlite3_step(st) == SQLITE_ROW) {
            size_t a = (size_t)sqlite3_column_bytes(st, 4), b = (size_t)sqlite3_column_bytes(st, 5);
            out = malloc(a + b + 128);
            if (out != NULL) {
                *len = (size_t)snprintf(
                    out, a + b + 128, "%lld %lld %d %lld %s %s",
                    (long long)sqlite3_column_int64(st, 0), (long long)sqlite3_column_int64(st, 1),
                    sqlite3_column_int(st, 2), (long long)sqlite3_column_int64(st, 3),
                    (const char *)sqlite3_column_text(st, 4),
                    (const char *)sqlite3_column_text(st, 5));
            }
        }
    }
    sqlite3_finalize(st);
    return out;
}

/* The read-ahead compresses each message without a part to cut as the append would
 * (store_blob_prepack): the drained store's body rows are byte for byte those of the same
 * messages appended to another store, and the four of five without an attachment were stored
 * from the read-ahead's compression (the old drain compressed all five on its own thread). */
static void test_drain_compresses_ahead(void)
{
    struct mv_store_options o = qt_options("root_prepack");
    const char *who = "prepack@example.org", *twin = "twin@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    CHECK_EQ_INT(qt_init(twin, &o), MV_OK);
    size_t cap = 400000;
    char *msg = malloc(cap), err[256] = "";
    CHECK(msg != NULL);
    if (msg == NULL) {
        return;
    }
    mv_store *t = NULL;
    CHECK_EQ_INT(qt_open(twin, &o, &t), MV_OK);
    for (int k = 0; k < 5; k++) {
        size_t n = qt_prepack_message(msg, cap, k);
        CHECK_EQ_INT(mv_deliver_sealed(who, msg, n, &o, err, sizeof err), MV_OK);
        uint32_t uid = 0;
        CHECK_EQ_INT(mv_message_append(t, "INBOX", msg, n, 0, NULL, 0, &uid), MV_OK);
    }
    free(msg);
    uint64_t before = store_blob_prepacked_stored();
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK); /* drains, with its read-ahead */
    CHECK_EQ_INT(store_blob_prepacked_stored() - before, 4);
    for (uint32_t uid = 1; uid <= 5; uid++) {
        size_t a = 0, b = 0;
        char *mine = qt_body_row(s, uid, &a), *theirs = qt_body_row(t, uid, &b);
        CHECK(mine != NULL && theirs != NULL && a == b && memcmp(mine, theirs, a) == 0);
        if (uid == 2 || uid == 5) {
            CHECK(mine != NULL && strncmp(strchr(strchr(mine, ' ') + 1, ' ') + 1, "1 ", 2) == 0);
        }
        free(mine);
        free(theirs);
    }
    mv_store_close(&t);
    mv_store_close(&s);
}

static void test_identical_bytes_twice(void)
{
    struct mv_store_options o = qt_options("root3");
    const char *who = "carol@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    CHECK_EQ_INT(qt_deliver(who, &o, "same", 7), MV_OK);
    CHECK_EQ_INT(qt_deliver(who, &o, "same", 7), MV_OK);
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 2);
    /* One body for both: the read-ahead's digest (its own SHA-256 call) is the store's, so
     * the second delivery found the first's body, and an append of the same bytes through
     * the store's own hash finds it too. */
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM bodies"), 1);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT refcount FROM body_refs"), 2);
    char msg[512];
    size_t len = qt_message(msg, sizeof msg, "same", 7);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", msg, len, 0, NULL, 0, NULL), MV_OK);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM bodies"), 1);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT refcount FROM body_refs"), 3);
    mv_store_close(&s);
}

/* ---- the crash test ------------------------------------------------------------------- */

struct qt_state {
    int inbox[CRASH_MAX];
    int queue[CRASH_MAX];
    int unknown;
    int delivered_rows;
};

static int qt_marker(const uint8_t *p, size_t n)
{
    static const char tag[] = "MARKER-crash-";
    const uint8_t *m = memmem(p, n, tag, sizeof tag - 1);
    if (m == NULL || (size_t)(m - p) + sizeof tag - 1 + 4 > n) {
        return -1;
    }
    int v = 0;
    for (size_t i = 0; i < 4; i++) {
        uint8_t c = m[sizeof tag - 1 + i];
        if (c < '0' || c > '9') {
            return -1;
        }
        v = v * 10 + (c - '0');
    }
    return v < CRASH_MAX ? v : -1;
}

/* Counts each marker in INBOX (by subject, through a plain connection: no drain) and in the
 * queue (opened with the secret key from meta). */
/* Opens a queue file's box as docs/DELIVERY.md describes it (written here from the format,
 * not with the library's opener): form 2, "MVB2" | ephemeral pk | nonce | crypto_box_easy,
 * or form 1, crypto_box_seal. 0 and the plaintext, or -1. */
static int qt_open_box(const uint8_t *sealed,
                       size_t n,
                       const uint8_t *pk,
                       const uint8_t *sk,
                       uint8_t *plain,
                       size_t *plain_len)
{
    if (n >= 76 && memcmp(sealed, "MVB2", 4) == 0 &&
        crypto_box_open_easy(plain, sealed + 60, n - 60, sealed + 36, sealed + 4, sk) == 0) {
        *plain_len = n - 76;
        return 0;
    }
    if (n >= 48 && crypto_box_seal_open(plain, sealed, n, pk, sk) == 0) {
        *plain_len = n - 48;
        return 0;
    }
    return -1;
}

static int qt_state_read(const char *db_path, const char *queue, struct qt_state *st)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    uint8_t pk[32], sk[32];
    memset(st, 0, sizeof *st);
    if (tu_open(db_path, PW, MV_CIPHER_AUTO, 0, &db) != MV_OK ||
        sqlite3_prepare_v2(db, "SELECT key, value FROM meta WHERE key LIKE 'queue_%_key'", -1, &q,
                           NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return -1;
    }
    while (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_bytes(q, 1) == 32) {
        const char *key = (const char *)sqlite3_column_text(q, 0);
        memcpy(strstr(key, "public") != NULL ? pk : sk, sqlite3_column_blob(q, 1), 32);
    }
    sqlite3_finalize(q);
    sqlite3_prepare_v2(db,
                       "SELECT subject FROM messages JOIN body_headers USING (body_id) "
                       "WHERE mailbox_id = (SELECT id FROM mailboxes WHERE name = 'INBOX')",
                       -1, &q, NULL);
    while (sqlite3_step(q) == SQLITE_ROW) {
        int i = qt_marker(sqlite3_column_text(q, 0), (size_t)sqlite3_column_bytes(q, 0));
        if (i < 0) {
            st->unknown++;
        } else {
            st->inbox[i]++;
        }
    }
    sqlite3_finalize(q);
    st->delivered_rows = (int)tu_int(db, "SELECT count(*) FROM meta WHERE key LIKE 'deliver%'");
    sqlite3_close(db);
    DIR *d = opendir(queue);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[1200];
        size_t n = 0;
        snprintf(path, sizeof path, "%s/%s", queue, e->d_name);
        uint8_t *sealed = strstr(e->d_name, ".sealed") ? tu_read_file(path, &n) : NULL;
        uint8_t *plain = sealed != NULL && n > 48 ? malloc(n) : NULL;
        size_t plain_len = 0;
        int i = plain != NULL && qt_open_box(sealed, n, pk, sk, plain, &plain_len) == 0
                    ? qt_marker(plain, plain_len)
                    : -1;
        if (i >= 0) {
            st->queue[i]++;
        } else if (sealed != NULL) {
            st->unknown++;
        }
        free(plain);
        free(sealed);
    }
    if (d != NULL) {
        closedir(d);
    }
    return 0;
}

/* The deliveries the drain in qt_kill_drain's child has taken so far (a shared page). */
static _Atomic uint32_t *qt_taken;

static void qt_taken_hook(mv_store *s)
{
    (void)s;
    atomic_fetch_add(qt_taken, 1);
}

/* Opens the store (which drains the queue) in a child, killed once its drain has taken
 * taken_min deliveries, plus delay_us (so the kill lands anywhere in the next delivery).
 * The kill follows the drain's progress, not a clock: on a fast or a loaded machine alike
 * it lands in the middle, inside a batch's transaction, between commits or while the files
 * leave the queue (which they do only after the WAL sync that ends the drain or a step).
 * stepped: the child opens with MV_STORE_DRAIN_LATER and drains in steps of 4, as a server
 * does (its read-ahead thread working between steps). 1 if the child finished first. */
static int qt_kill_drain(const char *who,
                         const struct mv_store_options *o,
                         int stepped,
                         uint32_t taken_min,
                         unsigned delay_us)
{
    atomic_store(qt_taken, 0);
    pid_t pid = fork();
    if (pid == 0) {
        store_queue_take_hook_set(qt_taken_hook);
        mv_store *s = NULL;
        char err[256];
        struct mv_store_options so = *o;
        so.flags |= stepped ? MV_STORE_DRAIN_LATER : 0;
        int rc = mv_store_open(who, PW, strlen(PW), &so, &s, err, sizeof err);
        int more = stepped;
        while (rc == MV_OK && more) {
            uint32_t moved = 0;
            rc = mv_queue_drain(s, 4, &moved, &more);
        }
        mv_store_close(&s);
        _exit(rc == MV_OK ? 0 : 1);
    }
    int status = 0, exited = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            exited = 1;
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (atomic_load(qt_taken) >= taken_min || now.tv_sec - start.tv_sec > 120) {
            break;
        }
        usleep(200);
    }
    if (!exited) {
        usleep(delay_us);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* stepped: the kills land in a stepped drain with its read-ahead (qt_kill_drain). */
static void qt_sigkill_drain_run(const char *root, int stepped)
{
    struct mv_store_options o = qt_options(root);
    const char *who = "crash@example.org";
    char db_path[1024], queue[1024];
    snprintf(db_path, sizeof db_path, "%s/example.org/crash.db", o.root);
    snprintf(queue, sizeof queue, "%s/example.org/crash.queue", o.root);
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    if (qt_taken == NULL) { /* shared with the children (qt_kill_drain) */
        void *page =
            mmap(NULL, sizeof *qt_taken, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        CHECK(page != MAP_FAILED);
        qt_taken = page;
    }
    for (int i = 0; i < CRASH_FIRST; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "crash", i), MV_OK);
    }
    /* Each kill lands up to two batches into what is left, so kills land all along the
     * drain. A child takes first the files whose deliveries are stored already (found by
     * their meta rows): those are still queued, and counted in again. */
    static struct qt_state st;
    int kills = 0, mid = 0, both = 0, finished = 0, queued = CRASH_FIRST, again = 0;
    /* (the later deliveries come even if a drain finished before the fourth kill: a drain
     * that renames its files out of the queue ends quickly after its last commit) */
    for (int k = 0; k < CRASH_KILLS && (!finished || queued < CRASH_MAX); k++) {
        if (k == 4) {
            for (int i = CRASH_FIRST; i < CRASH_MAX; i++) {
                CHECK_EQ_INT(qt_deliver(who, &o, "crash", i), MV_OK);
            }
            queued = CRASH_MAX;
        }
        /* 1 to 128 new deliveries into the drain (16 in steps of 4), then up to 3 ms more. */
        uint32_t ahead = 1u + qt_next() % (stepped ? 16u : 128u);
        finished = qt_kill_drain(who, &o, stepped, (uint32_t)again + ahead, qt_next() % 3000u);
        kills += !finished;
        CHECK_EQ_INT(qt_state_read(db_path, queue, &st), 0);
        CHECK_EQ_INT(st.unknown, 0);
        int stored = 0;
        again = 0;
        for (int i = 0; i < queued; i++) {
            CHECK(st.inbox[i] <= 1);               /* never twice */
            CHECK(st.inbox[i] + st.queue[i] >= 1); /* never lost */
            both += st.inbox[i] == 1 && st.queue[i] > 0;
            again += st.inbox[i] == 1 && st.queue[i] > 0;
            stored += st.inbox[i];
        }
        mid += !finished && stored > 0 && stored < queued;
    }
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_state_read(db_path, queue, &st), 0);
    for (int i = 0; i < CRASH_MAX; i++) {
        CHECK_EQ_INT(st.inbox[i], 1);
        CHECK_EQ_INT(st.queue[i], 0);
    }
    CHECK_EQ_INT(st.delivered_rows, 0);
    CHECK_EQ_INT(qt_count(who, &o), 0);
    printf("  %d kills (%d mid-drain, %d times a delivery was both stored and still queued)\n",
           kills, mid, both);
    CHECK(mid >= 3);
}

static void test_sigkill_during_drain(void)
{
    qt_sigkill_drain_run("root4", 0);
}

/* The same in steps, with the read-ahead thread reading and opening files ahead when the
 * kill comes: still each delivery in INBOX at most once, never lost, exactly once at the end. */
static void test_sigkill_during_stepped_drain(void)
{
    qt_sigkill_drain_run("root4s", 1);
}

/* ---- refusals ------------------------------------------------------------------------- */

static void test_missing_store(void)
{
    struct mv_store_options o = qt_options("root5");
    char err[256] = "", dir[1024];
    CHECK_EQ_INT(mv_deliver_sealed("nobody@example.org", "x\r\n", 3, &o, err, sizeof err),
                 MV_ENOTFOUND);
    CHECK(err[0] != '\0');
    snprintf(dir, sizeof dir, "%s/example.org", o.root);
    CHECK(!tu_file_exists(dir));
    CHECK(!tu_file_exists(o.root));
    uint32_t n = 7;
    CHECK_EQ_INT(mv_queue_count("nobody@example.org", &o, &n), MV_ENOTFOUND);
}

static void test_oversize(void)
{
    struct mv_store_options o = qt_options("root6");
    const char *who = "dave@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    o.limits.message_size_max = 1000;
    char *big = malloc(1001), err[256] = "";
    CHECK(big != NULL);
    memset(big, 'a', 1001);
    int rc = mv_deliver_sealed(who, big, 1001, &o, err, sizeof err);
    int rc_exact = mv_deliver_sealed(who, big, 1000, &o, err, sizeof err);
    free(big);
    CHECK_EQ_INT(rc, MV_ELIMIT);
    CHECK_EQ_INT(rc_exact, MV_OK);
    CHECK_EQ_INT(qt_count(who, &o), 1);
    CHECK_EQ_INT(mv_deliver_sealed(who, "", 0, &o, err, sizeof err), MV_EINVAL);
}

static void test_bad_addresses(void)
{
    struct mv_store_options o = qt_options("root7");
    static const char *const bad[] = {"../x@y", "a/b@c",     "x@..",  "x@y/../z", "",
                                      "@y",     "x@",        "x@.y",  ".x@y",     "x@y\n",
                                      "x\\y@z", "x@y@z/../", "x y@z", "x@-y"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        CHECK_EQ_INT(mv_deliver_sealed(bad[i], "x\r\n", 3, &o, err, sizeof err), MV_EINVAL);
        uint32_t n = 0;
        CHECK_EQ_INT(mv_queue_count(bad[i], &o, &n), MV_EINVAL);
    }
    CHECK(!tu_file_exists(o.root));
}

/* A .pub replaced by another key: deliveries sealed to it are rejected at the next open,
 * which also writes the right key back; a .pub of the wrong size refuses deliveries. */
static void test_pub_rewritten(void)
{
    struct mv_store_options o = qt_options("root8");
    const char *who = "erin@example.org";
    char pub[1024];
    snprintf(pub, sizeof pub, "%s/example.org/erin.pub", o.root);
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    char good[65], bad[65];
    tu_file_sha256(pub, good);
    uint8_t other[32];
    randombytes_buf(other, sizeof other);
    CHECK(tu_write_file(pub, other, sizeof other) == 0);
    CHECK_EQ_INT(qt_deliver(who, &o, "pub", 1), MV_OK); /* sealed to the wrong key */
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    CHECK(strstr(mv_store_errmsg(s), "written again") != NULL);
    mv_store_close(&s);
    tu_file_sha256(pub, bad);
    CHECK(strcmp(good, bad) == 0);
    char err[256] = "";
    /* 32 bytes, but a low-order point: no key to seal to (the old sealing said MV_ERROR) */
    uint8_t zeros[32] = {0};
    CHECK(tu_write_file(pub, zeros, sizeof zeros) == 0);
    CHECK_EQ_INT(mv_deliver_sealed(who, "x\r\n", 3, &o, err, sizeof err), MV_ECORRUPT);
    CHECK(strstr(err, "no usable public key") != NULL);
    CHECK_EQ_INT(qt_count(who, &o), 0); /* nothing queued */
    CHECK(tu_write_file(pub, other, 31) == 0);
    CHECK_EQ_INT(mv_deliver_sealed(who, "x\r\n", 3, &o, err, sizeof err), MV_ECORRUPT);
    CHECK(unlink(pub) == 0);
    CHECK_EQ_INT(mv_deliver_sealed(who, "x\r\n", 3, &o, err, sizeof err), MV_ECORRUPT);
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_deliver(who, &o, "pub", 2), MV_OK);
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 1);
    mv_store_close(&s);
}

/* A delivery larger than the opener's message_size_max stays queued until an open allows
 * it. */
static void test_large_file_waits(void)
{
    struct mv_store_options o = qt_options("root9");
    const char *who = "frank@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    CHECK_EQ_INT(qt_deliver(who, &o, "large", 1), MV_OK);
    struct mv_store_options small = o;
    small.limits.message_size_max = 50;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &small, &s), MV_OK);
    CHECK(strstr(mv_store_errmsg(s), "left in") != NULL);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 1);
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 0);
}

/* The marker numbers of INBOX's messages in UID order into got (at most max); the count. */
static size_t qt_inbox_markers(mv_store *s, const char *tag, int *got, size_t max)
{
    struct mv_mailbox_info info;
    if (mv_mailbox_get(s, "INBOX", &info) != MV_OK) {
        return 0;
    }
    size_t n = 0;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "MARKER-%s-", tag);
    for (uint32_t uid = 1; uid < info.uidnext && n < max; uid++) {
        void *raw = NULL;
        size_t len = 0;
        if (mv_message_fetch(s, "INBOX", uid, &raw, &len) != MV_OK) {
            continue;
        }
        const char *m = memmem(raw, len, prefix, strlen(prefix));
        got[n++] = m != NULL ? (int)strtol(m + strlen(prefix), NULL, 10) : -1;
        mv_free(raw);
    }
    return n;
}

/* Queues n deliveries tagged tag for who (a new store), then opens it as a server does
 * (MV_STORE_DRAIN_LATER: the open moves nothing) into *s. */
static void qt_queue_then_open_later(
    const char *who, const struct mv_store_options *o, const char *tag, int n, mv_store **s)
{
    CHECK_EQ_INT(qt_init(who, o), MV_OK);
    for (int i = 0; i < n; i++) {
        CHECK_EQ_INT(qt_deliver(who, o, tag, i), MV_OK);
    }
    struct mv_store_options later = *o;
    later.flags |= MV_STORE_DRAIN_LATER;
    CHECK_EQ_INT(qt_open(who, &later, s), MV_OK);
}

#define STEP_DELIVERIES 300
#define STEP_MAX        40

/* A login that must not wait for the queue: the open with MV_STORE_DRAIN_LATER moves
 * nothing, then steps of at most STEP_MAX take the rest, each delivery once, in arrival
 * order (UIDs ascending with arrival), with meta left clean (docs/DELIVERY.md). */
static void test_drain_in_steps(void)
{
    struct mv_store_options o = qt_options("root_steps");
    const char *who = "steps@example.org";
    mv_store *s = NULL;
    qt_queue_then_open_later(who, &o, "step", STEP_DELIVERIES, &s);
    if (s == NULL) {
        return;
    }
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, 0);
    CHECK_EQ_INT(qt_count(who, &o), STEP_DELIVERIES);

    uint32_t total = 0, moved = 0;
    int more = 1, steps = 0, one_more_queued = 0;
    while (more && steps < 100) {
        CHECK_EQ_INT(mv_queue_drain(s, STEP_MAX, &moved, &more), MV_OK);
        CHECK(moved <= STEP_MAX);
        CHECK(more ? moved == STEP_MAX : 1);
        total += moved;
        steps++;
        CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
        CHECK_EQ_INT(info.messages, total); /* each step committed what it moved */
        if (steps == 2) { /* arrives between steps: a later step takes it, after the rest */
            CHECK_EQ_INT(qt_deliver(who, &o, "step", STEP_DELIVERIES), MV_OK);
            one_more_queued = 1;
        }
    }
    CHECK(one_more_queued);
    CHECK_EQ_INT(total, STEP_DELIVERIES + 1);
    CHECK_EQ_INT(steps, (STEP_DELIVERIES + 1 + STEP_MAX - 1) / STEP_MAX);
    CHECK_EQ_INT(qt_count(who, &o), 0);
    CHECK_EQ_INT(mv_queue_drain(s, STEP_MAX, &moved, &more), MV_OK); /* nothing left */
    CHECK_EQ_INT(moved, 0);
    CHECK_EQ_INT(more, 0);

    int got[STEP_DELIVERIES + 8];
    size_t n = qt_inbox_markers(s, "step", got, sizeof got / sizeof got[0]);
    CHECK_EQ_INT(n, STEP_DELIVERIES + 1);
    int in_order = 1;
    for (size_t i = 0; i < n; i++) {
        in_order &= got[i] == (int)i;
    }
    CHECK(in_order);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM meta WHERE key LIKE 'deliver%'"), 0);
    mv_store_close(&s);

    /* Read-only handles never drain. */
    struct mv_store_options ro = o;
    ro.flags |= MV_STORE_READONLY;
    CHECK_EQ_INT(qt_open(who, &ro, &s), MV_OK);
    CHECK_EQ_INT(mv_queue_drain(s, 1, &moved, &more), MV_EINVAL);
    mv_store_close(&s);
    CHECK_EQ_INT(mv_queue_drain(NULL, 1, NULL, NULL), MV_EINVAL);
}

#define SETTLE_DELIVERIES 150 /* more than two of the drain's transactions (64 each) */

/* A step of mv_queue_drain_step() commits its deliveries 64 at a time (each commit makes
 * them visible) and returns once the last is committed, "more" set: the server tells the
 * user's sessions then. The next step first syncs the WAL, once, and only then takes their
 * files out of the queue (SETTLE LATER). The old drain synced each commit (synchronous=FULL:
 * 3 or 4 syncs here) and renamed the files before it returned. Every delivery lands once,
 * the queue ends empty and meta clean. */
static void test_drain_step_syncs_once(void)
{
    struct mv_store_options o = qt_options("root_settle");
    const char *who = "settle@example.org";
    mv_store *s = NULL;
    qt_queue_then_open_later(who, &o, "settle", SETTLE_DELIVERIES, &s);
    if (s == NULL) {
        return;
    }
    struct mv_drain_bounds b = {.max = 1024, .time_ms = 3600 * 1000};
    uint32_t moved = 0;
    int more = 0;
    uint64_t syncs = mv_vfs_wal_syncs();
    CHECK_EQ_INT(mv_queue_drain_step(s, &b, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, SETTLE_DELIVERIES);
    CHECK_EQ_INT(more, 1);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, SETTLE_DELIVERIES);     /* visible: committed */
    CHECK_EQ_INT(qt_count(who, &o), SETTLE_DELIVERIES); /* the files wait for the sync */
    /* at most SQLite's sync of a new WAL header (the first commit restarted the WAL) */
    CHECK(mv_vfs_wal_syncs() - syncs <= 1);
    CHECK_EQ_INT(mv_queue_drain_step(s, &b, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 0);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(qt_count(who, &o), 0);
    uint64_t synced = mv_vfs_wal_syncs() - syncs;
    CHECK(synced >= 1 && synced <= 2); /* the step's own sync */
    int got[SETTLE_DELIVERIES + 8];
    size_t n = qt_inbox_markers(s, "settle", got, sizeof got / sizeof got[0]);
    CHECK_EQ_INT(n, SETTLE_DELIVERIES);
    int in_order = 1;
    for (size_t i = 0; i < n; i++) {
        in_order &= got[i] == (int)i;
    }
    CHECK(in_order);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM meta WHERE key LIKE 'deliver%'"), 0);

    /* A handle closed between the two steps leaves the files queued with their meta rows:
     * the next drain only takes them out. */
    for (int i = 0; i < 10; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "settle2", i), MV_OK);
    }
    CHECK_EQ_INT(mv_queue_drain_step(s, &b, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 10);
    CHECK_EQ_INT(more, 1);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 10);
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK); /* a whole drain */
    CHECK_EQ_INT(qt_count(who, &o), 0);
    int all[SETTLE_DELIVERIES + 16], seen[10] = {0}, once = 1;
    CHECK_EQ_INT(qt_inbox_markers(s, "settle2", all, sizeof all / sizeof all[0]),
                 SETTLE_DELIVERIES + 10);
    for (size_t i = 0; i < SETTLE_DELIVERIES + 10; i++) {
        if (all[i] >= 0) {
            once &= all[i] < 10 && seen[all[i]]++ == 0;
        }
    }
    for (int i = 0; i < 10; i++) {
        once &= seen[i] == 1;
    }
    CHECK(once);
    CHECK_EQ_INT(mv_mailbox_get(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(info.messages, SETTLE_DELIVERIES + 10);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM meta WHERE key LIKE 'deliver%'"), 0);
    mv_store_close(&s);
}

/* Two handles (a server's steps and a CLI open, say) draining one queue alternately: each
 * delivery still lands once. */
static void test_drain_steps_two_handles(void)
{
    struct mv_store_options o = qt_options("root_steps2");
    const char *who = "two@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    for (int i = 0; i < 60; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "two", i), MV_OK);
    }
    struct mv_store_options later = o;
    later.flags |= MV_STORE_DRAIN_LATER;
    mv_store *a = NULL, *b = NULL;
    CHECK_EQ_INT(qt_open(who, &later, &a), MV_OK);
    CHECK_EQ_INT(qt_open(who, &later, &b), MV_OK);
    uint32_t moved = 0, total = 0;
    int more_a = 1, more_b = 1;
    for (int i = 0; i < 40 && (more_a || more_b); i++) {
        CHECK_EQ_INT(mv_queue_drain(i % 2 == 0 ? a : b, 7, &moved, i % 2 == 0 ? &more_a : &more_b),
                     MV_OK);
        total += moved;
    }
    CHECK_EQ_INT(total, 60);
    int got[64];
    size_t n = qt_inbox_markers(a, "two", got, 64);
    CHECK_EQ_INT(n, 60);
    int seen[60] = {0}, once = 1;
    for (size_t i = 0; i < n; i++) {
        if (got[i] < 0 || got[i] >= 60 || seen[got[i]]++) {
            once = 0;
        }
    }
    CHECK(once);
    mv_store_close(&a);
    mv_store_close(&b);
    CHECK_EQ_INT(qt_count(who, &o), 0);
}

/* Processes at once: CHURN_SEALERS deliver sealed while CHURN_OPENERS open the store (each
 * open drains) and close it again, CHURN_ROUNDS times each: no call fails (an open waits for
 * another's lock: tests/test_open_busy.c) and every delivery is in INBOX exactly once. */
#define CHURN_SEALERS 3
#define CHURN_OPENERS 3
#define CHURN_ROUNDS  30
static void test_sealers_and_openers_at_once(void)
{
    struct mv_store_options o = qt_options("root_churn");
    const char *who = "churn@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    pid_t kids[CHURN_SEALERS + CHURN_OPENERS];
    for (int k = 0; k < CHURN_SEALERS + CHURN_OPENERS; k++) {
        kids[k] = fork();
        if (kids[k] != 0) {
            continue;
        }
        for (int i = 0; i < CHURN_ROUNDS; i++) {
            mv_store *s = NULL;
            int rc = k < CHURN_SEALERS ? qt_deliver(who, &o, "churn", k * CHURN_ROUNDS + i)
                                       : qt_open(who, &o, &s);
            mv_store_close(&s);
            if (rc != MV_OK) {
                _exit(1);
            }
        }
        _exit(0);
    }
    int failed = 0;
    for (int k = 0; k < CHURN_SEALERS + CHURN_OPENERS; k++) {
        int status = 0;
        waitpid(kids[k], &status, 0);
        failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK_EQ_INT(failed, 0);
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK); /* drains what is left */
    enum { ALL = CHURN_SEALERS * CHURN_ROUNDS };
    int got[ALL + 8], seen[ALL] = {0}, once = 1;
    size_t n = qt_inbox_markers(s, "churn", got, ALL + 8);
    mv_store_close(&s);
    CHECK_EQ_INT(n, ALL);
    for (size_t i = 0; i < n; i++) {
        if (got[i] < 0 || got[i] >= ALL || seen[got[i]]++) {
            once = 0;
        }
    }
    CHECK(once);
    CHECK_EQ_INT(qt_count(who, &o), 0);
}

/* A message the store refuses (a limit) in the middle of a batch: set aside in rejected/,
 * the batch's other deliveries stored once each (the append refuses before it writes). */
static void test_refused_inside_batch(void)
{
    struct mv_store_options o = qt_options("root_refused");
    const char *who = "refused@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    for (int i = 0; i < 11; i++) {
        if (i != 5) {
            CHECK_EQ_INT(qt_deliver(who, &o, "batch", i), MV_OK);
            continue;
        }
        char msg[2048], err[256] = "";
        size_t len = 0;
        for (int h = 0; h < 30; h++) {
            len += (size_t)snprintf(msg + len, sizeof msg - len, "X-Field-%d: value\r\n", h);
        }
        len += (size_t)snprintf(msg + len, sizeof msg - len,
                                "Subject: MARKER-batch-0005\r\n\r\nx\r\n");
        CHECK_EQ_INT(mv_deliver_sealed(who, msg, len, &o, err, sizeof err), MV_OK);
    }
    struct mv_store_options strict = o;
    strict.limits.header_count_max = 20;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &strict, &s), MV_OK);
    CHECK(strstr(mv_store_errmsg(s), "rejected") != NULL);
    int got[16];
    size_t n = qt_inbox_markers(s, "batch", got, 16);
    CHECK_EQ_INT(n, 10);
    int in_order = 1;
    for (size_t i = 0; i < n; i++) {
        in_order &= got[i] == (int)(i < 5 ? i : i + 1);
    }
    CHECK(in_order);
    mv_store_close(&s);
    char rejected[1100];
    snprintf(rejected, sizeof rejected, "%s/example.org/refused.queue/rejected", o.root);
    CHECK_EQ_INT(qt_files(rejected), 1);
    CHECK_EQ_INT(qt_count(who, &o), 0);
}

/* Writes a file with a queue entry's name (stamp, 32 hex digits from n) holding garbage. */
static void qt_garbage_entry(const char *queue_dir, unsigned long long stamp, int n)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%020llu-%032x.sealed", queue_dir, stamp, (unsigned)n);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f != NULL) {
        for (int i = 0; i < 200; i++) {
            fputc((int)(qt_next() & 0xff), f);
        }
        fclose(f);
    }
}

#define STUCK_FILES 20 /* more than a step takes */
#define STUCK_STEP  8

/* Files the drain takes but cannot remove (garbage that cannot go to rejected/, because a
 * plain file holds that name) must not make a stepped drain take them again forever: the
 * drain ends (more 0) within a few steps, after delivering the real deliveries queued after
 * them, once each and in order. (Before: each step listed the queue again and took the same
 * STUCK_STEP files, more stayed 1, and the worker drained forever.) */
static void test_stuck_files_end_the_drain(void)
{
    struct mv_store_options o = qt_options("root_stuck");
    const char *who = "stuck@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    CHECK_EQ_INT(qt_deliver(who, &o, "stuck", 0), MV_OK); /* makes the queue directory */
    char queue[1100], rejected[1200];
    snprintf(queue, sizeof queue, "%s/example.org/stuck.queue", o.root);
    for (int i = 0; i < STUCK_FILES; i++) { /* stamped long ago: they sort first */
        qt_garbage_entry(queue, 1000u + (unsigned long long)i, i);
    }
    for (int i = 1; i < 4; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "stuck", i), MV_OK);
    }
    snprintf(rejected, sizeof rejected, "%s/rejected", queue);
    FILE *f = fopen(rejected, "w"); /* rejected/ cannot be made: the garbage stays */
    CHECK(f != NULL);
    if (f != NULL) {
        fclose(f);
    }
    struct mv_store_options later = o;
    later.flags |= MV_STORE_DRAIN_LATER;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &later, &s), MV_OK);
    uint32_t moved = 0, total = 0;
    int more = 1, steps = 0;
    while (more && steps < 50) {
        CHECK_EQ_INT(mv_queue_drain(s, STUCK_STEP, &moved, &more), MV_OK);
        total += moved;
        steps++;
    }
    CHECK_EQ_INT(more, 0);
    CHECK(steps <= 2 * (STUCK_FILES + 4 + STUCK_STEP - 1) / STUCK_STEP + 1);
    CHECK_EQ_INT(total, 4);
    CHECK(strstr(mv_store_errmsg(s), "left in") != NULL); /* the last step names them */
    int got[8];
    size_t n = qt_inbox_markers(s, "stuck", got, 8);
    CHECK_EQ_INT(n, 4);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(got[i], (int)i);
    }
    /* the same with time- and yield-bounded steps */
    for (int i = 4; i < 6; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "stuck", i), MV_OK);
    }
    struct mv_drain_bounds b = {.time_ms = 60000};
    more = 1;
    steps = 0;
    total = 0;
    while (more && steps < 50) {
        CHECK_EQ_INT(mv_queue_drain_step(s, &b, &moved, &more), MV_OK);
        total += moved;
        steps++;
    }
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(total, 2);
    CHECK_EQ_INT(steps, 2); /* the one that stored returns, the next settles (SETTLE LATER) */
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), STUCK_FILES);
}

static int qt_always(void *arg)
{
    (*(int *)arg)++;
    return 1;
}

/* mv_queue_drain_step: a yield that always says stop still takes one file per step (it is
 * asked before every file after the first); steps keep their place in the queue, take new
 * arrivals after the older files, and leave meta clean; unbounded or NULL bounds are EINVAL. */
static void test_drain_step_bounds(void)
{
    struct mv_store_options o = qt_options("root_bounds");
    const char *who = "bounds@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "bounds", i), MV_OK);
    }
    struct mv_store_options later = o;
    later.flags |= MV_STORE_DRAIN_LATER;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &later, &s), MV_OK);
    int asked = 0;
    struct mv_drain_bounds b = {.yield_fn = qt_always, .yield_arg = &asked};
    uint32_t moved = 0, total = 0;
    int more = 1, steps = 0;
    while (more && steps < 20) {
        CHECK_EQ_INT(mv_queue_drain_step(s, &b, &moved, &more), MV_OK);
        CHECK(moved <= 1);
        total += moved;
        steps++;
        if (steps == 2) {
            CHECK_EQ_INT(qt_deliver(who, &o, "bounds", 5), MV_OK);
        }
    }
    CHECK_EQ_INT(total, 6);
    CHECK(asked >= 4); /* not by a step that ends a round: it returns when it has committed */
    int got[8];
    size_t n = qt_inbox_markers(s, "bounds", got, 8);
    CHECK_EQ_INT(n, 6);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(got[i], (int)i);
    }
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM meta WHERE key LIKE 'deliver%'"), 0);
    struct mv_drain_bounds none = {0};
    CHECK_EQ_INT(mv_queue_drain_step(s, &none, &moved, &more), MV_EINVAL);
    CHECK_EQ_INT(mv_queue_drain_step(s, NULL, &moved, &more), MV_EINVAL);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 0);
}

/* ---- the read-ahead (store_queue_ahead.h) ----------------------------------------------- */

/* What the store's read-ahead holds, polled until want() says so or 60 s have passed (its
 * thread works on its own: the test waits for it, never for a time). 1 if want() came true. */
static int qt_ahead_wait(mv_store *s,
                         int (*want)(const struct store_queue_ahead_stats *),
                         struct store_queue_ahead_stats *st)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        store_queue_ahead_stats_of(s, st);
        if (want(st)) {
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 60) {
            return 0;
        }
        usleep(1000);
    }
}

static int qt_ahead_all_prepared(const struct store_queue_ahead_stats *st)
{
    return st->items > 0 && st->prepared == st->items;
}

static int qt_ahead_bytes_full(const struct store_queue_ahead_stats *st)
{
    return st->bytes >= STORE_QUEUE_AHEAD_BYTES;
}

/* Drains in steps of step_max until the drain ends, checking after each step that the
 * read-ahead kept its bounds (items, and bytes: under STORE_QUEUE_AHEAD_BYTES when it
 * started one more, so at most one message over for each of its thread and the drain's) and that it
 * (its thread, or the drain's while it waited: HELPING) prepared everything stored so far. *total:
 * the deliveries moved. */
static void
qt_drain_checked(mv_store *s, uint32_t step_max, size_t message_max, uint32_t *total_out)
{
    uint32_t total = 0, moved = 0;
    *total_out = 0;
    int more = 1, steps = 0;
    while (more && steps < 1000) {
        CHECK_EQ_INT(mv_queue_drain(s, step_max, &moved, &more), MV_OK);
        total += moved;
        steps++;
        struct store_queue_ahead_stats st;
        store_queue_ahead_stats_of(s, &st);
        if (more) {
            CHECK(st.items <= STORE_QUEUE_AHEAD_ITEMS);
            CHECK(st.items_peak <= STORE_QUEUE_AHEAD_ITEMS);
            CHECK(st.bytes_peak < STORE_QUEUE_AHEAD_BYTES + 2 * message_max);
            CHECK(st.prepared_total >= total);
        } else {
            CHECK_EQ_INT(st.items_peak, 0); /* the drain is over: the read-ahead stopped */
        }
    }
    *total_out = total;
}

#define AHEAD_SMALL 100

/* The read-ahead opens and parses the next STORE_QUEUE_AHEAD_ITEMS files on its own thread
 * while the drain's thread stores, goes on between steps, stops there, and the mail arrives
 * once each, in order. Fails on the old drain, which opened and parsed each file on the
 * drain's thread when it came to it. */
static void test_read_ahead_items_bound(void)
{
    struct mv_store_options o = qt_options("root_ahead");
    const char *who = "ahead@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    for (int i = 0; i < AHEAD_SMALL; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "ahead", i), MV_OK);
    }
    struct mv_store_options later = o;
    later.flags |= MV_STORE_DRAIN_LATER;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &later, &s), MV_OK);
    struct store_queue_ahead_stats st;
    store_queue_ahead_stats_of(s, &st);
    CHECK_EQ_INT(st.items_peak, 0); /* nothing read before the first step */
    uint32_t moved = 0;
    int more = 0;
    CHECK_EQ_INT(mv_queue_drain(s, 1, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 1);
    CHECK_EQ_INT(more, 1);
    /* between steps the thread prepares what the step handed it, and no more */
    CHECK(qt_ahead_wait(s, qt_ahead_all_prepared, &st));
    CHECK_EQ_INT(st.items, STORE_QUEUE_AHEAD_ITEMS);
    CHECK_EQ_INT(st.prepared, STORE_QUEUE_AHEAD_ITEMS);
    CHECK_EQ_INT(st.items_peak, STORE_QUEUE_AHEAD_ITEMS);
    CHECK_EQ_INT(st.prepared_total, STORE_QUEUE_AHEAD_ITEMS + 1);
    CHECK_EQ_INT(qt_count(who, &o), AHEAD_SMALL - 1); /* read, not taken out of the queue */
    uint32_t total = 0;
    qt_drain_checked(s, 7, 512, &total);
    CHECK_EQ_INT(total, AHEAD_SMALL - 1);
    int got[AHEAD_SMALL + 8];
    size_t n = qt_inbox_markers(s, "ahead", got, sizeof got / sizeof got[0]);
    CHECK_EQ_INT(n, AHEAD_SMALL);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(got[i], (int)i);
    }
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM meta WHERE key LIKE 'deliver%'"), 0);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 0);
}

#define AHEAD_LARGE      40
#define AHEAD_LARGE_SIZE (600u << 10)

/* Seals count text messages of ~AHEAD_LARGE_SIZE bytes each (subjects from tag) into who's
 * queue, then opens the store without draining into *out (NULL on a failure): the caller
 * drains and looks. */
static void qt_deliver_large(
    const char *who, const struct mv_store_options *o, const char *tag, int count, mv_store **out)
{
    *out = NULL;
    char *msg = malloc(AHEAD_LARGE_SIZE + 1024);
    CHECK(msg != NULL);
    for (int i = 0; i < count; i++) {
        size_t len = qt_message(msg, 1024, tag, i);
        while (len + 80 < AHEAD_LARGE_SIZE) {
            len +=
                (size_t)snprintf(msg + len, 80, "line %06zu of a long %s, fox %d\r\n", len, tag, i);
        }
        char err[256] = "";
        CHECK_EQ_INT(mv_deliver_sealed(who, msg, len, o, err, sizeof err), MV_OK);
    }
    free(msg);
    struct mv_store_options later = *o;
    later.flags |= MV_STORE_DRAIN_LATER;
    CHECK_EQ_INT(qt_open(who, &later, out), MV_OK);
}

/* Large deliveries: the read-ahead stops at STORE_QUEUE_AHEAD_BYTES of opened mail, well
 * before STORE_QUEUE_AHEAD_ITEMS files; closing the store in the middle of a drain stops it
 * (the rest waits in the queue for the next open). */
static void test_read_ahead_bytes_bound(void)
{
    struct mv_store_options o = qt_options("root_ahead_big");
    const char *who = "big@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    mv_store *s = NULL;
    qt_deliver_large(who, &o, "big", AHEAD_LARGE, &s);
    CHECK(s != NULL);
    uint32_t moved = 0;
    int more = 0;
    CHECK_EQ_INT(mv_queue_drain(s, 1, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 1);
    struct store_queue_ahead_stats st;
    CHECK(qt_ahead_wait(s, qt_ahead_bytes_full, &st));
    CHECK(st.prepared < STORE_QUEUE_AHEAD_ITEMS);
    CHECK(st.prepared <= STORE_QUEUE_AHEAD_BYTES / (AHEAD_LARGE_SIZE - 1024) + 2);
    CHECK(st.bytes_peak < STORE_QUEUE_AHEAD_BYTES + 2 * AHEAD_LARGE_SIZE);
    CHECK_EQ_INT(mv_queue_drain(s, 5, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 5);
    mv_store_close(&s); /* mid-drain: the read-ahead's thread is stopped, its mail let go */
    CHECK_EQ_INT(qt_count(who, &o), AHEAD_LARGE - 6);
    struct mv_store_options later = o;
    later.flags |= MV_STORE_DRAIN_LATER;
    CHECK_EQ_INT(qt_open(who, &later, &s), MV_OK);
    uint32_t total = 0;
    qt_drain_checked(s, 4, AHEAD_LARGE_SIZE, &total);
    CHECK_EQ_INT(total, AHEAD_LARGE - 6);
    int got[AHEAD_LARGE + 8];
    size_t n = qt_inbox_markers(s, "big", got, sizeof got / sizeof got[0]);
    CHECK_EQ_INT(n, AHEAD_LARGE);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(got[i], (int)i);
    }
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 0);
}

#define AHEAD_TEXTS 16

static struct store_queue_ahead_stats qt_texts_first; /* at the first delivery's store */
static int qt_texts_calls, qt_texts_full;

/* store_queue_take_hook_fn: before the first store, waits (polled) until the read-ahead
 * stopped at its bound (the drain's thread waits here, so nothing is taken meanwhile). */
static void qt_texts_hook(mv_store *s)
{
    if (qt_texts_calls++ == 0) {
        qt_texts_full = qt_ahead_wait(s, qt_ahead_bytes_full, &qt_texts_first);
    }
}

/* The bound counts the parse's texts too (defects 2): a whole drain (an open's: not stepped,
 * so the read-ahead's parse keeps each message's text, here ~580 KB beside its 600 KB) of
 * large text messages holds 4 MiB and one delivery with its text per preparer at most (the
 * read-ahead's thread, and the drain's while it waits: HELPING). Looked at from the drain's
 * thread before its first store, when the read-ahead has stopped at the bound: the old bound
 * counted the message alone and held 7 (~8 MB) where 5 fit (7 > 5 below). */
static void test_read_ahead_bytes_bound_texts(void)
{
    struct mv_store_options o = qt_options("root_ahead_texts");
    const char *who = "texts@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    mv_store *s = NULL;
    qt_deliver_large(who, &o, "texts", AHEAD_TEXTS, &s);
    CHECK(s != NULL);
    uint32_t moved = 0;
    int more = 1;
    qt_texts_calls = 0;
    store_queue_take_hook_set(qt_texts_hook);
    int rc = mv_queue_drain(s, 0, &moved, &more); /* whole: the texts parsed */
    store_queue_take_hook_set(NULL);
    CHECK_EQ_INT(rc, MV_OK);
    CHECK_EQ_INT(moved, AHEAD_TEXTS);
    CHECK_EQ_INT(qt_texts_calls, AHEAD_TEXTS);
    CHECK(qt_texts_full);
    size_t held =
        (size_t)2 * (AHEAD_LARGE_SIZE - (64u << 10)); /* at least, each: message and text */
    CHECK(qt_texts_first.prepared <= STORE_QUEUE_AHEAD_BYTES / held + 2);
    CHECK(qt_texts_first.bytes_peak <
          STORE_QUEUE_AHEAD_BYTES + 2 * (2 * AHEAD_LARGE_SIZE + (64u << 10)));
    int got[AHEAD_TEXTS + 8];
    CHECK_EQ_INT(qt_inbox_markers(s, "texts", got, sizeof got / sizeof got[0]), AHEAD_TEXTS);
    mv_store_close(&s);
}

/* A damaged file in the middle of a stepped drain (a bit flipped: the sealed box does not
 * open) is set aside in rejected/ with a note, kept byte for byte; the files read ahead
 * around it are stored once each, in order. */
static void test_read_ahead_damaged_file(void)
{
    struct mv_store_options o = qt_options("root_ahead_bad");
    const char *who = "bad@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    for (int i = 0; i < 30; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "bad", i), MV_OK);
    }
    char queue[1024], victim[1400], kept[1500];
    snprintf(queue, sizeof queue, "%s/example.org/bad.queue", o.root);
    struct dirent **names = NULL;
    int count = scandir(queue, &names, NULL, alphasort);
    CHECK(count >= 30);
    int nth = 0;
    victim[0] = '\0';
    for (int i = 0; i < count; i++) {
        if (names[i]->d_name[0] != '.' && nth++ == 9) { /* the tenth delivery */
            snprintf(victim, sizeof victim, "%s/%s", queue, names[i]->d_name);
            snprintf(kept, sizeof kept, "%s/rejected/%s", queue, names[i]->d_name);
        }
        free(names[i]);
    }
    free(names);
    CHECK(victim[0] != '\0');
    CHECK(tu_flip_bit(victim, 200, 5) == 0);
    size_t damaged_len = 0;
    uint8_t *damaged = tu_read_file(victim, &damaged_len);
    CHECK(damaged != NULL);

    struct mv_store_options later = o;
    later.flags |= MV_STORE_DRAIN_LATER;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &later, &s), MV_OK);
    uint32_t total = 0, moved = 0;
    int more = 1, steps = 0, noted = 0;
    while (more && steps < 100) {
        CHECK_EQ_INT(mv_queue_drain(s, 4, &moved, &more), MV_OK);
        noted |= strstr(mv_store_errmsg(s), "rejected") != NULL;
        total += moved;
        steps++;
    }
    CHECK_EQ_INT(total, 29);
    CHECK(noted);
    int got[40];
    size_t n = qt_inbox_markers(s, "bad", got, sizeof got / sizeof got[0]);
    CHECK_EQ_INT(n, 29);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(got[i], (int)i + (i >= 9));
    }
    mv_store_close(&s);
    CHECK_EQ_INT(qt_count(who, &o), 0);
    CHECK(!tu_file_exists(victim));
    size_t kept_len = 0;
    uint8_t *kept_data = tu_read_file(kept, &kept_len);
    CHECK(kept_data != NULL && kept_len == damaged_len &&
          memcmp(kept_data, damaged, damaged_len) == 0);
    free(kept_data);
    free(damaged);
}

/* mv_queue_count and mv_queue_usage count the same entries: regular files with a delivery's
 * name; a symbolic link with such a name (the drain never follows one) is neither. */
static void test_count_and_usage_agree(void)
{
    struct mv_store_options o = qt_options("root_agree");
    const char *who = "agree@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    CHECK_EQ_INT(qt_deliver(who, &o, "agree", 0), MV_OK);
    CHECK_EQ_INT(qt_deliver(who, &o, "agree", 1), MV_OK);
    char queue[1100], link_path[1200], target[1200];
    snprintf(queue, sizeof queue, "%s/example.org/agree.queue", o.root);
    snprintf(target, sizeof target, "%s/example.org/agree.pub", o.root);
    snprintf(link_path, sizeof link_path, "%s/%020llu-%032x.sealed", queue, 5ull, 7u);
    CHECK_EQ_INT(symlink(target, link_path), 0);
    uint64_t bytes = 0, messages = 0;
    CHECK_EQ_INT(mv_queue_usage(who, &o, 0, &bytes, &messages), MV_OK);
    CHECK_EQ_INT(messages, 2);
    CHECK_EQ_INT(qt_count(who, &o), 2);
    struct mv_store_file file;
    CHECK_EQ_INT(mv_store_file_inspect(who, &o, &file), MV_OK);
    CHECK_EQ_INT(file.pending, 2);
    /* the existence check LMTP makes per recipient, without counting the queue */
    CHECK_EQ_INT(mv_store_exists(who, &o), MV_OK);
    CHECK_EQ_INT(mv_store_exists("nobody@example.org", &o), MV_ENOTFOUND);
    CHECK_EQ_INT(mv_store_exists("../x@example.org", &o), MV_EINVAL);
}

/* Number of queue files (deliveries' names) in dir; -1 if it does not exist. */
static int qt_sealed_files(const char *dir)
{
    return qt_files_named(dir, ".sealed");
}

/* A stepped drain takes each committed delivery's file out of the queue with a rename into
 * done/ (an unlink waits for the disk on a discard-mounted file system, and held up the step
 * and every command behind it); mv_queue_tidy() unlinks them afterwards, in bounded calls,
 * and never while the drain is under way. An open's whole drain tidies before it returns,
 * and an open finds what a stopped server left in done/. */
static void test_drain_leaves_unlinks_to_tidy(void)
{
    struct mv_store_options o = qt_options("root_tidy");
    const char *who = "tidy@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "tidy", i), MV_OK);
    }
    char queue[1024], done[1100];
    snprintf(queue, sizeof queue, "%s/example.org/tidy.queue", o.root);
    snprintf(done, sizeof done, "%s/done", queue);
    struct mv_store_options later = o;
    later.flags |= MV_STORE_DRAIN_LATER;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &later, &s), MV_OK);
    uint32_t moved = 0;
    int more = 0, tidy_more = 1;
    CHECK_EQ_INT(mv_queue_drain(s, 4, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 4);
    CHECK_EQ_INT(more, 1);
    CHECK_EQ_INT(qt_sealed_files(queue), 2);
    CHECK_EQ_INT(qt_sealed_files(done), 4);               /* renamed, not unlinked */
    CHECK_EQ_INT(mv_queue_tidy(s, 0, &tidy_more), MV_OK); /* the drain is under way */
    CHECK_EQ_INT(tidy_more, 0);
    CHECK_EQ_INT(qt_sealed_files(done), 4);
    CHECK_EQ_INT(mv_queue_drain(s, 4, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 2);
    CHECK_EQ_INT(more, 0);
    CHECK_EQ_INT(qt_count(who, &o), 0);
    CHECK_EQ_INT(qt_sealed_files(done), 6);
    CHECK_EQ_INT(mv_queue_tidy(s, 4, &tidy_more), MV_OK);
    CHECK_EQ_INT(tidy_more, 1);
    CHECK_EQ_INT(qt_sealed_files(done), 2);
    CHECK_EQ_INT(mv_queue_tidy(s, 4, &tidy_more), MV_OK);
    CHECK_EQ_INT(tidy_more, 0);
    CHECK_EQ_INT(qt_sealed_files(done), -1);              /* empty: removed */
    CHECK_EQ_INT(mv_queue_tidy(s, 4, &tidy_more), MV_OK); /* nothing to do */
    CHECK_EQ_INT(tidy_more, 0);
    int got[16];
    CHECK_EQ_INT(qt_inbox_markers(s, "tidy", got, 16), 6);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM meta WHERE key LIKE 'deliver%'"), 0);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM changes"), 0); /* no 'append' rows */

    /* A server stopped before its tidy: the next open (a whole drain) removes the files. */
    for (int i = 6; i < 9; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "tidy", i), MV_OK);
    }
    CHECK_EQ_INT(mv_queue_drain(s, 2, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 2);
    mv_store_close(&s);
    CHECK_EQ_INT(qt_sealed_files(done), 2);
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    CHECK_EQ_INT(qt_sealed_files(done), -1);
    CHECK_EQ_INT(qt_sealed_files(queue), 0);
    CHECK_EQ_INT(qt_inbox_markers(s, "tidy", got, 16), 9); /* the open took the last one */
    mv_store_close(&s);
    CHECK_EQ_INT(mv_queue_tidy(NULL, 0, NULL), MV_EINVAL);
}

/* Bounded tidy calls share one pass of done/: each goes on where the last one stopped (read
 * from its start every call, a done/ grown large cost the calls a quadratic time). A pass
 * during which a drain moved files in ends asking for more, and the next call's new pass
 * takes those; a call for all (max 0) finishes in one call whatever pass was open. */
static void test_tidy_goes_on_where_it_stopped(void)
{
    struct mv_store_options o = qt_options("root_tidy_pass");
    const char *who = "pass@example.org";
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    for (int i = 0; i < 20; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "pass", i), MV_OK);
    }
    char done[1100];
    snprintf(done, sizeof done, "%s/example.org/pass.queue/done", o.root);
    struct mv_store_options later = o;
    later.flags |= MV_STORE_DRAIN_LATER;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &later, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    uint32_t moved = 0;
    int more = 0, tidy_more = 0, calls = 0;
    CHECK_EQ_INT(mv_queue_drain(s, 20, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 20);
    CHECK_EQ_INT(qt_sealed_files(done), 20);
    unsigned opens = s->queue_tidy_opens;
    do {
        CHECK_EQ_INT(mv_queue_tidy(s, 3, &tidy_more), MV_OK);
    } while (tidy_more && ++calls < 100);
    CHECK_EQ_INT(calls, 6); /* 7 calls: 6 of 3 files, the last of 2 and the end */
    CHECK_EQ_INT(qt_sealed_files(done), -1);
    CHECK_EQ_INT((int)(s->queue_tidy_opens - opens), 1); /* one pass for all of them */

    /* files moved in while a pass is open: that pass ends asking for more, a new one takes
     * them, whether or not the first one met them */
    for (int i = 20; i < 30; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "pass", i), MV_OK);
    }
    CHECK_EQ_INT(mv_queue_drain(s, 10, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 10);
    opens = s->queue_tidy_opens;
    CHECK_EQ_INT(mv_queue_tidy(s, 3, &tidy_more), MV_OK);
    CHECK_EQ_INT(tidy_more, 1);
    CHECK_EQ_INT(qt_sealed_files(done), 7);
    for (int i = 30; i < 34; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "pass", i), MV_OK);
    }
    CHECK_EQ_INT(mv_queue_drain(s, 10, &moved, &more), MV_OK);
    CHECK_EQ_INT(moved, 4);
    CHECK_EQ_INT(qt_sealed_files(done), 11);
    calls = 0;
    do {
        CHECK_EQ_INT(mv_queue_tidy(s, 3, &tidy_more), MV_OK);
    } while (tidy_more && ++calls < 100);
    CHECK(calls < 100);
    CHECK_EQ_INT(qt_sealed_files(done), -1);
    CHECK_EQ_INT((int)(s->queue_tidy_opens - opens), 2);

    /* all at once (max 0) with a pass open from before the latest moves: one call */
    for (int i = 34; i < 37; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "pass", i), MV_OK);
    }
    CHECK_EQ_INT(mv_queue_drain(s, 10, &moved, &more), MV_OK);
    CHECK_EQ_INT(mv_queue_tidy(s, 1, &tidy_more), MV_OK);
    CHECK_EQ_INT(tidy_more, 1);
    for (int i = 37; i < 40; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "pass", i), MV_OK);
    }
    CHECK_EQ_INT(mv_queue_drain(s, 10, &moved, &more), MV_OK);
    CHECK_EQ_INT(qt_sealed_files(done), 5);
    CHECK_EQ_INT(mv_queue_tidy(s, 0, &tidy_more), MV_OK);
    CHECK_EQ_INT(tidy_more, 0);
    CHECK_EQ_INT(qt_sealed_files(done), -1);
    int got[48];
    CHECK_EQ_INT(qt_inbox_markers(s, "pass", got, 48), 40);
    mv_store_close(&s); /* with no pass open, and below with one */

    for (int i = 40; i < 44; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "pass", i), MV_OK);
    }
    CHECK_EQ_INT(qt_open(who, &later, &s), MV_OK);
    CHECK_EQ_INT(mv_queue_drain(s, 10, &moved, &more), MV_OK);
    CHECK_EQ_INT(mv_queue_tidy(s, 1, &tidy_more), MV_OK);
    CHECK(s->queue_tidy_dir != NULL);
    mv_store_close(&s); /* closes the pass's directory (ASan's leak check) */
    CHECK_EQ_INT(qt_sealed_files(done), 3);
}

/* ---- two phases: the full-text backlog ---------------------------------------------- */

#define BACKLOG_MAIL 24

/* The full-text searches of the backlog test, each a different path: words (TEXT), a body
 * string, a single trigram (exact by MATCH alone for indexed rows), strings under three
 * characters (LIKE), one message, nothing. */
enum { QT_SEARCHES = 9 };
static void qt_searches(mv_store *s, int out[QT_SEARCHES])
{
    struct mv_search_query q[QT_SEARCHES];
    for (int i = 0; i < QT_SEARCHES; i++) {
        q[i] = (struct mv_search_query)MV_SEARCH_QUERY_INIT;
    }
    q[0].text = "MARKER-blog";
    q[1].body_contains = "quick brown";
    q[2].text_contains = "fox";
    q[3].text_contains = "zqx"; /* one trigram no message holds */
    q[4].body_contains = "ox";
    q[5].text_contains = "qj";
    q[6].body_contains = "MARKER-blog-0007";
    q[7].text = "sender5@example.net secret";
    q[8].body_contains = "sender5@example"; /* only in a header */
    for (int i = 0; i < QT_SEARCHES; i++) {
        out[i] = tu_search_count(s, &q[i]);
    }
}

static const int qt_search_expect[QT_SEARCHES] = {
    BACKLOG_MAIL, BACKLOG_MAIL, BACKLOG_MAIL, 0, BACKLOG_MAIL, 0, 1, 1, 0};

static int qt_searches_right(mv_store *s, int less)
{
    int got[QT_SEARCHES], ok = 1;
    qt_searches(s, got);
    for (int i = 0; i < QT_SEARCHES; i++) {
        int want = qt_search_expect[i] == BACKLOG_MAIL ? BACKLOG_MAIL - less : qt_search_expect[i];
        if (got[i] != want) {
            fprintf(stderr, "  search %d: %d results, expected %d\n", i, got[i], want);
            ok = 0;
        }
    }
    return ok;
}

/* Delivers BACKLOG_MAIL sealed messages to who and drains them in steps: they are in INBOX
 * and in the backlog, without full-text rows. */
static void qt_backlog_store(const char *root, const char *who, mv_store **out)
{
    *out = NULL;
    struct mv_store_options o = qt_options(root);
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    for (int i = 0; i < BACKLOG_MAIL; i++) {
        CHECK_EQ_INT(qt_deliver(who, &o, "blog", i), MV_OK);
    }
    o.flags |= MV_STORE_DRAIN_LATER;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    long long fts_before = tu_int(mv_store_db(s), "SELECT count(*) FROM fts");
    uint32_t moved = 0, total = 0;
    int more = 1;
    for (int steps = 0; more && steps < 100; steps++) {
        struct mv_drain_bounds b = {.max = 7};
        CHECK_EQ_INT(mv_queue_drain_step(s, &b, &moved, &more), MV_OK);
        total += moved;
    }
    CHECK_EQ_INT(total, BACKLOG_MAIL);
    CHECK_EQ_INT(tu_fts_backlog(s), BACKLOG_MAIL);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM fts"), fts_before);
    *out = s;
}

static void test_drain_leaves_index_to_backlog(void)
{
    const char *who = "backlog@example.org";
    mv_store *s = NULL;
    qt_backlog_store("root_backlog", who, &s);
    if (s == NULL) {
        return;
    }
    long long fts_before = tu_int(mv_store_db(s), "SELECT count(*) FROM fts");
    CHECK(qt_searches_right(s, 0)); /* the backlog's bodies read */
    CHECK(tu_check_clean(s));       /* rows missing for the backlog's bodies only */

    struct mv_store_options ro = qt_options("root_backlog");
    ro.flags |= MV_STORE_READONLY | MV_STORE_DRAIN_LATER;
    mv_store *r = NULL;
    CHECK_EQ_INT(qt_open(who, &ro, &r), MV_OK);
    CHECK(qt_searches_right(r, 0)); /* a read-only handle reads them too */
    CHECK_EQ_INT(mv_store_index_backlog(r, 0, NULL), MV_EINVAL);

    uint64_t left = 99;
    CHECK_EQ_INT(mv_store_index_backlog(s, 5, &left), MV_OK);
    CHECK_EQ_INT(left, BACKLOG_MAIL - 5);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM fts"), fts_before + 5);
    CHECK(qt_searches_right(s, 0)); /* half indexed, half read */
    CHECK(qt_searches_right(r, 0));
    CHECK(tu_check_clean(s));
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM fts"), fts_before + BACKLOG_MAIL);
    CHECK(qt_searches_right(s, 0)); /* the same answers from the index alone */
    CHECK(qt_searches_right(r, 0));
    CHECK(tu_check_clean(s));
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK); /* nothing left: a no-op */
    CHECK_EQ_INT(left, 0);
    mv_store_close(&r);
    mv_store_close(&s);
    CHECK_EQ_INT(mv_store_index_backlog(NULL, 0, NULL), MV_EINVAL);
}

/* A backlog body expunged and purged before its row is built: the catch-up only drops its
 * backlog row, and the searches no longer find it. */
static void test_backlog_body_purged(void)
{
    mv_store *s = NULL;
    qt_backlog_store("root_backlog_purge", "purged@example.org", &s);
    if (s == NULL) {
        return;
    }
    uint32_t n = 0;
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "1:2", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &n), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(mv_store_purge(s, 0, NULL), MV_OK);
    CHECK_EQ_INT(tu_fts_backlog(s), BACKLOG_MAIL);
    CHECK(tu_check_clean(s));
    CHECK(qt_searches_right(s, 2));
    uint64_t left = 99;
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    CHECK(qt_searches_right(s, 2));
    CHECK(tu_check_clean(s));
    mv_store_close(&s);
}

/* ---- a damaged body in the backlog: set aside, the rest indexed ----------------------- */

/* The stored bytes (bodies_data.data) of body id, malloc'd into *out; its length or -1. */
static long long qt_body_bytes(mv_store *s, long long id, unsigned char **out)
{
    *out = NULL;
    sqlite3_stmt *st = NULL;
    long long n = -1;
    if (sqlite3_prepare_v2(mv_store_db(s), "SELECT data FROM bodies_data WHERE id = ?", -1, &st,
                           NULL) != SQLITE_OK) {
        return -1;
    }
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW && (n = sqlite3_column_bytes(st, 0)) > 0 &&
        (*out = malloc((size_t)n)) != NULL) {
        memcpy(*out, sqlite3_column_blob(st, 0), (size_t)n);
    } else {
        n = -1;
    }
    sqlite3_finalize(st);
    return n;
}

static int qt_body_bytes_set(mv_store *s, long long id, const unsigned char *data, long long n)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(mv_store_db(s), "UPDATE bodies_data SET data = ? WHERE id = ?", -1, &st,
                           NULL) != SQLITE_OK) {
        return -1;
    }
    sqlite3_bind_blob(st, 1, data, (int)n, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, id);
    int ok = sqlite3_step(st) == SQLITE_DONE && sqlite3_changes(mv_store_db(s)) == 1;
    sqlite3_finalize(st);
    return ok ? 0 : -1;
}

struct qt_aside_problems {
    long long body;
    int aside; /* "body N was set aside ..." problems */
    int all;
};

static void qt_aside_problem(void *arg, const char *what, const char *detail)
{
    struct qt_aside_problems *p = arg;
    char want[64];
    snprintf(want, sizeof want, "body %lld was set aside", p->body);
    p->all++;
    p->aside += strcmp(what, "fts") == 0 && strstr(detail, want) != NULL;
}

/* One backlog body's bytes flipped by a bit: searches answer without it before the catch-up
 * reaches it; the catch-up sets it aside and indexes the rest (batches of 5: the old code
 * failed on it at every call, nothing behind it indexed); it is listed, the check names it,
 * its bytes are as they were; once they are restored, the repair indexes it. */
static void test_backlog_body_damaged(void)
{
    mv_store *s = NULL;
    qt_backlog_store("root_backlog_damaged", "damaged@example.org", &s);
    if (s == NULL) {
        return;
    }
    long long fts_before = tu_int(mv_store_db(s), "SELECT count(*) FROM fts");
    long long body = tu_int(mv_store_db(s), "SELECT body_id FROM messages WHERE uid = 3 AND "
                                            "mailbox_id = (SELECT id FROM mailboxes WHERE "
                                            "name = 'INBOX')");
    unsigned char *good = NULL, *bad = NULL;
    long long n = qt_body_bytes(s, body, &good);
    CHECK(n > 0);
    if (n <= 0) {
        mv_store_close(&s);
        return;
    }
    bad = malloc((size_t)n);
    memcpy(bad, good, (size_t)n);
    bad[n / 2] ^= 0x04;
    /* a flip inside the header unit also makes its copy in the bodies row (schema version 11)
     * differ from the skeleton: one more problem the check reports, and the repair leaves */
    char hs_sql[96];
    snprintf(hs_sql, sizeof hs_sql, "SELECT %lld < header_stored FROM bodies WHERE id = %lld",
             n / 2, body);
    int in_header = (int)tu_int(mv_store_db(s), hs_sql);
    CHECK_EQ_INT(qt_body_bytes_set(s, body, bad, n), 0);

    CHECK(qt_searches_right(s, 1)); /* before the catch-up: the damaged one matches nothing */
    uint64_t left = 99;
    CHECK_EQ_INT(mv_store_index_backlog(s, 5, &left), MV_OK);
    CHECK_EQ_INT(left, BACKLOG_MAIL - 5);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM fts"), fts_before + 4);
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM fts"), fts_before + BACKLOG_MAIL - 1);
    CHECK(qt_searches_right(s, 1));

    int64_t ids[4] = {0};
    uint32_t count = 99;
    CHECK_EQ_INT(mv_store_index_set_aside(s, 0, ids, 4, &count), MV_OK);
    CHECK_EQ_INT(count, 1);
    CHECK_EQ_INT(ids[0], body);
    CHECK_EQ_INT(mv_store_index_set_aside(s, body, ids, 4, &count), MV_OK);
    CHECK_EQ_INT(count, 0);
    CHECK_EQ_INT(mv_store_index_set_aside(s, 0, NULL, 4, &count), MV_EINVAL);

    unsigned char *now = NULL;
    CHECK_EQ_INT(qt_body_bytes(s, body, &now), n); /* not a byte changed */
    CHECK(now != NULL && memcmp(now, bad, (size_t)n) == 0);
    free(now);

    struct qt_aside_problems p = {body, 0, 0};
    struct mv_check_report r;
    CHECK_EQ_INT(mv_store_check(s, qt_aside_problem, &p, &r), MV_ECORRUPT);
    CHECK_EQ_INT(p.aside, 1);
    CHECK_EQ_INT(p.all, 2 + in_header); /* and its bytes, which do not match */

    /* a repair while its bytes are still damaged repairs the rest and leaves the body as it
     * is, still set aside (the old repair failed on its bytes and changed nothing: a damaged
     * body kept every other problem of the store unrepaired) */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE mailboxes SET uidnext = 1 WHERE name = 'INBOX'"),
                 0);
    struct mv_repair_report rep;
    CHECK_EQ_INT(mv_store_repair(s, &rep), MV_OK);
    CHECK_EQ_INT(rep.uidnext_fixed, 1);
    CHECK_EQ_INT(rep.bodies_unreadable, 1);
    CHECK_EQ_INT(rep.fts_rows_added, 0);
    CHECK_EQ_INT(mv_store_index_set_aside(s, 0, ids, 4, &count), MV_OK);
    CHECK_EQ_INT(count, 1);
    CHECK_EQ_INT(qt_body_bytes(s, body, &now), n); /* not a byte changed */
    CHECK(now != NULL && memcmp(now, bad, (size_t)n) == 0);
    free(now);
    p.aside = p.all = 0;
    CHECK_EQ_INT(mv_store_check(s, qt_aside_problem, &p, &r), MV_ECORRUPT);
    CHECK_EQ_INT(p.aside, 1);
    CHECK_EQ_INT(p.all, 2 + in_header); /* what it could not repair is still reported */

    /* the bytes restored (from a backup, say): the repair indexes it, no longer aside */
    CHECK_EQ_INT(qt_body_bytes_set(s, body, good, n), 0);
    CHECK_EQ_INT(mv_store_repair(s, &rep), MV_OK);
    CHECK_EQ_INT(rep.fts_rows_added, 1);
    CHECK_EQ_INT(mv_store_index_set_aside(s, 0, ids, 4, &count), MV_OK);
    CHECK_EQ_INT(count, 0);
    CHECK(qt_searches_right(s, 0));
    CHECK(tu_check_clean(s));
    free(good);
    free(bad);
    mv_store_close(&s);
}

/* A set-aside body expunged and purged: its set-aside key goes with it, in the purge's
 * transaction (as its full-text row does, so that no body id is reused while one exists).
 * The old purge left it: mailvaultd logged the gone body as set aside at every open, and a
 * new body given the same id (bodies.id is reused once the highest goes) was taken for set
 * aside: mv_store_check then named it with the old body's error instead of saying that it has
 * no full-text row. */
static void test_backlog_body_damaged_purged(void)
{
    mv_store *s = NULL;
    qt_backlog_store("root_backlog_aside_purge", "asidepurge@example.org", &s);
    if (s == NULL) {
        return;
    }
    long long body = tu_int(mv_store_db(s), "SELECT body_id FROM messages WHERE uid = 3 AND "
                                            "mailbox_id = (SELECT id FROM mailboxes WHERE "
                                            "name = 'INBOX')");
    unsigned char *bytes = NULL;
    long long n = qt_body_bytes(s, body, &bytes);
    CHECK(n > 0);
    if (n <= 0) {
        mv_store_close(&s);
        return;
    }
    bytes[n / 2] ^= 0x04;
    CHECK_EQ_INT(qt_body_bytes_set(s, body, bytes, n), 0);
    free(bytes);
    uint64_t left = 99;
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    int64_t ids[2] = {0};
    uint32_t count = 0;
    CHECK_EQ_INT(mv_store_index_set_aside(s, 0, ids, 2, &count), MV_OK);
    CHECK_EQ_INT(count, 1);

    uint32_t expunged = 0;
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", "3", MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, &expunged),
                 MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &expunged), MV_OK);
    CHECK_EQ_INT(expunged, 1);
    CHECK_EQ_INT(mv_store_purge(s, 0, NULL), MV_OK);
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM bodies WHERE id = %lld", body);
    CHECK_EQ_INT(tu_int(mv_store_db(s), sql), 0); /* purged */
    CHECK_EQ_INT(mv_store_index_set_aside(s, 0, ids, 2, &count), MV_OK);
    CHECK_EQ_INT(count, 0); /* the old purge: 1, a body that is gone */
    CHECK(tu_check_clean(s));
    mv_store_close(&s);
}

/* A long message of letters that do not compress much (xorshift, fixed seed): its body's
 * bytes fill overflow pages of their own. */
static char *qt_long_message(size_t *len)
{
    size_t size = 48 * 1024 + 512, n = 0;
    char *m = malloc(size);
    if (m == NULL) {
        return NULL;
    }
    n += (size_t)snprintf(m, size,
                          "From: long@example.net\r\nTo: someone@example.org\r\n"
                          "Subject: long one\r\nMessage-ID: <long@example.net>\r\n\r\n");
    uint32_t x = 0x9e3779b9u;
    while (n + 80 < size) {
        for (int i = 0; i < 76; i++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            m[n++] = (char)('a' + x % 26u);
        }
        m[n++] = '\r';
        m[n++] = '\n';
    }
    *len = n;
    return m;
}

static long long qt_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* A page of a backlog body that fails authentication (a bit flipped in the file): SQLite
 * ends the catch-up's transaction at the read error, so the catch-up sets the body aside in
 * a transaction of its own and builds the batch again without it. Searches answer before
 * and after; the pages the long body took are told by the file's growth across its drain
 * step (each step checkpointed), and the bit flipped in the middle one. */
static void test_backlog_body_damaged_page(void)
{
    const char *who = "page@example.org";
    struct mv_store_options o = qt_options("root_backlog_page");
    char db_path[1024];
    snprintf(db_path, sizeof db_path, "%s/example.org/page.db", o.root);
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    size_t len = 0;
    char *lng = qt_long_message(&len);
    char err[256] = "";
    CHECK(lng != NULL);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(i == 2 ? mv_deliver_sealed(who, lng, len, &o, err, sizeof err)
                            : qt_deliver(who, &o, "page", i),
                     MV_OK);
    }
    free(lng);
    o.flags |= MV_STORE_DRAIN_LATER;
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    long long before = 0, after = 0;
    for (int step = 0; step < 5; step++) {
        struct mv_drain_bounds b = {.max = 1};
        uint32_t moved = 0;
        int more = 0;
        CHECK_EQ_INT(mv_queue_drain_step(s, &b, &moved, &more), MV_OK);
        CHECK_EQ_INT(moved, 1);
        CHECK_EQ_INT(mv_store_checkpoint(s, NULL, NULL), MV_OK);
        if (step == 1) {
            before = qt_file_size(db_path);
        } else if (step == 2) {
            after = qt_file_size(db_path);
        }
    }
    CHECK_EQ_INT(tu_fts_backlog(s), 5);
    long long body = tu_int(mv_store_db(s), "SELECT body_id FROM messages WHERE uid = 3");
    mv_store_close(&s);
    long long pages = (after - before) / 4096;
    CHECK(pages >= 5); /* ~28 KiB of compressed letters */
    CHECK_EQ_INT(tu_flip_bit(db_path, before + pages / 2 * 4096 + 1000, 2), 0);

    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    q.body_contains = "quick brown";
    CHECK_EQ_INT(tu_search_count(s, &q), 4); /* the long one read: no text, no failure */
    uint64_t left = 99;
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    CHECK_EQ_INT(tu_int(mv_store_db(s), "SELECT count(*) FROM fts"), 4);
    int64_t ids[2] = {0};
    uint32_t count = 0;
    CHECK_EQ_INT(mv_store_index_set_aside(s, 0, ids, 2, &count), MV_OK);
    CHECK_EQ_INT(count, 1);
    CHECK_EQ_INT(ids[0], body);
    CHECK_EQ_INT(tu_search_count(s, &q), 4);
    q.body_contains = "MARKER-page-0004";
    CHECK_EQ_INT(tu_search_count(s, &q), 1); /* behind the damaged one: indexed */
    struct qt_aside_problems p = {body, 0, 0};
    struct mv_check_report r;
    CHECK_EQ_INT(mv_store_check(s, qt_aside_problem, &p, &r), MV_ECORRUPT);
    CHECK_EQ_INT(p.aside, 1);
    mv_store_close(&s);
}

/* The catch-up killed anywhere: a child builds rows one body a call until a timer of its own
 * CPU time (ITIMER_PROF, 0.2-10.2 ms, a few rows: SIGPROF's default action ends it as abruptly as
 * SIGKILL, no handler runs) ends it. Its own CPU, not the parent's clock: a kill sent by the
 * parent after the child's first reports came late on a loaded machine, when the child had
 * built the whole backlog meanwhile and no round was killed. */
static void test_sigkill_during_backlog(void)
{
    const char *who = "killed@example.org";
    struct mv_store_options o = qt_options("root_backlog_kill");
    mv_store *s = NULL;
    qt_backlog_store("root_backlog_kill", who, &s);
    if (s == NULL) {
        return;
    }
    mv_store_close(&s);
    o.flags |= MV_STORE_DRAIN_LATER;
    int kills = 0;
    for (int round = 0; round < 12; round++) {
        long cpu_us = 200 + (long)(qt_next() % 10000u);
        pid_t pid = fork();
        if (pid == 0) {
            mv_store *c = NULL;
            char err[256];
            if (mv_store_open(who, PW, strlen(PW), &o, &c, err, sizeof err) != MV_OK) {
                _exit(3);
            }
            signal(SIGPROF, SIG_DFL);
            struct itimerval t = {.it_value = {.tv_sec = 0, .tv_usec = cpu_us}};
            if (setitimer(ITIMER_PROF, &t, NULL) != 0) {
                _exit(5);
            }
            uint64_t left = 1;
            while (left > 0) {
                if (mv_store_index_backlog(c, 1, &left) != MV_OK) {
                    _exit(4);
                }
            }
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        kills += WIFSIGNALED(status);
        CHECK(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
        CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
        CHECK(qt_searches_right(s, 0));
        CHECK(tu_check_clean(s));
        long long backlog = tu_fts_backlog(s);
        mv_store_close(&s);
        if (backlog == 0) {
            break;
        }
    }
    CHECK(kills > 0);
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    uint64_t left = 99;
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    CHECK(qt_searches_right(s, 0));
    CHECK(tu_check_clean(s));
    mv_store_close(&s);
}

/* ---- what the backlog's work costs: counted in SQLite VM steps (deterministic) -------- */

/* VM instructions (in hundreds) of one catch-up call of max bodies. */
/* A catch-up call costs its batch, not the backlog's length: the ids were sorted and the
 * backlog counted in full in every call (46 ms a call at 32,000 bodies, so the whole
 * catch-up cost time in the square of the backlog). The same 16-body call with 1,200 and
 * with 24,000 bodies waiting takes about the same VM steps; *left_out counts up to 1,000. */
static void test_backlog_call_cost_flat(void)
{
    const char *who = "flat@example.org";
    struct mv_store_options o = qt_options("root_backlog_flat");
    CHECK_EQ_INT(qt_init(who, &o), MV_OK);
    mv_store *s = NULL;
    CHECK_EQ_INT(qt_open(who, &o, &s), MV_OK);
    if (s == NULL) {
        return;
    }
    /* backlog entries of bodies that do not exist: the catch-up only drops them */
    CHECK(tu_batch_cost_flat(s, "catch-up", "fts_backlog:", "x''", mv_store_index_backlog));
    uint64_t left = 1;
    CHECK_EQ_INT(mv_store_index_backlog(s, 0, &left), MV_OK);
    CHECK_EQ_INT(left, 0);
    CHECK_EQ_INT(tu_fts_backlog(s), 0);
    mv_store_close(&s);
}

static int qt_text_calls;
static void qt_body_text_counted(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    (void)argv;
    qt_text_calls++;
    sqlite3_result_text(ctx, "", 0, SQLITE_STATIC);
}

/* A full-text search parses only the searched mailbox's backlog bodies: it took the whole
 * store's backlog (a folder of 10 messages searched with 2,000 deliveries in INBOX's backlog:
 * 96 ms). mv_body_text (the parse) is replaced by a counting stand-in for the count. */
static void test_backlog_search_reads_its_mailbox(void)
{
    mv_store *s = NULL;
    qt_backlog_store("root_backlog_scope", "scope@example.org", &s);
    if (s == NULL) {
        return;
    }
    CHECK_EQ_INT(mv_mailbox_create(s, "Small", NULL), MV_OK);
    static const char msg[] = "From: a@example.net\r\nSubject: small\r\n\r\nMARKER-small\r\n";
    CHECK_EQ_INT(mv_message_append(s, "Small", msg, sizeof msg - 1, 0, NULL, 1700000000, NULL),
                 MV_OK);
    struct mv_search_query q = MV_SEARCH_QUERY_INIT;
    q.mailbox = "Small";
    q.text = "MARKER-blog";
    CHECK_EQ_INT(tu_search_count(s, &q), 0);
    CHECK_EQ_INT(sqlite3_create_function(mv_store_db(s), "mv_body_text", 2, SQLITE_UTF8, NULL,
                                         qt_body_text_counted, NULL, NULL),
                 SQLITE_OK);
    qt_text_calls = 0;
    CHECK_EQ_INT(tu_search_count(s, &q), 0);
    CHECK_EQ_INT(qt_text_calls, 0);
    q.mailbox = "INBOX"; /* the stand-in is used: INBOX's backlog bodies are read */
    CHECK_EQ_INT(tu_search_count(s, &q), 0);
    CHECK(qt_text_calls >= BACKLOG_MAIL);
    mv_store_close(&s);
}

int main(void)
{
    if (sodium_init() < 0) {
        return 2;
    }
    TEST(test_deliver_then_open);
    TEST(test_tampered_files_rejected);
    TEST(test_burst_shares_a_key);
    TEST(test_drain_compresses_ahead);
    TEST(test_form1_and_damaged_form2);
    TEST(test_identical_bytes_twice);
    TEST(test_sigkill_during_drain);
    TEST(test_sigkill_during_stepped_drain);
    TEST(test_missing_store);
    TEST(test_oversize);
    TEST(test_bad_addresses);
    TEST(test_pub_rewritten);
    TEST(test_large_file_waits);
    TEST(test_drain_in_steps);
    TEST(test_drain_step_syncs_once);
    TEST(test_drain_steps_two_handles);
    TEST(test_sealers_and_openers_at_once);
    TEST(test_refused_inside_batch);
    TEST(test_stuck_files_end_the_drain);
    TEST(test_drain_step_bounds);
    TEST(test_read_ahead_items_bound);
    TEST(test_read_ahead_bytes_bound);
    TEST(test_read_ahead_bytes_bound_texts);
    TEST(test_read_ahead_damaged_file);
    TEST(test_count_and_usage_agree);
    TEST(test_drain_leaves_unlinks_to_tidy);
    TEST(test_tidy_goes_on_where_it_stopped);
    TEST(test_drain_leaves_index_to_backlog);
    TEST(test_backlog_body_purged);
    TEST(test_backlog_body_damaged);
    TEST(test_backlog_body_damaged_purged);
    TEST(test_backlog_body_damaged_page);
    TEST(test_sigkill_during_backlog);
    TEST(test_backlog_call_cost_flat);
    TEST(test_backlog_search_reads_its_mailbox);
    return th_summary();
}
