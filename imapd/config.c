/*
 * config.c -- mailvaultd's settings: one table of keys with their defaults and ranges, read
 * from a config file ("key = value", '#' comments) and overridden by --key=value options.
 */
#include "imapd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    CI(workers, 1, 64, "worker threads (default 2)"),
    CI(stores_per_worker, 1, 100000, "open stores each worker keeps (default 64)"),
    CI(store_idle_s, 1, 86400, "close an unused store after this long (default 300)"),
    {"line_max", CK_SIZE, offsetof(struct config, line_max), sizeof(size_t), 1024, 1 << 24,
     "longest command line in bytes (default 65536)"},
    {"literal_max", CK_SIZE, offsetof(struct config, literal_max), sizeof(uint64_t), 1024,
     1LL << 32, "largest APPEND literal / LMTP message in bytes (default 67108864)"},
    CI(connections_max, 1, 1000000, "connections in total (default 1000)"),
    CI(connections_per_address_max, 1, 1000000, "connections from one address (default 20)"),
    CI(idle_timeout_s, 1, 86400, "close an idle session after this long (default 1800)"),
    CI(auth_fail_delay_ms, 0, 60000, "delay before a failed login's answer (default 2000)"),
    {"allow_plaintext", CK_BOOL, offsetof(struct config, allow_plaintext), sizeof(int), 0, 1,
     "allow LOGIN without TLS from other hosts than loopback (default no)"},
    {"kdf_iter", CK_SIZE, offsetof(struct config, kdf_iter), sizeof(uint32_t), 0, UINT32_MAX,
     "KDF iterations of the stores (default 0: the cipher's; tests only; also "
     "$MAILVAULT_KDF_ITER)"},
    CI(lmtp_recipients_max, 1, 100000, "recipients of one LMTP transaction (default 100)"),
    {"quota_kib", CK_SIZE, offsetof(struct config, quota_kib), sizeof(uint64_t), 0, 1LL << 40,
     "storage quota per user in KiB: APPEND and LMTP refuse above it (default 0: unlimited)"},
};

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen, sizeof c->listen, "127.0.0.1");
    c->imap_port = 143;
    c->imaps_port = -1;
    c->lmtp_port = 24;
    snprintf(c->log, sizeof c->log, "stderr");
    c->workers = 2;
    c->stores_per_worker = 64;
    c->store_idle_s = 300;
    c->line_max = 65536;
    c->literal_max = 64u << 20;
    c->connections_max = 1000;
    c->connections_per_address_max = 20;
    c->idle_timeout_s = 1800;
    c->auth_fail_delay_ms = 2000;
    c->lmtp_recipients_max = 100;
    const char *root = getenv("MAILVAULT_ROOT");
    snprintf(c->root, sizeof c->root, "%s", root != NULL && root[0] != '\0' ? root : "./var/mail");
    const char *iter = getenv("MAILVAULT_KDF_ITER");
    if (iter != NULL && iter[0] != '\0') {
        char err[128];
        if (config_set(c, "kdf_iter", iter, err, sizeof err) != 0) {
            fprintf(stderr, "mailvaultd: MAILVAULT_KDF_ITER: %s\n", err);
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
}

struct mv_store_options config_store_options(const struct config *c)
{
    struct mv_store_options o = MV_STORE_OPTIONS_INIT;
    o.root = c->root;
    o.kdf_iter = c->kdf_iter;
    o.limits.message_size_max = c->literal_max;
    return o;
}
