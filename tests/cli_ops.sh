#!/usr/bin/env bash
# cli_ops.sh -- shell tests of the operations commands of the mailvault tool (the ASan
# build): stats (USER, --all, --json, --prometheus), maintain, check, doctor, explain.
#
# USAGE
#   make build/asan/mailvault && bash tests/cli_ops.sh
#   (tests/run.sh runs it as part of `make test`.)
#
# Everything happens under a temporary root; MAILVAULT_KDF_ITER=2 keeps key derivation
# cheap. `stats --json` is compared with PRAGMA reads through `mailvault sql`; the
# Prometheus output is parsed by a strict line grammar (and by prometheus_client when
# python3-prometheus-client is installed). Stores are broken deliberately, through raw SQL
# or by changing files and modes, and each breakage must be reported. Each check prints
# "PASS name" or "FAIL name"; the last line is "# N passed, N failed".
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh # run, check, ok, fails_with, json_eval, finish

mv="$PWD/build/asan/mailvault"
make_tmp cli_ops # the tests chmod inside $tmp; its cleanup makes it writable first
store_root 2

pw="$tmp/pw"
printf 'ops password\n' >"$pw"
P=(--password-file "$pw")
user=alice@example.org
db="$root/example.org/alice.db"
# sql_int SQL: one integer through `mailvault sql` on alice's store.
sql_int() { "$mv" sql --kdf-iter 2 "${P[@]}" "$db" "$1" </dev/null 2>/dev/null; }

# An mbox of N small messages, each its own body.
make_mbox() {
    local n=$1 i
    for i in $(seq 1 "$n"); do
        printf 'From sender@example.net Mon Jan  1 00:00:00 2024\nFrom: Sender %d <s%d@example.net>\nSubject: Message %d\nMessage-ID: <m%d@example.net>\n\nBody of message %d: alpha beta gamma %d.\n\n' \
            "$i" "$i" "$i" "$i" "$i" "$((i * 7919))"
    done
}
make_mbox 20 >"$tmp/small.mbox"
make_mbox 600 >"$tmp/big.mbox"

# ---- usage ----
run "$mv" stats
check stats_needs_user_or_all fails_with 64 'USER (or --all)'
run "$mv" stats "$user" --all
check stats_user_and_all fails_with 64 'not both'
run "$mv" stats --all --json --prometheus
check stats_json_prometheus fails_with 64 'exclude each other'
run "$mv" stats --all --with-user-labels
check stats_labels_need_prometheus fails_with 64 'goes with --prometheus'
run "$mv" maintain --all --no-vacuum
check maintain_all_no_keyed_options fails_with 64 'needs USER'
run "$mv" maintain "$user" --vacuum-slack-percent 101
check maintain_bad_percent [ "$rc" -eq 64 ]
run "$mv" doctor extra
check doctor_no_arguments [ "$rc" -eq 64 ]
run "$mv" help
check help_lists_ops bash -c "grep -q '^  stats ' '$out' && grep -q '^  maintain ' '$out' &&
                              grep -q '^  check ' '$out' && grep -q '^  doctor ' '$out' &&
                              grep -q '^  explain ' '$out'"

# ---- stores ----
for u in "$user" bob@example.org carol@other.example; do
    "$mv" init "$u" "${P[@]}" </dev/null >/dev/null 2>&1
done
run "$mv" import "$user" "$tmp/small.mbox" "${P[@]}"
check import_small ok

# ---- stats USER ----
run "$mv" stats "$user" "${P[@]}"
check stats_human bash -c "[ $rc -eq 0 ] && grep -q '^cipher  *chacha20 (KDF 2 iterations)' '$out' &&
                           grep -q '^messages  *20 in 6 mailboxes' '$out' && grep -q 'INBOX' '$out'"
