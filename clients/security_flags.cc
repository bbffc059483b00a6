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
    ES_RETURN_IF_ERROR(ReadTlsFiles(flags.ca, flags.cert, flags.key, options));
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

std::string ConnectionHint(const Status& status, const SecurityFlags& flags) {
  if (status.code() != grpc::StatusCode::UNAVAILABLE) return "";
  const std::string& m = status.message();
  const bool no_connection = m.find("failed to connect") != std::string::npos ||
                             m.find("Socket closed") != std::string::npos ||
                             m.find("Connection reset") != std::string::npos;
  if (!no_connection) return "";
  const bool tls = flags.ssl || !flags.ca.empty() || !flags.cert.empty() || !flags.key.empty();
  if (!tls) {
    return "(no connection: is the server up at that address? If it serves TLS, add --ssl and --ssl-ca; if it "
           "also requires client certificates, --ssl-cert and --ssl-key)";
  }
  return "(no connection: if the TLS handshake failed, check that --ssl-ca is the CA that signed the server's "
         "certificate and, if the server requires client certificates, that --ssl-cert and --ssl-key are a "
         "certificate of a CA it trusts, not expired; the server's log names the cause)";
}

}  // namespace es::client
