/*
 * store_fold.c -- mv_fold_contains(text, string), the SQL function the header criteria of a
 * search compare through (store_search.c: FROM, TO, CC, SUBJECT): 1 if text contains string
 * once both have their case folded by Unicode's full case folding, so that "GRÜSSE",
 * "grüsse" and "Grüße" are one string to the substring match (RFC 3501 6.4.4:
 * case-insensitive), as the full-text index's trigram tokenizer folds BODY and TEXT.
 *
 * WHY
 *   SQLite's lower() folds ASCII letters only, so a header criterion in any other script
 *   was case-sensitive ("Ä" did not find "ä"). GLib (which GMime brings) has the Unicode
 *   tables: g_utf8_casefold. Hand-written: only the ASCII comparison, which allocates
 *   nothing for a field of up to 256 bytes (instr(lower(col), lower(?)) made a lowered copy
 *   of every row's field in SQLite's memory).
 *
 * IMPLEMENTATION NOTES
 *   - The string is folded once per statement (kept as the argument's auxiliary data).
 *   - The same comparison without SQL (store_fold_field_set / store_fold_in): a field
 *     prepared once and tested against many folded strings (mv_search_headers).
 *   - An ASCII text (most header fields) is compared with its letters lowered (the full
 *     case folding of ASCII text is exactly that): as it is when it has no capital, else a
 *     lowered copy, on the stack up to 256 bytes.
 *   - Other text is made valid UTF-8 first (g_utf8_make_valid: an invalid byte becomes
 *     U+FFFD; g_utf8_casefold would read past a truncated sequence's end), folded, then
 *     searched.
 *   - NULL text or string gives NULL (the row does not match, as instr() of NULL did).
 *
 * LIMITATIONS
 *   No normalization: a decomposed "a" + U+0308 does not find a precomposed "ä".
 */
#include "store/store.h"

#include <glib.h>
#include <string.h>

/* The folded form of text (len bytes), g_free'd by the caller; NULL if out of memory. */
static char *store_fold(const char *text, size_t len)
{
    char *valid = g_utf8_make_valid(text, (gssize)len);
    char *folded = valid != NULL ? g_utf8_casefold(valid, -1) : NULL;
    g_free(valid);
    return folded;
}

char *store_fold_string(const char *string)
{
    return store_fold(string, strlen(string));
}

int store_fold_field_set(struct store_fold_field *f, const char *text, size_t len)
{
    size_t ascii = 0, capitals = 0;
    while (ascii < len && (unsigned char)text[ascii] < 0x80) {
        capitals += text[ascii] >= 'A' && text[ascii] <= 'Z';
        ascii++;
    }
    f->text = text;
    f->len = len;
    f->folded = NULL;
    f->owned = NULL;
    if (ascii == len && capitals == 0) {
        return 0; /* already its own folded form */
    }
    if (ascii == len) {
        /* Lowered once, so that each string is one memmem (a string at a time, lowering
         * on the way, was most of an OR of 1,000 SUBJECT keys) */
        char *lowered = len <= sizeof f->lowered ? f->lowered : (f->owned = g_try_malloc(len));
        if (lowered == NULL) {
            return -1;
        }
        for (size_t i = 0; i < len; i++) {
            char c = text[i];
            lowered[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
        }
        f->text = lowered;
        return 0;
    }
    f->folded = store_fold(text, len);
    return f->folded != NULL ? 0 : -1;
}

int store_fold_in(const struct store_fold_field *f, const char *folded)
{
    if (f->folded != NULL) {
        return strstr(f->folded, folded) != NULL;
    }
    return memmem(f->text, f->len, folded, strlen(folded)) != NULL;
}

void store_fold_field_clear(struct store_fold_field *f)
{
    g_free(f->folded);
    g_free(f->owned);
    f->folded = NULL;
    f->owned = NULL;
}

static void store_fold_contains_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    int types[2] = {sqlite3_value_type(argv[0]), sqlite3_value_type(argv[1])};
    const unsigned char *text = sqlite3_value_text(argv[0]);
    const unsigned char *string = sqlite3_value_text(argv[1]);
    if ((text == NULL && types[0] != SQLITE_NULL) || (string == NULL && types[1] != SQLITE_NULL)) {
        sqlite3_result_error_nomem(ctx); /* no memory is not a non-match (vfs/db_column.h) */
        return;
    }
    if (text == NULL || string == NULL) {
        sqlite3_result_null(ctx);
        return;
    }
    size_t len = (size_t)sqlite3_value_bytes(argv[0]);
    char *folded = sqlite3_get_auxdata(ctx, 1);
    if (folded == NULL) {
        folded = store_fold((const char *)string, (size_t)sqlite3_value_bytes(argv[1]));
        if (folded == NULL) {
            sqlite3_result_error_nomem(ctx);
            return;
        }
        sqlite3_set_auxdata(ctx, 1, folded, g_free);
        folded = sqlite3_get_auxdata(ctx, 1); /* NULL if SQLite could not keep it */
        if (folded == NULL) {
            sqlite3_result_error_nomem(ctx);
            return;
        }
    }
    struct store_fold_field field;
    if (store_fold_field_set(&field, (const char *)text, len) != 0) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_int(ctx, store_fold_in(&field, folded));
    store_fold_field_clear(&field);
}

int store_fold_functions(mv_store *s)
{
    int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY;
    if (sqlite3_create_function_v2(s->db, "mv_fold_contains", 2, flags, NULL,
                                   store_fold_contains_fn, NULL, NULL, NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "registering the search's case folding");
    }
    return MV_OK;
}
