// Acceptance: ModelStreamInfer with Triton's semantics, against the
// real server on the demo repository (plus the test models where named).
//  - Many requests in flight on one stream, distinct ids: every id answered
//    once, each answer equal to the unary ModelInfer answer of the same
//    request; the stream ends OK after the client half-closes.
//  - A slow request does not hold back the ones after it: answers come in
//    completion order (the spinner's forward, cut at max_compute_ms, is
//    answered after the cnn requests sent behind it).
//  - Bad requests in the middle (bad shape, unknown model, a model error)
//    are answers with error_message "CODE: ..." and their id; the later
//    requests still succeed.
//  - Clients that cancel mid-stream (answers unread) leave the server
//    healthy: afterwards a burst of exactly limits.max_inflight_calls
//    requests is admitted in full (a leaked place would refuse one), and a
//    unary call works.
//  - SIGTERM with streams open: the streams end (no hang), the server exits 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <set>
#include <thread>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using inference::ModelInferRequest;
using inference::ModelStreamInferResponse;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

struct StreamResult {
  grpc::Status status;
  std::vector<ModelStreamInferResponse> answers;  // in the order they came
};

// Writes every request (from a thread of its own, so that writing never
// waits on reading), half-closes, reads answers until the stream ends.
StreamResult RunStream(Stub& stub, const std::vector<ModelInferRequest>& requests, milliseconds timeout = kRpcTimeout) {
  StreamResult result;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  auto stream = stub.ModelStreamInfer(&ctx);
  std::thread writer([&] {
    for (const auto& r : requests) {
      if (!stream->Write(r)) break;
    }
    stream->WritesDone();
  });
  ModelStreamInferResponse answer;
  while (stream->Read(&answer)) result.answers.push_back(answer);
  writer.join();
  result.status = stream->Finish();
  return result;
}

std::map<std::string, ModelStreamInferResponse> ById(const std::vector<ModelStreamInferResponse>& answers) {
  std::map<std::string, ModelStreamInferResponse> by_id;
  for (const auto& a : answers) {
    EXPECT_TRUE(by_id.emplace(a.infer_response().id(), a).second) << "id answered twice: " << a.infer_response().id();
  }
  return by_id;
}

ModelInferRequest WithId(ModelInferRequest request, const std::string& id) {
  request.set_id(id);
  return request;
}

TEST(StreamingTest, ManyInFlightAnswersMatchUnaryById) {
  WatchdogScope watchdog(seconds(180), "ManyInFlightAnswersMatchUnaryById");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();

  const std::vector<std::string> models = {"mlp", "demo_ensemble", "cnn", "wide_mlp"};
  std::vector<ModelInferRequest> requests;
  for (int i = 0; i < 48; ++i) {
    const std::string& model = models[static_cast<size_t>(i) % models.size()];
    requests.push_back(WithId(ImageRequest(model, RandomImages(1 + i % 3, 100 + static_cast<uint32_t>(i))),
                              "req-" + std::to_string(i)));
  }
  const StreamResult streamed = RunStream(*stub, requests);
  ASSERT_TRUE(streamed.status.ok()) << Describe(streamed.status);
  ASSERT_EQ(streamed.answers.size(), requests.size());
  const auto by_id = ById(streamed.answers);
  ASSERT_EQ(by_id.size(), requests.size());

  for (const auto& request : requests) {
    SCOPED_TRACE(request.id() + " " + request.model_name());
    const auto it = by_id.find(request.id());
    ASSERT_NE(it, by_id.end()) << "no answer";
    const ModelStreamInferResponse& answer = it->second;
    ASSERT_EQ(answer.error_message(), "");
    EXPECT_EQ(answer.infer_response().model_name(), request.model_name());
    const InferResult unary = Infer(*stub, request);
    ASSERT_TRUE(unary.status.ok()) << Describe(unary.status);
    EXPECT_EQ(unary.response.id(), request.id());
    const auto names = OutputNames(unary.response);
    ASSERT_EQ(OutputNames(answer.infer_response()), names);
    for (const auto& name : names) {
      Fp32Tensor streamed_out, unary_out;
      ASSERT_TRUE(GetFp32Output(answer.infer_response(), name, &streamed_out));
      ASSERT_TRUE(GetFp32Output(unary.response, name, &unary_out));
      EXPECT_EQ(streamed_out.shape, unary_out.shape) << name;
      EXPECT_LE(MaxAbsDiff(streamed_out.values, unary_out.values), 1e-5) << name;
    }
  }
}

