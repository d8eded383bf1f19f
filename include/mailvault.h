/*
 * mailvault.h -- the public interface of libmailvault, written as its manual.
 *
 * libmailvault keeps each user's mail in one encrypted SQLite file. This header is the only
 * one the command-line tool, the benchmarks and (later) the server include.
 *
 * LAYERS VISIBLE HERE
 *   1. Errors and versions: MV_OK / MV_E* codes and mv_strerror().
 *   2. The encrypting VFS: an SQLite VFS named "mailvault" that stacks on another VFS (the
 *      platform default unless told otherwise) and encrypts and authenticates every page of
 *      the main database, its rollback journal and its WAL in the on-disk formats of SQLite3
 *      Multiple Ciphers (ciphers "chacha20", "aes256cbc", "sqlcipher"), and every temporary
 *      file SQLite writes under a random per-process key.
 *   3. mv_db_open(): open (or create) one encrypted database with a cipher and a key in one
 *      call.
 *
 * KEYS
 *   A key is given as a byte string ("secret"), exactly as PRAGMA key takes it:
 *     - any bytes: a passphrase, run through the cipher's KDF with the salt in the file;
 *     - x'<64 hex digits>': a raw 256-bit key (chacha20 and sqlcipher only), no KDF;
 *     - x'<96 hex digits>': a raw key followed by the 16-byte salt for a new file.
 *   The library copies the secret into memory it owns and wipes it (OPENSSL_cleanse) as soon
 *   as the key is derived; the derived key is wiped when the file closes. Callers should wipe
 *   their own copy after the call.
 *
 * THREADS
 *   mv_vfs_register() may be called from any thread, any number of times. A database handle
 *   is used by one thread at a time; separate handles are independent.
 *
 * ERRORS
 *   Every fallible function returns MV_OK (0) or a negative MV_E* code. mv_strerror() turns a
 *   code into static text; functions that can say more give a detail message whose owner is
 *   documented with the function.
 */
#ifndef MAILVAULT_H
#define MAILVAULT_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MV_API        __attribute__((visibility("default")))
#define MV_MUST_CHECK __attribute__((warn_unused_result))
#else
#define MV_API
#define MV_MUST_CHECK
#endif

/* ---- Versions -------------------------------------------------------------------------- */

#define MV_VERSION_STRING "0.1.0"

/* The library's version, "MAJOR.MINOR.PATCH". Static storage. */
MV_API const char *mv_version(void);

/* ---- Error codes ----------------------------------------------------------------------- */

#define MV_OK           0
#define MV_ERROR        (-1)  /* an error that fits no class below (detail in the message) */
#define MV_ENOMEM       (-2)  /* out of memory */
#define MV_EINVAL       (-3)  /* invalid argument: bad cipher name, malformed key, bad path */
#define MV_EAUTH        (-4)  /* wrong password, or not a mailvault/SQLite3MC database */
#define MV_ECORRUPT     (-5)  /* a page failed authentication, or the file is damaged */
#define MV_EIO          (-6)  /* the operating system refused a read, write or sync */
#define MV_EBUSY        (-7)  /* locked by another connection beyond the busy timeout */
#define MV_ENOTFOUND    (-8)  /* no such file, store, mailbox or message */
#define MV_EEXISTS      (-9)  /* already exists */
#define MV_ELIMIT       (-10) /* a configured limit was hit; the message names the limit */
#define MV_ENOSPC       (-11) /* not enough disk space */
#define MV_EUNSUPPORTED (-12) /* a format or operation this build does not support */

/* Static text for an MV_* code; never NULL ("unknown error" for codes not listed above). */
MV_API const char *mv_strerror(int code);

/* ---- Ciphers --------------------------------------------------------------------------- */

