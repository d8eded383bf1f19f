/*
 * proxy.c -- trusted proxies (docs/SCALEOUT.md): which peers may pass the real client's
 * address (setting trusted_networks, a list of CIDR prefixes), and reading the address and
 * port such a peer passes (IMAP ID's x-originating-ip, LMTP XCLIENT's ADDR=).
 *
 * USAGE
 *   proxy_networks_check(list, err) when the setting is read (a typo stops the start-up);
 *   proxy_trusted(sockaddr) once per accepted connection; proxy_parse_address(text, out)
 *   on the value a trusted peer passed, before conn_set_client (conn.c).
 *
 * IMPLEMENTATION NOTES
 *   The list is short (an operator's proxies), so it is parsed again at each connection
 *   rather than kept in a second form that could drift from the setting. An IPv4 peer seen
 *   through an IPv6 socket (::ffff:a.b.c.d) matches the IPv4 prefixes. inet_pton does the
 *   address syntax; only the "/bits" suffix and the list are read here.
 */
#include "proxy.h"
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct proxy_prefix {
    int family; /* AF_INET or AF_INET6 */
    unsigned char addr[16];
    unsigned bits;
};

/* One "address[/bits]" of len bytes. 0 or -1. */
static int proxy_prefix_parse(const char *text, size_t len, struct proxy_prefix *p)
{
    char buf[INET6_ADDRSTRLEN + 8];
    if (len == 0 || len >= sizeof buf) {
        return -1;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *slash = strchr(buf, '/');
    if (slash != NULL) {
        *slash = '\0';
    }
    if (inet_pton(AF_INET, buf, p->addr) == 1) {
        p->family = AF_INET;
        p->bits = 32;
    } else if (inet_pton(AF_INET6, buf, p->addr) == 1) {
        p->family = AF_INET6;
        p->bits = 128;
    } else {
        return -1;
    }
    if (slash != NULL) {
        char *end = NULL;
        unsigned long bits = strtoul(slash + 1, &end, 10);
        if (slash[1] < '0' || slash[1] > '9' || *end != '\0' || bits > p->bits) {
            return -1;
        }
        p->bits = (unsigned)bits;
    }
    return 0;
}

static int proxy_prefix_match(const struct proxy_prefix *p, const unsigned char *addr)
{
    unsigned full = p->bits / 8, rest = p->bits % 8;
    if (memcmp(p->addr, addr, full) != 0) {
        return 0;
    }
    unsigned char mask = (unsigned char)(0xff00u >> rest);
    return rest == 0 || ((p->addr[full] ^ addr[full]) & mask) == 0;
}

/* Calls each prefix of list (separated by commas and/or blanks) until fn returns nonzero;
 * returns that, or -1 at the first that does not parse (its text in bad), else 0. */
static int proxy_each(const char *list,
                      int (*fn)(const struct proxy_prefix *, const void *),
                      const void *arg,
                      char *bad,
                      size_t bad_size)
{
    for (const char *p = list; *p != '\0';) {
        p += strspn(p, ", \t");
        size_t len = strcspn(p, ", \t");
        if (len == 0) {
            break;
        }
        struct proxy_prefix prefix;
        if (proxy_prefix_parse(p, len, &prefix) != 0) {
            snprintf(bad, bad_size, "%.*s", (int)(len < 64 ? len : 64), p);
            return -1;
        }
        int r = fn != NULL ? fn(&prefix, arg) : 0;
        if (r != 0) {
            return r;
        }
        p += len;
    }
    return 0;
}

int proxy_networks_check(const char *list, char *err, size_t err_size)
{
    char bad[80];
    if (proxy_each(list, NULL, NULL, bad, sizeof bad) != 0) {
        snprintf(err, err_size,
                 "trusted_networks: \"%s\" is not an address or ADDRESS/BITS (10.0.0.0/8, "
                 "2001:db8::/32)",
                 bad);
        return -1;
    }
    return 0;
}

struct proxy_peer {
    int family;
    unsigned char addr[16];
};

static int proxy_match_peer(const struct proxy_prefix *p, const void *arg)
{
    const struct proxy_peer *peer = arg;
    return p->family == peer->family && proxy_prefix_match(p, peer->addr);
}

int proxy_trusted(const struct sockaddr_storage *sa)
{
    struct proxy_peer peer;
    memset(&peer, 0, sizeof peer);
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        peer.family = AF_INET;
        memcpy(peer.addr, &in->sin_addr, 4);
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            peer.family = AF_INET;
            memcpy(peer.addr, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            peer.family = AF_INET6;
            memcpy(peer.addr, &in6->sin6_addr, 16);
        }
    } else {
        return 0;
    }
    char bad[80];
    return proxy_each(g_config.trusted_networks, proxy_match_peer, &peer, bad, sizeof bad) == 1;
}

int proxy_parse_address(const char *text, char *out, size_t out_size)
{
    char buf[INET6_ADDRSTRLEN + 8];
    /* Postfix's XCLIENT writes IPv6 as "IPV6:2001:db8::1"; some proxies bracket it. */
    if (strncasecmp(text, "IPV6:", 5) == 0) {
        text += 5;
    }
    size_t len = strlen(text);
    if (len >= 2 && text[0] == '[' && text[len - 1] == ']') {
        text++;
        len -= 2;
    }
    if (len == 0 || len >= sizeof buf) {
        return -1;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    unsigned char addr[16];
    if (inet_pton(AF_INET, buf, addr) == 1) {
        return inet_ntop(AF_INET, addr, out, (socklen_t)out_size) != NULL ? 0 : -1;
    }
    if (inet_pton(AF_INET6, buf, addr) == 1) {
        struct in6_addr a6;
        memcpy(&a6, addr, sizeof a6);
        if (IN6_IS_ADDR_V4MAPPED(&a6)) { /* count ::ffff:a.b.c.d with a.b.c.d */
            return inet_ntop(AF_INET, addr + 12, out, (socklen_t)out_size) != NULL ? 0 : -1;
        }
        return inet_ntop(AF_INET6, addr, out, (socklen_t)out_size) != NULL ? 0 : -1;
    }
    return -1;
}
