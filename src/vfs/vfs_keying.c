/*
 * vfs_keying.c -- giving a main database its key: PRAGMA cipher/key/hexkey/kdf_iter/legacy
 * (through SQLITE_FCNTL_PRAGMA, as SQLite3 Multiple Ciphers takes them), URI parameters,
 * and the MV_FCNTL_KEY file control behind mv_db_open().
 *
 * IMPLEMENTATION NOTES
 *   - The cipher of an existing file is recognised from its plain header bytes: the cipher
 *     registry (crypt_cipher_by_reserve) maps reserve 32 to chacha20, 80 to sqlcipher, 0 to
 *     aes256cbc, and nothing else to anything. Only real SQLCipher 4 files (legacy=4), whose
 *     header is encrypted, need PRAGMA cipher and legacy first. So one KDF runs per open.
 *   - The key is proven at once by authenticating page 1. A rejected key blocks every write
 *     and hides hot journals (vfs_register.c), so a wrong password never changes a byte.
 *   - SQLITE_FCNTL_PRAGMA runs while the statement is prepared, before SQLite reads a page,
 *     which is what lets the key arrive in time.
 *
 * LIMITATIONS
 *   - No rekey through PRAGMA: SQLite 3.40's public API gives no pager access. Rekeying is
 *     a copy into a new file plus an atomic rename (the operations layer).
 */
#include "vfs/vfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MV_KEY_VERIFY_TRIES 4 /* page 1 re-read if a concurrent checkpoint tore it */

static int mv_read_header(struct mv_file *f, uint8_t hdr[24], sqlite3_int64 *size)
{
    int rc = f->lower->pMethods->xFileSize(f->lower, size);
    if (rc != SQLITE_OK) {
        return rc;
    }
    memset(hdr, 0, 24);
    if (*size < 24) {
        return SQLITE_OK;
    }
    return f->lower->pMethods->xRead(f->lower, hdr, 24, 0);
}

/* Why a read of the lower file failed, for a message; call it before anything else can
 * change errno. The unix VFS leaves the failed call's errno behind; a short read (the file
 * shrank under us) has none. */
static const char *mv_read_failure(int rc)
{
    if (rc == SQLITE_NOMEM) {
        return "out of memory";
    }
    if (rc == SQLITE_IOERR_SHORT_READ) {
        return "the file ended early";
    }
    return (rc & 0xff) == SQLITE_IOERR && errno != 0 ? strerror(errno) : "I/O error";
}

/* Sets the reserve bytes of a new, keyed file through its connection. */
static void mv_apply_reserve(struct mv_file *f)
{
    struct mv_codec *c = f->codec;
    if (c->db == NULL || c->crypt == NULL) {
        return;
    }
    int n = (int)crypt_reserve_bytes(crypt_ctx_cipher(c->crypt));
    const char *schema;
    for (int i = 0; (schema = sqlite3_db_name(c->db, i)) != NULL; i++) {
        sqlite3_file *fp = NULL;
        if (sqlite3_file_control(c->db, schema, SQLITE_FCNTL_FILE_POINTER, &fp) == SQLITE_OK &&
            fp == &f->base) {
            (void)sqlite3_file_control(c->db, schema, SQLITE_FCNTL_RESERVE_BYTES, &n);
            return;
        }
    }
}

void mv_keying_attach(struct mv_file *f, sqlite3 *db)
{
    f->codec->db = db;
    sqlite3_int64 size = 0;
    if (f->codec->crypt != NULL && f->lower->pMethods->xFileSize(f->lower, &size) == SQLITE_OK &&
        size == 0) {
        mv_apply_reserve(f);
    }
}