typedef enum mv_cipher {
    MV_CIPHER_AUTO = 0,      /* existing file: recognise it from its header; new: chacha20 */
    MV_CIPHER_CHACHA20 = 1,  /* ChaCha20-Poly1305 (sqleet scheme), 32 reserve bytes: default */
    MV_CIPHER_AES256CBC = 2, /* wxSQLite3 AES-256-CBC, no salt, no MAC: legacy, read mostly */
    MV_CIPHER_SQLCIPHER = 3, /* SQLCipher 4 parameters, 80 reserve bytes */
    MV_CIPHER_NONE = 4       /* no encryption (benchmarks and tests only) */
} mv_cipher;

/* The cipher's name as PRAGMA cipher spells it ("chacha20", ...); "auto" and "none" for the
 * other two. Static storage; NULL for a value outside the enum. */
MV_API const char *mv_cipher_name(mv_cipher cipher);

/* Looks up a cipher by name (case-insensitive; accepts the names above).
 * Returns MV_OK, or MV_EINVAL for an unknown name (*cipher_out untouched). */
MV_API MV_MUST_CHECK int mv_cipher_from_name(const char *name, mv_cipher *cipher_out);

/* ---- The VFS --------------------------------------------------------------------------- */

/* The name the encrypting VFS is registered under. */
#define MV_VFS_NAME "mailvault"

/* Registers the encrypting VFS as MV_VFS_NAME on top of the VFS named lower_vfs_name (NULL:
 * the current default VFS), and makes it the process default if make_default is non-zero.
 * Also registers an auto-extension so that every connection opened afterwards can take
 * "PRAGMA key" on a new file (the VFS needs the connection to set the page reserve bytes).
 * Calling it again is harmless: the first registration's lower VFS stays in force.
 * Returns MV_OK, MV_ENOTFOUND if lower_vfs_name names no VFS, MV_ENOMEM, or MV_ERROR if the
 * crypto library fails its start-up self-test. */
MV_API MV_MUST_CHECK int mv_vfs_register(const char *lower_vfs_name, int make_default);

/* ---- Opening a database ---------------------------------------------------------------- */

#define MV_DB_CREATE   0x01 /* create the file if it does not exist */
#define MV_DB_READONLY 0x02 /* open read-only (never writes, not even a WAL checkpoint) */

struct mv_db_options {
    mv_cipher cipher;  /* MV_CIPHER_AUTO: from the file header, chacha20 for a new file */
    uint32_t kdf_iter; /* 0: the cipher's default (chacha20 64007, sqlcipher 256000) */
    int legacy;        /* sqlcipher only: 0 (SQLite3MC default) or 4 (real SQLCipher 4) */
    int page_size;     /* new files only; 0: 4096 */
    unsigned flags;    /* MV_DB_* */
    int auto_vacuum;   /* new files only: 0 NONE, 1 FULL, 2 INCREMENTAL (fixed at creation) */
};
#define MV_DB_OPTIONS_INIT                                                                         \
    {                                                                                              \
        MV_CIPHER_AUTO, 0, 0, 0, 0, 0                                                              \
    }

/* Opens the SQLite database at path through the encrypting VFS (registering it if needed),
 * keyed with secret (see KEYS above; secret_len bytes, need not be NUL-terminated).
 *
 * For a new file it sets the page size, the cipher's reserve bytes and auto_vacuum before
 * anything writes page 1, then writes page 1, so the file is keyed and recognisable at once
 * (an empty file would open with any password). For an existing file
 * the cipher is recognised from the plain header bytes (reserve 32: chacha20, 80: sqlcipher,
 * 0: aes256cbc), so only one KDF runs; it then proves the key by reading the schema.
 * opts may be NULL for defaults.
 *
 * On success *db_out is an open connection the caller closes with sqlite3_close(). On
 * failure *db_out is NULL and, if errmsg_out is not NULL, *errmsg_out is a message the caller
 * frees with sqlite3_free() (NULL if out of memory).
 *
 * Returns MV_OK; MV_ENOTFOUND (no file and no MV_DB_CREATE); MV_EAUTH (wrong key, or not a
 * mailvault/SQLite3MC database); MV_ECORRUPT (damaged or truncated file); MV_EINVAL (bad
 * options or malformed key); MV_EUNSUPPORTED (a key for an unencrypted file, or a cipher
 * that cannot read this file); MV_EIO; MV_EBUSY; MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_db_open(const char *path,
                                    const void *secret,
                                    size_t secret_len,
                                    const struct mv_db_options *opts,
                                    sqlite3 **db_out,
                                    char **errmsg_out);

/* The encrypting VFS's last error on db's main file ("page 7 failed authentication ..."),
 * or NULL if it has none. Owned by the connection; valid until the next call on db. Use it
 * next to sqlite3_errmsg(), which for such errors only says "disk I/O error". */
