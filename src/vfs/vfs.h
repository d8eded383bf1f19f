/*
 * vfs.h -- internals of the encrypting VFS shim, shared by the files of src/vfs.
 *
 * One sqlite3_file subclass, struct mv_file, serves every kind of file SQLite opens; its
 * `kind` picks the methods' behaviour:
 *
 *   MAIN     main database: pages encrypted with the connection's codec (vfs_main.c)
 *   JOURNAL  rollback journal of an encrypted main db: page images encrypted with the page's
 *            own number, headers and checksums plain, as SQLite3MC does (vfs_journal.c)
 *   WAL      write-ahead log: frames encrypted, checksums over ciphertext (vfs_wal.c)
 *   TEMP     temp db, temp journal, sub-journal, transient db: a block layer under a random
 *            per-file key (vfs_temp.c)
 *   PLAIN    everything else (super-journal, shm): passed through
 *
 * A main file owns a struct mv_codec (keys, page size, errors). Its journal and WAL find the
 * codec through the registry of open main files (vfs_registry.c), matching the file name
 * pointer SQLite passes, and hold a reference to it.
 */
#ifndef MV_VFS_H
#define MV_VFS_H

#include "crypto/crypt.h"
#include "mailvault.h"
#include "vfs/sqlite_format.h"
#include "vfs/vfs_sqlite.h"

#include <stdint.h>
#include <sys/stat.h>

/* Custom file-control opcodes (SQLite reserves nothing above 100 for us; pick values no
 * other VFS in the process is likely to use). */
#define MV_FCNTL_KEY    0x6d760001 /* pArg: struct mv_fcntl_key* */
#define MV_FCNTL_ERRMSG 0x6d760002 /* pArg: const char** (codec-owned, may be NULL) */
#define MV_FCNTL_INFO   0x6d760003 /* pArg: struct mv_db_info* */
#define MV_FCNTL_ATTACH 0x6d760004 /* pArg: sqlite3* of the connection (auto-extension) */
/* pArg: struct mv_fcntl_key_share*: key this main file with the key of another open
 * connection's main file (db_reopen.h). */
#define MV_FCNTL_KEY_SHARE 0x6d760005
/* pArg: uint64_t*: the codec's read_errors (db_error.h, mv_db_read_errors). */
#define MV_FCNTL_READ_ERRORS 0x6d760010 /* (vfs_hint.h has 0x6d760006-08) */

struct mv_fcntl_key {
    const uint8_t *secret;
    size_t secret_len;
    int cipher; /* mv_cipher */
    uint32_t kdf_iter;
    int legacy;
    char errmsg[256]; /* out: the reason when the call fails */
};

struct mv_fcntl_key_share {
    sqlite3 *donor;   /* an open connection whose main file is keyed */
    char errmsg[256]; /* out: the reason when the call fails */
};
/* A main file's run of adjacent page reads and the window last read ahead for it
 * (vfs_read_ahead.c); all zero: none. */
struct mv_read_run {
    uint32_t last;       /* the page read last */
    int dir;             /* +1 ascending, -1 descending, 0 no run */
    uint32_t length;     /* adjacent reads in dir so far */
    uint32_t lo, hi;     /* the pages the last window read (inclusive; lo 0: none) */
    uint32_t next;       /* bytes the next window reads */
    uint32_t hinted;     /* pages the next read's window reads (vfs_hint.h; 0: no hint) */
    uint8_t *held;       /* a hinted window's pages as read (kept or malloc'd; NULL: none) */
    uint32_t held_lo;    /* the page held[0] is */
    uint32_t held_pages; /* pages in held */
    int held_near;       /* held is a window around a page read (near), not a chain's */
    uint32_t near;       /* pages on each side of a page read to hold (vfs_hint.h; 0: none) */
    uint8_t *kept;       /* the file's buffer for held windows (malloc'd; NULL: none yet) */
    size_t kept_size;    /* its bytes */
    /* The last prefetch walk (vfs_prefetch.c) found the file's leaves out of the page cache:
     * a held window is then asked for from cold_fd (the lower file's descriptor, which the
     * walk checked) before it is read (vfs_read_ahead.c, COLD WINDOWS). */
    int cold;
    int cold_fd;
};

enum mv_file_kind { MV_FILE_PLAIN, MV_FILE_MAIN, MV_FILE_JOURNAL, MV_FILE_WAL, MV_FILE_TEMP };

/* Key state of a main file. */
enum mv_key_state {
    MV_KEY_NONE,     /* no key given: a plaintext file is passed through */
    MV_KEY_OK,       /* keyed and proven by page 1, or a new file */
    MV_KEY_REJECTED, /* keyed, but page 1 does not authenticate: no write may happen */
};

