#!/usr/bin/env bash
# cli_imapd_status.sh -- mailvaultd's STATUS items DELETED (RFC 9051) and DELETED-STORAGE
# (RFC 9208), in STATUS and in LIST-STATUS: makes two users of one domain over a temporary
# root, starts the ASan server (build/asan/mailvaultd) on free loopback ports, runs
# tests/imapd_status.py against it (which also runs build/asan/mailvault flags on the store
# the server has open), then stops the server with SIGTERM and checks that it exited 0 with
# no sanitizer report in its log.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_status.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#   (tests/run.sh runs it as part of `make test`.)
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap

imapd_test_setup cli_imapd_status 2

init_users alice@example.org bob@example.org

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2

run_client 180 "$PY" tests/imapd_status.py --imap "$(port imap)" --mv "$mv" \
    --user "alice@example.org:alice@example.org secret" \
    --password-file "$tmp/pw.alice@example.org" \
    --user2 "bob@example.org:bob@example.org secret"

stop_server_checked "$tmp/server.log"
finish
