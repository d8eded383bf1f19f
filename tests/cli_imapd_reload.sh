#!/usr/bin/env bash
# shellcheck disable=SC1091,SC2016,SC2034,SC2154 # lib.sh sets out, err, root; eval strings expand late on purpose (and read variables set here)
# cli_imapd_reload.sh -- mailvaultd under a service manager (docs/IMAPD.md, "Running it in
# production"): the NOTIFY_SOCKET protocol (imapd/notify.c) and SIGHUP (imapd/main.c,
# imapd/tls.c, imapd/quota_file.c).
#
# A Python datagram listener stands in for systemd: it binds the socket named by
# NOTIFY_SOCKET (a path, then an @abstract name), asks for the sender's credentials
# (SO_PASSCRED, as systemd does for NotifyAccess=main) and writes one line per datagram:
# "pid=P uid=U MESSAGE" with the message's line breaks as '|'. Checked:
#   - READY=1 from the server's PID once the ports are bound, naming them in STATUS;
#     STOPPING=1 at SIGTERM; RELOADING=1 with MONOTONIC_USEC, then READY=1, around SIGHUP.
#   - SIGHUP with a new certificate and key: new connections (implicit TLS and STARTTLS)
#     get the new certificate (SHA-256 of what the peer sends against the file's), a
#     connection opened before keeps working on the old one, the log names the new
#     fingerprint as `openssl x509 -fingerprint -sha256` prints it.
#   - SIGHUP with a broken key, a key of another certificate, a missing key, a bad quota
#     file: one log line each, the previous state kept, the server alive, READY=1 after.
#   - SIGHUP re-reads a quota file whose inode, size and mtime did not change (the periodic
#     check cannot see that edit: only the forced re-read can).
#   - 15 SIGHUPs while clients keep making TLS connections (ASan: the contexts' references).
#   - A NOTIFY_SOCKET that is not a path or @name: logged, the server starts anyway.
#   - As root with user = nobody: READY=1 sent as nobody (after the switch, through the
#     socket connected before it); a key only root can read fails the reload with the
#     hint; made group-readable, the next reload takes it.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_reload.sh
#   KEEP_TMP=1 keeps the temporary directory. Not root: the user = nobody part is skipped.
#
# Every wait has a timeout, the server and the listener are always stopped (trap), and the
# last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="$PWD/build/asan/mailvault"
# Under /tmp whatever TMPDIR says: the server, as nobody, must reach the store root.
TMPDIR=/tmp make_tmp cli_imapd_reload
store_root 2
listener_pid=""
stop_listener() {
    if [ -n "$listener_pid" ]; then
        kill "$listener_pid" 2>/dev/null
        wait "$listener_pid" 2>/dev/null
    fi
    listener_pid=""
}
imapd_trap stop_listener

for f in "$server" "$mv"; do
    if [ ! -x "$f" ]; then
        fail "$f is missing (make build/asan/mailvaultd build/asan/mailvault)"
        finish
    fi
done
if ! command -v openssl >/dev/null; then
    fail "openssl is missing (scripts/make-cert.sh needs it)"
    finish
fi
# Private copies: others may rebuild the tree while this runs.
cp "$server" "$tmp/mailvaultd" && server="$tmp/mailvaultd"
cp "$mv" "$tmp/mailvault" && mv="$tmp/mailvault"
init_users alice@example.org

wait_log() { # LOG PATTERN SECONDS: 0 once grep -E PATTERN matches in LOG
    for _ in $(seq 1 $(($3 * 10))); do
        grep -qE "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
count_log() { grep -cE "$2" "$1" 2>/dev/null; }
wait_count() { # LOG PATTERN COUNT SECONDS: 0 once PATTERN matches COUNT lines or more
    for _ in $(seq 1 $(($4 * 10))); do
        [ "$(count_log "$1" "$2")" -ge "$3" ] && return 0
        sleep 0.1
    done
    return 1
}

cat >"$tmp/notify_listen.py" <<'PY'
import os, socket, struct, sys

name, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind("\0" + name[1:] if name.startswith("@") else name)
f = open(out, "w", buffering=1)
f.write("listening\n")
size = struct.calcsize("3i")
while True:
    msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(size))
    pid = uid = -1
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid, uid, _ = struct.unpack("3i", data[:size])
    f.write("pid=%d uid=%d %s\n" % (pid, uid, msg.decode(errors="replace").replace("\n", "|")))
