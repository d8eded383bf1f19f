#!/usr/bin/env python3
"""first_search.py -- the first SEARCH of a kind after a server's start, from files out of
the page cache (issue 13): builds of mailvaultd, each on its own copy of a big store, and
optionally a running Dovecot, alternating.

What it measures is a key the server answers from something it keeps between commands (SENT*
from the open store's copy of a mailbox's sent days, imapd/imap_search_sent.c): the first
such key after every start, and after every store close, paid the whole pass again.

USAGE
  first_search.py --user ADDRESS --password-file FILE --server NAME=BINARY:ROOT ...
                  [--dovecot PORT:MAILDIR_ROOT] [--rounds R] [--command "UID SEARCH ..."]
  Per round and server (the order rotating by round): a mailvaultd is started on its ROOT
  (every file under ROOT evicted first), LOGIN and SELECT INBOX on a fresh connection, then
  every file under ROOT evicted again and the command timed to its tagged answer; the server
  stopped (SIGTERM: it closes the store, saving what it keeps). Dovecot keeps running: its
  files (mail, index, cache) are evicted after the SELECT. Prints each run and the medians;
  the answers' UID counts must agree. Run a round first when a build keeps something new
  (its first start has nothing saved yet).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bigmail import evict  # noqa: E402
from drain_big import start, stop  # noqa: E402
from search_keys import Conn  # noqa: E402


def one(spec, user, password, command, scratch):
    name, binary, root, port = spec
    p = None
    if binary is not None:
        evict([root])
        p, port, _ = start(binary, root, scratch, name)
    try:
        c = Conn("127.0.0.1", port, user, password)  # LOGIN and SELECT INBOX
        evict([root])
        t0 = time.perf_counter()
        _, lines, tagged = c.command(command.encode())
        ms = (time.perf_counter() - t0) * 1000
        c.sock.close()
    finally:
        if p is not None:
            stop(p)
    if b" OK" not in tagged:
        sys.exit("%s answered %r" % (name, tagged))
    uids = sum(len(line.split()) - 2 for line in lines if line.startswith(b"* SEARCH"))
    return ms, uids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--server", action="append", default=[], help="NAME=BINARY:ROOT")
    ap.add_argument("--dovecot", help="PORT:ROOT of a running Dovecot (ROOT: its files)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--command", default="UID SEARCH SENTSINCE 1-Jan-2024")
    a = ap.parse_args()
    password = open(a.password_file).read().strip()
    specs = []
    for s in a.server:
        name, rest = s.split("=", 1)
        binary, root = rest.rsplit(":", 1)
        specs.append((name, binary, root, None))
    if a.dovecot:
        port, root = a.dovecot.split(":", 1)
        specs.append(("dovecot", None, root, int(port)))
    times = {s[0]: [] for s in specs}
    counts = set()
    with tempfile.TemporaryDirectory(prefix="first_search.") as scratch:
        for r in range(a.rounds):
            k = r % len(specs)
            for spec in specs[k:] + specs[:k]:
                ms, uids = one(spec, a.user, password, a.command, scratch)
                times[spec[0]].append(ms)
                counts.add(uids)
                print("round %d %s %.1f ms (%d UIDs)" % (r + 1, spec[0], ms, uids), flush=True)
    for name, xs in times.items():
        print("%s: median %.1f ms (%s)" % (name, statistics.median(xs),
                                            " ".join("%.0f" % x for x in xs)))
    if len(counts) != 1:
        sys.exit("the answers differ: %r" % sorted(counts))


if __name__ == "__main__":
    main()
