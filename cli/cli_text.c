/*
 * cli_text.c -- text meant for people: safe to print on a terminal, dates, sizes.
 *
 * IMPLEMENTATION NOTES
 *   Subjects and addresses come from whoever sent the mail. Printed raw on a terminal, an
 *   ESC or C1 control sequence could retitle the window, move the cursor or hide lines, so
 *   the human output passes every string through cli_text_print(), which replaces control
 *   characters and malformed UTF-8 with '?'. The JSON output escapes them instead
 *   (cli_json.c), so nothing is lost there.
 *
 * LIMITATIONS
 *   Widths count code points, not terminal columns: East Asian wide characters and
 *   combining marks make a column wider or narrower than intended.
 */
#include "cli.h"

#include <string.h>
#include <time.h>

size_t cli_text_utf8_next(const unsigned char *s, size_t size_bytes, uint32_t *code_point)
{
    unsigned char c = s[0];
    size_t length;
    uint32_t value, min;
    if (c < 0x80) {
        *code_point = c;
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        length = 2, value = c & 0x1fu, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        length = 3, value = c & 0x0fu, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        length = 4, value = c & 0x07u, min = 0x10000;
    } else {
        return 0; /* a continuation byte, 0xc0/0xc1 (always overlong) or 0xf5.. */
    }
    if (length > size_bytes) {
        return 0;
    }
    for (size_t i = 1; i < length; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            return 0;
        }
        value = (value << 6) | (s[i] & 0x3fu);
    }
    /* (1) overlong, (2) a UTF-16 surrogate, (3) beyond Unicode. */
    if (value < min || (value >= 0xd800 && value <= 0xdfff) || value > 0x10ffff) {
        return 0;
    }
    *code_point = value;
    return length;
}

/* Whether a code point is a control character: C0, DEL, C1. */
static int cli_text_is_control(uint32_t code_point)
{
    return code_point < 0x20 || (code_point >= 0x7f && code_point <= 0x9f);
}

size_t cli_text_print(FILE *out, const char *text, size_t width_max, size_t pad_width)
{
    const unsigned char *s = (const unsigned char *)(text != NULL ? text : "");
    size_t remaining = strlen((const char *)s);
    size_t printed = 0;
    while (remaining > 0) {
        uint32_t code_point = 0;
        size_t length = cli_text_utf8_next(s, remaining, &code_point);
        size_t step = length == 0 ? 1 : length; /* a bad byte is one '?' */
        if (width_max > 0 && printed + 1 == width_max && step < remaining) {
            fputc('~', out); /* the last column says "there is more" */
            printed++;
            break;
        }
        if (length == 0 || cli_text_is_control(code_point)) {
            fputc('?', out);
        } else {
            fwrite(s, 1, length, out);
        }
        s += step;
        remaining -= step;
        printed++;
    }
    for (size_t i = printed; i < pad_width; i++) {
        fputc(' ', out);
    }
    return printed;
}

void cli_text_time_iso(int64_t unix_seconds, char *buf, size_t buf_size)
{
    time_t t = (time_t)unix_seconds;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(buf, buf_size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        snprintf(buf, buf_size, "@%lld", (long long)unix_seconds);
    }
}

void cli_text_size(uint64_t size_bytes, char *buf, size_t buf_size)
{
    static const char *const units[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
    if (size_bytes < 1000) {
        snprintf(buf, buf_size, "%llu B", (unsigned long long)size_bytes);
        return;
    }
    double value = (double)size_bytes / 1000.0;
    size_t unit = 0;
    while (value >= 999.95 && unit + 1 < sizeof units / sizeof units[0]) {
        value /= 1000.0;
        unit++;
    }
    snprintf(buf, buf_size, "%.1f %s", value, units[unit]);
}
