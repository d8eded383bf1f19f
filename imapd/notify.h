/*
 * notify.h -- systemd's NOTIFY_SOCKET protocol without libsystemd (notify.c; loop thread).
 */
#ifndef MV_IMAPD_NOTIFY_H
#define MV_IMAPD_NOTIFY_H

/* Connects to $NOTIFY_SOCKET if set (before the switch of users); a failure is logged. */
void notify_init(void);
/* Sends "KEY=VALUE" lines (READY=1, STATUS=...) as one datagram; nothing without a socket. */
void notify_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void notify_close(void);

#endif /* MV_IMAPD_NOTIFY_H */
