#!/usr/bin/env bash
# cli_imapd_offlineimap.sh -- interop with offlineimap3 (Debian's offlineimap3 package, a
# second real sync client beside mbsync in tests/cli_imapd.sh): a two-way sync of a Maildir
# with mailvaultd over implicit TLS (IMAPS) with the test's self-signed certificate.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_offlineimap.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory (the
#   offlineimap logs are offlineimap.N.log there). scripts/install-deps.sh installs
#   offlineimap3; without it the test fails rather than skipping.
#
# WHAT IT DOES
#   The server side is seeded and inspected with Python's imaplib on the plain loopback port
#   (a helper written to $tmp); offlineimap talks to the IMAPS port only.
#   1. Seeds alice's store: INBOX, Archive, Archive/2024, "Entwürfe" (non-ASCII, modified
#      UTF-7 on the wire), Work/Projects/Alpha (its parents are created by the server); the
#      store's other special-use mailboxes (Drafts, Sent, Trash, Junk) stay empty; messages
#      flagged \Seen, \Flagged, \Deleted, \Answered, \Draft, none.
#   2. Sync (sslcacertfile = the test certificate): both sides must match exactly, then a
#      second sync must change nothing on either side (server: UIDVALIDITY, UIDNEXT,
#      HIGHESTMODSEQ, every UID and its flags; Maildir: every file name and its bytes).
#   3. Changes on both sides: the server appends a message, expunges one, sets \Seen on one;
#      the Maildir gets a new message, loses one file, has a flag changed (file renamed) and
#      gains a new nested non-ASCII folder "Notizen/Übersicht" holding a message.
#   4. Sync: the six changes are on the other side, both sides match; a second sync is again
#      a no-op.
#   5. cert_fingerprint: a wrong SHA-256 fingerprint (and no CA file) makes offlineimap stop
#      before it logs in, changing nothing; the right one syncs (a no-op).
#   6. SIGTERM: the server exits 0 with no sanitizer report; `mailvault check` on the store
#      is clean.
#   "Match exactly": the same folder list (\Noselect parents aside); in every folder the
#   same messages, paired by the UID offlineimap writes into the file name (",U=N"); the
#   same flags (S F T R D for \Seen \Flagged \Deleted \Answered \Draft); and the same bytes,
#   where the Maildir file has LF line ends (offlineimap writes Maildir files that way) and
#   the server CRLF: file bytes with LF -> CRLF must equal BODY.PEEK[] byte for byte.
#
# LIMITATIONS
#   offlineimap expunges a folder on the server when it propagates a local deletion there
#   (its default `expunge = yes`), so the \Deleted message lives in a folder where nothing is
#   deleted locally. The messages are ones Python's email package writes back unchanged
#   (offlineimap parses and re-serialises every message): short unfolded headers, one
#   multipart, one 8-bit UTF-8 body.
#
# The server is always stopped (trap), every client run has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, init_users, the trap

imapd_test_setup cli_imapd_offlineimap 2
if ! command -v offlineimap >/dev/null; then
    fail "offlineimap is installed (scripts/install-deps.sh installs offlineimap3)"
    finish
fi
if ! scripts/make-cert.sh "$tmp/tls" >/dev/null; then
    fail "scripts/make-cert.sh makes the test certificate"
    finish
fi

user=alice@example.org
init_users "$user"
start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --imaps-port=0 --tls-cert="$tmp/tls/cert.pem" --tls-key="$tmp/tls/key.pem" \
    --workers=2
imap=$(port imap)
imaps=$(port imaps)
maildir="$tmp/maildir"
mkdir -p "$maildir"

# ---- the server-side helper: seed, change, compare, snapshot ---------------------------------
cat >"$tmp/side.py" <<'EOF_PY'
"""side.py PORT USER PASSWORD MAILDIR COMMAND [ARG]: the server side of the offlineimap test.
seed / change: make the server's part of steps 1 and 3; compare: both sides match exactly
(prints each difference, exit 1 if any); snapshot FILE: both sides' full state as JSON, for
the no-op checks; expect NAME: one of the named checks after the second real sync."""
import base64, hashlib, imaplib, json, os, re, sys

port, user, password, maildir, command = sys.argv[1:6]
arg = sys.argv[6] if len(sys.argv) > 6 else None
FLAG_LETTERS = {"\\Seen": "S", "\\Flagged": "F", "\\Deleted": "T", "\\Answered": "R",
                "\\Draft": "D"}


