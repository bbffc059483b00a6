// The TLS and token flags shared by ensemble-cli and ensemble-loadgen:
//   --ssl, --ssl-ca FILE, --ssl-cert FILE, --ssl-key FILE, --token TOKEN
// (the token also from the environment variable ENSEMBLE_TOKEN, so it need
// not appear in `ps`; the flag wins when both are given).
//
// Contract: AddSecurityFlags only declares the options; ApplySecurityFlags
// (after parsing) reads the PEM files into the ClientOptions and checks the
// token, answering INVALID_ARGUMENT with a message naming the flag or file
// and never the token itself. --ssl-ca, --ssl-cert and --ssl-key imply --ssl.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "clients/client.h"

namespace es::client {

constexpr const char* kTokenEnv = "ENSEMBLE_TOKEN";

struct SecurityFlags {
  bool ssl = false;
  std::string ca, cert, key, token;
};

void AddSecurityFlags(CLI::App* app, SecurityFlags* flags);

Status ApplySecurityFlags(const SecurityFlags& flags, ClientOptions* options);

// What to check when a call got no answer from the server (UNAVAILABLE
// before any: gRPC says only "failed to connect" or "Socket closed", whether
// nothing listens, a plaintext client met a TLS server, or the TLS handshake
// failed), given the flags the connection was made with: a sentence in
// parentheses, or "" for any other failure. The handshake's own reason is in
// the server's log.
std::string ConnectionHint(const Status& status, const SecurityFlags& flags);

}  // namespace es::client
