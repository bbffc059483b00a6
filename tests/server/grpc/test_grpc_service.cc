// KServeService and HealthService (server/grpc/grpc_service.h) on a real
// in-process grpc::Server (127.0.0.1, a free port), called through the
// generated stubs, over a test repository with no hosts running: the
// KServe answers as gRPC replies (live, ready, metadata, unknown models
// NOT_FOUND), draining, the token an AuthPolicy requires (UNAUTHENTICATED,
// PERMISSION_DENIED, open health), grpc.health.v1 Check for "", "liveness"
// and an unknown service, the shared-memory RPCs without a registry, the
// LogSettings RPC (read with an infer token, changed with an admin one), and
// ToGrpcStatus.
#include "server/grpc/grpc_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "tests/common/temp_dir.h"
#include "tests/server/kserve/hostless_parts.h"

namespace es {
namespace {

class GrpcServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = WriteHostlessRepository(dir_);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = std::move(config).value();
  }

  // Builds the collaborators as the router does (no host supervisors:
  // versions are READY, no model is ready to run) and serves them.
  // `tokens`: require tokens (infer and admin), with health open or not.
  void Start(bool tokens = false, bool open_health = true) {
    if (tokens) {
      config_.auth.tokens_file = WriteTestTokens(dir_);
      config_.auth.open_health = open_health;
    }
    auto auth = AuthPolicy::Load(config_.auth);
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::move(auth).value();
    parts_ = std::make_unique<HostlessParts>(&config_);
    ASSERT_TRUE(parts_->started.ok()) << parts_->started.ToString();
    kserve_ = std::make_unique<KServeService>(parts_->answers.get(), parts_->calls.get(), auth_.get(), nullptr,
                                              &log_settings_);
    health_ = std::make_unique<HealthService>(parts_->answers.get(), auth_.get());

    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(kserve_.get());
    builder.RegisterService(health_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel);
    health_stub_ = grpc::health::v1::Health::NewStub(channel);
  }

  void TearDown() override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
      server_->Wait();
    }
    server_.reset();
    health_.reset();
    kserve_.reset();
    parts_.reset();
    ApplyLogSettings(LogSettings{});  // what a test changed does not reach the next
  }

  // A client context with a bounded deadline and, when given, a token.
  static std::unique_ptr<grpc::ClientContext> Context(const char* token = nullptr) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (token != nullptr) ctx->AddMetadata("authorization", std::string("Bearer ") + token);
    return ctx;
  }

  grpc::Status ModelMetadata(const std::string& name, inference::ModelMetadataResponse* resp,
                             const char* token = nullptr) {
    inference::ModelMetadataRequest req;
    req.set_name(name);
    return stub_->ModelMetadata(Context(token).get(), req, resp);
  }

  grpc::Status HealthCheck(const std::string& service, grpc::health::v1::HealthCheckResponse* resp,
                           const char* token = nullptr) {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    return health_stub_->Check(Context(token).get(), req, resp);
  }

  testing::TempDir dir_;
  ServerConfig config_;
  std::unique_ptr<HostlessParts> parts_;
  std::unique_ptr<AuthPolicy> auth_;
  // What LogSettings calls applied, on the server's threads.
  std::vector<LogSettings> Applied() {
    MutexLock lock(&applied_mu_);
    return applied_;
  }
  Mutex applied_mu_;
  std::vector<LogSettings> applied_ ABSL_GUARDED_BY(applied_mu_);
  LogSettingsReply log_settings_{[this](const LogSettings& settings) {
    {
      MutexLock lock(&applied_mu_);
      applied_.push_back(settings);
    }
    ApplyLogSettings(settings);
  }};
  std::unique_ptr<KServeService> kserve_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
};