PY

cat >"$tmp/tls_client.py" <<'PY'
import hashlib, imaplib, os, ssl, sys, time

def ctx():
    c = ssl.create_default_context()
    c.check_hostname = False
    c.verify_mode = ssl.CERT_NONE  # self-signed: the test compares fingerprints instead
    return c

def fp(sock):
    return hashlib.sha256(sock.getpeercert(binary_form=True)).hexdigest()

def connect(port, starttls):
    if starttls:
        c = imaplib.IMAP4("127.0.0.1", port, timeout=30)
        c.starttls(ssl_context=ctx())
    else:
        c = imaplib.IMAP4_SSL("127.0.0.1", port, ssl_context=ctx(), timeout=30)
    return c

cmd = sys.argv[1]
if cmd == "file":  # the SHA-256 of a PEM certificate's DER form
    print(hashlib.sha256(ssl.PEM_cert_to_DER_cert(open(sys.argv[2]).read())).hexdigest())
elif cmd == "peer":  # PORT imaps|starttls: the certificate a new connection gets
    c = connect(int(sys.argv[2]), sys.argv[3] == "starttls")
    print(fp(c.sock))
    assert c.noop()[0] == "OK"
    c.logout()
elif cmd == "hold":  # PORT USER PWFILE TRIGGER: a session that spans a reload
    port, user, pwfile, trigger = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    c = connect(port, False)
    c.login(user, open(pwfile).read())
    print("before " + fp(c.sock), flush=True)
    for _ in range(600):
        if os.path.exists(trigger):
            break
        time.sleep(0.1)
    msg = b"From: r@example.org\r\nSubject: across a reload\r\n\r\nstill here\r\n"
    assert c.noop()[0] == "OK"
    assert c.append("INBOX", None, None, msg)[0] == "OK"
    c.select("INBOX")
    typ, data = c.uid("SEARCH", None, "SUBJECT", '"across a reload"')
    typ, data = c.uid("FETCH", data[0].split()[-1], "(BODY.PEEK[])")
    assert typ == "OK" and data[0][1] == msg, data
    print("after " + fp(c.sock) + " ok", flush=True)
    c.logout()
elif cmd == "quota":  # PORT USER PWFILE: the STORAGE limit GETQUOTAROOT reports
    c = connect(int(sys.argv[2]), False)
    c.login(sys.argv[3], open(sys.argv[4]).read())
    typ, data = c.getquotaroot("INBOX")
    print(" ".join(d.decode() if isinstance(d, bytes) else str(d) for d in data[1]))
    c.logout()
elif cmd == "churn":  # PORT SECONDS: TLS connections one after another; the count
    port, until, n = int(sys.argv[2]), time.time() + float(sys.argv[3]), 0
    while time.time() < until:
        c = connect(port, False)
        assert c.noop()[0] == "OK"
        c.logout()
        n += 1
    print("churn ok %d" % n)
PY
tlsc() { timeout 60 "$PY" "$tmp/tls_client.py" "$@"; }
# The fingerprint as the server logs it: `openssl x509 -fingerprint -sha256`'s AB:CD:... form.
openssl_fp() { openssl x509 -in "$1" -noout -fingerprint -sha256 | sed 's/^.*=//'; }

# start_listener NAME: the fake service manager on NAME, its lines in $notify_log.
start_listener() {
    notify_log="$tmp/notify.$2.log"
    "$PY" "$tmp/notify_listen.py" "$1" "$notify_log" &
    listener_pid=$!
    wait_log "$notify_log" '^listening$' 10
}
notify_lines() { grep -v '^listening$' "$notify_log"; }

# ---- certificates: a and b (each its own key), the live pair the server reads -------------
scripts/make-cert.sh "$tmp/a" >/dev/null && scripts/make-cert.sh "$tmp/b" >/dev/null
check "two test certificates" eval '[ -s "$tmp/a/cert.pem" ] && [ -s "$tmp/b/cert.pem" ]'
fp_a=$(tlsc file "$tmp/a/cert.pem")
fp_b=$(tlsc file "$tmp/b/cert.pem")
check "... with different fingerprints" eval '[ -n "$fp_a" ] && [ "$fp_a" != "$fp_b" ]'
mkdir "$tmp/live"
install_pair() { cp "$tmp/$1/cert.pem" "$tmp/live/cert.pem" && cp "$tmp/$2/key.pem" "$tmp/live/key.pem"; }
install_pair a a
printf 'alice@example.org 1000 50\n' >"$tmp/quota"

