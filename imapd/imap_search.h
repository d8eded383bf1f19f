/*
 * imap_search.h -- a search program's matches, for SEARCH and for the commands that order or
 * group what a program finds (SORT: imap_sort.c).
 *
 * USAGE
 *   if (imap_search_parse_program(x, node, &prog) != 0) return;   tagged BAD/NO sent
 *   rc = imap_search_matches(x, &prog, &found);    MV_OK: found is a set of the view's
 *   for i < view.count: imap_search_matched(found, &view, i)       messages (free())
 *   imap_search_free(&prog);
 */
#ifndef MAILVAULT_IMAP_SEARCH_H
#define MAILVAULT_IMAP_SEARCH_H

#include "imap_session.h"

#include <stdint.h>

/* The program at node (imap_parse_search: "CHARSET x" may come first) into *prog: 0, or -1
 * with the tagged answer sent (BAD, or NO [BADCHARSET]) and nothing held. */
int imap_search_parse_program(struct imap_ctx *x,
                              const struct imap_node *node,
                              struct imap_search *prog);
/* The set of the selected view's messages prog matches, one bit a message (*found: malloc'd,
 * free()), in one read snapshot. MV_OK, or a store error (MV_ENOMEM ...) with *found NULL. */
int imap_search_matches(struct imap_ctx *x, const struct imap_search *prog, uint64_t **found);
/* 1 if view message i is in found and not expunged under the session. */
int imap_search_matched(const uint64_t *found, const struct imap_view *v, size_t i);
/* The answer's numbers, after its "* SEARCH" or "* SORT": " " and view message i's UID (a
 * UID command) or sequence number, *highest the highest modseq so far; then its end:
 * " (MODSEQ n)" when the program had a MODSEQ key (RFC 7162), and CRLF. */
void imap_search_answer_add(struct imap_ctx *x, size_t i, uint64_t *highest);
void imap_search_answer_end(struct imap_ctx *x, int with_modseq, uint64_t highest);
/* 1 if prog has a MODSEQ key (RFC 7162: the answer then ends with "(MODSEQ n)"). */
int imap_search_has_modseq(const struct imap_search *prog);

#endif
