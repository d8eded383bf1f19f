#!/usr/bin/env bash
# commands_compare.sh -- commands a client sends that the big-mailbox table does not time,
# mailvaultd beside Dovecot over the big-mailbox corpus (issue 13): UID SEARCH with many keys
# at once (an OR of hundreds or thousands of Message-IDs, senders, subject words or UIDs: a
# thread's lookup, a client's filter; bench/search_keys.py; docs/BENCHMARKS.md, "SEARCH
# HEADER: one pass for every key") and FETCH of pieces of messages (previews, a part's MIME
# header, the text part; bench/fetch_pieces.py; "Body sections from the skeleton"), and a
# client's message list (the header fields of every message and of the last 200, ENVELOPE,
# the header; "A message list's headers a window at a time"), and a webmail's UID SORT of
# the whole mailbox by each criterion (bench/sort_compare.py; "SORT"), again after every
# server is restarted (the first SORTs from what the servers saved).
#
# USAGE
#   [MAILVAULTD_OLD=PATH] bench/commands_compare.sh [--messages N] [--rounds R] [--cases LIST]
#                                              [--range A:B] [--no-dovecot] [--quick]
#     (after `make all`; bench/run.sh runs it, --quick with `make bench QUICK=1`) N: the
#     bench corpus' size (default 10000; bench/bigmail_corpus.py, generated into
#     build/bigmail-corpus/N once, as bench/bigmail_compare.sh does); R: times each command is
#     sent to each server (default 5); LIST: bench/search_keys.py's cases. --quick: 1,000
#     messages, 3 rounds. FETCH over messages 1:500 (1:50 with --quick).
#   MAILVAULTD_OLD: a second mailvaultd (say, a build of the commit before) measured beside
#     build/mailvaultd on a store of its own, made by the mailvault CLI next to it.
#     Dovecot is measured too (installed if missing; --no-dovecot: not), after a discarded
#     first pass that indexes its Maildir and caches the fields, as a client's repeated
#     searches find them.
#   MAILVAULTD, MAILVAULT: the server and CLI measured as "new" (default build/mailvaultd,
#     build/mailvault); SEARCH_KEYS_KDF_ITER: the stores' key derivation iterations (default:
#     the library's; the smoke test, tests/cli_bench_commands_smoke.sh, sets 2).
# Prints both drivers' tables; exits 1 if the servers' answers differ. Everything
# under nice -n 10; scratch under $TMPDIR, removed at exit unless KEEP_TMP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/mailvaultd_lib.sh
. bench/dovecot_lib.sh

messages=10000
rounds=5
cases=""
range=1:500
with_dovecot=1
while [ $# -gt 0 ]; do
    case $1 in
    --no-dovecot) with_dovecot=0; shift ;;
    --messages) messages=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --quick) messages=1000 rounds=3 range=1:50; shift ;;
    --range) range=$2; shift 2 ;;
    *) echo "commands_compare: unknown argument $1" >&2; exit 2 ;;
    esac
done
mv=${MAILVAULT:-build/mailvault}
server=${MAILVAULTD:-build/mailvaultd}
if [ ! -x "$mv" ] || [ ! -x "$server" ]; then
    echo "commands_compare: make all first" >&2
    exit 2
fi
nice=(nice -n 10)

bench_scratch commands_compare
[ -z "${SEARCH_KEYS_KDF_ITER:-}" ] || export MAILVAULT_KDF_ITER=$SEARCH_KEYS_KDF_ITER
user=u1@bench.example
bench_corpus "$messages"
declare -A bin port maker
names=(new)
bin[new]=$server
maker[new]=$mv
if [ -n "${MAILVAULTD_OLD:-}" ]; then
    names=(new old)
    bin[old]=$MAILVAULTD_OLD
    maker[old]=$(bench_cli_beside "$MAILVAULTD_OLD" "$mv")
