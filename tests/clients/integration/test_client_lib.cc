// The C++ client library (clients/client.h) against the real server serving
// the demo repository: every blocking call, ModelInfer blocking and
// asynchronous (callback and future) giving the same answers, typed output
// views, and errors surfacing with their gRPC code and message.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <random>

#include "clients/client.h"
#include "tests/integration/server_process.h"
#include "tests/integration/shared_server.h"

namespace es::client {
namespace {

using es::it::ServerProcess;
using es::it::WatchdogScope;
using std::chrono::seconds;

constexpr int64_t kPixels = 28 * 28;

std::vector<float> Images(int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(batch * kPixels));
  for (auto& x : v) x = unit(rng);
  return v;
}

inference::ModelInferRequest ImageRequest(const std::string& model, int64_t batch, uint32_t seed) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  const auto images = Images(batch, seed);
  EXPECT_TRUE(AddInput<float>(&request, "input", {batch, 1, 28, 28}, images).ok());
  return request;
}

std::vector<float> Probabilities(const inference::ModelInferResponse& response) {
  auto view = GetOutput<float>(response, "probabilities");
  EXPECT_TRUE(view.ok()) << view.status().ToString();
  if (!view.ok()) return {};
  return {view->values.begin(), view->values.end()};
}


class ClientLibTest : public es::it::SharedServerSuite<ClientLibTest> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SharedServerSuite::SetUp());
    client_ = Client::Create(server_->address());
  }

  std::unique_ptr<Client> client_;
};

TEST_F(ClientLibTest, HealthMetadataIndexAndStatistics) {
  WatchdogScope watchdog(seconds(60), "HealthMetadataIndexAndStatistics");
  auto live = client_->ServerLive();
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_TRUE(*live);
  auto ready = client_->ServerReady();
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_TRUE(*ready);
  for (const char* model : {"mlp", "wide_mlp", "cnn", "demo_ensemble"}) {
    auto model_ready = client_->ModelReady(model);
    ASSERT_TRUE(model_ready.ok()) << model << ": " << model_ready.status().ToString();
    EXPECT_TRUE(*model_ready) << model;
  }

  auto server = client_->ServerMetadata();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ(server->name(), "ensemble-serve");

  auto meta = client_->ModelMetadata("demo_ensemble");
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(meta->name(), "demo_ensemble");
  ASSERT_EQ(meta->inputs_size(), 1);
  EXPECT_EQ(meta->inputs(0).name(), "input");
  EXPECT_EQ(meta->inputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(meta->inputs(0).shape().begin(), meta->inputs(0).shape().end()),
            (std::vector<int64_t>{-1, 1, 28, 28}));
  ASSERT_GE(meta->outputs_size(), 1);
  EXPECT_EQ(meta->outputs(0).name(), "probabilities");

  auto index = client_->RepositoryIndex();
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  std::vector<std::string> names;
  for (const auto& m : index->models()) names.push_back(m.name());
  for (const char* model : {"mlp", "wide_mlp", "cnn", "demo_ensemble"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), model), names.end()) << model;
  }

  // Statistics count this test's own calls.
  auto before = client_->ModelStatistics("mlp");
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->model_stats_size(), 1);
  EXPECT_EQ(before->model_stats(0).name(), "mlp");
  for (uint32_t i = 0; i < 3; ++i) ASSERT_TRUE(client_->Infer(ImageRequest("mlp", 2, i)).ok());
  auto after = client_->ModelStatistics("mlp");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->model_stats(0).inference_stats().success().count(),
            before->model_stats(0).inference_stats().success().count() + 3);
  EXPECT_EQ(after->model_stats(0).inference_count(), before->model_stats(0).inference_count() + 6);
  auto all = client_->ModelStatistics();
  ASSERT_TRUE(all.ok());
  EXPECT_GE(all->model_stats_size(), 4);
}

