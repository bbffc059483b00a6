// Acceptance: every error class of the KServe v2 front end, produced against
// the real server and checked by gRPC code and message (the message names the
// model, and the tensor where there is one). No bad input crashes a process:
// NoBadInputCrashedAnyProcess sends its own hostile requests and checks that
// the router and host pids are the same afterwards and that they still answer.
//
// The repository is the demo plus two models written at runtime by
// make_test_models.py: `thrower` (forward raises "boom" on a large input) and
// `echo` (variable-size input, to exceed max_request_bytes).
//
// The tests share one server. The host-down case (which kills a host) comes
// last but one, the final test checks the server still answers after it; the
// other tests do not depend on their order.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/shared_server.h"

namespace es::it {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class ErrorsTest : public SharedServerSuite<ErrorsTest> {
 public:  // PrepareServer: called by SharedServerSuite
  // The demo repository and the test models (make_test_models.py).
  static std::string PrepareServer(const fs::path& dir, ServerProcess::Options* options) {
    const fs::path repo = dir / "repo";
    std::string error;
    if (!CopyDemoRepository(repo, &error)) return error;
    std::string output;
    const int rc =
        RunCommand({"/usr/bin/python3", std::string(es::test_paths::kIntegrationSourceDir) + "/make_test_models.py",
                    repo.string()},
                   seconds(180), &output);
    if (rc != 0) return "make_test_models.py failed (rc " + std::to_string(rc) + "): " + output;
    options->repository = repo.string();
    return "";
  }

 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SharedServerSuite::SetUp());
    if (initial_hosts_.empty()) initial_hosts_ = server_->HostPids();  // as first seen by this suite
    stub_ = server_->Stub();
  }

  grpc::Status InferStatus(const inference::ModelInferRequest& req) { return Infer(*stub_, req).status; }

  static inline std::map<std::string, pid_t> initial_hosts_;
  std::unique_ptr<Stub> stub_;
};

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

// A request of 70,000 empty inputs (two bytes each on the wire, an object of
// about 100 bytes each once parsed) is refused before it is parsed, over
// the unary call and the stream alike, naming the bound; the router goes on.
TEST_F(ErrorsTest, RequestOfTooManyRepeatedEntriesIsRefusedBeforeItIsParsed) {
  WatchdogScope watchdog(seconds(60), "RepeatedEntries");
  inference::ModelInferRequest many;
  many.set_model_name("mlp");
  for (int i = 0; i < 70000; ++i) many.add_inputs();
  EXPECT_TRUE(HasError(InferStatus(many), grpc::INVALID_ARGUMENT, {"more than 65536 inputs, outputs"}));

  grpc::ClientContext ctx;
  auto stream = stub_->ModelStreamInfer(&ctx);
  ASSERT_TRUE(stream->Write(many));
  ASSERT_TRUE(stream->Write(ImageRequest("mlp", RandomImages(1, 3))));
  stream->WritesDone();
  inference::ModelStreamInferResponse answer;
  int refused = 0, answered = 0;
  while (stream->Read(&answer)) {
    if (answer.error_message().find("more than 65536 inputs, outputs") != std::string::npos) ++refused;
    if (answer.error_message().empty()) ++answered;
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(answered, 1) << "the stream's next request was not answered";
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

// The `timeout` parameter (µs) on models outside the batch queue: 1 µs has
// passed before the request can be dispatched, so the server itself answers
// DEADLINE_EXCEEDED (the client's own deadline is 30 s); a server that
// ignored the parameter would answer OK. INT64_MAX µs does not fit the
// steady clock's nanoseconds: it must clamp to "no deadline" and be served,
// not wrap into the past.
TEST_F(ErrorsTest, TimeoutParameterIsHonouredAndHugeValuesClamp) {
  WatchdogScope watchdog(seconds(60), "TimeoutParameter");
  auto with_timeout = [](inference::ModelInferRequest request, int64_t micros) {
    (*request.mutable_parameters())["timeout"].set_int64_param(micros);
    return request;
  };
  const std::vector<std::pair<std::string, inference::ModelInferRequest>> requests = {
      {"thrower", RawRequest("thrower", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})},
      {"mlp", ImageRequest("mlp", RandomImages(1, 5))},
      {"demo_ensemble", ImageRequest("demo_ensemble", RandomImages(1, 5))},
  };
  for (const auto& [model, request] : requests) {
    SCOPED_TRACE(model);
    ASSERT_TRUE(Infer(*stub_, request).status.ok()) << "the request itself must be good";
    const InferResult expired = Infer(*stub_, with_timeout(request, 1));
    EXPECT_TRUE(HasError(expired.status, grpc::DEADLINE_EXCEEDED, {model, "deadline"}));
    EXPECT_LT(expired.latency, seconds(10)) << "the server, not the client's 30 s deadline, ended the call";
    for (int64_t huge : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() / 1000 + 1}) {
      const InferResult clamped = Infer(*stub_, with_timeout(request, huge));
      EXPECT_TRUE(clamped.status.ok()) << huge << ": " << Describe(clamped.status);
    }
    EXPECT_TRUE(HasError(InferStatus(with_timeout(request, -1)), grpc::INVALID_ARGUMENT, {model, "timeout"}));
  }
}

// A client deadline far past what the steady clock's nanoseconds hold (5000
// years; gRPC sends at most 99999999 hours) is served like no deadline.
TEST_F(ErrorsTest, HugeClientDeadlineIsServed) {
  WatchdogScope watchdog(seconds(60), "HugeClientDeadline");
  for (int64_t years : {100, 5000}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                  gpr_time_from_seconds(years * 365 * 24 * 3600, GPR_TIMESPAN)));
    inference::ModelInferResponse response;
    const grpc::Status status = stub_->ModelInfer(&ctx, ImageRequest("mlp", RandomImages(1, 4)), &response);
    EXPECT_TRUE(status.ok()) << years << " years: " << Describe(status);
  }
}

