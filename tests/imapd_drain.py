"""imapd_drain.py -- the sealed queue is drained after the login, not in front of it
(imapd/worker.c "THE DRAIN"): deliveries sealed while the user was away arrive in INBOX once
each and in arrival order after LOGIN + SELECT, announced as EXISTS, also when more arrive
over LMTP while the drain runs; and a short command of another user on the same worker is
answered while long commands of a first user are queued (worker.c "LANES"); a client in IDLE
is told of the drained mail by syncs on the worker's reader thread (worker.c "READERS"); and
a SELECT or EXAMINE of a user whose long commands hold the writer runs on the reader thread
(imapd/imap_lane.c "SELECTS").

USAGE (tests/cli_imapd_drain.sh runs it; the server has one worker)
  imapd_drain.py --imap PORT --lmtp PORT --metrics PORT --user ADDRESS:PASSWORD
                 --user2 ADDRESS:PASSWORD --user3 ADDRESS:PASSWORD
  Prints PASS/FAIL lines and "# N passed, N failed".
"""
import argparse
import contextlib
import fcntl
import os
import re
import sys
import time

sys.path.insert(0, sys.path[0])
import imapd_common  # noqa: E402

R = imapd_common.Results()
metric = imapd_common.metric  # one sample of /metrics
TIMEOUT = 120
QUEUED = 150  # sealed before the login
DURING = 20   # delivered over LMTP right after the login, while the drain runs


def message(n):
    return (b"From: sender@example.net\r\nTo: someone@example.org\r\n"
            b"Subject: drain-%04d\r\nMessage-ID: <drain-%d@example.net>\r\n\r\n"
            b"body of message %d\r\n" % (n, n, n))


def lmtp_send(port, user, numbers):
    """Delivers each numbered message to user in one LMTP transaction each; the count acked."""
    conn = imapd_common.Lmtp(port, TIMEOUT)
    conn.cmd("LHLO test.example")
    acked = 0
    for n in numbers:
        conn.cmd("MAIL FROM:<sender@example.net>")
        code, _ = conn.cmd("RCPT TO:<%s>" % user)
        if code != 250:
            conn.cmd("RSET")
            continue
        conn.cmd("DATA")
        conn.sock.sendall(message(n) + b".\r\n")
        code, _ = conn.reply()
        acked += code == 250
    conn.cmd("QUIT")
    conn.close()
    return acked


def exists_of(untagged):
    n = None
    for text, _ in untagged:
        m = re.match(rb"\* (\d+) EXISTS", text)
        if m:
            n = int(m.group(1))
    return n


