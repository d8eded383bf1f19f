/*
 * test_fetch_keyed.c -- a whole message read through its listing's body key
 * (mv_message_fetch_keyed_into, issue 13: from a cold file, a UID FETCH of 50 random whole
 * messages read for each the UID index's leaf, the body's row and the body's data, three
 * random page reads where Dovecot reads one file).
 *
 *   - The key reads fewer pages: on a fresh handle (SQLite's cache empty) the keyed read of a
 *     message of a 3,000-message INBOX reads at least two pages fewer than the read by UID
 *     (counted on the fault-injecting VFS below mailvault, never timed), and the same bytes.
 *   - Every stored shape comes back byte for byte through the key: a small skeleton stored as
 *     it is, a compressed one, attachments stored as they are and compressed.
 *   - A key is only trusted while the mailbox is as the caller saw it: after an expunge, the
 *     purge and a new message whose body took the gone body's id, the old key of the gone UID
 *     gives MV_ENOTFOUND (by UID), never the new message's bytes; after another message's
 *     flags changed, the key still gives the right bytes (by UID); another UIDVALIDITY too.
 *   - A key that names another body (a caller's mistake) gives that body's bytes or
 *     MV_ECORRUPT, never a memory error (ASan): wrong sizes, wrong compression, keys with
 *     bits flipped. Key 0 and a NULL key read by UID.
 *   - A long BLOB's chain (an attachment, by UID or by key; a long skeleton, by key) comes
 *     from the file in one read of its length (the store's hint to the VFS) and is not read
 *     again page by page, from the disk or the page cache; the hint never lands on the next
 *     message's read, nor its window on a later read of the same chain. A chain longer than
 *     a window is read in windows, one after the other. A window read
 *     that fails is not held: the pages are then read one at a time, the message whole.
 *   - A store whose pages are not authenticated (aes256cbc) reads by UID, so the recorded
 *     SHA-256 is checked: a damaged digest gives MV_ECORRUPT through the key too.
 * Nothing depends on a random byte.
 */
#include "faultvfs.h"
#include "harness.h"
#include "testutil.h"
#include "vfs/vfs_hint.h"

#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FK_PW    "keyed fetch password"
#define FK_COUNT 3000u

static void *fk_place(void *arg, size_t size)
{
    void **slot = arg;
    *slot = malloc(size != 0 ? size : 1);
    return *slot;
}

/* Message i: a few lines, distinct per i; len bytes of text pad (compresses well). */
static char *fk_message(unsigned i, size_t pad, size_t *len)
{
    size_t cap = 512 + pad;
    char *m = malloc(cap);
    if (m == NULL) {
        return NULL;
    }
    size_t n =
        (size_t)snprintf(m, cap,
                         "From: k%u@example.org\r\nTo: v@example.org\r\nSubject: keyed %u\r\n"
                         "Message-ID: <k%u@example.org>\r\n\r\nbody %u\r\n",
                         i, i, i, i);
    for (unsigned line = 0; n + 64 < cap && n < 200 + pad; line++) {
        n += (size_t)snprintf(m + n, cap - n, "pad line %u of message %u\r\n", line, i);
    }
    *len = n;
    return m;
}

