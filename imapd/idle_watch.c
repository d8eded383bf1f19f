/*
 * idle_watch.c -- IDLE for changes made by other processes: the loop watches, with inotify,
 * the stores that sessions IDLE on, and wakes those sessions when another process (the
 * mailvault CLI importing, a second server on the same root) commits to one.
 *
 * Changes made through this server already wake the IDLE sessions of their user
 * (imap_session_notify after the job); before this file, other writers were seen only by
 * the IMAP_IDLE_POLL_MS poll (30 s).
 *
 * USAGE (loop thread only)
 *   idle_watch_add(user)      a session of user entered IDLE
 *   idle_watch_remove(user)   it left IDLE (DONE, or the connection went)
 *   When the store of a watched user changes, the loop calls imap_session_notify(user, NULL).
 *
 * IMPLEMENTATION NOTES
 *   - One inotify instance, made at the first IDLE and kept, in the loop's epoll set. The
 *     library says what to watch (mv_store_watch_target: a directory and the store's name
 *     in it) and which events count (mv_store_watch_match): this file knows nothing of the
 *     store's files. The watch is on the directory (one per directory, shared by the
 *     watched users whose stores are in it, removed with the last one).
 *   - Coalescing: the first change after a quiet spell notifies at once; changes within
 *     IDLE_WATCH_COALESCE_MS of a notification are gathered into one more notification when
 *     that interval ends (a timerfd). An import of thousands of messages costs each IDLE
 *     session one sync per interval, not one per message. A session still busy with a sync
 *     when it is notified looks again once it is done (imap_session_notify), never twice.
 *   - Our own commits wake the watch too: the sessions of that user then look once more,
 *     which costs one mv_mailbox_status each when nothing changed for them.
 *   - Between reads the fd leaves the epoll set for an interval (idle_watch_pause): events
 *     queue in the kernel meanwhile without waking the loop, so a writer in this process
 *     does not pay a wake-up per write.
 *   - mv_store_watch_target builds the paths without touching the files: the loop thread
 *     never opens a store's file. (Opening
 *     and closing it in a process that has the store open would drop every POSIX lock SQLite
 *     holds on it there; an early version of this file did, through mv_store_file_inspect,
 *     and corrupted a store in testing. The library has since made that call safe: see
 *     src/store/store_files.h.)
 *
 * LIMITATIONS
 *   At most IDLE_WATCH_STORES_MAX users are watched at once; beyond that, and whenever
 *   inotify is unavailable or refuses a watch (fs.inotify.max_user_watches), a session
 *   falls back to the IMAP_IDLE_POLL_MS poll, which runs in every case. Changes on a network
 *   file system made by another machine are not reported by inotify: the poll again.
 */
#include "idle_watch.h"
#include "config.h"
#include "imap_session.h" /* IMAP_IDLE_POLL_MS */
#include "log.h"
#include "loop.h"
#include "mailvault.h"
#include "protocols.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define IDLE_WATCH_STORES_MAX  1024
#define IDLE_WATCH_COALESCE_MS 200

struct idle_watch_dir {
    char *path;
    int wd; /* -1 once the kernel dropped the watch (the directory went) */
    int refs;
};

struct idle_watch_store {
    char user[MV_ADDRESS_MAX + 1];
    char *name; /* the store's name in dir (mv_store_watch_target) */
    struct idle_watch_dir *dir;
    int refs;    /* sessions of user in IDLE */
    int pending; /* a change to notify at last_notify_ms + IDLE_WATCH_COALESCE_MS */
    int64_t last_notify_ms;
};

static int idle_watch_fd = -1, idle_watch_timer_fd = -1;
/* The inotify fd is out of the loop's epoll set until idle_watch_resume_ms (pause below). */
static int idle_watch_paused;
static int64_t idle_watch_resume_ms;
static int idle_watch_broken; /* inotify could not be set up: the poll alone */
static struct loop_handler idle_watch_handler, idle_watch_timer_handler;
static struct idle_watch_store *idle_watch_stores[IDLE_WATCH_STORES_MAX];
static size_t idle_watch_store_count;
static struct idle_watch_dir *idle_watch_dirs[IDLE_WATCH_STORES_MAX];
static size_t idle_watch_dir_count;

static void idle_watch_timer_arm(int64_t due_ms)
{
    int64_t wait_ms = due_ms - loop_now_ms();
    if (wait_ms < 1) {
        wait_ms = 1; /* 0 would disarm the timer */
    }
    struct itimerspec its = {0};
    its.it_value.tv_sec = (time_t)(wait_ms / 1000);
    its.it_value.tv_nsec = (long)(wait_ms % 1000) * 1000000L;
    (void)timerfd_settime(idle_watch_timer_fd, 0, &its, NULL);
}

