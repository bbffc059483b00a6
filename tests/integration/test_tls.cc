// TLS, mTLS and bearer tokens end to end: a real ensemble-server
// with certificates made at test time by make_test_certs.sh (Debian's
// openssl), called through the C++ client library (es::client), the raw
// gRPC health stub, ensemble-cli and ensemble-loadgen.
//
// Servers:
//   MtlsAuthTest (one server for the suite): tls with client_ca (mTLS), auth
//     with open_health, explicit model control (mlp loaded), --log-level debug.
//   TlsOnlyTest: tls without client_ca, auth with open_health false,
//     metrics_address 127.0.0.2 (only its printed address is checked: no
//     traffic goes anywhere but 127.0.0.1).
//   TlsStartupTest: PEM files that must stop the start with the file's name.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "clients/client.h"
#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// At least 16 characters (AuthPolicy refuses guessable tokens).
constexpr char kAdminToken[] = "admin-5f3b2a9c71d04e86b2";
constexpr char kInferToken[] = "infer-1e7d9b3c5a2f4068c9";
constexpr char kUnknownToken[] = "unknown-9a8b7c6d5e4f3a2b";

// The certificates and the tokens file, made once per test binary.
class Certs {
 public:
  static const Certs& Get() {
    static const Certs certs;  // its folder is removed at exit
    return certs;
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string Path(const std::string& name) const { return dir_.Path(name); }

 private:
  Certs() : dir_("es_tls_certs_") {
    std::string output;
    const int rc = RunCommand(
        {"/bin/bash", std::string(es::test_paths::kIntegrationSourceDir) + "/make_test_certs.sh", dir_.root()},
        seconds(60), &output);
    ok_ = rc == 0;
    if (!ok_) error_ = "make_test_certs.sh exited " + std::to_string(rc) + ": " + output;
    ok_ = ok_ && WriteTextFile(dir_.path() / "tokens.txt",
                               std::string("# test tokens\nadmin ") + kAdminToken + "\ninfer " + kInferToken + "\n");
  }
  TempDir dir_;
  bool ok_ = false;
  std::string error_;
};

std::string TlsYaml(const Certs& c, bool client_ca) {
  std::string y = "tls:\n  cert: " + c.Path("server.pem") + "\n  key: " + c.Path("server.key") + "\n";
  if (client_ca) y += "  client_ca: " + c.Path("ca.pem") + "\n";
  return y;
}

std::string AuthYaml(const Certs& c, bool open_health) {
  return "auth:\n  tokens_file: " + c.Path("tokens.txt") + "\n  open_health: " + (open_health ? "true" : "false") +
         "\n";
}

// Client options: TLS with `ca` as roots ("" = plaintext), the client
// certificate NAME.pem/NAME.key when `client` is set, and `token`.
es::client::ClientOptions ClientOpts(const Certs& c, const std::string& ca, const std::string& client,
                                     const std::string& token) {
  es::client::ClientOptions o;
  o.timeout = milliseconds(10000);
  if (!ca.empty()) {
    const es::client::Status s = es::client::ReadTlsFiles(c.Path(ca), client.empty() ? "" : c.Path(client + ".pem"),
                                                          client.empty() ? "" : c.Path(client + ".key"), &o);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  o.token = token;
  return o;
}

std::shared_ptr<grpc::ChannelCredentials> SslCreds(const Certs& c, const std::string& client) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadTextFile(c.Path("ca.pem"));
  if (!client.empty()) {
    ssl.pem_cert_chain = ReadTextFile(c.Path(client + ".pem"));
    ssl.pem_private_key = ReadTextFile(c.Path(client + ".key"));
  }
  return grpc::SslCredentials(ssl);
}

inference::ModelInferRequest MlpRequest() { return ImageRequest("mlp", RandomImages(1, 7)); }

// grpc.health.v1 Check with an optional token; the status.
grpc::Status HealthCheck(const ServerProcess& server, const std::string& token) {
  auto stub = server.HealthStub();
  grpc::ClientContext ctx;
  SetDeadline(&ctx, milliseconds(10000));
  if (!token.empty()) ctx.AddMetadata("authorization", std::string("Bearer ") + token);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, request, &response);
}

