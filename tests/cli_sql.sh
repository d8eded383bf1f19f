#!/usr/bin/env bash
# cli_sql.sh -- shell tests of `mailvault sql` and `mailvault version` (the ASan build,
# build/asan/mailvault), and of the stock sqlite3 shell with build/mailvault_ext.so on the
# same files.
#
# USAGE
#   make build/asan/mailvault build/mailvault_ext.so && bash tests/cli_sql.sh
#   (tests/run.sh runs it as part of `make test`.)
#
# Each check prints "PASS name" or "FAIL name" (with what it saw); the last line is
# "# N passed, N failed" and the exit status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh # run, check, finish

mv="$PWD/build/asan/mailvault"
ext="$PWD/build/mailvault_ext"
make_tmp cli_sql
unset MAILVAULT_PASSWORD

# shell KEY DBFILE SQL: the sqlite3 shell through the extension; the key goes on stdin.
shell() {
    printf ".load %s\n.open %s\nPRAGMA key='%s';\n%s\n" "$ext" "$2" "$1" "$3" |
        sqlite3 -batch -init /dev/null >"$out" 2>"$err"
    rc=$?
}

sha() {
    sha256sum "$1" | cut -d' ' -f1
}

pw="$tmp/pw"
printf 'correct horse\n' >"$pw"
db="$tmp/rt.db"

# ---- version, help, usage errors ----
run "$mv" version
check version [ "$rc" -eq 0 ]
check version_lines \
    bash -c "sed -n 1p '$out' | grep -Eq '^mailvault [0-9]+\.[0-9]+\.[0-9]+$' &&
             sed -n 2p '$out' | grep -Eq '^SQLite 3\.' && sed -n 3p '$out' | grep -q '^OpenSSL '"
run "$mv" help
check help [ "$rc" -eq 0 ]
check help_lists_sql grep -q '^  sql ' "$out"
run "$mv"
check no_args_usage [ "$rc" -eq 64 ]
run "$mv" frobnicate
check unknown_command_usage [ "$rc" -eq 64 ]
run "$mv" sql --password-file "$pw" "$db"
check no_sql_usage [ "$rc" -eq 64 ]
run "$mv" sql --bogus "$db" "SELECT 1"
check unknown_option_usage [ "$rc" -eq 64 ]
run "$mv" sql --create --readonly --password-file "$pw" "$db" "SELECT 1"
check create_readonly_usage [ "$rc" -eq 64 ]
# One KDF limit (MV_KDF_ITER_MAX, 16777216) in every layer: a larger --kdf-iter is a usage
# error that names the limit, not an "invalid key" from the crypto layer (issue 15.7).
run "$mv" sql --create --kdf-iter 20000000 --password-file "$pw" "$tmp/kdf.db" "SELECT 1"
check kdf_iter_over_limit_usage bash -c "[ $rc -eq 64 ] && grep -q 'from 0 to 16777216' '$err' &&
    ! grep -qi 'invalid key' '$err' && [ ! -e '$tmp/kdf.db' ]"

# ---- round trip: create, insert, select ----
run "$mv" sql --create --password-file "$pw" "$db" \
    "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, data BLOB, r REAL);
     INSERT INTO t VALUES (1, 'plain', x'00ff7f', 1.5);
     INSERT INTO t VALUES (2, NULL, NULL, NULL); -- a comment after the last statement" \
    "INSERT INTO t VALUES (3, 'Grüße ✓ 密码', x'', -2);;"
check create_insert [ "$rc" -eq 0 ]
check create_prints_nothing [ ! -s "$out" ]
check create_mode_0600 [ "$(stat -c %a "$db")" = 600 ]
run "$mv" sql --password-file "$pw" "$db" "SELECT * FROM t ORDER BY id" \
    "SELECT count(*), sum(id) FROM t; SELECT 'two statements'"
printf '1\tplain\t00ff7f\t1.5\n2\t\t\t\n3\tGrüße ✓ 密码\t\t-2.0\n3\t6\ntwo statements\n' \
    >"$tmp/expected"
check select_exact_tsv cmp -s "$out" "$tmp/expected"
check select_exit_0 [ "$rc" -eq 0 ]
check select_no_stderr [ ! -s "$err" ]
check not_plaintext_on_disk bash -c "! LC_ALL=C grep -a -q -F plain '$db'"

# ---- password sources ----
run env MAILVAULT_PASSWORD='correct horse' "$mv" sql "$db" "SELECT count(*) FROM t"
check password_from_env bash -c "[ $rc -eq 0 ] && [ \"\$(cat '$out')\" = 3 ]"
# once read, the password is gone from the process's environment (/proc/PID/environ): a
# long query keeps the process alive; the environment is polled (no fixed sleep, which a
# loaded machine outruns either way) until it shows the wipe or the process ends.
MAILVAULT_PASSWORD='correct horse' "$mv" sql "$db" \
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000000)
     SELECT count(*) FROM c" </dev/null >"$out" 2>"$err" &
