#!/usr/bin/env bash
# cli_imapd_proxy.sh -- mailvaultd behind a trusted proxy (imapd/proxy.c, issue 11): starts
# the ASan server (build/asan/mailvaultd) on 127.0.0.1 with connections_per_address_max=5,
# first with --trusted-networks=127.0.0.0/8 and then without, and runs
# tests/imapd_proxy.py (which plays Dovecot's proxy) against each; checks the logs: the
# client's address with the proxy's ("A:P via 127.0.0.1:P session S") in the failed-login
# lines, the XCLIENT address, the refusals and the ignored ID / XCLIENT of an untrusted peer;
# and that a bad trusted_networks stops the start-up with the setting's name.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_proxy.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#   (tests/run.sh runs it as part of `make test`.)
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_test_setup cli_imapd_proxy 2

init_users alice@example.org bob@example.org

# A bad setting stops the start-up, naming it.
run "$server" --root="$root" --trusted-networks=10.0.0.0/33
check "trusted_networks=10.0.0.0/33: refused at start, naming the setting" \
    bash -c "[ $rc -ne 0 ] && grep -q 'trusted_networks' '$err'"
run "$server" --root="$root" --trusted-networks="10.0.0.0/8, bogus"
check "trusted_networks with a bad entry: refused, naming the entry" \
    bash -c "[ $rc -ne 0 ] && grep -q 'bogus' '$err'"

delay_ms=200
max_ms=1200
common=(--root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 --workers=2
    --auth-fail-delay-ms=$delay_ms --auth-fail-delay-max-ms=$max_ms
    --connections-per-address-max=5 --login-timeout-s=120)
client=(--delay-ms $delay_ms --max-ms $max_ms --per-address 5
    --user "alice@example.org:alice@example.org secret"
    --user2 "bob@example.org:bob@example.org secret")

for mode in trusted untrusted; do
    log="$tmp/server.$mode.log"
    extra=()
    [ "$mode" = trusted ] && extra=(--trusted-networks="127.0.0.0/8, ::1")
    start_server_checked "$log" "${common[@]}" "${extra[@]}"
    flag=()
    [ "$mode" = trusted ] && flag=(--trusted)
    run_client 300 "$PY" tests/imapd_proxy.py --imap "$(port imap)" --lmtp "$(port lmtp)" \
        "${client[@]}" "${flag[@]}"
    stop_server_checked "$log"
done

log="$tmp/server.trusted.log"
check "trusted log: a failed login names the client, the proxy and the session" \
    grep -qE 'login failed alice@example\.org from 10\.1\.0\.1:50000 via 127\.0\.0\.1:[0-9]+ session f0: ' "$log"
check "trusted log: the other user's failure counted on its own address (1 from it)" \
    grep -qE 'login failed bob@example\.org from 10\.1\.0\.2:50000 via .*failures in 15 min: 1 from the address, 1 for the user' "$log"
check "trusted log: a login names the client and the proxy" \
    grep -qE 'login alice@example\.org from 10\.0\.0\.[0-9]+:4[0-9]+ via 127\.0\.0\.1:[0-9]+ session sess[0-9]+$' "$log"
check "trusted log: the XCLIENT client with the proxy" \
    grep -qE 'client 10\.2\.0\.1:4444 via 127\.0\.0\.1:[0-9]+' "$log"
check "trusted log: the IPv6 XCLIENT client" grep -qE 'client \[2001:db8::7\]:25 via ' "$log"
check "trusted log: the refused client address" \
    grep -qE 'refused 10\.9\.9\.9 via 127\.0\.0\.1:[0-9]+: too many connections' "$log"
log="$tmp/server.untrusted.log"
check "untrusted log: ID's x-originating-ip ignored and logged" \
    grep -qE 'x-originating-ip 10\.0\.0\.[0-9]+ ignored \(not in trusted_networks\)' "$log"
check "untrusted log: XCLIENT ignored and logged" grep -qE 'XCLIENT ignored' "$log"
check "untrusted log: refusals past the per-address limit" \
    grep -qE 'refused 127\.0\.0\.1:[0-9]+: too many connections from your address' "$log"

finish
