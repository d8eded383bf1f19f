/*
 * imap_cmd_auth.c -- LOGIN and AUTHENTICATE PLAIN (RFC 4616, with SASL-IR, RFC 4959), on
 * the user's worker: the store is opened (or found open, the password checked against its
 * verifier) there. A failure says only AUTHENTICATIONFAILED, whether the user exists or not,
 * and its answer is held back on the loop (throttle.c: per address and per user), which also
 * logs it. Passwords are wiped after use (the job's command bytes are wiped when the job is
 * freed).
 */
#include "buf.h"
#include "config.h"
#include "control.h"
#include "imap_session.h"
#include "log.h"
#include "mailvault.h"
#include "metrics.h"
#include "worker.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAP_PASSWORD_MAX 1024

static int imap_b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Strict base64 (padding required); *out_len bytes into out. 0 or -1. */
static int
imap_b64_decode(const char *in, size_t len, unsigned char *out, size_t out_size, size_t *out_len)
{
    size_t at = 0;
    if (len % 4 != 0) {
        return -1;
    }
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)in[i + (size_t)k];
            if (c == '=' && i + 4 == len && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad != 0 || (v[k] = imap_b64_value(c)) < 0) {
                return -1;
            }
        }
        unsigned triple = (unsigned)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        size_t n = 3 - (size_t)pad;
        if (at + n > out_size) {
            return -1;
        }
        for (size_t k = 0; k < n; k++) {
            out[at++] = (unsigned char)(triple >> (16 - 8 * k));
        }
    }
    *out_len = at;
    return 0;
}

/* Splits a decoded PLAIN message: authzid NUL authcid NUL password. 0 or -1. */
static int imap_plain_split(const unsigned char *msg,
                            size_t len,
                            const char **authzid,
                            const char **authcid,
                            const char **password,
                            size_t *password_len)
{
    const unsigned char *nul1 = memchr(msg, 0, len);
    if (nul1 == NULL) {
        return -1;
    }
    const unsigned char *nul2 = memchr(nul1 + 1, 0, len - (size_t)(nul1 + 1 - msg));
    if (nul2 == NULL) {
        return -1;
    }
    *authzid = (const char *)msg;
    *authcid = (const char *)nul1 + 1;
    *password = (const char *)nul2 + 1;
    *password_len = len - (size_t)(nul2 + 1 - msg);
    return memchr(*password, 0, *password_len) == NULL ? 0 : -1;
}

int imap_sasl_plain_user(const char *b64, size_t len, char *user, size_t user_size)
{
    unsigned char msg[IMAP_PASSWORD_MAX + 2 * MV_ADDRESS_MAX + 4];
    size_t n = 0;
    const char *authzid, *authcid, *password;
    size_t password_len;
    while (len > 0 && (b64[len - 1] == '\n' || b64[len - 1] == '\r')) {
        len--;
    }
    int rc = -1;
    if (imap_b64_decode(b64, len, msg, sizeof msg - 1, &n) == 0) {
        msg[n] = '\0';
        if (imap_plain_split(msg, n, &authzid, &authcid, &password, &password_len) == 0 &&
            strlen(authcid) < user_size) {
            snprintf(user, user_size, "%s", authcid);
            rc = 0;
        }
    }
    OPENSSL_cleanse(msg, sizeof msg);
    return rc;
}

/* The loop logs the failure and counts it per address and per user (imap_session.c). */
static void imap_login_failed(struct imap_ctx *x, const char *user, const char *why)
{
    x->failed_why = why;
    x->failed_user_normal =
        mv_address_normalize(user, x->failed_user, sizeof x->failed_user, NULL, 0) == MV_OK;
    if (!x->failed_user_normal) {
        snprintf(x->failed_user, sizeof x->failed_user, "%.100s", user);
    }
    x->delay_ms = g_config.auth_fail_delay_ms;
    imap_tagged(x, "NO", "[AUTHENTICATIONFAILED] authentication failed");
    if (++x->s->login_failures >= IMAP_LOGIN_FAILURES_MAX) {
        buf_str(x->out, "* BYE too many failed logins\r\n");
        x->logout = 1;
    }
}

