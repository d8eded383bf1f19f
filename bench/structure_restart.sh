#!/usr/bin/env bash
# structure_restart.sh -- FETCH BODYSTRUCTURE before and after the servers start again (issue
# 13): mailvaultd kept its answers only in memory, so the first FETCH after every start (or
# after the store closed, store_idle_s after its last session) read and parsed each message
# again, while Dovecot answers from its cache file. Now the answers are kept in the store's
# memos (docs/IMAPD.md, "BODYSTRUCTURE kept").
#
# USAGE
#   [MAILVAULTD_OLD=PATH] bench/structure_restart.sh [--messages N] [--rounds R]
#                                                     [--range A:B] [--page-range C:D] [--quick]
#     (after `make all`; bench/run.sh runs it, --quick with `make bench QUICK=1`) N: the
#     bench corpus' size (default 10000; bench/bigmail_corpus.py, generated into
#     build/bigmail-corpus/N once, as bench/bigmail_compare.sh does); R: rounds of
#     bench/structure_compare.py per pass (default 4); --range, --page-range: its own
#     (default 1:3000 and 5001:8000). --quick: 1,000 messages, 2 rounds, 1:300 and 501:800.
#   MAILVAULTD_OLD: a second mailvaultd (say, a build of the commit before) measured beside
#     build/mailvaultd on a store of its own, which the mailvault CLI next to it makes.
#     Dovecot is measured too when installed.
#
# STEPS
#   1. The corpus imported into a mailvault store for each mailvaultd by its build's CLI
#      (the default key derivation); Dovecot gets a copy of the Maildir.
#   2. Pass 1: every server started; bench/structure_compare.py (a session a round: FETCH
#      --range (BODYSTRUCTURE), then 20 pages of 50 in 5001:8000; servers alternating).
#   3. Every server stopped (SIGTERM; mailvaultd saves what is left at its stores' close)
#      and started again; pass 2 as pass 1. Its first round is the first FETCH after a
#      restart: the row this benchmark is about.
# Prints both passes' tables. Everything runs under nice -n 10. Scratch under $TMPDIR,
# removed at exit unless KEEP_TMP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/mailvaultd_lib.sh
. bench/dovecot_lib.sh

messages=10000
rounds=4
range=1:3000
page_range=5001:8000
while [ $# -gt 0 ]; do
    case $1 in
    --messages) messages=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --range) range=$2; shift 2 ;;
    --page-range) page_range=$2; shift 2 ;;
    --quick) messages=1000 rounds=2 range=1:300 page_range=501:800; shift ;;
    *) echo "structure_restart: unknown argument $1" >&2; exit 2 ;;
    esac
done
mv=build/mailvault
[ -x "$mv" ] && [ -x build/mailvaultd ] || { echo "structure_restart: make all first" >&2; exit 2; }
nice=(nice -n 10)

bench_scratch structure_restart
user=u1@bench.example
bench_corpus "$messages"
declare -A bin root port pid maker
names=(new)
bin[new]=build/mailvaultd
maker[new]=$mv
if [ -n "${MAILVAULTD_OLD:-}" ]; then
    names=(old new)
    bin[old]=$MAILVAULTD_OLD
    maker[old]=$(bench_cli_beside "$MAILVAULTD_OLD" "$mv")
fi
# Each server's store made by the CLI of its build: what a store keeps for a server to read
# (since schema version 15, the line counts of the parts stored apart) is the import's work.
for n in "${names[@]}"; do
    root[$n]=$tmp/root-$n
    echo "== mailvault: import $messages messages for $n (${maker[$n]})"
    bench_import "${maker[$n]}" "${root[$n]}" "$user" "$corpus/Maildir"
done
dovecot=0
if command -v dovecot >/dev/null; then
    dovecot=1
    dc=$tmp/dovecot
    port[dovecot]=$(free_port)
    dovecot_config "$dc" "${port[dovecot]}" -1 "$tmp/password" "$user"
    dovecot_maildir_copy "$corpus/Maildir" "$dc/mail/$user"
    names+=(dovecot)
fi
sync

start_all() {
    local n
    for n in "${names[@]}"; do
        if [ "$n" = dovecot ]; then
            "${nice[@]}" dovecot -F -c "$dc/dovecot.conf" >"$dc/stderr.log" 2>&1 &
            pid[$n]=$!
            wait_port "${port[$n]}" "${pid[$n]}"
        else
            rm -f "$tmp/$n.ports"
            "${nice[@]}" "${bin[$n]}" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1 \
                --root="${root[$n]}" --ports-file="$tmp/$n.ports" >>"$tmp/$n.log" 2>&1 &
            pid[$n]=$!
            for _ in $(seq 1 100); do [ -s "$tmp/$n.ports" ] && break; sleep 0.1; done
            port[$n]=$(sed -n 's/^imap=//p' "$tmp/$n.ports")
        fi
        pids+=("${pid[$n]}")
    done
}

stop_all() {
    local n
    for n in "${names[@]}"; do stop_pid "${pid[$n]}"; done
}

compare() {
    local args=() n
    for n in "${names[@]}"; do args+=(--server "$n=127.0.0.1:${port[$n]}"); done
    "${nice[@]}" python3 bench/structure_compare.py "${args[@]}" --user "$user" \
        --password-file "$tmp/password" --rounds "$rounds" --range "$range" \
        --page-range "$page_range"
}

echo "== pass 1: the servers just started ($(date -u +%H:%M) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
start_all
compare
stop_all
echo "== pass 2: the same servers started again ($(date -u +%H:%M) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
start_all
compare
stop_all