# ---- READY=1 on a path socket ---------------------------------------------------------------
check "the fake service manager listens on a path socket" start_listener "$tmp/notify.sock" path
log="$tmp/server.log"
export NOTIFY_SOCKET="$tmp/notify.sock"
start_server "$log" --root="$root" --listen=127.0.0.1 --imap-port=0 --imaps-port=0 \
    --lmtp-port=-1 --tls-cert="$tmp/live/cert.pem" --tls-key="$tmp/live/key.pem" \
    --quota-file="$tmp/quota"
unset NOTIFY_SOCKET
check "the server starts" [ -s "$tmp/ports" ]
imap=$(port imap)
imaps=$(port imaps)
check "READY=1 arrives" wait_log "$notify_log" 'READY=1' 10
check "... from the server's PID (what NotifyAccess=main checks)" \
    eval 'notify_lines | head -n 1 | grep -q "^pid=$pid uid=$(id -u) READY=1|STATUS=serving: "'
check "... its STATUS names the ports bound" \
    grep -q "STATUS=serving: imap port $imap, imaps port $imaps, lmtp port -1" "$notify_log"
check "the log says where it notifies" grep -q "through NOTIFY_SOCKET=$tmp/notify.sock" "$log"
check "the start-up log names the certificate's fingerprint (as openssl prints it)" \
    grep -q "TLS certificate $tmp/live/cert.pem (SHA-256 $(openssl_fp "$tmp/a/cert.pem"), not after 20" "$log"
run tlsc peer "$imaps" imaps
check "imaps serves certificate a" grep -qx "$fp_a" "$out"
run tlsc quota "$imaps" alice@example.org "$tmp/pw.alice@example.org"
check "the quota file's STORAGE limit is 1000" grep -q 'STORAGE [0-9]* 1000' "$out"

# A session made before the reload, held open across it.
tlsc hold "$imaps" alice@example.org "$tmp/pw.alice@example.org" "$tmp/trigger" >"$tmp/hold.out" 2>&1 &
client_pid=$!
check "a session opens on certificate a" wait_log "$tmp/hold.out" "^before $fp_a$" 15

# ---- SIGHUP with certificate b --------------------------------------------------------------
install_pair b b
kill -HUP "$pid"
check "SIGHUP: the reload finishes without failures" wait_log "$log" 'reload done$' 10
check "... the log names certificate b's fingerprint" \
    grep -q "reload: TLS certificate $tmp/live/cert.pem loaded (SHA-256 $(openssl_fp "$tmp/b/cert.pem")" "$log"
check "... the quota file was re-read too" grep -q "quota file $tmp/quota: reloaded, 1 entries" "$log"
check "... RELOADING=1 with MONOTONIC_USEC, then READY=1 (reloaded)" \
    eval 'notify_lines | sed -n 2,3p | tr "\n" " " | grep -qE "^pid=$pid uid=[0-9]+ RELOADING=1[|]MONOTONIC_USEC=[0-9]+[|]STATUS=[^|]* pid=$pid uid=[0-9]+ READY=1[|]STATUS=serving; reloaded $"'
run tlsc peer "$imaps" imaps
check "a new imaps connection gets certificate b" grep -qx "$fp_b" "$out"
run tlsc peer "$imap" starttls
check "a new STARTTLS connection gets certificate b" grep -qx "$fp_b" "$out"
touch "$tmp/trigger"
wait "$client_pid"
hold_rc=$?
client_pid=""
check "the session opened before the reload still works, on certificate a" \
    eval '[ "$hold_rc" -eq 0 ] && grep -qx "after $fp_a ok" "$tmp/hold.out"'

# ---- SIGHUP re-reads a quota file edited in place (same inode, size and mtime) ---------------
touch -r "$tmp/quota" "$tmp/quota.time"
printf 'alice@example.org 2000 50\n' >"$tmp/quota" # same length: same size
touch -r "$tmp/quota.time" "$tmp/quota"
sleep 2.5 # past the periodic check's 2 s: it looks, sees the same file, keeps the table
run tlsc quota "$imaps" alice@example.org "$tmp/pw.alice@example.org"
check "an in-place edit with the old mtime is not seen by the periodic check" \
    grep -q 'STORAGE [0-9]* 1000' "$out"
