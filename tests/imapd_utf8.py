#!/usr/bin/env python3
"""imapd_utf8.py -- mailvaultd's UTF8=ACCEPT (RFC 6855). Run by tests/cli_imapd_utf8.sh, which
makes the user and starts the server.

USAGE
  imapd_utf8.py --imap PORT --user ADDR:PASSWORD

WHAT IT CHECKS
  - UTF8=ACCEPT is advertised after login; ENABLE UTF8=ACCEPT answers "* ENABLED UTF8=ACCEPT"
    once (a second ENABLE names nothing), is refused before login, and is left out of
    ENABLED after a SELECT or EXAMINE (also after UNSELECT): that session keeps modified
    UTF-7;
  - one stored name, two wire forms: a mailbox created in modified UTF-7 by a plain session
    is listed in UTF-8 (quoted) by an enabled one, and one created in UTF-8 (quoted and as a
    literal) by an enabled session is listed in modified UTF-7 by the plain one; creating
    it again in the other form is NO [ALREADYEXISTS]; STATUS, SELECT, RENAME, DELETE and
    LIST patterns take UTF-8 once enabled; "&...-" is an ordinary name once enabled;
  - BAD for names that are not UTF-8 (quoted Latin-1, a literal with Latin-1, overlong
    forms, surrogates), names with C1 controls or U+2028, invalid UTF-8 in any quoted
    string once enabled, and patterns that are not UTF-8;
  - APPEND UTF8 (~{n}...) and UTF8 (~{n+}...) once enabled: stored byte for byte
    (BODY[] is identical), with flags and a date; BAD without ENABLE (both literal forms,
    the connection stays usable), BAD for an ordinary literal inside UTF8 (...), for a bare
    ~{n} and for more than the literal8 in the list;
  - ENVELOPE of a message with UTF-8 headers: raw UTF-8 in quoted strings once enabled
    (subject, display name, an internationalised address); for a plain session no 8-bit
    byte outside literals, the 8-bit display name as an RFC 2047 word;
  - SEARCH: once enabled any CHARSET (UTF-8, US-ASCII, also in UID SEARCH) is BAD, and a
    quoted UTF-8 string finds the message; a plain session keeps CHARSET UTF-8 (OK) and
    NO [BADCHARSET] for an unknown one.
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import base64
import re
import sys

import imapd_common

results = imapd_common.Results()
check = results.report

JAPANESE = "\u65e5\u672c\u8a9e"  # three CJK characters (the RFC 3501 5.1.3 example)
CAFE = "Caf\u00e9"


def mutf7(name):
    """Modified UTF-7 (RFC 3501 5.1.3) of a str, written out here from the RFC's rules."""
    out, run = [], []

    def flush():
        if run:
            b64 = base64.b64encode("".join(run).encode("utf-16-be")).decode()
            out.append("&" + b64.rstrip("=").replace("/", ",") + "-")
            run.clear()

    for ch in name:
        if 0x20 <= ord(ch) < 0x7f:
            flush()
            out.append("&-" if ch == "&" else ch)
        else:
            run.append(ch)
    flush()
    return "".join(out)


login = imapd_common.imap_login


def status(tagged):
    """OK, NO or BAD of a tagged line."""
    parts = tagged.split(b" ")
    return parts[1].decode() if len(parts) > 1 else ""


def q(name):
    """A quoted string of a str (UTF-8 bytes inside)."""
    return b'"' + name.encode().replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def listed(untagged):
    """The mailbox names of * LIST lines as bytes (quoted ones unquoted, literals as given)."""
    names = []
    for text, lits in untagged:
        m = re.match(rb'\* LIST \([^)]*\) "/" (.*)$', text)
        if not m:
            continue
        name = m.group(1)
        if name == b"{}" and lits:
            names.append(b"LITERAL:" + lits[0])
        elif name.startswith(b'"'):
            names.append(re.sub(rb'\\(.)', rb'\1', name[1:-1]))
        else:
            names.append(name)
    return names


