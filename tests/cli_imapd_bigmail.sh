#!/usr/bin/env bash
# cli_imapd_bigmail.sh -- bulk IMAP commands on a big mailbox with many UID gaps (issue 12
# item 12, issue 13): makes a store whose INBOX holds 22,000 messages with 11,000 UID gaps,
# and one of 128,000 messages that a SEARCH matches past the library's search_results_max,
# starts the ASan server (build/asan/mailvaultd) on free loopback ports, runs
# tests/imapd_bigmail.py against it (STORE 1:*, UID STORE 1:*, COPY 1:*, MOVE 1:*: correctness,
# no timing) and three UID SEARCHes of the 128,000 (every UID of each answered), then stops the server with SIGTERM and checks that it exited 0 with no sanitizer
# report in its log.
#
# The mailbox is made quickly without 33,000 parses: 1,000 generated messages are imported,
# then copied into INBOX until it holds 33,000 (a copy shares the body: no bytes copied), and
# every third UID (from 2) is flagged \Deleted (in two `mailvault flags` calls, as text stays under
# 10,000 ranges per call) and expunged.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_bigmail.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#   (tests/run.sh runs it as part of `make test`.)
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap

imapd_test_setup cli_imapd_bigmail 2

user=big@example.org
init_users "$user"
pw=(--password-file "$tmp/pw.$user")

"$PY" - "$tmp/seed.mbox" <<'PYEOF'
import sys
with open(sys.argv[1], "w", newline="") as out:
    for i in range(1, 1001):
        out.write("From s%d@example.org Mon Jan  5 10:00:00 2026\n" % (i % 40))
        out.write("From: Sender %d <s%d@example.org>\nTo: big@example.org\n"
                  "Subject: message %d\nMessage-ID: <m%d@example.org>\n"
                  "Date: Mon, 5 Jan 2026 10:00:00 +0000\n\nBody %d.\n\n" % (i % 40, i % 40, i, i, i))
PYEOF
run "$mv" import "$user" "$tmp/seed.mbox" "${pw[@]}"
check "import 1,000 seed messages" ok
for _ in 1 2 3 4 5; do # 1,000 -> 32,000
    run "$mv" copy "$user" '1:*' INBOX "${pw[@]}"
    check "copy INBOX into itself" ok
done
run "$mv" copy "$user" 1:1000 INBOX "${pw[@]}" # 33,000
check "copy 1:1000 into INBOX (33,000 messages)" ok
set1=$(seq -s, 2 3 16499) # 2, 5, 8, ...: every gap between two messages
set2=$(seq -s, 16502 3 32999)
run "$mv" flags "$user" "$set1" --add '\Deleted' "${pw[@]}"
check "flag 5,500 single UIDs \\Deleted" ok
run "$mv" flags "$user" "$set2" --add '\Deleted' "${pw[@]}"
check "flag 5,500 more \\Deleted" ok
run "$mv" expunge "$user" "${pw[@]}"
check "expunge 11,000 (22,000 left, 11,000 gaps)" grep -q "expunged 11000" "$out"

# A mailbox where a SEARCH matches more than the library's search_results_max (100,000):
# 1,000 seed messages copied into INBOX until it holds 128,000.
huge=huge@example.org
init_users "$huge"
hpw=(--password-file "$tmp/pw.$huge")
run "$mv" import "$huge" "$tmp/seed.mbox" "${hpw[@]}"
check "import 1,000 seed messages for $huge" ok
for _ in 1 2 3 4 5 6 7; do # 1,000 -> 128,000
    run "$mv" copy "$huge" '1:*' INBOX "${hpw[@]}"
    check "copy $huge's INBOX into itself" ok
done

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2

# Every match answered, past search_results_max: a SEARCH matching 128,000 and one matching
# 3,200 (before, the first answered NO [LIMIT] "more than 100000 messages match").
cat >"$tmp/huge_search.py" <<'PYEOF'
import re, sys
sys.path.insert(0, "tests")
import imapd_common
results = imapd_common.Results()
c = imapd_common.imap_login(int(sys.argv[1]), sys.argv[2], sys.argv[2] + " secret", 120)
c.command(b"SELECT INBOX")
for crit, want in ((b'SUBJECT "message"', 128000), (b'FROM "s1@"', 3200), (b"ALL", 128000)):
    untagged, tagged = c.command(b"UID SEARCH " + crit)
    n = sum(len(re.findall(rb" \d+", t)) for t, _ in untagged if t.startswith(b"* SEARCH"))
    results.report("UID SEARCH %s on 128,000 messages: OK with %d UIDs" % (crit.decode(), want),
                   b" OK" in tagged and n == want, "%d UIDs, %r" % (n, tagged[:120]))
c.command(b"LOGOUT")
results.summary()
PYEOF
run_client 300 "$PY" "$tmp/huge_search.py" "$(port imap)" "$huge"

run_client 900 "$PY" tests/imapd_bigmail.py --imap "$(port imap)" \
    --user "$user:$user secret" --messages 22000 --gaps 11000

stop_server_checked "$tmp/server.log"
finish