TEST(StreamingTest, ErrorsAreAnswersAndTheStreamGoesOn) {
  WatchdogScope watchdog(seconds(180), "ErrorsAreAnswersAndTheStreamGoesOn");
  TempDir dir("es_stream_err_");
  std::string error;
  ASSERT_TRUE(MakeTestRepository(dir.path() / "repo", {"thrower"}, &error)) << error;
  ServerProcess::Options options;
  options.repository = (dir.path() / "repo").string();
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();

  std::vector<ModelInferRequest> requests;
  requests.push_back(WithId(ImageRequest("mlp", RandomImages(1, 1)), "good-0"));
  // [1, 1, 28, 27]: the wrong shape for mlp.
  requests.push_back(WithId(RawRequest("mlp", {1, 1, 28, 27}, std::vector<float>(28 * 27, 0.5f)), "bad-shape"));
  requests.push_back(WithId(ImageRequest("no_such_model", RandomImages(1, 2)), "bad-model"));
  // The thrower raises in its forward on a large input: a model error.
  requests.push_back(WithId(RawRequest("thrower", {1, 4}, std::vector<float>(4, 1e7f)), "model-error"));
  for (int i = 1; i <= 6; ++i) {
    requests.push_back(
        WithId(ImageRequest(i % 2 ? "demo_ensemble" : "mlp", RandomImages(1, 10 + i)), "good-" + std::to_string(i)));
  }
  requests.push_back(WithId(RawRequest("thrower", {1, 4}, {1, 2, 3, 4}), "good-thrower"));

  const StreamResult streamed = RunStream(*stub, requests);
  ASSERT_TRUE(streamed.status.ok()) << Describe(streamed.status);
  const auto by_id = ById(streamed.answers);
  ASSERT_EQ(by_id.size(), requests.size());

  auto expect_error = [&](const std::string& id, const std::string& prefix, const std::string& needle) {
    SCOPED_TRACE(id);
    const auto& answer = by_id.at(id);
    EXPECT_EQ(answer.error_message().rfind(prefix, 0), 0u) << answer.error_message();
    EXPECT_NE(answer.error_message().find(needle), std::string::npos) << answer.error_message();
    EXPECT_EQ(answer.infer_response().id(), id);
    EXPECT_EQ(answer.infer_response().outputs_size(), 0);
  };
  expect_error("bad-shape", "INVALID_ARGUMENT: ", "input");
  expect_error("bad-model", "NOT_FOUND: ", "no_such_model");
  expect_error("model-error", "INTERNAL: ", "boom");
  for (const auto& request : requests) {
    if (request.id().rfind("good", 0) != 0) continue;
    SCOPED_TRACE(request.id());
    const auto& answer = by_id.at(request.id());
    EXPECT_EQ(answer.error_message(), "");
    EXPECT_GT(answer.infer_response().outputs_size(), 0);
  }
  // The thrower's answer agrees with its definition (2x).
  Fp32Tensor out;
  ASSERT_TRUE(GetFp32Output(by_id.at("good-thrower").infer_response(),
                            OutputNames(by_id.at("good-thrower").infer_response())[0], &out));
  EXPECT_EQ(out.values, (std::vector<float>{2, 4, 6, 8}));
}

