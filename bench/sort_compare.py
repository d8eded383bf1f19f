#!/usr/bin/env python3
"""sort_compare.py -- UID SORT over the whole mailbox, the servers alternating (issue 13).

What a webmail sends at every page of a message list and every click on a column header:
UID SORT (criteria) UTF-8 ALL. Each criterion is sent R + 1 times to each server in
rotating order; the first answer's time is printed apart (mailvaultd makes the keys it then
keeps for the next SORT: imap_sort_kept.c), the median of the others beside it, and whether
every server ordered the same messages the same way (the UIDs mapped to Message-IDs, so
servers that numbered the corpus differently still compare).

USAGE
  bench/sort_compare.py --server NAME=HOST:PORT [--server ...] --user U --password-file F
                        [--rounds R] [--criteria "DATE;SUBJECT;..."]
  (bench/commands_compare.sh starts the servers over the bench corpus and runs this.)
Python 3 standard library only; the connection is bench/search_keys.py's. Exits 1 if the
servers' orders differ.
"""
import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from search_keys import connect_all  # noqa: E402  (the same client, one copy)

CRITERIA = ["ARRIVAL", "DATE", "REVERSE DATE", "SIZE", "SUBJECT", "FROM", "TO", "CC",
            "DISPLAYFROM", "SUBJECT DATE"]


def message_ids(conn):
    """UID -> Message-ID field of every message."""
    _, lines, _ = conn.command(b"UID FETCH 1:* (BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
    ids = {}
    for line in lines:
        uid = re.search(rb"UID (\d+)", line)
        mid = re.search(rb"\r\n(Message-ID:[^\r\n]*)", line, re.I)
        if uid:
            ids[int(uid.group(1))] = mid.group(1).lower() if mid else b""
    return ids


def sorted_ids(lines, ids):
    for line in lines:
        if line.startswith(b"* SORT"):
            return [ids.get(int(u), b"?") for u in line.split()[2:]]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", action="append", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--criteria", default=";".join(CRITERIA))
    a = ap.parse_args()
    servers = connect_all(a.server, a.user, a.password_file)
    ids = {name: message_ids(conn) for name, conn in servers}
    names = [n for n, _ in servers]
    print("| UID SORT (...) UTF-8 ALL, ms | " + " | ".join("%s first / later" % n for n in names)
          + " | same order |")
    print("|---|" + "---:|" * len(names) + "---|")
    status = 0
    for crit in a.criteria.split(";"):
        command = ("UID SORT (%s) UTF-8 ALL" % crit).encode()
        times = {n: [] for n in names}
        orders = {n: set() for n in names}
        for r in range(a.rounds + 1):
            for name, conn in servers[r % len(servers):] + servers[:r % len(servers)]:
                seconds, lines, tagged = conn.command(command)
                ok = tagged.split(b" ", 2)[1] == b"OK"
                times[name].append(seconds * 1000 if ok else None)
                order = sorted_ids(lines, ids[name]) if ok else None
                orders[name].add(tuple(order) if order is not None else None)
        first = orders[names[0]]
        same = len(first) == 1 and None not in first and all(orders[n] == first for n in names)
        status |= 0 if same else 1
        cells = []
        for n in names:
            t = times[n]
            cells.append("%.1f / %.1f" % (t[0], statistics.median(t[1:]))
                         if None not in t else "NO")
        print("| %s | %s | %s |" % (crit, " | ".join(cells), "yes" if same else "NO"),
              flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
