#!/usr/bin/env bash
# cli_imapd_view.sh -- SELECT from the server's cached view (issue 13, imapd/imap_view_cache.c):
# makes a store with 40 messages, starts the ASan server (build/asan/mailvaultd) on free
# loopback ports with store_idle_s 1 (so the store closes soon after its last session and a
# restore can take it), and runs tests/imapd_view.py: SELECT after changes by the session,
# another session, the CLI with the store open, a write past the change log, a mailbox made
# again, and a restored backup. Then stops the server with SIGTERM and checks that it exited 0
# with no sanitizer report in its log. Correctness only, no timing.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_view.sh
#   MAILVAULTD=path tests another build; KEEP_TMP=1 keeps the temporary directory.
#   (tests/run.sh runs it as part of `make test`.)
#
# The server is always stopped (trap), every wait has a timeout, and the last line is
# "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh # start_server, port, stop_server_rc, add_summary, init_users, the trap

imapd_test_setup cli_imapd_view 2

user=view@example.org
init_users "$user"
count=40
"$PY" - "$tmp/seed.mbox" "$count" <<'PYEOF'
import sys
with open(sys.argv[1], "w", newline="") as out:
    for i in range(1, int(sys.argv[2]) + 1):
        out.write("From s%d@example.org Mon Jan  5 10:00:00 2026\n" % i)
        out.write("From: Sender %d <s%d@example.org>\nTo: view@example.org\n"
                  "Subject: message %d\nMessage-ID: <m%d@example.org>\n"
                  "Date: Mon, 5 Jan 2026 10:00:00 +0000\n\nBody %d.\n\n" % (i, i, i, i, i))
PYEOF
run "$mv" import "$user" "$tmp/seed.mbox" --password-file "$tmp/pw.$user"
check "import $count messages" ok
mkdir -p "$tmp/backups"

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2 --store-idle-s=1

run_client 600 "$PY" tests/imapd_view.py --imap "$(port imap)" --user "$user" \
    --password-file "$tmp/pw.$user" --mailvault "$mv" --db "$root/example.org/view.db" \
    --backup-dir "$tmp/backups" --count "$count"

stop_server_checked "$tmp/server.log"
finish
