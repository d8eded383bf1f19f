/*
 * imap_parse.h -- a strict IMAP4rev1 command parser (RFC 3501 section 9, RFC 7888 literals):
 * pure functions over bytes, no I/O, no globals, so it can be fuzzed and unit-tested alone.
 *
 * USAGE
 *   struct imap_command cmd;
 *   rc = imap_parse_command(bytes, len, &cmd, err, sizeof err);
 *     bytes: one whole command as conn.c frames it: the line, every literal "{n}\r\n" or
 *     "{n+}\r\n" followed by its n bytes and the rest of the line, ending in CRLF (a bare
 *     LF is accepted). IMAP_PARSE_OK: cmd.tag, cmd.name ("FETCH"), cmd.uid (UID prefix),
 *     and the arguments as a tree of nodes: atoms, strings (quoted or literal, already
 *     unquoted) and parenthesised lists. IMAP_PARSE_BAD: err says why; cmd.tag is set if the
 *     tag was readable ("" otherwise), so the caller can answer "tag BAD ...".
 *   Then the typed readers for what a command expects at a node: imap_parse_seqset(),
 *   imap_parse_fetch(), imap_parse_search(), imap_parse_flags(), imap_parse_date(),
 *   imap_parse_list(), imap_parse_status_items(), imap_parse_create_params() ...
 *   imap_command_free(&cmd) frees the nodes and unquoted strings; imap_fetch_free(),
 *   imap_list_free(), imap_seqset_free() and imap_search_free() what those readers made.
 *
 * OWNERSHIP
 *   Node data points either into the caller's bytes (atoms, literals) or into the command's
 *   own text buffer (unquoted strings): keep the bytes alive while using the command.
 *
 * LIMITS
 *   IMAP_PARSE_NODES_MAX nodes per command (SEARCH: IMAP_PARSE_SEARCH_NODES_MAX),
 *   IMAP_PARSE_DEPTH_MAX list nesting, tag at most IMAP_TAG_MAX bytes, a search program
 *   nested at most IMAP_SEARCH_DEPTH_MAX deep once made flat (any number of keys, OR and NOT
 *   chains of any length). Beyond those, no reader has a count of its own for what a client
 *   may repeat: the command's bounds are the only ones, and every command within them is
 *   taken (Dovecot takes them too).
 *   - A sequence set is one atom, so the line limit (line_max) bounds it (RFC 3501 gives
 *     none; clients write "mark all read" over a mailbox with many UID gaps as thousands of
 *     ranges).
 *   - FETCH's body sections are nodes (IMAP_PARSE_NODES_MAX); the names of a
 *     BODY[HEADER.FIELDS (...)] are text inside one atom (line_max). LIST's patterns are
 *     nodes. Their arrays are allocated once, at the count the command has, so memory
 *     follows the command's size (nodes bound the sections; a 1 MiB line ~200,000 names).
 *   - A section's part numbers ("1.2.3") are at most IMAP_SECTION_LEVELS_MAX deep, CREATE's
 *     special uses at most IMAP_CREATE_USES_MAX.
 */
#ifndef MV_IMAP_PARSE_H
#define MV_IMAP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define IMAP_PARSE_OK    0
#define IMAP_PARSE_BAD   (-1) /* syntax error: answer BAD */
#define IMAP_PARSE_NOMEM (-2)

#define IMAP_TAG_MAX         64
#define IMAP_NAME_MAX        24
#define IMAP_PARSE_NODES_MAX 8192
/* SEARCH's: more than a line of 64 KiB can hold (a node is 1.5 bytes at the least, "((a))
 * "), and 65,536 x (40 bytes a node + 72 a search key) = 7 MiB at most for one command */
#define IMAP_PARSE_SEARCH_NODES_MAX 65536
#define IMAP_PARSE_DEPTH_MAX        64 /* lists in lists: a query builder nests a list per term */
#define IMAP_NODE_NONE              UINT32_MAX
#define IMAP_SEARCH_DEPTH_MAX       64
#define IMAP_SECTION_LEVELS_MAX     8 /* part numbers in a body section: "1.2.3.4.5.6.7.8" */

enum imap_node_type {
    IMAP_NODE_ATOM = 1,   /* includes NIL, numbers, flags (\Seen), "BODY[...]<a.b>", "1:*" */
    IMAP_NODE_STRING = 2, /* quoted or literal, data unquoted */
    IMAP_NODE_LIST = 3
};

