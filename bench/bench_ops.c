/*
 * bench_ops.c -- the operator's commands on a large store: backup (with the password, and
 * keyless), verification, restore, VACUUM, password change, and `stats --all` over many
 * stores. The figures issue 4 asks for: backup and restore MB/s, VACUUM time and peak memory
 * on a 1 GB store (temp files on disk, in the store's tmp/), password change time for a
 * 1 GB store, and the keyless scan of 1,000 stores.
 *
 * USAGE
 *   build/rel/bench/bench_ops [--quick] [--mb N] [--stores N] [--dir DIR] [--json PATH]
 *     --quick      a 64 MB store and 200 small stores (well under a minute)
 *     --mb N       size of the large store's file in MB (default 1024)
 *     --stores N   stores for the keyless scan (default 1000)
 *     --dir DIR    parent of the scratch directory (default $TMPDIR, else ./var/bench);
 *                  it needs about 4 x --mb free (store, two backups, restore copy)
 *     --json PATH  where the figures go (default build/bench-results/ops.json)
 *
 * WHAT IS MEASURED (one "ops.<name> <value> <unit>" line each)
 *   build        the large store, filled through mv_message_append with ~1 MiB messages
 *                (a text part and a base64 attachment of pseudo-random bytes, distinct per
 *                message, so neither deduplication nor zstd shrinks it much) until the
 *                database file reaches --mb; not timed as a figure, only reported.
 *   backup       mv_backup_write: VACUUM INTO a keyed copy, fsync, reopen with the password,
 *                quick_check, SHA-256, manifest. MB/s = store file bytes / wall time.
 *   backup_keyless  mv_backup_write_keyless: the ciphertext copied under SQLite's locks.
 *   verify       mv_backup_verify of the keyed backup (SHA-256, key, quick_check).
 *   restore      mv_backup_restore of the keyed backup over the store (verify, copy,
 *                verify the copy, swap).
 *   vacuum       mv_store_maintain with MV_MAINTAIN_FORCE_VACUUM on the restored store.
 *   passwd       mv_store_passwd: rekeyed copy, verification, swap (two KDF runs included).
 *   stats_all    mv_root_scan over --stores stores plus the Prometheus text of them all
 *                (what `mailvault stats --all --prometheus` does), median of 5 runs.
 *   Each timed phase also reports its peak memory: the process's VmHWM after the phase less
 *   its VmRSS before it, with the heap trimmed (malloc_trim) and the high-water mark reset
 *   first (/proc/self/clear_refs).
 *
 * IMPLEMENTATION NOTES
 *   Only the public API (mailvault.h) and libc. The small stores for stats_all are created
 *   with 1,000 KDF iterations (the scan never derives a key, so it does not matter); the
 *   large store uses the default KDF, so passwd pays the real key derivations.
 *
 * LIMITATIONS
 *   One run per phase on a shared machine: the figures are indicative, not medians (each
 *   phase moves a gigabyte; repeating them would take many minutes).
 */
#include "mailvault.h"
#include "scratch.h"
#include "util.h"

#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OPS_MB_MAX           65536L
#define OPS_STORES_MAX       100000L
#define OPS_PATH_BYTES       4096
#define OPS_DIR_BYTES        1024
#define OPS_FIGURES_MAX      48
#define OPS_ATTACH_RAW_BYTES (768u * 1024u) /* base64: ~1 MiB per message */
#define OPS_STATS_RUNS       5
#define OPS_SMALL_KDF_ITER   1000u
#define OPS_MIB              1048576.0

int main(int argc, char **argv);

static const char ops_password[] = "bench password";
static const char ops_new_password[] = "bench password, changed";
static const char ops_user[] = "ops@example.org";

struct ops_figure {
    char name[64];
    double value;
    const char *unit;
};

static struct ops_figure ops_figures[OPS_FIGURES_MAX];
static int ops_figure_count;
static char ops_dir[OPS_DIR_BYTES]; /* short enough that every path built from it fits */
static char ops_root[OPS_DIR_BYTES + 8];

static void ops_report(const char *name, double value, const char *unit)
{
    if (ops_figure_count == OPS_FIGURES_MAX) {
        bench_die("too many figures (OPS_FIGURES_MAX)");
    }
    struct ops_figure *f = &ops_figures[ops_figure_count++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->value = value;
    f->unit = unit;
    printf("ops.%s %.2f %s\n", name, value, unit);
    fflush(stdout);
}

/* ---- memory: the high-water mark of one phase -------------------------------------------- */

/* A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); 0 if unreadable. */
static double ops_status_kib(const char *field)
{
    long kib = bench_status_kib(field);
    return kib > 0 ? (double)kib : 0;
}

/* Returns the heap's free memory to the system (so that a phase reusing what an earlier one
 * freed still shows up as growth), resets the high-water mark to the current RSS (Linux >=
 * 4.0) and returns the RSS. */
static double ops_memory_begin(void)
{
    malloc_trim(0);
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "5", 1) != 1) {
            fprintf(stderr, "bench_ops: cannot reset VmHWM: peaks include earlier phases\n");
        }
        close(fd);
    }
    return ops_status_kib("VmRSS");
}

