#!/usr/bin/env bash
# proxy_compare.sh -- mailvaultd behind Dovecot's proxy (docs/SCALEOUT.md, issue 11), side by
# side in one run: (1) the same IMAP load (build/rel/bench/bench_imap, the mix of
# bench/bench_imap.c) directly against a mailvaultd node and through a private Dovecot 2.3
# proxy made from contrib/dovecot-proxy/, alternating, and (2) how long a move keeps a user
# unavailable for stores of about 10 MB and 100 MB (and 1 GB on request), two ways, alternating:
# in steps (release, export to a file, copy, import, first open) and piped (release,
# `store export USER - | store import USER -`, first open).
#
# USAGE
#   bench/proxy_compare.sh [--quick] [--rounds R] [--seconds T] [--clients "10 100"]
#                          [--users U] [--messages M] [--move-mb "10 100"] [--move-1gb]
#                          [--moves-only]
#     (after `make all build/rel/bench/bench_imap`; bench/run.sh runs it after imap_compare)
#   Default: 2 rounds of 20 s per variant and client count (10 and 100 clients), 10 users of
#     500 messages, moves of 10 and 100 MB: ~8 min. Writes bench/results/proxy.json and
#     bench/results/sections/proxy.md (bench/suite/aggregate.py appends sections/*.md to
#     REPORT.md), and copies both to build/bench-results/proxy.{json,md}.
#   --quick: 1 round of 5 s, 10 clients, 4 users of 100 messages, a 10 MB move;
#     build/bench-results only.
#   --move-1gb (or MOVE_1GB=1): a 1 GB move as well (~3 GB of scratch disk, minutes).
#   --moves-only: skip Dovecot and the throughput runs; results go to
#     bench/results/proxy_moves.json and bench/results/sections/proxy_moves.md (--quick:
#     build/bench-results/proxy_moves.*), leaving proxy.json's throughput figures alone.
#   Each move is made 3 times (--quick: once) each way on the same store (adopted back in
#   between, the two ways alternating); the table has the median of each step.
#
# STEPS
#   1. Dovecot (dovecot-core, dovecot-imapd, dovecot-lmtpd): installed with apt-get if missing
#      (as root); if that is impossible the throughput part is skipped, said so in the
#      results, and only the moves are measured.
#   2. A scratch directory (mktemp, removed at exit), a random password, users u1..uU on node
#      A's root, made with the default key derivation.
#   3. mailvaultd (build/mailvaultd) on 127.0.0.1, free ports, trusted_networks = 127.0.0.1/32
#      (the proxy), TLS (scripts/make-cert.sh), per-address limit 1000.
#   4. Two Dovecot proxies from contrib/dovecot-proxy/dovecot.conf.in, each `dovecot -c` with
#      its own base_dir: "proxy" routes with the example's line minus starttls=any-cert
#      (plaintext to a node on the same host), "proxy-tls" with the example's line as it is
#      (STARTTLS to the node, as a proxy on another host must).
#   5. Populate directly (bench_imap --populate-only), then for each client count R rounds of
#      direct, proxy, proxy-tls, each T seconds.
#   6. Moves: for each size, a user on a second root A2 gets an mbox of that size imported
#      (generated: text and base64 attachments); then, timed one after another: `mailvault
#      release` (through the control socket of a mailvaultd that has the store open after a
#      LOGIN; with a build without control_socket: local, no server), `store export`, a copy of the archive
#      (cp on one machine, as scp leaves it: in the target's page cache; between machines
#      add size / bandwidth, e.g. ~9 s per GB at 1 Gbit/s), `store import` on root B (which
#      makes the placed files durable), and the first open on B (`mailvault info`, KDF);
#      then the same move piped: release, `store export USER - | store import USER -`
#      (one pass, no archive file; between machines the ssh in the pipe adds size /
#      bandwidth, overlapped with both ends), first open.
#   7. JSON (every run, medians over rounds per variant and client count, ratios to direct,
#      the moves) and a Markdown section.
# MAILVAULTD / MAILVAULT measure other builds; MAILVAULTD_ARGS passes options to the node. KEEP_TMP=1 keeps the scratch directory.
# Exit status: 0 when every run finished without errors; 1 otherwise.
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/dovecot_lib.sh # free_port, stop_pid