MV_API const char *mv_db_vfs_errmsg(sqlite3 *db);

/* Maps an SQLite result code (primary or extended) to an MV_* code. */
MV_API int mv_error_from_sqlite(int sqlite_rc);

/* Describes db's main file: cipher in use, KDF iterations, reserve bytes. Returns MV_OK or
 * MV_EINVAL if db's main file is not on the mailvault VFS. */
struct mv_db_info {
    mv_cipher cipher;
    uint32_t kdf_iter;
    int legacy;
    int reserve_bytes;
    int page_size;
};
MV_API MV_MUST_CHECK int mv_db_info(sqlite3 *db, struct mv_db_info *info_out);

/* ======================================================================================== */
/* The per-user mail store                                                                   */
/* ======================================================================================== */
/*
 * A store is one encrypted SQLite file per user, ROOT/<domain>/<localpart>.db, with its
 * temporary files in ROOT/<domain>/tmp/ (encrypted by the VFS), its public delivery key in
 * ROOT/<domain>/<localpart>.pub and its pending-delivery queue in
 * ROOT/<domain>/<localpart>.queue/. ROOT is the root option, else $MAILVAULT_ROOT, else
 * "./var/mail". Directories are created 0700, files 0600.
 *
 * Every mutation is one IMMEDIATE transaction: an append, copy, move, flag change or
 * expunge, including reference counts, full-text index and change log, happens entirely or
 * not at all. Strings in returned structs are owned by the store (or the iterator) and stay
 * valid until the next call on the same handle, unless documented otherwise.
 */

typedef struct mv_store mv_store;

/* Limits: every one is enforced with MV_ELIMIT and a message that names it. */
struct mv_limits {
    uint64_t message_size_max;   /* bytes of one message; default 64 MiB */
    uint32_t header_count_max;   /* header fields in one message; default 1000 */
    uint32_t header_size_max;    /* bytes of one header field, folded; default 64 KiB */
    uint32_t keywords_max;       /* keywords on one message; default 64 */
    uint32_t keyword_size_max;   /* bytes of one keyword; default 128 */
    uint32_t mailbox_name_max;   /* bytes of a mailbox name; default 512 */
    uint32_t mailboxes_max;      /* mailboxes in a store; default 10000 */
    uint32_t search_results_max; /* rows one search returns; default 100000 */
};
#define MV_LIMITS_DEFAULT                                                                          \
    {                                                                                              \
        64u << 20, 1000, 64u << 10, 64, 128, 512, 10000, 100000                                    \
    }

#define MV_STORE_CREATE   0x01 /* mv_store_open: create if missing (mv_store_init does more) */
#define MV_STORE_READONLY 0x02 /* open read-only: no writes, no queue drain */

struct mv_store_options {
    const char *root;       /* NULL: $MAILVAULT_ROOT, else "./var/mail" */
    unsigned flags;         /* MV_STORE_* */
    uint32_t kdf_iter;      /* 0: the cipher's default (tests use fewer) */
    int64_t cache_size_kib; /* page cache; 0: derived from available memory */
    struct mv_limits limits;
};
#define MV_STORE_OPTIONS_INIT                                                                      \
    {                                                                                              \
        NULL, 0, 0, 0, MV_LIMITS_DEFAULT                                                           \
    }

