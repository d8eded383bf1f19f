#!/usr/bin/env python3
"""structure_compare.py -- FETCH BODYSTRUCTURE of a mailbox's messages on several IMAP servers
side by side (issue 13): the first FETCH after the servers started (mailvaultd reads and
parses every message; Dovecot answers from its cache file what an earlier FETCH put there)
and later ones, each in a session of its own, as a webmail makes them: the whole --range at
once, and --pages pages of --page messages spread over --page-range (apart from --range, so
that the whole range's answers are not what the pages find).

Servers take turns per round (the order reversed every other round); the first round is
reported apart, the later ones as medians. Start the servers just before, so that the first
round is the first FETCH they answer. Use copies of a bench store and a private Dovecot
(bench/dovecot_lib.sh), never a real mailbox; nothing is written.

USAGE
  bench/structure_compare.py --server old=127.0.0.1:1143 --server new=127.0.0.1:2143 \\
      --server dovecot=127.0.0.1:3143 --user u1@bench.example --password-file PW \\
      [--rounds 5] [--mailbox INBOX] [--range 1:3000] [--page-range 5001:8000] [--pages 20]
      [--page 50]
Prints a Markdown table, milliseconds, and the bytes each server answered (the same on every
round of a server, or the table says so).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from status_compare import add_server_args, login, servers  # noqa: E402


def one_round(port, a, password):
    """(whole range ms, pages ms, the answers' bytes) in one new session."""
    c = login(port, a.user, password)
    c.ok("EXAMINE %s" % a.mailbox)
    data, whole = c.ok("FETCH %s (BODYSTRUCTURE)" % a.range)
    first, last = (int(x) for x in a.page_range.split(":"))
    step = max(a.page, (last - first + 1) // max(a.pages, 1))
    pages, answered = 0.0, [data]
    for k in range(a.pages):
        lo = first + k * step
        hi = min(last, lo + a.page - 1)
        if lo > last:
            break
        d, secs = c.ok("FETCH %d:%d (BODYSTRUCTURE)" % (lo, hi))
        pages += secs
        answered.append(d)
    c.close()
    return whole * 1000, pages * 1000, b"".join(answered)


def main():
    p = argparse.ArgumentParser()
    add_server_args(p)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--mailbox", default="INBOX")
    p.add_argument("--range", default="1:3000")
    p.add_argument("--page-range", default="5001:8000")
    p.add_argument("--pages", type=int, default=20)
    p.add_argument("--page", type=int, default=50)
    a = p.parse_args()
    names, ports, password = servers(a)
    wholes = [[] for _ in ports]
    pages = [[] for _ in ports]
    answers = [set() for _ in ports]
    for r in range(a.rounds):
        order = list(range(len(ports)))
        if r % 2 == 1:
            order.reverse()
        for i in order:
            w, pg, data = one_round(ports[i], a, password)
            wholes[i].append(w)
            pages[i].append(pg)
            answers[i].add(data)

    def cells(values, later):
        return " | ".join("%.1f" % (statistics.median(v[1:]) if later else v[0])
                          for v in values)

    n_pages = "%d x %d in %s" % (a.pages, a.page, a.page_range)
    print("| FETCH (BODYSTRUCTURE), a session each, ms | %s |" % " | ".join(names))
    print("|---|" + "---:|" * len(names))
    print("| %s, first after the start | %s |" % (a.range, cells(wholes, False)))
    if a.rounds > 1:
        print("| %s, median of the %d later | %s |" % (a.range, a.rounds - 1, cells(wholes, True)))
    print("| %s pages, first | %s |" % (n_pages, cells(pages, False)))
    if a.rounds > 1:
        print("| %s pages, median of the %d later | %s |"
              % (n_pages, a.rounds - 1, cells(pages, True)))
    print("| bytes answered a round | %s |"
          % " | ".join(("%d" % len(next(iter(s)))) if len(s) == 1
                       else "differs between rounds" for s in answers))
    return 0 if all(len(s) == 1 for s in answers) else 1


if __name__ == "__main__":
    sys.exit(main())
