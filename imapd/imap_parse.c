/*
 * imap_parse.c -- the strict IMAP command parser (see imap_parse.h for the interface).
 *
 * IMPLEMENTATION NOTES
 *   - One pass over the bytes builds a tree of nodes in one array (first child / next
 *     sibling indexes, so nothing moves when the array grows). Atoms and literals point into
 *     the input; quoted strings are unescaped into cmd->text, which is as large as the input
 *     (an unquoted string is never longer than its quoted form).
 *   - Separators are exactly one SP; a list holds no leading or trailing SP; the command ends
 *     with CRLF (or LF) and nothing after it. A literal's count must match the bytes that
 *     follow its CRLF; a literal with a NUL byte is still a string (APPEND data may hold
 *     anything), and imap_astring() refuses it where a C string is needed. A literal8
 *     ("~{n}", RFC 4466) parses like a literal and is then allowed only where RFC 6855 puts
 *     one (imap_literal8_placed), so no other handler ever sees one.
 *   - An atom may contain one bracketed part ("BODY[HEADER.FIELDS (A B)]<0.10>"), inside
 *     which SP, parentheses and quoted strings are allowed: it stays one atom, which
 *     imap_parse_fetch() takes apart.
 *   - The typed readers (sequence sets, flags, dates, FETCH, SEARCH, LIST) work on the node
 *     tree and have no fixed cap of their own on what a client repeats: what they allocate
 *     follows the command's size. A sequence set's ranges, FETCH's sections and header field
 *     names and LIST's patterns are counted first and allocated once, at the count the
 *     command has (so a FETCH grows nothing per message later); a search's keys grow with
 *     its program.
 */
#include "imap_parse.h"
#include "imap_search_shape.h"

#include <ctype.h>
#include <glib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct imap_parser {
    const uint8_t *p;
    size_t len;
    size_t at;
    struct imap_command *cmd;
    size_t node_cap;
    size_t nodes_max; /* IMAP_PARSE_NODES_MAX, or IMAP_PARSE_SEARCH_NODES_MAX for SEARCH */
    size_t text_at;
    char *err;
    size_t err_size;
};

static int imap_parse_fail(struct imap_parser *ps, const char *what)
{
    snprintf(ps->err, ps->err_size, "%s at byte %zu", what, ps->at);
    return IMAP_PARSE_BAD;
}

/* ATOM-CHAR minus nothing we need: any CHAR except ( ) { SP CTL " \ ; '%' '*' and ']' are
 * allowed (list-mailbox, sequence sets, astring). */
static int imap_is_atom_char(uint8_t c)
{
    return c > 0x20 && c < 0x7f && c != '(' && c != ')' && c != '{' && c != '"' && c != '\\';
}

static int imap_is_tag_char(uint8_t c)
{
    return imap_is_atom_char(c) && c != '+' && c != '%' && c != '*';
}

size_t imap_parse_tag(const char *bytes, size_t len, char out[IMAP_TAG_MAX + 1])
{
    size_t n = 0;
    while (n < len && n <= IMAP_TAG_MAX && imap_is_tag_char((uint8_t)bytes[n])) {
        n++;
    }
    if (n == 0 || n > IMAP_TAG_MAX || n == len || bytes[n] != ' ') {
        out[0] = '\0';
        return 0;
    }
    memcpy(out, bytes, n);
    out[n] = '\0';
    return n;
}

static int imap_node_add(struct imap_parser *ps, enum imap_node_type type, uint32_t *index)
{
    struct imap_command *cmd = ps->cmd;
    if (cmd->node_count >= ps->nodes_max) {
        return imap_parse_fail(ps, "too many arguments");
    }
    if (cmd->node_count == ps->node_cap) {
        size_t cap = ps->node_cap != 0 ? ps->node_cap * 2 : 16;
        struct imap_node *nodes = realloc(cmd->nodes, cap * sizeof *nodes);
        if (nodes == NULL) {
            return IMAP_PARSE_NOMEM;
        }
        cmd->nodes = nodes;
        ps->node_cap = cap;
    }
    struct imap_node *n = &cmd->nodes[cmd->node_count];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->child = IMAP_NODE_NONE;
    n->next = IMAP_NODE_NONE;
    *index = (uint32_t)cmd->node_count++;
    return IMAP_PARSE_OK;
}

/* Whether the atom text before a '[' names a FETCH attribute that takes a section (RFC 3501
 * 9 fetch-att, RFC 3516 BINARY): only there does '[' open one. Elsewhere '[' is an ordinary
 * ATOM-CHAR (it is not in atom-specials), so "CREATE foo[bar" names a mailbox. */
static int imap_is_section_name(const uint8_t *p, size_t len)
{
    static const char *const names[] = {"BODY", "BODY.PEEK", "BINARY", "BINARY.PEEK",
                                        "BINARY.SIZE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strlen(names[i]) == len && strncasecmp((const char *)p, names[i], len) == 0) {
            return 1;
        }
    }
    return 0;
}

/* An atom, with at most one bracketed part inside (after a section-taking name). */
static int imap_parse_atom(struct imap_parser *ps, uint32_t *index)
{
    size_t start = ps->at;
    int brackets = 0;
    if (ps->at < ps->len && ps->p[ps->at] == '\\') {
        ps->at++; /* a flag: \Seen */
    }
    while (ps->at < ps->len) {
        uint8_t c = ps->p[ps->at];
        if (c == '[' && !brackets && imap_is_section_name(ps->p + start, ps->at - start)) {
            brackets = 1;
            ps->at++;
            while (ps->at < ps->len && ps->p[ps->at] != ']') {
                uint8_t d = ps->p[ps->at];
                if (d < 0x20 || d >= 0x7f || d == '[' || d == '{') {
                    return imap_parse_fail(ps, "bad character in a section");
                }
                ps->at++;
            }
            if (ps->at == ps->len) {
                return imap_parse_fail(ps, "unterminated section");
            }
            ps->at++;
            continue;
        }
        if (!imap_is_atom_char(c)) {
            break;
        }
        ps->at++;
    }
    if (ps->at == start || (ps->at == start + 1 && ps->p[start] == '\\')) {
        return imap_parse_fail(ps, "expected an atom");
    }
    int rc = imap_node_add(ps, IMAP_NODE_ATOM, index);
    if (rc == IMAP_PARSE_OK) {
        ps->cmd->nodes[*index].data = (const char *)ps->p + start;
        ps->cmd->nodes[*index].len = ps->at - start;
    }
    return rc;
}

static int imap_parse_quoted(struct imap_parser *ps, uint32_t *index)
{
    ps->at++; /* the opening quote */
    char *out = ps->cmd->text + ps->text_at;
    size_t n = 0;
    for (;;) {
        if (ps->at == ps->len) {
            return imap_parse_fail(ps, "unterminated quoted string");
        }
        uint8_t c = ps->p[ps->at++];
        if (c == '"') {
            break;
        }
        if (c == '\\') {
            if (ps->at == ps->len || (ps->p[ps->at] != '"' && ps->p[ps->at] != '\\')) {
                return imap_parse_fail(ps, "bad escape in a quoted string");
            }
            c = ps->p[ps->at++];
        } else if (c == '\r' || c == '\n' || c == 0) {
            return imap_parse_fail(ps, "CR, LF or NUL in a quoted string");
        }
        out[n++] = (char)c;
    }
    int rc = imap_node_add(ps, IMAP_NODE_STRING, index);
    if (rc == IMAP_PARSE_OK) {
        ps->cmd->nodes[*index].data = out;
        ps->cmd->nodes[*index].len = n;
        ps->text_at += n;
    }
    return rc;
}

/* {n}CRLF or {n+}CRLF (LF alone accepted), then exactly n bytes; with a '~' first, a
 * literal8 (RFC 4466), which imap_literal8_placed() then checks for where it stands. */
static int imap_parse_literal(struct imap_parser *ps, uint32_t *index)
{
    int literal8 = ps->p[ps->at] == '~';
    ps->at += literal8 ? 2 : 1; /* '~{' or '{' */
    uint64_t n = 0;
    size_t digits = 0;
    while (ps->at < ps->len && ps->p[ps->at] >= '0' && ps->p[ps->at] <= '9') {
        n = n * 10 + (uint64_t)(ps->p[ps->at] - '0');
        if (n > (uint64_t)SIZE_MAX / 2 || ++digits > 19) {
            return imap_parse_fail(ps, "literal too large");
        }
        ps->at++;
    }
    if (digits == 0) {
        return imap_parse_fail(ps, "bad literal count");
    }
    if (ps->at < ps->len && ps->p[ps->at] == '+') {
        ps->at++;
    }
    if (ps->at + 1 < ps->len && ps->p[ps->at] == '}' && ps->p[ps->at + 1] == '\n') {
        ps->at += 2;
    } else if (ps->at + 2 < ps->len && ps->p[ps->at] == '}' && ps->p[ps->at + 1] == '\r' &&
               ps->p[ps->at + 2] == '\n') {
        ps->at += 3;
    } else {
        return imap_parse_fail(ps, "a literal's count must end the line");
    }
    if (n > ps->len - ps->at) {
        return imap_parse_fail(ps, "literal shorter than its count");
    }
    int rc = imap_node_add(ps, IMAP_NODE_STRING, index);
    if (rc == IMAP_PARSE_OK) {
        struct imap_node *node = &ps->cmd->nodes[*index];
        node->literal = 1;
        node->literal8 = literal8;
        node->data = (const char *)ps->p + ps->at;
        node->len = (size_t)n;
        ps->at += (size_t)n;
    }
    return rc;
}

