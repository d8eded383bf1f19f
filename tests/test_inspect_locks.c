/*
 * test_inspect_locks.c -- keyless inspection must not cost an open store its SQLite locks.
 *
 * POSIX advisory locks belong to (process, inode): closing any descriptor of a file drops
 * every fcntl lock the process holds on it. SQLite keeps a SHARED lock on a WAL-mode
 * database for as long as a connection is open; another process that sees no SHARED lock
 * takes EXCLUSIVE on its last close, checkpoints and deletes the WAL and -shm under the open
 * connection. These tests open a store, run every keyless reader of the store file in the
 * same process, and have a forked child look for the lock with F_GETLK. And the registration
 * that comes before an open asks the kernel to read the file's ends ahead (store_files.c
 * READ-AHEAD), on the descriptor it reads the header with, before SQLite has the file.
 */
#include "mailvault.h"

#include "harness.h"
#include "store/store_files.h"
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TL_PASSWORD "inspect-locks"
/* SQLite's unix VFS: PENDING_BYTE 0x40000000, RESERVED +1, SHARED_FIRST +2, 510 bytes. */
#define TL_SHARED_FIRST (0x40000000 + 2)
#define TL_SHARED_SIZE  510

static struct mv_store_options tl_options(const char *root)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = tu_path(root);
    o.kdf_iter = TU_KDF_ITER;
    return o;
}

static int tl_open(const struct mv_store_options *o, const char *address, mv_store **s)
{
    char err[256] = "";
    int rc = mv_store_init(address, TL_PASSWORD, strlen(TL_PASSWORD), o, err, sizeof err);
    if (rc != MV_OK && rc != MV_EEXISTS) {
        fprintf(stderr, "init: %s\n", err);
        return rc;
    }
    rc = mv_store_open(address, TL_PASSWORD, strlen(TL_PASSWORD), o, s, err, sizeof err);
    if (rc != MV_OK) {
        fprintf(stderr, "open: %s\n", err);
    }
    return rc;
}

/* Whether another process sees this one's read lock on db_path's SHARED range: a child
 * asks F_GETLK for a write lock over it (the child's own open and close drop nothing of
 * ours: locks are per process). */
static int tl_parent_holds_shared(const char *db_path)
{
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        int fd = open(db_path, O_RDONLY | O_CLOEXEC);
        struct flock fl;
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = TL_SHARED_FIRST;
        fl.l_len = TL_SHARED_SIZE;
        int held =
            fd >= 0 && fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type == F_RDLCK && fl.l_pid == parent;
        _exit(held ? 0 : 1);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child) {
        return -1;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_file_inspect_keeps_lock(void)
{
    struct mv_store_options o = tl_options("inspect");
    mv_store *s = NULL;
    CHECK_EQ_INT(tl_open(&o, "alice@example.org", &s), MV_OK);
    char db_path[MV_PATH_MAX];
    snprintf(db_path, sizeof db_path, "%s/example.org/alice.db", o.root);
    CHECK_EQ_INT(tl_parent_holds_shared(db_path), 1); /* the probe sees a lock that is there */
    struct mv_store_file f;
    CHECK_EQ_INT(mv_store_file_inspect("alice@example.org", &o, &f), MV_OK);
    CHECK_EQ_INT(tl_parent_holds_shared(f.db_path), 1); /* after the first inspect too */
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(mv_store_file_inspect("alice@example.org", &o, &f), MV_OK);
        CHECK_EQ_INT(f.header_ok, 1);
    }
    CHECK_EQ_INT(tl_parent_holds_shared(f.db_path), 1);
    /* The handle still works, and its lock is still there after a statement. */
    struct mv_store_stats st;
    CHECK_EQ_INT(mv_store_stats(s, &st), MV_OK);
    CHECK_EQ_INT(tl_parent_holds_shared(f.db_path), 1);
    mv_store_close(&s);
    CHECK_EQ_INT(tl_parent_holds_shared(f.db_path), 0); /* the probe does see no lock */
}

