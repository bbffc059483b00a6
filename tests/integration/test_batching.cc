// Acceptance of the dynamic batcher, replicas and backpressure, through real
// gRPC calls to a real server. The repository is the demo's plus variants of
// the demo `mlp` (the same model.pt) with different batching and placement:
//   mlp_batched   dynamic batching, 2 ms delay            (equality, priorities)
//   mlp_slow      dynamic batching, 1.5 s delay, queue 4  (queue full, deadline, cancel)
//   mlp_replicas  dynamic batching, on both hosts         (replicas, replica kill)
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Variant(const std::string& batching, const std::string& hosts) {
  return "platform: torchscript\nmax_batch_size: 64\n"
         "inputs:\n  - {name: input, datatype: FP32, dims: [1, 28, 28]}\n"
         "outputs:\n  - {name: probabilities, datatype: FP32, dims: [10]}\n"
         "hosts: " + hosts + "\n" + batching;
}

class BatchingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repo_ = new TempDir("es_batching_repo_");
    std::string error;
    ASSERT_TRUE(CopyDemoRepository(repo_->path(), &error)) << error;
    const auto add = [](const std::string& name, const std::string& config) {
      fs::create_directories(repo_->path() / name / "1");
      fs::copy_file(repo_->path() / "mlp" / "1" / "model.pt", repo_->path() / name / "1" / "model.pt");
      ASSERT_TRUE(WriteTextFile(repo_->path() / name / "config.yaml", config));
    };
    add("mlp_batched", Variant("dynamic_batching: {max_queue_delay_us: 2000, preferred_batch_sizes: [8, 16, 32]}",
                               "[cpu0]"));
    add("mlp_slow", Variant("dynamic_batching: {max_queue_delay_us: 1500000, max_queue_size: 4}", "[cpu1]"));
    add("mlp_replicas", Variant("dynamic_batching: {max_queue_delay_us: 500}", "[cpu0, cpu1]"));
    ServerProcess::Options options;
    options.repository = repo_->path().string();
    server_ = ServerProcess::Start(options).release();
    ASSERT_TRUE(server_) << ServerProcess::last_start_error();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete repo_;
  }

  static uint64_t Executions(Stub& stub, const std::string& model) { return ModelStats(stub, model).inference_count(); }

  static TempDir* repo_;
  static ServerProcess* server_;
};
TempDir* BatchingTest::repo_ = nullptr;
ServerProcess* BatchingTest::server_ = nullptr;