struct mv_codec {
    int refs;
    crypt_ctx *crypt;      /* NULL until keyed */
    int key_state;         /* enum mv_key_state */
    int encrypted_on_disk; /* page 1 on disk is not a plaintext SQLite header */
    int cipher;            /* requested (before key) or in use (after); 0 = auto */
    uint32_t kdf_iter;
    int legacy;
    uint32_t page_size; /* 0 until known from the header or the first page-1 write */
    uint8_t *scratch;   /* WAL frame header + one page */
    uint32_t scratch_size;
    sqlite3 *db;               /* the connection, once the auto-extension told us */
    struct mv_file *main_file; /* the database file owning this codec (NULL once closed) */
    /* Counts this connection's shared-memory lock calls on the WAL write lock (slot 0),
     * taking or releasing it. While it stays the same, no other connection can have
     * written the WAL (vfs_wal.c trusts its own record of the last frame it wrote). */
    uint64_t wal_write_lock_calls;
    /* Checkpoint copy (vfs_wal.c, vfs_main.c): while this connection holds the WAL
     * checkpoint lock, the last page read from the WAL, as ciphertext then plaintext
     * (2 x page size bytes); a write of that plaintext to that page of the database writes
     * the WAL's ciphertext instead of encrypting again. With ckpt_raw (a cipher whose tag
     * can be checked alone: chacha20) the page was only authenticated and SQLite was handed
     * the ciphertext itself, which the write then recognises byte for byte. */
    int ckpt_lock_held;
    int ckpt_valid;
    int ckpt_raw;
    uint32_t ckpt_pgno;
    uint32_t ckpt_page_size;
    uint8_t *ckpt_pages;
    /* The WAL file whose batch of frames is not yet written (vfs_wal.c, BATCHES; NULL:
     * none): a shared-memory lock call on the database writes it first. */
    struct mv_file *wal_batch_file;
    /* Reads of the database, its WAL or journal that the lower file failed (the device's
     * error: not a read past the end, not a page that fails authentication). A check that
     * met one cannot tell damage from a failing disk (mv_db_read_errors). */
    uint64_t read_errors;
    char errmsg[256]; /* last error, for mv_db_vfs_errmsg() */
};

struct mv_file {
    sqlite3_file base;
    int kind;               /* enum mv_file_kind */
    sqlite3_file *lower;    /* the lower VFS's file, allocated right after this struct */
    const char *name;       /* as SQLite passed it (identity for journal/WAL lookup) */
    struct mv_codec *codec; /* MAIN: owned reference; JOURNAL/WAL: shared reference */
    struct mv_file *next;   /* registry chain (MAIN only) */
    int lock_level;
    /* JOURNAL: the page number field most recently read or written, and where. */
    int64_t record_pgno_offset;
    uint32_t record_pgno;
    int64_t record_page_end;
    int journal_written;   /* this connection wrote it: no need to authenticate it first */
    int journal_validated; /* a journal written elsewhere was authenticated before rollback */
    /* WAL: a frame header held back until its page arrives. */
    int pending_header;
    int64_t pending_offset;
    uint8_t pending[24];
    uint32_t wal_page_size;
    uint8_t wal_header[32]; /* the WAL header last seen, valid for frames with its salts */
    int wal_header_valid;
    int wal_rewriting;       /* SQLite is rewriting checksums: whole-frame reads are not judged */
    int64_t wal_rewrite_off; /* header offset of the frame the rewrite just read (0: none) */
    /* WAL: the frame this connection wrote last (header offset, salts, stored checksum), and
     * wal_write_lock_calls then; valid only while no other write or lock call came since. */
    int chain_valid;
    int64_t chain_off;
    uint8_t chain_salts[8];
    uint32_t chain_sum[2];
    uint64_t chain_lock_calls;
    /* WAL: the page number of each frame this connection wrote (index frame - 1; 0: not
     * known), all recorded while wal_write_lock_calls was frame_pgnos_lock_calls; frames
     * overwritten in place take theirs from here instead of reading the frame header. */
    uint32_t *frame_pgnos;
    uint32_t frame_pgnos_cap;
    uint32_t frame_pgnos_used; /* entries past it are 0: a reset clears only these */
    uint64_t frame_pgnos_lock_calls;
    /* WAL: whole frames written by SQLite and not yet handed to the lower file (vfs_wal.c,
     * BATCHES): batch_len bytes for offset batch_off, in batch (a thread's buffer of
     * MV_WAL_BATCH_BYTES, NULL while no batch is open). */
    uint8_t *batch;
    uint32_t batch_len;
    int64_t batch_off;
    /* TEMP: logical size, key and one block of scratch. */
    int64_t temp_size;
    crypt_ctx *temp_crypt;
    char *temp_name; /* sqlite3_malloc'd name in the store's tmp/ (see vfs_tempdir.h) */
    uint8_t *temp_block;
    int64_t temp_cached; /* the block whose plaintext temp_block holds (-1: none) */
    int temp_dirty;      /* ... changed since it was last encrypted and written */
    /* MAIN: the run of adjacent page reads under way (vfs_read_ahead.c). */
    struct mv_read_run run;
    /* MAIN: interior pages the prefetch walk kept (vfs_interior.c; NULL: none yet). */
    struct mv_interior *interior;
};

