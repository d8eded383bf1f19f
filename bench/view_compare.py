#!/usr/bin/env python3
"""view_compare.py -- two mailvaultd builds side by side on one big mailbox (issue 13): LOGIN +
SELECT warm (the store already open in the server) and cold (a freshly started server), and
"UID FETCH last 200: HEADER.FIELDS + ENVELOPE". The servers are run one at a time, each
operation alternating old/new in one run, on copies of the same store; medians of the pairs
and their ratio (old time / new time: above 1, the new build is faster).

USAGE
  bench/view_compare.py --old BIN --new BIN --root DIR --user ADDR --password PW
                        [--rounds N] [--work DIR]
  DIR is a store root (e.g. made with `mailvault import` and `mailvault copy`); each server
  gets its own copy of it under --work (default /tmp/view_compare). Prints one table.
  Not part of make test (it times things) nor of make bench (the big-mailbox benchmark
  against Dovecot is bench/run.sh's).
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.buf = b""
        self.n = 0
        self.line()  # greeting

    def line(self):
        while b"\r\n" not in self.buf:
            data = self.sock.recv(1 << 20)
            if not data:
                raise EOFError("server closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def command(self, text):
        self.n += 1
        tag = b"b%d" % self.n
        self.sock.sendall(tag + b" " + text.encode() + b"\r\n")
        lines = 0
        while True:
            line = self.line()
            lines += 1
            if line.endswith(b"}"):  # a literal: skip its bytes
                size = int(line[line.rindex(b"{") + 1:-1])
                while len(self.buf) < size:
                    data = self.sock.recv(1 << 20)
                    if not data:
                        raise EOFError("server closed")
                    self.buf += data
                self.buf = self.buf[size:]
                continue
            if line.startswith(tag + b" "):
                if not line.startswith(tag + b" OK"):
                    raise RuntimeError(line.decode(errors="replace"))
                return lines

    def close(self):
        try:
            self.command("LOGOUT")
        except Exception:
            pass
        self.sock.close()


class Server:
    def __init__(self, binary, root, work):
        self.binary, self.root, self.work = binary, root, work
        self.proc = None
        self.port = None

    def start(self):
        ports = os.path.join(self.work, "ports")
        if os.path.exists(ports):
            os.unlink(ports)
        env = dict(os.environ, MAILVAULTD_ALLOW_ROOT="yes")
        self.log = open(os.path.join(self.work, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--root=" + self.root, "--listen=127.0.0.1", "--imap-port=0",
             "--lmtp-port=-1", "--workers=2", "--auth-fail-delay-ms=0",
             "--ports-file=" + ports], env=env, stdout=self.log, stderr=self.log)
        deadline = time.time() + 30
        while time.time() < deadline:
            if os.path.exists(ports) and os.path.getsize(ports) > 0:
                for line in open(ports):
                    if line.startswith("imap="):
                        self.port = int(line.split("=")[1])
                        return
            time.sleep(0.02)
        raise RuntimeError("server did not start")

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.proc = None
            self.log.close()


def login_select(server, user, password):
    t = time.perf_counter()
    c = Client(server.port)
    c.command('LOGIN "%s" "%s"' % (user, password))
    c.command("SELECT INBOX")
    elapsed = time.perf_counter() - t
    return elapsed, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--work", default="/tmp/view_compare")
    a = ap.parse_args()
    servers = {}
    for name, binary in (("old", a.old), ("new", a.new)):
        work = os.path.join(a.work, name)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        shutil.copytree(a.root, os.path.join(work, "root"))
        servers[name] = Server(binary, os.path.join(work, "root"), work)
    times = {}

    def record(op, name, seconds):
        times.setdefault(op, {}).setdefault(name, []).append(seconds)

    # Cold: a fresh server per sample, the store not open yet.
    for _ in range(a.rounds):
        for name in ("old", "new"):
            s = servers[name]
            s.start()
            elapsed, c = login_select(s, a.user, a.password)
            c.close()
            s.stop()
            record("LOGIN + SELECT INBOX, cold", name, elapsed)
    # Warm and the header listing: each server up once, alternating one sample at a time.
    for s in servers.values():
        s.start()
        _, c = login_select(s, a.user, a.password)  # opens the store (and fills a cache)
        c.close()
    clients = {}
    for name, s in servers.items():
        _, clients[name] = login_select(s, a.user, a.password)
    for _ in range(a.rounds):
        for name in ("old", "new"):
            elapsed, c = login_select(servers[name], a.user, a.password)
            c.close()
            record("LOGIN + SELECT INBOX, warm", name, elapsed)
    fetch = ("UID FETCH %d:* (UID FLAGS RFC822.SIZE BODY.PEEK[HEADER.FIELDS (From To Cc "
             "Subject Date Message-ID In-Reply-To References)] ENVELOPE)")
    for name, c in clients.items():
        c.command("NOOP")
    uidnext = {}
    for name, c in clients.items():
        c.n += 1
        tag = b"b%d" % c.n
        c.sock.sendall(tag + b" UID SEARCH ALL\r\n")
        uids = []
        while True:
            line = c.line()
            if line.startswith(b"* SEARCH"):
                uids = [int(x) for x in line.split()[2:]]
            if line.startswith(tag):
                break
        uidnext[name] = uids[-200]
    for _ in range(a.rounds * 3):
        for name in ("old", "new"):
            t = time.perf_counter()
            clients[name].command(fetch % uidnext[name])
            record("UID FETCH last 200: HEADER.FIELDS + ENVELOPE", name, time.perf_counter() - t)
    for c in clients.values():
        c.close()
    for s in servers.values():
        s.stop()
    print("| operation | old (median ms) | new (median ms) | old/new |")
    print("|---|---|---|---|")
    for op, by in times.items():
        pairs = [o / n for o, n in zip(by["old"], by["new"])]
        print("| %s | %.2f | %.2f | %.2f |" % (op, statistics.median(by["old"]) * 1000,
                                               statistics.median(by["new"]) * 1000,
                                               statistics.median(pairs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
