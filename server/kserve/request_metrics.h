// RequestMetrics: the per-model request figures of /metrics (a prometheus-cpp
// Collectable): requests by outcome, rows, pending requests, and histograms
// of end-to-end latency, time per stage (queue, IPC, compute, ensemble
// combine), batch size and ensemble disagreement.
//
// The model list is fixed at start-up, so every model's ModelMetrics is
// created up front and the map is read-only afterwards: the request path
// looks its model up and then only touches relaxed atomics (see
// AtomicHistogram) -- no lock, no allocation. Collect() (a scrape) reads the
// same atomics and builds the families.
//
// What is observed (docs/monitoring.md has the full list):
//  - every ModelInfer call naming a served model counts once in
//    ensemble_requests_total with its gRPC outcome; calls naming an unknown
//    model count in ensemble_unknown_model_requests_total (no label: a client
//    must not be able to create series);
//  - latency, stage, batch-size, disagreement and entropy histograms observe
//    successful requests only (their stage times are only meaningful then);
//  - an ensemble's stages are its slowest member's plus the combine; the
//    member calls an ensemble makes are not requests of the member models.
//
// Thread safety: Find(), the ModelMetrics methods and Collect() from any
// thread, concurrently.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "common/mutex.h"
#include "config/model_config.h"
#include "server/core/infer_types.h"
#include "server/metrics/metrics_histogram.h"

namespace es {

// The figures of one served model (version: the one served).
class ModelMetrics {
 public:
  ModelMetrics(std::string name, std::string version, bool ensemble);

  // A request was accepted for inference (decoded); pairs with Finished().
  void Started() { pending_.fetch_add(1, std::memory_order_relaxed); }
  // The request that Started() ended with `code` (a gRPC code) after
  // `elapsed_ns`; on success `response` carries the stages and disagreement
  // and `rows` the request's rows.
  void Finished(int code, uint64_t elapsed_ns, const InferResponse& response, int64_t rows);
  // Ensembles: the answer's first output (FP32 probabilities, [rows,
  // classes]), one entropy observation per row; with the disagreement, a
  // label-free signal of input drift. Anything else is ignored.
  void ObserveAnswer(const InferOutput& probabilities);
  // A request refused before inference (bad input, shutting down).
  void Refused(int code) { CountOutcome(code); }

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  bool ensemble() const { return ensemble_; }

 private:
  friend class RequestMetrics;
  static constexpr int kCodes = 17;  // gRPC codes 0 (OK) .. 16 (UNAUTHENTICATED)
  void CountOutcome(int code);

  const std::string name_;
  const std::string version_;
  const bool ensemble_;
  std::array<std::atomic<uint64_t>, kCodes> outcomes_{};
  std::atomic<uint64_t> rows_{0};
  std::atomic<int64_t> pending_{0};
  AtomicHistogram request_duration_;
  AtomicHistogram queue_duration_;
  AtomicHistogram ipc_duration_;
  AtomicHistogram compute_duration_;
  AtomicHistogram combine_duration_;  // ensembles only
  AtomicHistogram batch_size_;
  AtomicHistogram disagreement_;      // ensembles only, one observation per row
  AtomicHistogram entropy_;           // ensembles only, one observation per row (nats)
  // Ensembles only, per member: its latency from the fan-out, and the
  // degraded answers made without it. Made on a member's first report;
  // members of a reloaded config add theirs.
  struct MemberFigures {
    AtomicHistogram latency;
    std::atomic<uint64_t> missing{0};
    MemberFigures();
  };
  MemberFigures* Member(const std::string& member);
  mutable Mutex members_mu_;
  std::map<std::string, std::unique_ptr<MemberFigures>> members_ ABSL_GUARDED_BY(members_mu_);
  // Cascades only: rows that left at each stage, and member calls of a row
  // that the early exits saved.
  std::map<int64_t, uint64_t> cascade_exits_ ABSL_GUARDED_BY(members_mu_);
  uint64_t member_rows_saved_ ABSL_GUARDED_BY(members_mu_) = 0;
  // Ensembles with an overload ladder: answers by the rung that made them,
  // and the held-out accuracy of the last minute's answers (one bucket per
  // second of the last 60, answers whose rung's accuracy is known).
  struct AccuracySecond {
    int64_t second = -1;  // steady-clock second this bucket holds
    double sum = 0;
    uint64_t count = 0;
  };
  struct RungFigures {
    uint64_t answers = 0;
    double predicted_s = 0;  // sums over the answers that carried a prediction
    double observed_s = 0;
    uint64_t predicted = 0;
    double tail_ratio = -1;  // the last answer's (< 0: none yet)
  };
  std::map<std::string, RungFigures> served_by_ ABSL_GUARDED_BY(members_mu_);
  std::array<AccuracySecond, 60> accuracy_ ABSL_GUARDED_BY(members_mu_){};
  // The mean over the buckets of the minute before `now_second`; < 0 when empty.
  double LastMinuteAccuracy(int64_t now_second) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(members_mu_);
};

class RequestMetrics final : public prometheus::Collectable {
 public:
  explicit RequestMetrics(const std::map<std::string, ModelConfig>& models);
  // Adds a model loaded while the server runs (no-op when it is known).
  void Track(const ModelConfig& model);

  // The model's metrics, or nullptr for a name that is not served.
  ModelMetrics* Find(const std::string& model) const;
  void CountUnknownModel() { unknown_model_.fetch_add(1, std::memory_order_relaxed); }

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  // The families one scrape fills (defined in the .cc).
  struct Families;
  // Adds one model's series to `out`.
  static void AddModel(const ModelMetrics& m, int64_t now_second, Families* out);

  // Grows as models are loaded (Track), never shrinks: Find() holds the
  // shared lock only to look up, the ModelMetrics it returns live as long
  // as this.
  mutable SharedMutex mu_;
  std::map<std::string, std::unique_ptr<ModelMetrics>> models_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> unknown_model_{0};
};

}  // namespace es
