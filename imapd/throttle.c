/*
 * throttle.c -- failed logins per client address, across connections: each failure in the
 * last THROTTLE_WINDOW_S seconds doubles the delay before the next failure's answer, from
 * auth_fail_delay_ms up to THROTTLE_DELAY_MAX_MS. A success does not reset it (a guesser
 * holding one valid account would otherwise reset it at will); the window does.
 *
 * IMPLEMENTATION NOTES
 *   A fixed table of THROTTLE_SLOTS entries, looked up by address hash with linear probing
 *   over THROTTLE_PROBE slots; when all are taken the oldest entry goes. Memory is bounded
 *   whatever the number of addresses; an attacker with more addresses than slots only
 *   evicts entries (each connection still has its own delay and its 3-failure limit).
 *   Loop thread only.
 */
#include "imapd.h"

#include <stdio.h>
#include <string.h>

#define THROTTLE_SLOTS        4096
#define THROTTLE_PROBE        8
#define THROTTLE_WINDOW_S     900
#define THROTTLE_DELAY_MAX_MS 30000

struct throttle_entry {
    char addr[48];
    uint32_t failures;
    int64_t first_ms;
};

static struct throttle_entry throttle_table[THROTTLE_SLOTS];

static uint32_t throttle_hash(const char *addr)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)addr; *p != '\0'; p++) {
        h = (h ^ *p) * 16777619u;
    }
    return h;
}

/* The entry of addr (created if create), or NULL. */
static struct throttle_entry *throttle_find(const char *addr, int64_t now_ms, int create)
{
    uint32_t h = throttle_hash(addr);
    struct throttle_entry *oldest = NULL;
    for (uint32_t i = 0; i < THROTTLE_PROBE; i++) {
        struct throttle_entry *e = &throttle_table[(h + i) % THROTTLE_SLOTS];
        int expired = e->addr[0] != '\0' && now_ms - e->first_ms > THROTTLE_WINDOW_S * 1000LL;
        if (e->addr[0] != '\0' && !expired && strcmp(e->addr, addr) == 0) {
            return e;
        }
        if (e->addr[0] == '\0' || expired) {
            e->addr[0] = '\0';
            if (oldest == NULL || oldest->addr[0] != '\0') {
                oldest = e;
            }
        } else if (oldest == NULL || (oldest->addr[0] != '\0' && e->first_ms < oldest->first_ms)) {
            oldest = e;
        }
    }
    if (!create || oldest == NULL) {
        return NULL;
    }
    memset(oldest, 0, sizeof *oldest);
    snprintf(oldest->addr, sizeof oldest->addr, "%s", addr);
    oldest->first_ms = now_ms;
    return oldest;
}

int throttle_failure(const char *addr, int base_delay_ms)
{
    struct throttle_entry *e = throttle_find(addr, loop_now_ms(), 1);
    uint32_t failures = e != NULL ? ++e->failures : 1;
    int64_t delay = base_delay_ms;
    for (uint32_t i = 1; i < failures && delay < THROTTLE_DELAY_MAX_MS; i++) {
        delay *= 2;
    }
    return (int)(delay < THROTTLE_DELAY_MAX_MS ? delay : THROTTLE_DELAY_MAX_MS);
}
