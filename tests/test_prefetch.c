/*
 * test_prefetch.c -- the leaves and chains of many body rows asked of the disk at once
 * (mv_message_prefetch_keyed, vfs_prefetch.c; issue 13: a FETCH of 50 random whole
 * messages from an evicted file waited for each message's leaf in turn).
 *
 *   - The walk finds the leaf SQLite has for every row: on a store of 300 messages (bodies
 *     with no chain, short chains and long ones), checkpointed so the file holds every page,
 *     each row's leaf as walked is the leaf SQLite's dbstat table lists it on (the leaves in
 *     key order, their cells counted off against the ids in order), and the distinct leaves
 *     are counted as asked for. The same on a table of 6,000 rows three levels deep.
 *   - The chains asked for are the rows' own: each first page is the first overflow page
 *     dbstat lists for the row's cell, and exactly the chains not within the near pages of
 *     their leaf are asked for; one call asks for 32 MiB of chains at most.
 *   - An index walk (a WITHOUT ROWID table shaped as body_parts, three levels deep) collects
 *     only values SQL has for the rows asked for, and all of them but those an interior
 *     cell holds.
 *   - A wrong or absent root, rowids beyond the table, too many rows: nothing asked for, no
 *     memory error (ASan); a plain (unencrypted) connection: nothing; a connection on
 *     SQLite's own VFS: nothing, and the outputs (leaves, chains, counts) say so.
 *   - The pages arrive: with the file evicted (posix_fadvise DONTNEED, in a child process,
 *     whose close of the file cannot drop the store's locks), the leaves of 63 messages and
 *     the first chain pages of the 3 attachments stored apart among them are mostly not in
 *     the page cache before the prefetch and all of them are after it (polled with mincore
 *     in a child, with a generous deadline). On a file system that keeps every page (tmpfs)
 *     this part says so and checks nothing more.
 *   - For skeletons only (mv_message_prefetch_skeletons: a FETCH BODYSTRUCTURE that reads no
 *     attachment) the leaves arrive the same and no attachment's chain page is asked for:
 *     none is in the page cache after it that was not before. For headers only
 *     (mv_message_prefetch_headers) the rows' leaves of the bodies table (the headers'
 *     copies: a message list) or of body_headers (the kept fields: SEARCH FROM) arrive, and
 *     the call says the file was cold, and not when asked again.
 *   - No read past a chain (COLD WINDOWS, vfs_read_ahead.c): a message with a 400 KB
 *     attachment, read on a fresh connection from the evicted file after the prefetch, leaves
 *     the 128 pages from 8 past the attachment's chain (other messages') out of the page
 *     cache; the kernel read 92 of them before the held window was asked for first.
 *   - Interior pages kept (vfs_interior.c): a second walk of the same rows of a three-level
 *     table reads no interior page and takes as many kept ones as the first read; a walk of
 *     other rows takes the upper levels from those kept; after a checkpoint that grew the
 *     file, a walk reads them again and takes none kept; the leaves are SQLite's throughout.
 *   - The store's call returns MV_OK for keys and for nonsense, MV_EINVAL for NULL, and the
 *     messages read after it are byte for byte the stored ones.
 * Nothing depends on a random byte or on timing but the polling deadline.
 */
#include "harness.h"
#include "testutil.h"
#include "vfs/vfs_hint.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PF_PW    "prefetch password"
#define PF_COUNT 300
#define PF_NEAR  2

/* Message i: its body ~size bytes of base64-like text that compresses little (a fixed
 * xorshift sequence, not a random source), so its stored skeleton is about that long. */
