// The server config's `tls:`, `auth:` and `metrics_address`:
// paths resolved from the config file's folder and checked at load, and
// every mistake an error at its line and field.
#include <sys/stat.h>
#include <unistd.h>

#include "config_fixture.h"

namespace es::testing {
namespace {

class TlsAuthConfigTest : public ConfigTest {
 protected:
  void SetUp() override {
    ConfigTest::SetUp();
    // The contents do not matter here: PEM parsing happens at server start
    // (server/security/tls_files.h), tokens in AuthPolicy::Load.
    tree_.Write("certs/server.pem", "cert");
    tree_.Write("certs/server.key", "key");
    tree_.Write("certs/ca.pem", "ca");
    tree_.Write("tokens.txt", "admin abc\n");
  }
  StatusOr<ServerConfig> LoadWith(const std::string& extra) {
    return LoadServerConfig(WriteServer(kServerYaml + extra));
  }
};

TEST_F(TlsAuthConfigTest, DefaultsAreOff) {
  StatusOr<ServerConfig> config = Load();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->tls.enabled());
  EXPECT_FALSE(config->auth.enabled());
  EXPECT_TRUE(config->auth.open_health);
  EXPECT_EQ(config->metrics_address, "");
}

TEST_F(TlsAuthConfigTest, RelativePathsStartAtTheConfigFolder) {
  StatusOr<ServerConfig> config = LoadWith(
      "tls: {cert: certs/server.pem, key: ./certs/server.key, client_ca: certs/../certs/ca.pem}\n"
      "auth:\n  tokens_file: tokens.txt\n  open_health: false\n"
      "metrics_address: 0.0.0.0\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->tls.enabled());
  EXPECT_EQ(config->tls.cert, tree_.Path("certs/server.pem"));
  EXPECT_EQ(config->tls.key, tree_.Path("certs/server.key"));
  EXPECT_EQ(config->tls.client_ca, tree_.Path("certs/ca.pem"));
  EXPECT_TRUE(config->auth.enabled());
  EXPECT_EQ(config->auth.tokens_file, tree_.Path("tokens.txt"));
  EXPECT_FALSE(config->auth.open_health);
  EXPECT_EQ(config->metrics_address, "0.0.0.0");
}

TEST_F(TlsAuthConfigTest, AbsolutePathsAndNoClientCa) {
  StatusOr<ServerConfig> config =
      LoadWith("tls: {cert: " + tree_.Path("certs/server.pem") + ", key: " + tree_.Path("certs/server.key") + "}\n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->tls.cert, tree_.Path("certs/server.pem"));
  EXPECT_EQ(config->tls.client_ca, "");
  EXPECT_FALSE(config->auth.enabled());
}

TEST_F(TlsAuthConfigTest, MissingCertFile) {
  const std::string yaml = kServerYaml + "tls:\n  cert: certs/nope.pem\n  key: certs/server.key\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "cert: certs/nope"),
                    "tls.cert", "file '" + tree_.Path("certs/nope.pem") + "' does not exist");
}

TEST_F(TlsAuthConfigTest, MissingTokensFile) {
  const std::string yaml = kServerYaml + "auth: {tokens_file: missing.txt}\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "auth:"),
                    "auth.tokens_file", "missing.txt' does not exist");
}

TEST_F(TlsAuthConfigTest, FolderIsNotAFile) {
  const std::string yaml = kServerYaml + "tls: {cert: certs, key: certs/server.key}\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "tls:"), "tls.cert",
                    "is not a regular file");
}

TEST_F(TlsAuthConfigTest, UnreadableKey) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads any file";
  tree_.Write("certs/secret.key", "key");
  ASSERT_EQ(::chmod(tree_.Path("certs/secret.key").c_str(), 0), 0);
  const std::string yaml = kServerYaml + "tls: {cert: certs/server.pem, key: certs/secret.key}\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "tls:"), "tls.key",
                    "is not readable");
}

TEST_F(TlsAuthConfigTest, KeyWithoutCert) {
  const std::string yaml = kServerYaml + "tls:\n  key: certs/server.key\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "key: certs"), "tls.key",
                    "needs tls.cert");
}

TEST_F(TlsAuthConfigTest, ClientCaWithoutCert) {
  const std::string yaml = kServerYaml + "tls:\n  client_ca: certs/ca.pem\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "client_ca: certs"),
                    "tls.client_ca", "needs tls.cert");
}

TEST_F(TlsAuthConfigTest, CertWithoutKey) {
  const std::string yaml = kServerYaml + "tls:\n  cert: certs/server.pem\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "cert: certs"), "tls.cert",
                    "needs tls.key");
}

TEST_F(TlsAuthConfigTest, EmptyTls) {
  const std::string yaml = kServerYaml + "tls: {}\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "tls:"), "tls",
                    "needs cert and key");
}

TEST_F(TlsAuthConfigTest, UnknownTlsKey) {
  const std::string yaml = kServerYaml + "tls: {cert: certs/server.pem, key: certs/server.key, ca: certs/ca.pem}\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "tls:"), "tls.ca",
                    "unknown key 'ca'");
}

TEST_F(TlsAuthConfigTest, AuthWithoutTokensFile) {
  const std::string yaml = kServerYaml + "auth: {open_health: true}\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "auth:"), "auth",
                    "needs tokens_file");
}

TEST_F(TlsAuthConfigTest, OpenHealthMustBeABoolean) {
  const std::string yaml = kServerYaml + "auth:\n  tokens_file: tokens.txt\n  open_health: yes\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "open_health"),
                    "auth.open_health", "expected true or false");
}

TEST_F(TlsAuthConfigTest, MetricsAddressIsAHostOnly) {
  const std::string yaml = kServerYaml + "metrics_address: 127.0.0.1 9090\n";
  ExpectConfigError(LoadServerConfig(WriteServer(yaml)).status(), server_path_, LineOf(yaml, "metrics_address"),
                    "metrics_address", "expected a host address");
}

}  // namespace
}  // namespace es::testing
