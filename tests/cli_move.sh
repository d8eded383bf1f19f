#!/usr/bin/env bash
# cli_move.sh -- moving a user between nodes with the tool (build/asan/mailvault): release
# fences the store (no delivery, sealed or not, and no writable open afterwards, also in a
# new process), store export writes one archive without the password, store import on
# another root places it (refusing to overwrite, a damaged archive, an archive of another
# user) and serves it; adopt undoes a release. Every message delivered before the release
# arrives exactly once (counted by Message-ID), none after it is acknowledged.
#
# USAGE
#   make build/asan/mailvault && bash tests/cli_move.sh
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

mv="$PWD/build/asan/mailvault"
make_tmp cli_move
store_root 2
old_root="$root"
new_root="$tmp/newroot"
export MAILVAULT_ROOT="$old_root"

pw="$tmp/pw"
printf 'move me\n' >"$pw"
P=(--password-file "$pw")
user=alice@example.org

msg() { printf 'From: a@example.net\r\nTo: %s\r\nMessage-ID: <%s@test>\r\nSubject: %s\r\n\r\nbody %s\r\n' "$user" "$1" "$1" "$1"; }
# not_ok: the last run failed (any non-zero exit) with TEXT in stderr.
not_ok() { [ "$rc" -ne 0 ] && grep -q -- "$1" "$err"; }
# ids ROOT: the sorted Message-IDs of the INBOX under ROOT.
ids() { MAILVAULT_ROOT="$1" "$mv" search "$user" --text body --json --limit 1000 "${P[@]}" |
        "$PY" -c 'import json,sys; d=json.load(sys.stdin); m=d["messages"] if isinstance(d,dict) else d
print("\n".join(sorted(x.get("message_id","") for x in m)))'; }

run "$mv" init "$user" "${P[@]}"
check init ok
for i in 1 2 3; do
    msg "keyed$i" >"$tmp/m.eml"
    run "$mv" deliver "$user" "${P[@]}" "$tmp/m.eml"
    check "deliver_keyed_$i" ok
done
for i in 1 2; do
    msg "sealed$i" >"$tmp/m.eml"
    run "$mv" deliver "$user" --sealed "$tmp/m.eml"
    check "deliver_sealed_$i" ok
done

# ---- release: the store is fenced, in this process and the next ----
run "$mv" release "$user" --note "moving to node2"
check release ok
check release_marker_written grep -q 'moving to node2' "$old_root/example.org/alice.released"
run "$mv" release "$user"
check release_twice_is_fine ok
msg "late1" >"$tmp/m.eml"
run "$mv" deliver "$user" "${P[@]}" "$tmp/m.eml"
check deliver_after_release_refused not_ok 'released from this node'
run "$mv" deliver "$user" --sealed "$tmp/m.eml"
check sealed_after_release_refused not_ok 'released from this node'
run "$mv" flags "$user" 1 --add '\Seen' "${P[@]}"
check write_after_release_refused not_ok 'released from this node'
run "$mv" list "$user" "${P[@]}"
check commands_after_release_refused not_ok 'mailvault adopt'

# ---- export ----
archive="$tmp/alice.mvstore"
run "$mv" store export "$user" "$archive"
check export ok
check export_says_what grep -q '2 queued deliveries' "$out"
check export_no_warning_when_released bash -c "! grep -q 'not released' '$err'"
run "$mv" store export "$user" "$archive"
check export_never_overwrites not_ok 'already exists'
check archive_is_tar bash -c "tar -tf '$archive' | grep -qx MANIFEST && tar -tf '$archive' | grep -qx store.db"
check archive_has_no_plaintext bash -c "! grep -q 'body keyed1' '$archive'"

# ---- import refusals: nothing is left behind ----
cp "$archive" "$tmp/damaged.mvstore"
# Flip one bit inside store.db's data (the first entry's data starts after its 512-byte
# tar header; its pax header, if any, comes first, so look the offset up).
off=$("$PY" - "$tmp/damaged.mvstore" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    print(t.getmember("store.db").offset_data + 1000)
EOF
)
"$PY" -c "import sys; p,o=sys.argv[1],int(sys.argv[2]); b=bytearray(open(p,'rb').read()); b[o]^=0x10; open(p,'wb').write(b)" "$tmp/damaged.mvstore" "$off"
run env MAILVAULT_ROOT="$new_root" "$mv" store import "$user" "$tmp/damaged.mvstore"
check import_damaged_refused not_ok 'differs from the manifest'
check import_damaged_leaves_nothing bash -c "[ -z \"\$(ls -A '$new_root/example.org' 2>/dev/null)\" ]"
run env MAILVAULT_ROOT="$new_root" "$mv" store import bob@example.org "$archive"
check import_other_user_refused not_ok 'not of bob@example.org'
printf 'not a tar file at all\n' >"$tmp/junk.mvstore"
run env MAILVAULT_ROOT="$new_root" "$mv" store import "$user" "$tmp/junk.mvstore"
check import_junk_refused not_ok 'not a store archive'
check import_junk_leaves_nothing bash -c "[ -z \"\$(ls -A '$new_root/example.org' 2>/dev/null)\" ]"

# ---- streaming: `store export USER - | store import USER -`, one pass, no archive file ----
stream_root="$tmp/streamroot"
stream_left() { [ -z "$(ls -A "$stream_root/example.org" 2>/dev/null)" ]; }
# A stream cut short anywhere leaves nothing: midway through the database, and exactly where
# the manifest would begin (a clean tar boundary: everything but the manifest arrived).
cuts=$("$PY" - "$archive" <<'EOF2'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    db = t.getmember("store.db")
    print(db.offset_data + db.size // 2, t.getmember("MANIFEST").offset)
EOF2
)
set -- $cuts
for where in mid_db:"$1" before_manifest:"$2"; do
    run bash -c "head -c ${where#*:} '$archive' | MAILVAULT_ROOT='$stream_root' '$mv' store import '$user' -"
    check "import_stream_cut_${where%%:*}_refused" not_ok 'not a store archive'
    check "import_stream_cut_${where%%:*}_leaves_nothing" stream_left
done
run bash -c "set -o pipefail; '$mv' store export '$user' - | MAILVAULT_ROOT='$stream_root' '$mv' store import bob@example.org -"
check import_stream_other_user_refused not_ok 'not of bob@example.org'
check import_stream_other_user_leaves_nothing stream_left
run script -qec "'$mv' store export '$user' -" /dev/null
check export_stream_refuses_terminal bash -c "[ $rc -ne 0 ] && grep -q 'terminal' '$out'"
run script -qec "MAILVAULT_ROOT='$stream_root' '$mv' store import '$user' -" /dev/null
check import_stream_refuses_terminal bash -c "[ $rc -ne 0 ] && grep -q 'terminal' '$out'"
check import_stream_terminal_leaves_nothing stream_left
run bash -c "set -o pipefail; '$mv' store export '$user' - | MAILVAULT_ROOT='$stream_root' '$mv' store import '$user' -"
check move_stream ok
check move_stream_summary_on_stdout grep -q "imported $user from stdin: " "$out"
check move_stream_export_summary_on_stderr grep -q "exported $user to stdout" "$err"
ids "$stream_root" >"$tmp/got" 2>"$err"
printf 'keyed1\nkeyed2\nkeyed3\nsealed1\nsealed2\n' | sed 's/.*/&@test/' >"$tmp/want"
check move_stream_all_mail_exactly_once diff -u "$tmp/want" "$tmp/got"
run bash -c "'$mv' store export '$user' - | MAILVAULT_ROOT='$stream_root' '$mv' store import '$user' -"
check import_stream_never_overwrites not_ok 'already exists'
# docs/SCALEOUT.md, "When a step fails": the target's copy moved aside (its .lock stays),
# the step runs again and places the store once more.
mkdir "$tmp/aside"
for f in "$stream_root/example.org/alice".*; do
    case $f in *.lock) ;; *) command mv "$f" "$tmp/aside/" ;; esac
