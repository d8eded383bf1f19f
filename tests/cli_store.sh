#!/usr/bin/env bash
# cli_store.sh -- shell tests of the store commands of the mailvault tool (the ASan build,
# build/asan/mailvault): init, deliver (with the password and sealed), list, fetch, flags,
# copy, move, expunge, search, import, export, mailboxes, mailbox, info, and the refusals
# (bad addresses, wrong password, missing store, unknown mailbox, bad UID set, oversize).
#
# USAGE
#   make build/asan/mailvault && bash tests/cli_store.sh
#   (tests/run.sh runs it as part of `make test`.)
#
# Everything happens under a temporary root; MAILVAULT_KDF_ITER=2 keeps key derivation
# cheap. Each check prints "PASS name" or "FAIL name" (with what it saw); the last line is
# "# N passed, N failed" and the exit status is non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh # run, run_in, check, fails_with, json_ok, json_eval, finish

mv="$PWD/build/asan/mailvault"
make_tmp cli_store
store_root 2

# no_raw_controls: stdout holds no control character but TAB and newline (and no ESC).
no_raw_controls() { ! LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$out"; }
tree_sha() { (cd "$1" && find . -type f | sort | xargs -r sha256sum); }

pw="$tmp/pw"
printf 'correct horse\n' >"$pw"
P=(--password-file "$pw")
user=alice@example.org
db="$root/example.org/alice.db"

# A message with CRLF line ends, one with LF, one hostile to terminals and JSON.
printf 'From: Bob Sender <bob@example.net>\r\nTo: alice@example.org\r\nSubject: Quarterly zebra report\r\nDate: Mon, 01 Jan 2024 10:00:00 +0000\r\nMessage-ID: <one@example.net>\r\n\r\nThe zebra numbers are attached.\r\n' >"$tmp/m1.eml"
printf 'From: Carol <carol@example.com>\nTo: alice@example.org\nCc: dave@example.com\nSubject: Lunch\nDate: Tue, 02 Jan 2024 12:00:00 +0000\n\nNoon at the usual place.\n' >"$tmp/m2.eml"
printf 'From: "Eve \\"Q\\" \\\\ X" <eve@example.org>\nTo: alice@example.org\nSubject: esc \033]0;owned\007 tab\there \302\x80c1 bad\xff\xfe utf8 \xc3\xa9\nDate: Wed, 03 Jan 2024 08:00:00 +0000\n\nhostile body \033[2J\n' >"$tmp/m3.eml"
# What deliver stores (and fetch gives back) of the LF ones: CRLF line ends (RFC 5322 2.1).
LC_ALL=C sed 's/$/\r/' "$tmp/m2.eml" >"$tmp/m2.crlf"
LC_ALL=C sed 's/$/\r/' "$tmp/m3.eml" >"$tmp/m3.crlf"

# ---- help, usage errors ----
run "$mv" help
check help_lists_store_commands bash -c "grep -q '^  init ' '$out' && grep -q '^  search ' '$out' &&
                                         grep -q '^  info ' '$out' && grep -q '^  sql ' '$out'"
run "$mv" list --help
check command_help bash -c "[ $rc -eq 0 ] && grep -q '^usage: mailvault list USER' '$out'"
run "$mv" list
check missing_user_usage [ "$rc" -eq 64 ]
run "$mv" list "$user" --bogus
check unknown_option_usage fails_with 64 "unknown option '--bogus'"
run "$mv" list "$user" --json --json
check repeated_option_usage fails_with 64 'given twice'
run "$mv" deliver "$user" --sealed "${P[@]}" "$tmp/m1.eml"
check sealed_with_password_usage [ "$rc" -eq 64 ]
run "$mv" flags "$user" 1 '\Seen'
check flags_without_mode_usage fails_with 64 'exactly one of --add'
run "$mv" flags "$user" 1 --add '\Recent'
check flags_unknown_system_flag fails_with 64 "unknown flag '.Recent'"
run "$mv" search "$user" --seen --unseen
check search_seen_unseen_usage [ "$rc" -eq 64 ]
run "$mv" search "$user" --since 2024-02-30
check search_bad_date_usage fails_with 64 'not a date'
run "$mv" export "$user"
check export_needs_format fails_with 64 -- '--mbox'
run "$mv" mailbox frobnicate "$user" X
check mailbox_unknown_subcommand [ "$rc" -eq 64 ]
check usage_errors_create_nothing [ ! -e "$root" ]

# ---- bad addresses: refused, nothing created under the root ----
long=$(head -c 400 /dev/zero | tr '\0' a)
for bad in '../x@y' 'a/b@c' 'x@..' '' "$long@example.org" 'no-at-sign' 'a@b@c/d'; do
    for cmd in init list deliver; do
        run "$mv" "$cmd" "$bad" "${P[@]}"
        check "bad_address_${cmd}_$(printf '%s' "$bad" | head -c 12 | tr -c 'a-z0-9' _)" \
            bash -c "[ $rc -ne 0 ] && [ ! -e '$root' ] && ! find '$tmp' -name '*.db' | grep -q ."
    done
done

# ---- init ----
run "$mv" init "$user"
check init_without_password_refused fails_with 77 'no password'
check init_without_password_nothing [ ! -e "$db" ]
run "$mv" init "$user" "${P[@]}"
check init [ "$rc" -eq 0 ]
check init_created_db [ -f "$db" ]
check init_db_mode_0600 [ "$(stat -c %a "$db")" = 600 ]
check init_dir_mode_0700 [ "$(stat -c %a "$root/example.org")" = 700 ]
run "$mv" init "$user" "${P[@]}"
check init_twice_refused fails_with 73 'already exists'
check init_not_plaintext bash -c "! LC_ALL=C grep -a -q -F INBOX '$db'"

# ---- deliver ----
run "$mv" deliver "$user" "${P[@]}" "$tmp/m1.eml"
check deliver_file bash -c "[ $rc -eq 0 ] && [ ! -s '$out' ]"
run_in "$tmp/m2.eml" "$mv" deliver "$user" "${P[@]}" --flags '\Seen,$Lunch'
check deliver_stdin_flags [ "$rc" -eq 0 ]
run env MAILVAULT_PASSWORD='correct horse' "$mv" deliver "$user" "$tmp/m3.eml"
check deliver_password_env [ "$rc" -eq 0 ]
run_in "$tmp/m1.eml" "$mv" deliver "$user" --password-file - -
check deliver_stdin_twice_usage [ "$rc" -eq 64 ]
run "$mv" deliver "$user" "${P[@]}" --mailbox Nope "$tmp/m1.eml"
check deliver_unknown_mailbox [ "$rc" -eq 68 ]
run "$mv" deliver "$user" "${P[@]}"
check deliver_empty_refused fails_with 65 'empty message'
run "$mv" deliver "$user" --sealed
check deliver_sealed_empty_refused fails_with 65 'empty message'
run "$mv" deliver "$user" "${P[@]}" "$tmp/does-not-exist.eml"
check deliver_missing_file fails_with 66 'does-not-exist.eml'

# ---- list ----
run "$mv" list "$user" "${P[@]}"
check list_human bash -c "[ $rc -eq 0 ] && [ \$(wc -l <'$out') -eq 4 ] && head -n 1 '$out' | grep -q 'UID.*DATE.*SUBJECT'"
check list_human_no_raw_controls no_raw_controls
run "$mv" list "$user" "${P[@]}" --json
check list_json_valid json_ok
check list_json_count [ "$(json_eval "len(d['messages'])")" = 3 ]
check list_json_fields [ "$(json_eval "sorted(d['messages'][0].keys()) == sorted(['mailbox','uid','modseq','date','sent_date','size_bytes','flags','keywords','from','to','cc','subject','message_id','in_reply_to','thread_id'])")" = True ]
check list_json_flags [ "$(json_eval "[(m['flags'], m['keywords']) for m in d['messages'] if m['uid'] == 2][0]")" = "(['\\\\Seen'], ['\$Lunch'])" ]
check list_json_date_iso [ "$(json_eval "all(m['date'].endswith('Z') and m['date'][10] == 'T' for m in d['messages'])")" = True ]
check list_json_size [ "$(json_eval "[m['size_bytes'] for m in d['messages'] if m['uid'] == 1][0]")" = "$(stat -c %s "$tmp/m1.eml")" ]
run "$mv" list "$user" "${P[@]}" --json --limit 2
check list_limit [ "$(json_eval "len(d['messages'])")" = 2 ]
run "$mv" list "$user" "${P[@]}" --mailbox Nope
check list_unknown_mailbox bash -c "[ $rc -eq 68 ] && grep -qi 'mailbox' '$err'"

# ---- fetch ----
run "$mv" fetch "$user" 1 "${P[@]}"
check fetch_byte_identical_crlf cmp -s "$out" "$tmp/m1.eml"
run "$mv" fetch "$user" 3 "${P[@]}"
check fetch_byte_identical_hostile_crlf cmp -s "$out" "$tmp/m3.crlf"
run "$mv" fetch "$user" 2 "${P[@]}" --output "$tmp/f2.eml"
check fetch_output_file bash -c "[ $rc -eq 0 ] && cmp -s '$tmp/f2.eml' '$tmp/m2.crlf' &&
                                 [ \$(stat -c %a '$tmp/f2.eml') = 600 ]"
run "$mv" fetch "$user" 99 "${P[@]}" --output "$tmp/f99.eml"
check fetch_unknown_uid bash -c "[ $rc -eq 68 ] && [ ! -e '$tmp/f99.eml' ] && ! ls '$tmp'/f99.eml.* 2>/dev/null"
run "$mv" fetch "$user" 0 "${P[@]}"
check fetch_bad_uid_usage [ "$rc" -eq 64 ]

# ---- flags ----
run "$mv" flags "$user" 1,3 "${P[@]}" --add '\Flagged' '\seen' urgent
check flags_add bash -c "[ $rc -eq 0 ] && grep -q '^2 messages changed' '$out'"
run "$mv" flags "$user" 3 "${P[@]}" --remove '\Seen'
check flags_remove [ "$rc" -eq 0 ]
run "$mv" list "$user" "${P[@]}" --json
check flags_state [ "$(json_eval "sorted((m['uid'], m['flags'], m['keywords']) for m in d['messages'])")" = \
    "[(1, ['\\\\Seen', '\\\\Flagged'], ['urgent']), (2, ['\\\\Seen'], ['\$Lunch']), (3, ['\\\\Flagged'], ['urgent'])]" ]
run "$mv" flags "$user" 2 "${P[@]}" --set
check flags_set_clears [ "$rc" -eq 0 ]
run "$mv" flags "$user" 'x:y' "${P[@]}" --add '\Seen'
check flags_bad_uid_set [ "$rc" -eq 65 ]
run "$mv" flags "$user" 1 "${P[@]}" --mailbox Nope --add '\Seen'
check flags_unknown_mailbox [ "$rc" -eq 68 ]

# ---- search ----
search_uids() { # ARGS...: the UIDs found in INBOX, sorted, comma-separated
    run "$mv" search "$user" "${P[@]}" --mailbox INBOX --json "$@"
    json_eval "','.join(str(u) for u in sorted(m['uid'] for m in d['messages']))"
}
check search_text [ "$(search_uids --text zebra)" = 1 ]
check search_from [ "$(search_uids --from carol)" = 2 ]
check search_to [ "$(search_uids --to alice@example.org)" = 1,2,3 ]
check search_cc [ "$(search_uids --cc dave)" = 2 ]
check search_subject [ "$(search_uids --subject lunch)" = 2 ]
check search_message_id [ "$(search_uids --message-id one@example.net)" = 1 ]
check search_seen [ "$(search_uids --seen)" = 1 ]
check search_unseen [ "$(search_uids --unseen)" = 2,3 ]
check search_flagged [ "$(search_uids --flagged)" = 1,3 ]
check search_keyword [ "$(search_uids --keyword urgent)" = 1,3 ]
size2=$(stat -c %s "$tmp/m2.crlf")
check search_larger [ "$(search_uids --larger $((size2 - 1)))" = 1,2,3 ]
check search_larger_excludes [ "$(search_uids --larger "$size2" --from carol)" = "" ]
check search_smaller_includes [ "$(search_uids --smaller $((size2 + 1)) --from carol)" = 2 ]
check search_smaller [ "$(search_uids --smaller 1)" = "" ]
check search_since_today [ "$(search_uids --since "$(date -u +%Y-%m-%d)")" = 1,2,3 ]
check search_before_1971 [ "$(search_uids --before 1971-01-01)" = "" ]
check search_and [ "$(search_uids --flagged --text zebra)" = 1 ]
run "$mv" search "$user" "${P[@]}" --json --limit 1
search_one() { json_ok && [ "$(json_eval "len(d['messages'])")" = 1 ]; }
check search_json_limit search_one
run "$mv" search "$user" "${P[@]}" --from bob
check search_all_mailboxes_human bash -c "[ $rc -eq 0 ] && head -n 1 '$out' | grep -q '^MAILBOX'"
run "$mv" search "$user" "${P[@]}" --from nobody-at-all
check search_nothing_prints_nothing bash -c "[ $rc -eq 0 ] && [ ! -s '$out' ]"

# ---- copy, move, expunge ----
run "$mv" copy "$user" 1:2 Archive "${P[@]}"
check copy bash -c "[ $rc -eq 0 ] && grep -q '^copied 2 messages to Archive' '$out'"
run "$mv" move "$user" 3 Trash "${P[@]}"
check move bash -c "[ $rc -eq 0 ] && grep -q '^moved 1 message to Trash' '$out'"
run "$mv" fetch "$user" 1 "${P[@]}" --mailbox Trash
check moved_message_intact cmp -s "$out" "$tmp/m3.crlf"
run "$mv" copy "$user" 1 Nope "${P[@]}"
check copy_unknown_mailbox [ "$rc" -eq 68 ]
run "$mv" flags "$user" 1:* "${P[@]}" --mailbox Archive --add '\Deleted'
run "$mv" expunge "$user" "${P[@]}" --mailbox Archive 2
check expunge_uid_set bash -c "[ $rc -eq 0 ] && grep -q '^expunged 1 message from Archive' '$out'"
run "$mv" expunge "$user" "${P[@]}" --mailbox Archive
check expunge_rest bash -c "[ $rc -eq 0 ] && grep -q '^expunged 1 message from Archive' '$out'"
run "$mv" mailboxes "$user" "${P[@]}" --json
check mailboxes_json_valid json_ok
check mailboxes_counts [ "$(json_eval "sorted((m['name'], m['messages']) for m in d['mailboxes'] if m['name'] in ('INBOX','Archive','Trash'))")" = \
    "[('Archive', 0), ('INBOX', 2), ('Trash', 1)]" ]
check mailboxes_fields [ "$(json_eval "sorted(d['mailboxes'][0].keys())")" = \
    "['highestmodseq', 'messages', 'name', 'size_bytes', 'special_use', 'stored_bytes', 'subscribed', 'uidnext', 'uidvalidity', 'unseen']" ]
check mailboxes_stored_bytes [ "$(json_eval "[(m['stored_bytes'] > 0) == (m['messages'] > 0) for m in d['mailboxes']] == [True] * len(d['mailboxes'])")" = True ]
check mailboxes_special_use [ "$(json_eval "[m['special_use'] for m in d['mailboxes'] if m['name'] == 'Sent'][0]")" = '\Sent' ]
run "$mv" mailboxes "$user" "${P[@]}"
check mailboxes_human bash -c "[ $rc -eq 0 ] && head -n 1 '$out' | grep -q 'MESSAGES.*SIZE.*STORED.*NAME$' && grep -q ' INBOX$' '$out'"
# a copy shows the same stored bytes in its mailbox; the store's total does not grow
run "$mv" info "$user" "${P[@]}" --json
stored_before=$(json_eval "d['stored_bytes']")
run "$mv" mailbox create "$user" 'Copy "q" \ ü' "${P[@]}"
run "$mv" copy "$user" 1:* 'Copy "q" \ ü' "${P[@]}"
run "$mv" mailboxes "$user" "${P[@]}" --json
check mailboxes_odd_name_json json_ok
check mailboxes_copy_stored [ "$(json_eval "[m['stored_bytes'] for m in d['mailboxes'] if m['name'] == 'INBOX'] == [m['stored_bytes'] for m in d['mailboxes'] if m['name'] == 'Copy \"q\" \\\\ ü']")" = True ]
run "$mv" info "$user" "${P[@]}" --json
check copy_store_total_same [ "$(json_eval "d['stored_bytes']")" = "$stored_before" ]
run "$mv" mailbox delete "$user" 'Copy "q" \ ü' "${P[@]}"

# ---- mailbox create, rename, delete ----
run "$mv" mailbox create "$user" Projects "${P[@]}" --special-use '\Flagged'
check mailbox_create [ "$rc" -eq 0 ]
run "$mv" mailbox create "$user" Projects "${P[@]}"
check mailbox_create_exists [ "$rc" -eq 73 ]
run "$mv" mailbox rename "$user" Projects Projects2024 "${P[@]}"
check mailbox_rename [ "$rc" -eq 0 ]
run "$mv" copy "$user" 1 Projects2024 "${P[@]}"
run "$mv" mailbox delete "$user" Projects2024 "${P[@]}"
check mailbox_delete [ "$rc" -eq 0 ]
run "$mv" mailboxes "$user" "${P[@]}" --json
check mailbox_gone [ "$(json_eval "[m['name'] for m in d['mailboxes'] if m['name'].startswith('Projects')]")" = "[]" ]
run "$mv" mailbox delete "$user" INBOX "${P[@]}"
check mailbox_delete_inbox_refused [ "$rc" -eq 65 ]
run "$mv" mailbox rename "$user" Nope Other "${P[@]}"
check mailbox_rename_unknown [ "$rc" -eq 68 ]

# ---- sealed delivery and info ----
run "$mv" info "$user" "${P[@]}" --json
check info_json_valid json_ok
before=$(json_eval "d['messages']")
run_in "$tmp/m2.eml" "$mv" deliver "$user" --sealed
check deliver_sealed bash -c "[ $rc -eq 0 ] && [ ! -s '$out' ]"
check sealed_not_plaintext bash -c "! LC_ALL=C grep -r -a -q -F 'usual place' '$root'"
run "$mv" info "$user" "${P[@]}" --json
check info_sealed_arrived [ "$(json_eval "(d['messages'] - $before, d['delivered_at_open'], d['pending'])")" = "(1, 1, 0)" ]
check info_json_fields [ "$(json_eval "sorted(d.keys())")" = \
    "['address', 'attachments', 'delivered_at_open', 'file', 'format_version', 'fts_rows_left', 'logical_bytes', 'mailboxes', 'messages', 'migrate_ms', 'migrated_from', 'pending', 'physical_bytes', 'schema_version', 'stored_bytes']" ]
run "$mv" info "$user" "${P[@]}"
check info_human bash -c "[ $rc -eq 0 ] && grep -q '^messages ' '$out' && grep -q '^store  *$user' '$out'"
run "$mv" deliver bob@example.org --sealed "$tmp/m1.eml"
check sealed_missing_store fails_with 67 'no store for bob@example.org'

# ---- oversize ----
run "$mv" list "$user" "${P[@]}" --json
count_before=$(json_eval "len(d['messages'])")
run "$mv" deliver "$user" "${P[@]}" --max-message-size 10 "$tmp/m1.eml"
check oversize_file_refused fails_with 65 'message_size_max'
run_in "$tmp/m1.eml" "$mv" deliver "$user" --sealed --max-message-size 10
check oversize_stdin_sealed_refused fails_with 65 'message_size_max'
run "$mv" deliver "$user" "${P[@]}" --max-message-size 0 "$tmp/m1.eml"
check oversize_zero_usage [ "$rc" -eq 64 ]
run "$mv" list "$user" "${P[@]}" --json
check oversize_stored_nothing [ "$(json_eval "len(d['messages'])")" = "$count_before" ]

# ---- wrong password, missing store ----
printf 'battery staple\n' >"$tmp/wrong"
before=$(tree_sha "$root/example.org")
run "$mv" list "$user" --password-file "$tmp/wrong"
check wrong_password fails_with 77 'wrong password'
check wrong_password_no_output [ ! -s "$out" ]
run "$mv" deliver "$user" --password-file "$tmp/wrong" "$tmp/m1.eml"
check wrong_password_deliver fails_with 77 'wrong password'
check wrong_password_store_unchanged [ "$(tree_sha "$root/example.org")" = "$before" ]
run "$mv" list nobody@example.org "${P[@]}"
check missing_store fails_with 67 'no store for nobody@example.org'
check missing_store_nothing_created bash -c "[ ! -e '$root/example.org/nobody.db' ]"
run "$mv" list "$user" "${P[@]}" --root "$tmp/elsewhere"
check missing_root fails_with 67 'no store for'
check missing_root_not_created [ ! -e "$tmp/elsewhere" ]
MAILVAULT_KDF_ITER=many run "$mv" list "$user" "${P[@]}"
check bad_environment_setting_is_config fails_with 78 'MAILVAULT_KDF_ITER'

# ---- the password prompt: on the terminal, echo off, never echoed back ----
cat >"$tmp/prompt.py" <<'PY'
import os, pty, sys, termios, time
mv, user = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.execv(mv, [mv, "mailboxes", user, "--json"])
seen, echo_off, deadline = b"", None, time.time() + 30
while b"Password: " not in seen and time.time() < deadline:
    seen += os.read(fd, 1024)
time.sleep(0.2)  # the prompt is written before echo goes off
echo_off = not (termios.tcgetattr(fd)[3] & termios.ECHO)
os.write(fd, b"correct horse\n")
rest = b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    rest += chunk
_, status = os.waitpid(pid, 0)
ok = echo_off and b"correct horse" not in seen + rest and b'"INBOX"' in rest
print("echo_off=%s status=%d echoed=%s" % (echo_off, status, b"correct horse" in rest))
sys.exit(0 if ok and os.WEXITSTATUS(status) == 0 else 1)
PY
run python3 "$tmp/prompt.py" "$mv" "$user"
check prompt_echo_off_not_echoed [ "$rc" -eq 0 ]

# ---- JSON of empty results ----
run "$mv" search "$user" "${P[@]}" --json --subject 'no such subject at all'
check search_json_empty bash -c "[ $rc -eq 0 ] && python3 -m json.tool '$out' >/dev/null"
check search_json_empty_list [ "$(json_eval "d == {'format_version': 2, 'messages': []}")" = True ]
run "$mv" list "$user" "${P[@]}" --json --mailbox Junk
check list_json_empty bash -c "[ $rc -eq 0 ] && python3 -m json.tool '$out' >/dev/null"
check list_json_empty_list [ "$(json_eval "d == {'format_version': 2, 'messages': []}")" = True ]
run "$mv" search "$user" "${P[@]}" --json --mailbox Nope
check search_json_unknown_mailbox bash -c "[ $rc -eq 68 ] && [ ! -s '$out' ] && grep -q 'no mailbox' '$err'"

# ---- modes of everything the store made ----
check store_modes bash -c "! find '$root' \( -type d ! -perm 700 \) -o \( -type f ! -perm 600 \) | grep -q ."

# ---- import: mbox, re-import, .eml folder, limits ----
{
    printf 'From bob@example.net Mon Jan  1 10:00:00 2024\nFrom: Bob <bob@example.net>\nSubject: mbox one\n\nfirst body\n>From here on, quoted\n\n'
    printf 'From carol@example.com Tue Jan  2 10:00:00 2024\nFrom: Carol <carol@example.com>\nSubject: mbox two\n\nsecond body\n\n'
    printf 'From dave@example.com Wed Jan  3 10:00:00 2024\nFrom: Dave <dave@example.com>\nSubject: mbox three\n\n%s\n\n' "$(head -c 3000 /dev/zero | tr '\0' x)"
} >"$tmp/small.mbox"
run "$mv" mailbox create "$user" Imported "${P[@]}"
run "$mv" import "$user" "$tmp/small.mbox" "${P[@]}" --mailbox Imported
check import_mbox bash -c "[ $rc -eq 0 ] && grep -q '^imported 3, skipped 0, failed 0' '$out'"
check import_quiet_not_tty [ ! -s "$err" ]
run "$mv" import "$user" "$tmp/small.mbox" "${P[@]}" --mailbox Imported
check reimport_skipped bash -c "[ $rc -eq 0 ] && grep -q '^imported 0, skipped 3, failed 0' '$out'"
run "$mv" search "$user" "${P[@]}" --mailbox Imported --subject 'mbox one' --json
uid=$(json_eval "d['messages'][0]['uid']")
run "$mv" fetch "$user" "$uid" "${P[@]}" --mailbox Imported
check import_mboxrd_unquoted grep -q $'^From here on, quoted\r$' "$out"
# the mbox's bare LFs are stored as CRLF (RFC 5322 line ends; what IMAP serves)
check import_stored_crlf python3 -c "import sys; d = open(sys.argv[1], 'rb').read(); sys.exit(0 if d.count(b'\n') == d.count(b'\r\n') > 0 else 1)" "$out"
run "$mv" mailbox create "$user" Limited "${P[@]}"
run "$mv" import "$user" "$tmp/small.mbox" "${P[@]}" --mailbox Limited --max-message-size 1000
check import_limit_failed bash -c "[ $rc -eq 65 ] && grep -q '^imported 2, skipped 0, failed 1' '$out'"
mkdir "$tmp/emls"
cp "$tmp/m1.eml" "$tmp/m2.eml" "$tmp/m3.eml" "$tmp/emls/"
run "$mv" mailbox create "$user" Emls "${P[@]}"
run "$mv" import "$user" "$tmp/emls" "${P[@]}" --mailbox Emls
check import_eml_folder bash -c "[ $rc -eq 0 ] && grep -q '^imported 3, skipped 0, failed 0' '$out'"
run "$mv" import "$user" "$tmp/no-such.mbox" "${P[@]}"
check import_missing_path fails_with 66 'no-such.mbox'
run "$mv" import "$user" "$tmp/small.mbox" "${P[@]}" --mailbox Nope
check import_unknown_mailbox [ "$rc" -eq 68 ]

# ---- import: progress on a terminal, interruption and resume ----
awk 'BEGIN { for (i = 0; i < 2000; i++) {
    printf "From s%d@example.com Mon Jan  1 10:00:00 2024\nFrom: S%d <s%d@example.com>\n", i, i, i
    printf "Subject: bulk %d\n\n", i
    for (j = 0; j < 20; j++) printf "line %d of message %d\n", j, i
    printf "\n" } }' >"$tmp/bulk.mbox"
