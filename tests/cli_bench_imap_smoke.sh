#!/usr/bin/env bash
# cli_bench_imap_smoke.sh -- smoke test of build/rel/bench/bench_imap, the IMAP load
# generator (the Dovecot comparison, bench/imap_compare.sh, never runs in CI and this test
# does not need Dovecot): mailvaultd (build/asan/mailvaultd, else the release build) on a
# free loopback port over a temporary root with two users (MAILVAULT_KDF_ITER=2), then
# bench_imap with 2 clients for 3 s over 30 messages each. Checks that every operation of
# the mix ran with zero errors, that LOGIN and SELECT were timed, that the JSON parses and
# holds the figures, that a run on populated mailboxes appends nothing, and that the server
# stops cleanly with no sanitizer report.
#
# USAGE
#   make build/rel/bench/bench_imap build/asan/mailvaultd build/asan/mailvault &&
#       bash tests/cli_bench_imap_smoke.sh      (tests/run.sh runs it in `make test`; ~6 s)
#
# Each check prints "PASS name" or "FAIL name"; the last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh       # pass, fail, PY, finish, make_tmp, store_root
. tests/imapd_lib.sh # start_server, port, stop_server_rc, sanitizer_report, the trap

bin="$PWD/build/rel/bench/bench_imap"
server="$PWD/build/asan/mailvaultd"
mv="$PWD/build/asan/mailvault"
[ -x "$server" ] || server="$PWD/build/mailvaultd"
[ -x "$mv" ] || mv="$PWD/build/mailvault"
make_tmp cli_bench_imap
store_root 2
imapd_trap

for f in "$bin" "$server" "$mv"; do
    if [ ! -x "$f" ]; then
        fail "$f is built (make build/rel/bench/bench_imap build/asan/mailvaultd)"
        finish
    fi
done

printf 'smoke bench password\n' >"$tmp/password"
for u in 1 2; do
    if "$mv" init "u$u@bench.example" --password-file "$tmp/password" >/dev/null 2>"$err"; then
        pass "init u$u"
    else
        fail "init u$u: $(tail -n 1 "$err")"
        finish
    fi
done
start_server "$tmp/server.log" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1 --root="$root"
port=$(port imap)
if [ -z "$port" ]; then
    fail "mailvaultd starts: $(tail -n 3 "$tmp/server.log")"
    finish
fi
pass "mailvaultd starts (port $port)"

json="$tmp/imap.json"
if timeout 60 "$bin" --port "$port" --clients 2 --users 2 --seconds 3 --messages 30 \
    --password-file "$tmp/password" --label mailvaultd --json "$json" >"$out" 2>"$err"; then
    pass "bench_imap runs ($(grep '^total:' "$out" | cut -c1-70))"
else
    fail "bench_imap runs (exit $?): $(tail -n 2 "$err")"
fi
grep -q '^populate: 2 users, 30 messages each, 60 appended' "$out" &&
    pass "populates both mailboxes" || fail "populates both mailboxes: $(head -n 1 "$out")"

check_doc() { # check_doc NAME PYTHON-EXPRESSION over the document d
    if [ "$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(bool(eval(sys.argv[2])))' \
        "$json" "$2" 2>"$tmp/py.err")" = True ]; then
        pass "$1"
    else
        fail "$1 ($2) $(tail -n 1 "$tmp/py.err")"
    fi
}
check_doc "the JSON parses, schema mailvault-bench-imap/1" \
    'd["schema"] == "mailvault-bench-imap/1" and d["clients"] == 2'
for kind in fetch_headers fetch_body search store append expunge noop; do
    check_doc "$kind ran, no errors" \
        "d['ops']['$kind']['ops'] > 0 and d['ops']['$kind']['errors'] == 0 and d['ops']['$kind']['p50_ms'] > 0"
done
check_doc "expunge is two commands a time" \
    'd["ops"]["expunge"]["commands"] == 2 * d["ops"]["expunge"]["ops"]'
check_doc "login and select timed once per client" \
    'd["ops"]["login"]["ops"] == 2 and d["ops"]["select"]["ops"] == 2'
check_doc "zero errors, no failed client, commands/s counted" \
    'd["errors"] == 0 and d["failed_clients"] == 0 and d["commands_per_s"] > 0'

# A second run (populate-only) finds the mailboxes full: nothing more is appended.
if "$bin" --port "$port" --users 2 --messages 30 --password-file "$tmp/password" \
    --populate-only >"$out" 2>"$err" && grep -q ' 0 appended' "$out"; then
    pass "populate is idempotent"
else
    fail "populate is idempotent: $(cat "$out" "$err" | tail -n 2)"
fi
# No password on the command line: without a file or $BENCH_IMAP_PASSWORD it refuses.
if ! env -u BENCH_IMAP_PASSWORD "$bin" --port "$port" >"$out" 2>"$err" &&
    grep -q 'no password' "$err"; then
    pass "refuses to run without a password file or variable"
else
    fail "refuses to run without a password file or variable"
fi

stop_server_rc 300
[ "$server_rc" -eq 0 ] && pass "mailvaultd stops cleanly" || fail "mailvaultd exit $server_rc"
if ! sanitizer_report "$tmp/server.log"; then
    pass "no sanitizer report in the server log"
else
    fail "sanitizer report: $(grep -m1 -E 'ERROR|runtime error' "$tmp/server.log")"
fi
finish
