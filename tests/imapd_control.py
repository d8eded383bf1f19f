#!/usr/bin/env python3
"""imapd_control.py -- mailvaultd's control socket driven by the CLI, as an operator would
(tests/cli_imapd_control.sh runs it against a running server):

  who     lists a logged-in session (user, client, selected mailbox) and its open store;
  kick    ends that session with "* BYE [UNAVAILABLE]"; the user may log in again;
  release while an APPEND loop and an LMTP loop run for the user: it exits 0; every message
          that was acknowledged (APPEND OK, LMTP 250) is in the released store, counted by
          Message-ID after `store export` + `store import` into a second root (the move);
          no attempt that begins after release returned is acknowledged (LMTP 4xx, LOGIN
          NO [UNAVAILABLE] or the session ended with BYE [UNAVAILABLE]); no ID is stored
          twice.

usage: imapd_control.py --imap PORT --lmtp PORT --mv MAILVAULT --root DIR --root2 DIR
                        --user ADDR:PASSWORD
Waits poll with generous deadlines; nothing here is timed.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

from imapd_common import Imap, Lmtp, Results, imap_login

DEADLINE_S = 60


def mv(args, *argv, **kw):
    return subprocess.run([args.mv, *argv], capture_output=True, text=True, timeout=120, **kw)


def who(args):
    p = mv(args, "who", "--root", args.root, "--json")
    if p.returncode != 0:
        return None
    return json.loads(p.stdout)


def poll(what, deadline_s=DEADLINE_S):
    """what() until it is truthy, up to deadline_s; its last value."""
    end = time.monotonic() + deadline_s
    while True:
        v = what()
        if v or time.monotonic() > end:
            return v
        time.sleep(0.05)


def message(mid, via):
    return ("From: load@example.net\r\nTo: %s\r\nSubject: %s\r\nMessage-ID: <%s>\r\n\r\n"
            "body of %s\r\n" % ("user", via, mid, mid)).encode()


class Load:
    """APPEND and LMTP loops: what was acknowledged, and what was after release returned."""

    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.acked = []            # Message-IDs acknowledged
        self.acked_after = []      # ... by attempts that began after release returned
        self.refused_after = {"append": 0, "lmtp": 0}
        self.released_at = None    # time.monotonic() when release returned
        self.stop = False
        self.errors = []

    def after(self, started):
        return self.released_at is not None and started > self.released_at

    def record(self, started, mid, ok, kind):
        with self.lock:
            if ok:
                self.acked.append(mid)
                if self.after(started):
                    self.acked_after.append(mid)
            elif self.after(started):
                self.refused_after[kind] += 1

    def done_enough(self):
        with self.lock:
            return self.refused_after["append"] >= 3 and self.refused_after["lmtp"] >= 3

    def append_loop(self):
        user, pw = self.a.user.split(":", 1)
        n, c = 0, None
        while not self.stop:
            n += 1
            mid = "append-%d@control.test" % n
            started = time.monotonic()
            ok = False
            try:
                if c is None:
                    c = Imap(self.a.imap, 30, tag_prefix=b"a")
                    _, tagged = c.command('LOGIN "%s" "%s"' % (user, pw))
                    if b" OK" not in tagged:
                        c.close()
                        c = None
                        if b"[UNAVAILABLE]" not in tagged:
                            self.errors.append("LOGIN: %r" % tagged)
                        self.record(started, mid, False, "append")
                        time.sleep(0.02)
                        continue
                _, tagged = c.command("APPEND INBOX", literal=message(mid, "append"))
                ok = b" OK" in tagged
                if not ok:
                    self.errors.append("APPEND: %r" % tagged)
            except (EOFError, OSError):
                c = None  # BYE [UNAVAILABLE] and closed: log in again
            self.record(started, mid, ok, "append")

    def lmtp_loop(self):
        user = self.a.user.split(":", 1)[0]
        n = 0
        while not self.stop:
            n += 1
            mid = "lmtp-%d@control.test" % n
            started = time.monotonic()
            ok = False
            try:
                c = Lmtp(self.a.lmtp, 30)
                c.cmd("LHLO control.test")
                c.cmd("MAIL FROM:<load@example.net>")
                code, line = c.cmd("RCPT TO:<%s>" % user)
                if code == 250:
                    code, _ = c.cmd("DATA")
                    if code == 354:
                        body = message(mid, "lmtp").replace(b"\r\n.", b"\r\n..")
                        c.sock.sendall(body + b".\r\n")
                        code, line = c.reply()
                        ok = code == 250
                if not ok and not 400 <= code < 500:
                    self.errors.append("LMTP: %r" % line)
                c.cmd("QUIT")
                c.close()
            except (EOFError, OSError) as e:
                self.errors.append("LMTP: %r" % e)
            self.record(started, mid, ok, "lmtp")
            if not ok:
                time.sleep(0.02)


def stored_ids(a):
    """Message-IDs in the released store, moved as an operator would: export, import into
    root2, list there. None if a step fails (reported)."""
    user = a.user.split(":", 1)[0]
    archive = a.root2 + ".mvstore"
    steps = [("store", "export", user, archive, "--root", a.root),
             ("store", "import", user, archive, "--root", a.root2)]
    for s in steps:
        p = mv(a, *s)
        if p.returncode != 0:
            return None, "%s: exit %d: %s" % (" ".join(s[:2]), p.returncode, p.stderr.strip())
    env = dict(os.environ, MAILVAULT_PASSWORD=a.user.split(":", 1)[1])
    p = mv(a, "list", user, "--root", a.root2, "--json", env=env)
    if p.returncode != 0:
        return None, "list: exit %d: %s" % (p.returncode, p.stderr.strip())
    doc = json.loads(p.stdout)
    ids = [m.get("message_id") or "" for m in doc.get("messages", [])]
    return [i.strip("<>") for i in ids], ""


def main():
    ap = argparse.ArgumentParser()
    for k in ("--mv", "--root", "--root2", "--user"):
        ap.add_argument(k, required=True)
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--lmtp", type=int, required=True)
    a = ap.parse_args()
    r = Results()
    user, pw = a.user.split(":", 1)

    # who: a logged-in session with its selected mailbox, and the open store.
    c = imap_login(a.imap, user, pw, 30)
    c.command("SELECT INBOX")

    def listed():
        d = who(a)
        for u in (d or {}).get("users", []):
            if u["user"] == user and u["store"] is not None and any(
                    s["protocol"] == "imap" and s["mailbox"] == "INBOX" for s in u["sessions"]):
                return u
        return None
    u = poll(listed)
    r.report("who_lists_the_session", u is not None, "who said %r" % who(a))

    # kick: BYE [UNAVAILABLE], the connection closes; the user may come back.
    p = mv(a, "kick", user, "--root", a.root, "--json")
    r.report("kick_exits_0", p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr))
    try:
        d = json.loads(p.stdout)
    except ValueError:
        d = {}
    r.report("kick_json_counts_the_session",
             d.get("format_version") == 2 and d.get("user") == user and
             d.get("sessions_ended") == 1 and d.get("control_socket", "").endswith(".sock"),
             "kick --json said %r" % p.stdout)
    got = b""
    try:
        while True:
            got += c.line() + b"\n"
    except (EOFError, OSError):
        pass
    r.report("kick_sends_bye_unavailable", b"* BYE [UNAVAILABLE]" in got, "got %r" % got)
    try:
        again = imap_login(a.imap, user, pw, 30)
        again.command("LOGOUT")
        r.report("login_after_kick", True)
    except (RuntimeError, EOFError, OSError) as e:
        r.report("login_after_kick", False, repr(e))

    # release under load.
    load = Load(a)
    threads = [threading.Thread(target=load.append_loop), threading.Thread(target=load.lmtp_loop)]
    for t in threads:
        t.start()
    poll(lambda: sum(1 for m in load.acked if m.startswith("append")) >= 5 and
         sum(1 for m in load.acked if m.startswith("lmtp")) >= 5)
    p = mv(a, "release", user, "--root", a.root, "--note", "control test", "--wait-seconds", "30",
           "--json")
    load.released_at = time.monotonic()
    r.report("release_under_load_exits_0", p.returncode == 0,
             "exit %d: %s %s" % (p.returncode, p.stdout, p.stderr))
    try:
        d = json.loads(p.stdout)
    except ValueError:
        d = {}
    r.report("release_says_the_server_did_it",
             d.get("released") is True and d.get("by_server") is True, p.stdout)
    r.report("release_json_has_the_servers_figures",
             d.get("format_version") == 2 and d.get("user") == user and
             d.get("already_released") is False and isinstance(d.get("duration_ms"), int) and
             isinstance(d.get("sessions_ended"), int) and
             isinstance(d.get("store_handles_closed"), int) and d["store_handles_closed"] >= 1,
             p.stdout)
    poll(load.done_enough)
    load.stop = True
    for t in threads:
        t.join(60)
    r.report("load_ran_before_release",
             any(m.startswith("append") for m in load.acked) and
             any(m.startswith("lmtp") for m in load.acked), "acked %d" % len(load.acked))
    r.report("refused_after_release", load.done_enough(), "refused %r" % load.refused_after)
    r.report("nothing_acknowledged_after_release", not load.acked_after,
             "acknowledged after: %r" % load.acked_after[:5])
    r.report("load_saw_only_4xx_or_unavailable", not load.errors, "%r" % load.errors[:3])

    # every acknowledged message is in the store, once.
    ids, why = stored_ids(a)
    r.report("the_released_store_moves", ids is not None, why)
    ids = ids or []
    missing = sorted(set(load.acked) - set(ids))
    r.report("every_acknowledged_message_stored", not missing,
             "%d of %d missing, e.g. %r" % (len(missing), len(load.acked), missing[:5]))
    dups = sorted({i for i in ids if ids.count(i) > 1})
    r.report("no_message_stored_twice", not dups, "%r" % dups[:5])
    r.note("%d acknowledged (%d by APPEND, %d by LMTP), %d in the moved store" % (
        len(load.acked), sum(1 for m in load.acked if m.startswith("append")),
        sum(1 for m in load.acked if m.startswith("lmtp")), len(ids)))
    r.summary()


if __name__ == "__main__":
    sys.exit(main())