struct imap_node {
    enum imap_node_type type;
    int literal;      /* STRING from a literal (1) or a quoted string (0) */
    int literal8;     /* STRING from a literal8 "~{n}" (RFC 4466): also literal 1 */
    const char *data; /* ATOM, STRING: the bytes (not NUL-terminated) */
    size_t len;
    uint32_t child; /* LIST: first element or IMAP_NODE_NONE */
    uint32_t next;  /* next sibling or IMAP_NODE_NONE */
};

struct imap_command {
    char tag[IMAP_TAG_MAX + 1];
    char name[IMAP_NAME_MAX + 1]; /* upper case; "" if unreadable */
    int uid;                      /* "UID FETCH ...": name "FETCH", uid 1 */
    struct imap_node *nodes;
    size_t node_count;
    uint32_t first; /* first argument or IMAP_NODE_NONE */
    char *text;     /* unquoted strings (wiped by imap_command_free: passwords) */
    size_t text_size;
};

/* The tag at the start of bytes (len of them) into out, if they start with a valid tag (at
 * most IMAP_TAG_MAX of RFC 3501's tag characters) and a SP: its length, else 0 and out "".
 * For answers to commands that are refused before they are parsed (too long a line or
 * literal): "tag BAD ...", not an untagged answer the client's command would wait past. */
size_t imap_parse_tag(const char *bytes, size_t len, char out[IMAP_TAG_MAX + 1]);

/* Parses one framed command (see USAGE). Returns IMAP_PARSE_OK, IMAP_PARSE_BAD (message in
 * err) or IMAP_PARSE_NOMEM. On failure the command holds no memory, but cmd->tag is set.
 * imap_command_free() wipes the unquoted strings (explicit_bzero) before freeing them.
 * A literal8 ("~{n}" or "~{n+}", RFC 4466) is accepted only where RFC 6855 puts one: APPEND's
 * UTF8 data, "UTF8 (~{n}...)", as the one element of the list after the atom UTF8; anywhere
 * else it is IMAP_PARSE_BAD. Quoted strings may hold any byte but CR, LF and NUL (8-bit ones
 * included: whether they must be UTF-8 is the session's business, imap_command_utf8_valid). */
int imap_parse_command(
    const uint8_t *bytes, size_t len, struct imap_command *cmd, char *err, size_t err_size);
void imap_command_free(struct imap_command *cmd);
/* Whether every quoted string of cmd is valid UTF-8 (RFC 6855 3: once UTF8=ACCEPT is enabled
 * a quoted string may hold UTF-8, and one with 8-bit bytes that are not UTF-8 is BAD).
 * Literals are not checked: they may carry any octets. 1 or 0. */
int imap_command_utf8_valid(const struct imap_command *cmd);

/* ---- helpers over nodes ---- */
const struct imap_node *imap_node(const struct imap_command *cmd, uint32_t index);
/* The n-th argument (0-based) or NULL. */
const struct imap_node *imap_arg(const struct imap_command *cmd, size_t n);
size_t imap_arg_count(const struct imap_command *cmd);
/* Whether node is an atom equal to word (ASCII case-insensitive). */
int imap_atom_is(const struct imap_node *node, const char *word);
/* An astring (atom or string) copied as a NUL-terminated string into out; 0 on success, -1 if
 * it is not one, contains a NUL byte or does not fit. */
int imap_astring(const struct imap_node *node, char *out, size_t out_size);
/* A number (1*DIGIT, at most max); 0 or -1. */
int imap_number(const struct imap_node *node, uint64_t max, uint64_t *out);

/* ---- sequence sets ---- */
#define IMAP_SEQ_STAR 0u /* '*' in a range: the largest number in use */
struct imap_seq_range {
    uint32_t first; /* as written: first may be larger than last; either may be STAR */
    uint32_t last;
};
/* A parsed set in a form whose membership test costs log(ranges), whatever the client wrote
 * (20,000 single UIDs in any order, overlapping ranges, "5:2"): the ranges that do not name
 * '*' sorted, merged and with first <= last; the ones that do folded into one interval,
 * since each of them holds '*' (a range "a:*" is min(a,*)..max(a,*), RFC 3501 9), so
 * together they are min(star_low,*)..max(star_high,*). */
