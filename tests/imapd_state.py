r"""imapd_state.py -- the session state mailvaultd shows its clients, rule by rule (issue 12),
driven over raw IMAP connections (tests/imapd_common.py) by tests/cli_imapd_state.sh. Each
check names the RFC rule it holds the server to.

WHAT IT CHECKS
  - Keywords are announced (RFC 3501 7.2.6, 6.3.1): a STORE that adds a keyword, here or in
    another session, is preceded by "* FLAGS" and "* OK [PERMANENTFLAGS (... \\*)]" naming it;
    the next SELECT's FLAGS names it; no FETCH ever shows a keyword FLAGS did not name.
  - CONDSTORE (RFC 7162 3.1.3): STORE (UNCHANGEDSINCE n) +FLAGS.SILENT and a plain .SILENT
    STORE in a CONDSTORE session answer an untagged FETCH with MODSEQ; APPEND into the
    selected mailbox gives "* OK [HIGHESTMODSEQ n]" and EXPUNGE's OK carries [HIGHESTMODSEQ n],
    the mailbox's value as a new session sees it.
  - A two-way CONDSTORE/QRESYNC sync with flag removal on both sides: a client mirrors the
    server's flags by modseq and pushes its own changes with UNCHANGEDSINCE; flags removed on
    the server and on the client stay removed, no change is resurrected, and the client never
    re-reads its own change.
  - No silent truncation (issue 12 item 13): 40 keywords of 120 bytes are all stored, and
    200 more (issue 13: 100 were refused); more than keywords_max gets NO [LIMIT] naming the
    limit, and nothing changes.
  - MOVE's untagged OK [COPYUID ...] carries text (RFC 3501 9: resp-text).
  - NUL bytes never go out inside a literal (RFC 3501 9: CHAR8 excludes NUL): 0x80 instead,
    the length unchanged.
  - ENVELOPE keeps a source route (RFC 3501 7.4.2: the adl).
  - CAPABILITY lists each extension once, as derived from the command table.
  - Subscriptions are names of their own (RFC 3501 6.3.4-6.3.9, RFC 5258): CREATE does not
    subscribe, DELETE keeps the subscription (LSUB \Noselect, LIST (SUBSCRIBED) \NonExistent
    \Subscribed), UNSUBSCRIBE of a deleted name is OK, a name that never existed can be
    subscribed, LSUB "%" shows a level above subscribed names as \Noselect, RENAME carries
    them.
  - \Recent (RFC 3501 2.3.2): exactly one session sees a new message as recent (the first to
    select after it arrived, or the one that has the mailbox selected), also when several
    select at once; "* n RECENT", FETCH FLAGS \Recent, SEARCH RECENT / NEW / OLD; EXAMINE
    shows but does not take them; STATUS RECENT counts the unclaimed ones.

USAGE
  python3 tests/imapd_state.py --imap PORT --user ADDR --password PW --mv MAILVAULT \
      --root ROOT --password-file FILE
  The last line is "# N passed, N failed".
"""
import argparse
import re
import sys
import threading

import imapd_common

results = imapd_common.Results()
TIMEOUT_S = 60
MESSAGE = b"From: st@example.org\r\nTo: alice@example.org\r\nSubject: state %d\r\n\r\nbody %d\r\n"


def check(name, cond, why=""):
    results.report(name, bool(cond), repr(why)[:800] if not cond else "")


class Session:
    def __init__(self, args, prefix=b"c"):
        self.c = imapd_common.Imap(args.imap, TIMEOUT_S, prefix)
        _, tagged = self.c.command('LOGIN %s "%s"' % (args.user, args.password))
        if b" OK" not in tagged:
            raise RuntimeError("login failed: %r" % tagged)

    def cmd(self, text, literal=None):
        untagged, tagged = self.c.command(text, literal=literal, plus=literal is not None)
        return untagged, tagged

    def lines(self, text):
        untagged, tagged = self.cmd(text)
        return [t for t, _ in untagged], tagged

    def append(self, box, n, flags=""):
        _, tagged = self.cmd(("APPEND %s %s" % (box, flags)).rstrip(), MESSAGE % (n, n))
        if b" OK" not in tagged:
            raise RuntimeError("APPEND failed: %r" % tagged)
        return int(re.search(rb"APPENDUID \d+ (\d+)", tagged).group(1))

    def close(self):
        try:
            self.c.command("LOGOUT")
        except (OSError, EOFError):
            pass
        self.c.close()


