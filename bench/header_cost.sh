#!/usr/bin/env bash
# header_cost.sh -- what a header listing costs the server, counted rather than timed: the
# machine's noise moves CPU times by tens of percent, instruction counts not at all.
# mailvaultd runs under valgrind's callgrind, collecting only inside the store's message
# reads (mv_message_*) and the field filter (imap_header_fields), while a client sends
# bench_imap's header listing (UID FETCH a:a+49 (UID BODY.PEEK[HEADER.FIELDS (From Subject
# Date)])) LISTINGS times for each of 10 users of 500 messages (bench_imap --populate-only,
# filled through the measured server: its build decides the stored layout). Prints the
# instructions and the pages read and decrypted (calls of the VFS's page read), in all and
# per header. docs/BENCHMARKS.md, "The header unit in the body's row".
#
# USAGE
#   bench/header_cost.sh [MAILVAULTD [MAILVAULT [LISTINGS]]]
#     (after `make all build/rel/bench/bench_imap`; defaults build/mailvaultd, build/mailvault,
#     40). Needs valgrind (scripts/deps.sh installs it). Another build's pair measures it;
#     KEEP_TMP=1 keeps the scratch directory (callgrind.out, the server's log).
set -euo pipefail
cd "$(dirname "$0")/.."
mvd=${1:-build/mailvaultd} mv=${2:-build/mailvault} listings=${3:-40}
for f in "$mvd" "$mv" build/rel/bench/bench_imap; do
    [ -x "$f" ] || { echo "header_cost.sh: $f is missing (make all build/rel/bench/bench_imap)" >&2; exit 2; }
done
command -v valgrind >/dev/null || { echo "header_cost.sh: valgrind is not installed" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/header_cost.XXXXXX")
[ "${KEEP_TMP:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT
(umask 077 && openssl rand -hex 16 >"$tmp/password")
export MAILVAULTD_ALLOW_ROOT=yes
unset MAILVAULT_KDF_ITER MAILVAULT_PASSWORD
for i in $(seq 1 10); do
    "$mv" init "u$i@bench.example" --root "$tmp/root" --password-file "$tmp/password" >/dev/null
done

# serve PREFIX...: starts PREFIX mailvaultd on free ports, waits for its ports file
serve() {
    rm -f "$tmp/ports"
    "$@" "$mvd" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 --root="$tmp/root" \
        --ports-file="$tmp/ports" --connections-per-address-max=1000 >>"$tmp/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do
        [ -s "$tmp/ports" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "header_cost.sh: the server did not start ($tmp/server.log)" >&2
    exit 1
}
stop() { kill "$pid"; wait "$pid" || true; }

serve
build/rel/bench/bench_imap --port "$(sed -n 's/^imap=//p' "$tmp/ports")" --users 10 \
    --messages 500 --password-file "$tmp/password" --populate-only
stop

serve valgrind --tool=callgrind --callgrind-out-file="$tmp/callgrind.out" --collect-atstart=no \
    '--toggle-collect=mv_message_*' --toggle-collect=imap_header_fields
python3 - "$(sed -n 's/^imap=//p' "$tmp/ports")" "$tmp/password" "$listings" <<'EOF'
import random, sys
sys.path.insert(0, "bench")
from bigmail import Imap
port, pw, listings = int(sys.argv[1]), open(sys.argv[2]).read().strip(), int(sys.argv[3])
for u in range(1, 11):
    c = Imap(port)
    c.command(f'LOGIN "u{u}@bench.example" "{pw}"')
    c.command("SELECT INBOX")
    _, data, _ = c.command("UID SEARCH ALL")
    uids = [int(x) for line in data.split(b"\r\n") if line.startswith(b"* SEARCH")
            for x in line.split()[2:]]
    rng = random.Random(u)  # the same listings for every build
    for _ in range(listings):
        a = rng.randrange(0, len(uids) - 50)
        st, _, _ = c.command(f"UID FETCH {uids[a]}:{uids[a + 49]} "
                             "(UID BODY.PEEK[HEADER.FIELDS (From Subject Date)])")
        assert st.startswith(b"OK"), st
    c.command("LOGOUT")
EOF
stop

callgrind_annotate --inclusive=yes "$tmp/callgrind.out" 2>/dev/null | python3 -c '
import re, sys
headers = 10 * 50 * int(sys.argv[1])
total = pages = None
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+) .*PROGRAM TOTALS", line)
    if m and total is None:
        total = int(m.group(1).replace(",", ""))
    m = re.search(r"=> .*:mv_main_read \(([\d,]+)x\)", line)
    if m and pages is None:
        pages = int(m.group(1).replace(",", ""))
if total is None:
    sys.exit("header_cost.sh: no totals in the profile")
pages = pages or 0
print(f"{headers} headers: {total:,} instructions ({total / headers:,.0f} a header), "
      f"{pages:,} pages read and decrypted ({pages / headers:.3f} a header)")
' "$listings"
