/*
 * mailvault.h -- the public interface of libmailvault, written as its manual.
 *
 * libmailvault keeps each user's mail in one encrypted SQLite file. This header is the only
 * one the command-line tool, the benchmarks and the server (mailvaultd) include.
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
 *   (and a store handle) is used by one thread at a time; separate handles are independent.
 *   Connections are opened without SQLite's per-connection mutex (SQLITE_OPEN_NOMUTEX),
 *   so this rule is the caller's to keep.
 *
 * ERRORS
 *   Every fallible function returns MV_OK (0) or a negative MV_E* code. mv_strerror() turns a
 *   code into static text; functions that can say more give a detail message whose owner is
 *   documented with the function.
 *
 * VERSIONS AND ABI
 *   The version is MAJOR.MINOR.PATCH (MV_VERSION_STRING, mv_version()). The shared library's
 *   soname is libmailvault.so.MAJOR; it exports the MV_API functions of this header and
 *   nothing else (libmailvault.map, version node MAILVAULT_0). The ABI is every MV_API
 *   function's name and signature, the size and layout of every struct declared here (the
 *   options, reports and infos are allocated by the caller, so a new field changes the
 *   ABI), and the values of the MV_* constants and enums.
 *   - 0.x (now; soname libmailvault.so.0): the ABI is not frozen. A MINOR release (0.1 ->
 *     0.2) may change it: a struct may grow a field, as mv_repair_report and
 *     mv_doctor_options did after 0.1.0, and a signature may change. A PATCH release
 *     (0.2.0 -> 0.2.1) never changes it. So a program built against 0.MINOR runs with any
 *     0.MINOR.PATCH library and must be rebuilt for another MINOR. The soname stays
 *     libmailvault.so.0 through 0.x, so the dynamic loader does not tell the MINORs apart;
 *     the packages do: a Debian package built against 0.2 depends on
 *     "libmailvault0 (>= 0.2), libmailvault0 (<< 0.3~)" (debian/rules, dh_makeshlibs -V;
 *     there is no symbols file, which would claim each symbol compatible across MINORs).
 *   - From 1.0: the soname becomes libmailvault.so.1 and changes only with MAJOR. Within a
 *     MAJOR a release only adds functions and constants; no struct changes size or layout.
 *     The Debian package then gets a symbols file.
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

#define MV_VERSION_STRING "0.4.0"

/* The library's version, "MAJOR.MINOR.PATCH" (see VERSIONS AND ABI at the top). Static
 * storage. */
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
#define MV_EMOVED       (-13) /* the store was released from this node (mv_store_release) */

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

/* The most KDF iterations any cipher takes (kdf_iter of mv_db_options, mv_store_options,
 * PRAGMA kdf_iter, --kdf-iter, $MAILVAULT_KDF_ITER): about a minute of PBKDF2-HMAC-SHA512.
 * A larger value is refused as such (MV_EINVAL), never tried. 0 means the cipher's default. */
#define MV_KDF_ITER_MAX 16777216u

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
 * The VFS offers what the lower VFS offers: where a lower file has no shared memory (I/O
 * methods version 1, or no xShmMap, as Ceph's libcephsqlite), WAL works only in exclusive
 * locking mode (one connection per database at a time), which mv_db_open() sets.
 * Returns MV_OK, MV_ENOTFOUND if lower_vfs_name names no VFS, MV_ENOMEM, or MV_ERROR if the
 * crypto library fails its start-up self-test. */
MV_API MV_MUST_CHECK int mv_vfs_register(const char *lower_vfs_name, int make_default);

/* ---- Opening a database ---------------------------------------------------------------- */

#define MV_DB_CREATE   0x01 /* create the file if it does not exist */
#define MV_DB_READONLY 0x02 /* open read-only (never writes, not even a WAL checkpoint) */

struct mv_db_options {
    mv_cipher cipher;    /* MV_CIPHER_AUTO: from the file header, chacha20 for a new file */
    uint32_t kdf_iter;   /* 0: the cipher's default (chacha20 64007, sqlcipher 256000) */
    int legacy;          /* sqlcipher only: 0 (SQLite3MC default) or 4 (real SQLCipher 4) */
    int page_size;       /* new files only; 0: 4096 */
    unsigned flags;      /* MV_DB_* */
    int auto_vacuum;     /* new files only: 0 NONE, 1 FULL, 2 INCREMENTAL (fixed at creation) */
    int busy_timeout_ms; /* how long the open's first read waits for a lock another connection
                          * holds (a WAL recovery, the checkpoint of a closing connection);
                          * left set on the connection. 0: not at all (MV_EBUSY at once, as
                          * SQLite's default); below 0: MV_EINVAL */
};
#define MV_DB_OPTIONS_INIT                                                                         \
    {                                                                                              \
        MV_CIPHER_AUTO, 0, 0, 0, 0, 0, 0                                                           \
    }

/* Opens the SQLite database at path through the encrypting VFS (registering it if needed),
 * keyed with secret (see KEYS above; secret_len bytes, need not be NUL-terminated).
 *
 * For a new file it sets the page size, the cipher's reserve bytes and auto_vacuum before
 * anything writes page 1, then writes page 1, so the file is keyed and recognisable at once
 * (an empty file would open with any password). For an existing file
 * the cipher is recognised from the plain header bytes (reserve 32: chacha20, 80: sqlcipher,
 * 0: aes256cbc), so only one KDF runs; it then proves the key by reading the schema.
 * opts may be NULL for defaults. While it proves the key, a lock another connection holds
 * is waited for up to opts->busy_timeout_ms. On a lower VFS without shared memory
 * (mv_vfs_register) it sets PRAGMA locking_mode=EXCLUSIVE before anything reads the file and
 * checks that it took; the connection then holds the file until it closes, and another open
 * gets MV_EBUSY.
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

/* Maps an SQLite result code (primary or extended) to an MV_* code. SQLITE_CANTOPEN maps
 * to MV_EIO: SQLite gives it for any file it cannot open (a WAL, a journal, a temporary
 * file), so "no such file" is for the caller to find out before it opens one. */
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
    uint32_t header_count_max;   /* header fields in one message; default 10000 */
    uint32_t header_size_max;    /* bytes of one header field, folded; default 1 MiB */
    uint32_t keywords_max;       /* keywords on one message; default 256 */
    uint32_t keyword_size_max;   /* bytes of one keyword; default 128 */
    uint32_t mailbox_name_max;   /* bytes of a mailbox name; default 512 */
    uint32_t mailboxes_max;      /* mailboxes in a store; default 10000 */
    uint32_t search_results_max; /* rows one search returns; default 100000 */
    /* distinct keywords a mailbox defines (every keyword ever set on one of its messages,
     * also by an append, copy or move into it: IMAP's FLAGS lists them all); default 1000 */
    uint32_t mailbox_keywords_max;
    /* names subscribed (RFC 3501 6.3.6: a name need not exist); default 10000 */
    uint32_t subscriptions_max;
};
#define MV_LIMITS_DEFAULT                                                                          \
    {                                                                                              \
        64u << 20, 10000, 1u << 20, 256, 128, 512, 10000, 100000, 1000, 10000                      \
    }

#define MV_STORE_CREATE   0x01 /* mv_store_open: create if missing (mv_store_init does more) */
#define MV_STORE_READONLY 0x02 /* open read-only: no writes, no queue drain */
/* mv_store_open: leave the sealed delivery queue for mv_queue_drain() (a server that drains
 * it in steps after the login, so the login does not wait for a long queue) */
#define MV_STORE_DRAIN_LATER 0x04

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
 * it). Returns MV_OK, MV_EEXISTS, MV_EINVAL (bad address, empty password), MV_EBUSY, MV_EIO,
 * MV_ENOMEM. On failure no store file is left behind (the domain's directories, shared with
 * other stores, may remain). The schema and the mailboxes are one transaction: an init killed
 * after it leaves a store that opens (mv_store_open() makes a missing key pair); one killed
 * before leaves a file that mv_store_open() refuses with MV_ECORRUPT and a message saying so
 * (remove it and init again). The store's lock is held exclusively from before the file is
 * created until the store is whole, so an mv_store_open() that finds the file meanwhile
 * waits for the init (up to 5 s) and opens the finished store; MV_EBUSY if a restore or
 * password change of the address holds the lock that long. errmsg as for
 * mv_address_normalize(). */
MV_API MV_MUST_CHECK int mv_store_init(const char *address,
                                       const void *password,
                                       size_t password_len,
                                       const struct mv_store_options *opts,
                                       char *errmsg,
                                       size_t errmsg_size);

/* Opens the store of address with password. Holds the store's lock file shared for the
 * handle's lifetime (waiting up to 5 s while an init, restore or password change holds it,
 * then MV_EBUSY). Applies the production profile (WAL,
 * secure_delete, auto_vacuum FULL, busy_timeout 30000, synchronous NORMAL, foreign keys,
 * temp files on disk in the store's tmp/ directory, ...), reads every setting back and
 * refuses to continue if one did not take, migrates the schema in one transaction, and
 * moves queued deliveries into the store (each queue entry removed only after its commit;
 * as mv_queue_drain() with max 0), unless flags has MV_STORE_DRAIN_LATER.
 * *out is the handle, closed with mv_store_close(). Returns MV_OK, MV_ENOTFOUND (no store),
 * MV_EAUTH (wrong password), MV_ECORRUPT, MV_EINVAL, MV_EBUSY, MV_EIO, MV_ENOMEM, MV_EMOVED
 * (released from this node, see mv_store_release; read-only opens are allowed); on failure
 * *out is NULL and errmsg (if not NULL) says why. */
MV_API MV_MUST_CHECK int mv_store_open(const char *address,
                                       const void *password,
                                       size_t password_len,
                                       const struct mv_store_options *opts,
                                       mv_store **out,
                                       char *errmsg,
                                       size_t errmsg_size);

/* A second handle on the store of an open handle, for reads on another thread while store
 * writes (a server answers FETCH and SEARCH there while a commit of the same user waits for
 * its fsync). It shares the key of store (no key derivation, no password), takes its own
 * shared lock and its own SQLite connection with the same profile and page cache size, and
 * migrates nothing (store did). Reads through it see every commit made before each read
 * begins (WAL), so a caller that reads after its own write returned sees that write. Writes
 * through it are allowed and serialise with store's in SQLite's locking (busy_timeout),
 * but it is meant for reads. Close it with mv_store_close(), before or after store. Not
 * thread-safe itself: one thread at a time per handle, as for every handle.
 * Returns MV_OK with *out, MV_EINVAL (store NULL), MV_ENOMEM, MV_EBUSY, MV_EIO; on failure
 * *out is NULL and mv_store_errmsg(store) says why. */
MV_API MV_MUST_CHECK int mv_store_open_twin(mv_store *store, mv_store **out);

/* ---- Which node serves a store ------------------------------------------------------- */
/* Where a server (mailvaultd) serving the stores under a root listens for control requests
 * (who, kick, release, adopt; docs/CONTROL.md) unless configured elsewhere:
 * ROOT/MV_CONTROL_SOCKET_NAME. Names in the root that begin with '.' are never domains. */
#define MV_CONTROL_SOCKET_NAME ".mailvaultd.sock"

/*
 * Moving a user to another node copies the store; mail committed on the old node after the
 * copy would be lost. mv_store_release() fences the store on this node: it waits (up to
 * wait_ms) until no handle has the store open, anywhere, then writes a marker beside it
 * (ROOT/<domain>/<localpart>.released, durable, kept across restarts). From then on every
 * writable mv_store_open() and every mv_deliver_sealed() of the store fails with MV_EMOVED
 * (a server answers LMTP 4xx and IMAP NO [UNAVAILABLE], so the proxy or MTA tries the new
 * node); read-only opens still work. Releasing a released store is MV_OK and keeps the first
 * marker. note (may be NULL; one line, at most 200 bytes kept) is recorded in the marker.
 * mv_store_adopt() removes the marker: the store is served here again.
 * Both return MV_OK, MV_ENOTFOUND (no store), MV_EBUSY (still open after wait_ms, or 5 s for
 * adopt: the message says so), MV_EINVAL, MV_EIO, MV_ENOSPC; errmsg may be NULL.
 * mv_store_released() returns 1 if the store is released, 0 if not, or a negative MV_E*. */
MV_API MV_MUST_CHECK int mv_store_release(const char *address,
                                          const struct mv_store_options *opts,
                                          const char *note,
                                          uint32_t wait_ms,
                                          char *errmsg,
                                          size_t errmsg_size);
MV_API MV_MUST_CHECK int mv_store_adopt(const char *address,
                                        const struct mv_store_options *opts,
                                        char *errmsg,
                                        size_t errmsg_size);
MV_API int mv_store_released(const char *address, const struct mv_store_options *opts);

/* What mv_store_export() wrote or mv_store_import() placed. */
struct mv_store_archive_info {
    uint64_t files;         /* entries besides the manifest: database, WAL, key, queue */
    uint64_t size_bytes;    /* their bytes */
    uint64_t queue_entries; /* sealed deliveries not yet moved into the store */
    uint64_t wal_frames;    /* committed WAL frames carried along (0: none) */
    int released;           /* the store was released (mv_store_release) when exported */
};

/* Writes everything the mail of address consists of, without the password, to a new
 * archive at archive_path (a tar file: database, WAL, public key, sealed queue, and a
 * manifest with each file's size and SHA-256; format in docs/SCALEOUT.md). It holds the
 * store's lock exclusively while it copies, waiting up to wait_ms for every handle to close:
 * release the store first (mv_store_release) so nothing is accepted here after the copy.
 * The store is checked as a keyless backup is before it is written; archive_path must not
 * exist (it is never replaced: the archive is renamed there without overwriting).
 * Returns MV_OK, MV_ENOTFOUND (no store), MV_EEXISTS (archive_path exists), MV_EBUSY (the
 * store is open), MV_ECORRUPT (the store fails the checks), MV_ELIMIT (queue too long),
 * MV_EIO, MV_ENOSPC, MV_ENOMEM, MV_EINVAL. info_out and errmsg may be NULL. */
MV_API MV_MUST_CHECK int mv_store_export(const char *address,
                                         const struct mv_store_options *opts,
                                         const char *archive_path,
                                         uint32_t wait_ms,
                                         struct mv_store_archive_info *info_out,
                                         char *errmsg,
                                         size_t errmsg_size);

/* As mv_store_export(), but streams the archive into the open descriptor fd (a pipe, a
 * socket, or a file the caller made), for a move in one pass: nothing is written beside the
 * store, and fd is neither fsynced nor closed. The manifest is the last entry, so a stream
 * cut short anywhere is refused by mv_store_import_fd(). Returns as mv_store_export() (no
 * MV_EEXISTS; MV_EIO also when the reader went away: ignore SIGPIPE, or that ends the
 * process). A pipe's buffer is widened to 1 MiB where the system allows. */
MV_API MV_MUST_CHECK int mv_store_export_fd(const char *address,
                                            const struct mv_store_options *opts,
                                            int fd,
                                            uint32_t wait_ms,
                                            struct mv_store_archive_info *info_out,
                                            char *errmsg,
                                            size_t errmsg_size);

/* Places the store of address from an archive written by mv_store_export(): reads only the
 * expected entries into a staging directory beside the store, checks them against the
 * manifest (sizes, SHA-256, nothing missing or extra, the same address) and the database and
 * WAL as a keyless backup is checked, then moves them into place (the database last) and
 * removes a release marker: the store is served on this node. Never overwrites: any file of
 * a store of address already here is MV_EEXISTS. On failure nothing is left of the import.
 * Returns MV_OK, MV_EEXISTS, MV_ENOTFOUND (no archive), MV_ECORRUPT (not a store archive,
 * or damaged: the message says which file), MV_EINVAL (an archive of another address),
 * MV_EBUSY, MV_EIO, MV_ENOSPC, MV_ENOMEM. info_out and errmsg may be NULL. */
