#!/usr/bin/env bash
# cli_imapd_quota.sh -- the per-user quota of mailvaultd (RFC 9208 STORAGE and MESSAGE;
# docs/IMAPD.md, "Quota"), on the ASan build: bad quota files refused at start-up with
# file:line (each case a server that must exit 2 before binding anything), --help's text,
# then two servers on free loopback ports over a temporary root driven by
# tests/imapd_quota.py: one for the defaults against quota_file entries, GETQUOTA(ROOT),
# APPEND / COPY / MOVE, a mixed LMTP transaction and the file's reload; one whose single
# store slot makes logins close the previous user's store, for sealed deliveries counted
# without the password. Each server must stop cleanly with no sanitizer report.
# KEEP_TMP=1 keeps the temporary directory; MAILVAULTD=path tests another build.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_quota.sh
#   (tests/run.sh runs it as part of `make test`.)
#
# The last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
. tests/imapd_lib.sh

server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="$PWD/build/asan/mailvault"
make_tmp cli_imapd_quota
imapd_trap
imapd_sanitizer_env
store_root 2

for f in "$server" "$mv"; do
    if [ ! -x "$f" ]; then
        fail "$f is missing (make build/asan/mailvaultd build/asan/mailvault)"
        finish
    fi
done

# ---- start-up: every bad quota file stops the server, naming file:line ----------------------
# bad_file NAME EXPECTED CONTENT: the server must exit 2 with "FILE:EXPECTED" on stderr.
bad_file() {
    local name=$1 want=$2 file="$tmp/bad-$1"
    printf '%b' "$3" >"$file"
    run timeout 20 "$server" --root="$root" --imap-port=0 --lmtp-port=-1 --quota-file="$file"
    check "start-up refused: $name" fails_with 2 "$file:$want"
}
good='# comment\n\nok@example.org 10 20\n'
bad_file "two fields" '4: expected "address storage_kib messages", found 2 fields' \
    "$good"'x@example.org 10\n'
bad_file "four fields" '3: expected "address storage_kib messages", found more than 3' \
    'ok@example.org 1 2\n\nx@example.org 1 2 3\n'
bad_file "one field" '1: expected "address storage_kib messages", found 1' 'x@example.org\n'
bad_file "bad address" '4: bad address "no-at-sign"' "$good"'no-at-sign 1 1\n'
bad_file "two at signs" '1: bad address "a@b@example.org"' 'a@b@example.org 1 1\n'
bad_file "storage not a number" '4: storage_kib "10k": expected a number from 0 to 1099511627776' \
    "$good"'x@example.org 10k 1\n'
bad_file "negative storage" '1: storage_kib "-1"' 'x@example.org -1 1\n'
bad_file "storage over the limit" '1: storage_kib "1099511627777"' \
    'x@example.org 1099511627777 1\n'
bad_file "messages over the limit" '1: messages "4294967296": expected a number from 0 to 4294967295' \
    'x@example.org 1 4294967296\n'
bad_file "signed messages" '1: messages "+5"' 'x@example.org 1 +5\n'
bad_file "duplicate (after normalising)" '6: a second entry for x@example.org (the first is line 4)' \
    "$good"'x@example.org 1 1\n# between\nx@EXAMPLE.ORG 2 2\n'
bad_file "line too long" '4: line longer than 1024 bytes' \
    "$good$(printf 'y%.0s' $(seq 1 1100))@example.org 1 1\n"
# The size and entry limits: 16 MiB of comments; 1,000,001 short entries (14 MB).
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' '#' >"$tmp/big"
run timeout 20 "$server" --root="$root" --imap-port=0 --lmtp-port=-1 --quota-file="$tmp/big"
check "start-up refused: a quota file over 16 MiB" fails_with 2 "$tmp/big: larger than 16777216 bytes"
python3 -c '
import itertools, string, sys
chars = string.ascii_lowercase + string.digits
names = ("".join(p) for n in (1, 2, 3, 4) for p in itertools.product(chars, repeat=n))
sys.stdout.write("".join("%s@e.io 1 1\n" % name for name in itertools.islice(names, 1000001)))
' >"$tmp/many"
run timeout 60 "$server" --root="$root" --imap-port=0 --lmtp-port=-1 --quota-file="$tmp/many"
check "start-up refused: more than 1,000,000 entries" fails_with 2 \
    "$tmp/many:1000001: more than 1000000 entries"
