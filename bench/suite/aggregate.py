#!/usr/bin/python3
"""aggregate.py -- turns the reference suite's run records into results.json, results.csv,
REPORT.md and SVG charts (bench/results/SCHEMA.md describes the files).

USAGE (bench/suite/run.sh calls it; by hand only to re-aggregate)
  bench/suite/aggregate.py --runs RUNS.jsonl --describe DESCRIBE.json --meta META.json
                           --out DIR [--perf-dir DIR] [--charts] [--print]

  --meta      what run.sh knows: quick, scale, rounds, duration_s, start time, scratch
              file system, notes (a missing reference version, no gnuplot, ...)
  --perf-dir  perf summaries made by run.sh for missed targets (PHASE.txt + PHASE.json)
  --charts    draw charts/*.svg with gnuplot (skipped, with a note, if it is missing)
  REPORT.md ends with every OUT/sections/*.md other benchmarks left there (bench/run.sh:
  sections/scale.md, the mail-level and scale workloads).
  --print     print the summary table and the targets on stdout

STATISTICS
  Every figure is the median over the rounds, with the min and max. A ratio is computed per
  round (the mailvault run and the reference run of one round ran back to back) and then
  summarised the same way. Ratios are RATE ratios, mailvault / reference: above 1 means
  mailvault is faster; for setup, rate = seeded rows / setup time, so the ratio is
  reference time / mailvault time. Debian's python3, standard library only.
"""
import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

RESULTS_SCHEMA_ID = "mailvault-bench-suite/1"
PHASES = ["setup", "insert", "select", "update", "delete"]
CIPHERS = ["chacha20", "aes256cbc", "sqlcipher", "none"]
HEADLINE_REF = "reference-12.11.1"
OTHER_REF = "reference-11.10.0"


def impl_key(rec):
    if rec["impl"] == "reference":
        return f"reference-{rec['impl_version']}"
    return rec["impl"]


def stat(values):
    values = sorted(values)
    if not values:
        return None
    return {"median": statistics.median(values), "min": values[0], "max": values[-1],
            "n": len(values)}


def load_runs(path):
    runs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                runs.append(json.loads(line))
    return runs


def index_runs(runs):
    """(config, cipher, impl) -> {round: record}"""
    table = {}
    for rec in runs:
        table.setdefault((rec["config"], rec["cipher"], impl_key(rec)), {})[rec["round"]] = rec
    return table


def rate_of(rec, phase):
    return rec["phases"][phase]["rate_per_s"]


def paired_ratios(a_runs, b_runs, fn):
    """fn(a_rec, b_rec) for each round both sides ran."""
    return [fn(a_runs[r], b_runs[r]) for r in sorted(a_runs) if r in b_runs]


def summarise(table, configs, impls):
    summary = []
    for config in configs:
        for cipher in CIPHERS:
            mv = table.get((config, cipher, "mailvault"))
            if mv is None:
                continue
            sqlite_runs = table.get((config, "none", "sqlite"), {})
            for phase in PHASES:
                entry = {"config": config, "cipher": cipher, "phase": phase, "rates": {},
                         "seconds": {}, "ratios": {}}
                for impl in impls:
                    runs = table.get((config, cipher, impl))
                    if runs:
                        entry["rates"][impl] = stat([rate_of(r, phase) for r in runs.values()])
                        entry["seconds"][impl] = stat([r["phases"][phase]["seconds"]
                                                       for r in runs.values()])
                    if runs and impl.startswith("reference-"):
                        entry["ratios"][impl] = stat(paired_ratios(
                            mv, runs, lambda a, b: rate_of(a, phase) / rate_of(b, phase)))
                if sqlite_runs:
                    entry["rates"]["sqlite"] = stat([rate_of(r, phase)
                                                     for r in sqlite_runs.values()])
                    entry["ratios"]["sqlite"] = stat(paired_ratios(
                        mv, sqlite_runs, lambda a, b: rate_of(a, phase) / rate_of(b, phase)))
                summary.append(entry)
    return summary


