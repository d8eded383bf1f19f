/*
 * cli_json.c -- a streaming JSON writer for --json output (RFC 8259).
 *
 * USAGE
 *   struct cli_json json;
 *   cli_json_document_begin(&json, stdout);         {"format_version": 2,
 *   cli_json_key(&json, "messages");                 "messages": [
 *   cli_json_array_begin(&json);
 *   cli_json_object_begin(&json);                      {"uid": 7}
 *   cli_json_key(&json, "uid");
 *   cli_json_uint(&json, 7);
 *   cli_json_object_end(&json);
 *   cli_json_array_end(&json);                       ]
 *   cli_json_object_end(&json);                    }
 *   if (cli_json_finish(&json) != 0) ... write error ...
 *
 * IMPLEMENTATION NOTES
 *   Why not a library (jansson, json-c): the tool only writes JSON, never parses it, and
 *   writing needs two things, comma placement and string escaping, which fit in this file;
 *   a library would be one more dependency to install, audit and keep up to date for that.
 *   Strings: '"' and '\' are escaped, control characters (U+0000..U+001F and DEL) become
 *   \n, \t, ... or \u00XX, U+2028/U+2029 become \u2028/\u2029 (legal JSON, but they end a
 *   line in JavaScript), and every byte that is not part of well-formed UTF-8 becomes
 *   \ufffd (mail headers are often mis-encoded; the output must still be valid JSON).
 *   Numbers are unsigned or signed 64-bit integers printed in full; readers that store them
 *   as doubles lose precision above 2^53, which no count or size here reaches.
 *   Layout: the members of the top-level object one per line (indented by two spaces), and
 *   the elements of a list member ("messages": [...]) one per line (four spaces); everything
 *   deeper on that line, so `grep` and `jq` both work on the output.
 *   Every document is an object that starts with "format_version" (CLI_JSON_FORMAT_VERSION,
 *   cli_json_document_begin()), so a reader can tell which vocabulary it reads.
 *
 * LIMITATIONS
 *   Nesting is limited to CLI_JSON_DEPTH_MAX levels; misuse (a value without a key in an
 *   object, unbalanced ends) is recorded and reported by cli_json_finish().
 */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

void cli_json_init(struct cli_json *json, FILE *out)
{
    memset(json, 0, sizeof *json);
    json->out = out;
}

/* A list member of the document object ("messages": [...]): its elements go one per line
 * too, so a long list stays greppable. */
static int cli_json_list_level(const struct cli_json *json, int level)
{
    return level == 2 && json->is_array[2] && !json->is_array[1];
}

/* Writes what must come before a value: a comma, and a newline in a top-level array. */
static void cli_json_before_value(struct cli_json *json)
{
    if (json->after_key) {
        json->after_key = 0;
        return;
    }
    int level = json->depth;
    if (level == 0) {
        if (json->count[0] > 0) {
            json->error = 1; /* a second top-level value */
        }
        json->count[0] = 1;
        return;
    }
    if (!json->is_array[level]) {
        json->error = 1; /* a value in an object needs a key first */
    }
    if (json->count[level] > 0) {
        fputc(',', json->out);
    }
    if (level == 1) {
        fputs("\n  ", json->out);
    } else if (cli_json_list_level(json, level)) {
        fputs("\n    ", json->out);
    } else if (json->count[level] > 0) {
        fputc(' ', json->out);
    }
    json->count[level] = 1;
}

static void cli_json_open(struct cli_json *json, int is_array)
{
    cli_json_before_value(json);
    fputc(is_array ? '[' : '{', json->out);
    if (json->depth + 1 >= CLI_JSON_DEPTH_MAX) {
        json->error = 1;
        return;
    }
    json->depth++;
    json->count[json->depth] = 0;
    json->is_array[json->depth] = (unsigned char)is_array;
}