static int imap_at_end(const struct imap_parser *ps)
{
    return ps->at == ps->len || ps->p[ps->at] == '\r' || ps->p[ps->at] == '\n';
}

static int imap_parse_values(struct imap_parser *ps, uint32_t *first, int depth);

/* Inside a parenthesised list, extra SP after '(', before ')' and between values is
 * skipped: RFC 3501 9 has exactly one SP, but Dovecot's own client (imapc, dsync) sends
 * "APPEND box ( $Label1 Work) ..." and nothing is ambiguous there (Postel, RFC 9051 A). */
static void imap_skip_list_blanks(struct imap_parser *ps)
{
    while (ps->at < ps->len && ps->p[ps->at] == ' ') {
        ps->at++;
    }
}

static int imap_parse_value(struct imap_parser *ps, uint32_t *index, int depth)
{
    uint8_t c = ps->p[ps->at];
    if (c == '"') {
        return imap_parse_quoted(ps, index);
    }
    if (c == '{' || (c == '~' && ps->at + 1 < ps->len && ps->p[ps->at + 1] == '{')) {
        return imap_parse_literal(ps, index);
    }
    if (c != '(') {
        return imap_parse_atom(ps, index);
    }
    if (depth >= IMAP_PARSE_DEPTH_MAX) {
        return imap_parse_fail(ps, "lists nested too deeply");
    }
    int rc = imap_node_add(ps, IMAP_NODE_LIST, index);
    if (rc != IMAP_PARSE_OK) {
        return rc;
    }
    ps->at++;
    imap_skip_list_blanks(ps);
    uint32_t child = IMAP_NODE_NONE;
    if (ps->at < ps->len && ps->p[ps->at] != ')') {
        rc = imap_parse_values(ps, &child, depth + 1);
        if (rc != IMAP_PARSE_OK) {
            return rc;
        }
    }
    if (ps->at == ps->len || ps->p[ps->at] != ')') {
        return imap_parse_fail(ps, "expected ')'");
    }
    ps->at++;
    ps->cmd->nodes[*index].child = child;
    return IMAP_PARSE_OK;
}

/* value *(SP value), stopping before ')' or the end of the line. */
static int imap_parse_values(struct imap_parser *ps, uint32_t *first, int depth)
{
    uint32_t prev = IMAP_NODE_NONE;
    *first = IMAP_NODE_NONE;
    for (;;) {
        if (imap_at_end(ps) || ps->p[ps->at] == ' ' || ps->p[ps->at] == ')') {
            return imap_parse_fail(ps, "expected a value");
        }
        uint32_t index;
        int rc = imap_parse_value(ps, &index, depth);
        if (rc != IMAP_PARSE_OK) {
            return rc;
        }
        if (prev == IMAP_NODE_NONE) {
            *first = index;
        } else {
            ps->cmd->nodes[prev].next = index;
        }
        prev = index;
        if (imap_at_end(ps) || ps->p[ps->at] == ')') {
            return IMAP_PARSE_OK;
        }
        if (ps->p[ps->at] != ' ') {
            return imap_parse_fail(ps, "expected SP");
        }
        ps->at++;
        if (depth > 0) {
            imap_skip_list_blanks(ps);
            if (ps->at < ps->len && ps->p[ps->at] == ')') {
                return IMAP_PARSE_OK;
            }
        }
    }
}

static int imap_parse_word(struct imap_parser *ps, char *out, size_t out_size, const char *what)
{
    size_t n = 0;
    while (ps->at < ps->len && ((ps->p[ps->at] >= 'A' && ps->p[ps->at] <= 'Z') ||
                                (ps->p[ps->at] >= 'a' && ps->p[ps->at] <= 'z'))) {
        if (n + 1 == out_size) {
            return imap_parse_fail(ps, what);
        }
        uint8_t c = ps->p[ps->at++];
        out[n++] = (char)(c >= 'a' ? c - 'a' + 'A' : c);
    }
    out[n] = '\0';
    return n == 0 ? imap_parse_fail(ps, what) : IMAP_PARSE_OK;
}

static int imap_parse_head(struct imap_parser *ps)
{
    struct imap_command *cmd = ps->cmd;
    size_t n = 0;
    while (ps->at < ps->len && imap_is_tag_char(ps->p[ps->at])) {
        if (n == IMAP_TAG_MAX) {
            cmd->tag[0] = '\0';
            return imap_parse_fail(ps, "tag too long");
        }
        cmd->tag[n++] = (char)ps->p[ps->at++];
    }
    cmd->tag[n] = '\0';
    if (n == 0) {
        return imap_parse_fail(ps, "missing tag");
    }
    if (ps->at == ps->len || ps->p[ps->at] != ' ') {
        cmd->tag[0] = '\0'; /* "a1\r\n" is a tag; "a1(" is not */
        return imap_parse_fail(ps, "expected SP after the tag");
    }
    ps->at++;
    int rc = imap_parse_word(ps, cmd->name, sizeof cmd->name, "bad command name");
    if (rc == IMAP_PARSE_OK && strcmp(cmd->name, "UID") == 0) {
        if (ps->at == ps->len || ps->p[ps->at] != ' ') {
            return imap_parse_fail(ps, "expected a command after UID");
        }
        ps->at++;
        cmd->uid = 1;
        rc = imap_parse_word(ps, cmd->name, sizeof cmd->name, "bad command name after UID");
    }
    return rc;
}

/* Whether every literal8 in the sibling chain from first (and the lists in it) stands where
 * RFC 6855 puts one: APPEND's "UTF8 (~{n}...)", the one element of the list that follows the
 * atom UTF8 at the top level. Everything else (BINARY's bare literal8, RFC 3516, is not
 * offered) would reach handlers that take it for an ordinary string. The depth is bounded by
 * the parser's IMAP_PARSE_DEPTH_MAX. */
static int
imap_literal8_placed(const struct imap_command *cmd, uint32_t first, uint32_t parent, int depth)
{
    uint32_t prev = IMAP_NODE_NONE;
    for (uint32_t i = first; i != IMAP_NODE_NONE; prev = i, i = cmd->nodes[i].next) {
        const struct imap_node *n = &cmd->nodes[i];
        if (n->literal8) {
            /* (1) APPEND, (2) the only element (3) of a top-level list (4) after UTF8 */
            const struct imap_node *list = imap_node(cmd, parent);
            if (strcmp(cmd->name, "APPEND") != 0 || i != first || n->next != IMAP_NODE_NONE ||
                depth != 1 || list == NULL || list->type != IMAP_NODE_LIST) {
                return 0;
            }
            continue;
        }
        if (n->type == IMAP_NODE_LIST && n->child != IMAP_NODE_NONE) {
            int after_utf8 = prev != IMAP_NODE_NONE && imap_atom_is(&cmd->nodes[prev], "UTF8");
            if (cmd->nodes[n->child].literal8 && !after_utf8) {
                return 0;
            }
            if (!imap_literal8_placed(cmd, n->child, i, depth + 1)) {
                return 0;
            }
        }
    }
    return 1;
}

int imap_parse_command(
    const uint8_t *bytes, size_t len, struct imap_command *cmd, char *err, size_t err_size)
{
    struct imap_parser ps = {.p = bytes, .len = len, .cmd = cmd, .err = err, .err_size = err_size};
    memset(cmd, 0, sizeof *cmd);
    cmd->first = IMAP_NODE_NONE;
    if (err_size > 0) {
        err[0] = '\0';
    }
    cmd->text = malloc(len + 1);
    if (cmd->text == NULL) {
        return IMAP_PARSE_NOMEM;
    }
    cmd->text_size = len + 1;
    int rc = imap_parse_head(&ps);
    /* A search program is as many nodes as the client's filter has terms: any a line of
     * 64 KiB can hold (Dovecot's whole line limit) is taken. Other commands keep the smaller
     * bound (their nodes become arrays per section or pattern that no client needs big). */
    ps.nodes_max = strcmp(cmd->name, "SEARCH") == 0 || strcmp(cmd->name, "SORT") == 0
                       ? IMAP_PARSE_SEARCH_NODES_MAX
                       : IMAP_PARSE_NODES_MAX;
    if (rc == IMAP_PARSE_OK && ps.at < len && bytes[ps.at] == ' ') {
        ps.at++;
        rc = imap_parse_values(&ps, &cmd->first, 0);
    }
    if (rc == IMAP_PARSE_OK) {
        if (ps.at + 2 == len && bytes[ps.at] == '\r' && bytes[ps.at + 1] == '\n') {
            ps.at += 2;
        } else if (ps.at + 1 == len && bytes[ps.at] == '\n') {
            ps.at += 1;
        } else {
            rc = imap_parse_fail(&ps, ps.at < len && bytes[ps.at] == ')' ? "unexpected ')'"
                                                                         : "expected CRLF");
        }
    }
    if (rc == IMAP_PARSE_OK && !imap_literal8_placed(cmd, cmd->first, IMAP_NODE_NONE, 0)) {
        snprintf(err, err_size, "a literal8 (~{n}) is allowed only in APPEND's UTF8 (...)");
        rc = IMAP_PARSE_BAD;
    }
    if (rc != IMAP_PARSE_OK) {
        char tag[IMAP_TAG_MAX + 1];
        memcpy(tag, cmd->tag, sizeof tag);
        imap_command_free(cmd);
        memcpy(cmd->tag, tag, sizeof tag);
        if (rc == IMAP_PARSE_NOMEM) {
            snprintf(err, err_size, "out of memory");
        }
    }
    return rc;
}

