#!/usr/bin/env bash
# Runs every test binary, every shell test and every fuzz corpus replay; the last line of the
# output is the suite's "N passed, N failed". Exits non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export MV_TEST_ROOT="$PWD"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mvsuite.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"

passed=0
failed=0
failures=()

# run_counted NAME CMD...: the command prints "# N passed, N failed" as its summary.
run_counted() {
    local name=$1; shift
    local out="$tmp/out.$RANDOM"
    "$@" >"$out" 2>&1
    local rc=$?
    cat "$out"
    local line
    line=$(grep -E '^# [0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $name (exit $rc, no summary: crashed?)"
        failed=$((failed + 1)); failures+=("$name")
        return
    fi
    local p f
    p=$(echo "$line" | sed -E 's/^# ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name (exit $rc after its summary)"
        failed=$((failed + 1)); failures+=("$name")
    elif [ "$f" -ne 0 ]; then
        failures+=("$name")
    fi
}

for t in build/asan/tests/test_*; do
    [ -x "$t" ] || continue
    echo "== $(basename "$t")"
    run_counted "$(basename "$t")" "$t"
done

for t in tests/cli_*.sh; do
    [ -f "$t" ] || continue
    echo "== $(basename "$t")"
    run_counted "$(basename "$t")" bash "$t"
done

for f in build/asan/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    echo "== $name (corpus replay)"
    run_counted "$name" "$f" "fuzz/corpus/${name#fuzz_}"
done

if [ ${#failures[@]} -gt 0 ]; then
    echo "failed: ${failures[*]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