def flags_list(line):
    m = re.search(rb"FLAGS \(([^)]*)\)", line)
    return set(m.group(1).lower().split()) if m else None


class KeywordModel:
    """What FLAGS / PERMANENTFLAGS announced so far; checks every FETCH against it."""

    def __init__(self, name):
        self.name = name
        self.flags = set()
        self.permanent = set()
        self.bad = []

    def feed(self, lines):
        for l in lines:
            if l.startswith(b"* FLAGS "):
                self.flags = flags_list(l) or set()
            elif b"[PERMANENTFLAGS (" in l:
                self.permanent = set(re.search(rb"PERMANENTFLAGS \(([^)]*)\)", l).group(1)
                                     .lower().split())
            elif re.match(rb"\* \d+ FETCH ", l):
                f = flags_list(l)
                if f is not None:
                    unknown = {k for k in f if not k.startswith(b"\\")} - self.flags
                    if unknown:
                        self.bad.append(l)


def test_keywords_announced(args):
    a, b = Session(args, b"a"), Session(args, b"b")
    a.cmd("CREATE kw")
    a.append("kw", 1)
    a.append("kw", 2)
    ma, mb = KeywordModel("a"), KeywordModel("b")
    lines, _ = a.lines("SELECT kw")
    ma.feed(lines)
    lines, _ = b.lines("SELECT kw")
    mb.feed(lines)
    lines, tagged = a.lines("STORE 1 +FLAGS ($kw1 foo)")
    ma.feed(lines)
    i_flags = next((i for i, l in enumerate(lines) if l.startswith(b"* FLAGS")), None)
    i_fetch = next((i for i, l in enumerate(lines) if b"FETCH" in l), None)
    check("RFC 3501 7.2.6: STORE of new keywords sends * FLAGS naming them before the FETCH",
          i_flags is not None and i_fetch is not None and i_flags < i_fetch and
          {b"$kw1", b"foo"} <= ma.flags, lines)
    check("RFC 3501 7.1: PERMANENTFLAGS names the new keywords and \\*",
          {b"$kw1", b"foo", b"\\*"} <= ma.permanent, lines)
    lines, _ = b.lines("NOOP")
    mb.feed(lines)
    check("RFC 3501 7.2.6: another session hears * FLAGS with the keywords before their FETCH",
          {b"$kw1", b"foo"} <= mb.flags and not mb.bad, lines)
    lines, _ = b.lines("STORE 2 +FLAGS.SILENT (Work)")
    mb.feed(lines)
    lines, _ = a.lines("NOOP")
    ma.feed(lines)
    check("RFC 3501 7.2.6: even a .SILENT store's new keyword is announced to other sessions",
          b"work" in ma.flags and not ma.bad, lines)
    c = Session(args, b"c")
    mc = KeywordModel("c")
    lines, _ = c.lines("SELECT kw")
    mc.feed(lines)
    check("RFC 3501 6.3.1: the next SELECT's FLAGS lists the mailbox's keywords",
          {b"$kw1", b"foo", b"work"} <= mc.flags, lines)
    lines, _ = c.lines("EXAMINE kw")
    check("RFC 3501 6.3.2: EXAMINE's PERMANENTFLAGS is empty, its FLAGS names the keywords",
          any(l.startswith(b"* FLAGS") and b"$kw1" in l for l in lines) and
          any(b"[PERMANENTFLAGS ()]" in l for l in lines), lines)
    lines, _ = c.lines("FETCH 1:* (FLAGS)")
    mc.feed(lines)
    check("no FETCH showed a keyword FLAGS never named", not (ma.bad or mb.bad or mc.bad),
          ma.bad + mb.bad + mc.bad)
    for s in (a, b, c):
        s.close()


def highestmodseq_of(args, box):
    s = Session(args, b"h")
    lines, _ = s.lines("STATUS %s (HIGHESTMODSEQ)" % box)
    s.close()
    for l in lines:
        m = re.search(rb"HIGHESTMODSEQ (\d+)", l)
        if m:
            return int(m.group(1))
    return None


