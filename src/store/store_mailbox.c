/*
 * store_mailbox.c -- mailboxes: create, rename, delete, subscribe, describe, list, and the
 * UID and modseq counters every mutation draws from.
 *
 * IMPLEMENTATION NOTES
 *   - Names use '/' as the hierarchy separator; creating "a/b/c" creates "a" and "a/b" too
 *     (RFC 3501 6.3.3). INBOX is matched case-insensitively and stored as "INBOX".
 *   - UIDVALIDITY is the creation time in seconds, made strictly larger than any value the
 *     store ever handed out, so a re-created mailbox never repeats one: the largest value
 *     handed out is kept in meta ('uidvalidity_last'), since the mailbox that had it may
 *     have been deleted (a delete and create within one second would otherwise repeat it).
 *   - uidnext and highestmodseq are advanced with UPDATE ... RETURNING inside the caller's
 *     transaction: no read-modify-write race between processes.
 */
#include "store/store.h"

#include <glib.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define STORE_UID_MAX 0xfffffffeu

const char *store_mailbox_canonical(const char *name)
{
    return strcasecmp(name, "INBOX") == 0 ? "INBOX" : name;
}

int store_mailbox_snapshot_id(const mv_store *s, const char *name, int64_t *id_out)
{
    if (s->read_snapshot && s->snapshot_mailbox_id != 0 && strcmp(name, s->snapshot_mailbox) == 0) {
        *id_out = s->snapshot_mailbox_id; /* nothing can rename it inside the snapshot */
        return 1;
    }
    return 0;
}

void store_mailbox_snapshot_note(mv_store *s, const char *name, int64_t id)
{
    size_t n = strlen(name);
    if (s->read_snapshot && n < sizeof s->snapshot_mailbox) {
        memcpy(s->snapshot_mailbox, name, n + 1);
        s->snapshot_mailbox_id = id;
    }
}

int store_mailbox_name_check(mv_store *s, const char *name)
{
    if (name == NULL || name[0] == '\0') {
        return store_fail(s, MV_EINVAL, "a mailbox name cannot be empty");
    }
    size_t n = strlen(name);
    if (n > s->limits.mailbox_name_max) {
        return store_fail(s, MV_ELIMIT, "mailbox name is %zu bytes; mailbox_name_max is %u", n,
                          s->limits.mailbox_name_max);
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f || c == '*' || c == '%') {
            return store_fail(s, MV_EINVAL,
                              "mailbox name has a control character or a wildcard (* %%)");
        }
    }
    if (name[0] == '/' || name[n - 1] == '/' || strstr(name, "//") != NULL) {
        return store_fail(s, MV_EINVAL, "mailbox name has an empty level (\"%s\")", name);
    }
    /* GLib's validator is strict: no overlong forms, no surrogates, nothing past U+10FFFF. */
    if (!g_utf8_validate(name, (gssize)n, NULL)) {
        return store_fail(s, MV_EINVAL, "mailbox name is not valid UTF-8");
    }
    return MV_OK;
}

int store_mailbox_id(mv_store *s, const char *name, int64_t *id_out)
{
    if (name == NULL) {
        return store_fail(s, MV_EINVAL, "no mailbox name");
    }
    if (store_mailbox_snapshot_id(s, name, id_out)) {
        return MV_OK;
    }
    sqlite3_stmt *st = store_stmt(s, "SELECT id FROM mailboxes WHERE name = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "looking up a mailbox");
    }
    sqlite3_bind_text(st, 1, store_mailbox_canonical(name), -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *id_out = sqlite3_column_int64(st, 0);
        sqlite3_reset(st);
        store_mailbox_snapshot_note(s, name, *id_out);
        return MV_OK;
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        return store_fail_sqlite(s, "looking up a mailbox");
    }
    return store_fail(s, MV_ENOTFOUND, "no mailbox \"%s\"", name);
}

/* Reads the mailbox's uidnext and highestmodseq. A SELECT and a plain single-row UPDATE
 * rather than UPDATE ... RETURNING: SQLite runs RETURNING as a trigger, so that UPDATE is
 * not one-pass and opens a statement savepoint, at which FTS5 writes its pending terms out:
 * every message of a batch (import, queue drain) became its own FTS segment. */
static int
store_mailbox_counters(mv_store *s, int64_t mailbox_id, int64_t *uidnext, int64_t *modseq)
{
    sqlite3_stmt *st = store_stmt(s, "SELECT uidnext, highestmodseq FROM mailboxes WHERE id = ?");
    if (st == NULL) {
        return store_fail_sqlite(s, "allocating a UID");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *uidnext = sqlite3_column_int64(st, 0);
        *modseq = sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    if (step == SQLITE_DONE) {
        return store_fail(s, MV_ENOTFOUND, "mailbox %lld has gone", (long long)mailbox_id);
    }
    return step == SQLITE_ROW ? MV_OK : store_fail_sqlite(s, "allocating a UID");
}

static int
store_mailbox_counters_set(mv_store *s, int64_t mailbox_id, int64_t uidnext, int64_t modseq)
{
    sqlite3_stmt *st = store_stmt(s, "UPDATE mailboxes SET uidnext = ?2, highestmodseq = ?3 "
                                     "WHERE id = ?1");
    if (st == NULL) {
        return store_fail_sqlite(s, "allocating a UID");
    }
    sqlite3_bind_int64(st, 1, mailbox_id);
    sqlite3_bind_int64(st, 2, uidnext);
    sqlite3_bind_int64(st, 3, modseq);
    int step = sqlite3_step(st);
    sqlite3_reset(st);
    return step == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "allocating a UID");
}