struct imap_seqset {
    struct imap_seq_range *ranges; /* malloc'd (NULL if count is 0): ascending, disjoint,
                                      not adjacent, no STAR */
    size_t count;
    int has_star;       /* a range names '*' */
    uint32_t star_low;  /* the smallest number written beside a '*' (UINT32_MAX: none) */
    uint32_t star_high; /* the largest (0: none) */
};
/* Parses sequence-set syntax ("1", "2:4", "1,3:*", "*") into *out, which then owns its
 * ranges (imap_seqset_free). 0, -1 (syntax) or -2 (out of memory); on failure *out holds
 * nothing. Any number of ranges: the caller's line limit bounds the text. */
int imap_parse_seqset(const char *text, size_t len, struct imap_seqset *out);
void imap_seqset_free(struct imap_seqset *set);
/* Whether number n is in set, with star standing for the largest number in use. A binary
 * search: log(ranges). */
int imap_seqset_contains(const struct imap_seqset *set, uint32_t n, uint32_t star);
/* The interval the ranges naming '*' cover, given star: 1 with *lo and *hi set, or 0 if none does.
 */
int imap_seqset_star_span(const struct imap_seqset *set, uint32_t star, uint32_t *lo, uint32_t *hi);

/* ---- flags (STORE, APPEND) ---- */
#define IMAP_FLAG_SEEN     0x01u /* the same bits as MV_FLAG_* */
#define IMAP_FLAG_ANSWERED 0x02u
#define IMAP_FLAG_FLAGGED  0x04u
#define IMAP_FLAG_DELETED  0x08u
#define IMAP_FLAG_DRAFT    0x10u
/* Reads a flag list "(\Seen $Work)" or a single flag atom (STORE allows both): system flags
 * into *flags, keywords space-joined into keywords (NUL-terminated). \Recent and unknown
 * \-flags are refused. 0, or -1 with a message in err. */
int imap_parse_flags(const struct imap_command *cmd,
                     const struct imap_node *node,
                     unsigned *flags,
                     char *keywords,
                     size_t keywords_size,
                     char *err,
                     size_t err_size);

/* ---- dates ---- */
/* date "1-Feb-1994" or "01-Feb-1994" (atom or quoted): Unix seconds of 00:00 UTC. 0 or -1. */
int imap_parse_date(const struct imap_node *node, int64_t *out);
/* date-time "dd-Mon-yyyy hh:mm:ss +zzzz" (quoted): Unix seconds. 0 or -1. */
int imap_parse_date_time(const struct imap_node *node, int64_t *out);

/* ---- FETCH ---- */
#define IMAP_FETCH_UID           0x001u
#define IMAP_FETCH_FLAGS         0x002u
#define IMAP_FETCH_INTERNALDATE  0x004u
#define IMAP_FETCH_RFC822_SIZE   0x008u
#define IMAP_FETCH_ENVELOPE      0x010u
#define IMAP_FETCH_BODYSTRUCTURE 0x020u
#define IMAP_FETCH_BODY          0x040u /* non-extensible BODYSTRUCTURE */
#define IMAP_FETCH_RFC822        0x080u
#define IMAP_FETCH_RFC822_HEADER 0x100u
#define IMAP_FETCH_RFC822_TEXT   0x200u
#define IMAP_FETCH_MODSEQ        0x400u

enum imap_section_kind {
    IMAP_SECTION_ALL = 0,       /* BODY[] */
    IMAP_SECTION_HEADER,        /* BODY[HEADER] */
    IMAP_SECTION_TEXT,          /* BODY[TEXT] */
    IMAP_SECTION_HEADER_FIELDS, /* BODY[HEADER.FIELDS (a b)] */
    IMAP_SECTION_HEADER_FIELDS_NOT,
    IMAP_SECTION_MIME
};

struct imap_fetch_section {
    enum imap_section_kind kind;
    int peek;
    uint32_t part[IMAP_SECTION_LEVELS_MAX]; /* "1.2" (part_count of them); none: the message */
    size_t part_count;
    int partial; /* <start.length> given */
    uint64_t start;
    uint64_t length;
    const char *spec; /* the section text between the brackets, as written */
    size_t spec_len;
    /* HEADER.FIELDS (.NOT) names, field_count of them, pointing into the command's bytes (not
     * NUL-terminated), sorted by imap_field_name_cmp (a line of up to line_max holds ~200,000
     * short names: each header field of each message is looked up by a binary search, not compared
     * with every name); fields and field_len are one allocation (NULL without names), owned
     * by the struct imap_fetch. */
    const char **fields;
    size_t *field_len;
    size_t field_count;
};

struct imap_fetch {
    unsigned items;                      /* IMAP_FETCH_* */
    struct imap_fetch_section *sections; /* malloc'd, section_count of them (NULL if none) */
    size_t section_count;
};