MV_API MV_MUST_CHECK int mv_store_import(const char *address,
                                         const struct mv_store_options *opts,
                                         const char *archive_path,
                                         struct mv_store_archive_info *info_out,
                                         char *errmsg,
                                         size_t errmsg_size);

/* As mv_store_import(), but reads the archive from the open descriptor fd (a pipe from
 * mv_store_export_fd() on another node) until its end. Everything is staged and checked as
 * from a file before anything is placed: a stream that ends early, is damaged, or holds the
 * store of another address leaves nothing. fd is not closed. */
MV_API MV_MUST_CHECK int mv_store_import_fd(const char *address,
                                            const struct mv_store_options *opts,
                                            int fd,
                                            struct mv_store_archive_info *info_out,
                                            char *errmsg,
                                            size_t errmsg_size);

/* Closes the store (running PRAGMA optimize first) and sets *store to NULL. NULL is fine. */
MV_API void mv_store_close(mv_store **store);

/* The detail of the last error on this handle ("" if none); after a successful open it may
 * hold a warning from the queue drain (a rejected or oversized queue file, a rewritten
 * public key). Owned by the store. */
MV_API const char *mv_store_errmsg(const mv_store *store);

/* 1 if the detail of the last error is internal text: SQLite's wording or a statement
 * ("BEGIN IMMEDIATE: database is locked"), a file path, or the message of an I/O,
 * corruption or internal failure. A server logs such a detail and shows its user a generic
 * text; 0 if the detail was written for people (a missing mailbox, a limit and its value).
 * 1 for NULL. */
MV_API int mv_store_errmsg_internal(const mv_store *store);

/* How many times this handle replaced its SQLite connection. After an I/O error, a full
 * disk, a damaged page or a failed allocation, SQLite rolls the transaction back, but state
 * kept in memory (an extension's caches, such as FTS5's structure record) may no longer
 * match the file; the handle therefore opens a new connection on the same file with the same
 * key (no password needed, no key derivation) at the start of its next transaction, and
 * closes the old one. A server that keeps handles open across failures needs nothing more;
 * the count is for its logs and tests. If opening the new connection fails, that operation
 * fails (MV_EIO and a message saying so) and the next one tries again. NULL gives 0. */
MV_API uint32_t mv_store_reconnects(const mv_store *store);

/* Process-wide SQLite settings for a server (mailvaultd calls it first thing): turns off
 * SQLite's memory statistics, whose global mutex every SQLite allocation takes (Debian's
 * SQLite has no lookaside, so that is every row and statement step, on every thread).
 * sqlite3_memory_used() then reports 0. Keeps large BLOBs (messages' bytes) from pushing
 * out of every connection's page cache the pages each lookup needs: of a BLOB read along
 * its chain of pages only the first few stay cached; and keeps the interior pages of every
 * B-tree (up to half of each cache) while leaves come and go; and keeps statement journals
 * in memory up to 128 KiB (SQLite's default: 64 KiB, then an encrypted temp file for the rest
 * of the transaction), so a transaction of many appends does not write each statement's
 * journal through a temp file. Also prepares the MIME parser
 * (GMime's types) on the calling thread, before the threads that parse mail exist. Call before
 * anything opens a database. Returns MV_OK, or MV_EBUSY if SQLite was already initialised (its
 * setting unchanged; harmless). */
MV_API int mv_server_tune(void);

/* A read snapshot: every read call on the handle until mv_store_read_end() sees the same
 * state of the store and shares one SQLite read transaction, instead of beginning and ending
 * one per call (each costs file locks on the WAL index). For a batch of reads, such as the
 * messages of one IMAP FETCH. A call that changes the store fails with MV_EINVAL while the
 * snapshot is open; keep snapshots short, since a reader holds back WAL checkpoints.
 * Returns MV_OK, MV_EINVAL (a transaction is already open), MV_EBUSY, MV_EIO. */
MV_API MV_MUST_CHECK int mv_store_read_begin(mv_store *store);
/* Ends the snapshot (nothing if none is open). */
MV_API void mv_store_read_end(mv_store *store);

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
    uint64_t size_bytes;    /* logical: sum of message sizes */
    uint64_t stored_bytes;  /* physical: the distinct bodies and attachments its messages use,
                               as stored (compressed), each counted once in this mailbox; a
                               copy in another mailbox counts there too (mv_store_stats()
                               counts it once for the store) */
    uint32_t deleted;       /* messages flagged \Deleted (what an expunge would remove) */
    uint64_t deleted_bytes; /* logical: the sum of their sizes */
};

/* The fields of struct mv_mailbox_info that cost more than reading the mailbox's row, for
 * mv_mailbox_get_fields() and mv_mailbox_list_begin_fields(); a field not asked for is 0.
 * MV_MAILBOX_STORED_BYTES walks the mailbox's messages (time grows with the mailbox);
 * MV_MAILBOX_DELETED reads only its \Deleted messages, through an index that holds nothing
 * else (time grows with the number flagged \Deleted, not with the mailbox). */
#define MV_MAILBOX_STORED_BYTES 0x01u /* stored_bytes */
#define MV_MAILBOX_DELETED      0x02u /* deleted, deleted_bytes */
#define MV_MAILBOX_FIELDS_ALL   0x03u

/* Mailbox names are UTF-8, 1..limits.mailbox_name_max bytes, '/' as hierarchy separator, no
 * control characters, no empty levels. INBOX is case-insensitive and cannot be deleted or
 * renamed away. A rename carries the children along, all or nothing: MV_ELIMIT if a child's
 * new name would exceed mailbox_name_max, MV_EEXISTS if one is taken. Each returns MV_OK,
 * MV_EINVAL, MV_EEXISTS, MV_ENOTFOUND, MV_ELIMIT, MV_EBUSY or MV_EIO. */
MV_API MV_MUST_CHECK int
mv_mailbox_create(mv_store *store, const char *name, const char *special_use);
MV_API MV_MUST_CHECK int mv_mailbox_rename(mv_store *store, const char *from, const char *to);
/* Deletes the mailbox and its messages (reference counts dropped, change log kept); the
 * bodies no other message uses wait for mv_store_purge(), as after mv_mailbox_expunge(). */
MV_API MV_MUST_CHECK int mv_mailbox_delete(mv_store *store, const char *name);
/* Subscriptions are a set of names of their own (RFC 3501 6.3.6-6.3.9): a name may be
 * subscribed whether or not a mailbox has it, deleting a mailbox leaves its subscription,
 * a rename carries the subscriptions of the mailbox and its children along, and creating
 * a mailbox does not subscribe it (a new store's default mailboxes are subscribed).
 * mv_mailbox_subscribe() adds (on) or removes the name (a valid mailbox name; "inbox" is
 * INBOX); either is MV_OK when already so. MV_OK, MV_EINVAL (bad name, read-only store),
 * MV_ELIMIT (a new name while limits.subscriptions_max are subscribed), MV_EBUSY or MV_EIO.
 * mv_mailbox_info.subscribed says whether a mailbox's name is in it. */
MV_API MV_MUST_CHECK int mv_mailbox_subscribe(mv_store *store, const char *name, int on);
/* Every subscribed name, in byte order: *names is an array of *count strings and a NULL, in
 * one malloc'd block (free with mv_free). MV_OK, MV_EINVAL, MV_ENOMEM, MV_EBUSY or MV_EIO. */
MV_API MV_MUST_CHECK int mv_subscription_list(mv_store *store, char ***names, size_t *count);

/* \Recent (RFC 3501 2.3.2): each message is recent in exactly one session, the first to
 * select its mailbox after it arrived. The store keeps, per mailbox, the first UID that no
 * session has claimed yet. mv_mailbox_recent_claim() claims the UIDs below up_to (the end of
 * the caller's view of the mailbox: its highest UID + 1): *first is then the first UID of the
 * claim, so the caller's recent messages are those with *first <= uid < up_to (none if
 * *first >= up_to). A claim is one write transaction (none when there is nothing to claim),
 * so concurrent sessions, threads and processes never claim a UID twice. mv_mailbox_recent()
 * reads without claiming: *first, and *count, the messages at or above it (STATUS RECENT).
 * MV_OK, MV_ENOTFOUND, MV_EINVAL (NULL argument, read-only store for a claim), MV_EBUSY or
 * MV_EIO. */
MV_API MV_MUST_CHECK int
mv_mailbox_recent_claim(mv_store *store, const char *mailbox, uint32_t up_to, uint32_t *first);
MV_API MV_MUST_CHECK int
mv_mailbox_recent(mv_store *store, const char *mailbox, uint32_t *first, uint32_t *count);
/* A saved view (store_view_save.c): an application that keeps a mailbox's listing in
 * memory (mailvaultd's SELECT view) saves it in the store as opaque bytes, tagged with the
 * mailbox's UIDVALIDITY and the highest modseq they reflect, and after a restart loads it
 * instead of listing the mailbox; mv_message_list_begin(changed_since = modseq) and
 * mv_message_expunged_since(modseq) then bring it up to date for the cost of the changes
 * since. One per mailbox: a save replaces it (in two commits: the old bytes go first, so the
 * new ones lie in ascending pages, which a cold read reads ahead; a save refused by its checks
 * keeps the old, one that fails between the commits leaves none); deleting the mailbox drops
 * it. The store never interprets the bytes (a reader must check what it decodes).
 * mv_mailbox_view_save: MV_OK, MV_ENOTFOUND (no such mailbox, or its UIDVALIDITY is not
 * uidvalidity: made again since), MV_EINVAL (NULL argument, read-only store, a modseq above
 * the mailbox's highest), MV_ELIMIT (len above MV_VIEW_SAVE_MAX), MV_EBUSY, MV_EIO.
 * mv_mailbox_view_load: MV_OK with *data malloc'd (free with mv_free) and *len, *uidvalidity,
 * *modseq set, or *data NULL and *len 0 when none is saved; MV_ENOTFOUND (mailbox),
 * MV_EINVAL, MV_ENOMEM, MV_ECORRUPT (a stored row that is no saved view: over
 * MV_VIEW_SAVE_MAX, or not bytes), MV_EBUSY, MV_EIO. The bytes are read into *data directly,
 * so a load holds one copy of them. */
#define MV_VIEW_SAVE_MAX (256u << 20) /* bytes of one saved view */
MV_API MV_MUST_CHECK int mv_mailbox_view_save(mv_store *store,
                                              const char *mailbox,
                                              uint32_t uidvalidity,
                                              uint64_t modseq,
                                              const void *data,
                                              size_t len);
MV_API MV_MUST_CHECK int mv_mailbox_view_load(mv_store *store,
                                              const char *mailbox,
                                              uint32_t *uidvalidity,
                                              uint64_t *modseq,
                                              void **data,
                                              size_t *len);
/* mv_mailbox_view_read: the saved view in pieces, for a reader that decodes as the bytes
 * come instead of holding all of them (mailvaultd: ~10 MB at 1,000,000 messages, a fresh
 * buffer whose pages cost more to fault in than the decode). *uidvalidity, *modseq and *len
 * are set before the first call of piece(arg, bytes, n), which then gets the bytes in order,
 * up to MV_VIEW_READ_PIECE at a time (bytes valid for that call only); a piece() that returns
 * anything but MV_OK ends the read, which returns that. With none saved: MV_OK and *len 0,
 * piece() never called. Otherwise the return codes of mv_mailbox_view_load, and MV_ENOMEM. */
#define MV_VIEW_READ_PIECE (64u << 10)
MV_API MV_MUST_CHECK int mv_mailbox_view_read(mv_store *store,
                                              const char *mailbox,
                                              uint32_t *uidvalidity,
                                              uint64_t *modseq,
                                              size_t *len,
                                              int (*piece)(void *arg, const void *bytes, size_t n),
                                              void *arg);
/* MAILBOX MEMOS: byte strings an application derives from a mailbox's messages and keeps
 * across runs, so that it need not read every message again to make them (mailvaultd keeps
 * the sent days of a mailbox's messages so, for SEARCH SENT*, and their Message-ID fields,
 * for SEARCH HEADER Message-ID). A mailbox has
 * MV_MAILBOX_MEMO_SLOTS slots of one memo each, named by the mailbox's UIDVALIDITY (the store
 * gives each once, so it names one mailbox for the store's life, through renames; a mailbox
 * deleted and made again under its name has a new one and none of the old memos). Deleting
 * the mailbox deletes them. The store never reads a memo's bytes and does not keep them up to
 * date: a memo says what the application derived when it wrote it, and the application tags
 * and checks its bytes itself (a version in the first bytes; what it covers). A memo is at
 * most MV_MAILBOX_MEMO_MAX bytes and at most MV_MAILBOX_MEMO_FLOOR +
 * MV_MAILBOX_MEMO_PER_MESSAGE bytes for each message the mailbox has when it is written
 * (quotas count messages: what commands make the server keep stays within that).
 * Inside the encrypted file like everything else. */
#define MV_MAILBOX_MEMO_SLOTS       4u
#define MV_MAILBOX_MEMO_MAX         (16u << 20) /* bytes of one mailbox memo */
#define MV_MAILBOX_MEMO_FLOOR       4096u       /* bytes a memo may have whatever the count */
#define MV_MAILBOX_MEMO_PER_MESSAGE 128u        /* and more bytes for each message */
/* Keeps data[0..len) in slot of the mailbox whose UIDVALIDITY is uidvalidity, replacing what
 * the slot had, in one write transaction. Returns MV_OK, MV_ENOTFOUND (no mailbox has that
 * UIDVALIDITY), MV_EINVAL (NULL store, data NULL with len > 0, slot out of range, read-only
 * store), MV_ELIMIT (over either bound above: nothing kept, the memo before stays), MV_EBUSY,
 * MV_EIO, MV_ENOSPC, MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_mailbox_memo_put(
    mv_store *store, uint32_t uidvalidity, uint32_t slot, const void *data, size_t len);
/* The memo in slot of the mailbox whose UIDVALIDITY is uidvalidity: MV_OK with *data
 * malloc'd (free with mv_free; never NULL on MV_OK) and *len (0 for an empty memo), read
 * from one snapshot (inside mv_store_read_begin(), that transaction's) through a BLOB handle
 * straight into *data; MV_ENOTFOUND when there is none (none kept, or no such mailbox);
 * MV_EINVAL (NULL argument, slot out of range), MV_ECORRUPT (a stored row that is no memo:
 * over MV_MAILBOX_MEMO_MAX, or not bytes), MV_ENOMEM, MV_EBUSY, MV_EIO. */
MV_API MV_MUST_CHECK int
mv_mailbox_memo_get(mv_store *store, uint32_t uidvalidity, uint32_t slot, void **data, size_t *len);
/* Fills *info for one mailbox, every field (strings owned by the store, valid until the
 * next call on it). Returns MV_OK, MV_ENOTFOUND, MV_ENOMEM, MV_EBUSY or MV_EIO. */
MV_API MV_MUST_CHECK int
mv_mailbox_get(mv_store *store, const char *name, struct mv_mailbox_info *info);
/* As mv_mailbox_get() but with none of the MV_MAILBOX_* fields (left 0), in constant time:
 * every other field is a column of the mailbox's row (counts and size are kept by the store
 * as messages come and go). For IMAP SELECT, STATUS, NOOP. Same return codes. */
MV_API MV_MUST_CHECK int
mv_mailbox_status(mv_store *store, const char *name, struct mv_mailbox_info *info);
/* How many more keywords mailbox may define: limits.mailbox_keywords_max less the keywords it
 * defines (every keyword ever set on one of its messages), 0 at or over the bound, in *room.
 * For IMAP SELECT's PERMANENTFLAGS, which offers new keywords ("\*") only while there is
 * room. One count over the mailbox's keywords (at most the bound's rows). Returns MV_OK,
 * MV_ENOTFOUND, MV_EINVAL, MV_EBUSY or MV_EIO. */
