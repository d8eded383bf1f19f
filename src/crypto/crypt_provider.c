/*
 * crypt_provider.c -- ChaCha20 and Poly1305 called through the function tables of the
 * OpenSSL provider that EVP fetched them from, for the per-page work of chacha20.
 *
 * WHY
 *   Every chacha20 page is a new ChaCha20 key and a new Poly1305 key. Through EVP each
 *   re-key asks the provider for the key and IV lengths (OSSL_PARAM look-ups by name) and
 *   each EVP_MAC_final() asks it for the tag size: ~110 ns of a 4 KiB page's ~1.5 us on the
 *   benchmark machine, for answers that never change. The provider interface is public
 *   (provider-cipher(7), provider-mac(7), OSSL_PROVIDER_query_operation(3)): calling its
 *   init / update / final functions directly runs the same OpenSSL code (same assembly,
 *   same key handling) without that bookkeeping. Nothing here is cryptography of our own.
 *
 * IMPLEMENTATION NOTES
 *   - Resolved once per process by crypt_init() from the provider of the EVP_CIPHER and
 *     EVP_MAC it fetched, by algorithm name. If any function is missing (another provider,
 *     another OpenSSL), crypt_provider() answers NULL and chacha20 stays on EVP.
 *   - The fetched EVP objects stay referenced for the life of the process, so the provider
 *     (and the functions resolved from it) stays loaded.
 *   - The provider contexts free themselves with a cleansing free (the key schedule).
 *   - crypt_provider_enable(0) makes new contexts use EVP (tests compare both paths).
 */
#include "crypto/crypt_internal.h"

#include <stdatomic.h>
#include <string.h>
#include <strings.h>

static struct crypt_provider crypt_provider_fns;
static int crypt_provider_resolved;
static atomic_int crypt_provider_disabled;

/* Whether the colon-separated names list contains want (case-insensitive, as OpenSSL). */
static int crypt_provider_has_name(const char *names, const char *want)
{
    const size_t want_len = strlen(want);
    for (const char *p = names; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ':');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == want_len && strncasecmp(p, want, len) == 0) {
            return 1;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

/* Copies the functions of operation op, algorithm name, in prov into *out via take().
 * 1 when the algorithm was found. */
static int crypt_provider_lookup(OSSL_PROVIDER *prov,
                                 int op,
                                 const char *name,
                                 struct crypt_provider *out,
                                 void (*take)(struct crypt_provider *, const OSSL_DISPATCH *))
{
    int no_cache = 0;
    const OSSL_ALGORITHM *algs = OSSL_PROVIDER_query_operation(prov, op, &no_cache);
    int found = 0;
    for (const OSSL_ALGORITHM *a = algs; a != NULL && a->algorithm_names != NULL; a++) {
        if (crypt_provider_has_name(a->algorithm_names, name)) {
            take(out, a->implementation);
            found = 1;
            break;
        }
    }
    if (algs != NULL) {
        OSSL_PROVIDER_unquery_operation(prov, op, algs);
    }
    return found;
}

static void crypt_provider_take_cipher(struct crypt_provider *p, const OSSL_DISPATCH *d)
{
    for (; d->function_id != 0; d++) {
        switch (d->function_id) {
        case OSSL_FUNC_CIPHER_NEWCTX:
            p->cipher_newctx = OSSL_FUNC_cipher_newctx(d);
            break;
        case OSSL_FUNC_CIPHER_FREECTX:
            p->cipher_freectx = OSSL_FUNC_cipher_freectx(d);
            break;
        case OSSL_FUNC_CIPHER_ENCRYPT_INIT:
            p->cipher_init = OSSL_FUNC_cipher_encrypt_init(d);
            break;
        case OSSL_FUNC_CIPHER_UPDATE:
            p->cipher_update = OSSL_FUNC_cipher_update(d);
            break;
        default:
            break;
        }
    }
}

static void crypt_provider_take_mac(struct crypt_provider *p, const OSSL_DISPATCH *d)
{
    for (; d->function_id != 0; d++) {
        switch (d->function_id) {
        case OSSL_FUNC_MAC_NEWCTX:
            p->mac_newctx = OSSL_FUNC_mac_newctx(d);
            break;
        case OSSL_FUNC_MAC_FREECTX:
            p->mac_freectx = OSSL_FUNC_mac_freectx(d);
            break;
        case OSSL_FUNC_MAC_INIT:
            p->mac_init = OSSL_FUNC_mac_init(d);
            break;
        case OSSL_FUNC_MAC_UPDATE:
            p->mac_update = OSSL_FUNC_mac_update(d);
            break;
        case OSSL_FUNC_MAC_FINAL:
            p->mac_final = OSSL_FUNC_mac_final(d);
            break;
        default:
            break;
        }
    }
}

void crypt_provider_resolve(const struct crypt_algs *a)
{
    struct crypt_provider p;
    memset(&p, 0, sizeof p);
    OSSL_PROVIDER *cprov = (OSSL_PROVIDER *)EVP_CIPHER_get0_provider(a->chacha20);
    OSSL_PROVIDER *mprov = (OSSL_PROVIDER *)EVP_MAC_get0_provider(a->poly1305);
    /* (1) both providers known, (2) both algorithms listed, (3) every function present. */
    if (cprov == NULL || mprov == NULL ||
        !crypt_provider_lookup(cprov, OSSL_OP_CIPHER, EVP_CIPHER_get0_name(a->chacha20), &p,
                               crypt_provider_take_cipher) ||
        !crypt_provider_lookup(mprov, OSSL_OP_MAC, EVP_MAC_get0_name(a->poly1305), &p,
                               crypt_provider_take_mac)) {
        return;
    }
    p.cipher_provctx = OSSL_PROVIDER_get0_provider_ctx(cprov);
    p.mac_provctx = OSSL_PROVIDER_get0_provider_ctx(mprov);
    if (p.cipher_newctx == NULL || p.cipher_freectx == NULL || p.cipher_init == NULL ||
        p.cipher_update == NULL || p.mac_newctx == NULL || p.mac_freectx == NULL ||
        p.mac_init == NULL || p.mac_update == NULL || p.mac_final == NULL) {
        return;
    }
    crypt_provider_fns = p;
    crypt_provider_resolved = 1;
}

const struct crypt_provider *crypt_provider(void)
{
    if (!crypt_provider_resolved || atomic_load(&crypt_provider_disabled)) {
        return NULL;
    }
    return &crypt_provider_fns;
}

void crypt_provider_enable(int on)
{
    atomic_store(&crypt_provider_disabled, !on);
}