TEST(StreamingTest, SlowRequestDoesNotHoldBackLaterOnes) {
  WatchdogScope watchdog(seconds(180), "SlowRequestDoesNotHoldBackLaterOnes");
  TempDir dir("es_stream_slow_");
  std::string error;
  ASSERT_TRUE(MakeTestRepository(dir.path() / "repo", {"spinner"}, &error)) << error;
  // The eight cnn answers must come before the spinner's limit ends it: 3 s,
  // not the written 1 s, so a busy machine (tests run side by side) cannot
  // make them lose the race.
  ASSERT_TRUE(SetSpinnerLimitMs(dir.path() / "repo", 3000, &error)) << error;
  ServerProcess::Options options;
  options.repository = (dir.path() / "repo").string();
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();

  // First the spinner on a large input (on cpu0: computes until its
  // max_compute_ms, 3000, ends it), then cnn requests (on cpu1). Served
  // one after another, the spinner's answer would come first.
  std::vector<ModelInferRequest> requests;
  requests.push_back(WithId(RawRequest("spinner", {1, 4}, std::vector<float>(4, 1e7f)), "slow"));
  for (int i = 0; i < 8; ++i) {
    requests.push_back(
        WithId(ImageRequest("cnn", RandomImages(1, 20 + static_cast<uint32_t>(i))), "fast-" + std::to_string(i)));
  }
  const StreamResult streamed = RunStream(*stub, requests);
  ASSERT_TRUE(streamed.status.ok()) << Describe(streamed.status);
  ASSERT_EQ(streamed.answers.size(), requests.size());
  EXPECT_EQ(streamed.answers.back().infer_response().id(), "slow") << "the slow request was not answered last";
  const auto by_id = ById(streamed.answers);
  EXPECT_EQ(by_id.at("slow").error_message().rfind("DEADLINE_EXCEEDED: ", 0), 0u) << by_id.at("slow").error_message();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(by_id.at("fast-" + std::to_string(i)).error_message(), "");
}

