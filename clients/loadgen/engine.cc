#include "clients/loadgen/engine.h"

#include <grpc/support/time.h>
#include <sys/prctl.h>

#include <grpcpp/alarm.h>

#include <algorithm>
#include <random>
#include <set>

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
  hung += other.hung;
  unanswered += other.unanswered;
  skipped += other.skipped;
  late_ns_sum += other.late_ns_sum;
  elapsed += other.elapsed;
  end_wall = std::max(end_wall, other.end_wall);
}

// What a completion queue hands back: a call's end, or a retry's alarm.
struct LoadEngine::Event {
  enum class Kind { kCall, kRetry } kind;
  explicit Event(Kind k) : kind(k) {}
  virtual ~Event() = default;
};

struct LoadEngine::Call : Event {
  Call() : Event(Kind::kCall) {}
  grpc::ClientContext ctx;
  grpc::ByteBuffer response;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  Clock::time_point scheduled;
  Clock::time_point sent;
  size_t channel = 0;
  int slot = -1;           // closed loop: the slot that sends again on completion
  bool abandoned = false;  // cancelled by Stop() and counted unanswered (drainer thread only)
};

// Closed loop: a slot's next call, sent when the alarm fires (after an
// UNAVAILABLE), or dropped if the engine is stopping by then.
struct LoadEngine::Retry : Event {
  Retry() : Event(Kind::kRetry) {}
  grpc::Alarm alarm;
  int slot = -1;
};

struct LoadEngine::Worker {
  int index = 0;
  grpc::CompletionQueue cq;
  grpc::ByteBuffer request;  // this worker's reference to the serialized request
  std::vector<int> slots;    // closed loop
  std::map<int, std::chrono::milliseconds> backoff;  // closed loop, per slot (drainer thread only)
  std::atomic<int64_t> retries{0};  // alarms set and not yet fired
  std::set<Call*> outstanding ABSL_GUARDED_BY(mu);  // calls sent and not yet completed
  bool cancelled_rest = false;      // drainer thread only
  double rate = 0;           // open loop, requests/s of this worker
  int64_t max_inflight = 1;
  std::atomic<int64_t> in_flight{0};
  size_t next_channel = 0;   // open loop (pacer thread only)
  std::mt19937_64 rng;
  Mutex mu;
  Sample sample ABSL_GUARDED_BY(mu);
  std::thread drainer;  // completions (and, closed loop, the next calls)
  std::thread pacer;    // open loop: sends on schedule
  std::atomic<bool> pacer_running{false};
};

LoadEngine::LoadEngine(std::vector<std::shared_ptr<grpc::Channel>> channels, int threads, std::string method,
                       EngineSettings settings)
    : channels_(std::move(channels)), threads_(std::max(1, threads)), method_(std::move(method)),
      settings_(settings) {
  for (auto& channel : channels_) stubs_.push_back(std::make_unique<grpc::GenericStub>(channel));
}

std::map<grpc::StatusCode, uint64_t> LoadEngine::total_errors() const {
  std::map<grpc::StatusCode, uint64_t> errors;
  for (int code = 1; code < 17; ++code) {
    if (const uint64_t n = total_by_code_[code].load()) errors[static_cast<grpc::StatusCode>(code)] = n;
  }
  return errors;
}

std::string LoadEngine::lost_server_reason() const {
  MutexLock lock(&reason_mu_);
  return std::to_string(settings_.max_connection_failures) + " connection failures in a row, the last: " +
         last_connection_error_;
}

LoadEngine::~LoadEngine() { Stop(); }

void LoadEngine::Start(const LoadPlan& plan, const std::string& request_bytes) {
  Stop();
  plan_ = plan;
  stopping_.store(false);
  lost_server_.store(false);
  failures_in_a_row_.store(0);
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
  stop_began_ns_.store(Clock::now().time_since_epoch().count());
  stopping_.store(true);
  for (auto& w : workers_) {
    if (w->pacer.joinable()) w->pacer.join();
    w->drainer.join();
  }
  // What completed while draining stays for the next TakeSample().
  Sample rest;
  for (auto& w : workers_) {
    MutexLock lock(&w->mu);  // its threads are joined; the lock is for the analysis
    rest.Merge(std::move(w->sample));
  }
  workers_.clear();
  drained_.Merge(std::move(rest));
}

Sample LoadEngine::TakeSample() {
  Sample total = std::move(drained_);
  drained_ = Sample();
  for (auto& w : workers_) {
    Sample s;
    {
      MutexLock lock(&w->mu);
      std::swap(s, w->sample);
    }
    total.Merge(std::move(s));
  }
  const auto now = Clock::now();
  total.elapsed = now - last_sample_;
  total.end_wall = std::chrono::system_clock::now();
  last_sample_ = now;
  return total;
}

void LoadEngine::Issue(Worker* w, int slot, Clock::time_point scheduled) {
  auto* call = new Call;
  call->ctx.set_deadline(std::chrono::system_clock::now() + settings_.timeout);
  call->scheduled = scheduled;
  call->sent = Clock::now();
  call->slot = slot;
  call->channel = slot >= 0 ? static_cast<size_t>(slot) % stubs_.size() : w->next_channel++ % stubs_.size();
  call->reader = stubs_[call->channel]->PrepareUnaryCall(&call->ctx, method_, w->request, &w->cq);
  w->in_flight.fetch_add(1, std::memory_order_relaxed);
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  total_sent_.fetch_add(1, std::memory_order_relaxed);
  {
    // Registered before it starts: its completion (on the drainer thread)
    // erases it, and Stop() may cancel whatever is still registered.
    MutexLock lock(&w->mu);
    ++w->sample.sent;
    w->outstanding.insert(call);
  }
  call->reader->StartCall();
  // Tags are Event pointers (Drain tells calls from retries by their kind).
  call->reader->Finish(&call->response, &call->status, static_cast<Event*>(call));
}