// ---- mTLS + tokens: one server for the suite --------------------------------

class MtlsAuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const Certs& c = Certs::Get();
    if (!c.ok()) return;
    ServerProcess::Options options;
    options.extra_config = TlsYaml(c, /*client_ca=*/true) + AuthYaml(c, /*open_health=*/true);
    options.extra_args = {"--model-control-mode", "explicit", "--load-model", "mlp", "--log-level", "debug"};
    options.channel_credentials = SslCreds(c, "client");
    server_ = ServerProcess::Start(options).release();
    if (server_ == nullptr) start_error_ = ServerProcess::last_start_error();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(Certs::Get().ok()) << Certs::Get().error();
    ASSERT_NE(server_, nullptr) << start_error_;
  }
  std::unique_ptr<es::client::Client> Client(const std::string& ca, const std::string& client,
                                             const std::string& token) const {
    return es::client::Client::Create(server_->address(), ClientOpts(Certs::Get(), ca, client, token));
  }
  // Waits (at most 60 s) until mlp answers an infer-token call.
  void WaitMlpReady() const {
    auto client = Client("ca.pem", "client", kInferToken);
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      auto ready = client->ModelReady("mlp");
      if (ready.ok() && *ready) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
    FAIL() << "mlp not ready within 60 s";
  }

  static ServerProcess* server_;
  static std::string start_error_;
};
ServerProcess* MtlsAuthTest::server_ = nullptr;
std::string MtlsAuthTest::start_error_;

TEST_F(MtlsAuthTest, ClientCertificateAndInferTokenServe) {
  WatchdogScope watchdog(seconds(120), "MtlsAuthTest.ClientCertificateAndInferTokenServe");
  WaitMlpReady();
  auto client = Client("ca.pem", "client", kInferToken);
  auto live = client->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_TRUE(*live);
  auto meta = client->ModelMetadata("mlp");
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  auto answer = client->Infer(MlpRequest());
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ(answer->model_name(), "mlp");
  auto stats = client->ModelStatistics("mlp");
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  // The async path carries the token too.
  auto future = client->InferFuture(MlpRequest());
  auto async_answer = future.get();
  EXPECT_TRUE(async_answer.ok()) << async_answer.status().ToString();
}

TEST_F(MtlsAuthTest, PlaintextClientFails) {
  WatchdogScope watchdog(seconds(60), "MtlsAuthTest.PlaintextClientFails");
  auto client = Client("", "", kInferToken);
  auto live = client->ServerLive();
  ASSERT_FALSE(live.ok());
  EXPECT_EQ(live.status().code(), grpc::StatusCode::UNAVAILABLE) << live.status().ToString();
}

TEST_F(MtlsAuthTest, ClientWithoutCertificateIsRefused) {
  WatchdogScope watchdog(seconds(60), "MtlsAuthTest.ClientWithoutCertificateIsRefused");
  auto live = Client("ca.pem", "", kInferToken)->ServerLive();
  ASSERT_FALSE(live.ok());
  EXPECT_EQ(live.status().code(), grpc::StatusCode::UNAVAILABLE) << live.status().ToString();
}

TEST_F(MtlsAuthTest, CertificateOfAnotherCaIsRefused) {
  WatchdogScope watchdog(seconds(60), "MtlsAuthTest.CertificateOfAnotherCaIsRefused");
  auto live = Client("ca.pem", "other_client", kInferToken)->ServerLive();
  ASSERT_FALSE(live.ok());
  EXPECT_EQ(live.status().code(), grpc::StatusCode::UNAVAILABLE) << live.status().ToString();
}

