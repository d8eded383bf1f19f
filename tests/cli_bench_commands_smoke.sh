#!/usr/bin/env bash
# cli_bench_commands_smoke.sh -- smoke test of bench/commands_compare.sh, bench/search_keys.py
# (SEARCH with many keys at once), bench/fetch_pieces.py (FETCH of pieces of messages) and
# bench/sort_compare.py (UID SORT by each criterion),
# issue 13, against mailvaultd only (the Dovecot comparison never runs in CI): a corpus of
# 200 messages, the ASan server (build/asan/mailvaultd, else the release build), one round of
# every case plus an OR of 5,000 Message-IDs (20,000 nodes, over the 8,192 every other
# command keeps), the pieces of messages 1:200, a client's message list, its SORTs. Checks the script's exit status (1 when a
# command is not OK), the tables' rows, and that the server log holds no sanitizer report.
# No timing assertions.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_bench_commands_smoke.sh
#   (tests/run.sh runs it in `make test`; ~20 s)
#
# Each check prints "PASS name" or "FAIL name"; the last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh # pass, fail, finish, make_tmp, server_binaries

make_tmp cli_bench_commands
server_binaries # $server, $mv
mkdir -p "$tmp/corpus" "$tmp/scratch"

cases=msgid:1,msgid:40,msgid:5000,from:3,subject:70,uid:300
if MAILVAULTD="$server" MAILVAULT="$mv" SEARCH_KEYS_KDF_ITER=2 BIGMAIL_CORPUS="$tmp/corpus" \
    KEEP_TMP=1 TMPDIR="$tmp/scratch" timeout 600 bash bench/commands_compare.sh --no-dovecot \
    --messages 200 --rounds 1 --cases "$cases" --range 1:200 >"$out" 2>"$err"; then
    pass "commands_compare.sh runs (exit 0: every answer OK)"
else
    fail "commands_compare.sh runs (exit $?): $(tail -n 3 "$err" "$out")"
fi
rows=$(grep -c '^| [a-z]* | [0-9]* | [0-9]* | [0-9.]* | yes |$' "$out")
if [ "$rows" -eq 6 ]; then
    pass "the table has a timed row for each of the 6 cases"
else
    fail "the table has a timed row for each of the 6 cases ($rows): $(cat "$out")"
fi
pieces=$(grep -c '^| BODY.PEEK\[[^ ]* | [0-9.]* | yes |$' "$out")
if [ "$pieces" -eq 6 ]; then
    pass "the pieces table has a timed row for each of the 6 FETCH items"
else
    fail "the pieces table has a timed row for each of the 6 FETCH items ($pieces): $(cat "$out")"
fi
listing=$(grep -c '^| [A-Z ]*FETCH [0-9]*:\* (.*) | [0-9.]* | yes |$' "$out")
if [ "$listing" -eq 4 ]; then
    pass "the message list table has a timed row for each of its 4 FETCHes"
else
    fail "the message list table has a timed row for each of its 4 FETCHes ($listing): $(cat "$out")"
fi
sorts=$(grep -c '^| [A-Z ]* | [0-9.]* / [0-9.]* | yes |$' "$out")
if [ "$sorts" -eq 20 ] && grep -q '^== sort_compare after a restart' "$out"; then
    pass "the SORT table, and again after a restart, has a timed row for each of its 10 criteria"
else
    fail "the SORT table, and again after a restart, has a timed row for each of its 10 criteria ($sorts): $(cat "$out")"
fi
if grep -q '^| msgid | 5000 | ' "$out"; then
    pass "an OR of 5,000 HEADER Message-ID keys is answered"
else
    fail "an OR of 5,000 HEADER Message-ID keys is answered: $(grep msgid "$out")"
fi
log=$(find "$tmp/scratch" -name new.log | head -n 1)
if [ -n "$log" ] && ! grep -q "Sanitizer" "$log"; then
    pass "no sanitizer report in the server log"
else
    fail "no sanitizer report in the server log (${log:-no log}): $(grep -m 3 Sanitizer "$log")"
fi
finish
