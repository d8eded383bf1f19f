#!/usr/bin/python3
"""validate.py -- checks run records of the reference suite against bench/results/SCHEMA.md.

USAGE
  bench/suite/validate.py --describe DESCRIBE.json RUNS.jsonl [RUNS.jsonl ...]
  bench/suite/validate.py --results results.json

  --describe   the output of `build/rel/bench/bench_reference --describe`: the counts and
               the configurations (expected auto_vacuum, synchronous, temp_store)
  RUNS.jsonl   run records, one JSON object a line (bench_reference, reference_runner.js)
  --results    an aggregated results.json written by bench/suite/aggregate.py

Each record is checked for (1) the fields and types SCHEMA.md lists, (2) phase counts equal
to the scale times the per-scale counts, (3) a DELETE that deleted rows, (4) the read-back
auto_vacuum / journal_mode / synchronous / temp_store its configuration asks for, (5) sizes
that add up (total = main file + WAL) and row counts that add up.

Prints one line per problem and "validate: N records, N problems"; exit 0 only when there
are none. Debian's python3, standard library only.
"""
import json
import sys

SCHEMA_ID = "mailvault-bench-reference/1"
RESULTS_SCHEMA_ID = "mailvault-bench-suite/1"
PHASES = ["setup", "insert", "select", "update", "delete"]
IMPLS = ["mailvault", "sqlite", "reference"]
TOP_FIELDS = {
    "schema": str, "impl": str, "impl_version": str, "sqlite_version": str, "config": str,
    "cipher": str, "scale": int, "round": int, "warmup": bool, "phases": dict,
    "settings": dict, "size": dict, "rows_after": int,
}
SETTING_FIELDS = {
    "auto_vacuum": int, "journal_mode": str, "synchronous": int, "temp_store": int,
    "cache_size": int, "mmap_size": int, "secure_delete": int, "foreign_keys": int,
    "wal_autocheckpoint": int, "page_size": int, "busy_timeout": int, "kdf_iter": int,
    "reserve_bytes": int,
}
SIZE_FIELDS = {"db_bytes": int, "wal_bytes": int, "total_bytes": int, "page_count": int,
               "freelist_count": int}
NUMBER = (int, float)


def type_ok(value, want):
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def check_fields(obj, fields, where, problems):
    for name, want in fields.items():
        if name not in obj:
            problems.append(f"{where}: missing {name}")
        elif not type_ok(obj[name], want):
            problems.append(f"{where}: {name} is {type(obj[name]).__name__}, want {want.__name__}")


def check_phases(rec, spec, where, problems):
    phases = rec["phases"]
    if list(phases) != PHASES:
        problems.append(f"{where}: phases {list(phases)}, want {PHASES}")
        return
    for name, p in phases.items():
        check_fields(p, {"count": int, "seconds": NUMBER, "rate_per_s": NUMBER},
                     f"{where} {name}", problems)
        if isinstance(p.get("seconds"), NUMBER) and not p["seconds"] > 0:
            problems.append(f"{where} {name}: seconds {p['seconds']} not > 0")
    per = spec["counts_per_scale"]
    for name in ["insert", "select", "update"]:
        if phases[name].get("count") != per[name] * rec["scale"]:
            problems.append(f"{where} {name}: count {phases[name].get('count')}, "
                            f"want {per[name] * rec['scale']}")
    if phases["setup"].get("count") != per["seed"] * rec["scale"]:
        problems.append(f"{where} setup: count is not the seed rows")
    if not isinstance(phases["select"].get("rows"), int) or phases["select"]["rows"] <= 0:
        problems.append(f"{where} select: no rows read")
    if not phases["delete"].get("count", 0) > 0:
        problems.append(f"{where} delete: deleted {phases['delete'].get('count')} rows, want > 0")