kill -HUP "$pid"
check "SIGHUP: a second reload" wait_count "$log" 'reload done$' 2 10
run tlsc quota "$imaps" alice@example.org "$tmp/pw.alice@example.org"
check "... and the STORAGE limit is now 2000" grep -q 'STORAGE [0-9]* 2000' "$out"

# ---- reloads that fail keep the previous state --------------------------------------------
reloads_failed=0
# hup_fails TEXT PATTERN: SIGHUP; the reload fails with PATTERN in one log line; the server
# is alive, READY=1 says so, and imaps still serves certificate b.
hup_fails() {
    reloads_failed=$((reloads_failed + 1))
    kill -HUP "$pid"
    check "$1: the reload reports a failure" \
        wait_count "$log" 'reload done, with failures' "$reloads_failed" 10
    check "... one log line says why: $2" [ "$(count_log "$log" "$2")" -eq 1 ]
    check "... the server is alive" kill -0 "$pid"
    check "... READY=1 follows, STATUS says the reload failed" \
        eval 'notify_lines | tail -n 1 | grep -q "READY=1|STATUS=serving; the last reload failed"'
    run tlsc peer "$imaps" imaps
    check "... new connections still get certificate b" grep -qx "$fp_b" "$out"
}
printf -- '-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n' >"$tmp/live/key.pem"
hup_fails "a broken key" \
    "reload failed: TLS certificate $tmp/live/cert.pem / key $tmp/live/key.pem: the key: .*; new connections keep the previous certificate"
install_pair b a
hup_fails "certificate b with key a" 'reload failed: .*: the key.*: .*key values mismatch'
rm "$tmp/live/key.pem"
hup_fails "a missing key" "reload failed: TLS: cannot read the key $tmp/live/key.pem as uid [0-9]+: No such file or directory"
install_pair b b
printf 'alice@example.org 30x0 50\n' >"$tmp/quota"
kill -HUP "$pid"
check "a bad quota file: the reload reports a failure" \
    wait_count "$log" 'reload done, with failures' $((reloads_failed + 1)) 10
check "... naming file:line, keeping the previous table" \
    grep -q "quota file $tmp/quota:1: storage_kib \"30x0\": .*; keeping the previous table" "$log"
