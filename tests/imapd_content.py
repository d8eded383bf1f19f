"""imapd_content.py -- mailvaultd's message content rules, each named by the RFC rule it
checks (issue 12): where the header ends (RFC 3501 6.4.5, RFC 5322 2.1), folded MIME
parameters (RFC 5322 2.2.3, RFC 2045), '[' in mailbox names (RFC 3501 9 atom-specials),
SENT* dates as written (RFC 3501 6.4.4), SEARCH BODY / TEXT as case-insensitive substrings
of the body / the whole message and HEADER / BCC of the decoded field (RFC 3501 6.4.4,
RFC 2047), SEARCH programs of any length within the line (issue 13), extra SP in a flag
list from Dovecot's imapc (RFC 3501 9, liberal), and LMTP's Return-Path / Delivered-To
(RFC 5321 4.4, as Dovecot's LMTP). Also a fetch-and-deliver client (fetchmail's RFC822.HEADER +
BODY.PEEK[TEXT]) reading headerless mail.

USAGE
  python3 tests/imapd_content.py --imap PORT --lmtp PORT --user ADDR:PASSWORD
Prints PASS/FAIL lines and "# N passed, N failed" last.
"""
import argparse
import re
import sys

import imapd_common

TIMEOUT = 60
results = imapd_common.Results()
check = results.report


def ok(tagged):
    return b" OK" in tagged


def fetch_literals(c, what):
    untagged, tagged = c.command(what)
    lits = [lit for text, l in untagged for lit in l]
    return untagged, tagged, lits


def append(c, box, msg, flags=b""):
    _, tagged = c.command(b"APPEND " + box + (b" " + flags if flags else b""), msg)
    m = re.search(rb"APPENDUID \d+ (\d+)", tagged)
    return int(m.group(1)) if m else None


def search(c, criteria):
    untagged, tagged = c.command(b"UID SEARCH " + criteria)
    uids = set()
    for text, _ in untagged:
        if text.startswith(b"* SEARCH"):
            uids |= {int(x) for x in re.findall(rb" (\d+)", text)}
    return uids, tagged


def test_empty_header(c):
    """RFC 3501 6.4.5 / RFC 5322 2.1: a message starting with CRLF has an empty header."""
    body = b"Subject: this line is body text\r\n\r\nsecond paragraph\r\n" + b"x" * 40 + b"\r\n"
    msg = b"\r\n" + body
    c.command("SELECT INBOX")
    uid = append(c, b"INBOX", msg)
    check("APPEND of a headerless message", uid is not None)
    _, tagged, lits = fetch_literals(
        c, "UID FETCH %d (BODY.PEEK[HEADER] BODY.PEEK[TEXT] RFC822.HEADER RFC822.TEXT "
           "RFC822.SIZE)" % uid)
    check("RFC 3501 6.4.5: BODY[HEADER] of a message starting with CRLF is just that CRLF",
          len(lits) == 4 and lits[0] == b"\r\n", repr(lits[:1]))
    check("RFC 3501 6.4.5: BODY[TEXT] is everything after the empty first line",
          len(lits) == 4 and lits[1] == body, repr(lits[1:2])[:200])
    check("RFC822.HEADER and RFC822.TEXT split the same way",
          len(lits) == 4 and lits[2] == b"\r\n" and lits[3] == body)
    untagged, _ = c.command("UID FETCH %d (BODYSTRUCTURE)" % uid)
    text = b" ".join(t for t, _ in untagged)
    check("BODYSTRUCTURE's size agrees with BODY[TEXT]", b" %d " % len(body) in text, repr(text))

    # A fetch-and-deliver client (fetchmail: RFC822.HEADER, then BODY.PEEK[TEXT]) rebuilds
    # the message byte for byte and delivers it (here: appends it to another mailbox).
    c.command("CREATE Delivered")
    _, _, head = fetch_literals(c, "UID FETCH %d (RFC822.HEADER)" % uid)
    _, _, text_lits = fetch_literals(c, "UID FETCH %d (BODY.PEEK[TEXT])" % uid)
    rebuilt = (head[0] if head else b"") + (text_lits[0] if text_lits else b"")
    check("a fetch-and-deliver client (header + text) gets the whole headerless message",
          rebuilt == msg, repr(rebuilt)[:200])
    new_uid = append(c, b"Delivered", rebuilt)
    c.command("SELECT Delivered")
    _, _, again = fetch_literals(c, "UID FETCH %d (BODY.PEEK[TEXT])" % (new_uid or 0))
    check("the delivered copy keeps its body", again == [body])
    c.command("SELECT INBOX")


