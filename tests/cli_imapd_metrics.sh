#!/usr/bin/env bash
# cli_imapd_metrics.sh -- mailvaultd's Prometheus metrics and log levels (imapd/metrics.c,
# imapd/log.c; issue 14): the settings are checked at start-up, metrics are off by default,
# then a server with metrics_listen (and implicit TLS, when openssl can make a certificate)
# is exercised by tests/imapd_metrics.py, which parses every scrape with
# python3-prometheus-client and checks that the counters move as its sessions say; last, a
# server with log_level = warning logs a refused connection and no info line.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_metrics.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_test_setup cli_imapd_metrics 2
init_users alice@example.org
mkdir -p "$root"

# ---- settings ----
run "$server" --metrics-listen=localhost:9117 --root="$root"
check "metrics_listen must be ADDRESS:PORT" fails_with 2 'metrics_listen: expected ADDRESS:PORT'
run "$server" --metrics-listen=127.0.0.1:99999 --root="$root"
check "metrics_listen's port must be 0..65535" fails_with 2 'metrics_listen: expected'
run "$server" --log-level=loud --root="$root"
check "log_level takes error, warning, info or debug" fails_with 2 'log_level: expected error'
run "$server" --log=file --root="$root"
check "log takes stderr or syslog" fails_with 2 'log: expected stderr or syslog'
run "$server" --help
check "--help lists metrics_listen and log_level" bash -c "grep -q '^  metrics_listen ' '$out' &&
    grep -q '^  log_level ' '$out'"

# ---- off by default ----
start_server_checked "$tmp/off.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=1
check "metrics are off by default (ports file: metrics=-1)" [ "$(port metrics)" = "-1" ]
stop_server_checked "$tmp/off.log"

# ---- on ----
tls_args=()
if command -v openssl >/dev/null && scripts/make-cert.sh "$tmp/tls" >/dev/null 2>&1; then
    tls_args=(--tls-cert="$tmp/tls/cert.pem" --tls-key="$tmp/tls/key.pem" --imaps-port=0)
fi
start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2 --auth-fail-delay-ms=0 --metrics-listen=127.0.0.1:0 "${tls_args[@]}"
check "the metrics port is bound and in the ports file" [ "$(port metrics)" -gt 0 ]
check "the log names the metrics URL" grep -q "info: metrics: http://127.0.0.1:0/metrics (port $(port metrics))" "$tmp/server.log"
run_client 120 "$PY" tests/imapd_metrics.py --metrics "$(port metrics)" --imap "$(port imap)" \
    --imaps "$(port imaps)" --lmtp "$(port lmtp)" --workers 2 \
    --user "alice@example.org:alice@example.org secret" --answers "$tmp/answers.json"
stop_server_checked "$tmp/server.log"
log="$tmp/server.log"

# ---- the FETCH BODYSTRUCTURE answers outlive the server (the store's memos) ----
start_server_checked "$tmp/again.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2 --auth-fail-delay-ms=0 --metrics-listen=127.0.0.1:0
run_client 120 "$PY" tests/imapd_metrics.py --metrics "$(port metrics)" --imap "$(port imap)" \
    --lmtp "$(port lmtp)" --workers 2 --restarted --answers "$tmp/answers.json" \
    --user "alice@example.org:alice@example.org secret"
stop_server_checked "$tmp/again.log"
# answers another format (or GMime) wrote: the tag's first byte is the format's version
run "$mv" sql --password-file "$tmp/pw.alice@example.org" --kdf-iter "$MAILVAULT_KDF_ITER" \
    "$root/example.org/alice.db" "UPDATE body_memos SET data = X'00' || substr(data, 2)"
check "the stored answers' tags changed" ok
# ... and the saved sent days and Message-ID fields damaged: a bit of the first byte flipped
run "$mv" sql --password-file "$tmp/pw.alice@example.org" --kdf-iter "$MAILVAULT_KDF_ITER" \
    "$root/example.org/alice.db" "UPDATE mailbox_memos SET data = CAST(char((unicode(substr(data, 1, 1)) | 1) - (unicode(substr(data, 1, 1)) & 1)) AS BLOB) || substr(data, 2)"
check "the saved sent days and Message-ID fields changed" ok
start_server_checked "$tmp/stale.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=2 --auth-fail-delay-ms=0 --metrics-listen=127.0.0.1:0
run_client 120 "$PY" tests/imapd_metrics.py --metrics "$(port metrics)" --imap "$(port imap)" \
    --lmtp "$(port lmtp)" --workers 2 --restarted --stale-tags --answers "$tmp/answers.json" \
    --user "alice@example.org:alice@example.org secret"
stop_server_checked "$tmp/stale.log"
check "log: levels on every line" bash -c "! grep -vE '^[0-9TZ:-]+ mailvaultd: (error|warning|info|debug): ' '$log' | grep -q 'mailvaultd: '"
check "log: connects are info" grep -q ' mailvaultd: info: connect 127.0.0.1' "$log"
check "log: a failed login is info, with no password" bash -c "grep -q 'info: login failed alice@example.org' '$log' &&
    ! grep -q 'wrong password\"' '$log'"

# ---- log_level = warning: a refused connection (warning) and nothing at info ----
start_server_checked "$tmp/warn.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=1 --log-level=warning --connections-per-address-max=1
imap=$(port imap)
"$PY" - "$imap" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
a = socket.create_connection(("127.0.0.1", port), timeout=10)
a.recv(1000)
b = socket.create_connection(("127.0.0.1", port), timeout=10)
b.recv(1000)
b.close()
a.close()
PY
for _ in $(seq 1 100); do grep -q 'refused' "$tmp/warn.log" && break; sleep 0.1; done
stop_server_checked "$tmp/warn.log"
check "log_level=warning: the refused connection is a warning" \
    grep -q ' mailvaultd: warning: refused 127.0.0.1' "$tmp/warn.log"
check "log_level=warning: no info line (connects, start-up)" bash -c "! grep -q ' mailvaultd: info: ' '$tmp/warn.log'"

# ---- ports_file through a symbolic link: written through, the link stays a link ----
ln -s ports-real "$tmp/ports-link"
"$server" --ports-file="$tmp/ports-link" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=1 >"$tmp/link.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do [ -s "$tmp/ports-real" ] && break; sleep 0.1; done
stop_server_checked "$tmp/link.log"
check "ports_file: a symlink is written through, not replaced" bash -c "[ -L '$tmp/ports-link' ] &&
    grep -q '^imap=[0-9]' '$tmp/ports-real' && ! ls '$tmp'/ports-link.tmp 2>/dev/null"

finish
