/*
 * cli_exit.c -- the one mapping from the library's error classes and from errno to the
 * tool's exit codes (sysexits(3), as doveadm uses them; the table is in cli.h and
 * docs/CLI.md).
 *
 * IMPLEMENTATION NOTES
 *   MV_ENOSPC maps to EX_TEMPFAIL, not EX_IOERR: a full disk is fixed by freeing space and
 *   trying again, and an MTA running `mailvault deliver` defers (keeps the message) on 75
 *   but bounces on the other codes. MV_ENOTFOUND is "no such mailbox or message"; the
 *   commands that find no store for USER say CLI_EXIT_NOUSER themselves, before the library
 *   is asked.
 */
#include "cli.h"

#include <errno.h>

int cli_exit_code(int mv_code)
{
    switch (mv_code) {
    case MV_OK:
        return CLI_EXIT_OK;
    case MV_ENOMEM:
        return CLI_EXIT_OSERR;
    case MV_EINVAL:
    case MV_ECORRUPT:
    case MV_ELIMIT:
    case MV_EUNSUPPORTED:
        return CLI_EXIT_DATA;
    case MV_EAUTH:
        return CLI_EXIT_NOPERM;
    case MV_EIO:
        return CLI_EXIT_IOERR;
    case MV_EBUSY:
    case MV_ENOSPC:
    case MV_EMOVED: /* an MTA's `mailvault deliver` defers: the new node will take it */
        return CLI_EXIT_TEMPFAIL;
    case MV_ENOTFOUND:
        return CLI_EXIT_NOTFOUND;
    case MV_EEXISTS:
        return CLI_EXIT_CANTCREAT;
    default:
        return CLI_EXIT_ERROR;
    }
}

int cli_exit_errno(int errno_value, int fallback)
{
    switch (errno_value) {
    case ENOENT:
    case ENOTDIR:
        return fallback == CLI_EXIT_CANTCREAT ? CLI_EXIT_CANTCREAT : CLI_EXIT_NOINPUT;
    case EACCES:
    case EPERM:
    case EROFS:
        return CLI_EXIT_NOPERM;
    case EIO:
        return CLI_EXIT_IOERR;
    case ENOSPC:
    case EDQUOT:
    case EAGAIN:
    case EBUSY:
    case EINTR:
        return CLI_EXIT_TEMPFAIL;
    case ENOMEM:
        return CLI_EXIT_OSERR;
    default:
        return fallback;
    }
}
