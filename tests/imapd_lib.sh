# shellcheck shell=bash disable=SC2034,SC2154 # sourced: the callers set tmp, server, mv and read server_rc
# tests/imapd_lib.sh -- what the mailvaultd test scripts share (tests/cli_imapd.sh,
# tests/cli_imapd_crash.sh, tests/cli_imapd_load.sh, tests/cli_bench_imap_smoke.sh): the
# sanitizer options, starting the server on free ports (port 0, read back from --ports-file),
# stopping it with SIGTERM and a bounded wait, the sanitizer-report check on its log, adding a
# client's "# N passed, N failed" to the counts, and the trap that stops everything on exit.
#
# USAGE
#   set -u
#   cd "$(dirname "$0")/.."
#   . tests/lib.sh                     # or the script's own passed, failed, finish
#   . tests/imapd_lib.sh
#   make_tmp NAME                      # $tmp must be set before the functions below run
#   server=... ; imapd_trap            # stop the server and the client on exit, remove $tmp
#   start_server LOG --root="$root" --listen=127.0.0.1 --imap-port=0 ... || ...
#   port imap                          # a port the server wrote
#   stop_server_rc 100                 # SIGTERM; $server_rc is its exit status
#   sanitizer_report LOG && show_report LOG
#
# WHAT IT OFFERS
#   imapd_sanitizer_env  ASAN_OPTIONS and UBSAN_OPTIONS (leaks detected, abort on the first
#                  report) unless the caller's environment sets them.
#   start_server LOG ARGS...
#                  starts $server --ports-file=$tmp/ports ARGS... in the background, its
#                  output to LOG; sets $pid; waits up to 10 s for the ports file; 0 once the
#                  server wrote it, 1 if it did not (or died first).
#   port NAME      the port NAME= in $tmp/ports (imap, imaps, lmtp).
#   stop_server    SIGTERM to $pid if it runs, up to 10 s for it to go, then SIGKILL. Never
#                  fails; for traps and for servers whose exit status is not checked.
#   stop_server_rc TRIES
#                  SIGTERM, then up to TRIES x 0.1 s for the server to exit; $server_rc is
#                  its exit status (1 if it never exited: it is then killed); clears $pid.
#   sanitizer_report LOG / no_sanitizer_report LOG
#                  whether LOG holds an ASan, LSan, TSan or UBSan report.
#   show_report LOG
#                  the first 40 lines of the reports in LOG, indented.
#   add_summary OUT
#                  adds the last "# N passed, N failed" in OUT to $passed and $failed;
#                  returns 1 when OUT has none (the caller counts that as a failure).
#   init_users ADDR...
#                  with tests/lib.sh: `$mv init` for each user, password "ADDR secret" in
#                  $tmp/pw.ADDR, one check "init ADDR" each; sets users=(ADDR...) and
#                  user_args=(--user ADDR:PASSWORD ...) for the python clients.
#   need_binaries FILE...
#                  with tests/lib.sh: for a FILE that is not executable, a failed check
#                  naming it and the end of the script (finish).
#   start_server_checked LOG ARGS...
#                  start_server, counted as the check "the server starts and writes its
#                  ports"; if it does not, the tail of LOG is shown and the script ends.
#   run_client SECONDS CMD...
#                  runs a client (python) under timeout as $client_pid (the trap kills it),
#                  output in $tmp/client.out, shown without its summary line, whose counts
#                  are added; no summary is a failed check.
#   stop_server_checked LOG [TRIES]
#                  stop_server_rc TRIES (default 100), then two checks: the server exited 0,
#                  and LOG holds no sanitizer report (shown if it does).
#   imapd_trap [FUNCTION]
#                  on exit: FUNCTION (if given), stop_server, SIGKILL to $client_pid if set, and remove $tmp
#                  (made writable first) unless KEEP_TMP is set ("# kept DIR").
#   imapd_test_setup NAME KDF_ITER
#                  with tests/lib.sh: the usual start of a test that runs the ASan server:
#                  imapd_sanitizer_env; server=$MAILVAULTD or build/asan/mailvaultd;
#                  mv=build/asan/mailvault; make_tmp NAME; store_root KDF_ITER; imapd_trap;
#                  need_binaries "$server" "$mv" (the script ends if one is missing).
#
# LIMITATIONS
#   One server at a time ($pid); the ports file is $tmp/ports.

