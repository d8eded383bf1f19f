#!/usr/bin/env bash
# cli_imapd_drain.sh -- the sealed queue drained after the login, and short commands passing
# long ones (imapd/worker.c "THE DRAIN", "LANES"): makes two users over a temporary root,
# starts the ASan server (build/asan/mailvaultd) with one worker, LMTP and /metrics on free
# loopback ports, runs tests/imapd_drain.py against it, then stops the server with SIGTERM
# and checks that it exited 0 with no sanitizer report in its log.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_drain.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#   (tests/run.sh runs it as part of `make test`.)
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap

imapd_test_setup cli_imapd_drain 2

init_users alice@example.org bob@example.org carol@example.org

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=1 --metrics-listen=127.0.0.1:0 --quota-messages=1000000

run_client 300 "$PY" tests/imapd_drain.py --imap "$(port imap)" --lmtp "$(port lmtp)" \
    --metrics "$(port metrics)" --root "$root" \
    --user "alice@example.org:alice@example.org secret" \
    --user2 "bob@example.org:bob@example.org secret" \
    --user3 "carol@example.org:carol@example.org secret"

stop_server_checked "$tmp/server.log"
finish
