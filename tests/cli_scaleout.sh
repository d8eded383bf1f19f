#!/usr/bin/env bash
# shellcheck disable=SC2317 # functions called through run, check and the EXIT trap
# cli_scaleout.sh -- two mailvaultd nodes behind one private Dovecot 2.3 proxy, as
# docs/SCALEOUT.md describes (issue 11), all on loopback with free ports: node A and node B
# (build/asan/mailvaultd, each its own store root, TLS, trusted_networks = the proxy), and
# Dovecot configured from contrib/dovecot-proxy/dovecot.conf.in with routes written in the
# format of contrib/dovecot-proxy/proxy.{imap,lmtp}.passwd.example (so the documented
# configuration is the tested one). tests/imapd_scaleout.py is the client; every connection
# goes to the proxy, and what landed where is checked with the CLI on each node's root.
#
# WHAT IT CHECKS
#   1. Routing: LOGIN, AUTHENTICATE PLAIN, SELECT, APPEND, FETCH of a user of each node, and
#      one LMTP transaction to both, land on the right node (each node's mbox export).
#   2. 25 concurrent proxied sessions of one user on node A, each from its own client address
#      (127.0.1.N), all logged in although the node allows 20 connections per address: the
#      node counts the client's address that Dovecot passes in ID, not the proxy's (its log
#      names both).
#   3. One user's 4 failed logins (from 127.0.2.1) are each answered
#      NO [AUTHENTICATIONFAILED] well within Dovecot's 30 s login_proxy_timeout, and do not
#      slow another user's first typo (from 127.0.2.2, bounded at 5 s where a node counting
#      them on the proxy's address would wait 8 s) nor its login.
#   4. A move under load: LMTP deliveries and APPENDs for carol (on A) run through the proxy
#      the whole time; release on A (through A's control socket when the server and the CLI
#      have one; else the route is pointed nowhere first and the local `mailvault release`
#      waits for A to close the store), `mailvault store export carol - | mailvault store
#      import carol -` from A's root into B's (the documented pipe; docs/SCALEOUT.md), the
#      routes switched by rewriting the passwd-files; the load goes on against B.
#      Then: every acknowledged message (LMTP 250, APPEND OK) is on B exactly once by
#      Message-ID (0 lost, 0 duplicated), A holds nothing acknowledged after the release,
#      and A restarted still refuses carol (LMTP 4xx, LOGIN NO [UNAVAILABLE]) while serving
#      alice. The unavailability window is printed, not asserted.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_scaleout.sh
#   Needs dovecot-core, dovecot-imapd and dovecot-lmtpd (scripts/install-deps.sh; installed
#   here with apt-get if missing and possible) and root (Dovecot's login processes switch to
#   dovenull). MAILVAULTD / MAILVAULT test other builds; KEEP_TMP=1 keeps the directories.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_sanitizer_env
server="${MAILVAULTD:-$PWD/build/asan/mailvaultd}"
mv="${MAILVAULT:-$PWD/build/asan/mailvault}"
make_tmp cli_scaleout
store_root 2
contrib=contrib/dovecot-proxy
dc=""
load_pid=""
declare -A node_pid=()

stop_pid_bounded() { # stop_pid_bounded PID: SIGTERM, up to 10 s, then SIGKILL
    local p=$1
    kill -TERM "$p" 2>/dev/null || return 0
    for _ in $(seq 1 100); do
        kill -0 "$p" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$p" 2>/dev/null
    return 0
}
stop_dovecot() {
    [ -n "$dc" ] || return 0
    local master
    master=$(cat "$dc/run/master.pid" 2>/dev/null)
    doveadm -c "$dc/dovecot.conf" stop >/dev/null 2>&1
    if [ -n "$master" ]; then
        for _ in $(seq 1 200); do
            kill -0 "$master" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$master" 2>/dev/null
    fi
    return 0
}
cleanup() {
    [ -n "$load_pid" ] && kill -KILL "$load_pid" 2>/dev/null
    stop_dovecot
    local n
    for n in "${!node_pid[@]}"; do
        stop_pid_bounded "${node_pid[$n]}"
    done
    if [ -n "$dc" ]; then
        if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $dc"; else rm -rf "$dc"; fi
    fi
}
imapd_trap cleanup

