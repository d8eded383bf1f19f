#!/usr/bin/python3
"""scale_report.py -- the "Mail-level and scale workloads" part of the benchmark report, from
bench_scale's scale.json and (optionally) bench_store's store.json.

USAGE (bench/run.sh calls it after bench_scale)
  bench/suite/scale_report.py --scale SCALE.json [--store STORE.json] --out DIR
                              [--report REPORT.md] [--charts] [--print] [--note TEXT]...

  --out     writes DIR/sections/scale.md (the Markdown section), DIR/scale.csv, and with
            --charts DIR/charts/scale_*.svg (gnuplot; skipped with a note if missing).
            bench/suite/aggregate.py appends every DIR/sections/*.md to the REPORT.md it
            writes, so the section survives the next run of the reference suite.
  --report  also put the section into this REPORT.md now: it replaces the text between
            "<!-- section:scale -->" and "<!-- end section:scale -->", or is appended.
  --print   the summary table on stdout
  --note    a paragraph written into the section after its first line (repeatable): what the
            numbers alone do not say (the machine's state, findings)

Debian's python3, standard library only. Formats: bench/results/SCHEMA.md.
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys

SECTION = "scale"


def fmt(v, digits=1):
    if v is None:
        return "–"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def lat_cells(lat, digits=2):
    return [fmt(lat["per_s"]), fmt(lat["p50_ms"], digits), fmt(lat["p99_ms"], digits),
            fmt(lat["max_ms"], digits)]


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def store_rows(store):
    """Rows (item, rate, p50, p99, note) from bench_store's figures, where present."""
    figs = store.get("figures", {})
    items = [("deliver (MIME parse + store), mv_message_append", "store.deliver.msgs_per_s"),
             ("fetch, random UIDs", "store.fetch.msgs_per_s"),
             ("flag change, one UID", "store.flags.single.ops_per_s"),
             ("flag change, 100-UID range", "store.flags.range.ops_per_s"),
             ("expunge, one UID (+\\Deleted, expunge)", "store.expunge.single.msgs_per_s"),
             ("expunge, 100-UID range", "store.expunge.range.msgs_per_s"),
             ("search: from (substring)", "store.search.from.p50_ms"),
             ("search: text, one word", "store.search.text_one_word.p50_ms"),
             ("search: text, two words", "store.search.text_two_words.p50_ms"),
             ("search: date range + unseen", "store.search.date_unseen.p50_ms"),
             ("sealed delivery (no password)", "store.sealed.msgs_per_s")]
    rows = []
    for label, name in items:
        f = figs.get(name)
        if f is None:
            continue
        rate = "–" if f["unit"] == "ms" else f"{fmt(f['value'])} {f['unit']}"
        rows.append([label, rate, fmt(f.get("p50_ms"), 2), fmt(f.get("p99_ms"), 2)])
    return rows


def section_stores(s, params):
    kdf = "the default (64007 for chacha20)" if params["kdf_default"] else \
        f"{params['kdf_iter']} (NOT the default: a smoke-test setting)"
    lines = [f"### {s['count']:,} user stores: open and close", "",
             f"KDF iterations: {kdf}. Each store is opened once and closed (`mv_store_open` "
             f"and `mv_store_close` timed separately); {s['fast_kdf_stores']} stores made "
             f"with kdf_iter 1 are opened among them to measure the key derivation's share. "
             f"The first {params['hold']} stores hold {params['store_messages']} messages "
             f"each, the rest are new and empty.", ""]
    rows = [["mv_store_init (new store: KDF, key pair, schema)"] + lat_cells(s["init"]),
            ["mv_store_open"] + lat_cells(s["open"]),
            ["mv_store_close (PRAGMA optimize, close)"] + lat_cells(s["close"], 3),
            ["mv_store_open, kdf_iter 1 stores"] + lat_cells(s["open_kdf_iter1"])]
    lines += table(["call", "per second of call time", "p50 ms", "p99 ms", "max ms"], rows)
    lines += ["", f"Open + close of every store one after another: "
                  f"**{fmt(s['open_close_per_s'])} stores/s** "
                  f"({s['pass_wall_s']:.1f} s for {s['count'] + s['fast_kdf_stores']:,}). "
                  f"Key derivation: **{fmt(s['kdf_ms'], 1)} ms of the {fmt(s['open']['p50_ms'], 1)}"
                  f" ms p50 open ({s['kdf_share'] * 100:.0f}%)** (p50 open with the default "
                  f"KDF - p50 open with kdf_iter 1).", ""]
    rows = []
    for h in s["held"]:
        rows.append([f"{h['cache']} ({h['cache_size_kib']:,} KiB read back)", h["stores"],
                     f"{h['fds_before']} -> {h['fds_held']}", fmt(h["fds_per_store"], 2),
                     fmt(h["kib_per_open_store"], 0), fmt(h["kib_per_touched_store"], 0),
                     fmt(h["rss_touched_kib"] / 1024, 1)])
    lines += [f"**Held open at once** ({params['hold']} stores, in a fresh child process; "
              f"\"touched\": after a mailbox get, the {20} newest by search and 3 fetches "
              f"on each):", ""]
    lines += table(["page cache", "stores", "fds", "fds per store", "KiB per open store",
                    "KiB per touched store", "RSS MiB, all touched"], rows)
    return lines