sql_pid=$!
wiped=0
for _ in $(seq 1 600); do
    tr '\0' '\n' <"/proc/$sql_pid/environ" >"$tmp/environ" 2>/dev/null || break
    if grep -q '^PATH=' "$tmp/environ" && ! grep -q 'correct horse' "$tmp/environ"; then
        wiped=1
        break
    fi
    sleep 0.1
done
kill "$sql_pid" 2>/dev/null
wait "$sql_pid" 2>/dev/null
check password_env_wiped [ "$wiped" -eq 1 ]
printf 'correct horse\r\n' >"$tmp/pw_crlf"
run "$mv" sql --password-file "$tmp/pw_crlf" "$db" "SELECT 1"
check password_file_crlf_stripped [ "$rc" -eq 0 ]
printf 'correct horse' | "$mv" sql --password-file - "$db" "SELECT 2" >"$out" 2>"$err"
rc=$?
check password_from_stdin bash -c "[ $rc -eq 0 ] && [ \"\$(cat '$out')\" = 2 ]"
printf 'correct horse\n\n' >"$tmp/pw_two_newlines"
run "$mv" sql --password-file "$tmp/pw_two_newlines" "$db" "SELECT 1"
check only_one_newline_stripped [ "$rc" -eq 77 ]
: >"$tmp/pw_empty"
run "$mv" sql --password-file "$tmp/pw_empty" "$db" "SELECT 1"
check empty_password_file_refused bash -c "[ $rc -eq 65 ] && grep -q 'empty password' '$err'"
printf '\n' >"$tmp/pw_newline"
run "$mv" sql --password-file "$tmp/pw_newline" "$db" "SELECT 1"
check newline_only_password_refused bash -c "[ $rc -eq 65 ] && grep -q 'empty password' '$err'"
head -c 5000 /dev/zero | tr '\0' 'x' >"$tmp/pw_long"
run "$mv" sql --password-file "$tmp/pw_long" "$db" "SELECT 1"
check long_password_refused bash -c "[ $rc -eq 65 ] && grep -q 'longer than 4096' '$err'"
run "$mv" sql "$db" "SELECT 1"
check no_password_source bash -c "[ $rc -eq 77 ] && grep -q 'no password: use --password-file' '$err'"
run "$mv" sql --password-file "$tmp/no_such_file" "$db" "SELECT 1"
check missing_password_file bash -c "[ $rc -eq 66 ] && grep -q 'no_such_file' '$err'"

# ---- wrong password ----
before=$(sha "$db")
printf 'battery staple\n' >"$tmp/pw_wrong"
run "$mv" sql --password-file "$tmp/pw_wrong" "$db" "SELECT count(*) FROM t"
check wrong_password_exit_77 [ "$rc" -eq 77 ]
check wrong_password_message grep -q '^mailvault: wrong password' "$err"
check wrong_password_no_output [ ! -s "$out" ]
run "$mv" sql --password-file "$tmp/pw_wrong" "$db" "INSERT INTO t VALUES (9, 'x', NULL, NULL)"
check wrong_password_file_unchanged [ "$(sha "$db")" = "$before" ]

# ---- missing file, bad cipher, SQL errors, read-only ----
run "$mv" sql --password-file "$pw" "$tmp/missing.db" "SELECT 1"
check missing_file_exit_66 bash -c "[ $rc -eq 66 ] && grep -q 'missing.db: no such database' '$err'"
check missing_file_not_created bash -c "! ls '$tmp'/missing.db* >/dev/null 2>&1"
run "$mv" sql --cipher rot13 --create --password-file "$pw" "$tmp/c.db" "SELECT 1"
check bad_cipher bash -c "[ $rc -eq 64 ] && grep -q \"unknown cipher 'rot13'\" '$err'"
check bad_cipher_no_file bash -c "! ls '$tmp'/c.db* >/dev/null 2>&1"
run "$mv" sql --password-file "$pw" "$db" "SELEC 1"
check sql_syntax_error bash -c "[ $rc -eq 65 ] && grep -q '^mailvault: near \"SELEC\": syntax error' '$err'"
run "$mv" sql --password-file "$pw" "$db" "SELECT 1" "SELECT * FROM nowhere" "SELECT 3"
check sql_error_stops bash -c "[ $rc -eq 65 ] && [ \"\$(cat '$out')\" = 1 ] &&
                               grep -q 'no such table: nowhere' '$err'"
