#!/usr/bin/env bash
# cli_imapd_view.sh -- SELECT from the server's cached view (issue 13, imapd/imap_view_cache.c):
# makes a store with 40 messages, starts the ASan server (build/asan/mailvaultd) on free
# loopback ports with store_idle_s 1 (so the store closes soon after its last session and a
# restore can take it), and runs tests/imapd_view.py: SELECT after changes by the session,
# another session, the CLI with the store open, a write past the change log, a mailbox made
# again, and a restored backup. Then stops the server with SIGTERM and checks that it exited 0
# with no sanitizer report in its log. Then the saved view (tests/imapd_view_saved.py): a
# second user's store, the server stopped, crashed and restarted between steps, the CLI and
# `mailvault sql` changing the store meanwhile; every SELECT must match what the test did, and
# the server log must show the view saved at SIGTERM and loaded at the next SELECT.
# Correctness only, no timing.
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
# seed_mbox FILE N TO SUBJECT ID: an mbox of N small messages to TO, subjects "SUBJECT i",
# Message-IDs <IDi@example.org>.
seed_mbox() {
    "$PY" - "$@" <<'PYEOF'
import sys
path, n, to, subject, mid = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
with open(path, "w", newline="") as out:
    for i in range(1, n + 1):
        out.write("From s%d@example.org Mon Jan  5 10:00:00 2026\n" % i)
        out.write("From: Sender %d <s%d@example.org>\nTo: %s\n"
                  "Subject: %s %d\nMessage-ID: <%s%d@example.org>\n"
                  "Date: Mon, 5 Jan 2026 10:00:00 +0000\n\nBody %d.\n\n"
                  % (i, i, to, subject, i, mid, i, i))
PYEOF
}
seed_mbox "$tmp/seed.mbox" "$count" "$user" message m
run "$mv" import "$user" "$tmp/seed.mbox" --password-file "$tmp/pw.$user"
check "import $count messages" ok
mkdir -p "$tmp/backups"

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=-1 --workers=2 --store-idle-s=1

run_client 600 "$PY" tests/imapd_view.py --imap "$(port imap)" --user "$user" \
    --password-file "$tmp/pw.$user" --mailvault "$mv" --db "$root/example.org/view.db" \
    --backup-dir "$tmp/backups" --count "$count"

stop_server_checked "$tmp/server.log"

# The saved view (tests/imapd_view_saved.py): a second user, the server restarted between
# the steps; each step's server log must say the view was saved at the stop (SIGTERM) and
# loaded at the next SELECT, except after a crash (SIGKILL: nothing saved, the older saved
# view plus the log), a row deleted behind the log's back (loaded, does not match: listed)
# saved bytes that do not decode (listed) and a saved row that cannot be read (text, as no
# save writes: listed, with a warning).
user2=saved@example.org
init_users "$user2"
seed_mbox "$tmp/seed2.mbox" 30 "$user2" saved v
run "$mv" import "$user2" "$tmp/seed2.mbox" --password-file "$tmp/pw.$user2"
check "import 30 messages for $user2" ok
saved_n=0
saved_start() {
    saved_n=$((saved_n + 1))
    start_server_checked "$tmp/saved$saved_n.log" --root="$root" --listen=127.0.0.1 \
        --imap-port=0 --lmtp-port=-1 --workers=2 --store-idle-s=600
}
saved_step() {
    run_client 300 "$PY" tests/imapd_view_saved.py --state "$tmp/saved.json" --imap "$(port imap)" \
        --user "$user2" --password-file "$tmp/pw.$user2" --mailvault "$mv" \
        --db "$root/example.org/saved.db" "$@"
}
saved_offline() {
    run_client 300 "$PY" tests/imapd_view_saved.py --state "$tmp/saved.json" --user "$user2" \
        --password-file "$tmp/pw.$user2" --mailvault "$mv" --db "$root/example.org/saved.db" "$@"
}
log_has() { grep -qF "$2" "$tmp/saved$1.log"; }

saved_start
saved_step --step first --count 30
stop_server_checked "$tmp/saved1.log"
check "SIGTERM saves the views of INBOX and Other" \
    eval 'log_has 1 "view cache: INBOX saved" && log_has 1 "view cache: Other saved"'
saved_offline --step offline
saved_start
saved_step --step after-restart
check "after the restart the SELECT loads the saved view" log_has 2 "view cache: INBOX loaded"
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=""
check "SIGKILL saves nothing" eval '! log_has 2 "INBOX saved"'
saved_start
saved_step --step check --when "after a crash (the older saved view and the log)"
check "after the crash the SELECT loads the older saved view" log_has 3 "view cache: INBOX loaded"
stop_server_checked "$tmp/saved3.log"
saved_offline --step bypass
saved_start
saved_step --step check --when "after a row deleted behind the log's back"
check "the loaded view does not match the count: listed" log_has 4 "does not match: listing it"
stop_server_checked "$tmp/saved4.log"
saved_offline --step garble
saved_start
saved_step --step check --when "after the saved bytes were garbled"
check "bytes that do not decode: listed" log_has 5 "does not decode"
stop_server_checked "$tmp/saved5.log"
saved_offline --step not-bytes
saved_start
saved_step --step check --when "after the saved view became text"
check "a saved view that cannot be read: listed, with a warning" \
    log_has 6 "the saved view of INBOX cannot be read (a saved view that is not bytes); listing it"
stop_server_checked "$tmp/saved6.log"
finish
