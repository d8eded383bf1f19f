#!/usr/bin/env bash
# run-server.sh -- the end of `make run`: mailvaultd on 127.0.0.1 (IMAP 1143 with STARTTLS,
# IMAPS 1993, LMTP 2424) over ./var/mail, serving the demo user scripts/demo.sh created
# (demo@example.org, password in var/demo.password).
#
# USAGE
#   scripts/run-server.sh            (after scripts/demo.sh; `make run` runs both)
#   On a terminal the server runs in the foreground until Ctrl-C (SIGINT) or SIGTERM, and
#   stops cleanly. When stdin is not a terminal, or MAILVAULT_RUN_SECONDS is set, it runs a
#   short scripted check against the running server instead (python3 imaplib: LOGIN,
#   SELECT, FETCH over IMAPS; one LMTP delivery seen over IMAP), then stops the server and
#   exits 0 only if the check passed. MAILVAULT_RUN_SECONDS=N also keeps the server up N
#   seconds after the check (to try a client by hand).
#   The ports can be moved with MAILVAULT_IMAP_PORT, MAILVAULT_IMAPS_PORT, MAILVAULT_LMTP_PORT,
#   MAILVAULT_METRICS_PORT (Prometheus metrics at http://127.0.0.1:9117/metrics).
#
# The password never appears on a command line: the check reads it from var/demo.password,
# and the printed curl example uses a netrc file (mode 0600) written from it.
set -euo pipefail
cd "$(dirname "$0")/.."

server=build/mailvaultd
user=demo@example.org
pwfile=var/demo.password
root=var/mail
tls=var/tls
netrc=var/demo.netrc
imap_port=${MAILVAULT_IMAP_PORT:-1143}
imaps_port=${MAILVAULT_IMAPS_PORT:-1993}
lmtp_port=${MAILVAULT_LMTP_PORT:-2424}
metrics_port=${MAILVAULT_METRICS_PORT:-9117}
unset MAILVAULT_PASSWORD MAILVAULT_KDF_ITER # the demo store uses the real key derivation

if [ ! -x "$server" ]; then
    echo "run-server: $server is missing; run 'make run' (or 'make all') first" >&2
    exit 1
fi
if [ ! -f "$pwfile" ] || [ ! -f "$root/example.org/demo.db" ]; then
    echo "run-server: no demo store; run scripts/demo.sh first" >&2
    exit 1
fi
scripts/make-cert.sh "$tls" >/dev/null
(umask 077 && printf 'machine 127.0.0.1\nlogin %s\npassword %s\n' "$user" "$(cat "$pwfile")" >"$netrc")

scripted=0
if [ ! -t 0 ] || [ -n "${MAILVAULT_RUN_SECONDS:-}" ]; then
    scripted=1
fi

rm -f var/mailvaultd.ports
# A demo on a developer's machine: as root (a container), serve as root rather than refuse.
[ "$(id -u)" -eq 0 ] && export MAILVAULTD_ALLOW_ROOT=yes
"$server" --listen=127.0.0.1 --imap-port="$imap_port" --imaps-port="$imaps_port" \
    --lmtp-port="$lmtp_port" --root="$root" --tls-cert="$tls/cert.pem" \
    --tls-key="$tls/key.pem" --metrics-listen="127.0.0.1:$metrics_port" \
    --ports-file=var/mailvaultd.ports &
pid=$!
stop_server() {
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    fi
}
trap stop_server EXIT
for _ in $(seq 1 100); do
    [ -f var/mailvaultd.ports ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if [ ! -f var/mailvaultd.ports ]; then
    echo "run-server: mailvaultd did not start (is a port in use? see its message above)" >&2
    exit 1
fi

cat <<EOF

== mailvaultd is running (pid $pid), store root $root
  IMAP   127.0.0.1:$imap_port  (STARTTLS; LOGIN allowed on loopback)
  IMAPS  127.0.0.1:$imaps_port  (implicit TLS, self-signed certificate $tls/cert.pem)
  LMTP   127.0.0.1:$lmtp_port
  metrics http://127.0.0.1:$metrics_port/metrics  (Prometheus text format)
  user   $user, password in $pwfile

Connect a mail client (Thunderbird, mutt, ...) to 127.0.0.1 port $imaps_port with SSL/TLS,
accepting the self-signed certificate, or try curl (the password comes from a netrc file):
  curl --insecure --netrc-file $netrc imaps://127.0.0.1:$imaps_port/
  curl --insecure --netrc-file $netrc 'imaps://127.0.0.1:$imaps_port/INBOX;UID=1'
Watch it run (connections, logins, commands with latencies, deliveries):
  curl -s http://127.0.0.1:$metrics_port/metrics | grep -v '^#'
Who is logged in, through the control socket $root/.mailvaultd.sock (docs/CONTROL.md):
  build/mailvault who --root $root
Deliver a message (a file message.eml) over LMTP:
  python3 -c 'import smtplib, sys; smtplib.LMTP("127.0.0.1", $lmtp_port).sendmail(
    "you@example.org", ["$user"], open(sys.argv[1], "rb").read())' message.eml
