// TrainMetrics: what one training rank exports to Prometheus, and the
// progress line.
//
// The training thread records each step (Record) into gauges, counters and
// histograms labelled with the rank (and member); a background reporter
// thread turns the step counter into samples/s once a second and shows
// progress (epoch, step/total, loss, samples/s, ETA): on a terminal it
// redraws one line every second (log lines clear it first: SetUpLogging's
// pattern); otherwise (CI, nohup, systemd, Kubernetes) it logs one progress
// line every `log_every` (--progress-every), so a long run is never silent. The
// /metrics endpoint (MetricsHttpServer; why not the router's exposer is said
// there) serves the registry from its own thread. Without a port nothing
// listens, but the
// figures are still kept for the end-of-run summary.
//
// Metric names (all with const label rank="N"):
//   es_train_loss{member}                 mean training loss of the last step
//   es_train_accuracy{member}             training accuracy of the last step
//   es_train_samples_per_second           rows of this rank per second, last ~second
//   es_train_step_seconds                 histogram: forward+backward+all-reduce+update
//   es_train_allreduce_seconds            histogram: all-reduce wait not hidden by backward
//   es_train_steps_total, es_train_samples_total, es_train_epoch
//   es_train_checkpoints_written_total, es_train_checkpoints_skipped_total
//
// Thread safety: Record/SetEpoch/SetCheckpoints from the training thread;
// prometheus-cpp metrics are thread-safe; the reporter reads atomics.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace prometheus {
class Registry;
class Gauge;
class Counter;
class Histogram;
}  // namespace prometheus

namespace es {

class MetricsHttpServer;
struct StepStats;

class TrainMetrics {
 public:
  enum class Progress { kNone, kTerminalLine, kLogLines };
  // port < 0: no endpoint; 0: a free port. `progress`: how progress is shown.
  // Steps are counted over the whole run: `first_step` were done before (resume).
  static StatusOr<std::unique_ptr<TrainMetrics>> Start(int rank,
                                                       const std::vector<std::string>& members,
                                                       const std::string& listen_address, int port,
                                                       int64_t first_step, int64_t total_steps,
                                                       Progress progress,
                                                       std::chrono::milliseconds log_every = std::chrono::seconds(10));
  ~TrainMetrics();

  void Record(const StepStats& step, int64_t steps_done);
  void SetEpoch(int64_t epoch);
  void SetCheckpoints(int64_t written, int64_t skipped);

  // Ends the progress line (so the report prints below it); no more redraws.
  void EndProgressLine();

  // "HOST:PORT" of /metrics, or "" without an endpoint.
  std::string address() const;
  // Mean step and all-reduce seconds over the run so far.
  double mean_step_seconds() const;
  int64_t steps_recorded() const { return steps_recorded_.load(); }
  double mean_allreduce_seconds() const;

 private:
  TrainMetrics() = default;
  void Report();

  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<prometheus::Gauge*> loss_;
  std::vector<prometheus::Gauge*> accuracy_;
  prometheus::Gauge* samples_per_second_ = nullptr;
  prometheus::Gauge* epoch_ = nullptr;
  prometheus::Counter* steps_ = nullptr;
  prometheus::Counter* samples_ = nullptr;
  prometheus::Counter* checkpoints_written_ = nullptr;
  prometheus::Counter* checkpoints_skipped_ = nullptr;
  prometheus::Histogram* step_seconds_ = nullptr;
  prometheus::Histogram* allreduce_seconds_ = nullptr;

  int64_t first_step_ = 0;  // steps done before this process (resume)
  int64_t total_steps_ = 0;
  std::atomic<int64_t> steps_done_{0};
  std::atomic<int64_t> samples_done_{0};
  std::atomic<double> last_loss_{0};
  std::atomic<double> step_seconds_sum_{0};
  std::atomic<double> allreduce_seconds_sum_{0};
  std::atomic<int64_t> steps_recorded_{0};

  Mutex mu_;
  CondVar cv_;
  bool progress_ ABSL_GUARDED_BY(mu_) = false;  // a progress line is being redrawn
  bool log_progress_ = false;                   // progress as log lines (set before the reporter starts)
  std::chrono::milliseconds log_every_{10000};   // between progress log lines
  std::atomic<int64_t> epoch_now_{0};
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<MetricsHttpServer> endpoint_;
  std::thread reporter_;
};

}  // namespace es