def test_folded_boundary(c):
    """RFC 5322 2.2.3 / RFC 2045 5.1: unfolding removes CRLF; the boundary is "foo bar"."""
    msg = (b"From: a@example.org\r\nSubject: folded\r\nMIME-Version: 1.0\r\n"
           b"Content-Type: multipart/mixed; boundary=\"foo\r\n bar\"\r\n\r\n"
           b"--foo bar\r\nContent-Type: text/plain\r\n\r\npart one\r\n"
           b"--foo bar\r\nContent-Type: message/rfc822\r\n\r\n"
           b"Subject: inner\r\n\r\ninner body\r\n"
           b"--foo bar--\r\n")
    uid = append(c, b"INBOX", msg)
    untagged, tagged, lits = fetch_literals(
        c, "UID FETCH %d (BODY.PEEK[1] BODY.PEEK[1.MIME] BODY.PEEK[2.HEADER] BODY.PEEK[2.TEXT])"
        % uid)
    text = b" ".join(t for t, _ in untagged)
    check("RFC 2045/5322 2.2.3: a folded boundary parameter still finds the parts "
          "(BODY[1], [1.MIME], [2.HEADER], [2.TEXT] not NIL)",
          lits == [b"part one", b"Content-Type: text/plain\r\n\r\n", b"Subject: inner\r\n\r\n",
                   b"inner body"], repr(text)[:300] + repr(lits))


def test_bracket_names(c):
    """RFC 3501 9: '[' is not an atom-special; ']' is an ASTRING-CHAR."""
    for name in (b"foo[bar", b"foo[bar]"):
        _, tagged = c.command(b"CREATE " + name)
        check("RFC 3501 9: CREATE %s (unquoted '[') is not BAD" % name.decode(), ok(tagged),
              repr(tagged))
        untagged, tagged = c.command(b'LIST "" "' + name + b'"')
        check("LIST finds %s" % name.decode(), any(name in t for t, _ in untagged),
              repr(untagged))
        _, tagged = c.command(b"SELECT " + name)
        check("SELECT %s (unquoted)" % name.decode(), ok(tagged), repr(tagged))
    _, tagged = c.command(b"FETCH 1 BODY[HEADER")
    check("an unterminated section is still BAD", b" BAD" in tagged, repr(tagged))
    c.command("SELECT INBOX")


def test_imapc_flag_list(c):
    """Dovecot's imapc sends "( $Label1 Work)"; nothing is ambiguous, so accept it."""
    msg = b"From: a@example.org\r\nSubject: imapc\r\n\r\nbody\r\n"
    _, tagged = c.command(b"APPEND INBOX ( $Label1 Work)", msg)
    check("APPEND with a space after '(' in the flag list (dsync through imapc) is accepted",
          ok(tagged), repr(tagged))
    m = re.search(rb"APPENDUID \d+ (\d+)", tagged)
    if m:
        untagged, _ = c.command(b"UID FETCH " + m.group(1) + b" FLAGS")
        text = b" ".join(t for t, _ in untagged)
        check("the keywords are stored", b"$Label1" in text and b"Work" in text, repr(text))
    _, tagged = c.command(b"UID STORE 1 +FLAGS ( \\Seen )")
    check("STORE with blanks inside the list", ok(tagged), repr(tagged))


