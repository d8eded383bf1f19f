#!/usr/bin/env python3
"""search_keys.py -- UID SEARCH with many keys at once, the servers alternating (issue 13).

A client that looks up a thread or a list of messages by Message-ID, or filters by a list of
senders or subjects, sends one SEARCH with an OR chain of hundreds or thousands of keys.
Each case below is one such command, built from the mailbox's own Message-IDs, senders and
subject words (drawn once, from a fixed seed, the same command for every server), sent R
times to each server in rotating order; the median time from sending the command to its
tagged answer is printed, with whether every answer equals the first server's.

USAGE
  bench/search_keys.py --server NAME=HOST:PORT [--server ...] --user U --password-file F
                       [--cases msgid:1,msgid:100,...] [--rounds R] [--seed S]
  (bench/commands_compare.sh starts the servers over the bench corpus and runs this.)
A case is KIND:N with KIND one of msgid (HEADER Message-ID), from, subject, uid, sentsince,
senton (dates in 2021-2025, the corpus' range); N keys.
Python 3 standard library only.
"""
import argparse
import random
import re
import socket
import statistics
import sys
import time


class Conn:
    """One IMAP connection: commands timed to their tagged answer, literals skipped by their
    announced length. The received bytes are read through a position, never sliced a line
    at a time: slicing copies the rest of the buffer for every line, which makes a response
    that arrives in one piece cost the client time quadratic in its size (and so charges the
    server that answers fastest; bench/bigmail.py learned it first)."""

    def __init__(self, host, port, user, password):
        self.sock = socket.create_connection((host, port))
        self.buf = b""
        self.pos = 0
        self.n = 0
        self.line()
        for cmd in (b'LOGIN %s "%s"' % (user.encode(), password.encode()), b"SELECT INBOX"):
            _, _, tagged = self.command(cmd)
            if b" OK" not in tagged:
                sys.exit("search_keys: %r answered %r" % (cmd[:6], tagged))

    def more(self):
        data = self.sock.recv(1 << 20)
        if not data:
            raise EOFError("the server closed the connection")
        self.buf = self.buf[self.pos:] + data
        self.pos = 0

    def line(self):
        end = self.buf.find(b"\r\n", self.pos)
        while end < 0:
            self.more()
            end = self.buf.find(b"\r\n", self.pos)
        out = self.buf[self.pos:end + 2]
        self.pos = end + 2
        return out

    def take(self, need):
        while len(self.buf) - self.pos < need:
            self.more()
        out = self.buf[self.pos:self.pos + need]
        self.pos += need
        return out

    def command(self, text):
        self.n += 1
        tag = b"S%d" % self.n
        start = time.perf_counter()
        self.sock.sendall(tag + b" " + text + b"\r\n")
        out = []
        while True:
            line = self.line()
            literal = re.search(rb"\{(\d+)\}\r\n$", line)
            if literal:
                line += self.take(int(literal.group(1)))
            out.append(line)
            if line.startswith(tag + b" "):
                return time.perf_counter() - start, out, line


def connect_all(specs, user, password_file):
    """[(name, Conn)] for specs of NAME=HOST:PORT, each logged in with SELECT INBOX."""
    password = open(password_file).read().strip()
    servers = []
    for spec in specs:
        name, addr = spec.split("=", 1)
        host, port = addr.rsplit(":", 1)
        servers.append((name, Conn(host, int(port), user, password)))
    return servers


def found(lines):
    uids = set()
    for line in lines:
        if line.startswith(b"* SEARCH"):
            uids |= {int(x) for x in line.split()[2:]}
    return frozenset(uids)


def chain(keys):
    return b" ".join([b"OR " + k for k in keys[:-1]] + [keys[-1]])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="append", required=True, help="NAME=HOST:PORT")
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--cases", default="msgid:1,msgid:10,msgid:100,msgid:1000,subject:1,"
                    "subject:100,subject:1000,from:100,from:1000,uid:2700,sentsince:1,"
                    "senton:10")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    servers = connect_all(a.server, a.user, a.password_file)
    first = servers[0][1]
    _, lines, _ = first.command(b"UID FETCH 1:* (BODY.PEEK[HEADER.FIELDS (MESSAGE-ID FROM SUBJECT)])")
    text = b"".join(lines)
    mids = re.findall(rb"Message-ID: *(<[^>\r\n]+>)", text, re.I)
    subjects = sorted(set(re.findall(rb"Subject: *([A-Za-z]+)", text, re.I)))
    senders = sorted(set(re.findall(rb"From: *[^<\r\n]*<([a-z.]+)@", text, re.I)))
    _, lines, _ = first.command(b"UID SEARCH ALL")
    uids = sorted(found(lines))
    if not (mids and subjects and senders and uids):
        sys.exit("search_keys: the mailbox has no Message-IDs, subjects or senders to draw from")
    rnd = random.Random(a.seed)
    kinds = {
        "msgid": lambda n: [b'HEADER Message-ID "%s"' % m for m in rnd.choices(mids, k=n)],
        "from": lambda n: [b'FROM "%s"' % f for f in rnd.choices(senders, k=n)],
        "subject": lambda n: [b'SUBJECT "%s"' % w for w in rnd.choices(subjects, k=n)],
        "uid": lambda n: [b"UID %d" % u for u in rnd.choices(uids, k=n)],
        "sentsince": lambda n: [b"SENTSINCE %d-Dec-%d" % (1 + rnd.randrange(28),
                                                          2021 + rnd.randrange(5))
                                for _ in range(n)],
        "senton": lambda n: [b"SENTON %d-Jun-%d" % (1 + rnd.randrange(28), 2021 + rnd.randrange(5))
                             for _ in range(n)],
    }
    names = [n for n, _ in servers]
    print("| command | keys | bytes | " + " | ".join("%s ms" % n for n in names) +
          " | same answers |")
    print("|---|---:|---:|" + "---:|" * len(names) + "---|")
    bad = 0
    for case in a.cases.split(","):
        kind, n = case.split(":")
        command = b"UID SEARCH " + chain(kinds[kind](int(n)))
        times = {n: [] for n in names}
        answers = {}
        for r in range(a.rounds):
            for name, conn in servers[r % len(servers):] + servers[:r % len(servers)]:
                seconds, lines, tagged = conn.command(command)
                status = tagged.split(b" ", 2)[1].decode()
                times[name].append(seconds if status == "OK" else None)
                answers.setdefault(name, set()).add((status, found(lines)))
        ref = answers[names[0]]
        same = all(answers[n] == ref for n in names) and len(ref) == 1
        bad += not same
        cells = []
        for name in names:
            ok = [t for t in times[name] if t is not None]
            cells.append("%.1f" % (statistics.median(ok) * 1000) if len(ok) == a.rounds else
                         next(iter(answers[name]))[0])
        print("| %s | %s | %d | %s | %s |" % (kind, n, len(command), " | ".join(cells),
                                             "yes" if same else "NO"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
