// AuthPolicy: the tokens file and the role rules every front end applies.
#include "server/security/auth_policy.h"

#include <gtest/gtest.h>

#include "tests/common/temp_dir.h"

namespace es {
namespace {

constexpr const char* kInferToken = "infer-token-0123456789";
constexpr const char* kAdminToken = "admin-token-0123456789";

std::unique_ptr<AuthPolicy> LoadPolicy(const testing::TempDir& dir, bool open_health = true) {
  AuthConfig config;
  config.tokens_file = dir.Write("tokens", std::string("# role token\n\ninfer ") + kInferToken + "\nadmin " +
                                               kAdminToken + "\n");
  config.open_health = open_health;
  auto policy = AuthPolicy::Load(config);
  EXPECT_TRUE(policy.ok()) << policy.status().ToString();
  return policy.ok() ? std::move(policy).value() : nullptr;
}

std::string Bearer(const char* token) { return std::string("Bearer ") + token; }

TEST(AuthPolicyTest, OffAllowsEverything) {
  auto policy = AuthPolicy::Load(AuthConfig{});
  ASSERT_TRUE(policy.ok());
  EXPECT_FALSE((*policy)->enabled());
  EXPECT_TRUE((*policy)->Check("", Access::kAdmin).ok());
}

TEST(AuthPolicyTest, RolesDecideWhatATokenMayCall) {
  testing::TempDir dir;
  auto policy = LoadPolicy(dir);
  ASSERT_NE(policy, nullptr);
  EXPECT_TRUE(policy->Check(Bearer(kInferToken), Access::kInfer).ok());
  EXPECT_TRUE(policy->Check(Bearer(kAdminToken), Access::kInfer).ok());
  EXPECT_TRUE(policy->Check(Bearer(kAdminToken), Access::kAdmin).ok());
  EXPECT_TRUE(policy->Check(std::string("bearer ") + kAdminToken, Access::kAdmin).ok()) << "the scheme is case-insensitive";
  const Status denied = policy->Check(Bearer(kInferToken), Access::kAdmin);
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(denied.message().find(kInferToken), std::string::npos) << "the token must not be in the message";
}

TEST(AuthPolicyTest, MissingMalformedAndUnknownTokensAreUnauthenticated) {
  testing::TempDir dir;
  auto policy = LoadPolicy(dir);
  ASSERT_NE(policy, nullptr);
  for (const std::string& header :
       {std::string(), std::string(kInferToken), std::string("Basic ") + kInferToken, Bearer("infer-token-012345678"),
        Bearer("infer-token-01234567890"), std::string("Bearer ")}) {
    const Status s = policy->Check(header, Access::kInfer);
    EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << "'" << header << "': " << s.ToString();
    EXPECT_EQ(s.message().find("infer-token"), std::string::npos) << s.message();
  }
}

TEST(AuthPolicyTest, HealthIsOpenOnlyWhenConfigured) {
  testing::TempDir dir;
  auto open = LoadPolicy(dir, /*open_health=*/true);
  ASSERT_NE(open, nullptr);
  EXPECT_TRUE(open->Check("", Access::kHealth).ok());
  auto closed = LoadPolicy(dir, /*open_health=*/false);
  ASSERT_NE(closed, nullptr);
  EXPECT_EQ(closed->Check("", Access::kHealth).code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(closed->Check(Bearer(kInferToken), Access::kHealth).ok());
}

TEST(AuthPolicyTest, BadTokensFilesNameTheLine) {
  testing::TempDir dir;
  struct Case {
    const char* content;
    const char* expected;
  };
  for (const Case& c : {Case{"owner abcdefghijklmnopqrstu\n", ":1: unknown role"},
                        Case{"infer\n", ":1: expected two words"},
                        Case{"# ok\ninfer abcdefghijklmnop extra\n", ":2: expected two words"},
                        Case{"admin short\n", ":1: token shorter than 16"}, Case{"# only comments\n", "holds no token"}}) {
    AuthConfig config;
    config.tokens_file = dir.Write("bad", c.content);
    auto policy = AuthPolicy::Load(config);
    ASSERT_FALSE(policy.ok()) << c.content;
    EXPECT_NE(policy.status().message().find(c.expected), std::string::npos) << policy.status().message();
    EXPECT_EQ(policy.status().message().find("abcdefghijklm"), std::string::npos) << "token leaked";
  }
  AuthConfig missing;
  missing.tokens_file = dir.Path("nonexistent");
  EXPECT_EQ(AuthPolicy::Load(missing).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace es
