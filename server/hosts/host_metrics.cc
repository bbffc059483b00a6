#include "server/hosts/host_metrics.h"

#include "server/metrics/metrics_families.h"

namespace es {

std::vector<prometheus::MetricFamily> HostMetrics::Collect() const {
  using prometheus::MetricType;
  auto up = Family("ensemble_host_up", "1 while the model host is ready to serve, 0 while it is down or starting.",
                   MetricType::Gauge);
  auto restarts =
      Family("ensemble_host_restarts_total", "Times the model host died or hung and was restarted.", MetricType::Counter);
  auto heartbeat = Family("ensemble_host_heartbeat_age_seconds", "Seconds since the model host's heartbeat last moved.",
                          MetricType::Gauge);
  auto arena_used = Family("ensemble_host_arena_used_bytes", "Bytes of the host channel's tensor arena in use.",
                           MetricType::Gauge);
  auto arena_capacity =
      Family("ensemble_host_arena_capacity_bytes", "Size of the host channel's tensor arena.", MetricType::Gauge);
  auto resident = Family("ensemble_host_resident_memory_bytes", "Resident memory of the model host process.",
                         MetricType::Gauge);
  auto cpu = Family("ensemble_host_cpu_seconds_total",
                    "User and system CPU time of the model host processes, summed over restarts.", MetricType::Counter);
  auto device_allocated = Family("ensemble_host_device_memory_allocated_bytes",
                                 "CUDA memory in live tensors (LibTorch caching allocator); CUDA hosts only.",
                                 MetricType::Gauge);
  auto device_reserved = Family("ensemble_host_device_memory_reserved_bytes",
                                "CUDA memory held by LibTorch's caching allocator; CUDA hosts only.", MetricType::Gauge);

  auto violations = Family("ensemble_host_protocol_violations_total",
                           "Invalid completions from the model host (each answered INTERNAL; the host is restarted).",
                           MetricType::Counter);
  auto hung = Family("ensemble_host_hung_forwards_total",
                     "Times a request computed past its model's max_compute_ms and the host was killed.",
                     MetricType::Counter);

  for (const HostSupervisor* host : hosts_) {
    const HostFigures f = host->figures();
    const Labels labels = {{"host", host->config().name}};
    const Labels with_device = {{"host", host->config().name}, {"device", host->config().device}};
    AddGauge(&up, with_device, f.up ? 1 : 0);
    AddCounter(&restarts, labels, f.restarts);
    AddGauge(&heartbeat, labels, f.heartbeat_age_seconds);
    AddGauge(&arena_used, labels, static_cast<double>(f.arena_used_bytes));
    AddGauge(&arena_capacity, labels, static_cast<double>(f.arena_capacity_bytes));
    AddGauge(&resident, labels, static_cast<double>(f.resident_bytes));
    AddCounter(&cpu, labels, f.cpu_seconds_total);
    AddCounter(&violations, labels, static_cast<double>(f.protocol_violations));
    AddCounter(&hung, labels, static_cast<double>(f.hung_forwards));
    if (host->config().device.rfind("cuda", 0) == 0) {
      AddGauge(&device_allocated, with_device, static_cast<double>(f.device_allocated_bytes));
      AddGauge(&device_reserved, with_device, static_cast<double>(f.device_reserved_bytes));
    }
  }
  std::vector<prometheus::MetricFamily> out;
  for (auto* f : {&up, &restarts, &heartbeat, &arena_used, &arena_capacity, &resident, &cpu, &violations, &hung,
                  &device_allocated, &device_reserved}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }
  return out;
}

}  // namespace es