static void test_root_scan_keeps_lock(void)
{
    struct mv_store_options o = tl_options("scan");
    mv_store *a = NULL, *b = NULL;
    CHECK_EQ_INT(tl_open(&o, "bob@a.example", &a), MV_OK);
    CHECK_EQ_INT(tl_open(&o, "carol@b.example", &b), MV_OK);
    char a_path[MV_PATH_MAX], b_path[MV_PATH_MAX];
    snprintf(a_path, sizeof a_path, "%s/a.example/bob.db", o.root);
    snprintf(b_path, sizeof b_path, "%s/b.example/carol.db", o.root);
    for (int round = 0; round < 3; round++) {
        mv_root_scan *scan = NULL;
        struct mv_store_file f;
        int seen = 0, rc;
        CHECK_EQ_INT(mv_root_scan_begin(&o, &scan), MV_OK);
        while ((rc = mv_root_scan_next(scan, &f)) == 1) {
            CHECK_EQ_INT(f.header_ok, 1);
            seen++;
        }
        mv_root_scan_end(&scan);
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(seen, 2);
    }
    CHECK_EQ_INT(tl_parent_holds_shared(a_path), 1);
    CHECK_EQ_INT(tl_parent_holds_shared(b_path), 1);
    mv_store_close(&a);
    mv_store_close(&b);
}

/* The description of an open store (from what the store layer knows) is the description
 * read from the file once the store is closed, field by field. */
