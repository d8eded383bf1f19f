"""imapd_metrics.py -- mailvaultd's /metrics (imapd/metrics.c) from the outside: every scrape
is parsed with python3-prometheus-client's parser (the format Prometheus reads), and the
numbers must move as the sessions run here say they must.

USAGE (tests/cli_imapd_metrics.sh runs it)
  imapd_metrics.py --metrics PORT --imap PORT --imaps PORT --lmtp PORT --workers N
                   --user ADDRESS:PASSWORD
  Prints PASS/FAIL lines and "# N passed, N failed".

What it checks
  - GET /metrics: 200, Content-Type text/plain; version=0.0.4, parses, has every family.
  - After IMAP sessions (one good login, one failed; SELECT ok and NO; FETCH and UID FETCH;
    a BAD), LMTP (one recipient accepted, one rejected) and one failed TLS handshake: the
    counters moved by exactly that much; histograms are cumulative, +Inf equals _count, and
    a command's _count equals its answers; open stores and worker queues are reported.
  - FETCH BODYSTRUCTURE / BODY answers kept per open store: the second FETCH of a message's
    structure, in any session, is a hit and the same bytes; BODY and UTF8=ACCEPT sessions
    have answers of their own. They are saved in the store between jobs (memos), and a
    server started again on the same stores (--restarted) reads them from there, byte for
    byte, and makes none again; with --stale-tags (their tags changed meanwhile, as by
    another format or GMime) it makes every answer again instead.
  - The HTTP side: 404 for another path, 405 for POST, 400 for a request head over 4 KiB,
    a silent client is dropped after the timeout, clients beyond the limit are closed at once
    and the server answers again once the slots are free.
"""
import argparse
import json
import socket
import sys
import time

sys.path.insert(0, sys.path[0])
import imapd_common  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

R = imapd_common.Results()


http = imapd_common.http


def scrape(port):
    """The samples of one scrape as {(name, frozenset(labels)): value}, and the families."""
    status, head, body = http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    if status != 200:
        raise RuntimeError("GET /metrics: %d" % status)
    families = list(text_string_to_metric_families(body.decode("utf-8")))
    samples = {}
    for f in families:
        for s in f.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return head, families, samples


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before, after, name, **labels):
    return value(after, name, **labels) - value(before, name, **labels)


FAMILIES = {
    "mailvaultd_connections_accepted": "counter",
    "mailvaultd_connections": "gauge",
    "mailvaultd_connections_refused": "counter",
    "mailvaultd_tls_handshakes_failed": "counter",
    "mailvaultd_logins": "counter",
    "mailvaultd_imap_commands": "counter",
    "mailvaultd_imap_responses": "counter",
    "mailvaultd_imap_command_duration_seconds": "histogram",
    "mailvaultd_lmtp_deliveries": "counter",
    "mailvaultd_open_stores": "gauge",
    "mailvaultd_stores_migrated": "counter",
    "mailvaultd_stores_migrating": "gauge",
    "mailvaultd_fts_bodies_set_aside": "counter",
    "mailvaultd_fts_backlog_bodies": "gauge",
    "mailvaultd_structure_cache_lookups": "counter",
    "mailvaultd_structure_cache_bytes": "gauge",
    "mailvaultd_structure_memos_saved": "counter",
    "mailvaultd_structure_made": "counter",
    "mailvaultd_fetch_sections_read": "counter",
    "mailvaultd_fetch_headers_read": "counter",
    "mailvaultd_sent_days_read": "counter",
    "mailvaultd_sent_days_saved": "counter",
    "mailvaultd_sort_keys_read": "counter",
    "mailvaultd_sort_keys_saved": "counter",
    "mailvaultd_worker_queue_length": "gauge",
    "mailvaultd_queue_depth": "gauge",
    "mailvaultd_start_time_seconds": "gauge",
    "mailvaultd_build_info": "gauge",
}


def check_format(port):
    head, families, _ = scrape(port)
    R.report("metrics: Content-Type is the text format 0.0.4",
             "content-type: text/plain; version=0.0.4" in head.lower(), head)
    types = {f.name: f.type for f in families}
    missing = [n for n, t in FAMILIES.items() if types.get(n) != t]
    R.report("metrics: every family present with its type (prometheus_client parses it)",
             not missing, "missing or mistyped: %s" % missing)


def sessions(args):
    user, password = args.user.split(":", 1)
    c = imapd_common.Imap(args.imap, 30)
    _, tagged = c.command('LOGIN "%s" "wrong password"' % user)
    R.report("setup: a wrong password is refused", b" NO " in tagged, tagged)
    c.close()
    c = imapd_common.imap_login(args.imap, user, password, 30)
    u1, t1 = c.command("SELECT INBOX")
    # The LMTP delivery was sealed (the store was not open) and the worker moves it in after
    # the login (imapd/worker.c THE DRAIN): wait for it, so that FETCH 1:* below has a
    # message (it raced the drain step and got "BAD no such message sequence number").
    untagged, deadline = u1, time.monotonic() + 60
    while not any(t.endswith(b" EXISTS") and t != b"* 0 EXISTS" for t, _ in untagged) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
        untagged, _ = c.command("NOOP")
    _, t2 = c.command("SELECT Nope")
    _, t3 = c.command("SELECT INBOX")
    _, t4 = c.command("FETCH 1:* (FLAGS)")
    _, t5 = c.command("UID FETCH 1:* (FLAGS)")
    _, t6 = c.command("FROBNICATE")
    R.report("setup: the IMAP commands answer as expected",
             b" OK" in t1 and b" NO" in t2 and b" OK" in t3 and b" OK" in t4 and b" OK" in t5
             and b" BAD" in t6, repr((t1, t2, t3, t4, t5, t6)))
    return c


def lmtp(args):
    user = args.user.split(":", 1)[0]
    l = imapd_common.Lmtp(args.lmtp, 30)
    l.cmd("LHLO test")
    l.cmd("MAIL FROM:<sender@example.net>")
    ok = l.cmd("RCPT TO:<%s>" % user)[0] == 250
    ok = ok and l.cmd("RCPT TO:<nobody-here@example.org>")[0] == 550
    ok = ok and l.cmd("DATA")[0] == 354
    l.sock.sendall(b"From: s@example.net\r\nSubject: m\r\n\r\nbody\r\n.\r\n")
    ok = ok and l.reply()[0] == 250
    l.cmd("QUIT")
    l.close()
    R.report("setup: LMTP accepts one recipient and rejects one", ok)


def tls_failure(args):
    if args.imaps <= 0:
        return False
    s = socket.create_connection(("127.0.0.1", args.imaps), timeout=10)
    s.sendall(b"this is not a TLS ClientHello\r\n" * 4)
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass
    s.close()
    return True


def wait_for(port, cond, seconds=20):
    """Scrapes until cond(samples) holds (the counters of a closed connection move on the
    loop's next turn); returns the last samples."""
    deadline = time.time() + seconds
    while True:
        _, _, samples = scrape(port)
        if cond(samples) or time.time() > deadline:
            return samples
        time.sleep(0.1)