MV_API MV_MUST_CHECK int
mv_mailbox_keyword_room(mv_store *store, const char *mailbox, uint32_t *room);
/* As mv_mailbox_status() plus the MV_MAILBOX_* fields in fields (others left 0): 0 is
 * mv_mailbox_status(), MV_MAILBOX_FIELDS_ALL mv_mailbox_get(). Same return codes, and
 * MV_EINVAL for an unknown bit in fields. */
MV_API MV_MUST_CHECK int mv_mailbox_get_fields(mv_store *store,
                                               const char *name,
                                               unsigned fields,
                                               struct mv_mailbox_info *info);

/* Iterates the mailboxes in name order: next returns 1 with *info filled (strings valid
 * until the next call), 0 at the end, or a negative MV_E* code. mv_mailbox_list_begin()
 * fills every field, so a listing costs a walk of every mailbox's messages (for
 * stored_bytes); mv_mailbox_list_begin_fields() fills the row's fields plus the MV_MAILBOX_*
 * ones in fields, and with 0 reads the mailboxes table alone, however many messages there
 * are (for IMAP LIST). The iterator holds its own statement: other calls on the store may
 * come between next calls. begin returns MV_OK, MV_EINVAL (an unknown bit in fields),
 * MV_ENOMEM, MV_EBUSY or MV_EIO; end takes NULL and sets *iter to NULL. */
typedef struct mv_mailbox_iter mv_mailbox_iter;
MV_API MV_MUST_CHECK int mv_mailbox_list_begin(mv_store *store, mv_mailbox_iter **iter);
MV_API MV_MUST_CHECK int
mv_mailbox_list_begin_fields(mv_store *store, unsigned fields, mv_mailbox_iter **iter);
/* As mv_mailbox_list_begin_fields(), the mailboxes whose names n have from <= n < below in
 * byte order (UTF-8 bytes: the listing's order), found through the names' index: a LIST
 * whose patterns share a head ("Archive/2019/%") reads the mailboxes under it, not every
 * mailbox. below NULL: no upper bound ("" to NULL is every mailbox). The bounds are copied.
 * MV_EINVAL also for a NULL from. */
MV_API MV_MUST_CHECK int mv_mailbox_list_begin_range(
    mv_store *store, unsigned fields, const char *from, const char *below, mv_mailbox_iter **iter);
/* Moves a range listing's lower bound to to: the next mv_mailbox_list_next returns the first
 * mailbox with to <= name (< below), one search of the names' index whatever lies between
 * (a LIST "%" passes over a folder's thousands of descendants once it knows the folder has
 * children). A to at or before a name already returned returns names again. The rest of the
 * listing is read afresh: a mailbox made or deleted meanwhile may or may not be in it. The
 * name is copied. MV_OK; MV_EINVAL (NULL, an iterator of mv_mailbox_list_begin or _fields);
 * MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_mailbox_list_skip(mv_mailbox_iter *iter, const char *to);
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
 * message is refused (MV_EINVAL). Durable when it returns MV_OK: its commit syncs the WAL
 * (synchronous=FULL for this transaction; the profile's NORMAL, kept for other changes, may
 * lose the last commits on power loss), so a server may acknowledge the mail at once; on a
 * handle set by mv_store_sync_later(), only after mv_store_sync(). Its
 * full-text row is built in the same transaction, unless mv_store_index_later() says later.
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

/* With on nonzero, the appends of this handle (mv_message_append(); a drain of the sealed
 * queue syncs as before) commit without syncing the WAL, and mv_store_sync() makes them
 * durable: a server can then wait for the disk on another thread than the one that runs its
 * commands, and acknowledges the mail when mv_store_sync() returned MV_OK. Until then the
 * message is visible to other connections but may be lost on power loss, as one never
 * acknowledged. mv_store_close() syncs what is owed. With on 0, what is owed is synced first
 * (its failure is returned and the setting stays). Returns MV_OK, MV_EINVAL (NULL or
 * read-only handle), MV_EIO. */
MV_API MV_MUST_CHECK int mv_store_sync_later(mv_store *store, int on);

/* Syncs the WAL if an append of this handle (mv_store_sync_later()) left it unsynced; at
 * once if none did. May run on another thread than the appends, as long as nothing else uses
 * the handle meanwhile. Returns MV_OK (every append of the handle so far is durable),
 * MV_EINVAL (NULL), MV_EIO (the disk refused: those appends are not known to be durable and
 * stay owed; their messages are in the store, so one acknowledged as failed may be there
 * twice after a retry, never lost after an MV_OK). */
MV_API MV_MUST_CHECK int mv_store_sync(mv_store *store);

/* 1 if an append of store waits for mv_store_sync(), else 0 (also for NULL). */
MV_API int mv_store_sync_owed(const mv_store *store);

/* The length of msg (len bytes) with every LF not preceded by CR made CRLF, as Internet
 * mail (RFC 5322 2.1) and IMAP (RFC 3501 4.3) want line ends; bare CRs stay. If out is not
 * NULL and out_cap is at least that length, the converted bytes are written to out (which
 * must not overlap msg); otherwise nothing is written. Equal to len: nothing to convert.
 * `mailvault import` and `mailvault deliver` store what this writes; mv_message_append()
 * stores bytes as given. Never fails; len must be below SIZE_MAX / 2. */
MV_API size_t mv_message_crlf(const void *msg, size_t len, void *out, size_t out_cap);

/* Returns in *raw_out (malloc'd; free with mv_free) the exact bytes that were appended, and
 * their length in *len_out. MV_OK, MV_ENOTFOUND, MV_ECORRUPT, MV_EIO, MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_message_fetch(
    mv_store *store, const char *mailbox, uint32_t uid, void **raw_out, size_t *len_out);

/* mv_message_fetch() into memory of the caller's, without a copy of the message of the
 * library's own (a server writes it straight into its output): place(place_arg, size) is
 * called once, when the message's size is known, and returns where the size bytes go (NULL:
 * MV_ENOMEM); on MV_OK they hold the message and *len_out is size. On any failure after the
 * call their content is undefined (the caller drops them); MV_ENOTFOUND never calls place.
 * With a cipher that authenticates every page (chacha20, sqlcipher) neither function checks
 * the message's recorded SHA-256 (every byte read is authenticated; `mailvault check`
 * verifies it); with aes256cbc both do. MV_OK, MV_ENOTFOUND, MV_ECORRUPT, MV_EIO, MV_ENOMEM,
 * MV_EINVAL (no place). */
MV_API MV_MUST_CHECK int mv_message_fetch_into(mv_store *store,
                                               const char *mailbox,
                                               uint32_t uid,
                                               void *(*place)(void *arg, size_t size),
                                               void *place_arg,
                                               size_t *len_out);

/* Where a caller that keeps a mailbox's listing (mv_message_list_next) says it last saw a
 * message: the listing's body_key and size for the UID, and the mailbox's UIDVALIDITY and
 * highest modseq (mv_mailbox_status) at which the caller's listing was up to date and still
 * held the message. */
struct mv_message_key {
    uint64_t body_key;
    uint64_t size;
    uint64_t modseq;
    uint32_t uidvalidity;
};

/* mv_message_fetch_into() of message uid, found through key instead of the UID: while the
 * mailbox is as the caller last saw it (the same UIDVALIDITY and highest modseq: nothing
 * was expunged, moved or changed since), the message is still there with the body key
 * names, and its bytes are read without the UID index and the body's own row (a random
 * page read fewer each from a cold file; issue 13). Otherwise (the mailbox changed since,
 * key NULL or its body_key 0, or a store whose pages are not authenticated, where the
 * recorded SHA-256 must be checked) it is exactly mv_message_fetch_into(). A key that does
 * not match the message it names (a caller's mistake) gives MV_ECORRUPT or the other
 * message's bytes, never memory errors: sizes and frames are checked as on every read.
 * Returns what mv_message_fetch_into() returns. */
MV_API MV_MUST_CHECK int mv_message_fetch_keyed_into(mv_store *store,
                                                     const char *mailbox,
                                                     uint32_t uid,
                                                     const struct mv_message_key *key,
                                                     void *(*place)(void *arg, size_t size),
                                                     void *place_arg,
                                                     size_t *len_out);

/* One large leaf part (MIME) a message's skeleton is without (mv_message_skeleton_keyed):
 * parts whose content is 128 KiB or more are stored apart from the rest of the message.
 * Counted over the part's bytes exactly as they are in the message, when it was stored. */
struct mv_message_cut {
    uint64_t position; /* offset in the skeleton where the part's bytes were (ascending) */
    uint64_t size;     /* the part's bytes */
    uint64_t lines;    /* its LF bytes */
    uint64_t marks;    /* its lines that begin with "--" or that begin with neither SP nor HTAB
                        * and hold a ':' (what a MIME parser may take for a boundary or a
                        * header field; the last line counts without its LF too) */
};

/* The skeleton of the message key names (a listing's key, as for mv_message_fetch_keyed_into):
 * its bytes without the large parts stored apart, which are not read
 * (issue 13: a structure description, FETCH BODYSTRUCTURE, needs their sizes and line counts,
 * not their bytes, which were most of what its first FETCH read and scanned). place as for
 * mv_message_fetch_into(), called with the skeleton's size; *len_out gets that size, cuts
 * (cuts_max entries) what was cut where and *cut_count how many. The skeleton plus the cut
 * parts' sizes is key->size. Nothing falls back to a read by UID here. MV_OK; MV_ENOTFOUND (the
 * mailbox changed since key, or the message is gone); MV_EUNSUPPORTED (nothing to gain or prove
 * this way: key NULL or without a body key, a store whose pages are not authenticated (the
 * message's SHA-256 needs every byte), a part stored before schema version 15, which did not count
 * its lines, or more cuts than cuts_max); then the caller reads the whole message. MV_ECORRUPT
 * (parts that do not add up), MV_EIO, MV_ENOMEM, MV_EINVAL (NULL argument). */
MV_API MV_MUST_CHECK int mv_message_skeleton_keyed(mv_store *store,
                                                   const char *mailbox,
                                                   const struct mv_message_key *key,
                                                   void *(*place)(void *arg, size_t size),
                                                   void *place_arg,
                                                   size_t *len_out,
                                                   struct mv_message_cut *cuts,
                                                   size_t cuts_max,
                                                   size_t *cut_count);

/* The first bytes of the message key names (as for mv_message_skeleton_keyed), at least want
 * of them (all, if the message is shorter; want 0 is taken as 1), read and unpacked no
 * further than that needs: a message stored since the lead frame (issue 13) keeps its
 * header, the next 4 KiB and the rest as three units, so a client's preview (BODY[TEXT]<0.512>
 * of a long message) unpacks the first two alone. place as for mv_message_fetch_into(),
 * called with the number of bytes given, which *len_out gets (want or more; the message's
 * first *len_out bytes, exactly). MV_OK; MV_ENOTFOUND (the mailbox changed since key, or the
 * message is gone); MV_EUNSUPPORTED (key NULL or without a body key, a store whose pages are
 * not authenticated, a message with parts stored apart: read its skeleton or the whole
 * message); MV_ECORRUPT, MV_EIO, MV_ENOMEM, MV_EINVAL (NULL argument). */
MV_API MV_MUST_CHECK int mv_message_prefix_keyed(mv_store *store,
                                                 const char *mailbox,
                                                 const struct mv_message_key *key,
                                                 size_t want,
                                                 void *(*place)(void *arg, size_t size),
                                                 void *place_arg,
                                                 size_t *len_out);

/* Tells store that the messages of keys (n body keys of a listing, as for
 * mv_message_fetch_keyed_into) are read next: the pages that hold their bodies' rows are
 * asked of the disk at once, without waiting for them, so that a file not in the page cache
 * costs about one disk wait for all of them instead of one each (issue 13: a FETCH of 50
 * random whole messages from an evicted file). It walks the bodies table's interior pages
 * (blocking for about one read per level of that tree, a few) and asks the kernel for each
 * row's leaf and the pages next to it (posix_fadvise). When those leaves were not in the
 * page cache it also reads them and asks for the longer overflow chains and the attachments
 * stored apart (a few reads more, all of each step at once). Only the first 1024 keys are used;
 * keys that are not body keys (0) are skipped. A hint: whatever it finds, it changes no
 * byte and no later read's result, and costs a few microseconds a message when the pages
 * are cached already. Returns MV_OK, or MV_EINVAL (store NULL, or keys NULL with n > 0). */
MV_API int mv_message_prefetch_keyed(mv_store *store, const struct mv_message_key *keys, size_t n);
/* mv_message_prefetch_keyed() for reads of the skeletons only (mv_message_skeleton_keyed):
 * the attachments' bytes, which those reads skip, are not asked for. */
MV_API int
mv_message_prefetch_skeletons(mv_store *store, const struct mv_message_key *keys, size_t n);
/* What mv_message_prefetch_headers() asks for: the bodies' own rows, which hold their headers'
 * copies and sent zones (mv_message_headers_keyed, mv_message_fetch_header,
 * mv_message_headers_each, mv_message_sent_each), and the rows of the fields the store keeps
 * of each header (sent date, Subject, From, To, Cc, Message-ID: mv_search_headers,
 * mv_message_sent_each). */
#define MV_PREFETCH_HEADER_COPY 1u
#define MV_PREFETCH_FIELDS      2u
/* mv_message_prefetch_keyed() for reads of headers only: the leaves of the rows `what` names
 * (MV_PREFETCH_* ORed), not the messages' stored bytes. *cold (if not NULL) is set to 1 when
 * the first key's leaf was not in the page cache before it was asked for (the file, or this
 * part of it, out of the cache: the caller's later keys are worth asking for too), else 0. */
MV_API int mv_message_prefetch_headers(
    mv_store *store, const struct mv_message_key *keys, size_t n, unsigned what, int *cold);

/* Like mv_message_fetch(), but only the message's header: its bytes up to and including the
 * first empty line (an empty first line -- an empty header block, RFC 5322 2.1 -- or the
 * first LF followed by LF or by CR LF), or the whole message if it has none, exactly as the first
 * *len_out bytes mv_message_fetch() returns. For the header fields of many messages (an IMAP
 * client's message list): a message stored by this version keeps its header apart (compressed
 * alone), so only the pages that hold it are read and decrypted; older ones are read whole and cut.
 * The whole message's SHA-256 is not checked here (it needs every byte); the cipher's page
 * authentication covers the bytes read. *raw_out is malloc'd (free with mv_free). MV_OK,
 * MV_ENOTFOUND, MV_ECORRUPT, MV_EIO, MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_message_fetch_header(
    mv_store *store, const char *mailbox, uint32_t uid, void **raw_out, size_t *len_out);

/* No usable Date header (mv_message_sent_each). */
#define MV_SENT_NONE INT64_MIN
/* Each message of mailbox with a UID from first_uid to last_uid (inclusive), in UID order:
 * each(arg, uid, sent), sent the date and time its Date header says as written there, in
 * seconds since the epoch (UTC plus the header's own zone: what IMAP's SENTSINCE, SENTBEFORE
 * and SENTON compare, RFC 3501 6.4.4, its zone disregarded), or MV_SENT_NONE when it has no
 * usable Date header. One statement over the range (a server keeps them for its sessions'
 * searches). each returns 0 to go on; anything else stops the walk and is returned. MV_OK,
 * MV_ENOTFOUND (no such mailbox), MV_EIO, MV_ENOMEM, MV_EINVAL (no function). */
MV_API MV_MUST_CHECK int mv_message_sent_each(mv_store *store,
                                              const char *mailbox,
                                              uint32_t first_uid,
                                              uint32_t last_uid,
                                              int (*each)(void *arg, uint32_t uid, int64_t sent),
                                              void *arg);

/* A message's header fields as the store keeps them (mv_message_fields_each): what an IMAP
 * server's SORT (RFC 5256) orders by. The strings are valid during the call only. */
