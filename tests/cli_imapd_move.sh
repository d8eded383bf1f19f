#!/usr/bin/env bash
# cli_imapd_move.sh -- a running mailvaultd and a store released from its node
# (`mailvault release`): LMTP answers 4xx and IMAP LOGIN NO [UNAVAILABLE] for that user, also
# after the server restarts (the fence is a file, not server memory), while another user is
# served as before; after `mailvault adopt` the user is served again.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_move.sh
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_test_setup cli_imapd_move 2
init_users alice@example.org bob@example.org

run "$mv" release alice@example.org --note "test move"
check release ok

for round in first restarted; do
    start_server_checked "$tmp/server.$round.log" --root="$root" --listen=127.0.0.1 \
        --imap-port=0 --lmtp-port=0 --workers=2
    run_client 120 "$PY" tests/imapd_move.py --imap "$(port imap)" --lmtp "$(port lmtp)" \
        --released "alice@example.org:alice@example.org secret" \
        --other "bob@example.org:bob@example.org secret"
    stop_server_checked "$tmp/server.$round.log"
done

run "$mv" adopt alice@example.org
check adopt ok
start_server_checked "$tmp/server.adopted.log" --root="$root" --listen=127.0.0.1 \
    --imap-port=0 --lmtp-port=0 --workers=2
run_client 120 "$PY" tests/imapd_move.py --imap "$(port imap)" --lmtp "$(port lmtp)" \
    --released "bob@example.org:bob@example.org secret" \
    --other "alice@example.org:alice@example.org secret" --expect-other-only
stop_server_checked "$tmp/server.adopted.log"
finish