def test_condstore_silent(args):
    a = Session(args, b"a")
    a.cmd("CREATE cs")
    a.append("cs", 1)
    a.append("cs", 2)
    a.cmd("ENABLE CONDSTORE")
    a.lines("SELECT cs")
    lines, tagged = a.lines("STORE 1 (UNCHANGEDSINCE 1000000) +FLAGS.SILENT (\\Flagged)")
    check("RFC 7162 3.1.3: STORE (UNCHANGEDSINCE) +FLAGS.SILENT still sends FETCH with MODSEQ",
          b" OK" in tagged and any(re.match(rb"\* 1 FETCH \(.*MODSEQ \(\d+\)", l) for l in lines),
          (lines, tagged))
    hms = highestmodseq_of(args, "cs")
    got = [int(m.group(1)) for l in lines for m in [re.search(rb"MODSEQ \((\d+)\)", l)] if m]
    check("RFC 7162 3.1.3: that MODSEQ is the message's new mod-sequence", got == [hms],
          (got, hms))
    lines, tagged = a.lines("STORE 2 -FLAGS.SILENT (\\Seen)")
    check("RFC 7162 3.1.3: a .SILENT STORE in a CONDSTORE session reports MODSEQ, not FLAGS",
          any(re.match(rb"\* 2 FETCH \(UID \d+ MODSEQ \(\d+\)\)$", l) for l in lines), lines)
    _, tagged = a.cmd("APPEND cs", MESSAGE % (3, 3))
    # the untagged responses of APPEND come before the tagged line
    lines = [t for t, _ in _]
    hms = highestmodseq_of(args, "cs")
    check("APPEND into the selected mailbox sends * OK [HIGHESTMODSEQ n] (as Dovecot)",
          any(l.startswith(b"* OK [HIGHESTMODSEQ %d]" % hms) for l in lines), (lines, hms))
    a.lines("STORE 3 +FLAGS.SILENT (\\Deleted)")
    lines, tagged = a.lines("EXPUNGE")
    hms = highestmodseq_of(args, "cs")
    check("RFC 7162 3.1.11: EXPUNGE's OK carries [HIGHESTMODSEQ n] of the mailbox after it",
          tagged.split(b" ", 1)[1].startswith(b"OK [HIGHESTMODSEQ %d]" % hms), (tagged, hms))
    a.close()