def settings_rows(table):
    rows = []
    for (config, cipher, impl), runs in sorted(table.items()):
        recs = list(runs.values())
        first = recs[0]
        rows.append({
            "config": config, "cipher": cipher, "impl": impl,
            "sqlite_version": first["sqlite_version"],
            "auto_vacuum": sorted({r["settings"]["auto_vacuum"] for r in recs}),
            "mmap_size": sorted({r["settings"]["mmap_size"] for r in recs}),
            "cache_size": first["settings"]["cache_size"],
            "kdf_iter": first["settings"]["kdf_iter"],
            "reserve_bytes": first["settings"]["reserve_bytes"],
            "deleted_rows": stat([r["phases"]["delete"]["count"] for r in recs]),
            "size_total_bytes": stat([r["size"]["total_bytes"] for r in recs]),
            "size_wal_bytes": stat([r["size"]["wal_bytes"] for r in recs]),
            "freelist_count": stat([r["size"]["freelist_count"] for r in recs]),
            "select_rows": sorted({r["phases"]["select"]["rows"] for r in recs}),
        })
    return rows


def target(name, phase, op, required, values, vs):
    s = stat(values)
    met = s is not None and (s["median"] >= required if op == ">=" else s["median"] <= required)
    return {"name": name, "phase": phase, "op": op, "required": required, "measured": s,
            "met": met, "vs": vs}


def compute_targets(table):
    """The issue's targets; "ceiling" is what plain SQLite (C, no VFS, no encryption) gets
    against the same reference runs: no VFS can beat it."""
    mv = table.get(("production", "chacha20", "mailvault"), {})
    ref = table.get(("production", "chacha20", HEADLINE_REF), {})
    plain = table.get(("production", "none", "mailvault"), {})
    ceiling = table.get(("production", "none", "sqlite"), {})
    out = []
    for phase in ["insert", "update", "select"]:
        fn = (lambda a, b, p=phase: rate_of(a, p) / rate_of(b, p))
        out.append(target(f"{phase} rate, chacha20 vs reference 12.11.1", phase, ">=", 3.0,
                          paired_ratios(mv, ref, fn), "rate ratio mailvault / reference"))
        out[-1]["ceiling"] = stat(paired_ratios(ceiling, ref, fn))
    fn = (lambda a, b: a["phases"]["setup"]["seconds"] / b["phases"]["setup"]["seconds"])
    out.append(target("setup time, chacha20 vs reference 12.11.1", "setup", "<=", 0.5,
                      paired_ratios(mv, ref, fn), "time ratio mailvault / reference"))
    out[-1]["ceiling"] = stat(paired_ratios(ceiling, ref, fn))
    for phase in ["insert", "update"]:
        out.append(target(f"chacha20 {phase} cost vs unencrypted mailvault", phase, "<=", 1.3,
                          paired_ratios(mv, plain, lambda a, b, p=phase:
                                        rate_of(b, p) / rate_of(a, p)),
                          "cost ratio chacha20 / plaintext file on the mailvault VFS"))
    return out


def fmt_stat(s, digits=2, suffix=""):
    if s is None:
        return "n/a"
    f = f"{{:.{digits}f}}"
    return f"{f.format(s['median'])}{suffix} ({f.format(s['min'])}–{f.format(s['max'])})"


def fmt_rate(s):
    return "n/a" if s is None else f"{s['median']:,.0f}"


