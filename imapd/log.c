/*
 * log.c -- one line per event, with a level, to stderr (with a UTC timestamp and the level's
 * name) or to syslog (facility mail, the level as the priority).
 *
 * USAGE
 *   log_open(use_syslog, LOG_LEVEL_INFO);           (the `log` and `log_level` settings)
 *   log_error("store %s: %s", address, why);        a failure the operator must look at
 *   log_warning(...);                               refused or degraded, the server goes on
 *   log_info(...);                                  the normal course: connects, logins
 *   log_debug(...);                                 detail for finding a problem
 *   Lines below the configured level cost one comparison: nothing is formatted.
 *
 * IMPLEMENTATION NOTES
 *   Levels map to syslog priorities LOG_ERR, LOG_WARNING, LOG_INFO and LOG_DEBUG, which
 *   journald keeps as PRIORITY= (journalctl -p warning). On stderr a line reads
 *   "2024-03-01T12:00:00Z mailvaultd: warning: TEXT". Control characters in the text become
 *   '?': one event, one line, whatever a client sent. Callers never pass message contents,
 *   passwords or SASL responses. Any thread may log; stderr lines are written under a
 *   mutex so they never interleave.
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

static int log_use_syslog;
static atomic_int log_threshold = LOG_LEVEL_INFO;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct {
    const char *name;
    int priority;
} log_levels[] = {
    [LOG_LEVEL_ERROR] = {"error", LOG_ERR},
    [LOG_LEVEL_WARNING] = {"warning", LOG_WARNING},
    [LOG_LEVEL_INFO] = {"info", LOG_INFO},
    [LOG_LEVEL_DEBUG] = {"debug", LOG_DEBUG},
};

int log_level_parse(const char *name)
{
    for (int i = 0; i < (int)(sizeof log_levels / sizeof log_levels[0]); i++) {
        if (strcmp(name, log_levels[i].name) == 0) {
            return i;
        }
    }
    return -1;
}

void log_open(int use_syslog, enum log_level threshold)
{
    log_use_syslog = use_syslog;
    atomic_store(&log_threshold, (int)threshold);
    if (use_syslog) {
        openlog("mailvaultd", LOG_PID | LOG_NDELAY, LOG_MAIL);
    }
}

int log_enabled(enum log_level level)
{
    return (int)level <= atomic_load_explicit(&log_threshold, memory_order_relaxed);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level)) {
        return;
    }
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    for (char *p = line; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20) {
            *p = '?'; /* one event, one line */
        }
    }
    if (log_use_syslog) {
        syslog(log_levels[level].priority, "%s", line);
        return;
    }
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s mailvaultd: %s: %s\n", stamp, log_levels[level].name, line);
    pthread_mutex_unlock(&log_lock);
}