quick=0 rounds=2 seconds=20 clients_list="10 100" users=10 messages=500 move_mb="10 100"
move_1gb=${MOVE_1GB:-0} move_rounds=3 moves_only=0
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 rounds=1 seconds=5 clients_list="10" users=4 messages=100 move_mb="10"
        move_rounds=1 ;;
    --rounds) rounds=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --clients) clients_list=$2; shift ;;
    --users) users=$2; shift ;;
    --messages) messages=$2; shift ;;
    --move-mb) move_mb=$2; shift ;;
    --move-1gb) move_1gb=1 ;;
    --moves-only) moves_only=1 ;;
    *) echo "usage: bench/proxy_compare.sh [--quick] [--rounds R] [--seconds T]" \
        "[--clients \"10 100\"] [--users U] [--messages M] [--move-mb \"10 100\"] [--move-1gb]" \
        "[--moves-only]" >&2
       exit 2 ;;
    esac
    shift
done
[ "$move_1gb" = 1 ] && move_mb="$move_mb 1000"

bench=build/rel/bench/bench_imap
server=${MAILVAULTD:-build/mailvaultd} mv=${MAILVAULT:-build/mailvault}
needed=("$server" "$mv")
[ "$moves_only" -eq 1 ] || needed+=("$bench")
for f in "${needed[@]}"; do
    if [ ! -x "$f" ]; then
        echo "proxy_compare: $f is missing (make all build/rel/bench/bench_imap)" >&2
        exit 1
    fi
done
out_dir=build/bench-results
mkdir -p "$out_dir"
result_name=proxy
[ "$moves_only" -eq 0 ] || result_name=proxy_moves
final_json=$out_dir/$result_name.json final_md=$out_dir/$result_name.md
if [ "$quick" -eq 0 ]; then
    mkdir -p bench/results/sections
    final_json=bench/results/$result_name.json final_md=bench/results/sections/$result_name.md
fi
contrib=contrib/dovecot-proxy

# ---- 1. Dovecot ---------------------------------------------------------------------------
have_dovecot() { command -v dovecot >/dev/null 2>&1 && [ -x /usr/lib/dovecot/lmtp ]; }
if [ "$moves_only" -eq 0 ] && ! have_dovecot && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "proxy_compare: installing dovecot-core dovecot-imapd dovecot-lmtpd"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        dovecot-core dovecot-imapd dovecot-lmtpd >/dev/null 2>&1 || true
fi
note="" dovecot_version=""
if [ "$moves_only" -eq 1 ]; then
    note="--moves-only: the throughput part was not run"
elif have_dovecot && [ "$(id -u)" -eq 0 ]; then
    dovecot_version=$(dovecot --version 2>/dev/null | awk '{ print $1 }')
else
    note="Dovecot is not installed and could not be (or not root): only the moves measured"
    echo "proxy_compare: $note" >&2
fi