def section_conc(c):
    lines = ["### Memory per handle once a session has read the whole mailbox", "",
             f"A fresh child opens {c['full_read'][0]['stores']} handles on the concurrency store "
             f"({c['store_messages']:,} messages, {c['store_file_bytes'] / 1e6:.1f} MB file) "
             f"and each reads every message (`mv_message_get` + `mv_message_fetch`): what an "
             f"IMAP session that has fetched its whole mailbox keeps.", ""]
    rows = [[f"{h['cache']} ({h['cache_size_kib']:,} KiB read back)", h["stores"],
             fmt(h["kib_per_open_store"], 0), fmt(h["kib_per_touched_store"], 0),
             fmt(h["touch_ms_each"] / 1000, 2)] for h in c["full_read"]]
    lines += table(["page cache", "handles", "KiB per handle, opened",
                    "KiB per handle, after reading all", "s to read all, per handle"], rows)
    lines += ["", "### One writer, N readers on one store", "",
             f"The store starts with {c['store_messages']:,} messages; each run lasts "
             f"{c['seconds']:g} s. The writer appends generated messages without pause "
             f"(`mv_message_append`); each reader has its own `mv_store` handle and loops over "
             f"mailbox status (`mv_mailbox_status`), search newest 50, fetch and message get, chosen at random.", ""]
    rows = []
    for r in c["runs"]:
        w, a = r["writer"], r["readers_all"]
        rows.append([r["readers"], fmt(w["per_s"]), fmt(w["p50_ms"], 2), fmt(w["p99_ms"], 1),
                     fmt(a["per_s"]), fmt(a["per_s"] / r["readers"]), fmt(a["p50_ms"], 3),
                     fmt(a["p99_ms"], 2), r["busy_errors"], fmt(r["peak_rss_kib"] / 1024, 1)])
    lines += table(["readers", "writer appends/s", "writer p50 ms", "writer p99 ms",
                    "reader ops/s (all)", "per reader", "reader p50 ms", "reader p99 ms",
                    "MV_EBUSY", "peak RSS MiB"], rows)
    lines += ["", "Per read operation, p50 / p99 ms:", ""]
    ops = list(c["runs"][0]["reader_ops"]) if c["runs"] else []
    rows = [[r["readers"]] + [f"{fmt(r['reader_ops'][op]['p50_ms'], 3)} / "
                              f"{fmt(r['reader_ops'][op]['p99_ms'], 2)}" for op in ops]
            for r in c["runs"]]
    lines += table(["readers"] + ops, rows)
    return lines


def build_section(scale, store, charts, notes, paragraphs):
    p, m = scale["params"], scale["machine"]
    lines = [f"<!-- section:{SECTION} -->", "## Mail-level and scale workloads", "",
             f"`build/rel/bench/bench_scale{' --quick' if scale['quick'] else ''}` at "
             f"{scale['time_utc']}, {scale['duration_s']:.0f} s; {m['cpu']} ({m['cpus']} CPUs), "
             f"load average {m['loadavg_start']:.2f} at the start, {m['loadavg_end']:.2f} at "
             f"the end; SQLite {p['sqlite']}, mailvault {p['mailvault']}. Raw figures: "
             f"`scale.json`, `scale.csv` (schema: `SCHEMA.md`).", ""]
    if max(m["loadavg_start"], m["loadavg_end"]) > m["cpus"] / 2:
        lines += [f"The machine was busy with other work during the run (load average above "
                  f"{m['cpus'] / 2:g} on {m['cpus']} CPUs): absolute figures carry that noise.",
                  ""]
    for paragraph in paragraphs:
        lines += [paragraph, ""]
    if store is not None:
        lines += ["### Mail-level operations (bench_store)", "",
                  f"From `bench_store` ({'quick' if store.get('quick') else 'full'} run at "
                  f"{store.get('time_utc', '?')}, {store['params']['messages']:,} delivered "
                  f"messages, search over {store['params']['search_messages']:,}): rates over "
                  f"the time inside the calls, latency per call.", ""]
        lines += table(["operation", "rate", "p50 ms", "p99 ms"], store_rows(store))
        peak = store.get("figures", {}).get("store.peak_rss_mib")
        if peak:
            lines += ["", f"Peak RSS of bench_store through delivery..expunge: "
                          f"{peak['value']:.1f} MiB."]
        lines += [""]
    if scale.get("stores"):
        lines += section_stores(scale["stores"], p) + [""]
    if scale.get("concurrency"):
        lines += section_conc(scale["concurrency"]) + [""]
    if charts:
        lines += [f"![{c}]({c})" for c in charts] + [""]
    for n in scale.get("notes", []) + notes:
        lines += [f"- note: {n}"]
    lines += [f"<!-- end section:{SECTION} -->"]
    return "\n".join(lines) + "\n"


