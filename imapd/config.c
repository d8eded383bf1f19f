/*
 * config.c -- mailvaultd's settings: one table of keys with their defaults and ranges, read
 * from a config file ("key = value", '#' comments) and overridden by --key=value options.
 */
#include "config.h"
#include "log.h"
#include "mailvault.h"
#include "metrics.h"
#include "proxy.h"
#include "quota.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum config_kind { CK_STRING, CK_INT, CK_SIZE, CK_BOOL };

struct config_key {
    const char *name;
    enum config_kind kind;
    size_t offset;
    size_t size; /* strings: buffer size */
    long long min;
    long long max;
    const char *help;
};

#define CS(field, help)                                                                            \
    {                                                                                              \
#field, CK_STRING, offsetof(struct config, field), sizeof(((struct config *)0)->field), 0, \
            0, help                                                                                \
    }
#define CI(field, lo, hi, help)                                                                    \
    {                                                                                              \
#field, CK_INT, offsetof(struct config, field), sizeof(int), lo, hi, help                  \
    }

static const struct config_key config_keys[] = {
    CS(listen, "address to listen on (default 127.0.0.1)"),
    CI(imap_port, -1, 65535, "IMAP port, STARTTLS (default 143; -1 off; 0 any free port)"),
    CI(imaps_port, -1, 65535, "IMAP over implicit TLS (default -1: off; 993 usual)"),
    CI(lmtp_port, -1, 65535, "LMTP port (default 24; -1 off)"),
    CS(root, "store root (default $MAILVAULT_ROOT, else ./var/mail)"),
    CS(tls_cert, "TLS certificate chain, PEM (default none: no STARTTLS, no imaps)"),
    CS(tls_key, "TLS private key, PEM"),
    CS(ports_file, "write the ports actually bound here (for port 0), default none"),
    CS(log, "stderr or syslog (default stderr)"),
    CS(log_level, "least severe level logged: error, warning, info, debug (default info)"),
    CS(metrics_listen, "ADDRESS:PORT for Prometheus metrics at /metrics (default none: off)"),
    CS(control_socket,
       "Unix socket for `mailvault who|kick|release|adopt` (default ROOT/.mailvaultd.sock; "
       "off or none: no socket)"),
    CI(workers, 1, 64, "worker threads (default 4 per online CPU, at most 64)"),
    CI(writers_per_worker,
       1,
       16,
       "writer threads per worker: jobs of different users run at once, one at a time per "
       "user (default 1)"),
    CI(background_nice,
       0,
       19,
       "the work between jobs (purge, checkpoints) this much nicer than the jobs, if the "
       "process may go back (CAP_SYS_NICE or RLIMIT_NICE; default 10; 0 off)"),
    CI(index_later,
       0,
       1,
       "new mail's full-text rows built between commands in batches, not inside each APPEND "
       "or LMTP delivery (default 1; 0: inside)"),
    CI(sync_apart,
       0,
       1,
       "the fsync that makes an APPEND or LMTP delivery durable waits on a sync thread (one "
       "per worker), so the worker goes on with other users' commands (default 0: on the "
       "worker)"),
    CI(stores_per_worker, 1, 100000, "open stores each worker keeps (default 32)"),
    CI(store_idle_s, 1, 86400, "close an unused store after this long (default 300)"),
    CI(structure_cache_kib,
       0,
       16 << 20,
       "KiB of FETCH BODYSTRUCTURE / BODY answers kept for open stores, all together "
       "(default 32768; 0 off)"),
    CI(sort_keys_kib,
       0,
       16 << 20,
       "KiB of SORT keys kept for open stores' last sorted mailboxes, all together "
       "(default 65536; 0 off: each SORT reads its keys)"),
    {"line_max", CK_SIZE, offsetof(struct config, line_max), sizeof(size_t), 1024, 1 << 24,
     "longest command line in bytes (default 1048576)"},
    {"literal_max", CK_SIZE, offsetof(struct config, literal_max), sizeof(uint64_t), 1024,
     1LL << 32, "largest APPEND literal / LMTP message in bytes (default 67108864)"},
    CI(connections_max, 1, 1000000, "connections in total (default 1000)"),
    CI(connections_per_address_max, 1, 1000000, "connections from one address (default 20)"),
    CI(user_sessions_max,
       1,
       100000,
       "IMAP sessions logged in as one user at once, from any address (default 50)"),
    CI(idle_timeout_s, 1, 86400, "close an idle session after this long (default 1800)"),
    CI(auth_fail_delay_ms, 0, 60000, "delay before a failed login's answer (default 2000)"),
    CI(auth_fail_delay_max_ms,
       0,
       25000,
       "... doubled per recent failure up to this (default 5000; under proxy timeouts)"),
    CS(trusted_networks,
       "proxies that may pass the client's address (IMAP ID, LMTP XCLIENT): CIDR list, e.g. "
       "10.0.0.0/8, ::1 (default none)"),
    {"allow_plaintext", CK_BOOL, offsetof(struct config, allow_plaintext), sizeof(int), 0, 1,
     "allow LOGIN without TLS from other hosts than loopback (default no)"},
    {"kdf_iter", CK_SIZE, offsetof(struct config, kdf_iter), sizeof(uint32_t), 0, MV_KDF_ITER_MAX,
     "KDF iterations of the stores (default 0: the cipher's; tests only; also "
     "$MAILVAULT_KDF_ITER)"},
    CI(lmtp_recipients_max,
       1,
       100000,
       "distinct recipients of one LMTP transaction (default 100; RCPTs: 10x)"),
    {"prelogin_bytes_max", CK_SIZE, offsetof(struct config, prelogin_bytes_max), sizeof(size_t),
     1024, 1 << 24, "largest command and input held before login, bytes (default 65536)"},
    CI(login_timeout_s, 1, 86400, "close a connection not logged in after this long (default 60)"),
    {"literal_total_max", CK_SIZE, offsetof(struct config, literal_total_max), sizeof(uint64_t),
     1024, 1LL << 40,
     "IMAP literal bytes and line bytes past 64 KiB being received, all connections "
     "(default 536870912)"},
    CI(lmtp_connections_max, 1, 1000000, "LMTP connections, apart from IMAP's (default 100)"),
    CI(lmtp_transaction_timeout_s,
       1,
       86400,
       "one LMTP transaction, MAIL to the replies after DATA (default 600)"),
    CI(lmtp_rejected_recipients_max,
       1,
       100000,
       "refused RCPTs per LMTP transaction, then 452 (default 20)"),
    {"lmtp_data_total_max", CK_SIZE, offsetof(struct config, lmtp_data_total_max), sizeof(uint64_t),
     1024, 1LL << 40, "LMTP message bytes held, all connections (default 268435456)"},
    {"quota_kib", CK_SIZE, offsetof(struct config, quota_kib), sizeof(uint64_t), 0,
     (long long)QUOTA_STORAGE_KIB_MAX,
     "default storage quota per user in KiB (RFC 9208 STORAGE; default 0: unlimited)"},
    {"quota_messages", CK_SIZE, offsetof(struct config, quota_messages), sizeof(uint64_t), 0,
     (long long)QUOTA_MESSAGES_MAX,
     "default message quota per user, all mailboxes (RFC 9208 MESSAGE; default 0: unlimited)"},
    CS(quota_file, "per-user quotas, lines 'address storage_kib messages' (default none)"),
    CS(user, "started as root: switch to this user after binding the ports (default none)"),
    CS(group, "... and to this group (default: the user's primary group)"),
    {"allow_root", CK_BOOL, offsetof(struct config, allow_root), sizeof(int), 0, 1,
     "started as root without user: run as root anyway (default no: refuse; also "
     "$MAILVAULTD_ALLOW_ROOT)"},
    CI(cache_size_kib,
       0,
       1 << 22,
       "page cache per store connection, KiB (an open store has two: its writes and its reads; "
       "default 2048; 0: library's)"),
    CI(maintain_interval_s, 0, 1 << 25, "maintain idle-closed stores this often (86400; 0 off)"),
    CI(maintain_max_mib, 1, 1 << 20, "... only stores up to this many MiB (default 256)"),
    CI(changes_keep_days, 0, 36500, "... keeping N days of expunges for QRESYNC (90; 0 all)"),
};

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen, sizeof c->listen, "127.0.0.1");
    c->imap_port = 143;
    c->imaps_port = -1;
    c->lmtp_port = 24;
    snprintf(c->log, sizeof c->log, "stderr");
    snprintf(c->log_level, sizeof c->log_level, "info");
    /* Four per CPU. A worker runs one job at a time, start to end: with one per CPU a short
     * command (NOOP) waits behind a long one (a header FETCH of 50 messages) of another user
     * on the same worker, and an APPEND holds its worker through the WAL sync that makes the
     * mail durable (a few ms of waiting, no CPU). bench/imap_compare.sh on 2 CPUs: 4 workers
     * gave 13-48% more commands/s than 2 at 100 clients; with durable appends 8 gave 3-12%
     * more than 4 at 10 clients. The total of open stores stays 256 on 2 CPUs. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->workers = cpus < 1 ? 4 : cpus > 16 ? 64 : (int)(4 * cpus);
    /* One, as before the writer threads (worker.c "WRITERS"): two let a user's STORE pass
     * another user's APPEND on the same worker (STORE p99 at 10 clients 24-37 ms against
     * 41-83 with one, commands/s +1-80%), but the reads' p50 rose 1.3-2.3x in the same
     * runs on 2 loaded CPUs (docs/BENCHMARKS.md); the page caches are the stores', so more
     * writers add only their stacks. */
    c->writers_per_worker = 1;
    /* worker.c NICE: 100 clients of bench/imap_old_new.sh, STORE p50 21-22 -> 5-6 ms and the
     * reads' 3.5 -> 2.5, +33% commands/s; 10 clients within the noise (docs/BENCHMARKS.md) */
    c->background_nice = 10;
    c->index_later = 1;
    /* worker.c SYNC APART: at 100 clients of bench/imap_old_new.sh +30% commands/s and the
     * APPENDs' p50 halved, but the reads' p50 doubled on the 2 CPUs the writes then kept busy;
     * at 10 clients no change beyond the noise (docs/BENCHMARKS.md "An APPEND's fsync apart") */
    c->sync_apart = 0;
    c->stores_per_worker = 32;
    c->store_idle_s = 300;
    /* ~146 bytes an answer of the bench's corpus with its bookkeeping: 32 MiB keeps ~230,000
     * messages' structure, a 100,000-message INBOX's with room for other open stores' */
    c->structure_cache_kib = 32768;
    c->sort_keys_kib = 65536;
    /* a search result's UIDs as a set (roundcube's "move all" of 20,000 scattered messages
     * is ~130 KB): Dovecot's 64 KiB refuses it; past 64 KiB a line draws on
     * literal_total_max (CONFIG_LINE_FREE) */
    c->line_max = 1 << 20;
    c->literal_max = 64u << 20;
    c->connections_max = 1000;
    c->connections_per_address_max = 20;
    /* Each session of a user holds a byte a message of its mailbox and the chunks of the view
     * it changed (up to 40 bytes a message): unbounded, one user's sessions were the server's
     * memory. Dovecot's mail_max_userip_connections is 10 per user and address. */
    c->user_sessions_max = 50;
    c->idle_timeout_s = 1800;
    c->auth_fail_delay_ms = 2000;
    /* Dovecot's proxy gives up on a backend after login_proxy_timeout (30 s) and tells the
     * client [UNAVAILABLE]: a failure must be answered well before, or it is no answer. */
    c->auth_fail_delay_max_ms = 5000;
    c->lmtp_recipients_max = 100;
    c->prelogin_bytes_max = 65536;
    c->login_timeout_s = 60;
    c->literal_total_max = 512u << 20;
    c->lmtp_connections_max = 100;
    c->lmtp_transaction_timeout_s = 600;
    c->lmtp_rejected_recipients_max = 20;
    c->lmtp_data_total_max = 256u << 20;
    c->cache_size_kib = 2048;
    c->maintain_interval_s = 86400;
    c->maintain_max_mib = 256;
    c->changes_keep_days = 90;
    const char *root = getenv("MAILVAULT_ROOT");
    snprintf(c->root, sizeof c->root, "%s", root != NULL && root[0] != '\0' ? root : "./var/mail");
    const char *iter = getenv("MAILVAULT_KDF_ITER");
    if (iter != NULL && iter[0] != '\0') {
        char err[128];
        if (config_set(c, "kdf_iter", iter, err, sizeof err) != 0) {
            fprintf(stderr, "mailvaultd: MAILVAULT_KDF_ITER: %s\n", err);
        }
    }
    /* For test scripts run as root (tests/imapd_lib.sh), like MAILVAULT_KDF_ITER: the check
     * guards against a mistake, and whoever sets the environment could pass the option. */
    const char *allow_root = getenv("MAILVAULTD_ALLOW_ROOT");
    if (allow_root != NULL && allow_root[0] != '\0') {
        char err[128];
        if (config_set(c, "allow_root", allow_root, err, sizeof err) != 0) {
            fprintf(stderr, "mailvaultd: MAILVAULTD_ALLOW_ROOT: %s\n", err);
        }
    }
}

