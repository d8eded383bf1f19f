#!/usr/bin/env python3
"""drain_big.py -- queued deliveries made visible in a BIG mailbox (issue 13), old and new
mailvaultd alternating on one store: the per-delivery cost of the drain must not grow with
the mailbox. bench/drain_login.sh measures the same on fresh (empty) users, with Dovecot.

USAGE
  drain_big.py --root ROOT --user ADDRESS --password-file FILE --server NAME=BINARY ...
               [--rounds R] [--messages N] [--senders S] [--perf NAME]
               [--wait noop|idle] [--expunge-first K] [--first-batch B]
  ROOT is a store root written by these runs (a COPY of a big store: every round adds N
  messages to the user's INBOX). Per round and server: start the server on ROOT (so the
  user's store is closed), deliver N messages over LMTP from S connections (bench/bigmail.py's
  lmtp_messages, new ones for every run, --first-batch: the user has no session, so
  mailvaultd seals them), then on a fresh
  connection LOGIN + SELECT INBOX and NOOP (no pause, as bench/bigmail.py does) until EXISTS
  shows all N (--wait idle: in IDLE, as bench/bigmail.py's lmtp_all_visible waits, leaving
  the CPU to the server); stop the server. --expunge-first K: before the deliveries, the
  first session expunges INBOX's first K messages, so that the purge has their bodies left
  at the login after the restart (as in bench/bigmail.py, whose LMTP pairs come after its
  EXPUNGEs); the store then shrinks by K a run. One JSON line per run (with the server's CPU time over LOGIN +
  SELECT, login_select_cpu_ms, and over the whole span, server_cpu_s: on a shared machine
  wall times scatter, CPU times much less), then medians per server and the ratios to the
  first server. --perf NAME records that server's drain with perf (DWARF
  call graphs) into perf-NAME-R.data in the current directory.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bigmail import Imap, lmtp_messages, lmtp_parallel, wait_exists_idle  # noqa: E402


EXTRA = []


def cpu_s(pid):
    """utime + stime of a process, seconds."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def start(binary, root, scratch, name):
    ports = os.path.join(scratch, name + ".ports")
    if os.path.exists(ports):
        os.unlink(ports)
    log = open(os.path.join(scratch, name + ".log"), "ab")
    env = dict(os.environ, MAILVAULTD_ALLOW_ROOT="yes")
    p = subprocess.Popen([binary, "--listen=127.0.0.1", "--imap-port=0", "--lmtp-port=0",
                          "--root=" + root, "--ports-file=" + ports,
                          "--connections-per-address-max=1000"] + EXTRA, stdout=log, stderr=log, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(ports) and os.path.getsize(ports) > 0:
            kv = dict(line.strip().split("=", 1) for line in open(ports) if "=" in line)
            if "imap" in kv and "lmtp" in kv:
                return p, int(kv["imap"]), int(kv["lmtp"])
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(name + ": no ports file")


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def one_run(a, name, binary, r, scratch, password, batch):
    p, imap_port, lmtp_port = start(binary, a.root, scratch, name)
    perf = None
    try:
        c = Imap(imap_port)  # before the deliveries: how many there are
        c.ok(f'LOGIN "{a.user}" "{password}"')
        data, _ = c.ok("EXAMINE INBOX" if a.expunge_first == 0 else "SELECT INBOX")
        before = int(re.search(rb"\* (\d+) EXISTS", data).group(1))
        if a.expunge_first > 0 and before > 0:
            c.ok(f"STORE 1:{min(before, a.expunge_first)} +FLAGS.SILENT (\\Deleted)")
            c.ok("EXPUNGE")
            data, _ = c.ok("SELECT INBOX")
            before = int(re.search(rb"\* (\d+) EXISTS", data).group(1))
        c.ok("LOGOUT")
        stop(p)  # the store closed again: the deliveries are sealed into the queue
        p, imap_port, lmtp_port = start(binary, a.root, scratch, name)
        # each run its own messages (batch: the run's number): the same ones delivered again
        # would find their bodies stored already, and the second server of a round would
        # skip the compression and the blob writes the first paid for
        msgs = lmtp_messages(a.messages, 13, batch * a.messages)
        t0 = time.perf_counter()
        ok = lmtp_parallel(lmtp_port, a.user, msgs, a.senders)
        deliver_s = time.perf_counter() - t0
        if ok != a.messages:
            raise RuntimeError(f"{name}: {ok} of {a.messages} accepted")
        if a.perf == name:
            hz = os.environ.get("PERF_HZ", "499")  # samples a second
            perf = subprocess.Popen(["perf", "record", "-q", "--call-graph", "dwarf", "-F", hz,
                                     "-o", f"perf-{name}-{r}.data", "-p", str(p.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        elif a.strace == name:
            perf = subprocess.Popen(["strace", "-f", "-T", "-tt", "-e",
                                     "trace=fsync,fdatasync,unlink,rename,openat,pwrite64,pread64",
                                     "-o", f"strace-{name}-{r}.txt", "-p", str(p.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.0)
        cpu0 = cpu_s(p.pid)
        t0 = time.perf_counter()
        c = Imap(imap_port)
        c.ok(f'LOGIN "{a.user}" "{password}"')
        data, _ = c.ok("SELECT INBOX")
        login_select = time.perf_counter() - t0
        login_cpu = cpu_s(p.pid) - cpu0
        m = re.search(rb"\* (\d+) EXISTS", data)
        seen = int(m.group(1)) if m else 0
        exists_at_select = seen
        want, noops = before + a.messages, 0
        if a.wait == "idle":
            seen = wait_exists_idle(c, seen, want, time.monotonic() + 600)
        while seen < want and time.perf_counter() - t0 < 600:
            data, _ = c.ok("NOOP")
            noops += 1
            for m in re.finditer(rb"\* (\d+) EXISTS", data):
                seen = max(seen, int(m.group(1)))
        visible = time.perf_counter() - t0
        cpu = cpu_s(p.pid) - cpu0
        c.ok("LOGOUT")
        if seen != want:
            raise RuntimeError(f"{name}: EXISTS {seen}, expected {want}")
        return {"server": name, "round": r, "before": before, "deliver_s": round(deliver_s, 2),
                "login_select_ms": round(login_select * 1000, 1),
                "login_select_cpu_ms": round(login_cpu * 1000, 1),
                "exists_at_select": exists_at_select - before,
                "all_visible_ms": round(visible * 1000, 1), "noops": noops,
                "server_cpu_s": round(cpu, 2)}
    finally:
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--server", action="append", required=True, help="NAME=BINARY")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=1200)
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--perf", default="")
    ap.add_argument("--strace", default="")
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("--wait", choices=("noop", "idle"), default="noop")
    ap.add_argument("--expunge-first", type=int, default=0)
    ap.add_argument("--first-batch", type=int, default=0,
                    help="the first run's messages (batch * --messages on); another run on "
                         "the same ROOT starts past the last one's to deliver new messages")
    a = ap.parse_args()
    EXTRA.extend(a.server_arg)
    password = open(a.password_file).read().strip()
    servers = [s.split("=", 1) for s in a.server]
    scratch = tempfile.mkdtemp(prefix="drain_big.")
    runs = []
    for r in range(a.rounds):
        order = servers if r % 2 == 0 else servers[::-1]
        for name, binary in order:
            run = one_run(a, name, binary, r, scratch, password, len(runs) + a.first_batch)
            print(json.dumps(run), flush=True)
            runs.append(run)
    print(f"\n| server | LOGIN + SELECT ms | its server CPU ms | all {a.messages} visible ms |"
          f" per delivery ms | server CPU s | ratio (first / this) |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for name, _ in servers:
        rs = [x for x in runs if x["server"] == name]
        ls = statistics.median(x["login_select_ms"] for x in rs)
        lc = statistics.median(x["login_select_cpu_ms"] for x in rs)
        av = statistics.median(x["all_visible_ms"] for x in rs)
        cpu = statistics.median(x["server_cpu_s"] for x in rs)
        base = base or (ls, av)
        print(f"| {name} | {ls:.0f} | {lc:.0f} | {av:.0f} | {av / a.messages:.2f} | {cpu:.2f} |"
              f" {base[0] / ls:.2f} / {base[1] / av:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
