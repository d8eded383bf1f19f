#!/usr/bin/env bash
# imap_old_new.sh -- bench/bench_imap's command mix against mailvaultd, an older mailvaultd
# build and Dovecot in ONE run, the servers alternating run by run (the order rotating by
# round, each run once the mailvaultd servers are idle), for 10 and 100 clients: per-command
# p50 / p99 side by side (issue 13: short commands waiting behind long ones).
# bench/imap_compare.sh is the suite's comparison (one mailvaultd against Dovecot); this one
# is for old-versus-new measurements of a change.
#
# USAGE
#   MAILVAULTD_OLD=path [MAILVAULT_OLD=path] bench/imap_old_new.sh [--rounds R] [--seconds T]
#       [--clients "10 100"] [--users U] [--messages M]
#       (after `make all build/rel/bench/bench_imap`). MAILVAULT_OLD: the CLI that makes the
#       old server's users (its build's, when the store schema changed since: an older server
#       cannot open a newer store); default build/mailvault.
#   Default: 2 rounds of 20 s, 10 and 100 clients, 10 users of 500 messages, populated
#   identically on every server (bench_imap --populate-only). Prints a table of medians over
#   rounds. KEEP_TMP=1 keeps the scratch directory (each run's JSON in runs/).
# Dovecot: a private instance as in bench/imap_compare.sh; skipped if dovecot is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=2 messages=500 seconds=20 clients_list="10 100" users=10
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --clients) clients_list=$2; shift ;;
    --users) users=$2; shift ;;
    --messages) messages=$2; shift ;;
    *) echo "usage: bench/imap_old_new.sh [--rounds R] [--seconds T] [--clients L] [--users U] [--messages M]" >&2; exit 2 ;;
    esac
    shift
done
mv=build/mailvault new=${MAILVAULTD_NEW:-build/mailvaultd} old=${MAILVAULTD_OLD:-}
. bench/mailvaultd_lib.sh # bench_scratch, start_mailvaultd
. bench/dovecot_lib.sh    # dovecot_config, free_port, wait_port
bench_scratch imap_old_new

declare -A imap lmtp
limits=(--connections-max=2000 --connections-per-address-max=1000)
servers=()
if [ -n "$old" ]; then
    mv=${MAILVAULT_OLD:-build/mailvault}
    start_mailvaultd mailvaultd-old "$old" u "$users" "${limits[@]}"
    servers+=(mailvaultd-old)
    mv=build/mailvault
fi
start_mailvaultd mailvaultd "$new" u "$users" "${limits[@]}"
servers+=(mailvaultd)

if command -v dovecot >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
    dc=$tmp/dovecot
    imap[dovecot]=$(free_port) lmtp[dovecot]=$(free_port)
    mapfile -t dc_users < <(for u in $(seq 1 "$users"); do echo "u$u@bench.example"; done)
    dovecot_config "$dc" "${imap[dovecot]}" "${lmtp[dovecot]}" "$tmp/password" "${dc_users[@]}"
    dovecot -F -c "$dc/dovecot.conf" >"$dc/stderr.log" 2>&1 &
    pids+=($!)
    wait_port "${lmtp[dovecot]}" "${pids[-1]}" || true
    servers+=(dovecot)
else
    echo "imap_old_new: Dovecot is not installed: mailvaultd alone" >&2
fi

bench=build/rel/bench/bench_imap
common=(--users "$users" --messages "$messages" --password-file "$tmp/password")
for s in "${servers[@]}"; do
    "$bench" --port "${imap[$s]}" "${common[@]}" --label "$s" --populate-only >/dev/null
done
mkdir -p "$tmp/runs"
# A server's run leaves work behind it (the purge of what its EXPUNGEs dropped, checkpoints)
# that took CPU from the run after it: with a fixed order (old, new, Dovecot) the second
# server always ran after the first one's (an old-against-old run, 3 rounds at 10 clients:
# the second slot -5% commands/s, p99 +6-35%); rotating the order alone still left the new
# server after the old one in two rounds of three (p99 +6-25%). So each run waits until both
# mailvaultd servers are idle (their CPU time grew by at most 2 ticks in 0.5 s, at most 60 s),
# and the order rotates by round (round r starts with server r mod N).
mv_pids=() # pids[] is in the order servers[] was started
for i in "${!servers[@]}"; do
    [[ ${servers[$i]} == mailvaultd* ]] && mv_pids+=("${pids[$i]}")
done
mv_cpu_ticks() {
    local t=0 p f
    for p in "${mv_pids[@]}"; do
        read -r -a f < <(sed 's/^.*) //' "/proc/$p/stat")
        t=$((t + f[11] + f[12]))
    done
    echo "$t"
}
mv_quiesce() {
    local deadline=$((SECONDS + 60)) before after
    before=$(mv_cpu_ticks)
    while [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.5
        after=$(mv_cpu_ticks)
        [ $((after - before)) -le 2 ] && return 0
        before=$after
    done
    echo "imap_old_new: the mailvaultd servers were still busy after 60 s" >&2
}
n_servers=${#servers[@]}
for clients in $clients_list; do
    for r in $(seq 1 "$rounds"); do
        order=()
        for i in $(seq 0 $((n_servers - 1))); do
            order+=("${servers[$(((r - 1 + i) % n_servers))]}")
        done
        for s in "${order[@]}"; do
            mv_quiesce
            "$bench" --port "${imap[$s]}" "${common[@]}" --label "$s" --clients "$clients" \
                --seconds "$seconds" --json "$tmp/runs/$s-$clients-$r.json" >/dev/null ||
                echo "imap_old_new: $s, $clients clients, round $r had errors" >&2
            echo "done: $s, $clients clients, round $r"
        done
    done
done
python3 - "$tmp/runs" "${servers[@]}" <<'EOF'
import glob, json, os, statistics, sys
d, servers = sys.argv[1], sys.argv[2:]
runs = {}
for p in glob.glob(os.path.join(d, "*.json")):
    s, c, r = os.path.basename(p)[:-5].rsplit("-", 2)
    runs.setdefault((int(c), s), []).append(json.load(open(p)))
kinds = list(next(iter(runs.values()))[0]["ops"].keys())
for c in sorted({c for c, _ in runs}):
    print(f"\n**{c} clients** (p50 / p99 ms, medians over rounds; ops/s)\n")
    print("| command | " + " | ".join(servers) + " |")
    print("|---|" + "---:|" * len(servers))
    for k in kinds:
        cells = []
        for s in servers:
            rs = runs.get((c, s), [])
            if not rs or k not in rs[0]["ops"]:
                cells.append("--")
                continue
            med = lambda m: statistics.median(x["ops"][k][m] for x in rs)
            cells.append(f"{med('p50_ms'):.2f} / {med('p99_ms'):.1f} ({med('ops_per_s'):.0f}/s)")
        print(f"| {k} | " + " | ".join(cells) + " |")
EOF