# ---- 2. scratch, password, users ------------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/proxy_compare.XXXXXX")
chmod 755 "$tmp" # Dovecot's processes read the route files under it
mv_pid=""
dc_confs=()
stop_dovecot() { # stop_dovecot CONF
    local master
    master=$(cat "$(dirname "$1")/run/master.pid" 2>/dev/null || true)
    doveadm -c "$1" stop >/dev/null 2>&1 || true
    [ -z "$master" ] || stop_pid "$master"
}
cleanup() {
    stop_pid "$mv_pid"
    local c
    for c in "${dc_confs[@]}"; do stop_dovecot "$c"; done
    [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
(umask 077 && openssl rand -hex 16 >"$tmp/password")
unset MAILVAULT_KDF_ITER MAILVAULT_PASSWORD
export MAILVAULT_ROOT="$tmp/a"
[ "$(id -u)" -eq 0 ] && export MAILVAULTD_ALLOW_ROOT=yes # a benchmark box: serve as root
scripts/make-cert.sh "$tmp/tls" localhost >/dev/null 2>&1
status=0
mkdir -p "$tmp/runs"
: >"$tmp/moves.txt"

if [ -n "$dovecot_version" ]; then
    for i in $(seq 1 "$users"); do
        "$mv" init "u$i@bench.example" --password-file "$tmp/password" >/dev/null
    done

    # ---- 3. the node ------------------------------------------------------------------------
    read -ra extra <<<"${MAILVAULTD_ARGS:-}"
    "$server" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 --root="$MAILVAULT_ROOT" \
        --ports-file="$tmp/mv.ports" --connections-max=2000 --connections-per-address-max=1000 \
        --trusted-networks=127.0.0.1/32 --tls-cert="$tmp/tls/cert.pem" \
        --tls-key="$tmp/tls/key.pem" "${extra[@]}" >"$tmp/mailvaultd.log" 2>&1 &
    mv_pid=$!
    for _ in $(seq 1 100); do
        [ -s "$tmp/mv.ports" ] && break
        kill -0 "$mv_pid" 2>/dev/null || break
        sleep 0.1
    done
    node_imap=$(sed -n 's/^imap=//p' "$tmp/mv.ports" 2>/dev/null || true)
    node_lmtp=$(sed -n 's/^lmtp=//p' "$tmp/mv.ports" 2>/dev/null || true)
    if [ -z "$node_imap" ]; then
        echo "proxy_compare: mailvaultd did not start:" >&2
        cat "$tmp/mailvaultd.log" >&2
        exit 1
    fi

    # ---- 4. the proxies ---------------------------------------------------------------------
    route_line() { # route_line EXAMPLE USER PORT [DROP]: the example's line for USER
        sed -n "/^[^#]/{s/^[^:]*:/$2:/; s/host=[^ ]*/host=127.0.0.1/; s/port=[^ ]*/port=$3/; ${4:+s/ $4//;} p; q}" "$1"
    }
    start_proxy() { # start_proxy NAME DROP: sets proxy_port[NAME]
        local name=$1 drop=$2 d=$tmp/$1 i port lmtp
        mkdir -p "$d/run" "$d/state"
        for i in $(seq 1 "$users"); do
            route_line "$contrib/proxy.imap.passwd.example" "u$i@bench.example" "$node_imap" "$drop"
        done >"$d/proxy.imap.passwd"
        for i in $(seq 1 "$users"); do
            route_line "$contrib/proxy.lmtp.passwd.example" "u$i@bench.example" "$node_lmtp"
        done >"$d/proxy.lmtp.passwd"
        chmod 644 "$d"/proxy.*.passwd
        port=$(free_port)
        lmtp=$(free_port)
        sed -e "s|@INSTANCE@|mailvault-bench-$name|; s|@BASE_DIR@|$d/run|; s|@STATE_DIR@|$d/state|" \
            -e "s|@LOG_PATH@|$d/dovecot.log|; s|@LISTEN@|127.0.0.1|; s|@IMAP_PORT@|$port|" \
            -e "s|@IMAPS_PORT@|0|; s|@LMTP_ADDRESS@|127.0.0.1|; s|@LMTP_PORT@|$lmtp|; s|@SSL@|yes|" \
            -e "s|@SSL_CERT@|$tmp/tls/cert.pem|; s|@SSL_KEY@|$tmp/tls/key.pem|; s|@PASSWD_DIR@|$d|" \
            -e "s|@LOGIN_TRUSTED_NETWORKS@||; s|@LOGIN_PROCESSES@|$(nproc)|" \
            "$contrib/dovecot.conf.in" >"$d/dovecot.conf"
        dovecot -c "$d/dovecot.conf"
        dc_confs+=("$d/dovecot.conf")
        for _ in $(seq 1 100); do
            python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" \
                2>/dev/null && break
            sleep 0.1
        done
        proxy_port[$name]=$port
    }
    declare -A proxy_port=()
    start_proxy proxy starttls=any-cert
    start_proxy proxy-tls ""
    if ! grep -q 'starttls=any-cert' "$tmp/proxy-tls/proxy.imap.passwd" ||
        grep -q 'starttls' "$tmp/proxy/proxy.imap.passwd"; then
        echo "proxy_compare: the route files are not as intended" >&2
        exit 1
    fi

    # ---- 5. populate, then the alternating runs -------------------------------------------
    common=(--users "$users" --messages "$messages" --password-file "$tmp/password")
    echo "== populate: $users users x $messages messages (directly)"
    "$bench" --port "$node_imap" "${common[@]}" --label direct --populate-only
    variants=("direct:$node_imap" "proxy:${proxy_port[proxy]}" "proxy-tls:${proxy_port[proxy-tls]}")
    for clients in $clients_list; do
        for round in $(seq 1 "$rounds"); do
            for v in "${variants[@]}"; do
                name=${v%%:*}
                echo "== $name, $clients clients, round $round of $rounds, ${seconds} s"
                if ! "$bench" --port "${v##*:}" "${common[@]}" --label "$name" \
                    --clients "$clients" --seconds "$seconds" \
                    --json "$tmp/runs/$name-c$clients-r$round.json"; then
                    echo "proxy_compare: $name, $clients clients, round $round had errors" >&2
                    status=1
                fi
            done
        done
    done
    for c in "${dc_confs[@]}"; do stop_dovecot "$c"; done
    dc_confs=()
    kill -TERM "$mv_pid"
    mv_rc=0
    wait "$mv_pid" || mv_rc=$?
    mv_pid=""
    if [ "$mv_rc" -ne 0 ]; then
        echo "proxy_compare: mailvaultd exited with $mv_rc" >&2
        status=1
    fi
fi

# ---- 6. moves ----------------------------------------------------------------------------------
now() { date +%s.%N; }
# A server-side release (docs/CONTROL.md) when this build has the control socket: the node
# runs and holds the store; else the local release of a store no server holds.
server_release=0
case $("$server" --help 2>&1) in *control_socket*) server_release=1 ;; esac
ctl_env=()
[ "$server_release" -eq 0 ] || ctl_env=(MAILVAULT_CONTROL_SOCKET="$tmp/a2.ctl")
for mb in $move_mb; do
    user="m$mb@bench.example"
    a2=$tmp/a2 b=$tmp/b
    echo "== move of a ~$mb MB store"
    python3 - "$tmp/m$mb.mbox" "$mb" <<'EOF'
import base64, random, sys
# Mail-like text and attachments; random bytes keep the store from compressing it away.
path, mb = sys.argv[1], int(sys.argv[2])
rng = random.Random(mb)
words = ("meeting report budget invoice schedule project review draft update contract "
         "travel proposal server backup release quarter customer ticket").split()
target, n = mb * 1024 * 1024, 0
with open(path, "wb") as f:
    while f.tell() < target:
        n += 1
        text = " ".join(rng.choice(words) for _ in range(rng.randint(200, 2000)))
        blob = base64.encodebytes(rng.randbytes(rng.randint(20000, 200000))).decode()
        f.write(("From sender@bench.example Tue Dec  1 12:00:00 2026\n"
                 "From: sender%d@bench.example\nTo: user@bench.example\n"
                 "Subject: %s %d\nMessage-ID: <move-%d@bench.example>\n"
                 "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n"
                 "--b\nContent-Type: text/plain\n\n%s\n--b\nContent-Type: "
                 "application/octet-stream\nContent-Transfer-Encoding: base64\n\n%s--b--\n\n"
                 % (n % 50, rng.choice(words), n, n, text, blob)).encode())
EOF
    MAILVAULT_ROOT=$a2 "$mv" init "$user" --password-file "$tmp/password" >/dev/null
    t0=$(now)
    MAILVAULT_ROOT=$a2 "$mv" import "$user" "$tmp/m$mb.mbox" --password-file "$tmp/password" \
        >/dev/null
    t_import_mbox=$(python3 -c "print($(now) - $t0)")
    rm -f "$tmp/m$mb.mbox"
    store_bytes=$(du -cb "$a2/bench.example/m$mb".* | tail -n 1 | cut -f1)
    mkdir -p "$tmp/copy"
    archive_bytes=0
    for _ in $(seq 1 "$move_rounds"); do
      for way in file pipe; do
        if [ "$server_release" -eq 1 ]; then
            # The old node serves the user: its store is open there (a session came and went).
            rm -f "$tmp/a2.ports"
            "$server" --listen=127.0.0.1 --imap-port=0 --lmtp-port=-1 --root="$a2" \
                --ports-file="$tmp/a2.ports" --control-socket="$tmp/a2.ctl" \
                >>"$tmp/a2.log" 2>&1 &
            mv_pid=$!
            for _ in $(seq 1 100); do
                [ -s "$tmp/a2.ports" ] && break
                sleep 0.1
            done
            python3 - "$(sed -n 's/^imap=//p' "$tmp/a2.ports")" "$user" "$tmp/password" <<'PYEOF'
import imaplib, sys
m = imaplib.IMAP4("127.0.0.1", int(sys.argv[1]))
m.login(sys.argv[2], open(sys.argv[3]).read().strip())
m.select("INBOX")
m.logout()
PYEOF
        fi
        t0=$(now)
        env MAILVAULT_ROOT="$a2" "${ctl_env[@]}" "$mv" release "$user" --note "bench move" \
            >/dev/null
        t1=$(now)
        if [ "$way" = file ]; then
            MAILVAULT_ROOT=$a2 "$mv" store export "$user" "$tmp/m$mb.mvstore" >/dev/null
            t2=$(now)
            cp "$tmp/m$mb.mvstore" "$tmp/copy/m$mb.mvstore"
            t3=$(now)
            MAILVAULT_ROOT=$b "$mv" store import "$user" "$tmp/copy/m$mb.mvstore" >/dev/null
            t4=$(now)
            archive_bytes=$(stat -c %s "$tmp/m$mb.mvstore")
        else
            # One pass: export streams into import (between machines: | ssh B mailvault ...).
            MAILVAULT_ROOT=$a2 "$mv" store export "$user" - 2>/dev/null |
                MAILVAULT_ROOT=$b "$mv" store import "$user" - >/dev/null
            t4=$(now)
            t2=$t4 t3=$t4
        fi
        MAILVAULT_ROOT=$b "$mv" info "$user" --password-file "$tmp/password" >/dev/null
        t5=$(now)
        echo "$mb $way $store_bytes $archive_bytes $t_import_mbox $t0 $t1 $t2 $t3 $t4 $t5" \
            >>"$tmp/moves.txt"
        # The next move moves the same store again: back to A2, B empty.
        stop_pid "$mv_pid"
        mv_pid=""
        rm -rf "$tmp/m$mb.mvstore" "$tmp/copy/m$mb.mvstore" "$b"
        MAILVAULT_ROOT=$a2 "$mv" adopt "$user" >/dev/null
      done
    done
    rm -rf "$a2"
done

# ---- 7. JSON and the section -----------------------------------------------------------------
python3 - "$tmp/runs" "$tmp/moves.txt" "$final_json" "$final_md" "$quick" "$rounds" \
    "$seconds" "$users" "$messages" "$dovecot_version" "$note" "$server" "$server_release" <<'EOF'
import datetime, glob, json, os, platform, statistics, sys

runs_dir, moves_txt, out_json, out_md, quick, rounds, seconds, users, messages, dc_version, \
    note, server, server_release = sys.argv[1:14]
runs = []
for path in sorted(glob.glob(os.path.join(runs_dir, "*.json"))):
    with open(path) as f:
        doc = json.load(f)
    doc["round"] = int(path.rsplit("-r", 1)[1].split(".")[0])
    runs.append(doc)
kinds = ["fetch_headers", "fetch_body", "search", "store", "append", "expunge", "noop"]
med = lambda v: statistics.median(v) if v else None
summary = {}
for d in runs:
    summary.setdefault(str(d["clients"]), {}).setdefault(d["server"], []).append(d)
result = {}
for clients, by in summary.items():
    r = {}
    for name, docs in by.items():
        r[name] = {"rounds": len(docs),
                   "commands_per_s": med([d["commands_per_s"] for d in docs]),
                   "commands_per_s_each_round": [d["commands_per_s"] for d in docs],
                   "errors": sum(d["errors"] for d in docs),
                   "failed_clients": sum(d["failed_clients"] for d in docs),
                   "ops": {k: {m: med([d["ops"][k][m] for d in docs])
                               for m in ("ops_per_s", "p50_ms", "p99_ms")}
                           for k in kinds + ["login", "select"]}}
    for name in ("proxy", "proxy-tls"):
        if name in r and "direct" in r:
            r["ratio_%s_vs_direct" % name.replace("-", "_")] = \
                r[name]["commands_per_s"] / r["direct"]["commands_per_s"]
    result[clients] = r
moves, by_size = [], {}
steps_of = {"file": ("release_s", "export_s", "copy_s", "import_s", "first_open_s"),
            "pipe": ("release_s", "export_import_s", "first_open_s")}
with open(moves_txt) as f:
    for line in f:
        mb, way, store, archive, imp, t0, t1, t2, t3, t4, t5 = line.split()
        t = [float(x) for x in (t0, t1, t2, t3, t4, t5)]
        r = {"store_bytes": int(store), "archive_bytes": int(archive),
             "mbox_import_s": float(imp), "release_s": t[1] - t[0], "first_open_s": t[5] - t[4],
             "unavailable_s": t[5] - t[0]}
        if way == "file":
            r.update({"export_s": t[2] - t[1], "copy_s": t[3] - t[2], "import_s": t[4] - t[3]})
        else:
            r["export_import_s"] = t[4] - t[1]
        by_size.setdefault((int(mb), way), []).append(r)
for (mb, way), rs in sorted(by_size.items(), key=lambda kv: (kv[0][0], kv[0][1] != "file")):
    m = {"target_mb": mb, "way": way, "rounds": len(rs), "store_bytes": rs[0]["store_bytes"],
         "archive_bytes": rs[-1]["archive_bytes"], "mbox_import_s": rs[0]["mbox_import_s"]}
    for k in steps_of[way] + ("unavailable_s",):
        m[k] = med([r[k] for r in rs])
    m["unavailable_s_each_round"] = [r["unavailable_s"] for r in rs]
    m["dominant_step"] = max(steps_of[way], key=lambda k: m[k])
    moves.append(m)
for m in moves:
    f = next((x for x in moves if x["target_mb"] == m["target_mb"] and x["way"] == "file"), None)
    if m["way"] == "pipe" and f:
        m["unavailable_vs_file"] = m["unavailable_s"] / f["unavailable_s"]
load = [d["load_start"] for d in runs] + [d["load_end"] for d in runs]
doc = {
    "schema": "mailvault-bench-proxy-compare/1",
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "quick": quick == "1",
    "machine": {"cpu": runs[0]["cpu"] if runs else "", "cpus": os.cpu_count(),
                "system": platform.platform(), "load_min": min(load, default=None),
                "load_max": max(load, default=None)},
    "setup": {"rounds": int(rounds), "seconds": float(seconds), "users": int(users),
              "messages_per_user": int(messages), "mailvaultd": server,
              "dovecot_version": dc_version or None,
              "variants": {"direct": "bench_imap -> mailvaultd",
                           "proxy": "bench_imap -> Dovecot proxy -> mailvaultd, plaintext "
                                    "route (node on the same host)",
                           "proxy-tls": "the same with starttls=any-cert in the route"}},
    "notes": [note] if note else [],
    "summary": result,
    "moves": moves,
    "move_release": ("server-side, through the running node's control socket"
                     if server_release == "1" else "local, no server holding the store"),
    "runs": runs,
}
with open(out_json, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")

fmt = lambda v, n=1: "--" if v is None else f"{v:,.{n}f}"
moves_only = note.startswith("--moves-only")
L = ["## Moving a user between mailvaultd nodes" if moves_only
     else "## mailvaultd behind Dovecot's proxy", ""]
if moves_only:
    L.append(f"bench/proxy_compare.sh --moves-only{' --quick' if quick == '1' else ''}, "
             f"{doc['date']}, {os.cpu_count()} CPUs, mailvaultd {server}.")
else:
    L.append(f"bench/proxy_compare.sh{' --quick' if quick == '1' else ''}, {doc['date']}: the "
             f"bench_imap mix, {users} users x {messages} messages, {seconds} s per run, "
             f"{rounds} round(s) alternating direct / proxy / proxy-tls, medians over rounds; "
             f"Dovecot {dc_version or '(not installed)'} from contrib/dovecot-proxy/, one "
             f"mailvaultd node, all on loopback, {os.cpu_count()} CPUs, load "
             f"{fmt(doc['machine']['load_min'], 2)}-{fmt(doc['machine']['load_max'], 2)}. "
             f"proxy: plaintext route; proxy-tls: starttls=any-cert to the node. Ratio: "
             f"commands/s through the proxy / directly (goal >= 0.85).")
L.append("")
for n in doc["notes"]:
    L += [f"**Note:** {n}", ""] if not moves_only else []
for clients in sorted(result, key=int):
    r = result[clients]
    L += [f"**{clients} clients**", "",
          "| | commands/s | vs direct | fetch_body p50 / p99 ms | fetch_headers p50 / p99 ms "
          "| append p50 / p99 ms | store p50 / p99 ms | login p50 / p99 ms | errors |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ("direct", "proxy", "proxy-tls"):
        s = r.get(name)
        if not s:
            continue
        ratio = r.get("ratio_%s_vs_direct" % name.replace("-", "_"))
        cell = lambda k: f"{fmt(s['ops'][k]['p50_ms'], 2)} / {fmt(s['ops'][k]['p99_ms'], 2)}"
        L.append(f"| {name} | {fmt(s['commands_per_s'])} | "
                 f"{fmt(ratio, 2) if ratio else ('1.00' if name == 'direct' else '--')} | "
                 f"{cell('fetch_body')} | {cell('fetch_headers')} | {cell('append')} | "
                 f"{cell('store')} | {cell('login')} | {s['errors']} |")
    L += ["", "Per round (commands/s, in the order run): " + "; ".join(
        f"{name} " + " / ".join(f"{v:,.0f}" for v in r[name]["commands_per_s_each_round"])
        for name in ("direct", "proxy", "proxy-tls") if name in r) + ".", ""]
if moves:
    L += ["**Moving a user** (one machine: release " + (
          "through the running node's control socket, the store open there"
          if server_release == "1" else "without a server holding the store") + ", "
          "file: `store export` to a file, cp of the archive (between machines add size / "
          "bandwidth: ~9 s per GB at 1 Gbit/s), `store import`; pipe: `store export USER - | "
          "store import USER -` (between machines the ssh in the pipe overlaps with both "
          "ends); then the first open with the KDF; unavailable = all of it; medians of the "
          "rounds, the two ways alternating)", "",
          "| store | way | archive | release s | export s | copy s | import s | first open s "
          "| unavailable s | vs file | dominated by |",
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for m in moves:
        if m["way"] == "file":
            mid = f"{m['export_s']:.2f} | {m['copy_s']:.2f} | {m['import_s']:.2f}"
        else:
            mid = f"{m['export_import_s']:.2f} (piped) | -- | --"
        vs = f"{m['unavailable_vs_file']:.2f}x" if "unavailable_vs_file" in m else "1.00x"
        L.append(f"| {m['store_bytes'] / 1048576:,.1f} MB | {m['way']} "
                 f"| {m['archive_bytes'] / 1048576:,.1f} MB | {m['release_s']:.2f} | {mid} | "
                 f"{m['first_open_s']:.2f} | {m['unavailable_s']:.2f} | {vs} | "
                 f"{m['dominant_step'][:-2]} |")
    L.append("")
text = "\n".join(L)
with open(out_md, "w") as f:
    f.write(text)
print(text)
EOF
if [ "$final_json" != "$out_dir/proxy.json" ]; then
    cp "$final_json" "$out_dir/proxy.json"
    cp "$final_md" "$out_dir/proxy.md"
fi
echo "results: $final_json $final_md"
exit "$status"