/* Reads uid through key; its rc, the bytes in *out (malloc'd, or NULL). */
static int
fk_read(mv_store *s, uint32_t uid, const struct mv_message_key *key, void **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int rc = mv_message_fetch_keyed_into(s, "INBOX", uid, key, fk_place, out, len);
    if (rc != MV_OK) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* Appends the n messages m (lengths len) to INBOX and keeps their UIDs and, if key is not
 * NULL, their keys as of the last append; 0, or -1 after a failure (reported). */
static int fk_append_all(mv_store *s,
                         char *const *m,
                         const size_t *len,
                         size_t n,
                         uint32_t *uid,
                         struct mv_message_key *key)
{
    for (size_t i = 0; i < n; i++) {
        if (m[i] == NULL ||
            mv_message_append(s, "INBOX", m[i], len[i], 0, NULL, 1700000000, &uid[i]) != MV_OK) {
            th_fail(__FILE__, __LINE__, m[i] == NULL ? "out of memory" : mv_store_errmsg(s));
            return -1;
        }
    }
    for (size_t i = 0; key != NULL && i < n; i++) {
        if (tu_message_key(s, "INBOX", uid[i], &key[i]) != 0) {
            th_fail(__FILE__, __LINE__, "no key listed");
            return -1;
        }
    }
    return 0;
}

static int fk_open(const char *name, mv_store **s)
{
    char address[64], err[256] = "";
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    snprintf(address, sizeof address, "%s@example.org", name);
    int rc = mv_store_open(address, FK_PW, strlen(FK_PW), &o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "  open %s: %s\n", address, err);
    }
    return rc;
}

/* The pages read below mailvault by one read of uid on a fresh handle, after a read of
 * another message far away (the schema and the trees' upper pages cached, as in a server). */
static unsigned long fk_cold_reads(uint32_t uid, uint32_t other, int keyed, void **out, size_t *len)
{
    mv_store *s = NULL;
    struct mv_message_key key, other_key;
    *out = NULL;
    if (fk_open("pages", &s) != MV_OK || tu_message_key(s, "INBOX", uid, &key) != 0 ||
        tu_message_key(s, "INBOX", other, &other_key) != 0) {
        mv_store_close(&s);
        return ULONG_MAX;
    }
    mv_store_close(&s); /* the listing read the trees: a fresh handle for the counts */
    if (fk_open("pages", &s) != MV_OK) {
        return ULONG_MAX;
    }
    void *warm = NULL;
    size_t warm_len = 0;
    int rc = keyed ? fk_read(s, other, &other_key, &warm, &warm_len)
                   : mv_message_fetch_into(s, "INBOX", other, fk_place, &warm, &warm_len);
    free(warm);
    fv_arm(&(struct fv_plan){FV_READ, ULONG_MAX, FV_FAIL, 0}); /* counts, never fires */
    if (rc == MV_OK) {
        rc = keyed ? fk_read(s, uid, &key, out, len)
                   : mv_message_fetch_into(s, "INBOX", uid, fk_place, out, len);
    }
    unsigned long reads = fv_calls(FV_READ);
    fv_disarm();
    mv_store_close(&s);
    return rc == MV_OK ? reads : ULONG_MAX;
}

static void test_fewer_pages(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("pages", FK_PW, 2048, &s), MV_OK);
    const char *mbox = tu_path("pages.mbox");
    FILE *f = fopen(mbox, "w");
    CHECK(f != NULL);
    for (unsigned i = 1; i <= FK_COUNT; i++) {
        size_t len = 0;
        char *m = fk_message(i, 300 + (i % 7) * 500, &len);
        CHECK(m != NULL);
        fprintf(f, "From k@example.org Mon Jan  5 10:00:00 2026\n%.*s\n", (int)len, m);
        free(m);
    }
    CHECK(fclose(f) == 0);
    struct mv_import_stats st;
    CHECK_EQ_INT(mv_import(s, mbox, "INBOX", NULL, NULL, &st), MV_OK);
    CHECK_EQ_INT(st.messages_imported, FK_COUNT);
    mv_store_close(&s);
    const uint32_t uids[] = {1234, 2001, 2999};
    for (size_t k = 0; k < sizeof uids / sizeof uids[0]; k++) {
        void *by_uid = NULL, *by_key = NULL;
        size_t uid_len = 0, key_len = 0;
        unsigned long plain = fk_cold_reads(uids[k], 17, 0, &by_uid, &uid_len);
        unsigned long keyed = fk_cold_reads(uids[k], 17, 1, &by_key, &key_len);
        printf("  # UID %u: %lu page reads by UID, %lu by key\n", uids[k], plain, keyed);
        CHECK(plain != ULONG_MAX && keyed != ULONG_MAX);
        CHECK(keyed + 2 <= plain); /* the UID index's leaf and the body's row */
        CHECK(by_uid != NULL && by_key != NULL && uid_len == key_len &&
              memcmp(by_uid, by_key, uid_len) == 0);
        free(by_uid);
        free(by_key);
    }
}

