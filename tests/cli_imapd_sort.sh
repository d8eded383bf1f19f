#!/usr/bin/env bash
# cli_imapd_sort.sh -- SORT and UID SORT (RFC 5256, SORT=DISPLAY of RFC 5957): makes one user
# over a temporary root, starts the ASan server (build/asan/mailvaultd) on a free loopback
# port and, as root, a private Dovecot (bench/dovecot_lib.sh: nothing in /etc/dovecot is
# read), runs tests/imapd_sort.py, which puts the same messages in both and compares every
# answer with its own reading of the RFC and with Dovecot's, then stops both and checks that
# mailvaultd exited 0 with no sanitizer report; then the same with no SORT keys kept
# (--sort-keys-kib=1).
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_sort.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#   Without root or Dovecot (scripts/install-deps.sh installs it) the comparison with
#   Dovecot is left out and said so; the RFC's answers are still checked.
#
# Both servers are always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap
. bench/dovecot_lib.sh # dovecot_config, free_port, wait_port, stop_pid

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="$PWD/build/asan/mailvault"
make_tmp cli_imapd_sort
store_root 1
dc=""
dc_pid=""
stop_dovecot() {
    stop_pid "$dc_pid"
    dc_pid=""
    [ -n "$dc" ] && rm -rf "$dc"
    return 0
}
imapd_trap stop_dovecot
need_binaries "$server" "$mv"

init_users carol@example.org
start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2

dovecot_args=()
if [ "$(id -u)" -eq 0 ] && command -v dovecot >/dev/null && id nobody >/dev/null 2>&1; then
    dc=$(mktemp -d /tmp/mvsort.XXXXXX) # not under $tmp: Dovecot's nobody must reach it
    chmod 755 "$dc"
    (umask 077 && echo "sort-secret" >"$dc/password")
    dc_port=$(free_port)
    dovecot_config "$dc" "$dc_port" -1 "$dc/password" dave@example.org
    dovecot -F -c "$dc/dovecot.conf" >"$dc/stderr.log" 2>&1 &
    dc_pid=$!
    if wait_port "$dc_port" "$dc_pid"; then
        dovecot_args=(--dovecot "$dc_port" --dovecot-user "dave@example.org:sort-secret")
    else
        fail "a private Dovecot starts"
        sed 's/^/    dovecot: /' "$dc/stderr.log" "$dc/dovecot.log" 2>/dev/null | tail -n 5
    fi
else
    echo "# not root or no Dovecot: SORT is compared with the RFC's reading only"
fi

run_client 120 "$PY" tests/imapd_sort.py --imap "$(port imap)" \
    --user "carol@example.org:carol@example.org secret" "${dovecot_args[@]}"
stop_server_checked "$tmp/server.log"

# The keys the store kept were saved at its close (a mailbox memo): after a restart they are
# read back, not made again from the messages (tests/imapd_sort.py test_saved).
start_server_checked "$tmp/server-saved.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2 --metrics-listen=127.0.0.1:0
run_client 120 "$PY" tests/imapd_sort.py --imap "$(port imap)" --saved --metrics "$(port metrics)" \
    --user "carol@example.org:carol@example.org secret"
stop_server_checked "$tmp/server-saved.log"
# ... and with the saved copies damaged (a bit of each memo's first byte flipped): passed
# over, the keys read from the messages again, the same answers
run "$mv" sql --password-file "$tmp/pw.carol@example.org" --kdf-iter "$MAILVAULT_KDF_ITER" \
    "$root/example.org/carol.db" \
    "UPDATE mailbox_memos SET data = CAST(char((unicode(substr(data, 1, 1)) | 1) - (unicode(substr(data, 1, 1)) & 1)) AS BLOB) || substr(data, 2)"
check "the saved copies changed" ok
start_server_checked "$tmp/server-damaged.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2 --metrics-listen=127.0.0.1:0
run_client 120 "$PY" tests/imapd_sort.py --imap "$(port imap)" --saved --damaged \
    --metrics "$(port metrics)" --user "carol@example.org:carol@example.org secret"
stop_server_checked "$tmp/server-damaged.log"

# Again with a budget no copy fits in (sort_keys_kib 1 KiB): the first SORT of a mailbox and
# criteria tries to keep its keys and gives up, every SORT reads its keys from the store.
start_server_checked "$tmp/server2.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2 --sort-keys-kib=1
run_client 120 "$PY" tests/imapd_sort.py --imap "$(port imap)" --mailbox Unkept \
    --user "carol@example.org:carol@example.org secret" "${dovecot_args[@]}"
stop_server_checked "$tmp/server2.log"
stop_dovecot
finish
