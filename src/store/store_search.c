/*
 * store_search.c -- mv_search_begin/next/end: one SQL statement per search.
 *
 * USAGE
 *   struct mv_search_query q = MV_SEARCH_QUERY_INIT; q.mailbox = "INBOX"; q.text = "invoice";
 *   mv_search *it; rc = mv_search_begin(store, &q, &it);
 *   while ((rc = mv_search_next(it, &info)) == 1) { ... }    0 at the end, < 0 on error
 *   mv_search_end(&it);
 *
 * IMPLEMENTATION NOTES
 *   - The WHERE clause is built only from the fixed fragments below, each with its own
 *     numbered parameter (?1 .. ?19), so user input is always a bound value and never part
 *     of the SQL; criteria that are absent leave their fragment (and parameter) out.
 *   - Full text: the index (fts, keyed by body id) has two columns, header (every field,
 *     decoded) and body (the decoded text), the trigram tokenizer (schema version 4) and no
 *     positions (version 9, detail=none). A criterion is "m.body_id IN (SELECT rowid FROM fts
 *     WHERE fts MATCH mv_fts_query(?) AND mv_fts_match(?, ...))": the user's text is only
 *     ever a bound value; mv_fts_query turns it into its trigrams, each one quoted FTS5
 *     string (no operator, column filter or prefix syntax comes from the user), which find
 *     every row holding them all, and mv_fts_match keeps the rows whose text really holds
 *     the string as a case-insensitive substring (RFC 3501 6.4.4's BODY and TEXT), folded
 *     as the index folds it (store_fts.c). TEXT of words: each word in the header or the
 *     body; BODY: the string in the body. A string under three characters has no trigram:
 *     LIKE (escaped) over the columns, which FTS5 answers by a scan.
 *   - Bodies of the full-text backlog (store_fts_backlog.c: a stepped drain's deliveries,
 *     whose rows are built later) have no fts row yet: while the backlog holds any, each
 *     full-text criterion also takes the backlog's bodies whose texts (mv_body_text: the
 *     body parsed again) pass the same check, so a search never misses a delivered message.
 *   - SENT*: sent_date is UTC; the Date header's zone (bodies.sent_zone) is added back, so
 *     the bounds compare the date as written (RFC 3501 6.4.4 disregards time and zone).
 *   - Header criteria are case-insensitive substring matches, mv_fold_contains(col, ?): no
 *     LIKE, so '%' and '_' need no escaping; it folds Unicode case (store_fold.c), where
 *     instr(lower(col), lower(?)) folded ASCII only ("Ä" did not find "ä"). The Message-ID
 *     is ASCII: instr(lower(), lower()).
 *   - With a mailbox the plan starts from messages_date (mailbox_id, internal_date), which
 *     also gives the newest-first order without sorting; tests check the plan.
 *   - LIMIT is the limit + 1: the extra row, if it comes, turns into MV_ELIMIT.
 *
 * LIMITATIONS
 *   LIKE folds ASCII only: "Ä" does not match "ä" in full-text strings under three
 *   characters; the trigram index and the header criteria fold Unicode case (not
 *   diacritics: "e" does not find "é", as a substring match should not). A message without a Date
 * header has sent_date 0 and matches no sent_since/sent_before criterion.
 */
#include "store/store_message.h"

#include <stdlib.h>
#include <string.h>

#define STORE_SEARCH_SQL_MAX 4096

/* Parameter numbers: each fragment below uses its own. */
enum store_search_param {
    P_MAILBOX = 1,
    P_FROM,
    P_TO,
    P_CC,
    P_SUBJECT,
    P_MESSAGE_ID,
    P_TEXT,
    P_SINCE,
    P_BEFORE,
    P_SENT_SINCE,
    P_SENT_BEFORE,
    P_LARGER,
    P_SMALLER,
    P_FLAGS_SET,
    P_FLAGS_UNSET,
    P_KEYWORD,
    P_BODY, /* body_contains */
    P_ANY,  /* text_contains */
    P_LIMIT
};

struct mv_search {
    mv_store *store;
    sqlite3_stmt *stmt;
    struct store_strings strings;
    uint32_t limit;
    uint32_t returned;
    int done; /* 1 after the end or an error: next keeps returning that */
    int rc_after_done;
    /* The statement reads the old full-text index too (store_search_old); the same search
     * without it, for when another handle ended the move between the prepare and the first
     * step (the statement's re-prepare then fails: no such table). NULL otherwise. */
    char *sql_without_old;
    /* What the statement was made from: the backlog looked at again at the first step, in
     * the read transaction of the rows (store_search_first). */
    int present[P_LIMIT + 1];
    int backlog; /* the statement reads the full-text backlog's bodies too */
    int old;
    int started; /* the first step was taken */
};