/* A multipart message with a text part and parts attachments of kind 'o' (bytes zstd
 * cannot shrink: stored as they are) or 't' (text: stored compressed), each of size bytes
 * (parts of STORE_SPLIT_MIN, 128 KiB, and more are stored apart; smaller ones stay in the
 * skeleton). */
static char *fk_multipart(char kind, size_t size, int parts, unsigned seed, size_t *len)
{
    size_t cap = 1024 + (size_t)parts * (size * 2 + 256);
    char *m = malloc(cap);
    if (m == NULL) {
        return NULL;
    }
    size_t n = (size_t)snprintf(m, cap,
                                "From: a@example.org\r\nSubject: parts %u\r\nMIME-Version: 1.0\r\n"
                                "Content-Type: multipart/mixed; boundary=\"b%u\"\r\n\r\n--b%u\r\n"
                                "Content-Type: text/plain\r\n\r\nhello %u\r\n",
                                seed, seed, seed, seed);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint32_t x = 2463534242u ^ seed;
    for (int part = 0; part < parts; part++) {
        n += (size_t)snprintf(m + n, cap - n,
                              "--b%u\r\nContent-Type: application/octet-stream\r\n"
                              "Content-Transfer-Encoding: base64\r\n\r\n",
                              seed);
        for (size_t col = 0, end = n + size; n < end; n++, col++) {
            if (col == 76) {
                m[n++] = '\r';
                m[n] = '\n';
                col = (size_t)-1;
                continue;
            }
            x ^= x << 13; /* xorshift32: a fixed sequence, not a random source */
            x ^= x >> 17;
            x ^= x << 5;
            m[n] = kind == 'o' ? b64[x & 63] : (char)('a' + (col / 8) % 4);
        }
        n += (size_t)snprintf(m + n, cap - n, "\r\n");
    }
    n += (size_t)snprintf(m + n, cap - n, "--b%u--\r\n", seed);
    *len = n;
    return m;
}

static void test_every_shape(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("shapes", FK_PW, 2048, &s), MV_OK);
    struct {
        char *m;
        size_t len;
        uint32_t uid;
    } shapes[5];
    memset(shapes, 0, sizeof shapes);
    shapes[0].m = fk_message(1, 0, &shapes[0].len);                /* small */
    shapes[1].m = fk_message(2, 40000, &shapes[1].len);            /* a compressed skeleton */
    shapes[2].m = fk_multipart('o', 300000, 1, 3, &shapes[2].len); /* an attachment as it is */
    shapes[3].m = fk_multipart('t', 300000, 1, 4, &shapes[3].len); /* one compressed */
    shapes[4].m = fk_multipart('o', 6000, 3, 5, &shapes[4].len);
    for (size_t i = 0; i < 5; i++) {
        CHECK(shapes[i].m != NULL);
        CHECK_EQ_INT(mv_message_append(s, "INBOX", shapes[i].m, shapes[i].len, 0, NULL, 1700000000,
                                       &shapes[i].uid),
                     MV_OK);
    }
    CHECK(tu_int(mv_store_db(s), "SELECT count(*) FROM bodies WHERE compression = 1") >= 1);
    CHECK(tu_int(mv_store_db(s), "SELECT count(*) FROM attachments WHERE compression = 0") >= 1);
    CHECK(tu_int(mv_store_db(s), "SELECT count(*) FROM attachments WHERE compression = 1") >= 1);
    for (size_t i = 0; i < 5; i++) {
        struct mv_message_key key;
        void *got = NULL;
        size_t len = 0;
        CHECK_EQ_INT(tu_message_key(s, "INBOX", shapes[i].uid, &key), 0);
        CHECK_EQ_INT(fk_read(s, shapes[i].uid, &key, &got, &len), MV_OK);
        CHECK(got != NULL && len == shapes[i].len && memcmp(got, shapes[i].m, len) == 0);
        free(got);
        free(shapes[i].m);
    }
    mv_store_close(&s);
}

