/*
 * notify.c -- readiness and state for a service manager, systemd's notification protocol
 * (sd_notify(3), systemd.service(5) Type=notify) without linking libsystemd: when the
 * environment has NOTIFY_SOCKET, each notification is one datagram on that AF_UNIX socket
 * holding newline-separated KEY=VALUE assignments (READY=1, RELOADING=1, STOPPING=1,
 * STATUS=free text, MONOTONIC_USEC=...). Without NOTIFY_SOCKET every call does nothing.
 *
 * USAGE
 *   notify_init()                  at start-up, before the switch of users
 *   notify_send("READY=1\nSTATUS=%s", text)   once serving; after a reload
 *   notify_close()                 at exit
 *
 * IMPLEMENTATION NOTES
 *   - NOTIFY_SOCKET is a file-system path ("/run/systemd/notify") or, with a leading '@',
 *     a name in Linux's abstract namespace: the '@' becomes the NUL that starts sun_path,
 *     and the address length counts the name exactly (abstract names are not
 *     NUL-terminated; a trailing NUL would name another socket).
 *   - The socket is made and connected once, before the switch of users: the connect is
 *     where the permission to write to a path socket is checked, so notifications keep
 *     working for an unprivileged account whatever the socket's mode. The variable is then
 *     unset so nothing the server might start later notifies in its name.
 *   - Sends are bounded by a 2 s send timeout: the loop thread sends, and a service
 *     manager that stopped reading must not stop the server.
 *   - systemd with NotifyAccess=main takes a message only from the main PID; the kernel
 *     puts the sending process's ID (threads share it) in the credentials systemd reads.
 *
 * LIMITATIONS
 *   - Loop thread only (one static descriptor, unlocked).
 *   - A notification longer than NOTIFY_MESSAGE_MAX is cut. Callers put no line break in
 *     a value (each assignment is one line): STATUS texts are the server's own.
 *   - No WATCHDOG=1, no file descriptor store, no vsock addresses (logged and ignored).
 */
#include "notify.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define NOTIFY_MESSAGE_MAX     1024
#define NOTIFY_SEND_TIMEOUT_MS 2000

static int notify_fd = -1;

/* addr and *len for value ("/path" or "@abstract"). 0, or -1 with the reason in why. */
static int
notify_address(const char *value, struct sockaddr_un *addr, socklen_t *len, const char **why)
{
    size_t n = strlen(value);
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    if (value[0] != '/' && value[0] != '@') {
        *why = "not an absolute path or an @abstract name";
        return -1;
    }
    /* (1) a path needs room for its NUL, (2) an abstract name only for its bytes */
    if ((value[0] == '/' && n >= sizeof addr->sun_path) ||
        (value[0] == '@' && (n > sizeof addr->sun_path || n < 2))) {
        *why = "name too long (or empty)";
        return -1;
    }
    memcpy(addr->sun_path, value, n);
    if (value[0] == '@') {
        addr->sun_path[0] = '\0';
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    return 0;
}

void notify_init(void)
{
    const char *value = getenv("NOTIFY_SOCKET");
    if (value == NULL || value[0] == '\0') {
        return;
    }
    struct sockaddr_un addr;
    socklen_t len = 0;
    const char *why = NULL;
    int fd = -1;
    if (notify_address(value, &addr, &len, &why) == 0) {
        struct timeval tv = {NOTIFY_SEND_TIMEOUT_MS / 1000, (NOTIFY_SEND_TIMEOUT_MS % 1000) * 1000};
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0 ||
            connect(fd, (struct sockaddr *)&addr, len) != 0) {
            why = strerror(errno);
            if (fd >= 0) {
                close(fd);
            }
            fd = -1;
        }
    }
    if (fd < 0) {
        /* Not fatal: under Type=notify the manager's start timeout reports it anyway, and
         * outside one a stray variable must not stop the server. */
        log_warning("NOTIFY_SOCKET=%.200s: %s; the service manager will not be notified", value,
                    why);
    } else {
        log_event("notifying the service manager through NOTIFY_SOCKET=%.200s", value);
    }
    notify_fd = fd;
    unsetenv("NOTIFY_SOCKET");
}

void notify_send(const char *fmt, ...)
{
    if (notify_fd < 0) {
        return;
    }
    char text[NOTIFY_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    size_t len = (size_t)n < sizeof text ? (size_t)n : sizeof text - 1;
    if (send(notify_fd, text, len, MSG_NOSIGNAL) != (ssize_t)len) {
        int e = errno;
        char *nl = strchr(text, '\n');
        if (nl != NULL) {
            *nl = '\0'; /* the first assignment names the notification */
        }
        log_warning("service manager notification %s not sent: %s", text, strerror(e));
    }
}

void notify_close(void)
{
    if (notify_fd >= 0) {
        close(notify_fd);
        notify_fd = -1;
    }
}