static const char *const store_search_head =
    "SELECT " STORE_MESSAGE_INFO_COLUMNS " FROM " STORE_MESSAGE_INFO_FROM " WHERE 1";

/* Indexed by enum store_search_param. */
static const char *const store_search_fragment[] = {
    [P_MAILBOX] = " AND m.mailbox_id = ?1",
    [P_FROM] = " AND mv_fold_contains(h.from_addr, ?2)",
    [P_TO] = " AND mv_fold_contains(h.to_addr, ?3)",
    [P_CC] = " AND mv_fold_contains(h.cc_addr, ?4)",
    [P_SUBJECT] = " AND mv_fold_contains(h.subject, ?5)",
    [P_MESSAGE_ID] = " AND instr(lower(h.message_id), lower(?6)) > 0",
    [P_TEXT] = " AND m.body_id IN (SELECT rowid FROM fts WHERE fts MATCH mv_fts_query(?7, 0) "
               "AND (mv_fts_exact(?7, 0) OR mv_fts_match(?7, 0, header, body)))",
    [P_SINCE] = " AND m.internal_date >= ?8",
    [P_BEFORE] = " AND m.internal_date < ?9",
    [P_SENT_SINCE] = " AND h.sent_date != 0 AND h.sent_date + (SELECT sent_zone FROM bodies "
                     "WHERE id = m.body_id) >= ?10",
    [P_SENT_BEFORE] = " AND h.sent_date != 0 AND h.sent_date + (SELECT sent_zone FROM bodies "
                      "WHERE id = m.body_id) < ?11",
    [P_LARGER] = " AND m.size > ?12",
    [P_SMALLER] = " AND m.size < ?13",
    [P_FLAGS_SET] = " AND (m.flags & ?14) = ?14",
    [P_FLAGS_UNSET] = " AND (m.flags & ?15) = 0",
    [P_KEYWORD] = " AND instr(' ' || lower(m.keywords) || ' ', ' ' || lower(?16) || ' ') > 0",
    [P_BODY] = " AND m.body_id IN (SELECT rowid FROM fts WHERE fts MATCH mv_fts_query(?17, 1) "
               "AND (mv_fts_exact(?17, 1) OR mv_fts_match(?17, 1, header, body)))",
    [P_ANY] = " AND m.body_id IN (SELECT rowid FROM fts WHERE fts MATCH mv_fts_query(?18, 2) "
              "AND (mv_fts_exact(?18, 2) OR mv_fts_match(?18, 2, header, body)))",
    [P_LIMIT] = " ORDER BY m.internal_date DESC LIMIT ?19",
};

/* The same criteria for strings under three characters, which have no trigram: LIKE over
 * every indexed text (FTS5 then scans; LIKE folds ASCII only). */
static const char *const store_search_short[] = {
    [P_BODY] = " AND m.body_id IN (SELECT rowid FROM fts WHERE body LIKE ?17 ESCAPE '\\')",
    [P_ANY] = " AND m.body_id IN (SELECT rowid FROM fts WHERE body LIKE ?18 ESCAPE '\\' "
              "OR header LIKE ?18 ESCAPE '\\')",
};

/* The full-text criteria while the backlog holds bodies: the index's rows, or a backlog
 * body whose texts pass the same check (the IMPLEMENTATION NOTES). Tied to the row (m): only
 * the searched mailbox's backlog bodies are parsed. A subquery over the backlog alone parsed
 * every backlog body of the store, whatever the mailbox (SEARCH TEXT in a 10-message folder
 * with 2,000 deliveries in INBOX's backlog: 96 ms of CPU). */
