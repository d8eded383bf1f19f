#!/usr/bin/env bash
# imap_compare.sh -- mailvaultd against Debian's Dovecot, same machine, same run, same load:
# build/rel/bench/bench_imap drives each server in turn with the same users, the same
# generated messages and the same command mix (bench/bench_imap.c has the mix), for 10 and
# 100 concurrent clients, and the figures go into one JSON file and one Markdown table.
#
# USAGE
#   bench/imap_compare.sh [--quick] [--rounds R] [--seconds T] [--clients "10 100"]
#                         [--users U] [--messages M]
#     (after `make all build/rel/bench/bench_imap`; bench/run.sh runs it as its last step)
#   Full run (default): 2 rounds, 30 s a run, 10 and 100 clients, 10 users of 500 messages
#     (2-50 KB), ~6 min. Writes bench/results/imap.json and bench/results/sections/imap.md
#     (bench/suite/aggregate.py appends sections/*.md to REPORT.md), and copies both to
#     build/bench-results/imap.{json,md}.
#   --quick: 1 round, 5 s, 10 clients, 4 users of 100 messages; build/bench-results only.
#
# STEPS
#   1. Dovecot (bench/dovecot_lib.sh, shared with bench/bigmail_compare.sh): if `dovecot`
#      is not installed, apt-get installs dovecot-core, dovecot-imapd and dovecot-lmtpd
#      (as root; Debian's policy-rc.d, where present, keeps the system's instance from
#      starting). If that is impossible the script says so and measures
#      mailvaultd alone: the JSON and the table then hold no Dovecot figures.
#   2. A scratch directory (mktemp under $TMPDIR, else /tmp; removed at exit): a random
#      password (file, mode 0600), users u1..uU@bench.example.
#   3. mailvaultd (build/mailvaultd, the release build) on 127.0.0.1, IMAP on a free port
#      (--ports-file), no LMTP, over a store root in the scratch directory; the users made
#      with `build/mailvault init` and the default key derivation (the real cost: no
#      MAILVAULT_KDF_ITER); the per-address connection limit raised to 1000 (all clients
#      come from 127.0.0.1).
#   4. Dovecot with a private configuration (dovecot_config in bench/dovecot_lib.sh, no LMTP)
#      written into the scratch directory (it never
#      reads /etc/dovecot): `dovecot -F -c CONFIG`, base_dir and state_dir inside the scratch
#      directory, listening on 127.0.0.1 on a free port only (imaps off), Maildir under the
#      scratch directory, passdb passwd-file with the users, a static userdb, no SSL,
#      plaintext auth allowed, no auth failure delay, process and per-user connection
#      limits raised to 1000, imap-login in high-performance mode (service_count = 0).
#      Dovecot refuses to access mail as uid 0, so its mail processes run as `nobody`
#      (the Maildir tree belongs to nobody); the master runs as the current user.
#   5. Both populated identically (bench_imap --populate-only: the same seed, the same
#      bytes), then the timed runs alternate: for each client count, R rounds of
#      mailvaultd, Dovecot, the order rotating by round (odd rounds mailvaultd first, even
#      rounds Dovecot first).
#   6. Both stopped (SIGTERM), then the JSON (every run, and per client count and server the
#      median over rounds of each figure) and the Markdown table (ratio = mailvaultd /
#      Dovecot operations per second; above 1 mailvaultd is faster).
#
# MAILVAULTD=path and MAILVAULT=path measure another build of the server and the CLI (e.g. one
# made from a clean `git archive` of a commit while the working tree is being edited).
# MAILVAULTD_ARGS="--workers=4 ..." passes further options to mailvaultd (e.g. to compare
# worker counts).
# KEEP_TMP=1 keeps the scratch directory (server logs, configuration, per-run JSON).
# Exit status: 0 if every run finished with no errors; 1 otherwise (the figures that were
# measured are still written).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 rounds=2 seconds=30 clients_list="10 100" users=10 messages=500
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 rounds=1 seconds=5 clients_list="10" users=4 messages=100 ;;
    --rounds) rounds=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --clients) clients_list=$2; shift ;;
    --users) users=$2; shift ;;
    --messages) messages=$2; shift ;;
    *) echo "usage: bench/imap_compare.sh [--quick] [--rounds R] [--seconds T]" \
        "[--clients \"10 100\"] [--users U] [--messages M]" >&2; exit 2 ;;
    esac
    shift
