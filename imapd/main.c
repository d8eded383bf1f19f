/*
 * main.c -- mailvaultd: options and config file, listeners, the open-file limit, workers,
 * signals, then the event loop until SIGTERM or SIGINT.
 *
 * USAGE
 *   mailvaultd [-c FILE] [--KEY=VALUE ...]     (mailvaultd --help lists every KEY)
 *   Settings come from the defaults, then FILE, then the command line. The server runs in
 *   the foreground and logs to stderr (or syslog); a supervisor (systemd) daemonizes it.
 *
 * See docs/IMAPD.md for the design.
 */
#include "imap_mime.h"
#include "imapd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

struct config g_config;

struct listener {
    struct loop_handler handler;
    int fd;
    enum conn_proto proto;
    int tls;
    int port;
};

static struct listener listeners[3];
static struct loop_handler wake_handler, signal_handler;
static int wake_fd = -1, signal_fd = -1;

static void main_on_listen(void *arg, uint32_t events)
{
    (void)events;
    struct listener *l = arg;
    conn_accept(l->fd, l->proto, l->tls);
}

static void main_on_wake(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    worker_collect();
}

static void main_on_signal(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    struct signalfd_siginfo info;
    while (read(signal_fd, &info, sizeof info) == (ssize_t)sizeof info) {
        log_event("signal %u: shutting down", info.ssi_signo);
        loop_stop();
    }
}

static void main_tick(int64_t now_ms)
{
    conn_tick(now_ms);
}

/* Binds and listens on the configured address; *port_out gets the port actually bound. */
static int main_listen(const char *address, int port, int *port_out)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)(void *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&ss;
    if (inet_pton(AF_INET, address, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        len = sizeof *in;
    } else if (inet_pton(AF_INET6, address, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        len = sizeof *in6;
    } else {
        fprintf(stderr, "mailvaultd: listen: \"%s\" is not an IP address\n", address);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0) {
        fprintf(stderr, "mailvaultd: cannot listen on %s port %d: %s\n", address, port,
                strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        *port_out = ntohs(ss.ss_family == AF_INET ? in->sin_port : in6->sin6_port);
    }
    return fd;
}

static int main_options(int argc, char **argv)
{
    char err[512];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            config_usage();
            exit(0);
        }
        if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
            if (config_load(&g_config, argv[++i], err, sizeof err) != 0) {
                fprintf(stderr, "mailvaultd: %s\n", err);
                return -1;
            }
        }
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-c") == 0) {
            i++;
            continue;
        }
        const char *eq = strchr(argv[i], '=');
        if (strncmp(argv[i], "--", 2) != 0 || eq == NULL) {
            fprintf(stderr, "mailvaultd: unexpected argument \"%s\" (try --help)\n", argv[i]);
            return -1;
        }
        char key[64];
        size_t n = (size_t)(eq - argv[i] - 2);
        if (n >= sizeof key) {
            fprintf(stderr, "mailvaultd: unknown option \"%s\"\n", argv[i]);
            return -1;
        }
        memcpy(key, argv[i] + 2, n);
        key[n] = '\0';
        for (char *p = key; *p != '\0'; p++) {
            if (*p == '-') {
                *p = '_';
            }
        }
        if (config_set(&g_config, key, eq + 1, err, sizeof err) != 0) {
            fprintf(stderr, "mailvaultd: %s\n", err);
            return -1;
        }
    }
    return 0;
}

/* Raises RLIMIT_NOFILE to what connections and open stores need. */
static int main_files_limit(void)
{
    rlim_t need = (rlim_t)g_config.connections_max +
                  (rlim_t)g_config.workers * (rlim_t)g_config.stores_per_worker * 4 + 64;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return -1;
    }
    if (rl.rlim_cur >= need) {
        return 0;
    }
    rl.rlim_cur = need <= rl.rlim_max ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < need) {
        fprintf(stderr,
                "mailvaultd: need %llu open files (connections_max + workers * stores_per_worker "
                "* 4), the limit is %llu\n",
                (unsigned long long)need, (unsigned long long)rl.rlim_cur);
        return -1;
    }
    return 0;
}