run "$mv" stats "$user" "${P[@]}" --json
check stats_json_valid bash -c "[ $rc -eq 0 ] && python3 -m json.tool '$out' >/dev/null"
check stats_json_page_count [ "$(json_eval "d['page_count']")" = "$(sql_int 'PRAGMA page_count')" ]
check stats_json_page_size [ "$(json_eval "d['page_size_bytes']")" = "$(sql_int 'PRAGMA page_size')" ]
check stats_json_freelist [ "$(json_eval "d['freelist_count']")" = "$(sql_int 'PRAGMA freelist_count')" ]
check stats_json_messages [ "$(json_eval "d['messages']")" = "$(sql_int 'SELECT count(*) FROM messages')" ]
check stats_json_logical [ "$(json_eval "d['logical_bytes']")" = "$(sql_int 'SELECT sum(size) FROM messages')" ]
check stats_json_schema [ "$(json_eval "d['schema_version']")" = "$(sql_int 'PRAGMA user_version')" ]
check stats_json_file_bytes [ "$(json_eval "d['file_bytes']")" = "$(stat -c %s "$db")" ]
check stats_json_fragmentation [ "$(json_eval "d['fragmentation_ppm']")" = 0 ]
check stats_json_cipher [ "$(json_eval "d['cipher'] + ' ' + str(d['kdf_iterations'])")" = "chacha20 2" ]
check stats_json_checkpoint [ "$(json_eval "d['checkpoint_busy']")" = False ]
check stats_json_version [ "$(json_eval "d['format_version']")" = 2 ]
check stats_json_never_maintained [ "$(json_eval "(d['last_maintain_at'], d['last_quick_check_at'], d['last_quick_check_ok'])")" = "(None, None, None)" ]
check stats_json_inbox [ "$(json_eval "[m['messages'] for m in d['mailboxes_detail'] if m['name'] == 'INBOX'][0]")" = 20 ]

# ---- Prometheus: a strict grammar of the text format, then the official parser ----
cat >"$tmp/prom_check.py" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
labels_wanted = sys.argv[2] == "labels"
name = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
label = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:\\\\|\\"|\\n|[^"\\\n])*"'
sample = re.compile(r"^(" + name + r")(\{" + label + r"(?:," + label + r")*\})? (-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)$")
help_re = re.compile(r"^# HELP (" + name + r") \S.*$")
type_re = re.compile(r"^# TYPE (" + name + r") (gauge|counter|untyped)$")
assert text.endswith("\n"), "no final newline"
seen, current, helped, typed = set(), None, set(), set()
samples = 0
for n, line in enumerate(text.split("\n")[:-1], 1):
    m = help_re.match(line)
    if m:
        f = m.group(1)
        assert f not in helped and f not in seen, "HELP twice or late: %d" % n
        helped.add(f); current = f; continue
    m = type_re.match(line)
    if m:
        f = m.group(1)
        assert f == current and f not in typed, "TYPE without its HELP: %d" % n
        typed.add(f); continue
    m = sample.match(line)
    assert m, "not a sample line %d: %r" % (n, line)
    f = m.group(1)
    assert f == current and f in typed, "sample outside its family: %d" % n
    assert f.startswith("mailvault_"), "prefix: %d" % n
    assert ("user=" in (m.group(2) or "")) == labels_wanted or not f.startswith(("mailvault_store_", "mailvault_mailbox_")) or f == "mailvault_store_largest_bytes", "user label: %d %r" % (n, line)
    seen.add(f); samples += 1
assert samples > 10, "too few samples"
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("grammar ok (prometheus_client not installed)"); sys.exit(0)
families = list(text_string_to_metric_families(text))
assert len(families) == len(helped), "parser disagrees"
print("grammar ok, prometheus_client parsed %d families" % len(families))
PY
# prom_ok FILE labels|nolabels: the grammar, with the Debian python if it has the parser.
prom_ok() {
    local py=python3
    if /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then py=/usr/bin/python3; fi
    "$py" "$tmp/prom_check.py" "$1" "$2" >"$tmp/prom.log" 2>&1 || { cat "$tmp/prom.log"; return 1; }
}
run "$mv" stats "$user" "${P[@]}" --prometheus
cp "$out" "$tmp/one.prom"
check prometheus_user_grammar prom_ok "$tmp/one.prom" nolabels
check prometheus_user_no_address bash -c "[ $rc -eq 0 ] && ! grep -q alice '$out' &&
                                          grep -q '^mailvault_store_messages 20$' '$out'"
run "$mv" stats "$user" "${P[@]}" --prometheus --with-user-labels
cp "$out" "$tmp/labels.prom"
check prometheus_labels_grammar prom_ok "$tmp/labels.prom" labels
check prometheus_labels_user bash -c "grep -q '^mailvault_store_messages{user=\"alice@example.org\"} 20$' '$out' &&
    grep -q '^mailvault_mailbox_messages{user=\"alice@example.org\",mailbox=\"INBOX\"} 20$' '$out'"
run "$mv" stats --all --prometheus
cp "$out" "$tmp/all.prom"
check prometheus_all_grammar prom_ok "$tmp/all.prom" nolabels
check prometheus_all_counts bash -c "grep -q '^mailvault_stores{cipher=\"chacha20\"} 3$' '$out' &&
                                     grep -q '^mailvault_stores_inspected 0$' '$out' &&
                                     ! grep -q '@' '$out'"

