#!/usr/bin/env bash
# cli_make_cert.sh -- scripts/make-cert.sh makes a server (leaf) certificate that clients
# accept once the user trusts it: basicConstraints CA:FALSE, keyUsage digitalSignature,
# extendedKeyUsage serverAuth, subjectAltName for the host name, localhost, 127.0.0.1 and
# ::1 (RFC 5280 4.2.1.9, 4.2.1.12; RFC 6125 6.4: names are matched in subjectAltName).
# Thunderbird refuses a CA certificate (what `openssl req -x509` makes by default) as a
# server's certificate. Also: a CA certificate left by an older make-cert.sh is replaced,
# a good one is kept, and Python's ssl (OpenSSL) verifies a TLS handshake against it.
#
# USAGE
#   bash tests/cli_make_cert.sh
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
make_tmp cli_make_cert

run scripts/make-cert.sh "$tmp/a" mail.example.org
check "make-cert.sh succeeds" ok
text=$(openssl x509 -in "$tmp/a/cert.pem" -noout -text 2>/dev/null)
check "not a CA (CA:FALSE, critical)" \
    bash -c 'grep -A1 "Basic Constraints: critical" <<<"$1" | grep -q "CA:FALSE"' _ "$text"
check "extendedKeyUsage serverAuth" grep -q "TLS Web Server Authentication" <<<"$text"
check "keyUsage digitalSignature" bash -c 'grep -A1 "Key Usage: critical" <<<"$1" |
    grep -q "Digital Signature"' _ "$text"
for name in "DNS:mail.example.org" "DNS:localhost" "IP Address:127.0.0.1"; do
    check "subjectAltName has $name" grep -q "$name" <<<"$text"
done
check "the key is private (0600)" test "$(stat -c %a "$tmp/a/key.pem")" = 600
run openssl verify -CAfile "$tmp/a/cert.pem" -purpose sslserver "$tmp/a/cert.pem"
check "OpenSSL's sslserver purpose accepts it" ok

# A TLS handshake to 127.0.0.1 and to localhost, trusting only this certificate.
cat >"$tmp/tls.py" <<'PYEOF'
import socket, ssl, sys, threading
cert, key = sys.argv[1], sys.argv[2]
server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
server_ctx.load_cert_chain(cert, key)
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(4)
port = listener.getsockname()[1]
def serve():
    for _ in range(2):
        conn, _addr = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass
threading.Thread(target=serve, daemon=True).start()
for name in ("127.0.0.1", "localhost"):
    ctx = ssl.create_default_context(cafile=cert)  # hostname check and CERT_REQUIRED
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        with ctx.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(b"x")
print("handshakes ok")
PYEOF
run "$PY" "$tmp/tls.py" "$tmp/a/cert.pem" "$tmp/a/key.pem"
check "a client trusting the certificate completes TLS to 127.0.0.1 and localhost" \
    grep -q "handshakes ok" "$out"

# An old CA certificate (what make-cert.sh made before) is replaced; a leaf one is kept.
mkdir -p "$tmp/old"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$tmp/old/key.pem" -out "$tmp/old/cert.pem" -days 1 -subj "/CN=old" 2>/dev/null
run scripts/make-cert.sh "$tmp/old"
check "an old CA certificate is replaced" bash -c \
    'openssl x509 -in "$1/cert.pem" -noout -ext basicConstraints | grep -q CA:FALSE &&
     test -f "$1/cert.pem.old"' _ "$tmp/old"
before=$(sha256sum <"$tmp/a/cert.pem")
run scripts/make-cert.sh "$tmp/a"
check "a server certificate is kept" test "$before" = "$(sha256sum <"$tmp/a/cert.pem")"
finish
