// Acceptance: every error class of the KServe v2 front end, produced against
// the real server and checked by gRPC code and message (the message names the
// model, and the tensor where there is one). No bad input crashes a process:
// the host pids are the same after all of them, and the server still answers.
//
// The repository is the demo plus two models written at runtime by
// make_test_models.py: `thrower` (forward raises "boom" on a large input) and
// `echo` (variable-size input, to exceed max_request_bytes).
//
// The tests share one server and run in the order they are defined: the
// host-down case (which kills a host) comes last but one, the final test
// checks the server still answers.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

#ifndef ES_INTEGRATION_SOURCE_DIR
#error "ES_INTEGRATION_SOURCE_DIR must be defined"
#endif

namespace es::it {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class ErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    WatchdogScope watchdog(seconds(240), "ErrorsTest: starting the server");
    repo_dir_ = new TempDir("es_errors_repo_");
    const fs::path repo = repo_dir_->path() / "repo";
    if (!CopyDemoRepository(repo, &setup_error_)) return;
    std::string output;
    const int rc = RunCommand({"/usr/bin/python3", ES_INTEGRATION_SOURCE_DIR "/make_test_models.py", repo.string()},
                              seconds(180), &output);
    if (rc != 0) {
      setup_error_ = "make_test_models.py failed (rc " + std::to_string(rc) + "): " + output;
      return;
    }
    ServerProcess::Options options;
    options.repository = repo.string();
    server_ = ServerProcess::Start(options).release();
    if (server_ == nullptr) {
      setup_error_ = ServerProcess::last_start_error();
      return;
    }
    initial_hosts_ = server_->HostPids();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete repo_dir_;
    repo_dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << setup_error_;
    stub_ = server_->Stub();
  }

  grpc::Status InferStatus(const inference::ModelInferRequest& req) { return Infer(*stub_, req).status; }

  static ServerProcess* server_;
  static TempDir* repo_dir_;
  static std::string setup_error_;
  static std::map<std::string, pid_t> initial_hosts_;
  std::unique_ptr<Stub> stub_;
};

ServerProcess* ErrorsTest::server_ = nullptr;
TempDir* ErrorsTest::repo_dir_ = nullptr;
std::string ErrorsTest::setup_error_;
std::map<std::string, pid_t> ErrorsTest::initial_hosts_;

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

TEST_F(ErrorsTest, UnknownModelIsNotFound) {
  WatchdogScope watchdog(seconds(60), "UnknownModel");
  EXPECT_TRUE(
      HasError(InferStatus(ImageRequest("no_such_model", RandomImages(1, 1))), grpc::NOT_FOUND, {"no_such_model"}));
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelMetadataRequest req;
    req.set_name("no_such_model");
    inference::ModelMetadataResponse resp;
    EXPECT_TRUE(HasError(stub_->ModelMetadata(&ctx, req, &resp), grpc::NOT_FOUND, {"no_such_model"}));
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelReadyRequest req;
    req.set_name("no_such_model");
    inference::ModelReadyResponse resp;
    EXPECT_TRUE(HasError(stub_->ModelReady(&ctx, req, &resp), grpc::NOT_FOUND, {"no_such_model"}));
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelStatisticsRequest req;
    req.set_name("no_such_model");
    inference::ModelStatisticsResponse resp;
    EXPECT_TRUE(HasError(stub_->ModelStatistics(&ctx, req, &resp), grpc::NOT_FOUND, {"no_such_model"}));
  }
}

TEST_F(ErrorsTest, UnknownVersionIsNotFound) {
  WatchdogScope watchdog(seconds(60), "UnknownVersion");
  for (const std::string model : {"mlp", "demo_ensemble"}) {
    inference::ModelInferRequest req = ImageRequest(model, RandomImages(1, 1));
    req.set_model_version("7");
    EXPECT_TRUE(HasError(InferStatus(req), grpc::NOT_FOUND, {model, "7"}));
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelMetadataRequest req;
    req.set_name("cnn");
    req.set_version("7");
    inference::ModelMetadataResponse resp;
    EXPECT_TRUE(HasError(stub_->ModelMetadata(&ctx, req, &resp), grpc::NOT_FOUND, {"cnn", "7"}));
  }
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelReadyRequest req;
    req.set_name("cnn");
    req.set_version("7");
    inference::ModelReadyResponse resp;
    EXPECT_TRUE(HasError(stub_->ModelReady(&ctx, req, &resp), grpc::NOT_FOUND, {"cnn", "7"}));
  }
}

