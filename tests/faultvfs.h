/*
 * faultvfs.h -- a fault-injecting SQLite VFS for tests ("faultvfs"), registered UNDER
 * mailvault's encrypting VFS, so the faults hit ciphertext exactly where a failing disk
 * would: the database, its WAL and -shm, journals, temp files.
 *
 * USAGE
 *   fv_register();                         // once, before anything opens a database
 *   mv_vfs_register(FV_VFS_NAME, 0);       // the encrypting VFS stacks on it
 *   fv_arm(&(struct fv_plan){FV_WRITE, 3, FV_FAIL, 0});   // the 3rd write from now fails
 *   rc = mv_message_append(...);
 *   fired = fv_disarm();                   // 1 if the fault was injected
 *
 * FAULTS
 *   FV_FAIL        the call does nothing and returns the I/O error a disk gives
 *                  (SQLITE_IOERR_READ / _WRITE / _FSYNC / _TRUNCATE, SQLITE_CANTOPEN),
 *                  with errno EIO as the unix VFS leaves it
 *   FV_SHORT       a write stores its first half and returns SQLITE_IOERR_WRITE (reads
 *                  and other calls: as FV_FAIL)
 *   FV_TORN        a write stores its first half, and then every call fails until
 *                  fv_disarm(): the disk went away in the middle of the last write (power
 *                  loss, a yanked device). Other calls: the call fails, and every later one.
 *   persist        with FV_FAIL / FV_SHORT: every matching call from the Nth on fails (a
 *                  disk that stays broken) instead of only the Nth (a transient error).
 *
 * LIMITATIONS
 *   One plan for the whole process (tests are single-threaded around an armed plan; the
 *   counters are atomic anyway). xClose, locks and the shared-memory calls are never
 *   failed: SQLite treats their failure as fatal to the process's view of the file, which
 *   is not the disk fault being modelled.
 */
#ifndef MV_FAULTVFS_H
#define MV_FAULTVFS_H

#define FV_VFS_NAME "faultvfs"

enum fv_op { FV_READ, FV_WRITE, FV_SYNC, FV_OPEN, FV_TRUNCATE, FV_ANY, FV_OP_COUNT };
enum fv_mode { FV_FAIL, FV_SHORT, FV_TORN };

struct fv_plan {
    int op;            /* enum fv_op: which calls are counted */
    unsigned long nth; /* the nth counted call (1-based) is the faulty one */
    int mode;          /* enum fv_mode */
    int persist;       /* FV_FAIL / FV_SHORT: every counted call from the nth on fails */
};

/* Registers the VFS over the process's default VFS (not as the default). SQLITE_OK or an
 * SQLite error code. */
int fv_register(void);
/* Starts a plan; the counters start from 0. */
void fv_arm(const struct fv_plan *plan);
/* Ends the plan; returns 1 if a fault was injected since fv_arm(). */
int fv_disarm(void);
/* Calls of kind op (FV_ANY: all counted kinds) seen since fv_arm(). */
unsigned long fv_calls(int op);
/* Reads of exactly amt bytes (0..FV_SMALL_READ_MAX) seen since fv_arm(). */
#define FV_SMALL_READ_MAX 64
unsigned long fv_reads_of(int amt);
/* Reads of more than FV_PAGE_MAX bytes (larger than any page: several pages in one call)
 * seen since fv_arm(), and the largest read's length. */
#define FV_PAGE_MAX 65536
unsigned long fv_reads_multipage(void);
unsigned long fv_read_largest(void);
/* Short name of an op / a mode, for messages. */
const char *fv_op_name(int op);
const char *fv_mode_name(int mode);

#endif /* MV_FAULTVFS_H */
