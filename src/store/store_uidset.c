/*
 * store_uidset.c -- IMAP UID sets (RFC 3501 sequence-set, UID form).
 *
 *   sequence-set = (seq-number / seq-range) *("," (seq-number / seq-range))
 *   seq-range    = seq-number ":" seq-number
 *   seq-number   = nz-number / "*"        nz-number: 1..4294967295, no leading zero
 *
 * IMPLEMENTATION NOTES
 *   The text is read once, left to right; each range goes into a growing array (at most
 *   STORE_UIDSET_RANGES_MAX), which is then sorted and merged so callers walk ascending,
 *   disjoint ranges: "1:5,3:7" touches 3..5 once, which matters for COPY (no duplicates)
 *   and for COPYUID order. Ranges are clamped to 1..max_uid.
 *
 *   store_uidset_from_ranges() is the same result from typed ranges (what a server passes
 *   after resolving a client's set): the text cap does not apply, the client's set was
 *   capped where the client wrote it.
 *
 * LIMITATIONS
 *   No spaces anywhere (IMAP has none); sequence numbers (non-UID form) are the server's
 *   business, not the store's.
 */
#include "store/store_uidset.h"

#include <stdlib.h>
#include <string.h>

/* Reads one seq-number at text[*pos]; 1 on success. */
static int store_uidset_number(const char *text, size_t *pos, uint32_t max_uid, uint32_t *out)
{
    size_t i = *pos;
    if (text[i] == '*') {
        *out = max_uid;
        *pos = i + 1;
        return 1;
    }
    if (text[i] < '1' || text[i] > '9') {
        return 0; /* (1) empty, (2) leading zero or "0", (3) not a digit */
    }
    uint64_t value = 0;
    while (text[i] >= '0' && text[i] <= '9') {
        value = value * 10 + (uint64_t)(text[i] - '0');
        if (value > UINT32_MAX) {
            return 0;
        }
        i++;
    }
    *out = (uint32_t)value;
    *pos = i;
    return 1;
}

static int store_uidset_range_compare(const void *a, const void *b)
{
    const struct mv_uid_range *x = a, *y = b;
    if (x->first != y->first) {
        return x->first < y->first ? -1 : 1;
    }
    return x->last < y->last ? -1 : x->last > y->last ? 1 : 0;
}

/* Sorts, merges overlapping or adjacent ranges, clamps to 1..max_uid, drops empty ones. */
static void store_uidset_normalize(struct store_uidset *set, uint32_t max_uid)
{
    qsort(set->ranges, set->count, sizeof set->ranges[0], store_uidset_range_compare);
    size_t kept = 0;
    for (size_t i = 0; i < set->count; i++) {
        struct mv_uid_range r = set->ranges[i];
        if (r.first == 0) {
            r.first = 1; /* only '*' in an empty mailbox gives 0 */
        }
        if (r.last > max_uid) {
            r.last = max_uid;
        }
        if (r.first > r.last) {
            continue; /* wholly above max_uid: no message can be there */
        }
        struct mv_uid_range *prev = kept > 0 ? &set->ranges[kept - 1] : NULL;
        if (prev != NULL && (uint64_t)r.first <= (uint64_t)prev->last + 1) {
            if (r.last > prev->last) {
                prev->last = r.last;
            }
            continue;
        }
        set->ranges[kept++] = r;
    }
    set->count = kept;
}

static int
store_uidset_push(mv_store *s, struct store_uidset *set, size_t *cap, uint32_t a, uint32_t b)
{
    if (set->count == STORE_UIDSET_RANGES_MAX) {
        return store_fail(s, MV_ELIMIT, "the UID set has more than %d ranges",
                          STORE_UIDSET_RANGES_MAX);
    }
    if (set->count == *cap) {
        size_t grown_cap = *cap != 0 ? *cap * 2 : 16;
        if (grown_cap > STORE_UIDSET_RANGES_MAX) {
            grown_cap = STORE_UIDSET_RANGES_MAX;
        }
        struct mv_uid_range *grown = realloc(set->ranges, grown_cap * sizeof *grown);
        if (grown == NULL) {
            return store_fail(s, MV_ENOMEM, "out of memory parsing a UID set");
        }
        set->ranges = grown;
        *cap = grown_cap;
    }
    set->ranges[set->count].first = a < b ? a : b;
    set->ranges[set->count].last = a < b ? b : a;
    set->count++;
    return MV_OK;
}