static int config_number(const char *value, long long min, long long max, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long n = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || n < min || n > max) {
        return -1;
    }
    *out = n;
    return 0;
}

/* The string settings with a closed set of values, checked when set so that a typo stops
 * the start-up with the setting's name. */
static int config_check_string(const char *key, const char *value, char *err, size_t err_size)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (strcmp(key, "log") == 0 && strcmp(value, "stderr") != 0 && strcmp(value, "syslog") != 0) {
        snprintf(err, err_size, "log: expected stderr or syslog");
        return -1;
    }
    if (strcmp(key, "log_level") == 0 && log_level_parse(value) < 0) {
        snprintf(err, err_size, "log_level: expected error, warning, info or debug");
        return -1;
    }
    if (strcmp(key, "trusted_networks") == 0 && proxy_networks_check(value, err, err_size) != 0) {
        return -1;
    }
    if (strcmp(key, "metrics_listen") == 0 && value[0] != '\0' &&
        metrics_parse_address(value, &ss, &len) != 0) {
        snprintf(err, err_size,
                 "metrics_listen: expected ADDRESS:PORT (127.0.0.1:9117, [::1]:9117), or empty");
        return -1;
    }
    return 0;
}

int config_set(struct config *c, const char *key, const char *value, char *err, size_t err_size)
{
    for (size_t i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++) {
        const struct config_key *k = &config_keys[i];
        if (strcmp(k->name, key) != 0) {
            continue;
        }
        char *field = (char *)c + k->offset;
        long long n = 0;
        switch (k->kind) {
        case CK_STRING:
            if (strlen(value) >= k->size) {
                snprintf(err, err_size, "%s: value too long", key);
                return -1;
            }
            /* The quota file is read here, so a bad line stops the start-up (quota_file.c). */
            if (strcmp(key, "quota_file") == 0 && quota_file_load(value, err, err_size) != 0) {
                return -1;
            }
            if (config_check_string(key, value, err, err_size) != 0) {
                return -1;
            }
            memcpy(field, value, strlen(value) + 1);
            return 0;
        case CK_BOOL:
            if (strcmp(value, "yes") == 0 || strcmp(value, "1") == 0 ||
                strcmp(value, "true") == 0) {
                *(int *)(void *)field = 1;
            } else if (strcmp(value, "no") == 0 || strcmp(value, "0") == 0 ||
                       strcmp(value, "false") == 0) {
                *(int *)(void *)field = 0;
            } else {
                snprintf(err, err_size, "%s: expected yes or no", key);
                return -1;
            }
            return 0;
        case CK_INT:
        case CK_SIZE:
            if (config_number(value, k->min, k->max, &n) != 0) {
                snprintf(err, err_size, "%s: expected a number from %lld to %lld", key, k->min,
                         k->max);
                return -1;
            }
            if (k->kind == CK_INT) {
                *(int *)(void *)field = (int)n;
            } else if (k->size == sizeof(uint32_t)) {
                *(uint32_t *)(void *)field = (uint32_t)n;
            } else if (k->size == sizeof(uint64_t)) {
                memcpy(field, &(uint64_t){(uint64_t)n}, sizeof(uint64_t));
            }
            return 0;
        }
    }
    snprintf(err, err_size, "unknown setting \"%s\"", key);
    return -1;
}

