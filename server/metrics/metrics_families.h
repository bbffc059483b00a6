// Small builders for the prometheus::MetricFamily values that the router's
// Collectables (RequestMetrics, HostMetrics) return from Collect().
//
// Thread safety: pure functions on values.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

namespace es {

using Labels = std::vector<std::pair<std::string, std::string>>;

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type);
// Appends one series with `labels` and returns it for the caller to fill.
prometheus::ClientMetric* AddMetric(prometheus::MetricFamily* family, const Labels& labels);
void AddCounter(prometheus::MetricFamily* family, const Labels& labels, double value);
void AddGauge(prometheus::MetricFamily* family, const Labels& labels, double value);

}  // namespace es
