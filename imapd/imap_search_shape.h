/*
 * imap_search_shape.h -- a parsed SEARCH program made flat and free of repeated keys
 * (imap_search_shape.c); imap_parse_search() calls it on every program it reads.
 */
#ifndef MV_IMAPD_IMAP_SEARCH_SHAPE_H
#define MV_IMAPD_IMAP_SEARCH_SHAPE_H

#include "imap_parse.h"

#include <stdint.h>

/* Makes s flat (an OR of ORs one OR, a list of lists one list, a list of one key the key,
 * NOT NOT x is x) and, if it is then no deeper than depth_max, drops each key repeated among
 * the keys of one AND or OR (the first stays). Keys no longer in the tree become
 * IMAP_SK_ALL. Returns the depth of the flat program (1: the top level's keys are leaves),
 * or -1 out of memory (s then holds nothing usable: the caller frees it). */
int imap_search_shape(struct imap_search *s, uint32_t depth_max);

#endif
