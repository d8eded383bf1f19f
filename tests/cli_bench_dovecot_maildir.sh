#!/usr/bin/env bash
# cli_bench_dovecot_maildir.sh -- how the Dovecot comparisons give a corpus to Dovecot
# (bench/dovecot_lib.sh dovecot_maildir_link, used by bench/bigmail_compare.sh): the
# Maildir is hard-linked when every file is readable by others, and only its own
# directories go to Dovecot's mail user (nobody), so the corpus keeps its owner (the old
# `chown -R nobody` over the links gave the shared corpus' files to nobody: their inodes are
# the corpus'); with a file only its owner may read, a copy, chowned whole. As nobody, a
# file of the linked Maildir can be renamed and unlinked (what Dovecot does to flag and
# expunge) and a new one made (a delivery), and the corpus keeps its files.
#
# USAGE
#   bash tests/cli_bench_dovecot_maildir.sh   (tests/run.sh runs it in `make test`; ~1 s)
#   Needs root (chown to nobody, setpriv); otherwise it says so and checks nothing.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh # pass, fail, make_tmp, finish
. bench/dovecot_lib.sh

# Under /tmp whatever TMPDIR says: nobody must reach the Maildir, and the suite's TMPDIR
# (tests/run.sh) is a directory only root may enter (as in cli_imapd_ops.sh).
TMPDIR=/tmp make_tmp cli_bench_dovecot_maildir
chmod 755 "$tmp"
if [ "$(id -u)" -ne 0 ] || ! id nobody >/dev/null 2>&1 || ! command -v setpriv >/dev/null; then
    echo "SKIP: needs root, the user nobody and setpriv (the benchmark runs Dovecot so)"
    finish
fi
as_nobody() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"; }

# A corpus owned by the caller (root), readable by others, as bench/bigmail_corpus.py writes
corpus=$tmp/corpus/Maildir
mkdir -p "$corpus/cur" "$corpus/new" "$corpus/tmp"
for i in 1 2 3; do
    printf 'Subject: m%d\r\n\r\nbody %d\r\n' "$i" "$i" >"$corpus/cur/16000000$i.M${i}P1.bench:2,S"
done
chmod 644 "$corpus"/cur/*
first=$(ls "$corpus/cur" | head -n 1)

dest=$tmp/dc/mail/u1@bench.example
mkdir -p "$tmp/dc/mail" && chmod 755 "$tmp/dc" "$tmp/dc/mail"
dovecot_maildir_link "$corpus" "$dest"
check "linked: the Maildir's files are the corpus' (same inode)" \
    [ "$(stat -c %i "$dest/cur/$first")" = "$(stat -c %i "$corpus/cur/$first")" ]
owners=$(stat -c %U "$corpus"/cur/* | sort -u)
check "linked: the corpus files keep their owner ($owners)" [ "$owners" = root ]
check "linked: the corpus directories keep their owner" \
    [ "$(stat -c %U "$corpus" "$corpus/cur" | sort -u)" = root ]
check "linked: the Maildir's directories belong to nobody" \
    [ "$(find "$dest" -type d ! -user nobody | wc -l)" -eq 0 ]
as_nobody mv "$dest/cur/$first" "$dest/cur/$first,T" 2>"$err"
check "linked: nobody renames a file (a flag change)" [ $? -eq 0 ]
as_nobody rm "$dest/cur/$first,T" 2>"$err"
check "linked: nobody unlinks a file (an expunge)" [ $? -eq 0 ]
as_nobody sh -c "printf 'x' >'$dest/new/1700000000.M1P1.lmtp'" 2>"$err"
check "linked: nobody adds a file (a delivery)" [ $? -eq 0 ]
check "linked: the corpus keeps every file" [ "$(ls "$corpus/cur" | wc -l)" -eq 3 ]
check "linked: the corpus file still reads the same" grep -q "body 1" "$corpus/cur/$first"

# A file only its owner may read: nobody could not read a link to it, so a copy
chmod 600 "$corpus/cur/$first"
dest2=$tmp/dc/mail/u2@bench.example
dovecot_maildir_link "$corpus" "$dest2"
check "copied: a file not readable by others is not linked" \
    [ "$(stat -c %i "$dest2/cur/$first")" != "$(stat -c %i "$corpus/cur/$first")" ]
check "copied: the copy belongs to nobody, every file" \
    [ "$(find "$dest2" ! -user nobody | wc -l)" -eq 0 ]
check "copied: the corpus keeps its owner and mode" \
    [ "$(stat -c '%U %a' "$corpus/cur/$first")" = "root 600" ]
as_nobody cat "$dest2/cur/$first" >"$out" 2>"$err"
check "copied: nobody reads the copy" grep -q "body 1" "$out"
finish