static void test_stale_key(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("stale", FK_PW, 2048, &s), MV_OK);
    size_t len[3];
    char *m[3];
    uint32_t uid[3];
    m[0] = fk_message(100, 50, &len[0]);
    m[1] = fk_message(101, 50, &len[1]);
    CHECK_EQ_INT(fk_append_all(s, m, len, 2, uid, NULL), 0);
    struct mv_message_key old_key, first_key;
    CHECK_EQ_INT(tu_message_key(s, "INBOX", uid[1], &old_key), 0);
    CHECK_EQ_INT(tu_message_key(s, "INBOX", uid[0], &first_key), 0);
    /* the last message goes, its body is purged, a new one takes the body's id */
    char set[16];
    snprintf(set, sizeof set, "%u", uid[1]);
    uint32_t n = 0;
    uint64_t left = 0;
    CHECK_EQ_INT(mv_flags_set(s, "INBOX", set, MV_FLAGS_ADD, MV_FLAG_DELETED, NULL, NULL), MV_OK);
    CHECK_EQ_INT(mv_mailbox_expunge(s, "INBOX", NULL, &n), MV_OK);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(mv_store_purge(s, MV_PURGE_BATCH, &left), MV_OK);
    m[2] = fk_message(102, 50, &len[2]);
    CHECK(m[2] != NULL);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", m[2], len[2], 0, NULL, 1700000000, &uid[2]), MV_OK);
    struct mv_message_key new_key;
    CHECK_EQ_INT(tu_message_key(s, "INBOX", uid[2], &new_key), 0);
    CHECK_EQ_INT((long long)(new_key.body_key >> 3), (long long)(old_key.body_key >> 3));
    void *got = NULL;
    size_t got_len = 0;
    CHECK_EQ_INT(fk_read(s, uid[1], &old_key, &got, &got_len), MV_ENOTFOUND);
    CHECK(got == NULL);
    /* an unchanged message through its old key: by UID, right */
    CHECK_EQ_INT(fk_read(s, uid[0], &first_key, &got, &got_len), MV_OK);
    CHECK(got != NULL && got_len == len[0] && memcmp(got, m[0], got_len) == 0);
    free(got);
    /* another UIDVALIDITY with the mailbox's modseq: by UID (the new message's bytes are
     * what the UID names) */
    struct mv_message_key other = new_key;
    other.uidvalidity++;
    CHECK_EQ_INT(fk_read(s, uid[2], &other, &got, &got_len), MV_OK);
    CHECK(got != NULL && got_len == len[2] && memcmp(got, m[2], got_len) == 0);
    free(got);
    /* key 0 and no key: by UID */
    other = new_key;
    other.body_key = 0;
    CHECK_EQ_INT(fk_read(s, uid[2], &other, &got, &got_len), MV_OK);
    CHECK(got != NULL && got_len == len[2]);
    free(got);
    CHECK_EQ_INT(mv_message_fetch_keyed_into(s, "INBOX", uid[2], NULL, fk_place, &got, &got_len),
                 MV_OK);
    CHECK(got != NULL && got_len == len[2]);
    free(got);
    CHECK_EQ_INT(fk_read(s, uid[1], NULL, &got, &got_len), MV_ENOTFOUND);
    for (int i = 0; i < 3; i++) {
        free(m[i]);
    }
    mv_store_close(&s);
}

