# shellcheck shell=bash disable=SC2034,SC2154 # sourced: the callers read tmp, pids, imap and lmtp and set mv
# bench/mailvaultd_lib.sh -- the mailvaultd side of the old-versus-new benchmarks
# (bench/drain_login.sh, bench/imap_old_new.sh): a scratch directory with a random password,
# and release servers started on free loopback ports over their own store roots. The Dovecot
# side is bench/dovecot_lib.sh.
#
# USAGE
#   set -euo pipefail; cd "$(dirname "$0")/.."
#   . bench/mailvaultd_lib.sh
#   bench_scratch NAME                    # $tmp, $tmp/password, $pids, the cleanup trap
#   declare -A imap lmtp
#   start_mailvaultd mailvaultd build/mailvaultd u 10 [EXTRA-ARG...]
#   ... "${imap[mailvaultd]}" "${lmtp[mailvaultd]}" ...
#
# WHAT IT OFFERS
#   bench_scratch NAME
#       tmp: a new directory ${TMPDIR:-/tmp}/NAME.XXXXXX, mode 755 (Dovecot's mail processes
#       run as nobody and must reach it); tmp/password: 32 random hex characters, mode 600;
#       pids=() (add every background server to it); on exit SIGTERM to every pid, half a
#       second for them to go, and tmp removed unless KEEP_TMP is set. Unsets
#       MAILVAULT_KDF_ITER and MAILVAULT_PASSWORD (the default key derivation is measured)
#       and, as root, allows mailvaultd to run as root (MAILVAULTD_ALLOW_ROOT=yes).
#   bench_corpus N
#       corpus: ${BIGMAIL_CORPUS:-build/bigmail-corpus}/N, bench/bigmail_corpus.py's Maildir
#       of N messages (corpus/Maildir, corpus/meta.json), generated there once (nice -n 10),
#       as bench/bigmail_compare.sh keeps it.
#   bench_import CLI ROOT USER MAILDIR
#       `mailvault init` of USER with tmp/password under ROOT, then `mailvault import` of
#       MAILDIR (nice -n 10), both by CLI: each server's store made by its own build's CLI.
#   bench_cli_beside BINARY DEFAULT
#       Prints the mailvault CLI next to BINARY (a mailvaultd of another build) if there is
#       one, else DEFAULT.
#   start_mailvaultd NAME BINARY PREFIX COUNT [EXTRA-ARG...]
#       With $mv (the mailvault CLI): makes the users PREFIX1..PREFIXCOUNT@bench.example with
#       tmp/password in tmp/NAME, starts BINARY on 127.0.0.1 with IMAP and LMTP on free ports
#       (EXTRA-ARGs added), its output in tmp/NAME.log, waits up to 10 s for its ports file and
#       sets imap[NAME] and lmtp[NAME] (the caller declares both: declare -A imap lmtp).

bench_scratch() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    chmod 755 "$tmp"
    pids=()
    trap bench_cleanup EXIT
    (umask 077 && openssl rand -hex 16 >"$tmp/password")
    unset MAILVAULT_KDF_ITER MAILVAULT_PASSWORD
    if [ "$(id -u)" -eq 0 ]; then export MAILVAULTD_ALLOW_ROOT=yes; fi
}

bench_cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    sleep 0.5
    [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}

start_mailvaultd() {
    local name=$1 bin=$2 prefix=$3 count=$4 root=$tmp/$1 i
    shift 4
    mkdir -p "$root"
    for i in $(seq 1 "$count"); do
        MAILVAULT_ROOT=$root "$mv" init "$prefix$i@bench.example" --password-file "$tmp/password" >/dev/null
    done
    "$bin" --listen=127.0.0.1 --imap-port=0 --lmtp-port=0 --root="$root" "$@" \
        --ports-file="$tmp/$name.ports" >"$tmp/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do [ -s "$tmp/$name.ports" ] && break; sleep 0.1; done
    imap["$name"]=$(sed -n 's/^imap=//p' "$tmp/$name.ports")
    lmtp["$name"]=$(sed -n 's/^lmtp=//p' "$tmp/$name.ports")
}

bench_corpus() {
    corpus=${BIGMAIL_CORPUS:-build/bigmail-corpus}/$1
    if [ ! -f "$corpus/meta.json" ]; then
        echo "== corpus: $1 messages into $corpus"
        rm -rf "$corpus"
        mkdir -p "$corpus"
        nice -n 10 python3 bench/bigmail_corpus.py --messages "$1" --out "$corpus/Maildir" \
            --meta "$corpus/meta.json.tmp"
        mv "$corpus/meta.json.tmp" "$corpus/meta.json"
    fi
}

bench_import() {
    MAILVAULT_ROOT=$2 "$1" init "$3" --password-file "$tmp/password" >/dev/null
    MAILVAULT_ROOT=$2 nice -n 10 "$1" import "$3" "$4" --password-file "$tmp/password" >/dev/null
}

bench_cli_beside() {
    if [ -x "$(dirname "$1")/mailvault" ]; then echo "$(dirname "$1")/mailvault"; else echo "$2"; fi
}
