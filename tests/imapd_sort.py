#!/usr/bin/env python3
"""imapd_sort.py -- SORT and UID SORT (RFC 5256) with SORT=DISPLAY (RFC 5957). Run by
tests/cli_imapd_sort.sh, which makes the user, starts mailvaultd and, as root, a private
Dovecot for the same messages.

USAGE
  imapd_sort.py --imap PORT --user ADDR:PASSWORD [--dovecot PORT --dovecot-user ADDR:PASSWORD]
               [--mailbox NAME]  (made by the test: "SortBox")

WHAT IT CHECKS
  - SORT and SORT=DISPLAY are advertised;
  - 64 messages of a fixed pool (subjects with Re:, Fwd:, [blob]s, "(fwd)" trailers and
    "[fwd: ...]" wrappers, addresses with and without names, quoted names, groups, missing
    fields, Date headers in several zones, equal in UTC, missing or unreadable, equal sizes
    and internal dates) are APPENDed to each server in one order;
  - every criterion alone, with REVERSE, and combinations answer as this file's own
    reading of RFC 5256 (base subject, addr-mailbox, the Date in UTC else the internal date,
    ties in the mailbox's order), and as Dovecot does for the same messages;
  - UID SORT names the same messages as SORT; a search program narrows the answer to its
    matches (SORT ... SUBJECT / FROM / OR / NOT / UID sets);
  - "(MODSEQ n)" after a MODSEQ key; an empty answer is "* SORT";
  - the same after 16 more messages, after 5 are expunged, in another mailbox sorted in
    between, and from a second session (the keys the server keeps for the next SORT);
  - BAD for an empty list, an unknown criterion, REVERSE last or twice, no charset or no
    keys, a CHARSET keyword; NO [BADCHARSET] for an unknown charset; the session goes on.
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import email.utils
import functools
import random
import re

import imapd_common

results = imapd_common.Results()
check = results.report

SUBJECTS = [
    "Re: apple", "apple", "RE: Apple", "Fwd: apple", "[list] Re: apple", "Re: [list] apple",
    "[fwd: apple]", "apple (fwd)", "Re[2]: banana", "banana", "Fw: banana", "FWD:banana",
    "[PATCH 1/2] cherry", "[PATCH] Re: cherry", "[] cherry", "[only a blob]", "Re:", "",
    "[fwd: Re: [x] date]", "  spaced \t  out  ", "Re: Re: Fwd: re: egg", "egg (FWD) (fwd)",
    "re : fig", "Re [x]: fig", "Refund: fig", "fwd fig", None,
]
FROMS = [
    "Alice <alice@example.org>", "bob@example.org", '"Smith, Carol" <carol@example.org>',
    "Eve <EVE@example.org>", "zed@example.org", "undisclosed-recipients:;",
    "Mallory <mallory@example.net>, alice@example.org", "<anon@example.org>", None,
    "Trent Q <trent@example.com>", '"Walter \\"W\\" White" <walter@example.com>',
]
DATES = [
    "Mon, 01 Jan 2024 10:00:00 +0200", "Mon, 01 Jan 2024 08:00:00 +0000",
    "Sun, 31 Dec 2023 23:30:00 -0900", "Tue, 02 Jan 2024 00:00:00 +1400",
    "Wed, 03 Jan 2024 12:00:00 GMT", "not a date at all", None,
    "Fri, 05 Jan 2024 01:02:03 -0000",
]
INTERNAL = ["01-Jan-2024 09:00:00 +0000", "02-Jan-2024 09:00:00 +0000",
            "01-Jan-2024 09:00:00 +0000", "31-Dec-2023 23:00:00 -0500",
            "03-Jan-2024 00:00:00 +0100"]


def pool(count=64):
    """The messages: (raw bytes, APPEND date-time), drawn from the pools with a fixed seed."""
    r = random.Random(5256)
    out = []
    for i in range(count):
        lines = []
        subject, sender, date = r.choice(SUBJECTS), r.choice(FROMS), r.choice(DATES)
        to, cc = r.choice(FROMS), r.choice(FROMS + [None] * 4)
        if sender is not None:
            lines.append("From: %s" % sender)
        if to is not None:
            lines.append("To: %s" % to)
        if cc is not None:
            lines.append("Cc: %s" % cc)
        if subject is not None:
            lines.append("Subject: %s" % subject)
        if date is not None:
            lines.append("Date: %s" % date)
        lines.append("Message-ID: <sort-%d@example.org>" % i)
        body = "x" * r.choice([10, 10, 200, 3000]) + "\r\n"
        raw = ("\r\n".join(lines) + "\r\n\r\n" + body).encode()
        out.append((raw, r.choice(INTERNAL)))
    return out


# ---- RFC 5256 read here, independently of the server ---------------------------------------

BLOB = r"\[[^\[\]]*\] *"
LEADER = re.compile(r"^(?:(?:%s)*(?:re|fwd?) *(?:%s)?:| )" % (BLOB, BLOB), re.I)


def base_subject(s):
    """RFC 5256 2.1 over a decoded subject."""
    s = re.sub(r"[ \t\r\n]+", " ", s)
    while True:
        while True:  # (2)
            t = re.sub(r"(?:\(fwd\)| )$", "", s, flags=re.I)
            if t == s:
                break
            s = t
        while True:  # (3), (4), (5)
            t = s
            while True:
                u = LEADER.sub("", t, count=1)
                if u == t:
                    break
                t = u
            m = re.match(BLOB, t)
            if m and t[m.end():] != "":
                t = t[m.end():]
            if t == s:
                break
            s = t
        if len(s) >= 6 and s[:5].lower() == "[fwd:" and s.endswith("]"):  # (6)
            s = s[5:-1]
            continue
        return s


def first_address(field, display):
    """The first address of a header we wrote (the pools' forms only): its addr-mailbox, or
    for DISPLAY* its display name else mailbox@host; a group gives its name."""
    if field is None:
        return ""
    if re.match(r"^[^\"<]*:;", field):
        return field.split(":")[0]
    name, addr = email.utils.getaddresses([field])[0]
    if display:
        return name if name else addr
    return addr.rsplit("@", 1)[0]


def header(raw, name):
    m = re.search(rb"^" + name.encode() + rb": ?(.*)$", raw, re.M | re.I)
    return m.group(1).decode().rstrip("\r") if m else None


def internal_seconds(text):
    day, mon, rest = text.split("-", 2)  # "31-Dec-2023 23:00:00 -0500"
    return email.utils.mktime_tz(email.utils.parsedate_tz("%s %s %s" % (day, mon, rest)))


def keys_of(raw, idate):
    date = header(raw, "Date")
    parsed = email.utils.parsedate_tz(date) if date else None
    sent = email.utils.mktime_tz(parsed) if parsed else internal_seconds(idate)
    return {
        "ARRIVAL": internal_seconds(idate),
        "DATE": sent,
        "SIZE": len(raw),
        "SUBJECT": base_subject(header(raw, "Subject") or "").upper(),
        "FROM": first_address(header(raw, "From"), False).upper(),
        "TO": first_address(header(raw, "To"), False).upper(),
        "CC": first_address(header(raw, "Cc"), False).upper(),
        "DISPLAYFROM": first_address(header(raw, "From"), True).upper(),
        "DISPLAYTO": first_address(header(raw, "To"), True).upper(),
    }


def expected(msgs, criteria, seqs=None):
    """Sequence numbers (1-based) in the order RFC 5256 gives; seqs limits them."""
    keys = [keys_of(raw, idate) for raw, idate in msgs]
    crit, rev = [], False
    for word in criteria.split():
        if word == "REVERSE":
            rev = True
            continue
        crit.append((word, rev))
        rev = False
    chosen = list(range(1, len(msgs) + 1)) if seqs is None else sorted(seqs)

    def order(a, b):
        for word, reverse in crit:
            x, y = keys[a - 1][word], keys[b - 1][word]
            if isinstance(x, str):
                x, y = x.encode(), y.encode()
            if x != y:
                r = -1 if x < y else 1
                return -r if reverse else r
        return -1 if a < b else (1 if a > b else 0)

    return sorted(chosen, key=functools.cmp_to_key(order))


# ---- the servers ---------------------------------------------------------------------------

def numbers(untagged, word=b"SORT"):
    for text, _ in untagged:
        if text.startswith(b"* " + word):
            rest = text[len(word) + 2:].strip()
            modseq = re.search(rb"\(MODSEQ (\d+)\)", rest)
            nums = [int(n) for n in re.sub(rb"\(MODSEQ \d+\)", b"", rest).split()]
            return nums, (int(modseq.group(1)) if modseq else None)
    return None, None


def append(c, mailbox, msgs):
    for raw, idate in msgs:
        _, tagged = c.command('APPEND %s "%s"' % (mailbox, idate), raw, plus=True)
        if b" OK" not in tagged:
            raise RuntimeError("APPEND refused: %r" % tagged)


def fill(port, user, password, mailbox, msgs):
    c = imapd_common.imap_login(port, user, password)
    c.command("CREATE " + mailbox)
    append(c, mailbox, msgs)
    c.command("SELECT " + mailbox)
    return c


CRITERIA = ["ARRIVAL", "DATE", "SIZE", "SUBJECT", "FROM", "TO", "CC", "DISPLAYFROM",
            "DISPLAYTO", "REVERSE DATE", "REVERSE SUBJECT", "SUBJECT DATE",
            "REVERSE SUBJECT REVERSE DATE", "FROM REVERSE SIZE", "CC TO SUBJECT ARRIVAL",
            "REVERSE ARRIVAL", "SIZE REVERSE DISPLAYFROM"]


def test_sort(args, msgs):
    user, password = args.user.split(":", 1)
    c = fill(args.imap, user, password, args.mailbox, msgs)
    caps, _ = c.command("CAPABILITY")
    words = caps[0][0].split() if caps else []
    check("SORT and SORT=DISPLAY are advertised", b"SORT" in words and b"SORT=DISPLAY" in words)
    d = None
    if args.dovecot:
        duser, dpassword = args.dovecot_user.split(":", 1)
        d = fill(args.dovecot, duser, dpassword, args.mailbox, msgs)
    for crit in CRITERIA:
        want = expected(msgs, crit)
        got, _ = numbers(c.command("SORT (%s) UTF-8 ALL" % crit)[0])
        check("SORT (%s) answers as RFC 5256 reads" % crit, got == want,
              "got %s, want %s" % (got, want))
        if d is not None:
            theirs, _ = numbers(d.command("SORT (%s) UTF-8 ALL" % crit)[0])
            check("SORT (%s) answers as Dovecot does" % crit, got == theirs,
                  "mailvaultd %s, Dovecot %s" % (got, theirs))
    fetched, _ = c.command("FETCH 1:* (UID)")
    uid_of = {}
    for text, _ in fetched:
        m = re.match(rb"\* (\d+) FETCH \(UID (\d+)\)", text)
        if m:
            uid_of[int(m.group(1))] = int(m.group(2))
    for crit in ["SUBJECT DATE", "REVERSE FROM"]:
        seq, _ = numbers(c.command("SORT (%s) UTF-8 ALL" % crit)[0])
        uids, _ = numbers(c.command("UID SORT (%s) UTF-8 ALL" % crit)[0])
        check("UID SORT (%s) names SORT's messages by UID" % crit,
              seq is not None and uids == [uid_of[s] for s in seq])
    # a program narrows the answer to its matches
    subset = {}
    for program in ["SUBJECT apple", "FROM alice", "OR FROM bob SUBJECT banana",
                    "NOT SUBJECT apple", "2:20", "UID 3:9,40:*", "LARGER 1000"]:
        matches, _ = numbers(c.command("SEARCH " + program)[0], b"SEARCH")
        subset[program] = matches
        got, _ = numbers(c.command("SORT (REVERSE SUBJECT DATE) US-ASCII " + program)[0])
        want = expected(msgs, "REVERSE SUBJECT DATE", matches or [])
        check("SORT ... %s sorts SEARCH's matches" % program, got == want and matches,
              "got %s, want %s" % (got, want))
    got, _ = numbers(c.command("SORT (DATE) UTF-8 SUBJECT no-such-subject")[0])
    check("no match: an empty \"* SORT\"", got == [])
    got, modseq = numbers(c.command("SORT (ARRIVAL) UTF-8 MODSEQ 1")[0])
    check("a MODSEQ key adds (MODSEQ n)", got == expected(msgs, "ARRIVAL") and modseq is not None
          and modseq > 0, "got %s %s" % (got, modseq))
    for bad in ["SORT () UTF-8 ALL", "SORT (NAME) UTF-8 ALL", "SORT (DATE REVERSE) UTF-8 ALL",
                "SORT (REVERSE REVERSE DATE) UTF-8 ALL", "SORT (DATE) UTF-8",
                "SORT (DATE)", "SORT DATE UTF-8 ALL", "SORT (DATE) UTF-8 CHARSET UTF-8 ALL",
                "SORT (DATE) UTF-8 NOSUCHKEY"]:
        _, tagged = c.command(bad)
        check("BAD for %s" % bad, b" BAD " in tagged, tagged.decode())
    _, tagged = c.command("SORT (DATE) KOI8-R ALL")
    check("NO [BADCHARSET] for an unknown charset", b" NO [BADCHARSET" in tagged,
          tagged.decode())
    _, tagged = c.command("NOOP")
    check("the session goes on after them", b" OK" in tagged)
    test_changes(args, c, d, msgs)


def agree(c, d, msgs, crits, when):
    """Each criterion's SORT against the RFC's reading of msgs (the mailbox now) and
    against Dovecot's."""
    for crit in crits:
        got, _ = numbers(c.command("SORT (%s) UTF-8 ALL" % crit)[0])
        want = expected(msgs, crit)
        check("%s: SORT (%s) answers as RFC 5256 reads" % (when, crit), got == want,
              "got %s, want %s" % (got, want))
        # Dovecot 2.3 keeps sort ids in its index; messages that come after its first SORT
        # get ids of their own even for an equal key, so with a second criterion it may
        # order them by that id instead (seen: two messages without To, DISPLAYTO SIZE).
        if d is not None and len(crit.replace("REVERSE ", "").split()) == 1:
            theirs, _ = numbers(d.command("SORT (%s) UTF-8 ALL" % crit)[0])
            check("%s: SORT (%s) answers as Dovecot does" % (when, crit), got == theirs)


def changed(msgs):
    """The mailbox test_changes leaves: 16 more from the same draw, 5 expunged."""
    msgs = msgs + pool(80)[64:]
    return [m for i, m in enumerate(msgs, 1) if i not in GONE]


GONE = {3, 10, 11, 40, 70}  # sequence numbers, expunged on both servers
CHANGE_CRITERIA = ["SUBJECT", "REVERSE DATE", "FROM", "DISPLAYTO", "DISPLAYTO SIZE", "CC"]


def sort_keys_read(port):
    """mailvaultd_sort_keys_read_total by where from (saved, store): two scrapes (the test
    sends nothing between them); None where the server has no such sample."""
    return tuple(imapd_common.metric(port, 'mailvaultd_sort_keys_read_total{from="%s"}' % w)
                 for w in ("saved", "store"))


def test_saved(args, msgs):
    """After a restart: the keys the store kept at its close (a mailbox memo: the criteria
    test_changes sorted by) are read back, none from the messages, the same answers; a
    criterion not saved reads the messages' fields once; a message come since is read alone
    and ranked among the others."""
    msgs = changed(msgs)
    late = pool(81)[80:]
    if args.damaged:
        msgs = msgs + late  # the run before added it
    user, password = args.user.split(":", 1)
    c = imapd_common.imap_login(args.imap, user, password)
    c.command("SELECT " + args.mailbox)
    saved0, store0 = sort_keys_read(args.metrics)
    for crit in CHANGE_CRITERIA:
        got, _ = numbers(c.command("SORT (%s) UTF-8 ALL" % crit)[0])
        want = expected(msgs, crit)
        check("after a restart: SORT (%s) answers as RFC 5256 reads" % crit, got == want,
              "got %s, want %s" % (got, want))
    saved1, store1 = sort_keys_read(args.metrics)
    if args.damaged:
        # each kept criterion's first SORT reads every message's fields once
        kept = {w for crit in CHANGE_CRITERIA for w in crit.split()
                if w not in ("REVERSE", "SIZE", "ARRIVAL")}
        check("a saved copy that does not decode is passed over, every message's keys read",
              saved1 == saved0 and store1 - store0 == len(kept) * len(msgs),
              "saved %d, store %d" % (saved1 - saved0, store1 - store0))
        c.command("LOGOUT")
        return
    check("after a restart: the keys from the saved copy, none from the messages",
          saved1 - saved0 >= len(msgs) and store1 == store0,
          "saved %d, store %d" % (saved1 - saved0, store1 - store0))
    got, _ = numbers(c.command("SORT (TO) UTF-8 ALL")[0])
    check("after a restart: SORT (TO), a criterion not saved, as RFC 5256 reads",
          got == expected(msgs, "TO"))
    saved2, store2 = sort_keys_read(args.metrics)
    check("a criterion not saved: the messages' fields read once", saved2 == saved1
          and len(msgs) <= store2 - store1 <= len(msgs) + len(GONE),
          "saved %d, store %d" % (saved2 - saved1, store2 - store1))
    append(c, args.mailbox, late)
    c.command("NOOP")
    msgs = msgs + late
    for crit in CHANGE_CRITERIA + ["TO"]:
        got, _ = numbers(c.command("SORT (%s) UTF-8 ALL" % crit)[0])
        check("a message come since: SORT (%s) as RFC 5256 reads" % crit,
              got == expected(msgs, crit), "got %s" % got)
    saved3, store3 = sort_keys_read(args.metrics)
    check("a message come since is read alone", saved3 == saved2 and store3 - store2 == 1,
          "saved %d, store %d" % (saved3 - saved2, store3 - store2))
    got, _ = numbers(c.command("SORT (DISPLAYFROM SUBJECT) UTF-8 ALL")[0])
    check("then another criterion not saved, as RFC 5256 reads",
          got == expected(msgs, "DISPLAYFROM SUBJECT"))
    c.command("LOGOUT")


def test_changes(args, c, d, msgs):
    """The keys a store keeps for the next SORT (imap_sort_kept.c) follow the mailbox: new
    messages, expunged ones, another mailbox sorted in between, another session."""
    crits = CHANGE_CRITERIA
    more = pool(80)[64:]  # 16 more from the same draw (changed())
    for conn in [c] + ([d] if d is not None else []):
        append(conn, args.mailbox, more)
        conn.command("NOOP")
    msgs = msgs + more
    agree(c, d, msgs, crits, "16 messages later")
    gone = GONE
    for conn in [c] + ([d] if d is not None else []):
        conn.command("STORE %s +FLAGS.SILENT (\\Deleted)" % ",".join(str(n) for n in gone))
        conn.command("EXPUNGE")
    msgs = [m for i, m in enumerate(msgs, 1) if i not in gone]
    agree(c, d, msgs, crits, "5 expunged")
    other = args.mailbox + "Other"
    for conn in [c] + ([d] if d is not None else []):
        conn.command("CREATE " + other)
        append(conn, other, msgs[:5])
        conn.command("SELECT " + other)
    agree(c, d, msgs[:5], crits, "another mailbox")
    for conn in [c] + ([d] if d is not None else []):
        conn.command("SELECT " + args.mailbox)
    user, password = args.user.split(":", 1)
    second = imapd_common.imap_login(args.imap, user, password)
    second.command("SELECT " + args.mailbox)
    agree(second, d, msgs, crits, "a second session, back to the first mailbox")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--dovecot", type=int)
    ap.add_argument("--dovecot-user")
    ap.add_argument("--mailbox", default="SortBox")
    ap.add_argument("--saved", action="store_true",
                    help="a run after a restart (test_saved); needs --metrics")
    ap.add_argument("--damaged", action="store_true",
                    help="with --saved: the saved copy damaged (passed over)")
    ap.add_argument("--metrics", type=int)
    args = ap.parse_args()
    msgs = pool()
    check("the pool repeats itself (a fixed seed)", pool() == msgs)
    if args.saved:
        test_saved(args, msgs)
    else:
        test_sort(args, msgs)
    results.summary()


if __name__ == "__main__":
    results.run(main)
