#!/usr/bin/env bash
# cli_help.sh -- `--help` of every mailvault command lists exactly the options its parser
# takes, one line of help each, and the manual pages generated from those listings, from
# mailvaultd's config table and from include/mailvault.h are well-formed and complete
# (issue 14: "--help of every command lists its options with one line each"; man pages
# generated from the sources of truth so they cannot drift).
#
# USAGE
#   make build/mailvault build/mailvaultd && bash tests/cli_help.sh
#
# For every command (and mailbox sub-command): each option its --help lists is accepted
# (`mailvault CMD OPTION [VALUE] --help` exits 0, where an unknown option exits with a usage
# error before --help is reached); each option of any other command is refused; and
# scripts/gen-man.py, which also checks that every usage line names only listed options and
# every listed option appears in a usage line, produces pages groff reads without a warning.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

# The release build: this test starts the tool a few hundred times, and what it checks (the
# listings and the parser agree) does not depend on the sanitizers (cli_store.sh has them).
mv="$PWD/build/mailvault"
mvd="$PWD/build/mailvaultd"
make_tmp cli_help
store_root 2

# options CMD...: the options CMD's --help lists, one "NAME [ARG]" a line (not --help).
options() {
    "$mv" "$@" --help | sed -n '/^Options:$/,/^$/p' |
        sed -nE 's/^  (--[a-z-]+)( [A-Z][A-Z0-9|-]*)?  +[^ ].*$/\1\2/p'
}

run "$mv" help
commands=$(sed -nE 's/^  ([a-z]+) +[^ ].*$/\1/p' "$out" | grep -vx 'version\|help')
check help_lists_commands [ "$(echo "$commands" | wc -l)" -ge 20 ]

targets=()
for c in $commands; do
    if [ "$("$mv" "$c" --help | head -n 1)" = "usage:" ]; then # sub-commands (mailbox, store)
        for s in $("$mv" "$c" --help | sed -nE "s/^  mailvault $c ([a-z]+) .*/\\1/p"); do
            targets+=("$c $s")
        done
    else
        targets+=("$c")
    fi
done
check mailbox_subcommands [ "${#targets[@]}" -gt "$(echo "$commands" | wc -l)" ]

# Every option any command lists.
all_options=$(for t in "${targets[@]}"; do options $t; done | cut -d' ' -f1 | sort -u)
check many_options [ "$(echo "$all_options" | wc -l)" -ge 40 ]

for t in "${targets[@]}"; do
    name=${t// /_}
    run "$mv" $t --help
    check "help_${name}_ok" bash -c "[ $rc -eq 0 ] && grep -q '^usage: mailvault $t' '$out' &&
        grep -q '^Options:$' '$out' && grep -qE '^  -h, --help +print this help$' '$out'"
    # Each listed line has a help text and fits a terminal.
    check "help_${name}_one_line_each" bash -c "! sed -n '/^Options:$/,/^$/p' '$out' |
        grep -vE '^(Options:|)$' |
        grep -vE '^  (-h, --help|--[a-z-]+( [A-Z][A-Z0-9|-]*)?)  +[^ ].{0,60}$'"
    listed=$(options $t)
    bad=""
    while read -r opt arg; do
        [ -n "$opt" ] || continue
        value=()
        case "$arg" in
        "") ;;
        NAME) value=(chacha20) ;;
        FILE) value=("$tmp/none") ;;
        *) value=(4) ;;
        esac
        "$mv" $t "$opt" "${value[@]}" --help >/dev/null 2>"$err" || bad+=" $opt"
    done <<<"$listed"
    check "help_${name}_listed_options_accepted" [ -z "$bad" ]
    # An option of another command is a usage error (two of them: each run costs a start).
    bad=""
    for opt in $(echo "$all_options" | grep -vxF -f <(echo "$listed" | cut -d' ' -f1) | sed -n '1p;$p'); do
        "$mv" $t "$opt" 4 --help >/dev/null 2>&1 && bad+=" $opt"
    done
    check "help_${name}_other_options_refused" [ -z "$bad" ]
done

# ---- the manual pages ----
gen() { python3 scripts/gen-man.py "$@" >"$out" 2>"$err"; rc=$?; }
groff_ok() { # FILE: groff reads it without a warning
    ! command -v groff >/dev/null 2>&1 ||
        [ -z "$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$1" 2>&1)" ]
}
gen mailvault "$mv" man/mailvault.1.in
check man1_generated ok
cp "$out" "$tmp/mailvault.1"
check man1_groff_clean groff_ok "$tmp/mailvault.1"
missing=""
for t in "${targets[@]}"; do
    grep -q "^\.SS ${t}$" "$tmp/mailvault.1" || missing+=" $t"
done
for opt in $all_options; do
    grep -q -- "${opt//-/\\\\-}" "$tmp/mailvault.1" || missing+=" $opt"
done
check man1_every_command_and_option [ -z "$missing" ]
[ -z "$missing" ] || echo "    missing:$missing"

# A usage line naming an option the parser does not list stops the generation.
cat >"$tmp/fake" <<'FAKE'
#!/bin/sh
case "$*" in
help) printf 'Commands:\n  list      list things\n' ;;
"list --help") printf 'usage: mailvault list USER [--bogus]\n\nOptions:\n  --json                    print JSON\n  -h, --help                print this help\n' ;;
esac
FAKE
chmod +x "$tmp/fake"
gen mailvault "$tmp/fake" man/mailvault.1.in
check man1_drift_detected bash -c "[ $rc -ne 0 ] && grep -q 'names --bogus' '$err'"

gen mailvaultd "$mvd" man/mailvaultd.8.in
check man8_generated ok
cp "$out" "$tmp/mailvaultd.8"
check man8_groff_clean groff_ok "$tmp/mailvaultd.8"
missing=""
for key in $("$mvd" --help | sed -nE 's/^  ([a-z_0-9]+) +[^ ].*/\1/p'); do
    grep -qx "\.B $key" "$tmp/mailvaultd.8" || missing+=" $key"
done
check man8_every_setting [ -z "$missing" ] && [ -n "$("$mvd" --help | sed -n '/^  root /p')" ]
check man8_signals bash -c "grep -q '^\.B SIGHUP' '$tmp/mailvaultd.8' &&
    grep -q 'SIGTERM' '$tmp/mailvaultd.8'"

gen api include/mailvault.h man/mailvault.3.in
check man3_generated ok
cp "$out" "$tmp/mailvault.3"
check man3_groff_clean groff_ok "$tmp/mailvault.3"
missing=""
for fn in $(grep -oE '^MV_API[^(]*\b(mv_[a-z0-9_]+)\(' include/mailvault.h | grep -oE 'mv_[a-z0-9_]+\($' | tr -d '('); do
    grep -q "${fn//_/\\_}(" "$tmp/mailvault.3" || grep -q "$fn(" "$tmp/mailvault.3" || missing+=" $fn"
done
check man3_every_function [ -z "$missing" ]
[ -z "$missing" ] || echo "    missing:$missing"

finish