def check_counts(args):
    _, _, before = scrape(args.metrics)
    lmtp(args)  # first: FETCH 1:* needs a message in INBOX
    imap = sessions(args)
    _, _, during = scrape(args.metrics)
    R.report("metrics: a logged-in store is open", value(during, "mailvaultd_open_stores") >= 1,
             str(value(during, "mailvaultd_open_stores")))
    R.report("metrics: open IMAP connections counted",
             value(during, "mailvaultd_connections", protocol="imap") >= 1)
    imap.command("LOGOUT")
    imap.close()
    tls = tls_failure(args)
    after = wait_for(args.metrics, lambda s: delta(before, s, "mailvaultd_connections_accepted_total",
                                                      protocol="lmtp") >= 1 and
                     (not tls or delta(before, s, "mailvaultd_tls_handshakes_failed_total") >= 1)
                     and value(s, "mailvaultd_connections", protocol="imap") == 0)

    def d(name, **labels):
        return delta(before, after, name, **labels)

    R.report("metrics: IMAP connections accepted (+2)",
             d("mailvaultd_connections_accepted_total", protocol="imap") == 2,
             str(d("mailvaultd_connections_accepted_total", protocol="imap")))
    R.report("metrics: LMTP connection accepted (+1)",
             d("mailvaultd_connections_accepted_total", protocol="lmtp") == 1)
    R.report("metrics: closed connections leave the gauge",
             value(after, "mailvaultd_connections", protocol="imap") == 0)
    R.report("metrics: logins ok +1, failed +1",
             d("mailvaultd_logins_total", result="ok") == 1
             and d("mailvaultd_logins_total", result="failed") == 1)
    R.report("metrics: SELECT ok +2, NO +1",
             d("mailvaultd_imap_commands_total", command="SELECT", status="ok") == 2
             and d("mailvaultd_imap_commands_total", command="SELECT", status="no") == 1)
    R.report("metrics: FETCH and UID FETCH counted apart",
             d("mailvaultd_imap_commands_total", command="FETCH", status="ok") == 1
             and d("mailvaultd_imap_commands_total", command="UID FETCH", status="ok") == 1)
    R.report("metrics: an unknown command is BAD under 'other' (no client-made label)",
             d("mailvaultd_imap_commands_total", command="other", status="bad") == 1
             and not any(("command", "FROBNICATE") in labels for _, labels in after))
    R.report("metrics: NO and BAD responses counted",
             d("mailvaultd_imap_responses_total", status="no") == 2
             and d("mailvaultd_imap_responses_total", status="bad") == 1,
             "no %s bad %s" % (d("mailvaultd_imap_responses_total", status="no"),
                              d("mailvaultd_imap_responses_total", status="bad")))
    R.report("metrics: LMTP accepted +1, rejected +1",
             d("mailvaultd_lmtp_deliveries_total", result="accepted") == 1
             and d("mailvaultd_lmtp_deliveries_total", result="rejected") == 1
             and d("mailvaultd_lmtp_deliveries_total", result="deferred") == 0)
    if tls:
        R.report("metrics: a failed TLS handshake counted",
                 d("mailvaultd_tls_handshakes_failed_total") == 1,
                 str(d("mailvaultd_tls_handshakes_failed_total")))
    check_histogram(after, "SELECT", 3)
    check_histogram(after, "UID FETCH", 1)
    workers = [labels for (name, labels) in after if name == "mailvaultd_worker_queue_length"]
    R.report("metrics: one queue length per worker (%d)" % args.workers,
             len(workers) == args.workers, str(workers))
    R.report("metrics: queue depth is the sum of the queues",
             value(after, "mailvaultd_queue_depth") ==
             sum(after[("mailvaultd_worker_queue_length", w)] for w in workers))


def check_histogram(samples, command, answers):
    name = "mailvaultd_imap_command_duration_seconds"
    buckets = sorted(((float(dict(l)["le"]), v) for (n, l), v in samples.items()
                      if n == name + "_bucket" and dict(l).get("command") == command))
    counts = [v for _, v in buckets]
    count = value(samples, name + "_count", command=command)
    R.report("metrics: %s histogram cumulative, +Inf = _count = answers (%d)" % (command, answers),
             len(buckets) > 2 and buckets[-1][0] == float("inf") and counts == sorted(counts)
             and counts[-1] == count and count >= answers
             and value(samples, name + "_sum", command=command) >= 0,
             "buckets %s count %s" % (buckets, count))