static char *pf_message(unsigned i, size_t size, size_t *len)
{
    size_t cap = 512 + size + size / 38;
    char *m = malloc(cap);
    if (m == NULL) {
        return NULL;
    }
    size_t n = (size_t)snprintf(m, cap,
                                "From: p%u@example.org\r\nTo: v@example.org\r\nSubject: prefetch "
                                "%u\r\nMessage-ID: <p%u@example.org>\r\n\r\n",
                                i, i, i);
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    uint32_t x = 2463534242u ^ (i * 2654435761u);
    for (size_t col = 0, end = n + size; n < end && n + 3 < cap; n++, col++) {
        if (col == 76) {
            m[n++] = '\r';
            m[n] = '\n';
            col = (size_t)-1;
            continue;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        m[n] = b64[x & 63];
    }
    *len = n;
    return m;
}

/* Message i with one attachment of size bytes of base64-like text (stored apart from the
 * skeleton when large enough, and as it is: it hardly compresses). */
static char *pf_attachment_message(unsigned i, size_t size, size_t *len)
{
    size_t body_len = 0;
    char *body = pf_message(i, size, &body_len);
    size_t cap = body_len + 1024;
    char *m = body != NULL ? malloc(cap) : NULL;
    if (m == NULL) {
        free(body);
        return NULL;
    }
    const char *text = strstr(body, "\r\n\r\n") + 4; /* pf_message's body, after its header */
    int n = snprintf(m, cap,
                     "From: a%u@example.org\r\nSubject: attachment %u\r\nMIME-Version: 1.0\r\n"
                     "Content-Type: multipart/mixed; boundary=\"b%u\"\r\n\r\n--b%u\r\n"
                     "Content-Type: text/plain\r\n\r\nsee attached\r\n--b%u\r\n"
                     "Content-Type: application/octet-stream\r\n"
                     "Content-Transfer-Encoding: base64\r\n\r\n%s\r\n--b%u--\r\n",
                     i, i, i, i, i, text, i);
    free(body);
    *len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    return m;
}

/* A new store name@example.org with PF_COUNT messages: a third small (no chain), a third ~9 KB (a
 * chain near its leaf), a third ~30 KB (a chain that runs past it); their UIDs in uid. */
static int pf_fill(const char *name, mv_store **s, uint32_t *uid)
{
    if (tu_store_create(name, PF_PW, 2048, s) != MV_OK) {
        return -1;
    }
    for (unsigned i = 0; i < PF_COUNT; i++) {
        static const size_t sizes[] = {400, 9000, 30000};
        size_t len = 0;
        char *m = pf_message(i, sizes[i % 3], &len);
        int rc = m != NULL ? mv_message_append(*s, "INBOX", m, len, 0, NULL, 1700000000, &uid[i])
                           : MV_ENOMEM;
        free(m);
        if (rc != MV_OK) {
            th_fail(__FILE__, __LINE__, mv_store_errmsg(*s));
            return -1;
        }
    }
    /* the walk reads the file, not the WAL: every page in the file */
    return tu_exec(mv_store_db(*s), "PRAGMA wal_checkpoint(TRUNCATE)") == 0 ? 0 : -1;
}

/* What SQLite says of bodies_data: ids in order, each row's leaf and first overflow page (0:
 * none), from dbstat (the leaves in key order, their cells counted off against the ids). */
struct pf_truth {
    int64_t *ids;
    uint32_t *leaf;
    uint32_t *overflow;
    size_t rows;
    size_t leaves;
};

static int pf_truth(sqlite3 *db, const char *table, struct pf_truth *t)
{
    char sql[256];
    memset(t, 0, sizeof *t);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    t->rows = (size_t)tu_int(db, sql);
    t->ids = calloc(t->rows, sizeof *t->ids);
    t->leaf = calloc(t->rows, sizeof *t->leaf);
    t->overflow = calloc(t->rows, sizeof *t->overflow);
    sqlite3_stmt *st = NULL;
    if (t->ids == NULL || t->leaf == NULL || t->overflow == NULL ||
        (snprintf(sql, sizeof sql, "SELECT rowid FROM %s ORDER BY rowid", table),
         sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)) {
        return -1;
    }
    for (size_t i = 0; i < t->rows && sqlite3_step(st) == SQLITE_ROW; i++) {
        t->ids[i] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    /* leaves and first overflow pages, in path order (key order); an overflow page's path is
     * its cell's: the leaf's path, the cell's index in hex, "+000000" for the first */
    snprintf(sql, sizeof sql,
             "SELECT pagetype, pageno, ncell, path FROM dbstat WHERE name = '%s' AND "
             "(pagetype = 'leaf' OR (pagetype = 'overflow' AND path LIKE '%%+000000')) "
             "ORDER BY path",
             table);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        return -1;
    }
    size_t first_cell = 0, cells = 0;
    char leaf_path[64] = "";
    uint32_t leaf = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *type = (const char *)sqlite3_column_text(st, 0);
        uint32_t pgno = (uint32_t)sqlite3_column_int64(st, 1);
        const char *path = (const char *)sqlite3_column_text(st, 3);
        if (strcmp(type, "leaf") == 0) {
            first_cell += cells;
            cells = (size_t)sqlite3_column_int64(st, 2);
            leaf = pgno;
            snprintf(leaf_path, sizeof leaf_path, "%s", path);
            for (size_t c = 0; c < cells && first_cell + c < t->rows; c++) {
                t->leaf[first_cell + c] = leaf;
            }
            t->leaves++;
        } else {
            size_t plen = strlen(leaf_path);
            unsigned cell = 0;
            if (strncmp(path, leaf_path, plen) != 0 || sscanf(path + plen, "%x+", &cell) != 1 ||
                first_cell + cell >= t->rows) {
                sqlite3_finalize(st);
                return -1;
            }
            t->overflow[first_cell + cell] = pgno;
        }
    }
    sqlite3_finalize(st);
    return first_cell + cells == t->rows ? 0 : -1;
}

static void pf_truth_free(struct pf_truth *t)
{
    free(t->ids);
    free(t->leaf);
    free(t->overflow);
}

static uint32_t pf_root(sqlite3 *db, const char *table)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT rootpage FROM sqlite_schema WHERE name = '%s'", table);
    return (uint32_t)tu_int(db, sql);
}

/* Walks every stride-th row of table in db (MV_PREFETCH_ROWS_MAX at most), with every chain
 * asked for, and checks leaves and chains against dbstat; the tree must have at least
 * levels levels. */