TEST_F(ClientLibTest, BlockingAndAsyncInferGiveTheSameAnswers) {
  WatchdogScope watchdog(seconds(60), "BlockingAndAsyncInferGiveTheSameAnswers");
  for (const char* model : {"mlp", "cnn", "demo_ensemble"}) {
    SCOPED_TRACE(model);
    const auto request = ImageRequest(model, 3, 42);
    auto sync = client_->Infer(request);
    ASSERT_TRUE(sync.ok()) << sync.status().ToString();
    const auto expected = Probabilities(*sync);
    ASSERT_EQ(expected.size(), 30u);

    // Callback form.
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status async_status(grpc::StatusCode::UNKNOWN, "not called");
    inference::ModelInferResponse async_response;
    client_->InferAsync(request, [&](Status status, inference::ModelInferResponse response) {
      std::lock_guard<std::mutex> lock(mu);
      async_status = std::move(status);
      async_response = std::move(response);
      done = true;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, seconds(30), [&] { return done; }));
    }
    ASSERT_TRUE(async_status.ok()) << async_status.ToString();
    EXPECT_EQ(Probabilities(async_response), expected);
    EXPECT_EQ(async_response.model_name(), model);

    // Future form.
    auto future = client_->InferFuture(request);
    ASSERT_EQ(future.wait_for(seconds(30)), std::future_status::ready);
    auto result = future.get();
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(Probabilities(*result), expected);
  }
}

TEST_F(ClientLibTest, ManyAsyncCallsInFlightEachMatchItsBlockingAnswer) {
  WatchdogScope watchdog(seconds(60), "ManyAsyncCallsInFlight");
  constexpr int kCalls = 32;
  std::vector<std::shared_ptr<const inference::ModelInferRequest>> requests;
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < kCalls; ++i) {
    requests.push_back(std::make_shared<const inference::ModelInferRequest>(
        ImageRequest(i % 2 ? "demo_ensemble" : "wide_mlp", 1 + i % 4, 100 + static_cast<uint32_t>(i))));
    auto r = client_->Infer(*requests.back());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    expected.push_back(Probabilities(*r));
  }
  std::mutex mu;
  std::condition_variable cv;
  int remaining = kCalls;
  std::vector<std::vector<float>> got(kCalls);
  std::vector<Status> statuses(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    client_->InferAsync(requests[static_cast<size_t>(i)],
                        [&, i](Status status, inference::ModelInferResponse response) {
                          auto values = status.ok() ? Probabilities(response) : std::vector<float>();
                          std::lock_guard<std::mutex> lock(mu);
                          statuses[static_cast<size_t>(i)] = std::move(status);
                          got[static_cast<size_t>(i)] = std::move(values);
                          if (--remaining == 0) cv.notify_all();
                        });
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, seconds(30), [&] { return remaining == 0; }));
  for (size_t i = 0; i < kCalls; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].ToString();
    // Near, not equal: a server that batches concurrent requests together
    // may round a row differently than when it ran alone.
    ASSERT_EQ(got[i].size(), expected[i].size()) << "call " << i;
    for (size_t k = 0; k < got[i].size(); ++k) EXPECT_NEAR(got[i][k], expected[i][k], 1e-5) << "call " << i;
  }
}