// Batched results equal unbatched ones for each request: random request
// sizes, 32 concurrent clients, exact to 1e-6.
TEST_F(BatchingTest, BatchedResultsEqualUnbatchedForEveryRequest) {
  WatchdogScope watchdog(seconds(180), "BatchedResultsEqualUnbatchedForEveryRequest");
  std::atomic<int> compared{0}, failures{0};
  std::mutex mu;
  std::string first_failure;
  std::vector<std::thread> clients;
  for (int c = 0; c < 32; ++c) {
    clients.emplace_back([&, c] {
      auto stub = server_->NewConnectionStub();
      std::mt19937 rng(static_cast<unsigned>(c));
      for (int i = 0; i < 6; ++i) {
        const int64_t rows = 1 + static_cast<int64_t>(rng() % 7);
        const auto images = RandomImages(rows, static_cast<uint32_t>(c * 100 + i));
        InferResult batched = Infer(*stub, ImageRequest("mlp_batched", images));
        InferResult single = Infer(*stub, ImageRequest("mlp", images));
        Fp32Tensor a, b;
        std::lock_guard<std::mutex> lock(mu);
        if (!batched.status.ok() || !single.status.ok() ||
            !GetFp32Output(batched.response, "probabilities", &a) ||
            !GetFp32Output(single.response, "probabilities", &b) || a.shape != b.shape ||
            a.shape != std::vector<int64_t>{rows, kClasses} || MaxAbsDiff(a.values, b.values) > 1e-6) {
          if (failures++ == 0) {
            first_failure = "client " + std::to_string(c) + " request " + std::to_string(i) + ": " +
                            Describe(batched.status) + " / " + Describe(single.status) + " diff " +
                            std::to_string(MaxAbsDiff(a.values, b.values));
          }
        }
        compared++;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_EQ(compared.load(), 32 * 6);
  // And batching did happen: fewer executions than requests.
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  inference::ModelStatisticsRequest req;
  req.set_name("mlp_batched");
  inference::ModelStatisticsResponse resp;
  ASSERT_TRUE(server_->Stub()->ModelStatistics(&ctx, req, &resp).ok());
  const auto& s = resp.model_stats(0);
  std::printf("mlp_batched: %llu requests in %llu executions\n",
              static_cast<unsigned long long>(s.inference_stats().success().count()),
              static_cast<unsigned long long>(s.execution_count()));
  EXPECT_LT(s.execution_count(), s.inference_stats().success().count());
}

// A full queue answers RESOURCE_EXHAUSTED at once.
TEST_F(BatchingTest, FullQueueIsResourceExhaustedAtOnce) {
  WatchdogScope watchdog(seconds(60), "FullQueueIsResourceExhaustedAtOnce");
  std::vector<std::thread> waiting;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {  // fill the queue (4) behind the 1.5 s delay
    waiting.emplace_back([&, i] {
      auto stub = server_->NewConnectionStub();
      ok += Infer(*stub, ImageRequest("mlp_slow", RandomImages(1, static_cast<uint32_t>(i))), seconds(10)).status.ok();
    });
  }
  std::this_thread::sleep_for(milliseconds(300));
  auto stub = server_->Stub();
  InferResult full = Infer(*stub, ImageRequest("mlp_slow", RandomImages(1, 9)), seconds(10));
  EXPECT_TRUE(HasError(full.status, grpc::RESOURCE_EXHAUSTED, {"mlp_slow", "queue full", "max_queue_size 4"}));
  EXPECT_LT(full.latency, milliseconds(500)) << "the refusal should not wait for the queue";
  for (auto& t : waiting) t.join();
  EXPECT_EQ(ok.load(), 4) << "the queued requests themselves still complete";
}

// A request whose deadline passes in the queue is answered DEADLINE_EXCEEDED
// and never computed; so is a request the client cancels, over gRPC or by
// closing its HTTP connection.
TEST_F(BatchingTest, ExpiredAndCancelledRequestsLeaveTheQueueUncomputed) {
  WatchdogScope watchdog(seconds(60), "ExpiredAndCancelledRequestsLeaveTheQueueUncomputed");
  auto stub = server_->Stub();
  const uint64_t before = Executions(*stub, "mlp_slow");

  // The `timeout` parameter (µs): the server itself answers, long before the
  // gRPC deadline.
  auto request = ImageRequest("mlp_slow", RandomImages(1, 1));
  (*request.mutable_parameters())["timeout"].set_int64_param(200000);
  InferResult expired = Infer(*stub, request, seconds(10));
  EXPECT_TRUE(HasError(expired.status, grpc::DEADLINE_EXCEEDED, {"mlp_slow", "not computed"}));
  EXPECT_LT(expired.latency, milliseconds(1000));

  // The gRPC deadline travels too.
  InferResult grpc_deadline = Infer(*stub, ImageRequest("mlp_slow", RandomImages(1, 2)), milliseconds(300));
  EXPECT_EQ(grpc_deadline.status.error_code(), grpc::DEADLINE_EXCEEDED) << Describe(grpc_deadline.status);

  // A cancelled call leaves the queue.
  grpc::ClientContext ctx;
  SetDeadline(&ctx, seconds(10));
  inference::ModelInferResponse resp;
  std::atomic<bool> finished{false};
  grpc::Status cancelled_status;
  stub->async()->ModelInfer(&ctx, new inference::ModelInferRequest(ImageRequest("mlp_slow", RandomImages(1, 3))),
                            &resp, [&](grpc::Status s) {
                              cancelled_status = s;
                              finished = true;
                            });
  std::this_thread::sleep_for(milliseconds(200));
  ctx.TryCancel();
  while (!finished) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(cancelled_status.error_code(), grpc::CANCELLED);

  // An HTTP client that closes its connection while its request waits.
  const int fd = SendHttpImageRequest(server_->http_address(), "mlp_slow");
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(milliseconds(200));
  close(fd);

  // Past the 1.5 s delay: had any of the four been computed, it would be now.
  std::this_thread::sleep_for(milliseconds(2000));
  EXPECT_EQ(Executions(*stub, "mlp_slow"), before) << "an expired or cancelled request was computed";
}

// A batched model on two hosts: both are used, and killing one while load
// runs fails no request (in-flight batches are retried on the other).
TEST_F(BatchingTest, ReplicasShareLoadAndSurviveAKill) {
  WatchdogScope watchdog(seconds(120), "ReplicasShareLoadAndSurviveAKill");
  const auto hosts = server_->WaitForHosts(milliseconds(5000));
  ASSERT_EQ(hosts.size(), 2u);
  auto cpu_ticks = [](pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    std::istringstream rest(s.substr(s.rfind(')') + 2));
    std::string field;
    long long ticks = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14 || i == 15) ticks += std::stoll(field);
    }
    return ticks;
  };
  const long long cpu0_before = cpu_ticks(hosts.at("cpu0")), cpu1_before = cpu_ticks(hosts.at("cpu1"));

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      auto stub = server_->NewConnectionStub();
      const auto request = ImageRequest("mlp_replicas", RandomImages(16, static_cast<uint32_t>(c)));
      while (!stop) {
        InferResult r = Infer(*stub, request, seconds(5));
        if (r.status.ok()) {
          ok++;
        } else {
          std::lock_guard<std::mutex> lock(mu);
          errors.push_back(Describe(r.status));
        }
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(1500));
  const long long cpu0_mid = cpu_ticks(hosts.at("cpu0")), cpu1_mid = cpu_ticks(hosts.at("cpu1"));
  const int ok_before_kill = ok.load();
  ASSERT_EQ(kill(hosts.at("cpu1"), SIGKILL), 0);
  std::this_thread::sleep_for(milliseconds(1500));
  stop = true;
  for (auto& t : clients) t.join();

  std::printf("replicas: host CPU ticks during load cpu0 +%lld cpu1 +%lld; %d calls OK (%d before the kill)\n",
              cpu0_mid - cpu0_before, cpu1_mid - cpu1_before, ok.load(), ok_before_kill);
  EXPECT_GT(cpu0_mid - cpu0_before, 5) << "replica cpu0 was not used";
  EXPECT_GT(cpu1_mid - cpu1_before, 5) << "replica cpu1 was not used";
  EXPECT_GT(ok.load(), ok_before_kill) << "nothing was served after the kill";
  EXPECT_TRUE(errors.empty()) << errors.size() << " calls failed, first: " << errors.front();
  server_->WaitForHosts(milliseconds(10000), {{"cpu1", hosts.at("cpu1")}});
}

}  // namespace
}  // namespace es::it