def test_two_way_sync(args):
    """A sync client: a local copy {uid: flags} and its modseq; local changes pushed with
    UNCHANGEDSINCE; server changes pulled with CHANGEDSINCE / QRESYNC."""
    box = "sync2"
    srv = Session(args, b"s")
    srv.cmd("CREATE %s" % box)
    for n in range(1, 6):
        srv.append(box, n, "(\\Seen \\Flagged $Todo)")
    srv.lines("SELECT %s" % box)

    cl = Session(args, b"y")
    cl.cmd("ENABLE QRESYNC")
    lines, _ = cl.lines("SELECT %s" % box)
    uidvalidity = int(next(re.search(rb"UIDVALIDITY (\d+)", l).group(1) for l in lines
                           if b"UIDVALIDITY" in l))
    modseq = int(next(re.search(rb"HIGHESTMODSEQ (\d+)", l).group(1) for l in lines
                      if b"HIGHESTMODSEQ" in l))
    local = {}
    lines, _ = cl.lines("UID FETCH 1:* (FLAGS)")
    for l in lines:
        m = re.search(rb"UID (\d+)", l)
        if m:
            local[int(m.group(1))] = flags_list(l)
    cl.close()
    uids = sorted(local)

    def learn(lines):
        """Applies FETCH lines to local; returns the highest MODSEQ seen."""
        top = 0
        for l in lines:
            u, f = re.search(rb"UID (\d+)", l), flags_list(l)
            ms = re.search(rb"MODSEQ \((\d+)\)", l)
            if u and f is not None:
                local[int(u.group(1))] = f
            if ms:
                top = max(top, int(ms.group(1)))
        return top

    # 1. the user removes \Flagged on the server (another client), the client removes \Seen
    srv.lines("UID STORE %d -FLAGS (\\Flagged)" % uids[0])
    cl = Session(args, b"y")
    cl.cmd("ENABLE QRESYNC")
    lines, _ = cl.lines("SELECT %s (QRESYNC (%d %d))" % (box, uidvalidity, modseq))
    top = learn(lines)
    modseq = max(modseq, top, int(next(re.search(rb"HIGHESTMODSEQ (\d+)", l).group(1)
                                       for l in lines if b"HIGHESTMODSEQ" in l)))
    check("QRESYNC select reports the server-side removal",
          b"\\flagged" not in local[uids[0]], (lines, local[uids[0]]))
    lines, tagged = cl.lines("UID STORE %d (UNCHANGEDSINCE %d) -FLAGS.SILENT (\\Seen)"
                             % (uids[1], modseq))
    mine = learn(lines)
    check("RFC 7162 3.1.3: the client's own silent removal comes back with its MODSEQ",
          mine > modseq and b"[MODIFIED" not in tagged, (lines, tagged))
    local[uids[1]].discard(b"\\seen")
    # the client's modseq may move past its own change only when it knows that modseq
    modseq = max(modseq, mine)
    # 2. the client removes $Todo from a message the server changed meanwhile (a conflict)
    srv.lines("UID STORE %d -FLAGS ($Todo)" % uids[2])
    lines, tagged = cl.lines("UID STORE %d (UNCHANGEDSINCE %d) -FLAGS.SILENT (\\Flagged)"
                             % (uids[2], modseq))
    check("RFC 7162 3.1.3: a conflicting change is refused with [MODIFIED uid]",
          b"[MODIFIED %d]" % uids[2] in tagged, tagged)
    lines, _ = cl.lines("UID FETCH 1:* (FLAGS) (CHANGEDSINCE %d VANISHED)" % modseq)
    top = learn(lines)
    check("CHANGEDSINCE returns the server's change, not the client's own earlier change",
          all(b"UID %d " % uids[1] not in l for l in lines) and top > 0, lines)
    modseq = max(modseq, top)
    local[uids[2]].discard(b"\\flagged")
    lines, tagged = cl.lines("UID STORE %d (UNCHANGEDSINCE %d) -FLAGS.SILENT (\\Flagged)"
                             % (uids[2], modseq))
    modseq = max(modseq, learn(lines))
    check("the retried change applies", b"[MODIFIED" not in tagged and b" OK" in tagged, tagged)
    cl.close()
    # 3. a third sync from the stored modseq sees nothing it did itself, and the final state
    # is both sides' removals, nothing resurrected
    cl = Session(args, b"y")
    cl.cmd("ENABLE QRESYNC")
    lines, _ = cl.lines("SELECT %s (QRESYNC (%d %d))" % (box, uidvalidity, modseq))
    fetches = [l for l in lines if b"FETCH" in l]
    check("the next sync re-reads none of the client's own changes", not fetches, fetches)
    lines, _ = cl.lines("UID FETCH 1:* (FLAGS)")
    server = {}
    for l in lines:
        m = re.search(rb"UID (\d+)", l)
        if m:
            server[int(m.group(1))] = flags_list(l)
    check("two-way sync: both sides' removals stay removed, both copies agree",
          server == local and b"\\flagged" not in server[uids[0]] and
          b"\\seen" not in server[uids[1]] and b"$todo" not in server[uids[2]] and
          b"\\flagged" not in server[uids[2]], (server, local))
    cl.close()
    srv.close()


def test_keyword_limits(args):
    a = Session(args, b"a")
    a.cmd("CREATE lim")
    a.append("lim", 1)
    a.lines("SELECT lim")
    kws = ["k%02d" % i + "x" * 117 for i in range(40)]
    lines, tagged = a.lines("STORE 1 +FLAGS (%s)" % " ".join(kws))
    lines, _ = a.lines("FETCH 1 (FLAGS)")
    got = next((flags_list(l) for l in lines if b"FETCH" in l), set())
    check("no silent truncation: 40 keywords of 120 bytes are all stored",
          b" OK" in tagged and len([k for k in got if k.startswith(b"k")]) == 40,
          (tagged, len(got)))
    # Dovecot takes thousands on one message; 200 more (240 in all) are within keywords_max
    # (256; it was 64, which refused the 100 a probe sent)
    more = ["t%03d" % i for i in range(200)]
    lines, tagged = a.lines("STORE 1 +FLAGS (%s)" % " ".join(more))
    lines, _ = a.lines("FETCH 1 (FLAGS)")
    got = next((flags_list(l) for l in lines if b"FETCH" in l), set())
    check("240 keywords on one message are all stored",
          b" OK" in tagged and len([k for k in got if k[:1] in (b"k", b"t")]) == 240,
          (tagged, len(got)))
    many = ["m%03d" % i for i in range(300)]
    lines, tagged = a.lines("STORE 1 +FLAGS (%s)" % " ".join(many))
    check("more keywords than keywords_max: NO [LIMIT] naming the limit",
          b" NO [LIMIT]" in tagged and b"keywords_max" in tagged, tagged)
    lines, _ = a.lines("FETCH 1 (FLAGS)")
    got2 = next((flags_list(l) for l in lines if b"FETCH" in l), set())
    check("the refused STORE changed nothing", got2 == got, got2 ^ got)
    _, tagged = a.cmd("APPEND lim (%s)" % " ".join(kws), MESSAGE % (2, 2))
    lines, _ = a.lines("UID FETCH %s (FLAGS)" % re.search(rb"APPENDUID \d+ (\d+)", tagged)
                       .group(1).decode())
    got = next((flags_list(l) for l in lines if b"FETCH" in l), set())
    check("APPEND with 40 keywords of 120 bytes stores them all",
          len([k for k in got if k.startswith(b"k")]) == 40, (tagged, got))
    a.close()


