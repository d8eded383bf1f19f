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
