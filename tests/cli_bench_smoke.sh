#!/usr/bin/env bash
# cli_bench_smoke.sh -- smoke test of the reference suite's programs (the benchmark itself
# never runs in CI): build/rel/bench/bench_reference at scale 1 for every configuration and
# cipher (and plain SQLite), plus one run of bench/reference_runner.js when the reference is
# installed (tools/reference/node_modules). Checks that every run produced numbers, that the
# DELETE deleted rows, that auto_vacuum was in effect as configured (FULL in production,
# NONE in no_auto_vacuum, INCREMENTAL in incremental_vacuum), and that every record matches
# bench/results/SCHEMA.md (bench/suite/validate.py).
#
# USAGE
#   make build/rel/bench/bench_reference && bash tests/cli_bench_smoke.sh
#   (tests/run.sh runs it as part of `make test`; about 20 s.)
#
# Each check prints "PASS name" or "FAIL name"; the last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh # pass, fail, PY, finish

bin="$PWD/build/rel/bench/bench_reference"
make_tmp cli_bench

# field FILE EXPR: a Python expression over the record r (the file's one JSON line).
field() {
    "$PY" -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(eval(sys.argv[2]))' \
        "$1" "$2" 2>/dev/null
}

if [ ! -x "$bin" ] || ! "$bin" --describe >"$tmp/describe.json" 2>"$tmp/err"; then
    fail "bench_reference --describe (build it: make build/rel/bench/bench_reference)"
    finish
fi
pass "bench_reference --describe"
configs=$("$bin" --list | sed -n 's/^configs: //p')
[ "$(echo "$configs" | wc -w)" -eq 9 ] && pass "nine configurations" || fail "nine configurations"

# One run per configuration x cipher (+ plain SQLite); the first with its warm-up run, the
# others --no-warmup, for speed.
warm=()
for config in $configs; do
    for cipher in chacha20 aes256cbc sqlcipher none sqlite; do
        impl=mailvault c=$cipher
        [ "$cipher" != sqlite ] || impl=sqlite c=none
        rec="$tmp/run.$config.$cipher.json"
        if "$bin" --config "$config" --cipher "$c" --impl "$impl" --scale 1 \
            "${warm[@]}" --dir "$tmp" >"$rec" 2>"$tmp/err" &&
            [ "$(wc -l <"$rec")" -eq 1 ] &&
            [ "$(field "$rec" 'min(p["rate_per_s"] for p in r["phases"].values()) > 0')" = True ] &&
            [ "$(field "$rec" 'r["phases"]["delete"]["count"]')" -gt 0 ]; then
            pass "$config $cipher: numbers, $(field "$rec" 'r["phases"]["delete"]["count"]') rows deleted"
        else
            fail "$config $cipher: $(tail -n 1 "$tmp/err")"
        fi
        warm=(--no-warmup)
    done
done

# auto_vacuum as each configuration asks, read back from the file (every cipher).
check_av() {
    local config=$1 want=$2 got
    got=$(cat "$tmp"/run."$config".*.json | "$PY" -c \
        'import json,sys; print(sorted({json.loads(l)["settings"]["auto_vacuum"] for l in sys.stdin}))')
    [ "$got" = "[$want]" ] && pass "$config: auto_vacuum $want read back" ||
        fail "$config: auto_vacuum $got, want [$want]"
}
check_av production 1
check_av no_auto_vacuum 0
check_av incremental_vacuum 2

# One tiny reference run, when the reference is installed (CI installs it).
if [ -d tools/reference/node_modules/better-sqlite3-multiple-ciphers ] &&
    command -v node >/dev/null 2>&1; then
    rec="$tmp/run.production.reference.json"
    if node bench/reference_runner.js --impl-dir tools/reference --describe "$tmp/describe.json" \
        --config production --cipher chacha20 --scale 1 --no-warmup --dir "$tmp" \
        >"$rec" 2>"$tmp/err" && [ "$(field "$rec" 'r["settings"]["auto_vacuum"]')" = 1 ]; then
        pass "reference_runner.js production chacha20 (auto_vacuum FULL)"
    else
        fail "reference_runner.js: $(tail -n 1 "$tmp/err")"
    fi
else
    echo "# skipped: reference_runner.js (tools/reference not installed)"
fi

if "$PY" bench/suite/validate.py --describe "$tmp/describe.json" "$tmp"/run.*.json \
    >"$tmp/validate" 2>&1; then
    pass "schema: $(tail -n 1 "$tmp/validate")"
else
    sed 's/^/    /' "$tmp/validate" | head -n 10
    fail "schema (bench/suite/validate.py)"
fi

finish