def test_sent_dates(c):
    """RFC 3501 6.4.4: SENT* compare the Date: header's date, disregarding time and zone."""
    plus = append(c, b"INBOX", b"Date: Sun, 25 Mar 2007 00:00:00 +0200\r\nSubject: east\r\n\r\nx\r\n")
    minus = append(c, b"INBOX",
                   b"Date: Sat, 24 Mar 2007 23:30:00 -0500\r\nSubject: west\r\n\r\nx\r\n")
    cases = [(b"SENTON 25-Mar-2007", plus, True), (b"SENTON 24-Mar-2007", plus, False),
             (b"SENTBEFORE 25-Mar-2007", plus, False), (b"SENTSINCE 25-Mar-2007", plus, True),
             (b"SENTON 24-Mar-2007", minus, True), (b"SENTSINCE 25-Mar-2007", minus, False),
             (b"SENTBEFORE 25-Mar-2007", minus, True)]
    for crit, uid, want in cases:
        uids, tagged = search(c, crit)
        check("RFC 3501 6.4.4: %s %s the message dated %s" %
              (crit.decode(), "matches" if want else "does not match",
               "+0200" if uid == plus else "-0500"),
              ok(tagged) and ((uid in uids) == want), repr((uids, tagged)))
    # The session keeps the sent days it read (imapd/imap_search_sent.c): a message that
    # comes after, and one without a Date header, are answered as the store answers them.
    later = append(c, b"INBOX", b"Date: Mon, 26 Mar 2007 10:00:00 +0000\r\nSubject: l\r\n\r\nx\r\n")
    undated = append(c, b"INBOX", b"Subject: no date\r\n\r\nx\r\n")
    c.command("NOOP")  # the view learns of both
    uids, tagged = search(c, b"SENTSINCE 26-Mar-2007")
    check("SENTSINCE finds a message appended after the session read the sent days",
          ok(tagged) and later in uids and plus not in uids, repr((uids, tagged)))
    uids, tagged = search(c, b"OR SENTBEFORE 1-Jan-2100 SENTSINCE 1-Jan-1970")
    check("a message without a Date header matches no SENT* key",
          ok(tagged) and undated not in uids and {plus, minus, later} <= uids, repr(uids))
    uids, tagged = search(c, b"NOT SENTBEFORE 1-Jan-2100")
    check("... and so NOT SENTBEFORE matches it", ok(tagged) and undated in uids, repr(uids))


def test_sent_dates_shared(args, c):
    """The open store's copy of the sent days serves every session of the user (a webmail's
    session a page): one session's read, then another's message, another mailbox searched
    (the copy read again for it), then INBOX again: each answer as the store's."""
    user, password = args.user.split(":", 1)
    c.command("SELECT INBOX")
    d = imapd_common.imap_login(args.imap, user, password, TIMEOUT)
    d.command("SELECT INBOX")
    uids, tagged = search(d, b"SENTSINCE 26-Mar-2007")
    check("a second session's SENTSINCE", ok(tagged) and len(uids) >= 1, repr((uids, tagged)))
    newer = append(c, b"INBOX", b"Date: Tue, 27 Mar 2007 08:00:00 +0100\r\nSubject: n\r\n\r\nx\r\n")
    d.command("NOOP")
    uids, tagged = search(d, b"SENTON 27-Mar-2007")
    check("... finds a message the first session appended after", ok(tagged) and uids == {newer},
          repr((uids, tagged)))
    c.command("CREATE SentOther")
    other = append(c, b"SentOther", b"Date: Tue, 27 Mar 2007 09:00:00 +0000\r\nSubject: o\r\n\r\nx\r\n")
    d.command("SELECT SentOther")
    uids, tagged = search(d, b"SENTON 27-Mar-2007")
    check("another mailbox's SENTON (the copy made again for it)", ok(tagged) and uids == {other},
          repr((uids, tagged)))
    c.command("NOOP")
    uids, tagged = search(c, b"SENTON 27-Mar-2007")
    check("INBOX's again, after the other mailbox's", ok(tagged) and uids == {newer},
          repr((uids, tagged)))
    d.command("LOGOUT")


