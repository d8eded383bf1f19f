#!/usr/bin/env bash
# cli_imapd_crash.sh -- mailvaultd killed with SIGKILL during APPENDs and LMTP deliveries:
# after every restart each acknowledged message is there exactly once. Makes three users over
# a temporary root, then tests/imapd_crash.py starts the ASan server (build/asan/mailvaultd)
# on free ports, drives IMAP appenders, LMTP senders and a draining reader against it, kills
# it at random moments (about 20 rounds), restarts it on the same root, and at the end checks
# every mailbox through IMAP FETCH/SEARCH. Then `mailvault check` on each store, and no
# sanitizer report in any server log.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_crash.sh
#   CRASH_SEED=N repeats a run (the interleaving still varies); CRASH_ROUNDS=N; KEEP_TMP=1
#   keeps the temporary directory. (tests/run.sh runs it as part of `make test`.)
#
# Every wait has a timeout, the server is always killed (trap), and the last line is
# "# N passed, N failed". Takes about a minute under ASan.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # the trap, add_summary, the sanitizer options

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="$PWD/build/asan/mailvault"
make_tmp cli_imapd_crash
store_root 2
kill_server() {
    local p
    p=$(cat "$tmp/work/server.pid" 2>/dev/null) || return 0
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
    return 0
}
imapd_trap kill_server # the client starts the servers; it writes the pid to server.pid

for f in "$server" "$mv"; do
    if [ ! -x "$f" ]; then
        fail "$f is missing (make build/asan/mailvaultd build/asan/mailvault)"
        finish
    fi
done

mkdir -p "$tmp/work"
# A private copy: the rounds restart the server many times, and a rebuild of the tree in the
# meantime must not swap the binary under them.
cp "$server" "$tmp/mailvaultd" && server="$tmp/mailvaultd"
init_users alice@example.org bob@example.org carol@example.org

# The client kills and restarts the server itself; its own hard limit is its time budget
# (45 s of rounds, but at least 8 rounds: ~5 s each, twice that on a loaded machine) plus the
# final check, well under the timeout here.
start=$(date +%s)
seed_args=()
[ -n "${CRASH_SEED:-}" ] && seed_args=(--seed "$CRASH_SEED")
timeout -k 5 300 "$PY" tests/imapd_crash.py --server "$server" --root "$root" \
    --workdir "$tmp/work" --rounds "${CRASH_ROUNDS:-20}" "${seed_args[@]}" \
    "${user_args[@]}" >"$tmp/client.out" 2>&1 &
client_pid=$!
wait "$client_pid"
client_rc=$?
client_pid=""
kill_server
grep -v '^# [0-9]* passed' "$tmp/client.out"
add_summary "$tmp/client.out" || fail "the crash client printed no summary (exit $client_rc)"
echo "# the kill rounds and the check took $(($(date +%s) - start)) s"

for u in "${users[@]}"; do
    run timeout 60 "$mv" check "$u" --password-file "$tmp/pw.$u"
    check "mailvault check $u after the kills" ok
done

reports=""
for f in "$tmp"/work/server.*.log; do
    [ -f "$f" ] && sanitizer_report "$f" && reports="$reports $f"
done
reports=${reports# }
if [ -z "$reports" ]; then
    pass "no sanitizer report in the $(find "$tmp/work" -name 'server.*.log' | wc -l) server logs"
else
    fail "sanitizer report in $reports"
    for f in $reports; do
        show_report "$f"
    done
fi
if [ "$failed" -ne 0 ]; then
    echo "    last server log:"
    find "$tmp/work" -name 'server.*.log' | sort | tail -n 1 | xargs -r tail -n 20 | sed 's/^/    /'
fi
finish
