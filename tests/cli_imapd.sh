#!/usr/bin/env bash
# cli_imapd.sh -- end-to-end tests of mailvaultd (the ASan build, build/asan/mailvaultd): starts
# the server on free loopback ports (port 0, read back from --ports-file) over a temporary
# store root with two users, a self-signed certificate (scripts/make-cert.sh) for STARTTLS
# and implicit TLS, then runs tests/imapd_client.py against it (imaplib, smtplib.LMTP, raw
# sockets), then curl (LIST, CREATE, upload, fetch, STARTTLS) and mbsync (a two-way sync
# with a Maildir) when installed, stops the server with SIGTERM and checks that it exited
# cleanly with no sanitizer report in its log. A second server checks the connection limit,
# the idle timeout and, on a non-loopback address, that LOGIN needs TLS there.
# KEEP_TMP=1 keeps the temporary directory; MAILVAULTD=path tests another build (TSan).
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd.sh
#   (tests/run.sh runs it as part of `make test`.)
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.."
. tests/imapd_lib.sh # start_server, port, stop_server, stop_server_rc, add_summary, the trap

server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}" # MAILVAULTD=...: another build (TSan)
mv="$PWD/build/asan/mailvault"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli_imapd.XXXXXX")
imapd_trap
unset MAILVAULT_PASSWORD
export MAILVAULT_KDF_ITER=2
# A TSan build (MAILVAULTD=...): GLib's own locking is invisible to it (tests/tsan.supp).
export TSAN_OPTIONS="${TSAN_OPTIONS:-suppressions=$PWD/tests/tsan.supp}"
export MAILVAULT_ROOT="$tmp/root"

