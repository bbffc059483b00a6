// RepositoryMetrics: the model repository's figures for /metrics, read from
// the ModelRepository at each scrape:
//   ensemble_model_load_failures_total          loads that failed (broken
//                                               model.pt, bad config.yaml),
//                                               each distinct error once
//   ensemble_model_version_state{model,version,state}  1 per model version
//                                               in that state (READY,
//                                               LOADING, UNLOADING, UNAVAILABLE)
//
// Thread safety: Collect() runs on the exposer's threads; the repository's
// queries are thread-safe and the repository outlives the endpoint.
#pragma once

#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "server/repository/model_repository.h"

namespace es {

class RepositoryMetrics final : public prometheus::Collectable {
 public:
  explicit RepositoryMetrics(const ModelRepository* repository) : repository_(repository) {}

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const ModelRepository* repository_;
};

}  // namespace es