def test_body_text(c):
    """RFC 3501 6.4.4: BODY = the body, TEXT = header or body; case-insensitive substrings."""
    c.command("CREATE Search")
    c.command("SELECT Search")
    a = append(c, b"Search", b"From: x@example.org\r\nSubject: zebrafish meeting\r\n\r\n"
               b"hello world, see you\r\n")
    b = append(c, b"Search", b"From: y@example.org\r\nX-Project: quokkaland\r\nSubject: s\r\n\r\n"
               b"nothing here\r\n")
    d = append(c, b"Search", b"From: z@example.org\r\nSubject: t\r\nContent-Type: text/plain; "
               b"charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"
               b"the Supercalifragilistic w=C3=B6rd\r\n")
    cases = [(b"BODY zebrafish", set(), "BODY does not match a word only in Subject"),
             (b"TEXT zebrafish", {a}, "TEXT matches a word in Subject"),
             (b"TEXT quokka", {b}, "TEXT matches a substring of another header"),
             (b"BODY quokka", set(), "BODY does not match a header"),
             (b"BODY CALIFRAG", {d}, "BODY matches a case-insensitive substring"),
             (b'BODY "lo wo"', {a}, "BODY matches a substring across a space"),
             (b"BODY ld", {a}, "BODY matches a two-letter substring"),
             (b"TEXT x@example", {a}, "TEXT matches inside an address"),
             (b'CHARSET UTF-8 BODY "W\xc3\xb6RD"', {d},
              "BODY matches decoded (quoted-printable, UTF-8) text, case-insensitively"),
             (b"BODY zzzz", set(), "BODY without a match"),
             (b"NOT BODY hello", {b, d}, "NOT BODY")]
    for crit, want, what in cases:
        uids, tagged = search(c, crit)
        check("RFC 3501 6.4.4: " + what, ok(tagged) and uids == want, repr((crit, uids, tagged)))
    c.command("SELECT INBOX")


def test_header_folded(c):
    """RFC 3501 6.4.4 HEADER matches the field's text; RFC 5322 2.2.3: unfolded first."""
    c.command("SELECT INBOX")
    uid = append(c, b"INBOX", b"From: a@example.org\r\nX-Tag: alpha\r\n beta gamma\r\n"
                 b"Subject: folded header\r\n\r\nbody\r\n")
    for crit, want in ((b'HEADER X-Tag "alpha beta"', True), (b"HEADER X-Tag GAMMA", True),
                       (b'HEADER X-Tag ""', True), (b"HEADER X-Tag delta", False),
                       (b"HEADER X-Other alpha", False)):
        uids, tagged = search(c, crit)
        check("RFC 3501 6.4.4 / RFC 5322 2.2.3: %s %s a folded field" %
              (crit.decode(), "matches" if want else "does not match"),
              ok(tagged) and ((uid in uids) == want), repr((uids, tagged)))


