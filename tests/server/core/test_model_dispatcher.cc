// ModelDispatcher against a real HostConnection (a real channel in shared
// memory) whose host side is played by a thread of this test: it sees every
// batch the dispatcher sends (rows and values), can hold the first one back
// (a busy host, so a queue builds up), and answers each row with its input
// times 10. The model: FP32 input [-1, 2] -> FP32 output [-1, 2], batched.
#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/core/model_dispatcher.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int64_t kWidth = 2;  // floats per row
constexpr float kScale = 10;   // the host answers input * kScale

// The process's log, kept for a test to read: spdlog's default logger from
// before main (before any thread of a test logs; swapping the default
// logger while one does would race), at spdlog's default level, info.
class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string Text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    text_.clear();
  }

 private:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    text_.append(msg.payload.data(), msg.payload.size()) += '\n';
  }
  void flush_() override {}
  std::string text_;
};

CaptureSink& CapturedLog() {
  static const auto sink = [] {
    auto made = std::make_shared<CaptureSink>();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", made));
    return made;
  }();
  return *sink;
}
[[maybe_unused]] const bool kLogCapturedBeforeMain = (CapturedLog(), true);

// Plays the host on a HostConnection's channel, attached through its own
// descriptor and mapping as a real host process would be.
class FakeHost {
 public:
  FakeHost() {
    auto created = HostConnection::Create("fake", 16 << 20);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    conn_ = std::shared_ptr<HostConnection>(std::move(created).value());
    auto attached = ipc::Channel::Attach(dup(conn_->channel().fd()));
    EXPECT_TRUE(attached.ok()) << attached.status().ToString();
    channel_ = std::make_unique<ipc::Channel>(std::move(attached).value());
    conn_->StartCompletionThread();
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeHost() {
    Open();
    stop_ = true;
    thread_.join();
    conn_->Close(Status::Unavailable("test over"));
  }

  std::shared_ptr<HostConnection> connection() const { return conn_; }
  // While closed, the host takes the next request and sits on it.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits until the host has taken `n` batches; false after 5 s.
  bool WaitBatches(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(5), [&] { return batches_.size() >= n; });
  }
  // Each batch's first value of every row, in the order the host took them.
  std::vector<std::vector<float>> batches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }
  std::vector<int64_t> batch_sizes() const {
    std::vector<int64_t> sizes;
    for (const auto& b : batches()) sizes.push_back(static_cast<int64_t>(b.size()));
    return sizes;
  }

 private:
  void Loop() {
    ipc::HostEnd end(channel_.get());
    ipc::RequestDesc req;
    while (!stop_) {
      if (!end.NextRequest(&req)) continue;
      const ipc::TensorDesc& in = req.inputs[0];
      const int64_t rows = in.dims[0];
      const auto* x = reinterpret_cast<const float*>(channel_->arena() + in.offset);
      std::vector<float> firsts;
      for (int64_t r = 0; r < rows; ++r) firsts.push_back(x[r * kWidth]);
      {
        std::unique_lock<std::mutex> lock(mu_);
        batches_.push_back(firsts);
        cv_.notify_all();
        cv_.wait(lock, [&] { return open_; });
      }
      auto* y = reinterpret_cast<float*>(channel_->arena() + req.output_offset);
      for (int64_t i = 0; i < rows * kWidth; ++i) y[i] = x[i] * kScale;
      ipc::CompletionDesc comp{};
      comp.request_id = req.request_id;
      comp.num_outputs = 1;
      comp.outputs[0].offset = req.output_offset;
      comp.outputs[0].bytes = static_cast<uint64_t>(rows * kWidth) * sizeof(float);
      comp.outputs[0].datatype = static_cast<uint32_t>(DataType::kFp32);
      comp.outputs[0].ndim = 2;
      comp.outputs[0].dims[0] = rows;
      comp.outputs[0].dims[1] = kWidth;
      comp.compute_ns = 1000;
      end.Complete(comp, stop_);
    }
  }

  std::shared_ptr<HostConnection> conn_;
  std::unique_ptr<ipc::Channel> channel_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;                         // GUARDED_BY(mu_)
  std::vector<std::vector<float>> batches_;  // GUARDED_BY(mu_)
};

// One request and what came back for it.
struct Call {
  std::vector<float> input;
  std::shared_ptr<InferRequest> request;
  std::atomic<bool> cancel{false};
  bool done = false;
  Status status;
  InferResponse response;
  int order = -1;  // position among all answers
};