/* Opens the user's store on this worker and moves the session to AUTH. */
static void
imap_login_finish(struct imap_ctx *x, const char *user, const char *password, size_t password_len)
{
    struct imap_session *s = x->s;
    char normal[MV_ADDRESS_MAX + 1], err[512] = "";
    if (mv_address_normalize(user, normal, sizeof normal, NULL, 0) != MV_OK) {
        imap_login_failed(x, user, "not an address");
        return;
    }
    if (worker_placed(normal) != s->worker) { /* the loop placed the name it read (PLACEMENT) */
        imap_login_failed(x, normal, "routed to the wrong worker");
        return;
    }
    if (password_len == 0 || password_len > IMAP_PASSWORD_MAX) {
        imap_login_failed(x, normal, "empty or over-long password");
        return;
    }
    if (control_user_held(normal)) { /* a release in progress (control.c) */
        log_info("login %s: refused, the store is being released", normal);
        imap_tagged(x, "NO", "[UNAVAILABLE] this mailbox is being moved; try again later");
        return;
    }
    struct open_store *store = NULL;
    int rc =
        worker_store_acquire(s->worker, normal, password, password_len, &store, err, sizeof err);
    if (rc == MV_EAUTH || rc == MV_ENOTFOUND || rc == MV_EINVAL) {
        imap_login_failed(x, normal, rc == MV_ENOTFOUND ? "no such store" : "wrong password");
        return;
    }
    if (rc == MV_EMOVED) {
        /* Released from this node (mailvault release): expected while the proxy's route
         * still points here, so not an error; the client or proxy retries elsewhere. */
        log_info("login %s: refused, the store was released from this node", normal);
        imap_tagged(x, "NO", "[UNAVAILABLE] this mailbox is served elsewhere now; try again");
        return;
    }
    if (rc != MV_OK) {
        log_error("login %s: store unavailable: %s", normal, err);
        imap_tagged(x, "NO", "[UNAVAILABLE] the mail store cannot be opened now: %s",
                    mv_strerror(rc));
        return;
    }
    /* Counted after the password is checked (a wrong one is told so, whatever the count);
     * the session that would be one too many gives its reference back. Not a failed login:
     * nothing is slowed or counted against the address. */
    int sessions = worker_store_sessions(s->worker, store);
    if (sessions > g_config.user_sessions_max) {
        worker_store_release(s->worker, store);
        log_info("login %s: refused, %d sessions of this user are logged in (user_sessions_max)",
                 normal, sessions - 1);
        imap_tagged(x, "NO",
                    "[UNAVAILABLE] too many sessions of this user are logged in "
                    "(user_sessions_max is %d); close one and try again",
                    g_config.user_sessions_max);
        return;
    }
    s->store = store;
    s->state = IMAP_AUTH;
    snprintf(s->user, sizeof s->user, "%s", normal);
    metrics_count(METRIC_LOGINS_OK);
    /* logged on the loop (imap_job_done), with the client's address */
    imap_tagged(x, "OK", "[CAPABILITY %s] logged in", imap_capabilities(s));
}

void imap_cmd_login(struct imap_ctx *x)
{
    char user[MV_ADDRESS_MAX + 1], password[IMAP_PASSWORD_MAX + 1];
    if (imap_arg_count(x->cmd) != 2 || imap_astring(imap_arg(x->cmd, 0), user, sizeof user) != 0 ||
        imap_astring(imap_arg(x->cmd, 1), password, sizeof password) != 0) {
        imap_tagged(x, "BAD", "LOGIN needs a user name and a password");
        return;
    }
    imap_login_finish(x, user, password, strlen(password));
    OPENSSL_cleanse(password, sizeof password);
}

void imap_cmd_authenticate(struct imap_ctx *x, const char *response, size_t len)
{
    unsigned char msg[IMAP_PASSWORD_MAX + 2 * MV_ADDRESS_MAX + 4];
    size_t n = 0;
    if (response == NULL) {
        const struct imap_node *mech = imap_arg(x->cmd, 0), *ir = imap_arg(x->cmd, 1);
        if (!imap_atom_is(mech, "PLAIN")) {
            imap_tagged(x, "NO", "[CANNOT] unsupported authentication mechanism");
            return;
        }
        if (ir == NULL || ir->type != IMAP_NODE_ATOM || imap_arg_count(x->cmd) != 2) {
            imap_tagged(x, "BAD", "AUTHENTICATE PLAIN takes one initial response");
            return;
        }
        response = ir->data;
        len = ir->len;
    } else {
        while (len > 0 && (response[len - 1] == '\n' || response[len - 1] == '\r')) {
            len--;
        }
        if (len == 1 && response[0] == '*') {
            imap_tagged(x, "BAD", "authentication cancelled");
            return;
        }
    }
    if (len == 1 && response[0] == '=') {
        len = 0; /* an empty initial response */
    }
    const char *authzid, *authcid, *password;
    size_t password_len;
    if (imap_b64_decode(response, len, msg, sizeof msg - 1, &n) != 0) {
        imap_tagged(x, "BAD", "malformed base64");
        return;
    }
    msg[n] = '\0';
    if (imap_plain_split(msg, n, &authzid, &authcid, &password, &password_len) != 0) {
        imap_login_failed(x, "?", "malformed PLAIN message");
    } else if (authzid[0] != '\0' && strcmp(authzid, authcid) != 0) {
        imap_login_failed(x, authcid, "authorization identity differs");
    } else {
        imap_login_finish(x, authcid, password, password_len);
    }
    OPENSSL_cleanse(msg, sizeof msg);
}
