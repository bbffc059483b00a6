#include "server/core/model_statistics.h"

#include <chrono>
#include <limits>

#include "common/checked_math.h"

namespace es {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// counter += value, stopping at UINT64_MAX instead of wrapping. For the sums
// of figures that come from outside the router's own arithmetic (a host's
// compute_ns is whatever the host wrote; durations and row counts are added
// up over the server's lifetime): a wrapped sum would report a tiny total.
// Counters that only ever add 1 cannot reach 2^64 and keep fetch_add.
void SaturatingAdd(std::atomic<uint64_t>& counter, uint64_t value) {
  uint64_t old = counter.load(kRelaxed);
  uint64_t next = 0;
  do {
    next = CheckedAdd(old, value).value_or(std::numeric_limits<uint64_t>::max());
  } while (!counter.compare_exchange_weak(old, next, kRelaxed));
}

}  // namespace

std::unique_ptr<ModelCounters> ModelStatistics::MakeCounters(int64_t max_batch) {
  auto counters = std::make_unique<ModelCounters>();
  counters->max_batch = max_batch;
  counters->batches = std::make_unique<ModelCounters::BatchCounter[]>(static_cast<size_t>(max_batch) + 1);
  return counters;
}

ModelStatistics::Entry ModelStatistics::MakeEntry(const ModelConfig& model) {
  Entry entry;
  entry.ensemble = model.is_ensemble();
  entry.max_batch = std::max<int64_t>(1, model.max_batch_size);
  for (int64_t v : model.ServedVersions()) entry.versions[v] = MakeCounters(entry.max_batch);
  return entry;
}

ModelStatistics::ModelStatistics(const std::map<std::string, ModelConfig>& models) {
  for (const auto& [name, model] : models) entries_.emplace(name, MakeEntry(model));
}

void ModelStatistics::Track(const ModelConfig& model) {
  WriterLock lock(&mu_);
  if (entries_.count(model.name) == 0) entries_.emplace(model.name, MakeEntry(model));
}

ModelCounters* ModelStatistics::CountersFor(const std::string& model, int64_t version, bool* ensemble) {
  if (version < 1) return nullptr;
  {
    ReaderLock lock(&mu_);
    auto it = entries_.find(model);
    if (it == entries_.end()) return nullptr;
    *ensemble = it->second.ensemble;
    auto v = it->second.versions.find(version);
    if (v != it->second.versions.end()) return v->second.get();
  }
  WriterLock lock(&mu_);  // a version loaded while serving: its first figures
  auto it = entries_.find(model);
  if (it == entries_.end()) return nullptr;
  std::unique_ptr<ModelCounters>& counters = it->second.versions[version];
  if (counters == nullptr) counters = MakeCounters(it->second.max_batch);
  return counters.get();
}

void ModelStatistics::Record(const std::string& model, int64_t version, bool ok, uint64_t duration_ns,
                             const StageTimes& stages, uint64_t rows) {
  bool ensemble = false;
  ModelCounters* counters = CountersFor(model, version, &ensemble);
  if (counters == nullptr) return;
  ModelCounters& c = *counters;
  if (ok) {
    c.success_count.fetch_add(1, kRelaxed);
    SaturatingAdd(c.success_ns, duration_ns);
    SaturatingAdd(c.queue_ns, stages.queue_ns);
    SaturatingAdd(c.inference_count, rows);
    if (ensemble) CountExecution(c, static_cast<int64_t>(rows), stages.compute_ns);
  } else {
    c.fail_count.fetch_add(1, kRelaxed);
    SaturatingAdd(c.fail_ns, duration_ns);
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  c.last_inference_ms.store(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(now).count()),
                            kRelaxed);
}

void ModelStatistics::RecordCache(const std::string& model, int64_t version, bool hit, uint64_t ns) {
  bool ensemble = false;
  ModelCounters* counters = CountersFor(model, version, &ensemble);
  if (counters == nullptr) return;
  (hit ? counters->cache_hit_count : counters->cache_miss_count).fetch_add(1, kRelaxed);
  SaturatingAdd(hit ? counters->cache_hit_ns : counters->cache_miss_ns, ns);
}

void ModelStatistics::RecordExecution(const std::string& model, int64_t version, int64_t rows, uint64_t compute_ns) {
  bool ensemble = false;
  ModelCounters* counters = CountersFor(model, version, &ensemble);
  if (counters != nullptr) CountExecution(*counters, rows, compute_ns);
}

void ModelStatistics::CountExecution(ModelCounters& c, int64_t rows, uint64_t compute_ns) {
  c.execution_count.fetch_add(1, kRelaxed);
  SaturatingAdd(c.compute_ns, compute_ns);
  if (rows >= 1 && rows <= c.max_batch) {
    c.batches[rows].count.fetch_add(1, kRelaxed);
    SaturatingAdd(c.batches[rows].compute_ns, compute_ns);
  }
}

bool ModelStatistics::Visit(const std::string& model, const std::string& version,
                            const CountersVisitor& visit) const {
  ReaderLock lock(&mu_);
  if (model.empty()) {
    for (const auto& [name, entry] : entries_) {
      for (const auto& [v, counters] : entry.versions) visit(name, v, *counters);
    }
    return true;
  }
  auto it = entries_.find(model);
  if (it == entries_.end()) return false;
  bool found = false;
  for (const auto& [v, counters] : it->second.versions) {
    if (!version.empty() && std::to_string(v) != version) continue;
    visit(it->first, v, *counters);
    found = true;
  }
  return found || version.empty();
}

}  // namespace es
