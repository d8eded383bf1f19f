"""imapd_quota.py -- the per-user quota of mailvaultd (RFC 9208 STORAGE and MESSAGE), driven by
tests/cli_imapd_quota.sh against two servers it starts. Users are made by the script; each
password is "ADDRESS secret".

PHASES
  --phase open    a server with quota_kib=20, quota_messages=3 and a quota_file giving bob
                  8 KiB (no message limit), erin no limits, frank 2 messages (no storage
                  limit), judy no limits: CAPABILITY; GETQUOTAROOT / GETQUOTA with both, one
                  or no resource; SETQUOTA refused; APPEND and COPY refused with OVERQUOTA
                  on each resource, MOVE allowed; one LMTP transaction with two recipients
                  over quota (552 5.2.2) and two under it (250, one of them sealed); the
                  quota file re-read when it changes, a bad version ignored (and logged).
  --phase sealed  a server with one worker holding one store (so a login closes the last
                  user's store), quota_kib=1 and a quota_file giving carol 10 KiB and 3
                  messages, dave no limits, hank the size of his store files + 4 KiB, ivan
                  one message: deliveries to stores that are not open counted from the usage
                  noted at the store's close plus the queue (bytes and files), from the file
                  sizes when nothing was seen (storage only), a mixed transaction, and the
                  queue drained into the counted usage at the next login.

The last line is "# N passed, N failed".
"""
import argparse
import re
import os
import sys
import time

import imapd_common

TIMEOUT = 20
results = imapd_common.Results()
check = results.report
args = None


def message(size, subject="quota"):
    """A message of exactly size bytes (CRLF line ends, one long body line)."""
    head = b"From: q@example.org\r\nTo: someone@example.org\r\nSubject: " + subject.encode() + \
        b"\r\n\r\n"
    return head + b"x" * (size - len(head) - 2) + b"\r\n"


def login(user, tries=1):
    """A logged-in raw IMAP connection; retries while the worker's store slot is busy (the
    previous session's release runs after its socket closes)."""
    for attempt in range(tries):
        c = imapd_common.Imap(args.imap, TIMEOUT)
        _, tagged = c.command('LOGIN %s "%s secret"' % (user, user))
        if b" OK" in tagged:
            return c
        c.close()
        if attempt + 1 == tries:
            raise RuntimeError("LOGIN %s: %r" % (user, tagged))
        time.sleep(0.2)


def texts(untagged):
    return [u[0] for u in untagged]


def getquota(c):
    """The untagged lines of GETQUOTAROOT INBOX and its tagged line."""
    untagged, tagged = c.command("GETQUOTAROOT INBOX")
    return texts(untagged), tagged


def quota_line(c):
    lines, tagged = getquota(c)
    quota = [l for l in lines if l.startswith(b"* QUOTA ")]
    return quota[0] if len(quota) == 1 and b" OK" in tagged else (lines, tagged)


def append(c, size, box="INBOX"):
    _, tagged = c.command("APPEND %s" % box, message(size), plus=True)
    return tagged


def ok(tagged):
    return tagged.split(b" ")[1:2] == [b"OK"]


def lmtp_transaction(recipients, data):
    """One LMTP transaction: the per-recipient replies after DATA as [(code, line)]."""
    l = imapd_common.Lmtp(args.lmtp, TIMEOUT)
    try:
        l.cmd("LHLO test.example.org")
        code, line = l.cmd("MAIL FROM:<q@example.org>")
        if code != 250:
            return [(code, line)]
        for r in recipients:
            code, line = l.cmd("RCPT TO:<%s>" % r)
            if code != 250:
                return [(code, line)]
        code, line = l.cmd("DATA")
        if code != 354:
            return [(code, line)]
        l.sock.sendall(data + b".\r\n")
        replies = [l.reply() for _ in recipients]
        l.cmd("QUIT")
        return replies
    finally:
        l.close()