/* Longest normalised address, and longest path a store can have. */
#define MV_ADDRESS_MAX 320
#define MV_PATH_MAX    4096

/* Validates and normalises an e-mail address used as a store name: one '@', local part
 * 1..64 bytes, domain 1..253 bytes (lowercased), no '/', no "..", no NUL or control
 * characters, no leading '.' or '-'. Writes the normal form to out (out_size >= 2 bytes).
 * Returns MV_OK or MV_EINVAL (message in errmsg if not NULL, errmsg_size bytes). */
MV_API MV_MUST_CHECK int mv_address_normalize(
    const char *address, char *out, size_t out_size, char *errmsg, size_t errmsg_size);

/* Creates the store of address: directories, the encrypted database with the schema and
 * the mailboxes INBOX, Sent, Drafts, Trash, Junk, Archive, and an X25519 key pair for
 * deliveries without the password (public key beside the store, private key only inside
 * it). Returns MV_OK, MV_EEXISTS, MV_EINVAL (bad address, empty password), MV_EIO,
 * MV_ENOMEM. On failure no store file is left behind (the domain's directories, shared with
 * other stores, may remain). The schema and the mailboxes are one transaction: an init killed
 * after it leaves a store that opens (mv_store_open() makes a missing key pair); one killed
 * before leaves a file that mv_store_open() refuses with MV_ECORRUPT and a message saying so
 * (remove it and init again). errmsg as for mv_address_normalize(). */
MV_API MV_MUST_CHECK int mv_store_init(const char *address,
                                       const void *password,
                                       size_t password_len,
                                       const struct mv_store_options *opts,
                                       char *errmsg,
                                       size_t errmsg_size);

/* Opens the store of address with password. Applies the production profile (WAL,
 * secure_delete, auto_vacuum FULL, busy_timeout 30000, synchronous NORMAL, foreign keys,
 * temp files on disk in the store's tmp/ directory, ...), reads every setting back and
 * refuses to continue if one did not take, migrates the schema in one transaction, and
 * moves queued deliveries into the store (each queue entry removed only after its commit).
 * *out is the handle, closed with mv_store_close(). Returns MV_OK, MV_ENOTFOUND (no store),
 * MV_EAUTH (wrong password), MV_ECORRUPT, MV_EINVAL, MV_EBUSY, MV_EIO, MV_ENOMEM; on failure
 * *out is NULL and errmsg (if not NULL) says why. */
MV_API MV_MUST_CHECK int mv_store_open(const char *address,
                                       const void *password,
                                       size_t password_len,
                                       const struct mv_store_options *opts,
                                       mv_store **out,
                                       char *errmsg,
                                       size_t errmsg_size);

/* Closes the store (running PRAGMA optimize first) and sets *store to NULL. NULL is fine. */
MV_API void mv_store_close(mv_store **store);

/* The detail of the last error on this handle ("" if none); after a successful open it may
 * hold a warning from the queue drain (a rejected or oversized queue file, a rewritten
 * public key). Owned by the store. */
MV_API const char *mv_store_errmsg(const mv_store *store);

/* The store's SQLite connection, for read-only inspection (stats, explain). Owned by the
 * store; do not close it, do not write through it. */
MV_API sqlite3 *mv_store_db(mv_store *store);

/* ---- Mailboxes ------------------------------------------------------------------------- */

struct mv_mailbox_info {
    int64_t id;
    const char *name;
    uint32_t uidvalidity;
    uint32_t uidnext;
    uint64_t highestmodseq;
    int subscribed;
    const char *special_use; /* "\\Sent" etc., or NULL */
    uint32_t messages;
    uint32_t unseen;
    uint64_t size_bytes;   /* logical: sum of message sizes */
    uint64_t stored_bytes; /* physical: the distinct bodies and attachments its messages use,
                              as stored (compressed), each counted once in this mailbox; a
                              copy in another mailbox counts there too (mv_store_stats()
                              counts it once for the store) */
};

