/*
 * store_message.h -- message internals shared by store_message.c and store_search.c, and by
 * callers that parse outside their transaction (import).
 */
#ifndef MV_STORE_MESSAGE_H
#define MV_STORE_MESSAGE_H

#include "store/store.h"
#include "store/store_parse.h"

#include <stddef.h>
#include <stdint.h>

/* The columns of struct mv_message_info in the order store_message_info_read() reads them,
 * for "SELECT " STORE_MESSAGE_INFO_COLUMNS " FROM " STORE_MESSAGE_INFO_FROM " WHERE ...".
 * The header text lives in body_headers (schema version 7), one row per body; a LEFT JOIN,
 * so a message whose header row is missing (a damaged store) still lists, with empty
 * fields, rather than vanishing from every search. */
#define STORE_MESSAGE_INFO_COLUMNS                                                                 \
    "mb.name, m.uid, m.modseq, m.internal_date, coalesce(h.sent_date, 0), m.size, m.flags, "       \
    "m.keywords, coalesce(h.subject, ''), coalesce(h.from_addr, ''), coalesce(h.to_addr, ''), "    \
    "coalesce(h.cc_addr, ''), coalesce(h.message_id, ''), coalesce(h.in_reply_to, ''), "           \
    "m.thread_id"
#define STORE_MESSAGE_INFO_FROM                                                                    \
    "messages m JOIN mailboxes mb ON mb.id = m.mailbox_id "                                        \
    "LEFT JOIN body_headers h ON h.body_id = m.body_id"

/* Fills *info from the current row of st (columns as above, from column 0); strings are
 * copied into strings. MV_OK or MV_ENOMEM (no message set: the caller has no store). */
int store_message_info_read(sqlite3_stmt *st,
                            struct store_strings *strings,
                            struct mv_message_info *info);

/* Checks and normalises a space-separated keyword list (NULL: none): each keyword an IMAP
 * atom without '\\' of at most keyword_size_max bytes, duplicates (case-insensitive) removed,
 * sorted case-insensitively, at most keywords_max, joined by single spaces. *out is
 * malloc'd ("" if none). MV_OK, MV_EINVAL, MV_ELIMIT (names the limit), MV_ENOMEM. */
int store_message_keywords_normalize(mv_store *s, const char *keywords, char **out);

/* Checks an append's size, flags and keywords against the limits: MV_OK, MV_ELIMIT (names
 * message_size_max, keywords_max or keyword_size_max), MV_EINVAL, MV_ENOMEM. *keywords_out
 * gets the normalised keywords (malloc'd). */
int store_message_check(mv_store *s,
                        const void *raw,
                        size_t len,
                        unsigned flags,
                        const char *keywords,
                        char **keywords_out);

/* Appends an already parsed and checked message within the caller's transaction: body
 * (deduplicated), UID and modseq, thread, messages row, change-log row. keywords must be
 * normalised (store_message_keywords_normalize). internal_date 0 means now. sha256: the
 * SHA-256 of raw if the caller has it (the importer's resume check), else NULL. */
int store_message_insert(mv_store *s,
                         int64_t mailbox_id,
                         const uint8_t *raw,
                         size_t len,
                         const uint8_t *sha256,
                         const struct store_parsed *parsed,
                         unsigned flags,
                         const char *keywords,
                         int64_t internal_date,
                         uint32_t *uid_out);

/* Writes body_id's body_headers row (Date, Subject, addresses, Message-ID, In-Reply-To from
 * p) unless it has one: the append path, and mv_store_repair() for a row that went missing.
 * MV_OK or an SQLite error (message set). */
int store_message_insert_headers(mv_store *s, int64_t body_id, const struct store_parsed *p);

/* Parses the stored bytes of body_id as append parsed them, but without the append limits
 * (the message is already stored; only what it says is wanted). *out is the caller's to free
 * with store_parsed_free() on MV_OK. MV_OK, MV_ENOTFOUND, MV_ECORRUPT, MV_ENOMEM, MV_EIO
 * (message set). */
int store_body_parse_stored(mv_store *s, int64_t body_id, struct store_parsed *out);

/* body_headers row of body_id made again from its stored bytes, with the code append uses
 * (store_parse, store_message_insert_headers): mv_store_repair() of a missing row. */
int store_body_headers_rebuild(mv_store *s, int64_t body_id);

/* A read transaction unless one is open: *began says whether this call began it, for
 * store_message_read_end (which ends only what it began). */
int store_message_read_begin(mv_store *s, int *began);
void store_message_read_end(mv_store *s, int began);
/* 1 if mailbox_id has uidvalidity and highest modseq now (in the read transaction), 0 if
 * not, or an error: a caller's listing of then still holds (nothing expunged, moved or
 * changed since, so its body keys still name its messages' bodies). */
int store_mailbox_unchanged(mv_store *s, int64_t mailbox_id, uint32_t uidvalidity, uint64_t modseq);
/* Begins the read (store_message_read_begin: *began) and says whether mailbox is as key last
 * saw it: 1, 0 (changed since), or an error. While it is, a message the key's listing held is
 * still there (an expunge or a move moves the highest modseq) and its body still the one
 * keyed (a message's body never changes; a body's id is not reused while a message refers to
 * it). The caller ends the read (store_message_read_end) whatever this returns. For the keyed
 * reads: mv_message_fetch_keyed_into, mv_message_skeleton_keyed, and store_keyed_read's
 * (mv_message_memos_keyed, mv_message_headers_keyed). */
int store_message_key_holds(mv_store *s,
                            const char *mailbox,
                            const struct mv_message_key *key,
                            int *began);

#endif /* MV_STORE_MESSAGE_H */
