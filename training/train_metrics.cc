#include "training/train_metrics.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdio>

#include "training/ensemble_trainer.h"
#include "training/metrics_http_server.h"

namespace es {
namespace {


// Step times range from ~1 ms (tiny synthetic models) to seconds (big
// batches of CNNs); all-reduce waits from microseconds up.
const prometheus::Histogram::BucketBoundaries kStepBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
const prometheus::Histogram::BucketBoundaries kAllreduceBuckets = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1};

std::string FormatDuration(double seconds) {
  const auto total = static_cast<long>(seconds + 0.5);
  char text[32];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%ldh%02ldm", total / 3600, (total / 60) % 60);
  } else {
    std::snprintf(text, sizeof(text), "%ldm%02lds", total / 60, total % 60);
  }
  return text;
}

void AtomicAdd(std::atomic<double>& target, double value) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + value, std::memory_order_relaxed)) {
  }
}

}  // namespace

StatusOr<std::unique_ptr<TrainMetrics>> TrainMetrics::Start(
    int rank, const std::vector<std::string>& members, const std::string& listen_address, int port,
    int64_t first_step, int64_t total_steps, Progress progress, std::chrono::milliseconds log_every) {
  std::unique_ptr<TrainMetrics> m(new TrainMetrics());
  m->first_step_ = first_step;
  m->steps_done_.store(first_step);
  m->total_steps_ = total_steps;
  {
    MutexLock lock(&m->mu_);  // before the reporter starts; the lock satisfies the analysis
    m->progress_ = progress == Progress::kTerminalLine;
  }
  m->log_progress_ = progress == Progress::kLogLines;
  m->log_every_ = log_every;
  m->registry_ = std::make_shared<prometheus::Registry>();
  const std::map<std::string, std::string> rank_label{{"rank", std::to_string(rank)}};
  auto& loss = prometheus::BuildGauge()
                   .Name("es_train_loss")
                   .Help("Mean cross-entropy of the last training step on this rank's rows")
                   .Labels(rank_label)
                   .Register(*m->registry_);
  auto& accuracy = prometheus::BuildGauge()
                       .Name("es_train_accuracy")
                       .Help("Accuracy of the last training step on this rank's rows")
                       .Labels(rank_label)
                       .Register(*m->registry_);
  for (const std::string& member : members) {
    m->loss_.push_back(&loss.Add({{"member", member}}));
    m->accuracy_.push_back(&accuracy.Add({{"member", member}}));
  }
  auto gauge = [&](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Labels(rank_label).Register(*m->registry_).Add({});
  };
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Labels(rank_label).Register(*m->registry_).Add({});
  };
  m->samples_per_second_ = gauge("es_train_samples_per_second", "Rows this rank trained on per second (last second)");
  m->epoch_ = gauge("es_train_epoch", "Epoch being trained (0-based)");
  m->steps_ = counter("es_train_steps_total", "Optimizer steps done");
  m->samples_ = counter("es_train_samples_total", "Rows this rank trained on");
  m->checkpoints_written_ = counter("es_train_checkpoints_written_total", "Checkpoints written");
  m->checkpoints_skipped_ = counter("es_train_checkpoints_skipped_total",
                                    "Checkpoints skipped because a write was still in flight");
  m->step_seconds_ = &prometheus::BuildHistogram()
                          .Name("es_train_step_seconds")
                          .Help("Training step time: forward, backward, all-reduce, update")
                          .Labels(rank_label)
                          .Register(*m->registry_)
                          .Add({}, kStepBuckets);
  m->allreduce_seconds_ = &prometheus::BuildHistogram()
                               .Name("es_train_allreduce_seconds")
                               .Help("Gradient all-reduce time not hidden behind backward")
                               .Labels(rank_label)
                               .Register(*m->registry_)
                               .Add({}, kAllreduceBuckets);
  if (port >= 0) {
    ES_ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttpServer> endpoint, MetricsHttpServer::Start(listen_address, port, m->registry_));
    m->endpoint_ = std::move(endpoint);
  }
  m->reporter_ = std::thread([raw = m.get()] { raw->Report(); });
  return m;
}