pid=""
client_pid=""
server_rc=0
# The tests run as root on the build machine; mailvaultd refuses root without user = ...
# unless allowed (the servers the python clients start inherit this too).
export MAILVAULTD_ALLOW_ROOT=yes

imapd_sanitizer_env() {
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
}

start_server() {
    local log=$1
    shift
    rm -f "$tmp/ports"
    "$server" --ports-file="$tmp/ports" "$@" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        [ -s "$tmp/ports" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$tmp/ports" ]
}

port() { sed -n "s/^$1=//p" "$tmp/ports" 2>/dev/null; }

stop_server() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null
    fi
    return 0
}

stop_server_rc() {
    server_rc=1
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 "$1"); do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid"
            server_rc=$?
            break
        fi
        sleep 0.1
    done
    stop_server
    pid=""
}

sanitizer_report() {
    grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|WARNING: ThreadSanitizer|runtime error' "$1"
}

no_sanitizer_report() { ! sanitizer_report "$1"; }

show_report() {
    grep -A30 -E 'ERROR: |WARNING: |runtime error' "$1" | head -n 40 | sed 's/^/    /'
}

add_summary() {
    local summary
    summary=$(grep -E '^# [0-9]+ passed, [0-9]+ failed$' "$1" | tail -n 1)
    [ -n "$summary" ] || return 1
    passed=$((passed + $(echo "$summary" | sed -E 's/^# ([0-9]+) passed.*/\1/')))
    failed=$((failed + $(echo "$summary" | sed -E 's/.* ([0-9]+) failed$/\1/')))
}

init_users() {
    local u
    users=("$@")
    user_args=()
    for u in "${users[@]}"; do
        printf '%s' "$u secret" >"$tmp/pw.$u"
        run "$mv" init "$u" --password-file "$tmp/pw.$u"
        check "init $u" ok
        user_args+=(--user "$u:$u secret")
    done
}

imapd_trap() {
    imapd_trap_first=${1:-:}
    trap '"$imapd_trap_first"; stop_server; [ -n "${client_pid:-}" ] && kill -KILL "$client_pid" 2>/dev/null;
          if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else
          chmod -R u+rwX "$tmp" 2>/dev/null; rm -rf "$tmp"; fi' EXIT
}

imapd_test_setup() {
    imapd_sanitizer_env
    server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
    mv="$PWD/build/asan/mailvault"
    make_tmp "$1"
    store_root "$2"
    imapd_trap : # nothing of its own to run first
    need_binaries "$server" "$mv"
}

need_binaries() {
    local f
    for f in "$@"; do
        if [ ! -x "$f" ]; then
            fail "$f is missing (make build/asan/mailvaultd build/asan/mailvault)"
            finish
        fi
    done
}

start_server_checked() {
    local log=$1
    if ! start_server "$@"; then
        fail "the server starts and writes its ports"
        sed 's/^/    server: /' "$log" | tail -n 20
        finish
    fi
    pass "the server starts and writes its ports"
}

run_client() {
    local seconds=$1 rc
    shift
    timeout -k 5 "$seconds" "$@" >"$tmp/client.out" 2>&1 &
    client_pid=$!
    wait "$client_pid"
    rc=$?
    client_pid=""
    grep -v '^# [0-9]* passed' "$tmp/client.out"
    add_summary "$tmp/client.out" || fail "the client printed no summary (exit $rc)"
}

stop_server_checked() {
    local log=$1
    stop_server_rc "${2:-100}"
    if [ "$server_rc" -eq 0 ]; then
        pass "SIGTERM: the server exits 0"
    else
        fail "SIGTERM: the server exits 0 (exit $server_rc)"
    fi
    if no_sanitizer_report "$log"; then
        pass "no sanitizer report in the server log"
    else
        fail "no sanitizer report in the server log"
        show_report "$log"
    fi
}