def test_mailbox_keyword_bound(args):
    """A mailbox defines at most mailbox_keywords_max (1,000) keywords: a STORE that would
    define more is refused with NO [LIMIT] and changes nothing, a keyword already defined is
    taken, and SELECT's FLAGS lists the keywords in use; at the bound PERMANENTFLAGS offers no
    new keyword (no \\*), and a defined one is still taken. Before the bound a
    mailbox took any number: 500 messages with 256 new keywords each made one SELECT's
    answer 26 MB and a session 136 MB of the server's memory."""
    a = Session(args, b"a")
    a.cmd("CREATE kwbound")
    a.append("kwbound", 1)
    a.lines("SELECT kwbound")
    for r in range(3):  # 768 distinct keywords, 256 at a time on the one message
        _, tagged = a.lines("STORE 1 FLAGS (%s)" % " ".join("r%d_%03d" % (r, i)
                                                             for i in range(256)))
        check("STORE %d: 256 new keywords, %d defined" % (r + 1, 256 * (r + 1)),
              b" OK" in tagged, tagged)
    _, tagged = a.lines("STORE 1 FLAGS (%s)" % " ".join("r3_%03d" % i for i in range(256)))
    check("a STORE that would define 1,024 keywords: NO [LIMIT] naming mailbox_keywords_max",
          b" NO [LIMIT]" in tagged and b"mailbox_keywords_max" in tagged, tagged)
    lines, _ = a.lines("FETCH 1 (FLAGS)")
    got = next((flags_list(l) for l in lines if b"FETCH" in l), set())
    check("the refused STORE changed nothing",
          set(k for k in got if not k.startswith(b"\\")) == set(b"r2_%03d" % i
                                                                 for i in range(256)),
          sorted(got)[:5])
    _, tagged = a.lines("STORE 1 FLAGS (R0_000 r1_255 r2_000)")
    check("keywords defined before, no longer on a message, are taken (any case)",
          b" OK" in tagged, tagged)
    lines, _ = a.lines("SELECT kwbound")
    flags = next((flags_list(l) for l in lines if l.startswith(b"* FLAGS")), set())
    check("SELECT's FLAGS lists the keywords in use",
          set(f for f in flags if not f.startswith(b"\\")) == {b"r0_000", b"r1_255", b"r2_000"},
          flags)
    perm = [l for l in lines if b"[PERMANENTFLAGS" in l]
    check("below the bound PERMANENTFLAGS offers new keywords (\\*)",
          len(perm) == 1 and b"\\*)]" in perm[0], perm)
    # 232 more make exactly 1,000: PERMANENTFLAGS no longer offers new ones (RFC 3501 7.1)
    _, tagged = a.lines("STORE 1 FLAGS (%s)" % " ".join("r4_%03d" % i for i in range(232)))
    check("a STORE that defines keywords 769-1,000 is taken", b" OK" in tagged, tagged)
    lines, _ = a.lines("SELECT kwbound")
    perm = [l for l in lines if b"[PERMANENTFLAGS" in l]
    check("at the bound PERMANENTFLAGS has no \\* (a new keyword would be refused)",
          len(perm) == 1 and b"\\*" not in perm[0] and b"r4_231" in perm[0], perm)
    _, tagged = a.lines("STORE 1 +FLAGS (r0_001)")
    check("at the bound a defined keyword is still taken", b" OK" in tagged, tagged)
    a.close()