/* Mailbox names are UTF-8, 1..limits.mailbox_name_max bytes, '/' as hierarchy separator, no
 * control characters, no empty levels. INBOX is case-insensitive and cannot be deleted or
 * renamed away. A rename carries the children along, all or nothing: MV_ELIMIT if a child's
 * new name would exceed mailbox_name_max, MV_EEXISTS if one is taken. Each returns MV_OK,
 * MV_EINVAL, MV_EEXISTS, MV_ENOTFOUND, MV_ELIMIT, MV_EBUSY or MV_EIO. */
MV_API MV_MUST_CHECK int
mv_mailbox_create(mv_store *store, const char *name, const char *special_use);
MV_API MV_MUST_CHECK int mv_mailbox_rename(mv_store *store, const char *from, const char *to);
/* Deletes the mailbox and its messages (reference counts dropped, change log kept). */
MV_API MV_MUST_CHECK int mv_mailbox_delete(mv_store *store, const char *name);
MV_API MV_MUST_CHECK int mv_mailbox_subscribe(mv_store *store, const char *name, int on);
/* Fills *info for one mailbox (strings owned by the store). */
MV_API MV_MUST_CHECK int
mv_mailbox_get(mv_store *store, const char *name, struct mv_mailbox_info *info);

/* Iterates the mailboxes in name order: next returns 1 with *info filled (strings valid
 * until the next call), 0 at the end, or a negative MV_E* code. */
typedef struct mv_mailbox_iter mv_mailbox_iter;
MV_API MV_MUST_CHECK int mv_mailbox_list_begin(mv_store *store, mv_mailbox_iter **iter);
MV_API int mv_mailbox_list_next(mv_mailbox_iter *iter, struct mv_mailbox_info *info);
MV_API void mv_mailbox_list_end(mv_mailbox_iter **iter);

/* ---- Messages -------------------------------------------------------------------------- */

#define MV_FLAG_SEEN     0x01u
#define MV_FLAG_ANSWERED 0x02u
#define MV_FLAG_FLAGGED  0x04u
#define MV_FLAG_DELETED  0x08u
#define MV_FLAG_DRAFT    0x10u
#define MV_FLAG_ALL      0x1fu

struct mv_message_info {
    const char *mailbox;
    uint32_t uid;
    uint64_t modseq;
    int64_t internal_date; /* Unix seconds */
    int64_t sent_date;     /* Unix seconds from the Date header; 0 if none or unparsable */
    uint64_t size;         /* bytes, as delivered */
    unsigned flags;        /* MV_FLAG_* */
    const char *keywords;  /* space-separated, "" if none */
    const char *subject;   /* decoded to UTF-8; "" if none */
    const char *from;      /* decoded address list; "" if none */
    const char *to;
    const char *cc;
    const char *message_id; /* without angle brackets; "" if none */
    const char *in_reply_to;
    int64_t thread_id;
};

/* Appends raw (len bytes, stored byte for byte) to mailbox with flags and keywords
 * (space-separated, may be NULL) and internal_date (0: now). *uid_out (if not NULL) gets the
 * new UID. Malformed mail is stored as it is; what cannot be parsed is left empty. An empty
 * message is refused (MV_EINVAL).
 * Returns MV_OK, MV_ENOTFOUND (mailbox), MV_ELIMIT (size, headers, keywords), MV_EINVAL,
 * MV_EBUSY, MV_ENOSPC, MV_EIO, MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_message_append(mv_store *store,
                                           const char *mailbox,
                                           const void *raw,
                                           size_t len,
                                           unsigned flags,
                                           const char *keywords,
                                           int64_t internal_date,
                                           uint32_t *uid_out);

/* Returns in *raw_out (malloc'd; free with mv_free) the exact bytes that were appended, and
 * their length in *len_out. MV_OK, MV_ENOTFOUND, MV_ECORRUPT, MV_EIO, MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_message_fetch(
    mv_store *store, const char *mailbox, uint32_t uid, void **raw_out, size_t *len_out);

/* Fills *info for one message (strings owned by the store). */
MV_API MV_MUST_CHECK int
mv_message_get(mv_store *store, const char *mailbox, uint32_t uid, struct mv_message_info *info);

