// Acceptance of the batcher's ordering and trimming through real gRPC calls
// to a real server: request priorities decide which queued requests run
// first, and preferred batch sizes trim the batches the host computes.
//
// The models (make_queue_models.py) take about as long as their largest input
// value says (N element-wise sines), on one host with one executor: one
// long request (the blocker) holds the host while the test fills the queue,
// so what leaves the queue next is decided by the batcher alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "tests/common/test_paths.h"
#include "tests/integration/kserve_helpers.h"
#include "tests/integration/server_process.h"
#include "tests/integration/shared_server.h"

namespace es::it {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Loop iterations for the blocker: ~5 us each in the host here with the
// CPU's own BLAS kernels on an idle machine (so ~1.4 s), several times that
// on a loaded one; far longer than filling the queue takes (~350 ms), also
// on an idle machine (at 70,000 the blocker ended at 347 ms, before the
// queue was filled, in a CI run with nothing else running). For each queued
// request: a few ms to tens of ms a batch, so batches finish well apart.
constexpr float kBlockerWork = 280000;
constexpr float kBatchWork = 3000;

// Asynchronous calls, awaited together.
class AsyncCalls {
 public:
  explicit AsyncCalls(std::shared_ptr<grpc::Channel> channel)
      : stub_(inference::GRPCInferenceService::NewStub(std::move(channel))) {}

  // Sends a one-row request of `value` to `model` with `priority` (0: none),
  // a deadline `timeout` from now and the request id `id`; returns its index.
  size_t Send(const std::string& model, float value, int priority, milliseconds timeout = seconds(60),
              const std::string& id = "") {
    auto call = std::make_unique<Call>();
    call->request = RawRequest(model, {1, 1}, {value});
    call->request.set_id(id);
    if (priority > 0) (*call->request.mutable_parameters())["priority"].set_int64_param(priority);
    SetDeadline(&call->ctx, timeout);
    Call* raw = call.get();
    size_t index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      index = calls_.size();
      calls_.push_back(std::move(call));
    }
    stub_->async()->ModelInfer(&raw->ctx, &raw->request, &raw->response, [this, raw](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu_);
      raw->status = std::move(s);
      raw->done = true;
      cv_.notify_all();
    });
    return index;
  }
  bool WaitAll(std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      return std::all_of(calls_.begin(), calls_.end(), [](const auto& c) { return c->done; });
    });
  }
  void Cancel(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_[i]->ctx.TryCancel();
  }
  bool Done(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_[i]->done;
  }
  // After WaitAll.
  const grpc::Status& status(size_t i) const { return calls_[i]->status; }

 private:
  struct Call {
    grpc::ClientContext ctx;
    inference::ModelInferRequest request;
    inference::ModelInferResponse response;
    grpc::Status status;
    bool done = false;
  };
  std::unique_ptr<Stub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Call>> calls_;  // GUARDED_BY(mu_) (the vector; each call is written once)
};

class QueueOrderTest : public SharedServerSuite<QueueOrderTest> {
 public:  // PrepareServer: called by SharedServerSuite
  // The queue models (make_queue_models.py) on one single-executor host.
  static std::string PrepareServer(const std::filesystem::path& dir, ServerProcess::Options* options) {
    std::string output;
    const int rc =
        RunCommand({"/usr/bin/python3", std::string(es::test_paths::kIntegrationSourceDir) + "/make_queue_models.py",
                    dir.string()},
                   seconds(180), &output);
    if (rc != 0) return "make_queue_models.py failed (rc " + std::to_string(rc) + "): " + output;
    options->repository = dir.string();
    options->hosts = {{"cpu0", 0, "", 1}};
    // The tests also check what the debug log says about batches and drops.
    options->extra_args = {"--log-level", "debug"};
    return "";
  }

 protected:

  // batch size -> executions, from ModelStatistics.
  static std::map<uint64_t, uint64_t> BatchCounts(const std::string& model) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    inference::ModelStatisticsRequest req;
    req.set_name(model);
    inference::ModelStatisticsResponse resp;
    std::map<uint64_t, uint64_t> counts;
    const grpc::Status s = server_->Stub()->ModelStatistics(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << Describe(s);
    if (!s.ok() || resp.model_stats_size() == 0) return counts;
    for (const auto& b : resp.model_stats(0).batch_stats()) counts[b.batch_size()] = b.compute_infer().count();
    return counts;
  }

};

// Eight priority-2 requests queue behind the blocker, then four priority-1
// ones. slow_prio batches 4 rows: the four priority-1 requests make the first
// batch after the blocker, so on its one executor they are computed, and
// answered, before every priority-2 request, although they were sent last.
// Were priorities ignored (FIFO), the first four priority-2 requests would
// make that batch and this would fail.
//
// Which requests made which batch is read from the router's debug log (each
// batch's line names its requests' ids), not from when the answers reached
// this client: a client thread that does not run for a few ms receives all
// the answers at once, in no meaningful order (a CI run saw every answer
// arrive within the same millisecond).
TEST_F(QueueOrderTest, HigherPriorityRequestsQueuedLaterCompleteFirst) {
  WatchdogScope watchdog(seconds(90), "HigherPriorityRequestsQueuedLaterCompleteFirst");
  // Ids that no other test on the suite's server uses.
  const std::string run = std::to_string(Clock::now().time_since_epoch().count());
  AsyncCalls calls(server_->Channel());
  const size_t blocker = calls.Send("slow_prio", kBlockerWork, 2, seconds(60), "blocker-" + run);
  std::this_thread::sleep_for(milliseconds(150));  // it leaves the queue (1 ms delay) and holds the host
  std::vector<size_t> low, high;
  for (int i = 0; i < 8; ++i) {
    low.push_back(calls.Send("slow_prio", kBatchWork, 2, seconds(60), "low" + std::to_string(i) + "-" + run));
  }
  std::this_thread::sleep_for(milliseconds(100));
  for (int i = 0; i < 4; ++i) {
    high.push_back(calls.Send("slow_prio", kBatchWork, 1, seconds(60), "high" + std::to_string(i) + "-" + run));
  }
  std::this_thread::sleep_for(milliseconds(100));
  const bool blocker_done_early = calls.Done(blocker);
  ASSERT_TRUE(calls.WaitAll(seconds(60)));
  for (size_t i = 0; i <= high.back(); ++i) ASSERT_TRUE(calls.status(i).ok()) << i << ": " << Describe(calls.status(i));
  ASSERT_FALSE(blocker_done_early) << "the blocker finished before the queue was filled: the test proves nothing";

  // The batches: the blocker, then three of 4 rows.
  EXPECT_EQ(BatchCounts("slow_prio"), (std::map<uint64_t, uint64_t>{{1, 1}, {4, 3}}));
  // Their lines in the log, in the order they left the queue.
  const std::string log = server_->LogTail(1 << 20);
  std::vector<std::string> batches;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("model 'slow_prio' version 1: batch of") != std::string::npos &&
        line.find("-" + run + "'") != std::string::npos) {
      batches.push_back(line);
    }
  }
  ASSERT_EQ(batches.size(), 4u) << "expected the blocker's batch and three more, each naming its requests; found:\n"
                                << ::testing::PrintToString(batches);
  EXPECT_NE(batches[0].find("'blocker-" + run + "'"), std::string::npos) << batches[0];
  for (int i = 0; i < 4; ++i) {
    const std::string id = "'high" + std::to_string(i) + "-" + run + "'";
    EXPECT_NE(batches[1].find(id), std::string::npos)
        << "priority-1 request " << id << " was not in the first batch after the blocker:\n"
        << batches[1] << "\n"
        << batches[2] << "\n"
        << batches[3];
  }
}