done

bench=build/rel/bench/bench_imap
server=${MAILVAULTD:-build/mailvaultd} mv=${MAILVAULT:-build/mailvault}
for f in "$server" "$mv" "$bench"; do
    if [ ! -x "$f" ]; then
        echo "imap_compare: $f is missing (make all build/rel/bench/bench_imap)" >&2
        exit 1
    fi
done
out_dir=build/bench-results
mkdir -p "$out_dir"
final_json=$out_dir/imap.json final_md=$out_dir/imap.md
if [ "$quick" -eq 0 ]; then
    mkdir -p bench/results/sections
    final_json=bench/results/imap.json final_md=bench/results/sections/imap.md
fi

# ---- 1. Dovecot ---------------------------------------------------------------------------
. bench/dovecot_lib.sh # dovecot_install, dovecot_config, free_port, wait_port, stop_pid
dovecot_install imap_compare

# ---- 2. scratch, password, users ------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/imap_compare.XXXXXX")
chmod 755 "$tmp" # Dovecot's mail processes (nobody) must reach their Maildir under it
mv_pid="" dc_pid=""
cleanup() {
    stop_pid "$mv_pid"
    stop_pid "$dc_pid"
    [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
(umask 077 && openssl rand -hex 16 >"$tmp/password")
unset MAILVAULT_KDF_ITER MAILVAULT_PASSWORD
export MAILVAULT_ROOT="$tmp/mailvault"
for i in $(seq 1 "$users"); do
    "$mv" init "u$i@bench.example" --password-file "$tmp/password" >/dev/null
done

# ---- 3. mailvaultd ---------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] && export MAILVAULTD_ALLOW_ROOT=yes # a benchmark box: serve as root
"$server" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1 --root="$MAILVAULT_ROOT" \
    --ports-file="$tmp/mv.ports" --connections-max=2000 --connections-per-address-max=1000 \
    ${MAILVAULTD_ARGS:-} \
    >"$tmp/mailvaultd.log" 2>&1 &
mv_pid=$!
for _ in $(seq 1 100); do
    [ -s "$tmp/mv.ports" ] && break
    kill -0 "$mv_pid" 2>/dev/null || break
    sleep 0.1
done
mv_port=$(sed -n 's/^imap=//p' "$tmp/mv.ports" 2>/dev/null || true)
if [ -z "$mv_port" ]; then
    echo "imap_compare: mailvaultd did not start:" >&2
    cat "$tmp/mailvaultd.log" >&2
    exit 1
fi

# ---- 4. Dovecot -----------------------------------------------------------------------------
dc_port=""
if [ "$have_dovecot" -eq 1 ]; then
    dc=$tmp/dovecot
    dc_port=$(free_port)
    dc_users=()
    for i in $(seq 1 "$users"); do dc_users+=("u$i@bench.example"); done
    dovecot_config "$dc" "$dc_port" -1 "$tmp/password" "${dc_users[@]}"
    dovecot -F -c "$dc/dovecot.conf" >"$dc/stderr.log" 2>&1 &
    dc_pid=$!
    if ! wait_port "$dc_port" "$dc_pid"; then
        dovecot_note="Dovecot did not start ($(tail -n 3 "$dc/stderr.log" "$dc/dovecot.log" 2>/dev/null | tr '\n' ' ')): mailvaultd measured alone"
        echo "imap_compare: $dovecot_note" >&2
        stop_pid "$dc_pid"
        have_dovecot=0 dc_pid=""
    fi
fi

# ---- 5. populate, then the alternating runs -----------------------------------------------------
common=(--users "$users" --messages "$messages" --password-file "$tmp/password")
servers=("mailvaultd:$mv_port")
[ "$have_dovecot" -eq 0 ] || servers+=("dovecot:$dc_port")
status=0
mkdir -p "$tmp/runs"
for s in "${servers[@]}"; do
    echo "== populate ${s%%:*}: $users users x $messages messages"
    t0=$(date +%s.%N)
    "$bench" --port "${s##*:}" "${common[@]}" --label "${s%%:*}" --populate-only
    awk -v a="$t0" -v b="$(date +%s.%N)" -v n="${s%%:*}" \
        'BEGIN { printf "%s %.1f\n", n, b - a }' >>"$tmp/populate.txt"
done
# The order rotates by round (round r starts with server r mod N): a run leaves work behind
# it (mailvaultd's purge of what its EXPUNGEs dropped, checkpoints; Dovecot's index updates)
# that takes CPU from the run after it, so with a fixed order the second server always paid
# for the first one's (bench/imap_old_new.sh measured it: an old-against-old run, the second
# slot -5% commands/s, p99 +6-35%).
for clients in $clients_list; do
    for round in $(seq 1 "$rounds"); do
        order=()
        for i in $(seq 0 $((${#servers[@]} - 1))); do
            order+=("${servers[$(((round - 1 + i) % ${#servers[@]}))]}")
        done
        for s in "${order[@]}"; do
            name=${s%%:*}
            echo "== $name, $clients clients, round $round of $rounds, ${seconds} s"
            if ! "$bench" --port "${s##*:}" "${common[@]}" --label "$name" \
                --clients "$clients" --seconds "$seconds" \
                --json "$tmp/runs/$name-c$clients-r$round.json"; then
                echo "imap_compare: $name, $clients clients, round $round had errors" >&2
                status=1
            fi
        done
    done
done

# ---- 6. stop, then the JSON and the table -----------------------------------------------------
mailvaultd_rc=0
if kill -0 "$mv_pid" 2>/dev/null; then
    kill -TERM "$mv_pid"
    wait "$mv_pid" || mailvaultd_rc=$?
fi
mv_pid=""
stop_pid "$dc_pid"
dc_pid=""
if [ "$mailvaultd_rc" -ne 0 ]; then
    echo "imap_compare: mailvaultd exited with $mailvaultd_rc" >&2
    status=1
fi

python3 - "$tmp/runs" "$final_json" "$final_md" "$quick" "$rounds" "$seconds" "$users" \
    "$messages" "$dovecot_version" "$dovecot_note" "$tmp/populate.txt" "$server" <<'EOF'
import datetime, glob, json, os, platform, statistics, sys

runs_dir, out_json, out_md, quick, rounds, seconds, users, messages, dc_version, note, pop, \
    server = sys.argv[1:13]
runs = []
for path in sorted(glob.glob(os.path.join(runs_dir, "*.json"))):
    with open(path) as f:
        doc = json.load(f)
    doc["round"] = int(path.rsplit("-r", 1)[1].split(".")[0])
    runs.append(doc)
populate = {}
with open(pop) as f:
    for line in f:
        name, secs = line.split()
        populate[name] = float(secs)

kinds = ["fetch_headers", "fetch_body", "search", "store", "append", "expunge", "noop"]
summary = {}
for doc in runs:
    summary.setdefault(str(doc["clients"]), {}).setdefault(doc["server"], []).append(doc)

def med(values):
    return statistics.median(values) if values else None

def stats(docs):
    s = {"rounds": len(docs),
         "commands_per_s": med([d["commands_per_s"] for d in docs]),
         "commands_per_s_min": min(d["commands_per_s"] for d in docs),
         "commands_per_s_max": max(d["commands_per_s"] for d in docs),
         "errors": sum(d["errors"] for d in docs),
         "failed_clients": sum(d["failed_clients"] for d in docs), "ops": {}}
    for k in kinds + ["login", "select"]:
        s["ops"][k] = {m: med([d["ops"][k][m] for d in docs])
                       for m in ("ops_per_s", "p50_ms", "p99_ms")}
    return s

result = {}
for clients, by_server in summary.items():
    result[clients] = {name: stats(docs) for name, docs in by_server.items()}
    mv, dc = result[clients].get("mailvaultd"), result[clients].get("dovecot")
    if mv and dc:
        result[clients]["ratio_mailvaultd_vs_dovecot"] = {
            "commands_per_s": mv["commands_per_s"] / dc["commands_per_s"],
            **{k: (mv["ops"][k]["ops_per_s"] / dc["ops"][k]["ops_per_s"]
                   if dc["ops"][k]["ops_per_s"] else None) for k in kinds}}

load = [d["load_start"] for d in runs] + [d["load_end"] for d in runs]
doc = {
    "schema": "mailvault-bench-imap-compare/1",
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "quick": quick == "1",
    "machine": {"cpu": runs[0]["cpu"] if runs else "", "cpus": os.cpu_count(),
                "system": platform.platform(), "load_min": min(load, default=None),
                "load_max": max(load, default=None)},
    "setup": {"rounds": int(rounds), "seconds": float(seconds), "users": int(users),
              "messages_per_user": int(messages), "mailvaultd": server,
              "dovecot_version": dc_version or None,
              "weights": runs[0]["weights"] if runs else {}, "populate_seconds": populate},
    "notes": [note] if note else [],
    "summary": result,
    "runs": runs,
}
with open(out_json, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")

def fmt(v, digits=1):
    return "--" if v is None else f"{v:,.{digits}f}"

lines = ["## IMAP server: mailvaultd vs Dovecot", ""]
lines.append(
    f"bench/imap_compare.sh{' --quick' if quick == '1' else ''}, {doc['date']}: "
    f"{users} users x {messages} messages (2-50 KB), {seconds} s per run, {rounds} round(s) "
    f"alternating mailvaultd / Dovecot {dc_version or '(not installed)'} (the order rotating "
    f"by round); medians over rounds. "
    f"Plain IMAP on loopback, {os.cpu_count()} CPUs, load {fmt(doc['machine']['load_min'], 2)}"
    f"-{fmt(doc['machine']['load_max'], 2)}. Ratio: mailvaultd / Dovecot operations per "
    f"second (above 1: mailvaultd faster). expunge = UID STORE +FLAGS (\\Deleted) + UID "
    f"EXPUNGE, two commands timed together.")
lines.append("")
for n in note and [note] or []:
    lines += [f"**Note:** {n}", ""]
for clients in sorted(result, key=int):
    r = result[clients]
    mv, dc = r.get("mailvaultd"), r.get("dovecot")
    ratio = r.get("ratio_mailvaultd_vs_dovecot", {})
    lines += [f"**{clients} clients**", "",
              "| operation | mailvaultd ops/s | Dovecot ops/s | ratio | mailvaultd p50 / p99 ms "
              "| Dovecot p50 / p99 ms |", "|---|---:|---:|---:|---:|---:|"]
    def cell(s, k, m):
        return fmt(s["ops"][k][m], 2 if m != "ops_per_s" else 1) if s else "--"
    lines.append(f"| **all commands/s** | {fmt(mv and mv['commands_per_s'])} | "
                 f"{fmt(dc and dc['commands_per_s'])} | {fmt(ratio.get('commands_per_s'), 2)} "
                 f"| | |")
    for k in kinds + ["login", "select"]:
        rate = ratio.get(k) if k in kinds else None
        lines.append(
            f"| {k} | {cell(mv, k, 'ops_per_s') if k in kinds else ''} | "
            f"{cell(dc, k, 'ops_per_s') if k in kinds else ''} | {fmt(rate, 2) if rate else ''} | "
            f"{cell(mv, k, 'p50_ms')} / {cell(mv, k, 'p99_ms')} | "
            f"{cell(dc, k, 'p50_ms')} / {cell(dc, k, 'p99_ms')} |")
    errs = ", ".join(f"{name} {s['errors']} errors, {s['failed_clients']} failed clients"
                     for name, s in r.items() if name != "ratio_mailvaultd_vs_dovecot")
    lines += ["", f"Errors: {errs}.", ""]
text = "\n".join(lines)
with open(out_md, "w") as f:
    f.write(text)
print(text)
EOF
if [ "$final_json" != "$out_dir/imap.json" ]; then
    cp "$final_json" "$out_dir/imap.json"
    cp "$final_md" "$out_dir/imap.md"
fi
echo "results: $final_json $final_md"
exit "$status"
