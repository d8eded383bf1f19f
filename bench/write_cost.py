#!/usr/bin/env python3
"""write_cost.py -- encryption's cost on the reference workload's writes (issue 13):
mailvault chacha20 against plain SQLite (the same C program with no mailvault VFS and no
encryption), rate by CPU time, in the same round.

USAGE
  bench/write_cost.py [--rounds N] [--scale K] [--bin NAME=PATH ...] [--json FILE]

  --bin NAME=PATH  a bench_reference binary to measure with --cipher chacha20 (repeatable;
                   default: new=build/rel/bench/bench_reference). Give an older build as
                   old=PATH to compare old and new in one run.
  --rounds N       rounds (default 7); --scale K: bench_reference --scale (default 10)

WHAT
  Each round runs `bench_reference --config production --scale K` once with --impl sqlite
  --cipher none (plain SQLite, run by the first binary) and once per --bin with --cipher
  chacha20, in that order in even rounds and reversed in odd ones, so a change in the
  machine's load hits every side alike. Per phase: rate = count / cpu_seconds (CPU time of
  the process: on a shared machine wall time mostly measures the neighbours), ratio = a
  binary's rate / plain SQLite's rate in the same round; printed as median (min-max) over
  the rounds. Target (issue 13): insert, update and delete >= 0.90. With two or more --bin,
  a second table gives each later binary's rate / the first's, round by round.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PHASES = ["setup", "insert", "update", "delete", "select"]


def run(binary, impl, cipher, scale, rnd):
    with tempfile.TemporaryDirectory(prefix="write_cost.") as scratch:
        cmd = [binary, "--config", "production", "--cipher", cipher, "--impl", impl,
               "--scale", str(scale), "--round", str(rnd), "--dir", scratch]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    return {p: v["count"] / v["cpu_seconds"] for p, v in rec["phases"].items()
            if v.get("cpu_seconds", 0) > 0}


def fmt(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--bin", action="append", default=[])
    ap.add_argument("--json")
    args = ap.parse_args()
    bins = []
    for spec in args.bin or ["new=build/rel/bench/bench_reference"]:
        name, sep, path = spec.partition("=")
        if not sep or not os.access(path, os.X_OK):
            sys.exit(f"write_cost.py: --bin NAME=PATH with an executable PATH, not {spec!r}")
        bins.append((name, path))
    ratios = {name: {p: [] for p in PHASES} for name, _ in bins}
    for rnd in range(args.rounds):
        sides = [("plain", bins[0][1], "sqlite", "none")]
        sides += [(name, path, "mailvault", "chacha20") for name, path in bins]
        if rnd % 2:
            sides.reverse()
        rates = {name: run(path, impl, cipher, args.scale, rnd)
                 for name, path, impl, cipher in sides}
        for name, _ in bins:
            for p in PHASES:
                if p in rates[name] and p in rates["plain"]:
                    ratios[name][p].append(rates[name][p] / rates["plain"][p])
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    names = [name for name, _ in bins]
    print("| phase | " + " | ".join(f"{n} / plain SQLite" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for p in PHASES:
        print(f"| {p} | " + " | ".join(fmt(ratios[n][p]) for n in names) + " |")
    if len(names) > 1:
        # Per round, each later binary against the first (same round, same load): the
        # comparison old vs new can make without plain SQLite's own noise in between.
        base = names[0]
        print()
        print("| phase | " + " | ".join(f"{n} / {base}, per round, median (min-max)"
                                        for n in names[1:]) + " |")
        print("|---|" + "---|" * (len(names) - 1))
        for p in PHASES:
            cells = []
            for n in names[1:]:
                per = [a / b for a, b in zip(ratios[n][p], ratios[base][p]) if b > 0]
                cells.append(fmt(per) if per else "-")
            print(f"| {p} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rounds": args.rounds, "scale": args.scale, "ratios": ratios}, f,
                      indent=1)


if __name__ == "__main__":
    main()
