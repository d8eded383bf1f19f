/*
 * store_fold.c -- mv_fold(text), the SQL function the header criteria of a search compare
 * through (store_search.c: FROM, TO, CC, SUBJECT): the text with its case folded by Unicode's
 * full case folding, so that "GRÜSSE", "grüsse" and "Grüße" are one string to a
 * case-insensitive substring match (RFC 3501 6.4.4: "case-insensitive"), as the full-text
 * index's trigram tokenizer folds BODY and TEXT.
 *
 * WHY
 *   SQLite's lower() folds ASCII letters only, so a header criterion in any other script
 *   was case-sensitive ("Ä" did not find "ä"). GLib (which GMime brings) has the Unicode
 *   tables: g_utf8_casefold. Nothing is hand-written but the ASCII path.
 *
 * IMPLEMENTATION NOTES
 *   - ASCII text (most header fields) is folded byte by byte, as lower() did, at lower()'s
 *     cost: no GLib call, one allocation.
 *   - Other text is made valid UTF-8 first (g_utf8_make_valid: an invalid byte becomes
 *     U+FFFD; g_utf8_casefold would read past a truncated sequence's end), then folded.
 *     Both sides of a comparison go through this function, so they fold alike.
 *   - NULL gives NULL (instr() of NULL is NULL: the row does not match, as before).
 *
 * LIMITATIONS
 *   No normalization: a decomposed "a" + U+0308 does not find a precomposed "ä".
 */
#include "store/store.h"

#include <glib.h>
#include <stdlib.h>
#include <string.h>

static void store_fold_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const unsigned char *text = sqlite3_value_text(argv[0]);
    if (text == NULL) {
        sqlite3_result_null(ctx);
        return;
    }
    size_t len = (size_t)sqlite3_value_bytes(argv[0]);
    size_t ascii = 0;
    while (ascii < len && text[ascii] < 0x80) {
        ascii++;
    }
    if (ascii == len) {
        char *out = sqlite3_malloc64(len + 1);
        if (out == NULL) {
            sqlite3_result_error_nomem(ctx);
            return;
        }
        for (size_t i = 0; i < len; i++) {
            unsigned char c = text[i];
            out[i] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
        }
        out[len] = '\0';
        sqlite3_result_text64(ctx, out, len, sqlite3_free, SQLITE_UTF8);
        return;
    }
    char *valid = g_utf8_make_valid((const char *)text, (gssize)len);
    char *folded = valid != NULL ? g_utf8_casefold(valid, -1) : NULL;
    g_free(valid);
    if (folded == NULL) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_text64(ctx, folded, strlen(folded), g_free, SQLITE_UTF8);
}

int store_fold_functions(mv_store *s)
{
    int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY;
    if (sqlite3_create_function_v2(s->db, "mv_fold", 1, flags, NULL, store_fold_fn, NULL, NULL,
                                   NULL) != SQLITE_OK) {
        return store_fail_sqlite(s, "registering the search's case folding");
    }
    return MV_OK;
}