static void pf_check_walk(sqlite3 *db, const char *table, size_t stride, int levels)
{
    struct pf_truth t;
    CHECK_EQ_INT(pf_truth(db, table, &t), 0);
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT max(length(path) - length(replace(path, '/', ''))) FROM dbstat "
             "WHERE name = '%s' AND pagetype = 'leaf'",
             table);
    CHECK(tu_int(db, sql) >= levels - 1); /* a leaf's path has a '/' per level above it */
    size_t n = (t.rows + stride - 1) / stride;
    CHECK(n <= MV_PREFETCH_ROWS_MAX);
    int64_t *ids = calloc(n, sizeof *ids);
    uint32_t *leaves = calloc(n, sizeof *leaves);
    uint32_t *firsts = calloc(n, sizeof *firsts);
    CHECK(ids != NULL && leaves != NULL && firsts != NULL);
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++) {
        ids[i] = t.ids[i * stride];
        distinct += i == 0 || t.leaf[i * stride] != t.leaf[(i - 1) * stride] ? 1u : 0u;
    }
    struct mv_fcntl_prefetch p = {.root = pf_root(db, table),
                                  .rowids = ids,
                                  .n = n,
                                  .near = PF_NEAR,
                                  .leaves = leaves,
                                  .always_chains = 1,
                                  .chain_firsts = firsts};
    CHECK_EQ_INT((long long)mv_db_prefetch(db, &p), (long long)distinct);
    size_t wrong_leaf = 0, wrong_chain = 0, far = 0, with_chain = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t leaf = t.leaf[i * stride], ovfl = t.overflow[i * stride];
        wrong_leaf += leaves[i] != leaf ? 1u : 0u;
        with_chain += ovfl != 0 ? 1u : 0u;
        /* asked for exactly when the chain's first page is outside the leaf's window (a
         * chain that starts inside it and runs past it may go either way: its end is not
         * known here; it is only checked to name its own first page) */
        int starts_far = ovfl != 0 && (ovfl + PF_NEAR < leaf || ovfl > leaf + PF_NEAR);
        far += starts_far ? 1u : 0u;
        if (firsts[i] != 0 ? firsts[i] != ovfl : starts_far) {
            wrong_chain++;
        }
    }
    printf("  # %s: %zu of %zu rows, on %zu of %zu leaves; %zu chains, %zu starting away from "
           "their leaf, %zu asked for\n",
           table, n, t.rows, distinct, t.leaves, with_chain, far, p.chains);
    CHECK_EQ_INT((long long)wrong_leaf, 0);
    CHECK_EQ_INT((long long)wrong_chain, 0);
    CHECK(far > 0 && p.chains >= far && p.chains <= with_chain);
    pf_truth_free(&t);
    free(ids);
    free(leaves);
    free(firsts);
}

/* An index walk with entries collected, on a WITHOUT ROWID table shaped as body_parts (an
 * integer first column, several entries for some of its values): every value collected is
 * one SQLite has for the rows asked for, and all of them are collected but those an interior
 * cell holds (an index keeps entries there too; the walk reads leaves only). */
static void pf_check_index(sqlite3 *db)
{
    static const char parts[] =
        "CREATE TABLE parts(a INTEGER, b INTEGER, c INTEGER, d INTEGER, PRIMARY KEY (a, b)) "
        "WITHOUT ROWID;"
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 9000) "
        "INSERT INTO parts SELECT i / 3, i % 3, i * 7, i * 10 FROM n WHERE i % 5 != 0;"
        "PRAGMA wal_checkpoint(TRUNCATE)";
    CHECK_EQ_INT(tu_exec(db, parts), 0);
    CHECK(tu_int(db, "SELECT max(length(path) - length(replace(path, '/', ''))) FROM dbstat "
                     "WHERE name = 'parts'") >= 2); /* three levels */
    enum { ROWS = 400 };
    int64_t ids[ROWS], collected[4 * ROWS];
    for (int i = 0; i < ROWS; i++) {
        ids[i] = 1 + (int64_t)i * 7; /* some values absent: none has a == 0 mod 5 ... */
    }
    struct mv_fcntl_prefetch p = {.root = pf_root(db, "parts"),
                                  .index = 1,
                                  .rowids = ids,
                                  .n = ROWS,
                                  .collect_column = 3,
                                  .collected = collected,
                                  .collected_cap = (size_t)4 * ROWS};
    CHECK(mv_db_prefetch(db, &p) > 0);
    long long expected = tu_int(db, "SELECT count(*) FROM parts WHERE (a - 1) % 7 = 0 AND "
                                    "a <= 1 + 7 * 399");
    long long interior = tu_int(db, "SELECT sum(ncell) FROM dbstat WHERE name = 'parts' AND "
                                    "pagetype = 'internal'");
    size_t wrong = 0;
    for (size_t i = 0; i < p.collected_n; i++) {
        int64_t d = collected[i], row = d / 10, a = row / 3;
        wrong += d % 10 != 0 || row % 5 == 0 || (a - 1) % 7 != 0 || a > 1 + 7 * 399 ? 1u : 0u;
    }
    printf("  # parts: %zu of %lld entries collected (%lld entries in interior cells)\n",
           p.collected_n, expected, interior);
    CHECK_EQ_INT((long long)wrong, 0);
    CHECK((long long)p.collected_n <= expected && (long long)p.collected_n >= expected - interior);
    CHECK(p.collected_n > 0);
}

/* A table "deep" of 6,000 rows (ids 3, 6, 9, ...), three levels deep with 4 KiB pages:
 * values of 500 bytes, every seventh of seventh_bytes (a chain when that is large), then
 * checkpointed, so the walk (which reads the file) finds every page there. */