static void test_wrong_key(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("wrong", FK_PW, 2048, &s), MV_OK);
    size_t len[3];
    char *m[3];
    uint32_t uid[3];
    m[0] = fk_message(1, 0, &len[0]);
    m[1] = fk_message(2, 40000, &len[1]);
    m[2] = fk_multipart('o', 140000, 1, 3, &len[2]); /* stored apart */
    struct mv_message_key key[3];
    CHECK_EQ_INT(fk_append_all(s, m, len, 3, uid, key), 0);
    void *got = NULL;
    size_t got_len = 0;
    /* another message's key: its bytes */
    CHECK_EQ_INT(fk_read(s, uid[0], &key[1], &got, &got_len), MV_OK);
    CHECK(got != NULL && got_len == len[1] && memcmp(got, m[1], got_len) == 0);
    free(got);
    /* a size that is not the body's, in both directions; a wrong compression */
    for (int i = 0; i < 3; i++) {
        struct mv_message_key k = key[i];
        k.size = key[i].size + 1;
        CHECK_EQ_INT(fk_read(s, uid[i], &k, &got, &got_len), MV_ECORRUPT);
        k.size = key[i].size - 1;
        CHECK_EQ_INT(fk_read(s, uid[i], &k, &got, &got_len), MV_ECORRUPT);
        k.size = 0;
        CHECK_EQ_INT(fk_read(s, uid[i], &k, &got, &got_len), MV_ECORRUPT);
        k.size = UINT64_MAX;
        CHECK(fk_read(s, uid[i], &k, &got, &got_len) != MV_OK);
    }
    /* the other compression (stored as it is <-> zstd), with a compressed skeleton among them */
    CHECK(tu_int(mv_store_db(s), "SELECT count(*) FROM bodies WHERE compression = 1") >= 1);
    struct mv_message_key k;
    for (int i = 0; i < 3; i++) {
        k = key[i];
        k.body_key ^= 3; /* compression + 1: 1 <-> 2 */
        CHECK_EQ_INT(fk_read(s, uid[i], &k, &got, &got_len), MV_ECORRUPT);
    }
    /* every single bit of each key flipped: an answer, never a memory error */
    for (int i = 0; i < 3; i++) {
        for (int bit = 0; bit < 64; bit++) {
            k = key[i];
            k.body_key ^= (uint64_t)1 << bit;
            int rc = fk_read(s, uid[i], &k, &got, &got_len);
            CHECK(rc == MV_OK || rc == MV_ECORRUPT);
            free(got);
        }
    }
    for (int i = 0; i < 3; i++) {
        free(m[i]);
    }
    mv_store_close(&s);
}

static void test_unauthenticated_pages(void)
{
    CHECK_EQ_INT(tu_store_file_create("cbc", FK_PW, MV_CIPHER_AES256CBC), MV_OK);
    mv_store *s = NULL;
    CHECK_EQ_INT(fk_open("cbc", &s), MV_OK);
    size_t len = 0;
    char *m = fk_message(9, 100, &len);
    uint32_t uid = 0;
    CHECK(m != NULL);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, 0, NULL, 1700000000, &uid), MV_OK);
    struct mv_message_key key;
    CHECK_EQ_INT(tu_message_key(s, "INBOX", uid, &key), 0);
    void *got = NULL;
    size_t got_len = 0;
    CHECK_EQ_INT(fk_read(s, uid, &key, &got, &got_len), MV_OK);
    CHECK(got != NULL && got_len == len && memcmp(got, m, len) == 0);
    free(got);
    /* the recorded digest damaged: the read by UID checks it, so the keyed one does too */
    CHECK_EQ_INT(tu_exec(mv_store_db(s), "UPDATE bodies SET sha256 = zeroblob(32)"), SQLITE_OK);
    CHECK_EQ_INT(fk_read(s, uid, &key, &got, &got_len), MV_ECORRUPT);
    free(m);
    mv_store_close(&s);
}