run "$mv" mailbox create "$user" Bulk "${P[@]}"
"$mv" import "$user" "$tmp/bulk.mbox" "${P[@]}" --mailbox Bulk </dev/null >"$out" 2>"$err" &
pid=$!
# SIGTERM once the import has committed something (its handler is installed by then), polled
# with a generous deadline; an import that finished first is fine too (checked below).
bulk_count() {
    "$mv" mailboxes "$user" "${P[@]}" --json 2>/dev/null |
        "$PY" -c 'import json,sys; d=json.load(sys.stdin); print([m["messages"] for m in d["mailboxes"] if m["name"] == "Bulk"][0])' 2>/dev/null
}
for _ in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || break
    [ "$(bulk_count)" -gt 0 ] 2>/dev/null && break
    sleep 0.1
done
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rc=$?
check import_interrupted_or_done bash -c "{ [ $rc -eq 75 ] && grep -q 'interrupted; run the same command again' '$err'; } ||
                                         { [ $rc -eq 0 ] && grep -q '^imported 2000,' '$out'; }"
run "$mv" import "$user" "$tmp/bulk.mbox" "${P[@]}" --mailbox Bulk
resumed() {
    local imported skipped
    imported=$(sed -nE 's/^imported ([0-9]+), skipped ([0-9]+), failed 0 .*/\1/p' "$out")
    skipped=$(sed -nE 's/^imported ([0-9]+), skipped ([0-9]+), failed 0 .*/\2/p' "$out")
    [ "$rc" -eq 0 ] && [ $((${imported:-0} + ${skipped:-0})) -eq 2000 ]
}
check import_resumed_no_loss_no_duplicates resumed
run "$mv" mailboxes "$user" "${P[@]}" --json
check import_resumed_count [ "$(json_eval "[m['messages'] for m in d['mailboxes'] if m['name'] == 'Bulk'][0]")" = 2000 ]
if command -v script >/dev/null 2>&1; then
    run "$mv" mailbox create "$user" Tty "${P[@]}"
    script -qec "'$mv' import '$user' '$tmp/bulk.mbox' --password-file '$pw' --mailbox Tty" /dev/null \
        </dev/null >"$out" 2>"$err"
    rc=$?
    tr '\r' '\n' <"$out" >"$tmp/tty_lines"
    check import_progress_on_tty bash -c "[ $rc -eq 0 ] && grep -q '^importing: [0-9]* messages' '$tmp/tty_lines' &&
                                          grep -q '^imported 2000, skipped 0, failed 0' '$tmp/tty_lines'"
