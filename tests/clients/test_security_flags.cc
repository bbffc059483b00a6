// The clients' TLS and token options (clients/security_flags.h,
// es::client::ReadTlsFiles, AddCallCredentials) without a server: what the
// flags and ENSEMBLE_TOKEN turn into, and the errors for bad files and
// tokens. The end-to-end use is tests/integration/test_tls.cc.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "clients/client.h"
#include "clients/loadgen/options.h"
#include "clients/security_flags.h"
#include "tests/common/temp_dir.h"

namespace es::client {
namespace {

constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

// Unsets ENSEMBLE_TOKEN for a test and restores it after.
class TokenEnv {
 public:
  TokenEnv() {
    const char* old = getenv(kTokenEnv);
    if (old != nullptr) saved_ = old;
    had_ = old != nullptr;
    unsetenv(kTokenEnv);
  }
  ~TokenEnv() {
    if (had_) {
      setenv(kTokenEnv, saved_.c_str(), 1);
    } else {
      unsetenv(kTokenEnv);
    }
  }

 private:
  bool had_ = false;
  std::string saved_;
};

TEST(SecurityFlags, NothingGivenIsPlaintextWithoutToken) {
  TokenEnv env;
  ClientOptions options;
  ASSERT_TRUE(ApplySecurityFlags(SecurityFlags{}, &options).ok());
  EXPECT_FALSE(options.ssl);
  EXPECT_EQ(options.token, "");
}

TEST(SecurityFlags, CaImpliesSslAndFilesAreRead) {
  TokenEnv env;
  es::testing::TempDir dir;
  SecurityFlags flags;
  flags.ca = dir.Write("ca.pem", kPem);
  flags.cert = dir.Write("client.pem", kPem);
  flags.key = dir.Write("client.key", "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n");
  ClientOptions options;
  const Status s = ApplySecurityFlags(flags, &options);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(options.ssl);
  EXPECT_EQ(options.ssl_root_certs, kPem);
  EXPECT_EQ(options.ssl_cert_chain, kPem);
  EXPECT_NE(options.ssl_private_key.find("PRIVATE KEY"), std::string::npos);
}

TEST(SecurityFlags, SslAloneUsesDefaultRoots) {
  TokenEnv env;
  SecurityFlags flags;
  flags.ssl = true;
  ClientOptions options;
  ASSERT_TRUE(ApplySecurityFlags(flags, &options).ok());
  EXPECT_TRUE(options.ssl);
  EXPECT_EQ(options.ssl_root_certs, "");
}

TEST(SecurityFlags, BadFilesAreNamed) {
  TokenEnv env;
  es::testing::TempDir dir;
  ClientOptions options;
  Status s = ReadTlsFiles(dir.Path("missing.pem"), "", "", &options);
  EXPECT_EQ(s.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.message().find(dir.Path("missing.pem")), std::string::npos) << s.message();
  const std::string text = dir.Write("notes.txt", "hello");
  s = ReadTlsFiles(text, "", "", &options);
  EXPECT_NE(s.message().find("'" + text + "' is not a PEM file"), std::string::npos) << s.message();
  s = ReadTlsFiles("", dir.Write("c.pem", kPem), "", &options);
  EXPECT_NE(s.message().find("--ssl-key"), std::string::npos) << s.message();
  EXPECT_FALSE(options.ssl);
}

TEST(SecurityFlags, TokenFromEnvironmentUnlessTheFlagGivesOne) {
  TokenEnv env;
  ASSERT_EQ(setenv(kTokenEnv, "from-env-0123456789", 1), 0);
  ClientOptions options;
  ASSERT_TRUE(ApplySecurityFlags(SecurityFlags{}, &options).ok());
  EXPECT_EQ(options.token, "from-env-0123456789");
  SecurityFlags flags;
  flags.token = "from-flag-0123456789";
  ASSERT_TRUE(ApplySecurityFlags(flags, &options).ok());
  EXPECT_EQ(options.token, "from-flag-0123456789");
}

TEST(SecurityFlags, TokenWithSpaceOrControlCharacterIsRefusedWithoutShowingIt) {
  TokenEnv env;
  for (const std::string bad : {"two words-0123456789", "line\nbreak-0123456789"}) {
    SecurityFlags flags;
    flags.token = bad;
    ClientOptions options;
    const Status s = ApplySecurityFlags(flags, &options);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("--token"), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find("0123456789"), std::string::npos) << "the message shows the token";
  }
}

// A call that got no answer ends with what to check, by the flags it was
// made with; other failures get nothing.
TEST(SecurityFlags, ConnectionHintFollowsTheFlags) {
  const Status refused(grpc::StatusCode::UNAVAILABLE, "failed to connect to all addresses; last error: ...");
  const Status closed(grpc::StatusCode::UNAVAILABLE, "Socket closed");
  SecurityFlags plain;
  EXPECT_NE(ConnectionHint(refused, plain).find("If it serves TLS, add --ssl"), std::string::npos);
  SecurityFlags tls;
  tls.ca = "ca.pem";
  EXPECT_NE(ConnectionHint(closed, tls).find("--ssl-ca is the CA that signed the server's certificate"),
            std::string::npos);
  EXPECT_EQ(ConnectionHint(Status(grpc::StatusCode::UNAVAILABLE, "model 'm' has no ready host"), plain), "");
  EXPECT_EQ(ConnectionHint(Status(grpc::StatusCode::INVALID_ARGUMENT, "Socket closed"), plain), "");
}

TEST(LoadgenSecurityFlags, ParseArgsReadsTlsFilesAndToken) {
  TokenEnv env;
  es::testing::TempDir dir;
  const std::string ca = dir.Write("ca.pem", kPem);
  ASSERT_EQ(setenv(kTokenEnv, "loadgen-env-0123456789", 1), 0);
  std::vector<std::string> args = {"ensemble-loadgen", "--server", "127.0.0.1:1", "--model", "m", "--ssl-ca", ca};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  es::loadgen::Options o;
  ASSERT_EQ(es::loadgen::ParseArgs(static_cast<int>(argv.size()), argv.data(), &o), es::loadgen::ParseOutcome::kOk);
  EXPECT_TRUE(o.client.ssl);
  EXPECT_EQ(o.client.ssl_root_certs, kPem);
  EXPECT_EQ(o.client.token, "loadgen-env-0123456789");

  args = {"ensemble-loadgen", "--server", "127.0.0.1:1", "--model", "m", "--ssl-ca", dir.Path("nope.pem")};
  argv.clear();
  for (auto& a : args) argv.push_back(a.data());
  es::loadgen::Options bad;
  EXPECT_EQ(es::loadgen::ParseArgs(static_cast<int>(argv.size()), argv.data(), &bad),
            es::loadgen::ParseOutcome::kUsageError);
}

}  // namespace
}  // namespace es::client
