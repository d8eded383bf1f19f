#!/usr/bin/env bash
# cli_imapd_content.sh -- mailvaultd's message content rules (issue 12): makes one user
# over a temporary root, starts the ASan server on free loopback ports, runs
# tests/imapd_content.py against it (empty header blocks and a fetch-and-deliver client,
# folded boundaries, '[' in mailbox names, SENT* dates as written, SEARCH BODY/TEXT
# substrings, a flag list with extra blanks, LMTP's Return-Path/Delivered-To), then stops
# the server with SIGTERM and checks that it exited 0 with no sanitizer report.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_content.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap

imapd_test_setup cli_imapd_content 1

init_users carol@example.org

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2

run_client 120 "$PY" tests/imapd_content.py --imap "$(port imap)" --lmtp "$(port lmtp)" \
    --user "carol@example.org:carol@example.org secret"

stop_server_checked "$tmp/server.log"
finish
