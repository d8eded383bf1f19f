#!/usr/bin/env bash
# cli_ops_backup.sh -- shell tests of `mailvault backup`, `restore` and `passwd` (the ASan
# build, build/asan/mailvault, or $MAILVAULT_BIN): exit codes, messages, the backup ->
# restore and passwd round trips, --keep, --cipher, and the refusals (wrong password, damaged
# or foreign snapshot, empty new password, backup --all) with the store byte-identical.
#
# USAGE
#   make build/asan/mailvault && bash tests/cli_ops_backup.sh
#   (tests/run.sh runs it as part of `make test`.)
#
# Everything happens under a temporary root; MAILVAULT_KDF_ITER=1000 keeps key derivation
# cheap. Each check prints "PASS name" or "FAIL name"; the last line is
# "# N passed, N failed" and the exit status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh # run, check, fails_with, finish

mv="${MAILVAULT_BIN:-$PWD/build/asan/mailvault}"
make_tmp cli_ops_backup
store_root 1000

store_sha() { cat "$db" "$db-wal" "$root/example.org/alice.pub" 2>/dev/null | sha256sum; }
count_inbox() { "$mv" list "$user" --password-file "$1" --json </dev/null 2>/dev/null |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["messages"]))' 2>/dev/null; }

printf 'correct horse\n' >"$tmp/pw"
printf 'battery staple\n' >"$tmp/pw2"
printf '\n' >"$tmp/empty"
P=(--password-file "$tmp/pw")
user=alice@example.org
db="$root/example.org/alice.db"
bk="$tmp/backups"

for i in 1 2 3 4 5; do
    printf 'From: s%d@example.net\r\nTo: alice@example.org\r\nSubject: number %d\r\n\r\nbody %d\r\n' \
        "$i" "$i" "$i" >"$tmp/m$i.eml"
done

# ---- help and usage ----
run "$mv" help
check help_lists_ops bash -c "grep -q '^  backup ' '$out' && grep -q '^  restore ' '$out' &&
                              grep -q '^  passwd ' '$out'"
run "$mv" backup --help
check backup_help bash -c "[ $rc -eq 0 ] && grep -q '^usage: mailvault backup USER DIR' '$out'"
run "$mv" backup "$user"
check backup_missing_dir_usage [ "$rc" -eq 64 ]
run "$mv" backup "$user" "$bk" --keep 0
check backup_keep_zero_usage fails_with 64 -- '--keep'
run "$mv" backup "$user" "$bk" --keep many
check backup_keep_word_usage [ "$rc" -eq 64 ]
run "$mv" backup --all "$bk" extra
check backup_all_one_dir_usage fails_with 64 -- '--all takes only DIR'
run "$mv" restore "$user"
check restore_missing_snapshot_usage [ "$rc" -eq 64 ]
run "$mv" passwd "$user" --cipher rot13
check passwd_bad_cipher_usage fails_with 64 "rot13"
run "$mv" passwd "$user" --password-file - --new-password-file -
check passwd_two_stdin_usage fails_with 64 'stdin'
run "$mv" backup "$user" "$bk" "${P[@]}"
check backup_no_store fails_with 67 'no store'

# ---- a store with mail ----
run "$mv" init "$user" "${P[@]}"
check init [ "$rc" -eq 0 ]
for i in 1 2 3; do
    "$mv" deliver "$user" "${P[@]}" "$tmp/m$i.eml" </dev/null >/dev/null 2>&1
done
check three_messages [ "$(count_inbox "$tmp/pw")" = 3 ]

# ---- backup ----
run "$mv" backup "$user" "$bk" "${P[@]}"
check backup_ok bash -c "[ $rc -eq 0 ] && grep -q '3 messages' '$out' && [ ! -s '$err' ]"
snap=$(cut -f1 "$out")
check backup_files bash -c "[ -f '$snap' ] && [ -f '$snap.json' ] && [ \$(stat -c %a '$snap') = 600 ] &&
                            [ \$(stat -c %a '$bk') = 700 ]"
check backup_manifest bash -c "python3 -c \"import json,sys,hashlib
m = json.load(open('$snap.json'))
assert m['address'] == '$user' and m['messages'] == 3 and m['cipher'] == 'chacha20'
assert m['sha256'] == hashlib.sha256(open('$snap','rb').read()).hexdigest()
assert m['size_bytes'] == len(open('$snap','rb').read()) and m['schema_version'] >= 1
assert m['page_count'] * m['page_size'] == m['size_bytes']
\""
check backup_encrypted bash -c "! LC_ALL=C grep -a -q -F 'number 1' '$snap'"
run "$mv" sql "${P[@]}" --kdf-iter 1000 "$snap" "SELECT count(*) FROM messages"
check backup_opens_with_sql bash -c "[ $rc -eq 0 ] && [ \"\$(cat '$out')\" = 3 ]"
run "$mv" backup "$user" "$bk" --password-file "$tmp/pw2"
check backup_wrong_password bash -c "[ $rc -eq 77 ] && [ \$(ls '$bk' | grep -c 'mvbackup\$') -eq 1 ]"

# ---- restore round trip ----
"$mv" deliver "$user" "${P[@]}" "$tmp/m4.eml" </dev/null >/dev/null 2>&1
check four_messages [ "$(count_inbox "$tmp/pw")" = 4 ]
run "$mv" restore "$user" "$snap" "${P[@]}"
check restore_ok bash -c "[ $rc -eq 0 ] && grep -q 'restored $user' '$out'"
check restore_three_again [ "$(count_inbox "$tmp/pw")" = 3 ]
run "$mv" fetch "$user" 2 "${P[@]}"
check restore_fetch_identical cmp -s "$out" "$tmp/m2.eml"
check restore_no_leftover [ ! -e "$db.new" ]

