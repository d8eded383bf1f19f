#!/usr/bin/env bash
# make-cert.sh -- a self-signed TLS certificate for mailvaultd (tests and `make run`).
#
# USAGE
#   scripts/make-cert.sh DIR [HOSTNAME]
#   writes DIR/cert.pem and DIR/key.pem (mode 0600): an ECDSA P-256 key and a certificate for
#   HOSTNAME (default localhost), with localhost and 127.0.0.1 as subject alternative names,
#   valid 365 days. Existing files are kept (delete them to make new ones).
set -euo pipefail
dir=${1:?usage: make-cert.sh DIR [HOSTNAME]}
host=${2:-localhost}
mkdir -p "$dir"
if [ -f "$dir/cert.pem" ] && [ -f "$dir/key.pem" ]; then
    exit 0
fi
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 365 -subj "/CN=$host" \
    -addext "subjectAltName=DNS:$host,DNS:localhost,IP:127.0.0.1" 2>/dev/null
chmod 0600 "$dir/key.pem" "$dir/cert.pem"
echo "make-cert: $dir/cert.pem and $dir/key.pem for $host"
