#include "server/core/trace_metrics.h"

#include "server/metrics/metrics_families.h"

namespace es {

std::vector<prometheus::MetricFamily> TraceMetrics::Collect() const {
  using prometheus::MetricType;
  auto written = Family("ensemble_traces_written_total", "Request traces written to the trace file, or exported to the OpenTelemetry collector.",
                        MetricType::Counter);
  AddCounter(&written, {}, static_cast<double>(tracer_->written()));
  auto dropped = Family("ensemble_traces_dropped_total",
                        "Request traces dropped: the writer's bounded queue was full, or the trace file could not be "
                        "written, or the collector did not take the export.",
                        MetricType::Counter);
  AddCounter(&dropped, {}, static_cast<double>(tracer_->dropped()));
  std::vector<prometheus::MetricFamily> out;
  out.push_back(std::move(written));
  out.push_back(std::move(dropped));
  return out;
}

}  // namespace es
