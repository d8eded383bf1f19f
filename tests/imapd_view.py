#!/usr/bin/env python3
"""imapd_view.py -- SELECT from the server's cached view (imapd/imap_view_cache.c, issue 13):
whatever changed the mailbox since the view was cached -- this session, another session, the
CLI while the server has the store open, a write that bypasses the change log, a mailbox
deleted and made again, a restored backup -- the next SELECT shows the mailbox as it is:
EXISTS, UIDs in order, flags and keywords (FLAGS names every keyword in use, RFC 3501
7.2.6). The expected state is tracked here from what the test did, not read from the
server. Correctness only, no timing. Run by tests/cli_imapd_view.sh.

USAGE
  imapd_view.py --imap PORT --user ADDR --password-file F --mailvault BIN --db FILE
                --backup-dir DIR --count N
  (MAILVAULT_ROOT is the store root; the INBOX holds N messages, UIDs 1..N, no flags.)

Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import glob
import re
import subprocess
import time

import imapd_common

results = imapd_common.Results()
check = results.report
A = None


def ok(tagged):
    return tagged.split(b" ")[1:2] == [b"OK"]


def login():
    password = open(A.password_file).read()
    return imapd_common.imap_login(A.imap, A.user, password, timeout_s=60)


def select(c, mailbox="INBOX", how="SELECT"):
    """(exists, {uid: set of flags}, [uids in order], FLAGS keywords, UIDVALIDITY)."""
    untagged, tagged = c.command("%s %s" % (how, mailbox))
    texts = [t for t, _ in untagged]
    exists = [int(t.split()[1]) for t in texts if t.endswith(b" EXISTS")]
    flags_line = [t for t in texts if t.startswith(b"* FLAGS (")]
    validity = [int(m.group(1)) for m in (re.search(rb"UIDVALIDITY (\d+)", t) for t in texts) if m]
    if not ok(tagged):
        return None
    listing, order = fetch_flags(c)
    return (exists[0] if exists else None, listing, order,
            set(flags_line[0][9:-1].split()) if flags_line else set(),
            validity[0] if validity else None)


def fetch_flags(c):
    untagged, tagged = c.command("FETCH 1:* (UID FLAGS)")
    listing, order = {}, []
    for text, _ in untagged:
        m = re.match(rb"\* (\d+) FETCH \(UID (\d+) FLAGS \(([^)]*)\)\)", text)
        if m:
            uid = int(m.group(2))
            order.append(uid)
            listing[uid] = set(m.group(3).split()) - {b"\\Recent"}
    return listing, order


def expect(name, got, want):
    """got: select()'s result; want: {uid: set of flags}."""
    if got is None:
        check(name, False, "the SELECT failed")
        return
    exists, listing, order, keywords, _ = got
    uids = sorted(want)
    kw_used = set().union(*want.values()) if want else set()
    kw_used = {k for k in kw_used if not k.startswith(b"\\")}
    problems = []
    if exists != len(want):
        problems.append("EXISTS %s, want %d" % (exists, len(want)))
    if order != uids:
        problems.append("UIDs differ: extra %s missing %s" % (
            sorted(set(order) - set(uids))[:5], sorted(set(uids) - set(order))[:5]))
    wrong = [u for u in uids if listing.get(u) != want[u]]
    if wrong:
        problems.append("flags differ at UIDs %s: %r vs %r" % (
            wrong[:5], listing.get(wrong[0]), want[wrong[0]]))
    if not kw_used <= keywords:
        problems.append("FLAGS lacks %r" % (kw_used - keywords))
    check(name, not problems, "; ".join(problems))


def mv(*args):
    cmd = [A.mailvault] + list(args)
    if args[0] in ("flags", "expunge", "deliver", "backup", "restore"):
        cmd += ["--password-file", A.password_file]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, input=b"" if
                          args[0] != "deliver" else MESSAGE, timeout=120)


