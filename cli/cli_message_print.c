/*
 * cli_message_print.c -- message rows for `list` and `search`, for people or as JSON.
 *
 * USAGE
 *   rc = cli_message_print_search(store, &query, limit, json, with_mailbox);
 *
 * IMPLEMENTATION NOTES
 *   Human output: a header line, then one line per message in fixed-width columns (UID,
 *   DATE in ISO 8601 UTC, SIZE in bytes, FLAGS, FROM), with SUBJECT last since it has no
 *   width limit; every string goes through cli_text_print() so that a hostile header
 *   cannot put escape sequences on the terminal. Nothing at all (not even the header) is
 *   printed when no message matches.
 *   JSON: one array, one object per message, every field in full (docs/CLI.md lists them).
 *   When a search fails half-way the JSON array is deliberately left unclosed: a reader
 *   that ignores the exit status gets a parse error rather than a silently short list.
 *   Rows are printed as the iterator returns them, since its strings are only valid until
 *   the next call, so memory stays flat whatever the number of messages.
 */
#include "cli.h"

#include <string.h>

#define CLI_MESSAGE_FLAGS_WIDTH   20
#define CLI_MESSAGE_FROM_WIDTH    28
#define CLI_MESSAGE_MAILBOX_WIDTH 16

void cli_message_print_begin(struct cli_message_printer *printer, int json, int with_mailbox)
{
    memset(printer, 0, sizeof *printer);
    printer->json = json;
    printer->with_mailbox = with_mailbox;
    if (json) {
        cli_json_document_begin(&printer->writer, stdout);
        cli_json_key(&printer->writer, "messages");
        cli_json_array_begin(&printer->writer);
    }
}

/* The flags as IMAP words, then the keywords, space-separated (truncated to fit). */
static void cli_message_flags_text(const struct mv_message_info *info, char *buf, size_t buf_size)
{
    size_t used = 0;
    buf[0] = '\0';
    unsigned bit = 0;
    const char *word = NULL;
    for (unsigned n = 0; (word = cli_flags_word(n, &bit)) != NULL; n++) {
        if ((info->flags & bit) && used < buf_size) {
            int written = snprintf(buf + used, buf_size - used, "%s%s", used ? " " : "", word);
            used += written > 0 ? (size_t)written : 0;
        }
    }
    if (info->keywords != NULL && info->keywords[0] != '\0' && used < buf_size) {
        snprintf(buf + used, buf_size - used, "%s%s", used ? " " : "", info->keywords);
    }
}

static void cli_message_print_human(struct cli_message_printer *printer,
                                    const struct mv_message_info *info)
{
    if (printer->rows == 0) {
        if (printer->with_mailbox) {
            printf("%-*s ", CLI_MESSAGE_MAILBOX_WIDTH, "MAILBOX");
        }
        printf("%6s %-20s %9s %-*s %-*s %s\n", "UID", "DATE", "SIZE", CLI_MESSAGE_FLAGS_WIDTH,
               "FLAGS", CLI_MESSAGE_FROM_WIDTH, "FROM", "SUBJECT");
    }
    if (printer->with_mailbox) {
        cli_text_print(stdout, info->mailbox, CLI_MESSAGE_MAILBOX_WIDTH, CLI_MESSAGE_MAILBOX_WIDTH);
        fputc(' ', stdout);
    }
    char date[32];
    cli_text_time_iso(info->internal_date, date, sizeof date);
    printf("%6lu %-20s %9llu ", (unsigned long)info->uid, date, (unsigned long long)info->size);
    char flags[256];
    cli_message_flags_text(info, flags, sizeof flags);
    cli_text_print(stdout, flags, CLI_MESSAGE_FLAGS_WIDTH, CLI_MESSAGE_FLAGS_WIDTH);
    fputc(' ', stdout);
    cli_text_print(stdout, info->from, CLI_MESSAGE_FROM_WIDTH, CLI_MESSAGE_FROM_WIDTH);
    fputc(' ', stdout);
    cli_text_print(stdout, info->subject, 0, 0);
    fputc('\n', stdout);
}