# ---- restore refusals leave the store byte-identical ----
"$mv" deliver "$user" "${P[@]}" "$tmp/m5.eml" </dev/null >/dev/null 2>&1
before=$(store_sha)
run "$mv" restore "$user" "$snap" --password-file "$tmp/pw2"
check restore_wrong_password bash -c "[ $rc -eq 77 ] && grep -qi 'password' '$err'"
cp "$snap" "$tmp/damaged.mvbackup"
cp "$snap.json" "$tmp/damaged.mvbackup.json"
python3 - "$tmp/damaged.mvbackup.json" <<'EOF'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
m['file'] = 'damaged.mvbackup'
json.dump(m, open(p, 'w'))
EOF
flip_bit "$tmp/damaged.mvbackup" 5000 5
run "$mv" restore "$user" "$tmp/damaged.mvbackup" "${P[@]}"
check restore_damaged fails_with 65 'SHA-256'
run "$mv" restore "$user" "$tmp/nothing.mvbackup" "${P[@]}"
check restore_missing_snapshot [ "$rc" -eq 66 ]
run "$mv" restore bob@example.org "$snap" "${P[@]}"
check restore_other_address fails_with 65 'not of bob@example.org'
check restore_refusals_byte_identical [ "$(store_sha)" = "$before" ]
check restore_refusals_no_leftover [ ! -e "$db.new" ]
check four_after_refusals [ "$(count_inbox "$tmp/pw")" = 4 ]

# ---- --keep ----
for i in 1 2 3 4; do
    "$mv" backup "$user" "$bk" "${P[@]}" --keep 2 </dev/null >"$out" 2>"$err"
done
check keep_two [ "$(ls "$bk" | grep -c 'mvbackup$')" -eq 2 ]
check keep_two_manifests [ "$(ls "$bk" | grep -c 'mvbackup.json$')" -eq 2 ]
check keep_prunes_oldest [ ! -e "$snap" ]

# ---- backup --all: keyless snapshots of every store, restorable with the password ----
"$mv" init bob@example.com "${P[@]}" </dev/null >/dev/null 2>&1
"$mv" deliver bob@example.com "${P[@]}" "$tmp/m1.eml" </dev/null >/dev/null 2>&1
run "$mv" backup --all "$tmp/all"
check backup_all_ok bash -c "[ $rc -eq 0 ] && [ \$(grep -c 'keyless' '$out') -eq 2 ] && [ ! -s '$err' ]"
ksnap=$(grep 'alice@example.org' "$out" | cut -f1)
check backup_all_manifest bash -c "python3 -c \"import json
m = json.load(open('$ksnap.json'))
assert m['keyless'] == 1 and m['address'] == '$user' and m['messages'] == 0
\""
run "$mv" restore "$user" "$ksnap" "${P[@]}"
check restore_keyless [ "$rc" -eq 0 ]
check restore_keyless_content [ "$(count_inbox "$tmp/pw")" = 4 ]
run "$mv" backup --all "$tmp/all-none" --root "$tmp/no-such-root"
check backup_all_no_root [ "$rc" -eq 66 ]

# ---- passwd ----
before=$(store_sha)
run "$mv" passwd "$user" "${P[@]}" --new-password-file "$tmp/empty"
check passwd_empty_refused fails_with 65 'empty'
run "$mv" passwd "$user" --password-file "$tmp/pw2" --new-password-file "$tmp/pw"
check passwd_wrong_old bash -c "[ $rc -eq 77 ] && grep -qi 'password' '$err'"
run "$mv" passwd "$user" "${P[@]}"
check passwd_no_new_source fails_with 77 'no new password'
check passwd_refusals_byte_identical [ "$(store_sha)" = "$before" ]
run "$mv" passwd "$user" "${P[@]}" --new-password-file "$tmp/pw2"
check passwd_ok bash -c "[ $rc -eq 0 ] && grep -q 'password changed' '$out'"
run "$mv" list "$user" "${P[@]}"
check passwd_old_refused [ "$rc" -eq 77 ]
check passwd_new_opens [ "$(count_inbox "$tmp/pw2")" = 4 ]
check passwd_mode_0600 [ "$(stat -c %a "$db")" = 600 ]
run env MAILVAULT_PASSWORD='battery staple' MAILVAULT_NEW_PASSWORD='correct horse' "$mv" passwd "$user"
check passwd_from_env [ "$rc" -eq 0 ]
check passwd_env_new_opens [ "$(count_inbox "$tmp/pw")" = 4 ]

# ---- --cipher: an aes256cbc store becomes chacha20 ----
legacy="$root/example.org/legacy.db"
run "$mv" sql "${P[@]}" --create --cipher aes256cbc "$legacy" "PRAGMA page_size=4096" "PRAGMA auto_vacuum=FULL" "VACUUM"
run "$mv" deliver legacy@example.org "${P[@]}" "$tmp/m1.eml"
check legacy_store [ "$rc" -eq 0 ]
run "$mv" sql "${P[@]}" "$legacy" "PRAGMA cipher"
check legacy_is_aes bash -c "grep -q aes256cbc '$out'"
run "$mv" passwd legacy@example.org "${P[@]}" --new-password-file "$tmp/pw2" --cipher chacha20
check cipher_upgrade bash -c "[ $rc -eq 0 ] && grep -q 'cipher chacha20' '$out'"
run "$mv" sql --password-file "$tmp/pw2" --kdf-iter 1000 "$legacy" "PRAGMA cipher"
check cipher_now_chacha20 bash -c "grep -q chacha20 '$out'"
run "$mv" fetch legacy@example.org 1 --password-file "$tmp/pw2"
check cipher_upgrade_fetch cmp -s "$out" "$tmp/m1.eml"

finish