def check_http(port):
    r = http(port, b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
    R.report("http: another path is 404", r is not None and r[0] == 404, repr(r))
    r = http(port, b"GET /metricsx HTTP/1.0\r\n\r\n")
    R.report("http: a longer path is 404 too", r is not None and r[0] == 404, repr(r))
    r = http(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    R.report("http: POST is 405", r is not None and r[0] == 405, repr(r))
    r = http(port, b"GARBAGE\r\n\r\n")
    R.report("http: a malformed request line is 400", r is not None and r[0] == 400, repr(r))
    r = http(port, b"GET /metrics HTTP/1.1\r\nX-Long: " + b"a" * 5000)
    R.report("http: a request head over 4 KiB is 400", r is not None and r[0] == 400, repr(r))
    # Silent clients: the limit (16) is taken, so one more is closed at once; each silent
    # one is dropped after the timeout (5 s), after which scrapes work again.
    silent = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(16)]
    time.sleep(0.5)
    try:
        r = http(port, b"GET /metrics HTTP/1.1\r\n\r\n")
    except OSError:
        r = None
    R.report("http: a client beyond 16 at once is closed without an answer", r is None, repr(r))
    start = time.time()
    closed = 0
    for s in silent:
        try:
            if s.recv(1) == b"":
                closed += 1
        except OSError:
            closed += 1
        s.close()
    waited = time.time() - start
    R.report("http: silent clients are dropped after the timeout (%.1f s)" % waited,
             closed == 16 and waited < 25, "closed %d" % closed)  # a socket times out at 30
    status, _, _ = http(port, b"GET /metrics HTTP/1.1\r\n\r\n")
    R.report("http: scrapes work again once the slots are free", status == 200)


# Relays' trace fields, as real mail has them: without them these messages are smaller than
# four times their structure answers, which the store then does not keep (MV_MEMO_FLOOR).
TRACE = b"Received: from relay.example.org by mx.example.org; Mon, 7 Dec 2026 04:00:00 +0000\r\n" * 12

STRUCTURE_MESSAGES = [TRACE + m for m in [
    b"From: a@example.org\r\nSubject: plain\r\n\r\none line\r\n",
    b"From: a@example.org\r\nSubject: parts\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n--b1\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n\r\ntext\r\n--b1\r\n"
    b"Content-Type: application/pdf; name=\"x.pdf\"\r\n"
    b"Content-Disposition: attachment; filename=\"x.pdf\"\r\n"
    b"Content-Transfer-Encoding: base64\r\n\r\nAAAA\r\n--b1--\r\n",
    # an attached message whose envelope has UTF-8: its ENVELOPE inside BODYSTRUCTURE is
    # written one way for UTF8=ACCEPT sessions and another for the rest
    b"From: a@example.org\r\nSubject: fwd\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: message/rfc822\r\n\r\nFrom: \"J\xc3\xbcrgen\" <j@example.org>\r\n"
    b"Subject: Gr\xc3\xbc\xc3\x9fe\r\n\r\ninner\r\n",
]]


def structures(c, what):
    """{sequence number: the FETCH line} of one FETCH of every message."""
    untagged, tagged = c.command("FETCH 1:* %s" % what)
    return {t.split(b" ")[1]: t for t, _ in untagged if b" FETCH " in t}, tagged


def check_structure_cache(args):
    """FETCH BODYSTRUCTURE / BODY answers kept per open store (imapd/imap_structure_cache.c):
    the second FETCH of a message's structure, in the same session or another, is answered
    from the cache (a hit, the message not read) and byte for byte as the first; BODY and a
    UTF8=ACCEPT session have answers of their own."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("CREATE structure")
    for m in STRUCTURE_MESSAGES:
        a.command("APPEND structure", m)
    a.command("SELECT structure")
    _, _, s0 = scrape(args.metrics)
    first, t1 = structures(a, "(BODYSTRUCTURE)")
    _, _, s1 = scrape(args.metrics)
    again, t2 = structures(a, "(BODYSTRUCTURE)")
    _, _, s2 = scrape(args.metrics)
    n = len(STRUCTURE_MESSAGES)
    name = "mailvaultd_structure_cache_lookups_total"
    R.report("structure cache: the first FETCH BODYSTRUCTURE misses and keeps each answer",
             b" OK" in t1 and len(first) == n and delta(s0, s1, name, result="miss") == n
             and delta(s0, s1, name, result="hit") == 0,
             "%r %r" % (t1, [delta(s0, s1, name, result=r) for r in ("hit", "miss")]))
    R.report("structure cache: the second is answered from it, byte for byte as the first",
             b" OK" in t2 and again == first and delta(s1, s2, name, result="hit") == n
             and delta(s1, s2, name, result="miss") == 0,
             "%r %r" % (t2, [delta(s1, s2, name, result=r) for r in ("hit", "miss")]))
    R.report("structure cache: its bytes are reported",
             value(s2, "mailvaultd_structure_cache_bytes") > 0)
    # kept answers beside the whole message: the message goes out as one literal, as stored
    untagged, t5 = a.command("FETCH 1:* (BODYSTRUCTURE BODY.PEEK[])")
    _, _, s2b = scrape(args.metrics)
    literals = [lit for _, lits in untagged for lit in lits]
    R.report("structure cache: a kept BODYSTRUCTURE beside BODY.PEEK[]: every message whole",
             b" OK" in t5 and all(m in literals for m in STRUCTURE_MESSAGES)
             and delta(s2, s2b, name, result="hit") == n, repr(t5))
    s2 = s2b
    b = imapd_common.imap_login(args.imap, user, password, 30)
    b.command("EXAMINE structure")
    both, t3 = structures(b, "(BODY BODYSTRUCTURE)")
    _, _, s3 = scrape(args.metrics)
    R.report("structure cache: another session finds BODYSTRUCTURE, BODY is its own answer",
             b" OK" in t3 and delta(s2, s3, name, result="hit") == n
             and delta(s2, s3, name, result="miss") == n
             and all(first[k].split(b" BODYSTRUCTURE ", 1)[1][:-1] in both[k] for k in first),
             "%r %r" % (t3, [delta(s2, s3, name, result=r) for r in ("hit", "miss")]))
    body_again, _ = structures(b, "(BODY BODYSTRUCTURE)")
    R.report("structure cache: BODY answered from it the second time, the same bytes",
             body_again == both)
    u = imapd_common.imap_login(args.imap, user, password, 30)
    _, te = u.command("ENABLE UTF8=ACCEPT")
    u.command("EXAMINE structure")
    _, _, s4 = scrape(args.metrics)
    utf8, t4 = structures(u, "(BODYSTRUCTURE)")
    _, _, s5 = scrape(args.metrics)
    R.report("structure cache: a UTF8=ACCEPT session's answers are its own (the attached "
             "message's envelope differs)",
             b" OK" in te and b" OK" in t4 and delta(s4, s5, name, result="miss") == n
             and utf8[b"3"] != first[b"3"] and utf8[b"1"] == first[b"1"],
             "%r %r" % (utf8.get(b"3"), first.get(b"3")))
    # MEMOS: the answers made are saved in the store between jobs, though these sessions only
    # read (imapd/imap_structure_save.c); polled, the worker does it after a quiet moment
    saved = "mailvaultd_structure_memos_saved_total"
    made = value(s5, name, result="miss")
    deadline = time.monotonic() + 30
    s6 = s5
    while value(s6, saved) < made and time.monotonic() < deadline:
        time.sleep(0.05)
        _, _, s6 = scrape(args.metrics)
    R.report("structure memos: every answer made is saved in the store between jobs",
             made == 3 * n and value(s6, saved) == made,
             "made %r, saved %r" % (made, value(s6, saved)))
    if args.answers:
        with open(args.answers, "w", encoding="latin-1") as f:
            json.dump({"BODYSTRUCTURE": answers(first), "BODY BODYSTRUCTURE": answers(both),
                       "utf8": answers(utf8)}, f)
    for c in (a, b, u):
        c.command("LOGOUT")
        c.close()


def big_part(n):
    """n bytes of base64-looking lines (deterministic): a part the store keeps apart."""
    line = bytes((65 + (i * 7) % 26) for i in range(76)) + b"\r\n"
    return line * (n // len(line) + 1)


# Messages with parts of 128 KiB and more, which the store keeps apart from the skeleton
SKELETON_MESSAGES = [
    b"From: a@example.org\r\nSubject: big\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: multipart/mixed; boundary=\"s1\"\r\n\r\n--s1\r\n"
    b"Content-Type: text/plain\r\n\r\nsee the file\r\n--s1\r\n"
    b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n"
    + big_part(150000) + b"--s1--\r\n",
    b"From: a@example.org\r\nSubject: fwd big\r\nMIME-Version: 1.0\r\n"
    b"Content-Type: message/rfc822\r\n\r\nFrom: b@example.org\r\nSubject: inner\r\n"
    b"Content-Type: text/plain\r\n\r\n" + big_part(140000),
]


def check_structure_skeleton(args):
    """BODYSTRUCTURE of messages with parts stored apart is made from their skeletons (the
    parts neither read nor parsed: imap_mime_open_skeleton), also beside ENVELOPE (from the
    header alone), byte for byte what the whole message gives: a UTF8=ACCEPT session (answers
    of its own, the same for ASCII) that also asks for a piece of the text reads them whole."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("CREATE skeleton")
    for m in SKELETON_MESSAGES:
        a.command("APPEND skeleton", m)
    a.command("EXAMINE skeleton")
    made = "mailvaultd_structure_made_total"
    n = len(SKELETON_MESSAGES)
    _, _, s0 = scrape(args.metrics)
    skel, t1 = structures(a, "(BODYSTRUCTURE)")
    _, _, s1 = scrape(args.metrics)
    R.report("skeleton: BODYSTRUCTURE of messages with big parts made without reading them",
             b" OK" in t1 and len(skel) == n and delta(s0, s1, made, read="skeleton") == n
             and delta(s0, s1, made, read="whole") == 0,
             "%r %r" % (t1, [delta(s0, s1, made, read=r) for r in ("skeleton", "whole")]))
    body, t3 = structures(a, "(ENVELOPE BODY)")
    _, _, s1b = scrape(args.metrics)
    R.report("skeleton: BODY beside ENVELOPE made from the skeletons too, the envelope there",
             b" OK" in t3 and delta(s1, s1b, made, read="skeleton") == n
             and delta(s1, s1b, made, read="whole") == 0
             and all(b" ENVELOPE (" in body[k] for k in body) and b' "inner" ' in body[b"2"],
             "%r %r" % (body, [delta(s1, s1b, made, read=r) for r in ("skeleton", "whole")]))
    s1 = s1b
    u = imapd_common.imap_login(args.imap, user, password, 30)
    u.command("ENABLE UTF8=ACCEPT")
    u.command("EXAMINE skeleton")
    whole, t2 = structures(u, "(BODYSTRUCTURE BODY.PEEK[TEXT]<0.1>)")
    _, _, s2 = scrape(args.metrics)

    def bodystructure(line):
        if b" BODYSTRUCTURE " not in line:
            return None
        answer = line.split(b" BODYSTRUCTURE ", 1)[1]
        return answer.split(b" BODY[TEXT]", 1)[0] if b" BODY[TEXT]" in answer else answer[:-1]
    R.report("skeleton: the same answers as from the whole messages",
             b" OK" in t2 and delta(s1, s2, made, read="whole") == n
             and all(bodystructure(skel[k]) == bodystructure(whole[k]) for k in skel)
             and all(bodystructure(skel[k]) is not None for k in skel),
             "%r\n%r" % (skel, whole))
    # the sizes are the parts' own: the attachment's encoded octets (the line break before
    # the delimiter is the delimiter's), the attached message's
    R.report("skeleton: the parts' sizes as in the messages",
             (b" %d " % (len(big_part(150000)) - 2)) in skel[b"1"]
             and (b" %d " % (len(SKELETON_MESSAGES[1]) - SKELETON_MESSAGES[1].index(b"\r\n\r\n")
                             - 4)) in skel[b"2"], repr(skel))
    for c in (a, u):
        c.command("LOGOUT")
        c.close()


# Pieces of messages a client asks for (previews, parts, MIME headers), all outside the
# parts stored apart in SKELETON_MESSAGES[0] (its text part, its attachment's MIME header)
SPARSE_SECTIONS = ["BODY.PEEK[TEXT]<0.100>", "BODY.PEEK[]<0.200>", "BODY.PEEK[1]<0.5>",
                   "BODY.PEEK[1]", "BODY.PEEK[1.MIME]", "BODY.PEEK[2.MIME]", "BODY.PEEK[3]",
                   "BODY.PEEK[HEADER.FIELDS (Subject)]"]


def check_sections_skeleton(args):
    """FETCH body sections of a message with parts stored apart, when every byte they
    answer with lies outside those parts, come from the skeleton (imap_fetch_sparse_copy: the
    attachment not read), byte for byte what the whole message gives; a section that
    reaches into the attachment (its content, a partial that starts inside it) is read
    whole. Before, every such section read the whole message."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("EXAMINE skeleton")  # made by check_structure_skeleton
    name = "mailvaultd_fetch_sections_read_total"
    msg = SKELETON_MESSAGES[0]
    head = msg.index(b"\r\n\r\n") + 4
    want = {"BODY.PEEK[TEXT]<0.100>": msg[head:head + 100], "BODY.PEEK[]<0.200>": msg[:200],
            "BODY.PEEK[1]<0.5>": b"see t", "BODY.PEEK[1]": b"see the file",
            "BODY.PEEK[1.MIME]": b"Content-Type: text/plain\r\n\r\n",
            "BODY.PEEK[2.MIME]": b"Content-Type: application/octet-stream\r\n"
                                 b"Content-Transfer-Encoding: base64\r\n\r\n",
            "BODY.PEEK[HEADER.FIELDS (Subject)]": b"Subject: big\r\n\r\n"}
    _, _, s0 = scrape(args.metrics)
    untagged, tagged = a.command("FETCH 1 (%s)" % " ".join(SPARSE_SECTIONS))
    _, _, s1 = scrape(args.metrics)
    got = untagged[0][1] if untagged else []
    # BODY[3] is no such part: NIL, no literal; the others' literals in order
    expect = [want[k] for k in SPARSE_SECTIONS if k in want]
    R.report("sections: previews, parts and MIME headers outside the attachment come from the "
             "skeleton, the exact bytes",
             b" OK" in tagged and got == expect and b"BODY[3] NIL" in untagged[0][0]
             and delta(s0, s1, name, read="skeleton") == 1 and delta(s0, s1, name, read="whole") == 0,
             "%r %r %r" % (tagged, [g[:40] for g in got],
                           [delta(s0, s1, name, read=r) for r in ("skeleton", "whole")]))
    inside = ["BODY.PEEK[2]<0.10>", "BODY.PEEK[]<%d.10>" % (msg.index(big_part(10)[:20]) + 5)]
    for section in inside:
        _, _, s2 = scrape(args.metrics)
        untagged, tagged = a.command("FETCH 1 (%s)" % section)
        _, _, s3 = scrape(args.metrics)
        got = untagged[0][1] if untagged else []
        R.report("sections: %s reaches into the attachment: read whole, the exact bytes" % section,
                 b" OK" in tagged and got == [big_part(10)[:10] if "[2]" in section
                                              else big_part(20)[5:15]]
                 and delta(s2, s3, name, read="whole") == 1
                 and delta(s2, s3, name, read="skeleton") == 0,
                 "%r %r" % (tagged, got))
    # the attached message: its inner header from the skeleton, its body (stored apart) whole
    _, _, s4 = scrape(args.metrics)
    untagged, tagged = a.command("FETCH 2 (BODY.PEEK[1.HEADER] BODY.PEEK[HEADER.FIELDS (From)])")
    _, _, s5 = scrape(args.metrics)
    got = untagged[0][1] if untagged else []
    R.report("sections: an attached message's header beside its stored-apart body, from the "
             "skeleton",
             b" OK" in tagged and got == [b"From: b@example.org\r\nSubject: inner\r\n"
                                          b"Content-Type: text/plain\r\n\r\n",
                                          b"From: a@example.org\r\n\r\n"]
             and delta(s4, s5, name, read="skeleton") == 1,
             "%r %r" % (tagged, got))
    a.command("LOGOUT")
    a.close()


def listing_subjects(untagged):
    """{sequence number: the HEADER.FIELDS (Subject) literal} of a FETCH's responses."""
    out = {}
    for line, literals in untagged:
        parts = line.split(b" ")
        if len(parts) > 2 and parts[2] == b"FETCH" and literals:
            out[int(parts[1])] = literals[0]
    return out


def check_sections_from_header(args):
    """FETCH of sections a message of one part's header settles (a part's MIME header, a part
    that is not there, HEADER / TEXT of a part that is no message) reads the header, not the
    message (imap_mime.h, SECTIONS FROM THE HEADER): the same bytes and NILs as from the
    message; a multipart's part headers and part 1's content still come from the message.
    Before, every such section read and decompressed the whole message."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("CREATE oneparts")
    head1 = b"Subject: one\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    head2 = b"Subject: two\r\n\r\n"
    multi = (b"Subject: three\r\nContent-Type: multipart/alternative; boundary=b\r\n\r\n"
             b"--b\r\nContent-Type: text/plain\r\n\r\npart one\r\n"
             b"--b\r\nContent-Type: text/html\r\n\r\n<p>two</p>\r\n--b--\r\n")
    for msg in (head1 + b"hello\r\n", head2 + b"no content type\r\n", multi):
        a.command("APPEND oneparts", msg)
    a.command("EXAMINE oneparts")
    name = "mailvaultd_fetch_sections_read_total"
    _, _, s0 = scrape(args.metrics)
    untagged, tagged = a.command("FETCH 1:3 (BODY.PEEK[1.MIME] BODY.PEEK[2.MIME] "
                                 "BODY.PEEK[1.TEXT] BODY.PEEK[1.1.MIME]<0.9>)")
    _, _, s1 = scrape(args.metrics)
    by = {int(t.split()[1]): (t, lits) for t, lits in untagged if b" FETCH " in t}
    one = [by.get(k, (b"", []))[1] == [h, h[:9]] and b"BODY[2.MIME] NIL" in by[k][0]
           and b"BODY[1.TEXT] NIL" in by[k][0] for k, h in ((1, head1), (2, head2))]
    three = by.get(3, (b"", []))
    R.report("sections: a one-part message's MIME headers and absent parts from its header, "
             "the exact bytes; a multipart's from the message",
             b" OK" in tagged and all(one)
             and three[1] == [b"Content-Type: text/plain\r\n\r\n",
                              b"Content-Type: text/html\r\n\r\n", b"Content-T"]
             and b"BODY[1.TEXT] NIL" in three[0]
             and delta(s0, s1, name, read="header") == 2,
             "%r %r %r" % (tagged, by, delta(s0, s1, name, read="header")))
    untagged, tagged = a.command("FETCH 1:2 (BODY.PEEK[1]<0.3> BODY.PEEK[2.MIME])")
    _, _, s2 = scrape(args.metrics)
    got = [lits for t, lits in untagged if b" FETCH " in t]
    R.report("sections: part 1's content is the body: not from the header",
             b" OK" in tagged and got == [[b"hel"], [b"no "]]
             and delta(s1, s2, name, read="header") == 0,
             "%r %r" % (tagged, got))
    a.command("LOGOUT")
    a.close()


def check_previews_prefix(args):
    """A preview of a long message (BODY.PEEK[TEXT]<0.512>, BODY.PEEK[]<0.2048>,
    BODY.PEEK[1]<0.256> of a message of one part or of a multipart whose part 1 starts within
    the body's first 4 KiB) unpacks only the message's first bytes (imap_fetch.c, PREVIEWS
    FROM THE FIRST BYTES; the store's lead frame; imap_mime.h, A WALK OVER A PREFIX): the
    exact bytes, ENVELOPE beside it; a part the first bytes cannot settle (one that starts
    past them, a MIME header after a long part), a piece past the first 4 KiB and a short
    message are read as before, the same bytes. Before, every preview unpacked the whole
    body."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("CREATE previews")
    text = b"".join(b"line %05d of a long text, as a preview would show it.\r\n" % k
                    for k in range(400))
    single = b"Subject: long one\r\nContent-Type: text/plain\r\n\r\n" + text
    alt = (b"--b\r\nContent-Type: text/plain\r\n\r\n" + text + b"\r\n--b\r\n"
           b"Content-Type: text/html\r\n\r\n<p>" + text + b"</p>\r\n--b--\r\n")
    head = b"Content-Type: multipart/alternative; boundary=b\r\n\r\n"
    multi = b"Subject: long two\r\n" + head + alt
    far = b"Subject: far\r\n" + head + b"a preamble line\r\n" * 400 + alt
    short = b"Subject: short\r\n\r\nhello there\r\n"
    for msg in (single, multi, short, far):
        a.command("APPEND previews", msg)
    a.command("EXAMINE previews")
    name = "mailvaultd_fetch_sections_read_total"

    def body(msg):
        return msg[msg.index(b"\r\n\r\n") + 4:]

    def fetched(untagged):
        return {int(t.split()[1]): lits for t, lits in untagged if b" FETCH " in t}

    _, _, s0 = scrape(args.metrics)
    untagged, tagged = a.command("FETCH 1:4 (BODY.PEEK[TEXT]<0.512> BODY.PEEK[]<0.2048> "
                                 "BODY.PEEK[1]<0.256>)")
    _, _, s1 = scrape(args.metrics)
    got = fetched(untagged)
    want = {1: [body(single)[:512], single[:2048], body(single)[:256]],
            2: [body(multi)[:512], multi[:2048], text[:256]],
            3: [body(short), short, body(short)],
            4: [body(far)[:512], far[:2048], text[:256]]}
    R.report("previews: long messages of one part and multiparts whose part 1 starts early from "
             "their first bytes, the exact bytes; a part past them and a short message as before",
             b" OK" in tagged and got == want and delta(s0, s1, name, read="prefix") == 2,
             "%r %r %r" % (tagged, {k: [len(x) for x in v] for k, v in got.items()},
                           delta(s0, s1, name, read="prefix")))
    untagged, tagged = a.command("FETCH 1:2 (ENVELOPE BODY.PEEK[TEXT]<4000.96>)")
    _, _, s2 = scrape(args.metrics)
    got = [(t, lits) for t, lits in untagged if b" FETCH " in t]
    R.report("previews: up to the first 4 KiB of the body, with ENVELOPE, from the first bytes",
             b" OK" in tagged and [lits for _, lits in got] == [[body(single)[4000:4096]],
                                                                 [body(multi)[4000:4096]]]
             and b'"long one"' in got[0][0] and b'"long two"' in got[1][0]
             and delta(s1, s2, name, read="prefix") == 2,
             "%r %r" % (tagged, got))
    untagged, tagged = a.command("FETCH 1:2 (BODY.PEEK[TEXT]<4000.97> BODY.PEEK[1]<9000.10>)")
    _, _, s3 = scrape(args.metrics)
    got = fetched(untagged)
    R.report("previews: a piece past the first 4 KiB read as before, the exact bytes",
             b" OK" in tagged and got == {1: [body(single)[4000:4097], body(single)[9000:9010]],
                                          2: [body(multi)[4000:4097], text[9000:9010]]}
             and delta(s2, s3, name, read="prefix") == 0,
             "%r %r" % (tagged, got))
    untagged, tagged = a.command("FETCH 2 (BODY.PEEK[1.MIME] BODY.PEEK[2.MIME])")
    _, _, s4 = scrape(args.metrics)
    got = fetched(untagged)
    R.report("previews: a MIME header after a long part read as before, the exact bytes",
             b" OK" in tagged and got == {2: [b"Content-Type: text/plain\r\n\r\n",
                                              b"Content-Type: text/html\r\n\r\n"]}
             and delta(s3, s4, name, read="prefix") == 0,
             "%r %r" % (tagged, got))
    a.command("LOGOUT")
    a.close()


def check_headers_window(args):
    """A FETCH that needs only headers (a client's message list) reads them a window at a
    time by the view's body keys (imap_fetch_headers.c), byte for byte what a read by UID
    gives: every one of 300 messages from the window, a scattered set too, and the rest
    after another session expunged one; headers past the window's byte bound are read by
    UID, the same bytes. Before, every header was read by UID."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("CREATE listing")
    n = 300
    for i in range(1, n + 1):
        a.command("APPEND listing", b"From: n%d@example.org\r\nSubject: listing %d\r\n"
                                    b"Message-ID: <l%d@example.org>\r\n\r\nbody %d\r\n"
                                    % (i, i, i, i))
    a.command("SELECT listing")
    name = "mailvaultd_fetch_headers_read_total"
    want = {i: b"Subject: listing %d\r\n\r\n" % i for i in range(1, n + 1)}
    _, _, s0 = scrape(args.metrics)
    untagged, tagged = a.command("FETCH 1:* (BODY.PEEK[HEADER.FIELDS (Subject)])")
    _, _, s1 = scrape(args.metrics)
    R.report("headers: a listing of 300 messages reads them by windows, the exact bytes",
             b" OK" in tagged and listing_subjects(untagged) == want
             and delta(s0, s1, name, read="window") == n and delta(s0, s1, name, read="uid") == 0,
             "%r %r" % (tagged, [delta(s0, s1, name, read=r) for r in ("window", "uid")]))
    untagged, tagged = a.command("FETCH 250,2,7 (ENVELOPE BODY.PEEK[HEADER.FIELDS (Subject)])")
    _, _, s2 = scrape(args.metrics)
    got = listing_subjects(untagged)
    R.report("headers: a scattered set with ENVELOPE from the window too",
             b" OK" in tagged and got == {k: want[k] for k in (250, 2, 7)}
             and all(b'"listing %d"' % k in line for line, _ in untagged
                     for k in (250, 2, 7) if line.startswith(b"* %d FETCH" % k))
             and delta(s1, s2, name, read="window") == 3,
             "%r %r" % (tagged, got))
    b = imapd_common.imap_login(args.imap, user, password, 30)
    b.command("SELECT listing")
    b.command("STORE 1 +FLAGS.SILENT (\\Deleted)")
    b.command("EXPUNGE")
    untagged, tagged = a.command("FETCH 1:* (BODY.PEEK[HEADER.FIELDS (Subject)])")
    _, _, s3 = scrape(args.metrics)
    got = listing_subjects(untagged)
    R.report("headers: after another session's EXPUNGE (not reported yet) the rest from the "
             "window still (the view's keys hold for them), the same bytes",
             b" OK" in tagged and got == {k: v for k, v in want.items() if k != 1}
             and delta(s2, s3, name, read="window") == n - 1
             and delta(s2, s3, name, read="uid") == 0,
             "%r %r %r" % (tagged, len(got), [delta(s2, s3, name, read=r)
                                               for r in ("window", "uid")]))
    # a window keeps at most IMAP_HEADER_WINDOW_BYTES (1 MiB) of headers: of three of
    # ~600 KB one is kept, the others are read by UID when answered
    a.command("CREATE bigheads")
    filler = b"".join(b"X-Filler-%05d: %s\r\n" % (k, b"f" * 56) for k in range(8500))
    for i in (1, 2, 3):
        a.command("APPEND bigheads", b"Subject: big %d\r\n%s\r\nbody\r\n" % (i, filler))
    a.command("EXAMINE bigheads")
    untagged, tagged = a.command("FETCH 1:* (BODY.PEEK[HEADER.FIELDS (Subject)])")
    _, _, s4 = scrape(args.metrics)
    got = listing_subjects(untagged)
    R.report("headers: past the window's byte bound read by UID, the same bytes",
             b" OK" in tagged and got == {i: b"Subject: big %d\r\n\r\n" % i for i in (1, 2, 3)}
             and len(filler) > 500000
             and delta(s3, s4, name, read="window") == 1 and delta(s3, s4, name, read="uid") == 2,
             "%r %r %r" % (tagged, got, [delta(s3, s4, name, read=r) for r in ("window", "uid")]))
    for c in (a, b):
        c.command("LOGOUT")
        c.close()


def check_fts_backlog(args):
    """New mail's full-text rows are built between commands (worker.c INDEX LATER): 40
    APPENDs of a word no other message has are found by SEARCH BODY and TEXT at once, and
    the backlog's gauge goes back to 0 without another command (polled with a deadline);
    the same searches answer the same after it. Before, the family did not exist (each
    row was built inside its APPEND)."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("CREATE later")
    n = 40
    for i in range(1, n + 1):
        a.command("APPEND later", b"From: l%d@example.org\r\nSubject: later %d\r\n\r\n"
                                  b"zebracrossing lantern %d\r\n" % (i, i, i))
    a.command("SELECT later")

    def found():
        out = []
        for q in ("UID SEARCH BODY zebracrossing", "UID SEARCH TEXT \"crossing lantern 7\""):
            untagged, tagged = a.command(q)
            hits = [w for line, _ in untagged if line.startswith(b"* SEARCH")
                    for w in line.split()[2:]]
            out.append((b" OK" in tagged, len(hits)))
        return out
    want = [(True, n), (True, 1)]
    before = found()
    samples = wait_for(args.metrics,
                       lambda s: value(s, "mailvaultd_fts_backlog_bodies") == 0, 60)
    after = found()
    R.report("fts backlog: new mail found by SEARCH BODY and TEXT before and after its rows",
             before == want and after == want, "%r %r" % (before, after))
    R.report("fts backlog: the gauge goes back to 0 without a command",
             value(samples, "mailvaultd_fts_backlog_bodies") == 0,
             str(value(samples, "mailvaultd_fts_backlog_bodies")))
    a.command("LOGOUT")


def answers(lines):
    """{sequence number: FETCH line} as JSON can hold it."""
    return {k.decode(): v.decode("latin-1") for k, v in lines.items()}


def check_structure_stored(args):
    """After a restart (the server before saved its answers: check_structure_cache), the
    structure cache is empty and every answer comes from the store's memos, byte for byte as
    the server before made it; none is made again."""
    with open(args.answers, encoding="latin-1") as f:
        before = json.load(f)
    user, password = args.user.split(":", 1)
    name = "mailvaultd_structure_cache_lookups_total"
    n = len(STRUCTURE_MESSAGES)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("EXAMINE structure")
    _, _, s0 = scrape(args.metrics)
    first, t1 = structures(a, "(BODYSTRUCTURE)")
    both, t2 = structures(a, "(BODY BODYSTRUCTURE)")
    _, _, s1 = scrape(args.metrics)
    counts = [delta(s0, s1, name, result=r) for r in ("hit", "stored", "miss")]
    if args.stale_tags:
        R.report("structure memos: answers another format wrote are made again, none sent",
                 b" OK" in t1 and b" OK" in t2 and counts == [n, 0, 2 * n], repr(counts))
    else:
        # answers read from the store are not kept in memory: the second FETCH reads them again
        R.report("structure memos: after a restart every answer is read from the store, "
                 "none made", b" OK" in t1 and b" OK" in t2 and counts == [0, 3 * n, 0],
                 repr(counts))
    R.report("structure memos: byte for byte the answers the server before made",
             answers(first) == before["BODYSTRUCTURE"]
             and answers(both) == before["BODY BODYSTRUCTURE"])
    u = imapd_common.imap_login(args.imap, user, password, 30)
    u.command("ENABLE UTF8=ACCEPT")
    u.command("EXAMINE structure")
    utf8, t3 = structures(u, "(BODYSTRUCTURE)")
    _, _, s2 = scrape(args.metrics)
    R.report("structure memos: a UTF8=ACCEPT session's answers too, its own",
             b" OK" in t3 and answers(utf8) == before["utf8"]
             and delta(s1, s2, name, result="stored") == (0 if args.stale_tags else n)
             and delta(s1, s2, name, result="miss") == (n if args.stale_tags else 0))
    for c in (a, u):
        c.command("LOGOUT")
        c.close()

# Messages whose Date headers the SENT* keys read as written: a zone that puts the date on
# another day in UTC either way, none, one that does not parse.
SENT_DATES = [b"Mon, 03 Feb 2020 23:30:00 -0800", b"Tue, 04 Feb 2020 00:30:00 +1400",
              b"Wed, 05 Feb 2020 12:00:00 +0000", None, b"garbage",
              b"Sun, 01 Mar 2015 10:00:00 +0000", b"Thu, 06 Feb 2020 08:00:00 -0500"]
SENT_SEARCHES = ["UID SEARCH SENTON 4-Feb-2020", "UID SEARCH SENTSINCE 4-Feb-2020",
                 "UID SEARCH SENTBEFORE 4-Feb-2020", "UID SEARCH SENTON 1-Mar-2015",
                 "UID SEARCH OR SENTON 3-Feb-2020 SENTON 6-Feb-2020"]


def sent_message(k, date):
    head = b"Date: " + date + b"\r\n" if date is not None else b""
    return head + b"From: a@example.org\r\nSubject: sent %d\r\n\r\nbody %d\r\n" % (k, k)


def sent_answers(c):
    """{search: its UIDs}, and whether every search was OK."""
    got, ok = {}, True
    for q in SENT_SEARCHES:
        untagged, tagged = c.command(q)
        ok = ok and b" OK" in tagged
        got[q] = sorted(int(x) for t, _ in untagged if t.startswith(b"* SEARCH")
                        for x in t.split()[2:])
    return got, ok


def check_sent_days(args):
    """SEARCH SENT* read each message's sent day from the store once (the store's copy in
    memory: imapd/imap_search_sent.c), the days as written in the Date header; the answers
    go to a file for the run after a restart (check_sent_days_saved)."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("CREATE sentdays")
    for k, date in enumerate(SENT_DATES):
        a.command("APPEND sentdays", sent_message(k + 1, date))
    a.command("EXAMINE sentdays")
    name = "mailvaultd_sent_days_read_total"
    _, _, s0 = scrape(args.metrics)
    got, ok = sent_answers(a)
    _, _, s1 = scrape(args.metrics)
    n = len(SENT_DATES)
    R.report("sent days: SENT* as the Date header writes the date, each message's day read "
             "from the store once",
             ok and got[SENT_SEARCHES[0]] == [2] and got[SENT_SEARCHES[1]] == [2, 3, 7]
             and got[SENT_SEARCHES[2]] == [1, 6] and got[SENT_SEARCHES[3]] == [6]
             and got[SENT_SEARCHES[4]] == [1, 7]
             and delta(s0, s1, name, **{"from": "store"}) == n
             and delta(s0, s1, name, **{"from": "saved"}) == 0,
             "%r %r" % (got, delta(s0, s1, name, **{"from": "store"})))
    if args.answers:
        with open(args.answers + ".sent", "w", encoding="utf-8") as f:
            json.dump(got, f)
    a.command("LOGOUT")
    a.close()


def check_sent_days_saved(args):
    """After a restart the sent days come from the copy the server before saved in the store
    at its close (a mailbox memo: imap_search_sent.c, SAVED), none from the messages' rows;
    the same answers; a message delivered since is read from the store, that one alone. With
    the saved copy damaged (--stale-tags: its first byte changed), every day is read from the
    store again and the answers stay the same."""
    with open(args.answers + ".sent", encoding="utf-8") as f:
        before = json.load(f)
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("EXAMINE sentdays")
    name = "mailvaultd_sent_days_read_total"
    n = len(SENT_DATES)
    _, _, s0 = scrape(args.metrics)
    got, ok = sent_answers(a)
    _, _, s1 = scrape(args.metrics)
    saved = delta(s0, s1, name, **{"from": "saved"})
    store = delta(s0, s1, name, **{"from": "store"})
    if args.stale_tags:
        R.report("sent days: a saved copy that does not decode is passed over, every day read "
                 "from the store, the same answers",
                 ok and got == before and saved == 0 and store == n + 1,
                 "%r %r saved %r store %r" % (got, before, saved, store))
    else:
        R.report("sent days: after a restart every day from the saved copy, none from the "
                 "messages' rows, the same answers",
                 ok and got == before and saved == n and store == 0,
                 "%r %r saved %r store %r" % (got, before, saved, store))
        a.command("SELECT sentdays")
        a.command("APPEND sentdays", sent_message(n + 1, b"Tue, 4 Feb 2020 18:00:00 +0100"))
        a.command("NOOP")
        untagged, tagged = a.command("UID SEARCH SENTON 4-Feb-2020")
        _, _, s2 = scrape(args.metrics)
        found = [t for t, _ in untagged if t.startswith(b"* SEARCH")]
        R.report("sent days: a message delivered since is read from the store, alone",
                 b" OK" in tagged and found == [b"* SEARCH 2 %d" % (n + 1)]
                 and delta(s1, s2, name, **{"from": "store"}) == 1,
                 "%r %r" % (found, delta(s1, s2, name, **{"from": "store"})))
        before[SENT_SEARCHES[0]] = [2, n + 1]
        before[SENT_SEARCHES[1]] = [2, 3, 7, n + 1]
        with open(args.answers + ".sent", "w", encoding="utf-8") as f:
            json.dump(before, f)
    a.command("LOGOUT")
    a.close()


# Message-ID fields at the edges of what the copy keeps (imapd/imap_search_msgid.c): first one
# longer than the copy keeps (read from its header at every search; the copy has no bytes
# yet), then plain, folded, two of them, none, a name in other case with a blank before the
# colon, an encoded word.
MSGID_FIELDS = [b"Message-ID: <long-" + b"x" * 1100 + b".m7@example.org>\r\n",
                b"Message-ID: <m1@example.org>\r\n",
                b"Message-ID:\r\n <folded.m2@example.org>\r\n",
                b"Message-ID: <first.m3@example.org>\r\nMessage-ID: <second.m3@example.org>\r\n",
                b"",
                b"message-id : <M5@Example.ORG>\r\n",
                b"Message-ID: =?UTF-8?Q?=3Cencoded.m6@example.org=3E?=\r\n"]
MSGID_SEARCHES = ["UID SEARCH HEADER Message-ID <m1@example.org>",
                  "UID SEARCH HEADER Message-ID folded",
                  "UID SEARCH HEADER MESSAGE-ID \"\"",
                  "UID SEARCH OR HEADER Message-ID second.m3 HEADER message-id m5@example",
                  "UID SEARCH HEADER Message-ID <encoded.m6@",
                  "UID SEARCH HEADER Message-ID long-xxx",
                  "UID SEARCH NOT HEADER Message-ID .m"]
MSGID_WANT = [[2], [3], [1, 2, 3, 4, 6, 7], [4, 6], [7], [1], [2, 5, 6]]


def msgid_message(k, field):
    return field + b"From: a@example.org\r\nSubject: msgid %d\r\n\r\nbody %d\r\n" % (k, k)


def msgid_answers(c):
    """[the UIDs of each MSGID_SEARCHES], and whether every search was OK."""
    got, ok = [], True
    for q in MSGID_SEARCHES:
        untagged, tagged = c.command(q)
        ok = ok and b" OK" in tagged
        got.append(sorted(int(x) for t, _ in untagged if t.startswith(b"* SEARCH")
                          for x in t.split()[2:]))
    return got, ok


def check_msgids(args):
    """SEARCH HEADER Message-ID read each message's Message-ID fields from its header once (the
    store's copy: imapd/imap_search_msgid.c), the answers those of the headers; saved for the
    run after a restart (check_msgids_saved)."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("CREATE msgids")
    for k, field in enumerate(MSGID_FIELDS):
        a.command("APPEND msgids", msgid_message(k + 1, field))
    a.command("EXAMINE msgids")
    name = "mailvaultd_message_ids_read_total"
    _, _, s0 = scrape(args.metrics)
    got, ok = msgid_answers(a)
    again, ok2 = msgid_answers(a)
    _, _, s1 = scrape(args.metrics)
    R.report("Message-IDs: HEADER Message-ID answered as the headers say, each message's "
             "fields read once",
             ok and ok2 and got == MSGID_WANT and again == got
             and delta(s0, s1, name, **{"from": "store"}) == len(MSGID_FIELDS)
             and delta(s0, s1, name, **{"from": "saved"}) == 0,
             "%r %r" % (got, delta(s0, s1, name, **{"from": "store"})))
    a.command("LOGOUT")
    a.close()


def check_msgids_saved(args):
    """After a restart the Message-ID fields come from the copy the server before saved at its
    close (a mailbox memo), none from the headers, the same answers (the long field read from
    its header, as before); a message delivered since is read alone. With the saved copy
    damaged (--stale-tags), every message's fields are read again, the same answers."""
    user, password = args.user.split(":", 1)
    a = imapd_common.imap_login(args.imap, user, password, 30)
    a.command("EXAMINE msgids")
    name = "mailvaultd_message_ids_read_total"
    n = len(MSGID_FIELDS)
    _, _, s0 = scrape(args.metrics)
    got, ok = msgid_answers(a)
    _, _, s1 = scrape(args.metrics)
    saved = delta(s0, s1, name, **{"from": "saved"})
    store = delta(s0, s1, name, **{"from": "store"})
    if args.stale_tags:
        want = [w + [n + 1] if q == MSGID_SEARCHES[2] else w  # the late one has a field
                for q, w in zip(MSGID_SEARCHES, MSGID_WANT)]
        R.report("Message-IDs: a saved copy that does not decode is passed over, every "
                 "message's fields read again, the same answers",
                 ok and got == want and saved == 0 and store == n + 1,
                 "%r saved %r store %r" % (got, saved, store))
    else:
        R.report("Message-IDs: after a restart every message's fields from the saved copy, "
                 "none from the headers, the same answers",
                 ok and got == MSGID_WANT and saved == n and store == 0,
                 "%r saved %r store %r" % (got, saved, store))
        a.command("SELECT msgids")
        a.command("APPEND msgids", msgid_message(n + 1, b"Message-ID: <late.m8@example.org>\r\n"))
        a.command("NOOP")
        untagged, tagged = a.command("UID SEARCH HEADER Message-ID <late.m8@")
        _, _, s2 = scrape(args.metrics)
        found = [t for t, _ in untagged if t.startswith(b"* SEARCH")]
        R.report("Message-IDs: a message delivered since is read from its header, alone",
                 b" OK" in tagged and found == [b"* SEARCH %d" % (n + 1)]
                 and delta(s1, s2, name, **{"from": "store"}) == 1,
                 "%r %r" % (found, delta(s1, s2, name, **{"from": "store"})))
    a.command("LOGOUT")
    a.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--metrics", type=int, required=True)
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--imaps", type=int, default=-1)
    ap.add_argument("--lmtp", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--answers", help="a file for the FETCH answers of the structure checks")
    ap.add_argument("--restarted", action="store_true",
                    help="only the checks of a server started again on the same stores")
    ap.add_argument("--stale-tags", action="store_true",
                    help="with --restarted: the stored answers' tags were changed meanwhile")
    args = ap.parse_args()
    if args.restarted:
        try:
            check_structure_stored(args)
            check_sent_days_saved(args)
            check_msgids_saved(args)
        except Exception as e:  # a crash is a failure, not a silent pass
            R.report("no exception", False, repr(e))
        R.summary()
        return
    try:
        check_format(args.metrics)
        check_counts(args)
        check_structure_cache(args)
        check_structure_skeleton(args)
        check_sections_skeleton(args)
        check_sections_from_header(args)
        check_previews_prefix(args)
        check_headers_window(args)
        check_fts_backlog(args)
        check_sent_days(args)
        check_msgids(args)
        check_http(args.metrics)
    except Exception as e:  # a crash is a failure, not a silent pass
        R.report("no exception", False, repr(e))
    R.summary()


if __name__ == "__main__":
    main()
