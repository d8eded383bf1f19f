/*
 * config.h -- mailvaultd's settings (config.c): the struct every part reads, its defaults,
 * "key = value" files and --key=value overrides, and the running configuration g_config
 * (main.c). docs/IMAPD.md lists the settings.
 */
#ifndef MV_IMAPD_CONFIG_H
#define MV_IMAPD_CONFIG_H

#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>

struct config {
    char listen[64];
    int imap_port; /* -1: off; 0: any free port (see ports_file) */
    int imaps_port;
    int lmtp_port;
    char root[MV_PATH_MAX];
    char tls_cert[MV_PATH_MAX];
    char tls_key[MV_PATH_MAX];
    char ports_file[MV_PATH_MAX];
    char log[16];                     /* "stderr" or "syslog" */
    char log_level[16];               /* "error", "warning", "info" (default), "debug" */
    char metrics_listen[80];          /* ADDRESS:PORT of the /metrics HTTP listener; "": off */
    char control_socket[MV_PATH_MAX]; /* "": ROOT/MV_CONTROL_SOCKET_NAME; "off": none */
    int workers;
    int writers_per_worker;
    int background_nice; /* worker.c NICE: the work between jobs at this much more nice; 0 off */
    int index_later;     /* worker.c INDEX LATER: full-text rows of new mail between jobs */
    int sync_apart;      /* worker.c SYNC APART: appends' fsyncs on sync threads */
    int stores_per_worker;
    int store_idle_s;
    int structure_cache_kib; /* imap_structure_cache.c: the process's budget; 0 off */
    int sort_keys_kib;       /* imap_sort_kept.c: the process's budget; 0 off */
    size_t line_max;
    uint64_t literal_max; /* APPEND literals; other literals: CONFIG_SMALL_LITERAL_MAX */
    int connections_max;
    int connections_per_address_max;
    int user_sessions_max; /* IMAP sessions logged in as one user at once */
    int idle_timeout_s;
    int auth_fail_delay_ms;
    int auth_fail_delay_max_ms;  /* no failed login is answered later (proxies time out) */
    char trusted_networks[1024]; /* CIDR list of proxies that may pass the client's address */
    int allow_plaintext;
    uint32_t kdf_iter;
    int lmtp_recipients_max;

    /* Hostile clients (docs/IMAPD.md "Limits"): what one may hold before it logs in, and
     * what LMTP keeps for itself so that no IMAP client can starve deliveries. */
    size_t prelogin_bytes_max;        /* a command (lines + literals) / input before login */
    int login_timeout_s;              /* the whole login phase, from the connect */
    uint64_t literal_total_max;       /* IMAP literals, and line bytes past CONFIG_LINE_FREE,
                                         being received, all connections */
    int lmtp_connections_max;         /* LMTP's own pool (connections_max is IMAP's) */
    int lmtp_transaction_timeout_s;   /* MAIL FROM to the last reply after DATA */
    int lmtp_rejected_recipients_max; /* refused RCPTs per transaction, then 452 */
    uint64_t lmtp_data_total_max;     /* LMTP message bytes held, all connections */
    uint64_t quota_kib;      /* default storage quota per user in KiB (RFC 9208 STORAGE); 0: none */
    uint64_t quota_messages; /* default message quota per user (RFC 9208 MESSAGE); 0: none */
    char quota_file[MV_PATH_MAX]; /* per-user limits (quota_file.c), read when set; "" none */

    /* Running in production (docs/IMAPD.md). */
    char user[64];           /* started as root: switch to this account (main.c) */
    char group[64];          /* ... and group; "": the user's primary group */
    int allow_root;          /* started as root without user: serve as root anyway */
    int cache_size_kib;      /* each open store's page cache; 0: the library's default */
    int maintain_interval_s; /* maintain an idle-closed store at most this often; 0: off */
    int maintain_max_mib;    /* ... if it is at most this large (file + WAL) */
    int changes_keep_days;   /* ... keeping this many days of expunges for QRESYNC; 0: all */
};
#define CONFIG_SMALL_LITERAL_MAX 65536
/* Bytes of a command line any connection may hold; a longer line (up to line_max) draws the
 * rest from literal_total_max as it arrives (imap_frame.c), and a connection with a job in
 * flight reads no further than this (conn.c), so lines of up to line_max on every connection
 * cannot add up past that budget. */
#define CONFIG_LINE_FREE  65536
#define CONFIG_OUTPUT_MAX (4u << 20) /* reading pauses while more is queued */

void config_defaults(struct config *c);
/* Applies one "key = value" setting; 0, or -1 with a message in err. */
int config_set(struct config *c, const char *key, const char *value, char *err, size_t err_size);
/* Reads a config file of "key = value" lines ('#' comments). 0 or -1 (message in err). */
int config_load(struct config *c, const char *path, char *err, size_t err_size);
void config_usage(void);
/* The store options every open and delivery uses. */
struct mv_store_options config_store_options(const struct config *c);

/* The running configuration (main.c). */
extern struct config g_config;

#endif /* MV_IMAPD_CONFIG_H */
