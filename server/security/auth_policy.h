// AuthPolicy: bearer-token authentication and roles for every front end
// (gRPC metadata `authorization`, HTTP header `Authorization`), from the
// server config's `auth: {tokens_file, open_health}`.
//
// The tokens file: one token per line, `ROLE TOKEN` (role `infer` or
// `admin`); blank lines and lines starting with '#' are ignored. A bad line
// is an error naming the file and line (never the token).
//
// What each role may call:
//   Access::kHealth  server/model live and ready, grpc.health.v1: any valid
//                    token, or none at all when open_health is set (probes)
//   Access::kInfer   metadata, config, index, statistics, inference: infer, admin
//   Access::kAdmin   model load/unload, shared-memory register, unregister
//                    and status (it lists every client's objects): admin only
// Answers: OK; UNAUTHENTICATED when the header is missing, malformed or the
// token unknown; PERMISSION_DENIED when the token's role may not make the
// call. Messages name the call's access and the role, never the token.
// Only SHA-256 digests of the tokens are kept, and they are compared in
// constant time (CRYPTO_memcmp, every configured token compared), so response
// timing reveals neither a token's prefix nor its length. The scheme is
// case-insensitive ("bearer TOKEN" works too, as RFC 7235 says).
//
// Thread safety: immutable after Load; Check from any thread.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/server_config.h"

namespace es {

enum class Access { kHealth, kInfer, kAdmin };

class AuthPolicy {
 public:
  enum class Role { kInfer, kAdmin };

  // Reads config.tokens_file; an empty policy (every call allowed) when
  // authentication is off.
  static StatusOr<std::unique_ptr<AuthPolicy>> Load(const AuthConfig& config);

  bool enabled() const { return enabled_; }

  // `authorization`: the header's value ("Bearer TOKEN"), empty when absent.
  Status Check(std::string_view authorization, Access access) const;

 private:
  struct Entry {
    std::array<unsigned char, 32> token;  // SHA-256 of the token
    Role role;
  };
  bool enabled_ = false;
  bool open_health_ = true;
  std::vector<Entry> entries_;
};

}  // namespace es
