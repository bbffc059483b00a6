// TLS material of the front ends (gRPC and HTTP), read and checked once at
// start-up from the server config's `tls: {cert, key, client_ca}`.
//
// Why check here: gRPC only logs a bad certificate or key (and then fails
// every handshake, or refuses to build the server with a generic message),
// so a typo or a mismatched key would show up as clients that cannot
// connect. LoadTlsFiles parses each PEM file with OpenSSL first and fails
// with a message that names the config field and the file:
//   - cert: at least one X.509 certificate (the chain, leaf first), the leaf
//     currently valid (not before its notBefore, not after its notAfter);
//   - key: an unencrypted private key that matches the leaf certificate
//     (an encrypted key is refused: nobody is there to type a passphrase);
//   - client_ca (optional): at least one X.509 certificate.
// Each file is at most kMaxTlsFileBytes. The returned strings are the files'
// PEM text as read (what grpc::SslServerCredentialsOptions and
// boost::asio::ssl::context::use_*_chain / use_private_key take), so the
// files are read exactly once and a file replaced later does not matter
// until the next start.
//
// Thread safety: a free function without shared state.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"
#include "config/server_config.h"

namespace es {

constexpr size_t kMaxTlsFileBytes = size_t{1} << 20;  // certificate bundles are kilobytes

struct TlsFiles {
  std::string cert_chain;   // PEM, tls.cert
  std::string private_key;  // PEM, tls.key
  std::string client_ca;    // PEM, tls.client_ca; empty = no client certificates asked
};

// `tls` must be enabled (tls.enabled()). INVALID_ARGUMENT naming the field
// and file when a file cannot be read or does not hold what it should.
StatusOr<TlsFiles> LoadTlsFiles(const TlsConfig& tls);

}  // namespace es
