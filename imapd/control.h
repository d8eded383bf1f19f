/*
 * control.h -- the control socket (control.c, docs/CONTROL.md): listening, the held users,
 * and helpers of its reply lines. Its protocol table is in protocols.h.
 */
#ifndef MV_IMAPD_CONTROL_H
#define MV_IMAPD_CONTROL_H

#include "buf.h"

#include <stddef.h>
#include <stdint.h>

/* Listens on path (owner-only; a stale socket of ours is replaced, anything else refused).
 * 0, or -1 with the reason in err. Call before any thread exists (it sets the umask). */
int control_listen(const char *path, char *err, size_t err_size);
/* Closes the socket and removes it (if it is still ours). */
void control_close(void);
/* After the workers stopped and their jobs were collected: ends the requests left. */
void control_shutdown(void);
void control_tick(int64_t now_ms);
/* Whether a release of user is in progress (any thread): LOGIN and RCPT are refused. */
int control_user_held(const char *user);
/* Appends a value of a reply line: bytes outside '!'..'~' and '%' as %XX; "" as "-". */
void control_value(struct buf *b, const char *text);
/* The Unix time (s) of a loop_now_ms() time stamp. */
long long control_wall_s(int64_t loop_ms);

#endif /* MV_IMAPD_CONTROL_H */
