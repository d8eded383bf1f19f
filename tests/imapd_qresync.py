"""imapd_qresync.py -- CONDSTORE / QRESYNC (RFC 7162) and the incremental view sync of
mailvaultd, driven over raw IMAP connections (tests/imapd_common.py) by tests/cli_imapd_qresync.sh.

WHAT IT CHECKS
  - STORE / UID STORE (UNCHANGEDSINCE m): OK [MODIFIED set] names exactly the messages changed
    after m (sequence numbers for STORE, UIDs for UID STORE), by another session or by another
    process (the mailvault CLI); those keep their flags; UNCHANGEDSINCE 0 fails every message.
  - UID FETCH ... (CHANGEDSINCE m VANISHED): * VANISHED (EARLIER) of the expunged UIDs in the
    set, before the FETCH responses; VANISHED without CHANGEDSINCE, or without ENABLE QRESYNC,
    or with FETCH rather than UID FETCH is BAD.
  - Expunges made elsewhere reach a QRESYNC session as * VANISHED (never * n EXPUNGE), also
    during UID FETCH, UID STORE and UID SEARCH; never during FETCH, STORE or SEARCH (RFC 3501
    7.4.1), where they wait for the next command that may report them; a session without
    QRESYNC gets * n EXPUNGE in the same places.
  - The sync: several sessions (with and without QRESYNC) keep a model of their mailbox from
    the untagged responses only (EXPUNGE renumbering, VANISHED, EXISTS, FETCH FLAGS), while
    another session and the CLI change flags, append, copy in, move out and expunge. Every
    FETCH must name the UID the model has at that sequence number when it is read (so VANISHED
    must come before FETCHes numbered after it), and after every round the model must equal
    what a fresh session sees (UIDs and flags) and what the session itself answers to FETCH.

USAGE
  python3 tests/imapd_qresync.py --imap PORT --user ADDR --password PW \
      --mv build/asan/mailvault --root ROOT --password-file FILE
  The last line is "# N passed, N failed".
"""
import argparse
import random
import re
import subprocess
import sys

import imapd_common

results = imapd_common.Results()
TIMEOUT_S = 60
MESSAGE = b"From: qr@example.org\r\nTo: alice@example.org\r\nSubject: qresync %d\r\n\r\nbody %d\r\n"


def check(name, cond, why=""):
    results.report(name, bool(cond), repr(why)[:600] if not cond else "")


def uid_set(text):
    """"1:3,7" -> {1, 2, 3, 7}"""
    out = set()
    for part in text.split(b","):
        if b":" in part:
            a, b = (int(x) for x in part.split(b":"))
            out.update(range(min(a, b), max(a, b) + 1))
        else:
            out.add(int(part))
    return out


def lines_of(untagged):
    return [text for text, _ in untagged]


def modified_of(tagged):
    m = re.search(rb"\[MODIFIED ([0-9:,]+)\]", tagged)
    return uid_set(m.group(1)) if m else set()


def highestmodseq(lines):
    for l in lines:
        m = re.search(rb"HIGHESTMODSEQ (\d+)", l)
        if m:
            return int(m.group(1))
    return 0


class Session:
    """A logged-in connection."""

    def __init__(self, args, prefix):
        self.c = imapd_common.Imap(args.imap, TIMEOUT_S, prefix)
        _, tagged = self.c.command('LOGIN %s "%s"' % (args.user, args.password))
        if b" OK" not in tagged:
            raise RuntimeError("login failed: %r" % tagged)

    def cmd(self, text):
        untagged, tagged = self.c.command(text)
        return lines_of(untagged), tagged

    def append(self, box, n, flags=""):
        msg = MESSAGE % (n, n)
        _, tagged = self.c.command(("APPEND %s %s" % (box, flags)).rstrip(), literal=msg,
                                   plus=True)
        if b" OK" not in tagged:
            raise RuntimeError("APPEND failed: %r" % tagged)
        return tagged

    def close(self):
        try:
            self.c.command("LOGOUT")
        except (OSError, EOFError):
            pass
        self.c.close()


