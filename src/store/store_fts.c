/*
 * store_fts.c -- the SQL functions that let SEARCH TEXT/BODY use a full-text index that
 * keeps no positions (schema version 9: fts5 with detail=none).
 *
 *   mv_fts_query(text, mode)                 the FTS5 query: every trigram of the text,
 *                                             ANDed; it finds the candidate rows
 *   mv_fts_match(text, mode, header, body)   1 if the row really holds the text
 *   mv_fts_exact(text, mode)                 1 if the MATCH alone is exact (see below)
 *   mv_fts_match(text, mode, header, body, 1) the same check for a row no MATCH chose: a
 *                                             body of the full-text backlog, whose texts
 *                                             mv_body_text gives (store_fts_backlog.c)
 *
 *   mode 0  text is words (blank-separated); each must be in the header or in the body
 *           (words under three characters are ignored, as the positional index did; text
 *           with no word of three characters matches nothing)
 *   mode 1  text is one string that must be in the body
 *   mode 2  text is one string that must be in the header or in the body
 *
 * WHY
 *   With positions (detail=full) a trigram index is ~3x the text it indexes: 278 of a
 *   618 MB store of 10,000 messages (docs/SCHEMA.md, "Disk use"). Without them it keeps one
 *   rowid list per trigram, a fraction of that, but can no longer say whether trigrams are
 *   adjacent, so FTS5 refuses phrase queries. The rowid lists still give every row that
 *   holds all of a string's trigrams, a superset of the answer; mv_fts_match then checks
 *   each of those rows against its stored text (the table keeps its content), so the
 *   answer is exactly the one the positional index gave.
 *
 * IMPLEMENTATION NOTES
 *   - Both sides are folded by FTS5's own trigram tokenizer (found through fts5_api, the
 *     public extension interface), so case folds exactly as the index folds it (Unicode,
 *     not only ASCII; no diacritics removed): the folded text is rebuilt from the tokens
 *     (token i is characters i..i+2, so the first character of each token, then the last
 *     two of the final one). A phrase of trigrams at consecutive positions is then exactly
 *     a substring of the folded text (UTF-8 is self-synchronising, so memmem cannot match
 *     inside a character).
 *   - The query's tokens are quoted for the MATCH ('"' doubled): each is three characters,
 *     one token again, so FTS5 sees no phrase and no operator from the user.
 *   - A string of exactly three characters is one trigram: the MATCH alone is exact unless
 *     the column matters (BODY), and the statement then reads no row's text.
 *   - The folded query is kept as the argument's auxiliary data, so a search folds it once,
 *     not once per candidate row; the row buffers belong to the connection (one thread at
 *     a time uses a connection) and are reused.
 */
#include "crypto/crypt.h"
#include "store/store.h"

#include <stdlib.h>
#include <string.h>

#define STORE_FTS_BLANKS " \t\r\n"

/* The trigram tokenizer of one connection and the buffers its checks reuse. */
struct store_fts_fn {
    fts5_tokenizer api;
    Fts5Tokenizer *tok;
    struct store_fts_text {
        char *data;
        size_t len, cap;
    } header, body;
};

/* What a tokenization callback builds: the folded text, or the quoted query. */
struct store_fts_fold {
    struct store_fts_text *out;
    int quote;     /* 1: write each token as an FTS5 string, separated by blanks */
    char last[16]; /* the last token (three characters: at most 12 bytes) */
    int last_len;
    int tokens;
    int failed;
};

static int store_fts_append(struct store_fts_text *t, const char *data, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap != 0 ? t->cap : 256;
        while (t->len + n + 1 > cap) {
            cap *= 2;
        }
        char *grown = crypt_realloc_wiped(t->data, cap);
        if (grown == NULL) {
            return -1;
        }
        t->data = grown;
        t->cap = cap;
    }
    memcpy(t->data + t->len, data, n);
    t->len += n;
    t->data[t->len] = '\0';
    return 0;
}

/* Bytes of the first UTF-8 character of token (n bytes). */
static int store_fts_first_char(const char *token, int n)
{
    int i = 1;
    while (i < n && ((unsigned char)token[i] & 0xc0) == 0x80) {
        i++;
    }
    return i;
}

