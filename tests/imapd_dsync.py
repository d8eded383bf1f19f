"""imapd_dsync.py -- the IMAP side of tests/cli_dsync_migrate.sh: fills a mailvaultd account
with mail that a migration must carry (folders, flags, keywords, a headerless message, a
folded multipart, 8-bit text), and dumps an account as JSON (per mailbox: each message's
flags and SHA-256, plus UIDVALIDITY and UIDs) so two accounts can be compared.

USAGE
  python3 tests/imapd_dsync.py --imap PORT --user ADDR:PASSWORD populate
  python3 tests/imapd_dsync.py --imap PORT --user ADDR:PASSWORD dump > FILE.json
"""
import argparse
import hashlib
import json
import re
import sys

import imapd_common

TIMEOUT = 60

MESSAGES = {
    "INBOX": [
        (b"(\\Seen)", b"From: a@example.org\r\nTo: carol@example.org\r\nSubject: one\r\n"
         b"Date: Sun, 25 Mar 2007 00:00:00 +0200\r\nMessage-ID: <one@example.org>\r\n\r\n"
         b"first message\r\n"),
        (b"(\\Flagged $Label1 Work)", b"From: b@example.org\r\nSubject: two\r\n"
         b"Message-ID: <two@example.org>\r\n\r\nsecond\r\n"),
        (b"()", b"\r\nthis message has an empty header block\r\n\r\nand a second paragraph\r\n"),
    ],
    "Projects": [
        (b"(\\Answered \\Seen)", b"From: c@example.org\r\nSubject: =?utf-8?q?caf=C3=A9?=\r\n"
         b"Content-Type: multipart/mixed; boundary=\"foo\r\n bar\"\r\n\r\n"
         b"--foo bar\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nbonjour \xc3\xa0 tous\r\n"
         b"--foo bar--\r\n"),
    ],
    "Projects/2026": [
        (b"($Forwarded)", b"From: d@example.org\r\nSubject: nested folder\r\n\r\nbody\r\n"),
        (b"(\\Draft)", b"From: e@example.org\r\nSubject: draft\r\n\r\nunfinished\r\n"),
    ],
}


def login(args):
    user, password = args.user.split(":", 1)
    return imapd_common.imap_login(args.imap, user, password, TIMEOUT)


def populate(args):
    c = login(args)
    for box, msgs in MESSAGES.items():
        if box != "INBOX":
            c.command('CREATE "%s"' % box)
        for flags, msg in msgs:
            _, tagged = c.command(b'APPEND "' + box.encode() + b'" ' + flags +
                                  b' "01-Feb-2020 10:00:00 +0000"', msg)
            if b" OK" not in tagged:
                print("APPEND to %s failed: %r" % (box, tagged), file=sys.stderr)
                return 1
    c.command("LOGOUT")
    return 0


def dump(args):
    c = login(args)
    untagged, _ = c.command('LIST "" "*"')
    boxes = {}
    for text, lits in untagged:
        m = re.match(rb'\* LIST \(([^)]*)\) (?:"[^"]*"|NIL) (.*)$', text)
        if not m or b"\\Noselect" in m.group(1) or b"\\NonExistent" in m.group(1):
            continue
        name = lits[0] if lits else m.group(2).strip(b'"')
        boxes[name.decode()] = None
    out = {}
    for box in sorted(boxes):
        untagged, tagged = c.command('SELECT "%s"' % box)
        uv = [int(x) for t, _ in untagged for x in re.findall(rb"UIDVALIDITY (\d+)", t)]
        untagged, tagged = c.command("UID FETCH 1:* (FLAGS INTERNALDATE BODY.PEEK[])")
        msgs = []
        for text, lits in untagged:
            if b" FETCH " not in text or not lits:
                continue
            flags = re.search(rb"FLAGS \(([^)]*)\)", text)
            uid = re.search(rb"UID (\d+)", text)
            date = re.search(rb'INTERNALDATE "([^"]*)"', text)
            msgs.append({
                "uid": int(uid.group(1)) if uid else 0,
                "flags": sorted(f for f in (flags.group(1).decode().split() if flags else [])
                                if f != "\\Recent"),
                "internaldate": date.group(1).decode() if date else "",
                "sha256": hashlib.sha256(lits[-1]).hexdigest(),
                "size": len(lits[-1]),
            })
        out[box] = {"uidvalidity": uv[0] if uv else 0, "messages": msgs}
    c.command("LOGOUT")
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--user", required=True)
    p.add_argument("action", choices=["populate", "dump"])
    args = p.parse_args()
    return populate(args) if args.action == "populate" else dump(args)


if __name__ == "__main__":
    sys.exit(main())
