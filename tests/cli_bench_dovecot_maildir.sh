#!/usr/bin/env bash
# cli_bench_dovecot_maildir.sh -- how the Dovecot comparisons give a corpus to Dovecot
# (bench/dovecot_lib.sh dovecot_maildir_copy, used by bench/bigmail_compare.sh): a copy,
# every file and directory Dovecot's mail user's (nobody), the corpus untouched. As nobody,
# a file of the Maildir can be renamed and unlinked (a flag change, an expunge), a new one
# made (a delivery), and hard-linked into another folder (Dovecot's COPY): hard links to
# the corpus' root-owned files could not be (protected_hardlinks), so Dovecot's COPY copied
# bytes and the benchmark measured it slower than a real Dovecot; and the corpus keeps its
# files and their owner (a `chown -R nobody` over hard links gave them to nobody).
# dovecot_maildir_link (BIGMAIL_MAILDIR_LINK=1, for a corpus the disk cannot hold twice)
# makes those hard links on purpose: checked last, on a corpus of its own.
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

# nobody_changes LABEL DEST FILE: as nobody, FILE of the Maildir DEST is hard-linked into
# another folder (Dovecot's COPY), renamed (a flag change) and unlinked with its link (an
# expunge).
nobody_changes() {
    local label=$1 dest=$2 file=$3
    mkdir -p "$dest/.Copies/cur" && chown -R nobody "$dest/.Copies"
    as_nobody ln "$dest/cur/$file" "$dest/.Copies/cur/$file" 2>"$err"
    check "${label}nobody hard-links a file into another folder (Dovecot's COPY)" [ $? -eq 0 ]
    as_nobody mv "$dest/cur/$file" "$dest/cur/$file,T" 2>"$err"
    check "${label}nobody renames a file (a flag change)" [ $? -eq 0 ]
    as_nobody rm "$dest/cur/$file,T" "$dest/.Copies/cur/$file" 2>"$err"
    check "${label}nobody unlinks a file (an expunge)" [ $? -eq 0 ]
}

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
dovecot_maildir_copy "$corpus" "$dest"
check "a copy: the Maildir's files are not the corpus' inodes" \
    [ "$(stat -c %i "$dest/cur/$first")" != "$(stat -c %i "$corpus/cur/$first")" ]
check "the Maildir is nobody's, every file and directory" \
    [ "$(find "$dest" ! -user nobody | wc -l)" -eq 0 ]
nobody_changes "" "$dest" "$first"
as_nobody sh -c "printf 'x' >'$dest/new/1700000000.M1P1.lmtp'" 2>"$err"
check "nobody adds a file (a delivery)" [ $? -eq 0 ]
owners=$(stat -c %U "$corpus" "$corpus/cur" "$corpus"/cur/* | sort -u)
check "the corpus keeps its owner ($owners)" [ "$owners" = root ]
check "the corpus keeps every file" [ "$(ls "$corpus/cur" | wc -l)" -eq 3 ]
check "the corpus file still reads the same" grep -q "body 1" "$corpus/cur/$first"

# A file only its owner may read is copied as well, and nobody reads the copy
chmod 600 "$corpus/cur/$first"
dest2=$tmp/dc/mail/u2@bench.example
dovecot_maildir_copy "$corpus" "$dest2"
check "the copy of an owner-only file belongs to nobody" \
    [ "$(find "$dest2" ! -user nobody | wc -l)" -eq 0 ]
check "the corpus keeps its owner and mode" \
    [ "$(stat -c '%U %a' "$corpus/cur/$first")" = "root 600" ]
as_nobody cat "$dest2/cur/$first" >"$out" 2>"$err"
check "nobody reads the copy" grep -q "body 1" "$out"

# BIGMAIL_MAILDIR_LINK=1 (dovecot_maildir_link): hard links to a corpus the disk cannot hold
# twice. The files are the corpus' (same inodes, now nobody's, so that Dovecot's COPY can
# link them), the directories Dovecot's: what Dovecot does changes only its own names.
lcorpus=$tmp/lcorpus/Maildir
mkdir -p "$lcorpus/cur" "$lcorpus/new" "$lcorpus/tmp"
for i in 1 2; do
    printf 'Subject: l%d\r\n\r\nlinked %d\r\n' "$i" "$i" >"$lcorpus/cur/17000000$i.M${i}P1.bench:2,"
done
chmod 644 "$lcorpus"/cur/*
lfirst=$(ls "$lcorpus/cur" | head -n 1)
ldest=$tmp/dc/mail/u3@bench.example
dovecot_maildir_link "$lcorpus" "$ldest"
check "linked: the Maildir's file is the corpus' inode" \
    [ "$(stat -c %i "$ldest/cur/$lfirst")" = "$(stat -c %i "$lcorpus/cur/$lfirst")" ]
check "linked: the Maildir's directories are nobody's and not the corpus'" \
    [ "$(find "$ldest" -type d ! -user nobody | wc -l)" -eq 0 ]
nobody_changes "linked: " "$ldest" "$lfirst"
check "linked: the corpus keeps every file under its name" \
    [ "$(ls "$lcorpus/cur" | tr '\n' ' ')" = "$(printf '17000000%s.M%sP1.bench:2, ' 1 1 2 2)" ]
check "linked: the corpus file still reads the same" grep -q "linked 1" "$lcorpus/cur/$lfirst"
finish