/* The order of HEADER.FIELDS names (ASCII, case-insensitive, then shorter first): <0, 0, >0. */
int imap_field_name_cmp(const char *a, size_t a_len, const char *b, size_t b_len);
/* 1 if the name (len bytes) is one of sec's HEADER.FIELDS (.NOT) names, else 0. */
int imap_fetch_section_lists(const struct imap_fetch_section *sec, const char *name, size_t len);
/* Reads fetch attributes at node: a macro (ALL FAST FULL), one attribute or a list. *out is
 * overwritten (free an earlier result first) and then owns its sections and their names:
 * imap_fetch_free(). 0; -1 (syntax) with the message in err; -2 (out of memory) with "out of
 * memory" in err. On failure *out holds nothing. Any number of sections and of names in a
 * HEADER.FIELDS list: see LIMITS. */
int imap_parse_fetch(const struct imap_command *cmd,
                     const struct imap_node *node,
                     struct imap_fetch *out,
                     char *err,
                     size_t err_size);
/* Frees what imap_parse_fetch() gave fetch and zeroes it; a zeroed or freed one is left as
 * it is. */
void imap_fetch_free(struct imap_fetch *fetch);

/* ---- SEARCH ---- */
enum imap_search_op {
    IMAP_SK_ALL = 1,
    IMAP_SK_AND,    /* children: a parenthesised list or the top level */
    IMAP_SK_OR,     /* two children */
    IMAP_SK_NOT,    /* one child */
    IMAP_SK_SEQSET, /* message sequence numbers */
    IMAP_SK_UIDSET,
    IMAP_SK_FLAG_SET,   /* flag: bits that must be set */
    IMAP_SK_FLAG_UNSET, /* flag: bits that must be clear */
    IMAP_SK_KEYWORD,
    IMAP_SK_UNKEYWORD,
    IMAP_SK_NEW,    /* RECENT UNSEEN: no \Recent here, so UNSEEN */
    IMAP_SK_OLD,    /* NOT RECENT: every message */
    IMAP_SK_RECENT, /* no message is \Recent */
    IMAP_SK_FROM,
    IMAP_SK_TO,
    IMAP_SK_CC,
    IMAP_SK_BCC,
    IMAP_SK_SUBJECT,
    IMAP_SK_BODY,
    IMAP_SK_TEXT,
    IMAP_SK_HEADER, /* field name in str, value in str2 */
    IMAP_SK_SINCE,  /* internal date, day granularity: number = day start (UTC) */
    IMAP_SK_BEFORE,
    IMAP_SK_ON,
    IMAP_SK_SENTSINCE,
    IMAP_SK_SENTBEFORE,
    IMAP_SK_SENTON,
    IMAP_SK_LARGER,
    IMAP_SK_SMALLER,
    IMAP_SK_MODSEQ /* CONDSTORE: modseq >= number (an entry name and type are skipped) */
};

struct imap_search_key {
    enum imap_search_op op;
    unsigned flags;
    int64_t number;
    const char *str; /* not NUL-terminated */
    size_t str_len;
    const char *str2;
    size_t str2_len;
    struct imap_seqset *set; /* SEQSET/UIDSET: owned by the search */
    uint32_t child;          /* first child key or IMAP_NODE_NONE */
    uint32_t next;           /* next sibling key */
    /* imap_search_shape.c's: while it looks for repeats the key's hash (never 0; 0 once
     * dropped as a repeat), then 1 for a key in the tree and 0 for one out of it */
    uint64_t hash;
};

struct imap_search {
    struct imap_search_key *keys; /* malloc'd, count of them; keys[0] is the top-level AND */
    size_t count;
    size_t cap;
    int charset_utf8; /* CHARSET given (only US-ASCII and UTF-8 are accepted) */
};
/* Reads the search program starting at node (optionally "CHARSET x" first) into *out, which
 * it initialises (whatever *out held is not freed). Any number of keys and chains of OR and
 * NOT of any length: the command's node limit bounds them. The program comes back flat (an OR
 * of ORs is one OR of all their keys, a list of lists one list, a list of one key the key,
 * NOT NOT x is x: keys left out of the tree stay in keys[], unreachable), and it is refused if
 * it still nests deeper than IMAP_SEARCH_DEPTH_MAX, which only operators alternating level
 * by level (NOT OR NOT OR ...) can. 0, or -1 with a message in err (err starts with
 * "[BADCHARSET]" for an unknown charset) and *out holding nothing. Free with
 * imap_search_free(). */
