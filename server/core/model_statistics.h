// ModelStatistics: per-model counters behind the KServe v2 ModelStatistics
// RPC (filled into its reply by kserve/statistics_reply.h; this file knows no
// protocol), with Triton's meanings: success/fail counts with cumulative durations
// (end to end, per request), queue time (per request, in the batcher),
// inference_count (rows), execution_count and compute_infer (per model
// execution: one batch), batch_stats (executions per batch size), and the
// last inference time.
//
// Sums (durations, rows, a host's compute time) saturate at UINT64_MAX
// rather than wrap, so a lying host or a long life cannot make a total small.
//
// Figures are kept per model version, as Triton's are.
//
// Thread safety: the counters are relaxed atomics (independent: a reader may
// see one a moment ahead of another). The map of models grows while the
// server runs (Track(), when a model is loaded); Record*() and Visit() take
// its lock shared, Track() exclusive. Entries are never removed, so a model
// unloaded and loaded again keeps its figures, as Triton's do.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "config/model_config.h"
#include "server/core/infer_types.h"

namespace es {

struct ModelCounters {
  std::atomic<uint64_t> success_count{0}, success_ns{0};
  std::atomic<uint64_t> fail_count{0}, fail_ns{0};
  std::atomic<uint64_t> queue_ns{0};
  std::atomic<uint64_t> compute_ns{0};       // on the hosts, per execution
  std::atomic<uint64_t> inference_count{0};  // rows
  std::atomic<uint64_t> execution_count{0};  // model executions (batches)
  std::atomic<uint64_t> last_inference_ms{0};
  // Response cache (Triton's cache_hit, cache_miss): lookups answered from
  // it (time: the lookup and copy) and not (time: the lookup and the insert).
  std::atomic<uint64_t> cache_hit_count{0}, cache_hit_ns{0};
  std::atomic<uint64_t> cache_miss_count{0}, cache_miss_ns{0};
  struct BatchCounter {
    std::atomic<uint64_t> count{0}, compute_ns{0};
  };
  std::unique_ptr<BatchCounter[]> batches;  // index = batch size, 0..max_batch_size
  int64_t max_batch = 0;
};

class ModelStatistics {
 public:
  explicit ModelStatistics(const std::map<std::string, ModelConfig>& models);

  // Adds a model loaded while the server runs (no-op when it is known).
  void Track(const ModelConfig& model);

  // One finished request (any model) computed on `version`.
  void Record(const std::string& model, int64_t version, bool ok, uint64_t duration_ns, const StageTimes& stages,
              uint64_t rows);
  // One response cache lookup of a model version: a hit or a miss, and the
  // cache's time for it.
  void RecordCache(const std::string& model, int64_t version, bool hit, uint64_t ns);
  // One execution of a model version on a host: a batch of `rows` rows.
  void RecordExecution(const std::string& model, int64_t version, int64_t rows, uint64_t compute_ns);
  // Calls `visit` for each version of one model (only `version` when it is
  // not empty), or of every model when `model` is empty, under the lock
  // (visit must not call back into this object); false when the model, or
  // that version of it, is unknown.
  using CountersVisitor =
      std::function<void(const std::string& model, int64_t version, const ModelCounters& counters)>;
  bool Visit(const std::string& model, const std::string& version, const CountersVisitor& visit) const;

 private:
  struct Entry {
    bool ensemble = false;  // an ensemble's execution is its request
    int64_t max_batch = 1;
    // By version; a version gets its counters when first served or used.
    std::map<int64_t, std::unique_ptr<ModelCounters>> versions;
  };
  static Entry MakeEntry(const ModelConfig& model);
  static std::unique_ptr<ModelCounters> MakeCounters(int64_t max_batch);
  static void CountExecution(ModelCounters& counters, int64_t rows, uint64_t compute_ns);
  // The counters of (model, version), made on first use; nullptr for an
  // unknown model or a version < 1. Stable: counters are never removed.
  ModelCounters* CountersFor(const std::string& model, int64_t version, bool* ensemble) ABSL_LOCKS_EXCLUDED(mu_);
  mutable SharedMutex mu_;  // readers: every request; writers: a model or version first seen
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace es
