#include "server/repository/repository_metrics.h"

#include "server/metrics/metrics_families.h"

namespace es {

std::vector<prometheus::MetricFamily> RepositoryMetrics::Collect() const {
  using prometheus::MetricType;
  auto failures = Family("ensemble_model_load_failures_total",
                         "Model loads that failed (the versions served before kept serving).", MetricType::Counter);
  AddCounter(&failures, {}, static_cast<double>(repository_->load_failures()));
  auto states = Family("ensemble_model_version_state",
                       "1 for each model version in the state named (READY, LOADING, UNLOADING, UNAVAILABLE).",
                       MetricType::Gauge);
  for (const ModelRepository::IndexEntry& e : repository_->Index()) {
    AddGauge(&states, {{"model", e.name}, {"version", e.version}, {"state", e.state}}, 1);
  }
  std::vector<prometheus::MetricFamily> out;
  out.push_back(std::move(failures));
  if (!states.metric.empty()) out.push_back(std::move(states));
  return out;
}

}  // namespace es