/* Picks the cipher and page size of an existing encrypted file from its header. */
static int mv_choose_existing(struct mv_codec *c,
                              const uint8_t hdr[24],
                              int *cipher,
                              uint32_t *page_size,
                              char *err,
                              size_t errlen)
{
    if (!mv_header_plain_valid(hdr)) {
        if (c->cipher == CRYPT_CIPHER_SQLCIPHER && c->legacy == 4) {
            *cipher = CRYPT_CIPHER_SQLCIPHER;
            *page_size = 4096;
            return SQLITE_OK;
        }
        snprintf(err, errlen,
                 "wrong password, or not a mailvault/SQLite3MC database "
                 "(unrecognised header; a real SQLCipher 4 file needs "
                 "PRAGMA cipher='sqlcipher' and PRAGMA legacy=4 first)");
        return SQLITE_NOTADB;
    }
    int detected = crypt_cipher_by_reserve(mv_header_reserve(hdr));
    *page_size = mv_header_page_size(hdr);
    *cipher = c->cipher != 0 ? c->cipher : detected;
    if (*cipher == 0) {
        snprintf(err, errlen,
                 "unrecognised encryption: the header reserves %u bytes per page; "
                 "say which cipher with PRAGMA cipher",
                 hdr[20]);
        return SQLITE_NOTADB;
    }
    if (hdr[20] < crypt_reserve_bytes(*cipher) || (c->legacy != 0 && detected != 0)) {
        snprintf(err, errlen, "cipher %s cannot read this file (it reserves %u bytes per page)",
                 mv_cipher_name((mv_cipher)*cipher), hdr[20]);
        return SQLITE_NOTADB;
    }
    return SQLITE_OK;
}

/* Authenticates page 1 with the new key. A failure is retried only while page 1 keeps
 * changing under us (a concurrent writer may have torn the read); a stable failure is a
 * wrong key, answered at once. */
static int mv_verify_page1(struct mv_file *f, uint32_t page_size)
{
    struct mv_codec *c = f->codec;
    int rc = mv_codec_scratch(c, page_size);
    uint8_t *previous = rc == SQLITE_OK ? malloc(page_size) : NULL;
    if (rc == SQLITE_OK && previous == NULL) {
        rc = SQLITE_NOMEM;
    }
    int read_errno = 0;
    for (int i = 0; rc == SQLITE_OK && i < MV_KEY_VERIFY_TRIES; i++) {
        rc = f->lower->pMethods->xRead(f->lower, c->scratch, (int)page_size, 0);
        if (rc != SQLITE_OK) {
            read_errno = errno;
            rc = rc == SQLITE_IOERR_SHORT_READ ? SQLITE_CORRUPT : rc;
            break;
        }
        if (i > 0 && memcmp(previous, c->scratch, page_size) == 0) {
            rc = SQLITE_NOTADB; /* the same bytes twice: not a torn read */
            break;
        }
        memcpy(previous, c->scratch, page_size);
        if (crypt_page_decrypt(c->crypt, 1, c->scratch, page_size, CRYPT_PAGE_DB_HEADER) ==
            CRYPT_OK) {
            break;
        }
        rc = i + 1 < MV_KEY_VERIFY_TRIES ? SQLITE_OK : SQLITE_NOTADB;
    }
    free(previous);
    if (read_errno != 0) {
        errno = read_errno; /* the caller names the failed read's cause */
    }
    return rc;
}

/* Whether the newest committed copy of page 1 in the WAL (f->name + "-wal") authenticates:
 * for a file whose page 1 was torn by a checkpoint that failed half-way (a short write, a
 * full disk, a crash). SQLite reads page 1 from the WAL then, and the next checkpoint
 * rewrites it; refusing the key would lock the owner out of an intact store. The WAL is
 * walked as recovery walks it (sqlite_format.h); a break in the chain ends the walk. The
 * descriptor is closed again at once: SQLite's unix VFS holds no POSIX lock on a -wal
 * (its locks live in the -shm), so the close drops none. */