/* "flags": ["\\Seen", ...], "keywords": ["$Label", ...] */
static void cli_message_json_flags(struct cli_json *json, const struct mv_message_info *info)
{
    cli_json_key(json, "flags");
    cli_json_array_begin(json);
    unsigned bit = 0;
    const char *word = NULL;
    for (unsigned n = 0; (word = cli_flags_word(n, &bit)) != NULL; n++) {
        if (info->flags & bit) {
            cli_json_string(json, word);
        }
    }
    cli_json_array_end(json);
    cli_json_key(json, "keywords");
    cli_json_array_begin(json);
    const char *p = info->keywords != NULL ? info->keywords : "";
    for (;;) {
        p += strspn(p, " ");
        size_t length = strcspn(p, " ");
        if (length == 0) {
            break;
        }
        cli_json_string_n(json, p, length);
        p += length;
    }
    cli_json_array_end(json);
}

static void cli_message_json_date(struct cli_json *json, const char *key, int64_t unix_seconds)
{
    cli_json_key(json, key);
    if (unix_seconds == 0) {
        cli_json_null(json);
        return;
    }
    char date[32];
    cli_text_time_iso(unix_seconds, date, sizeof date);
    cli_json_string(json, date);
}

static void cli_message_print_json(struct cli_json *json, const struct mv_message_info *info)
{
    cli_json_object_begin(json);
    cli_json_key(json, "mailbox");
    cli_json_string(json, info->mailbox);
    cli_json_key(json, "uid");
    cli_json_uint(json, info->uid);
    cli_json_key(json, "modseq");
    cli_json_uint(json, info->modseq);
    cli_message_json_date(json, "date", info->internal_date);
    cli_message_json_date(json, "sent_date", info->sent_date);
    cli_json_key(json, "size_bytes");
    cli_json_uint(json, info->size);
    cli_message_json_flags(json, info);
    static const char *const keys[] = {"from", "to", "cc", "subject", "message_id", "in_reply_to"};
    const char *const values[] = {info->from,    info->to,         info->cc,
                                  info->subject, info->message_id, info->in_reply_to};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        cli_json_key(json, keys[i]);
        cli_json_string(json, values[i] != NULL ? values[i] : "");
    }
    cli_json_key(json, "thread_id");
    cli_json_int(json, info->thread_id);
    cli_json_object_end(json);
}

void cli_message_print_row(struct cli_message_printer *printer, const struct mv_message_info *info)
{
    if (printer->json) {
        cli_message_print_json(&printer->writer, info);
    } else {
        cli_message_print_human(printer, info);
    }
    printer->rows++;
}

int cli_message_print_end(struct cli_message_printer *printer)
{
    int json_rc = 0;
    if (printer->json) {
        cli_json_array_end(&printer->writer);
        cli_json_object_end(&printer->writer);
        json_rc = cli_json_finish(&printer->writer);
    }
    int rc = cli_store_flush_stdout();
    if (rc == CLI_EXIT_OK && json_rc != 0) {
        cli_error("cannot write the JSON output");
        rc = CLI_EXIT_IOERR;
    }
    return rc;
}

int cli_message_print_search(mv_store *store,
                             const struct mv_search_query *query,
                             uint64_t limit,
                             int json,
                             int with_mailbox)
{
    mv_search *search = NULL;
    int mv_rc = mv_search_begin(store, query, &search);
    if (mv_rc != MV_OK) {
        return cli_store_fail(store, mv_rc);
    }
    struct cli_message_printer printer;
    cli_message_print_begin(&printer, json, with_mailbox);
    struct mv_message_info info;
    int next = 0;
    while ((limit == 0 || printer.rows < limit) && (next = mv_search_next(search, &info)) > 0) {
        cli_message_print_row(&printer, &info);
    }
    int rc = CLI_EXIT_OK;
    if (next < 0) {
        rc = cli_store_fail(store, next);
        (void)cli_store_flush_stdout();
    } else {
        rc = cli_message_print_end(&printer);
    }
    mv_search_end(&search);
    return rc;
}
