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
 *   nothing (instr(lower(col), lower(?)) made a lowered copy of every row's field).
 *
 * IMPLEMENTATION NOTES
 *   - The string is folded once per statement (kept as the argument's auxiliary data).
 *   - An ASCII text (most header fields) is compared byte by byte, its letters lowered on
 *     the way: the full case folding of ASCII text is exactly that.
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

/* Whether the ASCII text (len bytes) holds folded (folded_len bytes) once its letters are
 * lowered. */
static int store_fold_ascii_contains(const unsigned char *text,
                                     size_t len,
                                     const char *folded,
                                     size_t folded_len)
{
    for (size_t at = 0; at + folded_len <= len; at++) {
        size_t i = 0;
        while (i < folded_len) {
            unsigned char c = text[at + i];
            c = (unsigned char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
            if (c != (unsigned char)folded[i]) {
                break;
            }
            i++;
        }
        if (i == folded_len) {
            return 1;
        }
    }
    return 0;
}

static void store_fold_contains_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const unsigned char *text = sqlite3_value_text(argv[0]);
    const unsigned char *string = sqlite3_value_text(argv[1]);
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
    size_t ascii = 0;
    while (ascii < len && text[ascii] < 0x80) {
        ascii++;
    }
    if (ascii == len) {
        sqlite3_result_int(ctx, store_fold_ascii_contains(text, len, folded, strlen(folded)));
        return;
    }
    char *text_folded = store_fold((const char *)text, len);
    if (text_folded == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_int(ctx, strstr(text_folded, folded) != NULL);
    g_free(text_folded);
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
