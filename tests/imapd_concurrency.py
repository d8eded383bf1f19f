#!/usr/bin/env python3
"""imapd_concurrency.py -- many IMAP sessions on the same and on different users of a running
mailvaultd while LMTP deliveries arrive: every session sees a consistent mailbox and nothing
is lost. Run by tests/cli_imapd_load.sh, which starts the server and makes the users.

USAGE
  imapd_concurrency.py --imap PORT --lmtp PORT --user ADDR:PASSWORD (3 times)
                       [--seconds N] [--sessions N] [--seed N] [--hangups]
  LOAD_DEBUG=1 in the environment prints each failing session's last 400 lines of dialogue.

WHAT IT DOES
  Seeds every INBOX over LMTP, then runs --sessions raw IMAP sessions (about half on the
  first user's INBOX, the rest on the second user's INBOX and Work and on the third user's
  INBOX) for --seconds while two LMTP senders deliver a stream of messages to one to three
  recipients. Each session loops over NOOP, IDLE, UID SEARCH ALL, SEARCH, FETCH by sequence
  number and by UID (flags and the Message-ID header), STORE +/-FLAGS (a keyword of its own
  and \\Seen), UID COPY (COPYUID), UID MOVE, \\Deleted + UID EXPUNGE or EXPUNGE, APPEND and now
  and then a new SELECT (with --hangups also: send a big FETCH, an IDLE, half an APPEND
  literal or half a command line, hang up at once, log in again), and keeps a model of its
  view (sequence number -> UID) that every untagged response updates. It checks as it goes:
    - EXISTS never announces fewer messages than the view holds (expunges come as EXPUNGE);
    - EXPUNGE and FETCH name sequence numbers inside the view; a FETCH's UID agrees with the
      UID the view has at that number; the view's UIDs strictly increase;
    - UID SEARCH ALL agrees with the view (the messages it leaves out are expunged by the
      same command, the others keep their places);
    - a UID always carries the same Message-ID, and in INBOX a Message-ID has one UID;
    - the session's own keyword is on exactly the messages it put it on;
    - after its UID EXPUNGE / MOVE OK the message is gone from the view; COPYUID names new
      UIDs;
    - no BAD or NO, no BYE, no VANISHED (QRESYNC is not enabled), no timeout.
  When the time is up the LMTP senders stop, every session syncs (NOOP, UID SEARCH ALL,
  UID FETCH 1:* (UID)) and the views of one mailbox must all be equal, and equal to a fresh
  session's. Finally a fresh login per user fetches every Message-ID: each LMTP-acknowledged
  or APPEND-acknowledged message is in INBOX exactly once, unless the test expunged it
  (then not at all; at most once while the expunge was not acknowledged), nothing appears
  twice, nothing the test did not send, and every COPYUID target still holds its message.

  Prints "PASS ..." / "FAIL ..." lines and, last, "# N passed, N failed". Every socket has a
  timeout and every thread join is bounded.
"""
import argparse
import collections
import os
import imaplib
import random
import re
import select
import sys
import threading
import time

import imapd_common

TIMEOUT = 20
DEBUG = os.environ.get("LOAD_DEBUG")
results = imapd_common.Results()
report = results.report
note = results.note


class Violation(Exception):
    pass


# ---- a raw IMAP connection ---------------------------------------------------------------

class Imap(imapd_common.Imap):
    """imapd_common.Imap with LITERAL+ for every literal, a dialogue trace (LOAD_DEBUG) and
    poll for IDLE."""

    def __init__(self, port):
        self.trace = collections.deque(maxlen=400)
        super().__init__(port, TIMEOUT, tag_prefix=b"t")

    def read_response(self):
        r = super().read_response()
        if DEBUG:
            self.trace.append(r[0])
        return r

    def command(self, text, literal=None):
        if isinstance(text, str):
            text = text.encode()
        if DEBUG:
            self.trace.append(b">> " + self.tag_prefix + b"%d " % (self.n + 1) + text)
        return super().command(text, literal, plus=True)

    def poll(self, seconds):
        """Untagged responses that arrive within seconds (no literals expected: IDLE)."""
        got = []
        deadline = time.monotonic() + seconds
        while True:
            while b"\r\n" in self.buf:
                got.append(self.read_response())
            left = deadline - time.monotonic()
            if left <= 0:
                return got
            r, _, _ = select.select([self.sock], [], [], left)
            if r:
                self.fill()


# ---- what the test sent, acknowledged, expunged and copied --------------------------------

