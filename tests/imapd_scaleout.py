#!/usr/bin/env python3
"""imapd_scaleout.py -- the client side of tests/cli_scaleout.sh: two mailvaultd nodes behind
one private Dovecot 2.3 proxy (contrib/dovecot-proxy/, docs/SCALEOUT.md, issue 11). Every
connection goes to the PROXY; what landed on which node the shell script checks with the CLI
on each node's root.

USAGE
  imapd_scaleout.py route    --imap P --lmtp P --user A:PW --user2 B:PW
  imapd_scaleout.py sessions --imap P --user A:PW --count 25
  imapd_scaleout.py failures --imap P --user A:PW --user2 B:PW --bound-s S --other-bound-s S
  imapd_scaleout.py load     --imap P --lmtp P --user A:PW --acks FILE --stop-file FILE
  imapd_scaleout.py verify   --acks FILE --events FILE --new MBOX --old MBOX
  (P: the proxy's ports; A:PW an address and its password, split at the first ':')

WHAT EACH STEP CHECKS
  route     LOGIN as --user, SELECT, APPEND, FETCH it back; AUTHENTICATE PLAIN (SASL-IR) as
            --user2, the same; one LMTP transaction to both users: two 250 replies. The
            Message-IDs are <route-imap-USER@scaleout.test> and <route-lmtp@scaleout.test>.
  sessions  --count concurrent sessions of --user, each from its own client address
            (127.0.1.N: Linux routes all of 127.0.0.0/8 to loopback; the proxy passes it on
            as x-originating-ip), all logged in and SELECTed at once, then NOOP and LOGOUT.
  failures  --user fails LOGIN 4 times from 127.0.2.1; every answer is
            NO [AUTHENTICATIONFAILED] (not [UNAVAILABLE], the proxy's timeout answer) within
            --bound-s; then --user2, from 127.0.2.2, mistypes once (answered
            [AUTHENTICATIONFAILED] within --other-bound-s: only a node that counted the first
            user's failures against the proxy's address would wait longer) and logs in.
  load      until --stop-file exists: 2 LMTP senders (one message per transaction) and 2
            IMAP appenders (sessions of at most 5 APPENDs, then LOGOUT) for --user, each
            message with its own Message-ID. Every acknowledged message (LMTP 250, APPEND
            OK) is a line "T kind message-id" in --acks (T: time.time()). A definite refusal
            (LMTP 4xx, APPEND/LOGIN NO) is retried with the same Message-ID, as an MTA
            retries a deferred message; an unknown outcome (the connection broke before the
            reply) is a line "T uncertain-KIND message-id" and the next try gets a new one.
  verify    from --acks, --events (lines "NAME T": release_start, release_done,
            route_switched) and two mbox files (the user's INBOX on the new node, and the old
            node's store as it is at the end): every acknowledged message is on the new node
            exactly once (0 lost, 0 duplicated), an uncertain one at most once; on the old
            node nothing acknowledged after release_done; acknowledgements after the switch
            (both kinds); prints the unavailability window (release_start to the first
            acknowledgement after release_done) as information.
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import base64
import collections
import mailbox
import os
import socket
import ssl
import threading
import time

import imapd_common

results = imapd_common.Results()
check = results.report

PROXY = "127.0.0.1"
TLS = ssl.create_default_context()  # trusts --cafile (the test's certificate), set in main
PACE_S = 0.1  # a load thread's pause between two messages: continuous, not a flood


class SourcedImap(imapd_common.Imap):
    """imapd_common.Imap from a chosen local address (the client's address the proxy sees),
    with STARTTLS first as a mail client does: the proxy (disable_plaintext_auth = yes)
    refuses a plaintext password from any address but its own."""

    def __init__(self, port, timeout_s, src="127.0.0.1"):  # pylint: disable=super-init-not-called
        self.sock = socket.create_connection((PROXY, port), timeout=timeout_s,
                                             source_address=(src, 0))
        self.buf = b""
        self.n = 0
        self.tag_prefix = b"s"
        self.greeting, _ = self.read_response()
        _, tagged = self.command("STARTTLS")
        if b" OK" not in tagged:
            raise OSError("STARTTLS refused: %r" % tagged)
        self.sock = TLS.wrap_socket(self.sock, server_hostname="localhost")


class SourcedLmtp(imapd_common.Lmtp):
    """imapd_common.Lmtp from a chosen local address."""

    def __init__(self, port, timeout_s, src="127.0.0.1"):  # pylint: disable=super-init-not-called
        self.sock = socket.create_connection((PROXY, port), timeout=timeout_s,
                                             source_address=(src, 0))
        self.buf = b""
        self.reply()


def split_user(text):
    user, password = text.split(":", 1)
    return user, password


def message(msgid, subject, rcpt):
    return ("From: load@scaleout.test\r\nTo: %s\r\nSubject: %s\r\nMessage-ID: %s\r\n"
            "Date: Tue, 01 Dec 2026 12:00:00 +0000\r\n\r\nbody of %s\r\n"
            % (rcpt, subject, msgid, msgid)).encode()


def lmtp_send(port, sender, rcpts, data, timeout_s=60, src="127.0.0.1"):
    """One LMTP transaction through the proxy from src: the replies per recipient (code,
    line) after DATA, or the refusal of a RCPT in its place. Raises on a broken connection."""
    l = SourcedLmtp(port, timeout_s, src)
    try:
        code, line = l.cmd("LHLO scaleout.test")
        if code != 250:
            raise RuntimeError("LHLO: %r" % line)
        code, line = l.cmd("MAIL FROM:<%s>" % sender)
        if code != 250:
            return [(code, line)] * len(rcpts)
        accepted, replies = [], {}
        for r in rcpts:
            code, line = l.cmd("RCPT TO:<%s>" % r)
            if code == 250:
                accepted.append(r)
            else:
                replies[r] = (code, line)
        if accepted:
            code, line = l.cmd("DATA")
            if code != 354:
                for r in accepted:
                    replies[r] = (code, line)
            else:
                body = data.replace(b"\r\n.", b"\r\n..")
                l.sock.sendall(body + b".\r\n")
                for r in accepted:
                    replies[r] = l.reply()
        try:
            l.cmd("QUIT")
        except (OSError, EOFError):
            pass
        return [replies[r] for r in rcpts]
    finally:
        l.close()


# ---- route -------------------------------------------------------------------------------------


def fetch_has(c, msgid):
    """The message with that Message-ID is in the selected mailbox, by FETCH of its bytes."""
    untagged, tagged = c.command("UID SEARCH HEADER Message-ID %s" % msgid)
    uids = [u for r in untagged for u in r[0].split()[2:] if r[0].startswith(b"* SEARCH")]
    if b" OK" not in tagged or not uids:
        return False
    untagged, tagged = c.command(b"UID FETCH " + uids[0] + b" (BODY.PEEK[])")
    return b" OK" in tagged and any(msgid.encode() in lit for r in untagged for lit in r[1])


def cmd_route(a):
    user, pw = split_user(a.user)
    user2, pw2 = split_user(a.user2)
    for who, how in ((user, "LOGIN"), (user2, "AUTHENTICATE PLAIN")):
        password = pw if who == user else pw2
        c = SourcedImap(a.imap, 30)
        try:
            if how == "LOGIN":
                _, tagged = c.command('LOGIN "%s" "%s"' % (who, password))
            else:
                sasl = base64.b64encode(b"\0" + who.encode() + b"\0" + password.encode())
                _, tagged = c.command(b"AUTHENTICATE PLAIN " + sasl)
            check("route: %s as %s through the proxy" % (how, who), b" OK" in tagged,
                  repr(tagged))
            _, tagged = c.command("SELECT INBOX")
            check("route: SELECT INBOX as %s" % who, b" OK" in tagged, repr(tagged))
            msgid = "<route-imap-%s@scaleout.test>" % who.split("@")[0]
            _, tagged = c.command("APPEND INBOX", message(msgid, "routed append", who))
            check("route: APPEND as %s" % who, b" OK" in tagged, repr(tagged))
            check("route: FETCH as %s returns the appended message" % who, fetch_has(c, msgid))
            c.command("LOGOUT")
        finally:
            c.close()
    replies = lmtp_send(a.lmtp, "route@scaleout.test", [user, user2],
                        message("<route-lmtp@scaleout.test>", "routed delivery",
                                "%s, %s" % (user, user2)), src="127.0.4.1")
    check("route: LMTP through the proxy, one transaction to a user of each node: 250 each",
          all(code == 250 for code, _ in replies), repr(replies))
    return results


# ---- sessions ----------------------------------------------------------------------------------


def cmd_sessions(a):
    user, pw = split_user(a.user)
    n = a.count
    out = [None] * n
    conns = [None] * n
    hold = threading.Event()

    def one(i):
        try:
            c = SourcedImap(a.imap, 60, "127.0.1.%d" % (i + 1))
            conns[i] = c
            _, tagged = c.command('LOGIN "%s" "%s"' % (user, pw))
            if b" OK" in tagged:
                _, tagged = c.command("SELECT INBOX")
            out[i] = tagged
            hold.wait(120)
        except (OSError, EOFError) as e:
            out[i] = repr(e).encode()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while any(o is None for o in out) and time.monotonic() < deadline:
        time.sleep(0.05)
    ok = sum(1 for o in out if o is not None and b" OK" in o)
    check("sessions: %d concurrent proxied sessions (client addresses 127.0.1.1-%d) all "
          "logged in and SELECTed" % (n, n), ok == n,
          "%d of %d: %r" % (ok, n, [o for o in out if o is None or b" OK" not in o][:3]))
    alive = 0
    for c in conns:
        try:
            if c is not None and b" OK" in c.command("NOOP")[1]:
                alive += 1
        except (OSError, EOFError):
            pass
    check("sessions: all %d answer NOOP while all are open" % n, alive == n, "%d" % alive)
    hold.set()
    for t in threads:
        t.join(60)
    for c in conns:
        if c is not None:
            try:
                c.command("LOGOUT")
            except (OSError, EOFError):
                pass
            c.close()
    return results


# ---- failures ----------------------------------------------------------------------------------


def timed_login(port, src, user, password):
    c = SourcedImap(port, 60, src)
    try:
        start = time.monotonic()
        _, tagged = c.command('LOGIN "%s" "%s"' % (user, password))
        return tagged, time.monotonic() - start
    finally:
        c.close()


def cmd_failures(a):
    user, _ = split_user(a.user)
    user2, pw2 = split_user(a.user2)
    for i in range(4):
        tagged, secs = timed_login(a.imap, "127.0.2.1", user, "wrong password")
        check("failures: %s's failed login %d answered NO [AUTHENTICATIONFAILED]" % (user, i + 1),
              b"NO [AUTHENTICATIONFAILED]" in tagged, repr(tagged))
        check("failures: ... within %g s (Dovecot's login_proxy_timeout is 30 s)" % a.bound_s,
              secs < a.bound_s, "%.1f s" % secs)
        results.note("%s's failure %d answered in %.1f s" % (user, i + 1, secs))
    tagged, secs = timed_login(a.imap, "127.0.2.2", user2, "a typo")
    check("failures: then %s's first typo answered NO [AUTHENTICATIONFAILED]" % user2,
          b"NO [AUTHENTICATIONFAILED]" in tagged, repr(tagged))
    check("failures: ... within %g s (not slowed by %s's failures)" % (a.other_bound_s, user),
          secs < a.other_bound_s, "%.1f s" % secs)
    results.note("%s's typo answered in %.1f s" % (user2, secs))
    tagged, secs = timed_login(a.imap, "127.0.2.2", user2, pw2)
    check("failures: %s's right password logs in" % user2, b" OK" in tagged, repr(tagged))
    check("failures: ... within %g s" % a.other_bound_s, secs < a.other_bound_s, "%.1f s" % secs)
    return results


# ---- load --------------------------------------------------------------------------------------


class AckLog:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.counts = collections.Counter()

    def write(self, kind, msgid):
        with self.lock:
            self.f.write("%.6f %s %s\n" % (time.time(), kind, msgid))
            self.counts[kind] += 1


def lmtp_sender(a, user, n, acks, stop):
    seq = 0
    msgid = None
    while not os.path.exists(a.stop_file):
        if msgid is None:
            seq += 1
            msgid = "<lmtp-%d-%d@scaleout.test>" % (n, seq)
        try:
            (code, line), = lmtp_send(a.lmtp, "load@scaleout.test", [user],
                                      message(msgid, "lmtp load", user), timeout_s=60)
        except (OSError, EOFError, RuntimeError):
            acks.write("uncertain-lmtp", msgid)
            msgid = None
            time.sleep(0.05)
            continue
        if code == 250:
            acks.write("lmtp", msgid)
            msgid = None
            time.sleep(PACE_S)
        elif 400 <= code < 500:
            acks.counts["lmtp-4xx"] += 1
            time.sleep(0.05)  # deferred: the same message again, as an MTA retries
        else:
            acks.write("refused-lmtp-%d" % code, msgid)
            msgid = None
            time.sleep(0.05)
    stop.set()


def imap_appender(a, user, password, n, acks, stop):
    seq = 0
    msgid = None
    while not os.path.exists(a.stop_file):
        try:
            c = SourcedImap(a.imap, 60, "127.0.3.%d" % (n + 1))
        except OSError:
            time.sleep(0.05)
            continue
        try:
            _, tagged = c.command('LOGIN "%s" "%s"' % (user, password))
            if b" OK" not in tagged:
                acks.counts["login-no"] += 1
                if b"[UNAVAILABLE]" not in tagged:
                    acks.counts["login-no-other"] += 1
                time.sleep(0.05)
                continue
            for _ in range(5):
                if os.path.exists(a.stop_file):
                    break
                if msgid is None:
                    seq += 1
                    msgid = "<append-%d-%d@scaleout.test>" % (n, seq)
                try:
                    _, tagged = c.command("APPEND INBOX", message(msgid, "append load", user),
                                          plus=True)
                except (OSError, EOFError):
                    acks.write("uncertain-append", msgid)
                    msgid = None
                    raise
                if b" OK" in tagged:
                    acks.write("append", msgid)
                    msgid = None
                    time.sleep(PACE_S)
                else:
                    acks.counts["append-no"] += 1
                    break
            c.command("LOGOUT")
        except (OSError, EOFError):
            time.sleep(0.05)
        finally:
            c.close()
    stop.set()


def cmd_load(a):
    user, pw = split_user(a.user)
    acks = AckLog(a.acks)
    threads = []
    for n in range(2):
        threads.append(threading.Thread(target=lmtp_sender,
                                        args=(a, user, n, acks, threading.Event())))
        threads.append(threading.Thread(target=imap_appender,
                                        args=(a, user, pw, n, acks, threading.Event())))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.note("load: %s" % ", ".join("%s %d" % kv for kv in sorted(acks.counts.items())))
    check("load: the generator ran (LMTP and APPEND acknowledged)",
          acks.counts["lmtp"] > 0 and acks.counts["append"] > 0, repr(acks.counts))
    check("load: every refused login said [UNAVAILABLE]", acks.counts["login-no-other"] == 0,
          repr(acks.counts))
    return results


# ---- verify ------------------------------------------------------------------------------------


def mbox_ids(path):
    ids = collections.Counter()
    for msg in mailbox.mbox(path, create=False):
        ids[(msg["Message-ID"] or "").strip()] += 1
    return ids


def cmd_verify(a):
    acked, uncertain = {}, set()
    with open(a.acks) as f:
        for line in f:
            t, kind, msgid = line.split()
            if kind in ("lmtp", "append"):
                acked[msgid] = (float(t), kind)
            elif kind.startswith("uncertain-"):
                uncertain.add(msgid)
    events = {}
    with open(a.events) as f:
        for line in f:
            name, t = line.split()
            events[name] = float(t)
    new, old = mbox_ids(a.new), mbox_ids(a.old)
    load_ids = lambda ids: {m: n for m, n in ids.items() if "-" in m and "@scaleout.test" in m
                            and (m.startswith("<lmtp-") or m.startswith("<append-"))}
    new, old = load_ids(new), load_ids(old)
    lost = [m for m in acked if new.get(m, 0) == 0]
    dup = [m for m, n in new.items() if n > 1]
    stray = [m for m in new if m not in acked and m not in uncertain]
    kinds = collections.Counter(k for _, k in acked.values())
    results.note("verify: %d acknowledged (%s), %d uncertain; new node %d, old node %d"
                 % (len(acked), ", ".join("%s %d" % kv for kv in sorted(kinds.items())),
                    len(uncertain), sum(new.values()), sum(old.values())))
    check("verify: every acknowledged message is on the new node (0 lost)", not lost,
          "%d lost, e.g. %s" % (len(lost), lost[:5]))
    check("verify: no message twice on the new node (0 duplicated)", not dup,
          "%d duplicated, e.g. %s" % (len(dup), dup[:5]))
    check("verify: nothing on the new node that was refused (4xx / NO means not stored)",
          not stray, "%d, e.g. %s" % (len(stray), stray[:5]))
    late = [m for m in old if m in acked and acked[m][0] > events["release_done"]]
    unacked_old = [m for m in old if m not in acked and m not in uncertain]
    check("verify: nothing acknowledged after the release is on the old node", not late,
          "%d, e.g. %s" % (len(late), late[:5]))
    check("verify: the old node holds nothing that was refused", not unacked_old,
          "%s" % unacked_old[:5])
    check("verify: the old node's messages are all on the new node",
          all(m in new for m in old), "")
    after = collections.Counter(k for t, k in acked.values() if t > events["route_switched"])
    check("verify: LMTP and APPEND acknowledged after the route switch (served by the new "
          "node)", after["lmtp"] > 0 and after["append"] > 0, repr(after))
    before = collections.Counter(k for t, k in acked.values() if t < events["release_start"])
    check("verify: LMTP and APPEND acknowledged before the release (served by the old node)",
          before["lmtp"] > 0 and before["append"] > 0, repr(before))
    first = min((t for t, _ in acked.values() if t > events["release_done"]), default=None)
    if first is not None:
        results.note("unavailability window: %.2f s from the start of the release to the first "
                      "acknowledgement on the new node (release %.2f s, export + import + route "
                      "switch %.2f s)"
                      % (first - events["release_start"],
                         events["release_done"] - events["release_start"],
                         events["route_switched"] - events["release_done"]))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["route", "sessions", "failures", "load", "verify"])
    ap.add_argument("--imap", type=int)
    ap.add_argument("--lmtp", type=int)
    ap.add_argument("--user")
    ap.add_argument("--user2")
    ap.add_argument("--count", type=int, default=25)
    ap.add_argument("--bound-s", type=float, default=15.0)
    ap.add_argument("--other-bound-s", type=float, default=5.0)
    ap.add_argument("--acks")
    ap.add_argument("--stop-file")
    ap.add_argument("--events")
    ap.add_argument("--new")
    ap.add_argument("--old")
    ap.add_argument("--cafile", help="the proxy's certificate (STARTTLS is verified)")
    a = ap.parse_args()
    if a.cafile:
        TLS.load_verify_locations(a.cafile)
    globals()["cmd_" + a.step](a)
    results.summary()
    return 1 if results.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
