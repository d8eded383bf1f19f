/*
 * imap_sort_key.h -- the strings SORT (RFC 5256) and SORT=DISPLAY (RFC 5957) compare, made
 * from the header fields the store keeps (mv_message_fields_each: a decoded Subject, address
 * lists as display text).
 *
 * USAGE
 *   n = imap_sort_subject(subject, out, cap);      the base subject (RFC 5256 2.1), upper case
 *   n = imap_sort_address(list, how, out, cap);    the first address's mailbox or display form
 *   n = imap_sort_key_of(by, fields, out, cap);     either, as criterion `by` wants it
 *   Each writes at most cap - 1 bytes and a NUL, and returns the length written. The result
 *   is already in i;ascii-casemap form (a-z as A-Z), so keys compare with strcmp().
 *
 * LIMITATIONS
 *   A key is cut at cap - 1 bytes (imap_sort.c passes IMAP_SORT_KEY_MAX): two keys equal that
 *   far compare equal, and the messages' order decides.
 */
#ifndef MAILVAULT_IMAP_SORT_KEY_H
#define MAILVAULT_IMAP_SORT_KEY_H

#include "mailvault.h"

#include <stddef.h>
#include <stdint.h>

/* SORT's criteria (RFC 5256, and RFC 5957's DISPLAY forms). */
enum imap_sort_by {
    IMAP_SORT_ARRIVAL,
    IMAP_SORT_CC,
    IMAP_SORT_DATE,
    IMAP_SORT_FROM,
    IMAP_SORT_SIZE,
    IMAP_SORT_SUBJECT,
    IMAP_SORT_TO,
    IMAP_SORT_DISPLAYFROM,
    IMAP_SORT_DISPLAYTO,
    IMAP_SORT_BY_COUNT
};

/* 1 for the criteria whose keys are strings (all but ARRIVAL, DATE and SIZE). */
int imap_sort_is_string(enum imap_sort_by by);

enum imap_sort_address_part {
    IMAP_SORT_MAILBOX = 1, /* RFC 5256 FROM/TO/CC: the first address's addr-mailbox */
    IMAP_SORT_DISPLAY = 2  /* RFC 5957 DISPLAYFROM/DISPLAYTO: its display name, else addr-spec */
};

size_t imap_sort_subject(const char *subject, char *out, size_t cap);
size_t imap_sort_address(const char *list, enum imap_sort_address_part how, char *out, size_t cap);
/* Room for need more bytes in an arena of keys (*bytes, used of *cap; NULL and 0 at first),
 * which grows by doubling (64 KiB at least), its old block wiped before it is freed (keys are
 * mail's subjects and addresses): MV_OK or MV_ENOMEM (the arena as it was). */
int imap_sort_arena_room(char **bytes, size_t used, size_t *cap, size_t need);
/* A key's first 8 bytes as one big-endian number (0 past its NUL), so that numbers compare as
 * the keys' first 8 bytes do under strcmp(): sorts compare these, strcmp() only on ties. */
uint64_t imap_sort_key_lead(const char *key);
/* The key of string criterion by for a message's kept fields: one of the two above. */
size_t
imap_sort_key_of(enum imap_sort_by by, const struct mv_message_fields *f, char *out, size_t cap);

#endif