def test_move_text(args):
    a = Session(args, b"a")
    a.cmd("CREATE mv1")
    a.cmd("CREATE mv2")
    a.append("mv1", 1)
    a.lines("SELECT mv1")
    lines, tagged = a.lines("MOVE 1 mv2")
    ok = [l for l in lines if l.startswith(b"* OK [COPYUID")]
    check("RFC 3501 9 / RFC 6851: MOVE's * OK [COPYUID ...] carries text after the code",
          len(ok) == 1 and re.match(rb"\* OK \[COPYUID \d+ \d+ \d+\] \S", ok[0]), lines)
    a.close()


def test_nul_bytes(args):
    a = Session(args, b"a")
    a.cmd("CREATE nul")
    msg = b"From: n@example.org\r\nSubject: nul\r\n\r\nbefore\x00after\r\n"
    _, tagged = a.cmd("APPEND nul", msg)
    if b" OK" not in tagged:
        check("a message with a NUL byte is stored", False, tagged)
        a.close()
        return
    a.lines("SELECT nul")
    untagged, _ = a.cmd("FETCH 1 (BODY.PEEK[] BODY.PEEK[TEXT])")
    lits = [lit for _, ls in untagged for lit in ls]
    check("RFC 3501 9: no NUL inside a literal; 0x80 in its place, same length",
          len(lits) == 2 and all(b"\x00" not in x for x in lits) and
          lits[0] == msg.replace(b"\x00", b"\x80"), lits)
    a.close()


def test_envelope_route(args):
    a = Session(args, b"a")
    a.cmd("CREATE env")
    msg = (b"From: Joe <@route.example:joe@example.org>\r\nTo: <@a.example,@b.example:"
           b"ann@example.net>, bob@example.com\r\nSubject: route\r\n\r\nx\r\n")
    a.cmd("APPEND env", msg)
    a.lines("SELECT env")
    lines, _ = a.lines("FETCH 1 (ENVELOPE)")
    env = b" ".join(lines)
    check("RFC 3501 7.4.2: ENVELOPE keeps a source route in the adl",
          b'("Joe" "@route.example" "joe" "example.org")' in env and
          b'(NIL "@a.example,@b.example" "ann" "example.net")' in env and
          b'(NIL NIL "bob" "example.com")' in env, env)
    a.close()


def test_capability(args):
    a = Session(args, b"a")
    lines, _ = a.lines("CAPABILITY")
    caps = next(l for l in lines if l.startswith(b"* CAPABILITY")).split()[2:]
    expect = (b"IMAP4rev1 LITERAL+ SASL-IR CONDSTORE QRESYNC CREATE-SPECIAL-USE LIST-EXTENDED "
              b"LIST-STATUS SPECIAL-USE UIDPLUS MOVE IDLE NAMESPACE ID ENABLE UTF8=ACCEPT UNSELECT "
              b"SORT SORT=DISPLAY QUOTA QUOTA=RES-STORAGE QUOTA=RES-MESSAGE").split()
    check("CAPABILITY: every extension once, derived from the command table",
          sorted(caps) == sorted(expect) and len(set(caps)) == len(caps), caps)
    a.close()


def list_attrs(lines, kind, name):
    """The attributes of name in "* LIST/LSUB (attrs) sep name" lines, or None."""
    for l in lines:
        m = re.match(rb'\* %s \(([^)]*)\) "/" "?([^"]*)"?$' % kind.encode(), l)
        if m and m.group(2).decode() == name:
            return set(m.group(1).decode().split())
    return None