static int mv_page1_in_wal_authenticates(struct mv_file *f, uint32_t page_size)
{
    struct mv_codec *c = f->codec;
    char *path = sqlite3_mprintf("%s-wal", f->name);
    int fd = path != NULL ? open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    sqlite3_free(path);
    if (fd < 0) {
        return 0;
    }
    /* latest: the newest copy seen; committed: the newest one a commit frame covers. */
    uint8_t *latest = malloc(page_size), *committed = malloc(page_size);
    int have_latest = 0, have_committed = 0;
    struct mv_wal_walk w;
    memset(&w, 0, sizeof w);
    if (latest != NULL && committed != NULL && mv_wal_walk_begin(&w, fd, page_size) == 0) {
        while (mv_wal_walk_next(&w) == MV_WAL_STEP_FRAME) {
            if (w.pgno == 1) {
                memcpy(latest, w.frame + MV_WAL_FRAME_HEADER_BYTES, page_size);
                have_latest = 1;
            }
            if (w.commit && have_latest) {
                memcpy(committed, latest, page_size);
                have_committed = 1;
            }
        }
    }
    mv_wal_walk_end(&w);
    close(fd);
    int ok = have_committed && crypt_page_decrypt(c->crypt, 1, committed, page_size,
                                                  CRYPT_PAGE_DB_HEADER) == CRYPT_OK;
    free(latest);
    free(committed);
    return ok;
}

/* Whether a page of the file other than page 1 authenticates under the key page 1 refused:
 * then page 1 is damaged and the password right. A wrong key authenticates no page (a
 * damaged page passes by chance once in 2^128 for Poly1305, 2^256 for SQLCipher's HMAC), so
 * "wrong password" was the answer for a flipped bit in page 1 too, and an operator told
 * that would look for the wrong fault. aes256cbc pages carry no tag: it decrypts anything,
 * so the question has no answer there. Pages 2, 3 and the last are tried: every page the
 * file holds was written under this key, but a page the file was only extended by (zeros)
 * authenticates under none; a failed read counts as not authenticating. */
static int mv_other_page_authenticates(struct mv_file *f, uint32_t page_size, sqlite3_int64 size)
{
    struct mv_codec *c = f->codec;
    int cipher = crypt_ctx_cipher(c->crypt);
    sqlite3_int64 pages = size / page_size;
    if (cipher != CRYPT_CIPHER_CHACHA20 && cipher != CRYPT_CIPHER_SQLCIPHER) {
        return 0;
    }
    if (pages < 2 || mv_codec_scratch(c, page_size) != SQLITE_OK) {
        return 0;
    }
    const sqlite3_int64 tries[] = {2, 3, pages};
    for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        sqlite3_int64 pgno = tries[i];
        if (pgno > pages || (i == 2 && pgno <= 3) || pgno > UINT32_MAX) {
            continue;
        }
        if (f->lower->pMethods->xRead(f->lower, c->scratch, (int)page_size,
                                      (pgno - 1) * (sqlite3_int64)page_size) == SQLITE_OK &&
            crypt_page_decrypt(c->crypt, (uint32_t)pgno, c->scratch, page_size, 0) == CRYPT_OK) {
            return 1;
        }
    }
    return 0;
}

/* The verdict and message for a page 1 that mv_prove_page1() refused with rc, while the key
 * (key_name: "the password", "the store's key") is still set: damage if the key opens other
 * pages, notadb_msg for a key that opens nothing, a truncated file, or the failed read's
 * cause (call it before anything can change errno). Returns the SQLite code to report. */
static int mv_page1_refusal(struct mv_file *f,
                            int rc,
                            uint32_t page_size,
                            const char *key_name,
                            const char *notadb_msg,
                            char *err,
                            size_t errlen)
{
    sqlite3_int64 size = 0;
    if (rc == SQLITE_NOTADB && f->lower->pMethods->xFileSize(f->lower, &size) == SQLITE_OK &&
        mv_other_page_authenticates(f, page_size, size)) {
        snprintf(err, errlen,
                 "page 1 is damaged: %s opens the file's other pages but not page 1 (restore "
                 "the store from a backup)",
                 key_name);
        return SQLITE_CORRUPT;
    }
    if (rc == SQLITE_NOTADB) {
        snprintf(err, errlen, "%s", notadb_msg);
    } else if (rc == SQLITE_CORRUPT) {
        snprintf(err, errlen, "the file is truncated: page 1 is incomplete");
    } else {
        snprintf(err, errlen, "cannot read page 1: %s", mv_read_failure(rc));
    }
    return rc;
}

/* mv_verify_page1(), and when page 1 of the file does not authenticate, its committed copy
 * in the WAL (see above). */
static int mv_prove_page1(struct mv_file *f, uint32_t page_size)
{
    int rc = mv_verify_page1(f, page_size);
    if (rc == SQLITE_NOTADB && mv_page1_in_wal_authenticates(f, page_size)) {
        rc = SQLITE_OK;
    }
    return rc;
}