TEST_F(ClientLibTest, TypedViewsOfOutputs) {
  WatchdogScope watchdog(seconds(60), "TypedViewsOfOutputs");
  auto request = ImageRequest("demo_ensemble", 4, 7);
  SetParameter(&request, "return_uncertainty", true);
  SetParameter(&request, "return_member_outputs", true);
  auto response = client_->Infer(request);
  ASSERT_TRUE(response.ok()) << response.status().ToString();

  auto probs = GetOutput<float>(*response, "probabilities");
  ASSERT_TRUE(probs.ok()) << probs.status().ToString();
  EXPECT_EQ(probs->shape, (std::vector<int64_t>{4, 10}));
  for (int64_t r = 0; r < 4; ++r) {
    const auto row = probs->row(r);
    ASSERT_EQ(row.size(), 10u);
    EXPECT_NEAR(std::accumulate(row.begin(), row.end(), 0.0), 1.0, 1e-4) << "row " << r;
  }
  auto entropy = GetOutput<float>(*response, "entropy");
  ASSERT_TRUE(entropy.ok()) << entropy.status().ToString();
  EXPECT_EQ(entropy->shape, (std::vector<int64_t>{4}));
  for (float e : entropy->values) EXPECT_GE(e, 0.f);
  auto member = CopyOutput<float>(*response, "mlp.probabilities");
  ASSERT_TRUE(member.ok()) << member.status().ToString();
  EXPECT_EQ(member->shape, (std::vector<int64_t>{4, 10}));

  // Reading with the wrong type, or an output that is not there.
  auto as_double = GetOutput<double>(*response, "probabilities");
  EXPECT_EQ(as_double.status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(as_double.status().message().find("probabilities"), std::string::npos);
  auto missing = GetOutput<float>(*response, "logits");
  EXPECT_EQ(missing.status().code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(missing.status().message().find("entropy"), std::string::npos) << missing.status().message();

  // Asking for one output only.
  auto only = ImageRequest("demo_ensemble", 2, 8);
  SetParameter(&only, "return_uncertainty", true);
  RequestOutput(&only, "entropy");
  auto one = client_->Infer(only);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(OutputNames(*one), (std::vector<std::string>{"entropy"}));
}

TEST_F(ClientLibTest, ErrorsSurfaceWithCodeAndMessage) {
  WatchdogScope watchdog(seconds(60), "ErrorsSurfaceWithCodeAndMessage");
  // Unknown model: blocking and async agree.
  auto unknown = client_->Infer(ImageRequest("no_such_model", 1, 1));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(unknown.status().message().find("no_such_model"), std::string::npos) << unknown.status().message();
  auto async_unknown = client_->InferFuture(ImageRequest("no_such_model", 1, 1)).get();
  ASSERT_FALSE(async_unknown.ok());
  EXPECT_EQ(async_unknown.status().code(), unknown.status().code());
  EXPECT_EQ(async_unknown.status().message(), unknown.status().message());

  auto meta = client_->ModelMetadata("no_such_model");
  ASSERT_FALSE(meta.ok());
  EXPECT_EQ(meta.status().code(), grpc::StatusCode::NOT_FOUND);

  // A bad shape: INVALID_ARGUMENT naming the tensor.
  inference::ModelInferRequest bad;
  bad.set_model_name("mlp");
  const std::vector<float> values(2 * 27 * 28, 0.5f);
  ASSERT_TRUE(AddInput<float>(&bad, "input", {2, 1, 27, 28}, values).ok());
  auto bad_shape = client_->Infer(bad);
  ASSERT_FALSE(bad_shape.ok());
  EXPECT_EQ(bad_shape.status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad_shape.status().message().find("input"), std::string::npos) << bad_shape.status().message();
  EXPECT_NE(bad_shape.status().ToString().find("INVALID_ARGUMENT: "), std::string::npos);

  // A deadline too short: 1 ms while the router is stopped, so no answer
  // can come first. (A batch alone, or behind eight more, was answered
  // within the millisecond of a caller that ran late on a busy machine.)
  auto late = [&] {
    es::it::RouterPause pause(*server_);
    return client_->Infer(ImageRequest("demo_ensemble", 64, 3), CallOptions{std::chrono::milliseconds(1)});
  }();
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), grpc::StatusCode::DEADLINE_EXCEEDED) << late.status().ToString();
}

TEST(ClientLibUnreachable, FailsFastWithUnavailable) {
  WatchdogScope watchdog(seconds(60), "FailsFastWithUnavailable");
  const std::string address = "127.0.0.1:" + std::to_string(es::it::ClosedLoopbackPort());
  auto client = Client::Create(address, ClientOptions{std::chrono::milliseconds(20000)});
  const auto start = std::chrono::steady_clock::now();
  auto live = client->ServerLive();
  ASSERT_FALSE(live.ok());
  EXPECT_EQ(live.status().code(), grpc::StatusCode::UNAVAILABLE) << live.status().ToString();
  EXPECT_FALSE(live.status().message().empty());
  auto async = client->InferFuture(ImageRequest("mlp", 1, 1)).get();
  EXPECT_EQ(async.status().code(), grpc::StatusCode::UNAVAILABLE) << async.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10)) << "no waiting for the 20 s deadline";
}

}  // namespace
}  // namespace es::client