def test_subscriptions(args):
    a = Session(args, b"a")
    a.cmd("CREATE subx")
    lines, _ = a.lines('LSUB "" "subx"')
    check("RFC 3501 6.3.3: CREATE does not subscribe", list_attrs(lines, "LSUB", "subx") is None,
          lines)
    a.cmd("SUBSCRIBE subx")
    _, tagged = a.cmd("DELETE subx")
    lines, _ = a.lines('LSUB "" "subx"')
    check("RFC 3501 6.3.4: DELETE keeps the subscription; LSUB shows it \\Noselect",
          b" OK" in tagged and "\\Noselect" in (list_attrs(lines, "LSUB", "subx") or set()),
          (tagged, lines))
    lines, _ = a.lines('LIST (SUBSCRIBED) "" "subx"')
    check("RFC 5258 3.1: LIST (SUBSCRIBED) shows a deleted subscribed name \\NonExistent "
          "\\Subscribed", {"\\NonExistent", "\\Subscribed"} <= (list_attrs(lines, "LIST", "subx") or set()),
          lines)
    lines, _ = a.lines('LIST "" "subx"')
    check("plain LIST does not show a subscribed name that is no mailbox",
          list_attrs(lines, "LIST", "subx") is None, lines)
    _, tagged = a.cmd("UNSUBSCRIBE subx")
    lines, _ = a.lines('LSUB "" "subx"')
    check("RFC 3501 6.3.7: UNSUBSCRIBE of a deleted name is OK and removes it",
          b" OK" in tagged and list_attrs(lines, "LSUB", "subx") is None, (tagged, lines))
    _, tagged = a.cmd("SUBSCRIBE ghost/child")
    lines, _ = a.lines('LSUB "" "%"')
    check("RFC 3501 6.3.9: LSUB % shows the level above a subscribed name as \\Noselect",
          b" OK" in tagged and "\\Noselect" in (list_attrs(lines, "LSUB", "ghost") or set()),
          (tagged, lines))
    lines, _ = a.lines('LSUB "" "*"')
    check("LSUB * lists the subscribed name itself (no mailbox: \\Noselect), not the level",
          "\\Noselect" in (list_attrs(lines, "LSUB", "ghost/child") or set()) and
          list_attrs(lines, "LSUB", "ghost") is None, lines)
    a.cmd("UNSUBSCRIBE ghost/child")
    a.cmd("CREATE ren/inner")
    a.cmd("SUBSCRIBE ren/inner")
    a.cmd("RENAME ren moved")
    lines, _ = a.lines('LSUB "" "*"')
    check("RENAME carries the subscriptions of the mailbox's children",
          list_attrs(lines, "LSUB", "moved/inner") == {"\\HasNoChildren"} and
          list_attrs(lines, "LSUB", "ren/inner") is None, lines)
    a.close()


def test_subscriptions_bound(args):
    """At most subscriptions_max (10,000) names are subscribed: a name need not exist, so
    before the bound SUBSCRIBE took names without end and each LSUB read them all into the
    server's memory. 10,050 new names pipelined: the ones past the bound get NO [LIMIT]
    naming it, and LSUB lists exactly 10,000; a name already subscribed is still OK."""
    a = Session(args, b"b")
    c = a.c
    lines, _ = a.lines('LSUB "" "*"')
    before = sum(1 for l in lines if l.startswith(b"* LSUB"))
    tags = []
    batch = []
    for i in range(10050):
        tag = c.tag()
        tags.append(tag)
        batch.append(tag + b" SUBSCRIBE bound/n%05d\r\n" % i)
    c.sock.sendall(b"".join(batch))
    tagged = {}
    for tag in tags:
        _, line = c.until(tag)
        tagged[tag] = line
    refused = [l for l in tagged.values() if b" OK" not in l]
    check("SUBSCRIBE past subscriptions_max: NO [LIMIT] naming it, and only those",
          len(refused) == 10050 - (10000 - before) and
          all(b" NO [LIMIT]" in l and b"subscriptions_max" in l for l in refused),
          (before, len(refused), refused[:2]))
    lines, _ = a.lines('LSUB "" "*"')
    check("LSUB lists 10,000 names", sum(1 for l in lines if l.startswith(b"* LSUB")) == 10000,
          len(lines))
    _, tag1 = a.cmd("SUBSCRIBE bound/n00000")
    _, tag2 = a.cmd("SUBSCRIBE INBOX")
    check("a name already subscribed is still OK at the bound",
          b" OK" in tag1 and b" OK" in tag2, (tag1, tag2))
    a.close()


def recent_of(lines):
    for l in lines:
        m = re.match(rb"\* (\d+) RECENT$", l)
        if m:
            return int(m.group(1))
    return None


def search_of(lines):
    for l in lines:
        if l.startswith(b"* SEARCH"):
            return [int(x) for x in l.split()[2:]]
    return None


