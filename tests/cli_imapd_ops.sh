#!/usr/bin/env bash
# shellcheck disable=SC1091,SC2016,SC2119,SC2154 # lib.sh sets out, err, root; eval strings expand late on purpose
# cli_imapd_ops.sh -- mailvaultd in production (docs/IMAPD.md, "Running it in production"):
# the settings user, group, allow_root, cache_size_kib, maintain_interval_s, maintain_max_mib;
# contrib/mailvaultd.service (systemd-analyze verify when it works here, the hardening keys,
# Type=notify and ExecReload; tests/cli_imapd_reload.sh runs the notify protocol and SIGHUP)
# and contrib/mailvaultd.conf; as root: the refusal to serve as root without user, the
# refusal of a store root the user cannot use, the switch to nobody (the Uid/Gid/CapEff lines
# of /proc/PID/status, a login, an APPEND read back, LMTP), maintenance of a store closed
# idle (once per interval; off with 0) and `mailvault stats` / `check` afterwards; LMTP RCPT
# answered in order when pipelined (its check now runs on a worker).
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_ops.sh
#   KEEP_TMP=1 keeps the temporary directory. Not root: the privilege tests are skipped
#   (a line says so); the rest runs. (tests/run.sh runs it as part of `make test`.)
#
# Every wait has a timeout, the server is always stopped (trap), and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, sanitizer checks, the trap

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="$PWD/build/asan/mailvault"
# Under /tmp whatever TMPDIR says: the server, as nobody, must reach the store root, and the
# suite's TMPDIR (tests/run.sh) is a directory only root may enter.
TMPDIR=/tmp make_tmp cli_imapd_ops
store_root 2
imapd_trap

for f in "$server" "$mv"; do
    if [ ! -x "$f" ]; then
        fail "$f is missing (make build/asan/mailvaultd build/asan/mailvault)"
        finish
    fi
done
# Private copies: others may rebuild the tree while this runs.
cp "$server" "$tmp/mailvaultd" && server="$tmp/mailvaultd"
cp "$mv" "$tmp/mailvault" && mv="$tmp/mailvault"
init_users alice@example.org bob@example.org