static int main_listeners(void)
{
    int ports[3] = {g_config.imap_port, g_config.imaps_port, g_config.lmtp_port};
    enum conn_proto protos[3] = {PROTO_IMAP, PROTO_IMAP, PROTO_LMTP};
    for (int i = 0; i < 3; i++) {
        listeners[i].fd = -1;
        if (ports[i] < 0) {
            continue;
        }
        if (i == 1 && !tls_available()) {
            fprintf(stderr, "mailvaultd: imaps_port needs tls_cert and tls_key\n");
            return -1;
        }
        listeners[i].fd = main_listen(g_config.listen, ports[i], &listeners[i].port);
        if (listeners[i].fd < 0) {
            return -1;
        }
        listeners[i].proto = protos[i];
        listeners[i].tls = i == 1;
        listeners[i].handler.fn = main_on_listen;
        listeners[i].handler.arg = &listeners[i];
        if (loop_add(listeners[i].fd, EPOLLIN, &listeners[i].handler) != 0) {
            return -1;
        }
        log_event("listening on %s port %d (%s)", g_config.listen, listeners[i].port,
                  i == 0   ? "imap"
                  : i == 1 ? "imaps"
                           : "lmtp");
    }
    if (g_config.ports_file[0] != '\0') {
        char tmp[MV_PATH_MAX + 8];
        snprintf(tmp, sizeof tmp, "%s.tmp", g_config.ports_file);
        FILE *f = fopen(tmp, "w");
        if (f == NULL) {
            fprintf(stderr, "mailvaultd: %s: %s\n", tmp, strerror(errno));
            return -1;
        }
        fprintf(f, "imap=%d\nimaps=%d\nlmtp=%d\n", listeners[0].fd >= 0 ? listeners[0].port : -1,
                listeners[1].fd >= 0 ? listeners[1].port : -1,
                listeners[2].fd >= 0 ? listeners[2].port : -1);
        if (fclose(f) != 0 || rename(tmp, g_config.ports_file) != 0) {
            fprintf(stderr, "mailvaultd: cannot write %s\n", g_config.ports_file);
            return -1;
        }
    }
    return 0;
}

static int main_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) {
        return -1;
    }
    signal(SIGPIPE, SIG_IGN);
    signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd < 0) {
        return -1;
    }
    signal_handler.fn = main_on_signal;
    return loop_add(signal_fd, EPOLLIN, &signal_handler);
}

int main(int argc, char **argv)
{
    char err[512] = "";
    config_defaults(&g_config);
    if (main_options(argc, argv) != 0) {
        return 2;
    }
    log_open(strcmp(g_config.log, "syslog") == 0);
    if (mv_vfs_register(NULL, 0) != MV_OK) {
        fprintf(stderr, "mailvaultd: the encrypting VFS failed to start\n");
        return 1;
    }
    imap_mime_init(); /* before any worker thread exists */
    if (tls_init(g_config.tls_cert, g_config.tls_key, err, sizeof err) != 0) {
        fprintf(stderr, "mailvaultd: %s\n", err);
        return 1;
    }
    if (main_files_limit() != 0 || loop_init() != 0 || main_signals() != 0) {
        fprintf(stderr, "mailvaultd: start-up failed: %s\n", strerror(errno));
        return 1;
    }
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    wake_handler.fn = main_on_wake;
    /* Workers start after the signal mask is set, so they inherit it (signals go to the
     * loop's signalfd only). */
    if (wake_fd < 0 || loop_add(wake_fd, EPOLLIN, &wake_handler) != 0 ||
        worker_start(&g_config, g_config.workers, wake_fd) != 0) {
        fprintf(stderr, "mailvaultd: cannot start the workers\n");
        return 1;
    }
    if (main_listeners() != 0) {
        worker_stop_all();
        return 1;
    }
    log_event("mailvaultd %s started: %d workers, store root %s", mv_version(), g_config.workers,
              g_config.root);
    loop_run(main_tick);
    for (int i = 0; i < 3; i++) {
        if (listeners[i].fd >= 0) {
            close(listeners[i].fd);
        }
    }
    /* Connections first (each posts its session's release job), then the workers finish
     * their queues and close their stores, then the jobs' done() frees what they held. */
    conn_shutdown_all();
    worker_stop_all();
    worker_collect();
    tls_shutdown();
    log_event("stopped");
    return 0;
}