static int store_fts_token(void *ctx, int tflags, const char *token, int n, int start, int end)
{
    (void)tflags;
    (void)start;
    (void)end;
    struct store_fts_fold *f = ctx;
    int rc = 0;
    if (n <= 0 || n > (int)sizeof f->last) {
        return SQLITE_OK; /* a trigram is three characters: never longer than 12 bytes */
    }
    if (f->quote) {
        rc |= f->tokens != 0 ? store_fts_append(f->out, " ", 1) : 0;
        rc |= store_fts_append(f->out, "\"", 1);
        for (int i = 0; i < n; i++) {
            rc |= store_fts_append(f->out, token + i, 1);
            if (token[i] == '"') {
                rc |= store_fts_append(f->out, "\"", 1);
            }
        }
        rc |= store_fts_append(f->out, "\"", 1);
    } else {
        rc = store_fts_append(f->out, token, (size_t)store_fts_first_char(token, n));
        memcpy(f->last, token, (size_t)n);
        f->last_len = n;
    }
    f->tokens++;
    if (rc != 0) {
        f->failed = 1;
        return SQLITE_NOMEM;
    }
    return SQLITE_OK;
}

/* Tokenizes text (n bytes) into out (appended): folded, or quoted for MATCH. 0 or -1. */
static int store_fts_run(
    struct store_fts_fn *fn, const char *text, size_t n, int quote, struct store_fts_text *out)
{
    struct store_fts_fold f = {.out = out, .quote = quote};
    if (n == 0) {
        return 0;
    }
    if (n > (size_t)INT32_MAX) {
        return -1;
    }
    int rc = fn->api.xTokenize(fn->tok, &f, FTS5_TOKENIZE_DOCUMENT, text, (int)n, store_fts_token);
    if (rc != SQLITE_OK || f.failed) {
        return -1;
    }
    if (!quote && f.tokens != 0) {
        int first = store_fts_first_char(f.last, f.last_len);
        return store_fts_append(out, f.last + first, (size_t)(f.last_len - first));
    }
    return 0;
}

/* The folded forms of the query: for mode 0 one per word ('\0'-separated, words that fold to
 * nothing left out), else one. The auxiliary data of the query argument. */
struct store_fts_needles {
    struct store_fts_text folded;
    size_t count;
    int single_trigrams; /* every needle is three characters: the index alone is exact */
};

static void store_fts_needles_free(void *p)
{
    struct store_fts_needles *n = p;
    if (n != NULL) {
        free(n->folded.data);
        free(n);
    }
}

static struct store_fts_needles *
store_fts_needles_make(struct store_fts_fn *fn, const char *query, int mode)
{
    struct store_fts_needles *nd = calloc(1, sizeof *nd);
    if (nd == NULL) {
        return NULL;
    }
    const char *p = query;
    while (*p != '\0') {
        size_t word;
        if (mode == 0) {
            p += strspn(p, STORE_FTS_BLANKS);
            word = strcspn(p, STORE_FTS_BLANKS);
            if (word == 0) {
                break;
            }
        } else {
            word = strlen(p);
        }
        size_t before = nd->folded.len;
        if (store_fts_run(fn, p, word, 0, &nd->folded) != 0 ||
            (nd->folded.len != before && store_fts_append(&nd->folded, "", 1) != 0)) {
            store_fts_needles_free(nd);
            return NULL;
        }
        nd->count += nd->folded.len != before;
        p += word;
    }
    nd->single_trigrams = nd->count != 0;
    for (const char *w = nd->folded.data; w != NULL && w < nd->folded.data + nd->folded.len;
         w += strlen(w) + 1) {
        size_t chars = 0;
        for (const char *c = w; *c != '\0'; c++) {
            chars += ((unsigned char)*c & 0xc0) != 0x80;
        }
        nd->single_trigrams &= chars == 3;
    }
    return nd;
}

/* ASCII text folds as the tokenizer folds it, A-Z to a-z, without a call per trigram; the
 * tokenizer stops at a NUL, so this does too. One pass. 1 if text was ASCII (t holds it
 * folded), 0 if not, -1 out of memory. */
static int store_fts_fold_ascii(const char *text, size_t n, struct store_fts_text *t)
{
    if (t->cap < n + 1) {
        char *grown = crypt_realloc_wiped(t->data, n + 1);
        if (grown == NULL) {
            return -1;
        }
        t->data = grown;
        t->cap = n + 1;
    }
    unsigned char seen = 0;
    size_t i = 0;
    for (; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == 0) {
            break;
        }
        seen |= c;
        t->data[i] = (char)((unsigned)(c - 'A') < 26u ? c + ('a' - 'A') : c);
    }
    if ((seen & 0x80) != 0) {
        return 0;
    }
    t->len = i;
    t->data[i] = '\0';
    return 1;
}