class DispatcherTest : public ::testing::Test {
 protected:
  DispatcherTest() {
    model_.name = "m";
    model_.platform = "torchscript";
    model_.max_batch_size = 8;
    model_.inputs = {{"in", DataType::kFp32, {kWidth}}};
    model_.outputs = {{"out", DataType::kFp32, {kWidth}}};
    model_.versions = {1};
    model_.hosts = {"fake"};
    model_.dynamic_batching.enabled = true;
    model_.dynamic_batching.max_queue_delay_us = 1000;
    HostConfig host;
    host.name = "fake";
    host.executors = 1;
    config_.hosts = {host};
  }
  ~DispatcherTest() override {
    // Even after a failed assertion: every call answered (the host let go)
    // before the dispatcher goes, since answers call into it.
    host_.Open();
    WaitAll();
    dispatcher_.reset();
  }

  void StartDispatcher() {
    auto conn = host_.connection();
    dispatcher_ = std::make_unique<ModelDispatcher>(
        &model_, &config_, std::vector<DispatchHost>{{"fake", [conn] { return conn; }}}, nullptr);
  }

  // Sends a request of `rows` rows whose values start at `value` (each row's
  // first value is value + row); `priority` 0 = the model's default.
  // How a request's input bytes arrive: in memory, or read at submission
  // (as a client's shared-memory input is), successfully or not.
  enum class Source { kMemory, kReadAtSubmit, kReadFails };

  Call* Send(int64_t rows, float value, int priority = 0, Clock::time_point deadline = Clock::time_point::max(),
             Source source = Source::kMemory, std::string id = "") {
    calls_.push_back(std::make_unique<Call>());
    Call* call = calls_.back().get();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < kWidth; ++c) call->input.push_back(value + static_cast<float>(r) + 0.5f * c);
    }
    auto request = std::make_shared<InferRequest>();
    request->model = &model_;
    request->version = 1;
    request->id = std::move(id);
    InferInput in;
    in.spec = &model_.inputs[0];
    in.datatype = DataType::kFp32;
    in.shape = {rows, kWidth};
    in.data = reinterpret_cast<const uint8_t*>(call->input.data());
    in.bytes = call->input.size() * sizeof(float);
    if (source != Source::kMemory) {
      in.data = nullptr;
      in.read_into = [call, fails = source == Source::kReadFails](uint8_t* dest) {
        if (fails) return Status::InvalidArgument("region 'r': the object was truncated");
        std::memcpy(dest, call->input.data(), call->input.size() * sizeof(float));
        return Status::Ok();
      };
    }
    request->inputs.push_back(in);
    request->priority = priority;
    request->deadline = deadline;
    request->cancelled = [call] { return call->cancel.load(); };
    call->request = request;
    dispatcher_->Infer(request, 1, [this, call](const Status& s, InferResponse response) {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_FALSE(call->done) << "answered twice";
      call->done = true;
      call->status = s;
      call->response = std::move(response);
      call->order = answered_++;
      cv_.notify_all();
    });
    return call;
  }

  bool WaitDone(Call* call, milliseconds timeout = milliseconds(5000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return call->done; });
  }
  bool WaitAll(milliseconds timeout = milliseconds(5000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const auto& c : calls_) {
        if (!c->done) return false;
      }
      return true;
    });
  }
  bool Done(Call* call) {
    std::lock_guard<std::mutex> lock(mu_);
    return call->done;
  }

  // Holds the host on a first request of one row (value -1), so that what is
  // sent next queues up; returns that request.
  Call* OccupyTheHost() {
    host_.Close();
    const size_t taken = host_.batches().size();
    Call* blocker = Send(1, -1);
    EXPECT_TRUE(host_.WaitBatches(taken + 1));
    return blocker;
  }

  // The request's answer is its own rows times kScale, shape [rows, 2].
  static ::testing::AssertionResult AnsweredWithItsOwnRows(const Call& call) {
    if (!call.status.ok()) return ::testing::AssertionFailure() << call.status.ToString();
    if (call.response.outputs.size() != 1)
      return ::testing::AssertionFailure() << "outputs: " << call.response.outputs.size();
    const InferOutput& out = call.response.outputs[0];
    const int64_t rows = static_cast<int64_t>(call.input.size()) / kWidth;
    if (out.name != "out" || out.datatype != DataType::kFp32 || out.shape != std::vector<int64_t>{rows, kWidth} ||
        out.data.size() != call.input.size() * sizeof(float)) {
      return ::testing::AssertionFailure() << "output '" << out.name << "' of " << out.data.size() << " bytes";
    }
    std::vector<float> values(call.input.size());
    std::memcpy(values.data(), out.data.data(), out.data.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i] != call.input[i] * kScale) {
        return ::testing::AssertionFailure()
               << "value " << i << ": " << values[i] << ", expected " << call.input[i] * kScale;
      }
    }
    return ::testing::AssertionSuccess();
  }

  ModelConfig model_;
  ServerConfig config_;
  FakeHost host_;
  std::unique_ptr<ModelDispatcher> dispatcher_;
  std::mutex mu_;
  std::condition_variable cv_;
  int answered_ = 0;  // GUARDED_BY(mu_)
  std::vector<std::unique_ptr<Call>> calls_;
};