static int pf_make_deep(sqlite3 *db, int seventh_bytes)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "CREATE TABLE deep(id INTEGER PRIMARY KEY, v BLOB);"
             "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6000) "
             "INSERT INTO deep SELECT i * 3, zeroblob(CASE WHEN i %% 7 = 0 THEN %d ELSE 500 END) "
             "FROM n;"
             "PRAGMA wal_checkpoint(TRUNCATE)",
             seventh_bytes);
    return tu_exec(db, sql);
}

static void test_walk_finds_sqlites_leaves(void)
{
    mv_store *s = NULL;
    uint32_t uid[PF_COUNT];
    CHECK_EQ_INT(pf_fill("walk", &s, uid), 0);
    sqlite3 *db = mv_store_db(s);
    pf_check_walk(db, "bodies_data", 1, 2);
    CHECK(tu_int(db, "SELECT count(*) FROM bodies_data WHERE length(data) > 20000") >=
          PF_COUNT / 3 - 1);
    /* a deeper tree than the bodies': 6,000 rows of a table of the test's own, every
     * seventh with a chain (the walk is the same for any table) */
    CHECK_EQ_INT(pf_make_deep(db, 20000), 0);
    pf_check_walk(db, "deep", 6, 3);
    pf_check_index(db);
    /* the chains asked for in one call stop at 32 MiB: 20 rows of 2.5 MB, each chain asked
     * for up to 2 MiB (512 pages), so 16 of them */
    static const char big[] = "CREATE TABLE big(id INTEGER PRIMARY KEY, v BLOB);"
                              "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                              "WHERE i < 20) INSERT INTO big SELECT i, zeroblob(2500000) FROM n;"
                              "PRAGMA wal_checkpoint(TRUNCATE)";
    CHECK_EQ_INT(tu_exec(db, big), 0);
    int64_t big_ids[20];
    for (int i = 0; i < 20; i++) {
        big_ids[i] = i + 1;
    }
    struct mv_fcntl_prefetch capped = {.root = pf_root(db, "big"),
                                       .rowids = big_ids,
                                       .n = 20,
                                       .near = PF_NEAR,
                                       .always_chains = 1};
    CHECK(mv_db_prefetch(db, &capped) > 0);
    CHECK_EQ_INT((long long)capped.chains, 16);
    mv_store_close(&s);
}

static void test_nonsense_asks_for_nothing(void)
{
    mv_store *s = NULL;
    uint32_t uid[PF_COUNT];
    CHECK_EQ_INT(pf_fill("nonsense", &s, uid), 0);
    sqlite3 *db = mv_store_db(s);
    int64_t ids[3] = {1, 2, 3};
    uint32_t root = pf_root(db, "bodies_data");
    uint32_t pages = (uint32_t)tu_int(db, "PRAGMA page_count");
    /* the root of an index (not a table), page 1, a page past the end, page 0 */
    uint32_t index_root =
        (uint32_t)tu_int(db, "SELECT rootpage FROM sqlite_schema WHERE type = 'index' LIMIT 1");
    const uint32_t bad_roots[] = {index_root, 1, pages + 10, 0};
    for (size_t k = 0; k < sizeof bad_roots / sizeof bad_roots[0]; k++) {
        struct mv_fcntl_prefetch p = {.root = bad_roots[k], .rowids = ids, .n = 3, .near = 2};
        CHECK_EQ_INT((long long)mv_db_prefetch(db, &p), 0);
    }
    /* rows beyond the table: the walk still ends at a leaf (the last), nothing worse */
    int64_t far_ids[2] = {INT64_MAX, -5};
    struct mv_fcntl_prefetch beyond = {.root = root, .rowids = far_ids, .n = 2, .near = 0};
    CHECK(mv_db_prefetch(db, &beyond) <= 2);
    struct mv_fcntl_prefetch many = {
        .root = root, .rowids = ids, .n = MV_PREFETCH_ROWS_MAX + 1, .near = 2};
    CHECK_EQ_INT((long long)mv_db_prefetch(db, &many), 0);
    struct mv_fcntl_prefetch wide = {.root = root, .rowids = ids, .n = 3, .near = 1000};
    CHECK_EQ_INT((long long)mv_db_prefetch(db, &wide), 0);
    CHECK_EQ_INT((long long)mv_db_prefetch(NULL, &wide), 0);
    CHECK_EQ_INT((long long)mv_db_prefetch(db, NULL), 0);
    /* the store's call: nonsense keys are skipped, NULL refused */
    struct mv_message_key keys[3] = {{.body_key = 0}, {.body_key = ~0ull}, {.body_key = 9}};
    CHECK_EQ_INT(mv_message_prefetch_keyed(s, keys, 3), MV_OK);
    CHECK_EQ_INT(mv_message_prefetch_keyed(NULL, keys, 3), MV_EINVAL);
    CHECK_EQ_INT(mv_message_prefetch_keyed(s, NULL, 3), MV_EINVAL);
    CHECK_EQ_INT(mv_message_prefetch_keyed(s, NULL, 0), MV_OK);
    mv_store_close(&s);

    /* a plain connection (no key): nothing */
    sqlite3 *plain = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(tu_path("plain.db"), &plain,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, MV_VFS_NAME),
                 SQLITE_OK);
    CHECK_EQ_INT(tu_exec(plain, "CREATE TABLE t(id INTEGER PRIMARY KEY, v); "
                                "INSERT INTO t VALUES (1, 'x')"),
                 0);
    struct mv_fcntl_prefetch p = {.root = 2, .rowids = ids, .n = 1, .near = 0};
    CHECK_EQ_INT((long long)mv_db_prefetch(plain, &p), 0);
    sqlite3_close(plain);

    /* a connection on SQLite's own VFS never sees the call: the outputs still say nothing */
    sqlite3 *other = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(tu_path("other.db"), &other,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "unix"),
                 SQLITE_OK);
    CHECK_EQ_INT(tu_exec(other, "CREATE TABLE t(id INTEGER PRIMARY KEY, v)"), 0);
    uint32_t leaves[3] = {7, 7, 7}, firsts[3] = {7, 7, 7};
    struct mv_fcntl_prefetch o = {.root = 2,
                                  .rowids = ids,
                                  .n = 3,
                                  .leaves = leaves,
                                  .chain_firsts = firsts,
                                  .advised = 7,
                                  .chains = 7,
                                  .cold = 1};
    CHECK_EQ_INT((long long)mv_db_prefetch(other, &o), 0);
    sqlite3_close(other);
    for (size_t i = 0; i < 3; i++) {
        CHECK(leaves[i] == 0 && firsts[i] == 0);
    }
    CHECK(o.advised == 0 && o.chains == 0 && o.cold == 0);
}