TEST_F(ErrorsTest, WrongInputNameIsInvalidArgument) {
  WatchdogScope watchdog(seconds(60), "WrongInputName");
  for (const std::string model : {"mlp", "demo_ensemble"}) {
    auto req = RawRequest(model, {1, 1, 28, 28}, RandomImages(1, 1), "pixels");
    EXPECT_TRUE(HasError(InferStatus(req), grpc::INVALID_ARGUMENT, {model, "pixels"}));
  }
}

TEST_F(ErrorsTest, WrongDatatypeIsInvalidArgument) {
  WatchdogScope watchdog(seconds(60), "WrongDatatype");
  // FP64 with a byte count that fits FP64, and INT32 with one that would fit FP32.
  for (const auto& [datatype, width] :
       std::vector<std::pair<std::string, size_t>>{{"FP64", 8}, {"INT32", 4}, {"FP16", 2}, {"NOPE", 4}}) {
    for (const std::string model : {"cnn", "demo_ensemble"}) {
      SCOPED_TRACE(model + " " + datatype);
      inference::ModelInferRequest req;
      req.set_model_name(model);
      auto* in = req.add_inputs();
      in->set_name("input");
      in->set_datatype(datatype);
      for (int64_t d : {1, 1, 28, 28}) in->add_shape(d);
      req.add_raw_input_contents(std::string(kImageElements * width, '\0'));
      EXPECT_TRUE(HasError(InferStatus(req), grpc::INVALID_ARGUMENT, {model, "input"}));
    }
  }
}

TEST_F(ErrorsTest, WrongShapeIsInvalidArgument) {
  WatchdogScope watchdog(seconds(60), "WrongShape");
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 28, 28},        // no batch dimension
      {1, 784},           // flattened
      {1, 1, 28, 27},     // wrong dim
      {1, 1, 28, 28, 1},  // extra dim
      {-1, 1, 28, 28},    // negative
  };
  for (const auto& shape : shapes) {
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d < 0 ? 1 : d;
    for (const std::string model : {"wide_mlp", "demo_ensemble"}) {
      SCOPED_TRACE(model + " shape rank " + std::to_string(shape.size()) + " last " + std::to_string(shape.back()));
      auto req = RawRequest(model, shape, std::vector<float>(static_cast<size_t>(elements), 0.5f));
      EXPECT_TRUE(HasError(InferStatus(req), grpc::INVALID_ARGUMENT, {model, "input"}));
    }
  }
}

TEST_F(ErrorsTest, BatchOutsideOneToMaxBatchSizeIsInvalidArgument) {
  WatchdogScope watchdog(seconds(60), "BatchSize");
  for (const std::string model : {"mlp", "demo_ensemble"}) {
    EXPECT_TRUE(
        HasError(InferStatus(ImageRequest(model, RandomImages(65, 1))), grpc::INVALID_ARGUMENT, {model, "input"}));
    EXPECT_TRUE(HasError(InferStatus(RawRequest(model, {0, 1, 28, 28}, {})), grpc::INVALID_ARGUMENT, {model, "input"}));
  }
  EXPECT_TRUE(HasError(InferStatus(RawRequest("thrower", {9, 4}, std::vector<float>(36, 1.0f))), grpc::INVALID_ARGUMENT,
                       {"thrower", "input"}));
}