TEST(ToGrpcStatusTest, KeepsTheCodeAndTheMessage) {
  EXPECT_TRUE(ToGrpcStatus(Status::Ok()).ok());
  const grpc::Status nf = ToGrpcStatus(Status::NotFound("unknown model 'x'"));
  EXPECT_EQ(nf.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(nf.error_message(), "unknown model 'x'");
  EXPECT_EQ(ToGrpcStatus(Status::ResourceExhausted("busy")).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(Status::Unauthenticated("no")).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ToGrpcStatus(Status::PermissionDenied("no")).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(GrpcServiceTest, ServerLiveIsTrueAndServerReadyFalseWithoutHosts) {
  Start();
  inference::ServerLiveResponse live;
  grpc::Status s = stub_->ServerLive(Context().get(), inference::ServerLiveRequest(), &live);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  ready.set_ready(true);
  s = stub_->ServerReady(Context().get(), inference::ServerReadyRequest(), &ready);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(ready.ready()) << "mlp has no host up";
}

TEST_F(GrpcServiceTest, ServerReadyIsTrueWithoutModelsUntilDraining) {
  config_.models.clear();
  Start();
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerReady(Context().get(), inference::ServerReadyRequest(), &ready).ok());
  EXPECT_TRUE(ready.ready());
  parts_->calls->SetAccepting(false);
  ASSERT_TRUE(stub_->ServerReady(Context().get(), inference::ServerReadyRequest(), &ready).ok());
  EXPECT_FALSE(ready.ready());
}

TEST_F(GrpcServiceTest, ServerMetadataAnswersWithoutSharedMemoryExtension) {
  Start();
  inference::ServerMetadataResponse meta;
  grpc::Status s = stub_->ServerMetadata(Context().get(), inference::ServerMetadataRequest(), &meta);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(meta.name(), "ensemble-serve");
  for (const std::string& e : meta.extensions()) EXPECT_NE(e, "system_shared_memory");
}

TEST_F(GrpcServiceTest, ModelMetadataAnswersAKnownModelAndNotFoundForAnUnknownOne) {
  Start();
  inference::ModelMetadataResponse meta;
  grpc::Status s = ModelMetadata("mlp", &meta);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(meta.name(), "mlp");
  ASSERT_EQ(meta.versions_size(), 1);
  EXPECT_EQ(meta.versions(0), "1");
  ASSERT_EQ(meta.inputs_size(), 1);
  EXPECT_EQ(meta.inputs(0).name(), "input");

  inference::ModelMetadataResponse unknown;
  s = ModelMetadata("nope", &unknown);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("'nope'"), std::string::npos) << s.error_message();
}

TEST_F(GrpcServiceTest, ModelReadyAndConfigAnswerThroughTheService) {
  Start();
  inference::ModelReadyRequest ready_req;
  ready_req.set_name("mlp");
  inference::ModelReadyResponse ready;
  ready.set_ready(true);
  ASSERT_TRUE(stub_->ModelReady(Context().get(), ready_req, &ready).ok());
  EXPECT_FALSE(ready.ready());
  ready_req.set_name("nope");
  EXPECT_EQ(stub_->ModelReady(Context().get(), ready_req, &ready).error_code(), grpc::StatusCode::NOT_FOUND);

  inference::ModelConfigRequest config_req;
  config_req.set_name("mlp");
  inference::ModelConfigResponse config;
  ASSERT_TRUE(stub_->ModelConfig(Context().get(), config_req, &config).ok());
  EXPECT_EQ(config.config().name(), "mlp");
  EXPECT_EQ(config.config().max_batch_size(), 8);
}

TEST_F(GrpcServiceTest, ModelInferOfAnUnknownModelIsNotFoundAndGivesItsPlaceBack) {
  Start();
  inference::ModelInferRequest req;
  req.set_model_name("nope");
  inference::ModelInferResponse resp;
  grpc::Status s = stub_->ModelInfer(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  // The place goes when gRPC is done with the call (OnDone), which may come
  // just after the client has its answer.
  EXPECT_TRUE(parts_->calls->WaitForInFlight(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (parts_->calls->held() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(parts_->calls->held(), 0);
}

TEST_F(GrpcServiceTest, ModelInferWhileDrainingIsUnavailable) {
  Start();
  parts_->calls->SetAccepting(false);
  inference::ModelInferRequest req;
  req.set_model_name("mlp");
  inference::ModelInferResponse resp;
  grpc::Status s = stub_->ModelInfer(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(GrpcServiceTest, RepositoryModelLoadOutsideExplicitModeIsUnavailable) {
  Start();
  inference::RepositoryModelLoadRequest req;
  req.set_model_name("mlp");
  inference::RepositoryModelLoadResponse resp;
  grpc::Status s = stub_->RepositoryModelLoad(Context().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("--model-control-mode"), std::string::npos) << s.error_message();
}

TEST_F(GrpcServiceTest, RepositoryIndexListsTheModel) {
  Start();
  inference::RepositoryIndexResponse index;
  ASSERT_TRUE(stub_->RepositoryIndex(Context().get(), inference::RepositoryIndexRequest(), &index).ok());
  bool found = false;
  for (const auto& m : index.models()) found = found || m.name() == "mlp";
  EXPECT_TRUE(found) << index.DebugString();
}

TEST_F(GrpcServiceTest, SharedMemoryRpcsAreUnavailableWithoutARegistry) {
  Start();
  inference::SystemSharedMemoryStatusResponse status;
  EXPECT_EQ(stub_->SystemSharedMemoryStatus(Context().get(), inference::SystemSharedMemoryStatusRequest(), &status)
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  inference::SystemSharedMemoryRegisterRequest reg;
  reg.set_name("r");
  reg.set_key("/es_test_region");
  reg.set_byte_size(64);
  inference::SystemSharedMemoryRegisterResponse reg_resp;
  EXPECT_EQ(stub_->SystemSharedMemoryRegister(Context().get(), reg, &reg_resp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  inference::SystemSharedMemoryUnregisterResponse unreg;
  EXPECT_EQ(
      stub_->SystemSharedMemoryUnregister(Context().get(), inference::SystemSharedMemoryUnregisterRequest(), &unreg)
          .error_code(),
      grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcServiceTest, HealthCheckReportsReadinessLivenessAndUnknownServices) {
  Start();
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(HealthCheck("", &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING) << "mlp has no host up";
  ASSERT_TRUE(HealthCheck("inference.GRPCInferenceService", &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  ASSERT_TRUE(HealthCheck("liveness", &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << "liveness is not readiness";
  grpc::Status s = HealthCheck("some.OtherService", &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("some.OtherService"), std::string::npos) << s.error_message();
}

TEST_F(GrpcServiceTest, HealthCheckIsServingWhenTheServerIsReady) {
  config_.models.clear();
  Start();
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(HealthCheck("", &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(GrpcServiceTest, ATokenPolicyRefusesCallsWithoutAValidToken) {
  Start(/*tokens=*/true);
  inference::ModelMetadataResponse meta;
  EXPECT_EQ(ModelMetadata("mlp", &meta).error_code(), grpc::StatusCode::UNAUTHENTICATED) << "no token";
  EXPECT_EQ(ModelMetadata("mlp", &meta, "not-a-token").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status s = ModelMetadata("mlp", &meta, kTestInferToken);
  EXPECT_TRUE(s.ok()) << s.error_message();
  s = ModelMetadata("mlp", &meta, kTestAdminToken);
  EXPECT_TRUE(s.ok()) << s.error_message();

  // The token is checked before the call runs: an infer call without one
  // never reaches admission.
  inference::ModelInferRequest infer;
  infer.set_model_name("nope");
  inference::ModelInferResponse infer_resp;
  EXPECT_EQ(stub_->ModelInfer(Context().get(), infer, &infer_resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(GrpcServiceTest, AnInferTokenMayNotMakeAdministrativeCalls) {
  Start(/*tokens=*/true);
  inference::RepositoryModelLoadRequest load;
  load.set_model_name("mlp");
  inference::RepositoryModelLoadResponse load_resp;
  EXPECT_EQ(stub_->RepositoryModelLoad(Context(kTestInferToken).get(), load, &load_resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  inference::SystemSharedMemoryStatusResponse shm;
  EXPECT_EQ(stub_->SystemSharedMemoryStatus(Context(kTestInferToken).get(), inference::SystemSharedMemoryStatusRequest(),
                                            &shm)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // An admin token passes the check and gets the call's own answer.
  EXPECT_EQ(stub_->RepositoryModelLoad(Context(kTestAdminToken).get(), load, &load_resp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcServiceTest, LogSettingsAreReadWithAnInferTokenAndChangedOnlyWithAnAdminOne) {
  Start(/*tokens=*/true);
  inference::LogSettingsResponse read;
  ASSERT_TRUE(stub_->LogSettings(Context(kTestInferToken).get(), inference::LogSettingsRequest(), &read).ok());
  EXPECT_EQ(read.settings().size(), 6u);
  EXPECT_EQ(read.settings().at("log_verbose_level").uint32_param(), 0u);

  inference::LogSettingsRequest verbose;
  (*verbose.mutable_settings())["log_verbose_level"].set_uint32_param(2);
  inference::LogSettingsResponse changed;
  EXPECT_EQ(stub_->LogSettings(Context(kTestInferToken).get(), verbose, &changed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Applied().empty());
  ASSERT_TRUE(stub_->LogSettings(Context(kTestAdminToken).get(), verbose, &changed).ok());
  EXPECT_EQ(changed.settings().at("log_verbose_level").uint32_param(), 2u);
  ASSERT_EQ(Applied().size(), 1u);
  EXPECT_EQ(Applied()[0].verbose_level, 2u);

  inference::LogSettingsRequest file;
  (*file.mutable_settings())["log_file"].set_string_param("/tmp/elsewhere.log");
  const grpc::Status refused = stub_->LogSettings(Context(kTestAdminToken).get(), file, &changed);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("log_file"), std::string::npos) << refused.error_message();

  inference::ServerMetadataResponse meta;
  ASSERT_TRUE(stub_->ServerMetadata(Context(kTestInferToken).get(), inference::ServerMetadataRequest(), &meta).ok());
  EXPECT_NE(std::find(meta.extensions().begin(), meta.extensions().end(), "logging"), meta.extensions().end());
}

TEST_F(GrpcServiceTest, HealthNeedsNoTokenWhenOpenAndAValidOneWhenClosed) {
  Start(/*tokens=*/true, /*open_health=*/true);
  inference::ServerLiveResponse live;
  EXPECT_TRUE(stub_->ServerLive(Context().get(), inference::ServerLiveRequest(), &live).ok());
  grpc::health::v1::HealthCheckResponse resp;
  EXPECT_TRUE(HealthCheck("liveness", &resp).ok());
  TearDown();

  Start(/*tokens=*/true, /*open_health=*/false);
  EXPECT_EQ(stub_->ServerLive(Context().get(), inference::ServerLiveRequest(), &live).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(HealthCheck("liveness", &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(HealthCheck("liveness", &resp, kTestInferToken).ok());
  grpc::Status s = stub_->ServerLive(Context(kTestInferToken).get(), inference::ServerLiveRequest(), &live);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

}  // namespace
}  // namespace es
