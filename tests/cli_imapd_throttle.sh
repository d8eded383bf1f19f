#!/usr/bin/env bash
# cli_imapd_throttle.sh -- mailvaultd's failed-login delays, per client address and per
# attempted user (imapd/throttle.c): makes two users over a temporary root, starts the ASan
# server (build/asan/mailvaultd) on 127.0.0.1 with --auth-fail-delay-ms=200, runs
# tests/imapd_throttle.py against it (from several loopback source addresses), stops the
# server with SIGTERM, checks that it exited 0 with no sanitizer report, and checks its log:
# one "login failed" line per failure naming the user, the client address and the counts,
# and no password.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_throttle.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#   (tests/run.sh runs it as part of `make test`.)
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap

imapd_test_setup cli_imapd_throttle 2

init_users alice@example.org bob@example.org

delay_ms=200
start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2 --auth-fail-delay-ms=$delay_ms

run_client 180 "$PY" tests/imapd_throttle.py --imap "$(port imap)" --delay-ms $delay_ms \
    --user "alice@example.org:alice@example.org secret" \
    --user2 "bob@example.org:bob@example.org secret"

stop_server_checked "$tmp/server.log"

# The log: one line per failure (the client made 12), with the user as normalised, the
# client's address and both counts; the wrong passwords nowhere.
log="$tmp/server.log"
check "log: one line per failed login (12)" [ "$(grep -c 'login failed ' "$log")" -eq 12 ]
check "log: the user's 3rd failure from 127.0.0.3, domain normalised, with its counts" \
    grep -qE 'login failed alice@example\.org from 127\.0\.0\.3:[0-9]+: wrong password \(failures in 15 min: 1 from the address, 3 for the user; answer after 800 ms\)' "$log"
check "log: a nonexistent user counted like an existing one" \
    grep -qE 'login failed nobody-[0-9]+@example\.org from 127\.0\.0\.8:[0-9]+: no such store \(failures in 15 min: 1 from the address, 3 for the user; answer after 800 ms\)' "$log"
check "log: a name that is not an address counts for the address only" \
    grep -qE 'login failed not an address from 127\.0\.0\.12:[0-9]+: not an address \(failures in 15 min: 1 from the address, 0 for the user' "$log"
check "log: no password" bash -c "! grep -qE 'wrong [0-9]|secret' '$log'"

finish