int imap_parse_search(const struct imap_command *cmd,
                      const struct imap_node *node,
                      struct imap_search *out,
                      char *err,
                      size_t err_size);
void imap_search_free(struct imap_search *search);

/* ---- STATUS items (STATUS, and LIST ... RETURN (STATUS (...)) of RFC 5819) ---- */
#define IMAP_STATUS_MESSAGES      0x01u
#define IMAP_STATUS_RECENT        0x02u
#define IMAP_STATUS_UIDNEXT       0x04u
#define IMAP_STATUS_UIDVALIDITY   0x08u
#define IMAP_STATUS_UNSEEN        0x10u
#define IMAP_STATUS_HIGHESTMODSEQ 0x20u
/* RFC 9051 DELETED (messages flagged \Deleted) and RFC 9208 DELETED-STORAGE (their size in
 * KiB): RFC 9208 requires them of a server advertising QUOTA=RES-MESSAGE / RES-STORAGE. */
#define IMAP_STATUS_DELETED         0x40u
#define IMAP_STATUS_DELETED_STORAGE 0x80u
/* Reads a non-empty list of status items "(MESSAGES UNSEEN)" into *items (IMAP_STATUS_*).
 * 0, or -1 with a message in err (an unknown item, an empty list, not a list). */
int imap_parse_status_items(const struct imap_command *cmd,
                            const struct imap_node *node,
                            unsigned *items,
                            char *err,
                            size_t err_size);

/* ---- LIST (RFC 3501, LIST-EXTENDED RFC 5258, LIST-STATUS RFC 5819, SPECIAL-USE RFC 6154) */
#define IMAP_LIST_SELECT_SUBSCRIBED     0x01u
#define IMAP_LIST_SELECT_REMOTE         0x02u /* accepted; there are no remote mailboxes */
#define IMAP_LIST_SELECT_RECURSIVEMATCH 0x04u
#define IMAP_LIST_SELECT_SPECIAL_USE    0x08u
#define IMAP_LIST_RETURN_SUBSCRIBED     0x01u
#define IMAP_LIST_RETURN_CHILDREN       0x02u
#define IMAP_LIST_RETURN_SPECIAL_USE    0x04u
#define IMAP_LIST_RETURN_STATUS         0x08u
struct imap_list {
    int extended;          /* a selection list, a pattern list or RETURN was given */
    unsigned select;       /* IMAP_LIST_SELECT_* */
    unsigned ret;          /* IMAP_LIST_RETURN_* */
    unsigned status_items; /* IMAP_STATUS_*, with IMAP_LIST_RETURN_STATUS */
    const struct imap_node *reference;
    const struct imap_node **patterns; /* malloc'd, pattern_count atoms or strings (>= 1) */
    size_t pattern_count;
};
/* Reads LIST's arguments: [(selection options)] reference pattern-or-(patterns)
 * [RETURN (return options)]. Unknown options, STATUS twice, RECURSIVEMATCH without SUBSCRIBED
 * or SPECIAL-USE and an empty pattern list are refused; any number of patterns is taken (see
 * LIMITS). The node pointers point into cmd; *out owns the patterns array: imap_list_free().
 * 0; -1 (syntax) with a message in err; -2 (out of memory) with "out of memory" in err. On
 * failure *out holds nothing. */
int imap_parse_list(const struct imap_command *cmd,
                    struct imap_list *out,
                    char *err,
                    size_t err_size);
/* Frees what imap_parse_list() gave list and zeroes it; a zeroed or freed one is left as it
 * is. */
void imap_list_free(struct imap_list *list);

/* ---- CREATE parameters (RFC 4466), USE (CREATE-SPECIAL-USE, RFC 6154) ---- */
#define IMAP_CREATE_USES_MAX 8
struct imap_create_params {
    int has_use;
    const struct imap_node *uses[IMAP_CREATE_USES_MAX]; /* \-atoms, as written */
    size_t use_count;
};
/* Reads "(USE (\Sent ...))" at node. Another parameter, USE twice, a use that is not a
 * \-atom or more than IMAP_CREATE_USES_MAX of them: -1 with a message in err; else 0.
 * Whether the uses are known is the caller's business (NO [USEATTR], not BAD). */
int imap_parse_create_params(const struct imap_command *cmd,
                             const struct imap_node *node,
                             struct imap_create_params *out,
                             char *err,
                             size_t err_size);

#endif /* MV_IMAP_PARSE_H */