EOF

if [ "$scripted" -eq 0 ]; then
    echo "Ctrl-C stops the server."
    trap 'kill -TERM "$pid" 2>/dev/null || true' INT TERM
    set +e
    while kill -0 "$pid" 2>/dev/null; do
        wait "$pid"
    done
    exit 0
fi

echo
echo "== stdin is not a terminal (or MAILVAULT_RUN_SECONDS is set): a scripted check"
set +e
timeout 120 python3 - "$imaps_port" "$lmtp_port" "$user" "$pwfile" "$metrics_port" <<'PY'
import imaplib, smtplib, ssl, sys, time
imaps_port, lmtp_port, user, pwfile = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
metrics_port = int(sys.argv[5])
password = open(pwfile).read().strip()
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
subject = "make run check %d" % int(time.time() * 1000)
msg = ("From: Check <check@example.org>\r\nTo: %s\r\nSubject: %s\r\n\r\nHello over LMTP.\r\n"
       % (user, subject)).encode()
lmtp = smtplib.LMTP("127.0.0.1", lmtp_port, timeout=60)
refused = lmtp.sendmail("check@example.org", [user], msg)
lmtp.quit()
assert not refused, refused
print("LMTP: delivered one message to %s" % user)
imap = imaplib.IMAP4_SSL("127.0.0.1", imaps_port, ssl_context=ctx, timeout=60)
imap.login(user, password)
typ, data = imap.select("INBOX", readonly=True)
assert typ == "OK", data
print("IMAPS: LOGIN ok, SELECT INBOX: %s messages" % data[0].decode())
# The delivery was sealed (the user was logged out): the server moves it into INBOX after
# the login, so poll for it with a deadline (docs/DELIVERY.md).
deadline = time.monotonic() + 60
while True:
    typ, data = imap.uid("SEARCH", None, "SUBJECT", '"%s"' % subject)
    uids = data[0].split() if typ == "OK" else []
    if uids or time.monotonic() > deadline:
        break
    imap.noop()
    time.sleep(0.05)
assert typ == "OK" and len(uids) == 1, data
typ, data = imap.uid("FETCH", uids[0], "(BODY.PEEK[])")
# LMTP adds Return-Path and Delivered-To (RFC 5321 4.4, as Dovecot does) before the message
assert typ == "OK" and data[0][1].endswith(msg) and data[0][1].startswith(b"Return-Path: "), data
print("IMAPS: FETCH of UID %s: the delivered bytes after Return-Path and Delivered-To" % uids[0].decode())
typ, data = imap.fetch("1:*", "(FLAGS RFC822.SIZE)")
assert typ == "OK", data
imap.logout()
import urllib.request
metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=30).read()
assert b'mailvaultd_logins_total{result="ok"}' in metrics, metrics[:400]
print("metrics: http://127.0.0.1:%d/metrics answers (logins, commands, deliveries)" % metrics_port)
print("check passed")
PY
rc=$?
if [ "$rc" -eq 0 ]; then
    # The control socket answers for this root (docs/CONTROL.md).
    if build/mailvault who --root "$root" >/dev/null; then
        echo "control: 'mailvault who' answers through $root/.mailvaultd.sock"
    else
        rc=1
    fi
fi
if [ "$rc" -eq 0 ] && [ -n "${MAILVAULT_RUN_SECONDS:-}" ] && [ "$MAILVAULT_RUN_SECONDS" -gt 0 ]; then
    echo "the server stays up ${MAILVAULT_RUN_SECONDS}s (MAILVAULT_RUN_SECONDS)"
    sleep "$MAILVAULT_RUN_SECONDS"
fi
stop_server
wait "$pid"
server_rc=$?
if [ "$rc" -ne 0 ]; then
    echo "run-server: the scripted check FAILED" >&2
    exit 1
fi
if [ "$server_rc" -ne 0 ]; then
    echo "run-server: mailvaultd exited with $server_rc" >&2
    exit 1
fi
echo "mailvaultd stopped cleanly"