fi
declare -A server_pid
# start_mailvaultds: every mailvaultd on its store, their ports in args (again after a stop).
start_mailvaultds() {
    for n in "${names[@]}"; do
        rm -f "$tmp/$n.ports"
        "${nice[@]}" "${bin[$n]}" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1 \
            --root="$tmp/root-$n" --ports-file="$tmp/$n.ports" >>"$tmp/$n.log" 2>&1 &
        server_pid[$n]=$!
        pids+=("$!")
        for _ in $(seq 1 100); do [ -s "$tmp/$n.ports" ] && break; sleep 0.1; done
        port[$n]=$(sed -n 's/^imap=//p' "$tmp/$n.ports")
        [ -n "${port[$n]}" ] || { echo "commands_compare: $n did not start" >&2; exit 1; }
        args+=(--server "$n=127.0.0.1:${port[$n]}")
    done
}
start_dovecot() {
    "${nice[@]}" dovecot -F -c "$dc/dovecot.conf" >>"$dc/stderr.log" 2>&1 &
    server_pid[dovecot]=$!
    pids+=("$!")
    wait_port "${port[dovecot]}" "$!"
    args+=(--server "dovecot=127.0.0.1:${port[dovecot]}")
}
for n in "${names[@]}"; do
    echo "== mailvault: import $messages messages for $n (${maker[$n]})"
    bench_import "${maker[$n]}" "$tmp/root-$n" "$user" "$corpus/Maildir"
done
args=()
start_mailvaultds
have_dovecot=0
[ "$with_dovecot" -eq 0 ] || dovecot_install commands_compare
if [ "$have_dovecot" -eq 1 ]; then
    dc=$tmp/dovecot
    port[dovecot]=$(free_port)
    dovecot_config "$dc" "${port[dovecot]}" -1 "$tmp/password" "$user"
    dovecot_maildir_copy "$corpus/Maildir" "$dc/mail/$user"
    start_dovecot
elif [ "$with_dovecot" -eq 1 ]; then
    echo "commands_compare: no Dovecot (${dovecot_note:-not installed}): mailvaultd alone"
fi
search_extra=()
[ -z "$cases" ] || search_extra=(--cases "$cases")
echo "== warm-up pass, not reported (Dovecot, when measured, indexes its Maildir and caches the fields)"
"${nice[@]}" python3 bench/search_keys.py "${args[@]}" "${search_extra[@]}" --user "$user" \
    --password-file "$tmp/password" --rounds 1 >/dev/null || true
echo "== search_keys: $messages messages, $rounds rounds ($(date -u +%H:%M) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
status=0
"${nice[@]}" python3 bench/search_keys.py "${args[@]}" "${search_extra[@]}" --user "$user" \
    --password-file "$tmp/password" --rounds "$rounds" || status=1
echo "== fetch_pieces: $range, $rounds rounds ($(date -u +%H:%M) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
"${nice[@]}" python3 bench/fetch_pieces.py "${args[@]}" --user "$user" \
    --password-file "$tmp/password" --rounds "$rounds" --range "$range" --messages "$messages" ||
    status=1
echo "== sort_compare: $messages messages, $rounds rounds ($(date -u +%H:%M) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
"${nice[@]}" python3 bench/sort_compare.py "${args[@]}" --user "$user" \
    --password-file "$tmp/password" --rounds "$rounds" || status=1
# The first SORTs after a restart: mailvaultd reads the keys its store saved at the close (a
# mailbox memo), Dovecot the sort ids in its index.
for n in "${!server_pid[@]}"; do stop_pid "${server_pid[$n]}"; done
args=()
start_mailvaultds
[ "$have_dovecot" -eq 0 ] || start_dovecot
echo "== sort_compare after a restart of every server: $messages messages, $rounds rounds ($(date -u +%H:%M) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
"${nice[@]}" python3 bench/sort_compare.py "${args[@]}" --user "$user" \
    --password-file "$tmp/password" --rounds "$rounds" || status=1
exit "$status"