static void ops_memory_end(const char *name, double rss_before_kib)
{
    char figure[64];
    snprintf(figure, sizeof figure, "%s.peak_mib", name);
    ops_report(figure, (ops_status_kib("VmHWM") - rss_before_kib) / 1024.0, "MiB");
}

/* ---- the large store ----------------------------------------------------------------------- */

static struct mv_store_options ops_store_options(uint32_t kdf_iter)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = ops_root;
    o.kdf_iter = kdf_iter;
    return o;
}

static void ops_check(int rc, const char *what, const char *detail)
{
    if (rc != MV_OK) {
        bench_die("%s: %s: %s", what, mv_strerror(rc), detail != NULL ? detail : "");
    }
}

static uint64_t ops_file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* One ~1 MiB message into buf (capacity checked by the caller): headers, a text part and a
 * base64 attachment of pseudo-random bytes. Returns its length. */
static size_t ops_message(char *buf, size_t capacity, uint32_t index)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int head = snprintf(buf, capacity,
                        "From: Sender %u <sender%u@example.net>\r\n"
                        "To: Ops <ops@example.org>\r\n"
                        "Subject: Quarterly figures, part %u\r\n"
                        "Date: Mon, 2 Nov 2026 10:%02u:00 +0000\r\n"
                        "Message-ID: <ops-%u@example.net>\r\n"
                        "MIME-Version: 1.0\r\n"
                        "Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n"
                        "--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
                        "Please find the figures of part %u attached.\r\n\r\n"
                        "--b\r\nContent-Type: application/octet-stream; name=\"part%u.bin\"\r\n"
                        "Content-Transfer-Encoding: base64\r\n\r\n",
                        index % 97, index % 97, index, index % 60, index, index, index);
    if (head < 0 || (size_t)head >= capacity) {
        bench_die("message buffer too small");
    }
    size_t len = (size_t)head;
    /* xorshift64*: rand() is banned, and every message gets its own distinct bytes. */
    struct bench_rng rng = {0x9e3779b97f4a7c15ull ^ ((uint64_t)index * 0x100000001b3ull)};
    size_t column = 0;
    for (size_t i = 0; i < OPS_ATTACH_RAW_BYTES / 3; i++) {
        uint64_t r = bench_rng_next(&rng);
        for (int k = 0; k < 4; k++) {
            buf[len++] = b64[(r >> (6 * k)) & 63u];
        }
        column += 4;
        if (column == 76) {
            buf[len++] = '\r';
            buf[len++] = '\n';
            column = 0;
        }
    }
    static const char tail[] = "\r\n--b--\r\n";
    memcpy(buf + len, tail, sizeof tail - 1);
    return len + sizeof tail - 1;
}

static void ops_build_store(const char *db_path, uint64_t target_bytes)
{
    struct mv_store_options o = ops_store_options(0);
    char err[512] = "";
    o.flags = MV_STORE_CREATE;
    ops_check(mv_store_init(ops_user, ops_password, strlen(ops_password), &o, err, sizeof err),
              "init", err);
    mv_store *s = NULL;
    o.flags = 0;
    ops_check(mv_store_open(ops_user, ops_password, strlen(ops_password), &o, &s, err, sizeof err),
              "open", err);
    size_t capacity = (size_t)OPS_ATTACH_RAW_BYTES * 2;
    char *buf = malloc(capacity);
    if (buf == NULL) {
        bench_die("out of memory");
    }
    double t0 = bench_now_s();
    uint32_t count = 0;
    uint64_t logical = 0;
    char wal_path[OPS_PATH_BYTES + 8];
    snprintf(wal_path, sizeof wal_path, "%s-wal", db_path);
    while (ops_file_bytes(db_path) + ops_file_bytes(wal_path) < target_bytes) {
        size_t len = ops_message(buf, capacity, count);
        ops_check(mv_message_append(s, "INBOX", buf, len, 0, NULL, 0, NULL), "append",
                  mv_store_errmsg(s));
        logical += len;
        count++;
    }
    free(buf);
    mv_store_close(&s);
    double seconds = bench_now_s() - t0;
    ops_report("build.messages", count, "msgs");
    ops_report("build.logical_mb", (double)logical / 1e6, "MB");
    ops_report("build.file_mb", (double)ops_file_bytes(db_path) / 1e6, "MB");
    ops_report("build.mb_per_s", (double)logical / 1e6 / seconds, "MB/s");
}

/* ---- the timed phases ------------------------------------------------------------------------ */

