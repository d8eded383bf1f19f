/*
 * main.c -- mailvaultd: options and config file, listeners, the open-file limit, workers,
 * signals, then the event loop until SIGTERM or SIGINT; SIGHUP reloads the TLS certificate
 * and the quota file.
 *
 * USAGE
 *   mailvaultd [-c FILE] [--KEY=VALUE ...]     (mailvaultd --help lists every KEY)
 *   Settings come from the defaults, then FILE, then the command line. The server runs in
 *   the foreground and logs to stderr (or syslog); a supervisor (systemd) daemonizes it
 *   (contrib/mailvaultd.service).
 *
 * START-UP ORDER
 *   What may need root comes first: the log (syslog's socket), the TLS certificate and key,
 *   the open-file limit, the listening sockets. Then, if started as root, the switch to
 *   `user` / `group` for good (main_drop_privileges: refused without `user` unless
 *   `allow_root`), a check that the store root is usable by the account that now serves,
 *   the worker threads (created unprivileged), and last the ports file: once it exists the
 *   server is ready and runs as what it will run as. Then, under systemd (NOTIFY_SOCKET,
 *   connected before the switch: notify.c), READY=1.
 *
 * SIGNALS
 *   All three arrive through a signalfd on the loop (blocked in every thread), so their
 *   handlers are ordinary code. SIGTERM / SIGINT: STOPPING=1, then BYE to every session,
 *   the commands in progress finish, the stores close. SIGHUP (main_reload): RELOADING=1,
 *   a new TLS context for new connections (existing ones keep theirs) and a forced re-read
 *   of the quota file, each kept as it was if its files do not load (one log line says
 *   why), then READY=1. The reload runs as the account the server serves as: a key only
 *   root may read cannot be reloaded. The config file is not re-read.
 *
 * See docs/IMAPD.md for the design.
 */
#include "config.h"
#include "conn.h"
#include "control.h"
#include "imap_mime.h"
#include "log.h"
#include "loop.h"
#include "mailvault.h"
#include "metrics.h"
#include "notify.h"
#include "protocols.h"
#include "quota.h"
#include "tls.h"
#include "worker.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct config g_config;

struct listener {
    struct loop_handler handler;
    int fd;
    const struct conn_proto_ops *ops;
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
    conn_accept(l->fd, l->ops, l->tls);
}

static void main_on_wake(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    worker_collect();
}

static int64_t main_monotonic_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* SIGHUP: the TLS certificate and key, then the quota file; whatever fails to load keeps
 * its previous state and the server goes on serving. The service manager sees RELOADING=1
 * (with the CLOCK_MONOTONIC time systemd wants beside it) until READY=1. */
static void main_reload(void)
{
    char info[256], err[768];
    int failures = 0;
    log_event("reload (SIGHUP)");
    notify_send("RELOADING=1\nMONOTONIC_USEC=%lld\nSTATUS=reloading the TLS certificate and "
                "the quota file",
                (long long)main_monotonic_us());
    if (g_config.tls_cert[0] == '\0') {
        log_event("reload: no tls_cert configured");
    } else if (tls_reload(g_config.tls_cert, g_config.tls_key, info, sizeof info, err,
                          sizeof err) != 0) {
        log_error("reload failed: %s; new connections keep the previous certificate", err);
        failures++;
    } else {
        log_event("reload: TLS certificate %s loaded (%s); connections made from now on use it",
                  g_config.tls_cert, info);
    }
    if (g_config.quota_file[0] == '\0') {
        log_event("reload: no quota_file configured");
    } else if (quota_file_reload() != 0) {
        failures++; /* quota_file.c logged why */
    }
    log_event("reload done%s", failures != 0 ? ", with failures (see above)" : "");
    notify_send("READY=1\nSTATUS=serving; %s",
                failures != 0 ? "the last reload failed (see the log)" : "reloaded");
}

static void main_on_signal(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    struct signalfd_siginfo info;
    int reload = 0;
    while (read(signal_fd, &info, sizeof info) == (ssize_t)sizeof info) {
        if (info.ssi_signo == SIGHUP) {
            reload = 1; /* several queued SIGHUPs make one reload */
            continue;
        }
        log_event("signal %u: shutting down", info.ssi_signo);
        loop_stop();
    }
    if (reload) {
        main_reload();
    }
}

