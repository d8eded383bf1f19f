#!/usr/bin/env bash
# cli_imapd_control.sh -- controlling a running mailvaultd through its control socket
# (docs/CONTROL.md): the socket (ROOT/.mailvaultd.sock, mode 0600, a stale one replaced, a
# file or a live server's socket refused), `mailvault who` / `kick` / `release` / `adopt`
# against the server (tests/imapd_control.py: a session listed and kicked with BYE
# [UNAVAILABLE], a release under APPEND + LMTP load that loses no acknowledged message and
# acknowledges nothing after it returns), the fence across a restart (tests/imapd_move.py),
# adopt through the server, and the CLI's errors when no server runs.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_control.sh
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_test_setup cli_imapd_control 2
init_users alice@example.org bob@example.org
sock="$root/.mailvaultd.sock"
unset MAILVAULT_CONTROL_SOCKET

# ---- no server ------------------------------------------------------------------------------
run "$mv" who
check "who without a server: exit 69 (EX_UNAVAILABLE), naming the socket" \
    fails_with 69 "no mailvaultd listens on $sock"
run "$mv" kick alice@example.org
check "kick without a server: exit 69" fails_with 69 "no mailvaultd listens on"
run "$mv" release alice@example.org --control-socket "$tmp/nothing.sock"
check "release with a named socket nobody listens on: exit 69, naming it" \
    fails_with 69 "no mailvaultd listens on $tmp/nothing.sock"
MAILVAULT_CONTROL_SOCKET="$tmp/nothing.sock" run "$mv" adopt alice@example.org
check "adopt with \$MAILVAULT_CONTROL_SOCKET nobody listens on: exit 69" \
    fails_with 69 "$tmp/nothing.sock"
check "... and nothing was released" [ ! -e "$root/example.org/alice.released" ]

# Without a server release and adopt work on the files; --json says so.
run "$mv" release bob@example.org --json
check "release --json without a server: exit 0, JSON" json_ok
check "... released on the files, not by a server, not before" \
    json_true 'd["format_version"] == 2 and d["user"] == "bob@example.org" and
        d["released"] is True and d["by_server"] is False and d["control_socket"] is None and
        d["already_released"] is False and isinstance(d["duration_ms"], int) and
        d["sessions_ended"] is None and d["store_handles_closed"] is None'
run "$mv" release bob@example.org --json
check "release --json again: already_released is true" \
    json_true 'd["released"] is True and d["already_released"] is True'
run "$mv" adopt bob@example.org --json
check "adopt --json without a server: adopted on the files" \
    json_true 'd["format_version"] == 2 and d["user"] == "bob@example.org" and
        d["adopted"] is True and d["by_server"] is False and d["control_socket"] is None'
check "... and the marker is gone" [ ! -e "$root/example.org/bob.released" ]

# ---- the socket -----------------------------------------------------------------------------
start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2
check "the control socket is a socket in the root" [ -S "$sock" ]
check "the control socket's mode is 0600" [ "$(stat -c %a "$sock")" = 600 ]
check "the control socket belongs to the server's account" [ "$(stat -c %u "$sock")" = "$(id -u)" ]
run timeout -k 5 30 "$server" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 \
    --ports-file="$tmp/ports2"
check "a second server on the same root is refused" \
    fails_with 1 "another mailvaultd listens there"
run "$mv" who
check "who with no session: exit 0" ok
check "who with no session says so" grep -q "no user has an open store or a session" "$out"

# Another program holds bob's store (its lock file shared, as every open does): the release
# times out, says so plainly, and releases nothing.
rm -f "$tmp/held"
"$PY" -c "import fcntl, os, sys, time
f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_SH); open(sys.argv[2], 'w').close()
while os.path.exists(sys.argv[2]): time.sleep(0.05)" "$root/example.org/bob.lock" "$tmp/held" &
holder=$!
for _ in $(seq 1 200); do [ -e "$tmp/held" ] && break; sleep 0.05; done
run "$mv" release bob@example.org --wait-seconds 1
rm -f "$tmp/held"
wait "$holder"
check "release while another program holds the store: exit 75, NOT released" \
    fails_with 75 "NOT released"
check "... naming the other program as the reason, without the tool's own advice" \
    bash -c "grep -q 'the store still open in another program (a mailvault command, or another server on this root)' '$err' &&
        ! grep -q 'let the server release it' '$err'"
check "... and no marker" [ ! -e "$root/example.org/bob.released" ]

