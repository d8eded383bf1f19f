/*
 * imap_cmd_quota.c -- QUOTA (RFC 9208, the RFC 2087 subset): GETQUOTA, GETQUOTAROOT and a
 * refused SETQUOTA. Each user has one quota root, "", holding every mailbox, with one
 * resource, STORAGE: the logical size of the user's messages in KiB (quota.c) against
 * quota_kib from the config. With quota_kib = 0 (unlimited) there is no quota root:
 * GETQUOTAROOT names none and GETQUOTA "" answers NO [NONEXISTENT].
 */
#include "imap_session.h"

#include <string.h>

/* "* QUOTA "" (STORAGE used limit)"; 0, or -1 with the tagged NO written. */
static int imap_quota_line(struct imap_ctx *x)
{
    uint64_t used = 0;
    int rc = quota_used(x->s->store->store, &used);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, x->cmd->name);
        return -1;
    }
    buf_printf(x->out, "* QUOTA \"\" (STORAGE %llu %llu)\r\n",
               (unsigned long long)((used + 1023) / 1024),
               (unsigned long long)worker_config(x->s->worker)->quota_kib);
    return 0;
}

void imap_cmd_getquota(struct imap_ctx *x)
{
    char root[IMAP_MAILBOX_MAX + 1];
    if (imap_arg_count(x->cmd) != 1 || imap_astring(imap_arg(x->cmd, 0), root, sizeof root) != 0) {
        imap_tagged(x, "BAD", "GETQUOTA takes a quota root");
        return;
    }
    if (root[0] != '\0' || worker_config(x->s->worker)->quota_kib == 0) {
        imap_tagged(x, "NO", "[NONEXISTENT] no such quota root");
        return;
    }
    if (imap_quota_line(x) == 0) {
        imap_tagged(x, "OK", "GETQUOTA completed");
    }
}

void imap_cmd_getquotaroot(struct imap_ctx *x)
{
    char name[IMAP_MAILBOX_MAX + 1];
    if (imap_arg_count(x->cmd) != 1) {
        imap_tagged(x, "BAD", "GETQUOTAROOT takes a mailbox");
        return;
    }
    if (imap_mailbox_arg(x, imap_arg(x->cmd, 0), name, sizeof name) != 0) {
        return;
    }
    struct mv_mailbox_info info;
    int rc = mv_mailbox_status(x->s->store->store, name, &info);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "GETQUOTAROOT");
        return;
    }
    buf_str(x->out, "* QUOTAROOT ");
    imap_mailbox_out(x->out, name);
    if (worker_config(x->s->worker)->quota_kib == 0) {
        buf_str(x->out, "\r\n");
    } else {
        buf_str(x->out, " \"\"\r\n");
        if (imap_quota_line(x) != 0) {
            return;
        }
    }
    imap_tagged(x, "OK", "GETQUOTAROOT completed");
}

void imap_cmd_setquota(struct imap_ctx *x)
{
    if (imap_arg_count(x->cmd) != 2 || imap_arg(x->cmd, 1)->type != IMAP_NODE_LIST) {
        imap_tagged(x, "BAD", "SETQUOTA takes a quota root and a resource list");
        return;
    }
    imap_tagged(x, "NO", "[NOPERM] the quota is set in the server's configuration");
}
