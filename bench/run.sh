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
#   3b. build/rel/bench/bench_store: the mail store on a generated corpus (store.* lines):
#      delivery, sealed delivery + drain, fetch, flags, search, open/KDF, import peak memory.
#      It writes build/bench-results/store.json itself. Default run: ~10 minutes on 2 cores
#      and 3 GB of scratch disk (a 1 GB mbox); --quick: 700 messages, 2000 searched, imports
#      of 24 and 48 MB with an 8 MiB page cache, ~13 s (docs/BENCHMARKS.md).
#   3c. build/rel/bench/bench_scale: 1,000 user stores opened and closed (KDF share, file
#      handles and memory per open store), one writer + 1/4/16 readers on one store
#      (~3 min; here --quick --stores 20 --seconds 1: 20 stores, 1 s runs, ~10 s). It
#      writes scale.json itself: bench/results/scale.json, or
#      with --quick build/bench-results/reference-suite-quick/scale.json (beside the quick
#      suite's report, so a quick run never overwrites a committed full run).
#   3d. build/rel/bench/bench_ops: the operator's commands on a 1 GB store (backup with and
#      without the key, verify, restore, VACUUM, password change: MB/s and peak memory) and
#      the keyless `stats --all` scan of 1,000 stores (~3 min and ~4 GB of scratch disk;
#      here --quick --mb 32 --stores 100: a 32 MB store and 100 stores, ~5 s). It writes
#      ops.json beside scale.json.
#   4. The summary: each target with its measured ratio, MET or NOT MET; the store figures
#      for information, and the store's one target: import peak RSS bounded.
#   5. build/bench-results/vfs-micro.json: every figure, the targets, the machine.
#   6. The "Mail-level and scale workloads" report section (bench/suite/scale_report.py):
#      sections/scale.md, scale.csv and charts/scale_*.svg beside scale.json, put into that
#      directory's REPORT.md if it exists (bench/suite/aggregate.py keeps it there when the
#      suite rewrites REPORT.md); scale.json is checked against SCHEMA.md first.
#   7. bench/imap_compare.sh: mailvaultd against Debian's Dovecot (installed with apt-get if
#      missing; mailvaultd alone, said so, if that is impossible), the same IMAP command mix
#      from build/rel/bench/bench_imap, 10 and 100 clients, 2 rounds of 30 s (~7 min); it
#      writes bench/results/imap.json and sections/imap.md. Here --quick --seconds 2: 10
#      clients, one 2 s round each, build/bench-results/imap.{json,md} (~8 s).
#   8. bench/bigmail_compare.sh: big mailboxes (issue 13), mailvaultd against Dovecot on one
#      INBOX of 10,000 and 100,000 generated messages (BIGMAIL_1M=1 adds 1,000,000): the
#      corpus is generated once into build/bigmail-corpus/, populating both takes most of
#      the time (10k: ~10 min here; 100k: estimated ~1.5 h more, and ~9 GB of disk: the
#      3.5 GB corpus, Dovecot's hard links to it, ~5 GB of mailvault store); it writes
#      bench/results/bigmail.json and sections/bigmail.md. Here --quick: 1,000 messages, one
#      pair per operation, build/bench-results/bigmail.{json,md} (~1 min).
#   9. bench/proxy_compare.sh: the same mix directly against a mailvaultd node and through a
#      Dovecot proxy made from contrib/dovecot-proxy/ (plaintext and STARTTLS routes),
#      alternating, 10 and 100 clients, 2 rounds of 20 s, and the time a move keeps a user
#      unavailable for 10 and 100 MB stores (~8 min); bench/results/proxy.json and
#      sections/proxy.md. Here --quick --seconds 2: 10 clients, a 10 MB move (~30 s).
#  10. bench/structure_restart.sh: FETCH BODYSTRUCTURE of 3,000 messages of the 10,000 corpus
#      before and after mailvaultd and Dovecot start again (the answers mailvaultd keeps in
#      the store), printed (~2 min). Here --quick: 1,000 messages (~20 s).
#  11. bench/commands_compare.sh: UID SEARCH with 1 to 2,700 keys at once (Message-IDs,
#      senders, subject words, UIDs) and FETCH of pieces of messages (previews, MIME headers)
#      over the 10,000 corpus, mailvaultd beside Dovecot, printed (~3 min). Here --quick:
#      1,000 messages (~30 s).
#
# The page-crypto target compares like with like: crypto.chacha20.encrypt_mbps (encryption
# alone, per second of CPU time, as openssl speed measures) against openssl speed (target
# 0.9, issue 13). bench_crypto also measures the same ratio in-process, alternating the two
# loops (crypto.chacha20.ratio_vs_openssl_speed), which a busy machine disturbs less. The write-cost targets compare
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
speed_seconds=2 crypto_seconds=1.5 vfs_args=() store_args=() scale_args=() ops_args=()
imap_args=() bigmail_args=() proxy_args=() structure_args=() search_args=() scale_out=bench/results
if [ "$quick" -eq 1 ]; then
    # `make bench QUICK=1` runs this and then the quick reference suite (60-70 s) in under
    # 2 minutes, so this script has about 45 s: the programs' own --quick sizes, and shorter
    # timed runs and smaller inputs for the three that run for a fixed time or per store
    # (measured at load 1-2: bench_scale 12.6 -> 9.9 s, bench_ops 10.6 -> 5.3 s,
    # imap_compare 13.9 -> ~8 s). Every rate is still over hundreds of calls at least, and
    # bench_ops' 32 MB store still takes each command 0.1-0.5 s.
    speed_seconds=1 crypto_seconds=0.3 vfs_args=(--quick) store_args=(--quick)
    scale_args=(--quick --stores 20 --seconds 1) ops_args=(--quick --mb 32 --stores 100)
    imap_args=(--quick --seconds 2) scale_out=build/bench-results/reference-suite-quick
    bigmail_args=(--quick)
    proxy_args=(--quick --seconds 2)
    structure_args=(--quick)
    search_args=(--quick)