static int
mv_set_key(struct mv_file *f, const uint8_t *secret, size_t len, char *err, size_t errlen)
{
    struct mv_codec *c = f->codec;
    if (c->crypt != NULL && c->key_state == MV_KEY_OK) {
        snprintf(err, errlen,
                 "the key is already set (to change a password, rekey the "
                 "database into a new file)");
        return SQLITE_ERROR;
    }
    crypt_ctx_free(c->crypt);
    c->crypt = NULL;
    c->key_state = MV_KEY_NONE;

    uint8_t hdr[24];
    sqlite3_int64 size;
    int rc = mv_read_header(f, hdr, &size);
    if (rc != SQLITE_OK) {
        /* A failing disk, not a bad argument: mv_db_open() says MV_EIO for it. */
        snprintf(err, errlen, "cannot read the database header: %s", mv_read_failure(rc));
        return rc;
    }
    /* Page 1 never written (all zero) but later pages spilled: the first transaction of a
     * new file was interrupted, and its hot journal will empty the file. A new file. */
    static const uint8_t zero_header[24];
    int existing = size > 0 && !(size >= 24 && memcmp(hdr, zero_header, 24) == 0);
    if (existing && memcmp(hdr, MV_SQLITE_MAGIC, 16) == 0) {
        snprintf(err, errlen, "this database is not encrypted: open it without a key");
        return SQLITE_ERROR;
    }
    struct crypt_params params = {c->cipher != 0 ? c->cipher : CRYPT_CIPHER_CHACHA20, c->kdf_iter,
                                  c->legacy};
    uint32_t page_size = 0;
    if (existing) {
        c->encrypted_on_disk = 1;
        if (size < 24) {
            c->key_state = MV_KEY_REJECTED;
            snprintf(err, errlen, "the file is truncated (%lld bytes): not a database",
                     (long long)size);
            return SQLITE_CORRUPT;
        }
        rc = mv_choose_existing(c, hdr, &params.cipher, &page_size, err, errlen);
        if (rc != SQLITE_OK) {
            c->key_state = MV_KEY_REJECTED;
            return rc;
        }
    }
    if (params.kdf_iter > MV_KDF_ITER_MAX) {
        snprintf(err, errlen, "kdf_iter %lu is above the limit of %lu iterations",
                 (unsigned long)params.kdf_iter, (unsigned long)MV_KDF_ITER_MAX);
        return SQLITE_ERROR;
    }
    if (params.legacy != 0 && params.cipher != CRYPT_CIPHER_SQLCIPHER) {
        snprintf(err, errlen, "legacy=%d is only supported for cipher sqlcipher", params.legacy);
        return SQLITE_ERROR;
    }
    crypt_ctx *ctx = NULL;
    int crc = crypt_ctx_create(&params, secret, len, existing ? hdr : NULL, &ctx);
    if (crc != CRYPT_OK) {
        snprintf(err, errlen,
                 crc == CRYPT_EINVAL ? "invalid key for cipher %s"
                                     : "cannot derive the key for cipher %s",
                 mv_cipher_name((mv_cipher)params.cipher));
        return crc == CRYPT_ENOMEM ? SQLITE_NOMEM : SQLITE_ERROR;
    }
    c->crypt = ctx;
    c->cipher = params.cipher;
    if (!existing) {
        c->key_state = MV_KEY_OK;
        c->encrypted_on_disk = 1;
        mv_apply_reserve(f);
        return SQLITE_OK;
    }
    rc = mv_prove_page1(f, page_size);
    if (rc != SQLITE_OK) {
        rc = mv_page1_refusal(f, rc, page_size, "the password",
                              "wrong password, or not a mailvault/SQLite3MC database", err, errlen);
        crypt_ctx_free(c->crypt);
        c->crypt = NULL;
        c->key_state = MV_KEY_REJECTED;
        return rc;
    }
    c->page_size = page_size;
    c->key_state = MV_KEY_OK;
    return SQLITE_OK;
}

