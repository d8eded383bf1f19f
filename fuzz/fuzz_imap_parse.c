/*
 * fuzz_imap_parse.c -- feeds arbitrary bytes to the IMAP command parser as one framed
 * command, then every typed reader a command of that name would use, and checks what
 * imap_parse.h promises.
 *
 * CHECKS (abort() on failure)
 *   - the result is IMAP_PARSE_OK or IMAP_PARSE_BAD (NOMEM never happens at these sizes);
 *     on BAD a message is set and the command holds no memory;
 *   - on OK: the tag is non-empty, the name is upper-case letters, every node's data lies
 *     inside the input or the command's text buffer, list links stay inside the node array;
 *   - a literal8 (~{n}) is a literal, in APPEND only, alone in a list after the atom UTF8;
 *   - the readers (sequence set, flags, dates, FETCH, SEARCH, STATUS items, LIST, CREATE
 *     parameters) return 0 or -1 and never read outside the nodes; a search's keys link only
 *     to keys that exist; the nodes LIST and CREATE hand back are the command's; FETCH's
 *     sections are at most the command's nodes, their names lie inside the input, and a
 *     failed FETCH or LIST holds nothing; what they allocate is freed each time (ASan's
 *     leak check in the replay).
 *
 * Corpus: fuzz/corpus/imap_parse (commands of every kind, and malformed ones).
 */
#include "../imapd/imap_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_check_nodes(const struct imap_command *cmd, const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < cmd->node_count; i++) {
        const struct imap_node *n = &cmd->nodes[i];
        const char *lo = (const char *)data, *hi = lo + size;
        int in_input = n->data >= lo && n->data + n->len <= hi;
        int in_text = n->data >= cmd->text && n->data + n->len <= cmd->text + size;
        if (n->type != IMAP_NODE_LIST && !in_input && !in_text && n->len != 0) {
            abort();
        }
        if ((n->child != IMAP_NODE_NONE && n->child >= cmd->node_count) ||
            (n->next != IMAP_NODE_NONE && n->next >= cmd->node_count)) {
            abort();
        }
    }
    if (cmd->tag[0] == '\0') {
        abort();
    }
    for (const char *p = cmd->name; *p != '\0'; p++) {
        if (*p < 'A' || *p > 'Z') {
            abort();
        }
    }
}

/* A literal8 is a literal, only in APPEND, and the one element of a list that follows the
 * atom UTF8 (RFC 6855's "UTF8 (~{n}...)"); imap_command_utf8_valid answers 0 or 1. */
static void fuzz_check_literal8(const struct imap_command *cmd)
{
    for (size_t i = 0; i < cmd->node_count; i++) {
        const struct imap_node *n = &cmd->nodes[i];
        if (!n->literal8) {
            continue;
        }
        if (!n->literal || n->type != IMAP_NODE_STRING || strcmp(cmd->name, "APPEND") != 0 ||
            n->next != IMAP_NODE_NONE) {
            abort();
        }
        int placed = 0;
        for (size_t j = 0; j < cmd->node_count; j++) {
            const struct imap_node *p = &cmd->nodes[j];
            placed |= p->type == IMAP_NODE_LIST && p->child == i;
            if (p->next < cmd->node_count && cmd->nodes[p->next].type == IMAP_NODE_LIST &&
                cmd->nodes[p->next].child == i && !imap_atom_is(p, "UTF8")) {
                abort();
            }
        }
        if (!placed) {
            abort();
        }
    }
    int valid = imap_command_utf8_valid(cmd);
    if (valid != 0 && valid != 1) {
        abort();
    }
}

/* The nodes a reader hands back are nodes of the command. */
static void
fuzz_check_in_nodes(const struct imap_command *cmd, const struct imap_node *const *nodes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (nodes[i] < cmd->nodes || nodes[i] >= cmd->nodes + cmd->node_count) {
            abort();
        }
    }
}

/* The flat program is a tree (no key reached twice, so the evaluator ends) no deeper than
 * IMAP_SEARCH_DEPTH_MAX, a NOT with one key, an OR with two or more, nothing else with any. */
/* Whether two leaf keys from first on (siblings) are the same key: a repeat the parser
 * should have dropped (imap_search_shape.c). Leaves with a set are left out (their ranges
 * would need comparing too). */
static int fuzz_has_repeated_leaf(const struct imap_search *s, uint32_t first)
{
    for (uint32_t a = first; a != IMAP_NODE_NONE; a = s->keys[a].next) {
        const struct imap_search_key *x = &s->keys[a];
        for (uint32_t b = x->next;
             x->child == IMAP_NODE_NONE && x->set == NULL && b != IMAP_NODE_NONE;
             b = s->keys[b].next) {
            const struct imap_search_key *y = &s->keys[b];
            if (y->child == IMAP_NODE_NONE && y->set == NULL && x->op == y->op &&
                x->flags == y->flags && x->number == y->number && x->str_len == y->str_len &&
                x->str2_len == y->str2_len &&
                (x->str_len == 0 || memcmp(x->str, y->str, x->str_len) == 0) &&
                (x->str2_len == 0 || memcmp(x->str2, y->str2, x->str2_len) == 0)) {
                return 1;
            }
        }
    }
    return 0;
}