need_binaries "$server" "$mv"
if ! command -v dovecot >/dev/null || [ ! -x /usr/lib/dovecot/lmtp ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "# installing dovecot-core dovecot-imapd dovecot-lmtpd"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dovecot-core dovecot-imapd \
            dovecot-lmtpd >/dev/null 2>&1 || true
    fi
fi
if ! command -v dovecot >/dev/null || [ ! -x /usr/lib/dovecot/lmtp ]; then
    echo "# Dovecot (dovecot-core, dovecot-imapd, dovecot-lmtpd) is missing and cannot be" \
        "installed here (scripts/install-deps.sh installs it): skipped"
    pass "skipped (no Dovecot)"
    finish
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "# not root: Dovecot's private instance needs to switch to dovenull; skipped"
    pass "skipped (not root)"
    finish
fi

# ---- the nodes ---------------------------------------------------------------------------------
# Dovecot's processes (dovecot, dovenull) read the passwd-files: a directory they can reach.
dc=$(mktemp -d /tmp/mvscaleout.XXXXXX)
chmod 755 "$dc"
mkdir -p "$dc/run" "$dc/state"
scripts/make-cert.sh "$dc/tls" localhost >/dev/null 2>&1
check "a TLS certificate for the nodes and the proxy (scripts/make-cert.sh)" \
    test -s "$dc/tls/cert.pem"

# The control socket (`mailvault release` through the running server) if this build has it.
use_control=0
if "$server" --help 2>&1 | grep -q 'control_socket' &&
    "$mv" release --help 2>&1 | grep -q -- '--control-socket'; then
    use_control=1
fi

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
node_port() { sed -n "s/^$2=//p" "$tmp/ports.$1" 2>/dev/null; }

# start_node NAME: mailvaultd over $tmp/NAME (its root) on free ports; the proxy (127.0.0.1)
# is its trusted network, its clients come from 127.0.x.y (x > 0).
start_node() {
    local name=$1 ctl=()
    [ "$use_control" -eq 1 ] && ctl=(--control-socket="$tmp/$name.ctl")
    rm -f "$tmp/ports.$name"
    "$server" --root="$tmp/$name" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 --workers=2 \
        --ports-file="$tmp/ports.$name" --trusted-networks=127.0.0.1/32 \
        --tls-cert="$dc/tls/cert.pem" --tls-key="$dc/tls/key.pem" --store-idle-s=1 \
        --auth-fail-delay-ms=1000 --auth-fail-delay-max-ms=8000 --login-timeout-s=120 \
        "${ctl[@]}" >>"$tmp/$name.log" 2>&1 &
    node_pid[$name]=$!
    for _ in $(seq 1 100); do
        [ -s "$tmp/ports.$name" ] && break
        kill -0 "${node_pid[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    if [ -s "$tmp/ports.$name" ]; then
        pass "node $name starts (IMAP $(node_port "$name" imap), LMTP $(node_port "$name" lmtp))"
    else
        fail "node $name starts"
        tail -n 20 "$tmp/$name.log" | sed 's/^/    node: /'
        finish
    fi
}
stop_node() { # stop_node NAME: SIGTERM, exit 0, no sanitizer report
    local name=$1 rc=1 p=${node_pid[$1]}
    kill -TERM "$p" 2>/dev/null
    for _ in $(seq 1 150); do
        if ! kill -0 "$p" 2>/dev/null; then
            wait "$p"
            rc=$?
            break
        fi
        sleep 0.1
    done
    stop_pid_bounded "$p"
    unset "node_pid[$name]"
    check "node $name: SIGTERM, exit 0 (exit $rc)" [ "$rc" -eq 0 ]
    if no_sanitizer_report "$tmp/$name.log"; then
        pass "node $name: no sanitizer report in its log"
    else
        fail "node $name: no sanitizer report in its log"
        show_report "$tmp/$name.log"
    fi
}

# mv_on NAME ARGS...: the CLI on node NAME's root.
mv_on() {
    local name=$1
    shift
    MAILVAULT_ROOT="$tmp/$name" "$mv" "$@"
}
for u in alice@example.org carol@example.org dave@example.org:a bob@example.org:b; do
    user=${u%%:*} node=a
    [ "$u" != "$user" ] && node=${u##*:}
    printf '%s' "$user secret" >"$tmp/pw.$user"
    run mv_on "$node" init "$user" --password-file "$tmp/pw.$user"
    check "init $user on node $node" ok
done
start_node a
start_node b

# ---- the proxy ---------------------------------------------------------------------------------
# Routes: the example files' own line, with the user, host and port replaced.
declare -A imap_route=() lmtp_route=()
route_line() { # route_line EXAMPLE USER PORT
    sed -n "/^[^#]/{s/^[^:]*:/$2:/; s/host=[^ ]*/host=127.0.0.1/; s/port=[^ ]*/port=$3/; p; q}" "$1"
}
write_routes() { # both passwd-files from imap_route / lmtp_route, each renamed into place
    local proto u
    for proto in imap lmtp; do
        : >"$dc/proxy.$proto.passwd.new"
        for u in alice@example.org bob@example.org carol@example.org dave@example.org; do
            if [ "$proto" = imap ]; then
                route_line "$contrib/proxy.imap.passwd.example" "$u" "${imap_route[$u]}"
            else
                route_line "$contrib/proxy.lmtp.passwd.example" "$u" "${lmtp_route[$u]}"
            fi
        done >>"$dc/proxy.$proto.passwd.new"
        chmod 644 "$dc/proxy.$proto.passwd.new"
        mv -f "$dc/proxy.$proto.passwd.new" "$dc/proxy.$proto.passwd"
    done
}
route_to() { # route_to USER NODE
    imap_route[$1]=$(node_port "$2" imap)
    lmtp_route[$1]=$(node_port "$2" lmtp)
}
route_to alice@example.org a
route_to carol@example.org a
route_to dave@example.org a
route_to bob@example.org b
write_routes
check "the routes carry the example's fields (7 colons, nopassword=y, starttls=any-cert)" \
    grep -q '^carol@example.org:::::::proxy=y host=127.0.0.1 port=[0-9]* nopassword=y starttls=any-cert$' \
    "$dc/proxy.imap.passwd"

p_imap=$(free_port)
p_lmtp=$(free_port)
sed -e "s|@INSTANCE@|mailvault-scaleout-test|; s|@BASE_DIR@|$dc/run|; s|@STATE_DIR@|$dc/state|" \
    -e "s|@LOG_PATH@|$dc/dovecot.log|; s|@LISTEN@|127.0.0.1|; s|@IMAP_PORT@|$p_imap|" \
    -e "s|@IMAPS_PORT@|0|; s|@LMTP_ADDRESS@|127.0.0.1|; s|@LMTP_PORT@|$p_lmtp|; s|@SSL@|yes|" \
    -e "s|@SSL_CERT@|$dc/tls/cert.pem|; s|@SSL_KEY@|$dc/tls/key.pem|; s|@PASSWD_DIR@|$dc|" \
    -e "s|@LOGIN_TRUSTED_NETWORKS@||; s|@LOGIN_PROCESSES@|2|" \
    "$contrib/dovecot.conf.in" >"$dc/dovecot.conf"
check "the template has no placeholder left" \
    bash -c "! grep -v '^#' '$dc/dovecot.conf' | grep -q '@[A-Z_]*@'"
run dovecot -c "$dc/dovecot.conf"
check "the proxy starts: dovecot -c (Dovecot $(dovecot --version | cut -d' ' -f1))" ok
up=0
for _ in $(seq 1 100); do
    if "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $p_imap), 0.5).close(); \
socket.create_connection(('127.0.0.1', $p_lmtp), 0.5).close()" 2>/dev/null; then
        up=1
        break
    fi
    sleep 0.1
done
if [ "$up" -ne 1 ]; then
    fail "the proxy listens on IMAP $p_imap and LMTP $p_lmtp"
    tail -n 20 "$dc/dovecot.log" | sed 's/^/    dovecot: /'
    finish
fi
pass "the proxy listens on IMAP $p_imap and LMTP $p_lmtp"

pw() { printf '%s:%s secret' "$1" "$1"; }

# ---- 1. routing --------------------------------------------------------------------------------
run_client 120 "$PY" tests/imapd_scaleout.py route --cafile "$dc/tls/cert.pem" --imap "$p_imap" --lmtp "$p_lmtp" \
    --user "$(pw alice@example.org)" --user2 "$(pw bob@example.org)"
has_ids() { # has_ids NODE USER MSGID...: USER's INBOX on NODE (CLI) has each Message-ID
    local node=$1 user=$2 id
    shift 2
    mv_on "$node" export "$user" --mbox --password-file "$tmp/pw.$user" >"$tmp/check.mbox" ||
        return 1
    for id in "$@"; do
        grep -qiF "Message-ID: $id" "$tmp/check.mbox" || return 1
    done
}
check "route: alice's APPEND and LMTP delivery are on node A" \
    has_ids a alice@example.org "<route-imap-alice@scaleout.test>" "<route-lmtp@scaleout.test>"
check "route: bob's APPEND and LMTP delivery are on node B" \
    has_ids b bob@example.org "<route-imap-bob@scaleout.test>" "<route-lmtp@scaleout.test>"
check "route: bob has no store on node A, alice none on node B" \
    test ! -e "$tmp/a/example.org/bob.db" -a ! -e "$tmp/b/example.org/alice.db"
check "route: node B logged the LMTP client's address (127.0.4.1) passed by XCLIENT" \
    grep -qE "client 127\.0\.4\.1:[0-9]+ via 127\.0\.0\.1:[0-9]+" "$tmp/b.log"

# ---- 2. 25 concurrent sessions -----------------------------------------------------------------
run_client 180 "$PY" tests/imapd_scaleout.py sessions --cafile "$dc/tls/cert.pem" --imap "$p_imap" \
    --user "$(pw alice@example.org)" --count 25
n=$(grep -cE 'login alice@example\.org from 127\.0\.1\.[0-9]+:[0-9]+ via 127\.0\.0\.1:[0-9]+' \
    "$tmp/a.log")
check "sessions: node A logged 25 logins with the client's address and the proxy's ($n)" \
    [ "$n" -ge 25 ]

# ---- 3. failed logins --------------------------------------------------------------------------
run_client 300 "$PY" tests/imapd_scaleout.py failures --cafile "$dc/tls/cert.pem" --imap "$p_imap" \
    --user "$(pw alice@example.org)" --user2 "$(pw dave@example.org)" --bound-s 15 \
    --other-bound-s 5
check "failures: node A counted dave's typo on its own client address (1 from the address)" \
    grep -qE 'login failed dave@example\.org from 127\.0\.2\.2:[0-9]+ via .*1 from the address' \
    "$tmp/a.log"

# ---- 4. a move under load ----------------------------------------------------------------------
now() { date +%s.%N; }
acks=$tmp/acks events=$tmp/events
: >"$acks"
: >"$events"
timeout -k 5 600 "$PY" tests/imapd_scaleout.py load --cafile "$dc/tls/cert.pem" --imap "$p_imap" --lmtp "$p_lmtp" \
    --user "$(pw carol@example.org)" --acks "$acks" --stop-file "$tmp/stop" >"$tmp/load.out" 2>&1 &
load_pid=$!
wait_acks() { # wait_acks SINCE N SECONDS: N acknowledgements of each kind after time SINCE
    local deadline=$((SECONDS + $3))
    while [ "$SECONDS" -lt "$deadline" ]; do
        awk -v t="$1" -v n="$2" '$1 > t { c[$2]++ } END { exit !(c["lmtp"] >= n && c["append"] >= n) }' \
            "$acks" && return 0
        kill -0 "$load_pid" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}
check "move: the load runs on node A (20 LMTP and 20 APPEND acknowledged)" wait_acks 0 20 120

echo "release_start $(now)" >>"$events"
released=0
deadline=$((SECONDS + 120))
if [ "$use_control" -eq 1 ]; then
    echo "# release through node A's control socket (the server ends carol's sessions)"
    while [ "$SECONDS" -lt "$deadline" ]; do
        run env MAILVAULT_CONTROL_SOCKET="$tmp/a.ctl" MAILVAULT_ROOT="$tmp/a" "$mv" release \
            carol@example.org --note "to node B"
        if ok; then released=1; break; fi
        sleep 0.5
    done
else
    echo "# no control socket in this build: carol's route points nowhere, then the local" \
        "release waits for node A to close the store"
    closed=$(free_port)
    imap_route[carol@example.org]=$closed
    lmtp_route[carol@example.org]=$closed
    write_routes
    while [ "$SECONDS" -lt "$deadline" ]; do
        run mv_on a release carol@example.org --note "to node B" --wait-seconds 30
        if ok; then released=1; break; fi
    done
fi
echo "release_done $(now)" >>"$events"
check "move: carol released on node A" [ "$released" -eq 1 ]
# docs/SCALEOUT.md step 2, the way it is documented: export on A streamed straight into the
# import on B, one pass, no archive file (between machines `ssh B` sits in the pipe).
move_pipe() ( # move_pipe USER FROM TO
    set -o pipefail
    mv_on "$2" store export "$1" - | mv_on "$3" store import "$1" -
)
run move_pipe carol@example.org a b
check "move: store export on node A | store import on node B (one pipe)" ok
check "... import's summary on stdout" grep -q "^imported carol@example.org from stdin: " "$out"
check "... export's summary on stderr, no warning (the store was released)" \
    bash -c "grep -q '^exported carol@example.org to stdout: ' '$err' && ! grep -q 'not released' '$err'"
echo "piped $(now)" >>"$events"
route_to carol@example.org b
write_routes
echo "route_switched $(now)" >>"$events"
awk '{ if (NR > 1) printf "#   %-15s %+.2f s\n", $1, $2 - prev; prev = $2 }' "$events"
switched=$(awk '$1 == "route_switched" { print $2 }' "$events")
check "move: the load goes on against node B (20 LMTP and 20 APPEND acknowledged)" \
    wait_acks "$switched" 20 180
touch "$tmp/stop"
wait "$load_pid"
load_pid=""
grep -v '^# [0-9]* passed' "$tmp/load.out"
add_summary "$tmp/load.out" || fail "the load generator printed no summary"

run mv_on b export carol@example.org --mbox --password-file "$tmp/pw.carol@example.org" \
    --output "$tmp/new.mbox"
check "move: carol's INBOX exported from node B" ok
# Node A's store as it is now: its archive (allowed: it is released), through a FILE this
# time (the other documented way), imported elsewhere.
run mv_on a store export carol@example.org "$tmp/old.mvstore"
check "move: node A's store, as it is at the end, exported again" ok
run mv_on c store import carol@example.org "$tmp/old.mvstore"
check "... and imported into a scratch root" ok
run mv_on c export carol@example.org --mbox --password-file "$tmp/pw.carol@example.org" \
    --output "$tmp/old.mbox"
check "... and its INBOX exported" ok
run_client 120 "$PY" tests/imapd_scaleout.py verify --acks "$acks" --events "$events" \
    --new "$tmp/new.mbox" --old "$tmp/old.mbox"

# After a restart node A still refuses carol, and serves alice.
stop_node a
start_node a
run_client 120 "$PY" tests/imapd_move.py --imap "$(node_port a imap)" --lmtp "$(node_port a lmtp)" \
    --released "$(pw carol@example.org)" --other "$(pw alice@example.org)"

stop_dovecot
# Refused connections to the closed port are the point of a route that points nowhere.
grep -E ' (Error|Fatal|Panic): ' "$dc/dovecot.log" | grep -v 'connect(.*) failed: Connection refused' \
    >"$tmp/dovecot.errors"
check "the proxy's log has no other errors" test ! -s "$tmp/dovecot.errors"
tail -n 5 "$tmp/dovecot.errors" | sed 's/^/    dovecot: /'
stop_node a
stop_node b
finish