def write_csv(path, scale):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["section", "item", "count", "per_s", "p50_ms", "p99_ms", "max_ms", "value",
                    "unit"])
        s = scale.get("stores")
        if s:
            for k in ["init", "open", "close", "open_kdf_iter1"]:
                l = s[k]
                w.writerow(["stores", k, l["count"], l["per_s"], l["p50_ms"], l["p99_ms"],
                            l["max_ms"], "", ""])
            w.writerow(["stores", "open_close_per_s", "", "", "", "", "", s["open_close_per_s"],
                        "stores/s"])
            w.writerow(["stores", "kdf_ms", "", "", "", "", "", s["kdf_ms"], "ms"])
            w.writerow(["stores", "kdf_share", "", "", "", "", "", s["kdf_share"], "ratio"])
            for h in s["held"]:
                for k in ["fds_per_store", "kib_per_open_store", "kib_per_touched_store"]:
                    w.writerow(["held", f"{h['cache']}.{k}", h["stores"], "", "", "", "", h[k],
                                k.split("_")[0]])
        c = scale.get("concurrency")
        for h in (c or {}).get("full_read", []):
            for k in ["kib_per_open_store", "kib_per_touched_store"]:
                w.writerow(["full_read", f"{h['cache']}.{k}", h["stores"], "", "", "", "", h[k],
                            "KiB"])
        for r in (c or {}).get("runs", []):
            sec = f"concurrency.readers_{r['readers']}"
            for name, l in [("writer", r["writer"]), ("readers_all", r["readers_all"])] + \
                    list(r["reader_ops"].items()):
                w.writerow([sec, name, l["count"], l["per_s"], l["p50_ms"], l["p99_ms"],
                            l["max_ms"], "", ""])
            w.writerow([sec, "busy_errors", "", "", "", "", "", r["busy_errors"], "errors"])
            w.writerow([sec, "peak_rss_kib", "", "", "", "", "", r["peak_rss_kib"], "KiB"])


def gnuplot(svg, data, script_body):
    script = "\n".join([
        "set terminal svg size 1000,480 dynamic enhanced font 'sans,11' background '#ffffff'",
        f"set output '{svg}'", "set style data histogram", "set style histogram clustered gap 1",
        "set style fill solid 0.75 border -1", "set grid ytics", "set key outside right top",
        script_body.replace("DATA", f"'{data}'"), ""])
    return subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)


