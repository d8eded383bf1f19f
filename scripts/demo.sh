#!/usr/bin/env bash
# demo.sh -- the demonstration `make run` ends with: an encrypted mail database under ./var,
# written and read by `mailvault sql`, then opened with the stock sqlite3 shell through the
# loadable extension, and a wrong password refused by both.
#
# The password is random, lives in var/demo.password (mode 0600) and never appears on a
# command line: mailvault reads it with --password-file, and the sqlite3 shell gets its
# PRAGMA key on stdin (printf is a shell builtin, so no process sees it in argv).
# Apart from that password and the random bytes of the file, the output is always the same.
set -euo pipefail
cd "$(dirname "$0")/.."

mv=build/mailvault
ext=build/mailvault_ext
db=var/demo.db
pwfile=var/demo.password
subject='Quarterly report: the plaintext we must not find'

heading() {
    printf '\n== %s\n' "$1"
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

heading "1. A private directory and a random password"
mkdir -p var
chmod 0700 var
rm -f "$db" "$db"-*
(umask 077 && head -c 24 /dev/urandom | base64 >"$pwfile")
chmod 0600 "$pwfile"
echo "var/ is mode $(stat -c %a var); $pwfile is mode $(stat -c %a "$pwfile")"

heading "2. Create the encrypted database $db (mailvault sql --create)"
"$mv" sql --create --password-file "$pwfile" "$db" \
    "CREATE TABLE messages(id INTEGER PRIMARY KEY, sender TEXT NOT NULL, subject TEXT NOT NULL,
                           body TEXT, attachment BLOB)" \
    "INSERT INTO messages(sender, subject, body, attachment) VALUES
         ('alice@example.org', '$subject', 'Numbers attached.', x'cafe'),
         ('bob@example.org', 'Lunch?', 'Noon at the usual place.', NULL),
         ('carol@example.org', 'Grüße aus Köln', NULL, NULL)"
echo "created"

heading "3. Read the rows back (TSV: id, sender, subject, hex(attachment))"
"$mv" sql --password-file "$pwfile" "$db" \
    "SELECT id, sender, subject, attachment FROM messages ORDER BY id"

heading "4. What is on disk"
printf 'PRAGMA cipher: '
"$mv" sql --readonly --password-file "$pwfile" "$db" "PRAGMA cipher"
echo "first 32 bytes (0-15: random salt; 16-23: page size, reserve bytes etc. in the clear):"
od -A d -t x1 -N 32 "$db"
if LC_ALL=C grep -a -q -F "Quarterly report" "$db"; then
    echo "FAIL: the subject appears in the file in plain text" >&2
    exit 1
fi
echo "grep for the subject in the file bytes: not found (the file holds ciphertext only)"

heading "5. The stock sqlite3 shell, through the extension"
echo "commands on stdin: .load $ext | .open $db | PRAGMA key='...'; | SELECT ...;"
password=$(cat "$pwfile")
printf ".load %s\n.open %s\nPRAGMA key='%s';\nSELECT id, subject FROM messages ORDER BY id;\n" \
    "$ext" "$db" "$password" | sqlite3 -batch -init /dev/null
unset password

heading "6. A wrong password is refused"
set +e
out=$(printf 'not-the-password\n' | "$mv" sql --password-file - "$db" "SELECT count(*) FROM messages" 2>&1)
rc=$?
set -e
echo "mailvault sql: exit $rc: $out"
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1" >&2; exit 1; }
set +e
out=$(printf ".load %s\n.open %s\nPRAGMA key='not-the-password';\nSELECT count(*) FROM messages;\n" \
    "$ext" "$db" | sqlite3 -batch -init /dev/null 2>&1)
rc=$?
set -e
echo "sqlite3 shell: exit $rc:"
printf '%s\n' "$out" | sed 's/^/  /'
[ "$rc" -ne 0 ] || { echo "FAIL: expected a non-zero exit" >&2; exit 1; }

heading "Done"
echo "The database is $db, its password is in $pwfile. Try:"
echo "  $mv sql --password-file $pwfile $db 'SELECT * FROM messages'"
