/*
 * throttle.c -- failed logins counted per client address and per attempted user, across
 * connections: the answer to a failure waits auth_fail_delay_ms doubled once for each
 * earlier failure in the last THROTTLE_WINDOW_S seconds, counted from the address or for the
 * user, whichever has more, up to auth_fail_delay_max_ms (default 5 s: a proxy in front,
 * Dovecot's login_proxy_timeout 30 s, must get the answer, not time out). Behind a trusted
 * proxy the address is the client's (conn_set_client), so the proxy's many users never
 * share a count. So a guesser gains nothing by
 * spreading the guesses for one account over many addresses (a botnet, an IPv6 prefix), nor
 * by spreading one address's guesses over many accounts.
 *
 * USAGE
 *   throttle_failure(peer_addr, normalised_user_or_NULL, base_delay_ms, &counts) once per
 *   failed LOGIN / AUTHENTICATE, on the loop thread; the answer goes out that long after the
 *   command came (imap_session.c), so the work done to fail does not show.
 *
 * IMPLEMENTATION NOTES
 *   Only failures are counted and only failures are delayed: the right password is answered
 *   at once however many failures came before, so an attacker cannot lock the user out (he
 *   can make the user's own typos slow to answer for the window). A success resets neither
 *   count (a guesser holding one valid account would reset it at will); the window does: an
 *   entry is forgotten THROTTLE_WINDOW_S seconds after its first failure.
 *   The user is the normalised address the client tried, whether a store exists for it or
 *   not, so the delay says nothing about existence. A name that is not an address cannot be
 *   an account: it counts for the client address only.
 *   Two fixed tables of THROTTLE_SLOTS entries, one for addresses, one for users. An entry
 *   holds an HMAC-SHA256 of the name under a random per-process key, not the name: the
 *   entries are all one size, and where a name lands is unknown to a client, so it cannot
 *   pick names or addresses that evict one chosen entry. Linear probing over THROTTLE_PROBE
 *   slots; when all are taken the one whose window began first goes. 2 x 4096 x 48 bytes.
 *   Loop thread only.
 *
 * LIMITATIONS
 *   Memory is bounded whatever the number of names; the price is eviction. A client that
 *   fails with many distinct user names (or from many addresses) pushes out older entries,
 *   and an entry pushed out starts again at the base delay. To erase the count of one
 *   account an attacker must make failed logins with new names on the order of the table's
 *   size (thousands) within the window, each counted against its address and held back;
 *   meanwhile the delay of that account falls back to the per-address one, never below
 *   auth_fail_delay_ms. Eviction never lengthens a delay and never refuses a login. Password
 *   spraying (few guesses per account, many accounts, many addresses) is slowed only by the
 *   base delay and the per-connection limit.
 *   A delay holds one connection: parallel connections guess in parallel, up to the
 *   connection limits (per address and in total), and a right guess is never held.
 */
#include "throttle.h"
#include "config.h"
#include "loop.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string.h>

#define THROTTLE_SLOTS     4096
#define THROTTLE_PROBE     8
#define THROTTLE_WINDOW_S  900
#define THROTTLE_KEY_BYTES 32 /* HMAC-SHA256 */

struct throttle_entry {
    unsigned char key[THROTTLE_KEY_BYTES];
    uint32_t failures; /* 0: a free slot */
    int64_t first_ms;  /* the window's start: the first failure */
};

static struct throttle_entry throttle_addresses[THROTTLE_SLOTS];
static struct throttle_entry throttle_users[THROTTLE_SLOTS];
static unsigned char throttle_hmac_key[32];
static int throttle_keyed;

/* The table key of name. Should the random key or the HMAC ever fail, names map to a fixed
 * or an all-zero key: placement becomes predictable, or every name shares one count (longer
 * delays for failures only); logins still work either way. */
static void throttle_key(const char *name, unsigned char key[THROTTLE_KEY_BYTES])
{
    unsigned int len = THROTTLE_KEY_BYTES;
    if (!throttle_keyed) {
        throttle_keyed = RAND_bytes(throttle_hmac_key, sizeof throttle_hmac_key) == 1;
    }
    if (HMAC(EVP_sha256(), throttle_hmac_key, sizeof throttle_hmac_key, (const unsigned char *)name,
             strlen(name), key, &len) == NULL) {
        memset(key, 0, THROTTLE_KEY_BYTES);
    }
}

/* Counts one failure for name in table; returns the failures in its window, this one too. */
static uint32_t throttle_count(struct throttle_entry *table, const char *name, int64_t now_ms)
{
    unsigned char key[THROTTLE_KEY_BYTES];
    throttle_key(name, key);
    uint32_t start = (uint32_t)key[0] | (uint32_t)key[1] << 8 | (uint32_t)key[2] << 16;
    struct throttle_entry *victim = NULL;
    for (uint32_t i = 0; i < THROTTLE_PROBE; i++) {
        struct throttle_entry *e = &table[(start + i) % THROTTLE_SLOTS];
        if (e->failures != 0 && now_ms - e->first_ms > THROTTLE_WINDOW_S * 1000LL) {
            e->failures = 0; /* its window is over */
        }
        if (e->failures != 0 && memcmp(e->key, key, sizeof key) == 0) {
            e->failures += e->failures < UINT32_MAX;
            return e->failures;
        }
        /* The slot to take if name has none: (1) a free one, else (2) the oldest. */
        if (victim == NULL ||
            (victim->failures != 0 && (e->failures == 0 || e->first_ms < victim->first_ms))) {
            victim = e;
        }
    }
    memcpy(victim->key, key, sizeof key);
    victim->failures = 1;
    victim->first_ms = now_ms;
    return 1;
}

int throttle_failure(const char *addr,
                     const char *user,
                     int base_delay_ms,
                     struct throttle_counts *counts)
{
    int64_t now_ms = loop_now_ms();
    counts->address_failures = throttle_count(throttle_addresses, addr, now_ms);
    counts->user_failures = user != NULL ? throttle_count(throttle_users, user, now_ms) : 0;
    uint32_t failures = counts->address_failures > counts->user_failures ? counts->address_failures
                                                                         : counts->user_failures;
    int64_t delay = base_delay_ms, max = g_config.auth_fail_delay_max_ms;
    for (uint32_t i = 1; i < failures && delay < max; i++) {
        delay *= 2;
    }
    return (int)(delay < max ? delay : max);
}
