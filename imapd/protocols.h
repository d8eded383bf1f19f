/*
 * protocols.h -- the protocols mailvaultd speaks, one table each (struct conn_proto_ops, in
 * the protocol's own file), and what one protocol asks of another. A new protocol is one
 * more table here and a listener in main.c; conn.c does not change.
 */
#ifndef MV_IMAPD_PROTOCOLS_H
#define MV_IMAPD_PROTOCOLS_H

#include "buf.h"
#include "conn.h"

/* main.c names them for its listeners. */
extern const struct conn_proto_ops imap_conn_proto;
extern const struct conn_proto_ops lmtp_conn_proto;
extern const struct conn_proto_ops control_conn_proto;

/* On the loop, after a job that may have changed a mailbox of user completed: every
 * session of user in IDLE (but except) looks for changes now (IDLE push). */
void imap_session_notify(const char *user, const void *except);

/* For the control requests, on the loop: the user of a logged-in IMAP connection, else NULL;
 * ending it with "* BYE text" (1), or, with a command in flight, taking no new command (0:
 * ask again once it is done); a "* session ..." line per session of c (their count). */
const char *imap_session_user(const struct conn *c);
int imap_session_kick(struct conn *c, const char *text);
int imap_session_who(const struct conn *c, struct buf *out);
int lmtp_session_who(const struct conn *c, struct buf *out);

#endif /* MV_IMAPD_PROTOCOLS_H */