def is_552(reply):
    return reply[0] == 552 and b" 5.2.2 " in reply[1]


def log_text():
    with open(args.log, "rb") as f:
        return f.read()


def write_quota_file(text):
    """Replaces the quota file the way an administrator should: a new file renamed over it."""
    tmp = args.quota_file + ".new"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, args.quota_file)


def queue_files(user):
    local, domain = user.split("@")
    d = os.path.join(args.root, domain, local + ".queue")
    if not os.path.isdir(d):
        return []
    return [n for n in os.listdir(d) if n.endswith(".sealed")]


# ---- phase open ---------------------------------------------------------------------------

def test_report():
    a = login("alice@example.org")
    untagged, tagged = a.command("CAPABILITY")
    caps = texts(untagged)[0].split() if untagged else []
    check("CAPABILITY: QUOTA, QUOTA=RES-STORAGE and QUOTA=RES-MESSAGE",
          b"QUOTA" in caps and b"QUOTA=RES-STORAGE" in caps and b"QUOTA=RES-MESSAGE" in caps,
          repr(caps))
    lines, tagged = getquota(a)
    check("defaults: GETQUOTAROOT names the root, STORAGE and MESSAGE with usage and limit",
          ok(tagged) and lines == [b'* QUOTAROOT "INBOX" ""',
                                   b'* QUOTA "" (STORAGE 0 20 MESSAGE 0 3)'], repr((lines, tagged)))
    untagged, tagged = a.command('GETQUOTA ""')
    check("GETQUOTA \"\" reports the same", ok(tagged) and
          texts(untagged) == [b'* QUOTA "" (STORAGE 0 20 MESSAGE 0 3)'], repr((untagged, tagged)))
    _, tagged = a.command('GETQUOTA "user.alice"')
    check("GETQUOTA of another root: NO [NONEXISTENT]", b" NO [NONEXISTENT]" in tagged, repr(tagged))
    _, tagged = a.command('SETQUOTA "" (STORAGE 100)')
    check("SETQUOTA: NO [NOPERM] saying where quotas are set",
          b" NO [NOPERM]" in tagged and b"quota_file" in tagged, repr(tagged))
    _, tagged = a.command("GETQUOTAROOT Nonesuch")
    check("GETQUOTAROOT of a missing mailbox: NO", b" NO " in tagged, repr(tagged))
    a.close()

    b = login("bob@example.org")
    check("quota_file entry (domain normalised): storage only, MESSAGE left out",
          quota_line(b) == b'* QUOTA "" (STORAGE 0 8)', repr(quota_line(b)))
    b.close()
    f = login("frank@example.org")
    check("quota_file entry: messages only, STORAGE left out",
          quota_line(f) == b'* QUOTA "" (MESSAGE 0 2)', repr(quota_line(f)))
    f.close()
    e = login("erin@example.org")
    lines, tagged = getquota(e)
    check("quota_file entry 0 0 overrides the defaults: no quota root",
          ok(tagged) and lines == [b'* QUOTAROOT "INBOX"'], repr((lines, tagged)))
    _, tagged = e.command('GETQUOTA ""')
    check("... and GETQUOTA \"\" is NO [NONEXISTENT]", b" NO [NONEXISTENT]" in tagged, repr(tagged))
    e.close()


