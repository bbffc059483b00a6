#include "clients/loadgen/engine.h"

#include <grpc/support/time.h>
#include <sys/prctl.h>

#include <algorithm>
#include <random>

namespace es::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

// How long a worker waits for an event before it looks at the stop flag again.
constexpr auto kPoll = std::chrono::milliseconds(20);

gpr_timespec ToGpr(Clock::time_point when) {
  const auto delta = std::chrono::duration_cast<std::chrono::nanoseconds>(when - Clock::now()).count();
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(std::max<int64_t>(delta, 0), GPR_TIMESPAN));
}

}  // namespace

uint64_t Sample::failed() const {
  uint64_t n = 0;
  for (const auto& [code, count] : errors) n += count;
  return n;
}

void Sample::Merge(Sample&& other) {
  if (latencies_ns.empty()) {
    latencies_ns = std::move(other.latencies_ns);
  } else {
    latencies_ns.insert(latencies_ns.end(), other.latencies_ns.begin(), other.latencies_ns.end());
  }
  for (const auto& [code, count] : other.errors) errors[code] += count;
  sent += other.sent;
  skipped += other.skipped;
  late_ns_sum += other.late_ns_sum;
  elapsed += other.elapsed;
}

struct LoadEngine::Call {
  grpc::ClientContext ctx;
  grpc::ByteBuffer response;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  Clock::time_point scheduled;
  int slot = -1;  // closed loop: the slot that sends again on completion
};

struct LoadEngine::Worker {
  int index = 0;
  grpc::CompletionQueue cq;
  grpc::ByteBuffer request;  // this worker's reference to the serialized request
  std::vector<int> slots;    // closed loop
  double rate = 0;           // open loop, requests/s of this worker
  int64_t max_inflight = 1;
  std::atomic<int64_t> in_flight{0};
  size_t next_channel = 0;   // open loop (pacer thread only)
  std::mt19937_64 rng;
  std::mutex mu;
  Sample sample;  // guarded by mu
  std::thread drainer;  // completions (and, closed loop, the next calls)
  std::thread pacer;    // open loop: sends on schedule
  std::atomic<bool> pacer_running{false};
};

LoadEngine::LoadEngine(std::vector<std::shared_ptr<grpc::Channel>> channels, int threads, std::string method,
                       std::chrono::milliseconds timeout)
    : threads_(std::max(1, threads)), method_(std::move(method)), timeout_(timeout) {
  for (auto& channel : channels) stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
}

LoadEngine::~LoadEngine() { Stop(); }

void LoadEngine::Start(const LoadPlan& plan, const std::string& request_bytes) {
  Stop();
  plan_ = plan;
  stopping_.store(false);
  last_sample_ = Clock::now();
  grpc::Slice slice(request_bytes);
  const grpc::ByteBuffer request(&slice, 1);
  const int threads = plan.concurrency > 0 ? std::min(threads_, plan.concurrency) : threads_;
  for (int t = 0; t < threads; ++t) {
    auto w = std::make_unique<Worker>();
    w->index = t;
    w->request = request;
    w->rng.seed(plan.seed * 1000003ULL + static_cast<uint64_t>(t));
    w->next_channel = static_cast<size_t>(t);
    if (plan.concurrency > 0) {
      for (int k = t; k < plan.concurrency; k += threads) w->slots.push_back(k);
    } else {
      w->rate = plan.rate / threads;
      w->max_inflight = std::max<int64_t>(1, plan.max_inflight / threads);
    }
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    Worker* ptr = w.get();
    w->drainer = std::thread([this, ptr] { Drain(ptr); });
    if (plan.concurrency <= 0) {
      w->pacer_running.store(true);
      w->pacer = std::thread([this, ptr] {
        Pace(ptr);
        ptr->pacer_running.store(false);
      });
    }
  }
}

void LoadEngine::Stop() {
  if (workers_.empty()) return;
  stopping_.store(true);
  for (auto& w : workers_) {
    if (w->pacer.joinable()) w->pacer.join();
    w->drainer.join();
  }
  // What completed while draining stays for the next TakeSample().
  Sample rest;
  for (auto& w : workers_) rest.Merge(std::move(w->sample));
  workers_.clear();
  drained_.Merge(std::move(rest));
}

