#!/usr/bin/env bash
# cli_imapd_migrate.sh -- a store of schema version 8 logged into over IMAP (imapd/worker.c
# "MIGRATION", src/store/store_fts_move.c): makes a user with 40 messages, turns the store
# back into version 8's shape (the full-text index with positions) with `mailvault sql`,
# starts the ASan server with one worker, runs tests/imapd_migrate.py (the login logs the
# migration and answers before the full-text move, searches are right during and after it,
# the end is logged, /metrics counts it), stops the server (exit 0, no sanitizer report),
# then `mailvault info` shows nothing left and `mailvault check` is clean.
#
# USAGE
#   make build/asan/mailvaultd build/asan/mailvault && bash tests/cli_imapd_migrate.sh
#   (tests/run.sh runs it as part of `make test`.)
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
. tests/imapd_lib.sh

imapd_test_setup cli_imapd_migrate 2
user=alice@example.org
init_users "$user"
n=40
for i in $(seq 1 $n); do
    a=""
    b=""
    [ $((i % 3)) -eq 0 ] && a="tagalpha "
    [ $((i % 4)) -eq 1 ] && b="tagbeta "
    printf 'From MAILER-DAEMON Thu Jan  1 00:00:00 2024\nFrom: s%d@example.org\nSubject: m%d\n\ncommon %s%send\n\n' \
        "$i" "$i" "$a" "$b"
done >"$tmp/in.mbox"
run "$mv" import "$user" "$tmp/in.mbox" --password-file "$tmp/pw.$user"
check "import $n messages" ok
run "$mv" sql --password-file "$tmp/pw.$user" --kdf-iter "$MAILVAULT_KDF_ITER" \
    "$root/example.org/alice.db" "DROP TRIGGER mailbox_memos_gone; DROP TABLE mailbox_memos; ALTER TABLE attachments DROP COLUMN marks; ALTER TABLE attachments DROP COLUMN lines; DROP TRIGGER body_memos_gone; DROP TABLE body_memos; DROP INDEX mailboxes_uidvalidity; DROP TABLE mailbox_keywords; UPDATE bodies SET refcount = (SELECT r.refcount FROM body_refs r WHERE r.id = bodies.id); DROP TABLE body_refs; CREATE INDEX bodies_unreferenced ON bodies(id) WHERE refcount = 0; ALTER TABLE bodies DROP COLUMN head; DROP INDEX messages_uid_body; CREATE VIRTUAL TABLE fts_v8 USING fts5(header, body, tokenize='trigram'); INSERT INTO fts_v8(rowid, header, body) SELECT rowid, header, body FROM fts; DROP TABLE fts; ALTER TABLE fts_v8 RENAME TO fts; PRAGMA user_version = 8"
check "the store made version 8" ok

start_server_checked "$tmp/server.log" --root="$root" --listen=127.0.0.1 --imap-port=0 \
    --lmtp-port=0 --workers=1 --metrics-listen=127.0.0.1:0 --log-level=info

run_client 300 "$PY" tests/imapd_migrate.py --imap "$(port imap)" --metrics "$(port metrics)" \
    --user "$user:$user secret" --log "$tmp/server.log" --messages "$n"

stop_server_checked "$tmp/server.log"

run "$mv" info "$user" --password-file "$tmp/pw.$user" --json
check "info: no full-text rows left to move" bash -c \
    "[ $rc -eq 0 ] && $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d[\"fts_rows_left\"] != 0 or d[\"schema_version\"] != 16)' '$out'"
run "$mv" check "$user" --password-file "$tmp/pw.$user"
check "check: the migrated store is sound" ok
finish
