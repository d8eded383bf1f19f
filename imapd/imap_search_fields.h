/*
 * imap_search_fields.h -- SEARCH's HEADER and BCC keys tested against one message's header,
 * all of a program's keys in one walk over its fields (imap_search_fields.c).
 *
 * USAGE
 *   struct imap_fields_matcher *m;
 *   rc = imap_fields_matcher_new(names, values, n, &m);   // n tests, strings copied
 *   for each message:
 *       memset(found, 0, n);
 *       imap_fields_matcher_run(m, header, header_len, found);
 *   imap_fields_matcher_free(m);
 *
 * WHAT A TEST MEANS
 *   found[j] becomes 1 when the header has a field named names[j] (ASCII case ignored,
 *   blanks between the name and its colon ignored) whose value, unfolded (the line breaks of
 *   continuation lines removed, RFC 5322 2.2.3, a NUL read as a space) and with its RFC 2047
 *   encoded words decoded, contains values[j], Unicode case folded on both sides (RFC 3501
 *   6.4.4 HEADER; Dovecot 2.3 compares the decoded text too); an empty value matches any
 *   field of that name. Tests already found are left as they are.
 */
#ifndef MV_IMAPD_IMAP_SEARCH_FIELDS_H
#define MV_IMAPD_IMAP_SEARCH_FIELDS_H

#include <stddef.h>

struct imap_fields_matcher;

/* A matcher for n tests (names[j], values[j]: NUL-terminated, copied). MV_OK or MV_ENOMEM;
 * *out is freed with imap_fields_matcher_free. */
int imap_fields_matcher_new(const char *const *names,
                            const char *const *values,
                            size_t n,
                            struct imap_fields_matcher **out);
/* Marks found[j] for each test the header (len bytes, up to its first empty line) passes.
 * MV_OK, or MV_ENOMEM with found[] holding what was found before memory ran out. */
int imap_fields_matcher_run(struct imap_fields_matcher *m,
                            const char *header,
                            size_t len,
                            unsigned char *found);
/* The fields of the header (len bytes, up to its first empty line) that m has tests for,
 * each whole (name, colon, value, every line break, continuation lines included) and in the
 * header's order: put(arg, bytes, n) for each, until put returns other than MV_OK (that code
 * returned). A matcher's run over the picked fields one after another marks exactly what it
 * marks over the whole header, for any tests of those field names: the fields are found by
 * the run's own walk, and each begins a line no continuation line begins (SEARCH keeps a
 * mailbox's Message-ID fields so, imap_search_msgid.c). MV_OK or put's code. */
int imap_fields_matcher_pick(const struct imap_fields_matcher *m,
                             const char *header,
                             size_t len,
                             int (*put)(void *arg, const char *bytes, size_t n),
                             void *arg);
void imap_fields_matcher_free(struct imap_fields_matcher *m);

/* text with its case folded by Unicode's full case folding (g_utf8_casefold of its valid
 * UTF-8 form: an invalid byte becomes U+FFFD), as the store folds FROM/TO/CC/SUBJECT; NULL
 * if out of memory. Owned by the caller (g_free). */
char *imap_search_fold(const char *text);

#endif
