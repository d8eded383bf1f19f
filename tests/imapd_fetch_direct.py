#!/usr/bin/env python3
"""imapd_fetch_direct.py -- a FETCH job writes its response to the client's socket itself
(imapd/imap_fetch.c "Direct sending", issue 13: UID FETCH of 50 random whole messages): the
bytes must be the same, in the same order, whether the job wrote them, the loop wrote them,
or the job wrote the first part and the loop the rest (the socket filled up). Run by
tests/cli_imapd_fetch_direct.sh against a server with metrics_listen.

USAGE
  imapd_fetch_direct.py --imap PORT --metrics PORT --user ADDR:PASSWORD

WHAT IT CHECKS
  The mailbox gets (APPEND) small text messages (their skeletons stored compressed), plain
  text messages of ~100 KB, messages with a text attachment of ~200 KB (cut out, stored
  compressed) and messages with a base64 attachment of ~300 KB of bytes zstd cannot shrink
  (cut out, stored as they are): ~3.4 MB, more than one chunk of the old code
  (IMAP_FETCH_CHUNK, 256 KiB). The bytes are made from SHA-256 chains (no random byte).
  - UID FETCH 1:* (BODY.PEEK[]) with a client that reads at once: every message byte for
    byte, in order, each once, tagged OK; mailvaultd_fetch_direct_bytes_total moved (the job
    wrote to the socket itself; the old server had no such counter and wrote nothing itself)
    by no more than the response.
  - UID FETCH of one message's UID and FLAGS: the job sends the whole answer itself, the
    tagged line included (the counter moves by exactly its bytes; the old server left it to
    the loop).
  - The same with partial ranges, BODY.PEEK[]<1000.70000> (across the old chunk size and
    across the stored pages and attachment boundaries): each slice exact.
  - A client with a 4 KiB receive buffer (the socket fills at once, so the job stops writing
    and the loop writes the rest): the whole response exact and in order.
  - FETCH (BODY[]) of messages not yet seen (in the writer's lane, \\Seen set): FLAGS with
    \\Seen and the exact bytes.
  - A pipelined NOOP right behind the FETCH: answered after the FETCH's tagged OK, never
    inside it.
  - A client that closes its connection while its FETCH is being written: the server still
    answers the next connection (and tests/cli_imapd_fetch_direct.sh checks its clean exit).
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import base64
import hashlib
import re
import socket
import struct

import imapd_common

results = imapd_common.Results()
check = results.report


def stream(seed, n):
    """n bytes of a SHA-256 chain from seed: incompressible, and the same every run."""
    out = bytearray()
    h = hashlib.sha256(seed.encode()).digest()
    while len(out) < n:
        out += h
        h = hashlib.sha256(h).digest()
    return bytes(out[:n])


def text_lines(seed, n):
    """About n bytes of CRLF text lines made from words picked by the chain."""
    words = [b"ledger", b"invoice", b"meeting", b"report", b"draft", b"review", b"budget",
             b"plan", b"status", b"schedule", b"summary", b"update", b"request", b"agenda"]
    picks = stream(seed, n // 6 + 16)
    lines, line = [], []
    size = 0
    for i, p in enumerate(picks):
        line.append(words[p % len(words)])
        if len(line) == 11:
            lines.append(b" ".join(line) + b" %d" % i)
            size += len(lines[-1]) + 2
            line = []
            if size >= n:
                break
    return b"\r\n".join(lines) + b"\r\n"


def header(i, subject, extra=b""):
    return (b"From: Sender %d <s%d@example.org>\r\nTo: direct@example.org\r\n"
            b"Subject: %s %d\r\nMessage-ID: <direct.%d@example.org>\r\n"
            b"Date: Mon, 5 Jan 2026 10:00:00 +0000\r\n%s\r\n" % (i, i, subject, i, i, extra))


def multipart(i, part_type, part_body):
    boundary = b"b-direct-%d" % i
    return (header(i, b"attachment", b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; "
                   b"boundary=\"" + boundary + b"\"\r\n") +
            b"--" + boundary + b"\r\nContent-Type: text/plain\r\n\r\n" +
            text_lines("intro%d" % i, 600) +
            b"--" + boundary + b"\r\n" + part_type + b"\r\n\r\n" + part_body +
            b"--" + boundary + b"--\r\n")


def messages():
    out = []
    for i in range(30):
        out.append(header(i, b"small") + text_lines("small%d" % i, 2000 + 150 * i))
    for i in range(30, 32):
        out.append(header(i, b"long text") + text_lines("long%d" % i, 100000))
    for i in range(32, 35):
        out.append(multipart(i, b"Content-Type: text/plain; name=\"notes.txt\"\r\n"
                             b"Content-Disposition: attachment; filename=\"notes.txt\"",
                             text_lines("notes%d" % i, 200000)))
    for i in range(35, 41):
        raw = base64.encodebytes(stream("blob%d" % i, 225000)).replace(b"\n", b"\r\n")
        out.append(multipart(i, b"Content-Type: application/octet-stream; name=\"a.bin\"\r\n"
                             b"Content-Transfer-Encoding: base64\r\n"
                             b"Content-Disposition: attachment; filename=\"a.bin\"", raw))
    return out


FETCH_RE = re.compile(rb"^\* (\d+) FETCH \((.*)\)$", re.S)


def fetch_all(c, command):
    """Sends command, returns (untagged responses, tagged line) as Imap.command does."""
    return c.command(command)


def check_whole(name, untagged, tagged, msgs, uids, section=b"BODY[]", cut=None,
                need_seen=False):
    ok = tagged.split(b" ")[1:2] == [b"OK"]
    check(name + ": tagged OK", ok, repr(tagged))
    fetches = [r for r in untagged if FETCH_RE.match(r[0])]
    check(name + ": one FETCH per message, in order", len(fetches) == len(msgs) and
          [int(FETCH_RE.match(r[0]).group(1)) for r in fetches] == list(range(1, len(msgs) + 1)),
          "%d responses for %d messages" % (len(fetches), len(msgs)))
    bad = []
    for k, (text, lits) in enumerate(fetches):
        if k >= len(msgs):
            break
        want = msgs[k] if cut is None else msgs[k][cut[0]:cut[0] + cut[1]]
        if (len(lits) != 1 or lits[0] != want or (b"UID %d " % uids[k]) not in text or
                section not in text or (need_seen and b"\\Seen" not in text)):
            bad.append(k + 1)
    check(name + ": every message's bytes exact", not bad, "messages %s differ" % bad[:10])
    return sum(len(lits[0]) for _, lits in fetches if lits)


class SmallBufferImap(imapd_common.Imap):
    """An Imap connection whose socket has a 4 KiB receive buffer, set before connecting."""

    def __init__(self, port, timeout_s):  # pylint: disable=super-init-not-called
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(timeout_s)
        self.sock.connect(("127.0.0.1", port))
        self.buf = b""
        self.n = 0
        self.tag_prefix = b"s"
        self.read_response()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--metrics", type=int, required=True)
    p.add_argument("--user", required=True)
    a = p.parse_args()
    user, password = a.user.split(":", 1)
    msgs = messages()
    c = imapd_common.imap_login(a.imap, user, password, timeout_s=120)
    for m in msgs:
        _, tagged = c.command("APPEND INBOX ()", literal=m, plus=True)
        if b" OK" not in tagged:
            raise RuntimeError("APPEND: %r" % tagged)
    untagged, tagged = c.command("EXAMINE INBOX")
    check("EXAMINE INBOX: %d messages" % len(msgs),
          any(r[0] == b"* %d EXISTS" % len(msgs) for r in untagged), repr(untagged[:4]))
    untagged, _ = c.command("UID SEARCH ALL")
    uids = [int(x) for r in untagged if r[0].startswith(b"* SEARCH")
            for x in r[0].split()[2:]]
    check("UID SEARCH ALL lists every message", len(uids) == len(msgs), repr(uids[:5]))

    # a client that reads at once: the job writes the response itself
    before = imapd_common.metric(a.metrics, "mailvaultd_fetch_direct_bytes_total")
    untagged, tagged = fetch_all(c, "UID FETCH 1:* (BODY.PEEK[])")
    total = check_whole("UID FETCH 1:* (BODY.PEEK[])", untagged, tagged, msgs, uids)
    # the job sends the tagged line itself; it counts its bytes when the loop is done with
    # it, which a NOOP's answer (the loop reads the NOOP only then) comes after
    c.command("NOOP")
    after = imapd_common.metric(a.metrics, "mailvaultd_fetch_direct_bytes_total")
    check("the metrics have mailvaultd_fetch_direct_bytes_total", before is not None and
          after is not None, "before %r, after %r" % (before, after))
    if before is not None and after is not None:
        check("the FETCH job wrote to the socket itself (%d of ~%d bytes)" % (after - before,
                                                                            total),
              0 < after - before <= total + 64 * len(msgs) + 4096,
              "direct bytes %d, response ~%d" % (after - before, total))

    # a small FETCH: its whole answer, the tagged line included, from the job itself (the
    # old server left answers under IMAP_FETCH_DIRECT_MIN and every tagged line to the loop)
    before = imapd_common.metric(a.metrics, "mailvaultd_fetch_direct_bytes_total")
    untagged, tagged = c.command("UID FETCH %d (UID FLAGS)" % uids[0])
    c.command("NOOP")
    after = imapd_common.metric(a.metrics, "mailvaultd_fetch_direct_bytes_total")
    small = sum(len(r[0]) + 2 for r in untagged) + len(tagged) + 2
    check("a one-message FETCH (UID FLAGS) is answered by the job itself, tagged line too "
          "(%r of %d bytes)" % (None if before is None or after is None else after - before,
                                small),
          tagged.split(b" ")[1:2] == [b"OK"] and before is not None and after is not None and
          after - before == small, "direct bytes %r -> %r, answer %r %r" % (before, after,
                                                                           untagged, tagged))

    untagged, tagged = fetch_all(c, "UID FETCH 1:* (BODY.PEEK[]<1000.70000>)")
    check_whole("UID FETCH 1:* (BODY.PEEK[]<1000.70000>)", untagged, tagged, msgs, uids,
                section=b"BODY[]<1000>", cut=(1000, 70000))

    # a pipelined NOOP right behind the FETCH
    t1, t2 = c.tag(), c.tag()
    c.sock.sendall(t1 + b" UID FETCH 1:* (BODY.PEEK[])\r\n" + t2 + b" NOOP\r\n")
    untagged, tagged = c.until(t1)
    check_whole("pipelined FETCH", untagged, tagged, msgs, uids)
    check("pipelined FETCH: no NOOP answer inside it",
          not any(r[0].startswith(t2 + b" ") for r in untagged))
    _, tagged = c.until(t2)
    check("pipelined NOOP answered after the FETCH", tagged.startswith(t2 + b" OK"), repr(tagged))

    # a client whose socket fills at once: the loop writes what the job could not
    s = SmallBufferImap(a.imap, 120)
    _, tagged = s.command('LOGIN "%s" "%s"' % (user, password))
    s.command("EXAMINE INBOX")
    untagged, tagged = s.command("UID FETCH 1:* (BODY.PEEK[])")
    check_whole("4 KiB receive buffer: UID FETCH 1:* (BODY.PEEK[])", untagged, tagged, msgs, uids)
    s.command("LOGOUT")
    s.close()

    # FETCH BODY[] in a read-write mailbox: \Seen set, FLAGS in the response, bytes exact
    c.command("SELECT INBOX")
    untagged, tagged = c.command("FETCH 1:* (BODY[])")
    check_whole("FETCH 1:* (BODY[]) sets \\Seen", untagged, tagged, msgs, uids, need_seen=True)
    c.command("LOGOUT")
    c.close()

    # a client gone in the middle of its FETCH
    g = imapd_common.imap_login(a.imap, user, password, timeout_s=120)
    g.command("EXAMINE INBOX")
    g.sock.sendall(b"g1 UID FETCH 1:* (BODY.PEEK[])\r\n")
    g.read_bytes(10000)
    g.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
    g.close()
    n = imapd_common.imap_login(a.imap, user, password, timeout_s=120)
    n.command("EXAMINE INBOX")
    untagged, tagged = n.command("UID FETCH %d (BODY.PEEK[])" % uids[-1])
    check("after a client left mid-FETCH, the next one is served",
          tagged.split(b" ")[1:2] == [b"OK"] and len(untagged) >= 1 and
          untagged[-1][1][:1] == [msgs[-1]], repr(tagged))
    n.command("LOGOUT")
    n.close()
    results.summary()


if __name__ == "__main__":
    results.run(main)