#define STORE_SEARCH_BACKLOG " OR (m.body_id IN " STORE_FTS_BACKLOG_IDS " AND "
#define STORE_SEARCH_TEXTS   "mv_body_text(m.body_id, 0), mv_body_text(m.body_id, 1)"
static const char *const store_search_backlog[] = {
    [P_TEXT] =
        " AND (m.body_id IN (SELECT rowid FROM fts WHERE fts MATCH mv_fts_query(?7, 0) "
        "AND (mv_fts_exact(?7, 0) OR mv_fts_match(?7, 0, header, body)))" STORE_SEARCH_BACKLOG
        "mv_fts_match(?7, 0, " STORE_SEARCH_TEXTS ", 1)))",
    [P_BODY] =
        " AND (m.body_id IN (SELECT rowid FROM fts WHERE fts MATCH mv_fts_query(?17, 1) "
        "AND (mv_fts_exact(?17, 1) OR mv_fts_match(?17, 1, header, body)))" STORE_SEARCH_BACKLOG
        "mv_fts_match(?17, 1, " STORE_SEARCH_TEXTS ", 1)))",
    [P_ANY] =
        " AND (m.body_id IN (SELECT rowid FROM fts WHERE fts MATCH mv_fts_query(?18, 2) "
        "AND (mv_fts_exact(?18, 2) OR mv_fts_match(?18, 2, header, body)))" STORE_SEARCH_BACKLOG
        "mv_fts_match(?18, 2, " STORE_SEARCH_TEXTS ", 1)))",
};
static const char *const store_search_backlog_short[] = {
    [P_BODY] = " AND (m.body_id IN (SELECT rowid FROM fts WHERE body LIKE ?17 ESCAPE "
               "'\\')" STORE_SEARCH_BACKLOG "mv_body_text(m.body_id, 1) LIKE ?17 ESCAPE '\\'))",
    [P_ANY] =
        " AND (m.body_id IN (SELECT rowid FROM fts WHERE body LIKE ?18 ESCAPE '\\' "
        "OR header LIKE ?18 ESCAPE '\\')" STORE_SEARCH_BACKLOG
        "(mv_body_text(m.body_id, 1) LIKE ?18 ESCAPE '\\' OR mv_body_text(m.body_id, 0) LIKE ?18 "
        "ESCAPE '\\')))",
};

#define STORE_SEARCH_LIKE 2 /* present[P_BODY / P_ANY]: the short form */

/* While the version 8 index's rows move into fts (store_fts_move.c), each full-text criterion
 * is also met by a row of the old index above the move's cursor (exactly the rows not yet in
 * fts): the fragment above, ORed with one of these. Same parameters. */
#define STORE_SEARCH_OLD_ROWS                                                                      \
    " rowid > (SELECT value FROM meta WHERE key = '" STORE_FTS_MOVED_KEY "')"
#define STORE_SEARCH_OLD_MATCH(n, mode)                                                            \
    "m.body_id IN (SELECT rowid FROM " STORE_FTS_OLD " WHERE " STORE_FTS_OLD                       \
    " MATCH mv_fts_query(?" #n ", " #mode ") AND" STORE_SEARCH_OLD_ROWS " AND (mv_fts_exact(?" #n  \
    ", " #mode ") OR mv_fts_match(?" #n ", " #mode ", header, body)))"
static const char *const store_search_old[] = {
    [P_TEXT] = STORE_SEARCH_OLD_MATCH(7, 0),
    [P_BODY] = STORE_SEARCH_OLD_MATCH(17, 1),
    [P_ANY] = STORE_SEARCH_OLD_MATCH(18, 2),
};
static const char *const store_search_short_old[] = {
    [P_BODY] = "m.body_id IN (SELECT rowid FROM " STORE_FTS_OLD " WHERE" STORE_SEARCH_OLD_ROWS
               " AND body LIKE ?17 ESCAPE '\\')",
    [P_ANY] = "m.body_id IN (SELECT rowid FROM " STORE_FTS_OLD " WHERE" STORE_SEARCH_OLD_ROWS
              " AND (body LIKE ?18 ESCAPE '\\' OR header LIKE ?18 ESCAPE '\\'))",
};

/* Appends text to sql at *at; MV_ERROR (message set) past STORE_SEARCH_SQL_MAX. */
static int
store_search_append(mv_store *s, char sql[STORE_SEARCH_SQL_MAX], size_t *at, const char *text)
{
    size_t n = strlen(text);
    if (*at + n >= STORE_SEARCH_SQL_MAX) {
        return store_fail(s, MV_ERROR, "search statement longer than %d bytes",
                          STORE_SEARCH_SQL_MAX);
    }
    memcpy(sql + *at, text, n + 1);
    *at += n;
    return MV_OK;
}