struct mv_message_fields {
    uint32_t uid;
    int64_t sent_utc;    /* the Date header's date and time in UTC (its zone applied), seconds
                            since the epoch; MV_SENT_NONE without a usable Date header */
    const char *subject; /* decoded (RFC 2047, charset -> UTF-8) and unfolded; "" if none */
    const char *from;    /* the decoded address list as display text: "Name <a@b>, c@d" */
    const char *to;      /* (quoted as RFC 5322 wants where a name needs it); "" if none */
    const char *cc;
};
/* Each message of mailbox with a UID from first_uid to last_uid (inclusive), in UID order:
 * each(arg, fields), one statement over the range. A message whose field row is missing (a
 * damaged store) comes with empty strings and MV_SENT_NONE. each returns 0 to go on; anything
 * else stops the walk and is returned. Inside a read snapshot (mv_store_read_begin) the walk
 * sees it, else it takes one of its own. MV_OK, MV_ENOTFOUND (no such mailbox), MV_EIO,
 * MV_ENOMEM, MV_EINVAL (no function). */
MV_API MV_MUST_CHECK int mv_message_fields_each(mv_store *store,
                                                const char *mailbox,
                                                uint32_t first_uid,
                                                uint32_t last_uid,
                                                int (*each)(void *arg,
                                                            const struct mv_message_fields *fields),
                                                void *arg);

/* mv_message_fetch_header() of the messages keys name (n keys of one listing, as for
 * mv_message_fetch_keyed_into: the same UIDVALIDITY and modseq; at most MV_MEMO_BATCH_MAX),
 * read by their body keys: got(arg, index, raw, len) for each key whose header could be read
 * (index into keys; raw the header's bytes exactly as mv_message_fetch_header() returns them,
 * valid for that call only: the library wipes and frees them after it), in no particular order.
 * Keys with body_key 0 and messages whose rows are damaged are passed over: read those by UID,
 * which says what is wrong. While mailbox is as the listing saw it (the same UIDVALIDITY and
 * highest modseq) the headers are read without the UID index, by one scan of their bodies'
 * rows when those lie close together, as messages delivered or imported one after another do
 * (a client's message list of thousands of headers: a lookup a message was most of
 * mv_message_fetch_header()'s time). Returns MV_OK; MV_ENOTFOUND when the mailbox changed since
 * the listing or is gone (got() not called: ask by UID instead); what got() returned when it
 * was not MV_OK (the read ends there); MV_EINVAL (NULL argument, too many keys, keys of two
 * listings), MV_EBUSY, MV_EIO, MV_ENOMEM. Inside mv_store_read_begin() it reads that
 * transaction's snapshot. */
MV_API MV_MUST_CHECK int
mv_message_headers_keyed(mv_store *store,
                         const char *mailbox,
                         const struct mv_message_key *keys,
                         size_t n,
                         int (*got)(void *arg, size_t index, const void *raw, size_t len),
                         void *arg);

/* mv_message_fetch_header() of every message of mailbox with a UID from first_uid to last_uid
 * (inclusive), in UID order, read by one statement over the range instead of one lookup a
 * message (a server's SEARCH HEADER pass over a mailbox: ~1 us a message less here). For
 * each: each(arg, uid, raw, len), raw the header's bytes exactly as mv_message_fetch_header()
 * returns them, valid only during the call (the library wipes and frees them after it); each
 * returns 0 to go on, anything else stops the walk and is returned as it is. A message whose
 * rows are damaged (mv_message_fetch_header() would say MV_ECORRUPT) comes with raw NULL and
 * len 0, mv_store_errmsg() saying what is wrong, and the walk goes on. Inside a read snapshot
 * (mv_store_read_begin) the walk sees it, else it takes one of its own. MV_OK, MV_ENOTFOUND
 * (no such mailbox), MV_EIO, MV_ENOMEM, MV_EINVAL (no function), or each's value. */
MV_API MV_MUST_CHECK int
mv_message_headers_each(mv_store *store,
                        const char *mailbox,
                        uint32_t first_uid,
                        uint32_t last_uid,
                        int (*each)(void *arg, uint32_t uid, const void *raw, size_t len),
                        void *arg);

/* The rule above as a function: the length of raw's header, up to and including the first
 * empty line (1 or 2 when raw starts with LF or CR LF: an empty header block; else the first
 * LF followed by LF or by CR LF), or len if there is none. For a server that cuts HEADER /
 * TEXT sections (of the message and of MIME parts), so it and the store agree on where they
 * meet. Stores written before this rule counted an empty first line read the same way. */
MV_API size_t mv_message_header_len(const void *raw, size_t len);

/* MEMOS: small byte strings an application derives from a message's bytes and keeps with
 * them across runs, so that it need not read and parse the message again to make them
 * (mailvaultd keeps its FETCH BODYSTRUCTURE and BODY answers so). A memo belongs to the
 * message's bytes: copies of the message share it, and it goes when the bytes go. The
 * store never reads a memo; an application that changes what it derives tags its memos
 * itself (a version in their first bytes) and writes them again when a tag is not its own.
 * A message has MV_MEMO_SLOTS slots of one memo each. A memo is kept only if it is at most
 * MV_MEMO_MAX bytes and at most MV_MEMO_FLOOR + the message's size / MV_MEMO_SLOTS, so a
 * message's memos together hold at most its size and 512 bytes (quotas count messages'
 * sizes; the store's own rows of a message are about that much). Memos are inside the
 * encrypted file like everything else. */
#define MV_MEMO_SLOTS     4u
#define MV_MEMO_MAX       (16u << 10) /* bytes of one memo */
#define MV_MEMO_FLOOR     128u        /* bytes a memo may have beyond its share of the size */
#define MV_MEMO_BATCH_MAX 4096u       /* memos of one mv_message_memos_put */
struct mv_memo {
    uint32_t uid;     /* the message, in the mailbox the call's UIDVALIDITY names */
    uint32_t slot;    /* below MV_MEMO_SLOTS */
    const void *data; /* len bytes (not copied: read during the call) */
    size_t len;
};
/* Keeps memos[0..n) of messages of the mailbox whose UIDVALIDITY is uidvalidity (the store
 * gives each UIDVALIDITY once, so it names one mailbox for the store's life, through
 * renames), in one write transaction, each replacing the memo its slot had. A memo of a
 * message that is not there (expunged since it was made, or no such mailbox) or over the
 * bounds above is left out: not an error. *stored (may be NULL): how many were kept.
 * Returns MV_OK, MV_EINVAL (store NULL, memos NULL with n > 0, a slot out of range, a memo
 * NULL with len > 0, n over MV_MEMO_BATCH_MAX), MV_EBUSY, MV_EIO, MV_ENOSPC, MV_ENOMEM; on
 * an error nothing is kept. */
MV_API MV_MUST_CHECK int mv_message_memos_put(
    mv_store *store, uint32_t uidvalidity, const struct mv_memo *memos, size_t n, size_t *stored);
/* The memo in slot of message uid of the mailbox whose UIDVALIDITY is uidvalidity: MV_OK
 * with *data malloc'd (free with mv_free) and *len (0 for an empty memo); MV_ENOTFOUND when
 * there is none (none kept, no such message or mailbox); MV_EINVAL (NULL argument, slot out
 * of range), MV_ECORRUPT, MV_EBUSY, MV_EIO, MV_ENOMEM. Inside mv_store_read_begin() it reads
 * that transaction's snapshot. One index lookup and one row: a few microseconds. */
MV_API MV_MUST_CHECK int mv_message_memo_get(
    mv_store *store, uint32_t uidvalidity, uint32_t uid, uint32_t slot, void **data, size_t *len);

/* The memos in slot of the messages with UIDs first..last of the mailbox whose UIDVALIDITY is
 * uidvalidity, in UID order: got(arg, uid, data, len) for each message that has one (data
 * valid for that call only); messages without one are passed over. One statement for the
 * range, ~1 us a memo, where mv_message_memo_get() is a lookup each (a FETCH of thousands of
 * answers). Returns MV_OK (also when there are none), what got() returned when it was not
 * MV_OK (the read ends there), MV_EINVAL (NULL argument, slot out of range), MV_ECORRUPT,
 * MV_EBUSY, MV_EIO. Inside mv_store_read_begin() it reads that transaction's snapshot. */
MV_API MV_MUST_CHECK int
mv_message_memos_range(mv_store *store,
                       uint32_t uidvalidity,
                       uint32_t first,
                       uint32_t last,
                       uint32_t slot,
                       int (*got)(void *arg, uint32_t uid, const void *data, size_t len),
                       void *arg);

/* The memos in slot of the messages that keys name (n keys of one listing, as for
 * mv_message_fetch_keyed_into: the same UIDVALIDITY and modseq; at most MV_MEMO_BATCH_MAX):
 * got(arg, index, data, len) for each key whose message has one (index into keys; data valid
 * for that call only), in no particular order; keys with body_key 0 and messages without one
 * are passed over. While mailbox is as the listing saw it (the same UIDVALIDITY and highest
 * modseq), the body keys still name the messages' bytes and the memos are read by them
 * directly: one scan of their rows when the bodies lie close together, as messages delivered
 * or imported one after another do, without the UID index (a third of the time
 * mv_message_memos_range() takes). Returns MV_OK; MV_ENOTFOUND when the mailbox changed since
 * the listing or is gone (got() not called: ask by UID instead); what got() returned when it
 * was not MV_OK; MV_EINVAL (NULL argument, slot out of range, too many keys, keys of two
 * listings), MV_ECORRUPT, MV_EBUSY, MV_EIO, MV_ENOMEM. */
MV_API MV_MUST_CHECK int
mv_message_memos_keyed(mv_store *store,
                       const char *mailbox,
                       const struct mv_message_key *keys,
                       size_t n,
                       uint32_t slot,
                       int (*got)(void *arg, size_t index, const void *data, size_t len),
                       void *arg);

/* Fills *info for one message (strings owned by the store). */
MV_API MV_MUST_CHECK int
mv_message_get(mv_store *store, const char *mailbox, uint32_t uid, struct mv_message_info *info);

/* A UID set in IMAP syntax: "1", "3:7", "1,4:6,9:*", as a person or a client writes it: at
 * most MV_UIDSET_TEXT_RANGES_MAX ranges (MV_ELIMIT beyond). A server that has resolved a
 * client's set passes typed ranges instead (struct mv_uid_range, the *_ranges functions
 * below): no text, no cap but memory. */
#define MV_UIDSET_TEXT_RANGES_MAX 10000
#define MV_FLAGS_REPLACE          0
#define MV_FLAGS_ADD              1
#define MV_FLAGS_REMOVE           2
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

/* For CONDSTORE's STORE ... (UNCHANGEDSINCE m) (RFC 7162 3.1.3): mv_flags_set, conditional
 * per message: in one transaction, the messages of uid_set whose
 * modseq is at most unchanged_since get the change (as mv_flags_set: a new modseq only if
 * their flags or keywords actually change); the others are left as they are and their UIDs
 * are returned. Because the test and the change share the write transaction, no other
 * handle or process can change a message between them. unchanged_since 0 fails every
 * message (modseqs start at 1). UIDs of uid_set with no message are neither changed nor
 * failed.
 * On MV_OK, *changed_out (if not NULL) counts the changed messages and *failed_out holds
 * *failed_count_out UIDs (those whose modseq was above unchanged_since), ascending,
 * malloc'd (free with mv_free; NULL when *failed_count_out is 0). On failure nothing
 * changed, *failed_out is NULL and *failed_count_out 0.
 * Returns what mv_flags_set returns, MV_EINVAL also when failed_out or failed_count_out is
 * NULL, and MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_flags_set_unchanged_since(mv_store *store,
                                                      const char *mailbox,
                                                      const char *uid_set,
                                                      int mode,
                                                      unsigned flags,
                                                      const char *keywords,
                                                      uint64_t unchanged_since,
                                                      uint32_t *changed_out,
                                                      uint32_t **failed_out,
                                                      size_t *failed_count_out);

/* Copies (or moves) the messages in uid_set to another mailbox, without copying bytes
 * (bodies are shared by reference count). *count_out gets the number copied. */
MV_API MV_MUST_CHECK int mv_message_copy(
    mv_store *store, const char *from, const char *uid_set, const char *to, uint32_t *count_out);
MV_API MV_MUST_CHECK int mv_message_move(
    mv_store *store, const char *from, const char *uid_set, const char *to, uint32_t *count_out);

/* Removes the messages flagged \Deleted (and in uid_set, if not NULL) from mailbox.
 * *count_out gets the number expunged. The messages are gone from every mailbox, listing,
 * fetch and search when this returns; the bodies no other message uses (their bytes, their
 * attachments, their full-text rows) stay in the encrypted file, unreachable, until
 * mv_store_purge() overwrites them (secure_delete): deleting a full-text row costs as much
 * as indexing the text, so a bulk expunge leaves that work to a later, bounded step. */
MV_API MV_MUST_CHECK int
mv_mailbox_expunge(mv_store *store, const char *mailbox, const char *uid_set, uint32_t *count_out);

/* Deletes, in one transaction, up to max_bodies (0: every one, in transactions of at most
 * MV_PURGE_BATCH) of the message bodies that expunges and mailbox deletes left without a
 * message: their bytes, their attachments no other body uses, and their full-text rows, all
 * overwritten (secure_delete). A body that a new message of the same bytes took up again
 * meanwhile is kept. Costs about as much per body as indexing its text did (~0.5-1 ms for a
 * small message); with nothing waiting it costs a flag test, so a server may call it
 * between commands (mailvaultd: after a job, while no other job waits). mailvault expunge,
 * mailbox delete and maintain (mv_store_maintain) run it to the end. An expunge notes the
 * references it drops and each transaction here takes up to max_bodies of those off the
 * bodies' counts first (a body is found unused then). *left_out (may be NULL) gets the
 * bodies and noted references still waiting, either way, each counted up to 1,000 (so a
 * call costs its batch, not what waits). Returns MV_OK, MV_EINVAL (read-only handle), MV_EBUSY
 * (it gave way: mv_store_purge_give_way; what it deleted is kept), MV_EIO, MV_ENOMEM; on
 * another error nothing of that transaction is deleted. */
#define MV_PURGE_BATCH 1024
MV_API MV_MUST_CHECK int mv_store_purge(mv_store *store, uint32_t max_bodies, uint64_t *left_out);
/* As mv_store_purge(), and *purged_out (may be NULL) gets the bodies this call deleted and
 * the bodies whose references an EXPUNGE dropped it took off their counts (the EXPUNGE notes
 * them for the purge), also when it fails (those of transactions it committed before the
 * one that failed) or gives way (with what its last batch deleted before it did): 0 when nothing
 * was waiting, so a caller that shares out batches between stores (mailvaultd's worker) does not
 * count a call on a store with nothing to purge as a batch. */
MV_API MV_MUST_CHECK int mv_store_purge_counted(mv_store *store,
                                                uint32_t max_bodies,
                                                uint64_t *purged_out,
                                                uint64_t *left_out);

/* Sets give_way (NULL: none, the default), which mv_store_purge() then calls, on the
 * caller's thread, after every 4 bodies a batch deletes (not after its last; it must be
 * cheap, a flag or counter test): when it returns nonzero (a command is waiting for this
 * handle), the batch stops there, what it deleted is committed, and mv_store_purge() returns
 * MV_EBUSY (mv_store_purge_counted's *purged_out counts what it deleted). So a server that
 * purges between commands keeps a command that arrives from waiting for more than 4 bodies
 * (milliseconds a body), and a purge asked to give way all the time still deletes 4 bodies a
 * batch. mv_store_migrate_step() and mv_store_index_backlog() give way through the same
 * function, differently (see there). give_way must not use the store. */
MV_API void mv_store_purge_give_way(mv_store *store, int (*give_way)(void *arg), void *arg);

