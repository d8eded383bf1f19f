#!/usr/bin/env bash
# bigmail_compare.sh -- the big-mailbox benchmark (issue 13): one INBOX of 10,000 and of
# 100,000 messages (1,000,000 on request), the same bytes in mailvaultd and in a private
# Dovecot 2.3 (Maildir, fsync at its default, no FTS plugin), one IMAP client for both
# (bench/bigmail.py), every operation alternating the two servers; medians of pairs, ratio =
# Dovecot's time / mailvaultd's, peak RSS of mailvaultd and of Dovecot's imap process.
#
# USAGE
#   bench/bigmail_compare.sh [--messages "10000 100000"] [--rounds R] [--sample-rounds S]
#                            [--quick]
#                            [--no-dovecot] [--out DIR] [--attach-percent P]
#     (after `make all`; bench/run.sh runs it last: in full in `make bench`, with --quick in
#     `make bench QUICK=1`)
#   Default: 10,000 and 100,000 messages, 3 pairs per operation; BIGMAIL_1M=1 adds
#     1,000,000 (about 32 GiB of corpus, ~60 GB of mailvault store). Time here (2 cores, no
#     other load, 2026-12-02): 10k ~4 min (import 65 s); 100k ~17 min, of it `mailvault
#     import` ~8 min (7.3 MB/s) and Dovecot reading 3.2 GiB per SEARCH TEXT/BODY. Writes
#     bench/results/bigmail.json and bench/results/sections/bigmail.md (the sizes measured
#     now replace the same sizes there; other sizes are kept, each with its date), copies
#     both to build/bench-results/bigmail.{json,md}.
#   --quick: 1,000 messages, 1 pair, 200 LMTP deliveries; build/bench-results only.
#   --no-dovecot: mailvaultd alone (tests/cli_bench_bigmail_smoke.sh).
#   --lmtp N: deliveries before the timed first login (default 1200).
#   --attach-percent P: messages with an attachment, in percent (default 5, the issue's
#     corpus). 1,000,000 messages at 5% need ~32 GiB of corpus plus ~42 GiB of store; at 0.5%
#     about 8 GiB plus 10 (the corpus is then kept in DIR/N-aP and the report says so).
#
# STEPS (per size)
#   1. Dovecot (bench/dovecot_lib.sh, as bench/imap_compare.sh): installed with apt-get if
#      missing; if impossible, mailvaultd is measured alone and the report says so.
#   2. The corpus (bench/bigmail_corpus.py, seed 13): generated once into
#      build/bigmail-corpus/N/ (reused by later runs: its bytes depend only on N and the
#      seed), then copied into Dovecot's Maildir, all of it Dovecot's mail user's
#      (dovecot_maildir_copy: as hard links, owned by root, Dovecot's COPY could not link
#      them and copied their bytes; the corpus stays pristine and keeps its owner).
#   3. mailvaultd's store: `mailvault init` with the default KDF (no MAILVAULT_KDF_ITER:
#      the real cost; BIGMAIL_KDF_ITER=N is for the smoke test only), then `mailvault
#      import` of the same Maildir (flags from the names, internal date = mtime, as
#      Dovecot). Untimed, but its seconds are printed and kept in the JSON. Then `sync`
#      (untimed, printed), so the copies' writeback does not run under the measurements.
#   4. bench/bigmail.py run: starts both servers (mailvaultd = build/mailvaultd, the release
#      build, IMAP and LMTP on free ports; Dovecot from its private configuration with LMTP),
#      runs the operations (the list and the method are in bench/bigmail.py and
#      docs/BENCHMARKS.md), stops both.
#   5. bench/bigmail.py report: the JSON and the Markdown table.
#
# Everything runs under `nice -n 10` (the machine is shared). Scratch: mktemp under
# $TMPDIR, else /tmp (Dovecot's Maildir is a copy of the corpus there: 3.2 GiB at 100,000),
# removed at exit unless KEEP_TMP=1.
# BIGMAIL_RESUME=JSON: the operations an interrupted run of one size measured on both servers
# (its result.json, kept with KEEP_TMP=1) are taken over, not run again; BIGMAIL_SKIP=OP,... are
# not run (at 1,000,000 messages one Dovecot SEARCH TEXT or BODY reads all 11 GB: ~11 min a
# pass here). KEEP_TMP=1 keeps logs and results; the stores go after each size (disk).
# BIGMAIL_STORE_CACHE=DIR keeps each size's store as imported (with its password and the
# import's seconds) in DIR/N (DIR/N-aP with --attach-percent) and later runs start from a copy
# of it instead of importing again (1,000,000 messages take hours to import on a shared
# 2-core machine); the store must be of a schema the build opens (a newer build migrates it,
# which its first login then pays: delete DIR/N after a schema change).
# BIGMAIL_MAILDIR_LINK=1 gives Dovecot hard links to the corpus' files instead of a copy
# (bench/dovecot_lib.sh dovecot_maildir_link: for a disk that cannot hold the corpus twice;
# the corpus' files then belong to nobody, and $TMPDIR must be on the corpus' file system).
# MAILVAULTD=path and MAILVAULT=path measure another build. BIGMAIL_CORPUS=DIR keeps the
# corpora in DIR instead of build/bigmail-corpus; BIGMAIL_LOGS=DIR gets a copy of each
# mailvaultd log (mailvaultd-N.log); both for tests/cli_bench_bigmail_smoke.sh.
# BIGMAIL_PERF=OP profiles mailvaultd during operation OP (bigmail.py's --perf-op) into
# OUT/perf-OP-N.data: `perf report -i FILE --no-children --stdio`. Profiled times are slower.
# The time until all LMTP deliveries are visible is a client's waiting in IDLE;
# BIGMAIL_VISIBLE_WAIT=noop|alternate (bigmail.py's --visible-wait) polls NOOP instead, or in
# every other pair; BIGMAIL_LMTP_PAIRS=N runs N pairs of the LMTP operations (default 1).
# BIGMAIL_WARM_SHARE_MAX=F (bigmail.py, default 0.5): fetch_random50 reads both servers' files
# first only while they take at most F of MemAvailable, else each draw just before it is timed.
# Exit status: 0 if every operation ran with the expected results on both servers; 1
# otherwise (what was measured is still written).
set -euo pipefail
cd "$(dirname "$0")/.."