static void main_tick(int64_t now_ms)
{
    conn_tick(now_ms);
    control_tick(now_ms);
    metrics_tick(now_ms);
    mv_deliver_sealed_wipe(0); /* LMTP's burst keys do not outlive their burst */
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
    rlim_t need = (rlim_t)g_config.connections_max + (rlim_t)g_config.lmtp_connections_max +
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
                "mailvaultd: need %llu open files (connections_max + lmtp_connections_max + "
                "workers * stores_per_worker "
                "* 4), the limit is %llu\n",
                (unsigned long long)need, (unsigned long long)rl.rlim_cur);
        return -1;
    }
    return 0;
}

static int main_listeners(void)
{
    int ports[3] = {g_config.imap_port, g_config.imaps_port, g_config.lmtp_port};
    const struct conn_proto_ops *protos[3] = {&imap_conn_proto, &imap_conn_proto, &lmtp_conn_proto};
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
        listeners[i].ops = protos[i];
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
    return 0;
}

/* Writes the ports actually bound (for port 0) to ports_file, through a rename so a reader
 * never sees half of it: the tests take its appearance to mean "ready". A ports_file that is
 * a symbolic link, a FIFO or a device is written through, never renamed over (that would
 * replace the link or the node with a plain file). */
static int main_ports_file(void)
{
    struct stat st;
    if (g_config.ports_file[0] != '\0') {
        char tmp[MV_PATH_MAX + 8];
        int in_place = lstat(g_config.ports_file, &st) == 0 && !S_ISREG(st.st_mode);
        snprintf(tmp, sizeof tmp, "%s%s", g_config.ports_file, in_place ? "" : ".tmp");
        FILE *f = fopen(tmp, "w");
        if (f == NULL) {
            fprintf(stderr, "mailvaultd: %s: %s\n", tmp, strerror(errno));
            return -1;
        }
        fprintf(f, "imap=%d\nimaps=%d\nlmtp=%d\nmetrics=%d\n",
                listeners[0].fd >= 0 ? listeners[0].port : -1,
                listeners[1].fd >= 0 ? listeners[1].port : -1,
                listeners[2].fd >= 0 ? listeners[2].port : -1, metrics_port());
        if (fclose(f) != 0 || (!in_place && rename(tmp, g_config.ports_file) != 0)) {
            fprintf(stderr, "mailvaultd: cannot write %s\n", g_config.ports_file);
            return -1;
        }
    }
    return 0;
}

/* The control socket (control.c): control_socket, by default in the store root, where
 * `mailvault` finds it from the same --root; "off" or "none": none (the help's wording, and
 * metrics_listen's default; a socket named "none" in the working directory is never meant).
 * The default is skipped with a warning when the root's name is too long for a Unix socket;
 * a configured path is not. */
static int main_control_socket(void)
{
    char path[MV_PATH_MAX + 32], err[MV_PATH_MAX + 256];
    const char *setting = g_config.control_socket;
    if (strcmp(setting, "off") == 0 || strcmp(setting, "none") == 0) {
        log_event("control socket off (control_socket = %s)", setting);
        return 0;
    }
    snprintf(path, sizeof path, "%s", setting);
    if (setting[0] == '\0') {
        snprintf(path, sizeof path, "%s/%s", g_config.root, MV_CONTROL_SOCKET_NAME);
        if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            log_warning("no control socket: %s is too long for a Unix socket; set "
                        "control_socket to a shorter path",
                        path);
            return 0;
        }
    }
    if (control_listen(path, err, sizeof err) != 0) {
        fprintf(stderr, "mailvaultd: %s\n", err);
        return -1;
    }
    return 0;
}

/* The account of name: its uid and primary gid. 0, or -1 with the reason on stderr. */
static int main_lookup_user(const char *name, uid_t *uid, gid_t *gid)
{
    struct passwd pw, *found = NULL;
    char text[16384];
    int rc = getpwnam_r(name, &pw, text, sizeof text, &found);
    if (rc != 0 || found == NULL) {
        fprintf(stderr, "mailvaultd: user = %s: %s\n", name,
                rc != 0 ? strerror(rc) : "no such user");
        return -1;
    }
    *uid = pw.pw_uid;
    *gid = pw.pw_gid;
    return 0;
}

static int main_lookup_group(const char *name, gid_t *gid)
{
    struct group gr, *found = NULL;
    char text[16384];
    int rc = getgrnam_r(name, &gr, text, sizeof text, &found);
    if (rc != 0 || found == NULL) {
        fprintf(stderr, "mailvaultd: group = %s: %s\n", name,
                rc != 0 ? strerror(rc) : "no such group");
        return -1;
    }
    *gid = gr.gr_gid;
    return 0;
}