/* Characters (not bytes) in UTF-8 text. */
static size_t store_search_chars(const char *s)
{
    size_t n = 0;
    for (; *s != '\0'; s++) {
        n += ((unsigned char)*s & 0xc0) != 0x80;
    }
    return n;
}

/* One substring criterion as a bound value (*out malloc'd): with three characters or more
 * the text itself (mv_fts_query and mv_fts_match read it, store_fts.c); shorter, a LIKE
 * pattern with %, _ and \ escaped. */
static int store_search_substring(mv_store *s, const char *text, int like, char **out)
{
    size_t n = strlen(text);
    char *buf = malloc(n * 2 + 3);
    if (buf == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory preparing a search");
    }
    size_t at = 0;
    if (!like) {
        memcpy(buf, text, n + 1);
        *out = buf;
        return MV_OK;
    }
    buf[at++] = '%';
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '%' || text[i] == '_' || text[i] == '\\') {
            buf[at++] = '\\';
        }
        buf[at++] = text[i];
    }
    buf[at++] = '%';
    buf[at] = '\0';
    *out = buf;
    return MV_OK;
}

/* Which criteria are present, indexed by enum store_search_param. */
static void
store_search_present(const struct mv_search_query *q, int has_text, int present[P_LIMIT + 1])
{
    present[P_MAILBOX] = q->mailbox != NULL;
    present[P_FROM] = q->from != NULL && q->from[0] != '\0';
    present[P_TO] = q->to != NULL && q->to[0] != '\0';
    present[P_CC] = q->cc != NULL && q->cc[0] != '\0';
    present[P_SUBJECT] = q->subject != NULL && q->subject[0] != '\0';
    present[P_MESSAGE_ID] = q->message_id != NULL && q->message_id[0] != '\0';
    present[P_TEXT] = has_text;
    present[P_SINCE] = q->since != 0;
    present[P_BEFORE] = q->before != 0;
    present[P_SENT_SINCE] = q->sent_since != 0;
    present[P_SENT_BEFORE] = q->sent_before != 0;
    present[P_LARGER] = q->larger != 0;
    present[P_SMALLER] = q->smaller != 0;
    present[P_FLAGS_SET] = q->flags_set != 0;
    present[P_FLAGS_UNSET] = q->flags_unset != 0;
    present[P_KEYWORD] = q->keyword != NULL && q->keyword[0] != '\0';
    present[P_BODY] = q->body_contains == NULL || q->body_contains[0] == '\0' ? 0
                      : store_search_chars(q->body_contains) < 3              ? STORE_SEARCH_LIKE
                                                                              : 1;
    present[P_ANY] = q->text_contains == NULL || q->text_contains[0] == '\0' ? 0
                     : store_search_chars(q->text_contains) < 3              ? STORE_SEARCH_LIKE
                                                                             : 1;
    present[P_LIMIT] = 1;
}

/* Joins the head and the present fragments into sql; backlog: the full-text backlog holds
 * bodies (store_search_backlog); old: the old index's rows are still moving
 * (store_search_old: " AND (" fragment " OR " old ")", each fragment one condition after its
 * " AND "). */
static int store_search_sql(mv_store *s,
                            const int present[P_LIMIT + 1],
                            int backlog,
                            int old,
                            char sql[STORE_SEARCH_SQL_MAX])
{
    size_t at = strlen(store_search_head);
    memcpy(sql, store_search_head, at + 1);
    int rc = MV_OK;
    for (int i = P_MAILBOX; rc == MV_OK && i <= P_LIMIT; i++) {
        if (!present[i]) {
            continue;
        }
        int full_text = i == P_TEXT || i == P_BODY || i == P_ANY;
        int like = present[i] == STORE_SEARCH_LIKE;
        const char *fragment =
            like ? (backlog && full_text ? store_search_backlog_short[i] : store_search_short[i])
                 : (backlog && full_text ? store_search_backlog[i] : store_search_fragment[i]);
        if (!(old && full_text)) {
            rc = store_search_append(s, sql, &at, fragment);
            continue;
        }
        rc = store_search_append(s, sql, &at, " AND (");
        if (rc == MV_OK) {
            rc = store_search_append(s, sql, &at, fragment + strlen(" AND "));
        }
        if (rc == MV_OK) {
            rc = store_search_append(s, sql, &at, " OR ");
        }
        if (rc == MV_OK) {
            rc = store_search_append(s, sql, &at,
                                     like ? store_search_short_old[i] : store_search_old[i]);
        }
        if (rc == MV_OK) {
            rc = store_search_append(s, sql, &at, ")");
        }
    }
    return rc;
}