/* A UID set in IMAP syntax: "1", "3:7", "1,4:6,9:*". At most 10000 ranges. */
#define MV_FLAGS_REPLACE 0
#define MV_FLAGS_ADD     1
#define MV_FLAGS_REMOVE  2
/* Changes flags and keywords of the messages in uid_set: each changed message gets a new
 * modseq and a change-log row. *changed_out (if not NULL) counts changed messages.
 * Returns MV_OK, MV_EINVAL (bad set or keyword), MV_ENOTFOUND (mailbox), MV_ELIMIT, ... */
MV_API MV_MUST_CHECK int mv_flags_set(mv_store *store,
                                      const char *mailbox,
                                      const char *uid_set,
                                      int mode,
                                      unsigned flags,
                                      const char *keywords,
                                      uint32_t *changed_out);

/* Copies (or moves) the messages in uid_set to another mailbox, without copying bytes
 * (bodies are shared by reference count). *count_out gets the number copied. */
MV_API MV_MUST_CHECK int mv_message_copy(
    mv_store *store, const char *from, const char *uid_set, const char *to, uint32_t *count_out);
MV_API MV_MUST_CHECK int mv_message_move(
    mv_store *store, const char *from, const char *uid_set, const char *to, uint32_t *count_out);

/* Removes the messages flagged \Deleted (and in uid_set, if not NULL) from mailbox.
 * *count_out gets the number expunged. */
MV_API MV_MUST_CHECK int
mv_mailbox_expunge(mv_store *store, const char *mailbox, const char *uid_set, uint32_t *count_out);

/* Frees memory the library returned (mv_message_fetch). NULL is fine. */
MV_API void mv_free(void *p);

/* ---- Search ---------------------------------------------------------------------------- */

struct mv_search_query {
    const char *mailbox; /* NULL: every mailbox */
    const char *from;    /* substring, case-insensitive, of the decoded header */
    const char *to;
    const char *cc;
    const char *subject;
    const char *message_id;
    const char *text;   /* full-text query over subject, addresses and body (FTS5) */
    int64_t since;      /* internal date >= since (Unix seconds); 0: no bound */
    int64_t before;     /* internal date < before; 0: no bound */
    int64_t sent_since; /* Date header >= ...; 0: no bound */
    int64_t sent_before;
    uint64_t larger;      /* size > larger; 0: no bound */
    uint64_t smaller;     /* size < smaller; 0: no bound */
    unsigned flags_set;   /* all of these flags set */
    unsigned flags_unset; /* none of these flags set */
    const char *keyword;  /* has this keyword */
    uint32_t limit;       /* 0: limits.search_results_max; more gives MV_ELIMIT */
};
#define MV_SEARCH_QUERY_INIT                                                                       \
    {                                                                                              \
        0                                                                                          \
    }

/* Runs a search; results come newest first by internal date (the order of equal dates is
 * not specified: it follows the index the query planner picks).
 * The text query is a list of words, each matched as a quoted FTS5 phrase (no query syntax:
 * "foo AND" looks for both words); a malformed one matches nothing. next returns 1 with *info
 * (strings valid until the next call), 0 at the end, or a negative MV_E* code (MV_ELIMIT
 * when more rows match than the limit allows). */
typedef struct mv_search mv_search;
MV_API MV_MUST_CHECK int
mv_search_begin(mv_store *store, const struct mv_search_query *query, mv_search **out);
MV_API int mv_search_next(mv_search *search, struct mv_message_info *info);
MV_API void mv_search_end(mv_search **search);