/* In a child process (its open and close of the file cannot drop the parent's POSIX
 * locks): evict == 1: the file's pages dropped from the page cache; else the pages of
 * pgnos[0..n) resident, their count as the exit status (255 on error). */
static int
pf_child(const char *path, int evict, const uint32_t *pgnos, size_t n, uint32_t page_size)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_RDONLY);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) {
            _exit(255);
        }
        if (evict) {
            _exit(fdatasync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0 ? 0
                                                                                          : 255);
        }
        size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
        void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            _exit(255);
        }
        size_t resident = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char v = 0;
            size_t off = (size_t)(pgnos[i] - 1) * page_size;
            if (mincore((char *)map + off - off % os_page, 1, &v) == 0 && (v & 1) != 0) {
                resident++;
            }
        }
        _exit(resident > 254 ? 254 : (int)resident);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return -1;
    }
    return WEXITSTATUS(status) == 255 ? -1 : WEXITSTATUS(status);
}

static double pf_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Every PF_STEP-th message (from the middle of the first step) is drawn. */
#define PF_STEP (PF_COUNT / 60)

static void test_pages_arrive(void)
{
    enum { N = 60, A = 3, ATT = 200000 }; /* N drawn, A with an attachment stored apart */
    mv_store *s = NULL;
    uint32_t uid[PF_COUNT], att_uid[A];
    CHECK_EQ_INT(pf_fill("arrive", &s, uid), 0);
    for (unsigned a = 0; a < A; a++) {
        size_t len = 0;
        char *m = pf_attachment_message(5000 + a, ATT, &len);
        CHECK(m != NULL && len > ATT);
        CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, 0, NULL, 1700000000, &att_uid[a]),
                     MV_OK);
        free(m);
    }
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"), 0);
    CHECK_EQ_INT(tu_int(db, "SELECT count(*) FROM attachments_data"), A);
    struct pf_truth t, att;
    CHECK_EQ_INT(pf_truth(db, "bodies_data", &t), 0);
    CHECK_EQ_INT(pf_truth(db, "attachments_data", &att), 0);
    uint32_t page_size = (uint32_t)tu_int(db, "PRAGMA page_size");
    /* the keys of N messages spread over the mailbox, as a client's random draw would be,
     * and of the A with an attachment: their leaves, and the attachments' first chain pages */
    struct mv_message_key keys[N + A];
    uint32_t want[N + A + A];
    size_t n = 0;
    mv_message_iter *it = NULL;
    struct mv_message_entry e;
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    CHECK_EQ_INT(mv_message_list_begin(s, "INBOX", 0, 0, &it), MV_OK);
    for (unsigned k = 0; mv_message_list_next(it, &e) == 1; k++) {
        if ((k % PF_STEP != PF_STEP / 2 || n >= N) && k < PF_COUNT) {
            continue;
        }
        keys[n] = (struct mv_message_key){.body_key = e.body_key,
                                          .size = e.size,
                                          .modseq = info.highestmodseq,
                                          .uidvalidity = info.uidvalidity};
        int64_t id = (int64_t)(e.body_key >> 3); /* the store's key: id << 3 | compression + 1 */
        for (size_t r = 0; r < t.rows; r++) {
            if (t.ids[r] == id) {
                want[n] = t.leaf[r];
            }
        }
        n++;
    }
    mv_message_list_end(&it);
    CHECK_EQ_INT((long long)n, N + A);
    for (size_t a = 0; a < A; a++) {
        want[N + A + a] = att.overflow[a];
        CHECK(att.overflow[a] != 0);
    }
    char *path = strdup(sqlite3_db_filename(db, "main"));
    CHECK(path != NULL);
    CHECK_EQ_INT(pf_child(path, 1, NULL, 0, page_size), 0);
    int before = pf_child(path, 0, want, N + A + A, page_size);
    CHECK(before >= 0);
    if (before > N / 2) {
        printf("  # SKIP the page cache keeps this file's pages (tmpfs?): %d of %d pages "
               "resident after eviction; the walk itself is checked above\n",
               before, N + A + A);
    } else {
        int att_before = pf_child(path, 0, want + N + A, A, page_size), leaves = 0;
        CHECK_EQ_INT(mv_message_prefetch_skeletons(s, keys, N + A), MV_OK);
        for (double end = pf_now() + 30.0; pf_now() < end && leaves >= 0 && leaves < N + A;) {
            leaves = pf_child(path, 0, want, N + A, page_size);
            struct timespec pause = {0, 10000000L};
            nanosleep(&pause, NULL);
        }
        int att_skeleton = pf_child(path, 0, want + N + A, A, page_size);
        printf("  # skeletons only: %d of %d leaves, %d of %d attachments' first chain pages "
               "(%d before)\n",
               leaves, N + A, att_skeleton, A, att_before);
        CHECK_EQ_INT(leaves, N + A);
        CHECK(att_skeleton >= 0 && att_skeleton <= att_before);
        CHECK_EQ_INT(pf_child(path, 1, NULL, 0, page_size), 0); /* evicted again */
        CHECK_EQ_INT(mv_message_prefetch_keyed(s, keys, N + A), MV_OK);
        int after = 0, att_after = 0;
        for (double end = pf_now() + 30.0; pf_now() < end;) {
            after = pf_child(path, 0, want, N + A, page_size);
            att_after = pf_child(path, 0, want + N + A, A, page_size);
            if ((after == N + A && att_after == A) || after < 0 || att_after < 0) {
                break;
            }
            struct timespec pause = {0, 10000000L};
            nanosleep(&pause, NULL);
        }
        printf("  # pages in the page cache: %d of %d before the prefetch; after it %d of %d "
               "leaves, %d of %d attachments' first chain pages\n",
               before, N + A + A, after, N + A, att_after, A);
        CHECK_EQ_INT(after, N + A);
        CHECK_EQ_INT(att_after, A);
        /* headers only (mv_message_prefetch_headers): the leaves of the bodies table, which
         * holds each header's copy in the row (a message list's FETCH), and of body_headers,
         * the kept fields (SEARCH FROM, SUBJECT); cold said from the evicted file, not after */
        static const char *const tables[] = {"bodies", "body_headers"};
        static const unsigned whats[] = {MV_PREFETCH_HEADER_COPY, MV_PREFETCH_FIELDS};
        for (size_t t_i = 0; t_i < 2; t_i++) {
            struct pf_truth tb;
            CHECK_EQ_INT(pf_truth(db, tables[t_i], &tb), 0);
            uint32_t heads[N + A];
            for (size_t k = 0; k < N + A; k++) {
                heads[k] = 0;
                for (size_t r = 0; r < tb.rows; r++) {
                    if (tb.ids[r] == (int64_t)(keys[k].body_key >> 3)) {
                        heads[k] = tb.leaf[r];
                    }
                }
                CHECK(heads[k] != 0);
            }
            CHECK_EQ_INT(pf_child(path, 1, NULL, 0, page_size), 0); /* evicted again */
            int heads_before = pf_child(path, 0, heads, N + A, page_size), heads_after = 0;
            int cold = -1, warm = -1;
            CHECK_EQ_INT(mv_message_prefetch_headers(s, keys, N + A, whats[t_i], &cold), MV_OK);
            for (double end = pf_now() + 30.0; pf_now() < end;) {
                heads_after = pf_child(path, 0, heads, N + A, page_size);
                if (heads_after == N + A || heads_after < 0) {
                    break;
                }
                struct timespec pause = {0, 10000000L};
                nanosleep(&pause, NULL);
            }
            CHECK_EQ_INT(mv_message_prefetch_headers(s, keys, N + A, whats[t_i], &warm), MV_OK);
            printf("  # %s only: %d of %d leaves before, %d after; cold %d, then %d\n", tables[t_i],
                   heads_before, N + A, heads_after, cold, warm);
            CHECK(heads_before < N + A);
            CHECK_EQ_INT(heads_after, N + A);
            CHECK_EQ_INT(cold, 1);
            CHECK_EQ_INT(warm, 0);
            pf_truth_free(&tb);
        }
    }
    /* and the messages read after it are the stored ones */
    static const size_t sizes[] = {400, 9000, 30000};
    for (size_t i = 0; i < N + A; i = i + 7 < N ? i + 7 : (i < N ? N : i + 1)) {
        void *raw = NULL;
        size_t len = 0, want_len = 0;
        unsigned m_index = (unsigned)(PF_STEP * i + PF_STEP / 2);
        int with_att = i >= N;
        uint32_t read_uid = with_att ? att_uid[i - N] : uid[m_index];
        char *m = with_att ? pf_attachment_message(5000 + (unsigned)(i - N), ATT, &want_len)
                           : pf_message(m_index, sizes[m_index % 3], &want_len);
        CHECK_EQ_INT(mv_message_fetch(s, "INBOX", read_uid, &raw, &len), MV_OK);
        CHECK(m != NULL && raw != NULL && len == want_len && memcmp(raw, m, len) == 0);
        free(m);
        mv_free(raw);
    }
    free(path);
    pf_truth_free(&t);
    pf_truth_free(&att);
    mv_store_close(&s);
}