MESSAGE = (b"From: cli@example.org\r\nTo: view@example.org\r\nSubject: by the CLI\r\n"
           b"Message-ID: <cli@example.org>\r\n\r\nbody\r\n")


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("--imap", type=int, required=True)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--mailvault", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--backup-dir", required=True)
    ap.add_argument("--count", type=int, required=True)
    A = ap.parse_args()
    want = {u: set() for u in range(1, A.count + 1)}

    a = login()
    expect("the first SELECT lists the mailbox", select(a), want)
    # Changes by this session, then a new session's SELECT (the cache is brought up to date
    # from the change log).
    _, t1 = a.command("STORE 1:3 +FLAGS (\\Flagged $Work)")
    _, t2 = a.command("UID STORE 10 +FLAGS.SILENT (\\Deleted)")
    _, t3 = a.command("EXPUNGE")
    check("STORE, STORE, EXPUNGE answer OK", ok(t1) and ok(t2) and ok(t3))
    for u in (1, 2, 3):
        want[u] |= {b"\\Flagged", b"$Work"}
    del want[10]
    a.command("LOGOUT")
    b = login()
    expect("a new session's SELECT shows this session's flags and expunge", select(b), want)

    # The CLI changes the store while the server has it open (b stays selected).
    r1 = mv("flags", A.user, "20", "--add", "$Later", "\\Seen")
    r2 = mv("flags", A.user, "5", "--add", "\\Deleted")
    r3 = mv("expunge", A.user)
    r4 = mv("deliver", A.user)
    r5 = mv("deliver", A.user)
    check("the CLI flags, expunges and delivers two messages",
          all(r.returncode == 0 for r in (r1, r2, r3, r4, r5)),
          b" | ".join(r.stdout.strip() for r in (r1, r2, r3, r4, r5)).decode(errors="replace"))
    want[20] |= {b"$Later", b"\\Seen"}
    del want[5]
    top = A.count
    want[top + 1] = set()
    want[top + 2] = set()
    c = login()
    expect("SELECT after the CLI's changes (store open meanwhile)", select(c), want)
    expect("EXAMINE shows the same", select(c, how="EXAMINE"), want)
    untagged, tagged = b.command("NOOP")
    texts = [t for t, _ in untagged]
    check("the session selected meanwhile is told (EXPUNGE, EXISTS)",
          ok(tagged) and b"* 5 EXPUNGE" in texts and (b"* %d EXISTS" % len(want)) in texts,
          repr(texts[:6]))

    # A write that bypasses the change log (no modseq, no log row): the cached view's count
    # no longer matches the mailbox's, so it is listed again.
    r = subprocess.run([A.mailvault, "sql", "--kdf-iter", "2", "--password-file",
                        A.password_file, A.db,
                        "DELETE FROM messages WHERE uid = 7 AND mailbox_id = "
                        "(SELECT id FROM mailboxes WHERE name = 'INBOX')"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    check("a row deleted behind the server's back (mailvault sql)", r.returncode == 0,
          r.stdout.decode(errors="replace"))
    del want[7]
    d = login()
    expect("SELECT after a change the log does not show", select(d), want)

    # Another mailbox, and one deleted and made again under the same name.
    d.command("CREATE Other")
    _, t = d.command("COPY 1:4 Other")
    other = select(d, "Other")
    check("SELECT Other after COPY 1:4: 4 messages", ok(t) and other and other[0] == 4,
          repr(other and other[0]))
    expect("SELECT INBOX again", select(d), want)
    validity = other[4] if other else None
    d.command("DELETE Other")
    d.command("CREATE Other")
    _, t = d.command("APPEND Other (\\Draft)", literal=MESSAGE)
    again = select(d, "Other")
    check("Other deleted and made again: 1 message, a new UIDVALIDITY",
          ok(t) and again and again[0] == 1 and again[2] == [1] and again[4] != validity
          and again[1].get(1) == {b"\\Draft"}, repr(again and again[:3]))

    # A restored backup: the snapshot's state, not the cached one.
    r = mv("backup", A.user, A.backup_dir)
    snaps = glob.glob(A.backup_dir + "/*.mvbackup")
    check("a backup while the server has the store open", r.returncode == 0 and len(snaps) == 1,
          r.stdout.decode(errors="replace"))
    snapshot_want = {u: set(f) for u, f in want.items()}
    d.command("SELECT INBOX")
    _, t1 = d.command("STORE 1:* +FLAGS.SILENT (\\Seen $After)")
    _, t2 = d.command("UID STORE 1:3 +FLAGS.SILENT (\\Deleted)")
    _, t3 = d.command("EXPUNGE")
    for u in list(want):
        want[u] |= {b"\\Seen", b"$After"}
    for u in (1, 2, 3):
        del want[u]
    expect("after the changes", select(d), want)
    for s in (b, c, d):
        s.command("LOGOUT")
    # The server closes the store once unused (store_idle_s 1); restore waits for that.
    deadline = time.time() + 60
    while True:
        r = mv("restore", A.user, snaps[0] if snaps else "none")
        if r.returncode == 0 or time.time() > deadline:
            break
        time.sleep(0.5)
    check("restore the snapshot", r.returncode == 0, r.stdout.decode(errors="replace"))
    e = login()
    expect("SELECT after the restore shows the snapshot", select(e), snapshot_want)
    e.command("LOGOUT")
    results.summary()


if __name__ == "__main__":
    results.run(main)
