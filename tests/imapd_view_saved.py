#!/usr/bin/env python3
"""imapd_view_saved.py -- the saved SELECT view (imapd/imap_view_cache.c, issue 13): the server
saves its cached views in the store when it closes it, and a SELECT after the store is opened
again loads the saved view and brings it up to date from the change log. Whatever happened
in between -- the CLI changing the store while the server was down, APPEND/STORE/EXPUNGE/COPY/
MOVE by IMAP and then a crash (SIGKILL: nothing saved), a row deleted behind the log's back,
saved bytes that do not decode -- the SELECT shows the mailbox as it is. The expected state
is tracked here from what the test did (kept in a JSON file between steps, the shell restarts
the server between them), not read from the server. Correctness only, no timing. Run by
tests/cli_imapd_view.sh.

USAGE
  imapd_view_saved.py --step NAME --state FILE --imap PORT --user ADDR --password-file F
                      --mailvault BIN --db FILE [--count N]
  steps: first (the INBOX holds N messages, UIDs 1..N, no flags), offline, after-restart,
  after-crash, bypass, after-bypass, check

Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import json
import subprocess

import imapd_common
from imapd_view import select, expect, ok

import imapd_view

results = imapd_common.Results()
check = results.report
imapd_view.check = check  # expect() reports here
A = None

MESSAGE = (b"From: saved@example.org\r\nTo: view@example.org\r\nSubject: saved view\r\n"
           b"Message-ID: <saved@example.org>\r\n\r\nbody\r\n")


def login():
    password = open(A.password_file).read()
    return imapd_common.imap_login(A.imap, A.user, password, timeout_s=60)


def mv(*args):
    cmd = [A.mailvault] + list(args)
    if args[0] in ("flags", "expunge", "deliver"):
        cmd += ["--password-file", A.password_file]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          input=MESSAGE if args[0] == "deliver" else b"", timeout=120)


def load():
    with open(A.state) as f:
        raw = json.load(f)
    return {box: {int(u): {x.encode() for x in fl} for u, fl in m.items()}
            for box, m in raw.items()}


def save(state):
    with open(A.state, "w") as f:
        json.dump({box: {str(u): sorted(x.decode() for x in fl) for u, fl in m.items()}
                   for box, m in state.items()}, f)


def expect_all(state, when):
    c = login()
    for box in sorted(state):
        expect("%s: SELECT %s" % (when, box), select(c, box), state[box])
    return c


def step_first():
    inbox = {u: set() for u in range(1, A.count + 1)}
    c = login()
    expect("first SELECT INBOX (listed)", select(c), inbox)
    replies = [c.command(cmd)[1] for cmd in (
        "STORE 1:3 +FLAGS (\\Flagged $Work)", "UID STORE 10 +FLAGS.SILENT (\\Deleted)",
        "EXPUNGE", "CREATE Other", "COPY 1:4 Other", "UID MOVE 11:12 Other")]
    _, t = c.command("APPEND INBOX (\\Seen $New)", literal=MESSAGE)
    replies.append(t)
    check("STORE, EXPUNGE, CREATE, COPY, MOVE, APPEND answer OK", all(ok(t) for t in replies),
          repr([t for t in replies if not ok(t)][:2]))
    for u in (1, 2, 3):
        inbox[u] |= {b"\\Flagged", b"$Work"}
    del inbox[10]
    other = {1: inbox[1], 2: inbox[2], 3: inbox[3], 4: inbox[4], 5: set(), 6: set()}
    other = {u: set(f) for u, f in other.items()}
    del inbox[11], inbox[12]
    inbox[A.count + 1] = {b"\\Seen", b"$New"}
    state = {"INBOX": inbox, "Other": other}
    expect("SELECT Other", select(c, "Other"), other)
    expect("SELECT INBOX again", select(c), inbox)
    c.command("LOGOUT")
    save(state)


def step_offline():
    """The server is down: the CLI changes the store (the change log has it)."""
    state = load()
    inbox = state["INBOX"]
    r = [mv("flags", A.user, "20", "--add", "$Later", "\\Seen"),
         mv("flags", A.user, "5", "--add", "\\Deleted"), mv("expunge", A.user),
         mv("deliver", A.user)]
    check("the CLI flags, expunges and delivers with the server down",
          all(x.returncode == 0 for x in r),
          b" | ".join(x.stdout.strip() for x in r).decode(errors="replace"))
    inbox[20] |= {b"$Later", b"\\Seen"}
    del inbox[5]
    inbox[max(inbox) + 1] = set()
    save(state)


def step_after_restart():
    state = load()
    c = expect_all(state, "after a restart and the CLI's changes")
    inbox, other = state["INBOX"], state["Other"]
    c.command("SELECT INBOX")
    replies = [c.command(cmd)[1] for cmd in (
        "STORE 1:* +FLAGS.SILENT (\\Answered)", "UID STORE 2 +FLAGS.SILENT (\\Deleted)",
        "EXPUNGE", "UID COPY 3 Other", "UID MOVE 4 Other")]
    _, t = c.command("APPEND INBOX (\\Draft)", literal=MESSAGE)
    replies.append(t)
    check("STORE 1:*, EXPUNGE, COPY, MOVE, APPEND answer OK", all(ok(t) for t in replies),
          repr([t for t in replies if not ok(t)][:2]))
    for u in inbox:
        inbox[u] |= {b"\\Answered"}
    del inbox[2]
    top = max(other)
    other[top + 1] = set(inbox[3])
    other[top + 2] = set(inbox[4])
    del inbox[4]
    inbox[max(inbox) + 1] = {b"\\Draft"}
    expect("SELECT INBOX after the changes", select(c), inbox)
    c.command("LOGOUT")
    save(state)


def step_check():
    state = load()
    c = expect_all(state, A.when)
    c.command("LOGOUT")


def step_bypass():
    """The server is down: a row deleted without the change log (mailvault sql)."""
    state = load()
    victim = sorted(state["INBOX"])[len(state["INBOX"]) // 2]
    r = subprocess.run([A.mailvault, "sql", "--kdf-iter", "2", "--password-file",
                        A.password_file, A.db,
                        "DELETE FROM messages WHERE uid = %d AND mailbox_id = "
                        "(SELECT id FROM mailboxes WHERE name = 'INBOX')" % victim],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    check("a row deleted behind the log's back", r.returncode == 0,
          r.stdout.decode(errors="replace"))
    del state["INBOX"][victim]
    save(state)


def step_garble():
    """The server is down: the saved views' bytes replaced by ones that do not decode."""
    r = subprocess.run([A.mailvault, "sql", "--kdf-iter", "2", "--password-file",
                        A.password_file, A.db,
                        "UPDATE mailbox_views SET data = x'4d5656330aff01'"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    check("the saved views garbled", r.returncode == 0, r.stdout.decode(errors="replace"))


def step_not_bytes():
    """The server is down: the saved views' bytes replaced by text whose characters are fewer
    than its bytes, which no save writes: the load refuses it (a damaged row)."""
    r = subprocess.run([A.mailvault, "sql", "--kdf-iter", "2", "--password-file",
                        A.password_file, A.db,
                        "UPDATE mailbox_views SET data = 'h' || char(233) || 'llo'"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    check("the saved views made text", r.returncode == 0, r.stdout.decode(errors="replace"))


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("--step", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--imap", type=int, default=0)
    ap.add_argument("--user", required=True)
    ap.add_argument("--password-file", required=True)
    ap.add_argument("--mailvault", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--when", default="")
    A = ap.parse_args()
    imapd_view.A = A
    {"first": step_first, "offline": step_offline, "after-restart": step_after_restart,
     "check": step_check, "bypass": step_bypass, "garble": step_garble,
     "not-bytes": step_not_bytes}[A.step]()
    results.summary()


if __name__ == "__main__":
    results.run(main)
