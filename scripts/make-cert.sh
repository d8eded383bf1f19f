#!/usr/bin/env bash
# make-cert.sh -- a self-signed TLS certificate for mailvaultd (tests and `make run`).
#
# USAGE
#   scripts/make-cert.sh DIR [HOSTNAME]
#   writes DIR/cert.pem and DIR/key.pem (mode 0600): an ECDSA P-256 key and a self-signed
#   leaf certificate for HOSTNAME (default: this machine's host name), valid 365 days.
#
# The certificate is a server certificate, not a CA: basicConstraints CA:FALSE (critical),
# keyUsage digitalSignature (critical), extendedKeyUsage serverAuth, and subjectAltName
# HOSTNAME, localhost, 127.0.0.1 and ::1. Clients such as Thunderbird refuse a CA certificate
# (CA:TRUE, what `openssl req -x509` makes by default) as a server's certificate even when
# the user accepts it, and match the name only against subjectAltName (RFC 6125).
# Existing files are kept (delete them to make new ones), except a CA certificate left by an
# older version of this script: that one is replaced (the old pair is kept as *.pem.old).
set -euo pipefail
dir=${1:?usage: make-cert.sh DIR [HOSTNAME]}
host=${2:-$(hostname -f 2>/dev/null || hostname 2>/dev/null || echo localhost)}
host=${host:-localhost}
mkdir -p "$dir"
if [ -f "$dir/cert.pem" ] && [ -f "$dir/key.pem" ]; then
    if ! openssl x509 -in "$dir/cert.pem" -noout -ext basicConstraints 2>/dev/null |
        grep -q 'CA:TRUE'; then
        exit 0
    fi
    mv -f "$dir/cert.pem" "$dir/cert.pem.old"
    mv -f "$dir/key.pem" "$dir/key.pem.old"
    echo "make-cert: $dir/cert.pem was a CA certificate; making a server certificate" >&2
fi
san="DNS:localhost,IP:127.0.0.1,IP:::1"
case "$host" in
localhost) ;;
*[!0-9.]*) san="DNS:$host,$san" ;; # a name
*) san="IP:$host,$san" ;;          # an IPv4 address
esac
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 365 -subj "/CN=$host" \
    -addext "subjectAltName=$san" \
    -addext "basicConstraints=critical,CA:FALSE" \
    -addext "keyUsage=critical,digitalSignature" \
    -addext "extendedKeyUsage=serverAuth" 2>/dev/null
chmod 0600 "$dir/key.pem" "$dir/cert.pem"
echo "make-cert: $dir/cert.pem and $dir/key.pem for $host"
