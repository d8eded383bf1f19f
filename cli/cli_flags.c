/*
 * cli_flags.c -- IMAP flag words on the command line and in output.
 *
 * USAGE
 *   struct cli_flags flags = {0};
 *   rc = cli_flags_add(&flags, "\\Seen,\\Flagged $Important");
 *   mv_flags_set(store, mailbox, set, MV_FLAGS_ADD, flags.bits, flags.keywords, NULL);
 *   cli_flags_free(&flags);
 *
 * IMPLEMENTATION NOTES
 *   The five system flags are spelt as IMAP spells them, with a backslash, in any case;
 *   every other word is a keyword and goes to the library as is, which validates it (atom
 *   characters, keyword_size_max, keywords_max). A word with a backslash that is not one
 *   of the five (\Recent, \Seenn) is refused here: \Recent belongs to the server session,
 *   and a typo should not quietly become a keyword.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *word;
    unsigned bit;
} cli_flags_table[] = {
    {"\\Seen", MV_FLAG_SEEN},       {"\\Answered", MV_FLAG_ANSWERED},
    {"\\Flagged", MV_FLAG_FLAGGED}, {"\\Deleted", MV_FLAG_DELETED},
    {"\\Draft", MV_FLAG_DRAFT},
};
#define CLI_FLAGS_COUNT (sizeof cli_flags_table / sizeof cli_flags_table[0])

const char *cli_flags_word(unsigned n, unsigned *bit_out)
{
    if (n >= CLI_FLAGS_COUNT) {
        return NULL;
    }
    *bit_out = cli_flags_table[n].bit;
    return cli_flags_table[n].word;
}

void cli_flags_free(struct cli_flags *flags)
{
    free(flags->keywords);
    flags->keywords = NULL;
    flags->keywords_size_bytes = 0;
    flags->bits = 0;
}

/* Appends " word" (or "word" first) to the keyword list. */
static int cli_flags_keyword(struct cli_flags *flags, const char *word, size_t length)
{
    size_t old_size = flags->keywords_size_bytes;
    size_t new_size = old_size + (old_size > 0 ? 1 : 0) + length;
    char *grown = realloc(flags->keywords, new_size + 1);
    if (grown == NULL) {
        cli_error("out of memory");
        return CLI_EXIT_OSERR;
    }
    if (old_size > 0) {
        grown[old_size++] = ' ';
    }
    memcpy(grown + old_size, word, length);
    grown[new_size] = '\0';
    flags->keywords = grown;
    flags->keywords_size_bytes = new_size;
    return CLI_EXIT_OK;
}

static int cli_flags_word_add(struct cli_flags *flags, const char *word, size_t length)
{
    if (word[0] != '\\') {
        return cli_flags_keyword(flags, word, length);
    }
    for (size_t i = 0; i < CLI_FLAGS_COUNT; i++) {
        const char *name = cli_flags_table[i].word;
        if (strlen(name) == length && strncasecmp(name, word, length) == 0) {
            flags->bits |= cli_flags_table[i].bit;
            return CLI_EXIT_OK;
        }
    }
    cli_error("unknown flag '%.*s' (system flags: \\Seen \\Answered \\Flagged \\Deleted "
              "\\Draft; keywords have no backslash)",
              (int)(length > 100 ? 100 : length), word);
    return CLI_EXIT_USAGE;
}

int cli_flags_add(struct cli_flags *flags, const char *list)
{
    const char *p = list;
    for (;;) {
        p += strspn(p, " ,");
        size_t length = strcspn(p, " ,");
        if (length == 0) {
            return CLI_EXIT_OK;
        }
        int rc = cli_flags_word_add(flags, p, length);
        if (rc != CLI_EXIT_OK) {
            return rc;
        }
        p += length;
    }
}
