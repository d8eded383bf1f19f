/*
 * imap_cmd_quota.c -- QUOTA (RFC 9208): GETQUOTA, GETQUOTAROOT and a refused SETQUOTA. Each
 * user has one quota root, "", holding every mailbox, with the resources STORAGE (the logical
 * size of the user's messages in KiB, rounded up) and MESSAGE (messages over all mailboxes),
 * against the user's limits (quota.c: the quota_file entry, else quota_kib and
 * quota_messages). An unlimited resource is left out of the QUOTA response (RFC 9208 5.1);
 * with both unlimited there is no quota root: GETQUOTAROOT names none and GETQUOTA ""
 * answers NO [NONEXISTENT].
 */
#include "buf.h"
#include "imap_session.h"
#include "mailvault.h"
#include "quota.h"
#include "worker.h"

#include <string.h>

static struct quota_limits imap_quota_limits(struct imap_ctx *x)
{
    return quota_limits_for(worker_config(x->s->worker), x->s->user);
}

/* "* QUOTA "" (STORAGE used limit MESSAGE used limit)"; 0, or -1 with the tagged NO written. */
static int imap_quota_line(struct imap_ctx *x, const struct quota_limits *limits)
{
    struct quota_usage used;
    int rc = quota_used_open(x->s->store, worker_config(x->s->worker), &used);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, x->cmd->name);
        return -1;
    }
    buf_str(x->out, "* QUOTA \"\" (");
    if (limits->storage_kib != 0) {
        buf_printf(x->out, "STORAGE %llu %llu", (unsigned long long)((used.bytes + 1023) / 1024),
                   (unsigned long long)limits->storage_kib);
    }
    if (limits->messages != 0) {
        buf_printf(x->out, "%sMESSAGE %llu %llu", limits->storage_kib != 0 ? " " : "",
                   (unsigned long long)used.messages, (unsigned long long)limits->messages);
    }
    buf_str(x->out, ")\r\n");
    return 0;
}

void imap_cmd_getquota(struct imap_ctx *x)
{
    char root[IMAP_MAILBOX_MAX + 1];
    if (imap_arg_count(x->cmd) != 1 || imap_astring(imap_arg(x->cmd, 0), root, sizeof root) != 0) {
        imap_tagged(x, "BAD", "GETQUOTA takes a quota root");
        return;
    }
    struct quota_limits limits = imap_quota_limits(x);
    if (root[0] != '\0' || (limits.storage_kib == 0 && limits.messages == 0)) {
        imap_tagged(x, "NO", "[NONEXISTENT] no such quota root");
        return;
    }
    if (imap_quota_line(x, &limits) == 0) {
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
    int rc = mv_mailbox_status(imap_db(x->s), name, &info);
    if (rc != MV_OK) {
        imap_tagged_store_error(x, rc, "GETQUOTAROOT");
        return;
    }
    struct quota_limits limits = imap_quota_limits(x);
    buf_str(x->out, "* QUOTAROOT ");
    imap_mailbox_out(x, name);
    if (limits.storage_kib == 0 && limits.messages == 0) {
        buf_str(x->out, "\r\n");
    } else {
        buf_str(x->out, " \"\"\r\n");
        if (imap_quota_line(x, &limits) != 0) {
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
    imap_tagged(x, "NO",
                "[NOPERM] quotas are set by the server's administrator (quota_kib, "
                "quota_messages, quota_file), not over IMAP");
}