class World:
    def __init__(self, users):
        self.lock = threading.Lock()
        self.users = users
        self.counter = 0
        self.acked = {u: set() for u in users}           # msgids acknowledged into INBOX
        self.sent = set()                                # every msgid sent (acked or not)
        self.expunge_intent = {u: set() for u in users}  # msgids the test marked \Deleted
        self.expunge_acked = {u: set() for u in users}   # ... and saw expunged (UID EXPUNGE OK)
        self.uid2mid = {}                                # (user, box) -> {uid: msgid}
        self.mid2uid = {}                                # (user, "INBOX") -> {msgid: uid}
        self.copies = {}                                 # (user, box) -> {uid: msgid}
        self.problems = {}                               # category -> [examples]
        self.problem_count = {}

    def new_id(self, prefix):
        with self.lock:
            self.counter += 1
            mid = "%s.%d.%06x" % (prefix, self.counter, random.getrandbits(24))
            self.sent.add(mid)
            return mid

    def problem(self, category, text):
        with self.lock:
            self.problem_count[category] = self.problem_count.get(category, 0) + 1
            ex = self.problems.setdefault(category, [])
            if len(ex) < 4:
                ex.append(text)

    def seen(self, user, box, uid, mid, who):
        with self.lock:
            u2m = self.uid2mid.setdefault((user, box), {})
            old = u2m.setdefault(uid, mid)
            if old != mid:
                self.problem("uid-msgid", "%s %s: %s UID %d was %s, now %s"
                             % (who, user, box, uid, old, mid))
            if box == "INBOX":
                m2u = self.mid2uid.setdefault((user, box), {})
                old = m2u.setdefault(mid, uid)
                if old != uid:
                    self.problem("two-uids", "%s %s: %s has UIDs %d and %d"
                                 % (who, user, mid, old, uid))

    def mid_of(self, user, box, uid):
        with self.lock:
            return self.uid2mid.get((user, box), {}).get(uid)


def make_message(mid, rnd, to):
    body = b"".join(b"%04d the quick brown fox jumps over the lazy dog\r\n" % i
                    for i in range(rnd.randint(2, 60)))
    return ("From: Load Tester <load@example.net>\r\nTo: %s\r\nSubject: load %s\r\n"
            "Date: Mon, 02 Mar 2026 10:00:00 +0000\r\nMessage-ID: <%s@conc.test>\r\n\r\n"
            % (to, mid, mid)).encode() + body


MID_RE = re.compile(rb"Message-ID: <([^>@]+)@conc\.test>", re.I)


# ---- LMTP ------------------------------------------------------------------------------------

def lmtp_deliver(conn, world, rnd, rcpts):
    mid = world.new_id("lm")
    data = make_message(mid, rnd, ", ".join(rcpts))
    code, line = conn.cmd("MAIL FROM:<load@example.net>")
    if code != 250:
        world.problem("lmtp", "MAIL: %r" % line)
        return 0
    for u in rcpts:
        code, line = conn.cmd("RCPT TO:<%s>" % u)
        if code != 250:
            world.problem("lmtp", "RCPT %s: %r" % (u, line))
            conn.cmd("RSET")
            return 0
    code, line = conn.cmd("DATA")
    if code != 354:
        world.problem("lmtp", "DATA: %r" % line)
        return 0
    conn.sock.sendall(data + b".\r\n")
    n = 0
    for u in rcpts:
        code, line = conn.reply()
        if code == 250:
            with world.lock:
                world.acked[u].add(mid)
            n += 1
        else:
            world.problem("lmtp", "delivery to %s: %r" % (u, line))
    return n


def lmtp_sender(port, world, stop, seed, stats):
    rnd = random.Random(seed)
    users = list(world.users)
    try:
        conn = imapd_common.Lmtp(port, TIMEOUT)
        if conn.cmd("LHLO load.test")[0] != 250:
            world.problem("lmtp", "LHLO refused")
            return
        while not stop.is_set():
            stats["lmtp"] += lmtp_deliver(conn, world, rnd,
                                          rnd.sample(users, rnd.randint(1, len(users))))
            stop.wait(rnd.uniform(0.0, 0.04))
        conn.cmd("QUIT")
        conn.sock.close()
    except (OSError, EOFError, ValueError) as e:
        world.problem("lmtp", "LMTP connection: %s: %s" % (type(e).__name__, e))


# ---- one IMAP session and its model of the view ---------------------------------------------

class Entry:
    __slots__ = ("uid",)

    def __init__(self, uid=None):
        self.uid = uid


FETCH_RE = re.compile(rb"^\* (\d+) FETCH \((.*)\)$", re.S)
UID_RE = re.compile(rb"\bUID (\d+)")
FLAGS_RE = re.compile(rb"\bFLAGS \(([^)]*)\)")


def uid_set_expand(text):
    out = []
    for part in text.split(","):
        if ":" in part:
            a, b = part.split(":")
            a, b = int(a), int(b)
            out += list(range(min(a, b), max(a, b) + 1))
        else:
            out.append(int(part))
    return out


def uid_set(uids):
    return ",".join(str(u) for u in sorted(uids))


