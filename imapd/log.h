/*
 * log.h -- the server's log (log.c): levels, stderr or syslog.
 */
#ifndef MV_IMAPD_LOG_H
#define MV_IMAPD_LOG_H

/* The levels, most severe first; syslog priorities LOG_ERR .. LOG_DEBUG. */
enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARNING, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
/* "error", "warning", "info", "debug" -> the level, or -1. */
int log_level_parse(const char *name);
/* Lines above threshold (less severe) are dropped. */
void log_open(int use_syslog, enum log_level threshold);
int log_enabled(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_error(...)   log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_info(...)    log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...)   log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
/* An event of the normal course (info): the name code written before the levels uses. */
#define log_event(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)

#endif /* MV_IMAPD_LOG_H */