int store_mailbox_next_uid(mv_store *s, int64_t mailbox_id, uint32_t *uid, uint64_t *modseq)
{
    int64_t next = 0, highest = 0;
    int rc = store_mailbox_counters(s, mailbox_id, &next, &highest);
    if (rc != MV_OK) {
        return rc;
    }
    if (next < 1 || next > (sqlite3_int64)STORE_UID_MAX) {
        return store_fail(s, MV_ELIMIT, "the mailbox has used every UID (2^32 - 1)");
    }
    rc = store_mailbox_counters_set(s, mailbox_id, next + 1, highest + 1);
    if (rc == MV_OK) {
        *uid = (uint32_t)next;
        *modseq = (uint64_t)highest + 1;
    }
    return rc;
}

int store_mailbox_next_modseq(mv_store *s, int64_t mailbox_id, uint64_t *modseq)
{
    int64_t next = 0, highest = 0;
    int rc = store_mailbox_counters(s, mailbox_id, &next, &highest);
    if (rc == MV_OK) {
        rc = store_mailbox_counters_set(s, mailbox_id, next, highest + 1);
    }
    if (rc == MV_OK) {
        *modseq = (uint64_t)highest + 1;
    }
    return rc;
}

/* Inserts one mailbox row if it does not exist yet (used for every hierarchy level). */
static int
store_mailbox_insert(mv_store *s, const char *name, const char *special_use, int must_be_new)
{
    int64_t id;
    int rc = store_mailbox_id(s, name, &id);
    if (rc == MV_OK) {
        return must_be_new ? store_fail(s, MV_EEXISTS, "mailbox \"%s\" exists", name) : MV_OK;
    }
    if (rc != MV_ENOTFOUND) {
        return rc;
    }
    sqlite3_stmt *st = store_stmt(s, "SELECT count(*), max(coalesce(max(uidvalidity), 0), "
                                     "coalesce((SELECT CAST(value AS INTEGER) FROM meta "
                                     "WHERE key = 'uidvalidity_last'), 0)) FROM mailboxes");
    if (st == NULL || sqlite3_step(st) != SQLITE_ROW) {
        return store_fail_sqlite(s, "counting mailboxes");
    }
    sqlite3_int64 count = sqlite3_column_int64(st, 0), max_validity = sqlite3_column_int64(st, 1);
    sqlite3_reset(st);
    if (count >= s->limits.mailboxes_max) {
        return store_fail(s, MV_ELIMIT, "the store has %lld mailboxes; mailboxes_max is %u",
                          (long long)count, s->limits.mailboxes_max);
    }
    sqlite3_int64 validity = (sqlite3_int64)time(NULL);
    if (validity <= max_validity) {
        validity = max_validity + 1;
    }
    st = store_stmt(s, "INSERT INTO mailboxes(name, uidvalidity, special_use) VALUES(?, ?, ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "creating a mailbox");
    }
    sqlite3_bind_text(st, 1, store_mailbox_canonical(name), -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, validity & 0xffffffff);
    if (special_use != NULL && special_use[0] != '\0') {
        sqlite3_bind_text(st, 3, special_use, -1, SQLITE_STATIC);
    }
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        return store_fail_sqlite(s, "creating a mailbox");
    }
    st = store_stmt(s, "INSERT OR REPLACE INTO meta(key, value) VALUES('uidvalidity_last', ?)");
    if (st == NULL) {
        return store_fail_sqlite(s, "creating a mailbox");
    }
    sqlite3_bind_int64(st, 1, validity & 0xffffffff);
    rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? MV_OK : store_fail_sqlite(s, "creating a mailbox");
}

int store_mailbox_create_parents(mv_store *s, const char *name)
{
    char *parent = strdup(name);
    if (parent == NULL) {
        return store_fail(s, MV_ENOMEM, "out of memory");
    }
    int rc = MV_OK;
    for (char *slash = strchr(parent, '/'); rc == MV_OK && slash != NULL;
         slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        rc = store_mailbox_insert(s, parent, NULL, 0);
        *slash = '/';
    }
    free(parent);
    return rc;
}

int store_mailbox_create_defaults(mv_store *s)
{
    static const char *const defaults[][2] = {{"INBOX", NULL},        {"Sent", "\\Sent"},
                                              {"Drafts", "\\Drafts"}, {"Trash", "\\Trash"},
                                              {"Junk", "\\Junk"},     {"Archive", "\\Archive"}};
    int rc = MV_OK;
    for (size_t i = 0; rc == MV_OK && i < sizeof defaults / sizeof defaults[0]; i++) {
        rc = store_mailbox_insert(s, defaults[i][0], defaults[i][1], 1);
    }
    return rc;
}

static int store_special_use_check(mv_store *s, const char *special_use)
{
    static const char *const allowed[] = {"\\All",  "\\Archive", "\\Drafts", "\\Flagged",
                                          "\\Junk", "\\Sent",    "\\Trash"};
    if (special_use == NULL || special_use[0] == '\0') {
        return MV_OK;
    }
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        if (strcmp(special_use, allowed[i]) == 0) {
            return MV_OK;
        }
    }
    return store_fail(s, MV_EINVAL, "unknown special-use attribute \"%s\" (RFC 6154)", special_use);
}

int mv_mailbox_create(mv_store *s, const char *name, const char *special_use)
{
    int rc = store_mailbox_name_check(s, name);
    if (rc == MV_OK) {
        rc = store_special_use_check(s, special_use);
    }
    if (rc == MV_OK) {
        rc = store_begin(s);
    }
    if (rc != MV_OK) {
        return rc;
    }
    rc = store_mailbox_create_parents(s, name);
    if (rc == MV_OK) {
        rc = store_mailbox_insert(s, name, special_use, 1);
    }
    if (rc != MV_OK) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}
