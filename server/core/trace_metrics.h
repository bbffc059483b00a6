// TraceMetrics: the request tracer's figures for /metrics, read at each
// scrape (server/core/request_trace.h):
//   ensemble_traces_written_total   traces written to the trace file, or exported (OTLP)
//   ensemble_traces_dropped_total   traces the bounded queue could not take, or not written or exported
//                                   or the file could not be written
//
// Thread safety: Collect() runs on the exposer's threads; the tracer is
// thread-safe and outlives the endpoint.
#pragma once

#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "server/core/request_trace.h"

namespace es {

class TraceMetrics final : public prometheus::Collectable {
 public:
  explicit TraceMetrics(const Tracer* tracer) : tracer_(tracer) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Tracer* tracer_;
};

}  // namespace es