def raw(c, data):
    """Sends tag + data (bytes, CRLF included by the caller) and returns (untagged, tagged),
    answering synchronising literals: data is cut after each "{n}\\r\\n" / "~{n}\\r\\n" and
    the rest sent once the server says "+" (or stops at a tagged answer)."""
    tag = c.tag()
    pieces = re.split(rb"(~?\{\d+\}\r\n)", data)
    chunk = tag + b" " + pieces[0]
    untagged = []
    i = 1
    while i < len(pieces):
        chunk += pieces[i]
        c.sock.sendall(chunk)
        while True:
            r = c.read_response()
            if r[0].startswith(b"+"):
                break
            if r[0].startswith(tag + b" "):
                return untagged, r[0]
            untagged.append(r)
        chunk = pieces[i + 1]
        i += 2
    c.sock.sendall(chunk)
    more, tagged = c.until(tag)
    return untagged + more, tagged


MESSAGE = ("From: \"Ren\u00e9e\" <r@example.org>\r\n"
           "To: \u03b4\u03bf\u03ba\u03b9\u03bc\u03ae@\u03c0\u03b1\u03c1\u03ac\u03b4\u03b5\u03b9"
           "\u03b3\u03bc\u03b1.example\r\n"
           "Subject: Caf\u00e9 \u65e5\u672c\r\n"
           "Date: Mon, 02 Mar 2026 10:00:00 +0000\r\n"
           "Message-ID: <utf8.1@example.org>\r\n"
           "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
           "Content-Transfer-Encoding: 8bit\r\n\r\n"
           "Gr\u00fc\u00dfe aus K\u00f6ln\r\n").encode()


def test_enable(args, user, password):
    c = imapd_common.Imap(args.imap, 20)
    _, tagged = c.command("ENABLE UTF8=ACCEPT")
    check("ENABLE before login is BAD", status(tagged) == "BAD", repr(tagged))
    c.command("LOGOUT")
    c.close()

    c = login(args.imap, user, password)
    u, tagged = c.command("CAPABILITY")
    caps = u[0][0].split() if u else []
    check("UTF8=ACCEPT advertised after login", b"UTF8=ACCEPT" in caps, repr(u))
    u, tagged = c.command("ENABLE UTF8=ACCEPT")
    check("ENABLE UTF8=ACCEPT: * ENABLED UTF8=ACCEPT",
          status(tagged) == "OK" and [x[0] for x in u] == [b"* ENABLED UTF8=ACCEPT"], repr(u))
    u, tagged = c.command("ENABLE UTF8=ACCEPT CONDSTORE")
    check("ENABLE again: only what is new is named",
          status(tagged) == "OK" and [x[0] for x in u] == [b"* ENABLED CONDSTORE"], repr(u))
    c.command("LOGOUT")
    c.close()

    late = login(args.imap, user, password)
    late.command("SELECT INBOX")
    u, tagged = late.command("ENABLE UTF8=ACCEPT")
    check("ENABLE UTF8=ACCEPT after SELECT: not enabled",
          status(tagged) == "OK" and [x[0] for x in u] == [b"* ENABLED"], repr((u, tagged)))
    late.command("UNSELECT")
    u, tagged = late.command("ENABLE UTF8=ACCEPT")
    check("ENABLE UTF8=ACCEPT after UNSELECT: still not enabled",
          [x[0] for x in u] == [b"* ENABLED"], repr((u, tagged)))
    return late  # a session that stays in modified UTF-7


