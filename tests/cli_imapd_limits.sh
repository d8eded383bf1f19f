#!/usr/bin/env bash
# cli_imapd_limits.sh -- mailvaultd against hostile clients (issue 15; docs/IMAPD.md
# "Limits"): the pre-login bounds, the login and LMTP transaction deadlines, the two
# connection pools, the server-wide literal and LMTP budgets, LMTP's recipient dedupe,
# CRLF.CRLF-only end of DATA and refused-recipient limit. Runs tests/imapd_limits.py twice:
#   1. "functional" against the ASan server with small limits (deadlines of 3 s, 30 IMAP and
#      2 LMTP connections, budgets of 200,000 bytes, 3 refused recipients, 4 sessions a user);
#   2. "hostile" against the release server (build/mailvaultd, whose RSS means what it
#      says; ASan's shadow memory and quarantine do not) with the default limits: 1,000
#      connections that never log in, a normal login and an LMTP delivery meanwhile.
# Then checks each server's SIGTERM exit and the ASan server's log (no sanitizer report, the
# timeouts logged).
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault build/mailvaultd && bash tests/cli_imapd_limits.sh
#   MAILVAULTD=path tests another build in the first run; MAILVAULTD_REL the second one.
#   KEEP_TMP=1 keeps the temporary directory. (tests/run.sh runs it in `make test`.)
#
# The server is always stopped (trap), every wait has a timeout; hostile connections come
# from 127.0.1.x / 127.0.2.x / 127.0.3.x (all of 127/8 is loopback). Last line:
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
server_rel="${MAILVAULTD_REL:-$PWD/build/mailvaultd}"
mv="$PWD/build/asan/mailvault"
make_tmp cli_imapd_limits
store_root 2
imapd_trap

need_binaries "$server" "$server_rel" "$mv"

init_users alice@example.org bob@example.org

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2 --connections-max=30 --lmtp-connections-max=2 \
    --login-timeout-s=3 --lmtp-transaction-timeout-s=3 --literal-total-max=200000 \
    --lmtp-data-total-max=200000 --lmtp-rejected-recipients-max=3 --user-sessions-max=4

run_client 300 "$PY" tests/imapd_limits.py functional --imap "$(port imap)" \
    --lmtp "$(port lmtp)" --user "alice@example.org:alice@example.org secret" \
    --user2 "bob@example.org:bob@example.org secret" --log "$tmp/server.log"

stop_server_checked "$tmp/server.log"
log="$tmp/server.log"
check "log: the login timeout" grep -q '(login timeout)' "$log"
check "log: the LMTP transaction timeout" grep -q 'transaction timeout (3 s)' "$log"
check "log: the oldest connection not logged in closed for a new one" \
    grep -q 'too many connections: the oldest not logged in' "$log"

server="$server_rel"
start_server_checked "$tmp/server_rel.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2 --login-timeout-s=300

run_client 300 "$PY" tests/imapd_limits.py hostile --imap "$(port imap)" --lmtp "$(port lmtp)" \
    --pid "$pid" --user "alice@example.org:alice@example.org secret"

stop_server_checked "$tmp/server_rel.log"

finish
