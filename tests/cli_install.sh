#!/usr/bin/env bash
# cli_install.sh -- `make install` / `make uninstall` with PREFIX and DESTDIR (issue 14):
# what lands where, what the shared library exports, that a program defining its own
# store_open / crypt_init links against the static archive, that pkg-config links a
# program (shared and --static), that the stock sqlite3 shell loads the installed
# extension, that the man pages render and the bash completion completes, and that
# uninstall removes every file it installed.
#
# USAGE
#   make all && bash tests/cli_install.sh       (make install only copies what `all` built)
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

make_tmp cli_install
ver=$(sed -n 's/^#define MV_VERSION_STRING "\(.*\)"/\1/p' include/mailvault.h)
major=${ver%%.*}
dest="$tmp/dest"
prefix=/opt/mv
inst() { make --no-print-directory -s "$@" DESTDIR="$dest" PREFIX="$prefix" >"$out" 2>"$err"; rc=$?; }

inst install
check install_ok ok
p="$dest$prefix"
check installed_files bash -c "[ -x '$p/bin/mailvault' ] && [ -x '$p/sbin/mailvaultd' ] &&
    [ -f '$p/lib/libmailvault.so.$ver' ] && [ \"\$(readlink '$p/lib/libmailvault.so.$major')\" = libmailvault.so.$ver ] &&
    [ \"\$(readlink '$p/lib/libmailvault.so')\" = libmailvault.so.$major ] && [ -f '$p/lib/libmailvault.a' ] &&
    [ -f '$p/include/mailvault.h' ] && [ -f '$p/lib/pkgconfig/mailvault.pc' ] &&
    [ -f '$p/lib/mailvault/mailvault_ext.so' ] && [ -f '$p/share/man/man1/mailvault.1' ] &&
    [ -f '$p/share/man/man8/mailvaultd.8' ] && [ -f '$p/share/man/man3/mailvault.3' ] &&
    [ -f '$p/share/bash-completion/completions/mailvault' ] &&
    [ -f '$p/lib/systemd/system/mailvaultd.service' ]"
check unit_points_at_prefix grep -qx "ExecStart=$prefix/sbin/mailvaultd -c /etc/mailvault/mailvaultd.conf" \
    "$p/lib/systemd/system/mailvaultd.service"
# The soname carries MAJOR only (mailvault.h, VERSIONS AND ABI).
check soname bash -c "objdump -p '$p/lib/libmailvault.so.$ver' | grep -qE 'SONAME +libmailvault.so.$major$'"

# The shared library exports the MV_API functions of the header and nothing else.
nm -D --defined-only "$p/lib/libmailvault.so.$ver" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' |
    sort >"$tmp/exported"
tr -s ' \n' '  ' <include/mailvault.h | grep -oE 'MV_API [^;{(]*\(' | grep -oE 'mv_[a-z0-9_]+ *\($' |
    tr -d ' (' | sort -u >"$tmp/declared"
check exports_exactly_the_api bash -c "[ -s '$tmp/exported' ] && diff '$tmp/declared' '$tmp/exported'"
run nm -g --defined-only "$p/lib/libmailvault.a"
check static_archive_exports_only_api bash -c "! awk 'NF == 3 { print \$3 }' '$out' | grep -v '^mv_'"

# A program with its own store_open and crypt_init (names libmailvault uses inside).
cat >"$tmp/prog.c" <<'C'
#include <mailvault.h>
#include <stdio.h>
int store_open(void);
int crypt_init(void);
int store_open(void) { return 40; }
int crypt_init(void) { return 2; }
int main(void)
{
    char out[64];
    if (mv_address_normalize("Bob@Example.ORG", out, sizeof out, NULL, 0) != MV_OK) {
        return 1;
    }
    printf("%s %s %d\n", mv_version(), out, store_open() + crypt_init());
    return 0;
}
C
export PKG_CONFIG_PATH="$p/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest"
run pkg-config --cflags --libs mailvault
check pkgconfig_flags bash -c "grep -q -- '-I$p/include' '$out' && grep -q -- '-L$p/lib -lmailvault' '$out'"
run pkg-config --print-requires-private mailvault
check pkgconfig_requires_private bash -c "grep -q libcrypto '$out' && grep -q gmime-3.0 '$out' &&
    grep -q libsodium '$out' && grep -q libzstd '$out' && grep -q libarchive '$out'"
run bash -c "cc -o '$tmp/prog_shared' '$tmp/prog.c' \$(pkg-config --cflags --libs mailvault)"
check link_shared ok
run env LD_LIBRARY_PATH="$p/lib" "$tmp/prog_shared"
check run_shared bash -c "[ $rc -eq 0 ] && grep -qx '$ver Bob@example.org 42' '$out'"
# The archive, and the shared libraries of exactly what Requires.private names (pkg-config
# --static would want static GPGME and friends, which Debian's -dev packages do not ship).
run bash -c "cc -o '$tmp/prog_static' '$tmp/prog.c' \$(pkg-config --cflags mailvault) \
    '$p/lib/libmailvault.a' \$(pkg-config --libs sqlite3 \$(pkg-config --print-requires-private mailvault)) -pthread"
check link_static_with_own_store_open ok
run "$tmp/prog_static"
check run_static bash -c "[ $rc -eq 0 ] && grep -qx '$ver Bob@example.org 42' '$out'"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR

# The stock sqlite3 shell with the installed extension: a new encrypted file, then reopened.
sq() { printf '.load %s\n.open %s\nPRAGMA key=%s;\n%s\n' "$p/lib/mailvault/mailvault_ext" \
    "$tmp/x.db" "'k'" "$1" | sqlite3 -batch -init /dev/null >"$out" 2>"$err"; rc=$?; }
sq "CREATE TABLE t(x); INSERT INTO t VALUES('plain-text-marker'); SELECT count(*) FROM t;"
check sqlite3_loads_extension bash -c "[ $rc -eq 0 ] && grep -qx 1 '$out' && ! grep -q . '$err'"
check sqlite3_file_encrypted bash -c "! grep -q plain-text-marker '$tmp/x.db' && ! head -c 16 '$tmp/x.db' | grep -q 'SQLite format'"
sq "SELECT x FROM t;"
check sqlite3_reads_back grep -qx plain-text-marker "$out"

# Man pages render; the completion completes commands and a command's options.
check man_pages_render bash -c "for f in '$p'/share/man/man*/*; do
    LC_ALL=C.UTF-8 MANWIDTH=80 man -l \"\$f\" >/dev/null 2>&1 || exit 1; done"
run bash -c "_init_completion() { cur=\${COMP_WORDS[COMP_CWORD]}; prev=\${COMP_WORDS[COMP_CWORD-1]};
    words=(\"\${COMP_WORDS[@]}\"); cword=\$COMP_CWORD; }
    _filedir() { :; }
    complete() { :; }
    . '$p/share/bash-completion/completions/mailvault'
    PATH='$p/bin':\$PATH
    COMP_WORDS=(mailvault ma); COMP_CWORD=1; _mailvault; echo \"\${COMPREPLY[*]}\"
    COMP_WORDS=(mailvault list --l); COMP_CWORD=2; _mailvault; echo \"\${COMPREPLY[*]}\"
    COMP_WORDS=(mailvault mailbox create x --sp); COMP_CWORD=4; _mailvault; echo \"\${COMPREPLY[*]}\""
check bash_completion bash -c "[ \"\$(sed -n 1p '$out')\" = 'mailboxes mailbox maintain' ] &&
    [ \"\$(sed -n 2p '$out')\" = '--limit' ] && [ \"\$(sed -n 3p '$out')\" = '--special-use' ]"

inst uninstall
check uninstall_ok ok
run find "$dest" -type f -o -type l
check uninstall_removes_everything bash -c "[ ! -s '$out' ]"

finish