def test_names(plain, utf8, late):
    jp_cafe = JAPANESE + "/" + CAFE
    _, tagged = plain.command("CREATE %s" % mutf7(jp_cafe))
    check("plain session: CREATE in modified UTF-7", status(tagged) == "OK", repr(tagged))
    u, _ = plain.command('LIST "" "*"')
    check("plain session lists it in modified UTF-7",
          mutf7(jp_cafe).encode() in listed(u) and jp_cafe.encode() not in listed(u),
          repr(listed(u)))
    u, _ = utf8.command('LIST "" "*"')
    names = listed(u)
    check("enabled session lists the same mailbox in UTF-8, quoted",
          jp_cafe.encode() in names and mutf7(jp_cafe).encode() not in names, repr(names))
    check("enabled session: every LIST line is quoted UTF-8 (no literal)",
          all(not n.startswith(b"LITERAL:") for n in names), repr(names))
    _, tagged = utf8.command(b"CREATE " + q(jp_cafe))
    check("enabled session: CREATE of the UTF-8 form of it is NO [ALREADYEXISTS]",
          status(tagged) == "NO" and b"[ALREADYEXISTS]" in tagged, repr(tagged))

    uml = "\u00dcn\u00efcode/\u5b50"
    _, tagged = utf8.command(b"CREATE " + q(uml))
    check("enabled session: CREATE a quoted UTF-8 name", status(tagged) == "OK", repr(tagged))
    u, _ = plain.command('LIST "" "*"')
    check("plain session lists it in modified UTF-7", mutf7(uml).encode() in listed(u),
          repr(listed(u)))
    _, tagged = plain.command("CREATE %s" % mutf7(uml))
    check("plain session: CREATE of its modified UTF-7 form is NO [ALREADYEXISTS]",
          status(tagged) == "NO" and b"[ALREADYEXISTS]" in tagged, repr(tagged))
    u, _ = late.command('LIST "" "*"')
    check("a session that enabled too late still gets modified UTF-7",
          mutf7(uml).encode() in listed(u) and uml.encode() not in listed(u), repr(listed(u)))

    lit = "\u0417\u0430\u043c\u0435\u0442\u043a\u0438"  # Cyrillic
    _, tagged = utf8.command(b"CREATE", literal=lit.encode())
    check("enabled session: CREATE a UTF-8 name in a literal", status(tagged) == "OK",
          repr(tagged))
    u, _ = plain.command("LIST \"\" %s" % mutf7(lit))
    check("... seen in modified UTF-7 by the plain session", listed(u) == [mutf7(lit).encode()],
          repr(listed(u)))

    _, tagged = utf8.command(b'CREATE "&ZeVnLIqe-"')
    check("enabled session: '&...-' is a plain name, not modified UTF-7", status(tagged) == "OK",
          repr(tagged))
    u, _ = plain.command('LIST "" "&-ZeVnLIqe-"')
    check("... which the plain session sees with '&' escaped", listed(u) == [b"&-ZeVnLIqe-"],
          repr(u))

    u, tagged = utf8.command(b"STATUS " + q(jp_cafe) + b" (MESSAGES)")
    check("enabled session: STATUS by UTF-8 name, answered in UTF-8",
          status(tagged) == "OK" and u and u[0][0] == b"* STATUS " + q(jp_cafe) + b" (MESSAGES 0)",
          repr(u))
    u, tagged = plain.command("STATUS %s (MESSAGES)" % mutf7(jp_cafe))
    check("plain session: STATUS answered in modified UTF-7",
          status(tagged) == "OK" and u and
          u[0][0] == b'* STATUS "' + mutf7(jp_cafe).encode() + b'" (MESSAGES 0)',
          repr(u))
    u, tagged = utf8.command(b'LIST "" ' + q(JAPANESE + "/%"))
    check("enabled session: a UTF-8 LIST pattern", listed(u) == [jp_cafe.encode()], repr(u))

    renamed = "\u00c9t\u00e9 2026"
    _, tagged = utf8.command(b"RENAME " + q(uml) + b" " + q(renamed))
    check("enabled session: RENAME between UTF-8 names", status(tagged) == "OK", repr(tagged))
    u, _ = plain.command('LIST "" "*"')
    check("... the plain session sees the new name in modified UTF-7",
          mutf7(renamed).encode() in listed(u) and mutf7(uml).encode() not in listed(u),
          repr(listed(u)))
    _, tagged = utf8.command(b"DELETE " + q(renamed))
    check("enabled session: DELETE by UTF-8 name", status(tagged) == "OK", repr(tagged))

    bad = [
        (b'CREATE "Caf\xe9"', "a quoted Latin-1 name"),
        (b'CREATE "\xc0\xaf"', "an overlong form"),
        (b'CREATE "\xed\xa0\x80"', "a surrogate"),
        (b'CREATE "a\xc2\x85b"', "a C1 control (U+0085)"),
        (b'CREATE "a\xe2\x80\xa8b"', "U+2028"),
        (b'SELECT "\xff"', "SELECT of a name that is not UTF-8"),
        (b'LIST "" "\xe6\x97"', "a pattern cut inside a character"),
        (b'STATUS "Caf\xe9" (MESSAGES)', "STATUS of a Latin-1 name"),
    ]
    for cmd, why in bad:
        _, tagged = raw(utf8, cmd + b"\r\n")
        check("enabled session: BAD for %s" % why, status(tagged) == "BAD", repr(tagged))
    _, tagged = raw(utf8, b"CREATE {4}\r\nCaf\xe9\r\n")
    check("enabled session: BAD for a Latin-1 name in a literal", status(tagged) == "BAD",
          repr(tagged))
    _, tagged = raw(utf8, b'LIST "" {3}\r\n\xe6\x97\xa5\r\n')
    check("enabled session: a UTF-8 pattern in a literal lists nothing but is OK",
          status(tagged) == "OK", repr(tagged))
    u, _ = utf8.command('LIST "" "*"')
    check("nothing was created by the BAD commands",
          not any(b"\xe9" in n or b"\xc2\x85" in n for n in listed(u)), repr(listed(u)))
    return jp_cafe