int mv_keying_apply(struct mv_file *f, const struct mv_fcntl_key *k)
{
    struct mv_fcntl_key *out = (struct mv_fcntl_key *)k;
    struct mv_codec *c = f->codec;
    if (k->cipher == MV_CIPHER_NONE || k->cipher < 0 || k->cipher > MV_CIPHER_SQLCIPHER) {
        snprintf(out->errmsg, sizeof out->errmsg, "no such cipher");
        return SQLITE_ERROR;
    }
    c->cipher = k->cipher;
    c->kdf_iter = k->kdf_iter;
    c->legacy = k->legacy;
    int rc = mv_set_key(f, k->secret, k->secret_len, out->errmsg, sizeof out->errmsg);
    if (rc != SQLITE_OK) {
        mv_codec_set_error(c, "%s", out->errmsg);
    }
    return rc;
}

/* Keys f with a copy of the key of k->donor's main file: same cipher, same derived keys, no
 * KDF and no password (a store handle replacing its connection after an I/O error). The
 * donor must be a keyed main file of this VFS on the same file; page 1 proves the key. */
int mv_keying_share(struct mv_file *f, struct mv_fcntl_key_share *k)
{
    struct mv_codec *c = f->codec;
    sqlite3_file *fp = NULL;
    if (k->donor == NULL ||
        sqlite3_file_control(k->donor, "main", SQLITE_FCNTL_FILE_POINTER, &fp) != SQLITE_OK ||
        fp == NULL || fp->pMethods != &mv_io_methods) {
        snprintf(k->errmsg, sizeof k->errmsg, "the other connection is not on a mailvault file");
        return SQLITE_ERROR;
    }
    const struct mv_codec *donor = ((struct mv_file *)fp)->codec;
    if (donor->crypt == NULL || donor->key_state != MV_KEY_OK || donor->page_size == 0) {
        snprintf(k->errmsg, sizeof k->errmsg, "the other connection has no proven key");
        return SQLITE_ERROR;
    }
    if (c->crypt != NULL && c->key_state == MV_KEY_OK) {
        snprintf(k->errmsg, sizeof k->errmsg, "the key is already set");
        return SQLITE_ERROR;
    }
    crypt_ctx_free(c->crypt);
    c->crypt = NULL;
    if (crypt_ctx_clone(donor->crypt, &c->crypt) != CRYPT_OK) {
        snprintf(k->errmsg, sizeof k->errmsg, "out of memory");
        return SQLITE_NOMEM;
    }
    c->cipher = donor->cipher;
    c->kdf_iter = donor->kdf_iter;
    c->legacy = donor->legacy;
    c->encrypted_on_disk = 1;
    int rc = mv_prove_page1(f, donor->page_size);
    if (rc != SQLITE_OK) {
        /* The key is proven by the other connection: a page 1 it does not open, while it
         * opens the others, was damaged since. */
        rc =
            mv_page1_refusal(f, rc, donor->page_size, "the store's key",
                             "the shared key does not open this file", k->errmsg, sizeof k->errmsg);
        crypt_ctx_free(c->crypt);
        c->crypt = NULL;
        c->key_state = MV_KEY_REJECTED;
        mv_codec_set_error(c, "%s", k->errmsg);
        return rc;
    }
    c->page_size = donor->page_size;
    c->key_state = MV_KEY_OK;
    return SQLITE_OK;
}