Sample LoadEngine::TakeSample() {
  Sample total = std::move(drained_);
  drained_ = Sample();
  for (auto& w : workers_) {
    Sample s;
    {
      std::lock_guard<std::mutex> lock(w->mu);
      std::swap(s, w->sample);
    }
    total.Merge(std::move(s));
  }
  const auto now = Clock::now();
  total.elapsed = now - last_sample_;
  last_sample_ = now;
  return total;
}

void LoadEngine::Issue(Worker* w, int slot, Clock::time_point scheduled) {
  auto* call = new Call;
  call->ctx.set_deadline(std::chrono::system_clock::now() + timeout_);
  call->scheduled = scheduled;
  call->slot = slot;
  const size_t channel = slot >= 0 ? static_cast<size_t>(slot) % stubs_.size() : w->next_channel++ % stubs_.size();
  call->reader = stubs_[channel]->PrepareUnaryCall(&call->ctx, method_, w->request, &w->cq);
  call->reader->StartCall();
  call->reader->Finish(&call->response, &call->status, call);
  w->in_flight.fetch_add(1, std::memory_order_relaxed);
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(w->mu);
  ++w->sample.sent;
}

void LoadEngine::Pace(Worker* w) {
  // Timer slack 1 ns: sleeps end within a few microseconds of the schedule
  // (gRPC's own timers, in whole milliseconds, would add up to 1 ms).
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  std::exponential_distribution<double> exponential(w->rate);
  auto seconds = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  auto interval = [&] { return seconds(plan_.poisson ? exponential(w->rng) : 1.0 / w->rate); };
  // Workers interleave: worker t starts t/R after the first (constant), or
  // after an exponential gap of its own (Poisson).
  Clock::time_point next =
      Clock::now() + seconds(plan_.poisson ? exponential(w->rng) : static_cast<double>(w->index) / plan_.rate);
  while (!stopping_.load(std::memory_order_relaxed)) {
    // Sleep in slices of at most kPoll so that Stop() is seen quickly.
    const auto now = Clock::now();
    if (next > now) {
      std::this_thread::sleep_until(std::min(next, now + kPoll));
      continue;
    }
    uint64_t skipped = 0;
    int64_t late = 0;
    while (next <= now) {  // everything due (several when this thread fell behind)
      if (w->in_flight.load(std::memory_order_relaxed) < w->max_inflight) {
        late += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - next).count();
        Issue(w, -1, next);
      } else {
        ++skipped;
      }
      next += interval();
    }
    std::lock_guard<std::mutex> lock(w->mu);
    w->sample.skipped += skipped;
    w->sample.late_ns_sum += late;
  }
}

void LoadEngine::Drain(Worker* w) {
  const bool closed = plan_.concurrency > 0;
  if (closed) {
    const auto start = Clock::now();
    for (int slot : w->slots) Issue(w, slot, start);
  }
  while (true) {
    // Done when nothing can be sent any more (stopping; the pacer, if any,
    // has made its last call: it clears pacer_running after it) and nothing
    // is in flight. The loads are in that order, so no call is missed.
    if (stopping_.load() && (closed || !w->pacer_running.load()) && w->in_flight.load() == 0) break;
    void* tag = nullptr;
    bool ok = false;
    const auto event = w->cq.AsyncNext(&tag, &ok, ToGpr(Clock::now() + kPoll));
    if (event == grpc::CompletionQueue::SHUTDOWN) break;
    if (event != grpc::CompletionQueue::GOT_EVENT) continue;
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    const auto done = Clock::now();
    {
      std::lock_guard<std::mutex> lock(w->mu);
      if (call->status.ok()) {
        w->sample.latencies_ns.push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(done - call->scheduled).count());
      } else {
        ++w->sample.errors[call->status.error_code()];
      }
    }
    w->in_flight.fetch_sub(1, std::memory_order_relaxed);
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    (call->status.ok() ? total_ok_ : total_failed_).fetch_add(1, std::memory_order_relaxed);
    if (closed && !stopping_.load(std::memory_order_relaxed)) Issue(w, call->slot, done);
  }
  w->cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (w->cq.Next(&tag, &ok)) delete static_cast<Call*>(tag);
}

}  // namespace es::loadgen
