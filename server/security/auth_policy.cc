#include "server/security/auth_policy.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace es {
namespace {

const char* AccessName(Access access) {
  switch (access) {
    case Access::kHealth:
      return "health";
    case Access::kInfer:
      return "inference";
    case Access::kAdmin:
      return "administrative";
  }
  return "?";
}

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

Digest Sha256(std::string_view text) {
  Digest digest{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

// Tokens are compared as SHA-256 digests with CRYPTO_memcmp: the time taken
// depends neither on where they first differ nor on the configured token's
// length.
bool SameDigest(const Digest& a, const Digest& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

// RFC 7235: the scheme is case-insensitive ("Bearer", "bearer").
bool HasBearerScheme(std::string_view value) {
  constexpr std::string_view kBearer = "bearer ";
  if (value.size() < kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(value[i])) != kBearer[i]) return false;
  }
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<AuthPolicy>> AuthPolicy::Load(const AuthConfig& config) {
  auto policy = std::make_unique<AuthPolicy>();
  policy->open_health_ = config.open_health;
  if (!config.enabled()) return policy;
  policy->enabled_ = true;
  std::ifstream in(config.tokens_file);
  if (!in) return Status::FailedPrecondition("auth.tokens_file: cannot read '" + config.tokens_file + "'");
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::string role, token, extra;
    words >> role;
    if (role.empty() || role[0] == '#') continue;
    words >> token >> extra;
    std::string where = config.tokens_file;
    where.push_back(':');
    where.append(std::to_string(number));
    where.append(": ");
    if (role != "infer" && role != "admin") {
      return Status::InvalidArgument(where + "unknown role (expected 'infer TOKEN' or 'admin TOKEN')");
    }
    if (token.empty() || !extra.empty()) {
      return Status::InvalidArgument(where + "expected two words, 'ROLE TOKEN'");
    }
    if (token.size() < 16) {
      return Status::InvalidArgument(where + "token shorter than 16 characters (guessable)");
    }
    policy->entries_.push_back({Sha256(token), role == "admin" ? Role::kAdmin : Role::kInfer});
  }
  if (in.bad()) return Status::FailedPrecondition("auth.tokens_file: cannot read '" + config.tokens_file + "'");
  if (policy->entries_.empty()) {
    return Status::InvalidArgument("auth.tokens_file '" + config.tokens_file + "' holds no token");
  }
  return policy;
}

Status AuthPolicy::Check(std::string_view authorization, Access access) const {
  if (!enabled_) return Status::Ok();
  if (access == Access::kHealth && open_health_) return Status::Ok();
  if (authorization.empty()) {
    return Status::Unauthenticated(std::string(AccessName(access)) +
                                   " call without a token: send 'authorization: Bearer TOKEN'");
  }
  if (!HasBearerScheme(authorization)) {
    return Status::Unauthenticated("malformed authorization: expected 'Bearer TOKEN'");
  }
  const Digest token = Sha256(authorization.substr(std::string_view("Bearer ").size()));
  // Every entry is compared, whichever matches, so timing does not say which
  // (or whether an early one) did.
  const Entry* match = nullptr;
  for (const Entry& entry : entries_) {
    if (SameDigest(entry.token, token)) match = &entry;
  }
  if (match == nullptr) return Status::Unauthenticated("unknown token");
  if (access == Access::kAdmin && match->role != Role::kAdmin) {
    return Status::PermissionDenied("an 'infer' token may not make administrative calls (needs an 'admin' token)");
  }
  return Status::Ok();
}

}  // namespace es