/* Arms the timer for the earliest of: a change still gathering, the end of a pause. */
static void idle_watch_rearm(void)
{
    int64_t next =
        idle_watch_paused && idle_watch_resume_ms != INT64_MAX ? idle_watch_resume_ms : 0;
    for (size_t i = 0; i < idle_watch_store_count; i++) {
        const struct idle_watch_store *st = idle_watch_stores[i];
        int64_t due = st->last_notify_ms + IDLE_WATCH_COALESCE_MS;
        if (st->pending && (next == 0 || due < next)) {
            next = due;
        }
    }
    if (next != 0) {
        idle_watch_timer_arm(next);
    }
}

/* Notifies what is due. */
static void idle_watch_flush(void)
{
    int64_t now = loop_now_ms();
    for (size_t i = 0; i < idle_watch_store_count; i++) {
        struct idle_watch_store *st = idle_watch_stores[i];
        if (st->pending && now >= st->last_notify_ms + IDLE_WATCH_COALESCE_MS) {
            st->pending = 0;
            st->last_notify_ms = now;
            imap_session_notify(st->user, NULL);
        }
    }
}

static void idle_watch_changed(struct idle_watch_store *st)
{
    int64_t now = loop_now_ms();
    if (!st->pending && now - st->last_notify_ms >= IDLE_WATCH_COALESCE_MS) {
        st->last_notify_ms = now;
        imap_session_notify(st->user, NULL);
        return;
    }
    st->pending = 1; /* the timer (idle_watch_rearm) notifies at the interval's end */
}

/* One event: the stores of the directory that the named file belongs to. */
static void idle_watch_event(const struct inotify_event *ev)
{
    for (size_t i = 0; i < idle_watch_store_count; i++) {
        struct idle_watch_store *st = idle_watch_stores[i];
        if (st->dir->wd != ev->wd) {
            continue;
        }
        if ((ev->mask & IN_IGNORED) != 0) {
            st->dir->wd = -1; /* the directory went: the poll is left */
            continue;
        }
        if (ev->len > 0 && mv_store_watch_match(st->name, ev->name)) {
            idle_watch_changed(st);
        }
    }
}

/* Reads every queued event; whether there was any. */
static int idle_watch_read_events(void)
{
    /* Aligned for struct inotify_event; room for several events with names. */
    _Alignas(struct inotify_event) char buf[8192];
    int any = 0;
    for (;;) {
        ssize_t n = read(idle_watch_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) {
            continue; /* edge-triggered: stopping before EAGAIN could strand events */
        }
        if (n <= 0) {
            return any; /* EAGAIN: drained */
        }
        any = 1;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
            if ((ev->mask & IN_Q_OVERFLOW) != 0) {
                for (size_t i = 0; i < idle_watch_store_count; i++) {
                    idle_watch_changed(idle_watch_stores[i]); /* events were lost */
                }
            } else {
                idle_watch_event(ev);
            }
            p += sizeof *ev + ev->len;
        }
    }
}

/* After events, the fd leaves the loop's epoll set for IDLE_WATCH_COALESCE_MS: the writes
 * that follow then queue in the kernel (identical events merged) without waking this
 * thread. Our own drain writes the WAL thousands of times a second, and each write's wake-up
 * of this thread cost the writer ~5% of its time (issue 13). What changes meanwhile is
 * gathered as before (idle_watch_changed); the timer reads it when it puts the fd back. */
static void idle_watch_pause(void)
{
    if (!idle_watch_paused) {
        loop_del(idle_watch_fd, &idle_watch_handler);
        idle_watch_paused = 1;
        idle_watch_resume_ms = loop_now_ms() + IDLE_WATCH_COALESCE_MS;
    }
}

static void idle_watch_readable(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    if (idle_watch_read_events()) {
        idle_watch_pause();
    }
    idle_watch_rearm();
}

static void idle_watch_timer(void *arg, uint32_t events)
{
    (void)arg;
    (void)events;
    uint64_t expirations;
    if (read(idle_watch_timer_fd, &expirations, sizeof expirations) < 0) {
        /* EAGAIN: nothing expired since the last read */
    }
    if (idle_watch_paused && loop_now_ms() >= idle_watch_resume_ms) {
        idle_watch_paused = 0;
        if (loop_add(idle_watch_fd, EPOLLIN | EPOLLET, &idle_watch_handler) != 0) {
            log_warning("IDLE: cannot watch again (errno %d): changes by other processes are "
                        "seen by the %d s poll",
                        errno, IMAP_IDLE_POLL_MS / 1000);
            idle_watch_paused = 1;
            idle_watch_resume_ms = INT64_MAX; /* never again */
        } else if (idle_watch_read_events()) {
            idle_watch_pause(); /* still changing: another interval */
        }
    }
    idle_watch_flush();
    idle_watch_rearm();
}