def write_csv(path, summary, impls):
    refs = [i for i in impls if i.startswith("reference-")] + ["sqlite"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        header = ["config", "cipher", "phase", "impl", "rounds", "rate_median_per_s",
                  "rate_min_per_s", "rate_max_per_s"]
        for r in refs:
            header += [f"ratio_vs_{r}_median", f"ratio_vs_{r}_min", f"ratio_vs_{r}_max"]
        w.writerow(header)
        for e in summary:
            for impl, s in e["rates"].items():
                if s is None:
                    continue
                row = [e["config"], e["cipher"], e["phase"], impl, s["n"],
                       f"{s['median']:.1f}", f"{s['min']:.1f}", f"{s['max']:.1f}"]
                for r in refs:
                    q = e["ratios"].get(r) if impl == "mailvault" else None
                    row += ["", "", ""] if q is None else [f"{q['median']:.3f}",
                                                           f"{q['min']:.3f}", f"{q['max']:.3f}"]
                w.writerow(row)


def find(summary, config, cipher, phase):
    for e in summary:
        if (e["config"], e["cipher"], e["phase"]) == (config, cipher, phase):
            return e
    return None


def size_ratio(settings, config, cipher, ref):
    sizes = {s["impl"]: s["size_total_bytes"] for s in settings
             if s["config"] == config and s["cipher"] == cipher}
    if "mailvault" not in sizes or ref not in sizes:
        return "n/a"
    mb = sizes["mailvault"]["median"] / 1e6
    return f"{mb:.1f} / {sizes[ref]['median'] / 1e6:.1f}"


def table_headline(summary, settings, configs, labels, ref):
    """Rows: configurations; cells: chacha20 rate ratio vs ref, median (min–max)."""
    lines = ["| configuration | " + " | ".join(PHASES) + " | size MB incl. WAL, mv / ref |",
             "|---" * (len(PHASES) + 2) + "|"]
    for config in configs:
        cells = []
        for phase in PHASES:
            e = find(summary, config, "chacha20", phase)
            cells.append(fmt_stat(e["ratios"].get(ref) if e else None, 2, "x"))
        lines.append(f"| {labels.get(config, config)} | " + " | ".join(cells) +
                     f" | {size_ratio(settings, config, 'chacha20', ref)} |")
    return lines


def table_config_detail(summary, config, impls):
    """One configuration, every cipher and phase: rates and ratios."""
    refs = [i for i in impls if i.startswith("reference-")]
    head = ["cipher", "phase", "mailvault /s"]
    for r in refs:
        head += [f"{r[10:]} /s", f"ratio vs {r[10:]}"]
    head += ["plain SQLite (C, no VFS) /s"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for cipher in CIPHERS:
        for phase in PHASES:
            e = find(summary, config, cipher, phase)
            if e is None:
                continue
            cells = [cipher, phase, fmt_rate(e["rates"].get("mailvault"))]
            for r in refs:
                cells += [fmt_rate(e["rates"].get(r)), fmt_stat(e["ratios"].get(r), 2, "x")]
            cells.append(fmt_rate(e["rates"].get("sqlite")))
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def table_targets(targets):
    lines = ["| target | measured, median (min–max) | required | status | ceiling: plain "
             "SQLite (C, no VFS, no encryption) vs the same reference runs |",
             "|---|---|---|---|---|"]
    for t in targets:
        ceiling = fmt_stat(t.get("ceiling"), 2, "x") if t.get("ceiling") else "–"
        lines.append(f"| {t['name']} ({t['vs']}) | {fmt_stat(t['measured'], 2, 'x')} | "
                     f"{t['op']} {t['required']}x | {'MET' if t['met'] else 'NOT MET'} | "
                     f"{ceiling} |")
    return lines


def table_settings(settings):
    av = {0: "NONE", 1: "FULL", 2: "INCREMENTAL"}
    lines = ["| config | cipher | implementation | SQLite | auto_vacuum read back | "
             "mmap_size read back | cache_size | KDF iter | reserve | rows deleted | "
             "size incl. WAL (MB) | of which WAL (MB) | freelist pages |",
             "|---" * 13 + "|"]
    for s in settings:
        lines.append("| " + " | ".join([
            s["config"], s["cipher"], s["impl"], s["sqlite_version"],
            "/".join(av.get(v, str(v)) for v in s["auto_vacuum"]),
            "/".join(str(v) for v in s["mmap_size"]), str(s["cache_size"]),
            str(s["kdf_iter"]), str(s["reserve_bytes"]),
            f"{s['deleted_rows']['median']:.0f}",
            f"{s['size_total_bytes']['median'] / 1e6:.1f}",
            f"{s['size_wal_bytes']['median'] / 1e6:.1f}",
            f"{s['freelist_count']['median']:.0f}"]) + " |")
    return lines


PERF_LINE = re.compile(r"^\s+([0-9.]+)%\s+(\S+)\s+\[(.)\]\s+(.+?)\s*$")


def parse_perf(report_path, record_path, phase):
    """Self-time entries of `perf report --no-children --sort dso,symbol` for one phase."""
    entries, event_count, event = [], None, ""
    with open(report_path, errors="replace") as f:
        for line in f:
            m = re.match(r"# Samples: \S+\s+of event '([^']+)'", line)
            if m:
                event = m.group(1)
            m = re.match(r"# Event count \(approx\.\): (\d+)", line)
            if m:
                event_count = int(m.group(1))
            m = PERF_LINE.match(line)
            if m:
                symbol = re.sub(r"(\s+-)+$", "", m.group(4))
                entries.append({"percent": float(m.group(1)), "dso": m.group(2),
                                "symbol": symbol})
    with open(record_path) as f:
        rec = json.loads(f.readline())
    wall = rec["phases"][phase]["seconds"]
    dsos = {}
    for e in entries:
        dsos[e["dso"]] = dsos.get(e["dso"], 0.0) + e["percent"]
    cpu = event_count / 1e9 if event_count is not None and event.startswith("cpu-clock") else None
    return {"phase": phase, "config": rec["config"], "cipher": rec["cipher"],
            "scale": rec["scale"], "wall_seconds": wall, "cpu_seconds": cpu, "event": event,
            "rate_per_s": rec["phases"][phase]["rate_per_s"],
            "top": entries[:12],
            "by_dso": sorted(({"dso": k, "percent": round(v, 2)} for k, v in dsos.items()),
                             key=lambda d: -d["percent"])[:8]}


def load_perf(perf_dir, phases):
    out = []
    for phase in phases:
        rep, rec = (os.path.join(perf_dir, f"{phase}.{ext}") for ext in ("txt", "json"))
        if os.path.exists(rep) and os.path.exists(rec):
            out.append(parse_perf(rep, rec, phase))
    return out


def ceiling_line(summary, phase):
    """How close mailvault chacha20 (and a plaintext file on its VFS) come to plain SQLite."""
    enc = find(summary, "production", "chacha20", phase)
    plain = find(summary, "production", "none", phase)
    if not enc or not plain or not enc["ratios"].get("sqlite") or \
            not plain["ratios"].get("sqlite"):
        return []
    return [f"Against plain SQLite (same C program, no VFS) in this phase: mailvault chacha20 "
            f"runs at {fmt_stat(enc['ratios']['sqlite'], 2, 'x')} of its rate, a plaintext "
            f"file on the mailvault VFS at {fmt_stat(plain['ratios']['sqlite'], 2, 'x')}.", ""]


def findings(targets):
    """One generated sentence per missed target: is it reachable at all by a VFS?"""
    lines = []
    for t in targets:
        c, m = t.get("ceiling"), t["measured"]
        if t["met"] or c is None or m is None:
            continue
        reachable = c["median"] >= t["required"] if t["op"] == ">=" else \
            c["median"] <= t["required"]
        lines.append(f"- {t['name']}: {m['median']:.2f}x against {t['op']} {t['required']}x. "
                     f"Plain SQLite (C, no VFS, no encryption) gets {c['median']:.2f}x against "
                     "the same reference runs, so " +
                     ("the target is within SQLite's reach: the gap is mailvault's own cost."
                      if reachable else "no VFS on this SQLite build can meet it on this machine: the "
                      "time goes to SQLite itself and to the kernel (I/O, fsync at WAL "
                      "checkpoints), which both sides pay alike."))
    return lines + [""] if lines else []


def perf_section(perf, missed, summary, targets):
    if not missed:
        return ["Every target was met: no profile needed."]
    if not perf:
        return ["Targets were missed but no profile was taken " +
                "(perf unavailable or --no-perf); see the notes above."]
    lines = findings(targets)
    for p in perf:
        lines.append(f"### {p['phase']} (mailvault, {p['config']}, {p['cipher']}, "
                     f"scale {p['scale']}: {p['rate_per_s']:,.0f}/s in that run)")
        if p["cpu_seconds"] is not None and p["wall_seconds"] > 0:
            share = min(1.0, p["cpu_seconds"] / p["wall_seconds"])
            lines.append(f"On CPU {p['cpu_seconds']:.3f} s of {p['wall_seconds']:.3f} s wall "
                         f"({share * 100:.0f}%); the rest is spent off CPU (waiting for "
                         "fsync and writeback, or descheduled).")
        lines.append("")
        lines += ceiling_line(summary, p["phase"])
        lines.append("Self time by object: " + ", ".join(
            f"{d['dso']} {d['percent']:.1f}%" for d in p["by_dso"]) + ".")
        lines.append("")
        lines.append("| self % | object | symbol |")
        lines.append("|---|---|---|")
        for e in p["top"]:
            lines.append(f"| {e['percent']:.2f} | {e['dso']} | `{e['symbol']}` |")
        lines.append("")
    return lines


def gp_row(label, stats, scale=1.0):
    cells = [f'"{label}"']
    for s in stats:
        cells += ["NaN"] * 3 if s is None else [f"{s['median'] * scale:.6g}",
                                                 f"{s['min'] * scale:.6g}",
                                                 f"{s['max'] * scale:.6g}"]
    return " ".join(cells)


def gp_script(svg, data, titles, ylabel, title, extra=""):
    plots = []
    for i, t in enumerate(titles):
        c = 2 + 3 * i
        src = f"'{data}'" if i == 0 else "''"
        xtic = ":xtic(1)" if i == 0 else ""
        plots.append(f"{src} using {c}:{c + 1}:{c + 2}{xtic} title '{t}'")
    return "\n".join([
        "set terminal svg size 1200,520 dynamic enhanced font 'sans,11' background '#ffffff'",
        f"set output '{svg}'", f"set title '{title}'", "set style data histogram",
        "set style histogram errorbars gap 2 lw 1", "set style fill solid 0.75 border -1",
        f"set ylabel '{ylabel}'", "set xtics nomirror font ',9'", "set bmargin 4",
        "set grid ytics",
        "set key outside right top", "set bars front", extra,
        "plot " + ", \\\n     ".join(plots), ""])


def chart_specs(summary, configs, labels, impls):
    """(name, rows of gp_row, titles, ylabel, title, extra) for each chart."""
    specs = []
    if HEADLINE_REF in impls:
        rows = [gp_row(labels.get(c, c), [
            (find(summary, c, "chacha20", p) or {"ratios": {}})["ratios"].get(HEADLINE_REF)
            for p in PHASES]) for c in configs]
        specs.append(("ratio_chacha20_vs_reference", rows, PHASES,
                      "rate ratio mailvault / reference 12.11.1 (median, min-max)",
                      "chacha20: mailvault vs reference 12.11.1, per configuration",
                      "set yrange [0:3.5<*]\nset arrow from graph 0, first 1 to graph 1, first 1 "
                      "nohead dt 2 lc 'black'\nset arrow from graph 0, first 3 to graph 1, "
                      "first 3 nohead dt 3 lc 'red'"))
    combos = [("chacha20", "mailvault"), ("chacha20", HEADLINE_REF), ("chacha20", OTHER_REF),
              ("none", "mailvault"), ("none", "sqlite"), ("none", HEADLINE_REF)]
    combos = [(c, i) for c, i in combos if i in impls or i == "mailvault"]
    rows = [gp_row(p, [(find(summary, "production", c, p) or {"rates": {}})["rates"].get(i)
                       for c, i in combos]) for p in PHASES]
    specs.append(("production_rates", rows, [f"{i} {c}".replace("_", "-") for c, i in combos],
                  "operations (rows) per second, log scale", "production profile: rates",
                  "set logscale y"))
    refs = ["mailvault"] + [i for i in (HEADLINE_REF, OTHER_REF) if i in impls]
    rows = [gp_row(c, [e["seconds"].get(i) for i in refs], 1e3)
            for c in CIPHERS for e in [find(summary, "production", c, "setup")] if e]
    specs.append(("production_setup_ms", rows, refs, "setup time, ms (open + KDF + seeding)",
                  "production profile: setup time per cipher", "set yrange [0:*]"))
    return specs


def draw_charts(out_dir, summary, configs, labels, impls, notes):
    if shutil.which("gnuplot") is None:
        notes.append("gnuplot is not installed and could not be installed: no charts.")
        return []
    chart_dir = os.path.join(out_dir, "charts")
    os.makedirs(chart_dir, exist_ok=True)
    made = []
    for name, rows, titles, ylabel, title, extra in chart_specs(summary, configs, labels,
                                                                impls):
        data = os.path.join(chart_dir, f".{name}.dat")
        svg = os.path.join(chart_dir, f"{name}.svg")
        with open(data, "w") as f:
            f.write("\n".join(rows) + "\n")
        script = gp_script(svg, data, titles, ylabel, title, extra)
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
        os.unlink(data)
        if r.returncode != 0:
            notes.append(f"gnuplot failed on {name}: {r.stderr.strip()[:200]}")
        else:
            made.append(f"charts/{name}.svg")
    return made


def missed_phases(targets):
    phases = []
    for t in targets:
        if not t["met"] and t["phase"] not in phases:
            phases.append(t["phase"])
    return phases


def report_header(doc):
    m, meta = doc["machine"], doc["meta"]
    impl_lines = [f"- {k}: {v}" for k, v in doc["implementations"].items()]
    mode = "quick (`--quick`)" if doc["quick"] else "full"
    return [
        "# Reference suite: mailvault vs SQLite3 Multiple Ciphers",
        "",
        f"Generated by `{('bench/suite/run.sh ' + meta.get('args', '')).strip()}` "
        f"at {doc['time_utc']}; the run took **{doc['duration_s']:.0f} s** "
        f"({doc['duration_s'] / 60:.1f} min). Mode: {mode}; scale {doc['scale']} "
        f"(every phase's count x{doc['scale']}: {1000 * doc['scale']:,} seeded rows, "
        f"{100 * doc['scale']:,} inserts, {1000 * doc['scale']:,} selects, "
        f"{100 * doc['scale']:,} updates); {doc['rounds']} rounds, each run preceded by a "
        "discarded warm-up run at scale 1 in the same process.",
        "",
        f"Source: git {meta.get('git', 'unknown')}. "
        f"Machine: {m['cpu']} ({m['cpus']} CPUs), {m['system']}; database files on "
        f"{meta.get('scratch_fs', '?')} under {meta.get('scratch_dir', '?')}. Load average "
        f"(1/5/15 min) at the start {meta.get('loadavg_start', '?')}, at the end "
        f"{meta.get('loadavg_end', '?')}: other work on the machine shows up as noise, "
        "which the alternation spreads over both sides.",
        "",
        "Implementations:", *impl_lines, "",
        "Ratios are **rate ratios, mailvault / reference** (above 1: mailvault is faster), "
        "computed per round from runs made back to back (mailvault first in even rounds, the "
        "references first in odd ones) and reported as median (min–max) over the rounds. For "
        "setup, rate = seeded rows / setup time. \"plain SQLite\" is the same C program with "
        "no mailvault VFS and no encryption (`--impl sqlite`): the ceiling. Raw numbers: "
        "`results.csv`, `results.json`, `runs.jsonl` (schema: `SCHEMA.md`).", ""]


FIXES = [
    "auto_vacuum is set before page 1 exists (mv_db_open() writes page 1 with it; the runner "
    "sets it right after the key), and read back into every record: FULL in the production "
    "profile, NONE / INCREMENTAL in those two configurations (table below). The reference "
    "set it after journal_mode=WAL, where SQLite silently ignores it.",
    "The DELETE deletes rows: every 10th row (id % 10 = 0), {deleted} rows of {rows} "
    "(counted in every record, same on both sides; the reference's `id > 1500` deleted "
    "nothing).",
    "Warm-up: each process first runs the whole workload at scale 1 on another file and "
    "discards it (the reference timed cold 10 ms windows).",
    "Repeats: every figure is a median over the rounds with min–max; mailvault and the "
    "reference alternate within each round.",
    "Database size includes the WAL (measured before close), not the main file alone.",
    "`--scale K` multiplies every phase's count, so a phase is no longer a ~10 ms window.",
    "mmap is off for encrypted files, and reported as such: mailvault reads `mmap_size` back "
    "as 0 (its VFS refuses the setting and has no xFetch, for plaintext files too); the "
    "reference reads back 268435456 but SQLite3MC does not map encrypted pages. So on "
    "encrypted files the mmap configuration is the production profile on both sides; only "
    "unencrypted files through plain SQLite or the reference are mapped.",
    "\"WAL autocheckpoint 1000\" is SQLite's compiled default, kept as a configuration to "
    "show it is noise.",
]


def build_report(doc, summary, configs, labels, impls, perf, charts):
    lines = report_header(doc)
    lines += ["## Targets (production profile, chacha20)", ""] + table_targets(doc["targets"])
    lines += ["", f"## Summary: chacha20, mailvault vs reference {HEADLINE_REF[10:]}", "",
              "Rate ratio mailvault / reference, median (min–max) over the rounds.", ""]
    lines += table_headline(summary, doc["settings"], configs, labels, HEADLINE_REF)
    if OTHER_REF in impls:
        lines += ["", f"Against reference {OTHER_REF[10:]}:", ""]
        lines += table_headline(summary, doc["settings"], configs, labels, OTHER_REF)
    lines += ["", "## What this suite fixes in the reference's benchmark", ""]
    deleted = next((x["deleted_rows"]["median"] for x in doc["settings"]
                    if x["config"] == "production" and x["impl"] == "mailvault"), 0)
    rows = 1100 * doc["scale"]
    lines += [f"- {f}".format(deleted=f"{deleted:,.0f}", rows=f"{rows:,}") for f in FIXES]
    lines += ["", "## Per configuration, every cipher", ""]
    for config in configs:
        c = next(x for x in doc["configs"] if x["name"] == config)
        pragmas = "; ".join(c["extra_sql"]) or "the production profile only"
        lines += [f"### {labels.get(config, config)} (`{config}`: auto_vacuum "
                  f"{c['auto_vacuum']}, {pragmas})", ""]
        lines += table_config_detail(summary, config, impls) + [""]
    lines += ["## Settings read back, deletes and sizes", ""] + table_settings(doc["settings"])
    lines += ["", "## Where the time goes (missed targets)", ""]
    lines += perf_section(perf, doc["perf_phases"], summary, doc["targets"])
    if charts:
        lines += ["", "## Charts", ""] + [f"![{c}]({c})" for c in charts]
    if doc["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"


def extra_sections(out_dir):
    """The report sections other benchmarks left in OUT/sections/*.md (bench/run.sh writes
    sections/scale.md), in name order, so that rewriting REPORT.md keeps them."""
    texts = []
    for name in sorted(os.listdir(os.path.join(out_dir, "sections"))
                       if os.path.isdir(os.path.join(out_dir, "sections")) else []):
        if name.endswith(".md"):
            with open(os.path.join(out_dir, "sections", name)) as f:
                texts.append("\n" + f.read())
    return "".join(texts)


def implementations(runs):
    out = {}
    for rec in runs:
        key = impl_key(rec)
        if key in out:
            continue
        if rec["impl"] == "mailvault":
            out[key] = (f"mailvault {rec['impl_version']} (C, public API) on the system "
                        f"SQLite {rec['sqlite_version']}")
        elif rec["impl"] == "sqlite":
            out[key] = f"plain SQLite {rec['sqlite_version']} (C, no mailvault VFS)"
        else:
            out[key] = (f"better-sqlite3-multiple-ciphers {rec['impl_version']} (SQLite "
                        f"{rec['sqlite_version']}, {rec.get('runtime', 'node')})")
    order = ["mailvault", "sqlite", HEADLINE_REF, OTHER_REF]
    return dict(sorted(out.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order
                                                    else len(order), kv[0])))


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    import platform
    return {"cpu": cpu, "cpus": os.cpu_count(), "system": platform.platform()}


def print_summary(doc, summary, configs, labels):
    print("== targets (production, chacha20)")
    for t in doc["targets"]:
        print(f"  {t['name']:<52} {fmt_stat(t['measured'], 2, 'x'):<24} "
              f"{t['op']} {t['required']}x  {'MET' if t['met'] else 'NOT MET'}")
    print(f"== chacha20 rate ratio mailvault / {HEADLINE_REF}, median (min-max)")
    print(f"  {'configuration':<26}" + "".join(f"{p:>22}" for p in PHASES))
    for c in configs:
        cells = []
        for p in PHASES:
            e = find(summary, c, "chacha20", p)
            cells.append(fmt_stat(e["ratios"].get(HEADLINE_REF) if e else None, 2, "x"))
        print(f"  {labels.get(c, c):<26}" + "".join(f"{x:>22}" for x in cells))
    print(f"== took {doc['duration_s']:.0f} s")


def parse_args(argv):
    ap = argparse.ArgumentParser(description="aggregate reference-suite runs")
    ap.add_argument("--runs")
    ap.add_argument("--describe", required=True)
    ap.add_argument("--meta")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rebuild", action="store_true",
                    help="re-aggregate OUT/runs.jsonl with the meta and perf summaries kept "
                         "in OUT/results.json (after a change to this script)")
    ap.add_argument("--perf-dir")
    ap.add_argument("--charts", action="store_true")
    ap.add_argument("--print", action="store_true")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    with open(args.describe) as f:
        spec = json.load(f)
    old_perf = None
    if args.rebuild:
        with open(os.path.join(args.out, "results.json")) as f:
            old = json.load(f)
        meta, old_perf = old["meta"], old.get("perf", [])
        args.runs = os.path.join(args.out, "runs.jsonl")
        args.charts = True
    else:
        if not args.runs or not args.meta:
            sys.exit("aggregate.py: --runs and --meta are required (or --rebuild)")
        with open(args.meta) as f:
            meta = json.load(f)
    runs = load_runs(args.runs)
    table = index_runs(runs)
    labels = {c["name"]: c["label"] for c in spec["configs"]}
    present = {k[0] for k in table}
    configs = [c["name"] for c in spec["configs"] if c["name"] in present]
    impls = list(implementations(runs))
    summary = summarise(table, configs, impls)
    targets = compute_targets(table)
    notes = list(meta.get("notes", []))
    doc = {"schema": RESULTS_SCHEMA_ID, "time_utc": meta["time_utc"],
           "duration_s": meta["duration_s"], "quick": meta["quick"], "scale": meta["scale"],
           "rounds": meta["rounds"], "meta": meta, "machine": machine(),
           "implementations": implementations(runs), "configs": spec["configs"],
           "targets": targets, "perf_phases": missed_phases(targets),
           "settings": settings_rows(table), "summary": summary, "notes": notes,
           "runs_file": "runs.jsonl"}
    perf = load_perf(args.perf_dir, doc["perf_phases"]) if args.perf_dir else []
    if old_perf is not None:
        perf = old_perf
    doc["perf"] = perf
    charts = draw_charts(args.out, summary, configs, labels, impls, notes) if args.charts else []
    doc["charts"] = charts
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    write_csv(os.path.join(args.out, "results.csv"), summary, impls)
    with open(os.path.join(args.out, "REPORT.md"), "w") as f:
        f.write(build_report(doc, summary, configs, labels, impls, perf, charts))
        f.write(extra_sections(args.out))
    if args.print:
        print_summary(doc, summary, configs, labels)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