static int
store_uidset_scan(mv_store *s, const char *text, uint32_t max_uid, struct store_uidset *out)
{
    size_t pos = 0, cap = 0;
    for (;;) {
        uint32_t a, b;
        if (!store_uidset_number(text, &pos, max_uid, &a)) {
            return store_fail(s, MV_EINVAL,
                              "bad UID set \"%.64s\": expected a UID or '*' at "
                              "offset %zu",
                              text, pos);
        }
        b = a;
        if (text[pos] == ':') {
            pos++;
            if (!store_uidset_number(text, &pos, max_uid, &b)) {
                return store_fail(s, MV_EINVAL,
                                  "bad UID set \"%.64s\": expected a UID or '*' "
                                  "after ':' at offset %zu",
                                  text, pos);
            }
        }
        int rc = store_uidset_push(s, out, &cap, a, b);
        if (rc != MV_OK) {
            return rc;
        }
        if (text[pos] == '\0') {
            return MV_OK;
        }
        if (text[pos] != ',') {
            return store_fail(s, MV_EINVAL,
                              "bad UID set \"%.64s\": unexpected character at "
                              "offset %zu",
                              text, pos);
        }
        pos++;
    }
}

int store_uidset_parse(mv_store *s, const char *text, uint32_t max_uid, struct store_uidset *out)
{
    out->ranges = NULL;
    out->count = 0;
    if (text == NULL || text[0] == '\0') {
        return store_fail(s, MV_EINVAL, "empty UID set");
    }
    if (strnlen(text, STORE_UIDSET_TEXT_MAX + 1) > STORE_UIDSET_TEXT_MAX) {
        return store_fail(s, MV_ELIMIT, "the UID set is longer than %zu bytes",
                          STORE_UIDSET_TEXT_MAX);
    }
    int rc = store_uidset_scan(s, text, max_uid, out);
    if (rc != MV_OK) {
        store_uidset_free(out);
        return rc;
    }
    store_uidset_normalize(out, max_uid);
    return MV_OK;
}

int store_uidset_from_ranges(mv_store *s,
                             const struct mv_uid_range *ranges,
                             size_t count,
                             uint32_t max_uid,
                             struct store_uidset *out)
{
    out->ranges = NULL;
    out->count = 0;
    if (count == 0) {
        return MV_OK;
    }
    if (ranges == NULL) {
        return store_fail(s, MV_EINVAL, "%zu UID ranges but no array", count);
    }
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].first == 0 || ranges[i].first > ranges[i].last) {
            return store_fail(s, MV_EINVAL, "bad UID range %u:%u (index %zu)", ranges[i].first,
                              ranges[i].last, i);
        }
    }
    if (count > SIZE_MAX / sizeof *out->ranges) {
        return store_fail(s, MV_ENOMEM, "too many UID ranges for memory");
    }
    out->ranges = malloc(count * sizeof *out->ranges);
    if (out->ranges == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory copying UID ranges");
    }
    memcpy(out->ranges, ranges, count * sizeof *out->ranges);
    out->count = count;
    store_uidset_normalize(out, max_uid);
    return MV_OK;
}

void store_uidset_free(struct store_uidset *set)
{
    free(set->ranges);
    set->ranges = NULL;
    set->count = 0;
}

/* ---- the set as a table: mv_uid_ranges(?) ---------------------------------------------- */
/*
 * An eponymous table-valued function over a parsed set, so a set of any number of ranges is
 * ONE statement: "... FROM mv_uid_ranges(?9) r JOIN messages m ON m.mailbox_id = ?1 AND
 * m.uid BETWEEN r.first AND r.last". The set is bound with sqlite3_bind_pointer (type
 * STORE_UIDSET_POINTER), so it never leaves C memory and no state stays on the connection
 * after the statement. A statement per range cost ~60 us of fixed work each (1,000 single
 * UIDs: 1,000 statements); a temporary table would write every range through the
 * encrypted temp file.
 */

struct store_uidset_vtab {
    sqlite3_vtab base;
};

struct store_uidset_cursor {
    sqlite3_vtab_cursor base;
    const struct store_uidset *set; /* NULL: no set bound, no rows */
    size_t at;
};

enum { STORE_UIDSET_COL_FIRST, STORE_UIDSET_COL_LAST, STORE_UIDSET_COL_SET };

