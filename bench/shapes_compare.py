#!/usr/bin/env python3
"""shapes_compare.py -- commands whose cost used to grow with something other than the messages
they touch, timed on several IMAP servers side by side (issue 13):
  (1) SELECT of a folder whose --messages messages carry --per keywords each out of a pool of
      --pool distinct ones (a mailbox's keyword set: looked up by a walk of the whole set per
      keyword, SELECT was quadratic in it);
  (2) FETCH BODYSTRUCTURE of a message whose To: lists --addresses addresses (GMime's message
      parsed every address, though BODYSTRUCTURE needs none).
Servers take turns per round (the order reversed every other round); medians over --rounds.
The folders (sh-kw, sh-big) are made first and deleted at the end: use copies of a bench store
and a private Dovecot (bench/dovecot_lib.sh), never a real mailbox.

USAGE
  bench/shapes_compare.py --server old=127.0.0.1:1143 --server new=127.0.0.1:2143 \\
      --server dovecot=127.0.0.1:3143 --user u1@bench.example --password-file PW \\
      [--rounds 5] [--messages 2000] [--pool 2000] [--per 10] [--addresses 10000]
Servers on this machine (the connection and its helpers are status_compare.py's). Prints a Markdown
table, milliseconds.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from status_compare import add_server_args, login, pipelined, servers  # noqa: E402


def small_message(i):
    return "From: k%d@example.org\r\nSubject: keywords %d\r\n\r\nbody %d\r\n" % (i, i, i)


def big_to_message(addresses):
    to = ",\r\n ".join('"User %d" <user%d@example%d.org>' % (i, i, i % 97)
                       for i in range(addresses))
    return ("From: a@example.org\r\nTo: " + to + "\r\nSubject: many addresses\r\n"
            "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=zz\r\n\r\n"
            "--zz\r\nContent-Type: text/plain\r\n\r\nhello\r\n--zz\r\n"
            "Content-Type: application/pdf\r\n\r\nxxxx\r\n--zz--\r\n")


def setup(port, a, password):
    c = login(port, a.user, password)
    c.command("CREATE sh-kw")
    c.command("CREATE sh-big")
    appends = ["APPEND sh-kw {%d+}\r\n%s" % (len(m), m)
               for m in (small_message(i) for i in range(a.messages))]
    if pipelined(c, appends) is None:
        raise RuntimeError("port %d: an APPEND failed" % port)
    big = big_to_message(a.addresses)
    # a server may refuse it (mailvaultd before 992fc31: header_size_max 64 KiB)
    took_big = pipelined(c, ["APPEND sh-big {%d+}\r\n%s" % (len(big), big)]) is not None
    c.ok("SELECT sh-kw")
    stores = []
    for i in range(1, a.messages + 1):
        kws = " ".join("tag%05d" % ((i * (j * 7 + 1) + j * 131) % a.pool)
                       for j in range(a.per))
        stores.append("STORE %d +FLAGS.SILENT (%s)" % (i, kws))
    if pipelined(c, stores) is None:
        raise RuntimeError("port %d: a STORE failed" % port)
    c.ok("CLOSE")
    c.close()
    return took_big


def one_round(port, a, password, took_big):
    c = login(port, a.user, password)
    select = c.ok("EXAMINE sh-kw")[1]
    structure = None
    if took_big:
        c.ok("EXAMINE sh-big")
        structure = c.ok("FETCH 1 (BODYSTRUCTURE)")[1]
    c.close()
    return select, structure


def main():
    p = argparse.ArgumentParser()
    add_server_args(p)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--pool", type=int, default=2000)
    p.add_argument("--per", type=int, default=10)
    p.add_argument("--addresses", type=int, default=10000)
    a = p.parse_args()
    names, ports, password = servers(a)
    took_big = []
    for port in ports:
        t0 = time.perf_counter()
        took_big.append(setup(port, a, password))
        print("set up port %d in %.1f s" % (port, time.perf_counter() - t0), file=sys.stderr)
    selects = [[] for _ in ports]
    structures = [[] for _ in ports]
    for r in range(a.rounds):
        order = list(range(len(ports)))
        if r % 2 == 1:
            order.reverse()
        for i in order:
            s, b = one_round(ports[i], a, password, took_big[i])
            selects[i].append(s)
            structures[i].append(b)
    for port in ports:
        c = login(port, a.user, password)
        c.command("DELETE sh-kw")
        c.command("DELETE sh-big")
        c.close()
    print("| command (median of %d rounds, ms) | %s |" % (a.rounds, " | ".join(names)))
    print("|---|" + "---:|" * len(names))
    print("| EXAMINE of %d messages with %d of %d keywords each | %s |"
          % (a.messages, a.per, a.pool,
             " | ".join("%.1f" % (statistics.median(t) * 1000) for t in selects)))
    print("| FETCH BODYSTRUCTURE of a message with %d addresses in To: | %s |"
          % (a.addresses, " | ".join("refused" if None in t
                                     else "%.1f" % (statistics.median(t) * 1000)
                                     for t in structures)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