def test_append(plain, utf8, box):
    msg = MESSAGE
    _, tagged = raw(utf8, b"APPEND " + q(box) + b" UTF8 (~{%d}\r\n" % len(msg) + msg + b")\r\n")
    check("APPEND UTF8 (~{n}) once enabled", status(tagged) == "OK" and b"[APPENDUID" in tagged,
          repr(tagged))
    msg2 = msg.replace(b"utf8.1@", b"utf8.2@")
    _, tagged = raw(utf8, b"APPEND " + q(box) + b' (\\Flagged) "02-Mar-2026 10:00:00 +0000" '
                    b"UTF8 (~{%d+}\r\n" % len(msg2) + msg2 + b")\r\n")
    check("APPEND flags date UTF8 (~{n+}) once enabled", status(tagged) == "OK", repr(tagged))

    _, tagged = raw(plain, b"APPEND INBOX UTF8 (~{%d}\r\n" % len(msg) + msg + b")\r\n")
    check("APPEND UTF8 (~{n}) without ENABLE is BAD", status(tagged) == "BAD", repr(tagged))
    _, tagged = raw(plain, b"APPEND INBOX UTF8 (~{%d+}\r\n" % len(msg) + msg + b")\r\n")
    check("APPEND UTF8 (~{n+}) without ENABLE is BAD", status(tagged) == "BAD", repr(tagged))
    _, tagged = plain.command("NOOP")
    check("... and the connection goes on", status(tagged) == "OK", repr(tagged))
    for data, why in [
            (b"UTF8 ({3}\r\nabc)", "an ordinary literal inside UTF8 (...)"),
            (b"~{3}\r\nabc", "a bare literal8"),
            (b"UTF8 (~{3}\r\nabc x)", "more than the literal8 in the list"),
            (b'UTF8 ("abc")', "a quoted string inside UTF8 (...)")]:
        _, tagged = raw(utf8, b"APPEND " + q(box) + b" " + data + b"\r\n")
        check("enabled session: APPEND with %s is BAD" % why, status(tagged) == "BAD",
              repr(tagged))
    u, tagged = utf8.command(b"STATUS " + q(box) + b" (MESSAGES)")
    check("only the two good APPENDs were stored",
          u and u[0][0].endswith(b"(MESSAGES 2)"), repr(u))

    u, tagged = utf8.command(b"SELECT " + q(box))
    check("enabled session: SELECT by UTF-8 name", status(tagged) == "OK", repr(tagged))
    u, tagged = utf8.command("FETCH 1:2 (BODY.PEEK[] FLAGS INTERNALDATE)")
    bodies = [lits[0] for _, lits in u if lits]
    check("the UTF8 APPENDs are stored byte for byte", bodies == [msg, msg2], repr(bodies)[:300])
    check("flags and date of the ~{n+} APPEND",
          len(u) == 2 and b"\\Flagged" in u[1][0] and b"02-Mar-2026 10:00:00 +0000" in u[1][0],
          repr(u[1][0] if len(u) > 1 else u))

    u, tagged = utf8.command("FETCH 1 (ENVELOPE)")
    env = u[0][0] if u else b""
    check("enabled ENVELOPE: the subject as quoted UTF-8",
          ("\"Caf\u00e9 \u65e5\u672c\"").encode() in env and not (u and u[0][1]), repr(u))
    check("enabled ENVELOPE: the display name as quoted UTF-8, not an RFC 2047 word",
          ("((\"Ren\u00e9e\" NIL \"r\" \"example.org\"))").encode() in env and b"=?" not in env,
          repr(env))
    check("enabled ENVELOPE: an internationalised address as quoted UTF-8",
          ("\"\u03b4\u03bf\u03ba\u03b9\u03bc\u03ae\"").encode() in env, repr(env))

    u, tagged = plain.command("SELECT %s" % mutf7(box))
    check("plain session: SELECT the same mailbox in modified UTF-7", status(tagged) == "OK",
          repr(tagged))
    u, tagged = plain.command("FETCH 1 (ENVELOPE)")
    text, lits = u[0] if u else (b"", [])
    check("plain ENVELOPE: no 8-bit byte outside literals", all(b < 0x80 for b in text),
          repr(text))
    check("plain ENVELOPE: the UTF-8 subject comes as a literal",
          ("Caf\u00e9 \u65e5\u672c").encode() in lits, repr(lits))
    check("plain ENVELOPE: the 8-bit display name as an RFC 2047 word",
          b'(("=?UTF-8?b?UmVuw6ll?=" NIL "r" "example.org"))' in text, repr(text))


