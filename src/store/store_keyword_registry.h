/*
 * store_keyword_registry.h -- the keywords each mailbox defines, bounded by
 * limits.mailbox_keywords_max (store_keyword_registry.c). Both calls run inside the caller's
 * write transaction and, on MV_ELIMIT, leave the caller to roll it back.
 */
#ifndef MV_STORE_KEYWORD_REGISTRY_H
#define MV_STORE_KEYWORD_REGISTRY_H

#include "store/store.h"

#include <stdint.h>

struct store_uidset;

/* A CTE over every message that carries keywords: words(mailbox_id, word, rest), one row per
 * keyword (rows with word '' are the split's steps: skip them). Lists are stored normalised,
 * atoms joined by single spaces. For the version 13 migration, mv_store_check's "keywords"
 * and mv_store_repair, which all want the keywords the messages carry. */
#define STORE_KEYWORD_WORDS_OF_MESSAGES                                                            \
    "WITH RECURSIVE words(mailbox_id, word, rest) AS (SELECT mailbox_id, '', keywords || ' ' "     \
    "FROM messages WHERE keywords != '' UNION ALL SELECT mailbox_id, substr(rest, 1, "             \
    "instr(rest, ' ') - 1), substr(rest, instr(rest, ' ') + 1) FROM words WHERE rest != '') "
/* ... and the statement that defines them in their mailboxes (the migration, the repair). */
#define STORE_KEYWORD_DEFINE_CARRIED                                                               \
    STORE_KEYWORD_WORDS_OF_MESSAGES "INSERT OR IGNORE INTO mailbox_keywords(mailbox_id, name) "    \
                                    "SELECT mailbox_id, word FROM words WHERE word != ''"

/* Defines the keywords of list (normalised: atoms joined by single spaces; NULL or "" is
 * none) in mailbox_id. MV_OK, MV_ELIMIT (the mailbox would define more than
 * mailbox_keywords_max; the message names it) or an SQLite error. */
int store_keywords_register(mv_store *s, int64_t mailbox_id, const char *list);

/* Defines in to_id the keywords the messages of from_id in set carry (a COPY or MOVE; call
 * it before a MOVE changes the rows). Same results. */
int store_keywords_register_set(mv_store *s,
                                int64_t from_id,
                                int64_t to_id,
                                const struct store_uidset *set);

#endif