passed=0
failed=0
check() {
    local name=$1
    shift
    if "$@"; then
        echo "ok $name"
        passed=$((passed + 1))
    else
        echo "not ok $name"
        failed=$((failed + 1))
    fi
}
finish() {
    echo "# $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}
# run_client NAME SECONDS ARGS...: runs tests/imapd_client.py ARGS with a timeout, shows its
# lines and adds its "# N passed, N failed" to the counts (a missing summary is a failure).
run_client() {
    local name=$1 seconds=$2
    shift 2
    local out="$tmp/client-$name.out"
    timeout "$seconds" python3 tests/imapd_client.py "$@" >"$out" 2>&1
    local rc=$?
    grep -v '^# ' "$out"
    if ! add_summary "$out"; then
        echo "not ok the $name client printed no summary (exit $rc)"
        failed=$((failed + 1))
    fi
}

for f in "$server" "$mv"; do
    if [ ! -x "$f" ]; then
        echo "not ok $f is missing (make build/asan/mailvaultd build/asan/mailvault)"
        failed=$((failed + 1))
        finish
    fi
done
if ! command -v python3 >/dev/null; then
    echo "not ok python3 is missing (scripts/install-deps.sh)"
    failed=$((failed + 1))
    finish
fi

printf 'alice password' >"$tmp/pw1"
printf 'bob password' >"$tmp/pw2"
quiet() { "$@" >/dev/null; }
check "init alice" quiet "$mv" init alice@example.org --password-file "$tmp/pw1"
check "init bob" quiet "$mv" init bob@example.org --password-file "$tmp/pw2"

tls_args=()
client_tls=()
if command -v openssl >/dev/null && scripts/make-cert.sh "$tmp/tls" >/dev/null; then
    tls_args=(--tls-cert="$tmp/tls/cert.pem" --tls-key="$tmp/tls/key.pem" --imaps-port=0)
    client_tls=(--tls)
fi

max_size=1048576
delay_ms=300
start_server "$tmp/server.log" --root="$tmp/root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 \
    --auth-fail-delay-ms=$delay_ms --literal-max=$max_size --workers=2 "${tls_args[@]}"
check "server starts and writes its ports" test -f "$tmp/ports"
if [ ! -f "$tmp/ports" ]; then
    sed 's/^/    server: /' "$tmp/server.log"
    finish
fi
imap=$(port imap)
imaps=$(port imaps)
lmtp=$(port lmtp)
[ "$imaps" = "-1" ] && imaps=0

run_client main 300 --imap "$imap" --imaps "$imaps" --lmtp "$lmtp" \
    --user alice@example.org --password 'alice password' \
    --user2 bob@example.org --password2 'bob password' \
    --auth-delay-ms $delay_ms --max-size $max_size "${client_tls[@]}"

check "the server is still running after the client" kill -0 "$pid"

# ---- interop: curl and mbsync against the same server (skipped if not installed) ----------
url="imap://127.0.0.1:$imap"
cred="alice@example.org:alice password"
printf 'From: curl@example.org\r\nSubject: by curl\r\n\r\nuploaded with curl\r\n' >"$tmp/curl.eml"
if command -v curl >/dev/null; then
    curl_q() { curl -s --max-time 20 -u "$cred" "$@"; }
    check "curl: LIST" bash -c "$(declare -f curl_q); cred='$cred'; curl_q '$url/' | grep -q INBOX"
    check "curl: CREATE" quiet curl_q "$url/" -X 'CREATE Curl'
    check "curl: APPEND (upload)" quiet curl_q -T "$tmp/curl.eml" "$url/Curl"
    curl_q "$url/Curl;UID=1" >"$tmp/curl.out"
    check "curl: FETCH by UID is byte-identical" cmp -s "$tmp/curl.eml" "$tmp/curl.out"
    if [ ${#tls_args[@]} -gt 0 ]; then
        curl_q --ssl-reqd -k "$url/Curl;UID=1" >"$tmp/curl_tls.out"
        check "curl: FETCH over STARTTLS" cmp -s "$tmp/curl.eml" "$tmp/curl_tls.out"
    fi
else
    echo "# curl not installed: skipped (scripts/install-deps.sh)"
fi
if command -v mbsync >/dev/null; then
    mkdir -p "$tmp/maildir"
    cat >"$tmp/mbsyncrc" <<EOF_RC
IMAPAccount vault
Host 127.0.0.1
Port $imap
User alice@example.org
Pass "alice password"
SSLType None
AuthMechs LOGIN PLAIN
Timeout 20

IMAPStore remote
Account vault

MaildirStore local
Path $tmp/maildir/
Inbox $tmp/maildir/INBOX
SubFolders Verbatim

Channel vault
Far :remote:
Near :local:
Patterns INBOX Curl Archive
Create Both
Expunge Both
SyncState *
EOF_RC
    timeout 60 mbsync -q -c "$tmp/mbsyncrc" -a >"$tmp/mbsync.out" 2>&1
    check "mbsync: first sync" [ $? -eq 0 ]
    got=$(find "$tmp/maildir/Curl/cur" "$tmp/maildir/Curl/new" -type f | head -n 1)
    # mbsync stores Maildir files with LF line ends and its own X-TUID header
    check "mbsync: the Curl message arrived intact" \
        bash -c "[ -n '$got' ] && tr -d '\r' <'$tmp/curl.eml' | cmp -s - <(grep -v '^X-TUID: ' '$got')"
    inbox_remote=$(curl -s --max-time 20 -u "$cred" "$url/" -X 'STATUS INBOX (MESSAGES)' |
        sed -n 's/.*MESSAGES \([0-9]*\).*/\1/p')
    inbox_local=$(find "$tmp/maildir/INBOX/cur" "$tmp/maildir/INBOX/new" -type f | wc -l)
    skipped=$(grep -c 'incomplete header; skipping' "$tmp/mbsync.out") # the LITERAL+ "hello"
    check "mbsync: INBOX has what the server has ($inbox_remote, $skipped without a header)" \
        [ "$((inbox_local + skipped))" = "$inbox_remote" ]
    printf 'From: local@example.org\r\nSubject: pushed by mbsync\r\n\r\nfrom the Maildir\r\n' \
        >"$tmp/maildir/Curl/new/1700000000.push.local"
    timeout 60 mbsync -q -c "$tmp/mbsyncrc" -a >>"$tmp/mbsync.out" 2>&1
    check "mbsync: second sync (push)" [ $? -eq 0 ]
    check "mbsync: the pushed message is on the server" \
        bash -c "curl -s --max-time 20 -u '$cred' '$url/Curl' -X 'SEARCH SUBJECT pushed' |
                 grep -qE 'SEARCH [0-9]'"
    if [ "$failed" -ne 0 ]; then
        sed 's/^/    mbsync: /' "$tmp/mbsync.out" | tail -n 20
    fi
else
    echo "# mbsync not installed: skipped (scripts/install-deps.sh)"
fi
# A session in IDLE while the server stops: it gets BYE, and the stop is still clean.
timeout 30 python3 - "$imap" >"$tmp/idle_at_stop.out" 2>&1 <<'EOF_PY' &
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
f = s.makefile("rb")
f.readline()
s.sendall(b'a LOGIN alice@example.org "alice password"\r\na SELECT INBOX\r\na IDLE\r\n')
while True:
    line = f.readline()
    if not line:
        break
    if line.startswith(b"+"):
        print("idling", flush=True)
    if line.startswith(b"* BYE"):
        print("bye", flush=True)
EOF_PY
idler=$!
for _ in $(seq 1 100); do
    grep -q idling "$tmp/idle_at_stop.out" 2>/dev/null && break
    sleep 0.1
done
pid_was=$pid
stop_server_rc 100
check "the server stops cleanly on SIGTERM" [ "$server_rc" -eq 0 ]
wait "$idler" 2>/dev/null
check "a session in IDLE at the stop gets BYE" grep -q bye "$tmp/idle_at_stop.out"
check "no sanitizer report in the server log" no_sanitizer_report "$tmp/server.log"
check "the log never holds a password" bash -c "! grep -qE 'alice password|bob password' '$tmp/server.log'"

# A second server for the limits: two connections per address, a one-second idle timeout.
# It listens on this host's first non-loopback address if it has one (only there, for a few
# seconds), to check that LOGIN is refused there without TLS; else on 127.0.0.1.
external_ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -E '^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$' |
    grep -v '^127\.' | head -n 1)
listen=127.0.0.1
[ -n "$external_ip" ] && listen=$external_ip
if start_server "$tmp/server2.log" --root="$tmp/root" --listen=$listen --imap-port=0 --lmtp-port=-1 \
    --idle-timeout-s=1 --connections-per-address-max=2; then
    run_client limits 60 --limits --imap "$(port imap)" --lmtp 0 \
        --external-ip "$external_ip" \
        --user alice@example.org --password x --user2 bob@example.org --password2 x
else
    echo "not ok the second server did not start"
    failed=$((failed + 1))
fi
stop_server
pid=""
check "no sanitizer report in the second server's log" no_sanitizer_report "$tmp/server2.log"

# A third server with a storage quota of 8 KiB, for a fresh user.
printf 'carol password' >"$tmp/pw3"
check "init carol" quiet "$mv" init carol@example.org --password-file "$tmp/pw3"
if start_server "$tmp/server3.log" --root="$tmp/root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 \
    --quota-kib=8; then
    run_client quota 60 --quota --imap "$(port imap)" --lmtp "$(port lmtp)" \
        --user carol@example.org --password 'carol password' --user2 bob@example.org \
        --password2 x
else
    echo "not ok the quota server did not start"
    failed=$((failed + 1))
fi
stop_server
pid=""
check "no sanitizer report in the quota server's log" no_sanitizer_report "$tmp/server3.log"

if [ "$failed" -ne 0 ]; then
    echo "    server log ($pid_was):"
    tail -n 40 "$tmp/server.log" | sed 's/^/    /'
fi
finish