fi

out_dir=build/bench-results
mkdir -p "$out_dir"
raw="$out_dir/vfs-micro.txt"
json="$out_dir/vfs-micro.json"
store_raw="$out_dir/store.txt"
store_json="$out_dir/store.json"
: >"$raw"
: >"$store_raw"

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
echo "== bench_store ${store_args[*]:-}"
build/rel/bench/bench_store "${store_args[@]}" --json "$store_json" | tee -a "$store_raw"
echo "== bench_scale ${scale_args[*]:-}"
mkdir -p "$scale_out"
build/rel/bench/bench_scale "${scale_args[@]}" --json "$scale_out/scale.json" |
    tee "$out_dir/scale.txt"
echo "== bench_ops ${ops_args[*]:-}"
build/rel/bench/bench_ops "${ops_args[@]}" --json "$scale_out/ops.json" | tee "$out_dir/ops.txt"

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

# The store figures. svalue NAME: the value ("n/a" if absent); slat NAME: "p50 X ms, p99 Y ms".
svalue() {
    awk -v k="$1" '$1 == k { print $2; found = 1; exit } END { if (!found) print "n/a" }' \
        "$store_raw"
}
slat() {
    awk -v k="$1" '$1 == k && match($0, /\(p50 [^)]*\)/) {
        s = substr($0, RSTART + 1, RLENGTH - 2); sub(/ ms p99/, " ms, p99", s); print s; exit }' \
        "$store_raw"
}
# The store's one target: the import's peak RSS does not grow with the input (large - small
# within 16 MiB; bench_store prints store.import.bounded 1 or 0).
growth=$(svalue store.import.peak_growth_mib)
if [ "$growth" = "n/a" ]; then
    bounded="not measured"
elif [ "$(svalue store.import.bounded)" = "1" ]; then
    bounded="MET"
else
    bounded="NOT MET"
fi

echo
echo "== summary"
printf '%-46s %9s  %-7s %s\n' "item" "measured" "target" "status"
verdict "chacha20 page encrypt / openssl speed" "$page_ratio" ">=" 0.9
verdict "chacha20 insert cost / unencrypted (same VFS)" "$insert_ratio" "<=" 1.3
verdict "chacha20 update cost / unencrypted (same VFS)" "$update_ratio" "<=" 1.3
printf '%-46s %5s MiB  <= 16 MiB  peak RSS bounded: %s\n' \
    "import peak RSS, large - small mbox" "$growth" "$bounded"
echo "for information:"
pair() { # "insert Ax, update Bx" for the cost ratio NAME (of config) against BASE
    echo "insert $(value "vfs.insert.$1.cost_ratio_vs_$2")x, update $(value "vfs.update.$1.cost_ratio_vs_$2")x"
}
printf '  %-44s %s\n' \
    "shim cost, plaintext file vs unix VFS" "$(pair plain unix)" \
    "aes256cbc cost vs unencrypted" "$(pair aes256cbc plain)" \
    "sqlcipher cost vs unencrypted" "$(pair sqlcipher plain)" \
    "chacha20 page enc+dec / in-process AEAD" "$(value crypto.chacha20.ratio_vs_aead)x" \
    "chacha20 page encrypt / in-process openssl speed" \
    "$(value crypto.chacha20.ratio_vs_openssl_speed)x (alternating slices)" \
    "chacha20 page encrypt / AEAD seal per page" "$(value crypto.chacha20.ratio_vs_openssl_seal)x" \
    "chacha20 page encrypt / speed.c's -aead loop" \
    "$(value crypto.chacha20.ratio_vs_openssl_speed_aead)x (in-process, alternating)" \
    "page-format floor on OpenSSL / openssl speed" \
    "$(value crypto.openssl.ratio_floor_vs_openssl_speed)x (page encrypt: $(value crypto.chacha20.ratio_vs_floor)x of it)" \
    "mv_db_open of an existing chacha20 file" "$(value vfs.open.chacha20_ms) ms"
