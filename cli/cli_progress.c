/*
 * cli_progress.c -- one self-overwriting progress line on stderr while importing.
 *
 * USAGE
 *   struct cli_progress progress;
 *   cli_progress_init(&progress);                 (enabled only if stderr is a terminal)
 *   ... cli_progress_update(&progress, messages, bytes, bytes_total, 0); ...
 *   cli_progress_finish(&progress);
 *
 * IMPLEMENTATION NOTES
 *   "\r" returns to the start of the line and the new text is padded with spaces to the
 *   width of the previous one, so no terminal escape sequences are needed. Redraws are
 *   limited to ten a second: an import of small messages calls back thousands of times a
 *   second, and the terminal should not become the bottleneck. The percentage and the
 *   estimated time left are shown only when the library knows the input's total size and
 *   at least a second has passed (an estimate from the first few messages is noise).
 *   When stderr is not a terminal (a pipe, a log file, a test) nothing is drawn at all.
 */
#include "cli.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#define CLI_PROGRESS_REDRAW_MS    100
#define CLI_PROGRESS_ETA_AFTER_MS 1000

static int64_t cli_progress_now_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        return 0;
    }
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_progress_init(struct cli_progress *progress)
{
    memset(progress, 0, sizeof *progress);
    progress->enabled = isatty(STDERR_FILENO);
    progress->start_ms = cli_progress_now_ms();
    progress->last_draw_ms = progress->start_ms - CLI_PROGRESS_REDRAW_MS;
}

/* Appends "  45%  ETA 1:23" to line when the total is known. */
static void cli_progress_estimate(
    char *line, size_t line_size, uint64_t bytes, uint64_t bytes_total, int64_t elapsed_ms)
{
    size_t used = strlen(line);
    if (bytes_total == 0 || bytes > bytes_total) {
        return;
    }
    unsigned percent = (unsigned)(bytes * 100 / bytes_total);
    snprintf(line + used, line_size - used, "  %3u%%", percent);
    used = strlen(line);
    if (elapsed_ms < CLI_PROGRESS_ETA_AFTER_MS || bytes == 0) {
        return;
    }
    double left_s = (double)elapsed_ms / 1000.0 * (double)(bytes_total - bytes) / (double)bytes;
    unsigned long seconds = (unsigned long)(left_s + 0.5);
    snprintf(line + used, line_size - used, "  ETA %lu:%02lu", seconds / 60, seconds % 60);
}

void cli_progress_update(struct cli_progress *progress,
                         uint64_t messages,
                         uint64_t bytes,
                         uint64_t bytes_total,
                         int force)
{
    if (!progress->enabled) {
        return;
    }
    int64_t now_ms = cli_progress_now_ms();
    if (!force && now_ms - progress->last_draw_ms < CLI_PROGRESS_REDRAW_MS) {
        return;
    }
    progress->last_draw_ms = now_ms;
    char line[160];
    double mb = (double)bytes / 1e6;
    if (bytes_total > 0) {
        snprintf(line, sizeof line, "importing: %llu messages  %.1f/%.1f MB",
                 (unsigned long long)messages, mb, (double)bytes_total / 1e6);
    } else {
        snprintf(line, sizeof line, "importing: %llu messages  %.1f MB",
                 (unsigned long long)messages, mb);
    }
    cli_progress_estimate(line, sizeof line, bytes, bytes_total, now_ms - progress->start_ms);
    size_t width = strlen(line);
    int pad = progress->last_width > width ? (int)(progress->last_width - width) : 0;
    fprintf(stderr, "\r%s%*s", line, pad, "");
    fflush(stderr);
    progress->last_width = width;
}

void cli_progress_finish(struct cli_progress *progress)
{
    if (!progress->enabled || progress->last_width == 0) {
        return;
    }
    fprintf(stderr, "\r%*s\r", (int)progress->last_width, "");
    fflush(stderr);
    progress->last_width = 0;
}
