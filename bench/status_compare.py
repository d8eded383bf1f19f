#!/usr/bin/env python3
"""status_compare.py -- STATUS as a mail client checking its folders sends it, timed on several
IMAP servers side by side: (1) one STATUS at a time of a folder while another session of the
same user APPENDs to it without pause (deliveries arriving while the client polls; each
APPEND waits for its fsync), p50 / p90 / p99 of the STATUS round trips; (2) a STATUS of each of
--folders folders sent all at once (pipelined), the whole answer's median over the rounds.
Servers take turns per round (the order reversed every other round). The folders (sc-load,
sc-0 ...) are created first and deleted at the end; use copies of a bench store and a private
Dovecot (bench/dovecot_lib.sh), never a real mailbox.

USAGE
  bench/status_compare.py --server old=127.0.0.1:1143 --server new=127.0.0.1:2143 \\
      --server dovecot=127.0.0.1:3143 --user u1@bench.example --password-file PW \\
      [--rounds 3] [--polls 300] [--folders 1000]
Servers on this machine (the connection is bigmail.py's, to 127.0.0.1). Prints a Markdown
table, milliseconds.
"""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bigmail  # noqa: E402  (Imap)

MESSAGE = "From: load@example.org\r\nSubject: status load\r\n\r\n" + "a line of body\r\n" * 200


def login(port, user, password):
    c = bigmail.Imap(port, timeout=300)
    c.ok('LOGIN "%s" "%s"' % (user, password))
    return c


def pipelined(c, texts):
    """Sends every command at once on c; the time until the last is answered, or None if any
    was not OK."""
    t0 = time.perf_counter()
    c.sock.sendall("".join("p%d %s\r\n" % (i, t) for i, t in enumerate(texts)).encode())
    left, ok = len(texts), True
    while left > 0:
        line = c._line()
        if line.startswith(b"p"):
            left -= 1
            ok = ok and line.split(b" ")[1] == b"OK"
    took = time.perf_counter() - t0
    return took if ok else None


def polls_under_appends(port, user, password, polls):
    """STATUS round trips (seconds) of sc-load while a second session APPENDs to it."""
    poller = login(port, user, password)
    appender = login(port, user, password)
    stop = threading.Event()

    def append_loop():
        while not stop.is_set():
            appender.ok("APPEND sc-load {%d+}\r\n%s" % (len(MESSAGE), MESSAGE))

    thread = threading.Thread(target=append_loop)
    thread.start()
    time.sleep(0.3)
    times = []
    for _ in range(polls):
        times.append(poller.ok("STATUS sc-load (MESSAGES UNSEEN UIDNEXT)")[1])
    stop.set()
    thread.join()
    appender.close()
    poller.close()
    return times


def add_server_args(p):
    """--server NAME=HOST:PORT (repeated), --user, --password-file: the compare scripts' own."""
    p.add_argument("--server", action="append", required=True, help="NAME=HOST:PORT")
    p.add_argument("--user", required=True)
    p.add_argument("--password-file", required=True)


def servers(a):
    """The names, ports and password that add_server_args' options give."""
    names, ports = [], []
    for spec in a.server:
        name, addr = spec.split("=", 1)
        names.append(name)
        ports.append(int(addr.rsplit(":", 1)[-1]))
    return names, ports, open(a.password_file).read().strip()


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] * 1000


def main():
    p = argparse.ArgumentParser()
    add_server_args(p)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--polls", type=int, default=300)
    p.add_argument("--folders", type=int, default=1000)
    a = p.parse_args()
    names, ports, password = servers(a)
    folders = ["sc-%d" % i for i in range(a.folders)]
    for port in ports:
        c = login(port, a.user, password)
        c.command("CREATE sc-load")
        if pipelined(c, ["CREATE " + f for f in folders]) is None:
            print("note: some folders already existed on port %d" % port, file=sys.stderr)
        c.close()
    polls = [[] for _ in ports]
    whole = [[] for _ in ports]
    for r in range(a.rounds):
        order = list(range(len(ports)))
        if r % 2 == 1:
            order.reverse()
        for i in order:
            polls[i] += polls_under_appends(ports[i], a.user, password, a.polls)
            c = login(ports[i], a.user, password)
            whole[i].append(pipelined(c, ["STATUS %s (MESSAGES UNSEEN UIDNEXT)" % f
                                          for f in folders]))
            c.close()
    for port in ports:
        c = login(port, a.user, password)
        pipelined(c, ["DELETE " + f for f in folders + ["sc-load"]])
        c.close()
    print("| STATUS | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for label, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        print("| one at a time while another session APPENDs, %s | %s |"
              % (label, " | ".join("%.2f" % pct(t, p) for t in polls)))
    print("| %d folders at once (pipelined), median | %s |"
          % (a.folders, " | ".join("BAD" if None in w else "%.1f" % pct(w, 0.5) for w in whole)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
