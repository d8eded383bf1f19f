#!/usr/bin/env bash
# cli_dsync_migrate.sh -- migrations between mailvaultd and Dovecot with Dovecot's own tool,
# dsync (doveadm backup) through imapc, the usual migration path: one out of mailvault into
# a Dovecot Maildir (`doveadm backup -R -u USER imapc:`), then one from that Maildir into an
# empty mailvault account (`doveadm backup -u USER imapc:`, which APPENDs with Dovecot's own
# IMAP client: "( $Label1 Work)", a space after '(' -- issue 12 item 14). Both directions
# must carry every mailbox (nested ones too), every message byte for byte (a headerless one,
# a folded multipart, 8-bit text) with its flags and keywords. Dovecot (Debian's) runs
# privately: `dovecot -F -c FILE` with base_dir, state_dir, log and mail in a scratch
# directory; nothing in /etc/dovecot is read or changed.
#
# What Dovecot's tools cannot do in the direction into mailvault (imapc as the destination),
# reported as notes, not failures: UIDs and UIDVALIDITY are the destination's own (an IMAP
# client cannot choose them, so clients resync after the move), and so are modseqs.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_dsync_migrate.sh
#   Needs dovecot-core and dovecot-imapd (scripts/install-deps.sh); runs as root (Dovecot's
#   mail processes run as nobody, so the scratch directory is made readable for them).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="$PWD/build/asan/mailvault"
make_tmp cli_dsync_migrate
store_root 1
dc=""
dc_pid=""
stop_dovecot() {
    [ -n "$dc_pid" ] && kill "$dc_pid" 2>/dev/null && wait "$dc_pid" 2>/dev/null
    dc_pid=""
    [ -n "$dc" ] && rm -rf "$dc"
    return 0
}
imapd_trap stop_dovecot

need_binaries "$server" "$mv"
if ! command -v dovecot >/dev/null || ! command -v doveadm >/dev/null; then
    fail "dovecot and doveadm are installed (scripts/install-deps.sh: dovecot-core dovecot-imapd)"
    finish
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "# not root: Dovecot's private instance needs to switch to nobody; skipped"
    pass "skipped (not root)"
    finish
fi

init_users carol@example.org
start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2
mv_port=$(port imap)

run "$PY" tests/imapd_dsync.py --imap "$mv_port" --user "carol@example.org:carol@example.org secret" populate
check "the source account is filled over IMAP" ok

# ---- a private Dovecot ---------------------------------------------------------------------
dc=$(mktemp -d /tmp/mvdsync.XXXXXX) # not under $tmp: nobody must reach it
chmod 755 "$dc"
mkdir -p "$dc/run" "$dc/state" "$dc/mail"
chown nobody:nogroup "$dc/mail"
dc_port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
conf=$dc/dovecot.conf
cat >"$conf" <<EOF
# tests/cli_dsync_migrate.sh: a private Dovecot; nothing outside $dc.
base_dir = $dc/run
state_dir = $dc/state
instance_name = mailvault-dsync-test
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
log_path = $dc/dovecot.log
mail_location = maildir:$dc/mail/%u:LAYOUT=fs
first_valid_uid = 1
mail_uid = nobody
mail_gid = nogroup
default_login_user = dovenull
default_internal_user = dovecot
passdb {
  driver = static
  args = password=migrated
}
userdb {
  driver = static
  args = uid=nobody gid=nogroup home=$dc/mail/%u
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = $dc_port
  }
  inet_listener imaps {
    port = 0
  }
}
imapc_host = 127.0.0.1
imapc_port = $mv_port
imapc_features = rfc822.size fetch-headers
mail_prefetch_count = 20
EOF
dovecot -F -c "$conf" >"$dc/stderr.log" 2>&1 &
dc_pid=$!
for _ in $(seq 1 100); do
    [ -S "$dc/run/auth-userdb" ] &&
        "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $dc_port), 0.2)" 2>/dev/null &&
        break
    kill -0 "$dc_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$dc_pid" 2>/dev/null; then
    pass "a private Dovecot starts ($(dovecot --version 2>/dev/null | cut -d' ' -f1))"
else
    fail "a private Dovecot starts"
    sed 's/^/    dovecot: /' "$dc/stderr.log" "$dc/dovecot.log" 2>/dev/null | tail -n 5
    finish
fi
doveadm_as() { # doveadm_as MAILVAULT_USER ARGS...: doveadm with imapc logged in as that user
    local user=$1
    shift
    doveadm -c "$conf" -o "imapc_user=$user" -o "imapc_password=$user secret" "$@"
}

