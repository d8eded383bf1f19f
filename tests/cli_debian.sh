#!/usr/bin/env bash
# cli_debian.sh -- the Debian packages (issue 14): `dpkg-buildpackage -us -uc -b` on a copy
# of the tree builds libmailvault0, libmailvault-dev and mailvault; lintian finds no error
# or warning (the two informational tags left are explained below); the packages, unpacked into a scratch root (never installed on this machine),
# hold what they should (the library's shlibs pinned to its MINOR); the unpacked mailvault runs `version`; a program links through
# `pkg-config --cflags --libs mailvault` against the unpacked -dev and runs; the stock
# sqlite3 shell loads the unpacked extension.
#
# USAGE
#   bash tests/cli_debian.sh        (one package build: a few minutes on 2 CPUs)
#
# The informational lintian tags left: no-symbols-control-file (the ABI is 0.x: a MINOR may
# change it, so the shlibs dependency is pinned to the MINOR instead, as mailvault.h's
# VERSIONS AND ABI says and lib_shlibs_pins_the_minor checks; the version script pins what
# is exported, tests/cli_install.sh checks it) and
# package-supports-alternative-init-but-no-init.d-script (systemd only: mailvaultd relies on
# Type=notify and the unit's sandbox).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

make_tmp cli_debian
for tool in dpkg-buildpackage dh lintian; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        fail "tool_$tool (not installed: scripts/install-deps.sh installs it)"
        finish
    fi
done

# A copy of the tracked (and new, not ignored) files: the package builds from a clean tree,
# and ../*.deb lands in $tmp, not beside the checkout.
src="$tmp/src/mailvault"
mkdir -p "$src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -z | tar -cf - --null -T - | tar -xf - -C "$src"
else
    tar -cf - --exclude=./build --exclude=./var --exclude=node_modules . | tar -xf - -C "$src"
fi
(cd "$src" && dpkg-buildpackage -us -uc -b -j2) >"$tmp/build.log" 2>&1
rc=$?
check dpkg_buildpackage bash -c "[ $rc -eq 0 ] || { tail -n 30 '$tmp/build.log'; exit 1; }"
ver=$(sed -n 's/^#define MV_VERSION_STRING "\(.*\)"/\1/p' include/mailvault.h)
arch=$(dpkg --print-architecture)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
debs=("$tmp/src/libmailvault0_${ver}_$arch.deb" "$tmp/src/libmailvault-dev_${ver}_$arch.deb"
      "$tmp/src/mailvault_${ver}_$arch.deb")
check three_packages bash -c "for d in ${debs[*]}; do [ -f \"\$d\" ] || exit 1; done"

run lintian --fail-on error,warning "$tmp/src/mailvault_${ver}_${arch}.changes"
check lintian_no_error_or_warning bash -c "[ $rc -eq 0 ] && ! grep -E '^[EW]:' '$out'"
grep -E '^[EWI]:' "$out" | sed 's/^/    lintian: /'

root="$tmp/root"
for d in "${debs[@]}"; do dpkg-deb -x "$d" "$root"; done
# What each package holds.
run dpkg-deb -c "${debs[0]}"
check lib_package bash -c "grep -q './usr/lib/$ma/libmailvault.so.$ver' '$out' &&
    grep -q './usr/lib/$ma/libmailvault.so.0 -> libmailvault.so.$ver' '$out' &&
    ! grep -q 'libmailvault.so -> ' '$out'"
# The ABI policy (mailvault.h, VERSIONS AND ABI): at 0.x what is built against 0.MINOR
# depends on that MINOR only, through the library package's shlibs.
minor=$(echo "$ver" | cut -d. -f2)
dpkg-deb -e "${debs[0]}" "$tmp/libcontrol"
check lib_shlibs_pins_the_minor grep -qxF \
    "libmailvault 0 libmailvault0 (>= 0.$minor), libmailvault0 (<< 0.$((minor + 1))~)" \
    "$tmp/libcontrol/shlibs"
run dpkg-deb -c "${debs[1]}"
check dev_package bash -c "grep -q './usr/include/mailvault.h' '$out' &&
    grep -q './usr/lib/$ma/libmailvault.a' '$out' && grep -q './usr/lib/$ma/pkgconfig/mailvault.pc' '$out' &&
    grep -q 'man3/mailvault.3.gz' '$out'"
run dpkg-deb -c "${debs[2]}"
check server_package bash -c "grep -q './usr/bin/mailvault$' '$out' && grep -q './usr/sbin/mailvaultd$' '$out' &&
    grep -q 'mailvaultd.service' '$out' && grep -q './var/lib/mailvault/$' '$out' &&
    grep -q 'man1/mailvault.1.gz' '$out' && grep -q 'man8/mailvaultd.8.gz' '$out' &&
    grep -q './usr/lib/$ma/mailvault/mailvault_ext.so' '$out' &&
    grep -q 'bash-completion/completions/mailvault' '$out'"
dpkg-deb -e "${debs[2]}" "$tmp/control"
check server_conffile grep -qx /etc/mailvault/mailvaultd.conf "$tmp/control/conffiles"
check server_user_and_unit bash -c "grep -q 'adduser --system' '$tmp/control/postinst' &&
    grep -q 'deb-systemd-helper' '$tmp/control/postinst' &&
    grep -qx 'ExecStart=/usr/sbin/mailvaultd -c /etc/mailvault/mailvaultd.conf' \
        '$root/lib/systemd/system/mailvaultd.service'"
check server_config_journald bash -c "grep -qx 'log = stderr' '$root/etc/mailvault/mailvaultd.conf' &&
    grep -qx 'root = /var/lib/mailvault' '$root/etc/mailvault/mailvaultd.conf'"

export LD_LIBRARY_PATH="$root/usr/lib/$ma"
run "$root/usr/bin/mailvault" version
check mailvault_version bash -c "[ $rc -eq 0 ] && grep -qx 'mailvault $ver' '$out'"

cat >"$tmp/prog.c" <<'C'
#include <mailvault.h>
#include <stdio.h>
int main(void)
{
    printf("%s %s\n", mv_version(), mv_strerror(MV_EAUTH) != NULL ? "ok" : "no");
    return 0;
}
C
export PKG_CONFIG_PATH="$root/usr/lib/$ma/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root"
run bash -c "cc -o '$tmp/prog' '$tmp/prog.c' \$(pkg-config --cflags --libs mailvault)"
check pkgconfig_link ok
run "$tmp/prog"
check pkgconfig_program_runs bash -c "[ $rc -eq 0 ] && grep -qx '$ver ok' '$out'"
run ldd "$tmp/prog"
check program_uses_packaged_library grep -q "$root/usr/lib/$ma/libmailvault.so.0" "$out"
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR LD_LIBRARY_PATH

printf ".load %s\n.open %s\nPRAGMA key='k';\nCREATE TABLE t(x);\nINSERT INTO t VALUES('marker');\nSELECT x FROM t;\n" \
    "$root/usr/lib/$ma/mailvault/mailvault_ext" "$tmp/x.db" |
    sqlite3 -batch -init /dev/null >"$out" 2>"$err"
rc=$?
check sqlite3_loads_packaged_extension bash -c "[ $rc -eq 0 ] && grep -qx marker '$out' &&
    ! grep -q marker '$tmp/x.db'"

finish
