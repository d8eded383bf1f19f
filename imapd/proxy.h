/*
 * proxy.h -- trusted_networks (proxy.c): which peers may pass the client's address (IMAP
 * ID, LMTP XCLIENT), and reading the address they pass.
 */
#ifndef MV_IMAPD_PROXY_H
#define MV_IMAPD_PROXY_H

#include <stddef.h>
#include <sys/socket.h>

/* Whether list parses as trusted_networks (CIDR prefixes); 0, or -1 with err. */
int proxy_networks_check(const char *list, char *err, size_t err_size);
/* Whether a socket peer is in g_config.trusted_networks. */
int proxy_trusted(const struct sockaddr_storage *sa);
/* An address a proxy passed ("192.0.2.1", "2001:db8::1", "IPV6:2001:db8::1", "[::1]"),
 * normalised into out (an IPv4-mapped IPv6 address as IPv4). 0, or -1 if it is none. */
int proxy_parse_address(const char *text, char *out, size_t out_size);

#endif /* MV_IMAPD_PROXY_H */