TEST_F(MtlsAuthTest, ExpiredClientCertificateIsRefused) {
  WatchdogScope watchdog(seconds(60), "MtlsAuthTest.ExpiredClientCertificateIsRefused");
  auto live = Client("ca.pem", "expired_client", kInferToken)->ServerLive();
  ASSERT_FALSE(live.ok());
  EXPECT_EQ(live.status().code(), grpc::StatusCode::UNAVAILABLE) << live.status().ToString();
  // The same connection setup with the valid certificate works (the refusal
  // is the certificate's, not the test's).
  EXPECT_TRUE(Client("ca.pem", "client", kInferToken)->ServerLive().ok());
}

TEST_F(MtlsAuthTest, MissingOrUnknownTokenIsUnauthenticated) {
  WatchdogScope watchdog(seconds(60), "MtlsAuthTest.MissingOrUnknownTokenIsUnauthenticated");
  for (const std::string token : {"", kUnknownToken}) {
    auto client = Client("ca.pem", "client", token);
    auto meta = client->ModelMetadata("mlp");
    ASSERT_FALSE(meta.ok()) << "token '" << token << "'";
    EXPECT_EQ(meta.status().code(), grpc::StatusCode::UNAUTHENTICATED) << meta.status().ToString();
    auto answer = client->Infer(MlpRequest());
    ASSERT_FALSE(answer.ok());
    EXPECT_EQ(answer.status().code(), grpc::StatusCode::UNAUTHENTICATED) << answer.status().ToString();
  }
  // Not a bearer token at all.
  auto stub = server_->Stub();
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ctx.AddMetadata("authorization", std::string("Basic ") + kInferToken);
  inference::ServerMetadataRequest request;
  inference::ServerMetadataResponse response;
  const grpc::Status status = stub->ServerMetadata(&ctx, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(status);
}

// ModelStreamInfer: the token is checked once, when the stream opens.
TEST_F(MtlsAuthTest, StreamNeedsAToken) {
  WatchdogScope watchdog(seconds(120), "MtlsAuthTest.StreamNeedsAToken");
  WaitMlpReady();
  for (const std::string& token : {std::string(), std::string(kUnknownToken), std::string(kInferToken)}) {
    auto client = Client("ca.pem", "client", token);
    grpc::ClientContext ctx;
    client->SetDeadline(&ctx, {});
    auto stream = client->stub().ModelStreamInfer(&ctx);
    inference::ModelInferRequest request = MlpRequest();
    request.set_id("s1");
    stream->Write(request);
    stream->WritesDone();
    inference::ModelStreamInferResponse answer;
    const bool got = stream->Read(&answer);
    const grpc::Status status = stream->Finish();
    if (token == kInferToken) {
      ASSERT_TRUE(got) << Describe(status);
      EXPECT_EQ(answer.error_message(), "");
      EXPECT_EQ(answer.infer_response().id(), "s1");
      EXPECT_TRUE(status.ok()) << Describe(status);
    } else {
      EXPECT_FALSE(got) << "a stream answered with token '" << token << "'";
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(status);
    }
  }
}

TEST_F(MtlsAuthTest, InferTokenMayNotLoadOrUnload) {
  WatchdogScope watchdog(seconds(60), "MtlsAuthTest.InferTokenMayNotLoadOrUnload");
  auto client = Client("ca.pem", "client", kInferToken);
  {
    grpc::ClientContext ctx;
    client->SetDeadline(&ctx, {});
    inference::RepositoryModelLoadRequest request;
    request.set_model_name("wide_mlp");
    inference::RepositoryModelLoadResponse response;
    const grpc::Status status = client->stub().RepositoryModelLoad(&ctx, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << Describe(status);
    EXPECT_EQ(status.error_message().find(kInferToken), std::string::npos) << "the message shows the token";
  }
  {
    grpc::ClientContext ctx;
    client->SetDeadline(&ctx, {});
    inference::RepositoryModelUnloadRequest request;
    request.set_model_name("mlp");
    inference::RepositoryModelUnloadResponse response;
    const grpc::Status status = client->stub().RepositoryModelUnload(&ctx, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << Describe(status);
  }
  auto ready = client->ModelReady("mlp");
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_TRUE(*ready) << "an infer token unloaded mlp";
}

TEST_F(MtlsAuthTest, AdminTokenLoadsAndInfers) {
  WatchdogScope watchdog(seconds(120), "MtlsAuthTest.AdminTokenLoadsAndInfers");
  auto client = Client("ca.pem", "client", kAdminToken);
  grpc::ClientContext ctx;
  client->SetDeadline(&ctx, es::client::CallOptions{milliseconds(60000)});
  inference::RepositoryModelLoadRequest request;
  request.set_model_name("wide_mlp");
  inference::RepositoryModelLoadResponse response;
  const grpc::Status status = client->stub().RepositoryModelLoad(&ctx, request, &response);
  ASSERT_TRUE(status.ok()) << Describe(status);
  auto ready = client->ModelReady("wide_mlp");
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_TRUE(*ready);
  auto answer = client->Infer(ImageRequest("wide_mlp", RandomImages(1, 3)));
  EXPECT_TRUE(answer.ok()) << answer.status().ToString();
}

TEST_F(MtlsAuthTest, OpenHealthAnswersWithoutToken) {
  WatchdogScope watchdog(seconds(60), "MtlsAuthTest.OpenHealthAnswersWithoutToken");
  auto client = Client("ca.pem", "client", "");
  auto live = client->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_TRUE(*live);
  auto ready = client->ServerReady();
  EXPECT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_TRUE(HealthCheck(*server_, "").ok());
  // Open health opens health only: the same client's other calls still need a token.
  auto meta = client->ServerMetadata();
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.status().code(), grpc::StatusCode::UNAUTHENTICATED) << meta.status().ToString();
}

TEST_F(MtlsAuthTest, CliAndLoadgenSendTlsAndToken) {
  WatchdogScope watchdog(seconds(120), "MtlsAuthTest.CliAndLoadgenSendTlsAndToken");
  WaitMlpReady();
  const Certs& c = Certs::Get();
  const std::vector<std::string> tls = {"--ssl-ca",           c.Path("ca.pem"), "--ssl-cert",
                                        c.Path("client.pem"), "--ssl-key",      c.Path("client.key")};
  std::string output;
  // The token from the environment (not in argv).
  ASSERT_EQ(setenv("ENSEMBLE_TOKEN", kInferToken, 1), 0);
  std::vector<std::string> cli = {es::test_paths::kCliBin, "--server", server_->address()};
  cli.insert(cli.end(), tls.begin(), tls.end());
  cli.insert(cli.end(), {"infer", "mlp"});
  EXPECT_EQ(RunCommand(cli, seconds(60), &output), 0) << output;
  EXPECT_NE(output.find("probabilities"), std::string::npos) << output;
  // Without the environment's token: refused.
  ASSERT_EQ(unsetenv("ENSEMBLE_TOKEN"), 0);
  EXPECT_EQ(RunCommand(cli, seconds(60), &output), 1) << output;
  EXPECT_NE(output.find("UNAUTHENTICATED"), std::string::npos) << output;
  // --token; without a client certificate the handshake fails.
  std::vector<std::string> no_cert = {es::test_paths::kCliBin, "--server", server_->address(), "--ssl-ca",
                                      c.Path("ca.pem"),        "--token",  kInferToken,        "ready"};
  EXPECT_EQ(RunCommand(no_cert, seconds(60), &output), 1) << output;
  EXPECT_NE(output.find("UNAVAILABLE"), std::string::npos) << output;
  // gRPC's own message names no cause; the CLI says what to check.
  EXPECT_NE(output.find("if the server requires client certificates, that --ssl-cert and --ssl-key"),
            std::string::npos)
      << output;
  // A plaintext client meets the TLS server: the hint says to add --ssl.
  EXPECT_EQ(RunCommand({es::test_paths::kCliBin, "--server", server_->address(), "--token", kInferToken, "ready"},
                       seconds(60), &output),
            1)
      << output;
  EXPECT_NE(output.find("If it serves TLS, add --ssl and --ssl-ca"), std::string::npos) << output;

  // The loadgen's generic-stub calls carry the token: exit 0 means calls
  // succeeded, and no call was refused.
  const std::string json = (server_->dir() / "loadgen.json").string();
  std::vector<std::string> loadgen = {es::test_paths::kLoadgenBin,
                                      "--server",
                                      server_->address(),
                                      "--model",
                                      "mlp",
                                      "--concurrency",
                                      "2",
                                      "--duration-s",
                                      "0.3",
                                      "--warmup-s",
                                      "0.1",
                                      "--max-windows",
                                      "1",
                                      "--ceiling-model",
                                      "none",
                                      "--quiet",
                                      "--json",
                                      json,
                                      "--token",
                                      kInferToken};
  loadgen.insert(loadgen.end(), tls.begin(), tls.end());
  EXPECT_EQ(RunCommand(loadgen, seconds(60), &output), 0) << output;
  const std::string report = ReadTextFile(json);
  EXPECT_EQ(report.find("UNAUTHENTICATED"), std::string::npos) << report;
  EXPECT_NE(report.find("\"client_errors\": {}"), std::string::npos) << report;
}

// Last in the suite: every token above went by; none may be in the log.
TEST_F(MtlsAuthTest, TokensNeverAppearInTheLog) {
  WatchdogScope watchdog(seconds(60), "MtlsAuthTest.TokensNeverAppearInTheLog");
  // One more of each kind of call, so this test stands alone too.
  for (const char* token : {kAdminToken, kInferToken, kUnknownToken}) {
    (void)Client("ca.pem", "client", token)->ModelMetadata("mlp");
    (void)Client("ca.pem", "client", token)->Infer(MlpRequest());
  }
  const std::string log = ReadTextFile(server_->dir() / "server.log");
  ASSERT_NE(log.find("debug"), std::string::npos) << "the server did not log at debug level";
  for (const char* token : {kAdminToken, kInferToken, kUnknownToken}) {
    EXPECT_EQ(log.find(token), std::string::npos) << "token " << token << " is in the server's log";
  }
}

// ---- TLS without client certificates; health closed -------------------------

TEST(TlsOnlyTest, ServerCertificateOnlyClosedHealthAndMetricsAddress) {
  WatchdogScope watchdog(seconds(180), "TlsOnlyTest.ServerCertificateOnlyClosedHealthAndMetricsAddress");
  const Certs& c = Certs::Get();
  ASSERT_TRUE(c.ok()) << c.error();
  ServerProcess::Options options;
  options.extra_config =
      TlsYaml(c, /*client_ca=*/false) + AuthYaml(c, /*open_health=*/false) + "metrics_address: 127.0.0.2\n";
  options.channel_credentials = SslCreds(c, "");
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  // /metrics bound where metrics_address says (not listen_address).
  EXPECT_EQ(server->metrics_address().rfind("127.0.0.2:", 0), 0u) << server->metrics_address();

  // No client certificate needed; the token still is, health included.
  auto with_token = es::client::Client::Create(server->address(), ClientOpts(c, "ca.pem", "", kInferToken));
  auto live = with_token->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_TRUE(*live);
  auto without = es::client::Client::Create(server->address(), ClientOpts(c, "ca.pem", "", ""));
  auto refused = without->ServerLive();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), grpc::StatusCode::UNAUTHENTICATED) << refused.status().ToString();
  const grpc::Status health = HealthCheck(*server, "");
  EXPECT_EQ(health.error_code(), grpc::StatusCode::UNAUTHENTICATED) << Describe(health);
  EXPECT_TRUE(HealthCheck(*server, kInferToken).ok());

  // A client that trusts another CA refuses the server's certificate.
  auto wrong_ca = es::client::Client::Create(server->address(), ClientOpts(c, "other_ca.pem", "", kInferToken));
  auto distrust = wrong_ca->ServerLive();
  ASSERT_FALSE(distrust.ok());
  EXPECT_EQ(distrust.status().code(), grpc::StatusCode::UNAVAILABLE) << distrust.status().ToString();
  // Plaintext to a TLS port fails.
  auto plain = es::client::Client::Create(server->address(), ClientOpts(c, "", "", kInferToken));
  auto plain_live = plain->ServerLive();
  ASSERT_FALSE(plain_live.ok());
  EXPECT_EQ(plain_live.status().code(), grpc::StatusCode::UNAVAILABLE) << plain_live.status().ToString();
}

