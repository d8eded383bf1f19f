#!/usr/bin/env bash
# run.sh -- the reference suite: the reference system's benchmark workload on mailvault (C,
# build/rel/bench/bench_reference) and on the reference implementation
# (better-sqlite3-multiple-ciphers 12.11.1 and 11.10.0, bench/reference_runner.js) in the
# same run, alternating, for every configuration and cipher; then results, report, charts.
#
# USAGE
#   bench/suite/run.sh [--quick] [--scale K] [--rounds R] [--configs a,b] [--ciphers a,b]
#                      [--no-reference] [--no-perf] [--out DIR]
#   `make bench` runs it after bench/run.sh (`make bench QUICK=1` passes --quick).
#
#   full (default)  scale 20, 5 rounds, every configuration     -> bench/results/
#   --quick         scale 5, 2 rounds, the production profile   -> build/bench-results/
#                   reference-suite-quick/ (so it never overwrites a committed full run);
#                   well under 2 minutes
#   --configs       names from `bench_reference --list` (default: all; quick: production)
#   --ciphers       among chacha20,aes256cbc,sqlcipher,none (default: all four)
#   --no-reference  mailvault and plain SQLite only
#   --no-perf       no profile of missed targets
#
# STEPS
#   1. build bench_reference; install the reference versions if missing
#      (scripts/install-reference.sh [11.10.0]); install gnuplot-nox with apt-get if
#      missing. Whatever cannot be had is left out, and REPORT.md says so.
#   2. R rounds; in each, for every configuration and cipher, one run of each
#      implementation, back to back: mailvault, [plain SQLite for cipher none], reference
#      12.11.1, reference 11.10.0 -- reversed in odd rounds, so neither side always runs
#      first. Every run is a new process that first runs a discarded warm-up.
#   3. bench/suite/validate.py on every record (fails the run on a problem).
#   4. bench/suite/aggregate.py: results.json, results.csv, REPORT.md, runs.jsonl,
#      charts/*.svg; for each target missed, `perf record -g` on bench_reference for that
#      phase (perf's control FIFO enables sampling for that phase only), summarised in
#      REPORT.md.
#   5. The summary table and how long the run took, on stdout.
# Exit status: 0 when every run succeeded and validated, whether or not targets were met.
set -euo pipefail
cd "$(dirname "$0")/../.."
start_s=$(date +%s)
start_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
git_rev=$(git describe --always --dirty 2>/dev/null || echo unknown)

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
bin=build/rel/bench/bench_reference

usage() {
    sed -n '7,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

quick=0 scale="" rounds="" configs="" ciphers="chacha20,aes256cbc,sqlcipher,none"
use_ref=1 use_perf=1 out="" args="$*"
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --scale) scale=${2:?}; shift ;;
    --rounds) rounds=${2:?}; shift ;;
    --configs) configs=${2:?}; shift ;;
    --ciphers) ciphers=${2:?}; shift ;;
    --no-reference) use_ref=0 ;;
    --no-perf) use_perf=0 ;;
    --out) out=${2:?}; shift ;;
    *) usage ;;
    esac
    shift
done
if [ "$quick" -eq 1 ]; then
    scale=${scale:-5} rounds=${rounds:-2} configs=${configs:-production}
    out=${out:-build/bench-results/reference-suite-quick}
else
    scale=${scale:-20} rounds=${rounds:-5}
    out=${out:-bench/results}
fi
[[ $scale =~ ^[0-9]+$ && $rounds =~ ^[0-9]+$ && $rounds -ge 1 ]] || usage

work=$(mktemp -d "${TMPDIR:-/tmp}/mvsuite.XXXXXX")
trap 'rm -rf "$work"' EXIT
notes="$work/notes"
: >"$notes"
note() {
    echo "suite: $*" >&2
    echo "$*" >>"$notes"
}

# ---- 1. tools ---------------------------------------------------------------------------
make -s --no-print-directory "$bin"
"$bin" --describe >"$work/describe.json"
[ -n "$configs" ] || configs=$("$bin" --list | sed -n 's/^configs: //p' | tr ' ' ',')

refs=() # "VERSION=DIR"
if [ "$use_ref" -eq 1 ]; then
    for v in 12.11.1 11.10.0; do
        dir=tools/reference
        [ "$v" = 12.11.1 ] || dir="tools/reference-$v"
        if [ ! -d "$dir/node_modules/better-sqlite3-multiple-ciphers" ] &&
            ! scripts/install-reference.sh "$v" >&2; then
            note "reference $v could not be installed: not measured"
            continue
        fi
        refs+=("$v=$dir")
    done
fi

ensure_gnuplot() {
    command -v gnuplot >/dev/null 2>&1 && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
    echo "suite: installing gnuplot-nox for the charts" >&2
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        $sudo apt-get install -y -qq gnuplot-nox; } >"$work/apt.log" 2>&1 || true
    command -v gnuplot >/dev/null 2>&1
}
ensure_gnuplot || note "gnuplot-nox could not be installed: the report has no charts"

# ---- 2. the runs --------------------------------------------------------------------------
runs="$work/runs.jsonl"
: >"$runs"
failures=0
scratch="${TMPDIR:-/tmp}"