done
run bash -c "set -o pipefail; '$mv' store export '$user' - | MAILVAULT_ROOT='$stream_root' '$mv' store import '$user' -"
check import_stream_again_after_moving_aside ok
ids "$stream_root" >"$tmp/got" 2>"$err"
check import_stream_again_all_mail_exactly_once diff -u "$tmp/want" "$tmp/got"
# A killed import's staging directory: doctor WARNs about it once nothing wrote to it for an
# hour (younger: an import may be running), and a FAIL it is not.
mkdir "$stream_root/example.org/.import-OLDabc" "$stream_root/example.org/.import-NEWabc"
printf 'ciphertext' >"$stream_root/example.org/.import-OLDabc/store.db"
printf 'ciphertext' >"$stream_root/example.org/.import-NEWabc/store.db"
touch -d '2 hours ago' "$stream_root/example.org/.import-OLDabc/store.db" \
    "$stream_root/example.org/.import-OLDabc"
run "$mv" doctor --root "$stream_root"
check doctor_staging_not_a_failure ok
check doctor_warns_about_a_killed_imports_staging_dir \
    grep -q "^WARN staging: $stream_root/example.org/.import-OLDabc: left by a .store import. that did not finish (killed?), untouched for 1[0-9][0-9] min" "$out"
check doctor_leaves_a_running_imports_staging_dir_alone bash -c "! grep -q 'import-NEWabc' '$out'"
# doctor --fix removes a stale one, and never a live import's however old it looks: the import
# holds an flock on its staging directory (here one blocked on its input), which its death
# releases.
mkfifo "$tmp/live.fifo"
MAILVAULT_ROOT="$stream_root" "$mv" store import zed@example.org - <"$tmp/live.fifo" >/dev/null 2>&1 &
live_pid=$!
exec 7>"$tmp/live.fifo"
live=""
for _ in $(seq 600); do
    live=$(find "$stream_root/example.org" -maxdepth 1 -name '.import-*' ! -name '.import-OLDabc' \
           ! -name '.import-NEWabc' | head -n 1)
    [ -n "$live" ] && break
    sleep 0.1