// Six one-row requests wait behind the blocker; slow_pref batches up to 8
// rows and prefers 4: the six leave as a batch of 4 and then one of 2.
// Without trimming they would leave as one batch of 6.
TEST_F(QueueOrderTest, PreferredBatchSizeTrimsTheBatch) {
  WatchdogScope watchdog(seconds(90), "PreferredBatchSizeTrimsTheBatch");
  AsyncCalls calls(server_->Channel());
  const size_t blocker = calls.Send("slow_pref", kBlockerWork, 0);
  std::this_thread::sleep_for(milliseconds(150));
  for (int i = 0; i < 6; ++i) calls.Send("slow_pref", kBatchWork, 0);
  std::this_thread::sleep_for(milliseconds(100));
  const bool blocker_done_early = calls.Done(blocker);
  ASSERT_TRUE(calls.WaitAll(seconds(60)));
  for (size_t i = 0; i < 7; ++i) ASSERT_TRUE(calls.status(i).ok()) << i << ": " << Describe(calls.status(i));
  ASSERT_FALSE(blocker_done_early) << "the blocker finished before the queue was filled: the test proves nothing";
  EXPECT_EQ(BatchCounts("slow_pref"), (std::map<uint64_t, uint64_t>{{1, 1}, {2, 1}, {4, 1}}))
      << "expected the blocker (1), then the six as 4 + 2";
  // --log-level debug says how each batch left the queue.
  const std::string log = server_->LogTail(1 << 20);
  EXPECT_NE(log.find("model 'slow_pref' version 1: batch of 4 row(s) from 4 request(s), oldest waited"),
            std::string::npos)
      << log;
}

// An ensemble request shares its deadline and its client's cancellation with
// its members' calls. The blocker holds the host; six slow_pair requests
// then queue (their slow_a calls wait in the router for the slot the blocker
// holds): three expire after 300 ms, three are cancelled by their client.
// None of them may still be computed on slow_a once the blocker is done:
// slow_a runs the blocker alone. Were members' queued calls left behind, the
// six rows would run as batches after the blocker.
TEST_F(QueueOrderTest, ExpiredOrCancelledEnsembleRequestsTakeTheirMembersQueuedWork) {
  WatchdogScope watchdog(seconds(90), "ExpiredOrCancelledEnsembleRequestsTakeTheirMembersQueuedWork");
  AsyncCalls calls(server_->Channel());
  // It must outlast the 300 ms deadlines.
  const size_t blocker = calls.Send("slow_a", kBlockerWork, 0);
  std::this_thread::sleep_for(milliseconds(150));
  std::vector<size_t> expiring, cancelled;
  for (int i = 0; i < 3; ++i) expiring.push_back(calls.Send("slow_pair", kBatchWork, 0, milliseconds(300)));
  for (int i = 0; i < 3; ++i) cancelled.push_back(calls.Send("slow_pair", kBatchWork, 0));
  std::this_thread::sleep_for(milliseconds(100));
  for (size_t c : cancelled) calls.Cancel(c);
  const bool blocker_done_early = calls.Done(blocker);
  ASSERT_TRUE(calls.WaitAll(seconds(60)));
  ASSERT_FALSE(blocker_done_early) << "the blocker finished before the queue was filled: the test proves nothing";
  ASSERT_TRUE(calls.status(blocker).ok()) << Describe(calls.status(blocker));
  for (size_t e : expiring) EXPECT_EQ(calls.status(e).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << e;
  for (size_t c : cancelled) EXPECT_EQ(calls.status(c).error_code(), grpc::StatusCode::CANCELLED) << c;
  // The host finishes slow_b's calls (sent before the blocker let go) and
  // anything else queued; then slow_a's counts are final.
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_EQ(BatchCounts("slow_a"), (std::map<uint64_t, uint64_t>{{1, 1}}))
      << "slow_a computed work of ensemble requests that had expired or been cancelled";
  // --log-level debug names each drop where it is decided.
  const std::string log = server_->LogTail(1 << 20);
  EXPECT_NE(log.find("model 'slow_a': deadline exceeded after"), std::string::npos) << log;
  EXPECT_NE(log.find("model 'slow_a': request cancelled"), std::string::npos) << log;
}

}  // namespace
}  // namespace es::it
