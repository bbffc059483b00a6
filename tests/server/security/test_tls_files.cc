// LoadTlsFiles (server/security/tls_files.h): the PEM checks that stop a start-up,
// on certificates made at test time by tests/integration/make_test_certs.sh
// (Debian's openssl). The same cases through a real server start are in
// tests/integration/test_tls.cc (TlsStartupTest).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

#include "server/security/tls_files.h"
#include "tests/common/temp_dir.h"
#include "tests/common/test_paths.h"

namespace es {
namespace {

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("es_tls_files_");
    const std::string command =
        std::string("bash '") + es::test_paths::kMakeTestCertsSh + "' '" + dir_->root() + "' 2>&1";
    const int rc = std::system(command.c_str());
    made_ = rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(made_) << "make_test_certs.sh failed"; }

  static std::string Path(const std::string& name) { return dir_->Path(name); }
  static std::string Read(const std::string& name) {
    std::ifstream in(Path(name));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static TlsConfig Config(const std::string& cert, const std::string& key, const std::string& ca = "") {
    TlsConfig tls;
    tls.cert = cert;
    tls.key = key;
    tls.client_ca = ca;
    return tls;
  }
  // Fails the test unless LoadTlsFiles refuses `tls` with INVALID_ARGUMENT and
  // a message holding every needle.
  static void ExpectRefused(const TlsConfig& tls, std::initializer_list<std::string> needles) {
    StatusOr<TlsFiles> files = LoadTlsFiles(tls);
    ASSERT_FALSE(files.ok()) << "accepted cert " << tls.cert << " key " << tls.key << " ca " << tls.client_ca;
    EXPECT_EQ(files.status().code(), StatusCode::kInvalidArgument);
    for (const std::string& needle : needles) {
      EXPECT_NE(files.status().message().find(needle), std::string::npos)
          << "no '" << needle << "' in: " << files.status().message();
    }
  }

  static testing::TempDir* dir_;
  static bool made_;
};
testing::TempDir* TlsFilesTest::dir_ = nullptr;
bool TlsFilesTest::made_ = false;

TEST_F(TlsFilesTest, ValidFilesAreReadAsTheyAre) {
  StatusOr<TlsFiles> files = LoadTlsFiles(Config(Path("server.pem"), Path("server.key"), Path("ca.pem")));
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->cert_chain, Read("server.pem"));
  EXPECT_EQ(files->private_key, Read("server.key"));
  EXPECT_EQ(files->client_ca, Read("ca.pem"));
  files = LoadTlsFiles(Config(Path("server.pem"), Path("server.key")));
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(files->client_ca, "");
}

TEST_F(TlsFilesTest, BundleOfSeveralCertificatesIsAccepted) {
  // A chain (leaf first) and a CA bundle of two CAs.
  testing::TempDir dir;
  const std::string chain = dir.Write("chain.pem", Read("server.pem") + Read("ca.pem"));
  const std::string bundle = dir.Write("bundle.pem", Read("ca.pem") + Read("other_ca.pem"));
  StatusOr<TlsFiles> files = LoadTlsFiles(Config(chain, Path("server.key"), bundle));
  EXPECT_TRUE(files.ok()) << files.status().ToString();
}

TEST_F(TlsFilesTest, CertificateProblemsNameTheFile) {
  testing::TempDir dir;
  const std::string garbage = dir.Write("garbage.pem", "not a certificate\n");
  const std::string broken = dir.Write("broken.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
  ExpectRefused(Config(garbage, Path("server.key")), {"tls.cert '" + garbage + "'", "no PEM certificate"});
  ExpectRefused(Config(broken, Path("server.key")), {"tls.cert '" + broken + "'", "not a valid X.509"});
  ExpectRefused(Config(Path("expired_client.pem"), Path("expired_client.key")), {"has expired"});
  ExpectRefused(Config(Path("future_server.pem"), Path("future_server.key")),
                {"tls.cert '" + Path("future_server.pem") + "'", "not valid yet"});
  ExpectRefused(Config(dir.Path("missing.pem"), Path("server.key")), {"cannot be opened"});
}

TEST_F(TlsFilesTest, KeyProblemsNameTheFile) {
  ExpectRefused(Config(Path("server.pem"), Path("client.key")),
                {"tls.key '" + Path("client.key") + "'", "does not match the certificate"});
  ExpectRefused(Config(Path("server.pem"), Path("ca.pem")),
                {"tls.key '" + Path("ca.pem") + "'", "not a PEM private key"});
  testing::TempDir dir;
  const std::string encrypted = dir.Path("encrypted.key");
  const std::string command =
      "openssl pkey -in '" + Path("server.key") + "' -aes256 -passout pass:x -out '" + encrypted + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0);
  ExpectRefused(Config(Path("server.pem"), encrypted), {"tls.key '" + encrypted + "'", "encrypted"});
}

TEST_F(TlsFilesTest, ClientCaProblemsNameTheFile) {
  testing::TempDir dir;
  const std::string empty = dir.Write("empty.pem", "");
  ExpectRefused(Config(Path("server.pem"), Path("server.key"), empty),
                {"tls.client_ca '" + empty + "'", "no PEM certificate"});
}

TEST_F(TlsFilesTest, HugeFileIsRefusedWithoutReadingItAll) {
  testing::TempDir dir;
  const std::string huge = dir.Write("huge.pem", std::string(kMaxTlsFileBytes + 1, 'A'));
  ExpectRefused(Config(huge, Path("server.key")), {"tls.cert '" + huge + "'", "larger than"});
}

TEST_F(TlsFilesTest, OffIsAnError) { ExpectRefused(TlsConfig{}, {"not configured"}); }

}  // namespace
}  // namespace es