void imap_command_free(struct imap_command *cmd)
{
    free(cmd->nodes);
    if (cmd->text != NULL) {
        explicit_bzero(cmd->text, cmd->text_size); /* a quoted LOGIN password */
    }
    free(cmd->text);
    memset(cmd, 0, sizeof *cmd);
    cmd->first = IMAP_NODE_NONE;
}

int imap_command_utf8_valid(const struct imap_command *cmd)
{
    for (size_t i = 0; i < cmd->node_count; i++) {
        const struct imap_node *n = &cmd->nodes[i];
        /* GLib's validator is strict: no overlong forms, surrogates or code points past
         * U+10FFFF; quoted strings hold no NUL, so a length-bounded check sees them whole. */
        if (n->type == IMAP_NODE_STRING && !n->literal && n->len > 0 &&
            !g_utf8_validate(n->data, (gssize)n->len, NULL)) {
            return 0;
        }
    }
    return 1;
}

/* ---- node helpers ---------------------------------------------------------------------- */

const struct imap_node *imap_node(const struct imap_command *cmd, uint32_t index)
{
    return index < cmd->node_count ? &cmd->nodes[index] : NULL;
}

const struct imap_node *imap_arg(const struct imap_command *cmd, size_t n)
{
    uint32_t i = cmd->first;
    while (i != IMAP_NODE_NONE && n-- > 0) {
        i = cmd->nodes[i].next;
    }
    return imap_node(cmd, i);
}

size_t imap_arg_count(const struct imap_command *cmd)
{
    size_t n = 0;
    for (uint32_t i = cmd->first; i != IMAP_NODE_NONE; i = cmd->nodes[i].next) {
        n++;
    }
    return n;
}

static int imap_text_is(const char *data, size_t len, const char *word)
{
    return strlen(word) == len && strncasecmp(data, word, len) == 0;
}

int imap_atom_is(const struct imap_node *node, const char *word)
{
    return node != NULL && node->type == IMAP_NODE_ATOM &&
           imap_text_is(node->data, node->len, word);
}

int imap_astring(const struct imap_node *node, char *out, size_t out_size)
{
    if (node == NULL || node->type == IMAP_NODE_LIST || node->len >= out_size ||
        memchr(node->data, 0, node->len) != NULL) {
        return -1;
    }
    /* A section ("BODY[HEADER.FIELDS (A B)]") is one atom with SP and parentheses in it:
     * never an astring. '[' and ']' themselves are ASTRING-CHARs (RFC 3501 9). */
    for (size_t i = 0; node->type == IMAP_NODE_ATOM && i < node->len; i++) {
        if (!imap_is_atom_char((uint8_t)node->data[i]) && !(i == 0 && node->data[0] == '\\')) {
            return -1;
        }
    }
    memcpy(out, node->data, node->len);
    out[node->len] = '\0';
    return 0;
}

static int imap_digits(const char *p, size_t len, uint64_t max, uint64_t *out)
{
    uint64_t n = 0;
    if (len == 0 || len > 20) {
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return -1;
        }
        uint64_t d = (uint64_t)(p[i] - '0');
        if (n > (max - d) / 10) {
            return -1;
        }
        n = n * 10 + d;
    }
    *out = n;
    return 0;
}

int imap_number(const struct imap_node *node, uint64_t max, uint64_t *out)
{
    if (node == NULL || node->type != IMAP_NODE_ATOM) {
        return -1;
    }
    return imap_digits(node->data, node->len, max, out);
}

/* ---- sequence sets --------------------------------------------------------------------- */

static int imap_seq_number(const char *p, size_t len, uint32_t *out)
{
    uint64_t n;
    if (len == 1 && p[0] == '*') {
        *out = IMAP_SEQ_STAR;
        return 0;
    }
    if (len == 0 || p[0] == '0' || imap_digits(p, len, UINT32_MAX, &n) != 0) {
        return -1;
    }
    *out = (uint32_t)n;
    return 0;
}

static int imap_seq_range_cmp(const void *a, const void *b)
{
    uint32_t x = ((const struct imap_seq_range *)a)->first;
    uint32_t y = ((const struct imap_seq_range *)b)->first;
    return x < y ? -1 : x > y;
}

/* Sorts and merges the ranges (first <= last already): overlapping or adjacent ones become
 * one, so a membership test is a binary search. */
static void imap_seqset_normalise(struct imap_seqset *set)
{
    if (set->count < 2) {
        return;
    }
    qsort(set->ranges, set->count, sizeof *set->ranges, imap_seq_range_cmp);
    size_t k = 0;
    for (size_t i = 1; i < set->count; i++) {
        struct imap_seq_range *last = &set->ranges[k];
        const struct imap_seq_range *r = &set->ranges[i];
        if (last->last == UINT32_MAX || r->first <= last->last + 1) {
            last->last = r->last > last->last ? r->last : last->last;
        } else {
            set->ranges[++k] = *r;
        }
    }
    set->count = k + 1;
}

int imap_parse_seqset(const char *text, size_t len, struct imap_seqset *out)
{
    memset(out, 0, sizeof *out);
    out->star_low = UINT32_MAX;
    size_t commas = 0;
    for (size_t i = 0; i < len; i++) {
        commas += text[i] == ',';
    }
    /* The text bounds the count (at least two bytes a range but the last): no limit of our
     * own, the line's is enough. */
    out->ranges = malloc((commas + 1) * sizeof *out->ranges);
    if (out->ranges == NULL) {
        return -2;
    }
    size_t at = 0;
    while (at <= len) {
        size_t end = at;
        while (end < len && text[end] != ',') {
            end++;
        }
        const char *colon = memchr(text + at, ':', end - at);
        struct imap_seq_range r;
        if (colon == NULL) {
            if (imap_seq_number(text + at, end - at, &r.first) != 0) {
                break;
            }
            r.last = r.first;
        } else {
            size_t left = (size_t)(colon - (text + at));
            if (imap_seq_number(text + at, left, &r.first) != 0 ||
                imap_seq_number(colon + 1, end - at - left - 1, &r.last) != 0) {
                break;
            }
        }
        if (r.first == IMAP_SEQ_STAR || r.last == IMAP_SEQ_STAR) {
            uint32_t other = r.first == IMAP_SEQ_STAR ? r.last : r.first;
            out->has_star = 1;
            if (other != IMAP_SEQ_STAR) {
                out->star_low = other < out->star_low ? other : out->star_low;
                out->star_high = other > out->star_high ? other : out->star_high;
            }
        } else {
            out->ranges[out->count].first = r.first < r.last ? r.first : r.last;
            out->ranges[out->count++].last = r.first < r.last ? r.last : r.first;
        }
        if (end == len) {
            imap_seqset_normalise(out);
            return 0;
        }
        at = end + 1;
    }
    imap_seqset_free(out);
    return -1;
}

void imap_seqset_free(struct imap_seqset *set)
{
    free(set->ranges);
    memset(set, 0, sizeof *set);
}

int imap_seqset_star_span(const struct imap_seqset *set, uint32_t star, uint32_t *lo, uint32_t *hi)
{
    if (!set->has_star) {
        return 0;
    }
    *lo = set->star_low < star ? set->star_low : star;
    *hi = set->star_high > star ? set->star_high : star;
    return 1;
}

