/*
 * cli_output.c -- printing result rows as tab-separated values.
 *
 * USAGE
 *   while (sqlite3_step(stmt) == SQLITE_ROW) { if (cli_output_row(stdout, stmt) != 0) ...; }
 *
 * IMPLEMENTATION NOTES
 *   One row per line, fields separated by one TAB, no header, no quoting: NULL is an empty
 *   field, a BLOB is its bytes in lowercase hex, integers, floats and text are printed as
 *   sqlite3_column_text() renders them. The format is promised in docs/CLI.md.
 *
 * LIMITATIONS
 *   Text containing TAB or newline is printed as is, so such a row cannot be split back
 *   unambiguously; select hex(column) or replace() when that matters.
 */
#include "cli.h"

static void cli_output_hex(FILE *out, const unsigned char *bytes, int size_bytes)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < size_bytes; i++) {
        fputc(digits[bytes[i] >> 4], out);
        fputc(digits[bytes[i] & 0x0f], out);
    }
}

/* 0, or -2 if a value's text could not be allocated (not printed as an empty field) */
static int cli_output_field(FILE *out, sqlite3_stmt *stmt, int column)
{
    switch (sqlite3_column_type(stmt, column)) {
    case SQLITE_NULL:
        break;
    case SQLITE_BLOB: {
        const unsigned char *bytes = sqlite3_column_blob(stmt, column);
        int size_bytes = sqlite3_column_bytes(stmt, column);
        if (bytes != NULL) {
            cli_output_hex(out, bytes, size_bytes);
        }
        break;
    }
    default: {
        const unsigned char *text = sqlite3_column_text(stmt, column);
        int size_bytes = sqlite3_column_bytes(stmt, column);
        if (text == NULL) {
            return -2; /* the type said it is not NULL: its text could not be made */
        }
        if (size_bytes > 0) {
            fwrite(text, 1, (size_t)size_bytes, out);
        }
        break;
    }
    }
    return 0;
}

int cli_output_row(FILE *out, sqlite3_stmt *stmt)
{
    int column_count = sqlite3_column_count(stmt);
    for (int column = 0; column < column_count; column++) {
        if (column > 0) {
            fputc('\t', out);
        }
        if (cli_output_field(out, stmt, column) != 0) {
            return -2;
        }
    }
    fputc('\n', out);
    return ferror(out) ? -1 : 0;
}