static char *config_trim(char *s)
{
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) {
        s[--n] = '\0';
    }
    return s;
}

int config_load(struct config *c, const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return -1;
    }
    char line[4096], sub[256];
    int number = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
        number++;
        char *hash = strchr(line, '#');
        if (hash != NULL) {
            *hash = '\0';
        }
        char *text = config_trim(line);
        if (text[0] == '\0') {
            continue;
        }
        char *eq = strchr(text, '=');
        if (eq == NULL) {
            snprintf(err, err_size, "%s:%d: expected key = value", path, number);
            rc = -1;
            break;
        }
        *eq = '\0';
        if (config_set(c, config_trim(text), config_trim(eq + 1), sub, sizeof sub) != 0) {
            snprintf(err, err_size, "%s:%d: %s", path, number, sub);
            rc = -1;
        }
    }
    fclose(f);
    return rc;
}

void config_usage(void)
{
    fputs("usage: mailvaultd [-c FILE] [--KEY=VALUE ...]\n"
          "Serves the mailvault stores over IMAP4rev1 and accepts mail over LMTP.\n"
          "Settings (in FILE as 'KEY = VALUE', or on the command line, which wins):\n",
          stdout);
    for (size_t i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++) {
        printf("  %-28s %s\n", config_keys[i].name, config_keys[i].help);
    }
    fputs("Quota (RFC 9208): a quota_file entry overrides quota_kib and quota_messages for its\n"
          "address ('#' comments, 0 = unlimited; a bad line stops the start-up). The file is\n"
          "looked at every 2 s when in use and re-read when it changed; a bad new version is\n"
          "logged and the previous one kept. APPEND and COPY over a limit get NO [OVERQUOTA],\n"
          "an LMTP recipient 552 5.2.2. A delivery to a store that is not open (sealed into\n"
          "its queue) counts the usage last seen while the store was open here plus the queue's\n"
          "files (bytes, one message each); with nothing seen since the start, the store's file\n"
          "sizes (db + wal) plus the queue, and no message check.\n",
          stdout);
    fputs("Production (contrib/mailvaultd.service): started as root, mailvaultd binds its ports,\n"
          "reads the TLS key, then switches to user/group for good and checks that the store\n"
          "root is theirs; without user it refuses to run as root unless allow_root = yes.\n"
          "With $NOTIFY_SOCKET set it tells systemd READY=1 once serving (Type=notify).\n"
          "SIGHUP re-reads tls_cert / tls_key (for new connections) and quota_file, as the\n"
          "serving user; what fails to load is logged and kept as it was.\n"
          "A store closed after store_idle_s unused gets mv_store_maintain() first (VACUUM if\n"
          "fragmented, a weekly quick_check) at most every maintain_interval_s, if it is at\n"
          "most maintain_max_mib and no job waits; one log line says what it did.\n",
          stdout);
}

struct mv_store_options config_store_options(const struct config *c)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = c->root;
    o.kdf_iter = c->kdf_iter;
    o.limits.message_size_max = c->literal_max;
    /* The library's default (MemAvailable / 512, up to 64 MiB) suits one store per process;
     * a server keeps hundreds open, each with its own cache. */
    o.cache_size_kib = c->cache_size_kib;
    return o;
}