def check_record(rec, spec, where, problems):
    if not isinstance(rec, dict):
        problems.append(f"{where}: not a JSON object")
        return
    before = len(problems)
    check_fields(rec, TOP_FIELDS, where, problems)
    if len(problems) > before:
        return
    configs = {c["name"]: c for c in spec["configs"]}
    # (1) known schema, implementation, configuration and cipher
    if rec["schema"] != SCHEMA_ID:
        problems.append(f"{where}: schema {rec['schema']!r}, want {SCHEMA_ID!r}")
    if rec["impl"] not in IMPLS or rec["cipher"] not in spec["ciphers"]:
        problems.append(f"{where}: impl {rec['impl']!r} / cipher {rec['cipher']!r} unknown")
    if rec["impl"] == "sqlite" and rec["cipher"] != "none":
        problems.append(f"{where}: impl sqlite with a cipher")
    config = configs.get(rec["config"])
    if config is None:
        problems.append(f"{where}: unknown config {rec['config']!r}")
        return
    where = f"{where} ({rec['impl']} {rec['impl_version']} {rec['config']} {rec['cipher']})"
    check_fields(rec["settings"], SETTING_FIELDS, where + " settings", problems)
    check_fields(rec["size"], SIZE_FIELDS, where + " size", problems)
    if len(problems) > before:
        return
    check_phases(rec, spec, where, problems)
    # (2) the profile took: auto_vacuum fixed at page 1, WAL, synchronous, temp_store
    s = rec["settings"]
    for name in ["auto_vacuum", "synchronous", "temp_store"]:
        if s[name] != config[name]:
            problems.append(f"{where}: {name}={s[name]}, want {config[name]}")
    if s["journal_mode"] != "wal":
        problems.append(f"{where}: journal_mode={s['journal_mode']}, want wal")
    # (3) sizes and rows add up
    z = rec["size"]
    if z["total_bytes"] != z["db_bytes"] + z["wal_bytes"] or z["db_bytes"] <= 0:
        problems.append(f"{where}: size total != db + wal, or empty db")
    ph = rec["phases"]
    want_rows = ph["setup"]["count"] + ph["insert"]["count"] - ph["delete"]["count"]
    if rec["rows_after"] != want_rows:
        problems.append(f"{where}: rows_after {rec['rows_after']}, want {want_rows}")


def validate_runs(describe_path, run_paths):
    with open(describe_path) as f:
        spec = json.load(f)
    problems, count = [], 0
    for path in run_paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                count += 1
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    problems.append(f"{path}:{n}: not JSON: {e}")
                    continue
                check_record(rec, spec, f"{path}:{n}", problems)
    return count, problems


def validate_results(path):
    with open(path) as f:
        doc = json.load(f)
    problems = []
    check_fields(doc, {"schema": str, "time_utc": str, "duration_s": NUMBER, "quick": bool,
                       "scale": int, "rounds": int, "machine": dict, "implementations": dict,
                       "summary": list, "targets": list, "settings": list}, path, problems)
    if doc.get("schema") != RESULTS_SCHEMA_ID:
        problems.append(f"{path}: schema {doc.get('schema')!r}, want {RESULTS_SCHEMA_ID!r}")
    for i, t in enumerate(doc.get("targets", [])):
        check_fields(t, {"name": str, "op": str, "required": NUMBER, "met": bool},
                     f"{path} targets[{i}]", problems)
    for i, s in enumerate(doc.get("summary", [])):
        check_fields(s, {"config": str, "cipher": str, "phase": str, "rates": dict,
                         "ratios": dict}, f"{path} summary[{i}]", problems)
    return 1, problems


def main(argv):
    if len(argv) == 2 and argv[0] == "--results":
        count, problems = validate_results(argv[1])
    elif len(argv) >= 3 and argv[0] == "--describe":
        count, problems = validate_runs(argv[1], argv[2:])
    else:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    for p in problems:
        print(f"validate: {p}")
    print(f"validate: {count} records, {len(problems)} problems")
    return 0 if count > 0 and not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
