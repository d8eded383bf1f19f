/*
 * log.c -- one line per session event, to stderr (with a UTC timestamp) or syslog.
 * Callers never pass message contents, passwords or SASL responses.
 */
#include "imapd.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>
#include <time.h>

static int log_use_syslog;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void log_open(int use_syslog)
{
    log_use_syslog = use_syslog;
    if (use_syslog) {
        openlog("mailvaultd", LOG_PID | LOG_NDELAY, LOG_MAIL);
    }
}

void log_event(const char *fmt, ...)
{
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
        syslog(LOG_INFO, "%s", line);
        return;
    }
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s mailvaultd: %s\n", stamp, line);
    pthread_mutex_unlock(&log_lock);
}
