# tests/lib.sh -- the harness the shell tests (tests/cli_*.sh) share: pass/fail counters, a
# temporary directory removed on exit, running a command with its output captured, checks
# on the exit code and the messages, and the summary line tests/run.sh adds up.
#
# USAGE
#   set -u
#   cd "$(dirname "$0")/.."          # the scripts run from the top of the tree
#   . tests/lib.sh
#   make_tmp cli_example             # $tmp, $out, $err; $tmp goes away on exit
#   store_root 2                     # optional: $root and the mailvault environment
#   run "$mv" list "$user"           # sets $rc; stdout in $out, stderr in $err
#   check list_ok ok                 # "PASS list_ok", or "FAIL list_ok (exit N)" + output
#   check no_store fails_with 1 'no store for'
#   finish                           # "# N passed, N failed"; exits 1 if any failed
#
# WHAT IT OFFERS
#   passed, failed   the counters (0 when sourced); rc is 0 too.
#   PY               the python3 for scripts that need the distribution's modules
#                    (/usr/bin/python3 when there is one, else python3 from PATH).
#   make_tmp NAME    a fresh ${TMPDIR:-/tmp}/NAME.XXXXXX as $tmp, removed on exit (made
#                    writable first, so tests may chmod inside it); $out and $err name the
#                    files run writes.
#   store_root ITER  $root=$tmp/root (not created) as MAILVAULT_ROOT, MAILVAULT_KDF_ITER=ITER,
#                    and no password or test override from the caller's environment.
#   server_binaries  $server and $mv: the ASan mailvaultd and mailvault CLI (build/asan), else
#                    the release builds; fails and finishes the test if either is missing,
#                    else sets ASAN_OPTIONS and UBSAN_OPTIONS unless the caller did (the
#                    benchmark smoke tests, which run the benchmarks' scripts on them).
#   pass TEXT / fail TEXT
#                    count one check and print "PASS TEXT" / "FAIL TEXT"; for checks that
#                    make their own message (the benchmark smoke tests).
#   run CMD... / run_in FILE CMD...
#                    run CMD with stdin from /dev/null (or FILE), stdout to $out, stderr to
#                    $err, exit status in $rc.
#   check NAME CMD...
#                    CMD is the condition (usually [ ... ], grep or one of the predicates
#                    below); on failure prints the last run's exit code, stdout and stderr.
#   ok, fails_with CODE TEXT, json_ok, json_eval EXPR, json_true EXPR
#                    predicates on the last run: exit 0; exit CODE with TEXT in stderr;
#                    stdout is JSON; a Python expression over the parsed stdout (as d),
#                    printed; the same expression, true.
#   flip_bit FILE OFFSET [BIT]
#                    damages FILE by inverting one bit (default bit 0) of the byte at OFFSET,
#                    in place. Tests damage ciphertext this way, never by writing a constant
#                    byte: the constant is already there one time in 256, and then the test
#                    passes or fails by chance.
#   finish           prints "# N passed, N failed" and exits, non-zero if any check failed.
#
# LIMITATIONS
#   One run's output at a time: $out and $err are overwritten by the next run. The names
#   are short and unprefixed because every test line uses them; a script must not define
#   its own function of the same name.

passed=0
failed=0
rc=0
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

make_tmp() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 1
    trap 'chmod -R u+rwX "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
    out="$tmp/stdout"
    err="$tmp/stderr"
}

store_root() {
    unset MAILVAULT_PASSWORD MAILVAULT_NEW_PASSWORD MAILVAULT_TEST_FREE_BYTES
    export MAILVAULT_KDF_ITER="$1"
    root="$tmp/root"
    export MAILVAULT_ROOT="$root"
}

server_binaries() {
    local f
    server="$PWD/build/asan/mailvaultd"
    mv="$PWD/build/asan/mailvault"
    [ -x "$server" ] || server="$PWD/build/mailvaultd"
    [ -x "$mv" ] || mv="$PWD/build/mailvault"
    for f in "$server" "$mv"; do
        if [ ! -x "$f" ]; then
            fail "$f is built (make build/asan/mailvaultd build/asan/mailvault)"
            finish
        fi
    done
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
}

pass() {
    echo "PASS $1"
    passed=$((passed + 1))
}

fail() {
    echo "FAIL $1"
    failed=$((failed + 1))
}

run() {
    "$@" </dev/null >"$out" 2>"$err"
    rc=$?
}

run_in() {
    local input=$1
    shift
    "$@" <"$input" >"$out" 2>"$err"
    rc=$?
}

check() {
    local name=$1
    shift
    if "$@"; then
        pass "$name"
    else
        fail "$name (exit $rc)"
        sed 's/^/    stdout: /' "$out" 2>/dev/null | head -n 8
        sed 's/^/    stderr: /' "$err" 2>/dev/null | head -n 5
    fi
}

ok() { [ "$rc" -eq 0 ]; }
fails_with() { [ "$rc" -eq "$1" ] && grep -q -- "$2" "$err"; }
json_ok() { python3 -m json.tool "$out" >/dev/null 2>&1; }
json_eval() { python3 -c "import json,sys; d=json.load(open('$out')); print($1)" 2>/dev/null; }
# json_true EXPR: succeeds only if the Python expression over the parsed stdout (as d) is
# true (json_eval prints a value and succeeds either way: compare its output instead).
json_true() { python3 -c "import json,sys; d=json.load(open('$out')); sys.exit(0 if ($1) else 1)" 2>/dev/null; }

flip_bit() {
    "$PY" - "$1" "$2" "${3:-0}" <<'PYEOF'
import sys
path, offset, bit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "r+b") as f:
    f.seek(offset)
    b = f.read(1)
    if len(b) != 1:
        sys.exit("flip_bit: %s has no byte at offset %d" % (path, offset))
    f.seek(offset)
    f.write(bytes([b[0] ^ (1 << bit)]))
PYEOF
}

finish() {
    echo "# $passed passed, $failed failed"
    if [ "$failed" -ne 0 ]; then
        exit 1
    fi
    exit 0
}