/* Binds the present criteria's values (text: the full-text strings or LIKE patterns). */
static void store_search_bind(sqlite3_stmt *st,
                              const struct mv_search_query *q,
                              const int present[P_LIMIT + 1],
                              int64_t mailbox_id,
                              const char *const text[3],
                              uint32_t limit)
{
    const char *strings[P_LIMIT + 1] = {
        [P_FROM] = q->from,
        [P_TO] = q->to,
        [P_CC] = q->cc,
        [P_SUBJECT] = q->subject,
        [P_MESSAGE_ID] = q->message_id,
        [P_TEXT] = text[0],
        [P_KEYWORD] = q->keyword,
        [P_BODY] = text[1],
        [P_ANY] = text[2],
    };
    const int64_t numbers[P_LIMIT + 1] = {
        [P_MAILBOX] = mailbox_id,
        [P_SINCE] = q->since,
        [P_BEFORE] = q->before,
        [P_SENT_SINCE] = q->sent_since,
        [P_SENT_BEFORE] = q->sent_before,
        [P_LARGER] = q->larger > INT64_MAX ? INT64_MAX : (int64_t)q->larger,
        [P_SMALLER] = q->smaller > INT64_MAX ? INT64_MAX : (int64_t)q->smaller,
        [P_FLAGS_SET] = q->flags_set,
        [P_FLAGS_UNSET] = q->flags_unset,
        [P_LIMIT] = (int64_t)limit + 1, /* one more: its arrival means MV_ELIMIT */
    };
    for (int i = P_MAILBOX; i <= P_LIMIT; i++) {
        if (!present[i]) {
            continue;
        }
        if (strings[i] != NULL) {
            sqlite3_bind_text(st, i, strings[i], -1, SQLITE_TRANSIENT);
        } else {
            sqlite3_bind_int64(st, i, numbers[i]);
        }
    }
}

/* Checks the query, resolves the mailbox and prepares the full-text values: text[0] the
 * words (NULL if only blanks), text[1] and text[2] body_contains and text_contains as
 * present[] says (the string, or a LIKE pattern under three characters). */
static int store_search_prepare_query(mv_store *s,
                                      const struct mv_search_query *q,
                                      const int present[P_LIMIT + 1],
                                      int64_t *mailbox_id,
                                      char *text[3])
{
    if (((q->flags_set | q->flags_unset) & ~MV_FLAG_ALL) != 0) {
        return store_fail(s, MV_EINVAL, "unknown flag bits in a search");
    }
    if (q->mailbox != NULL) {
        int rc = store_mailbox_id(s, q->mailbox, mailbox_id);
        if (rc != MV_OK) {
            return rc;
        }
    }
    int rc = MV_OK;
    if (present[P_BODY]) {
        rc = store_search_substring(s, q->body_contains, present[P_BODY] == STORE_SEARCH_LIKE,
                                    &text[1]);
    }
    if (rc == MV_OK && present[P_ANY]) {
        rc = store_search_substring(s, q->text_contains, present[P_ANY] == STORE_SEARCH_LIKE,
                                    &text[2]);
    }
    if (rc != MV_OK || q->text == NULL) {
        return rc;
    }
    if (q->text[strspn(q->text, " \t\r\n")] == '\0') {
        return MV_OK; /* only blanks: no full-text criterion */
    }
    return store_search_substring(s, q->text, 0, &text[0]);
}