def test_header_decoded(c):
    """RFC 3501 6.4.4 HEADER and BCC match the field's text, its RFC 2047 encoded words
    decoded (as SUBJECT/FROM see it, and as Dovecot 2.3 answers): the decoded string finds
    the message, the encoded form does not."""
    c.command("DELETE Decoded")  # NO unless a run before made it
    c.command("CREATE Decoded")
    c.command("SELECT Decoded")
    enc = append(c, b"Decoded", b"From: =?UTF-8?Q?J=C3=BCrgen?= <j@example.org>\r\n"
                 b"Bcc: =?UTF-8?Q?M=C3=BCller?= <m@example.org>\r\n"
                 b"Subject: =?UTF-8?Q?Gr=C3=BC=C3=9Fe_aus?=\r\n =?UTF-8?Q?_K=C3=B6ln?=\r\n"
                 b"X-Note: =?ISO-8859-1?Q?caf=E9?= ok\r\n\r\nbody\r\n")
    plain = append(c, b"Decoded", b"From: p@example.org\r\nSubject: Gr\xc3\xbc\xc3\x9fe raw\r\n"
                   b"X-Note: =?bogus\r\n\r\nbody\r\n")
    literal = "Grüße".encode()
    untagged, tagged = c.command(b"UID SEARCH CHARSET UTF-8 HEADER Subject", literal)
    uids = {int(x) for text, _ in untagged if text.startswith(b"* SEARCH")
            for x in re.findall(rb" (\d+)", text)}
    check("RFC 3501 6.4.4 / RFC 2047: HEADER Subject {n}Grüße finds the encoded and the raw "
          "UTF-8 Subject", ok(tagged) and uids == {enc, plain}, repr((uids, tagged)))
    cases = [(b'HEADER Subject "=?UTF-8?Q?Gr"', set(), "HEADER does not match the encoded form"),
             (b'CHARSET UTF-8 HEADER Subject "\xc3\x9fe aus K\xc3\xb6ln"', {enc},
              "HEADER matches across adjacent encoded words, folded"),
             (b'CHARSET UTF-8 SUBJECT "\xc3\x9fe aus K\xc3\xb6ln"', {enc},
              "SUBJECT agrees with HEADER Subject"),
             (b'CHARSET UTF-8 HEADER From "J\xc3\xbcrgen"', {enc}, "HEADER From is decoded"),
             (b'CHARSET UTF-8 HEADER X-Note "caf\xc3\xa9"', {enc},
              "HEADER decodes an ISO-8859-1 word to UTF-8"),
             (b"HEADER X-Note ISO-8859", set(), "HEADER does not match the word's charset"),
             (b'HEADER X-Note "=?bogus"', {plain}, "a malformed word is compared as it is"),
             (b'CHARSET UTF-8 BCC "M\xc3\xbcller"', {enc}, "BCC is decoded"),
             (b'CHARSET UTF-8 HEADER Subject "GR\xc3\x9cSSE"', {enc, plain},
              "HEADER folds Unicode case (GRÜSSE finds Grüße)"),
             (b'CHARSET UTF-8 SUBJECT "GR\xc3\x9cSSE"', {enc, plain},
              "SUBJECT folds Unicode case as HEADER does"),
             (b'CHARSET UTF-8 BCC "m\xc3\x9cller"', {enc}, "BCC folds Unicode case"),
             (b'CHARSET UTF-8 HEADER X-Note "CAF\xc3\x89"', {enc},
              "HEADER folds the case of a decoded ISO-8859-1 word"),
             (b'BCC "=?UTF-8"', set(), "BCC does not match the encoded form"),
             (b"BCC m@example.org", {enc}, "BCC matches the address")]
    for crit, want, what in cases:
        uids, tagged = search(c, crit)
        check("RFC 3501 6.4.4 / RFC 2047: " + what, ok(tagged) and uids == want,
              repr((crit, uids, tagged)))
    c.command("SELECT INBOX")


