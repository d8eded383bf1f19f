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
#define MV_API         __attribute__((visibility("default")))
#define MV_MUST_CHECK  __attribute__((warn_unused_result))
#else
#define MV_API
#define MV_MUST_CHECK
#endif

/* ---- Versions -------------------------------------------------------------------------- */

#define MV_VERSION_STRING "0.1.0"

/* The library's version, "MAJOR.MINOR.PATCH". Static storage. */
MV_API const char *mv_version(void);

/* ---- Error codes ----------------------------------------------------------------------- */

#define MV_OK          0
#define MV_ERROR       (-1)  /* an error that fits no class below (detail in the message) */
#define MV_ENOMEM      (-2)  /* out of memory */
#define MV_EINVAL      (-3)  /* invalid argument: bad cipher name, malformed key, bad path */
#define MV_EAUTH       (-4)  /* wrong password, or not a mailvault/SQLite3MC database */
#define MV_ECORRUPT    (-5)  /* a page failed authentication, or the file is damaged */
#define MV_EIO         (-6)  /* the operating system refused a read, write or sync */
#define MV_EBUSY       (-7)  /* locked by another connection beyond the busy timeout */
#define MV_ENOTFOUND   (-8)  /* no such file, store, mailbox or message */
#define MV_EEXISTS     (-9)  /* already exists */
#define MV_ELIMIT      (-10) /* a configured limit was hit; the message names the limit */
#define MV_ENOSPC      (-11) /* not enough disk space */
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
#define MV_DB_OPTIONS_INIT {MV_CIPHER_AUTO, 0, 0, 0, 0, 0}

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

#ifdef __cplusplus
}
#endif
#endif /* MAILVAULT_H */
