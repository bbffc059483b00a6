#!/usr/bin/env bash
# Test certificates for the TLS tests (and docs/security.md), made with
# Debian's `openssl` (3.0) at test time; nothing here is committed key
# material.
#
#   make_test_certs.sh DIR
#
# Writes into DIR (created if needed), each NAME.pem with its NAME.key
# (unencrypted EC P-256 keys):
#   ca              self-signed test CA ("es-test-ca")
#   server          signed by ca, for 127.0.0.1 and localhost (subjectAltName),
#                   extendedKeyUsage serverAuth
#   client          signed by ca, extendedKeyUsage clientAuth
#   other_ca        a second, unrelated self-signed CA
#   other_client    signed by other_ca (a client the server must refuse)
#   expired_client  signed by ca, valid only in 2020 (openssl ca -startdate/-enddate:
#                   openssl 3.0's x509/req have no way to back-date)
#   future_server   signed by ca, for 127.0.0.1, valid only from 2099 (not valid yet)
# Exit status 0 on success; on failure openssl's output is printed.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
dir=$1
mkdir -p "$dir"
cd "$dir"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  if ! "$@" >>"$log" 2>&1; then
    echo "make_test_certs.sh: failed: $*" >&2
    cat "$log" >&2
    exit 1
  fi
}

newkey() { run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key"; }

# A self-signed CA: NAME CN
make_ca() {
  newkey "$1"
  run openssl req -x509 -new -key "$1.key" -sha256 -days 30 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$1.pem"
}

# A leaf signed by a CA: NAME CN CA EXTENSIONS
make_leaf() {
  newkey "$1"
  run openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$4" >"$1.ext"
  run openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 30 -sha256 \
    -extfile "$1.ext" -out "$1.pem"
  rm -f "$1.csr" "$1.ext"
}

make_ca ca es-test-ca
make_ca other_ca es-other-ca
make_leaf server es-test-server ca \
  "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
client_ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
make_leaf client es-test-client ca "$client_ext"
make_leaf other_client es-other-client other_ca "$client_ext"

# Certificates with explicit validity dates: `openssl ca` takes them.
# NAME CN START END EXTENSIONS (dates as YYYYMMDDHHMMSSZ)
make_dated() {
  newkey "$1"
  run openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  rm -rf ca_db
  mkdir -p ca_db
  : >ca_db/index.txt
  echo 01 >ca_db/serial
  printf '%s\n' "$5" >"$1.ext"
  cat >ca_db/ca.cnf <<'EOF'
[ ca ]
default_ca = test_ca
[ test_ca ]
database = ca_db/index.txt
serial = ca_db/serial
new_certs_dir = ca_db
default_md = sha256
policy = any
unique_subject = no
[ any ]
commonName = supplied
EOF
  run openssl ca -batch -config ca_db/ca.cnf -cert ca.pem -keyfile ca.key -in "$1.csr" \
    -startdate "$3" -enddate "$4" -extfile "$1.ext" -notext -out "$1.pem"
  rm -rf ca_db "$1.csr" "$1.ext"
}
make_dated expired_client es-expired-client 20200101000000Z 20200102000000Z "$client_ext"
make_dated future_server es-future-server 20990101000000Z 20991231000000Z \
  "basicConstraints=CA:FALSE
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
rm -f ca.srl other_ca.srl

# Self-check: what the tests rely on.
run openssl verify -CAfile ca.pem server.pem client.pem
run openssl verify -CAfile other_ca.pem other_client.pem
if openssl verify -CAfile ca.pem expired_client.pem >>"$log" 2>&1; then
  echo "make_test_certs.sh: expired_client.pem verifies, but should have expired" >&2
  exit 1
fi
chmod 600 ./*.key
