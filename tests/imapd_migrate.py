#!/usr/bin/env python3
"""imapd_migrate.py -- the client of tests/cli_imapd_migrate.sh: a store of schema version 8
opened by a login; the login answers with the full-text move still to do, SEARCH TEXT/BODY
answer right while it runs and after, the server logs the migration and the move's end, and
/metrics counts it. The server's log is polled (NOOPs in between) with a generous deadline.
"""
import argparse
import re
import time

import imapd_common

R = imapd_common.Results()


def hits(c, criteria):
    untagged, tagged = c.command("UID SEARCH " + criteria)
    found = []
    for text, _ in untagged:
        m = re.match(rb"\* SEARCH(.*)", text)
        if m:
            found += [int(x) for x in m.group(1).split()]
    return b" OK" in tagged, sorted(found)


def log_has(path, text):
    with open(path, errors="replace") as f:
        return text in f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--metrics", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--messages", type=int, required=True)
    a = ap.parse_args()
    user, password = a.user.split(":", 1)
    n = a.messages
    want_alpha = [i for i in range(1, n + 1) if i % 3 == 0]
    want_beta = [i for i in range(1, n + 1) if i % 4 == 1]

    c = imapd_common.imap_login(a.imap, user, password, 60)
    R.report("the login's open logs the migration",
             log_has(a.log, "store migrate %s: schema version 8 -> 16" % user))
    R.report("the full-text move is left for after the login",
             log_has(a.log, "store migrate %s: full-text index: %d rows to move" % (user, n)))
    _, tagged = c.command("SELECT INBOX")
    R.report("SELECT", b" OK" in tagged, tagged.decode(errors="replace"))
    ok, got = hits(c, "TEXT tagalpha")
    R.report("SEARCH TEXT right during the move", ok and got == want_alpha, str(got))
    ok, got = hits(c, "BODY tagbeta")
    R.report("SEARCH BODY right during the move", ok and got == want_beta, str(got))

    deadline = time.monotonic() + 240
    moved = False
    while time.monotonic() < deadline:
        if log_has(a.log, "store migrate %s: full-text index moved in" % user):
            moved = True
            break
        c.command("NOOP")
        time.sleep(0.2)
    R.report("the move ends between commands, and says so in the log", moved)
    ok, got = hits(c, "TEXT tagalpha")
    R.report("SEARCH TEXT right after the move", ok and got == want_alpha, str(got))
    ok, got = hits(c, "BODY tagbeta")
    R.report("SEARCH BODY right after the move", ok and got == want_beta, str(got))
    c.command("LOGOUT")

    import urllib.request
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % a.metrics, timeout=30).read()
    m = re.search(rb"^mailvaultd_stores_migrated_total (\d+)", body, re.M)
    R.report("metrics: one store migrated", m is not None and int(m.group(1)) == 1,
             repr(m and m.group(0)))
    m = re.search(rb"^mailvaultd_stores_migrating (\d+)", body, re.M)
    R.report("metrics: none migrating any more", m is not None and int(m.group(1)) == 0,
             repr(m and m.group(0)))
    R.summary()


if __name__ == "__main__":
    R.run(main)