def test_messages():
    """alice: the defaults, 20 KiB and 3 messages."""
    a = login("alice@example.org")
    tags = [append(a, 500) for _ in range(3)]
    check("APPEND up to the message limit", all(ok(t) for t in tags), repr(tags))
    t = append(a, 500)
    check("APPEND over the message limit: NO [OVERQUOTA] naming the message quota",
          b" NO [OVERQUOTA]" in t and b"message quota" in t, repr(t))
    check("usage after the refusal: 2 KiB (1500 bytes rounded up), 3 messages",
          quota_line(a) == b'* QUOTA "" (STORAGE 2 20 MESSAGE 3 3)', repr(quota_line(a)))
    a.command("SELECT INBOX")
    _, t = a.command("COPY 1 Archive")
    check("COPY over the message limit: NO [OVERQUOTA]", b" NO [OVERQUOTA]" in t, repr(t))
    _, t = a.command("UID COPY 1:* Archive")
    check("UID COPY over the message limit: NO [OVERQUOTA]", b" NO [OVERQUOTA]" in t, repr(t))
    _, t = a.command("MOVE 1 Archive")
    check("MOVE at the limit is allowed", ok(t), repr(t))
    untagged, t = a.command("STATUS Archive (MESSAGES)")
    check("... and moved the message", texts(untagged) == [b'* STATUS "Archive" (MESSAGES 1)'],
          repr(untagged))
    check("MOVE left the usage as it was",
          quota_line(a) == b'* QUOTA "" (STORAGE 2 20 MESSAGE 3 3)', repr(quota_line(a)))
    return a  # stays logged in: LMTP delivers into the open store


def test_storage():
    """bob: 8 KiB from the quota file, no message limit."""
    b = login("bob@example.org")
    t = append(b, 5000)
    check("APPEND under the storage limit", ok(t), repr(t))
    t = append(b, 5000)
    check("APPEND over the storage limit: NO [OVERQUOTA] naming the storage quota",
          b" NO [OVERQUOTA]" in t and b"storage quota" in t, repr(t))
    t = append(b, 1000)
    check("a smaller APPEND still fits", ok(t), repr(t))
    b.command("SELECT INBOX")
    _, t = b.command("COPY 1 Archive")
    check("COPY of 5000 bytes over the storage limit: NO [OVERQUOTA]", b" NO [OVERQUOTA]" in t,
          repr(t))
    _, t = b.command("COPY 2 Archive")
    check("COPY of 1000 bytes under it: OK", ok(t), repr(t))
    _, t = b.command("MOVE 1:* Archive")
    check("MOVE of everything (7 KiB of 8) is allowed", ok(t), repr(t))
    check("usage counts the copy twice, not the move",
          quota_line(b) == b'* QUOTA "" (STORAGE 7 8)', repr(quota_line(b)))
    return b


def test_overrides():
    e = login("erin@example.org")
    tags = [append(e, 30000) for _ in range(4)]
    check("erin (0 0 in the file): 4 x 30000 bytes, over both defaults, are stored",
          all(ok(t) for t in tags), repr(tags))
    e.command("LOGOUT")
    e.close()
    f = login("frank@example.org")
    tags = [append(f, 30000), append(f, 100)]
    check("frank (messages 2, storage unlimited): 30000 bytes over the default storage",
          all(ok(t) for t in tags), repr(tags))
    t = append(f, 100)
    check("frank: the third message is over his limit", b" NO [OVERQUOTA]" in t, repr(t))
    f.close()


def test_lmtp_mixed(a, b):
    before = log_text().count(b"lmtp deliver judy@example.org")
    replies = lmtp_transaction(["alice@example.org", "bob@example.org", "erin@example.org",
                                "judy@example.org"], message(2000, "mixed"))
    check("LMTP: four replies after DATA", len(replies) == 4, repr(replies))
    if len(replies) == 4:
        check("LMTP: alice over her message limit (store open): 552 5.2.2", is_552(replies[0]),
              repr(replies[0]))
        check("LMTP: bob over his storage limit (store open): 552 5.2.2", is_552(replies[1]),
              repr(replies[1]))
        check("LMTP: erin (no limits) in the same transaction: 250", replies[2][0] == 250,
              repr(replies[2]))
        check("LMTP: judy (no limits, store never opened: sealed) : 250", replies[3][0] == 250,
              repr(replies[3]))
    log = log_text()
    check("the log says judy's delivery was sealed",
          log.count(b"lmtp deliver judy@example.org: 2000 bytes sealed: ok") == before + 1, "")
    check("the log names the refusals",
          b"lmtp deliver alice@example.org: 2000 bytes into the open store: refused: over the "
          b"message quota" in log and
          b"lmtp deliver bob@example.org: 2000 bytes into the open store: refused: over the "
          b"storage quota" in log, "")
    untagged, _ = a.command("NOOP")
    check("nothing arrived for alice", not any(t.endswith(b"EXISTS") for t in texts(untagged)),
          repr(untagged))
    check("bob's usage did not move", quota_line(b) == b'* QUOTA "" (STORAGE 7 8)',
          repr(quota_line(b)))