/* Proves the switch cannot be undone: (1) the real, effective and saved IDs are all the
 * target's, (2) setuid(0) and setgid(0) fail. A process that could get root back would be
 * no safer than one that never left it. */
static int main_verify_dropped(uid_t uid, gid_t gid)
{
    uid_t ruid, euid, suid;
    gid_t rgid, egid, sgid;
    if (getresuid(&ruid, &euid, &suid) != 0 || getresgid(&rgid, &egid, &sgid) != 0 || ruid != uid ||
        euid != uid || suid != uid || rgid != gid || egid != gid || sgid != gid) {
        fprintf(stderr, "mailvaultd: after switching users the IDs are not the target's\n");
        return -1;
    }
    if (setuid(0) == 0 || setgid(0) == 0) {
        fprintf(stderr, "mailvaultd: root could be regained after switching users: stopping\n");
        return -1;
    }
    return 0;
}

/* Who the server will run as, decided before anything is bound so a refusal comes first. */
static struct {
    int drop; /* switch users after binding */
    uid_t uid;
    gid_t gid;
} main_identity;

/* Validates user / group against how the server was started. As root: without user it
 * refuses, unless allow_root (a parse bug in a server that sees every user's password must
 * not also hand out root); with user it will switch (main_drop_privileges). As another user:
 * nothing to drop, and user, if set, must be that user. 0, or -1 with the reason on stderr. */
static int main_plan_identity(void)
{
    const char *user = g_config.user, *group = g_config.group;
    if (user[0] == '\0' && group[0] != '\0') {
        fprintf(stderr, "mailvaultd: group = %s needs user as well\n", group);
        return -1;
    }
    if (user[0] != '\0' && main_lookup_user(user, &main_identity.uid, &main_identity.gid) != 0) {
        return -1;
    }
    if (group[0] != '\0' && main_lookup_group(group, &main_identity.gid) != 0) {
        return -1;
    }
    if (geteuid() != 0) {
        if (user[0] != '\0' && main_identity.uid != geteuid()) {
            fprintf(stderr, "mailvaultd: user = %s needs starting as root (running as uid %u)\n",
                    user, (unsigned)geteuid());
            return -1;
        }
        return 0;
    }
    if (user[0] == '\0') {
        if (!g_config.allow_root) {
            fprintf(stderr,
                    "mailvaultd: refusing to run as root: set user = ACCOUNT (an unprivileged "
                    "account that owns the store root; the server switches to it after "
                    "binding its ports), or allow_root = yes to serve as root anyway\n");
            return -1;
        }
        return 0;
    }
    if (main_identity.uid == 0) {
        fprintf(stderr, "mailvaultd: user = %s is root (uid 0): name an unprivileged account\n",
                user);
        return -1;
    }
    main_identity.drop = 1;
    return 0;
}

/* Switches to the planned user and group (plus the user's supplementary groups) for good,
 * once what needs root is done. 0, or -1 with the reason on stderr. */
static int main_drop_privileges(void)
{
    if (!main_identity.drop) {
        if (geteuid() == 0) {
            log_warning("running as root (allow_root = yes)");
        }
        return 0;
    }
    uid_t uid = main_identity.uid;
    gid_t gid = main_identity.gid;
    /* Groups first: once the uid is not 0 there is no right left to change them. */
    if (initgroups(g_config.user, gid) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
        fprintf(stderr, "mailvaultd: cannot switch to user %s: %s\n", g_config.user,
                strerror(errno));
        return -1;
    }
    if (main_verify_dropped(uid, gid) != 0) {
        return -1;
    }
    log_event("running as user %s (uid %u, gid %u)", g_config.user, (unsigned)uid, (unsigned)gid);
    return 0;
}

/* path must be a directory the serving account can list, enter and create files in (stores
 * make their WAL, lock and temporary files beside them). 0, or -1 with a message that
 * says what to do. */
static int main_check_dir(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "mailvaultd: %s %s: %s\n", what, path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "mailvaultd: %s %s: not a directory\n", what, path);
        return -1;
    }
    if (access(path, R_OK | W_OK | X_OK) != 0) {
        fprintf(stderr,
                "mailvaultd: %s %s is not usable by uid %u (owner uid %u, mode %03o): the "
                "stores must belong to the account the server runs as (chown -R)\n",
                what, path, (unsigned)geteuid(), (unsigned)st.st_uid,
                (unsigned)(st.st_mode & 07777));
        return -1;
    }
    return 0;
}