// A queue of 20 rows behind a busy host leaves in batches of max_batch_size
// (8, 8, then the 4 left once they have waited the delay), and every request
// gets exactly its own rows back, whatever batch it was in.
TEST_F(DispatcherTest, BatchesUpToMaxBatchSizeAndSplitsOutputsPerRequest) {
  StartDispatcher();
  OccupyTheHost();
  for (int i = 0; i < 20; ++i) Send(1, static_cast<float>(100 * i));
  host_.Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{1, 8, 8, 4}));
  for (const auto& c : calls_) EXPECT_TRUE(AnsweredWithItsOwnRows(*c));
}

// Requests whose input is read at submission (a client's shared-memory
// input, read straight into the arena) run in batches of their own: a read
// that fails fails that request alone, and the others batch as before.
TEST_F(DispatcherTest, RequestsReadAtSubmissionRunAloneAndAFailedReadFailsOnlyThem) {
  StartDispatcher();
  OccupyTheHost();
  Call* a = Send(1, 100);
  Call* b = Send(1, 200);
  Call* read = Send(1, 300, 0, Clock::time_point::max(), Source::kReadAtSubmit);
  Call* broken = Send(1, 400, 0, Clock::time_point::max(), Source::kReadFails);
  Call* e = Send(1, 500);
  host_.Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{1, 3, 1})) << "the blocker; a, b, e; then `read` alone";
  for (Call* c : {a, b, e, read}) EXPECT_TRUE(AnsweredWithItsOwnRows(*c));
  EXPECT_EQ(broken->status.code(), StatusCode::kInvalidArgument) << broken->status.ToString();
  EXPECT_NE(broken->status.message().find("truncated"), std::string::npos) << broken->status.ToString();
}

// Requests of several rows are split back along their own rows.
TEST_F(DispatcherTest, MultiRowRequestsGetTheirOwnRows) {
  StartDispatcher();
  OccupyTheHost();
  Send(3, 100);
  Send(1, 200);
  Send(2, 300);
  Send(2, 400);  // 8 rows: one full batch
  Send(3, 500);  // does not fit: the next batch
  host_.Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{1, 8, 3}));
  for (const auto& c : calls_) EXPECT_TRUE(AnsweredWithItsOwnRows(*c));
}

// Fewer rows than max_batch_size wait for the queue delay, then leave
// together; a full batch leaves at once.
TEST_F(DispatcherTest, PartialBatchWaitsForTheQueueDelayAndAFullOneDoesNot) {
  model_.dynamic_batching.max_queue_delay_us = 300000;
  StartDispatcher();
  const auto start = Clock::now();
  Call* a = Send(1, 1);
  Send(2, 2);
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_FALSE(Done(a)) << "a partial batch left before its queue delay";
  ASSERT_TRUE(WaitAll());
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, milliseconds(290));
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{3}));

  const auto full_start = Clock::now();
  for (int i = 0; i < 4; ++i) Send(2, static_cast<float>(10 * i));
  ASSERT_TRUE(WaitAll());
  EXPECT_LT(Clock::now() - full_start, milliseconds(150)) << "a full batch waited for the delay";
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{3, 8}));
  for (const auto& c : calls_) EXPECT_TRUE(AnsweredWithItsOwnRows(*c));
}