/* Builds, in one transaction, the full-text rows of up to max_bodies (0: every one, in
 * transactions of at most 256) of the bodies in the full-text backlog: a stepped drain
 * (mv_queue_drain_step) stores each delivery without its row, so that queued mail is visible
 * sooner, and notes it there, as does every append of a handle set by mv_store_index_later().
 * With mv_store_purge_give_way()'s function set, it is asked after each body but the last;
 * on a yes the call commits the rows built so far and returns MV_OK, the rest still waiting
 * (*left_out counts them). Searches find those messages meanwhile (they read the backlog's
 * bodies, which costs a parse of each per search), and mv_store_check() does not count
 * their missing rows; this call makes the rows, parsing each body again (about what the
 * drain saved: ~0.3 ms of CPU for a small message). With nothing waiting it costs a flag
 * test, so a server may call it between commands (mailvaultd: after a job, once the drain
 * is over, while no other job waits). *left_out (may be NULL) gets the bodies still
 * waiting, counted up to 1,000 (a longer backlog reports 1,000: each call costs what its
 * batch does, not the backlog's length). A body whose stored bytes cannot be read or parsed
 * (a damaged page, bytes that do not decompress or do not match their SHA-256) is set aside
 * rather than failing every call again: it leaves the backlog without a row, the rest is
 * indexed, its bytes are not changed, searches no longer read it (they do not fail on it
 * either), mv_store_check() reports it with the reason and mv_store_index_set_aside() lists
 * it. Returns MV_OK, MV_EINVAL (NULL or read-only handle), MV_EBUSY, MV_EIO, MV_ENOMEM; on an
 * error nothing of that transaction is kept and the backlog is as it was. */
MV_API MV_MUST_CHECK int
mv_store_index_backlog(mv_store *store, uint32_t max_bodies, uint64_t *left_out);

/* The ids above after_id (0: from the first), ascending, of up to max bodies that
 * mv_store_index_backlog() set aside as damaged, into ids; *count_out gets how many. For a
 * server's log (after_id: the last it logged). mv_store_repair() drops a body from the list
 * once it gives it its full-text row (its bytes read again) or the body is gone; the purge
 * drops it with the body. Read-only
 * handles too. Returns MV_OK, MV_EINVAL (NULL store or count_out, ids NULL with max > 0),
 * MV_EBUSY, MV_EIO, MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_store_index_set_aside(
    mv_store *store, int64_t after_id, int64_t *ids, uint32_t max, uint32_t *count_out);

/* With on nonzero, every message this handle appends from now on (mv_message_append(), and
 * a drain of the sealed queue) is stored without its full-text row and noted in the full-text
 * backlog, as a stepped drain's deliveries are; mv_store_index_backlog() builds the rows
 * later, and searches find those messages meanwhile (parsing each such body again per
 * search). For a server that builds the backlog between commands: an append's durable
 * commit then writes about a third of the pages (the row's FTS5 segment and stored text
 * were two thirds of them), and one catch-up batch writes one segment for all its bodies.
 * 0 (the default) builds each row inside its append again. Other handles are not affected.
 * Returns MV_OK, MV_EINVAL (NULL or read-only handle). */
MV_API MV_MUST_CHECK int mv_store_index_later(mv_store *store, int on);

/* *count_out gets the bodies in the full-text backlog (mv_store_index_backlog): what each
 * full-text criterion of a search parses again until their rows are built (a server sizes
 * such a search with it). A count of the backlog's keys, O(bodies in it); a flag test once
 * mv_store_index_backlog() on this handle found it empty and nothing was deferred since.
 * Read-only handles too. Returns MV_OK, MV_EINVAL (NULL), MV_EBUSY, MV_EIO, MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_store_index_backlog_count(mv_store *store, uint64_t *count_out);

/* Moves WAL checkpoints out of this handle's commits (for servers). By default a commit that
 * takes the WAL past 1,000 frames (4 KiB pages) checkpoints it, so whichever command commits
 * then waits for every frame to be copied back into the database and both files synced.
 * After mv_store_checkpoint_defer() with frames_max (>= 1000) a commit only notes that a
 * checkpoint is due (mv_store_checkpoint_due() says 1) and the caller runs it with
 * mv_store_checkpoint() when it has time (mailvaultd: between jobs); a commit still
 * checkpoints itself once the WAL holds frames_max frames, which bounds the WAL at about
 * frames_max x 4 KiB if nobody does. frames_max 0 restores the default. Other handles are
 * not affected. Returns MV_OK, MV_EINVAL (store NULL, read-only, frames_max 1-999). */
MV_API MV_MUST_CHECK int mv_store_checkpoint_defer(mv_store *store, uint32_t frames_max);

/* 1 if a commit of store left the checkpoint that mv_store_checkpoint_defer() deferred
 * (or a PASSIVE checkpoint could not copy every frame: a reader holds them); else 0. */
MV_API int mv_store_checkpoint_due(const mv_store *store);

/* A PASSIVE checkpoint of store's WAL now: copies the frames no reader still needs and never
 * waits for a lock. *log_frames (may be NULL) gets the frames in the WAL, *done_frames (may
 * be NULL) those now in the database; the checkpoint stays due while they differ. Not inside
 * a transaction or read snapshot, nor while an iterator of store is under way (MV_EBUSY: an
 * interrupt of the checkpoint would outlive it on the running statement). Returns MV_OK,
 * MV_EINVAL (store NULL, read-only, inside a transaction), MV_EBUSY, MV_EIO. */
MV_API MV_MUST_CHECK int
mv_store_checkpoint(mv_store *store, int64_t *log_frames, int64_t *done_frames);

/* ---- Migrations: what the open did, and the work it leaves for later ------------------- */

/* A store of an older schema version is migrated by the first writable open, in one
 * transaction (a crash leaves the old version, migrated again by the next open). What would
 * make that open wait minutes is left for later instead: from version 8, the full-text index
 * is rebuilt without positions (re-tokenizing every message's text: 1.4-1.9 ms of CPU a
 * message) by mv_store_migrate_step(), a batch at a time; until it is done, searches read the old
 * index and the new one, with the same answers. */
struct mv_migration_status {
    int schema_version;     /* the store's, after the open */
    int migrated_from;      /* the version this handle's open migrated from; 0: it migrated none */
    int64_t migrate_ms;     /* how long that open's migration took */
    int fts_moving;         /* 1: the full-text index is still being rebuilt */
    uint64_t fts_rows_left; /* rows of the old index still to move (counted: O(rows)) */
};
/* Fills *out. Returns MV_OK, MV_EINVAL (NULL), MV_EIO, MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_store_migration(mv_store *store, struct mv_migration_status *out);

/* Does the work a migration left (above): up to max_rows (0: all of it, in transactions of at
 * most MV_MIGRATE_BATCH) rows of the full-text index moved in one transaction; then, a batch
 * at a time, the old index is deleted. Uses the give-way function of mv_store_purge_give_way():
 * when it says yes, the batch is rolled back (nothing of it kept) and the call returns MV_EBUSY. A
 * crash or an error keeps what earlier batches did; the next call goes on from there. With nothing
 * left it costs a flag test, so a server may call it between commands (mailvaultd does, as
 * it purges); `mailvault maintain` (mv_store_maintain) finishes it. *more_out (may be NULL):
 * 1 while work is left. Returns MV_OK, MV_EINVAL (read-only handle), MV_EBUSY, MV_EIO,
 * MV_ENOMEM. */
#define MV_MIGRATE_BATCH 1024
MV_API MV_MUST_CHECK int mv_store_migrate_step(mv_store *store, uint32_t max_rows, int *more_out);

/* ---- Messages: UID sets as typed ranges (for servers) ---------------------------------- */
/*
 * The same operations on a set given as ranges rather than text: what a server passes after
 * resolving a client's sequence set against its view of the mailbox. The ranges may come in
 * any order and may overlap or touch (they are sorted and merged, so each message is
 * changed, copied or expunged once); a range above the mailbox's largest UID touches
 * nothing. A range with first 0 or first > last is MV_EINVAL. count 0 (ranges may then be
 * NULL) changes nothing and returns MV_OK. There is no limit on count: the ranges are
 * copied once (16 bytes each) and every range is one set-based statement, so a set with
 * many gaps costs what its messages cost, not a statement per message.
 *
 * A server may widen its ranges over UIDs it knows are gone (expunged): no message can
 * come back at a UID once used, so "every message of my view" is one range from its first
 * to its last UID however many gaps lie between. It must not widen past its view's last
 * UID (messages that arrived since are not the client's to touch).
 */
struct mv_uid_range {
    uint32_t first; /* 1 <= first <= last, both inclusive */
    uint32_t last;
};

#define MV_UNCHANGEDSINCE_NONE UINT64_MAX /* mv_flags_set_ranges: no CONDSTORE condition */

/* mv_flags_set (unchanged_since MV_UNCHANGEDSINCE_NONE) or mv_flags_set_unchanged_since
 * (any other value) on ranges. failed_out / failed_count_out may be NULL only without a
 * condition. Returns what those return. */
MV_API MV_MUST_CHECK int mv_flags_set_ranges(mv_store *store,
                                             const char *mailbox,
                                             const struct mv_uid_range *ranges,
                                             size_t count,
                                             int mode,
                                             unsigned flags,
                                             const char *keywords,
                                             uint64_t unchanged_since,
                                             uint32_t *changed_out,
                                             uint32_t **failed_out,
                                             size_t *failed_count_out);

/* mv_message_copy_uids on ranges (pairs_out and count_out required). */
MV_API MV_MUST_CHECK int mv_message_copy_ranges(mv_store *store,
                                                const char *from,
                                                const struct mv_uid_range *ranges,
                                                size_t count,
                                                const char *to,
                                                int move,
                                                uint32_t **pairs_out,
                                                uint32_t *count_out);

/* mv_mailbox_expunge on ranges: the \Deleted messages among them (count 0: none). */
MV_API MV_MUST_CHECK int mv_mailbox_expunge_ranges(mv_store *store,
                                                   const char *mailbox,
                                                   const struct mv_uid_range *ranges,
                                                   size_t count,
                                                   uint32_t *count_out);

/* Frees memory the library returned (mv_message_fetch). The whole block is wiped first
 * (sodium_memzero, which the compiler keeps): it may hold a message. NULL is fine. */
MV_API void mv_free(void *p);

/* ---- Messages: listings for the server (store_listing.c) ------------------------------- */
/*
 * What an IMAP session needs to build its sequence-number <-> UID map and to find what
 * changed: a mailbox's messages in ascending UID order with their flags, keywords and
 * modseq, read from the (mailbox_id, uid) index, and with each message a key to its bytes
 * (body_key) that mv_message_fetch_keyed_into() reads without looking the UID up again.
 */

struct mv_message_entry {
    uint32_t uid;
    unsigned flags;        /* MV_FLAG_* */
    uint64_t modseq;       /* the modseq of the message's last change */
    uint64_t size;         /* bytes, as delivered */
    int64_t internal_date; /* Unix seconds */
    const char *keywords;  /* space-separated, "" if none; valid until the next call */
    uint64_t body_key; /* opaque, never 0 for a listed message: see mv_message_fetch_keyed_into */
};

/* Iterates the messages of mailbox with uid > uid_after and modseq > changed_since (0 and 0:
 * every message), in ascending UID order. The iterator holds its own statement and a read
 * transaction from the first next to the end: changes by other connections made meanwhile
 * are not seen; changes through the same handle may or may not be (SQLite connections see
 * their own writes), so finish a listing before changing the mailbox. End it before long
 * work: an open read keeps the WAL from being checkpointed past it.
 * begin returns MV_OK with *iter set, MV_ENOTFOUND (mailbox), MV_EINVAL (NULL argument),
 * MV_ENOMEM, or an SQLite-derived code; *iter is NULL on failure. next returns 1 with
 * *entry filled, 0 at the end, or a negative MV_E* code (detail in mv_store_errmsg()).
 * end frees the iterator and sets *iter to NULL (NULL is fine). The iterator must be ended
 * before the store is closed. */
typedef struct mv_message_iter mv_message_iter;
MV_API MV_MUST_CHECK int mv_message_list_begin(mv_store *store,
                                               const char *mailbox,
                                               uint32_t uid_after,
                                               uint64_t changed_since,
                                               mv_message_iter **iter);
MV_API int mv_message_list_next(mv_message_iter *iter, struct mv_message_entry *entry);
MV_API void mv_message_list_end(mv_message_iter **iter);

/* Copies (move 0, as mv_message_copy) or moves (move non-zero, as mv_message_move) the
 * messages in uid_set from mailbox from to mailbox to, in one transaction, and says which
 * UID each got (UIDPLUS COPYUID, RFC 4315): on MV_OK, *count_out messages were copied and
 * *pairs_out holds 2 * *count_out UIDs, {source, new} per message in ascending source
 * order, malloc'd (free with mv_free; NULL when *count_out is 0). On failure nothing
 * changed and *pairs_out is NULL. Returns what mv_message_copy returns, MV_EINVAL if either
 * output pointer is NULL, and MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_message_copy_uids(mv_store *store,
                                              const char *from,
                                              const char *uid_set,
                                              const char *to,
                                              int move,
                                              uint32_t **pairs_out,
                                              uint32_t *count_out);

/* ---- Messages: expunged UIDs from the change log (store_changes.c) -------------------- */
/* ADDED for QRESYNC (mailvaultd milestone 2). */

#define MV_EXPUNGED_MAX 1000000 /* UIDs one mv_message_expunged_since() call returns */

/* The UIDs of the messages expunged (EXPUNGE, UID EXPUNGE, CLOSE, a move away) from
 * mailbox at a modseq above since_modseq, distinct and ascending, read from the change log
 * (which keeps expunges after the messages are gone: QRESYNC's VANISHED (EARLIER), RFC
 * 7162) back to where mv_store_maintain pruned it (changes_keep_days). since_modseq 0: every
 * expunge the mailbox has had, if none was pruned. On MV_OK *uids_out holds
 * *count_out UIDs, malloc'd (free with mv_free; NULL when *count_out is 0). On failure
 * *uids_out is NULL and *count_out 0.
 * Returns MV_OK, MV_ENOTFOUND (mailbox), MV_EINVAL (a NULL argument, since_modseq above
 * INT64_MAX), MV_ELIMIT (more than MV_EXPUNGED_MAX UIDs, or since_modseq below the log's
 * pruned part: the answer would be incomplete), MV_ENOMEM, or an SQLite-derived
 * code (detail in mv_store_errmsg()). */
MV_API MV_MUST_CHECK int mv_message_expunged_since(mv_store *store,
                                                   const char *mailbox,
                                                   uint64_t since_modseq,
                                                   uint32_t **uids_out,
                                                   size_t *count_out);

/* ---- Search ---------------------------------------------------------------------------- */

struct mv_search_query {
    const char *mailbox; /* NULL: every mailbox */
    const char *from;    /* substring, case-insensitive, of the decoded header */
    const char *to;
    const char *cc;
    const char *subject;
    const char *message_id;
    const char *text;   /* words, each a case-insensitive substring of the header or body */
    int64_t since;      /* internal date >= since (Unix seconds); 0: no bound */
    int64_t before;     /* internal date < before; 0: no bound */
    int64_t sent_since; /* Date header >= ... (the date as written: its zone disregarded, as
                           IMAP's SENT* want; Unix seconds of 00:00 UTC of the day); 0: none */
    int64_t sent_before;
    uint64_t larger;      /* size > larger; 0: no bound */
    uint64_t smaller;     /* size < smaller; 0: no bound */
    unsigned flags_set;   /* all of these flags set */
    unsigned flags_unset; /* none of these flags set */
    const char *keyword;  /* has this keyword */
    uint32_t limit;       /* 0: limits.search_results_max; more gives MV_ELIMIT;
                             MV_SEARCH_UNLIMITED: no limit, for a caller that holds nothing
                             per row (an IMAP server's SEARCH marks a bit per message) */
    /* One string each, matched as it is (blanks included) as a case-insensitive substring of
     * the decoded text: body_contains of the body (IMAP SEARCH BODY), text_contains of the
     * header (every field, decoded) or the body (IMAP SEARCH TEXT). NULL or "": none. */
    const char *body_contains;
    const char *text_contains;
};
#define MV_SEARCH_UNLIMITED UINT32_MAX
#define MV_SEARCH_QUERY_INIT                                                                       \
    {                                                                                              \
        0                                                                                          \
    }