/* The VFS object and its lower VFS (vfs_register.c). */
sqlite3_vfs *mv_vfs_lower(void);
extern const sqlite3_io_methods mv_io_methods;
/* Whether p is a file of the mailvault VFS (either method table). */
int mv_vfs_file_is_ours(const sqlite3_file *p);
/* Whether p, a file of the mailvault VFS, offers shared memory (its lower file does). */
int mv_vfs_file_has_shm(const sqlite3_file *p);
/* WAL syncs (xSync of a WAL file) in this process so far: for tests that count them. */
uint64_t mv_vfs_wal_syncs(void);

/* Registry of open main files (vfs_registry.c). */
void mv_registry_add(struct mv_file *f);
void mv_registry_remove(struct mv_file *f);
/* The codec of the main db that file name zName (a journal or WAL name SQLite passed)
 * belongs to, with a new reference; NULL if none. */
struct mv_codec *mv_registry_codec_for(const char *zName);

/* Codec (vfs_codec.c). */
struct mv_codec *mv_codec_new(void);
void mv_codec_release(struct mv_codec *c);
int mv_codec_scratch(struct mv_codec *c, uint32_t size);
void mv_codec_set_error(struct mv_codec *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Whether writes must be refused: encrypted on disk but no proven key. */
int mv_codec_write_blocked(const struct mv_codec *c);
/* Encrypt/decrypt helpers that map crypto results to SQLite codes. */
int mv_codec_encrypt(
    struct mv_codec *c, uint32_t pgno, const uint8_t *in, uint8_t *out, uint32_t page_size);
int mv_codec_decrypt(struct mv_codec *c, uint32_t pgno, uint8_t *page, uint32_t page_size);
/* The tag check alone (crypt_page_authenticate): SQLITE_OK, SQLITE_IOERR_DATA if the page
 * is not authentic, SQLITE_IOERR_READ / SQLITE_NOMEM. */
int mv_codec_authenticate(struct mv_codec *c,
                          uint32_t pgno,
                          const uint8_t *page,
                          uint32_t page_size);

/* Keying (vfs_keying.c). */
int mv_keying_apply(struct mv_file *f, const struct mv_fcntl_key *k);
int mv_keying_pragma(struct mv_file *f, char **azArg);
int mv_keying_from_uri(struct mv_file *f, const char *zName);
int mv_keying_share(struct mv_file *f, struct mv_fcntl_key_share *k);
void mv_keying_attach(struct mv_file *f, sqlite3 *db);

/* Per-kind I/O (vfs_main.c, vfs_journal.c, vfs_wal.c, vfs_temp.c). */
int mv_main_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off);
/* Before page pgno of a main file is read: notes the read and, when it continues a run of
 * adjacent reads past the last window, reads a window of pages ahead in one lower read so
 * that the run's next pages come from the page cache (vfs_read_ahead.c). A hint: no error. */
void mv_main_read_ahead(struct mv_file *f, uint32_t pgno, uint32_t page_size);
/* MV_FCNTL_READ_AHEAD on a main file (vfs_hint.h): the pages the next read's window takes. */
void mv_main_read_ahead_hint(struct mv_file *f, int64_t bytes);
/* MV_FCNTL_READ_NEAR on a main file (vfs_hint.h): pages on each side of a read to hold. */
void mv_main_read_near_hint(struct mv_file *f, int pages);
/* Before page pgno of a main file is read while a near hint is set: unless a held window
 * has the page, reads it with the hinted pages on each side and holds them. A hint. */
void mv_main_read_near(struct mv_file *f, uint32_t pgno, uint32_t page_size);
/* Before a read from page pgno while a hint is set (f->run.hinted): the hinted window from
 * pgno, held until the hint is taken back, and the hint is used up. mv_main_read_ahead does
 * this itself; partial reads call it. */