TrainMetrics::~TrainMetrics() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (reporter_.joinable()) reporter_.join();
  EndProgressLine();
}

void TrainMetrics::EndProgressLine() {
  MutexLock lock(&mu_);
  if (!progress_) return;
  progress_ = false;
  std::fputs("\n", stderr);
}

void TrainMetrics::Record(const StepStats& step, int64_t steps_done) {
  double loss_sum = 0;
  for (size_t i = 0; i < step.members.size() && i < loss_.size(); ++i) {
    loss_[i]->Set(step.members[i].loss);
    accuracy_[i]->Set(step.rows > 0 ? static_cast<double>(step.members[i].correct) / step.rows : 0);
    loss_sum += step.members[i].loss;
  }
  steps_->Increment();
  samples_->Increment(static_cast<double>(step.rows));
  step_seconds_->Observe(step.step_seconds);
  allreduce_seconds_->Observe(step.allreduce_seconds);
  last_loss_.store(step.members.empty() ? 0 : loss_sum / step.members.size());
  AtomicAdd(step_seconds_sum_, step.step_seconds);
  AtomicAdd(allreduce_seconds_sum_, step.allreduce_seconds);
  steps_recorded_.fetch_add(1);
  samples_done_.fetch_add(step.rows);
  steps_done_.store(steps_done);
}

void TrainMetrics::SetEpoch(int64_t epoch) {
  epoch_->Set(static_cast<double>(epoch));
  epoch_now_.store(epoch);
}

void TrainMetrics::SetCheckpoints(int64_t written, int64_t skipped) {
  // Counters only go up: add what is new since the last call.
  checkpoints_written_->Increment(static_cast<double>(written) - checkpoints_written_->Value());
  checkpoints_skipped_->Increment(static_cast<double>(skipped) - checkpoints_skipped_->Value());
}

std::string TrainMetrics::address() const { return endpoint_ ? endpoint_->address() : ""; }

double TrainMetrics::mean_step_seconds() const {
  const int64_t n = steps_recorded_.load();
  return n > 0 ? step_seconds_sum_.load() / n : 0;
}

double TrainMetrics::mean_allreduce_seconds() const {
  const int64_t n = steps_recorded_.load();
  return n > 0 ? allreduce_seconds_sum_.load() / n : 0;
}

void TrainMetrics::Report() {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  int64_t last_samples = samples_done_.load();
  Clock::time_point last_logged = start;
  Clock::time_point logged_at = start;
  int64_t logged_samples = last_samples;
  MutexLock lock(&mu_);
  while (!cv_.WaitFor(&mu_, std::chrono::seconds(1), [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; })) {
    const Clock::time_point now = Clock::now();
    const int64_t samples = samples_done_.load();
    const double rate = (samples - last_samples) / std::chrono::duration<double>(now - last).count();
    samples_per_second_->Set(rate);
    last = now;
    last_samples = samples;
    const bool log_now = log_progress_ && now - last_logged >= log_every_;
    if (!progress_ && !log_now) continue;
    const int64_t done = steps_done_.load();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const int64_t here = done - first_step_;
    const std::string eta =
        here > 0 ? FormatDuration(elapsed / here * (total_steps_ - done)) : std::string("?");
    if (progress_) {
      std::fprintf(stderr, "\r\033[Kstep %lld/%lld  loss %.4f  %.0f samples/s  ETA %s",
                   static_cast<long long>(done), static_cast<long long>(total_steps_),
                   last_loss_.load(), rate, eta.c_str());
      std::fflush(stderr);
      continue;
    }
    last_logged = now;
    // The rate over the whole interval, not the last second's.
    const double interval_rate = (samples - logged_samples) / std::chrono::duration<double>(now - logged_at).count();
    logged_samples = samples;
    logged_at = now;
    spdlog::info("progress: epoch {}, step {}/{}, loss {:.4f}, {:.0f} samples/s, ETA {}", epoch_now_.load() + 1,
                 done, total_steps_, last_loss_.load(), interval_rate, eta);
  }
}

}  // namespace es
