#include "server/metrics/metrics_families.h"

namespace es {

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

prometheus::ClientMetric* AddMetric(prometheus::MetricFamily* family, const Labels& labels) {
  prometheus::ClientMetric& metric = family->metric.emplace_back();
  metric.label.reserve(labels.size());
  for (const auto& [name, value] : labels) metric.label.push_back({name, value});
  return &metric;
}

void AddCounter(prometheus::MetricFamily* family, const Labels& labels, double value) {
  AddMetric(family, labels)->counter.value = value;
}

void AddGauge(prometheus::MetricFamily* family, const Labels& labels, double value) {
  AddMetric(family, labels)->gauge.value = value;
}

}  // namespace es