static void fuzz_check_search_tree(const struct imap_search *s)
{
    unsigned char *seen = calloc(s->count, 1);
    uint32_t *stack = malloc(s->count * 2 * sizeof *stack); /* key, level */
    if (seen == NULL || stack == NULL) {
        abort();
    }
    size_t top = 0;
    stack[top++] = 0;
    stack[top++] = 1;
    while (top > 0) {
        uint32_t level = stack[--top], k = stack[--top];
        const struct imap_search_key *key = &s->keys[k];
        if (seen[k] || level > IMAP_SEARCH_DEPTH_MAX) {
            abort();
        }
        seen[k] = 1;
        size_t children = 0;
        for (uint32_t c = key->child; c != IMAP_NODE_NONE; c = s->keys[c].next) {
            if (++children > s->count) {
                abort(); /* a cycle among siblings */
            }
            stack[top++] = c;
            stack[top++] = level + 1;
        }
        int ok = key->op == IMAP_SK_NOT   ? children == 1
                 : key->op == IMAP_SK_OR  ? children >= 2
                 : key->op == IMAP_SK_AND ? children >= 1
                                          : children == 0;
        if (!ok || ((key->op == IMAP_SK_AND || key->op == IMAP_SK_OR) && children <= 64 &&
                    fuzz_has_repeated_leaf(s, key->child))) {
            abort();
        }
    }
    free(stack);
    free(seen);
}

/* A FETCH read: its sections are attributes of the command (no more than its nodes) and the
 * names of a HEADER.FIELDS list point into the input. */
static void fuzz_check_fetch(const struct imap_command *cmd,
                             const struct imap_fetch *f,
                             const uint8_t *data,
                             size_t size)
{
    const char *lo = (const char *)data, *hi = lo + size;
    if (f->section_count > cmd->node_count || (f->section_count > 0) != (f->sections != NULL)) {
        abort();
    }
    for (size_t i = 0; i < f->section_count; i++) {
        const struct imap_fetch_section *s = &f->sections[i];
        if ((s->field_count > 0) != (s->fields != NULL) || s->field_count > size) {
            abort();
        }
        for (size_t k = 0; k < s->field_count; k++) {
            if (s->field_len[k] == 0 || s->fields[k] < lo || s->fields[k] + s->field_len[k] > hi) {
                abort();
            }
        }
    }
}

static void fuzz_readers(const struct imap_command *cmd, const uint8_t *data, size_t size)
{
    static struct imap_fetch fetch;
    static struct imap_search search;
    static struct imap_seqset set;
    struct imap_create_params create;
    struct imap_list list;
    char err[256], kw[512];
    unsigned flags;
    int64_t when;
    for (size_t i = 0; i < imap_arg_count(cmd); i++) {
        const struct imap_node *n = imap_arg(cmd, i);
        if (n->type == IMAP_NODE_ATOM) {
            if (imap_parse_seqset(n->data, n->len, &set) == 0) {
                for (uint32_t k = 0; k < 8; k++) {
                    (void)imap_seqset_contains(&set, k, 5);
                }
                imap_seqset_free(&set);
            }
        }
        (void)imap_parse_flags(cmd, n, &flags, kw, sizeof kw, err, sizeof err);
        (void)imap_parse_date(n, &when);
        (void)imap_parse_date_time(n, &when);
        int rc = imap_parse_fetch(cmd, n, &fetch, err, sizeof err);
        if (rc == 0) {
            fuzz_check_fetch(cmd, &fetch, data, size);
        } else if (rc != -1 || fetch.sections != NULL || fetch.section_count != 0) {
            abort(); /* -2 never happens at these sizes; a failed read holds nothing */
        }
        imap_fetch_free(&fetch);
        (void)imap_parse_status_items(cmd, n, &flags, err, sizeof err);
        if (imap_parse_create_params(cmd, n, &create, err, sizeof err) == 0) {
            fuzz_check_in_nodes(cmd, create.uses, create.use_count);
        }
    }
    int rc = imap_parse_list(cmd, &list, err, sizeof err);
    if (rc == 0) {
        if (list.pattern_count == 0 || list.pattern_count > cmd->node_count ||
            list.reference == NULL) {
            abort();
        }
        fuzz_check_in_nodes(cmd, &list.reference, 1);
        fuzz_check_in_nodes(cmd, list.patterns, list.pattern_count);
    } else if (rc != -1 || list.patterns != NULL || list.pattern_count != 0) {
        abort();
    }
    imap_list_free(&list);
    if (imap_parse_search(cmd, imap_arg(cmd, 0), &search, err, sizeof err) == 0) {
        /* every key but the top level's is made from a node of the command */
        if (search.count == 0 || search.count > cmd->node_count + 1) {
            abort();
        }
        for (size_t i = 0; i < search.count; i++) {
            const struct imap_search_key *k = &search.keys[i];
            if ((k->child != IMAP_NODE_NONE && k->child >= search.count) ||
                (k->next != IMAP_NODE_NONE && k->next >= search.count)) {
                abort();
            }
        }
        fuzz_check_search_tree(&search);
        imap_search_free(&search);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct imap_command cmd;
    char err[256];
    int rc = imap_parse_command(data, size, &cmd, err, sizeof err);
    if (rc == IMAP_PARSE_BAD) {
        if (err[0] == '\0' || cmd.nodes != NULL || cmd.text != NULL) {
            abort();
        }
        return 0;
    }
    if (rc != IMAP_PARSE_OK) {
        abort();
    }
    fuzz_check_nodes(&cmd, data, size);
    fuzz_check_literal8(&cmd);
    fuzz_readers(&cmd, data, size);
    imap_command_free(&cmd);
    return 0;
}