static int store_uidset_connect(
    sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err)
{
    (void)aux;
    (void)argc;
    (void)argv;
    (void)err;
    int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(first INTEGER, last INTEGER, uidset HIDDEN)");
    if (rc != SQLITE_OK) {
        return rc;
    }
    sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY); /* never from triggers or views */
    struct store_uidset_vtab *v = sqlite3_malloc(sizeof *v);
    if (v == NULL) {
        return SQLITE_NOMEM;
    }
    memset(v, 0, sizeof *v);
    *out = &v->base;
    return SQLITE_OK;
}

static int store_uidset_disconnect(sqlite3_vtab *v)
{
    sqlite3_free(v);
    return SQLITE_OK;
}

/* Usable only with the set given (an equality on the hidden column): a plan without it is
 * refused, so SQLite never scans an unbound table. The ranges come out ascending. */
static int store_uidset_best_index(sqlite3_vtab *v, sqlite3_index_info *info)
{
    (void)v;
    int found = 0;
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->iColumn == STORE_UIDSET_COL_SET && c->op == SQLITE_INDEX_CONSTRAINT_EQ) {
            if (!c->usable) {
                return SQLITE_CONSTRAINT;
            }
            info->aConstraintUsage[i].argvIndex = 1;
            info->aConstraintUsage[i].omit = 1;
            found = 1;
        }
    }
    if (!found) {
        return SQLITE_CONSTRAINT;
    }
    if (info->nOrderBy == 1 && info->aOrderBy[0].iColumn == STORE_UIDSET_COL_FIRST &&
        !info->aOrderBy[0].desc) {
        info->orderByConsumed = 1;
    }
    info->estimatedCost = 10;
    info->estimatedRows = 10;
    return SQLITE_OK;
}

static int store_uidset_open(sqlite3_vtab *v, sqlite3_vtab_cursor **out)
{
    (void)v;
    struct store_uidset_cursor *c = sqlite3_malloc(sizeof *c);
    if (c == NULL) {
        return SQLITE_NOMEM;
    }
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static int store_uidset_close(sqlite3_vtab_cursor *cur)
{
    sqlite3_free(cur);
    return SQLITE_OK;
}

static int store_uidset_filter(
    sqlite3_vtab_cursor *cur, int idx_num, const char *idx_str, int argc, sqlite3_value **argv)
{
    (void)idx_num;
    (void)idx_str;
    struct store_uidset_cursor *c = (struct store_uidset_cursor *)cur;
    c->set = argc >= 1 ? sqlite3_value_pointer(argv[0], STORE_UIDSET_POINTER) : NULL;
    c->at = 0;
    return SQLITE_OK;
}

static int store_uidset_next(sqlite3_vtab_cursor *cur)
{
    ((struct store_uidset_cursor *)cur)->at++;
    return SQLITE_OK;
}

static int store_uidset_eof(sqlite3_vtab_cursor *cur)
{
    const struct store_uidset_cursor *c = (const struct store_uidset_cursor *)cur;
    return c->set == NULL || c->at >= c->set->count;
}

static int store_uidset_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    const struct store_uidset_cursor *c = (const struct store_uidset_cursor *)cur;
    const struct mv_uid_range *r = &c->set->ranges[c->at];
    if (col == STORE_UIDSET_COL_FIRST) {
        sqlite3_result_int64(ctx, r->first);
    } else if (col == STORE_UIDSET_COL_LAST) {
        sqlite3_result_int64(ctx, r->last);
    } else {
        sqlite3_result_null(ctx);
    }
    return SQLITE_OK;
}

static int store_uidset_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid)
{
    *rowid = (sqlite3_int64)((const struct store_uidset_cursor *)cur)->at;
    return SQLITE_OK;
}

static const sqlite3_module store_uidset_module = {
    .iVersion = 0,
    .xCreate = NULL, /* eponymous only: no CREATE VIRTUAL TABLE */
    .xConnect = store_uidset_connect,
    .xBestIndex = store_uidset_best_index,
    .xDisconnect = store_uidset_disconnect,
    .xDestroy = store_uidset_disconnect,
    .xOpen = store_uidset_open,
    .xClose = store_uidset_close,
    .xFilter = store_uidset_filter,
    .xNext = store_uidset_next,
    .xEof = store_uidset_eof,
    .xColumn = store_uidset_column,
    .xRowid = store_uidset_rowid,
};

int store_uidset_register(mv_store *s)
{
    if (sqlite3_create_module_v2(s->db, "mv_uid_ranges", &store_uidset_module, NULL, NULL) !=
        SQLITE_OK) {
        return store_fail_sqlite(s, "registering mv_uid_ranges");
    }
    return MV_OK;
}