/* Folds a column's value into t (reused); NULL counts as "". 0 or -1. */
static int store_fts_fold_value(struct store_fts_fn *fn, sqlite3_value *v, struct store_fts_text *t)
{
    t->len = 0;
    int type = sqlite3_value_type(v); /* before the text: see vfs/db_column.h */
    const char *text = (const char *)sqlite3_value_text(v);
    if (text == NULL) {
        return type == SQLITE_NULL ? 0 : -1; /* no memory for the text: not an empty value */
    }
    size_t n = (size_t)sqlite3_value_bytes(v);
    int ascii = store_fts_fold_ascii(text, n, t);
    if (ascii != 0) {
        return ascii < 0 ? -1 : 0;
    }
    t->len = 0;
    return store_fts_run(fn, text, n, 0, t);
}

static int store_fts_contains(const struct store_fts_text *hay, const char *needle, size_t n)
{
    return hay->len >= n && memmem(hay->data, hay->len, needle, n) != NULL;
}

/* The folded query of a call (argv[0] text, argv[1] mode), made once per statement and
 * kept as the argument's auxiliary data. NULL (and the error set) when out of memory. */
static struct store_fts_needles *store_fts_needles_get(sqlite3_context *ctx, sqlite3_value **argv)
{
    struct store_fts_needles *nd = sqlite3_get_auxdata(ctx, 0);
    if (nd == NULL) {
        const char *query = (const char *)sqlite3_value_text(argv[0]);
        nd = store_fts_needles_make(sqlite3_user_data(ctx), query != NULL ? query : "",
                                    sqlite3_value_int(argv[1]));
        if (nd != NULL) {
            sqlite3_set_auxdata(ctx, 0, nd, store_fts_needles_free);
            nd = sqlite3_get_auxdata(ctx, 0); /* NULL if SQLite could not keep it: freed */
        }
    }
    if (nd == NULL) {
        sqlite3_result_error_nomem(ctx);
    }
    return nd;
}

/* mv_fts_exact(text, mode): 1 if the MATCH alone is the answer (every needle is a single
 * trigram and any column may hold it), so the statement skips mv_fts_match and never reads
 * the rows' text; SQLite evaluates it once (constant arguments, deterministic). */
static void store_fts_exact_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct store_fts_needles *nd = store_fts_needles_get(ctx, argv);
    if (nd != NULL) {
        sqlite3_result_int(ctx, sqlite3_value_int(argv[1]) != 1 && nd->single_trigrams);
    }
}

/* mv_fts_match(text, mode, header, body [, unmatched]): see the top of the file. */
static void store_fts_match_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    struct store_fts_fn *fn = sqlite3_user_data(ctx);
    /* a row that no MATCH chose: even a single trigram must be looked for */
    int unmatched = argc > 4 && sqlite3_value_int(argv[4]) != 0;
    int mode = sqlite3_value_int(argv[1]);
    struct store_fts_needles *nd = store_fts_needles_get(ctx, argv);
    if (nd == NULL) {
        return;
    }
    if (nd->count == 0) {
        sqlite3_result_int(ctx, 0); /* no trigram: the index had nothing to find either */
        return;
    }
    if (mode != 1 && nd->single_trigrams && !unmatched) {
        sqlite3_result_int(ctx, 1); /* each needle is one trigram, which MATCH found */
        return;
    }
    int header_done = 0, body_done = 0, found = 1;
    const char *needle = nd->folded.data;
    for (size_t i = 0; found && i < nd->count; i++) {
        size_t n = strlen(needle);
        found = 0;
        if (mode != 1) {
            if (!header_done && store_fts_fold_value(fn, argv[2], &fn->header) != 0) {
                sqlite3_result_error_nomem(ctx);
                return;
            }
            header_done = 1;
            found = store_fts_contains(&fn->header, needle, n);
        }
        if (!found) {
            if (!body_done && store_fts_fold_value(fn, argv[3], &fn->body) != 0) {
                sqlite3_result_error_nomem(ctx);
                return;
            }
            body_done = 1;
            found = store_fts_contains(&fn->body, needle, n);
        }
        needle += n + 1;
    }
    sqlite3_result_int(ctx, found);
}

/* mv_fts_query(text, mode): see the top of the file. Text without a trigram gives '""',
 * which matches no row. */
