#!/usr/bin/env bash
# cli_imapd_utf8.sh -- mailvaultd's UTF8=ACCEPT (RFC 6855): makes one user over a temporary
# root, starts the ASan server (build/asan/mailvaultd) on a free loopback port, runs
# tests/imapd_utf8.py against it (ENABLE, mailbox names in UTF-8 and modified UTF-7 for the
# same stored names, APPEND UTF8 (~{n}), ENVELOPE strings, SEARCH CHARSET, the BAD cases),
# then stops the server with SIGTERM and checks that it exited 0 with no sanitizer report.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_utf8.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap

imapd_test_setup cli_imapd_utf8 1

init_users carol@example.org

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2

run_client 120 "$PY" tests/imapd_utf8.py --imap "$(port imap)" \
    --user "carol@example.org:carol@example.org secret"

stop_server_checked "$tmp/server.log"
finish
