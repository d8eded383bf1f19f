#!/usr/bin/env python3
"""folders_compare.py -- LIST and LSUB with thousands of folders, on several IMAP servers side
by side (issue 13: what LIST built grew with every folder, whatever its pattern asked for).

--folders folders are made under one top-level folder, --per-parent to a parent
("Tree/y00/m0000" ...; the separator is each server's own, from LIST "" ""), and subscribed;
then each LIST below is timed on every server in turn per round (the order reversed every
other round), medians over --rounds; the folders are deleted at the end. Use copies of a bench
store and a private Dovecot (bench/dovecot_lib.sh), never a real mailbox. Dovecot's Maildir
makes each folder a directory and CREATE slows as they grow (9,000 took it ~400 s here):
keep --folders in the thousands.

USAGE
  bench/folders_compare.py --server new=127.0.0.1:2143 --server dovecot=127.0.0.1:3143 \\
      --user u1@bench.example --password-file PW [--folders 3000] [--per-parent 100] [--rounds 5]
Prints a Markdown table, milliseconds, and the lines each server answered.
"""
import argparse
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from status_compare import add_server_args, login, pipelined, servers  # noqa: E402

COMMANDS = [
    ('LIST "" "%"', "top level"),
    ('LIST "" "Tree{s}y05{s}%"', "one parent's children"),
    ('LIST "" "*"', "everything"),
    ('LSUB "" "*"', "every subscription"),
    ('LIST (SUBSCRIBED) "" "*"', "every subscription, RFC 5258"),
]


def separator(c):
    data, _ = c.ok('LIST "" ""')
    m = re.search(rb'\* LIST \([^)]*\) "(.)"', data)
    return m.group(1).decode() if m else "/"


def names(a, sep):
    return ['"Tree%sy%02d%sm%04d"' % (sep, i // a.per_parent, sep, i) for i in range(a.folders)]


def setup(port, a, password):
    c = login(port, a.user, password)
    sep = separator(c)
    t0 = time.perf_counter()
    if pipelined(c, ["CREATE " + n for n in names(a, sep)]) is None:
        raise RuntimeError("port %d: a CREATE failed" % port)
    if pipelined(c, ["SUBSCRIBE " + n for n in names(a, sep)]) is None:
        raise RuntimeError("port %d: a SUBSCRIBE failed" % port)
    print("port %d: %d folders made in %.1f s" % (port, a.folders, time.perf_counter() - t0),
          file=sys.stderr)
    c.close()
    return sep


def teardown(port, a, password, sep):
    c = login(port, a.user, password)
    pipelined(c, ["UNSUBSCRIBE " + n for n in names(a, sep)])
    pipelined(c, ["DELETE " + n for n in names(a, sep)])
    parents = (a.folders + a.per_parent - 1) // a.per_parent
    pipelined(c, ['DELETE "Tree%sy%02d"' % (sep, i) for i in range(parents)])
    c.command('DELETE "Tree"')
    c.close()


def main():
    p = argparse.ArgumentParser()
    add_server_args(p)
    p.add_argument("--folders", type=int, default=3000)
    p.add_argument("--per-parent", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    labels, ports, password = servers(a)
    seps = [setup(port, a, password) for port in ports]
    sessions = [login(port, a.user, password) for port in ports]
    times = [[[] for _ in ports] for _ in COMMANDS]
    lines = [[0 for _ in ports] for _ in COMMANDS]
    for r in range(a.rounds):
        order = list(range(len(ports)))
        if r % 2 == 1:
            order.reverse()
        for k, (command, _) in enumerate(COMMANDS):
            for i in order:
                data, secs = sessions[i].ok(command.format(s=seps[i]))
                times[k][i].append(secs * 1000)
                lines[k][i] = data.count(b"\r\n")
    for c in sessions:
        c.close()
    for port, sep in zip(ports, seps):
        teardown(port, a, password, sep)
    print("| %d folders, %d to a parent (median of %d rounds, ms) | %s |"
          % (a.folders, a.per_parent, a.rounds, " | ".join(labels)))
    print("|---|" + "---:|" * len(labels))
    for k, (command, what) in enumerate(COMMANDS):
        print("| `%s` (%s; lines %s) | %s |"
              % (command.format(s="/"), what, " / ".join(str(n) for n in lines[k]),
                 " | ".join("%.1f" % statistics.median(t) for t in times[k])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