def test_search_shapes(c):
    """No command fails for a size a client can legitimately send (issue 13): OR chains of
    hundreds of keys in either nesting (a "match any" filter), a thousand keys ANDed, NOT
    chains, all within the line limit, as Dovecot 2.3 takes them; only operators alternating
    level by level deeper than the documented limit (64) are BAD, and a SEARCH of more than
    65,536 nodes (a line of 64 KiB, Dovecot's whole limit, holds fewer). Before: more than 256
    keys or OR / NOT chains past 64 levels were BAD, then more than 8,192 nodes."""
    c.command("DELETE Shapes")  # NO unless a run before made it
    c.command("CREATE Shapes")
    c.command("SELECT Shapes")
    uids = [append(c, b"Shapes", b"From: s%d@example.org\r\nSubject: shape-%d\r\n"
                   b"X-Shape: v%d\r\n\r\nbody %d\r\n" % (i, i, i, i)) for i in range(6)]
    check("APPEND of six messages for the search shapes", None not in uids, repr(uids))
    want = {uids[1], uids[3], uids[4]}
    terms = [b'SUBJECT "shape-%d"' % (i if i in (1, 3, 4) else 100 + i) for i in range(300)]
    right = b"".join(b"OR " + t + b" " for t in terms[:-1]) + terms[-1]
    left = b"OR " * 299 + b" ".join(terms)
    headers = b"OR " * 99 + b" ".join(
        b"HEADER X-Shape v%d" % (i if i in (1, 3, 4) else 100 + i) for i in range(100))
    cases = [(right, want, "an OR chain of 300 SUBJECT keys, nested to the right"),
             (left, want, "an OR chain of 300 SUBJECT keys, nested to the left"),
             (headers, want, "an OR chain of 100 HEADER keys"),
             (b"UNDELETED " * 1000 + b"ALL", set(uids), "1,000 keys ANDed"),
             (b"NOT " * 1001 + b'SUBJECT "shape-0"', set(uids) - {uids[0]}, "1,001 NOTs"),
             (b"NOT " * 1000 + b'SUBJECT "shape-0"', {uids[0]}, "1,000 NOTs"),
             (b"(" * 15 + b'SUBJECT "shape-2"' + b")" * 15, {uids[2]}, "15 nested lists"),
             (b"(" * 64 + b'SUBJECT "shape-2" UNDELETED' + b")" * 64, {uids[2]},
              "64 nested lists (16 before)"),
             (b"OR " * 199 + b" ".join([b'SUBJECT "shape-3"'] * 200), {uids[3]},
              "one SUBJECT key ORed 200 times (answered once)"),
             (b'OR (SUBJECT "shape-1" SUBJECT "shape-1") OR (SUBJECT "shape-1") '
              b'OR SUBJECT "Shape-4" SUBJECT "shape-4"', {uids[1], uids[4]},
              "repeats in lists and ORs, a key differing in case kept")]
    # 5,000 HEADER keys (20,000 nodes: BAD "too many arguments" past 8,192 before), their
    # values of many lengths, three of them found (one in another case); and 20,000 UIDs
    ids = [b"v%d" % i if i in (1, 3) else b"V4" if i == 4 else b"w%d" % (i * 7919)
           for i in range(5000)]
    many_headers = b"OR " * 4999 + b" ".join(b"HEADER X-Shape " + v for v in ids)
    many_uids = b"OR " * 19999 + b" ".join(
        b"UID %d" % (uids[2] if i == 777 else 100000 + i) for i in range(20000))
    cases += [(many_headers, want, "an OR chain of 5,000 HEADER keys (20,000 nodes)"),
              (many_uids, {uids[2]}, "an OR chain of 20,000 UID keys (60,000 nodes)")]
    for crit, expect, what in cases:
        found, tagged = search(c, crit)
        check("SEARCH of any length within the line: " + what,
              ok(tagged) and found == expect, repr((found, tagged[:80])))
    _, tagged = c.command(b"UID SEARCH " + b"OR UID 1 " * 21846 + b"ALL")
    check("SEARCH of more than 65,536 nodes: BAD, the limit named",
          b" BAD " in tagged and b"too many arguments" in tagged, repr(tagged[:120]))
    _, tagged = c.command(b"UID SEARCH " + b"NOT OR SEEN " * 40 + b"ALL")
    check("SEARCH nested 82 levels by alternating NOT and OR: BAD, the limit named",
          b" BAD " in tagged and b"nested too deeply" in tagged, repr(tagged))
    c.command("SELECT INBOX")