run_client 240 "$PY" tests/imapd_control.py --imap "$(port imap)" --lmtp "$(port lmtp)" \
    --mv "$mv" --root "$root" --root2 "$tmp/root2" --user "alice@example.org:alice@example.org secret"
check "the release left its marker" [ -e "$root/example.org/alice.released" ]
run "$mv" release alice@example.org
check "release again through the server: exit 0 (idempotent)" ok
check "... saying it already was" grep -q "it already was" "$out"
run "$mv" release alice@example.org --json
check "release --json again through the server: already_released, by the server" \
    json_true 'd["released"] is True and d["already_released"] is True and
        d["by_server"] is True and d["control_socket"] == "'"$sock"'" and
        d["sessions_ended"] == 0'
run "$mv" kick bob@example.org --json
check "kick --json of a user with no session: exit 0, sessions_ended 0" \
    json_true 'd["format_version"] == 2 and d["user"] == "bob@example.org" and
        d["sessions_ended"] == 0 and d["control_socket"] == "'"$sock"'"'
run "$mv" who --json
check "who --json is JSON" json_ok
check "who --json: no session of alice after the release" \
    json_true 'not any(u["user"] == "alice@example.org" for u in d["users"])'
stop_server_checked "$tmp/server.log"
check "the control socket is removed at exit" [ ! -e "$sock" ]

# ---- the fence survives a restart; adopt through the server ---------------------------------
start_server_checked "$tmp/server.restarted.log" --root="$root" --listen=127.0.0.1 \
    --imap-port=0 --lmtp-port=0 --workers=2
run_client 120 "$PY" tests/imapd_move.py --imap "$(port imap)" --lmtp "$(port lmtp)" \
    --released "alice@example.org:alice@example.org secret" \
    --other "bob@example.org:bob@example.org secret"
run "$mv" adopt alice@example.org --json
check "adopt --json through the server: exit 0" ok
check "... done by the server" \
    json_true 'd["format_version"] == 2 and d["user"] == "alice@example.org" and
        d["adopted"] is True and d["by_server"] is True and d["control_socket"] == "'"$sock"'"'
run "$mv" release bob@example.org --wait-seconds 0
run "$mv" adopt bob@example.org
check "adopt through the server (text): exit 0" ok
check "... done by the server" grep -q "adopted bob@example.org: served on this node (by the server at" "$out"
run_client 120 "$PY" tests/imapd_move.py --imap "$(port imap)" --lmtp "$(port lmtp)" \
    --released "bob@example.org:bob@example.org secret" \
    --other "alice@example.org:alice@example.org secret" --expect-other-only
run "$mv" release nobody@example.org
check "release of a user with no store: exit 67 (EX_NOUSER)" fails_with 67 "no store"

# A server killed without its cleanup leaves the socket: the next start replaces it.
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=""
check "a killed server leaves its socket behind" [ -S "$sock" ]
run "$mv" who
check "who on a stale socket: exit 69" fails_with 69 "no mailvaultd listens on"
start_server_checked "$tmp/server.stale.log" --root="$root" --listen=127.0.0.1 \
    --imap-port=0 --lmtp-port=0 --workers=2
check "the stale socket was replaced (logged)" grep -q "removed a stale socket" "$tmp/server.stale.log"
run "$mv" who
check "who after the restart: exit 0" ok
stop_server_checked "$tmp/server.stale.log"

# "none", as the help words it ("off or none"), is no socket, not one named "none" in the
# working directory (it was, until 2026-12-05).
cd "$tmp" || exit 1
start_server_checked "$tmp/server.none.log" --root="$root" --listen=127.0.0.1 \
    --imap-port=0 --lmtp-port=0 --workers=2 --control-socket=none
cd - >/dev/null || exit 1
check "control_socket = none: no socket in the working directory" [ ! -e "$tmp/none" ]
check "... and the log says it is off" grep -q "control socket off (control_socket = none)" \
    "$tmp/server.none.log"
stop_server_checked "$tmp/server.none.log"

# Anything else at the path: the server does not start, and says why.
printf 'not a socket\n' >"$tmp/plain"
run timeout -k 5 30 "$server" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 \
    --ports-file="$tmp/ports3" --control-socket="$tmp/plain"
check "a file at control_socket: the server refuses to start" \
    fails_with 1 "exists and is not a socket"
check "... and leaves the file alone" grep -q "not a socket" "$tmp/plain"
finish