/* The lower reads of one read of message i (by key or by UID) on s: multi-page ones, the
 * largest, and all of them. */
struct fk_reads {
    unsigned long windows, largest, all;
};

static int fk_counted_read(mv_store *s,
                           uint32_t uid,
                           const struct mv_message_key *key,
                           int keyed,
                           void **got,
                           size_t *got_len,
                           struct fk_reads *r)
{
    fv_arm(&(struct fv_plan){FV_READ, ULONG_MAX, FV_FAIL, 0});
    int rc = keyed ? fk_read(s, uid, key, got, got_len)
                   : mv_message_fetch_into(s, "INBOX", uid, fk_place, got, got_len);
    r->windows = fv_reads_multipage();
    r->largest = fv_read_largest();
    r->all = fv_calls(FV_READ);
    fv_disarm();
    return rc;
}

/* A long BLOB's overflow chain comes from the file in one read of its length (the store's
 * hint to the VFS, vfs_hint.h), an attachment's by UID or by key, a message's own skeleton by
 * key, and none of its pages is read from the file again: the VFS holds the window for the
 * chain's page reads (HELD WINDOWS in vfs_read_ahead.c), also when the file is in the page
 * cache, as here, where the old rule (a window only after a read that took the disk's time)
 * read every page one at a time. The hint never outlives its read: the next message's read
 * takes no window, and a read of the same chain by UID afterwards (skeletons are not hinted
 * by UID) reads its pages from the file, one at a time. */
static void test_chain_read_at_once(void)
{
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("chain", FK_PW, 2048, &s), MV_OK);
    size_t len[3];
    char *m[3];
    uint32_t uid[3];
    m[0] = fk_multipart('o', 300000, 1, 21, &len[0]); /* an attachment stored as it is */
    m[1] = fk_message(22, 0, &len[1]);
    m[2] = fk_multipart('o', 6000, 30, 23, &len[2]); /* parts kept in it: a long skeleton */
    struct mv_message_key key[3];
    CHECK_EQ_INT(fk_append_all(s, m, len, 3, uid, key), 0);
    CHECK(tu_int(mv_store_db(s), "SELECT max(length(data)) FROM bodies_data") > 150000);
    mv_store_close(&s);
    struct fk_reads r;
    for (int keyed = 0; keyed <= 1; keyed++) {
        for (int i = 0; i < 3; i += 2) {
            if (i == 2 && !keyed) {
                continue; /* a skeleton by UID is not hinted: only the keyed read knows more */
            }
            CHECK_EQ_INT(fk_open("chain", &s), MV_OK);
            /* again on the same handle, its cache emptied: the first read's window is gone,
             * the second hint makes its own */
            for (int again = 0; again <= 1; again++) {
                (void)sqlite3_db_release_memory(mv_store_db(s));
                void *got = NULL;
                size_t got_len = 0;
                int rc = fk_counted_read(s, uid[i], &key[i], keyed, &got, &got_len, &r);
                CHECK_EQ_INT(rc, MV_OK);
                CHECK(got != NULL && got_len == len[i] && memcmp(got, m[i], got_len) == 0);
                free(got);
                printf("  # message %d %s%s: %lu lower reads, %lu of several pages, the "
                       "largest %lu bytes\n",
                       i, keyed ? "by key" : "by UID", again ? ", again" : "", r.all, r.windows,
                       r.largest);
                CHECK_EQ_INT(r.windows, 1);
                CHECK(r.largest >= (i == 0 ? 290000u : 175000u)); /* the BLOB, less a page */
                /* the chain is 40+ pages: read once, in the window, not page by page */
                CHECK(r.all <= 20);
            }
            void *got = NULL;
            size_t got_len = 0;
            int rc = fk_counted_read(s, uid[1], &key[1], 1, &got, &got_len, &r); /* no chain */
            CHECK_EQ_INT(rc, MV_OK);
            free(got);
            CHECK_EQ_INT(r.windows, 0);
            if (i == 2) {
                /* the skeleton again, by UID (no hint; SQLite's cache emptied): the window
                 * was dropped with the hint, so each chain page comes from the file */
                (void)sqlite3_db_release_memory(mv_store_db(s));
                rc = fk_counted_read(s, uid[2], &key[2], 0, &got, &got_len, &r);
                CHECK_EQ_INT(rc, MV_OK);
                CHECK(got != NULL && got_len == len[2] && memcmp(got, m[2], got_len) == 0);
                free(got);
                CHECK_EQ_INT(r.windows, 0);
                CHECK(r.all >= 40);
            }
            mv_store_close(&s);
        }
    }
    for (int i = 0; i < 3; i++) {
        free(m[i]);
    }
}