/* The inotify instance and the timer, once. 0, or -1 (then never again: the poll). */
static int idle_watch_init(void)
{
    if (idle_watch_fd >= 0) {
        return 0;
    }
    if (idle_watch_broken) {
        return -1;
    }
    idle_watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    idle_watch_timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    idle_watch_handler.fn = idle_watch_readable;
    idle_watch_timer_handler.fn = idle_watch_timer;
    if (idle_watch_fd < 0 || idle_watch_timer_fd < 0 ||
        loop_add(idle_watch_fd, EPOLLIN | EPOLLET, &idle_watch_handler) != 0 ||
        loop_add(idle_watch_timer_fd, EPOLLIN | EPOLLET, &idle_watch_timer_handler) != 0) {
        log_warning("IDLE: no inotify (errno %d): changes by other processes are seen by the "
                    "%d s poll",
                    errno, IMAP_IDLE_POLL_MS / 1000);
        if (idle_watch_fd >= 0) {
            loop_del(idle_watch_fd, &idle_watch_handler);
            close(idle_watch_fd);
        }
        if (idle_watch_timer_fd >= 0) {
            loop_del(idle_watch_timer_fd, &idle_watch_timer_handler);
            close(idle_watch_timer_fd);
        }
        idle_watch_fd = idle_watch_timer_fd = -1;
        idle_watch_broken = 1;
        return -1;
    }
    return 0;
}

static struct idle_watch_dir *idle_watch_dir_get(const char *path)
{
    for (size_t i = 0; i < idle_watch_dir_count; i++) {
        if (strcmp(idle_watch_dirs[i]->path, path) == 0 && idle_watch_dirs[i]->wd >= 0) {
            idle_watch_dirs[i]->refs++;
            return idle_watch_dirs[i];
        }
    }
    struct idle_watch_dir *d = calloc(1, sizeof *d);
    if (d == NULL || (d->path = strdup(path)) == NULL) {
        free(d);
        return NULL;
    }
    d->wd = inotify_add_watch(idle_watch_fd, path, IN_MODIFY | IN_MOVED_TO | IN_ONLYDIR);
    if (d->wd < 0) {
        log_warning("IDLE: cannot watch %s (errno %d): the poll is left", path, errno);
        free(d->path);
        free(d);
        return NULL;
    }
    d->refs = 1;
    idle_watch_dirs[idle_watch_dir_count++] = d; /* fewer dirs than stores: room is there */
    return d;
}

static void idle_watch_dir_put(struct idle_watch_dir *d)
{
    if (--d->refs > 0) {
        return;
    }
    if (d->wd >= 0) {
        (void)inotify_rm_watch(idle_watch_fd, d->wd);
    }
    for (size_t i = 0; i < idle_watch_dir_count; i++) {
        if (idle_watch_dirs[i] == d) {
            idle_watch_dirs[i] = idle_watch_dirs[--idle_watch_dir_count];
            break;
        }
    }
    free(d->path);
    free(d);
}

static struct idle_watch_store *idle_watch_find(const char *user)
{
    for (size_t i = 0; i < idle_watch_store_count; i++) {
        if (strcmp(idle_watch_stores[i]->user, user) == 0) {
            return idle_watch_stores[i];
        }
    }
    return NULL;
}

void idle_watch_add(const char *user)
{
    struct idle_watch_store *st = idle_watch_find(user);
    if (st != NULL) {
        st->refs++;
        return;
    }
    if (idle_watch_store_count == IDLE_WATCH_STORES_MAX || idle_watch_init() != 0) {
        return; /* the poll */
    }
    struct mv_store_options opts = config_store_options(&g_config);
    char dir[MV_PATH_MAX], name[MV_PATH_MAX];
    if (mv_store_watch_target(user, &opts, dir, sizeof dir, name, sizeof name) != MV_OK) {
        return; /* the poll */
    }
    st = calloc(1, sizeof *st);
    if (st == NULL || (st->name = strdup(name)) == NULL) {
        free(st);
        return;
    }
    st->dir = idle_watch_dir_get(dir);
    if (st->dir == NULL) {
        free(st->name);
        free(st);
        return;
    }
    snprintf(st->user, sizeof st->user, "%s", user);
    st->refs = 1;
    st->last_notify_ms = loop_now_ms() - IDLE_WATCH_COALESCE_MS;
    idle_watch_stores[idle_watch_store_count++] = st;
}

void idle_watch_remove(const char *user)
{
    struct idle_watch_store *st = idle_watch_find(user);
    if (st == NULL || --st->refs > 0) {
        return; /* not watched (the poll), or other sessions still IDLE */
    }
    for (size_t i = 0; i < idle_watch_store_count; i++) {
        if (idle_watch_stores[i] == st) {
            idle_watch_stores[i] = idle_watch_stores[--idle_watch_store_count];
            break;
        }
    }
    idle_watch_dir_put(st->dir);
    free(st->name);
    free(st);
}
