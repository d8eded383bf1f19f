#!/usr/bin/env bash
# run.sh -- the micro-benchmarks `make bench` runs, a summary of ratios against targets, and
# the figures as JSON.
#
# USAGE
#   bench/run.sh [--quick]        (after `make all build/rel/bench/...`; `make bench` does both)
#
# STEPS
#   1. `openssl speed -evp chacha20-poly1305 -bytes 4096`: the system's AEAD throughput. An
#      openssl without -bytes falls back to its default sizes; we then take the 8192-byte
#      column (else 16384) and say so.
#   2. build/rel/bench/bench_crypto: page-cipher throughput (crypto.* lines).
#   3. build/rel/bench/bench_vfs: autocommit INSERT/UPDATE rates per cipher (vfs.* lines).
#   4. The summary: each target with its measured ratio, MET or NOT MET.
#   5. build/bench-results/vfs-micro.json: every figure, the targets, the machine.
#
# The page-crypto target compares like with like: crypto.chacha20.encrypt_mbps (encryption
# alone, as openssl speed measures) against openssl speed. The write-cost targets compare
# chacha20 with the same build's plaintext file through the shim (vfs.*.cost_ratio_vs_plain).
# Exit status: 0 when every step ran, whether or not targets were met; 1 if a step failed.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
for arg in "$@"; do
    case $arg in
    --quick) quick=1 ;;
    *) echo "usage: bench/run.sh [--quick]" >&2; exit 2 ;;
    esac
done
speed_seconds=2 crypto_seconds=1.5 vfs_args=()
if [ "$quick" -eq 1 ]; then
    speed_seconds=1 crypto_seconds=0.3 vfs_args=(--quick)
fi

out_dir=build/bench-results
mkdir -p "$out_dir"
raw="$out_dir/vfs-micro.txt"
json="$out_dir/vfs-micro.json"
: >"$raw"

# ---- 1. openssl speed -------------------------------------------------------------------
# Prints "MBPS SIZE NOTE": MB/s (10^6 bytes) for the column used.
openssl_speed() {
    local text size note=""
    if text=$(openssl speed -evp chacha20-poly1305 -bytes 4096 -seconds "$speed_seconds" \
        2>/dev/null) && grep -q '^ChaCha20-Poly1305' <<<"$text"; then
        size=4096
    else
        text=$(openssl speed -evp chacha20-poly1305 -seconds "$speed_seconds" 2>/dev/null)
        size=8192
        grep -q "8192 bytes" <<<"$text" || size=16384
        note="openssl speed has no -bytes: used its ${size}-byte column"
    fi
    # The header names the sizes ("type  16 bytes  64 bytes ..."); the data row holds "NNNk".
    awk -v size="$size" -v note="$note" '
        /^type/ { col = 0; for (i = 2; i <= NF; i++) if ($i == size) col = ++n; else if ($i != "bytes") ++n }
        /^ChaCha20-Poly1305/ && col > 0 { v = $(col + 1); sub(/k$/, "", v);
                                          printf "%.1f %d %s\n", v / 1000, size, note; exit }
    ' <<<"$text"
}

echo "== openssl speed -evp chacha20-poly1305 (${speed_seconds} s)"
read -r openssl_mbps openssl_size openssl_note < <(openssl_speed) || true
if [ -z "${openssl_mbps:-}" ]; then
    echo "run.sh: could not parse openssl speed output" >&2
    exit 1
fi
if [ -n "${openssl_note:-}" ]; then echo "note: $openssl_note"; fi
echo "openssl.speed.chacha20_poly1305_mbps $openssl_mbps (${openssl_size}-byte blocks)" |
    tee -a "$raw"

# ---- 2, 3. the benchmark programs ---------------------------------------------------------
echo "== bench_crypto"
build/rel/bench/bench_crypto "$crypto_seconds" | tee -a "$raw"
echo "== bench_vfs ${vfs_args[*]:-}"
build/rel/bench/bench_vfs "${vfs_args[@]}" | tee -a "$raw"