/* Walks table for every stride-th row: the interior pages read from the file and taken from
 * those kept, the number of rows whose leaf is not the one SQLite has (dbstat), and the
 * posix_fadvise calls beyond one for each leaf's window and one for each chain. */
static void pf_walk_counts(sqlite3 *db,
                           const char *table,
                           size_t stride,
                           size_t *read,
                           size_t *kept,
                           size_t *wrong,
                           size_t *extra_advice)
{
    struct pf_truth t;
    CHECK_EQ_INT(pf_truth(db, table, &t), 0);
    size_t n = (t.rows + stride - 1) / stride;
    int64_t *ids = calloc(n, sizeof *ids);
    uint32_t *leaves = calloc(n, sizeof *leaves);
    CHECK(ids != NULL && leaves != NULL && n <= MV_PREFETCH_ROWS_MAX);
    for (size_t i = 0; i < n; i++) {
        ids[i] = t.ids[i * stride];
    }
    struct mv_fcntl_prefetch p = {
        .root = pf_root(db, table), .rowids = ids, .n = n, .near = PF_NEAR, .leaves = leaves};
    CHECK(mv_db_prefetch(db, &p) > 0);
    *read = p.interior_read;
    *kept = p.interior_kept;
    *extra_advice = p.advice_calls - p.advised - p.chains;
    *wrong = 0;
    for (size_t i = 0; i < n; i++) {
        *wrong += leaves[i] != t.leaf[i * stride] ? 1u : 0u;
    }
    pf_truth_free(&t);
    free(ids);
    free(leaves);
}

