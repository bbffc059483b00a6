#include "server/experiment/experiment_metrics.h"

#include <cassert>

#include "server/metrics/metrics_families.h"

namespace es {

std::vector<prometheus::MetricFamily> ExperimentMetrics::Collect() const {
  using prometheus::MetricType;
  const std::vector<Experiments::Counters> all = experiments_->Snapshot();
  std::vector<prometheus::MetricFamily> out;
  if (all.empty()) return out;
  // The families are filled through references into `out`: room for every
  // one first, so no push_back moves them.
  constexpr size_t kFamilies = 11;
  out.reserve(kFamilies);
  auto family = [&out](const char* name, const char* help, MetricType type) -> prometheus::MetricFamily& {
    out.push_back(Family(name, help, type));
    return out.back();
  };
  auto& shadowed = family("ensemble_experiment_shadowed_total", "Requests also run on the experiment's candidate.",
                          MetricType::Counter);
  auto& skipped = family("ensemble_experiment_skipped_total",
                         "Requests sampled for a shadow run but not shadowed (bound reached, or shared-memory inputs).",
                         MetricType::Counter);
  auto& canaried = family("ensemble_experiment_canaried_total", "Requests answered by the experiment's candidate.",
                          MetricType::Counter);
  auto& decisions = family("ensemble_experiment_decisions_total", "Gate decisions: promote or abort.",
                           MetricType::Counter);
  auto& state = family("ensemble_experiment_state", "1 for the state the experiment is in.", MetricType::Gauge);
  auto& agreement = family("ensemble_experiment_agreement", "Top-1 agreement of model and candidate over the window.",
                           MetricType::Gauge);
  auto& kl = family("ensemble_experiment_mean_kl", "Mean KL divergence model||candidate per row over the window.",
                    MetricType::Gauge);
  auto& diff = family("ensemble_experiment_mean_abs_diff",
                      "Mean absolute difference of the probability vectors per row over the window.", MetricType::Gauge);
  auto& entropy = family("ensemble_experiment_entropy", "Mean entropy of each side's answers over the window (nats).",
                         MetricType::Gauge);
  auto& errors = family("ensemble_experiment_error_rate", "Each side's error rate over the window.", MetricType::Gauge);
  auto& p99 = family("ensemble_experiment_latency_p99_seconds", "Each side's p99 latency over the window.",
                     MetricType::Gauge);
  assert(out.size() == kFamilies);
  for (const Experiments::Counters& c : all) {
    const Labels labels = {{"model", c.model}, {"candidate", c.candidate}};
    auto with = [&labels](const char* key, const char* value) {
      Labels more = labels;
      more.emplace_back(key, value);
      return more;
    };
    AddCounter(&shadowed, labels, static_cast<double>(c.shadowed));
    AddCounter(&skipped, labels, static_cast<double>(c.skipped));
    AddCounter(&canaried, labels, static_cast<double>(c.canaried));
    AddCounter(&decisions, with("decision", "promote"), static_cast<double>(c.promotions));
    AddCounter(&decisions, with("decision", "abort"), static_cast<double>(c.aborts));
    for (const char* s : {"off", "running", "promoted", "aborted"}) AddGauge(&state, with("state", s), c.state == s);
    const ExperimentStats::Figures& w = c.window;
    AddGauge(&agreement, labels, w.agreement);
    AddGauge(&kl, labels, w.mean_kl);
    AddGauge(&diff, labels, w.mean_abs_diff);
    AddGauge(&entropy, with("side", "model"), w.entropy_serving);
    AddGauge(&entropy, with("side", "candidate"), w.entropy_candidate);
    AddGauge(&errors, with("side", "model"), w.serving.error_rate);
    AddGauge(&errors, with("side", "candidate"), w.candidate.error_rate);
    AddGauge(&p99, with("side", "model"), w.serving.p99_ms / 1000.0);
    AddGauge(&p99, with("side", "candidate"), w.candidate.p99_ms / 1000.0);
  }
  return out;
}

}  // namespace es