static void ops_report_rate(const char *name, double seconds, uint64_t bytes)
{
    char figure[64];
    snprintf(figure, sizeof figure, "%s.seconds", name);
    ops_report(figure, seconds, "s");
    snprintf(figure, sizeof figure, "%s.mb_per_s", name);
    ops_report(figure, (double)bytes / 1e6 / seconds, "MB/s");
}

static void ops_phase_backups(const char *db_path, char *backup_path, size_t backup_size)
{
    struct mv_store_options o = ops_store_options(0);
    struct mv_ops_options oo = MV_OPS_OPTIONS_INIT;
    struct mv_backup_info info;
    char err[512] = "", dest[OPS_PATH_BYTES];
    snprintf(dest, sizeof dest, "%s/backups", ops_dir);
    uint64_t bytes = ops_file_bytes(db_path);

    double rss = ops_memory_begin();
    double t0 = bench_now_s();
    ops_check(mv_backup_write(ops_user, ops_password, strlen(ops_password), &o, dest, &oo, &info,
                              err, sizeof err),
              "backup", err);
    ops_report_rate("backup", bench_now_s() - t0, bytes);
    ops_memory_end("backup", rss);
    snprintf(backup_path, backup_size, "%s", info.path);

    snprintf(dest, sizeof dest, "%s/backups-keyless", ops_dir);
    rss = ops_memory_begin();
    t0 = bench_now_s();
    ops_check(mv_backup_write_keyless(ops_user, &o, dest, &oo, &info, err, sizeof err),
              "keyless backup", err);
    ops_report_rate("backup_keyless", bench_now_s() - t0, bytes);
    ops_memory_end("backup_keyless", rss);
    bench_scratch_remove_tree(dest);

    rss = ops_memory_begin();
    t0 = bench_now_s();
    ops_check(mv_backup_verify(backup_path, ops_password, strlen(ops_password), &o, &info, err,
                               sizeof err),
              "verify", err);
    ops_report_rate("verify", bench_now_s() - t0, info.size_bytes);
    ops_memory_end("verify", rss);

    rss = ops_memory_begin();
    t0 = bench_now_s();
    ops_check(mv_backup_restore(ops_user, ops_password, strlen(ops_password), &o, backup_path, &oo,
                                err, sizeof err),
              "restore", err);
    ops_report_rate("restore", bench_now_s() - t0, info.size_bytes);
    ops_memory_end("restore", rss);
    snprintf(dest, sizeof dest, "%s/backups", ops_dir);
    bench_scratch_remove_tree(dest);
}

static void ops_phase_vacuum(const char *db_path)
{
    struct mv_store_options o = ops_store_options(0);
    mv_store *s = NULL;
    char err[512] = "";
    ops_check(mv_store_open(ops_user, ops_password, strlen(ops_password), &o, &s, err, sizeof err),
              "open", err);
    struct mv_maintain_options mo = MV_MAINTAIN_OPTIONS_INIT;
    struct mv_maintain_report report;
    mo.flags = MV_MAINTAIN_FORCE_VACUUM;
    uint64_t bytes = ops_file_bytes(db_path);
    double rss = ops_memory_begin();
    double t0 = bench_now_s();
    int rc = mv_store_maintain(s, &mo, &report);
    double seconds = bench_now_s() - t0;
    ops_check(rc, "maintain", mv_store_errmsg(s));
    if (report.vacuum != MV_VACUUM_DONE) {
        bench_die("maintain did not VACUUM (vacuum=%d)", report.vacuum);
    }
    ops_report_rate("vacuum", seconds, bytes);
    ops_memory_end("vacuum", rss);
    mv_store_close(&s);
}

static void ops_phase_passwd(const char *db_path)
{
    struct mv_store_options o = ops_store_options(0);
    struct mv_ops_options oo = MV_OPS_OPTIONS_INIT;
    char err[512] = "";
    uint64_t bytes = ops_file_bytes(db_path);
    double rss = ops_memory_begin();
    double t0 = bench_now_s();
    ops_check(mv_store_passwd(ops_user, ops_password, strlen(ops_password), ops_new_password,
                              strlen(ops_new_password), &o, &oo, err, sizeof err),
              "passwd", err);
    ops_report_rate("passwd", bench_now_s() - t0, bytes);
    ops_memory_end("passwd", rss);
    mv_store *s = NULL; /* the new password opens it */
    ops_check(mv_store_open(ops_user, ops_new_password, strlen(ops_new_password), &o, &s, err,
                            sizeof err),
              "open after passwd", err);
    mv_store_close(&s);
}