fi

# ---- export -> import round trip ----
fetch_all_sha() { # MAILBOX: sha256 of every message's bytes, sorted
    local mbox=$1 u
    run "$mv" list "$user" "${P[@]}" --mailbox "$mbox" --json
    for u in $(json_eval "' '.join(str(m['uid']) for m in d['messages'])"); do
        "$mv" fetch "$user" "$u" "${P[@]}" --mailbox "$mbox" </dev/null | sha256sum | cut -d' ' -f1
    done | sort
}
run "$mv" export "$user" --mbox "${P[@]}" --mailbox Emls --output "$tmp/emls.mbox"
check export_file bash -c "[ $rc -eq 0 ] && grep -q '^exported 3 messages to' '$out' &&
                           [ \$(stat -c %a '$tmp/emls.mbox') = 600 ] && [ \$(grep -c '^From ' '$tmp/emls.mbox') -eq 3 ]"
run "$mv" export "$user" --mbox "${P[@]}" --mailbox Emls
check export_stdout bash -c "[ $rc -eq 0 ] && cmp -s '$out' '$tmp/emls.mbox'"
run "$mv" mailbox create "$user" Roundtrip "${P[@]}"
run "$mv" import "$user" "$tmp/emls.mbox" "${P[@]}" --mailbox Roundtrip
check roundtrip_import bash -c "[ $rc -eq 0 ] && grep -q '^imported 3, skipped 0, failed 0' '$out'"
check roundtrip_bytes_identical [ "$(fetch_all_sha Emls)" = "$(fetch_all_sha Roundtrip)" ]
run "$mv" export "$user" --mbox "${P[@]}" --mailbox Nope --output "$tmp/nope.mbox"
check export_unknown_mailbox_no_file bash -c "[ $rc -eq 68 ] && ! ls '$tmp'/nope.mbox* 2>/dev/null"

