#!/usr/bin/env python3
"""imapd_client.py -- drives a running mailvaultd over IMAP (imaplib and raw sockets) and
LMTP (smtplib.LMTP); run by tests/cli_imapd.sh, which starts the server.

USAGE
  imapd_client.py --imap PORT --lmtp PORT [--imaps PORT] --user ADDR --password PW
                  --user2 ADDR --password2 PW [--auth-delay-ms N]

Each check prints "ok NAME" or "not ok NAME: why"; the last line is "# N passed, N failed".
Every socket has a timeout, so a server that stops answering fails the checks, never hangs.
"""
import argparse
import base64
import threading
import imaplib
import smtplib
import ssl
import sys
import time

import imapd_common

TIMEOUT = 15
# The deadline of a socket that moves megabytes (an APPEND of a MiB is parsed and indexed, a
# FETCH of several is sent in chunks): under ASan on a loaded machine (load 13 and more) one
# such command took longer than TIMEOUT, and test_fetch_streaming_sessions failed on a
# socket timeout with nothing wrong. A deadline, not a pause: a server that stops answering
# still fails the check, after this long.
TIMEOUT_BULK = 300
passed = 0
failed = 0


def check(name, cond, why=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok %s" % name)
    else:
        failed += 1
        print("not ok %s: %s" % (name, why))


def attempt(name, fn):
    """Runs fn(); an exception fails the check named name."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 -- any failure is a failed check
        check(name, False, "%s: %s" % (type(e).__name__, e))


def connect(args, timeout=TIMEOUT):
    m = imaplib.IMAP4("127.0.0.1", args.imap, timeout=timeout)
    return m


def login(args, user=None, password=None, timeout=TIMEOUT):
    m = connect(args, timeout)
    m.login(user or args.user, password or args.password)
    return m


class Raw(imapd_common.LineConnection):
    """A raw IMAP connection: send lines, read until the tagged response."""

    def __init__(self, port, tls_context=None, host="127.0.0.1", timeout=TIMEOUT):
        super().__init__(port, timeout, host)
        if tls_context is not None:
            self.sock = tls_context.wrap_socket(self.sock, server_hostname="localhost")
        self.greeting = self.line()

    def send(self, data):
        self.sock.sendall(data)

    def command(self, tag, text):
        """Sends 'tag text' (bytes or str) and returns (untagged lines, tagged line)."""
        if isinstance(text, str):
            text = text.encode()
        self.send(tag.encode() + b" " + text + b"\r\n")
        return self.until(tag)

    def until(self, tag):
        lines = []
        while True:
            line = self.line()
            if line.startswith(tag.encode() + b" "):
                return lines, line
            lines.append(line)


MESSAGE = (b"From: Bob Sender <bob@example.org>\r\n"
           b"To: Alice <alice@example.org>\r\n"
           b"Subject: quarterly report\r\n"
           b"Date: Mon, 02 Mar 2026 10:00:00 +0000\r\n"
           b"Message-ID: <report.1@example.org>\r\n"
           b"\r\n"
           b"The numbers are in. Caf\xc3\xa9 budget approved.\r\n")


def big_message():
    body = b"".join(b"line %06d of a long attachment-like body\r\n" % i for i in range(6000))
    return (b"From: carol@example.org\r\nTo: alice@example.org\r\nSubject: big one\r\n"
            b"MIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\n" + body)


def test_login(args):
    m = connect(args)
    check("greeting has capabilities", "IMAP4REV1" in m.capabilities and "AUTH=PLAIN" in m.capabilities,
          str(m.capabilities))
    start = time.monotonic()
    try:
        m.login(args.user, "wrong password")
        check("wrong password refused", False, "login succeeded")
    except imaplib.IMAP4.error as e:
        elapsed_ms = (time.monotonic() - start) * 1000
        check("wrong password refused", b"AUTHENTICATIONFAILED" in str(e).encode(), str(e))
        check("failed login delayed", elapsed_ms >= args.auth_delay_ms * 0.9, "%.0f ms" % elapsed_ms)
    start = time.monotonic()
    try:
        m.login("nobody@example.org", "x")
        check("unknown user refused", False, "login succeeded")
    except imaplib.IMAP4.error as e:
        elapsed_ms = (time.monotonic() - start) * 1000
        check("unknown user refused the same way", b"AUTHENTICATIONFAILED" in str(e).encode(), str(e))
        check("a second failure from the address waits twice as long",
              elapsed_ms >= 2 * args.auth_delay_ms * 0.9, "%.0f ms" % elapsed_ms)
    typ, data = m.login(args.user, args.password)
    check("login", typ == "OK", str(data))
    typ, data = m.noop()
    check("session goes on after login", typ == "OK", str(data))
    m.logout()


def test_authenticate(args):
    m = connect(args)
    typ, _ = m.authenticate("PLAIN", lambda _: ("\0%s\0%s" % (args.user, args.password)).encode())
    check("AUTHENTICATE PLAIN (continuation)", typ == "OK")
    m.logout()
    r = Raw(args.imap)
    ir = base64.b64encode(("\0%s\0%s" % (args.user, args.password)).encode()).decode()
    _, tagged = r.command("a1", "AUTHENTICATE PLAIN " + ir)
    check("AUTHENTICATE PLAIN with SASL-IR", tagged.startswith(b"a1 OK"), tagged)
    _, tagged = r.command("a2", "LOGIN x y")
    check("LOGIN after authentication is BAD", tagged.startswith(b"a2 BAD"), tagged)
    r.command("a3", "LOGOUT")
    r.close()


def test_mailboxes(args):
    m = login(args)
    typ, data = m.list()
    names = b" ".join(data)
    check("LIST shows the default mailboxes", typ == "OK" and b'"INBOX"' in names and b"\\Sent" in names,
          str(data))
    check("CREATE", m.create("Projects/2026")[0] == "OK")
    typ, data = m.list('""', "Projects/*")
    check("LIST with a pattern", typ == "OK" and len(data) == 1 and b"Projects/2026" in data[0], str(data))
    typ, data = m.list('""', "Projects")
    check("parent has children", typ == "OK" and b"\\HasChildren" in data[0], str(data))
    check("CREATE an existing mailbox is NO", m.create("Projects/2026")[0] == "NO")
    check("RENAME", m.rename("Projects/2026", "Projects/Done")[0] == "OK")
    typ, data = m.list('""', "Projects/*")
    check("RENAME is visible", b"Projects/Done" in b" ".join(data), str(data))
    check("DELETE", m.delete("Projects/Done")[0] == "OK")
    check("DELETE a missing mailbox is NO", m.delete("Projects/Done")[0] == "NO")
    check("DELETE INBOX is NO", m.delete("INBOX")[0] == "NO")
    check("SUBSCRIBE", m.subscribe("Projects")[0] == "OK")
    typ, data = m.lsub('""', "*")
    check("LSUB", typ == "OK" and b"Projects" in b" ".join(data), str(data))
    check("non-ASCII name (modified UTF-7)", m.create("&AMk-t&AOk-")[0] == "OK")
    typ, data = m.list('""', "&AMk-t&AOk-")
    check("non-ASCII name round trip", typ == "OK" and len(data) == 1 and b"&AMk-t&AOk-" in data[0], str(data))
    m.logout()


def test_messages(args):
    m = login(args)
    typ, data = m.append("INBOX", "(\\Flagged $Work)", None, MESSAGE)
    check("APPEND", typ == "OK", str(data))
    big = big_message()
    typ, data = m.append("INBOX", None, imaplib.Time2Internaldate(1700000000), big)
    check("APPEND a 250 KB message", typ == "OK", str(data))
    check("APPEND to a missing mailbox says TRYCREATE",
          b"TRYCREATE" in str(m.append("NoSuchBox", None, None, MESSAGE)[1]).encode())
    typ, data = m.select("INBOX")
    check("SELECT", typ == "OK" and data[0] == b"2", str(data))
    typ, data = m.fetch("1", "(BODY.PEEK[])")
    check("FETCH BODY[] is byte-identical", typ == "OK" and data[0][1] == MESSAGE, str(data)[:200])
    typ, data = m.fetch("2", "(RFC822.SIZE BODY.PEEK[])")
    check("FETCH of the big message is byte-identical", typ == "OK" and data[0][1] == big,
          str(data)[:200])
    check("RFC822.SIZE", b"RFC822.SIZE %d" % len(big) in data[0][0], str(data[0][0]))
    typ, data = m.fetch("1", "(FLAGS UID INTERNALDATE)")
    check("FETCH FLAGS with keywords", typ == "OK" and b"\\Flagged" in data[0] and b"$Work" in data[0],
          str(data))
    typ, data = m.fetch("2", "(INTERNALDATE)")
    check("APPEND date-time kept", b"14-Nov-2023 22:13:20 +0000" in data[0], str(data))
    typ, data = m.fetch("1", "(BODY.PEEK[HEADER.FIELDS (Subject From)])")
    check("BODY[HEADER.FIELDS]", data[0][1] == b"From: Bob Sender <bob@example.org>\r\n"
          b"Subject: quarterly report\r\n\r\n", str(data))
    typ, data = m.fetch("1", "(BODY.PEEK[HEADER.FIELDS ( Subject  From )])")
    check("BODY[HEADER.FIELDS] with blanks around the names, as Dovecot takes them, echoed as "
          "sent", typ == "OK" and data[0][1] == b"From: Bob Sender <bob@example.org>\r\n"
          b"Subject: quarterly report\r\n\r\n"
          and b"BODY[HEADER.FIELDS ( Subject  From )]" in data[0][0], str(data))
    typ, data = m.fetch("1", "(BODY.PEEK[TEXT] BODY.PEEK[HEADER]<0.6>)")
    check("BODY[TEXT] and a partial BODY[HEADER]",
          data[0][1] == MESSAGE.split(b"\r\n\r\n", 1)[1] and data[1][1] == b"From: ", str(data))
    typ, data = m.fetch("1", "(FLAGS)")
    check("PEEK leaves \\Seen alone", b"\\Seen" not in data[0], str(data))
    typ, data = m.fetch("1", "(BODY[TEXT])")
    check("BODY[] sets \\Seen", b"\\Seen" in b" ".join(x if isinstance(x, bytes) else x[0] for x in data),
          str(data))
    typ, data = m.fetch("1", "(RFC822.HEADER)")
    check("RFC822.HEADER", data[0][1] == MESSAGE.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n", str(data))
    typ, data = m.uid("FETCH", "1:*", "(FLAGS)")
    check("UID FETCH", typ == "OK" and len([d for d in data if d]) == 2, str(data))

    typ, data = m.store("2", "+FLAGS", "(\\Answered)")
    check("STORE +FLAGS", typ == "OK" and b"\\Answered" in data[0], str(data))
    typ, data = m.store("2", "-FLAGS.SILENT", "(\\Answered)")
    check("STORE .SILENT", typ == "OK" and data == [None], str(data))
    typ, data = m.uid("STORE", "2", "FLAGS", "(\\Draft)")
    check("UID STORE FLAGS", typ == "OK" and b"\\Draft" in data[0], str(data))

    searches = [
        (("FROM", "bob"), b"1"),
        (("SUBJECT", "big"), b"2"),
        (("TEXT", "budget"), b"1"),
        (("BODY", "attachment"), b"2"),
        (("FLAGGED",), b"1"),
        (("UNSEEN",), b"2"),
        (("NOT", "SEEN"), b"2"),
        (("OR", "FLAGGED", "DRAFT"), b"1 2"),
        (("LARGER", "10000"), b"2"),
        (("SMALLER", "10000"), b"1"),
        (("BEFORE", "1-Jan-2024"), b"2"),
        (("SINCE", "1-Jan-2024"), b"1"),
        (("KEYWORD", "$Work"), b"1"),
        (("HEADER", "Message-ID", "report.1"), b"1"),
        (("2",), b"2"),
        (("ALL",), b"1 2"),
    ]
    for criteria, want in searches:
        typ, data = m.search(None, *criteria)
        check("SEARCH %s" % " ".join(criteria), typ == "OK" and data[0] == want, str(data))
    typ, data = m.uid("SEARCH", "UID", "2:*")
    check("UID SEARCH", typ == "OK" and data[0] == b"2", str(data))

    check("COPY", m.copy("1:2", "Archive")[0] == "OK")
    typ, data = m.status("Archive", "(MESSAGES UNSEEN UIDNEXT)")
    check("STATUS after COPY", typ == "OK" and b"MESSAGES 2" in data[0] and b"UIDNEXT 3" in data[0],
          str(data))
    check("COPY to a missing mailbox says TRYCREATE", b"TRYCREATE" in str(m.copy("1", "Nope")[1]).encode())
    m.store("1", "+FLAGS", "(\\Deleted)")
    typ, data = m.expunge()
    check("EXPUNGE", typ == "OK" and data == [b"1"], str(data))
    typ, data = m.fetch("1", "(BODY.PEEK[])")
    check("message numbers move down after EXPUNGE", data[0][1] == big, str(data)[:100])
    typ, data = m.select("Archive", readonly=True)
    check("EXAMINE", typ == "OK" and data[0] == b"2", str(data))
    typ, data = m.store("1", "+FLAGS", "(\\Seen)")
    check("STORE in a read-only mailbox is NO", typ == "NO", str(data))
    check("CLOSE", m.close()[0] == "OK")
    m.logout()


MULTIPART = (b'From: "Bob S." <bob@example.org>\r\n'
             b'To: alice@example.org, "Ren\xc3\xa9e" <r@example.org>\r\n'
             b"Subject: =?utf-8?q?caf=C3=A9?= plans\r\n"
             b"Date: Mon, 02 Mar 2026 10:00:00 +0000\r\n"
             b"Message-ID: <mime.1@example.org>\r\n"
             b"MIME-Version: 1.0\r\n"
             b'Content-Type: multipart/mixed; boundary="XX"\r\n\r\n'
             b"preamble\r\n--XX\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello\r\nworld\r\n"
             b'--XX\r\nContent-Type: application/pdf; name="a.pdf"\r\n'
             b'Content-Disposition: attachment; filename="a.pdf"\r\n'
             b"Content-Transfer-Encoding: base64\r\n\r\nQUJDRA==\r\n--XX--\r\n")


def test_mime(args):
    m = login(args)
    m.create("Mime")
    m.append("Mime", None, None, MULTIPART)
    m.select("Mime")
    typ, data = m.fetch("1", "(ENVELOPE)")
    env = data[0]
    check("ENVELOPE", typ == "OK" and b'"=?utf-8?q?caf=C3=A9?= plans"' in env
          and b'(("Bob S." NIL "bob" "example.org"))' in env and b'"<mime.1@example.org>"' in env, env)
    check("ENVELOPE sender and reply-to default to From",
          env.count(b'(("Bob S." NIL "bob" "example.org"))') == 3, env)
    check("ENVELOPE re-encodes an 8-bit display name", b'"=?UTF-8?b?UmVuw6ll?=" NIL "r" "example.org"' in env,
          env)
    typ, data = m.fetch("1", "(BODYSTRUCTURE)")
    bs = data[0]
    check("BODYSTRUCTURE", typ == "OK" and b'("TEXT" "PLAIN" ("CHARSET" "utf-8") NIL NIL "7BIT" 12 1' in bs
          and b'("APPLICATION" "PDF" ("NAME" "a.pdf") NIL NIL "BASE64" 8 NIL ("ATTACHMENT" '
          b'("FILENAME" "a.pdf"))' in bs and b'"MIXED" ("BOUNDARY" "XX")' in bs, bs)
    typ, data = m.fetch("1", "(BODY)")
    check("BODY (non-extensible)", typ == "OK" and b'"BASE64" 8) "MIXED")' in data[0], data)
    typ, data = m.fetch("1", "(BODY.PEEK[2] BODY.PEEK[1.MIME] BODY.PEEK[1]<0.3>)")
    check("BODY[2] is the part's encoded content", data[0][1] == b"QUJDRA==", data)
    check("BODY[1.MIME]", data[1][1] == b"Content-Type: text/plain; charset=utf-8\r\n\r\n", data)
    check("BODY[1]<0.3>", data[2][1] == b"hel", data)
    typ, data = m.fetch("1", "(BODY.PEEK[9])")
    check("a missing part is NIL", typ == "OK" and b"BODY[9] NIL" in data[0], data)
    typ, data = m.fetch("1", "(BODY.PEEK[])")
    check("the multipart message is byte-identical", data[0][1] == MULTIPART, str(data)[:200])
    m.close()
    m.logout()


# ---- Body sections of nested parts (BODY[n.HEADER], [n.TEXT], [n.MIME], [1.2.3], ...) ----

NESTED_INNER = (b"From: b@example.org\r\n"
                b"Subject: middle\r\n"
                b"Content-Type: multipart/alternative; boundary=MID\r\n\r\n"
                b"--MID\r\nContent-Type: text/plain\r\n\r\ninner plain\r\n"
                b"--MID\r\nContent-Type: message/rfc822\r\n\r\n"
                b"Subject: deep\r\nX-Tag: 1\r\n\r\ndeep body\r\n"
                b"--MID--")
NESTED = (b"From: a@example.org\r\n"
          b"Subject: outer\r\n"
          b"MIME-Version: 1.0\r\n"
          b'Content-Type: multipart/mixed;\r\n\tboundary="OUT"\r\n\r\n'
          b"preamble\r\n--OUT\r\nContent-Type: text/plain\r\n\r\nhello\r\n"
          b"--OUT\r\nContent-Type: message/rfc822\r\nContent-Description: fwd\r\n\r\n"
          + NESTED_INNER +
          b"\r\n--OUT\r\nContent-Type: application/octet-stream\r\n"
          b"Content-Transfer-Encoding: base64\r\n\r\nAAEC\r\n")  # no close delimiter


def fetch_sections(data):
    """{"BODY[2.1]<0>": bytes, ...} from imaplib's FETCH data, and the text outside literals."""
    import re
    found, text = {}, b""
    for item in data:
        if isinstance(item, tuple):
            text += item[0]
            hit = re.search(rb"(BODY\[[^\]]*\](<\d+>)?) \{\d+\}$", item[0])
            if hit:
                found[hit.group(1).decode()] = item[1]
        elif item is not None:
            text += item
    return found, text


def test_nested_sections(args):
    m = login(args)
    m.create("Nested")
    m.append("Nested", None, None, NESTED)
    r = Raw(args.imap)  # imaplib's append turns LF into CRLF: the LF copy goes in raw
    r.command("n1", 'LOGIN %s "%s"' % (args.user, args.password))
    lf_message = NESTED.replace(b"\r\n", b"\n")
    _, tagged = r.command("n2", b"APPEND Nested {%d+}\r\n" % len(lf_message) + lf_message)
    check("APPEND of an LF-only message", tagged.startswith(b"n2 OK"), tagged)
    r.command("n3", "LOGOUT")
    r.close()
    m.select("Nested")
    typ, data = m.fetch("2", "(BODY.PEEK[])")
    check("the LF-only message is stored as sent", typ == "OK" and data[0][1] == lf_message, data)
    for seq, nl in ((b"1", b"\r\n"), (b"2", b"\n")):
        def lf(b):
            return b.replace(b"\r\n", nl)
        how = " (%s)" % ("CRLF" if nl == b"\r\n" else "LF")
        typ, data = m.fetch(seq, "(BODY.PEEK[2.HEADER] BODY.PEEK[2.TEXT] BODY.PEEK[2] BODY.PEEK[2.MIME] "
                                 "BODY.PEEK[2.1] BODY.PEEK[2.2.HEADER] BODY.PEEK[2.2.TEXT] BODY.PEEK[2.2.1] "
                                 "BODY.PEEK[3] BODY.PEEK[1.MIME])")
        got, text = fetch_sections(data)
        inner = lf(NESTED_INNER)
        head = inner.split(nl + nl, 1)[0] + nl + nl
        check("BODY[2.HEADER] of a message/rfc822 part" + how, got.get("BODY[2.HEADER]") == head, data)
        check("BODY[2.TEXT]" + how, got.get("BODY[2.TEXT]") == inner[len(head):], data)
        check("BODY[2] of a message/rfc822 part is its whole message" + how, got.get("BODY[2]") == inner, data)
        check("BODY[2.MIME] is the part's header as stored" + how,
              got.get("BODY[2.MIME]") == lf(b"Content-Type: message/rfc822\r\nContent-Description: fwd\r\n\r\n"),
              data)
        check("BODY[2.1] inside a multipart inside message/rfc822" + how,
              got.get("BODY[2.1]") == b"inner plain", data)
        check("BODY[2.2.HEADER] three levels down" + how,
              got.get("BODY[2.2.HEADER]") == lf(b"Subject: deep\r\nX-Tag: 1\r\n\r\n"), data)
        check("BODY[2.2.TEXT] and BODY[2.2.1]" + how,
              got.get("BODY[2.2.TEXT]") == b"deep body" and got.get("BODY[2.2.1]") == b"deep body", data)
        check("BODY[3] with no close delimiter" + how, got.get("BODY[3]") == lf(b"AAEC\r\n"), data)
        check("BODY[1.MIME]" + how, got.get("BODY[1.MIME]") == lf(b"Content-Type: text/plain\r\n\r\n"), data)
        typ, data = m.fetch(seq, "(BODY.PEEK[2.HEADER.FIELDS (Subject)] BODY.PEEK[2.HEADER.FIELDS.NOT (Subject)] "
                                 "BODY.PEEK[2.2.HEADER.FIELDS (X-TAG)])")
        got, text = fetch_sections(data)
        check("BODY[2.HEADER.FIELDS (Subject)]" + how,
              got.get("BODY[2.HEADER.FIELDS (Subject)]") == lf(b"Subject: middle\r\n") + b"\r\n", data)
        check("BODY[2.HEADER.FIELDS.NOT (Subject)]" + how,
              got.get("BODY[2.HEADER.FIELDS.NOT (Subject)]") ==
              lf(b"From: b@example.org\r\nContent-Type: multipart/alternative; boundary=MID\r\n") + b"\r\n", data)
        check("BODY[2.2.HEADER.FIELDS (X-TAG)]" + how,
              got.get("BODY[2.2.HEADER.FIELDS (X-TAG)]") == lf(b"X-Tag: 1\r\n") + b"\r\n", data)
        typ, data = m.fetch(seq, "(BODY.PEEK[2.TEXT]<2.3> BODY.PEEK[2.2.HEADER]<9.100> BODY.PEEK[2.1]<6.5> "
                                 "BODY.PEEK[2]<100000.5>)")
        got, text = fetch_sections(data)
        check("partial BODY[2.TEXT]<2.3>" + how, got.get("BODY[2.TEXT]<2>") == b"MID", data)
        check("partial BODY[2.2.HEADER]<9.100>" + how,
              got.get("BODY[2.2.HEADER]<9>") == lf(b"Subject: deep\r\nX-Tag: 1\r\n\r\n")[9:], data)
        check("partial BODY[2.1]<6.5>" + how, got.get("BODY[2.1]<6>") == b"plain", data)
        check("partial past the end is empty" + how, got.get("BODY[2]<100000>") == b"", data)
        typ, data = m.fetch(seq, "(BODY.PEEK[1.HEADER] BODY.PEEK[2.3] BODY.PEEK[2.1.TEXT] BODY.PEEK[4.1])")
        got, text = fetch_sections(data)
        check("HEADER of a non-message part, missing parts: NIL" + how,
              typ == "OK" and all(x in text for x in (b"BODY[1.HEADER] NIL", b"BODY[2.3] NIL",
                                                         b"BODY[2.1.TEXT] NIL", b"BODY[4.1] NIL")), data)
        typ, data = m.fetch(seq, "(BODYSTRUCTURE BODY.PEEK[2.1] BODY.PEEK[2])")
        got, text = fetch_sections(data)
        check("BODYSTRUCTURE sizes match the sections" + how,
              b'"PLAIN" NIL NIL NIL "7BIT" 11 ' in text and b" %d " % len(got.get("BODY[2]", b"")) in text, data)
    typ, data = m.fetch("1:2", "(FLAGS)")
    check("BODY.PEEK of parts leaves \\Seen alone", typ == "OK" and b"\\Seen" not in b" ".join(data), data)
    typ, data = m.fetch("1", "(BODY[2.2.TEXT])")
    got, text = fetch_sections(data)
    check("BODY[2.2.TEXT] sets \\Seen", got.get("BODY[2.2.TEXT]") == b"deep body" and b"\\Seen" in text, data)
    m.close()
    m.logout()


# ---- Commands of every shape within the line limit (Dovecot 2.3 takes all of these) ----

SHAPE_PARTS = 40
SHAPE_FIELDS = 100


def shape_parts_message():
    """A multipart message of SHAPE_PARTS parts, each with a MIME header of its own."""
    parts = b"".join(b"--B\r\nContent-Type: text/plain; name=part%d\r\nX-Part: %d\r\n\r\nbody %d\r\n"
                     % (k, k, k) for k in range(1, SHAPE_PARTS + 1))
    return (b"From: a@example.org\r\nSubject: parts\r\nMIME-Version: 1.0\r\n"
            b'Content-Type: multipart/mixed; boundary="B"\r\n\r\n' + parts + b"--B--\r\n")


def shape_fields_message():
    """A header with X-F0 .. X-F119 in reverse order among fields no list names."""
    fields = b"".join(b"X-F%d: value %d\r\n" % (k, k) for k in reversed(range(SHAPE_FIELDS + 20)))
    return b"From: a@example.org\r\n" + fields + b"Subject: fields\r\nX-G: other\r\n\r\nbody\r\n"


def shape_sections(m):
    """40 body sections: was BAD "too many body sections: [33.MIME]" (a cap of 32)."""
    atts = " ".join("BODY.PEEK[%d.MIME]" % k for k in range(1, SHAPE_PARTS + 1))
    typ, data = m.fetch("1", "(UID %s)" % atts)
    got, _ = fetch_sections(data)
    check("FETCH with %d body sections is OK" % SHAPE_PARTS, typ == "OK", data)
    check("... every section is its part's MIME header",
          len(got) == SHAPE_PARTS and all(
              got.get("BODY[%d.MIME]" % k) ==
              b"Content-Type: text/plain; name=part%d\r\nX-Part: %d\r\n\r\n" % (k, k)
              for k in range(1, SHAPE_PARTS + 1)), data)


def shape_fields(m, message):
    """100 names in HEADER.FIELDS: was BAD "bad body section" (a cap of 64)."""
    names = " ".join("X-F%d" % k for k in range(SHAPE_FIELDS))
    typ, data = m.fetch("2", "(UID BODY.PEEK[HEADER.FIELDS (%s)] BODY.PEEK[HEADER.FIELDS.NOT (%s)])"
                        % (names, names))
    got, _ = fetch_sections(data)
    header = message.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    listed = [h for h in header if h.startswith(b"X-F") and int(h[3:].split(b":")[0]) < SHAPE_FIELDS]
    others = [h for h in header if h not in listed]
    check("FETCH HEADER.FIELDS with %d names is OK" % SHAPE_FIELDS, typ == "OK", data)
    check("... it holds exactly the named fields, in the message's order",
          got.get("BODY[HEADER.FIELDS (%s)]" % names) == b"".join(h + b"\r\n" for h in listed) + b"\r\n",
          data)
    check("... and HEADER.FIELDS.NOT with the same names every other field",
          got.get("BODY[HEADER.FIELDS.NOT (%s)]" % names) ==
          b"".join(h + b"\r\n" for h in others) + b"\r\n" and len(others) == 23, data)


def shape_patterns(m):
    """100 LIST patterns: was BAD "bad or too many mailbox patterns" (a cap of 64)."""
    patterns = " ".join('"Shape%d"' % k for k in range(SHAPE_FIELDS))
    typ, data = m.list('""', "(%s)" % patterns)
    listed = sorted(d.rsplit(b" ", 1)[1].strip(b'"') for d in data if d)
    check("LIST with %d patterns is OK" % SHAPE_FIELDS, typ == "OK", data)
    check("... it lists the mailboxes they match, once each",
          listed == [b"Shape42", b"Shape7", b"Shape99"], data)


def test_command_shapes(args):
    m = login(args)
    m.create("Shapes")
    m.append("Shapes", None, None, shape_parts_message())
    fields_message = shape_fields_message()
    m.append("Shapes", None, None, fields_message)
    for name in ("Shape7", "Shape42", "Shape99", "Shape100"):
        m.create(name)
    m.select("Shapes")
    # Each on its own: a BAD (imaplib raises) fails its check and the next one still runs.
    attempt("FETCH with %d body sections" % SHAPE_PARTS, lambda: shape_sections(m))
    attempt("FETCH HEADER.FIELDS with %d names" % SHAPE_FIELDS,
            lambda: shape_fields(m, fields_message))
    attempt("LIST with %d patterns" % SHAPE_FIELDS, lambda: shape_patterns(m))
    m.close()
    m.logout()


# ---- Streaming: one large FETCH held in bounded memory ----

def server_peak_kib(pid):
    """VmHWM (the peak resident set) of process pid, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def test_fetch_streaming(args):
    """FETCH 1:* BODY.PEEK[] of a 48 MiB mailbox, read slowly, from a release server of its
    own (an ASan build's quarantine would hide what the server frees): the bytes must be
    identical and the server's peak RSS may grow by at most 16 MiB, a third of the response
    (a design that builds the response whole holds it at least once, 48 MiB and more)."""
    import os
    import random
    import shutil
    import subprocess
    import tempfile
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    server, cli = os.path.join(repo, "build", "mailvaultd"), os.path.join(repo, "build", "mailvault")
    if not (os.access(server, os.X_OK) and os.access(cli, os.X_OK)):
        check("streaming: release builds present", False, "make build/mailvaultd build/mailvault")
        return
    tmp = tempfile.mkdtemp(prefix="mv_stream.")
    env = dict(os.environ, MAILVAULT_ROOT=os.path.join(tmp, "root"), MAILVAULT_KDF_ITER="2")
    with open(os.path.join(tmp, "pw"), "w") as f:
        f.write("stream password")
    proc = None
    try:
        subprocess.run([cli, "init", "stream@example.org", "--password-file", os.path.join(tmp, "pw")],
                       env=env, check=True, stdout=subprocess.DEVNULL, timeout=60)
        ports = os.path.join(tmp, "ports")
        log = open(os.path.join(tmp, "server.log"), "w")
        proc = subprocess.Popen([server, "--ports-file=" + ports, "--root=" + env["MAILVAULT_ROOT"],
                                 "--listen=127.0.0.1", "--imap-port=0", "--lmtp-port=-1", "--workers=1"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        for _ in range(100):
            if os.path.exists(ports) or proc.poll() is not None:
                break
            time.sleep(0.1)
        port = int([l.split("=")[1] for l in open(ports).read().split() if l.startswith("imap=")][0])
        rng = random.Random(7)
        messages = []
        for i in range(48):  # 48 x 1 MiB, incompressible base64
            body = base64.encodebytes(rng.randbytes(786432 - 64))
            messages.append(b"From: s@example.org\r\nSubject: big %d\r\n"
                            b"Content-Type: application/octet-stream\r\n"
                            b"Content-Transfer-Encoding: base64\r\n\r\n" % i + body.replace(b"\n", b"\r\n"))
        m = imaplib.IMAP4("127.0.0.1", port, timeout=120)
        m.login("stream@example.org", "stream password")
        for msg in messages:
            m.append("INBOX", None, None, msg)
        m.logout()
        r = Raw(port)
        r.command("s1", 'LOGIN stream@example.org "stream password"')
        r.command("s2", "SELECT INBOX")
        before = server_peak_kib(proc.pid)
        r.send(b"s3 FETCH 1:* (BODY.PEEK[])\r\n")
        got, data, total = [], b"", sum(len(x) for x in messages)
        while not data.endswith(b"s3 OK FETCH completed\r\n") and b"\r\ns3 " not in data:
            chunk = r.sock.recv(262144)  # a slow reader: 256 KiB, then a pause
            if not chunk:
                break
            data += chunk
            time.sleep(0.002)
        after = server_peak_kib(proc.pid)
        at = 0
        while True:
            start = data.find(b"BODY[] {", at)
            if start < 0:
                break
            end = data.index(b"}\r\n", start)
            n = int(data[start + 8:end])
            got.append(data[end + 3:end + 3 + n])
            at = end + 3 + n
        check("streaming: FETCH 1:* BODY[] of 48 MiB completes", data.endswith(b"s3 OK FETCH completed\r\n"),
              data[-200:])
        check("streaming: every message byte-identical", got == messages, "%d of %d" % (len(got), len(messages)))
        check("streaming: server peak RSS grew by %d KiB for a %d KiB response (at most 16 MiB)"
              % (after - before, total // 1024), 0 <= after - before <= 16384, (before, after))
        r.command("s4", "LOGOUT")
        r.close()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def test_fetch_streaming_sessions(args):
    """On the test server: a FETCH answered in several chunks, with a pipelined command
    behind it, and a client that hangs up in the middle of one (the server must free the
    waiting response and go on). Its connections have TIMEOUT_BULK: each APPEND and FETCH
    moves megabytes."""
    rng = __import__("random").Random(11)
    messages = [b"Subject: chunk %d\r\n\r\n" % i + base64.encodebytes(rng.randbytes(600000)).replace(b"\n", b"\r\n")
                for i in range(5)]
    m = login(args, timeout=TIMEOUT_BULK)
    m.create("Stream")
    for msg in messages:
        m.append("Stream", None, None, msg)
    m.logout()
    r = Raw(args.imap, timeout=TIMEOUT_BULK)
    r.command("t1", 'LOGIN %s "%s"' % (args.user, args.password))
    r.command("t2", "SELECT Stream")
    r.send(b"t3 FETCH 1:* (BODY.PEEK[])\r\nt4 NOOP\r\n")
    data = b""
    while b"\r\nt4 " not in data:
        chunk = r.sock.recv(65536)
        if not chunk:
            break
        data += chunk
        time.sleep(0.001)
    got = []
    at = 0
    while data.find(b"BODY[] {", at) >= 0:
        start = data.find(b"BODY[] {", at)
        end = data.index(b"}\r\n", start)
        n = int(data[start + 8:end])
        got.append(data[end + 3:end + 3 + n])
        at = end + 3 + n
    check("streaming: a chunked FETCH is byte-identical", got == messages, "%d messages" % len(got))
    check("streaming: a pipelined command waits for the whole FETCH",
          data.find(b"t3 OK") >= 0 and data.find(b"t3 OK") < data.find(b"t4 OK"), data[-200:])
    r.send(b"t5 FETCH 1:* (BODY.PEEK[])\r\n")
    r.sock.recv(100000)
    r.close()  # hangs up while the response waits for it
    # No pause for the server to notice the hang-up (a sleep guessed how long that takes):
    # whenever it does, a new session of the same user must be served in full, a whole
    # message of the same size included.
    m = login(args, timeout=TIMEOUT_BULK)
    typ, data = m.select("Stream")
    typ2, got = m.fetch("5", "(BODY.PEEK[])")
    check("streaming: the server goes on after a client hung up mid-FETCH",
          typ == "OK" and data == [b"5"] and typ2 == "OK" and got[0][1] == messages[4],
          (typ, data, typ2))
    m.logout()


def test_uidplus_move(args):
    m = login(args)
    check("UIDPLUS and MOVE advertised after login", "UIDPLUS" in m.capabilities or
          b"UIDPLUS" in m.capability()[1][0], str(m.capability()))
    m.create("Moves")
    typ, data = m.append("Moves", None, None, MESSAGE)
    check("APPEND says APPENDUID", typ == "OK" and b"[APPENDUID " in data[0] and data[0].split()[2] == b"1]",
          str(data))
    for _ in range(3):
        m.append("Moves", None, None, MESSAGE)
    m.select("Moves")
    typ, data = m.copy("2:3", "Trash")
    check("COPY says COPYUID", typ == "OK" and b"[COPYUID " in data[0] and b" 2:3 " in data[0], str(data))
    typ, data = m._simple_command("MOVE", "1", "Junk")
    untagged = m.untagged_responses
    check("MOVE", typ == "OK", str(data))
    check("MOVE sends COPYUID then EXPUNGE",
          any(b"COPYUID" in x for x in untagged.get("OK", []) if x) and untagged.get("EXPUNGE") == [b"1"],
          str(untagged))
    m.untagged_responses.clear()
    typ, data = m.uid("MOVE", "4", "Junk")
    check("UID MOVE", typ == "OK" and m.untagged_responses.get("EXPUNGE") == [b"3"], str(m.untagged_responses))
    m.store("1:2", "+FLAGS", "(\\Deleted)")
    m.untagged_responses.clear()
    typ, data = m.uid("EXPUNGE", "3")
    check("UID EXPUNGE removes only the UIDs given", typ == "OK" and m.untagged_responses.get("EXPUNGE") == [b"2"],
          str(m.untagged_responses))
    typ, data = m.uid("SEARCH", "ALL")
    check("the other \\Deleted message stays", data[0] == b"2", str(data))
    typ, data = m.status("Junk", "(MESSAGES)")
    check("both moved messages arrived", b"MESSAGES 2" in data[0], str(data))
    m.logout()


def wait_line(r, pred):
    """Reads untagged lines until pred(line) holds; returns that line (the socket timeout
    bounds the wait)."""
    while True:
        line = r.line()
        if pred(line):
            return line


def test_idle(args):
    r = Raw(args.imap)
    r.command("i1", 'LOGIN %s "%s"' % (args.user, args.password))
    r.command("i2", "SELECT INBOX")
    r.send(b"i3 IDLE\r\n")
    line = r.line()
    check("IDLE answers with a continuation", line.startswith(b"+"), line)
    other = login(args)
    other.append("INBOX", None, None, MESSAGE)
    other.logout()
    start = time.monotonic()
    line = r.line()
    check("an IDLE session is told about a new message", line.endswith(b"EXISTS"), line)
    check("at once (IDLE push, not the 30 s poll)", time.monotonic() - start < 1.5,
          time.monotonic() - start)
    other = login(args)
    other.select("INBOX")
    start = time.monotonic()
    other.store("1", "+FLAGS", "(\\Flagged)")
    line = wait_line(r, lambda l: b"FETCH" in l)
    check("IDLE push: another session's flag change", b"\\Flagged" in line
          and time.monotonic() - start < 1.5, (line, time.monotonic() - start))
    other.store("1", "-FLAGS", "(\\Flagged)")
    wait_line(r, lambda l: b"FETCH" in l)
    other.logout()
    if args.lmtp:
        start = time.monotonic()
        lmtp = smtplib.LMTP("127.0.0.1", args.lmtp, timeout=TIMEOUT)
        lmtp.sendmail("pusher@example.org", [args.user], MESSAGE)
        lmtp.quit()
        line = wait_line(r, lambda l: l.endswith(b"EXISTS"))
        check("IDLE push: an LMTP delivery into the open store",
              time.monotonic() - start < 1.5, (line, time.monotonic() - start))
    r.send(b"DONE\r\n")
    _, tagged = r.until("i3")
    check("DONE ends IDLE", tagged == b"i3 OK IDLE terminated", tagged)
    _, tagged = r.command("i4", "NOOP")
    check("commands work after IDLE", tagged.startswith(b"i4 OK"), tagged)
    r.send(b"i5 IDLE\r\n")
    r.line()
    r.send(b"NOPE\r\n")
    _, tagged = r.until("i5")
    check("anything but DONE is BAD", tagged.startswith(b"i5 BAD"), tagged)
    r.command("i6", "LOGOUT")
    r.close()


def test_parallel(args):
    """Eight clients at once, two users (two workers at most), appends, fetches, flag
    changes and expunges interleaved: every session must finish and see consistent data."""
    errors = []
    users = [(args.user, args.password), (args.user2, args.password2)]

    def client(n):
        try:
            user, password = users[n % 2]
            m = login(args, user, password)
            box = "Par%d" % (n % 4)
            m.create(box)
            for i in range(6):
                body = MESSAGE + b"client %d message %d\r\n" % (n, i)
                typ, _ = m.append(box, None, None, body)
                if typ != "OK":
                    errors.append("append %d/%d" % (n, i))
                m.select(box)
                typ, data = m.uid("SEARCH", "ALL")
                uids = data[0].split()
                if uids:
                    typ, data = m.uid("FETCH", uids[-1], "(BODY.PEEK[])")
                    # other sessions' flag changes may come first, as untagged FETCHes, and the
                    # newest message may be that of the other client sharing the mailbox
                    if typ != "OK" or not any(isinstance(d, tuple) and d[1].startswith(MESSAGE)
                                              and b"message" in d[1][len(MESSAGE):] for d in data):
                        errors.append("fetch %d/%d: %r" % (n, i, data))
                    m.uid("STORE", uids[0], "+FLAGS", "(\\Deleted)")
                    m.expunge()
                m.noop()
            m.logout()
        except Exception as e:  # noqa: BLE001
            errors.append("client %d: %s: %s" % (n, type(e).__name__, e))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check("eight parallel clients finish without errors",
          not errors and not any(t.is_alive() for t in threads), str(errors[:5]))


def test_small_extensions(args):
    r = Raw(args.imap)
    lines, tagged = r.command("e0", 'ID ("name" "test")')
    check("ID before login", tagged.startswith(b"e0 OK") and lines and b'"mailvaultd"' in lines[0],
          (lines, tagged))
    r.command("e1", 'LOGIN %s "%s"' % (args.user, args.password))
    lines, tagged = r.command("e2", "NAMESPACE")
    check("NAMESPACE", tagged.startswith(b"e2 OK") and lines == [b'* NAMESPACE (("" "/")) NIL NIL'],
          (lines, tagged))
    lines, tagged = r.command("e3", "ENABLE X-UNKNOWN")
    check("ENABLE of an unknown extension enables nothing",
          tagged.startswith(b"e3 OK") and lines == [b"* ENABLED"], (lines, tagged))
    r.command("e4", "SELECT INBOX")
    r.command("e5", "STORE 1 +FLAGS (\\Deleted)")
    lines, tagged = r.command("e6", "UNSELECT")
    check("UNSELECT", tagged.startswith(b"e6 OK") and not any(b"EXPUNGE" in x for x in lines), lines)
    _, tagged = r.command("e7", "FETCH 1 FLAGS")
    check("UNSELECT leaves the selected state", tagged.startswith(b"e7 BAD"), tagged)
    lines, tagged = r.command("e8", "EXAMINE INBOX")
    r.command("e9", "SELECT INBOX")
    r.command("e10", "STORE 1 -FLAGS (\\Deleted)")
    lines, tagged = r.command("e11", 'LIST "" Sent')
    check("SPECIAL-USE attributes in LIST", lines and b"\\Sent" in lines[0], lines)
    r.command("e12", "LOGOUT")
    r.close()


def test_condstore(args):
    r = Raw(args.imap)
    r.command("c0", 'LOGIN %s "%s"' % (args.user, args.password))
    r.command("c1", "CREATE Cond")
    for i in range(3):
        msg = MESSAGE + b"cond %d\r\n" % i
        r.send(b"c2 APPEND Cond {%d+}\r\n" % len(msg) + msg + b"\r\n")
        r.until("c2")
    lines, tagged = r.command("c3", "ENABLE CONDSTORE")
    check("ENABLE CONDSTORE", lines == [b"* ENABLED CONDSTORE"], lines)
    lines, tagged = r.command("c4", "SELECT Cond (CONDSTORE)")
    hms = [l for l in lines if b"HIGHESTMODSEQ" in l]
    check("SELECT reports HIGHESTMODSEQ", tagged.startswith(b"c4 OK") and len(hms) == 1, lines)
    high = int(hms[0].split(b"HIGHESTMODSEQ ")[1].split(b"]")[0]) if hms else 0
    lines, tagged = r.command("c5", "FETCH 1:* (MODSEQ)")
    check("FETCH MODSEQ", tagged.startswith(b"c5 OK") and len(lines) == 3 and
          all(b"MODSEQ (" in l for l in lines), lines)
    lines, tagged = r.command("c6", "STORE 2 +FLAGS.SILENT (\\Flagged)")
    lines, tagged = r.command("c7", "FETCH 1:* (FLAGS) (CHANGEDSINCE %d)" % high)
    check("FETCH CHANGEDSINCE returns only what changed", tagged.startswith(b"c7 OK") and
          len(lines) == 1 and lines[0].startswith(b"* 2 FETCH") and b"MODSEQ" in lines[0], lines)
    lines, tagged = r.command("c8", "STORE 1:3 (UNCHANGEDSINCE %d) +FLAGS (\\Seen)" % high)
    check("STORE UNCHANGEDSINCE refuses the changed message",
          tagged.startswith(b"c8 OK [MODIFIED 2]") and len(lines) == 2 and
          all(b"\\Seen" in l and b"MODSEQ" in l for l in lines), (lines, tagged))
    lines, tagged = r.command("c9", "SEARCH MODSEQ %d" % (high + 1))
    check("SEARCH MODSEQ", tagged.startswith(b"c9 OK") and lines and lines[0].startswith(b"* SEARCH")
          and b"(MODSEQ " in lines[0] and lines[0].split()[2:4] == [b"1", b"2"], lines)
    lines, tagged = r.command("c10", "STATUS Cond (HIGHESTMODSEQ MESSAGES)")
    check("STATUS HIGHESTMODSEQ", tagged.startswith(b"c10 OK") and b"HIGHESTMODSEQ" in lines[0], lines)
    r.command("c11", "LOGOUT")
    r.close()


def test_selected_mailbox_deleted(args):
    a = Raw(args.imap)
    a.command("g1", 'LOGIN %s "%s"' % (args.user, args.password))
    a.command("g2", "CREATE Doomed")
    a.command("g3", "SELECT Doomed")
    b = login(args)
    b.delete("Doomed")
    b.create("Doomed")  # same name, new UIDVALIDITY
    b.logout()
    lines, tagged = a.command("g4", "NOOP")
    check("a session whose mailbox was deleted and made again gets BYE",
          any(l.startswith(b"* BYE") for l in lines), (lines, tagged))
    try:
        closed = a.sock.recv(100) == b""
    except OSError:
        closed = True
    check("and the connection closes", closed)
    a.close()


def test_concurrent(args):
    a = login(args)
    b = login(args)
    a.select("INBOX")
    b.select("INBOX")
    typ, data = a.append("INBOX", None, None, MESSAGE)
    typ, data = b.noop()
    exists = b.untagged_responses.get("EXISTS", [])
    check("another session sees EXISTS", typ == "OK" and len(exists) > 0, str(b.untagged_responses))
    b.untagged_responses.clear()
    a.store("1", "+FLAGS", "(\\Flagged)")
    b.noop()
    fetches = b.untagged_responses.get("FETCH", [])
    check("another session sees the flag change", any(b"\\Flagged" in f for f in fetches if f),
          str(b.untagged_responses))
    b.untagged_responses.clear()
    a.store("1", "+FLAGS", "(\\Deleted)")
    a.expunge()
    b.noop()
    check("another session sees EXPUNGE", len(b.untagged_responses.get("EXPUNGE", [])) == 1,
          str(b.untagged_responses))
    a.logout()
    b.logout()


def test_malformed(args):
    r = Raw(args.imap)
    r.command("a1", 'LOGIN %s "%s"' % (args.user, args.password))
    for tag, text in [("b1", "FETCH"), ("b2", "SELECT  INBOX"), ("b3", "FROB x"),
                      ("b4", 'LOGIN "unterminated'), ("b5", "FETCH 1 (FLAGS"),
                      ("b6", "SEARCH FROM"), ("b7", "STORE 1 +FLAGS (\\Recent)")]:
        _, tagged = r.command(tag, text)
        check("malformed '%s' is BAD" % text, tagged.startswith(tag.encode() + b" BAD"), tagged)
    _, tagged = r.command("c1", "NOOP")
    check("the session goes on after BAD", tagged.startswith(b"c1 OK"), tagged)
    r.send(b"c2 NOOP " + b"x" * (1 << 20) + b"\r\n")  # over line_max (1 MiB)
    refused = r.line()
    _, tagged = r.command("c3", "NOOP")
    check("an over-long line is refused with its tag and the session goes on",
          refused.startswith(b"c2 BAD") and tagged.startswith(b"c3 OK"), (refused, tagged))
    r.send(b"c4 APPEND INBOX {999999999}\r\n")
    _, tagged = r.until("c4")
    check("an oversized literal is refused", b"TOOBIG" in tagged and tagged.startswith(b"c4 NO"), tagged)
    _, tagged = r.command("c5", "NOOP")
    check("the session goes on after the refused literal", tagged.startswith(b"c5 OK"), tagged)
    r.send(b"c6 LOGIN {70000}\r\n")
    _, tagged = r.until("c6")
    check("an oversized literal outside APPEND is refused", b"TOOBIG" in tagged, tagged)
    r.send(b"c7 APPEND INBOX {5+}\r\nhello\r\n")
    _, tagged = r.until("c7")
    check("LITERAL+ APPEND", tagged.startswith(b"c7 OK"), tagged)
    r.send(b"c8 APPEND INBOX {999999999+}\r\n")
    bye = r.line()
    check("an oversized LITERAL+ closes the connection", bye.startswith(b"* BYE"), bye)
    r.close()


def test_pipelining(args):
    r = Raw(args.imap)
    login = 'p1 LOGIN %s "%s"\r\n' % (args.user, args.password)
    r.send(login.encode() + b"p2 SELECT INBOX\r\np3 FETCH 1 (UID)\r\np4 NOOP\r\np5 LOGOUT\r\n")
    tags = []
    try:
        while True:
            line = r.line()
            if line[:1] == b"p":
                tags.append(line.split(b" ")[:2])
    except EOFError:
        pass
    check("pipelined commands are answered in order",
          tags == [[b"p1", b"OK"], [b"p2", b"OK"], [b"p3", b"OK"], [b"p4", b"OK"], [b"p5", b"OK"]],
          str(tags))
    r.close()


def test_lmtp(args):
    msg = (b"From: dave@example.net\r\nTo: alice@example.org\r\nSubject: via lmtp\r\n\r\n"
           b".a line that starts with a dot\r\nbye\r\n")
    watcher = login(args)
    watcher.select("INBOX")
    l = smtplib.LMTP("127.0.0.1", args.lmtp, timeout=TIMEOUT)
    code, _ = l.ehlo("test.example")
    check("LHLO", code == 250)
    refused = l.sendmail("dave@example.net", [args.user, args.user2, "ghost@example.org"], msg)
    check("LMTP refuses an unknown recipient with 550",
          "ghost@example.org" in refused and refused["ghost@example.org"][0] == 550, str(refused))
    check("LMTP delivers to both users", args.user not in refused and args.user2 not in refused,
          str(refused))
    try:
        l.sendmail("dave@example.net", [args.user], b"Subject: big\r\n\r\n" + b"x" * (args.max_size + 10))
        check("LMTP refuses an oversized message", False, "accepted")
    except smtplib.SMTPDataError as e:
        check("LMTP refuses an oversized message with 552", e.smtp_code == 552, str(e))
    except smtplib.SMTPRecipientsRefused as e:
        check("LMTP refuses an oversized message with 552", "552" in str(e), str(e))
    l.quit()
    typ, data = watcher.noop()
    check("a logged-in user sees the LMTP delivery at once",
          len(watcher.untagged_responses.get("EXISTS", [])) > 0, str(watcher.untagged_responses))
    watcher.select("INBOX")
    typ, data = watcher.search(None, "SUBJECT", '"via lmtp"')
    num = data[0].split()[-1] if data[0] else b"0"
    typ, data = watcher.fetch(num, "(BODY.PEEK[])")
    # Dovecot's LMTP adds Return-Path (RFC 5321 4.4) and Delivered-To; the rest is as sent.
    def traced(user):
        return (b"Return-Path: <dave@example.net>\r\nDelivered-To: " + user.encode() +
                b"\r\n" + msg)
    check("the LMTP message is stored as sent (dot-stuffing undone) after Return-Path and "
          "Delivered-To", data[0][1] == traced(args.user), str(data)[:300])
    watcher.logout()
    m = login(args, args.user2, args.password2)
    typ, data = m.select("INBOX")
    # The login answers from INBOX as it is and the worker drains the queue after it
    # (imapd/worker.c "THE DRAIN"): the delivery is announced as EXISTS (RFC 3501 7.3.1),
    # polled with NOOP and a deadline.
    exists = int(data[0]) if typ == "OK" else -1
    deadline = time.monotonic() + TIMEOUT
    while typ == "OK" and exists < 1 and time.monotonic() < deadline:
        typ, _ = m.noop()
        for n in m.untagged_responses.pop("EXISTS", []):
            exists = max(exists, int(n))
    check("a sealed delivery shows up after the next login", typ == "OK" and exists == 1,
          str(exists))
    typ, data = m.fetch("1", "(BODY.PEEK[])")
    check("the sealed delivery is as sent after Return-Path and Delivered-To",
          data[0][1] == traced(args.user2),
          str(data)[:200])
    m.logout()


def test_tls(args):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    m = connect(args)
    check("STARTTLS advertised", "STARTTLS" in m.capabilities, str(m.capabilities))
    typ, _ = m.starttls(ssl_context=ctx)
    check("STARTTLS", typ == "OK")
    typ, _ = m.login(args.user, args.password)
    check("LOGIN over STARTTLS", typ == "OK")
    m.select("INBOX")
    typ, data = m.fetch("1:*", "(UID)")
    check("FETCH over STARTTLS", typ == "OK", str(data))
    m.logout()
    # A command sent in the same packet as STARTTLS must not survive the handshake.
    r = Raw(args.imap)
    r.send(b"s1 STARTTLS\r\ns2 LOGIN %s x\r\n" % args.user.encode())
    _, tagged = r.until("s1")
    check("STARTTLS OK", tagged.startswith(b"s1 OK"), tagged)
    tls = ctx.wrap_socket(r.sock, server_hostname="localhost")
    tls.sendall(b"s3 NOOP\r\n")
    data = b""
    while b"s3 " not in data:
        chunk = tls.recv(4096)
        if not chunk:
            break
        data += chunk
    check("input pipelined after STARTTLS is discarded", b"s2" not in data and b"s3 OK" in data, data)
    tls.close()
    if args.imaps:
        s = imaplib.IMAP4_SSL("127.0.0.1", args.imaps, ssl_context=ctx, timeout=TIMEOUT)
        typ, _ = s.login(args.user, args.password)
        check("LOGIN over implicit TLS", typ == "OK")
        s.logout()


def test_limits(args):
    host = args.external_ip or "127.0.0.1"
    a = Raw(args.imap, host=host)
    b = Raw(args.imap, host=host)
    c = Raw(args.imap, host=host)
    check("two connections from one address are accepted",
          a.greeting.startswith(b"* OK") and b.greeting.startswith(b"* OK"), (a.greeting, b.greeting))
    check("the third is refused", c.greeting.startswith(b"* BYE"), c.greeting)
    c.close()
    b.close()
    _, tagged = a.command("t1", "NOOP")
    check("a session works before the idle timeout", tagged.startswith(b"t1 OK"), tagged)
    start = time.monotonic()
    line = a.line()
    check("an idle session is closed with BYE", line.startswith(b"* BYE") and b"idle" in line, line)
    check("the idle timeout is kept", time.monotonic() - start < 5, time.monotonic() - start)
    a.close()
    if args.external_ip:
        # Not loopback and no TLS: no LOGIN, no AUTHENTICATE.
        r = Raw(args.imap, host=args.external_ip)
        check("LOGINDISABLED without TLS from another host", b"LOGINDISABLED" in r.greeting and
              b"AUTH=PLAIN" not in r.greeting, r.greeting)
        _, tagged = r.command("x1", "LOGIN alice@example.org secret")
        check("LOGIN without TLS from another host is refused", b"PRIVACYREQUIRED" in tagged, tagged)
        r.close()


def test_qresync(args):
    r = Raw(args.imap)
    r.command("r0", 'LOGIN %s "%s"' % (args.user, args.password))
    r.command("r1", "CREATE Qr")
    for i in range(5):
        msg = MESSAGE + b"qresync %d\r\n" % i
        r.send(b"r2 APPEND Qr {%d+}\r\n" % len(msg) + msg + b"\r\n")
        r.until("r2")
    _, tagged = r.command("r3", "SELECT Qr (QRESYNC (1 1))")
    check("SELECT (QRESYNC ...) before ENABLE QRESYNC is BAD", tagged.startswith(b"r3 BAD"), tagged)
    lines, tagged = r.command("r4", "ENABLE QRESYNC")
    check("ENABLE QRESYNC", lines == [b"* ENABLED QRESYNC"], lines)
    lines, tagged = r.command("r5", "SELECT Qr")
    validity = int([l for l in lines if b"UIDVALIDITY" in l][0].split(b"UIDVALIDITY ")[1].split(b"]")[0])
    high = int([l for l in lines if b"HIGHESTMODSEQ" in l][0].split(b"HIGHESTMODSEQ ")[1].split(b"]")[0])
    r.command("r6", "STORE 2,4 +FLAGS.SILENT (\\Deleted)")
    lines, tagged = r.command("r7", "EXPUNGE")
    check("EXPUNGE answers VANISHED once QRESYNC is on",
          tagged.startswith(b"r7 OK") and b"* VANISHED 2,4" in lines and
          not any(l.endswith(b"EXPUNGE") for l in lines), lines)
    r.command("r8", "STORE 1 +FLAGS.SILENT (\\Flagged)")
    lines, tagged = r.command("r9", "UID FETCH 1:* (FLAGS) (CHANGEDSINCE %d VANISHED)" % high)
    check("UID FETCH (CHANGEDSINCE m VANISHED)", tagged.startswith(b"r9 OK") and
          lines[:1] == [b"* VANISHED (EARLIER) 2,4"] and len(lines) == 2 and
          lines[1].startswith(b"* 1 FETCH") and b"MODSEQ" in lines[1], lines)
    _, tagged = r.command("r10", "FETCH 1:* (FLAGS) (CHANGEDSINCE %d VANISHED)" % high)
    check("VANISHED without UID FETCH is BAD", tagged.startswith(b"r10 BAD"), tagged)
    lines, tagged = r.command("r11", "EXAMINE INBOX")
    check("a new SELECT says [CLOSED] first", lines[:1] == [b"* OK [CLOSED] the previous mailbox is closed"],
          lines[:2])
    r.command("r12", "LOGOUT")
    r.close()

    b = Raw(args.imap)
    b.command("s0", 'LOGIN %s "%s"' % (args.user, args.password))
    b.command("s1", "ENABLE QRESYNC")
    lines, tagged = b.command("s2", "SELECT Qr (QRESYNC (%d %d))" % (validity, high))
    check("SELECT (QRESYNC (uidvalidity modseq)) reports what vanished and what changed",
          tagged.startswith(b"s2 OK") and b"* VANISHED (EARLIER) 2,4" in lines and
          [l for l in lines if b"FETCH" in l] == [l for l in lines if l.startswith(b"* 1 FETCH (UID 1 ")]
          and any(l.startswith(b"* 1 FETCH (UID 1 ") and b"\\Flagged" in l for l in lines), lines)
    lines, tagged = b.command("s3", "EXAMINE Qr (QRESYNC (%d %d 3:5))" % (validity, high))
    check("known UIDs narrow VANISHED (EARLIER)", tagged.startswith(b"s3 OK") and
          b"* VANISHED (EARLIER) 4" in lines and not any(b"FETCH" in l for l in lines), lines)
    lines, tagged = b.command("s4", "EXAMINE Qr (QRESYNC (%d %d 1:5 (1:3 1,3,5)))" % (validity, high))
    check("sequence match data is accepted", tagged.startswith(b"s4 OK") and
          b"* VANISHED (EARLIER) 2,4" in lines, lines)
    lines, tagged = b.command("s5", "EXAMINE Qr (QRESYNC (%d %d))" % (validity + 1, high))
    check("another UIDVALIDITY: no VANISHED", tagged.startswith(b"s5 OK") and
          not any(b"VANISHED" in l for l in lines), lines)
    _, tagged = b.command("s6", "EXAMINE Qr (QRESYNC (%d))" % validity)
    check("a malformed QRESYNC parameter is BAD", tagged.startswith(b"s6 BAD"), tagged)
    b.command("s7", "LOGOUT")
    b.close()


def test_quota_unlimited(args):
    r = Raw(args.imap)
    r.command("q0", 'LOGIN %s "%s"' % (args.user, args.password))
    lines, tagged = r.command("q1", "CAPABILITY")
    check("QUOTA in the capabilities", lines and b" QUOTA " in lines[0] and
          b"QUOTA=RES-STORAGE" in lines[0], lines)
    lines, tagged = r.command("q2", "GETQUOTAROOT INBOX")
    check("no quota root without a quota", tagged.startswith(b"q2 OK") and
          lines == [b'* QUOTAROOT "INBOX"'], (lines, tagged))
    lines, tagged = r.command("q3", 'GETQUOTA ""')
    check("GETQUOTA without a quota is NO", tagged.startswith(b"q3 NO [NONEXISTENT]"), tagged)
    lines, tagged = r.command("q4", "GETQUOTAROOT Nonesuch")
    check("GETQUOTAROOT of a missing mailbox is NO", tagged.startswith(b"q4 NO"), tagged)
    r.command("q5", "LOGOUT")
    r.close()


def quota_message(size):
    head = b"From: q@example.org\r\nTo: carol@example.org\r\nSubject: quota\r\n\r\n"
    return head + b"x" * (size - len(head) - 2) + b"\r\n"


def test_quota(args):
    """A server with quota_kib=8 and a fresh user (args.user)."""
    r = Raw(args.imap)
    r.command("q0", 'LOGIN %s "%s"' % (args.user, args.password))
    lines, tagged = r.command("q1", "GETQUOTAROOT INBOX")
    check("GETQUOTAROOT names the root and its usage", tagged.startswith(b"q1 OK") and
          lines == [b'* QUOTAROOT "INBOX" ""', b'* QUOTA "" (STORAGE 0 8)'], (lines, tagged))
    msg = quota_message(5000)
    r.send(b"q2 APPEND INBOX {%d+}\r\n" % len(msg) + msg + b"\r\n")
    _, tagged = r.until("q2")
    check("APPEND under the quota", tagged.startswith(b"q2 OK"), tagged)
    lines, tagged = r.command("q3", 'GETQUOTA ""')
    check("GETQUOTA counts it (KiB, rounded up)", tagged.startswith(b"q3 OK") and
          lines == [b'* QUOTA "" (STORAGE 5 8)'], (lines, tagged))
    r.send(b"q4 APPEND INBOX {%d+}\r\n" % len(msg) + msg + b"\r\n")
    _, tagged = r.until("q4")
    check("APPEND over the quota: NO [OVERQUOTA]", tagged.startswith(b"q4 NO [OVERQUOTA]"), tagged)
    r.send(b"q4b APPEND Nonesuch {%d+}\r\n" % len(msg) + msg + b"\r\n")
    _, tagged = r.until("q4b")
    check("APPEND over the quota to a missing mailbox: TRYCREATE", tagged.startswith(b"q4b NO [TRYCREATE]"),
          tagged)
    r.command("q5", "SELECT INBOX")
    _, tagged = r.command("q6", "COPY 1 INBOX")
    check("COPY over the quota: NO [OVERQUOTA]", tagged.startswith(b"q6 NO [OVERQUOTA]"), tagged)
    _, tagged = r.command("q7", 'SETQUOTA "" (STORAGE 100)')
    check("SETQUOTA is refused", tagged.startswith(b"q7 NO"), tagged)
    # The session keeps the store open: LMTP delivers into it directly and checks the quota.
    lmtp = smtplib.LMTP("127.0.0.1", args.lmtp, timeout=TIMEOUT)
    try:
        lmtp.sendmail("q@example.org", [args.user], msg)
        code, text = 250, b""
    except smtplib.SMTPDataError as e:
        code, text = e.smtp_code, e.smtp_error
    check("LMTP over the quota: 552 5.2.2", code == 552 and text.startswith(b"5.2.2"), (code, text))
    refused = lmtp.sendmail("q@example.org", [args.user], quota_message(1000))
    check("LMTP under the quota is delivered", refused == {}, refused)
    lmtp.quit()
    lines, tagged = r.command("q8", "NOOP")
    check("the delivery shows up", any(l.endswith(b"EXISTS") for l in lines), lines)
    r.command("q9", "LOGOUT")
    r.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--imaps", type=int, default=0)
    p.add_argument("--lmtp", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--user2", required=True)
    p.add_argument("--password2", required=True)
    p.add_argument("--auth-delay-ms", type=int, default=0)
    p.add_argument("--max-size", type=int, default=1 << 20)
    p.add_argument("--tls", action="store_true")
    p.add_argument("--external-ip", default="",
                   help="a non-loopback address of this host the limits server listens on")
    p.add_argument("--limits", action="store_true",
                   help="only the limit checks (a server with idle_timeout_s=1 and "
                        "connections_per_address_max=2)")
    p.add_argument("--quota", action="store_true",
                   help="only the quota checks (a server with quota_kib=8, a fresh user)")
    args = p.parse_args()
    if args.quota:
        attempt("test_quota", lambda: test_quota(args))
        print("# %d passed, %d failed" % (passed, failed))
        return 1 if failed else 0
    if args.limits:
        for t in (test_limits,):
            attempt(t.__name__, lambda: t(args))
        print("# %d passed, %d failed" % (passed, failed))
        return 1 if failed else 0
    tests = [test_login, test_authenticate, test_mailboxes, test_messages, test_concurrent,
             test_mime, test_nested_sections, test_command_shapes, test_fetch_streaming,
             test_fetch_streaming_sessions, test_uidplus_move, test_idle, test_small_extensions, test_condstore,
             test_selected_mailbox_deleted, test_parallel,
             test_malformed,
             test_pipelining, test_lmtp, test_quota_unlimited, test_qresync]
    if args.tls:
        tests.append(test_tls)
    for t in tests:
        attempt(t.__name__, lambda: t(args))
    print("# %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
