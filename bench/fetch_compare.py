#!/usr/bin/env python3
"""fetch_compare.py -- two mailvaultd builds side by side on one big mailbox (issue 13): "UID
FETCH of 50 random whole messages", the bench's row, from a cold page cache (every file of
the server's store root evicted first) or hot. Both servers run at once, each on its own copy
of the store; every round asks both for the same 50 messages, in alternating order, so the
disk's and the machine's moods fall on both. Medians of the times, of the disk bytes read (the
server's /proc/PID/io) and of the per-round ratio old / new (above 1: the new build is faster).

USAGE
  bench/fetch_compare.py --old BIN --new BIN --root DIR --user ADDR --password-file FILE
                         [--new-root DIR --new-password-file FILE] [--rounds N] [--hot]
                         [--work DIR]
  DIR is a store root (e.g. the big-mailbox benchmark's BIGMAIL_STORE_CACHE/10000/mailvault);
  each server gets its own copy of it under --work (default /tmp/fetch_compare). --new-root
  gives the new build a store of its own, made from the same messages (same UIDs), e.g. to
  compare two layouts with one build as --old and --new. Not part of make test (it times
  things) nor of make bench (bench/bigmail_compare.sh is).
"""
import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bigmail  # noqa: E402  (Imap, wait_port, evict)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def disk_read_bytes(pid):
    for line in open(f"/proc/{pid}/io"):
        key, value = line.split(":")
        if key == "read_bytes":
            return int(value)
    return 0


def start(name, binary, root, user, password):
    port, lmtp = free_port(), free_port()
    env = dict(os.environ, MAILVAULTD_ALLOW_ROOT="yes")
    log = open(os.path.join(os.path.dirname(root), f"{name}.log"), "ab")
    proc = subprocess.Popen([binary, "--listen=127.0.0.1", f"--imap-port={port}",
                             f"--lmtp-port={lmtp}", f"--root={root}"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    if not bigmail.wait_port(port, proc):
        sys.exit(f"fetch_compare: {name} server did not start (see {log.name})")
    client = bigmail.Imap(port)
    client.command(f'LOGIN "{user}" "{password}"')
    client.command("SELECT INBOX")
    _, data, _ = client.command("UID SEARCH ALL")
    uids = [int(x) for line in data.split(b"\r\n") if line.startswith(b"* SEARCH")
            for x in line.split()[2:]]
    return proc, client, uids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--new-root")
    ap.add_argument("--new-password-file")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--hot", action="store_true", help="the same 50 messages, never evicted")
    ap.add_argument("--work", default="/tmp/fetch_compare")
    a = ap.parse_args()
    if a.rounds < 2:
        ap.error("--rounds: at least 2 (the ratio's quartiles need two rounds)")
    source = {"old": (a.root, a.password_file),
              "new": (a.new_root or a.root, a.new_password_file or a.password_file)}
    servers = {}
    try:
        for name, binary in (("old", a.old), ("new", a.new)):
            root = os.path.join(a.work, name, "mailvault")
            shutil.rmtree(os.path.dirname(root), ignore_errors=True)
            os.makedirs(os.path.dirname(root), mode=0o700)
            shutil.copytree(source[name][0], root, symlinks=True)
            password = open(source[name][1]).read().strip()
            servers[name] = start(name, binary, root, a.user, password) + (root,)
        if servers["old"][2] != servers["new"][2]:
            sys.exit("fetch_compare: the two copies list different UIDs")
        uids = servers["old"][2]
        times = {"old": [], "new": []}
        disk = {"old": [], "new": []}
        ratios = []
        for r in range(-2, a.rounds):  # two rounds of warm-up, not counted
            rng = random.Random(7000 if a.hot else 7000 + r)
            pick = sorted(rng.sample(range(len(uids)), min(50, len(uids))))
            cmd = "UID FETCH " + ",".join(str(uids[i]) for i in pick) + " (BODY.PEEK[])"
            took = {}
            for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                proc, client, _, root = servers[name]
                if not a.hot:
                    bigmail.evict([root])
                before = disk_read_bytes(proc.pid)
                status, _, secs = client.command(cmd)
                if not status.startswith(b"OK"):
                    sys.exit(f"fetch_compare: {name}: {status!r}")
                took[name] = secs * 1e3
                if r >= 0:
                    times[name].append(secs * 1e3)
                    disk[name].append((disk_read_bytes(proc.pid) - before) / 1024)
            if r >= 0:
                ratios.append(took["old"] / took["new"])
    finally:
        for proc, *_ in servers.values():
            proc.terminate()
            proc.wait()
    med = statistics.median
    q = statistics.quantiles(ratios, n=4)
    print(f"UID FETCH of 50 random whole messages, {'hot' if a.hot else 'evicted'}, "
          f"{a.rounds} rounds")
    for name in ("old", "new"):
        print(f"  {name}: {med(times[name]):.2f} ms, {med(disk[name]):.0f} KB from the disk")
    print(f"  old / new: {med(ratios):.3f} (quartiles {q[0]:.3f}-{q[2]:.3f})")


if __name__ == "__main__":
    main()