int imap_seqset_contains(const struct imap_seqset *set, uint32_t n, uint32_t star)
{
    uint32_t lo, hi;
    if (imap_seqset_star_span(set, star, &lo, &hi) && n >= lo && n <= hi) {
        return 1;
    }
    size_t a = 0, b = set->count; /* the first range ending at or after n */
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (set->ranges[mid].last < n) {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    return a < set->count && set->ranges[a].first <= n;
}

/* ---- flags ----------------------------------------------------------------------------- */

static int imap_flag_one(const struct imap_node *n,
                         unsigned *flags,
                         char *keywords,
                         size_t keywords_size,
                         size_t *kw_at,
                         char *err,
                         size_t err_size)
{
    static const struct {
        const char *name;
        unsigned bit;
    } system[] = {{"\\Seen", IMAP_FLAG_SEEN},
                  {"\\Answered", IMAP_FLAG_ANSWERED},
                  {"\\Flagged", IMAP_FLAG_FLAGGED},
                  {"\\Deleted", IMAP_FLAG_DELETED},
                  {"\\Draft", IMAP_FLAG_DRAFT}};
    if (n->type != IMAP_NODE_ATOM || memchr(n->data, '[', n->len) != NULL ||
        memchr(n->data, ']', n->len) != NULL || memchr(n->data, '%', n->len) != NULL ||
        memchr(n->data, '*', n->len) != NULL) {
        snprintf(err, err_size, "a flag must be an atom");
        return -1;
    }
    if (n->data[0] == '\\') {
        for (size_t i = 0; i < sizeof system / sizeof system[0]; i++) {
            if (imap_text_is(n->data, n->len, system[i].name)) {
                *flags |= system[i].bit;
                return 0;
            }
        }
        snprintf(err, err_size, "unknown or read-only system flag %.*s",
                 (int)(n->len > 40 ? 40 : n->len), n->data);
        return -1;
    }
    if (*kw_at + n->len + 2 > keywords_size) {
        snprintf(err, err_size, "too many keywords");
        return -1;
    }
    if (*kw_at != 0) {
        keywords[(*kw_at)++] = ' ';
    }
    memcpy(keywords + *kw_at, n->data, n->len);
    *kw_at += n->len;
    keywords[*kw_at] = '\0';
    return 0;
}

int imap_parse_flags(const struct imap_command *cmd,
                     const struct imap_node *node,
                     unsigned *flags,
                     char *keywords,
                     size_t keywords_size,
                     char *err,
                     size_t err_size)
{
    size_t kw_at = 0;
    *flags = 0;
    if (keywords_size == 0) {
        return -1;
    }
    keywords[0] = '\0';
    if (node == NULL) {
        snprintf(err, err_size, "expected flags");
        return -1;
    }
    if (node->type != IMAP_NODE_LIST) {
        return imap_flag_one(node, flags, keywords, keywords_size, &kw_at, err, err_size);
    }
    for (uint32_t i = node->child; i != IMAP_NODE_NONE; i = cmd->nodes[i].next) {
        if (imap_flag_one(&cmd->nodes[i], flags, keywords, keywords_size, &kw_at, err, err_size) !=
            0) {
            return -1;
        }
    }
    return 0;
}

/* ---- dates ----------------------------------------------------------------------------- */

static int imap_month(const char *p)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    for (int m = 0; m < 12; m++) {
        if (strncasecmp(p, months + (size_t)3 * (size_t)m, 3) == 0) {
            return m;
        }
    }
    return -1;
}