/* Parses a decimal in [lo, hi]; 0 on success. */
static int mv_parse_uint(const char *s, unsigned long lo, unsigned long hi, uint32_t *out)
{
    if (s == NULL || *s == '\0') {
        return -1;
    }
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi || s[0] == '-') {
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int mv_hex_value(char ch)
{
    if (ch >= '0' && ch <= '9') {
        return ch - '0';
    }
    if (ch >= 'a' && ch <= 'f') {
        return ch - 'a' + 10;
    }
    if (ch >= 'A' && ch <= 'F') {
        return ch - 'A' + 10;
    }
    return -1;
}

/* PRAGMA hexkey: the hex digits decode to the passphrase bytes. */
static int mv_set_hexkey(struct mv_file *f, const char *hex, char *err, size_t errlen)
{
    size_t n = strlen(hex);
    if (n == 0 || n % 2 != 0 || n / 2 > CRYPT_PASSPHRASE_MAX) {
        snprintf(err, errlen, "hexkey needs an even number of hex digits");
        return SQLITE_ERROR;
    }
    uint8_t *bytes = malloc(n / 2);
    if (bytes == NULL) {
        return SQLITE_NOMEM;
    }
    int rc = SQLITE_OK;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = mv_hex_value(hex[2 * i]), lo = mv_hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            snprintf(err, errlen, "hexkey has a character that is not a hex digit");
            rc = SQLITE_ERROR;
            break;
        }
        bytes[i] = (uint8_t)(hi << 4 | lo);
    }
    if (rc == SQLITE_OK) {
        rc = mv_set_key(f, bytes, n / 2, err, errlen);
    }
    crypt_wipe(bytes, n / 2);
    free(bytes);
    return rc;
}

