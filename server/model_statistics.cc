#include "server/model_statistics.h"

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
  std::unique_lock lock(mu_);
  if (entries_.count(model.name) == 0) entries_.emplace(model.name, MakeEntry(model));
}

ModelCounters* ModelStatistics::CountersFor(const std::string& model, int64_t version, bool* ensemble) {
  if (version < 1) return nullptr;
  {
    std::shared_lock lock(mu_);
    auto it = entries_.find(model);
    if (it == entries_.end()) return nullptr;
    *ensemble = it->second.ensemble;
    auto v = it->second.versions.find(version);
    if (v != it->second.versions.end()) return v->second.get();
  }
  std::unique_lock lock(mu_);  // a version loaded while serving: its first figures
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

bool ModelStatistics::Fill(const std::string& model, const std::string& version,
                           inference::ModelStatisticsResponse* response) const {
  std::shared_lock lock(mu_);
  if (model.empty()) {
    for (const auto& [name, entry] : entries_) {
      for (const auto& [v, counters] : entry.versions) FillOne(name, v, *counters, response);
    }
    return true;
  }
  auto it = entries_.find(model);
  if (it == entries_.end()) return false;
  bool found = false;
  for (const auto& [v, counters] : it->second.versions) {
    if (!version.empty() && std::to_string(v) != version) continue;
    FillOne(it->first, v, *counters, response);
    found = true;
  }
  return found || version.empty();
}

void ModelStatistics::FillOne(const std::string& name, int64_t version, const ModelCounters& c,
                              inference::ModelStatisticsResponse* response) const {
  auto* s = response->add_model_stats();
  s->set_name(name);
  s->set_version(std::to_string(version));
  s->set_last_inference(c.last_inference_ms.load());
  s->set_inference_count(c.inference_count.load());
  s->set_execution_count(c.execution_count.load());
  auto* stats = s->mutable_inference_stats();
  stats->mutable_success()->set_count(c.success_count.load());
  stats->mutable_success()->set_ns(c.success_ns.load());
  stats->mutable_fail()->set_count(c.fail_count.load());
  stats->mutable_fail()->set_ns(c.fail_ns.load());
  stats->mutable_queue()->set_count(c.success_count.load());
  stats->mutable_queue()->set_ns(c.queue_ns.load());
  // compute_infer: the hosts' forward time, per execution; the rest of
  // `success` is validation, copies, IPC, queueing and (ensembles) combine.
  stats->mutable_compute_infer()->set_count(c.execution_count.load());
  stats->mutable_compute_infer()->set_ns(c.compute_ns.load());
  for (int64_t b = 1; b <= c.max_batch; ++b) {
    const uint64_t n = c.batches[b].count.load();
    if (n == 0) continue;
    auto* batch = s->add_batch_stats();
    batch->set_batch_size(static_cast<uint64_t>(b));
    batch->mutable_compute_infer()->set_count(n);
    batch->mutable_compute_infer()->set_ns(c.batches[b].compute_ns.load());
  }
}

}  // namespace es
