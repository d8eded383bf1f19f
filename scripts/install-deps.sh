#!/usr/bin/env bash
# Installs the Debian packages mailvault needs to build, test and run.
# Idempotent: asks apt only for what is missing, so `make run` / `make test` stay quick.
set -euo pipefail

packages=(build-essential pkg-config libsqlite3-dev sqlite3 libssl-dev openssl python3
          libgmime-3.0-dev libsodium-dev libzstd-dev
          libarchive-dev              # store export/import archives (src/ops/ops_move.c)
          python3-prometheus-client   # tests/cli_ops.sh parses `stats --prometheus` with it
          curl isync                  # tests/cli_imapd.sh: curl and mbsync against mailvaultd
          offlineimap3                # tests/cli_imapd_offlineimap.sh: a second sync client
          dovecot-core dovecot-imapd  # tests/cli_dsync_migrate.sh: dsync through imapc, private
          dovecot-lmtpd               # tests/cli_scaleout.sh: Dovecot as IMAP + LMTP proxy
          debhelper dpkg-dev lintian  # tests/cli_debian.sh builds and checks the packages
          man-db)                     # tests/cli_install.sh renders the installed man pages
if [ "${1:-}" = "--dev" ]; then
    packages+=(clang clang-format clang-tidy cppcheck valgrind)
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]} (run as root or with sudo)" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}"