done
check live_import_has_a_staging_dir [ -n "$live" ]
touch -d '2 hours ago' "$live"
run "$mv" doctor --root "$stream_root" --fix
check doctor_fix_removes_a_killed_imports_staging_dir bash -c "[ $rc -eq 0 ] &&
    grep -q '^OK   staging: $stream_root/example.org/.import-OLDabc: removed' '$out' &&
    [ ! -e '$stream_root/example.org/.import-OLDabc' ]"
check doctor_fix_leaves_a_young_one [ -d "$stream_root/example.org/.import-NEWabc" ]
check doctor_fix_leaves_a_live_imports_staging_dir bash -c "[ -d '$live' ] && ! grep -q '$live' '$out'"
kill -9 "$live_pid" 2>/dev/null
wait "$live_pid" 2>/dev/null
exec 7>&-
touch -d '2 hours ago' "$live"
run "$mv" doctor --root "$stream_root"
check doctor_warns_once_the_import_is_dead grep -q "^WARN staging: $live: .*mailvault doctor --fix" "$out"
run "$mv" doctor --root "$stream_root" --fix
check doctor_fix_removes_it_once_the_import_is_dead bash -c "[ $rc -eq 0 ] && [ ! -e '$live' ]"
rm -rf "$stream_root/example.org/.import-NEWabc" "$tmp/live.fifo"

# ---- import, then the store is served on the new root ----
run env MAILVAULT_ROOT="$new_root" "$mv" store import "$user" "$archive"
check import ok
run env MAILVAULT_ROOT="$new_root" "$mv" store import "$user" "$archive"
check import_never_overwrites not_ok 'already exists'
check imported_not_fenced [ ! -e "$new_root/example.org/alice.released" ]
check imported_has_its_tmp_dir [ -d "$new_root/example.org/tmp" ]
run "$mv" doctor --root "$new_root"
check imported_store_passes_doctor ok
printf 'keyed1\nkeyed2\nkeyed3\nsealed1\nsealed2\n' | sed 's/.*/&@test/' >"$tmp/want"
ids "$new_root" >"$tmp/got" 2>"$err"
check all_mail_moved_exactly_once diff -u "$tmp/want" "$tmp/got"
msg "after1" >"$tmp/m.eml"
run env MAILVAULT_ROOT="$new_root" "$mv" deliver "$user" "${P[@]}" "$tmp/m.eml"
check deliver_on_new_node ok
run env MAILVAULT_ROOT="$new_root" "$mv" check "$user" "${P[@]}"
check new_node_store_checks ok

# ---- adopt undoes a release; export of an unreleased store warns ----
run "$mv" adopt "$user"
check adopt ok
msg "back1" >"$tmp/m.eml"
run "$mv" deliver "$user" "${P[@]}" "$tmp/m.eml"
check deliver_after_adopt ok
run "$mv" store export "$user" "$tmp/unreleased.mvstore"
check export_unreleased_warns bash -c "[ $rc -eq 0 ] && grep -q 'was not released' '$err'"

# ---- usage ----
run "$mv" store
check store_usage [ "$rc" -ne 0 ]
run "$mv" release "$user" --wait-seconds 99999
check release_wait_limit not_ok 'wait-seconds'
run "$mv" release nosuch@example.org
check release_no_store not_ok 'no store'
finish