/* The interior pages a walk read are kept for the next walk on the connection (not read
 * again) while the file is unchanged, and read again once a checkpoint changed it; the
 * leaves walked are SQLite's every time. A walk that knows the tree's leaf level asks for
 * each leaf's window once, not the leaf first and its window after the read. */
static void test_interior_kept(void)
{
    mv_store *s = NULL;
    uint32_t uid[PF_COUNT];
    CHECK_EQ_INT(pf_fill("kept", &s, uid), 0);
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(pf_make_deep(db, 500), 0); /* no chains */
    size_t read1 = 0, kept1 = 0, wrong1 = 0, extra1 = 0;
    size_t read2 = 0, kept2 = 0, wrong2 = 0, extra2 = 0;
    pf_walk_counts(db, "deep", 97, &read1, &kept1, &wrong1, &extra1);
    pf_walk_counts(db, "deep", 97, &read2, &kept2, &wrong2, &extra2);
    printf("  # first walk: %zu interior pages read, %zu kept ones used, %zu extra advice "
           "calls; second: %zu read, %zu kept ones used, %zu extra advice calls\n",
           read1, kept1, extra1, read2, kept2, extra2);
    CHECK(read1 >= 2); /* the root and the level below it */
    CHECK_EQ_INT((long long)kept1, 0);
    CHECK(extra1 > read1); /* the leaf level not known yet: each leaf asked for twice */
    CHECK_EQ_INT((long long)read2, 0);
    CHECK_EQ_INT((long long)kept2, (long long)read1);
    CHECK_EQ_INT((long long)extra2, 0);
    CHECK_EQ_INT((long long)(wrong1 + wrong2), 0);
    /* other rows of the same tree: the upper levels are kept, the pages below read, and
     * only those asked for beyond the leaves' windows */
    size_t read3 = 0, kept3 = 0, wrong3 = 0, extra3 = 0;
    pf_walk_counts(db, "deep", 13, &read3, &kept3, &wrong3, &extra3);
    CHECK(kept3 >= 1);
    CHECK_EQ_INT((long long)extra3, (long long)read3);
    CHECK_EQ_INT((long long)wrong3, 0);
    /* the file changed (rows moved by a checkpoint; the file grew): read again, and right */
    CHECK_EQ_INT(tu_exec(db, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                             "WHERE i < 3000) INSERT INTO deep SELECT 18000 + i, zeroblob(900) "
                             "FROM n;"
                             "PRAGMA wal_checkpoint(TRUNCATE)"),
                 0);
    size_t read4 = 0, kept4 = 0, wrong4 = 0, extra4 = 0;
    pf_walk_counts(db, "deep", 97, &read4, &kept4, &wrong4, &extra4);
    printf("  # after the checkpoint: %zu read, %zu kept ones used, %zu rows on a wrong leaf, "
           "%zu extra advice calls\n",
           read4, kept4, wrong4, extra4);
    CHECK(read4 >= 2);
    CHECK_EQ_INT((long long)kept4, 0);
    CHECK(extra4 > read4); /* what was known of the tree went with the kept pages */
    CHECK_EQ_INT((long long)wrong4, 0);
    mv_store_close(&s);
}

/* From a cold file, a message with a big attachment read after the prefetch takes its chain
 * and leaves the pages after it alone: the hinted window that reads the chain runs a few
 * pages past what the walk asked for, and without asking for that window first the kernel
 * took the read for a stream and read as many pages again past the chain's end (COLD
 * WINDOWS in vfs_read_ahead.c). Counted with mincore over the pages after the chain, which
 * hold other messages, none of them read. */