// Six rows waiting with preferred sizes [4]: the batch is trimmed to 4 and
// the other two follow in the next batch (without trimming: one batch of 6).
TEST_F(DispatcherTest, BatchIsTrimmedToTheLargestPreferredSizeItFills) {
  model_.dynamic_batching.preferred_batch_sizes = {4};
  StartDispatcher();
  OccupyTheHost();
  for (int i = 0; i < 6; ++i) Send(1, static_cast<float>(i));
  std::this_thread::sleep_for(milliseconds(20));  // past the 1 ms delay: no waiting for more
  host_.Open();
  ASSERT_TRUE(WaitAll());
  ASSERT_EQ(host_.batch_sizes(), (std::vector<int64_t>{1, 4, 2}));
  // The trimmed requests keep their order: FIFO within the level.
  const auto batches = host_.batches();
  EXPECT_EQ(batches[1], (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(batches[2], (std::vector<float>{4, 5}));
  for (const auto& c : calls_) EXPECT_TRUE(AnsweredWithItsOwnRows(*c));
}

// Priority 1 requests sent after priority 2 ones still run first.
TEST_F(DispatcherTest, HigherPriorityRequestsRunFirst) {
  model_.max_batch_size = 4;
  StartDispatcher();
  OccupyTheHost();
  std::vector<Call*> low, high;
  for (int i = 0; i < 4; ++i) low.push_back(Send(1, static_cast<float>(200 + i), 2));
  for (int i = 0; i < 4; ++i) high.push_back(Send(1, static_cast<float>(100 + i), 1));
  Call* by_default = Send(1, 300);  // the default priority is 2: after the low ones
  host_.Open();
  ASSERT_TRUE(WaitAll());
  const auto batches = host_.batches();
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[1], (std::vector<float>{100, 101, 102, 103})) << "the priority 1 requests were not first";
  EXPECT_EQ(batches[2], (std::vector<float>{200, 201, 202, 203}));
  EXPECT_EQ(batches[3], (std::vector<float>{300}));
  for (Call* h : high) {
    for (Call* l : low) EXPECT_LT(h->order, l->order);
  }
  EXPECT_GT(by_default->order, low.back()->order);
  for (const auto& c : calls_) EXPECT_TRUE(AnsweredWithItsOwnRows(*c));
}

// The debug line of each batch names the ids of its requests, as a log line
// quotes a client's text, the first eight and then how many more (requests
// without an id are not counted): what an operator greps for when a request
// went astray, without a batch of thousands writing thousands of ids.
TEST_F(DispatcherTest, BatchDebugLineNamesTheFirstIdsQuotedAndCountsTheRest) {
  CapturedLog().Clear();
  spdlog::default_logger()->set_level(spdlog::level::debug);  // the logger's level is atomic
  struct Restore {
    ~Restore() { spdlog::default_logger()->set_level(spdlog::level::info); }
  } restore;
  model_.max_batch_size = 16;
  StartDispatcher();
  OccupyTheHost();
  Send(1, 0, 0, Clock::time_point::max(), Source::kMemory, "it's\nforged");
  for (int i = 1; i < 12; ++i)
    Send(1, static_cast<float>(i), 0, Clock::time_point::max(), Source::kMemory, "r" + std::to_string(i));
  Send(1, 12);  // no id
  host_.Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{1, 13}));
  const std::string text = CapturedLog().Text();
  EXPECT_NE(text.find("batch of 13 row(s) from 13 request(s)"), std::string::npos) << text;
  EXPECT_NE(text.find(", requests 'it?s?forged', 'r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7' and 4 more\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("'r8'"), std::string::npos) << text;
}

// max_queue_size requests waiting: the next is refused at once, naming the
// limit; those queued still run.
TEST_F(DispatcherTest, QueueFullByCountIsResourceExhaustedAtOnce) {
  model_.dynamic_batching.max_queue_size = 3;
  StartDispatcher();
  OccupyTheHost();
  for (int i = 0; i < 3; ++i) Send(1, static_cast<float>(i));
  Call* refused = Send(1, 9);
  ASSERT_TRUE(Done(refused)) << "the refusal should not wait";
  EXPECT_EQ(refused->status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused->status.message().find("max_queue_size 3"), std::string::npos) << refused->status.message();
  host_.Open();
  ASSERT_TRUE(WaitAll());
  for (const auto& c : calls_) {
    if (c.get() != refused) {
      EXPECT_TRUE(AnsweredWithItsOwnRows(*c));
    }
  }
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{1, 3}));
}

// The queue's input bytes are bounded too: with room for 40 bytes (five
// rows of 8), a 2-row request that would pass it is refused while a 1-row
// one still fits; the count limit (1024) is far away.
TEST_F(DispatcherTest, QueueFullByBytesIsResourceExhaustedAtOnce) {
  model_.dynamic_batching.max_queue_bytes = 5 * kWidth * sizeof(float);
  StartDispatcher();
  OccupyTheHost();
  Send(2, 0);
  Send(2, 10);
  Call* too_big = Send(2, 20);  // 32 + 16 > 40
  ASSERT_TRUE(Done(too_big)) << "the refusal should not wait";
  EXPECT_EQ(too_big->status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_big->status.message().find("max_queue_bytes 40"), std::string::npos) << too_big->status.message();
  EXPECT_NE(too_big->status.message().find("'m'"), std::string::npos) << too_big->status.message();
  Call* fits = Send(1, 30);  // 32 + 8 = 40
  EXPECT_FALSE(Done(fits));
  host_.Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_TRUE(AnsweredWithItsOwnRows(*fits));
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{1, 5}));
  // Bytes are given back as batches leave: a queue of 40 bytes fits again.
  OccupyTheHost();
  Call* again = Send(2, 40);
  Call* again2 = Send(3, 50);
  EXPECT_FALSE(Done(again));
  EXPECT_FALSE(Done(again2));
  host_.Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_TRUE(AnsweredWithItsOwnRows(*again));
  EXPECT_TRUE(AnsweredWithItsOwnRows(*again2));
}

