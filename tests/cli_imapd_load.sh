#!/usr/bin/env bash
# cli_imapd_load.sh -- many clients on the same and on different users of mailvaultd, with
# deliveries arriving over LMTP meanwhile: every session sees a consistent mailbox, nothing is
# lost. Starts the ASan server (build/asan/mailvaultd) on free loopback ports over a temporary
# root with three users, runs tests/imapd_concurrency.py against it (26 raw IMAP sessions for
# about 18 s, half of them on one user's INBOX, two LMTP senders; the checks are listed there;
# two writer threads per worker), stops the server with SIGTERM (it must exit 0 with no sanitizer report in its log). Then a
# second server on the same root for a shorter run in which sessions also hang up abruptly
# with a command in flight (--hangups): it found a use-after-free in the event loop (a
# connection closed by a worker's completion while the same epoll batch still held its event;
# fixed in imapd/loop.c, loop_del). Last, `mailvault check` on each store.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_load.sh
#   LOAD_SECONDS=N, LOAD_HANGUP_SECONDS=N, LOAD_SESSIONS=N, LOAD_SEED=N; KEEP_TMP=1 keeps the temporary directory;
#   MAILVAULTD=path tests another build. (tests/run.sh runs it as part of `make test`.)
#
# Every wait has a timeout, the server is always stopped (trap), and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, the sanitizer check, the trap

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="$PWD/build/asan/mailvault"
make_tmp cli_imapd_load
store_root 2
imapd_trap

for f in "$server" "$mv"; do
    if [ ! -x "$f" ]; then
        fail "$f is missing (make build/asan/mailvaultd build/asan/mailvault)"
        finish
    fi
done
cp "$server" "$tmp/mailvaultd" && server="$tmp/mailvaultd" # a rebuild meanwhile cannot touch it

init_users alice@example.org bob@example.org carol@example.org

# start LOG [ARGS...]: the server on free ports (--ports-file); sets pid; 0 once the ports are
# written.
start() {
    local log=$1
    shift
    start_server "$log" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 \
        --workers=2 --connections-per-address-max=200 "$@"
}
# load OUT ARGS...: runs the client (bounded), its output to OUT; sets client_rc.
load() {
    local o=$1
    shift
    timeout -k 5 120 "$PY" tests/imapd_concurrency.py --imap "$(port imap)" \
        --lmtp "$(port lmtp)" "${user_args[@]}" "$@" >"$o" 2>&1 &
    client_pid=$!
    wait "$client_pid"
    client_rc=$?
    client_pid=""
}
# add_counts OUT: adds the client's "# N passed, N failed" (a missing summary is a failure).
add_counts() {
    add_summary "$1" || fail "the load client printed no summary (exit $client_rc)"
}
# stop_checked LOG WHAT: SIGTERM; the server must have been running and must exit 0.
stop_checked() {
    if kill -0 "$pid" 2>/dev/null; then
        pass "$2: the server is still running"
    else
        fail "$2: the server is still running"
    fi
    stop_server_rc 200
    if [ "$server_rc" -eq 0 ]; then pass "$2: the server stops cleanly on SIGTERM"; else
        fail "$2: the server stops cleanly on SIGTERM (exit $server_rc)"; fi
}
seed_args=()
[ -n "${LOAD_SEED:-}" ] && seed_args=(--seed "$LOAD_SEED")

# ---- 1. the load: sessions, LMTP, all the checks ---------------------------------------------
# Two writer threads per worker (imapd/worker.c WRITERS): three users on two workers, so jobs
# of two users run at once on one worker; the hang-up phase below has the default one.
if ! start "$tmp/server.log" --writers-per-worker=2; then
    fail "the server starts and writes its ports"
    sed 's/^/    server: /' "$tmp/server.log" | tail -n 20
    finish
fi
t0=$(date +%s)
load "$tmp/client.out" --seconds "${LOAD_SECONDS:-18}" --sessions "${LOAD_SESSIONS:-26}" \
    "${seed_args[@]}"
grep -v '^# [0-9]* passed' "$tmp/client.out"
add_counts "$tmp/client.out"
echo "# the load and its checks took $(($(date +%s) - t0)) s"
stop_checked "$tmp/server.log" "load"
if sanitizer_report "$tmp/server.log"; then
    fail "load: no sanitizer report in the server log"
    show_report "$tmp/server.log"
else
    pass "load: no sanitizer report in the server log"
fi

# ---- 2. the same with clients hanging up abruptly, commands in flight -------------------------
if start "$tmp/server2.log"; then
    t0=$(date +%s)
    load "$tmp/client2.out" --hangups --seconds "${LOAD_HANGUP_SECONDS:-8}" \
        --sessions "${LOAD_SESSIONS:-26}" "${seed_args[@]}"
    sed -e '/^# [0-9]* passed/d' -e 's/^PASS /PASS hang-ups: /' -e 's/^FAIL /FAIL hang-ups: /' \
        "$tmp/client2.out"
    add_counts "$tmp/client2.out"
    echo "# the hang-up phase took $(($(date +%s) - t0)) s"
    stop_checked "$tmp/server2.log" "hang-ups"
    if sanitizer_report "$tmp/server2.log"; then
        fail "hang-ups: no sanitizer report in the server log"
        show_report "$tmp/server2.log"
    else
        pass "hang-ups: no sanitizer report in the server log"
    fi
else
    fail "the second server starts and writes its ports"
fi

for u in "${users[@]}"; do
    run timeout 60 "$mv" check "$u" --password-file "$tmp/pw.$u"
    check "mailvault check $u after the load" ok
done
if [ "$failed" -ne 0 ]; then
    echo "    server log (tail):"
    tail -n 20 "$tmp/server.log" | sed 's/^/    /'
fi
finish