# run_impl IMPL CONFIG CIPHER ROUND: one run, its JSON line appended to $runs.
run_impl() {
    local impl=$1 config=$2 cipher=$3 round=$4 cmd
    case $impl in
    mailvault | sqlite)
        cmd=("$bin" --impl "$impl") ;;
    *)
        cmd=(node bench/reference_runner.js --impl-dir "${impl#*=}"
             --describe "$work/describe.json") ;;
    esac
    local t0 line
    t0=$(date +%s%N)
    if line=$("${cmd[@]}" --config "$config" --cipher "$cipher" --scale "$scale" \
        --round "$round" --dir "$scratch" 2>"$work/stderr"); then
        echo "$line" >>"$runs"
        local ms=$((($(date +%s%N) - t0) / 1000000))
        printf ' %s %d.%ds' "${impl%%=*}" $((ms / 1000)) $((ms % 1000 / 100)) >&2
    else
        failures=$((failures + 1))
        printf ' %s FAILED' "${impl%%=*}" >&2
        note "run failed: $impl $config $cipher round $round: $(tail -n 1 "$work/stderr")"
    fi
}

IFS=, read -r -a config_list <<<"$configs"
IFS=, read -r -a cipher_list <<<"$ciphers"
for ((round = 0; round < rounds; round++)); do
    for config in "${config_list[@]}"; do
        for cipher in "${cipher_list[@]}"; do
            order=(mailvault)
            [ "$cipher" != none ] || order+=(sqlite)
            for r in "${refs[@]}"; do order+=("reference-$r"); done
            if ((round % 2 == 1)); then # reversed: neither side always runs first
                for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do
                    tmp=${order[i]} order[i]=${order[j]} order[j]=$tmp
                done
            fi
            printf '[round %d/%d] %-24s %-10s' $((round + 1)) "$rounds" "$config" "$cipher" >&2
            for impl in "${order[@]}"; do
                run_impl "$impl" "$config" "$cipher" "$round"
            done
            echo >&2
        done
    done
done

# ---- 3. validation ------------------------------------------------------------------------
"$PY" bench/suite/validate.py --describe "$work/describe.json" "$runs" >&2 || {
    echo "suite: records failed validation (above); nothing written" >&2
    exit 1
}

# ---- 4. aggregation, profiles of missed targets, charts ---------------------------------
write_meta() {
    "$PY" - "$work/meta.json" "$notes" <<PYEOF
import json, sys
notes = [l.rstrip("\n") for l in open(sys.argv[2]) if l.strip()]
json.dump({"time_utc": "$start_utc", "duration_s": $(($(date +%s) - start_s)),
           "quick": $([ "$quick" -eq 1 ] && echo True || echo False), "scale": $scale,
           "rounds": $rounds, "args": "$args", "configs": "$configs", "ciphers": "$ciphers",
           "scratch_dir": "$scratch",
           "scratch_fs": "$(stat -f -c %T "$scratch" 2>/dev/null || echo unknown)",
           "loadavg_start": "$load_start", "git": "$git_rev",
           "loadavg_end": "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)",
           "notes": notes}, open(sys.argv[1], "w"), indent=1)
PYEOF
}
aggregate() {
    "$PY" bench/suite/aggregate.py --runs "$runs" --describe "$work/describe.json" \
        --meta "$work/meta.json" --out "$out" "$@"
}
mkdir -p "$out"
write_meta
aggregate
missed=$("$PY" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["perf_phases"]))' \
    "$out/results.json")

# profile PHASE: perf record -g on bench_reference (production, chacha20) for PHASE only.
profile() {
    local phase=$1 fifo="$work/perf.ctl"
    rm -f "$fifo" && mkfifo "$fifo"
    echo "suite: perf record -g for the $phase phase (production, chacha20, scale $scale)" >&2
    if perf record -g -D -1 --control "fifo:$fifo" -o "$work/perf-$phase.data" -- \
        "$bin" --config production --cipher chacha20 --scale "$scale" --dir "$scratch" \
        --perf-ctl "$fifo" --perf-phase "$phase" >"$work/perf/$phase.json" \
        2>"$work/perf-$phase.log" &&
        perf report -i "$work/perf-$phase.data" --no-children --sort dso,symbol --stdio \
            -g none --percent-limit 0 >"$work/perf/$phase.txt" 2>/dev/null; then
        return 0
    fi
    note "perf failed for $phase: $(tail -n 1 "$work/perf-$phase.log")"
}
mkdir -p "$work/perf"
if [ -n "$missed" ] && [ "$use_perf" -eq 1 ]; then
    if command -v perf >/dev/null 2>&1 && perf record -o "$work/probe.data" -- true \
        >/dev/null 2>&1; then
        for phase in $missed; do profile "$phase"; done
    else
        note "perf is not usable here: missed targets are not profiled"
    fi
fi
cp "$runs" "$out/runs.jsonl"
write_meta
aggregate --perf-dir "$work/perf" --charts --print
"$PY" bench/suite/validate.py --results "$out/results.json" >/dev/null
echo "results: $out/REPORT.md (results.json, results.csv, runs.jsonl, charts/)"
[ "$failures" -eq 0 ]