/* Runs a search; results come newest first by internal date (the order of equal dates is
 * not specified: it follows the index the query planner picks).
 * The text query is a list of words, each matched as a quoted FTS5 phrase (no query syntax:
 * "foo AND" looks for both words); a malformed one matches nothing. Full text is indexed by
 * trigrams: a string of three characters or more is found through the index; a shorter one
 * is compared against every indexed text (and folds ASCII letters only). next returns 1 with *info
 * (strings valid until the next call), 0 at the end, or a negative MV_E* code (MV_ELIMIT
 * when more rows match than the limit allows). */
typedef struct mv_search mv_search;
MV_API MV_MUST_CHECK int
mv_search_begin(mv_store *store, const struct mv_search_query *query, mv_search **out);
MV_API int mv_search_next(mv_search *search, struct mv_message_info *info);
MV_API void mv_search_end(mv_search **search);

/* Header criteria ORed by a caller, answered in one pass: up to MV_HEADER_CRITERIA_MAX
 * substrings of FROM, TO, CC or SUBJECT, each compared as mv_search_query's from / to / cc /
 * subject are (case-insensitive, Unicode case folded, of the decoded field). mv_search
 * ANDs its criteria, so N criteria a client ORs are N searches, each a scan of the mailbox;
 * this is one scan, with every criterion compared against each message's fields.
 * each(arg, uid, matched) is called for every message of mailbox that meets at least one
 * criterion, with bit i of matched set if it meets criteria[i], in no particular order; it
 * must not call the store. It returns 0 to go on; anything else ends the pass, and
 * mv_search_headers returns it. No row limit: nothing is held per message. MV_OK,
 * MV_EINVAL (no mailbox, 0 or more than MV_HEADER_CRITERIA_MAX criteria, a criterion with no
 * field or an empty text), MV_ENOTFOUND (no such mailbox), an SQLite error, or each's code. */
enum mv_header_field { MV_HEADER_FROM = 1, MV_HEADER_TO, MV_HEADER_CC, MV_HEADER_SUBJECT };
struct mv_header_criterion {
    enum mv_header_field field;
    const char *text; /* the substring; not NULL, not empty */
};
#define MV_HEADER_CRITERIA_MAX 64
MV_API MV_MUST_CHECK int mv_search_headers(mv_store *store,
                                           const char *mailbox,
                                           const struct mv_header_criterion *criteria,
                                           size_t count,
                                           int (*each)(void *arg, uint32_t uid, uint64_t matched),
                                           void *arg);

/* ---- Delivery, import, export ------------------------------------------------------------ */

/* Delivers raw into the INBOX of address without the password: the message is sealed to
 * the store's public key (X25519 + XSalsa20-Poly1305, libsodium's crypto_box) into the
 * pending queue; the next mv_store_open() with the password moves it into the store. Only
 * the user can read it. The deliveries sealed to one store within 2 s (4,096 at most) share
 * one ephemeral key (a BURST: one key agreement for all of them, on this side and the
 * drain's), which this process keeps in memory until the burst is over and wipes at the next
 * mv_deliver_sealed() or mv_deliver_sealed_wipe() after that. Thread-safe. Returns MV_OK,
 * MV_ENOTFOUND (no such store), MV_ELIMIT (size), MV_EINVAL, MV_EIO, MV_ENOSPC,
 * MV_ECORRUPT (the public key file is missing, not 32 bytes or no usable key), MV_ENOMEM,
 * MV_ERROR (libsodium failed to start), MV_EMOVED (the store was released from this
 * node), MV_EBUSY (an init, release, restore or password change held the store for 5 s).
 * A delivery that comes while `mailvault init` is still making the store waits for it (the
 * store's lock) and is sealed to the new key pair. The message is on disk (fsync'd) when
 * this returns MV_OK. */
MV_API MV_MUST_CHECK int mv_deliver_sealed(const char *address,
                                           const void *raw,
                                           size_t len,
                                           const struct mv_store_options *opts,
                                           char *errmsg,
                                           size_t errmsg_size);

/* Wipes the ephemeral keys of bursts that are over (all != 0: of every burst, which makes the
 * next delivery to each store start a new one). A long-running deliverer calls it every
 * second or so, so a burst's key does not outlive it when no other delivery follows, and
 * with all set when it stops. Thread-safe. */
MV_API void mv_deliver_sealed_wipe(int all);

/* Deliveries waiting in the queue of address (readable without the password): its regular
 * files with a delivery's name (a symbolic link is not one), as mv_queue_usage() counts them.
 * Reads the whole queue directory; to ask only whether the store exists, mv_store_exists().
 * Returns MV_OK, MV_EINVAL (bad address), MV_ENOTFOUND (no store) or MV_EIO. */
MV_API MV_MUST_CHECK int
mv_queue_count(const char *address, const struct mv_store_options *opts, uint32_t *count_out);

/* Whether the store of address exists, without the password and without opening it (one
 * access(2); a server's check of an LMTP recipient, per delivery, whatever its queue holds).
 * Thread-safe; safe on a store this process has open. Returns MV_OK (it exists),
 * MV_ENOTFOUND, MV_EINVAL (bad address) or MV_EIO. */
MV_API MV_MUST_CHECK int mv_store_exists(const char *address, const struct mv_store_options *opts);

/* The directory entries mv_queue_usage() reads at most by default. */
#define MV_QUEUE_SCAN_MAX 1000000u

/* What the sealed queue of address holds, without the password and without opening the
 * store: *messages_out deliveries waiting (as mv_queue_count() counts them) and *bytes_out
 * the sizes of their files (each message plus its sealing, 104 bytes: docs/DELIVERY.md). For
 * an estimate of a user's usage while the store is closed (a server's quota for sealed
 * deliveries). The scan reads at most entries_max directory entries (0: MV_QUEUE_SCAN_MAX):
 * a queue with more is MV_ELIMIT, never a count of part of it. A store without a queue
 * directory has an empty queue. Thread-safe, and safe on a store this process has open: no
 * file of the store itself is opened. Returns MV_OK, MV_EINVAL (bad address, a NULL out
 * pointer), MV_ENOTFOUND (no store), MV_ELIMIT, MV_EIO (the queue cannot be read); on an
 * error both outputs are 0. */
MV_API MV_MUST_CHECK int mv_queue_usage(const char *address,
                                        const struct mv_store_options *opts,
                                        uint32_t entries_max,
                                        uint64_t *bytes_out,
                                        uint64_t *messages_out);

/* Moves sealed deliveries from the queue into INBOX of an open (writable) store, in order of
 * arrival, taking at most max queue files (0: every one queued before the call started);
 * what mv_store_open() does unless opened with MV_STORE_DRAIN_LATER. A server opens with
 * that flag and calls this in steps between other work, so a login never waits for a long
 * queue: each step's messages are committed (visible to every handle) when it returns.
 * Every delivery reaches INBOX exactly once, whatever the steps, crashes or other handles
 * draining the same queue (docs/DELIVERY.md): a file is removed only after the commit that
 * stored it is durable. A file the store's key does not open, or that a limit refuses, goes
 * to the queue's rejected/ directory and counts as taken; a file over message_size_max
 * stays queued and does not count. *moved_out (may be NULL): messages appended; *more_out
 * (may be NULL): 1 if the call stopped at max with deliveries still due (call again), else
 * 0. After MV_OK mv_store_errmsg() may hold a note (rejected or oversized files, a rewritten
 * public key), else "". Returns MV_OK, MV_EINVAL (NULL or read-only store), MV_EIO,
 * MV_ENOSPC, MV_ECORRUPT, MV_EBUSY, MV_ENOMEM; on an error the messages of the steps before
 * it stay committed and the rest stay queued. */
MV_API MV_MUST_CHECK int
mv_queue_drain(mv_store *store, uint32_t max, uint32_t *moved_out, int *more_out);

/* The bounds of one mv_queue_drain_step(). Each is checked before every queue file after the
 * first (a step always takes at least one): the step ends once it took max files (0: no
 * count bound), once time_ms milliseconds passed since it began (0: no time bound), or when
 * yield_fn(yield_arg) returns non-zero (NULL: never; a server asks whether other work waits).
 * At least one of the three must be set. */
struct mv_drain_bounds {
    uint32_t max;
    uint32_t time_ms;
    int (*yield_fn)(void *yield_arg);
    void *yield_arg;
};

/* One step of a drain of the sealed queue into INBOX, with the guarantees of mv_queue_drain()
 * (exactly once, arrival order, rejected/): one transaction per 64 files, each visible at its
 * commit, and one WAL fsync before the step's files leave the queue; a step that stored mail
 * and ended a walk of the queue returns after its last commit (*more_out 1), and the next
 * step begins with that fsync and those files. A step (and mv_queue_drain() with a max)
 * stores the messages without their full-text rows and leaves those to
 * mv_store_index_backlog(); an open's drain and mv_queue_drain() with max 0 index at once
 * (searches find the messages either way). The handle
 * remembers where the drain is between steps: the queue directory is read once per 1,024 names, not
 * per step, so a step costs what it takes, not the length of the queue. Deliveries that arrive
 * while the drain runs are taken after the ones before them, in a further walk of the queue. A walk
 * that removes no file (only files that cannot be unlinked or read are left) ends the drain:
 * *more_out 0, and such files wait for a later drain (mv_store_errmsg() names them).
 * mv_queue_drain() with a max shares this position; with max 0 it starts afresh. Returns as
 * mv_queue_drain(); MV_EINVAL also for NULL or unbounded bounds. */
MV_API MV_MUST_CHECK int mv_queue_drain_step(mv_store *store,
                                             const struct mv_drain_bounds *bounds,
                                             uint32_t *moved_out,
                                             int *more_out);

/* A drain takes the file of each delivery it committed out of the queue into the queue's
 * done/ directory (a rename), and leaves the unlink, which can wait for the disk (online
 * discard), to this call, made between other work: it unlinks up to max of those files (0:
 * all) and removes done/ once it is empty. It does nothing while a stepped drain is under way
 * (mv_queue_drain_step, mv_queue_drain with a max: *more_out 0; call it after the last step);
 * mv_store_open() and mv_queue_drain() with max 0 tidy before they return. The files are
 * sealed to the store's key, never plaintext. Bounded calls go on through the directory
 * where the last one stopped (the handle keeps it open in between; mv_store_close closes
 * it), so tidying n files costs about n whatever max is. *more_out (may be NULL): 1 if it
 * stopped at max, or files came in meanwhile (call again; the last call may find nothing).
 * Returns MV_OK (also on a read-only handle: nothing to do), MV_EINVAL (NULL store), MV_EIO
 * or MV_ENOSPC (a file could not be removed). */
MV_API MV_MUST_CHECK int mv_queue_tidy(mv_store *store, uint32_t max, int *more_out);

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
 * one transaction per message batch. Messages are stored with CRLF line ends (each bare LF,
 * as Maildir and mbox files hold them, becomes CRLF: IMAP serves CRLF and RFC822.SIZE counts
 * those octets). A message already in the mailbox (same SHA-256 of its bytes, converted or
 * as read) is skipped, so a re-run after an interruption neither loses nor duplicates mail
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

/* ======================================================================================== */
/* Operations: statistics, maintenance, checks                                              */
/* ======================================================================================== */
/*
 * What an operator runs against the stores (docs/OPERATIONS.md): statistics for people and
 * for Prometheus, maintenance (optimize, checkpoints, VACUUM, a scheduled quick_check), a
 * full check of one store, a deployment doctor, and the query plans of the store's SQL.
 *
 * Passwords are never stored, so work on every store at once is keyless: it reads what a
 * store shows without its key (file and WAL sizes, the plain header bytes 16..23 with the
 * page size and the reserve byte that names the cipher, the delivery queue, permissions).
 * Everything that reads pages needs the store open with its password.
 */

/* ---- Without the password: one store file, every store under a root -------------------- */

struct mv_store_file {
    char address[MV_ADDRESS_MAX + 1]; /* local@domain, from the file's place under the root */
    char db_path[MV_PATH_MAX];
    uint64_t file_bytes;    /* the database file */
    uint64_t wal_bytes;     /* its -wal file (0 if none) */
    uint32_t page_size;     /* from the plain header; 0 if the header is unreadable */
    uint64_t page_count;    /* file_bytes / page_size: pages still in the WAL not counted */
    int reserve_bytes;      /* header byte 20 */
    mv_cipher cipher;       /* from the reserve byte; MV_CIPHER_NONE for a plaintext SQLite
                               file; MV_CIPHER_AUTO if not recognised */
    int header_ok;          /* 1: a plausible encrypted header; 0: empty, short or foreign */
    uint32_t pending;       /* deliveries waiting in the sealed queue (mv_queue_count) */
    int modes_ok;           /* 1: directories 0700-or-stricter, files 0600-or-stricter */
    char mode_problem[256]; /* the first permission problem found, "" if none */
};

/* Describes the store of address without opening it (no password, no SQLite): stat(2) of
 * its files, a read of header bytes 16..23, a count of the queue. Returns MV_OK, MV_EINVAL
 * (bad address), MV_ENOTFOUND (no store file) or MV_EIO. Fast: a few system calls.
 * Thread-safe, and safe on a store this process has open (on any thread): the header of an
 * open store comes from what its handle recorded, so no descriptor of the file is opened and
 * closed (a close would drop the handle's SQLite locks), with the same result as the read. */
MV_API MV_MUST_CHECK int mv_store_file_inspect(const char *address,
                                               const struct mv_store_options *opts,
                                               struct mv_store_file *out);

/* Where a watcher (inotify, a poll of the directory) looks to learn that the store of
 * address changed, by this process or any other: the directory, into dir_out, and the
 * store's name in it, into name_out. Every commit to the store writes, and every
 * checkpoint, restore or import writes or renames, an entry of that directory for which
 * mv_store_watch_match(name_out, entry) is 1; watch the directory rather than a file (SQLite
 * deletes the WAL when the last connection closes and makes a new one later). Builds the
 * paths only: no system call, no file opened. MV_PATH_MAX bytes always suffice for each
 * buffer. Returns MV_OK, or MV_EINVAL (bad address, NULL or too small a buffer: then both
 * are ""). Changes made on another machine (a network file system) reach no watcher: poll
 * as well. */
MV_API MV_MUST_CHECK int mv_store_watch_target(const char *address,
                                               const struct mv_store_options *opts,
                                               char *dir_out,
                                               size_t dir_size,
                                               char *name_out,
                                               size_t name_size);
/* 1 if a change to the directory entry named entry means that the store whose name (from
 * mv_store_watch_target) is name changed, else 0. Its database and WAL files count; its
 * shared-memory file does not (readers write it: a watcher would wake on reads). */
MV_API int mv_store_watch_match(const char *name, const char *entry);

/* Iterates every store under the root of opts (ROOT/<domain>/<local>.db), domains and then
 * stores in byte order of their names, each described as by mv_store_file_inspect().
 * begin returns MV_OK, MV_ENOTFOUND (no root directory), MV_EIO or MV_ENOMEM; next returns
 * 1 with *out filled, 0 at the end, or MV_EIO / MV_ELIMIT (more than 1,000,000 entries in
 * one directory); end frees and sets *scan to NULL (NULL is fine). Entries whose names are
 * not valid addresses are skipped. Memory: the names of one domain directory. */
typedef struct mv_root_scan mv_root_scan;
MV_API MV_MUST_CHECK int mv_root_scan_begin(const struct mv_store_options *opts,
                                            mv_root_scan **scan);
MV_API int mv_root_scan_next(mv_root_scan *scan, struct mv_store_file *out);
MV_API void mv_root_scan_end(mv_root_scan **scan);

/* ---- With the password: statistics of an open store ----------------------------------- */