# ---- 4. summary -------------------------------------------------------------------------
value() { # the first number after name NAME in the raw results
    awk -v k="$1" '$1 == k { print $2; exit }' "$raw"
}
# verdict NAME MEASURED OP TARGET: one table row; OP is >= or <=.
verdict() {
    awk -v name="$1" -v m="$2" -v op="$3" -v t="$4" 'BEGIN {
        ok = (op == ">=") ? (m + 0 >= t + 0) : (m + 0 <= t + 0)
        printf "%-46s %8.2fx  %s %.1fx  %s\n", name, m, op, t, ok ? "MET" : "NOT MET" }'
}
crypto_enc=$(value crypto.chacha20.encrypt_mbps)
page_ratio=$(awk -v a="$crypto_enc" -v b="$openssl_mbps" 'BEGIN { printf "%.2f", a / b }')
insert_ratio=$(value vfs.insert.chacha20.cost_ratio_vs_plain)
update_ratio=$(value vfs.update.chacha20.cost_ratio_vs_plain)

echo
echo "== summary"
printf '%-46s %9s  %-7s %s\n' "item" "measured" "target" "status"
verdict "chacha20 page encrypt / openssl speed" "$page_ratio" ">=" 0.5
verdict "chacha20 insert cost / unencrypted (same VFS)" "$insert_ratio" "<=" 1.3
verdict "chacha20 update cost / unencrypted (same VFS)" "$update_ratio" "<=" 1.3
echo "for information:"
pair() { # "insert Ax, update Bx" for the cost ratio NAME (of config) against BASE
    echo "insert $(value "vfs.insert.$1.cost_ratio_vs_$2")x, update $(value "vfs.update.$1.cost_ratio_vs_$2")x"
}
printf '  %-44s %s\n' \
    "shim cost, plaintext file vs unix VFS" "$(pair plain unix)" \
    "aes256cbc cost vs unencrypted" "$(pair aes256cbc plain)" \
    "sqlcipher cost vs unencrypted" "$(pair sqlcipher plain)" \
    "chacha20 page enc+dec / in-process AEAD" "$(value crypto.chacha20.ratio_vs_aead)x" \
    "mv_db_open of an existing chacha20 file" "$(value vfs.open.chacha20_ms) ms"

# ---- 5. JSON ----------------------------------------------------------------------------
python3 - "$raw" "$json" "$quick" "$openssl_size" "${openssl_note:-}" <<'EOF'
import json, os, platform, re, sys, time
raw, out, quick, size, note = sys.argv[1:6]
figures, params = {}, {}
line_re = re.compile(r"^(\S+) (-?[0-9.]+)(?: .*?\(min (-?[0-9.]+) max (-?[0-9.]+)\))?")
for line in open(raw):
    if line.startswith("vfs.params "):
        params = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
        continue
    m = line_re.match(line)
    if not m:
        continue
    entry = {"value": float(m.group(2))}
    if m.group(3) is not None:
        entry["min"], entry["max"] = float(m.group(3)), float(m.group(4))
    figures[m.group(1)] = entry
def ratio(name):
    return figures[name]["value"]
page = figures["crypto.chacha20.encrypt_mbps"]["value"] / ratio("openssl.speed.chacha20_poly1305_mbps")
targets = [
    {"name": "chacha20 page encrypt / openssl speed", "measured": round(page, 2), "op": ">=", "target": 0.5},
    {"name": "chacha20 insert cost / unencrypted", "measured": ratio("vfs.insert.chacha20.cost_ratio_vs_plain"), "op": "<=", "target": 1.3},
    {"name": "chacha20 update cost / unencrypted", "measured": ratio("vfs.update.chacha20.cost_ratio_vs_plain"), "op": "<=", "target": 1.3},
]
for t in targets:
    t["met"] = t["measured"] >= t["target"] if t["op"] == ">=" else t["measured"] <= t["target"]
cpu = ""
try:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
except OSError:
    pass
doc = {
    "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "quick": quick == "1",
    "machine": {"cpu": cpu, "cpus": os.cpu_count(), "system": platform.platform()},
    "openssl_speed_block_bytes": int(size),
    "openssl_speed_note": note,
    "vfs_params": params,
    "figures": figures,
    "targets": targets,
}
with open(out, "w") as f:
    json.dump(doc, f, indent=2, sort_keys=False)
    f.write("\n")
EOF
echo
echo "results: $json"
