#include "server/model_statistics.h"

#include <chrono>

namespace es {

ModelStatistics::ModelStatistics(const std::map<std::string, std::string>& model_versions) {
  for (const auto& [name, version] : model_versions) {
    entries_.emplace(name, Entry{version, std::make_unique<ModelCounters>()});
  }
}

void ModelStatistics::Record(const std::string& model, bool ok, uint64_t duration_ns, uint64_t compute_ns,
                             uint64_t rows) {
  auto it = entries_.find(model);
  if (it == entries_.end()) return;
  ModelCounters& c = *it->second.counters;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  if (ok) {
    c.success_count.fetch_add(1, kRelaxed);
    c.success_ns.fetch_add(duration_ns, kRelaxed);
    c.compute_ns.fetch_add(compute_ns, kRelaxed);
    c.inference_count.fetch_add(rows, kRelaxed);
    c.execution_count.fetch_add(1, kRelaxed);
  } else {
    c.fail_count.fetch_add(1, kRelaxed);
    c.fail_ns.fetch_add(duration_ns, kRelaxed);
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  c.last_inference_ms.store(std::chrono::duration_cast<std::chrono::milliseconds>(now).count(), kRelaxed);
}

bool ModelStatistics::Fill(const std::string& model, inference::ModelStatisticsResponse* response) const {
  if (model.empty()) {
    for (const auto& [name, entry] : entries_) FillOne(name, entry, response);
    return true;
  }
  auto it = entries_.find(model);
  if (it == entries_.end()) return false;
  FillOne(it->first, it->second, response);
  return true;
}

void ModelStatistics::FillOne(const std::string& name, const Entry& entry,
                              inference::ModelStatisticsResponse* response) const {
  const ModelCounters& c = *entry.counters;
  auto* s = response->add_model_stats();
  s->set_name(name);
  s->set_version(entry.version);
  s->set_last_inference(c.last_inference_ms.load());
  s->set_inference_count(c.inference_count.load());
  s->set_execution_count(c.execution_count.load());
  auto* stats = s->mutable_inference_stats();
  stats->mutable_success()->set_count(c.success_count.load());
  stats->mutable_success()->set_ns(c.success_ns.load());
  stats->mutable_fail()->set_count(c.fail_count.load());
  stats->mutable_fail()->set_ns(c.fail_ns.load());
  // compute_infer is the time the hosts spent in the model's forward; the
  // rest of `success` is validation, copies, IPC and (for ensembles) combine.
  stats->mutable_compute_infer()->set_count(c.execution_count.load());
  stats->mutable_compute_infer()->set_ns(c.compute_ns.load());
}

}  // namespace es
