#!/usr/bin/env python3
"""imapd_proxy.py -- mailvaultd behind a trusted proxy (issue 11, docs/SCALEOUT.md): this
client plays Dovecot's proxy from 127.0.0.1, passing each client's address as Dovecot 2.3
does: IMAP `ID ("x-originating-ip" ... "x-originating-port" ... "x-session-id" ...)` before
LOGIN (RFC 2971 ID; Dovecot's field names), LMTP `XCLIENT ADDR=... PORT=...` (Postfix's
XCLIENT, answered with the greeting again). Run by tests/cli_imapd_proxy.sh twice: against a
server with trusted_networks = 127.0.0.0/8 (--trusted) and against one without it.

USAGE
  imapd_proxy.py --imap PORT --lmtp PORT --delay-ms D --max-ms M --per-address N
                 --user ADDR:PASSWORD --user2 ADDR:PASSWORD [--trusted]

WHAT IT CHECKS
  trusted:   pre-login CAPABILITY lists ID; 25 concurrent sessions, each naming its own
             x-originating-ip, all log in while connections_per_address_max is N (< 25); one
             client address over N is refused when its ID arrives; one user's failed logins
             (from one client address) double that user's delay but another user's failure
             from another client address waits the base delay and its right password is
             answered at once; no failed login is answered later than M (+ margin); LHLO
             lists XCLIENT, XCLIENT ADDR/PORT/HELO is answered 220, LHLO again, a delivery
             goes through; an IPv6 ADDR is accepted, a bad one 501, XCLIENT in a transaction
             503.
  untrusted: no ID before login; the same 25 sessions: at most N get in, the rest are
             refused; ID's x-originating-ip changes nothing (the failures of two "clients"
             add up on the proxy's address); LHLO has no XCLIENT and XCLIENT gets 550.
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import threading
import time

import imapd_common

results = imapd_common.Results()
check = results.report


class ProxiedImap(imapd_common.Imap):
    """imapd_common.Imap that waits (up to 30 s) while the server refuses the connection:
    closed connections of an earlier step may not be gone from its count yet."""

    def __init__(self, port, timeout_s):  # pylint: disable=super-init-not-called
        deadline = time.monotonic() + 30
        while True:
            imapd_common.LineConnection.__init__(self, port, timeout_s)
            self.n = 0
            self.tag_prefix = b"p"
            greeting, _ = self.read_response()
            if not greeting.startswith(b"* BYE") or time.monotonic() > deadline:
                return
            self.close()
            time.sleep(0.1)


def id_command(ip, port, session):
    return ('ID ("name" "proxy-test" "x-originating-ip" "%s" "x-originating-port" "%d" '
            '"x-session-id" "%s")' % (ip, port, session))


def session(port, ip, user, password, hold, out, i):
    """A proxied session: connect, ID naming ip, LOGIN; out[i] is the LOGIN's tagged line (or
    the error); stays connected until hold is set."""
    c = None
    try:
        c = imapd_common.Imap(port, 60)
        c.command(id_command(ip, 40000 + i, "sess%d" % i))
        _, tagged = c.command('LOGIN "%s" "%s"' % (user, password))
        out[i] = tagged
        hold.wait(60)
    except (OSError, EOFError) as e:
        out[i] = repr(e).encode()
    finally:
        if c is not None:
            c.close()


def concurrent_sessions(port, user, password, n):
    hold = threading.Event()
    out = [None] * n
    threads = [threading.Thread(target=session, args=(port, "10.0.0.%d" % (i + 1), user, password,
                                                      hold, out, i)) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while any(o is None for o in out) and time.monotonic() < deadline:
        time.sleep(0.05)
    ok = sum(1 for o in out if o is not None and b" OK " in o)
    hold.set()
    for t in threads:
        t.join(60)
    return ok, out


def failed_login(port, ip, user, session_id):
    """(tagged, ms) of a wrong-password LOGIN on a fresh proxied connection from ip."""
    c = ProxiedImap(port, 60)
    try:
        c.command(id_command(ip, 50000, session_id))
        start = time.monotonic()
        _, tagged = c.command('LOGIN "%s" "wrong"' % user)
        return tagged, (time.monotonic() - start) * 1000
    finally:
        c.close()


def good_login(port, ip, user, password):
    c = ProxiedImap(port, 60)
    try:
        c.command(id_command(ip, 50001, "good"))
        start = time.monotonic()
        _, tagged = c.command('LOGIN "%s" "%s"' % (user, password))
        return tagged, (time.monotonic() - start) * 1000
    finally:
        c.close()


def lhlo(l):
    """LHLO's lines (the multi-line reply)."""
    l.sock.sendall(b"LHLO proxy.test\r\n")
    lines = []
    while True:
        line = l.line()
        lines.append(line)
        if line[3:4] != b"-":
            return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--lmtp", type=int, required=True)
    ap.add_argument("--delay-ms", type=int, required=True)
    ap.add_argument("--max-ms", type=int, required=True)
    ap.add_argument("--per-address", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--user2", required=True)
    ap.add_argument("--trusted", action="store_true")
    a = ap.parse_args()
    user, password = a.user.split(":", 1)
    user2, password2 = a.user2.split(":", 1)
    d, mx, n = a.delay_ms, a.max_ms, a.per_address
    mode = "trusted" if a.trusted else "untrusted"

    # Pre-login CAPABILITY: ID exactly for a trusted peer (Dovecot's proxy sends ID only then).
    c = imapd_common.Imap(a.imap, 30)
    untagged, _ = c.command("CAPABILITY")
    caps = b" ".join(u[0] for u in untagged).split()
    c.close()
    check("%s: pre-login CAPABILITY %s ID" % (mode, "lists" if a.trusted else "lacks"),
          (b"ID" in caps) == a.trusted, repr(caps))

    # 25 concurrent sessions with distinct client addresses.
    ok, out = concurrent_sessions(a.imap, user, password, 25)
    if a.trusted:
        check("trusted: 25 concurrent proxied sessions, distinct x-originating-ip, all logged "
              "in (per-address limit %d)" % n, ok == 25, "%d: %r" % (ok, out[:3]))
        # One client address over its own limit: refused when the ID naming it arrives.
        conns = []
        try:
            for i in range(n):
                cc = ProxiedImap(a.imap, 30)
                conns.append(cc)
                _, t = cc.command(id_command("10.9.9.9", 41000 + i, "same%d" % i))
            extra = imapd_common.Imap(a.imap, 30)
            conns.append(extra)
            extra.sock.sendall(b"x1 " + id_command("10.9.9.9", 41999, "over").encode() + b"\r\n")
            got = b""
            try:
                while True:
                    got += extra.line() + b"\n"
            except (OSError, EOFError):
                pass
            check("trusted: the %d-th connection of one client address is refused at its ID"
                  % (n + 1), b"BYE too many connections" in got, repr(got))
        finally:
            for cc in conns:
                cc.close()
    else:
        check("untrusted: of 25 concurrent sessions at most %d get in" % n,
              0 < ok <= n, "%d logged in" % ok)
        refused = sum(1 for o in out if o is not None and b" OK " not in o)
        check("untrusted: the others are refused", refused == 25 - ok, repr(out))

    # Failed logins: user fails 5 times from one client address, then user2 from another.
    ms = []
    for i in range(5):
        tagged, t = failed_login(a.imap, "10.1.0.1", user, "f%d" % i)
        check("%s: failure %d refused AUTHENTICATIONFAILED" % (mode, i + 1),
              b"NO [AUTHENTICATIONFAILED]" in tagged, repr(tagged))
        ms.append(t)
    expect = [min(d * (2 ** i), mx) for i in range(5)]
    check("%s: the user's delays double up to auth_fail_delay_max_ms (%s ms)" % (mode, expect),
          all(t >= 0.9 * e for t, e in zip(ms, expect)), "%s" % [round(t) for t in ms])
    check("%s: no failed login answered later than the bound %d ms (+1500 ms margin)"
          % (mode, mx), max(ms) <= mx + 1500, "%s" % [round(t) for t in ms])
    tagged, t2 = failed_login(a.imap, "10.1.0.2", user2, "other")
    check("%s: another user's failure refused" % mode, b"NO [AUTHENTICATIONFAILED]" in tagged,
          repr(tagged))
    if a.trusted:
        check("trusted: another user's first failure from another client waits the base "
              "delay, not the first user's", 0.9 * d <= t2 <= d + 1500, "%.0f ms" % t2)
    else:
        # Same socket address (the proxy's): x-originating-ip was ignored, counts add up.
        check("untrusted: x-originating-ip ignored: the proxy address's failures add up",
              t2 >= 0.9 * mx, "%.0f ms" % t2)
    tagged, t3 = good_login(a.imap, "10.1.0.2", user2, password2)
    check("%s: the other user's right password answered at once" % mode,
          b" OK " in tagged and t3 < 1500, "%r %.0f ms" % (tagged, t3))

    # LMTP XCLIENT.
    l = imapd_common.Lmtp(a.lmtp, 30)
    lines = lhlo(l)
    has = any(x.startswith(b"250-XCLIENT ") or x.startswith(b"250 XCLIENT ") for x in lines)
    check("%s: LHLO %s XCLIENT" % (mode, "lists" if a.trusted else "lacks"), has == a.trusted,
          repr(lines))
    code, line = l.cmd("XCLIENT ADDR=10.2.0.1 PORT=4444 HELO=mx.example+2Eorg")
    if a.trusted:
        check("trusted: XCLIENT answered with the greeting (220)", code == 220, repr(line))
        code, line = l.cmd("MAIL FROM:<a@example.org>")
        check("trusted: after XCLIENT, LHLO comes first (503)", code == 503, repr(line))
        lhlo(l)
        code, _ = l.cmd("MAIL FROM:<a@example.org>")
        code2, _ = l.cmd("RCPT TO:<%s>" % user)
        code3, _ = l.cmd("DATA")
        l.sock.sendall(b"Subject: via proxy\r\nMessage-ID: <proxy1@test>\r\n\r\nhi\r\n.\r\n")
        code4, line4 = l.reply()
        check("trusted: delivery after XCLIENT", (code, code2, code3, code4) == (250, 250, 354,
                                                                                  250), repr(line4))
        code, line = l.cmd("MAIL FROM:<a@example.org>")
        code, line = l.cmd("XCLIENT ADDR=10.2.0.2")
        check("trusted: XCLIENT in a transaction: 503", code == 503, repr(line))
        l.cmd("RSET")
        code, line = l.cmd("XCLIENT ADDR=not-an-address")
        check("trusted: XCLIENT with a bad ADDR: 501", code == 501, repr(line))
        code, line = l.cmd("XCLIENT ADDR=IPV6:2001:db8::7 PORT=25 LOGIN=[UNAVAILABLE]")
        check("trusted: XCLIENT with an IPv6 ADDR: 220", code == 220, repr(line))
    else:
        check("untrusted: XCLIENT refused (550)", code == 550, repr(line))
    l.cmd("QUIT")
    l.close()
    results.summary()


if __name__ == "__main__":
    main()
