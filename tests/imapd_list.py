#!/usr/bin/env python3
"""imapd_list.py -- mailvaultd's LIST-EXTENDED (RFC 5258), LIST-STATUS (RFC 5819),
CREATE-SPECIAL-USE and the SPECIAL-USE selection option (RFC 6154), and IDLE told promptly of
changes made by another process (the mailvault CLI). Run by tests/cli_imapd_list.sh, which
makes the users and starts the server.

USAGE
  imapd_list.py --imap PORT --mv PATH --user ADDR:PASSWORD --password-file FILE
                --user2 ADDR:PASSWORD        (FILE holds the first user's password)
  (MAILVAULT_ROOT and MAILVAULT_KDF_ITER in the environment, as the server's.)

WHAT IT CHECKS
  - the capabilities after login;
  - a hierarchy with a level that has no mailbox (its parent deleted): basic LIST "%" gives it
    \\Noselect, the extended form \\NonExistent, "*" does not list it; \\HasChildren and
    \\HasNoChildren everywhere; '*' and '%' patterns, INBOX in any case, and a pattern that
    would make a backtracking matcher take forever;
  - (SUBSCRIBED) lists exactly what LSUB lists, with \\Subscribed; (SUBSCRIBED RECURSIVEMATCH)
    adds unsubscribed (and non-existent) parents of subscribed mailboxes with
    ("CHILDINFO" ("SUBSCRIBED")), and only them; RETURN (SUBSCRIBED) marks without
    selecting; several patterns in parentheses; (SPECIAL-USE) lists exactly the mailboxes
    with a use; RETURN (CHILDREN SPECIAL-USE) is accepted;
  - RETURN (STATUS (...)): a STATUS right after the LIST of each existing mailbox, none for a
    \\NonExistent one, the numbers STATUS gives; HIGHESTMODSEQ too;
  - a deep hierarchy with a middle level that has no mailbox, names sharing a head, a
    subscription deep under no mailbox, children of INBOX: the names LIST keeps for a pattern
    (its head, one level below it) give every \\HasChildren and CHILDINFO; names with bytes
    below the wildcards under a head, and a head no name begins with;
  - BAD for RECURSIVEMATCH alone, unknown options, LSUB with options, STATUS twice;
  - CREATE (USE (...)): a use another mailbox holds, an unknown one, \\All, two uses: NO
    [USEATTR] and no mailbox made; a free use: created with it (case-insensitive), listed by
    (SPECIAL-USE); USE () makes a plain mailbox; an unknown parameter is BAD;
  - IDLE: `mailvault deliver` from another process into the IDLE session's mailbox: the
    EXISTS arrives within IDLE_PUSH_S (10 s: the fallback poll is 30 s, and a loaded machine
    under ASan may take seconds); an import of 40 messages: the final EXISTS within
    IDLE_PUSH_S of its end, in fewer responses than messages; IDLE again after
    DONE still hears (the watch was dropped and made again); a second user's IDLE in the same
    domain directory hears nothing of the first user's delivery; then DONE answers.
  Prints "PASS ..." / "FAIL ..." and, last, "# N passed, N failed".
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import imapd_common

results = imapd_common.Results()
check = results.report


login = imapd_common.imap_login


def lists(untagged):
    """{name: (attributes set, extended data bytes)} of the * LIST lines, in order too."""
    out, order = {}, []
    for text, _ in untagged:
        m = re.match(rb'\* LIST \(([^)]*)\) "/" ("(?:[^"\\]|\\.)*"|[^ ]+)(?: (.*))?$', text)
        if m:
            name = m.group(2).strip(b'"').decode()
            out[name] = (set(m.group(1).decode().split()), m.group(3) or b"")
            order.append(name)
    return out, order


def status_of(untagged):
    """[(name, {item: number})] of the * STATUS lines, in order."""
    out = []
    for text, _ in untagged:
        m = re.match(rb'\* STATUS ("(?:[^"\\]|\\.)*"|[^ ]+) \(([^)]*)\)$', text)
        if m:
            words = m.group(2).decode().split()
            out.append((m.group(1).strip(b'"').decode(),
                        {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}))
    return out


def ok(tagged):
    return tagged.split(b" ")[1:2] == [b"OK"]


def message(subject):
    return ("From: a@example.org\r\nTo: alice@example.org\r\nSubject: %s\r\n"
            "Message-ID: <%s@example.org>\r\n\r\nbody of %s\r\n" % (subject, subject, subject)).encode()


def test_list(c):
    untagged, tagged = c.command("CAPABILITY")
    caps = untagged[0][0].split() if untagged else []
    for cap in (b"LIST-EXTENDED", b"LIST-STATUS", b"CREATE-SPECIAL-USE", b"SPECIAL-USE"):
        check("capability %s" % cap.decode(), cap in caps, repr(untagged))

    for name in ("Work/Projects/A", "Work/Old", "Fruit/Apple", "Fruit/Banana"):
        _, tagged = c.command('CREATE "%s"' % name)
        check("CREATE %s" % name, ok(tagged), repr(tagged))
    _, tagged = c.command("DELETE Fruit")
    check("DELETE a parent (its children stay)", ok(tagged), repr(tagged))
    for name in ("Work/Projects/A", "Fruit/Banana", "INBOX"):
        _, tagged = c.command('SUBSCRIBE "%s"' % name)
    for name in ("Work", "Work/Projects", "Work/Old", "Fruit/Apple"):
        c.command('UNSUBSCRIBE "%s"' % name)

    u, t = c.command('LIST "" "%"')
    got, _ = lists(u)
    check("basic LIST %: a level without a mailbox is \\Noselect \\HasChildren",
          got.get("Fruit", (set(),))[0] == {"\\Noselect", "\\HasChildren"}, repr(got.get("Fruit")))
    check("basic LIST %: \\HasChildren / \\HasNoChildren",
          "\\HasChildren" in got.get("Work", (set(),))[0] and
          "\\HasNoChildren" in got.get("INBOX", (set(),))[0], repr(got))
    u, t = c.command('LIST () "" "%"')
    got, _ = lists(u)
    check("LIST () %: the level is \\NonExistent",
          got.get("Fruit", (set(),))[0] == {"\\NonExistent", "\\HasChildren"}, repr(got.get("Fruit")))
    u, t = c.command('LIST "" "*"')
    got, order = lists(u)
    check("LIST *: no level without a mailbox, every mailbox, in order",
          "Fruit" not in got and "Fruit/Apple" in got and "Work/Projects/A" in got and
          order == sorted(order), repr(order))

    u, t = c.command('LSUB "" "*"')
    lsub = {re.match(rb'\* LSUB \([^)]*\) "/" "?([^"]*)"?$', x[0]).group(1).decode() for x in u}
    u, t = c.command('LIST (SUBSCRIBED) "" "*"')
    got, _ = lists(u)
    check("LIST (SUBSCRIBED) lists what LSUB lists", set(got) == lsub and
          {"Work/Projects/A", "Fruit/Banana", "INBOX"} <= lsub and "Work" not in lsub,
          "%r vs %r" % (sorted(got), sorted(lsub)))
    check("LIST (SUBSCRIBED): each is \\Subscribed",
          all("\\Subscribed" in a for a, _ in got.values()), repr(got))
    u, t = c.command('LIST (SUBSCRIBED RECURSIVEMATCH) "" "%"')
    got, _ = lists(u)
    check("RECURSIVEMATCH: Work (unsubscribed) with CHILDINFO",
          "Work" in got and got["Work"][1] == b'("CHILDINFO" ("SUBSCRIBED"))' and
          "\\Subscribed" not in got["Work"][0], repr(got.get("Work")))
    check("RECURSIVEMATCH: Fruit (no mailbox) \\NonExistent with CHILDINFO",
          "Fruit" in got and "\\NonExistent" in got["Fruit"][0] and b"CHILDINFO" in got["Fruit"][1],
          repr(got.get("Fruit")))
    check("RECURSIVEMATCH: INBOX subscribed, no CHILDINFO; nothing else but the subscribed",
          "INBOX" in got and got["INBOX"][1] == b"" and
          all("\\Subscribed" in a or x for a, x in got.values()), repr(got))
    u, t = c.command('LIST (SUBSCRIBED) "" "%"')
    got, _ = lists(u)
    check("(SUBSCRIBED) without RECURSIVEMATCH: no parents of subscribed mailboxes",
          "Work" not in got and "Fruit" not in got and "INBOX" in got, repr(got))

    u, t = c.command('LIST "" "*" RETURN (SUBSCRIBED CHILDREN)')
    got, _ = lists(u)
    check("RETURN (SUBSCRIBED): marks, does not select",
          "\\Subscribed" in got.get("Fruit/Banana", (set(),))[0] and "Work/Old" in got and
          "\\Subscribed" not in got["Work/Old"][0], repr(got))
    u, t = c.command('LIST "" ("INBOX" "Work/%" {3+}\r\nNo*)')
    got, order = lists(u)
    check("several patterns (one a literal)", order == ["INBOX", "Work/Old", "Work/Projects"],
          repr(order))
    for pattern, want in (("W*/A", ["Work/Projects/A"]), ("%/A", []),
                          ("%/%/A", ["Work/Projects/A"]), ("*o*%", ["Work", "Work/Old", "Work/Projects",
                                                          "Work/Projects/A"]),  # not INBOX: case
                          ("inbox", ["INBOX"]), ("Fruit/%", ["Fruit/Apple", "Fruit/Banana"])):
        u, t = c.command('LIST "" "%s"' % pattern)
        check("LIST pattern %s" % pattern, lists(u)[1] == want, repr(lists(u)[1]))
    c.command("CREATE %s" % ("a" * 200))
    start = time.monotonic()
    u, t = c.command('LIST "" "%s"' % ("*a" * 14 + "*b"))
    check("a backtracking pattern against a long name answers at once",
          ok(t) and not u and time.monotonic() - start < 10,  # backtracking: hours
          "%.1f s" % (time.monotonic() - start))
    c.command("DELETE %s" % ("a" * 200))
    u, t = c.command('LIST (SPECIAL-USE) "" "*" RETURN (SPECIAL-USE CHILDREN)')
    got, _ = lists(u)
    uses = {n: [a for a in attrs if a in ("\\Sent", "\\Drafts", "\\Trash", "\\Junk", "\\Archive")]
            for n, (attrs, _) in got.items()}
    check("(SPECIAL-USE): exactly the mailboxes with a use",
          uses == {"Archive": ["\\Archive"], "Drafts": ["\\Drafts"], "Junk": ["\\Junk"],
                   "Sent": ["\\Sent"], "Trash": ["\\Trash"]}, repr(uses))

    # LIST-STATUS
    for i, flags in enumerate(("(\\Seen)", "()", "()")):
        c.command("APPEND INBOX %s" % flags, message("status%d" % i), plus=True)
    u, t = c.command("STATUS INBOX (MESSAGES UNSEEN UIDNEXT UIDVALIDITY)")
    plain = status_of(u)
    u, t = c.command('LIST "" "%" RETURN (STATUS (MESSAGES UNSEEN UIDNEXT UIDVALIDITY))')
    got, order = lists(u)
    st = status_of(u)
    seq = [(x[0][2:6], x[0]) for x in u]
    follows = True
    for i, (kind, text) in enumerate(seq):
        if kind == b"STAT":
            name = status_of([(text, [])])[0][0]
            prev = lists([u[i - 1]])[0] if i > 0 else {}
            follows &= name in prev
    check("LIST-STATUS: each STATUS right after its LIST", follows and len(st) > 0, repr(seq))
    check("LIST-STATUS: the numbers STATUS gives",
          plain and dict(st).get("INBOX") == plain[0][1] and plain[0][1]["MESSAGES"] == 3 and
          plain[0][1]["UNSEEN"] == 2, "%r vs %r" % (st, plain))
    check("LIST-STATUS: none for a \\NonExistent level, one per mailbox",
          "Fruit" not in dict(st) and set(dict(st)) == set(got) - {"Fruit"}, repr(st))
    u, t = c.command('LIST "" INBOX RETURN (STATUS (HIGHESTMODSEQ RECENT))')
    st = status_of(u)
    # RECENT: the three messages no session has selected yet (RFC 3501 2.3.2)
    check("LIST-STATUS HIGHESTMODSEQ", ok(t) and st and "HIGHESTMODSEQ" in st[0][1] and
          st[0][1].get("RECENT") == 3, repr(u))

    for bad in ('LIST (RECURSIVEMATCH) "" "*"', 'LIST (BOGUS) "" "*"',
                'LIST "" "*" RETURN (BOGUS)', 'LSUB (SUBSCRIBED) "" "*"',
                'LIST "" "*" RETURN (STATUS (MESSAGES) STATUS (UNSEEN))',
                'LIST "" ()', 'LIST "" "*" RETURN (STATUS (SIZE))'):
        _, t = c.command(bad)
        check("BAD: %s" % bad, t.split(b" ")[1] == b"BAD", repr(t))


def test_create_special_use(c):
    for name, use in (("Saved", "\\Archive"), ("Saved", "\\Bogus"), ("Saved", "\\All"),
                      ("Saved", "\\Junk \\Trash")):
        _, t = c.command("CREATE %s (USE (%s))" % (name, use))
        u, _ = c.command('LIST "" Saved')
        check("CREATE (USE (%s)) while Archive has \\Archive: NO [USEATTR], nothing made" % use,
              t.split(b" ")[1] == b"NO" and b"[USEATTR]" in t and not u, repr(t))
    _, t = c.command("DELETE Archive")
    _, t = c.command("CREATE Saved (USE (\\archive))")
    u, _ = c.command('LIST "" Saved')
    got, _ = lists(u)
    check("CREATE (USE (\\archive)) once the use is free", ok(t) and
          got.get("Saved", (set(),))[0] >= {"\\Archive"}, "%r %r" % (t, u))
    u, _ = c.command('LIST (SPECIAL-USE) "" "*"')
    check("(SPECIAL-USE) lists the new one", "Saved" in lists(u)[0], repr(u))
    _, t = c.command("CREATE Plain (USE ())")
    u, _ = c.command('LIST "" Plain')
    check("CREATE (USE ()): a plain mailbox", ok(t) and lists(u)[0].get("Plain", (None,))[0] ==
          {"\\HasNoChildren"}, repr(u))
    _, t = c.command("CREATE Other (FOO (\\Sent))")
    check("CREATE with an unknown parameter: BAD", t.split(b" ")[1] == b"BAD", repr(t))
    _, t = c.command("CREATE Saved (USE ())")
    check("CREATE (USE ()) of an existing name: NO [ALREADYEXISTS]", b"NO [ALREADYEXISTS]" in t,
          repr(t))


def test_list_deep(c):
    """A deep hierarchy with a level that has no mailbox in its middle, names that share a
    head with it, a subscription deep under no mailbox, and children of INBOX: LIST reads only
    the names under a pattern's head, and for patterns without '*' only one level below the
    deepest pattern (imap_cmd_mailbox.c imap_list_filter), so every answer here depends on
    the names it keeps."""
    for name in ("Deep/a/b/c/d", "Deep-x", "Deeper", "INBOX/s/t"):
        _, tagged = c.command('CREATE "%s"' % name)
        check("deep: CREATE %s" % name, ok(tagged), repr(tagged))
    _, tagged = c.command('DELETE "Deep/a/b"')
    check("deep: DELETE a middle level (its children stay)", ok(tagged), repr(tagged))
    _, tagged = c.command('SUBSCRIBE "Ghost/x/y/z"')
    check("deep: SUBSCRIBE a name with no mailbox", ok(tagged), repr(tagged))

    def listed(command):
        return lists(c.command(command)[0])[0]

    got = listed('LIST "" "Deep/%"')
    check("deep: LIST Deep/%: Deep/a has children (the level below it has no mailbox)",
          list(got) == ["Deep/a"] and "\\HasChildren" in got["Deep/a"][0], repr(got))
    got = listed('LIST "" "Deep/a/%"')
    check("deep: LIST Deep/a/%: the middle level is \\Noselect \\HasChildren",
          list(got) == ["Deep/a/b"] and got["Deep/a/b"][0] == {"\\Noselect", "\\HasChildren"},
          repr(got))
    got = listed('LIST "Deep/" "a/b/%"')
    check("deep: a reference and a pattern: Deep/a/b/c has children",
          list(got) == ["Deep/a/b/c"] and "\\HasChildren" in got["Deep/a/b/c"][0], repr(got))
    got = listed('LIST "" "Deep%"')
    check("deep: LIST Deep%: the names that share the head, each with its children or none",
          set(got) == {"Deep", "Deep-x", "Deeper"} and "\\HasChildren" in got["Deep"][0] and
          "\\HasNoChildren" in got["Deep-x"][0] and "\\HasNoChildren" in got["Deeper"][0],
          repr(got))
    got = listed('LIST "" "%/%"')
    check("deep: LIST %/%: second levels only, with their children",
          "\\HasChildren" in got.get("Deep/a", (set(),))[0] and
          "\\HasChildren" in got.get("INBOX/s", (set(),))[0] and "Deep/a/b" not in got and
          "INBOX/s/t" not in got, repr(got))
    got = listed('LIST "" "INBOX/%/%"')
    check("deep: LIST INBOX/%/%: INBOX/s/t, no children",
          list(got) == ["INBOX/s/t"] and "\\HasNoChildren" in got["INBOX/s/t"][0], repr(got))
    got = listed('LIST "" ("Deep/a/%" "inbox")')
    check("deep: two patterns, one INBOX in another case", set(got) == {"Deep/a/b", "INBOX"},
          repr(got))
    got = listed('LIST "" "*c/d"')
    check("deep: LIST *c/d: every depth", set(got) == {"Deep/a/b/c/d"}, repr(got))
    # a pattern with a head reads only the names under it (a range of the names' index):
    # names with bytes below '%' and '*' are in the range, the siblings that share the
    # head's first bytes are not, and a head no name begins with gives an empty answer
    for name in ("Low/ sp", "Low/!x", "Low/#y/z", "Low0", "Low-x"):
        c.command('CREATE "%s"' % name)
    got = listed('LIST "" "Low/%"')
    check("deep: LIST Low/%: names with bytes below the wildcards, with their children",
          set(got) == {"Low/ sp", "Low/!x", "Low/#y"} and "\\HasChildren" in got["Low/#y"][0],
          repr(got))
    u, tagged = c.command('LIST "" "Nothing/here/%"')
    check("deep: LIST of a head no name begins with: OK, nothing listed", ok(tagged) and not u,
          repr((u, tagged)))
    u, _ = c.command('LSUB "" "Ghost/%"')
    check("deep: LSUB Ghost/%: a level with a subscribed name deep below is \\Noselect",
          len(u) == 1 and u[0][0].startswith(b"* LSUB (\\Noselect ") and
          u[0][0].endswith(b' "/" "Ghost/x"'), repr(u))
    got = listed('LIST (SUBSCRIBED RECURSIVEMATCH) "" "Ghost/%"')
    check("deep: (SUBSCRIBED RECURSIVEMATCH) Ghost/%: CHILDINFO for the name deep below",
          list(got) == ["Ghost/x"] and b"CHILDINFO" in got["Ghost/x"][1], repr(got))
    # a pattern without '*' passes over a name's descendants once one of them said it has
    # children (mv_mailbox_list_skip to the name with its '/' raised to '0'): the names right
    # after the skipped ones, those sorting before '/', and a deeper level's own skip
    for name in ("Skip", "Skip-", "Skip/a", "Skip/b", "Skip/c/d", "Skip/c/e", "Skip/c/f/g",
                 "Skip/c0", "Skip0", "Skip0/z", "Skip0/z/w", "Skipz"):
        c.command('CREATE "%s"' % name)

    def kids(got, name):
        return "\\HasChildren" in got[name][0]

    got = listed('LIST "" "Skip%"')
    check("skip: LIST Skip%: the names after a skipped run, each with its children or none",
          set(got) == {"Skip", "Skip-", "Skip0", "Skipz"} and kids(got, "Skip") and
          not kids(got, "Skip-") and kids(got, "Skip0") and not kids(got, "Skipz"), repr(got))
    got = listed('LIST "" "Skip/%"')
    check("skip: LIST Skip/%: a level whose children are skipped, the sibling after them",
          set(got) == {"Skip/a", "Skip/b", "Skip/c", "Skip/c0"} and kids(got, "Skip/c") and
          not kids(got, "Skip/c0") and not kids(got, "Skip/b"), repr(got))
    got = listed('LIST "" "%"')
    check("skip: LIST %: every top-level name after runs of skipped descendants",
          {"Skip", "Skip-", "Skip0", "Skipz", "Deep", "Deep-x", "Deeper", "Low", "Low0",
           "Low-x", "INBOX"} <= set(got) and kids(got, "Skip0") and kids(got, "Low") and
          not any("/" in n for n in got), repr(got))
    got = listed('LIST "" ("Skip/%" "Skip0/%")')
    check("skip: two patterns: both levels, each with its children",
          set(got) == {"Skip/a", "Skip/b", "Skip/c", "Skip/c0", "Skip0/z"} and
          kids(got, "Skip0/z") and kids(got, "Skip/c"), repr(got))


def idle_begin(c):
    tag = c.tag()
    c.sock.sendall(tag + b" IDLE\r\n")
    line, _ = c.read_response()
    if not line.startswith(b"+"):
        raise RuntimeError("IDLE: %r" % line)
    return tag


def idle_wait_exists(c, want, seconds):
    """Reads untagged responses until * want EXISTS or seconds pass: (time, responses seen)."""
    start = time.monotonic()
    seen = 0
    c.sock.settimeout(0.2)
    try:
        while time.monotonic() - start < seconds:
            try:
                line, _ = c.read_response()
            except OSError:  # socket.timeout
                continue
            if re.match(rb"\* \d+ EXISTS$", line):
                seen += 1
                if int(line.split()[1]) >= want:
                    return time.monotonic() - start, seen
        return None, seen
    finally:
        c.sock.settimeout(20)


def idle_end(c, tag):
    c.sock.sendall(b"DONE\r\n")
    _, t = c.until(tag)
    return t


def deliver(args, subject):
    with tempfile.NamedTemporaryFile(suffix=".eml") as f:
        f.write(message(subject))
        f.flush()
        return subprocess.run([args.mv, "deliver", args.user_addr, "--password-file",
                               args.password_file, f.name], capture_output=True, timeout=60)


# How soon a commit of another process reaches an IDLE session: well under the fallback poll
# (30 s), so a push that did not happen still fails, with room for a loaded machine.
IDLE_PUSH_S = 10.0


def test_idle_other_process(args, c, c2):
    u, t = c.command("SELECT INBOX")
    exists = max([int(x[0].split()[1]) for x in u if x[0].endswith(b" EXISTS")] or [0])
    c2.command("SELECT INBOX")
    tag = idle_begin(c)
    tag2 = idle_begin(c2)
    time.sleep(0.3)
    start = time.monotonic()
    r = deliver(args, "idle1")
    took = time.monotonic() - start
    check("mailvault deliver into the store the server has open", r.returncode == 0, repr(r.stderr))
    after, _ = idle_wait_exists(c, exists + 1, IDLE_PUSH_S + 5)
    check("IDLE: EXISTS within %g s of another process's commit" % IDLE_PUSH_S,
          after is not None and after < IDLE_PUSH_S, "after %s s (deliver took %.2f s)" % (after, took))
    other, _ = idle_wait_exists(c2, 1, 1.0)
    check("IDLE of another user of the domain hears nothing", other is None, repr(other))
    t = idle_end(c, tag)
    check("DONE after the push", ok(t), repr(t))
    idle_end(c2, tag2)
    exists += 1

    # An import of many messages: coalesced, and the last one is heard promptly.
    folder = tempfile.mkdtemp(prefix="imapd_list_import.")
    count = 40
    for i in range(count):
        with open(os.path.join(folder, "%02d.eml" % i), "wb") as f:
            f.write(message("import%d" % i))
    tag = idle_begin(c)
    time.sleep(0.3)
    r = subprocess.run([args.mv, "import", args.user_addr, folder, "--password-file",
                        args.password_file], capture_output=True, timeout=120)
    check("mailvault import of %d messages" % count, r.returncode == 0, repr(r.stderr))
    after, seen = idle_wait_exists(c, exists + count, IDLE_PUSH_S + 5)
    check("IDLE: the import's last message within %g s of its end" % IDLE_PUSH_S,
          after is not None and after < IDLE_PUSH_S, "after %s s" % after)
    check("IDLE: the import came in fewer EXISTS than messages (coalesced)",
          0 < seen < count, "%d EXISTS" % seen)
    idle_end(c, tag)
    exists += count

    tag = idle_begin(c)  # the watch was dropped at DONE and is made again
    time.sleep(0.3)
    deliver(args, "idle2")
    after, _ = idle_wait_exists(c, exists + 1, IDLE_PUSH_S + 5)
    check("IDLE again after DONE: EXISTS within %g s" % IDLE_PUSH_S,
          after is not None and after < IDLE_PUSH_S,
          "after %s s" % after)
    t = idle_end(c, tag)
    check("DONE", ok(t), repr(t))
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--imap", type=int, required=True)
    p.add_argument("--mv", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--password-file", required=True)
    p.add_argument("--user2", required=True)
    args = p.parse_args()
    args.user_addr, password = args.user.split(":", 1)
    user2, password2 = args.user2.split(":", 1)
    try:
        c = login(args.imap, args.user_addr, password)
        test_list(c)
        test_create_special_use(c)
        test_list_deep(c)
        c2 = login(args.imap, user2, password2)
        test_idle_other_process(args, c, c2)
        c.command("LOGOUT")
        c2.command("LOGOUT")
    except Exception as e:  # a dead server or a protocol error: one failure, then the summary
        check("the client ran to the end", False, "%s: %s" % (type(e).__name__, e))
    results.summary()
    return 0 if results.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