/* Rows appended one after the other have their chains next to their leaves (NEAR WINDOWS in
 * vfs_read_ahead.c): a keyed read of a message whose skeleton has a short chain (a part kept
 * in it: 9,000 bytes of base64) takes the leaf and the chain in one lower read, so it costs
 * as many lower reads as a message without a chain (the last one here), where it took one
 * more before. SQLite's cache is emptied before each read, so the B-tree's pages and the
 * mailbox's row come from the file every time. */
static void test_leaf_and_chain_at_once(void)
{
    enum { N = 60 };
    mv_store *s = NULL;
    CHECK_EQ_INT(tu_store_create("near", FK_PW, 2048, &s), MV_OK);
    char *m[N + 1];
    size_t len[N + 1];
    uint32_t uid[N + 1];
    struct mv_message_key key[N + 1];
    for (int i = 0; i < N; i++) {
        m[i] = fk_multipart('o', 9000, 1, 300 + (unsigned)i, &len[i]);
    }
    m[N] = fk_message(400, 0, &len[N]); /* no chain: the reads every message takes */
    CHECK_EQ_INT(fk_append_all(s, m, len, N + 1, uid, key), 0);
    /* every skeleton but the last has a chain: more than a leaf's cell holds */
    CHECK_EQ_INT(
        tu_int(mv_store_db(s), "SELECT count(*) FROM bodies_data WHERE length(data) > 5000"), N);
    mv_store_close(&s);
    CHECK_EQ_INT(fk_open("near", &s), MV_OK);
    unsigned long reads[N + 1];
    for (int i = N; i >= 0; i--) {
        (void)sqlite3_db_release_memory(mv_store_db(s));
        struct fk_reads r;
        void *got = NULL;
        size_t got_len = 0;
        CHECK_EQ_INT(fk_counted_read(s, uid[i], &key[i], 1, &got, &got_len, &r), MV_OK);
        CHECK(got != NULL && got_len == len[i] && memcmp(got, m[i], got_len) == 0);
        free(got);
        reads[i] = r.all;
    }
    int as_few = 0;
    for (int i = 0; i < N; i++) {
        as_few += reads[i] <= reads[N];
    }
    printf("  # %d of %d messages with a chain read in as few lower reads (%lu) as one without\n",
           as_few, N, reads[N]);
    CHECK(as_few >= N / 3); /* 29 of 60 when written (2 pages each side); none before */
    mv_store_close(&s);
    for (int i = 0; i <= N; i++) {
        free(m[i]);
    }
}

/* A new store name@example.org holding one message with one attachment of size bytes stored
 * as it is (its chain: the window tests'), closed again; *m (malloc'd), its length, UID and
 * key. 0, or -1. */
static int fk_one_attachment(const char *name,
                             size_t size,
                             unsigned seed,
                             char **m,
                             size_t *len,
                             uint32_t *uid,
                             struct mv_message_key *key)
{
    mv_store *s = NULL;
    if (tu_store_create(name, FK_PW, 2048, &s) != MV_OK) {
        return -1;
    }
    *m = fk_multipart('o', size, 1, seed, len);
    int rc = *m != NULL ? fk_append_all(s, m, len, 1, uid, key) : -1;
    mv_store_close(&s);
    return rc;
}

