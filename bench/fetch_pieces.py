#!/usr/bin/env python3
"""fetch_pieces.py -- FETCH of pieces of messages, the servers alternating (issue 13).

What a client's message list and reading pane ask for beyond the header fields: a preview
of the text (BODY.PEEK[TEXT]<0.512>, BODY.PEEK[1]<0.256>), the first bytes of the message, a
part's MIME header, the text part, over a range of the mailbox where some messages carry
attachments the store keeps apart. Each command is sent R times to each server in rotating
order; the median time from sending it to its tagged answer is printed, with whether the
mailvaultd servers (every one but "dovecot") answered the same bytes, and Dovecot as many
FETCH responses: Dovecot serves Maildir's LF files with CR LF, mailvaultd the bytes as
imported, so the same piece of a message is other bytes there.

USAGE
  bench/fetch_pieces.py --server NAME=HOST:PORT [--server ...] --user U --password-file F
                        [--rounds R] [--range A:B]
  (bench/commands_compare.sh starts the servers over the bench corpus and runs this.)
Python 3 standard library only; the connection is bench/search_keys.py's.
"""
import argparse
import hashlib
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from search_keys import connect_all  # noqa: E402  (the same client, one copy)

PIECES = ["BODY.PEEK[TEXT]<0.512>", "BODY.PEEK[1]<0.256>", "BODY.PEEK[]<0.2048>",
          "BODY.PEEK[1.MIME]", "BODY.PEEK[2.MIME]", "BODY.PEEK[1]"]


def digest(name, lines):
    """What is compared of an answer: its bytes but the tagged line's, or for Dovecot how
    many FETCH responses it has."""
    if name == "dovecot":
        return "%d" % sum(1 for line in lines if line.startswith(b"* ") and b" FETCH " in line)
    return hashlib.sha256(b"".join(lines[:-1])).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="append", required=True, help="NAME=HOST:PORT")
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--range", default="1:500")
    a = ap.parse_args()
    servers = connect_all(a.server, a.user, a.password_file)
    names = [n for n, _ in servers]
    print("| FETCH %s | " % a.range + " | ".join("%s ms" % n for n in names) +
          " | same answers |")
    print("|---|" + "---:|" * len(names) + "---|")
    bad = 0
    for piece in PIECES:
        command = b"FETCH %s (%s)" % (a.range.encode(), piece.encode())
        times = {n: [] for n in names}
        answers = {n: set() for n in names}
        for r in range(a.rounds):
            for name, conn in servers[r % len(servers):] + servers[:r % len(servers)]:
                seconds, lines, tagged = conn.command(command)
                ok = tagged.split(b" ", 2)[1] == b"OK"
                times[name].append(seconds if ok else None)
                answers[name].add(digest(name, lines) if ok else "NO")
        ref = answers[names[0]]
        count = {"%d" % (int(a.range.split(":")[1]) - int(a.range.split(":")[0]) + 1)}
        same = len(ref) == 1 and "NO" not in ref and all(
            answers[n] == (count if n == "dovecot" else ref) for n in names)
        bad += not same
        cells = ["%.1f" % (statistics.median(times[n]) * 1000) if None not in times[n] else "NO"
                 for n in names]
        print("| %s | %s | %s |" % (piece, " | ".join(cells), "yes" if same else "NO"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
