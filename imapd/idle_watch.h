/*
 * idle_watch.h -- IDLE for changes made by other processes (idle_watch.c; loop thread).
 */
#ifndef MV_IMAPD_IDLE_WATCH_H
#define MV_IMAPD_IDLE_WATCH_H

/* A session of user entered IDLE: watch its store (inotify), and imap_session_notify(user)
 * when another process changes it. Best effort: without inotify the IDLE poll is left. */
void idle_watch_add(const char *user);
/* A session of user left IDLE; the watch goes with the last one. */
void idle_watch_remove(const char *user);

#endif /* MV_IMAPD_IDLE_WATCH_H */