rm -f "$tmp/big" "$tmp/many"
run timeout 20 "$server" --root="$root" --imap-port=0 --lmtp-port=-1 --quota-file="$tmp/none"
check "start-up refused: missing quota file" fails_with 2 "$tmp/none: No such file or directory"
printf 'quota_file = %s\n' "$tmp/bad-two fields" >"$tmp/conf"
run timeout 20 "$server" -c "$tmp/conf" --root="$root" --imap-port=0 --lmtp-port=-1
check "start-up refused: quota_file in a config file names both files" \
    fails_with 2 "$tmp/conf:1: $tmp/bad-two fields:4: expected"
run timeout 20 "$server" --root="$root" --quota-messages=4294967296
check "start-up refused: quota_messages out of range" fails_with 2 \
    'quota_messages: expected a number from 0 to 4294967295'
run timeout 20 "$server" --root="$root" --quota-kib=-1
check "start-up refused: quota_kib out of range" fails_with 2 'quota_kib: expected a number'
run "$server" --help
check "--help lists the quota keys and the sealed-delivery estimate" \
    grep -q 'quota_file .*address storage_kib messages' "$out"
check "--help: the sealed-delivery estimate" grep -q 'db + wal' "$out"

# ---- users ---------------------------------------------------------------------------------
init_users alice@example.org bob@example.org erin@example.org frank@example.org \
    judy@example.org carol@example.org dave@example.org hank@example.org ivan@example.org

# ---- server 1: defaults 20 KiB / 3 messages, per-user entries ------------------------------
cat >"$tmp/quotas" <<'EOF'
# quotas for cli_imapd_quota.sh: address storage_kib messages (0: unlimited)
bob@EXAMPLE.org   8 0      # storage only; the domain is normalised
erin@example.org 0 0
frank@example.org	0 2
judy@example.org 0 0
k#1@example.org 5 5      # a "#" inside an address is part of it
EOF
if start_server "$tmp/server1.log" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 \
    --quota-kib=20 --quota-messages=3 --quota-file="$tmp/quotas"; then
    timeout 120 python3 tests/imapd_quota.py --phase open --imap "$(port imap)" \
        --lmtp "$(port lmtp)" --log "$tmp/server1.log" --quota-file "$tmp/quotas" \
        --root "$root" >"$tmp/client1.out" 2>&1
    grep -v '^# ' "$tmp/client1.out"
    add_summary "$tmp/client1.out" || fail "the open-store client printed no summary"
    stop_server_rc 100
    check "server 1 stops cleanly" [ "$server_rc" -eq 0 ]
else
    fail "server 1 did not start"
    sed 's/^/    /' "$tmp/server1.log"
fi
check "no sanitizer report in server 1's log" no_sanitizer_report "$tmp/server1.log"

# ---- server 2: one store open at a time, sealed deliveries ----------------------------------
# hank is never opened: his limit is his store files' size (db + wal) rounded up, plus 4 KiB.
hank_db="$root/example.org/hank.db"
hank_bytes=$(($(stat -c %s "$hank_db") + $(stat -c %s "$hank_db-wal" 2>/dev/null || echo 0)))
cat >"$tmp/quotas2" <<EOF
carol@example.org 10 3
dave@example.org 0 0
hank@example.org $(((hank_bytes + 1023) / 1024 + 4)) 0
ivan@example.org 0 1
EOF
if start_server "$tmp/server2.log" --root="$root" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 \
    --workers=1 --stores-per-worker=1 --quota-kib=1 --quota-file="$tmp/quotas2"; then
    timeout 120 python3 tests/imapd_quota.py --phase sealed --imap "$(port imap)" \
        --lmtp "$(port lmtp)" --log "$tmp/server2.log" --quota-file "$tmp/quotas2" \
        --root "$root" >"$tmp/client2.out" 2>&1
    grep -v '^# ' "$tmp/client2.out"
    add_summary "$tmp/client2.out" || fail "the sealed-delivery client printed no summary"
    stop_server_rc 100
    check "server 2 stops cleanly" [ "$server_rc" -eq 0 ]
else
    fail "server 2 did not start"
    sed 's/^/    /' "$tmp/server2.log"
fi
check "no sanitizer report in server 2's log" no_sanitizer_report "$tmp/server2.log"
if [ "$failed" -ne 0 ]; then
    for log in "$tmp/server1.log" "$tmp/server2.log"; do
        [ -f "$log" ] && { echo "    $log:"; tail -n 30 "$log" | sed 's/^/    /'; }
    done
fi
finish