struct mv_store_inspection {
    uint32_t page_size;
    uint64_t page_count;     /* PRAGMA page_count (includes pages still in the WAL) */
    uint64_t freelist_count; /* PRAGMA freelist_count */
    double fragmentation;    /* freelist_count / page_count, 0..1 (the reference's measure;
                                with auto_vacuum=FULL it stays 0 between transactions) */
    uint64_t file_bytes;
    uint64_t wal_bytes;
    struct mv_store_stats stats; /* messages, logical size, ... (mv_store_stats) */
    mv_cipher cipher;
    uint32_t kdf_iter;
    /* PRAGMA wal_checkpoint(PASSIVE) run by this call (it never waits for a lock):
     * busy = 1 if a reader or writer stopped it short; -1 everywhere on a read-only handle. */
    int checkpoint_busy;
    int64_t checkpoint_log_frames;
    int64_t checkpoint_done_frames;
    int64_t last_maintain_at;    /* Unix seconds of the last mv_store_maintain(); 0: never */
    int64_t last_quick_check_at; /* Unix seconds of the last recorded quick_check; 0: never */
    int last_quick_check_ok;     /* 1 ok, 0 found problems, -1 never ran */
};

/* Fills *out for an open store: the PRAGMA figures in one read snapshot, sizes from
 * stat(2), cipher and KDF from the VFS, the maintenance history from the meta table, and a
 * PASSIVE checkpoint's result. Returns MV_OK, MV_EINVAL (out NULL), MV_EIO, MV_EBUSY,
 * MV_ECORRUPT, MV_ENOMEM; detail in mv_store_errmsg(). */
MV_API MV_MUST_CHECK int mv_store_inspect(mv_store *store, struct mv_store_inspection *out);

/* ---- Prometheus text exposition ------------------------------------------------------- */

/* Label series with the user's address (and mailbox names). Without it, addresses never
 * appear: several stores are aggregated (counts, sums, maxima) and one store's series carry
 * no label at all. Addresses and mailbox names are personal data; a hash of an address is
 * still linkable and guessable, so it is not offered. */
#define MV_PROMETHEUS_USER_LABELS 0x01u

/* Collects stores, then writes the text format 0.0.4 (HELP and TYPE lines, mailvault_
 * prefix, units in names) for a node exporter's textfile collector. add takes a keyless
 * description and, if the store was opened, its inspection (NULL otherwise); add_mailbox
 * adds a mailbox's counts (written only with MV_PROMETHEUS_USER_LABELS). write writes the
 * whole text to fd. begin/add/add_mailbox return MV_OK, MV_EINVAL or MV_ENOMEM; write
 * returns MV_OK or MV_EIO. end frees and sets *p to NULL (NULL is fine). */
typedef struct mv_prometheus mv_prometheus;
MV_API MV_MUST_CHECK int mv_prometheus_begin(unsigned flags, mv_prometheus **p);
MV_API MV_MUST_CHECK int mv_prometheus_add(mv_prometheus *p,
                                           const struct mv_store_file *file,
                                           const struct mv_store_inspection *inspection);
MV_API MV_MUST_CHECK int
mv_prometheus_add_mailbox(mv_prometheus *p, const char *address, const struct mv_mailbox_info *m);
MV_API MV_MUST_CHECK int mv_prometheus_write(mv_prometheus *p, int fd);
MV_API void mv_prometheus_end(mv_prometheus **p);

/* ---- Maintenance ---------------------------------------------------------------------- */

/* Called during long steps (VACUUM, quick_check): stage names the step, done counts work
 * units, total is 0 when unknown. Returns nothing; it cannot cancel. */
typedef void (*mv_progress_fn)(void *arg, const char *stage, uint64_t done, uint64_t total);

#define MV_MAINTAIN_NO_VACUUM    0x01u /* decide and report, never VACUUM */
#define MV_MAINTAIN_FORCE_VACUUM 0x02u /* VACUUM whatever the thresholds (disk check stays) */
#define MV_MAINTAIN_QUICK_CHECK  0x04u /* run quick_check now, whenever the last one ran */

struct mv_maintain_options {
    uint32_t vacuum_free_percent;  /* VACUUM when free pages exceed this % of the file: 25 */
    uint32_t vacuum_slack_percent; /* ... or slack pages exceed this % of the pages: 15 */
    uint32_t quick_check_days;     /* run quick_check if the last is older; 0: every time */
    unsigned flags;                /* MV_MAINTAIN_* */
    mv_progress_fn progress;       /* may be NULL */
    void *progress_arg;
    /* For a server that maintains stores as it goes (mailvaultd): the decision whether a run
     * is due is made here, next to the record it reads and writes, so every caller applies
     * the same rule; a getter for the record would leave each caller to redo the clock
     * arithmetic. Both are 0 (off) by default, as `mailvault maintain` wants. */
    uint32_t min_interval_s;    /* do nothing and report MV_MAINTAIN_SKIPPED_RECENT if the last
                                   completed maintenance recorded in the store is younger than
                                   this (a record in the future, a clock set back, counts as due);
                                   0: always run */
    uint64_t store_bytes_max;   /* do nothing and report MV_MAINTAIN_SKIPPED_SIZE if the store
                                   (file + WAL) is larger (VACUUM and quick_check read all of it);
                                   checked after min_interval_s; 0: no limit */
    uint32_t changes_keep_days; /* expunges older than this leave the change log (it grows with
                                   every expunge otherwise); QRESYNC's VANISHED (EARLIER) for a
                                   client further behind then comes from mv_message_expunged_since
                                   as MV_ELIMIT (mailvaultd answers from the mailbox: every UID
                                   the client names that it no longer holds). 0: keep them all.
                                   Default 90 */
};
#define MV_MAINTAIN_OPTIONS_INIT                                                                   \
    {                                                                                              \
        25, 15, 7, 0, NULL, NULL, 0, 0, 90                                                         \
    }

#define MV_MAINTAIN_SKIPPED_NONE   0 /* the maintenance ran */
#define MV_MAINTAIN_SKIPPED_RECENT 1 /* last run younger than min_interval_s: nothing done */
#define MV_MAINTAIN_SKIPPED_SIZE   2 /* store over store_bytes_max: nothing done */

#define MV_VACUUM_NOT_NEEDED   0 /* below both thresholds */
#define MV_VACUUM_DONE         1
#define MV_VACUUM_REFUSED_DISK 2 /* needed, but free disk < 2 x the store */
#define MV_VACUUM_SKIPPED      3 /* needed, but MV_MAINTAIN_NO_VACUUM */

#define MV_QUICK_CHECK_NOT_DUE 0
#define MV_QUICK_CHECK_OK      1
#define MV_QUICK_CHECK_FAILED  2

struct mv_maintain_report {
    int checkpoint_busy; /* PASSIVE checkpoint: 1 if readers or a writer blocked it */
    int64_t checkpoint_log_frames;
    int64_t checkpoint_done_frames;
    int wal_truncated; /* the store was idle: a TRUNCATE checkpoint emptied the WAL */
    uint64_t page_count;
    uint64_t freelist_count;
    double free_ratio;     /* freelist_count / page_count */
    double slack_ratio;    /* slack: the pages the unused bytes inside each b-tree add up to
                              (what VACUUM gives back), over page_count; read with dbstat
                              (-1 without it). With auto_vacuum=FULL the freelist is empty
                              after every commit, so deleted mail leaves slack, not free pages:
                              this is the fragmentation such a store has */
    int vacuum;            /* MV_VACUUM_* */
    uint64_t bytes_before; /* file + WAL before and after */
    uint64_t bytes_after;
    uint64_t disk_free_bytes;    /* free space of the store's directory (statvfs) */
    int quick_check;             /* MV_QUICK_CHECK_* */
    int64_t quick_check_last_at; /* before this run; 0: never */
    int skipped;                 /* MV_MAINTAIN_SKIPPED_*; when set, only bytes_before and
                                    maintain_last_at are filled in */
    int64_t maintain_last_at;    /* the last completed maintenance before this call (Unix
                                    seconds, the store's record); 0: never */
    int fts_move_failed;         /* 1: the full-text move a migration left (schema 9) cannot
                                    go on (its old index is damaged); the other steps ran and
                                    the call returns MV_ECORRUPT; mv_store_repair() ends it */
    uint64_t changes_pruned;     /* change-log rows deleted: older than changes_keep_days, or
                                    of mailboxes deleted since */
    uint64_t parts_counted;      /* attachments stored before schema version 15 whose line
                                    counts were counted now (their messages' skeletons can then
                                    stand in for them: a first FETCH BODYSTRUCTURE, a preview) */
};

/* Maintains an open store, safe while other connections deliver and read: the purge of
 * expunged bodies; the change log's expunges older than changes_keep_days (in batches of
 * their own transactions); the line counts of attachments stored before schema version 15
 * (32 a transaction: out->parts_counted); PRAGMA optimize
 * (analysis_limit=400); a PASSIVE checkpoint whose result says whether readers block it;
 * a TRUNCATE checkpoint if that one found the store idle (it waits at most 100 ms, never
 * the 30 s busy timeout); VACUUM when the thresholds of opts say so and the free disk is at
 * least twice the store (VACUUM holds the write lock while it runs: deliveries wait); a
 * quick_check when the last one recorded in the meta table is older than quick_check_days.
 * Each run that gets through its steps (MV_OK, MV_ENOSPC, MV_ECORRUPT) records its time in
 * the store; with opts->min_interval_s or opts->store_bytes_max a call may instead do
 * nothing, return MV_OK and say why in out->skipped. opts may be NULL for defaults. No search
 * or list iterator of the handle may be open (VACUUM resets the handle's statements).
 * $MAILVAULT_TEST_FREE_BYTES, if set, replaces the free disk the statvfs probe reports (a
 * test hook). *out is filled as far as the work got.
 * A quick_check that a failed read or allocation stopped, or whose findings came with a
 * failed read (SQLite reports a page it cannot get as a finding), records nothing and
 * returns MV_EIO or MV_ENOMEM.
 * Returns MV_OK; MV_ENOSPC (VACUUM needed but refused: the rest was done); MV_ECORRUPT
 * (quick_check found problems, or the full-text move of a migration cannot go on:
 * out->fts_move_failed, the rest was done, mv_store_repair() ends the move); MV_EINVAL (read-only
 * handle, NULL out, bad thresholds); MV_EBUSY, MV_EIO, MV_ENOMEM. Detail in mv_store_errmsg(). */
MV_API MV_MUST_CHECK int mv_store_maintain(mv_store *store,
                                           const struct mv_maintain_options *opts,
                                           struct mv_maintain_report *out);

/* ---- Checks --------------------------------------------------------------------------- */

/* Receives one problem: what names the check ("integrity", "page", "refcount", ...),
 * detail says what is wrong. Both strings are valid during the call only. */
typedef void (*mv_problem_fn)(void *arg, const char *what, const char *detail);

struct mv_check_report {
    uint64_t pages_read;      /* pages of the database file authenticated */
    uint64_t wal_frames_read; /* WAL frames of the current generation authenticated */
    uint32_t problems;        /* problems found (at most the first 1000 are reported) */
};

/* Checks an open store: PRAGMA integrity_check; authentication of every page of the file
 * and every frame of the WAL's current generation through the VFS (free pages included);
 * PRAGMA foreign_key_check; the store's invariants (reference counts of bodies and
 * attachments equal their uses, uidnext above every uid, each mailbox's counters (messages,
 * unseen, bytes) equal what its messages say, highestmodseq at least every modseq, one
 * full-text row per body (but those of the full-text backlog, see mv_store_index_backlog)
 * and none else, every keyword a message carries defined by its mailbox ("keywords"; see
 * limits.mailbox_keywords_max), every body and attachment has its bytes, no memo of a body
 * that is gone ("memos"), every attachment's line counts are its bytes' ("counts": counted
 * again; what a structure description from the skeleton relies on), every body in use has its
 * header fields row, every index the store's statements name (INDEXED BY) is there: without it they
 * fail); and FTS5's own integrity-check (writable handles only: it takes the write lock). Each
 * problem goes to problem (may be NULL). Returns MV_OK (no problem), MV_ECORRUPT (problems found;
 * see out->problems), MV_EINVAL, MV_EBUSY, MV_ENOMEM, MV_EIO (also when problems were found and the
 * disk failed a read meanwhile: a page SQLite cannot get is reported as a problem with no cause, so
 * such findings may be the disk's, not damage in the data). integrity_check runs a second time when
 * it reports such a page with no failed read, and only the second run's findings count: a damaged
 * page fails again, a page cache short of memory a moment ago does not. */
MV_API MV_MUST_CHECK int mv_store_check(mv_store *store,
                                        mv_problem_fn problem,
                                        void *problem_arg,
                                        struct mv_check_report *out);

/* What mv_store_repair() did. */
struct mv_repair_report {
    uint64_t fts_rows;              /* rows of the full-text index after its rebuild */
    uint32_t fts_orphans_removed;   /* full-text rows of bodies that no longer exist */
    uint32_t counters_fixed;        /* mailboxes whose message/unseen/size counters were wrong */
    uint32_t uidnext_fixed;         /* mailboxes whose uidnext was not above their top UID */
    uint32_t modseq_fixed;          /* mailboxes whose highestmodseq was below a message's */
    uint32_t refcounts_fixed;       /* bodies and attachments whose reference count was wrong */
    uint32_t headers_rebuilt;       /* bodies whose header fields row (body_headers) was made
                                       again from their stored bytes */
    uint32_t fts_rows_added;        /* bodies without a full-text row given one from their bytes */
    uint32_t header_copies_rebuilt; /* bodies whose copy of their header unit in the bodies
                                       row (schema version 11) was not their stored header:
                                       made again from the stored bytes, once the whole
                                       message checks out (a damaged body's is left) */
    uint32_t bodies_unreadable;     /* bodies whose bytes were wanted but could not be read or
                                       parsed (damaged: no SHA-256 match, a broken frame): left
                                       as they are, mv_store_check() still reports them */
    uint32_t keywords_defined;      /* keywords messages carried that their mailbox did not
                                       define (schema version 13): defined */
    uint32_t memos_removed;         /* memos (schema version 14) of bodies that no longer
                                       exist, and mailbox memos (version 16) of mailboxes that
                                       no longer exist or have another UIDVALIDITY: deleted */
    uint32_t part_counts_fixed;     /* attachments whose recorded line counts (schema version
                                       15) were not their bytes': counted again */
};

/* Rebuilds the data the store derives from its messages, in one transaction: the full-text
 * index (FTS5 'rebuild' from the text it holds, after deleting rows of bodies that no longer
 * exist: its structure record and totals are rewritten too), the per-mailbox counters,
 * uidnext and highestmodseq (raised, never lowered), the reference counts of bodies and
 * attachments that are in use, a body no message uses set to 0 (mv_store_purge() then
 * deletes it, as after an expunge), and the header fields row of a body that lost it (made
 * again from the body's bytes as append makes it, as is a missing full-text row; a body whose
 * bytes are damaged is left without them and counted, and the rest is repaired), and first
 * an index the store's statements name that the store lost (made again as the schema defines
 * it). Messages, flags and bytes are never changed. For after mv_store_check() reported fts,
 * counters, uidnext, modseq, refcount, keywords, memos, headers or index problems (a keyword
 * a message carries that its mailbox does not define is defined; a memo of a gone body is
 * deleted); run the check again afterwards:
 * what this cannot repair (a damaged page, missing bytes, an attachment nothing uses) it still
 * reports. A writable handle only. Returns MV_OK with *out
 * filled; MV_EINVAL (read-only handle, NULL out); MV_EBUSY; MV_ECORRUPT (a damaged page
 * stopped it: nothing changed); MV_EIO; MV_ENOSPC; MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_store_repair(mv_store *store, struct mv_repair_report *out);

/* ---- Doctor: the deployment checklist -------------------------------------------------- */

#define MV_DOCTOR_OK   0
#define MV_DOCTOR_WARN 1
#define MV_DOCTOR_FAIL 2

