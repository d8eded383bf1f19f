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
Prints a Markdown table, milliseconds.
"""
import argparse
import socket
import sys
import threading
import time

MESSAGE = b"From: load@example.org\r\nSubject: status load\r\n\r\n" + b"a line of body\r\n" * 200


class Imap:
    def __init__(self, host, port, user, password):
        self.sock = socket.create_connection((host, port), timeout=300)
        self.buf = b""
        self.n = 0
        self.line()
        if self.command(b'LOGIN "%s" "%s"' % (user.encode(), password.encode())) != b"OK":
            raise RuntimeError("LOGIN refused on port %d" % port)

    def line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("the server closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def command(self, text):
        """Sends text; the status word of its tagged line."""
        self.n += 1
        tag = b"s%d " % self.n
        self.sock.sendall(tag + text + b"\r\n")
        while True:
            line = self.line()
            if line.startswith(tag):
                return line[len(tag):].split(b" ")[0]

    def pipelined(self, texts):
        """Sends every command at once; the time until the last is answered, or None if any
        was not OK."""
        t0 = time.perf_counter()
        self.sock.sendall(b"".join(b"p%d %s\r\n" % (i, t) for i, t in enumerate(texts)))
        left, ok = len(texts), True
        while left > 0:
            line = self.line()
            if line.startswith(b"p"):
                left -= 1
                ok = ok and line.split(b" ")[1] == b"OK"
        took = time.perf_counter() - t0
        return took if ok else None

    def close(self):
        self.command(b"LOGOUT")
        self.sock.close()


def polls_under_appends(server, user, password, polls):
    """STATUS round trips (seconds) of sc-load while a second session APPENDs to it."""
    host, port = server
    poller = Imap(host, port, user, password)
    appender = Imap(host, port, user, password)
    stop = threading.Event()

    def append_loop():
        while not stop.is_set():
            appender.command(b"APPEND sc-load {%d+}\r\n%s" % (len(MESSAGE), MESSAGE))

    thread = threading.Thread(target=append_loop)
    thread.start()
    time.sleep(0.3)
    times = []
    for _ in range(polls):
        t0 = time.perf_counter()
        if poller.command(b"STATUS sc-load (MESSAGES UNSEEN UIDNEXT)") != b"OK":
            raise RuntimeError("STATUS refused on port %d" % port)
        times.append(time.perf_counter() - t0)
    stop.set()
    thread.join()
    appender.close()
    poller.close()
    return times


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))] * 1000


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", action="append", required=True, help="NAME=HOST:PORT")
    p.add_argument("--user", required=True)
    p.add_argument("--password-file", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--polls", type=int, default=300)
    p.add_argument("--folders", type=int, default=1000)
    a = p.parse_args()
    password = open(a.password_file).read().strip()
    names, servers = [], []
    for spec in a.server:
        name, addr = spec.split("=", 1)
        host, port = addr.rsplit(":", 1)
        names.append(name)
        servers.append((host, int(port)))
    folders = [b"sc-%d" % i for i in range(a.folders)]
    for host, port in servers:
        c = Imap(host, port, a.user, password)
        c.command(b"CREATE sc-load")
        if c.pipelined([b"CREATE " + f for f in folders]) is None:
            print("note: some folders already existed on port %d" % port, file=sys.stderr)
        c.close()
    polls = [[] for _ in servers]
    whole = [[] for _ in servers]
    for r in range(a.rounds):
        order = list(range(len(servers)))
        if r % 2 == 1:
            order.reverse()
        for i in order:
            polls[i] += polls_under_appends(servers[i], a.user, password, a.polls)
            c = Imap(servers[i][0], servers[i][1], a.user, password)
            whole[i].append(c.pipelined([b"STATUS %s (MESSAGES UNSEEN UIDNEXT)" % f
                                         for f in folders]))
            c.close()
    for host, port in servers:
        c = Imap(host, port, a.user, password)
        c.pipelined([b"DELETE " + f for f in folders + [b"sc-load"]])
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