int mv_search_begin(mv_store *s, const struct mv_search_query *q, mv_search **out)
{
    char sql[STORE_SEARCH_SQL_MAX];
    int present[P_LIMIT + 1] = {0};
    int64_t mailbox_id = 0;
    char *text[3] = {NULL, NULL, NULL};
    mv_search *it = NULL;
    if (out == NULL || q == NULL) {
        return store_fail(s, MV_EINVAL, "mv_search_begin: no query or output pointer");
    }
    *out = NULL;
    store_enter(s);
    store_search_present(q, 0, present);
    int rc = store_search_prepare_query(s, q, present, &mailbox_id, text);
    int backlog = 0, old = 0;
    if (rc == MV_OK) {
        present[P_TEXT] = text[0] != NULL;
        if (present[P_TEXT] || present[P_BODY] || present[P_ANY]) {
            rc = store_fts_backlog_any(s, &backlog);
            if (rc == MV_OK && !s->fts_moved_all) {
                rc = store_fts_old_exists(s, &old);
            }
        }
    }
    if (rc == MV_OK) {
        rc = store_search_sql(s, present, backlog, old, sql);
    }
    if (rc == MV_OK && (it = calloc(1, sizeof *it)) == NULL) {
        rc = store_fail(s, MV_ENOMEM, "out of memory starting a search");
    }
    if (rc == MV_OK && old) {
        char plain[STORE_SEARCH_SQL_MAX];
        rc = store_search_sql(s, present, backlog, 0, plain);
        if (rc == MV_OK && (it->sql_without_old = strdup(plain)) == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory starting a search");
        }
    }
    if (rc == MV_OK && sqlite3_prepare_v2(s->db, sql, -1, &it->stmt, NULL) != SQLITE_OK) {
        rc = store_fail_sqlite(s, "preparing a search");
        /* another handle may have ended the move (and dropped the old index) since the look
         * above: then the statement without it */
        int exists = 1;
        if (old && store_fts_old_exists(s, &exists) == MV_OK && !exists &&
            sqlite3_prepare_v2(s->db, it->sql_without_old, -1, &it->stmt, NULL) == SQLITE_OK) {
            free(it->sql_without_old);
            it->sql_without_old = NULL;
            rc = MV_OK;
        }
    }
    if (rc == MV_OK) {
        uint32_t max = s->limits.search_results_max;
        it->store = s;
        it->limit = q->limit == MV_SEARCH_UNLIMITED   ? MV_SEARCH_UNLIMITED
                    : q->limit != 0 && q->limit < max ? q->limit
                                                      : max;
        store_search_bind(it->stmt, q, present, mailbox_id, (const char *const *)text, it->limit);
        memcpy(it->present, present, sizeof it->present);
        it->backlog = backlog;
        it->old = old;
        *out = it;
        it = NULL;
    }
    if (it != NULL) {
        sqlite3_finalize(it->stmt);
        free(it->sql_without_old);
        free(it);
    }
    for (size_t i = 0; i < 3; i++) {
        free(text[i]);
    }
    return rc;
}

/* The first step failed on a statement that reads the old full-text index: if the index is
 * gone (another handle finished the move since the prepare), the search again without it,
 * with the same bound values (the parameters are numbered alike). 1 and *step the new
 * statement's first step if it ran; 0 if the old index is still there (the failure was
 * another one) or the retry could not be prepared. */
static int store_search_without_old(mv_search *it, int *step)
{
    mv_store *s = it->store;
    int exists = 1;
    sqlite3_stmt *plain = NULL;
    if (store_fts_old_exists(s, &exists) != MV_OK || exists ||
        sqlite3_prepare_v2(s->db, it->sql_without_old, -1, &plain, NULL) != SQLITE_OK) {
        return 0;
    }
    if (sqlite3_transfer_bindings(it->stmt, plain) != SQLITE_OK) {
        sqlite3_finalize(plain);
        return 0;
    }
    sqlite3_finalize(it->stmt);
    it->stmt = plain;
    free(it->sql_without_old);
    it->sql_without_old = NULL;
    *step = sqlite3_step(it->stmt);
    return 1;
}

/* The statement made again with the backlog's bodies (the same bound values: the fragments
 * number their parameters alike), and its twin without the old index if it has one. */
static int store_search_with_backlog(mv_search *it)
{
    mv_store *s = it->store;
    char sql[STORE_SEARCH_SQL_MAX];
    sqlite3_stmt *st = NULL;
    char *without_old = NULL;
    int rc = store_search_sql(s, it->present, 1, it->old, sql);
    if (rc == MV_OK && it->sql_without_old != NULL) {
        char plain[STORE_SEARCH_SQL_MAX];
        rc = store_search_sql(s, it->present, 1, 0, plain);
        if (rc == MV_OK && (without_old = strdup(plain)) == NULL) {
            rc = store_fail(s, MV_ENOMEM, "out of memory starting a search");
        }
    }
    if (rc == MV_OK && sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = store_fail_sqlite(s, "preparing a search");
        /* another handle may have ended the move (the old index gone): without it, then */
        if (without_old != NULL &&
            sqlite3_prepare_v2(s->db, without_old, -1, &st, NULL) == SQLITE_OK) {
            free(without_old);
            without_old = NULL;
            rc = MV_OK;
        }
    }
    if (rc == MV_OK && sqlite3_transfer_bindings(it->stmt, st) != SQLITE_OK) {
        rc = store_fail_sqlite(s, "preparing a search");
    }
    if (rc != MV_OK) {
        sqlite3_finalize(st);
        free(without_old);
        return rc;
    }
    sqlite3_finalize(it->stmt);
    it->stmt = st;
    free(it->sql_without_old); /* without_old is NULL when there was none, or it is gone */
    it->sql_without_old = without_old;
    it->backlog = 1;
    return MV_OK;
}