static void store_fts_query_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    struct store_fts_fn *fn = sqlite3_user_data(ctx);
    const char *query = (const char *)sqlite3_value_text(argv[0]);
    int mode = sqlite3_value_int(argv[1]);
    struct store_fts_text out = {0};
    const char *p = query != NULL ? query : "";
    int rc = 0;
    while (rc == 0 && *p != '\0') {
        size_t word = mode == 0 ? strcspn(p, STORE_FTS_BLANKS) : strlen(p);
        size_t before = out.len;
        if (word != 0 && out.len != 0) {
            rc = store_fts_append(&out, " ", 1);
        }
        if (rc == 0 && word != 0) {
            rc = store_fts_run(fn, p, word, 1, &out);
            if (rc == 0 && out.len == before + 1) {
                out.len = before; /* a word without a trigram: drop its separator */
                out.data[out.len] = '\0';
            }
        }
        p += word;
        p += strspn(p, STORE_FTS_BLANKS);
    }
    if (rc == 0 && out.len == 0) {
        rc = store_fts_append(&out, "\"\"", 2);
    }
    if (rc != 0) {
        crypt_free_wiped(out.data);
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_text(ctx, out.data, (int)out.len, free);
}

static void store_fts_fn_free(void *p)
{
    struct store_fts_fn *fn = p;
    if (fn != NULL) {
        if (fn->tok != NULL) {
            fn->api.xDelete(fn->tok);
        }
        crypt_free_wiped(fn->header.data);
        crypt_free_wiped(fn->body.data);
        free(fn);
    }
}

/* The connection's fts5_api (the documented way: SELECT fts5(?1) with a pointer) into *api
 * (NULL if SQLite has no FTS5); an SQLite code (SQLITE_NOMEM: the statement could not be
 * made or run for want of memory). */
static int store_fts_api(sqlite3 *db, fts5_api **api)
{
    sqlite3_stmt *st = NULL;
    *api = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        return rc;
    }
    sqlite3_bind_pointer(st, 1, (void *)api, "fts5_api_ptr", NULL);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int store_fts_functions(mv_store *s)
{
    fts5_api *api = NULL;
    int src = store_fts_api(s->db, &api);
    struct store_fts_fn *fn = calloc(1, sizeof *fn);
    void *tok_data = NULL;
    if (fn == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory registering the full-text functions");
    }
    if (src == SQLITE_OK) {
        src = api == NULL ? SQLITE_ERROR : api->xFindTokenizer(api, "trigram", &tok_data, &fn->api);
    }
    if (src == SQLITE_OK) {
        src = fn->api.xCreate(tok_data, NULL, 0, &fn->tok);
    }
    if (src != SQLITE_OK) {
        store_fts_fn_free(fn);
        /* a failed allocation is not a missing tokenizer (the allocation-failure loop: an
         * open said "no trigram tokenizer", MV_ERROR) */
        return (src & 0xff) == SQLITE_NOMEM
                   ? store_fail(s, MV_ENOMEM, "out of memory setting up the trigram tokenizer")
                   : store_fail(s, MV_ERROR, "SQLite's FTS5 has no trigram tokenizer");
    }
    int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY;
    /* The query function shares fn; only the match function frees it (registered last, so
     * a failure before it frees fn here). */
    if (sqlite3_create_function_v2(s->db, "mv_fts_query", 2, flags, fn, store_fts_query_fn, NULL,
                                   NULL, NULL) != SQLITE_OK) {
        store_fts_fn_free(fn);
        return store_fail_sqlite(s, "registering the full-text functions");
    }
    if (sqlite3_create_function_v2(s->db, "mv_fts_exact", 2, flags, fn, store_fts_exact_fn, NULL,
                                   NULL, NULL) != SQLITE_OK) {
        store_fts_fn_free(fn);
        return store_fail_sqlite(s, "registering the full-text functions");
    }
    if (sqlite3_create_function_v2(s->db, "mv_fts_match", 5, flags, fn, store_fts_match_fn, NULL,
                                   NULL, NULL) != SQLITE_OK) {
        store_fts_fn_free(fn);
        return store_fail_sqlite(s, "registering the full-text functions");
    }
    if (sqlite3_create_function_v2(s->db, "mv_fts_match", 4, flags, fn, store_fts_match_fn, NULL,
                                   NULL, store_fts_fn_free) != SQLITE_OK) {
        return store_fail_sqlite(s, "registering the full-text functions");
    }
    return MV_OK;
}