def test_recent(args):
    box = "rec"
    b = Session(args, b"b")
    b.cmd("CREATE %s" % box)
    a = Session(args, b"a")
    lines, _ = a.lines("SELECT %s" % box)
    check("RFC 3501 6.3.1: SELECT of an empty mailbox: * 0 RECENT", recent_of(lines) == 0, lines)
    b.append(box, 1)
    b.append(box, 2)
    c = Session(args, b"c")
    lines, _ = c.lines("SELECT %s" % box)
    check("RFC 3501 2.3.2: the first session to select after delivery sees * 2 RECENT",
          recent_of(lines) == 2, lines)
    lines, _ = c.lines("FETCH 1:* (FLAGS)")
    check("RFC 3501 2.3.2: FETCH FLAGS shows \\Recent in that session",
          len([l for l in lines if b"\\Recent" in l]) == 2, lines)
    lines, _ = c.lines("SEARCH RECENT")
    r1 = search_of(lines)
    c.lines("STORE 1 +FLAGS.SILENT (\\Seen)")
    lines, _ = c.lines("SEARCH NEW")
    r2 = search_of(lines)
    lines, _ = c.lines("SEARCH OLD")
    r3 = search_of(lines)
    check("RFC 3501 6.4.4: SEARCH RECENT, NEW (recent unseen) and OLD",
          r1 == [1, 2] and r2 == [2] and r3 == [], (r1, r2, r3))
    lines, _ = a.lines("NOOP")
    check("a session that had the mailbox selected does not get them too: * 0 RECENT",
          recent_of(lines) == 0 and b"* 2 EXISTS" in lines, lines)
    lines, _ = a.lines("FETCH 1:* (FLAGS)")
    check("... and its FETCH FLAGS shows no \\Recent", not any(b"\\Recent" in l for l in lines),
          lines)
    b.append(box, 3)
    lines, _ = a.lines("NOOP")
    check("RFC 3501 2.3.2: a new message goes to the session that has the mailbox selected "
          "and hears of it first: * 1 RECENT", recent_of(lines) == 1 and b"* 3 EXISTS" in lines,
          lines)
    lines, _ = c.lines("NOOP")
    check("... not to the other one (its count stays 2)", recent_of(lines) == 2, lines)
    b.append(box, 4)
    lines, _ = b.lines("STATUS %s (RECENT MESSAGES)" % box)
    check("STATUS RECENT counts the messages no session has seen yet",
          any(b"RECENT 1" in l and b"MESSAGES 4" in l for l in lines), lines)
    d = Session(args, b"d")
    lines, _ = d.lines("EXAMINE %s" % box)
    check("RFC 3501 6.3.2: EXAMINE shows the unclaimed message as recent", recent_of(lines) == 1,
          lines)
    lines, _ = d.lines("SELECT %s" % box)
    check("RFC 3501 6.3.2: ... and does not take \\Recent away: SELECT after it gets it",
          recent_of(lines) == 1, lines)
    for s in (a, c, d):
        s.close()
    # several sessions select at once: each new message is recent in exactly one of them
    for n in range(5, 11):
        b.append(box, n)
    sessions = [Session(args, b"p%d" % i) for i in range(6)]
    got = [None] * len(sessions)

    def select(i):
        try:
            lines, _ = sessions[i].lines("SELECT %s" % box)
            flines, _ = sessions[i].lines("UID FETCH 1:* (FLAGS)")
            got[i] = (recent_of(lines), {int(re.search(rb"UID (\d+)", l).group(1))
                                         for l in flines if b"\\Recent" in l})
        except Exception as e:  # reported below
            got[i] = (None, repr(e))

    threads = [threading.Thread(target=select, args=(i,)) for i in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = [g[0] for g in got]
    uids = [g[1] for g in got]
    union = set().union(*[u for u in uids if isinstance(u, set)])
    check("RFC 3501 2.3.2: sessions selecting at once share 6 new messages, each recent in "
          "exactly one", sum(c or 0 for c in counts) == 6 and len(union) == 6 and
          sum(len(u) for u in uids if isinstance(u, set)) == 6 and
          all(isinstance(u, set) and len(u) == c for c, u in zip(counts, uids)), got)
    for s in sessions + [b]:
        s.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--mv", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--password-file", required=True)
    args = p.parse_args()
    for test in (test_keywords_announced, test_condstore_silent, test_two_way_sync,
                 test_keyword_limits, test_mailbox_keyword_bound, test_move_text,
                 test_nul_bytes, test_envelope_route, test_capability, test_subscriptions,
                 test_subscriptions_bound, test_recent):
        try:
            test(args)
        except Exception as e:  # a test that dies counts as one failure, the rest still run
            results.report(test.__name__, False, "%s: %s" % (type(e).__name__, e))
    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