/* The first step. mv_search_begin() looked at the backlog before the rows' read transaction
 * began, so a drain step of another handle in between could add messages whose bodies are
 * in the backlog (no full-text row yet) and a statement made without the backlog's fragment
 * missed them. The backlog is looked at again here, in the read transaction of the first
 * step (a BEGIN of its own unless the caller's transaction is open: *own_tx 1, and
 * mv_search_next() commits it once it has the step's row or error; the statement keeps its
 * snapshot, SQLite lets a reading statement go on past the COMMIT), and the statement made
 * again with the backlog if it holds bodies now. */
static int store_search_first(mv_search *it, int *step, int *own_tx)
{
    mv_store *s = it->store;
    int full_text = it->present[P_TEXT] || it->present[P_BODY] || it->present[P_ANY];
    if (!full_text || it->backlog) {
        *step = sqlite3_step(it->stmt);
        return MV_OK;
    }
    int outside = sqlite3_get_autocommit(s->db); /* else the caller's transaction */
    int rc = outside ? store_read_begin(s) : MV_OK;
    *own_tx = outside && rc == MV_OK;
    int backlog = 0;
    if (rc == MV_OK) {
        rc = store_fts_backlog_any(s, &backlog);
    }
    if (rc == MV_OK && backlog) {
        rc = store_search_with_backlog(it);
    }
    if (rc == MV_OK) {
        *step = sqlite3_step(it->stmt);
    }
    return rc;
}

int mv_search_next(mv_search *it, struct mv_message_info *info)
{
    if (it == NULL || info == NULL) {
        return MV_EINVAL;
    }
    if (it->done) {
        return it->rc_after_done;
    }
    store_enter(it->store); /* the first step sorts: a spill goes to the store's tmp/ */
    int step = SQLITE_ERROR, rc = MV_OK, own_tx = 0, row = 0;
    if (!it->started) {
        it->started = 1;
        rc = store_search_first(it, &step, &own_tx);
    } else {
        step = sqlite3_step(it->stmt);
    }
    if (rc == MV_OK && step == SQLITE_ERROR && it->returned == 0 && it->sql_without_old != NULL) {
        /* the message first: the retry's own statements clear the connection's error */
        rc = store_fail_sqlite(it->store, "searching");
        if (store_search_without_old(it, &step)) {
            rc = MV_OK;
        }
    }
    if (rc != MV_OK) {
        /* the first step's error, kept */
    } else if (step == SQLITE_DONE) {
        rc = 0;
    } else if (step != SQLITE_ROW) {
        rc = store_fail_sqlite(it->store, "searching");
    } else if (it->returned == it->limit) {
        rc = store_fail(it->store, MV_ELIMIT,
                        "more than %u messages match (the search's limit; "
                        "search_results_max is %u)",
                        it->limit, it->store->limits.search_results_max);
    } else {
        store_strings_clear(&it->strings);
        rc = store_message_info_read(it->stmt, &it->strings, info);
        if (rc != MV_OK) {
            rc = store_fail(it->store, rc, "out of memory reading a search result");
        } else {
            it->returned++;
            row = 1;
        }
    }
    if (own_tx) { /* after the error was kept: a COMMIT clears the connection's */
        int end = store_commit(it->store);
        rc = rc == MV_OK ? end : rc;
        row = row && end == MV_OK;
    }
    if (row) {
        return 1;
    }
    it->done = 1;
    it->rc_after_done = rc;
    sqlite3_reset(it->stmt); /* ends the read transaction */
    return rc;
}

void mv_search_end(mv_search **search)
{
    if (search == NULL || *search == NULL) {
        return;
    }
    sqlite3_finalize((*search)->stmt);
    free((*search)->sql_without_old);
    store_strings_free(&(*search)->strings);
    free(*search);
    *search = NULL;
}