# a file a statement cannot open is an I/O error (74), not a missing DBFILE (66)
run "$mv" sql --password-file "$pw" "$db" "ATTACH '$tmp/no/such/dir/x.db' AS x"
check statement_cantopen_exit_74 bash -c "[ $rc -eq 74 ] && grep -q 'unable to open' '$err'"
run "$mv" sql --readonly --password-file "$pw" "$db" "DELETE FROM t"
check readonly_refuses_writes bash -c "[ $rc -eq 77 ] && grep -q 'readonly' '$err'"

# ---- a damaged page is named ----
cp "$db" "$tmp/damaged.db"
size=$(stat -c %s "$tmp/damaged.db")
flip_bit "$tmp/damaged.db" $((size - 100)) 2
run "$mv" sql --password-file "$pw" "$tmp/damaged.db" "SELECT * FROM t"
check damaged_page_named bash -c "[ $rc -eq 65 ] && grep -q '(page [0-9]* failed authentication' '$err'"

# ---- other ciphers ----
run "$mv" sql --create --cipher sqlcipher --password-file "$pw" "$tmp/sc.db" \
    "CREATE TABLE t(x); INSERT INTO t VALUES ('sc')"
run "$mv" sql --password-file "$pw" "$tmp/sc.db" "SELECT x FROM t; PRAGMA cipher"
check sqlcipher_round_trip bash -c "[ $rc -eq 0 ] && [ \"\$(cat '$out')\" = \"\$(printf 'sc\nsqlcipher')\" ]"
run "$mv" sql --create --cipher aes256cbc --password-file "$pw" "$tmp/cbc.db" \
    "CREATE TABLE t(x); INSERT INTO t VALUES ('cbc')" "SELECT x FROM t"
check aes256cbc_round_trip bash -c "[ $rc -eq 0 ] && [ \"\$(cat '$out')\" = cbc ]"
check aes256cbc_warning_once bash -c "[ \$(grep -c 'warning: .*legacy aes256cbc cipher' '$err') -eq 1 ]"

# ---- another connection's lock: waited for, not "database is locked" ----
# A process outside mailvault (the sqlite3 shell checkpointing as it closes, say) holds the
# database's EXCLUSIVE lock bytes (PENDING, RESERVED and SHARED: 0x40000000, 512 bytes) with
# fcntl() for 400 ms. `mailvault sql` waits for it from its first read on (the key's proof);
# without the wait it answered "database is locked" at once.
run "$mv" sql --create --kdf-iter 1000 --password-file "$pw" "$tmp/busy.db" \
    "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1), (2), (3)"
python3 - "$tmp/busy.db" "$tmp/held" "$tmp/released" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 512, 0x40000000)
open(sys.argv[2], "w").close()
time.sleep(0.4)  # how long the lock is held, not a wait for anything
open(sys.argv[3], "w").close()
fcntl.lockf(fd, fcntl.LOCK_UN, 512, 0x40000000)
PY
holder=$!
for _ in $(seq 1 3000); do # up to 30 s for the holder to start
    [ -e "$tmp/held" ] && break
    sleep 0.01
done
run "$mv" sql --kdf-iter 1000 --password-file "$pw" "$tmp/busy.db" "SELECT count(*) FROM t"
after_release=0
[ -e "$tmp/released" ] && after_release=1 # the answer came once the lock went, not before
wait "$holder"
check sql_waits_for_a_lock bash -c "[ $rc -eq 0 ] && [ \"\$(cat '$out')\" = 3 ] &&
                                    [ $after_release -eq 1 ]"

# ---- the stock sqlite3 shell with the extension ----
shell 'correct horse' "$db" "SELECT id, name, hex(data) FROM t ORDER BY id;"
printf 'ok\n1|plain|00FF7F\n2||\n3|Grüße ✓ 密码|\n' >"$tmp/expected"
check shell_reads_cli_file bash -c "[ $rc -eq 0 ] && cmp -s '$out' '$tmp/expected'"
before=$(sha "$db")
shell 'battery staple' "$db" "SELECT count(*) FROM t;"
check shell_refuses_wrong_key bash -c "[ $rc -ne 0 ] && grep -q 'wrong password' '$err'"
check shell_wrong_key_file_unchanged [ "$(sha "$db")" = "$before" ]
shell 'shell key' "$tmp/shell.db" "CREATE TABLE s(a, b); INSERT INTO s VALUES (1, 'from the shell');"
check shell_creates_file [ "$rc" -eq 0 ]
reserve=$(od -A n -t u1 -j 20 -N 1 "$tmp/shell.db" | tr -d ' ')
check shell_file_reserve_32 [ "$reserve" = 32 ]
run env MAILVAULT_PASSWORD='shell key' "$mv" sql "$tmp/shell.db" "SELECT * FROM s; PRAGMA cipher"
check cli_reads_shell_file bash -c "[ $rc -eq 0 ] &&
                               [ \"\$(cat '$out')\" = \"\$(printf '1\tfrom the shell\nchacha20')\" ]"

finish