void mv_main_read_hinted(struct mv_file *f, uint32_t pgno, uint32_t page_size);
/* Copies page pgno (still encrypted) from the held window into out: 1, or 0 if the window
 * does not hold it (then read it from the lower file). */
int mv_main_read_held(struct mv_file *f, uint32_t pgno, uint32_t page_size, uint8_t *out);
/* Drops the held window (its pages are only good for the read that hinted them). */
void mv_main_read_drop(struct mv_file *f);
/* At close: drops the held window and frees the file's buffer for them. */
void mv_main_read_release(struct mv_file *f);
/* MV_FCNTL_PREFETCH on a main file (vfs_hint.h, vfs_prefetch.c). A hint: no error. */
struct mv_fcntl_prefetch;
void mv_main_prefetch(struct mv_file *f, struct mv_fcntl_prefetch *p);
/* The interior pages the prefetch walk keeps (vfs_interior.c). mv_interior_for: f's, made
 * valid for the file as st (its fstat) describes: dropped if its size or modification time
 * moved since they were kept (NULL: out of memory; nothing is kept then). mv_interior_find:
 * a kept page, decrypted, or NULL. mv_interior_keep: keeps a copy of a decrypted interior
 * page if there is room. mv_interior_free: wipes and frees them (the file's close). */
struct mv_interior;
struct mv_interior *mv_interior_for(struct mv_file *f, const struct stat *st, uint32_t page_size);
const uint8_t *mv_interior_find(const struct mv_interior *c, uint32_t pgno);
void mv_interior_keep(struct mv_interior *c, uint32_t pgno, const uint8_t *page);
void mv_interior_free(struct mv_file *f);
/* The level (0: the root) at which a walk from root last found its leaves while the kept
 * pages were valid, or -1; and the note of it. */
int mv_interior_leaf_level(const struct mv_interior *c, uint32_t root);
void mv_interior_note_leaf_level(struct mv_interior *c, uint32_t root, int level);
int mv_main_write(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off);
int mv_journal_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off);
int mv_journal_write(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off);
int mv_wal_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off);
/* For the WAL header recovery has just read (vfs_wal_header.c): SQLITE_OK if recovery takes
 * it, if ignoring the WAL loses nothing, or if hdr was replaced by the header rebuilt from
 * the frames; SQLITE_IOERR_DATA (the codec's message says why) if its committed frames hold
 * pages the database lacks and no header carries them; an I/O error or SQLITE_NOMEM. */
int mv_wal_header_check(struct mv_file *f, uint8_t hdr[MV_WAL_HEADER_BYTES]);
int mv_wal_write(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off);
int mv_wal_flush(struct mv_file *f);
/* Writes the batch of frames of the WAL file paired with main_file's codec, if one is open:
 * before any shared-memory lock call, after which another connection may write the WAL. */
int mv_wal_batch_flush_for(struct mv_file *main_file);
/* Forgets the record of the last frame written (a truncate, or any write but a frame). */
void mv_wal_forget_chain(struct mv_file *f);
/* Forgets / frees the record of the frames' page numbers (vfs_wal.c). */
void mv_wal_forget_frame_pgnos(struct mv_file *f);
void mv_wal_free_frame_pgnos(struct mv_file *f);
/* Called for every xShmLock on a main file with the lower VFS's answer rc: counts calls
 * covering the WAL write lock, and follows whether the checkpoint lock is held. */
void mv_wal_shm_lock_seen(struct mv_file *main_file, int offset, int n, int flags, int rc);
/* For a write of page pgno of the database (vfs_wal.c, see struct mv_codec): 1 and
 * *cipher = the WAL ciphertext to write as it is, when buf is what the checkpoint just read
 * from the WAL for that page (its plaintext, or with ckpt_raw the ciphertext itself); 0 to
 * encrypt buf as usual; -1 when buf is ciphertext handed out for another page number (the
 * write must be refused: it cannot be done right). */
int mv_codec_ckpt_match(
    struct mv_codec *c, uint32_t pgno, const uint8_t *buf, uint32_t size, const uint8_t **cipher);
int mv_temp_open(struct mv_file *f);
void mv_temp_close(struct mv_file *f);
int mv_temp_read(struct mv_file *f, void *buf, int amt, sqlite3_int64 off);
int mv_temp_write(struct mv_file *f, const void *buf, int amt, sqlite3_int64 off);
int mv_temp_truncate(struct mv_file *f, sqlite3_int64 size);

#endif /* MV_VFS_H */