/* The SQLite3MC pragmas mailvault knows but does not support: an error, never silence. */
static int mv_unsupported_pragma(const char *name)
{
    static const char *const names[] = {
        "rekey",         "hexrekey",         "textrekey",
        "hmac_check",    "mc_legacy_wal",    "plaintext_header_size",
        "cipher_salt",   "legacy_page_size", "fast_kdf_iter",
        "hmac_use",      "hmac_pgno",        "hmac_salt_mask",
        "kdf_algorithm", "hmac_algorithm",   "textkey"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (sqlite3_stricmp(name, names[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static int mv_pragma_result(char **azArg, int rc, const char *text)
{
    azArg[0] = text != NULL ? sqlite3_mprintf("%s", text) : NULL;
    return rc;
}

static int mv_pragma_setting(struct mv_file *f, const char *name, const char *value, char **azArg)
{
    struct mv_codec *c = f->codec;
    char buf[32];
    if (value != NULL && c->crypt != NULL) {
        return mv_pragma_result(azArg, SQLITE_ERROR, "set cipher options before the key");
    }
    if (sqlite3_stricmp(name, "cipher") == 0) {
        if (value == NULL) {
            return mv_pragma_result(azArg, SQLITE_OK,
                                    mv_cipher_name((mv_cipher)(c->cipher ? c->cipher : 1)));
        }
        mv_cipher cipher;
        if (mv_cipher_from_name(value, &cipher) != MV_OK || cipher == MV_CIPHER_AUTO ||
            cipher == MV_CIPHER_NONE) {
            return mv_pragma_result(azArg, SQLITE_ERROR,
                                    "unknown cipher: use chacha20, aes256cbc or sqlcipher");
        }
        c->cipher = (int)cipher;
        return mv_pragma_result(azArg, SQLITE_OK, NULL);
    }
    if (sqlite3_stricmp(name, "kdf_iter") == 0) {
        if (value == NULL) {
            snprintf(buf, sizeof buf, "%u", c->crypt ? crypt_ctx_kdf_iter(c->crypt) : c->kdf_iter);
            return mv_pragma_result(azArg, SQLITE_OK, buf);
        }
        if (mv_parse_uint(value, 1, MV_KDF_ITER_MAX, &c->kdf_iter) != 0) {
            snprintf(buf, sizeof buf, "%lu", (unsigned long)MV_KDF_ITER_MAX);
            azArg[0] = sqlite3_mprintf("kdf_iter must be 1..%s", buf);
            return SQLITE_ERROR;
        }
        return mv_pragma_result(azArg, SQLITE_OK, NULL);
    }
    /* legacy */
    if (value == NULL) {
        snprintf(buf, sizeof buf, "%d", c->legacy);
        return mv_pragma_result(azArg, SQLITE_OK, buf);
    }
    uint32_t legacy;
    if (mv_parse_uint(value, 0, 4, &legacy) != 0 || (legacy != 0 && legacy != 4)) {
        return mv_pragma_result(azArg, SQLITE_ERROR,
                                "legacy must be 0, or 4 (real SQLCipher 4) with cipher sqlcipher");
    }
    c->legacy = (int)legacy;
    return mv_pragma_result(azArg, SQLITE_OK, NULL);
}

int mv_keying_pragma(struct mv_file *f, char **azArg)
{
    const char *name = azArg[1], *value = azArg[2];
    char err[256] = "";
    if (sqlite3_stricmp(name, "key") == 0 || sqlite3_stricmp(name, "hexkey") == 0) {
        if (value == NULL) {
            return mv_pragma_result(azArg, SQLITE_ERROR, "PRAGMA key needs a value");
        }
        int rc = sqlite3_stricmp(name, "key") == 0
                     ? mv_set_key(f, (const uint8_t *)value, strlen(value), err, sizeof err)
                     : mv_set_hexkey(f, value, err, sizeof err);
        if (rc != SQLITE_OK) {
            mv_codec_set_error(f->codec, "%s", err);
            return mv_pragma_result(azArg, rc == SQLITE_NOMEM ? rc : SQLITE_ERROR, err);
        }
        return mv_pragma_result(azArg, SQLITE_OK, "ok");
    }
    if (sqlite3_stricmp(name, "cipher") == 0 || sqlite3_stricmp(name, "kdf_iter") == 0 ||
        sqlite3_stricmp(name, "legacy") == 0) {
        return mv_pragma_setting(f, name, value, azArg);
    }
    if (mv_unsupported_pragma(name)) {
        snprintf(err, sizeof err,
                 "PRAGMA %s is not supported by mailvault (rekey: copy into a new file with "
                 "`mailvault passwd`)",
                 name);
        return mv_pragma_result(azArg, SQLITE_ERROR, err);
    }
    return SQLITE_NOTFOUND;
}

/* An existing file without the SQLite magic is encrypted (or not a database): until a key
 * proves itself, nothing may write to it, roll back its journal or checkpoint its WAL. */
static void mv_note_encrypted_on_disk(struct mv_file *f)
{
    uint8_t hdr[24];
    sqlite3_int64 size = 0;
    if (mv_read_header(f, hdr, &size) == SQLITE_OK && size > 0 &&
        (size < 16 || memcmp(hdr, MV_SQLITE_MAGIC, 16) != 0)) {
        f->codec->encrypted_on_disk = 1;
    }
}

int mv_keying_from_uri(struct mv_file *f, const char *zName)
{
    struct mv_codec *c = f->codec;
    mv_note_encrypted_on_disk(f);
    const char *cipher = sqlite3_uri_parameter(zName, "cipher");
    const char *kdf_iter = sqlite3_uri_parameter(zName, "kdf_iter");
    const char *legacy = sqlite3_uri_parameter(zName, "legacy");
    const char *key = sqlite3_uri_parameter(zName, "key");
    const char *hexkey = sqlite3_uri_parameter(zName, "hexkey");
    char *ignored[3] = {NULL, NULL, NULL};
    char err[256];
    int rc = SQLITE_OK;
    if (cipher != NULL) {
        ignored[1] = (char *)"cipher";
        ignored[2] = (char *)cipher;
        rc = mv_pragma_setting(f, "cipher", cipher, ignored);
    }
    if (rc == SQLITE_OK && kdf_iter != NULL) {
        sqlite3_free(ignored[0]);
        rc = mv_pragma_setting(f, "kdf_iter", kdf_iter, ignored);
    }
    if (rc == SQLITE_OK && legacy != NULL) {
        sqlite3_free(ignored[0]);
        rc = mv_pragma_setting(f, "legacy", legacy, ignored);
    }
    if (rc != SQLITE_OK) {
        mv_codec_set_error(c, "%s", ignored[0] != NULL ? ignored[0] : "bad URI parameter");
        sqlite3_free(ignored[0]);
        return SQLITE_CANTOPEN;
    }
    sqlite3_free(ignored[0]);
    /* A wrong key leaves the file rejected: the first statement then reports NOTADB. */
    if (key != NULL) {
        rc = mv_set_key(f, (const uint8_t *)key, strlen(key), err, sizeof err);
    } else if (hexkey != NULL) {
        rc = mv_set_hexkey(f, hexkey, err, sizeof err);
    }
    if (rc != SQLITE_OK) {
        mv_codec_set_error(c, "%s", err);
    }
    return rc == SQLITE_NOMEM ? rc : SQLITE_OK;
}
