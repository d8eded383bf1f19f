/*
 * tls.c -- the server's OpenSSL context: TLS 1.2 and later, the certificate chain and key
 * from the configured PEM files, no session tickets (no ticket key to protect), and one
 * SSL object per connection in accept state. conn.c does the non-blocking reads and
 * writes (SSL_ERROR_WANT_READ / WANT_WRITE map to waiting for the socket).
 */
#include "imapd.h"

#include <openssl/err.h>
#include <stdio.h>

static SSL_CTX *tls_ctx;

int tls_init(const char *cert, const char *key, char *err, size_t err_size)
{
    if (cert[0] == '\0') {
        return 0; /* no TLS configured */
    }
    tls_ctx = SSL_CTX_new(TLS_server_method());
    if (tls_ctx == NULL) {
        snprintf(err, err_size, "cannot create a TLS context");
        return -1;
    }
    SSL_CTX_set_min_proto_version(tls_ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(tls_ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION |
                                     SSL_OP_CIPHER_SERVER_PREFERENCE);
    SSL_CTX_set_mode(tls_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (SSL_CTX_use_certificate_chain_file(tls_ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls_ctx, key[0] != '\0' ? key : cert, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(tls_ctx) != 1) {
        unsigned long e = ERR_get_error();
        char text[256];
        ERR_error_string_n(e, text, sizeof text);
        snprintf(err, err_size, "TLS certificate %s / key %s: %s", cert, key, text);
        SSL_CTX_free(tls_ctx);
        tls_ctx = NULL;
        return -1;
    }
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
