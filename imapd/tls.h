/*
 * tls.h -- the OpenSSL context (tls.c; loop thread): TLS 1.2+, STARTTLS and implicit TLS,
 * a new context on SIGHUP.
 */
#ifndef MV_IMAPD_TLS_H
#define MV_IMAPD_TLS_H

#include <openssl/ssl.h>
#include <stddef.h>

/* Loads cert and key ("": in cert); cert "" is no TLS. 0 with the certificate's SHA-256
 * fingerprint and expiry in info, or -1 with the reason in err. */
int tls_init(
    const char *cert, const char *key, char *info, size_t info_size, char *err, size_t err_size);
/* As tls_init, into a new context for connections made from now on (SIGHUP); on -1 the
 * previous context stays. Existing connections keep the context they were made with. */
int tls_reload(
    const char *cert, const char *key, char *info, size_t info_size, char *err, size_t err_size);
int tls_available(void);
SSL *tls_new(int fd);
void tls_shutdown(void);

#endif /* MV_IMAPD_TLS_H */
