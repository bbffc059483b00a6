#include "clients/loadgen/http_engine.h"

#include <sys/prctl.h>

#include <algorithm>
#include <random>
#include <thread>

#include "clients/http_client.h"

namespace es::loadgen {

// One connection and its thread; its sample and in_flight (Sender) are
// counted by CountingEngine.
struct HttpLoadEngine::Slot : Sender {
  int index = 0;
  std::thread thread;
};

HttpLoadEngine::HttpLoadEngine(std::string address, es::client::ClientOptions options, EngineSettings settings)
    : CountingEngine(std::move(settings)), address_(std::move(address)), options_(std::move(options)) {
  options_.timeout = settings_.timeout;
}

HttpLoadEngine::~HttpLoadEngine() { Stop(); }

void HttpLoadEngine::Start(const LoadPlan& plan, const RequestSet& requests) {
  Stop();
  plan_ = plan;
  inference::ModelInferRequest request;  // the set's first: --inputs is refused with --http
  if (!request.ParseFromString(requests.requests.at(0)) ||
      !es::client::EncodeHttpInferRequest(request, &body_, &header_length_).ok()) {
    // The caller built and checked the request (one call made before the
    // sweep): not reachable with ensemble-loadgen's own requests.
    body_.clear();
  }
  path_ = es::client::ModelPath(request.model_name(), request.model_version()) + "/infer";
  BeginRun();
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

std::unique_ptr<es::client::HttpClient> HttpLoadEngine::MakeClient() {
  auto made = es::client::HttpClient::Create(address_, options_);
  if (made.ok()) return std::move(made).value();
  // The tool made its first client with the same options, so this is not
  // expected; but a slot without a client sends nothing, and a step that
  // counts its calls would wait for them for ever.
  LoseServer("cannot make an HTTP client: " + made.status().message());
  return nullptr;
}

void HttpLoadEngine::RunSlot(Slot* slot) {
  std::unique_ptr<es::client::HttpClient> client = MakeClient();
  if (client == nullptr) return;
  std::chrono::milliseconds backoff{0};
  while (!stopping_.load(std::memory_order_relaxed) && !lost_server()) {
    if (!NextTurn(1)) {  // the limit was sent: nothing more until Stop
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const grpc::StatusCode code = Send(slot, *client, Clock::now());
    if (code != grpc::StatusCode::UNAVAILABLE) {
      backoff = std::chrono::milliseconds(0);
      continue;
    }
    backoff = NextBackoff(backoff);
    const auto until = Clock::now() + backoff;
    while (Clock::now() < until && !stopping_.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(5)));
    }
  }
}

grpc::StatusCode HttpLoadEngine::Send(Slot* slot, es::client::HttpClient& client, Clock::time_point scheduled) {
  const auto sent = Clock::now();
  CountSent(*slot);  // counted when sent, as LoadEngine does
  {
    MutexLock lock(&slot->mu);
    slot->sample.late_ns_sum += std::chrono::duration_cast<std::chrono::nanoseconds>(sent - scheduled).count();
  }
  es::client::Status status =
      body_.empty() ? es::client::Status(grpc::StatusCode::INVALID_ARGUMENT, "the request has no HTTP form")
                    : client.PostInfer(path_, body_, header_length_);
  const auto done = Clock::now();
  CountEnded(*slot);
  // From the scheduled time: in open loop a call that waited for a free
  // connection shows that wait.
  CountAnswer(*slot, status.code(), scheduled, sent, done, nullptr, status.message());
  // UNAVAILABLE from a server that answers (503: a model's host
  // restarting) keeps the connection: not a connection failure.
  CountConnection(status.code() == grpc::StatusCode::UNAVAILABLE && !client.connected(), status.message());
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
  while (!stopping_.load(std::memory_order_relaxed) && !lost_server()) {
    const auto now = Clock::now();
    if (next > now) {
      std::this_thread::sleep_until(std::min(next, now + std::chrono::milliseconds(20)));
      continue;
    }
    MutexLock lock(&queue_mu_);
    while (next <= now) {  // everything due (several when this thread fell behind)
      if (limit_sent()) {  // the turn's calls are out: later arrivals are not the step's, queued or skipped
        next += interval();
        continue;
      }
      if (in_flight() + static_cast<int64_t>(queue_.size()) < plan_.max_inflight) {
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
  std::unique_ptr<es::client::HttpClient> client = MakeClient();
  if (client == nullptr) return;
  while (true) {
    Clock::time_point scheduled;
    {
      MutexLock lock(&queue_mu_);
      while (queue_.empty() && !stopping_.load() && !lost_server()) {
        queue_cv_.WaitFor(&queue_mu_, std::chrono::milliseconds(20));
      }
      if (queue_.empty() || stopping_.load() || lost_server()) return;
      scheduled = queue_.front();
      queue_.pop_front();
    }
    if (NextTurn(1)) Send(slot, *client, scheduled);  // past the limit, arrivals are dropped
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
  Sample rest = TakeRunning();
  {
    MutexLock lock(&queue_mu_);
    rest.skipped += queue_.size();  // arrivals queued and never sent
    queue_.clear();
  }
  slots_.clear();
  KeepForNextSample(std::move(rest));
}

Sample HttpLoadEngine::TakeRunning() {
  Sample total = TakeAll(slots_);
  MutexLock lock(&queue_mu_);
  total.skipped += pacer_skipped_;
  pacer_skipped_ = 0;
  return total;
}

}  // namespace es::loadgen