def test_drain_after_login(args):
    user, password = args.user.split(":", 1)
    R.report("%d deliveries acknowledged while the user is away (sealed)" % QUEUED,
             lmtp_send(args.lmtp, user, range(QUEUED)) == QUEUED)
    c = imapd_common.imap_login(args.imap, user, password, TIMEOUT)
    untagged, tagged = c.command("SELECT INBOX")
    first = exists_of(untagged)
    R.report("SELECT answers OK with what is committed so far (EXISTS %s)" % first,
             b" OK" in tagged and first is not None and first <= QUEUED)
    # RFC 9208: the usage is the user's mail, also the part still queued while it drains
    untagged, tagged = c.command('GETQUOTA ""')
    used = None
    for text, _ in untagged:
        m = re.search(rb"MESSAGE (\d+) ", text)
        if m:
            used = int(m.group(1))
    R.report("GETQUOTA right after the login counts the queued mail too (MESSAGE %s of %d)"
             % (used, QUEUED), b" OK" in tagged and used == QUEUED)
    acked = lmtp_send(args.lmtp, user, range(QUEUED, QUEUED + DURING))
    R.report("%d more acknowledged while the drain runs" % DURING, acked == DURING)
    total, deadline, seen = QUEUED + DURING, time.monotonic() + TIMEOUT, first or 0
    while seen < total and time.monotonic() < deadline:
        untagged, _ = c.command("NOOP")
        n = exists_of(untagged)
        seen = n if n is not None else seen
    R.report("EXISTS reaches %d (NOOP polled with a deadline; last %d)" % (total, seen),
             seen == total)
    untagged, tagged = c.command("UID FETCH 1:* (BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
    numbers = []
    for text, lits in untagged:
        for lit in lits:
            m = re.search(rb"drain-(\d+)", lit)
            if m:
                numbers.append(int(m.group(1)))
    R.report("every delivery once, in arrival order (UIDs follow arrival)",
             numbers == list(range(total)),
             "got %d, first differences %r" % (len(numbers), [
                 (i, x) for i, x in enumerate(numbers) if x != i][:5]))
    # The drain's steps store the mail without its full-text rows, built between jobs
    # afterwards: a SEARCH right away must find the messages all the same.
    found = {}
    for key, text in (("TEXT", "drain-0042"), ("BODY", "body of message"), ("BODY", "ssag")):
        untagged, tagged = c.command('UID SEARCH %s "%s"' % (key, text))
        uids = []
        for line, _ in untagged:
            if line.startswith(b"* SEARCH"):
                uids += [int(x) for x in line.split()[2:]]
        found[(key, text)] = sorted(uids) if b" OK" in tagged else None
    R.report("SEARCH TEXT/BODY right after the drain finds the drained mail",
             found[("TEXT", "drain-0042")] == [43]
             and found[("BODY", "body of message")] == list(range(1, total + 1))
             and found[("BODY", "ssag")] == list(range(1, total + 1)),
             "got %r" % {k: (v if v is None or len(v) < 5 else len(v)) for k, v in found.items()})
    drained = metric(args.metrics, "mailvaultd_queue_drained_total")
    R.report("/metrics counts the drained deliveries (%s)" % drained,
             drained is not None and drained >= QUEUED)
    # The drain renames each delivered file into the queue's done/ (no unlink in a step); the
    # worker unlinks them between jobs once the drain is over (mv_queue_tidy).
    local, domain = user.split("@", 1)
    queue = os.path.join(args.root, domain, local + ".queue")
    done = os.path.join(queue, "done")
    deadline = time.monotonic() + TIMEOUT
    while os.path.isdir(done) and time.monotonic() < deadline:
        c.command("NOOP")  # a job: the worker tidies after it
        time.sleep(0.05)
    left = [n for n in os.listdir(queue) if n.endswith(".sealed")]
    R.report("the delivered files are removed after the drain (done/ gone, %d left queued)"
             % len(left), not os.path.isdir(done) and not left)
    c.command("LOGOUT")
    c.close()


IDLE_QUEUED = 120  # sealed before the login of the IDLE test's user
IDLE_DURING = 10   # delivered over LMTP while it waits in IDLE


def lane_jobs(port, lane):
    return metric(port, 'mailvaultd_worker_lane_wait_seconds_count{lane="%s"}' % lane) or 0


def test_idle_sees_drain(args):
    """A client that waits in IDLE (as real clients do) is told EXISTS as the queue drains
    and as more arrives; the syncs that tell it are reads, so they run on the worker's reader
    thread like NOOP's, not on the writer's short lane, where each one made the next drain
    step give way after WORKER_DRAIN_MIN_MS (worker.c THE DRAIN)."""
    user, password = args.user3.split(":", 1)
    R.report("IDLE: %d deliveries acknowledged while the user is away" % IDLE_QUEUED,
             lmtp_send(args.lmtp, user, range(IDLE_QUEUED)) == IDLE_QUEUED)
    c = imapd_common.imap_login(args.imap, user, password, TIMEOUT)
    untagged, tagged = c.command("SELECT INBOX")
    seen = exists_of(untagged) or 0
    short0, read0 = lane_jobs(args.metrics, "short"), lane_jobs(args.metrics, "read")
    tag = c.tag()
    c.sock.sendall(tag + b" IDLE\r\n")
    first = c.read_response()[0]
    while not first.startswith(b"+") and not first.startswith(tag + b" "):
        m = re.match(rb"\* (\d+) EXISTS", first)  # the drain may announce some first
        seen = int(m.group(1)) if m else seen
        first = c.read_response()[0]
    R.report("IDLE is accepted (%r)" % first[:40], first.startswith(b"+"))
    total = IDLE_QUEUED + IDLE_DURING
    acked = lmtp_send(args.lmtp, user, range(IDLE_QUEUED, total))
    deadline = time.monotonic() + TIMEOUT
    while seen < total and time.monotonic() < deadline:
        m = re.match(rb"\* (\d+) EXISTS", c.read_response()[0])
        seen = int(m.group(1)) if m else seen
    R.report("IDLE: EXISTS reaches %d without a command (last %d; %d acknowledged during it)"
             % (total, seen, acked), seen == total and acked == IDLE_DURING)
    c.sock.sendall(b"DONE\r\n")
    _, tagged = c.until(tag)
    R.report("DONE ends the IDLE", b" OK" in tagged)
    short, read = lane_jobs(args.metrics, "short") - short0, lane_jobs(args.metrics, "read") - read0
    # short: the IDLE command and the LMTP deliveries to the open store (how many jobs a
    # delivery makes depends on whether the drain is still under way: only reported); the
    # syncs that found the new mail are reads (none on the old server: short lane +23)
    R.report("the IDLE syncs ran on the reader thread (short lane +%d, read lane +%d)"
             % (short, read), read >= 1)
    c.command("LOGOUT")
    c.close()


@contextlib.contextmanager
def writer_held(args):
    """Holds args.user's store's WAL write lock from this process (the unix VFS's lock byte
    120 of the -shm, as `mailvault freeze` takes it), so the server's first COPY waits in its
    busy handler (30 s) and every later one stays queued: "still queued" is then a fact, not
    a race with how fast the COPYs run (a loaded machine ran them all before the check)."""
    address = args.user.split(":", 1)[0]
    local, domain = address.split("@", 1)
    shm = os.path.join(args.root, domain, local + ".db-shm")
    fd = os.open(shm, os.O_RDWR)
    deadline = time.monotonic() + TIMEOUT
    while True:  # the server may be in a transaction of its own: wait for its end
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 120)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    try:
        yield
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 120)
        os.close(fd)


