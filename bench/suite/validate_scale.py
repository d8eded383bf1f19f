#!/usr/bin/python3
"""validate_scale.py -- checks a bench_scale result (scale.json) against bench/results/SCHEMA.md.

USAGE
  bench/suite/validate_scale.py [--zero-busy] SCALE.json

Checks (1) the fields and types SCHEMA.md lists for "mailvault-bench-scale/1", (2) that every
section that ran produced numbers: counts > 0, latencies > 0, p50 <= p99 <= max, file
handles and memory per held store > 0, one concurrency run per requested reader count with
writer appends and reads of every kind, (3) with --zero-busy, that no call saw MV_EBUSY.
A section skipped with --only is null and not checked. Prints one line per problem and
"validate_scale: N sections, N problems"; exit 0 only when there are none. Standard library
only.
"""
import json
import sys

SCHEMA_ID = "mailvault-bench-scale/1"
NUMBER = (int, float)
TOP = {"schema": str, "time_utc": str, "duration_s": NUMBER, "quick": bool, "machine": dict,
       "params": dict, "notes": list}
MACHINE = {"cpus": int, "cpu": str, "loadavg_start": NUMBER, "loadavg_end": NUMBER}
PARAMS = {"stores": int, "hold": int, "store_messages": int, "messages": int,
          "seconds": NUMBER, "readers": list, "kdf_iter": int, "kdf_default": bool,
          "small_cache_kib": int, "only": str, "seed": str, "sqlite": str, "mailvault": str}
LAT = {"count": int, "per_s": NUMBER, "p50_ms": NUMBER, "p99_ms": NUMBER, "max_ms": NUMBER}
STORES = {"count": int, "fast_kdf_stores": int, "init": dict, "open": dict, "close": dict,
          "open_kdf_iter1": dict, "open_close_per_s": NUMBER, "kdf_ms": NUMBER,
          "kdf_share": NUMBER, "init_wall_s": NUMBER, "fill_wall_s": NUMBER,
          "pass_wall_s": NUMBER, "held": list}
HELD = {"cache": str, "cache_size_kib_option": int, "cache_size_kib": int, "stores": int,
        "fds_before": int, "fds_held": int, "fds_per_store": NUMBER, "rss_before_kib": int,
        "rss_open_kib": int, "rss_touched_kib": int, "vmhwm_kib": int,
        "kib_per_open_store": NUMBER, "kib_per_touched_store": NUMBER, "open_ms_each": NUMBER,
        "touch_ms_each": NUMBER}
CONC = {"store_messages": int, "seconds": NUMBER, "fill_s": NUMBER, "store_file_bytes": int,
        "full_read": list, "runs": list}
RUN = {"readers": int, "wall_s": NUMBER, "busy_errors": int, "rss_before_kib": int,
       "rss_readers_open_kib": int, "peak_rss_kib": int, "reader_open_p50_ms": NUMBER,
       "writer_mb_per_s": NUMBER, "writer": dict, "readers_all": dict, "reader_ops": dict}
READER_OPS = ["mailbox_status", "search_newest50", "fetch", "message_get"]


def type_ok(value, want):
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if want is NUMBER:
        return isinstance(value, NUMBER) and not isinstance(value, bool)
    return isinstance(value, want)


def check_fields(obj, fields, where, problems):
    if not isinstance(obj, dict):
        problems.append(f"{where}: not an object")
        return False
    before = len(problems)
    for name, want in fields.items():
        if name not in obj:
            problems.append(f"{where}: missing {name}")
        elif not type_ok(obj[name], want):
            problems.append(f"{where}: {name} is {type(obj[name]).__name__}")
    return len(problems) == before


def check_lat(lat, where, problems, min_count=1):
    if not check_fields(lat, LAT, where, problems):
        return
    if lat["count"] < min_count:
        problems.append(f"{where}: count {lat['count']} < {min_count}")
    elif not 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"] or not lat["per_s"] > 0:
        problems.append(f"{where}: want 0 < p50 <= p99 <= max and per_s > 0, got {lat}")


