#include "clients/security_flags.h"

#include <cstdlib>

namespace es::client {

void AddSecurityFlags(CLI::App* app, SecurityFlags* flags) {
  app->add_flag("--ssl", flags->ssl,
                "connect with TLS (server certificate checked against --ssl-ca, else the system's CAs)");
  app->add_option("--ssl-ca", flags->ca, "PEM file of the CA(s) that signed the server's certificate (implies --ssl)");
  app->add_option("--ssl-cert", flags->cert,
                  "PEM client certificate, for servers that require one (mTLS; implies --ssl)");
  app->add_option("--ssl-key", flags->key, "PEM private key of --ssl-cert");
  app->add_option("--token", flags->token,
                  std::string("bearer token sent as 'authorization: Bearer TOKEN' on every call; prefer the "
                              "environment variable ") +
                      kTokenEnv + " (a flag is visible to other users in ps)");
}

Status ApplySecurityFlags(const SecurityFlags& flags, ClientOptions* options) {
  if (flags.ssl || !flags.ca.empty() || !flags.cert.empty() || !flags.key.empty()) {
    Status s = ReadTlsFiles(flags.ca, flags.cert, flags.key, options);
    if (!s.ok()) return s;
  }
  std::string token = flags.token;
  const char* from = "--token";
  if (token.empty()) {
    const char* env = std::getenv(kTokenEnv);
    if (env != nullptr) token = env;
    from = kTokenEnv;
  }
  // A metadata value must be visible ASCII; tokens have no spaces (the
  // server's tokens file separates role and token by one).
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return Status(grpc::StatusCode::INVALID_ARGUMENT,
                    std::string(from) + ": a token is visible ASCII without spaces");
    }
  }
  options->token = std::move(token);
  return Status();
}

}  // namespace es::client
