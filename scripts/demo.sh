#!/usr/bin/env bash
# demo.sh -- the demonstration `make run` ends with: the encrypted mail store of
# demo@example.org under ./var/mail, filled from the sample corpus and used through the
# mailvault tool (list, search, fetch, a sealed delivery without the password, statistics),
# then the same file opened with the stock sqlite3 shell through the loadable extension,
# and a wrong password refused by both.
#
# The password is random, lives in var/demo.password (mode 0600) and never appears on a
# command line: mailvault reads it with --password-file, and the sqlite3 shell gets its
# PRAGMA key on stdin (printf is a shell builtin, so no process sees it in argv).
# An earlier demo store (var/mail/example.org/demo.*) is removed first, so the demo can be
# run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

mv=build/mailvault
ext=build/mailvault_ext
root=var/mail
user=demo@example.org
store=$root/example.org/demo.db
pwfile=var/demo.password
corpus=tests/corpus
sample=$corpus/plain-ascii.eml
sample_id=q1-review.1@example.org
unset MAILVAULT_PASSWORD MAILVAULT_KDF_ITER # the demo uses the real key derivation
export MAILVAULT_ROOT=$root

heading() {
    printf '\n== %s\n' "$1"
}

# show CMD...: prints the command, then runs it.
show() {
    printf '$ %s\n' "$*"
    "$@"
}

for f in "$mv" "$ext.so"; do
    if [ ! -x "$f" ] && [ ! -f "$f" ]; then
        echo "demo: $f is missing; run 'make run' (or 'make all') first" >&2
        exit 1
    fi
done
if ! command -v sqlite3 >/dev/null; then
    echo "demo: the sqlite3 shell is missing; run scripts/install-deps.sh" >&2
    exit 1
fi

heading "1. A private directory, a random password, no old demo store"
mkdir -p var
chmod 0700 var
rm -rf "$root"/example.org/demo.*
(umask 077 && head -c 24 /dev/urandom | base64 >"$pwfile")
chmod 0600 "$pwfile"
echo "var/ is mode $(stat -c %a var); $pwfile is mode $(stat -c %a "$pwfile")"

heading "2. Create the store of $user (mailvault init)"
show "$mv" init "$user" --password-file "$pwfile"
ls -l "$root/example.org" | grep -v '^total'

heading "3. Import the sample corpus ($corpus/*.eml)"
have_corpus=0
if ls "$corpus"/*.eml >/dev/null 2>&1; then
    have_corpus=1
    show "$mv" import "$user" "$corpus" --password-file "$pwfile"
else
    echo "$corpus/ has no .eml files: import skipped; delivering one built-in message instead"
    sample=var/demo-sample.eml
    sample_id=demo-sample@example.org
    printf 'From: Alice Martin <alice@example.org>\r\nTo: %s\r\nSubject: Quarterly numbers\r\nMessage-ID: <%s>\r\n\r\nThe quarterly numbers are in.\r\n' \
        "$user" "$sample_id" >"$sample"
    show "$mv" deliver "$user" --password-file "$pwfile" "$sample"
fi

heading "4. The newest messages in INBOX (mailvault list)"
show "$mv" list "$user" --limit 10 --password-file "$pwfile"

heading "5. Search: full text, then sender"
show "$mv" search "$user" --text quarterly --password-file "$pwfile"
if [ "$have_corpus" -eq 1 ]; then
    show "$mv" search "$user" --from bob@example.com --limit 5 --password-file "$pwfile"
else
    show "$mv" search "$user" --from alice --password-file "$pwfile"
fi

heading "6. Fetch one message: the exact bytes that went in"
uid=$("$mv" search "$user" --mailbox INBOX --message-id "$sample_id" --password-file "$pwfile" |
    awk 'NR == 2 { print $1 }')
echo "$sample has Message-ID <$sample_id>: UID $uid"
show "$mv" fetch "$user" "$uid" --output var/demo-fetched.eml --password-file "$pwfile"
if cmp "$sample" var/demo-fetched.eml; then
    echo "cmp: var/demo-fetched.eml is byte-identical to $sample ($(stat -c %s "$sample") bytes)"
else
    echo "FAIL: the fetched message differs from its source" >&2
    exit 1
fi
rm -f var/demo-fetched.eml

heading "7. Delivery without the password (deliver --sealed)"
messages_before=$("$mv" info "$user" --password-file "$pwfile" | awk '$1 == "messages" { print $2 }')
echo "before: $messages_before messages"
printf 'From: Mail Server <postmaster@example.org>\r\nTo: %s\r\nSubject: Sealed while you were away\r\n\r\nOnly the password holder can read this.\r\n' \
    "$user" | show "$mv" deliver "$user" --sealed
echo "queued, encrypted to the store's public key: $(ls "$root/example.org/demo.queue" | wc -l) file(s) in demo.queue/"
if LC_ALL=C grep -r -a -q -F "while you were away" "$root/example.org"; then
    echo "FAIL: the sealed message is readable on disk" >&2
    exit 1
fi
echo "grep for its subject under $root/example.org: not found"
echo "the next open (here: mailvault info) moves it into INBOX:"
show "$mv" info "$user" --password-file "$pwfile"

heading "8. Mailboxes"
show "$mv" mailboxes "$user" --password-file "$pwfile"

heading "9. The same file in the stock sqlite3 shell, through the extension"
echo "commands on stdin: .load $ext | .open $store | PRAGMA key='...'; | SELECT ...;"
password=$(cat "$pwfile")
printf ".load %s\n.open %s\nPRAGMA key='%s';\nSELECT name, uidnext - 1 AS last_uid FROM mailboxes ORDER BY name;\n" \
    "$ext" "$store" "$password" | sqlite3 -batch -init /dev/null
unset password
if LC_ALL=C grep -a -q -F "Quarterly" "$store"; then
    echo "FAIL: a subject appears in the store file in plain text" >&2
    exit 1
fi
echo "grep for 'Quarterly' in $store: not found (the file holds ciphertext only)"

heading "10. A wrong password is refused, and changes nothing"
before=$(sha256sum "$store" | cut -d' ' -f1)
set +e
out=$(printf 'not-the-password\n' | "$mv" list "$user" --password-file - 2>&1)
rc=$?
set -e
echo "mailvault list: exit $rc: $out"
[ "$rc" -eq 77 ] || { echo "FAIL: expected exit 77 (EX_NOPERM: wrong password)" >&2; exit 1; }
set +e
out=$(printf ".load %s\n.open %s\nPRAGMA key='not-the-password';\nSELECT count(*) FROM messages;\n" \
    "$ext" "$store" | sqlite3 -batch -init /dev/null 2>&1)
rc=$?
set -e
echo "sqlite3 shell: exit $rc:"
printf '%s\n' "$out" | sed 's/^/  /'
[ "$rc" -ne 0 ] || { echo "FAIL: expected a non-zero exit" >&2; exit 1; }
[ "$(sha256sum "$store" | cut -d' ' -f1)" = "$before" ] || { echo "FAIL: the store changed" >&2; exit 1; }
echo "sha256 of $store: unchanged"

heading "Done"
echo "The store is $store, its password is in $pwfile. Try:"
echo "  $mv search $user --text lunch --password-file $pwfile"
echo "  $mv fetch $user 1 --password-file $pwfile"