def utf7_encode(name):
    """RFC 3501 5.1.3 modified UTF-7 (imaplib leaves names to the caller)."""
    out, pending = [], ""

    def flush():
        if pending:
            b = base64.b64encode(pending.encode("utf-16-be")).decode().rstrip("=")
            out.append("&" + b.replace("/", ",") + "-")
    for ch in name:
        if 0x20 <= ord(ch) <= 0x7e:
            flush()
            pending = ""
            out.append("&-" if ch == "&" else ch)
        else:
            pending += ch
    flush()
    return "".join(out)


def utf7_decode(name):
    def one(m):
        s = m.group(1)
        if not s:
            return "&"
        s = s.replace(",", "/")
        return base64.b64decode(s + "=" * (-len(s) % 4)).decode("utf-16-be")
    return re.sub(r"&([A-Za-z0-9+,]*)-", one, name)


def quoted(name):
    return '"' + utf7_encode(name).replace("\\", "\\\\").replace('"', '\\"') + '"'


def message(subject, body, extra=""):
    """CRLF text as a client would append it."""
    text = ("From: Carol <carol@example.org>\nTo: alice@example.org\nSubject: %s\n"
            "Date: Mon, 2 Dec 2024 10:%02d:00 +0000\nMessage-ID: <%s@example.org>\n%s\n%s"
            % (subject, len(subject) % 60, hashlib.sha1(subject.encode()).hexdigest()[:16],
               extra, body))
    return text.replace("\n", "\r\n").encode()


MULTIPART = ("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b1\"\n",
             "--b1\nContent-Type: text/plain\n\nthe report\n--b1\nContent-Type: text/csv;"
             " name=\"r.csv\"\nContent-Disposition: attachment; filename=\"r.csv\"\n\n"
             "a,b\n1,2\n--b1--\n")
UTF8 = ("MIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\n"
        "Content-Transfer-Encoding: 8bit\n", "Grüße aus Köln, Entwurf für später.\n")

SEED = [  # (folder, subject, flags, body, extra headers)
    ("INBOX", "inbox one", "\\Seen", "first\n", ""),
    ("INBOX", "inbox two", "\\Flagged", "second\n", ""),
    ("INBOX", "inbox three", "", "third: the server expunges this one\n", ""),
    ("INBOX", "inbox four", "\\Seen \\Answered", "fourth\n", ""),
    ("Archive", "archive one", "\\Seen", "kept\n", ""),
    ("Archive", "archive deleted", "\\Seen \\Deleted", "flagged deleted, never expunged\n", ""),
    ("Archive", "archive report", "", MULTIPART[1], MULTIPART[0]),
    ("Archive/2024", "2024 one", "\\Seen \\Flagged", "old\n", ""),
    ("Archive/2024", "2024 two", "", "flags change in the Maildir\n", ""),
    ("Entwürfe", "draft one", "\\Draft", "a draft\n", ""),
    ("Entwürfe", "draft two", "", UTF8[1], UTF8[0]),
    ("Work/Projects/Alpha", "alpha", "\\Seen", "deep\n", ""),
]
FOLDERS = ["Archive/2024", "Entwürfe", "Work/Projects/Alpha"]  # the store has Archive etc.


def connect():
    c = imaplib.IMAP4("127.0.0.1", int(port), timeout=30)
    c.login(user, password)
    return c


def ok(resp, what):
    if resp[0] != "OK":
        raise SystemExit("%s: %r" % (what, resp))
    return resp[1]


