#!/usr/bin/env python3
"""migrate_login.py -- the first login to a store of an older schema version (the open
migrates it), old and new mailvaultd alternating, each round on a fresh copy of the store.

USAGE
  migrate_login.py --store-root ROOT --user ADDRESS --password-file FILE \\
                   --server NAME=BINARY ... [--rounds R] [--scratch DIR]
  ROOT holds the user's store at the old version (never written: each run copies it).
  Per round and server: copy ROOT, start the server on the copy, then
    - LOGIN + SELECT INBOX on one connection (timed: the migration runs inside it),
    - 0.5 s after the LOGIN was sent, an LMTP session to the same user: LHLO, MAIL FROM,
      RCPT TO (timed), DATA (timed),
    - a UID SEARCH TEXT for the corpus's word (the answer compared across servers),
  then polls (NOOP every 0.5 s, up to --finish-s) for the server's log line that says the
  full-text move is over (new server only). One JSON line per run, medians per server.
The corpus's word and its expected count come from --meta (bench/bigmail_corpus.py's
meta.json).
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bigmail import Imap  # noqa: E402


def start(binary, root, scratch, name):
    ports = os.path.join(scratch, name + ".ports")
    if os.path.exists(ports):
        os.unlink(ports)
    log_path = os.path.join(scratch, name + ".log")
    log = open(log_path, "ab")
    env = dict(os.environ, MAILVAULTD_ALLOW_ROOT="yes")
    p = subprocess.Popen([binary, "--listen=127.0.0.1", "--imap-port=0", "--lmtp-port=0",
                          "--root=" + root, "--ports-file=" + ports, "--log-level=info"],
                         stdout=log, stderr=log, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(ports) and os.path.getsize(ports) > 0:
            kv = dict(line.strip().split("=", 1) for line in open(ports) if "=" in line)
            if "imap" in kv and "lmtp" in kv:
                return p, int(kv["imap"]), int(kv["lmtp"]), log_path
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(name + ": no ports file")


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def lmtp_rcpt(port, user, out, delay_s):
    """After delay_s (the login under way), LHLO, MAIL FROM, RCPT TO (timed), DATA of one small
    message, QUIT."""
    import socket
    time.sleep(delay_s)
    s = socket.create_connection(("127.0.0.1", port), timeout=600)
    f = s.makefile("rb")

    def reply():
        while True:
            line = f.readline()
            if not line or line[3:4] != b"-":
                return line

    reply()
    s.sendall(b"LHLO bench\r\n")
    reply()
    s.sendall(b"MAIL FROM:<bench@example.net>\r\n")
    reply()
    t0 = time.perf_counter()
    s.sendall(f"RCPT TO:<{user}>\r\n".encode())
    r = reply()
    out["rcpt_s"] = time.perf_counter() - t0
    out["rcpt_reply"] = r.decode(errors="replace").strip()
    s.sendall(b"DATA\r\n")
    reply()
    t0 = time.perf_counter()
    s.sendall(b"From: bench@example.net\r\nSubject: during the migration\r\n\r\nhello\r\n.\r\n")
    r = reply()
    out["data_s"] = time.perf_counter() - t0
    out["data_reply"] = r.decode(errors="replace").strip()
    s.sendall(b"QUIT\r\n")
    s.close()


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def one_run(a, name, binary, r, password, word):
    root = os.path.join(a.scratch, "root")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(a.store_root, root)
    for d, _, files in os.walk(root):
        os.chmod(d, 0o700)
        for f in files:
            os.chmod(os.path.join(d, f), 0o600)
    p, imap_port, lmtp_port, log_path = start(binary, root, a.scratch, f"{name}-{r}")
    res = {"server": name, "round": r}
    try:
        c = Imap(imap_port)
        cpu0 = cpu_s(p.pid)
        lm = {}
        t = threading.Thread(target=lmtp_rcpt, args=(lmtp_port, a.user, lm, 0.5))
        t.start()
        t0 = time.perf_counter()
        c.ok(f'LOGIN "{a.user}" "{password}"')
        res["login_s"] = time.perf_counter() - t0
        data, _ = c.ok("SELECT INBOX")
        res["login_select_s"] = time.perf_counter() - t0
        res["login_select_cpu_s"] = cpu_s(p.pid) - cpu0
        t1 = time.perf_counter()
        data, _ = c.ok(f"UID SEARCH TEXT {word}")
        res["search_s"] = time.perf_counter() - t1
        m = re.search(rb"\* SEARCH([ 0-9]*)", data)
        res["search_hits"] = len(m.group(1).split()) if m else -1
        t.join(600)
        res.update(lm)
        deadline = time.monotonic() + a.finish_s
        res["moved_s"] = None
        while time.monotonic() < deadline:
            text = open(log_path, errors="replace").read()
            mm = re.search(r"full-text index moved in (\d+) ms", text)
            if mm:
                res["moved_s"] = int(mm.group(1)) / 1000
                break
            if "full-text index:" not in text:
                break  # this server moves nothing after the login
            c.ok("NOOP")
            time.sleep(0.5)
        data, _ = c.ok(f"UID SEARCH TEXT {word}")
        m = re.search(rb"\* SEARCH([ 0-9]*)", data)
        res["search_hits_after"] = len(m.group(1).split()) if m else -1
        c.ok("LOGOUT")
        res["log"] = [line.strip() for line in open(log_path, errors="replace")
                      if "migrate" in line][:4]
    finally:
        stop(p)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store-root", required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--server", action="append", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--finish-s", type=int, default=600)
    ap.add_argument("--scratch", default="migrate-scratch")
    a = ap.parse_args()
    os.makedirs(a.scratch, exist_ok=True)
    password = open(a.password_file).read().strip()
    word = json.load(open(a.meta))["search"]["text_word"]
    servers = [s.split("=", 1) for s in a.server]
    runs = []
    for r in range(a.rounds):
        for name, binary in servers:
            res = one_run(a, name, binary, r, password, word)
            print(json.dumps(res), flush=True)
            runs.append(res)
    for name, _ in servers:
        mine = [x for x in runs if x["server"] == name]
        summary = {k: statistics.median(x[k] for x in mine)
                   for k in ("login_select_s", "login_select_cpu_s", "rcpt_s", "data_s",
                             "search_s")}
        print(json.dumps({"server": name, "median": summary}), flush=True)


if __name__ == "__main__":
    main()
