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

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
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
trap 'kill_server; [ -n "${client_pid:-}" ] && kill -KILL "$client_pid" 2>/dev/null;
      if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else
      chmod -R u+rwX "$tmp" 2>/dev/null; rm -rf "$tmp"; fi' EXIT

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
users=(alice@example.org bob@example.org carol@example.org)
user_args=()
for u in "${users[@]}"; do
    printf '%s' "$u secret" >"$tmp/pw.$u"
    run "$mv" init "$u" --password-file "$tmp/pw.$u"
    check "init $u" ok
    user_args+=(--user "$u:$u secret")
done

# The client kills and restarts the server itself; its own hard limit is its time budget
# (45 s of rounds) plus the final check, well under the timeout here.
start=$(date +%s)
seed_args=()
[ -n "${CRASH_SEED:-}" ] && seed_args=(--seed "$CRASH_SEED")
timeout -k 5 150 "$PY" tests/imapd_crash.py --server "$server" --root "$root" \
    --workdir "$tmp/work" --rounds "${CRASH_ROUNDS:-20}" "${seed_args[@]}" \
    "${user_args[@]}" >"$tmp/client.out" 2>&1 &
client_pid=$!
wait "$client_pid"
client_rc=$?
client_pid=""
kill_server
grep -v '^# [0-9]* passed' "$tmp/client.out"
summary=$(grep -E '^# [0-9]+ passed, [0-9]+ failed$' "$tmp/client.out" | tail -n 1)
if [ -n "$summary" ]; then
    passed=$((passed + $(echo "$summary" | sed -E 's/^# ([0-9]+) passed.*/\1/')))
    failed=$((failed + $(echo "$summary" | sed -E 's/.* ([0-9]+) failed$/\1/')))
else
    fail "the crash client printed no summary (exit $client_rc)"
fi
echo "# the kill rounds and the check took $(($(date +%s) - start)) s"

for u in "${users[@]}"; do
    run timeout 60 "$mv" check "$u" --password-file "$tmp/pw.$u"
    check "mailvault check $u after the kills" ok
done

reports=$(grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|WARNING: ThreadSanitizer|runtime error' \
    "$tmp"/work/server.*.log 2>/dev/null)
if [ -z "$reports" ]; then
    pass "no sanitizer report in the $(find "$tmp/work" -name 'server.*.log' | wc -l) server logs"
else
    fail "sanitizer report in $reports"
    for f in $reports; do
        grep -A30 -E 'ERROR: |runtime error' "$f" | head -n 40 | sed 's/^/    /'
    done
fi
if [ "$failed" -ne 0 ]; then
    echo "    last server log:"
    find "$tmp/work" -name 'server.*.log' | sort | tail -n 1 | xargs -r tail -n 20 | sed 's/^/    /'
fi
finish