def whole_messages():
    """(name, bytes): the shapes a whole-message read takes apart and puts back together
    (issue 13: read straight into the response): a plain one, one with two attachments
    stored apart (leaf parts of 128 KiB and more), one over 1 MiB, one with LF line ends, one
    whose body is empty, one with an empty header block."""
    def b64(seed, n):
        import base64
        import random
        rnd = random.Random(seed)
        data = bytes(rnd.getrandbits(8) for _ in range(n))
        return base64.encodebytes(data).replace(b"\n", b"\r\n")
    head = b"From: a@example.org\r\nSubject: %s\r\nMIME-Version: 1.0\r\n"
    mixed = (head % b"two attachments" +
             b'Content-Type: multipart/mixed; boundary="b1"\r\n\r\npreamble\r\n--b1\r\n'
             b"Content-Type: text/plain\r\n\r\nthe text\r\n--b1\r\n"
             b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
             b64(1, 100000) + b"--b1\r\n"
             b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
             b64(2, 98000) + b"--b1--\r\nepilogue\r\n")
    big = (head % b"over 1 MiB" +
           b'Content-Type: multipart/mixed; boundary="b2"\r\n\r\n--b2\r\n'
           b"Content-Type: text/plain\r\n\r\nsee the file\r\n--b2\r\n"
           b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
           b64(3, 900000) + b"--b2--\r\n")
    lf = (b"From: a@example.org\nSubject: LF only\nMIME-Version: 1.0\n"
          b'Content-Type: multipart/mixed; boundary="b3"\n\n--b3\nContent-Type: text/plain\n\n'
          b"text\n--b3\nContent-Type: application/octet-stream\n"
          b"Content-Transfer-Encoding: base64\n\n" + b64(4, 100000).replace(b"\r\n", b"\n") +
          b"--b3--\n")
    return [("plain", head % b"plain" + b"\r\n" + b"a short body line\r\n" * 40),
            ("with attachments", mixed), ("over 1 MiB", big), ("LF only", lf),
            ("empty body", head % b"no body" + b"\r\n"),
            ("empty header", b"\r\njust a body\r\n")]


def test_whole_bodies(c):
    """RFC 3501 6.4.5: BODY[], BODY.PEEK[] and RFC822 are the message's bytes exactly, alone,
    with other items, many in one response, and cut by <start.length> partials that span
    the places where a stored attachment meets the rest of the message."""
    c.command("CREATE Whole")
    c.command("SELECT Whole")
    msgs = whole_messages()
    uids = []
    for name, msg in msgs:
        uids.append(append(c, b"Whole", msg))
    check("APPEND of the whole-message shapes", None not in uids, repr(uids))
    for (name, msg), uid in zip(msgs, uids):
        _, tagged, lits = fetch_literals(c, "UID FETCH %d (BODY.PEEK[])" % uid)
        check("BODY.PEEK[] of %s is byte-identical" % name, ok(tagged) and lits == [msg],
              "%d bytes, got %r" % (len(msg), [len(x) for x in lits]))
        untagged, tagged, lits = fetch_literals(
            c, "UID FETCH %d (UID FLAGS RFC822.SIZE INTERNALDATE BODY.PEEK[])" % uid)
        text = b" ".join(t for t, _ in untagged)
        check("BODY.PEEK[] of %s with UID, FLAGS, RFC822.SIZE" % name,
              ok(tagged) and lits == [msg] and b"RFC822.SIZE %d " % len(msg) in text,
              repr(text)[:200])
        _, tagged, lits = fetch_literals(c, "UID FETCH %d (BODY.PEEK[HEADER] BODY.PEEK[])" % uid)
        hlen = msg.find(b"\r\n\r\n") + 4 if b"\r\n\r\n" in msg else msg.find(b"\n\n") + 2
        if msg.startswith(b"\r\n"):
            hlen = 2
        check("BODY.PEEK[] of %s after BODY.PEEK[HEADER] in one FETCH" % name,
              ok(tagged) and lits == [msg[:hlen], msg], repr([len(x) for x in lits]))
        # partials around every place an attachment starts or ends (base64 lines begin after
        # a blank line, and the part ends at "--b")
        cuts = [0, len(msg) - 7]
        for m in re.finditer(rb"\r?\n\r?\n|--b\d", msg):
            cuts.append(max(m.start() - 5, 0))
        for start in sorted(set(cuts)):
            _, tagged, lits = fetch_literals(
                c, "UID FETCH %d (BODY.PEEK[]<%d.4100>)" % (uid, start))
            check("BODY.PEEK[]<%d.4100> of %s" % (start, name),
                  ok(tagged) and lits == [msg[start:start + 4100]], repr(lits)[:120])
    _, tagged, lits = fetch_literals(c, "UID FETCH 1:* (BODY.PEEK[])")
    check("BODY.PEEK[] of all of them in one response, in UID order",
          ok(tagged) and lits == [m for _, m in msgs], repr([len(x) for x in lits]))
    untagged, tagged, lits = fetch_literals(c, "UID FETCH 1:* (RFC822)")
    text = b" ".join(t for t, _ in untagged)
    check("RFC822 of all of them: the bytes, and \\Seen set (RFC 3501 6.4.5)",
          ok(tagged) and lits == [m for _, m in msgs] and text.count(b"\\Seen") == len(msgs),
          repr(text)[:200])
    c.command("SELECT INBOX")


