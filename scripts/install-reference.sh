#!/usr/bin/env bash
# Install the SQLite3 Multiple Ciphers reference implementation (npm package
# better-sqlite3-multiple-ciphers) built from source against the system Node.
#
# Usage: scripts/install-reference.sh [VERSION]
#   default VERSION 12.11.1 -> tools/reference/
#   any other VERSION       -> tools/reference-VERSION/
# Idempotent: exits quickly if the requested version is already installed.
set -euo pipefail

PKG=better-sqlite3-multiple-ciphers
DEFAULT_VERSION=12.11.1
VERSION="${1:-$DEFAULT_VERSION}"

if ! [[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "install-reference: bad version '$VERSION' (want X.Y.Z)" >&2
  exit 2
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ "$VERSION" == "$DEFAULT_VERSION" ]]; then
  DIR="$ROOT/tools/reference"
else
  DIR="$ROOT/tools/reference-$VERSION"
fi

# Keep .gitignore entries present and unique.
GI="$ROOT/.gitignore"
touch "$GI"
for line in 'node_modules/' 'tools/reference*/node_modules/' 'tools/reference*/package-lock.json'; do
  grep -qxF -- "$line" "$GI" || printf '%s\n' "$line" >> "$GI"
done

installed_version() {
  (cd "$DIR" && node -e "process.stdout.write(require('$PKG/package.json').version)" 2>/dev/null) || true
}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install-reference: node/npm missing, installing Debian packages nodejs npm" >&2
  SUDO=""
  [[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi

if [[ -d "$DIR/node_modules/$PKG" && "$(installed_version)" == "$VERSION" ]]; then
  # Also make sure the native addon actually loads.
  if (cd "$DIR" && node -e "new (require('$PKG'))(':memory:').close()" >/dev/null 2>&1); then
    echo "install-reference: $PKG@$VERSION already installed in ${DIR#$ROOT/}"
    exit 0
  fi
fi

mkdir -p "$DIR"
cat > "$DIR/package.json" <<JSON
{
  "name": "mailvault-reference-$(echo "$VERSION" | tr . -)",
  "private": true,
  "description": "SQLite3 Multiple Ciphers reference implementation for mailvault interop tests",
  "dependencies": {
    "$PKG": "$VERSION"
  }
}
JSON

start=$(date +%s)
LOG="$(mktemp "${TMPDIR:-/tmp}/install-reference.XXXXXX.log")"
# Build the native addon from source against the system Node headers.
(
  cd "$DIR"
  npm_config_nodedir=/usr npm install --no-audit --no-fund --loglevel=error \
    > "$LOG" 2>&1
) || {
  echo "install-reference: npm install failed; last lines of $LOG:" >&2
  tail -n 30 "$LOG" >&2
  exit 1
}
got="$(installed_version)"
if [[ "$got" != "$VERSION" ]]; then
  echo "install-reference: expected $PKG@$VERSION but found '${got:-nothing}'" >&2
  exit 1
fi
(cd "$DIR" && node -e "new (require('$PKG'))(':memory:').close()") || {
  echo "install-reference: $PKG@$VERSION installed but fails to load" >&2
  exit 1
}
rm -f "$LOG"
echo "install-reference: installed $PKG@$VERSION into ${DIR#$ROOT/} in $(( $(date +%s) - start ))s"