sizes="10000 100000" rounds=3 sample_rounds=9 quick=0 use_dovecot=1 out="" lmtp=1200 attach=5
while [ $# -gt 0 ]; do
    case $1 in
    --messages) sizes=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --sample-rounds) sample_rounds=$2; shift ;;
    --quick) quick=1 sizes=1000 rounds=1 sample_rounds=1 lmtp=200 ;;
    --no-dovecot) use_dovecot=0 ;;
    --out) out=$2; shift ;;
    --lmtp) lmtp=$2; shift ;;
    --attach-percent) attach=$2; shift ;;
    *) echo "usage: bench/bigmail_compare.sh [--messages \"10000 100000\"] [--rounds R]" \
        "[--sample-rounds S] [--quick] [--no-dovecot] [--out DIR] [--lmtp N]" \
        "[--attach-percent P]" >&2; exit 2 ;;
    esac
    shift
done
[ -z "${BIGMAIL_1M:-}" ] || sizes="$sizes 1000000"

server=${MAILVAULTD:-build/mailvaultd} mv=${MAILVAULT:-build/mailvault}
for f in "$server" "$mv"; do
    if [ ! -x "$f" ]; then
        echo "bigmail_compare: $f is missing (make all)" >&2
        exit 1
    fi
done
server=$(realpath "$server") mv=$(realpath "$mv")
mkdir -p build/bench-results
if [ -z "$out" ]; then
    out=bench/results
    [ "$quick" -eq 0 ] || out=build/bench-results
fi
mkdir -p "$out/sections"
nice=(nice -n 10)