# wait_log LOG PATTERN SECONDS: 0 once grep -E PATTERN matches in LOG.
wait_log() {
    for _ in $(seq 1 $(($3 * 10))); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
count_log() { grep -cE "$2" "$1" 2>/dev/null; }

cat >"$tmp/client.py" <<'PY'
import imaplib, socket, sys

def imap(port, user, pwfile, subject):
    """LOGIN, APPEND a message, FETCH it back byte for byte, LOGOUT."""
    msg = ("From: ops@example.org\r\nSubject: %s\r\n\r\nops test body\r\n" % subject).encode()
    c = imaplib.IMAP4("127.0.0.1", port, timeout=30)
    c.login(user, open(pwfile).read())
    typ, _ = c.append("INBOX", None, None, msg)
    assert typ == "OK"
    c.select("INBOX")
    typ, data = c.uid("SEARCH", None, "SUBJECT", '"%s"' % subject)
    uid = data[0].split()[-1]
    typ, data = c.uid("FETCH", uid, "(BODY.PEEK[])")
    assert typ == "OK" and data[0][1] == msg, data
    c.logout()
    print("imap ok")

def lmtp(port, rcpts):
    """One pipelined write: LHLO, MAIL, every RCPT, DATA; then the message. Prints the reply
    codes of the RCPTs, then of the recipients after the message."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    f = s.makefile("rb")
    def reply():
        lines = []
        while True:
            line = f.readline()
            assert line, "connection closed"
            lines.append(line)
            if line[3:4] != b"-":
                return lines
    reply()  # greeting
    cmds = b"LHLO ops\r\nMAIL FROM:<ops@example.org>\r\n"
    cmds += b"".join(b"RCPT TO:<%s>\r\n" % r.encode() for r in rcpts) + b"DATA\r\n"
    s.sendall(cmds)
    reply()  # LHLO
    reply()  # MAIL
    codes = [reply()[-1][:3].decode() for _ in rcpts]
    data = reply()[-1][:3].decode()
    print("rcpt " + " ".join(codes))
    print("data " + data)
    if data == "354":
        s.sendall(b"From: ops@example.org\r\nSubject: lmtp ops\r\n\r\nhello\r\n.\r\n")
        print("delivered " + " ".join(reply()[-1][:3].decode() for c in codes if c == "250"))
    s.sendall(b"QUIT\r\n")
    s.close()

if sys.argv[1] == "imap":
    imap(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
else:
    lmtp(int(sys.argv[2]), sys.argv[3:])
PY
client() { timeout 60 "$PY" "$tmp/client.py" "$@"; }

# ---- the settings --------------------------------------------------------------------------
run "$server" --help
lists_keys() {
    local k
    for k in "$@"; do
        grep -q "^  $k " "$out" || return 1
    done
}
check "--help lists the production settings" lists_keys user group allow_root cache_size_kib \
    maintain_interval_s maintain_max_mib
run "$server" --cache-size-kib=-1 --root="$root"
check "cache_size_kib below 0 is refused" fails_with 2 'cache_size_kib: expected a number'
run "$server" --maintain-interval-s=x --root="$root"
check "maintain_interval_s must be a number" fails_with 2 'maintain_interval_s: expected'
run "$server" --allow-root=maybe --root="$root"
check "allow_root takes yes or no" fails_with 2 'allow_root: expected yes or no'

# ---- contrib/: the example config and the systemd unit --------------------------------------
# -c is read before --help is acted on, so an unknown or malformed key in the file fails here.
run "$server" -c contrib/mailvaultd.conf --help
check "contrib/mailvaultd.conf loads (every key known, every value in range)" ok
printf 'user = mailvault\nbogus_key = 1\n' >"$tmp/bad.conf"
run "$server" -c "$tmp/bad.conf" --help
check "a config file with an unknown key is refused" fails_with 2 'bad.conf:2: unknown setting'
unit=contrib/mailvaultd.service
conf_root=$(sed -n 's/^root *= *//p' contrib/mailvaultd.conf)
check "the unit's ReadWritePaths is the example config's root ($conf_root)" \
    grep -qx "ReadWritePaths=$conf_root" "$unit"
check "the example config names an unprivileged user" grep -qE '^user = [a-z]' contrib/mailvaultd.conf
missing=""
for kv in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
    PrivateDevices=yes 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' \
    'CapabilityBoundingSet=CAP_NET_BIND_SERVICE CAP_SETUID CAP_SETGID' \
    'ExecStart=/usr/local/sbin/mailvaultd -c /etc/mailvault/mailvaultd.conf' \
    SystemCallFilter=@system-service MemoryDenyWriteExecute=yes RestrictSUIDSGID=yes \
    Type=notify NotifyAccess=main 'ExecReload=/bin/kill -HUP $MAINPID' LimitNICE=+0; do
    grep -qxF "$kv" "$unit" || missing="$missing [$kv]"
done
if [ -z "$missing" ]; then
    pass "the unit has the hardening keys, Type=notify, ExecReload (SIGHUP) and LimitNICE=+0"
else
    fail "the unit lacks$missing"
fi
if command -v systemd-analyze >/dev/null; then
    # verify wants ExecStart's program to exist: a copy pointing at the build's.
    mkdir -p "$tmp/unit"
    sed "s#/usr/local/sbin/mailvaultd#$PWD/build/mailvaultd#" "$unit" >"$tmp/unit/mailvaultd.service"
    [ -x build/mailvaultd ] || sed -i "s#$PWD/build/mailvaultd#$server#" "$tmp/unit/mailvaultd.service"
    # ...and, where man-db is installed, that Documentation=man:mailvaultd(8) resolves: the
    # page the build generates, in a manual tree of its own.
    mkdir -p "$tmp/man/man8"
    [ -f build/man/mailvaultd.8 ] && cp build/man/mailvaultd.8 "$tmp/man/man8/"
    export MANPATH="$tmp/man"
    run timeout 60 systemd-analyze verify "$tmp/unit/mailvaultd.service"
    # It exits 0 on unknown keys and bad values too, so any message at all is a failure.
    check "systemd-analyze verify: no complaint" eval '[ "$rc" -eq 0 ] && [ ! -s "$out" ] && [ ! -s "$err" ]'
    # ...and it does complain about a broken unit here (so the check above can fail).
    printf 'NoNewPrivilegs=yes\n' >>"$tmp/unit/mailvaultd.service"
    run timeout 60 systemd-analyze verify "$tmp/unit/mailvaultd.service"
    check "systemd-analyze verify notices a misspelt key" grep -q "NoNewPrivilegs" "$err"
else
    echo "# systemd-analyze is not installed: the unit's keys were checked statically only"
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "# not root: the privilege tests (user, group, allow_root) are skipped"
    finish
fi
unset MAILVAULTD_ALLOW_ROOT # imapd_lib.sh sets it; from here each run says what it wants

# ---- as root without user: refused --------------------------------------------------------
run "$server" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --ports-file="$tmp/ports.refused"
check "as root without user: refused, and says what to set" \
    fails_with 1 'refusing to run as root: set user = ACCOUNT'
check "... before binding anything (no ports file, no listening line)" \
    eval '[ ! -e "$tmp/ports.refused" ] && ! grep -q listening "$err"'
check "... with no sanitizer report" no_sanitizer_report "$err"
start_server "$tmp/allowed.log" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1 \
    --allow-root=yes
check "allow_root = yes: serves as root and says so" \
    grep -q 'running as root (allow_root = yes)' "$tmp/allowed.log"
stop_server_rc 100
run "$server" --root="$root" --user=root --imap-port=0 --lmtp-port=-1
check "user = root is refused" fails_with 1 'is root (uid 0)'
run "$server" --root="$root" --user=no-such-user-mv --imap-port=0 --lmtp-port=-1
check "an unknown user is refused" fails_with 1 'user = no-such-user-mv: no such user'
run "$server" --root="$root" --group=nogroup --allow-root=yes --imap-port=0 --lmtp-port=-1
check "group without user is refused" fails_with 1 'group = nogroup needs user'

# ---- user = nobody over a store root that is still root's: refused -------------------------
nobody_uid=$(id -u nobody)
nobody_gid=$(id -g nobody)
chmod 711 "$tmp" # nobody must reach $tmp/root; the root itself is 0700 from mailvault init
start_server "$tmp/notowner.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --user=nobody
check "user = nobody over a root-owned store root: refused" \
    grep -q "store root $root is not usable by uid $nobody_uid (owner uid 0, mode 700)" \
    "$tmp/notowner.log"
check "... and it tells what to do (chown -R)" grep -q 'chown -R' "$tmp/notowner.log"
stop_server_rc 50
check "... exit status 1" [ "$server_rc" -eq 1 ]

# ---- user = nobody, the store root chowned to it --------------------------------------------
chown -R nobody:"$nobody_gid" "$root"
chown nobody "$tmp" # the ports file is written after the switch
log="$tmp/server.log"
start_server "$log" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 \
    --user=nobody --store-idle-s=1 --maintain-interval-s=3600
check "user = nobody: the server starts" [ -s "$tmp/ports" ]
status=$(cat "/proc/$pid/status" 2>/dev/null)
check "/proc/PID/status: Uid is nobody's (real, effective, saved, fs)" \
    grep -qP "^Uid:\t$nobody_uid\t$nobody_uid\t$nobody_uid\t$nobody_uid$" <<<"$status"
check "/proc/PID/status: Gid is nobody's group" \
    grep -qP "^Gid:\t$nobody_gid\t$nobody_gid\t$nobody_gid\t$nobody_gid$" <<<"$status"
check "/proc/PID/status: no supplementary group 0" \
    eval '! grep -qP "^Groups:.*(\t| )0( |$)" <<<"$status"'
check "/proc/PID/status: no effective or permitted capability" \
    eval 'grep -q "^CapEff:\s*0000000000000000$" <<<"$status" &&
          grep -q "^CapPrm:\s*0000000000000000$" <<<"$status"'
check "the log says who it runs as" grep -q "running as user nobody (uid $nobody_uid" "$log"
imap=$(port imap)
lmtp=$(port lmtp)
run client imap "$imap" alice@example.org "$tmp/pw.alice@example.org" "ops subject one"
check "as nobody: LOGIN, APPEND and FETCH work" grep -q "imap ok" "$out"
check "the store open line shows the default page cache (2048 KiB)" \
    grep -q 'store open alice@example.org (worker [0-9]*, page cache 2048 KiB)' "$log"

# LMTP: RCPT's check is a worker job; pipelined RCPTs are still answered in order. A domain
# directory made by root after the start cannot be looked into by nobody: that is a
# temporary failure (451), not an unknown user.
mkdir -m 700 "$root/locked.example"
run client lmtp "$lmtp" bob@example.org nobody-here@example.org alice@example.org 'bad@@x' \
    someone@locked.example
check "LMTP pipelined RCPTs answered in order (250 550 250 550 451)" \
    grep -qx "rcpt 250 550 250 550 451" "$out"
check "LMTP DATA then one 250 per accepted recipient" \
    eval 'grep -qx "data 354" "$out" && grep -qx "delivered 250 250" "$out"'

# Maintenance: alice's store, unused for store_idle_s (1 s), is maintained, then closed.
check "an idle store is maintained before its close" \
    wait_log "$log" 'store maintain alice@example.org: ok in [0-9]+ ms: checkpoint .*, vacuum .*quick_check (ok|not due), change log [0-9]+ rows pruned, [0-9]+ -> [0-9]+ bytes$' 15
check "... then closed" wait_log "$log" 'store close alice@example.org' 5
check "the maintain line has no message contents" eval '! grep -q "ops subject one" "$log"'
# Within maintain_interval_s: used and closed again, but not maintained again.
run client imap "$imap" alice@example.org "$tmp/pw.alice@example.org" "ops subject two"
check "a second session works" grep -q "imap ok" "$out"
closed_twice() {
    for _ in $(seq 1 150); do
        [ "$(count_log "$log" 'store close alice@')" -ge 2 ] && return 0
        sleep 0.1
    done
    return 1
}
check "... its store is closed again" closed_twice
check "... and not maintained again within maintain_interval_s" \
    [ "$(count_log "$log" 'store maintain alice@')" -eq 1 ]
stop_server_rc 100
check "the server stops cleanly (exit 0)" [ "$server_rc" -eq 0 ]
check "no sanitizer report (as nobody)" no_sanitizer_report "$log"

# The start-up check looks into every domain directory too.
start_server "$tmp/domain.log" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1 \
    --user=nobody
check "a domain directory nobody cannot use: refused at start-up, named" \
    grep -q "domain directory $root/locked.example is not usable by uid $nobody_uid" \
    "$tmp/domain.log"
stop_server_rc 50
rmdir "$root/locked.example"

# ---- group, cache_size_kib, maintain_interval_s = 0 -----------------------------------------
daemon_gid=$(getent group daemon | cut -d: -f3)
log2="$tmp/server2.log"
start_server "$log2" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1 \
    --user=nobody --group=daemon --store-idle-s=1 --maintain-interval-s=0 --cache-size-kib=512
status=$(cat "/proc/$pid/status" 2>/dev/null)
check "group = daemon: Gid is daemon's ($daemon_gid)" \
    grep -qP "^Gid:\t$daemon_gid\t$daemon_gid\t$daemon_gid\t$daemon_gid$" <<<"$status"
run client imap "$(port imap)" bob@example.org "$tmp/pw.bob@example.org" "ops subject three"
check "bob logs in (his sealed LMTP delivery drained)" grep -q "imap ok" "$out"
check "cache_size_kib = 512 reaches the store (PRAGMA cache_size read back)" \
    grep -q 'store open bob@example.org (worker [0-9]*, page cache 512 KiB)' "$log2"
check "maintain_interval_s = 0: bob's store is closed" wait_log "$log2" 'store close bob@' 15
check "... without maintenance" eval '! grep -q "store maintain" "$log2"'
stop_server_rc 100
check "the second server stops cleanly" [ "$server_rc" -eq 0 ]
check "no sanitizer report (group = daemon)" no_sanitizer_report "$log2"

# ---- the stores afterwards ---------------------------------------------------------------------
run "$mv" stats alice@example.org --json --password-file "$tmp/pw.alice@example.org"
check "mailvault stats alice after the server's maintenance" ok
check "... records the maintenance (last_maintain_at set)" \
    eval '[ "$(json_eval "int(d[\"last_maintain_at\"] is not None and d[\"last_quick_check_ok\"] is True)")" = 1 ]'
for u in alice@example.org bob@example.org; do
    run "$mv" check "$u" --password-file "$tmp/pw.$u"
    check "mailvault check $u" ok
done
run "$mv" stats bob@example.org --json --password-file "$tmp/pw.bob@example.org"
check "bob's store has the LMTP message and the APPEND (2 messages), never maintained" \
    eval '[ "$(json_eval "(d[\"messages\"], d[\"last_maintain_at\"])")" = "(2, None)" ]'

finish