// ---- PEM files that must stop the start ------------------------------------

// Starts a server whose tls: block is `tls_yaml`; expects the start to fail
// with every needle in the server's output.
void ExpectStartFails(const std::string& tls_yaml, std::initializer_list<std::string> needles) {
  ServerProcess::Options options;
  options.extra_config = tls_yaml;
  options.startup_timeout = seconds(60);
  auto server = ServerProcess::Start(options);
  ASSERT_FALSE(server) << "the server started with " << tls_yaml;
  const std::string& error = ServerProcess::last_start_error();
  for (const std::string& needle : needles) {
    EXPECT_NE(error.find(needle), std::string::npos) << "no '" << needle << "' in: " << error;
  }
}

TEST(TlsStartupTest, BadPemFilesStopTheStartNamingTheFile) {
  WatchdogScope watchdog(seconds(180), "TlsStartupTest.BadPemFilesStopTheStartNamingTheFile");
  const Certs& c = Certs::Get();
  ASSERT_TRUE(c.ok()) << c.error();
  TempDir dir("es_tls_bad_");
  const std::string garbage = (dir.path() / "garbage.pem").string();
  ASSERT_TRUE(WriteTextFile(garbage, "this is not a certificate\n"));
  const std::string broken = (dir.path() / "broken.pem").string();
  ASSERT_TRUE(WriteTextFile(broken, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"));

  ExpectStartFails("tls: {cert: " + garbage + ", key: " + c.Path("server.key") + "}\n",
                   {"tls.cert '" + garbage + "'", "no PEM certificate"});
  ExpectStartFails("tls: {cert: " + broken + ", key: " + c.Path("server.key") + "}\n",
                   {"tls.cert '" + broken + "'", "not a valid X.509 certificate"});
  ExpectStartFails("tls: {cert: " + c.Path("server.pem") + ", key: " + c.Path("client.key") + "}\n",
                   {"tls.key '" + c.Path("client.key") + "'", "does not match the certificate"});
  ExpectStartFails("tls: {cert: " + c.Path("server.pem") + ", key: " + c.Path("server.pem") + "}\n",
                   {"tls.key '" + c.Path("server.pem") + "'", "not a PEM private key"});
  ExpectStartFails("tls: {cert: " + c.Path("expired_client.pem") + ", key: " + c.Path("expired_client.key") + "}\n",
                   {"tls.cert '" + c.Path("expired_client.pem") + "'", "has expired"});
  // An encrypted key is refused at once (OpenSSL's default would prompt for
  // a passphrase on the terminal: a server hung at start).
  const std::string encrypted = (dir.path() / "encrypted.key").string();
  std::string output;
  ASSERT_EQ(RunCommand({"/usr/bin/openssl", "pkey", "-in", c.Path("server.key"), "-aes256", "-passout", "pass:secret",
                        "-out", encrypted},
                       seconds(30), &output),
            0)
      << output;
  ExpectStartFails("tls: {cert: " + c.Path("server.pem") + ", key: " + encrypted + "}\n",
                   {"tls.key '" + encrypted + "'", "the private key is encrypted"});
  ExpectStartFails(
      "tls: {cert: " + c.Path("server.pem") + ", key: " + c.Path("server.key") + ", client_ca: " + garbage + "}\n",
      {"tls.client_ca '" + garbage + "'", "no PEM certificate"});
}

}  // namespace
}  // namespace es::it