# ---- --output never renames over a symlink, FIFO or device (issue 14) ----
# A symbolic link is followed: the file it names gets the data, the link stays a link
# (relative targets resolve from the link's directory; a dangling link creates its target).
mkdir "$tmp/out" "$tmp/out/sub"
printf 'old\n' >"$tmp/out/real.mbox"
ln -s real.mbox "$tmp/out/link.mbox"
run "$mv" export "$user" --mbox "${P[@]}" --mailbox Emls --output "$tmp/out/link.mbox"
check output_symlink_followed bash -c "[ $rc -eq 0 ] && [ -L '$tmp/out/link.mbox' ] &&
    [ \$(readlink '$tmp/out/link.mbox') = real.mbox ] && cmp -s '$tmp/out/real.mbox' '$tmp/emls.mbox' &&
    ! ls '$tmp/out'/*.mbox.* '$tmp/out'/*.XXXXXX 2>/dev/null"
ln -s ../fetched.eml "$tmp/out/sub/rel.eml"
run "$mv" fetch "$user" 2 "${P[@]}" --output "$tmp/out/sub/rel.eml"
check output_dangling_relative_symlink bash -c "[ $rc -eq 0 ] && [ -L '$tmp/out/sub/rel.eml' ] &&
    cmp -s '$tmp/out/fetched.eml' '$tmp/m2.crlf' && [ \$(stat -c %a '$tmp/out/fetched.eml') = 600 ]"
ln -s loop-b "$tmp/out/loop-a"
ln -s loop-a "$tmp/out/loop-b"
run "$mv" fetch "$user" 2 "${P[@]}" --output "$tmp/out/loop-a"
check output_symlink_loop_refused bash -c "[ $rc -eq 73 ] && grep -q 'loop-a: Too many levels of symbolic links' '$err' &&
    [ -L '$tmp/out/loop-a' ] && [ -L '$tmp/out/loop-b' ]"
# A FIFO is written in place: the reader gets the bytes and the FIFO is still a FIFO.
mkfifo "$tmp/out/pipe"
timeout 60 cat "$tmp/out/pipe" >"$tmp/out/from-pipe" &
reader=$!
run "$mv" export "$user" --mbox "${P[@]}" --mailbox Emls --output "$tmp/out/pipe"
wait "$reader"
check output_fifo_in_place bash -c "[ $rc -eq 0 ] && [ -p '$tmp/out/pipe' ] &&
    cmp -s '$tmp/out/from-pipe' '$tmp/emls.mbox' && ! ls '$tmp/out'/pipe.* 2>/dev/null"
# A device, reached through a link so that even the old code (which renamed over PATH) could
# only ever replace the link, never the real /dev/null; /dev/null's type is checked before
# and after.
null_type=$(stat -c %F /dev/null)
ln -s /dev/null "$tmp/out/null-link"
run "$mv" fetch "$user" 2 "${P[@]}" --output "$tmp/out/null-link"
check output_device_in_place bash -c "[ $rc -eq 0 ] && [ -L '$tmp/out/null-link' ] &&
    [ '$null_type' = 'character special file' ] && [ \"\$(stat -c %F /dev/null)\" = '$null_type' ]"
if [ "$(id -u)" -ne 0 ]; then
    # Unprivileged, the old code could not create /dev/null.XXXXXX: safe to name it directly.
    run "$mv" export "$user" --mbox "${P[@]}" --mailbox Emls --output /dev/null
    check output_dev_null_direct bash -c "[ $rc -eq 0 ] && [ \"\$(stat -c %F /dev/null)\" = '$null_type' ]"
fi
run "$mv" fetch "$user" 2 "${P[@]}" --output "$tmp/out/sub"
check output_directory_refused bash -c "[ $rc -eq 73 ] && grep -q 'is a directory' '$err' &&
    [ \$(ls '$tmp/out/sub' | wc -l) -eq 1 ]"

# ---- JSON escaping of hostile headers ----
run "$mv" search "$user" "${P[@]}" --mailbox Emls --from eve --json
check json_hostile_valid json_ok
check json_hostile_no_raw_controls no_raw_controls
check json_hostile_one_result [ "$(json_eval "len(d['messages'])")" = 1 ]

# ---- a queue file that is not ours goes to rejected/; modes stay 0700/0600 throughout ----
head -c 300 /dev/urandom >"$root/example.org/alice.queue/00000000000000000001-0123456789abcdef0123456789abcdef.sealed"
chmod 600 "$root/example.org/alice.queue/"*.sealed
run "$mv" info "$user" "${P[@]}"
check queue_garbage_rejected bash -c "[ $rc -eq 0 ] && grep -q 'rejected' '$err' &&
                                       [ \$(stat -c %a '$root/example.org/alice.queue/rejected') = 700 ]"
check store_modes_at_end bash -c "! find '$root' \( -type d ! -perm 700 \) -o \( -type f ! -perm 600 \) | grep -q ."

finish