def check_stores(s, params, problems):
    if not check_fields(s, STORES, "stores", problems):
        return
    if s["count"] != params["stores"]:
        problems.append(f"stores: count {s['count']}, want {params['stores']}")
    check_lat(s["init"], "stores.init", problems, params["stores"])
    check_lat(s["open"], "stores.open", problems, params["stores"])
    check_lat(s["close"], "stores.close", problems, params["stores"])
    check_lat(s["open_kdf_iter1"], "stores.open_kdf_iter1", problems, s["fast_kdf_stores"])
    if not s["open_close_per_s"] > 0:
        problems.append("stores: open_close_per_s not > 0")
    check_held(s["held"], params["hold"], params, "stores.held", problems)


def check_held(held, count, params, where, problems):
    """The two held-open measurements: default cache, then the small one."""
    caches = [h.get("cache") for h in held if isinstance(h, dict)]
    if caches != ["default", "small"]:
        problems.append(f"{where}: caches {caches}, want ['default', 'small']")
    for i, h in enumerate(held):
        w = f"{where}[{i}]"
        if not check_fields(h, HELD, w, problems):
            continue
        if h["stores"] != count:
            problems.append(f"{w}: {h['stores']} stores, want {count}")
        if not (h["fds_per_store"] > 0 and h["rss_open_kib"] > 0 and h["cache_size_kib"] > 0
                and h["rss_touched_kib"] > 0 and h["vmhwm_kib"] >= h["rss_touched_kib"]):
            problems.append(f"{w}: no file handles or memory measured")
    small = held[1] if len(held) == 2 and isinstance(held[1], dict) else {}
    if small.get("cache_size_kib") not in (None, params["small_cache_kib"]):
        problems.append(f"{where}[1]: cache {small.get('cache_size_kib')} KiB read back, "
                        f"want {params['small_cache_kib']}")


def check_conc(c, params, problems, zero_busy):
    if not check_fields(c, CONC, "concurrency", problems):
        return
    check_held(c["full_read"], 4, params, "concurrency.full_read", problems)
    if not c["store_file_bytes"] > 0:
        problems.append("concurrency: store_file_bytes not > 0")
    readers = [r.get("readers") for r in c["runs"] if isinstance(r, dict)]
    if readers != params["readers"]:
        problems.append(f"concurrency: runs for {readers} readers, want {params['readers']}")
    for r in c["runs"]:
        where = f"concurrency.readers_{r.get('readers') if isinstance(r, dict) else '?'}"
        if not check_fields(r, RUN, where, problems):
            continue
        check_lat(r["writer"], where + ".writer", problems)
        check_lat(r["readers_all"], where + ".readers_all", problems)
        for op in READER_OPS:
            if op not in r["reader_ops"]:
                problems.append(f"{where}: no reader op {op}")
            else:
                check_lat(r["reader_ops"][op], f"{where}.{op}", problems)
        if not r["peak_rss_kib"] > 0:
            problems.append(f"{where}: no peak RSS")
        if zero_busy and r["busy_errors"] != 0:
            problems.append(f"{where}: {r['busy_errors']} MV_EBUSY errors")


def validate(path, zero_busy):
    with open(path) as f:
        doc = json.load(f)
    problems = []
    if not check_fields(doc, TOP, path, problems):
        return 0, problems
    if doc["schema"] != SCHEMA_ID:
        problems.append(f"schema {doc['schema']!r}, want {SCHEMA_ID!r}")
    check_fields(doc["machine"], MACHINE, "machine", problems)
    if not check_fields(doc["params"], PARAMS, "params", problems):
        return 0, problems
    sections = 0
    for name, fn in (("stores", check_stores), ("concurrency", check_conc)):
        if name not in doc:
            problems.append(f"missing {name} (null when skipped)")
        elif doc[name] is None:
            if doc["params"]["only"] in ("", name):
                problems.append(f"{name} is null but was not skipped with --only")
        else:
            sections += 1
            if name == "stores":
                fn(doc[name], doc["params"], problems)
            else:
                fn(doc[name], doc["params"], problems, zero_busy)
    return sections, problems


def main(argv):
    zero_busy = "--zero-busy" in argv
    paths = [a for a in argv if a != "--zero-busy"]
    if len(paths) != 1:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    sections, problems = validate(paths[0], zero_busy)
    for p in problems:
        print(f"validate_scale: {p}")
    print(f"validate_scale: {sections} sections, {len(problems)} problems")
    return 0 if sections > 0 and not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
