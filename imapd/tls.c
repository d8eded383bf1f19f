/*
 * tls.c -- the server's OpenSSL context: TLS 1.2 and later, the certificate chain and key
 * from the configured PEM files, no session tickets (no ticket key to protect), and one
 * SSL object per connection in accept state. conn.c does the non-blocking reads and
 * writes (SSL_ERROR_WANT_READ / WANT_WRITE map to waiting for the socket).
 *
 * USAGE
 *   tls_init(cert, key, info, ...)   at start-up, before the switch of users
 *   tls_new(fd)                      each TLS connection (implicit TLS or STARTTLS)
 *   tls_reload(cert, key, info, ...) SIGHUP (main.c): a new context for new connections
 *   tls_shutdown()                   at exit
 *
 * IMPLEMENTATION NOTES
 *   - A reload builds a whole new SSL_CTX and swaps it in only if the chain, the key and
 *     their match all load; otherwise the error is returned and the old context stays.
 *     SSL_new takes a reference on its SSL_CTX (and on the session context, the same one
 *     here), so dropping ours with SSL_CTX_free after the swap frees nothing a live
 *     connection uses: each keeps the context it was made with until SSL_free, and the old
 *     context goes with the last of them.
 *   - The files are opened first with open(2) for a clear error: after the switch of users
 *     a key left readable by root only is the usual reason a reload fails, and OpenSSL's
 *     own text for it ("system library") does not say that.
 *   - Every failure clears this thread's OpenSSL error queue: conn.c's SSL_get_error()
 *     calls run on the same (loop) thread and would otherwise see the stale entries.
 *
 * LIMITATIONS
 *   - Loop thread only: tls_ctx is not locked (conn.c and main.c's signal handler both run
 *     on the loop).
 *   - The key must not have a passphrase (no prompt in a server).
 */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static SSL_CTX *tls_ctx;

/* Fails with a message naming the account when path cannot be opened for reading. */
static int tls_readable(const char *path, const char *what, char *err, size_t err_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    int e = errno;
    snprintf(err, err_size, "cannot read the %s %s as uid %u: %s%s", what, path,
             (unsigned)geteuid(), strerror(e),
             e == EACCES ? " (it must be readable by the account the server runs as, e.g. "
                           "through group ssl-cert, to be reloaded; or restart instead)"
                         : "");
    return -1;
}

/* "step: reason, reason" in err from OpenSSL's queue, oldest (the cause) first, and an
 * empty queue. The reasons alone: a broken key gives "unsupported, PEM lib" rather than
 * only the last, "PEM lib", which says nothing about why. */
static void tls_error(const char *step, char *err, size_t err_size)
{
    char text[256] = "";
    size_t used = 0;
    const char *last = NULL;
    unsigned long e;
    while ((e = ERR_get_error()) != 0) {
        char code[32];
        const char *reason = ERR_reason_error_string(e);
        if (reason == NULL) {
            snprintf(code, sizeof code, "error %lx", e);
            reason = code;
        }
        if (last != NULL && strcmp(last, reason) == 0) {
            continue;
        }
        last = reason == code ? NULL : reason;
        int n = snprintf(text + used, sizeof text - used, "%s%s", used > 0 ? ", " : "", reason);
        if (n < 0 || (size_t)n >= sizeof text - used) {
            break;
        }
        used += (size_t)n;
    }
    ERR_clear_error();
    snprintf(err, err_size, "%s: %s", step, used > 0 ? text : "no detail from OpenSSL");
}

/* A server context holding the chain in cert and the key in key ("": in cert), or NULL
 * with the reason in err. */
static SSL_CTX *tls_ctx_load(const char *cert, const char *key, char *err, size_t err_size)
{
    const char *key_path = key[0] != '\0' ? key : cert;
    char why[384];
    if (tls_readable(cert, "certificate", why, sizeof why) != 0 ||
        tls_readable(key_path, "key", why, sizeof why) != 0) {
        snprintf(err, err_size, "TLS: %s", why);
        return NULL;
    }
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        tls_error("cannot create a TLS context", err, err_size);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    const char *step = NULL;
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
        step = "the certificate chain";
    } else if (SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM) != 1) {
        step = "the key";
    } else if (SSL_CTX_check_private_key(ctx) != 1) {
        step = "the key does not match the certificate";
    }
    if (step != NULL) {
        char text[320];
        tls_error(step, text, sizeof text);
        snprintf(err, err_size, "TLS certificate %s / key %s: %s", cert, key_path, text);
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* "SHA-256 AB:CD:..., not after YYYY-MM-DD" of ctx's certificate, for the log: what an
 * operator compares with `openssl x509 -noout -fingerprint -sha256`. */
static void tls_describe(SSL_CTX *ctx, char *info, size_t info_size)
{
    X509 *x = SSL_CTX_get0_certificate(ctx);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    char hex[EVP_MAX_MD_SIZE * 3 + 1] = "";
    if (x == NULL || X509_digest(x, EVP_sha256(), md, &md_len) != 1) {
        snprintf(info, info_size, "no fingerprint");
        ERR_clear_error();
        return;
    }
    for (unsigned i = 0; i < md_len; i++) {
        snprintf(hex + 3 * i, sizeof hex - 3 * i, "%02X%s", md[i], i + 1 < md_len ? ":" : "");
    }
    struct tm tm;
    char until[32] = "?";
    if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1) {
        strftime(until, sizeof until, "%Y-%m-%d", &tm);
    }
    snprintf(info, info_size, "SHA-256 %s, not after %s", hex, until);
}

int tls_init(
    const char *cert, const char *key, char *info, size_t info_size, char *err, size_t err_size)
{
    info[0] = '\0';
    if (cert[0] == '\0') {
        return 0; /* no TLS configured */
    }
    tls_ctx = tls_ctx_load(cert, key, err, err_size);
    if (tls_ctx == NULL) {
        return -1;
    }
    tls_describe(tls_ctx, info, info_size);
    return 0;
}

int tls_reload(
    const char *cert, const char *key, char *info, size_t info_size, char *err, size_t err_size)
{
    info[0] = '\0';
    SSL_CTX *fresh = tls_ctx_load(cert, key, err, err_size);
    if (fresh == NULL) {
        return -1;
    }
    /* Our reference only: connections made with the old context hold their own. */
    SSL_CTX_free(tls_ctx);
    tls_ctx = fresh;
    tls_describe(tls_ctx, info, info_size);
    return 0;
}

int tls_available(void)
{
    return tls_ctx != NULL;
}

SSL *tls_new(int fd)
{
    if (tls_ctx == NULL) {
        return NULL;
    }
    SSL *ssl = SSL_new(tls_ctx);
    if (ssl != NULL && SSL_set_fd(ssl, fd) != 1) {
        SSL_free(ssl);
        return NULL;
    }
    if (ssl != NULL) {
        SSL_set_accept_state(ssl);
    }
    return ssl;
}

void tls_shutdown(void)
{
    SSL_CTX_free(tls_ctx);
    tls_ctx = NULL;
}