struct mv_doctor_options {
    const char *root;         /* NULL: $MAILVAULT_ROOT, else "./var/mail" */
    uint64_t wal_bytes_max;   /* a WAL larger than this FAILs; default 64 MiB */
    uint32_t files_per_store; /* descriptors an open store needs (db, WAL, shm, temp): 4 */
    int fix; /* non-zero: remove the stale staging directories of killed `store import`s
                (no live import holds their lock, unwritten for an hour) instead of
                reporting them; reported as OK "staging: ... removed" */
};
#define MV_DOCTOR_OPTIONS_INIT                                                                     \
    {                                                                                              \
        NULL, (uint64_t)64 << 20, 4, 0                                                             \
    }

/* One result: status MV_DOCTOR_*, check a short name, detail the finding. Valid during the
 * call only. */
typedef void (*mv_doctor_fn)(void *arg, int status, const char *check, const char *detail);

struct mv_doctor_summary {
    uint32_t ok;
    uint32_t warn;
    uint32_t fail;
    uint32_t stores;
};

/* Runs the deployment checklist (docs/OPERATIONS.md, "Doctor"), keyless: the cipher
 * known-answer self-test; SQLite and OpenSSL versions and SQLite compile options (FTS5,
 * threads, dbstat); the root; every domain's tmp/ (exists, writable, same filesystem as
 * its stores); free disk at least twice the largest store ($MAILVAULT_TEST_FREE_BYTES
 * replaces it, a test hook); every store's header; WAL sizes against wal_bytes_max;
 * permissions (0700 directories, 0600 files); RLIMIT_NOFILE against files_per_store per
 * store; staging directories of `store import`s that were killed (no live import holds
 * them; with fix set they are removed, the only change the doctor ever makes). Each
 * result goes to fn. Returns MV_OK when the checks ran (failures are in *out),
 * MV_EINVAL or MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_doctor_run(const struct mv_doctor_options *opts,
                                       mv_doctor_fn fn,
                                       void *fn_arg,
                                       struct mv_doctor_summary *out);

/* ---- Query plans ---------------------------------------------------------------------- */

struct mv_explain_row {
    const char *sql;       /* a statement the store prepared, as it prepared it */
    const char *operation; /* the operation that first prepared it ("append", ...) */
    const char *plan;      /* EXPLAIN QUERY PLAN, one line per step, indented by depth */
    int scans_messages;    /* 1 if a step is "SCAN messages" or "SCAN <alias of messages>"
                              (a full scan, also when it walks an index in full), or a
                              correlated subquery searches messages by a range (a part
                              of the mailbox once per outer row: quadratic) */
    int scan_expected;     /* 1 if that scan is the documented cost of the operation: a
                              search over every mailbox by criteria no index can answer
                              (substrings, flags, sizes) reads every message */
};

/* Collects the SQL of every statement the store runs, from a scratch store (created in
 * $TMPDIR, else /tmp, under a random password, removed again) on which every operation is
 * exercised: mailbox create/rename/subscribe/list/get/delete, append, fetch, get, flags,
 * the message listing, copy, move, expunge, search with each criterion, stats, export,
 * import and the sealed queue. The statements are read off the connection (sqlite3_next_stmt), so
 * there is no second copy of the SQL to drift. Each is then planned on store (its statistics decide
 * the plans) or, if store is NULL, on the scratch store. next returns 1 with *row (strings
 * valid until the next call), 0 at the end; end frees and sets *e to NULL. begin returns
 * MV_OK, MV_EIO, MV_ENOMEM or a store error, with the reason in errmsg. */
typedef struct mv_explain mv_explain;
MV_API MV_MUST_CHECK int
mv_explain_begin(mv_store *store, mv_explain **e, char *errmsg, size_t errmsg_size);
MV_API int mv_explain_next(mv_explain *e, struct mv_explain_row *row);
MV_API void mv_explain_end(mv_explain **e);

/* ======================================================================================== */
/* Operations: backup, restore, password change                                             */
/* ======================================================================================== */
/*
 * A backup is a still-encrypted, compacted copy of one store taken online (VACUUM INTO from
 * one read transaction: deliveries go on), with a manifest beside it, both in a directory:
 *   DIR/<address>-<YYYYMMDDTHHMMSS.mmm>Z.mvbackup        the snapshot (an encrypted SQLite
 *                                                         file, same password, new salt)
 *   DIR/<address>-<YYYYMMDDTHHMMSS.mmm>Z.mvbackup.json   the manifest (plaintext JSON)
 * The manifest holds the address, the file name, its size and SHA-256, the cipher, page size
 * and count, schema version, counts (messages, mailboxes), the highest modseq, the sum of
 * the mailboxes' uidnext, and the creation time. It holds no mailbox name, subject or
 * address other than the store's own: it sits unencrypted beside the snapshot.
 * mv_backup_write_keyless() makes the passwordless kind (`backup --all`): the database file
 * and its WAL copied as ciphertext while the store is frozen, DIR/<...>.mvbackup-wal beside
 * it, a manifest with "keyless": 1 and no counts. Verify and restore take both kinds.
 *
 * A restore or a password change writes a complete new file beside the store, verifies it
 * and renames it over the store's file. Both need every handle on the store closed: they
 * hold the store's lock file (ROOT/<domain>/<localpart>.lock) exclusively, which every
 * mv_store_open() holds shared for its handle's lifetime. Either leaves the old password or
 * the new one able to open a complete store whenever it is interrupted (SIGKILL, power
 * loss); files left by an interrupted run are removed by the next one.
 *
 * Passwords are copied nowhere but into memory that is wiped after use. The new key reaches
 * SQLite once as a hex-encoded URI parameter of the VACUUM INTO target; the library wipes
 * its own copies, SQLite frees its copies (without wiping) when the statement ends.
 */

#define MV_BACKUP_KEEP_DEFAULT      7 /* snapshots of one store kept in a directory */
#define MV_BACKUP_KEEP_MAX          1000
#define MV_OPS_LOCK_WAIT_DEFAULT_MS 10000 /* how long restore/passwd wait for handles */

struct mv_ops_options {
    uint32_t keep;           /* mv_backup_write: snapshots of this store kept in the directory,
                                the new one included (older ones are removed only after the
                                new one verified); 0: MV_BACKUP_KEEP_DEFAULT */
    uint32_t lock_wait_ms;   /* restore, passwd: how long to wait for open handles to close;
                                0: MV_OPS_LOCK_WAIT_DEFAULT_MS */
    mv_cipher cipher;        /* mv_store_passwd: the new file's cipher; AUTO keeps the current
                                one (chacha20 upgrades an aes256cbc store) */
    mv_progress_fn progress; /* stages "copy" (bytes written / estimated total) and "verify";
                                NULL: none */
    void *progress_arg;
};
#define MV_OPS_OPTIONS_INIT                                                                        \
    {                                                                                              \
        0, 0, MV_CIPHER_AUTO, NULL, NULL                                                           \
    }

/* What a manifest says (and what a verification found in the snapshot itself). */
struct mv_backup_info {
    char address[MV_ADDRESS_MAX + 1];
    char path[MV_PATH_MAX];          /* the snapshot file */
    char manifest_path[MV_PATH_MAX]; /* path + ".json" */
    uint64_t size_bytes;
    char sha256[65]; /* lowercase hex of the snapshot's bytes */
    mv_cipher cipher;
    uint32_t page_size;
    uint64_t page_count;
    int schema_version;
    uint64_t messages;
    uint32_t mailboxes;
    uint64_t highestmodseq;  /* the largest of the mailboxes' */
    uint64_t uidnext_sum;    /* the sum of the mailboxes' uidnext: grows with every append */
    int64_t created;         /* Unix seconds */
    uint32_t pruned;         /* mv_backup_write: older snapshots it removed */
    int keyless;             /* 1: written by mv_backup_write_keyless(): the counts above are
                                0 (unknown without the key), the WAL is kept beside it */
    uint64_t wal_size_bytes; /* keyless: the copied WAL (path + "-wal"); 0: none */
    char wal_sha256[65];
    uint64_t wal_frames;  /* keyless: valid frames in the copied WAL */
    uint64_t wal_commits; /* keyless: of which commit frames */
};

/* Writes a snapshot of the store of address into dest_dir (created 0700 if missing), as laid
 * out above: opens the store (which moves queued deliveries in first), runs VACUUM INTO a
 * temporary name in dest_dir (the snapshot point is the start of that read transaction:
 * commits after it are not in the snapshot), fsyncs it, opens the copy with the password
 * and runs PRAGMA quick_check, computes its SHA-256, writes the manifest the same way
 * (temporary name, fsync, rename), renames the snapshot into place, fsyncs the directory,
 * and then removes the oldest snapshots of this address beyond opts->keep (with their
 * manifests), and temporary files left by interrupted backups. store_opts gives the root
 * and kdf_iter; opts may be NULL. *info_out (may be NULL) describes the new snapshot.
 * Returns MV_OK; MV_ENOTFOUND (no store); MV_EAUTH (wrong password); MV_EINVAL (bad
 * address, keep over MV_BACKUP_KEEP_MAX, dest_dir not a directory); MV_ECORRUPT (the copy
 * failed its check: nothing kept); MV_EBUSY (a restore or password change holds the store);
 * MV_ENOSPC; MV_EIO; MV_ENOMEM; MV_EUNSUPPORTED (an SQLite built without URI support).
 * errmsg (errmsg_size bytes, may be NULL) says why. On failure no new file is left in
 * dest_dir and no old snapshot is removed. */
MV_API MV_MUST_CHECK int mv_backup_write(const char *address,
                                         const void *password,
                                         size_t password_len,
                                         const struct mv_store_options *store_opts,
                                         const char *dest_dir,
                                         const struct mv_ops_options *opts,
                                         struct mv_backup_info *info_out,
                                         char *errmsg,
                                         size_t errmsg_size);

/* Writes a snapshot of the store of address without its password, for backups of every
 * store at once: the ciphertext as it is on disk, the database file and its WAL
 * (DIR/<address>-<stamp>.mvbackup and ...mvbackup-wal), made consistent by freezing the
 * store while they are copied: a read lock on the database file's SHARED range (no
 * connection can take the EXCLUSIVE lock under which a last close checkpoints without WAL
 * locks) and write locks on the WAL_WRITE and WAL_CKPT locks of its -shm file (no writer can
 * commit, no checkpoint can move frames into the file), taken as SQLite's unix VFS takes
 * them, as open-file-description locks (so they also hold against connections in this
 * process). Readers go on; writers wait (their busy timeout) for the copy to finish. The
 * store's lock file is held shared meanwhile, so no restore or password change runs. The
 * copies are fsync'd, re-read and checked structurally: header bytes 16..23 of a mailvault
 * file (page size, reserve bytes of a known cipher), a whole number of pages, the WAL's
 * header and frame checksum chain (which the VFS computes over ciphertext), their SHA-256
 * against what was read while frozen. Nothing can check the pages themselves without the
 * key: mv_backup_verify() and mv_backup_restore() do, with the password (restore replays the
 * WAL into the restored file). Manifest, generations and temporary names as for
 * mv_backup_write(); the manifest says "keyless" and has no counts. opts->lock_wait_ms
 * bounds the wait for the freeze (0: MV_OPS_LOCK_WAIT_DEFAULT_MS). Returns MV_OK;
 * MV_ENOTFOUND (no store); MV_EBUSY (the store stayed locked: a long transaction, an
 * exclusive-mode connection, a restore); MV_ECORRUPT (the file is not a mailvault store, or
 * the copy differs from what was read); MV_EINVAL; MV_ENOSPC; MV_EIO; MV_ENOMEM. Safe while
 * this process has the store open: the copy's descriptors of the database and -shm are kept
 * open (their own locks released) until the store's last close here, since closing them
 * would drop that handle's SQLite locks. A store open of this process waits for the copy
 * to end. */
MV_API MV_MUST_CHECK int mv_backup_write_keyless(const char *address,
                                                 const struct mv_store_options *store_opts,
                                                 const char *dest_dir,
                                                 const struct mv_ops_options *opts,
                                                 struct mv_backup_info *info_out,
                                                 char *errmsg,
                                                 size_t errmsg_size);

/* Verifies the snapshot at backup_path against its manifest (backup_path + ".json"): the
 * size and SHA-256 match (of its -wal too, for a keyless one), the password opens it (a
 * keyless snapshot's WAL is read, not changed; a -shm this creates is removed), PRAGMA quick_check
 * passes, and its page count, schema version and counts match the manifest. Changes nothing.
 * *info_out (may be NULL) gets the manifest's values. Returns MV_OK; MV_ENOTFOUND (snapshot or
 * manifest missing); MV_ECORRUPT (a mismatch, a damaged file or manifest); MV_EAUTH (wrong
 * password); MV_EIO; MV_ENOMEM. */
MV_API MV_MUST_CHECK int mv_backup_verify(const char *backup_path,
                                          const void *password,
                                          size_t password_len,
                                          const struct mv_store_options *store_opts,
                                          struct mv_backup_info *info_out,
                                          char *errmsg,
                                          size_t errmsg_size);

/* Replaces the store of address with the snapshot at backup_path: verifies it as
 * mv_backup_verify() does (and that its manifest names address), copies it beside the store
 * (fsync), verifies the copy again (SHA-256, password, quick_check), takes the store's lock
 * exclusively (every handle must be closed), checkpoints and closes the current store so no
 * WAL of it can be replayed onto the new file, renames the copy over the store's file and
 * fsyncs the directory. The store need not exist (a lost store is restored); when it does,
 * its file stays untouched until the rename. The password is the snapshot's (the one the
 * store had when it was taken); the current store's password is not needed. Afterwards the
 * store is opened once, which rewrites the public delivery key from the restored store and
 * moves queued deliveries in. Returns MV_OK; MV_EINVAL (bad address, a backup of another
 * address); MV_ENOTFOUND; MV_ECORRUPT; MV_EAUTH; MV_EBUSY (the store stayed in use for
 * opts->lock_wait_ms); MV_ENOSPC; MV_EIO; MV_ENOMEM. On any failure the store's files are
 * byte for byte as before. */
MV_API MV_MUST_CHECK int mv_backup_restore(const char *address,
                                           const void *password,
                                           size_t password_len,
                                           const struct mv_store_options *store_opts,
                                           const char *backup_path,
                                           const struct mv_ops_options *opts,
                                           char *errmsg,
                                           size_t errmsg_size);

/* Changes the password of the store of address (new key, new salt; opts->cipher may change
 * the cipher): takes the store's lock exclusively, opens the store with old_password,
 * checkpoints its WAL into the file, writes a rekeyed copy beside it (VACUUM INTO), fsyncs
 * it, verifies it with new_password (quick_check, same counts as the store), switches the
 * copy to WAL mode, closes the store (its WAL checkpointed and removed), renames the copy
 * over the store's file and fsyncs the directory. Killed at any instant, exactly one of the
 * two passwords opens a complete store (the comment in src/ops/ops_passwd.c walks through
 * every step). store_opts gives the root and kdf_iter (the same iterations are used for
 * the new key); opts may be NULL. Returns MV_OK; MV_EINVAL (bad address, empty or overlong
 * new password, cipher none/sqlcipher-legacy); MV_ENOTFOUND; MV_EAUTH (wrong old password);
 * MV_EBUSY (the store stayed in use); MV_ECORRUPT (the copy failed verification: the store
 * is unchanged); MV_ENOSPC; MV_EIO; MV_ENOMEM; MV_EUNSUPPORTED (SQLite without URI
 * support). */
MV_API MV_MUST_CHECK int mv_store_passwd(const char *address,
                                         const void *old_password,
                                         size_t old_password_len,
                                         const void *new_password,
                                         size_t new_password_len,
                                         const struct mv_store_options *store_opts,
                                         const struct mv_ops_options *opts,
                                         char *errmsg,
                                         size_t errmsg_size);

#ifdef __cplusplus
}
#endif
#endif /* MAILVAULT_H */
