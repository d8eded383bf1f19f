/*
 * fuzz_ingest.c -- feeds arbitrary bytes to store_parse() as one message, the way a delivery
 * or an import would, and checks what store_parse.h promises.
 *
 * INPUT
 *   the whole input is the raw message; parsed with the default limits and split_min 1, so
 *   every non-empty leaf part becomes a range.
 *
 * CHECKS (abort() on failure)
 *   - the result is MV_OK, or MV_ELIMIT (too many or too large top-level header fields);
 *     on MV_ELIMIT the output struct is zeroed;
 *   - every string is non-NULL, NUL-terminated valid UTF-8 (strict: no overlong forms, no
 *     surrogates, nothing above U+10FFFF); text is within STORE_PARSE_TEXT_MAX; references
 *     are non-empty;
 *   - the part ranges are non-empty, inside the input, ascending and non-overlapping.
 *
 * Corpus: fuzz/corpus/ingest (written by tests/corpus/make_corpus.py: small corpus messages
 * and a few degenerate inputs), plus any crash found, kept as a regression input.
 */
#include "store/store_parse.h"

#include <glib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check_strings(const struct store_parsed *p)
{
    const char *strings[] = {p->subject,    p->from,        p->to,  p->cc,
                             p->message_id, p->in_reply_to, p->text};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        if (strings[i] == NULL || !g_utf8_validate(strings[i], -1, NULL)) {
            abort();
        }
    }
    if (strlen(p->text) > STORE_PARSE_TEXT_MAX) {
        abort();
    }
    if ((p->reference_count == 0) != (p->references == NULL) ||
        p->reference_count > STORE_PARSE_REFERENCES_MAX) {
        abort();
    }
    for (size_t i = 0; i < p->reference_count; i++) {
        if (p->references[i] == NULL || p->references[i][0] == '\0' ||
            !g_utf8_validate(p->references[i], -1, NULL)) {
            abort();
        }
    }
}

static void fuzz_check_parts(const struct store_parsed *p, size_t size)
{
    if ((p->part_count == 0) != (p->parts == NULL)) {
        abort();
    }
    for (size_t i = 0; i < p->part_count; i++) {
        /* (1) non-empty, (2) inside the input, (3) after the previous range */
        if (p->parts[i].start >= p->parts[i].end || p->parts[i].end > size ||
            (i > 0 && p->parts[i].start < p->parts[i - 1].end)) {
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct store_parsed parsed;
    char err[256];
    int rc = store_parse(data, size, NULL, 1, &parsed, err, sizeof err);
    if (rc == MV_ELIMIT) {
        if (parsed.subject != NULL || parsed.text != NULL || parsed.parts != NULL) {
            abort();
        }
        return 0;
    }
    if (rc != MV_OK) {
        abort();
    }
    fuzz_check_strings(&parsed);
    fuzz_check_parts(&parsed, size);
    store_parsed_free(&parsed);
    return 0;
}