/* A chain longer than a window (2 MiB) is read in windows, each taken when the chain goes
 * on right after the last one: a 5 MB attachment in three lower reads of several pages and
 * a few of one page, not the rest of the chain page by page after the first window. */
static void test_long_chain_windows(void)
{
    mv_store *s = NULL;
    size_t len = 0;
    char *m = NULL;
    uint32_t uid = 0;
    struct mv_message_key key;
    CHECK_EQ_INT(fk_one_attachment("longchain", 5000000, 51, &m, &len, &uid, &key), 0);
    CHECK_EQ_INT(fk_open("longchain", &s), MV_OK);
    struct fk_reads r;
    void *got = NULL;
    size_t got_len = 0;
    CHECK_EQ_INT(fk_counted_read(s, uid, &key, 1, &got, &got_len, &r), MV_OK);
    CHECK(got != NULL && got_len == len && memcmp(got, m, len) == 0);
    free(got);
    printf("  # a 5 MB attachment: %lu lower reads, %lu of several pages, the largest %lu\n", r.all,
           r.windows, r.largest);
    CHECK_EQ_INT(r.windows, 3);
    CHECK(r.all <= 20);
    mv_store_close(&s);
    free(m);
}

/* A window read that fails (a transient disk error) is not held: the chain's pages are
 * then read one at a time and the message still comes back whole; a read of the message that
 * fails elsewhere fails with an error, never with other bytes. Each lower read of one keyed
 * read fails in turn, however many there are. */
static void test_chain_window_fails(void)
{
    mv_store *s = NULL;
    size_t len = 0;
    char *m = NULL;
    uint32_t uid = 0;
    struct mv_message_key key;
    CHECK_EQ_INT(fk_one_attachment("winfail", 300000, 41, &m, &len, &uid, &key), 0);
    int survived_window = 0;
    /* until a read with no fault left to inject: every lower read of it failed once */
    int fired = 1;
    for (unsigned long nth = 1; fired && nth <= 200; nth++) {
        CHECK_EQ_INT(fk_open("winfail", &s), MV_OK);
        void *got = NULL;
        size_t got_len = 0;
        fv_arm(&(struct fv_plan){FV_READ, nth, FV_FAIL, 0});
        int rc = fk_read(s, uid, &key, &got, &got_len);
        unsigned long all = fv_calls(FV_READ);
        fired = fv_disarm();
        if (rc == MV_OK) {
            CHECK(got != NULL && got_len == len && memcmp(got, m, len) == 0);
            /* the failed call was the window: the chain's 70+ pages came one at a time */
            if (fired && all >= 40) {
                printf("  # read %lu (the window) failed: %lu reads, the message whole\n", nth,
                       all);
                survived_window = 1;
            }
        } else {
            CHECK(fired);
            CHECK(rc == MV_EIO || rc == MV_ECORRUPT || rc == MV_ERROR);
        }
        free(got);
        mv_store_close(&s);
    }
    CHECK(!fired); /* the last run had no read left to fail */
    CHECK(survived_window);
    free(m);
}

int main(void)
{
    if (fv_register() != SQLITE_OK || mv_vfs_register(FV_VFS_NAME, 0) != MV_OK) {
        fprintf(stderr, "cannot register the VFS stack\n");
        return 1;
    }
    TEST(test_fewer_pages);
    TEST(test_every_shape);
    TEST(test_stale_key);
    TEST(test_wrong_key);
    TEST(test_unauthenticated_pages);
    TEST(test_chain_read_at_once);
    TEST(test_leaf_and_chain_at_once);
    TEST(test_long_chain_windows);
    TEST(test_chain_window_fails);
    return th_summary();
}