class Session:
    def __init__(self, index, port, user, password, box, world, rnd, stats):
        self.index = index
        self.port = port
        self.user = user
        self.password = password
        self.box = box
        self.world = world
        self.rnd = rnd
        self.stats = stats
        self.kw = "$k%d" % index
        self.name = "session %d (%s %s)" % (index, user.split("@")[0], box)
        self.model = []
        self.own = set()      # UIDs carrying our keyword
        self.unsure = set()   # UIDs whose keyword state we cannot know (STORE hit a ghost)
        self.c = None
        self.final_uids = None
        self.idle_updates = 0
        self.own_known = False
        self.search_hook = None

    def fail(self, category, text):
        self.world.problem(category, "%s: %s" % (self.name, text))
        if DEBUG and self.c is not None:
            with out_lock:
                print("## %s: %s" % (self.name, text))
                for line in self.c.trace:
                    print("##   %s" % line[:200].decode(errors="replace"))
                self.c.trace.clear()

    # -- the model --

    def uids_known(self):
        return [e.uid for e in self.model if e.uid is not None]

    def check_order(self):
        known = self.uids_known()
        for a, b in zip(known, known[1:]):
            if a >= b:
                self.fail("order", "the view's UIDs do not increase: ... %d, %d ..." % (a, b))
                return False
        return True

    def apply(self, untagged, searches=None):
        """Applies untagged responses in order; * SEARCH lines go to searches as
        (snapshot of the model, numbers)."""
        for text, lits in untagged:
            if text.startswith(b"* OK") or text.startswith(b"* NO") or text.startswith(b"* FLAGS") \
                    or re.match(rb"\* \d+ RECENT$", text) or text.startswith(b"* CAPABILITY"):
                continue
            if text.startswith(b"* BYE"):
                raise Violation("unexpected %r" % text)
            if text.startswith(b"* VANISHED"):
                self.fail("protocol", "VANISHED without QRESYNC: %r" % text[:80])
                continue
            m = re.match(rb"\* (\d+) EXISTS$", text)
            if m:
                n = int(m.group(1))
                if n < len(self.model):
                    self.fail("exists", "EXISTS %d below the %d messages of the view" %
                              (n, len(self.model)))
                    del self.model[n:]
                self.model.extend(Entry() for _ in range(n - len(self.model)))
                continue
            m = re.match(rb"\* (\d+) EXPUNGE$", text)
            if m:
                n = int(m.group(1))
                if not 1 <= n <= len(self.model):
                    self.fail("seq", "EXPUNGE %d outside the view (%d)" % (n, len(self.model)))
                    continue
                e = self.model.pop(n - 1)
                if e.uid is not None:
                    self.own.discard(e.uid)
                    self.unsure.discard(e.uid)
                continue
            if text.startswith(b"* SEARCH"):
                nums = [int(x) for x in text[8:].split()]
                if searches is not None:
                    searches.append((list(self.model), nums))
                if self.search_hook is not None:
                    self.search_hook(nums)
                continue
            m = FETCH_RE.match(text)
            if m:
                self.apply_fetch(int(m.group(1)), m.group(2), lits)
                continue
            self.fail("protocol", "unexpected untagged %r" % text[:80])

    def apply_fetch(self, n, body, lits):
        if not 1 <= n <= len(self.model):
            self.fail("seq", "FETCH %d outside the view (%d)" % (n, len(self.model)))
            return
        e = self.model[n - 1]
        um = UID_RE.search(body)
        uid = int(um.group(1)) if um else e.uid
        if um:
            if e.uid is None:
                lo = next((x.uid for x in reversed(self.model[:n - 1]) if x.uid is not None), 0)
                hi = next((x.uid for x in self.model[n:] if x.uid is not None), 1 << 33)
                if not lo < uid < hi:
                    self.fail("order", "FETCH %d UID %d lies outside (%d, %d)" % (n, uid, lo, hi))
                e.uid = uid
            elif e.uid != uid:
                self.fail("seq-uid", "FETCH %d says UID %d, the view has UID %d there"
                          % (n, uid, e.uid))
                return
        fm = FLAGS_RE.search(body)
        if fm and uid is not None and uid not in self.unsure and self.own_known:
            has = self.kw.encode() in fm.group(1).split()
            if has != (uid in self.own):
                self.fail("flags", "UID %d FLAGS (%s): own keyword %s expected"
                          % (uid, fm.group(1).decode(), "present" if uid in self.own
                             else "absent"))
        for lit in lits:
            mm = MID_RE.search(lit)
            if mm and uid is not None:
                self.world.seen(self.user, self.box, uid, mm.group(1).decode(), self.name)

    def cmd(self, text, literal=None, searches=None):
        untagged, tagged = self.c.command(text, literal)
        self.apply(untagged, searches)
        self.stats["commands"] += 1
        if not re.match(rb"t\d+ OK", tagged):
            self.fail("no-bad", "%s -> %r" % (text if isinstance(text, str) else text[:40],
                                               tagged[:120]))
            return False, tagged
        return True, tagged

    # -- the commands --

    def select(self):
        self.model = []
        self.own = set()
        self.unsure = set()
        ok, _ = self.cmd("SELECT %s" % self.box)
        if not ok:
            raise Violation("SELECT failed")
        # Our keyword from a previous SELECT of the same mailbox is still on some messages:
        # unknown (unchecked) until the SEARCH line of UID SEARCH KEYWORD says where.
        self.own_known = False
        self.uid_search()
        self.search_hook = self.learn_own
        try:
            self.cmd("UID SEARCH KEYWORD %s" % self.kw)
        finally:
            self.search_hook = None
        if not self.own_known:
            raise Violation("UID SEARCH KEYWORD gave no SEARCH line")
        self.cmd("UID FETCH 1:* (UID FLAGS)")

    def learn_own(self, nums):
        self.own = set(nums)
        self.own_known = True

    def uid_search(self):
        searches = []
        ok, _ = self.cmd("UID SEARCH ALL", searches=searches)
        if not ok or len(searches) != 1:
            if ok:
                self.fail("protocol", "UID SEARCH ALL gave %d SEARCH lines" % len(searches))
            return
        before, r = searches[0]
        if any(a >= b for a, b in zip(r, r[1:])):
            self.fail("search", "UID SEARCH ALL not ascending: %s" % r[:20])
            return
        alive = {id(e) for e in self.model}
        survivors = [e for e in before if id(e) in alive]
        rset = set(r)
        if not len(survivors) <= len(r) <= len(before):
            self.fail("search", "UID SEARCH ALL: %d UIDs, the view had %d, %d of them stay"
                      % (len(r), len(before), len(survivors)))
            return
        for e in before:
            if e.uid is not None and e.uid not in rset and id(e) in alive:
                self.fail("search", "UID %d is in the view but not in UID SEARCH ALL" % e.uid)
                return
        if len(r) == len(survivors):
            for e, u in zip(survivors, r):
                if e.uid is None:
                    e.uid = u
                elif e.uid != u:
                    self.fail("search", "UID SEARCH ALL has UID %d where the view has %d"
                              % (u, e.uid))
                    return
        self.check_order()
        self.stats["searches"] += 1

    def random_uids(self, k):
        known = self.uids_known()
        return self.rnd.sample(known, min(k, len(known))) if known else []

    def op_fetch_seq(self):
        if not self.model:
            return
        a = self.rnd.randint(1, len(self.model))
        b = min(len(self.model), a + self.rnd.randint(0, 12))
        self.cmd("FETCH %d:%d (UID FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])" % (a, b))

    def op_fetch_uid(self):
        uids = self.random_uids(self.rnd.randint(1, 8))
        if uids:
            self.cmd("UID FETCH %s (UID FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])"
                     % uid_set(uids))

    def op_store_kw(self):
        uids = self.random_uids(self.rnd.randint(1, 3))
        if not uids:
            return
        add = self.rnd.random() < 0.6
        for u in uids:
            (self.own.add if add else self.own.discard)(u)
        untagged, tagged = self.c.command("UID STORE %s %sFLAGS (%s)"
                                          % (uid_set(uids), "+" if add else "-", self.kw))
        reported = set()
        for text, _ in untagged:
            m = FETCH_RE.match(text)
            if m:
                um = UID_RE.search(m.group(2))
                if um:
                    reported.add(int(um.group(1)))
        self.apply(untagged)
        self.stats["commands"] += 1
        if not re.match(rb"t\d+ OK", tagged):
            self.fail("no-bad", "UID STORE -> %r" % tagged[:120])
            self.unsure.update(uids)
            return
        for u in uids:
            # No FETCH for one of ours: it was expunged meanwhile (a ghost the STORE skipped).
            if u not in reported and u in self.uids_known():
                self.unsure.add(u)

    def op_store_seen(self):
        if not self.model:
            return
        n = self.rnd.randint(1, len(self.model))
        self.cmd("STORE %d %sFLAGS (\\Seen)" % (n, self.rnd.choice("+-")))

    def op_copy(self, target):
        uids = self.random_uids(self.rnd.randint(1, 4))
        if not uids:
            return
        ok, tagged = self.cmd("UID COPY %s %s" % (uid_set(uids), target))
        if not ok:
            return
        m = re.search(rb"\[COPYUID (\d+) ([0-9:,]+) ([0-9:,]+)\]", tagged)
        if not m:
            # all of them expunged meanwhile: no COPYUID
            return
        src = uid_set_expand(m.group(2).decode())
        dst = uid_set_expand(m.group(3).decode())
        if len(src) != len(dst) or not set(src) <= set(uids):
            self.fail("copy", "COPYUID %r for UIDs %s" % (tagged, uids))
            return
        with self.world.lock:
            cp = self.world.copies.setdefault((self.user, target), {})
            for s, d in zip(src, dst):
                if d in cp:
                    self.world.problem("copy", "%s: COPYUID names UID %d of %s twice"
                                       % (self.name, d, target))
                cp[d] = ("uid", self.box, s)
        self.stats["copies"] += len(src)

    def op_expunge_tracked(self):
        """INBOX: \\Deleted on one message, then UID EXPUNGE of it (or now and then a plain
        EXPUNGE); the Message-ID is recorded first, so the final count knows it."""
        uids = self.random_uids(1)
        if not uids:
            return
        u = uids[0]
        mid = self.world.mid_of(self.user, self.box, u)
        if mid is None:
            self.cmd("UID FETCH %d (UID BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])" % u)
            mid = self.world.mid_of(self.user, self.box, u)
            if mid is None:
                return  # expunged meanwhile
        with self.world.lock:
            self.world.expunge_intent[self.user].add(mid)
        ok, _ = self.cmd("UID STORE %d +FLAGS.SILENT (\\Deleted)" % u)
        if not ok:
            return
        if self.rnd.random() < 0.15:
            ok, _ = self.cmd("EXPUNGE")
        else:
            ok, _ = self.cmd("UID EXPUNGE %d" % u)
        if ok:
            with self.world.lock:
                self.world.expunge_acked[self.user].add(mid)
            if u in self.uids_known():
                self.fail("expunge", "UID %d still in the view after its EXPUNGE OK" % u)
            self.stats["expunges"] += 1

    def op_move(self, target):
        """INBOX: UID MOVE of one message to target; tracked like an expunge."""
        uids = self.random_uids(1)
        if not uids:
            return
        u = uids[0]
        mid = self.world.mid_of(self.user, self.box, u)
        if mid is None:
            return
        with self.world.lock:
            self.world.expunge_intent[self.user].add(mid)
        untagged, tagged = self.c.command("UID MOVE %d %s" % (u, target))
        copyuid = [t for t, _ in untagged if t.startswith(b"* OK [COPYUID")]
        self.apply(untagged)
        self.stats["commands"] += 1
        if not re.match(rb"t\d+ OK", tagged):
            self.fail("no-bad", "UID MOVE -> %r" % tagged[:120])
            return
        with self.world.lock:
            self.world.expunge_acked[self.user].add(mid)
        if u in self.uids_known():
            self.fail("expunge", "UID %d still in the view after its MOVE OK" % u)
        m = re.search(rb"\[COPYUID (\d+) (\d+) (\d+)\]", copyuid[0]) if copyuid else None
        if m and int(m.group(2)) == u:
            with self.world.lock:
                self.world.copies.setdefault((self.user, target), {})[int(m.group(3))] = \
                    ("uid", self.box, u)
            self.stats["moves"] += 1
        elif copyuid:
            self.fail("copy", "MOVE of UID %d: %r" % (u, copyuid))

    def op_drop(self):
        """Hangs up abruptly with a command in flight (a big FETCH, an IDLE, an APPEND whose
        literal is cut short, a command line without its end), then logs in again."""
        kind = self.rnd.randrange(4)
        tag = self.c.tag()
        if kind == 0:
            self.c.sock.sendall(tag + b" FETCH 1:* (BODY.PEEK[] FLAGS)\r\n")
        elif kind == 1:
            self.c.sock.sendall(tag + b" IDLE\r\n")
        elif kind == 2:
            self.c.sock.sendall(tag + b" APPEND %s {5000+}\r\nFrom: cut@example.net\r\n"
                                % self.box.encode())
        else:
            self.c.sock.sendall(tag + b" UID FETCH 1:* (FL")
        if self.rnd.random() < 0.5:
            time.sleep(self.rnd.uniform(0, 0.02))
        self.c.close()
        self.stats["drops"] += 1
        self.c = Imap(self.port)
        ok, t = self.cmd('LOGIN "%s" "%s"' % (self.user, self.password))
        if not ok:
            raise Violation("login again: %r" % t)
        self.select()

    def op_expunge_free(self):
        uids = self.random_uids(self.rnd.randint(1, 3))
        if not uids:
            return
        ok, _ = self.cmd("UID STORE %s +FLAGS.SILENT (\\Deleted)" % uid_set(uids))
        if ok:
            ok, _ = self.cmd("EXPUNGE")
            if ok:
                left = set(self.uids_known()) & set(uids)
                if left:
                    self.fail("expunge", "UIDs %s still in the view after EXPUNGE OK" % left)

    def op_append(self):
        mid = self.world.new_id("ap")
        data = make_message(mid, self.rnd, self.user)
        ok, tagged = self.cmd("APPEND %s" % self.box, data)
        if ok and b"[APPENDUID" in tagged:
            with self.world.lock:
                self.world.acked[self.user].add(mid)
            self.stats["appends"] += 1

    def op_search_seq(self):
        searches = []
        ok, _ = self.cmd(self.rnd.choice(["SEARCH ALL", "SEARCH UNSEEN", "SEARCH FLAGGED",
                                          "SEARCH KEYWORD %s" % self.kw]), searches=searches)
        for before, nums in searches:
            if any(not 1 <= x <= len(before) for x in nums):
                self.fail("seq", "SEARCH gave numbers beyond the view (%d): %s"
                          % (len(before), nums[-3:]))

    def op_idle(self):
        tag = self.c.tag()
        self.c.sock.sendall(tag + b" IDLE\r\n")
        if DEBUG:
            self.c.trace.append(b">> " + tag + b" IDLE")
        while True:
            r = self.c.read_response()
            if r[0].startswith(b"+"):
                break
            if r[0].startswith(tag + b" "):
                self.fail("no-bad", "IDLE -> %r" % r[0])
                return
            self.apply([r])
        got = self.c.poll(self.rnd.uniform(0.1, 0.6))
        self.idle_updates += len(got)
        self.apply(got)
        self.c.sock.sendall(b"DONE\r\n")
        untagged, tagged = self.c.until(tag)
        self.apply(untagged)
        if not re.match(rb"t\d+ OK", tagged):
            self.fail("no-bad", "IDLE/DONE -> %r" % tagged)
        self.stats["idles"] += 1

    # -- the loop --

    def run(self, stop, barrier, final_barrier, copy_target, tracked, hangups):
        try:
            self.c = Imap(self.port)
            ok, t = self.cmd('LOGIN "%s" "%s"' % (self.user, self.password))
            if not ok:
                raise Violation("login: %r" % t)
            self.select()
            ops = [(self.cmd_noop, 6), (self.op_idle, 4), (self.uid_search, 8),
                   (self.op_fetch_seq, 10), (self.op_fetch_uid, 8), (self.op_store_kw, 10),
                   (self.op_store_seen, 4), (self.op_search_seq, 5), (self.select, 1),
                   (lambda: self.op_copy(copy_target), 4)]
            if tracked:
                ops += [(self.op_expunge_tracked, 2), (self.op_append, 2),
                        (lambda: self.op_move(copy_target), 1)]
            else:
                ops += [(self.op_expunge_free, 4)]
            if hangups:
                ops += [(self.op_drop, 4)]
            funcs = [f for f, w in ops for _ in range(w)]
            while not stop.is_set():
                self.rnd.choice(funcs)()
                self.check_order()
                time.sleep(self.rnd.uniform(0, 0.02))
        except Exception as e:  # noqa: BLE001 -- reach the barrier whatever happened
            self.fail("session", "%s: %s" % (type(e).__name__, e))
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            self.fail("session", "the others did not reach the end")
        try:
            if self.c is not None:
                self.cmd("NOOP")
                self.uid_search()
                self.cmd("UID FETCH 1:* (UID)")
                if any(e.uid is None for e in self.model):
                    self.fail("final", "UIDs still unknown after UID FETCH 1:*")
                self.final_uids = [e.uid for e in self.model]
        except Exception as e:  # noqa: BLE001
            self.fail("session", "final sync: %s: %s" % (type(e).__name__, e))
        try:
            final_barrier.wait(timeout=30)
            if self.c is not None:
                self.c.command("LOGOUT")
        except Exception:  # noqa: BLE001
            pass
        if self.c is not None:
            self.c.close()

    def cmd_noop(self):
        self.cmd("NOOP")


