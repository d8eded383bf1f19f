#!/usr/bin/env python3
"""drain_login.py -- the first LOGIN + SELECT after many deliveries made while the user was
away (issue 13: mailvaultd moved its sealed queue into the store in front of the login).
bench/drain_login.sh starts the servers and runs this once per server and round.

USAGE
  drain_login.py --imap PORT --lmtp PORT --user ADDRESS --password-file FILE --messages N
  Delivers N messages (2-6 KB, one LMTP transaction each) to ADDRESS, which has no session,
  then logs in on a fresh connection and prints one JSON line:
    {"deliver_s": ..., "login_select_ms": LOGIN sent .. SELECT's tagged OK,
     "exists_at_select": EXISTS in SELECT's answer,
     "all_visible_ms": LOGIN sent .. EXISTS == N (NOOP polled every 5 ms; -1 if not in 60 s)}
"""
import argparse
import json
import random
import re
import socket
import sys
import time


class Lines:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                raise RuntimeError("connection closed")
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line


def lmtp_reply(c):
    while True:
        line = c.line()
        if len(line) < 4 or line[3:4] != b"-":
            return int(line[:3])


def deliver(port, user, n, rnd):
    c = Lines(port)
    lmtp_reply(c)
    c.sock.sendall(b"LHLO bench.example\r\n")
    lmtp_reply(c)
    for i in range(n):
        body = b"".join(b"line %d of message %d, some text to fill it\r\n" % (k, i)
                        for k in range(rnd.randint(40, 120)))
        msg = (b"From: sender@example.net\r\nTo: %s\r\nSubject: queued %d\r\n"
               b"Message-ID: <q%d.%d@bench.example>\r\n\r\n" % (user.encode(), i, i, rnd.random() * 1e9)
               + body)
        c.sock.sendall(b"MAIL FROM:<sender@example.net>\r\nRCPT TO:<%s>\r\nDATA\r\n" % user.encode())
        codes = [lmtp_reply(c) for _ in range(3)]
        if codes != [250, 250, 354]:
            raise RuntimeError("LMTP refused: %r" % codes)
        c.sock.sendall(msg + b".\r\n")
        if lmtp_reply(c) != 250:
            raise RuntimeError("LMTP delivery refused")
    c.sock.sendall(b"QUIT\r\n")
    c.sock.close()


def until_tagged(c, tag):
    exists = None
    while True:
        line = c.line()
        m = re.match(rb"\* (\d+) EXISTS", line)
        if m:
            exists = int(m.group(1))
        if line.startswith(tag + b" "):
            return line, exists


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--lmtp", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--messages", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args()
    password = open(a.password_file).read().strip()
    t0 = time.monotonic()
    deliver(a.lmtp, a.user, a.messages, random.Random(a.seed))
    deliver_s = time.monotonic() - t0
    c = Lines(a.imap)
    c.line()  # greeting
    start = time.monotonic()
    c.sock.sendall(b'a1 LOGIN "%s" "%s"\r\n' % (a.user.encode(), password.encode()))
    line, _ = until_tagged(c, b"a1")
    if b" OK" not in line:
        raise RuntimeError("LOGIN: %r" % line)
    c.sock.sendall(b"a2 SELECT INBOX\r\n")
    line, exists = until_tagged(c, b"a2")
    login_select_ms = (time.monotonic() - start) * 1000
    if b" OK" not in line:
        raise RuntimeError("SELECT: %r" % line)
    seen, n, all_visible_ms = exists or 0, 3, -1.0
    while time.monotonic() - start < 60:
        if seen >= a.messages:
            all_visible_ms = (time.monotonic() - start) * 1000
            break
        time.sleep(0.005)
        tag = b"a%d" % n
        n += 1
        c.sock.sendall(tag + b" NOOP\r\n")
        _, e = until_tagged(c, tag)
        seen = e if e is not None else seen
    c.sock.sendall(b"z LOGOUT\r\n")
    c.sock.close()
    print(json.dumps({"deliver_s": round(deliver_s, 3), "login_select_ms": round(login_select_ms, 2),
                      "exists_at_select": exists, "all_visible_ms": round(all_visible_ms, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