TEST_F(ErrorsTest, WrongInputCountIsInvalidArgument) {
  WatchdogScope watchdog(seconds(60), "InputCount");
  for (const std::string model : {"mlp", "demo_ensemble"}) {
    inference::ModelInferRequest none;
    none.set_model_name(model);
    EXPECT_TRUE(HasError(InferStatus(none), grpc::INVALID_ARGUMENT, {model}));

    auto two = ImageRequest(model, RandomImages(1, 1));
    auto* extra = two.add_inputs();
    extra->set_name("input2");
    extra->set_datatype("FP32");
    for (int64_t d : {1, 1, 28, 28}) extra->add_shape(d);
    two.add_raw_input_contents(Bytes(RandomImages(1, 2)));
    EXPECT_TRUE(HasError(InferStatus(two), grpc::INVALID_ARGUMENT, {model}));

    // The same input twice.
    auto twice = ImageRequest(model, RandomImages(1, 1));
    *twice.add_inputs() = twice.inputs(0);
    twice.add_raw_input_contents(twice.raw_input_contents(0));
    EXPECT_TRUE(HasError(InferStatus(twice), grpc::INVALID_ARGUMENT, {model}));
  }
}

TEST_F(ErrorsTest, ByteSizeThatDisagreesWithTheShapeIsInvalidArgument) {
  WatchdogScope watchdog(seconds(60), "ByteSize");
  for (const std::string model : {"cnn", "demo_ensemble"}) {
    // Shape says 2 images, raw has 1; then 3.
    EXPECT_TRUE(HasError(InferStatus(RawRequest(model, {2, 1, 28, 28}, RandomImages(1, 1))), grpc::INVALID_ARGUMENT,
                         {model, "input"}));
    EXPECT_TRUE(HasError(InferStatus(RawRequest(model, {2, 1, 28, 28}, RandomImages(3, 1))), grpc::INVALID_ARGUMENT,
                         {model, "input"}));
    // One byte short.
    auto req = ImageRequest(model, RandomImages(1, 1));
    req.mutable_raw_input_contents(0)->pop_back();
    EXPECT_TRUE(HasError(InferStatus(req), grpc::INVALID_ARGUMENT, {model, "input"}));
    // Typed contents with the wrong element count.
    inference::ModelInferRequest typed;
    typed.set_model_name(model);
    auto* in = typed.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    for (int64_t d : {1, 1, 28, 28}) in->add_shape(d);
    for (int i = 0; i < 100; ++i) in->mutable_contents()->add_fp32_contents(0.5f);
    EXPECT_TRUE(HasError(InferStatus(typed), grpc::INVALID_ARGUMENT, {model, "input"}));
  }
}

TEST_F(ErrorsTest, RawAndTypedContentsTogetherAreInvalidArgument) {
  WatchdogScope watchdog(seconds(60), "RawAndTyped");
  for (const std::string model : {"mlp", "demo_ensemble"}) {
    const std::vector<float> images = RandomImages(1, 3);
    auto req = ImageRequest(model, images);
    for (float v : images) req.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
    EXPECT_TRUE(HasError(InferStatus(req), grpc::INVALID_ARGUMENT, {model, "input"}));
  }
}

TEST_F(ErrorsTest, RequestOverMaxRequestBytesIsResourceExhausted) {
  WatchdogScope watchdog(seconds(60), "RequestTooLarge");
  // 300,000 FP32 = 1.2 MB > max_request_bytes (1 MiB) of the fixture.
  const std::vector<float> big(300000, 0.25f);
  EXPECT_TRUE(HasError(InferStatus(RawRequest("echo", {1, 300000}, big)), grpc::RESOURCE_EXHAUSTED, {"echo"}));
  // Just under the limit is served (variable-size output included).
  const std::vector<float> fits(200000, 0.25f);
  InferResult ok = Infer(*stub_, RawRequest("echo", {1, 200000}, fits));
  ASSERT_TRUE(ok.status.ok()) << Describe(ok.status);
  Fp32Tensor out;
  ASSERT_TRUE(GetFp32Output(ok.response, "output", &out));
  EXPECT_EQ(out.shape, (std::vector<int64_t>{1, 200000}));
  EXPECT_EQ(out.values.front(), 1.25f);
  EXPECT_EQ(out.values.back(), 1.25f);
}