def copy_sessions(args, count, prefix, source):
    """count sessions of args.user, each with its mailbox "<prefix><i>" made and source
    selected: ready for queue_copies."""
    user, password = args.user.split(":", 1)
    conns = []
    for i in range(count):
        c = imapd_common.imap_login(args.imap, user, password, TIMEOUT)
        c.command('CREATE "%s%d"' % (prefix, i))
        c.command('SELECT "%s"' % source)
        conns.append(c)
    return conns


def queue_copies(args, conns, prefix, at_least):
    """Sends COPY 1:* "<prefix><i>" on each of conns (selected, the mailboxes made) without
    waiting, then polls /metrics (30 s at most) until at least at_least long jobs wait at
    once. Returns the tags sent and whether that many waited."""
    tags = []
    for i, c in enumerate(conns):
        tag = c.tag()
        c.sock.sendall(tag + b' COPY 1:* "%s%d"\r\n' % (prefix.encode(), i))
        tags.append(tag)
    deadline, waiting = time.monotonic() + 30, 0
    while time.monotonic() < deadline:
        waiting = metric(args.metrics, 'mailvaultd_worker_lane_queue_length{lane="long"}') or 0
        if waiting >= at_least:
            break
    return tags, waiting >= at_least


def big_mailbox(args):
    """user's mailbox "big": INBOX's messages doubled five times (~5,000), so that each COPY
    of it holds the writer for a while (~0.1 s under ASan; a COPY of INBOX's ~170 often ran
    before the next was queued, and the ordering tests below checked nothing). Its EXISTS."""
    user, password = args.user.split(":", 1)
    c = imapd_common.imap_login(args.imap, user, password, TIMEOUT)
    c.command('CREATE "big"')
    c.command("SELECT INBOX")
    c.command('COPY 1:* "big"')
    c.command('SELECT "big"')
    for _ in range(5):
        c.command('COPY 1:* "big"')
    untagged, _ = c.command('EXAMINE "big"')
    c.close()
    return exists_of(untagged)