dump() { # dump PORT USER PASSWORD FILE
    "$PY" tests/imapd_dsync.py --imap "$1" --user "$2:$3" dump >"$4" 2>"$tmp/dump.err"
}

compare() { # compare NAME A.json B.json: same mailboxes, messages (bytes), flags, dates
    "$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
name, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
def pr(ok, what, why=""):
    print(("PASS " if ok else "FAIL ") + name + ": " + what + ("" if ok else ": " + why))
pr(sorted(a) == sorted(b), "the same mailboxes", "%s vs %s" % (sorted(a), sorted(b)))
for box in sorted(set(a) & set(b)):
    ma, mb = a[box]["messages"], b[box]["messages"]
    key = lambda m: m["sha256"]
    pr(sorted(map(key, ma)) == sorted(map(key, mb)),
       "%s: every message byte for byte (%d)" % (box, len(ma)), "%d vs %d" % (len(ma), len(mb)))
    fa = {m["sha256"]: m["flags"] for m in ma}
    fb = {m["sha256"]: m["flags"] for m in mb}
    pr(fa == fb, "%s: flags and keywords" % box, "%s vs %s" % (fa, fb))
    da = {m["sha256"]: m["internaldate"] for m in ma}
    db = {m["sha256"]: m["internaldate"] for m in mb}
    pr(da == db, "%s: internal dates" % box, "%s vs %s" % (da, db))
    same_uids = [m["uid"] for m in ma] == [m["uid"] for m in mb]
    same_uv = a[box]["uidvalidity"] == b[box]["uidvalidity"]
    print("# %s: %s: UIDs %s, UIDVALIDITY %s" % (name, box, "kept" if same_uids else "renumbered",
                                                 "kept" if same_uv else "new"))
PYEOF
}

# ---- out of mailvault: Dovecot pulls through imapc ----------------------------------------
run doveadm_as carol@example.org backup -R -u migrated imapc:
check "out: doveadm backup -R -u migrated imapc: (mailvault -> Dovecot Maildir)" ok
dump "$mv_port" carol@example.org "carol@example.org secret" "$tmp/carol.json"
check "dump the mailvault source" ok
dump "$dc_port" migrated migrated "$tmp/migrated.json"
check "dump the Dovecot copy" ok
compare "out of mailvault" "$tmp/carol.json" "$tmp/migrated.json" >"$out"
cat "$out"
passed=$((passed + $(grep -c '^PASS' "$out")))
failed=$((failed + $(grep -c '^FAIL' "$out")))

# ---- into mailvault: Dovecot pushes through imapc into an empty account -------------------
# dave is made now, so his mailboxes' UIDVALIDITY (from the clock) differs from carol's,
# as it would for any real new account.
sleep 1.1 # the clock must move on: UIDVALIDITY is in seconds
printf '%s' "dave@example.org secret" >"$tmp/pw.dave"
run "$mv" init dave@example.org --password-file "$tmp/pw.dave"
check "init dave@example.org (the destination)" ok
# `backup` (make the destination an exact copy) cannot be used in this direction: a fresh
# account's INBOX has its own UIDVALIDITY, so backup deletes it to recreate it, and INBOX
# cannot be deleted (RFC 3501 6.3.4: "It is an error to attempt to delete INBOX"; Dovecot
# refuses it too). That is a limit of dsync over imapc, noted here; the one-way sync
# (`doveadm sync -1`) is Dovecot's way in, and merges into the existing mailboxes.
run doveadm_as dave@example.org backup -u migrated imapc:
if ok; then
    echo "# backup into mailvault worked"
else
    echo "# as expected, backup into an IMAP destination stops at INBOX: $(grep -o 'INBOX cannot be deleted' "$err" | head -n 1)"
fi
run doveadm_as dave@example.org sync -1 -u migrated imapc:
check "in: doveadm sync -1 -u migrated imapc: (Dovecot Maildir -> mailvault)" ok
dump "$mv_port" dave@example.org "dave@example.org secret" "$tmp/dave.json"
check "dump the mailvault destination" ok
compare "into mailvault" "$tmp/migrated.json" "$tmp/dave.json" >"$out"
cat "$out"
passed=$((passed + $(grep -c '^PASS' "$out")))
failed=$((failed + $(grep -c '^FAIL' "$out")))
if grep -q "Error" "$dc/dovecot.log" 2>/dev/null; then
    echo "# Dovecot's log has errors:"
    grep "Error" "$dc/dovecot.log" | tail -n 5 | sed 's/^/#   /'
fi

stop_dovecot
stop_server_checked "$tmp/server.log"
finish