run tlsc quota "$imaps" alice@example.org "$tmp/pw.alice@example.org"
check "... the STORAGE limit is still 2000" grep -q 'STORAGE [0-9]* 2000' "$out"
check "... while certificate b reloaded fine" \
    [ "$(count_log "$log" "reload: TLS certificate .* loaded \(SHA-256 $(openssl_fp "$tmp/b/cert.pem")")" -eq 3 ]

# ---- reloads under load ---------------------------------------------------------------------
printf 'alice@example.org 2000 50\n' >"$tmp/quota"
tlsc churn "$imaps" 6 >"$tmp/churn.out" 2>&1 &
client_pid=$!
for i in $(seq 1 15); do
    if [ $((i % 2)) -eq 0 ]; then install_pair a a; else install_pair b b; fi
    kill -HUP "$pid"
    sleep 0.3
done
wait "$client_pid"
churn_rc=$?
client_pid=""
check "15 reloads while TLS connections come and go: every connection worked" \
    eval '[ "$churn_rc" -eq 0 ] && grep -qE "^churn ok [1-9][0-9]*$" "$tmp/churn.out"'
install_pair b b
kill -HUP "$pid"
serves_b() { # queued SIGHUPs may make one reload: wait for its effect, not for a count
    for _ in $(seq 1 50); do
        [ "$(tlsc peer "$imaps" imaps 2>/dev/null)" = "$fp_b" ] && return 0
        sleep 0.2
    done
    return 1
}
check "... then certificate b again" serves_b

# ---- SIGTERM: STOPPING=1 --------------------------------------------------------------------
stop_server_rc 100
check "SIGTERM: the server stops cleanly (exit 0)" [ "$server_rc" -eq 0 ]
check "... STOPPING=1 was the last notification" \
    eval 'notify_lines | tail -n 1 | grep -q "^pid=[0-9]* uid=[0-9]* STOPPING=1|STATUS=stopping"'
check "... no sanitizer report" no_sanitizer_report "$log"
stop_listener

# ---- an abstract socket name ------------------------------------------------------------------
abstract="@mailvault-test-notify-$$"
check "the fake service manager listens on $abstract" start_listener "$abstract" abstract
export NOTIFY_SOCKET="$abstract"
start_server "$tmp/abstract.log" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1
unset NOTIFY_SOCKET
check "abstract: READY=1 from the server" wait_log "$notify_log" "^pid=$pid .*READY=1" 10
kill -HUP "$pid"
check "abstract: SIGHUP without TLS or quota file: RELOADING=1, READY=1" \
    wait_log "$notify_log" "READY=1[|]STATUS=serving; reloaded" 10
check "... the log says there was nothing to reload" \
    eval 'grep -q "reload: no tls_cert configured" "$tmp/abstract.log" &&
          grep -q "reload: no quota_file configured" "$tmp/abstract.log"'
stop_server_rc 100
check "abstract: STOPPING=1 at SIGTERM" wait_log "$notify_log" 'STOPPING=1' 5
check "... no sanitizer report" no_sanitizer_report "$tmp/abstract.log"
stop_listener

# ---- a NOTIFY_SOCKET that is neither a path nor @name -----------------------------------------
export NOTIFY_SOCKET="relative/notify"
start_server "$tmp/badnotify.log" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1
unset NOTIFY_SOCKET
check "a bad NOTIFY_SOCKET: the server starts anyway" [ -s "$tmp/ports" ]
check "... and logs why it will not notify" \
    grep -q 'NOTIFY_SOCKET=relative/notify: not an absolute path or an @abstract name' "$tmp/badnotify.log"
stop_server_rc 100
check "... and stops cleanly" [ "$server_rc" -eq 0 ]

# ---- as root, user = nobody: the key must be readable by the account that serves -------------
if [ "$(id -u)" -ne 0 ]; then
    echo "# not root: the user = nobody reload tests are skipped"
    finish
fi
unset MAILVAULTD_ALLOW_ROOT
nobody_uid=$(id -u nobody)
nobody_gid=$(id -g nobody)
chmod 711 "$tmp"
chown -R nobody:"$nobody_gid" "$root"
chown nobody "$tmp"       # the ports file is written after the switch
chmod 755 "$tmp/live"
install_pair a a
chmod 644 "$tmp/live/cert.pem" # the certificate is public; the key stays root's, mode 0600
check "the fake service manager listens (socket owned by root)" \
    start_listener "$tmp/notify-root.sock" nobody
chmod 600 "$tmp/notify-root.sock"
log="$tmp/nobody.log"
export NOTIFY_SOCKET="$tmp/notify-root.sock"
start_server "$log" --root="$root" --listen=127.0.0.1 --imap-port=0 --imaps-port=0 \
    --lmtp-port=-1 --tls-cert="$tmp/live/cert.pem" --tls-key="$tmp/live/key.pem" --user=nobody
unset NOTIFY_SOCKET
imaps=$(port imaps)
check "user = nobody: READY=1 sent as nobody, after the switch" \
    wait_log "$notify_log" "^pid=$pid uid=$nobody_uid READY=1" 10
install_pair b b
chmod 644 "$tmp/live/cert.pem"
kill -HUP "$pid"
check "as nobody, a key only root may read: the reload fails" \
    wait_log "$log" 'reload done, with failures' 10
check "... the log line names the uid and says what to do" \
    grep -q "reload failed: TLS: cannot read the key $tmp/live/key.pem as uid $nobody_uid: Permission denied (it must be readable by the account the server runs as, e.g. through group ssl-cert, to be reloaded; or restart instead)" "$log"
run tlsc peer "$imaps" imaps
check "... certificate a is still served" grep -qx "$fp_a" "$out"
chgrp "$nobody_gid" "$tmp/live/key.pem" && chmod 640 "$tmp/live/key.pem"
kill -HUP "$pid"
check "the key made group-readable (as with ssl-cert): the next reload succeeds" \
    wait_log "$log" 'reload done$' 10
run tlsc peer "$imaps" imaps
check "... certificate b is served" grep -qx "$fp_b" "$out"
stop_server_rc 100
check "as nobody: the server stops cleanly" [ "$server_rc" -eq 0 ]
check "... STOPPING=1 sent as nobody" wait_log "$notify_log" "^pid=[0-9]+ uid=$nobody_uid STOPPING=1" 5
check "... no sanitizer report" no_sanitizer_report "$log"

finish
