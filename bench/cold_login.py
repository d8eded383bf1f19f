#!/usr/bin/env python3
"""cold_login.py -- the cold LOGIN + SELECT INBOX of one big store (issue 13), builds of
mailvaultd alternating: what bench/bigmail.py's login_select_cold measures, without Dovecot,
with more rounds and the LOGIN and the SELECT apart.

USAGE
  cold_login.py --root ROOT --user ADDRESS --password-file FILE --server NAME=BINARY ...
                [--rounds R]
  Per round and server (the order turned around every other round): the server stopped,
  every file under ROOT evicted from the page cache (sync, POSIX_FADV_DONTNEED: bigmail.py's
  eviction), the server started on ROOT, then on a fresh connection LOGIN and SELECT INBOX,
  each timed, and the server's CPU time over both (/proc, 10 ms ticks); LOGOUT, stop. One JSON
  line per run, then the medians per server. ROOT's store keeps its saved view between runs
  (the first SELECT ever of a store without one lists the mailbox: run a round first).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bigmail import Imap, evict  # noqa: E402
from drain_big import cpu_s, start, stop  # noqa: E402


def one_run(root, user, password, name, binary, scratch):
    evict([root])
    p, imap_port, _ = start(binary, root, scratch, name)
    try:
        cpu0 = cpu_s(p.pid)
        c = Imap(imap_port)
        st, _, t_login = c.command(f'LOGIN "{user}" "{password}"')
        st2, _, t_select = c.command("SELECT INBOX")
        cpu = cpu_s(p.pid) - cpu0
        if not st.startswith(b"OK") or not st2.startswith(b"OK"):
            raise RuntimeError(f"{name}: {st!r} / {st2!r}")
        c.command("LOGOUT")
        return {"server": name, "login_ms": round(t_login * 1000, 1),
                "select_ms": round(t_select * 1000, 1),
                "total_ms": round((t_login + t_select) * 1000, 1),
                "server_cpu_ms": round(cpu * 1000)}
    finally:
        stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--server", action="append", required=True, help="NAME=BINARY")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    servers = [s.split("=", 1) for s in a.server]
    password = open(a.password_file).read().strip()
    runs = {name: [] for name, _ in servers}
    with tempfile.TemporaryDirectory(prefix="cold_login.") as scratch:
        for r in range(a.rounds):
            for name, binary in (servers if r % 2 == 0 else servers[::-1]):
                run = one_run(a.root, a.user, password, name, binary, scratch)
                run["round"] = r
                print(json.dumps(run), flush=True)
                runs[name].append(run)
    print()
    print("| server | LOGIN ms | SELECT ms | LOGIN + SELECT ms | server CPU ms |")
    print("|---|---|---|---|---|")
    for name, rs in runs.items():
        med = {k: statistics.median(x[k] for x in rs)
               for k in ("login_ms", "select_ms", "total_ms", "server_cpu_ms")}
        print(f"| {name} | {med['login_ms']:.1f} | {med['select_ms']:.1f} | "
              f"{med['total_ms']:.1f} | {med['server_cpu_ms']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