def test_lmtp_trace(args, c):
    """LMTP adds Return-Path (RFC 5321 4.4) and Delivered-To as Dovecot's LMTP does."""
    user = args.user.split(":", 1)[0]
    l = imapd_common.Lmtp(args.lmtp, TIMEOUT)
    l.cmd("LHLO test")
    code, line = l.cmd("MAIL FROM:<bounce+x@example.net>")
    check("MAIL FROM", code == 250, repr(line))
    code, line = l.cmd("RCPT TO:<%s>" % user)
    l.cmd("DATA")
    msg = b"From: a@example.net\r\nSubject: traced\r\n\r\nbody\r\n"
    l.sock.sendall(msg + b".\r\n")
    code, line = l.reply()
    check("LMTP delivers", code == 250, repr(line))
    code, line = l.cmd("MAIL FROM:<a\x01b@example.net>")
    check("a sender path with a control byte is refused (it would go into Return-Path)",
          code == 501, repr(line))
    l.cmd("QUIT")
    c.command("SELECT INBOX")
    uids, _ = search(c, b"SUBJECT traced")
    _, _, lits = fetch_literals(c, "UID FETCH %d (BODY.PEEK[])" % max(uids or {0}))
    want = (b"Return-Path: <bounce+x@example.net>\r\nDelivered-To: " + user.encode() + b"\r\n"
            + msg)
    check("the stored message is Return-Path, Delivered-To, then the bytes as sent",
          lits == [want], repr(lits)[:300])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--lmtp", type=int, required=True)
    p.add_argument("--user", required=True)
    args = p.parse_args()
    user, password = args.user.split(":", 1)
    c = imapd_common.imap_login(args.imap, user, password, TIMEOUT)
    for test in (test_empty_header, test_folded_boundary, test_bracket_names,
                 test_imapc_flag_list, test_sent_dates, test_body_text, test_header_folded,
                 test_header_decoded, test_search_shapes, test_whole_bodies):
        try:
            test(c)
        except (OSError, EOFError, ValueError) as e:
            check(test.__name__ + " ran", False, "%s: %s" % (type(e).__name__, e))
    try:
        test_sent_dates_shared(args, c)
    except (OSError, EOFError, ValueError) as e:
        check("test_sent_dates_shared ran", False, "%s: %s" % (type(e).__name__, e))
    try:
        test_lmtp_trace(args, c)
    except (OSError, EOFError, ValueError) as e:
        check("test_lmtp_trace ran", False, "%s: %s" % (type(e).__name__, e))
    c.command("LOGOUT")
    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