def draw_charts(out_dir, scale, notes):
    if shutil.which("gnuplot") is None:
        notes.append("gnuplot is not installed: no scale charts.")
        return []
    os.makedirs(os.path.join(out_dir, "charts"), exist_ok=True)
    specs = []
    s = scale.get("stores")
    if s:
        rows = [f'"{n}" {s[k]["p50_ms"]:.6g} {s[k]["p99_ms"]:.6g}' for n, k in
                [("init", "init"), ("open", "open"), ("open, kdf\\\\_iter 1", "open_kdf_iter1"),
                 ("close", "close")]]
        specs.append(("scale_store_open", rows,
                      f"set title '{s['count']} user stores: latency per call'\n"
                      "set ylabel 'ms'\nset yrange [0:*]\n"
                      "plot DATA using 2:xtic(1) title 'p50', '' using 3 title 'p99'"))
    c = scale.get("concurrency")
    if c and c["runs"]:
        rows = [f'"{r["readers"]} reader{"s" if r["readers"] > 1 else ""}" '
                f'{r["writer"]["per_s"]:.6g} {r["readers_all"]["per_s"]:.6g} '
                f'{r["writer"]["p99_ms"]:.6g} {r["readers_all"]["p99_ms"]:.6g}'
                for r in c["runs"]]
        specs.append(("scale_concurrency", rows,
                      "set title 'one writer + N readers on one store'\nset logscale y\n"
                      "set ylabel 'per second, or ms (log scale)'\n"
                      "plot DATA using 2:xtic(1) title 'writer appends/s', '' using 3 title "
                      "'reader ops/s (all readers)', '' using 4 title 'writer p99 ms', '' using "
                      "5 title 'reader p99 ms'"))
    made = []
    for name, rows, body in specs:
        data = os.path.join(out_dir, "charts", f".{name}.dat")
        svg = os.path.join(out_dir, "charts", f"{name}.svg")
        with open(data, "w") as f:
            f.write("\n".join(rows) + "\n")
        r = gnuplot(svg, data, body)
        os.unlink(data)
        if r.returncode != 0:
            notes.append(f"gnuplot failed on {name}: {r.stderr.strip()[:200]}")
        else:
            made.append(f"charts/{name}.svg")
    return made


def put_in_report(report, text):
    """Replaces the section in report (between its markers), or appends it."""
    old = open(report).read() if os.path.exists(report) else ""
    pattern = re.compile(rf"<!-- section:{SECTION} -->.*?<!-- end section:{SECTION} -->\n?",
                         re.S)
    new = pattern.sub(lambda _: text, old, count=1) if pattern.search(old) else \
        old + ("\n" if old and not old.endswith("\n\n") else "") + text
    with open(report, "w") as f:
        f.write(new)


def print_table(scale):
    print("== mail-level and scale workloads (bench_scale)")
    s = scale.get("stores")
    if s:
        print(f"  {s['count']} stores: open {s['open']['p50_ms']:.1f} / {s['open']['p99_ms']:.1f}"
              f" ms (p50/p99), close {s['close']['p50_ms']:.2f} / {s['close']['p99_ms']:.2f} ms, "
              f"{s['open_close_per_s']:.1f} open+close/s; KDF {s['kdf_ms']:.1f} ms "
              f"({s['kdf_share'] * 100:.0f}% of open)")
        for h in s["held"]:
            print(f"  {h['stores']} held, cache {h['cache']}: {h['fds_per_store']:.2f} fds/store,"
                  f" {h['kib_per_open_store']:.0f} KiB/store open, "
                  f"{h['kib_per_touched_store']:.0f} KiB/store touched")
    for h in (scale.get("concurrency") or {}).get("full_read", []):
        print(f"  {h['stores']} handles, each read the whole store, cache {h['cache']}: "
              f"{h['kib_per_touched_store']:.0f} KiB/handle")
    for r in (scale.get("concurrency") or {}).get("runs", []):
        w, a = r["writer"], r["readers_all"]
        print(f"  writer + {r['readers']:>2} readers: {w['per_s']:.0f} appends/s (p50 "
              f"{w['p50_ms']:.1f} p99 {w['p99_ms']:.1f} ms), {a['per_s']:.0f} reads/s (p50 "
              f"{a['p50_ms']:.2f} p99 {a['p99_ms']:.1f} ms), busy {r['busy_errors']}, peak RSS "
              f"{r['peak_rss_kib'] / 1024:.0f} MiB")


def main(argv):
    ap = argparse.ArgumentParser(description="the scale section of the benchmark report")
    ap.add_argument("--scale", required=True)
    ap.add_argument("--store")
    ap.add_argument("--out", required=True)
    ap.add_argument("--report")
    ap.add_argument("--charts", action="store_true")
    ap.add_argument("--print", action="store_true")
    ap.add_argument("--note", action="append", default=[])
    args = ap.parse_args(argv)
    with open(args.scale) as f:
        scale = json.load(f)
    store = None
    if args.store and os.path.exists(args.store):
        with open(args.store) as f:
            store = json.load(f)
    notes = []
    os.makedirs(os.path.join(args.out, "sections"), exist_ok=True)
    charts = draw_charts(args.out, scale, notes) if args.charts else []
    text = build_section(scale, store, charts, notes, args.note)
    with open(os.path.join(args.out, "sections", f"{SECTION}.md"), "w") as f:
        f.write(text)
    write_csv(os.path.join(args.out, "scale.csv"), scale)
    if args.report:
        put_in_report(args.report, text)
    if args.print:
        print_table(scale)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
