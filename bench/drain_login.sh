#!/usr/bin/env bash
# drain_login.sh -- the first LOGIN + SELECT after N deliveries made while the user was away
# (issue 13), mailvaultd against Dovecot (LMTP into Maildir), and optionally an older
# mailvaultd, same machine, same run, rounds alternating the servers.
#
# USAGE
#   bench/drain_login.sh [--rounds R] [--messages N]     (after `make all`)
#   Default: 3 rounds of 1,200 messages. Each round gives every server a fresh user (created
#   with `build/mailvault init` and the default key derivation), delivers the N messages to it
#   over LMTP (mailvaultd seals them: nobody has the store open), then bench/drain_login.py
#   times LOGIN + SELECT INBOX on a fresh connection, and the time until all N are visible
#   (EXISTS N, NOOP polled). Prints one JSON line per run and a median table.
#   MAILVAULTD_OLD=path adds an older server build (e.g. one made from `git archive` of an
#   earlier commit) as "mailvaultd-old". KEEP_TMP=1 keeps the scratch directory.
# Dovecot: a private instance as in bench/imap_compare.sh (nothing read from /etc/dovecot),
# with LMTP on a free loopback port; skipped if dovecot or dovecot-lmtpd is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 messages=1200
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift ;;
    --messages) messages=$2; shift ;;
    *) echo "usage: bench/drain_login.sh [--rounds R] [--messages N]" >&2; exit 2 ;;
    esac
    shift
done
mv=build/mailvault new=build/mailvaultd old=${MAILVAULTD_OLD:-}
. bench/mailvaultd_lib.sh # bench_scratch, start_mailvaultd
. bench/dovecot_lib.sh    # free_port
bench_scratch drain_login

declare -A imap lmtp
servers=()
[ -z "$old" ] || { start_mailvaultd mailvaultd-old "$old" r "$rounds"; servers+=(mailvaultd-old); }
start_mailvaultd mailvaultd "$new" r "$rounds"
servers+=(mailvaultd)

if command -v dovecot >/dev/null 2>&1 && [ -x /usr/lib/dovecot/lmtp ] && id nobody >/dev/null 2>&1; then
    dc=$tmp/dovecot
    mkdir -p "$dc/run" "$dc/state" "$dc/mail"
    chown nobody:nogroup "$dc/mail" 2>/dev/null || chown nobody "$dc/mail"
    for r in $(seq 1 "$rounds"); do
        printf 'r%s@bench.example:{PLAIN}%s\n' "$r" "$(cat "$tmp/password")"
    done >"$dc/passwd"
    chgrp dovecot "$dc/passwd" 2>/dev/null || true
    chmod 640 "$dc/passwd"
    imap[dovecot]=$(free_port) lmtp[dovecot]=$(free_port)
    cat >"$dc/dovecot.conf" <<EOF
base_dir = $dc/run
state_dir = $dc/state
instance_name = mailvault-drain-bench
protocols = imap lmtp
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
auth_failure_delay = 0
log_path = $dc/dovecot.log
mail_location = maildir:$dc/mail/%u
first_valid_uid = 1
mail_uid = nobody
mail_gid = nogroup
default_login_user = dovenull
default_internal_user = dovecot
passdb {
  driver = passwd-file
  args = scheme=PLAIN $dc/passwd
}
userdb {
  driver = static
  args = uid=nobody gid=nogroup home=$dc/mail/%u
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = ${imap[dovecot]}
  }
  inet_listener imaps {
    port = 0
  }
}
service lmtp {
  inet_listener lmtp {
    address = 127.0.0.1
    port = ${lmtp[dovecot]}
  }
}
EOF
    dovecot -F -c "$dc/dovecot.conf" >"$dc/stderr.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', ${lmtp[dovecot]}), 0.2)" \
            2>/dev/null && break
        sleep 0.1
    done
    servers+=(dovecot)
else
    echo "drain_login: Dovecot with LMTP (dovecot-lmtpd) is not installed: mailvaultd alone" >&2
fi

: >"$tmp/runs.jsonl"
for r in $(seq 1 "$rounds"); do
    for s in "${servers[@]}"; do
        line=$(python3 bench/drain_login.py --imap "${imap[$s]}" --lmtp "${lmtp[$s]}" \
            --user "r$r@bench.example" --password-file "$tmp/password" --messages "$messages" \
            --seed "$r")
        echo "round $r $s $line"
        printf '{"server": "%s", "round": %s, "run": %s}\n' "$s" "$r" "$line" >>"$tmp/runs.jsonl"
    done
done
python3 - "$tmp/runs.jsonl" "$messages" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("\n| server | LOGIN + SELECT (median ms) | EXISTS at SELECT | all %s visible (median ms) |" % sys.argv[2])
print("|---|---|---|---|")
for s in dict.fromkeys(r["server"] for r in runs):
    rs = [r["run"] for r in runs if r["server"] == s]
    print("| %s | %.1f | %s | %.0f |" % (s, statistics.median(x["login_select_ms"] for x in rs),
          "/".join(str(x["exists_at_select"]) for x in rs),
          statistics.median(x["all_visible_ms"] for x in rs)))
EOF