// Requests whose deadline passes, or whose client cancels, while they wait
// are answered at once (the host is still busy) and never reach the host.
TEST_F(DispatcherTest, ExpiredAndCancelledRequestsAreNeverComputed) {
  StartDispatcher();
  Call* blocker = OccupyTheHost();
  Call* expiring = Send(1, 1, 0, Clock::now() + milliseconds(50));
  Call* cancelled = Send(1, 2);
  Call* kept = Send(1, 3);
  cancelled->cancel = true;
  ASSERT_TRUE(WaitDone(expiring, milliseconds(1000)));
  ASSERT_TRUE(WaitDone(cancelled, milliseconds(1000)));
  EXPECT_FALSE(Done(blocker));
  EXPECT_EQ(expiring->status.code(), StatusCode::kDeadlineExceeded) << expiring->status.ToString();
  EXPECT_NE(expiring->status.message().find("not computed"), std::string::npos);
  EXPECT_EQ(cancelled->status.code(), StatusCode::kCancelled) << cancelled->status.ToString();
  host_.Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_TRUE(AnsweredWithItsOwnRows(*kept));
  // The host saw the blocker and `kept`, nothing else.
  EXPECT_EQ(host_.batches(), (std::vector<std::vector<float>>{{-1}, {3}}));
}

// Shutdown: FailQueued answers every queued request at once with its
// status, and every one queued after it; the request already on the host
// is not touched (the host's own stop answers it).
TEST_F(DispatcherTest, FailQueuedAnswersTheQueueAndWhatComesLater) {
  model_.dynamic_batching.max_queue_delay_us = 10000000;  // 10 s: nothing leaves by itself
  StartDispatcher();
  host_.Close();
  Call* blocker = Send(model_.max_batch_size, -1);  // a full batch leaves at once
  ASSERT_TRUE(host_.WaitBatches(1));
  Call* a = Send(1, 1);
  Call* b = Send(2, 2, 2);
  EXPECT_FALSE(Done(a));
  EXPECT_EQ(dispatcher_->FailQueued(Status::Unavailable("server is shutting down")), 2u);
  ASSERT_TRUE(Done(a)) << "FailQueued should answer at once";
  ASSERT_TRUE(Done(b));
  for (Call* c : {a, b}) {
    EXPECT_EQ(c->status.code(), StatusCode::kUnavailable) << c->status.ToString();
    EXPECT_EQ(c->status.message(), "server is shutting down");
  }
  Call* late = Send(1, 3);
  ASSERT_TRUE(Done(late)) << "a request after FailQueued should be answered at once";
  EXPECT_EQ(late->status.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(Done(blocker));
  host_.Open();
  ASSERT_TRUE(WaitDone(blocker));
  EXPECT_TRUE(AnsweredWithItsOwnRows(*blocker));
  EXPECT_EQ(host_.batch_sizes(), (std::vector<int64_t>{model_.max_batch_size})) << "a failed request reached the host";
  EXPECT_EQ(dispatcher_->FailQueued(Status::Unavailable("again")), 0u);
}

// No live connection: UNAVAILABLE naming the model and the host.
TEST_F(DispatcherTest, NoLiveHostIsUnavailableNamingIt) {
  dispatcher_ = std::make_unique<ModelDispatcher>(
      &model_, &config_, std::vector<DispatchHost>{{"gone", [] { return std::shared_ptr<HostConnection>(); }}},
      nullptr);
  EXPECT_FALSE(dispatcher_->Ready());
  Call* call = Send(1, 1);
  ASSERT_TRUE(WaitDone(call));
  EXPECT_EQ(call->status.code(), StatusCode::kUnavailable);
  EXPECT_NE(call->status.message().find("host 'gone' is down"), std::string::npos) << call->status.message();
  EXPECT_NE(call->status.message().find("'m'"), std::string::npos) << call->status.message();
}

}  // namespace
}  // namespace es
