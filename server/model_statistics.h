// ModelStatistics: per-model counters behind the KServe v2 ModelStatistics
// RPC (Triton's fields: success/fail counts with cumulative durations, the
// compute time on the hosts, rows and executions, the last inference time).
//
// Thread safety: Record*() are lock-free (relaxed atomics; the counters are
// independent, a reader may see one a moment ahead of another).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "proto/grpc_service.pb.h"

namespace es {

struct ModelCounters {
  std::atomic<uint64_t> success_count{0}, success_ns{0};
  std::atomic<uint64_t> fail_count{0}, fail_ns{0};
  std::atomic<uint64_t> compute_ns{0};       // on the hosts
  std::atomic<uint64_t> inference_count{0};  // rows
  std::atomic<uint64_t> execution_count{0};  // calls
  std::atomic<uint64_t> last_inference_ms{0};
};

class ModelStatistics {
 public:
  // One entry per model name, created up front so the map is read-only later.
  explicit ModelStatistics(const std::map<std::string, std::string>& model_versions);

  void Record(const std::string& model, bool ok, uint64_t duration_ns, uint64_t compute_ns, uint64_t rows);
  // Fills the response for one model, or every model when `model` is empty;
  // false when the model is unknown.
  bool Fill(const std::string& model, inference::ModelStatisticsResponse* response) const;

 private:
  struct Entry {
    std::string version;
    std::unique_ptr<ModelCounters> counters;
  };
  void FillOne(const std::string& name, const Entry& entry, inference::ModelStatisticsResponse* response) const;
  std::map<std::string, Entry> entries_;
};

}  // namespace es
