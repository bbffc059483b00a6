// ExperimentMetrics: every experiment's figures for /metrics, read at each
// scrape (server/experiment/experiments.h), labelled model and candidate:
//   ensemble_experiment_shadowed_total, _skipped_total, _canaried_total
//       requests run on the candidate beside the model (shadow), sampled
//       but not run (shadows in flight at their bound, or inputs in shared
//       memory), answered by the candidate (canary)
//   ensemble_experiment_decisions_total{decision="promote"|"abort"}
//   ensemble_experiment_state{state}            1 for the state it is in
//   ensemble_experiment_agreement               top-1 agreement over the window
//   ensemble_experiment_mean_kl                 KL(model || candidate) per row, window
//   ensemble_experiment_mean_abs_diff           per row, window
//   ensemble_experiment_entropy{side}           per row, window
//   ensemble_experiment_error_rate{side}        window
//   ensemble_experiment_latency_p99_seconds{side}  window
//
// Thread safety: Collect() runs on the exposer's threads; Experiments is
// thread-safe and outlives the endpoint.
#pragma once

#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "server/experiment/experiments.h"

namespace es {

class ExperimentMetrics final : public prometheus::Collectable {
 public:
  explicit ExperimentMetrics(Experiments* experiments) : experiments_(experiments) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Experiments* experiments_;
};

}  // namespace es
