#include "clients/loadgen/http_engine.h"

#include <sys/prctl.h>

#include <algorithm>
#include <random>

#include "clients/http_client.h"

namespace es::loadgen {

using Clock = std::chrono::steady_clock;

struct HttpLoadEngine::Slot {
  int index = 0;
  std::thread thread;
  Mutex mu;
  Sample sample ABSL_GUARDED_BY(mu);
};

HttpLoadEngine::HttpLoadEngine(std::string address, es::client::ClientOptions options, EngineSettings settings)
    : address_(std::move(address)), options_(std::move(options)), settings_(std::move(settings)) {
  options_.timeout = settings_.timeout;
}

HttpLoadEngine::~HttpLoadEngine() { Stop(); }

std::map<grpc::StatusCode, uint64_t> HttpLoadEngine::total_errors() const {
  std::map<grpc::StatusCode, uint64_t> errors;
  for (int code = 1; code < 17; ++code) {
    if (const uint64_t n = total_by_code_[code].load()) errors[static_cast<grpc::StatusCode>(code)] = n;
  }
  return errors;
}

std::string HttpLoadEngine::lost_server_reason() const {
  MutexLock lock(&reason_mu_);
  return std::to_string(settings_.max_connection_failures) +
         " connection failures in a row, the last: " + last_connection_error_;
}

void HttpLoadEngine::Start(const LoadPlan& plan, const std::string& request_bytes) {
  Stop();
  plan_ = plan;
  inference::ModelInferRequest request;
  if (!request.ParseFromString(request_bytes) ||
      !es::client::EncodeHttpInferRequest(request, &body_, &header_length_).ok()) {
    // The caller built and checked the request (one call made before the
    // sweep): not reachable with ensemble-loadgen's own requests.
    body_.clear();
  }
  path_ = es::client::ModelPath(request.model_name(), request.model_version()) + "/infer";
  stopping_.store(false);
  lost_server_.store(false);
  failures_in_a_row_.store(0);
  last_sample_ = Clock::now();
  const bool open_loop = plan.concurrency <= 0;
  const int slots = open_loop ? std::max(1, std::min(plan.max_inflight, kOpenLoopConnections)) : plan.concurrency;
  for (int k = 0; k < slots; ++k) {
    auto slot = std::make_unique<Slot>();
    slot->index = k;
    slots_.push_back(std::move(slot));
  }
  for (auto& slot : slots_) {
    Slot* raw = slot.get();
    raw->thread = std::thread([this, raw, open_loop] { open_loop ? RunOpenSlot(raw) : RunSlot(raw); });
  }
  if (open_loop) pacer_ = std::thread([this] { Pace(); });
}

void HttpLoadEngine::RunSlot(Slot* slot) {
  auto made = es::client::HttpClient::Create(address_, options_);
  if (!made.ok()) {  // the same options made the tool's first client: not expected
    MutexLock lock(&slot->mu);
    ++slot->sample.errors[made.status().code()];
    return;
  }
  const std::unique_ptr<es::client::HttpClient> client = std::move(made).value();
  std::chrono::milliseconds backoff{0};
  while (!stopping_.load(std::memory_order_relaxed) && !lost_server_.load(std::memory_order_relaxed)) {
    const grpc::StatusCode code = Send(slot, *client, Clock::now());
    if (code != grpc::StatusCode::UNAVAILABLE) {
      backoff = std::chrono::milliseconds(0);
      continue;
    }
    backoff = backoff.count() == 0 ? settings_.backoff_min : std::min(settings_.backoff_max, backoff * 2);
    const auto until = Clock::now() + backoff;
    while (Clock::now() < until && !stopping_.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(5)));
    }
  }
}