def fresh_state(args, box):
    """{uid: flags} of box as a new session sees it."""
    s = Session(args, b"f")
    s.cmd("EXAMINE %s" % box)
    lines, _ = s.cmd("UID FETCH 1:* (FLAGS)")
    s.close()
    return parse_fetch_flags(lines)


FETCH_RE = re.compile(rb"^\* (\d+) FETCH \((.*)\)$")


def parse_fetch(line):
    """(seq, uid or None, flags or None) of an untagged FETCH line, else None."""
    m = FETCH_RE.match(line)
    if not m:
        return None
    body = m.group(2)
    u = re.search(rb"UID (\d+)", body)
    f = re.search(rb"FLAGS \(([^)]*)\)", body)
    return (int(m.group(1)), int(u.group(1)) if u else None,
            frozenset(f.group(1).split()) if f else None)


def parse_fetch_flags(lines):
    out = {}
    for l in lines:
        p = parse_fetch(l)
        if p and p[1] is not None and p[2] is not None:
            out[p[1]] = p[2]
    return out


def cli(args, *argv):
    r = subprocess.run([args.mv] + list(argv) + ["--root", args.root, "--password-file",
                                                  args.password_file],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    return r.returncode, r.stderr


# ---- 1. STORE (UNCHANGEDSINCE) ----------------------------------------------------------------

def test_conditional_store(args):
    a, b = Session(args, b"a"), Session(args, b"b")
    a.cmd("CREATE Cs")
    for n in range(1, 6):
        a.append("Cs", n)
    a.cmd("ENABLE CONDSTORE")
    lines, _ = a.cmd("SELECT Cs")
    high = highestmodseq(lines)
    check("SELECT gives HIGHESTMODSEQ", high > 0, lines)
    b.cmd("SELECT Cs")
    b.cmd("UID STORE 2 +FLAGS (\\Answered)")
    lines, tagged = a.cmd("STORE 1:4 (UNCHANGEDSINCE %d) +FLAGS (\\Seen)" % high)
    check("STORE UNCHANGEDSINCE: OK [MODIFIED 2] for the message another session changed",
          tagged.split()[1] == b"OK" and modified_of(tagged) == {2}, tagged)
    flags = parse_fetch_flags(lines)
    check("the others got the flag, the changed one kept its own",
          all(b"\\Seen" in flags.get(u, ()) for u in (1, 3, 4)) and
          b"\\Seen" not in flags.get(2, frozenset([b"\\Seen"])), lines)
    state = fresh_state(args, "Cs")
    check("the store agrees", state.get(2) == frozenset([b"\\Answered"]) and
          b"\\Seen" in state.get(1, ()) and b"\\Seen" not in state.get(5, ()), state)

    lines, _ = a.cmd("NOOP")
    lines, _ = a.cmd("FETCH 1:* (MODSEQ)")
    now = max(int(re.search(rb"MODSEQ \((\d+)\)", l).group(1)) for l in lines)
    lines, tagged = a.cmd("UID STORE 1:5 (UNCHANGEDSINCE 0) +FLAGS (\\Flagged)")
    check("UNCHANGEDSINCE 0 fails every message", modified_of(tagged) == {1, 2, 3, 4, 5} and
          not any(b"\\Flagged" in l for l in lines), (lines, tagged))
    check("and changes nothing", all(b"\\Flagged" not in f for f in fresh_state(args, "Cs").values()))

    # Sequence numbers and UIDs apart: UID 1 goes, then seq n is UID n + 1.
    b.cmd("UID STORE 1 +FLAGS (\\Deleted)")
    b.cmd("UID EXPUNGE 1")
    a.cmd("NOOP")
    b.cmd("UID STORE 4 +FLAGS (\\Draft)")
    lines, tagged = a.cmd("STORE 1:3 (UNCHANGEDSINCE %d) +FLAGS (\\Flagged)" % now)
    check("STORE: MODIFIED names sequence numbers", modified_of(tagged) == {3}, (lines, tagged))
    lines, tagged = a.cmd("UID STORE 2:5 (UNCHANGEDSINCE %d) -FLAGS (\\Seen)" % now)
    check("UID STORE: MODIFIED names UIDs (and the session's own change counts)",
          modified_of(tagged) == {2, 3, 4}, (lines, tagged))

    # Another process: the CLI changes UID 5 after the session read its modseq.
    lines, _ = a.cmd("UID FETCH 5 (MODSEQ)")
    m5 = int(re.search(rb"MODSEQ \((\d+)\)", lines[0]).group(1)) if lines else 0
    rc, err = cli(args, "flags", args.user, "5", "--mailbox", "Cs", "--add", "\\Answered")
    check("the CLI changes a flag while the server has the store open", rc == 0, err)
    lines, tagged = a.cmd("UID STORE 5 (UNCHANGEDSINCE %d) +FLAGS (\\Deleted)" % m5)
    check("a change by another process fails the test", modified_of(tagged) == {5} and
          b"\\Deleted" not in fresh_state(args, "Cs").get(5, frozenset([b"\\Deleted"])),
          (lines, tagged))
    _, tagged = a.cmd("STORE 1 (UNCHANGEDSINCE x) +FLAGS (\\Seen)")
    check("a malformed UNCHANGEDSINCE is BAD", tagged.split()[1] == b"BAD", tagged)
    a.close()
    b.close()


# ---- 2. the VANISHED modifier -------------------------------------------------------------------

def test_vanished_modifier(args):
    a, b = Session(args, b"v"), Session(args, b"w")
    a.cmd("CREATE Vm")
    for n in range(1, 9):
        a.append("Vm", n)
    a.cmd("ENABLE CONDSTORE")
    lines, _ = a.cmd("SELECT Vm")
    high = highestmodseq(lines)
    _, tagged = a.cmd("UID FETCH 1:* (FLAGS) (CHANGEDSINCE %d VANISHED)" % high)
    check("VANISHED before ENABLE QRESYNC is BAD", tagged.split()[1] == b"BAD", tagged)
    lines, _ = a.cmd("ENABLE QRESYNC")
    check("ENABLE QRESYNC", lines == [b"* ENABLED QRESYNC"], lines)
    _, tagged = a.cmd("UID FETCH 1:* (FLAGS) (VANISHED)")
    check("VANISHED without CHANGEDSINCE is BAD", tagged.split()[1] == b"BAD", tagged)
    _, tagged = a.cmd("FETCH 1:* (FLAGS) (CHANGEDSINCE %d VANISHED)" % high)
    check("VANISHED with FETCH (not UID FETCH) is BAD", tagged.split()[1] == b"BAD", tagged)
    lines, tagged = a.cmd("UID FETCH 1:* (FLAGS) (VANISHED CHANGEDSINCE %d)" % high)
    check("the modifiers in either order; nothing changed, nothing said",
          tagged.split()[1] == b"OK" and lines == [], (lines, tagged))

    b.cmd("SELECT Vm")
    b.cmd("UID STORE 2,3,6 +FLAGS.SILENT (\\Deleted)")
    b.cmd("EXPUNGE")
    b.cmd("UID STORE 7 +FLAGS.SILENT (\\Flagged)")
    lines, tagged = a.cmd("UID FETCH 1:* (FLAGS) (CHANGEDSINCE %d VANISHED)" % high)
    earlier = [l for l in lines if l.startswith(b"* VANISHED (EARLIER) ")]
    fetches = [i for i, l in enumerate(lines) if b" FETCH " in l]
    check("UID FETCH (CHANGEDSINCE m VANISHED): VANISHED (EARLIER) of the expunged UIDs",
          len(earlier) == 1 and uid_set(earlier[0].split()[-1]) == {2, 3, 6}, lines)
    check("before any FETCH response; FETCHes only for the changed message",
          earlier and fetches and lines.index(earlier[0]) < fetches[0] and
          set(parse_fetch_flags(lines)) == {7}, lines)
    now = [i for i, l in enumerate(lines) if l.startswith(b"* VANISHED ") and b"EARLIER" not in l]
    check("and the view drops them with * VANISHED after the FETCH responses",
          vanished_uids(lines) == {2, 3, 6} and now and fetches and now[0] > fetches[-1], lines)
    lines, tagged = a.cmd("UID FETCH 3:5 (FLAGS) (CHANGEDSINCE %d VANISHED)" % high)
    earlier = [l for l in lines if l.startswith(b"* VANISHED (EARLIER) ")]
    check("VANISHED (EARLIER) keeps to the UID set", len(earlier) == 1 and
          uid_set(earlier[0].split()[-1]) == {3}, lines)
    lines, tagged = a.cmd("NOOP")
    check("reported once: the NOOP after has nothing to say", lines == [], lines)
    a.close()
    b.close()


# ---- 3. where expunges may be reported -----------------------------------------------------------

def expunge_elsewhere(b, uid):
    b.cmd("UID STORE %d +FLAGS.SILENT (\\Deleted)" % uid)
    b.cmd("UID EXPUNGE %d" % uid)


def vanished_uids(lines):
    out = set()
    for l in lines:
        if l.startswith(b"* VANISHED ") and b"EARLIER" not in l:
            out |= uid_set(l.split()[-1])
    return out


def test_expunge_reporting(args):
    q, p, b = Session(args, b"q"), Session(args, b"p"), Session(args, b"x")
    b.cmd("CREATE Ex")
    for n in range(1, 13):
        b.append("Ex", n)
    q.cmd("ENABLE QRESYNC")
    q.cmd("SELECT Ex")
    p.cmd("SELECT Ex")
    b.cmd("SELECT Ex")

    expunge_elsewhere(b, 2)
    lines, _ = q.cmd("NOOP")
    check("QRESYNC: another session's expunge is * VANISHED, not EXPUNGE",
          vanished_uids(lines) == {2} and not any(l.endswith(b"EXPUNGE") for l in lines), lines)
    lines, _ = p.cmd("NOOP")
    check("without QRESYNC it is * 2 EXPUNGE", b"* 2 EXPUNGE" in lines and
          vanished_uids(lines) == set(), lines)

    for what, command in (("UID FETCH", "UID FETCH 1:* (FLAGS)"),
                          ("UID STORE", "UID STORE 1 +FLAGS (\\Seen)"),
                          ("UID SEARCH", "UID SEARCH ALL")):
        uid = {"UID FETCH": 3, "UID STORE": 4, "UID SEARCH": 5}[what]
        expunge_elsewhere(b, uid)
        lines, tagged = q.cmd(command)
        check("QRESYNC: * VANISHED during %s" % what, tagged.split()[1] == b"OK" and
              vanished_uids(lines) == {uid} and not any(l.endswith(b"EXPUNGE") for l in lines),
              lines)
        lines, tagged = p.cmd(command)
        # UIDs 2, 3, ... go one at a time: the next one is always message 2.
        check("without QRESYNC: * 2 EXPUNGE during %s" % what,
              tagged.split()[1] == b"OK" and b"* 2 EXPUNGE" in lines, lines)

    for what, command in (("FETCH", "FETCH 1:* (FLAGS)"), ("STORE", "STORE 1 +FLAGS (\\Flagged)"),
                          ("SEARCH", "SEARCH ALL")):
        uid = {"FETCH": 6, "STORE": 7, "SEARCH": 8}[what]
        expunge_elsewhere(b, uid)
        for s, name in ((q, "QRESYNC"), (p, "no QRESYNC")):
            lines, tagged = s.cmd(command)
            check("%s: nothing expunged reported during %s" % (name, what),
                  tagged.split()[1] == b"OK" and vanished_uids(lines) == set() and
                  not any(l.endswith(b"EXPUNGE") for l in lines), lines)
            if what == "FETCH":
                fetched = {parse_fetch(l)[1] for l in lines if parse_fetch(l)}
                check("%s: FETCH skips the expunged message" % name, uid not in fetched, lines)
        lines, _ = q.cmd("NOOP")
        check("QRESYNC: the NOOP after %s reports it" % what, vanished_uids(lines) == {uid}, lines)
        lines, _ = p.cmd("NOOP")
        check("no QRESYNC: the NOOP after %s reports it" % what,
              [l for l in lines if l.endswith(b"EXPUNGE")] == [b"* 2 EXPUNGE"], lines)
    lines, _ = q.cmd("UID SEARCH ALL")
    _, tagged = q.cmd("UID FETCH 1:* (FLAGS)")
    check("the views end where the store is", lines and
          set(int(x) for x in lines[0].split()[2:]) == set(fresh_state(args, "Ex")), lines)
    for s in (q, p, b):
        s.close()


# ---- 4. the sync: models kept from untagged responses only ---------------------------------------

class Model:
    """What a client knows of its selected mailbox: UIDs by sequence number and flags."""

    def __init__(self, session, name):
        self.s, self.name = session, name
        self.uids = []
        self.flags = {}
        self.errors = []

    def load(self, lines):
        exists = [int(l.split()[1]) for l in lines if l.endswith(b" EXISTS")]
        self.uids = [None] * (exists[-1] if exists else 0)
        self.fill()

    def fill(self):
        """Learns the UIDs of new messages, as a client does after EXISTS."""
        known = 0
        while known < len(self.uids) and self.uids[known] is not None:
            known += 1
        if known == len(self.uids):
            return
        lines, _ = self.s.cmd("FETCH %d:* (UID FLAGS)" % (known + 1))
        self.apply(lines, "fill")

    def apply(self, lines, when):
        for l in lines:
            if l.endswith(b" EXPUNGE"):
                n = int(l.split()[1])
                if not 1 <= n <= len(self.uids):
                    self.errors.append("%s: %r beyond %d messages" % (when, l, len(self.uids)))
                    continue
                uid = self.uids.pop(n - 1)
                self.flags.pop(uid, None)
            elif l.startswith(b"* VANISHED ") and b"EARLIER" not in l:
                gone = uid_set(l.split()[-1])
                self.uids = [u for u in self.uids if u not in gone]
                for u in gone:
                    self.flags.pop(u, None)
            elif l.endswith(b" EXISTS"):
                n = int(l.split()[1])
                if n < len(self.uids):
                    self.errors.append("%s: %r below %d known" % (when, l, len(self.uids)))
                self.uids += [None] * (n - len(self.uids))
            else:
                p = parse_fetch(l)
                if p is None:
                    continue
                seq, uid, flags = p
                if not 1 <= seq <= len(self.uids):
                    self.errors.append("%s: %r beyond %d messages" % (when, l, len(self.uids)))
                    continue
                if self.uids[seq - 1] is None and uid is not None:
                    self.uids[seq - 1] = uid
                elif uid is not None and self.uids[seq - 1] != uid:
                    self.errors.append("%s: %r but seq %d is UID %s" % (when, l, seq,
                                                                        self.uids[seq - 1]))
                if flags is not None and uid is not None:
                    self.flags[uid] = flags

    def command(self, text, when):
        lines, tagged = self.s.cmd(text)
        self.apply(lines, when)
        self.fill()
        return lines, tagged


def check_models(args, models, box, when):
    state = fresh_state(args, box)
    for m in models:
        check("%s: %s: every untagged response matched the view" % (when, m.name),
              not m.errors, m.errors[:5])
        m.errors = []
        check("%s: %s: the view's UIDs are the store's" % (when, m.name),
              m.uids == sorted(state), (len(m.uids), len(state),
                                        sorted(set(m.uids) ^ set(state))[:10]))
        wrong = [u for u in state if m.flags.get(u) != state[u]]
        check("%s: %s: the view's flags are the store's" % (when, m.name), not wrong,
              [(u, m.flags.get(u), state[u]) for u in wrong[:5]])
        lines, _ = m.s.cmd("FETCH 1:* (UID)")
        own = [parse_fetch(l) for l in lines if parse_fetch(l)]
        check("%s: %s: the session numbers its messages as the view does" % (when, m.name),
              [(seq, uid) for seq, uid, _ in own] == [(i + 1, u) for i, u in enumerate(m.uids)],
              own[:5])


def test_sync(args):
    rng = random.Random(7162)
    box, other = "Sync", "SyncOther"
    b = Session(args, b"c")
    b.cmd("CREATE %s" % box)
    b.cmd("CREATE %s" % other)
    for n in range(1, 241):
        b.append(box, n, "(\\Seen)" if n % 3 == 0 else "")
    for n in range(1, 6):
        b.append(other, 1000 + n)
    b.cmd("SELECT %s" % box)
    models = []
    for name, qresync in (("plain", False), ("condstore", False), ("qresync", True)):
        s = Session(args, name[0:1].encode() + b"m")
        if qresync:
            s.cmd("ENABLE QRESYNC")
        elif name == "condstore":
            s.cmd("ENABLE CONDSTORE")
        m = Model(s, name)
        lines, _ = s.cmd("SELECT %s" % box)
        m.load(lines)
        models.append(m)
    check_models(args, models, box, "after SELECT")

    flag_names = ["\\Seen", "\\Flagged", "\\Answered", "$Work", "$Later"]
    next_n = 2000
    for round_no in range(1, 9):
        when = "round %d" % round_no
        live = sorted(fresh_state(args, box))
        picks = rng.sample(live, min(len(live), rng.randint(1, 6)))
        for uid in picks:
            b.cmd("UID STORE %d %sFLAGS (%s)" % (uid, rng.choice("+-"), rng.choice(flag_names)))
        for _ in range(rng.randint(0, 3)):
            b.append(box, next_n)
            next_n += 1
        gone = rng.sample(live, min(len(live), rng.randint(0, 5)))
        if gone:
            b.cmd("UID STORE %s +FLAGS.SILENT (\\Deleted)" % ",".join(map(str, gone)))
            b.cmd("UID EXPUNGE %s" % ",".join(map(str, gone)))
        if round_no % 2 == 0:
            b.cmd("SELECT %s" % other)
            b.cmd("UID COPY 1:2 %s" % box)  # copied in: new UIDs at the end
            b.cmd("SELECT %s" % box)
        if round_no % 3 == 0:
            rest = sorted(set(live) - set(gone))
            b.cmd("UID MOVE %d %s" % (rng.choice(rest), other))
        if round_no % 4 == 1:
            rest = sorted(set(live) - set(gone))
            uid = rng.choice(rest)
            rc, err = cli(args, "flags", args.user, str(uid), "--mailbox", box, "--add",
                          "\\Draft")
            check("%s: the CLI changes a flag" % when, rc == 0, err)
        if round_no == 5:
            # Held back: a FETCH may not report expunges; the NOOP after it must.
            b.cmd("UID STORE 1:* +FLAGS.SILENT (\\Flagged)")
            rest = sorted(fresh_state(args, box))
            b.cmd("UID STORE %d +FLAGS.SILENT (\\Deleted)" % rest[len(rest) // 2])
            b.cmd("UID EXPUNGE %d" % rest[len(rest) // 2])
            for m in models:
                lines, _ = m.s.cmd("FETCH 1:3 (FLAGS)")
                m.apply(lines, when + " FETCH")
                check("%s: %s: no expunge during FETCH" % (when, m.name),
                      vanished_uids(lines) == set() and
                      not any(l.endswith(b"EXPUNGE") for l in lines), lines)
        for m in models:
            lines, _ = m.command("NOOP", when)
            if m.name == "qresync":
                check("%s: qresync: never EXPUNGE" % when,
                      not any(l.endswith(b"EXPUNGE") for l in lines), lines)
            else:
                check("%s: %s: never VANISHED" % (when, m.name),
                      not any(b"VANISHED" in l for l in lines), lines)
        check_models(args, models, box, when)
        lines, _ = models[0].s.cmd("NOOP")
        check("%s: a second NOOP has nothing to say" % when, lines == [], lines)
    for m in models:
        m.s.close()
    b.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--mv", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--password-file", required=True)
    args = p.parse_args()
    for test in (test_conditional_store, test_vanished_modifier, test_expunge_reporting,
                 test_sync):
        try:
            test(args)
        except Exception as e:  # a test that dies counts as one failure, the rest still run
            results.report(test.__name__, False, "%s: %s" % (type(e).__name__, e))
    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
