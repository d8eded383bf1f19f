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

/* The recursive step of a CTE words(mailbox_id, word, rest) that splits keyword lists into
 * one row per keyword: the CTE's first SELECT gives (mailbox, '', list || ' ') per list, the
 * statement after it reads the rows whose word is not '' (the others are the split's start).
 * Lists are stored normalised: atoms joined by single spaces. */
#define STORE_KEYWORD_SPLIT                                                                        \
    " UNION ALL SELECT mailbox_id, substr(rest, 1, instr(rest, ' ') - 1), substr(rest, "           \
    "instr(rest, ' ') + 1) FROM words WHERE rest != '') "
/* Every keyword every message carries: for the version 13 migration, mv_store_check's
 * "keywords" and mv_store_repair. */
#define STORE_KEYWORD_WORDS_OF_MESSAGES                                                            \
    "WITH RECURSIVE words(mailbox_id, word, rest) AS (SELECT mailbox_id, '', keywords || ' ' "     \
    "FROM messages WHERE keywords != ''" STORE_KEYWORD_SPLIT
/* What defines the words in their mailboxes, after a CTE of them. */
#define STORE_KEYWORD_DEFINE_WORDS                                                                 \
    "INSERT OR IGNORE INTO mailbox_keywords(mailbox_id, name) SELECT mailbox_id, word FROM words " \
    "WHERE word != ''"
/* Defines every keyword a message carries in its mailbox (the migration, the repair). */
#define STORE_KEYWORD_DEFINE_CARRIED STORE_KEYWORD_WORDS_OF_MESSAGES STORE_KEYWORD_DEFINE_WORDS

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