/* ---- Delivery, import, export ------------------------------------------------------------ */

/* Delivers raw into the INBOX of address without the password: the message is sealed to
 * the store's public key (crypto_box_seal) into the pending queue; the next mv_store_open()
 * with the password moves it into the store. Only the user can read it. Returns MV_OK,
 * MV_ENOTFOUND (no such store), MV_ELIMIT (size), MV_EINVAL, MV_EIO, MV_ENOSPC,
 * MV_ECORRUPT (the public key file is missing or not 32 bytes), MV_ENOMEM, MV_ERROR
 * (libsodium failed to start). The message is on disk (fsync'd) when this returns MV_OK. */
MV_API MV_MUST_CHECK int mv_deliver_sealed(const char *address,
                                           const void *raw,
                                           size_t len,
                                           const struct mv_store_options *opts,
                                           char *errmsg,
                                           size_t errmsg_size);

/* Deliveries waiting in the queue of address (readable without the password).
 * Returns MV_OK, MV_EINVAL (bad address), MV_ENOTFOUND (no store) or MV_EIO. */
MV_API MV_MUST_CHECK int
mv_queue_count(const char *address, const struct mv_store_options *opts, uint32_t *count_out);

struct mv_import_stats {
    uint64_t messages_seen;
    uint64_t messages_imported;
    uint64_t messages_skipped; /* already in the mailbox (a re-run after an interruption) */
    uint64_t messages_failed;  /* refused (limits); the import goes on */
    uint64_t bytes;
};
/* Called after each message; return non-zero to stop. */
typedef int (*mv_import_progress_fn)(void *arg,
                                     const struct mv_import_stats *stats,
                                     uint64_t bytes_total);

/* Imports an mbox file, a Maildir folder or a directory of .eml files (recognised from
 * path) into mailbox, streaming (memory bounded by the largest message, never by the input),
 * one transaction per message batch. A message already in the mailbox (same SHA-256 of its
 * bytes) is skipped, so a re-run after an interruption neither loses nor duplicates mail
 * (and identical messages within one input are imported once). A stop requested by the
 * progress callback returns MV_OK with what was committed. stats->bytes counts input bytes
 * consumed; bytes_total is 0 for directories. Returns MV_OK, MV_ENOTFOUND (path or
 * mailbox), MV_EUNSUPPORTED (input not recognised), MV_EIO, MV_ENOMEM, or a store error. */
MV_API MV_MUST_CHECK int mv_import(mv_store *store,
                                   const char *path,
                                   const char *mailbox,
                                   mv_import_progress_fn progress,
                                   void *progress_arg,
                                   struct mv_import_stats *stats_out);

/* Writes every message of mailbox to fd as an mbox (mboxrd quoting, "From " lines with the
 * internal date). *count_out gets the number written. A message that does not end in a
 * newline gets one (mbox cannot represent its absence). Returns MV_OK, MV_ENOTFOUND
 * (mailbox), MV_EIO (a write failed), MV_ECORRUPT, MV_ENOMEM. */
MV_API MV_MUST_CHECK int
mv_export_mbox(mv_store *store, const char *mailbox, int fd, uint32_t *count_out);

/* ---- Accounting ---------------------------------------------------------------------------- */

struct mv_store_stats {
    uint64_t messages;
    uint32_t mailboxes;
    uint64_t logical_bytes;  /* sum of message sizes */
    uint64_t stored_bytes;   /* bytes of bodies + attachments as stored (deduplicated,
                                compressed) */
    uint64_t attachments;    /* distinct attachments */
    uint64_t physical_bytes; /* database file + WAL on disk */
    uint32_t pending;        /* deliveries waiting in the queue */
    int schema_version;
};
MV_API MV_MUST_CHECK int mv_store_stats(mv_store *store, struct mv_store_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* MAILVAULT_H */