def wait_for(condition, seconds=60):
    """Polls condition() until it is true or seconds pass; returns its last value. quota.c
    looks at the file at most every 2 s: waiting for the effect (never sleeping past the
    interval) keeps the test right on a loaded machine under ASan."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.1)


def test_reload(b):
    base = ("# rewritten by imapd_quota.py\n"
            "erin@example.org 0 0\nfrank@example.org 0 2\njudy@example.org 0 0\n")
    write_quota_file(base + "bob@example.org 8 1\n")
    wait_for(lambda: quota_line(b) == b'* QUOTA "" (STORAGE 7 8 MESSAGE 3 1)')
    check("a changed quota file is re-read: bob gets a message limit",
          quota_line(b) == b'* QUOTA "" (STORAGE 7 8 MESSAGE 3 1)', repr(quota_line(b)))
    t = append(b, 100)
    check("... which APPEND enforces", b" NO [OVERQUOTA]" in t and b"message quota" in t, repr(t))
    check("the reload is logged", b"reloaded, 4 entries" in log_text(), "")
    write_quota_file(base + "bob@example.org 100 0\nbob@example.org 8\n")
    want = ("quota file %s:6: expected \"address storage_kib messages\", found 2 fields; "
            "keeping the previous table" % args.quota_file).encode()
    # each GETQUOTAROOT gives the server a reason to look; the log says when it has looked
    wait_for(lambda: quota_line(b) is not None and want in log_text())
    check("a bad new version is ignored: the previous table stays",
          quota_line(b) == b'* QUOTA "" (STORAGE 7 8 MESSAGE 3 1)', repr(quota_line(b)))
    check("... and logged with file:line", want in log_text(), want.decode())
    write_quota_file(base + "bob@example.org 100 0\n")
    wait_for(lambda: quota_line(b) == b'* QUOTA "" (STORAGE 7 100)')
    check("a fixed version is read again", quota_line(b) == b'* QUOTA "" (STORAGE 7 100)',
          repr(quota_line(b)))
    t = append(b, 5000)
    check("... and APPEND goes by it", ok(t), repr(t))
    os.unlink(args.quota_file)
    gone = ("quota file %s: No such file or directory; keeping the previous "
            "table" % args.quota_file).encode()
    wait_for(lambda: quota_line(b) is not None and gone in log_text())
    check("a removed quota file keeps the table", quota_line(b) == b'* QUOTA "" (STORAGE 12 100)',
          repr(quota_line(b)))
    check("... and is logged", gone in log_text(), "")


def phase_open():
    test_report()
    a = test_messages()
    b = test_storage()
    test_overrides()
    test_lmtp_mixed(a, b)
    test_reload(b)
    a.close()
    b.close()


# ---- phase sealed -------------------------------------------------------------------------

def sealed_one(user, size):
    replies = lmtp_transaction([user], message(size, "sealed"))
    return replies[0] if replies else (0, b"no reply")


def phase_sealed():
    c = login("carol@example.org")
    t = append(c, 3000)
    check("carol: APPEND while her store is open", ok(t), repr(t))
    check("carol: 3 KiB of 10, 1 message of 3",
          quota_line(c) == b'* QUOTA "" (STORAGE 3 10 MESSAGE 1 3)', repr(quota_line(c)))
    c.command("LOGOUT")
    c.close()
    d = login("dave@example.org", tries=25)  # one store per worker: carol's store closes
    d.command("LOGOUT")
    d.close()
    check("dave's login closed carol's store", b"store close carol@example.org" in log_text(), "")

    r = sealed_one("carol@example.org", 3000)
    check("sealed to carol: 3000 + 3000 bytes, 2 messages: 250", r[0] == 250, repr(r))
    check("... it waits in her queue", len(queue_files("carol@example.org")) == 1,
          repr(queue_files("carol@example.org")))
    r = sealed_one("carol@example.org", 5000)
    check("sealed to carol: 3000 seen + 3000 queued + 5000 > 10 KiB: 552 5.2.2", is_552(r), repr(r))
    # queued: the sealed file of the 3000-byte message, with the Return-Path and Delivered-To
    # fields LMTP adds (docs/IMAPD.md) and the sealing overhead
    check("... logged as an estimate from the usage last seen",
          re.search(rb"lmtp deliver carol@example\.org: 5000 bytes sealed: refused: over the "
                    rb"storage quota \(last seen 3000 bytes \+ 3\d\d\d queued", log_text())
          is not None, "")
    r = sealed_one("carol@example.org", 1000)
    check("sealed to carol: 1000 bytes fit, the 3rd message: 250", r[0] == 250, repr(r))
    r = sealed_one("carol@example.org", 100)
    check("sealed to carol: a 4th message (1 seen + 2 queued + 1): 552 5.2.2", is_552(r), repr(r))
    check("... refused for the message quota",
          b"lmtp deliver carol@example.org: 100 bytes sealed: refused: over the message quota"
          in log_text(), "")

    replies = lmtp_transaction(["carol@example.org", "dave@example.org"], message(200, "mixed"))
    check("mixed transaction: carol (sealed, over) 552 5.2.2, dave (no limits) 250",
          len(replies) == 2 and is_552(replies[0]) and replies[1][0] == 250, repr(replies))

    r = sealed_one("hank@example.org", 3000)
    check("hank, never seen since the start: store files + 3000 bytes fit: 250", r[0] == 250,
          repr(r))
    r = sealed_one("hank@example.org", 3000)
    check("hank: store files + 3076 queued + 3000 bytes do not: 552 5.2.2", is_552(r), repr(r))
    check("... logged as an estimate from the store files",
          b"lmtp deliver hank@example.org: 3000 bytes sealed: refused: over the storage quota "
          b"(store files" in log_text(), "")
    replies = [sealed_one("ivan@example.org", 100) for _ in range(3)]
    check("ivan (1 message), never seen: the message count is not checked: 250 x 3",
          [r[0] for r in replies] == [250, 250, 250], repr(replies))

    c = login("carol@example.org", tries=25)
    # The worker drains the queue after the login, in steps (worker.c "THE DRAIN"): polled
    # with a deadline.
    # (While it drains, the usage counts the queue too, so the line alone can match early.)
    want, deadline = b'* QUOTA "" (STORAGE 7 10 MESSAGE 3 3)', time.monotonic() + 60
    while ((quota_line(c) != want or queue_files("carol@example.org"))
           and time.monotonic() < deadline):
        time.sleep(0.05)
    check("carol's next login drains the queue into the counted usage",
          quota_line(c) == want, repr(quota_line(c)))
    check("... and the queue is empty", queue_files("carol@example.org") == [],
          repr(queue_files("carol@example.org")))
    c.command("LOGOUT")
    c.close()


def main():
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--phase", choices=["open", "sealed"], required=True)
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--lmtp", type=int, required=True)
    p.add_argument("--log", required=True, help="the server's log")
    p.add_argument("--quota-file", required=True)
    p.add_argument("--root", required=True, help="the store root")
    args = p.parse_args()
    try:
        phase_open() if args.phase == "open" else phase_sealed()
    except Exception as e:  # a dead server or a protocol error: one failure, then the summary
        check("phase %s ran to the end" % args.phase, False, "%s: %s" % (type(e).__name__, e))
    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
