#!/usr/bin/env bash
# cli_imapd_state.sh -- the session state mailvaultd shows its clients (issue 12): keywords
# announced in FLAGS / PERMANENTFLAGS, CONDSTORE's MODSEQ on .SILENT stores and HIGHESTMODSEQ
# after APPEND and EXPUNGE, a two-way CONDSTORE/QRESYNC sync with flag removal on both sides,
# keyword limits without silent truncation, MOVE's COPYUID text, NUL bytes in literals,
# ENVELOPE source routes, the derived CAPABILITY, subscriptions and \Recent. Starts the ASan
# server (build/asan/mailvaultd) on free loopback ports over a temporary root with one user,
# runs tests/imapd_state.py against it (the checks are listed there), stops the server with
# SIGTERM (it must exit 0 with no sanitizer report in its log), then runs `mailvault check`.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_state.sh
#   KEEP_TMP=1 keeps the temporary directory; MAILVAULTD=path tests another server build,
#   MAILVAULT_CLI=path another CLI.
#
# Every wait has a timeout, the server is always stopped (trap), and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, the sanitizer check, the trap

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="${MAILVAULT_CLI:-$PWD/build/asan/mailvault}" # MAILVAULT_CLI=...: another build
make_tmp cli_imapd_state
store_root 2
imapd_trap

need_binaries "$server" "$mv"
cp "$server" "$tmp/mailvaultd" && server="$tmp/mailvaultd" # a rebuild meanwhile cannot touch it

user=alice@example.org
init_users "$user"

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2

run_client 300 "$PY" tests/imapd_state.py --imap "$(port imap)" --user "$user" \
    --password "$user secret" --mv "$mv" --root "$root" --password-file "$tmp/pw.$user"

if kill -0 "$pid" 2>/dev/null; then
    pass "the server is still running after the client"
else
    fail "the server is still running after the client"
fi
stop_server_checked "$tmp/server.log" 200

run timeout 60 "$mv" check "$user" --password-file "$tmp/pw.$user"
check "mailvault check after the run" ok
if [ "$failed" -ne 0 ]; then
    echo "    server log (tail):"
    tail -n 20 "$tmp/server.log" | sed 's/^/    /'
fi
finish