/* The store root and its domain directories, as the account that serves: a root left owned
 * by root after switching users would fail every login with a store error instead. One
 * readdir of the root, one access() per domain. */
static int main_check_root(void)
{
    if (main_check_dir(g_config.root, "store root") != 0) {
        return -1;
    }
    DIR *d = opendir(g_config.root);
    if (d == NULL) {
        fprintf(stderr, "mailvaultd: store root %s: %s\n", g_config.root, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char path[MV_PATH_MAX];
        struct stat st;
        if (e->d_name[0] == '.' ||
            snprintf(path, sizeof path, "%s/%s", g_config.root, e->d_name) >= (int)sizeof path ||
            stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            continue;
        }
        rc = main_check_dir(path, "domain directory");
    }
    closedir(d);
    return rc;
}

static int main_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
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
    if (main_plan_identity() != 0) {
        return 1;
    }
    log_open(strcmp(g_config.log, "syslog") == 0,
             (enum log_level)log_level_parse(g_config.log_level));
    (void)mv_server_tune(); /* before SQLite starts; MV_EBUSY only if it already had */
    if (mv_vfs_register(NULL, 0) != MV_OK) {
        fprintf(stderr, "mailvaultd: the encrypting VFS failed to start\n");
        return 1;
    }
    imap_mime_init(); /* before any worker thread exists */
    char info[256];
    if (tls_init(g_config.tls_cert, g_config.tls_key, info, sizeof info, err, sizeof err) != 0) {
        fprintf(stderr, "mailvaultd: %s\n", err);
        return 1;
    }
    if (info[0] != '\0') {
        log_event("TLS certificate %s (%s)", g_config.tls_cert, info);
    }
    notify_init(); /* while still root: see notify.c */
    if (main_files_limit() != 0 || loop_init() != 0 || main_signals() != 0) {
        fprintf(stderr, "mailvaultd: start-up failed: %s\n", strerror(errno));
        return 1;
    }
    if (main_listeners() != 0) {
        return 1;
    }
    if (metrics_listen(g_config.metrics_listen, err, sizeof err) != 0) {
        fprintf(stderr, "mailvaultd: %s\n", err);
        return 1;
    }
    /* The control socket after the switch of users (it belongs to the serving account) and
     * before the workers (control_listen sets the umask, which is the process's). */
    if (main_drop_privileges() != 0 || main_check_root() != 0 || main_control_socket() != 0) {
        return 1;
    }
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    wake_handler.fn = main_on_wake;
    /* Workers start after the signal mask is set, so they inherit it (signals go to the
     * loop's signalfd only), and after the switch of users, so no thread ever ran as root. */
    if (wake_fd < 0 || loop_add(wake_fd, EPOLLIN, &wake_handler) != 0 ||
        metrics_init(g_config.workers) != 0 ||
        worker_start(&g_config, g_config.workers, wake_fd) != 0) {
        fprintf(stderr, "mailvaultd: cannot start the workers\n");
        control_close();
        return 1;
    }
    if (main_ports_file() != 0) {
        worker_stop_all();
        control_close();
        return 1;
    }
    log_event("mailvaultd %s started: %d workers, store root %s", mv_version(), g_config.workers,
              g_config.root);
    notify_send("READY=1\nSTATUS=serving: imap port %d, imaps port %d, lmtp port %d (-1: off), "
                "%d workers",
                listeners[0].fd >= 0 ? listeners[0].port : -1,
                listeners[1].fd >= 0 ? listeners[1].port : -1,
                listeners[2].fd >= 0 ? listeners[2].port : -1, g_config.workers);
    loop_run(main_tick);
    notify_send("STOPPING=1\nSTATUS=stopping: closing %d connections", conn_count());
    for (int i = 0; i < 3; i++) {
        if (listeners[i].fd >= 0) {
            close(listeners[i].fd);
        }
    }
    /* Connections first (each posts its session's release job), then the workers finish
     * their queues and close their stores, then the jobs' done() frees what they held. */
    control_close(); /* no new control requests; the ones in progress end with the BYE */
    conn_shutdown_all();
    worker_stop_all();
    worker_collect();
    mv_deliver_sealed_wipe(1);
    control_shutdown();
    metrics_shutdown();
    tls_shutdown();
    log_event("stopped");
    notify_close();
    return 0;
}