grpc::StatusCode HttpLoadEngine::Send(Slot* slot, es::client::HttpClient& client, Clock::time_point scheduled) {
  const auto sent = Clock::now();
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  total_sent_.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock lock(&slot->mu);
    ++slot->sample.sent;  // counted when sent, as LoadEngine does
    slot->sample.late_ns_sum += std::chrono::duration_cast<std::chrono::nanoseconds>(sent - scheduled).count();
  }
  es::client::Status status =
      body_.empty() ? es::client::Status(grpc::StatusCode::INVALID_ARGUMENT, "the request has no HTTP form")
                    : client.PostInfer(path_, body_, header_length_);
  const auto done = Clock::now();
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  const bool hung = done - sent > settings_.hung;
  {
    MutexLock lock(&slot->mu);
    if (status.ok()) {
      // From the scheduled time: in open loop a call that waited for a free
      // connection shows that wait (no coordinated omission).
      slot->sample.latencies_ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(done - scheduled).count());
    } else {
      ++slot->sample.errors[status.code()];
    }
    if (hung) ++slot->sample.hung;
  }
  if (hung) total_hung_.fetch_add(1, std::memory_order_relaxed);
  if (status.ok()) {
    total_ok_.fetch_add(1, std::memory_order_relaxed);
  } else {
    total_failed_.fetch_add(1, std::memory_order_relaxed);
    const int code = static_cast<int>(status.code());
    if (code > 0 && code < 17) total_by_code_[code].fetch_add(1, std::memory_order_relaxed);
  }
  // UNAVAILABLE from a server that answers (503: a model's host
  // restarting) keeps the connection: not a connection failure.
  if (status.code() == grpc::StatusCode::UNAVAILABLE && !client.connected()) {
    if (failures_in_a_row_.fetch_add(1) + 1 >= settings_.max_connection_failures && !lost_server_.load()) {
      {
        MutexLock lock(&reason_mu_);
        last_connection_error_ = status.ToString();
      }
      lost_server_.store(true);
    }
  } else {
    failures_in_a_row_.store(0, std::memory_order_relaxed);
  }
  return status.code();
}

// ---- open loop: a pacer queues arrivals, the slots (connections) send them ----

void HttpLoadEngine::Pace() {
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // sleeps end within microseconds of the schedule
  std::mt19937_64 rng(plan_.seed * 1000003ULL);
  std::exponential_distribution<double> exponential(plan_.rate);
  auto seconds = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  auto interval = [&] { return seconds(plan_.poisson ? exponential(rng) : 1.0 / plan_.rate); };
  Clock::time_point next = Clock::now() + (plan_.poisson ? interval() : Clock::duration(0));
  while (!stopping_.load(std::memory_order_relaxed) && !lost_server_.load(std::memory_order_relaxed)) {
    const auto now = Clock::now();
    if (next > now) {
      std::this_thread::sleep_until(std::min(next, now + std::chrono::milliseconds(20)));
      continue;
    }
    MutexLock lock(&queue_mu_);
    while (next <= now) {  // everything due (several when this thread fell behind)
      if (in_flight_.load(std::memory_order_relaxed) + static_cast<int64_t>(queue_.size()) < plan_.max_inflight) {
        queue_.push_back(next);
        queue_cv_.NotifyOne();
      } else {
        ++pacer_skipped_;
      }
      next += interval();
    }
  }
}

void HttpLoadEngine::RunOpenSlot(Slot* slot) {
  auto made = es::client::HttpClient::Create(address_, options_);
  if (!made.ok()) return;  // the same options made the tool's first client: not expected
  const std::unique_ptr<es::client::HttpClient> client = std::move(made).value();
  while (true) {
    Clock::time_point scheduled;
    {
      MutexLock lock(&queue_mu_);
      while (queue_.empty() && !stopping_.load() && !lost_server_.load()) {
        queue_cv_.WaitFor(&queue_mu_, std::chrono::milliseconds(20));
      }
      if (queue_.empty() || stopping_.load() || lost_server_.load()) return;
      scheduled = queue_.front();
      queue_.pop_front();
    }
    Send(slot, *client, scheduled);
  }
}

void HttpLoadEngine::Stop() {
  if (slots_.empty()) return;
  stopping_.store(true);
  if (pacer_.joinable()) pacer_.join();
  {
    MutexLock lock(&queue_mu_);
    queue_cv_.NotifyAll();
  }
  for (auto& slot : slots_) slot->thread.join();
  Sample rest;
  {
    MutexLock lock(&queue_mu_);
    rest.skipped += pacer_skipped_ + queue_.size();  // arrivals never sent
    pacer_skipped_ = 0;
    queue_.clear();
  }
  for (auto& slot : slots_) {
    MutexLock lock(&slot->mu);  // its thread is joined; the lock is for the analysis
    rest.Merge(std::move(slot->sample));
  }
  slots_.clear();
  drained_.Merge(std::move(rest));
}

Sample HttpLoadEngine::TakeSample() {
  Sample total = std::move(drained_);
  drained_ = Sample();
  for (auto& slot : slots_) {
    Sample s;
    {
      MutexLock lock(&slot->mu);
      std::swap(s, slot->sample);
    }
    total.Merge(std::move(s));
  }
  {
    MutexLock lock(&queue_mu_);
    total.skipped += pacer_skipped_;
    pacer_skipped_ = 0;
  }
  const auto now = Clock::now();
  total.elapsed = now - last_sample_;
  total.end_wall = std::chrono::system_clock::now();
  last_sample_ = now;
  return total;
}

}  // namespace es::loadgen