TEST(StreamingTest, CancelledStreamsLeaveNoPlaceBehind) {
  WatchdogScope watchdog(seconds(240), "CancelledStreamsLeaveNoPlaceBehind");
  constexpr int kMaxCalls = 32;
  ServerProcess::Options options;
  options.extra_limits = "max_inflight_calls: " + std::to_string(kMaxCalls);
  auto server = ServerProcess::Start(options);
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();

  // Streams that send a full load and go away: cancelled right after the
  // writes (answers unread, some still computing), or after a first answer.
  for (int round = 0; round < 12; ++round) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    auto stream = stub->ModelStreamInfer(&ctx);
    for (int i = 0; i < kMaxCalls; ++i) {
      ASSERT_TRUE(stream->Write(
          WithId(ImageRequest("demo_ensemble", RandomImages(2, static_cast<uint32_t>(i))), std::to_string(i))));
    }
    if (round % 2 == 1) {
      ModelStreamInferResponse answer;
      ASSERT_TRUE(stream->Read(&answer));
    }
    ctx.TryCancel();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // A stream whose client drops the connection without cancelling.
  {
    auto own = server->NewConnectionStub();
    auto ctx = std::make_unique<grpc::ClientContext>();
    auto stream = own->ModelStreamInfer(ctx.get());
    for (int i = 0; i < kMaxCalls; ++i) ASSERT_TRUE(stream->Write(ImageRequest("mlp", RandomImages(1, 1))));
    ctx->TryCancel();
    (void)stream->Finish();
  }

  // Every place comes back once the cancelled runs end (they are computed
  // or dropped within moments): a burst of exactly max_inflight_calls
  // requests is then admitted in full. A leaked place would refuse one
  // RESOURCE_EXHAUSTED for ever.
  std::vector<ModelInferRequest> burst;
  for (int i = 0; i < kMaxCalls; ++i) {
    burst.push_back(WithId(ImageRequest("cnn", RandomImages(1, 50 + static_cast<uint32_t>(i))), std::to_string(i)));
  }
  std::string last_refusal;
  bool all_admitted = false;
  const auto give_up = Clock::now() + seconds(30);
  while (!all_admitted && Clock::now() < give_up) {
    const StreamResult streamed = RunStream(*stub, burst);
    ASSERT_TRUE(streamed.status.ok()) << Describe(streamed.status);
    ASSERT_EQ(streamed.answers.size(), burst.size());
    all_admitted = true;
    for (const auto& a : streamed.answers) {
      if (a.error_message().empty()) continue;
      EXPECT_EQ(a.error_message().rfind("RESOURCE_EXHAUSTED: ", 0), 0u) << a.error_message();
      last_refusal = a.error_message();
      all_admitted = false;
    }
    if (!all_admitted) std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_TRUE(all_admitted) << "places still held 30 s after the streams were cancelled: " << last_refusal;
  const InferResult unary = Infer(*stub, ImageRequest("demo_ensemble", RandomImages(1, 7)));
  EXPECT_TRUE(unary.status.ok()) << Describe(unary.status);
  EXPECT_EQ(ServerReady(*stub), std::optional<bool>(true));
}

TEST(StreamingTest, SigtermWithOpenStreamsEndsThemAndExitsZero) {
  WatchdogScope watchdog(seconds(180), "SigtermWithOpenStreamsEndsThemAndExitsZero");
  auto server = ServerProcess::Start(ServerProcess::Options());
  ASSERT_TRUE(server) << ServerProcess::last_start_error();
  auto stub = server->Stub();

  // An idle stream (one request answered, then quiet) and a busy one (its
  // client keeps sending until the stream ends).
  grpc::ClientContext idle_ctx;
  SetDeadline(&idle_ctx);
  auto idle = stub->ModelStreamInfer(&idle_ctx);
  ASSERT_TRUE(idle->Write(WithId(ImageRequest("mlp", RandomImages(1, 1)), "idle-0")));
  ModelStreamInferResponse answer;
  ASSERT_TRUE(idle->Read(&answer));
  EXPECT_EQ(answer.error_message(), "");

  grpc::ClientContext busy_ctx;
  SetDeadline(&busy_ctx);
  auto busy = stub->ModelStreamInfer(&busy_ctx);
  std::atomic<bool> writer_done{false};
  std::thread writer([&] {
    for (int i = 0; i < 100000; ++i) {
      if (!busy->Write(WithId(ImageRequest("mlp", RandomImages(1, 2)), std::to_string(i)))) break;
      std::this_thread::sleep_for(milliseconds(2));
    }
    writer_done.store(true);
  });
  std::vector<ModelStreamInferResponse> busy_answers;
  std::thread reader([&] {
    ModelStreamInferResponse a;
    while (busy->Read(&a)) busy_answers.push_back(a);
  });
  std::this_thread::sleep_for(milliseconds(300));  // let the busy stream run

  server->Signal(SIGTERM);
  int wait_status = 0;
  ASSERT_TRUE(server->WaitExit(milliseconds(15000), &wait_status)) << "no exit within 15 s of SIGTERM";
  ASSERT_TRUE(WIFEXITED(wait_status)) << "wait status " << wait_status;
  EXPECT_EQ(WEXITSTATUS(wait_status), 0);

  // Both streams have ended: reads return false, Finish a non-OK status.
  reader.join();
  writer.join();
  EXPECT_TRUE(writer_done.load());
  const grpc::Status busy_status = busy->Finish();
  EXPECT_FALSE(busy_status.ok());
  std::printf("busy stream: %zu answers, ended %s\n", busy_answers.size(), Describe(busy_status).c_str());
  ASSERT_FALSE(busy_answers.empty());
  // Answers are results, or (once the drain began) UNAVAILABLE refusals.
  for (const auto& a : busy_answers) {
    if (!a.error_message().empty()) {
      EXPECT_EQ(a.error_message().rfind("UNAVAILABLE: ", 0), 0u) << a.error_message();
    }
  }
  EXPECT_FALSE(idle->Read(&answer));
  const grpc::Status idle_status = idle->Finish();
  EXPECT_FALSE(idle_status.ok());
  std::printf("idle stream ended %s\n", Describe(idle_status).c_str());
}

}  // namespace
}  // namespace es::it
