#!/usr/bin/env bash
# cli_imapd_fetch_direct.sh -- a FETCH job writes its response to the socket itself
# (imapd/imap_fetch.c "Direct sending", issue 13): makes one user over a temporary root,
# starts the ASan server with metrics on free loopback ports, runs
# tests/imapd_fetch_direct.py against it (whole messages and partial ranges byte for byte,
# written by the job, by the loop, or both when the client's socket fills; a pipelined
# command; a client gone mid-FETCH), then stops the server with SIGTERM and checks that it
# exited 0 with no sanitizer report.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_fetch_direct.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap

imapd_test_setup cli_imapd_fetch_direct 1

init_users direct@example.org

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2 --metrics-listen=127.0.0.1:0

run_client 300 "$PY" tests/imapd_fetch_direct.py --imap "$(port imap)" \
    --metrics "$(port metrics)" --user "direct@example.org:direct@example.org secret"

stop_server_checked "$tmp/server.log"
finish
