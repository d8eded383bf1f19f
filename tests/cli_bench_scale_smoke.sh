#!/usr/bin/env bash
# cli_bench_scale_smoke.sh -- smoke test of build/rel/bench/bench_scale at a tiny scale (the
# benchmark itself never runs in CI): 6 stores (3 held open), 30 messages, reader counts 1
# and 2 for 0.3 s each, and a low KDF iteration count (--kdf-iter 1000, a smoke-test-only
# setting that the JSON records). Checks that every section produced numbers, that no call
# saw MV_EBUSY, that scale.json matches bench/results/SCHEMA.md
# (bench/suite/validate_scale.py), and that the report section can be made from it
# (bench/suite/scale_report.py, without charts).
#
# USAGE
#   make build/rel/bench/bench_scale && bash tests/cli_bench_scale_smoke.sh
#   (tests/run.sh runs it as part of `make test`; a few seconds.)
#
# Each check prints "PASS name" or "FAIL name"; the last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh # pass, fail, PY, finish

bin="$PWD/build/rel/bench/bench_scale"
make_tmp cli_bench_scale
json="$tmp/scale.json"

check_doc() { # check_doc NAME PYTHON-EXPRESSION over the document d
    if [ "$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(bool(eval(sys.argv[2])))' \
        "$json" "$2" 2>"$tmp/err")" = True ]; then
        pass "$1"
    else
        fail "$1 ($2) $(tail -n 1 "$tmp/err")"
    fi
}

if [ ! -x "$bin" ]; then
    fail "bench_scale is built (make build/rel/bench/bench_scale)"
    finish
fi
if "$bin" --stores 6 --hold 3 --store-messages 2 --messages 30 --seconds 0.3 --readers 1,2 \
    --kdf-iter 1000 --dir "$tmp" --json "$json" >"$tmp/out" 2>"$tmp/err"; then
    pass "bench_scale runs ($(tail -n 1 "$tmp/out" | cut -c1-60))"
else
    fail "bench_scale runs: $(tail -n 1 "$tmp/err")"
    finish
fi
grep -q '^== bench_scale summary' "$tmp/out" && pass "prints a table" || fail "prints a table"

check_doc "stores: init, open, close timed for every store" \
    'all(d["stores"][k]["count"] >= 6 and d["stores"][k]["p50_ms"] > 0 for k in ("init", "open", "close"))'
check_doc "stores: KDF share measured" \
    'd["stores"]["open_kdf_iter1"]["count"] > 0 and d["stores"]["kdf_share"] == d["stores"]["kdf_share"]'
check_doc "stores: file handles and memory per held store, both caches" \
    'len(d["stores"]["held"]) == 2 and all(h["fds_per_store"] > 0 and h["rss_touched_kib"] > 0 for h in d["stores"]["held"])'
check_doc "stores: the small cache took (512 KiB read back)" \
    'd["stores"]["held"][1]["cache_size_kib"] == 512'
check_doc "concurrency: memory per handle after a full read, both caches" \
    'len(d["concurrency"]["full_read"]) == 2 and all(h["rss_touched_kib"] > h["rss_before_kib"] for h in d["concurrency"]["full_read"])'
check_doc "concurrency: a run per reader count, with writes and every kind of read" \
    '[r["readers"] for r in d["concurrency"]["runs"]] == [1, 2] and all(r["writer"]["count"] > 0 and min(o["count"] for o in r["reader_ops"].values()) > 0 for r in d["concurrency"]["runs"])'
check_doc "concurrency: zero MV_EBUSY" \
    'sum(r["busy_errors"] for r in d["concurrency"]["runs"]) == 0'
check_doc "concurrency: peak RSS measured" \
    'all(r["peak_rss_kib"] > 0 for r in d["concurrency"]["runs"])'
check_doc "the JSON says the KDF was not the default" \
    'd["params"]["kdf_iter"] == 1000 and d["params"]["kdf_default"] is False'

if "$PY" bench/suite/validate_scale.py --zero-busy "$json" >"$tmp/validate" 2>&1; then
    pass "schema: $(tail -n 1 "$tmp/validate")"
else
    sed 's/^/    /' "$tmp/validate" | head -n 10
    fail "schema (bench/suite/validate_scale.py)"
fi
if "$PY" bench/suite/scale_report.py --scale "$json" --out "$tmp/report" \
    --report "$tmp/report/REPORT.md" >"$tmp/report.log" 2>&1 &&
    grep -q '^## Mail-level and scale workloads' "$tmp/report/REPORT.md" &&
    [ -s "$tmp/report/scale.csv" ] && [ -s "$tmp/report/sections/scale.md" ]; then
    pass "report section, CSV (bench/suite/scale_report.py)"
else
    fail "report section: $(tail -n 1 "$tmp/report.log")"
fi

finish