# ---- main ------------------------------------------------------------------------------------

def fresh_view(port, user, password, box):
    """[(uid, msgid)] of a mailbox through imaplib."""
    m = imaplib.IMAP4("127.0.0.1", port, timeout=60)
    m.login(user, password)
    typ, data = m.select(box)
    if typ != "OK":
        raise RuntimeError("SELECT %s: %r" % (box, data))
    out = []
    if int(data[0]) > 0:
        typ, data = m.uid("FETCH", "1:*", "(UID BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
        if typ != "OK":
            raise RuntimeError("UID FETCH: %r" % data)
        for item in data:
            if isinstance(item, tuple):
                um = re.search(rb"UID (\d+)", item[0])
                mm = MID_RE.search(item[1])
                out.append((int(um.group(1)) if um else -1,
                            mm.group(1).decode() if mm else None))
    m.logout()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--lmtp", type=int, required=True)
    p.add_argument("--user", action="append", required=True, help="ADDR:PASSWORD")
    p.add_argument("--seconds", type=float, default=18)
    p.add_argument("--sessions", type=int, default=26)
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--hangups", action="store_true",
                   help="sessions also hang up abruptly with a command in flight")
    args = p.parse_args()
    users = [tuple(u.split(":", 1)) for u in args.user]
    if len(users) != 3:
        print("need three --user", file=sys.stderr)
        sys.exit(2)
    note("seed %d" % args.seed)
    rnd = random.Random(args.seed)
    random.seed(args.seed)
    world = World([u for u, _ in users])
    pw = dict(users)
    (a, _), (b, _), (c, _) = users
    stats = {"commands": 0, "searches": 0, "copies": 0, "expunges": 0, "appends": 0,
             "idles": 0, "lmtp": 0, "moves": 0, "drops": 0}
    try:
        # Mailboxes (they may exist from an earlier run on the root), then mail in every INBOX.
        for user, box in ((a, "Copies"), (b, "Work"), (b, "Copies"), (c, "Copies")):
            m = imaplib.IMAP4("127.0.0.1", args.imap, timeout=TIMEOUT)
            m.login(user, pw[user])
            m.create(box)
            m.logout()
        # Messages of an earlier run on the same root count as sent (not as acknowledged).
        for user, _ in users:
            for box in ("INBOX", "Work", "Copies"):
                try:
                    for _, mid in fresh_view(args.imap, user, pw[user], box):
                        if mid is not None:
                            world.sent.add(mid)
                except RuntimeError:
                    pass
        conn = imapd_common.Lmtp(args.lmtp, TIMEOUT)
        conn.cmd("LHLO load.test")
        seeded = sum(lmtp_deliver(conn, world, rnd, [u for u, _ in users]) for _ in range(30))
        conn.cmd("QUIT")
        report("seeding: 30 messages to every user over LMTP", seeded == 90, "%d acks" % seeded)

        # Half the sessions on a's INBOX, the others spread over b (INBOX, Work) and c.
        n = args.sessions
        plan = [(a, "INBOX", "Copies", True)] * (n // 2)
        rest = n - n // 2
        plan += [(b, "INBOX", "Work", True)] * (rest * 2 // 5)
        plan += [(b, "Work", "Copies", False)] * (rest // 5)
        plan += [(c, "INBOX", "Copies", True)] * (rest - rest * 2 // 5 - rest // 5)
        sessions = []
        for i, (user, box, target, tracked) in enumerate(plan):
            sessions.append((Session(i, args.imap, user, pw[user], box, world,
                                     random.Random(rnd.getrandbits(32)), stats),
                             target, tracked))
        stop = threading.Event()
        barrier = threading.Barrier(len(sessions))
        final_barrier = threading.Barrier(len(sessions))
        threads = [threading.Thread(target=s.run, daemon=True,
                                    args=(stop, barrier, final_barrier, t, tr, args.hangups))
                   for s, t, tr in sessions]
        lmtp_stop = threading.Event()
        senders = [threading.Thread(target=lmtp_sender, daemon=True,
                                    args=(args.lmtp, world, lmtp_stop, rnd.getrandbits(32), stats))
                   for _ in range(2)]
        note("%d sessions: %s" % (len(sessions), ", ".join(
            "%d on %s %s" % (sum(1 for s, _, _ in sessions if (s.user, s.box) == k), k[0], k[1])
            for k in sorted({(s.user, s.box) for s, _, _ in sessions}))))
        start = time.monotonic()
        for t in threads + senders:
            t.start()
        time.sleep(args.seconds)
        # A loaded machine (a sanitizer build beside other work) may do little in the fixed
        # time: go on until the load did what the checks below ask, within a generous bound.
        extra_deadline = time.monotonic() + 120
        while ((stats["lmtp"] <= 20 or stats["commands"] <= 20 * len(sessions)) and
               time.monotonic() < extra_deadline):
            time.sleep(0.2)
        lmtp_stop.set()
        for t in senders:
            t.join(30)
        stop.set()
        deadline = time.monotonic() + 45
        for t in threads:
            t.join(max(0.1, deadline - time.monotonic()))
        hung = sum(t.is_alive() for t in threads + senders)
        elapsed = time.monotonic() - start
        note("%.1f s: %d IMAP commands (%d UID SEARCH checks, %d IDLEs), %d LMTP deliveries "
             "acknowledged, %d APPENDs, %d messages copied, %d moved, %d tracked expunges, %d "
             "updates pushed during IDLE, %d abrupt hang-ups" % (
                 elapsed, stats["commands"], stats["searches"], stats["idles"], stats["lmtp"],
                 stats["appends"], stats["copies"], stats["moves"], stats["expunges"],
                 sum(s.idle_updates for s, _, _ in sessions), stats["drops"]))
        report("every session and sender finished (none hung)", hung == 0, "%d hung" % hung)
        report("the sessions did work (%d commands)" % stats["commands"],
               stats["commands"] > 20 * len(sessions))
        report("LMTP deliveries during the load (%d)" % stats["lmtp"], stats["lmtp"] > 20)

        categories = [
            ("session", "no session failed (BYE, timeout, closed connection)"),
            ("no-bad", "no command got NO or BAD"),
            ("lmtp", "every LMTP delivery got 250"),
            ("exists", "EXISTS never below the view's message count"),
            ("seq", "EXPUNGE, FETCH and SEARCH numbers inside the view"),
            ("seq-uid", "FETCH UIDs agree with the view's sequence numbers"),
            ("order", "the view's UIDs strictly increase"),
            ("search", "UID SEARCH ALL agrees with the view"),
            ("uid-msgid", "a UID always holds the same message"),
            ("two-uids", "no message seen with two UIDs in INBOX"),
            ("flags", "each session's keyword is exactly where it put it"),
            ("expunge", "an expunged message leaves the view at once"),
            ("copy", "COPYUID is well formed"),
            ("protocol", "no unexpected untagged response"),
            ("final", "the final views are complete"),
        ]
        for cat, title in categories:
            count = world.problem_count.get(cat, 0)
            report(title, count == 0, "%d times, e.g. %s" % (count, world.problems.get(cat)))
        for cat in world.problems:
            if cat not in dict(categories):
                report("problem %s" % cat, False, str(world.problems[cat]))

        # Every view of a mailbox ends the same, and as a fresh session sees it.
        fresh = {}
        for user, box in sorted({(s.user, s.box) for s, _, _ in sessions}):
            try:
                fresh[(user, box)] = fresh_view(args.imap, user, pw[user], box)
            except Exception as e:  # noqa: BLE001
                report("fresh view of %s %s" % (user, box), False, "%s: %s" % (type(e).__name__, e))
        differ = []
        for s, _, _ in sessions:
            f = fresh.get((s.user, s.box))
            if f is not None and s.final_uids != [u for u, _ in f]:
                differ.append("%s: %d UIDs vs %d fresh" % (s.name,
                              len(s.final_uids or []), len(f)))
        report("every session's final view equals a fresh session's", not differ, str(differ[:4]))

        # Nothing lost, nothing twice.
        for user, _ in users:
            try:
                inbox = fresh.get((user, "INBOX")) or fresh_view(args.imap, user, pw[user], "INBOX")
            except Exception as e:  # noqa: BLE001
                report("fetch %s INBOX" % user, False, "%s: %s" % (type(e).__name__, e))
                continue
            counts = {}
            strangers = 0
            for _, mid in inbox:
                if mid is None or mid not in world.sent:
                    strangers += 1
                else:
                    counts[mid] = counts.get(mid, 0) + 1
            with world.lock:
                acked = set(world.acked[user])
                intent = set(world.expunge_intent[user])
                gone = set(world.expunge_acked[user])
            lost = sorted(m for m in acked - intent if counts.get(m, 0) != 1)
            twice = sorted(m for m, k in counts.items() if k > 1)
            back = sorted(m for m in gone if counts.get(m, 0) != 0)
            report("%s: every acknowledged message in INBOX exactly once (%d acknowledged, "
                   "%d expunged by the test)" % (user, len(acked), len(gone & acked)),
                   not lost, "%d missing, e.g. %s" % (len(lost), lost[:5]))
            report("%s: no message twice in INBOX" % user, not twice, str(twice[:5]))
            report("%s: messages the test expunged stay expunged" % user, not back, str(back[:5]))
            report("%s: nothing in INBOX the test did not send" % user, strangers == 0,
                   "%d strangers" % strangers)

        # The COPYUID targets hold the copied messages (Copies is never expunged).
        wrong, missing, checked = [], [], 0
        for (user, box), cp in world.copies.items():
            try:
                view = dict(fresh.get((user, box)) or fresh_view(args.imap, user, pw[user], box))
            except Exception as e:  # noqa: BLE001
                report("fetch %s %s" % (user, box), False, "%s: %s" % (type(e).__name__, e))
                continue
            for d, (_, src_box, s) in cp.items():
                mid = world.mid_of(user, src_box, s)
                if d not in view:
                    if box == "Copies":
                        missing.append((user, box, d))
                    continue
                if mid is not None:
                    checked += 1
                    if view[d] != mid:
                        wrong.append((user, box, d, view[d], mid))
        report("every COPYUID target holds the copied message (%d checked)" % checked,
               not wrong and not missing, "wrong %s, missing %s" % (wrong[:4], missing[:4]))
    except Exception as e:  # noqa: BLE001 -- any failure is a failed check
        report("the concurrency test ran to its end", False, "%s: %s" % (type(e).__name__, e))
    finally:
        results.summary()


if __name__ == "__main__":
    main()