static void test_cold_chain_no_overshoot(void)
{
    enum { ATT = 400000, AFTER = 120, LOOK = 128 };
    mv_store *s = NULL;
    uint32_t uid[PF_COUNT], att_uid = 0, filler = 0;
    CHECK_EQ_INT(pf_fill("overshoot", &s, uid), 0);
    size_t len = 0;
    char *m = pf_attachment_message(7000, ATT, &len);
    CHECK(m != NULL && len > ATT);
    CHECK_EQ_INT(mv_message_append(s, "INBOX", m, len, 0, NULL, 1700000000, &att_uid), MV_OK);
    for (unsigned i = 0; i < AFTER; i++) { /* pages after the chain, never read below */
        size_t flen = 0;
        char *f = pf_message(8000 + i, 30000, &flen);
        CHECK(f != NULL);
        CHECK_EQ_INT(mv_message_append(s, "INBOX", f, flen, 0, NULL, 1700000000, &filler), MV_OK);
        free(f);
    }
    sqlite3 *db = mv_store_db(s);
    CHECK_EQ_INT(tu_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"), 0);
    uint32_t page_size = (uint32_t)tu_int(db, "PRAGMA page_size");
    uint32_t chain_last = (uint32_t)tu_int(db, "SELECT max(pageno) FROM dbstat WHERE name = "
                                               "'attachments_data' AND pagetype = 'overflow'");
    uint32_t file_pages = (uint32_t)tu_int(db, "PRAGMA page_count");
    printf(
        "DEBUG att overflow min %lld max %lld count %lld leaf %lld; bodies max ovfl %lld\n",
        (long long)tu_int(
            db,
            "SELECT min(pageno) FROM dbstat WHERE name='attachments_data' AND pagetype='overflow'"),
        (long long)chain_last,
        (long long)tu_int(
            db,
            "SELECT count(*) FROM dbstat WHERE name='attachments_data' AND pagetype='overflow'"),
        (long long)tu_int(
            db, "SELECT max(pageno) FROM dbstat WHERE name='attachments_data' AND pagetype='leaf'"),
        (long long)tu_int(
            db, "SELECT max(pageno) FROM dbstat WHERE name='bodies_data' AND pagetype='overflow'"));
    CHECK(chain_last > 0 && chain_last + 8 + LOOK <= file_pages);
    uint32_t after[LOOK];
    for (uint32_t k = 0; k < LOOK; k++) {
        after[k] = chain_last + 8 + k; /* 8 pages of slack: the hint's count, the leaf's window */
    }
    /* a fresh connection, as a server's after a restart: SQLite's own cache, which holds the
     * pages just written and read by dbstat, would keep most of the chain from the file */
    mv_store_close(&s);
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path("root");
    o.kdf_iter = TU_KDF_ITER;
    o.cache_size_kib = 2048;
    char err[256] = "";
    CHECK_EQ_INT(
        mv_store_open("overshoot@example.org", PF_PW, strlen(PF_PW), &o, &s, err, sizeof err),
        MV_OK);
    if (s == NULL) {
        free(m);
        return;
    }
    db = mv_store_db(s);
    struct mv_mailbox_info info;
    CHECK_EQ_INT(mv_mailbox_status(s, "INBOX", &info), MV_OK);
    struct mv_message_key key = {0};
    mv_message_iter *it = NULL;
    struct mv_message_entry e;
    CHECK_EQ_INT(mv_message_list_begin(s, "INBOX", 0, 0, &it), MV_OK);
    while (mv_message_list_next(it, &e) == 1) {
        if (e.uid == att_uid) {
            key = (struct mv_message_key){.body_key = e.body_key,
                                          .size = e.size,
                                          .modseq = info.highestmodseq,
                                          .uidvalidity = info.uidvalidity};
        }
    }
    mv_message_list_end(&it);
    CHECK(key.body_key != 0);
    char *path = strdup(sqlite3_db_filename(db, "main"));
    CHECK(path != NULL);
    CHECK_EQ_INT(pf_child(path, 1, NULL, 0, page_size), 0);
    int before = pf_child(path, 0, after, LOOK, page_size);
    if (before > LOOK / 2) {
        printf("  # SKIP the page cache keeps this file's pages (tmpfs?): %d of %d resident "
               "after eviction\n",
               before, LOOK);
    } else {
        CHECK_EQ_INT(mv_message_prefetch_keyed(s, &key, 1), MV_OK);
        void *raw = NULL;
        size_t got = 0;
        CHECK_EQ_INT(mv_message_fetch(s, "INBOX", att_uid, &raw, &got), MV_OK);
        CHECK(raw != NULL && got == len && memcmp(raw, m, len) == 0);
        mv_free(raw);
        int resident = pf_child(path, 0, after, LOOK, page_size);
        printf("  # the %d pages from 8 past the attachment's chain: %d in the page cache "
               "before, %d after its message was read\n",
               LOOK, before, resident);
        /* a few may be the message's own rows' leaves and their windows, which can lie
         * there; the kernel's guess was the chain's length (92 pages) */
        CHECK(resident >= 0 && resident <= before + 16);
    }
    free(m);
    free(path);
    mv_store_close(&s);
}

int main(void)
{
    TEST(test_walk_finds_sqlites_leaves);
    TEST(test_nonsense_asks_for_nothing);
    TEST(test_pages_arrive);
    TEST(test_interior_kept);
    TEST(test_cold_chain_no_overshoot);
    return th_summary();
}