TEST_F(ErrorsTest, ForwardThatThrowsIsInternalAndTheHostLivesOn) {
  WatchdogScope watchdog(seconds(60), "ForwardThrows");
  const pid_t cpu0 = server_->HostPids()["cpu0"];
  const grpc::Status boom = InferStatus(RawRequest("thrower", {1, 4}, {1e7f, 1e7f, 1e7f, 1e7f}));
  EXPECT_TRUE(HasError(boom, grpc::INTERNAL, {"thrower", "boom"}));
  // The same host answers a good request, on the same model and on another.
  InferResult good = Infer(*stub_, RawRequest("thrower", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
  ASSERT_TRUE(good.status.ok()) << Describe(good.status);
  Fp32Tensor out;
  ASSERT_TRUE(GetFp32Output(good.response, "output", &out));
  EXPECT_EQ(out.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(out.values, (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16}));
  EXPECT_TRUE(Infer(*stub_, ImageRequest("mlp", RandomImages(2, 9))).status.ok());
  // Several throws in a row do not wear it down.
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(HasError(InferStatus(RawRequest("thrower", {1, 4}, {1e7f, 0, 0, 0})), grpc::INTERNAL, {"boom"}));
  }
  EXPECT_TRUE(Infer(*stub_, RawRequest("thrower", {1, 4}, {0, 0, 0, 0})).status.ok());
  EXPECT_EQ(server_->HostPids()["cpu0"], cpu0) << "the cpu0 host was restarted";
}

TEST_F(ErrorsTest, NoBadInputCrashedAnyProcess) {
  WatchdogScope watchdog(seconds(60), "NoCrash");
  EXPECT_TRUE(ProcessAlive(server_->pid()));
  EXPECT_EQ(server_->HostPids(), initial_hosts_) << "a host process was replaced";
  EXPECT_EQ(ServerReady(*stub_), std::optional<bool>(true));
}

// Last but one: kills host cpu1. Requests for its models right after the kill
// are UNAVAILABLE, whether they reach the dead host (failed when the router
// sees it die) or find it down.
TEST_F(ErrorsTest, HostDownIsUnavailable) {
  WatchdogScope watchdog(seconds(60), "HostDown");
  const auto hosts = server_->HostPids();
  ASSERT_TRUE(hosts.count("cpu1"));
  ASSERT_EQ(kill(hosts.at("cpu1"), SIGKILL), 0);
  EXPECT_TRUE(HasError(Infer(*stub_, ImageRequest("cnn", RandomImages(1, 1)), milliseconds(5000)).status,
                       grpc::UNAVAILABLE, {"cnn"}));
  EXPECT_TRUE(HasError(Infer(*stub_, ImageRequest("demo_ensemble", RandomImages(1, 1)), milliseconds(5000)).status,
                       grpc::UNAVAILABLE, {"demo_ensemble"}));
  // Models on the other host are unaffected.
  EXPECT_TRUE(Infer(*stub_, ImageRequest("mlp", RandomImages(1, 1))).status.ok());
}

TEST_F(ErrorsTest, ServerStillAnswersAfterAllOfThem) {
  WatchdogScope watchdog(seconds(60), "StillAnswers");
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&ctx, inference::ServerLiveRequest(), &live).ok());
  EXPECT_TRUE(live.live());
  // cpu1 comes back (restart with backoff); then everything serves.
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  grpc::Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    last = Infer(*stub_, ImageRequest("demo_ensemble", RandomImages(3, 4)), milliseconds(2000)).status;
    if (last.ok()) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(last.ok()) << Describe(last);
  EXPECT_EQ(ServerReady(*stub_), std::optional<bool>(true));
  for (const std::string model : {"mlp", "wide_mlp", "cnn", "thrower", "echo"}) {
    EXPECT_EQ(ModelReady(*stub_, model), std::optional<bool>(true)) << model;
  }
  EXPECT_TRUE(ProcessAlive(server_->pid()));
  EXPECT_EQ(server_->HostPids()["cpu0"], initial_hosts_["cpu0"]);
}

}  // namespace
}  // namespace es::it