ovalue() { awk -v k="ops.$1" '$1 == k { print $2; exit }' "$out_dir/ops.txt"; }
echo "operations, for information ($(ovalue build.file_mb) MB store; $scale_out/ops.json):"
printf '  %-44s %s\n' \
    "backup (VACUUM INTO, verify) / keyless copy" \
    "$(ovalue backup.mb_per_s) / $(ovalue backup_keyless.mb_per_s) MB/s" \
    "restore (verify, copy, verify, swap)" "$(ovalue restore.mb_per_s) MB/s" \
    "VACUUM" "$(ovalue vacuum.seconds) s, peak $(ovalue vacuum.peak_mib) MiB" \
    "password change" "$(ovalue passwd.seconds) s, peak $(ovalue passwd.peak_mib) MiB" \
    "stats --all (keyless) over $(ovalue stats_all.stores) stores" "$(ovalue stats_all.ms) ms"
echo "store, for information (no targets; corpus and counts in $store_json):"
printf '  %-44s %s\n' \
    "deliver, mv_message_append" \
    "$(svalue store.deliver.msgs_per_s) msgs/s, $(svalue store.deliver.mb_per_s) MB/s ($(slat store.deliver.msgs_per_s))" \
    "sealed delivery / drain at the next open" \
    "$(svalue store.sealed.msgs_per_s) / $(svalue store.drain.msgs_per_s) msgs/s" \
    "expunge, one UID / 100-UID range" \
    "$(svalue store.expunge.single.msgs_per_s) / $(svalue store.expunge.range.msgs_per_s) msgs/s ($(slat store.expunge.single.msgs_per_s) one UID)" \
    "peak RSS, deliver..expunge" "$(svalue store.peak_rss_mib) MiB" \
    "fetch, random UIDs" \
    "$(svalue store.fetch.msgs_per_s) msgs/s, $(svalue store.fetch.mb_per_s) MB/s ($(slat store.fetch.msgs_per_s))" \
    "flags, single UID / 100-UID range" \
    "$(svalue store.flags.single.ops_per_s) / $(svalue store.flags.range.ops_per_s) ops/s" \
    "search from (header substring)" "$(slat store.search.from.p50_ms)" \
    "search text, one word" "$(slat store.search.text_one_word.p50_ms)" \
    "search text, two words" "$(slat store.search.text_two_words.p50_ms)" \
    "search date range + unseen" "$(slat store.search.date_unseen.p50_ms)" \
    "store open" \
    "open $(svalue store.open.ms) ms, of which KDF $(svalue store.open.kdf_part_ms) ms" \
    "import peak RSS, small / large mbox" \
    "$(svalue store.import.small.peak_rss_mib) / $(svalue store.import.large.peak_rss_mib) MiB (design bound $(svalue store.import.design_bound_mib) MiB + start)"

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
    {"name": "chacha20 page encrypt / openssl speed", "measured": round(page, 2), "op": ">=", "target": 0.9},
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
# ---- 6. the scale section of the report ----------------------------------------------------
echo
python3 bench/suite/validate_scale.py "$scale_out/scale.json" # MV_EBUSY counts are reported
report_args=()
[ ! -f "$scale_out/REPORT.md" ] || report_args=(--report "$scale_out/REPORT.md")
python3 bench/suite/scale_report.py --scale "$scale_out/scale.json" --store "$store_json" \
    --out "$scale_out" "${report_args[@]}" --charts --print

# ---- 7. the IMAP server against Dovecot ------------------------------------------------------
echo
echo "== imap_compare ${imap_args[*]:-}"
bench/imap_compare.sh "${imap_args[@]}"

# ---- 8. big mailboxes against Dovecot ---------------------------------------------------------
echo
echo "== bigmail_compare ${bigmail_args[*]:-}"
bench/bigmail_compare.sh "${bigmail_args[@]}"

# ---- 9. mailvaultd behind Dovecot's proxy, and moves -------------------------------------------
echo
echo "== proxy_compare ${proxy_args[*]:-}"
bench/proxy_compare.sh "${proxy_args[@]}"

# ---- 10. BODYSTRUCTURE before and after a restart ----------------------------------------------
echo
echo "== structure_restart ${structure_args[*]:-}"
bench/structure_restart.sh "${structure_args[@]}"

# ---- 11. SEARCH with many keys at once, FETCH of pieces of messages ---------------------------
echo
echo "== commands_compare ${search_args[*]:-}"
bench/commands_compare.sh "${search_args[@]}"
echo
echo "results: $json $store_json $scale_out/scale.json $scale_out/sections/scale.md"
echo "         bench/results/bigmail.json (quick: build/bench-results/bigmail.json)"
echo "         bench/results/proxy.json (quick: build/bench-results/proxy.json)"
