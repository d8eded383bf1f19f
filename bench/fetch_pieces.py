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

A second table times a client's message list over the whole mailbox and its last 200
messages: the header fields Thunderbird asks for, ENVELOPE, the whole header (FETCHes that
read only headers: imap_fetch_headers.c).

USAGE
  bench/fetch_pieces.py --server NAME=HOST:PORT [--server ...] --user U --password-file F
                        [--rounds R] [--range A:B] [--messages N]
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


# A client's message list: Thunderbird's header fields (its first download of a folder's
# headers, then chunks of 200), ENVELOPE, the whole header.
TB_FIELDS = ("From To Cc Bcc Subject Date Message-ID Priority X-Priority References Newsgroups "
             "In-Reply-To Content-Type Reply-To")
LISTING = ["UID FETCH 1:* (UID RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS (%s)])" % TB_FIELDS,
           "UID FETCH 1:* (ENVELOPE)", "UID FETCH 1:* (BODY.PEEK[HEADER])",
           "FETCH {last200} (UID RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS (%s)] ENVELOPE)"
           % TB_FIELDS]


def responses(lines):
    return sum(1 for line in lines if line.startswith(b"* ") and b" FETCH " in line)


def digest(name, lines):
    """What is compared of an answer: its bytes but the tagged line's, or for Dovecot how
    many FETCH responses it has (Dovecot serves Maildir's LF files with CR LF)."""
    if name == "dovecot":
        return "%d" % responses(lines)
    return hashlib.sha256(b"".join(lines[:-1])).hexdigest()


def measure(servers, command, rounds):
    """Median ms per server (None: an answer was not OK) and whether the answers agree: the
    mailvaultd servers' bytes, Dovecot's count of FETCH responses."""
    names = [n for n, _ in servers]
    times = {n: [] for n in names}
    answers = {n: set() for n in names}
    count = set()
    for r in range(rounds):
        for name, conn in servers[r % len(servers):] + servers[:r % len(servers)]:
            seconds, lines, tagged = conn.command(command)
            ok = tagged.split(b" ", 2)[1] == b"OK"
            times[name].append(seconds if ok else None)
            answers[name].add(digest(name, lines) if ok else "NO")
            if name != "dovecot":
                count.add("%d" % responses(lines))
    ref = answers[names[0]]
    same = len(ref) == 1 and "NO" not in ref and len(count) == 1 and all(
        answers[n] == (count if n == "dovecot" else ref) for n in names)
    medians = {n: statistics.median(times[n]) * 1000 if None not in times[n] else None
               for n in names}
    return medians, same


def table(servers, title, rows, rounds):
    """Prints one table of (label, command) rows; how many rows' answers disagreed."""
    names = [n for n, _ in servers]
    print("| %s | " % title + " | ".join("%s ms" % n for n in names) + " | same answers |")
    print("|---|" + "---:|" * len(names) + "---|")
    bad = 0
    for label, command in rows:
        medians, same = measure(servers, command.encode(), rounds)
        bad += not same
        cells = ["%.1f" % medians[n] if medians[n] is not None else "NO" for n in names]
        print("| %s | %s | %s |" % (label, " | ".join(cells), "yes" if same else "NO"))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="append", required=True, help="NAME=HOST:PORT")
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--range", default="1:500")
    ap.add_argument("--messages", type=int, default=10000,
                    help="the mailbox's messages (the message list's last 200)")
    a = ap.parse_args()
    servers = connect_all(a.server, a.user, a.password_file)
    bad = table(servers, "FETCH %s" % a.range,
                [(p, "FETCH %s (%s)" % (a.range, p)) for p in PIECES], a.rounds)
    print()
    last200 = "%d:*" % max(1, a.messages - 199)
    bad += table(servers, "message list, %d messages" % a.messages,
                 [(c.replace("{last200}", last200).replace(TB_FIELDS, "Thunderbird's 14"), 
                   c.replace("{last200}", last200)) for c in LISTING], a.rounds)
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    main()
