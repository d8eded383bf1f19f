#!/usr/bin/env python3
"""imapd_bigmail.py -- bulk commands on a mailbox with more UID gaps than a text UID set may
have ranges (issue 12 item 12, issue 13): "mark all as read" (STORE 1:* +FLAGS.SILENT
(\\Seen)), UID STORE 1:*, COPY 1:* and MOVE 1:* on INBOX, which tests/cli_imapd_bigmail.sh
filled with 22,000 messages whose UIDs have 11,000 gaps (every third UID from 2 expunged). The
server resolves the client's set against its view and hands the store typed UID ranges;
before, it printed them back as text that the store refused past 10,000 ranges
(NO [LIMIT]). Correctness only, no timing. Run by tests/cli_imapd_bigmail.sh.

USAGE
  imapd_bigmail.py --imap PORT --user ADDR:PASSWORD --messages N --gaps G

WHAT IT CHECKS
  - SELECT sees N messages; UID SEARCH ALL gives N UIDs with G gaps between them;
  - STORE 1:* +FLAGS.SILENT (\\Seen): OK, no untagged FETCH (RFC 3501 6.4.6 .SILENT), then
    SEARCH UNSEEN is empty and SEARCH SEEN has N;
  - UID STORE 1:* -FLAGS (\\Seen): OK with one untagged FETCH per message, each without
    \\Seen; SEARCH UNSEEN has N;
  - STORE 1:* +FLAGS (\\Flagged $Label1): every FETCH FLAGS then has both;
  - COPY 1:* Archive: OK [COPYUID v src dst] (RFC 4315) whose source set is exactly the N
    UIDs in order and whose destination set is N consecutive UIDs; STATUS Archive MESSAGES N;
  - MOVE 1:* Trash: the untagged OK [COPYUID ...] (RFC 6851) with N UIDs, N untagged
    EXPUNGEs, tagged OK; INBOX then empty, Trash N, and FETCH in Trash shows the flags kept;
  - sets of any length the line allows (the default line_max, 1 MiB): UID FETCH,
    UID SEARCH UID and NOT UID with 30,000 single UIDs (gaps included, descending), FETCH and
    SEARCH with 22,000 / 11,000 single sequence numbers, UID STORE of 11,000 single UIDs.
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import re

import imapd_common

results = imapd_common.Results()
check = results.report


def ok(tagged):
    return tagged.split(b" ")[1:2] == [b"OK"]


def expand(uidset):
    """The UIDs of a set as written ("1:3,7"), in order."""
    out = []
    for part in uidset.split(b","):
        if b":" in part:
            a, b = (int(x) for x in part.split(b":"))
            step = 1 if b >= a else -1
            out.extend(range(a, b + step, step))
        else:
            out.append(int(part))
    return out


def search(c, what):
    untagged, tagged = c.command(what)
    nums = []
    for text, _ in untagged:
        if text.startswith(b"* SEARCH"):
            nums.extend(int(x) for x in text.split()[2:])
    return ok(tagged), nums


def fetch_lines(untagged):
    return [t for t, _ in untagged if re.match(rb"\* \d+ FETCH ", t)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--messages", type=int, required=True)
    ap.add_argument("--gaps", type=int, required=True)
    a = ap.parse_args()
    n = a.messages
    user, password = a.user.split(":", 1)
    c = imapd_common.imap_login(a.imap, user, password, timeout_s=300)

    untagged, tagged = c.command("SELECT INBOX")
    exists = [t for t, _ in untagged if t.endswith(b" EXISTS")]
    check("SELECT INBOX sees %d messages" % n,
          ok(tagged) and exists == [b"* %d EXISTS" % n], repr(exists))
    good, uids = search(c, "UID SEARCH ALL")
    gaps = sum(1 for i in range(1, len(uids)) if uids[i] != uids[i - 1] + 1)
    check("the UIDs have %d gaps" % a.gaps, good and len(uids) == n and gaps == a.gaps,
          "%d UIDs, %d gaps" % (len(uids), gaps))

    # "Mark all as read".
    untagged, tagged = c.command("STORE 1:* +FLAGS.SILENT (\\Seen)")
    check("STORE 1:* +FLAGS.SILENT (\\Seen) answers OK", ok(tagged), repr(tagged))
    check("... and, silent, no untagged FETCH", fetch_lines(untagged) == [],
          "%d FETCH lines" % len(fetch_lines(untagged)))
    good, unseen = search(c, "SEARCH UNSEEN")
    check("after it SEARCH UNSEEN is empty", good and unseen == [], "%d unseen" % len(unseen))
    good, seen = search(c, "SEARCH SEEN")
    check("after it SEARCH SEEN has all %d" % n, good and len(seen) == n, "%d seen" % len(seen))

    untagged, tagged = c.command("UID STORE 1:* -FLAGS (\\Seen)")
    lines = fetch_lines(untagged)
    check("UID STORE 1:* -FLAGS (\\Seen) answers OK", ok(tagged), repr(tagged))
    check("... with one untagged FETCH per message, none \\Seen",
          len(lines) == n and not any(b"\\Seen" in t for t in lines),
          "%d FETCH lines" % len(lines))
    good, unseen = search(c, "SEARCH UNSEEN")
    check("after it SEARCH UNSEEN has all %d" % n, good and len(unseen) == n,
          "%d unseen" % len(unseen))

    untagged, tagged = c.command("STORE 1:* +FLAGS ($Label1 \\Flagged)")
    check("STORE 1:* +FLAGS ($Label1 \\Flagged) answers OK", ok(tagged), repr(tagged))
    untagged, tagged = c.command("FETCH 1:* (FLAGS)")
    lines = fetch_lines(untagged)
    check("every message has \\Flagged and $Label1",
          ok(tagged) and len(lines) == n
          and all(b"\\Flagged" in t and b"$Label1" in t for t in lines),
          "%d FETCH lines" % len(lines))

    # COPY 1:* with COPYUID.
    _, tagged = c.command("STATUS Archive (MESSAGES)")
    untagged, tagged = c.command("COPY 1:* Archive")
    m = re.search(rb"\[COPYUID \d+ ([0-9:,]+) ([0-9:,]+)\]", tagged)
    check("COPY 1:* Archive answers OK [COPYUID ...]", ok(tagged) and m is not None,
          repr(tagged[:200]))
    if m is not None:
        src, dst = expand(m.group(1)), expand(m.group(2))
        check("COPYUID names every source UID in order", src == uids,
              "%d source UIDs" % len(src))
        check("COPYUID gives %d consecutive new UIDs" % n,
              len(dst) == n and dst == list(range(dst[0], dst[0] + n)),
              "%d new UIDs" % len(dst))
    untagged, tagged = c.command("STATUS Archive (MESSAGES)")
    status = b" ".join(t for t, _ in untagged)
    check("STATUS Archive has %d messages" % n, b"(MESSAGES %d)" % n in status, repr(status))

    # Sets as long as the line allows (issue 13: no command fails for a size a client can
    # legitimately send): single UIDs and sequence numbers, written from the top down, gaps
    # included; the default line_max (1 MiB) takes them.
    top = 30000
    singles = ",".join(str(u) for u in range(top, 0, -1))
    want = [u for u in uids if u <= top]
    untagged, tagged = c.command("UID FETCH %s (UID FLAGS)" % singles)
    got = sorted(int(m.group(1)) for m in (re.search(rb"UID (\d+)", t)
                                           for t in fetch_lines(untagged)) if m)
    check("UID FETCH of %d single UIDs (gaps included) answers each existing one" % top,
          ok(tagged) and got == want, "%s, %d of %d" % (tagged[:80], len(got), len(want)))
    good, found = search(c, "UID SEARCH UID %s" % singles)
    check("UID SEARCH UID with %d single UIDs finds the %d there" % (top, len(want)),
          good and found == want, "%d found" % len(found))
    good, found = search(c, "UID SEARCH NOT UID %s" % singles)
    check("... and NOT UID the others", good and found == [u for u in uids if u > top],
          "%d found" % len(found))
    seqs = ",".join(str(i) for i in range(n, 0, -1))
    untagged, tagged = c.command("FETCH %s (UID)" % seqs)
    check("FETCH of %d single sequence numbers answers all" % n,
          ok(tagged) and len(fetch_lines(untagged)) == n, repr(tagged[:80]))
    good, found = search(c, "SEARCH %s" % ",".join(str(i) for i in range(n, 0, -2)))
    check("SEARCH with %d single sequence numbers" % (n // 2),
          good and found == list(range(2 if n % 2 == 0 else 1, n + 1, 2)), "%d found" % len(found))
    marked = uids[::2]
    untagged, tagged = c.command("UID STORE %s +FLAGS.SILENT (\\Deleted)"
                                 % ",".join(str(u) for u in marked))
    check("UID STORE of %d single UIDs answers OK" % len(marked), ok(tagged), repr(tagged[:200]))
    good, deleted = search(c, "UID SEARCH DELETED")
    check("... and flags exactly them", good and deleted == marked, "%d deleted" % len(deleted))
    untagged, tagged = c.command("STORE 1:* -FLAGS.SILENT (\\Deleted)")
    good, deleted = search(c, "SEARCH DELETED")
    check("... which STORE 1:* -FLAGS takes back", ok(tagged) and good and deleted == [],
          "%d deleted" % len(deleted))

    # MOVE 1:*.
    untagged, tagged = c.command("MOVE 1:* Trash")
    texts = [t for t, _ in untagged]
    copyuid = [t for t in texts if t.startswith(b"* OK [COPYUID ")]
    expunges = [t for t in texts if t.endswith(b" EXPUNGE")]
    check("MOVE 1:* Trash answers OK", ok(tagged), repr(tagged))
    m = re.search(rb"\[COPYUID \d+ ([0-9:,]+) ([0-9:,]+)\]", copyuid[0]) if copyuid else None
    check("... with an untagged OK [COPYUID] of %d UIDs" % n,
          m is not None and expand(m.group(1)) == uids and len(expand(m.group(2))) == n,
          repr(copyuid[:1])[:200])
    check("... and %d untagged EXPUNGEs" % n, len(expunges) == n, "%d" % len(expunges))
    good, left = search(c, "SEARCH ALL")
    check("INBOX is empty after the MOVE", good and left == [], "%d left" % len(left))
    untagged, tagged = c.command("SELECT Trash")
    exists = [t for t, _ in untagged if t.endswith(b" EXISTS")]
    check("Trash has the %d messages" % n, ok(tagged) and exists == [b"* %d EXISTS" % n],
          repr(exists))
    untagged, tagged = c.command("FETCH 1:* (FLAGS)")
    lines = fetch_lines(untagged)
    check("the moved messages kept their flags",
          ok(tagged) and len(lines) == n and all(b"\\Flagged" in t for t in lines),
          "%d FETCH lines" % len(lines))
    c.command("LOGOUT")
    results.summary()


if __name__ == "__main__":
    results.run(main)