/* Days since 1970-01-01 of a civil date (proleptic Gregorian). */
static int64_t imap_days(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t mp = (m + 9) % 12;
    int64_t doy = (153 * mp + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int imap_days_in_month(int64_t y, int m)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return days[m - 1] + (m == 2 && leap);
}

/* "d-Mon-yyyy" or "dd-Mon-yyyy" (or " d-" with a leading space for date-time) at p. */
static int imap_date_text(const char *p, size_t len, size_t *used, int64_t *days)
{
    size_t i = 0;
    int d = 0;
    if (len > 0 && p[0] == ' ') {
        i = 1;
    }
    size_t digits = 0;
    while (i < len && p[i] >= '0' && p[i] <= '9' && digits < 2) {
        d = d * 10 + (p[i++] - '0');
        digits++;
    }
    if (digits == 0 || i + 9 > len || p[i] != '-' || p[i + 4] != '-') {
        return -1;
    }
    int m = imap_month(p + i + 1);
    int64_t y = 0;
    for (size_t k = i + 5; k < i + 9; k++) {
        if (p[k] < '0' || p[k] > '9') {
            return -1;
        }
        y = y * 10 + (p[k] - '0');
    }
    if (m < 0 || d < 1 || d > imap_days_in_month(y, m + 1)) {
        return -1;
    }
    *days = imap_days(y, m + 1, d);
    *used = i + 9;
    return 0;
}

int imap_parse_date(const struct imap_node *node, int64_t *out)
{
    size_t used;
    int64_t days;
    if (node == NULL || node->type == IMAP_NODE_LIST || node->len == 0 || node->data[0] == ' ' ||
        imap_date_text(node->data, node->len, &used, &days) != 0 || used != node->len) {
        return -1;
    }
    *out = days * 86400;
    return 0;
}

static int imap_two(const char *p, int max, int *out)
{
    if (p[0] < '0' || p[0] > '9' || p[1] < '0' || p[1] > '9') {
        return -1;
    }
    *out = (p[0] - '0') * 10 + (p[1] - '0');
    return *out <= max ? 0 : -1;
}

int imap_parse_date_time(const struct imap_node *node, int64_t *out)
{
    size_t used;
    int64_t days;
    if (node == NULL || node->type != IMAP_NODE_STRING ||
        imap_date_text(node->data, node->len, &used, &days) != 0) {
        return -1;
    }
    const char *p = node->data + used;
    int hh, mm, ss, zh, zm;
    /* " hh:mm:ss +zzzz" */
    if (node->len - used != 15 || p[0] != ' ' || p[3] != ':' || p[6] != ':' || p[9] != ' ' ||
        (p[10] != '+' && p[10] != '-') || imap_two(p + 1, 23, &hh) != 0 ||
        imap_two(p + 4, 59, &mm) != 0 || imap_two(p + 7, 60, &ss) != 0 ||
        imap_two(p + 11, 99, &zh) != 0 || imap_two(p + 13, 59, &zm) != 0) {
        return -1;
    }
    int64_t zone = ((int64_t)zh * 3600 + (int64_t)zm * 60) * (p[10] == '-' ? -1 : 1);
    *out = days * 86400 + (int64_t)hh * 3600 + (int64_t)mm * 60 + ss - zone;
    return 0;
}

/* ---- FETCH ----------------------------------------------------------------------------- */

static int
imap_fetch_fail(char *err, size_t err_size, const char *what, const char *data, size_t len)
{
    snprintf(err, err_size, "%s: %.*s", what, (int)(len > 60 ? 60 : len), data);
    return -1;
}

int imap_field_name_cmp(const char *a, size_t a_len, const char *b, size_t b_len)
{
    size_t n = a_len < b_len ? a_len : b_len;
    for (size_t i = 0; i < n; i++) {
        int ca = tolower((unsigned char)a[i]), cb = tolower((unsigned char)b[i]);
        if (ca != cb) {
            return ca - cb;
        }
    }
    return a_len < b_len ? -1 : a_len > b_len;
}

int imap_fetch_section_lists(const struct imap_fetch_section *sec, const char *name, size_t len)
{
    size_t lo = 0, hi = sec->field_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = imap_field_name_cmp(sec->fields[mid], sec->field_len[mid], name, len);
        if (c == 0) {
            return 1;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return 0;
}

struct imap_field_name {
    const char *p;
    size_t len;
};

static int imap_field_name_qcmp(const void *a, const void *b)
{
    const struct imap_field_name *x = a, *y = b;
    return imap_field_name_cmp(x->p, x->len, y->p, y->len);
}

/* Sorts s's names (imap_fetch_section_lists searches them). 0, or -2 out of memory. */
static int imap_fetch_fields_sort(struct imap_fetch_section *s)
{
    if (s->field_count < 2) {
        return 0;
    }
    struct imap_field_name *names = malloc(s->field_count * sizeof *names);
    if (names == NULL) {
        return -2;
    }
    for (size_t i = 0; i < s->field_count; i++) {
        names[i] = (struct imap_field_name){s->fields[i], s->field_len[i]};
    }
    qsort(names, s->field_count, sizeof *names, imap_field_name_qcmp);
    for (size_t i = 0; i < s->field_count; i++) {
        s->fields[i] = names[i].p;
        s->field_len[i] = names[i].len;
    }
    free(names);
    return 0;
}

/* HEADER.FIELDS (a b c) names, from the text after the keyword. The names are text inside
 * one atom, so the line bounds their count: the arrays are sized to the SPs in the list
 * (names - 1 when it is well formed), in one allocation. A name is an astring (RFC 3501 9,
 * header-fld-name), so it may be quoted: ("From" "Subject") names From and Subject, as
 * Dovecot takes it (it was BAD here). Names with a blank, ':', a parenthesis, '"' or '\\' are
 * refused, quoted or not (RFC 5322 field names have no blank or ':'; no mail names a field
 * with the others), so a quoted name never needs an escape. Blanks around the names may be
 * more than one SP, as Dovecot takes them ("(From  To )"; RFC 3501 has one SP between names
 * and none inside the parentheses): the section is echoed as the client wrote it. 0, -1
 * (syntax) or -2
 * (out of memory); s->fields, once set, is freed by the caller on failure too. */
static int imap_fetch_fields(struct imap_fetch_section *s, const char *p, size_t len)
{
    if (len < 3 || p[0] != ' ' || p[1] != '(' || p[len - 1] != ')') {
        return -1;
    }
    size_t at = 2, end = len - 1;
    size_t cap = 1;
    for (size_t i = at; i < end; i++) {
        cap += p[i] == ' ';
    }
    _Static_assert(_Alignof(size_t) <= _Alignof(const char *), "field_len after fields");
    s->fields = malloc(cap * (sizeof *s->fields + sizeof *s->field_len));
    if (s->fields == NULL) {
        return -2;
    }
    s->field_len = (size_t *)(void *)(s->fields + cap);
    while (at < end) {
        if (p[at] == ' ') {
            at++; /* blanks before, between and after names: Dovecot takes any number */
            continue;
        }
        int quoted = p[at] == '"';
        size_t start = at + (size_t)quoted;
        at = start;
        while (at < end && p[at] != (quoted ? '"' : ' ')) {
            uint8_t c = (uint8_t)p[at];
            if (c <= 0x20 || c >= 0x7f || c == ':' || c == '"' || c == '\\' || c == '(' ||
                c == ')') {
                return -1;
            }
            at++;
        }
        size_t stop = at;
        if (quoted && (at == end || (++at < end && p[at] != ' '))) {
            return -1; /* unterminated, or the closing quote not followed by SP or ')' */
        }
        if (stop == start) {
            return -1; /* an empty quoted name: "" */
        }
        s->fields[s->field_count] = p + start;
        s->field_len[s->field_count++] = stop - start;
    }
    return s->field_count > 0 ? imap_fetch_fields_sort(s) : -1;
}

/* The text between the brackets: [part.part.]HEADER|TEXT|MIME|HEADER.FIELDS[.NOT] (..)
 * 0, -1 (syntax) or -2 (out of memory, imap_fetch_fields). */
static int imap_fetch_spec(struct imap_fetch_section *s, const char *p, size_t len)
{
    size_t at = 0;
    s->kind = IMAP_SECTION_ALL;
    s->spec = p;
    s->spec_len = len;
    while (at < len && p[at] >= '0' && p[at] <= '9') {
        size_t start = at;
        uint64_t n;
        while (at < len && p[at] >= '0' && p[at] <= '9') {
            at++;
        }
        if (p[start] == '0' || imap_digits(p + start, at - start, UINT32_MAX, &n) != 0 ||
            s->part_count == sizeof s->part / sizeof s->part[0]) {
            return -1;
        }
        s->part[s->part_count++] = (uint32_t)n;
        if (at == len) {
            return 0;
        }
        if (p[at++] != '.') {
            return -1;
        }
    }
    const char *word = p + at;
    size_t rest = len - at;
    if (imap_text_is(word, rest, "HEADER")) {
        s->kind = IMAP_SECTION_HEADER;
    } else if (imap_text_is(word, rest, "TEXT")) {
        s->kind = IMAP_SECTION_TEXT;
    } else if (imap_text_is(word, rest, "MIME") && s->part_count > 0) {
        s->kind = IMAP_SECTION_MIME;
    } else if (rest > 17 && strncasecmp(word, "HEADER.FIELDS.NOT", 17) == 0) {
        s->kind = IMAP_SECTION_HEADER_FIELDS_NOT;
        return imap_fetch_fields(s, word + 17, rest - 17);
    } else if (rest > 13 && strncasecmp(word, "HEADER.FIELDS", 13) == 0) {
        s->kind = IMAP_SECTION_HEADER_FIELDS;
        return imap_fetch_fields(s, word + 13, rest - 13);
    } else if (rest != 0 || s->part_count > 0) {
        return -1;
    }
    return 0;
}

/* "<start.length>" */
static int imap_fetch_partial(struct imap_fetch_section *s, const char *p, size_t len)
{
    if (len < 5 || p[0] != '<' || p[len - 1] != '>') {
        return -1;
    }
    const char *dot = memchr(p, '.', len);
    if (dot == NULL) {
        return -1;
    }
    size_t a = (size_t)(dot - p) - 1, b = len - 2 - a - 1;
    if (imap_digits(p + 1, a, UINT32_MAX, &s->start) != 0 ||
        imap_digits(dot + 1, b, UINT32_MAX, &s->length) != 0 || s->length == 0) {
        return -1;
    }
    s->partial = 1;
    return 0;
}

/* Where the '[' of a body section attribute is (BODY[...] or BODY.PEEK[...], with *peek
 * set), or 0 if n is no such attribute: one test, for counting the sections and for reading
 * them, so the two cannot disagree. */
static size_t imap_fetch_body_at(const struct imap_node *n, int *peek)
{
    *peek = 0;
    if (n->type != IMAP_NODE_ATOM) {
        return 0;
    }
    if (n->len > 10 && strncasecmp(n->data, "BODY.PEEK[", 10) == 0) {
        *peek = 1;
        return 9;
    }
    if (n->len > 5 && strncasecmp(n->data, "BODY[", 5) == 0) {
        return 4;
    }
    return 0;
}

/* The body sections among the attributes at node (one attribute or a list of them). */
static size_t imap_fetch_sections_in(const struct imap_command *cmd, const struct imap_node *node)
{
    int peek;
    if (node->type != IMAP_NODE_LIST) {
        return imap_fetch_body_at(node, &peek) != 0;
    }
    size_t count = 0;
    for (uint32_t i = node->child; i != IMAP_NODE_NONE; i = cmd->nodes[i].next) {
        count += imap_fetch_body_at(&cmd->nodes[i], &peek) != 0;
    }
    return count;
}

/* The next section of f, into the room imap_parse_fetch() made for every one the command
 * has. 0, -1 or -2 (out of memory), with err set; on failure the section holds nothing. */
static int imap_fetch_body(
    struct imap_fetch *f, const char *p, size_t len, int peek, char *err, size_t err_size)
{
    const char *open = memchr(p, '[', len), *close = memchr(p, ']', len);
    struct imap_fetch_section *s = &f->sections[f->section_count];
    memset(s, 0, sizeof *s);
    s->peek = peek;
    int rc = -1;
    if (open != NULL && close != NULL && close > open) {
        rc = imap_fetch_spec(s, open + 1, (size_t)(close - open - 1));
    }
    if (rc == -2) {
        snprintf(err, err_size, "out of memory");
    } else if (rc != 0) {
        rc = imap_fetch_fail(err, err_size, "bad body section", p, len);
    } else if (close + 1 < p + len &&
               imap_fetch_partial(s, close + 1, (size_t)(p + len - (close + 1))) != 0) {
        rc = imap_fetch_fail(err, err_size, "bad partial range", p, len);
    }
    if (rc != 0) {
        free(s->fields);
        memset(s, 0, sizeof *s);
        return rc;
    }
    f->section_count++;
    return 0;
}

static int
imap_fetch_att(struct imap_fetch *f, const struct imap_node *n, char *err, size_t err_size)
{
    static const struct {
        const char *name;
        unsigned item;
    } simple[] = {{"UID", IMAP_FETCH_UID},
                  {"FLAGS", IMAP_FETCH_FLAGS},
                  {"INTERNALDATE", IMAP_FETCH_INTERNALDATE},
                  {"RFC822.SIZE", IMAP_FETCH_RFC822_SIZE},
                  {"ENVELOPE", IMAP_FETCH_ENVELOPE},
                  {"BODYSTRUCTURE", IMAP_FETCH_BODYSTRUCTURE},
                  {"BODY", IMAP_FETCH_BODY},
                  {"RFC822", IMAP_FETCH_RFC822},
                  {"RFC822.HEADER", IMAP_FETCH_RFC822_HEADER},
                  {"RFC822.TEXT", IMAP_FETCH_RFC822_TEXT},
                  {"MODSEQ", IMAP_FETCH_MODSEQ}};
    if (n->type != IMAP_NODE_ATOM) {
        return imap_fetch_fail(err, err_size, "bad fetch attribute", "", 0);
    }
    for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++) {
        if (imap_text_is(n->data, n->len, simple[i].name)) {
            f->items |= simple[i].item;
            return 0;
        }
    }
    int peek;
    size_t at = imap_fetch_body_at(n, &peek);
    if (at != 0) {
        return imap_fetch_body(f, n->data + at, n->len - at, peek, err, err_size);
    }
    return imap_fetch_fail(err, err_size, "unknown fetch attribute", n->data, n->len);
}

/* The attributes at node (not a macro) into out, whose sections array has room for every
 * section among them. */
static int imap_fetch_atts(const struct imap_command *cmd,
                           const struct imap_node *node,
                           struct imap_fetch *out,
                           char *err,
                           size_t err_size)
{
    if (node->type != IMAP_NODE_LIST) {
        return imap_fetch_att(out, node, err, err_size);
    }
    if (node->child == IMAP_NODE_NONE) {
        snprintf(err, err_size, "empty fetch attribute list");
        return -1;
    }
    for (uint32_t i = node->child; i != IMAP_NODE_NONE; i = cmd->nodes[i].next) {
        int rc = imap_fetch_att(out, &cmd->nodes[i], err, err_size);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

int imap_parse_fetch(const struct imap_command *cmd,
                     const struct imap_node *node,
                     struct imap_fetch *out,
                     char *err,
                     size_t err_size)
{
    memset(out, 0, sizeof *out);
    if (node == NULL) {
        snprintf(err, err_size, "expected fetch attributes");
        return -1;
    }
    if (imap_atom_is(node, "ALL")) {
        out->items = IMAP_FETCH_FLAGS | IMAP_FETCH_INTERNALDATE | IMAP_FETCH_RFC822_SIZE |
                     IMAP_FETCH_ENVELOPE;
        return 0;
    }
    if (imap_atom_is(node, "FAST")) {
        out->items = IMAP_FETCH_FLAGS | IMAP_FETCH_INTERNALDATE | IMAP_FETCH_RFC822_SIZE;
        return 0;
    }
    if (imap_atom_is(node, "FULL")) {
        out->items = IMAP_FETCH_FLAGS | IMAP_FETCH_INTERNALDATE | IMAP_FETCH_RFC822_SIZE |
                     IMAP_FETCH_ENVELOPE | IMAP_FETCH_BODY;
        return 0;
    }
    /* Room for every section at once: the sections are nodes of the command, so
     * IMAP_PARSE_NODES_MAX bounds the count, and nothing grows later. */
    size_t count = imap_fetch_sections_in(cmd, node);
    if (count > 0) {
        out->sections = calloc(count, sizeof *out->sections);
        if (out->sections == NULL) {
            snprintf(err, err_size, "out of memory");
            return -2;
        }
    }
    int rc = imap_fetch_atts(cmd, node, out, err, err_size);
    if (rc != 0) {
        imap_fetch_free(out);
    }
    return rc;
}

void imap_fetch_free(struct imap_fetch *fetch)
{
    for (size_t i = 0; i < fetch->section_count; i++) {
        free(fetch->sections[i].fields); /* field_len is in the same block */
    }
    free(fetch->sections);
    memset(fetch, 0, sizeof *fetch);
}

/* ---- SEARCH ---------------------------------------------------------------------------- */

struct imap_search_parser {
    const struct imap_command *cmd;
    struct imap_search *s;
    char *err;
    size_t err_size;
    /* OR and NOT keys still waiting for an operand (imap_search_key): a stack of our own
     * instead of the C stack, so "OR a OR b OR c ..." and "OR OR OR a b c d" of any length
     * cost no recursion. */
    uint32_t *pending;
    size_t pending_count;
    size_t pending_cap;
};

static int
imap_search_fail(struct imap_search_parser *sp, const char *what, const struct imap_node *n)
{
    if (n != NULL && n->type == IMAP_NODE_ATOM) {
        snprintf(sp->err, sp->err_size, "%s: %.*s", what, (int)(n->len > 40 ? 40 : n->len),
                 n->data);
    } else {
        snprintf(sp->err, sp->err_size, "%s", what);
    }
    return -1;
}

static int imap_search_new(struct imap_search_parser *sp, enum imap_search_op op, uint32_t *index)
{
    if (sp->s->count == sp->s->cap) {
        /* No cap of its own: every key but the top level's takes a node of the command, and
         * the command's nodes are bounded (IMAP_PARSE_NODES_MAX, and the line by line_max). */
        size_t cap = sp->s->cap == 0 ? 16 : sp->s->cap * 2;
        struct imap_search_key *keys = realloc(sp->s->keys, cap * sizeof *keys);
        if (keys == NULL) {
            return imap_search_fail(sp, "out of memory", NULL);
        }
        sp->s->keys = keys;
        sp->s->cap = cap;
    }
    struct imap_search_key *k = &sp->s->keys[sp->s->count];
    memset(k, 0, sizeof *k);
    k->op = op;
    k->child = IMAP_NODE_NONE;
    k->next = IMAP_NODE_NONE;
    *index = (uint32_t)sp->s->count++;
    return 0;
}

static const struct imap_node *
imap_search_arg(struct imap_search_parser *sp, const struct imap_node *n, uint32_t *cursor)
{
    *cursor = n->next;
    return imap_node(sp->cmd, n->next);
}

static int
imap_search_key(struct imap_search_parser *sp, uint32_t *cursor, uint32_t *index, int depth);

/* Keys from *cursor to the end of the sibling chain, as children of parent. */
static int
imap_search_keys(struct imap_search_parser *sp, uint32_t cursor, uint32_t parent, int depth)
{
    uint32_t prev = IMAP_NODE_NONE;
    if (cursor == IMAP_NODE_NONE) {
        return imap_search_fail(sp, "expected a search key", NULL);
    }
    while (cursor != IMAP_NODE_NONE) {
        uint32_t index = IMAP_NODE_NONE;
        if (imap_search_key(sp, &cursor, &index, depth) != 0) {
            return -1;
        }
        if (prev == IMAP_NODE_NONE) {
            sp->s->keys[parent].child = index;
        } else {
            sp->s->keys[prev].next = index;
        }
        prev = index;
    }
    return 0;
}

static const struct {
    const char *name;
    enum imap_search_op op;
    unsigned flags;
} imap_search_simple[] = {
    {"ALL", IMAP_SK_ALL, 0},
    {"ANSWERED", IMAP_SK_FLAG_SET, IMAP_FLAG_ANSWERED},
    {"DELETED", IMAP_SK_FLAG_SET, IMAP_FLAG_DELETED},
    {"DRAFT", IMAP_SK_FLAG_SET, IMAP_FLAG_DRAFT},
    {"FLAGGED", IMAP_SK_FLAG_SET, IMAP_FLAG_FLAGGED},
    {"SEEN", IMAP_SK_FLAG_SET, IMAP_FLAG_SEEN},
    {"UNANSWERED", IMAP_SK_FLAG_UNSET, IMAP_FLAG_ANSWERED},
    {"UNDELETED", IMAP_SK_FLAG_UNSET, IMAP_FLAG_DELETED},
    {"UNDRAFT", IMAP_SK_FLAG_UNSET, IMAP_FLAG_DRAFT},
    {"UNFLAGGED", IMAP_SK_FLAG_UNSET, IMAP_FLAG_FLAGGED},
    {"UNSEEN", IMAP_SK_FLAG_UNSET, IMAP_FLAG_SEEN},
    {"NEW", IMAP_SK_NEW, 0},
    {"OLD", IMAP_SK_OLD, 0},
    {"RECENT", IMAP_SK_RECENT, 0},
};

static const struct {
    const char *name;
    enum imap_search_op op;
} imap_search_string[] = {
    {"FROM", IMAP_SK_FROM}, {"TO", IMAP_SK_TO},           {"CC", IMAP_SK_CC},
    {"BCC", IMAP_SK_BCC},   {"SUBJECT", IMAP_SK_SUBJECT}, {"BODY", IMAP_SK_BODY},
    {"TEXT", IMAP_SK_TEXT}, {"KEYWORD", IMAP_SK_KEYWORD}, {"UNKEYWORD", IMAP_SK_UNKEYWORD}};

static const struct {
    const char *name;
    enum imap_search_op op;
} imap_search_dates[] = {{"SINCE", IMAP_SK_SINCE},
                         {"BEFORE", IMAP_SK_BEFORE},
                         {"ON", IMAP_SK_ON},
                         {"SENTSINCE", IMAP_SK_SENTSINCE},
                         {"SENTBEFORE", IMAP_SK_SENTBEFORE},
                         {"SENTON", IMAP_SK_SENTON}};

static int imap_search_set(struct imap_search_parser *sp,
                           const struct imap_node *n,
                           enum imap_search_op op,
                           uint32_t *index)
{
    struct imap_seqset *set = malloc(sizeof *set);
    if (set == NULL) {
        return imap_search_fail(sp, "out of memory", NULL);
    }
    int parsed =
        n != NULL && n->type == IMAP_NODE_ATOM ? imap_parse_seqset(n->data, n->len, set) : -1;
    if (parsed != 0) {
        free(set);
        return imap_search_fail(sp, parsed == -2 ? "out of memory" : "bad sequence set",
                                parsed == -2 ? NULL : n);
    }
    if (imap_search_new(sp, op, index) != 0) {
        imap_seqset_free(set);
        free(set);
        return -1;
    }
    sp->s->keys[*index].set = set;
    return 0;
}

/* A key that takes one string (or atom) argument. */
static int imap_search_with_string(struct imap_search_parser *sp,
                                   const struct imap_node *n,
                                   uint32_t *cursor,
                                   enum imap_search_op op,
                                   uint32_t *index)
{
    const struct imap_node *a = imap_search_arg(sp, n, cursor);
    if (a == NULL || a->type == IMAP_NODE_LIST) {
        return imap_search_fail(sp, "expected a string after", n);
    }
    if ((op == IMAP_SK_KEYWORD || op == IMAP_SK_UNKEYWORD) &&
        (a->type != IMAP_NODE_ATOM || a->data[0] == '\\')) {
        return imap_search_fail(sp, "expected a keyword after", n);
    }
    if (imap_search_new(sp, op, index) != 0) {
        return -1;
    }
    sp->s->keys[*index].str = a->data;
    sp->s->keys[*index].str_len = a->len;
    *cursor = a->next;
    return 0;
}

static int imap_search_with_arg(struct imap_search_parser *sp,
                                const struct imap_node *n,
                                uint32_t *cursor,
                                uint32_t *index)
{
    for (size_t i = 0; i < sizeof imap_search_string / sizeof imap_search_string[0]; i++) {
        if (imap_atom_is(n, imap_search_string[i].name)) {
            return imap_search_with_string(sp, n, cursor, imap_search_string[i].op, index);
        }
    }
    const struct imap_node *a = imap_search_arg(sp, n, cursor);
    for (size_t i = 0; i < sizeof imap_search_dates / sizeof imap_search_dates[0]; i++) {
        int64_t when;
        if (imap_atom_is(n, imap_search_dates[i].name)) {
            if (imap_parse_date(a, &when) != 0) {
                return imap_search_fail(sp, "expected a date after", n);
            }
            if (imap_search_new(sp, imap_search_dates[i].op, index) != 0) {
                return -1;
            }
            sp->s->keys[*index].number = when;
            *cursor = a->next;
            return 0;
        }
    }
    if (imap_atom_is(n, "LARGER") || imap_atom_is(n, "SMALLER")) {
        uint64_t size;
        if (imap_number(a, UINT32_MAX, &size) != 0) {
            return imap_search_fail(sp, "expected a number after", n);
        }
        if (imap_search_new(sp, imap_atom_is(n, "LARGER") ? IMAP_SK_LARGER : IMAP_SK_SMALLER,
                            index) != 0) {
            return -1;
        }
        sp->s->keys[*index].number = (int64_t)size;
        *cursor = a->next;
        return 0;
    }
    if (imap_atom_is(n, "MODSEQ")) {
        uint64_t modseq;
        if (a != NULL && a->type == IMAP_NODE_STRING) { /* entry-name entry-type-req */
            const struct imap_node *type = imap_node(sp->cmd, a->next);
            if (!imap_atom_is(type, "priv") && !imap_atom_is(type, "shared") &&
                !imap_atom_is(type, "all")) {
                return imap_search_fail(sp, "bad MODSEQ entry type", type);
            }
            a = imap_node(sp->cmd, type->next);
        }
        if (imap_number(a, INT64_MAX, &modseq) != 0) {
            return imap_search_fail(sp, "expected a mod-sequence after", n);
        }
        if (imap_search_new(sp, IMAP_SK_MODSEQ, index) != 0) {
            return -1;
        }
        sp->s->keys[*index].number = (int64_t)modseq;
        *cursor = a->next;
        return 0;
    }
    if (imap_atom_is(n, "UID")) {
        if (imap_search_set(sp, a, IMAP_SK_UIDSET, index) != 0) {
            return -1;
        }
        *cursor = a->next;
        return 0;
    }
    if (imap_atom_is(n, "HEADER")) {
        const struct imap_node *b = a != NULL ? imap_node(sp->cmd, a->next) : NULL;
        if (a == NULL || b == NULL || a->type == IMAP_NODE_LIST || b->type == IMAP_NODE_LIST) {
            return imap_search_fail(sp, "HEADER needs a field name and a string", NULL);
        }
        if (imap_search_new(sp, IMAP_SK_HEADER, index) != 0) {
            return -1;
        }
        sp->s->keys[*index].str = a->data;
        sp->s->keys[*index].str_len = a->len;
        sp->s->keys[*index].str2 = b->data;
        sp->s->keys[*index].str2_len = b->len;
        *cursor = b->next;
        return 0;
    }
    return imap_search_fail(sp, "unknown search key", n);
}

/* One key that is not OR or NOT at *cursor: a list (its keys ANDed), a simple key or one with
 * arguments. */
static int
imap_search_primary(struct imap_search_parser *sp, uint32_t *cursor, uint32_t *index, int depth)
{
    const struct imap_node *n = imap_node(sp->cmd, *cursor);
    if (n == NULL) {
        return imap_search_fail(sp, "expected a search key", NULL);
    }
    if (depth > IMAP_PARSE_DEPTH_MAX) { /* lists: the command parser's limit holds them */
        return imap_search_fail(sp, "lists nested too deeply", NULL);
    }
    if (n->type == IMAP_NODE_LIST) {
        if (imap_search_new(sp, IMAP_SK_AND, index) != 0 ||
            imap_search_keys(sp, n->child, *index, depth + 1) != 0) {
            return -1;
        }
        *cursor = n->next;
        return 0;
    }
    if (n->type != IMAP_NODE_ATOM) {
        return imap_search_fail(sp, "expected a search key, not a string", NULL);
    }
    for (size_t i = 0; i < sizeof imap_search_simple / sizeof imap_search_simple[0]; i++) {
        if (imap_atom_is(n, imap_search_simple[i].name)) {
            if (imap_search_new(sp, imap_search_simple[i].op, index) != 0) {
                return -1;
            }
            sp->s->keys[*index].flags = imap_search_simple[i].flags;
            *cursor = n->next;
            return 0;
        }
    }
    if ((n->data[0] >= '0' && n->data[0] <= '9') || n->data[0] == '*') {
        if (imap_search_set(sp, n, IMAP_SK_SEQSET, index) != 0) {
            return -1;
        }
        *cursor = n->next;
        return 0;
    }
    return imap_search_with_arg(sp, n, cursor, index);
}

/* One whole key at *cursor, OR and NOT with their operands, advancing *cursor past it. The
 * operators waiting for operands go on sp->pending (from its count at the call, since a list
 * inside an operand comes back here), so chains of them need no recursion. */
static int
imap_search_key(struct imap_search_parser *sp, uint32_t *cursor, uint32_t *index, int depth)
{
    size_t base = sp->pending_count;
    for (;;) {
        const struct imap_node *n = imap_node(sp->cmd, *cursor);
        int is_or = imap_atom_is(n, "OR");
        if (n == NULL && sp->pending_count > base) {
            int or_top = sp->s->keys[sp->pending[sp->pending_count - 1]].op == IMAP_SK_OR;
            return imap_search_fail(sp, or_top ? "OR needs two keys" : "NOT needs a key", NULL);
        }
        if (is_or || imap_atom_is(n, "NOT")) {
            uint32_t op;
            if (sp->pending_count == sp->pending_cap) {
                size_t cap = sp->pending_cap == 0 ? 16 : sp->pending_cap * 2;
                uint32_t *pending = realloc(sp->pending, cap * sizeof *pending);
                if (pending == NULL) {
                    return imap_search_fail(sp, "out of memory", NULL);
                }
                sp->pending = pending;
                sp->pending_cap = cap;
            }
            if (imap_search_new(sp, is_or ? IMAP_SK_OR : IMAP_SK_NOT, &op) != 0) {
                return -1;
            }
            sp->pending[sp->pending_count++] = op;
            *cursor = n->next;
            continue;
        }
        uint32_t done;
        if (imap_search_primary(sp, cursor, &done, depth) != 0) {
            return -1;
        }
        /* done is an operand of the innermost waiting operator; each operator it completes
         * is in turn an operand of the one before it. */
        while (sp->pending_count > base) {
            uint32_t top = sp->pending[sp->pending_count - 1];
            struct imap_search_key *t = &sp->s->keys[top];
            if (t->child == IMAP_NODE_NONE) {
                t->child = done;
                if (t->op == IMAP_SK_OR) {
                    break; /* its second key comes next */
                }
            } else {
                sp->s->keys[t->child].next = done;
            }
            sp->pending_count--;
            done = top;
        }
        if (sp->pending_count == base) {
            *index = done;
            return 0;
        }
    }
}

int imap_parse_search(const struct imap_command *cmd,
                      const struct imap_node *node,
                      struct imap_search *out,
                      char *err,
                      size_t err_size)
{
    struct imap_search_parser sp = {.cmd = cmd, .s = out, .err = err, .err_size = err_size};
    out->keys = NULL;
    out->count = 0;
    out->cap = 0;
    out->charset_utf8 = 0;
    if (err_size > 0) {
        err[0] = '\0';
    }
    /* Every key but the top level's takes a node of the command: sized once, not grown by
     * doubling (a realloc's copy of up to half a megabyte for a long OR chain) */
    out->keys = malloc((cmd->node_count + 1) * sizeof *out->keys);
    out->cap = out->keys != NULL ? cmd->node_count + 1 : 0;
    uint32_t root;
    int rc = imap_search_new(&sp, IMAP_SK_AND, &root);
    uint32_t cursor = node != NULL ? (uint32_t)(node - cmd->nodes) : IMAP_NODE_NONE;
    if (rc == 0 && imap_atom_is(node, "CHARSET")) {
        const struct imap_node *cs = imap_node(cmd, node->next);
        char name[32];
        if (imap_astring(cs, name, sizeof name) != 0) {
            rc = imap_search_fail(&sp, "expected a charset name", NULL);
        } else if (strcasecmp(name, "UTF-8") != 0 && strcasecmp(name, "US-ASCII") != 0) {
            snprintf(err, err_size, "[BADCHARSET (US-ASCII UTF-8)] unknown charset");
            rc = -1;
        } else {
            out->charset_utf8 = strcasecmp(name, "UTF-8") == 0;
            cursor = cs->next;
        }
    }
    if (rc == 0) {
        rc = imap_search_keys(&sp, cursor, root, 0);
    }
    free(sp.pending);
    int depth = rc == 0 ? imap_search_shape(out, IMAP_SEARCH_DEPTH_MAX) : 0;
    if (rc == 0 && depth < 0) {
        rc = imap_search_fail(&sp, "out of memory", NULL);
    } else if (rc == 0 && depth > IMAP_SEARCH_DEPTH_MAX) {
        rc = imap_search_fail(&sp, "search keys nested too deeply", NULL);
    }
    if (rc != 0) {
        imap_search_free(out);
    }
    return rc;
}

void imap_search_free(struct imap_search *search)
{
    for (size_t i = 0; i < search->count; i++) {
        if (search->keys[i].set != NULL) {
            imap_seqset_free(search->keys[i].set);
        }
        free(search->keys[i].set);
        search->keys[i].set = NULL;
    }
    free(search->keys);
    search->keys = NULL;
    search->count = 0;
    search->cap = 0;
}

/* ---- STATUS items, LIST (RFC 5258, 5819, 6154), CREATE parameters (RFC 4466, 6154) ------ */

static int imap_reader_fail(char *err, size_t err_size, const char *what)
{
    snprintf(err, err_size, "%s", what);
    return -1;
}

int imap_parse_status_items(const struct imap_command *cmd,
                            const struct imap_node *node,
                            unsigned *items,
                            char *err,
                            size_t err_size)
{
    static const struct {
        const char *name;
        unsigned bit;
    } known[] = {
        {"MESSAGES", IMAP_STATUS_MESSAGES}, {"RECENT", IMAP_STATUS_RECENT},
        {"UIDNEXT", IMAP_STATUS_UIDNEXT},   {"UIDVALIDITY", IMAP_STATUS_UIDVALIDITY},
        {"UNSEEN", IMAP_STATUS_UNSEEN},     {"HIGHESTMODSEQ", IMAP_STATUS_HIGHESTMODSEQ},
        {"DELETED", IMAP_STATUS_DELETED},   {"DELETED-STORAGE", IMAP_STATUS_DELETED_STORAGE}};
    *items = 0;
    if (node == NULL || node->type != IMAP_NODE_LIST || node->child == IMAP_NODE_NONE) {
        return imap_reader_fail(err, err_size, "expected a list of STATUS items");
    }
    for (const struct imap_node *n = imap_node(cmd, node->child); n != NULL;
         n = imap_node(cmd, n->next)) {
        unsigned bit = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0] && bit == 0; i++) {
            if (imap_atom_is(n, known[i].name)) {
                bit = known[i].bit;
            }
        }
        if (bit == 0) {
            return imap_reader_fail(err, err_size, "unknown STATUS item");
        }
        *items |= bit;
    }
    return 0;
}

static int imap_list_selection(const struct imap_command *cmd,
                               const struct imap_node *list,
                               struct imap_list *out,
                               char *err,
                               size_t err_size)
{
    for (const struct imap_node *n = imap_node(cmd, list->child); n != NULL;
         n = imap_node(cmd, n->next)) {
        if (imap_atom_is(n, "SUBSCRIBED")) {
            out->select |= IMAP_LIST_SELECT_SUBSCRIBED;
        } else if (imap_atom_is(n, "REMOTE")) {
            out->select |= IMAP_LIST_SELECT_REMOTE;
        } else if (imap_atom_is(n, "RECURSIVEMATCH")) {
            out->select |= IMAP_LIST_SELECT_RECURSIVEMATCH;
        } else if (imap_atom_is(n, "SPECIAL-USE")) {
            out->select |= IMAP_LIST_SELECT_SPECIAL_USE;
        } else {
            return imap_reader_fail(err, err_size, "unknown LIST selection option");
        }
    }
    /* RFC 5258 3: RECURSIVEMATCH only qualifies an option that selects something. */
    if ((out->select & IMAP_LIST_SELECT_RECURSIVEMATCH) != 0 &&
        (out->select & (IMAP_LIST_SELECT_SUBSCRIBED | IMAP_LIST_SELECT_SPECIAL_USE)) == 0) {
        return imap_reader_fail(err, err_size,
                                "RECURSIVEMATCH needs SUBSCRIBED or SPECIAL-USE with it");
    }
    return 0;
}

static int imap_list_return(const struct imap_command *cmd,
                            const struct imap_node *list,
                            struct imap_list *out,
                            char *err,
                            size_t err_size)
{
    for (const struct imap_node *n = imap_node(cmd, list->child); n != NULL;
         n = imap_node(cmd, n->next)) {
        if (imap_atom_is(n, "SUBSCRIBED")) {
            out->ret |= IMAP_LIST_RETURN_SUBSCRIBED;
        } else if (imap_atom_is(n, "CHILDREN")) {
            out->ret |= IMAP_LIST_RETURN_CHILDREN;
        } else if (imap_atom_is(n, "SPECIAL-USE")) {
            out->ret |= IMAP_LIST_RETURN_SPECIAL_USE;
        } else if (imap_atom_is(n, "STATUS") && (out->ret & IMAP_LIST_RETURN_STATUS) == 0) {
            const struct imap_node *items = imap_node(cmd, n->next);
            if (imap_parse_status_items(cmd, items, &out->status_items, err, err_size) != 0) {
                return -1;
            }
            out->ret |= IMAP_LIST_RETURN_STATUS;
            n = items; /* the loop steps past the item list */
        } else {
            return imap_reader_fail(err, err_size, "unknown LIST return option, or STATUS twice");
        }
    }
    return 0;
}

static int imap_list_pattern_ok(const struct imap_node *n)
{
    return n != NULL && (n->type == IMAP_NODE_ATOM || n->type == IMAP_NODE_STRING);
}

/* The patterns at n, a list of them or one, into out->patterns: counted, then allocated at
 * that count (they are nodes, so IMAP_PARSE_NODES_MAX bounds it). 0, -1 or -2. */
static int imap_list_patterns_read(const struct imap_command *cmd,
                                   const struct imap_node *n,
                                   struct imap_list *out,
                                   char *err,
                                   size_t err_size)
{
    const struct imap_node *first = n;
    size_t count = 1;
    if (n != NULL && n->type == IMAP_NODE_LIST) {
        out->extended = 1;
        first = imap_node(cmd, n->child);
        count = 0;
        for (const struct imap_node *p = first; p != NULL; p = imap_node(cmd, p->next)) {
            if (!imap_list_pattern_ok(p)) {
                return imap_reader_fail(err, err_size, "a mailbox pattern is an atom or a string");
            }
            count++;
        }
        if (count == 0) {
            return imap_reader_fail(err, err_size, "an empty list of mailbox patterns");
        }
    } else if (!imap_list_pattern_ok(n)) {
        return imap_reader_fail(err, err_size, "expected a mailbox pattern");
    }
    /* the type written out: clang-tidy takes sizeof of a pointer expression for a slip */
    out->patterns = calloc(count, sizeof(const struct imap_node *));
    if (out->patterns == NULL) {
        snprintf(err, err_size, "out of memory");
        return -2;
    }
    for (const struct imap_node *p = first; out->pattern_count < count;
         p = imap_node(cmd, p->next)) {
        out->patterns[out->pattern_count++] = p;
    }
    return 0;
}

/* LIST's arguments into out, for imap_parse_list(), which frees what was read if this fails. */
static int
imap_list_args(const struct imap_command *cmd, struct imap_list *out, char *err, size_t err_size)
{
    const struct imap_node *n = imap_arg(cmd, 0);
    if (n != NULL && n->type == IMAP_NODE_LIST) {
        out->extended = 1;
        if (imap_list_selection(cmd, n, out, err, err_size) != 0) {
            return -1;
        }
        n = imap_node(cmd, n->next);
    }
    if (!imap_list_pattern_ok(n)) {
        return imap_reader_fail(err, err_size, "expected a reference name");
    }
    out->reference = n;
    n = imap_node(cmd, n->next);
    int rc = imap_list_patterns_read(cmd, n, out, err, err_size);
    if (rc != 0) {
        return rc;
    }
    /* n is a list or a pattern here (imap_list_patterns_read() refuses NULL); cppcheck
     * cannot see that through the call. */
    /* cppcheck-suppress nullPointerRedundantCheck */
    n = imap_node(cmd, n->next);
    if (n != NULL) {
        const struct imap_node *opts = imap_node(cmd, n->next);
        if (!imap_atom_is(n, "RETURN") || opts == NULL || opts->type != IMAP_NODE_LIST ||
            opts->next != IMAP_NODE_NONE) {
            return imap_reader_fail(err, err_size, "expected RETURN (options) or the end");
        }
        out->extended = 1;
        if (imap_list_return(cmd, opts, out, err, err_size) != 0) {
            return -1;
        }
    }
    return 0;
}

int imap_parse_list(const struct imap_command *cmd,
                    struct imap_list *out,
                    char *err,
                    size_t err_size)
{
    memset(out, 0, sizeof *out);
    int rc = imap_list_args(cmd, out, err, err_size);
    if (rc != 0) {
        imap_list_free(out);
    }
    return rc;
}

void imap_list_free(struct imap_list *list)
{
    free(list->patterns);
    memset(list, 0, sizeof *list);
}

int imap_parse_create_params(const struct imap_command *cmd,
                             const struct imap_node *node,
                             struct imap_create_params *out,
                             char *err,
                             size_t err_size)
{
    memset(out, 0, sizeof *out);
    if (node == NULL || node->type != IMAP_NODE_LIST || node->child == IMAP_NODE_NONE) {
        return imap_reader_fail(err, err_size, "expected a list of CREATE parameters");
    }
    for (const struct imap_node *n = imap_node(cmd, node->child); n != NULL;
         n = imap_node(cmd, n->next)) {
        const struct imap_node *uses = imap_node(cmd, n->next);
        if (!imap_atom_is(n, "USE") || out->has_use || uses == NULL ||
            uses->type != IMAP_NODE_LIST) {
            return imap_reader_fail(err, err_size, "the CREATE parameter is (USE (attributes))");
        }
        out->has_use = 1;
        for (const struct imap_node *u = imap_node(cmd, uses->child); u != NULL;
             u = imap_node(cmd, u->next)) {
            if (u->type != IMAP_NODE_ATOM || u->len < 2 || u->data[0] != '\\' ||
                out->use_count == IMAP_CREATE_USES_MAX) {
                return imap_reader_fail(err, err_size, "bad or too many special-use attributes");
            }
            out->uses[out->use_count++] = u;
        }
        n = uses; /* the loop steps past the attribute list */
    }
    return 0;
}
