#!/usr/bin/env python3
"""search_compare.py -- SEARCH programs of the shapes clients send (one key, a quick filter
over four fields, ORs of 20 and 200 senders, a thread's OR of 20 Message-IDs, one key ORed 200
times as a filter built by appending terms sends it, an OR of 3,000 sequence numbers, flags,
dates),
timed on several IMAP servers side by side: each command goes to every server in turn (the
order reversed every other round), median of the rounds, milliseconds; "BAD" where a server
refused it. For servers already running over the same mailbox (e.g. a copy of the big-mailbox
bench's 10,000 store in mailvaultd and its Maildir in a private Dovecot, bench/dovecot_lib.sh).

USAGE
  bench/search_compare.py --server old=127.0.0.1:1143 --server new=127.0.0.1:2143 \\
      --server dovecot=127.0.0.1:3143 --user u1@bench.example --password-file PW [--rounds 9]
Prints a Markdown table.
"""
import argparse
import socket
import sys
import time


class Imap:
    def __init__(self, host, port, user, password):
        self.sock = socket.create_connection((host, port), timeout=300)
        self.buf = b""
        self.n = 0
        self.line()
        if self.command(b'LOGIN "%s" "%s"' % (user.encode(), password.encode()))[1] != b"OK":
            raise RuntimeError("LOGIN refused on port %d" % port)
        self.command(b"SELECT INBOX")

    def line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("the server closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def command(self, text):
        """Sends text; returns (untagged lines, status word of the tagged line)."""
        self.n += 1
        tag = b"s%d" % self.n
        self.sock.sendall(tag + b" " + text + b"\r\n")
        untagged = []
        while True:
            line = self.line()
            if line.startswith(tag + b" "):
                return untagged, line[len(tag) + 1:].split(b" ")[0]
            untagged.append(line)


def programs():
    senders = [b'FROM "sender%d"' % i for i in range(200)]
    return [
        ("one FROM", b'FROM "carol.ferreira"'),
        ("quick filter: OR of FROM/TO/CC/SUBJECT",
         b'OR OR OR FROM "carol" TO "carol" CC "carol" SUBJECT "carol"'),
        ("OR of 20 FROM", b"OR " * 19 + b" ".join(senders[:20])),
        ("OR of 200 FROM", b"OR " * 199 + b" ".join(senders)),
        ("one HEADER Message-ID", b'HEADER Message-ID "<m5@"'),
        ("OR of 20 HEADER Message-ID",
         b"OR " * 19 + b" ".join(b'HEADER Message-ID "<m%d@"' % i for i in range(20))),
        ("OR of 200 copies of one SUBJECT", b"OR " * 199 + b" ".join([b'SUBJECT "the"'] * 200)),
        ("OR of 3,000 sequence numbers",
         b"OR " * 2999 + b" ".join(b"%d" % i for i in range(1, 3001))),
        ("UNSEEN", b"UNSEEN"),
        ("SINCE", b"SINCE 1-Dec-2025"),
        ("ALL", b"ALL"),
        ("UID 1:* NOT DELETED", b"UID 1:* NOT DELETED"),
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", action="append", required=True, help="NAME=HOST:PORT")
    p.add_argument("--user", required=True)
    p.add_argument("--password-file", required=True)
    p.add_argument("--rounds", type=int, default=9)
    a = p.parse_args()
    password = open(a.password_file).read().strip()
    names, conns = [], []
    for spec in a.server:
        name, addr = spec.split("=", 1)
        host, port = addr.rsplit(":", 1)
        names.append(name)
        conns.append(Imap(host, int(port), a.user, password))
    print("| search | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for label, program in programs():
        times = [[] for _ in conns]
        for r in range(a.rounds):
            order = range(len(conns)) if r % 2 == 0 else reversed(range(len(conns)))
            for i in order:
                t0 = time.perf_counter()
                _, status = conns[i].command(b"UID SEARCH " + program)
                took = time.perf_counter() - t0
                times[i].append(took if status == b"OK" else None)
        cells = []
        for t in times:
            ok = [x for x in t if x is not None]
            cells.append("%.2f" % (sorted(ok)[len(ok) // 2] * 1000) if len(ok) == len(t) else "BAD")
        print("| %s | %s |" % (label, " | ".join(cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