def test_short_passes_long(args):
    """user's long commands (COPY 1:* of "big", big_mailbox) on six connections, queued on
    the one worker; then user2's NOOP: with lanes it runs after at most the long job running
    when it came, so it is answered while COPYs are still queued (with one FIFO it was
    answered after all of them, none queued). While the test holds the store's write lock
    (writer_held) the first COPY waits and the five others queue; the NOOP is sent then and
    is answered ahead of the queued COPYs (~0.1 s each under ASan once the lock is given
    back; /metrics is read right after the answer)."""
    user2, password2 = args.user2.split(":", 1)
    other = imapd_common.imap_login(args.imap, user2, password2, TIMEOUT)
    other.command("SELECT INBOX")
    conns = copy_sessions(args, 6, "copies", "big")
    with writer_held(args):  # the first COPY waits; the NOOP comes behind five queued
        tags, queued = queue_copies(args, conns, "copies", 5)
        noop_tag = other.tag()
        other.sock.sendall(noop_tag + b" NOOP\r\n")
        R.report("five long COPYs queued behind the one that waits for the lock", queued)
    # the NOOP (short lane) runs before the queued COPYs
    _, tagged = other.until(noop_tag)
    still_queued = metric(args.metrics, 'mailvaultd_worker_lane_queue_length{lane="long"}')
    R.report("another user's NOOP is answered while long commands are still queued "
             "(%s waiting)" % still_queued,
             b" OK" in tagged and still_queued is not None and still_queued >= 1)
    for c, tag in zip(conns, tags):
        _, t = c.until(tag)
        R.report("the long COPY completes", b" OK" in t, repr(t))
        c.close()
    other.close()


def test_select_on_reader(args, want):
    """user's long commands (COPY 1:* of "big", want messages, on four connections) hold the
    worker's writer; another session of the same user then SELECTs and EXAMINEs "big": both
    run on the reader thread (imap_lane.c SELECTS), so each is answered while COPYs are still
    queued and shows the mailbox. On the writer (before) they waited for the running COPY, as
    every job of a user does there (WRITERS), and counted in the short lane: read lane +0."""
    user, password = args.user.split(":", 1)
    probe = imapd_common.imap_login(args.imap, user, password, TIMEOUT)
    conns = copy_sessions(args, 4, "sel", "big")
    with writer_held(args):  # the first COPY waits for the lock: the others stay queued
        tags, queued = queue_copies(args, conns, "sel", 3)
        R.report("three long COPYs queued behind the one that waits for the lock", queued)
        read0 = lane_jobs(args.metrics, "read")
        answered = []
        for how in ("SELECT", "EXAMINE"):
            untagged, tagged = probe.command(how + ' "big"')
            still = metric(args.metrics, 'mailvaultd_worker_lane_queue_length{lane="long"}')
            answered.append(b" OK" in tagged and exists_of(untagged) == want and
                            still is not None and still >= 1)
        read = lane_jobs(args.metrics, "read") - read0
        R.report("SELECT and EXAMINE are answered (EXISTS %s) while the same user's COPYs are "
                 "still queued" % want, all(answered), repr(answered))
        R.report("they ran on the reader thread (read lane +%d)" % read, read >= 2)
    for c, tag in zip(conns, tags):
        _, t = c.until(tag)
        R.report("the long COPY completes", b" OK" in t, repr(t))
        c.close()
    probe.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--lmtp", type=int, required=True)
    ap.add_argument("--metrics", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--user2", required=True)
    ap.add_argument("--user3", required=True)
    ap.add_argument("--root", required=True)
    args = ap.parse_args()
    test_drain_after_login(args)
    test_idle_sees_drain(args)
    big = big_mailbox(args)
    test_short_passes_long(args)
    test_select_on_reader(args, big)
    return R.summary()


if __name__ == "__main__":
    sys.exit(main())