static void test_open_and_closed_describe_alike(void)
{
    struct mv_store_options o = tl_options("alike");
    mv_store *s = NULL;
    CHECK_EQ_INT(tl_open(&o, "dave@example.org", &s), MV_OK);
    mv_store_close(&s);
    struct mv_store_file closed, open_rw, open_ro;
    CHECK_EQ_INT(mv_store_file_inspect("dave@example.org", &o, &closed), MV_OK);
    CHECK_EQ_INT(closed.header_ok, 1);
    CHECK(closed.page_size == 4096);

    /* Read-only: nothing writes, so the whole struct (WAL size aside) matches. */
    struct mv_store_options ro = o;
    ro.flags |= MV_STORE_READONLY;
    char err[256] = "";
    CHECK_EQ_INT(mv_store_open("dave@example.org", TL_PASSWORD, strlen(TL_PASSWORD), &ro, &s, err,
                               sizeof err),
                 MV_OK);
    CHECK_EQ_INT(mv_store_file_inspect("dave@example.org", &o, &open_ro), MV_OK);
    CHECK_EQ_INT(tl_parent_holds_shared(closed.db_path), 1);
    mv_store_close(&s);
    open_ro.wal_bytes = closed.wal_bytes;
    CHECK(memcmp(&open_ro, &closed, sizeof closed) == 0);

    CHECK_EQ_INT(tl_open(&o, "dave@example.org", &s), MV_OK);
    CHECK_EQ_INT(mv_store_file_inspect("dave@example.org", &o, &open_rw), MV_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(mv_store_file_inspect("dave@example.org", &o, &closed), MV_OK);
    CHECK_EQ_INT(open_rw.header_ok, closed.header_ok);
    CHECK_EQ_INT(open_rw.page_size, closed.page_size);
    CHECK_EQ_INT(open_rw.reserve_bytes, closed.reserve_bytes);
    CHECK_EQ_INT(open_rw.cipher, closed.cipher);
    CHECK_EQ_INT(open_rw.modes_ok, closed.modes_ok);
    CHECK(strcmp(open_rw.db_path, closed.db_path) == 0);
    CHECK(strcmp(open_rw.address, closed.address) == 0);
}

/* A keyless backup reads and locks the store file with descriptors of its own; in a process
 * that has the store open, their closes must not drop the handle's locks (on the file, and
 * the DMS lock on its -shm that tells a newcomer the WAL index is in use). */
static int tl_parent_holds_dms(const char *db_path)
{
    char shm[MV_PATH_MAX + 8];
    snprintf(shm, sizeof shm, "%s-shm", db_path);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        int fd = open(shm, O_RDONLY | O_CLOEXEC);
        struct flock fl;
        memset(&fl, 0, sizeof fl);
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        fl.l_start = 128; /* unix VFS: UNIX_SHM_DMS, held shared while the shm is mapped */
        fl.l_len = 1;
        int held =
            fd >= 0 && fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type == F_RDLCK && fl.l_pid == parent;
        _exit(held ? 0 : 1);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child) {
        return -1;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_keyless_backup_keeps_lock(void)
{
    struct mv_store_options o = tl_options("keyless");
    mv_store *s = NULL;
    CHECK_EQ_INT(tl_open(&o, "erin@example.org", &s), MV_OK);
    char db_path[MV_PATH_MAX];
    snprintf(db_path, sizeof db_path, "%s/example.org/erin.db", o.root);
    struct mv_store_stats st;
    CHECK_EQ_INT(mv_store_stats(s, &st), MV_OK);
    CHECK_EQ_INT(tl_parent_holds_shared(db_path), 1);
    CHECK_EQ_INT(tl_parent_holds_dms(db_path), 1);
    for (int i = 0; i < 2; i++) {
        struct mv_backup_info info;
        char err[512] = "";
        int rc = mv_backup_write_keyless("erin@example.org", &o, tu_path("keyless-out"), NULL,
                                         &info, err, sizeof err);
        if (rc != MV_OK) {
            fprintf(stderr, "  keyless: %s\n", err);
        }
        CHECK_EQ_INT(rc, MV_OK);
        CHECK_EQ_INT(tl_parent_holds_shared(db_path), 1);
        CHECK_EQ_INT(tl_parent_holds_dms(db_path), 1);
    }
    CHECK_EQ_INT(mv_store_stats(s, &st), MV_OK);
    mv_store_close(&s);
    CHECK_EQ_INT(tl_parent_holds_shared(db_path), 0);
}

/* A store being created has no header when it is registered: the registry then takes it
 * from the connection (store_files_learn), and that must be the bytes the file gets, for
 * each cipher. */
static void test_learned_header_is_the_file_header(void)
{
    static const mv_cipher ciphers[] = {MV_CIPHER_CHACHA20, MV_CIPHER_SQLCIPHER,
                                        MV_CIPHER_AES256CBC};
    for (size_t i = 0; i < sizeof ciphers / sizeof ciphers[0]; i++) {
        char path[MV_PATH_MAX];
        snprintf(path, sizeof path, "%s/learn-%zu.db", th_tmpdir(), i);
        CHECK(tu_write_file(path, "", 0) == 0);
        int owner = 0;
        CHECK_EQ_INT(store_files_register(&owner, path), MV_OK);
        sqlite3 *db = NULL;
        CHECK_EQ_INT(tu_open(path, TL_PASSWORD, ciphers[i], MV_DB_CREATE, &db), MV_OK);
        CHECK_EQ_INT(tu_exec(db, "PRAGMA journal_mode=WAL"), SQLITE_OK);
        CHECK_EQ_INT(tu_exec(db, "CREATE TABLE t(x)"), SQLITE_OK);
        store_files_learn(&owner, db);
        struct stat st;
        CHECK(stat(path, &st) == 0);
        uint8_t learned[STORE_FILES_HEADER_BYTES];
        size_t got = 0;
        CHECK_EQ_INT(store_files_header_read(path, &st, learned, sizeof learned, &got), MV_OK);
        CHECK_EQ_INT(got, sizeof learned);
        CHECK_EQ_INT(tl_parent_holds_shared(path), 1); /* answered without touching the file */
        CHECK_EQ_INT(sqlite3_close(db), SQLITE_OK);
        store_files_unregister(&owner);
        size_t len = 0;
        uint8_t *file = tu_read_file(path, &len);
        CHECK(file != NULL && len >= sizeof learned);
        int same = memcmp(file + 16, learned + 16, 8) == 0;
        free(file);
        CHECK(same);
    }
}

/* Threads of one process: one opens and closes the store, one inspects it, one takes
 * keyless backups, all at once; every handle must hold its lock the whole time it is open. */
struct tl_race {
    struct mv_store_options o;
    atomic_int stop;
    atomic_int failures;
};

static void *tl_race_inspect(void *arg)
{
    struct tl_race *r = arg;
    while (!atomic_load(&r->stop)) {
        struct mv_store_file f;
        if (mv_store_file_inspect("race@example.org", &r->o, &f) != MV_OK || !f.header_ok) {
            atomic_fetch_add(&r->failures, 1);
        }
    }
    return NULL;
}

static void *tl_race_backup(void *arg)
{
    struct tl_race *r = arg;
    for (int i = 0; i < 3 && !atomic_load(&r->stop); i++) {
        char err[512] = "";
        struct mv_backup_info info;
        if (mv_backup_write_keyless("race@example.org", &r->o, tu_path("race-out"), NULL, &info,
                                    err, sizeof err) != MV_OK) {
            fprintf(stderr, "  keyless: %s\n", err);
            atomic_fetch_add(&r->failures, 1);
        }
    }
    return NULL;
}

static void test_threads_race(void)
{
    struct tl_race r;
    memset(&r, 0, sizeof r);
    r.o = tl_options("race");
    mv_store *s = NULL;
    CHECK_EQ_INT(tl_open(&r.o, "race@example.org", &s), MV_OK);
    mv_store_close(&s);
    char db_path[MV_PATH_MAX];
    snprintf(db_path, sizeof db_path, "%s/example.org/race.db", r.o.root);
    atomic_init(&r.stop, 0);
    atomic_init(&r.failures, 0);
    pthread_t inspector, backup;
    CHECK_EQ_INT(pthread_create(&inspector, NULL, tl_race_inspect, &r), 0);
    CHECK_EQ_INT(pthread_create(&backup, NULL, tl_race_backup, &r), 0);
    int held = 0, opens = 0;
    for (int i = 0; i < 8; i++) {
        if (tl_open(&r.o, "race@example.org", &s) != MV_OK) {
            continue;
        }
        opens++;
        struct mv_store_stats st;
        held += mv_store_stats(s, &st) == MV_OK && tl_parent_holds_shared(db_path) == 1;
        mv_store_close(&s);
    }
    atomic_store(&r.stop, 1);
    pthread_join(inspector, NULL);
    pthread_join(backup, NULL);
    CHECK_EQ_INT(opens, 8);
    CHECK_EQ_INT(held, 8);
    CHECK_EQ_INT(atomic_load(&r.failures), 0);
}

/* ---- read-ahead before an open (store_files.c READ-AHEAD) ---- */
#define TL_RA_BYTES     (4LL * 1024 * 1024)   /* a file far larger than both ends read ahead */
#define TL_RA_BYTES_MAX (256LL * 1024 * 1024) /* beyond: not tested (a device reads that far) */

/* The largest read-ahead of the machine's block devices (/sys/block/NAME/queue/read_ahead_kb),
 * in bytes; 0 if none can be read. The kernel reads that far around a read of the file's
 * header, so the file must be larger than both ends and twice that for a middle page to stay
 * out (a device with 8 MiB of read-ahead read the middle of a 4 MiB file). */
static long long tl_read_ahead_max(void)
{
    long long most = 0;
    DIR *d = opendir("/sys/block");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[512];
        snprintf(path, sizeof path, "/sys/block/%s/queue/read_ahead_kb", e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
        long long kb = 0;
        if (f != NULL && fscanf(f, "%lld", &kb) == 1 && kb * 1024 > most) {
            most = kb * 1024;
        }
        if (f != NULL) {
            fclose(f);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return most;
}

/* Whether the page at offset of fd's file is in the page cache (mincore of a mapping). */
static int tl_resident(int fd, off_t offset)
{
    long page = sysconf(_SC_PAGESIZE);
    void *map = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, offset - offset % page);
    if (map == MAP_FAILED) {
        return -1;
    }
    unsigned char vec = 0;
    int rc = mincore(map, (size_t)page, &vec);
    munmap(map, (size_t)page);
    return rc == 0 ? (vec & 1) : -1;
}

/* Registering a store file for an open (before SQLite reads it and before the KDF, ~11 ms)
 * asks the kernel to read its first and last 256 KiB (posix_fadvise WILLNEED: a cold first
 * LOGIN + SELECT read its ~10 pages from the disk one by one after the KDF); nothing else. A
 * file of 4 MiB, or of four times the largest read-ahead of the machine's devices and 1 MiB
 * (so the device's own read-ahead never reaches its middle), is written, synced and dropped
 * from the page cache; after the registration its
 * first and last pages come in (polled with a deadline; the old registration read only its
 * first 24 bytes: the last page never came) and a page in the middle does not. A file system
 * that keeps the file in memory whatever it is told (tmpfs) cannot show it: said, not failed. */
static void test_register_reads_ahead(void)
{
    static unsigned char chunk[65536];
    long long size = 4 * tl_read_ahead_max() + 1024LL * 1024;
    size = size < TL_RA_BYTES ? TL_RA_BYTES : size;
    size += (long long)sizeof chunk - size % (long long)sizeof chunk;
    if (size > TL_RA_BYTES_MAX) {
        fprintf(stderr, "  a device reads %lld bytes ahead: not observable\n", tl_read_ahead_max());
        return;
    }
    char path[MV_PATH_MAX];
    snprintf(path, sizeof path, "%s", tu_path("readahead.db"));
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    if (fd < 0) {
        return;
    }
    for (size_t i = 0; i < sizeof chunk; i++) {
        chunk[i] = (unsigned char)(i * 7 + 1);
    }
    for (long long i = 0; i < size / (long long)sizeof chunk; i++) {
        CHECK_EQ_INT(write(fd, chunk, sizeof chunk), (int)sizeof chunk);
    }
    CHECK_EQ_INT(fsync(fd), 0);
    CHECK_EQ_INT(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    off_t last = (off_t)size - 4096, middle = (off_t)(size / 2);
    if (tl_resident(fd, last) != 0 || tl_resident(fd, middle) != 0) {
        fprintf(stderr, "  the file stays in memory here (tmpfs?): read-ahead not observable\n");
        close(fd);
        return;
    }
    static int owner;
    CHECK_EQ_INT(store_files_register(&owner, path), MV_OK);
    int first = 0, tail = 0;
    for (int i = 0; i < 3000 && !(first == 1 && tail == 1); i++) {
        struct timespec pause = {0, 10000000L}; /* polled; 30 s at most (a loaded disk) */
        nanosleep(&pause, NULL);
        first = tl_resident(fd, 0);
        tail = tl_resident(fd, last);
    }
    CHECK_EQ_INT(first, 1);
    CHECK_EQ_INT(tail, 1);
    CHECK_EQ_INT(tl_resident(fd, middle), 0); /* the ends only */
    store_files_unregister(&owner);
    close(fd);
}

int main(void)
{
    TEST(test_file_inspect_keeps_lock);
    TEST(test_root_scan_keeps_lock);
    TEST(test_open_and_closed_describe_alike);
    TEST(test_keyless_backup_keeps_lock);
    TEST(test_learned_header_is_the_file_header);
    TEST(test_threads_race);
    TEST(test_register_reads_ahead);
    return th_summary();
}