. bench/dovecot_lib.sh # dovecot_install, dovecot_config, dovecot_maildir_copy, free_port, ...
have_dovecot=0 dovecot_note=""
[ "$use_dovecot" -eq 0 ] || dovecot_install bigmail_compare

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bigmail.XXXXXX")
chmod 755 "$tmp" # Dovecot's mail processes (nobody) must reach their Maildir under it
cleanup() {
    [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
(umask 077 && openssl rand -hex 16 >"$tmp/password")
user=u1@bench.example
status=0
runs=()
[ "$(id -u)" -ne 0 ] || export MAILVAULTD_ALLOW_ROOT=yes # a benchmark box: serve as root

for n in $sizes; do
    corpus=${BIGMAIL_CORPUS:-build/bigmail-corpus}/$n
    [ "$attach" = 5 ] || corpus=$corpus-a$attach
    if [ ! -f "$corpus/meta.json" ]; then
        echo "== corpus: $n messages into $corpus"
        rm -rf "$corpus"
        mkdir -p "$corpus"
        "${nice[@]}" python3 bench/bigmail_corpus.py --messages "$n" --out "$corpus/Maildir" \
            --meta "$corpus/meta.json.tmp" --attach-percent "$attach"
        mv "$corpus/meta.json.tmp" "$corpus/meta.json"
    fi
    run=$tmp/run-$n
    mkdir -p "$run"
    chmod 755 "$run"

    unset MAILVAULT_KDF_ITER MAILVAULT_PASSWORD
    [ -z "${BIGMAIL_KDF_ITER:-}" ] || export MAILVAULT_KDF_ITER=$BIGMAIL_KDF_ITER
    export MAILVAULT_ROOT=$run/mailvault
    pw=$run/password
    cache=""
    [ -z "${BIGMAIL_STORE_CACHE:-}" ] || cache=$BIGMAIL_STORE_CACHE/$(basename "$corpus")
    if [ -n "$cache" ] && [ -f "$cache/import_seconds" ]; then
        echo "== mailvaultd: the store imported before, from $cache"
        (umask 077 && cp "$cache/password" "$pw")
        cp -a "$cache/mailvault" "$run/mailvault"
        mv_pop=$(cat "$cache/import_seconds")
        echo "   import (earlier run): $mv_pop s"
    else
        echo "== mailvaultd: init and import $n messages"
        (umask 077 && cp "$tmp/password" "$pw")
        "$mv" init "$user" --password-file "$pw" >/dev/null
        t0=$(date +%s.%N)
        "${nice[@]}" "$mv" import "$user" "$corpus/Maildir" --password-file "$pw"
        mv_pop=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        echo "   import: $mv_pop s"
        if [ -n "$cache" ]; then
            rm -rf "$cache.tmp"
            mkdir -p "$cache.tmp"
            chmod 700 "$cache.tmp"
            cp -a "$run/mailvault" "$cache.tmp/mailvault"
            cp "$pw" "$cache.tmp/password"
            echo "$mv_pop" >"$cache.tmp/import_seconds"
            rm -rf "$cache"
            mv "$cache.tmp" "$cache"
            echo "   store kept in $cache for later runs"
        fi
    fi

    dc_args=()
    if [ "$have_dovecot" -eq 1 ]; then
        dc=$run/dovecot
        dc_imap=$(free_port) dc_lmtp=$(free_port)
        dovecot_config "$dc" "$dc_imap" "$dc_lmtp" "$pw" "$user"
        t0=$(date +%s.%N)
        how=copied
        if [ -n "${BIGMAIL_MAILDIR_LINK:-}" ]; then
            how=hard-linked
            dovecot_maildir_link "$corpus/Maildir" "$dc/mail/$user"
        else
            dovecot_maildir_copy "$corpus/Maildir" "$dc/mail/$user"
        fi
        echo "   Dovecot Maildir $how: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s (indexed at the first SELECT, untimed)"
        dc_args=(--dovecot-conf "$dc/dovecot.conf" --dc-mail "$dc/mail" --dc-imap-port "$dc_imap"
            --dc-lmtp-port "$dc_lmtp")
    fi

    # The copies above leave GBs of dirty pages (4.4 GB of store and 3.2 GB of Maildir at
    # 100,000); without this their writeback ran under the first operations of both servers.
    t0=$(date +%s.%N)
    sync
    echo "   sync after the copies: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

    mv_imap=$(free_port) mv_lmtp=$(free_port)
    echo "== bigmail.py: $n messages, $rounds pair(s) per operation"
    if ! "${nice[@]}" python3 bench/bigmail.py run --messages "$n" --rounds "$rounds" \
        --sample-rounds "$sample_rounds" \
        --user "$user" --password-file "$pw" --meta "$corpus/meta.json" \
        --lmtp-messages "$lmtp" --mailvaultd "$server" --mv-root "$MAILVAULT_ROOT" \
        --mv-imap-port "$mv_imap" --mv-lmtp-port "$mv_lmtp" --mv-log "$run/mailvaultd.log" \
        ${BIGMAIL_KDF_ITER:+--mv-arg=--kdf-iter=$BIGMAIL_KDF_ITER} \
        ${BIGMAIL_PERF:+--perf-op "$BIGMAIL_PERF" --perf-dir "$out"} \
        ${BIGMAIL_VISIBLE_WAIT:+--visible-wait "$BIGMAIL_VISIBLE_WAIT"} \
        ${BIGMAIL_LMTP_PAIRS:+--lmtp-pairs "$BIGMAIL_LMTP_PAIRS"} \
        ${BIGMAIL_RESUME:+--resume "$BIGMAIL_RESUME"} ${BIGMAIL_SKIP:+--skip "$BIGMAIL_SKIP"} \
        "${dc_args[@]}" --json "$run/result.json"; then
        status=1
        echo "bigmail_compare: $n messages: errors (logs in $run; KEEP_TMP=1 keeps them)" >&2
    fi
    python3 - "$run/result.json" "$mv_pop" "$dovecot_note" <<'EOF'
import json, sys
path, pop, note = sys.argv[1:4]
d = json.load(open(path))
d["populate_seconds"] = {"mailvaultd_import": float(pop)}
d["notes"] = [note] if note else []
json.dump(d, open(path, "w"), indent=2)
EOF
    runs+=("$run/result.json")
    [ -z "${BIGMAIL_LOGS:-}" ] || cp "$run/mailvaultd.log" "$BIGMAIL_LOGS/mailvaultd-$n.log"
    rm -rf "$run/mailvault" "$run/dovecot/mail" # the next size needs the disk
done

merge=(--merge)
[ "$out" != build/bench-results ] || merge=()
python3 bench/bigmail.py report --json "$out/bigmail.json" --md "$out/sections/bigmail.md" \
    "${merge[@]}" "${runs[@]}"
if [ "$out" != build/bench-results ]; then
    cp "$out/bigmail.json" build/bench-results/bigmail.json
    cp "$out/sections/bigmail.md" build/bench-results/bigmail.md
fi
echo "results: $out/bigmail.json $out/sections/bigmail.md"
exit "$status"