def test_search(plain, utf8):
    for cmd in ('SEARCH CHARSET UTF-8 SUBJECT "Caf\xc3\xa9"', "SEARCH CHARSET US-ASCII ALL",
                "UID SEARCH CHARSET UTF-8 ALL", "SEARCH CHARSET KOI8-R ALL"):
        _, tagged = raw(utf8, cmd.encode("latin-1") + b"\r\n")
        check("enabled session: %s is BAD" % cmd.split(" SUBJECT")[0].split(" ALL")[0],
              status(tagged) == "BAD", repr(tagged))
    u, tagged = raw(utf8, b'SEARCH SUBJECT "Caf\xc3\xa9"\r\n')
    check("enabled session: SEARCH with a quoted UTF-8 string finds both messages",
          status(tagged) == "OK" and u and u[0][0] == b"* SEARCH 1 2", repr((u, tagged)))
    u, tagged = raw(utf8, b'SEARCH SUBJECT "Caf\xe9"\r\n')
    check("enabled session: SEARCH with a quoted Latin-1 string is BAD", status(tagged) == "BAD",
          repr(tagged))
    u, tagged = raw(plain, b"SEARCH CHARSET UTF-8 SUBJECT {5}\r\nCaf\xc3\xa9\r\n")
    check("plain session: SEARCH CHARSET UTF-8 is still OK",
          status(tagged) == "OK" and u and u[0][0] == b"* SEARCH 1 2", repr((u, tagged)))
    _, tagged = plain.command("SEARCH CHARSET KOI8-R ALL")
    check("plain session: an unknown charset is NO [BADCHARSET]",
          status(tagged) == "NO" and b"[BADCHARSET" in tagged, repr(tagged))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--user", required=True)
    args = p.parse_args()
    user, password = args.user.split(":", 1)
    try:
        late = test_enable(args, user, password)
        plain = login(args.imap, user, password)
        utf8 = login(args.imap, user, password)
        utf8.command("ENABLE UTF8=ACCEPT")
        box = test_names(plain, utf8, late)
        test_append(plain, utf8, box)
        test_search(plain, utf8)
        for c in (plain, utf8, late):
            c.command("LOGOUT")
            c.close()
    except Exception as e:  # a dead server or a protocol error: one failure, then the summary
        check("the client ran to the end", False, "%s: %s" % (type(e).__name__, e))
    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
