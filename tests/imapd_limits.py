#!/usr/bin/env python3
"""imapd_limits.py -- mailvaultd against hostile clients: the pre-login bounds, the login
and LMTP transaction deadlines, the two connection pools, the server-wide budgets and LMTP's
strictness (issue 15, items 1, 2 and 6). Run by tests/cli_imapd_limits.sh, which makes the
users and starts the servers.

USAGE
  imapd_limits.py functional --imap PORT --lmtp PORT --user ADDR:PASSWORD --user2 ADDR:PW
      against a server started with small limits (see cli_imapd_limits.sh);
  imapd_limits.py hostile --imap PORT --lmtp PORT --pid PID --user ADDR:PASSWORD
      against a release server with the default limits: 1,000 hostile connections.

WHAT IT CHECKS (functional)
  - before login: {n} over prelogin_bytes_max gets NO [TOOBIG] and no "+" (an APPEND's
    literal_max no longer applies); {n+} over it gets BYE and the connection ends, though
    the client goes on sending; a line over the bound gets BYE; LOGIN with literals and
    AUTHENTICATE PLAIN within it work, and after login an APPEND over the bound works;
  - login_timeout_s: a client trickling a byte every 0.2 s gets "* BYE login timeout" in
    time, while a logged-in session on the same server outlives the deadline;
  - the pools: with connections_max IMAP connections open and none logged in, a new
    connection closes the oldest (BYE) and logs in; LMTP still gets its 220 and delivers;
    the oldest is closed also when its failed login's answer is being held back (8 s);
  - line_max (1 MiB, the default) after login: an 80 KB UID set is taken; a line over
    1 MiB, sent in pieces, is answered with its own tag (BAD) once it ended, and the
    session goes on (NOOP); so is the rest of
    a command whose line after a literal is too long (nothing appended) and one that ends in
    a {n} the client then waits for (no "+"); a line without a readable tag gets an untagged
    BAD; one ending in {n+} gets BYE and the connection ends, and the literal's bytes, a
    CREATE, are never run as a command (before, an untagged BAD left the client waiting for
    its tag, and the bytes of such a literal were read as the next commands); a line past
    64 KiB while another session's APPEND holds most of literal_total_max: NO [UNAVAILABLE]
    with its tag, and taken once that session is gone;
  - literal_total_max: while one session holds most of it, another's {n} gets
    NO [UNAVAILABLE] and its {n+} BYE [UNAVAILABLE]; once the first is done the APPEND works;
  - user_sessions_max (4 here): a user's 5th session gets NO [UNAVAILABLE] naming it, a wrong
    password is still a failed login, another user logs in on the same connection, and after
    a LOGOUT the user logs in again;
  - LMTP: a recipient named three times (in several spellings) gets three 250s after DATA
    and one message; "<LF>.<LF>", "<LF>.<CRLF>" and "<CRLF>.<LF>" do not end DATA (the
    smuggled MAIL/RCPT/DATA after them is message text, stored as one message); only
    lmtp_rejected_recipients_max RCPTs are refused, the next ones get 452 4.5.3 until a new
    transaction; lmtp_transaction_timeout_s ends a trickled transaction with 421 4.4.2;
    lmtp_data_total_max gives 452 4.3.1 (never 5xx) to a message while another holds it.
WHAT IT CHECKS (hostile)
  - 1,000 connections from 50 loopback addresses that never log in (APPEND {60000000},
    60 KiB of an unfinished line, a trickle, 256 KiB of pipelined CAPABILITYs whose answers
    are never read) plus 50 that send APPEND {60000000+} and 1 MiB:
    the {n+} ones are closed, the server's RSS grows by at most HOSTILE_RSS_MAX_MIB, a normal
    login and an LMTP delivery succeed meanwhile (the oldest hostile connection is closed to
    make room: it gets the BYE).
  - then one user gives each of 2,000 messages its own 256 of 1,000 keywords of 100 bytes:
    a new session's SELECT grows the server's RSS by at most KW_RSS_MAX_MIB (the views kept
    each message's list as text, ~26 KB a message; now each name once, a list its numbers).
  Waits poll with generous deadlines; prints "PASS ..." / "FAIL ..." and "# N passed, N failed".
"""
import argparse
import base64
import resource
import socket
import sys
import time

import imapd_common

results = imapd_common.Results()
check = results.report

PRELOGIN_MAX = 65536  # the server's prelogin_bytes_max in both runs (the default)
HOSTILE_RSS_MAX_MIB = 96  # 1,000 x 64 KiB at most before login, plus 32 MiB of slack


def connect(port, source="127.0.0.1", timeout_s=30):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s,
                                    source_address=(source, 0))


