#!/usr/bin/env bash
# cli_check_1gib.sh -- a store file past 1 GiB passes `mailvault check`, and the messages
# whose pages lie past SQLite's lock-byte page read back intact.
#
# WHY
#   SQLite never writes the page that holds its lock bytes (PENDING_BYTE, at 1 GiB): in a
#   file that grows past 1 GiB that page is a hole of zeros between real pages. check reads
#   every page through the cipher, and reported this one as a page that fails
#   authentication (a 100,000-message store was called damaged; src/ops/ops_check.c skips
#   it since). This test fails on that code.
#
# HOW (fast enough for `make test`: about 1.1 GB written once and read twice
#   by check, ~40 s of CPU with the ASan build)
#   The bulk of the file is one side table of zeroblob() rows written with `mailvault sql`
#   (SQLite writes the overflow pages, the VFS encrypts them: no MIME parsing, hashing or
#   compression of a gigabyte of mail). It is filled to just under 1 GiB; then three real
#   messages, each with a 12 MB attachment of deterministic pseudo-random bytes (a
#   fixed-seed PRNG: they compress badly, and every run stores the same bytes), are
#   delivered: the store appends their pages at the end of the file (auto_vacuum=FULL
#   leaves no free pages), so they straddle and follow the lock page. Checked: the file is
#   past 1 GiB and its lock page is the zero hole (so the test really crosses it), check
#   finds 0 problems and authenticates every other page, and each message fetched back is
#   byte for byte the one delivered. The temporary directory goes at exit.
#
# USAGE
#   make build/asan/mailvault && bash tests/cli_check_1gib.sh
#   MAILVAULT=PATH tests another build of the tool.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh

mv="${MAILVAULT:-$PWD/build/asan/mailvault}"
need_binaries() { [ -x "$1" ] || { echo "# $1 is missing (make $1)"; fail "binaries"; finish; }; }
need_binaries "$mv"
make_tmp cli_check_1gib
store_root 2
user=big@example.org
db="$root/example.org/big.db"
printf 'big store password\n' >"$tmp/pw"
P=(--password-file "$tmp/pw")
lock_byte=1073741824 # SQLite's PENDING_BYTE: 0x40000000

run "$mv" init "$user" "${P[@]}"
check "init" ok

# Filler: 1,060,000,000 bytes of BLOBs in 53 rows of 20,000,000 (each its own overflow chain).
run "$mv" sql --kdf-iter 2 "${P[@]}" "$db" "CREATE TABLE filler(b BLOB)" \
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 53)
     INSERT INTO filler SELECT zeroblob(20000000) FROM n"
check "filler rows written through the store's cipher" ok
size=$(stat -c %s "$db")
check "the file is still under 1 GiB before the messages ($size bytes)" [ "$size" -lt "$lock_byte" ]

# make_message SEED: a message with a 12 MB application/octet-stream attachment (base64) of
# random.Random(SEED) bytes.
make_message() {
    "$PY" - "$1" <<'PYEOF'
import base64, random, sys
seed = int(sys.argv[1])
data = random.Random(seed).randbytes(12_000_000)
out = sys.stdout.buffer
out.write(b"From: Sender <sender@example.net>\r\nTo: <big@example.org>\r\n"
          b"Subject: past the lock page %d\r\nMessage-ID: <big%d@example.net>\r\n"
          b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"=_b\"\r\n\r\n"
          b"--=_b\r\nContent-Type: text/plain\r\n\r\nattachment %d\r\n--=_b\r\n"
          b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\n"
          % (seed, seed, seed))
out.write(base64.encodebytes(data).replace(b"\n", b"\r\n"))
out.write(b"--=_b--\r\n")
PYEOF
}
for i in 1 2 3; do
    make_message "$i" >"$tmp/m$i.eml"
    run "$mv" deliver "$user" "${P[@]}" "$tmp/m$i.eml"
    check "deliver message $i ($(stat -c %s "$tmp/m$i.eml") bytes)" ok
done

page_size=$("$mv" sql --kdf-iter 2 "${P[@]}" "$db" "PRAGMA page_size" </dev/null 2>/dev/null)
size=$(stat -c %s "$db")
check "the file is past 1 GiB plus its lock page ($size bytes, pages of $page_size)" \
    [ "$size" -gt $((lock_byte + page_size)) ]
# The lock page is the one SQLite skips: still the hole of zeros (a page written there
# would mean the file layout is not what this test is about).
check "the page at 1 GiB is a hole of zeros" \
    "$PY" -c "import sys; f = open('$db', 'rb'); f.seek($lock_byte); \
sys.exit(0 if f.read($page_size) == bytes($page_size) else 1)"

run "$mv" check "$user" "${P[@]}" --json
check "check: exit 0" ok
check "check: no problem, every page but the lock page authenticated" \
    json_true "d['problem_count'] == 0 and d['problems'] == [] and
        d['pages_read'] + d['wal_frames_read'] >= $size // $page_size - 1"

# The messages past the lock page, fetched back byte for byte (UIDs 1..3 in INBOX).
for i in 1 2 3; do
    run "$mv" fetch "$user" "$i" "${P[@]}" --output "$tmp/back$i.eml"
    check "message $i fetched back identical" cmp -s "$tmp/m$i.eml" "$tmp/back$i.eml"
done
finish