def server_state(c):
    """{folder: {"status": ..., "messages": {uid: (flags, sha256, bytes)}}}"""
    state = {}
    for line in ok(c.list('""', '"*"'), "LIST"):
        m = re.match(rb'\(([^)]*)\) (?:"[^"]*"|NIL) (.*)$', line)
        attrs, name = m.group(1).decode().lower(), m.group(2).decode()
        if name.startswith('"'):
            name = name[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if "\\noselect" in attrs or "\\nonexistent" in attrs:
            continue
        name = utf7_decode(name)
        status = ok(c.status(quoted(name), "(UIDVALIDITY UIDNEXT HIGHESTMODSEQ MESSAGES)"),
                    "STATUS")[0].decode()
        status = re.search(r"\(([^)]*)\)\s*$", status).group(1)
        ok(c.select(quoted(name), readonly=True), "EXAMINE " + name)
        msgs = {}
        data = ok(c.uid("FETCH", "1:*", "(UID FLAGS BODY.PEEK[])"), "FETCH")
        for item in data:
            if not isinstance(item, tuple):
                continue
            head = item[0].decode()
            uid = int(re.search(r"UID (\d+)", head).group(1))
            flags = re.search(r"FLAGS \(([^)]*)\)", head).group(1).split()
            letters = "".join(sorted(FLAG_LETTERS.get(f, "?" + f) for f in flags
                                     if f != "\\Recent"))
            msgs[uid] = [letters, item[1]]
        state[name] = {"status": status, "messages": msgs}
    return state


def maildir_state():
    """{folder: {uid or file name: (letters, bytes, file name)}} from the Maildir."""
    state = {}
    for dirpath, dirnames, _ in os.walk(maildir):
        dirnames.sort()
        if not all(os.path.isdir(os.path.join(dirpath, d)) for d in ("cur", "new", "tmp")):
            continue
        folder = os.path.relpath(dirpath, maildir)
        msgs = {}
        for sub in ("cur", "new"):
            for fname in sorted(os.listdir(os.path.join(dirpath, sub))):
                data = open(os.path.join(dirpath, sub, fname), "rb").read()
                info = fname.split(":2,", 1)[1] if ":2," in fname else ""
                m = re.search(r",U=(\d+)", fname)
                key = int(m.group(1)) if m else sub + "/" + fname
                msgs[key] = ["".join(sorted(info)), data, sub + "/" + fname]
        state[folder] = msgs
    return state


def compare(server, local):
    problems = []
    if sorted(server) != sorted(local):
        problems.append("folders: server %s, Maildir %s" % (sorted(server), sorted(local)))
    for folder in sorted(set(server) & set(local)):
        smsgs, lmsgs = server[folder]["messages"], local[folder]
        if sorted(smsgs, key=str) != sorted(lmsgs, key=str):
            problems.append("%s: server UIDs %s, Maildir %s" %
                            (folder, sorted(smsgs, key=str), sorted(lmsgs, key=str)))
        for uid in sorted(set(smsgs) & set(lmsgs), key=str):
            sflags, sdata = smsgs[uid]
            lflags, ldata, fname = lmsgs[uid]
            if sflags != lflags:
                problems.append("%s UID %s: flags server %r, Maildir %r (%s)" %
                                (folder, uid, sflags, lflags, fname))
            if b"\r" in ldata or ldata.replace(b"\n", b"\r\n") != sdata:
                problems.append("%s UID %s: bytes differ (server %d, Maildir %d: %s)" %
                                (folder, uid, len(sdata), len(ldata), fname))
    return problems


def seed(c):
    for f in FOLDERS:
        ok(c.create(quoted(f)), "CREATE " + f)
    for folder, subject, flags, body, extra in SEED:
        ok(c.append(quoted(folder), "(%s)" % flags if flags else None, None,
                    message(subject, body, extra)), "APPEND " + subject)


def uid_of(c, folder, subject):
    ok(c.select(quoted(folder)), "SELECT " + folder)
    uids = ok(c.uid("SEARCH", "HEADER", "Subject", '"%s"' % subject), "SEARCH")[0].split()
    if len(uids) != 1:
        raise SystemExit("%s in %s: UIDs %r" % (subject, folder, uids))
    return uids[0].decode()


def change(c):
    ok(c.append(quoted("Archive/2024"), "(\\Flagged)", None,
                message("server added", "appended on the server\n")), "APPEND")
    uid = uid_of(c, "INBOX", "inbox three")
    ok(c.uid("STORE", uid, "+FLAGS.SILENT", "(\\Deleted)"), "STORE")
    ok(c.uid("EXPUNGE", uid), "UID EXPUNGE")
    uid = uid_of(c, "Entwürfe", "draft two")
    ok(c.uid("STORE", uid, "+FLAGS.SILENT", "(\\Seen)"), "STORE")


def subjects(state, folder):
    return {m[1].split(b"Subject: ", 1)[1].split(b"\r\n", 1)[0].decode(): m[0]
            for m in state.get(folder, {"messages": {}})["messages"].values()}


def expect(name, server):
    """The six changes of step 3 as the other side sees them after the sync."""
    checks = {
        "server-append": lambda: subjects(server, "Archive/2024").get("server added") == "F",
        "server-expunge": lambda: "inbox three" not in subjects(server, "INBOX"),
        "server-flag": lambda: subjects(server, "Entwürfe").get("draft two") == "S",
        "local-add": lambda: subjects(server, "Archive").get("local added") == "S",
        "local-delete": lambda: "inbox one" not in subjects(server, "INBOX")
        and subjects(server, "INBOX").get("inbox two") == "F",
        "local-flag": lambda: subjects(server, "Archive/2024").get("2024 two") == "FS",
        "local-folder": lambda: subjects(server, "Notizen/Übersicht").get("local folder") == "",
    }
    return checks[name]()


def main():
    c = connect()
    try:
        if command == "seed":
            seed(c)
        elif command == "change":
            change(c)
        elif command == "compare":
            problems = compare(server_state(c), maildir_state())
            for p in problems:
                print("    " + p)
            sys.exit(1 if problems else 0)
        elif command == "snapshot":
            server = server_state(c)
            for f in server.values():
                f["messages"] = {u: [m[0], hashlib.sha256(m[1]).hexdigest()]
                                 for u, m in f["messages"].items()}
            local = {f: {str(k): [m[0], hashlib.sha256(m[1]).hexdigest(), m[2]]
                         for k, m in msgs.items()} for f, msgs in maildir_state().items()}
            with open(arg, "w") as out:
                json.dump({"server": server, "maildir": local}, out, indent=1, sort_keys=True,
                          ensure_ascii=False)
        elif command == "expect":
            sys.exit(0 if expect(arg, server_state(c)) else 1)
        elif command == "count":
            print(sum(len(f["messages"]) for f in server_state(c).values()))
    finally:
        c.logout()


main()
EOF_PY
side() { timeout -k 5 60 "$PY" "$tmp/side.py" "$imap" "$user" "$user secret" "$maildir" "$@"; }

# ---- offlineimap -----------------------------------------------------------------------
# write_rc LINE: the configuration; LINE says how the remote repository checks the
# certificate (the CA file, or a fingerprint). One account, two connections (so folders sync
# in parallel, as offlineimap is normally run), the Maildir nested with '/' like the server.
write_rc() {
    cat >"$tmp/offlineimaprc" <<EOF_RC
[general]
accounts = vault
metadata = $tmp/offlineimap-meta
maxsyncaccounts = 1

[Account vault]
localrepository = local
remoterepository = remote
utf8foldernames = yes

[Repository local]
type = Maildir
localfolders = $maildir
sep = /

[Repository remote]
type = IMAP
remotehost = localhost
remoteport = $imaps
remoteuser = $user
remotepass = $user secret
ssl = yes
$1
maxconnections = 2
expunge = yes
timeout = 30
EOF_RC
}
runs=0
sync() { # the exit status of one offlineimap run; its log is $tmp/offlineimap.N.log
    runs=$((runs + 1))
    log="$tmp/offlineimap.$runs.log"
    HOME="$tmp" timeout -k 5 180 offlineimap -c "$tmp/offlineimaprc" -o -u basic >"$log" 2>&1
}
show_log() { sed 's/^/    offlineimap: /' "$log" | tail -n 25; }
synced() { # NAME: one sync that must succeed, without an ERROR or WARNING in its log
    if sync && ! grep -qE '^(ERROR|WARNING)' "$log"; then
        pass "$1"
    else
        fail "$1 (exit $?)"
        show_log
    fi
}
match() { # NAME: both sides the same
    if side compare >"$tmp/compare.out" 2>&1; then
        pass "$1"
    else
        fail "$1"
        cat "$tmp/compare.out"
    fi
}
noop() { # NAME: sync once more; nothing may change on either side
    side snapshot "$tmp/before.json"
    synced "$1: the sync succeeds"
    side snapshot "$tmp/after.json"
    if cmp -s "$tmp/before.json" "$tmp/after.json"; then
        pass "$1: nothing changed on either side"
    else
        fail "$1: nothing changed on either side"
        diff "$tmp/before.json" "$tmp/after.json" | head -n 20 | sed 's/^/    /'
    fi
    # offlineimap's basic UI logs each copy, deletion, flag change and folder it creates.
    if grep -qE 'Copy message|Deleting [0-9]+ message|(Adding|Removing) flag|Creating (new )?(folder|Maildir)' "$log"; then
        fail "$1: offlineimap logs no change"
        grep -E 'Copy message|Deleting|flag|Creating' "$log" | head -n 10 | sed 's/^/    /'
    else
        pass "$1: offlineimap logs no change"
    fi
}

write_rc "sslcacertfile = $tmp/tls/cert.pem"
if side seed >"$tmp/seed.out" 2>&1; then
    pass "seed: $(side count) messages in five folders over imaplib"
else
    fail "seed the server"
    cat "$tmp/seed.out"
    finish
fi

# ---- 2. first sync ----------------------------------------------------------------------
synced "sync 1 over IMAPS (sslcacertfile): offlineimap exits 0"
match "sync 1: Maildir and server match (folders, UIDs, flags, bytes)"
for f in "Entwürfe/cur" "Archive/2024/cur" "Work/Projects/Alpha/cur" "Trash/new"; do
    check "sync 1: Maildir folder $f exists" [ -d "$maildir/$f" ]
done
check "sync 1: the \\Deleted message is in Archive with flag T" \
    bash -c "ls '$maildir'/Archive/cur | grep -qE ':2,[A-Z]*T'"
noop "sync 2 (no-op)"

# ---- 3. changes on both sides -------------------------------------------------------------
if side change >"$tmp/change.out" 2>&1; then
    pass "server changes: append, expunge, flag"
else
    fail "server changes: append, expunge, flag"
    cat "$tmp/change.out"
fi
# Maildir: a new message (seen) in Archive, the file of "inbox one" removed, "2024 two"
# gets F and S by renaming (what a mail reader does), and a new nested folder with one
# message in new/.
printf 'From: alice@example.org\nTo: bob@example.org\nSubject: local added\nDate: Tue, 3 Dec 2024 09:00:00 +0000\nMessage-ID: <local1@example.org>\n\nwritten into the Maildir\n' \
    >"$maildir/Archive/cur/1733216400.local1.host:2,S"
inbox_one=$(grep -l '^Subject: inbox one$' "$maildir"/INBOX/cur/* "$maildir"/INBOX/new/* 2>/dev/null)
two=$(grep -l '^Subject: 2024 two$' "$maildir"/Archive/2024/cur/* "$maildir"/Archive/2024/new/* 2>/dev/null)
check "Maildir: the files to delete and to re-flag are there" test -f "$inbox_one" -a -f "$two"
rm -f "$inbox_one"
[ -n "$two" ] && mv "$two" "$maildir/Archive/2024/cur/$(basename "${two%%:2,*}"):2,FS"
# The parent is made as a Maildir folder too: the server makes "Notizen" when offlineimap
# creates "Notizen/Übersicht" (RFC 3501 6.3.3: superior names SHOULD be created), and
# offlineimap 8.0.0, finding a remote folder with no local one after its folder-structure
# pass, raises in the account thread and then deadlocks in its own error path (its
# imapserver.close() holds connectionlock while it waits for the folder threads, which wait
# for that lock to release their connections).
mkdir -p "$maildir/Notizen/"{cur,new,tmp} "$maildir/Notizen/Übersicht/"{cur,new,tmp}
printf 'From: alice@example.org\nSubject: local folder\nDate: Tue, 3 Dec 2024 09:30:00 +0000\nMessage-ID: <local2@example.org>\n\nin a folder made in the Maildir\n' \
    >"$maildir/Notizen/Übersicht/new/1733218200.local2.host"

# ---- 4. second real sync --------------------------------------------------------------------
synced "sync 3 (after changes on both sides): offlineimap exits 0"
for name in server-append server-expunge server-flag local-add local-delete local-flag \
    local-folder; do
    if side expect "$name"; then
        pass "sync 3: $name reached the other side"
    else
        fail "sync 3: $name reached the other side"
    fi
done
match "sync 3: Maildir and server match (folders, UIDs, flags, bytes)"
noop "sync 4 (no-op)"

# ---- 5. cert_fingerprint ------------------------------------------------------------------
fingerprint=$(openssl x509 -in "$tmp/tls/cert.pem" -outform DER | sha256sum | cut -d' ' -f1)
wrong=$(printf '%s' "$fingerprint" | tr '0-9a-f' '1-9a-f0')
write_rc "cert_fingerprint = $wrong"
side snapshot "$tmp/before.json"
sync
rc_wrong=$?
side snapshot "$tmp/after.json"
check "a wrong cert_fingerprint: offlineimap fails and changes nothing" \
    bash -c "[ $rc_wrong -ne 0 ] && cmp -s '$tmp/before.json' '$tmp/after.json'"
check "a wrong cert_fingerprint: offlineimap names the fingerprint mismatch" \
    grep -q 'does not match configured fingerprint' "$log"
write_rc "cert_fingerprint = $fingerprint"
noop "sync 6 with the right cert_fingerprint (no CA file; no-op)"

# ---- 6. stop, check ---------------------------------------------------------------------------
stop_server_checked "$tmp/server.log"
run "$mv" check "$user" --password-file "$tmp/pw.$user"
check "mailvault check: the store is clean" ok
finish