class SourcedImap(imapd_common.Imap):
    """imapd_common.Imap from a chosen loopback address."""

    def __init__(self, port, source, timeout_s=30):  # pylint: disable=super-init-not-called
        self.sock = connect(port, source, timeout_s)
        self.buf = b""
        self.n = 0
        self.tag_prefix = b"h"
        self.read_response()  # greeting


def read_until_closed(sock, deadline_s):
    """Everything the peer sends until it closes (True) or deadline_s passes (False)."""
    data = b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        sock.settimeout(max(0.05, end - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def send_ignoring_close(sock, data):
    """Sends data; the server may close mid-way (that is the point): True if it did."""
    try:
        sock.sendall(data)
        return False
    except (BrokenPipeError, ConnectionResetError):
        return True


def imap_message_count(port, user, password, mailbox="INBOX"):
    c = imapd_common.imap_login(port, user, password)
    try:
        untagged, _ = c.command("STATUS %s (MESSAGES)" % mailbox)
        for text, _lits in untagged:
            if b"MESSAGES" in text:
                return int(text.rsplit(b"MESSAGES ", 1)[1].split(b")")[0])
        return -1
    finally:
        c.close()


def lmtp_replies(l, n):
    return [l.reply() for _ in range(n)]


# ---- functional ----------------------------------------------------------------------------

def prelogin(a):
    c = imapd_common.Imap(a.imap, 30)
    _, tagged = c.command("APPEND INBOX {60000000}")
    check("before login: APPEND {60000000} refused without '+'",
          b"NO [TOOBIG]" in tagged and b"before login" in tagged, repr(tagged))
    _, tagged = c.command("NOOP")
    check("... the connection goes on", b"OK" in tagged, repr(tagged))
    _, tagged = c.command("LOGIN {%d}" % (PRELOGIN_MAX + 1))
    check("before login: LOGIN {prelogin_bytes_max + 1} refused", b"NO [TOOBIG]" in tagged,
          repr(tagged))
    c.close()

    # {n+}: the client sends regardless; the server says BYE, reads nothing more, closes.
    s = connect(a.imap)
    s.recv(4096)
    closed_early = send_ignoring_close(s, b"p1 APPEND INBOX {1048576+}\r\n" + b"x" * 1048576)
    data, closed = read_until_closed(s, 20)
    check("before login: APPEND {1048576+} gets BYE [TOOBIG] and the connection closes",
          (closed or closed_early) and b"* BYE [TOOBIG]" in data, repr(data[:200]))
    s.close()

    s = connect(a.imap)
    s.recv(4096)
    send_ignoring_close(s, b"p2 LOGIN " + b"a" * (PRELOGIN_MAX + 10))
    data, closed = read_until_closed(s, 20)
    check("before login: an unfinished line over prelogin_bytes_max gets BYE and a close",
          closed and b"* BYE command too long before login" in data, repr(data[:200]))
    s.close()

    user, password = a.user.split(":", 1)
    c = imapd_common.Imap(a.imap, 30)
    c.sock.sendall(b"l1 LOGIN {%d+}\r\n%s {%d+}\r\n%s\r\n" % (
        len(user), user.encode(), len(password), password.encode()))
    _, tagged = c.until(b"l1")
    check("before login: LOGIN with LITERAL+ literals within the bound works", b"l1 OK" in tagged,
          repr(tagged))
    msg = b"Subject: big\r\n\r\n" + b"y" * (PRELOGIN_MAX * 2) + b"\r\n"
    _, tagged = c.command("APPEND INBOX", literal=msg)
    check("after login: an APPEND over prelogin_bytes_max works", b"OK" in tagged, repr(tagged))
    c.close()

    c = imapd_common.Imap(a.imap, 30)
    ir = base64.b64encode(("\0%s\0%s" % (user, password)).encode()).decode()
    _, tagged = c.command("AUTHENTICATE PLAIN " + ir)
    check("before login: AUTHENTICATE PLAIN works", b"OK" in tagged, repr(tagged))
    c.close()


def login_timeout(a):
    user, password = a.user.split(":", 1)
    logged = imapd_common.imap_login(a.imap, user, password)
    s = connect(a.imap)
    s.recv(4096)
    start = time.monotonic()
    data, closed = b"", False
    # A byte every 0.2 s: never idle; the login deadline (3 s) must end it anyway.
    while time.monotonic() - start < 30 and not closed:
        if send_ignoring_close(s, b"x"):
            closed = True
            break
        more, closed = read_until_closed(s, 0.2)
        data += more
    waited = time.monotonic() - start
    check("login_timeout_s: a trickling client gets BYE login timeout",
          closed and b"* BYE login timeout" in data, "%r after %.1f s" % (data[:100], waited))
    check("... after the deadline, not long after", 2.5 <= waited < 20, "%.1f s" % waited)
    s.close()
    _, tagged = logged.command("NOOP")
    check("login_timeout_s: a logged-in session outlives it", b"OK" in tagged, repr(tagged))
    logged.close()


def pools(a):
    """connections_max = 30, connections_per_address_max = 20, lmtp_connections_max = 2."""
    held = []
    for i in range(30):
        held.append(SourcedImap(a.imap, "127.0.3.%d" % (1 + i // 10)))
    user, password = a.user.split(":", 1)
    try:
        c = imapd_common.imap_login(a.imap, user, password)
        _, tagged = c.command("NOOP")
        check("IMAP full of clients not logged in: a new one logs in", b"OK" in tagged,
              repr(tagged))
        c.close()
    except (OSError, EOFError, RuntimeError) as e:
        check("IMAP full of clients not logged in: a new one logs in", False, repr(e))
    data, closed = read_until_closed(held[0].sock, 20)
    check("... the oldest one got BYE and was closed",
          closed and b"* BYE too many connections" in held[0].buf + data, repr(data))
    try:
        l = imapd_common.Lmtp(a.lmtp, 30)
        code1, _ = l.cmd("LHLO test")
        l.cmd("MAIL FROM:<pool@example.org>")
        code2, _ = l.cmd("RCPT TO:<%s>" % user)
        l.cmd("DATA")
        l.sock.sendall(b"Subject: pools\r\n\r\nbody\r\n.\r\n")
        code3, line = l.reply()
        check("IMAP full: LMTP has its own pool and delivers",
              code1 == 250 and code2 == 250 and code3 == 250, repr(line))
        l2 = imapd_common.Lmtp(a.lmtp, 30)
        try:
            l3 = imapd_common.LineConnection(a.lmtp, 30)
            line = l3.line()
            check("lmtp_connections_max (2): the third gets 421", line.startswith(b"421 "),
                  repr(line))
            l3.close()
        except (OSError, EOFError) as e:
            check("lmtp_connections_max (2): the third gets 421", False, repr(e))
        l2.close()
        l.close()
    except (OSError, EOFError) as e:
        check("IMAP full: LMTP has its own pool and delivers", False, repr(e))
    for h in held:
        h.close()


def log_has(path, needle, deadline_s):
    """Polls the server log until it holds needle (True) or deadline_s passes."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with open(path, "rb") as f:
            if needle in f.read():
                return True
        time.sleep(0.05)
    return False


def held_eviction(a):
    """A connection whose failed login's answer is held back (here 8 s: the third failure for
    one user) is not safe from being closed to make room: the oldest such one goes first."""
    ghost = "ghost-%d@example.org" % int(time.time())
    for n in (1, 2):  # 2 s, 4 s: the user's count climbs
        c = SourcedImap(a.imap, "127.0.4.%d" % n)
        c.command('LOGIN "%s" "wrong"' % ghost)
        c.close()
    x = SourcedImap(a.imap, "127.0.4.3")
    x.sock.sendall(b'x1 LOGIN "%s" "wrong"\r\n' % ghost.encode())
    check("held eviction: the third failure is held back (log)",
          log_has(a.log, ("login failed %s" % ghost).encode() + b" from 127.0.4.3", 30))
    others = [SourcedImap(a.imap, "127.0.5.%d" % (1 + i // 10)) for i in range(29)]
    user, password = a.user.split(":", 1)
    try:
        c = imapd_common.imap_login(a.imap, user, password)
        c.close()
        check("held eviction: IMAP full, a new login works", True)
    except (OSError, EOFError, RuntimeError) as e:
        check("held eviction: IMAP full, a new login works", False, repr(e))
    data, closed = read_until_closed(x.sock, 5)
    check("held eviction: the held connection (the oldest) made room",
          closed and b"* BYE too many connections" in data, repr(data))
    x.close()
    for o in others:
        o.close()


def long_lines(a):
    """line_max = 1 MiB (the default), literal_total_max = 200000."""
    user, password = a.user.split(":", 1)
    before = imap_message_count(a.imap, user, password)
    c = imapd_common.imap_login(a.imap, user, password)
    c.command("SELECT INBOX")
    uids = b",".join(b"%d" % (1 + i % 7) for i in range(20000))  # ~40 KB a copy
    _, tagged = c.command(b"UID FETCH " + uids + b"," + uids + b" (FLAGS)")
    check("line_max: an 80 KB UID set (past Dovecot's 64 KiB) is taken",
          b" OK" in tagged, repr(tagged[:200]))
    over = b" ".join([uids] * 27)  # past 1 MiB
    for piece in (b"t1 UID FETCH ", over[:500000], over[500000:], b" (FLAGS)\r\n"):
        c.sock.sendall(piece)
    line = c.line()
    check("... a line over 1 MiB, sent in pieces, gets its tagged BAD",
          line.startswith(b"t1 BAD ") and b"1048576" in line, repr(line[:200]))
    _, tagged = c.command("NOOP")
    check("... and the session goes on (NOOP OK)", b" OK" in tagged, repr(tagged))
    c.sock.sendall(b"(t2 SEARCH " + over + b"\r\n")
    line = c.line()
    check("... a line without a readable tag gets an untagged BAD", line.startswith(b"* BAD "),
          repr(line[:200]))
    c.sock.sendall(b"t3 APPEND INBOX {5}\r\n")
    line = c.line()
    c.sock.sendall(b"hello (\\Seen " + over + b")\r\n")
    line2 = c.line()
    check("... a command whose line after a literal is too long: tagged BAD",
          line.startswith(b"+") and line2.startswith(b"t3 BAD "), repr((line, line2[:200])))
    c.sock.sendall(b"t4 APPEND INBOX (" + over + b") {5}\r\n")
    line = c.line()
    check("... a too long line ending in {5}: tagged BAD, no '+'", line.startswith(b"t4 BAD "),
          repr(line[:200]))
    _, tagged = c.command("NOOP")
    check("... the session goes on after both", b" OK" in tagged, repr(tagged))
    # past 64 KiB a line draws on literal_total_max: while another session's APPEND holds
    # 150,000 of its 200,000, a 160 KB line (~94,000 bytes past 64 KiB) is refused for now
    s1 = imapd_common.imap_login(a.imap, user, password)
    s1.sock.sendall(b"b1 APPEND INBOX {150000}\r\n")
    plus = s1.line()
    long_set = b",".join([uids] * 4)  # 159,999 bytes
    c.sock.sendall(b"t5 UID FETCH " + long_set + b" (FLAGS)\r\n")
    line = c.line()
    check("... a 160 KB line while the budget is held: NO [UNAVAILABLE] with its tag",
          plus.startswith(b"+") and line.startswith(b"t5 NO [UNAVAILABLE]"), repr(line[:200]))
    s1.close()  # gives its share back
    deadline, tagged = time.monotonic() + 30, b""
    while time.monotonic() < deadline and b" OK" not in tagged:
        _, tagged = c.command(b"UID FETCH " + long_set + b" (FLAGS)")
    check("... and taken once that session is gone", b" OK" in tagged, repr(tagged[:200]))
    inject = b"t6 CREATE Injected\r\n"
    c.sock.sendall(b"t7 APPEND INBOX (" + over + b") {%d+}\r\n" % len(inject) + inject)
    data, closed = read_until_closed(c.sock, 20)
    check("... one ending in {n+}: BYE and the connection ends",
          closed and b"* BYE " in c.buf + data and b"t6 " not in data, repr(data[:200]))
    c.close()
    c = imapd_common.imap_login(a.imap, user, password)
    untagged, _ = c.command('LIST "" "Injected"')
    check("... the literal's bytes were not run as a command (no mailbox Injected)",
          not any(b"Injected" in t for t, _ in untagged), repr(untagged))
    c.command("LOGOUT")
    c.close()
    check("... nothing appended by any of them",
          imap_message_count(a.imap, user, password) == before, "")


def literal_budget(a):
    """literal_total_max = 200000."""
    user, password = a.user.split(":", 1)
    s1 = imapd_common.imap_login(a.imap, user, password)
    s2 = imapd_common.imap_login(a.imap, user, password)
    big = b"Subject: budget\r\n\r\n" + b"z" * (150000 - 21) + b"\r\n"
    s1.sock.sendall(b"b1 APPEND INBOX {%d}\r\n" % len(big))
    line = s1.line()
    check("literal_total_max: the first APPEND {150000} gets '+'", line.startswith(b"+"),
          repr(line))
    s1.sock.sendall(big[:100000])
    s2.sock.sendall(b"b2 APPEND INBOX {100000}\r\n")
    line = s2.line()
    check("... a second {100000} meanwhile gets NO [UNAVAILABLE] (transient)",
          line.startswith(b"b2 NO [UNAVAILABLE]"), repr(line))
    s1.sock.sendall(big[100000:] + b"\r\n")
    _, tagged = s1.until(b"b1")
    check("... the first APPEND completes", b"b1 OK" in tagged, repr(tagged))
    msg = b"Subject: again\r\n\r\n" + b"w" * 99000 + b"\r\n"
    _, tagged = s2.command("APPEND INBOX", literal=msg)
    check("... then the second one works", b"OK" in tagged, repr(tagged))
    s1.sock.sendall(b"b3 APPEND INBOX {%d}\r\n" % len(big))
    line = s1.line()
    s1.sock.sendall(big[:1000])
    s2.sock.sendall(b"b4 APPEND INBOX {100000+}\r\n")
    data, closed = read_until_closed(s2.sock, 20)
    check("... a {100000+} while the budget is held gets BYE [UNAVAILABLE]",
          line.startswith(b"+") and closed and b"* BYE [UNAVAILABLE]" in s2.buf + data,
          repr(data))
    s1.sock.sendall(big[1000:] + b"\r\n")
    _, tagged = s1.until(b"b3")
    check("... and the first session is unaffected", b"b3 OK" in tagged, repr(tagged))
    s1.close()
    s2.close()


def lmtp_start(a, rcpts):
    l = imapd_common.Lmtp(a.lmtp, 30)
    l.cmd("LHLO test")
    l.cmd("MAIL FROM:<sender@example.org>")
    codes = [l.cmd("RCPT TO:<%s>" % r)[0] for r in rcpts]
    return l, codes


def lmtp_dedupe(a):
    user, password = a.user.split(":", 1)
    local, domain = user.split("@")
    before = imap_message_count(a.imap, user, password)
    l, codes = lmtp_start(a, [user, local + "@" + domain.upper(), user])
    check("LMTP: a recipient named three times: three 250s", codes == [250, 250, 250],
          repr(codes))
    l.cmd("DATA")
    l.sock.sendall(b"Subject: dedupe\r\n\r\nonce\r\n.\r\n")
    replies = lmtp_replies(l, 3)
    check("... three replies after DATA, all 250", [r[0] for r in replies] == [250, 250, 250],
          repr(replies))
    code, _ = l.cmd("NOOP")
    check("... and no more", code == 250)
    l.close()
    after = imap_message_count(a.imap, user, password)
    check("... one message stored", after == before + 1, "%d -> %d" % (before, after))

    # More RCPTs of one name than lmtp_recipients_max (100): only distinct recipients count,
    # so none gets 452 (the MTA would send those again later: a second copy).
    before = after
    l, codes = lmtp_start(a, [user] * 150)
    check("LMTP: a recipient named 150 times: 150 250s", codes == [250] * 150,
          repr(sorted(set(codes))))
    l.cmd("DATA")
    l.sock.sendall(b"Subject: dedupe 150\r\n\r\nonce\r\n.\r\n")
    replies = lmtp_replies(l, 150)
    check("... 150 replies after DATA, all 250", [r[0] for r in replies] == [250] * 150,
          repr(sorted(set(r[0] for r in replies))))
    l.close()
    after = imap_message_count(a.imap, user, password)
    check("... one message stored", after == before + 1, "%d -> %d" % (before, after))


def lmtp_smuggling(a):
    user, password = a.user.split(":", 1)
    # As stored: after CRLF a line's leading dot is unstuffed (the dot of "<CRLF>.<LF>").
    for name, mark, stored in ((b"LF.LF", b"\n.\n", b"\n.\n"), (b"LF.CRLF", b"\n.\r\n", b"\n.\r\n"),
                               (b"CRLF.LF", b"\r\n.\n", b"\r\n\n")):
        before = imap_message_count(a.imap, user, password)
        l, codes = lmtp_start(a, [user])
        l.cmd("DATA")
        smuggled = (b"Subject: smuggling " + name + b"\r\n\r\nfirst" + mark +
                    b"MAIL FROM:<evil@example.org>\r\nRCPT TO:<%s>\r\nDATA\r\n"
                    b"Subject: forged\r\n\r\nforged\r\n.\r\n" % user.encode())
        l.sock.sendall(smuggled)
        code, line = l.reply()
        check("LMTP: %s does not end DATA: one reply, 250" % name.decode(), code == 250,
              repr(line))
        code, line = l.cmd("NOOP")
        check("... the next reply is NOOP's, not a smuggled MAIL's (%s)" % name.decode(),
              line.startswith(b"250 2.0.0 ok"), repr(line))
        l.close()
        after = imap_message_count(a.imap, user, password)
        check("... one message stored (%s)" % name.decode(), after == before + 1,
              "%d -> %d" % (before, after))
        c = imapd_common.imap_login(a.imap, user, password)
        c.command("SELECT INBOX")
        untagged, _ = c.command("FETCH %d BODY.PEEK[TEXT]" % after)
        body = untagged[0][1][0] if untagged and untagged[0][1] else b""
        check("... holding the smuggled text as sent (%s)" % name.decode(),
              body.startswith(b"first" + stored + b"MAIL FROM:<evil@example.org>"), repr(body[:80]))
        c.close()


def lmtp_rejected(a):
    """lmtp_rejected_recipients_max = 3."""
    user, _ = a.user.split(":", 1)
    l, codes = lmtp_start(a, ["nobody1@example.org", "nobody2@example.org",
                              "nobody3@example.org", user, "nobody4@example.org"])
    check("LMTP: 3 refused recipients, then 452 4.5.3 for every RCPT (even a valid one)",
          codes == [550, 550, 550, 452, 452], repr(codes))
    l.cmd("RSET")
    l.cmd("MAIL FROM:<sender@example.org>")
    code, _ = l.cmd("RCPT TO:<%s>" % user)
    check("... a new transaction starts over", code == 250, repr(code))
    l.close()


def lmtp_deadline(a):
    """lmtp_transaction_timeout_s = 3."""
    user, _ = a.user.split(":", 1)
    l, codes = lmtp_start(a, [user])
    l.cmd("DATA")
    start = time.monotonic()
    data, closed = b"", False
    while time.monotonic() - start < 30 and not closed:
        if send_ignoring_close(l.sock, b"x"):
            closed = True
            break
        more, closed = read_until_closed(l.sock, 0.2)
        data += more
    waited = time.monotonic() - start
    check("LMTP: a trickled DATA gets 421 4.4.2 at the transaction deadline",
          closed and b"421 4.4.2" in data and 2.5 <= waited < 20,
          "%r after %.1f s" % (data, waited))
    l.close()


def lmtp_budget(a):
    """lmtp_data_total_max = 200000: while one message of 150 KB is being received, another of
    100 KB is answered 452 4.3.1. When the first one's bytes have reached the server is not
    known to the client, so the second is retried until it is refused (each try before that
    is delivered)."""
    user, _ = a.user.split(":", 1)
    l1, _ = lmtp_start(a, [user])
    l1.cmd("DATA")
    l1.sock.sendall(b"Subject: held\r\n\r\n" + b"h" * 150000)
    refused, line = False, b""
    end = time.monotonic() + 30
    while time.monotonic() < end and not refused:
        l2, codes = lmtp_start(a, [user, "bob@example.org"])
        l2.cmd("DATA")
        l2.sock.sendall(b"Subject: second\r\n\r\n" + b"s" * 100000 + b"\r\n.\r\n")
        replies = lmtp_replies(l2, 2)
        refused = all(r[0] == 452 and b"4.3.1" in r[1] for r in replies)
        line = replies[0][1]
        if not refused and any(r[0] >= 500 for r in replies):
            break
        l2.close()
    check("lmtp_data_total_max: a message while the budget is held gets 452 4.3.1 per recipient",
          refused, repr(line))
    l1.sock.sendall(b"\r\n.\r\n")
    code, line = l1.reply()
    check("... the message holding it is delivered", code == 250, repr(line))
    l1.close()


USER_SESSIONS_MAX = 4  # the functional server's user_sessions_max


def user_sessions(a):
    """user_sessions_max: that many sessions of one user log in, the next gets NO
    [UNAVAILABLE] naming the limit (a wrong password is still told so), another user logs in
    on that same connection, and once one of the first LOGOUTs the user logs in again."""
    user, password = a.user.split(":", 1)
    user2, password2 = a.user2.split(":", 1)
    held = []
    deadline = time.monotonic() + 20
    while len(held) < USER_SESSIONS_MAX:
        # the sessions the tests before closed are let go by jobs of their own: until they
        # are, this user's logins count them (polled, as after the LOGOUT below)
        c = imapd_common.Imap(a.imap, 30)
        _, tagged = c.command('LOGIN "%s" "%s"' % (user, password))
        if b" OK" in tagged:
            held.append(c)
            continue
        c.close()
        if b"user_sessions_max" not in tagged or time.monotonic() > deadline:
            raise RuntimeError("login failed: %r" % tagged)
        time.sleep(0.1)
    c = imapd_common.Imap(a.imap, 30)
    _, tagged = c.command('LOGIN "%s" "%s"' % (user, password))
    check("user_sessions_max: session %d of one user is refused with NO [UNAVAILABLE]" % (
        USER_SESSIONS_MAX + 1), b" NO [UNAVAILABLE]" in tagged and b"user_sessions_max" in tagged,
        repr(tagged))
    _, tagged = c.command('LOGIN "%s" "%s"' % (user, password + "x"))
    check("user_sessions_max: a wrong password at the limit is a failed login",
          b"[AUTHENTICATIONFAILED]" in tagged, repr(tagged))
    _, tagged = c.command('LOGIN "%s" "%s"' % (user2, password2))
    check("user_sessions_max: another user logs in on that connection", b" OK" in tagged,
          repr(tagged))
    c.close()
    held[0].command("LOGOUT")
    held[0].close()
    ok, deadline = False, time.monotonic() + 20  # the logout's release is a job of its own
    while not ok and time.monotonic() < deadline:
        c = imapd_common.Imap(a.imap, 30)
        _, tagged = c.command('LOGIN "%s" "%s"' % (user, password))
        ok = b" OK" in tagged
        held[0] = c
        if not ok:
            c.close()
            time.sleep(0.1)
    check("user_sessions_max: after a LOGOUT the user logs in again", ok, repr(tagged))
    for c in held:
        c.close()


def functional(a):
    for part in (prelogin, login_timeout, pools, held_eviction, long_lines, literal_budget,
                 user_sessions, lmtp_dedupe, lmtp_smuggling,
                 lmtp_rejected, lmtp_deadline, lmtp_budget):
        try:
            part(a)
        except (OSError, EOFError, RuntimeError, IndexError, ValueError) as e:
            check("%s ran to its end" % part.__name__, False, repr(e))


# ---- hostile -------------------------------------------------------------------------------

def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def flood_without_reading(sock, data):
    """Sends what the socket takes of data without blocking (the server stops reading)."""
    sock.setblocking(False)
    try:
        while data:
            n = sock.send(data)
            data = data[n:]
    except (BlockingIOError, InterruptedError):
        pass
    finally:
        sock.settimeout(30)


def hostile(a):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    user, password = a.user.split(":", 1)
    rss_before = rss_kib(a.pid)

    # LITERAL+ with a huge count: each is told BYE and closed though it sends 1 MiB.
    plus_closed = 0
    end = time.monotonic() + 60  # for all 50: the old server never closed them
    for i in range(50):
        s = connect(a.imap, "127.0.2.%d" % (1 + i // 10))
        s.recv(4096)
        closed_early = send_ignoring_close(s, b"a APPEND INBOX {60000000+}\r\n" + b"p" * 1048576)
        data, closed = read_until_closed(s, max(0.1, end - time.monotonic()))
        plus_closed += (closed or closed_early) and b"* BYE" in data
        s.close()
    check("hostile: 50 x APPEND {60000000+} and 1 MiB: each gets BYE and is closed",
          plus_closed == 50, "%d of 50" % plus_closed)

    conns, plus_given, broken = [], 0, 0
    for i in range(1000):
        source = "127.0.1.%d" % (1 + i // 20)
        try:
            s = connect(a.imap, source)
            s.recv(4096)
            kind = i % 4
            if kind == 0:  # the attack of the issue: a huge synchronising literal
                s.sendall(b"a APPEND INBOX {60000000}\r\n")
                reply = s.recv(4096)
                if reply.startswith(b"+"):
                    plus_given += 1
                    s.sendall(b"q" * 1048576)  # what the old server buffered
            elif kind == 1:  # most of a line, never finished
                s.sendall(b"a LOGIN " + b"l" * 60000)
            elif kind == 2:
                s.sendall(b"a LOGIN ")  # a trickle that stopped
            else:  # commands pipelined, answers never read: up to 256 KiB, as much as goes
                flood_without_reading(s, b"a CAPABILITY\r\n" * 18725)
            conns.append(s)
        except OSError:
            broken += 1
    check("hostile: 1,000 connections from 50 addresses open", broken == 0 and len(conns) == 1000,
          "%d broken" % broken)
    check("hostile: no '+' for APPEND {60000000} before login", plus_given == 0,
          "%d of 250 got '+'" % plus_given)

    # Give the server time to read all of that: poll its RSS until it stops growing.
    last, stable_since = rss_kib(a.pid), time.monotonic()
    end = time.monotonic() + 20
    while time.monotonic() < end and time.monotonic() - stable_since < 1.0:
        time.sleep(0.1)
        now = rss_kib(a.pid)
        if abs(now - last) > 256:
            last, stable_since = now, time.monotonic()
    rss_after = rss_kib(a.pid)
    grown_mib = (rss_after - rss_before) / 1024.0
    check("hostile: the server's RSS grows by at most %d MiB" % HOSTILE_RSS_MAX_MIB,
          grown_mib <= HOSTILE_RSS_MAX_MIB, "%.1f MiB (from %d to %d KiB)" % (
              grown_mib, rss_before, rss_after))
    results.note("RSS with 1,000 hostile connections: +%.1f MiB" % grown_mib)

    try:
        c = imapd_common.imap_login(a.imap, user, password, timeout_s=60)
        _, tagged = c.command("SELECT INBOX")
        check("hostile: meanwhile a normal login works", b"OK" in tagged, repr(tagged))
        c.close()
    except (OSError, EOFError, RuntimeError) as e:
        check("hostile: meanwhile a normal login works", False, repr(e))
    oldest = conns[0]
    data, closed = read_until_closed(oldest, 20)
    check("hostile: the oldest hostile connection made room (BYE, closed)",
          closed and b"* BYE too many connections" in data, repr(data[:120]))
    try:
        l = imapd_common.Lmtp(a.lmtp, 60)
        l.cmd("LHLO test")
        l.cmd("MAIL FROM:<sender@example.org>")
        code1, _ = l.cmd("RCPT TO:<%s>" % user)
        l.cmd("DATA")
        l.sock.sendall(b"Subject: meanwhile\r\n\r\ndelivered\r\n.\r\n")
        code2, line = l.reply()
        check("hostile: meanwhile an LMTP delivery works", code1 == 250 and code2 == 250,
              repr(line))
        l.close()
    except (OSError, EOFError) as e:
        check("hostile: meanwhile an LMTP delivery works", False, repr(e))
    for s in conns:
        s.close()


KW_MESSAGES = 2000
KW_NAMES = 1000  # the default mailbox_keywords_max
KW_PER_MESSAGE = 256  # the default keywords_max
# the lists' text would be ~50 MiB (the old server grew by 58); now ~8, page cache included
KW_RSS_MAX_MIB = 24


def keyword_name(i):
    return ("kw%04d" % i).ljust(100, "x")


def keyword_lists(a):
    """A user gives each of 2,000 messages its own 256 of 1,000 keywords of 100 bytes (each
    message a different run of the names, one UID STORE each), then a new session SELECTs
    the mailbox: the server's RSS grows by at most KW_RSS_MAX_MIB. The views held each
    message's list as text (~26 KB a message here): the old server grew by ~60 MiB."""
    user, password = a.user.split(":", 1)
    c = imapd_common.imap_login(a.imap, user, password, timeout_s=60)
    c.command("CREATE kwlists")
    msg = b"Subject: kw\r\n\r\nbody\r\n"
    tags = []
    for i in range(KW_MESSAGES):
        tag = c.tag()
        c.sock.sendall(tag + b" APPEND kwlists {%d+}\r\n" % len(msg) + msg + b"\r\n")
        tags.append(tag)
    appended = sum(b" OK" in c.until(t)[1] for t in tags)
    _, tagged = c.command("SELECT kwlists")
    check("keyword lists: %d messages appended and selected" % KW_MESSAGES,
          appended == KW_MESSAGES and b" OK" in tagged, "%d appended, %r" % (appended, tagged))
    rss_before = rss_kib(a.pid)
    stored = 0
    for start in range(0, KW_MESSAGES, 100):
        tags = []
        for uid in range(start + 1, start + 101):
            names = " ".join(keyword_name((7 * uid + 3 * k) % KW_NAMES)
                             for k in range(KW_PER_MESSAGE))
            tag = c.tag()
            c.sock.sendall(tag + b" UID STORE %d +FLAGS.SILENT (%s)\r\n" % (uid, names.encode()))
            tags.append(tag)
        stored += sum(b" OK" in c.until(t)[1] for t in tags)
    c.command("LOGOUT")
    c.close()
    c = imapd_common.imap_login(a.imap, user, password, timeout_s=60)
    untagged, tagged = c.command("SELECT kwlists")
    # the new session's view: messages read with their lists (FETCH of one to be sure)
    fetched, _ = c.command("UID FETCH %d FLAGS" % KW_MESSAGES)
    rss_after = rss_kib(a.pid)
    grown_mib = (rss_after - rss_before) / 1024.0
    want = keyword_name((7 * KW_MESSAGES + 3 * (KW_PER_MESSAGE - 1)) % KW_NAMES).encode()
    check("keyword lists: each of %d messages stored its own %d keywords, SELECT OK" % (
        KW_MESSAGES, KW_PER_MESSAGE), stored == KW_MESSAGES and b" OK" in tagged and
        any(want in r[0] for r in fetched), "%d stored, %r" % (stored, tagged))
    check("keyword lists: the server's RSS grows by at most %d MiB" % KW_RSS_MAX_MIB,
          grown_mib <= KW_RSS_MAX_MIB, "%.1f MiB (from %d to %d KiB)" % (
              grown_mib, rss_before, rss_after))
    results.note("RSS after SELECT of %d messages with distinct keyword lists: +%.1f MiB" % (
        KW_MESSAGES, grown_mib))
    c.command("LOGOUT")
    c.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=("functional", "hostile"))
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--lmtp", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--user2")
    p.add_argument("--pid", type=int)
    p.add_argument("--log", help="the server's log (functional)")
    a = p.parse_args()
    try:
        if a.phase == "functional":
            functional(a)
        else:
            hostile(a)
            keyword_lists(a)
    except (OSError, EOFError, RuntimeError) as e:
        check("%s ran to its end" % a.phase, False, repr(e))
    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