void LoadEngine::CountOutcome(const Call& call) {
  const auto code = call.status.error_code();
  // UNAVAILABLE from a server that answers (a model's host restarting) is not
  // a connection failure; the channel then stays connected.
  const bool connection_failure =
      code == grpc::StatusCode::UNAVAILABLE && channels_[call.channel]->GetState(false) != GRPC_CHANNEL_READY;
  if (!connection_failure) {
    failures_in_a_row_.store(0, std::memory_order_relaxed);
    return;
  }
  if (failures_in_a_row_.fetch_add(1) + 1 >= settings_.max_connection_failures && !lost_server_.load()) {
    {
      MutexLock lock(&reason_mu_);
      last_connection_error_ = "UNAVAILABLE: " + call.status.error_message();
    }
    lost_server_.store(true);
  }
}

void LoadEngine::CancelOutstanding(Worker* w) {
  MutexLock lock(&w->mu);
  for (Call* call : w->outstanding) {
    call->abandoned = true;
    call->ctx.TryCancel();
  }
  w->sample.unanswered += w->outstanding.size();
  total_unanswered_.fetch_add(w->outstanding.size());
  w->cancelled_rest = true;
}

void LoadEngine::Completed(Worker* w, std::unique_ptr<Call> call) {
  const auto done = Clock::now();
  const bool ok = call->status.ok();
  const bool hung = done - call->sent > settings_.hung;
  {
    MutexLock lock(&w->mu);
    w->outstanding.erase(call.get());
    if (!call->abandoned) {  // an abandoned call was counted (unanswered) when it was cancelled
      if (ok) {
        w->sample.latencies_ns.push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(done - call->scheduled).count());
      } else {
        ++w->sample.errors[call->status.error_code()];
      }
      if (hung) ++w->sample.hung;
    }
  }
  w->in_flight.fetch_sub(1, std::memory_order_relaxed);
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if (call->abandoned) return;
  if (ok) {
    total_ok_.fetch_add(1, std::memory_order_relaxed);
  } else {
    total_failed_.fetch_add(1, std::memory_order_relaxed);
    const int code = static_cast<int>(call->status.error_code());
    if (code > 0 && code < 17) total_by_code_[code].fetch_add(1, std::memory_order_relaxed);
  }
  if (hung) total_hung_.fetch_add(1, std::memory_order_relaxed);
  CountOutcome(*call);
  if (call->slot < 0 || stopping_.load(std::memory_order_relaxed) || lost_server_.load()) return;
  // Closed loop: the slot's next call, at once or after a backoff.
  auto& backoff = w->backoff[call->slot];
  if (call->status.error_code() != grpc::StatusCode::UNAVAILABLE) {
    backoff = std::chrono::milliseconds(0);
    Issue(w, call->slot, done);
    return;
  }
  backoff = backoff.count() == 0 ? settings_.backoff_min : std::min(settings_.backoff_max, backoff * 2);
  auto retry = std::make_unique<Retry>();
  retry->slot = call->slot;
  w->retries.fetch_add(1);
  Retry* raw = retry.release();
  raw->alarm.Set(&w->cq, ToGpr(Clock::now() + backoff), static_cast<Event*>(raw));
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
  while (!stopping_.load(std::memory_order_relaxed) && !lost_server_.load(std::memory_order_relaxed)) {
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
    MutexLock lock(&w->mu);
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
    // has made its last call: it clears pacer_running after it), nothing is
    // in flight and no retry is pending. The loads are in that order, so no
    // call is missed.
    const bool stopping = stopping_.load();
    if (stopping && (closed || !w->pacer_running.load()) && w->in_flight.load() == 0 && w->retries.load() == 0) break;
    if (stopping && !w->cancelled_rest &&
        Clock::now().time_since_epoch().count() - stop_began_ns_.load() >
            std::chrono::duration_cast<Clock::duration>(settings_.hung).count()) {
      CancelOutstanding(w);
    }
    void* tag = nullptr;
    bool ok = false;
    const auto event = w->cq.AsyncNext(&tag, &ok, ToGpr(Clock::now() + kPoll));
    if (event == grpc::CompletionQueue::SHUTDOWN) break;
    if (event != grpc::CompletionQueue::GOT_EVENT) continue;
    auto* e = static_cast<Event*>(tag);
    if (e->kind == Event::Kind::kCall) {
      Completed(w, std::unique_ptr<Call>(static_cast<Call*>(e)));
      continue;
    }
    std::unique_ptr<Retry> retry(static_cast<Retry*>(e));
    if (!stopping_.load() && !lost_server_.load()) Issue(w, retry->slot, Clock::now());
    w->retries.fetch_sub(1);
  }
  w->cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (w->cq.Next(&tag, &ok)) delete static_cast<Event*>(tag);
}

}  // namespace es::loadgen