# ---- stats --all: no password, keyless fields, fast ----
run "$mv" stats --all
check stats_all_human bash -c "[ $rc -eq 0 ] && [ \$(grep -c 'chacha20' '$out') = 3 ] &&
                               grep -q 'need each user.s password' '$out'"
run "$mv" stats --all --json
check stats_all_json bash -c "[ \"\$(python3 -c \"import json; d=json.load(open('$out')); print(d['count'], [s['address'] for s in d['stores']])\")\" = \"3 ['alice@example.org', 'bob@example.org', 'carol@other.example']\" ]"
check stats_all_json_size [ "$(json_eval "d['stores'][0]['file_bytes']")" = "$(stat -c %s "$db")" ]
check stats_all_json_pages [ "$(json_eval "d['stores'][0]['page_count'] * d['stores'][0]['page_size_bytes']")" = "$(stat -c %s "$db")" ]
# 1000 stores (copies of one, which the keyless path cannot tell apart).
many="$tmp/many"
mkdir -m 700 "$many"
for d in 1 2 3 4; do
    mkdir -m 700 "$many/d$d.example" "$many/d$d.example/tmp"
    for i in $(seq 1 250); do
        cp "$root/example.org/bob.db" "$many/d$d.example/u$i.db"
    done
done
chmod 600 "$many"/*/*.db
start=$(date +%s%N)
run "$mv" stats --all --root "$many" --json
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "    stats --all over 1000 stores: ${elapsed_ms} ms (ASan build)"
check stats_all_1000 bash -c "[ $rc -eq 0 ] && [ \"\$(python3 -c \"import json; print(json.load(open('$out'))['count'])\")\" = 1000 ]"
# A bound for gross mistakes only (work quadratic in the stores, a full open per store): speed
# is measured by `make bench`; a tight bound fails by chance under ASan on a loaded machine.
check stats_all_1000_fast [ "$elapsed_ms" -lt 30000 ]

# ---- maintain ----
run "$mv" maintain "$user" "${P[@]}"
check maintain_small_not_needed bash -c "[ $rc -eq 0 ] && grep -q '^VACUUM: not needed' '$out' &&
                                        grep -q '^quick_check: ok' '$out' &&
                                        grep -q '^checkpoint (PASSIVE): busy 0' '$out'"
run "$mv" maintain "$user" "${P[@]}"
check maintain_quick_check_not_due bash -c "[ $rc -eq 0 ] && grep -q '^quick_check: not due' '$out'"
run "$mv" maintain "$user" "${P[@]}" --quick-check
check maintain_quick_check_forced bash -c "[ $rc -eq 0 ] && grep -q '^quick_check: ok' '$out'"
check maintain_change_log_line grep -q '^change log: [0-9]* rows pruned (expunges older than 90 days)$' "$out"
check maintain_attachments_line grep -q '^attachments: 0 counted (stored before schema version 15' "$out"
check maintain_quiet_stderr [ ! -s "$err" ]
run "$mv" maintain "$user" "${P[@]}" --changes-keep-days 0
check maintain_change_log_kept bash -c "[ $rc -eq 0 ] && grep -q '^change log: kept whole' '$out'"
run "$mv" maintain "$user" "${P[@]}" --changes-keep-days 36501
check maintain_changes_keep_days_limit fails_with 64 'changes-keep-days'
# A fragmented store: 600 messages, every other one expunged (auto_vacuum leaves no free
# pages, but half-empty ones: slack).
frag=frag@example.org
fragdb="$root/example.org/frag.db"
"$mv" init "$frag" "${P[@]}" </dev/null >/dev/null 2>&1
run "$mv" import "$frag" "$tmp/big.mbox" "${P[@]}"
odd=$(seq -s, 1 2 600)
run "$mv" flags "$frag" "$odd" --add '\Deleted' "${P[@]}"
run "$mv" expunge "$frag" "${P[@]}"
check frag_expunged [ "$rc" -eq 0 ]
run env MAILVAULT_TEST_FREE_BYTES=4096 "$mv" maintain "$frag" "${P[@]}"
check maintain_refused_low_disk bash -c "[ $rc -eq 75 ] && grep -q '^VACUUM: REFUSED' '$out' &&
                                         grep -q 'VACUUM refused' '$err'"
before=$(( $(stat -c %s "$fragdb") + $(stat -c %s "$fragdb-wal" 2>/dev/null || echo 0) ))
run "$mv" maintain "$frag" "${P[@]}"
after=$(( $(stat -c %s "$fragdb") + $(stat -c %s "$fragdb-wal" 2>/dev/null || echo 0) ))
echo "    fragmented store: $before -> $after bytes"
check maintain_vacuumed bash -c "[ $rc -eq 0 ] && grep -q '^VACUUM: done' '$out'"
check maintain_shrank [ "$after" -lt "$before" ]
run "$mv" maintain "$frag" "${P[@]}"
check maintain_then_not_needed bash -c "[ $rc -eq 0 ] && grep -q '^VACUUM: not needed' '$out'"
run "$mv" stats "$frag" "${P[@]}" --json
check maintain_kept_messages [ "$(json_eval "d['messages']")" = 300 ]
check maintain_recorded bash -c "[ \"\$(python3 -c \"import json; d=json.load(open('$out')); print(d['last_maintain_at'][10] == 'T' and d['last_maintain_at'].endswith('Z'), d['last_quick_check_ok'])\")\" = 'True True' ]"
run "$mv" maintain --all
check maintain_all_keyless bash -c "[ $rc -eq 0 ] && [ \$(grep -c 'needs the password' '$out') = 4 ] &&
                                    grep -q '^4 stores, 0 with a problem' '$out'"
chmod 644 "$root/example.org/bob.db"
run "$mv" maintain --all
check maintain_all_bad_mode bash -c "[ $rc -eq 1 ] && grep -q 'bob.db is mode 0644' '$out'"
chmod 600 "$root/example.org/bob.db"

# ---- check ----
run "$mv" check "$user" "${P[@]}"
check check_clean bash -c "[ $rc -eq 0 ] && grep -q '; 0 problems$' '$out'"
# break_and_check NAME SQL WHAT [REPAIR]: a copy of alice's store broken with SQL must show
# WHAT; then `repair` must fix it (REPAIR=fixed: the check afterwards is clean, exit 0) or
# say it is left (REPAIR=left: exit 1, the problem still named).
n=0
break_and_check() {
    n=$((n + 1))
    local u="broken$n@example.org" d="$root/example.org/broken$n.db"
    cp "$db" "$d" && chmod 600 "$d"
    "$mv" sql --kdf-iter 2 "${P[@]}" "$d" "$2" </dev/null >/dev/null 2>"$err"
    run "$mv" check "$u" "${P[@]}"
    check "check_finds_$1" bash -c "[ $rc -eq 65 ] && grep -q '^$3: ' '$out'"
    if [ "${4:-}" = fixed ]; then
        run "$mv" repair "$u" "${P[@]}"
        check "repair_fixes_$1" bash -c "[ $rc -eq 0 ] && grep -q '^repaired: full-text index rebuilt' '$out' &&
                                        grep -q '^check afterwards: 0 problems$' '$out'"
        run "$mv" check "$u" "${P[@]}"
        check "check_clean_after_repair_$1" bash -c "[ $rc -eq 0 ] && grep -q '; 0 problems$' '$out'"
    elif [ "${4:-}" = left ]; then
        run "$mv" repair "$u" "${P[@]}"
        check "repair_reports_left_$1" bash -c "[ $rc -eq 65 ] && grep -q '^$3: ' '$out' &&
                                               grep -q '^check afterwards: [1-9][0-9]* problems* left' '$out'"
    fi
    rm -f "$d" "$d-wal" "$d-shm"
}
break_and_check body_refcount "UPDATE body_refs SET refcount = refcount + 1 WHERE id = 1" refcount fixed
break_and_check uidnext "UPDATE mailboxes SET uidnext = 2 WHERE name = 'INBOX'" uidnext fixed
break_and_check modseq "UPDATE mailboxes SET highestmodseq = 1 WHERE name = 'INBOX'" modseq fixed
break_and_check counters "UPDATE mailboxes SET message_count = message_count + 5, size_sum = 1 WHERE name = 'INBOX'" counters fixed
break_and_check fts_missing "DELETE FROM fts WHERE rowid = 3" fts fixed
# schema 7's header fields row of a body: made again from the body's bytes.
break_and_check body_headers "DELETE FROM body_headers WHERE body_id = 2" headers fixed
# a body no message uses, left at refcount 1: repair sets 0 (the purge's), not left as it was.
break_and_check body_unused "DELETE FROM messages WHERE uid = 1" refcount fixed
# what repair cannot make again: a body's bytes.
break_and_check body_bytes "DELETE FROM bodies_data WHERE id = 2" bytes left
break_and_check fts_extra "INSERT INTO fts(rowid, header, body) VALUES (777, 'a', 'b')" fts fixed
# FTS5's totals record (the structure issue 15 item 4 found wrong after I/O errors): the
# index no longer matches its content until repair rebuilds it.
break_and_check fts_totals "UPDATE fts_data SET block = X'7F' || substr(block, 2) WHERE id = 1" fts fixed
break_and_check mailbox_id "UPDATE messages SET mailbox_id = 4242 WHERE uid = 2" mailbox
# A flipped bit in a page no open reads (the messages' bytes): found by the page pass.
tdb="$root/example.org/tampered.db"
cp "$db" "$tdb" && chmod 600 "$tdb"
page=$("$mv" sql --kdf-iter 2 "${P[@]}" "$tdb" \
       "SELECT pageno FROM dbstat WHERE name = 'bodies_data' AND pagetype = 'leaf' LIMIT 1" </dev/null)
flip_bit "$tdb" $(( (page - 1) * 4096 + 2000 )) 2
run "$mv" check tampered@example.org "${P[@]}" --json
check check_finds_tampered_page bash -c "[ $rc -eq 65 ] && python3 -c \"import json,sys; d=json.load(open('$out')); sys.exit(0 if any(p['check'] == 'page' and 'page $page' in p['problem'] for p in d['problems']) else 1)\""
rm -f "$root/example.org/tampered.db"*

# ---- doctor ----
run "$mv" doctor
check doctor_healthy bash -c "[ $rc -eq 0 ] && grep -q '^OK   ciphers:' '$out' &&
                              grep -q ', 0 failures' '$out'"
run env MAILVAULT_TEST_FREE_BYTES=1000 "$mv" doctor
check doctor_fail_disk bash -c "[ $rc -eq 1 ] && grep -q '^FAIL disk:' '$out'"
chmod 644 "$db"
run "$mv" doctor
check doctor_fail_permissions bash -c "[ $rc -eq 1 ] && grep -q '^FAIL permissions: .*alice.db is mode 0644' '$out'"
chmod 600 "$db"
printf 'not a real wal, but large' >"$root/example.org/bob.db-wal"
chmod 600 "$root/example.org/bob.db-wal"
run "$mv" doctor --wal-limit 10
check doctor_fail_wal bash -c "[ $rc -eq 1 ] && grep -q '^FAIL wal: .*bob.db-wal' '$out'"
rm -f "$root/example.org/bob.db-wal"
mv "$root/other.example/tmp" "$tmp/tmp.away"
run "$mv" doctor
check doctor_fail_temp_missing bash -c "[ $rc -eq 1 ] && grep -q '^FAIL temp: .*other.example/tmp is missing' '$out'"
mv "$tmp/tmp.away" "$root/other.example/tmp"
shm_dir=$(mktemp -d /dev/shm/mvops.XXXXXX 2>/dev/null || true)
if [ -n "$shm_dir" ] && [ "$(stat -c %d /dev/shm)" != "$(stat -c %d "$root")" ]; then
    mv "$root/other.example/tmp" "$tmp/tmp.away"
    ln -s "$shm_dir" "$root/other.example/tmp"
    run "$mv" doctor
    check doctor_fail_temp_other_filesystem bash -c "[ $rc -eq 1 ] && grep -q '^FAIL temp: .*another filesystem' '$out'"
    rm "$root/other.example/tmp"
    mv "$tmp/tmp.away" "$root/other.example/tmp"
else
    echo "    (skipped: /dev/shm is not another filesystem here)"
fi
[ -n "$shm_dir" ] && rm -rf "$shm_dir"
"$mv" sql --create --kdf-iter 2 "${P[@]}" --cipher chacha20 "$tmp/x.db" "SELECT 1" </dev/null >/dev/null 2>&1
python3 -c "import sqlite3; c = sqlite3.connect('$root/example.org/plain.db'); c.execute('CREATE TABLE t(x)'); c.commit()"
chmod 600 "$root/example.org/plain.db"
run "$mv" doctor
check doctor_fail_plaintext_store bash -c "[ $rc -eq 1 ] && grep -q '^FAIL store: .*plain.db: a plaintext SQLite file' '$out'"
rm -f "$root/example.org/plain.db"
run bash -c "ulimit -n 60 && exec '$mv' doctor"
check doctor_fail_open_files bash -c "[ $rc -eq 1 ] && grep -q '^FAIL open files:' '$out'"
run "$mv" doctor --json
check doctor_json bash -c "[ $rc -eq 0 ] && [ \"\$(python3 -c \"import json; d=json.load(open('$out')); print(sum(r['status'] == 'FAIL' for r in d['results']))\")\" = 0 ]"

# ---- explain ----
run "$mv" explain
check explain_scratch bash -c "[ $rc -eq 0 ] && grep -q '; 0 scan messages where an index should serve;' '$out' &&
                               [ \$(grep -c '^-- ' '$out') -ge 40 ]"
check explain_no_password_needed [ ! -s "$err" ]
check explain_scratch_removed bash -c "! ls -d '${TMPDIR:-/tmp}'/mailvault-explain.* 2>/dev/null | grep -q ."
run "$mv" explain "$user" "${P[@]}" --json
check explain_user_json bash -c "[ $rc -eq 0 ] && python3 -c \"
import json, sys
d = json.load(open('$out'))
bad = [r['sql'] for r in d['statements'] if r['scans_messages'] and not r['scan_expected']]
ops = set(r['operation'] for r in d['statements'])
need = {'append', 'fetch', 'get', 'flags add', 'copy', 'move', 'expunge', 'mailbox create',
        'mailbox rename', 'mailbox list', 'mailbox get', 'search in a mailbox', 'import',
        'message list'}
sys.exit(0 if not bad and len(d['statements']) >= 40 and need <= ops else 1)\""
# Statistics that do not cover messages (a store just migrated, or analysed before its
# messages came): the planner's defaults then made EXPUNGE's and COPY's per-body reference
# counts walk a UID range of messages once per body (quadratic: 10,000 expunged of 100,000
# took 10^8 row visits). Their plans are pinned; explain flags such a correlated range.
sql_int "ANALYZE mailboxes" >/dev/null
sql_int "DELETE FROM sqlite_stat1 WHERE tbl = 'messages'" >/dev/null
check explain_stats_without_messages_set_up [ "$(sql_int "SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'messages'")" = 0 ]
run "$mv" explain "$user" "${P[@]}" --json
check explain_user_stats_without_messages bash -c "[ $rc -eq 0 ] && python3 -c \"
import json, sys
d = json.load(open('$out'))
bad = [r['sql'] for r in d['statements'] if r['scans_messages'] and not r['scan_expected']]
sys.exit(0 if not bad and len(d['statements']) >= 40 else 1)\""

# ---- one JSON vocabulary (docs/CLI.md): every document an object with format_version 2,
# sizes named with their unit, booleans as booleans, times as ISO 8601 strings or null ----
cat >"$tmp/vocabulary.py" <<'PY'
import json, sys
bad = []
def walk(where, v):
    if isinstance(v, dict):
        for k, x in v.items():
            here = where + "." + k
            if k in ("size", "page_size", "bytes") or (k.endswith("size") and not k.endswith("_bytes")):
                bad.append(here + ": a size without its unit")
            if (k.endswith("_ok") or k in ("checkpoint_busy", "subscribed", "scans_messages",
                                            "scan_expected")) and not isinstance(x, (bool, type(None))):
                bad.append(here + ": not a boolean")
            if (k.endswith("_at") or k.endswith("date")) and not (x is None or isinstance(x, str) and x.endswith("Z")):
                bad.append(here + ": not an ISO 8601 time or null")
            walk(here, x)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            walk(where + "[%d]" % i, x)
for path in sys.argv[1:]:
    d = json.load(open(path))
    if not isinstance(d, dict) or d.get("format_version") != 2:
        bad.append(path + ": not an object with format_version 2")
    walk(path, d)
print("\n".join(bad) if bad else "ok")
PY
docs=()
for c in "info $user" "mailboxes $user" "list $user" "search $user" "stats $user" "stats --all" \
         "check $user" "repair $user" "doctor" "explain"; do
    f="$tmp/vocab.$(echo "$c" | cut -d' ' -f1).$((${#docs[@]}))"
    pass_args=()
    case "$c" in *"$user"*) pass_args=("${P[@]}") ;; esac
    # shellcheck disable=SC2086
    "$mv" $c "${pass_args[@]}" --json </dev/null >"$f" 2>/dev/null
    docs+=("$f")
done
check json_one_vocabulary [ "$("$PY" "$tmp/vocabulary.py" "${docs[@]}")" = ok ]

finish