static void cli_json_close(struct cli_json *json, int is_array)
{
    int level = json->depth;
    if (level == 0 || json->is_array[level] != is_array || json->after_key) {
        json->error = 1;
        return;
    }
    if (level == 1 && json->count[level] > 0) {
        fputc('\n', json->out);
    } else if (cli_json_list_level(json, level) && json->count[level] > 0) {
        fputs("\n  ", json->out);
    }
    fputc(is_array ? ']' : '}', json->out);
    json->depth--;
}

void cli_json_document_begin(struct cli_json *json, FILE *out)
{
    cli_json_init(json, out);
    cli_json_open(json, 0);
    cli_json_key(json, "format_version");
    cli_json_uint(json, CLI_JSON_FORMAT_VERSION);
}

void cli_json_object_begin(struct cli_json *json)
{
    cli_json_open(json, 0);
}

void cli_json_object_end(struct cli_json *json)
{
    cli_json_close(json, 0);
}

void cli_json_array_begin(struct cli_json *json)
{
    cli_json_open(json, 1);
}

void cli_json_array_end(struct cli_json *json)
{
    cli_json_close(json, 1);
}

/* Writes one escaped character of a string; returns the bytes it consumed. */
static size_t cli_json_escape_one(FILE *out, const unsigned char *s, size_t remaining)
{
    unsigned char c = s[0];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
        fputc(c, out);
        return 1;
    }
    if (c == '"' || c == '\\') {
        fputc('\\', out);
        fputc(c, out);
        return 1;
    }
    static const char short_escapes[] = "\bb\ff\nn\rr\tt";
    const char *found = c != 0 ? memchr(short_escapes, c, sizeof short_escapes - 1) : NULL;
    if (found != NULL && (found - short_escapes) % 2 == 0) {
        fputc('\\', out);
        fputc(found[1], out);
        return 1;
    }
    if (c < 0x80) { /* the other C0 controls and DEL */
        fprintf(out, "\\u%04x", c);
        return 1;
    }
    uint32_t code_point = 0;
    size_t length = cli_text_utf8_next(s, remaining, &code_point);
    if (length == 0) {
        fputs("\\ufffd", out);
        return 1;
    }
    if (code_point == 0x2028 || code_point == 0x2029) {
        fprintf(out, "\\u%04" PRIx32, code_point);
    } else {
        fwrite(s, 1, length, out);
    }
    return length;
}

void cli_json_string_n(struct cli_json *json, const char *text, size_t size_bytes)
{
    cli_json_before_value(json);
    const unsigned char *s = (const unsigned char *)text;
    fputc('"', json->out);
    size_t i = 0;
    while (i < size_bytes) {
        i += cli_json_escape_one(json->out, s + i, size_bytes - i);
    }
    fputc('"', json->out);
}

void cli_json_string(struct cli_json *json, const char *text)
{
    if (text == NULL) {
        cli_json_null(json);
        return;
    }
    cli_json_string_n(json, text, strlen(text));
}

void cli_json_key(struct cli_json *json, const char *key)
{
    int level = json->depth;
    if (level == 0 || json->is_array[level] || json->after_key) {
        json->error = 1;
        return;
    }
    json->is_array[level] = 1; /* let the key take the value's place for the comma logic */
    cli_json_string(json, key);
    json->is_array[level] = 0;
    fputs(": ", json->out);
    json->after_key = 1;
}

void cli_json_uint(struct cli_json *json, uint64_t value)
{
    cli_json_before_value(json);
    fprintf(json->out, "%" PRIu64, value);
}

void cli_json_int(struct cli_json *json, int64_t value)
{
    cli_json_before_value(json);
    fprintf(json->out, "%" PRId64, value);
}

void cli_json_bool(struct cli_json *json, int value)
{
    cli_json_before_value(json);
    fputs(value ? "true" : "false", json->out);
}

void cli_json_null(struct cli_json *json)
{
    cli_json_before_value(json);
    fputs("null", json->out);
}

int cli_json_finish(struct cli_json *json)
{
    if (json->depth != 0 || json->after_key) {
        json->error = 1;
    }
    fputc('\n', json->out);
    return json->error || ferror(json->out) ? -1 : 0;
}
