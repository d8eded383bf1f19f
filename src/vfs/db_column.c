/*
 * db_column.c -- a column's text that tells "no value" from "no memory" (db_column.h).
 */
#include "vfs/db_column.h"

#include <stddef.h>

const char *mv_db_column_text(sqlite3_stmt *st, int col, int *oom)
{
    /* The type is read before the conversion: a conversion that fails leaves the value
     * NULL, so asked afterwards the type would say there never was one. */
    int type = sqlite3_column_type(st, col);
    const char *text = (const char *)sqlite3_column_text(st, col);
    if (text == NULL && type != SQLITE_NULL) {
        *oom = 1;
    }
    return text;
}
