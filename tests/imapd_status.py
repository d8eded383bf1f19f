#!/usr/bin/env python3
"""imapd_status.py -- mailvaultd's STATUS items DELETED (RFC 9051: messages with \\Deleted)
and DELETED-STORAGE (RFC 9208: the KiB an EXPUNGE would give back), which RFC 9208 requires
of a server advertising QUOTA=RES-MESSAGE and QUOTA=RES-STORAGE, in STATUS and in LIST-STATUS
(LIST ... RETURN (STATUS (...)), RFC 5819). Run by tests/cli_imapd_status.sh, which makes the
users and starts the server.

USAGE
  imapd_status.py --imap PORT --mv PATH --user ADDR:PASSWORD --password-file FILE
                  --user2 ADDR:PASSWORD        (FILE holds the first user's password)
  (MAILVAULT_ROOT and MAILVAULT_KDF_ITER in the environment, as the server's.)

WHAT IT CHECKS
  - QUOTA=RES-STORAGE and QUOTA=RES-MESSAGE are advertised (the reason for the items);
  - an empty mailbox and one with nothing \\Deleted: DELETED 0 DELETED-STORAGE 0;
  - messages of exact sizes (checked with RFC822.SIZE) flagged \\Deleted at APPEND, by STORE
    in a selected session, by UID STORE, and by the mailvault CLI from another process while
    the server holds the store open: DELETED counts them and DELETED-STORAGE is the sum of
    their sizes in KiB rounded up once (three 400-byte messages are 2, not 3; 1024 bytes are
    1, 1025 are 2), seen alike from the session that changed them and from another;
  - -FLAGS \\Deleted takes a message out; COPY of \\Deleted messages counts them in the target
    too; EXPUNGE brings both back to 0 while MESSAGES keeps the rest;
  - the items in any case, mixed with the older ones, each answered once;
  - LIST "" "*" RETURN (STATUS (DELETED DELETED-STORAGE MESSAGES)) gives every mailbox the
    numbers STATUS gives, right after its LIST line; a LIST-STATUS without the new items
    leaves them out;
  - another user of the same server sees none of it;
  - BAD for DELETED-STORAGES, DELETE, a quoted "DELETED" and an unclosed list; NO for a
    mailbox that does not exist.
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import re
import subprocess
import sys

import imapd_common

results = imapd_common.Results()
check = results.report


login = imapd_common.imap_login


def ok(tagged):
    return tagged.split(b" ")[1:2] == [b"OK"]


def kind(tagged):
    return tagged.split(b" ")[1:2][0].decode() if len(tagged.split(b" ")) > 1 else ""


def message(subject, size):
    """A message of exactly size bytes (CRLF lines)."""
    head = ("From: a@example.org\r\nTo: alice@example.org\r\nSubject: %s\r\n"
            "Message-ID: <%s@example.org>\r\n\r\n" % (subject, subject)).encode()
    body = b""
    while len(head) + len(body) + 2 < size:
        n = min(70, size - len(head) - len(body) - 2)
        body += b"x" * (n - 2) + b"\r\n" if n >= 2 else b""
        if n < 2:
            break
    body += b"y" * (size - len(head) - len(body))
    assert len(head) + len(body) == size, (subject, size)
    return head + body


def status_of(untagged):
    """[(name, {item: number}, item order)] of the * STATUS lines, in order."""
    out = []
    for text, _ in untagged:
        m = re.match(rb'\* STATUS ("(?:[^"\\]|\\.)*"|[^ ]+) \(([^)]*)\)$', text)
        if m:
            words = m.group(2).decode().split()
            out.append((m.group(1).strip(b'"').decode(),
                        {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)},
                        words[0::2]))
    return out


def status(c, mailbox, items="DELETED DELETED-STORAGE"):
    """{item: number} of one STATUS, or None if it did not answer OK with one STATUS line."""
    u, t = c.command('STATUS "%s" (%s)' % (mailbox, items))
    st = status_of(u)
    if not ok(t) or len(st) != 1:
        return None
    return st[0][1]


def kib(total):
    return (total + 1023) // 1024


def append(c, mailbox, subject, size, flags="()"):
    raw = message(subject, size)
    _, t = c.command('APPEND "%s" %s' % (mailbox, flags), raw, plus=True)
    if not ok(t):
        raise RuntimeError("APPEND %s: %r" % (subject, t))
    m = re.search(rb"APPENDUID \d+ (\d+)", t)
    return int(m.group(1)) if m else None


def test_capabilities(c):
    u, _ = c.command("CAPABILITY")
    caps = u[0][0].split() if u else []
    for cap in (b"QUOTA=RES-STORAGE", b"QUOTA=RES-MESSAGE", b"LIST-STATUS"):
        check("capability %s" % cap.decode(), cap in caps, repr(caps))


def test_status(c, c2, args, password_file):
    _, t = c.command("CREATE Box")
    check("CREATE Box", ok(t), repr(t))
    check("STATUS of an empty mailbox: DELETED 0 DELETED-STORAGE 0",
          status(c, "Box") == {"DELETED": 0, "DELETED-STORAGE": 0}, repr(status(c, "Box")))

    sizes = {}
    for i, size in enumerate((400, 400, 400, 1024, 1025, 5000, 300)):
        uid = append(c, "Box", "m%d" % i, size)
        sizes[uid] = size
    check("STATUS with nothing \\Deleted: 0 and 0",
          status(c, "Box") == {"DELETED": 0, "DELETED-STORAGE": 0}, repr(status(c, "Box")))
    _, t = c.command("SELECT Box")
    check("SELECT Box", ok(t), repr(t))
    u, t = c.command("UID FETCH 1:* (RFC822.SIZE)")
    got = {int(m.group(1)): int(m.group(2)) for m in
           (re.search(rb"UID (\d+) RFC822\.SIZE (\d+)", x[0]) for x in u) if m}
    check("the messages have the sizes the test counts with", got == sizes,
          "%r vs %r" % (got, sizes))
    uids = sorted(sizes)

    # three 400-byte messages: 1200 bytes, 2 KiB (rounding each would say 3)
    _, t = c.command("UID STORE %d:%d +FLAGS.SILENT (\\Deleted)" % (uids[0], uids[2]))
    want = {"DELETED": 3, "DELETED-STORAGE": kib(1200)}
    check("UID STORE \\Deleted on three 400-byte messages: DELETED 3 DELETED-STORAGE 2 (the sum "
          "rounded up once)", ok(t) and want["DELETED-STORAGE"] == 2 and status(c, "Box") == want,
          repr(status(c, "Box")))
    check("another session of the user sees the same", status(c2, "Box") == want,
          repr(status(c2, "Box")))

    # by sequence number (4: 1024 bytes, 5: 1025 bytes)
    _, t = c.command("STORE 4 +FLAGS (\\Deleted)")
    want = {"DELETED": 4, "DELETED-STORAGE": kib(1200 + 1024)}
    check("STORE 4 (1024 bytes): DELETED 4, storage %d" % want["DELETED-STORAGE"],
          ok(t) and status(c, "Box") == want, repr(status(c, "Box")))
    _, t = c.command("STORE 5 +FLAGS (\\Deleted)")
    want = {"DELETED": 5, "DELETED-STORAGE": kib(1200 + 1024 + 1025)}
    check("STORE 5 (1025 bytes): DELETED 5, storage %d" % want["DELETED-STORAGE"],
          ok(t) and status(c2, "Box") == want, repr(status(c2, "Box")))

    # an APPEND already flagged \Deleted
    uid = append(c, "Box", "appended-deleted", 2048, "(\\Deleted \\Seen)")
    sizes[uid] = 2048
    deleted = {uids[0], uids[1], uids[2], uids[3], uids[4], uid}
    want = {"DELETED": 6, "DELETED-STORAGE": kib(sum(sizes[u] for u in deleted))}
    check("APPEND (\\Deleted) counts at once", status(c, "Box") == want, repr(status(c, "Box")))

    # -FLAGS takes one out (the 1025-byte one)
    _, t = c.command("UID STORE %d -FLAGS.SILENT (\\Deleted)" % uids[4])
    deleted.discard(uids[4])
    want = {"DELETED": 5, "DELETED-STORAGE": kib(sum(sizes[u] for u in deleted))}
    check("-FLAGS \\Deleted takes it out", ok(t) and status(c, "Box") == want,
          repr(status(c, "Box")))

    # another process (the CLI) flags the 5000-byte one while the server holds the store
    r = subprocess.run([args.mv, "flags", args.user_addr, str(uids[5]), "--mailbox", "Box",
                        "--add", "\\Deleted", "--password-file", password_file],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    deleted.add(uids[5])
    want = {"DELETED": 6, "DELETED-STORAGE": kib(sum(sizes[u] for u in deleted))}
    got = status(c2, "Box")
    check("\\Deleted set by the CLI from another process is counted",
          r.returncode == 0 and got == want, "%r %r vs %r" % (r.stderr[-300:], got, want))

    # in any case, with the older items, each once
    u, t = c.command("status Box (messages deleted-storage Unseen Deleted uidnext)")
    st = status_of(u)
    check("the items in any case, with the older ones, each once",
          ok(t) and len(st) == 1 and sorted(st[0][2]) == sorted(
              ["MESSAGES", "DELETED-STORAGE", "UNSEEN", "DELETED", "UIDNEXT"]) and
          st[0][1]["DELETED"] == 6 and st[0][1]["DELETED-STORAGE"] == want["DELETED-STORAGE"] and
          st[0][1]["MESSAGES"] == 8, repr(u))

    # COPY keeps the flags: the target counts its own copies
    _, t = c.command("CREATE Copies")
    _, t = c.command("UID COPY %d:%d Copies" % (uids[0], uids[1]))
    check("COPY of two \\Deleted 400-byte messages: the target counts them (DELETED 2, 1 KiB)",
          ok(t) and status(c2, "Copies") == {"DELETED": 2, "DELETED-STORAGE": 1},
          repr(status(c2, "Copies")))
    check("... and the source is unchanged", status(c2, "Box") == want, repr(status(c2, "Box")))

    # LIST-STATUS: the same numbers for every mailbox, right after its LIST line
    u, t = c.command('LIST "" "*" RETURN (STATUS (DELETED DELETED-STORAGE MESSAGES))')
    st = {name: items for name, items, _ in status_of(u)}
    names = [re.match(rb'\* LIST \([^)]*\) "/" "?([^"]*)"?$', x[0]).group(1).decode()
             for x in u if x[0].startswith(b"* LIST ")]
    same = all(status(c2, n, "DELETED DELETED-STORAGE MESSAGES") == st.get(n) for n in names)
    follows = all(u[i][0].startswith(b"* LIST ") and u[i + 1][0].startswith(b"* STATUS ")
                  for i in range(0, len(u), 2)) and len(u) == 2 * len(names)
    check("LIST-STATUS (DELETED DELETED-STORAGE): every mailbox, the numbers STATUS gives",
          ok(t) and same and st.get("Box", {}).get("DELETED") == 6 and
          st.get("Copies", {}).get("DELETED-STORAGE") == 1 and
          st.get("INBOX") == {"DELETED": 0, "DELETED-STORAGE": 0, "MESSAGES": 0}, repr(st))
    check("LIST-STATUS: each STATUS right after its LIST", follows, repr(u[:6]))
    u, t = c.command('LIST "" "Box" RETURN (STATUS (MESSAGES))')
    st = status_of(u)
    check("LIST-STATUS without the new items leaves them out",
          ok(t) and len(st) == 1 and st[0][2] == ["MESSAGES"], repr(u))

    # EXPUNGE: nothing \Deleted is left; the other messages stay
    _, t = c.command("EXPUNGE")
    got = status(c2, "Box", "DELETED DELETED-STORAGE MESSAGES")
    check("EXPUNGE: DELETED 0 DELETED-STORAGE 0, MESSAGES 2 left",
          ok(t) and got == {"DELETED": 0, "DELETED-STORAGE": 0, "MESSAGES": 2}, repr(got))
    c.command("CLOSE")


def test_other_user(c2other):
    u, t = c2other.command('LIST "" "*" RETURN (STATUS (DELETED DELETED-STORAGE))')
    st = status_of(u)
    check("another user's mailboxes: nothing \\Deleted, no Box",
          ok(t) and st and all(s[1] == {"DELETED": 0, "DELETED-STORAGE": 0} for s in st) and
          "Box" not in [s[0] for s in st], repr(st))


def test_bad(c):
    for bad in ("STATUS Box (DELETED-STORAGES)", "STATUS Box (DELETE)", 'STATUS Box ("DELETED")',
                "STATUS Box (DELETED", 'LIST "" "*" RETURN (STATUS (DELETED-MESSAGES))'):
        _, t = c.command(bad)
        check("BAD: %s" % bad, kind(t) == "BAD", repr(t))
    _, t = c.command("STATUS Nope (DELETED DELETED-STORAGE)")
    check("STATUS of a mailbox that does not exist: NO", kind(t) == "NO", repr(t))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--mv", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password-file", required=True)
    p.add_argument("--user2", required=True)
    args = p.parse_args()
    args.user_addr, password = args.user.split(":", 1)
    user2, password2 = args.user2.split(":", 1)
    try:
        c = login(args.imap, args.user_addr, password)
        c2 = login(args.imap, args.user_addr, password)
        other = login(args.imap, user2, password2)
        test_capabilities(c)
        test_status(c, c2, args, args.password_file)
        test_other_user(other)
        test_bad(c)
        for conn in (c, c2, other):
            conn.command("LOGOUT")
    except Exception as e:  # a dead server or a protocol error: one failure, then the summary
        check("the client ran to the end", False, "%s: %s" % (type(e).__name__, e))
    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