static void ops_phase_stats_all(long stores)
{
    struct mv_store_options o = ops_store_options(OPS_SMALL_KDF_ITER);
    char err[512] = "", address[64];
    double t0 = bench_now_s();
    for (long i = 0; i < stores; i++) {
        snprintf(address, sizeof address, "user%ld@d%ld.example", i, i % 10);
        ops_check(mv_store_init(address, ops_password, strlen(ops_password), &o, err, sizeof err),
                  "init small store", err);
    }
    ops_report("stats_all.setup_seconds", bench_now_s() - t0, "s");
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull < 0) {
        bench_die("cannot open /dev/null");
    }
    double runs[OPS_STATS_RUNS];
    long seen = 0;
    for (int r = 0; r < OPS_STATS_RUNS; r++) {
        double start = bench_now_s();
        mv_root_scan *scan = NULL;
        mv_prometheus *p = NULL;
        ops_check(mv_root_scan_begin(&o, &scan), "root scan", NULL);
        ops_check(mv_prometheus_begin(0, &p), "prometheus", NULL);
        struct mv_store_file file;
        int rc;
        seen = 0;
        while ((rc = mv_root_scan_next(scan, &file)) == 1) {
            ops_check(mv_prometheus_add(p, &file, NULL), "prometheus add", NULL);
            seen++;
        }
        ops_check(rc, "root scan next", NULL);
        ops_check(mv_prometheus_write(p, devnull), "prometheus write", NULL);
        mv_prometheus_end(&p);
        mv_root_scan_end(&scan);
        runs[r] = bench_now_s() - start;
    }
    close(devnull);
    if (seen != stores + 1) { /* the small stores and the large one */
        bench_die("the scan saw %ld stores, expected %ld", seen, stores + 1);
    }
    struct bench_stat st = bench_stat_of(runs, OPS_STATS_RUNS);
    ops_report("stats_all.stores", (double)seen, "stores");
    ops_report("stats_all.ms", st.median * 1000.0, "ms");
    ops_report("stats_all.min_ms", st.min * 1000.0, "ms");
    ops_report("stats_all.max_ms", st.max * 1000.0, "ms");
}

/* ---- output ---------------------------------------------------------------------------------- */

static void ops_write_json(const char *path, long mb, long stores, int quick, double seconds)
{
    char dir[OPS_PATH_BYTES];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = '\0';
        mkdir(dir, 0755); /* build/bench-results: an existing one is fine */
    }
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        bench_die("cannot write %s", path);
    }
    fprintf(f, "{\n  \"benchmark\": \"ops\",\n  \"quick\": %s,\n  \"store_mb\": %ld,\n",
            quick ? "true" : "false", mb);
    fprintf(f, "  \"stores\": %ld,\n  \"seconds\": %.1f,\n  \"figures\": {\n", stores, seconds);
    for (int i = 0; i < ops_figure_count; i++) {
        fprintf(f, "    \"%s\": {\"value\": %.3f, \"unit\": \"%s\"}%s\n", ops_figures[i].name,
                ops_figures[i].value, ops_figures[i].unit, i + 1 < ops_figure_count ? "," : "");
    }
    fputs("  }\n}\n", f);
    if (fclose(f) != 0) {
        bench_die("cannot write %s", path);
    }
}

static long ops_number(const char *text, long max, const char *option)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < 1 || v > max) {
        bench_die("%s takes a number from 1 to %ld", option, max);
    }
    return v;
}

int main(int argc, char **argv)
{
    long mb = 1024, stores = 1000;
    int quick = 0;
    const char *parent = NULL, *json = "build/bench-results/ops.json";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
            mb = 64;
            stores = 200;
        } else if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc) {
            mb = ops_number(argv[++i], OPS_MB_MAX, "--mb");
        } else if (strcmp(argv[i], "--stores") == 0 && i + 1 < argc) {
            stores = ops_number(argv[++i], OPS_STORES_MAX, "--stores");
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            parent = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_ops [--quick] [--mb N] [--stores N] [--dir DIR] "
                            "[--json PATH]\n");
            return 2;
        }
    }
    if (bench_scratch_make(parent, "bench-ops", ops_dir, sizeof ops_dir) != 0) {
        return 1;
    }
    snprintf(ops_root, sizeof ops_root, "%s/root", ops_dir);
    char db_path[OPS_PATH_BYTES], backup_path[OPS_PATH_BYTES];
    snprintf(db_path, sizeof db_path, "%s/example.org/ops.db", ops_root);
    printf("ops.params mb=%ld stores=%ld quick=%d\n", mb, stores, quick);

    double t0 = bench_now_s();
    ops_build_store(db_path, (uint64_t)mb * 1000000u);
    ops_phase_backups(db_path, backup_path, sizeof backup_path);
    ops_phase_vacuum(db_path);
    ops_phase_passwd(db_path);
    ops_phase_stats_all(stores);
    double seconds = bench_now_s() - t0;
    printf("ops.total_seconds %.1f s\n", seconds);
    ops_write_json(json, mb, stores, quick, seconds);
    return 0;
}
