/*
 * errors.c -- static texts for MV_* codes, the version, and the mapping from SQLite result
 * codes to MV_* classes. (Cipher names: src/vfs/vfs_ciphers.c, from the cipher registry.)
 */
#include "mailvault.h"

const char *mv_version(void)
{
    return MV_VERSION_STRING;
}

const char *mv_strerror(int code)
{
    switch (code) {
    case MV_OK:
        return "success";
    case MV_ERROR:
        return "error";
    case MV_ENOMEM:
        return "out of memory";
    case MV_EINVAL:
        return "invalid argument";
    case MV_EAUTH:
        return "wrong password, or not a mailvault/SQLite3MC database";
    case MV_ECORRUPT:
        return "the database is damaged (a page failed authentication or is truncated)";
    case MV_EIO:
        return "input/output error";
    case MV_EBUSY:
        return "the database is locked by another connection";
    case MV_ENOTFOUND:
        return "not found";
    case MV_EEXISTS:
        return "already exists";
    case MV_ELIMIT:
        return "a configured limit was exceeded";
    case MV_ENOSPC:
        return "not enough disk space";
    case MV_EUNSUPPORTED:
        return "not supported";
    case MV_EMOVED:
        return "the store was released from this node (moved away)";
    default:
        return "unknown error";
    }
}

int mv_error_from_sqlite(int sqlite_rc)
{
    switch (sqlite_rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return MV_OK;
    case SQLITE_NOMEM:
        return MV_ENOMEM;
    case SQLITE_NOTADB:
        return MV_EAUTH;
    case SQLITE_CORRUPT:
        return MV_ECORRUPT;
    case SQLITE_IOERR:
        return sqlite_rc == SQLITE_IOERR_DATA ? MV_ECORRUPT : MV_EIO;
    case SQLITE_FULL:
        return MV_ENOSPC;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return MV_EBUSY;
    case SQLITE_CANTOPEN:
        /* SQLite says it for any file it could not open: an existing store's WAL, journal
         * or temporary file, or the store itself on a failing disk. Whether a store exists
         * is decided before SQLite opens it (mv_db_open(), mv_store_open()), so this is
         * the disk, not "no such store". */
        return MV_EIO;
    case SQLITE_CONSTRAINT:
        return MV_EEXISTS;
    case SQLITE_TOOBIG:
        return MV_ELIMIT;
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
        return MV_EINVAL;
    default:
        return MV_ERROR;
    }
}