// Self-contained: it sends its own hostile requests (shapes whose sizes
// overflow or wrap to the payload sent, out-of-range dims and batch sizes,
// wrong types and counts, bad parameters, a forward that throws), then checks
// that the router and every host are the same processes and still answer.
TEST_F(ErrorsTest, NoBadInputCrashedAnyProcess) {
  WatchdogScope watchdog(seconds(90), "NoCrash");
  // Wait until both hosts serve (another test may have restarted one).
  auto serving = [&] {
    return Infer(*stub_, ImageRequest("mlp", RandomImages(1, 2)), milliseconds(2000)).status.ok() &&
           Infer(*stub_, ImageRequest("cnn", RandomImages(1, 2)), milliseconds(2000)).status.ok();
  };
  const auto ready_by = std::chrono::steady_clock::now() + seconds(20);
  while (!serving() && std::chrono::steady_clock::now() < ready_by) std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(serving()) << "the hosts do not serve before the test";
  const std::map<std::string, pid_t> hosts = server_->HostPids();
  ASSERT_EQ(hosts.size(), 2u);
  const pid_t router = server_->pid();

  constexpr int64_t k2To32 = int64_t{1} << 32;
  constexpr int64_t k2To62 = int64_t{1} << 62;
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  // Shapes whose byte size overflows 64 bits: refused by the router itself
  // (the message says so), never sent to a host.
  const std::vector<std::pair<std::vector<int64_t>, size_t>> overflowing = {
      {{1, k2To62}, 0},      // 2^62 FP32 = 2^64 bytes, wraps to the empty payload
      {{1, k2To62 + 4}, 4},  // 2^64 + 16 bytes, wraps to the 16 bytes sent
      {{8, k2To62 / 2}, 0},  // 2^64 elements
      {{1, kInt64Max}, 0},
  };
  for (const auto& [shape, floats] : overflowing) {
    EXPECT_TRUE(HasError(InferStatus(RawRequest("echo", shape, std::vector<float>(floats, 1.0f))),
                         grpc::INVALID_ARGUMENT, {"echo", "input", "overflows"}))
        << shape[1];
  }
  std::vector<inference::ModelInferRequest> hostile;
  for (const std::string model : {"mlp", "cnn", "demo_ensemble"}) {
    hostile.push_back(RawRequest(model, {1, 1, k2To32, k2To32}, {}));  // fixed dims differ
    hostile.push_back(RawRequest(model, {kInt64Max, 1, 28, 28}, {}));  // batch out of range
    hostile.push_back(RawRequest(model, {1, 1, 28, -28}, {}));         // negative dim
    hostile.push_back(RawRequest(model, {}, {}));                      // rank 0
    auto typed = ImageRequest(model, RandomImages(1, 3));
    typed.clear_raw_input_contents();
    typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);  // 1 element for 784
    hostile.push_back(typed);
    auto outputs = ImageRequest(model, RandomImages(1, 3));
    outputs.add_outputs()->set_name("probabilities");
    outputs.add_outputs()->set_name("probabilities");  // the same output twice
    hostile.push_back(outputs);
    auto priority = ImageRequest(model, RandomImages(1, 3));
    (*priority.mutable_parameters())["priority"].set_int64_param(kInt64Max);
    hostile.push_back(priority);
    auto timeout = ImageRequest(model, RandomImages(1, 3));
    (*timeout.mutable_parameters())["timeout"].set_string_param("soon");
    hostile.push_back(timeout);
    auto uint8 = ImageRequest(model, RandomImages(1, 3));
    uint8.mutable_inputs(0)->set_datatype("UINT8");
    hostile.push_back(uint8);
  }
  hostile.push_back(RawRequest("echo", {1, 5}, std::vector<float>(16, 1.0f)));  // bytes disagree with the shape
  for (const auto& request : hostile) {
    const grpc::Status status = InferStatus(request);
    EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT) << request.model_name() << ": " << Describe(status);
  }
  // A forward that raises, several times: INTERNAL, the host lives on.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(HasError(InferStatus(RawRequest("thrower", {1, 4}, {1e7f, 1e7f, 1e7f, 1e7f})), grpc::INTERNAL,
                         {"thrower", "boom"}));
  }

  EXPECT_TRUE(ProcessAlive(router));
  EXPECT_EQ(server_->pid(), router);
  EXPECT_EQ(server_->HostPids(), hosts) << "a host process was replaced";
  EXPECT_EQ(ServerReady(*stub_), std::optional<bool>(true));
  // Both hosts still compute: cpu0 (mlp, thrower, echo) and cpu1 (cnn).
  EXPECT_TRUE(serving());
  EXPECT_TRUE(Infer(*stub_, RawRequest("echo", {1, 3}, {1, 2, 3})).status.ok());
  EXPECT_TRUE(Infer(*stub_, ImageRequest("demo_ensemble", RandomImages(2, 7))).status.ok());
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
  WatchdogScope watchdog(seconds(120), "StillAnswers");
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&ctx, inference::ServerLiveRequest(), &live).ok());
  EXPECT_TRUE(live.live());
  // cpu1 comes back (restart with backoff, then LibTorch's start and the
  // models' warm-up, slower on a busy machine); then everything serves.
  const auto deadline = std::chrono::steady_clock::now() + seconds(45);
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
